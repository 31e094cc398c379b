// stepcast pipeline schedules: the compute order of one pipeline stage.
//
// An action is the forward (F), backward (B; input and weight gradients unless split) or
// weight-gradient (W, zero-bubble schedules only) pass of one micro-batch through one chunk of
// the stage's layers. Orders follow Megatron-LM (GPipe, 1F1B with p - s - 1 warm-up forwards,
// interleaved 1F1B over v chunks with (p - s - 1) * 2 + (v - 1) * p warm-up forwards) and, for
// ZB-H1, Qi et al. 2023's handcrafted schedule: 1F1B's order of F and B, with stage s holding
// back its last s weight-gradient passes (W(i) right after B(i + s), the held ones at the end);
// ZB-V after Qi et al. 2024 (below).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "sim/config/run_config.hpp"

namespace stepcast::engine {

// kBW: a whole backward (input and weight gradients in one pass) in a schedule that otherwise
// splits them (DualPipeV); under the other schedules kB is whole unless they split (ZB-H1, ZB-V).
enum class Phase : uint8_t { kF, kB, kW, kBW };
// A backward pass: it carries the gradient to the previous virtual stage (kB or kBW).
[[nodiscard]] inline bool is_backward(Phase p) { return p == Phase::kB || p == Phase::kBW; }

struct Action {
  Phase phase;
  int32_t mb;
  int32_t chunk;
};

// ZB-V (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"; the order of
// torch.distributed.pipelining's ScheduleZBVZeroBubble). Chunk 0 of stage s is virtual stage s,
// chunk 1 virtual stage 2p - 1 - s, so a micro-batch runs down the stages and back up, and
// stage 0 computes the loss. Stage s:
//   warm-up: 2(p - s) - 1 forwards of chunk 0; s pairs (F chunk 1, F chunk 0); p - s triples
//     (F, B, W of chunk 1), which start the backward at the V's far end;
//   steady: F, B, W of chunk 0, then F, B, W of chunk 1, per micro-batch;
//   cool-down: s pairs of input-gradient passes (B chunk 0, B chunk 1) with their W held back,
//     p - s pairs (B chunk 0, W chunk 0), then the held-back W of chunk 1, then of chunk 0.
// Every stage holds about 2p chunk activations (p micro-batches of its layers), 1F1B's stage-0
// peak, and with equal F, B and W per chunk the timeline has almost no bubble. Each pass is
// emitted only once its local predecessor is (chunk 1's F after chunk 0's F of the micro-batch,
// chunk 0's B after chunk 1's B, W after its B), so fewer than 2p - 1 micro-batches shorten
// the phases instead of breaking the order.
template <class F>
void for_each_zbv_action(int32_t p, int32_t s, int32_t m, F&& f) {
  int32_t f0 = 0, f1 = 0, b0 = 0, b1 = 0, w0 = 0, w1 = 0;
  auto fwd0 = [&] {
    if (f0 < m) f(Action{Phase::kF, f0++, 0});
  };
  auto fwd1 = [&] {
    if (f1 < f0) f(Action{Phase::kF, f1++, 1});
  };
  auto bwd1 = [&](bool with_w) {
    if (b1 >= f1) return;
    f(Action{Phase::kB, b1++, 1});
    if (with_w) f(Action{Phase::kW, w1++, 1});
  };
  auto bwd0 = [&](bool with_w) {
    if (b0 >= b1) return;
    f(Action{Phase::kB, b0++, 0});
    if (with_w) f(Action{Phase::kW, w0++, 0});
  };
  for (int32_t i = 0; i < 2 * (p - s) - 1; ++i) fwd0();
  for (int32_t i = 0; i < s; ++i) {
    fwd1();
    fwd0();
  }
  for (int32_t i = 0; i < p - s; ++i) {
    fwd1();
    bwd1(true);
  }
  while (f1 < m) {
    fwd0();
    bwd0(true);
    fwd1();
    bwd1(true);
  }
  for (int32_t i = 0; i < s; ++i) {
    bwd0(false);
    bwd1(false);
  }
  for (int32_t i = 0; i < p - s; ++i) bwd0(true);
  // What the phases above left (short runs): the remaining input-gradient passes in
  // dependency order, then every held-back weight-gradient pass.
  while (b1 < m || b0 < m) {
    bwd1(false);
    bwd0(false);
  }
  while (w1 < m) f(Action{Phase::kW, w1++, 1});
  while (w0 < m) f(Action{Phase::kW, w0++, 0});
}

// DualPipeV (DeepSeek's DualPipe on one V; the step order of torch.distributed.pipelining's
// ScheduleDualPipeV), stage s of p with m >= 2p micro-batches, chunks placed as ZB-V's:
//   1: 2(p - s - 1) chunk-0 forwards; 2: s + 1 (chunk-0, chunk-1) forward pairs;
//   3: p - s - 1 times a split chunk-1 backward, the oldest held W, a chunk-1 forward;
//   4: m - 2p + s + 1 times a chunk-0 forward with a whole chunk-1 backward, then a chunk-1
//      forward with a whole chunk-0 backward (pairs the runtime overlaps; here one after the
//      other, their expert exchanges hidden by moe.overlap "micro-batch");
//   5: p - s - 1 times a whole chunk-1 backward, then a chunk-1 forward with a whole chunk-0
//      backward; 6: s + 1 (chunk-1, chunk-0) backward pairs, split from the middle on;
//   7: p - s - 1 times the oldest held W and a split chunk-0 backward; 8: the held W.
template <class F>
void for_each_dualpipev_action(int32_t p, int32_t s, int32_t m, F&& f) {
  int32_t fc[2] = {0, 0}, bc[2] = {0, 0};
  std::vector<Action> held;  // split backwards' W, oldest first
  size_t next_w = 0;
  auto fwd = [&](int32_t c) { f(Action{Phase::kF, fc[c]++, c}); };
  auto bwd = [&](int32_t c, bool split) {
    const Action a{split ? Phase::kB : Phase::kBW, bc[c]++, c};
    f(a);
    if (split) held.push_back(Action{Phase::kW, a.mb, c});
  };
  auto pop_w = [&] {
    if (next_w < held.size()) f(held[next_w++]);
  };
  for (int32_t i = 0; i < 2 * (p - s - 1); ++i) fwd(0);
  for (int32_t i = 0; i < s + 1; ++i) {
    fwd(0);
    fwd(1);
  }
  for (int32_t i = 0; i < p - s - 1; ++i) {
    bwd(1, true);
    pop_w();
    fwd(1);
  }
  for (int32_t i = 0; i < m - 2 * p + s + 1; ++i) {
    fwd(0);
    bwd(1, false);
    fwd(1);
    bwd(0, false);
  }
  for (int32_t i = 0; i < p - s - 1; ++i) {
    bwd(1, false);
    fwd(1);
    bwd(0, false);
  }
  bool split = false;
  for (int32_t i = 0; i < s + 1; ++i) {
    if (i == (s + 1) / 2 && s % 2 == 1) split = true;
    bwd(1, split);
    if (i == (s + 1) / 2 && s % 2 == 0) split = true;
    bwd(0, split);
  }
  for (int32_t i = 0; i < p - s - 1; ++i) {
    pop_w();
    bwd(0, split);
  }
  while (next_w < held.size()) pop_w();
}

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
  if (sched == config::Schedule::kZbV) {
    for_each_zbv_action(p, s, m, f);
    return;
  }
  if (sched == config::Schedule::kDualPipeV) {
    for_each_dualpipev_action(p, s, m, f);
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
