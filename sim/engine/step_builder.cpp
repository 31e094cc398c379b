#include "sim/engine/step_builder.hpp"

#include <algorithm>
#include <iterator>
#include <limits>
#include <optional>
#include <cmath>
#include <string>
#include <utility>

#include "sim/cost/collectives.hpp"
#include "sim/engine/schedule.hpp"
#include "sim/estimate/estimate.hpp"
#include "sim/memory/ledger.hpp"

namespace stepcast::engine {

using config::Schedule;
using cost::Collective;
using estimate::LayerCost;
using core::Duration;

namespace {

// Deterministic per-task noise: splitmix64 of (seed, index) -> two uniforms -> Box-Muller.
double jitter_factor(uint64_t seed, uint64_t index, double cv) {
  auto mix = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  };
  const uint64_t a = mix(seed * 0x100000001b3ULL ^ index);
  const uint64_t b = mix(a);
  const double u1 = (static_cast<double>(a >> 11) + 0.5) / 9007199254740992.0;
  const double u2 = (static_cast<double>(b >> 11) + 0.5) / 9007199254740992.0;
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  return std::max(0.05, 1.0 + cv * z);
}

double uniform01(uint64_t seed, uint64_t index) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ULL ^ (index + 0x632be59bd9b4e019ULL);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return (static_cast<double>(x >> 11) + 0.5) / 9007199254740992.0;
}

// Linear work scales with the micro-batch's tokens, attention with their square.
double by_length(double total, double attention, double a) { return (total - attention) * a + attention * a * a; }

}  // namespace

// The tasks of one simulated rank, in the order its streams run them.
class RankBuilder {
 public:
  RankBuilder(StepBuilder& b, int64_t r)
      : b_(b),
        g_(*b.graph_),
        p_(b.p_),
        sc_(b.rc_.scenario),
        r_(r),
        s_(b.stage_of(r)),
        my_tp_(static_cast<size_t>(b.tp_group(r))),
        my_dp_(static_cast<size_t>(b.dp_group(r))),
        my_rep_(static_cast<size_t>(b.replicate_group(r))),
        bad_(b.full_ ? sc_.degraded_rank : -1),
        // Offloaded state is copied per layer even without a group to gather over.
        fsdp_(b.p_.effective_zero() >= 3 && (has_sync() || (b.p_.offload != config::Offload::kNone && !b.ideal_))),
        gather_inline_(fsdp_ && !b.p_.param_gather_overlap),
        reduce_inline_(fsdp_ && !b.p_.grad_reduce_overlap),
        split_w_(b.p_.split_backward()),
        op_index_(static_cast<uint64_t>(r) << 32),
        replica_(b.full_ ? (r % b.per_stage_) / (b.p_.tp * b.p_.cp) : 0),
        buckets_(has_sync() && b.p_.effective_zero() < 3
                     ? gradient_buckets(b.slots(s_), b.chunk_slots(s_), b.sb_.gradients, b.p_, s_)
                     : std::vector<GradBucket>{}) {
    tp_degraded_ = bad_ >= 0 && static_cast<size_t>(b.tp_group(bad_)) == my_tp_;
    dp_degraded_ = bad_ >= 0 && static_cast<size_t>(b.dp_group(bad_)) == my_dp_;
    rep_degraded_ = bad_ >= 0 && static_cast<size_t>(b.replicate_group(bad_)) == my_rep_;
    base_.rank = static_cast<int32_t>(r);
    dp_base_ = base_;
    const size_t mbs = static_cast<size_t>(b.m_);
    final_bwd_.assign(b.slots_[static_cast<size_t>(s_)].size() * static_cast<size_t>(b.v_), kNone);
    if (!p_.no_sync) per_mb_bwd_.assign(mbs, std::vector<TaskId>(final_bwd_.size(), kNone));
    finalize_gate_.assign(mbs, kNone);
    if (p_.activation_offload_layers > 0 && !b.ideal_) act_down_.assign(mbs, std::vector<TaskId>(b.slots_[static_cast<size_t>(s_)].size(), kNone));
  }

  void build() {
    emit_start_barrier();
    last_pipeline_ = start_barrier_;
    last_on_compute_ = start_barrier_;
    emit_param_gathers();
    for (const auto& a : stage_order(p_.schedule, b_.pp_, s_, b_.m_, b_.v_)) emit_pass(a);
    emit_deferred_send();
    emit_gradient_reduction();
    emit_tied_embedding_reduction();
    emit_optimizer();
  }

 private:
  [[nodiscard]] bool has_sync() const { return b_.p_.dp * b_.p_.cp > 1 && !b_.ideal_; }

  // A task joining the group's next collective. Traffic that crosses a link of the rank's own
  // (its NIC, or its fabric port for data-parallel groups) is a flow of `link_bytes` there and
  // shares it with concurrent flows; a degraded link then slows it through the link's
  // capacity. Other collectives (TP inside the node) take their closed-form time, divided by a
  // degraded link's factor.
  enum class Group { kTp, kDp, kReplicate };
  TaskId group_task(Group which, Task t, Tick dur, uint32_t name, double link_bytes = 0, bool cross_node = false, int64_t group = 1) {
    auto& list = which == Group::kTp ? b_.tp_coll_[my_tp_] : which == Group::kDp ? b_.dp_coll_[my_dp_] : b_.rep_coll_[my_rep_];
    size_t& j = which == Group::kTp ? tp_j_ : which == Group::kDp ? dp_j_ : rep_j_;
    const bool degraded = which == Group::kTp ? tp_degraded_ : which == Group::kDp ? dp_degraded_ : rep_degraded_;
    const bool flow = link_bytes > 0 && !b_.ideal_;
    if (!flow && degraded) dur = static_cast<Tick>(static_cast<double>(dur) / sc_.degraded_factor);
    if (j >= list.size()) list.push_back(g_.add_collective(dur, name, static_cast<uint32_t>(std::clamp<int64_t>(group, 1, 1 << 30))));
    t.duration = dur;
    t.name = name;
    const TaskId id = g_.add(t);
    g_.join(list[j++], id);
    if (flow) flow_over(id, link_bytes, cross_node);
    return id;
  }

  // A data-parallel collective of `bytes` over `where` as a flow on the link it loads.
  TaskId dp_task(Task t, Collective op, double bytes, const mesh::Placement& where, uint32_t name,
                 Group which = Group::kDp) {
    const Tick dur = to_ticks(cost::collective_time(op, core::Bytes(bytes), where, b_.rc_.hardware).value());
    return group_task(which, t, dur, name, cost::link_bytes(op, core::Bytes(bytes), where), !where.intra_node(), where.size);
  }

  // A gradient reduction over a sharding group `where` (a reduce-scatter, or an all-reduce
  // without sharding) and, under hybrid sharding, the all-reduce of the reduced shard across the
  // replicas (`replicate`), on the same stream after it. Returns the first and the last task.
  std::pair<TaskId, TaskId> dp_reduce(Task t, Collective op, double bytes, const mesh::Placement& where,
                                      const mesh::Placement& replicate, uint32_t name) {
    const TaskId id = dp_task(t, op, bytes, where, name);
    if (op != Collective::kReduceScatter || replicate.size <= 1) return {id, id};
    const double shard = bytes / static_cast<double>(std::max<int64_t>(1, where.size));
    const TaskId all = dp_task(t, Collective::kAllReduce, shard, replicate, b_.names_.all_reduce, Group::kReplicate);
    g_.depend(id, all);
    return {id, all};
  }

  void flow_over(TaskId id, double bytes, bool cross_node) {
    const auto r = static_cast<size_t>(r_);
    if (cross_node) {
      g_.set_flow(id, bytes, {b_.nic_tx_[r], b_.nic_rx_[r]});
    } else {
      g_.set_flow(id, bytes, {b_.fabric_[r]});
    }
  }

  // Host work on one rank and the barrier every rank waits at before the step.
  void emit_start_barrier() {
    if (sc_.host_rank < 0) return;
    TaskId host = kNone;
    if (b_.global_rank(r_) == sc_.host_rank) {
      Task h = base_;
      h.stream = Stream::kHost;
      h.kind = TaskKind::kHost;
      h.name = b_.names_.host;
      h.duration = to_ticks(sc_.host_seconds);
      host = g_.add(h);
    }
    Task t = base_;
    t.kind = TaskKind::kBarrier;
    if (b_.barrier_ == kNone) b_.barrier_ = g_.add_collective(0, b_.names_.barrier);
    t.name = b_.names_.barrier;
    start_barrier_ = g_.add(t);
    g_.join(b_.barrier_, start_barrier_);
    g_.depend(host, start_barrier_);
  }

  // FSDP: gather a layer's weights; the gather for the k-th use waits for the compute of use
  // k - 2 (one layer of prefetch). In line (param_gather_overlap off) it is issued when the
  // layer runs: after the work queued before it on the compute stream and the collectives
  // issued in line before it.
  // backward_regather: the recomputed forward gathers once more before the backward's gather.
  // Returns the first and the last task.
  std::pair<TaskId, TaskId> fsdp_gather(const Slot& sl, bool backward_regather = false) {
    Task t = dp_base_;
    t.stream = Stream::kDp;
    t.kind = TaskKind::kDpComm;
    t.layer = sl.layer;
    if (gather_inline_) {
      const auto [first, last] = inline_collective(t, Collective::kAllGather, sl, b_.gather_bytes_, b_.names_.gather, last_on_compute_);
      if (!backward_regather) return {first, last};
      return {first, inline_collective(t, Collective::kAllGather, sl, b_.gather_bytes_, b_.names_.gather, kNone).second};
    }
    auto [first, last] = unit_collective(t, Collective::kAllGather, sl, b_.gather_bytes_, b_.names_.gather);
    if (compute_uses_.size() >= 2) g_.depend(compute_uses_[compute_uses_.size() - 2], first);
    if (backward_regather) {
      const auto again = unit_collective(t, Collective::kAllGather, sl, b_.gather_bytes_, b_.names_.gather);
      g_.depend(last, again.first);
      last = again.second;
    }
    return {first, last};
  }

  // One unit's ZeRO-3 / FSDP collective: its dense parameters over the ZeRO-3 group, then its
  // routed experts over the expert-data-parallel group (sharded there, as the ledger shards
  // them), one after the other on the stream. Returns the first and the last task.
  // CPU offload: under parameter offload the gather first copies the rank's shard up from the
  // host; under either offload the reduce-scatter copies its gradient shard down after it, on
  // the same stream.
  std::pair<TaskId, TaskId> unit_collective(Task t, Collective op, const Slot& sl, double bytes_per_param, uint32_t name) {
    const auto& pl = b_.wb_.placements();
    const bool up = op == Collective::kAllGather;
    // Gathers carry every parameter, reductions the gradients of those that train.
    const double expert = up ? sl.expert_params() : sl.trainable_expert_params();
    const double all = up ? sl.params : sl.trainable_params();
    const bool copies = up ? p_.offload == config::Offload::kParams : p_.offload != config::Offload::kNone;
    const double shard = (all - expert) / static_cast<double>(pl.zero3.size) + expert / static_cast<double>(pl.edp.size);
    const TaskId copy_up = copies && up ? host_copy(t, shard * b_.sb_.weights, true) : kNone;
    // QLoRA's quantized layer weights (the frozen base: all but the adapters) travel packed.
    const bool packs = up && sl.quantized;
    const double packed_bytes = b_.rc().gathered_layer_weight_bytes();
    const double packed = packs ? all - expert - (sl.trainable_params() - sl.trainable_expert_params()) : 0.0;
    const double dense_bytes = (all - expert - packed) * bytes_per_param + packed * packed_bytes;
    const double expert_bytes = expert * (packs ? packed_bytes : bytes_per_param);
    auto [first, last] = dp_reduce(t, op, dense_bytes, pl.zero3, pl.dp_replicate, name);
    if (expert > 0) {
      const auto experts = dp_reduce(t, op, expert_bytes, pl.edp, pl.edp_replicate, name);
      g_.depend(last, experts.first);
      last = experts.second;
    }
    if (!copies) return {first, last};
    if (up) return {copy_up, last};
    const TaskId copy_down = host_copy(t, shard * b_.sb_.gradients, false);
    g_.depend(last, copy_down);
    return {first, copy_down};
  }

  // A copy of `bytes` between this rank's GPU and host memory on t's stream (DMA: no SMs), added
  // in stream order: before the gather it feeds, after the reduction it drains.
  TaskId host_copy(Task t, double bytes, bool up, uint32_t name = kNone) {
    t.kind = TaskKind::kHostCopy;
    t.name = name != kNone ? name : up ? b_.names_.copy_up : b_.names_.copy_down;
    t.duration = b_.ideal_ ? 0 : to_ticks(bytes / b_.rc_.hardware.host.link.value());
    return g_.add(t);
  }

  // A unit's collective issued in line: after `after` and the in-line collectives before it;
  // its tasks join those the next compute waits for.
  std::pair<TaskId, TaskId> inline_collective(Task t, Collective op, const Slot& sl, double bytes_per_param, uint32_t name,
                                              TaskId after) {
    const auto [first, last] = unit_collective(t, op, sl, bytes_per_param, name);
    g_.depend(after, first);
    if (!inline_pending_.empty()) g_.depend(inline_pending_.back(), first);
    inline_pending_.push_back(first);
    if (last != first) inline_pending_.push_back(last);
    return {first, last};
  }

  // A compute-stream task that waits for a data-parallel collective (its layer's gather, or
  // whatever was issued in line before it).
  void gate_on_dp(TaskId dp, TaskId compute, bool from_idle = false) {
    if (dp == kNone) return;
    g_.depend(dp, compute);
    b_.dp_gates_.push_back({compute, dp, from_idle});
  }

  // Tokens of this replica's micro-batch relative to seq_len (variable-length scenario).
  [[nodiscard]] double length_factor(int32_t mb) const {
    if (sc_.seq_dist.empty()) return 1.0;
    const uint64_t key = static_cast<uint64_t>(replica_) * 1000003ULL + static_cast<uint64_t>(mb);
    const double z = std::sqrt(-2.0 * std::log(uniform01(sc_.seq_seed, 2 * key))) *
                     std::cos(6.283185307179586 * uniform01(sc_.seq_seed, 2 * key + 1));
    const double S = static_cast<double>(b_.rc_.training.seq_len);
    double len = sc_.seq_dist == "uniform" ? sc_.seq_min + (sc_.seq_max - sc_.seq_min) * uniform01(sc_.seq_seed, 2 * key)
                                           : sc_.seq_median * std::exp(sc_.seq_sigma * z);
    len = std::clamp(std::round(len), 1.0, S);
    return len / S;
  }

  // ZeRO-1/2 with the parameter all-gather overlapped (Megatron-Core's overlap_param_gather
  // with align_param_gather, its default): the previous step's optimizer leaves the updated
  // shards to be gathered, and the all-gathers of every bucket are queued at the step's start,
  // in forward order on the gather stream, so they run while the first micro-batch's forward
  // goes through the stage. A layer's first forward waits for the bucket that holds its
  // parameters; what the forward cannot hide (the first bucket, and the rest when the gathers
  // outlast the stage's first forward, as with few micro-batches and expert weights gathered
  // across nodes) lengthens the step. In steady state this is the previous step's tail.
  void emit_param_gathers(TaskId after = kNone) {
    if (!zero12_overlapped_gathers()) return;
    // Not aligned: issued by the stage's first forward (emit_pass calls this with its entry).
    if (!p_.gathers_aligned() && after == kNone) return;
    first_use_gathers_.assign(b_.slots(s_).size(), {});
    for (auto bk = buckets_.rbegin(); bk != buckets_.rend(); ++bk) {  // forward order
      const TaskId id = gather_bucket(*bk);
      g_.depend(start_barrier_, id);
      if (after != kNone) g_.depend(after, id);
      // The bucket's lowest slot in forward order is the one that completed it in backward.
      first_use_gathers_[bk->ready_slot].push_back(id);
    }
  }

  [[nodiscard]] bool zero12_overlapped_gathers() const {
    const int zero = p_.effective_zero();
    return has_sync() && p_.param_gather_overlap && (zero == 1 || zero == 2);
  }

  // The all-gather of one bucket's updated parameters (in the weights' dtype): dense weights
  // over the data-parallel group, routed experts over the expert-data-parallel group.
  TaskId gather_bucket(const GradBucket& bk) {
    Task c = dp_base_;
    c.stream = Stream::kDp;
    c.kind = TaskKind::kDpComm;
    const auto& pl = b_.wb_.placements();
    const double params = bk.bytes / b_.sb_.gradients;
    return dp_task(c, Collective::kAllGather, params * b_.sb_.weights, bk.expert ? pl.edp : pl.dp_cp, b_.names_.gather);
  }

  // A backward pass that also computes the weight gradients (every backward unless the
  // schedule splits them; DualPipeV's kBW).
  [[nodiscard]] bool whole_backward(const Action& a) const { return a.phase == Phase::kBW || (a.phase == Phase::kB && !split_w_); }

  // One pass (forward, backward or weight-gradient of one micro-batch through one chunk):
  // its layers in order, their exposed communication, FSDP traffic, then the pipeline send.
  void emit_pass(const Action& a) {
    const double lf = length_factor(a.mb);
    const auto& slots = b_.slots_[static_cast<size_t>(s_)];
    const auto& chunk_slots = b_.chunk_slots_[static_cast<size_t>(s_)][static_cast<size_t>(a.chunk)];
    const bool fwd = a.phase == Phase::kF;
    PassTasks ids;
    // `kernel`: the pass's kernel in flight (Slot::fwd_kernel and the others).
    auto add_compute = [&](Task t, Tick dur, uint32_t name, uint16_t kernel) {
      t.duration = dur;
      t.name = name;
      t.kernel = kernel;
      const TaskId id = g_.add(t);
      if (ids.first == kNone) ids.first = id;
      if (ids.entry == kNone) ids.entry = id;
      ids.last = id;
      last_on_compute_ = id;
      if (start_barrier_ != kNone) g_.depend(start_barrier_, id);
      return id;
    };
    // A layer's exposed TP/CP/EP communication: a collective over the rank's tensor group,
    // blocking on the compute stream, scaled with the micro-batch's tokens. One task, or, where
    // only part of it crosses the NIC (expert all-to-alls between expert-TP gathers on the
    // node's fabric, say), one task per run of NIC-crossing or on-node operators in their order,
    // each NIC run a flow at its own rate, so DP traffic on the NIC shares it only while it runs.
    auto tp_comm = [&](double seconds, double nic_bytes, const std::vector<estimate::LayerCost::CommRun>& runs, uint32_t name,
                       const Task& layer_task) {
      if (seconds <= 0 || b_.ideal_) return;
      Task c = layer_task;
      c.kind = TaskKind::kTpComm;
      auto part = [&](double s, double bytes) {
        if (s <= 0) return;
        ids.last = group_task(Group::kTp, c, to_ticks(s * lf), name, bytes * lf, true);
        last_on_compute_ = ids.last;
      };
      if (runs.empty()) {
        part(seconds, nic_bytes);
        return;
      }
      for (const auto& run : runs) part(run.time.value(), run.nic_bytes);
    };
    if (rendezvous()) {
      // DeepSpeed's order: a backward's gradient send, deferred, goes before the next
      // backward's receive, or after the next forward's.
      if (!fwd) emit_deferred_send();
      if (receives(a)) emit_receive(a, ids);
      if (fwd) emit_deferred_send();
    }
    std::vector<const Slot*> seq;
    for (size_t k : chunk_slots) seq.push_back(&slots[k]);
    if (!fwd) std::reverse(seq.begin(), seq.end());
    // FSDP: each layer's gather is issued one layer ahead (after the previous layer's compute
    // is queued, before its gradient reduce-scatter); gathers and reduce-scatters run on their
    // own streams and share the rank's DP link.
    const bool gather = fsdp_ && (fwd ? (p_.reshard_after_forward || b_.m_ == 1 || a.mb == 0)
                                      : (is_backward(a.phase) && p_.reshard_after_forward));
    std::vector<TaskId> gates(seq.size(), kNone);
    const bool regather = !fwd && p_.zero3_recompute_regather && p_.recompute == config::Recompute::kFull;
    auto regathered = [&](const Slot& sl) {
      return regather && sl.layer >= 0 && sl.layer < static_cast<int32_t>(b_.rc_.model.num_layers) && b_.rc_.full_recompute_layer(sl.layer);
    };
    // A layer's compute waits for its prefetched gather, or for every collective issued in line
    // since the last compute (a reduce-scatter, then the gathers chained after it).
    auto gate_compute = [&](TaskId gather_id, TaskId cid) {
      for (TaskId c : inline_pending_) gate_on_dp(c, cid);
      inline_pending_.clear();
      if (!gather_inline_) gate_on_dp(gather_id, cid, true);
    };
    if (fwd && a.mb == 0 && a.chunk == 0 && !p_.gathers_aligned() && zero12_overlapped_gathers()) {
      // Parameter gathers not aligned across stages: the stage issues them when its first
      // forward starts, once that forward's input has arrived (the pass's entry, which the
      // previous stage's send gates).
      Task mark = base_;
      mark.kind = TaskKind::kBarrier;
      mark.name = b_.names_.issue_gathers;
      mark.microbatch = 0;
      const TaskId mid = g_.add(mark);
      if (start_barrier_ != kNone) g_.depend(start_barrier_, mid);
      if (ids.entry == kNone) ids.entry = mid;
      last_on_compute_ = mid;
      emit_param_gathers(mid);
    }
    if (gather && !seq.empty()) {
      const auto [first, last] = fsdp_gather(*seq[0], regathered(*seq[0]));
      gates[0] = last;
      // In line, the pass starts with its first gather, after the receive of its input.
      if (gather_inline_ && ids.entry == kNone) ids.entry = first;
    }
    const auto& n = b_.names_;
    for (size_t si = 0; si < seq.size(); ++si) {
      const Slot* sl = seq[si];
      const size_t slot_index = static_cast<size_t>(sl - slots.data());
      Task t = base_;
      t.layer = sl->layer;
      t.microbatch = a.mb;
      t.chunk = a.chunk;
      TaskId cid;
      if (a.phase == Phase::kF) {
        t.kind = TaskKind::kForward;
        cid = add_compute(t, b_.scaled(by_length(sl->cost->fwd_compute.value(), sl->cost->fwd_attention.value(), lf), r_, op_index_++), n.fwd,
                          sl->fwd_kernel);
        gate_compute(gates[si], cid);
        if (a.mb == 0 && !first_use_gathers_.empty()) {
          for (TaskId ag : first_use_gathers_[slot_index]) gate_on_dp(ag, cid, true);
        }
        tp_comm(sl->cost->fwd_comm_exposed.value(), sl->cost->fwd_exposed_nic_bytes, sl->cost->fwd_comm_runs, n.tp_fwd, t);
        offload_forward(seq, si, a, lf, ids.last, cid);
      } else if (is_backward(a.phase)) {
        t.kind = TaskKind::kBackward;
        const TaskId next_reload = reload_ahead(seq, si, a, lf);
        const double dur = whole_backward(a) ? sl->cost->bwd_compute.value() : (sl->cost->bwd_compute - sl->cost->bwd_weight_compute).value();
        cid = add_compute(t, b_.scaled(by_length(dur, sl->cost->bwd_attention.value(), lf), r_, op_index_++), n.bwd,
                          sl->bwd_kernel);
        gate_compute(gates[si], cid);
        if (reload_ != kNone) gate_on_offload(reload_, cid);
        reload_ = next_reload;
        tp_comm(sl->cost->bwd_comm_exposed.value(), sl->cost->bwd_exposed_nic_bytes, sl->cost->bwd_comm_runs, n.tp_bwd, t);
      } else {
        t.kind = TaskKind::kBackwardWeight;
        cid = add_compute(t, b_.scaled(sl->cost->bwd_weight_compute.value() * lf, r_, op_index_++), n.bwd_weight,
                          sl->weight_kernel);
        gate_compute(kNone, cid);
      }
      if (gather) {
        compute_uses_.push_back(cid);
        if (si + 1 < seq.size()) gates[si + 1] = fsdp_gather(*seq[si + 1], regathered(*seq[si + 1])).second;
      }
      const bool grads_done = whole_backward(a) || a.phase == Phase::kW;
      if (grads_done) {
        final_bwd_[slot_index] = ids.last;
        if (!p_.no_sync) per_mb_bwd_[static_cast<size_t>(a.mb)][slot_index] = ids.last;
        // FSDP: reduce-scatter this layer's gradient (every micro-batch, or only the last when
        // unsharded gradients are accumulated).
        if (fsdp_ && sl->trainable_params() > 0 && (p_.reshard_after_forward || b_.m_ == 1 || a.mb == b_.m_ - 1)) {
          Task c = dp_base_;
          c.stream = Stream::kDpReduce;
          c.kind = TaskKind::kDpComm;
          c.layer = sl->layer;
          c.microbatch = a.mb;
          // In line (grad_reduce_overlap off) after the next layer's gather issued before it, and
          // the next compute waits for it.
          const auto rs = reduce_inline_ ? inline_collective(c, Collective::kReduceScatter, *sl, b_.reduce_bytes_, n.reduce_scatter, ids.last)
                                         : unit_collective(c, Collective::kReduceScatter, *sl, b_.reduce_bytes_, n.reduce_scatter);
          g_.depend(ids.last, rs.first);
          fsdp_reductions_.push_back(rs.second);
        }
      }
    }
    ids.last_compute = ids.last;
    ids.whole_backward = whole_backward(a);
    if (ids.entry == kNone) ids.entry = ids.first;
    const size_t k = static_cast<size_t>(a.chunk) * static_cast<size_t>(b_.m_) + static_cast<size_t>(a.mb);
    if (rendezvous() && !fwd) {
      deferred_ = Deferred{a, lf, k};
    } else {
      emit_send(a, lf, ids);
    }
    if (a.phase == Phase::kF) {
      b_.fwd_[static_cast<size_t>(r_)][k] = ids;
    } else if (is_backward(a.phase)) {
      b_.bwd_[static_cast<size_t>(r_)][k] = ids;
    } else {
      b_.wgt_[static_cast<size_t>(r_)][k] = ids;
    }
    last_pipeline_ = ids.last;
    if (finalize_pending_ >= 0) {
      finalize_gate_[static_cast<size_t>(finalize_pending_)] = ids.first;
      finalize_pending_ = -1;
    }
    // Without no_sync, DDP finishes every backward by waiting for its gradient reductions, so
    // the compute after micro-batch k's last backward waits for k's buckets.
    if (whole_backward(a) || a.phase == Phase::kW) finalize_pending_ = a.mb;
  }

  // Activation offload (double-buffered, as Megatron-Core's CPU offload handler): once an
  // offloaded layer's forward (with its exposed exchanges) is done, its saved tensors go to the
  // host on the copy-out engine; the compute after the next layer waits for that copy, which
  // frees the buffer. `done`: the layer's last task; `cid`: the compute just added.
  void offload_forward(const std::vector<const Slot*>& seq, size_t si, const Action& a, double lf, TaskId done, TaskId cid) {
    if (act_down_.empty()) return;
    const size_t mb = static_cast<size_t>(a.mb);
    const auto& slots = b_.slots_[static_cast<size_t>(s_)];
    // The copy two layers back gates this layer's compute.
    if (si >= 2) {
      const TaskId before = act_down_[mb][static_cast<size_t>(seq[si - 2] - slots.data())];
      if (before != kNone) gate_on_offload(before, cid);
    }
    const Slot& sl = *seq[si];
    if (!b_.rc_.activation_offloaded(sl.layer)) return;
    const TaskId id = activation_copy(sl, a, lf, false);
    g_.depend(done, id);
    act_down_[mb][static_cast<size_t>(&sl - slots.data())] = id;
  }

  // In backward the next offloaded layer's activations come back (copy-in engine) while this
  // layer's backward runs: issued when it can start, after the copy out has finished; the
  // next layer's backward waits for it (reload_). Returns the reload, or kNone.
  TaskId reload_ahead(const std::vector<const Slot*>& seq, size_t si, const Action& a, double lf) {
    if (act_down_.empty() || si + 1 >= seq.size()) return kNone;
    const Slot& next = *seq[si + 1];
    const TaskId down = act_down_[static_cast<size_t>(a.mb)][static_cast<size_t>(&next - b_.slots_[static_cast<size_t>(s_)].data())];
    if (down == kNone) return kNone;
    const TaskId id = activation_copy(next, a, lf, true);
    g_.depend(down, id);
    if (last_on_compute_ != kNone) g_.depend(last_on_compute_, id);
    return id;
  }

  // One layer's saved tensors (the ledger's per-layer activations, scaled with the
  // micro-batch's tokens) to the host on the copy-out engine, or back on the copy-in engine.
  TaskId activation_copy(const Slot& sl, const Action& a, double lf, bool up) {
    Task c = base_;
    c.stream = up ? Stream::kReload : Stream::kOffload;
    c.layer = sl.layer;
    c.microbatch = a.mb;
    const double bytes = memory::layer_activation_bytes(b_.rc_, b_.rc_.model.layer_kind(sl.layer)).value() * lf;
    return host_copy(c, bytes, up, up ? b_.names_.reload_act : b_.names_.offload_act);
  }

  void gate_on_offload(TaskId copy, TaskId compute) {
    g_.depend(copy, compute);
    b_.dp_gates_.push_back({compute, copy, false, true});
  }

  // parallel.pp_rendezvous: transfers as blocking send/receive pairs.
  [[nodiscard]] bool rendezvous() const { return p_.pp_rendezvous && b_.pp_ > 1; }

  // Whether pass `a` takes its input from a neighbouring stage's send.
  [[nodiscard]] bool receives(const Action& a) const {
    const auto vs = static_cast<int32_t>(p_.vstage(s_, a.chunk));
    return a.phase == Phase::kF ? vs > 0 : vs < b_.pp_ * b_.v_ - 1;
  }

  // The receive of a blocking pair on the compute stream: a marker that the stage has reached
  // it (the neighbour's send waits for it, StepBuilder::link_stages), then the receive, which
  // ends with that send. The compute stream is blocked from the marker to the send's end.
  void emit_receive(const Action& a, PassTasks& ids) {
    Task t = base_;
    t.kind = TaskKind::kBarrier;
    t.microbatch = a.mb;
    t.chunk = a.chunk;
    t.name = b_.names_.recv_ready;
    ids.ready = g_.add(t);
    if (start_barrier_ != kNone) g_.depend(start_barrier_, ids.ready);
    t.name = a.phase == Phase::kF ? b_.names_.recv_act : b_.names_.recv_grad;
    ids.entry = g_.add(t);
    last_on_compute_ = ids.entry;
  }

  // The backward's gradient send held back for DeepSpeed's order (rendezvous()), issued now;
  // the pass's recorded last task becomes that send, which the previous stage's receive waits for.
  void emit_deferred_send() {
    if (!deferred_) return;
    const Deferred d = *deferred_;
    deferred_.reset();
    PassTasks& ids = b_.bwd_[static_cast<size_t>(r_)][d.k];
    emit_send(d.a, d.lf, ids);
    last_pipeline_ = ids.last;
  }

  // Pipeline transfer to the neighbouring virtual stage.
  void emit_send(const Action& a, double lf, PassTasks& ids) {
    const int32_t pp = b_.pp_;
    const auto vs = static_cast<int32_t>(p_.vstage(s_, a.chunk));
    const bool send = (a.phase == Phase::kF && vs < pp * b_.v_ - 1) || (is_backward(a.phase) && vs > 0);
    if (!send || pp <= 1) return;
    // The transfer's other end: the same position on the neighbouring virtual stage's rank.
    // ZB-V's turn (virtual stages pp - 1 and pp) stays on this rank: nothing to send.
    const int32_t vs_next = a.phase == Phase::kF ? vs + 1 : vs - 1;
    const int64_t next_stage = p_.stage_of_vstage(vs_next);
    if (next_stage == s_) return;
    Task t = base_;
    t.kind = TaskKind::kPpSend;
    // Blocking on the compute stream, or on the send stream where the runtime posts its
    // transfers asynchronously (Megatron's interleaved schedule, torch.distributed.pipelining's
    // ZB-V and DualPipeV).
    t.stream = (p_.schedule == Schedule::kInterleaved || p_.v_shape()) && !rendezvous() ? Stream::kPpSend : Stream::kCompute;
    t.microbatch = a.mb;
    t.chunk = a.chunk;
    t.duration = static_cast<Tick>(static_cast<double>(b_.p2p_) * lf);
    const auto peer = static_cast<size_t>(next_stage * b_.per_stage_ + (r_ % b_.per_stage_));
    const auto me = static_cast<size_t>(r_);
    t.name = a.phase == Phase::kF ? b_.names_.send_act : b_.names_.send_grad;
    const TaskId sid = g_.add(t);
    // The send follows the pass's in-line reduce-scatters (a wait the breakdown books as DP
    // communication when the send blocks the compute stream).
    if (t.stream == Stream::kCompute) {
      for (TaskId c : inline_pending_) gate_on_dp(c, sid);
      inline_pending_.clear();
      last_on_compute_ = sid;
    } else if (!inline_pending_.empty()) {
      g_.depend(inline_pending_.back(), sid);
    }
    if (!b_.ideal_) {
      const double bytes = b_.wb_.p2p_bytes().value() * lf;
      if (b_.wb_.placements().pp_neighbour.intra_node()) {
        g_.set_flow(sid, bytes, {b_.fabric_[me], b_.fabric_[peer]});
      } else {
        g_.set_flow(sid, bytes, {b_.nic_tx_[me], b_.nic_rx_[peer]});
      }
    }
    g_.depend(ids.last, sid);
    ids.last = sid;
  }

  // Data-parallel gradient reduction (DDP buckets / ZeRO-1/2 reduce-scatter) in reverse layer
  // order, each bucket launched as its last tensor's gradient becomes final.
  void emit_gradient_reduction() {
    const int zero = p_.effective_zero();
    if (!has_sync() || zero >= 3) return;
    if (p_.no_sync) {
      emit_buckets(final_bwd_, b_.m_ - 1);
    } else {
      for (int32_t mb = 0; mb < b_.m_; ++mb) emit_buckets(per_mb_bwd_[static_cast<size_t>(mb)], mb);
    }
  }

  void emit_buckets(const std::vector<TaskId>& ready_of_slot, int32_t mb) {
    const int zero = p_.effective_zero();
    const Collective op = zero >= 1 ? Collective::kReduceScatter : Collective::kAllReduce;
    for (const GradBucket& bk : buckets_) {
      Task c = dp_base_;
      c.stream = Stream::kDpReduce;
      c.kind = TaskKind::kDpComm;
      c.microbatch = mb;
      const auto& pl = b_.wb_.placements();
      const auto [first, last] = dp_reduce(c, op, bk.bytes, bk.expert ? pl.edp : pl.dp_cp, bk.expert ? pl.edp_replicate : pl.dp_replicate,
                                           zero >= 1 ? b_.names_.reduce_scatter : b_.names_.all_reduce);
      g_.depend(p_.grad_reduce_overlap ? ready_of_slot[bk.ready_slot] : last_pipeline_, first);
      TaskId done = last;
      if (p_.offload != config::Offload::kNone) {
        // ZeRO-Offload: the reduced shard goes down to the host's fp32 gradient buffer.
        done = host_copy(c, bk.bytes / static_cast<double>((bk.expert ? pl.edp : pl.dp_cp).size), false);
        g_.depend(last, done);
      }
      reductions_.push_back(done);
      if (!p_.no_sync) g_.depend(done, finalize_gate_[static_cast<size_t>(mb)]);
    }
  }

  // Tied embeddings across the pipeline: the first stage and the head's stage all-reduce the
  // embedding gradient after their data-parallel reductions, before the optimizer (on the
  // reduction stream; the breakdown books the wait as data-parallel communication).
  void emit_tied_embedding_reduction() {
    if (b_.tied_coll_.empty() || (s_ != 0 && s_ != p_.head_stage())) return;
    const auto w = static_cast<size_t>(r_ % b_.per_stage_);
    const auto& hw = b_.rc_.hardware;
    const Tick dur = to_ticks(cost::collective_time(Collective::kAllReduce, core::Bytes(b_.tied_grad_bytes_), b_.tied_place_, hw).value());
    if (b_.tied_coll_[w] == kNone) b_.tied_coll_[w] = g_.add_collective(dur, b_.names_.embedding_reduce, 2);
    Task c = dp_base_;
    c.stream = Stream::kDpReduce;
    c.kind = TaskKind::kDpComm;
    c.duration = dur;
    c.name = b_.names_.embedding_reduce;
    const TaskId id = g_.add(c);
    g_.join(b_.tied_coll_[w], id);
    flow_over(id, cost::link_bytes(Collective::kAllReduce, core::Bytes(b_.tied_grad_bytes_), b_.tied_place_), !b_.tied_place_.intra_node());
    g_.depend(last_pipeline_, id);
    for (TaskId x : reductions_) g_.depend(x, id);
    reductions_.push_back(id);
  }

  // The optimizer once the stage's gradients are reduced; under ZeRO-1/2 without overlap the
  // all-gather of the updated shards after it.
  void emit_optimizer() {
    const auto& st = b_.ledger_.stages[static_cast<size_t>(s_)];
    Task o = base_;
    o.kind = TaskKind::kOptimizer;
    o.name = b_.names_.optimizer;
    o.duration = b_.ideal_ ? 0 : b_.scaled(estimate::optimizer_time_s(b_.rc_, st), r_, op_index_++);
    const TaskId oid = g_.add(o);
    g_.depend(last_pipeline_, oid);
    for (TaskId id : reductions_) g_.depend(id, oid);
    for (TaskId id : fsdp_reductions_) g_.depend(id, oid);
    const int zero = p_.effective_zero();
    if (!has_sync() || (zero != 1 && zero != 2)) return;
    // Overlapped with the next forward: queued at the step's start (emit_param_gathers).
    if (p_.param_gather_overlap) return;
    // After the optimizer, bucket by bucket.
    for (const GradBucket& bk : buckets_) g_.depend(oid, gather_bucket(bk));
  }

  StepBuilder& b_;
  TaskGraph& g_;
  const config::Parallel& p_;
  const config::Scenario& sc_;
  const int64_t r_;
  const int32_t s_;
  const size_t my_tp_, my_dp_, my_rep_;
  const int64_t bad_;  // degraded rank (all-ranks mode), -1 none
  bool tp_degraded_ = false, dp_degraded_ = false, rep_degraded_ = false;
  const bool fsdp_;
  // ZeRO-3 / FSDP collectives issued in line with the compute (no prefetch / no overlap).
  const bool gather_inline_, reduce_inline_;
  TaskId last_on_compute_ = kNone;      // the last task queued on this rank's compute stream
  struct Deferred {
    Action a;
    double lf;
    size_t k;  // index of the pass in StepBuilder::bwd_
  };
  std::optional<Deferred> deferred_;    // a backward's gradient send not yet issued (rendezvous())
  std::vector<TaskId> inline_pending_;  // in-line collectives since the last compute, in order
  const bool split_w_;
  uint64_t op_index_;
  const int64_t replica_;
  size_t tp_j_ = 0, dp_j_ = 0, rep_j_ = 0;
  Task base_, dp_base_;
  TaskId start_barrier_ = kNone, last_pipeline_ = kNone;
  std::vector<TaskId> compute_uses_;      // FSDP: compute tasks that used gathered weights
  std::vector<TaskId> final_bwd_;         // per slot: the task that makes its gradient final
  std::vector<std::vector<TaskId>> act_down_;  // per micro-batch and slot: its activations' copy to the host
  TaskId reload_ = kNone;                      // the reload the next backward compute waits for
  std::vector<std::vector<TaskId>> per_mb_bwd_;  // without no_sync: [mb][slot]
  std::vector<TaskId> finalize_gate_;     // without no_sync: first task after mb's backward
  int32_t finalize_pending_ = -1;
  std::vector<TaskId> reductions_, fsdp_reductions_;
  // The stage's data-parallel gradient buckets (none under ZeRO-3 / FSDP or without a group).
  const std::vector<GradBucket> buckets_;
  // ZeRO-1/2 overlapped parameter gathers, per slot: those the slot's first forward waits for.
  std::vector<std::vector<TaskId>> first_use_gathers_;
};

StepBuilder::StepBuilder(const config::RunConfig& rc, bool full, bool ideal, double compute_scale)
    : rc_(rc), p_(rc.parallel), wb_(rc), full_(full), ideal_(ideal), compute_scale_(compute_scale) {
  ledger_ = memory::compute_ledger(rc);
  pp_ = static_cast<int32_t>(p_.pp);
  v_ = static_cast<int32_t>(p_.vpp);
  m_ = static_cast<int32_t>(rc.num_microbatches);
  per_stage_ = full ? p_.tp * p_.cp * p_.dp : 1;
  ranks_ = per_stage_ * pp_;
  sb_ = memory::state_bytes(rc.training);
  gather_bytes_ = hw::bytes_per_element(rc.training.gather_dtype);
  reduce_bytes_ = hw::bytes_per_element(rc.training.reduce_dtype);
  p2p_ = ideal_ ? 0 : to_ticks(wb_.p2p_time().value());
  graph_ = std::make_shared<TaskGraph>(static_cast<int32_t>(ranks_));
  if (!ideal_) graph_->set_comm_compute_share(rc_.hardware.collective_compute_share());
  if (!ideal_) graph_->set_comm_waits_for_kernels(rc_.comm_waits_for_kernels());
  build_slots();
}

double StepBuilder::chunk_activation_bytes(int32_t s, int32_t c) const {
  const auto& st = ledger_.stages[static_cast<size_t>(s)];
  const double inflight = memory::inflight_microbatches(rc_, s);
  if (inflight <= 0) return 0.0;
  // The ledger's layer activations at the peak are exact per chunk; its other per-micro-batch
  // terms (stage boundaries, kept outputs) are shared evenly.
  const double layers = memory::stage_layer_activation_bytes(rc_, s).value();
  return (st.activations.value() - layers) / inflight / static_cast<double>(v_) +
         memory::chunk_layer_activation_bytes(rc_, s, c).value();
}

double StepBuilder::chunk_weight_grad_bytes(int32_t s, int32_t c) const {
  if (!p_.split_backward()) return 0.0;
  return memory::chunk_layer_weight_grad_bytes(rc_, s, c).value();
}

Tick StepBuilder::scaled(double seconds, int64_t r, uint64_t index) const {
  const auto& sc = rc_.scenario;
  double f = compute_scale_;
  const int64_t gr = global_rank(r);
  for (const auto& sd : sc.slowdowns) {
    const bool hit = std::find(sd.ranks.begin(), sd.ranks.end(), gr) != sd.ranks.end() ||
                     std::find(sd.stages.begin(), sd.stages.end(), stage_of(r)) != sd.stages.end();
    if (hit) f *= sd.factor;
  }
  if (sc.jitter_cv > 0) f *= jitter_factor(sc.seed, index, sc.jitter_cv);
  return to_ticks(seconds * f);
}

void StepBuilder::build() {
  auto& g = *graph_;
  names_ = Names{g.intern("fwd"),
                 g.intern("bwd"),
                 g.intern("bwd-weight"),
                 g.intern("tp-comm fwd"),
                 g.intern("tp-comm bwd"),
                 g.intern("send activation"),
                 g.intern("send gradient"),
                 g.intern("all-gather params"),
                 g.intern("reduce-scatter grads"),
                 g.intern("all-reduce grads"),
                 g.intern("optimizer"),
                 g.intern("host work"),
                 g.intern("barrier"),
                 g.intern("issue param gathers"),
                 g.intern("copy params up"),
                 g.intern("copy grads down"),
                 g.intern("offload activations"),
                 g.intern("reload activations"),
                 g.intern("ready to receive"),
                 g.intern("receive activation"),
                 g.intern("receive gradient"),
                 g.intern("all-reduce tied embedding grads")};
  const size_t passes = static_cast<size_t>(v_) * static_cast<size_t>(m_);
  fwd_.assign(static_cast<size_t>(ranks_), std::vector<PassTasks>(passes));
  bwd_.assign(static_cast<size_t>(ranks_), std::vector<PassTasks>(passes));
  if (p_.split_backward()) wgt_.assign(static_cast<size_t>(ranks_), std::vector<PassTasks>(passes));
  tp_coll_.assign(static_cast<size_t>(full_ ? ranks_ / (p_.tp * p_.cp) : ranks_), {});
  dp_coll_.assign(static_cast<size_t>(full_ ? pp_ * p_.tp * p_.dp_replicate : ranks_), {});
  rep_coll_.assign(static_cast<size_t>(full_ ? pp_ * p_.tp * p_.cp * (p_.dp / p_.dp_replicate) : ranks_), {});
  // Each simulated rank's links: NIC send and receive directions and its port into the node
  // fabric. A degraded link scenario lowers the named rank's capacities.
  const auto& hw = rc_.hardware;
  const double nic = hw.nic_bandwidth_per_gpu().value();
  const double port = hw.fabric_port_bandwidth(rc_.cluster.gpus_per_node).value();
  for (int64_t r = 0; r < ranks_; ++r) {
    const double f = full_ && rc_.scenario.degraded_rank == global_rank(r) ? rc_.scenario.degraded_factor : 1.0;
    const std::string who = "rank " + std::to_string(global_rank(r));
    nic_tx_.push_back(g.add_link(who + " nic tx", nic * f));
    nic_rx_.push_back(g.add_link(who + " nic rx", nic * f));
    fabric_.push_back(g.add_link(who + " fabric port", port * f));
  }
  if (const auto sync = estimate::tied_embedding_sync(rc_); sync && !ideal_) {
    tied_grad_bytes_ = sync->bytes;
    tied_place_ = sync->pair;
    tied_coll_.assign(static_cast<size_t>(per_stage_), kNone);
  }
  for (int64_t r = 0; r < ranks_; ++r) RankBuilder(*this, r).build();
  link_stages();
  std::sort(dp_gates_.begin(), dp_gates_.end());
}

// Cross-stage dependencies: each virtual stage's forward waits for the previous one's send,
// each backward for the next one's; under parallel.pp_rendezvous each send also waits for its
// receiver to reach the receive.
void StepBuilder::link_stages() {
  if (pp_ <= 1) return;
  auto& g = *graph_;
  const auto mbs = static_cast<size_t>(m_);
  for (int64_t r = 0; r < ranks_; ++r) {
    const int32_t s = stage_of(r);
    const int64_t w = r % per_stage_;
    for (int32_t c = 0; c < v_; ++c) {
      const int64_t vs = p_.vstage(s, c);
      for (int32_t mb = 0; mb < m_; ++mb) {
        const size_t k = static_cast<size_t>(c) * mbs + static_cast<size_t>(mb);
        if (vs > 0) {
          const int64_t ps = p_.stage_of_vstage(vs - 1), pc = p_.chunk_of_vstage(vs - 1);
          const int64_t pr = ps * per_stage_ + w;
          const PassTasks& send = fwd_[static_cast<size_t>(pr)][static_cast<size_t>(pc) * mbs + static_cast<size_t>(mb)];
          g.depend(send.last, fwd_[static_cast<size_t>(r)][k].entry);
          if (fwd_[static_cast<size_t>(r)][k].ready != kNone) g.depend(fwd_[static_cast<size_t>(r)][k].ready, send.last);
        }
        if (vs < pp_ * v_ - 1) {
          const int64_t ns = p_.stage_of_vstage(vs + 1), nc = p_.chunk_of_vstage(vs + 1);
          const int64_t nr = ns * per_stage_ + w;
          const PassTasks& send = bwd_[static_cast<size_t>(nr)][static_cast<size_t>(nc) * mbs + static_cast<size_t>(mb)];
          g.depend(send.last, bwd_[static_cast<size_t>(r)][k].entry);
          if (bwd_[static_cast<size_t>(r)][k].ready != kNone) g.depend(bwd_[static_cast<size_t>(r)][k].ready, send.last);
        }
      }
    }
  }
}

// Per stage: the layer slots (embedding, transformer layers, output layer) with their parameter
// tensors, and which slots each virtual-pipeline chunk runs.
std::vector<GradBucket> gradient_buckets(const std::vector<Slot>& slots, const std::vector<std::vector<size_t>>& chunk_slots,
                                         double grad_bytes_per_param, const config::Parallel& p, int32_t stage) {
  const bool megatron = p.bucket_layout == config::BucketLayout::kMegatron;
  const double cap = p.bucket_mb * 1e6;
  struct Fill {
    double filled = 0, cap = 1e6;
  };
  Fill fill[2];  // dense, expert
  std::vector<GradBucket> out;
  size_t ready = 0;
  double next_cap = cap;  // the cap after a bucket closes
  auto flush = [&](int k) {
    if (fill[k].filled <= 0) return;
    out.push_back({fill[k].filled, k == 1, ready});
    fill[k].filled = 0;
    fill[k].cap = next_cap;
  };
  auto add = [&](int k, double params) {
    fill[k].filled += params * grad_bytes_per_param;
    if (fill[k].filled >= fill[k].cap) flush(k);
  };
  for (auto c = chunk_slots.rbegin(); c != chunk_slots.rend(); ++c) {
    if (megatron) {
      // A DDP instance per chunk: buckets only in the first stage's first chunk.
      const bool bucketed = stage == 0 && c == std::prev(chunk_slots.rend());
      next_cap = bucketed ? cap : std::numeric_limits<double>::infinity();
      fill[0].cap = fill[1].cap = next_cap;
    }
    for (auto it = c->rbegin(); it != c->rend(); ++it) {
      const Slot& sl = slots[*it];
      ready = *it;
      for (auto t = sl.trainable_expert.rbegin(); t != sl.trainable_expert.rend(); ++t) add(1, *t);
      for (auto t = sl.trainable.rbegin(); t != sl.trainable.rend(); ++t) add(0, *t);
    }
    if (megatron) {
      flush(1);
      flush(0);
    }
  }
  flush(1);
  flush(0);
  return out;
}

void StepBuilder::build_slots() {
  const auto& m = rc_.model;
  slots_.resize(static_cast<size_t>(pp_));
  chunk_slots_.resize(static_cast<size_t>(pp_));
  for (int32_t s = 0; s < pp_; ++s) {
    auto& sl = slots_[static_cast<size_t>(s)];
    auto& cs = chunk_slots_[static_cast<size_t>(s)];
    cs.assign(static_cast<size_t>(v_), {});
    const double t = static_cast<double>(p_.tp);
    const double h = static_cast<double>(m.hidden);
    const double vh = static_cast<double>(rc_.padded_vocab) * h / t;
    auto share = [this](Duration kernel, Duration compute) {
      return compute.value() > 0 ? graph_->kernel_share_index(kernel.value() / compute.value()) : uint16_t{0};
    };
    const bool split_w = p_.split_backward();
    const bool lora = rc_.training.lora.enabled();
    auto make = [&](const LayerCost* lc, int32_t layer, std::vector<double> tensors, std::vector<double> experts = {}) {
      Slot out{lc, layer, 0.0, std::move(tensors), std::move(experts)};
      if (lora) {
        // The frozen base stays out of the reductions; a layer's adapters (A, B per adapted
        // linear) are its trainable tensors and add to what its gathers carry.
        if (layer >= 0 && layer < m.num_layers) {
          out.quantized = rc_.training.lora.nf4;
          const double r = static_cast<double>(rc_.training.lora.rank);
          for (const auto& [in, outw] : memory::lora_adapted_linears(rc_, m.layer_kind(layer))) {
            out.trainable.push_back(r * in);
            out.trainable.push_back(r * outw);
          }
        }
        out.tensors.insert(out.tensors.end(), out.trainable.begin(), out.trainable.end());
      } else {
        out.trainable = out.tensors;
        out.trainable_expert = out.expert_tensors;
      }
      for (double x : out.tensors) out.params += x;
      for (double x : out.expert_tensors) out.params += x;
      out.fwd_kernel = share(lc->fwd_kernel, lc->fwd_compute);
      out.bwd_kernel = split_w ? share(lc->bwd_input_kernel, lc->bwd_compute - lc->bwd_weight_compute) : share(lc->bwd_kernel, lc->bwd_compute);
      out.weight_kernel = share(lc->bwd_weight_kernel, lc->bwd_weight_compute);
      return out;
    };
    if (s == 0 && !ideal_) {
      // Token embedding (tied to the LM head when the model ties them and the head runs on
      // stage 0, with pp 1 or under ZB-V: its gradient is complete only after the embedding's
      // backward, the last of the step).
      std::vector<double> tensors{vh};
      if (m.position == model::PositionKind::kLearned) tensors.push_back(static_cast<double>(m.max_positions) * h);
      sl.push_back(make(&wb_.embedding(), -1, tensors));
      cs[0].push_back(sl.size() - 1);
    }
    // Chunk c of stage s is virtual stage p_.vstage(s, c), with its own run of layers.
    for (int32_t c = 0; c < v_; ++c) {
      const int64_t first = rc_.chunk_first_layer(s, c);
      for (int64_t layer = first; layer < first + rc_.chunk_layers(s, c); ++layer) {
        const LayerCost* lc = &wb_.layer(layer);
        auto tensors = estimate::layer_tensors(rc_, m.layer_kind(layer));
        sl.push_back(make(lc, static_cast<int32_t>(layer), std::move(tensors.dense), std::move(tensors.expert)));
        cs[static_cast<size_t>(c)].push_back(sl.size() - 1);
      }
    }
    if (s == p_.head_stage() && !ideal_) {
      std::vector<double> tensors{m.output_params() - (m.tied_embeddings ? 0.0 : static_cast<double>(m.vocab) * h)};
      if (!m.tied_embeddings || p_.head_stage() != 0) tensors.push_back(vh);
      std::vector<double> experts;
      for (int64_t d = 0; d < rc_.training.mtp_layers; ++d) {
        // A multi-token-prediction module: its layer's tensors, projection and norms (and, off
        // stage 0, an untied model's embedding copy, once).
        auto lt = estimate::layer_tensors(rc_, m.layer_kind(m.num_layers - 1));
        tensors.insert(tensors.end(), lt.dense.begin(), lt.dense.end());
        experts.insert(experts.end(), lt.expert.begin(), lt.expert.end());
        tensors.push_back(2.0 * h * h / t + 3.0 * m.norm_params());
        if (d == 0 && p_.head_stage() != 0 && !m.tied_embeddings) tensors.push_back(vh);
      }
      sl.push_back(make(&wb_.output_layer(), static_cast<int32_t>(m.num_layers), tensors, experts));
      cs[static_cast<size_t>(v_ - 1)].push_back(sl.size() - 1);
    }
  }
}

}  // namespace stepcast::engine
