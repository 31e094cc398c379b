#include "sim/config/framework_export.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "sim/config/framework_import.hpp"
#include "sim/core/error.hpp"
#include "sim/core/units.hpp"

namespace stepcast::config {

using core::Json;

namespace {

std::string num(int64_t v) { return std::to_string(v); }

std::string refusal(const std::string& field, const std::string& why) { return field + ": " + why; }

// An exported config's start: the framework's refusal (empty: none) as one error naming the
// export, else the config for the run's model with no tables yet.
ExportedConfig start_config(const RunConfig& rc, const char* framework, const std::string& refused) {
  if (!refused.empty()) throw core::UserError(std::string("export ") + framework + ": " + refused);
  ExportedConfig out;
  out.framework = framework;
  out.model = rc.model.name;
  out.tables = Json::object();
  return out;
}

}  // namespace

// LoRA runs come from a fine-tuning recipe (NeMo / Megatron-Bridge PEFT, Hugging Face PEFT in
// the training script), which none of the exported configs describes.
static std::string lora_refusal(const RunConfig& rc, const std::string& who) {
  if (!rc.training.lora.enabled()) return "";
  return refusal("training.lora", "rank " + std::to_string(rc.training.lora.rank) + "; " + who +
                                      " trains every parameter, and LoRA adapters come from the fine-tuning recipe (PEFT), not from this config");
}

std::string megatron_refusal(const RunConfig& rc) {
  const auto& m = rc.model;
  const auto& p = rc.parallel;
  const auto& t = rc.training;
  if (std::string why = lora_refusal(rc, "pretrain_gpt.py"); !why.empty()) return why;
  if (m.hybrid() || !m.mixer_pattern.empty() || m.mamba.enabled() || m.linear.enabled()) {
    return refusal("model", "'" + m.name + "' has Mamba or linear-attention layers; pretrain_gpt.py builds attention layers only (export the layout by hand for pretrain_mamba.py)");
  }
  if (m.sliding_window > 0 || m.attention_chunk > 0) {
    return refusal("model", "'" + m.name + "' uses sliding-window or chunked attention, which these arguments do not describe");
  }
  if (m.position == model::PositionKind::kAlibi) return refusal("model", "'" + m.name + "' uses ALiBi positions, which Megatron-LM's GPT model does not offer");
  if (m.embedding_norm) return refusal("model", "'" + m.name + "' normalizes its token embeddings (BLOOM style), which Megatron-LM's GPT model does not");
  if (m.shared_block_norm) {
    return refusal("model", "'" + m.name + "' runs attention and the MLP side by side behind one norm (GPT-J / Phi / Falcon parallel blocks), which Megatron-LM's GPT layer does not");
  }
  if (m.head_bias || (m.linear_bias && (!m.qkv_linear_bias || !m.out_linear_bias))) {
    return refusal("model", "'" + m.name + "' has biases on some linear layers and not others (a biased LM head, or attention without them), which --disable-bias-linear / --add-qkv-bias cannot state");
  }
  if (!m.moe.dense_layers.empty() || (m.moe.enabled() && m.moe.layer_freq > 1 && m.moe.layer_offset != 0)) {
    return refusal("model", "'" + m.name + "' places its MoE layers in a pattern --moe-layer-freq cannot state here (an interval from layer 0, or dense first layers)");
  }
  switch (p.schedule) {
    case Schedule::kOneFOneB:
    case Schedule::kInterleaved: break;
    default:
      return refusal("parallel.schedule", "got " + to_string(p.schedule) + "; Megatron-LM runs 1f1b and interleaved (1f1b with vpp > 1)");
  }
  if (p.schedule == Schedule::kInterleaved && p.vpp <= 1) return refusal("parallel.vpp", "the interleaved schedule needs vpp > 1");
  if (p.pp_rendezvous && p.pp > 1) {
    return refusal("parallel.pp_rendezvous", "blocking send/receive pairs are DeepSpeed's pipeline engine; Megatron-LM posts its pipeline transfers as batched isend/irecv");
  }
  if (p.offload != Offload::kNone) return refusal("parallel.offload", "got " + to_string(p.offload) + "; CPU offload of the optimizer or parameters is not exported");
  if (p.cp_comm == CpComm::kRotateAllGather && p.cp > 1) return refusal("parallel.cp_comm", "rotate-allgather is PyTorch's context_parallel, not Transformer Engine's");
  if (p.recompute == Recompute::kSelectiveOp) return refusal("parallel.recompute", "selective-op is torchtitan's per-operator checkpointing; Megatron-LM's selective recomputation takes modules");
  if (t.precision != hw::Dtype::kBf16 && t.precision != hw::Dtype::kFp16 && t.precision != hw::Dtype::kFp8 && t.precision != hw::Dtype::kFp32) {
    return refusal("training.precision", "got " + hw::to_string(t.precision) + "; Megatron-LM trains in bf16, fp16, fp8 or fp32");
  }
  if (t.precision != hw::Dtype::kFp32 && t.grad_dtype != hw::Dtype::kFp32 && t.grad_dtype != hw::Dtype::kBf16) {
    return refusal("training.grad_dtype", "got " + hw::to_string(t.grad_dtype) + "; Megatron-LM reduces gradients in fp32 or bf16");
  }
  return "";
}

std::string torchtitan_refusal(const RunConfig& rc) {
  const auto& m = rc.model;
  const auto& p = rc.parallel;
  const auto& t = rc.training;
  if (std::string why = lora_refusal(rc, "torchtitan"); !why.empty()) return why;
  if (p.zero_stage == 1 || p.zero_stage == 2) {
    return refusal("parallel.zero_stage", "got " + std::to_string(p.zero_stage) + "; torchtitan shards data parallelism with FSDP2 (ZeRO-3, parallel.fsdp) or replicates it");
  }
  if (p.recompute == Recompute::kSelective) {
    return refusal("parallel.recompute", "selective recomputation of modules is Megatron's; torchtitan checkpoints per operator (selective-op), every n-th layer, or all layers (full)");
  }
  if (p.cp > 1 && p.cp_comm != CpComm::kRing && p.cp_comm != CpComm::kRotateAllGather) {
    return refusal("parallel.cp_comm", "got " + to_string(p.cp_comm) + "; torchtitan's context parallelism rotates K/V around the ring (ring, its alltoall rotation) or by all-gather (rotate-allgather)");
  }
  if (p.offload != Offload::kNone) return refusal("parallel.offload", "got " + to_string(p.offload) + "; CPU offload is not exported");
  if (p.activation_offload_layers > 0) return refusal("parallel.activation_offload_layers", "torchtitan does not offload activations");
  if (p.pp_rendezvous && p.pp > 1) {
    return refusal("parallel.pp_rendezvous", "blocking send/receive pairs are DeepSpeed's pipeline engine; torch.distributed.pipelining posts its transfers asynchronously");
  }
  if (t.precision == hw::Dtype::kFp16) return refusal("training.precision", "got fp16; torchtitan trains in bf16 (fp8 linears through its float8 converter) or fp32");
  if (p.pp > 1 && p.schedule == Schedule::kZbH1 && p.vpp <= 1) {
    return refusal("parallel.schedule", "zb-h1 with one stage per rank; torchtitan's zero-bubble schedules are InterleavedZeroBubble (vpp > 1) and ZBVZeroBubble");
  }
  if (p.recompute == Recompute::kFull && p.recompute_layers > 0) {
    // The share of each virtual stage's layers that is recomputed, as one in every k layers.
    const int64_t vstages = p.pp * std::max<int64_t>(1, p.vpp);
    const int64_t per_vstage = m.num_layers / vstages;
    if (m.num_layers % vstages != 0 || per_vstage % p.recompute_layers != 0) {
      return refusal("parallel.recompute_layers", std::to_string(p.recompute_layers) + " of each virtual stage's layers is not one layer in every k "
                                                 "of an even split, which torchtitan's layer-based AC checkpoints");
    }
  }
  return "";
}

ExportedCommand export_megatron(const RunConfig& rc) {
  const auto& m = rc.model;
  const auto& p = rc.parallel;
  const auto& t = rc.training;
  ExportedCommand out;
  out.framework = "megatron";
  auto& a = out.args;
  auto flag = [&](const std::string& name) { a.push_back("--" + name); };
  auto arg = [&](const std::string& name, const std::string& value) {
    a.push_back("--" + name);
    a.push_back(value);
  };

  if (const std::string why = megatron_refusal(rc); !why.empty()) throw core::UserError("export megatron: " + why);

  // --- launcher ---
  const int64_t per_node = rc.cluster.gpus_per_node;
  out.launcher = {"torchrun", "--nnodes", num(rc.cluster.num_nodes()), "--nproc-per-node", num(std::min(per_node, rc.cluster.num_gpus)),
                  "pretrain_gpt.py"};

  // --- model ---
  arg("num-layers", num(m.num_layers));
  arg("hidden-size", num(m.hidden));
  arg("num-attention-heads", num(m.heads));
  if (m.kv_heads != m.heads && !m.mla.enabled()) {
    flag("group-query-attention");
    arg("num-query-groups", num(m.kv_heads));
  }
  if (!m.mla.enabled() && m.head_dim > 0 && m.head_dim * m.heads != m.hidden) arg("kv-channels", num(m.head_dim));
  arg("ffn-hidden-size", num(m.ffn_hidden));
  if (m.mlp == model::MlpKind::kGated) flag("swiglu");
  if (m.norm == model::NormKind::kRmsNorm) arg("normalization", "RMSNorm");
  if (m.position == model::PositionKind::kRotary) {
    arg("position-embedding-type", "rope");
  } else if (m.position == model::PositionKind::kNone) {
    arg("position-embedding-type", "none");
  }
  arg("max-position-embeddings", num(std::max(m.max_positions + m.position_offset, t.seq_len)));  // OPT's offset rows as rows
  if (!m.tied_embeddings) flag("untie-embeddings-and-output-weights");
  if (!m.linear_bias) {
    flag("disable-bias-linear");
    if (m.qkv_bias) flag("add-qkv-bias");
  }
  if (m.qk_norm) flag("qk-layernorm");
  arg("vocab-size", num(m.vocab));
  arg("tokenizer-type", "NullTokenizer");
  if (m.moe.enabled()) {
    arg("num-experts", num(m.moe.num_experts));
    arg("moe-router-topk", num(m.moe.top_k));
    arg("moe-ffn-hidden-size", num(m.moe.expert_ffn));
    if (m.moe.shared_experts > 0) arg("moe-shared-expert-intermediate-size", num(m.moe.shared_experts * m.moe.shared_expert_ffn));
    if (m.moe.first_k_dense > 0) {
      arg("moe-layer-freq", "([0]*" + num(m.moe.first_k_dense) + "+[1]*" + num(m.num_layers - m.moe.first_k_dense) + ")");
    } else if (m.moe.layer_freq > 1) {
      arg("moe-layer-freq", num(m.moe.layer_freq));
    }
    flag("moe-grouped-gemm");
    const auto& mo = p.moe;
    arg("moe-token-dispatcher-type", mo.dispatcher == MoeDispatcher::kAllGather ? "allgather" : mo.dispatcher == MoeDispatcher::kFlex ? "flex" : "alltoall");
    if (mo.capacity_factor > 0) {
      std::ostringstream cf;
      cf << mo.capacity_factor;
      arg("moe-expert-capacity-factor", cf.str());
      if (mo.pad_to_capacity) flag("moe-pad-expert-input-to-capacity");
    }
    if (m.moe.groups > 0) {
      arg("moe-router-num-groups", num(m.moe.groups));
      arg("moe-router-group-topk", num(m.moe.group_topk));
    }
    if (mo.max_over_mean != 1.0 || mo.sigma > 0) out.notes.push_back("routing imbalance (parallel.moe) is what the run assumes of the data and router, not a setting");
    if (mo.max_nodes_per_token > 0) {
      out.notes.push_back("parallel.moe.max_nodes_per_token " + num(mo.max_nodes_per_token) +
                          ": node-limited routing; Megatron-LM limits it through group-limited routing (--moe-router-num-groups / "
                          "--moe-router-group-topk) when the groups line up with the nodes");
    }
  }
  if (m.mla.enabled()) {
    flag("multi-latent-attention");
    if (m.mla.q_lora_rank > 0) arg("q-lora-rank", num(m.mla.q_lora_rank));
    arg("kv-lora-rank", num(m.mla.kv_lora_rank));
    arg("qk-head-dim", num(m.mla.qk_nope_head_dim));
    arg("qk-pos-emb-head-dim", num(m.mla.qk_rope_head_dim));
    arg("v-head-dim", num(m.mla.v_head_dim));
  }
  if (t.mtp_layers > 0) arg("mtp-num-layers", num(t.mtp_layers));

  // --- training ---
  arg("seq-length", num(t.seq_len));
  arg("micro-batch-size", num(p.micro_batch_size));
  arg("global-batch-size", num(t.global_batch_size));
  switch (t.precision) {
    case hw::Dtype::kBf16: flag("bf16"); break;
    case hw::Dtype::kFp16: flag("fp16"); break;
    case hw::Dtype::kFp8:
      flag("bf16");
      arg("fp8-format", "hybrid");
      break;
    case hw::Dtype::kFp32: break;
    default: break;  // (megatron_refusal)
  }
  if (t.optimizer == Optimizer::kSgd) arg("optimizer", "sgd");
  if (t.attention == AttentionImpl::kUnfused) {
    arg("attention-backend", "unfused");
  } else if (t.attention == AttentionImpl::kFlash2) {
    arg("attention-backend", "flash");
    out.notes.push_back("training.attention flash2: FlashAttention-2 through Transformer Engine's flash backend");
  } else if (t.attention == AttentionImpl::kTriton) {
    arg("attention-backend", "flash");
    out.notes.push_back("training.attention triton: Megatron-LM has no Triton attention kernel; Transformer Engine's flash backend "
                        "(FlashAttention-2) runs instead, faster than the prediction");
  }

  // --- layout ---
  arg("tensor-model-parallel-size", num(p.tp));
  arg("pipeline-model-parallel-size", num(p.pp));
  if (p.cp > 1) {
    arg("context-parallel-size", num(p.cp));
    arg("cp-comm-type", p.cp_comm == CpComm::kAllGather ? "all_gather" : p.cp_comm == CpComm::kUlysses ? "a2a" : "p2p");
  }
  if (m.moe.enabled()) {
    arg("expert-model-parallel-size", num(p.ep));
    arg("expert-tensor-parallel-size", num(p.etp));
  }
  if (p.schedule == Schedule::kInterleaved) arg("virtual-pipeline-model-parallel-size", num(p.vpp));
  if (p.sp) flag("sequence-parallel");
  // The split as the run gives it: first and last stage counts, or Megatron's split with the
  // embedding and loss counted as layers, or (a listed or derived uneven split) the whole layout.
  if (p.pp > 1) {
    const auto& v = rc.vstage_layers;
    const bool even = std::all_of(v.begin(), v.end(), [&](int64_t n) { return n == v.front(); });
    const bool listed = !p.stage_layer_list.empty() || !p.pipeline_layout.is_null();
    if (p.first_stage_layers >= 0 || p.last_stage_layers >= 0) {
      if (p.first_stage_layers >= 0) arg("decoder-first-pipeline-num-layers", num(p.first_stage_layers));
      if (p.last_stage_layers >= 0) arg("decoder-last-pipeline-num-layers", num(p.last_stage_layers));
    } else if ((p.embedding_slot || p.loss_slot) && !listed) {
      if (p.embedding_slot) flag("account-for-embedding-in-pipeline-split");
      if (p.loss_slot) flag("account-for-loss-in-pipeline-split");
    } else if (!even || listed) {
      arg("pipeline-model-parallel-layout", megatron_layout_text(v, t.mtp_layers));
    }
  }
  if (p.fsdp || p.zero_stage == 3) {
    flag("use-megatron-fsdp");
    arg("data-parallel-sharding-strategy", "optim_grads_params");
  } else if (p.zero_stage == 2) {
    flag("use-megatron-fsdp");
    arg("data-parallel-sharding-strategy", "optim_grads");
  } else if (p.zero_stage == 1) {
    flag("use-distributed-optimizer");
  }
  if (p.dp_replicate > 1) arg("num-distributed-optimizer-instances", num(p.dp_replicate));
  if (p.recompute == Recompute::kFull) {
    arg("recompute-granularity", "full");
    if (p.recompute_stops_early) {
      out.notes.push_back("parallel.recompute_stops_early: Megatron-LM's full recomputation re-runs each whole layer, so it runs slower "
                          "than the prediction");
    }
    if (p.recompute_layers > 0) {
      arg("recompute-method", "block");
      arg("recompute-num-layers", num(p.recompute_layers));
    } else {
      arg("recompute-method", "uniform");
      arg("recompute-num-layers", "1");
    }
  } else if (p.recompute == Recompute::kSelective) {
    arg("recompute-granularity", "selective");
    const auto mods = recompute_module_list(p);
    if (mods != std::vector<std::string>{"core_attn"}) {
      a.push_back("--recompute-modules");
      for (const auto& mod : mods) a.push_back(mod);
    }
  }
  if (p.activation_offload_layers > 0) {
    flag("cpu-offloading");
    arg("cpu-offloading-num-layers", num(p.activation_offload_layers));
  }
  // Overlap and gradient buckets (Megatron-Core's DDP counts a bucket in parameters).
  if (p.dp * p.cp > 1) {
    if (p.grad_reduce_overlap) flag("overlap-grad-reduce");
    if (p.param_gather_overlap && (p.zero_stage > 0 || p.fsdp)) flag("overlap-param-gather");
    if (p.grad_reduce_overlap && !p.fsdp && p.zero_stage < 2) {
      if (p.bucket_layout == BucketLayout::kMegatron) {
        const double grad_bytes = hw::bytes_per_element(t.grad_dtype);
        arg("ddp-bucket-size", num(std::max<int64_t>(1, static_cast<int64_t>(std::llround(p.bucket_mb * 1e6 / grad_bytes)))));
      } else {
        out.notes.push_back("gradient buckets: the run models " + core::fmt("%g", p.bucket_mb) +
                            " MB buckets on every stage (PyTorch DDP's layout); Megatron-Core buckets max(40 M, 1 M x dp) parameters on the "
                            "first stage's first chunk and one per chunk elsewhere (set parallel.bucket_layout megatron to model that)");
      }
    }
  }
  if (p.tp_comm_overlap) flag("tp-comm-overlap");
  if (p.tp > 1 && !p.tp_comm_overlap && !p.async_linear_backward()) {
    out.notes.push_back("parallel.tp_async_backward false: Megatron-LM's linear layers run the column-parallel backward's TP "
                        "collectives beside their GEMMs (set it true to model that), so Megatron-LM runs faster than the prediction");
  }
  if (p.tp_comm_overlap && !p.tp_overlap_input_grad) {
    out.notes.push_back("parallel.tp_overlap_input_grad false: Transformer Engine's TP overlap hides the input-gradient "
                        "reduce-scatters too, so Megatron-LM runs faster than the prediction");
  }
  if (t.precision == hw::Dtype::kFp8 && p.sp_active() && !t.fp8_tp_gather) {
    out.notes.push_back("training.fp8_tp_gather false: Transformer Engine gathers the quantized sequence shards (one byte per "
                        "element), so Megatron-LM runs faster than the prediction");
  }
  if (t.precision == hw::Dtype::kFp8 && !t.fp8_saved_inputs) {
    out.notes.push_back("training.fp8_saved_inputs false: Transformer Engine keeps each linear layer's fp8 input for its weight "
                        "gradient, so Megatron-LM needs less activation memory than the prediction");
  }
  if (t.precision == hw::Dtype::kFp8 && !t.fp8_norm_quantize) {
    out.notes.push_back("training.fp8_norm_quantize false: Transformer Engine's fused norm-linear layers have the norm write the fp8 "
                        "input, so Megatron-LM runs faster than the prediction");
  }
  if (t.precision == hw::Dtype::kFp8 && rc.fp8_weights() == Fp8Weights::kPrimary) {
    if (p.zero_stage >= 1 || p.fsdp) {
      flag("fp8-param-gather");
    } else {
      out.notes.push_back("training.fp8_weights primary: --fp8-param-gather needs the distributed optimizer; without it Megatron-LM "
                          "keeps 16-bit parameters beside cached fp8 copies (fp8_weights cached), so it needs more memory than the prediction");
    }
  } else if (t.precision == hw::Dtype::kFp8 && rc.fp8_weights() == Fp8Weights::kCast) {
    out.notes.push_back("training.fp8_weights cast: Megatron-LM's Transformer Engine layers keep the fp8 weights across micro-batches, "
                        "so it runs faster than the prediction");
  }
  // Megatron-LM keeps fp32 main gradients under 16-bit and fp8 training unless told to reduce
  // them in bf16.
  if (t.precision != hw::Dtype::kFp32 && t.grad_dtype != hw::Dtype::kFp32) {
    flag("grad-reduce-in-bf16");
    out.notes.push_back("training.grad_dtype bf16 (stepcast's default): --grad-reduce-in-bf16; for Megatron-LM's fp32 main gradients drop it "
                        "and predict with training.grad_dtype fp32");
  }
  if (rc.scenario.present) out.notes.push_back("the run's scenario (stragglers, jitter, degraded links) describes the cluster, not the job");
  out.notes.push_back("hardware " + rc.hardware.name + ", " + num(rc.cluster.num_gpus) + " GPUs: the launcher's node and process counts; data, "
                      "checkpoint, logging and learning-rate arguments are the job's own");
  return out;
}

const std::vector<TorchtitanFlavor>& torchtitan_flavors() {
  static const std::vector<TorchtitanFlavor> kFlavors = {
      {"llama3.1-8b", "llama3", "8B"}, {"llama3.1-70b", "llama3", "70B"}, {"llama3.1-405b", "llama3", "405B"}, {"deepseek-v3", "deepseek_v3", "671B"}};
  return kFlavors;
}

ExportedConfig export_torchtitan(const RunConfig& rc) {
  const auto& m = rc.model;
  const auto& p = rc.parallel;
  const auto& t = rc.training;
  ExportedConfig out = start_config(rc, "torchtitan", torchtitan_refusal(rc));
  Json& doc = out.tables;

  // --- model ---
  const auto& flavors = torchtitan_flavors();
  const auto shipped = std::find_if(flavors.begin(), flavors.end(), [&](const TorchtitanFlavor& f) { return m.name == f.zoo; });
  Json model = Json::object();
  if (shipped != flavors.end()) {
    model["name"] = shipped->name;
    model["flavor"] = shipped->flavor;
  } else {
    out.notes.push_back("model " + m.name + ": torchtitan ships no flavor of it here; set [model] name and flavor for your model definition "
                        "(import it back with --model " + m.name + ")");
  }
  if (t.precision == hw::Dtype::kFp8) model["converters"] = Json::array({"float8"});
  if (!model.empty()) doc["model"] = model;
  if (t.attention == AttentionImpl::kTriton) {
    out.notes.push_back("training.attention triton: torchtitan's attention is PyTorch SDPA (FlashAttention-2 or cuDNN), faster than "
                        "the Triton kernel the prediction costs");
  }

  // --- training ---
  const int64_t local = t.global_batch_size / p.dp;  // per data-parallel rank per step
  Json training = {{"seq_len", t.seq_len}, {"global_batch_size", t.global_batch_size},
                   {"mixed_precision_param", t.precision == hw::Dtype::kFp32 ? "float32" : "bfloat16"}};
  // Without a pipeline the local batch is one micro-batch, accumulated up to the global batch.
  training["local_batch_size"] = p.pp > 1 ? local : p.micro_batch_size;
  doc["training"] = training;
  if (t.optimizer == Optimizer::kSgd) doc["optimizer"] = {{"name", "SGD"}};

  // --- parallelism ---
  Json par = {{"tensor_parallel_degree", p.tp}, {"pipeline_parallel_degree", p.pp}, {"context_parallel_degree", p.cp}};
  if (p.fsdp || p.zero_stage == 3) {
    par["data_parallel_replicate_degree"] = p.dp_replicate;
    par["data_parallel_shard_degree"] = p.dp / p.dp_replicate;
    // torchtitan's default reshards after forward without a pipeline and keeps the gathered
    // parameters with one (where each micro-batch would gather them again).
    if (p.pp > 1 && p.reshard_after_forward) par["fsdp_reshard_after_forward"] = "always";
    if (p.pp == 1 && !p.reshard_after_forward) par["fsdp_reshard_after_forward"] = "never";
  } else {
    par["data_parallel_replicate_degree"] = p.dp;
    par["data_parallel_shard_degree"] = 1;
  }
  if (m.moe.enabled()) par["expert_parallel_degree"] = p.ep;
  if (p.async_linear_backward()) {
    out.notes.push_back("parallel.tp_async_backward: torchtitan's DTensor tensor parallelism runs the backward's TP collectives in "
                        "line with the compute (and keeps each linear's gathered input rather than gathering it again), so it runs "
                        "slower than the prediction");
  }
  if (p.tp_comm_overlap) {
    par["enable_async_tensor_parallel"] = true;
    if (p.tp_overlap_input_grad) {
      out.notes.push_back("parallel.tp_comm_overlap: torchtitan's async TP leaves the column-parallel layers' input-gradient "
                          "reduce-scatters exposed (parallel.tp_overlap_input_grad false), so it runs slower than the prediction");
    }
  }
  if (t.precision == hw::Dtype::kFp8) {
    // torchao's float8 linears keep the input they are given: quantized by float8 TP, 16-bit
    // without TP.
    if (p.sp_active() && !t.fp8_tp_gather) {
      out.notes.push_back("training.fp8_tp_gather false: torchtitan's float8 tensor parallelism gathers the quantized inputs and "
                          "output gradients (one byte per element), so it runs faster than the prediction");
    }
    if (rc.fp8_weights() != Fp8Weights::kCast) {
      out.notes.push_back("training.fp8_weights: torchao's float8 linears cast their weights at every use (fp8_weights cast), so "
                          "torchtitan runs slower than the prediction");
    }
    if (t.fp8_norm_quantize) {
      out.notes.push_back("training.fp8_norm_quantize true: torchao's float8 linears cast their inputs in their own kernels, so "
                          "torchtitan runs slower than the prediction");
    }
    if (t.fp8_saved_inputs != (p.tp > 1)) {
      out.notes.push_back(std::string("training.fp8_saved_inputs ") + (t.fp8_saved_inputs ? "true" : "false") +
                          ": torchao's float8 linears keep " + (p.tp > 1 ? "the fp8 inputs float8 TP hands them" : "their bf16 inputs") +
                          ", so torchtitan needs " + (p.tp > 1 ? "less" : "more") + " activation memory than the prediction");
    }
  }
  if (p.cp > 1) par["context_parallel_rotate_method"] = p.cp_comm == CpComm::kRing ? "alltoall" : "allgather";
  if (p.pp > 1) {
    const char* schedule = nullptr;
    switch (p.schedule) {
      case Schedule::kGpipe: schedule = p.vpp > 1 ? "LoopedBFS" : "GPipe"; break;
      case Schedule::kOneFOneB: schedule = "1F1B"; break;
      case Schedule::kInterleaved: schedule = "Interleaved1F1B"; break;
      case Schedule::kZbH1: schedule = "InterleavedZeroBubble"; break;
      case Schedule::kZbV: schedule = "ZBVZeroBubble"; break;
      case Schedule::kDualPipeV: schedule = "DualPipeV"; break;
    }
    par["pipeline_parallel_schedule"] = schedule;
    par["pipeline_parallel_microbatch_size"] = p.micro_batch_size;
    // Every model part's modules, in model order (the schedule places parts on ranks: looped
    // for interleaved schedules, a V for ZBV and DualPipeV): the run's split exactly, whatever
    // torchtitan's automatic split would weigh the embedding and output as.
    Json parts = Json::array();
    int64_t layer = 0;
    for (size_t v = 0; v < rc.vstage_layers.size(); ++v) {
      Json part = Json::array();
      if (v == 0) part.push_back("tok_embeddings");
      for (int64_t i = 0; i < rc.vstage_layers[v]; ++i) part.push_back("layers." + std::to_string(layer++));
      if (v + 1 == rc.vstage_layers.size()) {
        part.push_back("norm");
        part.push_back("output");
      }
      parts.push_back(part);
    }
    par["module_fqns_per_model_part"] = parts;
  }
  doc["parallelism"] = par;

  // --- activation checkpointing ---
  Json ac = Json::object();
  switch (p.recompute) {
    case Recompute::kNone: ac["mode"] = "none"; break;
    case Recompute::kSelectiveOp:
      ac["mode"] = "selective";
      ac["selective_ac_option"] = "op";
      break;
    case Recompute::kFull:
      if (p.recompute_layers > 0) {
        // torchtitan's layer-based selective AC checkpoints every k-th layer.
        const int64_t per_vstage = m.num_layers / (p.pp * std::max<int64_t>(1, p.vpp));
        ac["mode"] = "selective";
        ac["selective_ac_option"] = std::to_string(per_vstage / p.recompute_layers);
      } else {
        ac["mode"] = "full";
      }
      break;
    case Recompute::kSelective: break;
  }
  doc["activation_checkpoint"] = ac;
  if (p.recompute == Recompute::kFull && !p.recompute_stops_early) {
    out.notes.push_back("parallel.recompute full: torchtitan's activation checkpointing stops each recomputed forward before the MLP "
                        "down projection (parallel.recompute_stops_early true), so it runs faster than the prediction");
  }
  if (t.loss == LossImpl::kFused && t.fused_elementwise) doc["compile"] = {{"enable", true}, {"components", Json::array({"model", "loss"})}};

  out.notes.push_back("hardware " + rc.hardware.name + ", " + std::to_string(rc.cluster.num_gpus) + " GPUs (" +
                      std::to_string(rc.cluster.gpus_per_node) + " per node): torchrun's --nnodes " + std::to_string(rc.cluster.num_nodes()) +
                      " --nproc-per-node " + std::to_string(std::min(rc.cluster.gpus_per_node, rc.cluster.num_gpus)) +
                      "; dataset, checkpoint, optimizer settings and steps are the job's own");
  out.notes.push_back("stepcast import torchtitan --config THIS.toml --gpus " + std::to_string(rc.cluster.num_gpus) + " --hardware " + rc.hardware.name +
                      " predicts it with torchtitan's own runtime (FSDP2 mixed precision with fp32 parameters, its pipeline buffers), "
                      "which can need more memory than this run");
  return out;
}

namespace {

// What a data-parallel-only launcher config (DeepSpeed's, Accelerate's) cannot run, besides its
// own sharding rules: model-parallel degrees (`degrees_why`), checkpointing other than of every
// layer or none, layer-wise activation offload, SGD (the config names no optimizer; its import
// reads AdamW back). `who` names the framework in the messages.
std::string data_parallel_refusal(const RunConfig& rc, const std::string& who, const std::string& degrees_why) {
  const auto& m = rc.model;
  const auto& p = rc.parallel;
  if (std::string why = lora_refusal(rc, who + "'s config"); !why.empty()) return why;
  for (const auto& [field, degree] : {std::pair<const char*, int64_t>{"parallel.tp", p.tp}, {"parallel.pp", p.pp}, {"parallel.cp", p.cp}, {"parallel.ep", p.ep}}) {
    if (degree > 1) return refusal(field, "got " + num(degree) + "; " + degrees_why);
  }
  if (p.recompute == Recompute::kSelective || p.recompute == Recompute::kSelectiveOp) {
    return refusal("parallel.recompute", "got " + to_string(p.recompute) + "; " + who + " checkpoints whole layers (the model's gradient checkpointing): full");
  }
  if (p.recompute == Recompute::kFull && p.recompute_layers > 0 && p.recompute_layers < m.num_layers) {
    return refusal("parallel.recompute_layers", num(p.recompute_layers) + " of " + num(m.num_layers) + " layers; " + who + " checkpoints every layer");
  }
  if (p.activation_offload_layers > 0) return refusal("parallel.activation_offload_layers", who + "'s config does not offload activations layer by layer");
  if (rc.training.optimizer == Optimizer::kSgd) {
    return refusal("training.optimizer", "got sgd; the exported config leaves the optimizer to the training script, read back as AdamW");
  }
  return "";
}

}  // namespace

ImportOptions runtime_import_options(const RunConfig& rc, const Json& model_json) {
  ImportOptions opt;
  const auto names = hw::builtin_hardware_names();
  opt.hardware = std::find(names.begin(), names.end(), rc.hardware.name) != names.end() ? rc.hardware.name : "h100-sxm";
  opt.model = rc.model.name;
  opt.model_json = model_json;
  opt.seq_len = rc.training.seq_len;
  opt.gpus = rc.cluster.num_gpus;
  opt.gpus_per_node = rc.cluster.gpus_per_node;
  return opt;
}

RunConfig with_own_hardware(RunConfig out, const RunConfig& rc) {
  out.hardware = rc.hardware;
  return out;
}

std::string deepspeed_refusal(const RunConfig& rc) {
  const auto& p = rc.parallel;
  const auto& t = rc.training;
  if (std::string why = data_parallel_refusal(rc, "DeepSpeed", "a DeepSpeed config runs data parallelism with ZeRO alone (tensor, pipeline, context and "
                                                               "expert parallelism come from the model code, as in Megatron-DeepSpeed)");
      !why.empty()) {
    return why;
  }
  if (p.fsdp) return refusal("parallel.fsdp", "DeepSpeed shards with ZeRO (parallel.zero_stage 3), not PyTorch FSDP");
  if (p.dp_replicate > 1) return refusal("parallel.dp_replicate", "got " + num(p.dp_replicate) + "; ZeRO++'s hierarchical partitioning is not exported");
  if (t.precision != hw::Dtype::kBf16 && t.precision != hw::Dtype::kFp16 && t.precision != hw::Dtype::kFp32) {
    return refusal("training.precision", "got " + hw::to_string(t.precision) + "; a DeepSpeed config trains in bf16, fp16 or fp32");
  }
  return "";
}

ExportedConfig export_deepspeed(const RunConfig& rc) {
  const auto& m = rc.model;
  const auto& p = rc.parallel;
  const auto& t = rc.training;
  ExportedConfig out = start_config(rc, "deepspeed", deepspeed_refusal(rc));
  Json& c = out.tables;
  c["train_batch_size"] = t.global_batch_size;
  c["train_micro_batch_size_per_gpu"] = p.micro_batch_size;
  c["gradient_accumulation_steps"] = rc.num_microbatches;
  if (t.precision == hw::Dtype::kBf16) c["bf16"] = {{"enabled", true}};
  if (t.precision == hw::Dtype::kFp16) c["fp16"] = {{"enabled", true}};
  Json zero = {{"stage", p.zero_stage}, {"overlap_comm", p.grad_reduce_overlap}};
  if (p.zero_stage <= 2 && p.dp > 1) {
    // Gradient buckets in elements: DeepSpeed's BF16 optimizer (bf16, ZeRO-1, no offload)
    // accumulates fp32 gradients, the others keep the model's dtype.
    const bool bf16_optimizer = t.precision == hw::Dtype::kBf16 && p.zero_stage == 1 && p.offload == Offload::kNone;
    const double bytes = bf16_optimizer || t.precision == hw::Dtype::kFp32 ? 4.0 : 2.0;
    zero["reduce_bucket_size"] = static_cast<int64_t>(std::llround(p.bucket_mb * 1e6 / bytes));
  }
  if (p.offload == Offload::kOptimizer || p.offload == Offload::kParams) zero["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};
  if (p.offload == Offload::kParams) zero["offload_param"] = {{"device", "cpu"}, {"pin_memory", true}};
  c["zero_optimization"] = zero;
  const int64_t nodes = rc.cluster.num_nodes();
  out.notes.push_back("launch: deepspeed --num_nodes " + num(nodes) + " --num_gpus " + num(std::min(rc.cluster.gpus_per_node, rc.cluster.num_gpus)) +
                      " train.py --deepspeed ds_config.json (" + num(rc.cluster.num_gpus) + " GPUs of data parallelism)");
  out.notes.push_back("model: " + m.name + ", sequences of " + num(t.seq_len) + " tokens (the training script's model and data)");
  out.notes.push_back(p.recompute == Recompute::kFull ? "activation checkpointing: every layer (model.gradient_checkpointing_enable(), or the Trainer's --gradient_checkpointing)"
                                                      : "activation checkpointing: off (the model keeps every layer's activations)");
  out.notes.push_back("optimizer: the training script's AdamW (no optimizer block; the Hugging Face Trainer's default)");
  out.notes.push_back("stepcast import deepspeed --config ds_config.json --model " + m.name + " --seq " + num(t.seq_len) + " --gpus " + num(rc.cluster.num_gpus) +
                      " --recompute " + (p.recompute == Recompute::kFull ? "full" : "none") + " reads it back");
  return out;
}

RunConfig as_deepspeed_runs_it(const RunConfig& rc, const Json& model_json) {
  const ExportedConfig cfg = export_deepspeed(rc);
  ImportOptions opt = runtime_import_options(rc, model_json);
  opt.recompute = rc.parallel.recompute == Recompute::kFull ? "full" : "none";
  return with_own_hardware(parse_run(import_deepspeed(cfg.tables, "<export>", opt), "<deepspeed runtime>", ""), rc);
}

std::string json_config_text(const ExportedConfig& cfg) { return cfg.tables.dump(2) + "\n"; }

std::string accelerate_refusal(const RunConfig& rc) {
  const auto& p = rc.parallel;
  if (std::string why = data_parallel_refusal(rc, "Accelerate", "an Accelerate config runs data parallelism (FSDP or DDP) alone"); !why.empty()) return why;
  if (!p.fsdp && p.zero_stage > 0) {
    return refusal("parallel.zero_stage", "got " + num(p.zero_stage) + "; Accelerate shards with FSDP (parallel.fsdp); ZeRO stages run through DeepSpeed (export deepspeed)");
  }
  if (p.dp_replicate > 1 && p.dp_replicate != rc.cluster.num_nodes()) {
    return refusal("parallel.dp_replicate", "got " + num(p.dp_replicate) + "; Accelerate's HYBRID_SHARD keeps one replica per machine (" + num(rc.cluster.num_nodes()) + ")");
  }
  if (p.offload == Offload::kOptimizer) {
    return refusal("parallel.offload", "got optimizer; FSDP offloads the parameters with their optimizer state (parallel.offload params)");
  }
  return "";
}

ExportedConfig export_accelerate(const RunConfig& rc) {
  const auto& m = rc.model;
  const auto& p = rc.parallel;
  const auto& t = rc.training;
  ExportedConfig out = start_config(rc, "accelerate", accelerate_refusal(rc));
  Json& c = out.tables;
  const int64_t nodes = rc.cluster.num_nodes();
  c["compute_environment"] = "LOCAL_MACHINE";
  c["distributed_type"] = p.fsdp ? "FSDP" : rc.cluster.num_gpus > 1 ? "MULTI_GPU" : "NO";
  c["mixed_precision"] = t.precision == hw::Dtype::kFp32 ? "no" : hw::to_string(t.precision);
  c["num_machines"] = nodes;
  c["num_processes"] = rc.cluster.num_gpus;
  c["machine_rank"] = 0;
  if (p.fsdp) {
    const char* strategy = p.dp_replicate > 1 ? "HYBRID_SHARD" : p.reshard_after_forward ? "FULL_SHARD" : "SHARD_GRAD_OP";
    Json f = {{"fsdp_sharding_strategy", strategy},
              {"fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP"},
              {"fsdp_offload_params", p.offload == Offload::kParams},
              {"fsdp_activation_checkpointing", p.recompute == Recompute::kFull}};
    if (p.dp_replicate > 1 && !p.reshard_after_forward) f["fsdp_reshard_after_forward"] = false;
    c["fsdp_config"] = f;
  }
  const std::string recompute = p.recompute == Recompute::kFull ? "full" : "none";
  out.notes.push_back("launch: accelerate launch --config_file accelerate.yaml train.py on each of the " + num(nodes) + " machine(s), machine_rank set per machine");
  out.notes.push_back("the training script's: " + m.name + ", sequences of " + num(t.seq_len) + " tokens, " + num(p.micro_batch_size) +
                      " per device and " + num(rc.num_microbatches) + " accumulation steps (--per_device_train_batch_size, --gradient_accumulation_steps)");
  if (!p.fsdp) {
    out.notes.push_back(p.recompute == Recompute::kFull ? "activation checkpointing: every layer (the model's gradient_checkpointing_enable())"
                                                        : "activation checkpointing: off");
  }
  out.notes.push_back("optimizer: the training script's AdamW");
  out.notes.push_back("stepcast import accelerate --config accelerate.yaml --model " + m.name + " --seq " + num(t.seq_len) + " --micro-batch " +
                      num(p.micro_batch_size) + " --grad-accum " + num(rc.num_microbatches) + (p.fsdp ? "" : " --recompute " + recompute) + " reads it back");
  return out;
}

RunConfig as_accelerate_runs_it(const RunConfig& rc, const Json& model_json) {
  const ExportedConfig cfg = export_accelerate(rc);
  ImportOptions opt = runtime_import_options(rc, model_json);
  opt.micro_batch = rc.parallel.micro_batch_size;
  opt.grad_accum = rc.num_microbatches;
  if (!rc.parallel.fsdp) opt.recompute = rc.parallel.recompute == Recompute::kFull ? "full" : "none";
  return with_own_hardware(parse_run(import_accelerate(parse_yaml(yaml_text(cfg), "<export>"), "<export>", opt), "<accelerate runtime>", ""), rc);
}

std::string yaml_text(const ExportedConfig& cfg) {
  std::ostringstream o;
  for (const auto& n : cfg.notes) o << "# " << n << "\n";
  auto scalar = [](const Json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  for (const auto& [k, v] : cfg.tables.items()) {
    if (v.is_object()) {
      o << k << ":\n";
      for (const auto& [sk, sv] : v.items()) o << "  " << sk << ": " << scalar(sv) << "\n";
    } else {
      o << k << ": " << scalar(v) << "\n";
    }
  }
  return o.str();
}

std::string toml_text(const ExportedConfig& cfg) {
  std::ostringstream o;
  for (const auto& n : cfg.notes) o << "# " << n << "\n";
  bool first = true;
  for (const auto& [table, keys] : cfg.tables.items()) {
    o << (first ? "" : "\n") << "[" << table << "]\n";
    first = false;
    for (const auto& [k, v] : keys.items()) o << k << " = " << v.dump() << "\n";
  }
  return o.str();
}

std::string shell_text(const ExportedCommand& cmd) {
  std::ostringstream o;
  for (const auto& n : cmd.notes) o << "# " << n << "\n";
  auto quoted = [](const std::string& w) {
    if (w.find_first_of(" ()[]*'\"$|&;<>") == std::string::npos && !w.empty()) return w;
    return "'" + w + "'";
  };
  for (size_t i = 0; i < cmd.launcher.size(); ++i) o << (i ? " " : "") << quoted(cmd.launcher[i]);
  for (size_t i = 0; i < cmd.args.size(); ++i) {
    const bool starts = cmd.args[i].rfind("--", 0) == 0;
    o << (starts ? " \\\n    " : " ") << quoted(cmd.args[i]);
  }
  o << "\n";
  return o.str();
}

}  // namespace stepcast::config
