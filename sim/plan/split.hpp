#pragma once
// Cost-balanced pipeline splits: the layers of each virtual stage chosen so that the slowest
// virtual stage (its layers' forward and backward passes, the embedding on the first and the
// output layer with any multi-token-prediction modules on the last) is as fast as it can be.
//
// Layers differ in cost: a hybrid model stacks Mamba-2, attention, MLP and MoE blocks of very
// different weight, MoE models keep dense first layers, and a large vocabulary makes the output
// layer worth several transformer layers. A split by layer count leaves the pipeline running at
// the pace of its heaviest stage; the planner also tries the split this file computes.

#include <cstdint>
#include <vector>

#include "sim/config/run_config.hpp"

namespace stepcast::plan {

// The contiguous split of `weights` (one per layer, in order) over `stages` groups that
// minimises the largest group cost, where group g costs the sum of its weights plus extra[g]
// (`extra` has one entry per group). Every group but the first and the last holds at least one
// layer; the two ends may hold none; group g holds at most max_layers[g] when `max_layers` is
// given (one entry per group). Among the splits with the smallest largest cost the one
// with the smallest sum of squared group costs is returned (the most even), ties going to the
// split that puts layers later (the early stages of 1F1B-like schedules hold more micro-batches
// in flight). Empty when no split meets the bounds, or no stages.
std::vector<int64_t> min_max_split(const std::vector<double>& weights, const std::vector<double>& extra, int64_t stages,
                                   const std::vector<int64_t>& max_layers = {});

// Starting from `counts` (a split of `weights` as min_max_split returns it), moves single layers
// across virtual-stage boundaries while that lowers, in this order, the cost of the busiest
// pipeline stage (the sum over the virtual stages it holds: `owner[v]` is the stage holding
// virtual stage v), the largest virtual-stage cost and the sum of squared virtual-stage costs,
// keeping every group within max_layers (when given).
// Interleaved and V-shaped schedules pace on the stage totals; min_max_split alone balances the
// virtual stages.
std::vector<int64_t> balance_stages(std::vector<int64_t> counts, const std::vector<double>& weights, const std::vector<double>& extra,
                                    const std::vector<int64_t>& owner, const std::vector<int64_t>& max_layers = {});

// A cost-balanced split and what memory made of it.
struct BalancedSplit {
  std::vector<int64_t> layers;     // per virtual stage, pipeline order; empty: none
  // The split balanced by time alone put more on a stage than the memory limit allows, so the
  // virtual stages of the stages over it were capped below what they held until every stage
  // fitted; `layers` is that split and the three fields below describe the one by time alone.
  bool memory_bound = false;
  std::vector<int64_t> time_only;  // the split by time alone
  int64_t time_only_stage = -1;    // its stage furthest over the limit
  double time_only_peak_bytes = 0;
  // No split the search reached fits the limit (`layers` is then the split by time alone;
  // time_only and the two fields after it are set whenever a stage was over).
  bool fits = true;
  double limit_bytes = 0;          // the memory limit used (0: memory not considered)
};

// The cost-balanced split of a validated run over its pp * vpp virtual stages (pipeline
// order): each layer weighs its forward plus backward time as the analytical estimate costs it
// under the run's layout (exposed communication included; a partial full-recompute counted
// without its recomputation, which every virtual stage pays alike; under ZeRO-3 / FSDP each pass
// at least as long as its layer's parameter gathers and gradient reduce-scatters), the first virtual stage
// adds the embedding and the last the output layer; min_max_split, then balance_stages over the
// schedule's placement of virtual stages.
//
// With memory_fraction > 0 the split also keeps every stage's ledger peak within that fraction
// of the GPU's memory: while the split's ledger puts a stage over it, the virtual stage of that
// stage holding the most layers may hold one fewer than it does, and the split is balanced again
// under those caps. Layers differ in memory as in time (MoE layers' experts, the embedding and
// output layer's vocabulary, the micro-batches 1F1B keeps in flight on early stages), so a split
// balanced by time alone can overfill a stage the layer-count split did not.
// Empty layers for pp = 1.
BalancedSplit balanced_split(const config::RunConfig& rc, double memory_fraction);

// balanced_split(rc, 0).layers: by time alone.
std::vector<int64_t> balanced_vstage_layers(const config::RunConfig& rc);

}  // namespace stepcast::plan
