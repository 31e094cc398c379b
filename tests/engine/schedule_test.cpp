// Pipeline schedule orders: every pass appears exactly once, forwards precede their backwards
// (and weight-gradient passes follow them), and warm-up lengths are Megatron's.
#include "sim/engine/schedule.hpp"

#include <gtest/gtest.h>

#include <map>
#include <tuple>

namespace stepcast::engine {
namespace {

using config::Schedule;

void check_valid(Schedule sched, int32_t p, int32_t s, int32_t m, int32_t v) {
  const auto order = stage_order(sched, p, s, m, v);
  std::map<std::tuple<int, int, int>, size_t> pos;  // (phase, mb, chunk) -> index
  for (size_t i = 0; i < order.size(); ++i) {
    const auto key = std::make_tuple(static_cast<int>(order[i].phase), order[i].mb, order[i].chunk);
    ASSERT_EQ(pos.count(key), 0u) << "duplicate pass";
    pos[key] = i;
  }
  const bool zb = sched == Schedule::kZbH1;
  ASSERT_EQ(order.size(), static_cast<size_t>(m * v * (zb ? 3 : 2)));
  for (int32_t mb = 0; mb < m; ++mb) {
    for (int32_t c = 0; c < v; ++c) {
      const auto f = pos.at({0, mb, c}), b = pos.at({1, mb, c});
      EXPECT_LT(f, b) << "mb " << mb << " chunk " << c;
      if (zb) {
        EXPECT_LT(b, pos.at({2, mb, c}));
      }
    }
  }
}

TEST(Schedule, EveryPassOnceAndInOrder) {
  for (Schedule sched : {Schedule::kGpipe, Schedule::kOneFOneB, Schedule::kZbH1}) {
    for (auto [p, m] : {std::pair<int32_t, int32_t>{1, 1}, {2, 3}, {4, 8}, {8, 4}, {8, 32}}) {
      for (int32_t s = 0; s < p; ++s) check_valid(sched, p, s, m, 1);
    }
  }
  for (auto [p, m, v] : {std::tuple<int32_t, int32_t, int32_t>{2, 4, 2}, {4, 8, 2}, {4, 8, 3}, {8, 16, 4}}) {
    for (int32_t s = 0; s < p; ++s) check_valid(Schedule::kInterleaved, p, s, m, v);
  }
}

// 1F1B: stage s runs min(p - s - 1, m) warm-up forwards, then alternates; interleaved runs
// (p - s - 1) * 2 + (v - 1) * p.
TEST(Schedule, WarmupLengths) {
  auto leading_forwards = [](const std::vector<Action>& o) {
    size_t n = 0;
    while (n < o.size() && o[n].phase == Phase::kF) ++n;
    return n;
  };
  EXPECT_EQ(leading_forwards(stage_order(Schedule::kOneFOneB, 4, 0, 8, 1)), 4u);  // 3 warm-up + 1 steady
  EXPECT_EQ(leading_forwards(stage_order(Schedule::kOneFOneB, 4, 3, 8, 1)), 1u);
  EXPECT_EQ(leading_forwards(stage_order(Schedule::kGpipe, 4, 3, 8, 1)), 8u);
  EXPECT_EQ(leading_forwards(stage_order(Schedule::kInterleaved, 4, 0, 8, 2)), 11u);  // 6 + 4 warm-up + 1
}

// ZB-H1 keeps 1F1B's forward / input-gradient order and stage s holds back its last s
// weight-gradient passes: W(i) runs right after B(i + s), and the last B is followed by its
// own W and the s held back (all m when m <= s); so every stage has p micro-batches in
// flight and stage 0 defers none.
TEST(Schedule, ZeroBubbleH1StageSHoldsBackSWeightPasses) {
  for (auto [p, m] : {std::pair<int32_t, int32_t>{4, 8}, {8, 4}, {8, 32}}) {
    for (int32_t s = 0; s < p; ++s) {
      const auto zb = stage_order(Schedule::kZbH1, p, s, m, 1);
      std::vector<Action> fb;
      for (const auto& a : zb) {
        if (a.phase != Phase::kW) fb.push_back(a);
      }
      const auto base = stage_order(Schedule::kOneFOneB, p, s, m, 1);
      ASSERT_EQ(fb.size(), base.size());
      for (size_t i = 0; i < fb.size(); ++i) {
        EXPECT_EQ(fb[i].phase, base[i].phase);
        EXPECT_EQ(fb[i].mb, base[i].mb);
      }
      int32_t held = 0, trailing = 0;
      for (size_t i = 0; i < zb.size(); ++i) {
        held += zb[i].phase == Phase::kB ? 1 : zb[i].phase == Phase::kW ? -1 : 0;
        if (zb[i].phase == Phase::kB && i + 1 < zb.size()) {
          EXPECT_LE(held, s + 1) << "p" << p << " s" << s;  // the W that follows brings it to s
        }
      }
      for (auto it = zb.rbegin(); it != zb.rend() && it->phase == Phase::kW; ++it) ++trailing;
      EXPECT_EQ(trailing, m <= s ? m : s + 1) << "p" << p << " m" << m << " s" << s;
    }
  }
}

}  // namespace
}  // namespace stepcast::engine
