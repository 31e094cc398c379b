// stepcast calibration: measurements -> the parameters the simulator consumes.
//
// GEMM: the cost model is t = F / (S * r(m) r(n) r(k)) + overhead with r(x) = x / (x + h)
// (sim/cost/compute). For each half-dimension h on a log grid, the rate S solving the
// least-squares problem in log space (relative errors weigh every shape alike) comes from Eigen;
// the h with the smallest residual wins. Collectives: per operation a size curve (bus bandwidth
// at each measured size), interpolated in log size by the simulator, plus an
// alpha-beta line t = a + b * bytes fitted by Eigen least squares for the report.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stepcast::calibrate {

struct GemmSample {
  double m = 0, n = 0, k = 0;
  double seconds = 0;
};

struct GemmFit {
  double rate = 0;       // S: FLOP/s of an infinitely large GEMM
  double half_dim = 0;   // h
  double overhead_s = 0; // per-call cost
  double rms_rel_error = 0;
};

GemmFit fit_gemm(const std::vector<GemmSample>& samples, double overhead_s);

// Several dtypes measured on the same shapes: one half-dimension shared by all (a hardware
// profile has one gemm_half_dim) and a rate per dtype, chosen together so the summed log-space
// residual over every dtype's samples is smallest. Each result carries the shared h and
// overhead and its own rate and rms error.
struct DtypeGemmSamples {
  std::string dtype;
  std::vector<GemmSample> samples;
};
struct DtypeGemmFit {
  std::string dtype;
  GemmFit fit;
};
std::vector<DtypeGemmFit> fit_gemm_dtypes(const std::vector<DtypeGemmSamples>& by_dtype, double overhead_s);
double gemm_model_seconds(const GemmFit& f, double m, double n, double k);

struct CollSample {
  double bytes = 0;      // message size (nccl-tests convention)
  double seconds = 0;
};

struct CollFit {
  std::string op;
  int64_t ranks = 0;
  double bus_factor = 1.0;                          // nccl-tests bus factor used for `curve`
  double plateau_busbw = 0;                         // bytes/s, the best measured
  std::vector<std::pair<double, double>> curve;     // (bytes, bus bandwidth in bytes/s), ascending
  double alpha_s = 0, beta_s_per_byte = 0;          // least-squares line
};

// bus_factor: the nccl-tests bus factor of the operation for this group size.
CollFit fit_collective(const std::string& op, int64_t ranks, double bus_factor, std::vector<CollSample> samples);

// A held-out collective size checked against its fitted neighbours within each pass: pass p's
// time at `bytes` predicted from the same pass's times at `lo_bytes` and `hi_bytes` the way the
// cost model reads a profile's curve (log time linear in log size), as predicted / measured - 1
// for every pass all three were measured in. The three are measured moments apart in every
// pass, so a change of the machine's speed between passes (which the per-size medians of a
// profile mix) cancels; what remains is the interpolation's own error and the noise within a
// pass. Requires lo_bytes < bytes < hi_bytes and at least one common pass.
std::vector<double> within_pass_errors(double lo_bytes, const std::vector<double>& lo_runs, double hi_bytes, const std::vector<double>& hi_runs,
                                       double bytes, const std::vector<double>& runs);

// A held-out GEMM's times with each pass's speed change taken out: pass p's time divided by
// how much slower than their medians (the profile's values) the fitted shapes measured just
// before and after it ran in that pass (the geometric mean of the two ratios), for every pass
// all three were measured in. The cost model's prediction against them checks the model with
// the machine held at the profile's speed. Requires a common pass.
std::vector<double> speed_adjusted_runs(const std::vector<double>& before_runs, const std::vector<double>& after_runs, const std::vector<double>& runs);

// Compute-communication interference: a GEMM that takes `alone_s` by itself and `beside_s` while
// a collective runs on another stream lost 1 - alone / beside of the GPU; as SMs of `sm_count`
// (the profile's efficiency.collective_sms). Clamped to [0, 0.9 sm_count]: a GEMM measured
// faster beside the collective (noise) lost nothing.
double collective_sms_from(double alone_s, double beside_s, int sm_count);

}  // namespace stepcast::calibrate
