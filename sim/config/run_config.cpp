#include "sim/config/run_config.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <limits>
#include <map>
#include <numeric>

namespace stepcast::config {

using core::Issues;
using core::Json;
using core::ObjectReader;

std::string to_string(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kSelectiveOp: return "selective-op";
    case Recompute::kFull: return "full";
  }
  return "?";
}

const std::vector<std::string>& recompute_module_names() {
  static const std::vector<std::string> names = {"core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts"};
  return names;
}

std::vector<std::string> recompute_module_list(const Parallel& p) {
  std::vector<std::string> list;
  if (p.recompute != Recompute::kSelective) return list;
  const auto& names = recompute_module_names();
  for (size_t i = 0; i < names.size(); ++i) {
    if ((p.recompute_modules & (1u << i)) != 0) list.push_back(names[i]);
  }
  return list;
}

std::string recompute_label(const Parallel& p) {
  if (p.recompute == Recompute::kFull && p.recompute_layers > 0) return "full(" + std::to_string(p.recompute_layers) + ")";
  if (p.recompute == Recompute::kSelective && p.recompute_modules != kRecomputeCoreAttn) {
    std::string s;
    for (const auto& m : recompute_module_list(p)) s += (s.empty() ? "" : ",") + m;
    return "selective(" + s + ")";
  }
  return to_string(p.recompute);
}

std::string offload_label(const Parallel& p) {
  std::string s = p.offload != Offload::kNone ? to_string(p.offload) : "";
  if (p.activation_offload_layers > 0) s += (s.empty() ? "" : "+") + ("activations(" + std::to_string(p.activation_offload_layers) + ")");
  return s;
}

std::string to_string(Offload o) {
  switch (o) {
    case Offload::kNone: return "none";
    case Offload::kOptimizer: return "optimizer";
    case Offload::kParams: return "params";
  }
  return "?";
}

std::string to_string(Schedule s) {
  switch (s) {
    case Schedule::kGpipe: return "gpipe";
    case Schedule::kOneFOneB: return "1f1b";
    case Schedule::kInterleaved: return "interleaved";
    case Schedule::kZbH1: return "zb-h1";
    case Schedule::kZbV: return "zbv";
    case Schedule::kDualPipeV: return "dualpipev";
  }
  return "?";
}

std::string to_string(AttentionImpl a) {
  switch (a) {
    case AttentionImpl::kFlash: return "flash";
    case AttentionImpl::kFlash2: return "flash2";
    case AttentionImpl::kTriton: return "triton";
    case AttentionImpl::kUnfused: return "unfused";
  }
  return "?";
}

std::string to_string(CpComm c) {
  switch (c) {
    case CpComm::kRing: return "ring";
    case CpComm::kAllGather: return "allgather";
    case CpComm::kUlysses: return "ulysses";
    case CpComm::kRotateAllGather: return "rotate-allgather";
  }
  return "?";
}

std::string to_string(Optimizer o) { return o == Optimizer::kAdam ? "adam" : "sgd"; }

const std::vector<std::string>& lora_target_names() {
  static const std::vector<std::string> names{"qkv", "o_proj", "fc1", "fc2"};
  return names;
}

std::vector<std::string> lora_target_list(uint32_t targets) {
  std::vector<std::string> out;
  const auto& names = lora_target_names();
  for (size_t i = 0; i < names.size(); ++i) {
    if ((targets & (1u << i)) != 0) out.push_back(names[i]);
  }
  return out;
}

std::string lora_label(const Lora& lora) {
  if (!lora.enabled()) return "none";
  std::string s = "rank " + std::to_string(lora.rank) + " on ";
  const auto targets = lora_target_list(lora.targets);
  for (size_t i = 0; i < targets.size(); ++i) s += (i > 0 ? ", " : "") + targets[i];
  return lora.nf4 ? s + " (nf4 base)" : s;
}

uint32_t lora_target_of(std::string_view name) {
  if (name.starts_with("shared.")) name.remove_prefix(7);
  if (name == "qkv" || name == "q_proj" || name == "q_down" || name == "q_up" || name == "kv_down" || name == "kv_up") return kLoraQkv;
  if (name == "o_proj") return kLoraOProj;
  if (name == "fc1") return kLoraFc1;
  if (name == "fc2") return kLoraFc2;
  return 0;
}

namespace {

constexpr int64_t kMaxDim = int64_t{1} << 24;

std::string n(int64_t v) { return std::to_string(v); }

void parse_cluster(ObjectReader r, RunConfig& rc) {
  auto g = r.get_int("num_gpus", 1, kMaxDim);
  if (!g && !r.has("num_gpus")) r.issues().add(r.child_path("num_gpus"), "required integer is missing");
  rc.cluster.num_gpus = g.value_or(0);
  rc.cluster.gpus_per_node = r.get_int("gpus_per_node", 1, 1024, 0);
  r.finish();
}

// A JSON list of names (non-empty, checked by the caller) as bits in the order of `names`: an
// unknown name or one listed twice is an issue at its index.
uint32_t name_bits(const Json& list, const std::vector<std::string>& names, const std::string& path, const std::string& allowed,
                   core::Issues& issues) {
  uint32_t bits = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& x = list[i];
    const std::string at = path + "[" + std::to_string(i) + "]";
    const auto it = x.is_string() ? std::find(names.begin(), names.end(), x.get<std::string>()) : names.end();
    if (it == names.end()) {
      issues.add(at, "got " + x.dump() + "; allowed: " + allowed);
      continue;
    }
    const uint32_t bit = 1u << static_cast<uint32_t>(it - names.begin());
    if ((bits & bit) != 0) issues.add(at, "\"" + *it + "\" is listed twice");
    bits |= bit;
  }
  return bits;
}

void parse_lora(ObjectReader r, Lora& l) {
  l.rank = r.require_int("rank", 1, 65536);
  const auto& names = lora_target_names();
  std::string allowed;
  for (const auto& x : names) allowed += (allowed.empty() ? "" : ", ") + x;
  if (const Json* tj = r.get_raw("targets"); tj != nullptr) {
    const std::string path = r.child_path("targets");
    if (!tj->is_array() || tj->empty()) {
      r.issues().add(path, "must be a non-empty list of linear layers (" + allowed + ")");
    } else {
      l.targets = name_bits(*tj, names, path, allowed, r.issues());
    }
  } else {
    l.targets = kLoraQkv | kLoraOProj | kLoraFc1 | kLoraFc2;
  }
  l.nf4 = r.get_choice("base_quantization", {"none", "nf4"}, "none") == "nf4";
  r.finish();
}

void parse_training(ObjectReader r, RunConfig& rc) {
  auto& t = rc.training;
  t.seq_len = r.require_int("seq_len", 1, kMaxDim);
  t.global_batch_size = r.require_int("global_batch_size", 1, kMaxDim);
  t.precision = hw::dtype_from_string(r.get_choice("precision", {"bf16", "fp16", "fp8", "fp32"}, "bf16"));
  t.optimizer = r.get_choice("optimizer", {"adam", "sgd"}, "adam") == "adam" ? Optimizer::kAdam : Optimizer::kSgd;
  t.grad_dtype = hw::dtype_from_string(r.get_choice("grad_dtype", {"bf16", "fp16", "fp32"},
                                                    t.precision == hw::Dtype::kFp32 ? "fp32" : "bf16"));
  t.master_weights = r.get_bool("master_weights", true);
  const auto attn = r.get_choice("attention", {"flash", "flash2", "triton", "unfused"}, "flash");
  t.attention = attn == "flash"    ? AttentionImpl::kFlash
                : attn == "flash2" ? AttentionImpl::kFlash2
                : attn == "triton" ? AttentionImpl::kTriton
                                   : AttentionImpl::kUnfused;
  t.dropout = r.get_bool("dropout", false);
  t.fp32_logits = r.get_bool("fp32_logits", true);
  // Weights default to the compute dtype (16-bit for fp8 training, whose GEMMs cast per use).
  const char* weight_dtype = t.precision == hw::Dtype::kFp32 ? "fp32" : t.precision == hw::Dtype::kFp16 ? "fp16" : "bf16";
  t.param_dtype = hw::dtype_from_string(r.get_choice("param_dtype", {"bf16", "fp16", "fp32"}, weight_dtype));
  t.gather_dtype = hw::dtype_from_string(r.get_choice("gather_dtype", {"fp8", "bf16", "fp16", "fp32"}, weight_dtype));
  if (t.gather_dtype == hw::Dtype::kFp8 && t.precision != hw::Dtype::kFp8) {
    r.issues().add(r.child_path("gather_dtype"), "got \"fp8\"; gathering fp8 weights (float8 all-gather) needs precision fp8");
  }
  t.reduce_dtype = hw::dtype_from_string(r.get_choice("reduce_dtype", {"bf16", "fp16", "fp32"}, hw::to_string(t.grad_dtype)));
  t.loss = r.get_choice("loss", {"fused", "eager"}, "fused") == "eager" ? LossImpl::kEager : LossImpl::kFused;
  t.lp_grads = r.get_bool("lp_grads", false);
  t.fused_elementwise = r.get_bool("fused_elementwise", true);
  t.repeat_kv = r.get_bool("repeat_kv", false);
  t.mtp_layers = r.get_int("mtp_layers", 0, 16).value_or(0);
  t.fp8_saved_inputs = r.get_bool("fp8_saved_inputs", t.precision == hw::Dtype::kFp8);
  if (t.fp8_saved_inputs && t.precision != hw::Dtype::kFp8) {
    r.issues().add(r.child_path("fp8_saved_inputs"), "got true; saving linear-layer inputs in fp8 needs precision fp8");
  }
  t.fp8_tp_gather = r.get_bool("fp8_tp_gather", t.precision == hw::Dtype::kFp8);
  if (t.fp8_tp_gather && t.precision != hw::Dtype::kFp8) {
    r.issues().add(r.child_path("fp8_tp_gather"), "got true; gathering fp8 activations needs precision fp8");
  }
  t.fp8_norm_quantize = r.get_bool("fp8_norm_quantize", t.precision == hw::Dtype::kFp8);
  if (t.fp8_norm_quantize && t.precision != hw::Dtype::kFp8) {
    r.issues().add(r.child_path("fp8_norm_quantize"), "got true; a norm writing fp8 linear inputs needs precision fp8");
  }
  // How the framework handles fp8 weights: a property of the framework, so a run file keeps it
  // when a what-if sets another precision (it applies under fp8 only).
  if (r.get_raw("fp8_weights") != nullptr) {
    const auto w = r.get_choice("fp8_weights", {"primary", "cached", "cast"}, "primary");
    t.fp8_weights = w == "cached" ? Fp8Weights::kCached : w == "cast" ? Fp8Weights::kCast : Fp8Weights::kPrimary;
  }
  if (const Json* lj = r.get_raw("lora"); lj != nullptr) parse_lora(ObjectReader(*lj, r.child_path("lora"), r.issues()), t.lora);
  if (auto d = r.get_int("packed_document_tokens", 1, kMaxDim); d) {
    t.packed_document_tokens = *d;
    if (t.seq_len > 0 && *d > t.seq_len) {
      r.issues().add(r.child_path("packed_document_tokens"),
                     "got " + n(*d) + "; a packed document cannot be longer than the sequence (seq_len " + n(t.seq_len) + ")");
    }
  }
  r.finish();
}

void parse_moe(ObjectReader r, MoeRouting& m) {
  m.given = true;
  const auto d = r.get_choice("dispatcher", {"alltoall", "allgather", "flex"}, "alltoall");
  m.dispatcher = d == "allgather" ? MoeDispatcher::kAllGather : d == "flex" ? MoeDispatcher::kFlex : MoeDispatcher::kAllToAll;
  m.capacity_factor = r.get_number("capacity_factor", 0.01, 1000.0, 0.0);
  m.pad_to_capacity = r.get_bool("pad_to_capacity", false);
  if (m.pad_to_capacity && m.capacity_factor <= 0 && !r.has("capacity_factor")) {
    r.issues().add(r.child_path("pad_to_capacity"), "needs capacity_factor (padding is to the expert capacity; dropless routing has none)");
  }
  if (m.pad_to_capacity && m.dispatcher == MoeDispatcher::kFlex) {
    r.issues().add(r.child_path("pad_to_capacity"),
                   "the flex dispatcher (DeepEP / HybridEP) does not pad to capacity (Megatron-Core refuses it); use dispatcher "
                   "\"alltoall\" or drop tokens without padding");
  }
  if (const Json* ij = r.get_raw("imbalance"); ij != nullptr) {
    if (ij->is_number()) {
      m.max_over_mean = r.get_number("imbalance", 1.0, 1000.0, 1.0);
    } else {
      ObjectReader ir(*ij, r.child_path("imbalance"), r.issues());
      m.sigma = ir.require_number("sigma", 0.0, 5.0);
      m.seed = static_cast<uint64_t>(ir.get_int("seed", 0, std::numeric_limits<int32_t>::max(), 1));
      ir.finish();
    }
  }
  const auto ov = r.get_choice("overlap", {"none", "shared-experts", "micro-batch"}, "none");
  m.overlap = ov == "shared-experts" ? MoeRouting::Overlap::kSharedExperts
              : ov == "micro-batch"  ? MoeRouting::Overlap::kMicroBatch
                                     : MoeRouting::Overlap::kNone;
  m.max_nodes_per_token = r.get_int("max_nodes_per_token", 0, 1 << 20, 0);
  if (auto overhead = r.get_duration("expert_overhead", false, 1.0); overhead) m.expert_overhead = overhead->value();
  r.finish();
}

std::vector<int64_t> int_list(const Json& j, const std::string& path, Issues& issues);

void parse_parallel(ObjectReader r, RunConfig& rc) {
  auto& p = rc.parallel;
  p.tp = r.get_int("tp", 1, 1024, 1);
  p.pp = r.get_int("pp", 1, 4096, 1);
  p.dp = r.get_int("dp", 1, kMaxDim, 0);  // 0 = derive
  p.cp = r.get_int("cp", 1, 1024, 1);
  p.ep = r.get_int("ep", 1, 4096, 1);
  p.etp_given = r.has("etp");
  p.etp = r.get_int("etp", 1, 1024, 0);  // 0 = tp
  p.vpp = r.get_int("vpp", 1, 1024, 1);
  p.sp = r.get_bool("sp", false);
  p.micro_batch_size = r.get_int("micro_batch_size", 1, kMaxDim, 1);
  p.zero_stage = static_cast<int>(r.get_int("zero_stage", 0, 3, 0));
  p.fsdp = r.get_bool("fsdp", false);
  p.dp_replicate = r.get_int("dp_replicate", 1, kMaxDim, 1);
  p.reshard_after_forward = r.get_bool("reshard_after_forward", true);
  // A property of the framework, like reshard_after_forward: it applies to the layouts that
  // shard parameters (fsdp or zero_stage 3), so a planner search keeps it across the others.
  p.fsdp_copy_out = r.get_bool("fsdp_copy_out", false);
  p.zero3_flat_collectives = r.get_bool("zero3_flat_collectives", false);
  p.zero3_recompute_regather = r.get_bool("zero3_recompute_regather", false);
  const auto rec = r.get_choice("recompute", {"none", "selective", "selective-op", "full"}, "none");
  p.recompute = rec == "full"           ? Recompute::kFull
                : rec == "selective"    ? Recompute::kSelective
                : rec == "selective-op" ? Recompute::kSelectiveOp
                                        : Recompute::kNone;
  p.recompute_layers = r.get_int("recompute_layers", 0, 1 << 20, 0);  // 0: every layer
  // A property of the framework's full recomputation: without a recompute mode (a planner base,
  // which searches the modes) it applies to the full-recompute layouts; with another mode given
  // it would mean nothing.
  p.recompute_stops_early = r.get_bool("recompute_stops_early", false);
  if (p.recompute_stops_early && p.recompute != Recompute::kFull && r.get_raw("recompute") != nullptr) {
    r.issues().add(r.child_path("recompute_stops_early"),
                   "got true; it says where full recomputation stops, and needs recompute \"full\" (got \"" + rec + "\")");
  }
  if (p.recompute_layers > 0 && p.recompute != Recompute::kFull) {
    r.issues().add(r.child_path("recompute_layers"),
                   "got " + std::to_string(p.recompute_layers) + "; recomputing a number of layers needs recompute \"full\" (got \"" + rec + "\")");
  }
  if (const Json* mods = r.get_raw("recompute_modules"); mods != nullptr) {
    const std::string path = r.child_path("recompute_modules");
    const auto& names = recompute_module_names();
    std::string allowed;
    for (const auto& n : names) allowed += (allowed.empty() ? "" : ", ") + n;
    if (p.recompute != Recompute::kSelective) {
      r.issues().add(path, "recompute modules need recompute \"selective\" (got \"" + rec + "\")");
    } else if (!mods->is_array() || mods->empty()) {
      r.issues().add(path, "must be a non-empty list of module names (" + allowed + ")");
    } else {
      p.recompute_modules = name_bits(*mods, names, path, allowed, r.issues());
    }
  }
  const bool has_schedule = r.has("schedule");
  const auto sch = r.get_choice("schedule", {"gpipe", "1f1b", "interleaved", "zb-h1", "zbv", "dualpipev"}, "1f1b");
  p.schedule = sch == "gpipe" ? Schedule::kGpipe
               : sch == "interleaved" ? Schedule::kInterleaved
               : sch == "zb-h1" ? Schedule::kZbH1
               : sch == "zbv" ? Schedule::kZbV
               : sch == "dualpipev" ? Schedule::kDualPipeV
                                : Schedule::kOneFOneB;
  if (!has_schedule && p.vpp > 1) p.schedule = Schedule::kInterleaved;
  p.bucket_mb = r.get_number("bucket_mb", 0.001, 1e6, 25.0);
  p.bucket_layout = r.get_choice("bucket_layout", {"ddp", "megatron"}, "ddp") == "megatron" ? BucketLayout::kMegatron : BucketLayout::kDdp;
  p.first_stage_layers = r.get_int("first_stage_layers", 0, 100000, -1);
  p.last_stage_layers = r.get_int("last_stage_layers", 0, 100000, -1);
  if (const Json* sj = r.get_raw("stage_layers"); sj != nullptr) {
    p.stage_layer_list = int_list(*sj, r.child_path("stage_layers"), r.issues());
    if (sj->is_array() && sj->empty()) r.issues().add(r.child_path("stage_layers"), "is empty; give the layers of every virtual stage, or omit it");
  }
  if (const Json* lj = r.get_raw("pipeline_layout"); lj != nullptr) p.pipeline_layout = *lj;
  p.embedding_slot = r.get_bool("account_for_embedding_in_pipeline_split", false);
  p.loss_slot = r.get_bool("account_for_loss_in_pipeline_split", false);
  // Transformer Engine / Megatron's cp_comm_type names are accepted as they are: p2p (the
  // ring), all_gather and a2a (Ulysses).
  std::string cpc = r.get_choice("cp_comm", {"ring", "allgather", "ulysses", "rotate-allgather", "p2p", "all_gather", "a2a"}, "ring");
  if (cpc == "p2p") cpc = "ring";
  if (cpc == "all_gather") cpc = "allgather";
  if (cpc == "a2a") cpc = "ulysses";
  for (const CpComm c : {CpComm::kRing, CpComm::kAllGather, CpComm::kUlysses, CpComm::kRotateAllGather}) {
    if (to_string(c) == cpc) p.cp_comm = c;
  }
  p.cp_load_balance = r.get_bool("cp_load_balance", true);
  p.cp_overlap = r.get_bool("cp_overlap", true);
  if (const Json* mj = r.get_raw("moe"); mj != nullptr) parse_moe(ObjectReader(*mj, r.child_path("moe"), r.issues()), p.moe);
  p.tp_comm_overlap = r.get_bool("tp_comm_overlap", false);
  p.tp_overlap_input_grad = r.get_bool("tp_overlap_input_grad", true);
  if (!p.tp_overlap_input_grad && !p.tp_comm_overlap) {
    r.issues().add(r.child_path("tp_overlap_input_grad"), "got false; it says which TP collectives overlap, and needs parallel.tp_comm_overlap true");
  }
  p.tp_async_backward = r.get_bool("tp_async_backward");
  if (p.tp_async_backward.value_or(false) && p.tp_comm_overlap) {
    r.issues().add(r.child_path("tp_async_backward"),
                   "got true with parallel.tp_comm_overlap true; the comm-overlap kernels already schedule the backward's TP collectives, so set one of the two");
  }
  p.grad_reduce_overlap = r.get_bool("grad_reduce_overlap", true);
  p.param_gather_overlap = r.get_bool("param_gather_overlap", true);
  p.comm_high_priority = r.get_bool("comm_high_priority", false);
  if (const Json* aj = r.get_raw("param_gather_align"); aj != nullptr) {
    if (aj->is_boolean()) {
      p.param_gather_align = aj->get<bool>() ? Parallel::GatherAlign::kAlways : Parallel::GatherAlign::kNever;
    } else if (aj->is_string() && aj->get<std::string>() == "interleaved") {
      p.param_gather_align = Parallel::GatherAlign::kInterleaved;
    } else {
      r.issues().add(r.child_path("param_gather_align"), "got " + core::show(*aj) + "; give true, false or \"interleaved\" (aligned only under the interleaved schedule)");
    }
  }
  p.no_sync = r.get_bool("no_sync", true);
  p.keep_stage_outputs = r.get_bool("keep_stage_outputs", false);
  p.recv_buffer_per_microbatch = r.get_bool("recv_buffer_per_microbatch", false);
  const auto so = r.get_choice("keep_step_outputs", {"none", "last-stage", "all-stages"}, "none");
  p.keep_step_outputs = so == "last-stage" ? StepOutputs::kLastStage : so == "all-stages" ? StepOutputs::kAllStages : StepOutputs::kNone;
  p.tp_saves_gathered_input = r.get_bool("tp_saves_gathered_input", false);
  p.pp_send_full_activation = r.get_bool("pp_send_full_activation", false);
  p.pp_rendezvous = r.get_bool("pp_rendezvous", false);
  const auto off = r.get_choice("offload", {"none", "optimizer", "params"}, "none");
  p.offload = off == "optimizer" ? Offload::kOptimizer : off == "params" ? Offload::kParams : Offload::kNone;
  p.activation_offload_layers = r.get_int("activation_offload_layers", 0, 1 << 20, 0);
  r.finish();
}

// Expands a layout string's repeats from position i up to the end or the ')' that closes a
// group opened by the caller; `err` says what is wrong (positions count from 0).
std::string expand_layout(const std::string& s, size_t& i, int depth, std::string& err) {
  const bool in_group = depth > 0;
  constexpr size_t kMaxModules = 1u << 20;
  std::string out;
  while (i < s.size() && err.empty()) {
    const char c = s[i];
    if (c == ' ' || c == ',') {  // separators for reading ("(tt|)*30,L")
      ++i;
      continue;
    }
    if (c == ')') {
      if (!in_group) err = "')' at position " + std::to_string(i) + " closes no '('";
      ++i;
      return out;
    }
    std::string unit;
    const size_t at = i;
    if (c == '(') {
      if (depth >= 32) {
        err = "'(' at position " + std::to_string(i) + " nests groups deeper than 32";
        break;
      }
      ++i;
      unit = expand_layout(s, i, depth + 1, err);
      if (err.empty() && (i > s.size() || s[i - 1] != ')')) err = "'(' at position " + std::to_string(at) + " is not closed";
    } else if (c == 'E' || c == 't' || c == 'm' || c == 'L' || c == '|') {
      unit = std::string(1, c);
      ++i;
    } else {
      err = std::string("'") + c + "' at position " + std::to_string(i) +
            " is not a module; allowed: E (embedding), t (transformer layer), m (multi-token-prediction layer), L (loss), '|' between "
            "virtual stages, X*N and (...)*N to repeat";
    }
    if (!err.empty()) break;
    while (i < s.size() && s[i] == ' ') ++i;
    if (i < s.size() && s[i] == '*') {
      const size_t star = i++;
      size_t n = 0, digits = 0;
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])) != 0 && n <= kMaxModules) n = n * 10 + static_cast<size_t>(s[i++] - '0'), ++digits;
      if (digits == 0 || n == 0) {
        err = "'*' at position " + std::to_string(star) + " needs a repeat count of at least 1";
        break;
      }
      if (n > kMaxModules || unit.size() * n > kMaxModules) {
        err = "the repeat at position " + std::to_string(star) + " makes more than " + std::to_string(kMaxModules) + " modules";
        break;
      }
      std::string rep;
      for (size_t k = 0; k < n; ++k) rep += unit;
      unit = std::move(rep);
    }
    out += unit;
    if (out.size() > kMaxModules) err = "the layout makes more than " + std::to_string(kMaxModules) + " modules";
  }
  if (err.empty() && in_group) {
    err = "a '(' is not closed";
    i = s.size() + 1;
  }
  return out;
}

// The transformer layers of every virtual stage from a Megatron pipeline layout, checked
// against the run (false: an issue was added).
bool layout_stage_layers(const Json& given, int64_t vstages, int64_t num_layers, int64_t mtp_layers, const Parallel& p,
                         std::vector<int64_t>& vs, Issues& issues) {
  const std::string key = "$.parallel.pipeline_layout";
  const PipelineLayout lay = parse_pipeline_layout(given);
  if (!lay.error.empty()) {
    issues.add(key, lay.error);
    return false;
  }
  const int64_t n = static_cast<int64_t>(lay.stages.size());
  if (n != vstages) {
    issues.add(key, "has " + std::to_string(n) + " virtual stages; expected pp*vpp = " + std::to_string(p.pp) + "*" + std::to_string(p.vpp) + " = " +
                        std::to_string(vstages));
    return false;
  }
  vs = lay.layers();
  const int64_t layers = std::accumulate(vs.begin(), vs.end(), int64_t{0});
  int64_t mtp = 0, embeddings = 0, losses = 0;
  bool ok = true;
  for (int64_t v = 0; v < n; ++v) {
    const std::string& st = lay.stages[static_cast<size_t>(v)];
    const auto count = [&](char c) { return static_cast<int64_t>(std::count(st.begin(), st.end(), c)); };
    mtp += count('m');
    embeddings += count('E');
    losses += count('L');
    if (count('E') > 0 && v != 0) {
      issues.add(key, "virtual stage " + std::to_string(v) + " holds the embedding (E); it belongs to the first virtual stage");
      ok = false;
    }
    if ((count('L') > 0 || count('m') > 0) && v != n - 1) {
      issues.add(key, "virtual stage " + std::to_string(v) + " holds " + (count('L') > 0 ? "the loss (L)" : "a multi-token-prediction layer (m)") +
                          "; stepcast runs the MTP layers and the loss on the last virtual stage");
      ok = false;
    }
    if (count('t') == 0 && v > 0 && v < n - 1) {
      issues.add(key, "virtual stage " + std::to_string(v) + " holds no transformer layer (t); only the first and the last may");
      ok = false;
    }
  }
  if (embeddings != 1 || losses != 1) {
    issues.add(key, "needs the embedding (E) and the loss (L) once each (got " + std::to_string(embeddings) + " and " + std::to_string(losses) + ")");
    ok = false;
  }
  if (mtp != mtp_layers) {
    issues.add(key, "has " + std::to_string(mtp) + " multi-token-prediction layers (m); training.mtp_layers is " + std::to_string(mtp_layers));
    ok = false;
  }
  if (layers != num_layers) {
    issues.add(key, "has " + std::to_string(layers) + " transformer layers (t); the model has num_layers " + std::to_string(num_layers));
    ok = false;
  }
  return ok;
}

std::vector<int64_t> int_list(const Json& j, const std::string& path, Issues& issues) {
  std::vector<int64_t> out;
  if (!j.is_array()) {
    issues.add(path, "expected an array of non-negative integers, got " + j.dump());
    return out;
  }
  for (size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_number_integer() || j[i].get<int64_t>() < 0) {
      issues.add(path + "[" + std::to_string(i) + "]", "expected a non-negative integer, got " + j[i].dump());
    } else {
      out.push_back(j[i].get<int64_t>());
    }
  }
  return out;
}

void parse_scenario(ObjectReader r, RunConfig& rc) {
  auto& sc = rc.scenario;
  sc.present = true;
  if (const Json* sj = r.get_raw("slowdown"); sj != nullptr) {
    const Json list = sj->is_array() ? *sj : Json::array({*sj});
    if (list.empty()) r.issues().add(r.child_path("slowdown"), "is empty; give one {factor, ranks or stages} object or more, or omit it");
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string path = r.child_path("slowdown") + (sj->is_array() ? "[" + std::to_string(i) + "]" : "");
      ObjectReader sr(list[i], path, r.issues());
      Slowdown sd;
      sd.factor = sr.require_number("factor", 0.01, 1000.0);
      // A list that names nothing, or a rank twice, is a mistake, not a request.
      auto members = [&](const char* key) {
        std::vector<int64_t> v;
        const Json* j = sr.get_raw(key);
        if (j == nullptr) return v;
        v = int_list(*j, sr.child_path(key), r.issues());
        if (j->is_array() && j->empty()) r.issues().add(sr.child_path(key), "is empty; name one or more, or omit it");
        std::vector<int64_t> sorted = v;
        std::sort(sorted.begin(), sorted.end());
        if (const auto d = std::adjacent_find(sorted.begin(), sorted.end()); d != sorted.end()) {
          r.issues().add(sr.child_path(key), std::to_string(*d) + " is listed twice");
        }
        return v;
      };
      sd.ranks = members("ranks");
      sd.stages = members("stages");
      if (!sr.has("ranks") && !sr.has("stages")) r.issues().add(path, "names no ranks and no stages to slow down");
      sr.finish();
      sc.slowdowns.push_back(sd);
    }
  }
  if (const Json* jj = r.get_raw("jitter"); jj != nullptr) {
    ObjectReader jr(*jj, r.child_path("jitter"), r.issues());
    sc.jitter_cv = jr.require_number("cv", 0.0, 1.0);
    sc.seed = static_cast<uint64_t>(jr.get_int("seed", 0, std::numeric_limits<int32_t>::max(), 1));
    jr.finish();
  }
  if (const Json* dj = r.get_raw("degraded_link"); dj != nullptr) {
    ObjectReader dr(*dj, r.child_path("degraded_link"), r.issues());
    sc.degraded_rank = dr.require_int("rank", 0, kMaxDim);
    sc.degraded_factor = dr.require_number("bandwidth_factor", 0.001, 1.0);
    dr.finish();
  }
  if (const Json* qj = r.get_raw("seq_len_distribution"); qj != nullptr) {
    ObjectReader qr(*qj, r.child_path("seq_len_distribution"), r.issues());
    sc.seq_dist = qr.get_choice("kind", {"uniform", "lognormal"}, "uniform");
    if (sc.seq_dist == "uniform") {
      sc.seq_min = static_cast<double>(qr.require_int("min", 1, kMaxDim));
      sc.seq_max = static_cast<double>(qr.require_int("max", 1, kMaxDim));
      if (sc.seq_max < sc.seq_min && sc.seq_max > 1) qr.issues().add(qr.child_path("max"), "must be at least min");
    } else {
      sc.seq_median = static_cast<double>(qr.require_int("median", 1, kMaxDim));
      sc.seq_sigma = qr.require_number("sigma", 0.0, 5.0);
    }
    sc.seq_seed = static_cast<uint64_t>(qr.get_int("seed", 0, std::numeric_limits<int32_t>::max(), 1));
    qr.finish();
  }
  if (const Json* hj = r.get_raw("host_work"); hj != nullptr) {
    ObjectReader hr(*hj, r.child_path("host_work"), r.issues());
    sc.host_rank = hr.get_int("rank", 0, kMaxDim, 0);
    auto d = hr.get_duration("time", false);
    if (!d && !hr.has("time")) hr.issues().add(hr.child_path("time"), "required duration (\"50ms\" or seconds)");
    if (d && d->value() > 86400.0) {
      hr.issues().add(hr.child_path("time"), "got " + core::fmt("%g", d->value()) + " s; host work before a step is at most a day (86400 s)");
      d.reset();
    }
    sc.host_seconds = d ? d->value() : 0.0;
    hr.finish();
  }
  r.finish();
}

}  // namespace

void derive_and_validate(RunConfig& rc, Issues& issues) {
  auto& p = rc.parallel;
  const auto& m = rc.model;
  const auto& t = rc.training;
  if (rc.cluster.gpus_per_node == 0) rc.cluster.gpus_per_node = rc.hardware.gpus_per_node;
  if (rc.cluster.num_gpus <= 0 || m.num_layers <= 0 || m.heads <= 0) return;  // already reported

  if (rc.cluster.num_gpus > rc.cluster.gpus_per_node && !rc.hardware.network.stated) {
    issues.add("$.hardware.network", "required: the cluster spans " + std::to_string((rc.cluster.num_gpus + rc.cluster.gpus_per_node - 1) / rc.cluster.gpus_per_node) +
                                         " nodes and the profile '" + rc.hardware.name + "' gives no scale-out network (nic_bandwidth, nics_per_node)");
  }
  if (rc.cluster.num_gpus > rc.cluster.gpus_per_node && rc.cluster.num_gpus % rc.cluster.gpus_per_node != 0) {
    issues.add("$.cluster.num_gpus", "got " + n(rc.cluster.num_gpus) + "; a multi-node cluster needs whole nodes (a multiple of gpus_per_node = " + n(rc.cluster.gpus_per_node) + ")");
  }
  // A job may use part of a node (64 GPUs of a 72-GPU NVLink domain), never more than it has.
  if (rc.cluster.gpus_per_node > rc.hardware.gpus_per_node) {
    issues.add("$.cluster.gpus_per_node", "got " + n(rc.cluster.gpus_per_node) + "; the hardware's node (its NVLink or PCIe domain) holds " +
                                              n(rc.hardware.gpus_per_node) + " GPUs");
  }

  // World size arithmetic: world = tp * cp * dp * pp.
  const int64_t model_parallel = p.tp * p.cp * p.pp;
  if (p.dp == 0) {
    if (rc.cluster.num_gpus % model_parallel != 0) {
      issues.add("$.parallel", "num_gpus " + n(rc.cluster.num_gpus) + " is not divisible by tp*cp*pp = " + n(p.tp) + "*" + n(p.cp) + "*" + n(p.pp) + " = " + n(model_parallel) + "; dp cannot be derived");
      return;
    }
    p.dp = rc.cluster.num_gpus / model_parallel;
  } else if (model_parallel * p.dp != rc.cluster.num_gpus) {
    issues.add("$.parallel.dp", "tp*cp*dp*pp = " + n(p.tp) + "*" + n(p.cp) + "*" + n(p.dp) + "*" + n(p.pp) + " = " + n(model_parallel * p.dp) + " but cluster.num_gpus = " + n(rc.cluster.num_gpus));
    return;
  }
  if (p.etp == 0) p.etp = p.tp;

  // Tensor parallel divisibility.
  if (m.heads % p.tp != 0) {
    issues.add("$.parallel.tp", "got " + n(p.tp) + "; must divide num_attention_heads (" + n(m.heads) + ")");
  }
  if (!m.mla.enabled() && m.kv_heads % p.tp != 0 && p.tp % m.kv_heads != 0) {
    issues.add("$.parallel.tp", "got " + n(p.tp) + "; must divide num_key_value_heads (" + n(m.kv_heads) + ") or be a multiple of it");
  }
  const bool dense_mlps = m.hybrid() ? m.layer_pattern.find('-') != std::string::npos : m.num_layers > m.num_moe_layers();
  if (m.ffn_hidden % p.tp != 0 && dense_mlps) {
    issues.add("$.parallel.tp", "got " + n(p.tp) + "; must divide intermediate_size (" + n(m.ffn_hidden) + ")");
  }
  if (m.linear.enabled() && !m.mixer_pattern.empty()) {
    // Gated DeltaNet: key and value heads split over TP.
    if (m.linear.k_heads % p.tp != 0) {
      issues.add("$.parallel.tp", "got " + n(p.tp) + "; must divide the Gated DeltaNet key heads (" + n(m.linear.k_heads) + ")");
    }
    // Context parallelism in Megatron-Core's head-parallel mode hands each CP rank whole heads.
    if (p.cp > 1 && m.linear.k_heads % p.tp == 0 && (m.linear.k_heads / p.tp) % p.cp != 0) {
      issues.add("$.parallel.cp", "got " + n(p.cp) + "; Gated DeltaNet context parallelism splits heads over cp: cp must divide the " +
                                      n(m.linear.k_heads / p.tp) + " key heads per TP rank");
    }
    if (p.recompute == Recompute::kSelectiveOp) {
      issues.add("$.parallel.recompute", "got \"selective-op\"; op-level selective checkpointing is not modelled for Gated DeltaNet layers; use none, selective or full");
    }
  }
  if (m.mamba.enabled()) {
    // Megatron-Core's MambaMixer splits the heads and the B/C groups over TP.
    if (m.mamba.heads % p.tp != 0 || m.mamba.groups % p.tp != 0) {
      issues.add("$.parallel.tp", "got " + n(p.tp) + "; must divide the Mamba-2 heads (" + n(m.mamba.heads) + ") and groups (" +
                                      n(m.mamba.groups) + ")");
    }
    // Context parallelism (Megatron-Core's all-to-all form) hands each CP rank whole heads of
    // the whole sequence: cp must divide the heads per TP rank, and divide or be a multiple of
    // the groups per TP rank.
    if (p.cp > 1 && m.mamba.heads % p.tp == 0 && m.mamba.groups % p.tp == 0) {
      const int64_t heads = m.mamba.heads / p.tp, groups = m.mamba.groups / p.tp;
      if (heads % p.cp != 0 || (groups % p.cp != 0 && p.cp % groups != 0)) {
        issues.add("$.parallel.cp", "got " + n(p.cp) + "; Mamba-2 context parallelism splits heads over cp: cp must divide the " + n(heads) +
                                        " heads per TP rank and divide or be a multiple of its " + n(groups) + " groups");
      }
    }
    if (p.recompute == Recompute::kSelectiveOp) {
      issues.add("$.parallel.recompute", "got \"selective-op\"; op-level selective checkpointing (torchtitan) is not modelled for Mamba-2 layers; use none, selective or full");
    }
  }
  if (p.tp > rc.cluster.gpus_per_node) {
    issues.add("$.parallel.tp", "got " + n(p.tp) + "; tensor parallelism must stay inside one node (" + n(rc.cluster.gpus_per_node) + " GPUs)");
  }
  const int64_t vocab_multiple = 128 * p.tp;
  rc.padded_vocab = (m.vocab + vocab_multiple - 1) / vocab_multiple * vocab_multiple;

  // Context parallel.
  if (p.cp > 1) {
    const int64_t chunks = p.cp_comm == CpComm::kUlysses ? p.cp : 2 * p.cp;
    if (t.seq_len % chunks != 0) {
      issues.add("$.parallel.cp", "got " + n(p.cp) + "; seq_len " + n(t.seq_len) + " must divide into " + n(chunks) + " equal chunks");
    }
    // Ulysses trades the sequence split for a head split: each CP rank needs whole KV heads.
    const int64_t kv_local = m.mla.enabled() ? m.heads / p.tp : std::max<int64_t>(1, m.kv_heads / std::max<int64_t>(1, p.tp));
    if (p.cp_comm == CpComm::kUlysses && kv_local % p.cp != 0) {
      issues.add("$.parallel.cp", "got " + n(p.cp) + "; Ulysses splits heads over cp, so cp must divide the key/value heads per TP rank (" + n(kv_local) + ")");
    }
  }

  // Expert parallel.
  if (m.moe.enabled()) {
    if (m.moe.num_experts % p.ep != 0) {
      issues.add("$.parallel.ep", "got " + n(p.ep) + "; must divide the number of experts (" + n(m.moe.num_experts) + ")");
    }
    if ((p.dp * p.cp * p.tp) % (p.ep * p.etp) != 0) {
      issues.add("$.parallel.ep", "ep*etp = " + n(p.ep) + "*" + n(p.etp) + " must divide tp*dp*cp = " + n(p.tp * p.dp * p.cp));
    }
    if (m.moe.expert_ffn % p.etp != 0) {
      issues.add("$.parallel.etp", "got " + n(p.etp) + "; must divide moe_intermediate_size (" + n(m.moe.expert_ffn) + ")");
    }
  } else {
    if (p.ep > 1) issues.add("$.parallel.ep", "got " + n(p.ep) + "; the model has no experts (dense), so ep must be 1");
    if (p.etp_given && p.etp != p.tp) {
      issues.add("$.parallel.etp", "got " + n(p.etp) + "; expert tensor parallelism applies to expert layers and the model is dense (omit etp)");
    }
  }
  // Recompute modules the model does not have would silently do nothing.
  {
    const uint32_t moe_mods = kRecomputeMoeAct | kRecomputeMoe | kRecomputeSharedExperts;
    if (!m.moe.enabled() && (p.recompute_modules & moe_mods) != 0) {
      issues.add("$.parallel.recompute_modules", "names MoE modules (moe_act, moe, shared_experts) but the model has no experts");
    } else if (m.moe.enabled() && m.moe.shared_experts == 0 && (p.recompute_modules & kRecomputeSharedExperts) != 0) {
      issues.add("$.parallel.recompute_modules", "names shared_experts but the model has no shared experts");
    }
    if (!m.mla.enabled() && (p.recompute_modules & kRecomputeMlaUpProj) != 0) {
      issues.add("$.parallel.recompute_modules", "names mla_up_proj but the model has no multi-head latent attention");
    }
  }
  if (!m.moe.enabled() && p.moe.given) {
    issues.add("$.parallel.moe", "the model has no experts (dense); remove the moe routing block");
  }

  // Pipeline split: the layers of every virtual stage (chunk c of stage s is virtual stage
  // p.vstage(s, c)), then each stage's total.
  const int64_t L = m.num_layers;
  const int64_t vstages = p.pp * p.vpp;
  std::vector<int64_t> vs(static_cast<size_t>(vstages), 0);
  bool split_ok = true;
  const bool uneven = p.first_stage_layers >= 0 || p.last_stage_layers >= 0;
  const bool slots = p.embedding_slot || p.loss_slot;
  const bool layout = !p.pipeline_layout.is_null();
  const std::string slot_key =
      p.embedding_slot ? "$.parallel.account_for_embedding_in_pipeline_split" : "$.parallel.account_for_loss_in_pipeline_split";
  const auto& segments = m.pattern_stages;
  if (!segments.empty()) {
    // The hybrid pattern's '|' marks give the split (Megatron-Core's flexible pipeline split).
    const std::string key = "$.model.hybrid_override_pattern";
    const auto segs = static_cast<int64_t>(segments.size());
    if (layout || uneven || !p.stage_layer_list.empty() || slots) {
      issues.add(key, std::string("splits the pipeline with '|' itself; drop ") +
                          (layout ? "parallel.pipeline_layout" : uneven ? "parallel.first_stage_layers/last_stage_layers" : !p.stage_layer_list.empty() ? "parallel.stage_layers" : "the account_for_*_in_pipeline_split flags") +
                          " or the '|' marks");
      split_ok = false;
    } else if (segs != vstages) {
      issues.add(key, "has " + n(segs) + " pipeline segments (" + n(segs - 1) + " '|' marks); the layout has pp*vpp = " + n(p.pp) + "*" +
                          n(p.vpp) + " = " + n(vstages) + " virtual stages");
      split_ok = false;
    } else if (segs > 2 && std::find(segments.begin() + 1, segments.end() - 1, 0) != segments.end() - 1) {
      issues.add(key, "has an empty pipeline segment between the first and the last; every virtual stage between them needs a block");
      split_ok = false;
    } else {
      vs = segments;
    }
  } else if (layout && (uneven || !p.stage_layer_list.empty() || slots)) {
    issues.add("$.parallel.pipeline_layout", std::string("gives the split itself; drop ") +
                                                 (uneven ? "first_stage_layers/last_stage_layers" : !p.stage_layer_list.empty() ? "stage_layers" : "the account_for_*_in_pipeline_split flags") +
                                                 " or the layout");
    split_ok = false;
  } else if (layout) {
    split_ok = layout_stage_layers(p.pipeline_layout, vstages, L, rc.training.mtp_layers, p, vs, issues);
  } else if (slots && (uneven || !p.stage_layer_list.empty())) {
    issues.add(slot_key, std::string("gives the split itself; drop ") + (uneven ? "first_stage_layers/last_stage_layers" : "stage_layers") +
                             " or this flag");
    split_ok = false;
  } else if (slots && p.pp == 1) {
    issues.add(slot_key, "counts the embedding or the loss as a pipeline slot, which needs pp > 1");
    split_ok = false;
  } else if (slots) {
    const int64_t extra = (p.embedding_slot ? 1 : 0) + (p.loss_slot ? 1 : 0);
    vs = slot_stage_layers(L, vstages, p.embedding_slot, p.loss_slot);
    if (vs.empty()) {
      issues.add(slot_key, "num_layers " + n(L) + " + " + n(extra) + " slot" + (extra > 1 ? "s" : "") + " = " + n(L + extra) +
                               " is not divisible by pp*vpp = " + n(p.pp) + "*" + n(p.vpp) + " = " + n(vstages));
      split_ok = false;
    }
  } else if (!p.stage_layer_list.empty()) {
    const auto& list = p.stage_layer_list;
    int64_t sum = 0;
    for (int64_t x : list) sum += x;
    if (uneven) {
      issues.add("$.parallel.stage_layers", "give either stage_layers or first_stage_layers/last_stage_layers, not both");
      split_ok = false;
    } else if (static_cast<int64_t>(list.size()) != vstages) {
      issues.add("$.parallel.stage_layers", "has " + n(static_cast<int64_t>(list.size())) + " entries; expected one per virtual stage, pp*vpp = " +
                                                n(p.pp) + "*" + n(p.vpp) + " = " + n(vstages));
      split_ok = false;
    } else if (std::any_of(list.begin(), list.end(), [&](int64_t x) { return x == 0; }) &&
               (list.size() < 2 || std::find(list.begin() + 1, list.end() - 1, 0) != list.end() - 1)) {
      // The first and last virtual stages also hold the embedding and the output head, so
      // either may hold no transformer layer (Megatron's pipeline layouts allow it).
      issues.add("$.parallel.stage_layers", "every virtual stage between the first and the last needs at least one layer");
      split_ok = false;
    } else if (sum != L) {
      issues.add("$.parallel.stage_layers", "adds up to " + n(sum) + " layers; the model has num_layers " + n(L));
      split_ok = false;
    } else {
      vs = list;
    }
  } else if (p.pp == 1) {
    if (uneven) issues.add("$.parallel.first_stage_layers", "uneven stage sizes need pp > 1");
    vs.assign(static_cast<size_t>(vstages), L / vstages);
    split_ok = L % vstages == 0;  // vpp > 1 without pp is reported below
  } else {
    // Megatron's end-stage counts, or the even split.
    std::pair<std::string, std::string> why;
    vs = end_stage_split(L, p, &why);
    if (vs.empty()) {
      issues.add(why.first, why.second);
      vs.assign(static_cast<size_t>(vstages), 0);
      split_ok = false;
    }
  }
  if (!split_ok) vs.assign(static_cast<size_t>(vstages), 0);
  if (split_ok && p.recompute_layers > 0) {
    const int64_t most = *std::max_element(vs.begin(), vs.end());
    if (p.recompute_layers > most) {
      issues.add("$.parallel.recompute_layers", "got " + n(p.recompute_layers) + "; the largest virtual stage holds " + n(most) +
                                                    " layers (recompute_layers counts the layers of each virtual stage that recompute)");
    }
  }
  if (split_ok && p.activation_offload_layers > 0) {
    const int64_t fewest = *std::min_element(vs.begin(), vs.end());
    const std::string what = "got " + n(p.activation_offload_layers) + "; ";
    if (p.vpp > 1) {
      issues.add("$.parallel.activation_offload_layers", what + "activation offload counts the first layers of a stage, so it needs vpp 1 (got vpp " + n(p.vpp) + ")");
    } else if (p.split_backward()) {
      issues.add("$.parallel.activation_offload_layers", what + "a split backward (" + to_string(p.schedule) +
                                                             ") keeps layer inputs for its weight-gradient pass after the reload; use gpipe or 1f1b");
    } else if (p.activation_offload_layers >= fewest) {
      issues.add("$.parallel.activation_offload_layers", what + "must be less than the layers of every stage (the fewest is " + n(fewest) +
                                                             "): the stage's last layer starts its backward at once, so it keeps its activations");
    }
  }
  rc.vstage_layers = vs;
  rc.vstage_first_layer.assign(static_cast<size_t>(vstages), 0);
  for (size_t i = 1; i < vs.size(); ++i) rc.vstage_first_layer[i] = rc.vstage_first_layer[i - 1] + vs[i - 1];
  rc.stage_layers.assign(static_cast<size_t>(p.pp), 0);
  for (int64_t c = 0; c < p.vpp; ++c) {
    for (int64_t s = 0; s < p.pp; ++s) rc.stage_layers[static_cast<size_t>(s)] += vs[static_cast<size_t>(p.vstage(s, c))];
  }

  // Schedules.
  if (p.schedule == Schedule::kInterleaved && p.vpp < 2) {
    issues.add("$.parallel.schedule", "interleaved needs vpp >= 2 (got vpp " + n(p.vpp) + ")");
  }
  const std::string sname = to_string(p.schedule);
  if (p.v_shape() && p.vpp != 2) {
    issues.add("$.parallel.vpp", "got " + n(p.vpp) + "; schedule \"" + sname + "\" runs two chunks per stage in a V, so it needs vpp 2");
  }
  if (p.v_shape() && p.pp < 2) issues.add("$.parallel.schedule", sname + " needs pp > 1 (got pp " + n(p.pp) + ")");
  if (p.vpp > 1 && p.schedule != Schedule::kInterleaved && !p.v_shape()) {
    issues.add("$.parallel.vpp", "got " + n(p.vpp) + "; virtual stages need schedule \"interleaved\" (or \"zbv\" or \"dualpipev\" with vpp 2)");
  }
  if (p.vpp > 1 && p.pp < 2 && !p.v_shape()) issues.add("$.parallel.vpp", "virtual pipeline stages need pp > 1");
  if (p.pp_rendezvous && p.schedule != Schedule::kOneFOneB) {
    issues.add("$.parallel.pp_rendezvous", "blocking send/receive pairs are DeepSpeed's pipeline engine, which runs 1F1B; got schedule \"" + sname + "\"");
  }

  // Batch arithmetic.
  const int64_t per_step = p.dp * p.micro_batch_size;
  if (t.global_batch_size % per_step != 0) {
    issues.add("$.training.global_batch_size",
               "got " + n(t.global_batch_size) + "; must be a multiple of dp*micro_batch_size = " + n(p.dp) + "*" + n(p.micro_batch_size) + " = " + n(per_step));
  } else {
    rc.num_microbatches = t.global_batch_size / per_step;
    if (p.schedule == Schedule::kDualPipeV && rc.num_microbatches < 2 * p.pp) {
      issues.add("$.training.global_batch_size", "dualpipev needs at least 2*pp = " + n(2 * p.pp) + " micro-batches per step (got " +
                                                     n(rc.num_microbatches) + "), one per virtual stage");
    }
    if (p.schedule == Schedule::kInterleaved && rc.num_microbatches % p.pp != 0) {
      issues.add("$.training.global_batch_size", "interleaved 1F1B needs micro-batches per step (" + n(rc.num_microbatches) + ") to be a multiple of pp (" + n(p.pp) + ")");
    }
  }

  // Sharding.
  if (p.fsdp && p.zero_stage != 0 && p.zero_stage != 3) {
    issues.add("$.parallel.zero_stage", "got " + n(p.zero_stage) + "; fsdp shards parameters, which is ZeRO stage 3 (omit zero_stage or set 3)");
  }
  if (p.dp_replicate > 1) {
    if (p.effective_zero() == 0) {
      issues.add("$.parallel.dp_replicate", "got " + n(p.dp_replicate) + "; hybrid sharding replicates sharded state, so it needs zero_stage 1-3 or fsdp (without sharding every dp rank is a replica already)");
    } else if (p.dp % p.dp_replicate != 0) {
      issues.add("$.parallel.dp_replicate", "got " + n(p.dp_replicate) + "; must divide dp (" + n(p.dp) + ") into equal replicas");
    } else if (m.moe.enabled() && (p.tp * p.dp * p.cp / std::max<int64_t>(1, p.ep * p.etp)) % p.dp_replicate != 0) {
      issues.add("$.parallel.dp_replicate", "got " + n(p.dp_replicate) + "; must divide the expert-data-parallel group tp*dp*cp/(ep*etp) = " +
                                                n(p.tp * p.dp * p.cp / std::max<int64_t>(1, p.ep * p.etp)) + " as well, which shards the routed experts");
    }
  }

  // CPU offload: the offloaded state is each rank's ZeRO shard, on the host the profile describes.
  if (p.offload != Offload::kNone) {
    const std::string what = "got \"" + to_string(p.offload) + "\"; ";
    if (p.offload == Offload::kOptimizer && p.effective_zero() == 0) {
      issues.add("$.parallel.offload", what + "offloading the optimizer moves each rank's ZeRO shard of it to the host, so it needs zero_stage 1-3 or fsdp");
    } else if (p.offload == Offload::kParams && p.effective_zero() < 3) {
      issues.add("$.parallel.offload", what + "offloading parameters needs them sharded and gathered per layer: zero_stage 3 or fsdp (got zero_stage " +
                                           n(p.effective_zero()) + "); \"optimizer\" offloads the optimizer state alone");
    } else if (!rc.hardware.host.stated) {
      issues.add("$.parallel.offload", what + "hardware '" + rc.hardware.name +
                                           "' does not describe its host (hardware.host: memory, memory_bandwidth and link per GPU); give it, e.g. "
                                           "{\"base\": \"" + rc.hardware.name + "\", \"host\": {\"memory\": \"2TiB\", \"memory_bandwidth\": \"614GB/s\", \"link\": \"44GB/s\"}}");
    }
  }

  if (p.activation_offload_layers > 0) {
    const std::string what = "got " + n(p.activation_offload_layers) + "; ";
    if (p.recompute != Recompute::kNone) {
      issues.add("$.parallel.activation_offload_layers", what + "offloaded layers keep their activations on the host instead of recomputing them, so it needs recompute \"none\" (got \"" +
                                                             recompute_label(p) + "\"; Megatron-Core refuses the combination too)");
    } else if (!rc.hardware.host.stated) {
      issues.add("$.parallel.activation_offload_layers", what + "hardware '" + rc.hardware.name +
                                                             "' does not describe its host (hardware.host: memory, memory_bandwidth and link per GPU), which holds the offloaded activations");
    }
  }

  // Precision support.
  if (!rc.hardware.has_dtype(t.precision)) {
    std::string has;
    for (const auto& [d, rate] : rc.hardware.peak) {
      if (d == hw::Dtype::kTf32) continue;  // not a training precision
      has += std::string(has.empty() ? "" : ", ") + "\"" + hw::to_string(d) + "\"";
    }
    issues.add("$.training.precision", "got \"" + hw::to_string(t.precision) + "\"; hardware '" + rc.hardware.name +
                                           "' has no dense peak for it (it has " + has + ")");
  }
  if (t.lora.nf4) {
    // QLoRA dequantizes each 4-bit weight to a 16-bit compute dtype. Under ZeRO-3 / FSDP the
    // packed 4-bit weights are sharded and gathered (FSDP-QLoRA); keeping them on the host is
    // not modelled.
    if (t.precision != hw::Dtype::kBf16 && t.precision != hw::Dtype::kFp16) {
      issues.add("$.training.lora.base_quantization", "\"nf4\" dequantizes to a 16-bit compute dtype; precision is \"" +
                                                         hw::to_string(t.precision) + "\" (use bf16 or fp16)");
    }
    if (rc.parallel.offload == Offload::kParams) {
      issues.add("$.training.lora.base_quantization", "\"nf4\" with parallel.offload \"params\" (4-bit weights on the host) is not "
                                                     "modelled; offload \"optimizer\" or none");
    }
  }
  if (t.attention != AttentionImpl::kUnfused && rc.hardware.name == "v100-sxm-32gb") {
    issues.add("$.training.attention", "flash attention kernels need Ampere or newer; use \"unfused\" on V100");
  }
  if (t.attention == AttentionImpl::kTriton && rc.hardware.efficiency.attention_triton_fwd <= 0) {
    issues.add("$.training.attention", "\"triton\": hardware profile \"" + rc.hardware.name +
                                           "\" has no measured Triton attention kernel (efficiency.attention_triton_fwd / "
                                           "attention_triton_bwd); add them to the profile, or use \"flash2\" or \"flash\"");
  }

  // Scenario targets must exist.
  const int64_t world = rc.cluster.num_gpus;
  for (size_t i = 0; i < rc.scenario.slowdowns.size(); ++i) {
    const auto& sd = rc.scenario.slowdowns[i];
    const std::string path = "$.scenario.slowdown[" + std::to_string(i) + "]";
    for (int64_t r : sd.ranks) {
      if (r >= world) issues.add(path + ".ranks", "rank " + n(r) + " does not exist (ranks 0.." + n(world - 1) + ")");
    }
    for (int64_t s : sd.stages) {
      if (s >= p.pp) issues.add(path + ".stages", "stage " + n(s) + " does not exist (pp " + n(p.pp) + ")");
    }
  }
  if (rc.scenario.degraded_rank >= world) {
    issues.add("$.scenario.degraded_link.rank", "rank " + n(rc.scenario.degraded_rank) + " does not exist (ranks 0.." + n(world - 1) + ")");
  }
  if (m.position == model::PositionKind::kLearned && m.max_positions > 0 && t.seq_len > m.max_positions) {
    issues.add("$.training.seq_len", "got " + n(t.seq_len) + "; the model learns position embeddings for " + n(m.max_positions) +
                                         " positions (n_positions / max_position_embeddings), so sequences cannot be longer");
  }
  if (rc.scenario.seq_dist == "lognormal" && rc.scenario.seq_median > static_cast<double>(t.seq_len)) {
    issues.add("$.scenario.seq_len_distribution.median", "got " + n(static_cast<int64_t>(rc.scenario.seq_median)) +
                                                             "; the median sequence cannot exceed training.seq_len (" + n(t.seq_len) + ")");
  }
  if (rc.scenario.seq_dist == "uniform" && rc.scenario.seq_max > static_cast<double>(t.seq_len)) {
    issues.add("$.scenario.seq_len_distribution.max", "got " + n(static_cast<int64_t>(rc.scenario.seq_max)) +
                                                          "; sequences cannot exceed training.seq_len (" + n(t.seq_len) + ")");
  }
  if (rc.scenario.host_rank >= world) {
    issues.add("$.scenario.host_work.rank", "rank " + n(rc.scenario.host_rank) + " does not exist (ranks 0.." + n(world - 1) + ")");
  }
}

RunConfig parse_run(const Json& j, const std::string& source_name, const std::string& base_dir, bool validate_layout) {
  Issues issues;
  RunConfig rc;
  rc.source_name = source_name;
  ObjectReader r(j, "$", issues);
  if (const Json* mj = r.get_raw("model"); mj != nullptr) {
    rc.model = model::parse_model(*mj, "$.model", issues, base_dir);
  } else {
    issues.add("$.model", "required: a zoo name, an object of model keys, or {\"path\": FILE}");
  }
  if (const Json* hj = r.get_raw("hardware"); hj != nullptr) {
    rc.hardware = hw::parse_hardware(*hj, "$.hardware", issues, base_dir);
  } else {
    issues.add("$.hardware", "required: a built-in profile name or a profile object");
  }
  if (const Json* cj = r.get_raw("cluster"); cj != nullptr) {
    parse_cluster(ObjectReader(*cj, "$.cluster", issues), rc);
  } else {
    issues.add("$.cluster", "required object with num_gpus");
  }
  if (const Json* tj = r.get_raw("training"); tj != nullptr) {
    parse_training(ObjectReader(*tj, "$.training", issues), rc);
  } else {
    issues.add("$.training", "required object with seq_len and global_batch_size");
  }
  const Json empty = Json::object();
  const Json* pj = r.get_raw("parallel");
  parse_parallel(ObjectReader(pj != nullptr ? *pj : empty, "$.parallel", issues), rc);
  if (const Json* aj = r.get_raw("assumptions"); aj != nullptr) {
    if (!aj->is_array()) {
      issues.add("$.assumptions", "expected an array of strings");
    } else {
      for (size_t i = 0; i < aj->size(); ++i) {
        const Json& a = (*aj)[i];
        if (a.is_string()) {
          rc.assumptions.push_back(a.get<std::string>());
        } else {
          issues.add("$.assumptions[" + std::to_string(i) + "]", "got " + core::show(a) + "; expected a string");
        }
      }
    }
  }
  if (const Json* sj = r.get_raw("scenario"); sj != nullptr) parse_scenario(ObjectReader(*sj, "$.scenario", issues), rc);
  (void)r.get_string("name");  // free text, but text
  (void)r.get_string("description");
  // Carried, not modelled: `notes` is text, `measured` the published run's figures (the
  // accuracy harness writes them), each a positive number.
  if (const Json* nj = r.get_raw("notes"); nj != nullptr) {
    const bool text = nj->is_string() || (nj->is_array() && std::all_of(nj->begin(), nj->end(), [](const Json& x) { return x.is_string(); }));
    if (!text) issues.add("$.notes", "got " + core::show(*nj) + "; expected a string or a list of strings");
  }
  if (const Json* mj = r.get_raw("measured"); mj != nullptr) {
    if (!mj->is_object()) {
      issues.add("$.measured", "got " + core::show(*mj) + "; expected an object of measured figures, e.g. {\"memory_gib_per_gpu\": 71.9}");
    } else {
      for (const auto& [k, v] : mj->items()) {
        if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>())) {
          issues.add("$.measured." + k, "got " + core::show(v) + "; expected a positive number");
        }
      }
    }
  }
  r.finish();
  if (issues.empty() && validate_layout) derive_and_validate(rc, issues);
  issues.throw_if_any();
  return rc;
}

RunConfig load_run_file(const std::string& path, const std::vector<std::string>& overrides) {
  Json j = core::load_json_file(path);
  core::apply_overrides(j, overrides, "--set");
  const auto parent = std::filesystem::path(path).parent_path().string();
  return parse_run(j, path, parent);
}

AttentionWidths attention_widths(const RunConfig& rc, bool expanded) {
  const auto& m = rc.model;
  const double t = static_cast<double>(rc.parallel.tp);
  const double heads_local = static_cast<double>(m.heads) / t;
  AttentionWidths w;
  if (m.mla.enabled()) {
    w.q = w.k = heads_local * static_cast<double>(m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim);
    w.v = w.out = heads_local * static_cast<double>(m.mla.v_head_dim);
    return w;
  }
  const double d = static_cast<double>(m.head_dim);
  w.q = w.out = heads_local * d;
  w.k = w.v = (expanded ? heads_local : std::max(static_cast<double>(m.kv_heads), t) / t) * d;
  return w;
}

Json with_referenced_files(Json run, const std::string& base_dir) {
  if (!run.is_object()) return run;
  for (const char* key : {"model", "hardware"}) {
    auto it = run.find(key);
    if (it == run.end() || !it->is_object() || !it->contains("path") || !(*it)["path"].is_string()) continue;
    std::filesystem::path p = (*it)["path"].get<std::string>();
    if (p.is_relative() && !base_dir.empty()) p = std::filesystem::path(base_dir) / p;
    try {
      *it = Json{{"path", p.string()}, {"content", core::load_json_file(p.string())}};
    } catch (const core::UserError&) {
      // Unreadable: parse_run names it.
    }
  }
  return run;
}

std::vector<int64_t> end_stage_split(int64_t layers, const Parallel& p, std::pair<std::string, std::string>* why) {
  const int64_t vstages = p.pp * p.vpp;
  auto fail = [&](std::string key, std::string reason) {
    if (why != nullptr) *why = {std::move(key), std::move(reason)};
    return std::vector<int64_t>{};
  };
  const int64_t first = p.first_stage_layers, last = p.last_stage_layers;
  if (first < 0 && last < 0) {
    if (vstages < 1 || layers % vstages != 0) {
      return fail(p.vpp > 1 ? "$.parallel.vpp" : "$.parallel.pp",
                  "num_layers " + n(layers) + " is not divisible by pp*vpp = " + n(p.pp) + "*" + n(p.vpp) + " = " + n(vstages) +
                      "; use first_stage_layers/last_stage_layers or stage_layers for an uneven split");
    }
    return std::vector<int64_t>(static_cast<size_t>(vstages), layers / vstages);
  }
  const std::string given = first >= 0 ? "$.parallel.first_stage_layers" : "$.parallel.last_stage_layers";
  if (p.pp < 2) return fail(given, "uneven stage sizes need pp > 1");
  const int64_t middle_stages = p.pp - (first >= 0 ? 1 : 0) - (last >= 0 ? 1 : 0);
  const int64_t rest = layers - std::max<int64_t>(first, 0) - std::max<int64_t>(last, 0);
  if (rest < 0 || (middle_stages == 0 ? rest != 0 : rest % middle_stages != 0)) {
    return fail(given, n(layers) + " layers minus first (" + n(std::max<int64_t>(first, 0)) + ") and last (" + n(std::max<int64_t>(last, 0)) +
                           ") stages leaves " + n(rest) + " layers, which do not split evenly over the other " + n(middle_stages) + " stages");
  }
  std::vector<int64_t> per_stage(static_cast<size_t>(p.pp), middle_stages > 0 ? rest / middle_stages : 0);
  if (first >= 0) per_stage.front() = first;
  if (last >= 0) per_stage.back() = last;
  // Megatron splits each stage's layers evenly over its virtual chunks.
  std::vector<int64_t> vs(static_cast<size_t>(vstages), 0);
  for (int64_t s = 0; s < p.pp; ++s) {
    const int64_t k = per_stage[static_cast<size_t>(s)];
    if (k == 0) return fail(given, "leaves stage " + n(s) + " with no layers; every stage needs at least one");
    if (k % p.vpp != 0) {
      return fail(s == 0 && first >= 0 ? "$.parallel.first_stage_layers" : s == p.pp - 1 && last >= 0 ? "$.parallel.last_stage_layers" : "$.parallel.vpp",
                  "stage " + n(s) + " would hold " + n(k) + " layers, which do not split evenly over its vpp = " + n(p.vpp) +
                      " chunks; give the layers of every virtual stage in stage_layers instead");
    }
    for (int64_t c = 0; c < p.vpp; ++c) vs[static_cast<size_t>(p.vstage(s, c))] = k / p.vpp;
  }
  return vs;
}

void Parallel::set_split(const std::vector<int64_t>& vstage_layers) {
  const bool ends_form = vpp == 1 && pp >= 3 && vstage_layers.size() == static_cast<size_t>(pp) &&
                         std::all_of(vstage_layers.begin() + 1, vstage_layers.end() - 1, [&](int64_t k) { return k == vstage_layers[1]; });
  if (ends_form) {
    set_split(vstage_layers.front(), vstage_layers.back());
  } else {
    set_split(-1, -1, vstage_layers);
  }
}

std::vector<int64_t> balanced_stage_layers(int64_t layers, int64_t stages) {
  std::vector<int64_t> out;
  const int64_t base = layers / stages;
  int64_t extra = layers % stages, used = 0;
  for (int64_t i = 0; i + 1 < stages; ++i) {
    const int64_t k = base + (i > 0 && extra > 0 ? 1 : 0);
    if (i > 0 && extra > 0) --extra;
    out.push_back(k);
    used += k;
  }
  out.push_back(layers - used);
  return out;
}

std::string megatron_layout_text(const std::vector<int64_t>& vstage_layers, int64_t mtp_layers) {
  const size_t n = vstage_layers.size();
  if (n == 0) return "";
  auto layers = [](int64_t k) { return k == 0 ? std::string() : k == 1 ? std::string("t") : "t*" + std::to_string(k); };
  std::vector<std::string> seg(n);
  for (size_t v = 0; v < n; ++v) {
    if (v == 0) seg[v] += "E";
    seg[v] += layers(vstage_layers[v]);
    if (v + 1 == n) seg[v] += std::string(static_cast<size_t>(std::max<int64_t>(0, mtp_layers)), 'm') + "L";
  }
  if (n == 1) return seg[0];
  std::string out = seg[0] + "|";
  for (size_t v = 1; v + 1 < n;) {
    size_t w = v;
    while (w + 1 < n && seg[w] == seg[v]) ++w;
    out += w - v > 1 ? "(" + seg[v] + "|)*" + std::to_string(w - v) : seg[v] + "|";
    v = w;
  }
  return out + seg[n - 1];
}

std::string pattern_with_stages(const std::string& pattern, const std::vector<int64_t>& vstage_layers) {
  std::string out;
  size_t at = 0;
  for (size_t v = 0; v < vstage_layers.size(); ++v) {
    const auto k = static_cast<size_t>(std::max<int64_t>(0, vstage_layers[v]));
    if (at + k > pattern.size()) return "";
    if (v > 0) out += '|';
    out += pattern.substr(at, k);
    at += k;
  }
  return at == pattern.size() ? out : "";
}

std::string run_length_text(const std::vector<int64_t>& counts) {
  std::string o = "[";
  for (size_t i = 0; i < counts.size();) {
    size_t j = i;
    while (j < counts.size() && counts[j] == counts[i]) ++j;
    if (i > 0) o += ", ";
    o += std::to_string(counts[i]);
    if (j - i > 1) {
      o += '*';
      o += std::to_string(j - i);
    }
    i = j;
  }
  return o + "]";
}

std::vector<int64_t> PipelineLayout::layers() const {
  std::vector<int64_t> out;
  for (const std::string& st : stages) out.push_back(static_cast<int64_t>(std::count(st.begin(), st.end(), 't')));
  return out;
}

PipelineLayout parse_pipeline_layout(const Json& layout) {
  PipelineLayout out;
  if (layout.is_string()) {
    const std::string s = layout.get<std::string>();
    size_t i = 0;
    const std::string flat = expand_layout(s, i, 0, out.error);
    if (!out.error.empty()) return out;
    out.stages.emplace_back();
    for (char c : flat) {
      if (c == '|') {
        out.stages.emplace_back();
      } else {
        out.stages.back() += c;
      }
    }
    return out;
  }
  if (!layout.is_array() || layout.empty()) {
    out.error = "got " + core::show(layout) + "; expected a layout string (\"Et|(tt|)*30mL\") or a list of virtual stages, each a list of "
                "\"embedding\", \"decoder\", \"mtp\", \"loss\"";
    return out;
  }
  static const std::map<std::string, char> kModules = {{"embedding", 'E'}, {"decoder", 't'}, {"mtp", 'm'}, {"loss", 'L'}};
  for (size_t v = 0; v < layout.size(); ++v) {
    const Json& st = layout[v];
    if (!st.is_array()) {
      out.error = "[" + std::to_string(v) + "]: got " + core::show(st) + "; expected a list of module names";
      return out;
    }
    std::string mods;
    for (size_t k = 0; k < st.size(); ++k) {
      const auto it = st[k].is_string() ? kModules.find(st[k].get<std::string>()) : kModules.end();
      if (it == kModules.end()) {
        out.error = "[" + std::to_string(v) + "][" + std::to_string(k) + "]: got " + core::show(st[k]) + "; allowed: \"embedding\", \"decoder\", \"mtp\", \"loss\"";
        return out;
      }
      mods += it->second;
    }
    out.stages.push_back(std::move(mods));
  }
  return out;
}

std::vector<int64_t> slot_stage_layers(int64_t layers, int64_t stages, bool embedding_slot, bool loss_slot) {
  const int64_t total = layers + (embedding_slot ? 1 : 0) + (loss_slot ? 1 : 0);
  if (stages < 2 || total % stages != 0) return {};
  std::vector<int64_t> out(static_cast<size_t>(stages), total / stages);
  if (embedding_slot) --out.front();
  if (loss_slot) --out.back();
  return out;
}

bool megatron_end_stages(int64_t layers, int64_t pp, int64_t& first, int64_t& last) {
  if (pp < 3) return false;
  const int64_t per = (layers + pp - 1) / pp;
  const int64_t ends = layers - per * (pp - 2);
  if (ends < 2 || ends > 2 * per) return false;
  first = ends / 2;
  last = ends - first;
  return true;
}

bool RunConfig::full_recompute_layer(int64_t layer) const {
  if (parallel.recompute != Recompute::kFull) return false;
  if (parallel.recompute_layers <= 0) return true;
  // Virtual stages hold consecutive layers in pipeline order: the last one starting at or
  // before this layer holds it.
  const auto it = std::upper_bound(vstage_first_layer.begin(), vstage_first_layer.end(), layer);
  const int64_t first = it == vstage_first_layer.begin() ? 0 : *(it - 1);
  return layer - first < parallel.recompute_layers;
}

bool RunConfig::activation_offloaded(int64_t layer) const {
  if (parallel.activation_offload_layers <= 0 || layer < 0 || layer >= model.num_layers) return false;
  const auto it = std::upper_bound(vstage_first_layer.begin(), vstage_first_layer.end(), layer);
  const int64_t first = it == vstage_first_layer.begin() ? 0 : *(it - 1);
  return layer - first < parallel.activation_offload_layers;
}

bool RunConfig::partial_recompute() const {
  if (parallel.recompute != Recompute::kFull || parallel.recompute_layers <= 0) return false;
  return std::any_of(vstage_layers.begin(), vstage_layers.end(), [&](int64_t n) { return n > parallel.recompute_layers; });
}

std::vector<int64_t> RunConfig::stage_layer_ids(int64_t stage) const {
  std::vector<int64_t> out;
  for (int64_t c = 0; c < parallel.vpp; ++c) {
    const int64_t first = chunk_first_layer(stage, c);
    for (int64_t i = 0; i < chunk_layers(stage, c); ++i) out.push_back(first + i);
  }
  return out;
}

}  // namespace stepcast::config
