#include "sim/estimate/estimate.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <utility>

#include "sim/core/error.hpp"
#include "sim/cost/collectives.hpp"
#include "sim/cost/compute.hpp"
#include "sim/engine/schedule.hpp"
#include "sim/estimate/workload.hpp"

namespace stepcast::estimate {

using core::Bytes;
using core::Duration;
using cost::Collective;

double model_flops_per_step(const config::RunConfig& rc) {
  const auto& m = rc.model;
  // A packed sequence's attention runs per document (training.packed_document_tokens).
  const double s = static_cast<double>(rc.training.attention_span());
  const double tokens = static_cast<double>(rc.tokens_per_step());
  const double d_qk = m.mla.enabled() ? static_cast<double>(m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim)
                                      : static_cast<double>(m.head_dim);
  const double d_v = m.mla.enabled() ? static_cast<double>(m.mla.v_head_dim) : static_cast<double>(m.head_dim);
  double sk = s;
  if (const double keys = m.local_keys_per_query(rc.training.attention_span()); keys > 0) {
    // A local layer's query sees `keys` keys on average instead of ~s/2.
    sk = s * (1.0 - m.sliding_layer_fraction) + 2.0 * keys * m.sliding_layer_fraction;
  }
  // Causal attention forward per token and layer: heads * (d_qk + d_v) * sk FLOPs (QK^T + PV
  // at 2 FLOPs per MAC over sk/2 keys on average); x3 for forward + backward.
  const double attn = 3.0 * static_cast<double>(m.heads) * (d_qk + d_v) * sk * static_cast<double>(m.num_attention_layers());
  // Mamba-2 layers: their projections are in 6N; the scan counts 7 d_inner N FLOPs per token
  // forward (Megatron-LM's hybrid-model FLOPs), x3 for forward + backward.
  const double ssm = 3.0 * 7.0 * static_cast<double>(m.mamba.d_inner()) * static_cast<double>(m.mamba.state) *
                     static_cast<double>(m.num_mamba_layers());
  // Gated DeltaNet layers: the recurrent form's state update and read-out, 6 k_dim v_dim per
  // token and value head forward, x3.
  const double linear = 3.0 * 6.0 * static_cast<double>(m.linear.v_heads * m.linear.k_dim * m.linear.v_dim) *
                        static_cast<double>(m.num_linear_layers());
  // Multi-token prediction: per module one more layer (attention term included), the 2h -> h
  // projection and another pass through the output head (Megatron counts them the same way).
  const double mtp = static_cast<double>(rc.training.mtp_layers);
  // LoRA: the frozen weights' forward and input-gradient GEMMs, 4 FLOPs per parameter and token
  // (no weight gradient); the adapters' forward and backward 6; the attention, SSM and
  // recurrent terms in full (their backward carries the input gradient).
  const bool lora = rc.training.lora.enabled();
  const double per_param = lora ? 4.0 : 6.0;
  const double mtp_flops = mtp * (per_param * (m.mtp_layer_active_params() + static_cast<double>(m.vocab * m.hidden)) +
                                  attn / static_cast<double>(std::max<int64_t>(1, m.num_attention_layers())));
  const double adapters = lora ? 6.0 * memory::lora_model_params(rc) : 0.0;
  return tokens * (per_param * m.flop_params() + adapters + attn + ssm + linear + mtp_flops);
}

Duration sharded_collective_time(Collective c, Bytes bytes, const mesh::Placement& shard, const mesh::Placement& replicate,
                                 const hw::HardwareProfile& hw) {
  Duration t = cost::collective_time(c, bytes, shard, hw);
  if (c == Collective::kReduceScatter && replicate.size > 1) {
    t += cost::collective_time(Collective::kAllReduce, bytes / static_cast<double>(std::max<int64_t>(1, shard.size)), replicate, hw);
  }
  return t;
}

namespace {

// Time to reduce `bytes` of gradients in DDP buckets: the first bucket 1 MB, the rest
// bucket_mb, each its own collective (so each pays the latency floor).
struct BucketPlan {
  Duration total, last;
  double count = 0;  // collectives
};

BucketPlan bucketed(Collective c, double bytes, double bucket_bytes, const mesh::Placement& where,
                    const mesh::Placement& replicate, const hw::HardwareProfile& hw, double first_bytes = 1e6) {
  BucketPlan plan;
  if (where.size <= 1 || bytes <= 0) return plan;
  const double first = std::min(bytes, first_bytes);
  plan.total += sharded_collective_time(c, Bytes(first), where, replicate, hw);
  plan.count = 1;
  double rest = bytes - first;
  plan.last = plan.total;
  if (rest > 0) {
    const double full = std::floor(rest / bucket_bytes);
    const double rem = rest - full * bucket_bytes;
    if (full > 0) {
      const Duration tb = sharded_collective_time(c, Bytes(bucket_bytes), where, replicate, hw);
      plan.total += tb * full;
      plan.count += full;
      plan.last = tb;
    }
    if (rem > 0) {
      const Duration tr = sharded_collective_time(c, Bytes(rem), where, replicate, hw);
      plan.total += tr;
      plan.count += 1;
      plan.last = std::max(plan.last, tr);
    }
  }
  return plan;
}

// The buckets of stage s as the bucket layout forms them: PyTorch DDP's (above) or
// Megatron-Core's, where only the first stage's first chunk is bucketed (no small first
// bucket) and every other chunk is reduced in one piece.
BucketPlan stage_buckets(Collective c, double bytes, double bucket_bytes, const mesh::Placement& where,
                         const mesh::Placement& replicate, const hw::HardwareProfile& hw, const config::Parallel& p,
                         int64_t s) {
  if (p.bucket_layout != config::BucketLayout::kMegatron) return bucketed(c, bytes, bucket_bytes, where, replicate, hw);
  BucketPlan plan;
  if (where.size <= 1 || bytes <= 0) return plan;
  const double v = static_cast<double>(std::max<int64_t>(1, p.vpp));
  const Duration whole = sharded_collective_time(c, Bytes(bytes / v), where, replicate, hw);
  if (s > 0) {
    plan.total = whole * v;
    plan.count = v;
    plan.last = whole;
    return plan;
  }
  plan = bucketed(c, bytes / v, bucket_bytes, where, replicate, hw, bucket_bytes);
  plan.total += whole * (v - 1.0);
  plan.count += v - 1.0;
  return plan;
}

// The W passes that end a split-backward stage's order back to back (its held-back ones).
double trailing_weight_passes(config::Schedule sched, int64_t pp, int64_t stage, int64_t m, int64_t v) {
  // The cool-down's length does not grow past a few rounds of pp micro-batches.
  const auto mm = static_cast<int32_t>(std::min<int64_t>(m, 4 * pp));
  double n = 0;
  engine::for_each_action(sched, static_cast<int32_t>(pp), static_cast<int32_t>(stage), mm, static_cast<int32_t>(v),
                          [&](const engine::Action& a) { n = a.phase == engine::Phase::kW ? n + 1.0 : 0.0; });
  return n;
}

// A pipeline played out from the stages' own orders (the interleaved schedule and the V
// schedules, ZB-V and DualPipeV): a stage runs its passes one at a time; a forward waits for the
// previous virtual stage's forward of its micro-batch, an input-gradient pass for the next
// virtual stage's (the last one's for its own forward), a weight-gradient pass for its
// input-gradient pass. Each pass takes its virtual stage's forward, input-gradient and
// weight-gradient time per micro-batch (arrays over virtual stages, pipeline order), so virtual
// stages of unequal cost (a split by cost, the embedding on the first, the output layer on the
// last) pace the fill and the drain as they do in the timeline. The order repeats once 4p
// micro-batches have started (2p for the interleaved order, whose warm-up is shorter), so a
// longer run adds the slowest stage's whole pass time per further micro-batch. Also how long before the end each stage finishes (with few micro-batches
// the later stages end early, the chunk-0 input gradients still to pass down), and under a V
// how much of each stage's work follows its last chunk-1 weight-gradient pass (the compute that
// chunk 1's gradient reduction runs beside; chunk 0's gradients become final at the end).
struct PlayedPipeline {
  double time = 0;
  std::vector<double> finished_early;
  std::vector<double> after_chunk1;
};
PlayedPipeline played_pipeline(const config::Parallel& par, const std::vector<double>& fwd, const std::vector<double>& bwd_input,
                               const std::vector<double>& wgt, const std::vector<double>& stage_total, int64_t m) {
  const auto p = static_cast<int32_t>(par.pp);
  const auto v = static_cast<int32_t>(par.vpp);
  // Whole rounds of p micro-batches (the interleaved order groups them so), past the warm-up.
  const int64_t cap = (par.schedule == config::Schedule::kInterleaved ? 2 : 4) * static_cast<int64_t>(p);
  const auto mm = static_cast<int32_t>(std::min<int64_t>(m, cap));
  const int32_t vstages = p * v;
  // The stages' orders depend only on (schedule, p, micro-batches, v): built once per thread.
  thread_local std::map<std::tuple<int, int32_t, int32_t, int32_t>, std::vector<std::vector<engine::Action>>> orders;
  auto& order = orders[{static_cast<int>(par.schedule), p, mm, v}];
  if (order.empty()) {
    order.resize(static_cast<size_t>(p));
    for (int32_t s = 0; s < p; ++s) order[static_cast<size_t>(s)] = engine::stage_order(par.schedule, p, s, mm, v);
  }
  constexpr double kNotYet = -1.0;
  const auto cells = static_cast<size_t>(vstages) * static_cast<size_t>(mm);
  std::vector<double> f_done(cells, kNotYet), b_done(cells, kNotYet);
  auto at = [mm](int32_t vs, int32_t mb) { return static_cast<size_t>(vs) * static_cast<size_t>(mm) + static_cast<size_t>(mb); };
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<double> clock(static_cast<size_t>(p), 0.0), chunk1_done(static_cast<size_t>(p), 0.0);
  size_t left = 0;
  for (const auto& o : order) left += o.size();
  while (left > 0) {
    size_t ran = 0;
    for (int32_t s = 0; s < p; ++s) {
      const auto su = static_cast<size_t>(s);
      while (next[su] < order[su].size()) {
        const engine::Action& a = order[su][next[su]];
        const auto vs = static_cast<int32_t>(par.vstage(s, a.chunk));
        const auto vu = static_cast<size_t>(vs);
        double ready = 0;
        if (a.phase == engine::Phase::kF) {
          ready = vs > 0 ? f_done[at(vs - 1, a.mb)] : 0.0;
        } else if (engine::is_backward(a.phase)) {
          ready = vs < vstages - 1 ? b_done[at(vs + 1, a.mb)] : f_done[at(vs, a.mb)];
        } else {
          ready = b_done[at(vs, a.mb)];
        }
        if (ready < 0) break;
        const double cost = a.phase == engine::Phase::kF    ? fwd[vu]
                            : a.phase == engine::Phase::kB  ? (par.split_backward() ? bwd_input[vu] : bwd_input[vu] + wgt[vu])
                            : a.phase == engine::Phase::kBW ? bwd_input[vu] + wgt[vu]
                                                            : wgt[vu];
        clock[su] = std::max(clock[su], ready) + cost;
        if (a.phase == engine::Phase::kF) f_done[at(vs, a.mb)] = clock[su];
        if (engine::is_backward(a.phase)) b_done[at(vs, a.mb)] = clock[su];
        if ((a.phase == engine::Phase::kW || a.phase == engine::Phase::kBW) && a.chunk == 1) chunk1_done[su] = clock[su];
        ++next[su];
        ++ran;
      }
    }
    if (ran == 0) throw core::InternalError("the pipeline's pass orders wait on each other");
    left -= ran;
  }
  const double slowest = *std::max_element(stage_total.begin(), stage_total.end());
  const double end = *std::max_element(clock.begin(), clock.end());
  PlayedPipeline out{end + static_cast<double>(m - mm) * slowest, {}, {}};
  for (size_t s = 0; s < clock.size(); ++s) {
    out.finished_early.push_back(end - clock[s]);
    out.after_chunk1.push_back(clock[s] - chunk1_done[s]);
  }
  return out;
}

}  // namespace

StageCost stage_cost(const config::RunConfig& rc, const WorkloadBuilder& wb, int64_t stage) {
  StageCost c;
  auto add = [&](const LayerCost& lc) {
    c.fwd += lc.fwd_time().value();
    c.bwd += lc.bwd_time().value();
    c.bwd_weight += lc.bwd_weight_compute.value();
    c.compute += (lc.fwd_compute + lc.bwd_compute).value();
    c.recompute += lc.recompute.value();
    c.host += lc.host.value();
    c.tp += lc.tp_exposed.value();
    c.cp += lc.cp_exposed.value();
    c.ep += lc.ep_exposed.value();
    c.fwd_nic += lc.fwd_exposed_nic_comm.value();
    c.bwd_nic += lc.bwd_exposed_nic_comm.value();
    c.tp_nic += lc.tp_exposed_nic.value();
    c.cp_nic += lc.cp_exposed_nic.value();
    c.ep_nic += lc.ep_exposed_nic.value();
    c.hardware_flops += lc.hardware_flops.value();
    c.model_flops += lc.model_flops.value();
  };
  // The kernel in flight over the transformer layers, time-weighted: the kernel a random moment
  // of their passes falls in.
  double fwd_compute = 0, bwd_compute = 0;
  rc.for_each_stage_layer(stage, [&](int64_t l) {
    const LayerCost& lc = wb.layer(l);
    add(lc);
    fwd_compute += lc.fwd_compute.value();
    bwd_compute += lc.bwd_compute.value();
    c.fwd_kernel += lc.fwd_kernel.value() * lc.fwd_compute.value();
    c.bwd_kernel += lc.bwd_kernel.value() * lc.bwd_compute.value();
  });
  c.fwd_kernel = fwd_compute > 0 ? c.fwd_kernel / fwd_compute : 0.0;
  c.bwd_kernel = bwd_compute > 0 ? c.bwd_kernel / bwd_compute : 0.0;
  if (stage == 0) add(wb.embedding());
  if (stage == rc.parallel.head_stage()) add(wb.output_layer());
  return c;
}

std::optional<TiedEmbeddingSync> tied_embedding_sync(const config::RunConfig& rc) {
  const auto& p = rc.parallel;
  if (!rc.model.tied_embeddings || p.pp <= 1 || p.head_stage() == 0 || rc.training.lora.enabled() || p.effective_zero() >= 3) {
    return std::nullopt;
  }
  TiedEmbeddingSync t;
  t.bytes = static_cast<double>(rc.padded_vocab) * static_cast<double>(rc.model.hidden) / static_cast<double>(p.tp) *
            memory::state_bytes(rc.training).gradients;
  t.pair = mesh::place({0, p.head_stage() * p.tp * p.cp * p.dp}, rc.cluster.gpus_per_node);
  return t;
}

double optimizer_time_s(const config::RunConfig& rc, const memory::StageMemory& st) {
  const auto& p = rc.parallel;
  const memory::StateBytes sb = memory::state_bytes(rc.training);
  const int zero = p.effective_zero();
  const double shard_dense = zero >= 1 ? static_cast<double>(std::max<int64_t>(1, p.shard_group())) : 1.0;
  const double n_edp = static_cast<double>(p.expert_shard_group());
  const double local = st.trainable_dense_params / shard_dense + st.trainable_expert_params / (zero >= 1 ? n_edp : 1.0);
  // Read master, moments and gradient; write master, moments and the 16-bit weights. Without a
  // separate master copy the weights are the master: read and written.
  const bool master = rc.training.master_weights && rc.training.precision != hw::Dtype::kFp32 &&
                      rc.training.param_dtype != hw::Dtype::kFp32;
  if (p.offload != config::Offload::kNone) {
    // CPU offload: the node's GPUs step their shards on the host CPUs at once, each reading
    // master, moments and an fp32 gradient and writing them and the 16-bit weights; with the
    // optimizer alone offloaded the updated weights go up tile by tile beside the CPU step,
    // loading the same host memory. (The gradient shards went down during the backward, after
    // their reductions.) Offloaded parameters stay on the host: the gathers copy them up.
    const auto& host = rc.hardware.host;
    const double node = local * static_cast<double>(std::min<int64_t>(rc.cluster.num_gpus, rc.cluster.gpus_per_node));
    const bool optimizer_only = p.offload == config::Offload::kOptimizer;
    const double cpu_bytes = 2.0 * sb.optimizer + 4.0 + sb.weights * (master ? 1.0 : 2.0);
    const double dma_bytes = optimizer_only ? sb.weights : 0.0;
    double cpu = node * (cpu_bytes + dma_bytes) / (host.memory_bandwidth.value() * host.memory_efficiency);
    if (host.optimizer_rate > 0) cpu = std::max(cpu, node / host.optimizer_rate);
    if (!optimizer_only) return cpu;
    // ZeRO-1/2 with nothing to reduce (one data-parallel rank): the gradients go down after the
    // backward, before the CPU step.
    const double down = zero < 3 && p.dp * p.cp == 1 ? local * sb.gradients / host.link.value() : 0.0;
    return down + std::max(cpu, local * sb.weights / host.link.value());
  }
  const double bytes = local * (2.0 * sb.optimizer + sb.gradients + sb.weights * (master ? 1.0 : 2.0));
  const double rate = rc.hardware.efficiency.optimizer_rate;
  const double compute = rate > 0 ? local / rate : 0.0;
  return std::max(cost::memory_time(Bytes(bytes), rc.hardware).value(), compute) + 20.0 * rc.hardware.efficiency.kernel_overhead.value();
}

StepEstimate estimate_step(const config::RunConfig& rc) { return estimate_step(rc, memory::compute_ledger(rc)); }

StepEstimate estimate_step(const config::RunConfig& rc, memory::MemoryLedger ledger) {
  return estimate_step(rc, std::move(ledger), nullptr);
}

StepEstimate estimate_step(const config::RunConfig& rc, memory::MemoryLedger ledger, WorkloadCache* cache) {
  const auto& p = rc.parallel;
  const auto& hw = rc.hardware;
  const double slow = hw.collective_slowdown();
  const WorkloadBuilder wb(rc, cache);
  StepEstimate out;
  out.memory = std::move(ledger);
  const memory::StateBytes sb = memory::state_bytes(rc.training);
  const int zero = p.effective_zero();
  const double m = static_cast<double>(rc.num_microbatches);
  const int64_t pp = p.pp;
  const auto& places = wb.placements();

  std::vector<double> t_stage(static_cast<size_t>(pp)), w_stage(static_cast<size_t>(pp));
  std::vector<double> compute_stage(static_cast<size_t>(pp)), recompute_stage(static_cast<size_t>(pp)),
      host_stage(static_cast<size_t>(pp));
  // Per-step ZeRO-3 exposure of unsharded parameters: each stage's first forward, last backward.
  std::vector<double> once_fill(static_cast<size_t>(pp), 0.0), once_drain(static_cast<size_t>(pp), 0.0);
  // Per micro-batch: the part of a stage's exposed ZeRO-3 time that only its gradient
  // reductions cause (they delay no other stage, so the fill and drain do not pay it).
  std::vector<double> reduce_only(static_cast<size_t>(pp), 0.0);
  std::vector<double> tp_stage(static_cast<size_t>(pp)), cp_stage(static_cast<size_t>(pp)),
      ep_stage(static_cast<size_t>(pp)), fsdp_stage(static_cast<size_t>(pp)), offload_stage(static_cast<size_t>(pp));
  out.stage_fwd_s.assign(static_cast<size_t>(pp), 0);
  out.stage_bwd_s.assign(static_cast<size_t>(pp), 0);
  double hardware_flops_mb = 0;
  double model_flops_mb = 0;
  // A collective issued beside compute on a stream of equal priority waits for the compute
  // kernel in flight to hand out its SMs; the last of its n participants about n / (n + 1) of
  // that kernel (the simulated timeline's kernel wait).
  const bool kernel_waits = rc.comm_waits_for_kernels();
  auto kernel_wait = [&](double kernel, const mesh::Placement& where) {
    const double n = static_cast<double>(where.size);
    return kernel_waits && n > 1 ? kernel * n / (n + 1.0) : 0.0;
  };
  std::vector<double> fwd_kernel(static_cast<size_t>(pp)), bwd_kernel(static_cast<size_t>(pp));
  for (int64_t s = 0; s < pp; ++s) {
    const auto& st = out.memory.stages[static_cast<size_t>(s)];
    const StageCost sc = stage_cost(rc, wb, s);
    double f = sc.fwd, b = sc.bwd, fsdp = 0, nic_stretch = 0;
    const double w = sc.bwd_weight, comp = sc.compute, rec = sc.recompute;
    double tp = sc.tp, cpx = sc.cp, epx = sc.ep;
    hardware_flops_mb += sc.hardware_flops;
    model_flops_mb += sc.model_flops;
    fwd_kernel[static_cast<size_t>(s)] = sc.fwd_kernel;
    bwd_kernel[static_cast<size_t>(s)] = sc.bwd_kernel;
    if (p.activation_offload_layers > 0 && st.layers > 0) {
      // Activation offload: an offloaded layer's copy to the host runs beside the next layer's
      // forward, its copy back beside the next layer's backward (double-buffered); what a copy
      // outlasts that layer by holds the compute stream.
      const memory::OffloadedActivations off = memory::offloaded_activations(rc, s);
      const double n_off = static_cast<double>(off.layers);
      const double copy = off.layers > 0 ? off.bytes.value() / n_off / hw.host.link.value() : 0.0;
      const double L = static_cast<double>(st.layers);
      const double off_f = n_off * std::max(0.0, copy - f / L), off_b = n_off * std::max(0.0, copy - b / L);
      f += off_f;
      b += off_b;
      offload_stage[static_cast<size_t>(s)] = off_f + off_b;
    }

    // ZeRO-3 / FSDP: per-layer parameter gathers and gradient reduce-scatters on their own
    // streams, one layer ahead of the compute that uses them.
    // (Offloaded state is copied per layer even without a group to gather over.)
    if (zero >= 3 && (p.dp * p.cp > 1 || p.offload != config::Offload::kNone) && st.layers > 0) {
      const double L = static_cast<double>(st.layers);
      // A layer's dense parameters go over the ZeRO-3 group, its routed experts over the
      // expert-data-parallel group they are sharded on, one collective after the other.
      const double layer_dense = st.dense_params / L, layer_expert = st.expert_params / L;
      // The reduce-scatters carry the gradients of what trains (under LoRA the adapters alone).
      const double grad_dense = st.trainable_dense_params / L, grad_expert = st.trainable_expert_params / L;
      const double gather_bytes = hw::bytes_per_element(rc.training.gather_dtype);
      const double reduce_bytes = hw::bytes_per_element(rc.training.reduce_dtype);
      // Gathers carry QLoRA's quantized layer weights packed (StageMemory::gathered_bytes).
      auto unit_time = [&](Collective op, double bytes_per_param) {
        const bool up = op == Collective::kAllGather;
        const double d = up ? layer_dense : grad_dense, x = up ? layer_expert : grad_expert;
        if (d <= 0 && x <= 0) return 0.0;
        const double db = up ? st.gathered_bytes(d, bytes_per_param) : d * bytes_per_param;
        const double xb = up ? st.gathered_bytes(x, bytes_per_param, true) : x * bytes_per_param;
        double t = sharded_collective_time(op, Bytes(db), places.zero3, places.dp_replicate, hw).value();
        if (x > 0) t += sharded_collective_time(op, Bytes(xb), places.edp, places.edp_replicate, hw).value();
        return t;
      };
      // CPU offload: each reduce-scatter copies its gradient shard down to the host after it,
      // and with offloaded parameters each gather first copies the rank's shard up, on the
      // same stream.
      const double shard = layer_dense / static_cast<double>(places.zero3.size) + layer_expert / static_cast<double>(places.edp.size);
      const double grad_shard = grad_dense / static_cast<double>(places.zero3.size) + grad_expert / static_cast<double>(places.edp.size);
      const double up = p.offload == config::Offload::kParams ? shard * sb.weights / hw.host.link.value() : 0.0;
      const double down = p.offload != config::Offload::kNone ? grad_shard * sb.gradients / hw.host.link.value() : 0.0;
      const double ag = unit_time(Collective::kAllGather, gather_bytes) + up;
      const double rs = unit_time(Collective::kReduceScatter, reduce_bytes) + down;
      // Each of a layer's collectives (dense, then experts) beside a pass waits for its kernel.
      const double units = layer_expert > 0 ? 2.0 : 1.0;
      const double wf = units * kernel_wait(sc.fwd_kernel, places.zero3);
      const double wb = units * kernel_wait(sc.bwd_kernel, places.zero3);
      // The share of the stage's layers whose recomputed forward gathers again.
      double regathered = 0;
      if (p.zero3_recompute_regather) {
        rc.for_each_stage_layer(s, [&](int64_t l) { regathered += rc.full_recompute_layer(l) ? 1.0 : 0.0; });
        regathered /= L;
      }
      // The gathers slow only the compute they run beside: the share of the layer's time that
      // is exposed TP / CP / EP communication carries them for free.
      const double busy = f + b;
      const double slow_here = busy > 0 ? slow * std::clamp(comp / busy, 0.0, 1.0) : slow;
      // Traffic that crosses the NIC shares it with the exposed communication that crosses it
      // too (expert all-to-alls, context-parallel exchanges, TP groups that leave the node): it
      // hides behind compute and on-node communication only.
      const bool on_nic = !places.zero3.intra_node();
      double f_win = std::max(0.0, f - (on_nic ? sc.fwd_nic : 0.0));
      double b_win = std::max(0.0, b - (on_nic ? sc.bwd_nic : 0.0));
      double exp_f = 0, exp_b = 0;
      // Gathers per layer in backward: again when the forward resharded (and once more for a
      // recomputed forward that regathers); none when the weights stay gathered from the
      // forward (a single micro-batch without resharding), as in the timeline.
      const double bwd_gathers = p.reshard_after_forward ? 1.0 + regathered : 0.0;
      if (p.reshard_after_forward || m <= 1.0) {
        // Every micro-batch gathers in forward and again in backward and reduce-scatters. The
        // gathers run one layer ahead of the compute, so within a pass a layer's traffic hides
        // behind its neighbours' compute (the pass is exposed where its traffic outlasts it),
        // but a forward's gathers cannot wait for the backward. In backward the gathers and the
        // reduce-scatters run on two streams at once and share the rank's link (its NIC, or its
        // port into the node fabric), as in the simulated timeline. The step's first gather and
        // last reduce-scatter have nothing to hide behind.
        const auto& where = places.zero3;
        const double link = on_nic ? hw.nic_bandwidth_per_gpu().value() : hw.fabric_port_bandwidth(rc.cluster.gpus_per_node).value();
        auto unit_link = [&](Collective op, double bytes_per_param) {
          const bool up = op == Collective::kAllGather;
          const double d = up ? layer_dense : grad_dense, x = up ? layer_expert : grad_expert;
          double b = cost::link_bytes(op, Bytes(d * bytes_per_param), where);
          if (x > 0) b += cost::link_bytes(op, Bytes(x * bytes_per_param), places.edp);
          return b / link;
        };
        // Hybrid sharding: each reduced shard's all-reduce across the replicas loads the link
        // the replicate group crosses: the shard traffic's own link when both leave the node
        // (or both stay inside it), otherwise a link of its own beside it.
        double replicate_link = 0;
        if (places.dp_replicate.size > 1) {
          auto replicas = [&](double params, const mesh::Placement& shard, const mesh::Placement& rp) {
            const double bytes = cost::link_bytes(Collective::kAllReduce, Bytes(params * reduce_bytes / static_cast<double>(shard.size)), rp);
            return bytes / (rp.intra_node() ? hw.fabric_port_bandwidth(rc.cluster.gpus_per_node) : hw.nic_bandwidth_per_gpu()).value();
          };
          replicate_link = replicas(grad_dense, where, places.dp_replicate);
          if (grad_expert > 0) replicate_link += replicas(grad_expert, places.edp, places.edp_replicate);
        }
        const bool same_link = places.dp_replicate.intra_node() == where.intra_node();
        // Whether a micro-batch's backward runs as an input-gradient pass and a later
        // weight-gradient pass. DualPipeV splits only the few backwards that fill its cool-down
        // and runs the rest whole, paired with another micro-batch's forward, so its
        // per-micro-batch traffic is that of a whole backward.
        const bool split_passes = p.split_backward() && p.schedule != config::Schedule::kDualPipeV;
        const double ag_link = unit_link(Collective::kAllGather, gather_bytes);
        const double rs_link = unit_link(Collective::kReduceScatter, reduce_bytes) + (same_link ? replicate_link : 0.0);
        const double own_link = same_link ? 0.0 : replicate_link;
        if (on_nic && sc.fwd_nic + sc.bwd_nic > 0) {
          // The collectives that run beside a pass are issued as their layers come up, not
          // fitted into its compute: they are on the NIC for a share u of the pass, and an
          // exchange on the compute stream that crosses the NIC too (expert all-to-all, context-
          // parallel or inter-node TP traffic) shares it with them, at half rate while both run,
          // so it runs (1 + u) times as long (as the timeline's max-min shared links give).
          // Under ZB-H1 the reduce-scatters run in the W pass, which has no exchanges, and what
          // outlasts it spills into the next forward: the backward's share counts its gathers
          // over the input-gradient pass only, the forward's its gathers and that spill.
          const bool zb_split = split_passes && p.param_gather_overlap && p.grad_reduce_overlap;
          double f_traffic = p.param_gather_overlap ? L * ag_link : 0.0;
          double b_traffic = L * ((p.param_gather_overlap ? ag_link * bwd_gathers : 0.0) + (p.grad_reduce_overlap ? rs_link : 0.0));
          double b_pass = b;
          if (zb_split) {
            const double spill = std::max(0.0, L * rs - w);
            f_traffic += rs > 0 ? spill * rs_link / rs : 0.0;
            b_traffic = L * ag_link * bwd_gathers;
            b_pass = b - w;
          }
          const double stretch_f = f > 0 ? sc.fwd_nic * std::min(1.0, f_traffic / f) : 0.0;
          const double stretch_b = b_pass > 0 ? sc.bwd_nic * std::min(1.0, b_traffic / b_pass) : 0.0;
          nic_stretch = stretch_f + stretch_b;
          f += stretch_f;
          b += stretch_b;
          f_win += stretch_f;
          b_win += stretch_b;
        }
        if (!p.param_gather_overlap || !p.grad_reduce_overlap) {
          // In line (no prefetch, or reduce-scatters that block): those collectives add to the
          // pass in full; the others still hide behind its compute.
          const bool ag_in = !p.param_gather_overlap, rs_in = !p.grad_reduce_overlap;
          exp_f = ag_in ? L * ag : beside_compute(L * ag, f_win, slow_here, L * wf) + ag / m;
          exp_b = (ag_in ? L * ag * bwd_gathers : beside_compute(L * ag * bwd_gathers, b_win, slow_here, L * wb * bwd_gathers)) +
                  (rs_in ? L * rs : beside_compute(L * rs, b_win, slow_here, L * wb) + rs / m);
        } else if (split_passes) {
          // A split backward makes a layer's gradient final in its weight-gradient pass: the
          // gathers run beside the input-gradient pass, the reduce-scatters start in the W pass
          // and what outlasts it spills into the next forward, sharing the link with its gathers.
          const double spill = std::max(0.0, L * rs - w);
          const double spill_link = rs > 0 ? spill * rs_link / rs : 0.0;
          auto forward_exposure = [&](double traffic) {
            return beside_compute(traffic, f_win, slow_here, std::max(0.0, L * (ag + wf) - traffic)) + ag / m;
          };
          exp_f = forward_exposure(std::max(L * ag, L * ag_link + spill_link));
          exp_b = beside_compute(L * ag * bwd_gathers, std::max(0.0, b_win - w), slow_here, L * wb * bwd_gathers) +
                  std::min(L * rs, w) * slow_here + rs / m;
          // The reduction stream takes a micro-batch's reductions in turn, whatever links they
          // cross (a hybrid-sharded replica all-reduce on the NIC follows each reduce-scatter):
          // in the steady state a micro-batch's passes last at least that long.
          const double behind = std::max(0.0, L * rs - (f + b + exp_f + exp_b));
          exp_f += behind;
          // The stage's order ends on back-to-back W passes with no forward to spill into:
          // their spill trails the stage in full, less what each micro-batch's forward was
          // already charged for it and what the stream-bound cycles already added.
          const double charged = std::max(0.0, exp_f - forward_exposure(std::max(L * ag, L * ag_link)));
          const double passes = trailing_weight_passes(p.schedule, pp, s, static_cast<int64_t>(m), p.vpp);
          const double per_pass = 1.0 / static_cast<double>(p.vpp);  // a chunk's share under ZB-V
          once_drain[static_cast<size_t>(s)] = std::max(0.0, passes * per_pass * std::max(0.0, spill - charged) - m * behind);
        } else {
          exp_f = beside_compute(L * ag, f_win, slow_here, L * wf) + ag / m;
          const double bwd_traffic = std::max({L * ag * bwd_gathers, L * rs, L * (ag_link * bwd_gathers + rs_link), L * own_link});
          // The two streams wait for kernels side by side.
          const double bwd_busy = std::max({L * (ag + wb) * bwd_gathers, L * (rs + wb), bwd_traffic});
          // Reductions that outlast a backward go on beside the next micro-batch's forward: the
          // reduction stream through the whole forward (its gathers' exposed wait included), its
          // traffic on the gathers' link in the link time they leave free. The last
          // micro-batch's reductions have no forward after them.
          const double spare_f = std::max(0.0, f_win - L * ag_link);
          const double shared = std::max(L * ag * bwd_gathers, L * (ag_link * bwd_gathers + rs_link));
          const double stream = std::max(L * rs, L * own_link);
          const double spilled = std::max(beside_compute(shared, b_win + spare_f, slow_here, bwd_busy - bwd_traffic),
                                          beside_compute(stream, b_win + f_win + exp_f, slow_here, bwd_busy - bwd_traffic));
          const double kept = beside_compute(bwd_traffic, b_win, slow_here, bwd_busy - bwd_traffic);
          exp_b = ((m - 1.0) * spilled + kept) / m + rs / m;
          // What the reductions add beyond the backward's own gathers holds the compute stream
          // back only in the steady state. Nothing downstream waits for a reduction, so in the
          // pipeline's drain the backward waits only for its gathers, which share the link
          // max-min with the reductions still queued (at half its rate at most) while the
          // reductions run on in the stage's idle time.
          const double g_link = L * ag_link * bwd_gathers;
          const double gathers = std::max(L * ag * bwd_gathers, std::min(g_link + L * rs_link, 2.0 * g_link));
          const double gathers_only = beside_compute(gathers, b_win, slow_here, L * wb * bwd_gathers);
          reduce_only[static_cast<size_t>(s)] = std::max(0.0, exp_b - gathers_only);
        }
        fsdp = exp_f + exp_b;
        f += exp_f;
        b += exp_b;
      } else {
        // Unsharded between micro-batches: one gather per layer during the stage's first forward
        // and one reduce-scatter per layer during its last backward, each beside that layer's
        // compute: once per step (below), not per micro-batch.
        once_fill[static_cast<size_t>(s)] = p.param_gather_overlap ? beside_compute(ag, f_win / L, slow_here, wf) * L + ag : L * ag;
        once_drain[static_cast<size_t>(s)] = p.grad_reduce_overlap ? beside_compute(rs, b_win / L, slow_here, wb) * L + rs : L * rs;
      }
    }
    if (const double nic = sc.tp_nic + sc.cp_nic + sc.ep_nic; nic_stretch > 0 && nic > 0) {
      // Booked as the exchanges' own time, split over the kinds as their NIC-crossing parts.
      tp += nic_stretch * sc.tp_nic / nic;
      cpx += nic_stretch * sc.cp_nic / nic;
      epx += nic_stretch * sc.ep_nic / nic;
    }
    out.stage_fwd_s[static_cast<size_t>(s)] = f;
    out.stage_bwd_s[static_cast<size_t>(s)] = b;
    t_stage[static_cast<size_t>(s)] = f + b;
    w_stage[static_cast<size_t>(s)] = w;
    compute_stage[static_cast<size_t>(s)] = comp;
    recompute_stage[static_cast<size_t>(s)] = rec;
    host_stage[static_cast<size_t>(s)] = sc.host;
    tp_stage[static_cast<size_t>(s)] = tp;
    cp_stage[static_cast<size_t>(s)] = cpx;
    ep_stage[static_cast<size_t>(s)] = epx;
    fsdp_stage[static_cast<size_t>(s)] = fsdp;
  }

  // ---- pipeline ----
  const auto slowest = static_cast<size_t>(std::max_element(t_stage.begin(), t_stage.end()) - t_stage.begin());
  const double t_max = t_stage[slowest];
  double sum = 0;
  for (size_t s = 0; s < t_stage.size(); ++s) sum += t_stage[s] - reduce_only[s];
  sum += reduce_only[slowest];
  double scale = 1.0;
  if (p.schedule == config::Schedule::kInterleaved) scale = 1.0 / static_cast<double>(p.vpp);
  if (p.schedule == config::Schedule::kZbH1) {
    scale = std::max(0.0, (t_max - 2.0 * w_stage[slowest]) / t_max);
  }
  double pipe_compute = m * t_max + (sum - t_max) * scale;
  // How long before the pipeline's end each stage finishes under a split backward (ZB-V and
  // DualPipeV as their played-out orders end; ZB-H1 stage s after the input-gradient chain back
  // to stage 0, less the s W passes it held back); 0 elsewhere. And, under a V, the compute
  // after each stage's last chunk-1 W (chunk 1's gradient reduction runs beside it).
  std::vector<double> ends_early(t_stage.size(), 0.0), v_after_chunk1(t_stage.size(), 0.0);
  if (p.v_shape() || p.schedule == config::Schedule::kInterleaved) {
    // Each stage's forward, input-gradient and weight-gradient time shared over its virtual
    // stages as their layers' (and the embedding's and output layer's) own costs share it.
    const int64_t V = pp * p.vpp;
    std::vector<double> fwd(static_cast<size_t>(V)), bwd_input(static_cast<size_t>(V)), wgt(static_cast<size_t>(V));
    std::vector<double> own_f(static_cast<size_t>(V), 0.0), own_b(static_cast<size_t>(V), 0.0), own_w(static_cast<size_t>(V), 0.0);
    for (int64_t vs = 0; vs < V; ++vs) {
      const auto vu = static_cast<size_t>(vs);
      auto add = [&](const LayerCost& lc) {
        own_f[vu] += lc.fwd_time().value();
        own_w[vu] += lc.bwd_weight_compute.value();
        own_b[vu] += lc.bwd_time().value() - lc.bwd_weight_compute.value();
      };
      for (int64_t k = 0; k < rc.vstage_layers[vu]; ++k) add(wb.layer(rc.vstage_first_layer[vu] + k));
      if (vs == 0) add(wb.embedding());
      if (vs == V - 1) add(wb.output_layer());
    }
    for (int64_t s = 0; s < pp; ++s) {
      const auto su = static_cast<size_t>(s);
      double sf = 0, sb = 0, sw = 0;
      for (int64_t c = 0; c < p.vpp; ++c) {
        const auto vu = static_cast<size_t>(p.vstage(s, c));
        sf += own_f[vu];
        sb += own_b[vu];
        sw += own_w[vu];
      }
      const double f_s = out.stage_fwd_s[su], w_s = w_stage[su], b_s = t_stage[su] - f_s - w_s;
      const double even = 1.0 / static_cast<double>(p.vpp);
      for (int64_t c = 0; c < p.vpp; ++c) {
        const auto vu = static_cast<size_t>(p.vstage(s, c));
        fwd[vu] = f_s * (sf > 0 ? own_f[vu] / sf : even);
        bwd_input[vu] = b_s * (sb > 0 ? own_b[vu] / sb : even);
        wgt[vu] = w_s * (sw > 0 ? own_w[vu] / sw : even);
      }
    }
    PlayedPipeline pl = played_pipeline(p, fwd, bwd_input, wgt, t_stage, static_cast<int64_t>(m));
    pipe_compute = pl.time;
    ends_early = std::move(pl.finished_early);
    if (p.v_shape()) v_after_chunk1 = std::move(pl.after_chunk1);
  }
  if (p.schedule == config::Schedule::kZbH1) {
    // With fewer micro-batches than stages the held-back weight-gradient work cannot fill the
    // cool-down: the step is the forward and input-gradient chain through every stage for the
    // first micro-batch, one F + B per further micro-batch, and stage 0's last W
    // ((m + p - 1)(F + B) + W for equal stages; equal to the form above at m = p).
    double chain = 0, fb_max = 0, drain = 0;
    for (size_t s = 0; s < t_stage.size(); ++s) {
      ends_early[s] = std::max(0.0, drain - std::min(static_cast<double>(s), m - 1.0) * w_stage[s]);
      drain += out.stage_bwd_s[s] - w_stage[s];
      chain += t_stage[s] - w_stage[s];
      fb_max = std::max(fb_max, t_stage[s] - w_stage[s]);
    }
    chain += (m - 1.0) * fb_max + w_stage[0];
    pipe_compute = std::max(pipe_compute, chain);
  }
  double p2p = 0;
  if (pp > 1) {
    const double tp2p = wb.p2p_time().value();
    // Posted asynchronously (interleaved, ZB-V, DualPipeV): only the fill's and the drain's
    // chains of hops wait for transfers; blocking sends cost every micro-batch. Blocking
    // send/receive pairs (pp_rendezvous) hold both ends: a stage with neighbours on both sides
    // spends its own two sends and its two receives per micro-batch on them.
    const double per_microbatch = p.pp_rendezvous && pp > 2 ? 4.0 : 2.0;
    p2p = p.schedule == config::Schedule::kInterleaved || p.v_shape()
              ? 2.0 * tp2p * static_cast<double>(pp - 1) * static_cast<double>(p.vpp)
              : per_microbatch * tp2p * (m + static_cast<double>(pp) - 2.0);
  }
  // Unsharded ZeRO-3 / FSDP parameters: each stage's one-time gathers lengthen its first
  // forward, which the pipeline's fill chains stage after stage; the reduce-scatters of the last
  // backward run on their own stream after it, so only the longest such tail extends the step
  // (a stage that ends early runs its trailing reductions while the later-ending stages work).
  double once = 0;
  for (size_t s = 0; s < t_stage.size(); ++s) once = std::max(once, once_drain[s] - ends_early[s]);
  for (double x : once_fill) once += x;
  const double bubble = pipe_compute - m * t_max;
  pipe_compute += once;
  const double t_pipe = pipe_compute + p2p;
  out.pipeline_time_s = t_pipe;

  // ---- data-parallel gradient sync ----
  double dp_exposed = 0;
  double param_gather = 0;
  if (zero < 3) {
    double end_max = t_pipe;
    double drain = 0;  // backward still to run on earlier stages after stage s finishes
    // Tied embeddings with the head off stage 0: the first stage (the last to finish) and the
    // head's stage all-reduce the embedding gradient after their reductions.
    double tied = 0;
    if (const auto sync = tied_embedding_sync(rc)) tied = cost::collective_time(Collective::kAllReduce, core::Bytes(sync->bytes), sync->pair, hw).value();
    for (int64_t s = 0; s < pp; ++s) {
      const auto& st = out.memory.stages[static_cast<size_t>(s)];
      const Collective grad_op = zero >= 1 ? Collective::kReduceScatter : Collective::kAllReduce;
      // Buckets hold whole tensors: one larger than bucket_mb makes its own bucket, so the
      // effective size is at least the largest tensor (of a dense layer, or an expert slice).
      double largest_dense = 0;
      const auto kinds = rc.model.mixed() ? rc.model.layer_kinds() : std::vector<model::LayerKind>{model::LayerKind{}};
      for (const auto& kind : kinds) {
        if (rc.training.lora.enabled()) {
          for (const auto& [in, out] : memory::lora_adapted_linears(rc, kind)) {
            largest_dense = std::max(largest_dense, static_cast<double>(rc.training.lora.rank) * std::max(in, out));
          }
          continue;
        }
        for (const double x : layer_tensors(rc, kind).dense) largest_dense = std::max(largest_dense, x);
      }
      const double bucket = std::max(p.bucket_mb * 1e6, largest_dense * sb.gradients);
      // The gradients of what trains (under LoRA the adapters alone).
      const double grad_dense = st.trainable_dense_params, grad_expert = st.trainable_expert_params;
      BucketPlan dense = stage_buckets(grad_op, grad_dense * sb.gradients, bucket, places.dp_cp, places.dp_replicate, hw, p, s);
      const double expert_bucket = grad_expert > 0 && st.layers > 0
                                       ? std::max(p.bucket_mb * 1e6, grad_expert / static_cast<double>(st.layers) * sb.gradients)
                                       : p.bucket_mb * 1e6;
      BucketPlan expert = stage_buckets(grad_op, grad_expert * sb.gradients, expert_bucket, places.edp, places.edp_replicate, hw, p, s);
      double last = std::max(dense.last, expert.last).value();
      double total = (dense.total + expert.total).value();
      if (p.offload != config::Offload::kNone) {
        // ZeRO-Offload: each reduced shard goes down to the host after its bucket, on the same
        // stream: the stage's whole gradient shard, the last bucket's share after the backward.
        const double link = hw.host.link.value();
        total += (grad_dense / static_cast<double>(places.dp_cp.size) + grad_expert / static_cast<double>(places.edp.size)) *
                 sb.gradients / link;
        last += std::min(bucket, grad_dense * sb.gradients) / static_cast<double>(places.dp_cp.size) / link;
      }
      // The buckets that run beside the backward wait for its kernels (not the last, after it).
      const double waits = std::max(0.0, dense.count - 1.0) * kernel_wait(bwd_kernel[static_cast<size_t>(s)], places.dp_cp) +
                           expert.count * kernel_wait(bwd_kernel[static_cast<size_t>(s)], places.edp);
      // The gradients become final during the last micro-batch's backward; under ZB-H1 during
      // its weight-gradient pass W, which the held-back W of the cool-down run just before.
      const bool zb = p.split_backward();
      const double window = zb ? w_stage[static_cast<size_t>(s)] : out.stage_bwd_s[static_cast<size_t>(s)];
      // Overlapped: the last bucket follows the backward; the rest runs beside it (or, when the
      // traffic outlasts the backward, the backward runs slowed under it).
      double exposed = p.grad_reduce_overlap ? last + beside_compute(total - last, window, slow, waits) : total;
      if (p.grad_reduce_overlap && p.v_shape()) {
        // ZB-V: chunk 1's gradients (the later layers, reduced first) are final at its last W,
        // and reduce beside the stage's work after it; chunk 0's in its last W pass, as ZB-H1's.
        const auto layers = static_cast<double>(std::max<int64_t>(1, rc.stage_layers[static_cast<size_t>(s)]));
        const double share1 = static_cast<double>(rc.chunk_layers(s, 1)) / layers;
        const double rest = std::max(0.0, total * (1.0 - share1) - last);
        exposed = last + beside_compute(rest, 0.5 * window, slow, waits * (1.0 - share1)) +
                  beside_compute(total * share1, v_after_chunk1[static_cast<size_t>(s)], slow, waits * share1);
      }
      // How long before the pipeline's end stage s finishes: 1F1B drains stage by stage (the
      // earlier stages' backward); under ZB-H1 only the input-gradient chain drains, and the
      // min(s, m - 1) W that stage s held back fill that time; ZB-V's stages end as its
      // played-out orders do (ends_early above).
      double stage_drain = 0;
      if (zb) {
        stage_drain = ends_early[static_cast<size_t>(s)];
      } else {
        if (s > 0) drain += out.stage_bwd_s[static_cast<size_t>(s - 1)];
        stage_drain = drain;
      }
      end_max = std::max(end_max, t_pipe - stage_drain + exposed + (s == 0 ? tied : 0.0));
      if (zero >= 1) {
        // The same buckets hold the parameters (in the weights' dtype).
        const double wb = sb.gradients > 0 ? sb.weights / sb.gradients : 1.0;
        BucketPlan ag_d = stage_buckets(Collective::kAllGather, grad_dense * sb.weights, bucket * wb, places.dp_cp, places.dp_replicate, hw, p, s);
        BucketPlan ag_e = stage_buckets(Collective::kAllGather, grad_expert * sb.weights, expert_bucket * wb, places.edp, places.edp_replicate, hw, p, s);
        const double ag_total = (ag_d.total + ag_e.total).value();
        // Overlapped, every bucket but the first waits for the forward's kernels.
        const double ag_waits = std::max(0.0, ag_d.count - 1.0) * kernel_wait(fwd_kernel[static_cast<size_t>(s)], places.dp_cp) +
                                ag_e.count * kernel_wait(fwd_kernel[static_cast<size_t>(s)], places.edp);
        const double ag_first = std::max(ag_d.last, ag_e.last).value();
        double ag_exposed = ag_total;
        if (p.param_gather_overlap && ag_total > 0) {
          // Overlapped: every bucket's gather is queued at the step's start (the previous
          // step's tail) and each layer's first forward waits for its bucket. Stage s starts
          // its first forward of chunk c after the earlier stages' forwards (and, interleaved,
          // c rounds of pp chunk forwards); chunk c's gathers must be done about one bucket
          // before its first forward ends. What that does not cover is exposed; the hidden
          // rest slows the compute beside it.
          const double v = p.schedule == config::Schedule::kInterleaved ? static_cast<double>(p.vpp) : 1.0;
          // Not aligned across stages, a stage issues its gathers when its first forward starts:
          // nothing hides them but that forward, and each stage's delay pushes the later ones.
          double fill = 0;
          if (p.gathers_aligned()) {
            for (int64_t j = 0; j < s; ++j) fill += out.stage_fwd_s[static_cast<size_t>(j)] / v;
          }
          const double f_chunk = out.stage_fwd_s[static_cast<size_t>(s)] / v;
          const double last_share = std::min(1.0, ag_first * v / ag_total);
          double exposed = std::max(0.0, ag_first - fill);
          const double busy = ag_total + ag_waits;
          for (double c = 0; c < v; c += 1.0) {
            const double start = fill + c * static_cast<double>(pp) * f_chunk;
            exposed = std::max(exposed, (c + 1.0) / v * busy - start - f_chunk * (1.0 - last_share));
          }
          exposed = std::min(exposed, busy);
          ag_exposed = exposed + std::max(0.0, ag_total - exposed) * slow;
        }
        param_gather = p.param_gather_overlap && !p.gathers_aligned() ? param_gather + ag_exposed : std::max(param_gather, ag_exposed);
      }
    }
    dp_exposed = end_max - t_pipe;
  }

  // ---- optimizer ----
  double opt = 0;
  for (const auto& st : out.memory.stages) opt = std::max(opt, optimizer_time_s(rc, st));

  out.step_time_s = t_pipe + dp_exposed + param_gather + opt;
  out.bubble_fraction = t_pipe > 0 ? bubble / t_pipe : 0.0;
  const double tokens = static_cast<double>(rc.tokens_per_step());
  const double gpus = static_cast<double>(rc.cluster.num_gpus);
  out.tokens_per_s = tokens / out.step_time_s;
  out.tokens_per_s_per_gpu = out.tokens_per_s / gpus;
  out.model_flops_per_step = model_flops_per_step(rc);
  const double peak = hw.peak_for(rc.training.precision).value();
  out.mfu = out.model_flops_per_step / (out.step_time_s * gpus * peak);
  out.tflops_per_gpu = out.model_flops_per_step / (out.step_time_s * gpus) / 1e12;
  // HFU: model FLOPs scaled by the executed / useful ratio of the operator FLOPs (recompute).
  out.hfu = out.mfu * (model_flops_mb > 0 ? hardware_flops_mb / model_flops_mb : 1.0);

  auto& br = out.breakdown;
  br.compute = m * compute_stage[slowest];
  br.recompute = m * recompute_stage[slowest];
  br.host = m * host_stage[slowest];
  br.exposed_comm["tp"] = m * tp_stage[slowest];
  br.exposed_comm["cp"] = m * cp_stage[slowest];
  br.exposed_comm["ep"] = m * ep_stage[slowest];
  br.exposed_comm["pp"] = p2p;
  br.exposed_comm["offload"] = m * offload_stage[slowest];
  br.exposed_comm["dp"] = dp_exposed + param_gather + m * fsdp_stage[slowest] + once;
  br.bubble = bubble;
  br.optimizer = opt;
  if (!std::isfinite(out.step_time_s) || !(out.step_time_s > 0) || !std::isfinite(out.mfu)) {
    throw core::UserError("the estimate of this run is not a finite time (step " + core::fmt("%g", out.step_time_s) +
                          " s); check the hardware profile's rates and times (efficiency, network) and the run's sizes");
  }
  return out;
}

}  // namespace stepcast::estimate
