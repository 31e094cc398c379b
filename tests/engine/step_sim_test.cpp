// Step simulation: behaviour read from the simulated timeline itself (bubble by schedule,
// in-flight micro-batches, the slowest rank setting the pace, host work before a barrier) and
// byte-identical output for identical input.
#include "sim/engine/step_sim.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>
#include <string>
#include <utility>

#include "sim/core/json_reader.hpp"
#include "sim/core/units.hpp"
#include "sim/cost/collectives.hpp"
#include "sim/estimate/workload.hpp"
#include "sim/memory/ledger.hpp"
#include "sim/mesh/rank_mesh.hpp"
#include "sim/report/sim_output.hpp"

namespace stepcast::engine {
namespace {

using core::Json;

Json run_json(int64_t pp, int64_t m, const std::string& schedule, int64_t vpp = 1, int64_t dp = 1,
              Json scenario = nullptr) {
  // 48 layers divide by pp * vpp for every case below. The TP collectives run in line, so a
  // layer costs the same under every schedule (the asynchronous linear backward hides the
  // input-gradient reduction behind the weight-gradient GEMM only where that GEMM is not deferred).
  Json j = {{"model", "gpt3-175b"},
            {"hardware", "h100-sxm"},
            {"cluster", {{"num_gpus", 8 * pp * dp}}},
            {"training", {{"seq_len", 2048}, {"global_batch_size", m * dp}}},
            {"parallel",
             {{"tp", 8}, {"pp", pp}, {"dp", dp}, {"sp", true}, {"tp_async_backward", false}, {"micro_batch_size", 1},
              {"schedule", schedule}, {"vpp", vpp}, {"zero_stage", 1}, {"recompute", "full"}}}};
  j["model"] = {{"name", "gpt-48"}, {"hidden_size", 6144}, {"num_attention_heads", 48}, {"num_hidden_layers", 48},
                {"intermediate_size", 24576}, {"vocab_size", 51200}, {"hidden_act", "gelu"},
                {"max_position_embeddings", 2048}};
  if (!scenario.is_null()) j["scenario"] = scenario;
  return j;
}

config::RunConfig run(int64_t pp, int64_t m, const std::string& schedule, int64_t vpp = 1, int64_t dp = 1,
                      Json scenario = nullptr) {
  return config::parse_run(run_json(pp, m, schedule, vpp, dp, std::move(scenario)), "<step-sim-test>", "");
}

// The same run on an h100-sxm whose collectives take `collective_sms` SMs beside compute.
config::RunConfig with_collective_sms(Json j, double sms) {
  j["hardware"] = {{"base", "h100-sxm"}, {"efficiency", {{"collective_sms", sms}}}};
  return config::parse_run(j, "<step-sim-test>", "");
}

SimOptions all_ranks() {
  SimOptions o;
  o.full = true;
  return o;
}

SimResult ideal(const config::RunConfig& rc) {
  SimOptions o;
  o.ideal = true;
  return simulate_step(rc, o);
}

// Textbook bubble with uniform stages and free communication: (p-1)/(m+p-1). Integer
// picosecond rounding of per-layer durations is the only error source: 1e-6 relative.
TEST(Schedules, GpipeAndOneFOneBBubbleMatchesTheFormula) {
  for (const char* sched : {"gpipe", "1f1b"}) {
    for (auto [p, m] : {std::pair<int64_t, int64_t>{4, 8}, {8, 8}, {4, 16}, {2, 3}}) {
      const SimResult r = ideal(run(p, m, sched));
      const double want = static_cast<double>(p - 1) / static_cast<double>(m + p - 1);
      EXPECT_NEAR(r.step.bubble_fraction, want, 1e-6) << sched << " p" << p << " m" << m;
    }
  }
}

// Interleaving with v chunks divides the bubble time by v: (p-1)/(v*m + p-1) of the pipeline.
TEST(Schedules, InterleavedDividesBubbleByV) {
  for (auto [p, m, v] : {std::tuple<int64_t, int64_t, int64_t>{4, 8, 2}, {4, 8, 3}, {2, 4, 4}}) {
    const SimResult r = ideal(run(p, m, "interleaved", v));
    const double want = static_cast<double>(p - 1) / static_cast<double>(v * m + p - 1);
    EXPECT_NEAR(r.step.bubble_fraction, want, 1e-6) << "p" << p << " m" << m << " v" << v;
  }
}

// Deferring weight-gradient work into the cool-down shrinks the bubble and the step.
TEST(Schedules, ZeroBubbleH1IsSmallerThanOneFOneB) {
  for (auto [p, m] : {std::pair<int64_t, int64_t>{2, 4}, {4, 8}, {8, 16}}) {
    const SimResult a = ideal(run(p, m, "1f1b"));
    const SimResult z = ideal(run(p, m, "zb-h1"));
    EXPECT_LT(z.step.bubble_fraction, a.step.bubble_fraction) << "p" << p << " m" << m;
    EXPECT_LT(z.step.step_time_s, a.step.step_time_s) << "p" << p << " m" << m;
  }
}

// ZB-H1 reaches the handcrafted schedule's bound (Qi et al. 2023) from the timeline itself.
// With X = F + B + W per micro-batch and stage, 1F1B takes (m + p - 1) X; ZB-H1 with one
// micro-batch is the F and B chain through every stage plus one W, p (X - W) + W, which gives
// W; with m >= p micro-batches ZB-H1 then takes m X + (p - 1)(X - 2W), the bubble
// (p - 1)(F + B - W). Picosecond rounding of per-layer durations: 1e-6 relative.
TEST(Schedules, ZeroBubbleH1ReachesTheHandcraftedBound) {
  for (int64_t p : {4, 8}) {
    const double X = ideal(run(p, 16, "1f1b")).step.step_time_s / static_cast<double>(16 + p - 1);
    const double chain = ideal(run(p, 1, "zb-h1")).step.step_time_s;
    const double W = (static_cast<double>(p) * X - chain) / static_cast<double>(p - 1);
    EXPECT_GT(W, 0.1 * X);
    EXPECT_LT(W, 0.5 * X);
    for (int64_t m : {p, 2 * p, int64_t{16}}) {
      const double want = static_cast<double>(m) * X + static_cast<double>(p - 1) * (X - 2.0 * W);
      EXPECT_NEAR(ideal(run(p, m, "zb-h1")).step.step_time_s / want, 1.0, 1e-6) << "p" << p << " m" << m;
    }
  }
}

// ZB-V (two chunks per stage in a V, split backward) from the timeline: it completes at every
// micro-batch count (no pass waits on a later one), never takes longer than ZB-H1 and from
// m = p on has a smaller bubble than ZB-H1, itself smaller than 1F1B's. Its step is at least
// every stage's work plus the fill of the V's far end, (p - 1) chunk forwards, reached exactly
// when F = B = W (a list schedule of the same orders gives (p - 1) F per chunk there).
TEST(Schedules, ZeroBubbleVBeatsZeroBubbleH1) {
  for (int64_t p : {2, 4, 8}) {
    const double X = ideal(run(p, 16, "1f1b")).step.step_time_s / static_cast<double>(16 + p - 1);
    for (int64_t m : {int64_t{1}, p - 1, p, 2 * p, int64_t{16}}) {
      if (m < 1) continue;
      const SimResult v = ideal(run(p, m, "zbv", 2));
      const SimResult h = ideal(run(p, m, "zb-h1"));
      EXPECT_LE(v.step.step_time_s, h.step.step_time_s * (1.0 + 1e-9)) << "p" << p << " m" << m;
      EXPECT_GT(v.step.step_time_s, static_cast<double>(m) * X) << "p" << p << " m" << m;
      if (m >= p) {
        EXPECT_LT(v.step.bubble_fraction, h.step.bubble_fraction) << "p" << p << " m" << m;
        EXPECT_LT(h.step.bubble_fraction, ideal(run(p, m, "1f1b")).step.bubble_fraction) << "p" << p << " m" << m;
      }
    }
  }
}

// The V places the first and the last virtual stage on stage 0: the head, its logits and the
// loss live there, and the turn at stage p - 1 passes chunk 0's output to chunk 1 without a
// transfer, so each micro-batch crosses 2(p - 1) stage boundaries each way. The ledger's
// walk of each stage's order matches the timeline's peak per stage (1%), and every stage holds
// about p micro-batches of its layers (2p - 1 chunk forwards at stage 0's warm-up peak).
TEST(Schedules, ZeroBubbleVPlacesTheHeadOnStageZero) {
  Json j = run_json(4, 16, "zbv", 2);
  j["parallel"]["recompute"] = "none";
  const auto rc = config::parse_run(j, "<step-sim-test>", "");
  EXPECT_EQ(rc.parallel.head_stage(), 0);
  EXPECT_EQ(rc.chunk_first_layer(3, 1), 24);  // virtual stage 4 = chunk 1 of stage 3
  EXPECT_EQ(rc.chunk_first_layer(0, 1), 42);  // virtual stage 7, the last
  const auto l = memory::compute_ledger(rc);
  EXPECT_GT(l.stages[0].logits.value(), 0.0);
  EXPECT_EQ(l.stages[3].logits.value(), 0.0);
  EXPECT_DOUBLE_EQ(memory::inflight_microbatches(rc, 0), 4.0);
  SimOptions o;
  o.keep_timeline = true;
  const SimResult r = simulate_step(rc, o);
  int64_t sends = 0;
  for (const auto& t : r.graph->tasks()) sends += t.kind == TaskKind::kPpSend ? 1 : 0;
  EXPECT_EQ(sends, 2 * 2 * (4 - 1) * 16);
  for (size_t s = 0; s < 4; ++s) {
    EXPECT_NEAR(r.stages[s].peak_memory_bytes, l.stages[s].total().value(), 0.01 * l.stages[s].total().value()) << "stage " << s;
  }
}

// A tied embedding under ZB-V: the head runs on stage 0 beside the embedding it ties to, so the
// stage holds the vocabulary matrix once and no stage pairs up to sum the embedding's gradient;
// under 1F1B the last stage keeps a copy.
TEST(Schedules, ZeroBubbleVTiesTheHeadToTheEmbeddingOnStageZero) {
  auto tied = [](const char* sched, int64_t vpp) {
    Json j = run_json(4, 8, sched, vpp);
    j["model"]["tie_word_embeddings"] = true;
    return config::parse_run(j, "<step-sim-test>", "");
  };
  const auto v = memory::compute_ledger(tied("zbv", 2)), o = memory::compute_ledger(tied("1f1b", 1));
  const double vocab = 51200.0 * 6144.0 / 8.0;  // the vocabulary matrix's tp shard
  // Stage 0 under ZB-V: 1F1B's stage 0 plus its last stage's head without the copy (the final
  // norm), the layers equal (12 each).
  EXPECT_NEAR(v.stages[0].dense_params, o.stages[0].dense_params + (o.stages[3].dense_params - o.stages[1].dense_params) - vocab, 1.0);
  EXPECT_EQ(memory::nccl_communicators(tied("zbv", 2), 0).second, 1);   // stage 1 only
  EXPECT_EQ(memory::nccl_communicators(tied("1f1b", 1), 0).second, 2);  // stage 1 and the head's
}

// DualPipeV (the same V, most backwards whole): completes at every micro-batch count from 2p
// (no pass waits on a later one), its bubble within two points of ZB-V's and below 1F1B's (with
// the ideal costs, F < B + W per chunk); it defers few W, so
// without recomputation its last stage holds less than under ZB-V, and the ledger's walk of
// each stage's order matches the timeline's peak per stage (1%). The estimate plays its orders
// out as ZB-V's and follows the simulation within 5%.
TEST(Schedules, DualPipeVHoldsLessThanZeroBubbleV) {
  for (int64_t p : {2, 3, 4}) {
    for (int64_t m = 2 * p; m <= 3 * p + 1; ++m) {
      const SimResult d = ideal(run(p, m, "dualpipev", 2));
      const SimResult v = ideal(run(p, m, "zbv", 2));
      const SimResult o = ideal(run(p, m, "1f1b"));
      EXPECT_NEAR(d.step.bubble_fraction, v.step.bubble_fraction, 0.02) << "p" << p << " m" << m;
      EXPECT_LT(d.step.bubble_fraction, o.step.bubble_fraction) << "p" << p << " m" << m;
    }
  }
  auto none = [](const char* sched) {
    Json j = run_json(4, 16, sched, 2);
    j["parallel"]["recompute"] = "none";
    return config::parse_run(j, "<step-sim-test>", "");
  };
  const auto rd = none("dualpipev");
  const auto ld = memory::compute_ledger(rd), lv = memory::compute_ledger(none("zbv"));
  EXPECT_LT(ld.stages[3].activations.value(), lv.stages[3].activations.value());
  const SimResult r = simulate_step(rd);
  for (size_t s = 0; s < 4; ++s) {
    EXPECT_NEAR(r.stages[s].peak_memory_bytes, ld.stages[s].total().value(), 0.01 * ld.stages[s].total().value()) << "stage " << s;
  }
  for (auto [p, m] : {std::pair<int64_t, int64_t>{8, 16}, {4, 16}, {2, 32}}) {
    const auto rc = run(p, m, "dualpipev", 2, 2);
    EXPECT_NEAR(estimate::estimate_step(rc).step_time_s / simulate_step(rc).step.step_time_s, 1.0, 0.05) << "p" << p << " m" << m;
  }
}

// The analytical pass plays ZB-V's stage orders out with its per-stage pass times and follows
// the simulated step within 5% (below, at and above the 2p - 1 warm-up forwards, with the DP
// reduction behind the last W).
TEST(Consistency, ZeroBubbleVEstimateFollowsTheSimulation) {
  for (auto [p, m] : {std::pair<int64_t, int64_t>{8, 2}, {8, 8}, {8, 16}, {4, 16}, {2, 32}}) {
    const auto rc = run(p, m, "zbv", 2, 2);
    const SimResult r = simulate_step(rc);
    const auto e = estimate::estimate_step(rc);
    EXPECT_NEAR(e.step_time_s / r.step.step_time_s, 1.0, 0.05) << "p" << p << " m" << m;
  }
}

// The interleaved schedule with virtual stages of unequal cost (cost-balanced splits): the
// estimate plays Megatron's order out with each virtual stage's own pass times and follows the
// simulated step within 1.5% (Llama 3.1 8B, four micro-batches, a heavy first or middle virtual
// stage). The closed form, (p - 1)/v of the slowest stage, was 3.0-3.3% off on the two uneven
// pp 2 splits below (its fill and drain ignore which virtual stage is heavy); what remains is
// the pipeline transfers and the gradient reduction, which the even split shows (-1.1%).
TEST(Consistency, InterleavedEstimateFollowsUnequalVirtualStages) {
  struct Case {
    int64_t pp, vpp;
    std::vector<int64_t> split;
  };
  for (const Case& c : {Case{2, 5, {3, 2, 4, 3, 4, 4, 4, 4, 4, 0}}, Case{2, 4, {1, 5, 4, 5, 4, 5, 4, 4}}, Case{2, 4, {4, 4, 4, 4, 4, 4, 4, 4}},
                        Case{4, 2, {2, 5, 4, 4, 4, 4, 5, 4}}}) {
    const Json j = {{"model", "llama3.1-8b"},
                    {"hardware", "h100-sxm"},
                    {"cluster", {{"num_gpus", 16}}},
                    {"training", {{"seq_len", 8192}, {"global_batch_size", 32}}},
                    {"parallel", {{"tp", 1}, {"pp", c.pp}, {"vpp", c.vpp}, {"micro_batch_size", 1}, {"schedule", "interleaved"}, {"stage_layers", c.split}}}};
    const auto rc = config::parse_run(j, "<step-sim-test>", "");
    const double sim = simulate_step(rc).step.step_time_s;
    EXPECT_NEAR(estimate::estimate_step(rc).step_time_s / sim, 1.0, 0.015) << "pp " << c.pp << " vpp " << c.vpp << " split " << Json(c.split).dump();
  }
}

// DualPipeV runs whole backwards paired with another micro-batch's forward, splitting only the
// few that fill its cool-down, so under ZeRO-3 each micro-batch's gathers and reduce-scatters
// run beside a whole backward, as under 1F1B, not beside separate input- and weight-gradient
// passes as under ZB-V. Qwen3-Next 80B on 64 H100s (pp 2, cp 4, ep 8, ZeRO-3): the estimate
// took DualPipeV's traffic as ZB-V's and was 14.5% slow (23.26 s against 20.31 s simulated),
// ranking it behind ZB-V where the simulation puts it 12% ahead. Within 5% of each simulation
// now (the 99th percentile of scripts/estimate-vs-simulate.sh's gaps) and in the simulation's
// order.
TEST(Consistency, DualPipeVShardedTrafficFollowsWholeBackwards) {
  std::map<std::string, std::pair<double, double>> steps;  // schedule -> (estimate, simulation)
  for (const char* sched : {"dualpipev", "zbv"}) {
    const Json j = {{"model", "qwen3-next-80b-a3b"},
                    {"hardware", "h100-sxm"},
                    {"cluster", {{"num_gpus", 64}}},
                    {"training", {{"seq_len", 4096}, {"global_batch_size", 512}}},
                    {"parallel",
                     {{"tp", 1}, {"pp", 2}, {"cp", 4}, {"ep", 8}, {"vpp", 2}, {"micro_batch_size", 2}, {"zero_stage", 3},
                      {"recompute", "none"}, {"schedule", sched}}}};
    const auto rc = config::parse_run(j, "<step-sim-test>", "");
    const double sim = simulate_step(rc).step.step_time_s, est = estimate::estimate_step(rc).step_time_s;
    EXPECT_NEAR(est / sim, 1.0, 0.05) << sched;
    steps[sched] = {est, sim};
  }
  EXPECT_LT(steps["dualpipev"].second, steps["zbv"].second);
  EXPECT_LT(steps["dualpipev"].first, steps["zbv"].first);
}

// Split backward under hybrid-sharded FSDP where each micro-batch's reductions (reduce-scatter
// within the node, then the shard's all-reduce across the replicas on the NIC) outlast its W
// pass: GPT-OSS 120B on 64 B200s, pp 4, ep 8. The reduction stream bounds each micro-batch and
// the W passes that end each stage's order leave their reductions trailing; the estimate was
// 15% (ZB-H1) and 25% (ZB-V) fast while it let the spill hide in a forward that never comes.
// Within 5% now.
TEST(Consistency, SplitBackwardReductionsTrailTheLastWeightPasses) {
  for (auto [sched, vpp] : {std::pair<const char*, int64_t>{"zb-h1", 1}, {"zbv", 2}}) {
    Json split = vpp == 1 ? Json::array({9, 10, 9, 8}) : Json::array({4, 5, 5, 5, 5, 4, 4, 4});
    const Json j = {{"model", "gpt-oss-120b"},
                    {"hardware", "b200"},
                    {"cluster", {{"num_gpus", 64}}},
                    {"training", {{"seq_len", 4096}, {"global_batch_size", 512}}},
                    {"parallel",
                     {{"tp", 1}, {"pp", 4}, {"dp", 16}, {"ep", 8}, {"micro_batch_size", 4}, {"fsdp", true}, {"dp_replicate", 2},
                      {"schedule", sched}, {"vpp", vpp}, {"stage_layers", split}}}};
    const auto rc = config::parse_run(j, "<step-sim-test>", "");
    const SimResult r = simulate_step(rc);
    const auto e = estimate::estimate_step(rc);
    EXPECT_NEAR(e.step_time_s / r.step.step_time_s, 1.0, 0.05) << sched;
  }
}

// The analytical pass follows the simulated ZB-H1 step on both sides of m = p (the chain
// bound below it, the handcrafted bound above) and the DP reduction behind the last W: within
// 5%, as for 1F1B.
TEST(Consistency, ZeroBubbleH1EstimateFollowsTheSimulation) {
  for (auto [p, m] : {std::pair<int64_t, int64_t>{8, 2}, {8, 4}, {8, 8}, {4, 16}}) {
    const auto rc = run(p, m, "zb-h1", 1, 2);
    const SimResult r = simulate_step(rc);
    const auto e = estimate::estimate_step(rc);
    EXPECT_NEAR(e.step_time_s / r.step.step_time_s, 1.0, 0.05) << "p" << p << " m" << m;
  }
}

// ZeRO-3 / FSDP: the analytical pass follows the simulated per-layer gathers and
// reduce-scatters (prefetched one layer ahead, on two streams sharing the rank's link, the
// reduce-scatters after the W pass under ZB-H1, once per step on the pipeline's fill and drain
// when parameters stay unsharded between micro-batches) within 5% on dense layouts; before,
// it charged the once-per-step traffic to every micro-batch. Not covered: ZB-H1 with
// pp > 1 and per-micro-batch regathers that outlast the compute, where the estimate's ZB-H1
// bubble (scaled from stage times that include the exposed gathers) runs up to 20% slow
// (docs/MODEL.md, limitations).
TEST(Consistency, ZeroThreeEstimateFollowsTheSimulation) {
  for (const char* schedule : {"1f1b", "zb-h1"}) {
    for (auto [pp, reshard] : {std::pair<int64_t, bool>{1, true}, {4, true}, {4, false}}) {
      if (std::string(schedule) == "zb-h1" && pp > 1 && reshard) continue;
      for (const int64_t replicas : {1, 2}) {
        Json j = run_json(pp, 8, schedule, 1, 4);
        j["parallel"]["zero_stage"] = 3;
        j["parallel"]["recompute"] = "selective";
        j["parallel"]["reshard_after_forward"] = reshard;
        j["parallel"]["dp_replicate"] = replicas;
        const auto rc = config::parse_run(j, "<step-sim-test>", "");
        const SimResult r = simulate_step(rc);
        const auto e = estimate::estimate_step(rc);
        EXPECT_NEAR(e.step_time_s / r.step.step_time_s, 1.0, 0.05) << schedule << " pp" << pp << " reshard " << reshard << " replicas " << replicas;
      }
    }
  }
}

// Hybrid sharding over two 8-GPU nodes on a slow network (25 Gb/s per GPU). FSDP over all 16
// ranks gathers (forward and backward) and reduce-scatters every layer across the NICs; HSDP
// with a replica per node does both on the node fabric and sends only each reduced gradient
// shard's all-reduce over the network. From the timeline: the HSDP step is bound by that
// all-reduce's NIC time (at least it, and at most it plus the whole fast-network step, which
// bounds the compute and fabric traffic beside it) and well under the FSDP step; its ledger
// holds twice the sharded state.
TEST(HybridSharding, OnlyTheShardAllReduceCrossesTheNetwork) {
  auto rc_of = [](int64_t replicas, const char* nic) {
    Json j = {{"model", "llama3.1-8b"},
              {"hardware", {{"base", "h100-sxm"}, {"network", {{"nic_bandwidth", nic}}}}},
              {"cluster", {{"num_gpus", 16}, {"gpus_per_node", 8}}},
              {"training", {{"seq_len", 2048}, {"global_batch_size", 32}}},
              {"parallel", {{"fsdp", true}, {"dp_replicate", replicas}, {"recompute", "full"}}}};
    return config::parse_run(j, "<hsdp-test>", "");
  };
  const auto hsdp = rc_of(2, "25Gb/s"), fsdp = rc_of(1, "25Gb/s"), fast = rc_of(2, "4000Gb/s");
  const estimate::WorkloadBuilder wb(hsdp);
  const auto& pl = wb.placements();
  ASSERT_TRUE(pl.zero3.intra_node());
  ASSERT_EQ(pl.dp_replicate.size, 2);
  ASSERT_FALSE(pl.dp_replicate.intra_node());
  // Every unit's gradient shard (bf16) is all-reduced once per micro-batch (resharded after the
  // forward, so reduce-scattered every micro-batch); the all-reduce's bytes are linear in size.
  const double params = hsdp.model.total_params();
  const double shard = params * hw::bytes_per_element(hsdp.training.reduce_dtype) / static_cast<double>(pl.zero3.size);
  const double m = static_cast<double>(hsdp.num_microbatches);
  const double nic_s = m * cost::link_bytes(cost::Collective::kAllReduce, core::Bytes(shard), pl.dp_replicate) /
                       hsdp.hardware.nic_bandwidth_per_gpu().value();
  const double t_hsdp = simulate_step(hsdp).step.step_time_s;
  const double t_fast = simulate_step(fast).step.step_time_s;
  EXPECT_GE(t_hsdp, nic_s);
  EXPECT_LE(t_hsdp, nic_s + t_fast);
  EXPECT_LT(t_hsdp, 0.5 * simulate_step(fsdp).step.step_time_s);
  EXPECT_GT(memory::compute_ledger(hsdp).peak().value(), memory::compute_ledger(fsdp).peak().value());
}

// ZeRO-3 collectives issued in line (param_gather_overlap and grad_reduce_overlap off, as an
// executor with one thread runs them): nothing overlaps, so one rank per stage at pp 1 takes the
// sum of its compute, every layer's gathers (forward and backward) and reduce-scatters, and the
// optimizer; the breakdown books the gathers and reduce-scatters as exposed data-parallel
// communication and no bubble. The estimate follows the same schedule within 5%, with and
// without pipeline parallelism.
TEST(ZeroThree, InLineCollectivesSerializeWithCompute) {
  Json j = run_json(1, 2, "1f1b", 1, 4);
  j["parallel"]["zero_stage"] = 3;
  j["parallel"]["recompute"] = "selective";
  j["parallel"]["param_gather_overlap"] = false;
  j["parallel"]["grad_reduce_overlap"] = false;
  const auto rc = config::parse_run(j, "<step-sim-test>", "");
  SimOptions keep;
  keep.keep_timeline = true;
  const SimResult r = simulate_step(rc, keep);
  double comm = 0, compute = 0, other = 0;
  for (TaskId id = 0; id < r.graph->size(); ++id) {
    const Task& t = r.graph->task(id);
    const double d = engine::to_seconds(r.finish[id] - r.start[id]);
    if (t.kind == TaskKind::kDpComm) {
      comm += d;
    } else if (t.kind == TaskKind::kForward || t.kind == TaskKind::kBackward) {
      compute += d;
    } else if (t.kind != TaskKind::kBarrier) {
      other += d;
    }
  }
  EXPECT_GT(comm, 0.05 * compute);
  EXPECT_NEAR(r.step.step_time_s, compute + comm + other, 1e-9 + 1e-6 * r.step.step_time_s);
  EXPECT_NEAR(r.step.breakdown.exposed_comm.at("dp"), comm, 1e-6 * r.step.step_time_s);
  EXPECT_NEAR(r.step.breakdown.bubble, 0.0, 1e-9);
  for (int64_t pp : {1, 4}) {
    Json q = j;
    q["cluster"]["num_gpus"] = 8 * pp * 4;
    q["parallel"]["pp"] = pp;
    q["training"]["global_batch_size"] = 8 * 4;
    const auto qc = config::parse_run(q, "<step-sim-test>", "");
    const SimResult qs = simulate_step(qc, keep);
    EXPECT_NEAR(estimate::estimate_step(qc).step_time_s / qs.step.step_time_s, 1.0, 0.05) << "pp " << pp;
    // With a pipeline, a pass's first in-line gather waits for its input: that wait is bubble,
    // and only the collectives' own time is booked as DP on each stage.
    for (size_t st = 0; st < qs.stages.size(); ++st) {
      double dp_time = 0;
      for (TaskId id = 0; id < qs.graph->size(); ++id) {
        const Task& t = qs.graph->task(id);
        if (t.kind == TaskKind::kDpComm && static_cast<size_t>(t.rank) == st) dp_time += engine::to_seconds(qs.finish[id] - qs.start[id]);
      }
      EXPECT_LE(qs.stages[st].dp_wait_s, dp_time * (1.0 + 1e-9)) << "pp " << pp << " stage " << st;
      if (pp > 1) {
        EXPECT_GT(qs.stages[st].dp_wait_s, 0.5 * dp_time) << "pp " << pp << " stage " << st;
      }
    }
    if (pp > 1) {
      EXPECT_GT(qs.step.breakdown.bubble, 0.0);
    }
  }
  // Overlapped (the default), a pipeline of one stage still has no bubble: the compute
  // stream's waits for the first gathers are data-parallel communication.
  Json o = run_json(1, 2, "1f1b", 1, 4);
  o["parallel"]["zero_stage"] = 3;
  const SimResult ov = simulate_step(config::parse_run(o, "<step-sim-test>", ""));
  EXPECT_NEAR(ov.step.breakdown.bubble, 0.0, 1e-9);
  EXPECT_GT(ov.step.breakdown.exposed_comm.at("dp"), 0.0);
}

// In line with a mixture of experts, each unit's collective is its dense part over dp x cp and
// then its routed experts over the expert-data-parallel group: at pp 1 both parts of every
// collective are DP communication and none of it is bubble.
TEST(ZeroThree, InLineExpertCollectivesAreDpNotBubble) {
  Json j = {{"model", "qwen3-30b-a3b"},
            {"hardware", "h100-sxm"},
            {"cluster", {{"num_gpus", 64}}},
            {"training", {{"seq_len", 4096}, {"global_batch_size", 128}}},
            {"parallel", {{"ep", 8}, {"fsdp", true}, {"micro_batch_size", 1}, {"moe", {{"imbalance", 1.0}}},
                          {"param_gather_overlap", false}, {"grad_reduce_overlap", false}}}};
  SimOptions keep;
  keep.keep_timeline = true;
  const SimResult r = simulate_step(config::parse_run(j, "<step-sim-test>", ""), keep);
  double comm = 0;
  size_t units = 0;
  for (TaskId id = 0; id < r.graph->size(); ++id) {
    if (r.graph->task(id).kind != TaskKind::kDpComm) continue;
    comm += engine::to_seconds(r.finish[id] - r.start[id]);
    ++units;
  }
  EXPECT_GT(units, 0u);
  EXPECT_NEAR(r.step.breakdown.bubble, 0.0, 1e-9);
  EXPECT_NEAR(r.step.breakdown.exposed_comm.at("dp"), comm, 1e-6 * r.step.step_time_s);
}

// Parameter gathers that cross the NIC share it with the expert all-to-alls that cross it too:
// they hide behind compute, not behind that exposed communication (DeepSeek-V3, ep 32 over four
// nodes, ZeRO-3 over 256 ranks). The estimate was 21% fast before it counted that.
TEST(Consistency, ZeroThreeGathersShareTheNicWithExpertAllToAll) {
  Json j = {{"model", "deepseek-v3"},
            {"hardware", "h800"},
            {"cluster", {{"num_gpus", 2048}}},
            {"training", {{"seq_len", 4096}, {"global_batch_size", 512}, {"precision", "fp8"}}},
            {"parallel", {{"tp", 4}, {"pp", 1}, {"cp", 2}, {"ep", 32}, {"sp", true}, {"micro_batch_size", 1},
                          {"zero_stage", 3}, {"recompute", "none"}}}};
  const auto rc = config::parse_run(j, "<step-sim-test>", "");
  const SimResult r = simulate_step(rc);
  const auto e = estimate::estimate_step(rc);
  EXPECT_NEAR(e.step_time_s / r.step.step_time_s, 1.0, 0.05);
}

// DeepSeek-V3 at tp 4 (expert TP 4) with ep 8 across nodes: each layer's exposed communication
// is the all-to-alls (NIC) between the expert-TP gathers (NVLink). Under ZeRO-3 the layer
// gathers share the NIC with the all-to-alls while those run, so the expert exchanges take
// longer than under ZeRO-1 (23.4 s against 15.9 s); run as one flow over the whole exposed
// time, the NVLink part diluted the all-to-alls' rate and the sharing vanished (15.9 s both).
TEST(Consistency, ZeroThreeGathersShareTheNicWithTheAllToAllsBetweenExpertTpGathers) {
  auto run = [](int zero) {
    Json j = {{"model", "deepseek-v3"},
              {"hardware", "h800"},
              {"cluster", {{"num_gpus", 2048}}},
              {"training", {{"seq_len", 4096}, {"global_batch_size", 4096}, {"precision", "fp8"}}},
              {"parallel", {{"tp", 4}, {"pp", 4}, {"ep", 8}, {"sp", true}, {"micro_batch_size", 2}, {"zero_stage", zero},
                            {"recompute", "selective"}, {"first_stage_layers", 16}, {"last_stage_layers", 15}}}};
    return config::parse_run(j, "<step-sim-test>", "");
  };
  const SimResult z3 = simulate_step(run(3));
  const SimResult z1 = simulate_step(run(1));
  EXPECT_GT(z3.step.breakdown.exposed_comm.at("ep"), 1.3 * z1.step.breakdown.exposed_comm.at("ep"));
  const auto e = estimate::estimate_step(run(3));
  EXPECT_NEAR(e.step_time_s / z3.step.step_time_s, 1.0, 0.10);
}

// FSDP that reshards after forward at pp 2 gathers and reduce-scatters every layer for every
// micro-batch over dp x cp = 32 ranks on four nodes, beside expert all-to-alls over two nodes:
// both cross the NIC and share it. The timeline books the all-to-alls' longer run as exposed
// expert-parallel time (it was bubble: 1.98 s against 0.16 s with ZeRO-1), and the estimate
// counts the sharing too (it was 19% under the simulation; 10% is the bound the estimate-vs-
// simulate report flags, the estimate's overlap share being an average over the pass where the
// timeline issues each gather at its layer).
TEST(Consistency, ExpertAllToAllSharesTheNicWithFsdpTraffic) {
  auto run = [](bool fsdp) {
    Json j = {{"model", "qwen3-30b-a3b"},
              {"hardware", "h100-sxm"},
              {"cluster", {{"num_gpus", 64}}},
              {"training", {{"seq_len", 4096}, {"global_batch_size", 512}}},
              {"parallel", {{"pp", 2}, {"cp", 2}, {"ep", 16}, {"micro_batch_size", 1}, {"schedule", "zb-h1"}, {"recompute", "none"}}}};
    if (fsdp) {
      j["parallel"]["fsdp"] = true;
    } else {
      j["parallel"]["zero_stage"] = 1;
    }
    return config::parse_run(j, "<step-sim-test>", "");
  };
  const SimResult shared = simulate_step(run(true));
  const SimResult alone = simulate_step(run(false));
  EXPECT_LT(shared.step.breakdown.bubble, 1.5 * alone.step.breakdown.bubble);
  EXPECT_GT(shared.step.breakdown.exposed_comm.at("ep"), 1.3 * alone.step.breakdown.exposed_comm.at("ep"));
  const auto e = estimate::estimate_step(run(true));
  EXPECT_NEAR(e.step_time_s / shared.step.step_time_s, 1.0, 0.10);
}

// The exchanges on the compute stream (TP, CP, EP) count at their run length, sharing included:
// on every stage the timeline's tp_comm_s is the sum of those tasks' finish - start, which for
// this FSDP layout exceeds their unshared durations (the flows share the NIC).
TEST(StepSim, ComputeStreamExchangesCountAtTheirRunLength) {
  Json j = {{"model", "qwen3-30b-a3b"},
            {"hardware", "h100-sxm"},
            {"cluster", {{"num_gpus", 64}}},
            {"training", {{"seq_len", 4096}, {"global_batch_size", 256}}},
            {"parallel", {{"pp", 2}, {"cp", 2}, {"ep", 16}, {"micro_batch_size", 1}, {"recompute", "none"}, {"fsdp", true}}}};
  SimOptions keep;
  keep.keep_timeline = true;
  const SimResult r = simulate_step(config::parse_run(j, "<step-sim-test>", ""), keep);
  std::vector<double> ran(r.stages.size(), 0.0), alone(r.stages.size(), 0.0), sent(r.stages.size(), 0.0);
  size_t sends = 0;
  for (TaskId id = 0; id < r.graph->size(); ++id) {
    const Task& t = r.graph->task(id);
    if (t.stream != Stream::kCompute) continue;
    const double run = engine::to_seconds(r.finish[id] - r.start[id]);
    if (t.kind == TaskKind::kPpSend) {
      sent[static_cast<size_t>(t.rank)] += run;
      ++sends;
    }
    if (t.kind != TaskKind::kTpComm) continue;
    ran[static_cast<size_t>(t.rank)] += run;
    alone[static_cast<size_t>(t.rank)] += engine::to_seconds(t.duration);
  }
  EXPECT_GT(sends, 0u);  // 1F1B's pipeline sends block the compute stream
  for (size_t s = 0; s < r.stages.size(); ++s) {
    EXPECT_NEAR(r.stages[s].tp_comm_s, ran[s], 1e-9 * r.step.step_time_s) << "stage " << s;
    EXPECT_NEAR(r.stages[s].pp_comm_s, sent[s], 1e-9 * r.step.step_time_s) << "stage " << s;
    EXPECT_NEAR(r.stages[s].comm_stretch_s, ran[s] - alone[s], 1e-9 * r.step.step_time_s) << "stage " << s;
    EXPECT_GT(ran[s], 1.05 * alone[s]) << "stage " << s;
  }
  // The output names it: per stage in the JSON, and the worst stage in the text.
  const Json out = report::simulate_json(config::parse_run(j, "<step-sim-test>", ""), r, "test");
  EXPECT_NEAR(out["simulation"]["stages"][0]["comm_shared_s"].get<double>(), ran[0] - alone[0], 1e-9 * r.step.step_time_s);
  EXPECT_NE(report::simulate_table(config::parse_run(j, "<step-sim-test>", ""), r).find("link sharing: "), std::string::npos);
  // The stretch goes to the kinds that cross the NIC: here the expert all-to-all over two
  // nodes, not the context-parallel exchange inside one node (cp 2 at tp 1).
  const auto e = estimate::estimate_step(config::parse_run(j, "<step-sim-test>", ""));
  EXPECT_NEAR(r.step.breakdown.exposed_comm.at("cp"), e.breakdown.exposed_comm.at("cp"), 0.02 * e.breakdown.exposed_comm.at("cp"));
}

// Under ZB-H1 a layer's reduce-scatters run in its weight-gradient pass, which has no expert
// exchanges, and spill into the next forward: the estimate counts them there when it stretches
// the all-to-alls that share the NIC. Counted against the whole backward they made this
// DeepSeek-V3 layout 10.2% slower than the timeline; 5% is the band the estimate-vs-simulate
// report holds all but 14 of its 511 layouts to.
TEST(Consistency, ZbH1ReduceScattersStretchTheForwardNotTheBackward) {
  Json j = {{"model", "deepseek-v3"},
            {"hardware", "h800"},
            {"cluster", {{"num_gpus", 2048}}},
            {"training", {{"seq_len", 4096}, {"global_batch_size", 4096}, {"precision", "fp8"}}},
            {"parallel", {{"tp", 4}, {"pp", 16}, {"cp", 4}, {"ep", 8}, {"sp", true}, {"micro_batch_size", 2}, {"schedule", "zb-h1"},
                          {"recompute", "full"}, {"fsdp", true}, {"first_stage_layers", 2}, {"last_stage_layers", 3}}}};
  const auto rc = config::parse_run(j, "<step-sim-test>", "");
  const SimResult r = simulate_step(rc);
  const auto e = estimate::estimate_step(rc);
  EXPECT_NEAR(e.step_time_s / r.step.step_time_s, 1.0, 0.05);
}

// A stage that holds back weight-gradient passes keeps each one's linear inputs and output
// gradients (K per micro-batch, the full activations A until its B) until its W. With p = 4 and
// m = 16, stage 0 (four forwards in flight, W right after each B) peaks at max(4A, 3A + K);
// stage 3 (B right after each F, three W held) at max(A + 3K, 4K), its K including the LM
// head's. The timeline's peaks agree with the ledger (1%: its per-chunk accounting).
TEST(Schedules, ZeroBubbleH1HoldsWeightGradientInputsUntilW) {
  Json j = run_json(4, 16, "zb-h1");
  j["parallel"]["recompute"] = "none";
  const auto z = config::parse_run(j, "<step-sim-test>", "");
  const auto lz = memory::compute_ledger(z);
  const double a0 = memory::chunk_layer_activation_bytes(z, 0, 0).value(), k0 = memory::chunk_layer_weight_grad_bytes(z, 0, 0).value();
  const double a3 = memory::chunk_layer_activation_bytes(z, 3, 0).value(), k3 = memory::chunk_layer_weight_grad_bytes(z, 3, 0).value();
  EXPECT_GT(k3, k0);  // the head's input and logits gradient
  EXPECT_NEAR(lz.stages[0].activations.value(), std::max(4.0 * a0, 3.0 * a0 + k0), 1e-6 * a0);
  // Plus the final norm's and the head's inputs of the micro-batch in the head (sequence shards
  // under SP: 2 bytes x 6144 / 8 per token each).
  const double head_inputs = 2.0 * 2.0 * 6144.0 / 8.0 * 2048.0;
  EXPECT_NEAR(lz.stages[3].activations.value(), std::max(a3 + 3.0 * k3, 4.0 * k3) + head_inputs, 1e-6 * a3);
  const SimResult sz = simulate_step(z);
  for (size_t s = 0; s < 4; ++s) {
    EXPECT_NEAR(sz.stages[s].peak_memory_bytes, lz.stages[s].total().value(), 0.01 * lz.stages[s].total().value()) << "stage " << s;
  }
}

// Outputs kept until the step ends accrue on the timeline, one per forward, and are never
// released: with p = 4 and m = 16 the last stage's timeline peak (one micro-batch in flight, all
// 16 logits kept) and stage 0's (four in flight, then all 16 boundaries by its last forward)
// match the ledger, whose kept outputs count all m at the peak.
TEST(Schedules, KeptStepOutputsAccrueOnTheTimeline) {
  Json j = run_json(4, 16, "1f1b");
  j["parallel"]["keep_step_outputs"] = "all-stages";
  const auto k = config::parse_run(j, "<step-sim-test>", "");
  const auto lk = memory::compute_ledger(k);
  EXPECT_NEAR(lk.stages[3].kept_outputs.value(), 16.0 * memory::chunk_kept_output_bytes(k, 3, 0).value(), 1.0);
  EXPECT_NEAR(lk.stages[0].kept_outputs.value(), 16.0 * memory::chunk_kept_output_bytes(k, 0, 0).value(), 1.0);
  const SimResult sk = simulate_step(k);
  const SimResult plain = simulate_step(run(4, 16, "1f1b"));
  for (size_t s = 0; s < 4; ++s) {
    EXPECT_NEAR(sk.stages[s].peak_memory_bytes, lk.stages[s].total().value(), 0.01 * lk.stages[s].total().value()) << "stage " << s;
  }
  EXPECT_GT(sk.stages[3].peak_memory_bytes, plain.stages[3].peak_memory_bytes + 14.0 * memory::chunk_kept_output_bytes(k, 3, 0).value());
}

// 1F1B keeps at most p micro-batches of activations on stage 0; GPipe keeps all m.
TEST(Schedules, OneFOneBHoldsAtMostPMicrobatchesOnStageZero) {
  const SimResult a = simulate_step(run(4, 16, "1f1b"));
  EXPECT_EQ(a.stages[0].max_inflight, 4);
  EXPECT_EQ(a.stages[3].max_inflight, 1);
  const SimResult g = simulate_step(run(4, 16, "gpipe"));
  EXPECT_EQ(g.stages[0].max_inflight, 16);
  EXPECT_GT(g.memory_timeline_peak_bytes, a.memory_timeline_peak_bytes);
}

// DeepSpeed's blocking send/receive pairs (parallel.pp_rendezvous): each transfer holds the
// compute streams of both stages, one transfer at a time, so a stage with neighbours on both
// sides spends four transfers per micro-batch on the pipeline and an end stage two. No transfer
// can share a link with another (each stage is in at most one at a time), so each lasts the
// profile's point-to-point time; 1e-6 relative covers the picosecond rounding.
TEST(Schedules, BlockingPairsHoldBothStagesForEveryTransfer) {
  const int64_t pp = 4, m = 16;
  Json j = run_json(pp, m, "1f1b");
  j["parallel"]["sp"] = false;
  j["parallel"]["pp_send_full_activation"] = true;
  const SimResult off = simulate_step(config::parse_run(j, "<step-sim-test>", ""));
  j["parallel"]["pp_rendezvous"] = true;
  const auto rc = config::parse_run(j, "<step-sim-test>", "");
  const SimResult on = simulate_step(rc);
  const double c = estimate::WorkloadBuilder(rc).p2p_time().value();
  ASSERT_GT(c, 0.0);
  for (int64_t s = 0; s < pp; ++s) {
    const double transfers = (s == 0 || s == pp - 1) ? 2.0 * m : 4.0 * m;
    EXPECT_NEAR(on.stages[static_cast<size_t>(s)].pp_comm_s, transfers * c, 1e-6 * transfers * c) << "stage " << s;
  }
  // Without pairs a stage blocks only for its own sends.
  EXPECT_NEAR(off.stages[1].pp_comm_s, 2.0 * m * c, 1e-6 * 2.0 * m * c);
  // The receives the pairs add sit on the critical path. Without pairs an interior stage
  // already idles about one transfer per micro-batch waiting for each input (it arrives a
  // transfer after its sender finished), so the pairs add about one more per micro-batch:
  // at least 0.9 of m (fill and drain hold fewer), and less than two.
  const double added = (on.step.step_time_s - off.step.step_time_s) / (static_cast<double>(m) * c);
  EXPECT_GT(added, 0.9);
  EXPECT_LT(added, 2.0);
  // The estimate charges an interior stage's four transfers per micro-batch.
  const auto e_off = estimate::estimate_step(config::parse_run(run_json(pp, m, "1f1b"), "<step-sim-test>", ""));
  j["parallel"]["sp"] = true;
  const auto e_on = estimate::estimate_step(config::parse_run(j, "<step-sim-test>", ""));
  EXPECT_NEAR(e_on.breakdown.exposed_comm.at("pp"), 2.0 * e_off.breakdown.exposed_comm.at("pp"), 1e-9);
  // DeepSpeed's engine runs 1F1B only.
  j["parallel"]["schedule"] = "gpipe";
  try {
    (void)config::parse_run(j, "<step-sim-test>", "");
    ADD_FAILURE() << "gpipe with pp_rendezvous accepted";
  } catch (const core::UserError& err) {
    EXPECT_NE(std::string(err.what()).find("$.parallel.pp_rendezvous"), std::string::npos) << err.what();
  }
}

// In DeepSpeed's order a backward's gradient goes back only after the next forward's input has
// arrived: on an interior stage every gradient send that has a later forward follows that
// forward's receive on the compute stream.
TEST(Schedules, BlockingPairsSendGradientsAfterTheNextReceive) {
  Json j = run_json(4, 12, "1f1b");
  j["parallel"]["pp_rendezvous"] = true;
  SimOptions keep;
  keep.keep_timeline = true;
  const SimResult r = simulate_step(config::parse_run(j, "<step-sim-test>", ""), keep);
  const TaskGraph& g = *r.graph;
  std::vector<std::string> order;  // stage 1's pipeline events in stream order
  for (TaskId id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    if (t.rank != 1 || t.stream != Stream::kCompute || t.microbatch < 0) continue;
    const std::string& n = g.name(t.name);
    if (t.kind == TaskKind::kPpSend || n.starts_with("receive")) order.push_back(n + " " + std::to_string(t.microbatch));
  }
  // Stage 1 of 4 runs two warm-up forwards; in the steady state the pattern is: receive
  // gradient k, backward k, receive activation j, send gradient k, forward j, send activation j.
  auto at = [&](const std::string& what) { return std::find(order.begin(), order.end(), what) - order.begin(); };
  for (int k = 0; k + 3 < 12; ++k) {
    const auto grad = at("send gradient " + std::to_string(k));
    const auto next_input = at("receive activation " + std::to_string(k + 3));
    ASSERT_LT(grad, static_cast<long>(order.size())) << k;
    EXPECT_EQ(grad, next_input + 1) << "gradient " << k;
  }
  EXPECT_GT(r.step.step_time_s, 0.0);
}

// Tied embeddings over a pipeline: the first stage and the head's stage all-reduce the
// embedding gradient (vocab/tp x hidden fp32 elements) after their data-parallel reductions and
// before their optimizers; the middle stages take no part, and an untied model runs none.
TEST(Schedules, TiedEmbeddingGradientsAreReducedBetweenFirstAndLastStage) {
  Json j = run_json(4, 8, "1f1b", 1, 2);
  j["model"]["tie_word_embeddings"] = true;
  SimOptions keep;
  keep.keep_timeline = true;
  const auto rc = config::parse_run(j, "<step-sim-test>", "");
  const SimResult r = simulate_step(rc, keep);
  const TaskGraph& g = *r.graph;
  std::vector<TaskId> tied;
  for (TaskId id = 0; id < g.size(); ++id) {
    if (g.name(g.task(id).name) == "all-reduce tied embedding grads") tied.push_back(id);
  }
  ASSERT_EQ(tied.size(), 2u);
  EXPECT_EQ(g.task(tied[0]).rank, 0);
  EXPECT_EQ(g.task(tied[1]).rank, 3);
  // One collective: both start together, and it moves vocab/tp x hidden fp32 gradients.
  EXPECT_EQ(r.start[tied[0]], r.start[tied[1]]);
  const double bytes = static_cast<double>(rc.padded_vocab) * 6144.0 / 8.0 * memory::state_bytes(rc.training).gradients;
  const auto pair = mesh::place({0, 3 * 8 * 2}, rc.cluster.gpus_per_node);
  EXPECT_NEAR(engine::to_seconds(g.task(tied[0]).duration),
              cost::collective_time(cost::Collective::kAllReduce, core::Bytes(bytes), pair, rc.hardware).value(), 1e-9);
  for (TaskId id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    if (t.kind != TaskKind::kOptimizer) continue;
    if (t.rank == 0 || t.rank == 3) {
      EXPECT_GE(r.start[id], r.finish[tied[0]]) << "rank " << t.rank;
    }
  }
  // Untied: none.
  j["model"]["tie_word_embeddings"] = false;
  SimOptions keep2;
  keep2.keep_timeline = true;
  const SimResult u = simulate_step(config::parse_run(j, "<step-sim-test>", ""), keep2);
  for (TaskId id = 0; id < u.graph->size(); ++id) {
    EXPECT_NE(u.graph->name(u.graph->task(id).name), "all-reduce tied embedding grads");
  }
}

// The timeline's in-flight chunks agree with the ledger's schedule formula: interleaved stage r
// holds min(m v, 2 (p - r - 1) + (v - 1) p + 1) chunks at its peak.
TEST(Schedules, InterleavedInflightMatchesLedger) {
  const auto rc = run(4, 8, "interleaved", 2);
  const SimResult r = simulate_step(rc);
  for (int64_t s = 0; s < 4; ++s) {
    const double chunks = std::min(8.0 * 2.0, 2.0 * static_cast<double>(4 - s - 1) + 4.0 + 1.0);
    EXPECT_EQ(r.stages[static_cast<size_t>(s)].max_inflight, static_cast<int64_t>(chunks)) << "stage " << s;
  }
}

// A slow rank sets the pace: its delay shows up as collective wait on the others.
// Collectives do not take compute SMs here, so the delay passes on exactly (with
// interference, a rank waiting on its slow peer overlaps its DP traffic differently).
TEST(Scenarios, SlowestRankSetsThePace) {
  const SimResult base = simulate_step(with_collective_sms(run_json(2, 4, "1f1b", 1, 2), 0), all_ranks());
  const SimResult slow =
      simulate_step(with_collective_sms(run_json(2, 4, "1f1b", 1, 2, {{"slowdown", {{"ranks", {3}}, {"factor", 1.5}}}}), 0));
  ASSERT_TRUE(slow.full);
  EXPECT_GT(slow.step.step_time_s, base.step.step_time_s * 1.05);
  // One slow rank costs as much as slowing every rank of its stage: its TP collectives hold
  // the group, and the pipeline and DP collectives pass the delay on.
  const SimResult stage =
      simulate_step(with_collective_sms(run_json(2, 4, "1f1b", 1, 2, {{"slowdown", {{"stages", {0}}, {"factor", 1.5}}}}), 0));
  EXPECT_NEAR(slow.step.step_time_s, stage.step.step_time_s, 1e-9);
  // Rank 3 is tp rank 3 of stage 0, dp 0: its TP peers (0..7 of dp 0) wait for it.
  EXPECT_GT(slow.rank_wait_s[0], base.rank_wait_s[0] + 0.1 * base.step.step_time_s);
  EXPECT_LT(slow.rank_wait_s[3], slow.rank_wait_s[0]);
}

// Host work on rank 0 before the step's barrier delays every rank by that much.
TEST(Scenarios, RankZeroHostWorkSlowsAllRanks) {
  const SimResult base = simulate_step(run(2, 4, "1f1b", 1, 2), all_ranks());
  const SimResult host = simulate_step(run(2, 4, "1f1b", 1, 2, {{"host_work", {{"rank", 0}, {"time", "250ms"}}}}));
  EXPECT_NEAR(host.step.step_time_s - base.step.step_time_s, 0.25, 1e-9);
  EXPECT_GT(host.rank_wait_s[5], 0.249);  // a rank that only waited at the barrier
}

TEST(Scenarios, JitterIsSeededAndDeterministic) {
  Json sc = {{"jitter", {{"cv", 0.1}, {"seed", 7}}}};
  const SimResult a = simulate_step(run(2, 4, "1f1b", 1, 1, sc));
  const SimResult b = simulate_step(run(2, 4, "1f1b", 1, 1, sc));
  EXPECT_EQ(a.step.step_time_s, b.step.step_time_s);
  Json sc2 = {{"jitter", {{"cv", 0.1}, {"seed", 8}}}};
  const SimResult c = simulate_step(run(2, 4, "1f1b", 1, 1, sc2));
  EXPECT_NE(a.step.step_time_s, c.step.step_time_s);
}

// Same input, byte-identical JSON and trace.
TEST(Determinism, TwoRunsGiveIdenticalJsonAndTrace) {
  const auto rc = run(4, 8, "interleaved", 2, 2);
  SimOptions o;
  o.keep_timeline = true;
  const SimResult a = simulate_step(rc, o);
  const SimResult b = simulate_step(rc, o);
  EXPECT_EQ(report::simulate_json(rc, a, "test").dump(), report::simulate_json(rc, b, "test").dump());
  const std::string ta = trace_json(rc, a), tb = trace_json(rc, b);
  EXPECT_EQ(ta, tb);
  EXPECT_GT(ta.size(), 1000u);
  EXPECT_NE(ta.find("\"L0 fwd mb0 c0\""), std::string::npos);
  const Json parsed = Json::parse(ta);  // valid JSON
  EXPECT_TRUE(parsed["traceEvents"].is_array());
}

// Without a scenario the simulation agrees with the analytical pass on a plain 1F1B layout
// (they share the workload; the timeline only adds what overlaps): within 5%.
TEST(Consistency, SymmetricSimulationAgreesWithEstimate) {
  const auto rc = run(4, 16, "1f1b", 1, 2);
  const SimResult r = simulate_step(rc);
  const auto e = estimate::estimate_step(rc);
  EXPECT_NEAR(r.step.step_time_s / e.step_time_s, 1.0, 0.05);
}


config::RunConfig gpt2_ddp(double bucket_mb, int64_t accum, bool no_sync, int64_t world = 8) {
  core::Json j = {
      {"model", "gpt2-124m"},
      {"hardware", "rtx-pro-6000-pcie-8x"},
      {"cluster", {{"num_gpus", world}}},
      {"training",
       {{"seq_len", 1024}, {"global_batch_size", 12 * world * accum}, {"param_dtype", "fp32"}, {"grad_dtype", "fp32"}}},
      {"parallel", {{"micro_batch_size", 12}, {"bucket_mb", bucket_mb}, {"no_sync", no_sync}}}};
  return config::parse_run(j, "<ddp-test>", "");
}

// One bucket holding every gradient cannot overlap backward: the step grows by one
// all-reduce of all fp32 gradients over the 8 GPUs (as the PCIe lab observed).
TEST(DataParallel, SingleBucketExposesOneFullAllReduce) {
  const SimResult one = simulate_step(gpt2_ddp(25, 1, true, 1));
  const SimResult big = simulate_step(gpt2_ddp(1000, 1, true));
  const auto rc = gpt2_ddp(1000, 1, true);
  std::vector<int64_t> ranks{0, 1, 2, 3, 4, 5, 6, 7};
  const double ar = cost::collective_time(cost::Collective::kAllReduce,
                                          core::Bytes(big.step.memory.stages[0].params * 4.0),
                                          mesh::place(ranks, 8), rc.hardware).value();
  EXPECT_NEAR(big.step.step_time_s - one.step.step_time_s, ar, 0.02 * ar);
}

// Buckets launched during backward hide most of the reduction; the tied embedding's gradient
// is complete only at the end, so its bucket stays exposed.
TEST(DataParallel, BucketsOverlapBackwardExceptTheTiedEmbedding) {
  const SimResult one = simulate_step(gpt2_ddp(25, 1, true, 1));
  const SimResult b25 = simulate_step(gpt2_ddp(25, 1, true));
  const SimResult b1000 = simulate_step(gpt2_ddp(1000, 1, true));
  const double exposed25 = b25.step.step_time_s - one.step.step_time_s;
  const double exposed1000 = b1000.step.step_time_s - one.step.step_time_s;
  EXPECT_LT(exposed25, 0.6 * exposed1000);
  // The embedding (50257 x 768 fp32 = 154 MB) still has to be reduced after backward.
  EXPECT_GT(exposed25, 0.25 * exposed1000);
}

// A bucket's all-reduce issued beside the backward waits for the compute kernel in flight
// (collectives on streams of the compute's priority): the more buckets, the more waits. A
// single bucket, issued once the backward is over, waits for nothing; with the collectives'
// streams at high priority nothing waits.
TEST(DataParallel, SmallBucketsWaitForTheKernelsTheyRunBeside) {
  auto step = [](double bucket_mb, bool high) {
    auto rc = gpt2_ddp(bucket_mb, 1, true);
    rc.parallel.comm_high_priority = high;
    return simulate_step(rc).step.step_time_s;
  };
  const double w1 = step(1, false) - step(1, true);
  const double w25 = step(25, false) - step(25, true);
  EXPECT_GT(w1, 0.0);
  EXPECT_GT(w1, w25);
  EXPECT_GE(w25, 0.0);
  EXPECT_EQ(step(1000, false), step(1000, true));
  // The waits are reported: stream time, at least what the step lost to them.
  auto waited = [](double bucket_mb, bool high) {
    auto rc = gpt2_ddp(bucket_mb, 1, true);
    rc.parallel.comm_high_priority = high;
    return simulate_step(rc).kernel_wait_s;
  };
  EXPECT_GE(waited(1, false), w1 - 1e-9);
  EXPECT_GT(waited(1, false), waited(25, false));
  EXPECT_EQ(waited(1, true), 0.0);
}

// Megatron-Core's bucket layout: one DDP per model chunk, buckets only on the first stage's
// first chunk, one bucket for every other chunk and stage; PyTorch DDP buckets everywhere.
TEST(DataParallel, MegatronBucketsOnlyTheFirstStagesFirstChunk) {
  auto reductions = [](const std::string& layout) {
    Json j = run_json(2, 4, "interleaved", 2, 2);
    j["parallel"]["bucket_layout"] = layout;
    SimOptions keep;
    keep.keep_timeline = true;
    const SimResult r = simulate_step(config::parse_run(j, "<step-sim-test>", ""), keep);
    std::map<int32_t, int> n;  // simulated rank (stage) -> gradient buckets
    for (const Task& t : r.graph->tasks()) {
      // (Not the tied embedding's all-reduce between the first and last stage.)
      if (t.kind == TaskKind::kDpComm && t.stream == Stream::kDpReduce && r.graph->name(t.name) != "all-reduce tied embedding grads") ++n[t.rank];
    }
    return std::pair{n[0], n[1]};
  };
  const auto [ddp0, ddp1] = reductions("ddp");
  const auto [mg0, mg1] = reductions("megatron");
  // 24 layers of 6144 hidden per stage at tp 8: about 57 MB of fp32 gradients per layer, so
  // 25 MB buckets hold about one tensor each.
  EXPECT_GT(ddp0, 40);
  EXPECT_GT(ddp1, 40);
  EXPECT_EQ(mg1, 2);           // stage 1: one bucket per chunk
  // Stage 0: chunk 0 (half the stage's layers) bucketed as DDP buckets it, chunk 1 in one piece.
  EXPECT_NEAR(mg0 - 1, ddp0 / 2.0, 3.0);
}

// Without no_sync every micro-batch's backward waits for its reductions.
TEST(DataParallel, SyncEveryMicrobatchCostsMoreThanNoSync) {
  const SimResult ns = simulate_step(gpt2_ddp(25, 4, true));
  const SimResult sync = simulate_step(gpt2_ddp(25, 4, false));
  const SimResult one = simulate_step(gpt2_ddp(25, 1, true, 1));
  const SimResult b25 = simulate_step(gpt2_ddp(25, 1, true));
  const double exposed = b25.step.step_time_s - one.step.step_time_s;
  EXPECT_NEAR(sync.step.step_time_s - ns.step.step_time_s, 3.0 * exposed, 0.25 * 3.0 * exposed);
}


config::RunConfig small(Json scenario) {
  Json j = {{"model", "llama3.1-8b"},
            {"hardware", "h100-sxm"},
            {"cluster", {{"num_gpus", 32}}},
            {"training", {{"seq_len", 4096}, {"global_batch_size", 32}}},
            {"parallel", {{"tp", 4}, {"pp", 2}, {"dp", 4}, {"sp", true}, {"micro_batch_size", 1}, {"zero_stage", 1}}}};
  if (!scenario.is_null()) j["scenario"] = scenario;
  return config::parse_run(j, "<scenario-test>", "");
}

// A degraded link on one rank slows the collectives of its groups; its TP peers wait less than
// ranks of other replicas that then wait at the data-parallel reduction.
TEST(Scenarios, DegradedLinkSlowsItsGroups) {
  const SimResult base = simulate_step(small(nullptr), all_ranks());
  const SimResult bad = simulate_step(small({{"degraded_link", {{"rank", 1}, {"bandwidth_factor", 0.1}}}}));
  EXPECT_GT(bad.step.step_time_s, base.step.step_time_s * 1.05);
  // Rank 9 (stage 0, replica 2) is not in rank 1's TP group but shares the step.
  EXPECT_GT(bad.rank_wait_s[9], base.rank_wait_s[9]);
}

// Variable sequence lengths: replicas with shorter micro-batches finish early and wait for the
// longest one at the gradient reduction; the draw is reproducible and changes with the seed.
TEST(Scenarios, VariableSequenceLengthsMakeReplicasWait) {
  Json uni = {{"seq_len_distribution", {{"kind", "uniform"}, {"min", 512}, {"max", 4096}, {"seed", 3}}}};
  const SimResult a = simulate_step(small(uni));
  const SimResult b = simulate_step(small(uni));
  EXPECT_EQ(a.step.step_time_s, b.step.step_time_s);
  const SimResult full = simulate_step(small(nullptr), all_ranks());
  EXPECT_LT(a.step.step_time_s, full.step.step_time_s);  // no sequence is longer than seq_len
  EXPECT_GT(a.collective_wait_s, full.collective_wait_s);
  Json other = uni;
  other["seq_len_distribution"]["seed"] = 4;
  EXPECT_NE(simulate_step(small(other)).step.step_time_s, a.step.step_time_s);
  Json logn = {{"seq_len_distribution", {{"kind", "lognormal"}, {"median", 1024}, {"sigma", 0.8}}}};
  EXPECT_GT(simulate_step(small(logn)).collective_wait_s, full.collective_wait_s);
}


// Symmetry is exact: without a scenario, simulating every rank gives the same step as one
// representative rank per stage (interleaved PP + DP, FSDP, MoE with EP, CP).
TEST(Symmetry, AllRanksEqualsRepresentativeRanks) {
  const std::vector<Json> runs = {
      {{"model", "llama3.1-8b"}, {"hardware", "h100-sxm"}, {"cluster", {{"num_gpus", 32}}},
       {"training", {{"seq_len", 4096}, {"global_batch_size", 32}}},
       {"parallel", {{"tp", 2}, {"pp", 4}, {"vpp", 2}, {"micro_batch_size", 1}, {"zero_stage", 1}}}},
      {{"model", "llama3.1-8b"}, {"hardware", "h100-sxm"}, {"cluster", {{"num_gpus", 16}}},
       {"training", {{"seq_len", 8192}, {"global_batch_size", 16}}},
       {"parallel", {{"fsdp", true}, {"cp", 2}, {"micro_batch_size", 1}, {"recompute", "full"}}}},
      {{"model", "mixtral-8x7b"}, {"hardware", "h100-sxm"}, {"cluster", {{"num_gpus", 32}}},
       {"training", {{"seq_len", 4096}, {"global_batch_size", 64}}},
       {"parallel", {{"tp", 2}, {"pp", 2}, {"ep", 4}, {"sp", true}, {"micro_batch_size", 1}, {"zero_stage", 1}, {"recompute", "full"}}}},
      // Hybrid sharding: shard and replicate collectives join their own groups.
      {{"model", "llama3.1-8b"}, {"hardware", "h100-sxm"}, {"cluster", {{"num_gpus", 32}}},
       {"training", {{"seq_len", 8192}, {"global_batch_size", 32}}},
       {"parallel", {{"fsdp", true}, {"cp", 2}, {"dp_replicate", 4}, {"micro_batch_size", 1}, {"recompute", "full"}}}},
      {{"model", "mixtral-8x7b"}, {"hardware", "h100-sxm"}, {"cluster", {{"num_gpus", 32}}},
       {"training", {{"seq_len", 4096}, {"global_batch_size", 64}}},
       {"parallel", {{"tp", 2}, {"pp", 2}, {"ep", 4}, {"sp", true}, {"micro_batch_size", 1}, {"zero_stage", 1}, {"dp_replicate", 2},
                     {"recompute", "full"}}}},
  };
  for (const auto& j : runs) {
    const auto rc = config::parse_run(j, "<symmetry-test>", "");
    const SimResult one = simulate_step(rc);
    SimOptions all;
    all.full = true;
    const SimResult every = simulate_step(rc, all);
    EXPECT_FALSE(one.full);
    EXPECT_TRUE(every.full);
    EXPECT_EQ(one.step.step_time_s, every.step.step_time_s) << j.dump();
    EXPECT_EQ(every.collective_wait_s, 0.0);
  }
}


// Operator slices nest inside their layer's task: they start at its start and add up to it.
TEST(Trace, OperatorSlicesNestInsideLayerTasks) {
  const auto rc = run(2, 4, "1f1b");
  SimOptions o;
  o.keep_timeline = true;
  const SimResult r = simulate_step(rc, o);
  const Json t = Json::parse(trace_json(rc, r, {}, true))["traceEvents"];
  double layer_start = -1, layer_end = -1, ops_sum = 0;
  int ops = 0;
  for (const auto& e : t) {
    if (e["ph"] != "X") continue;
    if (e["name"] == "L0 fwd mb0") {
      layer_start = e["ts"].get<double>();
      layer_end = layer_start + e["dur"].get<double>();
    } else if (e["cat"] == "op" && layer_start >= 0 && e["ts"].get<double>() >= layer_start && e["ts"].get<double>() < layer_end &&
               e["pid"] == 0) {
      ops_sum += e["dur"].get<double>();
      ++ops;
    }
  }
  ASSERT_GT(layer_start, -1);
  EXPECT_GE(ops, 8);  // norms, QKV, attention, projections, MLP, residuals
  EXPECT_NEAR(ops_sum, layer_end - layer_start, 1e-3);  // microseconds, ps rounding per op
}

// Trace slices span what each task took on the timeline: a compute task slowed by a gradient
// reduction beside it (collective_sms > 0) shows its stretched time, not its own duration.
TEST(Trace, SlicesShowTimeOnTheTimeline) {
  const auto rc = with_collective_sms(run_json(2, 4, "1f1b", 1, 2), 24);
  SimOptions o;
  o.keep_timeline = true;
  const SimResult r = simulate_step(rc, o);
  const Json t = Json::parse(trace_json(rc, r))["traceEvents"];
  std::map<std::tuple<int64_t, int64_t, double>, double> dur;  // (pid, tid, ts) -> dur, microseconds
  for (const auto& e : t) {
    if (e["ph"] == "X" && e["cat"] != "op") dur[{e["pid"].get<int64_t>(), e["tid"].get<int64_t>(), e["ts"].get<double>()}] = e["dur"].get<double>();
  }
  int stretched = 0;
  for (TaskId id = 0; id < r.graph->size(); ++id) {
    const Task& task = r.graph->task(id);
    if (task.duration == 0 || task.stream != Stream::kCompute) continue;
    const double took = static_cast<double>(r.finish[id] - r.start[id]) * 1e-6;  // ps -> us
    const auto it = dur.find({r.rank_ids[static_cast<size_t>(task.rank)], static_cast<int64_t>(task.stream), static_cast<double>(r.start[id]) * 1e-6});
    if (it == dur.end()) continue;
    EXPECT_NEAR(it->second, took, 1e-3);
    if (took > static_cast<double>(task.duration) * 1e-6 * 1.01) ++stretched;
  }
  EXPECT_GT(stretched, 0);
}

// Contention: with every rank on its own node, pipeline sends and the DDP gradient buckets
// launched during backward share each rank's NIC. Overlapped buckets stretch some sends past
// their time alone; with the reduction deferred to after backward no send is slowed.
double max_send_stretch(bool overlap) {
  Json j = {{"model", "llama3.1-8b"},
            {"hardware", "h100-sxm"},
            {"cluster", {{"num_gpus", 4}, {"gpus_per_node", 1}}},
            {"training", {{"seq_len", 4096}, {"global_batch_size", 16}}},
            {"parallel", {{"pp", 2}, {"dp", 2}, {"micro_batch_size", 1}, {"grad_reduce_overlap", overlap}}}};
  SimOptions opt;
  opt.keep_timeline = true;
  const SimResult r = simulate_step(config::parse_run(j, "<contention-test>", ""), opt);
  double worst = 0;
  for (TaskId i = 0; i < r.graph->size(); ++i) {
    const Task& t = r.graph->task(i);
    if (t.kind != TaskKind::kPpSend || t.duration <= 0) continue;
    worst = std::max(worst, static_cast<double>(r.finish[i] - r.start[i]) / static_cast<double>(t.duration));
  }
  return worst;
}

TEST(Contention, GradientBucketsSlowPipelineSendsOnTheSameNic) {
  EXPECT_NEAR(max_send_stretch(false), 1.0, 1e-6);
  const double s = max_send_stretch(true);
  EXPECT_GT(s, 1.3) << s;  // ~2: the send and a bucket each get half the NIC
}

// Interleaved 1F1B with unequal virtual stages: the ledger walks the stage's own order, so its
// activation peak is the one the simulated memory timeline reaches (the warm-up set alone
// undercounts when a heavy chunk is held later), within the timeline's rounding.
TEST(StepSim, InterleavedLedgerPeakMatchesTheTimelineWithUnequalChunks) {
  Json j = {{"model", "llama3.1-8b"},
            {"hardware", "h100-sxm"},
            {"cluster", {{"num_gpus", 32}}},
            {"training", {{"seq_len", 2048}, {"global_batch_size", 64}}},
            {"parallel", {{"pp", 8}, {"vpp", 3}, {"dp", 4}, {"micro_batch_size", 1}, {"schedule", "interleaved"},
                          {"stage_layers", {1, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}}}}};
  for (int64_t batch : {64, 512}) {  // 16 micro-batches, and 128 (past the ledger's walk bound of 56)
    j["training"]["global_batch_size"] = batch;
    const auto rc = config::parse_run(j, "<step-sim-test>", "");
    const auto r = simulate_step(rc);
    EXPECT_NEAR(r.step.memory.peak().value() / r.memory_timeline_peak_bytes, 1.0, 1e-9) << batch;
  }
}

// End stages without transformer layers (the embedding alone, the output head alone): the
// ledger's stage 0 holds the embedding's weights and no layer activations, the timeline peak
// is the ledger's, and the step lands between the even 4-stage split (8 layers per stage) and
// 2 stages of 16 layers, whose last stage also runs the output head (about 2.4 layers' FLOPs
// with Llama 3's 128k vocabulary) that the empty last stage takes off the layers' stages.
TEST(StepSim, EndStagesWithoutLayers) {
  Json j = {{"model", "llama3.1-8b"},
            {"hardware", "h100-sxm"},
            {"cluster", {{"num_gpus", 8}}},
            {"training", {{"seq_len", 4096}, {"global_batch_size", 64}}},
            {"parallel", {{"tp", 2}, {"pp", 4}, {"micro_batch_size", 1}, {"stage_layers", {0, 16, 16, 0}}}}};
  const auto empty_ends = simulate_step(config::parse_run(j, "<step-sim-test>", ""));
  const auto& st0 = empty_ends.step.memory.stages.front();
  EXPECT_EQ(st0.layers, 0);
  EXPECT_GT(st0.weights.value(), 0.0);
  EXPECT_LT(st0.weights.value(), empty_ends.step.memory.stages[1].weights.value() / 4);
  EXPECT_EQ(st0.activations.value(), 0.0);
  EXPECT_NEAR(empty_ends.step.memory.peak().value() / empty_ends.memory_timeline_peak_bytes, 1.0, 1e-9);
  j["parallel"].erase("stage_layers");
  const auto even = simulate_step(config::parse_run(j, "<step-sim-test>", ""));
  j["parallel"]["pp"] = 2;
  j["cluster"]["num_gpus"] = 4;
  const auto two = simulate_step(config::parse_run(j, "<step-sim-test>", ""));
  EXPECT_GT(empty_ends.step.step_time_s, even.step.step_time_s);
  EXPECT_LT(empty_ends.step.step_time_s, two.step.step_time_s);
}

// A step whose operators each fit the clock but whose sum does not (one micro-batch of 2^24
// sequences of 16,384 tokens: about 2e7 s on 8 GPUs, past the 2^63 ps range of about 106 days;
// at 8,192 tokens it is 8.3e6 s, inside the range) is refused with a UserError, not a saturated
// clock and negative compute time.
TEST(StepSim, RefusesAStepLongerThanTheClockRange) {
  Json j = run_json(1, 1, "1f1b");
  j["model"]["max_position_embeddings"] = 16384;
  j["training"]["seq_len"] = 16384;
  j["training"]["global_batch_size"] = int64_t{1} << 24;
  j["parallel"]["micro_batch_size"] = int64_t{1} << 24;
  const auto rc = config::parse_run(j, "<test>", "");
  try {
    (void)simulate_step(rc);
    FAIL() << "expected UserError";
  } catch (const core::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("106 days"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace stepcast::engine

namespace stepcast::engine {
namespace {

// DeepSpeed ZeRO-3 (2021) switches: flat-ring collectives put the whole gathered volume on each
// GPU's NIC (a 16-GPU group over 2 nodes: 15/16 of the bytes instead of a node's share), and a
// re-gather for the recomputed forward adds one gather per layer in backward; both slow a
// step whose gathers are exposed, and the analytical pass agrees in direction.
config::RunConfig zero3(bool flat, bool regather) {
  core::Json j = {{"model", "llama3.1-8b"},
                  {"hardware", "h100-sxm"},
                  {"cluster", {{"num_gpus", 16}, {"gpus_per_node", 8}}},
                  {"training", {{"seq_len", 2048}, {"global_batch_size", 16}}},
                  {"parallel",
                   {{"dp", 16}, {"zero_stage", 3}, {"recompute", "full"}, {"zero3_flat_collectives", flat},
                    {"zero3_recompute_regather", regather}}}};
  return config::parse_run(j, "<zero3-test>", "");
}

TEST(Zero3Switches, FlatRingsAndRegatherCostMore) {
  const auto base = zero3(false, false), flat = zero3(true, false), both = zero3(true, true);
  estimate::WorkloadBuilder wb(flat);
  EXPECT_EQ(wb.placements().zero3.nodes, 16);            // every member its own hop over the network
  EXPECT_EQ(estimate::WorkloadBuilder(base).placements().zero3.nodes, 2);
  const double t0 = simulate_step(base).step.step_time_s, t1 = simulate_step(flat).step.step_time_s,
               t2 = simulate_step(both).step.step_time_s;
  EXPECT_GT(t1, t0 * 1.05);
  EXPECT_GT(t2, t1 * 1.05);
  EXPECT_GT(estimate::estimate_step(both).step_time_s, estimate::estimate_step(flat).step_time_s);
}

// Gradient reductions hidden behind backward still cost compute: with the collective taking
// 24 of 132 SMs the step is slower than with free overlap, by at most the share's slowdown of
// the DP traffic that ran beside compute.
TEST(Interference, HiddenGradientReductionSlowsBackward) {
  const Json j = run_json(1, 4, "1f1b", 1, 4);
  const SimResult free_overlap = simulate_step(with_collective_sms(j, 0));
  SimOptions keep;
  keep.keep_timeline = true;
  const SimResult contended = simulate_step(with_collective_sms(j, 24), keep);
  const double share = 24.0 / 132.0;
  EXPECT_GT(contended.step.step_time_s, free_overlap.step.step_time_s);
  double dp_traffic = 0;  // seconds of DP collectives on the representative rank
  for (const auto& t : contended.graph->tasks()) {
    if (t.kind == TaskKind::kDpComm && t.rank == 0) dp_traffic += to_seconds(t.duration);
  }
  ASSERT_GT(dp_traffic, 0.0);
  // The lost compute is reported as exposed DP communication, not as pipeline bubble.
  EXPECT_NEAR(contended.step.bubble_fraction, 0.0, 1e-12);  // zero up to rounding of the summed spans
  EXPECT_GT(contended.step.breakdown.exposed_comm.at("dp"), free_overlap.step.breakdown.exposed_comm.at("dp"));
  EXPECT_GT(contended.stages[0].slowed_s, 0.0);
  EXPECT_LT(contended.step.step_time_s - free_overlap.step.step_time_s, dp_traffic * share / (1.0 - share));
}

// ZeRO-1 with the parameter all-gather overlapped (Megatron-Core's overlap_param_gather): the
// gathers of the updated shards are queued at the step's start and the first micro-batch's
// forward waits for them layer by layer. They hide behind that forward at most: a slow network
// exposes the rest, a fast one only the first bucket.
config::RunConfig zero1_over_nic(double nic_gbps, bool overlap, bool high_priority = false) {
  Json j = run_json(1, 4, "1f1b", 1, 8);
  j["hardware"] = {{"base", "h100-sxm"}, {"network", {{"nic_bandwidth", core::fmt("%gGb/s", nic_gbps)}}}};
  j["parallel"]["param_gather_overlap"] = overlap;
  j["parallel"]["comm_high_priority"] = high_priority;
  return config::parse_run(j, "<step-sim-test>", "");
}

TEST(ZeroOne, OverlappedParameterGathersHideBehindTheFirstForwardOnly) {
  SimOptions keep;
  keep.keep_timeline = true;
  for (const double nic : {4000.0, 10.0}) {
    const SimResult over = simulate_step(zero1_over_nic(nic, true), keep);
    const SimResult after = simulate_step(zero1_over_nic(nic, false));
    const auto& tasks = over.graph->tasks();
    Tick first_backward = std::numeric_limits<Tick>::max();
    for (size_t i = 0; i < tasks.size(); ++i) {
      if (tasks[i].kind == TaskKind::kBackward) first_backward = std::min(first_backward, over.start[i]);
    }
    // The first micro-batch's forward on the compute stream (its layers and their exposed TP
    // exchanges), and the parameter gathers on their own stream.
    double gathers = 0, first_forward = 0;
    Tick gathers_end = 0, forward0_end = 0, first_compute = -1;
    for (size_t i = 0; i < tasks.size(); ++i) {
      const Task& t = tasks[i];
      if (t.kind == TaskKind::kDpComm && t.stream == Stream::kDp) {
        gathers += to_seconds(over.finish[i] - over.start[i]);
        gathers_end = std::max(gathers_end, over.finish[i]);
      }
      const bool fwd0 = t.microbatch == 0 && t.stream == Stream::kCompute && over.start[i] < first_backward &&
                        (t.kind == TaskKind::kForward || t.kind == TaskKind::kTpComm);
      if (fwd0) {
        first_forward += to_seconds(t.duration);
        forward0_end = std::max(forward0_end, over.finish[i]);
        if (first_compute < 0) first_compute = over.start[i];
      }
    }
    ASSERT_GT(gathers, 0.0);
    // Queued at the start: the first layer waits for the first bucket, and every gather ends
    // before the first micro-batch's forward does.
    EXPECT_GT(first_compute, 0) << nic;
    EXPECT_LE(gathers_end, forward0_end) << nic;
    // Overlap saves at most the first forward and never costs more than gathering after the
    // optimizer.
    const double saved = after.step.step_time_s - over.step.step_time_s;
    EXPECT_GE(saved, 0.0) << nic;
    EXPECT_LE(saved, first_forward + 1e-9) << nic;
    if (nic < 100) {
      // 10 Gb/s: the gathers outlast the first forward, which hides nearly all of its length
      // when their stream outranks compute; otherwise each gather first waits for the forward's
      // kernel in flight, and the forward hides less.
      EXPECT_GT(gathers, 2.0 * first_forward);
      const double saved_high = simulate_step(zero1_over_nic(nic, false, true)).step.step_time_s -
                                simulate_step(zero1_over_nic(nic, true, true)).step.step_time_s;
      EXPECT_GT(saved_high, 0.9 * first_forward);
      EXPECT_LT(saved, saved_high);
      EXPECT_GT(saved, 0.5 * first_forward);
      EXPECT_GT(over.step.breakdown.exposed_comm.at("dp"), gathers - first_forward);
    } else {
      EXPECT_LT(gathers, first_forward);
    }
  }
}

// Not aligned across pipeline stages (param_gather_align false, as NeMo runs 1F1B): each stage
// issues its gathers when its first forward's input arrives, so the later stage's gathers
// cannot hide behind the pipeline fill and the step is longer than with aligned gathers.
TEST(ZeroOne, UnalignedGathersStartAtEachStagesFirstForward) {
  auto run_with = [](bool align) {
    Json j = run_json(2, 4, "1f1b", 1, 8);
    j["hardware"] = {{"base", "h100-sxm"}, {"network", {{"nic_bandwidth", "25Gb/s"}}}};
    j["parallel"]["param_gather_align"] = align;
    SimOptions keep;
    keep.keep_timeline = true;
    return simulate_step(config::parse_run(j, "<step-sim-test>", ""), keep);
  };
  const SimResult aligned = run_with(true);
  const SimResult unaligned = run_with(false);
  EXPECT_GT(unaligned.step.step_time_s, aligned.step.step_time_s);
  auto first_gather_and_send = [](const SimResult& r) {
    Tick gather1 = std::numeric_limits<Tick>::max(), send0 = std::numeric_limits<Tick>::max();
    const auto& tasks = r.graph->tasks();
    for (size_t i = 0; i < tasks.size(); ++i) {
      const Task& t = tasks[i];
      if (t.rank == 1 && t.kind == TaskKind::kDpComm && t.stream == Stream::kDp) gather1 = std::min(gather1, r.start[i]);
      if (t.rank == 0 && t.kind == TaskKind::kPpSend) send0 = std::min(send0, r.finish[i]);
    }
    return std::pair{gather1, send0};
  };
  const auto [g_al, s_al] = first_gather_and_send(aligned);
  const auto [g_un, s_un] = first_gather_and_send(unaligned);
  EXPECT_LT(g_al, s_al);  // aligned: stage 1 gathers from the step's start
  EXPECT_GE(g_un, s_un);  // not aligned: only once its first input has arrived
}

// A step too big to simulate is refused before its graph is built, with the sizes that make it
// so: 2^20 micro-batches of 48 layers are about 3 billion operators.
TEST(StepSim, RefusesAStepTooLargeToSimulate) {
  Json j = run_json(1, 1, "1f1b");
  j["training"]["global_batch_size"] = 1 << 20;
  const auto rc = config::parse_run(j, "<test>", "");
  try {
    (void)simulate_step(rc);
    FAIL() << "expected UserError";
  } catch (const core::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("micro-batches of"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("over the limit"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace stepcast::engine
