// stepcast pipeline schedules: the compute order of one pipeline stage.
//
// An action is the forward (F), backward (B; input and weight gradients unless split) or
// weight-gradient (W, zero-bubble schedules only) pass of one micro-batch through one chunk of
// the stage's layers. Orders follow Megatron-LM (GPipe, 1F1B with p - s - 1 warm-up forwards,
// interleaved 1F1B over v chunks with (p - s - 1) * 2 + (v - 1) * p warm-up forwards) and, for
// ZB-H1, Qi et al. 2023's handcrafted schedule: 1F1B's order of F and B, with stage s holding
// back its last s weight-gradient passes (W(i) right after B(i + s), the held ones at the end).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "sim/config/run_config.hpp"

namespace stepcast::engine {

enum class Phase : uint8_t { kF, kB, kW };

struct Action {
  Phase phase;
  int32_t mb;
  int32_t chunk;
};

// Calls f(Action) for each action of stage s (0-based) of p, in order, with m micro-batches and
// v chunks per stage, without building the list (the memory ledger walks long orders often).
template <class F>
void for_each_action(config::Schedule sched, int32_t p, int32_t s, int32_t m, int32_t v, F&& f) {
  if (sched == config::Schedule::kGpipe) {
    for (int32_t i = 0; i < m; ++i) f(Action{Phase::kF, i, 0});
    for (int32_t i = 0; i < m; ++i) f(Action{Phase::kB, i, 0});
    return;
  }
  if (sched == config::Schedule::kInterleaved) {
    const int32_t total = m * v;
    auto mb_of = [&](int32_t k) { return (k / (p * v)) * p + k % p; };
    auto fchunk = [&](int32_t k) { return (k / p) % v; };
    auto bchunk = [&](int32_t k) { return v - 1 - (k / p) % v; };
    const int32_t warm = std::min((p - s - 1) * 2 + (v - 1) * p, total);
    for (int32_t k = 0; k < warm; ++k) f(Action{Phase::kF, mb_of(k), fchunk(k)});
    for (int32_t i = 0; i < total - warm; ++i) {
      f(Action{Phase::kF, mb_of(warm + i), fchunk(warm + i)});
      f(Action{Phase::kB, mb_of(i), bchunk(i)});
    }
    for (int32_t k = std::max(0, total - warm); k < total; ++k) f(Action{Phase::kB, mb_of(k), bchunk(k)});
    return;
  }
  // 1F1B: p - s - 1 warm-up forwards, then one forward and one backward in turn, then the
  // remaining backwards. ZB-H1 (Qi et al. 2023, the handcrafted schedule that keeps 1F1B's
  // peak memory): the forwards and input-gradient backwards keep 1F1B's order, and stage s
  // holds back its last s weight-gradient passes W (W(i) right after B(i + s), the held ones at
  // the end), so every stage has p micro-batches in flight (stage 0, which has the most
  // forwards in flight, defers none). Later stages thereby pass their B on at once, the
  // backward chain reaches stage 0 sooner, and the held-back W fill the cool-down; with equal
  // F, B and W costs the bubble is (p - 1)(F + B - W), a third of 1F1B's.
  const bool split_w = sched == config::Schedule::kZbH1;
  auto backward = [&](int32_t i) {
    f(Action{Phase::kB, i, 0});
    if (split_w && i >= s) f(Action{Phase::kW, i - s, 0});
  };
  const int32_t warm = std::min(p - s - 1, m);
  for (int32_t i = 0; i < warm; ++i) f(Action{Phase::kF, i, 0});
  for (int32_t i = 0; i < m - warm; ++i) {
    f(Action{Phase::kF, warm + i, 0});
    backward(i);
  }
  for (int32_t i = m - warm; i < m; ++i) backward(i);
  if (split_w) {
    for (int32_t i = std::max(0, m - s); i < m; ++i) f(Action{Phase::kW, i, 0});
  }
}

// The same order as a list.
std::vector<Action> stage_order(config::Schedule sched, int32_t p, int32_t s, int32_t m, int32_t v);

}  // namespace stepcast::engine
