// Analytical step estimate: properties the domain requires (not golden numbers).
#include "sim/estimate/estimate.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include <string>

#include "sim/config/run_config.hpp"
#include "sim/core/json_reader.hpp"
#include "sim/engine/step_sim.hpp"
#include "sim/estimate/workload.hpp"
#include "sim/report/output.hpp"

namespace stepcast::estimate {
namespace {

using config::RunConfig;
using core::Json;

// A model whose 32 transformer layers dwarf its embedding and LM head (vocabulary 256), so the
// four pipeline stages of 8 layers each are (nearly) uniform.
Json uniform_pp_run(int64_t micro_batches, int64_t vpp = 1) {
  Json parallel = {{"tp", 1}, {"pp", 4}, {"micro_batch_size", 1}};
  if (vpp > 1) {
    parallel["vpp"] = vpp;
    parallel["schedule"] = "interleaved";
  } else {
    parallel["schedule"] = "1f1b";
  }
  return {
      {"model",
       {{"name", "uniform-layers"},
        {"hidden_size", 4096},
        {"num_attention_heads", 32},
        {"num_key_value_heads", 8},
        {"num_hidden_layers", 32},
        {"intermediate_size", 14336},
        {"vocab_size", 256},
        {"hidden_act", "silu"},
        {"tie_word_embeddings", false}}},
      {"hardware", "h100-sxm"},
      {"cluster", {{"num_gpus", 4}}},
      {"training", {{"seq_len", 4096}, {"global_batch_size", micro_batches}}},
      {"parallel", parallel},
  };
}

RunConfig parse(const Json& j) { return config::parse_run(j, "<estimate-test>", ""); }

// Llama 3.1 8B under FSDP on h100-sxm.
Json fsdp_llama8b(int64_t gpus, int64_t seq, int64_t batch, int64_t mbs) {
  return {{"model", "llama3.1-8b"},
          {"hardware", "h100-sxm"},
          {"cluster", {{"num_gpus", gpus}}},
          {"training", {{"seq_len", seq}, {"global_batch_size", batch}}},
          {"parallel", {{"micro_batch_size", mbs}, {"fsdp", true}}}};
}

// The run file is refused with a message naming `path`.
void expect_refused_naming(const Json& j, const std::string& path) {
  try {
    (void)parse(j);
    FAIL() << "expected a ConfigError";
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

// Recomputing 2 of each stage's 8 layers costs a quarter of the recomputation of all of them,
// and the step lies between no recompute and full recompute.
TEST(Estimate, PartialRecomputeCostsItsShare) {
  Json j = uniform_pp_run(8);
  const double none = estimate_step(parse(j)).step_time_s;
  j["parallel"]["recompute"] = "full";
  const StepEstimate all = estimate_step(parse(j));
  j["parallel"]["recompute_layers"] = 2;
  const StepEstimate two = estimate_step(parse(j));
  EXPECT_NEAR(two.breakdown.recompute, all.breakdown.recompute / 4.0, 1e-9 * all.breakdown.recompute);
  EXPECT_GT(two.step_time_s, none);
  EXPECT_LT(two.step_time_s, all.step_time_s);
  j["parallel"]["recompute"] = "selective";
  expect_refused_naming(j, "$.parallel.recompute_layers");
}

// Communication beside compute: when it is shorter, the compute slows by `slow` of the
// overlapped time; when it outlasts the compute, the compute runs slowed under it and the
// step waits for whichever ends later.
TEST(Estimate, CommunicationBesideComputeCostsItsShareOrItsExcess) {
  const double slow = 0.25;
  EXPECT_DOUBLE_EQ(beside_compute(4.0, 10.0, slow), 1.0);   // compute-bound: 4 s overlapped
  EXPECT_DOUBLE_EQ(beside_compute(11.0, 10.0, slow), 2.5);  // slowed compute ends after the comm
  EXPECT_DOUBLE_EQ(beside_compute(20.0, 10.0, slow), 10.0); // comm-bound: its excess
  EXPECT_DOUBLE_EQ(beside_compute(4.0, 10.0, 0.0), 0.0);    // no interference: hidden
}

// 1F1B bubble = (p-1)/(m+p-1) for uniform stages. Tolerance 1% relative: the first stage also
// runs the embedding and the last the LM head + loss (tiny here with a 256-token vocabulary, but
// they make the stages not exactly uniform: ~0.2% apart), and exposed point-to-point sends add
// a little non-bubble time to the denominator (< 1% of the pipeline time here).
TEST(Estimate, OneFOneBBubbleMatchesTextbook) {
  const double p = 4;
  for (int64_t m : {4, 8, 16, 32}) {
    SCOPED_TRACE(m);
    const StepEstimate e = estimate_step(parse(uniform_pp_run(m)));
    const double dm = static_cast<double>(m);
    const double textbook = (p - 1) / (dm + p - 1);
    EXPECT_NEAR(e.bubble_fraction, textbook, 0.01 * textbook)
        << "bubble_fraction " << e.bubble_fraction << " vs (p-1)/(m+p-1) = " << textbook;
  }
}

// More micro-batches amortise the fill/drain: the bubble shrinks monotonically with m.
TEST(Estimate, BubbleShrinksWithMoreMicroBatches) {
  double prev = 1.0;
  for (int64_t m : {4, 8, 16, 32, 64}) {
    const double b = estimate_step(parse(uniform_pp_run(m))).bubble_fraction;
    EXPECT_LT(b, prev) << m;
    prev = b;
  }
}

// Interleaving with v virtual stages divides the bubble *time* by v: (p-1)/v stage-times of
// fill/drain instead of p-1, so the fraction becomes ((p-1)/v) / (m + (p-1)/v). Same 1% relative
// tolerance as the 1F1B check (near-uniform stages, small exposed point-to-point time).
TEST(Estimate, InterleavedHasSmallerBubble) {
  const double p = 4, v = 2;
  for (int64_t m : {8, 16}) {
    SCOPED_TRACE(m);
    const StepEstimate plain = estimate_step(parse(uniform_pp_run(m)));
    const StepEstimate inter = estimate_step(parse(uniform_pp_run(m, 2)));
    EXPECT_LT(inter.bubble_fraction, plain.bubble_fraction);
    const double dm = static_cast<double>(m);
    const double textbook = ((p - 1) / v) / (dm + (p - 1) / v);
    EXPECT_NEAR(inter.bubble_fraction, textbook, 0.01 * textbook);
    // Bubble seconds: half of the 1F1B bubble.
    EXPECT_NEAR(inter.breakdown.bubble, plain.breakdown.bubble / v, 0.01 * plain.breakdown.bubble / v);
  }
}

Json llama8b_node(const std::string& precision) {
  return {
      {"model", "llama3.1-8b"},
      {"hardware", "h100-sxm"},
      {"cluster", {{"num_gpus", 8}}},
      {"training", {{"seq_len", 8192}, {"global_batch_size", 64}, {"precision", precision}}},
      {"parallel", {{"tp", 2}, {"sp", true}, {"micro_batch_size", 1}, {"zero_stage", 1}, {"recompute", "selective"}}},
  };
}

// FP8 speeds up only the GEMMs (not attention, norms, element-wise work or communication), so
// an fp8 step is faster than bf16 but never twice as fast (published H100 pairs: ~1.4x).
TEST(Estimate, Fp8FasterButNotTwice) {
  const double bf16 = estimate_step(parse(llama8b_node("bf16"))).step_time_s;
  const double fp8 = estimate_step(parse(llama8b_node("fp8"))).step_time_s;
  EXPECT_LT(fp8, bf16);
  EXPECT_GT(fp8, bf16 / 2.0);
}

// Weak scaling with plain DDP (ZeRO 0): adding data-parallel replicas with the same per-GPU
// batch leaves each GPU's compute and optimizer work unchanged and only adds gradient traffic
// over a growing inter-node ring, so the step time never goes down.
TEST(Estimate, MoreDataParallelDoesNotReduceStepTime) {
  double prev = 0;
  for (int64_t dp : {1, 2, 4, 8, 16}) {
    SCOPED_TRACE(dp);
    Json j = {
        {"model", "llama3.1-8b"},
        {"hardware", "h100-sxm"},
        {"cluster", {{"num_gpus", 8 * dp}}},
        {"training", {{"seq_len", 4096}, {"global_batch_size", 8 * dp}}},
        {"parallel", {{"tp", 8}, {"dp", dp}, {"micro_batch_size", 1}, {"zero_stage", 0}}},
    };
    const StepEstimate e = estimate_step(parse(j));
    EXPECT_GE(e.step_time_s, prev * (1.0 - 1e-12));
    prev = e.step_time_s;
  }
}

// A data-parallel bucket issued beside the backward waits for the kernel in flight, and that
// is a transformer layer's: the gradients of the layers come due during the layers' kernels.
// Nemotron-4 15B's 256k vocabulary makes its output layer's GEMMs the pass's longest kernels;
// counted in the wait, 100-odd buckets at 64 ranks cost a third of a second the timeline
// never shows (estimate 1.39 s against the simulated 0.88 s before the split).
TEST(Estimate, DataParallelBucketsWaitForTheLayersKernels) {
  const Json j = {
      {"model", "nemotron4-15b"},
      {"hardware", "b200"},
      {"cluster", {{"num_gpus", 64}, {"gpus_per_node", 8}}},
      {"training", {{"seq_len", 4096}, {"global_batch_size", 256}, {"precision", "fp8"}, {"grad_dtype", "fp32"}}},
      {"parallel", {{"tp", 1}, {"micro_batch_size", 2}, {"zero_stage", 1}, {"bucket_layout", "megatron"}, {"bucket_mb", 536.870912}}},
  };
  const RunConfig rc = parse(j);
  const WorkloadBuilder wb(rc);
  const StageCost sc = stage_cost(rc, wb, 0);
  EXPECT_GT(wb.output_layer().bwd_kernel.value(), 1.5 * sc.bwd_kernel);
  EXPECT_GT(sc.bwd_kernel, 0.0);
  const double est = estimate_step(rc).step_time_s;
  const double sim = engine::simulate_step(rc).step.step_time_s;
  EXPECT_NEAR(est / sim, 1.0, 0.05);
}

// The estimate is a pure function: two calls give byte-identical JSON reports.
TEST(Estimate, Deterministic) {
  const RunConfig rc = parse(llama8b_node("bf16"));
  const std::string a = report::estimate_json(rc, estimate_step(rc), "estimate").dump();
  const std::string b = report::estimate_json(rc, estimate_step(rc), "estimate").dump();
  EXPECT_EQ(a, b);
  const RunConfig rc2 = parse(llama8b_node("bf16"));
  EXPECT_EQ(a, report::estimate_json(rc2, estimate_step(rc2), "estimate").dump());
}

// Basic accounting: MFU in (0, 1), throughput
// consistent with the step time, model FLOPs >= 6 * N * tokens.
TEST(Estimate, AccountingIsConsistent) {
  const RunConfig rc = parse(llama8b_node("bf16"));
  const StepEstimate e = estimate_step(rc);
  EXPECT_GT(e.mfu, 0.0);
  EXPECT_LT(e.mfu, 1.0);
  EXPECT_GT(e.step_time_s, 0.0);
  EXPECT_DOUBLE_EQ(e.tokens_per_s, static_cast<double>(rc.tokens_per_step()) / e.step_time_s);
  EXPECT_GE(e.model_flops_per_step, 6.0 * rc.model.flop_params() * static_cast<double>(rc.tokens_per_step()));
  EXPECT_GE(e.step_time_s, e.pipeline_time_s);
}

// Hardware FLOPs are the model FLOPs plus recomputed work, so HFU is never below MFU (equal
// when nothing is recomputed; above it under full recompute). Rounding slack 1e-12 relative.
TEST(Estimate, HfuNotBelowMfu) {
  for (const char* rec : {"none", "selective", "full"}) {
    SCOPED_TRACE(rec);
    Json j = llama8b_node("bf16");
    j["parallel"]["recompute"] = rec;
    const StepEstimate e = estimate_step(parse(j));
    EXPECT_GE(e.hfu, e.mfu * (1.0 - 1e-12)) << "hfu " << e.hfu << " mfu " << e.mfu;
    if (std::string(rec) == "full") {
      EXPECT_GT(e.hfu, e.mfu * 1.2);  // full recompute re-runs the whole forward (~4/3 of 3 passes)
    }
  }
}


// Chunked TP overlap: of a collective of time c overlapped with a GEMM of time g in tp chunks,
// the first chunk c/tp is exposed, the rest hides behind the GEMM, and the GEMM loses the SMs
// the communication kernels take (16 of the GPU's SMs) while they run beside it.
TEST(Workload, TpOverlapExposesFirstChunkAndSlowsTheGemm) {
  Json j = {{"model", "llama3.1-70b"},
            {"hardware", "h100-sxm"},
            {"cluster", {{"num_gpus", 8}}},
            {"training", {{"seq_len", 4096}, {"global_batch_size", 8}}},
            {"parallel", {{"tp", 8}, {"sp", true}, {"micro_batch_size", 1}, {"tp_comm_overlap", true}}}};
  const RunConfig rc = config::parse_run(j, "<overlap-test>", "");
  WorkloadBuilder wb(rc);
  const double f = 16.0 / 132.0;
  int checked = 0;
  double expected = 0;
  for (const auto& o : wb.dense_layer().fwd) {
    if (o.kind != OpKind::kComm || o.comm != CommKind::kTp) continue;
    ASSERT_DOUBLE_EQ(o.overlap_chunks, 8.0);
    ASSERT_NEAR(o.overlap_sm_fraction, f, 1e-12);
    const double c = o.time.value(), g = o.hidden_by.value();
    ASSERT_GT(g, 0.0);
    expected += c / 8.0 + std::max(0.0, c * 7.0 / 8.0 - g) + std::min(c * 7.0 / 8.0, g) * f / (1.0 - f);
    ++checked;
  }
  EXPECT_EQ(checked, 4);  // all-gather before QKV and fc1, reduce-scatter after o_proj and fc2
  // The layer's forward exposed communication is exactly the TP part here (no CP/EP).
  EXPECT_NEAR(wb.dense_layer().fwd_comm_exposed.value(), expected, 1e-12 * expected);
}


// PyTorch's async TP leaves the column-parallel blocks' input-gradient reduce-scatters unfused
// (tp_overlap_input_grad false): in the backward those two collectives (before QKV and fc1)
// carry no GEMM to hide behind and are exposed whole, the other two keep their chunked overlap,
// and the forward is unchanged. Its compiled fused gathers keep each linear's sequence shard
// (sim/memory), so the weight gradient's re-gather runs fused with that GEMM: hidden behind it.
// fp8 linears that quantize the sequence shard before gathering it (Transformer Engine, torchao's
// float8 TP) move one byte per element in every TP all-gather: the forward input, its backward
// re-gather and the row-parallel output gradient. The reduce-scatters of GEMM outputs stay
// 16-bit, and so does the output layer's gather.
TEST(Workload, Fp8TpGathersMoveOneBytePerElement) {
  Json j = {{"model", "llama3.1-70b"},
            {"hardware", "h100-sxm"},
            {"cluster", {{"num_gpus", 8}}},
            {"training", {{"seq_len", 4096}, {"global_batch_size", 8}, {"precision", "fp8"}}},
            {"parallel", {{"tp", 8}, {"sp", true}, {"micro_batch_size", 1}}}};
  const auto bytes_by_name = [](const config::RunConfig& rc) {
    const WorkloadBuilder wb(rc);
    std::map<std::string, double> out;
    for (const auto* ops : {&wb.dense_layer().fwd, &wb.dense_layer().bwd, &wb.output_layer().fwd, &wb.output_layer().bwd}) {
      for (const auto& o : *ops) {
        if (o.kind == OpKind::kComm && o.comm == CommKind::kTp) out[o.name] = o.bytes.value();
      }
    }
    return out;
  };
  const RunConfig fp8 = config::parse_run(j, "<fp8-gather>", "");
  EXPECT_TRUE(fp8.training.fp8_tp_gather);  // the default under fp8
  j["training"]["fp8_tp_gather"] = false;
  const RunConfig wide = config::parse_run(j, "<fp8-gather>", "");
  const double full = 4096.0 * 8192.0 * 2.0;  // tokens x hidden x 16-bit
  const auto a = bytes_by_name(fp8), w = bytes_by_name(wide);
  const char* const gathers[] = {"attn_in.ag", "mlp_in.ag", "attn_in.ag_wgrad", "mlp_in.ag_wgrad", "attn_out.ag_grad", "mlp_out.ag_grad"};
  const char* const wide_always[] = {"attn_in.rs_grad", "mlp_in.rs_grad", "attn_out.rs", "mlp_out.rs", "lm_head_in.ag", "lm_head_in.rs_grad"};
  for (const char* name : gathers) {
    ASSERT_TRUE(a.contains(name) && w.contains(name)) << name;
    EXPECT_DOUBLE_EQ(w.at(name), full) << name;
    EXPECT_DOUBLE_EQ(a.at(name), full / 2) << name;
  }
  for (const char* name : wide_always) {
    ASSERT_TRUE(a.contains(name) && w.contains(name)) << name;
    EXPECT_DOUBLE_EQ(a.at(name), full) << name;
    EXPECT_DOUBLE_EQ(w.at(name), full) << name;
  }
  EXPECT_LT(estimate::estimate_step(fp8).step_time_s, estimate::estimate_step(wide).step_time_s);
}

// Llama 3.1 8B in fp8 on 8 H100s, one sequence of 4096 tokens per micro-batch, no TP.
Json fp8_llama8b_run() {
  return {{"model", "llama3.1-8b"},
          {"hardware", "h100-sxm"},
          {"cluster", {{"num_gpus", 8}}},
          {"training", {{"seq_len", 4096}, {"global_batch_size", 8}, {"precision", "fp8"}}},
          {"parallel", {{"tp", 1}, {"micro_batch_size", 1}}}};
}

// fp8 weights cast at every use (training.fp8_weights "cast"): Transformer Engine's
// cast-transpose in forward (read 2, write 1 + 1 bytes per weight), torchao a cast in forward
// and a transposed one in backward (read 2, write 1 each). fp8 parameters and cached weights are
// quantized once per step, not per micro-batch; weights gathered in fp8 arrive quantized.
TEST(Workload, Fp8WeightsCastAtEveryUseOnlyWhenNotKept) {
  Json j = fp8_llama8b_run();
  const auto cast_bytes = [](const config::RunConfig& rc, bool backward) {
    const WorkloadBuilder wb(rc);
    double sum = 0;
    for (const auto& o : backward ? wb.dense_layer().bwd : wb.dense_layer().fwd) {
      if (o.name.find(".fp8_weight_cast") != std::string::npos) sum += o.bytes.value();
    }
    return sum;
  };
  const RunConfig primary = config::parse_run(j, "<fp8-weights>", "");
  const double weights = primary.model.mixer_params(primary.model.layer_kind(0)) + primary.model.dense_mlp_params() -
                         2.0 * static_cast<double>(primary.model.hidden);  // less the two RMSNorm weights
  EXPECT_EQ(cast_bytes(primary, false) + cast_bytes(primary, true), 0.0);
  j["training"]["fp8_weights"] = "cached";
  EXPECT_EQ(cast_bytes(config::parse_run(j, "<fp8-weights>", ""), false), 0.0);
  j["training"]["fp8_weights"] = "cast";
  const RunConfig te = config::parse_run(j, "<fp8-weights>", "");
  EXPECT_DOUBLE_EQ(cast_bytes(te, false), 4.0 * weights);
  EXPECT_EQ(cast_bytes(te, true), 0.0);
  EXPECT_GT(estimate::estimate_step(te).step_time_s, estimate::estimate_step(primary).step_time_s);
  j["training"]["fp8_saved_inputs"] = false;  // torchao's conventions, which default to casting
  j["training"].erase("fp8_weights");
  const RunConfig torchao = config::parse_run(j, "<fp8-weights>", "");
  EXPECT_DOUBLE_EQ(cast_bytes(torchao, false), 3.0 * weights);
  EXPECT_DOUBLE_EQ(cast_bytes(torchao, true), 3.0 * weights);
  j["training"]["gather_dtype"] = "fp8";
  j["parallel"]["fsdp"] = true;
  EXPECT_EQ(cast_bytes(config::parse_run(j, "<fp8-weights>", ""), false), 0.0);
}

// Under fp8_norm_quantize the norm writes the fp8 input of the linears fused with it (qkv and
// fc1 of a Llama layer): no cast pass in forward, and their weight gradient transposes the kept
// fp8 input (2 bytes per element) instead of casting (3); the other linears are unchanged.
TEST(Workload, Fp8NormQuantizeDropsTheNormFedLinearsInputCasts) {
  Json j = fp8_llama8b_run();
  const auto bytes = [](const config::RunConfig& rc, const std::string& name) {
    const WorkloadBuilder wb(rc);
    double sum = 0;
    for (const auto* ops : {&wb.dense_layer().fwd, &wb.dense_layer().bwd}) {
      for (const auto& o : *ops) {
        if (o.name == name) sum += o.bytes.value();
      }
    }
    return sum;
  };
  const RunConfig te = config::parse_run(j, "<fp8-norm>", "");
  ASSERT_TRUE(te.training.fp8_norm_quantize);
  j["training"]["fp8_norm_quantize"] = false;
  const RunConfig own = config::parse_run(j, "<fp8-norm>", "");
  const double T = 4096, h = 4096, qkv_out = 6144, f = 14336;
  EXPECT_EQ(bytes(te, "qkv.cast"), 0.0);
  EXPECT_DOUBLE_EQ(bytes(own, "qkv.cast"), 3.0 * T * h);
  EXPECT_EQ(bytes(te, "fc1.cast"), 0.0);
  EXPECT_DOUBLE_EQ(bytes(te, "qkv.cast_bwd"), 3.0 * T * qkv_out + 2.0 * T * h);
  EXPECT_DOUBLE_EQ(bytes(own, "qkv.cast_bwd"), 3.0 * T * qkv_out + 3.0 * T * h);
  EXPECT_DOUBLE_EQ(bytes(te, "fc2.cast"), 3.0 * T * f);  // fed by the activation, cast on its own
  EXPECT_DOUBLE_EQ(bytes(te, "fc2.cast"), bytes(own, "fc2.cast"));
  EXPECT_LT(estimate::estimate_step(te).step_time_s, estimate::estimate_step(own).step_time_s);
  j["training"]["precision"] = "bf16";
  j["training"]["fp8_norm_quantize"] = true;
  EXPECT_THROW((void)config::parse_run(j, "<fp8-norm>", ""), core::UserError);
}

TEST(Workload, AsyncTpLeavesTheInputGradientReduceScatterExposed) {
  Json j = {{"model", "llama3.1-70b"},
            {"hardware", "h100-sxm"},
            {"cluster", {{"num_gpus", 8}}},
            {"training", {{"seq_len", 4096}, {"global_batch_size", 8}}},
            {"parallel", {{"tp", 8}, {"sp", true}, {"micro_batch_size", 1}, {"tp_comm_overlap", true}, {"tp_saves_gathered_input", true}}}};
  const RunConfig te = config::parse_run(j, "<overlap-test>", "");
  j["parallel"]["tp_overlap_input_grad"] = false;
  const RunConfig async_tp = config::parse_run(j, "<overlap-test>", "");
  const WorkloadBuilder wt(te), wa(async_tp);
  int exposed = 0, hidden = 0, regathers = 0;
  double qkv_wgrad = 0;
  for (const auto& o : wa.dense_layer().bwd) {
    if (o.weight_grad && o.name.starts_with("qkv")) qkv_wgrad += o.time.value();
  }
  for (const auto& o : wa.dense_layer().bwd) {
    if (o.kind != OpKind::kComm || o.comm != CommKind::kTp) continue;
    const bool input_grad = o.name.find("rs_grad") != std::string::npos;
    EXPECT_EQ(o.hidden_by.value() == 0.0, input_grad) << o.name;
    (input_grad ? exposed : hidden)++;
    if (o.name.ends_with(".ag_wgrad")) ++regathers;
    if (o.name == "attn_in.ag_wgrad") {
      EXPECT_DOUBLE_EQ(o.hidden_by.value(), qkv_wgrad);
    }
  }
  EXPECT_EQ(exposed, 2);
  EXPECT_EQ(hidden, 4);
  EXPECT_EQ(regathers, 2);
  EXPECT_DOUBLE_EQ(wa.dense_layer().fwd_comm_exposed.value(), wt.dense_layer().fwd_comm_exposed.value());
  EXPECT_GT(wa.dense_layer().bwd_comm_exposed.value(), wt.dense_layer().bwd_comm_exposed.value());
}

// Megatron-LM's and Transformer Engine's linear layers without comm-overlap kernels
// (tp_async_backward): in a dense layer's backward under SP, each column-parallel block (QKV,
// fc1) gathers its kept input shard again beside its input-gradient GEMM and reduce-scatters
// the input gradient beside its weight-gradient GEMM (one whole collective beside one GEMM, not
// chunked); the row-parallel blocks' gradient gathers stay in line. Without SP the input
// gradient's all-reduce runs beside the weight-gradient GEMM. The forward is unchanged. The
// blocking variant runs the same re-gather and reduce-scatter in line (exposed whole); a linear
// that keeps its gathered input (DTensor) gathers nothing again. Unset, the flag follows the
// layout: on under SP with the shard kept (the Megatron-LM / Transformer Engine layers).
TEST(Workload, AsyncLinearBackwardHidesTheColumnParallelCollectives) {
  Json j = {{"model", "llama3.1-70b"},
            {"hardware", "h100-sxm"},
            {"cluster", {{"num_gpus", 8}}},
            {"training", {{"seq_len", 4096}, {"global_batch_size", 8}}},
            {"parallel", {{"tp", 8}, {"sp", true}, {"micro_batch_size", 1}}}};
  const RunConfig unset = config::parse_run(j, "<async-test>", "");
  EXPECT_TRUE(unset.parallel.async_linear_backward());
  j["parallel"]["tp_async_backward"] = false;
  const RunConfig blocking = config::parse_run(j, "<async-test>", "");
  EXPECT_FALSE(blocking.parallel.async_linear_backward());
  j["parallel"]["tp_async_backward"] = true;
  const RunConfig async = config::parse_run(j, "<async-test>", "");
  EXPECT_DOUBLE_EQ(estimate::estimate_step(unset).step_time_s, estimate::estimate_step(async).step_time_s);
  const WorkloadBuilder wb(blocking), wa(async);
  const auto& la = wa.dense_layer();
  int regathers = 0, reductions = 0, inline_gathers = 0;
  double exposed = 0;
  for (const auto& o : la.bwd) {
    if (o.kind != OpKind::kComm || o.comm != CommKind::kTp) continue;
    EXPECT_LE(o.overlap_chunks, 1) << o.name;  // not chunked
    const double c = o.time.value(), g = o.hidden_by.value();
    if (o.name.ends_with(".ag_wgrad")) {
      ++regathers;
      EXPECT_GT(g, 0.0) << o.name;
    } else if (o.name.ends_with(".rs_grad")) {
      ++reductions;
      EXPECT_GT(g, 0.0) << o.name;
    } else {
      ++inline_gathers;
      EXPECT_EQ(g, 0.0) << o.name;
    }
    exposed += std::max(0.0, c - g);
  }
  EXPECT_EQ(regathers, 2);
  EXPECT_EQ(reductions, 2);
  EXPECT_EQ(inline_gathers, 2);
  EXPECT_NEAR(la.bwd_comm_exposed.value(), exposed, 1e-12 * exposed);
  EXPECT_GT(async.hardware.collective_slowdown(), 0.0);  // hidden collectives still slow the GEMM beside them
  // Each hidden reduce-scatter runs beside exactly its block's weight-gradient GEMMs.
  double qkv_wgrad = 0;
  for (const auto& o : la.bwd) {
    if (o.weight_grad && o.name.starts_with("qkv")) qkv_wgrad += o.time.value();
  }
  bool found = false;
  for (const auto& o : la.bwd) {
    if (o.name == "attn_in.rs_grad") {
      EXPECT_DOUBLE_EQ(o.hidden_by.value(), qkv_wgrad);
      found = true;
    }
  }
  EXPECT_TRUE(found);
  EXPECT_LT(la.bwd_comm_exposed.value(), wb.dense_layer().bwd_comm_exposed.value());
  EXPECT_GT(la.bwd_compute.value(), wb.dense_layer().bwd_compute.value());  // the SMs the hidden collectives take
  EXPECT_DOUBLE_EQ(la.fwd_comm_exposed.value(), wb.dense_layer().fwd_comm_exposed.value());
  // Blocking: the same collectives, each exposed whole.
  int blocking_regathers = 0;
  double blocking_exposed = 0;
  for (const auto& o : wb.dense_layer().bwd) {
    if (o.kind != OpKind::kComm || o.comm != CommKind::kTp) continue;
    EXPECT_EQ(o.hidden_by.value(), 0.0) << o.name;
    blocking_regathers += o.name.ends_with(".ag_wgrad");
    blocking_exposed += o.time.value();
  }
  EXPECT_EQ(blocking_regathers, 2);
  EXPECT_NEAR(wb.dense_layer().bwd_comm_exposed.value(), blocking_exposed, 1e-12 * blocking_exposed);
  // A linear that keeps its all-gathered input (DTensor) gathers nothing again, and leaves the
  // flag off when unset.
  Json kept = j;
  kept["parallel"].erase("tp_async_backward");
  kept["parallel"]["tp_saves_gathered_input"] = true;
  const RunConfig kept_rc = config::parse_run(kept, "<async-test>", "");
  EXPECT_FALSE(kept_rc.parallel.async_linear_backward());
  const WorkloadBuilder wk(kept_rc);
  for (const auto& o : wk.dense_layer().bwd) EXPECT_FALSE(o.name.ends_with(".ag_wgrad")) << o.name;
  EXPECT_LT(wk.dense_layer().bwd_comm_exposed.value(), wb.dense_layer().bwd_comm_exposed.value());
  // Under Transformer Engine's comm-overlap kernels the re-gather overlaps the input-gradient
  // GEMM as the other overlapped TP collectives do (chunked, the GEMM losing the overlap SMs).
  Json ub = j;
  ub["parallel"].erase("tp_async_backward");
  ub["parallel"]["tp_comm_overlap"] = true;
  const WorkloadBuilder wu(config::parse_run(ub, "<async-test>", ""));
  int ub_regathers = 0;
  for (const auto& o : wu.dense_layer().bwd) {
    if (!o.name.ends_with(".ag_wgrad")) continue;
    ++ub_regathers;
    EXPECT_GT(o.hidden_by.value(), 0.0) << o.name;
    EXPECT_EQ(o.overlap_chunks, 8.0) << o.name;
  }
  EXPECT_EQ(ub_regathers, 2);
  // Without SP: the all-reduce of each column-parallel block's input gradient, beside its
  // weight-gradient GEMM, and nothing else in the backward.
  j["parallel"]["sp"] = false;
  const WorkloadBuilder wn(config::parse_run(j, "<async-test>", ""));
  int all_reduces = 0;
  for (const auto& o : wn.dense_layer().bwd) {
    if (o.kind != OpKind::kComm || o.comm != CommKind::kTp) continue;
    EXPECT_TRUE(o.name.ends_with(".ar_grad")) << o.name;
    EXPECT_GT(o.hidden_by.value(), 0.0) << o.name;
    ++all_reduces;
  }
  EXPECT_EQ(all_reduces, 2);
}

// PyTorch's non-reentrant checkpoint stops recomputing once the backward's saved tensors are back:
// a dense layer's recomputed forward leaves out the MLP down projection and what follows it
// (its TP reduce-scatter, the residual add), not what feeds it; with dropout after it (which
// saves a mask) the whole forward is recomputed.
TEST(Workload, EarlyStoppingCheckpointSkipsTheDownProjection) {
  Json j = {{"model", "llama3.1-8b"},
            {"hardware", "h100-sxm"},
            {"cluster", {{"num_gpus", 8}}},
            {"training", {{"seq_len", 4096}, {"global_batch_size", 8}}},
            {"parallel", {{"tp", 2}, {"sp", true}, {"micro_batch_size", 1}, {"recompute", "full"}}}};
  const RunConfig whole = config::parse_run(j, "<ac-test>", "");
  j["parallel"]["recompute_stops_early"] = true;
  const RunConfig early = config::parse_run(j, "<ac-test>", "");
  auto recomputed = [](const RunConfig& rc) {
    std::vector<std::string> names;
    for (const auto& o : WorkloadBuilder(rc).dense_layer().bwd) {
      if (o.name.starts_with("recompute.")) names.push_back(o.name.substr(10));
    }
    return names;
  };
  const auto all = recomputed(whole), cut = recomputed(early);
  ASSERT_FALSE(all.empty());
  auto has = [](const std::vector<std::string>& v, const std::string& n) { return std::find(v.begin(), v.end(), n) != v.end(); };
  EXPECT_TRUE(has(all, "fc2"));
  EXPECT_FALSE(has(cut, "fc2"));
  for (const auto& n : cut) EXPECT_FALSE(n.starts_with("fc2")) << n;
  EXPECT_TRUE(has(cut, "fc1"));
  EXPECT_TRUE(has(cut, "qkv"));
  const WorkloadBuilder ww(whole), we(early);
  EXPECT_LT(we.dense_layer().recompute.value(), ww.dense_layer().recompute.value());
  // Dropout keeps the whole recomputation.
  j["training"]["dropout"] = true;
  EXPECT_TRUE(has(recomputed(config::parse_run(j, "<ac-test>", "")), "fc2"));
}

// DeepSpeed-style pipelines: every TP rank sends the whole activation (tp times Megatron's
// 1/tp slice), and 16-bit gradients are folded into the fp32 buffer each micro-batch (one
// extra HBM pass over the layer's parameters: 2 + 4 + 4 bytes each).
TEST(Workload, DeepSpeedPipelineSendsAndGradientAccumulation) {
  Json j = {{"model", "llama3.1-8b"},
            {"hardware", "a100-sxm-80gb"},
            {"cluster", {{"num_gpus", 16}}},
            {"training", {{"seq_len", 2048}, {"global_batch_size", 16}, {"grad_dtype", "fp32"}}},
            {"parallel", {{"tp", 4}, {"pp", 4}, {"micro_batch_size", 1}}}};
  const RunConfig base = config::parse_run(j, "<ds-test>", "");
  j["parallel"]["pp_send_full_activation"] = true;
  j["training"]["lp_grads"] = true;
  const RunConfig ds = config::parse_run(j, "<ds-test>", "");
  const WorkloadBuilder wb(base), wd(ds);
  EXPECT_DOUBLE_EQ(wd.p2p_bytes().value(), 4.0 * wb.p2p_bytes().value());
  const auto& m = ds.model;
  const double layer_params = (m.attention_params() + m.dense_mlp_params()) / 4.0;
  bool found = false;
  for (const auto& o : wd.dense_layer().bwd) {
    if (o.name == "grad_accumulate") {
      found = true;
      EXPECT_DOUBLE_EQ(o.bytes.value(), layer_params * (2.0 + 8.0));
    }
  }
  EXPECT_TRUE(found);
  for (const auto& o : wb.dense_layer().bwd) EXPECT_NE(o.name, "grad_accumulate");
}

// GPT-2 124M on one GPU: 8 sequences of 1,024 tokens in one micro-batch.
Json gpt2_one_gpu() {
  return {{"model", "gpt2-124m"},
          {"hardware", "h100-sxm"},
          {"cluster", {{"num_gpus", 1}}},
          {"training", {{"seq_len", 1024}, {"global_batch_size", 8}}},
          {"parallel", {{"micro_batch_size", 8}}}};
}

// Eager element-wise work: RMSNorm x9, rotary x5, gated activation x5/3 the fused passes;
// LayerNorm stays one kernel.
TEST(Workload, EagerElementwiseMultipliesPasses) {
  auto bytes_of = [](const LayerCost& lc, const std::string& name) {
    for (const auto& o : lc.fwd) {
      if (o.name == name) return o.bytes.value();
    }
    return -1.0;
  };
  Json j = {{"model", "llama3.1-8b"},
            {"hardware", "h100-sxm"},
            {"cluster", {{"num_gpus", 8}}},
            {"training", {{"seq_len", 4096}, {"global_batch_size", 8}}},
            {"parallel", {{"micro_batch_size", 1}}}};
  const WorkloadBuilder fused(config::parse_run(j, "<eager-test>", ""));
  j["training"]["fused_elementwise"] = false;
  const WorkloadBuilder eager(config::parse_run(j, "<eager-test>", ""));
  EXPECT_DOUBLE_EQ(bytes_of(eager.dense_layer(), "norm1"), 9.0 * bytes_of(fused.dense_layer(), "norm1"));
  EXPECT_DOUBLE_EQ(bytes_of(eager.dense_layer(), "rope"), 5.0 * bytes_of(fused.dense_layer(), "rope"));
  EXPECT_DOUBLE_EQ(bytes_of(eager.dense_layer(), "activation"), 5.0 / 3.0 * bytes_of(fused.dense_layer(), "activation"));
  Json g = gpt2_one_gpu();
  g["training"]["fused_elementwise"] = false;
  const WorkloadBuilder gpt_eager(config::parse_run(g, "<eager-test>", ""));
  g["training"]["fused_elementwise"] = true;
  const WorkloadBuilder gpt_fused(config::parse_run(g, "<eager-test>", ""));
  EXPECT_DOUBLE_EQ(bytes_of(gpt_eager.dense_layer(), "norm1"), bytes_of(gpt_fused.dense_layer(), "norm1"));
}

// An embedding norm (BLOOM) is one norm pass over the looked-up embeddings in forward, keeping
// them for backward (saved bytes = tokens x hidden x 2), and its backward pass.
TEST(Workload, EmbeddingNormAddsItsPassesAndSavedInput) {
  const Json j = gpt2_one_gpu();
  const WorkloadBuilder plain(config::parse_run(j, "<embed-norm-test>", ""));
  auto rc = config::parse_run(j, "<embed-norm-test>", "");
  rc.model.embedding_norm = true;
  const WorkloadBuilder normed(rc);
  ASSERT_EQ(normed.embedding().fwd.size(), plain.embedding().fwd.size() + 1);
  ASSERT_EQ(normed.embedding().bwd.size(), plain.embedding().bwd.size() + 1);
  const Op& f = normed.embedding().fwd.back();
  EXPECT_EQ(f.name, "embedding_norm");
  EXPECT_DOUBLE_EQ(f.saved_bytes, 8.0 * 1024.0 * 768.0 * 2.0);
  EXPECT_GT(normed.embedding().fwd_compute.value(), plain.embedding().fwd_compute.value());
}

// FSDP that gathers the stored fp32 parameters (no FSDP param_dtype, as Composer's 2023
// 'DEFAULT'): every linear casts its fp32 weight to bf16 per forward use (read 4 + write 2 bytes
// per element) and its bf16 weight gradient back to fp32 and, for a bf16 reduction, to bf16
// again (2 + 4 + 4 + 2); the gathers move twice the bytes. Gathering bf16 copies (PyTorch FSDP
// MixedPrecision) costs none of that.
TEST(Workload, Fp32GatheredWeightsAreCastPerUse) {
  Json j = fsdp_llama8b(8, 4096, 8, 1);
  j["training"]["param_dtype"] = "fp32";
  j["training"]["grad_dtype"] = "fp32";
  auto find = [](const std::vector<Op>& ops, const std::string& name) -> const Op* {
    for (const auto& o : ops) {
      if (o.name == name) return &o;
    }
    return nullptr;
  };
  const RunConfig bf16_gather = config::parse_run(j, "<gather-test>", "");
  EXPECT_EQ(bf16_gather.training.gather_dtype, hw::Dtype::kBf16);
  EXPECT_EQ(bf16_gather.training.reduce_dtype, hw::Dtype::kFp32);  // defaults to grad_dtype
  EXPECT_EQ(find(WorkloadBuilder(bf16_gather).dense_layer().fwd, "qkv.weight_cast"), nullptr);
  j["training"]["gather_dtype"] = "fp32";
  j["training"]["reduce_dtype"] = "bf16";
  const RunConfig fp32_gather = config::parse_run(j, "<gather-test>", "");
  const WorkloadBuilder wb(fp32_gather);
  const Op* f = find(wb.dense_layer().fwd, "qkv.weight_cast");
  const Op* b = find(wb.dense_layer().bwd, "qkv.weight_grad_cast");
  ASSERT_NE(f, nullptr);
  ASSERT_NE(b, nullptr);
  const double qkv = 4096.0 * (4096.0 + 2.0 * 1024.0);  // weight elements, GQA 32 / 8 heads
  EXPECT_DOUBLE_EQ(f->bytes.value(), 6.0 * qkv);
  EXPECT_DOUBLE_EQ(b->bytes.value(), 12.0 * qkv);
  EXPECT_GT(estimate_step(fp32_gather).step_time_s, estimate_step(bf16_gather).step_time_s);
  // A bad dtype names the field.
  j["training"]["gather_dtype"] = "fp64";
  expect_refused_naming(j, "$.training.gather_dtype");
}

// Autocast over fp32 weights keeps the residual stream in fp32: the embedding is looked up in
// fp32 and each bf16 branch output added to it promotes the sum. The residual add then reads
// 4 + 2 bytes and writes 4 per element (10, against 6 with bf16 weights), its backward adds
// fp32 gradients (12 against 6), a norm reads 4 and writes 2 (6 against 4), and full
// recomputation keeps each layer's fp32 input (twice the bf16 checkpoint).
TEST(Workload, Fp32WeightsUnderAutocastKeepAnFp32ResidualStream) {
  Json j = fsdp_llama8b(8, 4096, 8, 1);
  j["training"]["param_dtype"] = "fp32";
  j["training"]["grad_dtype"] = "fp32";
  j["parallel"]["recompute"] = "full";
  const RunConfig bf16_gather = config::parse_run(j, "<residual-test>", "");
  j["training"]["gather_dtype"] = "fp32";
  const RunConfig fp32_gather = config::parse_run(j, "<residual-test>", "");
  EXPECT_DOUBLE_EQ(bf16_gather.residual_bytes(), 2.0);
  EXPECT_DOUBLE_EQ(fp32_gather.residual_bytes(), 4.0);
  const WorkloadBuilder narrow(bf16_gather), wide(fp32_gather);
  auto bytes_of = [](const LayerCost& lc, const std::string& name) {
    for (const auto* pass : {&lc.fwd, &lc.bwd}) {
      for (const auto& o : *pass) {
        if (o.name == name) return o.bytes.value();
      }
    }
    return -1.0;
  };
  const double elems = 4096.0 * 4096.0;  // tokens x hidden of one micro-batch
  EXPECT_DOUBLE_EQ(bytes_of(narrow.dense_layer(), "residual1"), 6.0 * elems);
  EXPECT_DOUBLE_EQ(bytes_of(wide.dense_layer(), "residual1"), 10.0 * elems);
  EXPECT_DOUBLE_EQ(bytes_of(narrow.dense_layer(), "residual2.bwd"), 6.0 * elems);
  EXPECT_DOUBLE_EQ(bytes_of(wide.dense_layer(), "residual2.bwd"), 12.0 * elems);
  EXPECT_DOUBLE_EQ(bytes_of(narrow.dense_layer(), "norm2"), 4.0 * elems);
  EXPECT_DOUBLE_EQ(bytes_of(wide.dense_layer(), "norm2"), 6.0 * elems);
  // A parallel block (GPT-J, Phi-1/2, Falcon 7B) runs its one norm before attention only.
  RunConfig parallel_block = bf16_gather;
  parallel_block.model.shared_block_norm = true;
  const WorkloadBuilder shared(parallel_block);
  EXPECT_EQ(bytes_of(shared.dense_layer(), "norm2"), -1.0);
  EXPECT_EQ(bytes_of(shared.dense_layer(), "norm2.bwd"), -1.0);
  EXPECT_DOUBLE_EQ(bytes_of(shared.dense_layer(), "norm1"), bytes_of(narrow.dense_layer(), "norm1"));
  EXPECT_DOUBLE_EQ(bytes_of(wide.embedding(), "embedding.gather"), 8.0 * elems);
  const auto m_narrow = estimate_step(bf16_gather).memory.stages[0];
  const auto m_wide = estimate_step(fp32_gather).memory.stages[0];
  // Each of the 32 layers' checkpointed inputs, and the final norm's input, grows from 2 to 4
  // bytes per element.
  EXPECT_DOUBLE_EQ(m_wide.activations.value() - m_narrow.activations.value(), 33.0 * 2.0 * elems);
  // Op-level selective checkpointing keeps the block input: 4 bytes per hidden element.
  EXPECT_DOUBLE_EQ(memory::selective_op_bytes_per_token(fp32_gather, false) - memory::selective_op_bytes_per_token(bf16_gather, false),
                   2.0 * 4096.0);
  // A pipeline stage sends and buffers its output hidden states: the fp32 stream, twice the bytes.
  Json pj = {{"model", "llama3.1-8b"},
             {"hardware", "h100-sxm"},
             {"cluster", {{"num_gpus", 8}}},
             {"training", {{"seq_len", 4096}, {"global_batch_size", 16}, {"param_dtype", "fp32"}, {"grad_dtype", "fp32"}}},
             {"parallel", {{"pp", 2}, {"tp", 1}, {"recv_buffer_per_microbatch", true}}}};
  const RunConfig pipe_wide = config::parse_run(pj, "<residual-test>", "");
  pj["training"]["param_dtype"] = "bf16";
  const RunConfig pipe_narrow = config::parse_run(pj, "<residual-test>", "");
  EXPECT_DOUBLE_EQ(WorkloadBuilder(pipe_wide).p2p_bytes().value(), 2.0 * WorkloadBuilder(pipe_narrow).p2p_bytes().value());
  EXPECT_DOUBLE_EQ(WorkloadBuilder(pipe_narrow).p2p_bytes().value(), 2.0 * elems);
  const auto recv_wide = memory::compute_ledger(pipe_wide).stages[1].buffers.value();
  const auto recv_narrow = memory::compute_ledger(pipe_narrow).stages[1].buffers.value();
  EXPECT_GT(recv_wide, recv_narrow);
  // Megatron-style bf16 parameters keep a bf16 stream whatever the optimizer holds.
  j["training"]["gather_dtype"] = "bf16";
  j["training"]["param_dtype"] = "bf16";
  EXPECT_DOUBLE_EQ(config::parse_run(j, "<residual-test>", "").residual_bytes(), 2.0);
}

// FSDP2 copies each gathered layer out of its all-gather buffer on the compute stream: read the
// gathered bf16 copy and write the unsharded parameters (4 bytes per parameter) per gather: in
// forward, and in backward when the forward resharded; a layer gathered once per step (no
// resharding, several micro-batches) pays none per micro-batch; full recomputation does not
// copy again (the backward's gather serves it); without the flag nothing is copied.
TEST(Workload, Fsdp2CopiesGatheredLayersOutOnTheComputeStream) {
  Json j = fsdp_llama8b(8, 4096, 8, 1);
  j["parallel"]["recompute"] = "full";
  auto count = [](const std::vector<Op>& ops, const std::string& name) {
    return std::count_if(ops.begin(), ops.end(), [&](const Op& o) { return o.name == name; });
  };
  const RunConfig off_rc = config::parse_run(j, "<copy-out-test>", "");
  const WorkloadBuilder off(off_rc);
  EXPECT_EQ(count(off.dense_layer().fwd, "fsdp.copy_out"), 0);
  j["parallel"]["fsdp_copy_out"] = true;
  const RunConfig on_rc = config::parse_run(j, "<copy-out-test>", "");
  const WorkloadBuilder on(on_rc);
  const LayerCost& l = on.dense_layer();
  ASSERT_EQ(count(l.fwd, "fsdp.copy_out"), 1);
  ASSERT_EQ(count(l.bwd, "fsdp.copy_out.bwd"), 1);
  EXPECT_EQ(count(l.bwd, "recompute.fsdp.copy_out"), 0);
  const auto& m = on_rc.model;
  EXPECT_DOUBLE_EQ(l.fwd.front().bytes.value(), 4.0 * (m.attention_params() + m.dense_mlp_params()));
  EXPECT_GT(estimate_step(on_rc).step_time_s, estimate_step(off_rc).step_time_s);
  EXPECT_GT(l.fwd_compute.value(), off.dense_layer().fwd_compute.value());
  // One micro-batch without resharding: gathered in forward only.
  j["parallel"]["reshard_after_forward"] = false;
  const WorkloadBuilder kept(config::parse_run(j, "<copy-out-test>", ""));
  EXPECT_EQ(count(kept.dense_layer().fwd, "fsdp.copy_out"), 1);
  EXPECT_EQ(count(kept.dense_layer().bwd, "fsdp.copy_out.bwd"), 0);
  // Several micro-batches without resharding: one gather per step, nothing per micro-batch.
  j["training"]["global_batch_size"] = 32;
  const WorkloadBuilder once(config::parse_run(j, "<copy-out-test>", ""));
  EXPECT_EQ(count(once.dense_layer().fwd, "fsdp.copy_out"), 0);
  // A layout that does not shard parameters keeps the flag and copies nothing.
  j["parallel"].erase("fsdp");
  j["parallel"]["zero_stage"] = 1;
  const WorkloadBuilder zero1(config::parse_run(j, "<copy-out-test>", ""));
  EXPECT_EQ(count(zero1.dense_layer().fwd, "fsdp.copy_out"), 0);
  j["parallel"]["fsdp_copy_out"] = "yes";
  expect_refused_naming(j, "$.parallel.fsdp_copy_out");
}

// Float8 all-gather (FSDP gathering fp8 weights under fp8 training): one byte per weight on
// the wire and in the gathered buffers, no per-use casts; under 16-bit training it is refused.
TEST(Workload, Fp8GatherHalvesTheGatheredBytes) {
  Json j = fsdp_llama8b(64, 8192, 128, 2);
  j["training"]["precision"] = "fp8";
  const RunConfig bf16_gather = config::parse_run(j, "<fp8-gather-test>", "");
  j["training"]["gather_dtype"] = "fp8";
  const RunConfig fp8_gather = config::parse_run(j, "<fp8-gather-test>", "");
  EXPECT_LT(estimate_step(fp8_gather).memory.stages[0].buffers.value(), estimate_step(bf16_gather).memory.stages[0].buffers.value());
  EXPECT_LE(estimate_step(fp8_gather).step_time_s, estimate_step(bf16_gather).step_time_s);
  j["training"]["precision"] = "bf16";
  expect_refused_naming(j, "$.training.gather_dtype");
}

// The operator view accounts for the whole layer: a layer kind's forward operators add up to
// the pass the estimate charges (compute plus the communication compute does not hide), and
// every operator of the layer is listed once, in order.
TEST(OperatorView, AddsUpToTheLayerPass) {
  Json j = uniform_pp_run(8);
  j["parallel"] = {{"tp", 4}, {"pp", 1}, {"micro_batch_size", 1}};
  const RunConfig rc = parse(j);
  const WorkloadBuilder wb(rc);
  const Json ops = report::operator_json(rc);
  for (const auto& [kind, layer] : {std::pair{"dense layer", &wb.dense_layer()}, std::pair{"output layer + loss", &wb.output_layer()}}) {
    const Json& fwd = ops.at(kind).at("forward");
    ASSERT_EQ(fwd.size(), layer->fwd.size()) << kind;
    double total = 0;
    for (const auto& o : fwd) total += o.at("kind") == "comm" ? o.at("time_s").get<double>() - o.at("hidden_s").get<double>() : o.at("time_s").get<double>();
    EXPECT_NEAR(total, layer->fwd_time().value(), 1e-9 * layer->fwd_time().value()) << kind;
  }
  EXPECT_EQ(ops.at("dense layer").at("forward").front().at("name"), wb.dense_layer().fwd.front().name);
  bool tp_comm = false;
  for (const auto& o : ops.at("dense layer").at("backward")) tp_comm = tp_comm || (o.at("kind") == "comm" && o.at("comm") == "tp");
  EXPECT_TRUE(tp_comm);
  EXPECT_FALSE(ops.contains("MoE layer"));
  const std::string table = report::operator_table(rc);
  EXPECT_NE(table.find("dense layer, backward"), std::string::npos) << table;
}

// The planner's layer-cost cache: layouts that differ only in their pipeline split, virtual
// stages, schedule or how many layers full recomputation covers share one entry, and their
// estimates are exactly those without the cache, except that schedules deferring the weight
// gradient (zero-bubble, DualPipeV) share one of their own (with tp_async_backward the layer's
// input-gradient reduction has no weight-gradient GEMM beside it there); any other setting
// (here tp, micro-batch, ZeRO stage, recompute mode) is a different entry. Entries hold totals,
// not operator lists.
TEST(WorkloadCache, SharesLayerCostsOnlyWhereTheyCannotDiffer) {
  auto run = [](Json parallel) {
    return Json{{"model", "qwen3-30b-a3b"},
                {"hardware", "h100-sxm"},
                {"cluster", {{"num_gpus", 32}}},
                {"training", {{"seq_len", 4096}, {"global_batch_size", 64}}},
                {"parallel", parallel}};
  };
  const Json base = {{"tp", 2}, {"pp", 4}, {"ep", 4}, {"etp", 1}, {"micro_batch_size", 1}, {"zero_stage", 1}, {"recompute", "full"}};
  // (layout, the cache's misses after it)
  std::vector<std::pair<Json, size_t>> same;
  same.emplace_back(base, 1);
  Json v = base;
  v.update(Json{{"vpp", 2}, {"schedule", "interleaved"}});
  same.emplace_back(v, 1);
  v = base;
  v.update(Json{{"first_stage_layers", 13}, {"last_stage_layers", 11}});
  same.emplace_back(v, 1);
  v = base;
  v.update(Json{{"recompute_layers", 3}});  // partial: the kept cost is in the shared entry too
  same.emplace_back(v, 1);
  v = base;
  v.update(Json{{"schedule", "zb-h1"}});
  same.emplace_back(v, 2);
  v.update(Json{{"vpp", 2}, {"schedule", "dualpipev"}});
  same.emplace_back(v, 2);
  WorkloadCache cache;
  for (size_t i = 0; i < same.size(); ++i) {
    const RunConfig rc = parse(run(same[i].first));
    const StepEstimate plain = estimate_step(rc);
    const StepEstimate cached = estimate_step(rc, memory::compute_ledger(rc), &cache);
    EXPECT_EQ(cached.step_time_s, plain.step_time_s) << same[i].first.dump();
    EXPECT_EQ(cached.breakdown.compute, plain.breakdown.compute) << same[i].first.dump();
    EXPECT_EQ(cache.misses(), same[i].second) << same[i].first.dump();
    EXPECT_EQ(cache.hits(), i + 1 - same[i].second) << same[i].first.dump();
  }
  // Why the deferring schedules keep their own entry: with the asynchronous linear backward a
  // layer's exposed TP time differs between 1F1B and ZB-H1.
  Json async = base;
  async["tp_async_backward"] = true;
  const WorkloadBuilder one_f_one_b(parse(run(async)));
  async["schedule"] = "zb-h1";
  const WorkloadBuilder zb(parse(run(async)));
  EXPECT_LT(one_f_one_b.dense_layer().bwd_comm_exposed.value(), zb.dense_layer().bwd_comm_exposed.value());
  ASSERT_NE(cache.find(parse(run(base))), nullptr);
  EXPECT_TRUE(cache.find(parse(run(base)))->kinds.front().cost.fwd.empty());
  for (const Json& change : {Json{{"tp", 4}}, Json{{"micro_batch_size", 2}}, Json{{"zero_stage", 0}}, Json{{"recompute", "selective"}}}) {
    Json other = base;
    other.update(change);
    const RunConfig rc = parse(run(other));
    EXPECT_EQ(cache.find(rc), nullptr) << change.dump();
    EXPECT_EQ(estimate_step(rc, memory::compute_ledger(rc), &cache).step_time_s, estimate_step(rc).step_time_s) << change.dump();
  }
  // A cache of one keeps only the latest layout.
  WorkloadCache one(1);
  const RunConfig a = parse(run(base));
  Json tp4 = base;
  tp4["tp"] = 4;
  const RunConfig b = parse(run(tp4));
  (void)estimate_step(a, memory::compute_ledger(a), &one);
  (void)estimate_step(b, memory::compute_ledger(b), &one);
  EXPECT_EQ(one.find(a), nullptr);
  EXPECT_NE(one.find(b), nullptr);
}

}  // namespace
}  // namespace stepcast::estimate
