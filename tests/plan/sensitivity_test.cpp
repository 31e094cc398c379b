// stepcast sensitivity: each resource made better changes only its own fields; a run without
// communication is bound by the GPU alone, a data-parallel run across nodes with little compute
// by the network; elasticities of serial work add up to about one.
#include "sim/plan/sensitivity.hpp"

#include <gtest/gtest.h>

#include <string>

#include "sim/config/run_config.hpp"
#include "sim/core/error.hpp"

namespace stepcast::plan {
namespace {

using core::Json;

config::RunConfig run(int64_t gpus, const Json& training, const Json& parallel) {
  const Json j = {{"model", "llama3.1-8b"}, {"hardware", "h100-sxm"}, {"cluster", {{"num_gpus", gpus}}}, {"training", training}, {"parallel", parallel}};
  return config::parse_run(j, "<sensitivity-test>", "");
}

const SensitivityRow* row(const Sensitivity& s, const std::string& r) {
  for (const auto& x : s.rows) {
    if (x.resource == r) return &x;
  }
  return nullptr;
}

TEST(Sensitivity, EachResourceScalesOnlyItsOwnFields) {
  const auto rc = run(16, {{"seq_len", 4096}, {"global_batch_size", 64}}, {{"tp", 2}});
  const auto c = with_better(rc, "compute", 1.25);
  EXPECT_DOUBLE_EQ(c.hardware.peak_for(hw::Dtype::kBf16).value(), 1.25 * rc.hardware.peak_for(hw::Dtype::kBf16).value());
  EXPECT_DOUBLE_EQ(c.hardware.peak_for(hw::Dtype::kFp8).value(), 1.25 * rc.hardware.peak_for(hw::Dtype::kFp8).value());
  EXPECT_DOUBLE_EQ(c.hardware.hbm_bandwidth.value(), rc.hardware.hbm_bandwidth.value());
  const auto f = with_better(rc, "node_fabric", 1.25);
  EXPECT_DOUBLE_EQ(f.hardware.fabric.back().busbw.value(), 1.25 * rc.hardware.fabric.back().busbw.value());
  EXPECT_DOUBLE_EQ(f.hardware.network.nic_bandwidth.value(), rc.hardware.network.nic_bandwidth.value());
  const auto n = with_better(rc, "network", 1.25);
  EXPECT_DOUBLE_EQ(n.hardware.network.nic_bandwidth.value(), 1.25 * rc.hardware.network.nic_bandwidth.value());
  const auto l = with_better(rc, "latency", 1.25);
  EXPECT_DOUBLE_EQ(l.hardware.network.latency.value(), rc.hardware.network.latency.value() / 1.25);
  EXPECT_DOUBLE_EQ(l.hardware.fabric.front().latency.value(), rc.hardware.fabric.front().latency.value() / 1.25);
  // A measured size curve keeps its plateau and its shortfall shrinks by the factor: at 0.5 of
  // the plateau (overhead 1/0.5 - 1 = 1) the overhead becomes 1/1.25 = 0.8, the fraction 1/1.8.
  ASSERT_FALSE(rc.hardware.fabric.front().size_curve.empty());
  const auto& before = rc.hardware.fabric.front().size_curve;
  const auto& after = l.hardware.fabric.front().size_curve;
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_DOUBLE_EQ(after[i].first, before[i].first);
    EXPECT_NEAR(1.0 / after[i].second - 1.0, (1.0 / before[i].second - 1.0) / 1.25, 1e-12);
  }
  const auto k = with_better(rc, "kernel_overhead", 1.25);
  EXPECT_DOUBLE_EQ(k.hardware.efficiency.kernel_overhead.value(), rc.hardware.efficiency.kernel_overhead.value() / 1.25);
  EXPECT_THROW((void)with_better(rc, "moon_phase", 1.25), core::InternalError);
}

// One GPU: no communication resource is used, and compute, HBM and launch overhead share the
// serial step, so their elasticities add up to about one (the step is a sum of terms each
// scaling with one resource; 0.9-1.05 allows the GEMM shape model's kernel-overhead floor).
TEST(Sensitivity, OneGpuIsBoundByTheGpuAlone) {
  const auto rc = run(1, {{"seq_len", 2048}, {"global_batch_size", 4}}, {{"recompute", "full"}});
  const Sensitivity s = sensitivity(rc, "one-gpu", 1.1, true);
  EXPECT_EQ(row(s, "network"), nullptr);
  EXPECT_EQ(row(s, "node_fabric"), nullptr);
  EXPECT_EQ(s.skipped.size(), 4u);  // network, node fabric, host expert work, host (no offload)
  ASSERT_NE(row(s, "compute"), nullptr);
  EXPECT_GT(row(s, "compute")->elasticity, 0.6);
  double sum = 0;
  for (const auto& r : s.rows) {
    EXPECT_GE(r.elasticity, -1e-9) << r.resource;
    sum += r.elasticity;
  }
  EXPECT_GT(sum, 0.9);
  EXPECT_LT(sum, 1.05);
  EXPECT_NE(sensitivity_text(s).find("compute bounds the step most"), std::string::npos) << sensitivity_text(s);
}

// 32 GPUs on 4 nodes reducing 8B parameters' gradients every step of one 1,024-token sequence
// each: the exchange across nodes outweighs the compute, and the network shows it.
TEST(Sensitivity, DataParallelAcrossNodesIsBoundByTheNetwork) {
  const auto rc = run(32, {{"seq_len", 1024}, {"global_batch_size", 32}}, {{"dp", 32}, {"zero_stage", 1}});
  const Sensitivity s = sensitivity(rc, "dp32", 1.1, true);
  ASSERT_TRUE(s.base.fits);
  ASSERT_NE(row(s, "network"), nullptr);
  EXPECT_GT(row(s, "network")->elasticity, 0.3);
  EXPECT_GT(row(s, "network")->elasticity, row(s, "compute")->elasticity);
  const Json j = sensitivity_json(s, "test");
  EXPECT_EQ(j["resources"].size(), s.rows.size());
  EXPECT_NE(j["summary"].get<std::string>().find("network bounds the step most"), std::string::npos) << j["summary"];
  // The estimate tells the same story.
  const Sensitivity e = sensitivity(rc, "dp32", 1.1, false);
  EXPECT_FALSE(e.base.c.simulated);
  EXPECT_GT(row(e, "network")->elasticity, row(e, "compute")->elasticity);
}

TEST(Sensitivity, FactorMustMakeResourcesBetter) {
  const auto rc = run(8, {{"seq_len", 4096}, {"global_batch_size", 64}}, {{"tp", 2}});
  EXPECT_THROW((void)sensitivity(rc, "x", 1.0, false), core::UserError);
  EXPECT_THROW((void)sensitivity(rc, "x", 0.5, false), core::UserError);
}

}  // namespace
}  // namespace stepcast::plan
