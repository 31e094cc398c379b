// `stepcast import accelerate`: a Hugging Face Accelerate config YAML (read by parse_yaml,
// sim/config/framework_import.cpp) as a run file.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include "sim/config/framework_import.hpp"
#include "sim/core/error.hpp"

namespace stepcast::config {

using core::Json;

Json import_accelerate(const Json& c, const std::string& config_path, const ImportOptions& opt) {
  if (!c.is_object()) throw core::UserError(config_path + ": expected an Accelerate config mapping");
  if (opt.model.empty() && opt.model_json.is_null()) {
    throw core::UserError("--model: required (an Accelerate config does not describe the model): a zoo name or a model config file");
  }
  if (opt.seq_len <= 0) throw core::UserError("--seq: required (an Accelerate config does not hold the sequence length)");
  if (opt.micro_batch <= 0) throw core::UserError("--micro-batch: required (the per-device batch is the training script's, not the Accelerate config's)");
  std::set<std::string> read;
  auto get = [&](const Json& obj, const std::string& prefix, const char* key) -> const Json* {
    read.insert(prefix + key);
    return obj.contains(key) && !obj[key].is_null() ? &obj[key] : nullptr;
  };
  auto integer = [](const Json* v, const std::string& name, int64_t def) -> int64_t {
    if (v == nullptr) return def;
    if (!v->is_number_integer() || v->get<int64_t>() < 1) throw core::UserError(name + ": got " + v->dump() + "; expected a whole number from 1");
    return v->get<int64_t>();
  };
  auto flag = [](const Json* v, const std::string& name) {
    if (v == nullptr) return false;
    if (v->is_boolean()) return v->get<bool>();
    throw core::UserError(name + ": got " + v->dump() + "; expected true or false");
  };
  auto text = [](const Json* v, const std::string& def) { return v == nullptr ? def : v->is_string() ? v->get<std::string>() : v->dump(); };
  const int64_t gpus = opt.gpus > 0 ? opt.gpus : integer(get(c, "", "num_processes"), "num_processes", 0);
  if (gpus <= 0) throw core::UserError("num_processes: not given; give it or --gpus");
  const int64_t machines = integer(get(c, "", "num_machines"), "num_machines", 1);
  const std::string type = text(get(c, "", "distributed_type"), "NO");
  const std::string mp = text(get(c, "", "mixed_precision"), "no");
  if (mp != "no" && mp != "bf16" && mp != "fp16" && mp != "fp8") throw core::UserError("mixed_precision: got " + mp + "; expected no, bf16, fp16 or fp8");
  const int64_t gas = std::max<int64_t>(1, opt.grad_accum);
  Json run;
  if (type == "DEEPSPEED") {
    // Its settings as a DeepSpeed config, converted as one.
    const Json* ds = get(c, "", "deepspeed_config");
    const Json dsc = ds != nullptr && ds->is_object() ? *ds : Json::object();
    if (dsc.contains("deepspeed_config_file")) {
      throw core::UserError("deepspeed_config.deepspeed_config_file: import that file with `stepcast import deepspeed --config`");
    }
    Json zero = {{"stage", dsc.contains("zero_stage") ? dsc["zero_stage"] : Json(0)}};
    if (dsc.contains("offload_optimizer_device")) zero["offload_optimizer"] = {{"device", dsc["offload_optimizer_device"]}};
    if (dsc.contains("offload_param_device")) zero["offload_param"] = {{"device", dsc["offload_param_device"]}};
    Json cfg = {{"train_micro_batch_size_per_gpu", opt.micro_batch},
                {"gradient_accumulation_steps", dsc.contains("gradient_accumulation_steps") ? dsc["gradient_accumulation_steps"] : Json(gas)},
                {"zero_optimization", zero}};
    if (mp == "bf16" || mp == "fp16") cfg[mp] = {{"enabled", true}};
    ImportOptions o = opt;
    o.gpus = gpus;
    run = import_deepspeed(cfg, config_path, o);
    run.erase("notes");
    for (const auto& [k, v] : dsc.items()) {
      (void)v;
      static const std::set<std::string> used = {"zero_stage", "offload_optimizer_device", "offload_param_device", "gradient_accumulation_steps"};
      if (used.count(k)) read.insert("deepspeed_config." + k);
    }
  } else if (type == "FSDP" || type == "MULTI_GPU" || type == "NO") {
    Json training = {{"seq_len", opt.seq_len}, {"global_batch_size", opt.micro_batch * gas * gpus}, {"precision", mp == "no" ? "fp32" : mp},
                     {"attention", "flash2"}};
    Json parallel = {{"dp", gpus}, {"micro_batch_size", opt.micro_batch}};
    std::vector<std::string> assumptions{kSdpaAttention};
    if (opt.grad_accum <= 0) assumptions.push_back("training: no gradient accumulation (--grad-accum sets it)");
    if (type == "FSDP") {
      const Json* fc = get(c, "", "fsdp_config");
      const Json f = fc != nullptr && fc->is_object() ? *fc : Json::object();
      const std::string pre = "fsdp_config.";
      std::string strategy = text(get(f, pre, "fsdp_sharding_strategy"), "FULL_SHARD");
      static const std::map<std::string, std::string> kNumbered = {{"1", "FULL_SHARD"}, {"2", "SHARD_GRAD_OP"}, {"3", "NO_SHARD"}, {"4", "HYBRID_SHARD"}};
      if (kNumbered.count(strategy)) strategy = kNumbered.at(strategy);
      bool reshard = strategy != "SHARD_GRAD_OP";
      if (const Json* r = get(f, pre, "fsdp_reshard_after_forward")) reshard = r->is_boolean() ? r->get<bool>() : text(r, "") == "FULL_SHARD";
      if (strategy == "NO_SHARD") {
        assumptions.push_back("parallel: NO_SHARD is data parallelism without sharding");
      } else if (strategy == "FULL_SHARD" || strategy == "SHARD_GRAD_OP" || strategy == "HYBRID_SHARD") {
        parallel["fsdp"] = true;
        if (!reshard) parallel["reshard_after_forward"] = false;
        if (strategy == "HYBRID_SHARD" && machines > 1) parallel["dp_replicate"] = machines;
      } else {
        throw core::UserError(pre + "fsdp_sharding_strategy: got " + strategy + "; expected FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD");
      }
      if (flag(get(f, pre, "fsdp_offload_params"), pre + "fsdp_offload_params")) {
        if (strategy == "NO_SHARD") throw core::UserError(pre + "fsdp_offload_params: needs a sharding strategy (got NO_SHARD)");
        parallel["offload"] = "params";
      }
      if (flag(get(f, pre, "fsdp_activation_checkpointing"), pre + "fsdp_activation_checkpointing")) parallel["recompute"] = "full";
      if (mp == "bf16" || mp == "fp16") {
        training["grad_dtype"] = mp;
        assumptions.push_back("training: FSDP mixed precision from Accelerate's " + mp + ": parameters gathered and gradients reduced in " + mp);
      }
    }
    if (!opt.recompute.empty()) parallel["recompute"] = opt.recompute;
    const Json model = opt.model_json.is_null() ? model_reference(opt.model) : opt.model_json;
    Json cluster = {{"num_gpus", gpus}};
    if (machines > 1 && gpus % machines == 0) cluster["gpus_per_node"] = gpus / machines;
    if (opt.gpus_per_node > 0) cluster["gpus_per_node"] = opt.gpus_per_node;
    run = {{"name", "imported from Accelerate config " + std::filesystem::path(config_path).filename().string()},
           {"model", model}, {"hardware", opt.hardware}, {"cluster", cluster}, {"training", training}, {"parallel", parallel},
           {"assumptions", assumptions}};
  } else {
    throw core::UserError("distributed_type: got " + type + "; expected FSDP, MULTI_GPU, DEEPSPEED or NO");
  }
  // What the config says that no cost depends on.
  std::vector<std::string> ignored;
  for (const auto& [k, v] : c.items()) {
    if ((k == "fsdp_config" || k == "deepspeed_config") && v.is_object()) {
      for (const auto& [sk, sv] : v.items()) {
        (void)sv;
        if (!read.count(k + "." + sk)) ignored.push_back(k + "." + sk);
      }
    } else if (!read.count(k)) {
      ignored.push_back(k);
    }
  }
  note_ignored(run, ignored);
  return run;
}

}  // namespace stepcast::config
