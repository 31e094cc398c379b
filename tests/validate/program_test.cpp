// The step program an executor runs (stepcast validate): it does the work the model counts,
// its pipeline transfers pair up across ranks, its gradient buckets carry every gradient, its
// allocations reach the memory ledger's peak, and plans the executors cannot run are refused.
#include "validate/program.hpp"

#include <gtest/gtest.h>

#include "validate/executor.hpp"
#include "validate/measurement.hpp"

#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <tuple>

#include "sim/config/run_config.hpp"
#include "sim/core/error.hpp"
#include "sim/memory/ledger.hpp"

namespace stepcast::validate {
namespace {

using core::Json;

// The validation plans' model (configs/validate/gpt-tiny.json) inline, with a layout.
config::RunConfig tiny(const Json& parallel, const Json& training_extra = Json::object(), int gpus = 2) {
  Json training{{"seq_len", 256}, {"global_batch_size", 8}, {"precision", "fp32"}, {"attention", "unfused"}};
  for (auto it = training_extra.begin(); it != training_extra.end(); ++it) training[it.key()] = it.value();
  const Json j{{"model",
                {{"name", "gpt-tiny"}, {"num_hidden_layers", 4}, {"hidden_size", 256}, {"num_attention_heads", 4},
                 {"intermediate_size", 1024}, {"vocab_size", 8192}, {"max_position_embeddings", 1024}, {"hidden_act", "gelu"},
                 {"tie_word_embeddings", false}}},
               {"hardware", "cpu"},
               {"cluster", {{"num_gpus", gpus}, {"gpus_per_node", 2}}},
               {"training", training},
               {"parallel", parallel}};
  return executed_run(config::parse_run(j, "<validate-test>", ""), "cpu");
}

// The mixture-of-experts validation plan's model (configs/validate/moe-tiny.json) inline.
config::RunConfig tiny_moe(const Json& parallel, int gpus = 2) {
  const Json j{{"model",
                {{"name", "moe-tiny"}, {"model_type", "mixtral"}, {"num_hidden_layers", 4}, {"hidden_size", 256},
                 {"num_attention_heads", 4}, {"num_key_value_heads", 4}, {"intermediate_size", 512}, {"num_local_experts", 8},
                 {"num_experts_per_tok", 2}, {"vocab_size", 8192}, {"max_position_embeddings", 1024}, {"hidden_act", "silu"},
                 {"tie_word_embeddings", false}}},
               {"hardware", "cpu"},
               {"cluster", {{"num_gpus", gpus}, {"gpus_per_node", 2}}},
               {"training", {{"seq_len", 256}, {"global_batch_size", 8}, {"precision", "fp32"}, {"attention", "unfused"}}},
               {"parallel", parallel}};
  return executed_run(config::parse_run(j, "<validate-test>", ""), "cpu");
}

// check_executable refuses the plan on `backend` with a message naming `what`.
void expect_refused(const config::RunConfig& rc, const std::string& backend, const std::string& what) {
  try {
    check_executable(rc, backend);
    ADD_FAILURE() << "accepted " << what;
  } catch (const core::UserError& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

double gemm_flops(const Program& p) {
  double f = 0;
  for (const auto& in : p.step) {
    if (in.kind == Kind::kGemm) f += in.gemm.flops().value();
  }
  return f;
}

// Without recompute the linear layers run 3 GEMMs (forward, input and weight gradient) of
// 2 * params FLOPs per token: 6 * (matmul params) * tokens per rank.
TEST(ValidateProgram, GemmWorkIsSixTimesMatmulParamsTimesTokens) {
  const auto rc = tiny({{"dp", 2}, {"micro_batch_size", 2}});
  const Program p = build_program(rc, 0);
  const double h = 256, f = 1024, v = 8192, layers = 4;
  const double matmul_params = layers * (4.0 * h * h + 2.0 * h * f) + v * h;  // qkv + o, fc1 + fc2, LM head
  const double tokens = 8.0 * 256.0 / 2.0;                                     // one data-parallel rank
  EXPECT_NEAR(gemm_flops(p), 6.0 * matmul_params * tokens, 1e-9 * gemm_flops(p));
  // Full recompute runs each layer's forward GEMMs once more (not the LM head's).
  const Program r = build_program(tiny({{"dp", 2}, {"micro_batch_size", 2}, {"recompute", "full"}}), 0);
  EXPECT_NEAR(gemm_flops(r) - gemm_flops(p), 2.0 * layers * (4.0 * h * h + 2.0 * h * f) * tokens, 1e-9 * gemm_flops(r));
}

// Tensor parallelism halves every rank's GEMM work and adds the layer all-reduces.
TEST(ValidateProgram, TensorParallelSplitsWorkAndAddsCollectives) {
  const Program dp = build_program(tiny({{"dp", 2}, {"micro_batch_size", 2}}), 0);
  const Program tp = build_program(tiny({{"tp", 2}, {"micro_batch_size", 2}}), 0);
  EXPECT_NEAR(gemm_flops(tp), gemm_flops(dp), 1e-9 * gemm_flops(dp));  // half the width, twice the tokens
  int tp_coll = 0;
  for (const auto& in : tp.step) tp_coll += in.kind == Kind::kCollective && in.group == Group::kTp;
  // 4 micro-batches x (4 layers x 4 all-reduces + embedding + LM head input + loss statistics).
  EXPECT_EQ(tp_coll, 4 * (4 * 4 + 3));
  EXPECT_EQ(tp.tp_group, (std::vector<int64_t>{0, 1}));
  // A run modelled with Megatron-LM's asynchronous linear backward is predicted as the executor
  // runs it: its collectives between the GEMMs on the compute thread.
  EXPECT_FALSE(tiny({{"tp", 2}, {"micro_batch_size", 2}, {"tp_async_backward", true}}).parallel.async_linear_backward());
}

// The pipeline transfers of both ranks of a two-stage run: sends keyed (from, to, tag) and
// receives keyed the same way, each with its bytes.
using Transfers = std::map<std::tuple<int64_t, int64_t, int32_t>, double>;
std::pair<Transfers, Transfers> transfers(const config::RunConfig& rc) {
  Transfers sends, recvs;
  for (int64_t r = 0; r < 2; ++r) {
    for (const auto& in : build_program(rc, r).step) {
      if (in.kind == Kind::kSend) sends[{r, in.peer, in.tag}] = in.bytes;
      if (in.kind == Kind::kRecv) recvs[{in.peer, r, in.tag}] = in.bytes;
    }
  }
  return {sends, recvs};
}

// Every pipeline send has a receive on its peer with the same tag and size, in an order the
// schedule makes deadlock-free (checked by the CPU test); 1F1B moves one activation and one
// gradient per micro-batch.
TEST(ValidateProgram, PipelineTransfersPairUp) {
  const auto [sends, recvs] = transfers(tiny({{"pp", 2}, {"micro_batch_size", 1}, {"schedule", "1f1b"}}));
  EXPECT_EQ(sends.size(), 16u);  // 8 activations forward, 8 gradients back
  EXPECT_EQ(sends, recvs);
  // ZB-V over two stages: a micro-batch crosses from stage 0 to 1 (chunk 0), turns on stage 1
  // without a transfer and crosses back (chunk 1): two activations and two gradients.
  const auto [vsends, vrecvs] = transfers(tiny({{"pp", 2}, {"vpp", 2}, {"micro_batch_size", 1}, {"schedule", "zbv"}}));
  EXPECT_EQ(vsends.size(), 32u);
  EXPECT_EQ(vsends, vrecvs);
  // DualPipeV moves the same transfers in another order.
  const auto [dsends, drecvs] = transfers(tiny({{"pp", 2}, {"vpp", 2}, {"micro_batch_size", 1}, {"schedule", "dualpipev"}}));
  EXPECT_EQ(dsends, vsends);
  EXPECT_EQ(drecvs, vrecvs);
}

// Buckets carry every gradient once (all-reduce), or reduce-scatter them and all-gather the
// updated weights under ZeRO-1.
TEST(ValidateProgram, GradientBucketsCoverTheGradients) {
  for (int zero : {0, 1}) {
    const auto rc = tiny({{"dp", 2}, {"micro_batch_size", 2}, {"zero_stage", zero}, {"bucket_mb", 8}});
    const Program p = build_program(rc, 0);
    double reduced = 0, gathered = 0;
    int buckets = 0;
    for (const auto& in : p.step) {
      if (in.kind != Kind::kCollective || in.group != Group::kDp) continue;
      if (in.collective == cost::Collective::kAllGather) {
        gathered += in.bytes;
      } else {
        reduced += in.bytes;
        ++buckets;
        EXPECT_EQ(in.collective, zero ? cost::Collective::kReduceScatter : cost::Collective::kAllReduce);
      }
    }
    const double grads = p.weight_bytes;  // fp32 weights and gradients: 4 bytes each
    EXPECT_NEAR(reduced, grads, 1e-9 * grads);
    EXPECT_GE(buckets, 3);  // 1 MB first, then 8 MB buckets of whole tensors
    EXPECT_NEAR(gathered, zero ? grads : 0.0, 1e-9 * grads);
    EXPECT_NEAR(p.optimizer_bytes, 8.0 * p.weight_bytes / 4.0 / (zero ? 2.0 : 1.0), 1e-6 * p.weight_bytes);
  }
}

// With overlapped reduction (the CUDA executor), each bucket is launched asynchronously right
// after the last micro-batch's backward of the layer that completes it, and one join waits for
// them before the optimizer; the CPU executor reduces everything after the pipeline.
TEST(ValidateProgram, OverlappedBucketsFollowTheLastBackward) {
  Json j{{"model",
          {{"name", "gpt-tiny"}, {"num_hidden_layers", 4}, {"hidden_size", 256}, {"num_attention_heads", 4},
           {"intermediate_size", 1024}, {"vocab_size", 8192}, {"max_position_embeddings", 1024}, {"hidden_act", "gelu"},
           {"tie_word_embeddings", false}}},
         {"hardware", "h100-sxm"},
         {"cluster", {{"num_gpus", 2}, {"gpus_per_node", 2}}},
         {"training", {{"seq_len", 256}, {"global_batch_size", 8}, {"precision", "bf16"}, {"attention", "unfused"}}},
         {"parallel", {{"dp", 2}, {"micro_batch_size", 2}, {"bucket_mb", 1}}}};
  const auto base = config::parse_run(j, "<overlap-test>", "");
  const Program gpu = build_program(executed_run(base, "cuda"), 0);
  const Program cpu = build_program(executed_run(base, "cpu"), 0);
  auto index_of = [](const Program& p, Kind k) {
    for (size_t i = 0; i < p.step.size(); ++i) {
      if (p.step[i].kind == k) return i;
    }
    return p.step.size();
  };
  size_t async = 0, first_bucket = gpu.step.size(), last_gemm = 0;
  double bytes_gpu = 0, bytes_cpu = 0;
  for (size_t i = 0; i < gpu.step.size(); ++i) {
    const auto& in = gpu.step[i];
    if (in.kind == Kind::kGemm) last_gemm = i;
    if (in.kind == Kind::kCollective && in.group == Group::kDp) {
      async += in.async;
      bytes_gpu += in.bytes;
      first_bucket = std::min(first_bucket, i);
    }
  }
  for (const auto& in : cpu.step) {
    if (in.kind == Kind::kCollective && in.group == Group::kDp) {
      EXPECT_FALSE(in.async);
      bytes_cpu += in.bytes;
    }
  }
  EXPECT_GE(async, 3u);                   // 1 MB buckets of whole tensors
  EXPECT_LT(first_bucket, last_gemm);     // launched during the last backward
  EXPECT_LT(index_of(gpu, Kind::kJoin), index_of(gpu, Kind::kOptimizer));
  EXPECT_EQ(index_of(cpu, Kind::kJoin), cpu.step.size());  // no join on CPUs
  EXPECT_NEAR(bytes_gpu, bytes_cpu, 1e-9 * bytes_cpu);
}

// ZeRO-3 / FSDP: every micro-batch gathers each unit (embedding, layers, LM head) before its
// forward and again before its backward, and reduce-scatters its gradient after the backward
// (without resharding after forward, once per step each):
// gathered bytes 2 m P x 4 and reduced bytes m P x 4 for the ledger's P parameters in fp32 (the
// weights are sharded over the two ranks), all on the data-parallel group, with no gradient
// buckets; each gather precedes the first GEMM of its unit. With full recompute and
// zero3_recompute_regather the recomputed forward gathers once more.
TEST(ValidateProgram, FsdpGathersEveryUnitAndReduceScattersItsGradient) {
  const auto rc = tiny({{"dp", 2}, {"micro_batch_size", 2}, {"fsdp", true}});
  const Program p = build_program(rc, 0);
  const double layers = 4;
  const double params = memory::compute_ledger(rc).stages[0].params;
  const double m = static_cast<double>(rc.num_microbatches);
  double gathered = 0, reduced = 0;
  size_t gathers = 0, scatters = 0;
  int last_layer = -3;
  bool gemm_after_gather = true;
  for (const auto& in : p.step) {
    if (in.kind == Kind::kCollective) {
      EXPECT_EQ(in.group, Group::kDp);
      EXPECT_NE(in.collective, cost::Collective::kAllReduce);
      if (in.collective == cost::Collective::kAllGather) gathered += in.bytes, ++gathers, last_layer = in.layer;
      if (in.collective == cost::Collective::kReduceScatter) reduced += in.bytes, ++scatters;
    }
    if (in.kind == Kind::kGemm && in.layer != last_layer) gemm_after_gather = false;
  }
  EXPECT_TRUE(gemm_after_gather);
  EXPECT_EQ(gathers, static_cast<size_t>(2.0 * m * (layers + 2.0)));
  EXPECT_EQ(scatters, static_cast<size_t>(m * (layers + 2.0)));
  EXPECT_NEAR(gathered, 2.0 * m * params * 4.0, 1e-6 * gathered);
  EXPECT_NEAR(reduced, m * params * 4.0, 1e-6 * reduced);
  EXPECT_NEAR(p.weight_bytes, params * 4.0 / 2.0, 1e-6 * p.weight_bytes);
  const Program r = build_program(tiny({{"dp", 2}, {"micro_batch_size", 2}, {"fsdp", true}, {"recompute", "full"},
                                        {"zero3_recompute_regather", true}}), 0);
  size_t regathers = 0;
  for (const auto& in : r.step) regathers += in.kind == Kind::kCollective && in.collective == cost::Collective::kAllGather;
  EXPECT_EQ(regathers, gathers + static_cast<size_t>(m * layers));
  // Without resharding after forward: one gather per unit (the first micro-batch's forward)
  // and one reduce-scatter (the last micro-batch's backward) for the whole step.
  const auto keep = tiny({{"dp", 2}, {"micro_batch_size", 1}, {"fsdp", true}, {"reshard_after_forward", false}});
  ASSERT_GT(keep.num_microbatches, 1);
  size_t once_g = 0, once_rs = 0;
  for (const auto& in : build_program(keep, 0).step) {
    if (in.kind != Kind::kCollective) continue;
    once_g += in.collective == cost::Collective::kAllGather;
    once_rs += in.collective == cost::Collective::kReduceScatter;
  }
  EXPECT_EQ(once_g, static_cast<size_t>(layers + 2.0));
  EXPECT_EQ(once_rs, static_cast<size_t>(layers + 2.0));
  EXPECT_NO_THROW(check_executable(keep, "cpu"));
  // One micro-batch: gathered once for its forward and kept for its backward, as simulated.
  const auto one = tiny({{"dp", 2}, {"micro_batch_size", 4}, {"fsdp", true}, {"reshard_after_forward", false}});
  ASSERT_EQ(one.num_microbatches, 1);
  size_t one_g = 0;
  for (const auto& in : build_program(one, 0).step) one_g += in.kind == Kind::kCollective && in.collective == cost::Collective::kAllGather;
  EXPECT_EQ(one_g, static_cast<size_t>(layers + 2.0));
}

// Hybrid sharding over dp 4 in 2 replicas: state is sharded within a replica (ranks 0-1 and
// 2-3), every gradient reduce-scatter over the replica is followed by the all-reduce of its
// reduced shard (half of it) over the replicate group (the same position in each replica),
// and the gathers stay within the replica; ZeRO-1 buckets likewise.
TEST(ValidateProgram, HybridShardingAllReducesEachReducedShardAcrossTheReplicas) {
  for (const Json& sharding : {Json{{"fsdp", true}}, Json{{"zero_stage", 1}}}) {
    Json parallel{{"dp", 4}, {"dp_replicate", 2}, {"micro_batch_size", 2}};
    parallel.update(sharding);
    const auto rc = tiny(parallel, {}, 4);
    const Program p = build_program(rc, 1);
    EXPECT_EQ(p.dp_group, (std::vector<int64_t>{0, 1})) << sharding.dump();
    EXPECT_EQ(p.dp_replicate_group, (std::vector<int64_t>{1, 3})) << sharding.dump();
    const auto ledger = memory::compute_ledger(rc);
    EXPECT_NEAR(p.optimizer_bytes, ledger.stages[0].optimizer.value(), 1e-6 * p.optimizer_bytes) << sharding.dump();
    const double params = ledger.stages[0].params;
    EXPECT_NEAR(p.optimizer_bytes, params * memory::state_bytes(rc.training).optimizer / 2.0, 1e-6 * p.optimizer_bytes);  // over 2, not 4
    size_t scatters = 0, replica_reduces = 0;
    double scattered = 0;
    for (size_t i = 0; i < p.step.size(); ++i) {
      const Instr& in = p.step[i];
      if (in.kind != Kind::kCollective) continue;
      if (in.group == Group::kDpReplicate) {
        EXPECT_EQ(in.collective, cost::Collective::kAllReduce);
        ++replica_reduces;
        continue;
      }
      EXPECT_EQ(in.group, Group::kDp) << p.names[in.name];
      if (in.collective != cost::Collective::kReduceScatter) continue;
      ++scatters;
      scattered += in.bytes;
      ASSERT_LT(i + 1, p.step.size());
      const Instr& next = p.step[i + 1];
      EXPECT_EQ(next.group, Group::kDpReplicate) << "reduce-scatter " << i << " is not followed by the replicas' all-reduce";
      EXPECT_DOUBLE_EQ(next.bytes, in.bytes / 2.0);
      EXPECT_EQ(next.async, in.async);
    }
    EXPECT_GT(scatters, 0u) << sharding.dump();
    EXPECT_EQ(replica_reduces, scatters) << sharding.dump();
    EXPECT_NEAR(scattered, static_cast<double>(rc.num_microbatches > 1 && sharding.contains("fsdp") ? rc.num_microbatches : 1) * params * 4.0,
                1e-6 * scattered);
  }
  // Mixture of experts (configs/validate/ep2-moe-hsdp.json): the routed experts' group (dp 4 /
  // ep 2 = 2 ranks) splits into 2 replicas of one rank, so each expert bucket's reduced shard
  // is the whole bucket, all-reduced across the replicas.
  const Program moe = build_program(tiny_moe({{"dp", 4}, {"ep", 2}, {"dp_replicate", 2}, {"zero_stage", 1}, {"micro_batch_size", 2},
                                              {"moe", {{"imbalance", 1.0}}}}, 4), 0);
  EXPECT_EQ(moe.edp_group, (std::vector<int64_t>{0}));
  EXPECT_EQ(moe.edp_replicate_group, (std::vector<int64_t>{0, 2}));
  size_t expert_buckets = 0;
  for (size_t i = 0; i + 1 < moe.step.size(); ++i) {
    const Instr& in = moe.step[i];
    if (in.kind != Kind::kCollective || in.group != Group::kEdp || in.collective != cost::Collective::kReduceScatter) continue;
    ++expert_buckets;
    EXPECT_EQ(moe.step[i + 1].group, Group::kEdpReplicate);
    EXPECT_DOUBLE_EQ(moe.step[i + 1].bytes, in.bytes);
  }
  EXPECT_GT(expert_buckets, 0u);
}

// Mixture of experts over ep 2: every MoE layer dispatches and combines its T x k token copies
// (T = 512 tokens per micro-batch, k = 2, h = 256, fp32) on the expert-parallel group, forward
// and backward, and runs its 4 local experts' GEMMs as one batch at 2 x 512 x 2 / 8 = 256 tokens
// per expert (balanced routing); with dp 2 over the same two ranks the expert-data-parallel
// group is a single rank, so routed-expert gradients are not reduced and ZeRO-1 does not shard
// them. No per-expert host work is executed.
TEST(ValidateProgram, ExpertLayersDispatchOverTheExpertGroup) {
  const auto rc = tiny_moe({{"dp", 2}, {"ep", 2}, {"micro_batch_size", 2}, {"zero_stage", 1}, {"moe", {{"imbalance", 1.0}}}});
  EXPECT_DOUBLE_EQ(rc.parallel.moe.expert_overhead, 0.0);
  const Program p = build_program(rc, 0);
  EXPECT_EQ(p.ep_group.size(), 2u);
  EXPECT_EQ(p.edp_group.size(), 1u);
  const double m = static_cast<double>(rc.num_microbatches), layers = 4, copy_bytes = 512.0 * 2.0 * 256.0 * 4.0;
  size_t a2a = 0, expert_gemms = 0;
  double edp_bytes = 0, dp_bytes = 0;
  for (const auto& in : p.step) {
    if (in.kind == Kind::kCollective && in.group == Group::kEp) {
      EXPECT_EQ(in.collective, cost::Collective::kAllToAll);
      EXPECT_EQ(in.category, Category::kEpComm);
      EXPECT_NEAR(in.bytes, copy_bytes, 1e-9 * copy_bytes);
      ++a2a;
    }
    if (in.kind == Kind::kCollective && in.group == Group::kEdp) edp_bytes += in.bytes;
    if (in.kind == Kind::kCollective && in.group == Group::kDp) dp_bytes += in.bytes;
    if (in.kind == Kind::kGemm && p.names[in.name].starts_with("experts.fc1")) {
      EXPECT_DOUBLE_EQ(in.gemm.batch, 4.0);
      EXPECT_DOUBLE_EQ(in.gemm.m, 256.0);
      ++expert_gemms;
    }
  }
  EXPECT_EQ(a2a, static_cast<size_t>(4.0 * m * layers));  // dispatch, combine; their gradients
  EXPECT_EQ(expert_gemms, static_cast<size_t>(3.0 * m * layers));  // forward, dgrad, wgrad
  // Dense gradients reduce-scattered and weights all-gathered over dp; the experts' over a
  // group of one rank.
  const auto& st = memory::compute_ledger(rc).stages[0];
  EXPECT_NEAR(dp_bytes, 2.0 * st.dense_params * 4.0, 1e-6 * dp_bytes);
  EXPECT_NEAR(edp_bytes, 2.0 * st.expert_params * 4.0, 1e-6 * edp_bytes);
  EXPECT_NEAR(p.optimizer_bytes, (st.dense_params / 2.0 + st.expert_params) * 8.0, 1e-6 * p.optimizer_bytes);
  // Under FSDP each MoE layer's routed experts are gathered and reduce-scattered over the
  // expert-data-parallel group they are sharded on, its dense parameters over dp.
  const auto z3 = tiny_moe({{"dp", 2}, {"ep", 2}, {"micro_batch_size", 2}, {"fsdp", true}, {"moe", {{"imbalance", 1.0}}}});
  double ag_dp = 0, ag_edp = 0;
  for (const auto& in : build_program(z3, 0).step) {
    if (in.kind != Kind::kCollective || in.collective != cost::Collective::kAllGather) continue;
    (in.group == Group::kEdp ? ag_edp : ag_dp) += in.bytes;
  }
  const auto& z3s = memory::compute_ledger(z3).stages[0];
  const double zm = static_cast<double>(z3.num_microbatches);
  EXPECT_NEAR(ag_edp, 2.0 * zm * z3s.expert_params * 4.0, 1e-6 * ag_edp);
  EXPECT_NEAR(ag_dp, 2.0 * zm * z3s.dense_params * 4.0, 1e-6 * ag_dp);
  // Expert tensor parallelism is not executed, and the CUDA executor runs no expert layers.
  expect_refused(tiny_moe({{"tp", 2}, {"etp", 2}, {"micro_batch_size", 2}}), "cpu", "parallel.etp 2");
  expect_refused(tiny_moe({{"dp", 2}, {"ep", 2}, {"micro_batch_size", 2}}), "cuda", "mixture-of-experts");
  EXPECT_NO_THROW(check_executable(rc, "cpu"));
}

// Context parallelism over two ranks (T = 128 of the 256 tokens each, K and V of width 256 in
// fp32): the ring sends its K/V block to the next rank and receives the previous rank's, once
// per layer in forward (cp - 1 hops) and with the dK/dV block in backward (twice the bytes),
// each hop exposed (cp_overlap off); attention runs the rank's 128 queries against all 256
// keys. The all-gather variant gathers the 2 x 2 x 128 x 256 x 4 bytes of K/V instead and
// reduce-scatters their gradients. Gradients reduce over dp x cp.
TEST(ValidateProgram, ContextParallelExchangesKvOverTheContextGroup) {
  const auto ring = tiny({{"cp", 2}, {"cp_comm", "ring"}, {"micro_batch_size", 1}});
  EXPECT_FALSE(ring.parallel.cp_overlap);
  const Program p = build_program(ring, 1);
  EXPECT_EQ(p.cp_group.size(), 2u);
  EXPECT_EQ(p.dp_group.size(), 2u);
  const double m = static_cast<double>(ring.num_microbatches), layers = 4, kv = 128.0 * 2.0 * 256.0 * 4.0;
  size_t hops = 0;
  double hop_bytes = 0;
  bool attention_shape = true;
  for (const auto& in : p.step) {
    if (in.kind == Kind::kCollective && in.group == Group::kCp) {
      EXPECT_EQ(in.collective, cost::Collective::kSendRecv);
      EXPECT_EQ(in.category, Category::kCpComm);
      ++hops;
      hop_bytes += in.bytes;
    }
    if (in.kind == Kind::kAttention) attention_shape = attention_shape && in.attention.sq == 128.0 && in.attention.sk == 256.0;
  }
  EXPECT_TRUE(attention_shape);
  EXPECT_EQ(hops, static_cast<size_t>(2.0 * m * layers));
  EXPECT_NEAR(hop_bytes, m * layers * 3.0 * kv, 1e-9 * hop_bytes);
  const Program g = build_program(tiny({{"cp", 2}, {"cp_comm", "allgather"}, {"micro_batch_size", 1}}), 0);
  double gathered = 0, scattered = 0;
  for (const auto& in : g.step) {
    if (in.kind != Kind::kCollective || in.group != Group::kCp) continue;
    (in.collective == cost::Collective::kAllGather ? gathered : scattered) += in.bytes;
  }
  EXPECT_NEAR(gathered, 2.0 * m * layers * 2.0 * kv, 1e-9 * gathered);
  EXPECT_NEAR(scattered, m * layers * 2.0 * kv, 1e-9 * scattered);
  expect_refused(tiny({{"cp", 2}, {"cp_load_balance", false}, {"micro_batch_size", 1}}), "cpu", "parallel.cp_load_balance false");
  expect_refused(tiny({{"cp", 2}, {"micro_batch_size", 1}}, {{"precision", "bf16"}}), "cuda", "parallel.cp 2");
  EXPECT_NO_THROW(check_executable(ring, "cpu"));
}

// The program's allocations reach the ledger's peak within 10% on every rank of the
// validation layouts and a few more (what the executor then measures with real buffers).
TEST(ValidateProgram, AllocationsReachTheLedgerPeak) {
  const std::vector<Json> layouts{
      {{"dp", 2}, {"micro_batch_size", 2}},
      {{"tp", 2}, {"micro_batch_size", 2}},
      {{"pp", 2}, {"micro_batch_size", 1}, {"schedule", "1f1b"}},
      {{"dp", 2}, {"micro_batch_size", 2}, {"zero_stage", 1}},
      {{"dp", 2}, {"micro_batch_size", 2}, {"recompute", "full"}},
      {{"tp", 2}, {"micro_batch_size", 2}, {"sp", true}},
      {{"pp", 2}, {"micro_batch_size", 1}, {"schedule", "gpipe"}},
      {{"tp", 2}, {"micro_batch_size", 2}, {"recompute", "selective"}},
      // ZB-H1: the held-back weight-gradient passes keep their inputs from B until W.
      {{"pp", 2}, {"micro_batch_size", 1}, {"schedule", "zb-h1"}},
      // ZeRO-3 / FSDP: one gathered unit (the LM head, the largest) and its unsharded gradient.
      {{"dp", 2}, {"micro_batch_size", 2}, {"fsdp", true}},
      {{"dp", 2}, {"micro_batch_size", 2}, {"zero_stage", 3}, {"recompute", "full"}, {"zero3_recompute_regather", true}},
      // Without resharding: every unit gathered and its gradient unsharded through the step
      // (four micro-batches), or from its forward to its backward (one).
      {{"dp", 2}, {"micro_batch_size", 1}, {"fsdp", true}, {"reshard_after_forward", false}},
      {{"dp", 2}, {"micro_batch_size", 4}, {"fsdp", true}, {"reshard_after_forward", false}},
  };
  std::vector<config::RunConfig> runs;
  for (const auto& l : layouts) runs.push_back(tiny(l));
  // Hybrid sharding: state sharded over a replica of 2 of the 4 data-parallel ranks.
  runs.push_back(tiny({{"dp", 4}, {"dp_replicate", 2}, {"micro_batch_size", 1}, {"fsdp", true}}, {}, 4));
  runs.push_back(tiny({{"dp", 4}, {"dp_replicate", 2}, {"micro_batch_size", 1}, {"zero_stage", 1}}, {}, 4));
  // Mixture of experts: the routed copies' inputs and activations, dispatched over ep 2.
  for (const char* dispatcher : {"alltoall", "allgather"}) {
    runs.push_back(tiny_moe({{"dp", 2}, {"ep", 2}, {"micro_batch_size", 2}, {"moe", {{"dispatcher", dispatcher}, {"imbalance", 1.0}}}}));
  }
  runs.push_back(tiny_moe({{"dp", 2}, {"ep", 2}, {"micro_batch_size", 2}, {"zero_stage", 1}, {"moe", {{"imbalance", 1.0}}}}));
  runs.push_back(tiny_moe({{"dp", 2}, {"ep", 2}, {"micro_batch_size", 2}, {"fsdp", true}, {"moe", {{"imbalance", 1.0}}}}));
  // Multi-head latent attention (a small DeepSeek-style dense model) and sliding-window layers
  // (unfused, so the whole score matrix is computed and kept).
  {
    const Json mla{{"name", "mla-tiny"}, {"model_type", "deepseek_v2"}, {"num_hidden_layers", 4}, {"hidden_size", 256},
                   {"num_attention_heads", 4}, {"num_key_value_heads", 4}, {"intermediate_size", 1024}, {"vocab_size", 8192},
                   {"max_position_embeddings", 1024}, {"hidden_act", "silu"}, {"q_lora_rank", 96}, {"kv_lora_rank", 64},
                   {"qk_nope_head_dim", 32}, {"qk_rope_head_dim", 16}, {"v_head_dim", 32}, {"tie_word_embeddings", false}};
    Json j{{"model", mla},
           {"hardware", "cpu"},
           {"cluster", {{"num_gpus", 2}, {"gpus_per_node", 2}}},
           {"training", {{"seq_len", 256}, {"global_batch_size", 8}, {"precision", "fp32"}, {"attention", "unfused"}}},
           {"parallel", {{"dp", 2}, {"micro_batch_size", 2}}}};
    runs.push_back(executed_run(config::parse_run(j, "<validate-test>", ""), "cpu"));
    j["model"] = {{"name", "window-tiny"}, {"model_type", "mistral"}, {"num_hidden_layers", 4}, {"hidden_size", 256},
                  {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"intermediate_size", 512}, {"vocab_size", 8192},
                  {"max_position_embeddings", 1024}, {"hidden_act", "silu"}, {"sliding_window", 64}, {"tie_word_embeddings", false}};
    j["parallel"] = {{"tp", 2}, {"micro_batch_size", 2}};
    runs.push_back(executed_run(config::parse_run(j, "<validate-test>", ""), "cpu"));
    for (const auto& r : std::vector<config::RunConfig>(runs.end() - 2, runs.end())) EXPECT_NO_THROW(check_executable(r, "cpu"));
  }
  // Context parallelism: the all-gather variants' gathered K/V and accumulators in backward.
  for (const char* variant : {"ring", "allgather", "ulysses", "rotate-allgather"}) {
    runs.push_back(tiny({{"cp", 2}, {"cp_comm", variant}, {"micro_batch_size", 1}}));
  }
  for (const auto& rc : runs) {
    const Json l = {{"model", rc.model.name}, {"layout", rc.parallel.ep > 1 ? "moe" : rc.parallel.cp > 1 ? "cp " + config::to_string(rc.parallel.cp_comm) : "dense"}};
    const auto ledger = memory::compute_ledger(rc);
    for (int64_t r = 0; r < 2; ++r) {
      const Program p = build_program(rc, r);
      const double want = ledger.stages[static_cast<size_t>(p.stage)].total().value();
      const double got = program_peak_bytes(p);
      EXPECT_NEAR(got / want, 1.0, 0.10) << l.dump() << " rank " << r << ": program " << got << ", ledger " << want;
    }
  }
}

// 1F1B keeps at most pp micro-batches of activations on stage 0; GPipe keeps all of them.
TEST(ValidateProgram, InFlightActivationsFollowTheSchedule) {
  const double one_f1b = program_peak_bytes(build_program(tiny({{"pp", 2}, {"micro_batch_size", 1}, {"schedule", "1f1b"}}), 0));
  const double gpipe = program_peak_bytes(build_program(tiny({{"pp", 2}, {"micro_batch_size", 1}, {"schedule", "gpipe"}}), 0));
  const auto ledger = memory::compute_ledger(tiny({{"pp", 2}, {"micro_batch_size", 1}, {"schedule", "1f1b"}}));
  const double per_mb = ledger.stages[0].activations.value() / 2.0;
  EXPECT_NEAR((gpipe - one_f1b) / per_mb, 8.0 - 2.0, 0.5);
}

TEST(ValidateProgram, RefusesWhatTheExecutorsCannotRun) {
  expect_refused(tiny({{"dp", 2}, {"micro_batch_size", 2}}, {{"attention", "flash"}}), "cpu", "training.attention");
  expect_refused(tiny({{"dp", 2}, {"micro_batch_size", 2}}, {{"precision", "bf16"}}), "cpu", "training.precision");
  expect_refused(tiny({{"dp", 2}, {"micro_batch_size", 2}}, {{"precision", "bf16"}, {"lora", {{"rank", 4}, {"base_quantization", "nf4"}}}}),
                 "cuda", "training.lora.base_quantization");
  expect_refused(tiny({{"pp", 2}, {"micro_batch_size", 1}, {"pp_rendezvous", true}}), "cpu", "parallel.pp_rendezvous");
  {
    // A tied model split over a pipeline: the simulation all-reduces the embedding gradient
    // between the first and last stage, which the executors do not.
    Json j{{"model", {{"name", "gpt-tiny-tied"}, {"num_hidden_layers", 4}, {"hidden_size", 256}, {"num_attention_heads", 4},
                      {"intermediate_size", 1024}, {"vocab_size", 8192}, {"max_position_embeddings", 1024}, {"hidden_act", "gelu"},
                      {"tie_word_embeddings", true}}},
           {"hardware", "cpu"},
           {"cluster", {{"num_gpus", 2}, {"gpus_per_node", 2}}},
           {"training", {{"seq_len", 256}, {"global_batch_size", 8}, {"precision", "fp32"}, {"attention", "unfused"}}},
           {"parallel", {{"pp", 2}, {"micro_batch_size", 1}}}};
    expect_refused(config::parse_run(j, "<validate-test>", ""), "cpu", "model.tie_word_embeddings");
    j["parallel"] = {{"dp", 2}, {"micro_batch_size", 2}};
    EXPECT_NO_THROW(check_executable(config::parse_run(j, "<validate-test>", ""), "cpu"));  // one stage: nothing to sum
  }
  EXPECT_NO_THROW(check_executable(tiny({{"dp", 2}, {"micro_batch_size", 2}, {"fsdp", true}}), "cpu"));
  EXPECT_NO_THROW(check_executable(tiny({{"tp", 2}, {"sp", true}, {"micro_batch_size", 2}}), "cpu"));
  EXPECT_NO_THROW(check_executable(tiny({{"dp", 4}, {"micro_batch_size", 2}, {"fsdp", true}, {"dp_replicate", 2}}, {}, 4), "cpu"));
  const auto rc = tiny({{"dp", 2}, {"micro_batch_size", 2}});
  EXPECT_FALSE(rc.parallel.grad_reduce_overlap);  // CPU ranks reduce after the pipeline
  EXPECT_FALSE(rc.parallel.param_gather_overlap);
}

// The executors' caching allocator: freed blocks are reused by size, the high-water mark
// counts live bytes only, and running past the device's memory or a failed raw allocation is
// "does not fit".
TEST(ValidateArena, CachesBlocksAndTracksThePeak) {
  int raw_allocs = 0, raw_frees = 0;
  {
    Arena arena(
        1000.0, 3,
        [&](size_t n) {
          ++raw_allocs;
          return static_cast<void*>(new char[n]);
        },
        [&](void* p) {
          ++raw_frees;
          delete[] static_cast<char*>(p);
        });
    void* a = arena.alloc(0, 300);
    arena.alloc(1, 200);
    EXPECT_DOUBLE_EQ(arena.peak(), 500.0);
    arena.free(0);
    void* again = arena.alloc(2, 300);  // same size: the cached block
    EXPECT_EQ(again, a);
    EXPECT_EQ(raw_allocs, 2);
    arena.free(1);
    arena.alloc(3, 100);  // new size: a new block; live 400, reserved 600
    EXPECT_EQ(raw_allocs, 3);
    EXPECT_DOUBLE_EQ(arena.peak(), 500.0);
    EXPECT_DOUBLE_EQ(arena.peak_reserved(), 600.0);
    try {
      arena.alloc(4, 700);  // 400 live + 700 > 1000
      ADD_FAILURE() << "no error past the capacity";
    } catch (const DoesNotFit& e) {
      EXPECT_NE(std::string(e.what()).find("does not fit: rank 3 needed"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(raw_frees, raw_allocs);  // every block released with the arena
  Arena failing(1e12, 0, [](size_t) -> void* { return nullptr; }, [](void*) {});
  EXPECT_THROW(failing.alloc(0, 64), DoesNotFit);
}

TEST(ValidateProgram, CudaBackendRefusesWhatItCannotRun) {
  auto rc = tiny({{"dp", 2}, {"micro_batch_size", 2}}, {{"precision", "bf16"}});
  EXPECT_NO_THROW(check_executable(rc, "cuda"));
  EXPECT_THROW(check_executable(tiny({{"dp", 2}, {"micro_batch_size", 2}}, {{"precision", "fp8"}}), "cuda"), core::UserError);
  EXPECT_THROW(check_executable(tiny({{"dp", 2}, {"micro_batch_size", 2}}, {{"precision", "bf16"}, {"attention", "flash"}}), "cuda"),
               core::UserError);
  expect_refused(tiny({{"dp", 4}, {"micro_batch_size", 2}, {"fsdp", true}, {"dp_replicate", 2}}, {{"precision", "bf16"}}, 4), "cuda",
                 "parallel.dp_replicate 2");
}

// A plan validate --resume takes from the journal reads back as the comparison it was: the
// same JSON, Markdown, and summary.
TEST(ValidateComparison, ReadsBackFromItsJson) {
  const auto rc = tiny({{"dp", 2}, {"micro_batch_size", 2}});
  Comparison c;
  c.run = "dp2.json";
  c.profile = "cpu";
  c.command = "stepcast validate dp2.json";
  c.predicted_step_s = 0.4, c.measured_step_s = 0.5, c.measured_min_s = 0.45, c.measured_max_s = 0.6;
  c.phases = {{"compute", 0.3, 0.35, -1}, {"data-parallel communication", 0.05, 0.08, 0.01}};
  c.memory = {{0, 0, 1e8, 1.05e8, 1.2e8, 1.1e8, 3e8}, {1, 0, 1e8, 1.02e8, 1.1e8, 1.1e8, 3e8}};
  c.reference_predicted_s = 0.04, c.reference_measured_s = 0.05, c.drift_adjusted_step_s = 0.49;
  c.reference_baseline = "calibration samples";
  Measured m;
  m.backend = "cpu";
  m.steps = 2;
  m.step_s = {0.45, 0.6};
  m.reference = {512, 1024, 1024, 1};
  m.reference_samples_s = {0.05, 0.048, 0.055};
  const Json j = comparison_json(rc, c, m);
  const Comparison back = comparison_from_json(j);
  EXPECT_EQ(comparison_json(rc, back, m), j);
  EXPECT_EQ(comparison_markdown(rc, back, m), comparison_markdown(rc, c, m));
  EXPECT_EQ(suite_markdown({back}), suite_markdown({c}));
  EXPECT_THROW((void)comparison_from_json(Json{{"run", "x"}}), Json::out_of_range);
}

// A round's measurement as validate journals it reads back exactly (traces included), and rounds
// of one plan merge into one measurement: steps and reference samples in round order, the
// largest peaks, the last round's traces, the median over every round's steps.
TEST(ValidateMeasured, RoundsJournalAndMergeIntoOneMeasurement) {
  auto round = [](double base, double peak) {
    Measured m;
    m.backend = "cpu";
    m.steps = 2, m.warmup = 1;
    m.step_s = {base, base + 0.1};
    m.reference = {512, 1024, 1024, 1};
    m.reference_samples_s = {0.05, 0.06, base / 20.0};
    for (int64_t r = 0; r < 2; ++r) {
      RankMeasurement x;
      x.rank = r, x.stage = 0;
      x.step_s = m.step_s;
      std::array<double, kCategories> cat{};
      cat[static_cast<size_t>(Category::kCompute)] = base * 0.8;
      x.category_s = {cat, cat};
      x.peak_allocated_bytes = peak + static_cast<double>(r), x.peak_reserved_bytes = 2 * peak, x.workspace_bytes = 1e6, x.rss_delta_bytes = peak;
      x.trace = {{0.0, base / 2, 3u, Category::kCompute, 0, 1}, {base / 2, base / 4, 7u, Category::kDpComm, -1, -2}};
      x.trace_t0_s = 100.0 * base;
      m.ranks.push_back(x);
    }
    return m;
  };
  const Measured a = round(1.0, 5e7), b = round(2.0, 4e7);
  EXPECT_EQ(measured_json(measured_from_json(measured_json(a))), measured_json(a));
  EXPECT_EQ(measured_from_json(measured_json(a)).ranks[1].trace[1].category, Category::kDpComm);
  const Measured m = merge_rounds({a, b});
  EXPECT_EQ(m.rounds, 2);
  EXPECT_EQ(m.steps, 4);
  EXPECT_EQ(m.warmup, 1);
  EXPECT_EQ(m.step_s, (std::vector<double>{1.0, 1.1, 2.0, 2.1}));
  EXPECT_DOUBLE_EQ(m.median_step_s(), 1.55);
  EXPECT_EQ(m.reference_samples_s.size(), 6u);
  EXPECT_DOUBLE_EQ(m.reference_s(), median({0.05, 0.06, 0.05, 0.05, 0.06, 0.1}));
  ASSERT_EQ(m.ranks.size(), 2u);
  EXPECT_EQ(m.ranks[1].category_s.size(), 4u);
  EXPECT_DOUBLE_EQ(m.ranks[1].peak_allocated_bytes, 5e7 + 1);  // the largest round
  EXPECT_DOUBLE_EQ(m.ranks[0].trace_t0_s, 200.0);               // the last round's trace
  EXPECT_DOUBLE_EQ(m.ranks[0].trace[0].dur_s, 1.0);
  Measured other = b;
  other.ranks.pop_back();
  EXPECT_THROW((void)merge_rounds({a, other}), core::UserError);
  EXPECT_THROW((void)merge_rounds({}), core::InternalError);
  Json bad = measured_json(a);
  bad["ranks"][0]["category_s"][0] = Json::array({1.0});
  EXPECT_THROW((void)measured_from_json(bad), core::UserError);
  EXPECT_THROW((void)measured_from_json(Json{{"backend", "cpu"}}), Json::out_of_range);
  // What a damaged journal can hold, each refused naming what is wrong.
  auto refused = [&](const std::function<void(Json&)>& damage, const std::string& names) {
    Json j = measured_json(a);
    damage(j);
    try {
      (void)measured_from_json(j);
      ADD_FAILURE() << "accepted a journal with a bad " << names;
    } catch (const core::UserError& e) {
      EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
    }
  };
  refused([](Json& j) { j["ranks"][1]["trace"][0][3] = 99; }, "category is 99");
  refused([](Json& j) { j["ranks"][0]["trace"][1][1] = -1.0; }, "trace duration");
  refused([](Json& j) { j["step_s"] = Json::array({1.0}); }, "1 step times for 2 measured steps");
  refused([](Json& j) { j["ranks"][0]["step_s"].push_back(1.0); }, "rank 0 holds 3 step times");
  refused([](Json& j) { j["ranks"][1]["peak_reserved_bytes"] = -5.0; }, "peak_reserved_bytes");
  refused([](Json& j) { j["reference_samples_s"] = 0.05; }, "reference_samples_s is not a list");
  refused([](Json& j) { j["rounds"] = 0; }, "rounds");
  refused([](Json& j) { j["ranks"] = Json::array(); }, "no ranks");
}

// The machine's drift is read against the calibration's own samples of the reference GEMM where
// the profile records them for that shape and precision, and against the cost model otherwise.
TEST(ValidateComparison, ReferenceBaselineIsTheCalibrationsMedianSample) {
  auto rc = tiny({{"dp", 2}, {"micro_batch_size", 2}});
  const cost::GemmShape g{512, 1024, 1024, 1};
  rc.hardware.calibration_reference = {};  // a profile without samples (the built-in CPU one has them)
  const double model = cost::gemm_time(g, rc.training.precision, rc.hardware).value();
  EXPECT_EQ(reference_baseline(rc, g), std::make_pair(model, std::string("cost model")));
  rc.hardware.calibration_reference = {512, 1024, 1024, rc.training.precision, 0.0625};
  EXPECT_EQ(reference_baseline(rc, g), std::make_pair(0.0625, std::string("calibration samples")));
  EXPECT_EQ(reference_baseline(rc, {512, 1024, 256, 1}).second, "cost model");  // another shape
  rc.hardware.calibration_reference.dtype = hw::Dtype::kBf16;
  ASSERT_NE(rc.training.precision, hw::Dtype::kBf16);
  EXPECT_EQ(reference_baseline(rc, g).second, "cost model");  // another dtype
}

// The suite's errors at the machine's current speed: each plan's drift-adjusted error, or its
// plain error where no reference GEMM was timed; median and largest over the plans.
TEST(ValidateComparison, SummaryJudgesEachPlanAtTheMachinesCurrentSpeed) {
  auto plan = [](double predicted, double measured, double adjusted) {
    Comparison c;
    c.predicted_step_s = predicted, c.measured_step_s = measured, c.drift_adjusted_step_s = adjusted;
    if (adjusted > 0) c.reference_predicted_s = 0.04, c.reference_measured_s = 0.04 * adjusted / predicted;
    return c;
  };
  // Plain errors +25%, -20%, +10%; at current speed +2%, -4%, and the third has no reference.
  const SuiteSummary s = summarize({plan(1.25, 1.0, 1.02), plan(0.8, 1.0, 0.96), plan(1.1, 1.0, 0.0)});
  EXPECT_NEAR(s.median_abs_step_error, 0.20, 1e-12);
  EXPECT_NEAR(s.max_abs_step_error, 0.25, 1e-12);
  EXPECT_NEAR(s.median_abs_drift_adjusted_error, 0.04, 1e-12);
  EXPECT_NEAR(s.max_abs_drift_adjusted_error, 0.10, 1e-12);
  EXPECT_NEAR(s.max_abs_reference_drift, 1.25 / 1.02 - 1.0, 1e-12);
}

}  // namespace
}  // namespace stepcast::validate
