// Error checks shared by stepcast's CUDA translation units: a failed CUDA, cuBLAS or NCCL call
// becomes a std::runtime_error naming the call.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include "calibrate/nccl_api.hpp"

#include <stdexcept>
#include <string>

namespace stepcast::cudacheck {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}
inline void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string("cuBLAS: ") + what + " failed (status " + std::to_string(static_cast<int>(s)) + ")");
}
inline void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw std::runtime_error(std::string("NCCL: ") + what + ": " + ncclGetErrorString(r));
}

}  // namespace stepcast::cudacheck
