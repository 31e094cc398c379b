// Published rows become run files: the model is the zoo member whose dimensions match the
// row, whatever its size (not one member per family), and a row whose dimensions no member has
// gets the nearest member's architecture with its own dimensions.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "sim/accuracy/published.hpp"
#include "sim/config/run_config.hpp"
#include "sim/estimate/estimate.hpp"
#include "sim/memory/ledger.hpp"

namespace stepcast::accuracy {
namespace {

using core::Json;

// A NeMo-style H100 row; each test sets the model fields.
Json base_row() {
  return Json{{"id", "test-row"},          {"row_type", "training_run"}, {"source", "test"},
              {"gpu_type", "H100 SXM 80GB"}, {"num_gpus", 64},             {"gpus_per_node", 8},
              {"framework", "NeMo 24.11 (Megatron-Core)"}, {"precision", "BF16"}, {"tp", 8},
              {"pp", 4},                      {"seq_len", 4096},            {"micro_batch", 1},
              {"global_batch_seqs", 64},      {"iteration_time_s", 10.0}};
}

// The accuracy harness over these rows, written as a JSON-lines file under the test's temp dir.
AccuracyResult accuracy_of(const std::vector<Json>& rows, const std::string& name) {
  const std::string path = ::testing::TempDir() + "/" + name;
  {
    std::ofstream f(path);
    for (const auto& r : rows) f << r.dump() << "\n";
  }
  AccuracyOptions o;
  o.data_path = path;
  return run_accuracy(o);
}

Json converted(const Json& row) {
  Json run;
  std::string reason;
  EXPECT_TRUE(row_to_run(row, run, reason)) << reason;
  return run;
}

// A row whose recipe states its gradient dtype (NeMo's optim.grad_sync_dtype) keeps and
// reduces its gradients in it over the framework's default (fp32 main grads for NeMo), and a
// dtype stepcast has no reduction mode for is refused naming the field.
TEST(PublishedRows, StatedGradientDtypeReplacesTheFrameworkDefault) {
  Json r = base_row();
  r.update(Json{{"model", "Nemotron-4 340B"}, {"layers", 96}, {"hidden", 18432}, {"heads", 96}});
  EXPECT_EQ(converted(r)["training"]["grad_dtype"], "fp32");
  r["grad_reduce_dtype"] = "BF16";
  const Json run = converted(r);
  EXPECT_EQ(run["training"]["grad_dtype"], "bf16");
  bool noted = false;
  for (const auto& a : run["assumptions"]) noted = noted || a.get<std::string>().find("reduced in bf16 (the row's recipe states it") != std::string::npos;
  EXPECT_TRUE(noted);
  r["grad_reduce_dtype"] = "fp64";
  Json out;
  std::string reason;
  EXPECT_FALSE(row_to_run(r, out, reason));
  EXPECT_NE(reason.find("grad_reduce_dtype"), std::string::npos) << reason;
}

TEST(PublishedRows, ZooMemberMatchingTheRowsDimensions) {
  Json r = base_row();
  r.update(Json{{"model", "Llama 2 70B"}, {"layers", 80}, {"hidden", 8192}, {"heads", 64}, {"kv_heads", 8}, {"vocab", 32000}});
  EXPECT_EQ(converted(r)["model"], "llama2-70b");
  r.update(Json{{"model", "Llama 3.1 70B"}, {"vocab", 128256}});
  EXPECT_EQ(converted(r)["model"], "llama3.1-70b");
  r = base_row();
  r.update(Json{{"model", "Nemotron-4 340B"}, {"layers", 96}, {"hidden", 18432}, {"heads", 96}});
  EXPECT_EQ(converted(r)["model"], "nemotron4-340b");
  r = base_row();
  r.update(Json{{"model", "Qwen3-235B-A22B"}, {"layers", 94}, {"hidden", 4096}, {"moe_experts", 128}, {"moe_topk", 8}, {"ep", 8}});
  EXPECT_EQ(converted(r)["model"], "qwen3-235b-a22b");
  r = base_row();
  r.update(Json{{"model", "Mixtral 8x7B"}, {"layers", 32}, {"hidden", 4096}, {"moe_experts", 8}, {"moe_topk", 2}, {"ep", 8}, {"tp", 1}});
  const Json run = converted(r);
  EXPECT_EQ(run["model"], "mixtral-8x7b");
  EXPECT_TRUE(run["parallel"].contains("moe"));
}

TEST(PublishedRows, NearestMemberByParametersWithoutDimensions) {
  Json r = base_row();
  r.update(Json{{"model", "Llama 13B"}, {"params_b", 13.0}});
  const Json run = converted(r);
  EXPECT_EQ(run["model"], "llama2-13b");
  EXPECT_NE(run["assumptions"].dump().find("parameter count"), std::string::npos);
  // A member more than 25% off is another model (a 1B Llama is not the 8B), and a row without
  // dimensions or a parameter count names no model at all: listed, not guessed.
  for (const Json& change : {Json{{"model", "Llama 3.2 1B"}, {"params_b", 1.2}}, Json{{"model", "Llama 3.2 1B"}, {"params_b", nullptr}}}) {
    Json small = r;
    small.update(change);
    Json out;
    std::string reason;
    EXPECT_FALSE(row_to_run(small, out, reason)) << change.dump();
    EXPECT_TRUE(reason.find("within 25%") != std::string::npos || reason.find("nor its parameter count") != std::string::npos) << reason;
  }
}

TEST(PublishedRows, UnknownSizeTakesTheFamilyArchitectureWithTheRowsDimensions) {
  Json r = base_row();
  r.update(Json{{"model", "GPT-OSS 20B"}, {"layers", 24}, {"hidden", 2880}, {"heads", 64}, {"kv_heads", 8}, {"moe_experts", 32},
                {"moe_topk", 4}, {"ep", 8}, {"tp", 1}, {"pp", 1}});
  const Json run = converted(r);
  ASSERT_TRUE(run["model"].is_object()) << run["model"].dump();
  EXPECT_EQ(run["model"]["num_hidden_layers"], 24);
  EXPECT_EQ(run["model"]["num_local_experts"], 32);
  // It is a valid model: the run file parses, with gpt-oss's attention sinks / sliding window kept.
  const auto rc = config::parse_run(run, "<test>", "");
  EXPECT_EQ(rc.model.num_layers, 24);
  EXPECT_EQ(rc.model.moe.num_experts, 32);
  EXPECT_EQ(rc.model.moe.top_k, 4);
}

// A family the zoo lacks, with its dimensions given, is a Llama-style decoder of those
// dimensions (MoE when the row has experts); without dimensions it is not predicted.
TEST(PublishedRows, UnknownFamilyWithDimensions) {
  Json r = base_row();
  r.update(Json{{"model", "Mistral 7B"}, {"layers", 32}, {"hidden", 4096}, {"heads", 32}, {"kv_heads", 8}, {"ffn_hidden", 14336},
                {"vocab", 32000}, {"tp", 1}, {"pp", 1}});
  Json run = converted(r);
  ASSERT_TRUE(run["model"].is_object());
  EXPECT_EQ(run["model"]["vocab_size"], 32000);
  EXPECT_EQ(run["model"]["hidden_act"], "silu");
  EXPECT_EQ(config::parse_run(run, "<test>", "").model.moe.num_experts, 0);
  r.update(Json{{"model", "Some MoE 8x3B"}, {"moe_experts", 8}, {"moe_topk", 2}, {"ep", 8}});
  run = converted(r);
  EXPECT_EQ(config::parse_run(run, "<test>", "").model.moe.num_experts, 8);
  r = base_row();
  r["model"] = "Mystery 7B";
  std::string reason;
  EXPECT_FALSE(row_to_run(r, run, reason));
  EXPECT_NE(reason.find("not recognised"), std::string::npos);
}

// A measured peak is compared on its own basis: the device's view (nvidia-smi, NVML) holds the
// CUDA context and NCCL buffers, the allocator's (torch.cuda's reserved or allocated peak) does
// not, so the ledger's runtime line is left out of the prediction for it.
TEST(PublishedRows, MemoryRowsByWhatTheyMeasured) {
  Json a = base_row();
  a.update(Json{{"id", "smi"}, {"model", "Llama 3.1 8B"}, {"params_b", 8.0}, {"tp", 1}, {"pp", 1}, {"memory_gib_per_gpu", 60.0},
                {"memory_definition", "NVML device memory used"}});
  Json b = a;
  b.update(Json{{"id", "allocated"}, {"memory_definition", "torch.cuda.max_memory_allocated()"}});
  Json c = a;
  c.update(Json{{"id", "reserved"}, {"memory_definition", "torch.cuda.max_memory_reserved()"}});
  const AccuracyResult res = accuracy_of({a, b, c}, "memory.jsonl");
  ASSERT_EQ(res.rows.size(), 3u);
  EXPECT_NE(res.rows[0].memory_basis.find("nvidia-smi"), std::string::npos);
  EXPECT_NE(res.rows[1].memory_basis.find("allocated"), std::string::npos);
  EXPECT_NE(res.rows[2].memory_basis.find("reserved"), std::string::npos);
  // Runtime reserved (CUDA context) plus the communicators: the device's view is the larger.
  EXPECT_GT(res.rows[0].predicted_mem_gib - res.rows[1].predicted_mem_gib, 0.5);
  EXPECT_DOUBLE_EQ(res.rows[1].predicted_mem_gib, res.rows[2].predicted_mem_gib);
}

// Decoders of the GPT-3 lineage that the zoo lacks (OPT, MT-NLG, Falcon, ...) are built as GPT
// decoders (a 2-matrix 4h MLP), not as a Llama; recurrent families are listed, not guessed.
TEST(PublishedRows, GptLineageFamiliesAndRecurrentOnes) {
  Json r = base_row();
  r.update(Json{{"model", "OPT-175B"}, {"params_b", 175.0}, {"layers", 96}, {"hidden", 12288}, {"heads", 96}, {"vocab", 50272}, {"seq_len", 2048}});
  Json run = converted(r);
  ASSERT_TRUE(run["model"].is_object());
  EXPECT_EQ(run["model"]["hidden_act"], "gelu");
  EXPECT_EQ(run["model"]["intermediate_size"], 4 * 12288);
  const auto rc = config::parse_run(run, "<test>", "");
  EXPECT_NEAR(rc.model.total_params() / 175e9, 1.0, 0.02);
  EXPECT_NE(run["assumptions"].dump().find("GPT-style decoder"), std::string::npos);
  for (const char* name : {"MT-NLG 530B", "Falcon-180B", "Pythia 12B", "GPT-NeoX-20B", "StarCoder 15B"}) {
    Json g = r;
    g["model"] = name;
    EXPECT_EQ(converted(g)["model"]["hidden_act"], "gelu") << name;
  }
  // Only a parameter count: the zoo's GPT of that size, or listed beyond 25% of every one.
  Json only_count = base_row();
  only_count.update(Json{{"model", "GPT-3 175B"}, {"params_b", 175.0}, {"seq_len", 2048}});
  EXPECT_EQ(converted(only_count)["model"], "gpt3-175b");
  only_count["model"] = "OPT-30B";
  only_count["params_b"] = 30.0;
  std::string why;
  EXPECT_FALSE(row_to_run(only_count, run, why));
  EXPECT_NE(why.find("within 25%"), std::string::npos) << why;
  for (const char* name : {"Jamba 1.5 Large", "Falcon-H1 34B", "Falcon Mamba 7B", "RWKV-6 14B"}) {
    Json h = r;
    h["model"] = name;
    std::string reason;
    EXPECT_FALSE(row_to_run(h, run, reason)) << name;
    EXPECT_NE(reason.find("recurrent or hybrid"), std::string::npos) << reason;
  }
}

// A row without its FFN width takes the family's convention on its own hidden size, unless its
// parameter count rules the convention out; then the width that gives the count.
TEST(PublishedRows, FfnWidthFromTheParameterCount) {
  // Code Llama 34B's shape (48 layers, 8192 wide, GQA 8, FFN 22016) without its FFN: the nearest
  // member (Llama 2 70B, FFN 28672) would make it 41.6B; its 33.7B give the width back.
  Json r = base_row();
  r.update(Json{{"model", "Code Llama 34B"}, {"params_b", 33.7}, {"layers", 48}, {"hidden", 8192}, {"heads", 64}, {"kv_heads", 8}, {"vocab", 32016}});
  Json run = converted(r);
  ASSERT_TRUE(run["model"].is_object());
  const int64_t ffn = run["model"]["intermediate_size"].get<int64_t>();
  EXPECT_NEAR(static_cast<double>(ffn) / 22016.0, 1.0, 0.01) << ffn;
  EXPECT_EQ(ffn % 128, 0);
  EXPECT_NE(run["assumptions"].dump().find("solved from the row's"), std::string::npos);
  EXPECT_NEAR(config::parse_run(run, "<test>", "").model.total_params() / 33.7e9, 1.0, 0.01);
  // An unknown family on a hidden size no member has: the member's ratio (Llama 3: 3.5h, 17920
  // at 5120 wide) while the count agrees with it (14.9B), the width that gives the count (12.7B:
  // 14336) when it does not.
  r = base_row();
  r.update(Json{{"model", "Acme 12B"}, {"params_b", 14.9}, {"layers", 40}, {"hidden", 5120}, {"heads", 40}, {"kv_heads", 8}, {"vocab", 131072}});
  run = converted(r);
  EXPECT_EQ(run["model"]["intermediate_size"], 17920);
  EXPECT_EQ(run["assumptions"].dump().find("solved"), std::string::npos);
  r["params_b"] = 12.7;
  run = converted(r);
  EXPECT_NEAR(run["model"]["intermediate_size"].get<double>() / 14336.0, 1.0, 0.01) << run["model"]["intermediate_size"];
  // A count no plausible width reaches (a typo, or another quantity) keeps the convention (of
  // the member nearest that count: Llama 3.1 405B's 3.25h).
  r["params_b"] = 900.0;
  run = converted(r);
  EXPECT_EQ(run["model"]["intermediate_size"], 16640);
  EXPECT_NE(run["assumptions"].dump().find("no plausible width"), std::string::npos);
  // GPT rows: 4h stands while the count agrees.
  r = base_row();
  r.update(Json{{"model", "GPT 18.4B (Megatron)"}, {"params_b", 18.4}, {"layers", 40}, {"hidden", 6144}, {"heads", 48}, {"vocab", 51200}});
  EXPECT_EQ(converted(r)["model"]["intermediate_size"], 4 * 6144);
}

// Layers that do not divide the (virtual) stages: Megatron's shorter first and last stages
// without virtual stages, the balanced list with them; the run file validates either way.
TEST(PublishedRows, UnevenSplits) {
  // Megatron-Core recipes count the embedding and the loss as pipeline layer slots when the
  // layers do not divide: 126 + 2 over 64 virtual stages, 2 slots each.
  Json r = base_row();
  r.update(Json{{"model", "Llama 3.1 405B"}, {"params_b", 405.0}, {"num_gpus", 1024}, {"tp", 8}, {"pp", 8}, {"cp", 2}, {"vp", 8},
                {"global_batch_seqs", 64}});
  Json run = converted(r);
  EXPECT_EQ(run["parallel"]["account_for_embedding_in_pipeline_split"], true) << run["parallel"].dump();
  EXPECT_EQ(run["parallel"]["account_for_loss_in_pipeline_split"], true);
  auto rc = config::parse_run(run, "<test>", "");
  ASSERT_EQ(rc.vstage_layers.size(), 64u);
  EXPECT_EQ(rc.vstage_layers.front(), 1);
  EXPECT_EQ(rc.vstage_layers[1], 2);
  EXPECT_EQ(rc.vstage_layers.back(), 1);
  // One slot per virtual stage: the first holds the embedding alone, the last the head alone.
  r["pp"] = 16;
  rc = config::parse_run(converted(r), "<test>", "");
  ASSERT_EQ(rc.vstage_layers.size(), 128u);
  EXPECT_EQ(rc.vstage_layers.front(), 0);
  EXPECT_EQ(rc.vstage_layers.back(), 0);
  EXPECT_EQ(rc.stage_layers.front(), 7);
  EXPECT_EQ(rc.stage_layers.back(), 7);
  // Without virtual stages the same split: 7 layers on the end stages, 8 on the others.
  r.erase("vp");
  rc = config::parse_run(converted(r), "<test>", "");
  EXPECT_EQ(rc.stage_layers, (std::vector<int64_t>{7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7}));
  // torchtitan's split points: a balanced list over every virtual stage.
  r["framework"] = "torchtitan";
  r["pp"] = 8;
  r["vp"] = 8;
  run = converted(r);
  ASSERT_TRUE(run["parallel"].contains("stage_layers")) << run["parallel"].dump();
  EXPECT_EQ(run["parallel"]["stage_layers"].size(), 64u);
  EXPECT_FALSE(run["parallel"].contains("account_for_embedding_in_pipeline_split"));
}

// An MoE row of a dense family, and a dense row of an MoE family, keep their own kind.
TEST(PublishedRows, KindFollowsTheRow) {
  Json r = base_row();
  r.update(Json{{"model", "Llama 4 Scout"}, {"layers", 48}, {"hidden", 5120}, {"heads", 40}, {"kv_heads", 8}, {"vocab", 202048},
                {"moe_experts", 16}, {"moe_topk", 1}, {"moe_ffn_hidden", 8192}, {"moe_shared_experts", 1}, {"ep", 8}, {"tp", 1}, {"pp", 1}});
  const auto scout = config::parse_run(converted(r), "<test>", "");
  EXPECT_EQ(scout.model.moe.num_experts, 16);
  EXPECT_EQ(scout.model.moe.shared_experts, 1);
  EXPECT_EQ(scout.model.moe.expert_ffn, 8192);
  r = base_row();
  r.update(Json{{"model", "Qwen3 32B"}, {"layers", 64}, {"hidden", 5120}, {"heads", 64}, {"kv_heads", 8}, {"ffn_hidden", 25600},
                {"vocab", 151936}});
  const auto rc = config::parse_run(converted(r), "<test>", "");
  EXPECT_EQ(rc.model.moe.num_experts, 0);
  EXPECT_EQ(rc.model.ffn_hidden, 25600);
}

// A sharded data-parallel run without model parallelism may leave tp and pp out; any FSDP
// degree (1024 included) is FSDP.
TEST(PublishedRows, ShardedDataParallelRows) {
  Json r = base_row();
  r.erase("tp");
  r.erase("pp");
  r.update(Json{{"model", "Llama 3.1 8B"}, {"params_b", 8.0}, {"num_gpus", 1024}, {"global_batch_seqs", 1024},
                {"fsdp", "FSDP2 (fully shard), degree=1024"}});
  const Json run = converted(r);
  EXPECT_EQ(run["parallel"]["pp"], 1);
  EXPECT_EQ(run["parallel"].value("tp", 1), 1);
  EXPECT_EQ(run["parallel"]["fsdp"], true);
  r.erase("fsdp");
  Json out;
  std::string reason;
  EXPECT_FALSE(row_to_run(r, out, reason));  // nothing says it is data parallel only
  EXPECT_NE(reason.find("layout not stated"), std::string::npos);
}

// A recompute text with a layer count is full recomputation of that many layers per virtual
// stage; without one, every layer.
TEST(PublishedRows, RecomputeLayerCountFromTheRow) {
  Json r = base_row();
  r.update(Json{{"model", "Llama 3.1 8B"}, {"params_b", 8.0}, {"tp", 1}, {"pp", 1}, {"num_gpus", 8}, {"global_batch_seqs", 128},
                {"recompute", "full, recompute_num_layers=5"}});
  Json run = converted(r);
  EXPECT_EQ(run["parallel"]["recompute"], "full");
  EXPECT_EQ(run["parallel"]["recompute_layers"], 5);
  r["recompute"] = "full activation recomputation of 12 of 32 layers";
  EXPECT_EQ(converted(r)["parallel"]["recompute_layers"], 12);
  r["recompute"] = "full activation checkpointing";
  run = converted(r);
  EXPECT_EQ(run["parallel"]["recompute"], "full");
  EXPECT_FALSE(run["parallel"].contains("recompute_layers"));
}

// A row that does not state its micro-batch runs the one a tuned benchmark would: the power of
// two dividing the per-replica batch that fits and gives the shortest estimated step. Without a
// pipeline a larger micro-batch only makes the GEMMs and TP exchanges larger (a Megatron 2021
// style 18B row picks more than 1); no candidate estimates faster than the one chosen.
TEST(PublishedRows, UnstatedMicroBatchIsTheFastestThatFits) {
  Json r = base_row();
  r.update(Json{{"model", "GPT 18.4B (Megatron)"}, {"framework", "Megatron-LM (PTD-P)"}, {"gpu_type", "A100 SXM4 80GB"},
                {"params_b", 18.4}, {"layers", 40}, {"hidden", 6144}, {"heads", 48}, {"vocab", 51200}, {"seq_len", 2048},
                {"tp", 8}, {"pp", 1}, {"num_gpus", 256}, {"global_batch_seqs", 1024}, {"recompute", "full activation recomputation"}});
  r.erase("micro_batch");
  const auto res = accuracy_of({r}, "unstated_mbs.jsonl");
  ASSERT_EQ(res.rows.size(), 1u);
  const Json& run = res.rows[0].run;
  const int64_t chosen = run["parallel"]["micro_batch_size"];
  EXPECT_GT(chosen, 1);
  bool noted = false;
  for (const auto& a : res.rows[0].assumptions) noted |= a.find("parallel: micro-batch size " + std::to_string(chosen) + " (not stated;") == 0;
  EXPECT_TRUE(noted);
  const double t_chosen = estimate::estimate_step(config::parse_run(run, "<test>", "")).step_time_s;
  for (int64_t b = 1; b <= 32; b *= 2) {
    Json trial = run;
    trial["parallel"]["micro_batch_size"] = b;
    const auto rc = config::parse_run(trial, "<test>", "");
    const auto e = estimate::estimate_step(rc);
    if (e.memory.fits()) {
      EXPECT_GE(e.step_time_s, t_chosen) << b;
    }
  }
}

// The run trained, so it fit: a row that states neither sequence parallelism nor a sharded
// optimizer, on a layout that fits only with them, gets them (each noted) before any
// recomputation; SP only for rows from 2022 on (Korthikanti et al. 2022), and a row that states
// its settings keeps them. Llama 3.1 405B on 16,384 H100s at tp 8, pp 16, vpp 4, 8k tokens
// (the Llama 3 paper's layout; 400 TFLOP/s per GPU, 6.46 s per 16M-token step).
TEST(PublishedRows, FreeMemorySaversBeforeRecomputation) {
  Json r = base_row();
  r.update(Json{{"id", "l3-405b"}, {"model", "Llama 3.1 405B"}, {"params_b", 405.0}, {"framework", "Meta internal 4D parallelism"},
                {"year", 2024}, {"tp", 8}, {"pp", 16}, {"vp", 4}, {"dp", 128}, {"num_gpus", 16384}, {"seq_len", 8192},
                {"global_batch_seqs", 2048}, {"recompute", "none"}, {"iteration_time_s", 6.46}});
  auto notes_of = [](const RowResult& row) {
    std::string all;
    for (const auto& a : row.assumptions) all += a + "\n";
    return all;
  };
  auto res = accuracy_of({r}, "savers.jsonl");
  ASSERT_EQ(res.rows.size(), 1u) << (res.skipped.empty() ? "" : res.skipped[0].reason);
  const Json& run = res.rows[0].run;
  EXPECT_EQ(run["parallel"]["sp"], true);
  EXPECT_EQ(run["parallel"]["zero_stage"], 1);
  EXPECT_EQ(run["parallel"]["recompute"], "none");
  EXPECT_TRUE(memory::compute_ledger(config::parse_run(run, "<test>", "")).fits());
  const std::string notes = notes_of(res.rows[0]);
  EXPECT_NE(notes.find("sequence parallelism with TP (not stated; the layout does not fit in memory without it)"), std::string::npos) << notes;
  EXPECT_NE(notes.find("distributed optimizer (ZeRO-1) (not stated;"), std::string::npos) << notes;
  // Within the 10% the simulator's mean is held to (issue 3), on a row it was not tuned on.
  EXPECT_NEAR(res.rows[0].predicted_s / 6.46, 1.0, 0.1);
  // Stated settings stay: no SP stated false, so the layout does not fit and is still predicted
  // as stated (the ledger's overshoot is the row's to explain).
  Json stated = r;
  stated.update(Json{{"sp", false}, {"zero_stage", 1}});
  res = accuracy_of({stated}, "savers_stated.jsonl");
  ASSERT_EQ(res.rows.size(), 1u);
  EXPECT_EQ(res.rows[0].run["parallel"]["sp"], false);
  EXPECT_EQ(notes_of(res.rows[0]).find("not stated; the layout does not fit in memory without it"), std::string::npos);
  // A 2020 row gets no SP; its optimizer is sharded, and the remaining gap is recomputation's.
  Json early = r;
  early.update(Json{{"year", 2020}});
  early.erase("recompute");
  res = accuracy_of({early}, "savers_2020.jsonl");
  ASSERT_EQ(res.rows.size(), 1u);
  EXPECT_FALSE(res.rows[0].run["parallel"].value("sp", false));
  EXPECT_EQ(res.rows[0].run["parallel"]["zero_stage"], 1);
  EXPECT_EQ(res.rows[0].run["parallel"]["recompute"], "full");
}

// Megatron-LM and Megatron-DeepSpeed ran their own softmax over the full score tensor until
// they took FlashAttention in 2023: rows from before (or with no year) run unfused attention,
// later ones and Megatron-Core ones the fused kernels (Megatron-DeepSpeed flash-attn 2).
TEST(PublishedRows, AttentionKernelByFrameworkAndYear) {
  Json r = base_row();
  r.update(Json{{"model", "Llama 3.1 8B"}, {"params_b", 8.0}, {"tp", 1}, {"pp", 1}, {"num_gpus", 8}, {"global_batch_seqs", 64}});
  auto attention = [&](const char* framework, int year) {
    Json x = r;
    x["framework"] = framework;
    if (year > 0) x["year"] = year;
    return converted(x)["training"].value("attention", std::string("fused"));
  };
  EXPECT_EQ(attention("Megatron-LM (PTD-P)", 2021), "unfused");
  EXPECT_EQ(attention("Megatron-LM", 0), "unfused");
  EXPECT_EQ(attention("Megatron-DeepSpeed", 2022), "unfused");
  EXPECT_EQ(attention("Megatron-LM", 2024), "fused");
  EXPECT_EQ(attention("Megatron-LM (Megatron-Core)", 2021), "fused");
  EXPECT_EQ(attention("Megatron-DeepSpeed", 2023), "flash2");  // flash-attn 2
  EXPECT_EQ(attention("NeMo 24.11 (Megatron-Core)", 0), "fused");
  // llm-foundry's MPT benchmarks run the FlashAttention Triton kernel (attn_impl: triton) on
  // every GPU; amp_fp8 reduces gradients in bf16, autocast's dtype.
  Json mpt = r;
  mpt.update(Json{{"model", "MPT-7b"}, {"layers", 32}, {"hidden", 4096}, {"heads", 32}, {"vocab", 50368}, {"seq_len", 2048},
                  {"framework", "Composer / llm-foundry (PyTorch FSDP, FlashAttention/triton attn)"}, {"fsdp", "FSDP FULL_SHARD"},
                  {"source", "MosaicML llm-foundry MPT training benchmarks"}, {"precision", "amp_fp8 (FSDP mixed precision DEFAULT)"}});
  for (const char* gpu : {"H100 SXM 80GB", "A100 SXM4 80GB"}) {
    mpt["gpu_type"] = gpu;
    const Json run = converted(mpt);
    EXPECT_EQ(run["training"].value("attention", std::string()), "triton") << gpu;
    EXPECT_EQ(run["training"].value("reduce_dtype", std::string()), "bf16") << gpu;
  }
  // Megatron-LM's main gradients are fp32 under fp16 and bf16 alike; DeepSpeed's follow its
  // optimizer (BF16Optimizer: fp32 accumulation; fp16: the model dtype).
  auto grads = [&](const char* framework, const char* precision) {
    Json x = r;
    x["framework"] = framework;
    x["precision"] = precision;
    return converted(x)["training"].value("grad_dtype", std::string("(precision)"));
  };
  EXPECT_EQ(grads("Megatron-LM", "BF16"), "fp32");
  EXPECT_EQ(grads("Megatron-LM (PTD-P)", "FP16 mixed"), "fp32");
  EXPECT_EQ(grads("Megatron-DeepSpeed", "BF16"), "fp32");
  EXPECT_EQ(grads("Megatron-DeepSpeed", "FP16 mixed"), "fp16");
  // NeMo 2.0's 2025 performance scripts reduce FP8 runs' gradients in bf16; NeMo's earlier
  // releases, its BF16 runs and Megatron-Bridge's tables keep Megatron-Core's fp32.
  EXPECT_EQ(grads("NeMo 25.02 (Megatron-Core)", "FP8"), "bf16");
  EXPECT_EQ(grads("NeMo 25.04 (Megatron-Core)", "FP8"), "bf16");
  EXPECT_EQ(grads("NeMo 25.02 (Megatron-Core)", "BF16"), "fp32");
  EXPECT_EQ(grads("NeMo 24.07 (Megatron-Core)", "FP8"), "fp32");
  EXPECT_EQ(grads("Megatron-Bridge / Megatron-Core (NeMo 25.11)", "FP8"), "fp32");
}

// Full activation checkpointing: torchtitan's (non-reentrant checkpoint, PyTorch 2.x, or a
// compiled block) stops the recomputed forward early, except eager float8 linears; llm-foundry's
// 2023 tables ran PyTorch 1.13, which re-ran the block; Megatron recomputes the whole layer.
TEST(PublishedRows, CheckpointEarlyStopByFramework) {
  Json r = base_row();
  r.update(Json{{"model", "Llama 3.1 8B"}, {"params_b", 8.0}, {"tp", 1}, {"pp", 1}, {"num_gpus", 8}, {"global_batch_seqs", 64},
                {"recompute", "full activation checkpointing"}});
  auto stops = [&](const char* framework, const char* source) {
    Json x = r;
    x["framework"] = framework;
    x["source"] = source;
    x["fsdp"] = "FSDP2";
    const Json run = converted(x);
    EXPECT_EQ(run["parallel"].value("recompute", std::string()), "full") << framework;
    return run["parallel"].value("recompute_stops_early", false);
  };
  EXPECT_TRUE(stops("torchtitan (torch 2024-12-23)", "torchtitan benchmark"));
  // An eager float8 run packs the down projection's inputs after its matmul: it is recomputed.
  r["precision"] = "BF16 + Float8 linears";
  EXPECT_FALSE(stops("torchtitan (torch 2024-12-23)", "torchtitan benchmark"));
  r["source_ref"] = "Table 2 (FSDP + torch.compile + Float8, full AC)";
  EXPECT_TRUE(stops("torchtitan (torch 2024-12-23)", "torchtitan benchmark"));
  r["precision"] = "BF16";
  EXPECT_FALSE(stops("Composer / llm-foundry (PyTorch FSDP)", "MosaicML llm-foundry MPT training benchmarks"));
  EXPECT_FALSE(stops("NeMo 24.11 (Megatron-Core)", "test"));
}

// An MoE row's expert tensor parallelism is the row's when it states one; otherwise Megatron's
// default (etp = tp) applies and this layout (ep 32 x etp 2 over tp 2 x dp 16) is refused.
TEST(PublishedRows, ExpertTensorParallelFromTheRow) {
  Json r = base_row();
  r.update(Json{{"model", "Qwen3_235B_a22B"}, {"params_b", 235}, {"layers", 94}, {"hidden", 4096}, {"heads", 64},
                {"kv_heads", 4}, {"vocab", 151936}, {"moe_experts", 128}, {"moe_topk", 8}, {"moe_ffn_hidden", 1536},
                {"num_gpus", 256}, {"tp", 2}, {"pp", 8}, {"ep", 32}, {"global_batch_seqs", 2048},
                {"framework", "Megatron-Bridge / Megatron-Core (NeMo 25.11)"}, {"precision", "FP8-CS"}});
  Json run = converted(r);
  EXPECT_FALSE(run["parallel"].contains("etp"));
  EXPECT_THROW((void)config::parse_run(run, "row", ""), core::UserError);
  r["etp"] = 1;
  run = converted(r);
  EXPECT_EQ(run["parallel"]["etp"], 1);
  EXPECT_NO_THROW((void)config::parse_run(run, "row", ""));
}

// A Megatron-Bridge DeepSeek-V3 row on 1,024 H100s (tp 2, pp 8 x vpp 4, ep 64), as the tables
// give them.
Json deepseek_bridge_row() {
  Json r = base_row();
  r.update(Json{{"model", "DeepSeekV3"}, {"params_b", 671}, {"layers", 61}, {"hidden", 7168}, {"heads", 128},
                {"moe_experts", 256}, {"moe_topk", 8}, {"num_gpus", 1024}, {"tp", 2}, {"pp", 8}, {"ep", 64}, {"vp", 4},
                {"global_batch_seqs", 8192}, {"framework", "Megatron-Bridge / Megatron-Core (NeMo 25.09)"}, {"precision", "FP8"}});
  return r;
}

// The MoE stack follows the framework: Megatron-Bridge's DeepSeek-V3 recipes use the flex
// dispatcher; torchtitan runs its experts in one grouped GEMM call (no per-expert host time);
// other MoE rows keep the all-to-all dispatcher and the default per-expert host time.
TEST(PublishedRows, MoeDispatcherAndExpertOverheadFollowTheFramework) {
  Json r = deepseek_bridge_row();
  Json run = converted(r);
  EXPECT_EQ(run["parallel"]["moe"]["dispatcher"], "flex");
  EXPECT_FALSE(run["parallel"]["moe"].contains("expert_overhead"));
  // A token-drop run pads to capacity, which only the all-to-all dispatcher does.
  Json drop = r;
  drop["model"] = "DeepSeekV3 (tokendrop)";
  const Json dropped = converted(drop);
  EXPECT_EQ(dropped["parallel"]["moe"]["dispatcher"], "alltoall");
  EXPECT_EQ(dropped["parallel"]["moe"]["pad_to_capacity"], true);
  r["framework"] = "torchtitan";
  run = converted(r);
  EXPECT_EQ(run["parallel"]["moe"]["dispatcher"], "alltoall");
  EXPECT_EQ(run["parallel"]["moe"]["expert_overhead"], 0);
  EXPECT_DOUBLE_EQ(config::parse_run(run, "row", "").parallel.moe.expert_overhead, 0.0);
}

// Megatron-Bridge's DeepSeek-V3 recipes: one MTP module unless the row says w/o MTP, and the
// recipe's pipeline layout for the row's pp x vpp (the embedding alone with the first layers,
// the MTP module and the loss after the last layer); the run files parse.
TEST(PublishedRows, DeepSeekV3RecipeLayoutAndMtp) {
  Json r = deepseek_bridge_row();
  Json run = converted(r);
  EXPECT_EQ(run["training"]["mtp_layers"], 1);
  EXPECT_EQ(run["parallel"]["pipeline_layout"], "Et|(tt|)*30mL");
  auto rc = config::parse_run(run, "row", "");
  EXPECT_EQ(rc.vstage_layers.back(), 0);
  r.update(Json{{"model", "DeepSeekV3 (w/o MTP)"}, {"num_gpus", 256}, {"tp", 1}, {"pp", 16}, {"ep", 8}, {"vp", nullptr},
                {"global_batch_seqs", 2048}});
  run = converted(r);
  EXPECT_FALSE(run["training"].contains("mtp_layers"));
  EXPECT_EQ(run["parallel"]["pipeline_layout"], "Et*4|(t*4|)*14tL");
  rc = config::parse_run(run, "row", "");
  EXPECT_EQ(rc.stage_layers.front(), 4);
  EXPECT_EQ(rc.stage_layers.back(), 1);
  EXPECT_EQ(rc.training.mtp_layers, 0);
}

// The global batch from tokens, or from micro-batch x accumulation x dp.
TEST(PublishedRows, GlobalBatchFromOtherFields) {
  Json r = base_row();
  r.erase("global_batch_seqs");
  r.update(Json{{"model", "Llama 3.1 8B"}, {"params_b", 8.0}, {"tp", 1}, {"pp", 1}, {"global_batch_tokens", 1048576}});
  EXPECT_EQ(converted(r)["training"]["global_batch_size"], 256);
  r.erase("global_batch_tokens");
  r.update(Json{{"micro_batch", 2}, {"grad_accum", 4}});
  EXPECT_EQ(converted(r)["training"]["global_batch_size"], 2 * 4 * 64);
  // A stated global batch wins over an accumulation that disagrees with it, which is noted.
  r["global_batch_seqs"] = 1024;
  const Json run = converted(r);
  EXPECT_EQ(run["training"]["global_batch_size"], 1024);
  EXPECT_NE(run["assumptions"].dump().find("gradient accumulation disagrees"), std::string::npos) << run["assumptions"].dump();
}

// The layout, precision and recompute wording rows use: a dimension the row leaves out is
// derived from the GPU count when the others fix it; a stated dp that does not make the GPU
// count, or a precision or recompute wording the harness cannot read, lists the row with the
// field named rather than guessing.
TEST(PublishedRows, LayoutPrecisionAndRecomputeWording) {
  Json r = base_row();
  r.update(Json{{"model", "Llama 3.1 8B"}, {"params_b", 8.0}, {"tp", 2}, {"pp", 1}, {"dp", 32}});
  r.erase("pp");
  Json run = converted(r);
  EXPECT_EQ(run["parallel"]["pp"], 1);
  EXPECT_EQ(run["parallel"]["tp"], 2);
  r["pp"] = 4;
  r.erase("tp");
  r["dp"] = 8;
  run = converted(r);
  EXPECT_EQ(run["parallel"]["tp"], 2);
  EXPECT_EQ(run["parallel"]["pp"], 4);
  Json bad;
  std::string reason;
  r["tp"] = 2;
  r["dp"] = 16;  // 2 x 4 x 16 = 128, not 64
  EXPECT_FALSE(row_to_run(r, bad, reason));
  EXPECT_NE(reason.find("dp 16"), std::string::npos) << reason;
  EXPECT_NE(reason.find("64 GPUs"), std::string::npos) << reason;
  r.erase("tp");
  r["dp"] = 3;  // 4 x 3 does not divide 64
  EXPECT_FALSE(row_to_run(r, bad, reason));
  EXPECT_NE(reason.find("no tp"), std::string::npos) << reason;

  r = base_row();
  r.update(Json{{"model", "Llama 3.1 8B"}, {"params_b", 8.0}, {"tp", 1}, {"pp", 1}});
  for (const auto& [text, mode] : std::vector<std::pair<std::string, std::string>>{
           {"no", "none"},
           {"activation checkpointing disabled", "none"},
           {"DeepSpeed activation checkpointing", "full"},
           {"full activation recomputation", "full"},
           {"selective activation checkpointing", "selective"},
           {"op-level SAC", "selective"},
           {"AC off", "none"}}) {
    r["recompute"] = text;
    EXPECT_EQ(converted(r)["parallel"]["recompute"], mode) << text;
  }
  r["recompute"] = true;
  EXPECT_EQ(converted(r)["parallel"]["recompute"], "full");
  r["recompute"] = 1;  // a number as a switch (it once read as no recompute)
  EXPECT_EQ(converted(r)["parallel"]["recompute"], "full");
  r["recompute"] = 0;
  EXPECT_EQ(converted(r)["parallel"]["recompute"], "none");
  r["recompute"] = "every other layer";
  EXPECT_FALSE(row_to_run(r, bad, reason));
  EXPECT_NE(reason.find("recompute \"every other layer\""), std::string::npos) << reason;
  r.erase("recompute");

  for (const auto& [text, dtype] : std::vector<std::pair<std::string, std::string>>{
           {"BF16 + Float8 linears", "fp8"}, {"FP16 mixed", "fp16"}, {"bfloat16", "bf16"}, {"AMP (mixed precision)", "fp16"}, {"FP32", "fp32"}}) {
    r["precision"] = text;
    EXPECT_EQ(converted(r)["training"]["precision"], dtype) << text;
  }
  r["precision"] = "TF32";
  EXPECT_FALSE(row_to_run(r, bad, reason));
  EXPECT_NE(reason.find("precision \"TF32\""), std::string::npos) << reason;
  // No precision stated: the GPU's 16-bit type, recorded as an assumption.
  r.erase("precision");
  run = converted(r);
  EXPECT_EQ(run["training"]["precision"], "bf16");
  EXPECT_NE(run["assumptions"].dump().find("states no precision"), std::string::npos);
  r["gpu_type"] = "V100 32GB (DGX-2H)";
  EXPECT_EQ(converted(r)["training"]["precision"], "fp16");
}

// H800 rows use the h800 profile; boards the SXM profiles do not describe are listed with the
// reason instead of being predicted on the wrong hardware.
TEST(PublishedRows, HardwareByBoard) {
  Json r = base_row();
  r.update(Json{{"model", "Llama 3.1 8B"}, {"params_b", 8.0}, {"tp", 1}, {"pp", 1}, {"gpu_type", "H800 SXM5 80GB"}});
  EXPECT_EQ(converted(r)["hardware"], "h800");
  // PCIe cards: the 8-card PCIe server profiles; the 40 GB A100 card as an override of the
  // 80 GB one. NVLink-bridged cards and NVL board pairs are nodes no profile describes.
  for (const auto& [board, profile] : std::vector<std::pair<std::string, std::string>>{
           {"H100 PCIe 80GB", "h100-pcie-8x"}, {"NVIDIA A100 80GB PCIe", "a100-pcie-80gb-8x"}, {"NVIDIA L40S", "l40s-pcie-8x"}}) {
    r["gpu_type"] = board;
    EXPECT_EQ(converted(r)["hardware"], profile) << board;
  }
  r["gpu_type"] = "A100 PCIe 40GB";
  {
    const Json a40 = converted(r)["hardware"];
    EXPECT_EQ(a40["base"], "a100-pcie-80gb-8x");
    EXPECT_EQ(a40["gpu"]["memory"], "39.6GiB");
  }
  for (const char* board : {"H100 NVL 94GB", "A100 80GB PCIe (NVLink bridge pairs)"}) {
    r["gpu_type"] = board;
    Json run;
    std::string reason;
    EXPECT_FALSE(row_to_run(r, run, reason)) << board;
    EXPECT_NE(reason.find("no built-in hardware profile"), std::string::npos) << reason;
    EXPECT_NE(reason.find("NVLink-bridged"), std::string::npos) << reason;
  }
  r["gpu_type"] = "H100 PCIe 80GB";
  r["intra_node_link"] = "NVLink bridge";
  {
    Json run;
    std::string reason;
    EXPECT_FALSE(row_to_run(r, run, reason));
  }
  r.erase("intra_node_link");
  // GH200: the quad node (4 per NVLink domain unless the row says fewer), the 96 GB HBM3 part
  // unless the row names the 144 GB HBM3e one; no profile describes larger GH200 domains.
  r["gpu_type"] = "GH200 Grace Hopper";
  r.erase("gpus_per_node");
  r["num_gpus"] = 64;
  Json gh = converted(r);
  EXPECT_EQ(gh["hardware"], "gh200");
  EXPECT_EQ(gh["cluster"]["gpus_per_node"], 4);
  r["gpu_type"] = "NVIDIA GH200 144GB HBM3e";
  gh = converted(r);
  EXPECT_EQ(gh["hardware"]["base"], "gh200");
  EXPECT_EQ(gh["hardware"]["gpu"]["memory"], "140.4GiB");
  EXPECT_EQ(gh["hardware"]["gpu"]["memory_bandwidth"], "4.9TB/s");
  r["gpus_per_node"] = 8;
  {
    Json run;
    std::string reason;
    EXPECT_FALSE(row_to_run(r, run, reason));
    EXPECT_NE(reason.find("8 GH200 per NVLink domain"), std::string::npos) << reason;
  }
  r = base_row();
  r.update(Json{{"model", "Llama 3.1 8B"}, {"params_b", 8.0}, {"tp", 1}, {"pp", 1}});
  // "NVLink" describing the node's fabric is not an NVL board.
  r["gpu_type"] = "H200 SXM 141GB (NVLink4)";
  EXPECT_EQ(converted(r)["hardware"], "h200");
  // A800: A100 compute with NVLink at 400 GB/s.
  r["gpu_type"] = "NVIDIA A800-SXM4-80GB";
  EXPECT_EQ(converted(r)["hardware"], "a800-sxm-80gb");
  r["gpu_type"] = "AMD MI300X";
  EXPECT_EQ(converted(r)["hardware"], "mi300x");
  r["gpu_type"] = "AMD Instinct MI325X";
  EXPECT_EQ(converted(r)["hardware"], "mi325x");
  r["gpu_type"] = "AMD MI355X";
  EXPECT_EQ(converted(r)["hardware"], "mi355x");
  r["gpu_type"] = "NVIDIA B300 SXM";
  EXPECT_EQ(converted(r)["hardware"], "b300");
  // Descriptions match without regard to case or the space before a memory size.
  for (const auto& [board, profile] : std::vector<std::pair<std::string, std::string>>{{"h100 sxm", "h100-sxm"},
                                                                                          {"nvidia h200", "h200"},
                                                                                          {"a100 80gb", "a100-sxm-80gb"},
                                                                                          {"A100 SXM 40 GB", "a100-sxm-40gb"},
                                                                                          {"nvidia-a100-sxm4-40gb", "a100-sxm-40gb"},
                                                                                          {"NVIDIA A100 140GB", "a100-sxm-80gb"},
                                                                                          {"gb200 nvl72", "gb200-nvl72"}}) {
    r["gpu_type"] = board;
    EXPECT_EQ(converted(r)["hardware"], profile) << board;
  }
  // A 16 GB V100: the V100 profile with the smaller part's memory (not the 32 GB part's).
  r["gpu_type"] = "Tesla V100-SXM2-16GB";
  r["precision"] = "FP16 mixed";
  const Json v100 = converted(r)["hardware"];
  EXPECT_EQ(v100["base"], "v100-sxm-32gb");
  EXPECT_EQ(v100["gpu"]["memory"], "15.78GiB");
  r["precision"] = "BF16";
  // The RTX PRO 6000 Blackwell (a PCIe card) is the PCIe lab's profile; the 300 W Max-Q is not.
  r["gpu_type"] = "NVIDIA RTX PRO 6000 Blackwell Server Edition PCIe";
  EXPECT_EQ(converted(r)["hardware"], "rtx-pro-6000-pcie-8x");
  {
    r["gpu_type"] = "RTX PRO 6000 Blackwell Max-Q";
    Json run;
    std::string reason;
    EXPECT_FALSE(row_to_run(r, run, reason));
  }
  // GB200 NVL72: the NVLink domain, not the 4-GPU tray, is the node; 128 GPUs run as 2 x 64.
  r.update(Json{{"gpu_type", "GB200 (NVL72)"}, {"num_gpus", 128}, {"gpus_per_node", 4}, {"global_batch_seqs", 128}});
  const Json run = converted(r);
  EXPECT_EQ(run["hardware"], "gb200-nvl72");
  EXPECT_EQ(run["cluster"]["gpus_per_node"], 64);
  // GB300 NVL72 (not its B300 die's HGX profile), with the same NVLink-domain rule: 144 = 2 x 72.
  r.update(Json{{"gpu_type", "GB300 NVL72"}, {"num_gpus", 144}, {"global_batch_seqs", 144}});
  const Json gb300 = converted(r);
  EXPECT_EQ(gb300["hardware"], "gb300-nvl72");
  EXPECT_EQ(gb300["cluster"]["gpus_per_node"], 72);
}

// The measured step from whole-job throughput, or from MFU with the row's peak.
TEST(PublishedRows, MeasuredStepFromThroughputOrMfu) {
  Json a = base_row();
  a.erase("iteration_time_s");
  a.update(Json{{"id", "by-total"}, {"model", "Llama 3.1 8B"}, {"params_b", 8.0}, {"tp", 1}, {"pp", 1}, {"tokens_per_s_total", 524288.0}});
  Json b = a;
  b.erase("tokens_per_s_total");
  b.update(Json{{"id", "by-mfu"}, {"mfu", 0.4}, {"mfu_peak_tflops_per_gpu", 989}});
  const AccuracyResult res = accuracy_of({a, b}, "rows.jsonl");
  ASSERT_EQ(res.rows.size(), 2u);
  // 64 sequences of 4096 tokens at 524,288 tokens/s.
  EXPECT_DOUBLE_EQ(res.rows[0].measured_s, 64.0 * 4096.0 / 524288.0);
  EXPECT_EQ(res.rows[0].measured_from, "tokens_per_s_total");
  const auto rc = config::parse_run(res.rows[1].run, "<test>", "");
  EXPECT_NEAR(res.rows[1].measured_s, estimate::model_flops_per_step(rc) / (0.4 * 989e12 * 64), 1e-9);
}

// An MFU without its peak is taken against the profile's dense peak of the training precision
// (stepcast's own MFU); TFLOP/s follow their stated definition: model FLOPs, or the Megatron
// paper's Eq. 3 (recomputation counted), which is also how unstated Megatron-LM rows read.
TEST(PublishedRows, MfuWithoutPeakAndTflopsByDefinition) {
  Json a = base_row();
  a.erase("iteration_time_s");
  a.update(Json{{"id", "mfu-no-peak"}, {"model", "Llama 3.1 8B"}, {"params_b", 8.0}, {"tp", 1}, {"pp", 1}, {"precision", "FP8"}, {"mfu", 0.3}});
  Json b = a;
  b.erase("mfu");
  b.update(Json{{"id", "model-tflops"}, {"precision", "BF16"}, {"tflops_per_gpu", 400.0}, {"tflops_definition", "Model TFLOP/sec/GPU as reported by the recipe"}});
  Json c = b;
  c.update(Json{{"id", "eq3-tflops"}, {"tflops_definition", "achieved TFLOP/s per GPU (paper Eq.3, includes recompute)"}});
  Json d = b;
  d.erase("tflops_definition");
  d.update(Json{{"id", "megatron-unstated"}, {"framework", "Megatron-LM (2021)"}});
  const AccuracyResult res = accuracy_of({a, b, c, d}, "mfu-tflops.jsonl");
  ASSERT_EQ(res.rows.size(), 4u);
  const auto rc = config::parse_run(res.rows[0].run, "<test>", "");
  const double flops = estimate::model_flops_per_step(rc);
  const double fp8_peak = rc.hardware.peak_for(rc.training.precision).value();
  EXPECT_NEAR(fp8_peak / 1979e12, 1.0, 1e-3);  // H100 dense FP8
  EXPECT_NEAR(res.rows[0].measured_s, flops / (0.3 * fp8_peak * 64), 1e-9);
  EXPECT_NE(res.rows[0].measured_from.find("profile's dense peak"), std::string::npos) << res.rows[0].measured_from;
  EXPECT_NEAR(res.rows[1].measured_s, flops / (400e12 * 64), 1e-9);
  EXPECT_NE(res.rows[1].measured_from.find("model FLOPs"), std::string::npos);
  // Eq. 3 counts the recomputed forward on top: four passes against the model FLOPs' three.
  EXPECT_NE(res.rows[2].measured_from.find("Eq. 3"), std::string::npos);
  EXPECT_NEAR(res.rows[2].measured_s / res.rows[1].measured_s, 4.0 / 3.0, 0.05);
  EXPECT_NE(res.rows[3].measured_from.find("Eq. 3"), std::string::npos);
}

// Megatron-LM since Megatron-Core logs num_floating_point_operations: three passes, no
// recomputation, the whole s x s attention. A 2023+ Megatron-LM row quoting TFLOP/s or MFU
// without a definition, or one naming that function, is read with those FLOPs: Llama 3.1 8B at
// 8,192 tokens counts 12 h^2 (1 + 8/32 + s/h) + 12 h f 3/2 per layer and 6 h V for the logits,
// 57.9 GFLOP per token; models it is not written for (MLA) keep stepcast's model FLOPs.
TEST(PublishedRows, MegatronLoggedFlops) {
  Json r = base_row();
  r.erase("iteration_time_s");
  r.update(Json{{"id", "mlm-2024"}, {"model", "Llama 3.1 8B"}, {"params_b", 8.0}, {"framework", "Megatron-LM"}, {"year", 2024},
                {"tp", 1}, {"pp", 1}, {"num_gpus", 8}, {"seq_len", 8192}, {"global_batch_seqs", 64}, {"tflops_per_gpu", 400.0}});
  Json named = r;
  named.update(Json{{"id", "named-2021"}, {"year", 2021}, {"tflops_definition", "Megatron-LM num_floating_point_operations / time"}});
  Json early = r;
  early.update(Json{{"id", "mlm-2021"}, {"year", 2021}});
  Json mfu = r;
  mfu.erase("tflops_per_gpu");
  mfu.update(Json{{"id", "mlm-mfu"}, {"mfu", 0.4}, {"mfu_peak_tflops_per_gpu", 989}});
  const AccuracyResult res = accuracy_of({r, named, early, mfu}, "mlm-logged.jsonl");
  ASSERT_EQ(res.rows.size(), 4u);
  const double h = 4096, s = 8192, f = 14336, V = 128256;
  const double per_token = 32.0 * (12.0 * h * h * (1.0 + 8.0 / 32.0 + s / h) + 12.0 * h * f * 1.5) + 6.0 * h * V;
  EXPECT_NEAR(per_token / 57.9e9, 1.0, 0.001);
  const double tokens = 64.0 * 8192.0;
  EXPECT_NEAR(res.rows[0].measured_s, per_token * tokens / (400e12 * 8), 1e-9);
  EXPECT_NE(res.rows[0].measured_from.find("Megatron-LM's logged FLOPs"), std::string::npos) << res.rows[0].measured_from;
  EXPECT_NEAR(res.rows[1].measured_s, res.rows[0].measured_s, 1e-12);
  EXPECT_NE(res.rows[2].measured_from.find("Eq. 3"), std::string::npos) << res.rows[2].measured_from;
  EXPECT_NEAR(res.rows[3].measured_s, per_token * tokens / (0.4 * 989e12 * 8), 1e-9);
  // More than stepcast's causal model FLOPs: the unmasked attention counts twice the scores.
  const auto rc = config::parse_run(res.rows[0].run, "<test>", "");
  EXPECT_GT(per_token * tokens, estimate::model_flops_per_step(rc) * 1.03);
  // DeepSeek-V3's latent attention: stepcast's model FLOPs.
  Json mla = r;
  mla.update(Json{{"id", "mlm-mla"}, {"model", "DeepSeek-V3"}, {"params_b", 671.0}, {"moe_experts", 256}, {"moe_topk", 8},
                  {"num_gpus", 256}, {"tp", 1}, {"pp", 16}, {"ep", 16}, {"dp", 16}, {"seq_len", 4096}, {"global_batch_seqs", 256}});
  const AccuracyResult m = accuracy_of({mla}, "mlm-mla.jsonl");
  ASSERT_EQ(m.rows.size(), 1u) << (m.skipped.empty() ? "" : m.skipped[0].reason);
  EXPECT_NE(m.rows[0].measured_from.find("model FLOPs"), std::string::npos) << m.rows[0].measured_from;
}

// Collective and GEMM measurements are predicted with the cost model of the matching profile;
// a row's own scale-out network replaces the profile's; a peak statement without a size, a
// board the SXM profiles do not describe, or an unknown dtype is listed with the reason.
TEST(PublishedRows, CollectiveAndGemmMeasurements) {
  Json c{{"id", "coll"},
         {"row_type", "collective"},
         {"source", "test"},
         {"gpu_type", "B200 (AWS p6-b200.48xlarge, NVLink5)"},
         {"inter_node_link", "8x 50 GB/s EFA v4 per node"},
         {"collective", "all_reduce"},
         {"num_ranks", 32},
         {"num_nodes", 4},
         {"message_bytes", 4294967296.0},
         {"busbw_gbps", 377.34}};
  MeasurementResult m;
  std::string reason;
  ASSERT_TRUE(predict_measurement(c, m, reason)) << reason;
  EXPECT_EQ(m.hardware, "b200");
  EXPECT_EQ(m.measured_from, "busbw_gbps");
  EXPECT_NEAR(m.measured_s, 4294967296.0 * 2.0 * 31.0 / 32.0 / 377.34e9, 1e-12);
  EXPECT_LT(std::abs(m.error), 0.15) << m.error;  // the 15% the simulator is held to for collectives
  ASSERT_FALSE(m.notes.empty());
  EXPECT_NE(m.notes.back().find("8 NICs per node at 400 Gb/s"), std::string::npos) << m.notes.back();
  // A statement of peak bandwidth has no size to predict.
  Json peak = c;
  peak.erase("message_bytes");
  EXPECT_FALSE(predict_measurement(peak, m, reason));
  EXPECT_NE(reason.find("no message size"), std::string::npos) << reason;
  // Impossible values name their field instead of reaching the cost model.
  for (const auto& [field, value] : std::vector<std::pair<std::string, Json>>{
           {"message_bytes", 0}, {"num_ranks", -2}, {"busbw_gbps", 0.0}, {"message_bytes", 1e300}, {"gpu_type", nullptr}}) {
    Json bad = c;
    bad[field] = value;
    EXPECT_FALSE(predict_measurement(bad, m, reason)) << field;
    EXPECT_TRUE(reason.find("'" + field + "'") != std::string::npos || reason.find("out of range") != std::string::npos) << reason;
  }

  Json g{{"id", "gemm"},  {"row_type", "gemm"}, {"source", "test"}, {"gpu_type", "NVIDIA H100 SXM"}, {"gemm_m", 4096},
         {"gemm_n", 4096}, {"gemm_k", 4096},    {"dtype", "bf16"},  {"achieved_tflops", 700.0}};
  MeasurementResult gm;
  ASSERT_TRUE(predict_measurement(g, gm, reason)) << reason;
  EXPECT_EQ(gm.what, "bf16 4096x4096x4096");
  EXPECT_NEAR(gm.measured_s, 2.0 * 4096.0 * 4096 * 4096 / 700e12, 1e-12);
  EXPECT_GT(gm.predicted_s, 0.0);
  // A GEMM on an H100 card: the SXM sibling's die at the card's datasheet peaks (an NVL card
  // as an override of h100-sxm, a PCIe card as h100-pcie-8x). Same efficiency, so the time past
  // the kernel launch overhead (h100-sxm's 3 us) scales with the peak.
  ASSERT_TRUE(predict_measurement(g, gm, reason)) << reason;
  constexpr double kLaunch = 3e-6;
  const double sxm = gm.predicted_s - kLaunch;
  g["gpu_type"] = "NVIDIA H100 NVL";
  ASSERT_TRUE(predict_measurement(g, gm, reason)) << reason;
  EXPECT_EQ(gm.hardware, "h100-nvl-gpu");
  EXPECT_NEAR(gm.predicted_s, kLaunch + sxm * 989.4 / 835.5, 1e-3 * sxm);
  g["gpu_type"] = "NVIDIA H100 PCIe";
  ASSERT_TRUE(predict_measurement(g, gm, reason)) << reason;
  EXPECT_EQ(gm.hardware, "h100-pcie-8x");
  EXPECT_NEAR(gm.predicted_s, kLaunch + sxm * 989.4 / 756.5, 1e-3 * sxm);
  g["gpu_type"] = "NVIDIA A100 PCIe 40GB";
  ASSERT_TRUE(predict_measurement(g, gm, reason)) << reason;
  EXPECT_EQ(gm.hardware, "a100-pcie-40gb-8x");
  // An L40S runs at the lab card's measured bf16 ceiling (0.52) of its own 362 TFLOP/s peak.
  g["gpu_type"] = "NVIDIA L40S PCIe";
  ASSERT_TRUE(predict_measurement(g, gm, reason)) << reason;
  EXPECT_EQ(gm.hardware, "l40s-pcie-8x");
  EXPECT_GT(gm.predicted_s - 4e-6, sxm * 989.4 * 0.803 / (362.05 * 0.52));
  g["gpu_type"] = "NVIDIA A10G";
  EXPECT_FALSE(predict_measurement(g, gm, reason));
  EXPECT_NE(reason.find("no built-in hardware profile"), std::string::npos) << reason;
  // A Grace Hopper superchip's GEMM: the gh200 profile (the 144 GB HBM3e part where the row
  // says so), whose measured large-GEMM ceiling (0.838 of peak) sits above H200's (0.803) at
  // the same peak.
  g["gpu_type"] = "NVIDIA GH200 SXM";
  g["notes"] = "900W 141GiB HBM3e version";
  ASSERT_TRUE(predict_measurement(g, gm, reason)) << reason;
  EXPECT_EQ(gm.hardware, "gh200-144gb");
  const double gh200 = gm.predicted_s;
  g.erase("notes");
  g["gpu_type"] = "NVIDIA H200 SXM";
  ASSERT_TRUE(predict_measurement(g, gm, reason)) << reason;
  EXPECT_EQ(gm.hardware, "h200");
  EXPECT_LT(gh200, gm.predicted_s);
  g["gpu_type"] = "NVIDIA H100 SXM";
  // Framework spellings of the dtype.
  for (const auto& [spelling, name] : std::vector<std::pair<std::string, std::string>>{
           {"torch.bfloat16", "bf16"}, {"half", "fp16"}, {"float8_e4m3fn", "fp8"}, {"float", "fp32"}}) {
    g["dtype"] = spelling;
    ASSERT_TRUE(predict_measurement(g, gm, reason)) << spelling << ": " << reason;
    EXPECT_EQ(gm.what.substr(0, gm.what.find(' ')), name) << spelling;
  }
  g["dtype"] = "int8";
  EXPECT_FALSE(predict_measurement(g, gm, reason));
  EXPECT_NE(reason.find("int8"), std::string::npos) << reason;
}

// Every built-in profile a datasheet row maps to carries the row's peaks, HBM bandwidth and NIC
// rate within 0.5% (rounding), and its usable memory within 2% under the marketing figure.
TEST(PublishedRows, ProfilesAgreeWithTheDatasheetRows) {
  std::ifstream in(std::string(STEPCAST_SOURCE_DIR) + "/data/published-runs.jsonl");
  ASSERT_TRUE(in);
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    const Json r = Json::parse(line);
    if (r.value("row_type", "") != "hardware") continue;
    DatasheetCheck d;
    std::string reason;
    ASSERT_TRUE(check_datasheet(r, d, reason)) << r["id"] << ": " << reason;
    for (const auto& f : d.fields) {
      const double rel = f.profile / f.datasheet - 1.0;
      if (f.name == "HBM") {
        EXPECT_LE(rel, 0.0) << d.id << " " << f.name;
        EXPECT_GT(rel, -0.02) << d.id << " " << f.name;
      } else {
        EXPECT_NEAR(rel, 0.0, 0.005) << d.id << " " << f.name << ": " << f.profile << " vs " << f.datasheet;
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 25);
}

// A row that gives only the model-parallel size takes Megatron-LM's placement: tensor
// parallelism inside a node (up to 8, dividing the heads), the rest pipelined; stated.
TEST(PublishedRows, ModelParallelSizeOnly) {
  Json r = base_row();
  r.erase("tp");
  r.erase("pp");
  r.update(Json{{"model", "GPT 39.1B (Megatron)"}, {"layers", 48}, {"hidden", 8192}, {"heads", 64}, {"vocab", 51200}, {"num_gpus", 512},
                {"global_batch_seqs", 1536}, {"notes", "Only model-parallel size (TP*PP=16) is given; TP/PP split not stated."}});
  const Json run = converted(r);
  EXPECT_EQ(run["parallel"]["tp"], 8);
  EXPECT_EQ(run["parallel"]["pp"], 2);
  EXPECT_NE(run["assumptions"].dump().find("model-parallel size 16"), std::string::npos);
  r["notes"] = "Only model-parallel size (TP*PP=2) is given.";
  EXPECT_EQ(converted(r)["parallel"]["tp"], 2);
  r["notes"] = "no layout here";
  Json none;
  std::string reason;
  EXPECT_FALSE(row_to_run(r, none, reason));
  EXPECT_NE(reason.find("layout not stated"), std::string::npos);
}

// A row whose field has an unexpected type is listed with the reason; the other rows are
// still predicted.
TEST(PublishedRows, MalformedRowIsSkippedNotFatal) {
  Json good = base_row();
  good.update(Json{{"id", "good"}, {"model", "Llama 3.1 8B"}, {"params_b", 8.0}, {"tp", 1}, {"pp", 1}});
  Json bad = good;
  bad.update(Json{{"id", "bad"}, {"tp", "eight"}});
  const AccuracyResult res = accuracy_of({bad, good}, "malformed.jsonl");
  ASSERT_EQ(res.rows.size(), 1u);
  EXPECT_EQ(res.rows[0].id, "good");
  ASSERT_EQ(res.skipped.size(), 1u);
  EXPECT_EQ(res.skipped[0].id, "bad");
  EXPECT_NE(res.skipped[0].reason.find("row not understood"), std::string::npos) << res.skipped[0].reason;
  EXPECT_NE(res.skipped[0].reason.find("field 'tp'"), std::string::npos) << res.skipped[0].reason;
}

// A count beyond 2^31 (1e300, say) is listed naming the field; rounding it to an integer once
// overflowed and a later division ended the run with SIGFPE.
TEST(PublishedRows, HugeCountIsListedNotRounded) {
  Json good = base_row();
  good.update(Json{{"id", "good"}, {"model", "Llama 3.1 8B"}, {"params_b", 8.0}, {"tp", 1}, {"pp", 1}});
  Json huge = good;
  huge["id"] = "huge";
  huge["tp"] = 1e300;
  const AccuracyResult res = accuracy_of({good, huge}, "huge-count.jsonl");
  ASSERT_EQ(res.rows.size(), 1u);
  ASSERT_EQ(res.skipped.size(), 1u);
  EXPECT_NE(res.skipped[0].reason.find("field 'tp': expected a count up to 2147483647"), std::string::npos) << res.skipped[0].reason;
}

// The fsdp field's wording: a boolean, FULL_SHARD, SHARD_GRAD_OP (kept gathered from forward to
// backward), NO_SHARD, HYBRID_SHARD (below); unknown wording is listed, not guessed.
TEST(PublishedRows, FsdpWording) {
  Json r = base_row();
  r.update(Json{{"model", "Llama 3.1 8B"}, {"params_b", 8.0}, {"tp", 1}, {"pp", 1}});
  r["fsdp"] = true;
  EXPECT_EQ(converted(r)["parallel"]["fsdp"], true);
  r["fsdp"] = "FSDP2";
  EXPECT_EQ(converted(r)["parallel"]["fsdp"], true);
  r["fsdp"] = "SHARD_GRAD_OP";
  EXPECT_EQ(converted(r)["parallel"]["reshard_after_forward"], false);
  r["fsdp"] = "NO_SHARD";
  EXPECT_FALSE(converted(r)["parallel"].contains("fsdp"));
  r["fsdp"] = "sharded somehow";
  Json run;
  std::string reason;
  EXPECT_FALSE(row_to_run(r, run, reason));
  EXPECT_NE(reason.find("sharded somehow"), std::string::npos) << reason;
}

// Hybrid sharding: the row's replicas (dp_replicate), its shard degree (dp_shard: dp over it),
// or for HYBRID_SHARD without either, PyTorch's default of one replica per node (the node's
// dp ranks at tp * cp). Counts that do not divide dp are listed naming the field; a ZeRO row
// with replicas is Megatron's partial distributed optimizer.
TEST(PublishedRows, HybridSharding) {
  Json r = base_row();
  r.update(Json{{"model", "Llama 3.1 8B"}, {"params_b", 8.0}, {"tp", 2}, {"pp", 1}, {"framework", "torchtitan"}, {"fsdp", "HYBRID_SHARD"}});
  // 64 GPUs at tp 2: dp 32, 4 dp ranks per node, 8 replicas.
  EXPECT_EQ(converted(r)["parallel"]["fsdp"], true);
  EXPECT_EQ(converted(r)["parallel"]["dp_replicate"], 8);
  r["cp"] = 8;  // dp 4 ranks at tp * cp = 16 GPUs: no node holds a whole dp rank
  Json run;
  std::string reason;
  EXPECT_FALSE(row_to_run(r, run, reason));
  EXPECT_NE(reason.find("HYBRID_SHARD"), std::string::npos) << reason;
  r.erase("cp");
  r["dp_shard"] = 16;
  EXPECT_EQ(converted(r)["parallel"]["dp_replicate"], 2);
  r.erase("dp_shard");
  r["dp_replicate"] = 3;
  EXPECT_FALSE(row_to_run(r, run, reason));
  EXPECT_NE(reason.find("dp_replicate 3 does not divide the row's dp 32"), std::string::npos) << reason;
  r["dp_replicate"] = 4;
  r["fsdp"] = "FULL_SHARD";  // the replicas make it hybrid
  EXPECT_EQ(converted(r)["parallel"]["dp_replicate"], 4);
  r.erase("fsdp");
  r["zero_stage"] = 1;
  EXPECT_EQ(converted(r)["parallel"]["dp_replicate"], 4);
  EXPECT_EQ(converted(r)["parallel"]["zero_stage"], 1);
}

// A stated ZeRO stage (a number or "ZeRO-1") and a stated sp are the row's, over framework
// defaults; a fractional stage or an unreadable sp is listed.
TEST(PublishedRows, StatedZeroStageAndSequenceParallelism) {
  Json r = base_row();
  r.update(Json{{"model", "Llama 3.1 8B"}, {"params_b", 8.0}, {"tp", 2}, {"pp", 1}, {"framework", "NeMo 24.09 (Megatron-Core)"}});
  EXPECT_EQ(converted(r)["parallel"]["zero_stage"], 1);  // NeMo's distributed optimizer
  EXPECT_EQ(converted(r)["parallel"]["sp"], true);       // and its sequence parallelism
  r["zero_stage"] = 0;
  r["sp"] = false;
  EXPECT_EQ(converted(r)["parallel"].value("zero_stage", -1), 0);
  EXPECT_EQ(converted(r)["parallel"]["sp"], false);
  r["zero_stage"] = "ZeRO-2";
  EXPECT_EQ(converted(r)["parallel"]["zero_stage"], 2);
  for (const Json& bad : {Json{{"zero_stage", 2.5}}, Json{{"zero_stage", "partitioned"}}, Json{{"sp", "maybe"}}}) {
    Json b = r;
    b.update(bad);
    Json run;
    std::string reason;
    EXPECT_FALSE(row_to_run(b, run, reason)) << bad.dump();
    EXPECT_NE(reason.find("not recognised"), std::string::npos) << reason;
  }
}

// A row of an unknown or missing row_type, or without an id, is listed with the reason and a
// name (its file and line), never dropped silently.
TEST(PublishedRows, UnknownRowTypeAndMissingIdAreListed) {
  Json good = base_row();
  good.update(Json{{"id", "good"}, {"model", "Llama 3.1 8B"}, {"params_b", 8.0}, {"tp", 1}, {"pp", 1}});
  Json odd = good;
  odd["id"] = "odd";
  odd["row_type"] = "benchmark";
  Json untyped = good;
  untyped["id"] = "untyped";
  untyped.erase("row_type");
  Json anonymous = good;
  anonymous.erase("id");
  anonymous["tp"] = 0;
  const AccuracyResult res = accuracy_of({good, odd, untyped, anonymous}, "row-types.jsonl");
  ASSERT_EQ(res.rows.size(), 1u);
  ASSERT_EQ(res.skipped.size(), 3u);
  EXPECT_EQ(res.skipped[0].id, "odd");
  EXPECT_NE(res.skipped[0].reason.find("row_type 'benchmark'"), std::string::npos) << res.skipped[0].reason;
  EXPECT_EQ(res.skipped[1].id, "untyped");
  EXPECT_NE(res.skipped[1].reason.find("no row_type"), std::string::npos) << res.skipped[1].reason;
  EXPECT_NE(res.skipped[2].id.find("row-types.jsonl:4"), std::string::npos) << res.skipped[2].id;
}

// A number written as text is read; a count or measurement that is zero or negative lists the
// row with the field named (a zero tp once divided by zero and ended the run).
TEST(PublishedRows, NumbersAsTextAndNonPositiveValues) {
  Json good = base_row();
  good.update(Json{{"id", "text"}, {"model", "Llama 3.1 8B"}, {"params_b", 8.0}, {"tp", "2"}, {"pp", 1}, {"seq_len", "4096"}});
  std::vector<Json> rows = {good};
  for (const auto& [field, value] : std::vector<std::pair<std::string, Json>>{
           {"tp", 0}, {"num_gpus", -8}, {"seq_len", 0}, {"iteration_time_s", 0.0}, {"micro_batch", -1}, {"mfu", 40.5}}) {
    Json bad = good;
    bad["id"] = "bad-" + field;
    bad[field] = value;
    rows.push_back(bad);
  }
  const AccuracyResult res = accuracy_of(rows, "nonpositive.jsonl");
  ASSERT_EQ(res.rows.size(), 1u);
  EXPECT_EQ(res.rows[0].id, "text");
  EXPECT_EQ(res.rows[0].num_gpus, 64);
  ASSERT_EQ(res.skipped.size(), rows.size() - 1);
  for (size_t i = 0; i < res.skipped.size(); ++i) {
    const std::string field = rows[i + 1]["id"].get<std::string>().substr(4);
    EXPECT_NE(res.skipped[i].reason.find("field '" + field + "'"), std::string::npos) << res.skipped[i].reason;
  }
}

// Megatron-LM's linear layers run their backward TP collectives asynchronously from 2022; the
// 2021 code, DeepSpeed's Megatron fork and NeMo's comm-overlap recipes do not get the flag.
TEST(PublishedRows, AsyncLinearBackwardForMegatronLmFrom2022) {
  auto async_of = [](const std::string& fw, int year) {
    Json r = base_row();
    r.update(Json{{"model", "Llama 2 70B"}, {"layers", 80}, {"hidden", 8192}, {"heads", 64}, {"kv_heads", 8}, {"vocab", 32000}, {"framework", fw}, {"year", year}});
    const Json run = converted(r);
    return run["parallel"].value("tp_async_backward", false);
  };
  EXPECT_TRUE(async_of("Megatron-LM", 2022));
  EXPECT_TRUE(async_of("Megatron-LM", 2024));
  EXPECT_FALSE(async_of("Megatron-LM (PTD-P)", 2021));
  EXPECT_FALSE(async_of("Megatron-DeepSpeed", 2022));
  EXPECT_FALSE(async_of("NeMo 24.11 (Megatron-Core)", 2024));  // comm-overlap kernels instead
  Json one = base_row();
  one.update(Json{{"model", "Llama 2 70B"}, {"layers", 80}, {"hidden", 8192}, {"heads", 64}, {"kv_heads", 8}, {"vocab", 32000}});
  one["framework"] = "Megatron-LM";
  one["year"] = 2022;
  one["tp"] = 1;
  one["pp"] = 1;
  one["global_batch_seqs"] = 64;
  EXPECT_FALSE(converted(one)["parallel"].value("tp_async_backward", false));  // no TP, nothing to run beside
}

// A probe set (data/probes/FILE) predicted by the harness; every row converts.
AccuracyResult probe_rows(const std::string& file, size_t expected_rows) {
  AccuracyOptions o;
  o.data_path = std::string(STEPCAST_SOURCE_DIR) + "/data/probes/" + file;
  AccuracyResult res = run_accuracy(o);
  EXPECT_TRUE(res.skipped.empty()) << res.skipped.front().id << ": " << res.skipped.front().reason;
  EXPECT_EQ(res.rows.size(), expected_rows) << file;
  return res;
}

// The estimate's mean absolute error over the rows whose id names the table ("": all rows).
double probe_mape(const AccuracyResult& res, const std::string& table = "") {
  double sum = 0;
  int n = 0;
  for (const auto& row : res.rows) {
    if (!table.empty() && row.id.find("-" + table + "-") == std::string::npos) continue;
    sum += std::abs(row.error);
    ++n;
  }
  EXPECT_GT(n, 0) << table;
  return n ? sum / n : 0.0;
}

}  // namespace

// llm-foundry's published benchmark tables (data/probes/llmfoundry-benchmarks.jsonl, 201 rows
// from 125M to 70B, 512 to 65,536 tokens, A100 40GB/80GB and H100, bf16 and fp8). The Triton
// attention efficiencies of the A100 and H100 profiles come from the 31 A100 and 12 H100 bf16
// rows at 16k tokens and more; the other 158 rows are held out from that derivation. Bounds:
// the estimate's MAPE today is 6.7% over all rows (18.5% with FlashAttention-2's efficiencies
// in place of the Triton kernel's), 4.2% on the H100 bf16 table, 5.3% on the A100 80GB table
// and 9.9% on the A100 40GB table, whose bf16 'PURE' runs stay about 11% faster than measured
// (docs/MODEL.md). Each bound is today's value plus two points for unrelated model changes: a
// regression of the attention or FSDP model past that fails here.
TEST(ProbeRows, LlmFoundryTablesWithTheTritonKernel) {
  const AccuracyResult res = probe_rows("llmfoundry-benchmarks.jsonl", 201);
  EXPECT_LT(probe_mape(res), 0.087);
  EXPECT_LT(probe_mape(res, "h100"), 0.062);
  EXPECT_LT(probe_mape(res, "a100"), 0.073);
  EXPECT_LT(probe_mape(res, "a10040"), 0.119);
}

// NeMo's 2025 tables on Blackwell (25.02 DGX-B200, 25.04 GB200 NVL72): every row converts
// and predicts. The bound is the report's estimate MAPE (14.7% at its commit) with a
// margin; the rows run 3-25% fast, largely the early Blackwell software of those releases
// (docs/MODEL.md, Known gaps), so the test holds the current standing rather than a target.
TEST(ProbeRows, NemoBlackwellTables) {
  const AccuracyResult res = probe_rows("nemo-blackwell-2502-2504.jsonl", 16);
  EXPECT_LT(probe_mape(res), 0.16);
}

// Megatron-LM's 2022 benchmark runs with sequence parallelism and selective recomputation
// (data/probes/megatron-2022-sar.jsonl: 22B to 1T at tp 8, dp 1, A100 80GB). Every row gets
// Megatron-LM's asynchronous linear-layer backward, and each stays within 10% (the MFU table
// rounds to 0.1 points; the rows sit at -0.6% to +6.9%, 2.9% MAPE, and at 4.9% MAPE with the
// backward collectives blocking): a regression of the TP, pipeline or recomputation model past
// that fails here.
TEST(ProbeRows, Megatron2022SequenceParallelRuns) {
  const AccuracyResult res = probe_rows("megatron-2022-sar.jsonl", 4);
  for (const auto& row : res.rows) {
    EXPECT_LT(std::abs(row.error), 0.10) << row.id;
    bool async = false;
    for (const auto& a : row.assumptions) async = async || a.find("backward TP collectives run beside") != std::string::npos;
    EXPECT_TRUE(async) << row.id;
  }
  EXPECT_LT(probe_mape(res), 0.05);
}

// Held-out dense runs of the same recipes generation as the accuracy set's DGX Cloud rows
// (data/probes/dgxc-2409-large.jsonl: Llama 3.1 70B and 405B, with the README's 7- to 42-layer
// proxies, and Nemotron-4 340B, 32 to 2,304 H100s, BF16 and FP8), none of them used to fit a
// profile efficiency (their recipes' settings are read from the recipes, data/README.md). Today the estimate's MAPE is 4.4% (worst row -12.2%, Nemotron-4 340B
// FP8 on 2,048 GPUs); each row is held within 15% (issue 4's per-row bound) and the MAPE within
// today's value plus two points, so a regression of the pipeline, CP or TP model fails here.
TEST(ProbeRows, DgxCloudLargeDenseRecipes) {
  const AccuracyResult res = probe_rows("dgxc-2409-large.jsonl", 34);
  for (const auto& row : res.rows) {
    EXPECT_LT(std::abs(row.error), 0.15) << row.id;
    EXPECT_LT(std::abs(row.sim_error), 0.15) << row.id;
  }
  EXPECT_LT(probe_mape(res), 0.064);
}

// The accuracy set's DGX Cloud GPT-3 175B and Nemotron-4 15B layouts measured in a later
// release (data/probes/dgxc-2412.jsonl): today 2.1% MAPE, the worst row GPT-3 175B FP8 on 2,048
// GPUs at -9.2%. Each row within 15% and the MAPE within today's value plus two points.
TEST(ProbeRows, DgxCloudLaterRelease) {
  const AccuracyResult res = probe_rows("dgxc-2412.jsonl", 26);
  for (const auto& row : res.rows) EXPECT_LT(std::abs(row.sim_error), 0.15) << row.id;
  EXPECT_LT(probe_mape(res), 0.041);
}

// Grok-1 (314B MoE, 8 experts, top-2, expert TP 4) from the same repository: every row runs fast
// (BF16 -7..-9%, FP8 -11..-16%, from 2 layers on 8 GPUs to 64 on 2,048; 12-22% before the
// expert-TP gathers were costed), the MoE layers' missing time of docs/MODEL.md's Known gaps.
// The bound holds today's standing (11.0% MAPE) plus two points, not a target: dropping the
// gathers again (16.6%) fails it.
TEST(ProbeRows, DgxCloudGrok1) {
  const AccuracyResult res = probe_rows("dgxc-grok1.jsonl", 18);
  EXPECT_LT(probe_mape(res), 0.13);
}

}  // namespace stepcast::accuracy
