// stepcast calibration on CPUs: Eigen GEMMs, memory bandwidth and MPI collectives across the
// local processes (one process plays one GPU), measured with the shared timing discipline,
// fitted and written as a hardware profile the simulator reads. A held-out set of sizes (not
// used by the fit) is measured too and predicted back through the simulator's cost model.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "calibrate/cpu_kernels.hpp"
#include "calibrate/fit.hpp"
#include "calibrate/measure.hpp"
#include "sim/core/stats.hpp"
#include "sim/core/json_reader.hpp"

namespace stepcast::calibrate {

struct SuiteOptions {
  double budget_per_benchmark_s = 0.4;
  // Whole-run limit in seconds (0: none). The CUDA suite always measures the bf16 GEMMs, the
  // copy, the memory-bound kernels and the whole group's collectives; once the limit has passed
  // it skips what is left of the rest (other dtypes, attention, smaller groups, interference)
  // and lists it as not measured. The CPU suite measures everything.
  double time_limit_s = 0;
  std::function<void(const std::string&)> progress;  // one line per benchmark (rank 0)
  std::string command;                               // provenance
  // The measurement journal (sim/core/journal.hpp): written by rank 0 at journal_path (empty: none);
  // journal_previous is an interrupted run's journal to resume from (read by rank 0, shared
  // with every rank by the suite).
  std::string journal_path, journal_previous;
};

struct HeldOut {
  std::string what;          // "gemm 512x768x768", "all_reduce 262144 B"
  double measured_s = 0, predicted_s = 0;
  double spread = 0;          // (max - min) / median over the passes that measured it
  // Measured in passes: predicted / measured - 1 in each pass with the machine held at one
  // speed (within_pass_errors and speed_adjusted_runs, fit.hpp); empty where not measured so.
  std::vector<double> within_pass_errors;
  [[nodiscard]] double error() const { return predicted_s / measured_s - 1.0; }
  [[nodiscard]] std::optional<double> within_pass() const {
    if (within_pass_errors.empty()) return std::nullopt;
    return core::median(within_pass_errors);
  }
  // How many of those per-pass errors are within `tolerance`.
  [[nodiscard]] size_t passes_within(double tolerance) const {
    return static_cast<size_t>(
        std::count_if(within_pass_errors.begin(), within_pass_errors.end(), [&](double e) { return std::abs(e) <= tolerance; }));
  }
  // Within `tolerance` against the profile, or within it with the machine held at one speed
  // (the profile's medians then mixed the machine's speeds between passes).
  [[nodiscard]] bool agrees(double tolerance) const {
    const auto w = within_pass();
    return std::abs(error()) <= tolerance || (w && std::abs(*w) <= tolerance);
  }
  // Too noisy to judge at `tolerance`: its own passes disagree by more than it, or some pass
  // with the machine held at one speed was within it (an error of the model shows in every
  // pass).
  [[nodiscard]] bool unresolved(double tolerance) const {
    return spread > tolerance || passes_within(tolerance) > 0;
  }
};

// GEMMs of one dtype: the shapes as measured and their fit (the half-dimension is shared by
// every dtype of a suite; the rate is this dtype's).
struct DtypeGemm {
  std::string dtype;               // bf16, fp16, fp8, tf32, fp32
  double bytes_per_element = 2;    // operand size (fp8 operands write a 16-bit result)
  GemmFit fit;
  std::vector<GemmSample> samples;
};

// A memory-bound kernel as measured: what it moves and computes, and its median time.
struct KernelSample {
  std::string name;                // "rmsnorm 16384x4096"
  double bytes = 0, flops = 0, seconds = 0;
};

// Causal attention as measured (forward and backward of `bh` sequences of `seq` tokens, head
// dimension `head_dim`), with the kernel that ran it.
struct AttentionSample {
  std::string kernel;
  int bh = 0, seq = 0, head_dim = 0;
  double forward_s = 0, backward_s = 0;
  // Causal forward FLOPs (2 x bh x seq^2 x 2 head_dim / 2); the backward does 2.5 times these.
  [[nodiscard]] double forward_flops() const { return 2.0 * bh * static_cast<double>(seq) * seq * head_dim; }
};

struct SuiteResult {
  std::string backend = "cpu";  // cpu or cuda
  int ranks = 1;
  core::Json profile;        // the hardware profile (parse_hardware reads it)
  GemmFit gemm;              // the reference dtype's fit (bf16 on GPUs, fp32 on CPUs)
  std::vector<GemmSample> gemm_samples;  // the fitted shapes as measured, reference dtype
  double bytes_per_element = 4;          // GEMM operand size (fp32 on CPUs, bf16 on GPUs)
  // Every dtype measured (GPUs); empty: the reference fit stands for every dtype of the profile.
  std::vector<DtypeGemm> gemm_dtypes;
  std::vector<KernelSample> elementwise;  // norm, activation, residual kernels (GPUs)
  std::vector<AttentionSample> attention; // GPUs
  std::vector<std::string> not_measured;  // benchmarks skipped, each with the reason
  double copy_bandwidth = 0; // bytes/s moved (read + write)
  double optimizer_rate = 0; // parameters/s of the Adam kernel (0: not measured)
  // The reference GEMM (calibrate/cpu_kernels.hpp) sampled across the run (slowest rank each);
  // written as the profile's calibration.reference_gemm (median) when not empty.
  ReferenceGemm reference_gemm;
  std::vector<double> reference_gemm_samples_s;
  // A GPU node's host side (calibrate/host_side.hpp), written as the profile's `host` block
  // when `link` was measured: physical memory, the node's memory bandwidth (bytes/s moved by
  // every process's cores at once) and Adam rate (parameters/s, the same), and the GPU-host
  // pinned copy rate per GPU while every GPU copies (the slower direction).
  struct Host {
    double memory_bytes = 0, memory_bandwidth = 0, optimizer_rate = 0, link = 0;
  } host;
  // Per operation and group size (CollFit::ranks): groups of consecutive ranks, all groups of a
  // size measured at once; the CPU suite measures the whole world only.
  std::vector<CollFit> collectives;
  std::vector<HeldOut> held_out;  // filled on rank 0
  // Measurements taken from an interrupted run's journal, and taken by this run.
  int reused_measurements = 0, new_measurements = 0;
};

// Runs on every rank (MPI initialised by the caller when size > 1).
SuiteResult run_cpu_suite(int rank, int size, const SuiteOptions& opt);

// Markdown report of a suite (fit, held-out comparison).
std::string suite_markdown(const SuiteResult& r);
// Self-contained HTML: the measured GEMMs against the roofline (attainable FLOP/s =
// min(rate, bandwidth x arithmetic intensity)), collective bus bandwidth by size, held-out table.
std::string suite_html(const SuiteResult& r);

}  // namespace stepcast::calibrate
