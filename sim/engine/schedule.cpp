#include "sim/engine/schedule.hpp"

namespace stepcast::engine {

// Compute order of one stage under the schedule (Megatron's orders; ZB-H1 and ZB-V after Qi et al.).
std::vector<Action> stage_order(config::Schedule sched, int32_t p, int32_t s, int32_t m, int32_t v) {
  std::vector<Action> out;
  const bool split_w = config::splits_backward(sched);
  out.reserve(static_cast<size_t>(std::max(0, m)) * static_cast<size_t>(std::max(1, v)) * (split_w ? 3 : 2));
  for_each_action(sched, p, s, m, v, [&](const Action& a) { out.push_back(a); });
  return out;
}

}  // namespace stepcast::engine
