// stepcast calibration: result checks of the measured collectives, shared by the MPI (CPU) and
// NCCL (CUDA) suites. After a size is timed, its inputs are refilled with check values, the
// operation runs once more, and sampled output elements are compared with what the operation
// must produce. Check values are small integers (1..4), so sums over up to 64 ranks are exact
// even in bf16; the timed runs use the same never-zero values.
//
// This header is C++17 and also compiled by nvcc (the device fill kernel calls the value
// function); the checking itself runs on the host.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#if defined(__CUDACC__)
#define STEPCAST_HOST_DEVICE __host__ __device__
#else
#define STEPCAST_HOST_DEVICE
#endif

namespace stepcast::calibrate {

// The input value of element `i` on `rank`: an integer in 1..4 from a hash of both.
STEPCAST_HOST_DEVICE inline float coll_check_value(int rank, size_t i) {
  unsigned x = static_cast<unsigned>(i) * 2654435761u ^ (static_cast<unsigned>(rank) * 0x9e3779b9u + 0x7f4a7c15u);
  x ^= x >> 15;
  x *= 0x2c1b3c6du;
  x ^= x >> 12;
  return 1.0f + static_cast<float>(x & 3u);
}

// Elements of the output buffer of `op` on one rank: `count` is the operation's element count
// in the nccl-tests convention (bytes / element size); reduce_scatter outputs count / ranks.
size_t coll_output_count(const std::string& op, size_t count, int ranks);

// What output element `j` of `op` must hold on `rank` of `ranks`, when every rank's input
// element i holds coll_check_value(rank, i). The root of broadcast is rank 0; send_recv pairs
// rank r with r ^ 1 (a rank without a partner keeps `unset`, what its output held before).
double coll_expected(const std::string& op, int rank, int ranks, size_t count, size_t j, double unset = 0.0);

// Indices checked for an output of n elements: up to `samples` spread evenly, always the first
// and the last (so chunk boundaries of every peer are covered for realistic sizes).
std::vector<size_t> coll_sample_indices(size_t n, size_t samples = 4096);

// Compares values[i] (output element indices[i]) with coll_expected within a relative
// tolerance; returns "" when all match, else one line naming the operation, the element and
// the two values.
std::string coll_verify(const std::string& op, int rank, int ranks, size_t count, const std::vector<size_t>& indices,
                        const std::vector<double>& values, double rel_tol, double unset = 0.0);

}  // namespace stepcast::calibrate
