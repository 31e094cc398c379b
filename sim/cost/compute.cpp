#include "sim/cost/compute.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace stepcast::cost {

using core::Bytes;
using core::Duration;

namespace {
double ramp(double x, double half) { return half <= 0.0 ? 1.0 : x / (x + half); }
hw::Dtype sixteen_bit(const hw::HardwareProfile& hw) {
  return hw.has_dtype(hw::Dtype::kBf16) ? hw::Dtype::kBf16 : hw::Dtype::kFp16;
}
}  // namespace

namespace {
// The measured points' correction of the shape model at (m, n, k): exp of the inverse-squared-
// distance mean (log2 space) of their log ratios, with a prior of no correction weighing as a
// point two octaves away, so the model is reproduced at a measured shape, followed between
// measured shapes and regained far from all of them.
double measured_correction(const GemmShape& g, hw::Dtype dtype, const hw::HardwareProfile& hw) {
  const auto it = hw.efficiency.gemm_measured.find(dtype);
  if (it == hw.efficiency.gemm_measured.end() || it->second.empty()) return 1.0;
  const double lm = std::log2(g.m), ln = std::log2(g.n), lk = std::log2(g.k);
  constexpr double kPriorWeight = 1.0 / (2.0 * 2.0);
  double w_sum = kPriorWeight, acc = 0;
  for (const auto& p : it->second) {
    const double d2 = (lm - p.lm) * (lm - p.lm) + (ln - p.ln) * (ln - p.ln) + (lk - p.lk) * (lk - p.lk);
    if (d2 < 1e-12) return std::exp(p.log_ratio);
    const double w = 1.0 / d2;
    w_sum += w;
    acc += w * p.log_ratio;
  }
  return std::exp(acc / w_sum);
}
}  // namespace

double gemm_efficiency(const GemmShape& g, hw::Dtype dtype, const hw::HardwareProfile& hw) {
  return hw.gemm_shape_efficiency(dtype, g.m, g.n, g.k) * hw.efficiency.sustained_clock * measured_correction(g, dtype, hw);
}

Duration gemm_time(const GemmShape& g, hw::Dtype dtype, const hw::HardwareProfile& hw) {
  if (g.m <= 0 || g.n <= 0 || g.k <= 0 || g.batch <= 0) return Duration(0);
  const double eff = gemm_efficiency(g, dtype, hw);
  const Duration compute = g.flops() / core::FlopRate(hw.peak_for(dtype).value() * eff);
  // Operands in the GEMM dtype, output in 16-bit (fp32 for fp32/tf32).
  const double in_b = hw::bytes_per_element(dtype);
  const double out_b = dtype == hw::Dtype::kFp8 ? 2.0 : in_b;
  const Bytes traffic(g.batch * ((g.m * g.k + g.k * g.n) * in_b + g.m * g.n * out_b));
  return std::max(compute, memory_time(traffic, hw)) + hw.efficiency.kernel_overhead;
}

core::Flops AttentionShape::forward_flops() const {
  const double full = 2.0 * batch * heads * sq * sk * (d_qk + d_v);
  // A causal mask over a square block skips half the tiles.
  return core::Flops(causal && sk >= sq ? full * 0.5 * (1.0 + 1.0 / std::max(1.0, sq)) : full);
}

double head_dim_factor(const std::vector<std::pair<double, double>>& points, double head_dim) {
  if (points.empty()) return 1.0;
  if (head_dim <= points.front().first) return points.front().second;
  if (head_dim >= points.back().first) return points.back().second;
  for (size_t i = 1; i < points.size(); ++i) {
    const auto& [d1, f1] = points[i];
    if (head_dim > d1) continue;
    const auto& [d0, f0] = points[i - 1];
    const double w = std::log2(head_dim / d0) / std::log2(d1 / d0);
    return f0 + w * (f1 - f0);
  }
  return points.back().second;
}

Duration flash_attention_time(const AttentionShape& a, bool backward, const hw::HardwareProfile& hw, AttentionKernel which) {
  const auto& ef = hw.efficiency;
  const bool fused = which == AttentionKernel::kFused;
  double kernel = backward ? ef.attention_bwd : ef.attention_fwd;
  double tile = ef.attention_tile;
  if (which == AttentionKernel::kFlash2) {
    kernel = backward ? ef.attention_flash2_bwd : ef.attention_flash2_fwd;
    tile = ef.attention_flash2_tile;
  } else if (which == AttentionKernel::kTriton) {
    // (RunConfig refuses the Triton kernel on a profile without it; a direct caller gets an error.)
    kernel = backward ? ef.attention_triton_bwd : ef.attention_triton_fwd;
    if (kernel <= 0) throw std::invalid_argument("hardware profile \"" + hw.name + "\" has no Triton attention efficiency");
    tile = ef.attention_triton_tile;
  }
  const double by_head_dim = head_dim_factor(fused ? ef.attention_head_dim_scale : ef.attention_flash2_head_dim_scale, a.d_qk);
  // Keys a query row runs over, and the useful share of the tiles it computes.
  double keys = a.sk, useful = 1.0;
  if (a.causal && a.sk >= a.sq) {
    keys = a.sk / 2.0;
    useful = keys / (keys + tile / 2.0);
  } else if (a.banded) {
    useful = keys / (keys + tile);
  }
  const double eff = kernel * by_head_dim * ef.sustained_clock * ramp(keys, ef.gemm_half_dim) * useful;
  const core::Flops f = backward ? a.forward_flops() * 2.5 : a.forward_flops();
  return f / core::FlopRate(hw.peak_for(sixteen_bit(hw)).value() * eff) + hw.efficiency.kernel_overhead;
}

Duration unfused_attention_time(const AttentionShape& a, bool backward, bool dropout, hw::Dtype dtype,
                                const hw::HardwareProfile& hw) {
  const hw::Dtype d = dtype == hw::Dtype::kFp8 ? sixteen_bit(hw) : dtype;
  const double e = hw::bytes_per_element(d);
  const GemmShape qk{a.sq, a.sk, a.d_qk, a.batch * a.heads};
  const GemmShape pv{a.sq, a.d_v, a.sk, a.batch * a.heads};
  const double scores = a.batch * a.heads * a.sq * a.sk;
  // Forward: write scores, read them for the fused scale-mask-softmax and write probabilities,
  // then dropout reads them and writes the result and a 1-byte mask.
  double passes = 3.0 * e + (dropout ? 2.0 * e + 1.0 : 0.0);
  Duration t = gemm_time(qk, d, hw) + gemm_time(pv, d, hw);
  if (backward) {
    // Two GEMMs per forward GEMM, softmax and dropout backward read and write twice as much.
    t = t * 2.0;
    passes *= 2.0;
  }
  return t + memory_time(Bytes(scores * passes), hw) + hw.efficiency.kernel_overhead * 2.0;
}

Duration memory_time(Bytes bytes, const hw::HardwareProfile& hw) {
  return bytes / core::Bandwidth(hw.hbm_bandwidth.value() * hw.efficiency.memory_bound);
}

core::Flops SsdShape::flops(bool backward) const {
  const double np = state * head_dim, qp = chunk * head_dim, qn = chunk * state;
  const double per_token = backward ? heads * (10.0 * np + 4.0 * qp) + groups * 6.0 * qn : heads * (4.0 * np + 2.0 * qp) + groups * 2.0 * qn;
  return core::Flops(tokens * per_token);
}

Bytes SsdShape::bytes(bool backward) const {
  const double d = heads * head_dim, gn = groups * state;
  const double states = 4.0 * heads * head_dim * state / chunk;  // fp32 chunk states per token, one pass
  const double values = backward ? elem_bytes * (7.0 * d + 10.0 * gn) : elem_bytes * (3.0 * d + 4.0 * gn);
  const double passes = backward ? 9.0 : 4.0;
  const double cb = (backward ? 24.0 : 8.0) * groups * chunk;  // fp32 C B^T per chunk, per token
  const double dt = (backward ? 24.0 : 8.0) * heads;           // fp32 time steps and their cumulative sums
  return Bytes(tokens * (values + passes * states + cb + dt));
}

namespace {
// A fused scan's time: the larger of its 16-bit tensor-core roofline and its HBM time, plus a
// launch per kernel.
Duration scan_roofline(core::Flops flops, Bytes bytes, double kernels, const hw::HardwareProfile& hw) {
  const hw::Dtype d = sixteen_bit(hw);
  const double rate = hw.peak_for(d).value() * hw.gemm_max_for(d) * hw.efficiency.sustained_clock;
  return std::max(flops / core::FlopRate(rate), memory_time(bytes, hw)) + hw.efficiency.kernel_overhead * kernels;
}
}  // namespace

Duration ssd_scan_time(const SsdShape& s, bool backward, const hw::HardwareProfile& hw) {
  return scan_roofline(s.flops(backward), s.bytes(backward), backward ? 11.0 : 5.0, hw);
}

core::Flops GdnShape::flops(bool backward) const {
  const double fwd = tokens * v_heads * (6.0 * chunk * k_dim + 4.0 * chunk * v_dim + 6.0 * k_dim * v_dim);
  return core::Flops(backward ? 2.5 * fwd : fwd);
}

Bytes GdnShape::bytes(bool backward) const {
  const double qkv = elem_bytes * (2.0 * k_heads * k_dim + v_heads * v_dim);  // q, k, v read
  const double out = elem_bytes * v_heads * v_dim;                            // o written (backward: do read, dq dk dv written)
  const double gates = 8.0 * v_heads;                                         // fp32 decay and write strength
  const double states = 4.0 * v_heads * k_dim * v_dim / chunk;                // one pass over the chunk states, per token
  const double per = backward ? 2.0 * qkv + 2.0 * out + 2.0 * gates + 5.0 * states : qkv + out + gates + 2.0 * states;
  return Bytes(tokens * per);
}

Duration gdn_scan_time(const GdnShape& s, bool backward, const hw::HardwareProfile& hw) {
  return scan_roofline(s.flops(backward), s.bytes(backward), backward ? 12.0 : 6.0, hw);
}

}  // namespace stepcast::cost
