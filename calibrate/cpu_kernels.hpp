// CPU kernels shared by the calibration suite and the CPU executor of stepcast validate, so
// the simulator is fed the rates of exactly the kernels a validation run executes.
#pragma once

#include <cstddef>
#include <vector>

namespace stepcast::calibrate {

// One Adam step (fp32 moments, bias-corrected, no master copy) over n parameters: reads the
// weight, gradient and both moments, writes the weight and the moments (28 bytes moved per
// parameter). On CPUs the square root and division make it compute-bound.
void adam_step(float* w, const float* g, float* m, float* v, size_t n);

// The reference GEMM by which calibration and validation read the machine's speed at a moment:
// C = A B in fp32 with A m x k and B k x n, one untimed run, then the median seconds of `reps`
// timed runs. Calibration samples it across its whole run and records their median in the
// profile; validation samples it beside every measured step. The same kernel, shape and
// procedure on both sides make the two medians' ratio the machine's drift between them.
struct ReferenceGemm {
  int m = 512, n = 1024, k = 1024;
};
inline constexpr ReferenceGemm kCpuReferenceGemm{};
inline constexpr int kReferenceGemmReps = 2;
double time_reference_gemm(const float* a, const float* b, float* c, const ReferenceGemm& g, int reps);

// A ring of memory much larger than the caches: next(n) hands out the next n bytes, wrapping,
// so a kernel reading or writing a fresh piece each call runs at memory speed, not cache speed
// (calibration and execution alike: inputs rotate so caches do not flatter).
class RotatingBuffer {
 public:
  explicit RotatingBuffer(size_t bytes, unsigned char fill = 0x3c);
  [[nodiscard]] char* next(size_t n);  // the next n bytes (next(0): the current position)
  void reset() { off_ = 0; }           // back to the start
  [[nodiscard]] size_t size() const { return data_.size(); }

 private:
  std::vector<char> data_;
  size_t off_ = 0;
};

}  // namespace stepcast::calibrate
