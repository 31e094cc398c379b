// stepcast workload: what one rank runs for one micro-batch, per layer kind, with costs.
//
// The builder turns model + layout into operators (GEMMs with exact per-rank shapes, attention,
// element-wise passes, and the collectives the layout implies: TP all-reduce or AG/RS under SP,
// CP ring K/V exchange or Ulysses all-to-all, EP dispatch/combine all-to-all). Each operator
// gets its duration from sim/cost. Layers of one kind cost the same, so a stage is a count of
// dense layers, MoE layers and, on the ends, the embedding and the output layer + loss.
//
// Units: seconds, FLOPs, bytes. Shapes per rank: T = micro_batch * seq_len / cp tokens;
// heads, ffn, experts and vocab divided by their parallel degree.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "sim/config/run_config.hpp"
#include "sim/cost/collectives.hpp"
#include "sim/cost/compute.hpp"
#include "sim/estimate/moe_routing.hpp"

namespace stepcast::estimate {

// kHost: host-side work the GPU waits for (its time is on the layer's critical path).
enum class OpKind { kGemm, kAttention, kElementwise, kComm, kHost };
enum class CommKind { kNone, kTp, kCp, kEp, kPp, kDp };
const char* to_string(CommKind k);

// Time `comm` seconds of communication add to `compute` seconds they run beside: what
// outlasts the compute, or the compute's slowdown while they share the GPU (`slow` = share /
// (1 - share) of the hidden time), whichever is longer. `waits`: time the collectives spend
// beside the compute waiting for its kernels to free SMs (they hold their stream but do not
// slow the compute yet).
double beside_compute(double comm, double compute, double slow, double waits = 0);

struct Op {
  std::string name;
  OpKind kind = OpKind::kGemm;
  CommKind comm = CommKind::kNone;
  core::Duration time;
  core::Flops flops;           // useful model FLOPs of this op (0 for comm)
  core::Bytes bytes;           // comm payload (nccl-tests convention) or HBM traffic
  core::Duration hidden_by;    // compute it can overlap with (TP overlap, CP ring); 0 = exposed
  double nic_bytes = 0;        // comm: bytes this rank sends over its NIC (0 inside a node)
  // Chunked overlap (TP communication overlap): the first of `overlap_chunks` pieces cannot
  // hide, and the overlapped GEMM slows by the SM share the communication kernels take.
  double overlap_chunks = 0;
  double overlap_sm_fraction = 0;
  bool weight_grad = false;    // backward weight-gradient GEMM (zero-bubble schedules defer it)
  // What an executor needs to run the op for real (stepcast validate): the GEMM or attention
  // shape, the collective, and the bytes a forward op keeps for backward under autograd's
  // rules (a linear keeps its input, a norm and an activation theirs, attention its q, k, v;
  // unfused attention also the probabilities, in `score_bytes`, which selective recompute
  // drops). `held_bytes`: tensors live until the op's slot finishes backward that are not
  // layer activations (the logits and the loss's fp32 copy).
  cost::GemmShape gemm;
  cost::AttentionShape attention;
  bool attention_backward = false;
  cost::Collective collective = cost::Collective::kAllReduce;
  double saved_bytes = 0;
  double score_bytes = 0;
  double held_bytes = 0;
};

// Costs of one layer kind for one micro-batch on one rank.
struct LayerCost {
  std::vector<Op> fwd;
  std::vector<Op> bwd;  // includes recomputed forward work when recompute is on
  core::Duration fwd_compute, bwd_compute, bwd_weight_compute, recompute;
  core::Duration host;  // part of the compute the GPU spends waiting for host-side work (kHost ops)
  core::Duration fwd_attention, bwd_attention;     // attention-core part of the compute
  core::Duration fwd_comm_exposed, bwd_comm_exposed;  // comm on the compute critical path
  core::Duration tp_exposed, cp_exposed, ep_exposed;  // split of the exposed comm (fwd+bwd)
  // NIC bytes moved during the exposed comm (each op's NIC bytes times its exposed fraction):
  // the simulator runs the exposed comm as a flow over the rank's NIC when this is non-zero.
  double fwd_exposed_nic_bytes = 0, bwd_exposed_nic_bytes = 0;
  // Exposed comm time of the operators that cross the NIC (they share it with DP traffic),
  // per pass and split by kind (fwd + bwd).
  core::Duration fwd_exposed_nic_comm, bwd_exposed_nic_comm;
  core::Duration tp_exposed_nic, cp_exposed_nic, ep_exposed_nic;
  // A pass's exposed comm in execution order (the backward runs its operators last to first),
  // as runs of operators that cross the NIC or do not: the simulator runs each NIC-crossing run
  // as its own flow at its own rate between the on-node ones, so DP traffic on the NIC shares an
  // expert all-to-all only while it runs, not over the expert-TP gathers beside it. Empty when
  // the pass's exposed comm is all of one kind (it runs as one task).
  struct CommRun {
    core::Duration time;
    double nic_bytes = 0;
  };
  std::vector<CommRun> fwd_comm_runs, bwd_comm_runs;
  // The kernel in flight at a random moment of each pass (length-biased mean of its GPU
  // kernels, sum t^2 / sum t): what a collective issued beside the pass waits for its SMs.
  core::Duration fwd_kernel, bwd_kernel, bwd_input_kernel, bwd_weight_kernel;
  core::Flops model_flops;     // forward + backward, no recompute
  core::Flops hardware_flops;  // including recomputed forward
  ExpertLoad expert_load;      // MoE layers: routing statistics of the busiest expert rank
  [[nodiscard]] core::Duration fwd_time() const { return fwd_compute + fwd_comm_exposed; }
  [[nodiscard]] core::Duration bwd_time() const { return bwd_compute + bwd_comm_exposed; }
};

// A transformer layer's parameters on one rank as the tensors a framework registers (gradient
// buckets hold whole tensors): QKV (+ norm) and output projection, the MLP's two halves, or
// for an MoE layer the router, shared experts and, separately, the routed experts.
struct LayerTensors {
  std::vector<double> dense;
  std::vector<double> expert;
};
LayerTensors layer_tensors(const config::RunConfig& rc, model::LayerKind kind);
inline LayerTensors layer_tensors(const config::RunConfig& rc, bool moe) {
  return layer_tensors(rc, model::LayerKind{model::Mixer::kAttention, moe ? model::Ffn::kMoe : model::Ffn::kDense});
}

struct GroupPlacements {
  mesh::Placement tp, cp, ep, dp, pp_neighbour;
  mesh::Placement etp;  // the expert-tensor-parallel group (routed experts' weights split over it)
  // The groups that shard the ZeRO state and run its reduce-scatters and gathers: dense
  // parameters over dp*cp, routed experts over the expert-data-parallel group; under hybrid
  // sharding (parallel.dp_replicate > 1) one replica's part of each.
  mesh::Placement dp_cp, edp;
  // Hybrid sharding: where each reduced shard is all-reduced across the replicas (size 1
  // otherwise).
  mesh::Placement dp_replicate, edp_replicate;
  mesh::Placement zero3;  // where ZeRO-3 / FSDP gathers and reduce-scatters run (dp_cp, or flat)
};

// What one layout's layers cost per micro-batch: each layer kind (with the run's recompute,
// and as recompute full leaves it where it covers only some layers), the embedding and the
// output layer.
struct WorkloadCosts {
  struct KindCost {
    model::LayerKind kind;
    LayerCost cost;
    LayerCost kept;  // the layer as recompute full leaves it (partial recompute)
  };
  std::vector<KindCost> kinds;
  LayerCost embedding, output;
};

// Layer costs shared between the layouts of one search that differ only where a layer's cost
// does not: the pipeline split, the virtual stages, the schedule and how many layers full
// recomputation covers (the planner scores hundreds of thousands of layouts, most of them
// variations of one another). A layout matches an earlier one when every other parallel
// setting, the micro-batch count and the padded vocabulary are equal; the model, hardware,
// cluster and training blocks must be those of the search (one cache per search). Entries keep
// each layer cost's totals, not its operator lists (LayerCost::fwd and bwd are empty), which is
// all the analytical estimate reads. Holds at most `capacity` layouts, the oldest going first.
// Not thread-safe: one per worker.
class WorkloadCache {
 public:
  explicit WorkloadCache(size_t capacity = 4096) : capacity_(capacity) {}
  [[nodiscard]] std::shared_ptr<const WorkloadCosts> find(const config::RunConfig& rc) const;
  void insert(const config::RunConfig& rc, std::shared_ptr<const WorkloadCosts> costs);
  [[nodiscard]] size_t hits() const { return hits_; }
  [[nodiscard]] size_t misses() const { return misses_; }

 private:
  struct Key {
    config::Parallel parallel;  // with the settings that do not change a layer's cost reset
    int64_t microbatches = 0, padded_vocab = 0;
    bool operator==(const Key&) const = default;
  };
  static Key key_of(const config::RunConfig& rc);
  static size_t hash_of(const Key& k);
  size_t capacity_;
  std::unordered_multimap<size_t, std::pair<Key, std::shared_ptr<const WorkloadCosts>>> entries_;
  std::deque<std::pair<size_t, const WorkloadCosts*>> order_;  // insertion order, for eviction
  mutable size_t hits_ = 0, misses_ = 0;
};

class WorkloadBuilder {
 public:
  explicit WorkloadBuilder(const config::RunConfig& rc);
  // With a cache: the layer costs of a matching earlier layout (operator lists empty), or
  // built and stored for the next.
  WorkloadBuilder(const config::RunConfig& rc, WorkloadCache* cache);

  // A transformer layer (attention + dense MLP, or attention + MoE) with the run's recompute.
  [[nodiscard]] const LayerCost& dense_layer() const { return kind_cost({model::Mixer::kAttention, model::Ffn::kDense}); }
  [[nodiscard]] const LayerCost& moe_layer() const { return kind_cost({model::Mixer::kAttention, model::Ffn::kMoe}); }
  // Any layer kind the model has (ModelSpec::layer_kinds; a transformer model also has the
  // attention + dense kind even when every layer is MoE), with the run's recompute.
  [[nodiscard]] const LayerCost& kind_cost(model::LayerKind kind) const;
  // Layer `layer` (global index) by its kind, with or without its recomputation when recompute
  // full covers only some layers (parallel.recompute_layers).
  [[nodiscard]] const LayerCost& layer(int64_t layer) const;
  // Layer `layer` by its kind alone: with the run's recompute mode, but without the
  // recomputation when recompute full covers only some layers of each virtual stage (which layers
  // those are depends on the split; every virtual stage pays for the same number).
  [[nodiscard]] const LayerCost& layer_as_run(int64_t layer) const;
  [[nodiscard]] const LayerCost& embedding() const { return costs_->embedding; }
  [[nodiscard]] const LayerCost& output_layer() const { return costs_->output; }
  [[nodiscard]] const GroupPlacements& placements() const { return places_; }
  // Tokens one rank processes per micro-batch.
  [[nodiscard]] double tokens() const { return tokens_; }
  // Bytes of one pipeline send (activation or its gradient) per micro-batch.
  [[nodiscard]] core::Bytes p2p_bytes() const;
  [[nodiscard]] core::Duration p2p_time() const;

 private:
  LayerCost build_layer(model::LayerKind kind, config::Recompute recompute) const;
  LayerCost build_embedding() const;
  LayerCost build_output() const;
  void finish(LayerCost& c) const;

  void place_groups();
  [[nodiscard]] std::shared_ptr<WorkloadCosts> build_costs(bool always_kept) const;

  const config::RunConfig& rc_;
  double tokens_ = 0;
  GroupPlacements places_;
  using KindCost = WorkloadCosts::KindCost;
  [[nodiscard]] const KindCost& find_kind(model::LayerKind kind) const;
  std::shared_ptr<const WorkloadCosts> costs_;
};

}  // namespace stepcast::estimate
