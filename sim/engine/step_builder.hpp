// stepcast step builder: turns a run into the TaskGraph of one optimizer step.
//
// Per simulated rank (one representative rank per pipeline stage, or every rank when a
// scenario makes ranks differ) the builder emits, in the stage's schedule order, each layer's
// forward / backward / weight-gradient compute task and its exposed TP/CP/EP communication (a
// collective over the rank's tensor group), the pipeline sends, the data-parallel traffic (DDP
// buckets, ZeRO-1/2 reduce-scatter and all-gather, ZeRO-3/FSDP per-layer gathers and
// reduce-scatters) and the optimizer step; then it links the stages (a forward waits for the
// previous virtual stage's send, a backward for the next one's). See step_sim.hpp for the
// mechanisms and docs/MODEL.md for the design.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "sim/config/run_config.hpp"
#include "sim/engine/task_graph.hpp"
#include "sim/estimate/workload.hpp"
#include "sim/memory/ledger.hpp"

namespace stepcast::engine {

// One layer slot of a chunk: a transformer layer, the embedding or the output layer + loss.
struct Slot {
  const estimate::LayerCost* cost;
  int32_t layer;  // global layer index; -1 embedding, num_layers = output
  double params;  // parameters on one rank (before sharding)
  // The slot's parameter tensors in registration order (DDP never splits one across buckets).
  std::vector<double> tensors;
  // Routed-expert parameters: reduced over the expert-data-parallel group in their own buckets.
  std::vector<double> expert_tensors;
  // The compute kernel in flight of each pass, as TaskGraph::kernel_share_index gives it:
  // forward, backward (its input-gradient part when the schedule splits it off), weight gradient.
  uint16_t fwd_kernel = 0, bwd_kernel = 0, weight_kernel = 0;
  // The tensors that train, in registration order: the parameter tensors, or under LoRA
  // (training.lora) the adapters alone. Gradient buckets and reduce-scatters carry these;
  // ZeRO-3 / FSDP gathers carry every parameter.
  std::vector<double> trainable{}, trainable_expert{};
  // QLoRA (training.lora.base_quantization nf4): a transformer layer's frozen weights (all but
  // its trainable adapters) are stored in 4 bits, and its ZeRO-3 / FSDP gathers carry them packed.
  bool quantized = false;
  [[nodiscard]] double expert_params() const {
    double x = 0;
    for (double t : expert_tensors) x += t;
    return x;
  }
  [[nodiscard]] double trainable_params() const {
    double x = 0;
    for (double t : trainable) x += t;
    for (double t : trainable_expert) x += t;
    return x;
  }
  [[nodiscard]] double trainable_expert_params() const {
    double x = 0;
    for (double t : trainable_expert) x += t;
    return x;
  }
};

// One data-parallel gradient bucket: its bytes, whether it holds routed-expert gradients
// (reduced over the expert-data-parallel group) and the slot whose gradient completes it.
struct GradBucket {
  double bytes = 0;
  bool expert = false;
  size_t ready_slot = 0;
};

// DDP buckets of one stage in launch order: whole tensors in reverse registration order (last
// chunk's last layer first), dense and expert gradients in separate buckets; a bucket closes
// once it reaches its cap. PyTorch DDP (BucketLayout::kDdp): the first bucket of each 1 MB,
// the rest `bucket_mb`. Megatron-Core (kMegatron): `bucket_mb` buckets in the first stage's
// first chunk, one bucket per chunk elsewhere; no bucket spans two chunks.
std::vector<GradBucket> gradient_buckets(const std::vector<Slot>& slots, const std::vector<std::vector<size_t>>& chunk_slots,
                                         double grad_bytes_per_param, const config::Parallel& p, int32_t stage);

// The tasks of one (phase, chunk, micro-batch) pass on one rank.
struct PassTasks {
  TaskId first = kNone, last = kNone;
  TaskId last_compute = kNone;  // last task before the pipeline send (activations freed here)
  // The task the previous (forward) or next (backward) virtual stage's send gates: the first
  // compute task, or an in-line ZeRO-3 gather issued before it (the receive comes first).
  TaskId entry = kNone;
  // Under parallel.pp_rendezvous: the marker the neighbour's send waits for (this stage has
  // reached its receive), before `entry`.
  TaskId ready = kNone;
  // A backward that also computed the weight gradients (nothing kept for a W pass).
  bool whole_backward = false;
};

class StepBuilder {
 public:
  StepBuilder(const config::RunConfig& rc, bool full, bool ideal, double compute_scale);

  void build();

  [[nodiscard]] std::shared_ptr<TaskGraph> graph() const { return graph_; }
  [[nodiscard]] int64_t ranks() const { return ranks_; }
  [[nodiscard]] int64_t per_stage() const { return per_stage_; }
  [[nodiscard]] const memory::MemoryLedger& ledger() const { return ledger_; }
  [[nodiscard]] const config::RunConfig& rc() const { return rc_; }
  [[nodiscard]] const estimate::WorkloadBuilder& workload() const { return wb_; }
  // The layer slots of stage s, and for each of its chunks the slot indices in forward order.
  [[nodiscard]] const std::vector<Slot>& slots(int32_t s) const { return slots_[static_cast<size_t>(s)]; }
  [[nodiscard]] const std::vector<std::vector<size_t>>& chunk_slots(int32_t s) const {
    return chunk_slots_[static_cast<size_t>(s)];
  }
  // Global rank (Megatron order) of a simulated rank.
  [[nodiscard]] int64_t global_rank(int64_t sim_rank) const {
    return full_ ? sim_rank : sim_rank * p_.tp * p_.cp * p_.dp;
  }
  [[nodiscard]] int32_t stage_of(int64_t sim_rank) const { return static_cast<int32_t>(sim_rank / per_stage_); }
  // Activations one micro-batch's pass of chunk c stores on stage s (its layers' share plus the
  // stage's other per-micro-batch terms).
  [[nodiscard]] double chunk_activation_bytes(int32_t s, int32_t c) const;
  // What that pass keeps from its input-gradient backward to its weight-gradient pass when the
  // schedule splits them (ZB-H1; 0 otherwise).
  [[nodiscard]] double chunk_weight_grad_bytes(int32_t s, int32_t c) const;
  // Pass tasks per simulated rank, indexed chunk * m + micro-batch (weight-gradient passes only
  // under ZB-H1).
  [[nodiscard]] const std::vector<std::vector<PassTasks>>& forward_passes() const { return fwd_; }
  [[nodiscard]] const std::vector<std::vector<PassTasks>>& backward_passes() const { return bwd_; }
  [[nodiscard]] const std::vector<std::vector<PassTasks>>& weight_passes() const { return wgt_; }
  // ZeRO-3 / FSDP: a compute-stream task and a data-parallel collective it waits for (the
  // layer's gather, the collectives issued in line before it). The step's breakdown books the
  // compute stream's wait for them as data-parallel communication, not pipeline bubble: all of
  // it up to the collective's end for a prefetched gather (queued behind earlier traffic on its
  // stream), only the time it ran for an in-line one (which may itself have waited for a
  // pipeline receive).
  struct DpGate {
    TaskId compute = kNone, dp = kNone;
    bool from_idle = false;  // the whole idle time up to the collective's end counts
    bool offload = false;    // an activation copy (booked as offload, not data-parallel, time)
    bool operator<(const DpGate& o) const { return compute != o.compute ? compute < o.compute : dp < o.dp; }
  };
  [[nodiscard]] const std::vector<DpGate>& dp_gates() const { return dp_gates_; }  // sorted by compute task
  // Whether a task name is a blocking pair's receive (parallel.pp_rendezvous): the receiving
  // stage's compute stream is held for the transfer that ends it.
  [[nodiscard]] bool is_receive(uint32_t name) const { return name == names_.recv_act || name == names_.recv_grad; }

 private:
  friend class RankBuilder;

  struct Names {
    uint32_t fwd, bwd, bwd_weight, tp_fwd, tp_bwd, send_act, send_grad, gather, reduce_scatter, all_reduce,
        optimizer, host, barrier, issue_gathers, copy_up, copy_down, offload_act, reload_act, recv_ready, recv_act, recv_grad, embedding_reduce;
  };

  void build_slots();
  void link_stages();
  // Compute time on simulated rank r after the compute calibration, slowdowns and jitter.
  [[nodiscard]] Tick scaled(double seconds, int64_t r, uint64_t index) const;
  // Collective groups: ranks of one replica's tensor group / one data-parallel sharding group
  // (the whole dp*cp group, or one hybrid-sharding replica's part of it) / one hybrid-sharding
  // replicate group (the same position in every replica).
  [[nodiscard]] int64_t tp_group(int64_t r) const { return full_ ? (r / (p_.tp * p_.cp)) : r; }
  [[nodiscard]] int64_t dp_group(int64_t r) const {
    if (!full_) return r;
    const int64_t local = r % per_stage_, shard = p_.tp * p_.cp * (p_.dp / p_.dp_replicate);
    return (stage_of(r) * p_.dp_replicate + local / shard) * p_.tp + r % p_.tp;
  }
  [[nodiscard]] int64_t replicate_group(int64_t r) const {
    if (!full_) return r;
    const int64_t shard = p_.tp * p_.cp * (p_.dp / p_.dp_replicate);
    return stage_of(r) * shard + (r % per_stage_) % shard;
  }

  const config::RunConfig& rc_;
  const config::Parallel& p_;
  estimate::WorkloadBuilder wb_;
  bool full_;
  bool ideal_;
  double compute_scale_ = 1.0;
  memory::MemoryLedger ledger_;
  memory::StateBytes sb_;
  double gather_bytes_ = 2, reduce_bytes_ = 2;  // ZeRO-3 / FSDP gathered weight and reduced gradient elements
  Tick p2p_ = 0;  // one pipeline send of a full-length micro-batch
  std::vector<uint32_t> nic_tx_, nic_rx_, fabric_;  // per simulated rank: its links
  int32_t pp_ = 1, v_ = 1, m_ = 1;
  int64_t per_stage_ = 1, ranks_ = 1;
  std::shared_ptr<TaskGraph> graph_;
  Names names_{};
  std::vector<std::vector<Slot>> slots_;
  std::vector<std::vector<std::vector<size_t>>> chunk_slots_;  // [stage][chunk] -> slot indices
  std::vector<std::vector<PassTasks>> fwd_, bwd_, wgt_;
  std::vector<DpGate> dp_gates_;
  // The j-th collective a rank joins in its group is the group's j-th collective.
  std::vector<std::vector<uint32_t>> tp_coll_, dp_coll_, rep_coll_;
  // Tied embeddings split across the pipeline (the head off stage 0): the all-reduce of the
  // embedding's gradient between the first stage and the head's, one collective per position
  // in the stage (tp, cp, dp), its bytes and the pair's placement. Empty when none runs.
  std::vector<uint32_t> tied_coll_;
  double tied_grad_bytes_ = 0;
  mesh::Placement tied_place_{};
  uint32_t barrier_ = kNone;
};

}  // namespace stepcast::engine
