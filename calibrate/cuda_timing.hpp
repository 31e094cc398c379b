// What stepcast's CUDA translation units share: the calibration stream, CUDA-event timing,
// device memory that frees itself, and the random (never zero) values benchmarks fill with.
// CUDA-only: included by calibrate/cuda_device.cu and calibrate/cuda_attention.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "calibrate/cuda_check.hpp"

namespace stepcast::calibrate::cuda {

// The stream every calibration kernel runs on (created by open()).
cudaStream_t current_stream();

// Two events around work on a stream; seconds() waits for the second and returns the gap.
struct Events {
  cudaEvent_t a{}, b{};
  Events() {
    cudacheck::check(cudaEventCreate(&a), "event");
    cudacheck::check(cudaEventCreate(&b), "event");
  }
  ~Events() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  double seconds() {
    float ms = 0;
    cudacheck::check(cudaEventSynchronize(b), "event sync");
    cudacheck::check(cudaEventElapsedTime(&ms, a, b), "elapsed");
    return ms * 1e-3;
  }
};

// Device memory freed when it goes out of scope, also when a measurement throws.
template <typename T>
struct DeviceArray {
  T* p = nullptr;
  explicit DeviceArray(size_t n) { cudacheck::check(cudaMalloc(&p, n * sizeof(T)), "malloc"); }
  ~DeviceArray() { cudaFree(p); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
};

// Deterministic values in [0.5, 1.5) from a hash of the index (random, never zero).
__device__ __host__ inline float hash_value(size_t i, unsigned seed) {
  unsigned x = static_cast<unsigned>(i) * 2654435761u ^ seed;
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return 0.5f + static_cast<float>(x & 0xffff) / 65536.0f;
}

}  // namespace stepcast::calibrate::cuda
