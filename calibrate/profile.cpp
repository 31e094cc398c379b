#include "calibrate/profile.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "sim/core/error.hpp"
#include "stepcast_version.hpp"
#include "sim/cost/collectives.hpp"
#include "sim/cost/compute.hpp"

namespace stepcast::calibrate {

using core::Json;

namespace {

using core::fmt;

cost::Collective collective_named(const std::string& op) {
  const auto c = cost::collective_from_name(op);
  if (!c) throw core::InternalError("calibrate: unknown collective '" + op + "'");
  return *c;
}

}  // namespace

std::string build_description() {
  std::string compiler = "unknown compiler";
#if defined(__clang__)
  compiler = "clang " __clang_version__;
#elif defined(__GNUC__)
  compiler = "gcc " __VERSION__;
#endif
  return std::string("revision ") + STEPCAST_GIT_COMMIT + ", built with " + compiler;
}

double op_bus_factor(const std::string& op, int64_t ranks) {
  const auto c = collective_named(op);
  return c == cost::Collective::kSendRecv || c == cost::Collective::kBroadcast ? 1.0 : cost::bus_factor(c, ranks);
}

double memory_bound_efficiency(const std::vector<KernelSample>& kernels, double copy_bandwidth) {
  if (kernels.empty() || copy_bandwidth <= 0) return 1.0;
  std::vector<double> ratios;
  for (const auto& k : kernels) {
    if (k.seconds > 0) ratios.push_back(k.bytes / k.seconds / copy_bandwidth);
  }
  if (ratios.empty()) return 1.0;
  std::sort(ratios.begin(), ratios.end());
  const size_t n = ratios.size();
  const double median = n % 2 == 1 ? ratios[n / 2] : 0.5 * (ratios[n / 2 - 1] + ratios[n / 2]);
  return std::clamp(median, 0.05, 1.0);
}

namespace {

// One fabric tier per measured group size on a nested chain (groups of consecutive ranks are the aligned domains
// a tier describes), narrowest first; the widest spans every process of the node.
Json fabric_tiers(const SuiteResult& r, const std::string& fabric_name) {
  std::vector<int64_t> spans;
  for (const auto& c : r.collectives) spans.push_back(c.ranks);
  spans.push_back(r.ranks);
  std::sort(spans.begin(), spans.end());
  spans.erase(std::unique(spans.begin(), spans.end()), spans.end());
  // Tiers nest (each span a multiple of the one below): a measured size off that chain (3 of 12
  // beside 2 and 4) stays in the report's table but is not a tier.
  std::vector<int64_t> chain;
  for (const int64_t s : spans) {
    if ((chain.empty() || s % chain.back() == 0) && r.ranks % s == 0) chain.push_back(s);
  }
  spans = chain;
  Json tiers = Json::array();
  for (const int64_t span : spans) {
    Json fabric = {{"name", spans.size() > 1 ? fabric_name + "-" + std::to_string(span) : fabric_name},
                   {"span", span},
                   {"busbw", "1GB/s"},
                   {"p2p_bandwidth", "1GB/s"},
                   {"latency", "1us"}};
    Json curves = Json::object();
    for (const auto& c : r.collectives) {
      if (c.ranks != span) continue;
      Json pts = Json::array();
      for (const auto& [b, bw] : c.curve) pts.push_back({b, bw});
      curves[c.op] = pts;
      const std::string plateau = fmt("%.6e", c.plateau_busbw) + "B/s";
      if (c.op == "all_gather") fabric["busbw"] = plateau;
      if (c.op == "all_reduce") fabric["allreduce_busbw"] = plateau;
      if (c.op == "reduce_scatter") fabric["reduce_scatter_busbw"] = plateau;
      if (c.op == "broadcast") fabric["broadcast_busbw"] = plateau;
      if (c.op == "send_recv") fabric["p2p_bandwidth"] = plateau;
      if (c.op == "all_gather" && span > 1) fabric["latency"] = fmt("%.3f", std::max(0.0, c.alpha_s) * 1e6 / static_cast<double>(span - 1)) + "us";
    }
    if (!curves.empty()) fabric["size_curves"] = curves;
    tiers.push_back(fabric);
  }
  return tiers;
}

}  // namespace

void write_profile(SuiteResult& r, const DeviceDescription& d, double overhead_s, const std::string& command) {
  char date[32];
  const std::time_t tt = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&tt));
  Json peaks = Json::object(), gemm_max = Json::object();
  std::string per_dtype;
  for (const auto& dt : d.dtypes) {
    double rate = r.gemm.rate;
    for (const auto& g : r.gemm_dtypes) {
      if (g.dtype == dt && g.fit.rate > 0) rate = g.fit.rate;
    }
    peaks[dt] = fmt("%.6e", rate) + "FLOPS";
    gemm_max[dt] = 1.0;
  }
  for (const auto& g : r.gemm_dtypes) {
    per_dtype += (per_dtype.empty() ? "" : ", ") + g.dtype + " " + fmt("%.4g", g.fit.rate / 1e12) + " TFLOP/s over " +
                 std::to_string(g.samples.size()) + " shapes (rms " + fmt("%.1f", 100.0 * g.fit.rms_rel_error) + "%)";
  }
  std::vector<std::string> sources{"command: " + command, "date: " + std::string(date), "stepcast: " + build_description()};
  if (r.reused_measurements > 0) {
    sources.push_back("resumed: " + std::to_string(r.reused_measurements) + " of " + std::to_string(r.reused_measurements + r.new_measurements) +
                      " measurements taken from the journal of an interrupted run of this calibration (same build, device, processes and budget)");
  }
  sources.insert(sources.end(), d.sources.begin(), d.sources.end());
  if (r.gemm_dtypes.empty()) {
    sources.push_back("peak_flops = fitted large-GEMM rate (gemm_max 1.0); gemm_half_dim fitted over " + std::to_string(r.gemm_samples.size()) +
                      " shapes (rms error " + fmt("%.1f", 100.0 * r.gemm.rms_rel_error) + "%)");
  } else {
    sources.push_back("peak_flops per dtype = its fitted large-GEMM rate (gemm_max 1.0), gemm_half_dim " + fmt("%.0f", r.gemm.half_dim) +
                      " shared by every dtype: " + per_dtype);
  }
  const double memory_bound = memory_bound_efficiency(r.elementwise, r.copy_bandwidth);
  if (!r.elementwise.empty()) {
    sources.push_back("memory_bound = median over " + std::to_string(r.elementwise.size()) +
                      " norm / activation / residual kernels of their bytes per second over the copy bandwidth: " + fmt("%.3f", memory_bound));
  }
  for (const auto& n : r.not_measured) sources.push_back("not measured: " + n);
  sources.push_back("collectives: bus bandwidth by size per operation (size_curves), plateaus = best measured" +
                    std::string(r.collectives.empty() ? "" : "; one fabric tier per measured group size"));
  // Every measured GEMM as [m, n, k, achieved fraction of its dtype's rate]: the cost model
  // follows these between and at the measured shapes (efficiency.gemm_measured).
  Json measured = Json::object();
  auto add_measured = [&](const std::string& dt, double rate, const std::vector<GemmSample>& samples) {
    Json pts = Json::array();
    for (const auto& s : samples) {
      const double t = s.seconds - overhead_s;
      if (t <= 0 || rate <= 0) continue;
      pts.push_back({s.m, s.n, s.k, std::min(1.5, 2.0 * s.m * s.n * s.k / t / rate)});
    }
    if (!pts.empty()) measured[dt] = pts;
  };
  for (const auto& dt : d.dtypes) {
    bool own = false;
    for (const auto& g : r.gemm_dtypes) {
      if (g.dtype == dt && g.fit.rate > 0) {
        add_measured(dt, g.fit.rate, g.samples);
        own = true;
      }
    }
    if (!own && r.gemm_dtypes.empty()) add_measured(dt, r.gemm.rate, r.gemm_samples);
  }
  if (r.host.link > 0) {
    sources.push_back("host: memory = physical memory; memory_bandwidth = memcpy bytes moved per second by every calibration process's share of "
                      "the cores at once (measured, so memory_efficiency 1); optimizer_rate = the Adam step the same way; link = a 256 MiB "
                      "pinned copy per GPU, every GPU at once, the slower of host-to-device and device-to-host");
  }
  const double attn = std::pow(d.attention_tile / (d.attention_tile + r.gemm.half_dim), 3.0);
  r.profile = {{"name", d.name},
               {"description", d.description},
               {"sources", sources},
               {"gpu",
                {{"name", d.device},
                 {"peak_flops", peaks},
                 {"memory", fmt("%.0f", d.memory_bytes) + "B"},
                 {"memory_bandwidth", fmt("%.6e", r.copy_bandwidth) + "B/s"},
                 {"runtime_reserved", "0B"},
                 {"sm_count", d.sm_count}}},
               {"efficiency",
                {{"gemm_max", gemm_max},
                 {"gemm_half_dim", r.gemm.half_dim},
                 {"gemm_measured", measured},
                 {"sustained_clock", 1.0},
                 {"collective_sms", d.collective_sms},
                 {"attention_fwd", d.attention_fwd > 0 ? d.attention_fwd : attn},
                 {"attention_bwd", d.attention_bwd > 0 ? d.attention_bwd : attn},
                 {"memory_bound", memory_bound},
                 {"optimizer_rate", r.optimizer_rate},
                 {"kernel_overhead", fmt("%.3f", overhead_s * 1e6) + "us"}}},
               {"node", {{"gpus_per_node", r.ranks}, {"fabric", fabric_tiers(r, d.fabric_name)}}},
               {"network", d.network}};
  if (!r.reference_gemm_samples_s.empty()) {
    const auto& g = r.reference_gemm;
    r.profile["calibration"] = {{"reference_gemm",
                                 {{"m", g.m}, {"n", g.n}, {"k", g.k}, {"dtype", "fp32"}, {"seconds", core::median(r.reference_gemm_samples_s)},
                                  {"samples_s", r.reference_gemm_samples_s}}}};
  }
  if (r.host.link > 0) {
    r.profile["host"] = {{"memory", fmt("%.0f", r.host.memory_bytes) + "B"},
                         {"memory_bandwidth", fmt("%.6e", r.host.memory_bandwidth) + "B/s"},
                         {"memory_efficiency", 1.0},
                         {"link", fmt("%.6e", r.host.link) + "B/s"},
                         {"optimizer_rate", r.host.optimizer_rate}};
  }
}

void predict_held_out(SuiteResult& r, const std::vector<HeldGemm>& gemms, hw::Dtype dtype, const std::vector<HeldCollective>& collectives) {
  core::Issues issues;
  const auto hw = hw::parse_hardware(r.profile, "$.hardware", issues);
  if (!issues.empty()) throw core::InternalError("calibrate: the written profile does not parse: " + issues.lines().front());
  for (const auto& g : gemms) {
    const cost::GemmShape shape{static_cast<double>(g.m), static_cast<double>(g.n), static_cast<double>(g.k), 1.0};
    const hw::Dtype dt = g.dtype.empty() ? dtype : hw::dtype_from_string(g.dtype);
    const double predicted = cost::gemm_time(shape, dt, hw).value();
    r.held_out.push_back({"gemm " + hw::to_string(dt) + " " + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" + std::to_string(g.k),
                          g.seconds, predicted, g.spread, {}});
    for (double t : g.adjusted_runs) r.held_out.back().within_pass_errors.push_back(predicted / t - 1.0);
  }
  const mesh::Placement node{r.ranks, 1, r.ranks, 0, r.ranks - 1};
  for (const auto& c : collectives) {
    r.held_out.push_back({c.op + " " + std::to_string(c.bytes) + " B", c.seconds,
                          cost::collective_time(collective_named(c.op), core::Bytes(static_cast<double>(c.bytes)), node, hw).value(),
                          c.spread, c.within_pass_errors});
  }
}

}  // namespace stepcast::calibrate
