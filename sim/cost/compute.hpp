// Kernel costs on one GPU (pure functions).
//
// GEMM: time = max(FLOPs / (peak * eff), bytes / (HBM bandwidth * memory_bound)) + overhead,
// FLOPs = 2*m*n*k*batch; eff = gemm_max * r(m) * r(n) * r(k) with r(x) = x / (x + half_dim):
// large GEMMs approach the measured best (maximum achievable matmul FLOPS) and skinny ones fall
// off (a 256-row GEMM runs ~35% below an 8192-row one; data/pcie-lab/gpipe_bubble.csv).
// Fused (flash) attention: forward FLOPs 4*b*heads*sq*sk*d (QK^T and PV), halved under a causal
// mask, backward 2.5x forward (five matmuls, one recomputing P); run at the profile's measured
// attention efficiency of the 16-bit peak (attention stays 16-bit under fp8 training), scaled
// by the tiles: a query row's throughput ramps with the keys it runs over (keys / (keys +
// gemm_half_dim)); a causal square block gives a query half the keys on average and computes
// each row's diagonal tile whole, half of it masked (useful share keys / (keys + tile / 2)); a
// sliding window computes one partial tile more than its keys (keys / (keys + tile)). With a
// 128-key tile this follows FlashAttention-3 and cuDNN on H100 (causal forward, head dim 128,
// 512-16k tokens) within 2% of one asymptote, and FlashAttention-2 with its 64-key tile within
// 3%.
// Unfused attention runs the two batched GEMMs plus softmax/mask/dropout passes over the
// b*heads*sq*sk score tensor through HBM (the whole square, no causal skipping).
// Element-wise work is HBM-bound: bytes / (HBM bandwidth * memory_bound).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "sim/config/hardware.hpp"
#include "sim/core/units.hpp"

namespace stepcast::cost {

struct GemmShape {
  double m = 0, n = 0, k = 0;
  double batch = 1;
  [[nodiscard]] core::Flops flops() const { return core::Flops(2.0 * m * n * k * batch); }
};

double gemm_efficiency(const GemmShape& g, hw::Dtype dtype, const hw::HardwareProfile& hw);
core::Duration gemm_time(const GemmShape& g, hw::Dtype dtype, const hw::HardwareProfile& hw);

struct AttentionShape {
  double batch = 1;     // sequences
  double heads = 1;     // query heads on this rank
  double sq = 1;        // query tokens
  double sk = 1;        // key tokens visible (window-limited: the keys per query)
  double d_qk = 128;    // query/key head width
  double d_v = 128;     // value head width
  bool causal = true;
  // A sliding-window band: every query sees sk keys ending at itself (causal is then false,
  // the mask being in sk already).
  bool banded = false;
  [[nodiscard]] core::Flops forward_flops() const;
};

// The profile's attention throughput factor at a head dimension (1 when none is given):
// linear in log2(head dim) between the points, flat beyond them.
double head_dim_factor(const std::vector<std::pair<double, double>>& points, double head_dim);

// flash2: FlashAttention-2 efficiencies of the profile (attention_flash2_fwd/bwd); both kinds
// scale with the query/key head dimension by the profile's head-dimension factors.
core::Duration flash_attention_time(const AttentionShape& a, bool backward, const hw::HardwareProfile& hw, bool flash2 = false);
core::Duration unfused_attention_time(const AttentionShape& a, bool backward, bool dropout,
                                      hw::Dtype dtype, const hw::HardwareProfile& hw);

core::Duration memory_time(core::Bytes bytes, const hw::HardwareProfile& hw);

}  // namespace stepcast::cost
