#include "validate/program.hpp"

#include <algorithm>
#include <map>

#include "sim/core/error.hpp"
#include "sim/engine/schedule.hpp"
#include "sim/engine/step_builder.hpp"
#include "sim/estimate/estimate.hpp"
#include "sim/memory/ledger.hpp"
#include "sim/mesh/rank_mesh.hpp"

namespace stepcast::validate {

using config::Recompute;
using estimate::CommKind;
using estimate::Op;
using estimate::OpKind;

const char* to_string(Category c) {
  switch (c) {
    case Category::kCompute: return "compute";
    case Category::kTpComm: return "tp";
    case Category::kPpComm: return "pp";
    case Category::kDpComm: return "dp";
    case Category::kOptimizer: return "optimizer";
    case Category::kEpComm: return "ep";
    case Category::kCpComm: return "cp";
    case Category::kCount: break;
  }
  return "?";
}

void check_executable(const config::RunConfig& rc, const std::string& backend) {
  const auto& p = rc.parallel;
  const auto& m = rc.model;
  auto refuse = [&](const std::string& what) {
    throw core::UserError(rc.source_name + ": validate --backend " + backend + " cannot execute " + what);
  };
  if (backend == "cuda") {
    if (rc.training.precision == hw::Dtype::kFp8) refuse("training.precision \"fp8\" (the CUDA executor runs bf16, fp16 or fp32 GEMMs)");
    if (rc.training.attention != config::AttentionImpl::kUnfused) refuse("fused attention (no fused attention kernel is linked; the CUDA executor runs attention unfused, as batched GEMMs; set training.attention to \"unfused\")");
  }
  if (backend == "cpu") {
    if (rc.training.precision != hw::Dtype::kFp32) refuse("training.precision \"" + std::string(hw::to_string(rc.training.precision)) + "\" (CPU kernels compute in fp32; set \"fp32\")");
    if (rc.training.attention != config::AttentionImpl::kUnfused) refuse("fused attention (the CPU executor runs attention unfused, as batched GEMMs; set training.attention to \"unfused\")");
  }
  if (m.mixed()) refuse("a hybrid model's Mamba-2, linear-attention or attention-only layers (the executors run transformer layers: softmax attention and an MLP)");
  if (m.moe.enabled() && backend == "cuda") refuse("a mixture-of-experts model (expert layers run on the CPU backend only)");
  if (m.moe.enabled() && p.etp > 1) refuse("parallel.etp " + std::to_string(p.etp) + " (experts are not split by tensor parallelism)");

  if (p.cp > 1 && backend == "cuda") refuse("parallel.cp " + std::to_string(p.cp) + " (context parallelism runs on the CPU backend only)");
  if (p.cp > 1 && !p.cp_load_balance)
    refuse("parallel.cp_load_balance false (every rank runs the balanced rank's attention; the unbalanced last rank is not executed)");
  if (p.tp_comm_overlap) refuse("parallel.tp_comm_overlap (communication runs on the compute thread)");
  if (!p.no_sync) refuse("parallel.no_sync false (gradients are reduced once per step)");
  if (p.dp_replicate > 1 && backend == "cuda")
    refuse("parallel.dp_replicate " + std::to_string(p.dp_replicate) + " (hybrid sharding runs on the CPU backend only)");
  if (p.recompute == Recompute::kSelectiveOp) refuse("parallel.recompute \"selective-op\"");
  if (p.recompute == Recompute::kSelective && p.recompute_modules != config::kRecomputeCoreAttn)
    refuse("parallel.recompute_modules other than [\"core_attn\"] (only the attention core is recomputed)");
  if (rc.training.loss != config::LossImpl::kFused) refuse("training.loss \"eager\"");
  if (rc.training.lp_grads) refuse("training.lp_grads");
  if (rc.training.lora.nf4) refuse("training.lora.base_quantization \"nf4\" (no 4-bit dequantization kernel is linked; the base is stored in param_dtype)");
  // Pipeline-runtime buffers of other frameworks that the executor does not hold.
  if (p.keep_stage_outputs) refuse("parallel.keep_stage_outputs (stage outputs are released once sent)");
  if (p.keep_step_outputs != config::StepOutputs::kNone) refuse("parallel.keep_step_outputs (stage outputs are released once sent)");
  if (p.recv_buffer_per_microbatch) refuse("parallel.recv_buffer_per_microbatch (one receive buffer is reused)");
  // Pipeline transfers are posted in Megatron's order, and no embedding group is formed.
  if (p.pp_rendezvous && p.pp > 1) refuse("parallel.pp_rendezvous (transfers are posted in Megatron's order, not as DeepSpeed's blocking pairs)");
  if (estimate::tied_embedding_sync(rc)) {
    refuse("model.tie_word_embeddings with the head off stage 0 (the embedding gradient's all-reduce between the first and the head's stage is not executed; untie the model)");
  }
  if (p.offload != config::Offload::kNone) refuse("parallel.offload (model state stays in device memory and the optimizer runs there)");
  if (p.activation_offload_layers > 0) refuse("parallel.activation_offload_layers (activations stay in device memory)");
}

config::RunConfig executed_run(config::RunConfig rc, const std::string& backend) {
  // ZeRO-3 / FSDP collectives run in line on every backend: each layer is gathered when it runs
  // and its gradient reduce-scattered before the next layer's compute.
  if (backend != "cuda" || rc.parallel.effective_zero() >= 3) rc.parallel.grad_reduce_overlap = false;
  rc.parallel.param_gather_overlap = false;
  // Expert layers run one operator after another on the compute thread: dispatch and combine
  // hide behind nothing, and there is no per-expert host work beyond the GEMM calls.
  rc.parallel.moe.overlap = config::MoeRouting::Overlap::kNone;
  rc.parallel.moe.expert_overhead = 0;
  // Context parallelism's ring hops are exchanged, then computed.
  rc.parallel.cp_overlap = false;
  // Tensor-parallel collectives run on the compute thread, between the GEMMs (no asynchronous
  // linear-layer backward).
  rc.parallel.tp_async_backward = false;
  return rc;
}

namespace {

class Emitter {
 public:
  explicit Emitter(Program& p) : p_(p) {}

  uint32_t name(const std::string& n) {
    auto it = ids_.find(n);
    if (it != ids_.end()) return it->second;
    const auto id = static_cast<uint32_t>(p_.names.size());
    p_.names.push_back(n);
    ids_.emplace(n, id);
    return id;
  }

  Instr& add(Kind k, Category c, const std::string& n, int32_t mb, int32_t layer) {
    Instr in;
    in.kind = k;
    in.category = c;
    in.name = name(n);
    in.microbatch = mb;
    in.layer = layer;
    p_.step.push_back(in);
    return p_.step.back();
  }

  int32_t alloc(double bytes, const std::string& what, int32_t mb, int32_t layer) {
    if (bytes <= 0) return -1;
    Instr& in = add(Kind::kAlloc, Category::kCompute, what, mb, layer);
    in.bytes = bytes;
    in.buffer = p_.buffers++;
    return in.buffer;
  }

  void free(int32_t buffer, int32_t mb, int32_t layer) {
    if (buffer < 0) return;
    Instr& in = add(Kind::kFree, Category::kCompute, "free", mb, layer);
    in.buffer = buffer;
  }

  // A workload operator as an instruction (communication on the tensor-parallel group).
  void op(const Op& o, int32_t mb, int32_t layer) {
    switch (o.kind) {
      case OpKind::kGemm: {
        Instr& in = add(Kind::kGemm, Category::kCompute, o.name, mb, layer);
        in.gemm = o.gemm;
        return;
      }
      case OpKind::kAttention: {
        Instr& in = add(Kind::kAttention, Category::kCompute, o.name, mb, layer);
        in.attention = o.attention;
        in.backward = o.attention_backward;
        return;
      }
      case OpKind::kElementwise: {
        Instr& in = add(Kind::kStream, Category::kCompute, o.name, mb, layer);
        in.bytes = o.bytes.value();
        return;
      }
      case OpKind::kComm: {
        if (o.comm != CommKind::kTp && o.comm != CommKind::kEp && o.comm != CommKind::kCp)
          throw core::InternalError("validate: unexpected " + std::string(estimate::to_string(o.comm)) + " operator " + o.name);
        const Category cat = o.comm == CommKind::kEp ? Category::kEpComm : o.comm == CommKind::kCp ? Category::kCpComm : Category::kTpComm;
        Instr& in = add(Kind::kCollective, cat, o.name, mb, layer);
        in.collective = o.collective;
        in.group = o.comm == CommKind::kEp ? Group::kEp : o.comm == CommKind::kCp ? Group::kCp : Group::kTp;
        in.bytes = o.bytes.value();
        return;
      }
      case OpKind::kHost:
        // Per-expert host work of a framework's grouped GEMM: executed_run() sets it to none.
        return;
    }
  }

 private:
  Program& p_;
  std::map<std::string, uint32_t> ids_;
};

}  // namespace

Program build_program(const config::RunConfig& rc, int64_t rank) {
  const auto& p = rc.parallel;
  const engine::StepBuilder sb(rc, false, false, 1.0);
  const mesh::RankMesh mesh(p.tp, p.cp, p.dp, p.pp, p.ep, p.etp, p.dp_replicate);
  if (rank < 0 || rank >= mesh.world()) throw core::InternalError("validate: rank out of range");
  const mesh::Coord co = mesh.coord(rank);
  Program prog;
  prog.rank = rank;
  prog.stage = static_cast<int32_t>(co.pp);
  prog.tp_group = mesh.group(rank, mesh::Dim::kTp);
  // The shard groups (the whole dp x cp and expert-data-parallel groups without hybrid sharding).
  prog.dp_group = mesh.group(rank, mesh::Dim::kShard);
  prog.dp_replicate_group = mesh.group(rank, mesh::Dim::kReplicate);
  prog.ep_group = mesh.group(rank, mesh::Dim::kEp);
  prog.edp_group = mesh.group(rank, mesh::Dim::kEdpShard);
  prog.edp_replicate_group = mesh.group(rank, mesh::Dim::kEdpReplicate);
  prog.cp_group = mesh.group(rank, mesh::Dim::kCp);
  const int32_t s = prog.stage;
  const auto& slots = sb.slots(s);
  const auto& chunk_slots = sb.chunk_slots(s);

  // Model state, sharded as the ZeRO stage says over the data-parallel shard group (routed
  // experts over the expert-data-parallel shard group).
  const memory::StateBytes sbytes = memory::state_bytes(rc.training);
  const int zero = p.effective_zero();
  const double n = static_cast<double>(prog.dp_group.size());
  const double n_edp = static_cast<double>(prog.edp_group.size());
  // Every parameter is stored; gradients and optimizer state exist for those that train (under
  // LoRA the adapters alone).
  double params = 0, expert = 0, trained = 0, trained_expert = 0;
  for (const auto& sl : slots) {
    params += sl.params;
    expert += sl.expert_params();
    trained += sl.trainable_params();
    trained_expert += sl.trainable_expert_params();
  }
  auto sharded = [&](bool all, double bytes_per_param, int from_stage) {
    const double x = all ? expert : trained_expert, d = (all ? params : trained) - x;
    return d * bytes_per_param / (zero >= from_stage ? n : 1.0) + x * bytes_per_param / (zero >= from_stage ? n_edp : 1.0);
  };
  prog.weight_bytes = sharded(true, sbytes.weights, 3);
  prog.gradient_bytes = sharded(false, sbytes.gradients, 2);
  prog.optimizer_bytes = sharded(false, sbytes.optimizer, 1);
  prog.local_params = sharded(false, 1.0, 1);
  // ZeRO-3 / FSDP reduce each layer's gradient on its own instead of in buckets.
  const auto buckets = zero >= 3 ? std::vector<engine::GradBucket>{}
                                 : engine::gradient_buckets(slots, chunk_slots, sbytes.gradients, p, s);
  if (p.dp * p.cp > 1) {
    for (const auto& b : buckets) prog.bucket_buffer_bytes = std::max(prog.bucket_buffer_bytes, b.bytes);
  }

  Emitter em(prog);
  const auto pp = static_cast<int32_t>(p.pp);
  const auto v = static_cast<int32_t>(p.vpp);
  const auto m = static_cast<int32_t>(rc.num_microbatches);
  const int32_t total_vs = pp * v;
  const double p2p = sb.workload().p2p_bytes().value();
  const double e = rc.training.precision == hw::Dtype::kFp32 ? 4.0 : 2.0;
  const double layer_input = e * static_cast<double>(rc.model.hidden) * sb.workload().tokens() /
                             (p.sp && p.tp > 1 ? static_cast<double>(p.tp) : 1.0);
  const bool split_w = p.split_backward();
  // Gradient buckets: launched on the asynchronous stream right after the pass that makes their
  // last gradient final (the last micro-batch's backward, or its weight-gradient pass under
  // ZB-H1), or all after the pipeline when reduction does not overlap.
  const bool reduce = p.dp * p.cp > 1;
  const bool overlap = reduce && p.grad_reduce_overlap;
  const int zero_stage = p.effective_zero();
  size_t next_bucket = 0;
  // A gradient reduction over a shard group and, after a reduce-scatter under hybrid sharding,
  // the all-reduce of the reduced shard over the replicas (the simulation's dp_reduce).
  auto dp_reduce = [&](cost::Collective c, bool expert, double bytes, bool async, int32_t mb, int32_t layer) {
    Instr& in = em.add(Kind::kCollective, Category::kDpComm, c == cost::Collective::kReduceScatter ? "reduce-scatter grads" : "all-reduce grads", mb, layer);
    in.collective = c;
    in.group = expert ? Group::kEdp : Group::kDp;
    in.bytes = bytes;
    in.async = async;
    const auto& shard = prog.group(in.group);
    const auto& replicas = prog.group(expert ? Group::kEdpReplicate : Group::kDpReplicate);
    if (c != cost::Collective::kReduceScatter || replicas.size() <= 1) return;
    Instr& all = em.add(Kind::kCollective, Category::kDpComm, "all-reduce grad shard across replicas", mb, layer);
    all.collective = cost::Collective::kAllReduce;
    all.group = expert ? Group::kEdpReplicate : Group::kDpReplicate;
    all.bytes = bytes / static_cast<double>(shard.size());
    all.async = async;
  };
  auto emit_bucket = [&](const engine::GradBucket& b, bool async) {
    dp_reduce(zero_stage >= 1 ? cost::Collective::kReduceScatter : cost::Collective::kAllReduce, b.expert, b.bytes, async, -1, -2);
  };
  auto buckets_ready_after = [&](size_t slot) {
    while (overlap && next_bucket < buckets.size() && buckets[next_bucket].ready_slot == slot) emit_bucket(buckets[next_bucket++], true);
  };
  const int32_t num_layers = static_cast<int32_t>(rc.model.num_layers);
  auto peer_of_stage = [&](int32_t stage) {
    return static_cast<int32_t>(mesh.rank_of(co.tp, co.cp, co.dp, stage));
  };
  auto tag = [&](int32_t mb, int32_t vs_dest, bool fwd) { return (mb * total_vs + vs_dest) * 2 + (fwd ? 0 : 1); };
  // The rank of a neighbouring virtual stage, or -1 where it runs on this rank (ZB-V's turn:
  // the chunk's output is the next chunk's input as it stands).
  auto peer_of_vstage = [&](int32_t other) {
    const auto stage = static_cast<int32_t>(p.stage_of_vstage(other));
    return stage == static_cast<int32_t>(s) ? -1 : peer_of_stage(stage);
  };
  // ZeRO-3 / FSDP, in line as the simulation of executed_run() schedules it: a layer's
  // parameters are gathered (in training.gather_dtype) into a buffer of their own just before
  // it runs, forward and backward, and released after it; its gradient fills an unsharded
  // buffer that is reduce-scattered (in training.reduce_dtype) after its backward (its
  // weight-gradient pass under ZB-H1). The next layer's gather comes before that
  // reduce-scatter, as the simulated rank issues them. Without resharding after forward
  // (FSDP's reshard_after_forward false) a unit is gathered in the first micro-batch's forward
  // and kept until its last backward, and its unsharded gradient accumulates from its first
  // backward to the last micro-batch's, which reduce-scatters it (every micro-batch when there
  // is one).
  const bool fsdp = zero >= 3 && p.dp * p.cp > 1;
  // Parameters gathered for every forward and backward (else kept from the first forward), and
  // gradients reduce-scattered after every backward (else accumulated to the last).
  const bool reshard = p.reshard_after_forward;
  const bool reduce_each = p.reshard_after_forward || m == 1;
  std::map<size_t, int32_t> kept_params, kept_grads;  // without resharding: slot -> buffer
  // A unit's unsharded gradient before its backward (or weight-gradient pass) and, after it,
  // the reduce-scatter that ends it.
  auto grad_begin = [&](size_t k, int32_t mb) -> int32_t {
    if (!fsdp) return -1;
    const double bytes = slots[k].trainable_params() * sbytes.gradients;
    if (bytes <= 0) return -1;
    if (reduce_each) return em.alloc(bytes, "unsharded gradients", mb, slots[k].layer);
    if (kept_grads.count(k) == 0) kept_grads[k] = em.alloc(bytes, "accumulated unsharded gradients", mb, slots[k].layer);
    return -1;
  };
  const double gather_bytes = hw::bytes_per_element(rc.training.gather_dtype);
  const double reduce_bytes = hw::bytes_per_element(rc.training.reduce_dtype);
  // A unit's collective: its dense parameters over the data-parallel group, then its routed
  // experts over the expert-data-parallel group, as the simulation issues them.
  auto fsdp_collective = [&](cost::Collective c, const engine::Slot& sl, double bytes_per_param, int32_t mb) {
    // Gathers carry every parameter, reduce-scatters the gradients of those that train.
    const bool up = c == cost::Collective::kAllGather;
    const double unit_expert = up ? sl.expert_params() : sl.trainable_expert_params();
    const double unit_all = up ? sl.params : sl.trainable_params();
    if (!up && unit_all <= 0) return;
    for (const auto& [share, group] : {std::pair{unit_all - unit_expert, Group::kDp}, std::pair{unit_expert, Group::kEdp}}) {
      if (group == Group::kEdp && share <= 0) continue;
      if (c == cost::Collective::kReduceScatter) {
        dp_reduce(c, group == Group::kEdp, share * bytes_per_param, false, mb, sl.layer);
        continue;
      }
      Instr& in = em.add(Kind::kCollective, Category::kDpComm, "all-gather params", mb, sl.layer);
      in.collective = c;
      in.group = group;
      in.bytes = share * bytes_per_param;
    }
  };
  // Gathers slot k's parameters (twice when its recomputed forward gathers again); returns the
  // buffer.
  auto fsdp_gather = [&](const engine::Slot& sl, int32_t mb, bool again) {
    const int32_t id = em.alloc(sl.params * gather_bytes, "gathered params", mb, sl.layer);
    fsdp_collective(cost::Collective::kAllGather, sl, gather_bytes, mb);
    if (again) fsdp_collective(cost::Collective::kAllGather, sl, gather_bytes, mb);
    return id;
  };
  auto grad_end = [&](size_t k, int32_t mb, int32_t grad) {
    if (!fsdp || (!reduce_each && mb != m - 1) || slots[k].trainable_params() <= 0) return;
    fsdp_collective(cost::Collective::kReduceScatter, slots[k], reduce_bytes, mb);
    em.free(reduce_each ? grad : kept_grads[k], mb, slots[k].layer);
  };
  const bool regather_full = p.zero3_recompute_regather && p.recompute == Recompute::kFull;
  // Context parallelism: the all-gather variants' gathered K/V (forward and backward).
  auto is_cp_gather = [](const Op& o) { return o.kind == OpKind::kComm && o.comm == CommKind::kCp && o.collective == cost::Collective::kAllGather; };
  int32_t cp_fwd = -1;
  // Buffers a forward pass leaves for its backward: [chunk * m + mb][slot] -> ids.
  std::map<std::pair<int64_t, size_t>, std::vector<int32_t>> kept;
  // Under a split backward: what each pass keeps from its B until its W.
  std::map<std::pair<int64_t, size_t>, int32_t> held_for_w;

  for (const engine::Action& a : engine::stage_order(p.schedule, pp, s, m, v)) {
    const auto vs = static_cast<int32_t>(p.vstage(s, a.chunk));
    const int64_t pass = static_cast<int64_t>(a.chunk) * m + a.mb;
    std::vector<size_t> seq = chunk_slots[static_cast<size_t>(a.chunk)];
    if (a.phase == engine::Phase::kF) {
      if (vs > 0 && peer_of_vstage(vs - 1) >= 0) {
        Instr& in = em.add(Kind::kRecv, Category::kPpComm, "recv activation", a.mb, -2);
        in.bytes = p2p;
        in.peer = peer_of_vstage(vs - 1);
        in.tag = tag(a.mb, vs, true);
      }
      const bool gather_f = fsdp && (reshard || a.mb == 0);
      int32_t gathered = gather_f && !seq.empty() ? fsdp_gather(slots[seq[0]], a.mb, false) : -1;
      for (size_t i = 0; i < seq.size(); ++i) {
        const size_t k = seq[i];
        const auto& sl = slots[k];
        const bool transformer = sl.layer >= 0 && sl.layer < num_layers;
        const bool full = transformer && p.recompute == Recompute::kFull;
        auto& ids = kept[{pass, k}];
        if (full) ids.push_back(em.alloc(layer_input, "keep layer input", a.mb, sl.layer));
        for (const Op& o : sl.cost->fwd) {
          // Context parallelism: the gathered K/V of every rank live until the attention ends.
          if (is_cp_gather(o)) cp_fwd = em.alloc(o.bytes.value(), "gathered K/V", a.mb, sl.layer);
          em.op(o, a.mb, sl.layer);
          if (o.kind == OpKind::kAttention) {
            em.free(cp_fwd, a.mb, sl.layer);
            cp_fwd = -1;
          }
          if (!full) {
            ids.push_back(em.alloc(o.saved_bytes, "keep " + o.name, a.mb, sl.layer));
            if (p.recompute != Recompute::kSelective) ids.push_back(em.alloc(o.score_bytes, "keep " + o.name + " probabilities", a.mb, sl.layer));
          }
          ids.push_back(em.alloc(o.held_bytes, "hold " + o.name + " output", a.mb, sl.layer));
        }
        if (gather_f) {
          if (reshard) {
            em.free(gathered, a.mb, sl.layer);
          } else {
            kept_params[k] = gathered;
          }
          gathered = i + 1 < seq.size() ? fsdp_gather(slots[seq[i + 1]], a.mb, false) : -1;
        }
      }
      if (vs < total_vs - 1 && peer_of_vstage(vs + 1) >= 0) {
        Instr& in = em.add(Kind::kSend, Category::kPpComm, "send activation", a.mb, -2);
        in.bytes = p2p;
        in.peer = peer_of_vstage(vs + 1);
        in.tag = tag(a.mb, vs + 1, true);
      }
      continue;
    }
    std::reverse(seq.begin(), seq.end());
    if (a.phase == engine::Phase::kW) {
      for (size_t k : seq) {
        const int32_t grad = grad_begin(k, a.mb);
        for (const Op& o : slots[k].cost->bwd) {
          if (o.weight_grad) em.op(o, a.mb, slots[k].layer);
        }
        if (const auto it = held_for_w.find({pass, k}); it != held_for_w.end()) {
          em.free(it->second, a.mb, slots[k].layer);
          held_for_w.erase(it);
        }
        grad_end(k, a.mb, grad);
        if (a.mb == m - 1) buckets_ready_after(k);
      }
      continue;
    }
    // A split backward leaves the weight gradients to a W pass (DualPipeV runs some whole).
    const bool split = split_w && a.phase == engine::Phase::kB;
    if (vs < total_vs - 1 && peer_of_vstage(vs + 1) >= 0) {
      Instr& in = em.add(Kind::kRecv, Category::kPpComm, "recv gradient", a.mb, -2);
      in.bytes = p2p;
      in.peer = peer_of_vstage(vs + 1);
      in.tag = tag(a.mb, vs, false);
    }
    auto regathered = [&](const engine::Slot& sl) {
      return regather_full && sl.layer >= 0 && sl.layer < num_layers && rc.full_recompute_layer(sl.layer);
    };
    const bool gather_b = fsdp && reshard;
    int32_t gathered = gather_b && !seq.empty() ? fsdp_gather(slots[seq[0]], a.mb, regathered(slots[seq[0]])) : -1;
    for (size_t i = 0; i < seq.size(); ++i) {
      const size_t k = seq[i];
      const auto& sl = slots[k];
      const bool transformer = sl.layer >= 0 && sl.layer < num_layers;
      std::vector<int32_t> working;
      const int32_t grad = split ? -1 : grad_begin(k, a.mb);
      // The gradients of the layer's activations (one per saved tensor) are live through its
      // backward; recomputation rebuilds the dropped activations first.
      double saved = 0, scores = 0;
      for (const Op& o : sl.cost->fwd) saved += o.saved_bytes, scores += o.score_bytes;
      if (transformer && p.recompute == Recompute::kFull) {
        working.push_back(em.alloc(saved + scores, "recomputed activations", a.mb, sl.layer));
      } else if (transformer && p.recompute == Recompute::kSelective) {
        working.push_back(em.alloc(scores, "recomputed probabilities", a.mb, sl.layer));
      }
      working.push_back(em.alloc(saved + scores, "activation gradients", a.mb, sl.layer));
      for (const Op& o : sl.cost->bwd) {
        if (split && o.weight_grad) continue;
        if (is_cp_gather(o)) {
          // The gathered K/V; the all-gather variant also accumulates their full-length
          // gradients before its reduce-scatter, and the rotation keeps fp32 dK/dV and dQ
          // accumulators, the partial sums received from the ring and the copy sent on.
          working.push_back(em.alloc(o.bytes.value(), "gathered K/V", a.mb, sl.layer));
          if (p.cp_comm == config::CpComm::kAllGather) {
            working.push_back(em.alloc(o.bytes.value(), "gathered K/V gradients", a.mb, sl.layer));
          } else {
            const double kv_el = o.bytes.value() / e / static_cast<double>(p.cp);
            working.push_back(em.alloc(3.0 * 4.0 * kv_el, "fp32 dK/dV accumulators and ring buffers", a.mb, sl.layer));
            for (const Op& q : sl.cost->fwd) {
              if (q.kind == OpKind::kAttention) {
                const auto& at = q.attention;
                working.push_back(em.alloc(4.0 * at.batch * at.sq * at.heads * at.d_qk, "fp32 dQ accumulator", a.mb, sl.layer));
              }
            }
          }
        }
        em.op(o, a.mb, sl.layer);
      }
      for (int32_t id : working) em.free(id, a.mb, sl.layer);
      for (int32_t id : kept[{pass, k}]) em.free(id, a.mb, sl.layer);
      kept.erase({pass, k});
      if (split) {
        // The weight-gradient pass needs each linear layer's input and output gradient: kept
        // from here until it runs (as the memory ledger counts them).
        const double held = transformer ? memory::layer_weight_grad_bytes(rc, rc.model.is_moe_layer(sl.layer)).value()
                            : sl.layer == num_layers ? memory::output_weight_grad_bytes(rc).value()
                                                     : 0.0;
        if (held > 0) held_for_w[{pass, k}] = em.alloc(held, "keep weight-gradient inputs", a.mb, sl.layer);
      }
      if (gather_b) {
        em.free(gathered, a.mb, sl.layer);
        gathered = i + 1 < seq.size() ? fsdp_gather(slots[seq[i + 1]], a.mb, regathered(slots[seq[i + 1]])) : -1;
      } else if (fsdp && !reshard && a.mb == m - 1) {
        // Kept since the first forward: released after the last backward.
        em.free(kept_params[k], a.mb, sl.layer);
      }
      if (!split) grad_end(k, a.mb, grad);
      if (!split && a.mb == m - 1) buckets_ready_after(k);
    }
    if (vs > 0 && peer_of_vstage(vs - 1) >= 0) {
      Instr& in = em.add(Kind::kSend, Category::kPpComm, "send gradient", a.mb, -2);
      in.bytes = p2p;
      in.peer = peer_of_vstage(vs - 1);
      in.tag = tag(a.mb, vs - 1, false);
    }
  }

  // Data parallel: the buckets not yet launched (all of them without overlap), the wait for
  // the asynchronous ones, the optimizer, the updated shards.
  if (reduce) {
    for (; next_bucket < buckets.size(); ++next_bucket) emit_bucket(buckets[next_bucket], false);
    if (overlap) em.add(Kind::kJoin, Category::kDpComm, "wait for gradient reduction", -1, -2);
  }
  Instr& opt = em.add(Kind::kOptimizer, Category::kOptimizer, "optimizer", -1, -2);
  opt.elements = prog.local_params;
  if (p.dp * p.cp > 1 && (zero == 1 || zero == 2)) {
    // The updated shards bucket by bucket (the gradient buckets' parameters, as the
    // simulation gathers them): dense weights over the data-parallel group, routed experts over
    // the expert-data-parallel group.
    for (const auto& b : buckets) {
      Instr& in = em.add(Kind::kCollective, Category::kDpComm, "all-gather params", -1, -2);
      in.collective = cost::Collective::kAllGather;
      in.group = b.expert ? Group::kEdp : Group::kDp;
      in.bytes = b.bytes / sbytes.gradients * sbytes.weights;
    }
  }
  return prog;
}

void WorkspaceNeeds::gemm(double m, double n, double k) {
  a = std::max(a, static_cast<size_t>(m * k));
  b = std::max(b, static_cast<size_t>(k * n));
  c = std::max(c, static_cast<size_t>(m * n));
}

WorkspaceNeeds workspace_needs(const Program& p) {
  WorkspaceNeeds w;
  for (const auto& in : p.step) {
    if (in.kind == Kind::kGemm) w.gemm(in.gemm.m, in.gemm.n, in.gemm.k);
    if (in.kind == Kind::kAttention) {
      const auto& at = in.attention;
      const double d = std::max(at.d_qk, at.d_v);
      w.gemm(at.sq, at.sk, d);
      w.gemm(at.sk, d, at.sq);
      w.gemm(at.sq, d, at.sk);
    }
    if (in.kind == Kind::kCollective) w.collective_bytes = std::max(w.collective_bytes, in.bytes);
    if (in.kind == Kind::kSend || in.kind == Kind::kRecv) w.p2p_bytes = std::max(w.p2p_bytes, in.bytes);
  }
  return w;
}

double program_peak_bytes(const Program& p) {
  std::vector<double> size(static_cast<size_t>(p.buffers), 0.0);
  double live = 0, peak = 0;
  for (const auto& in : p.step) {
    if (in.kind == Kind::kAlloc) {
      size[static_cast<size_t>(in.buffer)] = in.bytes;
      live += in.bytes;
      peak = std::max(peak, live);
    } else if (in.kind == Kind::kFree) {
      live -= size[static_cast<size_t>(in.buffer)];
    }
  }
  return p.state_bytes() + peak;
}

}  // namespace stepcast::validate
