#include "calibrate/measure.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "sim/core/stats.hpp"

namespace stepcast::calibrate {

Measurement summarize(std::vector<double> samples) {
  Measurement m;
  m.reps = static_cast<int>(samples.size());
  if (samples.empty()) return m;
  const size_t n = samples.size();
  m.median_s = core::median(samples);
  m.min_s = *std::min_element(samples.begin(), samples.end());
  m.mean_s = std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(n);
  if (n > 1 && m.mean_s > 0) {
    double var = 0;
    for (double x : samples) var += (x - m.mean_s) * (x - m.mean_s);
    var /= static_cast<double>(n - 1);
    m.rse = std::sqrt(var / static_cast<double>(n)) / m.mean_s;
  }
  return m;
}

Measurement measure(const std::function<double()>& run_once, const MeasureOptions& opt) {
  // The budget holds against the larger of the measured time and the wall time since the
  // warm-up began (fills, checks and host work between samples count too).
  const auto start = std::chrono::steady_clock::now();
  auto wall = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  for (int i = 0; i < opt.warmup; ++i) (void)run_once();
  std::vector<double> samples;
  double used = 0;
  for (;;) {
    const double t = run_once();
    samples.push_back(t);
    used += t;
    const auto n = static_cast<int>(samples.size());
    bool stop = n >= opt.max_reps;
    if (n >= opt.min_reps) stop = stop || summarize(samples).rse <= opt.target_rse || std::max(used, wall()) >= opt.budget_s;
    if (opt.agree) stop = opt.agree(stop);
    if (stop) break;
  }
  Measurement m = summarize(samples);
  m.converged = m.rse <= opt.target_rse;
  return m;
}

}  // namespace stepcast::calibrate
