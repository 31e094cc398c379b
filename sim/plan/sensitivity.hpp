#pragma once

// `stepcast sensitivity RUN.json`: which hardware resource bounds a step. The run is simulated
// (or estimated) once as given and once per resource made better by the same factor (rates
// times f, latencies and overheads divided by it), everything else unchanged. A resource's
// elasticity ln(T / T_better) / ln(f) is the share of the step that scales with it: 1 when the
// step is bound by it alone, 0 when it is hidden or unused. Resources: tensor-core compute
// (every dtype's peak), HBM bandwidth, the node fabric (every tier's bandwidths), the scale-out
// network (NIC line rate; runs spanning nodes), communication latency (every tier's and the
// network's; for a measured size curve, its shortfall from the plateau), kernel launch overhead, for MoE runs the per-expert host time
// (parallel.moe.expert_overhead, a framework property rather than the hardware's), and for
// CPU-offloaded runs the host (its memory bandwidth, CPU optimizer rate and GPU-host link).

#include <string>
#include <vector>

#include "sim/config/run_config.hpp"
#include "sim/core/json_reader.hpp"
#include "sim/plan/compare.hpp"

namespace stepcast::plan {

struct SensitivityRow {
  std::string resource;   // "compute", "hbm_bandwidth", "node_fabric", "network", "latency", ...
  std::string what;       // what was scaled, in words
  double step_s = 0;      // step with the resource better by the factor
  double elasticity = 0;  // ln(base / step_s) / ln(factor)
};

struct Sensitivity {
  Side base;
  double factor = 1.1;
  std::vector<SensitivityRow> rows;  // in resource order
  std::vector<std::string> skipped;  // resources the run does not use, with why
};

// factor > 1. Throws core::UserError otherwise.
Sensitivity sensitivity(const config::RunConfig& rc, const std::string& name, double factor, bool simulate);

// The run config with one resource better by `factor` (exposed for tests).
config::RunConfig with_better(const config::RunConfig& rc, const std::string& resource, double factor);

std::string sensitivity_text(const Sensitivity& s);
core::Json sensitivity_json(const Sensitivity& s, const std::string& command);

}  // namespace stepcast::plan
