// Bad run files: every mistake is a ConfigError whose message names the JSON path of the
// offending field and, where there is one, the bad value (and what is allowed), so a user can
// fix the file without reading the source. Seeded mutations of the example run files check the
// same of inputs nobody wrote by hand: each loads with a finite ledger and estimate, or is
// refused with one UserError naming a JSON path; any other exception, a non-finite number or a
// crash fails, and the seed makes a failure reproduce.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "sim/config/run_config.hpp"
#include "sim/core/error.hpp"
#include "sim/core/json_reader.hpp"
#include "sim/estimate/estimate.hpp"
#include "sim/memory/ledger.hpp"

#ifndef STEPCAST_SOURCE_DIR
#error "STEPCAST_SOURCE_DIR comes from stepcast::model"
#endif

namespace stepcast::config {
namespace {

using core::Json;

// A valid run: Llama-3.1-8B on one 8-GPU H100 node, TP 2, DP 4 (derived).
const char* kBase = R"({
  "model": "llama3.1-8b",
  "hardware": "h100-sxm",
  "cluster": {"num_gpus": 8},
  "training": {"seq_len": 4096, "global_batch_size": 16},
  "parallel": {"tp": 2}
})";

struct BadCase {
  std::string name;
  std::string patch;                   // RFC 7386 merge patch applied to kBase (null deletes)
  std::vector<std::string> must_have;  // JSON path first, then the bad value / allowed values
};

std::ostream& operator<<(std::ostream& os, const BadCase& c) { return os << c.name; }

class BadRunFile : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadRunFile, ReportsPathAndValue) {
  const BadCase& c = GetParam();
  Json run = Json::parse(kBase);
  run.merge_patch(Json::parse(c.patch));
  EXPECT_THROW(parse_run(run, "<test>", ""), core::ConfigError);
  try {
    parse_run(run, "<test>", "");
  } catch (const core::ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_FALSE(e.issues().empty());
    for (const auto& frag : c.must_have) {
      EXPECT_NE(msg.find(frag), std::string::npos) << "message lacks \"" << frag << "\":\n" << msg;
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

// clang-format off
const std::vector<BadCase> kCases = {
    // A key stepcast does not know at the top level (typo of "parallel").
    {"UnknownTopLevelKey", R"({"parallelism": {"tp": 2}})", {"$.parallelism", "unknown key"}},
    // A typo inside the parallel section.
    {"UnknownParallelKey", R"({"parallel": {"tpp": 2}})", {"$.parallel.tpp", "unknown key"}},
    // Assumptions are text: a number or null in the list is named, not turned into a string.
    {"AssumptionThatIsNotText", R"({"assumptions": ["measured on 8 nodes", 42]})", {"$.assumptions[1]", "got 42", "expected a string"}},

    {"NodeLargerThanTheHardwares", R"({"cluster": {"num_gpus": 16, "gpus_per_node": 16}})",
     {"$.cluster.gpus_per_node", "got 16", "holds 8 GPUs"}},
    // Attention heads (32) must split evenly over TP ranks.
    {"TpNotDividingHeads", R"({"cluster": {"num_gpus": 6}, "parallel": {"tp": 3}})",
     {"$.parallel.tp", "got 3", "num_attention_heads (32)"}},
    // 32 layers cannot be cut into 3 equal pipeline stages.
    {"LayersNotDividingPp", R"({"cluster": {"num_gpus": 6}, "parallel": {"tp": 2, "pp": 3}})",
     {"$.parallel.pp", "32", "3*1 = 3"}},
    // ... nor into pp*vpp = 12 virtual stages.
    {"LayersNotDividingPpVpp", R"({"parallel": {"tp": 2, "pp": 4, "vpp": 3}})",
     {"$.parallel.vpp", "32", "4*3 = 12"}},
    // Global batch 30 is not a multiple of dp*micro_batch_size = 4*2.
    {"BatchNotDividingDpMbs", R"({"training": {"global_batch_size": 30}, "parallel": {"micro_batch_size": 2}})",
     {"$.training.global_batch_size", "got 30", "4*2 = 8"}},
    // A cluster needs at least one GPU.
    {"ZeroGpus", R"({"cluster": {"num_gpus": 0}})", {"$.cluster.num_gpus", "got 0"}},
    // Unknown hardware profile: the message lists the built-in ones.
    {"UnknownHardwareName", R"({"hardware": "h100-pcie-9000"})",
     {"$.hardware", "h100-pcie-9000", "h100-sxm", "a100-sxm-80gb"}},
    // Unknown zoo model: the message lists the built-in ones.
    {"UnknownModelName", R"({"model": "llama5-1t"})", {"$.model", "llama5-1t", "llama3.1-8b"}},
    // Sequence lengths are positive.
    {"NegativeSeqLen", R"({"training": {"seq_len": -5}})", {"$.training.seq_len", "got -5"}},
    // tp*cp*dp*pp must equal the GPU count; the message shows the arithmetic.
    {"InconsistentWorldSize", R"({"parallel": {"tp": 2, "pp": 2, "dp": 4}})",
     {"$.parallel.dp", "2*1*4*2 = 16", "num_gpus = 8"}},
    // A dense model has no experts to shard.
    {"EpOnDenseModel", R"({"parallel": {"tp": 1, "ep": 2}})", {"$.parallel.ep", "got 2", "dense"}},
    // EP must split Mixtral's 8 experts evenly.
    {"EpNotDividingExperts", R"({"model": "mixtral-8x7b", "cluster": {"num_gpus": 6}, "parallel": {"tp": 1, "ep": 3}})",
     {"$.parallel.ep", "got 3", "(8)"}},
    // The interleaved schedule needs virtual stages.
    // Group-limited routing needs whole groups of experts.
    {"GroupsNotDividingExperts",
     R"({"model": {"name": "g", "hidden_size": 1024, "num_attention_heads": 8, "num_hidden_layers": 4,
                   "intermediate_size": 2048, "vocab_size": 1000, "hidden_act": "silu", "n_routed_experts": 16,
                   "num_experts_per_tok": 2, "moe_intermediate_size": 512, "n_group": 3, "topk_group": 2}})",
     {"$.model.n_group", "got 3", "divide the 16 experts"}},
    {"UnknownDispatcher", R"({"model": "mixtral-8x7b", "parallel": {"tp": 1, "ep": 2, "moe": {"dispatcher": "deepep"}}})",
     {"$.parallel.moe.dispatcher", "deepep", "flex"}},
    {"RecomputeModulesWithoutSelective", R"({"parallel": {"recompute": "full", "recompute_modules": ["mlp"]}})",
     {"$.parallel.recompute_modules", "selective", "full"}},
    {"UnknownRecomputeModule", R"({"parallel": {"recompute": "selective", "recompute_modules": ["mlp", "attn"]}})",
     {"$.parallel.recompute_modules[1]", "attn", "core_attn", "moe_act"}},
    {"InterleavedWithoutVpp", R"({"parallel": {"tp": 2, "pp": 2, "schedule": "interleaved"}})",
     {"$.parallel.schedule", "interleaved", "vpp"}},
    // ZB-V folds exactly two chunks per stage into its V, over at least two stages.
    {"ZbvWithoutTwoChunks", R"({"parallel": {"tp": 2, "pp": 2, "vpp": 4, "schedule": "zbv"}})",
     {"$.parallel.vpp", "got 4", "zbv", "vpp 2"}},
    {"ZbvWithoutPipeline", R"({"parallel": {"tp": 4, "pp": 1, "vpp": 2, "schedule": "zbv"}})",
     {"$.parallel.schedule", "zbv needs pp > 1"}},
    // DualPipeV needs a micro-batch per virtual stage: 16 sequences in micro-batches of 4 are 4.
    {"DualPipeVWithTooFewMicrobatches", R"({"parallel": {"tp": 2, "pp": 4, "vpp": 2, "micro_batch_size": 4, "schedule": "dualpipev"}})",
     {"$.training.global_batch_size", "dualpipev", "2*pp = 8", "got 4"}},
    // A100 has no FP8 tensor cores (no fp8 dense peak in its profile).
    {"Fp8OnA100", R"({"hardware": "a100-sxm-80gb", "training": {"precision": "fp8"}})",
     {"$.training.precision", "fp8", "a100-sxm-80gb"}},
    // Saving linear-layer inputs in fp8 is an fp8-training setting.
    {"Fp8SavedInputsWithoutFp8", R"({"training": {"fp8_saved_inputs": true}})",
     {"$.training.fp8_saved_inputs", "precision fp8"}},
    {"UnknownFp8Weights", R"({"training": {"precision": "fp8", "fp8_weights": "fp4"}})", {"$.training.fp8_weights", "fp4", "primary, cached, cast"}},
    {"Fp8TpGatherWithoutFp8", R"({"training": {"fp8_tp_gather": true}})", {"$.training.fp8_tp_gather", "got true", "precision fp8"}},
    {"Fp8NormQuantizeWithoutFp8", R"({"training": {"fp8_norm_quantize": true}})", {"$.training.fp8_norm_quantize", "got true", "precision fp8"}},
    // FSDP is ZeRO stage 3; asking for stage 1 at the same time is contradictory.
    {"FsdpWithZero1", R"({"parallel": {"fsdp": true, "zero_stage": 1}})", {"$.parallel.zero_stage", "got 1", "fsdp"}},
    // Unit strings in hardware overrides are checked: parsecs are not bytes.
    {"BadUnitInHardwareOverride", R"({"hardware": {"base": "h100-sxm", "gpu": {"memory": "80 parsecs"}}})",
     {"$.hardware.gpu.memory", "80 parsecs", "GiB"}},
    // Recompute is none, selective or full.
    {"RecomputeSometimes", R"({"parallel": {"recompute": "sometimes"}})",
     {"$.parallel.recompute", "sometimes", "selective"}},
    // Micro-batches hold at least one sequence.
    {"MicroBatchZero", R"({"parallel": {"micro_batch_size": 0}})", {"$.parallel.micro_batch_size", "got 0"}},
    // The training block (seq_len, global_batch_size) is required.
    {"MissingTraining", R"({"training": null})", {"$.training", "required"}},
    // TP all-reduces every layer; it must stay inside one 8-GPU NVLink node.
    {"TpLargerThanNode", R"({"model": "llama3.1-70b", "cluster": {"num_gpus": 16}, "parallel": {"tp": 16}})",
     {"$.parallel.tp", "got 16", "one node"}},
    // 32 layers - 5 (first) - 4 (last) = 23 do not split over the 2 middle stages.
    // A per-virtual-stage list of the wrong length, one that does not add up to the model's
    // layers, and Megatron's uneven split whose stage does not divide over its chunks.
    {"StageLayersWrongLength", R"({"parallel": {"tp": 2, "pp": 4, "stage_layers": [8, 8, 16]}})",
     {"$.parallel.stage_layers", "3 entries", "pp*vpp = 4*1 = 4"}},
    {"StageLayersWrongSum", R"({"parallel": {"tp": 2, "pp": 4, "stage_layers": [8, 8, 8, 7]}})",
     {"$.parallel.stage_layers", "adds up to 31", "num_layers 32"}},
    {"UnevenSplitNotDividingChunks", R"({"parallel": {"tp": 2, "pp": 2, "vpp": 2, "first_stage_layers": 15}})",
     {"$.parallel.first_stage_layers", "15 layers", "vpp = 2"}},
    {"UnevenPpSplitDoesNotAddUp", R"({"parallel": {"tp": 2, "pp": 4, "first_stage_layers": 5, "last_stage_layers": 4}})",
     {"$.parallel.first_stage_layers", "23", "2 stages"}},
    // An empty virtual stage between the ends; the embedding/loss slots beside an explicit
    // split, on one stage, and where layers + slots do not divide over the virtual stages.
    {"StageLayersEmptyMiddle", R"({"parallel": {"tp": 2, "pp": 4, "stage_layers": [11, 0, 11, 10]}})",
     {"$.parallel.stage_layers", "between the first and the last"}},
    {"SlotsWithStageList", R"({"parallel": {"tp": 2, "pp": 4, "stage_layers": [8, 8, 8, 8], "account_for_loss_in_pipeline_split": true}})",
     {"$.parallel.account_for_loss_in_pipeline_split", "drop stage_layers"}},
    {"SlotsWithoutPipeline", R"({"parallel": {"tp": 2, "account_for_embedding_in_pipeline_split": true}})",
     {"$.parallel.account_for_embedding_in_pipeline_split", "pp > 1"}},
    {"SlotsNotDividing", R"({"parallel": {"tp": 2, "pp": 4, "account_for_embedding_in_pipeline_split": true, "account_for_loss_in_pipeline_split": true}})",
     {"$.parallel.account_for_embedding_in_pipeline_split", "32 + 2 slots = 34", "pp*vpp = 4*1 = 4"}},
    // Megatron pipeline layouts: a module letter it does not know, an open group, the wrong
    // number of virtual stages, the loss before the last stage, and beside another split.
    {"LayoutUnknownModule", R"({"parallel": {"tp": 2, "pp": 2, "pipeline_layout": "Et*16|t*16x"}})",
     {"$.parallel.pipeline_layout", "'x' at position 10", "E (embedding)"}},
    {"LayoutOpenGroup", R"({"parallel": {"tp": 2, "pp": 2, "pipeline_layout": "Et*16|(t*16L"}})",
     {"$.parallel.pipeline_layout", "not closed"}},
    {"LayoutStageCount", R"({"parallel": {"tp": 2, "pp": 4, "pipeline_layout": "Et*16|t*16L"}})",
     {"$.parallel.pipeline_layout", "has 2 virtual stages", "pp*vpp = 4*1 = 4"}},
    {"LayoutLossEarly", R"({"parallel": {"tp": 2, "pp": 2, "pipeline_layout": "Et*16L|t*16"}})",
     {"$.parallel.pipeline_layout", "virtual stage 0 holds the loss"}},
    {"LayoutWithStageList", R"({"parallel": {"tp": 2, "pp": 2, "stage_layers": [16, 16], "pipeline_layout": "Et*16|t*16L"}})",
     {"$.parallel.pipeline_layout", "drop stage_layers"}},
    // Causal ring attention load-balances 2*cp chunks: 4100 tokens do not split into 8.
    {"CpNotDividingSeqIntoChunks", R"({"training": {"seq_len": 4100}, "parallel": {"tp": 2, "cp": 4}})",
     {"$.parallel.cp", "got 4", "4100", "8 equal chunks"}},
    // A string where a number belongs.
    {"TpAsString", R"({"parallel": {"tp": "two"}})", {"$.parallel.tp", "\"two\""}},
    // Unknown precision names list the allowed ones.
    {"UnknownPrecision", R"({"training": {"precision": "fp4"}})", {"$.training.precision", "fp4", "bf16"}},
    // Scenarios: a slowdown of a rank that does not exist, an unknown scenario key, a length
    // distribution longer than the sequence, a degraded link without its factor.
    {"ScenarioRankOutOfRange", R"({"scenario": {"slowdown": {"ranks": [8], "factor": 1.2}}})",
     {"$.scenario.slowdown[0].ranks", "rank 8", "0..7"}},
    {"ScenarioUnknownKey", R"({"scenario": {"slow": {"ranks": [1]}}})", {"$.scenario.slow", "unknown key"}},
    {"ScenarioSeqLongerThanTraining", R"({"scenario": {"seq_len_distribution": {"min": 100, "max": 9000}}})",
     {"$.scenario.seq_len_distribution.max", "9000", "4096"}},
    {"ScenarioDegradedLinkWithoutFactor", R"({"scenario": {"degraded_link": {"rank": 1}}})",
     {"$.scenario.degraded_link.bandwidth_factor"}},
    {"UnknownAttentionKernel", R"({"training": {"attention": "flash4"}})", {"$.training.attention", "flash4", "flash2"}},
    {"EarlyStopWithoutFullRecompute", R"({"parallel": {"recompute_stops_early": true, "recompute": "selective"}})",
     {"$.parallel.recompute_stops_early", "got true", "recompute \"full\""}},
    {"InputGradOverlapWithoutTpOverlap", R"({"parallel": {"tp_overlap_input_grad": false}})",
     {"$.parallel.tp_overlap_input_grad", "got false", "tp_comm_overlap"}},
    {"AsyncBackwardWithTpOverlap", R"({"parallel": {"tp_comm_overlap": true, "tp_async_backward": true}})",
     {"$.parallel.tp_async_backward", "got true", "tp_comm_overlap"}},
    // The Triton kernel is costed only where the profile measured it (b200 has no measurement).
    {"TritonAttentionWithoutAMeasurement", R"({"hardware": "b200", "training": {"attention": "triton"}})",
     {"$.training.attention", "b200", "attention_triton_fwd"}},
    // Settings that mean nothing for the layout given, or cannot hold.
    {"EtpOnDenseModel", R"({"parallel": {"etp": 1}})", {"$.parallel.etp", "dense"}},
    {"RecomputeLayersBeyondStage", R"({"parallel": {"recompute": "full", "recompute_layers": 40}})",
     {"$.parallel.recompute_layers", "got 40", "32 layers"}},
    {"SeqBeyondLearnedPositions", R"({"model": "gpt2-124m", "training": {"seq_len": 2048}})", {"$.training.seq_len", "1024 positions"}},
    {"NameNotText", R"({"name": {"x": 1}})", {"$.name", "expected a string"}},
    {"HostWorkLongerThanADay", R"({"scenario": {"host_work": {"rank": 0, "time": 1e7}}})", {"$.scenario.host_work.time", "86400"}},
    {"NegativeBoardPower", R"({"hardware": {"base": "h100-sxm", "gpu": {"tdp_watts": -700}}})", {"$.hardware.gpu.tdp_watts", "-700"}},
    {"CollectiveSmsBeyondTheGpu", R"({"hardware": {"base": "h100-sxm", "efficiency": {"collective_sms": 1000}}})",
     {"$.hardware.efficiency.collective_sms", "1000", "132 SMs"}},
    // Model configs: two names of one setting disagreeing, a MoE model without its top-k, an MLP
    // width left out (only GPT-2 configs default it), experts every 10th of 4 layers.
    {"ModelAliasesConflict", R"({"model": {"hidden_size": 512, "n_embd": 256, "num_attention_heads": 8, "num_hidden_layers": 4,
                                           "intermediate_size": 1024, "vocab_size": 1000}})",
     {"$.model.n_embd", "conflicts with hidden_size (512)"}},
    {"MoeWithoutTopK", R"({"model": {"hidden_size": 512, "num_attention_heads": 8, "num_hidden_layers": 4, "intermediate_size": 1024,
                                     "moe_intermediate_size": 256, "num_experts": 8, "vocab_size": 1000}})",
     {"$.model.num_experts_per_tok", "required"}},
    {"MlpWidthMissing", R"({"model": {"hidden_size": 512, "num_attention_heads": 8, "num_hidden_layers": 4, "vocab_size": 1000}})",
     {"$.model.intermediate_size", "required"}},
    {"SparseStepBeyondLayers", R"({"model": {"hidden_size": 512, "num_attention_heads": 8, "num_hidden_layers": 4, "intermediate_size": 1024,
                                             "moe_intermediate_size": 256, "num_experts": 8, "num_experts_per_tok": 2,
                                             "decoder_sparse_step": 10, "vocab_size": 1000}})",
     {"$.model.decoder_sparse_step", "leaves no MoE layer"}},
    // Other families' configs: a null top-k is missing, not zero; DBRX's nested MoE block is
    // checked key by key and must agree with top-level names; an explicit MoE layer list must
    // stay in range; a per-layer flag list must have one 0/1 per layer; an MPT expansion ratio
    // must give a real MLP; a multimodal wrapper keeps the decoder in text_config only; and
    // MiniMax-M1's linear-attention layers are refused with the reason.
    {"MoeTopKNull", R"({"model": {"hidden_size": 512, "num_attention_heads": 8, "num_hidden_layers": 4, "intermediate_size": 1024,
                                  "num_local_experts": 8, "num_experts_per_tok": null, "vocab_size": 1000}})",
     {"$.model.num_experts_per_tok", "required"}},
    {"DbrxFfnConfigTypo", R"({"model": {"model_type": "dbrx", "n_layers": 4, "d_model": 512, "n_heads": 8, "vocab_size": 1000,
                                        "ffn_config": {"ffn_hidden_size": 512, "moe_num_expert": 16, "moe_top_k": 4}}})",
     {"$.model.ffn_config.moe_num_expert", "unknown key"}},
    {"DbrxExpertsDisagree", R"({"model": {"model_type": "dbrx", "n_layers": 4, "d_model": 512, "n_heads": 8, "vocab_size": 1000,
                                          "num_local_experts": 8,
                                          "ffn_config": {"ffn_hidden_size": 512, "moe_num_experts": 16, "moe_top_k": 4}}})",
     {"$.model.num_local_experts", "got 8", "ffn_config.moe_num_experts says 16"}},
    {"MoeLayersOutOfRange", R"({"model": {"hidden_size": 512, "num_attention_heads": 8, "num_hidden_layers": 4, "intermediate_size": 1024,
                                          "num_local_experts": 8, "num_experts_per_tok": 2, "moe_layers": [1, 3, 100], "vocab_size": 1000}})",
     {"$.model.moe_layers[2]", "got 100", "0 to 3"}},
    {"NoRopeLayersWrongLength", R"({"model": {"hidden_size": 512, "num_attention_heads": 8, "num_hidden_layers": 4, "intermediate_size": 1024,
                                              "attention_chunk_size": 1024, "no_rope_layers": [1, 0], "vocab_size": 1000}})",
     {"$.model.no_rope_layers", "2 entries", "one per layer (4)"}},
    {"ExpansionRatioTooSmall", R"({"model": {"model_type": "mpt", "n_layers": 4, "d_model": 512, "n_heads": 8, "vocab_size": 1000,
                                             "max_seq_len": 4096, "expansion_ratio": 0.0001}})",
     {"$.model.expansion_ratio", "0 wide"}},
    {"TextConfigBesideTopLevelLayers", R"({"model": {"model_type": "llama4", "num_hidden_layers": 4,
                                                     "text_config": {"hidden_size": 512, "num_attention_heads": 8, "num_hidden_layers": 4,
                                                                     "intermediate_size": 1024, "vocab_size": 1000}}})",
     {"$.model.text_config", "beside a top-level num_hidden_layers"}},
    {"LinearAttentionHybrid", R"({"model": {"model_type": "minimax_m1", "hidden_size": 512, "num_attention_heads": 8, "num_hidden_layers": 4,
                                            "intermediate_size": 1024, "vocab_size": 1000}})",
     {"$.model", "linear-attention", "cannot cost"}},
    // What a pipeline runtime keeps until the step ends is one of three named behaviours.
    {"KeepStepOutputsUnknown", R"({"parallel": {"keep_step_outputs": true}})",
     {"$.parallel.keep_step_outputs", "none", "last-stage", "all-stages"}},
    // Gradient buckets are formed the way one of two frameworks forms them.
    // Parameter gathers are aligned across stages always, never, or under interleaving only.
    {"GatherAlignUnknown", R"({"parallel": {"param_gather_align": "sometimes"}})",
     {"$.parallel.param_gather_align", "true, false or \"interleaved\""}},
    {"BucketLayoutUnknown", R"({"parallel": {"bucket_layout": "deepspeed"}})", {"$.parallel.bucket_layout", "ddp", "megatron"}},
    // Collective stream priority is a switch, not a level.
    {"CommHighPriorityNotBool", R"({"parallel": {"comm_high_priority": "high"}})", {"$.parallel.comm_high_priority", "true or false"}},
    // Times in a hardware profile are overheads and latencies: a second or more is a typo, and
    // a value near the simulator's range would overflow its clock instead of failing here.
    {"KernelOverheadTooLong", R"({"hardware": {"base": "h100-sxm", "efficiency": {"kernel_overhead": "1e6s"}}})",
     {"$.hardware.efficiency.kernel_overhead", "1e6s", "at most"}},
    {"NetworkLatencyTooLong", R"({"hardware": {"base": "h100-sxm", "network": {"latency": "5s"}}})",
     {"$.hardware.network.latency", "5s", "at most"}},
    // An optimizer rate of a millionth of a parameter a second is a unit slip, not a processor.
    {"OptimizerRateTiny", R"({"hardware": {"base": "h100-sxm", "efficiency": {"optimizer_rate": 1e-12}}})",
     {"$.hardware.efficiency.optimizer_rate", "1e-12", "memory bandwidth"}},
    // A bare number is bytes: one byte of HBM is not a GPU.
    {"GpuMemoryOneByte", R"({"hardware": {"base": "h100-sxm", "gpu": {"memory": "1B"}}})",
     {"$.hardware.gpu.memory", "64 MiB"}},
    // The GEMM efficiency curve's half point is a matrix dimension, not a FLOP count.
    {"GemmHalfDimHuge", R"({"hardware": {"base": "h100-sxm", "efficiency": {"gemm_half_dim": 500000}}})",
     {"$.hardware.efficiency.gemm_half_dim", "500000"}},
    // A bare number is FLOP/s; 989 of them is no GPU.
    {"PeakFlopsWithoutUnit", R"({"hardware": {"base": "h100-sxm", "gpu": {"peak_flops": {"bf16": 989}}}})",
     {"$.hardware.gpu.peak_flops.bf16", "989TFLOPS"}},
    // A misspelt key is named with the key it was probably meant to be.
    {"MisspeltKeySuggestsTheKnownOne", R"({"training": {"precison": "bf16"}})", {"$.training.precison", "did you mean 'precision'"}},
    // A built-in name written another way, cut short or given as a hub id is answered with the
    // names it may mean (or with why nothing is fetched).
    {"ZooNameWrittenAnotherWay", R"({"model": "Llama-3.1-8B"})", {"$.model", "did you mean 'llama3.1-8b'?"}},
    {"ZooNameCutShort", R"({"model": "llama3.1"})", {"$.model", "did you mean 'llama3.1-405b', 'llama3.1-70b' or 'llama3.1-8b'?"}},
    {"HubRepositoryId", R"({"model": "meta-llama/Llama-3.1-8B"})", {"$.model", "stepcast does not download models"}},
    {"HardwareNameCutShort", R"({"hardware": "h100"})", {"$.hardware", "did you mean 'h100-pcie-8x' or 'h100-sxm'?"}},
    // The published figures beside a run are numbers, and notes are text.
    {"MeasuredNotAnObject", R"({"measured": "fast"})", {"$.measured", "expected an object"}},
    {"MeasuredValueNotANumber", R"({"measured": {"memory_gib_per_gpu": "abc"}})", {"$.measured.memory_gib_per_gpu", "positive number"}},
    {"NotesNotText", R"({"notes": 42})", {"$.notes", "got 42"}},
    // A slowdown that names nothing, or a rank twice, is a mistake rather than a request.
    {"SlowdownEmptyRanks", R"({"scenario": {"slowdown": {"ranks": [], "factor": 1.2}}})", {"$.scenario.slowdown.ranks", "is empty"}},
    {"SlowdownRankTwice", R"({"scenario": {"slowdown": {"ranks": [3, 3], "factor": 1.2}}})", {"$.scenario.slowdown.ranks", "3 is listed twice"}},
    {"RecomputeModuleTwice", R"({"parallel": {"recompute": "selective", "recompute_modules": ["core_attn", "core_attn"]}})",
     {"$.parallel.recompute_modules[1]", "listed twice"}},
    // Hybrid sharding replicates sharded state in equal replicas of the dp ranks.
    {"ReplicasWithoutSharding", R"({"parallel": {"dp_replicate": 2}})", {"$.parallel.dp_replicate", "got 2", "zero_stage 1-3 or fsdp"}},
    {"ReplicasNotDividingDp", R"({"parallel": {"fsdp": true, "dp_replicate": 3}})", {"$.parallel.dp_replicate", "got 3", "must divide dp (4)"}},
    {"ReplicasZero", R"({"parallel": {"zero_stage": 1, "dp_replicate": 0}})", {"$.parallel.dp_replicate", "got 0"}},
    // A head-dimension factor small enough to make every attention time infinite.
    {"HeadDimScaleTiny", R"({"hardware": {"base": "h100-sxm", "efficiency": {"attention_head_dim_scale": {"128": 1e-300}}}})",
     {"$.hardware.efficiency.attention_head_dim_scale.128", "[0.01, 10]"}},
};
// clang-format on

INSTANTIATE_TEST_SUITE_P(Cases, BadRunFile, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<BadCase>& info) { return info.param.name; });

// Sanity: the base run itself is valid, so each case above fails for its own reason.
TEST(BadInputs, BaseRunIsValid) {
  EXPECT_NO_THROW(parse_run(Json::parse(kBase), "<test>", ""));
}

// Malformed JSON is a UserError naming the source and the byte offset of the problem.
TEST(BadInputs, MalformedJsonNamesByteOffset) {
  const std::string text = R"({"model": 1,, "x": 2})";  // second comma is byte 13
  try {
    core::parse_json_text(text, "run.json");
    FAIL() << "expected UserError";
  } catch (const core::UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("run.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find("byte 13"), std::string::npos) << msg;
  }
  EXPECT_THROW(core::parse_json_text("{\"model\": \"llama3.1-8b\"", "run.json"), core::UserError);
}

// null is not a value: "seq_len": null is refused (it read as the default before), while a
// hub config.json's nulls in the model section still read as absent.
TEST(BadInputs, NullIsRefusedOutsideModelConfigs) {
  Json run = Json::parse(kBase);
  run["training"]["seq_len"] = nullptr;
  try {
    parse_run(run, "<test>", "");
    FAIL() << "expected ConfigError";
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("$.training.seq_len: got null"), std::string::npos) << e.what();
  }
  Json hub = Json::parse(kBase);
  hub["model"] = {{"hidden_size", 1024}, {"num_attention_heads", 16}, {"num_hidden_layers", 4}, {"vocab_size", 32000},
                  {"intermediate_size", 4096}, {"sliding_window", nullptr}, {"rope_scaling", nullptr}};
  EXPECT_NO_THROW(parse_run(hub, "<test>", ""));
  hub["model"]["hidden_size"] = nullptr;  // a required size cannot be null
  EXPECT_THROW(parse_run(hub, "<test>", ""), core::ConfigError);
  // In a hardware override a null would delete the base's value (merge-patch rules): refused.
  Json hw = Json::parse(kBase);
  hw["hardware"] = {{"base", "h100-sxm"}, {"efficiency", {{"gemm_max", {{"bf16", nullptr}}}}}};
  try {
    parse_run(hw, "<test>", "");
    FAIL() << "expected ConfigError";
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("$.hardware.efficiency.gemm_max.bf16: got null"), std::string::npos) << e.what();
  }
}

// JSON text the parser would accept silently or crash on: repeated keys (the last would win),
// nesting deep enough to exhaust the stack, numbers beyond double range. One message each,
// naming the source, without the JSON library's exception tags.
TEST(BadInputs, DuplicateKeysDeepNestingAndOverflowingNumbers) {
  auto message = [](const std::string& text) {
    try {
      core::parse_json_text(text, "run.json");
    } catch (const core::UserError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  const std::string dup = message(R"({"model": "gpt2-124m", "parallel": {"tp": 2, "tp": 4}})");
  EXPECT_NE(dup.find("run.json: key \"tp\" appears twice in $.parallel"), std::string::npos) << dup;
  // The path follows arrays and nesting: here the second element of a list, then the top level.
  const std::string in_list = message(R"({"sweep": [{"a": 1}, {"b": [1, 2], "c": {"d": 1, "d": 2}}]})");
  EXPECT_NE(in_list.find("key \"d\" appears twice in $.sweep[1].c"), std::string::npos) << in_list;
  const std::string dotted = message(R"({"a.b": {"x": 1, "x": 2}})");
  EXPECT_NE(dotted.find("appears twice in $[\"a.b\"]"), std::string::npos) << dotted;
  const std::string top = message(R"({"model": "x", "model": "y"})");
  EXPECT_NE(top.find("key \"model\" appears twice in $;"), std::string::npos) << top;
  EXPECT_EQ(message(R"({"a": {"x": 1}, "b": {"x": 2}})"), "(accepted)");  // the same key in two objects is fine
  const std::string deep = message(std::string(100000, '[') + std::string(100000, ']'));
  EXPECT_NE(deep.find("nested deeper than 256 levels"), std::string::npos) << deep;
  EXPECT_EQ(message("[\"[[[[\"]"), "(accepted)");  // brackets inside strings do not count
  const std::string big = message(R"({"num_gpus": 1e999})");
  EXPECT_NE(big.find("run.json"), std::string::npos) << big;
  EXPECT_NE(big.find("$.num_gpus"), std::string::npos) << big;
  const std::string big_in_list = message(R"({"axes": [{"values": [1, 2, 1e999]}]})");
  EXPECT_NE(big_in_list.find("$.axes[0].values[2]"), std::string::npos) << big_in_list;
  EXPECT_EQ(big.find("json.exception"), std::string::npos) << big;
}

// All problems in one file are reported together (one ConfigError, one line per problem).
TEST(BadInputs, ReportsEveryProblemAtOnce) {
  Json run = Json::parse(kBase);
  run.merge_patch(Json::parse(R"({"training": {"seq_len": -1}, "parallel": {"recompute": "sometimes", "tpp": 1}})"));
  try {
    parse_run(run, "<test>", "");
    FAIL() << "expected ConfigError";
  } catch (const core::ConfigError& e) {
    EXPECT_GE(e.issues().size(), 3u) << e.what();
    const std::string msg = e.what();
    for (const char* p : {"$.training.seq_len", "$.parallel.recompute", "$.parallel.tpp"}) {
      EXPECT_NE(msg.find(p), std::string::npos) << msg;
    }
  }
}

// A profile's GEMM ceiling and its network are not defaulted: a profile written whole (no
// base) with an empty ceiling, a network without a NIC rate, or no network under a run that
// spans nodes is refused with the field named.
TEST(BadInputs, ProfileWithoutGemmCeilingOrNetwork) {
  const Json h100 = core::load_json_file(std::string(STEPCAST_SOURCE_DIR) + "/configs/hardware/h100-sxm.json");
  auto refused = [](Json hw, int64_t gpus, const std::string& path) {
    Json run = Json::parse(kBase);
    run["hardware"] = std::move(hw);
    run["cluster"]["num_gpus"] = gpus;
    try {
      parse_run(run, "<test>", "");
      ADD_FAILURE() << "expected ConfigError for " << path;
    } catch (const core::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  };
  Json hw = h100;
  hw["efficiency"]["gemm_max"] = Json::object();
  refused(hw, 8, "$.hardware.efficiency.gemm_max");
  hw = h100;
  hw["efficiency"].erase("gemm_max");
  refused(hw, 8, "$.hardware.efficiency.gemm_max");
  hw = h100;
  hw["network"].erase("nic_bandwidth");
  refused(hw, 8, "$.hardware.network.nic_bandwidth");
  hw = h100;
  hw.erase("network");
  refused(hw, 16, "$.hardware.network");
  // One node needs no network.
  EXPECT_NO_THROW({
    Json run = Json::parse(kBase);
    run["hardware"] = hw;
    (void)parse_run(run, "<test>", "");
  });
  // The Triton attention kernel's efficiencies come in pairs.
  hw = h100;
  hw["efficiency"].erase("attention_triton_bwd");
  refused(hw, 8, "$.hardware.efficiency.attention_triton_bwd");
}

// A zero bandwidth is one problem with one message, quoting what the user wrote (not a
// substituted value).
TEST(BadInputs, ZeroMemoryBandwidthIsOneProblem) {
  Json run = Json::parse(kBase);
  run.merge_patch(Json::parse(R"({"hardware": {"base": "h100-sxm", "gpu": {"memory_bandwidth": "0GB/s"}}})"));
  try {
    parse_run(run, "<test>", "");
    FAIL() << "expected ConfigError";
  } catch (const core::ConfigError& e) {
    ASSERT_EQ(e.issues().size(), 1u) << e.what();
    const std::string msg = e.what();
    EXPECT_NE(msg.find("$.hardware.gpu.memory_bandwidth"), std::string::npos) << msg;
    EXPECT_NE(msg.find("0GB/s"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("1 B/s"), std::string::npos) << msg;
  }
}

// A file path that cannot be read says why: missing, or a directory (not "malformed JSON").
TEST(BadInputs, UnreadableFileSaysWhy) {
  const std::string dir = ::testing::TempDir();
  try {
    core::load_json_file(dir);
    FAIL() << "expected UserError";
  } catch (const core::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
  try {
    core::load_json_file(dir + "/no-such-run-file.json");
    FAIL() << "expected UserError";
  } catch (const core::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open file"), std::string::npos) << e.what();
  }
}

// A run file that is not an object at all.
// A section of the wrong type is one problem: its required keys are not reported missing as
// well, while problems elsewhere in the file still are.
TEST(BadInputs, WrongTypeSectionIsOneProblem) {
  Json run = Json::parse(kBase);
  run.merge_patch(Json::parse(R"({"training": 65536, "parallel": {"recompute": "sometimes"}})"));
  try {
    parse_run(run, "<test>", "");
    ADD_FAILURE() << "no error";
  } catch (const core::ConfigError& e) {
    ASSERT_EQ(e.issues().size(), 2u) << e.what();
    EXPECT_NE(e.issues()[0].find("$.training: expected a JSON object, got 65536"), std::string::npos) << e.what();
    EXPECT_NE(e.issues()[1].find("$.parallel.recompute"), std::string::npos) << e.what();
  }
}

TEST(BadInputs, TopLevelNotAnObject) {
  EXPECT_THROW(parse_run(Json::array({1, 2}), "<test>", ""), core::ConfigError);
}

// Every value slot of a document, as pointers to the JSON values (objects and arrays included).
void slots(Json& j, std::vector<Json*>& out) {
  out.push_back(&j);
  if (j.is_object()) {
    for (auto& [k, v] : j.items()) slots(v, out);
  } else if (j.is_array()) {
    for (auto& v : j) slots(v, out);
  }
}

Json odd_value(std::mt19937_64& rng) {
  const std::vector<Json> values = {0,     -1,    1,      2,      3,       7,       1e30,    -1e30, 1e-30,   0.5,
                                    "x",   "",    "80GiB", "-5GB", "nan",  "inf",   nullptr, true,  Json::array(),
                                    Json::object(), Json::array({1, 2}), Json{{"a", 1}}, 4611686018427387904LL, 65536};
  return values[std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng)];
}

// One mutation: replace a value (an integer often by another power of two), delete a key, or
// misspell a key.
void mutate(Json& doc, std::mt19937_64& rng) {
  std::vector<Json*> all;
  slots(doc, all);
  std::vector<Json*> objects;
  for (Json* s : all) {
    if (s->is_object() && !s->empty()) objects.push_back(s);
  }
  const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
  if (kind < 2 && !objects.empty()) {
    Json& o = *objects[std::uniform_int_distribution<size_t>(0, objects.size() - 1)(rng)];
    auto it = o.begin();
    std::advance(it, std::uniform_int_distribution<long>(0, static_cast<long>(o.size()) - 1)(rng));
    const std::string key = it.key();
    Json v = it.value();
    o.erase(key);
    if (kind == 1) o[key + "_typo"] = v;
  } else if (all.size() > 1) {
    Json& slot = *all[std::uniform_int_distribution<size_t>(1, all.size() - 1)(rng)];
    if (slot.is_number_integer() && kind < 7) {
      // A plausible size: many of these still give a valid layout, so the cost model runs too.
      slot = int64_t{1} << std::uniform_int_distribution<int>(0, 5)(rng);
    } else {
      slot = odd_value(rng);
    }
  }
}

TEST(MutatedInputs, LoadOrAreRefusedWithAPath) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(std::string(STEPCAST_SOURCE_DIR) + "/configs/examples")) {
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty());
  std::mt19937_64 rng(20261202);
  int loaded = 0, refused = 0;
  // 30 mutated cases per example run file.
  const int cases = 30 * static_cast<int>(files.size());
  for (int i = 0; i < cases; ++i) {
    const std::string& f = files[static_cast<size_t>(i) % files.size()];
    Json doc = core::load_json_file(f);
    const int n = std::uniform_int_distribution<int>(1, 3)(rng);
    for (int k = 0; k < n; ++k) mutate(doc, rng);
    SCOPED_TRACE("case " + std::to_string(i) + " from " + f + ": " + core::show(doc));
    try {
      const RunConfig rc = parse_run(doc, "<mutated>", std::filesystem::path(f).parent_path().string());
      const auto ledger = memory::compute_ledger(rc);
      EXPECT_TRUE(std::isfinite(ledger.peak().value()));
      if (ledger.fits()) {
        const auto e = estimate::estimate_step(rc, ledger);
        EXPECT_TRUE(std::isfinite(e.step_time_s) && e.step_time_s > 0) << e.step_time_s;
        EXPECT_TRUE(std::isfinite(e.mfu));
      }
      ++loaded;
    } catch (const core::UserError& e) {
      // One clear message naming where: a JSON path, or the option/field it concerns.
      const std::string m = e.what();
      EXPECT_FALSE(m.empty());
      EXPECT_NE(m.find('$'), std::string::npos) << m;
      ++refused;
    }
  }
  // Both outcomes occur, so the mutations exercise the validator and the cost model alike.
  EXPECT_GT(loaded, 20);
  EXPECT_GT(refused, 100);
  RecordProperty("loaded", loaded);
  RecordProperty("refused", refused);
}

}  // namespace
}  // namespace stepcast::config
