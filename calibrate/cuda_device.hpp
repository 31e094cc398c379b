// stepcast calibration: the device side of the CUDA suite behind a narrow C++17 interface, so
// the CUDA translation unit needs nothing but CUDA, cuBLAS and NCCL; all host logic (sweeps,
// stopping, fitting, the profile) stays in ordinary C++ and is tested without a GPU.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <utility>

#include "calibrate/measure.hpp"

namespace stepcast::calibrate::cuda {

struct DeviceInfo {
  std::string name;
  double memory_bytes = 0;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;  // compute capability
};

// Number of visible GPUs (0 when none or no driver).
int device_count();
// Selects the device and creates its stream and cuBLAS handle. Throws std::runtime_error.
DeviceInfo open(int device);
void close();

// Time of one GEMM C[m x n] = A[m x k] B[k x n] with fp32 accumulation, measured with CUDA
// events under the shared stopping rules; inputs rotate over three random sets and the result
// is checked against a host dot product (throws on mismatch). dtype: bf16, fp16 (16-bit result),
// tf32, fp32 (cublasGemmEx), fp8 (cuBLASLt: E4M3 operands, bf16 result; compute capability 8.9+).
Measurement time_gemm(const std::string& dtype, int m, int n, int k, const MeasureOptions& mo);
// Time of a memory-bound kernel on bf16 tensors of rows x cols: "rmsnorm" (one block a row),
// "swiglu" (silu(a) * b) or "add"; inputs alternate between two sets, the first output is
// checked against the host.
Measurement time_elementwise(const std::string& kernel, int rows, int cols, const MeasureOptions& mo);
// Device-to-device copy bandwidth (bytes read + written per second) of a 1 GiB buffer.
double copy_bandwidth(const MeasureOptions& mo);
// Median seconds of one pinned-host copy of `bytes` to the device (to_device) or back, on the
// measuring stream.
double host_copy_seconds(size_t bytes, bool to_device, const MeasureOptions& mo);

// Causal attention (head dimension 128) forward and backward with stepcast's own tiled kernels
// (calibrate/cuda_attention.cu: FlashAttention-2's algorithm on WMMA tensor cores, not a tuned
// library kernel): median seconds of each over `bh` = batch x heads sequences of `seq` tokens
// (a multiple of 64). The first call checks O, dQ, dK and dV of a 256-token head against a
// double-precision host reference (throws on mismatch).
struct AttentionTiming {
  double forward_s = 0, backward_s = 0;
};
AttentionTiming time_attention(int bh, int seq, const MeasureOptions& mo);

// NCCL: the group's first rank makes the id (128 bytes), the caller broadcasts it (MPI), every
// rank of the group inits. Each init returns the communicator's index and selects it; the
// collectives below run on the selected one. nccl_finalize destroys them all.
void nccl_unique_id(char id[128]);
int nccl_init(int rank, int size, const char id[128]);
void nccl_select(int comm);
void nccl_finalize();
// Seconds per operation over a batch of back-to-back operations (events), on the selected
// communicator (`rank` and `size` within it); inputs and outputs rotate through slots of up to
// 256 MiB, and after timing the operation runs once on check values (calibrate/coll_check) and
// sampled outputs are verified (throws on mismatch). `max_over_ranks`
// turns this rank's time into the slowest rank's (an MPI all-reduce), so every rank stops
// after the same repetitions.
double time_collective(const std::string& op, size_t bytes, int rank, int size, const MeasureOptions& mo,
                       const std::function<void()>& barrier, const std::function<double(double)>& max_over_ranks);
std::string nccl_version();
// "CUDA runtime 13.0, driver 13.0, cuBLAS 13.0.0" for the profile's provenance.
std::string toolkit_versions();
// Compute-communication interference: the median time of a batch of bf16 GEMMs (m x n x k) on
// the compute stream while `bytes` all-reduces run back to back on a second stream of every
// rank, covering the whole batch, and the same batch alone. Returns {alone, beside} seconds
// per GEMM, each the slowest rank's (so every rank stops after the same repetitions).
std::pair<double, double> gemm_beside_all_reduce(int m, int n, int k, size_t bytes, const MeasureOptions& mo,
                                                 const std::function<void()>& barrier,
                                                 const std::function<double(double)>& max_over_ranks);

}  // namespace stepcast::calibrate::cuda
