// Hybrid Mamba-2 models (Nemotron-H): the layer pattern as the config spells it, parameter
// and FLOP counts by block kind, the Mamba-2 mixer's operators and their agreement with the
// memory ledger, the SSD scan's cost, and the simulation of a hybrid step.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "sim/config/run_config.hpp"
#include "sim/core/error.hpp"
#include "sim/core/json_reader.hpp"
#include "sim/cost/compute.hpp"
#include "sim/engine/step_sim.hpp"
#include "sim/estimate/estimate.hpp"
#include "sim/estimate/workload.hpp"
#include "sim/memory/ledger.hpp"
#include "tests/support/run_files.hpp"
#include "validate/program.hpp"

namespace stepcast::estimate {
namespace {

using config::RunConfig;
using core::Json;
using model::Ffn;
using model::LayerKind;
using model::Mixer;

const char* kPattern8b = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-";

// Nemotron-H 8B as transformers' NemotronHConfig writes it: the class's MoE defaults are saved
// although the pattern has no E block, layer_types and layers_block_type are derived from the
// pattern, and the time-step settings carry no cost.
Json nemotron_h_8b_hub() {
  Json layer_types = Json::array(), block_types = Json::array();
  for (const char ch : std::string(kPattern8b)) {
    block_types.push_back(ch == 'M' ? "mamba" : ch == '*' ? "attention" : "mlp");
    layer_types.push_back(ch == 'M' ? "mamba" : ch == '*' ? "attention" : "moe");
  }
  return {{"architectures", {"NemotronHForCausalLM"}},
          {"model_type", "nemotron_h"},
          {"vocab_size", 131072},
          {"tie_word_embeddings", false},
          {"hidden_size", 4096},
          {"intermediate_size", 21504},
          {"num_hidden_layers", 52},
          {"hybrid_override_pattern", kPattern8b},
          {"layers_block_type", block_types},
          {"layer_types", layer_types},
          {"num_attention_heads", 32},
          {"head_dim", 128},
          {"num_key_value_heads", 8},
          {"mlp_hidden_act", "relu2"},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"use_bias", false},
          {"layer_norm_epsilon", 1e-5},
          {"residual_in_fp32", false},
          {"num_logits_to_keep", 1},
          {"sliding_window", nullptr},
          {"max_position_embeddings", 8192},
          {"use_mamba_kernels", true},
          {"ssm_state_size", 128},
          {"mamba_num_heads", 128},
          {"n_groups", 8},
          {"mamba_head_dim", 64},
          {"conv_kernel", 4},
          {"expand", 2},
          {"mamba_hidden_act", "silu"},
          {"time_step_min", 0.001},
          {"time_step_max", 0.1},
          {"time_step_limit", {0.0, 1e30}},
          {"time_step_floor", 1e-4},
          {"use_conv_bias", true},
          {"mamba_proj_bias", false},
          {"chunk_size", 128},
          {"rescale_prenorm_residual", true},
          {"n_routed_experts", 8},
          {"n_shared_experts", 1},
          {"moe_intermediate_size", 7688},
          {"moe_shared_expert_intermediate_size", 7688},
          {"num_experts_per_tok", 2},
          {"routed_scaling_factor", 1.0},
          {"n_group", 1},
          {"topk_group", 1},
          {"norm_topk_prob", true},
          {"torch_dtype", "bfloat16"}};
}

Json run_of(const Json& model, int64_t gpus, const Json& parallel, int64_t seq = 8192, int64_t batch = 16) {
  return {{"model", model},
          {"hardware", "h100-sxm"},
          {"cluster", {{"num_gpus", gpus}, {"gpus_per_node", 8}}},
          {"training", {{"seq_len", seq}, {"global_batch_size", batch}, {"precision", "bf16"}}},
          {"parallel", parallel}};
}

RunConfig parse(const Json& j) { return config::parse_run(j, "<hybrid-test>", ""); }

std::string parse_error(const Json& j) { return test::parse_error(j, "<hybrid-test>"); }

const Op* find(const std::vector<Op>& ops, const std::string& name) {
  for (const auto& o : ops) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

// A hub config loads unchanged: the pattern decides the blocks, the unused MoE defaults are
// dropped, and the counts equal the zoo entry built from Megatron-Bridge's shapes.
TEST(Hybrid, NemotronHHubConfigLoadsUnchanged) {
  const RunConfig rc = parse(run_of(nemotron_h_8b_hub(), 8, {{"tp", 1}}));
  const auto& m = rc.model;
  EXPECT_EQ(m.layer_pattern, kPattern8b);
  EXPECT_FALSE(m.moe.enabled());
  EXPECT_EQ(m.num_mamba_layers(), 24);
  EXPECT_EQ(m.num_attention_layers(), 4);
  EXPECT_EQ(m.mamba.d_inner(), 8192);
  EXPECT_EQ(m.mamba.in_proj_width(), 2 * 8192 + 2 * 8 * 128 + 128);
  EXPECT_EQ(m.position, model::PositionKind::kNone);
  EXPECT_EQ(m.mlp, model::MlpKind::kPlain);
  EXPECT_DOUBLE_EQ(m.total_params(), model::zoo_model("nemotron-h-8b").total_params());
  // layers_block_type alone spells the same model.
  Json list_only = nemotron_h_8b_hub();
  list_only.erase("hybrid_override_pattern");
  EXPECT_EQ(parse(run_of(list_only, 8, {{"tp", 1}})).model.layer_pattern, kPattern8b);
  // Block kinds: one per character, each with its own norm.
  EXPECT_EQ(m.layer_kind(0), (LayerKind{Mixer::kMamba, Ffn::kNone}));
  EXPECT_EQ(m.layer_kind(1), (LayerKind{Mixer::kNone, Ffn::kDense}));
  EXPECT_EQ(m.layer_kind(7), (LayerKind{Mixer::kAttention, Ffn::kNone}));
  EXPECT_EQ(m.layer_kinds().size(), 3u);
  EXPECT_DOUBLE_EQ(m.layer_params(0), m.mamba_params());
  EXPECT_DOUBLE_EQ(m.layer_params(7), m.attention_params());
  EXPECT_DOUBLE_EQ(m.layer_params(1), m.dense_mlp_params());
}

TEST(Hybrid, BadHybridInputsNameTheField) {
  Json bad_char = nemotron_h_8b_hub();
  bad_char.erase("layers_block_type");
  bad_char["hybrid_override_pattern"] = std::string(kPattern8b).replace(3, 1, "X");
  EXPECT_NE(parse_error(run_of(bad_char, 8, {{"tp", 1}})).find("hybrid_override_pattern"), std::string::npos);
  Json short_pattern = nemotron_h_8b_hub();
  short_pattern.erase("layers_block_type");
  short_pattern["hybrid_override_pattern"] = "M-M*";
  EXPECT_NE(parse_error(run_of(short_pattern, 8, {{"tp", 1}})).find("has 4 layers; num_hidden_layers is 52"), std::string::npos);
  Json disagree = nemotron_h_8b_hub();
  disagree["layers_block_type"][0] = "attention";
  EXPECT_NE(parse_error(run_of(disagree, 8, {{"tp", 1}})).find("layers_block_type"), std::string::npos);
  Json no_heads = nemotron_h_8b_hub();
  no_heads.erase("mamba_num_heads");
  EXPECT_NE(parse_error(run_of(no_heads, 8, {{"tp", 1}})).find("mamba_num_heads"), std::string::npos);
  Json latent = nemotron_h_8b_hub();
  latent["moe_latent_size"] = 1024;
  EXPECT_NE(parse_error(run_of(latent, 8, {{"tp", 1}})).find("moe_latent_size"), std::string::npos);
  Json moe_without_experts = nemotron_h_8b_hub();
  moe_without_experts.erase("layers_block_type");
  for (const char* k : {"n_routed_experts", "moe_intermediate_size", "moe_shared_expert_intermediate_size"}) moe_without_experts.erase(k);
  moe_without_experts["hybrid_override_pattern"] = std::string(kPattern8b).replace(1, 1, "E");
  EXPECT_NE(parse_error(run_of(moe_without_experts, 8, {{"tp", 1}})).find("n_routed_experts"), std::string::npos);
  // Groups split over TP; context parallelism over the scan is not modelled.
  Json four_groups = nemotron_h_8b_hub();
  four_groups["n_groups"] = 4;
  const std::string tp8 = parse_error(run_of(four_groups, 8, {{"tp", 8}}));
  EXPECT_NE(tp8.find("$.parallel.tp"), std::string::npos);
  EXPECT_NE(tp8.find("Mamba-2"), std::string::npos);
  // Context parallelism hands each CP rank whole heads: cp must divide the heads per TP rank.
  Json odd_heads = nemotron_h_8b_hub();
  odd_heads["mamba_num_heads"] = 96;
  EXPECT_NE(parse_error(run_of(odd_heads, 64, {{"tp", 1}, {"cp", 64}}, 8192, 1)).find("$.parallel.cp"), std::string::npos);
  EXPECT_EQ(parse_error(run_of(nemotron_h_8b_hub(), 8, {{"tp", 1}, {"cp", 2}})), "");
  // Other state-space families stay refused with the reason.
  const Json jamba = {{"model_type", "jamba"}, {"num_hidden_layers", 4}, {"hidden_size", 256}, {"num_attention_heads", 4},
                      {"intermediate_size", 512}, {"vocab_size", 1000}};
  EXPECT_NE(parse_error(run_of(jamba, 8, {{"tp", 1}})).find("state-space"), std::string::npos);
}

// Megatron-Core's flexible pipeline split: '|' in the pattern marks virtual-stage boundaries,
// which give the run's split; the marks must agree with pp * vpp and with the parallel block.
TEST(Hybrid, PipeMarksInThePatternSplitThePipeline) {
  Json piped = nemotron_h_8b_hub();
  piped.erase("layers_block_type");
  const std::string blocks(kPattern8b);
  const std::string marked = blocks.substr(0, 30) + "|" + blocks.substr(30);  // blocks 0-29 | 30-51
  piped["hybrid_override_pattern"] = marked;
  const RunConfig rc = parse(run_of(piped, 16, {{"tp", 1}, {"pp", 2}}));
  EXPECT_EQ(rc.model.layer_pattern, kPattern8b);
  EXPECT_EQ(rc.model.pattern_stages, (std::vector<int64_t>{30, 22}));
  EXPECT_EQ(rc.vstage_layers, (std::vector<int64_t>{30, 22}));
  EXPECT_DOUBLE_EQ(rc.model.total_params(), model::zoo_model("nemotron-h-8b").total_params());
  // layers_block_type (no marks) still agrees with the marked pattern.
  Json with_list = nemotron_h_8b_hub();
  with_list["hybrid_override_pattern"] = marked;
  EXPECT_EQ(parse_error(run_of(with_list, 16, {{"tp", 1}, {"pp", 2}})), "");
  // Two segments need two virtual stages.
  const std::string pp4 = parse_error(run_of(piped, 16, {{"tp", 1}, {"pp", 4}}));
  EXPECT_NE(pp4.find("$.model.hybrid_override_pattern"), std::string::npos) << pp4;
  EXPECT_NE(pp4.find("2 pipeline segments"), std::string::npos) << pp4;
  EXPECT_NE(pp4.find("pp*vpp = 4*1 = 4"), std::string::npos) << pp4;
  // The marks give the split: a second one in the parallel block is refused.
  const std::string both = parse_error(run_of(piped, 16, {{"tp", 1}, {"pp", 2}, {"stage_layers", {26, 26}}}));
  EXPECT_NE(both.find("parallel.stage_layers"), std::string::npos) << both;
  // An empty middle segment, and multi-token-prediction blocks after '/'.
  Json empty_middle = piped;
  empty_middle["hybrid_override_pattern"] = marked.substr(0, 31) + "|" + marked.substr(31);
  EXPECT_NE(parse_error(run_of(empty_middle, 24, {{"tp", 1}, {"pp", 3}})).find("empty pipeline segment"), std::string::npos);
  Json mtp = piped;
  mtp["hybrid_override_pattern"] = std::string(kPattern8b) + "/*-";
  const std::string slash = parse_error(run_of(mtp, 8, {{"tp", 1}}));
  EXPECT_NE(slash.find("hybrid_override_pattern"), std::string::npos) << slash;
  EXPECT_NE(slash.find("multi-token-prediction"), std::string::npos) << slash;
}

// MFU's model FLOPs: 6 N D, the attention term over the attention layers only, and Megatron's
// 7 d_inner N per token forward for each Mamba-2 scan.
TEST(Hybrid, ModelFlopsCountTheScanAndOnlyTheAttentionLayers) {
  const RunConfig rc = parse(run_of("nemotron-h-56b", 64, {{"tp", 8}, {"sp", true}}, 8192, 64));
  const auto& m = rc.model;
  EXPECT_EQ(m.num_attention_layers(), 10);
  EXPECT_EQ(m.num_mamba_layers(), 54);
  const double tokens = 64.0 * 8192.0;
  const double attn = 3.0 * 64.0 * 256.0 * 8192.0 * 10.0;
  const double ssm = 3.0 * 7.0 * 16384.0 * 256.0 * 54.0;
  EXPECT_DOUBLE_EQ(model_flops_per_step(rc), tokens * (6.0 * m.flop_params() + attn + ssm));
}

// What the ledger counts per layer is what the layer's forward operators keep for backward,
// for every block kind of the pattern.
TEST(Hybrid, LedgerActivationsEqualTheOperatorsSavedBytes) {
  Json moe_model = nemotron_h_8b_hub();
  moe_model.erase("layers_block_type");
  moe_model["hybrid_override_pattern"] = std::string(kPattern8b).replace(1, 1, "E");
  for (const Json& parallel : {Json{{"tp", 1}}, Json{{"tp", 4}, {"sp", true}}, Json{{"tp", 4}, {"sp", false}}, Json{{"tp", 2}, {"sp", true}, {"cp", 4}},
                               Json{{"tp", 1}, {"cp", 8}, {"ep", 8}}}) {
    const RunConfig rc = parse(run_of(moe_model, 8, parallel));
    const WorkloadBuilder wb(rc);
    ASSERT_EQ(rc.model.layer_kinds().size(), 4u);
    for (const auto& kind : rc.model.layer_kinds()) {
      double saved = 0;
      for (const auto& o : wb.kind_cost(kind).fwd) saved += o.saved_bytes;
      EXPECT_NEAR(saved, memory::layer_activation_bytes(rc, kind).value(), 1e-9 * saved) << kind.label() << " " << parallel.dump();
    }
  }
}

TEST(Hybrid, MambaMixerRunsItsKernelsAndTheTensorParallelCollectives) {
  const RunConfig rc = parse(run_of("nemotron-h-56b", 64, {{"tp", 8}, {"sp", true}}, 8192, 64));
  const WorkloadBuilder wb(rc);
  const LayerCost& mamba = wb.kind_cost({Mixer::kMamba, Ffn::kNone});
  for (const char* op : {"norm1", "mamba_in.ag", "in_proj", "conv1d", "ssd_scan", "gated_norm", "out_proj", "mamba_out.rs", "residual1"}) {
    EXPECT_NE(find(mamba.fwd, op), nullptr) << op;
  }
  EXPECT_EQ(find(mamba.fwd, "attention"), nullptr);
  EXPECT_EQ(find(mamba.fwd, "norm2"), nullptr);
  // in_proj is column-parallel over d_inner, the groups and the heads.
  const Op* in_proj = find(mamba.fwd, "in_proj");
  EXPECT_DOUBLE_EQ(in_proj->gemm.n, (2.0 * 16384 + 2.0 * 8 * 256 + 256) / 8.0);
  EXPECT_DOUBLE_EQ(in_proj->gemm.k, 8192.0);
  // The same TP traffic as an attention block: one all-gather in, one reduce-scatter out.
  const LayerCost& attn = wb.kind_cost({Mixer::kAttention, Ffn::kNone});
  auto tp_bytes = [](const LayerCost& l) {
    double b = 0;
    for (const auto& o : l.fwd) b += o.kind == OpKind::kComm ? o.bytes.value() : 0.0;
    return b;
  };
  EXPECT_DOUBLE_EQ(tp_bytes(mamba), tp_bytes(attn));
  EXPECT_GT(mamba.bwd_compute.value(), mamba.fwd_compute.value());
}

// Megatron-Core's Mamba context parallelism: two all-to-alls each way around the conv, scan
// and norm, which then run over the whole sequence with heads / cp; B and C are repeated for
// CP ranks that share a group.
TEST(Hybrid, MambaContextParallelismExchangesHeadsForTheSequence) {
  const RunConfig one = parse(run_of("nemotron-h-56b", 64, {{"tp", 8}, {"sp", true}}, 16384, 64));
  const RunConfig two = parse(run_of("nemotron-h-56b", 64, {{"tp", 8}, {"sp", true}, {"cp", 2}}, 16384, 64));
  const WorkloadBuilder w1(one), w2(two);
  const LayerCost& m1 = w1.kind_cost({Mixer::kMamba, Ffn::kNone});
  const LayerCost& m2 = w2.kind_cost({Mixer::kMamba, Ffn::kNone});
  const double T = 16384.0 / 2.0, e = 2.0;
  const double in_w = (2.0 * 16384 + 256) / 8.0 + 2.0 * 2.0 * 256;  // groups per TP rank (1) < cp (2): B and C repeated
  EXPECT_DOUBLE_EQ(find(m2.fwd, "mamba_cp.a2a_in")->bytes.value(), e * in_w * T);
  EXPECT_DOUBLE_EQ(find(m2.fwd, "mamba_cp.a2a_out")->bytes.value(), e * 16384.0 / 8.0 * T);
  EXPECT_EQ(find(m1.fwd, "mamba_cp.a2a_in"), nullptr);
  // Half the tokens per rank: the scan's work per rank halves but for the repeated B and C.
  const double s1 = find(m1.fwd, "ssd_scan")->flops.value(), s2 = find(m2.fwd, "ssd_scan")->flops.value();
  EXPECT_GT(s2, 0.5 * s1);
  EXPECT_LT(s2, 0.55 * s1);
}

// The scan is the larger of its tensor-core and memory times: at Nemotron-H's shapes it is
// memory-bound (the fp32 chunk states), and its cost grows with the state and the tokens.
TEST(Hybrid, SsdScanCostsItsRooflineAndGrowsWithState) {
  const hw::HardwareProfile h100 = hw::builtin_hardware("h100-sxm");
  cost::SsdShape s{8192, 32, 64, 256, 1, 128, 2};
  const double compute = s.flops(false).value() / (h100.peak_for(hw::Dtype::kBf16).value() * h100.gemm_max_for(hw::Dtype::kBf16) *
                                                    h100.efficiency.sustained_clock);
  const double memory = cost::memory_time(s.bytes(false), h100).value();
  EXPECT_GT(memory, compute);
  EXPECT_DOUBLE_EQ(cost::ssd_scan_time(s, false, h100).value(), memory + 5.0 * h100.efficiency.kernel_overhead.value());
  EXPECT_GT(cost::ssd_scan_time(s, true, h100).value(), 2.0 * cost::ssd_scan_time(s, false, h100).value());
  cost::SsdShape smaller = s;
  smaller.state = 128;
  EXPECT_LT(cost::ssd_scan_time(smaller, false, h100).value(), cost::ssd_scan_time(s, false, h100).value());
  cost::SsdShape twice = s;
  twice.tokens *= 2;
  EXPECT_NEAR(twice.bytes(true).value(), 2.0 * s.bytes(true).value(), 1e-9 * s.bytes(true).value());
}

// A hybrid step simulates like any other: the estimate agrees with the timeline and the
// memory timeline's peak with the ledger; a pipeline splits the pattern's blocks by count.
TEST(Hybrid, HybridStepSimulatesAndMatchesTheEstimate) {
  const RunConfig rc = parse(run_of("nemotron-h-8b", 16, {{"tp", 2}, {"pp", 2}, {"sp", true}, {"micro_batch_size", 1}}, 8192, 32));
  const auto sim = engine::simulate_step(rc);
  const auto est = estimate_step(rc);
  EXPECT_NEAR(est.step_time_s / sim.step.step_time_s, 1.0, 0.05);
  EXPECT_NEAR(sim.memory_timeline_peak_bytes / est.memory.peak().value(), 1.0, 0.02);
  // Stage 0 holds the first 26 blocks (12 Mamba-2, 2 attention, 12 MLP) with the embedding.
  const auto& st0 = est.memory.stages[0];
  double params = 0;
  for (int64_t l = 0; l < 26; ++l) params += rc.model.layer_params(l);
  EXPECT_NEAR(st0.dense_params, params / 2.0 + static_cast<double>(rc.padded_vocab) * 4096.0 / 2.0, 0.01 * params);
  // The executors run transformer layers only.
  EXPECT_THROW(validate::check_executable(rc, "cpu"), core::UserError);
}

// A hybrid with MoE blocks (Nemotron 3 Nano's pattern class): experts only in the E layers,
// with expert parallelism.
TEST(Hybrid, MoeBlocksFollowThePattern) {
  Json nano = {{"model_type", "nemotron_h"},
               {"hidden_size", 2688},
               {"num_hidden_layers", 12},
               {"hybrid_override_pattern", "MEMEM*EMEMEM"},
               {"num_attention_heads", 32},
               {"num_key_value_heads", 2},
               {"head_dim", 128},
               {"intermediate_size", 1856},
               {"mamba_num_heads", 64},
               {"mamba_head_dim", 64},
               {"ssm_state_size", 128},
               {"n_groups", 8},
               {"n_routed_experts", 128},
               {"num_experts_per_tok", 6},
               {"moe_intermediate_size", 1856},
               {"moe_shared_expert_intermediate_size", 3712},
               {"vocab_size", 131072}};
  const RunConfig rc = parse(run_of(nano, 8, {{"tp", 1}, {"ep", 8}}, 4096, 8));
  const auto& m = rc.model;
  EXPECT_EQ(m.num_moe_layers(), 5);
  EXPECT_EQ(m.num_mamba_layers(), 6);
  EXPECT_EQ(m.moe.shared_experts, 1);
  EXPECT_EQ(m.moe.shared_expert_ffn, 3712);
  EXPECT_TRUE(m.is_moe_layer(1));
  EXPECT_FALSE(m.is_moe_layer(0));
  const WorkloadBuilder wb(rc);
  const LayerCost& moe = wb.kind_cost({Mixer::kNone, Ffn::kMoe});
  EXPECT_NE(find(moe.fwd, "ep.dispatch"), nullptr);
  EXPECT_EQ(find(moe.fwd, "attention"), nullptr);
  const auto sim = engine::simulate_step(rc);
  EXPECT_GT(sim.step.step_time_s, 0.0);
}

// Qwen3-Next: Gated DeltaNet layers beside output-gated attention, every layer with MoE. The
// ledger counts what the operators keep, layer kind by layer kind; TP splits the key heads;
// context parallelism over the recurrence is refused; the rule's cost is its roofline.
TEST(Hybrid, GatedDeltaNetLayers) {
  for (const Json& parallel : {Json{{"tp", 1}, {"ep", 8}}, Json{{"tp", 2}, {"sp", true}, {"ep", 4}}}) {
    const RunConfig rc = parse(run_of("qwen3-next-80b-a3b", 32, parallel, 4096, 64));
    const WorkloadBuilder wb(rc);
    ASSERT_EQ(rc.model.layer_kinds().size(), 2u);
    for (const auto& kind : rc.model.layer_kinds()) {
      double saved = 0;
      for (const auto& o : wb.kind_cost(kind).fwd) saved += o.saved_bytes;
      EXPECT_NEAR(saved, memory::layer_activation_bytes(rc, kind).value(), 1e-9 * saved) << kind.label() << " " << parallel.dump();
    }
    const LayerCost& lin = wb.kind_cost({Mixer::kLinear, Ffn::kMoe});
    for (const char* op : {"in_proj", "conv1d", "delta_rule", "gated_norm", "out_proj", "ep.dispatch"}) EXPECT_NE(find(lin.fwd, op), nullptr) << op;
    EXPECT_EQ(find(lin.fwd, "attention"), nullptr);
    const LayerCost& att = wb.kind_cost({Mixer::kAttention, Ffn::kMoe});
    const double t = static_cast<double>(rc.parallel.tp);
    // Queries and their gate (16 heads of 256 each), K and V (2 heads of 256, replicated past tp 2).
    EXPECT_DOUBLE_EQ(find(att.fwd, "qkv")->gemm.n, 2.0 * 16 * 256 / t + 2.0 * std::max(2.0, t) / t * 256);
    EXPECT_NE(find(att.fwd, "attn_gate"), nullptr);
  }
  // Context parallelism in Megatron-Core's head-parallel mode: cp must divide the key heads
  // per TP rank (16 here); each mixer exchanges its in_proj output and its normed output.
  EXPECT_NE(parse_error(run_of("qwen3-next-80b-a3b", 32, {{"tp", 1}, {"cp", 32}, {"ep", 8}}, 4096, 32)).find("Gated DeltaNet"),
            std::string::npos);
  {
    const RunConfig rc = parse(run_of("qwen3-next-80b-a3b", 32, {{"tp", 1}, {"cp", 2}, {"ep", 8}}, 4096, 64));
    const WorkloadBuilder wb(rc);
    const LayerCost& lin = wb.kind_cost({Mixer::kLinear, Ffn::kMoe});
    const double T = 4096.0 / 2.0, e = 2.0;
    EXPECT_DOUBLE_EQ(find(lin.fwd, "linear_cp.a2a_in")->bytes.value(), e * (2.0 * 2048 + 2.0 * 4096 + 64) * T);
    EXPECT_DOUBLE_EQ(find(lin.fwd, "linear_cp.a2a_out")->bytes.value(), e * 4096 * T);
    double saved = 0;
    for (const auto& o : lin.fwd) saved += o.saved_bytes;
    EXPECT_NEAR(saved, memory::layer_activation_bytes(rc, LayerKind{Mixer::kLinear, Ffn::kMoe}).value(), 1e-9 * saved);
  }
  EXPECT_NE(parse_error(run_of("qwen3-next-80b-a3b", 32, {{"tp", 32}, {"ep", 1}}, 4096, 64)).find("$.parallel.tp"), std::string::npos);
  // The rule at these shapes: memory-bound on H100 (fp32 states of 128 x 128 per value head).
  const hw::HardwareProfile h100 = hw::builtin_hardware("h100-sxm");
  const cost::GdnShape g{4096, 32, 16, 128, 128, 64, 2};
  const double compute = g.flops(false).value() /
                         (h100.peak_for(hw::Dtype::kBf16).value() * h100.gemm_max_for(hw::Dtype::kBf16) * h100.efficiency.sustained_clock);
  const double memory = cost::memory_time(g.bytes(false), h100).value();
  EXPECT_DOUBLE_EQ(cost::gdn_scan_time(g, false, h100).value(), std::max(compute, memory) + 6.0 * h100.efficiency.kernel_overhead.value());
  EXPECT_DOUBLE_EQ(g.flops(true).value(), 2.5 * g.flops(false).value());
  // MFU counts the recurrence's 6 k_dim v_dim per token and value head over the linear layers.
  const RunConfig rc = parse(run_of("qwen3-next-80b-a3b", 32, {{"tp", 1}, {"ep", 8}}, 4096, 64));
  const auto& m = rc.model;
  const double tokens = 64.0 * 4096.0;
  const double attn = 3.0 * 16.0 * 512.0 * 4096.0 * 12.0;
  const double lin = 3.0 * 6.0 * 32.0 * 128.0 * 128.0 * 36.0;
  EXPECT_DOUBLE_EQ(model_flops_per_step(rc), tokens * (6.0 * m.flop_params() + attn + lin));
  const auto sim = engine::simulate_step(rc);
  EXPECT_NEAR(estimate_step(rc).step_time_s / sim.step.step_time_s, 1.0, 0.05);
}

}  // namespace
}  // namespace stepcast::estimate
