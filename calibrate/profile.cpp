#include "calibrate/profile.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "sim/core/error.hpp"
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

double op_bus_factor(const std::string& op, int64_t ranks) {
  const auto c = collective_named(op);
  return c == cost::Collective::kSendRecv || c == cost::Collective::kBroadcast ? 1.0 : cost::bus_factor(c, ranks);
}

void write_profile(SuiteResult& r, const DeviceDescription& d, double overhead_s, const std::string& command) {
  char date[32];
  const std::time_t tt = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&tt));
  Json fabric = {{"name", d.fabric_name}, {"span", r.ranks}, {"busbw", "1GB/s"}, {"p2p_bandwidth", "1GB/s"}, {"latency", "1us"}};
  Json curves = Json::object();
  for (const auto& c : r.collectives) {
    Json pts = Json::array();
    for (const auto& [b, bw] : c.curve) pts.push_back({b, bw});
    curves[c.op] = pts;
    const std::string plateau = fmt("%.6e", c.plateau_busbw) + "B/s";
    if (c.op == "all_gather") fabric["busbw"] = plateau;
    if (c.op == "all_reduce") fabric["allreduce_busbw"] = plateau;
    if (c.op == "reduce_scatter") fabric["reduce_scatter_busbw"] = plateau;
    if (c.op == "broadcast") fabric["broadcast_busbw"] = plateau;
    if (c.op == "send_recv") fabric["p2p_bandwidth"] = plateau;
    if (c.op == "all_gather" && r.ranks > 1) fabric["latency"] = fmt("%.3f", std::max(0.0, c.alpha_s) * 1e6 / (r.ranks - 1)) + "us";
  }
  if (!curves.empty()) fabric["size_curves"] = curves;
  Json peaks = Json::object(), gemm_max = Json::object();
  for (const auto& dt : d.dtypes) {
    peaks[dt] = fmt("%.6e", r.gemm.rate) + "FLOPS";
    gemm_max[dt] = 1.0;
  }
  std::vector<std::string> sources{"command: " + command, "date: " + std::string(date)};
  sources.insert(sources.end(), d.sources.begin(), d.sources.end());
  sources.push_back("peak_flops = fitted large-GEMM rate (gemm_max 1.0); gemm_half_dim fitted over " + std::to_string(r.gemm_samples.size()) +
                    " shapes (rms error " + fmt("%.1f", 100.0 * r.gemm.rms_rel_error) + "%)");
  sources.push_back("collectives: bus bandwidth by size per operation (size_curves), plateaus = best measured");
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
                 {"sustained_clock", 1.0},
                 {"collective_sms", d.collective_sms},
                 {"attention_fwd", attn},
                 {"attention_bwd", attn},
                 {"memory_bound", 1.0},
                 {"optimizer_rate", r.optimizer_rate},
                 {"kernel_overhead", fmt("%.3f", overhead_s * 1e6) + "us"}}},
               {"node", {{"gpus_per_node", r.ranks}, {"fabric", Json::array({fabric})}}},
               {"network", d.network}};
}

void predict_held_out(SuiteResult& r, const std::vector<HeldGemm>& gemms, hw::Dtype dtype, const std::vector<HeldCollective>& collectives) {
  core::Issues issues;
  const auto hw = hw::parse_hardware(r.profile, "$.hardware", issues);
  if (!issues.empty()) throw core::InternalError("calibrate: the written profile does not parse: " + issues.lines().front());
  for (const auto& g : gemms) {
    const cost::GemmShape shape{static_cast<double>(g.m), static_cast<double>(g.n), static_cast<double>(g.k), 1.0};
    r.held_out.push_back({"gemm " + hw::to_string(dtype) + " " + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" + std::to_string(g.k),
                          g.seconds, cost::gemm_time(shape, dtype, hw).value(), g.spread});
  }
  const mesh::Placement node{r.ranks, 1, r.ranks, 0, r.ranks - 1};
  for (const auto& c : collectives) {
    r.held_out.push_back({c.op + " " + std::to_string(c.bytes) + " B", c.seconds,
                          cost::collective_time(collective_named(c.op), core::Bytes(static_cast<double>(c.bytes)), node, hw).value(),
                          c.spread});
  }
}

}  // namespace stepcast::calibrate
