#include "sim/plan/sensitivity.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "sim/core/error.hpp"
#include "sim/report/output.hpp"

namespace stepcast::plan {

using core::Json;

namespace {

struct Resource {
  const char* name;
  const char* what;
};

// In the order the output lists them.
constexpr Resource kResources[] = {
    {"compute", "tensor-core peak of every dtype (GEMMs and attention)"},
    {"hbm_bandwidth", "HBM bandwidth (element-wise and memory-bound kernels)"},
    {"node_fabric", "node fabric bandwidth, every tier (NVLink / PCIe collectives and transfers)"},
    {"network", "scale-out NIC line rate"},
    {"latency", "communication latency: each tier's and the network's (a measured curve's shortfall from its plateau)"},
    {"kernel_overhead", "per-kernel launch and tail cost"},
    {"host_expert_work", "per-expert host time of MoE layers (parallel.moe.expert_overhead)"},
    {"host", "host memory bandwidth, CPU optimizer rate and GPU-host link (CPU offload of state or activations)"},
};

core::Bandwidth faster(core::Bandwidth b, double f) { return core::Bandwidth(b.value() * f); }
core::Duration shorter(core::Duration d, double f) { return core::Duration(d.value() / f); }

// Why a resource plays no part in the run ("" when it does).
std::string unused(const config::RunConfig& rc, const std::string& r) {
  if (r == "network" && rc.cluster.num_nodes() <= 1) return "one node: no scale-out traffic";
  if (r == "node_fabric" && rc.cluster.num_gpus <= 1) return "one GPU: no intra-node traffic";
  if (r == "host_expert_work" && (!rc.model.moe.enabled() || rc.parallel.moe.expert_overhead <= 0)) {
    return rc.model.moe.enabled() ? "parallel.moe.expert_overhead is 0" : "dense model: no expert layers";
  }
  if (r == "host" && config::offload_label(rc.parallel).empty()) return "no CPU offload (parallel.offload, parallel.activation_offload_layers)";
  return "";
}

double elasticity(double base, double better, double f) { return std::log(base / better) / std::log(f); }

}  // namespace

config::RunConfig with_better(const config::RunConfig& rc, const std::string& resource, double f) {
  config::RunConfig out = rc;
  hw::HardwareProfile& h = out.hardware;
  if (resource == "compute") {
    for (auto& [d, rate] : h.peak) rate = core::FlopRate(rate.value() * f);
  } else if (resource == "hbm_bandwidth") {
    h.hbm_bandwidth = faster(h.hbm_bandwidth, f);
  } else if (resource == "node_fabric") {
    for (auto& t : h.fabric) {
      for (core::Bandwidth* b : {&t.busbw, &t.allreduce_busbw, &t.reduce_scatter_busbw, &t.broadcast_busbw, &t.p2p_bandwidth}) *b = faster(*b, f);
      for (auto& [op, curve] : t.op_curves) {
        for (auto& point : curve) point.second *= f;
      }
    }
  } else if (resource == "network") {
    h.network.nic_bandwidth = faster(h.network.nic_bandwidth, f);
  } else if (resource == "latency") {
    for (auto& t : h.fabric) {
      t.latency = shorter(t.latency, f);
      t.base_latency = shorter(t.base_latency, f);
      if (t.p2p_latency) t.p2p_latency = shorter(*t.p2p_latency, f);
      // A measured curve's shortfall from its plateau is the fixed cost of a collective: at
      // fraction x of the plateau a message takes 1/x of its bandwidth time, 1/x - 1 of it
      // overhead, which shrinks by f.
      for (auto& point : t.size_curve) point.second = 1.0 / (1.0 + (1.0 / point.second - 1.0) / f);
      for (auto& [op, curve] : t.op_curves) {
        double plateau = 0;
        for (const auto& point : curve) plateau = std::max(plateau, point.second);
        for (auto& point : curve) point.second = 1.0 / (1.0 / plateau + (1.0 / point.second - 1.0 / plateau) / f);
      }
    }
    h.network.latency = shorter(h.network.latency, f);
  } else if (resource == "kernel_overhead") {
    h.efficiency.kernel_overhead = shorter(h.efficiency.kernel_overhead, f);
  } else if (resource == "host_expert_work") {
    out.parallel.moe.expert_overhead /= f;
  } else if (resource == "host") {
    h.host.memory_bandwidth = faster(h.host.memory_bandwidth, f);
    h.host.link = faster(h.host.link, f);
    h.host.optimizer_rate *= f;
  } else {
    throw core::InternalError("sensitivity: unknown resource " + resource);
  }
  return out;
}

Sensitivity sensitivity(const config::RunConfig& rc, const std::string& name, double factor, bool simulate) {
  if (!(factor > 1.0) || !std::isfinite(factor) || factor > 10.0) {
    throw core::UserError("sensitivity: --factor must be in (1, 10], got " + core::fmt("%g", factor));
  }
  Sensitivity s;
  s.factor = factor;
  s.base = evaluate_side(rc, name, simulate);
  const double base = s.base.c.step_s();
  for (const Resource& r : kResources) {
    if (const std::string why = unused(rc, r.name); !why.empty()) {
      s.skipped.push_back(std::string(r.name) + " (" + why + ")");
      continue;
    }
    const Side better = evaluate_side(with_better(rc, r.name, factor), name, simulate);
    SensitivityRow row;
    row.resource = r.name;
    row.what = r.what;
    row.step_s = better.c.step_s();
    row.elasticity = elasticity(base, row.step_s, factor);
    s.rows.push_back(row);
  }
  return s;
}

namespace {

// "Compute bounds the step most: 10% more of it shortens the step by 8.6%; next is the scale-out
// network (2.1%). HBM bandwidth ... barely matter (under 0.5%)."
std::string summary(const Sensitivity& s) {
  if (s.rows.empty()) return "";
  std::vector<const SensitivityRow*> by(s.rows.size());
  for (size_t i = 0; i < s.rows.size(); ++i) by[i] = &s.rows[i];
  std::stable_sort(by.begin(), by.end(), [](const auto* a, const auto* b) { return a->elasticity > b->elasticity; });
  const double base = s.base.c.step_s();
  auto gain = [&](const SensitivityRow& r) { return 100.0 * (1.0 - r.step_s / base); };
  const std::string pct = core::fmt("%.0f", 100.0 * (s.factor - 1.0)) + "%";
  std::string out = by[0]->resource + " bounds the step most: " + pct + " more of it shortens the step by " + core::fmt("%.1f", gain(*by[0])) + "%";
  if (by.size() > 1 && gain(*by[1]) >= 0.5) out += "; next is " + by[1]->resource + " (" + core::fmt("%.1f", gain(*by[1])) + "%)";
  out += ".";
  std::string small;
  for (const auto* r : by) {
    if (gain(*r) < 0.5) small += (small.empty() ? "" : ", ") + r->resource;
  }
  if (!small.empty()) out += " Under 0.5% each: " + small + ".";
  return out;
}

}  // namespace

std::string sensitivity_text(const Sensitivity& s) {
  std::ostringstream o;
  const auto& rc = s.base.c.rc;
  const double base = s.base.c.step_s();
  o << (s.base.c.simulated ? "simulated" : "estimated") << " step of " << rc.model.name << " on " << rc.cluster.num_gpus << "x "
    << rc.hardware.name << " (" << layout_text(rc.parallel) << "): " << core::fmt("%.4f", base) << " s\n";
  o << "each resource " << core::fmt("%.0f", 100.0 * (s.factor - 1.0)) << "% better (rates x" << core::fmt("%g", s.factor) << ", latencies and overheads / "
    << core::fmt("%g", s.factor) << "), the rest unchanged:\n\n";
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-18s %10s %8s %10s  %s\n", "resource", "step s", "change", "elasticity", "what is scaled");
  o << buf;
  for (const auto& r : s.rows) {
    std::snprintf(buf, sizeof buf, "%-18s %10.4f %7.1f%% %10.2f  %s\n", r.resource.c_str(), r.step_s, 100.0 * (r.step_s / base - 1.0), r.elasticity,
                  r.what.c_str());
    o << buf;
  }
  for (const auto& k : s.skipped) o << "not used: " << k << "\n";
  o << "\n" << summary(s) << "\n";
  o << "Elasticity ln(T / T_better) / ln(" << core::fmt("%g", s.factor)
    << "): 1 when the step scales fully with the resource, 0 when it is hidden or unused.\n";
  return o.str();
}

Json sensitivity_json(const Sensitivity& s, const std::string& command) {
  Json out = report::provenance_json(command);
  out["base"] = side_json(s.base);
  out["factor"] = s.factor;
  Json rows = Json::array();
  for (const auto& r : s.rows) {
    rows.push_back({{"resource", r.resource}, {"what", r.what}, {"step_time_s", r.step_s},
                    {"change", r.step_s / s.base.c.step_s() - 1.0}, {"elasticity", r.elasticity}});
  }
  out["resources"] = rows;
  out["not_used"] = s.skipped;
  out["summary"] = summary(s);
  return out;
}

}  // namespace stepcast::plan
