// stepcast calibration on CPUs: Eigen GEMMs, memory bandwidth and MPI collectives across the
// local processes (one process plays one GPU), measured with the shared timing discipline,
// fitted and written as a hardware profile the simulator reads. A held-out set of sizes (not
// used by the fit) is measured too and predicted back through the simulator's cost model.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "calibrate/fit.hpp"
#include "calibrate/measure.hpp"
#include "sim/core/json_reader.hpp"

namespace stepcast::calibrate {

struct SuiteOptions {
  double budget_per_benchmark_s = 0.4;
  std::function<void(const std::string&)> progress;  // one line per benchmark (rank 0)
  std::string command;                               // provenance
};

struct HeldOut {
  std::string what;          // "gemm 512x768x768", "all_reduce 262144 B"
  double measured_s = 0, predicted_s = 0;
  double spread = 0;          // (max - min) / median over the passes that measured it
  [[nodiscard]] double error() const { return predicted_s / measured_s - 1.0; }
};

struct SuiteResult {
  int ranks = 1;
  core::Json profile;        // the hardware profile (parse_hardware reads it)
  GemmFit gemm;
  std::vector<GemmSample> gemm_samples;  // the fitted shapes as measured
  double bytes_per_element = 4;          // GEMM operand size (fp32 on CPUs, bf16 on GPUs)
  double copy_bandwidth = 0; // bytes/s moved (read + write)
  double optimizer_rate = 0; // parameters/s of the Adam kernel (0: not measured)
  std::vector<CollFit> collectives;
  std::vector<HeldOut> held_out;  // filled on rank 0
};

// Runs on every rank (MPI initialised by the caller when size > 1).
SuiteResult run_cpu_suite(int rank, int size, const SuiteOptions& opt);

// Markdown report of a suite (fit, held-out comparison).
std::string suite_markdown(const SuiteResult& r);
// Self-contained HTML: the measured GEMMs against the roofline (attainable FLOP/s =
// min(rate, bandwidth x arithmetic intensity)), collective bus bandwidth by size, held-out table.
std::string suite_html(const SuiteResult& r);

}  // namespace stepcast::calibrate
