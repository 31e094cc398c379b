// Expert and context parallelism in the workload: routing volume, capacity, imbalance,
// placement, ring overlap and causal load balancing. Properties from the mechanism, not golden
// numbers.
#include <algorithm>
#include <gtest/gtest.h>

#include <string>

#include "sim/config/run_config.hpp"
#include "sim/core/error.hpp"
#include "sim/core/json_reader.hpp"
#include "sim/estimate/estimate.hpp"
#include "sim/estimate/moe_routing.hpp"
#include "sim/estimate/workload.hpp"
#include "sim/memory/ledger.hpp"
#include "tests/support/run_files.hpp"

namespace stepcast::estimate {
namespace {

using config::RunConfig;
using core::Json;

// A small fine-grained MoE model (Qwen3-MoE shape class): 16 experts, top-2.
Json moe_run(int64_t ep, int64_t gpus_per_node = 8, const Json& moe = Json()) {
  Json parallel = {{"tp", 1}, {"ep", ep}, {"micro_batch_size", 1}};
  if (!moe.is_null()) parallel["moe"] = moe;
  return {
      {"model",
       {{"name", "moe-test"},
        {"hidden_size", 2048},
        {"num_attention_heads", 16},
        {"num_key_value_heads", 4},
        {"num_hidden_layers", 4},
        {"intermediate_size", 8192},
        {"moe_intermediate_size", 1024},
        {"num_local_experts", 16},
        {"num_experts_per_tok", 2},
        {"vocab_size", 32000},
        {"hidden_act", "silu"}}},
      {"hardware", "h100-sxm"},
      {"cluster", {{"num_gpus", 8}, {"gpus_per_node", gpus_per_node}}},
      {"training", {{"seq_len", 4096}, {"global_batch_size", 8}}},
      {"parallel", parallel},
  };
}

Json cp_run(int64_t seq_len, int64_t cp, int64_t gpus_per_node, bool load_balance = true) {
  return {
      {"model", "llama3.1-8b"},
      {"hardware", "h100-sxm"},
      {"cluster", {{"num_gpus", 8}, {"gpus_per_node", gpus_per_node}}},
      {"training", {{"seq_len", seq_len}, {"global_batch_size", 8 / cp}}},
      {"parallel", {{"tp", 1}, {"cp", cp}, {"cp_load_balance", load_balance}}},
  };
}

RunConfig parse(const Json& j) { return config::parse_run(j, "<moe-cp-test>", ""); }

// The message a refused run file gets ("" when it is accepted).
std::string parse_error(const Json& j) { return test::parse_error(j, "<moe-cp-test>"); }

double sum_bytes(const std::vector<Op>& ops, CommKind kind) {
  double b = 0;
  for (const auto& o : ops) {
    if (o.kind == OpKind::kComm && o.comm == kind) b += o.bytes.value();
  }
  return b;
}

double op_time(const std::vector<Op>& ops, const std::string& name) {
  for (const auto& o : ops) {
    if (o.name == name) return o.time.value();
  }
  ADD_FAILURE() << "no op " << name;
  return 0;
}

// Dispatch + combine move every routed token copy out and back: 2 * T * k * h * bytes per MoE
// layer forward (T tokens on the rank, k experts per token, bf16).
TEST(Moe, AllToAllVolumePerLayer) {
  const RunConfig rc = parse(moe_run(8));
  const WorkloadBuilder wb(rc);
  const double T = 4096, k = 2, h = 2048, bytes = 2;
  EXPECT_DOUBLE_EQ(sum_bytes(wb.moe_layer().fwd, CommKind::kEp), 2.0 * T * k * h * bytes);
  // ... and the same again in backward (the gradients of combine and dispatch).
  EXPECT_DOUBLE_EQ(sum_bytes(wb.moe_layer().bwd, CommKind::kEp), 2.0 * T * k * h * bytes);
}

const Op* find_op(const std::vector<Op>& ops, const std::string& name) {
  for (const auto& o : ops) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

// Where an operator stands in a pass (its execution order); a missing one fails the test.
ptrdiff_t position(const std::vector<Op>& ops, const std::string& name) {
  const auto it = std::find_if(ops.begin(), ops.end(), [&](const Op& o) { return o.name == name; });
  EXPECT_NE(it, ops.end()) << name;
  return it - ops.begin();
}

// Expert tensor parallelism (etp 2 beside tp 2 with sequence parallelism): the ranks of an
// expert's etp group hold slices of its weights, so the tokens the all-to-all delivered to the
// group are all-gathered in it before the first expert GEMM and the outputs reduce-scattered
// after the second, with the duals in backward. Each moves the group's routed copies, T * k * h *
// bytes here (T = 4096 tokens of the sequence, top-2, h 2048, bf16). With etp 1 there is none.
TEST(Moe, ExpertTensorParallelGathersTheGroupsTokens) {
  Json j = moe_run(4);
  j["parallel"]["tp"] = 2;
  j["parallel"]["sp"] = true;
  j["parallel"]["etp"] = 2;
  const WorkloadBuilder wb(parse(j));
  const double T = 4096, k = 2, h = 2048, bytes = 2;
  for (const auto& [ops, names] : {std::pair{wb.moe_layer().fwd, std::vector<std::string>{"experts.etp_ag", "experts.etp_rs"}},
                                   std::pair{wb.moe_layer().bwd, std::vector<std::string>{"experts.etp_rs_grad", "experts.etp_ag_grad"}}}) {
    for (const auto& name : names) {
      const Op* op = find_op(ops, name);
      ASSERT_NE(op, nullptr) << name;
      EXPECT_EQ(op->comm, CommKind::kTp) << name;
      EXPECT_DOUBLE_EQ(op->bytes.value(), T * k * h * bytes) << name;
      EXPECT_GT(op->time.value(), 0.0) << name;
    }
  }
  j["parallel"]["etp"] = 1;
  const WorkloadBuilder no_etp(parse(j));
  for (const auto* ops : {&no_etp.moe_layer().fwd, &no_etp.moe_layer().bwd}) {
    for (const auto& o : *ops) EXPECT_EQ(o.name.find("etp_"), std::string::npos) << o.name;
  }
}

// The flex dispatcher exchanges over the tp x ep group, sending each copy to every etp rank
// of its expert: etp times the bytes, and no separate etp gather. At ep 1 it still exchanges
// (over the etp group), where the all-to-all dispatcher has nothing to exchange.
TEST(Moe, FlexDispatcherFansOutToTheExpertTensorParallelRanks) {
  auto layer_bytes = [](int64_t ep, int64_t etp) {
    Json j = moe_run(ep, 8, {{"dispatcher", "flex"}});
    j["parallel"]["tp"] = 2;
    j["parallel"]["sp"] = true;
    j["parallel"]["etp"] = etp;
    const WorkloadBuilder wb(parse(j));
    for (const auto& o : wb.moe_layer().fwd) EXPECT_EQ(o.name.find("etp_"), std::string::npos) << o.name;
    const Op* d = find_op(wb.moe_layer().fwd, "ep.dispatch");
    return d == nullptr ? 0.0 : d->bytes.value();
  };
  const double one = layer_bytes(4, 1), two = layer_bytes(4, 2);
  ASSERT_GT(one, 0.0);
  EXPECT_DOUBLE_EQ(two, 2.0 * one);
  EXPECT_DOUBLE_EQ(layer_bytes(1, 2), two);  // the rank's T/2 x k copies, to both etp ranks
}

// The all-to-all dispatcher delivers token copies ordered by source rank; with several local
// experts they are copied into one run per expert before the expert GEMMs and back after
// (Megatron-Core's sort_chunks_by_idxs): one read and one write of the received copies each
// way, in forward and in backward. One local expert, or the all-gather dispatcher (whose
// permutation groups copies by expert), needs no such copy.
TEST(Moe, SeveralLocalExpertsAreSortedAfterTheExchange) {
  const double T = 4096, k = 2, h = 2048, bytes = 2;
  const WorkloadBuilder wb(parse(moe_run(4)));  // 16 experts on ep 4: 4 local experts
  for (const auto& [ops, names] : {std::pair{wb.moe_layer().fwd, std::vector<std::string>{"experts.sort", "experts.unsort"}},
                                   std::pair{wb.moe_layer().bwd, std::vector<std::string>{"experts.unsort.bwd", "experts.sort.bwd"}}}) {
    for (const auto& name : names) {
      const Op* op = find_op(ops, name);
      ASSERT_NE(op, nullptr) << name;
      EXPECT_DOUBLE_EQ(op->bytes.value(), 2.0 * T * k * h * bytes) << name;  // the rank's T x k copies, read and written
      EXPECT_GT(op->time.value(), 0.0) << name;
    }
  }
  // The sort runs between the exchange and the first expert GEMM, the unsort after the second.
  const auto& f = wb.moe_layer().fwd;
  EXPECT_LT(position(f, "ep.dispatch"), position(f, "experts.sort"));
  EXPECT_LT(position(f, "experts.sort"), position(f, "experts.fc1"));
  EXPECT_LT(position(f, "experts.fc2"), position(f, "experts.unsort"));
  EXPECT_LT(position(f, "experts.unsort"), position(f, "ep.combine"));
  Json one = moe_run(8);
  one["model"]["num_local_experts"] = 8;  // one expert per rank
  const WorkloadBuilder a2a_one(parse(one));
  const WorkloadBuilder ag(parse(moe_run(4, 8, {{"dispatcher", "allgather"}})));
  for (const auto* b : {&a2a_one, &ag}) {
    for (const auto* ops : {&b->moe_layer().fwd, &b->moe_layer().bwd}) {
      for (const auto& o : *ops) EXPECT_EQ(o.name.find("sort"), std::string::npos) << o.name;
    }
  }
}

// With expert TP and expert parallelism across nodes a pass's exposed communication alternates
// between exchanges that leave the node (dispatch, combine) and ones that stay on it (the etp
// gathers and reduce-scatters): the layer records them as runs in execution order, which add up
// to the pass's exposed time and NIC bytes, so the simulator can run each NIC run at its own
// rate. A pass whose exposed communication is all on the node records none.
TEST(Moe, MixedExposedCommIsKeptAsRunsInOrder) {
  Json j = moe_run(4, 2);  // ep 4 over two-GPU nodes: the all-to-alls leave the node
  j["parallel"]["tp"] = 2;
  j["parallel"]["sp"] = true;
  j["parallel"]["etp"] = 2;
  const WorkloadBuilder wb(parse(j));
  const auto& lc = wb.moe_layer();
  for (const auto* runs : {&lc.fwd_comm_runs, &lc.bwd_comm_runs}) {
    ASSERT_GE(runs->size(), 3u);
    for (size_t i = 1; i < runs->size(); ++i) EXPECT_NE((*runs)[i].nic_bytes > 0, (*runs)[i - 1].nic_bytes > 0) << i;
  }
  auto total = [](const std::vector<LayerCost::CommRun>& runs, bool bytes) {
    double t = 0;
    for (const auto& r : runs) t += bytes ? r.nic_bytes : r.time.value();
    return t;
  };
  EXPECT_NEAR(total(lc.fwd_comm_runs, false), lc.fwd_comm_exposed.value(), 1e-12);
  EXPECT_NEAR(total(lc.bwd_comm_runs, false), lc.bwd_comm_exposed.value(), 1e-12);
  EXPECT_NEAR(total(lc.fwd_comm_runs, true), lc.fwd_exposed_nic_bytes, 1e-3);
  EXPECT_NEAR(total(lc.bwd_comm_runs, true), lc.bwd_exposed_nic_bytes, 1e-3);
  const WorkloadBuilder on_node(parse(moe_run(8, 8)));
  EXPECT_TRUE(on_node.moe_layer().fwd_comm_runs.empty());
  EXPECT_TRUE(on_node.moe_layer().bwd_comm_runs.empty());
}

// Capacity = ceil(capacity_factor * T * k / E): 4096 tokens, top-2, 16 experts, factor 1.25.
TEST(Moe, CapacityFormula) {
  EXPECT_EQ(expert_capacity(4096, 2, 16, 1.25), 640);
  EXPECT_EQ(expert_capacity(4096, 2, 16, 1.0), 512);
  EXPECT_EQ(expert_capacity(1000, 3, 7, 1.0), 429);  // 428.57 rounds up
}

// With a capacity factor, tokens above capacity are dropped and the busiest expert is capped;
// with padding every expert computes exactly its capacity.
TEST(Moe, CapacityDropsAndPads) {
  config::MoeRouting r;
  r.max_over_mean = 2.0;
  r.capacity_factor = 1.5;
  const ExpertLoad drop = expert_load(r, 16, 16, 512, 1);
  EXPECT_DOUBLE_EQ(drop.busiest_expert_factor, 1.5);
  EXPECT_NEAR(drop.dropped_fraction, 0.5 / 16.0, 1e-12);  // half a mean's worth of 16 means
  r.pad_to_capacity = true;
  const ExpertLoad pad = expert_load(r, 16, 16, 512, 1);
  EXPECT_DOUBLE_EQ(pad.busiest_rank_factor, 1.5);
  // Dropless: nothing is dropped and the busiest expert keeps all its tokens.
  config::MoeRouting dropless;
  dropless.max_over_mean = 2.0;
  EXPECT_DOUBLE_EQ(expert_load(dropless, 16, 16, 512, 1).busiest_expert_factor, 2.0);
  EXPECT_DOUBLE_EQ(expert_load(dropless, 16, 16, 512, 1).dropped_fraction, 0.0);
}

// The busiest expert sets the MoE layer's pace: with one expert per rank (ep = E would need 16
// GPUs; here 2 experts per rank on ep 8) an expert at twice the mean makes its rank's expert
// GEMMs 1.5x (2 + ~0.93 of the other expert over 2 means) and its dispatch receive-bound.
TEST(Moe, BusiestExpertSetsLayerTime) {
  const WorkloadBuilder balanced(parse(moe_run(8)));
  const WorkloadBuilder skewed(parse(moe_run(8, 8, {{"imbalance", 2.0}})));
  const auto& lb = skewed.moe_layer().expert_load;
  EXPECT_NEAR(lb.busiest_rank_factor, (2.0 + 14.0 / 15.0) / 2.0, 1e-12);
  const double ratio = op_time(skewed.moe_layer().fwd, "experts.fc1") / op_time(balanced.moe_layer().fwd, "experts.fc1");
  // GEMM time is nearly linear in tokens at 1000+ tokens per expert: within 10% of the load
  // ratio (the shape-dependent efficiency rises slightly with more tokens).
  EXPECT_NEAR(ratio, lb.busiest_rank_factor, 0.1 * lb.busiest_rank_factor);
  EXPECT_GT(skewed.moe_layer().ep_exposed.value(), balanced.moe_layer().ep_exposed.value() * 1.3);
  EXPECT_GT(skewed.moe_layer().fwd_time().value(), balanced.moe_layer().fwd_time().value());
}

// A seeded popularity draw is deterministic, and more skew makes the busiest rank busier.
TEST(Moe, SeededImbalanceIsDeterministicAndMonotone) {
  config::MoeRouting a, b;
  a.sigma = 0.3;
  b.sigma = 1.0;
  const ExpertLoad la = expert_load(a, 64, 8, 1000, 24), la2 = expert_load(a, 64, 8, 1000, 24);
  EXPECT_EQ(la.busiest_rank_factor, la2.busiest_rank_factor);
  EXPECT_GT(la.busiest_rank_factor, 1.0);
  EXPECT_GT(expert_load(b, 64, 8, 1000, 24).busiest_rank_factor, la.busiest_rank_factor);
}

// EP inside one NVLink node is faster than the same EP spread over nodes, where the dispatch
// leaves through the NICs.
TEST(Moe, ExpertParallelInsideNodeIsFaster) {
  const WorkloadBuilder inside(parse(moe_run(8, 8)));
  const WorkloadBuilder across(parse(moe_run(8, 2)));
  EXPECT_LT(inside.moe_layer().ep_exposed.value() * 2.0, across.moe_layer().ep_exposed.value());
}

// The all-gather dispatcher moves T*ep tokens per rank instead of T*k copies: cheaper in
// volume only when k is large against ep (here k = 2 < ep = 8, so it moves more).
TEST(Moe, AllGatherDispatcherVolume) {
  const WorkloadBuilder ag(parse(moe_run(8, 8, {{"dispatcher", "allgather"}})));
  const double T = 4096, h = 2048, bytes = 2, ep = 8;
  EXPECT_DOUBLE_EQ(sum_bytes(ag.moe_layer().fwd, CommKind::kEp), 2.0 * T * h * bytes * ep);
  // With expert TP the group is ep x etp ranks, each holding its sequence shard (T / tp under
  // SP): T / 2 x 4 x 2 tokens gathered at tp = etp = 2, ep = 4; and at ep 1 the TP group's.
  Json j = moe_run(4, 8, {{"dispatcher", "allgather"}});
  j["parallel"]["tp"] = 2;
  j["parallel"]["sp"] = true;
  j["parallel"]["etp"] = 2;
  EXPECT_DOUBLE_EQ(sum_bytes(WorkloadBuilder(parse(j)).moe_layer().fwd, CommKind::kEp), 2.0 * (T / 2) * h * bytes * 4 * 2);
  j["parallel"]["ep"] = 1;
  EXPECT_DOUBLE_EQ(sum_bytes(WorkloadBuilder(parse(j)).moe_layer().fwd, CommKind::kEp), 2.0 * (T / 2) * h * bytes * 2);
}

// The all-gather dispatcher permutes after its gather: it copies out the gathered rows routed
// to its local experts (T x k on average: 8 ranks' T tokens, 2 of 16 experts each) and, after
// the experts, writes every gathered row back for the reduce-scatter.
TEST(Moe, AllGatherDispatcherPermutesTheGatheredTokens) {
  const WorkloadBuilder ag(parse(moe_run(8, 8, {{"dispatcher", "allgather"}})));
  const double T = 4096, k = 2, h = 2048, bytes = 2, ep = 8;
  const auto& f = ag.moe_layer().fwd;
  EXPECT_DOUBLE_EQ(find_op(f, "permute")->bytes.value(), 2.0 * T * k * h * bytes);
  EXPECT_DOUBLE_EQ(find_op(f, "unpermute")->bytes.value(), (T * k + T * ep) * h * bytes);
  EXPECT_LT(position(f, "ep.allgather"), position(f, "permute"));
  EXPECT_LT(position(f, "unpermute"), position(f, "ep.reduce_scatter"));
  // The all-to-all dispatcher permutes the rank's own copies before sending them.
  const WorkloadBuilder a2a(parse(moe_run(8)));
  const auto& g = a2a.moe_layer().fwd;
  EXPECT_LT(position(g, "permute"), position(g, "ep.dispatch"));
  EXPECT_LT(position(g, "ep.combine"), position(g, "unpermute"));
  EXPECT_DOUBLE_EQ(find_op(g, "unpermute")->bytes.value(), 2.0 * T * k * h * bytes);
}

// Shared-expert overlap hides dispatch/combine behind the shared experts' computation.
TEST(Moe, SharedExpertOverlapHidesDispatch) {
  Json plain = moe_run(8, 2);
  plain["model"]["n_shared_experts"] = 2;
  Json overlapped = plain;
  overlapped["parallel"]["moe"] = {{"overlap", "shared-experts"}};
  const WorkloadBuilder a(parse(plain)), b(parse(overlapped));
  EXPECT_LT(b.moe_layer().ep_exposed.value(), a.moe_layer().ep_exposed.value());
}

// Node-limited routing: across 4 nodes (ep 8, 2 GPUs per node) a top-2 token reaches at most
// 2 nodes; limited to 1 node it crosses the network at most once instead of once per copy.
TEST(Moe, NodeLimitedRoutingCutsNetworkBytes) {
  const WorkloadBuilder free_routing(parse(moe_run(8, 2)));
  const WorkloadBuilder limited(parse(moe_run(8, 2, {{"max_nodes_per_token", 1}})));
  auto nic = [](const LayerCost& lc) {
    double b = 0;
    for (const auto& o : lc.fwd) b += o.nic_bytes;
    return b;
  };
  const double T = 4096, k = 2, h = 2048, bytes = 2, nodes = 4;
  EXPECT_DOUBLE_EQ(nic(free_routing.moe_layer()), 2.0 * T * k * h * bytes * (8.0 - 2.0) / 8.0);
  EXPECT_DOUBLE_EQ(nic(limited.moe_layer()), 2.0 * T * 1.0 * h * bytes * (nodes - 1.0) / nodes);
  EXPECT_LT(limited.moe_layer().ep_exposed.value(), free_routing.moe_layer().ep_exposed.value());
}

// The flex dispatcher (DeepEP / HybridEP) sends a token once per remote node: across 4 nodes
// a top-2 token reaches 4 * (1 - (3/4)^2) = 1.75 distinct nodes on average instead of sending
// its 2 copies separately. Inside one node it changes nothing.
TEST(Moe, FlexDispatcherSendsOncePerNode) {
  auto nic = [](const LayerCost& lc) {
    double b = 0;
    for (const auto& o : lc.fwd) b += o.nic_bytes;
    return b;
  };
  const WorkloadBuilder plain(parse(moe_run(8, 2)));
  const WorkloadBuilder flex(parse(moe_run(8, 2, {{"dispatcher", "flex"}})));
  const double T = 4096, h = 2048, bytes = 2, nodes = 4;
  EXPECT_DOUBLE_EQ(nic(flex.moe_layer()), 2.0 * T * 1.75 * h * bytes * (nodes - 1.0) / nodes);
  EXPECT_LT(flex.moe_layer().ep_exposed.value(), plain.moe_layer().ep_exposed.value());
  const WorkloadBuilder plain_node(parse(moe_run(8, 8))), flex_node(parse(moe_run(8, 8, {{"dispatcher", "flex"}})));
  EXPECT_DOUBLE_EQ(flex_node.moe_layer().ep_exposed.value(), plain_node.moe_layer().ep_exposed.value());
}

// Nodes a token may reach: the group's nodes, a node limit, and group-limited routing
// (DeepSeek-V3: 256 experts in 8 groups, a token's experts from its best 4 groups).
TEST(Moe, ReachableNodesFollowGroupLimitedRouting) {
  model::MoeSpec m;
  m.num_experts = 256;
  m.top_k = 8;
  EXPECT_EQ(reachable_nodes(m, 64, 8, 0), 8);
  EXPECT_EQ(reachable_nodes(m, 64, 8, 4), 4);
  m.groups = 8;
  m.group_topk = 4;
  EXPECT_EQ(reachable_nodes(m, 64, 8, 0), 4);    // one group per node
  EXPECT_EQ(reachable_nodes(m, 128, 16, 0), 8);  // a group spans 2 nodes
  EXPECT_EQ(reachable_nodes(m, 32, 4, 0), 4);    // two groups per node: at most 4 nodes of 4
  EXPECT_EQ(reachable_nodes(m, 128, 16, 3), 3);  // a node limit below the groups' reach
  m.group_topk = 8;                              // every group: no limit
  EXPECT_EQ(reachable_nodes(m, 128, 16, 0), 16);
}

// Recompute selective's modules (Megatron-Core --recompute-modules): moe_act drops each routed
// copy's activation output (its bf16 fc2 input, ffn_e wide) and re-runs the activation before
// the backward; moe drops the whole block's activations and re-runs it, dispatch included.
TEST(Moe, RecomputeModulesTradeActivationsForRecompute) {
  auto with = [](const Json& mods) {
    Json j = moe_run(8);
    j["parallel"]["recompute"] = "selective";
    if (!mods.is_null()) j["parallel"]["recompute_modules"] = mods;
    return parse(j);
  };
  const RunConfig attn = with(Json()), act = with(Json::array({"moe_act"})), block = with(Json::array({"moe"}));
  EXPECT_EQ(config::recompute_label(act.parallel), "selective(moe_act)");
  EXPECT_EQ(config::recompute_label(attn.parallel), "selective");
  const double T = 4096, k = 2, ffn_e = 1024, bytes = 2;
  const double base = memory::layer_activation_bytes(attn, true).value();
  EXPECT_DOUBLE_EQ(base - memory::layer_activation_bytes(act, true).value(), T * k * bytes * ffn_e);
  // The whole block: routed copies (input and MLP activations) and fp32 routing probabilities.
  EXPECT_DOUBLE_EQ(base - memory::layer_activation_bytes(block, true).value(),
                   T * (k * (bytes * 2048 + 3.0 * bytes * ffn_e) + 4.0 * 16));
  const WorkloadBuilder wa(attn), wb(act), wm(block);
  EXPECT_DOUBLE_EQ(wa.moe_layer().recompute.value(), 0.0);  // flash attention: nothing to redo
  double act_time = 0, block_compute = 0;
  for (const auto& o : wa.moe_layer().fwd) {
    if (o.name == "experts.activation") act_time = o.time.value();
    const bool in_block = o.name.rfind("router", 0) == 0 || o.name == "permute" || o.name.rfind("experts.", 0) == 0 ||
                          o.name == "unpermute";
    if (in_block && o.kind != OpKind::kComm && o.kind != OpKind::kHost) block_compute += o.time.value();
  }
  EXPECT_GT(act_time, 0.0);
  EXPECT_DOUBLE_EQ(wb.moe_layer().recompute.value(), act_time);
  EXPECT_NEAR(wm.moe_layer().recompute.value(), block_compute, 1e-15);
  // The re-run block exchanges its tokens again: more exposed EP time than without it.
  EXPECT_GT(wm.moe_layer().ep_exposed.value(), wa.moe_layer().ep_exposed.value());
}

// The grouped expert MLP's per-expert host work (parallel.moe.expert_overhead) adds the
// overhead times the rank's local experts to the layer, a third in forward and two thirds in
// backward; 0 turns it off. 16 experts on ep 8: 2 local experts.
TEST(Moe, ExpertOverheadScalesWithLocalExperts) {
  const WorkloadBuilder off(parse(moe_run(8, 8, {{"expert_overhead", 0}})));
  const WorkloadBuilder on(parse(moe_run(8, 8, {{"expert_overhead", "300us"}})));
  const WorkloadBuilder ep2(parse(moe_run(2, 8, {{"expert_overhead", "300us"}})));
  EXPECT_NEAR(on.moe_layer().fwd_compute.value() - off.moe_layer().fwd_compute.value(), 2 * 100e-6, 1e-12);
  EXPECT_NEAR(on.moe_layer().bwd_compute.value() - off.moe_layer().bwd_compute.value(), 2 * 200e-6, 1e-12);
  // Fewer ranks hold more experts each: 8 local experts pay four times the host work.
  double host2 = 0, host8 = 0;
  for (const auto& o : ep2.moe_layer().fwd) host2 += o.kind == OpKind::kHost ? o.time.value() : 0.0;
  for (const auto& o : on.moe_layer().fwd) host8 += o.kind == OpKind::kHost ? o.time.value() : 0.0;
  EXPECT_NEAR(host2, 4.0 * host8, 1e-15);
  EXPECT_DOUBLE_EQ(on.dense_layer().fwd_compute.value(), off.dense_layer().fwd_compute.value());
  // The step's breakdown names it: one micro-batch through 4 MoE layers of 2 local experts.
  const StepEstimate est = estimate_step(parse(moe_run(8, 8, {{"expert_overhead", "300us"}})));
  EXPECT_NEAR(est.breakdown.host, 4 * 2 * 300e-6, 1e-12);
  EXPECT_DOUBLE_EQ(estimate_step(parse(moe_run(8, 8, {{"expert_overhead", 0}}))).breakdown.host, 0.0);
}

// Ring context parallelism combines the blocks outside the attention kernel: per later block
// one fused correction pass over the output (bf16 block in, fp32 running output read and
// written) plus the final cast; llama3.1-8b (32 heads x 128) at 32k tokens on cp 4.
TEST(Cp, RingMergesBlockOutputs) {
  const WorkloadBuilder wb(parse(cp_run(32768, 4, 8)));
  const double T = 32768.0 / 4.0, width = 32.0 * 128.0, e = 2.0;
  double merge = -1;
  for (const auto& o : wb.dense_layer().fwd) {
    if (o.name == "cp_ring.merge") merge = o.bytes.value();
  }
  EXPECT_DOUBLE_EQ(merge, 3.0 * (8.0 + e) * T * width + (4.0 + e) * T * width);
  // Without context parallelism there is nothing to merge.
  const WorkloadBuilder no_cp(parse(cp_run(32768, 1, 8)));
  for (const auto& o : no_cp.dense_layer().fwd) EXPECT_NE(o.name, "cp_ring.merge");
}

// Micro-batch overlap (DualPipe-style) hides the exchanges behind the other micro-batch's
// layer compute: exposed EP time drops to what the compute cannot cover.
TEST(Moe, MicroBatchOverlapHidesExchanges) {
  const WorkloadBuilder plain(parse(moe_run(8, 2)));
  const WorkloadBuilder overlapped(parse(moe_run(8, 2, {{"overlap", "micro-batch"}})));
  EXPECT_LT(overlapped.moe_layer().ep_exposed.value(), 0.5 * plain.moe_layer().ep_exposed.value());
}

// Padding to capacity needs the all-to-all dispatcher: the flex dispatcher (DeepEP / HybridEP)
// does not pad, and Megatron-Core refuses the combination.
TEST(Moe, FlexDispatcherDoesNotPadToCapacity) {
  const std::string error = parse_error(moe_run(8, 8, {{"dispatcher", "flex"}, {"capacity_factor", 1.0}, {"pad_to_capacity", true}}));
  EXPECT_NE(error.find("$.parallel.moe.pad_to_capacity"), std::string::npos) << error;
  EXPECT_NE(error.find("flex"), std::string::npos) << error;
  EXPECT_NO_THROW(parse(moe_run(8, 8, {{"dispatcher", "alltoall"}, {"capacity_factor", 1.0}, {"pad_to_capacity", true}})));
  EXPECT_NO_THROW(parse(moe_run(8, 8, {{"dispatcher", "flex"}, {"capacity_factor", 1.0}})));
}

TEST(Moe, RoutingBlockOnDenseModelIsAnError) {
  Json j = cp_run(8192, 1, 8);
  j["parallel"]["moe"] = {{"dispatcher", "alltoall"}};
  const std::string error = parse_error(j);
  EXPECT_NE(error.find("$.parallel.moe"), std::string::npos) << error;
}

// Ring CP: each hop's K/V transfer hides behind the attention block it overlaps. At 128k
// tokens a block takes far longer than the send; at 4k tokens over the network it does not.
TEST(ContextParallel, RingHidesKvWhenBlocksAreLong) {
  const WorkloadBuilder long_seq(parse(cp_run(131072, 8, 8)));
  EXPECT_EQ(long_seq.dense_layer().cp_exposed.value(), 0.0);
  const WorkloadBuilder short_seq(parse(cp_run(4096, 8, 1)));  // every hop crosses nodes
  EXPECT_GT(short_seq.dense_layer().cp_exposed.value(), 0.0);
}

// Causal CP without load balancing: the last rank's queries see the whole sequence, so the
// attention takes (2cp-1)/cp of a balanced rank's time.
TEST(ContextParallel, CausalWithoutLoadBalancingIsSlower) {
  const WorkloadBuilder lb(parse(cp_run(131072, 4, 8, true)));
  const WorkloadBuilder no_lb(parse(cp_run(131072, 4, 8, false)));
  const double ratio = op_time(no_lb.dense_layer().fwd, "attention") / op_time(lb.dense_layer().fwd, "attention");
  EXPECT_NEAR(ratio, 7.0 / 4.0, 0.01);
  EXPECT_GT(no_lb.dense_layer().fwd_time().value(), lb.dense_layer().fwd_time().value());
}

// K/V repeated to the query heads before attention (repeat_kv): a ring exchange moves
// heads / kv_heads times the bytes (Llama-3.1-8B: 32 / 8), and the copy costs a memory pass.
TEST(ContextParallel, RepeatedKvMovesExpandedTensors) {
  Json j = cp_run(131072, 8, 8);
  const WorkloadBuilder plain(parse(j));
  j["training"]["repeat_kv"] = true;
  const WorkloadBuilder expanded(parse(j));
  EXPECT_DOUBLE_EQ(sum_bytes(expanded.dense_layer().fwd, CommKind::kCp), 4.0 * sum_bytes(plain.dense_layer().fwd, CommKind::kCp));
  const double T = 131072.0 / 8.0, e = 2.0;
  EXPECT_GT(op_time(expanded.dense_layer().fwd, "repeat_kv"), 0.0);
  const double copy_bytes = 2.0 * e * T * (1024.0 + 4096.0);  // read K, V; write them at 32 heads
  for (const auto& o : expanded.dense_layer().fwd) {
    if (o.name == "repeat_kv") {
      EXPECT_DOUBLE_EQ(o.bytes.value(), copy_bytes);
    }
  }
}

// PyTorch's all-gather rotation: one all-gather of every rank's K/V, hidden only by the first
// (local) block, so it is exposed when a block is shorter than the gather; dK/dV travel the
// ring in fp32 (cp hops, the last one waited for); the fp32 merges cost memory passes.
TEST(ContextParallel, RotateAllGatherHidesBehindFirstBlockOnly) {
  auto run = [](int64_t seq, int64_t gpus_per_node) {
    Json j = cp_run(seq, 8, gpus_per_node);
    j["parallel"]["cp_comm"] = "rotate-allgather";
    return parse(j);
  };
  const RunConfig across_nodes = run(16384, 1);
  const WorkloadBuilder short_blocks(across_nodes);
  const LayerCost& lc = short_blocks.dense_layer();
  const double T = 16384.0 / 8.0, kv_width = 1024.0, e = 2.0;
  const double kv_bytes = T * 2.0 * kv_width * e;
  int gathers = 0, hops = 0, exposed_hops = 0;
  for (const auto& o : lc.fwd) {
    if (o.name == "cp_rotate.kv_allgather") {
      ++gathers;
      EXPECT_DOUBLE_EQ(o.bytes.value(), kv_bytes * 8.0);
      EXPECT_NEAR(o.hidden_by.value(), op_time(lc.fwd, "attention") / 8.0, 1e-9);
    }
  }
  for (const auto& o : lc.bwd) {
    if (o.name != "cp_rotate.dkv") continue;
    ++hops;
    EXPECT_DOUBLE_EQ(o.bytes.value(), T * 2.0 * kv_width * 4.0);  // fp32 accumulators
    exposed_hops += o.hidden_by.value() == 0.0;
  }
  EXPECT_EQ(gathers, 1);
  EXPECT_EQ(hops, 8);
  EXPECT_EQ(exposed_hops, 1);
  // At 16k tokens over the network one block cannot cover the gather; the p2p ring can hide
  // each hop behind a block, so it exposes less.
  Json ring = cp_run(16384, 8, 1);
  const WorkloadBuilder ring_wb(parse(ring));
  EXPECT_GT(lc.cp_exposed.value(), 0.0);
  EXPECT_GT(lc.cp_exposed.value(), ring_wb.dense_layer().cp_exposed.value());
  EXPECT_GT(op_time(lc.fwd, "cp_rotate.merge"), 0.0);
  EXPECT_GT(op_time(lc.bwd, "cp_rotate.accumulate"), 0.0);
  EXPECT_EQ(config::to_string(across_nodes.parallel.cp_comm), "rotate-allgather");
}

// Ulysses splits heads over cp, so cp is bounded by the KV heads per TP rank.
TEST(ContextParallel, UlyssesBoundedByHeads) {
  Json j = cp_run(8192, 8, 8);
  j["parallel"]["cp_comm"] = "ulysses";
  j["parallel"]["tp"] = 1;
  EXPECT_NO_THROW(parse(j));  // 8 kv heads / cp 8
  Json bad = cp_run(8192, 8, 8);
  bad["cluster"]["num_gpus"] = 16;
  bad["parallel"] = {{"tp", 2}, {"cp", 8}, {"cp_comm", "ulysses"}};
  // 8 kv heads / tp 2 = 4 per TP rank: cp 8 cannot split them.
  const std::string error = parse_error(bad);
  EXPECT_NE(error.find("$.parallel.cp"), std::string::npos) << error;
  EXPECT_NE(error.find("key/value heads"), std::string::npos) << error;
}

// Multi-token prediction (training.mtp_layers): each module puts one more layer of the last
// layer's kind, a 2h -> h projection and three norms on the last stage, with an untied model's
// embedding copy when pp > 1, runs that layer and a second pass through the output head and
// loss there, and counts those FLOPs as model FLOPs.
TEST(MultiTokenPrediction, AddsALayerAndAHeadPassToTheLastStage) {
  Json base = moe_run(8);
  base["cluster"]["num_gpus"] = 16;
  base["training"]["global_batch_size"] = 16;
  base["parallel"]["pp"] = 2;
  base["parallel"]["tp"] = 1;
  base["model"]["tie_word_embeddings"] = false;  // the last stage then needs an embedding copy
  Json with = base;
  with["training"]["mtp_layers"] = 1;
  const RunConfig a = parse(base), b = parse(with);
  const auto& m = a.model;
  const double h = static_cast<double>(m.hidden);

  // Parameters: the last stage gains exactly one module (its routed experts split over ep 8).
  const memory::MemoryLedger la = memory::compute_ledger(a), lb = memory::compute_ledger(b);
  const LayerTensors lt = layer_tensors(a, m.is_moe_layer(m.num_layers - 1));
  double module = 2.0 * h * h + 3.0 * m.norm_params() + static_cast<double>(a.padded_vocab) * h;  // proj, norms, embedding copy
  for (double x : lt.dense) module += x;
  for (double x : lt.expert) module += x;
  EXPECT_DOUBLE_EQ(lb.stages[0].params, la.stages[0].params);
  EXPECT_NEAR(lb.stages[1].params - la.stages[1].params, module, 1e-6 * module);
  // Its loss keeps its fp32 softmax copy (4 bytes a logit) while the other loss's backward
  // peaks; its layer keeps its activations.
  const double logits = static_cast<double>(a.training.seq_len) * static_cast<double>(a.padded_vocab);
  EXPECT_DOUBLE_EQ(lb.stages[1].logits.value() - la.stages[1].logits.value(), 4.0 * logits);
  EXPECT_GT(lb.stages[1].activations.value(), la.stages[1].activations.value());

  // Time: the output slot now runs a layer and the head twice.
  const WorkloadBuilder wa(a), wb(b);
  const double head = (wa.output_layer().fwd_time() + wa.output_layer().bwd_time()).value();
  const double layer = (wa.layer(m.num_layers - 1).fwd_time() + wa.layer(m.num_layers - 1).bwd_time()).value();
  const double with_mtp = (wb.output_layer().fwd_time() + wb.output_layer().bwd_time()).value();
  EXPECT_GT(with_mtp, 2.0 * head + 0.9 * layer);
  EXPECT_LT(with_mtp, 2.0 * head + 1.5 * layer);

  // Model FLOPs: one more layer's 6N (active experts) and attention term plus a head pass.
  const double tokens = static_cast<double>(a.tokens_per_step());
  const double extra = model_flops_per_step(b) - model_flops_per_step(a);
  const double s = static_cast<double>(a.training.seq_len);
  const double attn = 3.0 * static_cast<double>(m.heads) * 2.0 * static_cast<double>(m.head_dim) * s;
  EXPECT_NEAR(extra, tokens * (6.0 * (m.mtp_layer_active_params() + static_cast<double>(m.vocab * m.hidden)) + attn),
              1e-9 * extra);

  // A depth outside 0..16 is refused by name.
  Json bad = base;
  bad["training"]["mtp_layers"] = -1;
  const std::string error = parse_error(bad);
  EXPECT_NE(error.find("$.training.mtp_layers"), std::string::npos) << error;
}

// Local attention never costs more than full causal attention (a window just under the
// sequence skips almost nothing), shrinks with the window, and saves nothing with unfused
// attention (it computes and masks the whole score matrix).
TEST(LocalAttention, WindowCostIsBoundedMonotoneAndFusedOnly) {
  auto attention_time = [](Json window, const char* impl) {
    Json j = cp_run(8192, 1, 8);
    j["model"] = {{"hidden_size", 1024}, {"num_attention_heads", 16}, {"num_key_value_heads", 8}, {"num_hidden_layers", 4},
                  {"intermediate_size", 4096}, {"vocab_size", 32000}};
    if (!window.is_null()) j["model"]["sliding_window"] = window;
    j["training"]["attention"] = impl;
    const WorkloadBuilder w(parse(j));
    double t = 0;
    for (const auto& o : w.layer(0).fwd) {
      if (o.kind == OpKind::kAttention) t += o.time.value();
    }
    return t;
  };
  const double full = attention_time(Json(), "flash");
  double previous = 0;
  for (int64_t win : {256, 1024, 4096, 7000, 8191}) {
    const double t = attention_time(win, "flash");
    EXPECT_LE(t, full * (1.0 + 1e-12)) << win;
    EXPECT_GE(t, previous) << win;
    previous = t;
  }
  EXPECT_LT(attention_time(1024, "flash"), 0.3 * full);
  EXPECT_DOUBLE_EQ(attention_time(1024, "unfused"), attention_time(Json(), "unfused"));
}

}  // namespace
}  // namespace stepcast::estimate
