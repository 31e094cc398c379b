#include "sim/plan/compare.hpp"

#include <gtest/gtest.h>

#include <string>

#include "sim/config/run_config.hpp"

namespace stepcast::plan {
namespace {

using core::Json;

config::RunConfig run(const Json& parallel, int64_t gpus = 8) {
  const Json j = {{"model", "llama3.1-8b"},
                  {"hardware", "h100-sxm"},
                  {"cluster", {{"num_gpus", gpus}}},
                  {"training", {{"seq_len", 4096}, {"global_batch_size", 64}}},
                  {"parallel", parallel}};
  return config::parse_run(j, "<compare-test>", "");
}

// The same layout with and without full recomputation: the simulated step of the recomputing
// side is longer by about its recomputation, and the verdict names A faster, avoiding it.
TEST(Compare, RecomputationShowsInTheDeltaAndTheVerdict) {
  const Side a = evaluate_side(run({{"tp", 2}}), "plain", true);
  const Side b = evaluate_side(run({{"tp", 2}, {"recompute", "full"}}), "recomputing", true);
  ASSERT_TRUE(a.c.simulated);
  EXPECT_GT(b.c.step_s(), a.c.step_s());
  const Json j = compare_json(a, b, "test");
  EXPECT_GT(j["delta"]["step_time_ratio"].get<double>(), 1.0);
  EXPECT_GT(j["delta"]["time_s"]["recomputation"].get<double>(), 0.0);
  // Recomputation is most of the difference (within 20%: the rest is the memory-bound
  // work and the exposed communication that move with it).
  EXPECT_NEAR(j["delta"]["time_s"]["recomputation"].get<double>() / j["delta"]["step_time_s"].get<double>(), 1.0, 0.2);
  const std::string v = j["verdict"];
  EXPECT_EQ(v.rfind("A is ", 0), 0u) << v;
  EXPECT_NE(v.find("A avoids"), std::string::npos) << v;
  EXPECT_NE(v.find("recomputation"), std::string::npos) << v;
  EXPECT_EQ(j["differs_in"], "recompute none vs full") << j["differs_in"];
  const std::string table = compare_table(a, b);
  EXPECT_NE(table.find("recomputation (s)"), std::string::npos) << table;
  EXPECT_NE(table.find("differs in: recompute none vs full"), std::string::npos) << table;
}

// What differs beyond the layout is named; the same run is "nothing"; a side that does not
// fit is flagged.
TEST(Compare, RunDifferencesAndFit) {
  EXPECT_EQ(run_diff(run({{"tp", 2}}), run({{"tp", 2}})), "nothing in model, hardware, cluster, sequence, batch, precision, fine-tuning, attention kernel or layout");
  // The attention kernel is named.
  config::RunConfig triton = run({{"tp", 2}});
  triton.training.attention = config::AttentionImpl::kTriton;
  EXPECT_EQ(run_diff(run({{"tp", 2}}), triton), "attention flash vs triton");
  EXPECT_EQ(run_diff(run({{"tp", 2}}), run({{"tp", 2}}, 16)), "GPUs 8 vs 16, dp 4 vs 8");
  // Fine-tuning settings are named.
  config::RunConfig lora = run({{"tp", 2}});
  lora.training.lora.rank = 16;
  lora.training.lora.targets = config::kLoraQkv | config::kLoraFc2;
  lora.training.lora.nf4 = true;
  lora.training.packed_document_tokens = 512;
  EXPECT_EQ(run_diff(run({{"tp", 2}}), lora), "LoRA none vs rank 16 on qkv, fc2 (nf4 base), packing none vs 512-token documents");
  const Side big = evaluate_side(run({{"tp", 1}, {"micro_batch_size", 8}}), "big", false);
  EXPECT_FALSE(big.c.simulated);
  EXPECT_FALSE(big.fits);
  const Side small = evaluate_side(run({{"tp", 2}}), "small", false);
  const std::string table = compare_table(small, big);
  EXPECT_NE(table.find("compare (estimated)"), std::string::npos) << table;
  EXPECT_NE(table.find("B does not fit"), std::string::npos) << table;
}

}  // namespace
}  // namespace stepcast::plan
