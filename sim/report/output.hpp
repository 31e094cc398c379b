// stepcast output contract: one JSON object per prediction, with stable keys, plus table views.
//
// Keys (all SI units): step_time_s, tokens_per_s, tokens_per_s_per_gpu, mfu, hfu, tflops_per_gpu,
// bubble_fraction, peak_memory_bytes, fits, memory (per-stage ledger), breakdown (compute,
// recompute, exposed_comm by kind, bubble, optimizer), and provenance (schema_version, tool
// version, command, input hash). docs/OUTPUT.md documents every key.
#pragma once

#include <string>

#include "sim/config/run_config.hpp"
#include "sim/core/json_reader.hpp"
#include "sim/estimate/estimate.hpp"
#include "sim/memory/ledger.hpp"

namespace stepcast::report {

inline constexpr int kSchemaVersion = 1;
const char* tool_version();

core::Json ledger_json(const memory::MemoryLedger& l);
core::Json run_summary_json(const config::RunConfig& rc);
// The layout object of the output contract (run_summary_json's "layout").
core::Json layout_json(const config::RunConfig& rc);
// The modules recompute selective rebuilds, as a JSON list of names (empty unless selective).
core::Json recompute_modules_json(const config::Parallel& p);
core::Json estimate_json(const config::RunConfig& rc, const estimate::StepEstimate& e, const std::string& command);
// The provenance keys every JSON output carries: schema_version, tool, tool_version, command.
core::Json provenance_json(const std::string& command);
// The output contract's breakdown object (compute_s, recompute_s, host_s, exposed_comm_s by kind,
// bubble_s, optimizer_s).
core::Json breakdown_json(const estimate::Breakdown& b);

std::string ledger_table(const config::RunConfig& rc, const memory::MemoryLedger& l);
std::string estimate_table(const config::RunConfig& rc, const estimate::StepEstimate& e);

// Where one micro-batch's time goes, per layer kind (dense and MoE transformer layers, the
// embedding, the output layer + loss) and pass: every operator the workload builder made for
// one rank, with its time, share of the pass, achieved FLOP/s (and share of the training
// precision's dense peak) or bytes per second, and for communication the part compute hides.
std::string operator_table(const config::RunConfig& rc);
core::Json operator_json(const config::RunConfig& rc);

// FNV-1a hash of a canonical JSON dump, for provenance.
std::string content_hash(const std::string& text);

}  // namespace stepcast::report
