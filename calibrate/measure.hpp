// stepcast calibration: timing discipline shared by every backend.
//
// A benchmark is warmed up, then repeated until the relative standard error of its mean
// falls below a target or its time budget runs out (never fewer than min_reps); the median is
// the reported time (robust to the odd preempted run). The clock is injected so the stopping
// logic is tested without hardware; backends pass a function that runs the kernel once and
// returns its duration measured the device's way (CUDA events, steady_clock on CPUs).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace stepcast::calibrate {

struct MeasureOptions {
  int warmup = 2;
  int min_reps = 5;
  int max_reps = 200;
  double target_rse = 0.02;     // stop when stderr(mean) / mean is below this
  double budget_s = 0.5;        // stop when the repetitions used this much time (measured or wall, the larger)
  // Benchmarks run by several processes in lockstep (collectives) must stop after the same
  // repetition on all of them, or one waits forever in an operation the others never call: the
  // wall clock behind the budget is each process's own. agree(stop) is called once per
  // repetition on every process and returns the common decision (any process's stop stops all).
  std::function<bool(bool)> agree;
};

struct Measurement {
  double median_s = 0, mean_s = 0, min_s = 0, rse = 0;
  int reps = 0;
  bool converged = false;       // rse target reached (false: stopped on budget or max_reps)
};

// run_once() executes the benchmark once and returns its duration in seconds.
Measurement measure(const std::function<double()>& run_once, const MeasureOptions& opt = {});

// Summary statistics of a sample (median of sorted copy; rse of the mean).
Measurement summarize(std::vector<double> samples);

}  // namespace stepcast::calibrate
