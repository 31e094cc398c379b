#include "sim/accuracy/titan_import.hpp"

#include <algorithm>
#include <filesystem>
#include <set>

#include "models/model_spec.hpp"
#include "sim/accuracy/published.hpp"
#include "sim/config/framework_export.hpp"
#include "sim/config/hardware.hpp"
#include "sim/core/error.hpp"

namespace stepcast::accuracy {

using core::Json;

namespace {

// A value at table.key of the TOML (nullptr when absent), marking it read.
class Toml {
 public:
  explicit Toml(const Json& doc) : doc_(doc) {}
  const Json* get(const std::string& table, const std::string& key) {
    read_.insert(table + "." + key);
    if (!doc_.contains(table) || !doc_[table].is_object() || !doc_[table].contains(key)) return nullptr;
    return &doc_[table][key];
  }
  int64_t integer(const std::string& table, const std::string& key, int64_t def, int64_t lo, int64_t hi) {
    const Json* v = get(table, key);
    if (v == nullptr) return def;
    if (!v->is_number_integer() || v->get<int64_t>() < lo || v->get<int64_t>() > hi) {
      throw core::UserError(table + "." + key + ": got " + v->dump() + "; expected a whole number from " + std::to_string(lo) + " to " + std::to_string(hi));
    }
    return v->get<int64_t>();
  }
  std::string word(const std::string& table, const std::string& key, const std::string& def) {
    const Json* v = get(table, key);
    if (v == nullptr) return def;
    if (!v->is_string()) throw core::UserError(table + "." + key + ": got " + v->dump() + "; expected a string");
    return v->get<std::string>();
  }
  bool flag(const std::string& table, const std::string& key) {
    const Json* v = get(table, key);
    if (v == nullptr) return false;
    if (!v->is_boolean()) throw core::UserError(table + "." + key + ": got " + v->dump() + "; expected true or false");
    return v->get<bool>();
  }
  bool lists(const std::string& table, const std::string& key, const std::string& item) {
    const Json* v = get(table, key);
    if (v == nullptr) return false;
    if (!v->is_array()) throw core::UserError(table + "." + key + ": got " + v->dump() + "; expected an array of names");
    for (const auto& x : *v) {
      if (x.is_string() && x.get<std::string>() == item) return true;
    }
    return false;
  }
  [[nodiscard]] std::vector<std::string> unread() const {
    std::vector<std::string> out;
    for (const auto& [t, tv] : doc_.items()) {
      if (!tv.is_object()) {
        out.push_back(t);
        continue;
      }
      for (const auto& [k, v] : tv.items()) {
        if (!read_.count(t + "." + k)) out.push_back(t + "." + k);
      }
    }
    return out;
  }

 private:
  const Json& doc_;
  std::set<std::string> read_;
};

}  // namespace

Json import_torchtitan(const Json& toml, const std::string& config_path, const config::ImportOptions& opt) {
  if (!toml.is_object()) throw core::UserError(config_path + ": expected a TOML document");
  if (opt.gpus <= 0) throw core::UserError("--gpus: required (torchtitan takes the GPU count from its launcher, not the config)");
  Toml t(toml);
  // The model: --model, else [model] name and flavor.
  const std::string name = t.word("model", "name", ""), flavor = t.word("model", "flavor", "");
  std::string zoo = opt.model;
  if (zoo.empty() && opt.model_json.is_null()) {
    const auto& flavors = config::torchtitan_flavors();
    const auto it = std::find_if(flavors.begin(), flavors.end(), [&](const config::TorchtitanFlavor& f) { return name == f.name && flavor == f.flavor; });
    if (it == flavors.end()) {
      throw core::UserError("model.name / model.flavor: got \"" + name + "\" / \"" + flavor +
                            "\"; stepcast knows llama3 8B, 70B, 405B and deepseek_v3 671B: give --model (a zoo name or a model config file) for others");
    }
    zoo = it->zoo;
  }
  const Json model_json = opt.model_json.is_null() ? config::model_reference(zoo) : opt.model_json;
  core::Issues issues;
  const model::ModelSpec m = model::parse_model(model_json, "--model", issues, "");
  issues.throw_if_any();

  // Layout.
  const int64_t tp = t.integer("parallelism", "tensor_parallel_degree", 1, 1, 1 << 20);
  const int64_t pp = t.integer("parallelism", "pipeline_parallel_degree", 1, 1, 1 << 20);
  int64_t cp = t.integer("parallelism", "context_parallel_degree", 1, 1, 1 << 20);
  cp = std::max(cp, t.integer("experimental", "context_parallel_degree", 1, 1, 1 << 20));
  const int64_t ep = t.integer("parallelism", "expert_parallel_degree", 1, 1, 1 << 20);
  const int64_t replicate = t.integer("parallelism", "data_parallel_replicate_degree", 1, 1, 1 << 20);
  int64_t shard = t.integer("parallelism", "data_parallel_shard_degree", -1, -1, 1 << 20);
  if (shard == 0) throw core::UserError("parallelism.data_parallel_shard_degree: got 0; expected -1 (the rest) or a count");
  const int64_t model_ranks = tp * pp * cp * replicate;
  if (opt.gpus % model_ranks != 0) {
    throw core::UserError("parallelism: tp " + std::to_string(tp) + " x pp " + std::to_string(pp) + " x cp " + std::to_string(cp) +
                          " x data_parallel_replicate_degree " + std::to_string(replicate) + " does not divide the " + std::to_string(opt.gpus) + " GPUs");
  }
  if (shard < 0) shard = opt.gpus / model_ranks;
  if (shard * model_ranks != opt.gpus) {
    throw core::UserError("parallelism.data_parallel_shard_degree: " + std::to_string(shard) + " x the other degrees (" + std::to_string(model_ranks) +
                          ") is not the " + std::to_string(opt.gpus) + " GPUs");
  }
  const int64_t dp = shard * replicate;
  const int64_t local = std::max(t.integer("training", "local_batch_size", 0, 0, 1 << 30), t.integer("training", "batch_size", 0, 0, 1 << 30));
  if (local <= 0) throw core::UserError("training.local_batch_size: required");
  const int64_t global = t.integer("training", "global_batch_size", -1, -1, int64_t{1} << 40);
  const int64_t seq = t.integer("training", "seq_len", 0, 1, int64_t{1} << 30);
  if (seq <= 0) throw core::UserError("training.seq_len: required");

  // The published-row description the harness converts.
  std::string id = "torchtitan-import";
  if (t.flag("parallelism", "enable_async_tensor_parallel")) id += "-AsyncTP";
  const std::string schedule = t.word("parallelism", "pipeline_parallel_schedule", "1F1B");
  Json row = {{"id", id},
              {"row_type", "training_run"},
              {"source", "torchtitan job config " + std::filesystem::path(config_path).filename().string()},
              {"framework", "torchtitan (2025)"},
              {"model", m.name},
              {"params_b", m.total_params() / 1e9},
              {"layers", m.num_layers},
              {"hidden", m.hidden},
              {"heads", m.heads},
              {"kv_heads", m.kv_heads},
              {"vocab", m.vocab},
              {"seq_len", seq},
              {"num_gpus", opt.gpus},
              {"tp", tp},
              {"pp", pp},
              {"cp", cp},
              {"dp", dp},
              {"micro_batch", pp > 1 ? t.integer("parallelism", "pipeline_parallel_microbatch_size", 1, 1, 1 << 20) : local},
              {"global_batch_seqs", global > 0 ? global : local * dp}};
  if (ep > 1) row["ep"] = ep;
  if (pp > 1 && (schedule == "Interleaved1F1B" || schedule == "LoopedBFS" || schedule == "InterleavedZeroBubble" || schedule == "ZBVZeroBubble" ||
                 schedule == "DualPipeV")) {
    row["vp"] = 2;
  }
  if (shard > 1) row["fsdp"] = "FSDP2";
  if (replicate > 1 && shard > 1) {
    row["dp_replicate"] = replicate;
    row["dp_shard"] = shard;
  }
  const bool float8 = t.lists("model", "converters", "float8") || t.lists("float8", "converters", "float8");
  row["precision"] = float8 ? "Float8 (torchao)" : t.word("training", "mixed_precision_param", "bfloat16") == "float32" ? "fp32" : "bf16";
  const std::string ac = t.word("activation_checkpoint", "mode", "selective");
  if (ac != "none" && ac != "selective" && ac != "full") throw core::UserError("activation_checkpoint.mode: got \"" + ac + "\"; expected none, selective or full");
  row["recompute"] = ac;
  const std::string sac = t.word("activation_checkpoint", "selective_ac_option", "op");
  const bool compiled = t.flag("compile", "enable") || t.flag("training", "compile");
  std::string optimizer = t.word("optimizer", "name", "AdamW");
  std::transform(optimizer.begin(), optimizer.end(), optimizer.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (optimizer != "sgd" && optimizer.find("adam") == std::string::npos) {
    throw core::UserError("optimizer.name: got \"" + t.word("optimizer", "name", "") + "\"; stepcast models Adam, AdamW and SGD");
  }
  if (compiled) row["notes"] = "torch.compile";
  // [compile] components (torchtitan's default: the model and the loss) compile the loss too:
  // the upcast and log-softmax fuse, no fp32 copies of the logits. training.compile (2024)
  // compiled the model alone.
  bool compiled_loss = false;
  if (t.flag("compile", "enable")) compiled_loss = t.get("compile", "components") == nullptr || t.lists("compile", "components", "loss");
  const hw::HardwareProfile profile = hw::builtin_hardware(opt.hardware);
  row["gpu_type"] = profile.gpu_name;
  row["gpus_per_node"] = opt.gpus_per_node > 0 ? opt.gpus_per_node : profile.gpus_per_node;

  Json run;
  std::string reason;
  if (!row_to_run(row, run, reason)) throw core::UserError(config_path + ": cannot be expressed: " + reason);
  // The user's model and hardware, not the harness's matches; its hardware notes describe the
  // published rows' machines, so they go.
  run.erase("measured");
  run["model"] = model_json;
  run["hardware"] = opt.hardware;
  run["name"] = "imported from torchtitan config " + std::filesystem::path(config_path).filename().string();
  Json kept = Json::array();
  for (const auto& a : run.value("assumptions", Json::array())) {
    if (!a.is_string() || a.get<std::string>().rfind("hardware:", 0) == 0) continue;
    if (compiled_loss && a.get<std::string>().rfind("training: eager PyTorch cross-entropy", 0) == 0) continue;
    kept.push_back(a);
  }
  if (compiled_loss) {
    run["training"]["loss"] = "fused";
    kept.push_back("training: compiled cross-entropy (compile.components lists the loss)");
  }
  int64_t layer_sac = 0;  // layer-based SAC: every layer_sac-th layer fully checkpointed
  if (ac == "selective" && sac != "op") {
    layer_sac = std::atoll(sac.c_str());
    if (layer_sac <= 0) throw core::UserError("activation_checkpoint.selective_ac_option: got \"" + sac + "\"; expected \"op\" or a layer interval");
    run["parallel"]["recompute"] = "full";
    kept.push_back("parallel: layer-based selective AC every " + std::to_string(layer_sac) +
                   " layers, as full recomputation of that share of each virtual stage's layers");
    // The checkpointed layers are wrapped as full AC wraps every layer (non-reentrant
    // checkpoint_wrapper), so their recomputation stops early as the harness reads full AC.
    if (compiled || !float8) {
      run["parallel"]["recompute_stops_early"] = true;
      kept.push_back("parallel: the checkpointed layers' recomputed forward stops before the MLP down projection (non-reentrant "
                     "checkpoint, or torch.compile's partitioner), as under full AC");
    }
  }
  if (pp > 1 && schedule == "GPipe") run["parallel"]["schedule"] = "gpipe";
  if (pp > 1 && (schedule == "ZBVZeroBubble" || schedule == "DualPipeV")) {
    run["parallel"]["schedule"] = schedule == "DualPipeV" ? "dualpipev" : "zbv";
    run["parallel"]["vpp"] = 2;
  }
  if (pp > 1 && schedule == "InterleavedZeroBubble") {
    run["parallel"]["schedule"] = "zb-h1";
    run["parallel"].erase("vpp");
    kept.push_back("parallel: " + schedule + " as ZB-H1 (stepcast's zero-bubble schedules are ZB-H1 and ZB-V)");
  }
  // The model parts' modules, where the config lists them: the split exactly (virtual stages in
  // model order, pp of them per looped or V round).
  if (const Json* parts = t.get("parallelism", "module_fqns_per_model_part"); parts != nullptr && pp > 1) {
    if (!parts->is_array() || parts->empty() || parts->size() % static_cast<size_t>(pp) != 0) {
      throw core::UserError("parallelism.module_fqns_per_model_part: expected a list of module-name lists, a multiple of pipeline_parallel_degree " +
                            std::to_string(pp) + " of them");
    }
    Json counts = Json::array();
    for (const auto& part : *parts) {
      if (!part.is_array()) throw core::UserError("parallelism.module_fqns_per_model_part: each model part is a list of module names");
      int64_t n = 0;
      for (const auto& fqn : part) {
        if (!fqn.is_string()) throw core::UserError("parallelism.module_fqns_per_model_part: got " + fqn.dump() + "; expected module names");
        n += fqn.get<std::string>().rfind("layers.", 0) == 0 ? 1 : 0;
      }
      counts.push_back(n);
    }
    auto& par = run["parallel"];
    par.erase("first_stage_layers");
    par.erase("last_stage_layers");
    par["stage_layers"] = counts;
    if (parts->size() > static_cast<size_t>(pp)) {
      par["vpp"] = static_cast<int64_t>(parts->size()) / pp;
    } else {
      par.erase("vpp");
    }
  }
  // torch's context_parallel rotates K/V by all-gather (the harness's reading) or around the
  // ring of peers (alltoall).
  if (const std::string rotate = t.word("parallelism", "context_parallel_rotate_method", "allgather"); cp > 1 && rotate == "alltoall") {
    run["parallel"]["cp_comm"] = "ring";
  } else if (rotate != "allgather" && rotate != "alltoall") {
    throw core::UserError("parallelism.context_parallel_rotate_method: got \"" + rotate + "\"; expected allgather or alltoall");
  }
  if (const std::string reshard = t.word("parallelism", "fsdp_reshard_after_forward", "default"); reshard == "never" || reshard == "always") {
    run["parallel"]["reshard_after_forward"] = reshard == "always";
  } else if (reshard != "default") {
    throw core::UserError("parallelism.fsdp_reshard_after_forward: got \"" + reshard + "\"; expected default, always or never");
  }
  if (layer_sac > 0) {
    const int64_t vstages = pp * run["parallel"].value("vpp", int64_t{1});
    run["parallel"]["recompute_layers"] = std::max<int64_t>(1, m.num_layers / (layer_sac * vstages));
  }
  run["assumptions"] = kept;
  if (optimizer == "sgd") run["training"]["optimizer"] = "sgd";
  run.erase("notes");  // the harness's
  config::note_ignored(run, t.unread());
  return run;
}

config::RunConfig as_torchtitan_runs_it(const config::RunConfig& rc, const Json& model_json) {
  const config::ExportedConfig cfg = config::export_torchtitan(rc);
  const config::ImportOptions opt = config::runtime_import_options(rc, model_json);
  const Json imported = import_torchtitan(config::parse_toml(config::toml_text(cfg), "<export>"), "<export>", opt);
  return config::with_own_hardware(config::parse_run(imported, "<torchtitan runtime>", ""), rc);
}

}  // namespace stepcast::accuracy
