#include "sim/core/units.hpp"

#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>

namespace stepcast::core {
namespace {

struct Suffix {
  std::string_view name;
  double factor;
};

// Splits "  12.5 GiB " into (12.5, "GiB"). Throws when no number leads the text.
std::pair<double, std::string> split_number(std::string_view text, std::string_view what) {
  std::string s(text);
  size_t pos = 0;
  while (pos < s.size() && std::isspace(static_cast<unsigned char>(s[pos]))) ++pos;
  size_t used = 0;
  double v = 0.0;
  try {
    v = std::stod(s.substr(pos), &used);
  } catch (const std::exception&) {
    throw std::invalid_argument("'" + s + "' is not a " + std::string(what) +
                                " (expected a number with an optional unit)");
  }
  if (!std::isfinite(v)) throw std::invalid_argument("'" + s + "' is not finite");
  std::string rest = s.substr(pos + used);
  size_t a = 0;
  while (a < rest.size() && std::isspace(static_cast<unsigned char>(rest[a]))) ++a;
  size_t b = rest.size();
  while (b > a && std::isspace(static_cast<unsigned char>(rest[b - 1]))) --b;
  return {v, rest.substr(a, b - a)};
}

template <size_t N>
double lookup(const std::string& unit, const std::array<Suffix, N>& table, std::string_view text,
              std::string_view what) {
  for (const auto& s : table) {
    if (unit == s.name) return s.factor;
  }
  std::string allowed;
  for (const auto& s : table) {
    if (!allowed.empty()) allowed += ", ";
    allowed += s.name.empty() ? "(none)" : std::string(s.name);
  }
  throw std::invalid_argument("unknown " + std::string(what) + " unit '" + unit + "' in '" +
                              std::string(text) + "'; allowed: " + allowed);
}

constexpr double kKi = 1024.0;

}  // namespace

Bytes parse_bytes(std::string_view text) {
  static constexpr std::array<Suffix, 12> kTable{{
      {"", 1.0},
      {"B", 1.0},
      {"kB", 1e3},
      {"KB", 1e3},
      {"MB", 1e6},
      {"GB", 1e9},
      {"TB", 1e12},
      {"KiB", kKi},
      {"MiB", kKi * kKi},
      {"GiB", kKi * kKi * kKi},
      {"TiB", kKi * kKi * kKi * kKi},
      {"bytes", 1.0},
  }};
  auto [v, unit] = split_number(text, "byte size");
  return Bytes(v * lookup(unit, kTable, text, "byte"));
}

Duration parse_duration(std::string_view text) {
  static constexpr std::array<Suffix, 10> kTable{{
      {"", 1.0},
      {"s", 1.0},
      {"ms", 1e-3},
      {"us", 1e-6},
      {"µs", 1e-6},
      {"ns", 1e-9},
      {"ps", 1e-12},
      {"min", 60.0},
      {"h", 3600.0},
      {"d", 86400.0},
  }};
  auto [v, unit] = split_number(text, "duration");
  return Duration(v * lookup(unit, kTable, text, "time"));
}

Bandwidth parse_bandwidth(std::string_view text) {
  // Upper-case B is bytes, lower-case b is bits ("400Gb/s" NIC line rate = 50 GB/s).
  static constexpr std::array<Suffix, 12> kTable{{
      {"", 1.0},
      {"B/s", 1.0},
      {"kB/s", 1e3},
      {"MB/s", 1e6},
      {"GB/s", 1e9},
      {"TB/s", 1e12},
      {"MiB/s", kKi * kKi},
      {"GiB/s", kKi * kKi * kKi},
      {"TiB/s", kKi * kKi * kKi * kKi},
      {"Mb/s", 1e6 / 8.0},
      {"Gb/s", 1e9 / 8.0},
      {"Tb/s", 1e12 / 8.0},
  }};
  auto [v, unit] = split_number(text, "bandwidth");
  return Bandwidth(v * lookup(unit, kTable, text, "bandwidth"));
}

FlopRate parse_flop_rate(std::string_view text) {
  static constexpr std::array<Suffix, 9> kTable{{
      {"", 1.0},
      {"FLOPS", 1.0},
      {"FLOP/s", 1.0},
      {"GFLOPS", 1e9},
      {"GFLOP/s", 1e9},
      {"TFLOPS", 1e12},
      {"TFLOP/s", 1e12},
      {"PFLOPS", 1e15},
      {"PFLOP/s", 1e15},
  }};
  auto [v, unit] = split_number(text, "FLOP rate");
  return FlopRate(v * lookup(unit, kTable, text, "FLOP rate"));
}

std::string format_bytes(Bytes b) {
  const double v = b.value();
  char buf[64];
  const double av = std::fabs(v);
  if (av >= kKi * kKi * kKi) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", v / (kKi * kKi * kKi));
  } else if (av >= kKi * kKi) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", v / (kKi * kKi));
  } else if (av >= kKi) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", v / kKi);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f B", v);
  }
  return buf;
}

std::string format_duration(Duration d) {
  const double v = d.value();
  char buf[64];
  const double av = std::fabs(v);
  if (av >= 1.0) {
    std::snprintf(buf, sizeof buf, "%.3f s", v);
  } else if (av >= 1e-3) {
    std::snprintf(buf, sizeof buf, "%.2f ms", v * 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f us", v * 1e6);
  }
  return buf;
}

std::string fmt(const char* printf_format, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, printf_format, x);
  return buf;
}

}  // namespace stepcast::core
