// `stepcast import megatron`: a Megatron-LM / Megatron-Core launch command line (pretrain_gpt.py
// arguments, and torchrun's node and process counts when present) as a stepcast run file.
//
// The model comes from the architecture arguments (--num-layers, --hidden-size, ...; Megatron's
// defaults where one is omitted: a 4h MLP, or int(8h/3 / 64) * 64 with --swiglu; tied
// embeddings; bias on linear layers), or from a zoo name given instead. The layout and the
// framework's behaviour follow Megatron's arguments and defaults: the distributed optimizer is
// ZeRO-1; Megatron-Core's DDP buckets only the first stage's first chunk, at
// max(40 M, 1 M x dp) parameters when gradient reduction overlaps (one bucket otherwise); bf16
// keeps fp32 main gradients. Every default the run file relies on is written to its
// `assumptions`; arguments with no modelled cost (data, logging, checkpoints, learning rate, ...)
// are listed in its `notes` as ignored. A malformed value, or an argument the run needs and
// Megatron cannot derive without the tokenizer (--vocab-size), is an error naming the argument.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/core/json_reader.hpp"

namespace stepcast::config {

struct MegatronImport {
  std::string hardware = "h100-sxm";  // profile name for the run file
  std::string model;                  // a zoo name, used instead of the architecture arguments
  int64_t gpus = 0;                   // 0: torchrun's --nnodes x --nproc-per-node from the arguments
  int64_t gpus_per_node = 0;          // 0: --nproc-per-node, else the profile's
};

// Splits a launch script into arguments: backslash-newline continuations joined, comments
// dropped, single and double quotes honoured (no variable expansion).
std::vector<std::string> split_command_line(const std::string& text);

// The run file for `args` (which may include the launcher, the script name and torchrun's own
// options). Throws core::UserError naming the argument at fault.
core::Json import_megatron(const std::vector<std::string>& args, const MegatronImport& opt);

}  // namespace stepcast::config
