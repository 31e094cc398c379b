#include "calibrate/cuda_plan.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "models/model_spec.hpp"
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

std::vector<LinearShape> model_linear_shapes(const std::string& model, const std::vector<int>& tps) {
  const auto m = model::zoo_model(model);
  auto up16 = [](int64_t x) { return static_cast<int>((x + 15) / 16 * 16); };
  std::vector<LinearShape> out;
  auto add = [&](const std::string& what, int64_t n, int64_t k) {
    const LinearShape s{what, up16(n), up16(k)};
    for (const auto& o : out) {
      if (o.n == s.n && o.k == s.k) return;
    }
    out.push_back(s);
  };
  for (const int tp : tps) {
    if (tp < 1 || m.heads % tp != 0) continue;
    const std::string tag = model + " tp" + std::to_string(tp) + " ";
    // K/V heads fewer than TP ranks are replicated: each rank keeps at least one.
    const int64_t kv_local = std::max<int64_t>(1, m.kv_heads / tp) * (m.kv_dim() / std::max<int64_t>(1, m.kv_heads));
    add(tag + "qkv", m.q_dim() / tp + 2 * kv_local, m.hidden);
    add(tag + "attention_out", m.hidden, m.q_dim() / tp);
    if (m.ffn_hidden > 0) {
      add(tag + "ffn_up", (m.mlp == model::MlpKind::kGated ? 2 : 1) * m.ffn_hidden / tp, m.hidden);
      add(tag + "ffn_down", m.hidden, m.ffn_hidden / tp);
    }
    add(tag + "lm_head", (m.vocab + tp - 1) / tp, m.hidden);
  }
  return out;
}

std::vector<LinearShape> cuda_gemm_weight_shapes() {
  auto s = model_linear_shapes("llama3.1-8b", {1, 2, 4, 8});
  for (const auto& x : model_linear_shapes("llama3.1-70b", {8})) {
    if (std::none_of(s.begin(), s.end(), [&](const LinearShape& o) { return o.n == x.n && o.k == x.k; })) s.push_back(x);
  }
  return s;
}

std::vector<int> cuda_gemm_tokens(const std::string& dtype) {
  if (dtype == "tf32" || dtype == "fp32") return {256, 1024, 4096};
  return {256, 1024, 4096, 16384, 65536};
}

std::vector<LinearShape> expert_linear_shapes(const std::string& model) {
  const auto m = model::zoo_model(model);
  if (!m.moe.enabled()) throw std::invalid_argument("expert_linear_shapes: '" + model + "' has no routed experts");
  auto up16 = [](int64_t x) { return static_cast<int>((x + 15) / 16 * 16); };
  const int64_t f = m.moe.expert_ffn;
  const int64_t up = (m.mlp == model::MlpKind::kGated ? 2 : 1) * f;
  return {{model + " expert fc1", up16(up), up16(m.hidden)}, {model + " expert fc2", up16(m.hidden), up16(f)}};
}

std::vector<LinearShape> cuda_gemm_expert_shapes() {
  std::vector<LinearShape> s;
  for (const char* model : {"qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-120b", "deepseek-v3", "mixtral-8x7b"}) {
    for (const auto& x : expert_linear_shapes(model)) {
      if (std::none_of(s.begin(), s.end(), [&](const LinearShape& o) { return o.n == x.n && o.k == x.k; })) s.push_back(x);
    }
  }
  return s;
}

std::vector<int> cuda_gemm_expert_tokens(const std::string& dtype) {
  if (dtype == "tf32" || dtype == "fp32") return {};
  return {128, 256, 512, 1024, 2048};
}

std::vector<GemmPlanShape> cuda_gemm_fit_shapes(const std::string& dtype) {
  std::vector<GemmPlanShape> s;
  for (int m : cuda_gemm_tokens(dtype)) {
    for (const auto& w : cuda_gemm_weight_shapes()) s.push_back({m, w.n, w.k});
  }
  // Mixtral's experts have Llama 3.1 8B's MLP shapes: a point already measured is not repeated.
  for (int m : cuda_gemm_expert_tokens(dtype)) {
    for (const auto& w : cuda_gemm_expert_shapes()) {
      if (std::none_of(s.begin(), s.end(), [&](const GemmPlanShape& o) { return o.m == m && o.n == w.n && o.k == w.k; })) {
        s.push_back({m, w.n, w.k});
      }
    }
  }
  return s;
}

std::vector<GemmPlanShape> cuda_gemm_held_shapes() {
  // Dense layers between the fitted token counts, and two expert GEMMs between the expert
  // token counts (Qwen3-30B-A3B's fused gate/up at 384 tokens, GPT-OSS 120B's at 768).
  return {{512, 6144, 5120}, {2048, 6144, 5120}, {8192, 6144, 5120}, {32768, 3584, 8192}, {384, 1536, 2048}, {768, 5760, 2880}};
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
  for (int s = 2; s < ranks; ++s) {
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
