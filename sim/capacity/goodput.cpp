#include "sim/capacity/goodput.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "sim/core/error.hpp"

namespace stepcast::capacity {

double daly_wall_time(double solve_s, double tau, double delta, double restart_s, double mtbf_s) {
  const double x = (tau + delta) / mtbf_s + restart_s / mtbf_s;
  // Past e^700 the run is interrupted long before any segment completes: it never finishes.
  if (x > 700.0) return std::numeric_limits<double>::infinity();
  return mtbf_s * std::exp(restart_s / mtbf_s) * std::expm1((tau + delta) / mtbf_s) * solve_s / tau;
}

double daly_optimal_interval(double delta, double mtbf_s) {
  if (delta >= 2.0 * mtbf_s) return mtbf_s;
  const double r = delta / (2.0 * mtbf_s);
  return std::sqrt(2.0 * delta * mtbf_s) * (1.0 + std::sqrt(r) / 3.0 + r / 9.0) - delta;
}

Goodput expected_goodput(const ReliabilityInput& in, double step_s, double steps, int64_t gpus, double state_bytes, double load_bytes) {
  auto positive = [](double v, const char* what) {
    if (!(v > 0) || !std::isfinite(v)) throw core::UserError(std::string(what) + " must be positive, got " + std::to_string(v));
  };
  positive(in.gpu_mtbf_hours, "--mtbf-gpu-hours");
  if (!(in.storage_bytes_per_s >= 0) || !std::isfinite(in.storage_bytes_per_s)) {
    throw core::UserError("--storage-bw must be positive, got " + std::to_string(in.storage_bytes_per_s));
  }
  if (!(in.restart_overhead_s >= 0) || !std::isfinite(in.restart_overhead_s)) {
    throw core::UserError("--restart must be zero or positive, got " + std::to_string(in.restart_overhead_s));
  }
  if (in.checkpoint_every_steps < 0) throw core::UserError("--checkpoint-every must be positive, got " + std::to_string(in.checkpoint_every_steps));
  positive(step_s, "step time");
  positive(steps, "steps");
  positive(static_cast<double>(gpus), "GPUs");

  Goodput g;
  g.cluster_mtbf_s = in.gpu_mtbf_hours * 3600.0 / static_cast<double>(gpus);
  g.state_bytes = state_bytes;
  g.storage_bytes_per_s = in.storage_bytes_per_s > 0 ? in.storage_bytes_per_s : kLlama3StorageBytesPerSPerGpu * static_cast<double>(gpus);
  g.save_s = in.checkpoint_save_s >= 0 ? in.checkpoint_save_s : state_bytes / g.storage_bytes_per_s;
  g.load_s = (load_bytes >= 0 ? load_bytes : state_bytes) / g.storage_bytes_per_s;
  g.restart_s = in.restart_overhead_s + g.load_s;
  g.solve_s = step_s * steps;
  const double M = g.cluster_mtbf_s;
  auto wall = [&](int64_t k) { return daly_wall_time(g.solve_s, step_s * static_cast<double>(k), g.save_s, g.restart_s, M); };
  if (in.checkpoint_every_steps > 0) {
    g.interval_steps = in.checkpoint_every_steps;
    g.optimal_interval = false;
  } else {
    // Daly's optimum in whole steps: the better of the step counts either side of it, and never
    // more than the run.
    const double k = std::min(daly_optimal_interval(g.save_s, M) / step_s, std::ceil(steps));
    const auto lo = std::max<int64_t>(1, static_cast<int64_t>(std::floor(k)));
    const int64_t hi = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(k)));
    g.interval_steps = wall(hi) < wall(lo) ? hi : lo;
  }
  g.interval_s = step_s * static_cast<double>(g.interval_steps);
  g.wall_s = wall(g.interval_steps);
  g.goodput = std::isfinite(g.wall_s) ? g.solve_s / g.wall_s : 0.0;
  g.interruptions = g.wall_s / M;
  g.checkpoints = std::floor(steps / static_cast<double>(g.interval_steps));
  return g;
}

}  // namespace stepcast::capacity
