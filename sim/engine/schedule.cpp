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
  // ZB-H1: weight-gradient work W(i) follows B(i), except that stage s keeps up to p - s - 1
  // of them pending through the steady state and spends them in the cool-down, one before each
  // backward there, where 1F1B would idle waiting for the next stage's gradients.
  const size_t defer = static_cast<size_t>(p - s - 1);
  std::deque<int32_t> pending;
  int32_t backwards_seen = 0;
  for (const auto& a : base) {
    if (a.phase != Phase::kB) {
      out.push_back(a);
      continue;
    }
    const bool cooldown = ++backwards_seen > m - warm;
    if (cooldown && !pending.empty()) {
      // Spread the pending weight-gradient work evenly over the cool-down's backward waits.
      const auto remaining = static_cast<size_t>(m - backwards_seen + 1);
      const size_t emit = (pending.size() + remaining - 1) / remaining;
      for (size_t k = 0; k < emit && !pending.empty(); ++k) {
        out.push_back({Phase::kW, pending.front(), 0});
        pending.pop_front();
      }
    }
    out.push_back(a);
    pending.push_back(a.mb);
    while (!cooldown && pending.size() > defer) {
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
