// `stepcast export`: a run file as a training framework's launch configuration, the way back from
// `stepcast import` once the planner has chosen a layout.
//
// megatron: a torchrun command for Megatron-LM's pretrain_gpt.py with the architecture (layers,
// widths, heads, GQA, MLP kind, norm, positions, biases, MoE, multi-latent attention, MTP), the
// batch, precision, layout (TP, PP with virtual stages and an uneven split, CP and its exchange,
// EP / expert TP, sequence parallelism, the distributed optimizer or Megatron-FSDP's ZeRO-2 / 3
// sharding), recomputation, activation offload, communication overlap and gradient buckets. A
// setting Megatron-LM has no argument for (a zero-bubble or DualPipe schedule, GPipe, CPU
// optimizer offload, a model with Mamba or linear-attention layers, sliding windows) is an error
// naming the run-file field, rather than a command that would train something else. What the run
// file models but no framework sets (routing imbalance, hardware, scenarios) is listed as notes.
// `stepcast import megatron` reads the command back into the same layout and model.
//
// torchtitan: a job config TOML ([model] name and flavor for the models torchtitan ships,
// [training] batch, sequence and precision, [parallelism] degrees with HSDP, the pipeline
// schedule, micro-batch and every model part's modules, async TP, the context-parallel rotation,
// [activation_checkpoint], float8 converters). torchtitan shards data parallelism with FSDP2 or
// replicates it: ZeRO-1/2, Megatron-style selective recomputation and the all-gather or Ulysses
// context exchanges are errors naming the field. `stepcast import torchtitan` reads it back.
#pragma once

#include <string>
#include <vector>

#include "sim/config/framework_import.hpp"
#include "sim/config/run_config.hpp"
#include "sim/core/json_reader.hpp"

namespace stepcast::config {

struct ExportedCommand {
  std::string framework;                 // "megatron"
  std::vector<std::string> launcher;     // torchrun and its options, then the script
  std::vector<std::string> args;         // the script's arguments, "--flag" and its value(s) as separate words
  std::vector<std::string> notes;        // what the run models that the arguments do not carry
};

// Why the framework cannot run the run as it is ("FIELD: why"), or empty when it can. The
// exporters refuse with it; the planner's --framework drops such layouts with it.
std::string megatron_refusal(const RunConfig& rc);
std::string torchtitan_refusal(const RunConfig& rc);

// Throws core::UserError naming the run-file field Megatron-LM cannot run.
ExportedCommand export_megatron(const RunConfig& rc);

// The command as a shell script: one argument per line with continuations, notes as comments.
std::string shell_text(const ExportedCommand& cmd);

// The zoo models torchtitan ships, with its [model] name and flavor for each (what export
// writes and import reads back without --model).
struct TorchtitanFlavor {
  const char* zoo;
  const char* name;
  const char* flavor;
};
const std::vector<TorchtitanFlavor>& torchtitan_flavors();

struct ExportedConfig {
  std::string framework;            // "torchtitan"
  core::Json tables;                // TOML tables as JSON objects (table -> key -> value)
  std::vector<std::string> notes;
  std::string model;                // the stepcast model the config trains (import's --model when [model] has no flavor)
};

// Throws core::UserError naming the run-file field torchtitan cannot run.
ExportedConfig export_torchtitan(const RunConfig& rc);

// The config as TOML text (notes as comments).
std::string toml_text(const ExportedConfig& cfg);

// Reading an exported config back as the run (the as_*_runs_it round trips): import options
// with the run's model (`model_json` for one outside the zoo), sequence and GPUs, and a built-in
// profile for the import to name, the run's own where it is one; with_own_hardware then puts
// the run's own profile (a file, or a built-in with overrides) into the imported run.
ImportOptions runtime_import_options(const RunConfig& rc, const core::Json& model_json);
RunConfig with_own_hardware(RunConfig imported, const RunConfig& rc);

// deepspeed: a DeepSpeed config JSON for the Hugging Face Trainer or deepspeed.initialize: the
// batch (global, per GPU, accumulation), bf16 / fp16, and ZeRO (stage, overlap_comm, the
// gradient bucket in elements, CPU offload of the optimizer or the parameters). DeepSpeed's
// config runs data parallelism alone: TP, PP, CP, EP, FSDP, HSDP, selective or partial
// recomputation, fp8 and SGD are errors naming the field. What the config does not hold (the
// launcher, the model, the sequence length, gradient checkpointing of every layer) is in the
// notes. `stepcast import deepspeed` reads it back.
std::string deepspeed_refusal(const RunConfig& rc);
ExportedConfig export_deepspeed(const RunConfig& rc);
// The config as JSON text (the notes are not part of it).
std::string json_config_text(const ExportedConfig& cfg);
// The run as DeepSpeed runs it: its exported config imported back (ZeRO's gradient dtype and
// buckets, DeepSpeed's BF16 optimizer, its overlap defaults and in-step parameter all-gathers),
// on the run's own hardware profile. `model_json`: the run file's model as it gives it (null:
// the zoo model of the run's name).
RunConfig as_deepspeed_runs_it(const RunConfig& rc, const core::Json& model_json = nullptr);

// accelerate: a Hugging Face Accelerate config YAML: FSDP (FULL_SHARD, SHARD_GRAD_OP without
// resharding, HYBRID_SHARD with one replica per machine; parameter offload; activation
// checkpointing of every layer), or DDP (MULTI_GPU) for unsharded data parallelism; mixed
// precision, machines and processes. TP, PP, CP, EP, ZeRO-1/2 (DeepSpeed's: export deepspeed),
// other replica counts, selective or partial recomputation, optimizer-only offload and SGD are
// errors naming the field. The per-device batch, accumulation, sequence and model are the
// script's: notes. `stepcast import accelerate` reads it back.
std::string accelerate_refusal(const RunConfig& rc);
ExportedConfig export_accelerate(const RunConfig& rc);
// The config as YAML text (notes as comments).
std::string yaml_text(const ExportedConfig& cfg);
// The run as Accelerate runs it: its exported config imported back (its FSDP mixed precision:
// parameters gathered and gradients reduced in the 16-bit type; SDPA attention), on the run's
// own hardware profile. `model_json`: as as_deepspeed_runs_it's.
RunConfig as_accelerate_runs_it(const RunConfig& rc, const core::Json& model_json = nullptr);

}  // namespace stepcast::config
