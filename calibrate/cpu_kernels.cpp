#include "calibrate/cpu_kernels.hpp"

#include <Eigen/Dense>
#include <chrono>
#include <cmath>
#include <cstring>

#include "sim/core/stats.hpp"

namespace stepcast::calibrate {

void adam_step(float* w, const float* g, float* m, float* v, size_t n) {
  const float b1 = 0.9f, b2 = 0.95f, lr = 1e-4f, eps = 1e-8f;
  const float c1 = 1.0f / (1.0f - b1), c2 = 1.0f / (1.0f - b2);
  for (size_t i = 0; i < n; ++i) {
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    w[i] -= lr * (m[i] * c1) / (std::sqrt(v[i] * c2) + eps);
  }
}

double time_reference_gemm(const float* a, const float* b, float* c, const ReferenceGemm& g, int reps) {
  const Eigen::Map<const Eigen::MatrixXf> A(a, g.m, g.k), B(b, g.k, g.n);
  Eigen::Map<Eigen::MatrixXf> C(c, g.m, g.n);
  std::vector<double> t;
  for (int i = 0; i <= reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    C.noalias() = A * B;
    if (i > 0) t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return core::median(t);
}

RotatingBuffer::RotatingBuffer(size_t bytes, unsigned char fill) : data_(bytes) {
  std::memset(data_.data(), fill, bytes);
}

char* RotatingBuffer::next(size_t n) {
  if (n >= data_.size()) {
    off_ = 0;
    data_.resize(n);
    return data_.data();
  }
  if (off_ + n > data_.size()) off_ = 0;
  char* p = data_.data() + off_;
  off_ += (n + 63) / 64 * 64;
  return p;
}

}  // namespace stepcast::calibrate
