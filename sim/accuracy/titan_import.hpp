// `stepcast import torchtitan`: a torchtitan job config (TOML) as a run file. The config is
// described as a published torchtitan run and converted with the accuracy harness's torchtitan
// mapping (row_to_run), the one reports/accuracy.md validates against the PyTorch team's and
// Trainy's measurements: FSDP2 mixed precision with fp32 master parameters and reductions, SDPA
// attention, eager or compiled loss, op-level selective AC, async TP, the pipeline runtime's
// buffers. The model comes from [model] name and flavor (llama3: 8B, 70B, 405B; deepseek_v3:
// 671B) or --model (a zoo name or a model config file); the GPU count and hardware, which the
// TOML does not hold, from the options. Keys with no modelled cost are listed as ignored.
#pragma once

#include <string>

#include "sim/config/framework_import.hpp"
#include "sim/config/run_config.hpp"
#include "sim/core/json_reader.hpp"

namespace stepcast::accuracy {

core::Json import_torchtitan(const core::Json& toml, const std::string& config_path, const config::ImportOptions& opt);

// The run as torchtitan runs it: `export torchtitan`'s config of it imported back (its FSDP2
// mixed precision, SDPA attention, loss and pipeline buffers), on the run's own hardware
// profile. `model_json`: the run file's model as it gives it (a zoo name, an inline object or
// {"path": an absolute path}), needed for a model outside the zoo; null: the zoo model of the
// run's name. UserError where torchtitan cannot run the layout or the model.
config::RunConfig as_torchtitan_runs_it(const config::RunConfig& rc, const core::Json& model_json = nullptr);

}  // namespace stepcast::accuracy
