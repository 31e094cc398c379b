#include "sim/estimate/workload.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <unordered_map>

namespace stepcast::estimate {

double beside_compute(double comm, double compute, double slow, double waits) {
  return std::max(comm + waits - compute, std::min(comm, compute) * slow);
}

using core::Bytes;
using core::Duration;
using core::Flops;
using cost::Collective;

const char* to_string(CommKind k) {
  switch (k) {
    case CommKind::kNone: return "none";
    case CommKind::kTp: return "tp";
    case CommKind::kCp: return "cp";
    case CommKind::kEp: return "ep";
    case CommKind::kPp: return "pp";
    case CommKind::kDp: return "dp";
  }
  return "?";
}

namespace {

struct Ctx {
  const config::RunConfig& rc;
  const hw::HardwareProfile& hw;
  const GroupPlacements& places;
  hw::Dtype gemm_dtype;   // dtype of linear-layer GEMMs
  hw::Dtype act_dtype;    // dtype of stored activations and element-wise work
  double e = 2.0;         // bytes per activation element
  double T = 0;           // tokens per rank per micro-batch
  double T_rep = 0;       // tokens per rank for norms and residuals (T / tp under SP)
  double t = 1;           // tp
  bool sp = false;
  // Weights stored (or gathered) wider than the compute dtype: autocast casts each weight per
  // use, and its 16-bit gradient back (bytes per weight element, forward and backward).
  double weight_cast_fwd = 0, weight_cast_bwd = 0;
  // Bytes per element of the residual stream (RunConfig::residual_bytes): the norms read it and
  // hand the next linear a 16-bit input; the residual adds read and write it.
  double re = 2.0;
};

// Per-rank context shared by every layer kind: dtypes, tokens, TP degree and SP sharding.
Ctx make_ctx(const config::RunConfig& rc, const GroupPlacements& places, double tokens) {
  Ctx c{rc, rc.hardware, places, rc.training.precision, rc.training.precision};
  if (c.act_dtype == hw::Dtype::kFp8) c.act_dtype = hw::Dtype::kBf16;
  c.e = hw::bytes_per_element(c.act_dtype);
  c.T = tokens;
  c.t = static_cast<double>(rc.parallel.tp);
  c.sp = rc.parallel.sp && rc.parallel.tp > 1;
  c.T_rep = c.sp ? c.T / c.t : c.T;
  const auto& tr = rc.training;
  const bool sharded = rc.parallel.effective_zero() >= 3;
  const double w = rc.compute_weight_bytes();
  c.re = rc.residual_bytes();
  if (w > c.e) {
    c.weight_cast_fwd = w + c.e;
    // The 16-bit weight gradient cast to the weights' dtype; FSDP then casts the unsharded
    // gradient once more to a narrower reduction dtype before reduce-scattering it.
    const double r = hw::bytes_per_element(tr.reduce_dtype);
    c.weight_cast_bwd = c.e + w + (sharded && r < w ? w + r : 0.0);
  }
  return c;
}

Op gemm_op(const Ctx& c, const std::string& name, double m, double n, double k, double batch = 1.0,
           bool weight_grad = false) {
  Op op;
  op.name = name;
  op.kind = OpKind::kGemm;
  const cost::GemmShape g{m, n, k, batch};
  op.time = cost::gemm_time(g, c.gemm_dtype, c.hw);
  op.flops = g.flops();
  op.gemm = g;
  op.weight_grad = weight_grad;
  return op;
}

Op mem_op(const Ctx& c, const std::string& name, double bytes) {
  Op op;
  op.name = name;
  op.kind = OpKind::kElementwise;
  op.bytes = Bytes(bytes);
  op.time = cost::memory_time(op.bytes, c.hw) + c.hw.efficiency.kernel_overhead;
  return op;
}

Op comm_op(const Ctx& c, const std::string& name, CommKind kind, Collective coll, double bytes,
           const mesh::Placement& where, Duration hidden_by = Duration(0)) {
  Op op;
  op.name = name;
  op.kind = OpKind::kComm;
  op.comm = kind;
  op.bytes = Bytes(bytes);
  op.time = cost::collective_time(coll, op.bytes, where, c.hw);
  op.collective = coll;
  op.hidden_by = hidden_by;
  if (!where.intra_node()) op.nic_bytes = cost::link_bytes(coll, op.bytes, where);
  return op;
}

// Appends the backward pair (input gradient, weight gradient) of a forward GEMM.
void add_gemm_backward(const Ctx& c, std::vector<Op>& bwd, const Op& f, double m, double n, double k,
                       double batch = 1.0) {
  bwd.push_back(gemm_op(c, f.name + ".dgrad", m, k, n, batch));
  bwd.push_back(gemm_op(c, f.name + ".wgrad", k, n, m, batch, true));
}

// The linears Megatron builds as Transformer Engine's TELayerNormColumnParallelLinear: the norm
// before them runs inside the linear's module and can write its fp8 input.
bool norm_fed_linear(const std::string& name) {
  return name == "qkv" || name == "fc1" || name == "q_up" || name == "kv_up" || name == "in_proj";
}

// FP8 linear layers quantise their inputs (read 16-bit, write 8-bit) and, in backward, the
// incoming gradient and (with a weight gradient) the transposed copies the wgrad GEMM needs.
// Under training.fp8_norm_quantize a norm-fed linear's input comes out of the norm kernel in
// fp8 (no cast pass), and where that fp8 input is kept (fp8_saved_inputs) the weight gradient
// transposes it, one byte read and one written per element.
void add_fp8_casts(const Ctx& c, std::vector<Op>& fwd, std::vector<Op>& bwd, const std::string& name,
                   double m, double n, double k, bool weight_grad = true) {
  if (c.gemm_dtype != hw::Dtype::kFp8) return;
  const auto& tr = c.rc.training;
  const bool from_norm = tr.fp8_norm_quantize && norm_fed_linear(name);
  if (!from_norm) fwd.push_back(mem_op(c, name + ".cast", 3.0 * m * k));
  const double input_copy = from_norm && tr.fp8_saved_inputs ? 2.0 : 3.0;
  bwd.push_back(mem_op(c, name + ".cast_bwd", 3.0 * m * n + (weight_grad ? input_copy * m * k : 0.0)));
}

// fp8 linears that quantize their 16-bit weight at every use (training.fp8_weights "cast"):
// Transformer Engine's fused cast-transpose writes the fp8 copy and its transpose in forward
// (training.fp8_saved_inputs: TE's conventions); torchao casts the weight in forward and again,
// transposed, for the input-gradient GEMM. Weights gathered in fp8 (gather_dtype fp8 under
// ZeRO-3 / FSDP) arrive quantized. fp8 parameters and cached fp8 weights are quantized once per
// step, a rounding next to the step's GEMMs.
void add_fp8_weight_casts(const Ctx& c, std::vector<Op>& fwd, std::vector<Op>& bwd, const std::string& name, double weights) {
  if (c.gemm_dtype != hw::Dtype::kFp8 || c.rc.fp8_weights() != config::Fp8Weights::kCast) return;
  if (c.rc.parallel.effective_zero() >= 3 && c.rc.training.gather_dtype == hw::Dtype::kFp8) return;
  if (c.rc.training.fp8_saved_inputs) {
    fwd.push_back(mem_op(c, name + ".fp8_weight_cast", (c.e + 2.0) * weights));
  } else {
    fwd.push_back(mem_op(c, name + ".fp8_weight_cast", (c.e + 1.0) * weights));
    bwd.push_back(mem_op(c, name + ".fp8_weight_cast_bwd", (c.e + 1.0) * weights));
  }
}

// Where a LoRA adapter's rank-wide intermediate x A needs summing across the TP group: beside a
// row-parallel layer (o_proj, fc2) each rank's A sees its slice of the input, so x A is a partial
// sum reduced in forward before B; beside a column-parallel layer A sees the whole input but the
// gradient reaching x A through the rank's slice of B is partial, reduced in backward before A's
// gradients. Beside a layer that is not split (MLA's down-projections) nothing is reduced.
enum class LoraTpReduce { kNone, kForward, kBackward };

// A LoRA adapter beside a frozen linear layer (m tokens, k in, n out): x A (k x rank), then
// (x A) B (rank x n) added to the layer's output; backward the input gradient through B and A
// (added to the layer's) and both weight gradients. The adapters run in the 16-bit activation
// dtype, as the frameworks keep them out of fp8. The TP reduction of x A (m x rank elements) is
// an all-reduce on the TP group, small and latency-bound.
void add_lora(const Ctx& c, std::vector<Op>& fwd, std::vector<Op>& bwd, const std::string& name, double m, double n, double k,
              LoraTpReduce reduce) {
  Ctx a = c;
  a.gemm_dtype = c.act_dtype;
  const double r = static_cast<double>(c.rc.training.lora.rank);
  auto tp_reduce = [&](const std::string& op_name) {
    return comm_op(c, op_name, CommKind::kTp, Collective::kAllReduce, m * r * c.e, c.places.tp);
  };
  fwd.push_back(gemm_op(a, name + ".lora_a", m, r, k));
  if (reduce == LoraTpReduce::kForward) fwd.push_back(tp_reduce(name + ".lora_a.tp_reduce"));
  fwd.push_back(gemm_op(a, name + ".lora_b", m, n, r));
  fwd.back().saved_bytes = c.e * m * r;
  fwd.push_back(mem_op(c, name + ".lora_add", 3.0 * c.e * m * n));
  bwd.push_back(gemm_op(a, name + ".lora_b.dgrad", m, r, n));
  bwd.push_back(gemm_op(a, name + ".lora_b.wgrad", r, n, m, 1.0, true));
  if (reduce == LoraTpReduce::kBackward) bwd.push_back(tp_reduce(name + ".lora_b.dgrad.tp_reduce"));
  bwd.push_back(gemm_op(a, name + ".lora_a.dgrad", m, k, r));
  bwd.push_back(gemm_op(a, name + ".lora_a.wgrad", k, r, m, 1.0, true));
  bwd.push_back(mem_op(c, name + ".lora_dx_add", 3.0 * c.e * m * k));
}

// QLoRA quantizes the transformer layers' linear weights; the output head and the multi-token
// prediction projection stay in the 16-bit dtype.
bool quantized_base(const std::string& name) { return name != "lm_head" && !name.starts_with("mtp."); }

// A linear layer: forward GEMM, backward dgrad + wgrad, fp8 casts. `saved`: the bytes of its
// input the forward keeps for the weight gradient (Op::saved_bytes). Under LoRA
// (training.lora) the layer is frozen: no weight gradient, and no input kept unless it carries
// an adapter (config::lora_target_of its name), whose own work follows it. `tp_split`: the
// layer is split across the TP group (false for MLA's down-projections, which every rank runs
// whole), which decides whether an adapter's x A is reduced.
Duration linear(const Ctx& c, std::vector<Op>& fwd, std::vector<Op>& bwd, const std::string& name,
                double m, double n, double k, double batch = 1.0, double saved = 0.0, bool tp_split = true) {
  const auto& lora = c.rc.training.lora;
  const bool adapted = lora.enabled() && (lora.targets & config::lora_target_of(name)) != 0;
  Op f = gemm_op(c, name, m, n, k, batch);
  f.saved_bytes = lora.enabled() && !adapted ? 0.0 : saved;
  const Duration t = f.time;
  fwd.push_back(f);
  if (lora.enabled()) {
    bwd.push_back(gemm_op(c, name + ".dgrad", m, k, n, batch));
  } else {
    add_gemm_backward(c, bwd, f, m, n, k, batch);
  }
  add_fp8_casts(c, fwd, bwd, name, m * batch, n, k, !lora.enabled());
  add_fp8_weight_casts(c, fwd, bwd, name, n * k * batch);
  if (c.weight_cast_fwd > 0) {
    fwd.push_back(mem_op(c, name + ".weight_cast", c.weight_cast_fwd * n * k * batch));
    if (!lora.enabled()) bwd.push_back(mem_op(c, name + ".weight_grad_cast", c.weight_cast_bwd * n * k * batch));
  }
  if (lora.nf4 && quantized_base(name)) {
    // QLoRA: the 4-bit weight is dequantized to the compute dtype before the forward GEMM and
    // again before the input-gradient GEMM (read the NF4 blocks, write 16-bit).
    const double bytes = (config::kNf4BytesPerWeight + c.e) * n * k * batch;
    fwd.push_back(mem_op(c, name + ".dequant", bytes));
    bwd.push_back(mem_op(c, name + ".dequant_bwd", bytes));
  }
  if (adapted) {
    const uint32_t target = config::lora_target_of(name);
    const bool split = c.t > 1 && tp_split;
    const LoraTpReduce reduce = !split ? LoraTpReduce::kNone
                                : (target == config::kLoraOProj || target == config::kLoraFc2) ? LoraTpReduce::kForward
                                                                                                : LoraTpReduce::kBackward;
    add_lora(c, fwd, bwd, name, m * batch, n, k, reduce);
  }
  return t;
}

// A TP collective overlapped chunk by chunk with its GEMM (ring exchange over the tp ranks).
Op tp_overlapped(const Ctx& c, Op op) {
  if (op.hidden_by.value() > 0) {
    op.overlap_chunks = c.t;
    const double sms = static_cast<double>(std::max<int64_t>(1, c.hw.sm_count));
    op.overlap_sm_fraction = std::min(0.9, c.hw.efficiency.tp_overlap_sms / sms);
  }
  return op;
}

// Memory passes of eager (unfused) element-wise work relative to one fused kernel, from the
// operator chains eager PyTorch runs (bytes moved per element, 16-bit input and output):
//   RMSNorm x * rsqrt(mean(x^2) + eps) on an fp32 upcast, cast back, times the weight:
//     upcast 2+4, square 4+4, mean 4, scale 4+4, cast 4+2, weight 2+2 = 36 vs fused 2+2: x9
//   rotary embedding through complex views of an fp32 upcast: upcast 2+4, complex multiply
//     4+4 (and the table), cast 4+2 = 20 vs fused 2+2: x5
//   gated activation silu(a) * b: silu 2+2, multiply 2+2+2 = 10 vs fused 2+2+2: x5/3
// LayerNorm and plain GeLU are single kernels in eager PyTorch too.
enum class Eager { kNorm, kRope, kGatedAct };
double eager_factor(const Ctx& c, Eager k) {
  if (c.rc.training.fused_elementwise) return 1.0;
  switch (k) {
    case Eager::kNorm: return c.rc.model.norm == model::NormKind::kRmsNorm ? 9.0 : 1.0;
    case Eager::kRope: return 5.0;
    case Eager::kGatedAct: return c.rc.model.mlp == model::MlpKind::kGated ? 5.0 / 3.0 : 1.0;
  }
  return 1.0;
}

// The backward work of one linear (the ops from `from` on): its input-gradient side (the
// dgrad GEMM and its casts) and its weight-gradient GEMMs.
struct BackwardTimes {
  Duration input, weight;
  [[nodiscard]] Duration all() const { return input + weight; }
};

BackwardTimes backward_times(const std::vector<Op>& ops, size_t from) {
  double input = 0, weight = 0;
  for (size_t i = from; i < ops.size(); ++i) {
    if (ops[i].kind == OpKind::kComm) continue;
    (ops[i].weight_grad ? weight : input) += ops[i].time.value();
  }
  return {Duration(input), Duration(weight)};
}

// Bytes per element a TP all-gather of a linear's input or output gradient moves: one where
// fp8 linears quantize the sequence shard before gathering it (training.fp8_tp_gather), else
// the 16-bit activation width. LoRA adapters read the 16-bit input, and the output layer stays
// out of fp8.
double gather_bytes_per_element(const Ctx& c) {
  const auto& tr = c.rc.training;
  return c.gemm_dtype == hw::Dtype::kFp8 && tr.fp8_tp_gather && !tr.lora.enabled() ? 1.0 : c.e;
}

// TP collectives around a column-parallel (entry) or row-parallel (exit) linear.
// `width`: the entering activation's width in hidden sizes (2 for MTP's [h; embedding] pair).
// Under SP a linear that keeps only its input's sequence shard gathers it again in backward for
// its weight gradient. With the asynchronous linear backward (Parallel::async_linear_backward,
// no comm-overlap kernels) the entry's backward runs as Megatron-LM's and Transformer Engine's
// linear layers run it: that re-gather beside the input-gradient GEMM and the input gradient
// reduce-scattered beside the weight-gradient GEMM; without SP the input gradient's all-reduce
// beside the weight-gradient GEMM. Blocking, each runs in line. Schedules that defer the weight
// gradient (zero-bubble, DualPipe) leave the reduction nothing to hide behind. Under the
// comm-overlap kernels Transformer Engine overlaps the re-gather with the input-gradient GEMM
// (its bulk overlap) and PyTorch's async TP with the weight-gradient GEMM it feeds, costed as
// the other overlapped TP collectives are.
void tp_entry(const Ctx& c, std::vector<Op>& fwd, std::vector<Op>& bwd, const std::string& name,
              Duration gemm_fwd, const BackwardTimes& gemm_bwd, double width = 1.0) {
  if (c.t <= 1) return;
  const auto& p = c.rc.parallel;
  const double elems = width * c.T * static_cast<double>(c.rc.model.hidden);
  const double bytes = elems * c.e, gather_bytes = elems * gather_bytes_per_element(c);
  const bool overlap = p.tp_comm_overlap;
  // (The input-gradient reduction sums several layers' dgrads: see tp_overlap_input_grad.)
  const bool overlap_grad = overlap && p.tp_overlap_input_grad;
  const bool async = p.async_linear_backward();
  const Duration grad_hide = overlap_grad ? gemm_bwd.all()
                             : async && !p.split_backward() ? gemm_bwd.weight
                                                            : Duration(0);
  auto back = [&](Op op) { bwd.push_back(overlap ? tp_overlapped(c, std::move(op)) : std::move(op)); };
  if (c.sp) {
    fwd.push_back(tp_overlapped(c, comm_op(c, name + ".ag", CommKind::kTp, Collective::kAllGather, gather_bytes, c.places.tp,
                          overlap ? gemm_fwd : Duration(0))));
    // A kept shard (Parallel::keeps_gathered_input) is gathered again for the weight gradient.
    // Under async TP (DTensor's saved input, comm overlap) that gather feeds the weight-gradient
    // matmul, an all-gather -> matmul pattern the micro-pipeline pass fuses with it.
    if (!p.keeps_gathered_input()) {
      const Duration beside = overlap && p.tp_saves_gathered_input ? gemm_bwd.weight : gemm_bwd.input;
      back(comm_op(c, name + ".ag_wgrad", CommKind::kTp, Collective::kAllGather, gather_bytes, c.places.tp,
                   async || overlap ? beside : Duration(0)));
    }
    back(comm_op(c, name + ".rs_grad", CommKind::kTp, Collective::kReduceScatter, bytes, c.places.tp, grad_hide));
  } else {
    back(comm_op(c, name + ".ar_grad", CommKind::kTp, Collective::kAllReduce, bytes, c.places.tp, grad_hide));
  }
}

void tp_exit(const Ctx& c, std::vector<Op>& fwd, std::vector<Op>& bwd, const std::string& name,
             Duration gemm_fwd, Duration gemm_bwd) {
  if (c.t <= 1) return;
  const double elems = c.T * static_cast<double>(c.rc.model.hidden);
  const double bytes = elems * c.e;
  const bool overlap = c.rc.parallel.tp_comm_overlap;
  if (c.sp) {
    fwd.push_back(tp_overlapped(c, comm_op(c, name + ".rs", CommKind::kTp, Collective::kReduceScatter, bytes, c.places.tp,
                          overlap ? gemm_fwd : Duration(0))));
    bwd.push_back(tp_overlapped(c, comm_op(c, name + ".ag_grad", CommKind::kTp, Collective::kAllGather, elems * gather_bytes_per_element(c), c.places.tp,
                          overlap ? gemm_bwd : Duration(0))));
  } else {
    fwd.push_back(tp_overlapped(c, comm_op(c, name + ".ar", CommKind::kTp, Collective::kAllReduce, bytes, c.places.tp,
                          overlap ? gemm_fwd : Duration(0))));
  }
}

double sum_time(const std::vector<Op>& ops, size_t from) {
  double s = 0;
  for (size_t i = from; i < ops.size(); ++i) {
    if (ops[i].kind != OpKind::kComm) s += ops[i].time.value();
  }
  return s;
}

// Shared by the recurrent token mixers (Mamba-2, Gated DeltaNet): the column-parallel in_proj
// (width `in_w`) behind the TP entry collective `tp_name`.
void mixer_in_proj(const Ctx& c, std::vector<Op>& F, std::vector<Op>& B, const std::string& tp_name, double in_w, double in_tokens) {
  const double h = static_cast<double>(c.rc.model.hidden);
  const size_t in_f = F.size(), in_b = B.size();
  linear(c, F, B, "in_proj", c.T, in_w, h, 1.0, c.e * h * in_tokens);
  std::vector<Op> f2, b2;
  tp_entry(c, f2, b2, tp_name, Duration(sum_time(F, in_f)), backward_times(B, in_b));
  F.insert(F.begin() + static_cast<long>(in_f), f2.begin(), f2.end());
  B.insert(B.end(), b2.begin(), b2.end());
}

// A recurrent mixer's context-parallel exchange `name` (sequence shard <-> heads / cp of the
// whole sequence): one all-to-all of `bytes` each way, with a copy that reorders the
// load-balanced chunks when `reorder` (cp 1: nothing).
void cp_head_exchange(const Ctx& c, std::vector<Op>& F, std::vector<Op>& B, const std::string& name, double bytes, bool reorder) {
  if (c.rc.parallel.cp <= 1) return;
  F.push_back(comm_op(c, name, CommKind::kCp, Collective::kAllToAll, bytes, c.places.cp));
  B.push_back(comm_op(c, name + "_grad", CommKind::kCp, Collective::kAllToAll, bytes, c.places.cp));
  if (reorder) {
    F.push_back(mem_op(c, name + ".reorder", 2.0 * bytes));
    B.push_back(mem_op(c, name + "_grad.reorder", 2.0 * bytes));
  }
}

// A scan kernel's forward and backward operators (memory-bound or tensor-core work, whichever
// its shape's roofline says); the forward keeps `saved` bytes for backward.
template <class Shape, class TimeFn>
void scan_ops(const Ctx& c, std::vector<Op>& F, std::vector<Op>& B, const std::string& name, const Shape& shape, TimeFn time, double saved) {
  for (const bool backward : {false, true}) {
    Op op;
    op.name = backward ? name + ".bwd" : name;
    op.kind = OpKind::kElementwise;
    op.time = time(shape, backward, c.hw);
    op.flops = shape.flops(backward);
    op.bytes = shape.bytes(backward);
    op.saved_bytes = backward ? 0.0 : saved;
    (backward ? B : F).push_back(op);
  }
}

// The gated RMSNorm o x silu(z) over `width` (read both, write the output; backward rebuilds it
// (3 passes), reads o, z and the output gradient and writes do and dz (5)), then the
// row-parallel out_proj and its TP exit collective `tp_name`. `before_out` runs between them.
template <class Between>
void mixer_out(const Ctx& c, std::vector<Op>& F, std::vector<Op>& B, const std::string& tp_name, double width, Between before_out) {
  const double h = static_cast<double>(c.rc.model.hidden);
  F.push_back(mem_op(c, "gated_norm", 3.0 * c.e * width * c.T));
  B.push_back(mem_op(c, "gated_norm.bwd", 8.0 * c.e * width * c.T));
  before_out();
  const size_t o_f = F.size(), o_b = B.size();
  linear(c, F, B, "out_proj", c.T, h, width, 1.0, c.e * width * c.T);
  std::vector<Op> f2, b2;
  tp_exit(c, f2, b2, tp_name, Duration(sum_time(F, o_f)), Duration(sum_time(B, o_b)));
  F.insert(F.end(), f2.begin(), f2.end());
  B.insert(B.end(), b2.begin(), b2.end());
}

// A Mamba-2 mixer on one rank (Megatron-Core's MambaMixer: heads, groups and d_inner split over
// TP, in_proj column-parallel and out_proj row-parallel, with an attention block's TP
// collectives around them). Forward: in_proj to z, x, B, C, dt; the depthwise causal conv1d and
// SiLU over x, B and C; the SSD scan (cost::ssd_scan_time); the gated RMSNorm y * silu(z) over
// d_inner; out_proj. Megatron's memory-efficient path (mamba_split_conv1d_scan_combined) keeps
// the in_proj output and the scan output for backward and rebuilds the conv and the gated norm
// there; out_proj keeps its input as any linear does.
// Context parallelism (Megatron-Core's MambaContextParallel): an all-to-all turns the in_proj
// output from a sequence shard of every head into the whole sequence of heads / cp (B and C
// repeated first where a TP rank has fewer groups than cp), the conv, scan and gated norm run
// there, and a second all-to-all returns the normed output to the sequence shard; each also
// reorders the load-balanced chunks (a copy). Backward mirrors both.
void mamba_mixer(const Ctx& c, std::vector<Op>& F, std::vector<Op>& B, double in_tokens) {
  const auto& mb = c.rc.model.mamba;
  const double e = c.e, T = c.T, t = c.t;
  const double cp = static_cast<double>(c.rc.parallel.cp);
  const double d = static_cast<double>(mb.d_inner()) / t;
  // The width of B (or C) per local token: its groups on this rank, or cp of them where B and
  // C are repeated for CP ranks that share a group.
  const double gn = std::max(static_cast<double>(mb.groups) / t, cp) * static_cast<double>(mb.state);
  const double heads = static_cast<double>(mb.heads) / t;
  const double conv = d + 2.0 * gn, in_w = 2.0 * d + 2.0 * gn + heads;
  auto cp_exchange = [&](const std::string& name, double bytes) { cp_head_exchange(c, F, B, "mamba_cp." + name, bytes, true); };
  mixer_in_proj(c, F, B, "mamba_in", in_w, in_tokens);
  cp_exchange("a2a_in", e * in_w * T);
  // Read x, B, C and write them activated; backward rebuilds them (2 passes), reads the
  // incoming gradient and the input and writes the input gradient (3).
  F.push_back(mem_op(c, "conv1d", 2.0 * e * conv * T));
  F.back().saved_bytes = e * in_w * T;  // the in_proj output (z, x, B, C, dt)
  B.push_back(mem_op(c, "conv1d.bwd", 5.0 * e * conv * T));
  // Under CP the scan runs over the whole sequence (cp x the local tokens) with heads / cp.
  const cost::SsdShape shape{T * cp, heads / cp, static_cast<double>(mb.head_dim), static_cast<double>(mb.state),
                             gn / static_cast<double>(mb.state) / cp, static_cast<double>(mb.chunk), e};
  // Keeps y before the norm, fp32 dt and its cumulative sum.
  scan_ops(c, F, B, "ssd_scan", shape, cost::ssd_scan_time, e * d * T + 8.0 * heads * T);
  mixer_out(c, F, B, "mamba_out", d, [&] { cp_exchange("a2a_out", e * d * T); });
}

// A Gated DeltaNet mixer on one rank (Qwen3-Next's; key and value heads split over TP as
// Megatron-Core splits them): in_proj to q, k, v, z, b and a; the depthwise causal conv1d and
// SiLU over q, k and v with the L2 norm of q and k; the chunked gated delta rule
// (cost::gdn_scan_time); the gated RMSNorm o x silu(z); out_proj. Kept for backward: the in_proj
// output, the conv output (the rule's q, k, v), the fp32 decays and write strengths, the rule's
// output and out_proj's input.
void linear_attention_mixer(const Ctx& c, std::vector<Op>& F, std::vector<Op>& B, double in_tokens) {
  const auto& la = c.rc.model.linear;
  const double e = c.e, T = c.T, t = c.t;
  const double key = static_cast<double>(la.key_width()) / t, value = static_cast<double>(la.value_width()) / t;
  const double v_heads = static_cast<double>(la.v_heads) / t, k_heads = static_cast<double>(la.k_heads) / t;
  const double conv = 2.0 * key + value, in_w = 2.0 * key + 2.0 * value + 2.0 * v_heads;
  const double cp = static_cast<double>(c.rc.parallel.cp);
  mixer_in_proj(c, F, B, "linear_in", in_w, in_tokens);
  // Context parallelism (Megatron-Core's head-parallel mode): an all-to-all of the in_proj output
  // hands each CP rank the whole sequence of heads / cp, and one of the normed output returns it.
  auto cp_exchange = [&](const std::string& name, double bytes) { cp_head_exchange(c, F, B, "linear_cp." + name, bytes, false); };
  cp_exchange("a2a_in", e * in_w * T);
  // The conv and SiLU (read and write q, k, v), then the L2 norm of q and k (read and write
  // them again); backward twice that and the gradients' reads.
  F.push_back(mem_op(c, "conv1d", 2.0 * e * conv * T + 4.0 * e * key * T));
  F.back().saved_bytes = e * in_w * T + e * conv * T + 8.0 * v_heads * T;
  B.push_back(mem_op(c, "conv1d.bwd", 5.0 * e * conv * T + 8.0 * e * key * T));
  // Under CP the rule runs over the whole sequence (cp x the local tokens) with heads / cp.
  const cost::GdnShape shape{T * cp, v_heads / cp, k_heads / cp, static_cast<double>(la.k_dim), static_cast<double>(la.v_dim),
                             static_cast<double>(la.chunk), e};
  scan_ops(c, F, B, "delta_rule", shape, cost::gdn_scan_time, e * value * T);  // keeps the rule's output
  mixer_out(c, F, B, "linear_out", value, [&] { cp_exchange("a2a_out", e * value * T); });
}

}  // namespace

WorkloadBuilder::WorkloadBuilder(const config::RunConfig& rc) : rc_(rc) {
  place_groups();
  costs_ = build_costs(false);
}

WorkloadBuilder::WorkloadBuilder(const config::RunConfig& rc, WorkloadCache* cache) : rc_(rc) {
  place_groups();
  if (cache == nullptr) {
    costs_ = build_costs(false);
    return;
  }
  if (auto hit = cache->find(rc)) {
    costs_ = std::move(hit);
    return;
  }
  // Built with the layer as recompute full leaves it whenever recompute is full, so layouts
  // that recompute fewer layers find it too; the operator lists are dropped.
  std::shared_ptr<WorkloadCosts> built = build_costs(true);
  auto lean = [](LayerCost& c) {
    std::vector<Op>().swap(c.fwd);
    std::vector<Op>().swap(c.bwd);
  };
  for (auto& kc : built->kinds) {
    lean(kc.cost);
    lean(kc.kept);
  }
  lean(built->embedding);
  lean(built->output);
  cache->insert(rc, built);
  costs_ = std::move(built);
}

namespace {

// Where rank 0's groups land on nodes, from the mesh shape alone. The planner builds a workload
// for each of millions of layouts that share a few hundred mesh shapes, and listing a
// 1,024-rank data-parallel group to place it took a third of such a search, so each worker
// thread keeps the placements of the shapes it has seen (a pure function of the key, so the
// cache changes no result; it is emptied when it grows past a bound).
GroupPlacements mesh_placements(const config::Parallel& p, int64_t gpn) {
  using Key = std::array<int64_t, 8>;
  struct KeyHash {
    size_t operator()(const Key& k) const noexcept {
      size_t h = 1469598103934665603ULL;
      for (int64_t v : k) h = (h ^ static_cast<size_t>(v)) * 1099511628211ULL;
      return h;
    }
  };
  thread_local std::unordered_map<Key, GroupPlacements, KeyHash> seen;
  const Key key{p.tp, p.cp, p.dp, p.pp, p.ep, p.etp, p.dp_replicate, gpn};
  if (const auto it = seen.find(key); it != seen.end()) return it->second;
  mesh::RankMesh m(p.tp, p.cp, p.dp, p.pp, p.ep, p.etp, p.dp_replicate);
  GroupPlacements g;
  g.tp = mesh::place(m.group(0, mesh::Dim::kTp), gpn);
  g.cp = mesh::place(m.group(0, mesh::Dim::kCp), gpn);
  g.ep = mesh::place(m.group(0, mesh::Dim::kEp), gpn);
  g.etp = mesh::place(m.group(0, mesh::Dim::kEtp), gpn);
  g.dp = mesh::place(m.group(0, mesh::Dim::kDp), gpn);
  g.dp_cp = mesh::place(m.group(0, mesh::Dim::kShard), gpn);
  g.edp = mesh::place(m.group(0, mesh::Dim::kEdpShard), gpn);
  g.dp_replicate = mesh::place(m.group(0, mesh::Dim::kReplicate), gpn);
  g.edp_replicate = mesh::place(m.group(0, mesh::Dim::kEdpReplicate), gpn);
  // Pipeline neighbours: rank 0 and the same position on the next stage.
  if (p.pp > 1) g.pp_neighbour = mesh::place({0, m.rank_of(0, 0, 0, 1)}, gpn);
  if (seen.size() >= 4096) seen.clear();
  seen.emplace(key, g);
  return g;
}

}  // namespace

void WorkloadBuilder::place_groups() {
  const auto& rc = rc_;
  const auto& p = rc.parallel;
  tokens_ = static_cast<double>(p.micro_batch_size) * static_cast<double>(rc.training.seq_len) /
            static_cast<double>(p.cp);
  places_ = mesh_placements(p, rc.cluster.gpus_per_node);
  places_.zero3 = places_.dp_cp;
  if (p.zero3_flat_collectives && places_.dp_cp.size > 1) {
    // A flat ring: every member as if alone on its node, each hop over its own NIC.
    places_.zero3 = mesh::Placement{places_.dp_cp.size, places_.dp_cp.size, 1, 0, 0};
  }
}

std::shared_ptr<WorkloadCosts> WorkloadBuilder::build_costs(bool always_kept) const {
  const auto& rc = rc_;
  const auto& p = rc.parallel;
  auto out = std::make_shared<WorkloadCosts>();
  std::vector<model::LayerKind> kinds = rc.model.layer_kinds();
  if (!rc.model.hybrid()) {
    // Transformer layers: the dense kind always (MoE models' leading dense layers, and callers
    // that ask for it), the MoE kind with experts, and any other mixer the layers use.
    std::vector<model::LayerKind> used = kinds;
    kinds = {model::LayerKind{model::Mixer::kAttention, model::Ffn::kDense}};
    if (rc.model.moe.enabled()) kinds.push_back({model::Mixer::kAttention, model::Ffn::kMoe});
    for (const auto& k : used) {
      if (std::find(kinds.begin(), kinds.end(), k) == kinds.end()) kinds.push_back(k);
    }
  }
  const bool kept = rc.partial_recompute() || (always_kept && p.recompute == config::Recompute::kFull);
  for (const auto& k : kinds) {
    KindCost kc{k, build_layer(k, p.recompute), {}};
    if (kept) kc.kept = build_layer(k, config::Recompute::kNone);
    out->kinds.push_back(std::move(kc));
  }
  out->embedding = build_embedding();
  out->output = build_output();
  return out;
}

WorkloadCache::Key WorkloadCache::key_of(const config::RunConfig& rc) {
  Key k{rc.parallel, rc.num_microbatches, rc.padded_vocab};
  // What a layer's cost does not depend on: where the layers sit in the pipeline and the order
  // the schedule runs them in (WorkloadBuilder::layer picks the recomputed or kept cost per layer
  // from the caller's own run), except whether the schedule defers the weight gradient (which
  // leaves the asynchronous linear backward's input-gradient reduction nothing to hide behind).
  config::Parallel& p = k.parallel;
  p.vpp = 1;
  p.schedule = p.split_backward() ? config::Schedule::kZbH1 : config::Schedule::kOneFOneB;
  p.set_split(-1, -1);  // (also the layout string and the embedding and loss slots)
  p.recompute_layers = 0;
  p.activation_offload_layers = 0;
  return k;
}

size_t WorkloadCache::hash_of(const Key& k) {
  const auto& p = k.parallel;
  size_t h = 0;
  for (const int64_t v : {p.tp, p.pp, p.dp, p.cp, p.ep, p.etp, p.micro_batch_size, p.dp_replicate, static_cast<int64_t>(p.zero_stage),
                          static_cast<int64_t>(p.fsdp), static_cast<int64_t>(p.recompute), static_cast<int64_t>(p.recompute_modules),
                          static_cast<int64_t>(p.cp_comm), static_cast<int64_t>(p.offload), k.microbatches}) {
    h = h * 1000003u ^ static_cast<size_t>(v);
  }
  return h;
}

std::shared_ptr<const WorkloadCosts> WorkloadCache::find(const config::RunConfig& rc) const {
  const Key k = key_of(rc);
  const auto [lo, hi] = entries_.equal_range(hash_of(k));
  for (auto it = lo; it != hi; ++it) {
    if (it->second.first == k) {
      ++hits_;
      return it->second.second;
    }
  }
  ++misses_;
  return nullptr;
}

void WorkloadCache::insert(const config::RunConfig& rc, std::shared_ptr<const WorkloadCosts> costs) {
  if (capacity_ == 0) return;
  Key k = key_of(rc);
  const size_t h = hash_of(k);
  const WorkloadCosts* id = costs.get();
  entries_.emplace(h, std::make_pair(std::move(k), std::move(costs)));
  order_.emplace_back(h, id);
  while (order_.size() > capacity_) {
    const auto [oh, oid] = order_.front();
    order_.pop_front();
    const auto [lo, hi] = entries_.equal_range(oh);
    for (auto it = lo; it != hi; ++it) {
      if (it->second.second.get() == oid) {
        entries_.erase(it);
        break;
      }
    }
  }
}

const WorkloadBuilder::KindCost& WorkloadBuilder::find_kind(model::LayerKind kind) const {
  for (const auto& kc : costs_->kinds) {
    if (kc.kind == kind) return kc;
  }
  throw std::logic_error("workload: the model has no " + kind.label() + " layer");
}

const LayerCost& WorkloadBuilder::kind_cost(model::LayerKind kind) const { return find_kind(kind).cost; }

const LayerCost& WorkloadBuilder::layer(int64_t layer) const {
  const KindCost& kc = find_kind(rc_.model.layer_kind(layer));
  if (rc_.partial_recompute() && !rc_.full_recompute_layer(layer)) return kc.kept;
  return kc.cost;
}

const LayerCost& WorkloadBuilder::layer_as_run(int64_t layer) const {
  const KindCost& kc = find_kind(rc_.model.layer_kind(layer));
  return rc_.partial_recompute() ? kc.kept : kc.cost;
}

Bytes WorkloadBuilder::p2p_bytes() const {
  // The stage's output hidden states: the residual stream (RunConfig::residual_bytes).
  double b = tokens_ * static_cast<double>(rc_.model.hidden) * rc_.residual_bytes();
  // Megatron sends 1/tp of the activation per TP rank (scatter/gather or SP-sharded);
  // DeepSpeed's pipeline engine sends all of it from every TP rank.
  if (!rc_.parallel.pp_send_full_activation || (rc_.parallel.sp && rc_.parallel.tp > 1)) {
    b /= static_cast<double>(rc_.parallel.tp);
  }
  return Bytes(b);
}

Duration WorkloadBuilder::p2p_time() const {
  if (rc_.parallel.pp <= 1) return Duration(0);
  return cost::collective_time(Collective::kSendRecv, p2p_bytes(), places_.pp_neighbour, rc_.hardware);
}

void WorkloadBuilder::finish(LayerCost& c) const {
  // Chunked TP overlap: the first chunk cannot hide, and the overlapped GEMM slows by the SMs
  // the userbuffers kernels take (counted as exposed TP time).
  auto exposed = [](const Op& o) {
    const double t = o.time.value(), hid = o.hidden_by.value();
    if (o.overlap_chunks <= 1 || hid <= 0) return std::max(0.0, t - hid);
    const double first = t / o.overlap_chunks;
    const double f = o.overlap_sm_fraction;
    return first + std::max(0.0, t - first - hid) + std::min(t - first, hid) * f / (1.0 - f);
  };
  // A collective hidden behind compute (CP ring hops, overlapped expert exchanges) still
  // costs: the compute beside it loses the SMs its NCCL channels occupy.
  const double slow = rc_.hardware.collective_slowdown();
  auto interference = [slow](const Op& o) {
    const double t = o.time.value(), hid = o.hidden_by.value();
    if (o.overlap_chunks > 1 || hid <= 0) return Duration(0);
    // Beyond the exposed part (t - hid when the transfer outlasts the compute).
    return Duration(beside_compute(t, hid, slow) - std::max(0.0, t - hid));
  };
  // One pass's exchange: its SM interference counts as the pass's compute; its exposed time
  // goes to the pass, to its kind, and (when it crosses the NIC) to both NIC tallies, and to
  // the pass's runs of NIC-crossing or on-node exposed comm (adjacent ones of a kind merged).
  auto book_comm = [&](const Op& o, Duration& compute, Duration& exposed_time, double& nic_bytes, Duration& nic_time,
                       std::vector<LayerCost::CommRun>& runs) {
    compute += interference(o);
    const Duration x(exposed(o));
    exposed_time += x;
    const double nic = o.time.value() > 0 ? o.nic_bytes * x.value() / o.time.value() : 0.0;
    nic_bytes += nic;
    const bool tp = o.comm == CommKind::kTp, cp = o.comm == CommKind::kCp;
    if (tp || cp || o.comm == CommKind::kEp) (tp ? c.tp_exposed : cp ? c.cp_exposed : c.ep_exposed) += x;
    if (o.nic_bytes > 0) {
      nic_time += x;
      (tp ? c.tp_exposed_nic : cp ? c.cp_exposed_nic : c.ep_exposed_nic) += x;
    }
    if (x.value() <= 0) return;
    if (!runs.empty() && (runs.back().nic_bytes > 0) == (nic > 0)) {
      runs.back().time += x;
      runs.back().nic_bytes += nic;
    } else {
      runs.push_back({x, nic});
    }
  };
  for (const auto& o : c.fwd) {
    if (o.kind == OpKind::kComm) {
      book_comm(o, c.fwd_compute, c.fwd_comm_exposed, c.fwd_exposed_nic_bytes, c.fwd_exposed_nic_comm, c.fwd_comm_runs);
    } else {
      c.fwd_compute += o.time;
      if (o.kind == OpKind::kHost) c.host += o.time;
      if (o.kind == OpKind::kAttention) c.fwd_attention += o.time;
      c.model_flops += o.flops;
    }
  }
  for (const auto& o : c.bwd) {
    if (o.kind == OpKind::kComm) {
      book_comm(o, c.bwd_compute, c.bwd_comm_exposed, c.bwd_exposed_nic_bytes, c.bwd_exposed_nic_comm, c.bwd_comm_runs);
    } else {
      c.bwd_compute += o.time;
      if (o.kind == OpKind::kHost) c.host += o.time;
      if (o.kind == OpKind::kAttention) c.bwd_attention += o.time;
      if (o.weight_grad) c.bwd_weight_compute += o.time;
      c.hardware_flops += o.flops;
    }
  }
  // The backward runs its operators last to first; runs alternate in kind, so a pass with one
  // run has exposed comm of one kind only and keeps none (it runs as one task).
  std::reverse(c.bwd_comm_runs.begin(), c.bwd_comm_runs.end());
  for (auto* runs : {&c.fwd_comm_runs, &c.bwd_comm_runs}) {
    if (runs->size() < 2) runs->clear();
  }
  // The kernel in flight: sum t^2 / sum t over the GPU kernels of the pass (or its part).
  auto in_flight = [](const std::vector<Op>& ops, auto counts) {
    double s1 = 0, s2 = 0;
    for (const auto& o : ops) {
      if (o.kind == OpKind::kComm || o.kind == OpKind::kHost || !counts(o)) continue;
      const double t = o.time.value();
      s1 += t;
      s2 += t * t;
    }
    return Duration(s1 > 0 ? s2 / s1 : 0.0);
  };
  auto any = [](const Op&) { return true; };
  c.fwd_kernel = in_flight(c.fwd, any);
  c.bwd_kernel = in_flight(c.bwd, any);
  c.bwd_input_kernel = in_flight(c.bwd, [](const Op& o) { return !o.weight_grad; });
  c.bwd_weight_kernel = in_flight(c.bwd, [](const Op& o) { return o.weight_grad; });
  c.hardware_flops += c.model_flops;
  if (rc_.training.lora.enabled()) {
    // LoRA: frozen layers skip their weight gradients, so the backward's model FLOPs are what
    // it runs, less any recomputed forward.
    double bwd = 0;
    for (const auto& o : c.bwd) {
      if (o.kind != OpKind::kComm && o.kind != OpKind::kHost && !o.name.starts_with("recompute.")) bwd += o.flops.value();
    }
    c.model_flops = c.model_flops + Flops(bwd);
  } else {
    // Backward model FLOPs are exactly twice the forward GEMM/attention FLOPs.
    c.model_flops = c.model_flops * 3.0;
  }
}

LayerTensors layer_tensors(const config::RunConfig& rc, model::LayerKind kind) {
  const auto& m = rc.model;
  const auto& p = rc.parallel;
  const double t = static_cast<double>(p.tp);
  const double h = static_cast<double>(m.hidden);
  LayerTensors out;
  if (kind.mixer == model::Mixer::kAttention) {
    const double attn = m.attention_params() / t;
    out.dense = {0.75 * attn, 0.25 * attn};
  } else if (kind.mixer == model::Mixer::kMamba) {
    // out_proj, and in_proj with the conv, the norms and the per-head vectors.
    const double out_proj = static_cast<double>(m.mamba.d_inner()) * h / t;
    out.dense = {m.mamba_params() / t - out_proj, out_proj};
  } else if (kind.mixer == model::Mixer::kLinear) {
    const double out_proj = static_cast<double>(m.linear.value_width()) * h / t;
    out.dense = {m.linear_attention_params() / t - out_proj, out_proj};
  }
  if (kind.ffn == model::Ffn::kNone) return out;
  if (!kind.moe()) {
    const double mlp = m.dense_mlp_params() / t;
    out.dense.push_back(0.5 * mlp);
    out.dense.push_back(0.5 * mlp);
    return out;
  }
  const auto& mo = m.moe;
  out.dense.push_back(h * static_cast<double>(mo.num_experts));  // router
  if (mo.shared_experts > 0) {
    out.dense.push_back(static_cast<double>(m.mlp_matrices()) * h * static_cast<double>(mo.shared_experts * mo.shared_expert_ffn) / t);
  }
  out.expert.push_back(static_cast<double>(mo.num_experts) / static_cast<double>(p.ep) * m.expert_params() /
                       static_cast<double>(p.etp));
  return out;
}

LayerCost WorkloadBuilder::build_layer(model::LayerKind kind, config::Recompute recompute) const {
  const bool moe = kind.moe();
  const auto& m = rc_.model;
  const auto& p = rc_.parallel;
  Ctx c = make_ctx(rc_, places_, tokens_);
  const double h = static_cast<double>(m.hidden);
  const double T = c.T;
  const double e = c.e;
  LayerCost lc;
  auto& F = lc.fwd;
  auto& B = lc.bwd;
  // A layer runs a few dozen operators per pass (the backward also the recomputed forward's):
  // room for them up front, as the planner builds a layer for every layout it scores.
  F.reserve(48);
  B.reserve(112);

  // Tokens whose input a column-parallel linear keeps for its weight gradient: the sequence
  // shard under SP (re-gathered in backward) unless the all-gathered input is kept.
  const bool keeps_gathered = p.keeps_gathered_input();
  const double in_tokens = c.sp && !keeps_gathered ? c.T_rep : T;
  const double mask_bytes = rc_.training.dropout ? h * c.T_rep : 0.0;  // 1-byte dropout mask

  const double heads_local = static_cast<double>(m.heads) / c.t;
  const config::AttentionWidths widths = config::attention_widths(rc_, false);
  const double q_width = widths.q, kv_width = widths.k, v_width = widths.out;
  const double dropout_bytes = rc_.training.dropout ? (2.0 * e + 1.0) * h * c.T_rep : 0.0;

  // ---- token mixer: attention or Mamba-2, behind its norm ----
  if (kind.mixer != model::Mixer::kNone) {
    F.push_back(mem_op(c, "norm1", (c.re + e) * h * c.T_rep * eager_factor(c, Eager::kNorm)));
    F.back().saved_bytes = e * h * c.T_rep;
    B.push_back(mem_op(c, "norm1.bwd", 2.0 * (c.re + e) * h * c.T_rep * eager_factor(c, Eager::kNorm)));
  }
  if (kind.mixer == model::Mixer::kMamba) mamba_mixer(c, F, B, in_tokens);
  if (kind.mixer == model::Mixer::kLinear) linear_attention_mixer(c, F, B, in_tokens);
  if (kind.mixer == model::Mixer::kAttention) {
  Duration qkv_fwd;
  BackwardTimes qkv_bwd;
  const size_t qkv_start_f = F.size(), qkv_start_b = B.size();
  if (m.mla.enabled()) {
    // Kept for backward as the ledger counts it: the attention input (once, shared by the Q and
    // KV down-projections) and the latents the up-projections read.
    const double qr = static_cast<double>(m.mla.q_lora_rank);
    if (m.mla.q_lora_rank > 0) {
      linear(c, F, B, "q_down", T, qr, h, 1.0, e * h * in_tokens, false);
      linear(c, F, B, "q_up", T, q_width, qr, 1.0, e * qr * c.T_rep);
    } else {
      linear(c, F, B, "q_proj", T, q_width, h, 1.0, e * h * in_tokens);
    }
    const double kvr = static_cast<double>(m.mla.kv_lora_rank);
    linear(c, F, B, "kv_down", T, kvr + static_cast<double>(m.mla.qk_rope_head_dim), h, 1.0, 0.0, false);
    linear(c, F, B, "kv_up", T, heads_local * static_cast<double>(m.mla.qk_nope_head_dim + m.mla.v_head_dim), kvr, 1.0,
           e * kvr * c.T_rep);
  } else {
    // An output-gated attention (Qwen3-Next) projects the gate beside the queries.
    linear(c, F, B, "qkv", T, q_width * (m.attn_output_gate ? 2.0 : 1.0) + 2.0 * kv_width, h, 1.0, e * h * in_tokens);
  }
  qkv_fwd = Duration(sum_time(F, qkv_start_f));
  qkv_bwd = backward_times(B, qkv_start_b);
  {
    // The TP entry collective goes before the QKV GEMM.
    std::vector<Op> f2, b2;
    tp_entry(c, f2, b2, "attn_in", qkv_fwd, qkv_bwd);
    F.insert(F.begin() + static_cast<long>(qkv_start_f), f2.begin(), f2.end());
    B.insert(B.end(), b2.begin(), b2.end());
  }
  if (m.position == model::PositionKind::kRotary) {
    F.push_back(mem_op(c, "rope", 2.0 * e * T * (q_width + kv_width) * eager_factor(c, Eager::kRope)));
    B.push_back(mem_op(c, "rope.bwd", 2.0 * e * T * (q_width + kv_width) * eager_factor(c, Eager::kRope)));
  }
  // K and V as the attention call (and any CP exchange) sees them: repeated to the query heads
  // when the framework expands them first (a copy forward, a sum over the repeats backward).
  const double kv_att = config::attention_widths(rc_, rc_.training.repeat_kv).k;
  if (kv_att > kv_width) {
    F.push_back(mem_op(c, "repeat_kv", 2.0 * e * T * (kv_width + kv_att)));
    B.push_back(mem_op(c, "repeat_kv.bwd", 2.0 * e * T * (kv_att + kv_width)));
  }

  // Attention core.
  const double s = static_cast<double>(rc_.training.seq_len);
  const double cp = static_cast<double>(p.cp);
  const double d_qk = m.mla.enabled() ? static_cast<double>(m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim)
                                      : static_cast<double>(m.head_dim);
  const double d_v = m.mla.enabled() ? static_cast<double>(m.mla.v_head_dim) : static_cast<double>(m.head_dim);
  // Packed sequences (training.packed_document_tokens): the kernels run per document, so the
  // flash kernels see s / span sequences of span tokens each (unfused attention computes the
  // whole masked score matrix).
  const bool flash = rc_.training.attention != config::AttentionImpl::kUnfused;
  const double span = flash ? static_cast<double>(rc_.training.attention_span()) : s;
  auto attention_times = [&](double sk, bool causal = true, bool banded = false) {
    cost::AttentionShape a{static_cast<double>(p.micro_batch_size) * s / span, heads_local, span / cp, sk, d_qk, d_v, causal, banded};
    if (p.cp_comm == config::CpComm::kUlysses && p.cp > 1) {
      // Ulysses: full sequence, heads split over cp.
      a.heads = heads_local / cp;
      a.sq = span;
    }
    Duration f, b;
    if (rc_.training.attention != config::AttentionImpl::kUnfused) {
      const auto kernel = rc_.training.attention == config::AttentionImpl::kFlash2   ? cost::AttentionKernel::kFlash2
                          : rc_.training.attention == config::AttentionImpl::kTriton ? cost::AttentionKernel::kTriton
                                                                                    : cost::AttentionKernel::kFused;
      f = cost::flash_attention_time(a, false, c.hw, kernel);
      b = cost::flash_attention_time(a, true, c.hw, kernel);
    } else {
      f = cost::unfused_attention_time(a, false, rc_.training.dropout, c.act_dtype, c.hw);
      b = cost::unfused_attention_time(a, true, rc_.training.dropout, c.act_dtype, c.hw);
    }
    return std::make_tuple(f, b, a.forward_flops());
  };
  auto [af_full, ab_full, fl_full] = attention_times(span);
  // Causal CP without load balancing: rank cp-1's queries attend to the whole sequence, cp-1/2
  // blocks of work against cp/2 on a balanced rank, and every ring hop waits for it.
  const bool unbalanced_cp = p.cp > 1 && !p.cp_load_balance && p.cp_comm != config::CpComm::kUlysses;
  if (unbalanced_cp) {
    const double f = (2.0 * cp - 1.0) / cp;
    af_full = af_full * f;
    ab_full = ab_full * f;
  }
  Duration attn_f = af_full, attn_b = ab_full;
  Flops attn_flops = fl_full;
  // Local layers: every query sees `keys` keys on average (the mask is already counted), at
  // most the full causal cost (a window near the sequence skips almost nothing). Unfused
  // attention computes the whole score matrix and masks it, so a window saves nothing there.
  const double keys = !flash ? 0.0 : m.local_keys_per_query(static_cast<int64_t>(span));
  if (keys > 0) {
    auto [af_w, ab_w, fl_w] = attention_times(keys, false, true);
    const double w = m.sliding_layer_fraction;
    attn_f = af_full * (1.0 - w) + std::min(af_w, af_full) * w;
    attn_b = ab_full * (1.0 - w) + std::min(ab_w, ab_full) * w;
    attn_flops = fl_full * (1.0 - w) + std::min(fl_w, fl_full) * w;
  }
  Op af;
  af.name = "attention";
  af.kind = OpKind::kAttention;
  af.time = attn_f;
  af.flops = attn_flops;
  af.attention = cost::AttentionShape{static_cast<double>(p.micro_batch_size) * s / span, heads_local, span / cp, span, d_qk, d_v, true};
  af.saved_bytes = e * T * (q_width + 2.0 * kv_att);
  if (rc_.training.attention == config::AttentionImpl::kUnfused) {
    af.score_bytes = heads_local * s * T * (e + (rc_.training.dropout ? 1.0 + e : 0.0));
  } else {
    af.saved_bytes += 4.0 * heads_local * T;  // fp32 log-sum-exp
  }
  Op ab = af;
  ab.attention_backward = true;
  ab.saved_bytes = ab.score_bytes = 0;
  ab.name = "attention.bwd";
  ab.time = attn_b;
  ab.flops = attn_flops * 2.0;

  // Context parallel communication around the attention core.
  if (p.cp > 1) {
    const double kv_bytes = T * 2.0 * kv_att * e;  // local K and V
    // What one block of the ring's computation hides of a hop (nothing without overlap).
    const Duration block_f = p.cp_overlap ? attn_f / cp : Duration(0), block_b = p.cp_overlap ? attn_b / cp : Duration(0);
    if (p.cp_comm == config::CpComm::kRotateAllGather) {
      // The ring loop of cp blocks and online-softmax merges, its K/V from one all-gather
      // issued before the first (local) block, which alone hides it; the same in backward,
      // where dK/dV accumulate in fp32 and travel the ring, each hop hidden by the next
      // block, the last one waited for.
      const double dkv_bytes = T * 2.0 * kv_att * 4.0;
      F.push_back(comm_op(c, "cp_rotate.kv_allgather", CommKind::kCp, Collective::kAllGather, kv_bytes * cp, places_.cp, block_f));
      B.push_back(comm_op(c, "cp_rotate.kv_allgather", CommKind::kCp, Collective::kAllGather, kv_bytes * cp, places_.cp, block_b));
      for (int64_t hop = 0; hop < p.cp; ++hop) {
        B.push_back(comm_op(c, "cp_rotate.dkv", CommKind::kCp, Collective::kSendRecv, dkv_bytes, places_.cp,
                            hop + 1 < p.cp ? block_b : Duration(0)));
      }
      // Eager element-wise work per block, in bytes per element (the slowest rank merges whole
      // blocks). Forward: the block output cast to fp32 (e + 4) and merged into the running
      // fp32 output in three passes (out - block: 12; times the sigmoid of the log-sum-exp
      // difference: 8; subtracted from out: 12), and K/V concatenated for the rotation (2e);
      // the output is cast to fp32 before the loop and back after it. Backward: dQ and dK/dV
      // added into fp32 accumulators (8 + e), dK/dV concatenated for the ring (8), K/V again
      // (2e); the accumulators are zeroed before the loop (4) and cast back after it (4 + e).
      const double out_el = T * v_width, kv_el = T * 2.0 * kv_att;
      F.push_back(mem_op(c, "cp_rotate.merge", (cp - 1.0) * ((36.0 + e) * out_el + 2.0 * e * kv_el) + 2.0 * (4.0 + e) * out_el));
      B.push_back(mem_op(c, "cp_rotate.accumulate", cp * ((8.0 + e) * (out_el + kv_el) + 8.0 * kv_el) +
                                                      (cp - 1.0) * 2.0 * e * kv_el + (8.0 + e) * (out_el + kv_el)));
    } else if (p.cp_comm == config::CpComm::kRing) {
      // cp-1 hops, each hidden behind one block of the attention computation.
      for (int64_t hop = 0; hop + 1 < p.cp; ++hop) {
        F.push_back(comm_op(c, "cp_ring.kv", CommKind::kCp, Collective::kSendRecv, kv_bytes, places_.cp, block_f));
        B.push_back(comm_op(c, "cp_ring.kv_dkv", CommKind::kCp, Collective::kSendRecv, 2.0 * kv_bytes, places_.cp, block_b));
      }
      // The blocks' partial results are combined outside the attention kernel (Transformer
      // Engine's KV-P2P context parallelism, one fused pass per block), in bytes per element.
      // Forward: each later block's output corrected by its log-sum-exp and added into the
      // fp32 running output (read the block, read and write the output: e + 8), the output
      // cast back at the end (4 + e). Backward: each block's dQ added into an fp32 accumulator
      // (e + 8) and its dK/dV added to the received partial sums (3e), dQ cast back at the end.
      const double out_el = T * v_width, q_el = T * q_width, kv_el = T * 2.0 * kv_att;
      F.push_back(mem_op(c, "cp_ring.merge", (cp - 1.0) * (8.0 + e) * out_el + (4.0 + e) * out_el));
      B.push_back(mem_op(c, "cp_ring.accumulate", cp * ((8.0 + e) * q_el + 3.0 * e * kv_el) + (4.0 + e) * q_el));
    } else if (p.cp_comm == config::CpComm::kAllGather) {
      F.push_back(comm_op(c, "cp_ag.kv", CommKind::kCp, Collective::kAllGather, kv_bytes * cp, places_.cp));
      B.push_back(comm_op(c, "cp_ag.kv", CommKind::kCp, Collective::kAllGather, kv_bytes * cp, places_.cp));
      B.push_back(comm_op(c, "cp_rs.dkv", CommKind::kCp, Collective::kReduceScatter, kv_bytes * cp, places_.cp));
    } else {
      const double qkv_bytes = T * (q_width + 2.0 * kv_att) * e;
      const double o_bytes = T * v_width * e;
      F.push_back(comm_op(c, "ulysses.a2a_qkv", CommKind::kCp, Collective::kAllToAll, qkv_bytes, places_.cp));
      F.push_back(comm_op(c, "ulysses.a2a_out", CommKind::kCp, Collective::kAllToAll, o_bytes, places_.cp));
      B.push_back(comm_op(c, "ulysses.a2a_dout", CommKind::kCp, Collective::kAllToAll, o_bytes, places_.cp));
      B.push_back(comm_op(c, "ulysses.a2a_dqkv", CommKind::kCp, Collective::kAllToAll, qkv_bytes, places_.cp));
    }
  }
  F.push_back(af);
  B.push_back(ab);
  if (m.attn_output_gate) {
    // out x sigmoid(gate): read both, write the product; backward reads them and the incoming
    // gradient and writes both gradients. Keeps the gate and the kernel's output.
    F.push_back(mem_op(c, "attn_gate", e * T * (q_width + 2.0 * v_width)));
    F.back().saved_bytes = e * T * (q_width + v_width);
    B.push_back(mem_op(c, "attn_gate.bwd", e * T * (2.0 * q_width + 3.0 * v_width)));
  }

  const size_t o_f = F.size(), o_b = B.size();
  linear(c, F, B, "o_proj", T, h, v_width, 1.0, e * T * v_width);
  {
    std::vector<Op> f2, b2;
    tp_exit(c, f2, b2, "attn_out", Duration(sum_time(F, o_f)), Duration(sum_time(B, o_b)));
    F.insert(F.end(), f2.begin(), f2.end());
    B.insert(B.end(), b2.begin(), b2.end());
  }
  }  // attention
  if (kind.mixer != model::Mixer::kNone) {
    F.push_back(mem_op(c, "residual1", (2.0 * c.re + e) * h * c.T_rep + dropout_bytes));
    F.back().saved_bytes = mask_bytes;
    B.push_back(mem_op(c, "residual1.bwd", 3.0 * c.re * h * c.T_rep + dropout_bytes));
  }

  // ---- MLP block (dense or MoE) ----
  if (kind.ffn != model::Ffn::kNone) {
  // A parallel block's MLP reads the attention's normed input (GPT-J, Phi-1/2, Falcon 7B).
  if (!(m.shared_block_norm && kind.mixer == model::Mixer::kAttention)) {
    F.push_back(mem_op(c, "norm2", (c.re + e) * h * c.T_rep * eager_factor(c, Eager::kNorm)));
    F.back().saved_bytes = e * h * c.T_rep;
    B.push_back(mem_op(c, "norm2.bwd", 2.0 * (c.re + e) * h * c.T_rep * eager_factor(c, Eager::kNorm)));
  }
  const double gate = m.mlp == model::MlpKind::kGated ? 2.0 : 1.0;
  const double act_passes = m.mlp == model::MlpKind::kGated ? 3.0 : 2.0;
  if (!moe) {
    const double f_local = static_cast<double>(m.ffn_hidden) / c.t;
    const size_t s_f = F.size(), s_b = B.size();
    linear(c, F, B, "fc1", T, gate * f_local, h, 1.0, e * h * in_tokens);
    std::vector<Op> f2, b2;
    tp_entry(c, f2, b2, "mlp_in", Duration(sum_time(F, s_f)), backward_times(B, s_b));
    F.insert(F.begin() + static_cast<long>(s_f), f2.begin(), f2.end());
    B.insert(B.end(), b2.begin(), b2.end());
    F.push_back(mem_op(c, "activation", act_passes * e * T * f_local * eager_factor(c, Eager::kGatedAct)));
    F.back().saved_bytes = gate * e * T * f_local;
    B.push_back(mem_op(c, "activation.bwd", 2.0 * act_passes * e * T * f_local * eager_factor(c, Eager::kGatedAct)));
    const size_t d_f = F.size(), d_b = B.size();
    linear(c, F, B, "fc2", T, h, f_local, 1.0, e * T * f_local);
    std::vector<Op> f3, b3;
    tp_exit(c, f3, b3, "mlp_out", Duration(sum_time(F, d_f)), Duration(sum_time(B, d_b)));
    F.insert(F.end(), f3.begin(), f3.end());
    B.insert(B.end(), b3.begin(), b3.end());
  } else {
    const auto& mo = m.moe;
    const double E = static_cast<double>(mo.num_experts);
    const double k = static_cast<double>(mo.top_k);
    const double ep = static_cast<double>(p.ep);
    const double etp = static_cast<double>(p.etp);
    const double Tr = c.T_rep;  // tokens this rank routes
    // What the block keeps for backward (Op::saved_bytes, as the ledger counts it): its input
    // (the router's, the permutation's and the shared experts'), the fp32 routing probabilities,
    // and per routed token copy the permuted input and the expert MLP's activations.
    linear(c, F, B, "router", Tr, E, h, 1.0, e * h * Tr + 4.0 * E * T / c.t);
    // Shared experts see every token; with overlap "shared-experts" they run while the dispatch
    // and combine are in flight and hide them.
    std::vector<Op> SF, SB;
    if (mo.shared_experts > 0) {
      const double fs_local = static_cast<double>(mo.shared_experts * mo.shared_expert_ffn) / c.t;
      linear(c, SF, SB, "shared.fc1", T, gate * fs_local, h);
      SF.push_back(mem_op(c, "shared.activation", act_passes * e * T * fs_local));
      SF.back().saved_bytes = gate * e * T * fs_local;
      SB.push_back(mem_op(c, "shared.activation.bwd", 2.0 * act_passes * e * T * fs_local));
      linear(c, SF, SB, "shared.fc2", T, h, fs_local, 1.0, e * T * fs_local);
    }
    const bool overlap = p.moe.overlap == config::MoeRouting::Overlap::kSharedExperts && !SF.empty();
    const Duration hide_f = overlap ? Duration(sum_time(SF, 0) / 2.0) : Duration(0);
    const Duration hide_b = overlap ? Duration(sum_time(SB, 0) / 2.0) : Duration(0);
    // Routing: the busiest expert-parallel rank's tokens set the expert compute and, as the
    // last receiver to finish, the dispatch and combine.
    const double experts_local = E / ep;
    const double mean_tokens = ep * Tr * k * etp / E;
    const ExpertLoad load = expert_load(p.moe, mo.num_experts, p.ep, mean_tokens, m.num_moe_layers());
    const double tokens_per_expert = mean_tokens * load.busiest_rank_factor;
    lc.expert_load = load;
    const bool a2a = p.moe.dispatcher != config::MoeDispatcher::kAllGather;
    const bool all_to_all = p.moe.dispatcher == config::MoeDispatcher::kAllToAll;
    // Without expert parallelism the exchange (or the gather) runs over the etp group alone.
    const mesh::Placement& exchange_where = p.ep > 1 ? places_.ep : places_.etp;
    // All-to-all: each rank sends T*k token copies (the busiest receiver gets its share times
    // the load factor). All-gather: every rank gathers the group's tokens (its ep x etp ranks'
    // shares) and keeps those routed to its experts; the combine is the matching reduce-scatter.
    // The flex dispatcher exchanges over the expert-tensor-and-expert-parallel group, each copy
    // to every etp rank of its expert (Megatron-Core's MoEFlexTokenDispatcher: tp x topk copies
    // over tp x experts); the etp ranks of an expert share a node, so a copy crosses the network
    // once per node as before and the fan-out rides the node fabric.
    const bool flex = p.moe.dispatcher == config::MoeDispatcher::kFlex;
    const double fanout = flex ? etp : 1.0;
    const double a2a_bytes = Tr * k * h * e * load.busiest_rank_factor * fanout;
    // The all-gather dispatcher gathers over the expert-tensor-and-expert-parallel group
    // (Megatron-Core's tp_ep group): the tokens of all its ep x etp ranks.
    const double ag_bytes = Tr * h * e * ep * etp;
    const bool ag_gather = !a2a && p.ep * p.etp > 1;
    // The permutation: the exchanging dispatchers order the rank's own T*k copies by expert
    // before sending them (read each routed row, write its copy) and add them back after the
    // combine. The all-gather dispatcher permutes after its gather: it copies out the gathered
    // rows routed to its local experts and, after the experts, writes every gathered row (those
    // routed elsewhere as zeros) for the reduce-scatter. Backward runs the duals, each costing
    // what its forward counterpart's opposite does.
    const double routed = ag_gather ? 2.0 * e * tokens_per_expert * experts_local * h : 2.0 * e * Tr * k * h;
    const double unrouted = ag_gather ? e * (tokens_per_expert * experts_local + Tr * ep * etp) * h : routed;
    auto permute = [&] {
      F.push_back(mem_op(c, "permute", routed));
      B.push_back(mem_op(c, "unpermute.bwd", unrouted));
    };
    auto unpermute = [&] {
      F.push_back(mem_op(c, "unpermute", unrouted));
      B.push_back(mem_op(c, "permute.bwd", routed));
    };
    // Per-node de-duplication (flex dispatcher, or node-limited routing): a token crosses the
    // network once per remote node among its k experts and is forwarded to them over the node
    // fabric. Its experts are spread over the nodes its routing may reach (all of the group's,
    // at most max_nodes_per_token, or those holding its top groups under group-limited
    // routing), so the expected number of distinct destinations is C * (1 - (1 - 1/C)^k).
    const int64_t M = p.moe.max_nodes_per_token;
    const bool dedup = flex || M > 0;
    auto a2a_op = [&](const std::string& name, Duration hide) {
      const auto& w = exchange_where;
      if (!dedup || w.intra_node()) return comm_op(c, name, CommKind::kEp, Collective::kAllToAll, a2a_bytes, w, hide);
      const double N = static_cast<double>(w.nodes);
      const double C = static_cast<double>(reachable_nodes(mo, p.ep, w.nodes, M));
      const double distinct = C * (1.0 - std::pow(1.0 - 1.0 / C, k));
      const double per_copy = Tr * h * e * load.busiest_rank_factor;
      Op op = comm_op(c, name, CommKind::kEp, Collective::kAllToAll, a2a_bytes, w, hide);
      op.nic_bytes = per_copy * distinct * (N - 1.0) / N;
      const auto& intra = c.hw.tier_for_span(0, static_cast<int>(std::max<int64_t>(1, w.ranks_per_node)) - 1);
      const Duration t_net = c.hw.network.latency + Bytes(op.nic_bytes) / c.hw.nic_bandwidth_per_gpu(w.nodes);
      const Duration t_fab = intra.latency + Bytes(per_copy * k * fanout) / (intra.busbw * intra.mesh_share(w.ranks_per_node));
      op.time = std::max(t_net, t_fab);
      return op;
    };
    // The dispatch (before the experts) and the combine (after): all-to-alls, or the all-gather
    // dispatcher's gather and reduce-scatter, each with its backward dual.
    auto exchange = [&](const char* f_a2a, const char* b_a2a, const char* f_ag, const char* b_ag, Collective ag_op) {
      if (a2a && (p.ep > 1 || (flex && p.etp > 1))) {
        F.push_back(a2a_op(f_a2a, hide_f));
        B.push_back(a2a_op(b_a2a, hide_b));
      } else if (ag_gather) {
        F.push_back(comm_op(c, f_ag, CommKind::kEp, ag_op, ag_bytes, exchange_where, hide_f));
        B.push_back(comm_op(c, b_ag, CommKind::kEp, ag_op, ag_bytes, exchange_where, hide_b));
      }
    };
    if (!ag_gather) permute();
    exchange("ep.dispatch", "ep.combine_grad", "ep.allgather", "ep.combine_grad_ag", Collective::kAllGather);
    if (ag_gather) permute();
    const double fe_local = static_cast<double>(mo.expert_ffn) / etp;
    // Per-expert host work of the grouped expert MLP (parallel.moe.expert_overhead), a third in
    // forward and two thirds in backward, where each expert has twice the GEMMs.
    if (p.moe.expert_overhead > 0) {
      Op hf;
      hf.name = "experts.host";
      hf.kind = OpKind::kHost;
      hf.time = Duration(p.moe.expert_overhead * experts_local / 3.0);
      Op hb = hf;
      hb.name = "experts.host_bwd";
      hb.time = Duration(p.moe.expert_overhead * experts_local * 2.0 / 3.0);
      F.push_back(hf);
      B.push_back(hb);
    }
    const double copies = T * k * etp / c.t;  // routed token copies this rank keeps, on average
    // Expert tensor parallelism behind the all-to-all dispatcher: each rank of an expert's etp
    // group holds a slice of its weights, so the tokens the exchange delivered to the group are
    // all-gathered in it before the experts' first GEMM and the partial outputs reduce-scattered
    // after the second (Megatron-Core's MoEAlltoAllTokenDispatcher: gather from and reduce-scatter
    // to the tensor-parallel region); backward runs the duals. Nothing overlaps them.
    // (The flex dispatcher delivers each copy to the etp ranks itself, above.)
    const bool etp_gather = p.etp > 1 && all_to_all;
    const double gathered_bytes = tokens_per_expert * experts_local * h * e;
    if (etp_gather) {
      F.push_back(comm_op(c, "experts.etp_ag", CommKind::kTp, Collective::kAllGather, gathered_bytes, places_.etp));
      B.push_back(comm_op(c, "experts.etp_rs_grad", CommKind::kTp, Collective::kReduceScatter, gathered_bytes, places_.etp));
    }
    // The all-to-all dispatcher's second permutation: what the exchange (and the etp gather)
    // delivered is ordered by source rank, then by local expert; with several local experts it is
    // copied into one run per expert before the grouped GEMM, and the outputs copied back into
    // source order before the combine (Megatron-Core's sort_chunks_by_idxs, or the view and
    // transpose of padded capacity buffers); backward copies the gradients the same two ways.
    // One read and one write of the received token copies each time. (The all-gather
    // dispatcher's permutation already groups its copies by local expert; the flex dispatcher's
    // permutation is the one costed above.)
    const bool sort_local = all_to_all && experts_local > 1.0;
    if (sort_local) {
      F.push_back(mem_op(c, "experts.sort", 2.0 * gathered_bytes));
      B.push_back(mem_op(c, "experts.unsort.bwd", 2.0 * gathered_bytes));
    }
    linear(c, F, B, "experts.fc1", tokens_per_expert, gate * fe_local, h, experts_local, e * h * copies);
    F.push_back(mem_op(c, "experts.activation", act_passes * e * tokens_per_expert * experts_local * fe_local));
    F.back().saved_bytes = gate * e * fe_local * copies;
    B.push_back(mem_op(c, "experts.activation.bwd", 2.0 * act_passes * e * tokens_per_expert * experts_local * fe_local));
    linear(c, F, B, "experts.fc2", tokens_per_expert, h, fe_local, experts_local, e * fe_local * copies);
    if (sort_local) {
      F.push_back(mem_op(c, "experts.unsort", 2.0 * gathered_bytes));
      B.push_back(mem_op(c, "experts.sort.bwd", 2.0 * gathered_bytes));
    }
    if (etp_gather) {
      F.push_back(comm_op(c, "experts.etp_rs", CommKind::kTp, Collective::kReduceScatter, gathered_bytes, places_.etp));
      B.push_back(comm_op(c, "experts.etp_ag_grad", CommKind::kTp, Collective::kAllGather, gathered_bytes, places_.etp));
    }
    if (ag_gather) unpermute();
    exchange("ep.combine", "ep.dispatch_grad", "ep.reduce_scatter", "ep.dispatch_grad_rs", Collective::kReduceScatter);
    if (!ag_gather) unpermute();
    F.insert(F.end(), SF.begin(), SF.end());
    B.insert(B.end(), SB.begin(), SB.end());
  }
  if (moe && p.moe.overlap == config::MoeRouting::Overlap::kMicroBatch) {
    // Two micro-batches interleaved (DualPipe-style): each expert-parallel exchange of one
    // hides behind an equal share of the other's layer compute, attention included.
    for (auto* ops : {&F, &B}) {
      double compute = 0;
      int exchanges = 0;
      for (const auto& o : *ops) {
        if (o.kind != OpKind::kComm) compute += o.time.value();
        if (o.kind == OpKind::kComm && o.comm == CommKind::kEp) ++exchanges;
      }
      for (auto& o : *ops) {
        if (o.kind == OpKind::kComm && o.comm == CommKind::kEp) o.hidden_by = Duration(compute / std::max(1, exchanges));
      }
    }
  }
  F.push_back(mem_op(c, "residual2", (2.0 * c.re + e) * h * c.T_rep + dropout_bytes));
  F.back().saved_bytes = mask_bytes;
  B.push_back(mem_op(c, "residual2.bwd", 3.0 * c.re * h * c.T_rep + dropout_bytes));
  }  // MLP

  // This rank's parameters of the layer: TP-sharded dense weights, its local experts.
  auto local_layer_params = [&] {
    double n = m.mixer_params(kind) / c.t;
    if (kind.ffn == model::Ffn::kDense) return n + m.dense_mlp_params() / c.t;
    if (kind.ffn == model::Ffn::kNone) return n;
    const auto& mo = m.moe;
    return n + static_cast<double>(mo.num_experts) / static_cast<double>(p.ep) * m.expert_params() / static_cast<double>(p.etp);
  };

  // ---- gradient accumulation ----
  if (rc_.training.lp_grads) {
    // 16-bit gradients kept beside an fp32 buffer (DeepSpeed BF16Optimizer) are folded into it
    // after every micro-batch: read the 16-bit gradient, read and write the buffer.
    const double layer_params = local_layer_params();
    const double gb = hw::bytes_per_element(rc_.training.grad_dtype);
    B.push_back(mem_op(c, "grad_accumulate", layer_params * (e + 2.0 * gb)));
  }

  // ---- recomputation ----
  if (recompute == config::Recompute::kFull || recompute == config::Recompute::kSelective) {
    // Full recompute runs the whole forward (with its TP collectives) again before this layer's
    // backward. Selective recompute (Megatron-Core's recompute modules) re-runs each chosen
    // module's forward operators, its TP / EP exchanges included: the attention core only when
    // unfused (flash attention recomputes it anyway); norms only where they are separate
    // modules (a MoE layer's pre-MLP norm, which the router shares, and the input norm of MLA's
    // down-projections); `mlp` is a dense layer's MLP, `moe` a MoE layer's whole block (router
    // to combine, shared experts included).
    const bool mla = m.mla.enabled();
    auto in_module = [&](const std::string& n) {
      if (recompute == config::Recompute::kFull) return true;
      if (p.recomputes(config::kRecomputeCoreAttn) && rc_.training.attention == config::AttentionImpl::kUnfused &&
          n == "attention")
        return true;
      if (p.recomputes(config::kRecomputeLayernorm) && ((moe && n == "norm2") || (mla && n == "norm1"))) return true;
      if (p.recomputes(config::kRecomputeMlaUpProj) && mla && (n.starts_with("q_up") || n.starts_with("kv_up") || n == "rope"))
        return true;
      if (p.recomputes(config::kRecomputeMlp) && !moe &&
          (n.starts_with("fc1") || n == "activation" || n.starts_with("fc2") || n.starts_with("mlp_in") || n.starts_with("mlp_out")))
        return true;
      if (!moe) return false;
      if (p.recomputes(config::kRecomputeMoeAct) && n == "experts.activation") return true;
      if (p.recomputes(config::kRecomputeSharedExperts) && n.starts_with("shared.")) return true;
      return p.recomputes(config::kRecomputeMoe) && (n.starts_with("router") || n == "permute" || n.starts_with("ep.") ||
                                                      n.starts_with("experts.") || n == "unpermute" || n.starts_with("shared."));
    };
    // PyTorch's non-reentrant checkpoint stops at the last saved tensor: a dense layer's down
    // projection saves its input and weight before it runs, so it and what follows it (its TP
    // exit collective, the residual add) are not recomputed; its weight cast (autocast) is.
    // Dropout after it saves its mask, so the projection runs; a MoE layer's combine keeps the
    // expert outputs for the routing weights' gradient.
    size_t stop = F.size();
    if (recompute == config::Recompute::kFull && p.recompute_stops_early && !moe && !rc_.training.dropout) {
      for (size_t i = F.size(); i-- > 0;) {
        if (F[i].kind == OpKind::kGemm) {
          stop = i;
          break;
        }
      }
    }
    const std::string stop_cast = stop < F.size() ? F[stop].name + ".weight_cast" : std::string();
    std::vector<Op> re;
    for (size_t i = 0; i < F.size(); ++i) {
      const Op& o = F[i];
      if (i >= stop && o.name != stop_cast) continue;
      if (!in_module(o.name)) continue;
      Op r = o;
      r.name = "recompute." + o.name;
      r.flops = Flops(0);
      re.push_back(r);
      // Host-side work of the recomputed forward counts as host time (LayerCost::host), not as
      // recomputation.
      if (o.kind != OpKind::kComm && o.kind != OpKind::kHost) lc.recompute += o.time;
      if (o.kind != OpKind::kComm) lc.hardware_flops += o.flops;
    }
    B.insert(B.begin(), re.begin(), re.end());
  } else if (recompute == config::Recompute::kSelectiveOp) {
    // Op-level selective checkpointing keeps every other matmul output and the attention output
    // (see memory::selective_op_bytes_per_token); backward re-runs the element-wise work and the
    // matmuls whose outputs were dropped: K (and V's twin) of the projections, the output
    // projection, the up projection of a gated MLP or the second matmul of a plain one.
    const bool gated = m.mlp == model::MlpKind::kGated;
    std::vector<Op> re;
    for (const auto& o : F) {
      double frac = 0;
      if (o.kind == OpKind::kElementwise) {
        frac = 1.0;
      } else if (o.name == "qkv") {
        frac = kv_width / (q_width + 2.0 * kv_width);
      } else if (o.name == "o_proj" || o.name == "q_up" || o.name == "kv_up") {
        frac = 1.0;
      } else if (o.name == "fc1" || o.name == "experts.fc1" || o.name == "shared.fc1") {
        frac = gated ? 0.5 : 0.0;
      } else if (o.name == "fc2" || o.name == "experts.fc2" || o.name == "shared.fc2") {
        frac = gated ? 0.0 : 1.0;
      }
      if (frac <= 0) continue;
      Op r = o;
      r.name = "recompute." + o.name;
      r.time = o.time * frac;
      r.flops = Flops(0);
      re.push_back(r);
      lc.recompute += r.time;
      lc.hardware_flops += o.flops * frac;
    }
    B.insert(B.begin(), re.begin(), re.end());
  }
  // ---- FSDP2 copy-out ----
  // PyTorch FSDP2 copies each parameter out of the layer's all-gather buffer on the compute
  // stream before the layer runs (read the gathered copy, write the unsharded parameter). Each
  // micro-batch gathers in forward, and again in backward when the forward resharded; a layer
  // gathered once per step (no resharding, several micro-batches) pays it once, left out here.
  if (p.fsdp_copy_out && p.effective_zero() >= 3 && p.dp * p.cp > 1 &&
      (p.reshard_after_forward || rc_.num_microbatches <= 1)) {
    // QLoRA's gathered layer weights are packed 4-bit.
    const double copy = 2.0 * rc_.gathered_layer_weight_bytes() * local_layer_params();
    // Added after the recomputation lists are built: the backward's gather (and its copy-out)
    // serves the recomputed forward too.
    F.insert(F.begin(), mem_op(c, "fsdp.copy_out", copy));
    if (p.reshard_after_forward) B.insert(B.begin(), mem_op(c, "fsdp.copy_out.bwd", copy));
  }

  finish(lc);
  return lc;
}

LayerCost WorkloadBuilder::build_embedding() const {
  const auto& m = rc_.model;
  Ctx c = make_ctx(rc_, places_, tokens_);
  const double h = static_cast<double>(m.hidden);
  LayerCost lc;
  lc.fwd.push_back(mem_op(c, "embedding.gather", 2.0 * c.re * c.T * h));
  if (c.t > 1) {
    // Vocab-parallel embedding: partial lookups are summed across TP (reduce-scatter under SP).
    lc.fwd.push_back(comm_op(c, "embedding.tp_reduce", CommKind::kTp,
                             c.sp ? Collective::kReduceScatter : Collective::kAllReduce, c.T * h * c.e, places_.tp));
  }
  if (m.embedding_norm) {
    // The norm keeps its input (the looked-up embeddings) for backward.
    lc.fwd.push_back(mem_op(c, "embedding_norm", 2.0 * c.e * h * c.T_rep * eager_factor(c, Eager::kNorm)));
    lc.fwd.back().saved_bytes = c.e * h * c.T_rep;
  }
  // Backward: scatter-add of token gradients into the (dense) embedding gradient. Under LoRA the
  // embedding is frozen and nothing below it needs a gradient, so the backward stops here.
  const double vocab_local = static_cast<double>(rc_.padded_vocab) / c.t;
  if (!rc_.training.lora.enabled()) {
    if (m.embedding_norm) lc.bwd.push_back(mem_op(c, "embedding_norm.bwd", 4.0 * c.e * h * c.T_rep * eager_factor(c, Eager::kNorm)));
    lc.bwd.push_back(mem_op(c, "embedding.grad", 2.0 * c.re * c.T * h + hw::bytes_per_element(rc_.training.grad_dtype) * vocab_local * h));
  }
  finish(lc);
  return lc;
}

LayerCost WorkloadBuilder::build_output() const {
  const auto& m = rc_.model;
  Ctx c = make_ctx(rc_, places_, tokens_);
  // The output layer stays in 16-bit under fp8 training (Transformer Engine keeps it out of fp8).
  if (c.gemm_dtype == hw::Dtype::kFp8) c.gemm_dtype = c.act_dtype;
  const double h = static_cast<double>(m.hidden);
  const double v_local = static_cast<double>(rc_.padded_vocab) / c.t;
  LayerCost lc;
  lc.fwd.push_back(mem_op(c, "final_norm", (c.re + c.e) * h * c.T_rep * eager_factor(c, Eager::kNorm)));
  lc.fwd.back().saved_bytes = c.e * h * c.T_rep;
  lc.bwd.push_back(mem_op(c, "final_norm.bwd", 2.0 * (c.re + c.e) * h * c.T_rep));
  const size_t s_f = lc.fwd.size(), s_b = lc.bwd.size();
  {
    const auto& p = rc_.parallel;
    const bool keeps_gathered = p.keeps_gathered_input();
    linear(c, lc.fwd, lc.bwd, "lm_head", c.T, v_local, h, 1.0, c.e * h * (c.sp && !keeps_gathered ? c.T_rep : c.T));
    lc.fwd[s_f].held_bytes = c.e * c.T * v_local;  // the logits
  }
  std::vector<Op> f2, b2;
  tp_entry(c, f2, b2, "lm_head_in", Duration(sum_time(lc.fwd, s_f)), backward_times(lc.bwd, s_b));
  lc.fwd.insert(lc.fwd.begin() + static_cast<long>(s_f), f2.begin(), f2.end());
  lc.bwd.insert(lc.bwd.end(), b2.begin(), b2.end());
  // Cross-entropy over the local vocabulary slice: upcast, softmax statistics, loss; backward
  // writes the logit gradient. fp32 logits cost 4 bytes per element per pass.
  const double lb = rc_.training.fp32_logits ? 4.0 : c.e;
  const double elems = c.T * v_local;
  lc.fwd.push_back(mem_op(c, "cross_entropy", elems * (c.e + 3.0 * lb)));
  lc.fwd.back().held_bytes = rc_.training.fp32_logits ? 4.0 * elems : 0.0;  // the loss's fp32 copy
  lc.bwd.push_back(mem_op(c, "cross_entropy.bwd", elems * (lb + c.e)));
  if (c.t > 1) {
    lc.fwd.push_back(comm_op(c, "cross_entropy.tp_stats", CommKind::kTp, Collective::kAllReduce, 3.0 * c.T * 4.0, places_.tp));
  }
  // Multi-token prediction modules run after the main loss on the same stage: each embeds the
  // next tokens with the shared embedding (vocab-parallel: partial lookups summed over TP, a
  // scatter-add into the embedding gradient in backward), norms that and the hidden state,
  // projects the pair (2h -> h; under TP the pair is gathered in, the output gathered and
  // re-sharded, as Megatron's MTP concatenation does), runs one transformer layer of the model's
  // last-layer kind (recomputed as the model's layers are) and predicts with the shared output
  // head and a loss of its own (the head's ops again).
  if (rc_.training.mtp_layers > 0) {
    const std::vector<Op> head_f = lc.fwd, head_b = lc.bwd;
    const LayerCost layer = build_layer(m.layer_kind(m.num_layers - 1), rc_.parallel.recompute);
    const double vocab_local = static_cast<double>(rc_.padded_vocab) / c.t;
    for (int64_t d = 0; d < rc_.training.mtp_layers; ++d) {
      lc.fwd.push_back(mem_op(c, "mtp.embedding", 2.0 * c.e * c.T * h));
      if (c.t > 1) {
        lc.fwd.push_back(comm_op(c, "mtp.embedding.tp_reduce", CommKind::kTp,
                                 c.sp ? Collective::kReduceScatter : Collective::kAllReduce, c.T * h * c.e, places_.tp));
      }
      if (!rc_.training.lora.enabled()) {
        lc.bwd.push_back(mem_op(c, "mtp.embedding.grad",
                                2.0 * c.e * c.T * h + hw::bytes_per_element(rc_.training.grad_dtype) * vocab_local * h));
      }
      lc.fwd.push_back(mem_op(c, "mtp.norms", 4.0 * c.e * h * c.T_rep * eager_factor(c, Eager::kNorm)));
      lc.bwd.push_back(mem_op(c, "mtp.norms.bwd", 8.0 * c.e * h * c.T_rep));
      const size_t pf = lc.fwd.size(), pb = lc.bwd.size();
      linear(c, lc.fwd, lc.bwd, "mtp.eh_proj", c.T, h / c.t, 2.0 * h, 1.0, 2.0 * c.e * h * c.T_rep);
      std::vector<Op> in_f, in_b, out_f, out_b;
      // The 2h input's gather, the h/t output's gather.
      tp_entry(c, in_f, in_b, "mtp.eh_proj_in", Duration(sum_time(lc.fwd, pf)), backward_times(lc.bwd, pb), 2.0);
      if (c.t > 1) {
        out_f.push_back(comm_op(c, "mtp.eh_proj_out.ag", CommKind::kTp, Collective::kAllGather, c.T * h * c.e, places_.tp));
        // Backward: the gather's split is local; re-sharding the sequence (SP) gathers it back.
        if (c.sp) out_b.push_back(comm_op(c, "mtp.eh_proj_out.ag_grad", CommKind::kTp, Collective::kAllGather, c.T * h * c.e, places_.tp));
      }
      lc.fwd.insert(lc.fwd.begin() + static_cast<long>(pf), in_f.begin(), in_f.end());
      lc.fwd.insert(lc.fwd.end(), out_f.begin(), out_f.end());
      lc.bwd.insert(lc.bwd.end(), in_b.begin(), in_b.end());
      lc.bwd.insert(lc.bwd.end(), out_b.begin(), out_b.end());
      lc.fwd.insert(lc.fwd.end(), layer.fwd.begin(), layer.fwd.end());
      lc.bwd.insert(lc.bwd.end(), layer.bwd.begin(), layer.bwd.end());
      lc.fwd.insert(lc.fwd.end(), head_f.begin(), head_f.end());
      lc.bwd.insert(lc.bwd.end(), head_b.begin(), head_b.end());
    }
  }
  // Megatron does not recompute the output layer, so full recompute adds nothing here.
  finish(lc);
  return lc;
}

}  // namespace stepcast::estimate
