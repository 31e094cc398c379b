// Unit parsing: decimal and binary prefixes never mix, bits vs bytes, durations, and bad input.
#include "sim/core/units.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace stepcast::core {
namespace {

// Decimal prefixes are powers of ten (GB = 1e9), binary prefixes powers of two (GiB = 2^30).
TEST(Units, DecimalAndBinaryBytesAreDistinct) {
  EXPECT_DOUBLE_EQ(parse_bytes("1GB").value(), 1e9);
  EXPECT_DOUBLE_EQ(parse_bytes("1GiB").value(), 1073741824.0);
  EXPECT_DOUBLE_EQ(parse_bytes("80GiB").value(), 80.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(parse_bytes("1.5 GB").value(), 1.5e9);
  EXPECT_DOUBLE_EQ(parse_bytes("512MiB").value(), 512.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(parse_bytes("1MB").value(), 1e6);
  EXPECT_DOUBLE_EQ(parse_bytes("1TiB").value(), 1099511627776.0);
  EXPECT_NE(parse_bytes("1GB").value(), parse_bytes("1GiB").value());
}

// A bare number is taken in the base unit (bytes).
TEST(Units, BareNumberIsBaseUnit) {
  EXPECT_DOUBLE_EQ(parse_bytes("4096").value(), 4096.0);
  EXPECT_DOUBLE_EQ(parse_duration("3").value(), 3.0);
}

// Network line rates are in bits: 400 Gb/s = 50 GB/s; upper-case B means bytes.
TEST(Units, BitsPerSecondAreDividedByEight) {
  EXPECT_DOUBLE_EQ(parse_bandwidth("400Gb/s").value(), 50e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("400GB/s").value(), 400e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("50 GiB/s").value(), 50.0 * 1024 * 1024 * 1024);
}

// Durations: "2us" is two microseconds.
TEST(Units, Durations) {
  EXPECT_DOUBLE_EQ(parse_duration("2us").value(), 2e-6);
  EXPECT_DOUBLE_EQ(parse_duration("1.5 ms").value(), 1.5e-3);
  EXPECT_DOUBLE_EQ(parse_duration("3s").value(), 3.0);
  EXPECT_DOUBLE_EQ(parse_duration("10ns").value(), 10e-9);
}

// FLOP rates: datasheet peaks are written in TFLOPS.
TEST(Units, FlopRates) {
  EXPECT_DOUBLE_EQ(parse_flop_rate("989TFLOPS").value(), 989e12);
  EXPECT_DOUBLE_EQ(parse_flop_rate("312 TFLOP/s").value(), 312e12);
}

// An unknown suffix is rejected with std::invalid_argument listing the accepted suffixes.
TEST(Units, BadSuffixThrows) {
  EXPECT_THROW(parse_bytes("80 parsecs"), std::invalid_argument);
  EXPECT_THROW(parse_bytes("80Gb"), std::invalid_argument);  // bits are not a byte size
  EXPECT_THROW(parse_duration("2 fortnights"), std::invalid_argument);
  EXPECT_THROW(parse_bandwidth("400 GB"), std::invalid_argument);  // missing "/s"
  EXPECT_THROW(parse_flop_rate("989 TOPS"), std::invalid_argument);
  EXPECT_THROW(parse_bytes("GiB"), std::invalid_argument);  // no number at all
  try {
    parse_bytes("80 parsecs");
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("parsecs"), std::string::npos) << msg;
    EXPECT_NE(msg.find("GiB"), std::string::npos) << "message should list accepted suffixes: " << msg;
  }
}

// Strong types: bytes / bandwidth is a duration, flops / rate is a duration.
TEST(Units, DimensionalArithmetic) {
  const Duration t = gb(100) / gb_per_s(50);
  EXPECT_DOUBLE_EQ(t.value(), 2.0);
  const Duration c = Flops(989e12) / tflops(989);
  EXPECT_DOUBLE_EQ(c.value(), 1.0);
  EXPECT_DOUBLE_EQ(gib(1) / mib(1), 1024.0);
}

}  // namespace
}  // namespace stepcast::core
