#include "calibrate/cpu_suite.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "calibrate/cuda_plan.hpp"
#include "calibrate/profile.hpp"
#include "sim/core/units.hpp"

// Calibration reports (Markdown and self-contained HTML), shared by the CPU and CUDA suites.
namespace stepcast::calibrate {

using core::fmt;

namespace {

// One direction of the copy: the streaming rate a kernel that reads or writes once sees.
double streaming_bandwidth(const SuiteResult& r) { return r.copy_bandwidth / 2.0; }

}  // namespace

std::string suite_markdown(const SuiteResult& r) {
  std::ostringstream o;
  o << (r.backend == "cuda" ? "# GPU calibration\n\n" : "# CPU calibration\n\n");
  if (r.profile.contains("description")) o << r.profile["description"].get<std::string>() << "\n\n";
  if (r.profile.contains("sources")) {
    for (const auto& line : r.profile["sources"]) o << "- " << line.get<std::string>() << "\n";
    o << "\n";
  }
  o << "- GEMM fit: " << fmt("%.2f", r.gemm.rate / 1e9) << " GFLOP/s large-shape rate, half-dimension " << fmt("%.0f", r.gemm.half_dim)
    << ", per-call overhead " << fmt("%.2f", r.gemm.overhead_s * 1e6) << " us, rms error over the fitted shapes "
    << fmt("%.1f", 100.0 * r.gemm.rms_rel_error) << "%\n";
  o << "- memory copy: " << fmt("%.2f", r.copy_bandwidth / 1e9) << " GB/s (read + write)\n";
  if (r.optimizer_rate > 0) o << "- optimizer (Adam, fp32): " << fmt("%.1f", r.optimizer_rate / 1e6) << " M parameters/s\n";
  if (r.host.link > 0) {
    o << "- host (CPU offload): " << fmt("%.0f", r.host.memory_bytes / 1073741824.0) << " GiB, memory copy "
      << fmt("%.1f", r.host.memory_bandwidth / 1e9) << " GB/s (read + write, every process at once), Adam "
      << fmt("%.0f", r.host.optimizer_rate / 1e6) << " M parameters/s, GPU-host link " << fmt("%.1f", r.host.link / 1e9)
      << " GB/s per GPU (every GPU at once)\n";
  }
  o << "- processes: " << r.ranks << "\n\n";
  if (!r.gemm_dtypes.empty()) {
    o << "GEMMs per dtype (one half-dimension, " << fmt("%.0f", r.gemm.half_dim) << ", shared by all; the rate is the profile's peak for the dtype):\n\n"
      << "| dtype | fitted rate TFLOP/s | best measured TFLOP/s | shapes | rms error | ridge point FLOP/byte |\n|---|---:|---:|---:|---:|---:|\n";
    for (const auto& g : r.gemm_dtypes) {
      double best = 0;
      for (const auto& s : g.samples) best = std::max(best, 2.0 * s.m * s.n * s.k / s.seconds);
      o << "| " << g.dtype << " | " << fmt("%.1f", g.fit.rate / 1e12) << " | " << fmt("%.1f", best / 1e12) << " | " << g.samples.size() << " | "
        << fmt("%.1f", 100.0 * g.fit.rms_rel_error) << "% | " << fmt("%.0f", g.fit.rate / streaming_bandwidth(r)) << " |\n";
    }
    o << "\n";
  }
  if (!r.elementwise.empty()) {
    o << "Memory-bound kernels (bf16; efficiency.memory_bound = the median share of the copy bandwidth, "
      << fmt("%.3f", memory_bound_efficiency(r.elementwise, r.copy_bandwidth)) << "):\n\n"
      << "| kernel | time us | GB/s moved | share of copy bandwidth | FLOP/byte |\n|---|---:|---:|---:|---:|\n";
    for (const auto& k : r.elementwise) {
      o << "| " << k.name << " | " << fmt("%.1f", k.seconds * 1e6) << " | " << fmt("%.0f", k.bytes / k.seconds / 1e9) << " | "
        << fmt("%.0f%%", 100.0 * k.bytes / k.seconds / r.copy_bandwidth) << " | " << fmt("%.2f", k.flops / k.bytes) << " |\n";
    }
    o << "\n";
  }
  if (!r.attention.empty()) {
    o << "Causal attention, forward and backward (share of the fitted bf16 rate; the backward does 2.5 x the forward's FLOPs):\n\n"
      << "| kernel | batch x heads | seq | head dim | forward ms | forward TFLOP/s | share | backward ms | backward TFLOP/s | share |\n"
      << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for (const auto& a : r.attention) {
      const double f = a.forward_flops() / a.forward_s, b = 2.5 * a.forward_flops() / a.backward_s;
      o << "| " << a.kernel << " | " << a.bh << " | " << a.seq << " | " << a.head_dim << " | " << fmt("%.3f", a.forward_s * 1e3) << " | "
        << fmt("%.1f", f / 1e12) << " | " << fmt("%.0f%%", 100.0 * f / r.gemm.rate) << " | " << fmt("%.3f", a.backward_s * 1e3) << " | "
        << fmt("%.1f", b / 1e12) << " | " << fmt("%.0f%%", 100.0 * b / r.gemm.rate) << " |\n";
    }
    o << "\n";
  }
  if (!r.not_measured.empty()) {
    o << "Not measured:\n\n";
    for (const auto& n : r.not_measured) o << "- " << n << "\n";
    o << "\n";
  }
  if (!r.collectives.empty()) {
    o << "| collective | ranks | plateau busbw GB/s | alpha us | beta GB/s |\n|---|---:|---:|---:|---:|\n";
    for (const auto& c : r.collectives) {
      o << "| " << c.op << " | " << c.ranks << " | " << fmt("%.2f", c.plateau_busbw / 1e9) << " | " << fmt("%.1f", c.alpha_s * 1e6) << " | "
        << fmt("%.2f", c.beta_s_per_byte > 0 ? 1e-9 / c.beta_s_per_byte : 0.0) << " |\n";
    }
    o << "\n";
  }
  constexpr double kTolerance = 0.10;  // the held-out accuracy target the summary counts against
  int within = 0, drift = 0, noisy_misses = 0;
  o << "Held-out sizes (not fitted), measured against the simulator's cost model with the written profile. "
       "`pass spread` is how far the passes measuring that benchmark disagreed with each other, (max - min) / median. "
       "`within pass` holds the machine at one speed: a collective against the cost model's interpolation between its two fitted "
       "neighbours measured moments before and after it in the same pass, a GEMM's prediction against its time with each pass's "
       "speed change (how much slower than their medians the fitted shapes beside it ran) taken out; median over the passes. "
       "Changes of the shared machine's speed between passes, which the profile's per-size medians mix, cancel there; "
       "`passes within 10%` counts the passes whose error with the machine held at one speed was within 10%:\n\n"
    << "| benchmark | measured ms | predicted ms | error | within pass | passes within 10% | pass spread |\n|---|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& h : r.held_out) {
    const bool ok = std::abs(h.error()) <= kTolerance;
    within += ok;
    drift += !ok && h.agrees(kTolerance);
    noisy_misses += !h.agrees(kTolerance) && h.unresolved(kTolerance);
    const auto w = h.within_pass();
    o << "| " << h.what << " | " << fmt("%.4f", h.measured_s * 1e3) << " | " << fmt("%.4f", h.predicted_s * 1e3) << " | "
      << fmt("%+.1f%%", 100.0 * h.error()) << " | " << (w ? fmt("%+.1f%%", 100.0 * *w) : std::string("-")) << " | "
      << (w ? std::to_string(h.passes_within(kTolerance)) + " of " + std::to_string(h.within_pass_errors.size()) : std::string("-"))
      << " | " << fmt("%.1f%%", 100.0 * h.spread) << " |\n";
  }
  const int outside = static_cast<int>(r.held_out.size()) - within;
  o << "\nHeld-out within 10%: " << within << " of " << r.held_out.size() << ".";
  if (outside > 0) {
    o << " Of the " << outside << " outside, " << drift << " were within 10% of their neighbours measured in the same passes "
      << "(the machine's speed changed between passes), and " << noisy_misses << " of the rest had passes more than 10% apart themselves "
      << "or a pass within 10% with the machine held at one speed (its speed changed while it was measured).";
  }
  o << "\n";
  if (!r.collectives.empty()) o << "\n## Collectives as measured\n\n" << collective_table_markdown(r.collectives);
  return o.str();
}

namespace {

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) o += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
  return o;
}

// Log-log scatter with optional polyline series; returns an <svg>.
struct Series {
  std::string name, colour;
  std::vector<std::pair<double, double>> pts;
  bool line = false;
};

std::string loglog_svg(const char* id, const std::string& xlabel, const std::string& ylabel, const std::vector<Series>& series) {
  const double w = 760, h = 420, l = 80, b = 50, t = 20, r = 160;
  double x0 = 1e300, x1 = 0, y0 = 1e300, y1 = 0;
  for (const auto& s : series) {
    for (const auto& [x, y] : s.pts) {
      if (x <= 0 || y <= 0) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  }
  std::ostringstream o;
  o << "<svg id=\"" << id << "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h << "\">";
  if (x1 <= 0) return o.str() + "</svg>";
  const double lx0 = std::floor(std::log10(x0)), lx1 = std::ceil(std::log10(x1)), ly0 = std::floor(std::log10(y0)), ly1 = std::ceil(std::log10(y1));
  auto X = [&](double x) { return l + (w - l - r) * (std::log10(x) - lx0) / std::max(1e-9, lx1 - lx0); };
  auto Y = [&](double y) { return h - b - (h - b - t) * (std::log10(y) - ly0) / std::max(1e-9, ly1 - ly0); };
  o << "<line x1=\"" << l << "\" y1=\"" << h - b << "\" x2=\"" << w - r << "\" y2=\"" << h - b << "\" stroke=\"#333\"/><line x1=\"" << l
    << "\" y1=\"" << t << "\" x2=\"" << l << "\" y2=\"" << h - b << "\" stroke=\"#333\"/>";
  for (double e = lx0; e <= lx1; e += 1) o << "<text x=\"" << X(std::pow(10, e)) << "\" y=\"" << h - b + 16 << "\" font-size=\"11\" text-anchor=\"middle\">1e" << e << "</text>";
  for (double e = ly0; e <= ly1; e += 1) o << "<text x=\"" << l - 6 << "\" y=\"" << Y(std::pow(10, e)) + 4 << "\" font-size=\"11\" text-anchor=\"end\">1e" << e << "</text>";
  o << "<text x=\"" << (l + w - r) / 2 << "\" y=\"" << h - 10 << "\" text-anchor=\"middle\" font-size=\"13\">" << html_escape(xlabel) << "</text>";
  o << "<text x=\"16\" y=\"" << (h - b) / 2 << "\" transform=\"rotate(-90 16 " << (h - b) / 2 << ")\" text-anchor=\"middle\" font-size=\"13\">"
    << html_escape(ylabel) << "</text>";
  double ly = t + 10;
  for (const auto& s : series) {
    if (s.line) {
      std::string d;
      for (size_t i = 0; i < s.pts.size(); ++i) d += (i ? " L " : "M ") + fmt("%.1f", X(s.pts[i].first)) + " " + fmt("%.1f", Y(s.pts[i].second));
      o << "<path d=\"" << d << "\" fill=\"none\" stroke=\"" << s.colour << "\" stroke-width=\"2\"/>";
    } else {
      for (const auto& [x, y] : s.pts) {
        o << "<circle cx=\"" << fmt("%.1f", X(x)) << "\" cy=\"" << fmt("%.1f", Y(y)) << "\" r=\"4\" fill=\"" << s.colour << "\"/>";
      }
    }
    o << "<rect x=\"" << w - r + 10 << "\" y=\"" << ly - 9 << "\" width=\"10\" height=\"10\" fill=\"" << s.colour << "\"/><text x=\"" << w - r + 24
      << "\" y=\"" << ly << "\" font-size=\"11\">" << html_escape(s.name) << "</text>";
    ly += 16;
  }
  o << "</svg>";
  return o.str();
}

}  // namespace

std::string suite_html(const SuiteResult& r) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>stepcast calibration</title><style>body{font-family:sans-serif;margin:24px}"
       "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child{text-align:left}</style>"
       "</head><body>\n<h1>stepcast calibration</h1>\n";
  if (r.profile.contains("description")) o << "<p>" << html_escape(r.profile["description"].get<std::string>()) << "</p>\n";
  // Roofline: attainable = min(rate, bandwidth * intensity); intensity of C = A B with operands
  // and output of `bytes_per_element`.
  // One ceiling and one point series per dtype (the reference fit alone on CPUs), and the
  // memory-bound kernels on the bandwidth slope.
  const char* palette[] = {"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#9c755f"};
  std::vector<DtypeGemm> dtypes = r.gemm_dtypes;
  if (dtypes.empty()) dtypes.push_back({"measured", r.bytes_per_element, r.gemm, r.gemm_samples});
  const double bw = streaming_bandwidth(r);
  double ai_min = 1e300, ai_max = 0;
  std::vector<Series> series;
  std::string ceilings;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    const auto& g = dtypes[i];
    Series meas{g.dtype + " GEMMs", palette[i % 6], {}, false};
    // Operands in the dtype; the result 16-bit for fp8, else the operand size.
    const double out_bytes = g.bytes_per_element < 2.0 ? 2.0 : g.bytes_per_element;
    for (const auto& s : g.samples) {
      const double flops = 2.0 * s.m * s.n * s.k;
      const double bytes = (s.m * s.k + s.k * s.n) * g.bytes_per_element + s.m * s.n * out_bytes;
      meas.pts.emplace_back(flops / bytes, flops / s.seconds);
      ai_min = std::min(ai_min, flops / bytes), ai_max = std::max(ai_max, flops / bytes);
    }
    series.push_back(meas);
    ceilings += (ceilings.empty() ? "" : ", ") + g.dtype + " " + fmt("%.3g", g.fit.rate) + " FLOP/s";
  }
  if (!r.elementwise.empty()) {
    Series ew{"norm / activation / residual", "#edc948", {}, false};
    for (const auto& k : r.elementwise) {
      ew.pts.emplace_back(k.flops / k.bytes, k.flops / k.seconds);
      ai_min = std::min(ai_min, k.flops / k.bytes);
    }
    series.push_back(ew);
  }
  for (size_t i = 0; i < dtypes.size(); ++i) {
    Series roof{dtypes[i].dtype + " roofline", palette[i % 6], {}, true};
    for (double ai = std::max(0.01, ai_min / 10); ai <= ai_max * 10; ai *= 1.2) roof.pts.emplace_back(ai, std::min(dtypes[i].fit.rate, bw * ai));
    series.push_back(roof);
  }
  o << "<h2>Kernels against the roofline</h2>\n<p>Ceilings (fitted large-GEMM rates): " << html_escape(ceilings) << "; "
    << fmt("%.3g", bw) << " B/s streaming bandwidth (half the copy's bytes moved per second).</p>\n"
    << loglog_svg("roofline", "arithmetic intensity (FLOP/byte)", "FLOP/s", series) << "\n";
  if (!r.collectives.empty()) {
    std::vector<Series> cs;
    const char* colours[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#b07aa1"};
    size_t i = 0;
    for (const auto& c : r.collectives) cs.push_back({c.op + " x" + std::to_string(c.ranks), colours[i++ % 6], c.curve, true});
    o << "<h2>Collective bus bandwidth by size (" << r.ranks << " processes)</h2>\n" << loglog_svg("collectives", "message bytes", "bus bandwidth (B/s)", cs) << "\n";
  }
  o << "<h2>Held-out sizes: measured vs the cost model</h2>\n<table><tr><th>benchmark</th><th>measured ms</th><th>predicted ms</th><th>error</th><th>within pass</th><th>pass spread</th></tr>\n";
  for (const auto& h : r.held_out) {
    o << "<tr><td>" << html_escape(h.what) << "</td><td>" << fmt("%.4f", h.measured_s * 1e3) << "</td><td>" << fmt("%.4f", h.predicted_s * 1e3)
      << "</td><td>" << fmt("%+.1f%%", 100.0 * h.error()) << "</td><td>" << (h.within_pass() ? fmt("%+.1f%%", 100.0 * *h.within_pass()) : std::string("-"))
      << "</td><td>" << fmt("%.1f%%", 100.0 * h.spread) << "</td></tr>\n";
  }
  o << "</table>\n</body></html>\n";
  return o.str();
}

}  // namespace stepcast::calibrate
