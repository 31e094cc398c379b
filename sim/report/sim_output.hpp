// stepcast simulate output: the estimate's output contract read from the simulated timeline,
// plus what only a timeline shows (memory timeline peak, collective wait, in-flight
// micro-batches per stage). docs/OUTPUT.md documents every key.
#pragma once

#include <string>

#include "sim/config/run_config.hpp"
#include "sim/core/json_reader.hpp"
#include "sim/engine/step_sim.hpp"

namespace stepcast::report {

core::Json simulate_json(const config::RunConfig& rc, const engine::SimResult& r, const std::string& command);
std::string simulate_table(const config::RunConfig& rc, const engine::SimResult& r);

}  // namespace stepcast::report
