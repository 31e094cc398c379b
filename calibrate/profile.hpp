// stepcast calibration: what every backend shares after measuring. The measured numbers become
// a hardware profile the simulator reads (GEMM rate and half-dimension as the dense peak with
// gemm_max 1, the copy bandwidth, one fabric tier with per-operation bus-bandwidth curves), and
// the held-out measurements are predicted back through the cost model with that profile.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "calibrate/cpu_suite.hpp"
#include "sim/config/hardware.hpp"

namespace stepcast::calibrate {

// The stepcast revision (git describe at build time) and compiler, for provenance.
std::string build_description();

// nccl-tests' bus factor of an operation by name (broadcast and send/recv count 1).
double op_bus_factor(const std::string& op, int64_t ranks);

// The device side of a profile, as the backend knows it.
struct DeviceDescription {
  std::string name;                  // profile name
  std::string device;                // CPU model or GPU name
  std::string description;
  std::vector<std::string> sources;  // provenance, measurement notes
  std::vector<std::string> dtypes;   // dtypes given the fitted GEMM rate
  double memory_bytes = 0;
  int sm_count = 1;
  double collective_sms = 0;         // measured interference (0: collectives never run beside compute)
  double attention_tile = 1024;      // attention efficiency = GEMM efficiency at this width ...
  double attention_fwd = 0, attention_bwd = 0;  // ... unless measured (fraction of the bf16 peak)
  std::string fabric_name;
  core::Json network;                // the profile's network object (not measured)
};

// efficiency.memory_bound from measured memory-bound kernels: the median of their achieved
// bytes per second over the copy bandwidth, clamped to [0.05, 1] (1 when none were measured).
double memory_bound_efficiency(const std::vector<KernelSample>& kernels, double copy_bandwidth);

// Builds r.profile from r's fits (command, date and build_description() lead its sources).
void write_profile(SuiteResult& r, const DeviceDescription& d, double overhead_s, const std::string& command);

// `spread`: how far the passes that measured the benchmark disagreed, (max - min) / median (0
// when it was measured once): the noise any prediction of it is judged against.
struct HeldGemm {
  int m = 0, n = 0, k = 0;
  double seconds = 0;
  double spread = 0;
  std::string dtype;  // empty: the dtype predict_held_out is given
  std::vector<double> adjusted_runs;  // speed_adjusted_runs against its fitted neighbours (empty: none)
};
struct HeldCollective {
  std::string op;
  size_t bytes = 0;
  double seconds = 0;
  double spread = 0;
  std::vector<double> within_pass_errors;  // against the fitted neighbours (empty: none)
};

// Parses r.profile and predicts every held-out measurement with the simulator's cost model
// (GEMMs in their own dtype or else `dtype`, collectives over all r.ranks processes of one node) into r.held_out.
void predict_held_out(SuiteResult& r, const std::vector<HeldGemm>& gemms, hw::Dtype dtype,
                      const std::vector<HeldCollective>& collectives);

}  // namespace stepcast::calibrate
