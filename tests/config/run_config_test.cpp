// Run files: derived quantities (dp, micro-batches, stage split, padded vocabulary) are computed
// once, the example configs load, and hardware overrides merge onto a built-in profile.
#include "sim/config/run_config.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>

#include "sim/core/error.hpp"
#include "sim/core/journal.hpp"
#include "sim/core/json_reader.hpp"

#ifndef STEPCAST_SOURCE_DIR
#error "STEPCAST_SOURCE_DIR comes from stepcast::model"
#endif

namespace stepcast::config {
namespace {

using core::Json;

RunConfig parse(const std::string& text) { return parse_run(Json::parse(text), "<test>", ""); }

// dp is derived as world / (tp*cp*pp) when omitted; micro-batches per step = B / (dp * mbs).
TEST(RunConfig, DerivesDpAndMicroBatches) {
  const RunConfig rc = parse(R"({
    "model": "llama3.1-8b", "hardware": "h100-sxm",
    "cluster": {"num_gpus": 64},
    "training": {"seq_len": 4096, "global_batch_size": 256},
    "parallel": {"tp": 4, "pp": 2, "micro_batch_size": 2}})");
  EXPECT_EQ(rc.parallel.dp, 8);
  EXPECT_EQ(rc.num_microbatches, 256 / (8 * 2));
  EXPECT_EQ(rc.cluster.gpus_per_node, 8);  // from the hardware profile
  EXPECT_EQ(rc.cluster.num_nodes(), 8);
  EXPECT_EQ(rc.tokens_per_step(), 256 * 4096);
  EXPECT_EQ(rc.micro_batch_tokens(), 2 * 4096);
  ASSERT_EQ(rc.stage_layers.size(), 2u);
  EXPECT_EQ(rc.stage_layers[0], 16);
  EXPECT_EQ(rc.stage_layers[1], 16);
  EXPECT_EQ(rc.chunk_first_layer(1, 0), 16);
  EXPECT_EQ(rc.parallel.etp, rc.parallel.tp);  // etp defaults to tp
}

// Transformer Engine's cp_comm_type names map onto stepcast's context-parallel variants; an
// unknown name is an error that lists the allowed ones.
TEST(RunConfig, ContextParallelCommunicationAcceptsTransformerEngineNames) {
  auto with = [](const std::string& v) {
    return parse(R"({"model": "llama3.1-8b", "hardware": "h100-sxm", "cluster": {"num_gpus": 8},
      "training": {"seq_len": 8192, "global_batch_size": 8},
      "parallel": {"cp": 2, "micro_batch_size": 1, "cp_comm": ")" + v + R"("}})");
  };
  EXPECT_EQ(with("p2p").parallel.cp_comm, CpComm::kRing);
  EXPECT_EQ(with("all_gather").parallel.cp_comm, CpComm::kAllGather);
  EXPECT_EQ(with("a2a").parallel.cp_comm, CpComm::kUlysses);
  EXPECT_EQ(with("rotate-allgather").parallel.cp_comm, CpComm::kRotateAllGather);
  try {
    (void)with("a2a+p2p");
    FAIL() << "hierarchical a2a+p2p is not modelled and must be refused";
  } catch (const core::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("$.parallel.cp_comm"), std::string::npos) << e.what();
  }
}

// Megatron pads the vocabulary to a multiple of 128*tp so the output layer splits evenly.
TEST(RunConfig, PadsVocabularyToMultipleOf128Tp) {
  const RunConfig rc = parse(R"({
    "model": "gpt2-124m", "hardware": "h100-sxm",
    "cluster": {"num_gpus": 8},
    "training": {"seq_len": 1024, "global_batch_size": 8},
    "parallel": {"tp": 4}})");
  EXPECT_EQ(rc.padded_vocab % (128 * 4), 0);
  EXPECT_GE(rc.padded_vocab, 50257);
  EXPECT_LT(rc.padded_vocab - 50257, 128 * 4);
  EXPECT_EQ(rc.padded_vocab, 50688);
}

// An uneven pipeline split gives the named first/last stages their counts and splits the rest.
TEST(RunConfig, UnevenPipelineSplit) {
  const RunConfig rc = load_run_file(std::string(STEPCAST_SOURCE_DIR) + "/configs/examples/llama3.1-405b-h100x16384.json");
  ASSERT_EQ(rc.stage_layers.size(), 16u);
  EXPECT_EQ(rc.stage_layers.front(), 7);
  EXPECT_EQ(rc.stage_layers.back(), 7);
  for (size_t s = 1; s + 1 < rc.stage_layers.size(); ++s) EXPECT_EQ(rc.stage_layers[s], 8) << s;
  EXPECT_EQ(std::accumulate(rc.stage_layers.begin(), rc.stage_layers.end(), int64_t{0}), 126);
  EXPECT_EQ(rc.chunk_first_layer(15, 0), 126 - 7);
}

// With virtual stages, chunk c of stage s is virtual stage c*pp + s: its layers follow those
// of virtual stage c*pp + s - 1. Megatron's first/last stage counts split evenly over a
// stage's chunks; a per-virtual-stage list (torchtitan's split points) gives any split.
TEST(RunConfig, VirtualStageSplits) {
  const std::string base = R"({"model": "llama3.1-8b", "hardware": "h100-sxm", "cluster": {"num_gpus": 8},
    "training": {"seq_len": 4096, "global_batch_size": 16}, "parallel": {"pp": 4, "vpp": 2, )";
  // Even: 32 layers over 8 virtual stages of 4.
  RunConfig rc = parse(base + "\"schedule\": \"interleaved\"}}");
  EXPECT_EQ(rc.stage_layers, (std::vector<int64_t>{8, 8, 8, 8}));
  EXPECT_EQ(rc.stage_layer_ids(1), (std::vector<int64_t>{4, 5, 6, 7, 20, 21, 22, 23}));
  // Megatron: stage 0 and stage 3 hold 6 layers (3 per chunk), stages 1 and 2 hold 10 (5 each).
  rc = parse(base + "\"first_stage_layers\": 6, \"last_stage_layers\": 6}}");
  EXPECT_EQ(rc.vstage_layers, (std::vector<int64_t>{3, 5, 5, 3, 3, 5, 5, 3}));
  EXPECT_EQ(rc.stage_layer_ids(0), (std::vector<int64_t>{0, 1, 2, 16, 17, 18}));
  // An explicit list: the first and last virtual stages one layer short.
  rc = parse(base + "\"stage_layers\": [3, 4, 4, 4, 4, 4, 4, 5]}}");
  EXPECT_EQ(rc.stage_layers, (std::vector<int64_t>{7, 8, 8, 9}));
  EXPECT_EQ(rc.stage_layer_ids(3), (std::vector<int64_t>{11, 12, 13, 14, 27, 28, 29, 30, 31}));
}

// Megatron's account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split:
// 30 layers + 2 slots over 8 virtual stages of 4 slots; the first gives one to the embedding,
// the last one to the loss. With one slot per virtual stage the ends hold no layer at all, and
// an explicit list may leave the first or last virtual stage without layers too.
TEST(RunConfig, EmbeddingAndLossSlots) {
  const std::string base = R"({"model": {"hidden_size": 1024, "num_attention_heads": 8, "num_hidden_layers": 30,
    "intermediate_size": 4096, "vocab_size": 32000, "hidden_act": "silu"}, "hardware": "h100-sxm", "cluster": {"num_gpus": 8},
    "training": {"seq_len": 4096, "global_batch_size": 16}, "parallel": {"pp": 4, "vpp": 2, )";
  RunConfig rc = parse(base + R"("account_for_embedding_in_pipeline_split": true, "account_for_loss_in_pipeline_split": true}})");
  EXPECT_EQ(rc.vstage_layers, (std::vector<int64_t>{3, 4, 4, 4, 4, 4, 4, 3}));
  EXPECT_EQ(rc.stage_layers, (std::vector<int64_t>{7, 8, 8, 7}));
  EXPECT_EQ(config::slot_stage_layers(32, 34, true, true), (std::vector<int64_t>{0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                                                                   1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0}));
  EXPECT_EQ(config::slot_stage_layers(31, 8, false, true), (std::vector<int64_t>{4, 4, 4, 4, 4, 4, 4, 3}));
  EXPECT_TRUE(config::slot_stage_layers(32, 8, true, true).empty());
  rc = parse(base + R"("stage_layers": [0, 5, 5, 5, 5, 5, 5, 0]}})");
  EXPECT_EQ(rc.stage_layers, (std::vector<int64_t>{5, 10, 10, 5}));
  EXPECT_EQ(rc.stage_layer_ids(0).front(), 15);  // chunk 1 of stage 0 starts after virtual stages 0-3
}

// recompute_layers N: the first N layers of every virtual stage are recomputed (Megatron's block
// method); the others keep their activations. Megatron's uneven split puts 3 and 5 layers in
// the chunks, so N = 4 covers the short chunks whole and the long ones but their last layer.
TEST(RunConfig, RecomputeLayersCoverTheFirstLayersOfEachVirtualStage) {
  const std::string base = R"({"model": "llama3.1-8b", "hardware": "h100-sxm", "cluster": {"num_gpus": 8},
    "training": {"seq_len": 4096, "global_batch_size": 16}, "parallel": {"pp": 4, "vpp": 2, "recompute": "full", )";
  RunConfig rc = parse(base + "\"first_stage_layers\": 6, \"last_stage_layers\": 6, \"recompute_layers\": 4}}");
  EXPECT_TRUE(rc.partial_recompute());
  std::vector<int64_t> kept;
  for (int64_t l = 0; l < 32; ++l) {
    if (!rc.full_recompute_layer(l)) kept.push_back(l);
  }
  // Virtual stages 1, 2, 5, 6 hold layers 3-7, 8-12, 19-23, 24-28.
  EXPECT_EQ(kept, (std::vector<int64_t>{7, 12, 23, 28}));
  // As many as the longest chunk: every layer, as recompute full without a count.
  rc = parse(base + "\"first_stage_layers\": 6, \"last_stage_layers\": 6, \"recompute_layers\": 5}}");
  EXPECT_FALSE(rc.partial_recompute());
  for (int64_t l = 0; l < 32; ++l) EXPECT_TRUE(rc.full_recompute_layer(l));
}

// --set: dotted PATH=VALUE settings over a run file, JSON values or plain strings; a path
// through a value that is not an object, or a malformed setting, is one error naming it.
TEST(RunConfig, OverridesFromTheCommandLine) {
  const std::string f = std::string(STEPCAST_SOURCE_DIR) + "/configs/examples/llama3.1-8b-h100x8.json";
  const RunConfig rc = load_run_file(f, {"parallel.tp=2", "training.precision=fp8", "parallel.recompute=\"full\""});
  EXPECT_EQ(rc.parallel.tp, 2);
  EXPECT_EQ(rc.training.precision, hw::Dtype::kFp8);
  EXPECT_EQ(rc.parallel.recompute, Recompute::kFull);
  try {
    load_run_file(f, {"model.hidden_size=5"});
    ADD_FAILURE() << "no error";
  } catch (const core::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("$.model is \"llama3.1-8b\", not an object"), std::string::npos) << e.what();
  }
  for (const char* bad : {"parallel.tp", "=4", "parallel..tp=4", ".tp=4"}) {
    try {
      load_run_file(f, {bad});
      ADD_FAILURE() << bad;
    } catch (const core::UserError& e) {
      EXPECT_NE(std::string(e.what()).find("expected PATH=VALUE"), std::string::npos) << e.what();
    }
  }
  // An unknown field set this way is the validator's usual error.
  EXPECT_THROW(load_run_file(f, {"parallel.tpp=2"}), core::ConfigError);
}

// Every shipped example run file parses and validates.
TEST(RunConfig, ExampleConfigsLoad) {
  for (const char* f : {"gpt3-175b-h100x1024.json", "llama3.1-405b-h100x16384.json", "llama3.1-8b-h100x8.json"}) {
    SCOPED_TRACE(f);
    EXPECT_NO_THROW(load_run_file(std::string(STEPCAST_SOURCE_DIR) + "/configs/examples/" + f));
  }
}

// vpp > 1 without an explicit schedule selects the interleaved schedule.
TEST(RunConfig, VppImpliesInterleaved) {
  const RunConfig rc = load_run_file(std::string(STEPCAST_SOURCE_DIR) + "/configs/examples/gpt3-175b-h100x1024.json");
  EXPECT_EQ(rc.parallel.schedule, Schedule::kInterleaved);
  EXPECT_EQ(rc.parallel.vpp, 12);
}

// A hardware object {"base": NAME, ...} merges its overrides onto the built-in profile.
TEST(RunConfig, HardwareOverrideMergesOntoBase) {
  const RunConfig rc = parse(R"({
    "model": "llama3.1-8b",
    "hardware": {"base": "h100-sxm", "gpu": {"memory": "94GB"}},
    "cluster": {"num_gpus": 8},
    "training": {"seq_len": 4096, "global_batch_size": 8}})");
  EXPECT_DOUBLE_EQ(rc.hardware.hbm_capacity.value(), 94e9);
  EXPECT_DOUBLE_EQ(rc.hardware.peak_for(hw::Dtype::kBf16).value(), 989.4e12);  // kept from base
  EXPECT_DOUBLE_EQ(rc.hardware.tdp_watts, 700.0);  // board power, kept from base
}

// A profile file may hold the same {"base": NAME, ...} form (a run file's {"path": ...}, or
// --hardware FILE); a file pointing to another file is refused, naming the field.
TEST(RunConfig, HardwareFileMayChangeABuiltInProfile) {
  const auto dir = std::filesystem::temp_directory_path() / "stepcast-hw-file-test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "slow-net.json") << R"({"base": "h100-sxm", "name": "h100-slow-net", "network": {"nic_bandwidth": "100Gb/s"}})";
  std::ofstream(dir / "chain.json") << R"({"path": "slow-net.json"})";
  const std::string run = R"({"model": "llama3.1-8b", "hardware": {"path": "slow-net.json"}, "cluster": {"num_gpus": 16},
                             "training": {"seq_len": 4096, "global_batch_size": 16}})";
  const RunConfig rc = parse_run(Json::parse(run), "<test>", dir.string());
  EXPECT_EQ(rc.hardware.name, "h100-slow-net");
  // A quarter of the base's 400 Gb/s NICs (the profile's NIC efficiency applies to both).
  EXPECT_DOUBLE_EQ(rc.hardware.nic_bandwidth_per_gpu().value(), hw::builtin_hardware("h100-sxm").nic_bandwidth_per_gpu().value() / 4.0);
  EXPECT_DOUBLE_EQ(rc.hardware.peak_for(hw::Dtype::kBf16).value(), 989.4e12);  // kept from base
  Json chained = Json::parse(run);
  chained["hardware"]["path"] = "chain.json";
  try {
    (void)parse_run(chained, "<test>", dir.string());
    FAIL() << "a profile file pointing to another was accepted";
  } catch (const core::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("$.hardware.path"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not another"), std::string::npos) << e.what();
  }
}

// Megatron's pipeline_model_parallel_layout: the string form with nested repeats and the list
// form give the same virtual stages; the embedding sits on the first, the MTP layer and the
// loss on the last ("Et|(tt|)*30mL", the DeepSeek-V3 H100 benchmark's layout on pp 8 x vpp 4).
TEST(RunConfig, PipelineLayout) {
  Json j = Json::parse(R"({"model": "deepseek-v3", "hardware": "h100-sxm", "cluster": {"num_gpus": 1024},
    "training": {"seq_len": 4096, "global_batch_size": 8192, "mtp_layers": 1},
    "parallel": {"tp": 2, "pp": 8, "vpp": 4, "ep": 64, "sp": true, "pipeline_layout": "Et|(tt|)*30mL"}})");
  RunConfig rc = parse_run(j, "<test>", "");
  ASSERT_EQ(rc.vstage_layers.size(), 32u);
  EXPECT_EQ(rc.vstage_layers.front(), 1);
  EXPECT_EQ(rc.vstage_layers[1], 2);
  EXPECT_EQ(rc.vstage_layers.back(), 0);
  EXPECT_EQ(rc.stage_layers.front(), 7);
  EXPECT_EQ(rc.stage_layers.back(), 6);
  Json list = Json::array({Json::array({"embedding", "decoder"})});
  for (int v = 0; v < 30; ++v) list.push_back(Json::array({"decoder", "decoder"}));
  list.push_back(Json::array({"mtp", "loss"}));
  j["parallel"]["pipeline_layout"] = list;
  EXPECT_EQ(parse_run(j, "<test>", "").vstage_layers, rc.vstage_layers);
  // Nested groups and spaces: ((t*2|)*2)*15 is the same 30 stages of two layers.
  j["parallel"]["pipeline_layout"] = "E t | ((t*2|)*2)*15 m L";
  EXPECT_EQ(parse_run(j, "<test>", "").vstage_layers, rc.vstage_layers);
  EXPECT_EQ(parse_pipeline_layout(Json("Et*4|(t*4|)*14tmL")).stages.size(), 16u);
  EXPECT_EQ(parse_pipeline_layout(Json("Et*4|(t*4|)*14tmL")).stages.back(), "tmL");
  // Commas separate for reading; a last stage may hold the loss alone.
  EXPECT_EQ(parse_pipeline_layout(Json("Et|(tt|)*30,L")).stages, parse_pipeline_layout(Json("Et|(tt|)*30L")).stages);
  EXPECT_EQ(parse_pipeline_layout(Json("Et*3|(tt|)*29|L")).stages.back(), "L");
  // Deep nesting and huge repeats are refused, not expanded.
  EXPECT_NE(parse_pipeline_layout(Json(std::string(100000, '(') + "t")).error.find("deeper than 32"), std::string::npos);
  EXPECT_NE(parse_pipeline_layout(Json("t*99999999999999999999999")).error.find("more than"), std::string::npos);
}

// with_referenced_files inlines the model and profile files a run refers to, so a digest of
// it (validate --resume's plan key) changes with them; an unreadable reference stays as given.
TEST(RunConfig, ReferencedFilesInlined) {
  const auto dir = std::filesystem::temp_directory_path() / "stepcast-referenced-files-test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "m.json") << R"({"hidden_size": 1024, "num_attention_heads": 8, "num_hidden_layers": 4, "vocab_size": 32000})";
  const Json run = Json::parse(R"({"model": {"path": "m.json"}, "hardware": {"path": "missing.json"}, "cluster": {"num_gpus": 8}})");
  const Json a = with_referenced_files(run, dir.string());
  EXPECT_EQ(a["model"]["content"]["num_hidden_layers"], 4);
  EXPECT_EQ(a["hardware"], run["hardware"]);
  EXPECT_EQ(a["cluster"], run["cluster"]);
  std::ofstream(dir / "m.json") << R"({"hidden_size": 1024, "num_attention_heads": 8, "num_hidden_layers": 8, "vocab_size": 32000})";
  EXPECT_NE(core::digest(with_referenced_files(run, dir.string()).dump()), core::digest(a.dump()));
  EXPECT_EQ(with_referenced_files(Json::parse(R"({"model": "llama3.1-8b"})"), dir.string()), Json::parse(R"({"model": "llama3.1-8b"})"));
}

// The 16-byte convention (fp32 master) is the default; master_weights=false gives 12 bytes.
TEST(RunConfig, TrainingDefaults) {
  const RunConfig rc = parse(R"({
    "model": "llama3.1-8b", "hardware": "h100-sxm",
    "cluster": {"num_gpus": 8},
    "training": {"seq_len": 4096, "global_batch_size": 8}})");
  EXPECT_EQ(rc.training.precision, hw::Dtype::kBf16);
  EXPECT_EQ(rc.training.grad_dtype, hw::Dtype::kBf16);
  EXPECT_TRUE(rc.training.master_weights);
  EXPECT_EQ(rc.training.attention, AttentionImpl::kFlash);
  EXPECT_EQ(rc.parallel.schedule, Schedule::kOneFOneB);
}

}  // namespace
}  // namespace stepcast::config
