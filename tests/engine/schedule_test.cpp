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
  // Every pass once: a forward and a backward per micro-batch and chunk, and a W after each
  // backward that leaves one (kB under a splitting schedule; DualPipeV's kBW computes its own).
  const bool zb = sched == Schedule::kZbH1 || sched == Schedule::kZbV || sched == Schedule::kDualPipeV;
  size_t split = 0;
  for (int32_t mb = 0; mb < m; ++mb) {
    for (int32_t c = 0; c < v; ++c) {
      const bool whole = pos.count({3, mb, c}) != 0;
      const auto f = pos.at({0, mb, c}), b = pos.at({whole ? 3 : 1, mb, c});
      EXPECT_LT(f, b) << "mb " << mb << " chunk " << c;
      if (zb && !whole) {
        EXPECT_LT(b, pos.at({2, mb, c}));
        ++split;
      }
      EXPECT_EQ(pos.count({2, mb, c}), zb && !whole ? 1u : 0u);
    }
  }
  ASSERT_EQ(order.size(), static_cast<size_t>(m * v * 2) + split);
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
  // ZB-V at every micro-batch count up to 3p, below its 2p - 1 warm-up forwards too;
  // DualPipeV from its 2p on.
  for (int32_t p : {2, 3, 4, 8}) {
    for (int32_t m = 1; m <= 3 * p; ++m) {
      for (int32_t s = 0; s < p; ++s) check_valid(Schedule::kZbV, p, s, m, 2);
      if (m >= 2 * p) {
        for (int32_t s = 0; s < p; ++s) check_valid(Schedule::kDualPipeV, p, s, m, 2);
      }
    }
  }
}

// ZB-V's local order follows the V: a micro-batch's chunk-1 forward comes after its chunk-0
// forward, its chunk-0 input-gradient pass after the chunk-1 one (the gradient comes back down
// the V). Warm-up: stage s starts with 2(p - s) - 1 chunk-0 forwards; stage 0 then runs p
// (F, B, W) triples of chunk 1, which holds the loss.
TEST(Schedule, ZeroBubbleVFollowsTheV) {
  for (auto [p, m] : {std::pair<int32_t, int32_t>{4, 8}, {8, 16}, {4, 3}}) {
    for (int32_t s = 0; s < p; ++s) {
      const auto o = stage_order(Schedule::kZbV, p, s, m, 2);
      std::map<std::tuple<int, int, int>, size_t> pos;
      for (size_t i = 0; i < o.size(); ++i) pos[{static_cast<int>(o[i].phase), o[i].mb, o[i].chunk}] = i;
      for (int32_t mb = 0; mb < m; ++mb) {
        EXPECT_LT(pos.at({0, mb, 0}), pos.at({0, mb, 1})) << "p" << p << " s" << s << " mb" << mb;
        EXPECT_LT(pos.at({1, mb, 1}), pos.at({1, mb, 0})) << "p" << p << " s" << s << " mb" << mb;
      }
      size_t lead = 0;
      while (lead < o.size() && o[lead].phase == Phase::kF && o[lead].chunk == 0) ++lead;
      EXPECT_EQ(lead, static_cast<size_t>(std::min(m, 2 * (p - s) - 1))) << "p" << p << " s" << s;
    }
    if (m >= 2 * p - 1) {
      const auto o0 = stage_order(Schedule::kZbV, p, 0, m, 2);
      for (int32_t i = 0; i < p; ++i) {
        const auto k = static_cast<size_t>(2 * p - 1 + 3 * i);
        EXPECT_EQ(o0[k].chunk, 1);
        EXPECT_EQ(o0[k].phase, Phase::kF);
        EXPECT_EQ(o0[k + 1].phase, Phase::kB);
        EXPECT_EQ(o0[k + 2].phase, Phase::kW);
      }
    }
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
