// stepcast pipeline schedules: the compute order of one pipeline stage.
//
// An action is the forward (F), backward (B; input and weight gradients unless split) or
// weight-gradient (W, zero-bubble schedules only) pass of one micro-batch through one chunk of
// the stage's layers. Orders follow Megatron-LM (GPipe, 1F1B with p - s - 1 warm-up forwards,
// interleaved 1F1B over v chunks with (p - s - 1) * 2 + (v - 1) * p warm-up forwards) and, for
// ZB-H1, Qi et al. 2023's handcrafted schedule: 1F1B's order of F and B, with stage s holding
// back its last s weight-gradient passes (W(i) right after B(i + s), the held ones at the end).
#pragma once

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

// Order of stage s (0-based) of p, with m micro-batches and v chunks per stage.
std::vector<Action> stage_order(config::Schedule sched, int32_t p, int32_t s, int32_t m, int32_t v);

}  // namespace stepcast::engine
