// Goodput under failures: Daly's expected wall time against a seeded simulation of the same
// process, his optimum interval against the exact minimum, the small-overhead limit, whole-step
// intervals, Llama 3's published effective training time, and bad inputs named.
#include "sim/capacity/goodput.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "sim/core/error.hpp"

namespace stepcast::capacity {
namespace {

// The process Daly's formula describes: segments of tau seconds of work, each followed by a
// checkpoint of delta; a failure (exponential, mean M) loses the segment in progress, then a
// restart of R, which a failure can interrupt too, precedes the segment's retry.
double simulated_wall(int segments, double tau, double delta, double restart, double mtbf, std::mt19937_64& rng) {
  std::exponential_distribution<double> next_failure(1.0 / mtbf);
  double wall = 0;
  for (int i = 0; i < segments; ++i) {
    for (;;) {
      const double x = next_failure(rng);
      if (x >= tau + delta) {
        wall += tau + delta;
        break;
      }
      wall += x;
      for (;;) {  // restart until one completes
        const double y = next_failure(rng);
        if (y >= restart) {
          wall += restart;
          break;
        }
        wall += y;
      }
    }
  }
  return wall;
}

// 20,000 segments with about one failure per segment: the simulated mean has a relative
// standard error near 1%, so 4% is four standard errors.
TEST(Goodput, DalyWallTimeMatchesASimulationOfFailures) {
  std::mt19937_64 rng(12345);
  const double tau = 3600, delta = 300, restart = 900, mtbf = 4000;
  const int segments = 20000;
  const double expected = daly_wall_time(segments * tau, tau, delta, restart, mtbf);
  const double simulated = simulated_wall(segments, tau, delta, restart, mtbf, rng);
  EXPECT_NEAR(simulated / expected, 1.0, 0.04) << simulated << " against " << expected;
}

// The optimum interval minimises the exact wall time (a scan at 1% steps finds nothing more
// than 0.05% shorter: the higher-order estimate is not the exact argmin), and for small
// checkpoint costs it is Young's sqrt(2 delta M).
TEST(Goodput, OptimumIntervalMinimisesTheWallTime) {
  for (const double delta : {1.0, 60.0, 600.0, 3000.0}) {
    const double M = 20000, R = 600, solve = 1e7;
    const double tau = daly_optimal_interval(delta, M);
    const double at_opt = daly_wall_time(solve, tau, delta, R, M);
    for (double f = 0.2; f < 5.0; f *= 1.01) EXPECT_GE(daly_wall_time(solve, tau * f, delta, R, M), at_opt * (1 - 5e-4)) << delta << " " << f;
  }
  EXPECT_NEAR(daly_optimal_interval(1.0, 1e6), std::sqrt(2.0 * 1.0 * 1e6), 0.01 * std::sqrt(2e6));
  // A checkpoint that costs more than two MTBFs: checkpoint once per MTBF.
  EXPECT_DOUBLE_EQ(daly_optimal_interval(5000, 2000), 2000);
}

// With overheads small against the MTBF the waste is first order: delta / tau for the
// checkpoints, (tau + delta) / 2M for the work redone after a failure and R / M for the restart.
TEST(Goodput, FirstOrderWasteForSmallOverheads) {
  const double tau = 600, delta = 5, R = 300, M = 1e6, solve = 1e8;
  const double ratio = daly_wall_time(solve, tau, delta, R, M) / solve;
  const double first_order = 1 + delta / tau + (tau + delta) / (2 * M) + R / M;
  EXPECT_NEAR(ratio, first_order, 1e-5);
}

TEST(Goodput, IntervalIsWholeStepsNearTheOptimum) {
  ReliabilityInput in;
  in.storage_bytes_per_s = 1e11;
  const double step = 7.3, steps = 100000, state = 1e13;  // 100 s to save
  const Goodput g = expected_goodput(in, step, steps, 4096, state);
  EXPECT_TRUE(g.optimal_interval);
  EXPECT_DOUBLE_EQ(g.save_s, 100.0);
  EXPECT_DOUBLE_EQ(g.load_s, 100.0);
  EXPECT_DOUBLE_EQ(g.restart_s, kDefaultRestartS + 100.0);
  EXPECT_DOUBLE_EQ(g.cluster_mtbf_s, kLlama3GpuMtbfHours * 3600 / 4096);
  const double k = daly_optimal_interval(g.save_s, g.cluster_mtbf_s) / step;
  EXPECT_LE(std::abs(static_cast<double>(g.interval_steps) - k), 1.0);
  EXPECT_DOUBLE_EQ(g.interval_s, step * static_cast<double>(g.interval_steps));
  EXPECT_NEAR(g.goodput, g.solve_s / g.wall_s, 1e-12);
  EXPECT_NEAR(g.interruptions, g.wall_s / g.cluster_mtbf_s, 1e-9);
  // No whole-step interval does better than the chosen one.
  for (int64_t d : {-2, -1, 1, 2}) {
    ReliabilityInput fixed = in;
    fixed.checkpoint_every_steps = g.interval_steps + d;
    const Goodput o = expected_goodput(fixed, step, steps, 4096, state);
    EXPECT_FALSE(o.optimal_interval);
    EXPECT_EQ(o.interval_steps, g.interval_steps + d);
    EXPECT_GE(o.wall_s, g.wall_s);
  }
  // More GPUs fail more often: lower goodput for the same step.
  EXPECT_LT(expected_goodput(in, step, steps, 16384, state).goodput, g.goodput);
  // An asynchronous save that stalls for a second checkpoints more often and wastes less.
  ReliabilityInput async = in;
  async.checkpoint_save_s = 1.0;
  const Goodput a = expected_goodput(async, step, steps, 4096, state);
  EXPECT_LT(a.interval_steps, g.interval_steps);
  EXPECT_GT(a.goodput, g.goodput);
  EXPECT_DOUBLE_EQ(a.load_s, 100.0);  // reading back still takes the storage's time
}

// The default storage is provisioned per GPU: the cluster's bandwidth grows with its size.
TEST(Goodput, DefaultStorageScalesWithTheCluster) {
  const ReliabilityInput in;
  EXPECT_DOUBLE_EQ(expected_goodput(in, 10, 1000, 16384, 1e12).storage_bytes_per_s, 2e12);
  EXPECT_DOUBLE_EQ(expected_goodput(in, 10, 1000, 8, 1e12).storage_bytes_per_s, 2e12 * 8 / 16384);
}

// Llama 3 405B pre-training (Dubey et al. 2024, §3.3.4): over 90% effective training time on
// 16,384 H100s with the interruption rate the default MTBF comes from. The defaults give the
// same: 405B parameters of bf16 weights, fp32 master copy and Adam moments (14 bytes each),
// written at the default storage share, restarted after the default 10 minutes, at a step of
// 16M tokens at 41% MFU (the paper's Table 4): 6 x 405e9 x 2^24 / (16,384 x 989.4e12 x 0.41)
// = 6.15 s.
TEST(Goodput, Llama3EffectiveTrainingTime) {
  const ReliabilityInput in;
  const Goodput g = expected_goodput(in, 6.15, 1e6, 16384, 405e9 * 14);
  EXPECT_GT(g.goodput, 0.90);
  EXPECT_LT(g.goodput, 1.0);
  EXPECT_NEAR(g.cluster_mtbf_s / 3600.0, 54.0 * 24 / 419, 1e-9);
}

TEST(Goodput, NeverFinishesWhenFailuresOutpaceEveryInterval) {
  ReliabilityInput in;
  in.gpu_mtbf_hours = 1;          // one failure per 0.2 s on 16,384 GPUs
  in.restart_overhead_s = 3600;   // an hour to restart
  const Goodput g = expected_goodput(in, 10, 1000, 16384, 1e12);
  EXPECT_EQ(g.goodput, 0.0);
  EXPECT_TRUE(std::isinf(g.wall_s));
}

TEST(Goodput, BadInputsNameTheOption) {
  auto message = [](const ReliabilityInput& in) {
    try {
      (void)expected_goodput(in, 10, 1000, 64, 1e12);
    } catch (const core::UserError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  ReliabilityInput a;
  a.gpu_mtbf_hours = 0;
  EXPECT_NE(message(a).find("--mtbf-gpu-hours"), std::string::npos);
  ReliabilityInput b;
  b.storage_bytes_per_s = -1;
  EXPECT_NE(message(b).find("--storage-bw"), std::string::npos);
  ReliabilityInput c;
  c.restart_overhead_s = std::nan("");
  EXPECT_NE(message(c).find("--restart"), std::string::npos);
  ReliabilityInput d;
  d.checkpoint_every_steps = -3;
  EXPECT_NE(message(d).find("--checkpoint-every"), std::string::npos);
}

}  // namespace
}  // namespace stepcast::capacity
