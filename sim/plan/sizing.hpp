// stepcast capacity sizing: the smallest cluster, in whole nodes, that trains a token budget
// before a deadline with the planner's best layout.
//
// With a fixed MFU the arithmetic of sim/capacity applies (6ND FLOPs, GPU-hours at peak x MFU,
// GPUs rounded up to whole nodes). By default the MFU comes from the planner instead: for a
// candidate GPU count the planner's best simulated layout gives the step time, hence the
// training days. Candidate counts are whole nodes for which some layout divides the global
// batch; the smallest one meeting the deadline is found by bisection (more GPUs never take
// longer for the best layout, up to the batch's limit on data parallelism).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>
#include <string>

#include "sim/capacity/capacity.hpp"
#include "sim/capacity/goodput.hpp"
#include "sim/core/json_reader.hpp"
#include "sim/plan/planner.hpp"

namespace stepcast::plan {

struct SizingOptions {
  double tokens = 0;            // token budget (or tokens_per_param x parameters)
  double tokens_per_param = 0;
  double target_days = 0;
  double usd_per_gpu_hour = 0;
  double fixed_mfu = 0;         // > 0: capacity-cases arithmetic with this MFU, no planner
  // Safety margin: the cluster must meet the deadline with every step this fraction slower than
  // predicted (the prediction's error on published runs is in reports/accuracy.md).
  double margin = 0;
  int64_t max_gpus = 1 << 17;
  // Failures, checkpoints and restarts (sim/capacity/goodput.hpp): always estimated for the
  // chosen cluster; with size_for_goodput the deadline is held to the expected wall clock they
  // give instead of the failure-free one.
  capacity::ReliabilityInput reliability;
  bool size_for_goodput = false;
  PlanOptions plan;
  // Called before each GPU count's search (the count, and how many searches ran before it);
  // the search's own progress is plan.progress.
  std::function<void(int64_t gpus, int searches_before)> on_search;
};

struct SizingResult {
  bool met = false;             // a cluster meets the deadline
  int64_t gpus = 0, nodes = 0;
  double tokens = 0, steps = 0, step_time_s = 0, tokens_per_s = 0, mfu = 0;
  double wall_days = 0, gpu_hours = 0, cost_usd = 0;  // as predicted, without failures
  double margin = 0;
  capacity::Goodput goodput;     // failures, checkpoints and restarts on the chosen cluster
  // GPU board power (the profile's tdp_watts; 0 when it does not give it): the cluster's GPUs at
  // full power and the energy of the GPU-hours (hosts, network and cooling come on top).
  double tdp_watts = 0;
  [[nodiscard]] double gpu_power_kw() const { return static_cast<double>(gpus) * tdp_watts / 1e3; }
  [[nodiscard]] double gpu_energy_mwh() const { return gpu_hours * tdp_watts / 1e6; }
  bool sized_for_goodput = false;
  [[nodiscard]] double expected_wall_days() const { return goodput.wall_s / 86400.0; }
  [[nodiscard]] double expected_gpu_hours() const { return expected_wall_days() * 24.0 * static_cast<double>(gpus); }
  [[nodiscard]] double expected_cost_usd() const { return gpu_hours > 0 ? cost_usd * expected_gpu_hours() / gpu_hours : 0.0; }
  // What the deadline was held to: the predicted days (with failures when sized for them) with
  // the margin.
  [[nodiscard]] double wall_days_with_margin() const { return (sized_for_goodput ? expected_wall_days() : wall_days) * (1.0 + margin); }
  std::string layout;           // planner's layout (fixed-MFU mode: says no layout was searched)
  double peak_memory_bytes = 0, memory_capacity_bytes = 0;  // the layout's peak per GPU (simulated mode)
  double memory_headroom = 0;   // the headroom the search held layouts to
  std::string mode;             // "simulated" | "fixed MFU"
  int plans_run = 0;
  capacity::CapacityResult fixed;  // fixed-MFU arithmetic (mode "fixed MFU")
};

SizingResult size_for_deadline(const core::Json& run, const std::string& source_name, const std::string& base_dir,
                               const SizingOptions& opt);
std::string sizing_text(const SizingResult& r);
core::Json sizing_json(const SizingResult& r);

// The planner's best layout at each of several GPU counts (stepcast scaling): step time,
// throughput, MFU and, with a token budget, days, GPU-hours, cost and goodput (as capacity
// computes them). A count where no layout fits, or which is invalid, has an error instead.
struct ScalingPoint {
  int64_t gpus = 0;
  bool ok = false;
  std::string error;
  SizingResult r;  // steps 0 without a token budget
};
// counts must be increasing. opt.target_days is not used.
std::vector<ScalingPoint> scaling(const core::Json& run, const std::string& source_name, const std::string& base_dir,
                                  const std::vector<int64_t>& counts, const SizingOptions& opt);
std::string scaling_text(const std::vector<ScalingPoint>& points);
core::Json scaling_json(const std::vector<ScalingPoint>& points);

// One budget sized on several hardware profiles (capacity --hardware a,b,c): each profile's
// answer, or why it has none.
struct HardwareSizing {
  std::string hardware;
  double usd_per_gpu_hour = 0;
  bool ok = false;       // sized (met or best effort); false: error says why not
  std::string error;
  SizingResult result;
};
// The profiles side by side, met first and then by cost (by GPU-hours when no price is given),
// with the best one named.
std::string sizing_comparison_text(const std::vector<HardwareSizing>& all);
core::Json sizing_comparison_json(const std::vector<HardwareSizing>& all);
// Prices: one number for every profile, or NAME=USD,... naming each profile once. Throws
// core::UserError naming --price and the profile.
std::map<std::string, double> parse_prices(const std::string& text, const std::vector<std::string>& hardware);

}  // namespace stepcast::plan
