// CPU activation offload (parallel.activation_offload_layers): what leaves the GPU ledger for
// host memory, the double-buffered copies in the simulated timeline and the estimate, where
// their exposed time is booked, and the input checks.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "sim/config/run_config.hpp"
#include "sim/core/error.hpp"
#include "sim/core/json_reader.hpp"
#include "sim/engine/step_sim.hpp"
#include "sim/estimate/estimate.hpp"
#include "sim/memory/ledger.hpp"
#include "sim/plan/planner.hpp"

namespace stepcast {
namespace {

using config::RunConfig;
using core::Json;

// Llama 3.1 8B on one 8-GPU H100 node, no recomputation: every layer keeps ~1 GiB of
// activations per 8k-token micro-batch.
Json base8b() {
  return Json::parse(R"({"model": "llama3.1-8b", "hardware": "h100-sxm", "cluster": {"num_gpus": 8},
    "training": {"seq_len": 8192, "global_batch_size": 32, "precision": "bf16"},
    "parallel": {"micro_batch_size": 1, "zero_stage": 1, "recompute": "none"}})");
}

RunConfig with_layers(Json j, int64_t n) {
  j["parallel"]["activation_offload_layers"] = n;
  return config::parse_run(j, "<activation-offload-test>", "");
}

std::string error_of(Json j) {
  try {
    (void)config::parse_run(j, "<activation-offload-test>", "");
  } catch (const core::UserError& e) {
    return e.what();
  }
  return "";
}

TEST(ActivationOffload, OffloadedLayersLeaveTwoBuffersOnTheGpu) {
  const RunConfig none = with_layers(base8b(), 0), off = with_layers(base8b(), 10);
  const auto a = memory::compute_ledger(none).stages[0];
  const auto b = memory::compute_ledger(off).stages[0];
  const double layer = memory::layer_activation_bytes(none, false).value();
  ASSERT_GT(layer, 0.5 * 1073741824.0);
  // Ten layers go to the host; two layers' worth stays as the copy buffers.
  EXPECT_NEAR(a.activations.value() - b.activations.value(), 8.0 * layer, 1.0);
  EXPECT_NEAR(b.host.value(), 10.0 * layer, 1.0);
  EXPECT_EQ(a.host.value(), 0.0);
  EXPECT_EQ(b.weights.value(), a.weights.value());
  EXPECT_EQ(b.optimizer.value(), a.optimizer.value());
  // A node's eight GPUs together against its host memory.
  EXPECT_NEAR(memory::compute_ledger(off).host_per_node.value(), 80.0 * layer, 8.0);
  // One offloaded layer keeps its own buffer: no saving, the layer only moves.
  const auto c = memory::compute_ledger(with_layers(base8b(), 1)).stages[0];
  EXPECT_NEAR(c.activations.value(), a.activations.value(), 1.0);
  EXPECT_NEAR(c.host.value(), layer, 1.0);
}

TEST(ActivationOffload, HostHoldsEveryMicroBatchInFlight) {
  // 1F1B over two stages: stage 0 holds two micro-batches, each with its offloaded layers.
  Json j = base8b();
  j["parallel"]["pp"] = 2;
  const RunConfig rc = with_layers(j, 4);
  const auto l = memory::compute_ledger(rc);
  const double layer = memory::layer_activation_bytes(rc, false).value();
  EXPECT_NEAR(l.stages[0].host.value(), 2.0 * 4.0 * layer, 1.0);
  EXPECT_NEAR(l.stages[1].host.value(), 1.0 * 4.0 * layer, 1.0);
}

TEST(ActivationOffload, InputChecksNameTheField) {
  const std::string f = "parallel.activation_offload_layers";
  Json rec = base8b();
  rec["parallel"]["recompute"] = "full";
  rec["parallel"]["activation_offload_layers"] = 4;
  EXPECT_NE(error_of(rec).find(f), std::string::npos);
  EXPECT_NE(error_of(rec).find("recompute \"none\""), std::string::npos) << error_of(rec);
  Json all = base8b();
  all["parallel"]["activation_offload_layers"] = 32;  // every layer of the only stage
  EXPECT_NE(error_of(all).find("less than the layers of every stage (the fewest is 32)"), std::string::npos) << error_of(all);
  Json vpp = base8b();
  vpp["parallel"].update(Json::parse(R"({"pp": 2, "vpp": 2, "schedule": "interleaved", "activation_offload_layers": 2})"));
  EXPECT_NE(error_of(vpp).find("needs vpp 1"), std::string::npos) << error_of(vpp);
  Json zb = base8b();
  zb["parallel"].update(Json::parse(R"({"pp": 2, "schedule": "zb-h1", "activation_offload_layers": 2})"));
  EXPECT_NE(error_of(zb).find("zb-h1"), std::string::npos) << error_of(zb);
  Json nohost = base8b();
  nohost["hardware"] = "gb200-nvl72";
  nohost["parallel"]["activation_offload_layers"] = 2;
  EXPECT_NE(error_of(nohost).find("does not describe its host"), std::string::npos) << error_of(nohost);
  Json neg = base8b();
  neg["parallel"]["activation_offload_layers"] = -1;
  EXPECT_NE(error_of(neg).find(f), std::string::npos);
}

// Copies slower than the layers they hide behind: the simulated forward of an offloaded layer
// takes one copy (the compute after the next layer waits for it), its backward one reload, so
// each offloaded layer costs (copy - forward) + (copy - backward) more per micro-batch.
TEST(ActivationOffload, CopiesSlowerThanALayerSetThePace) {
  const RunConfig none = with_layers(base8b(), 0), off = with_layers(base8b(), 8);
  engine::SimOptions keep;
  keep.keep_timeline = true;
  const auto a = engine::simulate_step(none);
  const auto b = engine::simulate_step(off, keep);
  const double copy = memory::layer_activation_bytes(off, false).value() / off.hardware.host.link.value();
  // Per-layer times from the estimate's workload (its stage passes over the layers).
  const auto est = estimate::estimate_step(none);
  const double L = 32.0;
  const double f_layer = est.stage_fwd_s[0] / L, b_layer = est.stage_bwd_s[0] / L;
  ASSERT_GT(copy, b_layer);  // PCIe Gen5 at 44 GB/s: ~26 ms per 1.1 GB layer against 7 / 16 ms
  const double m = static_cast<double>(off.num_microbatches);
  const double expected = m * 8.0 * ((copy - f_layer) + (copy - b_layer));
  // Within 5%: the per-layer times above average the stage's embedding and head into its layers.
  EXPECT_NEAR(b.step.step_time_s - a.step.step_time_s, expected, 0.05 * expected);
  // The wait is booked as exposed offload time, not as bubble or data-parallel time.
  EXPECT_NEAR(b.step.breakdown.exposed_comm.at("offload"), b.step.step_time_s - a.step.step_time_s, 0.02 * expected);
  EXPECT_LT(b.step.breakdown.bubble, 1e-6);
  EXPECT_NEAR(b.step.breakdown.exposed_comm.at("dp"), a.step.breakdown.exposed_comm.at("dp"), 0.05);
  // One copy out and one back per offloaded layer and micro-batch, on the copy engines.
  size_t down = 0, up = 0;
  for (size_t i = 0; i < b.graph->size(); ++i) {
    const auto& t = b.graph->task(static_cast<engine::TaskId>(i));
    if (t.rank != 0) continue;
    down += t.stream == engine::Stream::kOffload;
    up += t.stream == engine::Stream::kReload;
  }
  EXPECT_EQ(down, static_cast<size_t>(8 * off.num_microbatches));
  EXPECT_EQ(up, down);
  // The timeline's peak follows the ledger's smaller activations.
  EXPECT_LT(b.memory_timeline_peak_bytes, a.memory_timeline_peak_bytes);
  // The estimate prices the same copies (within 5% of the simulation).
  const auto eb = estimate::estimate_step(off);
  EXPECT_NEAR(eb.step_time_s, b.step.step_time_s, 0.05 * b.step.step_time_s);
  EXPECT_GT(eb.breakdown.exposed_comm.at("offload"), 0.0);
}

// A host link fast enough hides every copy behind the next layer: the step is the step
// without offload (to the copies' own latency), and nothing is booked as offload time.
TEST(ActivationOffload, FastLinkHidesTheCopies) {
  Json j = base8b();
  j["hardware"] = Json::parse(R"({"base": "h100-sxm", "host": {"link": "10TB/s"}})");
  const RunConfig none = with_layers(j, 0), off = with_layers(j, 16);
  const auto a = engine::simulate_step(none), b = engine::simulate_step(off);
  EXPECT_NEAR(b.step.step_time_s, a.step.step_time_s, 1e-3 * a.step.step_time_s);
  EXPECT_LT(b.step.breakdown.exposed_comm.at("offload"), 1e-3);
  EXPECT_NEAR(estimate::estimate_step(off).step_time_s, estimate::estimate_step(none).step_time_s, 1e-9);
}

// The planner's --offload sizes the activations offloaded as it sizes full recomputation: the
// fewest layers that fit, which the ledger confirms (one fewer does not fit).
TEST(ActivationOffload, PlannerOffloadsTheFewestLayersThatFit) {
  Json run = base8b();
  run["training"]["global_batch_size"] = 64;
  run["parallel"] = Json::parse(R"({"tp": 1, "pp": 1, "cp": 1, "micro_batch_size": 2, "zero_stage": 1, "recompute": "none"})");
  plan::PlanOptions po;
  po.top_k = 1;
  po.threads = 1;
  const auto without = plan::plan(run, "<activation-offload-test>", "", po);
  EXPECT_EQ(without.fit, 0);  // mbs 2 without recomputation: 122 GiB per GPU
  po.offload = true;
  const auto with = plan::plan(run, "<activation-offload-test>", "", po);
  ASSERT_FALSE(with.ranked.empty());
  bool saw_activations = false;
  for (const auto& c : with.ranked) {
    const int64_t n = c.rc.parallel.activation_offload_layers;
    if (n == 0) continue;
    saw_activations = true;
    EXPECT_TRUE(memory::compute_ledger(c.rc).fits());
    RunConfig fewer = c.rc;
    fewer.parallel.activation_offload_layers = n - 1;
    EXPECT_FALSE(memory::compute_ledger(fewer).fits()) << n;
  }
  EXPECT_TRUE(saw_activations);
  // A count the run file gives stays as given.
  run["parallel"]["activation_offload_layers"] = 30;
  const auto fixed = plan::plan(run, "<activation-offload-test>", "", po);
  ASSERT_FALSE(fixed.ranked.empty());
  for (const auto& c : fixed.ranked) EXPECT_EQ(c.rc.parallel.activation_offload_layers, 30);
}

}  // namespace
}  // namespace stepcast
