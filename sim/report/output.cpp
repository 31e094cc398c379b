#include "sim/report/output.hpp"

#include "sim/estimate/workload.hpp"

#include <algorithm>
#include <functional>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace stepcast::report {

using core::Json;

const char* tool_version() { return "0.1.0"; }

std::string content_hash(const std::string& text) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 1099511628211ULL;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

Json ledger_json(const memory::MemoryLedger& l) {
  Json stages = Json::array();
  for (const auto& s : l.stages) {
    stages.push_back({{"stage", s.stage},
                      {"layers", s.layers},
                      {"params_per_gpu", s.params},
                      {"trainable_params_per_gpu", s.trainable_params()},
                      {"weights_bytes", s.weights.value()},
                      {"gradients_bytes", s.gradients.value()},
                      {"optimizer_bytes", s.optimizer.value()},
                      {"activations_bytes", s.activations.value()},
                      {"activation_per_layer_bytes", s.activation_per_layer.value()},
                      {"inflight_microbatches", s.inflight_microbatches},
                      {"transient_bytes", s.transient.value()},
                      {"logits_bytes", s.logits.value()},
                      {"kept_outputs_bytes", s.kept_outputs.value()},
                      {"buffers_bytes", s.buffers.value()},
                      {"host_bytes", s.host.value()},
                      {"runtime_bytes", s.runtime.value()},
                      {"nccl_bytes", s.nccl.value()},
                      {"nccl_communicators", s.communicators + s.pair_communicators},
                      {"nccl_alltoall_peers", s.alltoall_peers},
                      {"total_bytes", s.total().value()}});
  }
  return {{"stages", stages},
          {"capacity_bytes", l.capacity.value()},
          {"peak_stage", l.peak_stage},
          {"peak_bytes", l.peak().value()},
          {"host_per_node_bytes", l.host_per_node.value()},
          {"host_capacity_bytes", l.host_capacity.value()},
          {"fits", l.fits()}};
}

Json recompute_modules_json(const config::Parallel& p) {
  Json a = Json::array();
  for (const auto& m : config::recompute_module_list(p)) a.push_back(m);
  return a;
}

Json layout_json(const config::RunConfig& rc) {
  const auto& p = rc.parallel;
  return {{"tp", p.tp}, {"pp", p.pp}, {"dp", p.dp}, {"cp", p.cp}, {"ep", p.ep}, {"etp", p.etp},
          {"vpp", p.vpp}, {"sp", p.sp}, {"micro_batch_size", p.micro_batch_size},
          {"num_microbatches", rc.num_microbatches}, {"zero_stage", p.effective_zero()},
          {"fsdp", p.fsdp}, {"dp_replicate", p.dp_replicate}, {"recompute", config::to_string(p.recompute)},
          {"recompute_layers", p.recompute_layers}, {"recompute_modules", recompute_modules_json(p)},
          {"schedule", config::to_string(p.schedule)}, {"offload", config::to_string(p.offload)},
          {"activation_offload_layers", p.activation_offload_layers}};
}

Json run_summary_json(const config::RunConfig& rc) {
  Json out = {{"model", rc.model.name},
          {"params", rc.model.total_params()},
          {"active_params", rc.model.active_params()},
          {"hardware", rc.hardware.name},
          {"num_gpus", rc.cluster.num_gpus},
          {"gpus_per_node", rc.cluster.gpus_per_node},
          {"seq_len", rc.training.seq_len},
          {"global_batch_size", rc.training.global_batch_size},
          {"precision", hw::to_string(rc.training.precision)},
          {"layout", layout_json(rc)},
          {"assumptions", rc.assumptions}};
  // Fine-tuning settings, present only when set (the summary of other runs is unchanged).
  const auto& lora = rc.training.lora;
  if (lora.enabled()) {
    out["lora"] = {{"rank", lora.rank}, {"targets", config::lora_target_list(lora.targets)}, {"base_quantization", lora.nf4 ? "nf4" : "none"}};
  }
  if (rc.training.packed_document_tokens > 0) out["packed_document_tokens"] = rc.training.packed_document_tokens;
  return out;
}

Json provenance_json(const std::string& command) {
  return {{"schema_version", kSchemaVersion}, {"tool", "stepcast"}, {"tool_version", tool_version()}, {"command", command}};
}

Json breakdown_json(const estimate::Breakdown& b) {
  return {{"compute_s", b.compute}, {"recompute_s", b.recompute}, {"host_s", b.host},
          {"exposed_comm_s", b.exposed_comm}, {"bubble_s", b.bubble},    {"optimizer_s", b.optimizer}};
}

Json estimate_json(const config::RunConfig& rc, const estimate::StepEstimate& e, const std::string& command) {
  const Json br = breakdown_json(e.breakdown);
  Json out = {{"run", run_summary_json(rc)},
              {"step_time_s", e.step_time_s},
              {"tokens_per_s", e.tokens_per_s},
              {"tokens_per_s_per_gpu", e.tokens_per_s_per_gpu},
              {"mfu", e.mfu},
              {"hfu", e.hfu},
              {"tflops_per_gpu", e.tflops_per_gpu},
              {"model_flops_per_step", e.model_flops_per_step},
              {"bubble_fraction", e.bubble_fraction},
              {"pipeline_time_s", e.pipeline_time_s},
              {"peak_memory_bytes", e.memory.peak().value()},
              {"fits", e.memory.fits()},
              {"memory", ledger_json(e.memory)},
              {"breakdown", br}};
  out["input_hash"] = content_hash(out["run"].dump());
  out.update(provenance_json(command));
  return out;
}

namespace {
std::string gib(core::Bytes b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", b.value() / (1024.0 * 1024.0 * 1024.0));
  return buf;
}
}  // namespace

std::string ledger_table(const config::RunConfig& rc, const memory::MemoryLedger& l) {
  std::ostringstream o;
  o << "memory per GPU (GiB) for " << rc.model.name << " on " << rc.cluster.num_gpus << "x " << rc.hardware.name
    << " (tp " << rc.parallel.tp << ", pp " << rc.parallel.pp << ", dp " << rc.parallel.dp << ", cp " << rc.parallel.cp
    << ", zero " << rc.parallel.effective_zero()
    << (rc.parallel.dp_replicate > 1 ? " in " + std::to_string(rc.parallel.dp_replicate) + " replicas" : std::string())
    << (config::offload_label(rc.parallel).empty() ? std::string() : ", offload " + config::offload_label(rc.parallel))
    << ", recompute " << config::recompute_label(rc.parallel) << ")\n";
  // The kept-outputs column appears only for runtimes that keep stage outputs until the step ends.
  const bool kept = std::any_of(l.stages.begin(), l.stages.end(), [](const auto& s) { return s.kept_outputs.value() > 0; });
  char line[256];
  std::snprintf(line, sizeof line, "%-6s %6s %9s %9s %9s %11s %8s %9s %8s%s%s %8s %8s %9s\n", "stage", "layers", "weights",
                "grads", "optim", "activations", "in-flt", "transient", "logits", kept ? " " : "", kept ? "    kept" : "",
                "buffers", "runtime", "total");
  o << line;
  for (const auto& s : l.stages) {
    std::snprintf(line, sizeof line, "%-6lld %6lld %9s %9s %9s %11s %8lld %9s %8s%s%8s %8s %8s %9s\n",
                  static_cast<long long>(s.stage), static_cast<long long>(s.layers), gib(s.weights).c_str(),
                  gib(s.gradients).c_str(), gib(s.optimizer).c_str(), gib(s.activations).c_str(),
                  static_cast<long long>(s.inflight_microbatches), gib(s.transient).c_str(), gib(s.logits).c_str(),
                  kept ? " " : "", kept ? gib(s.kept_outputs).c_str() : "", gib(s.buffers).c_str(), gib(s.runtime).c_str(),
                  gib(s.total()).c_str());
    o << line;
  }
  if (kept) o << "kept: stage outputs held from their forward until the step ends (parallel.keep_step_outputs)\n";
  const auto& pk = l.stages[static_cast<size_t>(l.peak_stage)];
  if (rc.training.lora.enabled()) {
    // What trains per GPU on the peak stage: the adapters, against the frozen base beside them.
    char buf[200];
    std::snprintf(buf, sizeof buf, "LoRA rank %lld: %.1fM trainable parameters per GPU on stage %lld of %.2fB (%.2f%%); the base is frozen",
                  static_cast<long long>(rc.training.lora.rank), pk.trainable_params() / 1e6, static_cast<long long>(pk.stage),
                  pk.params / 1e9, pk.params > 0 ? 100.0 * pk.trainable_params() / pk.params : 0.0);
    o << buf << (rc.training.lora.nf4 ? " and stored in 4-bit NF4 (transformer layers)\n" : "\n");
  }
  if (pk.nccl.value() > 0) {
    o << "runtime on stage " << pk.stage << ": CUDA context " << gib(pk.runtime - pk.nccl) << " GiB + NCCL buffers "
      << gib(pk.nccl) << " GiB (" << pk.communicators + pk.pair_communicators << " communicators";
    if (pk.alltoall_peers > 0) o << ", all-to-all buffers for " << pk.alltoall_peers << " peers";
    o << ")\n";
  }
  if (!config::offload_label(rc.parallel).empty()) {
    // The offloaded state: per GPU on each stage, and a node's GPUs together against its host.
    o << "host memory (offload " << config::offload_label(rc.parallel) << "), GiB per GPU:";
    for (const auto& s : l.stages) o << " stage " << s.stage << " " << gib(s.host);
    o << "; per node " << gib(l.host_per_node) << " of " << gib(l.host_capacity) << ": "
      << (l.host_fits() ? "fits" : "DOES NOT FIT") << "\n";
  }
  const double over = l.peak().value() - l.capacity.value();
  o << "peak " << gib(l.peak()) << " GiB on stage " << l.peak_stage << " of " << gib(l.capacity) << " GiB: ";
  if (over <= 0) {
    o << "fits (" << gib(core::Bytes(-over)) << " GiB free)\n";
    if (-over < memory::kAllocatorReserve * l.capacity.value()) {
      o << "note: under " << static_cast<int>(100 * memory::kAllocatorReserve)
        << "% of the GPU's memory stays free; PyTorch runs reserve up to ~16% beyond live tensors (caching allocator), so the run may "
           "not fit in practice\n";
    }
  } else {
    o << "DOES NOT FIT, over by " << gib(core::Bytes(over)) << " GiB\n";
    if (const std::string hint = memory::fit_hint(rc); !hint.empty()) o << hint << "\n";
  }
  return o.str();
}

namespace {

const char* op_kind_name(estimate::OpKind k) {
  switch (k) {
    case estimate::OpKind::kGemm: return "gemm";
    case estimate::OpKind::kAttention: return "attention";
    case estimate::OpKind::kElementwise: return "memory";
    case estimate::OpKind::kComm: return "comm";
    case estimate::OpKind::kHost: return "host";
  }
  return "?";
}

struct LayerKind {
  std::string name;
  const estimate::LayerCost* cost;
};

std::vector<LayerKind> layer_kinds(const config::RunConfig& rc, const estimate::WorkloadBuilder& wb) {
  std::vector<LayerKind> kinds;
  if (rc.model.mixed()) {
    // A hybrid model's blocks: "mamba layer", "attention layer", "mlp layer", "moe layer".
    for (const auto& k : rc.model.layer_kinds()) kinds.push_back({k.label() + " layer", &wb.kind_cost(k)});
  } else {
    if (rc.model.num_layers > rc.model.num_moe_layers()) kinds.push_back({"dense layer", &wb.dense_layer()});
    if (rc.model.moe.enabled()) kinds.push_back({"MoE layer", &wb.moe_layer()});
  }
  kinds.push_back({"embedding", &wb.embedding()});
  kinds.push_back({"output layer + loss", &wb.output_layer()});
  return kinds;
}

// Time an op holds its pass for: compute ops their time; communication what compute does not hide.
double op_pass_seconds(const estimate::Op& o) {
  if (o.kind != estimate::OpKind::kComm) return o.time.value();
  return std::max(0.0, o.time.value() - o.hidden_by.value());
}

}  // namespace

core::Json operator_json(const config::RunConfig& rc) {
  const estimate::WorkloadBuilder wb(rc);
  const double peak = rc.hardware.peak_for(rc.training.precision).value();
  core::Json out = core::Json::object();
  for (const auto& k : layer_kinds(rc, wb)) {
    core::Json kind = core::Json::object();
    for (const auto& [pass, ops] : {std::pair{"forward", &k.cost->fwd}, std::pair{"backward", &k.cost->bwd}}) {
      core::Json list = core::Json::array();
      for (const auto& o : *ops) {
        core::Json j = {{"name", o.name}, {"kind", op_kind_name(o.kind)}, {"time_s", o.time.value()}};
        if (o.kind == estimate::OpKind::kComm) {
          j["comm"] = estimate::to_string(o.comm);
          j["bytes"] = o.bytes.value();
          j["hidden_s"] = std::min(o.time.value(), o.hidden_by.value());
        } else {
          j["model_flops"] = o.flops.value();
          if (o.kind == estimate::OpKind::kElementwise) j["bytes"] = o.bytes.value();
          if (o.time.value() > 0 && o.flops.value() > 0) j["fraction_of_peak"] = o.flops.value() / o.time.value() / peak;
        }
        list.push_back(j);
      }
      kind[pass] = list;
    }
    out[k.name] = kind;
  }
  return out;
}

std::string operator_table(const config::RunConfig& rc) {
  const estimate::WorkloadBuilder wb(rc);
  const double peak = rc.hardware.peak_for(rc.training.precision).value();
  std::ostringstream o;
  char line[256];
  o << "operators of one micro-batch on one rank: " << rc.model.name << " on " << rc.hardware.name << " (" << wb.tokens()
    << " tokens; % of peak against the " << hw::to_string(rc.training.precision) << " dense peak)\n";
  for (const auto& k : layer_kinds(rc, wb)) {
    for (const auto& [pass, ops] : {std::pair{"forward", &k.cost->fwd}, std::pair{"backward", &k.cost->bwd}}) {
      double total = 0;
      for (const auto& op : *ops) total += op_pass_seconds(op);
      if (ops->empty()) continue;
      std::snprintf(line, sizeof line, "\n%s, %s: %.1f us\n", k.name.c_str(), pass, total * 1e6);
      o << line;
      o << "  operator                      kind          time us   share   TFLOP/s  % peak     GB/s  note\n";
      for (const auto& op : *ops) {
        const double t = op.time.value();
        const double share = total > 0 ? op_pass_seconds(op) / total : 0.0;
        std::string rate = "        -       -", bw = "       -", note;
        if (op.kind != estimate::OpKind::kComm && t > 0 && op.flops.value() > 0) {
          std::snprintf(line, sizeof line, "%9.1f %6.1f%%", op.flops.value() / t / 1e12, 100.0 * op.flops.value() / t / peak);
          rate = line;
        }
        if ((op.kind == estimate::OpKind::kElementwise || op.kind == estimate::OpKind::kComm) && t > 0 && op.bytes.value() > 0) {
          std::snprintf(line, sizeof line, "%8.0f", op.bytes.value() / t / 1e9);
          bw = line;
        }
        if (op.kind == estimate::OpKind::kComm) {
          std::snprintf(line, sizeof line, "%s, %.0f%% hidden", estimate::to_string(op.comm), t > 0 ? 100.0 * std::min(t, op.hidden_by.value()) / t : 0.0);
          note = line;
        }
        std::snprintf(line, sizeof line, "  %-29s %-10s %10.1f %6.1f%% %s %s  %s\n", op.name.c_str(), op_kind_name(op.kind), t * 1e6,
                      100.0 * share, rate.c_str(), bw.c_str(), note.c_str());
        o << line;
      }
    }
  }
  return o.str();
}

std::string estimate_table(const config::RunConfig& rc, const estimate::StepEstimate& e) {
  std::ostringstream o;
  char line[256];
  o << "analytical estimate: " << rc.model.name << " on " << rc.cluster.num_gpus << "x " << rc.hardware.name << "\n";
  std::snprintf(line, sizeof line,
                "  layout       tp %lld  pp %lld  dp %lld  cp %lld  ep %lld  vpp %lld  mbs %lld  m %lld  %s  zero %d%s%s  recompute %s\n",
                static_cast<long long>(rc.parallel.tp), static_cast<long long>(rc.parallel.pp),
                static_cast<long long>(rc.parallel.dp), static_cast<long long>(rc.parallel.cp),
                static_cast<long long>(rc.parallel.ep), static_cast<long long>(rc.parallel.vpp),
                static_cast<long long>(rc.parallel.micro_batch_size), static_cast<long long>(rc.num_microbatches),
                config::to_string(rc.parallel.schedule).c_str(), rc.parallel.effective_zero(),
                rc.parallel.dp_replicate > 1 ? (" in " + std::to_string(rc.parallel.dp_replicate) + " replicas").c_str() : "",
                config::offload_label(rc.parallel).empty() ? "" : ("  offload " + config::offload_label(rc.parallel)).c_str(),
                config::recompute_label(rc.parallel).c_str());
  o << line;
  // An uneven pipeline split: the transformer layers of every virtual stage.
  if (std::adjacent_find(rc.vstage_layers.begin(), rc.vstage_layers.end(), std::not_equal_to<>()) != rc.vstage_layers.end()) {
    o << "  split        layers per virtual stage " << config::run_length_text(rc.vstage_layers) << "\n";
  }
  std::snprintf(line, sizeof line, "  step time    %.4f s\n  tokens/s     %.0f (%.1f per GPU)\n  MFU          %.1f%% (HFU %.1f%%), %.1f model TFLOP/s per GPU\n  bubble       %.1f%% of the pipeline\n",
                e.step_time_s, e.tokens_per_s, e.tokens_per_s_per_gpu, 100 * e.mfu, 100 * e.hfu, e.tflops_per_gpu,
                100 * e.bubble_fraction);
  o << line;
  std::snprintf(line, sizeof line, "  peak memory  %.2f GiB of %.2f GiB (%s)\n", e.memory.peak().value() / 1073741824.0,
                e.memory.capacity.value() / 1073741824.0, e.memory.fits() ? "fits" : "DOES NOT FIT");
  o << line;
  // Six significant digits; rounding residue of a timeline difference (below a picosecond, the
  // simulator's tick) prints as 0.
  auto sec = [](double v) {
    if (std::abs(v) < 1e-12) return std::string("0");
    char b[32];
    std::snprintf(b, sizeof b, "%.6g", v);
    return std::string(b);
  };
  o << "  breakdown (s): compute " << sec(e.breakdown.compute) << " (recompute " << sec(e.breakdown.recompute);
  if (e.breakdown.host > 0) o << ", host " << sec(e.breakdown.host);
  o << "), bubble " << sec(e.breakdown.bubble) << ", optimizer " << sec(e.breakdown.optimizer) << ", exposed comm:";
  for (const auto& [k, v] : e.breakdown.exposed_comm) o << " " << k << " " << sec(v);
  o << "\n";
  return o.str();
}

}  // namespace stepcast::report
