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
// The FlashAttention Triton kernel (llm-foundry's attn_impl: triton) has its own efficiencies
// and 128-key tile, on profiles that measured it.
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

// Which fused attention kernel runs: the profile's fused kernel (attention_fwd/bwd), FlashAttention-2
// (attention_flash2_*) or the FlashAttention Triton kernel (attention_triton_*). FlashAttention-2
// and the Triton kernel share FlashAttention-2's head-dimension factors (the same tiling scheme);
// the fused kernel has its own.
enum class AttentionKernel { kFused, kFlash2, kTriton };
core::Duration flash_attention_time(const AttentionShape& a, bool backward, const hw::HardwareProfile& hw,
                                    AttentionKernel kernel = AttentionKernel::kFused);
core::Duration unfused_attention_time(const AttentionShape& a, bool backward, bool dropout,
                                      hw::Dtype dtype, const hw::HardwareProfile& hw);

core::Duration memory_time(core::Bytes bytes, const hw::HardwareProfile& hw);

// Mamba-2's chunked SSD scan (state space duality, Dao & Gu 2024) on one rank, as mamba_ssm's
// Triton kernels run it: per chunk of Q tokens, the intra-chunk part is a masked Q x Q
// attention-like product (C B^T per group, then with x per head) and the inter-chunk part goes
// through fp32 states of head_dim x state per head (chunk states from B and x, passed from chunk
// to chunk, read back with C). Forward FLOPs per token: heads (4 N P + 2 Q P) + groups 2 Q N;
// backward (recomputing the states and CB, then dstates, dC, dCB, dB, dx):
// heads (10 N P + 4 Q P) + groups 6 Q N. Bytes per token: x, B, C read twice and y written
// (e each), the fp32 states four times per chunk forward and nine backward, CB and the fp32 time
// steps. Runs at the larger of its tensor-core time (16-bit peak x gemm_max x sustained clock:
// a roofline, the fused kernels reach less) and its HBM time, plus a launch per kernel (5
// forward, 11 backward).
struct SsdShape {
  double tokens = 0;    // on this rank
  double heads = 0;     // on this rank
  double head_dim = 64;
  double state = 128;
  double groups = 1;    // on this rank
  double chunk = 128;
  double elem_bytes = 2;
  [[nodiscard]] core::Flops flops(bool backward) const;
  [[nodiscard]] core::Bytes bytes(bool backward) const;
};
core::Duration ssd_scan_time(const SsdShape& s, bool backward, const hw::HardwareProfile& hw);

// The chunked gated delta rule (Gated DeltaNet; the fla kernels Qwen3-Next trains with) on one
// rank: per chunk of C tokens and value head, the WY form of the delta rule (K K^T, its
// triangular inverse, W = A (beta K) and U = A (beta V)), the chunk-to-chunk state update
// (S <- decay S + K^T (U - W S)) on a k_dim x v_dim fp32 state, and the output Q S plus the
// masked intra-chunk (Q K^T) (U - W S). Forward FLOPs per token and value head:
// 6 C k_dim + 4 C v_dim + 6 k_dim v_dim; backward 2.5x (the transposed products and the
// recomputed states, as flash attention's). Bytes per token: q, k, v read and the output
// written (e each), the fp32 decays and write strengths, and the fp32 states twice per chunk
// forward (written, read) and five times backward. Time as ssd_scan_time: the larger of the
// tensor-core roofline and HBM time, plus a launch per kernel (6 forward, 12 backward).
struct GdnShape {
  double tokens = 0;     // on this rank
  double v_heads = 0;    // value heads on this rank (queries and keys shared between them)
  double k_heads = 0;    // key heads on this rank
  double k_dim = 128;
  double v_dim = 128;
  double chunk = 64;
  double elem_bytes = 2;
  [[nodiscard]] core::Flops flops(bool backward) const;
  [[nodiscard]] core::Bytes bytes(bool backward) const;
};
core::Duration gdn_scan_time(const GdnShape& s, bool backward, const hw::HardwareProfile& hw);

}  // namespace stepcast::cost
