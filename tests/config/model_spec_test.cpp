// Model zoo and model parsing: parameter counts match the published / safetensors totals, a real
// HuggingFace config.json loads unchanged, and typos are reported instead of ignored.
#include "models/model_spec.hpp"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "sim/config/hardware.hpp"
#include "sim/config/run_config.hpp"
#include "sim/core/error.hpp"
#include "sim/core/json_reader.hpp"

namespace stepcast::model {
namespace {

using core::Json;

const std::string kDataDir = STEPCAST_TEST_DATA_DIR;

const Json& expected_params() {
  static const Json j = core::load_json_file(kDataDir + "/zoo_expected_params.json");
  return j;
}

// The zoo models whose counts are pinned in tests/data/zoo_expected_params.json.
const std::vector<std::string> kZooNames = {
    "gpt2-124m",     "gpt2-large",    "gpt3-175b",       "llama2-7b",       "llama2-13b",
    "llama2-70b",    "llama3.1-8b",   "llama3.1-70b",    "llama3.1-405b",   "mixtral-8x7b",
    "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3",   "nemotron4-15b",   "nemotron4-340b",
    "gpt-oss-120b",  "nemotron-h-8b", "nemotron-h-56b", "nemotron-3-nano-30b-a3b", "qwen3-next-80b-a3b",
    "qwen3.5-27b",   "qwen3.5-35b-a3b", "qwen3.5-397b-a17b"};

// Every built-in model has a pinned expectation (a new zoo entry must come with its count).
TEST(ModelZoo, EveryZooEntryHasAnExpectedCount) {
  std::set<std::string> expected;
  for (auto it = expected_params().begin(); it != expected_params().end(); ++it) expected.insert(it.key());
  const auto names = zoo_names();
  const std::set<std::string> zoo(names.begin(), names.end());
  EXPECT_EQ(zoo, expected);
  EXPECT_EQ(std::set<std::string>(kZooNames.begin(), kZooNames.end()), expected);
}

class ZooParams : public ::testing::TestWithParam<std::string> {};

// Total parameters follow the architecture exactly (attention, MLP/experts, norms, embeddings);
// the expected values are safetensors totals or counts from the published hyperparameters.
TEST_P(ZooParams, TotalParamsMatchPublished) {
  const std::string name = GetParam();
  const Json& e = expected_params().at(name);
  const double want = e.at("total_params").get<double>();
  const double tol = e.at("tolerance").get<double>();
  const ModelSpec m = zoo_model(name);
  const double got = m.total_params();
  EXPECT_NEAR(got / want, 1.0, tol) << name << ": total_params() = " << got << ", expected " << want
                                    << " (relative error " << (got - want) / want << ")";
}

// MoE models: active params = total minus the routed experts a token does not select.
TEST_P(ZooParams, ActiveParamsMatchPublished) {
  const std::string name = GetParam();
  const Json& e = expected_params().at(name);
  const ModelSpec m = zoo_model(name);
  if (!e.contains("active_params")) {
    // Dense model: every parameter is active.
    EXPECT_FALSE(m.moe.enabled()) << name;
    EXPECT_DOUBLE_EQ(m.active_params(), m.total_params()) << name;
    return;
  }
  ASSERT_TRUE(m.moe.enabled()) << name;
  const double want = e.at("active_params").get<double>();
  const double tol = e.at("tolerance").get<double>();
  const double got = m.active_params();
  EXPECT_NEAR(got / want, 1.0, tol) << name << ": active_params() = " << got << ", expected " << want
                                    << " (relative error " << (got - want) / want << ")";
  EXPECT_LT(m.active_params(), m.total_params()) << name;
}

INSTANTIATE_TEST_SUITE_P(Zoo, ZooParams, ::testing::ValuesIn(kZooNames),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string s = info.param;
                           for (auto& c : s) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return s;
                         });

// Unknown zoo names are a user error that lists the valid names.
TEST(ModelZoo, UnknownNameListsChoices) {
  try {
    zoo_model("llama9-1t");
    FAIL() << "expected UserError";
  } catch (const core::UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("llama9-1t"), std::string::npos) << msg;
    EXPECT_NE(msg.find("llama3.1-8b"), std::string::npos) << msg;
  }
}

// Built-in models and hardware profiles are parsed once and handed out as copies: lookups from
// many threads at once (the planner's workers) agree with one another and with the first, and a
// caller's changes to its copy do not reach the next lookup. An unknown name stays an error after
// a known one was cached.
TEST(ModelZoo, LookupsFromManyThreadsAgreeAndHandOutCopies) {
  const double params = zoo_model("deepseek-v3").total_params();
  const double hbm = hw::builtin_hardware("h100-sxm").hbm_capacity.value();
  std::vector<double> seen_params(8), seen_hbm(8);
  std::vector<std::thread> workers;
  for (size_t t = 0; t < seen_params.size(); ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        seen_params[t] = zoo_model(i % 2 ? "deepseek-v3" : "llama3.1-8b").total_params();
        seen_hbm[t] = hw::builtin_hardware(i % 2 ? "h100-sxm" : "b200").hbm_capacity.value();
      }
    });
  }
  for (auto& w : workers) w.join();
  for (size_t t = 0; t < seen_params.size(); ++t) {
    EXPECT_EQ(seen_params[t], params);
    EXPECT_EQ(seen_hbm[t], hbm);
  }
  ModelSpec m = zoo_model("deepseek-v3");
  m.num_layers = 1;
  EXPECT_EQ(zoo_model("deepseek-v3").total_params(), params);
  EXPECT_THROW((void)zoo_model("deepseek-v4-imaginary"), core::UserError);
  EXPECT_THROW((void)hw::builtin_hardware("h100-imaginary"), core::UserError);
}

// A run file given where a model config belongs is named as such, in one problem, rather than
// as a dozen missing and unknown model keys.
TEST(ModelParse, RunFileInPlaceOfAModelConfigIsOneProblem) {
  const Json run = Json::parse(R"({"model": "llama3.1-8b", "hardware": "h100-sxm", "cluster": {"num_gpus": 8},
                                   "training": {"seq_len": 4096, "global_batch_size": 8}})");
  core::Issues issues;
  (void)parse_model(run, "$.model", issues, "");
  ASSERT_EQ(issues.lines().size(), 1u);
  EXPECT_NE(issues.lines().front().find("this is a run file"), std::string::npos) << issues.lines().front();
}

// A mixture-of-experts config must give its experts' width: without intermediate_size or
// moe_intermediate_size it is one problem, not a silent 4 x hidden.
TEST(ModelParse, MoeConfigWithoutAnExpertWidthIsOneProblem) {
  Json moe = Json::parse(R"({"model_type": "mixtral", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
                             "vocab_size": 1000, "num_local_experts": 8, "num_experts_per_tok": 2})");
  core::Issues issues;
  (void)parse_model(moe, "$.model", issues, "");
  ASSERT_EQ(issues.lines().size(), 1u);
  EXPECT_NE(issues.lines().front().find("$.model.intermediate_size"), std::string::npos) << issues.lines().front();
  EXPECT_NE(issues.lines().front().find("moe_intermediate_size"), std::string::npos) << issues.lines().front();
  moe["moe_intermediate_size"] = 512;  // the experts' width alone is enough
  core::Issues given;
  const ModelSpec m = parse_model(moe, "$.model", given, "");
  EXPECT_TRUE(given.empty());
  EXPECT_EQ(m.moe.expert_ffn, 512);
}

// A {"path": ...} model or profile with other keys names them.
TEST(ModelParse, PathFormWithOtherKeysNamesThem) {
  core::Issues issues;
  (void)parse_model(Json{{"path", kDataDir + "/hf/llama3.1-8b-config.json"}, {"hidden_size", 512}}, "$.model", issues, "");
  ASSERT_EQ(issues.lines().size(), 1u);
  EXPECT_NE(issues.lines().front().find("'hidden_size'"), std::string::npos) << issues.lines().front();
}

// A real HuggingFace config.json (every key of the published Llama-3.1-8B file, including
// rope_scaling, token ids, torch_dtype and architectures) loads without edits and describes the
// same architecture as the zoo entry.
TEST(ModelParse, RealHfConfigLoadsUnchanged) {
  core::Issues issues;
  const Json j = {{"path", kDataDir + "/hf/llama3.1-8b-config.json"}};
  const ModelSpec m = parse_model(j, "$.model", issues, "");
  for (const auto& l : issues.lines()) ADD_FAILURE() << l;
  ASSERT_TRUE(issues.empty());
  EXPECT_EQ(m.num_layers, 32);
  EXPECT_EQ(m.hidden, 4096);
  EXPECT_EQ(m.heads, 32);
  EXPECT_EQ(m.kv_heads, 8);
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.ffn_hidden, 14336);
  EXPECT_EQ(m.vocab, 128256);
  EXPECT_EQ(m.mlp, MlpKind::kGated);
  EXPECT_EQ(m.norm, NormKind::kRmsNorm);
  EXPECT_FALSE(m.tied_embeddings);
  EXPECT_FALSE(m.moe.enabled());
  // 8,030,261,248 = HF safetensors total for meta-llama/Llama-3.1-8B.
  EXPECT_DOUBLE_EQ(m.total_params(), 8030261248.0);
  EXPECT_DOUBLE_EQ(m.total_params(), zoo_model("llama3.1-8b").total_params());
}

// BLOOM's config.json names neither its position scheme, norm, biases nor activation; the model
// type fixes them (ALiBi, LayerNorm also on the embeddings, biases everywhere, GeLU MLP).
// bigscience/bloom-560m: 559,214,592 parameters (its model card).
TEST(ModelParse, BloomConfigLoadsWithItsArchitecture) {
  core::Issues issues;
  const ModelSpec m = parse_model(Json{{"path", kDataDir + "/hf/bloom-560m-config.json"}}, "$.model", issues, "");
  for (const auto& l : issues.lines()) ADD_FAILURE() << l;
  ASSERT_TRUE(issues.empty());
  EXPECT_EQ(m.position, PositionKind::kAlibi);
  EXPECT_EQ(m.norm, NormKind::kLayerNorm);
  EXPECT_EQ(m.mlp, MlpKind::kPlain);
  EXPECT_TRUE(m.linear_bias);
  EXPECT_TRUE(m.embedding_norm);
  EXPECT_TRUE(m.tied_embeddings);
  EXPECT_EQ(m.ffn_hidden, 4 * 1024);
  EXPECT_DOUBLE_EQ(m.total_params(), 559214592.0);
}

// A relative model path resolves against the run file's directory (base_dir).
TEST(ModelParse, RelativePathResolvesAgainstBaseDir) {
  core::Issues issues;
  const ModelSpec m = parse_model(Json{{"path", "hf/llama3.1-8b-config.json"}}, "$.model", issues, kDataDir);
  for (const auto& l : issues.lines()) ADD_FAILURE() << l;
  EXPECT_EQ(m.hidden, 4096);
}

// A typo in a model key is reported with its JSON path, not silently ignored.
TEST(ModelParse, UnknownModelKeyIsReported) {
  core::Issues issues;
  Json j = {{"num_hidden_layers", 2}, {"hidden_size", 256}, {"num_attention_heads", 4},
            {"vocab_size", 1000}, {"intermediate_sise", 1024}};
  parse_model(j, "$.model", issues, "");
  ASSERT_FALSE(issues.empty());
  bool found = false;
  for (const auto& l : issues.lines()) found = found || l.find("$.model.intermediate_sise") != std::string::npos;
  EXPECT_TRUE(found) << issues.lines().front();
}

// Stepcast-only sections (training, parallel, cluster) accept no foreign keys: an unknown key is
// a ConfigError naming its JSON path.
TEST(ModelParse, UnknownKeyInStepcastSectionErrors) {
  const Json run = {
      {"model", "llama3.1-8b"},
      {"hardware", "h100-sxm"},
      {"cluster", {{"num_gpus", 8}}},
      {"training", {{"seq_len", 4096}, {"global_batch_size", 8}, {"rope_theta", 500000.0}}},
  };
  try {
    config::parse_run(run, "<test>", "");
    FAIL() << "expected ConfigError";
  } catch (const core::ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("$.training.rope_theta"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unknown key"), std::string::npos) << msg;
  }
}

// Shape-derived widths: GQA keeps fewer K/V heads than query heads.
TEST(ModelParse, DerivedShapes) {
  const ModelSpec m = zoo_model("llama3.1-70b");
  EXPECT_EQ(m.q_dim(), 64 * 128);
  EXPECT_EQ(m.kv_dim(), 8 * 128);
  EXPECT_EQ(m.mlp_matrices(), 3);
  const ModelSpec g = zoo_model("gpt2-124m");
  EXPECT_EQ(g.mlp, MlpKind::kPlain);
  EXPECT_EQ(g.norm, NormKind::kLayerNorm);
  EXPECT_EQ(g.position, PositionKind::kLearned);
  EXPECT_EQ(g.ffn_hidden, 4 * 768);  // n_inner absent means 4*n_embd
}

// Where MoE layers sit follows each family's convention: Qwen-MoE's decoder_sparse_step counts
// from layer 1 ((l + 1) % step == 0, as transformers' Qwen2MoeDecoderLayer), minus the
// mlp_only_layers; Megatron's and DeepSeek's moe_layer_freq from layer 0.
TEST(ModelParse, MoeLayerPlacementFollowsTheFamilyConvention) {
  const Json base = {{"hidden_size", 512}, {"num_attention_heads", 8}, {"num_hidden_layers", 8},
                     {"intermediate_size", 1024}, {"moe_intermediate_size", 256}, {"num_experts", 8},
                     {"num_experts_per_tok", 2}, {"vocab_size", 1000}};
  const auto layers_of = [](const ModelSpec& m) {
    std::vector<int64_t> out;
    for (int64_t l = 0; l < m.num_layers; ++l) {
      if (m.is_moe_layer(l)) out.push_back(l);
    }
    return out;
  };
  const auto parse_ok = [](const Json& j) {
    core::Issues issues;
    const ModelSpec m = parse_model(j, "$.model", issues, "");
    for (const auto& l : issues.lines()) ADD_FAILURE() << l;
    return m;
  };
  Json qwen = base;
  qwen["decoder_sparse_step"] = 2;
  EXPECT_EQ(layers_of(parse_ok(qwen)), (std::vector<int64_t>{1, 3, 5, 7}));
  qwen["mlp_only_layers"] = Json::array({3, 0});
  EXPECT_EQ(layers_of(parse_ok(qwen)), (std::vector<int64_t>{1, 5, 7}));
  Json megatron = base;
  megatron["moe_layer_freq"] = 2;
  EXPECT_EQ(layers_of(parse_ok(megatron)), (std::vector<int64_t>{0, 2, 4, 6}));
  megatron["first_k_dense_replace"] = 3;  // DeepSeek: l >= k and l % freq == 0
  EXPECT_EQ(layers_of(parse_ok(megatron)), (std::vector<int64_t>{4, 6}));

  // Mistakes name the field: a layer out of range, a repeated layer, both spacings at once,
  // and a pattern that leaves no MoE layer.
  const auto message = [](const Json& j) {
    core::Issues issues;
    parse_model(j, "$.model", issues, "");
    return issues.empty() ? std::string() : issues.lines().front();
  };
  Json bad = base;
  bad["mlp_only_layers"] = Json::array({8});
  EXPECT_NE(message(bad).find("$.model.mlp_only_layers"), std::string::npos) << message(bad);
  bad["mlp_only_layers"] = Json::array({2, 2});
  EXPECT_NE(message(bad).find("twice"), std::string::npos) << message(bad);
  bad["mlp_only_layers"] = Json::array({"2"});
  EXPECT_NE(message(bad).find("$.model.mlp_only_layers[0]"), std::string::npos) << message(bad);
  bad = base;
  bad["decoder_sparse_step"] = 2;
  bad["moe_layer_freq"] = 3;
  EXPECT_NE(message(bad).find("$.model.decoder_sparse_step"), std::string::npos) << message(bad);
  bad = base;
  bad["mlp_only_layers"] = Json::array({0, 1, 2, 3, 4, 5, 6, 7});
  EXPECT_NE(message(bad).find("leaves no MoE layer"), std::string::npos) << message(bad);
}

// Published config.json files of other families load unchanged and count their published
// parameters (tests/data/hf/README.md names each source). Tolerance 0.5% where the card gives a
// count to three significant figures (its own rounding), 1.5% for a count given only by the
// model's name (30B, 17B active), which is itself rounded.
TEST(ModelParse, HubConfigsOfOtherFamiliesCountTheirPublishedParameters) {
  struct Case {
    const char* file;
    double total;   // 0: not checked
    double active;  // 0: not checked
    double tol;
  };
  const Case cases[] = {
      {"gemma2-9b-config.json", 9.24e9, 0, 0.005},
      {"starcoder2-15b-config.json", 15.96e9, 0, 0.005},
      {"granite3-8b-config.json", 8.17e9, 0, 0.005},
      {"mpt-7b-instruct-config.json", 6.65e9, 0, 0.005},
      {"glm4.7-flash-30b-a3b-config.json", 30e9, 0, 0.015},
      {"llama4-scout-17b-16e-config.json", 0, 17e9, 0.015},
  };
  for (const Case& c : cases) {
    core::Issues issues;
    const ModelSpec m = parse_model(Json{{"path", std::string("hf/") + c.file}}, "$.model", issues, kDataDir);
    for (const auto& l : issues.lines()) ADD_FAILURE() << c.file << ": " << l;
    if (!issues.empty()) continue;
    if (c.total > 0) {
      EXPECT_NEAR(m.total_params() / c.total, 1.0, c.tol) << c.file << ": " << m.total_params();
    }
    if (c.active > 0) {
      EXPECT_NEAR(m.active_params() / c.active, 1.0, c.tol) << c.file << ": " << m.active_params();
    }
  }
}

// What each family's file implies beyond its counts: Gemma's gated MLP under a gelu name and
// its alternating local layers; MPT's ALiBi from attn_config; Llama 4's decoder under
// text_config with a shared expert and chunked attention on three layers in four; MLA heads
// that do not divide the hidden size; and a hybrid linear-attention model refused with why.
TEST(ModelParse, HubConfigsCarryTheirFamilyConventions) {
  const auto load = [](const char* file, core::Issues& issues) {
    return parse_model(Json{{"path", std::string("hf/") + file}}, "$.model", issues, kDataDir);
  };
  core::Issues issues;
  const ModelSpec gemma = load("gemma2-9b-config.json", issues);
  EXPECT_EQ(gemma.mlp, MlpKind::kGated);
  EXPECT_EQ(gemma.sliding_window, 4096);
  EXPECT_DOUBLE_EQ(gemma.sliding_layer_fraction, 0.5);
  // At 8,192 tokens the first 4,096 queries see 1..4,096 keys, the rest 4,096 each.
  EXPECT_DOUBLE_EQ(gemma.local_keys_per_query(8192), (4096.0 * 4097.0 / 2.0 + 4096.0 * 4096.0) / 8192.0);
  EXPECT_EQ(gemma.local_keys_per_query(4096), 0.0);  // the window covers the whole sequence
  const ModelSpec mpt = load("mpt-7b-instruct-config.json", issues);
  EXPECT_EQ(mpt.position, PositionKind::kAlibi);
  EXPECT_EQ(mpt.norm, NormKind::kLayerNorm);
  EXPECT_FALSE(mpt.linear_bias);  // no_bias: true
  const ModelSpec star = load("starcoder2-15b-config.json", issues);
  EXPECT_EQ(star.norm, NormKind::kLayerNorm);
  EXPECT_TRUE(star.linear_bias);
  const ModelSpec scout = load("llama4-scout-17b-16e-config.json", issues);
  EXPECT_EQ(scout.num_layers, 48);
  EXPECT_EQ(scout.moe.shared_experts, 1);
  EXPECT_EQ(scout.moe.shared_expert_ffn, 8192);
  EXPECT_EQ(scout.num_moe_layers(), 48);
  EXPECT_FALSE(scout.tied_embeddings);
  EXPECT_DOUBLE_EQ(scout.sliding_layer_fraction, 0.75);
  EXPECT_DOUBLE_EQ(scout.local_keys_per_query(32768), 8193.0 / 2.0);  // four chunks of 8,192
  EXPECT_EQ(scout.local_keys_per_query(8192), 0.0);                   // one chunk: full causal attention
  const ModelSpec glm = load("glm4.7-flash-30b-a3b-config.json", issues);
  EXPECT_TRUE(glm.mla.enabled());
  for (const auto& l : issues.lines()) ADD_FAILURE() << l;

  // Qwen2: layers from max_window_layers on slide; max_window_layers = every layer leaves none.
  core::Issues qi;
  Json qwen = {{"model_type", "qwen2"}, {"hidden_size", 512}, {"num_attention_heads", 8}, {"num_hidden_layers", 8},
               {"intermediate_size", 1024}, {"vocab_size", 1000}, {"use_sliding_window", true}, {"sliding_window", 256},
               {"max_window_layers", 6}};
  EXPECT_DOUBLE_EQ(parse_model(qwen, "$.model", qi, "").sliding_layer_fraction, 0.25);
  qwen["max_window_layers"] = 8;
  EXPECT_EQ(parse_model(qwen, "$.model", qi, "").local_keys_per_query(4096), 0.0);
  for (const auto& l : qi.lines()) ADD_FAILURE() << l;

  // Nemotron 3 Nano: Mamba-2, attention and MoE blocks by its pattern; the d_inner of its
  // Mamba heads (64 x 64) is not its nominal expand x hidden. The zoo entry is built from
  // Megatron-Bridge's shapes: the two agree to the parameter.
  core::Issues nn;
  const ModelSpec nano = load("nemotron-3-nano-30b-a3b-config.json", nn);
  for (const auto& l : nn.lines()) ADD_FAILURE() << l;
  EXPECT_EQ(nano.mamba.d_inner(), 4096);
  EXPECT_EQ(nano.num_moe_layers(), 23);
  EXPECT_DOUBLE_EQ(nano.total_params(), zoo_model("nemotron-3-nano-30b-a3b").total_params());
  EXPECT_DOUBLE_EQ(nano.active_params(), zoo_model("nemotron-3-nano-30b-a3b").active_params());

  // Qwen3-Next: three layers in four are Gated DeltaNet, every fourth softmax attention with an
  // output gate and Q/K norms; 512 experts in every layer. Published: 80B total, 79B without the
  // embeddings, 3B active (model card).
  core::Issues qn;
  const ModelSpec next = load("qwen3next-80b-a3b-config.json", qn);
  for (const auto& l : qn.lines()) ADD_FAILURE() << l;
  EXPECT_EQ(next.num_linear_layers(), 36);
  EXPECT_EQ(next.num_attention_layers(), 12);
  EXPECT_EQ(next.layer_kind(3).mixer, model::Mixer::kAttention);
  EXPECT_EQ(next.layer_kind(4).mixer, model::Mixer::kLinear);
  EXPECT_TRUE(next.attn_output_gate);
  EXPECT_TRUE(next.qk_norm);
  EXPECT_EQ(next.linear.in_proj_width(), 2 * 2048 + 2 * 4096 + 2 * 32);
  EXPECT_NEAR(next.total_params() / 80e9, 1.0, 0.01);
  EXPECT_NEAR((next.total_params() - next.embedding_params() - 151936.0 * 2048.0) / 79e9, 1.0, 0.01);
  EXPECT_NEAR((next.active_params() - next.embedding_params() - 151936.0 * 2048.0) / 3e9, 1.0, 0.1);
  // Qwen3.5's multimodal file: the decoder (Qwen3-Next's layer scheme, attn_output_gate stated,
  // transformers 5's rope_parameters) under text_config beside a vision tower that is not
  // modelled. It equals the zoo entry built from the same shapes.
  core::Issues q35;
  const ModelSpec qwen35 = load("qwen3.5-35b-a3b-config.json", q35);
  for (const auto& l : q35.lines()) ADD_FAILURE() << l;
  EXPECT_EQ(qwen35.num_linear_layers(), 30);
  EXPECT_EQ(qwen35.num_attention_layers(), 10);
  EXPECT_TRUE(qwen35.attn_output_gate);
  EXPECT_TRUE(qwen35.qk_norm);
  EXPECT_EQ(qwen35.moe.num_experts, 256);
  EXPECT_DOUBLE_EQ(qwen35.total_params(), zoo_model("qwen3.5-35b-a3b").total_params());
  EXPECT_DOUBLE_EQ(qwen35.active_params(), zoo_model("qwen3.5-35b-a3b").active_params());
  // An attn_output_gate of false narrows q_proj to the queries alone.
  Json ungated = core::load_json_file(kDataDir + "/hf/qwen3.5-35b-a3b-config.json");
  ungated["text_config"]["attn_output_gate"] = false;
  core::Issues ug;
  const ModelSpec plain = parse_model(ungated, "$.model", ug, "");
  ASSERT_TRUE(ug.empty()) << ug.lines().front();
  EXPECT_FALSE(plain.attn_output_gate);
  EXPECT_NEAR(qwen35.total_params() - plain.total_params(), 10.0 * 2048 * 16 * 256, 1.0);
  // Linear-attention families stepcast does not cost stay refused with the reason.
  core::Issues refused;
  const Json minimax = {{"model_type", "minimax_m1"}, {"num_hidden_layers", 4}, {"hidden_size", 256}, {"num_attention_heads", 4},
                        {"intermediate_size", 512}, {"vocab_size", 1000}};
  parse_model(minimax, "$.model", refused, "");
  ASSERT_FALSE(refused.empty());
  EXPECT_NE(refused.lines().front().find("linear-attention"), std::string::npos) << refused.lines().front();
}

// Older families' published files, counted to the parameter: Pythia 1B (GPT-NeoX: biases on
// every linear layer, LayerNorm, untied embeddings; the Pythia suite's table: 1,011,781,632)
// and OPT 1.3B (ffn_dim, ReLU, learned positions with the two extra rows OPT offsets its
// positions by, biases, tied embeddings: 1,315,758,080 as the architecture adds up).
TEST(ModelParse, HubConfigsOfOlderFamiliesCountTheirParametersExactly) {
  core::Issues issues;
  const ModelSpec pythia = parse_model(Json{{"path", "hf/pythia-1b-config.json"}}, "$.model", issues, kDataDir);
  const ModelSpec opt = parse_model(Json{{"path", "hf/opt-1.3b-config.json"}}, "$.model", issues, kDataDir);
  for (const auto& l : issues.lines()) ADD_FAILURE() << l;
  ASSERT_TRUE(issues.empty());
  EXPECT_DOUBLE_EQ(pythia.total_params(), 1011781632.0);
  EXPECT_TRUE(pythia.linear_bias);
  EXPECT_EQ(pythia.norm, NormKind::kLayerNorm);
  EXPECT_EQ(pythia.position, PositionKind::kRotary);
  EXPECT_DOUBLE_EQ(opt.total_params(), 1315758080.0);
  EXPECT_EQ(opt.ffn_hidden, 8192);
  EXPECT_EQ(opt.mlp, MlpKind::kPlain);
  EXPECT_EQ(opt.position, PositionKind::kLearned);
  EXPECT_TRUE(opt.tied_embeddings);
  // OPT-350m's embedding projections are refused naming the key.
  core::Issues proj;
  Json opt350 = core::load_json_file(kDataDir + "/hf/opt-1.3b-config.json");
  opt350["word_embed_proj_dim"] = 512;
  (void)parse_model(opt350, "$.model", proj, "");
  ASSERT_EQ(proj.lines().size(), 1U);
  EXPECT_NE(proj.lines().front().find("$.model.word_embed_proj_dim: got 512, not hidden_size 2048"), std::string::npos)
      << proj.lines().front();
}

// transformers' PretrainedConfig wrote its generation defaults and serialization fields into
// the config.json of older releases; they cost nothing and load. The three of its settings that
// describe something other than a decoder-only model are refused naming the key when set.
TEST(ModelParse, HubConfigsKeepTransformersGenericKeys) {
  const Json base = core::load_json_file(kDataDir + "/hf/llama3.1-8b-config.json");
  Json full = base;
  const Json generic = {{"max_length", 20}, {"min_length", 0}, {"do_sample", false}, {"early_stopping", false},
                        {"num_beams", 1}, {"num_beam_groups", 1}, {"diversity_penalty", 0.0}, {"temperature", 1.0},
                        {"top_k", 50}, {"top_p", 1.0}, {"typical_p", 1.0}, {"repetition_penalty", 1.0},
                        {"length_penalty", 1.0}, {"no_repeat_ngram_size", 0}, {"encoder_no_repeat_ngram_size", 0},
                        {"bad_words_ids", nullptr}, {"num_return_sequences", 1}, {"output_scores", false},
                        {"return_dict_in_generate", false}, {"forced_bos_token_id", nullptr}, {"forced_eos_token_id", nullptr},
                        {"remove_invalid_values", false}, {"exponential_decay_length_penalty", nullptr},
                        {"suppress_tokens", nullptr}, {"begin_suppress_tokens", nullptr}, {"chunk_size_feed_forward", 0},
                        {"cross_attention_hidden_size", nullptr}, {"tf_legacy_loss", false}, {"gradient_checkpointing", false},
                        {"is_encoder_decoder", false}, {"add_cross_attention", false}, {"pruned_heads", Json::object()},
                        {"_from_model_config", true}, {"model_max_length", 131072}, {"hidden_dropout_prob", 0.1},
                        {"attention_probs_dropout_prob", 0.1}, {"clip_qkv", nullptr}};
  for (auto it = generic.begin(); it != generic.end(); ++it) full[it.key()] = it.value();
  core::Issues issues;
  const ModelSpec plain = parse_model(base, "$.model", issues, "");
  const ModelSpec loaded = parse_model(full, "$.model", issues, "");
  for (const auto& l : issues.lines()) ADD_FAILURE() << l;
  EXPECT_DOUBLE_EQ(loaded.total_params(), plain.total_params());

  const auto refused = [&](const char* key, const Json& value) {
    Json j = base;
    j[key] = value;
    core::Issues is;
    (void)parse_model(j, "$.model", is, "");
    return is.empty() ? std::string() : is.lines().front();
  };
  EXPECT_NE(refused("is_encoder_decoder", true).find("$.model.is_encoder_decoder: true: an encoder-decoder model"), std::string::npos)
      << refused("is_encoder_decoder", true);
  EXPECT_NE(refused("add_cross_attention", true).find("$.model.add_cross_attention"), std::string::npos);
  EXPECT_NE(refused("pruned_heads", Json{{"0", {1, 2}}}).find("$.model.pruned_heads"), std::string::npos);
  EXPECT_NE(refused("is_encoder_decoder", "yes").find("$.model.is_encoder_decoder"), std::string::npos);
  // A multimodal wrapper's own flags are checked too.
  Json wrapped = {{"model_type", "llava"}, {"text_config", base}, {"is_encoder_decoder", true}};
  core::Issues wi;
  (void)parse_model(wrapped, "$.model", wi, "");
  ASSERT_FALSE(wi.empty());
  EXPECT_NE(wi.lines().front().find("$.model.is_encoder_decoder"), std::string::npos) << wi.lines().front();
}

// Conventions of families whose files name less than they imply: StableLM's LayerNorm and
// use_qkv_bias, GPT-BigCode's single K/V head (multi_query), GPT-J's rotary positions under
// GPT-2 key names, OLMo 2's Q/K norms, GPT-NeoX's biases.
TEST(ModelParse, HubConfigsOfOtherFamiliesKeepTheirImpliedSettings) {
  const auto parse = [](const Json& j) {
    core::Issues is;
    ModelSpec m = parse_model(j, "$.model", is, "");
    for (const auto& l : is.lines()) ADD_FAILURE() << l;
    return m;
  };
  const Json stablelm = {{"model_type", "stablelm"}, {"hidden_size", 2560}, {"num_attention_heads", 32}, {"num_key_value_heads", 32},
                         {"num_hidden_layers", 32}, {"intermediate_size", 6912}, {"vocab_size", 50304}, {"hidden_act", "silu"},
                         {"use_qkv_bias", true}, {"qk_layernorm", false}, {"use_parallel_residual", false},
                         {"partial_rotary_factor", 0.25}, {"tie_word_embeddings", false}};
  const ModelSpec s = parse(stablelm);
  EXPECT_EQ(s.norm, NormKind::kLayerNorm);
  EXPECT_TRUE(s.qkv_bias);
  EXPECT_FALSE(s.linear_bias);
  Json conflicting = stablelm;
  conflicting["qkv_bias"] = false;
  core::Issues ci;
  (void)parse_model(conflicting, "$.model", ci, "");
  ASSERT_FALSE(ci.empty());
  EXPECT_NE(ci.lines().front().find("conflicts with"), std::string::npos) << ci.lines().front();

  Json bigcode = {{"model_type", "gpt_bigcode"}, {"n_embd", 6144}, {"n_head", 48}, {"n_layer", 40}, {"n_inner", 24576},
                  {"n_positions", 8192}, {"vocab_size", 49152}, {"activation_function", "gelu_pytorch_tanh"},
                  {"multi_query", true}, {"scale_attention_softmax_in_fp32", true}, {"pre_allocate_kv_cache", false}};
  EXPECT_EQ(parse(bigcode).kv_heads, 1);
  bigcode["multi_query"] = false;
  EXPECT_EQ(parse(bigcode).kv_heads, 48);

  const Json gptj = {{"model_type", "gptj"}, {"n_embd", 4096}, {"n_head", 16}, {"n_layer", 28}, {"n_inner", nullptr},
                     {"n_positions", 2048}, {"rotary", true}, {"rotary_dim", 64}, {"vocab_size", 50400},
                     {"activation_function", "gelu_new"}, {"tie_word_embeddings", false}, {"gradient_checkpointing", false}};
  const ModelSpec j = parse(gptj);
  EXPECT_EQ(j.position, PositionKind::kRotary);
  EXPECT_EQ(j.ffn_hidden, 4 * 4096);

  const Json olmo2 = {{"model_type", "olmo2"}, {"hidden_size", 4096}, {"num_attention_heads", 32}, {"num_hidden_layers", 32},
                      {"intermediate_size", 11008}, {"vocab_size", 100352}, {"hidden_act", "silu"}};
  EXPECT_TRUE(parse(olmo2).qk_norm);
  const Json neox = {{"model_type", "gpt_neox"}, {"hidden_size", 512}, {"num_attention_heads", 8}, {"num_hidden_layers", 6},
                     {"intermediate_size", 2048}, {"vocab_size", 50304}, {"hidden_act", "gelu"}};
  EXPECT_TRUE(parse(neox).linear_bias);

  // GLM-4 9B in THUDM's ChatGLM form (padded_vocab_size, kv_channels, multi_query_group_num,
  // add_qkv_bias, rmsnorm; a SwiGLU MLP of ffn_hidden_size): 9.4B, to the parameter as the
  // architecture adds up (40 x 203,960,832 + 2 x 151,552 x 4,096 + 4,096).
  const Json glm4 = {{"model_type", "chatglm"}, {"hidden_size", 4096}, {"num_layers", 40}, {"num_attention_heads", 32},
                     {"kv_channels", 128}, {"multi_query_attention", true}, {"multi_query_group_num", 2},
                     {"ffn_hidden_size", 13696}, {"padded_vocab_size", 151552}, {"seq_length", 8192}, {"add_bias_linear", false},
                     {"add_qkv_bias", true}, {"rmsnorm", true}, {"post_layer_norm", true}, {"original_rope", true},
                     {"rope_ratio", 500}, {"apply_query_key_layer_scaling", true}, {"fp32_residual_connection", false},
                     {"layernorm_epsilon", 1.5625e-07}, {"tie_word_embeddings", false}};
  const ModelSpec g = parse(glm4);
  EXPECT_EQ(g.kv_heads, 2);
  EXPECT_EQ(g.head_dim, 128);
  EXPECT_EQ(g.vocab, 151552);
  EXPECT_TRUE(g.qkv_bias);
  EXPECT_FALSE(g.linear_bias);
  EXPECT_EQ(g.mlp, MlpKind::kGated);
  EXPECT_DOUBLE_EQ(g.total_params(), 9399951360.0);
  Json no_groups = glm4;
  no_groups.erase("multi_query_group_num");
  core::Issues gi;
  (void)parse_model(no_groups, "$.model", gi, "");
  ASSERT_FALSE(gi.empty());
  EXPECT_NE(gi.lines().front().find("$.model.multi_query_group_num"), std::string::npos) << gi.lines().front();

  // GPT-Neo 1.3B (EleutherAI/gpt-neo-1.3B's keys): local attention over 256 tokens in every
  // other layer, a 4h MLP under intermediate_size null, learned positions, biases everywhere
  // but on q, k and v: 1,315,575,808 parameters, as transformers counts them.
  Json neo = {{"model_type", "gpt_neo"}, {"hidden_size", 2048}, {"num_heads", 16}, {"num_layers", 24},
              {"intermediate_size", nullptr}, {"max_position_embeddings", 2048}, {"vocab_size", 50257},
              {"activation_function", "gelu_new"}, {"window_size", 256}, {"embed_dropout", 0}, {"resid_dropout", 0},
              {"attention_types", Json::array({Json::array({Json::array({"global", "local"}), 12})})}};
  const ModelSpec n = parse(neo);
  EXPECT_EQ(n.ffn_hidden, 8192);
  EXPECT_EQ(n.sliding_window, 256);
  EXPECT_DOUBLE_EQ(n.sliding_layer_fraction, 0.5);
  EXPECT_EQ(n.position, PositionKind::kLearned);
  EXPECT_DOUBLE_EQ(n.total_params(), 1315575808.0);
  Json listed = neo;
  listed.erase("attention_types");
  listed["attention_layers"] = Json::array();
  for (int l = 0; l < 24; ++l) listed["attention_layers"].push_back(l < 18 ? "global" : "local");
  EXPECT_DOUBLE_EQ(parse(listed).sliding_layer_fraction, 0.25);
  listed["attention_layers"].erase(0);
  core::Issues short_list;
  (void)parse_model(listed, "$.model", short_list, "");
  ASSERT_FALSE(short_list.empty());
  EXPECT_NE(short_list.lines().front().find("$.model.attention_layers: names 23 layers; the model has 24"), std::string::npos)
      << short_list.lines().front();
}

// `stepcast models MODEL --json`: what was read, with counts that add up to the total.
TEST(ModelDescribe, NamesTheShapesAndPartsThatAddUpToTheTotal) {
  for (const char* name : {"llama3.1-8b", "deepseek-v3", "nemotron-h-8b", "qwen3-next-80b-a3b", "gpt2-124m"}) {
    const ModelSpec m = zoo_model(name);
    const Json d = describe_model(m);
    int64_t layers = 0;
    double sum = d["params"]["embedding"].get<double>() + d["params"]["output"].get<double>();
    for (int64_t l = 0; l < m.num_layers; ++l) {
      const Json& k = d["params"]["per_layer_kind"][m.layer_kind(l).label()];
      sum += k["mixer"].get<double>() + k["ffn"].get<double>();
    }
    for (auto it = d["layer_kinds"].begin(); it != d["layer_kinds"].end(); ++it) layers += it.value().get<int64_t>();
    EXPECT_EQ(layers, m.num_layers) << name;
    EXPECT_NEAR(sum / d["params"]["total"].get<double>(), 1.0, 1e-12) << name;
    EXPECT_DOUBLE_EQ(d["params"]["active"].get<double>(), m.active_params()) << name;
  }
  const Json ds = describe_model(zoo_model("deepseek-v3"));
  EXPECT_EQ(ds["moe"]["experts"], 256);
  EXPECT_EQ(ds["moe"]["moe_layers"], 58);
  EXPECT_EQ(ds["attention"]["mla"]["kv_lora_rank"], 512);
  EXPECT_EQ(ds["layer_kinds"]["attention+moe"], 58);
  const Json gpt2 = describe_model(zoo_model("gpt2-124m"));
  EXPECT_EQ(gpt2["position_embedding"], "learned");
  EXPECT_EQ(gpt2["norm"], "layernorm");
  EXPECT_TRUE(gpt2["tied_embeddings"].get<bool>());
  EXPECT_FALSE(gpt2.contains("moe"));
  core::Issues issues;
  const Json gemma = describe_model(parse_model(Json{{"path", "hf/gemma2-9b-config.json"}}, "$.model", issues, kDataDir));
  ASSERT_TRUE(issues.empty());
  EXPECT_EQ(gemma["attention"]["local"]["window"], 4096);
  EXPECT_DOUBLE_EQ(gemma["attention"]["local"]["layer_fraction"].get<double>(), 0.5);
}

// DeepSeek-V3: the first 3 layers are dense (first_k_dense_replace), the remaining 58 are MoE.
TEST(ModelParse, DeepSeekDenseLeadingLayers) {
  const ModelSpec m = zoo_model("deepseek-v3");
  EXPECT_FALSE(m.is_moe_layer(0));
  EXPECT_FALSE(m.is_moe_layer(2));
  EXPECT_TRUE(m.is_moe_layer(3));
  EXPECT_EQ(m.num_moe_layers(), 58);
  EXPECT_TRUE(m.mla.enabled());
}

// Parallel blocks and the biases their families leave out, counted to the parameter against
// the hub files' totals: GPT-J 6B (one LayerNorm per block, no attention biases, MLP biases, a
// biased untied head: 6,050,882,784), Phi-2 (one LayerNorm per block, biases everywhere, a
// biased untied head: 2,779,683,840) and Falcon 7B (one LayerNorm per parallel block, no
// biases, one K/V head, tied embeddings: 6,921,720,704). Falcon's new decoder architecture
// keeps two norms per block (ln_attn, ln_mlp).
TEST(ModelParse, ParallelBlocksShareTheirNormAndFamiliesDropTheirBiases) {
  auto parse = [](const Json& j) {
    core::Issues issues;
    ModelSpec m = parse_model(j, "$.model", issues, "");
    for (const auto& l : issues.lines()) ADD_FAILURE() << l;
    return m;
  };
  const Json gptj = {{"model_type", "gptj"}, {"architectures", {"GPTJForCausalLM"}}, {"activation_function", "gelu_new"},
                     {"n_embd", 4096}, {"n_head", 16}, {"n_inner", nullptr}, {"n_layer", 28}, {"n_positions", 2048},
                     {"rotary", true}, {"rotary_dim", 64}, {"tie_word_embeddings", false}, {"vocab_size", 50400},
                     {"attn_pdrop", 0.0}, {"embd_pdrop", 0.0}, {"resid_pdrop", 0.0}, {"layer_norm_epsilon", 1e-05},
                     {"bos_token_id", 50256}, {"eos_token_id", 50256}, {"torch_dtype", "float32"}};
  const ModelSpec j = parse(gptj);
  EXPECT_DOUBLE_EQ(j.total_params(), 6050882784.0);
  EXPECT_TRUE(j.shared_block_norm);
  EXPECT_TRUE(j.head_bias);
  const Json phi2 = {{"model_type", "phi"}, {"architectures", {"PhiForCausalLM"}}, {"hidden_act", "gelu_new"},
                     {"hidden_size", 2560}, {"intermediate_size", 10240}, {"max_position_embeddings", 2048},
                     {"num_attention_heads", 32}, {"num_hidden_layers", 32}, {"num_key_value_heads", 32},
                     {"partial_rotary_factor", 0.4}, {"qk_layernorm", false}, {"rope_scaling", nullptr},
                     {"rope_theta", 10000.0}, {"tie_word_embeddings", false}, {"vocab_size", 51200},
                     {"layer_norm_eps", 1e-05}, {"resid_pdrop", 0.1}, {"embd_pdrop", 0.0}, {"attention_dropout", 0.0}};
  EXPECT_DOUBLE_EQ(parse(phi2).total_params(), 2779683840.0);
  Json falcon = {{"model_type", "falcon"}, {"architectures", {"FalconForCausalLM"}}, {"alibi", false}, {"bias", false},
                 {"hidden_size", 4544}, {"multi_query", true}, {"new_decoder_architecture", false},
                 {"num_attention_heads", 71}, {"num_hidden_layers", 32}, {"parallel_attn", true}, {"vocab_size", 65024},
                 {"apply_residual_connection_post_layernorm", false}, {"layer_norm_epsilon", 1e-05},
                 {"hidden_dropout", 0.0}, {"attention_dropout", 0.0}};
  const ModelSpec f = parse(falcon);
  EXPECT_DOUBLE_EQ(f.total_params(), 6921720704.0);
  EXPECT_TRUE(f.shared_block_norm);
  // The same blocks run sequentially (parallel_attn false), or under the new decoder
  // architecture with its two norms, count a second LayerNorm per layer.
  const double one_norm_per_layer = 32.0 * 2 * 4544;
  falcon["parallel_attn"] = false;
  EXPECT_DOUBLE_EQ(parse(falcon).total_params(), 6921720704.0 + one_norm_per_layer);
  falcon["parallel_attn"] = true;
  falcon["new_decoder_architecture"] = true;
  falcon["num_kv_heads"] = 1;
  EXPECT_DOUBLE_EQ(parse(falcon).total_params(), 6921720704.0 + one_norm_per_layer);
  falcon["num_ln_in_parallel_attn"] = 1;
  EXPECT_DOUBLE_EQ(parse(falcon).total_params(), 6921720704.0);
}

}  // namespace
}  // namespace stepcast::model
