#include "sim/engine/step_sim.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <sstream>

#include "sim/core/error.hpp"
#include "sim/cost/collectives.hpp"
#include "sim/engine/schedule.hpp"
#include "sim/estimate/workload.hpp"
#include "sim/memory/ledger.hpp"

namespace stepcast::engine {

using config::Schedule;
using cost::Collective;
using estimate::LayerCost;

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

double attention_seconds(const std::vector<estimate::Op>& ops) {
  double t = 0;
  for (const auto& o : ops) {
    if (o.kind == estimate::OpKind::kAttention) t += o.time.value();
  }
  return t;
}

// One layer slot of a chunk: a transformer layer, the embedding or the output layer + loss.
struct Slot {
  const LayerCost* cost;
  int32_t layer;       // global layer index; -1 embedding, num_layers = output
  double params;       // parameters on one rank (before sharding)
  // The slot's parameter tensors in registration order (DDP never splits one across buckets).
  std::vector<double> tensors;
  // Routed-expert parameters: reduced over the expert-data-parallel group in their own buckets.
  std::vector<double> expert_tensors;
};

struct Ids {
  TaskId first = kNone, last = kNone;
  TaskId last_compute = kNone;  // last task before the pipeline send (activations freed here)
};

class Builder {
 public:
  Builder(const config::RunConfig& rc, bool full, bool ideal, double compute_scale)
      : rc_(rc), p_(rc.parallel), wb_(rc), full_(full), ideal_(ideal), compute_scale_(compute_scale) {
    ledger_ = memory::compute_ledger(rc);
    pp_ = static_cast<int32_t>(p_.pp);
    v_ = static_cast<int32_t>(p_.vpp);
    m_ = static_cast<int32_t>(rc.num_microbatches);
    per_stage_ = full ? p_.tp * p_.cp * p_.dp : 1;
    ranks_ = per_stage_ * pp_;
    sb_ = memory::state_bytes(rc.training);
    e_ = rc.training.precision == hw::Dtype::kFp32 ? 4.0 : 2.0;
    graph_ = std::make_shared<TaskGraph>(static_cast<int32_t>(ranks_));
    build_slots();
  }

  std::shared_ptr<TaskGraph> graph() const { return graph_; }
  int64_t ranks() const { return ranks_; }
  int64_t per_stage() const { return per_stage_; }
  const memory::MemoryLedger& ledger() const { return ledger_; }
  int64_t global_rank(int64_t sim_rank) const { return full_ ? sim_rank : sim_rank * p_.tp * p_.cp * p_.dp; }
  int32_t stage_of(int64_t sim_rank) const { return static_cast<int32_t>(sim_rank / per_stage_); }
  double chunk_activation_bytes(int32_t s) const {
    const auto& st = ledger_.stages[static_cast<size_t>(s)];
    const double inflight = memory::inflight_microbatches(rc_, s);
    return inflight > 0 ? st.activations.value() / inflight / static_cast<double>(v_) : 0.0;
  }

  void build() {
    auto& g = *graph_;
    const bool has_sync = p_.dp * p_.cp > 1 && !ideal_;
    const int zero = p_.effective_zero();
    const bool fsdp = zero >= 3 && has_sync;
    const bool overlapped_p2p = p_.schedule == Schedule::kInterleaved;
    const Tick p2p = ideal_ ? 0 : to_ticks(wb_.p2p_time().value());
    const uint32_t n_fwd = g.intern("fwd"), n_bwd = g.intern("bwd"), n_bw = g.intern("bwd-weight"),
                   n_tpf = g.intern("tp-comm fwd"), n_tpb = g.intern("tp-comm bwd"), n_sendf = g.intern("send activation"),
                   n_sendb = g.intern("send gradient"), n_ag = g.intern("all-gather params"),
                   n_rs = g.intern("reduce-scatter grads"), n_ar = g.intern("all-reduce grads"),
                   n_opt = g.intern("optimizer"), n_host = g.intern("host work"), n_barrier = g.intern("barrier");
    const size_t chunks = static_cast<size_t>(v_);
    const size_t mbs = static_cast<size_t>(m_);
    // Per simulated rank: first/last task of each (phase, chunk, mb); final backward per slot.
    fwd_.assign(static_cast<size_t>(ranks_), std::vector<Ids>(chunks * mbs));
    bwd_.assign(static_cast<size_t>(ranks_), std::vector<Ids>(chunks * mbs));
    const auto& sc = rc_.scenario;

    // Collective bookkeeping: the j-th collective a rank joins in a group is shared by the group.
    std::vector<std::vector<uint32_t>> tp_coll, dp_coll;
    std::vector<uint32_t> barrier(1, kNone);
    auto tp_group = [&](int64_t r) { return full_ ? (r / (p_.tp * p_.cp)) : r; };       // same stage, dp index
    auto dp_group = [&](int64_t r) { return full_ ? (stage_of(r) * p_.tp + (r % p_.tp)) : r; };
    tp_coll.resize(static_cast<size_t>(full_ ? ranks_ / (p_.tp * p_.cp) : ranks_));
    dp_coll.resize(static_cast<size_t>(full_ ? pp_ * p_.tp : ranks_));

    auto scaled = [&](double seconds, int64_t r, uint64_t index) {
      double f = compute_scale_;
      const int64_t gr = global_rank(r);
      for (const auto& sd : sc.slowdowns) {
        const bool hit = std::find(sd.ranks.begin(), sd.ranks.end(), gr) != sd.ranks.end() ||
                         std::find(sd.stages.begin(), sd.stages.end(), stage_of(r)) != sd.stages.end();
        if (hit) f *= sd.factor;
      }
      if (sc.jitter_cv > 0) f *= jitter_factor(sc.seed, index, sc.jitter_cv);
      return to_ticks(seconds * f);
    };

    for (int64_t r = 0; r < ranks_; ++r) {
      const int32_t s = stage_of(r);
      size_t tp_j = 0, dp_j = 0;
      const auto my_tp = static_cast<size_t>(tp_group(r)), my_dp = static_cast<size_t>(dp_group(r));
      // A degraded link slows every collective of the groups its rank belongs to.
      const int64_t bad = full_ ? sc.degraded_rank : -1;
      const bool tp_degraded = bad >= 0 && static_cast<size_t>(tp_group(bad)) == my_tp;
      const bool dp_degraded = bad >= 0 && static_cast<size_t>(dp_group(bad)) == my_dp;
      auto group_task = [&](std::vector<std::vector<uint32_t>>& colls, size_t& j, Task t, Tick dur, uint32_t name) {
        const bool is_tp = &colls == &tp_coll;
        auto& list = colls[is_tp ? my_tp : my_dp];
        if ((is_tp && tp_degraded) || (!is_tp && dp_degraded)) dur = static_cast<Tick>(static_cast<double>(dur) / sc.degraded_factor);
        if (j >= list.size()) list.push_back(g.add_collective(dur, name));
        t.duration = dur;
        t.name = name;
        const TaskId id = g.add(t);
        g.join(list[j++], id);
        return id;
      };
      Task base;
      base.rank = static_cast<int32_t>(r);
      // The rank's data-parallel traffic (gradient reductions, parameter gathers) shares one
      // link: concurrent transfers split its bandwidth.
      const uint32_t dp_link = g.add_resource("rank " + std::to_string(r) + " dp link");
      Task dp_base = base;
      dp_base.resource = dp_link;
      // Host work and the step-start barrier.
      TaskId start_barrier = kNone;
      if (sc.host_rank >= 0) {
        TaskId host = kNone;
        if (global_rank(r) == sc.host_rank) {
          Task h = base;
          h.stream = Stream::kHost;
          h.kind = TaskKind::kHost;
          h.name = n_host;
          h.duration = to_ticks(sc.host_seconds);
          host = g.add(h);
        }
        Task b = base;
        b.kind = TaskKind::kBarrier;
        if (barrier[0] == kNone) barrier[0] = g.add_collective(0, n_barrier);
        b.name = n_barrier;
        start_barrier = g.add(b);
        g.join(barrier[0], start_barrier);
        g.depend(host, start_barrier);
      }

      // FSDP gathers: AG for the k-th layer use waits for the compute of use k-2 (one ahead).
      std::vector<TaskId> compute_uses;
      auto fsdp_gather = [&](const Slot& sl, TaskId& gate) {
        Task t = dp_base;
        t.stream = Stream::kDp;
        t.kind = TaskKind::kDpComm;
        t.layer = sl.layer;
        const double bytes = sl.params * e_;
        const Tick dur = to_ticks(cost::collective_time(Collective::kAllGather, core::Bytes(bytes), wb_.placements().dp_cp, rc_.hardware).value());
        const TaskId id = group_task(dp_coll, dp_j, t, dur, n_ag);
        if (compute_uses.size() >= 2) g.depend(compute_uses[compute_uses.size() - 2], id);
        gate = id;
      };

      const auto order = stage_order(p_.schedule, pp_, s, m_, v_);
      const bool split_w = p_.schedule == Schedule::kZbH1;
      std::vector<TaskId> final_bwd(slots_[static_cast<size_t>(s)].size() * chunks, kNone);
      std::vector<std::vector<TaskId>> per_mb_bwd;  // without no_sync: [mb][slot]
      if (!p_.no_sync) per_mb_bwd.assign(mbs, std::vector<TaskId>(final_bwd.size(), kNone));
      TaskId last_pipeline = start_barrier;
      uint64_t op_index = static_cast<uint64_t>(r) << 32;
      // Without no_sync, DDP finishes every backward by waiting for its gradient reductions, so
      // the compute after micro-batch k's last backward waits for k's buckets.
      std::vector<TaskId> finalize_gate(mbs, kNone);
      int32_t finalize_pending = -1;
      // Tokens of this replica's micro-batch relative to seq_len (variable-length scenario).
      const int64_t replica = full_ ? (r % per_stage_) / (p_.tp * p_.cp) : 0;
      auto length_factor = [&](int32_t mb) {
        if (sc.seq_dist.empty()) return 1.0;
        const uint64_t key = static_cast<uint64_t>(replica) * 1000003ULL + static_cast<uint64_t>(mb);
        const double z = std::sqrt(-2.0 * std::log(uniform01(sc.seq_seed, 2 * key))) *
                         std::cos(6.283185307179586 * uniform01(sc.seq_seed, 2 * key + 1));
        const double S = static_cast<double>(rc_.training.seq_len);
        double len = sc.seq_dist == "uniform" ? sc.seq_min + (sc.seq_max - sc.seq_min) * uniform01(sc.seq_seed, 2 * key)
                                              : sc.seq_median * std::exp(sc.seq_sigma * z);
        len = std::clamp(std::round(len), 1.0, S);
        return len / S;
      };
      // Linear work scales with tokens, attention with their square.
      auto by_length = [](double total, double attention, double a) { return (total - attention) * a + attention * a * a; };
      for (const auto& a : order) {
        const double lf = length_factor(a.mb);
        const auto& chunk_slots = chunk_slots_[static_cast<size_t>(s)][static_cast<size_t>(a.chunk)];
        Ids ids;
        auto add_compute = [&](Task t, Tick dur, uint32_t name) {
          t.duration = dur;
          t.name = name;
          const TaskId id = g.add(t);
          if (ids.first == kNone) ids.first = id;
          ids.last = id;
          if (start_barrier != kNone) g.depend(start_barrier, id);
          return id;
        };
        const bool fwd = a.phase == Phase::kF;
        // A layer's exposed TP/CP/EP communication: a collective over the rank's tensor group,
        // blocking on the compute stream, scaled with the micro-batch's tokens.
        auto tp_comm = [&](double seconds, uint32_t name, const Task& layer_task) {
          if (seconds <= 0 || ideal_) return;
          Task c = layer_task;
          c.kind = TaskKind::kTpComm;
          ids.last = group_task(tp_coll, tp_j, c, to_ticks(seconds * lf), name);
        };
        std::vector<const Slot*> seq;
        for (size_t k = 0; k < chunk_slots.size(); ++k) seq.push_back(&slots_[static_cast<size_t>(s)][chunk_slots[k]]);
        if (!fwd) std::reverse(seq.begin(), seq.end());
        // FSDP: each layer's gather is issued one layer ahead (after the previous layer's
        // compute is queued, before its gradient reduce-scatter); gathers and reduce-scatters
        // run on their own streams and share the rank's DP link.
        const bool gather = fsdp && (fwd ? (p_.reshard_after_forward || m_ == 1 || a.mb == 0)
                                         : (a.phase == Phase::kB && p_.reshard_after_forward));
        std::vector<TaskId> gates(seq.size(), kNone);
        if (gather && !seq.empty()) fsdp_gather(*seq[0], gates[0]);
        for (size_t si = 0; si < seq.size(); ++si) {
          const Slot* sl = seq[si];
          const size_t slot_index = static_cast<size_t>(sl - slots_[static_cast<size_t>(s)].data());
          Task t = base;
          t.layer = sl->layer;
          t.microbatch = a.mb;
          t.chunk = a.chunk;
          const TaskId gate = gates[si];
          TaskId cid;
          if (a.phase == Phase::kF) {
            t.kind = TaskKind::kForward;
            cid = add_compute(t, scaled(by_length(sl->cost->fwd_compute.value(), attention_seconds(sl->cost->fwd), lf), r, op_index++), n_fwd);
            g.depend(gate, cid);
            tp_comm(sl->cost->fwd_comm_exposed.value(), n_tpf, t);
          } else if (a.phase == Phase::kB) {
            t.kind = TaskKind::kBackward;
            const double dur = split_w ? (sl->cost->bwd_compute - sl->cost->bwd_weight_compute).value() : sl->cost->bwd_compute.value();
            cid = add_compute(t, scaled(by_length(dur, attention_seconds(sl->cost->bwd), lf), r, op_index++), n_bwd);
            g.depend(gate, cid);
            tp_comm(sl->cost->bwd_comm_exposed.value(), n_tpb, t);
          } else {
            t.kind = TaskKind::kBackwardWeight;
            cid = add_compute(t, scaled(sl->cost->bwd_weight_compute.value() * lf, r, op_index++), n_bw);
          }
          if (gather) {
            compute_uses.push_back(cid);
            if (si + 1 < seq.size()) fsdp_gather(*seq[si + 1], gates[si + 1]);
          }
          const bool grads_done = (a.phase == Phase::kB && !split_w) || a.phase == Phase::kW;
          if (grads_done) {
            final_bwd[slot_index] = ids.last;
            if (!p_.no_sync) per_mb_bwd[static_cast<size_t>(a.mb)][slot_index] = ids.last;
            // FSDP: reduce-scatter this layer's gradient (every micro-batch, or only the last when
            // unsharded gradients are accumulated).
            const bool rs_now = fsdp && (p_.reshard_after_forward || m_ == 1 || a.mb == m_ - 1);
            if (rs_now) {
              Task c = dp_base;
              c.stream = Stream::kDpReduce;
              c.kind = TaskKind::kDpComm;
              c.layer = sl->layer;
              c.microbatch = a.mb;
              const double bytes = sl->params * sb_.gradients;
              const Tick dur = to_ticks(cost::collective_time(Collective::kReduceScatter, core::Bytes(bytes), wb_.placements().dp_cp, rc_.hardware).value());
              const TaskId rid = group_task(dp_coll, dp_j, c, dur, n_rs);
              g.depend(ids.last, rid);
              dp_tail_.push_back(rid);
            }
          }
        }
        ids.last_compute = ids.last;
        // Pipeline transfer to the neighbouring virtual stage.
        const int32_t vs = a.chunk * pp_ + s;
        const bool send = (a.phase == Phase::kF && vs < pp_ * v_ - 1) || (a.phase == Phase::kB && vs > 0);
        if (send && pp_ > 1) {
          Task t = base;
          t.kind = TaskKind::kPpSend;
          t.stream = overlapped_p2p ? Stream::kPpSend : Stream::kCompute;
          t.microbatch = a.mb;
          t.chunk = a.chunk;
          t.duration = static_cast<Tick>(static_cast<double>(p2p) * lf);
          if (bad >= 0) {
            // The transfer's other end: the same position on the neighbouring stage.
            const int32_t vs_next = a.phase == Phase::kF ? vs + 1 : vs - 1;
            const int64_t peer = static_cast<int64_t>(vs_next % pp_) * per_stage_ + (r % per_stage_);
            if (bad == r || bad == peer) t.duration = static_cast<Tick>(static_cast<double>(t.duration) / sc.degraded_factor);
          }
          t.name = a.phase == Phase::kF ? n_sendf : n_sendb;
          const TaskId sid = g.add(t);
          g.depend(ids.last, sid);
          ids.last = sid;
        }
        if (a.phase == Phase::kF) {
          fwd_[static_cast<size_t>(r)][static_cast<size_t>(a.chunk) * mbs + static_cast<size_t>(a.mb)] = ids;
        } else if (a.phase == Phase::kB) {
          bwd_[static_cast<size_t>(r)][static_cast<size_t>(a.chunk) * mbs + static_cast<size_t>(a.mb)] = ids;
        }
        last_pipeline = ids.last;
        if (finalize_pending >= 0) {
          finalize_gate[static_cast<size_t>(finalize_pending)] = ids.first;
          finalize_pending = -1;
        }
        if ((a.phase == Phase::kB && !split_w) || a.phase == Phase::kW) finalize_pending = a.mb;
      }
      // Data-parallel gradient reduction (DDP buckets / ZeRO-1/2 reduce-scatter) in reverse
      // layer order, launched as the gradients become final.
      std::vector<TaskId> reductions;
      if (has_sync && zero < 3) {
        const Collective op = zero >= 1 ? Collective::kReduceScatter : Collective::kAllReduce;
        auto emit_buckets = [&](const std::vector<TaskId>& ready_of_slot, int32_t mb) {
          // Dense and expert gradients fill separate buckets: dense ones reduce over dp x cp,
          // expert ones over the expert-data-parallel group.
          struct Fill {
            double filled = 0, cap = 1e6;
            const mesh::Placement* where;
          };
          Fill dense{0, 1e6, &wb_.placements().dp_cp}, expert{0, 1e6, &wb_.placements().edp};
          TaskId gate = kNone;
          auto flush = [&](Fill& f) {
            if (f.filled <= 0) return;
            Task c = dp_base;
            c.stream = Stream::kDpReduce;
            c.kind = TaskKind::kDpComm;
            c.microbatch = mb;
            const Tick dur = to_ticks(cost::collective_time(op, core::Bytes(f.filled), *f.where, rc_.hardware).value());
            const TaskId id = group_task(dp_coll, dp_j, c, dur, zero >= 1 ? n_rs : n_ar);
            g.depend(p_.grad_reduce_overlap ? gate : last_pipeline, id);
            reductions.push_back(id);
            if (!p_.no_sync) g.depend(id, finalize_gate[static_cast<size_t>(mb)]);
            f.filled = 0;
            f.cap = p_.bucket_mb * 1e6;
          };
          // Reverse order of gradient readiness: chunks from last, slots from last.
          for (int32_t c = v_ - 1; c >= 0; --c) {
            const auto& cs = chunk_slots_[static_cast<size_t>(s)][static_cast<size_t>(c)];
            for (auto it = cs.rbegin(); it != cs.rend(); ++it) {
              const Slot& sl = slots_[static_cast<size_t>(s)][*it];
              gate = ready_of_slot[*it];
              // Whole tensors, last registered first; a bucket closes once it reaches its cap.
              for (auto t_it = sl.expert_tensors.rbegin(); t_it != sl.expert_tensors.rend(); ++t_it) {
                expert.filled += *t_it * sb_.gradients;
                if (expert.filled >= expert.cap) flush(expert);
              }
              for (auto t_it = sl.tensors.rbegin(); t_it != sl.tensors.rend(); ++t_it) {
                dense.filled += *t_it * sb_.gradients;
                if (dense.filled >= dense.cap) flush(dense);
              }
            }
          }
          flush(expert);
          flush(dense);
        };
        if (p_.no_sync) {
          emit_buckets(final_bwd, m_ - 1);
        } else {
          for (int32_t mb = 0; mb < m_; ++mb) emit_buckets(per_mb_bwd[static_cast<size_t>(mb)], mb);
        }
      }
      // Optimizer after the stage's gradients are reduced.
      Task o = base;
      o.kind = TaskKind::kOptimizer;
      o.name = n_opt;
      o.duration = ideal_ ? 0 : scaled(estimate::optimizer_time_s(rc_, ledger_.stages[static_cast<size_t>(s)]), r, op_index++);
      const TaskId oid = g.add(o);
      g.depend(last_pipeline, oid);
      for (TaskId id : reductions) g.depend(id, oid);
      for (TaskId id : dp_tail_) g.depend(id, oid);
      dp_tail_.clear();
      // ZeRO-1/2: all-gather the updated shards (only the first bucket is exposed when the
      // gathers overlap the next step's forward).
      if (has_sync && (zero == 1 || zero == 2)) {
        const auto& st = ledger_.stages[static_cast<size_t>(s)];
        const double total = st.params * sb_.weights;
        const double bucket = p_.bucket_mb * 1e6;
        const double count = p_.param_gather_overlap ? 1.0 : std::ceil(total / bucket);
        for (int64_t k = 0; k < static_cast<int64_t>(count); ++k) {
          const double bytes = std::min(bucket, total - static_cast<double>(k) * bucket);
          Task c = dp_base;
          c.stream = Stream::kDp;
          c.kind = TaskKind::kDpComm;
          const Tick dur = to_ticks(cost::collective_time(Collective::kAllGather, core::Bytes(std::max(bytes, 0.0)), wb_.placements().dp_cp, rc_.hardware).value());
          const TaskId id = group_task(dp_coll, dp_j, c, dur, n_ag);
          g.depend(oid, id);
        }
      }
      last_pipeline_.push_back(last_pipeline);
    }

    // Cross-stage dependencies: each virtual stage's forward waits for the previous one's send,
    // each backward for the next one's.
    if (pp_ > 1) {
      for (int64_t r = 0; r < ranks_; ++r) {
        const int32_t s = stage_of(r);
        const int64_t w = r % per_stage_;
        for (int32_t c = 0; c < v_; ++c) {
          const int32_t vs = c * pp_ + s;
          for (int32_t mb = 0; mb < m_; ++mb) {
            const size_t k = static_cast<size_t>(c) * mbs + static_cast<size_t>(mb);
            if (vs > 0) {
              const int32_t ps = (vs - 1) % pp_, pc = (vs - 1) / pp_;
              const int64_t pr = static_cast<int64_t>(ps) * per_stage_ + w;
              g.depend(fwd_[static_cast<size_t>(pr)][static_cast<size_t>(pc) * mbs + static_cast<size_t>(mb)].last,
                       fwd_[static_cast<size_t>(r)][k].first);
            }
            if (vs < pp_ * v_ - 1) {
              const int32_t ns = (vs + 1) % pp_, nc = (vs + 1) / pp_;
              const int64_t nr = static_cast<int64_t>(ns) * per_stage_ + w;
              g.depend(bwd_[static_cast<size_t>(nr)][static_cast<size_t>(nc) * mbs + static_cast<size_t>(mb)].last,
                       bwd_[static_cast<size_t>(r)][k].first);
            }
          }
        }
      }
    }
  }

  const std::vector<std::vector<Ids>>& fwd_ids() const { return fwd_; }
  const std::vector<std::vector<Ids>>& bwd_ids() const { return bwd_; }
  const estimate::WorkloadBuilder& workload() const { return wb_; }

 private:
  void build_slots() {
    const auto& m = rc_.model;
    slots_.resize(static_cast<size_t>(pp_));
    chunk_slots_.resize(static_cast<size_t>(pp_));
    for (int32_t s = 0; s < pp_; ++s) {
      const auto& st = ledger_.stages[static_cast<size_t>(s)];
      const int64_t first = rc_.stage_first_layer[static_cast<size_t>(s)];
      const int64_t n = st.layers;
      auto& sl = slots_[static_cast<size_t>(s)];
      auto& cs = chunk_slots_[static_cast<size_t>(s)];
      cs.assign(static_cast<size_t>(v_), {});
      // Interleaved chunk c of stage s holds layers [(c*p + s) * L/(p*v), ...): with even
      // splits the stage's layers are split into v equal runs by chunk.
      const int64_t per_chunk = std::max<int64_t>(1, n / v_);
      const double t = static_cast<double>(p_.tp);
      const double h = static_cast<double>(m.hidden);
      const double vh = static_cast<double>(rc_.padded_vocab) * h / t;
      auto make = [](const LayerCost* lc, int32_t layer, std::vector<double> tensors, std::vector<double> experts = {}) {
        Slot out{lc, layer, 0.0, std::move(tensors), std::move(experts)};
        for (double x : out.tensors) out.params += x;
        for (double x : out.expert_tensors) out.params += x;
        return out;
      };
      if (s == 0 && !ideal_) {
        // Token embedding (tied to the LM head when the model ties them and pp == 1: its
        // gradient is complete only after the embedding's backward, the last of the step).
        std::vector<double> tensors{vh};
        if (m.position == model::PositionKind::kLearned) tensors.push_back(static_cast<double>(m.max_positions) * h);
        sl.push_back(make(&wb_.embedding(), -1, tensors));
        cs[0].push_back(sl.size() - 1);
      }
      for (int64_t i = 0; i < n; ++i) {
        const int64_t layer = first + i;
        const bool moe = m.is_moe_layer(layer);
        const LayerCost* lc = moe ? &wb_.moe_layer() : &wb_.dense_layer();
        const double attn = m.attention_params() / t;
        std::vector<double> tensors{0.75 * attn, 0.25 * attn};  // QKV (+ norm), output projection
        std::vector<double> expert_tensors;
        if (!moe) {
          const double mlp = m.dense_mlp_params() / t;
          tensors.push_back(0.5 * mlp);
          tensors.push_back(0.5 * mlp);
        } else {
          const auto& mo = m.moe;
          const double experts = static_cast<double>(mo.num_experts) / static_cast<double>(p_.ep) * m.expert_params() /
                                 static_cast<double>(p_.etp);
          tensors.push_back(h * static_cast<double>(mo.num_experts));  // router
          if (mo.shared_experts > 0) {
            tensors.push_back(static_cast<double>(m.mlp_matrices()) * h * static_cast<double>(mo.shared_experts * mo.shared_expert_ffn) / t);
          }
          expert_tensors.push_back(experts);
        }
        sl.push_back(make(lc, static_cast<int32_t>(layer), tensors, expert_tensors));
        const int64_t c = std::min<int64_t>(v_ - 1, i / per_chunk);
        cs[static_cast<size_t>(c)].push_back(sl.size() - 1);
      }
      if (s == pp_ - 1 && !ideal_) {
        std::vector<double> tensors{m.output_params() - (m.tied_embeddings ? 0.0 : static_cast<double>(m.vocab) * h)};
        if (!m.tied_embeddings || pp_ > 1) tensors.push_back(vh);
        sl.push_back(make(&wb_.output_layer(), static_cast<int32_t>(m.num_layers), tensors));
        cs[static_cast<size_t>(v_ - 1)].push_back(sl.size() - 1);
      }
    }
  }

  const config::RunConfig& rc_;
  const config::Parallel& p_;
  estimate::WorkloadBuilder wb_;
  bool full_;
  bool ideal_;
  double compute_scale_ = 1.0;
  memory::MemoryLedger ledger_;
  memory::StateBytes sb_;
  double e_ = 2;
  int32_t pp_ = 1, v_ = 1, m_ = 1;
  int64_t per_stage_ = 1, ranks_ = 1;
  std::shared_ptr<TaskGraph> graph_;
  std::vector<std::vector<Slot>> slots_;
  std::vector<std::vector<std::vector<size_t>>> chunk_slots_;  // [stage][chunk] -> slot indices
  std::vector<std::vector<Ids>> fwd_, bwd_;
  std::vector<TaskId> dp_tail_;
  std::vector<TaskId> last_pipeline_;
};

// Metrics read from the timeline as it runs.
class StepObserver : public Observer {
 public:
  StepObserver(const Builder& b, int32_t pp, int32_t m, int32_t chunks) : b_(b), m_(m), chunks_(chunks) {
    const auto n = static_cast<size_t>(b.ranks());
    busy_.assign(n, 0);
    pipe_end_.assign(n, 0);
    inflight_.assign(n, 0);
    max_inflight_.assign(n, 0);
    act_.assign(n, 0);
    peak_act_.assign(n, 0);
    wait_.assign(n, 0);
    chunk_bytes_.resize(static_cast<size_t>(pp));
    for (int32_t s = 0; s < pp; ++s) chunk_bytes_[static_cast<size_t>(s)] = b.chunk_activation_bytes(s);
  }
  void on_start(const TaskGraph& g, TaskId id, Tick ready, Tick start) override {
    const Task& t = g.task(id);
    wait_[static_cast<size_t>(t.rank)] += start - ready;
  }
  void on_finish(const TaskGraph& g, TaskId id, Tick finish) override {
    const Task& t = g.task(id);
    const auto r = static_cast<size_t>(t.rank);
    const bool pipeline = t.kind == TaskKind::kForward || t.kind == TaskKind::kBackward ||
                          t.kind == TaskKind::kBackwardWeight || t.kind == TaskKind::kTpComm ||
                          (t.kind == TaskKind::kPpSend && t.stream == Stream::kCompute);
    if (pipeline && t.stream == Stream::kCompute) {
      busy_[r] += t.duration;
      pipe_end_[r] = std::max(pipe_end_[r], finish);
    }
    // Activation accounting per chunk: a chunk's forward stores its activations when its first
    // layer starts storing; approximated at the chunk's first forward op, released at the end of
    // its backward (first/last ops identified by the builder).
    if (t.microbatch < 0) return;
    const size_t k = static_cast<size_t>(t.chunk) * static_cast<size_t>(m_) + static_cast<size_t>(t.microbatch);
    if (t.kind == TaskKind::kForward && b_.fwd_ids()[r][k].first == id) {
      ++inflight_[r];
      max_inflight_[r] = std::max(max_inflight_[r], inflight_[r]);
      act_[r] += chunk_bytes_[static_cast<size_t>(b_.stage_of(t.rank))];
      peak_act_[r] = std::max(peak_act_[r], act_[r]);
    }
    if ((t.kind == TaskKind::kBackward || t.kind == TaskKind::kTpComm || t.kind == TaskKind::kPpSend) &&
        !b_.bwd_ids()[r].empty() && b_.bwd_ids()[r][k].last_compute == id) {
      --inflight_[r];
      act_[r] -= chunk_bytes_[static_cast<size_t>(b_.stage_of(t.rank))];
    }
  }

  std::vector<Tick> busy_, pipe_end_, wait_;
  std::vector<int64_t> inflight_, max_inflight_;
  std::vector<double> act_, peak_act_;

 private:
  const Builder& b_;
  int32_t m_ = 1, chunks_ = 1;
  std::vector<double> chunk_bytes_;
};

}  // namespace

SimResult simulate_step(const config::RunConfig& rc, const SimOptions& opt) {
  const bool full = opt.full || rc.scenario.present;
  if (full && opt.max_tasks > 0) {
    // Size the all-ranks graph from the symmetric one before building it (about 100 bytes
    // of memory per task), and refuse clearly rather than run out of memory.
    Builder probe(rc, false, opt.ideal, opt.compute_scale);
    probe.build();
    const double per_stage = static_cast<double>(rc.parallel.tp * rc.parallel.cp * rc.parallel.dp);
    const double estimate = static_cast<double>(probe.graph()->size()) * per_stage;
    if (estimate > static_cast<double>(opt.max_tasks)) {
      char buf[320];
      std::snprintf(buf, sizeof buf,
                    "simulating every rank needs about %.0f million tasks (~%.0f GiB), over the limit of %.0f million; "
                    "drop the scenario to simulate one rank per stage, or raise the limit",
                    estimate / 1e6, estimate * 100.0 / 1073741824.0, static_cast<double>(opt.max_tasks) / 1e6);
      throw core::UserError(buf);
    }
  }
  Builder b(rc, full, opt.ideal, opt.compute_scale);
  if (opt.progress) opt.progress("building", 0.0);
  b.build();
  auto graph = b.graph();
  Engine eng(*graph);
  if (opt.progress) {
    opt.progress("simulating", 0.0);
    eng.set_progress([&](double f) { opt.progress("simulating", f); });
  }
  StepObserver obs(b, static_cast<int32_t>(rc.parallel.pp), static_cast<int32_t>(rc.num_microbatches),
                   static_cast<int32_t>(rc.parallel.vpp));
  eng.add_observer(&obs);
  const RunStats stats = eng.run();

  SimResult out;
  out.full = full;
  out.events = stats.events;
  out.tasks = graph->size();
  out.ranks_simulated = b.ranks();
  const int64_t pp = rc.parallel.pp;
  out.stages.assign(static_cast<size_t>(pp), StageStats{});
  out.rank_wait_s.resize(static_cast<size_t>(b.ranks()));
  for (int64_t r = 0; r < b.ranks(); ++r) {
    const auto ri = static_cast<size_t>(r);
    const double w = to_seconds(obs.wait_[ri]);
    out.rank_wait_s[ri] = w;
    out.collective_wait_s += w;
    out.max_rank_wait_s = std::max(out.max_rank_wait_s, w);
    auto& st = out.stages[static_cast<size_t>(b.stage_of(r))];
    st.busy_s = std::max(st.busy_s, to_seconds(obs.busy_[ri]));
    st.pipeline_end_s = std::max(st.pipeline_end_s, to_seconds(obs.pipe_end_[ri]));
    st.max_inflight = std::max<int64_t>(st.max_inflight, obs.max_inflight_[ri]);
    st.peak_activation_bytes = std::max(st.peak_activation_bytes, obs.peak_act_[ri]);
  }
  const auto& ledger = b.ledger();
  for (int64_t s = 0; s < pp; ++s) {
    auto& st = out.stages[static_cast<size_t>(s)];
    const auto& ls = ledger.stages[static_cast<size_t>(s)];
    st.peak_memory_bytes = (ls.resident() - ls.activations).value() + st.peak_activation_bytes +
                           std::max(ls.transient, ls.logits).value();
    if (st.peak_memory_bytes > out.memory_timeline_peak_bytes) {
      out.memory_timeline_peak_bytes = st.peak_memory_bytes;
      out.memory_peak_stage = s;
    }
  }

  // Output contract from the timeline.
  auto& e = out.step;
  e.memory = ledger;
  e.step_time_s = to_seconds(stats.makespan);
  double span = 0;
  size_t crit = 0;
  for (size_t s = 0; s < out.stages.size(); ++s) {
    span = std::max(span, out.stages[s].pipeline_end_s);
    if (out.stages[s].busy_s > out.stages[crit].busy_s) crit = s;
  }
  e.pipeline_time_s = span;
  const double bubble = std::max(0.0, span - out.stages[crit].busy_s);
  e.bubble_fraction = span > 0 ? bubble / span : 0.0;
  const double tokens = static_cast<double>(rc.tokens_per_step());
  const double gpus = static_cast<double>(rc.cluster.num_gpus);
  e.tokens_per_s = tokens / e.step_time_s;
  e.tokens_per_s_per_gpu = e.tokens_per_s / gpus;
  e.model_flops_per_step = estimate::model_flops_per_step(rc);
  const double peak = rc.hardware.peak_for(rc.training.precision).value();
  e.mfu = e.model_flops_per_step / (e.step_time_s * gpus * peak);
  e.tflops_per_gpu = e.model_flops_per_step / (e.step_time_s * gpus) / 1e12;

  // Breakdown on the critical stage: compute and TP comm from the tasks it ran.
  const double m = static_cast<double>(rc.num_microbatches);
  const auto& ls = ledger.stages[crit];
  const estimate::StageCost sc = estimate::stage_cost(rc, b.workload(), static_cast<int64_t>(crit));
  const double rec = sc.recompute, tp = sc.tp, cp = sc.cp, ep = sc.ep, compute = sc.compute;
  e.hfu = e.mfu * (sc.model_flops > 0 ? sc.hardware_flops / sc.model_flops : 1.0);
  auto& br = e.breakdown;
  br.compute = m * compute;
  br.recompute = m * rec;
  br.exposed_comm["tp"] = m * tp;
  br.exposed_comm["cp"] = m * cp;
  br.exposed_comm["ep"] = m * ep;
  br.exposed_comm["pp"] = std::max(0.0, out.stages[crit].busy_s - m * (compute + tp + cp + ep));
  br.bubble = bubble;
  br.optimizer = estimate::optimizer_time_s(rc, ls);
  br.exposed_comm["dp"] = std::max(0.0, e.step_time_s - span - br.optimizer);
  e.stage_fwd_s.assign(static_cast<size_t>(pp), 0);
  e.stage_bwd_s.assign(static_cast<size_t>(pp), 0);

  if (opt.keep_timeline) {
    out.graph = graph;
    out.start = eng.start_times();
    out.finish = eng.finish_times();
    out.rank_ids.resize(static_cast<size_t>(b.ranks()));
    for (int64_t r = 0; r < b.ranks(); ++r) out.rank_ids[static_cast<size_t>(r)] = b.global_rank(r);
  }
  return out;
}

namespace {

void append_us(std::string& out, Tick t) {
  // Microseconds with picosecond resolution, printed exactly.
  const Tick us = t / 1'000'000, rem = t % 1'000'000;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%lld.%06lld", static_cast<long long>(us), static_cast<long long>(rem));
  out += buf;
}

}  // namespace

std::string trace_json(const config::RunConfig& rc, const SimResult& r, const std::vector<int64_t>& only_ranks, bool operators) {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  if (!r.graph) return out + "]}\n";
  std::unique_ptr<estimate::WorkloadBuilder> ops_wb;
  if (operators) ops_wb = std::make_unique<estimate::WorkloadBuilder>(rc);
  const bool split_w = rc.parallel.schedule == Schedule::kZbH1;
  const TaskGraph& g = *r.graph;
  const int64_t per_stage = r.full ? rc.parallel.tp * rc.parallel.cp * rc.parallel.dp : 1;
  std::vector<char> keep(r.rank_ids.size(), only_ranks.empty() ? 1 : 0);
  for (size_t i = 0; i < r.rank_ids.size(); ++i) {
    for (int64_t want : only_ranks) {
      if (r.rank_ids[i] == want) keep[i] = 1;
    }
  }
  bool first = true;
  auto sep = [&]() {
    if (!first) out += ",\n";
    first = false;
  };
  for (size_t i = 0; i < r.rank_ids.size(); ++i) {
    if (!keep[i]) continue;
    sep();
    out += "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + std::to_string(r.rank_ids[i]) +
           ",\"args\":{\"name\":\"rank " + std::to_string(r.rank_ids[i]) + " (stage " +
           std::to_string(static_cast<int64_t>(i) / per_stage) + ")\"}}";
    for (int sidx = 0; sidx < static_cast<int>(Stream::kCount); ++sidx) {
      sep();
      out += "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + std::to_string(r.rank_ids[i]) +
             ",\"tid\":" + std::to_string(sidx) + ",\"args\":{\"name\":\"" + to_string(static_cast<Stream>(sidx)) + "\"}}";
    }
  }
  const int64_t L = rc.model.num_layers;
  for (TaskId id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    if (!keep[static_cast<size_t>(t.rank)]) continue;
    if (t.duration == 0 && t.kind != TaskKind::kBarrier) continue;
    std::string name;
    if (t.layer == -1 && t.microbatch >= 0 && (t.kind == TaskKind::kForward || t.kind == TaskKind::kBackward)) {
      name = "embedding ";
    } else if (t.layer == L) {
      name = "output+loss ";
    } else if (t.layer >= 0) {
      name = "L" + std::to_string(t.layer) + " ";
    }
    name += g.name(t.name);
    if (t.microbatch >= 0) name += " mb" + std::to_string(t.microbatch);
    if (rc.parallel.vpp > 1 && t.microbatch >= 0) name += " c" + std::to_string(t.chunk);
    sep();
    out += "{\"ph\":\"X\",\"name\":\"" + name + "\",\"cat\":\"" + to_string(t.kind) + "\",\"pid\":" +
           std::to_string(r.rank_ids[static_cast<size_t>(t.rank)]) + ",\"tid\":" +
           std::to_string(static_cast<int>(t.stream)) + ",\"ts\":";
    append_us(out, r.start[id]);
    out += ",\"dur\":";
    append_us(out, t.duration);
    out += "}";
    if (ops_wb && (t.kind == TaskKind::kForward || t.kind == TaskKind::kBackward || t.kind == TaskKind::kBackwardWeight)) {
      // Nested operator slices: the layer's compute operators in order, scaled to the task's
      // simulated duration (which includes slowdowns, jitter and sequence-length scaling).
      const estimate::LayerCost& lc = t.layer == -1  ? ops_wb->embedding()
                                      : t.layer == L ? ops_wb->output_layer()
                                      : rc.model.is_moe_layer(t.layer) ? ops_wb->moe_layer()
                                                                       : ops_wb->dense_layer();
      const auto& list = t.kind == TaskKind::kForward ? lc.fwd : lc.bwd;
      double total = 0;
      for (const auto& o : list) {
        const bool in_task = o.kind != estimate::OpKind::kComm &&
                             (t.kind == TaskKind::kBackwardWeight ? o.weight_grad
                                                                   : !(split_w && t.kind == TaskKind::kBackward && o.weight_grad));
        if (in_task) total += o.time.value();
      }
      Tick at = r.start[id];
      for (const auto& o : list) {
        const bool in_task = o.kind != estimate::OpKind::kComm &&
                             (t.kind == TaskKind::kBackwardWeight ? o.weight_grad
                                                                   : !(split_w && t.kind == TaskKind::kBackward && o.weight_grad));
        if (!in_task || total <= 0) continue;
        const auto dur = static_cast<Tick>(static_cast<double>(t.duration) * o.time.value() / total);
        sep();
        out += "{\"ph\":\"X\",\"name\":\"" + o.name + "\",\"cat\":\"op\",\"pid\":" +
               std::to_string(r.rank_ids[static_cast<size_t>(t.rank)]) + ",\"tid\":" +
               std::to_string(static_cast<int>(t.stream)) + ",\"ts\":";
        append_us(out, at);
        out += ",\"dur\":";
        append_us(out, dur);
        out += "}";
        at += dur;
      }
    }
  }
  out += "\n]}\n";
  return out;
}

}  // namespace stepcast::engine
