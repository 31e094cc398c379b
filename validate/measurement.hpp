// stepcast validate: what an executor measured, and the comparison with the prediction.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/config/run_config.hpp"
#include "sim/core/json_reader.hpp"
#include "sim/core/stats.hpp"
#include "sim/engine/step_sim.hpp"
#include "validate/program.hpp"

namespace stepcast::validate {

using core::median;

constexpr size_t kCategories = static_cast<size_t>(Category::kCount);

// One timed instruction of the last measured step (for the measured trace).
struct TraceEvent {
  double start_s = 0, dur_s = 0;
  uint32_t name = 0;
  Category category = Category::kCompute;
  int32_t microbatch = -1, layer = -2;
};

struct RankMeasurement {
  int64_t rank = 0;
  int32_t stage = 0;
  std::vector<double> step_s;                             // this rank's wall time per measured step
  std::vector<std::array<double, kCategories>> category_s;  // per measured step
  double peak_allocated_bytes = 0;  // state + high-water of live activation/working buffers
  double peak_reserved_bytes = 0;   // the same including blocks cached for reuse
  double rss_delta_bytes = 0;       // process peak RSS minus RSS before the first allocation
  double workspace_bytes = 0;       // kernel operand pools (not model memory, like a GEMM workspace)
  std::vector<TraceEvent> trace;    // last measured step
  double trace_t0_s = 0;            // its start on the host's monotonic clock (shared by local ranks)
};

struct Measured {
  std::string backend;
  int steps = 0, warmup = 0;  // measured steps (over every round) and warm-up steps per round
  int rounds = 1;             // executions of the plan whose steps this holds (validate --rounds)
  std::vector<double> step_s;  // per measured step: the slowest rank's time
  std::vector<RankMeasurement> ranks;
  // A reference GEMM timed before the plan, before each measured step and after the last (each
  // the slowest rank's time); their median against the profile's prediction shows how far the
  // machine's speed drifted since it was calibrated.
  cost::GemmShape reference;
  std::vector<double> reference_samples_s;
  [[nodiscard]] double reference_s() const { return median(reference_samples_s); }
  [[nodiscard]] double median_step_s() const;
  [[nodiscard]] double min_step_s() const;
  [[nodiscard]] double max_step_s() const;
};

// A measurement as JSON and back (what validate journals per plan and round: every field,
// traces included, so a resumed run compares exactly what was measured). Reading back checks
// what later steps rely on (a positive count of rounds, one step time per measured step on
// every rank, finite non-negative times and bytes, trace categories that exist) and throws
// UserError naming the field; a value of the wrong JSON type throws nlohmann's exception.
core::Json measured_json(const Measured& m);
Measured measured_from_json(const core::Json& j);
// One rank's part of it: what each rank sends to rank 0 after the steps, and each entry of a
// journalled measurement's `ranks`.
core::Json rank_measurement_json(const RankMeasurement& r);
RankMeasurement rank_measurement_from_json(const core::Json& x);

// Rounds of one plan (validate --rounds) as one measurement: the step times, per-rank steps and
// categories and the reference samples of every round in order; peaks the largest of any round;
// the traces those of the last round. Throws UserError when the rounds disagree on backend,
// ranks or reference shape (only a journal written by another run can hold such rounds).
Measured merge_rounds(const std::vector<Measured>& rounds);

struct Comparison {
  std::string run;         // run file
  std::string profile;     // hardware profile used for the prediction
  std::string command;
  double predicted_step_s = 0, measured_step_s = 0;  // measured: median over steps
  double measured_min_s = 0, measured_max_s = 0;
  struct Phase {
    std::string name;
    double predicted_s = 0, measured_s = 0;
    // Communication phases: the part of the measured time spent waiting for the last member
    // of the group to arrive (from the last step's timestamps; -1 when not known). The
    // simulation's identical ranks arrive together, so its prediction is the transfer alone.
    double measured_wait_s = -1;
  };
  std::vector<Phase> phases;
  struct Memory {
    int64_t rank = 0;
    int32_t stage = 0;
    double predicted_bytes = 0, measured_bytes = 0, rss_delta_bytes = 0;
    double reserved_bytes = 0, workspace_bytes = 0;  // allocator incl. cached blocks; kernel operand pools
  };
  std::vector<Memory> memory;
  // The reference GEMM's time as the profile has it (its calibration's median sample where it
  // records one for this shape, else the cost model's) and as measured beside the plan's steps.
  double reference_predicted_s = 0, reference_measured_s = 0;
  std::string reference_baseline;  // "calibration samples" or "cost model"
  // The prediction with every compute operator scaled by the reference GEMM's measured over
  // predicted time: what the profile would say had it been measured at this moment (0: none).
  double drift_adjusted_step_s = 0;
  [[nodiscard]] double drift_adjusted_error() const {
    return drift_adjusted_step_s > 0 ? drift_adjusted_step_s / measured_step_s - 1.0 : 0.0;
  }
  [[nodiscard]] double step_error() const { return predicted_step_s / measured_step_s - 1.0; }
  [[nodiscard]] double worst_memory_error() const;
};

// The reference GEMM's expected seconds and where they come from: the profile's calibration
// median ("calibration samples") when it records this shape in the run's precision, else the
// cost model's time ("cost model").
std::pair<double, std::string> reference_baseline(const config::RunConfig& rc, const cost::GemmShape& g);

Comparison compare(const config::RunConfig& rc, const engine::SimResult& sim, const Measured& meas);

core::Json comparison_json(const config::RunConfig& rc, const Comparison& c, const Measured& m);
// The comparison back from its JSON (a plan validate --resume takes from the journal).
Comparison comparison_from_json(const core::Json& j);
std::string comparison_markdown(const config::RunConfig& rc, const Comparison& c, const Measured& m);

// Several plans validated together: the median and largest absolute step-time error and the
// largest memory error.
struct SuiteSummary {
  int plans = 0;
  double median_abs_step_error = 0, max_abs_step_error = 0, worst_memory_error = 0;
  double max_abs_reference_drift = 0;  // largest |profile / measured - 1| of the reference GEMM
  // The same errors at the machine's current speed (drift-adjusted prediction; a plan without a
  // reference GEMM counts with its plain error).
  double median_abs_drift_adjusted_error = 0, max_abs_drift_adjusted_error = 0;
};
SuiteSummary summarize(const std::vector<Comparison>& cs);
std::string suite_markdown(const std::vector<Comparison>& cs);

// Chrome / Perfetto trace of the measured step (one process per rank, one track per category).
std::string measured_trace_json(const config::RunConfig& rc, const Measured& m);

}  // namespace stepcast::validate
