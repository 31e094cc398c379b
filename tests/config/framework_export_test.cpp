// `stepcast export megatron`: a run file as Megatron-LM launch arguments. Each exported command
// is read back by `stepcast import megatron` and must give the same model and layout, so the
// same predicted step; settings Megatron-LM cannot run are errors naming the run-file field.
#include "sim/config/framework_export.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "sim/accuracy/titan_import.hpp"
#include "sim/config/framework_import.hpp"
#include "sim/config/run_config.hpp"
#include "sim/core/error.hpp"
#include "sim/core/json_reader.hpp"
#include "sim/estimate/estimate.hpp"
#include "sim/plan/planner.hpp"

namespace stepcast::config {
namespace {

using core::Json;

RunConfig run_of(const Json& j) { return parse_run(j, "<test>", ""); }

// The run again after export and import (the profile named as the original's).
RunConfig round_trip(const RunConfig& rc, const std::string& hardware) {
  const ExportedCommand cmd = export_megatron(rc);
  ImportOptions opt;
  opt.hardware = hardware;
  const Json imported = import_megatron(split_command_line(shell_text(cmd)), opt);
  return run_of(imported);
}

// The error an exporter gives for a run file (empty when it exports it).
template <class Exporter>
std::string error_of(Exporter exporter, const Json& j) {
  try {
    (void)exporter(run_of(j));
  } catch (const core::UserError& e) {
    return e.what();
  }
  return "";
}

std::string export_error(const Json& j) { return error_of(export_megatron, j); }

// What both exports must carry back: the batch, the precision and the layout with its split,
// schedule and recomputation.
void expect_same_layout(const RunConfig& a, const RunConfig& b) {
  EXPECT_EQ(a.training.seq_len, b.training.seq_len);
  EXPECT_EQ(a.training.global_batch_size, b.training.global_batch_size);
  EXPECT_EQ(a.training.precision, b.training.precision);
  const auto& p = a.parallel;
  const auto& q = b.parallel;
  EXPECT_EQ(plan::layout_text(p), plan::layout_text(q));
  EXPECT_EQ(p.schedule, q.schedule);
  EXPECT_EQ(p.vpp, q.vpp);
  EXPECT_EQ(a.vstage_layers, b.vstage_layers);
  EXPECT_EQ(p.recompute, q.recompute);
  EXPECT_EQ(p.recompute_layers, q.recompute_layers);
  EXPECT_EQ(p.cp_comm, q.cp_comm);
}

void expect_same_run(const RunConfig& a, const RunConfig& b) {
  expect_same_layout(a, b);
  EXPECT_EQ(a.model.num_layers, b.model.num_layers);
  EXPECT_EQ(a.model.hidden, b.model.hidden);
  EXPECT_EQ(a.model.kv_heads, b.model.kv_heads);
  EXPECT_EQ(a.model.ffn_hidden, b.model.ffn_hidden);
  EXPECT_DOUBLE_EQ(a.model.total_params(), b.model.total_params());
  EXPECT_EQ(a.cluster.num_gpus, b.cluster.num_gpus);
  EXPECT_EQ(a.cluster.gpus_per_node, b.cluster.gpus_per_node);
  EXPECT_EQ(a.training.grad_dtype, b.training.grad_dtype);
  EXPECT_EQ(a.training.mtp_layers, b.training.mtp_layers);
  const auto& p = a.parallel;
  const auto& q = b.parallel;
  EXPECT_EQ(p.sp, q.sp);
  EXPECT_EQ(recompute_module_list(p), recompute_module_list(q));
  EXPECT_EQ(p.moe.dispatcher, q.moe.dispatcher);
  EXPECT_DOUBLE_EQ(p.moe.capacity_factor, q.moe.capacity_factor);
  EXPECT_EQ(p.moe.pad_to_capacity, q.moe.pad_to_capacity);
  EXPECT_DOUBLE_EQ(p.bucket_mb, q.bucket_mb);
  EXPECT_EQ(p.bucket_layout, q.bucket_layout);
  EXPECT_EQ(p.async_linear_backward(), q.async_linear_backward());
  // And so the same prediction (the zoo's model and the imported architecture cost the same).
  const double ta = estimate::estimate_step(a).step_time_s;
  const double tb = estimate::estimate_step(b).step_time_s;
  EXPECT_NEAR(ta, tb, 1e-9 * ta);
}

// A dense GQA model on an interleaved pipeline with an uneven split, SP, CP, the distributed
// optimizer, selective recomputation of named modules and Megatron-Core buckets.
TEST(MegatronExport, DenseInterleavedLayoutRoundTrips) {
  const Json j = Json::parse(R"({
    "model": "llama3.1-70b", "hardware": "h100-sxm", "cluster": {"num_gpus": 256},
    "training": {"seq_len": 8192, "global_batch_size": 512, "grad_dtype": "fp32"},
    "parallel": {"tp": 4, "pp": 4, "cp": 2, "cp_comm": "allgather", "vpp": 5, "schedule": "interleaved", "sp": true, "tp_async_backward": true,
                 "zero_stage": 1, "recompute": "selective", "recompute_modules": ["core_attn", "mlp"],
                 "bucket_layout": "megatron", "bucket_mb": 160, "first_stage_layers": 15, "last_stage_layers": 15}})");
  const RunConfig rc = run_of(j);
  const ExportedCommand cmd = export_megatron(rc);
  const std::string text = shell_text(cmd);
  for (const char* want : {"--tensor-model-parallel-size 4", "--virtual-pipeline-model-parallel-size 5", "--cp-comm-type all_gather",
                           "--decoder-first-pipeline-num-layers 15", "--use-distributed-optimizer", "--recompute-modules core_attn mlp",
                           "--ddp-bucket-size 40000000", "--group-query-attention", "torchrun --nnodes 32 --nproc-per-node 8"}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
  // fp32 main gradients are Megatron's default: no --grad-reduce-in-bf16.
  EXPECT_EQ(text.find("grad-reduce-in-bf16"), std::string::npos);
  expect_same_run(rc, round_trip(rc, "h100-sxm"));
  // Megatron-LM's linear layers always launch the backward's TP collectives beside their GEMMs:
  // a run that models them blocking is exported with a note that says so. (Left unset under SP
  // the run already models them so: nothing to note.)
  Json blocking = j;
  blocking["parallel"].erase("tp_async_backward");
  for (const auto& n : export_megatron(run_of(blocking)).notes) EXPECT_EQ(n.find("tp_async_backward false"), std::string::npos) << n;
  blocking["parallel"]["tp_async_backward"] = false;
  bool noted = false;
  for (const auto& n : export_megatron(run_of(blocking)).notes) noted = noted || n.find("tp_async_backward false") != std::string::npos;
  EXPECT_TRUE(noted);
}

// MoE with multi-latent attention, dense first layers, group-limited routing, MTP, fp8, full
// recomputation of some layers, and a GPT-2 style model (learned positions, tied embeddings,
// biases, LayerNorm) under Megatron-FSDP and under its ZeRO-2 strategy.
TEST(MegatronExport, MoeMlaAndGptModelsRoundTrip) {
  const RunConfig ds = run_of(Json::parse(R"({
    "model": "deepseek-v3", "hardware": "h800", "cluster": {"num_gpus": 1024},
    "training": {"seq_len": 4096, "global_batch_size": 1024, "precision": "fp8", "mtp_layers": 1},
    "parallel": {"tp": 2, "pp": 8, "ep": 32, "etp": 1, "tp_async_backward": true, "zero_stage": 1, "first_stage_layers": 5, "last_stage_layers": 8, "bucket_layout": "megatron", "bucket_mb": 256, "sp": true, "recompute": "full", "recompute_layers": 2,
                 "moe": {"dispatcher": "alltoall", "capacity_factor": 1.25, "pad_to_capacity": true}}})"));
  const std::string text = shell_text(export_megatron(ds));
  for (const char* want : {"--multi-latent-attention", "--moe-layer-freq '([0]*3+[1]*58)'", "--moe-router-num-groups 8", "--mtp-num-layers 1",
                           "--fp8-format hybrid", "--recompute-method block", "--moe-expert-capacity-factor 1.25", "--grad-reduce-in-bf16"}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
  expect_same_run(ds, round_trip(ds, "h800"));

  Json gpt = Json::parse(R"({
    "model": "gpt2-large", "hardware": "a100-sxm-80gb", "cluster": {"num_gpus": 16},
    "training": {"seq_len": 1024, "global_batch_size": 64, "grad_dtype": "fp32"},
    "parallel": {"tp": 1, "fsdp": true}})");
  const RunConfig g = run_of(gpt);
  const std::string gtext = shell_text(export_megatron(g));
  EXPECT_EQ(gtext.find("--disable-bias-linear"), std::string::npos) << gtext;
  EXPECT_EQ(gtext.find("--untie-embeddings"), std::string::npos) << gtext;
  EXPECT_NE(gtext.find("--data-parallel-sharding-strategy optim_grads_params"), std::string::npos) << gtext;
  expect_same_run(g, round_trip(g, "a100-sxm-80gb"));
  gpt["parallel"] = Json{{"tp", 1}, {"zero_stage", 2}};
  const RunConfig z2 = run_of(gpt);
  EXPECT_NE(shell_text(export_megatron(z2)).find("--data-parallel-sharding-strategy optim_grads"), std::string::npos);
  expect_same_run(z2, round_trip(z2, "a100-sxm-80gb"));
}

// What Megatron-LM has no argument for is an error naming the run-file field.
TEST(MegatronExport, RefusesWhatMegatronCannotRun) {
  const Json base = Json::parse(R"({"model": "llama3.1-8b", "hardware": "h100-sxm", "cluster": {"num_gpus": 16},
                                   "training": {"seq_len": 4096, "global_batch_size": 64}, "parallel": {"tp": 2, "pp": 2}})");
  EXPECT_EQ(export_error(base), "");
  Json zbv = base;
  zbv["parallel"]["schedule"] = "zbv";
  zbv["parallel"]["vpp"] = 2;
  EXPECT_NE(export_error(zbv).find("parallel.schedule: got zbv"), std::string::npos) << export_error(zbv);
  Json gpipe = base;
  gpipe["parallel"]["schedule"] = "gpipe";
  EXPECT_NE(export_error(gpipe).find("parallel.schedule"), std::string::npos);
  Json offload = base;
  offload["parallel"] = Json{{"tp", 1}, {"zero_stage", 1}, {"offload", "optimizer"}};
  EXPECT_NE(export_error(offload).find("parallel.offload"), std::string::npos) << export_error(offload);
  Json titan_ac = base;
  titan_ac["parallel"]["recompute"] = "selective-op";
  EXPECT_NE(export_error(titan_ac).find("parallel.recompute"), std::string::npos);
  Json hybrid = base;
  hybrid["model"] = "nemotron-h-8b";
  EXPECT_NE(export_error(hybrid).find("model: 'nemotron-h-8b' has Mamba"), std::string::npos) << export_error(hybrid);
  Json windowed = base;
  windowed["model"] = "gpt-oss-120b";
  windowed["parallel"] = Json{{"tp", 1}, {"ep", 8}};
  EXPECT_NE(export_error(windowed).find("sliding-window"), std::string::npos) << export_error(windowed);
  // A parallel block behind one norm (Falcon 7B's form) and GPT-Neo's attention without Q/K/V
  // biases: Megatron-LM's GPT layer states neither.
  Json parallel_block = base;
  parallel_block["model"] = Json{{"model_type", "falcon"}, {"hidden_size", 1024}, {"num_attention_heads", 16},
                                 {"num_hidden_layers", 4}, {"multi_query", true}, {"parallel_attn", true}, {"vocab_size", 32000}};
  EXPECT_NE(export_error(parallel_block).find("model: 'custom' runs attention and the MLP side by side behind one norm"), std::string::npos)
      << export_error(parallel_block);
  Json neo = base;
  neo["model"] = Json{{"model_type", "gpt_neo"}, {"hidden_size", 1024}, {"num_heads", 16}, {"num_layers", 4},
                      {"max_position_embeddings", 4096}, {"vocab_size", 32000},
                      {"attention_types", Json::array({Json::array({Json::array({"global"}), 4})})}};
  EXPECT_NE(export_error(neo).find("has biases on some linear layers and not others"), std::string::npos) << export_error(neo);
}

// torchtitan: the layout comes back from the TOML as it went out (the import then predicts it
// with torchtitan's own runtime, so the step is not compared): FSDP2 with HSDP, op-level AC and
// float8; a V-schedule pipeline with the run's uneven split as module lists; a MoE model with
// expert parallelism that torchtitan ships no flavor of.
RunConfig titan_round_trip(const RunConfig& rc) { return accuracy::as_torchtitan_runs_it(rc); }

// torchtitan's own settings besides: the zoo model it names, the data-parallel sharding.
void expect_same_titan_layout(const RunConfig& a, const RunConfig& b) {
  expect_same_layout(a, b);
  EXPECT_EQ(a.model.name, b.model.name);
  const auto& p = a.parallel;
  const auto& q = b.parallel;
  EXPECT_EQ(p.dp_replicate, q.dp_replicate);
  EXPECT_EQ(p.fsdp || p.zero_stage == 3, q.fsdp || q.zero_stage == 3);
  EXPECT_EQ(p.reshard_after_forward, q.reshard_after_forward);
}

TEST(TorchtitanExport, LayoutsRoundTrip) {
  const RunConfig hsdp = run_of(Json::parse(R"({
    "model": "llama3.1-8b", "hardware": "h100-sxm", "cluster": {"num_gpus": 64},
    "training": {"seq_len": 8192, "global_batch_size": 128, "precision": "fp8"},
    "parallel": {"tp": 2, "fsdp": true, "dp_replicate": 4, "micro_batch_size": 1, "recompute": "selective-op"}})"));
  const ExportedConfig cfg = export_torchtitan(hsdp);
  const std::string text = toml_text(cfg);
  for (const char* want : {"flavor = \"8B\"", "converters = [\"float8\"]", "data_parallel_replicate_degree = 4", "data_parallel_shard_degree = 8",
                           "selective_ac_option = \"op\"", "local_batch_size = 1"}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
  expect_same_titan_layout(hsdp, titan_round_trip(hsdp));

  const RunConfig zbv = run_of(Json::parse(R"({
    "model": "llama3.1-70b", "hardware": "h100-sxm", "cluster": {"num_gpus": 128},
    "training": {"seq_len": 8192, "global_batch_size": 256},
    "parallel": {"tp": 8, "pp": 4, "cp": 2, "cp_comm": "ring", "vpp": 2, "schedule": "zbv", "fsdp": true, "micro_batch_size": 1,
                 "recompute": "full", "recompute_layers": 5, "stage_layers": [9, 10, 10, 10, 10, 10, 10, 11]}})"));
  const std::string ztext = toml_text(export_torchtitan(zbv));
  for (const char* want : {"pipeline_parallel_schedule = \"ZBVZeroBubble\"", "context_parallel_rotate_method = \"alltoall\"",
                           "fsdp_reshard_after_forward = \"always\"", "selective_ac_option = \"2\"", "\"layers.79\",\"norm\",\"output\"]]"}) {
    EXPECT_NE(ztext.find(want), std::string::npos) << want << "\n" << ztext;
  }
  expect_same_titan_layout(zbv, titan_round_trip(zbv));

  // Every layer checkpointed, written as full AC or as layer SAC of every layer, is one run: the
  // layer-SAC blocks are wrapped as full AC wraps them, so their recomputation stops early too.
  Json every = Json::parse(R"({
    "model": "llama3.1-8b", "hardware": "h100-sxm", "cluster": {"num_gpus": 8},
    "training": {"seq_len": 8192, "global_batch_size": 16},
    "parallel": {"fsdp": true, "micro_batch_size": 2, "recompute": "full"}})");
  const RunConfig full_ac = titan_round_trip(run_of(every));
  every["parallel"]["recompute_layers"] = 32;
  EXPECT_NE(toml_text(export_torchtitan(run_of(every))).find("selective_ac_option = \"1\""), std::string::npos);
  const RunConfig layer_sac = titan_round_trip(run_of(every));
  EXPECT_TRUE(full_ac.parallel.recompute_stops_early);
  EXPECT_TRUE(layer_sac.parallel.recompute_stops_early);
  const double t_full = estimate::estimate_step(full_ac).step_time_s;
  EXPECT_NEAR(estimate::estimate_step(layer_sac).step_time_s, t_full, 1e-9 * t_full);

  // A model torchtitan ships no flavor of: the config says so and import takes --model.
  const RunConfig moe = run_of(Json::parse(R"({
    "model": "qwen3-30b-a3b", "hardware": "h100-sxm", "cluster": {"num_gpus": 16},
    "training": {"seq_len": 4096, "global_batch_size": 64},
    "parallel": {"tp": 1, "ep": 8, "fsdp": true, "micro_batch_size": 2}})"));
  const ExportedConfig dcfg = export_torchtitan(moe);
  EXPECT_FALSE(dcfg.tables.contains("model"));
  EXPECT_NE(dcfg.notes.front().find("--model qwen3-30b-a3b"), std::string::npos) << dcfg.notes.front();
  EXPECT_EQ(dcfg.tables["parallelism"]["expert_parallel_degree"], 8);
  expect_same_titan_layout(moe, titan_round_trip(moe));

  // torchtitan's runtime of a run already in it is the same run (the planner costs each layout
  // once; a second round trip must not drift): the step, the memory and the training settings.
  for (const RunConfig* rc : {&hsdp, &zbv, &moe}) {
    const RunConfig once = titan_round_trip(*rc);
    const RunConfig twice = titan_round_trip(once);
    EXPECT_EQ(twice.training.loss, once.training.loss);
    EXPECT_EQ(twice.training.fused_elementwise, once.training.fused_elementwise);
    EXPECT_EQ(twice.training.param_dtype, once.training.param_dtype);
    const auto e1 = estimate::estimate_step(once);
    const auto e2 = estimate::estimate_step(twice);
    EXPECT_NEAR(e2.step_time_s, e1.step_time_s, 1e-9 * e1.step_time_s) << plan::layout_text(rc->parallel);
    EXPECT_NEAR(e2.memory.peak().value(), e1.memory.peak().value(), 1.0) << plan::layout_text(rc->parallel);
  }
  // The compiled loss (torchtitan's [compile] components: the model and the loss) is costed as
  // the fused loss the exported run had.
  EXPECT_EQ(titan_round_trip(hsdp).training.loss, hsdp.training.loss);
  // A profile that is not a built-in (a file, or a built-in with overrides) is the one costed.
  Json custom = Json::parse(R"({
    "model": "llama3.1-8b", "cluster": {"num_gpus": 16},
    "hardware": {"base": "h100-sxm", "name": "h100-slow-hbm", "gpu": {"memory_bandwidth": "2TB/s"}},
    "training": {"seq_len": 4096, "global_batch_size": 64}, "parallel": {"tp": 2, "fsdp": true, "micro_batch_size": 1}})");
  const RunConfig slow = run_of(custom);
  const RunConfig slow_titan = titan_round_trip(slow);
  EXPECT_EQ(slow_titan.hardware.name, "h100-slow-hbm");
  EXPECT_DOUBLE_EQ(slow_titan.hardware.hbm_bandwidth.value(), 2e12);
  custom["hardware"] = "h100-sxm";
  EXPECT_GT(estimate::estimate_step(slow_titan).step_time_s, estimate::estimate_step(titan_round_trip(run_of(custom))).step_time_s);
}

// Neither framework runs the FlashAttention Triton kernel: both exports run their own attention
// and say that the prediction costs a slower kernel than the launch will run.
TEST(TorchtitanExport, TritonAttentionIsNamedInTheNotes) {
  const RunConfig rc = run_of(Json::parse(R"({
    "model": "llama3.1-8b", "hardware": "a100-sxm-80gb", "cluster": {"num_gpus": 8},
    "training": {"seq_len": 4096, "global_batch_size": 64, "attention": "triton"},
    "parallel": {"fsdp": true, "micro_batch_size": 2}})"));
  auto noted = [](const std::vector<std::string>& notes) {
    return std::any_of(notes.begin(), notes.end(), [](const std::string& n) { return n.rfind("training.attention triton", 0) == 0; });
  };
  EXPECT_TRUE(noted(export_torchtitan(rc).notes));
  EXPECT_TRUE(noted(export_megatron(rc).notes));
  const RunConfig flash2 = run_of(Json::parse(R"({
    "model": "llama3.1-8b", "hardware": "a100-sxm-80gb", "cluster": {"num_gpus": 8},
    "training": {"seq_len": 4096, "global_batch_size": 64, "attention": "flash2"},
    "parallel": {"fsdp": true, "micro_batch_size": 2}})"));
  EXPECT_FALSE(noted(export_torchtitan(flash2).notes));
}

// fp8 settings neither framework can change are named in the notes: both gather the quantized
// shards under TP; Transformer Engine keeps fp8 inputs, torchao keeps what float8 TP hands it
// (fp8 with TP, bf16 without).
TEST(FrameworkExport, Fp8SettingsTheFrameworkFixesAreNamed) {
  auto noted = [](const std::vector<std::string>& notes, const std::string& key) {
    return std::any_of(notes.begin(), notes.end(), [&](const std::string& n) { return n.rfind(key, 0) == 0; });
  };
  Json j = Json::parse(R"({
    "model": "llama3.1-8b", "hardware": "h100-sxm", "cluster": {"num_gpus": 8},
    "training": {"seq_len": 4096, "global_batch_size": 64, "precision": "fp8"},
    "parallel": {"tp": 2, "sp": true, "fsdp": true, "micro_batch_size": 1}})");
  const RunConfig defaults = run_of(j);
  for (const auto& notes : {export_megatron(defaults).notes, export_torchtitan(defaults).notes}) {
    EXPECT_FALSE(noted(notes, "training.fp8_tp_gather"));
    EXPECT_FALSE(noted(notes, "training.fp8_saved_inputs"));
  }
  j["training"]["fp8_tp_gather"] = false;
  j["training"]["fp8_saved_inputs"] = false;
  const RunConfig wide = run_of(j);
  for (const auto& notes : {export_megatron(wide).notes, export_torchtitan(wide).notes}) {
    EXPECT_TRUE(noted(notes, "training.fp8_tp_gather false"));
    EXPECT_TRUE(noted(notes, "training.fp8_saved_inputs false"));
  }
  // Without TP torchao keeps the bf16 inputs: Transformer Engine's default is torchao's mistake.
  j = Json::parse(R"({
    "model": "llama3.1-8b", "hardware": "h100-sxm", "cluster": {"num_gpus": 8},
    "training": {"seq_len": 4096, "global_batch_size": 64, "precision": "fp8"},
    "parallel": {"fsdp": true, "micro_batch_size": 1}})");
  EXPECT_TRUE(noted(export_torchtitan(run_of(j)).notes, "training.fp8_saved_inputs true"));
  EXPECT_FALSE(noted(export_megatron(run_of(j)).notes, "training.fp8_saved_inputs"));
  // The norm writing the fp8 input is Transformer Engine's; torchao casts in the linear.
  EXPECT_TRUE(noted(export_torchtitan(run_of(j)).notes, "training.fp8_norm_quantize true"));
  EXPECT_FALSE(noted(export_megatron(run_of(j)).notes, "training.fp8_norm_quantize"));
  j["training"]["fp8_norm_quantize"] = false;
  EXPECT_FALSE(noted(export_torchtitan(run_of(j)).notes, "training.fp8_norm_quantize"));
  EXPECT_TRUE(noted(export_megatron(run_of(j)).notes, "training.fp8_norm_quantize false"));
}

TEST(TorchtitanExport, RefusesWhatTorchtitanCannotRun) {
  const Json base = Json::parse(R"({"model": "llama3.1-8b", "hardware": "h100-sxm", "cluster": {"num_gpus": 16},
                                   "training": {"seq_len": 4096, "global_batch_size": 64}, "parallel": {"tp": 2, "fsdp": true}})");
  auto error = [](const Json& j) { return error_of(export_torchtitan, j); };
  EXPECT_EQ(error(base), "");
  Json z1 = base;
  z1["parallel"] = Json{{"tp", 2}, {"zero_stage", 1}};
  EXPECT_NE(error(z1).find("parallel.zero_stage: got 1"), std::string::npos) << error(z1);
  Json modules = base;
  modules["parallel"]["recompute"] = "selective";
  EXPECT_NE(error(modules).find("parallel.recompute"), std::string::npos) << error(modules);
  Json ulysses = base;
  ulysses["parallel"]["cp"] = 2;
  ulysses["parallel"]["cp_comm"] = "ulysses";
  EXPECT_NE(error(ulysses).find("parallel.cp_comm: got ulysses"), std::string::npos) << error(ulysses);
  Json fp16 = base;
  fp16["training"]["precision"] = "fp16";
  EXPECT_NE(error(fp16).find("training.precision"), std::string::npos);
}

// DeepSpeed: the config carries the batch, precision and ZeRO settings and comes back through
// `import deepspeed` as the same layout, with DeepSpeed's runtime (its gradient dtype, BF16
// optimizer, in-step parameter gathers); the bucket goes out in elements of the dtype the
// gradients are reduced in.
TEST(DeepspeedExport, ConfigsRoundTrip) {
  const RunConfig z2 = run_of(Json::parse(R"({
    "model": "llama3.1-8b", "hardware": "h100-sxm", "cluster": {"num_gpus": 16},
    "training": {"seq_len": 4096, "global_batch_size": 128},
    "parallel": {"zero_stage": 2, "micro_batch_size": 2, "bucket_mb": 200, "recompute": "full"}})"));
  const ExportedConfig cfg = export_deepspeed(z2);
  EXPECT_EQ(cfg.tables["train_batch_size"], 128);
  EXPECT_EQ(cfg.tables["train_micro_batch_size_per_gpu"], 2);
  EXPECT_EQ(cfg.tables["gradient_accumulation_steps"], 4);
  EXPECT_EQ(cfg.tables["bf16"]["enabled"], true);
  EXPECT_EQ(cfg.tables["zero_optimization"]["stage"], 2);
  EXPECT_EQ(cfg.tables["zero_optimization"]["reduce_bucket_size"], 100000000);  // 200 MB of bf16 gradients
  EXPECT_NE(json_config_text(cfg).find("\"overlap_comm\": true"), std::string::npos) << json_config_text(cfg);
  const RunConfig back = as_deepspeed_runs_it(z2);
  expect_same_layout(z2, back);
  EXPECT_DOUBLE_EQ(back.parallel.bucket_mb, 200.0);
  EXPECT_FALSE(back.parallel.param_gather_overlap);  // ZeRO-2's gathers run inside DeepSpeed's optimizer step
  // The notes carry what the config does not: the launcher, the sequence, the checkpointing.
  std::string notes;
  for (const auto& n : cfg.notes) notes += n + "\n";
  for (const char* want : {"deepspeed --num_nodes 2 --num_gpus 8", "4096 tokens", "gradient_checkpointing_enable", "--recompute full"}) {
    EXPECT_NE(notes.find(want), std::string::npos) << want << "\n" << notes;
  }

  // DeepSpeed's BF16 optimizer (bf16, ZeRO-1, no offload) reduces fp32 gradients: the same
  // 200 MB bucket is half the elements.
  Json j1 = Json::parse(R"({"model": "llama3.1-8b", "hardware": "h100-sxm", "cluster": {"num_gpus": 16},
    "training": {"seq_len": 4096, "global_batch_size": 128}, "parallel": {"zero_stage": 1, "micro_batch_size": 2, "bucket_mb": 200}})");
  const RunConfig z1 = run_of(j1);
  EXPECT_EQ(export_deepspeed(z1).tables["zero_optimization"]["reduce_bucket_size"], 50000000);
  const RunConfig z1_back = as_deepspeed_runs_it(z1);
  expect_same_layout(z1, z1_back);
  EXPECT_EQ(z1_back.training.grad_dtype, hw::Dtype::kFp32);
  EXPECT_DOUBLE_EQ(z1_back.parallel.bucket_mb, 200.0);

  // ZeRO-3 with the parameters (and so the optimizer) offloaded to the CPU.
  const RunConfig z3 = run_of(Json::parse(R"({"model": "llama3.1-70b", "hardware": "h100-sxm", "cluster": {"num_gpus": 16},
    "training": {"seq_len": 4096, "global_batch_size": 64}, "parallel": {"zero_stage": 3, "micro_batch_size": 1, "offload": "params", "recompute": "full"}})"));
  const ExportedConfig c3 = export_deepspeed(z3);
  EXPECT_EQ(c3.tables["zero_optimization"]["offload_param"]["device"], "cpu");
  EXPECT_EQ(c3.tables["zero_optimization"]["offload_optimizer"]["device"], "cpu");
  EXPECT_FALSE(c3.tables["zero_optimization"].contains("reduce_bucket_size"));
  const RunConfig z3_back = as_deepspeed_runs_it(z3);
  expect_same_layout(z3, z3_back);
  EXPECT_EQ(z3_back.parallel.offload, Offload::kParams);
  EXPECT_TRUE(z3_back.parallel.zero3_recompute_regather);

  // DeepSpeed's runtime of a run already in it is the same run.
  for (const RunConfig* rc : {&z2, &z1, &z3}) {
    const RunConfig once = as_deepspeed_runs_it(*rc);
    const double e1 = estimate::estimate_step(once).step_time_s;
    EXPECT_NEAR(estimate::estimate_step(as_deepspeed_runs_it(once)).step_time_s, e1, 1e-9 * e1) << plan::layout_text(rc->parallel);
  }
}

TEST(DeepspeedExport, RefusesWhatAConfigCannotRun) {
  const Json base = Json::parse(R"({"model": "llama3.1-8b", "hardware": "h100-sxm", "cluster": {"num_gpus": 16},
                                   "training": {"seq_len": 4096, "global_batch_size": 64}, "parallel": {"zero_stage": 1}})");
  auto error = [](const Json& j) { return error_of(export_deepspeed, j); };
  EXPECT_EQ(error(base), "");
  const std::vector<std::pair<Json, std::string>> cases = {
      {Json{{"parallel", {{"tp", 2}}}}, "parallel.tp: got 2"},
      {Json{{"parallel", {{"pp", 2}}}}, "parallel.pp: got 2"},
      {Json{{"parallel", {{"zero_stage", nullptr}, {"fsdp", true}}}}, "parallel.fsdp"},
      {Json{{"parallel", {{"recompute", "selective"}}}}, "parallel.recompute: got selective"},
      {Json{{"parallel", {{"recompute", "full"}, {"recompute_layers", 8}}}}, "parallel.recompute_layers: 8 of 32"},
      {Json{{"training", {{"precision", "fp8"}}}}, "training.precision: got fp8"},
      {Json{{"training", {{"optimizer", "sgd"}}}}, "training.optimizer: got sgd"},
  };
  for (const auto& [patch, want] : cases) {
    Json j = base;
    j.merge_patch(patch);
    EXPECT_NE(error(j).find(want), std::string::npos) << patch.dump() << ": " << error(j);
  }
}

// Accelerate: the YAML carries the data-parallel sharding (FSDP's strategies, DDP), offload,
// checkpointing and precision, and comes back through `import accelerate` as the same layout.
TEST(AccelerateExport, ConfigsRoundTrip) {
  const Json base = Json::parse(R"({"model": "llama3.1-8b", "hardware": "h100-sxm", "cluster": {"num_gpus": 16},
    "training": {"seq_len": 4096, "global_batch_size": 128}, "parallel": {"fsdp": true, "micro_batch_size": 2, "recompute": "full"}})");
  const RunConfig full = run_of(base);
  const ExportedConfig cfg = export_accelerate(full);
  const std::string text = yaml_text(cfg);
  for (const char* want : {"distributed_type: FSDP", "fsdp_sharding_strategy: FULL_SHARD", "fsdp_activation_checkpointing: true", "mixed_precision: bf16",
                           "num_machines: 2", "num_processes: 16", "--micro-batch 2 --grad-accum 4"}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
  const std::vector<std::pair<Json, std::string>> variants = {
      {Json::object(), "FULL_SHARD"},
      {Json{{"parallel", {{"reshard_after_forward", false}}}}, "SHARD_GRAD_OP"},
      {Json{{"parallel", {{"dp_replicate", 2}}}}, "HYBRID_SHARD"},
      {Json{{"parallel", {{"offload", "params"}}}}, "fsdp_offload_params: true"},
      {Json{{"parallel", {{"fsdp", false}, {"recompute", "none"}}}}, "distributed_type: MULTI_GPU"},
  };
  for (const auto& [patch, want] : variants) {
    Json j = base;
    j.merge_patch(patch);
    const RunConfig rc = run_of(j);
    EXPECT_NE(yaml_text(export_accelerate(rc)).find(want), std::string::npos) << patch.dump();
    const RunConfig back = as_accelerate_runs_it(rc);
    expect_same_layout(rc, back);
    EXPECT_EQ(back.parallel.dp_replicate, rc.parallel.dp_replicate) << patch.dump();
    EXPECT_EQ(back.parallel.reshard_after_forward, rc.parallel.reshard_after_forward) << patch.dump();
    EXPECT_EQ(back.parallel.offload, rc.parallel.offload) << patch.dump();
    EXPECT_EQ(back.training.attention, AttentionImpl::kFlash2) << patch.dump();
    // A second round trip is the same run.
    const double e1 = estimate::estimate_step(back).step_time_s;
    EXPECT_NEAR(estimate::estimate_step(as_accelerate_runs_it(back)).step_time_s, e1, 1e-9 * e1) << patch.dump();
  }
  const std::vector<std::pair<Json, std::string>> refused = {
      {Json{{"parallel", {{"tp", 2}}}}, "parallel.tp: got 2"},
      {Json{{"parallel", {{"fsdp", nullptr}, {"zero_stage", 1}}}}, "parallel.zero_stage: got 1"},
      {Json{{"parallel", {{"dp_replicate", 4}}}}, "parallel.dp_replicate: got 4"},
      {Json{{"parallel", {{"recompute_layers", 8}}}}, "parallel.recompute_layers: 8 of 32"},
      {Json{{"training", {{"optimizer", "sgd"}}}}, "training.optimizer: got sgd"},
  };
  for (const auto& [patch, want] : refused) {
    Json j = base;
    j.merge_patch(patch);
    const std::string why = error_of(export_accelerate, j);
    EXPECT_NE(why.find(want), std::string::npos) << patch.dump() << ": " << why;
  }
}

}  // namespace
}  // namespace stepcast::config
