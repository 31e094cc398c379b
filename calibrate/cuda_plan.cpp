#include "calibrate/cuda_plan.hpp"

#include <sstream>
#include <stdexcept>

#include "sim/core/units.hpp"

namespace stepcast::calibrate {

using core::fmt;

std::vector<std::string> cuda_gemm_dtypes(int cc_major, int cc_minor) {
  std::vector<std::string> d{"bf16", "fp16"};
  const int cc = cc_major * 10 + cc_minor;
  if (cc >= 89) d.push_back("fp8");
  if (cc >= 80) d.push_back("tf32");
  d.push_back("fp32");
  return d;
}

double gemm_operand_bytes(const std::string& dtype) {
  if (dtype == "fp8") return 1.0;
  if (dtype == "bf16" || dtype == "fp16") return 2.0;
  if (dtype == "tf32" || dtype == "fp32") return 4.0;
  throw std::invalid_argument("unknown GEMM dtype '" + dtype + "'");
}

std::vector<GemmPlanShape> cuda_gemm_fit_shapes() {
  std::vector<GemmPlanShape> s;
  // Llama 3 8B / 70B widths: hidden x hidden, FFN up and down, a GQA projection, and the vocab
  // split by TP 8; every dimension a multiple of 16 (fp8 needs it).
  for (int m : {256, 1024, 4096, 16384, 65536}) {
    for (auto [n, k] : {std::pair{4096, 4096}, {14336, 4096}, {4096, 14336}, {1024, 8192}, {16032, 4096}}) s.push_back({m, n, k});
  }
  return s;
}

std::vector<GemmPlanShape> cuda_gemm_held_shapes() {
  return {{512, 6144, 5120}, {2048, 6144, 5120}, {8192, 6144, 5120}, {32768, 3584, 8192}};
}

double ElementwiseCase::bytes() const {
  const double n = static_cast<double>(rows) * cols;
  if (kernel == "rmsnorm") return 2.0 * n * 2.0 + 2.0 * cols;  // x in, y out, the weight
  if (kernel == "swiglu" || kernel == "add") return 3.0 * n * 2.0;  // two inputs, one output
  throw std::invalid_argument("unknown element-wise kernel '" + kernel + "'");
}

double ElementwiseCase::flops() const {
  const double n = static_cast<double>(rows) * cols;
  if (kernel == "rmsnorm") return 4.0 * n;  // square, sum, scale, weight
  if (kernel == "swiglu") return 5.0 * n;   // exp, add, divide, two multiplies
  return n;
}

std::vector<ElementwiseCase> cuda_elementwise_cases() {
  std::vector<ElementwiseCase> c;
  for (const char* k : {"rmsnorm", "swiglu", "add"}) {
    for (auto [rows, cols] : {std::pair{4096, 4096}, {16384, 8192}}) c.push_back({k, rows, k == std::string("swiglu") ? cols * 7 / 2 : cols});
  }
  return c;
}

std::vector<AttentionCase> cuda_attention_cases() { return {{64, 1024}, {32, 2048}, {16, 4096}, {8, 8192}}; }

std::vector<int> collective_group_sizes(int ranks) {
  std::vector<int> g;
  for (int s = 2; s < ranks; s *= 2) {
    if (ranks % s == 0) g.push_back(s);
  }
  if (ranks > 1) g.push_back(ranks);
  return g;
}

std::vector<size_t> cuda_collective_fit_sizes() {
  std::vector<size_t> s;
  for (size_t b = 4096; b <= (size_t{1} << 30); b *= 2) s.push_back(b);
  return s;
}

std::vector<size_t> cuda_collective_held_sizes() {
  std::vector<size_t> s;
  for (size_t b = 4096; b < (size_t{1} << 30); b *= 4) s.push_back(b + b / 2);
  return s;
}

std::string collective_table_markdown(const std::vector<CollFit>& fits) {
  std::ostringstream o;
  if (fits.empty()) return "";
  o << "| operation | ranks | bytes | time us | algbw GB/s | busbw GB/s |\n|---|---:|---:|---:|---:|---:|\n";
  for (const auto& f : fits) {
    // busbw = algbw x bus factor; the fit keeps (bytes, busbw), so the factor is recovered from
    // the operation and group size the fit was made with.
    for (const auto& [bytes, busbw] : f.curve) {
      const double factor = f.bus_factor > 0 ? f.bus_factor : 1.0;
      const double seconds = bytes * factor / busbw;
      o << "| " << f.op << " | " << f.ranks << " | " << fmt("%.0f", bytes) << " | " << fmt("%.1f", seconds * 1e6) << " | "
        << fmt("%.2f", bytes / seconds / 1e9) << " | " << fmt("%.2f", busbw / 1e9) << " |\n";
    }
  }
  return o.str();
}

}  // namespace stepcast::calibrate
