// Capacity arithmetic: the three worked cases of data/capacity-cases.json (copied to
// tests/data/capacity-cases.json) reproduce: FLOPs = 6*N*D, GPU-hours = FLOPs / (peak*MFU) / 3600,
// GPUs rounded up to whole 8-GPU nodes, 12 bytes/param static memory, smallest TP in {1,2,4,8}
// whose static memory per GPU fits 55% of an 80 GB HBM.
#include "sim/capacity/capacity.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "sim/core/json_reader.hpp"

namespace stepcast::capacity {
namespace {

using core::Json;

const Json& cases() {
  static const Json j = core::load_json_file(std::string(STEPCAST_TEST_DATA_DIR) + "/capacity-cases.json");
  return j;
}

CapacityInput input_for(const Json& c) {
  CapacityInput in;
  in.params = c.at("params").get<double>();
  in.tokens = c.at("tokens").get<double>();
  in.global_batch_seqs = c.at("global_batch_seqs").get<double>();
  in.seq_len = c.at("seq_len").get<double>();
  in.peak_flops = c.at("peak_tflops").get<double>() * 1e12;
  in.mfu = c.at("mfu").get<double>();
  in.target_days = c.at("target_days").get<double>();
  in.usd_per_gpu_hour = c.at("usd_per_gpu_hour").get<double>();
  in.gpus_per_node = 8;
  in.hbm_bytes = 80e9;
  in.bytes_per_param = 12;
  in.hbm_fraction = 0.55;
  return in;
}

TEST(Capacity, FileHasThreeCases) { EXPECT_EQ(cases().at("cases").size(), 3u); }

class CapacityCase : public ::testing::TestWithParam<int> {};

// Each expected figure is printed rounded; the tolerance is half a unit of its last printed
// digit (steps and GPU-hours to 0.1, wall days to 0.01, cost to whole dollars, i.e. within
// 1 USD). FLOPs are printed to 3 significant digits, so they are checked to 1e-3 relative.
// GPU count, TP, DP and static GB are integers and must match exactly.
TEST_P(CapacityCase, ReproducesWorkedCase) {
  const Json& c = cases().at("cases").at(static_cast<size_t>(GetParam()));
  const Json& e = c.at("expect");
  SCOPED_TRACE(c.at("name").get<std::string>());
  const CapacityResult r = size_cluster(input_for(c));

  // steps = D / (global batch sequences * seq_len)
  EXPECT_NEAR(r.steps, e.at("steps").get<double>(), 0.05);
  // FLOPs = 6 * N * D
  const double flops = e.at("flops").get<double>();
  EXPECT_NEAR(r.flops, flops, flops * 1e-3);
  EXPECT_DOUBLE_EQ(r.flops, 6.0 * c.at("params").get<double>() * c.at("tokens").get<double>());
  // GPU-hours = FLOPs / (peak * MFU) / 3600
  EXPECT_NEAR(r.gpu_hours, e.at("gpu_hours").get<double>(), 0.05);
  // GPUs = GPU-hours / (days * 24), rounded up to whole 8-GPU nodes
  EXPECT_EQ(r.gpus, e.at("gpus").get<int64_t>());
  EXPECT_EQ(r.gpus % 8, 0);
  // wall days = GPU-hours / GPUs / 24 (at most the target, since GPUs were rounded up)
  EXPECT_NEAR(r.wall_days, e.at("wall_days").get<double>(), 0.005);
  EXPECT_LE(r.wall_days, c.at("target_days").get<double>());
  // cost = GPU-hours * price, published to the whole dollar
  EXPECT_NEAR(r.cost_usd, e.at("cost_usd").get<double>(), 0.5);
  EXPECT_LT(std::abs(r.cost_usd - e.at("cost_usd").get<double>()), 1.0);
  // static memory = 12 bytes/param * N
  EXPECT_DOUBLE_EQ(r.static_bytes / 1e9, e.at("static_gb").get<double>());
  // smallest TP whose static memory per GPU fits 55% of 80 GB; DP = GPUs / TP
  EXPECT_EQ(r.tp, e.at("tp").get<int64_t>());
  EXPECT_EQ(r.dp, e.at("dp").get<int64_t>());
  EXPECT_EQ(r.tp * r.dp, r.gpus);
  EXPECT_TRUE(r.tp_fits);
}

std::string case_name(const ::testing::TestParamInfo<int>& info) {
  static const char* const kNames[] = {"Case7B_A100", "Case30B_A100", "Case30B_H100"};
  return kNames[info.param];
}

INSTANTIATE_TEST_SUITE_P(DataFile, CapacityCase, ::testing::Values(0, 1, 2), case_name);

// Chinchilla: D = 20 tokens per parameter; FLOPs = 6*N*D = 120*N^2.
TEST(Capacity, TrainingFlopsIsSixND) {
  EXPECT_DOUBLE_EQ(training_flops(7e9, 20 * 7e9), 120.0 * 7e9 * 7e9);
}

// When even TP=8 cannot hold the static state, the result says so instead of pretending.
TEST(Capacity, ReportsWhenNoTpFits) {
  CapacityInput in;
  in.params = 1e12;
  in.tokens = 1e9;
  in.global_batch_seqs = 1;
  in.seq_len = 4096;
  in.peak_flops = 989e12;
  in.mfu = 0.4;
  in.target_days = 1e6;  // one node
  in.usd_per_gpu_hour = 1;
  const CapacityResult r = size_cluster(in);
  EXPECT_EQ(r.gpus, 8);
  EXPECT_FALSE(r.tp_fits);
}

}  // namespace
}  // namespace stepcast::capacity
