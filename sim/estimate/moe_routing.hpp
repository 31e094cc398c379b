// Token routing statistics of a MoE layer: how many tokens each expert-parallel rank's experts
// compute per micro-batch, given the routing imbalance and the expert capacity.
//
// The experts of one MoE layer are split over the ep ranks in contiguous blocks of E/ep. A
// dispatch ends when the busiest rank has received its tokens, and the layer's expert compute
// is that rank's: the busiest rank sets the pace of the whole expert-parallel group.
#pragma once

#include <cstdint>

#include "sim/config/run_config.hpp"

namespace stepcast::estimate {

// Megatron-Core's expert capacity: ceil(capacity_factor * tokens * top_k / experts).
int64_t expert_capacity(double tokens, int64_t top_k, int64_t experts, double capacity_factor);

struct ExpertLoad {
  // Tokens on the busiest rank relative to a balanced rank (1 = balanced). Averaged over the
  // model's MoE layers (each draws its own popularity under a seeded imbalance), which keeps
  // the step time exact: the layers run one after another and their times add.
  double busiest_rank_factor = 1.0;
  double busiest_expert_factor = 1.0;  // busiest expert / balanced expert
  double dropped_fraction = 0.0;       // routed tokens dropped at capacity
};

// Load of one expert-parallel group with `experts` experts on `ep` ranks. mean_tokens is a
// balanced expert's tokens per micro-batch (tokens routed by the group * top_k / experts).
ExpertLoad expert_load(const config::MoeRouting& r, int64_t experts, int64_t ep, double mean_tokens,
                       int64_t moe_layers);

// Nodes a token's experts may lie on when an expert-parallel group of `ep` ranks spans `nodes`
// nodes (experts in contiguous blocks, the same number of ranks on each node): all of them;
// at most max_nodes_per_token (> 0); and under group-limited routing only the nodes holding
// the token's top groups (group_topk groups of nodes_per_group nodes each, when groups and
// nodes align; when a node holds several whole groups, at most group_topk nodes).
int64_t reachable_nodes(const model::MoeSpec& moe, int64_t ep, int64_t nodes, int64_t max_nodes_per_token);

}  // namespace stepcast::estimate
