// stepcast validate, CPU backend: runs a rank's step program with Eigen GEMMs (one thread per
// rank, as the CPU calibration measured them), memcpy memory passes and MPI collectives and
// pipeline transfers over communicators built from the rank mesh.
//
// Timing: a barrier starts every step; each instruction is timed and booked to its category;
// a rank's step time is its wall time to the end of the step, the step's time the slowest
// rank's. Memory: a caching allocator (freed blocks are kept for reuse, as a GPU caching
// allocator does) holds the model state and every buffer the program allocates; it reports
// the high-water mark of live bytes. Allocating past the profile's memory, or a failed
// allocation, ends the run with "does not fit: needed X, had Y".
//
// Failure handling: a watchdog thread per rank ends the process (exit code 124) with a message
// naming the rank, the step and the instruction it is stuck in when no instruction completes
// for `timeout_s`; mpirun then ends the other ranks. STEPCAST_VALIDATE_FAULT=hang:R or die:R
// makes rank R hang or die in its first step (used by the tests).
#pragma once

#include "sim/config/run_config.hpp"
#include "validate/measurement.hpp"
#include "validate/program.hpp"

namespace stepcast::validate {

struct ExecOptions {
  int steps = 5;
  int warmup = 1;
  double timeout_s = 120;
};

// Collective over MPI_COMM_WORLD: every rank calls it; rank 0 returns every rank's measurement.
Measured execute_cpu(const config::RunConfig& rc, const ExecOptions& opt);

}  // namespace stepcast::validate
