// LoRA fine-tuning (training.lora) and packed sequences (training.packed_document_tokens): the
// run-file fields and their errors, the frozen base in the memory ledger, the operators a
// frozen or adapted linear layer runs, the model FLOPs, the data-parallel traffic of the
// adapters alone, and the refusal of exports that cannot express a LoRA run.
#include <gtest/gtest.h>

#include <string>

#include "sim/config/framework_export.hpp"
#include "sim/config/run_config.hpp"
#include "sim/core/error.hpp"
#include "sim/core/json_reader.hpp"
#include "sim/engine/step_sim.hpp"
#include "sim/estimate/estimate.hpp"
#include "sim/estimate/workload.hpp"
#include "sim/memory/ledger.hpp"
#include "tests/support/run_files.hpp"

namespace stepcast::estimate {
namespace {

using config::RunConfig;
using core::Json;

// Llama 2 7B on one 8-GPU H100 node, data parallel with the distributed optimizer.
Json llama7b(const Json& lora = nullptr) {
  Json training = {{"seq_len", 4096}, {"global_batch_size", 32}, {"precision", "bf16"}};
  if (!lora.is_null()) training["lora"] = lora;
  return {{"model", "llama2-7b"},
          {"hardware", "h100-sxm"},
          {"cluster", {{"num_gpus", 8}, {"gpus_per_node", 8}}},
          {"training", training},
          {"parallel", {{"tp", 1}, {"micro_batch_size", 1}, {"zero_stage", 1}}}};
}

RunConfig parse(const Json& j) { return config::parse_run(j, "<lora-test>", ""); }

double sum_flops(const std::vector<Op>& ops) {
  double f = 0;
  for (const auto& o : ops) f += o.flops.value();
  return f;
}

const Op* find_op(const std::vector<Op>& ops, const std::string& name) {
  for (const auto& o : ops) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

TEST(Lora, RunFileFieldsAndTheirErrors) {
  const RunConfig rc = parse(llama7b({{"rank", 16}, {"targets", {"qkv", "fc2"}}}));
  EXPECT_EQ(rc.training.lora.rank, 16);
  EXPECT_EQ(rc.training.lora.targets, config::kLoraQkv | config::kLoraFc2);
  // Targets default to every attention and MLP projection.
  EXPECT_EQ(parse(llama7b({{"rank", 8}})).training.lora.targets,
            config::kLoraQkv | config::kLoraOProj | config::kLoraFc1 | config::kLoraFc2);
  EXPECT_FALSE(parse(llama7b()).training.lora.enabled());

  EXPECT_NE(test::parse_error(llama7b(Json::object()), "<t>").find("$.training.lora.rank"), std::string::npos);
  EXPECT_NE(test::parse_error(llama7b({{"rank", 0}}), "<t>").find("$.training.lora.rank"), std::string::npos);
  const std::string bad_target = test::parse_error(llama7b({{"rank", 8}, {"targets", {"qkv", "gate_proj"}}}), "<t>");
  EXPECT_NE(bad_target.find("$.training.lora.targets[1]"), std::string::npos) << bad_target;
  EXPECT_NE(bad_target.find("o_proj"), std::string::npos) << "the message lists what is allowed: " << bad_target;
  EXPECT_NE(test::parse_error(llama7b({{"rank", 8}, {"targets", {"qkv", "qkv"}}}), "<t>").find("listed twice"), std::string::npos);
  EXPECT_NE(test::parse_error(llama7b({{"rank", 8}, {"targets", Json::array()}}), "<t>").find("$.training.lora.targets"), std::string::npos);
  EXPECT_NE(test::parse_error(llama7b({{"rank", 8}, {"alpha", 16}}), "<t>").find("$.training.lora.alpha"), std::string::npos);

  Json packed = llama7b();
  packed["training"]["packed_document_tokens"] = 8192;
  EXPECT_NE(test::parse_error(packed, "<t>").find("$.training.packed_document_tokens"), std::string::npos);
  packed["training"]["packed_document_tokens"] = 512;
  EXPECT_EQ(parse(packed).training.attention_span(), 512);
}

// Adapter widths: rank x (input + output) per adapted linear, the TP-split side divided.
TEST(Lora, AdapterParameters) {
  const RunConfig rc = parse(llama7b({{"rank", 16}}));
  const model::LayerKind dense{model::Mixer::kAttention, model::Ffn::kDense};
  // Llama 2 7B: QKV 4096 -> 3 x 4096, O 4096 -> 4096, gate+up 4096 -> 2 x 11008, down 11008 -> 4096.
  const double per_layer = 16.0 * ((4096 + 3 * 4096) + (4096 + 4096) + (4096 + 2 * 11008) + (11008 + 4096));
  EXPECT_DOUBLE_EQ(memory::lora_layer_params(rc, dense), per_layer);
  EXPECT_DOUBLE_EQ(memory::lora_model_params(rc), 32.0 * per_layer);

  Json tp2 = llama7b({{"rank", 16}});
  tp2["parallel"]["tp"] = 2;
  const RunConfig rc2 = parse(tp2);
  // Column-parallel layers split their output, row-parallel ones their input.
  const double per_rank = 16.0 * ((4096 + 3 * 2048) + (2048 + 4096) + (4096 + 2 * 5504) + (5504 + 4096));
  EXPECT_DOUBLE_EQ(memory::lora_layer_params(rc2, dense), per_rank);
  EXPECT_DOUBLE_EQ(memory::lora_model_params(rc2), 32.0 * per_layer) << "the model's adapters do not depend on the layout";

  // The workload builds exactly the adapters the ledger counts.
  WorkloadBuilder wb(rc2);
  double adapter_weights = 0;
  for (const auto& o : wb.dense_layer().bwd) {
    if (o.weight_grad) adapter_weights += o.gemm.m * o.gemm.n;  // a wgrad GEMM's output is its weight
  }
  EXPECT_DOUBLE_EQ(adapter_weights, per_rank);

  // A GQA model with 2 KV heads of 128 on tp 8: each rank holds one KV head, each head on four
  // ranks, but the model's adapters count each head once, whatever the layout.
  Json gqa = llama7b({{"rank", 8}, {"targets", {"qkv"}}});
  gqa["model"] = {{"num_hidden_layers", 4}, {"hidden_size", 4096}, {"num_attention_heads", 32},
                  {"num_key_value_heads", 2}, {"intermediate_size", 11008}, {"vocab_size", 32000},
                  {"hidden_act", "silu"}};
  Json gqa_tp8 = gqa;
  gqa_tp8["parallel"]["tp"] = 8;
  const double qkv = 8.0 * (4096 + 4096 + 2 * 2 * 128);
  EXPECT_DOUBLE_EQ(memory::lora_model_params(parse(gqa)), 4.0 * qkv);
  EXPECT_DOUBLE_EQ(memory::lora_model_params(parse(gqa_tp8)), 4.0 * qkv);
  const model::LayerKind layer{model::Mixer::kAttention, model::Ffn::kDense};
  EXPECT_DOUBLE_EQ(memory::lora_layer_params(parse(gqa_tp8), layer), 8.0 * (4096 + 512 + 2 * 128))
      << "per rank: the input whole, its query slice and one replicated K and V head";
}

TEST(Lora, FrozenBaseKeepsNoGradientsOrOptimizerState) {
  const RunConfig full = parse(llama7b());
  const RunConfig lora = parse(llama7b({{"rank", 16}}));
  const auto lf = memory::compute_ledger(full).stages[0];
  const auto ll = memory::compute_ledger(lora).stages[0];
  const double adapters = memory::lora_model_params(lora);
  const memory::StateBytes sb = memory::state_bytes(lora.training);
  EXPECT_DOUBLE_EQ(ll.params, lf.params + adapters);
  EXPECT_DOUBLE_EQ(ll.trainable_params(), adapters);
  EXPECT_DOUBLE_EQ(lf.trainable_params(), lf.params);
  // Weights: every parameter in bf16; gradients and (ZeRO-1 over 8) optimizer state: the adapters.
  EXPECT_DOUBLE_EQ(ll.weights.value(), ll.params * 2.0);
  EXPECT_DOUBLE_EQ(ll.gradients.value(), adapters * sb.gradients);
  EXPECT_DOUBLE_EQ(ll.optimizer.value(), adapters * sb.optimizer / 8.0);
  // The DDP bucket buffer is no larger than the adapters' gradients.
  EXPECT_LE(ll.buffers.value(), adapters * sb.gradients + 1.0);
  // Frozen linear layers without adapters keep no inputs: fewer activations.
  EXPECT_LT(memory::compute_ledger(parse(llama7b({{"rank", 16}, {"targets", {"qkv"}}}))).stages[0].activation_per_layer.value(),
            lf.activation_per_layer.value());
}

TEST(Lora, FrozenLayersSkipTheirWeightGradients) {
  const RunConfig full = parse(llama7b());
  const RunConfig lora = parse(llama7b({{"rank", 16}, {"targets", {"qkv"}}}));
  const WorkloadBuilder wf(full), wl(lora);
  const LayerCost& cf = wf.dense_layer();
  const LayerCost& cl = wl.dense_layer();
  EXPECT_NE(find_op(cf.bwd, "fc1.wgrad"), nullptr);
  EXPECT_EQ(find_op(cl.bwd, "fc1.wgrad"), nullptr);
  EXPECT_EQ(find_op(cl.bwd, "qkv.wgrad"), nullptr);
  EXPECT_NE(find_op(cl.bwd, "fc1.dgrad"), nullptr);
  EXPECT_NE(find_op(cl.fwd, "qkv.lora_a"), nullptr);
  EXPECT_EQ(find_op(cl.fwd, "fc1.lora_a"), nullptr) << "fc1 is not a target";
  // A frozen linear without an adapter keeps no input; an adapted one keeps its own.
  EXPECT_EQ(find_op(cl.fwd, "fc1")->saved_bytes, 0.0);
  EXPECT_GT(find_op(cl.fwd, "qkv")->saved_bytes, 0.0);
  // Backward GEMM work: the input gradients (as much as the forward) plus the adapters'.
  const double fwd_gemm = sum_flops(cl.fwd) - find_op(cl.fwd, "attention")->flops.value();
  const double bwd_gemm = sum_flops(cl.bwd) - find_op(cl.bwd, "attention.bwd")->flops.value();
  EXPECT_NEAR(bwd_gemm / fwd_gemm, 1.0, 0.01);
  EXPECT_LT(cl.bwd_compute.value(), 0.75 * cf.bwd_compute.value());
  EXPECT_LT(cl.model_flops.value(), 0.7 * cf.model_flops.value());
}

// Under TP each adapter's rank-wide x A is summed across the group once: in forward beside a
// row-parallel layer (A sees an input slice), in backward beside a column-parallel one (the
// gradient through the rank's slice of B is partial). m x rank elements in the activation dtype.
TEST(Lora, TensorParallelAdaptersReduceTheirRankWideIntermediate) {
  Json j = llama7b({{"rank", 16}});
  j["parallel"]["tp"] = 2;
  const RunConfig rc = parse(j);
  const WorkloadBuilder wb(rc);
  const LayerCost& l = wb.dense_layer();
  const double bytes = 4096.0 * 16.0 * 2.0;  // one micro-batch of 4,096 tokens, rank 16, bf16
  for (const std::string row : {"o_proj", "fc2"}) {
    const Op* f = find_op(l.fwd, row + ".lora_a.tp_reduce");
    ASSERT_NE(f, nullptr) << row;
    EXPECT_EQ(f->comm, CommKind::kTp);
    EXPECT_EQ(f->collective, cost::Collective::kAllReduce);
    EXPECT_DOUBLE_EQ(f->bytes.value(), bytes);
    EXPECT_EQ(find_op(l.bwd, row + ".lora_b.dgrad.tp_reduce"), nullptr) << row;
  }
  for (const std::string col : {"qkv", "fc1"}) {
    const Op* b = find_op(l.bwd, col + ".lora_b.dgrad.tp_reduce");
    ASSERT_NE(b, nullptr) << col;
    EXPECT_DOUBLE_EQ(b->bytes.value(), bytes);
    EXPECT_EQ(find_op(l.fwd, col + ".lora_a.tp_reduce"), nullptr) << col;
  }
  // Without TP there is nothing to reduce.
  const RunConfig one = parse(llama7b({{"rank", 16}}));
  const WorkloadBuilder w1(one);
  for (const auto* ops : {&w1.dense_layer().fwd, &w1.dense_layer().bwd}) {
    for (const auto& o : *ops) EXPECT_EQ(o.name.find("tp_reduce"), std::string::npos) << o.name;
  }
}

// MFU's model FLOPs: 4 per frozen parameter and token (forward and input gradient), 6 per
// adapter parameter, attention in full.
TEST(Lora, ModelFlopsCountForwardAndInputGradient) {
  const RunConfig full = parse(llama7b());
  const RunConfig lora = parse(llama7b({{"rank", 16}}));
  const double tokens = static_cast<double>(full.tokens_per_step());
  const double n = full.model.flop_params();
  const double attn = model_flops_per_step(full) / tokens - 6.0 * n;
  EXPECT_NEAR(model_flops_per_step(lora) / tokens, 4.0 * n + 6.0 * memory::lora_model_params(lora) + attn, 1.0);
}

TEST(Lora, StepIsFasterAndReducesOnlyTheAdapters) {
  const RunConfig full = parse(llama7b());
  const RunConfig lora = parse(llama7b({{"rank", 16}}));
  const StepEstimate ef = estimate_step(full);
  const StepEstimate el = estimate_step(lora);
  EXPECT_LT(el.step_time_s, 0.9 * ef.step_time_s);
  EXPECT_LT(el.breakdown.exposed_comm.at("dp"), ef.breakdown.exposed_comm.at("dp"));
  EXPECT_LT(el.breakdown.optimizer, 0.1 * ef.breakdown.optimizer);
  // The simulated step agrees with the estimate (one rank, no pipeline: within 2%).
  const engine::SimResult sl = engine::simulate_step(lora);
  EXPECT_NEAR(sl.step.step_time_s / el.step_time_s, 1.0, 0.02);
  EXPECT_LT(sl.step.step_time_s, engine::simulate_step(full).step.step_time_s);
}

// Under FSDP the frozen base is still gathered layer by layer, but nothing of it is reduced.
TEST(Lora, FsdpGathersTheBaseAndReducesTheAdapters) {
  Json j = llama7b({{"rank", 16}});
  j["parallel"] = {{"micro_batch_size", 1}, {"fsdp", true}};
  const RunConfig lora = parse(j);
  Json jf = llama7b();
  jf["parallel"] = j["parallel"];
  const RunConfig full = parse(jf);
  const auto ll = memory::compute_ledger(lora).stages[0];
  EXPECT_DOUBLE_EQ(ll.weights.value(), ll.params * 2.0 / 8.0);
  const engine::SimResult sl = engine::simulate_step(lora);
  const engine::SimResult sf = engine::simulate_step(full);
  EXPECT_LT(sl.step.step_time_s, sf.step.step_time_s);
  EXPECT_NEAR(sl.step.step_time_s / estimate_step(lora).step_time_s, 1.0, 0.05);
}

// Packed sequences: attention runs per document, the rest of the layer is unchanged.
TEST(Packing, AttentionRunsPerDocument) {
  Json j = llama7b();
  const RunConfig whole = parse(j);
  j["training"]["packed_document_tokens"] = 512;
  const RunConfig packed = parse(j);
  const WorkloadBuilder ww(whole), wp(packed);
  const LayerCost& cw = ww.dense_layer();
  const LayerCost& cp = wp.dense_layer();
  const double fw = find_op(cw.fwd, "attention")->flops.value(), fp = find_op(cp.fwd, "attention")->flops.value();
  // A causal query at position i sees i + 1 keys: (span + 1) / 2 on average per document.
  EXPECT_NEAR(fp / fw, 513.0 / 4097.0, 1e-12) << "causal attention FLOPs scale with the span";
  EXPECT_LT(find_op(cp.fwd, "attention")->time.value(), find_op(cw.fwd, "attention")->time.value());
  EXPECT_DOUBLE_EQ(find_op(cp.fwd, "fc1")->time.value(), find_op(cw.fwd, "fc1")->time.value());
  EXPECT_LT(model_flops_per_step(packed), model_flops_per_step(whole));
}

// QLoRA: the transformer layers' frozen weights in 4-bit NF4 with double-quantized scales,
// dequantized around each forward and input-gradient GEMM.
TEST(Lora, Nf4BaseWeights) {
  EXPECT_NEAR(config::kNf4BytesPerWeight * 8.0, 4.127, 0.001) << "QLoRA's 4-bit weights plus 0.127 bits of constants";
  const RunConfig lora = parse(llama7b({{"rank", 16}}));
  const RunConfig q = parse(llama7b({{"rank", 16}, {"base_quantization", "nf4"}}));
  EXPECT_TRUE(q.training.lora.nf4);
  const auto sl = memory::compute_ledger(lora).stages[0];
  const auto sq = memory::compute_ledger(q).stages[0];
  // Llama 2 7B: 32 layers of 202,383,360 parameters (norms included) go to NF4; the embedding,
  // head, final norm and adapters stay in bf16.
  const double layers = 32.0 * memory::layer_param_split(q, 0).first;
  EXPECT_DOUBLE_EQ(layers, 32.0 * 202383360.0);
  EXPECT_NEAR(sq.weights.value(), sl.weights.value() - layers * (2.0 - config::kNf4BytesPerWeight), 1.0);
  EXPECT_DOUBLE_EQ(sq.gradients.value(), sl.gradients.value());
  EXPECT_GT(sq.transient.value(), sl.transient.value()) << "the dequantized copy of the largest weight";
  const WorkloadBuilder wq(q);
  const LayerCost& layer = wq.dense_layer();
  const Op* dq = find_op(layer.fwd, "fc1.dequant");
  ASSERT_NE(dq, nullptr);
  EXPECT_DOUBLE_EQ(dq->bytes.value(), (config::kNf4BytesPerWeight + 2.0) * 2.0 * 11008.0 * 4096.0);
  EXPECT_NE(find_op(layer.bwd, "fc1.dequant_bwd"), nullptr);
  EXPECT_EQ(find_op(wq.output_layer().fwd, "lm_head.dequant"), nullptr) << "the head stays in bf16";
  EXPECT_GT(estimate_step(q).step_time_s, estimate_step(lora).step_time_s);
  // Refused where the dequantization or the sharding is not modelled.
  EXPECT_NE(test::parse_error(llama7b({{"rank", 16}, {"base_quantization", "int4"}}), "<t>").find("$.training.lora.base_quantization"),
            std::string::npos);
  Json fp8 = llama7b({{"rank", 16}, {"base_quantization", "nf4"}});
  fp8["training"]["precision"] = "fp8";
  EXPECT_NE(test::parse_error(fp8, "<t>").find("$.training.lora.base_quantization"), std::string::npos);
  Json offload = llama7b({{"rank", 16}, {"base_quantization", "nf4"}});
  offload["parallel"] = {{"fsdp", true}, {"offload", "params"}};
  EXPECT_NE(test::parse_error(offload, "<t>").find("$.training.lora.base_quantization"), std::string::npos);
}

// FSDP-QLoRA: the packed 4-bit layer weights are sharded over the FSDP group (the block
// constants stay whole on every rank) and gathered packed, a quarter of a bf16 gather.
TEST(Lora, FsdpQloraShardsAndGathersThePackedBase) {
  Json jq = llama7b({{"rank", 16}, {"base_quantization", "nf4"}});
  jq["parallel"] = {{"micro_batch_size", 1}, {"fsdp", true}};
  Json jb = llama7b({{"rank", 16}});
  jb["parallel"] = jq["parallel"];
  const RunConfig q = parse(jq), b = parse(jb);
  const auto sq = memory::compute_ledger(q).stages[0], sb = memory::compute_ledger(b).stages[0];
  const double layers = 32.0 * memory::layer_param_split(q, 0).first;
  EXPECT_DOUBLE_EQ(sq.quantized_dense_params, layers);
  EXPECT_DOUBLE_EQ(sb.quantized_dense_params, 0.0);
  const double per_weight = config::kNf4PackedBytesPerWeight / 8.0 + config::kNf4ScaleBytesPerWeight;
  EXPECT_NEAR(sq.weights.value(), sb.weights.value() - layers * (2.0 / 8.0 - per_weight), 1.0);
  EXPECT_LT(sq.buffers.value(), sb.buffers.value()) << "a gathered layer is held packed";

  // The simulated per-layer gathers: packed base plus bf16 adapters against all bf16. The
  // range allows the bandwidth curve's dependence on message size (101 MB against 405 MB).
  engine::SimOptions keep;
  keep.keep_timeline = true;
  auto gather_time = [&](const RunConfig& rc) {
    const engine::SimResult r = engine::simulate_step(rc, keep);
    double t = 0;
    for (const auto& task : r.graph->tasks()) {
      if (task.kind == engine::TaskKind::kDpComm && task.layer == 5 && r.graph->name(task.name) == "all-gather params") {
        t += static_cast<double>(task.duration);
      }
    }
    return t;
  };
  const double tq = gather_time(q), tb = gather_time(b);
  ASSERT_GT(tb, 0.0);
  EXPECT_GT(tq / tb, 0.2);
  EXPECT_LT(tq / tb, 0.32);
  const engine::SimResult rq = engine::simulate_step(q);
  EXPECT_NEAR(rq.step.step_time_s / estimate_step(q).step_time_s, 1.0, 0.05);
}

TEST(Lora, ExportsRefuseNamingTheField) {
  const RunConfig lora = parse(llama7b({{"rank", 16}}));
  for (const char* fw : {"megatron", "torchtitan", "deepspeed", "accelerate"}) {
    try {
      if (std::string(fw) == "megatron") config::export_megatron(lora);
      if (std::string(fw) == "torchtitan") config::export_torchtitan(lora);
      if (std::string(fw) == "deepspeed") config::export_deepspeed(lora);
      if (std::string(fw) == "accelerate") config::export_accelerate(lora);
      ADD_FAILURE() << fw << " exported a LoRA run";
    } catch (const core::UserError& e) {
      EXPECT_NE(std::string(e.what()).find("training.lora"), std::string::npos) << fw << ": " << e.what();
    }
  }
}

}  // namespace
}  // namespace stepcast::estimate
