// `stepcast import accelerate`: a Hugging Face Accelerate config YAML as a run file, and the
// YAML subset such configs use (sim/config/framework_import.hpp).
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "sim/config/framework_import.hpp"
#include "sim/core/error.hpp"

namespace stepcast::config {

using core::Json;

namespace {

Json yaml_scalar(std::string v) {
  const size_t a = v.find_first_not_of(" \t"), b = v.find_last_not_of(" \t\r");
  v = a == std::string::npos ? std::string() : v.substr(a, b - a + 1);
  if (v.empty() || v == "null" || v == "~") return nullptr;
  if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front()) return v.substr(1, v.size() - 2);
  std::string l = v;
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (l == "true" || l == "yes") return true;
  if (l == "false" || l == "no") return false;
  char* end = nullptr;
  errno = 0;
  const long long i = std::strtoll(v.c_str(), &end, 10);
  if (end != nullptr && *end == '\0' && errno == 0) return static_cast<int64_t>(i);
  const double d = std::strtod(v.c_str(), &end);
  if (end != nullptr && *end == '\0') return d;
  return v;
}

// The line without its comment: from a '#' at the start or after a blank, outside quotes.
std::string without_comment(const std::string& raw) {
  std::string line;
  char quote = 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    const char c = raw[i];
    if (quote != 0) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#' && (i == 0 || raw[i - 1] == ' ' || raw[i - 1] == '\t')) {
      break;
    }
    line += c;
  }
  return line;
}

}  // namespace

Json parse_yaml(const std::string& text, const std::string& path) {
  struct Level {
    int indent;
    Json* node;
  };
  Json doc = Json::object();
  std::vector<Level> stack{{0, &doc}};
  std::stringstream in(text);
  std::string raw;
  int line_no = 0;
  Json* pending = nullptr;  // a "key:" whose mapping or list follows on deeper lines
  int pending_indent = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    const std::string where = path + ":" + std::to_string(line_no);
    const std::string line = without_comment(raw);
    const size_t first = line.find_first_not_of(' ');
    if (first == std::string::npos || line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (line[first] == '\t') throw core::UserError(where + ": YAML indents with spaces, not tabs");
    if (line_no == 1 && line.compare(first, 3, "---") == 0) continue;
    const int indent = static_cast<int>(first);
    std::string body = line.substr(first);
    while (!body.empty() && (body.back() == ' ' || body.back() == '\r')) body.pop_back();
    if (pending != nullptr) {
      if (indent > pending_indent) {
        *pending = body.rfind("- ", 0) == 0 || body == "-" ? Json::array() : Json::object();
        stack.push_back({indent, pending});
      }
      pending = nullptr;
    }
    while (stack.size() > 1 && indent < stack.back().indent) stack.pop_back();
    if (indent != stack.back().indent) throw core::UserError(where + ": the indentation does not match an enclosing block");
    Json& node = *stack.back().node;
    if (body.rfind("- ", 0) == 0 || body == "-") {
      if (!node.is_array()) throw core::UserError(where + ": a list item where a mapping entry was expected");
      const std::string item = body.size() > 2 ? body.substr(2) : "";
      if (item.find(": ") != std::string::npos) throw core::UserError(where + ": lists of mappings are not read; give scalars");
      node.push_back(yaml_scalar(item));
      continue;
    }
    if (node.is_array()) throw core::UserError(where + ": a mapping entry inside a list");
    const size_t colon = body.find(':');
    if (colon == std::string::npos || (colon + 1 < body.size() && body[colon + 1] != ' ')) {
      throw core::UserError(where + ": " + body + ": expected key: value");
    }
    std::string key = body.substr(0, colon);
    if (key.size() >= 2 && (key.front() == '"' || key.front() == '\'') && key.back() == key.front()) key = key.substr(1, key.size() - 2);
    const std::string value = colon + 2 <= body.size() ? body.substr(std::min(body.size(), colon + 2)) : "";
    if (value.find_first_not_of(' ') == std::string::npos) {
      node[key] = nullptr;  // stays null unless a deeper block follows
      pending = &node[key];
      pending_indent = indent;
      continue;
    }
    if (value.front() == '[' && value.back() == ']' && value.find_first_of("[]{}", 1) == value.size() - 1) {
      // A one-line list of scalars ("[]", "[a, b]").
      Json list = Json::array();
      std::stringstream items(value.substr(1, value.size() - 2));
      std::string item;
      while (std::getline(items, item, ',')) {
        if (item.find_first_not_of(' ') != std::string::npos) list.push_back(yaml_scalar(item));
      }
      node[key] = list;
      continue;
    }
    if (value == "{}") {
      node[key] = Json::object();
      continue;
    }
    if (value.front() == '{' || value.front() == '[' || value.front() == '&' || value.front() == '*' || value.front() == '|' || value.front() == '>') {
      throw core::UserError(where + ": " + key + ": nested flow collections, anchors and block scalars are not read");
    }
    node[key] = yaml_scalar(value);
  }
  return doc;
}

Json import_accelerate(const Json& c, const std::string& config_path, const ImportOptions& opt) {
  if (!c.is_object()) throw core::UserError(config_path + ": expected an Accelerate config mapping");
  if (opt.model.empty()) throw core::UserError("--model: required (an Accelerate config does not describe the model): a zoo name or a model config file");
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
    Json training = {{"seq_len", opt.seq_len}, {"global_batch_size", opt.micro_batch * gas * gpus}, {"precision", mp == "no" ? "fp32" : mp}};
    Json parallel = {{"dp", gpus}, {"micro_batch_size", opt.micro_batch}};
    std::vector<std::string> assumptions;
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
    const Json model = model_reference(opt.model);
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
