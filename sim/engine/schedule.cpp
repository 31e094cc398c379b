#include "sim/engine/schedule.hpp"

#include <algorithm>
#include <deque>

namespace stepcast::engine {

using config::Schedule;

// Compute order of one stage under the schedule (Megatron's orders; ZB-H1 after Qi et al. 2023).
std::vector<Action> stage_order(Schedule sched, int32_t p, int32_t s, int32_t m, int32_t v) {
  std::vector<Action> out;
  if (sched == Schedule::kGpipe) {
    for (int32_t i = 0; i < m; ++i) out.push_back({Phase::kF, i, 0});
    for (int32_t i = 0; i < m; ++i) out.push_back({Phase::kB, i, 0});
    return out;
  }
  if (sched == Schedule::kInterleaved) {
    const int32_t total = m * v;
    auto mb_of = [&](int32_t k) { return (k / (p * v)) * p + k % p; };
    auto fchunk = [&](int32_t k) { return (k / p) % v; };
    auto bchunk = [&](int32_t k) { return v - 1 - (k / p) % v; };
    const int32_t warm = std::min((p - s - 1) * 2 + (v - 1) * p, total);
    for (int32_t k = 0; k < warm; ++k) out.push_back({Phase::kF, mb_of(k), fchunk(k)});
    for (int32_t i = 0; i < total - warm; ++i) {
      out.push_back({Phase::kF, mb_of(warm + i), fchunk(warm + i)});
      out.push_back({Phase::kB, mb_of(i), bchunk(i)});
    }
    for (int32_t k = std::max(0, total - warm); k < total; ++k) out.push_back({Phase::kB, mb_of(k), bchunk(k)});
    return out;
  }
  const int32_t warm = std::min(p - s - 1, m);
  std::vector<Action> base;
  for (int32_t i = 0; i < warm; ++i) base.push_back({Phase::kF, i, 0});
  for (int32_t i = 0; i < m - warm; ++i) {
    base.push_back({Phase::kF, warm + i, 0});
    base.push_back({Phase::kB, i, 0});
  }
  for (int32_t i = m - warm; i < m; ++i) base.push_back({Phase::kB, i, 0});
  if (sched != Schedule::kZbH1) return base;
  // ZB-H1 (Qi et al. 2023, the handcrafted schedule that keeps 1F1B's peak memory): the
  // forwards and input-gradient backwards keep 1F1B's order, and stage s holds back its last s
  // weight-gradient passes W, so every stage has p micro-batches in flight (stage 0, which has
  // the most forwards in flight, defers none). Later stages thereby pass their B on at once, the
  // backward chain reaches stage 0 sooner, and the held-back W fill the cool-down; with equal F,
  // B and W costs the bubble is (p - 1)(F + B - W), a third of 1F1B's.
  const size_t defer = static_cast<size_t>(s);
  std::deque<int32_t> pending;
  for (const auto& a : base) {
    out.push_back(a);
    if (a.phase != Phase::kB) continue;
    pending.push_back(a.mb);
    while (pending.size() > defer) {
      out.push_back({Phase::kW, pending.front(), 0});
      pending.pop_front();
    }
  }
  while (!pending.empty()) {
    out.push_back({Phase::kW, pending.front(), 0});
    pending.pop_front();
  }
  return out;
}

}  // namespace stepcast::engine
