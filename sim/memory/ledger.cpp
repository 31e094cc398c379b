#include "sim/memory/ledger.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "sim/engine/schedule.hpp"

namespace stepcast::memory {

using core::Bytes;
using config::Recompute;
using config::Schedule;

StateBytes state_bytes(const config::Training& t) {
  StateBytes s;
  const bool fp32 = t.precision == hw::Dtype::kFp32;
  s.weights = fp32 ? 4.0 : 2.0;
  s.gradients = hw::bytes_per_element(t.grad_dtype);
  // Parameters stored in fp32 under 16-bit compute are their own master copy.
  const bool fp32_params = t.param_dtype == hw::Dtype::kFp32;
  if (fp32_params) s.weights = 4.0;
  const double master = (t.master_weights && !fp32 && !fp32_params) ? 4.0 : 0.0;
  s.optimizer = (t.optimizer == config::Optimizer::kAdam ? 8.0 : 4.0) + master;
  return s;
}

double zero_bytes_per_param(const StateBytes& s, int zero_stage, int64_t n) {
  const double dn = static_cast<double>(std::max<int64_t>(1, n));
  switch (zero_stage) {
    case 0: return s.weights + s.gradients + s.optimizer;
    case 1: return s.weights + s.gradients + s.optimizer / dn;
    case 2: return s.weights + (s.gradients + s.optimizer) / dn;
    default: return (s.weights + s.gradients + s.optimizer) / dn;
  }
}

double selective_op_bytes_per_token(const config::RunConfig& rc, bool moe_layer) {
  return selective_op_bytes_per_token(rc, model::LayerKind{model::Mixer::kAttention, moe_layer ? model::Ffn::kMoe : model::Ffn::kDense});
}

double selective_op_bytes_per_token(const config::RunConfig& rc, model::LayerKind kind) {
  const bool moe_layer = kind.moe();
  // Op-level selective checkpointing (PyTorch's per-block policy as torchtitan applies it):
  // the block input is kept, the outputs of the 1st, 3rd, 5th, ... matrix multiplication in
  // forward order are kept, and so is the attention kernel's output (+ fp32 log-sum-exp);
  // everything else is rebuilt in backward from those.
  const auto& m = rc.model;
  const auto& p = rc.parallel;
  const double e = rc.activation_bytes();
  const double t = static_cast<double>(p.tp);
  const bool sp = p.sp && p.tp > 1;
  const double h = static_cast<double>(m.hidden);
  const double heads_local = static_cast<double>(m.heads) / t;
  std::vector<double> widths;  // matmul output elements per token on this rank, forward order
  double attn_out = 0;
  if (kind.mixer == model::Mixer::kMamba) {
    // in_proj (kept), out_proj; the scan output is kept as the attention output is.
    const auto& mb = m.mamba;
    widths.push_back(static_cast<double>(mb.in_proj_width()) / t);
    widths.push_back(h);
    attn_out = static_cast<double>(mb.d_inner()) / t;
  } else if (kind.mixer == model::Mixer::kLinear) {
    widths.push_back(static_cast<double>(m.linear.in_proj_width()) / t);
    widths.push_back(h);
    attn_out = static_cast<double>(m.linear.value_width()) / t;
  } else if (kind.mixer == model::Mixer::kNone) {
  } else if (m.mla.enabled()) {
    const double qk = static_cast<double>(m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim);
    if (m.mla.q_lora_rank > 0) widths.push_back(static_cast<double>(m.mla.q_lora_rank));
    widths.push_back(heads_local * qk);
    widths.push_back(static_cast<double>(m.mla.kv_lora_rank + m.mla.qk_rope_head_dim));
    widths.push_back(heads_local * static_cast<double>(m.mla.qk_nope_head_dim + m.mla.v_head_dim));
    attn_out = heads_local * static_cast<double>(m.mla.v_head_dim);
  } else {
    const double kv_local = std::max(static_cast<double>(m.kv_heads), t) / t * static_cast<double>(m.head_dim);
    widths.push_back(heads_local * static_cast<double>(m.head_dim));
    widths.push_back(kv_local);
    widths.push_back(kv_local);
    attn_out = heads_local * static_cast<double>(m.head_dim);
  }
  if (kind.mixer == model::Mixer::kAttention) widths.push_back(h);  // output projection (partial sums, full width on every TP rank)
  const bool gated = m.mlp == model::MlpKind::kGated;
  auto mlp = [&](double f_local, double copies) {
    if (gated) widths.push_back(f_local * copies);
    widths.push_back(f_local * copies);
    widths.push_back(h * copies);
  };
  if (kind.ffn == model::Ffn::kDense) {
    mlp(static_cast<double>(m.ffn_hidden) / t, 1.0);
  } else if (moe_layer) {
    const auto& mo = m.moe;
    widths.push_back(static_cast<double>(mo.num_experts));  // router logits
    mlp(static_cast<double>(mo.expert_ffn) / static_cast<double>(p.etp), static_cast<double>(mo.top_k) *
                                                                             static_cast<double>(p.etp) / t);
    if (mo.shared_experts > 0) mlp(static_cast<double>(mo.shared_experts * mo.shared_expert_ffn) / t, 1.0);
  }
  double kept = 0;
  for (size_t i = 0; i < widths.size(); i += 2) kept += widths[i];
  // The block input is a residual-stream tensor (RunConfig::residual_bytes).
  const double block_input = rc.residual_bytes() * h / (sp ? t : 1.0);
  return block_input + e * (kept + attn_out) + (kind.mixer == model::Mixer::kAttention ? 4.0 * heads_local : 0.0);
}

double loss_peak_bytes_per_logit(const config::RunConfig& rc) {
  const double e = rc.activation_bytes();
  if (rc.training.loss == config::LossImpl::kEager) {
    // PyTorch cross_entropy(logits.float()): at the start of its backward the 16-bit logits'
    // gradient is still to come, while the saved fp32 log-softmax output, the fp32 incoming
    // gradient and the fp32 input gradient are live, plus the 16-bit logits before they are
    // released (3 x 4 + e). Under TP the vocab-parallel log-softmax keeps one more fp32 tensor
    // (the max-shifted logits).
    return e + 12.0 + (rc.parallel.tp > 1 ? 4.0 : 0.0);
  }
  return e + (rc.training.fp32_logits ? 4.0 : 0.0);
}

Bytes cp_attention_working_bytes(const config::RunConfig& rc) {
  const auto& p = rc.parallel;
  if (p.cp <= 1 || (p.cp_comm != config::CpComm::kRotateAllGather && p.cp_comm != config::CpComm::kAllGather)) return Bytes(0);
  const double e = rc.activation_bytes();
  const double cp = static_cast<double>(p.cp);
  const double T = static_cast<double>(p.micro_batch_size) * static_cast<double>(rc.training.seq_len) / cp;
  const config::AttentionWidths w = config::attention_widths(rc, rc.training.repeat_kv);
  const double kv_el = T * (w.k + w.v);  // this rank's K and V as exchanged
  if (p.cp_comm == config::CpComm::kAllGather) {
    // Every rank's K/V gathered, and their gradients at full length before the reduce-scatter.
    return Bytes(2.0 * e * kv_el * cp);
  }
  // Rotation by all-gather: every rank's K/V, the fp32 dK/dV accumulators, the partial sums
  // received from the ring and the concatenated copy sent on, and the fp32 dQ accumulator.
  return Bytes(e * kv_el * cp + 3.0 * 4.0 * kv_el + 4.0 * T * w.q);
}

std::vector<std::pair<double, double>> lora_adapted_linears(const config::RunConfig& rc, model::LayerKind kind, bool whole) {
  std::vector<std::pair<double, double>> out;
  const auto& lora = rc.training.lora;
  if (!lora.enabled()) return out;
  const auto& m = rc.model;
  const double t = whole ? 1.0 : static_cast<double>(rc.parallel.tp);
  const double h = static_cast<double>(m.hidden);
  auto targeted = [&](uint32_t target) { return (lora.targets & target) != 0; };
  if (kind.mixer == model::Mixer::kAttention) {
    config::AttentionWidths w = config::attention_widths(rc, false);
    if (whole) {
      // The model's own widths: K and V heads a rank replicates (kv_heads < tp) count once.
      const double tp = static_cast<double>(rc.parallel.tp);
      w.q *= tp;
      w.k = m.mla.enabled() ? w.k * tp : static_cast<double>(m.kv_heads * m.head_dim);
      w.out *= tp;
    }
    if (targeted(config::kLoraQkv)) {
      if (m.mla.enabled()) {
        // As estimate::WorkloadBuilder builds them: the down-projections whole on every rank,
        // the up-projections split by heads.
        const double qr = static_cast<double>(m.mla.q_lora_rank), kvr = static_cast<double>(m.mla.kv_lora_rank);
        if (m.mla.q_lora_rank > 0) {
          out.emplace_back(h, qr);
          out.emplace_back(qr, w.q);
        } else {
          out.emplace_back(h, w.q);
        }
        out.emplace_back(h, kvr + static_cast<double>(m.mla.qk_rope_head_dim));
        out.emplace_back(kvr, static_cast<double>(m.heads) / t * static_cast<double>(m.mla.qk_nope_head_dim + m.mla.v_head_dim));
      } else {
        out.emplace_back(h, w.q * (m.attn_output_gate ? 2.0 : 1.0) + 2.0 * w.k);
      }
    }
    if (targeted(config::kLoraOProj)) out.emplace_back(w.out, h);
  }
  if (kind.ffn == model::Ffn::kNone) return out;
  // The dense MLP, or a MoE layer's shared experts (routed experts carry no adapters).
  const double gate = m.mlp == model::MlpKind::kGated ? 2.0 : 1.0;
  const double f_local = kind.moe() ? static_cast<double>(m.moe.shared_experts * m.moe.shared_expert_ffn) / t
                                    : static_cast<double>(m.ffn_hidden) / t;
  if (f_local <= 0) return out;
  if (targeted(config::kLoraFc1)) out.emplace_back(h, gate * f_local);
  if (targeted(config::kLoraFc2)) out.emplace_back(f_local, h);
  return out;
}

double lora_layer_params(const config::RunConfig& rc, model::LayerKind kind) {
  double widths = 0;
  for (const auto& [in, out] : lora_adapted_linears(rc, kind)) widths += in + out;
  return static_cast<double>(rc.training.lora.rank) * widths;
}

double lora_model_params(const config::RunConfig& rc) {
  if (!rc.training.lora.enabled()) return 0;
  double widths = 0;
  for (int64_t l = 0; l < rc.model.num_layers; ++l) {
    for (const auto& [in, out] : lora_adapted_linears(rc, rc.model.layer_kind(l), true)) widths += in + out;
  }
  return static_cast<double>(rc.training.lora.rank) * widths;
}

namespace {

// Bytes per element of what a linear layer keeps for its weight gradient (its input, and under
// a deferred weight gradient its output gradient): 16-bit, or one byte where fp8 training keeps
// the quantized copies (training.fp8_saved_inputs).
double kept_linear_bytes(const config::RunConfig& rc) { return rc.training.fp8_saved_inputs ? 1.0 : rc.activation_bytes(); }

// One layer's saved activations as if the run used recompute mode `mode` (its selective
// modules as the run names them): what the ledger needs for the recompute mode the run has,
// for layers partial recomputation leaves out and for the layer being rebuilt, without copying
// the run.
Bytes layer_activation_bytes_as(const config::RunConfig& rc, model::LayerKind kind, Recompute mode) {
  const bool moe_layer = kind.moe();
  const bool attention = kind.mixer == model::Mixer::kAttention;
  const bool mlp_block = kind.ffn != model::Ffn::kNone;
  const auto& m = rc.model;
  const auto& p = rc.parallel;
  auto recomputes = [&](config::RecomputeModule mod) { return mode == Recompute::kSelective && (p.recompute_modules & mod) != 0; };
  const double e = rc.activation_bytes();
  const double t = static_cast<double>(p.tp);
  const bool sp = p.sp && p.tp > 1;
  const double s_local = static_cast<double>(rc.training.seq_len) / static_cast<double>(p.cp);
  const double T = static_cast<double>(p.micro_batch_size) * s_local;  // tokens on this rank
  const double h = static_cast<double>(m.hidden);
  const double rep = sp ? t : 1.0;  // divisor of the replicated terms

  // Full recomputation keeps each layer's input: a residual-stream tensor.
  if (mode == Recompute::kFull) return Bytes(rc.residual_bytes() * h * T / rep);
  if (mode == Recompute::kSelectiveOp) return Bytes(T * selective_op_bytes_per_token(rc, kind));

  const double li = kept_linear_bytes(rc);
  // Replicated terms (per token): the two norms' inputs, and their outputs (the QKV and MLP
  // inputs).
  // Recompute selective's modules (Megatron-Core --recompute-modules) drop what they rebuild.
  const bool mla = m.mla.enabled();
  const bool norm_recomputed = recomputes(config::kRecomputeLayernorm);
  // Each block (token mixer, MLP) keeps its norm's input and its first linear layer's input.
  const double blocks = (kind.mixer != model::Mixer::kNone ? 1.0 : 0.0) + (mlp_block ? 1.0 : 0.0);
  // A parallel block (GPT-J, Phi-1/2, Falcon 7B) normalises once: one norm input, and its
  // output is both the QKV and the MLP input, kept once.
  const bool shared_norm = m.shared_block_norm && kind.mixer == model::Mixer::kAttention && mlp_block;
  double replicated = (shared_norm ? 1.0 : blocks) * e * h;
  // Under LoRA a frozen linear layer without an adapter keeps no input (it has no weight
  // gradient); an adapted one keeps its input for the adapter's weight gradient, and the
  // adapter's rank-wide intermediate (counted with the split terms).
  const auto& lora = rc.training.lora;
  auto keeps_input = [&](uint32_t target) { return !lora.enabled() || (lora.targets & target) != 0; };
  const bool mlp_adapted = !moe_layer || m.moe.shared_experts > 0;
  bool qkv_input_kept = false;
  if (kind.mixer != model::Mixer::kNone && (kind.mixer == model::Mixer::kAttention ? keeps_input(config::kLoraQkv) : !lora.enabled())) {
    replicated += norm_recomputed && mla && attention ? 0.0 : li * h;
    qkv_input_kept = true;
  }
  if (mlp_block && keeps_input(config::kLoraFc1) && (mlp_adapted || !lora.enabled()) && !(shared_norm && qkv_input_kept)) {
    replicated += norm_recomputed && moe_layer ? 0.0 : li * h;
  }
  if (rc.training.dropout) replicated += blocks * h;
  // Terms split across TP. Attention keeps its Q, K and V; K and V repeated to the query heads
  // when the framework expands them before the call (selective recompute rebuilds them from
  // the QKV output).
  const double heads_local = static_cast<double>(m.heads) / t;
  const config::AttentionWidths w = config::attention_widths(rc, rc.training.repeat_kv && mode != Recompute::kSelective);
  const double q_w = w.q, kv_w = w.k, out_w = w.out;
  // MLA: the latent inputs of the up-projections (replicated).
  if (m.mla.enabled() && attention && keeps_input(config::kLoraQkv)) replicated += li * static_cast<double>(m.mla.q_lora_rank + m.mla.kv_lora_rank);
  // The attention kernel keeps its output for its own backward; with fp8 inputs the output
  // projection keeps its quantized copy beside it.
  const double qkv = recomputes(config::kRecomputeMlaUpProj) && mla ? 0.0 : e * (q_w + kv_w + kv_w);
  double split = attention ? qkv + e * out_w + (rc.training.fp8_saved_inputs && keeps_input(config::kLoraOProj) ? out_w : 0.0) : 0.0;
  // LoRA: each adapter keeps x A (rank wide) for B's gradient.
  if (lora.enabled()) split += e * static_cast<double>(lora.rank) * static_cast<double>(lora_adapted_linears(rc, kind).size());
  // An output-gated attention keeps the gate and the kernel's output beside the gated product.
  if (attention && m.attn_output_gate) split += e * (q_w + out_w);
  if (kind.mixer == model::Mixer::kLinear) {
    // Gated DeltaNet (estimate::WorkloadBuilder's mixer): the in_proj output, the conv output,
    // the fp32 decays and write strengths, the rule's output and out_proj's input.
    const auto& la = m.linear;
    const double key = static_cast<double>(la.key_width()) / t, value = static_cast<double>(la.value_width()) / t,
                 v_heads = static_cast<double>(la.v_heads) / t;
    split += e * (2.0 * key + 2.0 * value + 2.0 * v_heads) + e * (2.0 * key + value) + 8.0 * v_heads + e * value +
             (lora.enabled() ? 0.0 : li * value);
  }
  if (kind.mixer == model::Mixer::kMamba) {
    // Mamba-2 (estimate::WorkloadBuilder's mixer): the in_proj output (z, x, B, C, dt) and the
    // scan output that the fused path keeps, the fp32 time steps and their cumulative sums, and
    // out_proj's input.
    const auto& mb = m.mamba;
    // B and C per local token: this TP rank's groups, or cp of them when CP ranks share a group.
    const double cpd = static_cast<double>(p.cp);
    const double d = static_cast<double>(mb.d_inner()) / t,
                 gn = std::max(static_cast<double>(mb.groups) / t, cpd) * static_cast<double>(mb.state),
                 heads = static_cast<double>(mb.heads) / t;
    split += e * (2.0 * d + 2.0 * gn + heads) + e * d + 8.0 * heads + (lora.enabled() ? 0.0 : li * d);
  }
  // Per MLP width element: the first projection's outputs (gate and up, or the pre-activation)
  // for the activation's backward, and the activation's output as the second projection's input.
  const double mlp_bytes = (m.mlp == model::MlpKind::kGated ? 2.0 : 1.0) * e + (keeps_input(config::kLoraFc2) ? li : 0.0);
  if (kind.ffn == model::Ffn::kDense) {
    if (!recomputes(config::kRecomputeMlp)) split += mlp_bytes * static_cast<double>(m.ffn_hidden) / t;
  } else if (moe_layer && !recomputes(config::kRecomputeMoe)) {
    const auto& mo = m.moe;
    const double k = static_cast<double>(mo.top_k);
    const double etp = static_cast<double>(p.etp);
    // Per routed token copy: the permuted input and the expert's MLP activations (without the
    // activation's output when moe_act is recomputed); routing probabilities in fp32 per expert.
    // Under LoRA the routed experts are frozen without adapters: their linear inputs stay out.
    const double expert_li = lora.enabled() ? 0.0 : li;
    const double expert_act = (m.mlp == model::MlpKind::kGated ? 2.0 : 1.0) * e + expert_li;
    const double expert_bytes = expert_act - (recomputes(config::kRecomputeMoeAct) ? expert_li : 0.0);
    const double routed = k * (expert_li * h + expert_bytes * static_cast<double>(mo.expert_ffn) / etp) * (etp / t);
    split += routed + 4.0 * static_cast<double>(mo.num_experts) / t;
    if (mo.shared_experts > 0 && !recomputes(config::kRecomputeSharedExperts)) {
      split += mlp_bytes * static_cast<double>(mo.shared_experts * mo.shared_expert_ffn) / t;
    }
  }
  double scores = 0;
  const double s_full = static_cast<double>(rc.training.seq_len);
  if (!attention) {
    scores = 0;
  } else if (rc.training.attention == config::AttentionImpl::kUnfused) {
    if (!recomputes(config::kRecomputeCoreAttn)) {
      scores = heads_local * s_full * (e + (rc.training.dropout ? 1.0 + e : 0.0));
    }
  } else {
    scores = 4.0 * heads_local;  // fp32 log-sum-exp
  }
  // DTensor TP without micro-pipelining keeps the all-gathered (full-sequence) inputs of the
  // QKV and MLP projections for their weight gradients instead of the sequence shards, in the
  // dtype the shard would be kept in (fp8 where float8 TP gathers the quantized copy).
  double gathered = 0;
  if (p.keeps_gathered_input()) gathered = blocks * li * h * (1.0 - 1.0 / t);
  return Bytes(T * (replicated / rep + gathered + split + scores));
}

}  // namespace

Bytes layer_activation_bytes(const config::RunConfig& rc, model::LayerKind kind) {
  return layer_activation_bytes_as(rc, kind, rc.parallel.recompute);
}

Bytes layer_activation_bytes(const config::RunConfig& rc, bool moe_layer) {
  return layer_activation_bytes(rc, model::LayerKind{model::Mixer::kAttention, moe_layer ? model::Ffn::kMoe : model::Ffn::kDense});
}

namespace {

// Per-token quantities of what a deferred weight-gradient pass keeps: a weight gradient is
// X^T dY, so each linear layer keeps its input X and its output's gradient dY from the
// input-gradient pass until the weight-gradient pass. Under sequence parallelism a row-parallel
// layer's output gradient is gathered over the sequence before it (full width h per token); a
// column-parallel layer keeps its input as the sequence shard (regathered for W) unless the
// framework keeps the gathered input (Parallel::keeps_gathered_input).
struct WeightGradKeep {
  double li, t, T, h, col_in;
  explicit WeightGradKeep(const config::RunConfig& rc)
      : li(kept_linear_bytes(rc)),
        t(static_cast<double>(rc.parallel.tp)),
        T(static_cast<double>(rc.parallel.micro_batch_size) * static_cast<double>(rc.training.seq_len) /
          static_cast<double>(rc.parallel.cp)),
        h(static_cast<double>(rc.model.hidden)),
        col_in(rc.parallel.keeps_gathered_input() || !rc.parallel.sp_active() ? h : h / t) {}
  // One linear layer's input and output widths (elements per token on this rank). Transformer
  // Engine's fp8 linears (training.fp8_saved_inputs) keep both quantized, as their fp8
  // weight-gradient GEMM reads them; otherwise the output gradient is 16-bit like the input.
  [[nodiscard]] double linear(double in_width, double out_width) const { return li * (in_width + out_width); }
};

}  // namespace

Bytes layer_weight_grad_bytes(const config::RunConfig& rc, bool moe_layer) {
  return layer_weight_grad_bytes(rc, model::LayerKind{model::Mixer::kAttention, moe_layer ? model::Ffn::kMoe : model::Ffn::kDense});
}

Bytes layer_weight_grad_bytes(const config::RunConfig& rc, model::LayerKind kind) {
  const auto& m = rc.model;
  const auto& p = rc.parallel;
  const WeightGradKeep k(rc);
  const double rep = p.sp && p.tp > 1 ? k.t : 1.0;
  const double gate = m.mlp == model::MlpKind::kGated ? 2.0 : 1.0;
  const config::AttentionWidths w = config::attention_widths(rc, false);
  double per = 0;
  if (kind.mixer == model::Mixer::kAttention) {
    per += k.linear(k.col_in, w.q + w.k + w.v) + k.linear(w.out, k.h);
    if (m.mla.enabled()) {
      const double lora = static_cast<double>(m.mla.q_lora_rank + m.mla.kv_lora_rank) / rep;
      per += k.linear(lora, lora);
    }
  } else if (kind.mixer == model::Mixer::kMamba) {
    const double d = static_cast<double>(m.mamba.d_inner()) / k.t;
    per += k.linear(k.col_in, static_cast<double>(m.mamba.in_proj_width()) / k.t) + k.linear(d, k.h);
  } else if (kind.mixer == model::Mixer::kLinear) {
    const double v = static_cast<double>(m.linear.value_width()) / k.t;
    per += k.linear(k.col_in, static_cast<double>(m.linear.in_proj_width()) / k.t) + k.linear(v, k.h);
  }
  auto mlp = [&](double ffn_local) { return k.linear(k.col_in, gate * ffn_local) + k.linear(ffn_local, k.h); };
  if (kind.ffn == model::Ffn::kDense) {
    per += mlp(static_cast<double>(m.ffn_hidden) / k.t);
  } else if (kind.moe()) {
    const auto& mo = m.moe;
    const double fe = static_cast<double>(mo.expert_ffn) / static_cast<double>(p.etp);
    const double routed = static_cast<double>(mo.top_k) * (k.linear(k.h, gate * fe) + k.linear(fe, k.h)) * (static_cast<double>(p.etp) / k.t);
    per += k.linear(k.col_in, static_cast<double>(mo.num_experts) / k.t) + routed;
    if (mo.shared_experts > 0) per += mlp(static_cast<double>(mo.shared_experts * mo.shared_expert_ffn) / k.t);
  }
  return Bytes(k.T * per);
}

std::pair<int64_t, int64_t> nccl_communicators(const config::RunConfig& rc, int64_t stage) {
  const auto& p = rc.parallel;
  int64_t multi = 0, pairs = 0;
  const int64_t world = rc.cluster.num_gpus;
  auto count = [&](int64_t ranks) {
    if (ranks > 2) ++multi;
    else if (ranks == 2) ++pairs;
  };
  // A group spanning every rank is the world group itself (one communicator).
  auto group = [&](int64_t ranks) {
    if (ranks < world) count(ranks);
  };
  count(world);
  group(p.tp);
  group(p.cp);
  group(p.dp * p.cp);
  if (rc.model.moe.enabled()) {
    group(p.ep);
    group(p.tp * p.dp * p.cp / std::max<int64_t>(1, p.ep * p.etp));
  }
  if (p.dp_replicate > 1) {
    // Hybrid sharding: the shard groups and the replicate groups (dense, and expert).
    group(p.shard_group());
    group(p.dp_replicate);
    if (rc.model.moe.enabled()) group(p.expert_shard_group());
  }
  // Gradient-norm clipping (and the fp16 overflow check) all-reduce over the model-parallel
  // group, tp x pp ranks (Megatron's and DeepSpeed's get_model_parallel_group).
  if (p.pp > 1) group(p.tp * p.pp);
  if (stage > 0) ++pairs;
  if (stage < p.pp - 1) ++pairs;
  // A tied embedding's gradient is summed between the first stage and the head's (the same
  // stage under ZB-V).
  if (p.pp > 1 && rc.model.tied_embeddings && p.head_stage() != 0 && (stage == 0 || stage == p.head_stage())) ++pairs;
  return {multi, pairs};
}

int64_t nccl_alltoall_peers(const config::RunConfig& rc) {
  const auto& p = rc.parallel;
  int64_t peers = 0;
  if (rc.model.moe.enabled() && p.moe.dispatcher == config::MoeDispatcher::kAllToAll) peers += p.ep - 1;
  if (p.cp_comm == config::CpComm::kUlysses) peers += p.cp - 1;
  return peers;
}

double flex_dispatch_buffer_bytes(const config::RunConfig& rc) {
  const auto& p = rc.parallel;
  if (!rc.model.moe.enabled() || p.ep <= 1 || p.moe.dispatcher != config::MoeDispatcher::kFlex) return 0.0;
  // DeepEP's buffer-size hints (normal kernels): per channel (half of the 20 SMs Megatron-Core
  // gives the dispatcher by default) and peer, a receive queue of chunked tokens, each carrying
  // the bf16 hidden state plus top-k indices, weights and scales for up to 128 entries.
  constexpr double kChannels = 10, kNvlPeers = 8, kNvlTokens = 288, kRdmaTokens = 128;
  const double token = 2.0 * static_cast<double>(rc.model.hidden) + 128.0 * (8.0 + 4.0 + 4.0);
  const double ep = static_cast<double>(p.ep);
  const double nvl = kChannels * std::min(ep, kNvlPeers) * kNvlTokens * token;
  // Across nodes a second, doubled queue per remote node group of 8 ranks.
  const double rdma = ep > kNvlPeers ? kChannels * (ep / kNvlPeers) * kRdmaTokens * 2.0 * token + 1048576.0 : 0.0;
  return nvl + rdma;
}

double largest_parameter_tensor(const config::RunConfig& rc, bool holds_vocab) {
  const auto& m = rc.model;
  const auto& p = rc.parallel;
  const double t = static_cast<double>(p.tp);
  const double h = static_cast<double>(m.hidden);
  // Fused QKV and first MLP projection (gate and up fused for gated MLPs), as Megatron lays
  // them out; the vocabulary matrix on the stages that hold it.
  double largest = h * static_cast<double>(m.q_dim() * (m.attn_output_gate ? 2 : 1) + 2 * m.kv_dim()) / t;
  const double fc1 = m.mlp == model::MlpKind::kGated ? 2.0 : 1.0;
  largest = std::max(largest, fc1 * h * static_cast<double>(m.ffn_hidden) / t);
  if (m.moe.enabled()) {
    largest = std::max(largest, fc1 * h * static_cast<double>(m.moe.expert_ffn) / static_cast<double>(p.etp));
  }
  if (m.mamba.enabled()) largest = std::max(largest, h * static_cast<double>(m.mamba.in_proj_width()) / t);  // Mamba-2 in_proj
  if (m.linear.enabled()) largest = std::max(largest, h * static_cast<double>(m.linear.in_proj_width()) / t);  // Gated DeltaNet in_proj
  if (holds_vocab) largest = std::max(largest, static_cast<double>(rc.padded_vocab) * h / t);
  return largest;
}

double inflight_microbatches(const config::RunConfig& rc, int64_t stage) {
  const auto& p = rc.parallel;
  const double m = static_cast<double>(rc.num_microbatches);
  const double pp = static_cast<double>(p.pp);
  const double r = static_cast<double>(stage);
  switch (p.schedule) {
    case Schedule::kGpipe: return m;
    case Schedule::kOneFOneB:
    case Schedule::kZbH1: return std::min(m, pp - r);
    case Schedule::kInterleaved: {
      const double v = static_cast<double>(p.vpp);
      const double chunks = std::min(m * v, 2.0 * (pp - r - 1.0) + (v - 1.0) * pp + 1.0);
      return chunks / v;
    }
    case Schedule::kZbV:
    case Schedule::kDualPipeV: {
      // The most chunk forwards the stage's order holds before their backward, in micro-batches
      // of the stage's two chunks (about p on every stage under ZB-V). The orders repeat after
      // their warm-up of under 2p forwards, so 4p micro-batches reach the peak.
      const auto mm = static_cast<int32_t>(std::min<int64_t>(rc.num_microbatches, 4 * p.pp));
      int64_t held = 0, most = 0;
      engine::for_each_action(p.schedule, static_cast<int32_t>(p.pp), static_cast<int32_t>(stage), mm, 2, [&](const engine::Action& a) {
        held += a.phase == engine::Phase::kF ? 1 : a.phase == engine::Phase::kW ? 0 : -1;
        most = std::max(most, held);
      });
      return static_cast<double>(most) / 2.0;
    }
  }
  return m;
}

Bytes chunk_kept_output_bytes(const config::RunConfig& rc, int64_t stage, int64_t chunk) {
  const auto& p = rc.parallel;
  if (p.keep_step_outputs == config::StepOutputs::kNone || p.pp <= 1) return Bytes(0);
  const double e = rc.activation_bytes();
  const double t = static_cast<double>(p.tp);
  const double tokens = static_cast<double>(p.micro_batch_size) * static_cast<double>(rc.training.seq_len) /
                        static_cast<double>(p.cp);
  const bool model_last = p.holds_head(stage, chunk);
  if (model_last) {
    // The model's output: this rank's vocabulary shard of the 16-bit logits.
    if (p.schedule == Schedule::kGpipe) return Bytes(0);
    return Bytes(e * tokens * static_cast<double>(rc.padded_vocab) / t);
  }
  if (p.keep_step_outputs != config::StepOutputs::kAllStages) return Bytes(0);
  // The hidden states sent to the next stage (the sequence shard under SP): the residual stream.
  const bool sp = p.sp && p.tp > 1;
  return Bytes(rc.residual_bytes() * static_cast<double>(rc.model.hidden) * tokens / (sp ? t : 1.0));
}

Bytes chunk_layer_activation_bytes(const config::RunConfig& rc, int64_t stage, int64_t chunk) {
  // Each layer kind's bytes, with and without its recomputation, worked out once.
  // (A fixed array: this runs for every candidate layout the planner weighs.)
  struct Cached {
    model::LayerKind kind;
    bool recomputed = false;
    Bytes bytes;
  };
  std::array<Cached, 16> cache{};
  size_t cached = 0;
  auto bytes_of = [&](model::LayerKind kind, bool recomputed) {
    for (size_t i = 0; i < cached; ++i) {
      if (cache[i].kind == kind && cache[i].recomputed == recomputed) return cache[i].bytes;
    }
    const Bytes b = layer_activation_bytes_as(rc, kind, recomputed ? rc.parallel.recompute : Recompute::kNone);
    if (cached < cache.size()) cache[cached++] = {kind, recomputed, b};
    return b;
  };
  Bytes out(0);
  const int64_t first = rc.chunk_first_layer(stage, chunk);
  for (int64_t l = first; l < first + rc.chunk_layers(stage, chunk); ++l) {
    if (rc.activation_offloaded(l)) continue;  // on the host between its forward and backward
    // Layers recompute full leaves out (parallel.recompute_layers) keep all their activations.
    const bool recomputed = !rc.partial_recompute() || rc.full_recompute_layer(l);
    out += bytes_of(rc.model.layer_kind(l), recomputed);
  }
  return out;
}

Bytes chunk_layer_weight_grad_bytes(const config::RunConfig& rc, int64_t stage, int64_t chunk) {
  const Bytes dense = layer_weight_grad_bytes(rc, false);
  const Bytes moe = rc.model.moe.enabled() ? layer_weight_grad_bytes(rc, true) : dense;
  Bytes out(0);
  const int64_t first = rc.chunk_first_layer(stage, chunk);
  for (int64_t l = first; l < first + rc.chunk_layers(stage, chunk); ++l) {
    const model::LayerKind k = rc.model.layer_kind(l);
    out += rc.model.hybrid() ? layer_weight_grad_bytes(rc, k) : k.moe() ? moe : dense;
  }
  if (rc.parallel.holds_head(stage, chunk)) out += output_weight_grad_bytes(rc);
  return out;
}

Bytes output_weight_grad_bytes(const config::RunConfig& rc) {
  // The LM head is a linear layer too: its input and the logits' gradient, once for the main
  // loss and once per multi-token-prediction module (each with its layer and 2h -> h
  // projection).
  const WeightGradKeep k(rc);
  const Bytes head(k.T * k.linear(k.col_in, static_cast<double>(rc.padded_vocab) / k.t));
  const double modules = static_cast<double>(rc.training.mtp_layers);
  const Bytes mtp_layer = layer_weight_grad_bytes(rc, rc.model.layer_kind(rc.model.num_layers - 1));
  return head * (1.0 + modules) + (mtp_layer + Bytes(k.T * k.linear(2.0 * k.col_in, k.h))) * modules;
}

const std::vector<std::vector<int32_t>>& held_envelope(Schedule sched, int64_t pp, int64_t stage, int64_t m, int64_t v) {
  using Key = std::array<int64_t, 5>;
  thread_local std::map<Key, std::vector<std::vector<int32_t>>> cache;
  const Key key{static_cast<int64_t>(sched), pp, stage, m, v};
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const auto V = static_cast<size_t>(v);
  std::vector<int32_t> counts(2 * V, 0);
  std::set<std::vector<int32_t>> seen;
  engine::for_each_action(sched, static_cast<int32_t>(pp), static_cast<int32_t>(stage), static_cast<int32_t>(m), static_cast<int32_t>(v),
                          [&](const engine::Action& a) {
                            const auto c = static_cast<size_t>(a.chunk);
                            switch (a.phase) {
                              case engine::Phase::kF: ++counts[c]; break;
                              case engine::Phase::kB: --counts[c], ++counts[V + c]; break;
                              case engine::Phase::kBW: --counts[c]; break;
                              case engine::Phase::kW: --counts[V + c]; break;
                            }
                            seen.insert(counts);
                          });
  // Largest count sum first: an entry that bounds another has a larger sum, so it (or one that
  // bounds it in turn) is already kept when the other is checked.
  std::vector<std::vector<int32_t>> all(seen.begin(), seen.end()), top;
  auto sum = [](const std::vector<int32_t>& x) { return std::accumulate(x.begin(), x.end(), int64_t{0}); };
  std::stable_sort(all.begin(), all.end(), [&](const auto& a, const auto& b) { return sum(a) > sum(b); });
  for (const auto& x : all) {
    const bool bounded = std::any_of(top.begin(), top.end(), [&](const std::vector<int32_t>& y) {
      for (size_t i = 0; i < x.size(); ++i) {
        if (y[i] < x[i]) return false;
      }
      return true;
    });
    if (!bounded) top.push_back(x);
  }
  return cache.emplace(key, std::move(top)).first->second;
}

Bytes stage_layer_activation_bytes(const config::RunConfig& rc, int64_t stage) {
  const int64_t v = rc.parallel.vpp;
  const bool interleaved = rc.parallel.schedule == Schedule::kInterleaved && v > 1;
  const bool split_w = rc.parallel.split_backward();
  if (!interleaved && !split_w) {
    Bytes per_mb(0);
    for (int64_t c = 0; c < v; ++c) per_mb += chunk_layer_activation_bytes(rc, stage, c);
    return per_mb * inflight_microbatches(rc, stage);
  }
  // Interleaved 1F1B, ZB-H1, ZB-V and DualPipeV: walk the stage's own order and take the largest set held
  // at once. A forward stores its chunk's activations until that chunk's backward (with unequal
  // chunks the peak can come after the warm-up); a split backward (ZB-H1, ZB-V, DualPipeV) keeps what its
  // held-back weight-gradient pass needs (each linear layer's input and output gradient) until
  // that W. After the warm-up ((pp - s - 1) * 2 + (v - 1) * pp forwards) the held set repeats
  // every pp * v actions and the cool-down only frees, so a run of pp * (v + 4) micro-batches
  // (a multiple of pp) reaches the same peak as any longer one; that bound keeps the walk short
  // for thousands of micro-batches.
  std::vector<double> full(static_cast<size_t>(v)), kept(static_cast<size_t>(v), 0.0);
  for (int64_t c = 0; c < v; ++c) {
    full[static_cast<size_t>(c)] = chunk_layer_activation_bytes(rc, stage, c).value();
    if (split_w) kept[static_cast<size_t>(c)] = chunk_layer_weight_grad_bytes(rc, stage, c).value();
  }
  const int64_t pp = rc.parallel.pp;
  const int64_t m = std::min<int64_t>(rc.num_microbatches, pp * (v + 4));
  double peak = 0;
  for (const auto& counts : held_envelope(rc.parallel.schedule, pp, stage, m, v)) {
    double held = 0;
    for (int64_t c = 0; c < v; ++c) {
      held += counts[static_cast<size_t>(c)] * full[static_cast<size_t>(c)] + counts[static_cast<size_t>(v + c)] * kept[static_cast<size_t>(c)];
    }
    peak = std::max(peak, held);
  }
  return Bytes(peak);
}

namespace {
// The smallest n in (lo, hi] for which within(n) holds, given within(hi) does and within is
// monotone (more layers recomputed or offloaded never need more memory).
template <class Within>
int64_t fewest_within(int64_t lo, int64_t hi, Within within) {
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    (within(mid) ? hi : lo) = mid;
  }
  return hi;
}
}  // namespace

OffloadedActivations offloaded_activations(const config::RunConfig& rc, int64_t stage) {
  OffloadedActivations o;
  if (rc.parallel.activation_offload_layers <= 0) return o;
  rc.for_each_stage_layer(stage, [&](int64_t l) {
    if (!rc.activation_offloaded(l)) return;
    const Bytes bytes = layer_activation_bytes(rc, rc.model.layer_kind(l));
    o.bytes += bytes;
    if (o.layers++ < 2) o.buffers += bytes;
  });
  return o;
}

int64_t fewest_recompute_layers(const config::RunConfig& rc, double usable) {
  const int64_t most = *std::max_element(rc.vstage_layers.begin(), rc.vstage_layers.end());
  config::RunConfig trial = rc;  // one copy, its layer count changed per try
  trial.parallel.recompute = Recompute::kFull;
  auto within = [&](int64_t n) {
    trial.parallel.recompute_layers = n;
    const MemoryLedger l = compute_ledger(trial);
    return l.peak().value() <= usable * l.capacity.value();
  };
  if (!within(most)) return 0;
  const int64_t n = fewest_within(0, most, within);  // 0 stands for recomputing nothing
  return n < most ? n : 0;
}

int64_t fewest_offload_layers(const config::RunConfig& rc, double usable) {
  const auto& p = rc.parallel;
  if (p.recompute != Recompute::kNone || p.vpp > 1 || p.split_backward() || !rc.hardware.host.stated) return 0;
  const int64_t most = *std::min_element(rc.vstage_layers.begin(), rc.vstage_layers.end()) - 1;
  if (most < 2) return 0;  // one offloaded layer keeps its own buffer: nothing saved
  config::RunConfig trial = rc;  // one copy, its layer count changed per try
  auto within = [&](int64_t n) {
    trial.parallel.activation_offload_layers = n;
    const MemoryLedger l = compute_ledger(trial);
    return l.peak().value() <= usable * l.capacity.value() && l.host_fits();
  };
  if (!within(most)) return 0;
  return fewest_within(1, most, within);  // one offloaded layer saves nothing
}

std::string fit_hint(const config::RunConfig& rc) {
  char buf[240];
  if (rc.parallel.recompute != Recompute::kFull || rc.parallel.recompute_layers != 0) {
    config::RunConfig trial = rc;
    trial.parallel.recompute = Recompute::kFull;
    trial.parallel.recompute_layers = fewest_recompute_layers(trial);
    const MemoryLedger l = compute_ledger(trial);
    if (l.fits()) {
      std::snprintf(buf, sizeof buf, "it fits with parallel.recompute \"full\"%s (%.2f GiB free)",
                    trial.parallel.recompute_layers > 0 ? (" and parallel.recompute_layers " + std::to_string(trial.parallel.recompute_layers)).c_str() : "",
                    (l.capacity.value() - l.peak().value()) / 1073741824.0);
      return buf;
    }
  }
  // Then CPU offload, where the state is sharded and the profile describes the host.
  const int zero = rc.parallel.effective_zero();
  if (rc.parallel.offload != config::Offload::kNone || !rc.hardware.host.stated || zero == 0) return "";
  for (const config::Offload mode : {config::Offload::kOptimizer, config::Offload::kParams}) {
    if (mode == config::Offload::kParams && zero < 3) break;
    config::RunConfig trial = rc;
    trial.parallel.offload = mode;
    const MemoryLedger l = compute_ledger(trial);
    if (!l.fits()) continue;
    std::snprintf(buf, sizeof buf, "it fits with parallel.offload \"%s\" (%.2f GiB free; the optimizer step then runs on the host's CPUs)",
                  config::to_string(mode).c_str(), (l.capacity.value() - l.peak().value()) / 1073741824.0);
    return buf;
  }
  return "";
}

std::pair<double, double> layer_param_split(const config::RunConfig& rc, int64_t layer) {
  const auto& m = rc.model;
  const auto& p = rc.parallel;
  const double h = static_cast<double>(m.hidden), t = static_cast<double>(p.tp);
  const model::LayerKind kind = m.layer_kind(layer);
  double layer_dense = m.mixer_params(kind) / t;
  double layer_expert = 0;
  if (kind.ffn == model::Ffn::kNone) {
  } else if (kind.moe()) {
    const auto& mo = m.moe;
    layer_dense += h * static_cast<double>(mo.num_experts) +
                   static_cast<double>(m.mlp_matrices()) * h * static_cast<double>(mo.shared_experts * mo.shared_expert_ffn) / t;
    layer_expert = static_cast<double>(mo.num_experts) / static_cast<double>(p.ep) * m.expert_params() / static_cast<double>(p.etp);
  } else {
    layer_dense += m.dense_mlp_params() / t;
  }
  return {layer_dense, layer_expert};
}

MemoryLedger compute_ledger(const config::RunConfig& rc) {
  const auto& m = rc.model;
  const auto& p = rc.parallel;
  const double t = static_cast<double>(p.tp);
  const StateBytes sb = state_bytes(rc.training);
  const int zero = p.effective_zero();
  const int64_t n_dense = p.shard_group();
  const int64_t n_expert = p.expert_shard_group();
  const double h = static_cast<double>(m.hidden);
  const double e = rc.activation_bytes();

  MemoryLedger ledger;
  ledger.capacity = rc.hardware.hbm_capacity;
  for (int64_t s = 0; s < p.pp; ++s) {
    StageMemory st;
    st.stage = s;
    st.layers = rc.stage_layers[static_cast<size_t>(s)];
    double dense_params = 0, expert_params = 0, largest_layer = 0;
    double adapters = 0, largest_adapters = 0;  // LoRA adapter parameters (training.lora)
    double layer_dense_weights = 0, layer_expert_weights = 0;  // the layers' own (QLoRA quantizes them)
    int64_t moe_layers = 0;
    // One layer's parameters on this rank: replicated over the dense DP group, and routed
    // experts (sharded over ep and etp); worked out once per layer kind.
    struct KindParams {
      model::LayerKind kind;
      double dense = 0, expert = 0, adapters = 0;
    };
    std::array<KindParams, 8> params_seen{};
    size_t n_params_seen = 0;
    auto params_of = [&](int64_t l) {
      const model::LayerKind kind = m.layer_kind(l);
      for (size_t i = 0; i < n_params_seen; ++i) {
        if (params_seen[i].kind == kind) return params_seen[i];
      }
      const auto [dense, expert] = layer_param_split(rc, l);
      const KindParams kp{kind, dense, expert, lora_layer_params(rc, kind)};
      if (n_params_seen < params_seen.size()) params_seen[n_params_seen++] = kp;
      return kp;
    };
    const std::vector<int64_t> layer_ids = rc.stage_layer_ids(s);
    for (const int64_t l : layer_ids) {
      if (m.is_moe_layer(l)) ++moe_layers;
      const KindParams kp = params_of(l);
      const double layer_dense = kp.dense, layer_expert = kp.expert, layer_adapters = kp.adapters;
      dense_params += layer_dense + layer_adapters;
      expert_params += layer_expert;
      layer_dense_weights += layer_dense;
      layer_expert_weights += layer_expert;
      adapters += layer_adapters;
      largest_adapters = std::max(largest_adapters, layer_adapters);
      largest_layer = std::max(largest_layer, layer_dense + layer_expert + layer_adapters);
    }
    const double vh = static_cast<double>(rc.padded_vocab) * h / t;
    // The head's stage holds an output matrix of its own unless it ties to the embedding on the
    // same stage (pp 1, or ZB-V's V, whose last virtual stage is on stage 0).
    const bool holds_head = s == p.head_stage() && (!m.tied_embeddings || p.head_stage() != 0);
    const bool holds_vocab = s == 0 || holds_head;
    // ZeRO-3 / FSDP gather the embedding and the output layer (with the final norm and any
    // MTP modules) as units of their own beside the layers.
    double largest_unit = largest_layer;
    const double before_embedding = dense_params + expert_params;
    if (s == 0) {
      dense_params += vh;
      if (m.embedding_norm) dense_params += m.norm_params();
      if (m.position == model::PositionKind::kLearned) dense_params += static_cast<double>(m.max_positions) * h;
    }
    largest_unit = std::max(largest_unit, dense_params + expert_params - before_embedding);
    const double before_head = dense_params + expert_params;
    if (s == p.head_stage()) {
      // Final norm (h for RMSNorm, 2h for LayerNorm).
      dense_params += m.output_params() - (m.tied_embeddings ? 0.0 : static_cast<double>(m.vocab) * h);
      if (holds_head) dense_params += vh;
      if (rc.training.mtp_layers > 0) {
        // Multi-token prediction modules: a layer each (its routed experts sharded like the
        // model's), the projection and norms; an untied model's head stage, when it is not
        // stage 0, also keeps a copy of the input embedding for their lookups.
        const double d = static_cast<double>(rc.training.mtp_layers);
        const auto [layer_dense, layer_expert] = layer_param_split(rc, m.num_layers - 1);
        dense_params += d * (layer_dense + 2.0 * h * h / t + 3.0 * m.norm_params());
        expert_params += d * layer_expert;
        if (p.head_stage() != 0 && !m.tied_embeddings) dense_params += vh;
      }
    }
    largest_unit = std::max(largest_unit, dense_params + expert_params - before_head);
    // The largest unit that is not a transformer layer (embedding, output layer), for QLoRA's
    // gather buffers, where layers are gathered packed.
    const double largest_vocab_unit = std::max(before_head - before_embedding, dense_params + expert_params - before_head);
    st.params = dense_params + expert_params;
    st.dense_params = dense_params;
    st.expert_params = expert_params;
    st.largest_layer_params = largest_layer;
    // Under LoRA only the adapters train; the frozen base keeps its weights alone.
    const bool lora = rc.training.lora.enabled();
    st.trainable_dense_params = lora ? adapters : dense_params;
    st.trainable_expert_params = lora ? 0.0 : expert_params;
    const double trainable = st.trainable_params();

    // QLoRA: the transformer layers' frozen weights in 4-bit NF4 (norms counted with them); the
    // embedding, head and adapters in param_dtype. Each linear's weight is dequantized to a
    // 16-bit copy around its GEMMs (the largest one at a time, in the working set). Under
    // ZeRO-3 / FSDP the packed 4 bits are sharded and the block constants stay whole.
    const bool nf4 = rc.training.lora.nf4;
    if (nf4) {
      st.quantized_dense_params = layer_dense_weights;
      st.quantized_expert_params = layer_expert_weights;
    }
    auto shard = [&](double params, double trained, int64_t n, Bytes& w, Bytes& g, Bytes& o) {
      const double dn = static_cast<double>(std::max<int64_t>(1, n));
      w += Bytes(params * sb.weights / (zero >= 3 ? dn : 1.0));
      g += Bytes(trained * sb.gradients / (zero >= 2 ? dn : 1.0));
      o += Bytes(trained * sb.optimizer / (zero >= 1 ? dn : 1.0));
    };
    shard(dense_params, st.trainable_dense_params, n_dense, st.weights, st.gradients, st.optimizer);
    shard(expert_params, st.trainable_expert_params, n_expert, st.weights, st.gradients, st.optimizer);
    if (nf4) {
      auto stored_in_nf4 = [&](double params, int64_t n) {
        const double dn = zero >= 3 ? static_cast<double>(std::max<int64_t>(1, n)) : 1.0;
        return params * ((sb.weights - config::kNf4PackedBytesPerWeight) / dn - config::kNf4ScaleBytesPerWeight);
      };
      st.weights -= Bytes(stored_in_nf4(layer_dense_weights, n_dense) + stored_in_nf4(layer_expert_weights, n_expert));
    }
    if (rc.training.lp_grads && zero < 3) st.gradients += Bytes(trainable * e);
    if (p.offload != config::Offload::kNone) {
      // CPU offload: the optimizer shard and an fp32 gradient shard for the CPU step live in
      // host memory; a reduced gradient shard (ZeRO-2/3) goes there instead of staying on the
      // GPU, and offloaded parameters leave their shard on the host too.
      const double local = st.trainable_dense_params / static_cast<double>(std::max<int64_t>(1, n_dense)) +
                           st.trainable_expert_params / static_cast<double>(std::max<int64_t>(1, n_expert));
      st.host = st.optimizer + Bytes(local * 4.0);
      st.optimizer = Bytes(0);
      if (zero >= 2) st.gradients = Bytes(0);
      if (p.offload == config::Offload::kParams) {
        st.host += st.weights;
        st.weights = Bytes(0);
      }
    }
    // fp8 weights cached beside 16-bit parameters (training.fp8_weights "cached"): each layer
    // weight's fp8 copy and fp8 transpose (norms and routers, a rounding, counted with them),
    // whole on every rank whatever ZeRO shards, from the step's first micro-batch to its end (on
    // the GPU under parameter offload too). fp8 parameters with their transposes take the two
    // bytes per weight counted above.
    if (rc.training.precision == hw::Dtype::kFp8 && rc.fp8_weights() == config::Fp8Weights::kCached) {
      st.weights += Bytes(2.0 * (layer_dense_weights + layer_expert_weights));
    }

    // Activations.
    const double inflight = inflight_microbatches(rc, s);
    st.inflight_microbatches = static_cast<int64_t>(std::ceil(inflight));
    // The largest layer kind on the stage (a MoE layer where there is one).
    Bytes per_layer(0), full_layer(0);
    std::array<model::LayerKind, 8> kinds{};
    size_t n_kinds = 0;
    for (const int64_t l : layer_ids) {
      const model::LayerKind kind = m.layer_kind(l);
      if (std::find(kinds.begin(), kinds.begin() + static_cast<long>(n_kinds), kind) != kinds.begin() + static_cast<long>(n_kinds)) continue;
      if (n_kinds < kinds.size()) kinds[n_kinds++] = kind;
      per_layer = std::max(per_layer, layer_activation_bytes(rc, kind));
      full_layer = std::max(full_layer, layer_activation_bytes_as(rc, kind, Recompute::kNone));
    }
    if (layer_ids.empty()) {
      per_layer = layer_activation_bytes(rc, false);
      full_layer = layer_activation_bytes_as(rc, model::LayerKind{}, Recompute::kNone);
    }
    st.activation_per_layer = per_layer;
    st.activations = stage_layer_activation_bytes(rc, s);
    // Activation offload: the offloaded layers' saved tensors wait on the host for every
    // micro-batch in flight; the GPU keeps two of those layers as copy buffers.
    const OffloadedActivations off = offloaded_activations(rc, s);
    st.host += off.bytes * std::ceil(inflight);
    st.activations += off.buffers;
    // Backward working set: one layer's activation gradients; under full recompute also the
    // layer being rebuilt.
    st.transient = p.recompute == Recompute::kFull ? full_layer * 2.0 : full_layer;
    // A context-parallel attention backward also holds the exchanged K/V and its accumulators.
    st.transient += cp_attention_working_bytes(rc);
    // QLoRA: the 16-bit copy of the largest weight being dequantized around its GEMM.
    if (nf4) st.transient += Bytes(e * largest_parameter_tensor(rc, false));
    if (rc.training.lp_grads && zero < 3) {
      // Accumulating each micro-batch's 16-bit gradients into the fp32 buffer casts one
      // parameter's gradient at a time to fp32 (grad.to(float32) before the add), so the largest
      // single parameter tensor has a transient fp32 copy while the other micro-batches'
      // activations are still held.
      st.transient = std::max(st.transient, Bytes(4.0 * largest_parameter_tensor(rc, holds_vocab)));
    }
    const double tokens = static_cast<double>(p.micro_batch_size) * static_cast<double>(rc.training.seq_len) /
                          static_cast<double>(p.cp);
    const bool sp = p.sp && p.tp > 1;
    // One micro-batch's hidden states at a stage boundary (the sequence shard under SP): the
    // residual stream (RunConfig::residual_bytes).
    const double boundary = rc.residual_bytes() * h * tokens / (sp ? t : 1.0);
    if (s == 0 && m.embedding_norm) {
      // The embedding norm keeps its input (the looked-up embeddings) for backward.
      st.activations += Bytes(boundary * inflight);
    }
    const bool keep_all = p.keep_step_outputs == config::StepOutputs::kAllStages && p.pp > 1;
    for (int64_t c = 0; c < std::max<int64_t>(1, p.vpp); ++c) {
      // All m micro-batches' kept outputs are live at the stage's last forward, while its
      // in-flight activations are still at their peak.
      st.kept_outputs += chunk_kept_output_bytes(rc, s, c) * static_cast<double>(rc.num_microbatches);
    }
    if (p.keep_stage_outputs && s != p.head_stage() && !keep_all) {
      // The stage output of every in-flight micro-batch stays in the engine's pipe buffers.
      st.activations += Bytes(boundary * std::ceil(inflight));
    }
    if (p.recv_buffer_per_microbatch && p.pp > 1) {
      // One receive buffer per micro-batch for each local stage chunk's input (not the model's
      // first chunk) and output gradient (not its last), allocated once and kept.
      const double chunks = static_cast<double>(std::max<int64_t>(1, p.vpp));
      // A V's turn passes chunk 0's output to chunk 1 on the same rank: no buffer either way.
      const double turn = p.v_shape() && s == p.pp - 1 ? 1.0 : 0.0;
      const double inputs = chunks - (s == 0 ? 1.0 : 0.0) - turn, grads = chunks - (s == p.head_stage() ? 1.0 : 0.0) - turn;
      st.buffers += Bytes(boundary * static_cast<double>(rc.num_microbatches) * (inputs + grads));
    }
    if (s == p.head_stage()) {
      const double elems = tokens * static_cast<double>(rc.padded_vocab) / t;
      st.logits = Bytes(elems * loss_peak_bytes_per_logit(rc));
      // Multi-token prediction: each module's loss keeps what its backward needs (the fp32
      // log-softmax output of an eager loss, the fused loss's softmax copy) while another
      // loss's backward peaks.
      const double mtp = static_cast<double>(rc.training.mtp_layers);
      const double kept_per_logit = rc.training.loss == config::LossImpl::kEager ? 4.0 : (rc.training.fp32_logits ? 4.0 : e);
      st.logits += Bytes(elems * kept_per_logit * mtp);
      // GPipe runs every forward before the first backward, so the last stage keeps the logits
      // (and the loss's copy) of all m micro-batches; the other schedules back-propagate each
      // micro-batch through the output layer right after its forward.
      if (p.schedule == Schedule::kGpipe) st.activations += st.logits * (static_cast<double>(rc.num_microbatches) - 1.0);
      // Logits kept for step() to return: at the last micro-batch's loss the m - 1 earlier
      // ones are held beside its working set, and through its backward all m; the current
      // micro-batch's 16-bit logits move from the loss working set to the kept outputs.
      const Bytes kept_logits = chunk_kept_output_bytes(rc, s, std::max<int64_t>(1, p.vpp) - 1);
      st.logits = Bytes(std::max(0.0, (st.logits - kept_logits).value()));
      // The head (and any MTP module) runs in the last virtual stage, whose forward is followed
      // by its backward: one micro-batch's worth, all m under GPipe.
      const double head_inflight = p.schedule == Schedule::kGpipe ? static_cast<double>(rc.num_microbatches) : 1.0;
      // Per micro-batch: the final norm's input and the LM head's input (the sequence shard
      // under SP, re-gathered in backward, unless the gathered input is kept).
      const bool keeps_gathered = p.keeps_gathered_input();
      // A frozen head (LoRA) keeps no input: it has no weight gradient.
      const double head_input = rc.training.lora.enabled() ? 0.0 : e * h * tokens / (sp && !keeps_gathered ? t : 1.0);
      st.activations += Bytes((boundary + head_input) * head_inflight);
      if (rc.training.mtp_layers > 0) {
        // Each module: its layer's activations (recomputed as the model's layers are, as
        // Megatron's MTP layer is), its projection's [h; embedding] input (the sequence shard
        // under SP), its final norm's and its head's inputs.
        const Bytes mtp_layer = layer_activation_bytes(rc, m.layer_kind(m.num_layers - 1));
        const double proj_input = 2.0 * e * h * tokens / (sp ? t : 1.0);
        st.activations += (mtp_layer + Bytes(proj_input + boundary + head_input)) * (head_inflight * mtp);
      }
    }
    // Buffers.
    if (zero >= 3) {
      // Gathered weights in training.gather_dtype (the compute dtype unless FSDP gathers the
      // stored fp32 parameters): the unit running (a layer, or the embedding or output layer
      // when larger) and a layer prefetched beside it (none when gathers are issued in line,
      // param_gather_overlap off), and the running unit's unsharded gradient.
      // QLoRA gathers its layers' packed 4-bit weights (the block constants stay resident).
      const double wc = hw::bytes_per_element(rc.training.gather_dtype);
      const double layer_wc = rc.gathered_layer_weight_bytes();
      const double prefetched = p.param_gather_overlap ? largest_layer * layer_wc : 0.0;
      const double running = nf4 ? std::max(largest_layer * layer_wc, largest_vocab_unit * wc) : largest_unit * wc;
      const double gathered = running + prefetched + (lora ? largest_adapters : largest_unit) * sb.gradients;
      st.buffers += Bytes(gathered);
      if (!p.reshard_after_forward) {
        const double dn = static_cast<double>(std::max<int64_t>(1, n_dense));
        // The gathered (unsharded) parameters are a separate allocation beside the resident
        // shard, in the compute dtype, for the whole step.
        const double quantized = st.quantized_dense_params + st.quantized_expert_params;
        st.buffers += Bytes((st.params - quantized) * wc + quantized * layer_wc);
        // Without resharding, gradients of all micro-batches but the last are accumulated
        // unsharded (no reduce-scatter until the last), in the reduction dtype.
        if (rc.num_microbatches > 1) st.buffers += Bytes(trainable * sb.gradients * (1.0 - 1.0 / dn));
      }
    } else if (p.dp * p.cp > 1 && p.bucket_layout == config::BucketLayout::kDdp) {
      // One bucket's communication buffer (no larger than the stage's gradients); Megatron-Core
      // reduces its buckets in place in the contiguous gradient buffer.
      st.buffers += Bytes(std::min(p.bucket_mb * 1e6, trainable * sb.gradients));
    }
    st.buffers += Bytes(flex_dispatch_buffer_bytes(rc));
    const auto [multi, pairs] = nccl_communicators(rc, s);
    st.communicators = multi;
    st.pair_communicators = pairs;
    st.alltoall_peers = nccl_alltoall_peers(rc);
    st.nccl = rc.hardware.nccl_comm_memory * static_cast<double>(multi) +
              rc.hardware.nccl_pair_memory * static_cast<double>(pairs) +
              rc.hardware.nccl_alltoall_peer_memory * static_cast<double>(st.alltoall_peers);
    st.runtime = rc.hardware.runtime_reserved + st.nccl;
    ledger.stages.push_back(st);
  }
  ledger.host_capacity = rc.hardware.host.memory;
  const double node_gpus = static_cast<double>(std::min<int64_t>(rc.cluster.num_gpus, rc.cluster.gpus_per_node));
  for (const auto& st : ledger.stages) ledger.host_per_node = std::max(ledger.host_per_node, st.host * node_gpus);
  ledger.peak_stage = 0;
  for (size_t i = 1; i < ledger.stages.size(); ++i) {
    if (ledger.stages[i].total() > ledger.stages[static_cast<size_t>(ledger.peak_stage)].total()) {
      ledger.peak_stage = static_cast<int64_t>(i);
    }
  }
  return ledger;
}

}  // namespace stepcast::memory
