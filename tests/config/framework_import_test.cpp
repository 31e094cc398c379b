// `stepcast import`: Megatron-LM launch arguments and DeepSpeed configs as run files. The
// architecture arguments of a published model rebuild its zoo entry exactly; the layout, each
// framework's defaults (stated as assumptions) and the settings with no modelled cost (listed as
// ignored) are checked, and every malformed input names the argument or key.
#include "sim/config/framework_import.hpp"

#include <gtest/gtest.h>

#include <string>

#include "models/model_spec.hpp"
#include "sim/config/run_config.hpp"
#include "sim/core/error.hpp"
#include "sim/core/json_reader.hpp"
#include "sim/estimate/estimate.hpp"

namespace stepcast::config {
namespace {

using core::Json;

// A config under configs/launch (the README's and WORKFLOW's examples).
std::string launch_text(const std::string& name) {
  return core::load_text_file(std::string(STEPCAST_TEST_DATA_DIR) + "/../../configs/launch/" + name);
}

std::string llama8b_script() { return launch_text("megatron-llama3-8b.sh"); }

std::string error_of(const std::vector<std::string>& args, ImportOptions opt = {}) {
  try {
    (void)import_megatron(args, opt);
  } catch (const core::UserError& e) {
    return e.what();
  }
  return "";
}

TEST(MegatronImport, SplitsALaunchScript) {
  const auto w = split_command_line(llama8b_script());
  ASSERT_FALSE(w.empty()) << "configs/launch/megatron-llama3-8b.sh";
  ASSERT_GE(w.size(), 4u);
  EXPECT_EQ(w[0], "torchrun");
  EXPECT_EQ(w[1], "--nproc_per_node");
  EXPECT_NE(std::find(w.begin(), w.end(), "/data/my text_document"), w.end());  // quoted, one word
  EXPECT_EQ(std::find(w.begin(), w.end(), "#"), w.end());                       // comments dropped
  EXPECT_EQ(std::find(w.begin(), w.end(), "\\"), w.end());                      // continuations joined
  EXPECT_THROW(split_command_line("--a 'unclosed"), core::UserError);
}

// Launch scripts in the form Megatron-LM's examples take: variables, arrays of arguments over
// several lines, defaults and arithmetic, expanded as the shell would before torchrun sees them.
TEST(MegatronImport, ExpandsALaunchScriptsVariablesAndArrays) {
  const std::string script = R"(#!/bin/bash
export CUDA_DEVICE_MAX_CONNECTIONS=1
GPUS_PER_NODE=8
NUM_NODES=4
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))
CHECKPOINT_PATH=$1 # given on the command line
NAME="my run"
DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes ${NUM_NODES}   # a comment (with parentheses) inside the array
)
MODEL_ARGS=(--num-layers 32 --hidden-size 4096)
MODEL_ARGS+=(--seq-length 8192)
TP=${TP:-2}
CP=${CP-4}
torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    "${MODEL_ARGS[@]}" --tensor-model-parallel-size $TP --context-parallel-size "$CP" \
    --world $WORLD_SIZE --tag "$NAME" --ckpt $CHECKPOINT_PATH --literal '$TP' --later $(hostname) --half $((WORLD_SIZE / 2)) 2>&1 > out.log | tee log
)";
  const auto w = split_command_line(script);
  const std::vector<std::string> expected = {
      "torchrun", "--nproc_per_node", "8", "--nnodes", "4", "pretrain_gpt.py", "--num-layers", "32", "--hidden-size", "4096",
      "--seq-length", "8192", "--tensor-model-parallel-size", "2", "--context-parallel-size", "4", "--world", "32",
      "--tag", "my run", "--ckpt", "$1", "--literal", "$TP", "--later", "$(hostname)", "--half", "16", "tee", "log"};
  EXPECT_EQ(w, expected);
  // A script that leaves an array open, or a substitution, is refused rather than guessed at.
  EXPECT_THROW(split_command_line("ARGS=(\n --num-layers 2\n"), core::UserError);
  EXPECT_THROW(split_command_line("torchrun --nnodes $((2 * 4"), core::UserError);
  // Arithmetic that overflows, names itself or nests without end stays as written; an array
  // that doubles itself without end is refused, not expanded.
  EXPECT_EQ(split_command_line("X=X\necho $((X))"), (std::vector<std::string>{"echo", "$((X))"}));
  EXPECT_EQ(split_command_line("echo $((9223372036854775807 * 2))"), (std::vector<std::string>{"echo", "$((9223372036854775807 * 2))"}));
  EXPECT_EQ(split_command_line("echo $((" + std::string(5000, '-') + "1))").size(), 2U);
  std::string doubling = "A=(--x)\n";
  for (int i = 0; i < 40; ++i) doubling += "A+=(${A[@]})\n";
  EXPECT_THROW(split_command_line(doubling + "torchrun ${A[@]}"), core::UserError);
  // Parameter operators: assigning defaults (the `: ${X:=v}` idiom), defaults for unset or
  // empty names, alternatives, a default that names another variable; ${X:?} stays as written.
  const std::string ops = R"(: ${TP:=4}
: "${PP:=2}"
EMPTY=""
SP=1
torchrun ${TP} $PP ${EMPTY:-d1} "${EMPTY-d2}" ${UNSET-d3} ${SP:+--sequence-parallel} ${EMPTY:+--never} ${UNSET+--never} \
  ${CP:-$TP} ${CP:-${PP}x} ${TP:?} ${TP:=9}
)";
  EXPECT_EQ(split_command_line(ops), (std::vector<std::string>{":", "4", ":", "2", "torchrun", "4", "2", "d1", "", "d3", "--sequence-parallel",
                                                              "4", "2x", "${TP:?}", "4"}));
  // The whole import: the run file gets the GPUs and layout the expanded arguments give.
  const Json run = import_megatron(split_command_line(script + " --num-attention-heads 32 --ffn-hidden-size 14336 --swiglu"
                                                               " --vocab-size 128256 --micro-batch-size 1 --global-batch-size 64"),
                                   {});
  EXPECT_EQ(run["cluster"]["num_gpus"], 32);
  EXPECT_EQ(run["parallel"]["tp"], 2);
  EXPECT_EQ(run["parallel"]["cp"], 4);
}

TEST(MegatronImport, Llama8bRebuildsTheZooModelAndItsLayout) {
  const Json run = import_megatron(split_command_line(llama8b_script()), {});
  const RunConfig rc = parse_run(run, "<import>", "");
  const auto zoo = model::zoo_model("llama3.1-8b");
  EXPECT_DOUBLE_EQ(rc.model.total_params(), zoo.total_params());
  EXPECT_EQ(rc.cluster.num_gpus, 64);  // torchrun: 8 nodes x 8
  EXPECT_EQ(rc.cluster.gpus_per_node, 8);
  EXPECT_EQ(rc.parallel.tp, 2);
  EXPECT_EQ(rc.parallel.cp, 2);
  EXPECT_EQ(rc.parallel.dp, 16);
  EXPECT_TRUE(rc.parallel.sp);
  EXPECT_EQ(rc.parallel.zero_stage, 1);
  EXPECT_EQ(rc.parallel.recompute, Recompute::kFull);
  EXPECT_EQ(rc.parallel.recompute_layers, 4);
  EXPECT_EQ(rc.parallel.bucket_layout, BucketLayout::kMegatron);
  EXPECT_DOUBLE_EQ(rc.parallel.bucket_mb, 40e6 * 4 / 1e6);  // max(40 M, 1 M x dp x cp) fp32 main grads
  EXPECT_EQ(rc.training.global_batch_size, 128);
  EXPECT_EQ(rc.training.seq_len, 8192);
  EXPECT_EQ(run["notes"].get<std::string>(), "ignored (no modelled cost): --data-path --log-interval --lr");
  // A zoo name instead of the architecture: the same model, and the run says so.
  ImportOptions z{.model = "llama3.1-8b"};
  const Json zr = import_megatron(split_command_line(llama8b_script()), z);
  EXPECT_EQ(zr["model"], "llama3.1-8b");
  EXPECT_DOUBLE_EQ(parse_run(zr, "<import>", "").model.total_params(), zoo.total_params());
}

// Megatron's own defaults where arguments are omitted, each written down.
// --fp8-param-gather makes the parameters fp8 (fp8_weights primary, as 16-bit weights in the
// ledger); without it Transformer Engine caches fp8 copies beside the 16-bit parameters, a
// stated assumption. It is a switch: the argument after it is not swallowed as its value.
TEST(MegatronImport, Fp8ParamGatherSetsTheFp8Weights) {
  const std::string fp8 = llama8b_script() + " --fp8-format hybrid";
  const Json cached = import_megatron(split_command_line(fp8), {});
  EXPECT_EQ(cached["training"]["fp8_weights"], "cached");
  // (Before --fp8-format: were the switch to take a value, fp8 would be lost.)
  const Json primary = import_megatron(split_command_line(llama8b_script() + " --fp8-param-gather --fp8-format hybrid"), {});
  EXPECT_EQ(primary["training"]["precision"], "fp8");
  EXPECT_EQ(primary["training"]["fp8_weights"], "primary");
  const RunConfig a = parse_run(cached, "<import>", ""), b = parse_run(primary, "<import>", "");
  EXPECT_EQ(a.fp8_weights(), Fp8Weights::kCached);
  EXPECT_EQ(b.fp8_weights(), Fp8Weights::kPrimary);
  EXPECT_FALSE(import_megatron(split_command_line(llama8b_script()), {})["training"].contains("fp8_weights"));
}

TEST(MegatronImport, DefaultsAreStated) {
  const Json run = import_megatron({"--num-layers", "24", "--hidden-size", "2048", "--num-attention-heads", "16", "--vocab-size", "50304",
                                    "--seq-length", "2048", "--swiglu", "--fp16"},
                                   ImportOptions{.gpus = 8});
  EXPECT_EQ(run["model"]["intermediate_size"], 5440);  // int(8 x 2048 / 3 / 64) x 64
  EXPECT_EQ(run["model"]["tie_word_embeddings"], true);
  EXPECT_EQ(run["model"]["linear_bias"], true);
  EXPECT_EQ(run["model"]["position_embedding"], "learned");
  EXPECT_EQ(run["training"]["global_batch_size"], 8);  // micro-batch 1 x dp 8
  EXPECT_EQ(run["parallel"]["grad_reduce_overlap"], false);
  std::string all;
  for (const auto& a : run["assumptions"]) all += a.get<std::string>() + "\n";
  for (const char* what : {"MLP width 5440", "tied", "biases", "learned absolute", "one piece", "micro-batch x dp"}) {
    EXPECT_NE(all.find(what), std::string::npos) << what << " in\n" << all;
  }
  EXPECT_NO_THROW(parse_run(run, "<import>", ""));
  // Nemotron-style: squared ReLU (a 2-matrix MLP) and no position embedding.
  const Json nemotron = import_megatron({"--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "8", "--vocab-size", "256000",
                                         "--seq-length", "4096", "--squared-relu", "--no-position-embedding", "--bf16"},
                                        ImportOptions{.gpus = 8});
  EXPECT_EQ(nemotron["model"]["hidden_act"], "relu2");
  EXPECT_EQ(nemotron["model"]["position_embedding"], "none");
  EXPECT_FALSE(nemotron.contains("notes"));
  // A hybrid (pretrain_mamba.py): the pattern's blocks and the Mamba-2 arguments.
  const Json hybrid = import_megatron({"--num-layers", "8", "--hidden-size", "1024", "--num-attention-heads", "8", "--vocab-size", "131072",
                                       "--seq-length", "4096", "--squared-relu", "--position-embedding-type", "none", "--bf16", "--is-hybrid-model",
                                       "--hybrid-override-pattern", "M-M*M-M-", "--mamba-state-dim", "64", "--mamba-num-groups", "4",
                                       "--disable-bias-linear", "--normalization", "RMSNorm", "--untie-embeddings-and-output-weights",
                                       "--tensor-model-parallel-size", "2"},
                                      ImportOptions{.gpus = 8});
  EXPECT_FALSE(hybrid.contains("notes")) << hybrid["notes"];
  const auto rc = parse_run(hybrid, "<import>", "");
  EXPECT_EQ(rc.model.layer_pattern, "M-M*M-M-");
  EXPECT_EQ(rc.model.mamba.heads, 32);  // 2 x 1024 / 64
  EXPECT_EQ(rc.model.mamba.state, 64);
  EXPECT_EQ(rc.model.mamba.groups, 4);
  EXPECT_EQ(rc.model.num_mamba_layers(), 4);
  // Newer releases: --hybrid-layer-pattern with '|' stage marks, the layer count from the pattern.
  const Json piped = import_megatron({"--hidden-size", "1024", "--num-attention-heads", "8", "--vocab-size", "131072", "--seq-length", "4096",
                                      "--squared-relu", "--position-embedding-type", "none", "--bf16", "--hybrid-layer-pattern", "M-M*|M-M-",
                                      "--disable-bias-linear", "--normalization", "RMSNorm", "--untie-embeddings-and-output-weights",
                                      "--pipeline-model-parallel-size", "2"},
                                     ImportOptions{.gpus = 8});
  const auto piped_rc = parse_run(piped, "<import>", "");
  EXPECT_EQ(piped_rc.model.layer_pattern, "M-M*M-M-");
  EXPECT_EQ(piped_rc.vstage_layers, (std::vector<int64_t>{4, 4}));
  EXPECT_THROW(import_megatron({"--num-layers", "8", "--hidden-size", "1024", "--num-attention-heads", "8", "--vocab-size", "131072",
                                "--seq-length", "4096", "--hybrid-layer-pattern", "M-M*M-M-", "--hybrid-override-pattern", "M-M-M-M-"},
                               ImportOptions{.gpus = 8}),
               core::UserError);
  EXPECT_THROW(import_megatron({"--num-layers", "8", "--hidden-size", "1024", "--num-attention-heads", "8", "--vocab-size", "131072",
                                "--seq-length", "4096", "--hybrid-attention-ratio", "0.1"},
                               ImportOptions{.gpus = 8}),
               core::UserError);
}

// Gated DeltaNet models as Megatron-LM trains Qwen3.5 (--experimental-attention-variant
// gated_delta_net): the imported model is the zoo's Qwen3.5-35B-A3B, whether the softmax layers
// come as an interval or as a list.
TEST(MegatronImport, GatedDeltaNetArguments) {
  const std::vector<std::string> base = {
      "--num-layers", "40", "--hidden-size", "2048", "--num-attention-heads", "16", "--group-query-attention", "--num-query-groups", "2",
      "--kv-channels", "256", "--qk-layernorm", "--attention-output-gate", "--experimental-attention-variant", "gated_delta_net",
      "--linear-conv-kernel-dim", "4", "--linear-key-head-dim", "128", "--linear-value-head-dim", "128", "--linear-num-key-heads", "16",
      "--linear-num-value-heads", "32", "--normalization", "RMSNorm", "--swiglu", "--disable-bias-linear", "--untie-embeddings-and-output-weights",
      "--position-embedding-type", "rope", "--num-experts", "256", "--moe-ffn-hidden-size", "512", "--moe-shared-expert-intermediate-size", "512",
      "--moe-router-topk", "8", "--vocab-size", "248320", "--seq-length", "4096", "--bf16", "--expert-model-parallel-size", "8"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return import_megatron(args, ImportOptions{.gpus = 8});
  };
  const auto zoo = model::zoo_model("qwen3.5-35b-a3b");
  for (const std::string freq : {"4", "[1,1,1,0]*10", "([1, 1, 1, 0] * 10)"}) {
    const Json run = with({"--linear-attention-freq", freq});
    const auto rc = parse_run(run, "<import>", "");
    EXPECT_EQ(rc.model.num_linear_layers(), 30) << freq;
    EXPECT_TRUE(rc.model.attn_output_gate) << freq;
    EXPECT_TRUE(rc.model.qk_norm) << freq;
    EXPECT_DOUBLE_EQ(rc.model.total_params(), zoo.total_params()) << freq;
    EXPECT_DOUBLE_EQ(rc.model.active_params(), zoo.active_params()) << freq;
  }
  // Without the output gate the softmax layers' q_proj holds the queries alone.
  std::vector<std::string> ungated = base;
  ungated.erase(std::find(ungated.begin(), ungated.end(), "--attention-output-gate"));
  ungated.insert(ungated.end(), {"--linear-attention-freq", "4"});
  EXPECT_FALSE(parse_run(import_megatron(ungated, ImportOptions{.gpus = 8}), "<import>", "").model.attn_output_gate);
  // Bad values name the argument.
  auto message = [&](std::vector<std::string> extra) {
    try {
      (void)with(extra);
    } catch (const core::UserError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message({"--linear-attention-freq", "[1,1,0]*10"}).find("describes 30 layers"), std::string::npos);
  EXPECT_NE(message({"--linear-attention-freq", "every4"}).find("--linear-attention-freq"), std::string::npos);
  EXPECT_NE(message({}).find("--linear-attention-freq"), std::string::npos);
  std::vector<std::string> kda = base;
  *std::find(kda.begin(), kda.end(), "gated_delta_net") = "kda";
  kda.insert(kda.end(), {"--linear-attention-freq", "4"});
  EXPECT_THROW(import_megatron(kda, ImportOptions{.gpus = 8}), core::UserError);
}

// Megatron-Core's CPU activation offload of the first N layers becomes the run file's key.
TEST(MegatronImport, CpuOffloadingOfActivations) {
  ImportOptions o{.hardware = "h100-sxm", .gpus = 8};
  const std::vector<std::string> base = {"--num-layers", "8", "--hidden-size", "1024", "--num-attention-heads", "8", "--vocab-size", "32000",
                                         "--seq-length", "4096", "--bf16"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return import_megatron(args, o);
  };
  const Json run = with({"--cpu-offloading", "--cpu-offloading-num-layers", "3"});
  EXPECT_EQ(run["parallel"]["activation_offload_layers"], 3);
  EXPECT_FALSE(run.contains("notes")) << run["notes"];
  EXPECT_EQ(parse_run(run, "<import>", "").parallel.activation_offload_layers, 3);
  // Megatron's default of 0 layers offloads nothing, and says so.
  const Json none = with({"--cpu-offloading"});
  EXPECT_FALSE(none["parallel"].contains("activation_offload_layers"));
  EXPECT_NE(none["assumptions"].dump().find("offloads nothing"), std::string::npos);
}

TEST(MegatronImport, MixtureOfExpertsAndDenseFirstLayers) {
  ImportOptions o{.gpus = 64};
  const Json mixtral = import_megatron({"--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32", "--group-query-attention",
                                        "--num-query-groups", "8", "--ffn-hidden-size", "14336", "--swiglu", "--normalization", "RMSNorm",
                                        "--position-embedding-type", "rope", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
                                        "--vocab-size", "32000", "--seq-length", "4096", "--num-experts", "8", "--moe-router-topk", "2",
                                        "--expert-model-parallel-size", "8", "--moe-token-dispatcher-type", "alltoall", "--bf16"},
                                       o);
  const RunConfig rc = parse_run(mixtral, "<import>", "");
  EXPECT_NEAR(rc.model.total_params(), model::zoo_model("mixtral-8x7b").total_params(), 1.0);
  EXPECT_EQ(rc.parallel.ep, 8);
  const Json dense_first = import_megatron({"--num-layers", "8", "--hidden-size", "1024", "--num-attention-heads", "8", "--vocab-size", "1000",
                                            "--seq-length", "1024", "--num-experts", "4", "--moe-layer-freq", "([0]*3+[1]*5)"},
                                           o);
  EXPECT_EQ(dense_first["model"]["first_k_dense_replace"], 3);
  EXPECT_NE(error_of({"--num-layers", "8", "--hidden-size", "1024", "--num-attention-heads", "8", "--vocab-size", "1000", "--seq-length", "1024",
                      "--num-experts", "4", "--moe-layer-freq", "([0]*3+[1]*4)"},
                     o)
                .find("--moe-layer-freq"),
            std::string::npos);
}

TEST(MegatronImport, BadArgumentsAreNamed) {
  ImportOptions o{.gpus = 8};
  const std::vector<std::string> base = {"--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32", "--seq-length", "4096"};
  EXPECT_NE(error_of(base, o).find("--vocab-size: required"), std::string::npos) << error_of(base, o);
  auto with = [&](std::vector<std::string> more) {
    auto v = base;
    v.push_back("--vocab-size");
    v.push_back("32000");
    v.insert(v.end(), more.begin(), more.end());
    return error_of(v, o);
  };
  EXPECT_NE(with({"--num-layers=abc"}).find("--num-layers: got 'abc'"), std::string::npos) << with({"--num-layers=abc"});
  EXPECT_NE(with({"--tensor-model-parallel-size", "3"}).find("does not divide the 8 GPUs"), std::string::npos);
  EXPECT_NE(with({"--recompute-granularity", "most"}).find("--recompute-granularity"), std::string::npos);
  EXPECT_NE(with({"--normalization", "BatchNorm"}).find("--normalization"), std::string::npos);
  EXPECT_NE(error_of({"--num-layers", "2"}).find("GPU count"), std::string::npos);  // no --gpus, no torchrun
  // Arguments `stepcast export megatron` writes, malformed.
  EXPECT_NE(with({"--use-megatron-fsdp", "--data-parallel-sharding-strategy", "half"}).find("--data-parallel-sharding-strategy"), std::string::npos);
  EXPECT_NE(with({"--num-experts", "8", "--moe-expert-capacity-factor", "-1"}).find("--moe-expert-capacity-factor"), std::string::npos);
}

// DeepSpeed: ZeRO-Infinity's CPU offload of parameters and optimizer, the batch arithmetic and
// DeepSpeed's behaviour written down.
// Megatron-DeepSpeed (--deepspeed): BLOOM-176B's launch arguments rebuild the run the accuracy
// harness writes for BLOOM's published rows: its model (ALiBi, embedding LayerNorm, the padded
// vocabulary), DeepSpeed's pipeline engine and ZeRO-1 with the BF16 optimizer. On the same
// hardware (Jean Zay's network, from the published run file) the two simulate the same step:
// they differ only in the head count of the layout (112 in both) and nothing that costs time,
// so 1e-9 relative.
TEST(MegatronImport, MegatronDeepSpeedRunsDeepSpeedsPipelineEngine) {
  Json run = import_megatron(split_command_line(launch_text("megatron-deepspeed-bloom.sh")), {});
  const RunConfig rc = parse_run(run, "<import>", "");
  EXPECT_EQ(rc.cluster.num_gpus, 384);
  EXPECT_EQ(rc.parallel.tp, 4);
  EXPECT_EQ(rc.parallel.pp, 12);
  EXPECT_EQ(rc.parallel.dp, 8);
  EXPECT_EQ(rc.parallel.zero_stage, 1);
  EXPECT_TRUE(rc.parallel.pp_rendezvous);
  EXPECT_TRUE(rc.parallel.pp_send_full_activation);
  EXPECT_TRUE(rc.parallel.keep_stage_outputs);
  EXPECT_FALSE(rc.parallel.param_gather_overlap);
  EXPECT_FALSE(rc.parallel.grad_reduce_overlap);
  EXPECT_EQ(rc.parallel.schedule, Schedule::kOneFOneB);
  EXPECT_EQ(rc.parallel.recompute, Recompute::kFull);
  EXPECT_DOUBLE_EQ(rc.parallel.bucket_mb, 2000.0);
  EXPECT_EQ(rc.stage_layers.front(), 5);  // the embedding takes a layer's place on both ends
  EXPECT_EQ(rc.stage_layers.back(), 5);
  EXPECT_EQ(rc.training.attention, AttentionImpl::kUnfused);
  EXPECT_TRUE(rc.training.lp_grads);
  EXPECT_TRUE(rc.model.embedding_norm);
  EXPECT_EQ(rc.model.position, model::PositionKind::kAlibi);
  EXPECT_EQ(rc.model.vocab, 250880);
  const std::string text = run["assumptions"].dump();
  EXPECT_EQ(text.find("Transformer Engine"), std::string::npos) << text;  // the Megatron-LM reading's guesses are gone
  EXPECT_NE(text.find("DeepSpeed's pipeline engine"), std::string::npos) << text;

  const Json published = core::load_json_file(std::string(STEPCAST_TEST_DATA_DIR) + "/../../configs/published/bloom176b-production-iter85376.json");
  run["hardware"] = published["hardware"];
  const auto a = estimate::estimate_step(parse_run(run, "<import>", ""));
  const auto b = estimate::estimate_step(parse_run(published, "<published>", ""));
  EXPECT_NEAR(a.step_time_s, b.step_time_s, 1e-9 * b.step_time_s);
  EXPECT_NEAR(a.memory.peak().value(), b.memory.peak().value(), 1e-9 * b.memory.peak().value());

  // DeepSpeed's pipeline engine runs ZeRO 0-1 and no virtual stages.
  auto args = split_command_line(launch_text("megatron-deepspeed-bloom.sh"));
  auto with = [&](std::vector<std::string> extra) {
    auto w = args;
    w.insert(w.end(), extra.begin(), extra.end());
    return w;
  };
  EXPECT_NE(error_of(with({"--zero-stage", "2"})).find("--zero-stage"), std::string::npos);
  EXPECT_NE(error_of(with({"--zero-stage", "x"})).find("--zero-stage"), std::string::npos);
  EXPECT_NE(error_of(with({"--virtual-pipeline-model-parallel-size", "2"})).find("--virtual-pipeline-model-parallel-size"), std::string::npos);
  // Without its pipeline engine, ZeRO-2 data parallelism is fine.
  const Json dp_only = import_megatron(with({"--no-pipeline-parallel", "--zero-stage", "2"}), {});
  EXPECT_EQ(dp_only["parallel"]["zero_stage"], 2);
  EXPECT_FALSE(dp_only["parallel"].contains("pp_rendezvous"));
}

TEST(DeepSpeedImport, ZeroThreeOffloadAndTheBatch) {
  const Json cfg = Json::parse(R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4, "bf16": {"enabled": true},
    "optimizer": {"type": "AdamW"}, "gradient_clipping": 1.0,
    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"},
                          "stage3_prefetch_bucket_size": 5e8}})");
  ImportOptions o{.model = "llama3.1-70b", .seq_len = 4096, .recompute = "full", .gpus = 8};
  const Json run = import_deepspeed(cfg, "ds.json", o);
  const RunConfig rc = parse_run(run, "<import>", "");
  EXPECT_EQ(rc.training.global_batch_size, 64);  // 2 x 4 x 8
  EXPECT_EQ(rc.parallel.effective_zero(), 3);
  EXPECT_EQ(rc.parallel.offload, Offload::kParams);
  EXPECT_TRUE(rc.parallel.grad_reduce_overlap);  // stage 3's overlap_comm default
  EXPECT_TRUE(rc.parallel.zero3_recompute_regather);
  EXPECT_EQ(run["notes"].get<std::string>(), "ignored (no modelled cost): zero_optimization.stage3_prefetch_bucket_size gradient_clipping");
}

TEST(DeepSpeedImport, BfSixteenZeroOneRunsTheBf16Optimizer) {
  ImportOptions o{.model = "llama3.1-8b", .seq_len = 2048, .gpus = 16};
  const Json run = import_deepspeed(Json::parse(R"({"train_batch_size": 256, "train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": true},
    "zero_optimization": {"stage": 1, "reduce_bucket_size": 2e8}})"),
                                    "ds.json", o);
  const RunConfig rc = parse_run(run, "<import>", "");
  EXPECT_EQ(rc.num_microbatches, 4);  // 256 / (4 x 16)
  EXPECT_TRUE(rc.training.lp_grads);
  EXPECT_EQ(rc.training.grad_dtype, hw::Dtype::kFp32);
  EXPECT_FALSE(rc.parallel.param_gather_overlap);  // gathered inside the optimizer step
  EXPECT_FALSE(rc.parallel.grad_reduce_overlap);   // overlap_comm off by default below stage 3
  EXPECT_DOUBLE_EQ(rc.parallel.bucket_mb, 2e8 * 4 / 1e6);
}

// A Hugging Face Trainer config: "auto" values take what the options give, as the Trainer
// fills them from its arguments.
TEST(DeepSpeedImport, TrainerAutoValuesComeFromTheOptions) {
  ImportOptions o{.model = "llama3.1-8b", .seq_len = 4096, .micro_batch = 2, .precision = "bf16", .gpus = 8};
  const Json run = import_deepspeed(Json::parse(R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"},
    "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto", "overlap_comm": true}})"),
                                    "ds.json", o);
  const RunConfig rc = parse_run(run, "<import>", "");
  EXPECT_EQ(rc.training.global_batch_size, 16);  // 2 x accumulation 1 x 8
  EXPECT_EQ(rc.training.precision, hw::Dtype::kBf16);
  EXPECT_DOUBLE_EQ(rc.parallel.bucket_mb, 4096.0 * 4096.0 * 2 / 1e6);  // hidden^2 bf16 gradients
  std::string all;
  for (const auto& a : run["assumptions"]) all += a.get<std::string>() + "\n";
  EXPECT_NE(all.find("gradient_accumulation_steps \"auto\" = 1"), std::string::npos) << all;
  EXPECT_NE(all.find("hidden^2"), std::string::npos) << all;
}

TEST(DeepSpeedImport, BadConfigsAreNamed) {
  ImportOptions o{.model = "llama3.1-8b", .seq_len = 2048, .gpus = 8};
  auto err = [&](const char* text, ImportOptions opt) {
    try {
      (void)import_deepspeed(Json::parse(text), "ds.json", opt);
    } catch (const core::UserError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(err(R"({"train_micro_batch_size_per_gpu": "auto"})", o).find("train_micro_batch_size_per_gpu: \"auto\""), std::string::npos);
  EXPECT_NE(err(R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": "auto"}})", o).find("--precision"), std::string::npos);
  EXPECT_NE(err(R"({"train_batch_size": 100, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2})", o).find("train_batch_size: 100"),
            std::string::npos);
  EXPECT_NE(err(R"({"train_batch_size": 64, "zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})", o).find("offload_param: needs stage 3"),
            std::string::npos);
  EXPECT_NE(err(R"({"train_batch_size": 64, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}})", o).find("nvme"),
            std::string::npos);
  EXPECT_NE(err(R"({"train_batch_size": 64, "zero_optimization": {"stage": 5}})", o).find("zero_optimization.stage"), std::string::npos);
  EXPECT_NE(err(R"({"train_batch_size": 64, "zero_optimization": {"overlap_comm": "yes"}})", o).find("overlap_comm"), std::string::npos);
  EXPECT_NE(err(R"({"train_batch_size": 64, "bf16": {"enabled": true}, "fp16": {"enabled": true}})", o).find("both true"), std::string::npos);
  EXPECT_NE(err(R"({"train_batch_size": 64, "optimizer": {"type": "Adafactor"}})", o).find("optimizer.type"), std::string::npos);
  ImportOptions no_seq = o;
  no_seq.seq_len = 0;
  EXPECT_NE(err(R"({"train_batch_size": 64})", no_seq).find("--seq"), std::string::npos);
}

TEST(Yaml, TheSubsetToolConfigsUse) {
  const Json d = parse_yaml(R"(---
# an Accelerate-style config
distributed_type: FSDP
downcast_bf16: 'no'
num_processes: 8
ratio: 0.5
empty:
tpu_env: []
names: [a, b]
fsdp_config:
  fsdp_offload_params: true   # a comment
  nested:
    deep: "x # y"
  list:
    - 1
    - two
after: yes
)",
                            "a.yaml");
  EXPECT_EQ(d["distributed_type"], "FSDP");
  EXPECT_EQ(d["downcast_bf16"], "no");  // quoted: a string
  EXPECT_EQ(d["num_processes"], 8);
  EXPECT_DOUBLE_EQ(d["ratio"].get<double>(), 0.5);
  EXPECT_TRUE(d["empty"].is_null());
  EXPECT_EQ(d["tpu_env"], Json::array());
  EXPECT_EQ(d["names"], Json::array({"a", "b"}));
  EXPECT_EQ(d["fsdp_config"]["fsdp_offload_params"], true);
  EXPECT_EQ(d["fsdp_config"]["nested"]["deep"], "x # y");
  EXPECT_EQ(d["fsdp_config"]["list"], Json::array({1, "two"}));
  EXPECT_EQ(d["after"], true);
  for (const char* bad : {"a: 1\n   b: 2", "a:\n  - x: 1", "key value", "a: {b: 1}", "a: |\n  text", "a:\n  b: 1\n c: 2"}) {
    try {
      (void)parse_yaml(bad, "bad.yaml");
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const core::UserError& e) {
      EXPECT_NE(std::string(e.what()).find("bad.yaml:"), std::string::npos) << e.what();
    }
  }
}

TEST(AccelerateImport, FsdpWithParameterOffload) {
  ImportOptions o{.model = "llama3.1-70b", .seq_len = 4096, .micro_batch = 1, .grad_accum = 4};
  const Json run = import_accelerate(parse_yaml(launch_text("accelerate-fsdp-offload.yaml"), "a.yaml"), "a.yaml", o);
  const RunConfig rc = parse_run(run, "<import>", "");
  EXPECT_EQ(rc.cluster.num_gpus, 8);  // num_processes
  EXPECT_TRUE(rc.parallel.fsdp);
  EXPECT_EQ(rc.parallel.offload, Offload::kParams);
  EXPECT_EQ(rc.parallel.recompute, Recompute::kFull);  // fsdp_activation_checkpointing
  EXPECT_EQ(rc.training.global_batch_size, 32);        // 1 x 4 x 8
  EXPECT_NE(run["notes"].get<std::string>().find("fsdp_config.fsdp_state_dict_type"), std::string::npos);
  EXPECT_EQ(run["notes"].get<std::string>().find("fsdp_offload_params"), std::string::npos);
}

TEST(AccelerateImport, StrategiesDeepSpeedAndErrors) {
  ImportOptions o{.model = "llama3.1-8b", .seq_len = 2048, .micro_batch = 2};
  auto yaml = [](const std::string& fsdp) {
    return parse_yaml("distributed_type: FSDP\nnum_processes: 16\nnum_machines: 2\nmixed_precision: bf16\nfsdp_config:\n  " + fsdp + "\n", "a.yaml");
  };
  const RunConfig grad_op = parse_run(import_accelerate(yaml("fsdp_sharding_strategy: SHARD_GRAD_OP"), "a.yaml", o), "<import>", "");
  EXPECT_FALSE(grad_op.parallel.reshard_after_forward);
  const RunConfig hybrid = parse_run(import_accelerate(yaml("fsdp_sharding_strategy: HYBRID_SHARD"), "a.yaml", o), "<import>", "");
  EXPECT_EQ(hybrid.parallel.dp_replicate, 2);  // one replica per machine
  EXPECT_EQ(hybrid.cluster.gpus_per_node, 8);
  const RunConfig ddp = parse_run(import_accelerate(yaml("fsdp_sharding_strategy: NO_SHARD"), "a.yaml", o), "<import>", "");
  EXPECT_EQ(ddp.parallel.effective_zero(), 0);
  const Json ds = parse_yaml("distributed_type: DEEPSPEED\nnum_processes: 8\nmixed_precision: bf16\ndeepspeed_config:\n  zero_stage: 2\n"
                             "  offload_optimizer_device: cpu\n  gradient_accumulation_steps: 2\n  zero3_init_flag: false\n",
                             "a.yaml");
  const Json dsrun = import_accelerate(ds, "a.yaml", o);
  const RunConfig dsrc = parse_run(dsrun, "<import>", "");
  EXPECT_EQ(dsrc.parallel.zero_stage, 2);
  EXPECT_EQ(dsrc.parallel.offload, Offload::kOptimizer);
  EXPECT_EQ(dsrc.training.global_batch_size, 32);  // 2 x 2 x 8
  EXPECT_NE(dsrun["notes"].get<std::string>().find("deepspeed_config.zero3_init_flag"), std::string::npos);
  auto err = [&](const Json& cfg, ImportOptions opt) {
    try {
      (void)import_accelerate(cfg, "a.yaml", opt);
    } catch (const core::UserError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(err(yaml("fsdp_sharding_strategy: HALF_SHARD"), o).find("fsdp_sharding_strategy"), std::string::npos);
  EXPECT_NE(err(parse_yaml("distributed_type: TPU\nnum_processes: 8\n", "a.yaml"), o).find("distributed_type"), std::string::npos);
  EXPECT_NE(err(parse_yaml("distributed_type: FSDP\nmixed_precision: int4\nnum_processes: 8\n", "a.yaml"), o).find("mixed_precision"),
            std::string::npos);
  ImportOptions no_mbs = o;
  no_mbs.micro_batch = 0;
  EXPECT_NE(err(yaml("fsdp_offload_params: true"), no_mbs).find("--micro-batch"), std::string::npos);
}

}  // namespace
}  // namespace stepcast::config
