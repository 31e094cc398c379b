// stepcast core units: strong types for bytes, durations, FLOPs and their rates.
//
// Contract: every quantity is stored as a double in its SI base unit (bytes, seconds,
// floating-point operations, bytes/s, FLOP/s). Only operations with a physical meaning
// compile: Bytes / Bandwidth -> Duration, Flops / FlopRate -> Duration, a quantity divided by
// a quantity of the same kind -> plain ratio. Decimal prefixes (kB, MB, GB, TB) are powers of
// ten; binary prefixes (KiB, MiB, GiB, TiB) are powers of two; the parser never mixes them.
#pragma once

#include <compare>
#include <string>
#include <string_view>

namespace stepcast::core {

// A double tagged with its dimension. Same-tag arithmetic and scalar scaling only.
template <typename Tag>
class Quantity {
 public:
  constexpr Quantity() = default;
  constexpr explicit Quantity(double v) : v_(v) {}
  [[nodiscard]] constexpr double value() const { return v_; }

  constexpr Quantity operator+(Quantity o) const { return Quantity(v_ + o.v_); }
  constexpr Quantity operator-(Quantity o) const { return Quantity(v_ - o.v_); }
  constexpr Quantity& operator+=(Quantity o) { v_ += o.v_; return *this; }
  constexpr Quantity& operator-=(Quantity o) { v_ -= o.v_; return *this; }
  constexpr Quantity operator*(double k) const { return Quantity(v_ * k); }
  constexpr Quantity operator/(double k) const { return Quantity(v_ / k); }
  constexpr double operator/(Quantity o) const { return v_ / o.v_; }
  constexpr auto operator<=>(const Quantity&) const = default;

 private:
  double v_ = 0.0;
};

template <typename Tag>
constexpr Quantity<Tag> operator*(double k, Quantity<Tag> q) { return q * k; }

struct BytesTag {};
struct DurationTag {};
struct FlopsTag {};
struct BandwidthTag {};
struct FlopRateTag {};

using Bytes = Quantity<BytesTag>;          // bytes
using Duration = Quantity<DurationTag>;    // seconds
using Flops = Quantity<FlopsTag>;          // floating-point operations
using Bandwidth = Quantity<BandwidthTag>;  // bytes per second
using FlopRate = Quantity<FlopRateTag>;    // FLOP per second

constexpr Duration operator/(Bytes b, Bandwidth bw) { return Duration(b.value() / bw.value()); }
constexpr Duration operator/(Flops f, FlopRate r) { return Duration(f.value() / r.value()); }
constexpr Bytes operator*(Bandwidth bw, Duration t) { return Bytes(bw.value() * t.value()); }
constexpr Flops operator*(FlopRate r, Duration t) { return Flops(r.value() * t.value()); }
constexpr FlopRate operator/(Flops f, Duration t) { return FlopRate(f.value() / t.value()); }

// Literal-style helpers (decimal and binary kept apart on purpose).
constexpr Bytes bytes(double v) { return Bytes(v); }
constexpr Bytes kib(double v) { return Bytes(v * 1024.0); }
constexpr Bytes mib(double v) { return Bytes(v * 1024.0 * 1024.0); }
constexpr Bytes gib(double v) { return Bytes(v * 1024.0 * 1024.0 * 1024.0); }
constexpr Bytes gb(double v) { return Bytes(v * 1e9); }
constexpr Bytes mb(double v) { return Bytes(v * 1e6); }
constexpr Duration seconds(double v) { return Duration(v); }
constexpr Duration millis(double v) { return Duration(v * 1e-3); }
constexpr Duration micros(double v) { return Duration(v * 1e-6); }
constexpr Bandwidth gb_per_s(double v) { return Bandwidth(v * 1e9); }
constexpr FlopRate tflops(double v) { return FlopRate(v * 1e12); }

// Parsers for user-facing strings. A bare number is taken in the base unit.
// Each throws std::invalid_argument with a message listing the accepted suffixes.
Bytes parse_bytes(std::string_view text);          // "80GiB", "1.5 GB", "512MiB", "4096"
Duration parse_duration(std::string_view text);    // "2us", "1.5 ms", "3s", "10ns"
Bandwidth parse_bandwidth(std::string_view text);  // "400GB/s", "50 GiB/s", "400Gb/s" (bits)
FlopRate parse_flop_rate(std::string_view text);   // "989TFLOPS", "312 TFLOP/s"

// Human-readable renderings used by tables (not by JSON, which carries base units).
std::string format_bytes(Bytes b);        // binary units: "79.2 GiB"
std::string format_duration(Duration d);  // "412.3 ms"
// One number through a printf format ("%.1f", "%+.1f%%", "%.3g"): the reports' cell formatter.
std::string fmt(const char* printf_format, double x);

}  // namespace stepcast::core
