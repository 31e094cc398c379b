// stepcast validate: runs every rank's step program on real hardware (one process per rank
// under mpirun) and measures it.
//
// The loop is backend-independent: a barrier starts every step; before each instruction the
// backend takes a timestamp (the CPU's clock, or a CUDA event on the device's stream) and runs
// it; after the step the backend completes outstanding work and reports the time between
// consecutive timestamps, which is booked to the instruction's category (compute, TP,
// pipeline, DP, optimizer). A rank's step time is its wall time from the barrier to the end of
// the step; the step's time is the slowest rank's. Memory: a caching allocator (freed blocks
// are kept for reuse, as a GPU caching allocator does) holds the model state and every buffer
// the program allocates and reports the high-water mark of live bytes; allocating past the
// profile's memory, or a failed allocation, ends the run with "does not fit: needed X, had Y".
//
// Backends: CPU (Eigen GEMMs on one thread per rank, memcpy passes, MPI collectives and
// pipeline transfers on communicators split from the rank mesh; cpu_backend.cpp) and CUDA
// (cuBLAS GEMMs, device copies, NCCL collectives on per-group communicators, pipeline sends on
// their own stream; cuda_backend.cpp, built with the CUDA toolkit and NCCL).
//
// Failure handling: a watchdog thread per rank ends the process (exit code 124) with a message
// naming the rank, the step and the instruction it is stuck in when no instruction completes
// for `timeout_s`; mpirun then ends the other ranks. STEPCAST_VALIDATE_FAULT=hang:R or die:R
// makes rank R hang or die in its first step (used by the tests).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sim/config/run_config.hpp"
#include "validate/measurement.hpp"
#include "validate/program.hpp"

namespace stepcast::validate {

struct ExecOptions {
  int steps = 5;
  int warmup = 1;
  double timeout_s = 120;
};

struct MemoryStats {
  double peak_allocated = 0, peak_reserved = 0, workspace = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  // Communicators and workspace sized from the program (collective over every rank).
  virtual void prepare(const config::RunConfig& rc, const Program& prog) = 0;
  // The reference GEMM timed before each plan and between its steps (a shape that runs near the
  // device's best rate): the median of `reps` runs' seconds on this rank, after one untimed run
  // (every rank runs it at the same time).
  [[nodiscard]] virtual cost::GemmShape reference_shape() const = 0;
  virtual double reference_gemm_s(const cost::GemmShape& g, int reps) = 0;
  virtual void allocate_state(const Program& prog) = 0;
  virtual void run(const Instr& in) = 0;
  // mark(i) before instruction i and mark(n) after the last one.
  virtual void mark(size_t i) = 0;
  // Completes outstanding work; returns seconds spent waiting for pipeline sends to finish.
  virtual double finish_step() = 0;
  // After finish_step: seconds from mark i to mark i + 1, and from mark 0 to mark i.
  virtual double elapsed(size_t i) = 0;
  virtual double since_start(size_t i) = 0;
  [[nodiscard]] virtual MemoryStats memory() const = 0;
};

// Collective over MPI_COMM_WORLD: every rank calls it; rank 0 returns every rank's measurement.
Measured execute(const config::RunConfig& rc, const ExecOptions& opt, Backend& backend);

std::unique_ptr<Backend> make_cpu_backend(int64_t rank);
// Null when this build has no CUDA backend.
std::unique_ptr<Backend> make_cuda_backend(int64_t rank);

// A caching allocator over raw allocate / release functions: blocks freed by the program are
// kept by size and reused; new blocks are written once so their pages are resident.
class Arena {
 public:
  using RawAlloc = std::function<void*(size_t)>;  // returns nullptr when out of memory
  using RawFree = std::function<void(void*)>;
  Arena(double capacity, int64_t rank, RawAlloc alloc, RawFree release);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  void* alloc(int32_t id, double bytes);
  void free(int32_t id);
  [[nodiscard]] double peak() const { return peak_; }
  [[nodiscard]] double peak_reserved() const { return peak_reserved_; }

 private:
  double capacity_;
  int64_t rank_;
  RawAlloc raw_alloc_;
  RawFree raw_free_;
  double live_ = 0, peak_ = 0, reserved_ = 0, peak_reserved_ = 0;
  std::vector<std::pair<size_t, void*>> blocks_;
  std::multimap<size_t, void*> cache_;
};

}  // namespace stepcast::validate
