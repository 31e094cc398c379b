// `stepcast import`: a training framework's own configuration as a stepcast run file.
//
// megatron: a Megatron-LM / Megatron-Core launch command line (pretrain_gpt.py arguments, and
// torchrun's node and process counts when present).
// The model comes from the architecture arguments (--num-layers, --hidden-size, ...; Megatron's
// defaults where one is omitted: a 4h MLP, or int(8h/3 / 64) * 64 with --swiglu; tied
// embeddings; bias on linear layers), or from a zoo name given instead. The layout and the
// framework's behaviour follow Megatron's arguments and defaults: the distributed optimizer is
// ZeRO-1; Megatron-Core's DDP buckets only the first stage's first chunk, at
// max(40 M, 1 M x dp) parameters when gradient reduction overlaps (one bucket otherwise); bf16
// keeps fp32 main gradients unless --grad-reduce-in-bf16; Megatron-FSDP shards as
// --data-parallel-sharding-strategy says (optim_grads_params: ZeRO-3, optim_grads: ZeRO-2). Every default the run file relies on is written to its
// `assumptions`; arguments with no modelled cost (data, logging, checkpoints, learning rate, ...)
// are listed in its `notes` as ignored. A malformed value, or an argument the run needs and
// Megatron cannot derive without the tokenizer (--vocab-size), is an error naming the argument.
//
// torchtitan: a job config TOML (sim/accuracy/titan_import.hpp: it goes through the accuracy
// harness's torchtitan mapping).
//
// accelerate: a Hugging Face Accelerate config YAML (sim/config/accelerate_import.cpp).
//
// deepspeed: a DeepSpeed config JSON (batch sizes, precision, ZeRO stage and its offload,
// bucket sizes, overlap) with the model, sequence length and GPU count it does not hold. The
// layout is data parallel over every GPU under the ZeRO stage; DeepSpeed's behaviour follows its
// defaults: ZeRO-1/2 gather the updated partitions inside the optimizer step; bf16 under ZeRO-1
// without offload runs the BF16 optimizer (bf16 gradients beside an fp32 accumulation buffer);
// ZeRO-3 releases parameters after each module's forward, so a recomputed forward gathers them
// again. Keys with no modelled cost are listed as ignored. "auto" values, which the Hugging Face
// Trainer fills in, take what the options give as the Trainer would (micro-batch, accumulation,
// precision; reduce_bucket_size becomes hidden^2); one the options do not give, or an unknown
// ZeRO offload device, is an error naming the key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/core/json_reader.hpp"

namespace stepcast::config {

struct ImportOptions {
  std::string hardware = "h100-sxm";  // profile name for the run file
  // A zoo name or a model config file (megatron: instead of the architecture arguments;
  // deepspeed: required).
  std::string model{};
  int64_t seq_len = 0;                // deepspeed: required (the config does not hold it)
  std::string recompute{};            // deepspeed: the model code's activation checkpointing (none, selective, full)
  // deepspeed: what the Hugging Face Trainer fills into "auto" values (0 / empty: not given).
  int64_t micro_batch = 0, grad_accum = 0;
  std::string precision{};
  int64_t gpus = 0;                   // 0: torchrun's --nnodes x --nproc-per-node from the arguments
  int64_t gpus_per_node = 0;          // 0: --nproc-per-node, else the profile's
  // torchtitan, deepspeed, accelerate: a run file's model as it gives it (a zoo name, an inline object, or
  // {"path": an absolute path}), taken instead of `model` (and torchtitan's [model] flavor).
  core::Json model_json{};
};

// Shared by the importers: a --model value as a run file's model (a zoo name, or {"path": ...}
// for a model config file), and the settings an importer did not read, as the run's notes.
core::Json model_reference(const std::string& model);
void note_ignored(core::Json& run, const std::vector<std::string>& ignored);

// Splits a launch script into the arguments its commands get, as the shell would:
// backslash-newline continuations joined, comments dropped, single and double quotes honoured,
// and the script's own variables expanded: NAME=value and export NAME=value lines (a value may
// use earlier variables), arrays NAME=( words ... ) over several lines, and their uses $NAME,
// ${NAME}, ${NAME:-default}, ${NAME[@]} (one word per element), ${NAME[N]} and $(( integer
// arithmetic )). Assignment lines contribute no arguments. What the script does not set
// (positional $1, the environment, $(command)) stays as written, so an argument that needs it
// is reported with its text.
std::vector<std::string> split_command_line(const std::string& text);

// The run file for `args` (which may include the launcher, the script name and torchrun's own
// options). Throws core::UserError naming the argument at fault.
core::Json import_megatron(const std::vector<std::string>& args, const ImportOptions& opt);

// accelerate: a Hugging Face Accelerate config YAML (distributed_type FSDP, MULTI_GPU or
// DEEPSPEED; num_processes, num_machines, mixed_precision; fsdp_config's sharding strategy,
// parameter offload, activation checkpointing, reshard; deepspeed_config's ZeRO stage, offload
// devices and accumulation) with the model, sequence length and micro-batch it does not hold.
core::Json import_accelerate(const core::Json& config, const std::string& config_path, const ImportOptions& opt);

// A YAML document as JSON: the block subset tool configs use (nested mappings by indentation,
// "- " lists and one-line [a, b] lists of scalars, {}, scalars as strings, numbers, booleans and
// null, comments). Anything
// else is an error naming `path` and the line.
core::Json parse_yaml(const std::string& text, const std::string& path);

// The assumption the Hugging Face side of the importers (deepspeed, accelerate) records for its
// FlashAttention-2 class attention.
extern const char* const kSdpaAttention;

// DeepSpeed's pipeline engine (deepspeed/runtime/pipe) as run-file settings, added to
// `parallel` and stated in `notes`: blocking send/receive pairs (pp_rendezvous) of whole
// activations from every TP rank, every in-flight stage output kept in its buffers, gradients
// reduced after the last micro-batch's backward in flattened buckets of 5e8 elements of
// `grad_bytes` each. Shared by the Megatron-DeepSpeed importer and the accuracy harness.
void deepspeed_pipeline_engine(core::Json& parallel, double grad_bytes, std::vector<std::string>& notes);

// The run file for a DeepSpeed config (`config_path` names it in messages).
core::Json import_deepspeed(const core::Json& config, const std::string& config_path, const ImportOptions& opt);

// A TOML document as JSON (tables as objects): the subset training configs use (tables and
// dotted table names, key = value with strings, integers, floats, booleans and arrays, which may
// span lines; comments). Anything else is an error naming `path` and the line.
core::Json parse_toml(const std::string& text, const std::string& path);


}  // namespace stepcast::config
