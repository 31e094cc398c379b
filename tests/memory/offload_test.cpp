// CPU offload (parallel.offload): what moves from the GPU ledger to host memory, the host-memory
// verdict per node, the CPU optimizer step and the host copies in the estimate and the
// simulated timeline, the input checks, and the planner's --offload search.
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

using config::Offload;
using config::RunConfig;
using core::Json;

// Llama 3.1 70B under FSDP on one 8-GPU H100 node: 70.6 B parameters, 8.8 B per GPU.
Json fsdp70b() {
  return Json::parse(R"({"model": "llama3.1-70b", "hardware": "h100-sxm", "cluster": {"num_gpus": 8, "gpus_per_node": 8},
    "training": {"seq_len": 4096, "global_batch_size": 32, "precision": "bf16"},
    "parallel": {"dp": 8, "fsdp": true, "micro_batch_size": 1, "recompute": "full"}})");
}

RunConfig with_offload(Json j, const std::string& mode) {
  j["parallel"]["offload"] = mode;
  return config::parse_run(j, "<offload-test>", "");
}

std::string error_of(const Json& j) {
  try {
    (void)config::parse_run(j, "<offload-test>", "");
  } catch (const core::UserError& e) {
    return e.what();
  }
  return "";
}

TEST(Offload, OptimizerStateAndGradientShardMoveToTheHost) {
  const RunConfig none = with_offload(fsdp70b(), "none");
  const RunConfig opt = with_offload(fsdp70b(), "optimizer");
  const auto a = memory::compute_ledger(none).stages[0];
  const auto b = memory::compute_ledger(opt).stages[0];
  const double shard = a.params / 8.0;  // FSDP over dp 8
  // Host: the optimizer shard (fp32 master + Adam moments, 12 B) and an fp32 gradient shard.
  EXPECT_NEAR(b.host.value(), shard * (12.0 + 4.0), shard * 1e-9);
  EXPECT_NEAR(b.host.value(), a.optimizer.value() + 4.0 * shard, shard * 1e-9);
  EXPECT_EQ(b.optimizer.value(), 0.0);
  EXPECT_EQ(b.gradients.value(), 0.0);  // ZeRO-3: the reduced shard goes to the host
  EXPECT_EQ(b.weights.value(), a.weights.value());
  EXPECT_EQ(b.activations.value(), a.activations.value());
  EXPECT_EQ(b.buffers.value(), a.buffers.value());
  EXPECT_NEAR(b.total().value(), a.total().value() - a.optimizer.value() - a.gradients.value(), 1.0);

  const auto c = memory::compute_ledger(with_offload(fsdp70b(), "params")).stages[0];
  EXPECT_EQ(c.weights.value(), 0.0);
  EXPECT_NEAR(c.host.value(), b.host.value() + a.weights.value(), 1.0);
  EXPECT_EQ(none.parallel.offload, Offload::kNone);
  EXPECT_EQ(memory::compute_ledger(none).host_per_node.value(), 0.0);
}

TEST(Offload, ZeroOneKeepsTheGradientsOnTheGpu) {
  Json j = fsdp70b();
  j["parallel"].erase("fsdp");
  j["parallel"]["zero_stage"] = 1;
  j["parallel"]["tp"] = 8;
  j["parallel"]["dp"] = 1;
  const auto a = memory::compute_ledger(with_offload(j, "none")).stages[0];
  const auto b = memory::compute_ledger(with_offload(j, "optimizer")).stages[0];
  EXPECT_EQ(b.gradients.value(), a.gradients.value());
  EXPECT_EQ(b.optimizer.value(), 0.0);
  EXPECT_NEAR(b.host.value(), a.params * 16.0, a.params * 1e-9);  // dp 1: the shard is everything
}

TEST(Offload, HostMemoryPerNodeDecidesTheFit) {
  const RunConfig rc = with_offload(fsdp70b(), "optimizer");
  const auto l = memory::compute_ledger(rc);
  EXPECT_NEAR(l.host_per_node.value(), 8.0 * l.stages[0].host.value(), 1.0);
  EXPECT_TRUE(l.fits());
  // 70.6 B parameters x 16 B is 1.1 TB: a node with 512 GiB of host memory cannot hold it.
  Json small = fsdp70b();
  small["hardware"] = Json::parse(R"({"base": "h100-sxm", "host": {"memory": "512GiB"}})");
  const auto s = memory::compute_ledger(with_offload(small, "optimizer"));
  EXPECT_LE(s.peak(), s.capacity);
  EXPECT_FALSE(s.host_fits());
  EXPECT_FALSE(s.fits());
}

TEST(Offload, InputChecksNameTheField) {
  Json j = fsdp70b();
  j["parallel"].erase("fsdp");
  j["parallel"]["offload"] = "optimizer";  // zero 0: nothing sharded to offload
  EXPECT_NE(error_of(j).find("$.parallel.offload"), std::string::npos) << error_of(j);
  EXPECT_NE(error_of(j).find("zero_stage 1-3 or fsdp"), std::string::npos) << error_of(j);
  j["parallel"]["zero_stage"] = 2;
  j["parallel"]["offload"] = "params";  // parameters are gathered per layer only under ZeRO-3
  EXPECT_NE(error_of(j).find("zero_stage 3 or fsdp"), std::string::npos) << error_of(j);
  j["parallel"]["offload"] = "disk";
  EXPECT_NE(error_of(j).find("$.parallel.offload"), std::string::npos) << error_of(j);
  // A profile without a host side cannot cost offload.
  Json k = fsdp70b();
  k["hardware"] = "mi300x";
  k["parallel"]["offload"] = "optimizer";
  EXPECT_NE(error_of(k).find("hardware.host"), std::string::npos) << error_of(k);
  // The host block needs its three figures.
  k["hardware"] = Json::parse(R"({"base": "mi300x", "host": {"memory": "1TiB", "memory_bandwidth": "400GB/s"}})");
  EXPECT_NE(error_of(k).find("$.hardware.host.link"), std::string::npos) << error_of(k);
}

// The CPU step streams master, moments and an fp32 gradient and writes the 16-bit weights
// (30 B per parameter); with only the optimizer offloaded the weight copy up beside it adds 2 B
// of host traffic (the gradients went down during the backward). The node's 8 GPUs share its
// host memory.
TEST(Offload, CpuOptimizerStepIsBoundByHostMemory) {
  const RunConfig opt = with_offload(fsdp70b(), "optimizer");
  const auto st = memory::compute_ledger(opt).stages[0];
  const double params = st.params, shard = params / 8.0;
  const double host_bw = 614.4e9 * 0.8, link = 44e9;
  const double cpu = params * (24.0 + 4.0 + 2.0 + 2.0) / host_bw;
  const double want = std::max(cpu, shard * 2.0 / link);
  EXPECT_NEAR(estimate::optimizer_time_s(opt, st), want, want * 1e-9);

  const RunConfig par = with_offload(fsdp70b(), "params");
  const double cpu_params = params * 30.0 / host_bw;
  EXPECT_NEAR(estimate::optimizer_time_s(par, memory::compute_ledger(par).stages[0]), cpu_params, cpu_params * 1e-9);

  // A measured CPU rate below what memory allows binds instead.
  Json slow = fsdp70b();
  slow["hardware"] = Json::parse(R"({"base": "h100-sxm", "host": {"optimizer_rate": 1e9}})");
  const RunConfig s = with_offload(slow, "params");
  EXPECT_NEAR(estimate::optimizer_time_s(s, memory::compute_ledger(s).stages[0]), params / 1e9, params * 1e-18);
}

// Offloaded parameters: every gather copies its shard up first and every reduce-scatter copies
// its gradient shard down. With an unlimited link the copies vanish and the step differs from
// the optimizer-only offload by the CPU steps' difference alone; with the profile's link the
// copies are tasks on the timeline, one per gather and per reduce-scatter.
TEST(Offload, ParameterCopiesRideTheGatherStreams) {
  Json fast = fsdp70b();
  fast["hardware"] = Json::parse(R"({"base": "h100-sxm", "host": {"link": "1000TB/s"}})");
  const RunConfig opt = with_offload(fast, "optimizer"), par = with_offload(fast, "params");
  const auto so = engine::simulate_step(opt), sp = engine::simulate_step(par);
  const double d_opt = sp.step.breakdown.optimizer - so.step.breakdown.optimizer;
  EXPECT_LT(d_opt, 0.0);  // 30 B against 34 B of host traffic per parameter
  // What the copies still cost at 1000 TB/s: a layer's 0.11 B-parameter shard in 2 bytes takes
  // 0.22 us, and the step copies 80 layers x 4 micro-batches x 3 times (gather, regather for
  // backward, reduce-scatter): 0.21 ms if none hid.
  const double copies = 80.0 * 4.0 * 3.0 * (sp.step.memory.stages[0].params / 80.0 / 8.0) * 2.0 / 1e15;
  EXPECT_NEAR(sp.step.step_time_s - so.step.step_time_s, d_opt, copies);
  const auto eo = estimate::estimate_step(opt), ep = estimate::estimate_step(par);
  EXPECT_NEAR(ep.step_time_s - eo.step_time_s, d_opt, copies);

  const RunConfig real = with_offload(fsdp70b(), "params");
  engine::SimOptions keep;
  keep.keep_timeline = true;
  const auto r = engine::simulate_step(real, keep);
  EXPECT_GT(r.step.step_time_s, sp.step.step_time_s);
  size_t up = 0, down = 0, gathers = 0, reduces = 0;
  for (size_t i = 0; i < r.graph->size(); ++i) {
    const std::string& n = r.graph->name(r.graph->task(static_cast<engine::TaskId>(i)).name);
    up += n == "copy params up";
    down += n == "copy grads down";
    gathers += n == "all-gather params";
    reduces += n == "reduce-scatter grads";
  }
  EXPECT_GT(gathers, 0u);
  EXPECT_EQ(up, gathers);
  EXPECT_EQ(down, reduces);
  EXPECT_GT(estimate::estimate_step(real).step_time_s, ep.step_time_s);
}

// With the optimizer alone offloaded, each gradient reduction is followed by its shard's copy
// down to the host (ZeRO-3 per layer, ZeRO-2 per bucket), during the backward; nothing comes up
// before a gather.
TEST(Offload, GradientShardsGoDownAfterEachReduction) {
  engine::SimOptions keep;
  keep.keep_timeline = true;
  auto count = [](const engine::SimResult& r, const std::string& name) {
    size_t n = 0;
    for (size_t i = 0; i < r.graph->size(); ++i) n += r.graph->name(r.graph->task(static_cast<engine::TaskId>(i)).name) == name;
    return n;
  };
  const auto z3 = engine::simulate_step(with_offload(fsdp70b(), "optimizer"), keep);
  EXPECT_EQ(count(z3, "copy params up"), 0u);
  EXPECT_GT(count(z3, "copy grads down"), 0u);
  EXPECT_EQ(count(z3, "copy grads down"), count(z3, "reduce-scatter grads"));
  Json j = fsdp70b();
  j["parallel"].erase("fsdp");
  j["parallel"]["zero_stage"] = 2;
  j["parallel"]["tp"] = 4;
  j["parallel"]["pp"] = 2;
  j["parallel"]["dp"] = 2;
  j["cluster"]["num_gpus"] = 16;
  const auto z2 = engine::simulate_step(with_offload(j, "optimizer"), keep);
  EXPECT_GT(count(z2, "copy grads down"), 0u);
  EXPECT_EQ(count(z2, "copy grads down"), count(z2, "reduce-scatter grads"));
  // One data-parallel rank has nothing to reduce: under ZeRO-3 the copies still follow each
  // layer's backward; under ZeRO-1/2 the whole gradient goes down before the CPU step.
  Json one = fsdp70b();
  one["cluster"]["num_gpus"] = 1;
  one["parallel"]["dp"] = 1;
  one["model"] = "llama3.1-8b";
  const auto z3one = engine::simulate_step(with_offload(one, "optimizer"), keep);
  EXPECT_GT(count(z3one, "copy grads down"), 0u);
  one["parallel"].erase("fsdp");
  one["parallel"]["zero_stage"] = 1;
  const RunConfig z1 = with_offload(one, "optimizer");
  const auto st = memory::compute_ledger(z1).stages[0];
  const double cpu = st.params * 32.0 / (614.4e9 * 0.8);
  EXPECT_NEAR(estimate::optimizer_time_s(z1, st), st.params * 2.0 / 44e9 + cpu, cpu * 1e-9);
}

// One GPU (FSDP over a group of one, as single-GPU fine-tuning runs it): nothing is gathered,
// but offloaded parameters still come up layer by layer, in the estimate and the timeline.
TEST(Offload, OneGpuStillCopiesItsParametersUp) {
  auto one = [](const std::string& link) {
    Json j = Json::parse(R"({"model": "llama3.1-8b", "cluster": {"num_gpus": 1, "gpus_per_node": 8},
      "training": {"seq_len": 4096, "global_batch_size": 4, "precision": "bf16"},
      "parallel": {"fsdp": true, "micro_batch_size": 1, "recompute": "full", "offload": "params"}})");
    j["hardware"] = Json::parse(R"({"base": "h100-sxm", "host": {}})");
    j["hardware"]["host"]["link"] = link;
    return config::parse_run(j, "<offload-test>", "");
  };
  engine::SimOptions keep;
  keep.keep_timeline = true;
  const auto slow = engine::simulate_step(one("44GB/s"), keep), fast = engine::simulate_step(one("1000TB/s"));
  size_t up = 0;
  for (size_t i = 0; i < slow.graph->size(); ++i) up += slow.graph->name(slow.graph->task(static_cast<engine::TaskId>(i)).name) == "copy params up";
  EXPECT_GT(up, 0u);
  EXPECT_GT(slow.step.step_time_s, fast.step.step_time_s);
  EXPECT_GT(estimate::estimate_step(one("44GB/s")).step_time_s, estimate::estimate_step(one("1000TB/s")).step_time_s);
}

TEST(Offload, LedgerHintAndPlannerSearch) {
  Json j = fsdp70b();
  const RunConfig rc = config::parse_run(j, "<offload-test>", "");
  EXPECT_FALSE(memory::compute_ledger(rc).fits());
  EXPECT_NE(memory::fit_hint(rc).find("parallel.offload \"optimizer\""), std::string::npos) << memory::fit_hint(rc);

  Json run = fsdp70b();
  run.erase("parallel");
  plan::PlanOptions po;
  po.top_k = 1;
  po.threads = 1;
  const auto without = plan::plan(run, "<offload-test>", "", po);
  EXPECT_EQ(without.fit, 0);
  EXPECT_TRUE(without.offload_untried);
  po.offload = true;
  const auto with = plan::plan(run, "<offload-test>", "", po);
  ASSERT_FALSE(with.ranked.empty());
  EXPECT_NE(with.ranked[0].rc.parallel.offload, Offload::kNone);
  // A run file's offload is kept: every ranked layout offloads the optimizer (and shards).
  run["parallel"] = Json::parse(R"({"offload": "optimizer"})");
  po.offload = false;
  const auto fixed = plan::plan(run, "<offload-test>", "", po);
  ASSERT_FALSE(fixed.ranked.empty());
  for (const auto& c : fixed.ranked) {
    EXPECT_EQ(c.rc.parallel.offload, Offload::kOptimizer);
    EXPECT_GE(c.rc.parallel.effective_zero(), 1);
  }
  // No host side: --offload is refused with the reason.
  run.erase("parallel");
  run["hardware"] = "mi300x";
  po.offload = true;
  EXPECT_THROW(plan::plan(run, "<offload-test>", "", po), core::UserError);
}

}  // namespace
}  // namespace stepcast
