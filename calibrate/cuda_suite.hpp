// stepcast calibration on NVIDIA GPUs: cuBLAS GEMMs in bf16/fp16/fp8-capable shapes, HBM copy
// bandwidth and NCCL collectives, one process per GPU under mpirun (NCCL's unique id travels
// over MPI). Same timing discipline and fitting as the CPU suite; times come from CUDA events.
// Built only when nvcc, cuBLAS and NCCL are found at configure time (STEPCAST_HAVE_CUDA).
#pragma once

#include "calibrate/cpu_suite.hpp"

namespace stepcast::calibrate {

// Throws core::UserError when no GPU is visible.
SuiteResult run_cuda_suite(int rank, int size, const SuiteOptions& opt);

}  // namespace stepcast::calibrate
