// Memory ledger: exact ZeRO model-state bytes per parameter, Megatron's activation formula
// (Korthikanti et al. 2022) under TP / SP / recompute / CP, in-flight micro-batches per pipeline
// schedule, and the fits() verdict.
#include "sim/memory/ledger.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "sim/config/run_config.hpp"
#include "sim/engine/schedule.hpp"
#include "sim/core/json_reader.hpp"

namespace stepcast::memory {
namespace {

using config::RunConfig;
using core::Json;

// Exact formulas, evaluated in a different order than the library: 1e-9 relative.
void expect_rel(double got, double want, double rel = 1e-9) {
  EXPECT_NEAR(got, want, std::abs(want) * rel) << "got " << got << ", want " << want
                                               << " (ratio " << got / want << ")";
}

// ---------------------------------------------------------------------------------------------
// Model state per parameter.

StateBytes adam_bf16() {
  config::Training t;  // defaults: bf16 weights and grads, Adam, fp32 master
  return state_bytes(t);
}

// Mixed-precision Adam: 2 (bf16 weights) + 2 (bf16 grads) + 4 (fp32 master) + 8 (m, v) = 16.
// The envelope of a schedule's held counts gives the same peak as walking the order with the
// bytes themselves, for every schedule that walks its order (interleaved, ZB-H1, ZB-V,
// DualPipeV), every stage, and random per-chunk sizes (the weight-gradient share at most the
// chunk's activations, as the ledger has it). Exact up to summation order.
TEST(HeldEnvelope, PeakMatchesTheWalk) {
  uint64_t seed = 2026;
  auto uniform = [&] {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(seed >> 11) / 9007199254740992.0;
  };
  struct Case {
    config::Schedule sched;
    int64_t pp, m, v;
  };
  using config::Schedule;
  for (const Case& k : {Case{Schedule::kInterleaved, 4, 16, 2}, Case{Schedule::kInterleaved, 4, 24, 3}, Case{Schedule::kInterleaved, 8, 64, 8},
                        Case{Schedule::kZbH1, 4, 12, 1}, Case{Schedule::kZbH1, 8, 5, 1}, Case{Schedule::kZbV, 4, 24, 2},
                        Case{Schedule::kZbV, 8, 48, 2}, Case{Schedule::kDualPipeV, 4, 16, 2}, Case{Schedule::kDualPipeV, 8, 40, 2}}) {
    for (int64_t s = 0; s < k.pp; ++s) {
      const auto& env = held_envelope(k.sched, k.pp, s, k.m, k.v);
      ASSERT_FALSE(env.empty());
      for (int trial = 0; trial < 20; ++trial) {
        std::vector<double> full(static_cast<size_t>(k.v)), kept(static_cast<size_t>(k.v));
        for (int64_t c = 0; c < k.v; ++c) {
          full[static_cast<size_t>(c)] = 1.0 + 99.0 * uniform();
          kept[static_cast<size_t>(c)] = full[static_cast<size_t>(c)] * uniform();
        }
        double held = 0, walk = 0;
        engine::for_each_action(k.sched, static_cast<int32_t>(k.pp), static_cast<int32_t>(s), static_cast<int32_t>(k.m),
                                static_cast<int32_t>(k.v), [&](const engine::Action& a) {
                                  const auto c = static_cast<size_t>(a.chunk);
                                  held += a.phase == engine::Phase::kF    ? full[c]
                                          : a.phase == engine::Phase::kB  ? kept[c] - full[c]
                                          : a.phase == engine::Phase::kBW ? -full[c]
                                                                          : -kept[c];
                                  walk = std::max(walk, held);
                                });
        double best = 0;
        for (const auto& n : env) {
          double x = 0;
          for (int64_t c = 0; c < k.v; ++c) x += n[static_cast<size_t>(c)] * full[static_cast<size_t>(c)] + n[static_cast<size_t>(k.v + c)] * kept[static_cast<size_t>(c)];
          best = std::max(best, x);
        }
        EXPECT_NEAR(best, walk, 1e-9 * walk) << "schedule " << static_cast<int>(k.sched) << " pp " << k.pp << " stage " << s;
      }
    }
  }
}

TEST(ZeroBytes, AdamBf16IsSixteenBytes) {
  const StateBytes s = adam_bf16();
  EXPECT_DOUBLE_EQ(s.weights, 2.0);
  EXPECT_DOUBLE_EQ(s.gradients, 2.0);
  EXPECT_DOUBLE_EQ(s.optimizer, 12.0);
  EXPECT_DOUBLE_EQ(s.total(), 16.0);
}

// ZeRO over N ranks: stage 0 16; stage 1 2+2+12/N; stage 2 2+14/N; stage 3 16/N.
TEST(ZeroBytes, StagesShardTheRightStates) {
  const StateBytes s = adam_bf16();
  for (int64_t n : {1, 2, 8, 64, 1000}) {
    const double dn = static_cast<double>(n);
    SCOPED_TRACE(n);
    EXPECT_DOUBLE_EQ(zero_bytes_per_param(s, 0, n), 16.0);
    EXPECT_DOUBLE_EQ(zero_bytes_per_param(s, 1, n), 2.0 + 2.0 + 12.0 / dn);
    EXPECT_DOUBLE_EQ(zero_bytes_per_param(s, 2, n), 2.0 + 14.0 / dn);
    EXPECT_DOUBLE_EQ(zero_bytes_per_param(s, 3, n), 16.0 / dn);
  }
}

// fp32 gradients: 2 + 4 + 12 = 18 bytes per parameter.
TEST(ZeroBytes, Fp32GradsAreEighteenBytes) {
  config::Training t;
  t.grad_dtype = hw::Dtype::kFp32;
  const StateBytes s = state_bytes(t);
  EXPECT_DOUBLE_EQ(s.total(), 18.0);
  EXPECT_DOUBLE_EQ(zero_bytes_per_param(s, 0, 8), 18.0);
  EXPECT_DOUBLE_EQ(zero_bytes_per_param(s, 2, 8), 2.0 + 16.0 / 8.0);
}

// Planners' 12-byte convention: no fp32 master copy (bf16 weights + bf16 grads + 8-byte Adam).
TEST(ZeroBytes, NoMasterIsTwelveBytes) {
  config::Training t;
  t.master_weights = false;
  const StateBytes s = state_bytes(t);
  EXPECT_DOUBLE_EQ(s.total(), 12.0);
  EXPECT_DOUBLE_EQ(zero_bytes_per_param(s, 1, 4), 2.0 + 2.0 + 8.0 / 4.0);
}

// ---------------------------------------------------------------------------------------------
// Activations: GPT layer (f = 4h, kv heads = heads, plain GeLU MLP, dropout on, unfused
// attention), 16-bit activations.

constexpr int64_t kH = 1024;   // hidden
constexpr int64_t kA = 16;     // heads (= kv heads)
constexpr int64_t kS = 2048;   // sequence
constexpr int64_t kB = 2;      // micro-batch
constexpr int64_t kL = 8;      // layers

struct Layout {
  int64_t tp = 1, cp = 1, pp = 1, gpus = 1;
  bool sp = false;
  std::string recompute = "none";
  std::string schedule = "1f1b";
  int64_t global_batch = kB;
  std::string attention = "unfused";
};

RunConfig gpt_run(const Layout& l) {
  Json j = {
      {"model",
       {{"name", "gpt-test"},
        {"hidden_size", kH},
        {"num_attention_heads", kA},
        {"num_key_value_heads", kA},
        {"num_hidden_layers", kL},
        {"intermediate_size", 4 * kH},
        {"vocab_size", 32768},
        {"max_position_embeddings", kS},
        {"hidden_act", "gelu"}}},
      {"hardware", "h100-sxm"},
      {"cluster", {{"num_gpus", l.gpus}}},
      {"training",
       {{"seq_len", kS},
        {"global_batch_size", l.global_batch},
        {"precision", "bf16"},
        {"dropout", true},
        {"attention", l.attention}}},
      {"parallel",
       {{"tp", l.tp},
        {"cp", l.cp},
        {"pp", l.pp},
        {"sp", l.sp},
        {"micro_batch_size", kB},
        {"recompute", l.recompute},
        {"schedule", l.schedule}}},
  };
  return config::parse_run(j, "<ledger-test>", "");
}

const double s = kS, b = kB, h = kH, a = kA;

// No parallelism: s*b*h*(34 + 5*a*s/h) bytes per layer.
TEST(Activations, MegatronNoParallelism) {
  const RunConfig rc = gpt_run({});
  expect_rel(layer_activation_bytes(rc, false).value(), s * b * h * (34.0 + 5.0 * a * s / h));
}

// A parallel block (GPT-J, Phi-1/2, Falcon 7B) normalises once and feeds the same tensor to
// QKV and the MLP: one norm input and one linear input fewer, s*b*h*(30 + 5*a*s/h).
TEST(Activations, ParallelBlockKeepsOneNormAndItsOutputOnce) {
  RunConfig rc = gpt_run({});
  rc.model.shared_block_norm = true;
  expect_rel(layer_activation_bytes(rc, false).value(), s * b * h * (30.0 + 5.0 * a * s / h));
}

// Tensor parallel t without SP: s*b*h*(10 + 24/t + 5*a*s/(h*t)).
TEST(Activations, MegatronTensorParallel) {
  for (int64_t t : {2, 4, 8}) {
    SCOPED_TRACE(t);
    Layout l;
    l.tp = t;
    l.gpus = t;
    const RunConfig rc = gpt_run(l);
    const double dt = static_cast<double>(t);
    expect_rel(layer_activation_bytes(rc, false).value(),
               s * b * h * (10.0 + 24.0 / dt + 5.0 * a * s / (h * dt)));
  }
}

// TP + sequence parallel: everything splits, s*b*h/t*(34 + 5*a*s/h).
TEST(Activations, MegatronTensorPlusSequenceParallel) {
  for (int64_t t : {2, 4, 8}) {
    SCOPED_TRACE(t);
    Layout l;
    l.tp = t;
    l.gpus = t;
    l.sp = true;
    const RunConfig rc = gpt_run(l);
    const double dt = static_cast<double>(t);
    expect_rel(layer_activation_bytes(rc, false).value(), s * b * h / dt * (34.0 + 5.0 * a * s / h));
  }
}

// Selective recompute drops the 5*a*s/h attention-score term (recomputed in backward).
TEST(Activations, SelectiveRecomputeDropsScoreTerm) {
  Layout l;
  l.recompute = "selective";
  expect_rel(layer_activation_bytes(gpt_run(l), false).value(), s * b * h * 34.0);
  l.tp = 4;
  l.gpus = 4;
  expect_rel(layer_activation_bytes(gpt_run(l), false).value(), s * b * h * (10.0 + 24.0 / 4.0));
  l.sp = true;
  expect_rel(layer_activation_bytes(gpt_run(l), false).value(), s * b * h / 4.0 * 34.0);
}

// Full recompute keeps only each layer's 16-bit input: 2*s*b*h (2*s*b*h/t with SP).
TEST(Activations, FullRecomputeKeepsLayerInput) {
  Layout l;
  l.recompute = "full";
  expect_rel(layer_activation_bytes(gpt_run(l), false).value(), 2.0 * s * b * h);
  l.tp = 4;
  l.gpus = 4;
  expect_rel(layer_activation_bytes(gpt_run(l), false).value(), 2.0 * s * b * h);  // no SP: replicated
  l.sp = true;
  expect_rel(layer_activation_bytes(gpt_run(l), false).value(), 2.0 * s * b * h / 4.0);
}

// Context parallelism divides s: each CP rank holds s/cp tokens. Checked where no s x s term
// is stored (selective recompute, flash attention), so the whole footprint is linear in s.
TEST(Activations, ContextParallelDividesSequence) {
  for (int64_t cp : {2, 4}) {
    SCOPED_TRACE(cp);
    Layout l;
    l.recompute = "selective";
    l.cp = cp;
    l.gpus = cp;
    const double dcp = static_cast<double>(cp);
    expect_rel(layer_activation_bytes(gpt_run(l), false).value(), (s / dcp) * b * h * 34.0);
    Layout lf = l;
    lf.recompute = "none";
    lf.attention = "flash";
    Layout base = lf;
    base.cp = 1;
    base.gpus = 1;
    expect_rel(layer_activation_bytes(gpt_run(lf), false).value(),
               layer_activation_bytes(gpt_run(base), false).value() / dcp);
    Layout full = l;
    full.recompute = "full";
    expect_rel(layer_activation_bytes(gpt_run(full), false).value(), 2.0 * (s / dcp) * b * h);
  }
}

// Flash attention never stores the s x s scores: far less than the unfused layer at long s.
TEST(Activations, FlashStoresNoScores) {
  Layout l;
  l.attention = "flash";
  const double flash = layer_activation_bytes(gpt_run(l), false).value();
  EXPECT_LT(flash, s * b * h * 35.0);
  EXPECT_GE(flash, s * b * h * 34.0 - 1.0);  // keeps the linear terms (dropout masks included)
}

// ---------------------------------------------------------------------------------------------
// Pipeline schedules: micro-batches whose activations stage 0 holds at its peak.

// 1F1B: stage 0 holds min(m, p) micro-batches; GPipe holds all m.
TEST(Inflight, StageZeroOneFOneBAndGpipe) {
  for (int64_t m : {2, 4, 8, 16}) {
    SCOPED_TRACE(m);
    Layout l;
    l.pp = 4;
    l.gpus = 4;
    l.global_batch = kB * m;
    const RunConfig one = gpt_run(l);
    ASSERT_EQ(one.num_microbatches, m);
    EXPECT_DOUBLE_EQ(inflight_microbatches(one, 0), static_cast<double>(std::min<int64_t>(m, 4)));
    // Later stages hold fewer: stage r of p holds min(m, p - r).
    EXPECT_DOUBLE_EQ(inflight_microbatches(one, 3), 1.0);
    l.schedule = "gpipe";
    const RunConfig gp = gpt_run(l);
    EXPECT_DOUBLE_EQ(inflight_microbatches(gp, 0), static_cast<double>(m));
    EXPECT_DOUBLE_EQ(inflight_microbatches(gp, 3), static_cast<double>(m));
  }
}

// The ledger multiplies one micro-batch's stage activations by the in-flight count.
TEST(Inflight, LedgerActivationsScaleWithInflight) {
  Layout l;
  l.pp = 4;
  l.gpus = 4;
  l.global_batch = kB * 16;
  const MemoryLedger one = compute_ledger(gpt_run(l));
  l.schedule = "gpipe";
  const MemoryLedger gp = compute_ledger(gpt_run(l));
  EXPECT_EQ(one.stages[0].inflight_microbatches, 4);
  EXPECT_EQ(gp.stages[0].inflight_microbatches, 16);
  expect_rel(gp.stages[0].activations.value(), one.stages[0].activations.value() * 4.0);
  const double per_mb = layer_activation_bytes(gpt_run(l), false).value() * 2.0;  // 2 layers / stage
  expect_rel(one.stages[0].activations.value(), per_mb * 4.0);
}

// Interleaved 1F1B holds more on stage 0 than plain 1F1B (in whole-stage units).
TEST(Inflight, InterleavedHoldsMore) {
  Layout l;
  l.pp = 4;
  l.gpus = 4;
  l.global_batch = kB * 16;
  const double plain = inflight_microbatches(gpt_run(l), 0);
  RunConfig rc = gpt_run(l);
  rc.parallel.vpp = 2;
  rc.parallel.schedule = config::Schedule::kInterleaved;
  EXPECT_GT(inflight_microbatches(rc, 0), plain);
}

// Uneven chunks under interleaving: the in-flight passes are those of Megatron's order (the
// k-th forward runs chunk (k / pp) mod vpp), each holding its own chunk's layers.
TEST(Inflight, InterleavedUnevenChunksCountTheirOwnLayers) {
  Json j = {{"model", {{"hidden_size", 1024}, {"num_attention_heads", 16}, {"num_hidden_layers", 16}, {"intermediate_size", 4096},
                       {"vocab_size", 32768}, {"hidden_act", "silu"}}},
            {"hardware", "h100-sxm"},
            {"cluster", {{"num_gpus", 2}}},
            {"training", {{"seq_len", 1024}, {"global_batch_size", 4}}},
            {"parallel", {{"pp", 2}, {"vpp", 2}, {"stage_layers", {3, 4, 4, 5}}}}};
  const RunConfig rc = config::parse_run(j, "<ledger-test>", "");
  const double layer = layer_activation_bytes(rc, false).value();
  // Stage 1 (chunks of 4 and 5 layers), m = 4: 2(pp - 1 - 1) + (v - 1) pp + 1 = 3 passes in
  // flight, two of chunk 0 and one of chunk 1.
  EXPECT_DOUBLE_EQ(stage_layer_activation_bytes(rc, 1).value(), (2 * 4 + 1 * 5) * layer);
  // Stage 0 (chunks of 3 and 4 layers): 2(pp - 1) + (v - 1) pp + 1 = 5 passes, chunks 0, 0, 1,
  // 1, 0.
  EXPECT_DOUBLE_EQ(stage_layer_activation_bytes(rc, 0).value(), (3 * 3 + 2 * 4) * layer);
}

// ---------------------------------------------------------------------------------------------
// Whole ledger.

// The ledger holds exactly the model's parameters once (pp = 1, tp = 1, vocab needing no
// padding): stage params == total_params(), and ZeRO-1 state bytes follow 2+2+12/N.
TEST(Ledger, ModelStateMatchesZeroFormula) {
  Json j = {
      {"model", {{"hidden_size", 1024}, {"num_attention_heads", 16}, {"num_hidden_layers", 4},
                 {"intermediate_size", 4096}, {"vocab_size", 32768}, {"hidden_act", "silu"}}},
      {"hardware", "h100-sxm"},
      {"cluster", {{"num_gpus", 4}}},
      {"training", {{"seq_len", 1024}, {"global_batch_size", 4}}},
      {"parallel", {{"zero_stage", 1}}},
  };
  const RunConfig rc = config::parse_run(j, "<test>", "");
  const MemoryLedger l = compute_ledger(rc);
  ASSERT_EQ(l.stages.size(), 1u);
  const double psi = rc.model.total_params();
  expect_rel(l.stages[0].params, psi);
  expect_rel(l.stages[0].weights.value(), 2.0 * psi);
  expect_rel(l.stages[0].gradients.value(), 2.0 * psi);
  expect_rel(l.stages[0].optimizer.value(), 12.0 * psi / 4.0);
  expect_rel(l.stages[0].model_state().value(), zero_bytes_per_param(state_bytes(rc.training), 1, 4) * psi);
}

// Hybrid sharding: each replica holds a full copy of the sharded state, so ZeRO divides by the
// replica's dp ranks (times cp), not by all of them; stage 0 state is unchanged. The shard and
// replicate groups add a communicator each.
TEST(Ledger, HybridShardingShardsWithinAReplica) {
  Json j = {
      {"model", {{"hidden_size", 1024}, {"num_attention_heads", 16}, {"num_hidden_layers", 4},
                 {"intermediate_size", 4096}, {"vocab_size", 32768}, {"hidden_act", "silu"}}},
      {"hardware", "h100-sxm"},
      {"cluster", {{"num_gpus", 16}}},
      {"training", {{"seq_len", 1024}, {"global_batch_size", 16}}},
      {"parallel", {{"cp", 2}, {"fsdp", true}, {"dp_replicate", 4}}},
  };
  const RunConfig rc = config::parse_run(j, "<test>", "");
  ASSERT_EQ(rc.parallel.dp, 8);
  EXPECT_EQ(rc.parallel.shard_group(), 4);  // dp 8 / 4 replicas x cp 2
  const double psi = rc.model.total_params();
  const MemoryLedger l = compute_ledger(rc);
  expect_rel(l.stages[0].model_state().value(), zero_bytes_per_param(state_bytes(rc.training), 3, 4) * psi);
  j["parallel"]["dp_replicate"] = 1;
  const RunConfig whole = config::parse_run(j, "<test>", "");
  expect_rel(compute_ledger(whole).stages[0].model_state().value(), zero_bytes_per_param(state_bytes(rc.training), 3, 16) * psi);
  // world, cp, dp*cp, and the shard and replicate groups.
  EXPECT_EQ(nccl_communicators(rc, 0).first, nccl_communicators(whole, 0).first + 2);
}

// Same, for a GPT-2 style model (LayerNorm with bias, learned positions, tied embeddings): the
// final LayerNorm has 2h parameters.
TEST(Ledger, StageParamsIncludeWholeFinalLayerNorm) {
  Json j = {
      {"model", {{"model_type", "gpt2"}, {"n_embd", 768}, {"n_head", 12}, {"n_layer", 4},
                 {"n_positions", 1024}, {"vocab_size", 32768}}},
      {"hardware", "h100-sxm"},
      {"cluster", {{"num_gpus", 1}}},
      {"training", {{"seq_len", 1024}, {"global_batch_size", 1}}},
  };
  const RunConfig rc = config::parse_run(j, "<test>", "");
  const MemoryLedger l = compute_ledger(rc);
  EXPECT_DOUBLE_EQ(l.stages[0].params, rc.model.total_params())
      << "ledger params - model params = " << l.stages[0].params - rc.model.total_params();
}

// A small model on one 80 GB GPU fits; Llama-3.1-70B without sharding on one node does not
// (16 bytes x 70.6e9 params = 1.13 TB per GPU).
TEST(Ledger, FitsVerdict) {
  const Json small = {
      {"model", "gpt2-124m"},
      {"hardware", "h100-sxm"},
      {"cluster", {{"num_gpus", 1}}},
      {"training", {{"seq_len", 1024}, {"global_batch_size", 8}}},
      {"parallel", {{"micro_batch_size", 8}}},
  };
  const MemoryLedger ok = compute_ledger(config::parse_run(small, "<test>", ""));
  EXPECT_TRUE(ok.fits()) << ok.peak().value();
  const Json big = {
      {"model", "llama3.1-70b"},
      {"hardware", "h100-sxm"},
      {"cluster", {{"num_gpus", 8}}},
      {"training", {{"seq_len", 4096}, {"global_batch_size", 8}}},
      {"parallel", {{"tp", 1}, {"pp", 1}}},
  };
  const MemoryLedger no = compute_ledger(config::parse_run(big, "<test>", ""));
  EXPECT_FALSE(no.fits());
  EXPECT_GT(no.peak().value(), 16.0 * 70e9);
  EXPECT_GT(no.peak(), no.capacity);
}

// The last pipeline stage holds one micro-batch's logits (16-bit + fp32 copy for the loss).
TEST(Ledger, LastStageHoldsLogits) {
  Layout l;
  l.pp = 2;
  l.gpus = 2;
  l.global_batch = kB * 4;
  const RunConfig rc = gpt_run(l);
  const MemoryLedger led = compute_ledger(rc);
  EXPECT_DOUBLE_EQ(led.stages[0].logits.value(), 0.0);
  expect_rel(led.stages[1].logits.value(), s * b * static_cast<double>(rc.padded_vocab) * (2.0 + 4.0));
}

// Eager PyTorch cross-entropy: 16-bit logits + three fp32 tensors at its peak (14 bytes per
// logit in bf16); vocab-parallel adds the shifted fp32 copy (18).
TEST(Ledger, EagerLossKeepsThreeFp32Copies) {
  Layout l;
  RunConfig rc = gpt_run(l);
  rc.training.loss = config::LossImpl::kEager;
  EXPECT_DOUBLE_EQ(loss_peak_bytes_per_logit(rc), 14.0);
  rc.parallel.tp = 2;
  EXPECT_DOUBLE_EQ(loss_peak_bytes_per_logit(rc), 18.0);
  rc.training.loss = config::LossImpl::kFused;
  EXPECT_DOUBLE_EQ(loss_peak_bytes_per_logit(rc), 6.0);
}

// The peak adds the larger of the loss and the layer backward working set, not both.
TEST(Ledger, PeakTakesLargerOfLossAndLayerWorkingSet) {
  Layout l;
  const MemoryLedger led = compute_ledger(gpt_run(l));
  const StageMemory& st = led.stages[0];
  ASSERT_GT(st.logits.value(), 0.0);
  ASSERT_GT(st.transient.value(), 0.0);
  EXPECT_DOUBLE_EQ(st.total().value(), st.resident().value() + std::max(st.logits.value(), st.transient.value()));
  EXPECT_LT(st.total().value(), st.resident().value() + st.logits.value() + st.transient.value());
}

// FSDP mixed precision with fp32 parameters: 4 (fp32 params, the master) + 4 (fp32 grads) +
// 8 (Adam m, v) = 16 bytes, all sharded.
TEST(ZeroBytes, Fp32ParamsAreTheirOwnMaster) {
  config::Training t;
  t.param_dtype = hw::Dtype::kFp32;
  t.grad_dtype = hw::Dtype::kFp32;
  const StateBytes sb = state_bytes(t);
  EXPECT_DOUBLE_EQ(sb.weights, 4.0);
  EXPECT_DOUBLE_EQ(sb.gradients, 4.0);
  EXPECT_DOUBLE_EQ(sb.optimizer, 8.0);
  EXPECT_DOUBLE_EQ(zero_bytes_per_param(sb, 3, 8), 2.0);
}

// Llama-3.1-8B on 8 H100s under FSDP, 8k tokens, micro-batch 2: the activation tests' base.
Json llama8b_fsdp(const std::string& recompute) {
  return {{"model", "llama3.1-8b"},
          {"hardware", "h100-sxm"},
          {"cluster", {{"num_gpus", 8}}},
          {"training", {{"seq_len", 8192}, {"global_batch_size", 16}}},
          {"parallel", {{"fsdp", true}, {"micro_batch_size", 2}, {"recompute", recompute}}}};
}

// Op-level selective checkpointing on Llama-3.1-8B (h 4096, 32 heads, 8 KV heads of 128,
// gated ffn 14336): kept per token = block input 4096 + outputs of the 1st/3rd/5th/7th matmul
// (q 4096, v 1024, gate 14336, down 4096) + attention output 4096 = 31744 bf16 elements, plus
// the fp32 log-sum-exp of 32 heads.
TEST(Activations, SelectiveOpKeepsEveryOtherMatmul) {
  const RunConfig rc = config::parse_run(llama8b_fsdp("selective-op"), "<ledger-test>", "");
  EXPECT_DOUBLE_EQ(selective_op_bytes_per_token(rc, false), 31744.0 * 2.0 + 4.0 * 32.0);
  expect_rel(layer_activation_bytes(rc, false).value(), 16384.0 * (31744.0 * 2.0 + 128.0));
}

// K/V repeated to the query heads before attention: without recompute the attention keeps the
// expanded K and V (Llama-3.1-8B: 32 heads instead of 8, so 2 x (4096 - 1024) more bf16
// elements per token); op-level checkpointing keeps matmul outputs only, so it is unchanged.
TEST(Activations, RepeatedKvKeptOnlyWithoutRecompute) {
  Json j = llama8b_fsdp("none");
  j["training"]["attention"] = "flash2";
  Json expanded = j;
  expanded["training"]["repeat_kv"] = true;
  const double tokens = 16384.0;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(config::parse_run(expanded, "<ledger-test>", ""), false).value() -
                       layer_activation_bytes(config::parse_run(j, "<ledger-test>", ""), false).value(),
                   tokens * 2.0 * 2.0 * (4096.0 - 1024.0));
  j["parallel"]["recompute"] = expanded["parallel"]["recompute"] = "selective-op";
  EXPECT_DOUBLE_EQ(layer_activation_bytes(config::parse_run(expanded, "<ledger-test>", ""), false).value(),
                   layer_activation_bytes(config::parse_run(j, "<ledger-test>", ""), false).value());
}

// fp8 training with Transformer Engine keeps each linear layer's input for its weight gradient
// in fp8: the QKV and gate/up inputs (the norms' outputs, h each) and the down projection's
// input (the activation's output, ffn) drop from 2 bytes to 1, while the output projection keeps
// a 1-byte copy of the attention output beside the attention kernel's own (h more). Llama-3.1-8B,
// tp 1: (2h + ffn - h) = 4096 + 14336 fewer bytes per token. torchao float8 keeps the bf16
// inputs (fp8_saved_inputs false): the same bytes as bf16 training.
TEST(Activations, Fp8TrainingSavesLinearInputsInFp8) {
  Json j = llama8b_fsdp("none");
  j["training"]["precision"] = "bf16";
  const double bf16 = layer_activation_bytes(config::parse_run(j, "<ledger-test>", ""), false).value();
  j["training"]["precision"] = "fp8";
  const RunConfig te = config::parse_run(j, "<ledger-test>", "");
  EXPECT_TRUE(te.training.fp8_saved_inputs);  // the default under fp8
  EXPECT_DOUBLE_EQ(bf16 - layer_activation_bytes(te, false).value(), 16384.0 * (4096.0 + 14336.0));
  j["training"]["fp8_saved_inputs"] = false;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(config::parse_run(j, "<ledger-test>", ""), false).value(), bf16);
}

// fp8 weights: fp8 parameters with their transposes (the default under Transformer Engine's
// conventions) take the two bytes per weight 16-bit parameters take; 16-bit parameters with a
// cached fp8 copy and transpose take two more per layer parameter (the embedding and the output
// layer stay 16-bit); weights cast at every use add nothing. torchao's conventions default to
// casting.
TEST(Ledger, CachedFp8WeightsHoldTwoMoreBytesPerLayerWeight) {
  Json j = {{"model", "llama3.1-8b"},
            {"hardware", "h100-sxm"},
            {"cluster", {{"num_gpus", 8}}},
            {"training", {{"seq_len", 4096}, {"global_batch_size", 16}, {"precision", "fp8"}}},
            {"parallel", {{"tp", 2}, {"sp", true}, {"zero_stage", 1}, {"micro_batch_size", 1}}}};
  const RunConfig primary = config::parse_run(j, "<ledger-test>", "");
  EXPECT_EQ(primary.fp8_weights(), config::Fp8Weights::kPrimary);  // Transformer Engine's default
  j["training"]["fp8_weights"] = "cached";
  const RunConfig cached = config::parse_run(j, "<ledger-test>", "");
  j["training"]["fp8_weights"] = "cast";
  const RunConfig cast = config::parse_run(j, "<ledger-test>", "");
  const auto& m = cached.model;
  const double layer_params = (m.mixer_params(m.layer_kind(0)) + m.dense_mlp_params()) / 2.0;  // per TP rank
  const double w_primary = compute_ledger(primary).stages[0].weights.value();
  EXPECT_DOUBLE_EQ(compute_ledger(cached).stages[0].weights.value() - w_primary, 2.0 * layer_params * static_cast<double>(m.num_layers));
  EXPECT_DOUBLE_EQ(compute_ledger(cast).stages[0].weights.value(), w_primary);
  // A framework property: kept, and without effect, when a what-if trains in bf16.
  j["training"]["precision"] = "bf16";
  j["training"]["fp8_weights"] = "cached";
  EXPECT_DOUBLE_EQ(compute_ledger(config::parse_run(j, "<ledger-test>", "")).stages[0].weights.value(), w_primary);
  j["training"]["precision"] = "fp8";
  j["training"].erase("fp8_weights");
  j["training"]["fp8_saved_inputs"] = false;
  EXPECT_EQ(config::parse_run(j, "<ledger-test>", "").fp8_weights(), config::Fp8Weights::kCast);  // torchao
}

// What a deferred weight-gradient pass keeps per layer (each linear's input and output
// gradient): Transformer Engine's fp8 linears keep both quantized for their fp8 weight-gradient
// GEMM, half the bf16 bytes; torchao float8 keeps them 16-bit.
TEST(Ledger, DeferredWeightGradientKeepsFp8TensorsUnderTransformerEngine) {
  Json j = {{"model", "llama3.1-8b"},
            {"hardware", "h100-sxm"},
            {"cluster", {{"num_gpus", 8}}},
            {"training", {{"seq_len", 4096}, {"global_batch_size", 16}}},
            {"parallel", {{"tp", 2}, {"sp", true}, {"pp", 2}, {"micro_batch_size", 1}, {"schedule", "zb-h1"}}}};
  const double bf16 = layer_weight_grad_bytes(config::parse_run(j, "<ledger-test>", ""), false).value();
  EXPECT_GT(bf16, 0.0);
  j["training"]["precision"] = "fp8";
  EXPECT_DOUBLE_EQ(layer_weight_grad_bytes(config::parse_run(j, "<ledger-test>", ""), false).value(), bf16 / 2.0);
  j["training"]["fp8_saved_inputs"] = false;
  EXPECT_DOUBLE_EQ(layer_weight_grad_bytes(config::parse_run(j, "<ledger-test>", ""), false).value(), bf16);
}

// Recomputing N of a stage's layers: those keep only their input, the rest their full
// activations; the stage's activation bytes interpolate exactly between the two modes.
TEST(Activations, PartialRecomputeMixesTheTwoModes) {
  Json j = {{"model", "llama3.1-8b"},
            {"hardware", "h100-sxm"},
            {"cluster", {{"num_gpus", 8}}},
            {"training", {{"seq_len", 8192}, {"global_batch_size", 16}}},
            {"parallel", {{"tp", 8}, {"sp", true}, {"micro_batch_size", 1}, {"recompute", "none"}}}};
  const double none = stage_layer_activation_bytes(config::parse_run(j, "<ledger-test>", ""), 0).value();
  j["parallel"]["recompute"] = "full";
  const double full = stage_layer_activation_bytes(config::parse_run(j, "<ledger-test>", ""), 0).value();
  j["parallel"]["recompute_layers"] = 5;
  const double five = stage_layer_activation_bytes(config::parse_run(j, "<ledger-test>", ""), 0).value();
  EXPECT_DOUBLE_EQ(five, full * 5.0 / 32.0 + none * 27.0 / 32.0);
}

// The fewest recomputed layers that fit: with one layer fewer the ledger overflows; a layout
// that needs every layer recomputed (or fits nowhere) gives 0. Llama-3.1-70B on 16 H100s, tp 8
// pp 2 at 8k tokens.
TEST(Ledger, FewestRecomputeLayersThatFit) {
  Json j = {{"model", "llama3.1-70b"},
            {"hardware", "h100-sxm"},
            {"cluster", {{"num_gpus", 16}}},
            {"training", {{"seq_len", 8192}, {"global_batch_size", 64}}},
            {"parallel", {{"tp", 8}, {"pp", 2}, {"sp", true}, {"zero_stage", 1}, {"recompute", "full"}}}};
  RunConfig rc = config::parse_run(j, "<ledger-test>", "");
  const int64_t n = fewest_recompute_layers(rc);
  ASSERT_GT(n, 1);
  ASSERT_LT(n, 40);
  rc.parallel.recompute_layers = n;
  EXPECT_TRUE(compute_ledger(rc).fits());
  rc.parallel.recompute_layers = n - 1;
  EXPECT_FALSE(compute_ledger(rc).fits());
  // Half the memory: even recomputing every layer does not fit.
  rc.parallel.recompute_layers = 0;
  EXPECT_EQ(fewest_recompute_layers(rc, 0.5), 0);
}

// A layout that does not fit names the lightest full recomputation that does, else the CPU
// offload that does; none when nothing fits.
TEST(Ledger, FitHintNamesTheSettingsThatFit) {
  Json j = {{"model", "llama3.1-70b"},
            {"hardware", "h100-sxm"},
            {"cluster", {{"num_gpus", 16}}},
            {"training", {{"seq_len", 8192}, {"global_batch_size", 64}}},
            {"parallel", {{"tp", 8}, {"pp", 2}, {"sp", true}, {"zero_stage", 1}}}};
  RunConfig rc = config::parse_run(j, "<ledger-test>", "");
  ASSERT_FALSE(compute_ledger(rc).fits());
  RunConfig full = rc;
  full.parallel.recompute = config::Recompute::kFull;
  const int64_t n = fewest_recompute_layers(full);
  ASSERT_GT(n, 0);
  const std::string hint = fit_hint(rc);
  EXPECT_NE(hint.find("parallel.recompute \"full\""), std::string::npos) << hint;
  EXPECT_NE(hint.find("parallel.recompute_layers " + std::to_string(n) + " "), std::string::npos) << hint;
  // Already recomputing every layer: CPU offload of the sharded optimizer state is next, on a
  // profile that describes its host, and nothing without one.
  EXPECT_NE(fit_hint(full).find("parallel.offload \"optimizer\""), std::string::npos) << fit_hint(full);
  full.hardware.host.stated = false;
  EXPECT_EQ(fit_hint(full), "");
  j["model"] = "llama3.1-405b";
  EXPECT_EQ(fit_hint(config::parse_run(j, "<ledger-test>", "")), "");  // nothing fits
}

// A context-parallel attention backward holds more than the rank's own layer: with PyTorch's
// all-gather rotation every rank's K/V (as exchanged), fp32 dK/dV accumulators, the partial
// sums received and the copy sent on, and the fp32 dQ accumulator; with the all-gather variant
// the gathered K/V and their full-length gradients; nothing extra for the p2p ring. Llama-3.1-8B,
// cp 8 at 256k tokens (T = 32768 per rank), K/V repeated to 32 heads of 128: 8192 elements.
TEST(Ledger, ContextParallelAttentionWorkingSet) {
  Json j = {{"model", "llama3.1-8b"},
            {"hardware", "h100-sxm"},
            {"cluster", {{"num_gpus", 8}}},
            {"training", {{"seq_len", 262144}, {"global_batch_size", 1}, {"attention", "flash2"}, {"repeat_kv", true}}},
            {"parallel", {{"cp", 8}, {"fsdp", true}, {"micro_batch_size", 1}, {"recompute", "full"}, {"cp_comm", "rotate-allgather"}}}};
  const double T = 32768.0, kv = T * 8192.0, e = 2.0;
  const RunConfig rotate = config::parse_run(j, "<ledger-test>", "");
  EXPECT_DOUBLE_EQ(cp_attention_working_bytes(rotate).value(), e * kv * 8.0 + 12.0 * kv + 4.0 * T * 4096.0);
  j["parallel"]["cp_comm"] = "allgather";
  EXPECT_DOUBLE_EQ(cp_attention_working_bytes(config::parse_run(j, "<ledger-test>", "")).value(), 2.0 * e * kv * 8.0);
  j["parallel"]["cp_comm"] = "ring";
  const RunConfig ring = config::parse_run(j, "<ledger-test>", "");
  EXPECT_DOUBLE_EQ(cp_attention_working_bytes(ring).value(), 0.0);
  EXPECT_DOUBLE_EQ(compute_ledger(rotate).stages[0].transient.value() - compute_ledger(ring).stages[0].transient.value(),
                   cp_attention_working_bytes(rotate).value());
}

// Two stages of tp 2 with sequence parallelism on 4 GPUs, four micro-batches (global batch 4 x mbs, dp 1).
Layout pp2_tp2_sp() {
  Layout l;
  l.pp = 2;
  l.gpus = 4;
  l.tp = 2;
  l.sp = true;
  l.global_batch = kB * 4;
  return l;
}

// Framework switches: DeepSpeed's BF16 optimizer keeps bf16 gradients beside the fp32 buffer
// (+2 bytes per parameter); pipe buffers keep each in-flight stage output (s*b*h*2 per
// micro-batch, not on the last stage); DTensor TP keeps the LM head's gathered input.
TEST(Ledger, FrameworkSwitchesAddTheirBytes) {
  const RunConfig base = gpt_run(pp2_tp2_sp());
  const MemoryLedger led = compute_ledger(base);
  const auto& b0 = led.stages[0];
  const auto& b1 = led.stages[1];

  RunConfig lp = base;
  lp.training.lp_grads = true;
  const MemoryLedger with_lp = compute_ledger(lp);
  expect_rel(with_lp.stages[0].gradients.value() - b0.gradients.value(), b0.params * 2.0);

  RunConfig keep = base;
  keep.parallel.keep_stage_outputs = true;
  const MemoryLedger with_keep = compute_ledger(keep);
  const double inflight0 = std::ceil(inflight_microbatches(base, 0));
  expect_rel(with_keep.stages[0].activations.value() - b0.activations.value(), 2.0 * s * b * h / 2.0 * inflight0);
  EXPECT_DOUBLE_EQ(with_keep.stages[1].activations.value(), b1.activations.value());

  // torch.distributed.pipelining: a receive buffer per micro-batch, the stage boundary
  // s*b*h*2/tp under SP: output gradients on the first stage, inputs on the last.
  RunConfig recv = base;
  recv.parallel.recv_buffer_per_microbatch = true;
  const MemoryLedger with_recv = compute_ledger(recv);
  const double boundary = 2.0 * s * b * h / 2.0;
  const double m = static_cast<double>(base.num_microbatches);
  EXPECT_EQ(base.num_microbatches, 4);
  expect_rel(with_recv.stages[0].buffers.value() - b0.buffers.value(), boundary * m);
  expect_rel(with_recv.stages[1].buffers.value() - b1.buffers.value(), boundary * m);

  // DTensor TP: the LM head keeps its gathered input instead of its shard (s*b*h*2*(1 - 1/tp) more
  // on the last stage); each layer
  // keeps the gathered QKV and MLP inputs instead of their 1/tp shards (2 * s*b*h*2 * (1 - 1/tp)),
  // unless async TP micro-pipelines the gathers.
  RunConfig dt = base;
  dt.parallel.tp_saves_gathered_input = true;
  const double layer_extra = layer_activation_bytes(dt, false).value() - layer_activation_bytes(base, false).value();
  expect_rel(layer_extra, s * b * 2.0 * 2.0 * h * (1.0 - 1.0 / 2.0));
  const MemoryLedger with_dt = compute_ledger(dt);
  const double layers1 = static_cast<double>(with_dt.stages[1].layers);
  expect_rel(with_dt.stages[1].activations.value() - b1.activations.value(),
             2.0 * s * b * h * (1.0 - 1.0 / 2.0) + layer_extra * layers1 * inflight_microbatches(base, 1));
  RunConfig async = dt;
  async.parallel.tp_comm_overlap = true;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(async, false).value(), layer_activation_bytes(base, false).value());
  // Float8 TP gathers the quantized inputs, and the float8 matmul keeps what it was given: the
  // gathered inputs kept are the 1-byte copies (half the extra).
  RunConfig base8 = base;
  base8.training.precision = hw::Dtype::kFp8;
  base8.training.fp8_saved_inputs = true;
  base8.training.fp8_tp_gather = true;
  RunConfig dt8 = base8;
  dt8.parallel.tp_saves_gathered_input = true;
  expect_rel(layer_activation_bytes(dt8, false).value() - layer_activation_bytes(base8, false).value(), layer_extra / 2.0);
}

// torch.distributed.pipelining returns every micro-batch's last-stage output from step(): the
// last stage keeps all m 16-bit logits (s*b*32768/tp*2 each) until the step ends, the current
// one's moving out of the loss working set; before PyTorch 2.8 every other stage also kept its
// m outputs (the boundary s*b*h*2/tp under SP), replacing the in-flight ones of
// keep_stage_outputs. GPipe already holds all m logits at its peak.
TEST(Ledger, StepOutputsKeptUntilTheStepEnds) {
  RunConfig base = gpt_run(pp2_tp2_sp());
  base.parallel.keep_stage_outputs = true;
  const MemoryLedger led = compute_ledger(base);
  const double m = static_cast<double>(base.num_microbatches);
  const double logits16 = 2.0 * s * b * 32768.0 / 2.0;
  const double boundary = 2.0 * s * b * h / 2.0;

  RunConfig last = base;
  last.parallel.keep_step_outputs = config::StepOutputs::kLastStage;
  const MemoryLedger with_last = compute_ledger(last);
  EXPECT_DOUBLE_EQ(with_last.stages[0].kept_outputs.value(), 0.0);
  expect_rel(with_last.stages[1].kept_outputs.value(), logits16 * m);
  expect_rel(led.stages[1].logits.value() - with_last.stages[1].logits.value(), logits16);
  // Peak: all m kept through the last backward, beside the larger of the layer working set and
  // what the loss adds to its own 16-bit logits.
  const double T = led.stages[1].transient.value(), L = led.stages[1].logits.value();
  expect_rel(with_last.stages[1].total().value() - led.stages[1].total().value(),
             logits16 * m + std::max(T, L - logits16) - std::max(T, L));

  RunConfig all = base;
  all.parallel.keep_step_outputs = config::StepOutputs::kAllStages;
  const MemoryLedger with_all = compute_ledger(all);
  expect_rel(with_all.stages[0].kept_outputs.value(), boundary * m);
  const double inflight0 = std::ceil(inflight_microbatches(base, 0));
  expect_rel(led.stages[0].activations.value() - with_all.stages[0].activations.value(), boundary * inflight0);
  expect_rel(with_all.stages[1].kept_outputs.value(), logits16 * m);

  RunConfig gpipe = last;
  gpipe.parallel.schedule = config::Schedule::kGpipe;
  EXPECT_DOUBLE_EQ(compute_ledger(gpipe).stages[1].kept_outputs.value(), 0.0);

  RunConfig no_pp = gpt_run(Layout{});
  no_pp.parallel.keep_step_outputs = config::StepOutputs::kAllStages;
  EXPECT_DOUBLE_EQ(compute_ledger(no_pp).stages[0].kept_outputs.value(), 0.0);
}

// BLOOM-style embedding norm: stage 0 keeps the looked-up embeddings (s*b*h*2 / tp under SP) for
// every in-flight micro-batch, and holds the norm's parameters; later stages are unchanged.
TEST(Ledger, EmbeddingNormKeepsItsInputOnStageZero) {
  const RunConfig base = gpt_run(pp2_tp2_sp());
  RunConfig en = base;
  en.model.embedding_norm = true;
  const MemoryLedger plain = compute_ledger(base);
  const MemoryLedger with_norm = compute_ledger(en);
  expect_rel(with_norm.stages[0].activations.value() - plain.stages[0].activations.value(),
             2.0 * s * b * h / 2.0 * inflight_microbatches(base, 0));
  EXPECT_DOUBLE_EQ(with_norm.stages[1].activations.value(), plain.stages[1].activations.value());
  expect_rel(with_norm.stages[0].params - plain.stages[0].params, h);  // RMSNorm weight
}

// DeepSpeed's BF16 optimizer adds each micro-batch's bf16 gradients to the fp32 buffer through
// grad.to(float32): the largest single tensor gets a transient fp32 copy. Here the vocabulary
// matrix (32768 x 1024 / tp 2) on the stages that hold it; the fused first MLP projection
// (1024 x 4096 / 2) is the largest layer tensor.
TEST(Ledger, LpGradsCastTheLargestTensorToFp32) {
  Layout l;
  l.pp = 2;
  l.gpus = 2;
  l.global_batch = kB * 2;
  l.recompute = "full";
  RunConfig rc0 = gpt_run(l);
  rc0.parallel.tp = 1;
  const double vocab = static_cast<double>(rc0.padded_vocab);
  EXPECT_DOUBLE_EQ(largest_parameter_tensor(rc0, true), vocab * h);
  EXPECT_DOUBLE_EQ(largest_parameter_tensor(rc0, false), h * 4.0 * h);
  const MemoryLedger base = compute_ledger(rc0);
  RunConfig lp = rc0;
  lp.training.lp_grads = true;
  const MemoryLedger with_lp = compute_ledger(lp);
  for (size_t st = 0; st < 2; ++st) {
    SCOPED_TRACE(st);
    EXPECT_DOUBLE_EQ(with_lp.stages[st].transient.value(),
                     std::max(base.stages[st].transient.value(), 4.0 * vocab * h));
  }
}

// FSDP without resharding after forward (torchtitan under pipeline parallelism) holds the gathered
// parameters, in the compute dtype, beside the resident shard: params * 2 bytes more than the
// resharding layout's per-layer gather buffers.
TEST(Ledger, NoReshardHoldsAllGatheredParametersBesideTheShard) {
  Layout l;
  l.gpus = 4;
  l.global_batch = kB * 4;
  RunConfig fs = gpt_run(l);  // dp 4 derived from the GPU count
  ASSERT_EQ(fs.parallel.dp, 4);
  fs.parallel.fsdp = true;
  fs.parallel.zero_stage = 3;
  const MemoryLedger re = compute_ledger(fs);
  RunConfig keep = fs;
  keep.parallel.reshard_after_forward = false;
  const MemoryLedger no = compute_ledger(keep);
  expect_rel(no.stages[0].buffers.value() - re.stages[0].buffers.value(), no.stages[0].params * 2.0);
}


// NCCL communicators per rank: with 16 GPUs as tp 2 x pp 4 x dp 2 and tied embeddings, every rank
// joins the world group (16 ranks) and the model-parallel group of the gradient-norm reduction
// (tp x pp = 8 ranks); TP and DP groups are pairs, and so are its pipeline neighbours and, on
// the first and last stage, the embedding pair. Their buffers add to the runtime reserve at the
// profile's per-communicator sizes.
using CommCount = std::pair<int64_t, int64_t>;
TEST(Ledger, NcclCommunicatorsAddTheirBuffers) {
  Layout l;
  l.tp = 2;
  l.pp = 4;
  l.gpus = 16;
  l.global_batch = kB * 8;
  RunConfig rc = gpt_run(l);
  ASSERT_EQ(rc.parallel.dp, 2);
  ASSERT_TRUE(rc.model.tied_embeddings);
  // stage: {multi, pairs} = world, model-parallel; tp, dp, neighbours (1 or 2), embedding pair
  // (ends only)
  EXPECT_EQ(nccl_communicators(rc, 0), (CommCount{2, 4}));
  EXPECT_EQ(nccl_communicators(rc, 1), (CommCount{2, 4}));
  EXPECT_EQ(nccl_communicators(rc, 3), (CommCount{2, 4}));
  rc.model.tied_embeddings = false;
  EXPECT_EQ(nccl_communicators(rc, 0), (CommCount{2, 3}));
  rc.hardware.runtime_reserved = core::Bytes(1e9);
  rc.hardware.nccl_comm_memory = core::Bytes(700e6);
  rc.hardware.nccl_pair_memory = core::Bytes(500e6);
  const MemoryLedger led = compute_ledger(rc);
  EXPECT_DOUBLE_EQ(led.stages[0].runtime.value(), 1e9 + 2 * 700e6 + 3 * 500e6);
  EXPECT_DOUBLE_EQ(led.stages[1].runtime.value(), 1e9 + 2 * 700e6 + 4 * 500e6);
  EXPECT_DOUBLE_EQ(led.stages[1].nccl.value(), 2 * 700e6 + 4 * 500e6);
  // Pure data parallelism over every GPU uses the world group alone.
  Layout d;
  d.gpus = 8;
  d.global_batch = kB * 8;
  EXPECT_EQ(nccl_communicators(gpt_run(d), 0), (CommCount{1, 0}));
}


// All-to-alls connect every peer of their group: EP dispatch over ep 8 adds 7 peers' buffers at
// the profile's per-peer size (H100: 469 MB); the all-gather dispatcher adds none.
TEST(Ledger, AllToAllPeersAddTheirBuffers) {
  Json j = {{"model", "qwen3-30b-a3b"},
            {"hardware", "h100-sxm"},
            {"cluster", {{"num_gpus", 8}}},
            {"training", {{"seq_len", 4096}, {"global_batch_size", 8}}},
            {"parallel", {{"ep", 8}, {"micro_batch_size", 1}}}};
  const RunConfig a2a = config::parse_run(j, "<a2a-test>", "");
  EXPECT_EQ(nccl_alltoall_peers(a2a), 7);
  const MemoryLedger led = compute_ledger(a2a);
  EXPECT_DOUBLE_EQ(led.stages[0].nccl.value(), 7 * 469e6);
  j["parallel"]["moe"] = {{"dispatcher", "allgather"}};
  const RunConfig ag = config::parse_run(j, "<a2a-test>", "");
  EXPECT_EQ(nccl_alltoall_peers(ag), 0);
  EXPECT_DOUBLE_EQ(compute_ledger(ag).stages[0].nccl.value(), 0.0);
}

}  // namespace
}  // namespace stepcast::memory
