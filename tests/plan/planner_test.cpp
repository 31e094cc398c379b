// Planner: enumeration respects fixed settings and constraints, every ranked layout is valid
// and fits, the simulated best is ranked first, rejections are counted, output is
// deterministic.
#include "sim/plan/planner.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include <set>

#include "sim/accuracy/titan_import.hpp"
#include "sim/config/framework_export.hpp"
#include "sim/core/error.hpp"
#include "sim/estimate/estimate.hpp"
#include "sim/memory/ledger.hpp"

namespace stepcast::plan {
namespace {

using core::Json;

// A run of a zoo model on H100s: GPUs, sequence length and global batch.
Json h100_run(const char* model, int64_t gpus, int64_t seq, int64_t batch) {
  return {{"model", model},
          {"hardware", "h100-sxm"},
          {"cluster", {{"num_gpus", gpus}}},
          {"training", {{"seq_len", seq}, {"global_batch_size", batch}}}};
}

Json run_8b(int64_t gpus = 16) {
  return {{"model", "llama3.1-8b"},
          {"hardware", "h100-sxm"},
          {"cluster", {{"num_gpus", gpus}}},
          {"training", {{"seq_len", 4096}, {"global_batch_size", 64}}}};
}

PlanOptions small_options() {
  PlanOptions o;
  o.top_k = 3;
  o.threads = 2;
  return o;
}

TEST(Planner, RankedLayoutsAreValidFitAndSorted) {
  const PlanResult r = plan(run_8b(), "<plan-test>", "", small_options());
  ASSERT_GE(r.ranked.size(), 4u);
  // Every layout that fits, and the cost-balanced splits and memory-rescued layouts added after
  // the enumeration (counted apart from it).
  EXPECT_EQ(r.fit + r.balanced_added + r.rescued, static_cast<int64_t>(r.ranked.size()));
  int64_t added = 0;
  for (const auto& c : r.ranked) added += c.balanced_split ? 1 : 0;
  EXPECT_EQ(added, r.balanced_added + r.rescued);
  int64_t rejected = 0;
  for (const auto& [why, n] : r.rejected) rejected += n;
  EXPECT_EQ(r.enumerated, r.fit + rejected);
  std::set<std::string> seen;
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    const auto& c = r.ranked[i];
    const auto& p = c.rc.parallel;
    EXPECT_EQ(p.tp * p.pp * p.dp * p.cp, 16);
    EXPECT_TRUE(memory::compute_ledger(c.rc).fits());
    EXPECT_TRUE(seen.insert(layout_text(p)).second) << "duplicate " << layout_text(p);
  }
  // The best K by estimate are simulated, and the next ones (up to 3K) while their estimate is
  // below the slowest simulated step: the simulated layouts come first, ordered by simulated
  // step time, then the rest by estimate, none of which the rule would have simulated.
  size_t k = 0;
  double slowest = 0;
  while (k < r.ranked.size() && r.ranked[k].simulated) slowest = std::max(slowest, r.ranked[k++].sim_step_s);
  EXPECT_GE(k, 3u);
  EXPECT_LE(k, 9u);
  for (size_t i = k; i < r.ranked.size(); ++i) EXPECT_FALSE(r.ranked[i].simulated) << i;
  if (k < 9 && k < r.ranked.size()) {
    EXPECT_GE(r.ranked[k].est.step_time_s, slowest);
  }
  for (size_t i = 1; i < k; ++i) EXPECT_LE(r.ranked[i - 1].sim_step_s, r.ranked[i].sim_step_s);
  for (size_t i = k + 1; i < r.ranked.size(); ++i) EXPECT_LE(r.ranked[i - 1].est.step_time_s, r.ranked[i].est.step_time_s);
  EXPECT_NE(r.explanation.find("runner-up"), std::string::npos) << r.explanation;
}

// Layouts left to their estimate that the table shows faster than the winner's simulated step
// are counted in the explanation, which says nothing of them when there are none. Llama 3.1 70B
// on 64 GPUs at 8k tokens has such layouts past the first K; re-simulating more leaves fewer.
TEST(Planner, ExplanationCountsEstimatesBelowTheWinner) {
  auto below_winner = [](const PlanResult& r) {
    size_t n = 0;
    for (const auto& c : r.ranked) n += !c.simulated && c.est.step_time_s < r.ranked.front().sim_step_s ? 1 : 0;
    return n;
  };
  auto says = [](const PlanResult& r, size_t n) {
    if (n == 0) return r.explanation.find("past the re-simulated ones") == std::string::npos;
    return r.explanation.find(std::to_string(n) + (n == 1 ? " layout past" : " layouts past")) != std::string::npos;
  };
  PlanOptions o;
  o.threads = 2;
  const PlanResult r = plan(h100_run("llama3.1-70b", 64, 8192, 512), "<plan-test>", "", o);
  ASSERT_FALSE(r.ranked.empty());
  const size_t n = below_winner(r);
  ASSERT_GT(n, 0u) << r.explanation;
  EXPECT_TRUE(says(r, n)) << r.explanation;
  o.top_k = 20;
  const PlanResult wide = plan(h100_run("llama3.1-70b", 64, 8192, 512), "<plan-test>", "", o);
  const size_t m = below_winner(wide);
  EXPECT_LT(m, n);
  EXPECT_TRUE(says(wide, m)) << wide.explanation;
}

// Keeping only the best layouts (PlanOptions::keep) returns exactly the head of the full
// ranking: the search holds a few bytes per layout and evaluates the kept ones again in full.
// Hybrid models (a Mamba-2 hybrid, a Gated DeltaNet model) are searched like any other, context
// parallelism included (Megatron-Core's head-parallel all-to-alls); every ranked layout is
// valid and fits.
TEST(Planner, HybridModelsAreSearchedWithContextParallelism) {
  const Json mamba = {{"model", "nemotron-h-8b"},
                      {"hardware", "h100-sxm"},
                      {"cluster", {{"num_gpus", 16}}},
                      {"training", {{"seq_len", 8192}, {"global_batch_size", 64}}}};
  const PlanResult r = plan(mamba, "<plan-test>", "", small_options());
  ASSERT_FALSE(r.ranked.empty());
  bool any_cp = false;
  for (const auto& c : r.ranked) {
    any_cp = any_cp || c.rc.parallel.cp > 1;
    EXPECT_TRUE(memory::compute_ledger(c.rc).fits());
  }
  EXPECT_TRUE(any_cp);
  const Json linear_model = {{"model_type", "qwen3_next"}, {"hidden_size", 1024}, {"num_hidden_layers", 8}, {"num_attention_heads", 8},
                             {"num_key_value_heads", 2}, {"head_dim", 128}, {"intermediate_size", 2048}, {"linear_num_key_heads", 8},
                             {"linear_num_value_heads", 16}, {"linear_key_head_dim", 64}, {"linear_value_head_dim", 64}, {"vocab_size", 32000}};
  const Json linear = {{"model", linear_model},
                       {"hardware", "h100-sxm"},
                       {"cluster", {{"num_gpus", 16}}},
                       {"training", {{"seq_len", 8192}, {"global_batch_size", 64}}}};
  const PlanResult g = plan(linear, "<plan-test>", "", small_options());
  ASSERT_FALSE(g.ranked.empty());
  bool linear_cp = false;
  for (const auto& c : g.ranked) {
    linear_cp = linear_cp || c.rc.parallel.cp > 1;
    EXPECT_TRUE(memory::compute_ledger(c.rc).fits());
  }
  EXPECT_TRUE(linear_cp);
}

TEST(Planner, KeepingTheBestGivesTheHeadOfTheFullRanking) {
  const Json run = run_8b(64);
  const PlanResult all = plan(run, "<plan-test>", "", small_options());
  PlanOptions o = small_options();
  o.keep = 1;  // raised to the floor of 64 (and 3 x top_k)
  const PlanResult head = plan(run, "<plan-test>", "", o);
  ASSERT_GT(all.ranked.size(), 64u);
  ASSERT_EQ(head.ranked.size(), 64u);
  EXPECT_EQ(head.fit, all.fit);
  EXPECT_EQ(head.enumerated, all.enumerated);
  EXPECT_EQ(head.rejected, all.rejected);
  EXPECT_EQ(head.explanation, all.explanation);
  for (size_t i = 0; i < head.ranked.size(); ++i) {
    const auto &a = all.ranked[i], &b = head.ranked[i];
    EXPECT_EQ(layout_text(a.rc.parallel), layout_text(b.rc.parallel)) << "rank " << i + 1;
    EXPECT_EQ(a.est.step_time_s, b.est.step_time_s);
    EXPECT_EQ(a.simulated, b.simulated);
    EXPECT_EQ(a.sim_step_s, b.sim_step_s);
    EXPECT_EQ(a.peak_memory_bytes, b.peak_memory_bytes);
  }
}

// Progress: the estimate pass counts up to every layout it evaluates, then each re-simulation
// is announced once.
TEST(Planner, ReportsProgressThroughBothPasses) {
  PlanOptions o = small_options();
  std::vector<std::pair<std::string, std::pair<size_t, size_t>>> calls;
  o.progress = [&](const char* phase, size_t done, size_t total) { calls.push_back({phase, {done, total}}); };
  const PlanResult r = plan(run_8b(), "<plan-test>", "", o);
  ASSERT_FALSE(calls.empty());
  size_t last_estimated = 0, simulating = 0, estimated_total = 0;
  bool estimating = true;
  for (const auto& [phase, dt] : calls) {
    if (phase == "estimated") {
      EXPECT_TRUE(estimating) << "estimate progress after the simulations began";
      EXPECT_GE(dt.first, last_estimated);
      EXPECT_LE(dt.first, dt.second);
      last_estimated = dt.first;
      estimated_total = dt.second;
    } else {
      ASSERT_EQ(phase, "simulating");
      estimating = false;
      EXPECT_EQ(dt.first, simulating++);
    }
  }
  EXPECT_EQ(last_estimated, estimated_total);
  // Every evaluated layout was enumerated; the fitting ones and those the ledger refused were
  // all evaluated (some rejections come before evaluation, at enumeration).
  EXPECT_LE(static_cast<int64_t>(estimated_total), r.enumerated);
  const auto oom = r.rejected.find("does not fit in memory");
  EXPECT_GE(static_cast<int64_t>(estimated_total), r.fit + (oom == r.rejected.end() ? 0 : oom->second));
  size_t simulated = 0;
  for (const auto& c : r.ranked) simulated += c.simulated;
  EXPECT_EQ(simulating, simulated);
}

TEST(Planner, FixedSettingsAndConstraintsAreRespected) {
  Json j = run_8b();
  j["parallel"] = {{"pp", 2}, {"recompute", "full"}};
  PlanOptions o = small_options();
  o.max_tp = 2;
  const PlanResult r = plan(j, "<plan-test>", "", o);
  ASSERT_FALSE(r.ranked.empty());
  for (const auto& c : r.ranked) {
    EXPECT_EQ(c.rc.parallel.pp, 2);
    EXPECT_EQ(c.rc.parallel.recompute, config::Recompute::kFull);
    EXPECT_LE(c.rc.parallel.tp, 2);
  }
}

// The search tries every schedule but GPipe by default (ZB-V and DualPipeV at vpp 2); --schedules narrows it
// to what a framework runs, and a bad list names the option.
TEST(Planner, SchedulesSearchedFollowTheList) {
  Json j = run_8b();
  j["parallel"] = {{"pp", 2}, {"tp", 1}, {"recompute", "full"}};
  auto seen = [&](const PlanOptions& o) {
    std::set<config::Schedule> out;
    for (const auto& c : plan(j, "<plan-test>", "", o).ranked) out.insert(c.rc.parallel.schedule);
    return out;
  };
  const auto all = seen(small_options());
  EXPECT_EQ(all, (std::set<config::Schedule>{config::Schedule::kOneFOneB, config::Schedule::kZbH1, config::Schedule::kInterleaved,
                                             config::Schedule::kZbV, config::Schedule::kDualPipeV}));
  PlanOptions o = small_options();
  o.schedules = parse_schedules("1f1b,interleaved,gpipe", "--schedules");
  EXPECT_EQ(seen(o), (std::set<config::Schedule>{config::Schedule::kOneFOneB, config::Schedule::kInterleaved, config::Schedule::kGpipe}));
  for (const char* bad : {"1f1b,zbx", "1f1b,1f1b", ""}) {
    try {
      (void)parse_schedules(bad, "--schedules");
      ADD_FAILURE() << bad;
    } catch (const core::UserError& e) {
      EXPECT_NE(std::string(e.what()).find("--schedules"), std::string::npos) << e.what();
    }
  }
}

// --framework: every ranked layout is one the framework runs as it is (what `export` writes),
// and the layouts it cannot run are counted under the setting at fault.
TEST(Planner, FrameworkKeepsOnlyLayoutsItRuns) {
  Json j = run_8b();
  j["parallel"] = {{"recompute", "full"}};
  PlanOptions bad = small_options();
  bad.framework = "jax";
  EXPECT_THROW(apply_framework(bad, "--framework"), core::UserError);
  for (const std::string fw : {"megatron", "torchtitan", "deepspeed", "accelerate"}) {
    PlanOptions o = small_options();
    o.framework = fw;
    const PlanResult r = plan(j, "<plan-test>", "", o);
    ASSERT_FALSE(r.ranked.empty()) << fw;
    for (const auto& c : r.ranked) {
      const std::string why = fw == "megatron"     ? config::megatron_refusal(c.rc)
                              : fw == "torchtitan" ? config::torchtitan_refusal(c.rc)
                              : fw == "deepspeed"  ? config::deepspeed_refusal(c.rc)
                                                   : config::accelerate_refusal(c.rc);
      EXPECT_EQ(why, "") << fw << " " << layout_text(c.rc.parallel);
    }
    // With --offload, the activation offload the memory search may add is not tried for a
    // framework that does not run it (torchtitan, DeepSpeed).
    PlanOptions off = o;
    off.offload = true;
    Json none = run_8b();
    none["parallel"] = {{"recompute", "none"}};
    for (const auto& c : plan(none, "<plan-test>", "", off).ranked) {
      const std::string why = fw == "megatron"     ? config::megatron_refusal(c.rc)
                              : fw == "torchtitan" ? config::torchtitan_refusal(c.rc)
                              : fw == "deepspeed"  ? config::deepspeed_refusal(c.rc)
                                                   : config::accelerate_refusal(c.rc);
      EXPECT_EQ(why, "") << fw << " --offload " << layout_text(c.rc.parallel);
    }
    if (fw == "deepspeed" || fw == "accelerate") {
      // Data parallelism alone, costed as the framework runs it: the winner's estimate is what
      // its layout over the input run, exported and imported back, estimates.
      EXPECT_GT(r.rejected.at("not run by " + fw + ": parallel.tp"), 0);
      for (const auto& c : r.ranked) EXPECT_EQ(c.rc.parallel.dp, 16) << layout_text(c.rc.parallel);
      Json best = j;
      best["parallel"] = plan_json(r, 1)["layouts"][0]["parallel"];
      const auto generic = config::parse_run(best, "<best>", "");
      const double round_trip =
          estimate::estimate_step(fw == "deepspeed" ? config::as_deepspeed_runs_it(generic) : config::as_accelerate_runs_it(generic)).step_time_s;
      EXPECT_NEAR(r.ranked.front().est.step_time_s, round_trip, 1e-9 * round_trip);
    } else if (fw == "megatron") {
      EXPECT_GT(r.rejected.count("not run by megatron: parallel.schedule"), 0u);
      // Costed with Megatron-LM's asynchronous linear-layer backward wherever there is TP, and
      // the JSON layout carries it so the layout re-runs as ranked.
      const Json layouts = plan_json(r, r.ranked.size())["layouts"];
      bool any_tp = false;
      for (size_t i = 0; i < r.ranked.size(); ++i) {
        const auto& p = r.ranked[i].rc.parallel;
        EXPECT_EQ(p.async_linear_backward(), p.tp > 1) << layout_text(p);
        any_tp = any_tp || p.tp > 1;
      }
      for (const auto& l : layouts) EXPECT_EQ(l["parallel"].value("tp_async_backward", false), l["parallel"]["tp"].get<int64_t>() > 1);
      EXPECT_TRUE(any_tp);
      // With the framework's schedules searched, none is refused for its schedule.
      PlanOptions m = o;
      apply_framework(m, "--framework");
      EXPECT_EQ(m.schedules, parse_schedules("1f1b,interleaved", "x"));
      EXPECT_EQ(plan(j, "<plan-test>", "", m).rejected.count("not run by megatron: parallel.schedule"), 0u);
    } else {
      EXPECT_GT(r.rejected.at("not run by torchtitan: parallel.zero_stage"), 0);
      // Recomputing every k-th layer: the memory search rounds its layer count up to a divisor.
      for (const auto& c : r.ranked) {
        const auto& p = c.rc.parallel;
        if (p.recompute_layers > 0) {
          EXPECT_EQ((32 / (p.pp * p.vpp)) % p.recompute_layers, 0) << layout_text(p);
        }
      }
      // Every layout is costed as torchtitan runs it (FSDP2's fp32 sharded parameters, SDPA's
      // FlashAttention-2), and the winner's estimate is what its layout over the input run,
      // exported and imported back, estimates.
      for (const auto& c : r.ranked) {
        EXPECT_EQ(c.rc.training.attention, config::AttentionImpl::kFlash2) << layout_text(c.rc.parallel);
        if (c.rc.parallel.fsdp) {
          EXPECT_EQ(c.rc.training.param_dtype, hw::Dtype::kFp32) << layout_text(c.rc.parallel);
        }
      }
      Json best = j;
      best["parallel"] = plan_json(r, 1)["layouts"][0]["parallel"];
      const auto generic = config::parse_run(best, "<best>", "");
      const double round_trip = estimate::estimate_step(accuracy::as_torchtitan_runs_it(generic)).step_time_s;
      EXPECT_NEAR(r.ranked.front().est.step_time_s, round_trip, 1e-9 * round_trip);
      EXPECT_GT(round_trip, estimate::estimate_step(generic).step_time_s);
      // Without --framework the same layout ranks with the generic run's costs.
      PlanOptions any = small_options();
      const PlanResult g = plan(j, "<plan-test>", "", any);
      ASSERT_FALSE(g.ranked.empty());
      EXPECT_NE(g.ranked.front().rc.training.attention, config::AttentionImpl::kFlash2);
    }
  }
}

// --framework torchtitan costs the run's own model and hardware as torchtitan runs them: an
// inline model outside the zoo (a Hugging Face config's keys) on a profile with overrides ranks
// layouts, each with torchtitan's runtime on that profile.
TEST(Planner, TorchtitanRuntimeTakesTheRunsOwnModelAndHardware) {
  Json j = run_8b();
  j["model"] = {{"num_hidden_layers", 16}, {"hidden_size", 2048}, {"num_attention_heads", 32}, {"num_key_value_heads", 8},
                {"intermediate_size", 8192}, {"vocab_size", 128256}, {"hidden_act", "silu"}};
  j["hardware"] = {{"base", "h100-sxm"}, {"name", "h100-test-slow"}, {"gpu", {{"memory_bandwidth", "2TB/s"}}}};
  PlanOptions o = small_options();
  o.framework = "torchtitan";
  const PlanResult r = plan(j, "<plan-test>", "", o);
  ASSERT_FALSE(r.ranked.empty());
  EXPECT_EQ(r.rejected.count("not costed with torchtitan's runtime"), 0u);
  for (const auto& c : r.ranked) {
    EXPECT_EQ(c.rc.model.num_layers, 16);
    EXPECT_EQ(c.rc.hardware.name, "h100-test-slow");
    EXPECT_EQ(c.rc.training.attention, config::AttentionImpl::kFlash2);
  }
}

// A model far too large for the GPUs: every layout is rejected for memory, nothing ranks.
TEST(Planner, LayoutsThatDoNotFitAreCounted) {
  Json j = run_8b(8);
  j["model"] = "llama3.1-405b";
  const PlanResult r = plan(j, "<plan-test>", "", small_options());
  EXPECT_TRUE(r.ranked.empty());
  EXPECT_GT(r.rejected.at("does not fit in memory"), 0);
  EXPECT_NE(r.explanation.find("No layout fits"), std::string::npos);
  // The lightest rejected layout says how far the GPU count is from fitting: its ledger peak is
  // over the capacity, and no rejected layout's is smaller (8 GPUs hold 405B parameters with
  // Adam state only if all 8 shard them: at least 16 bytes x 405e9 / 8).
  ASSERT_TRUE(r.lightest_rejected.has_value());
  EXPECT_GT(r.lightest_rejected->peak_bytes, r.lightest_rejected->capacity_bytes);
  EXPECT_GT(r.lightest_rejected->peak_bytes, 16.0 * 405e9 / 8);
  EXPECT_FALSE(r.lightest_rejected->layout.empty());
}

// A memory headroom keeps only layouts whose ledger peak leaves that share of memory free; the
// others are counted under their own reason, and nothing else changes.
// (Recompute fixed to none: with full recomputation the planner would instead recompute more
// layers to stay within the headroom.)
TEST(Planner, MemoryHeadroomRejectsLayoutsTooCloseToFull) {
  PlanOptions o = small_options();
  o.top_k = 0;
  Json j = run_8b();
  j["parallel"] = {{"recompute", "none"}};
  const PlanResult all = plan(j, "<plan-test>", "", o);
  o.memory_headroom = 0.5;
  const PlanResult half = plan(j, "<plan-test>", "", o);
  ASSERT_FALSE(half.ranked.empty());
  int64_t above_half = 0;
  // (The cost-balanced splits added after the enumeration are counted apart.)
  for (const auto& c : all.ranked) above_half += !c.balanced_split && c.peak_memory_bytes > 0.5 * c.est.memory.capacity.value();
  ASSERT_GT(above_half, 0) << "the test needs layouts above half of memory";
  EXPECT_EQ(half.fit, all.fit - above_half);
  EXPECT_EQ(half.rejected.at("fits, but not within the memory headroom"), above_half);
  for (const auto& c : half.ranked) EXPECT_LE(c.peak_memory_bytes, 0.5 * c.est.memory.capacity.value());
}

// A winner whose peak leaves less than 10% of memory free is flagged in the explanation, with
// the flag that leaves room for the caching allocator; with that headroom the note is gone.
TEST(Planner, ExplanationFlagsAWinnerWithoutRoomForTheAllocator) {
  PlanOptions o = small_options();
  o.top_k = 1;
  const Json j = h100_run("llama3.1-8b", 16, 8192, 64);
  const PlanResult tight = plan(j, "<plan-test>", "", o);
  ASSERT_FALSE(tight.ranked.empty());
  const Candidate& w = tight.ranked.front();
  ASSERT_GT(w.peak_memory_bytes, 0.9 * w.est.memory.capacity.value()) << "the test needs a winner near full memory";
  EXPECT_NE(tight.explanation.find("--memory-headroom 0.1"), std::string::npos) << tight.explanation;
  o.memory_headroom = 0.1;
  const PlanResult roomy = plan(j, "<plan-test>", "", o);
  ASSERT_FALSE(roomy.ranked.empty());
  EXPECT_EQ(roomy.explanation.find("--memory-headroom"), std::string::npos) << roomy.explanation;
}

// Among the simulated layouts within 1% of the best step, the one that leaves the most memory
// free is named when it frees at least 5% of the GPU more than the winner: on synthetic
// rankings (step, peak, simulated), and in a real plan's explanation and JSON when it exists.
TEST(Planner, RoomierLayoutNearTheBestIsNamed) {
  const double cap = 80.0 * 1073741824.0;
  auto ranking = [&](std::vector<std::tuple<double, double, bool>> rows) {
    std::vector<Candidate> out;
    for (const auto& [step, peak_share, simulated] : rows) {
      Candidate c;
      c.simulated = simulated;
      c.sim_step_s = step;
      c.est.step_time_s = step;
      c.est.memory.capacity = core::Bytes(cap);
      c.peak_memory_bytes = peak_share * cap;
      out.push_back(c);
    }
    return out;
  };
  // Rank 3 (index 2) is within 1% and frees 9% more; rank 4 frees more but is 2% slower; rank 2
  // only 1% more.
  EXPECT_EQ(roomier_near_best(ranking({{10.0, 0.99, true}, {10.05, 0.98, true}, {10.09, 0.90, true}, {10.2, 0.5, true}})), std::optional<size_t>(2));
  // Nothing 5% roomier within 1%.
  EXPECT_FALSE(roomier_near_best(ranking({{10.0, 0.99, true}, {10.05, 0.96, true}, {10.2, 0.5, true}})));
  // Estimates only are not compared with a simulated winner.
  EXPECT_FALSE(roomier_near_best(ranking({{10.0, 0.99, true}, {10.05, 0.5, false}})));
  EXPECT_FALSE(roomier_near_best({}));

  // Llama 3.1 8B on 8 H100s at 4k tokens, batch 128: the winner (ZB-V) leaves 8% of memory
  // free, an interleaved layout within 1% about 15%.
  PlanOptions o;
  o.threads = 2;
  const Json j = h100_run("llama3.1-8b", 8, 4096, 128);
  const PlanResult r = plan(j, "<plan-test>", "", o);
  ASSERT_TRUE(r.roomier.has_value()) << r.explanation;
  const Candidate& w = r.ranked.front();
  const Candidate& c = r.ranked[*r.roomier];
  EXPECT_TRUE(c.simulated);
  EXPECT_LE(c.step_s(), w.step_s() * 1.01);
  EXPECT_GE((w.peak_memory_bytes - c.peak_memory_bytes) / w.est.memory.capacity.value(), 0.05);
  EXPECT_NE(r.explanation.find("rank " + std::to_string(*r.roomier + 1) + " ("), std::string::npos) << r.explanation;
  EXPECT_EQ(plan_json(r, r.ranked.size())["roomier_near_best"], static_cast<int64_t>(*r.roomier + 1));
  // Fewer rows asked for than its rank: it is still shown, after the best, below a gap.
  const std::string rank_text = std::to_string(*r.roomier + 1);
  EXPECT_EQ(shown_ranks(r, 1), (std::vector<size_t>{0, *r.roomier}));
  const std::string table = plan_table(r, 1);
  EXPECT_NE(table.find("   ...\n" + std::string(4 - rank_text.size(), ' ') + rank_text + "  "), std::string::npos) << table;
  const Json one = plan_json(r, 1)["layouts"];
  ASSERT_EQ(one.size(), 2u);
  EXPECT_EQ(one[1]["rank"], static_cast<int64_t>(*r.roomier + 1));
  EXPECT_EQ(plan_csv(r, 1).find("\n" + rank_text + ",\""), plan_csv(r, 1).rfind("\n", plan_csv(r, 1).size() - 2));
  // Rows enough to include it: no gap, no repeat.
  EXPECT_EQ(shown_ranks(r, *r.roomier + 1).size(), *r.roomier + 1);
  // The 8B on 16 GPUs has none: no safer-pick sentence, a null in the JSON.
  const PlanResult small = plan(run_8b(), "<plan-test>", "", small_options());
  if (!small.roomier) {
    EXPECT_EQ(small.explanation.find("the safer pick"), std::string::npos);
    EXPECT_TRUE(plan_json(small, small.ranked.size())["roomier_near_best"].is_null());
  }
}

// Under full recomputation the planner recomputes the fewest layers per virtual stage that
// fit (Megatron's block method): one layer fewer would not fit. Llama-3.1-70B on 16 H100s at
// 8k tokens: without recomputation most layouts do not fit.
TEST(Planner, RecomputesOnlyTheLayersMemoryNeeds) {
  Json j = {{"model", "llama3.1-70b"},
            {"hardware", "h100-sxm"},
            {"cluster", {{"num_gpus", 16}}},
            {"training", {{"seq_len", 8192}, {"global_batch_size", 64}}},
            {"parallel", {{"tp", 8}, {"pp", 2}}}};
  PlanOptions o = small_options();
  o.top_k = 0;
  const PlanResult r = plan(j, "<plan-test>", "", o);
  int64_t partial = 0;
  for (const auto& c : r.ranked) {
    const auto& p = c.rc.parallel;
    if (p.recompute != config::Recompute::kFull || p.recompute_layers == 0) continue;
    ++partial;
    EXPECT_TRUE(c.rc.partial_recompute());
    EXPECT_TRUE(memory::compute_ledger(c.rc).fits()) << layout_text(p);
    config::RunConfig fewer = c.rc;
    if (p.recompute_layers > 1) {
      fewer.parallel.recompute_layers = p.recompute_layers - 1;
    } else {
      fewer.parallel.recompute = config::Recompute::kNone;
      fewer.parallel.recompute_layers = 0;
    }
    EXPECT_FALSE(memory::compute_ledger(fewer).fits()) << layout_text(p);
  }
  EXPECT_GT(partial, 0);
  // A partially recomputing layout is faster than the same layout recomputing every layer.
  const auto best = std::find_if(r.ranked.begin(), r.ranked.end(), [](const Candidate& c) { return c.rc.partial_recompute(); });
  ASSERT_NE(best, r.ranked.end());
  config::RunConfig every = best->rc;
  every.parallel.recompute_layers = 0;
  EXPECT_LT(best->est.step_time_s, estimate::estimate_step(every, memory::compute_ledger(every)).step_time_s);
}

// A layout that fits on none of the enumeration's splits but has a pipeline stage with room is
// split by cost within the memory limit (rescue_by_split). Llama 3.1 70B at 8k tokens on 32
// H100s (batch 64, no headroom) and 64 (batch 128, 10% headroom): without recomputation the
// early stages hold more micro-batches than the late ones (1F1B, interleaved; a V's stage 0
// holds the most chunks), so moving layers off them makes such layouts fit. Each rescued layout
// fits within the headroom and does not on its layer-count split.
TEST(Planner, LayoutsThatFitOnlyOnABalancedSplitAreRescued) {
  for (const auto& [gpus, headroom] : {std::pair<int64_t, double>{32, 0.0}, {64, 0.1}}) {
    const Json j = {{"model", "llama3.1-70b"},
                    {"hardware", "h100-sxm"},
                    {"cluster", {{"num_gpus", gpus}}},
                    {"training", {{"seq_len", 8192}, {"global_batch_size", 2 * gpus}}}};
    PlanOptions o = small_options();
    o.memory_headroom = headroom;
    const PlanResult r = plan(j, "<plan-test>", "", o);
    EXPECT_GT(r.rescued, 0) << "headroom " << headroom;
    EXPECT_LE(r.rescued, r.rescue_tried);
    const Json pj = plan_json(r, r.ranked.size());
    EXPECT_EQ(pj["balanced_splits"]["rescued"].get<int64_t>(), r.rescued);
    int64_t seen = 0;
    for (size_t i = 0; i < r.ranked.size(); ++i) {
      const Candidate& c = r.ranked[i];
      EXPECT_EQ(pj["layouts"][i]["memory_rescued"].get<bool>(), c.memory_rescued);
      if (!c.memory_rescued) continue;
      ++seen;
      EXPECT_TRUE(c.balanced_split);
      const auto& p = c.rc.parallel;
      ASSERT_GT(p.pp, 1);
      const auto ledger = memory::compute_ledger(c.rc);
      EXPECT_LE(ledger.peak().value(), (1.0 - headroom) * ledger.capacity.value()) << layout_text(p);
      // The same layout on the layer-count split (every layer recomputed under full
      // recomputation, the least memory it can take) is over the limit.
      config::RunConfig counted = c.rc;
      counted.parallel.recompute_layers = 0;
      const int64_t L = c.rc.model.num_layers, v = p.pp * p.vpp;
      if (L % v == 0) {
        counted.parallel.set_split(-1, -1, {});
      } else {
        counted.parallel.set_split(-1, -1, config::balanced_stage_layers(L, v));
      }
      core::Issues issues;
      config::derive_and_validate(counted, issues);
      ASSERT_TRUE(issues.empty()) << issues.lines().front();
      EXPECT_NE(counted.vstage_layers, c.rc.vstage_layers);
      const auto even = memory::compute_ledger(counted);
      EXPECT_GT(even.peak().value(), (1.0 - headroom) * even.capacity.value()) << layout_text(p);
    }
    EXPECT_GT(seen, 0) << "no rescued layout among the kept ones";
    // The explanation says so when the winner is one.
    EXPECT_EQ(r.explanation.find("fits only on this split") != std::string::npos, r.ranked.front().memory_rescued) << r.explanation;
  }
}

// Without a data-parallel group (dp * cp = 1) a ZeRO stage shards nothing, so such layouts are
// searched at ZeRO 0 only (a sharding stays where it carries an offload); a MoE model whose
// experts are replicated over tp ranks (ep * etp < tp) still shards their state over that
// expert-data-parallel group, so its ZeRO-1 stays.
TEST(Planner, NoShardingWithoutADataParallelGroup) {
  PlanOptions o = small_options();
  o.top_k = 0;
  const PlanResult dense = plan(run_8b(4), "<plan-test>", "", o);
  int64_t solo = 0;
  for (const auto& c : dense.ranked) {
    const auto& p = c.rc.parallel;
    if (p.dp * p.cp != 1) continue;
    ++solo;
    EXPECT_EQ(p.zero_stage, 0) << layout_text(p);
    EXPECT_FALSE(p.fsdp) << layout_text(p);
  }
  EXPECT_GT(solo, 0);
  const Json moe = {{"model", "qwen3-30b-a3b"},
                    {"hardware", "b200"},  // where ZeRO-1 fits beside FSDP
                    {"cluster", {{"num_gpus", 8}}},
                    {"training", {{"seq_len", 4096}, {"global_batch_size", 32}}},
                    {"parallel", {{"tp", 8}, {"ep", 1}, {"etp", 1}, {"pp", 1}, {"cp", 1}}}};
  const PlanResult m = plan(moe, "<plan-test>", "", o);
  std::set<int> zeros;
  for (const auto& c : m.ranked) zeros.insert(c.rc.parallel.fsdp ? 3 : c.rc.parallel.zero_stage);
  EXPECT_TRUE(zeros.count(1) > 0) << "ZeRO-1 shards the experts over 8 expert-data-parallel ranks";
}

// Past the simulated cut, the best layout of each pipeline schedule (and of the layouts without
// a pipeline) that none simulated is simulated when its estimate is below the slowest
// simulated step: the estimate's error leans differently by schedule. Checked as a property of
// the ranking on two searches; on Llama 3.1 70B on 256 H100s (8k tokens, batch 512) with K = 3
// it promotes the best FSDP layout without a pipeline and the best DualPipeV layout.
TEST(Planner, BestOfEachScheduleIsSimulatedWhenItMightWin) {
  auto family = [](const Candidate& c) { return c.rc.parallel.pp > 1 ? static_cast<int>(c.rc.parallel.schedule) : -1; };
  const Json big = {{"model", "llama3.1-70b"},
                    {"hardware", "h100-sxm"},
                    {"cluster", {{"num_gpus", 256}}},
                    {"training", {{"seq_len", 8192}, {"global_batch_size", 512}}}};
  int leaders = 0;
  for (const Json& j : {run_8b(16), big}) {
    PlanOptions o = small_options();
    const PlanResult r = plan(j, "<plan-test>", "", o);
    const int64_t gpus = j["cluster"]["num_gpus"].get<int64_t>();
    const int top = o.top_k;
    double slowest_cut = 0;  // the slowest step the cut's own simulations found
    std::set<int> cut_families;
    for (const auto& c : r.ranked) {
      if (!c.simulated || c.schedule_leader) continue;
      slowest_cut = std::max(slowest_cut, c.sim_step_s);
      cut_families.insert(family(c));
    }
    const Json pj = plan_json(r, r.ranked.size());
    for (size_t i = 0; i < r.ranked.size(); ++i) EXPECT_EQ(pj["layouts"][i]["schedule_leader"].get<bool>(), r.ranked[i].schedule_leader);
    std::set<int> leader_families;
    for (const auto& c : r.ranked) {
      if (!c.schedule_leader) continue;
      ++leaders;
      EXPECT_TRUE(c.simulated);
      EXPECT_LT(c.est.step_time_s, slowest_cut) << layout_text(c.rc.parallel);
      EXPECT_EQ(cut_families.count(family(c)), 0u) << layout_text(c.rc.parallel);
      EXPECT_TRUE(leader_families.insert(family(c)).second) << "two leaders of one schedule";
    }
    // Every schedule the simulations left out has nothing estimated below the cut's slowest.
    for (const auto& c : r.ranked) {
      if (c.simulated || cut_families.count(family(c)) > 0 || leader_families.count(family(c)) > 0) continue;
      EXPECT_GE(c.est.step_time_s, slowest_cut) << gpus << " GPUs, top " << top << ": " << layout_text(c.rc.parallel);
    }
  }
  EXPECT_GT(leaders, 0);
}

TEST(Planner, DeterministicOutput) {
  const PlanResult a = plan(run_8b(), "<plan-test>", "", small_options());
  PlanOptions one_thread = small_options();
  one_thread.threads = 1;
  const PlanResult b = plan(run_8b(), "<plan-test>", "", one_thread);
  EXPECT_EQ(plan_json(a, 50).dump(), plan_json(b, 50).dump());
  EXPECT_EQ(plan_csv(a, 50), plan_csv(b, 50));
}

// Uneven pipeline splits: 126 layers on pp 16 need first/last stages one layer short.
// The end stages share their remainder every way the planner can split it; a last stage that
// also runs a multi-token-prediction module wins with fewer layers (as Megatron's DeepSeek-V3
// recipes place them), while without it the head alone is lighter than the module. ZB-H1 is
// fixed: its bubble follows every stage's own work, so the end stages' split shows in the step
// (under 1F1B only the slowest stage counts and the splits tie).
TEST(Planner, EndStageSplitFollowsTheLastStagesExtraWork) {
  Json j = {{"model", "deepseek-v3"},
            {"hardware", "h800"},
            {"cluster", {{"num_gpus", 2048}}},
            {"training", {{"seq_len", 4096}, {"global_batch_size", 15360}, {"precision", "fp8"}, {"mtp_layers", 1}}},
            {"parallel", {{"tp", 1}, {"pp", 16}, {"ep", 64}, {"micro_batch_size", 1}, {"zero_stage", 1}, {"schedule", "zb-h1"}}}};
  PlanOptions o = small_options();
  o.top_k = 1;
  const PlanResult with_mtp = plan(j, "<plan-test>", "", o);
  ASSERT_FALSE(with_mtp.ranked.empty());
  const auto& best = with_mtp.ranked.front().rc.parallel;
  EXPECT_EQ(best.first_stage_layers + best.last_stage_layers, 5);  // 61 = 14 x 4 + 5
  EXPECT_EQ(best.last_stage_layers, 1);
  j["training"]["mtp_layers"] = 0;
  const PlanResult without = plan(j, "<plan-test>", "", o);
  ASSERT_FALSE(without.ranked.empty());
  // (The winner may be a split list rather than first/last counts: compare the last stage's layers.)
  EXPECT_GT(without.ranked.front().rc.stage_layers.back(), with_mtp.ranked.front().rc.stage_layers.back());
}

// With virtual stages and an MTP module the planner also tries the layers filled from the front
// with the remainder on the last virtual stage, Megatron-Bridge's DeepSeek-V3 layout (61 layers
// over pp 8 x vpp 2 as [4*15, 1]); without MTP that list is not among the candidates.
TEST(Planner, MtpFrontFilledVirtualStages) {
  Json j = {{"model", "deepseek-v3"},
            {"hardware", "h800"},
            {"cluster", {{"num_gpus", 2048}}},
            {"training", {{"seq_len", 4096}, {"global_batch_size", 15360}, {"precision", "fp8"}, {"mtp_layers", 1}}},
            {"parallel", {{"tp", 1}, {"pp", 8}, {"vpp", 2}, {"ep", 64}, {"micro_batch_size", 1}, {"zero_stage", 1}, {"recompute", "none"}}}};
  PlanOptions o = small_options();
  o.top_k = 0;
  std::vector<int64_t> front(15, 4);
  front.push_back(1);
  auto has_front = [&](const PlanResult& r) {
    return std::any_of(r.ranked.begin(), r.ranked.end(), [&](const Candidate& c) { return c.rc.vstage_layers == front; });
  };
  EXPECT_TRUE(has_front(plan(j, "<plan-test>", "", o)));
  j["training"]["mtp_layers"] = 0;
  EXPECT_FALSE(has_front(plan(j, "<plan-test>", "", o)));
}

TEST(Planner, UnevenSplitForLayersNotDividingPp) {
  Json j = {{"model", "llama3.1-405b"},
            {"hardware", "h100-sxm"},
            {"cluster", {{"num_gpus", 2048}}},
            {"training", {{"seq_len", 8192}, {"global_batch_size", 256}}},
            {"parallel", {{"tp", 8}, {"pp", 16}, {"cp", 1}}}};
  PlanOptions o = small_options();
  o.top_k = 1;
  const PlanResult r = plan(j, "<plan-test>", "", o);
  ASSERT_FALSE(r.ranked.empty());
  bool interleaved = false;
  for (const auto& c : r.ranked) {
    if (c.balanced_split) continue;  // split by cost, not by the enumeration's rule
    if (c.rc.parallel.vpp == 1) {
      // Megatron's shorter end stages: 14 layers between them, neither above a middle stage's 8.
      EXPECT_EQ(c.rc.parallel.first_stage_layers + c.rc.parallel.last_stage_layers, 14);
      EXPECT_LE(c.rc.parallel.first_stage_layers, 8);
      EXPECT_LE(c.rc.parallel.last_stage_layers, 8);
    } else {
      // With virtual stages: one list over pp*vpp virtual stages, the first and last shortest
      // and every pipeline stage within one layer of the others.
      interleaved = true;
      const auto& v = c.rc.vstage_layers;
      ASSERT_EQ(static_cast<int64_t>(v.size()), 16 * c.rc.parallel.vpp);
      EXPECT_EQ(std::accumulate(v.begin(), v.end(), int64_t{0}), 126);
      EXPECT_EQ(v.front(), *std::min_element(v.begin(), v.end()));
      EXPECT_EQ(v.back(), *std::min_element(v.begin(), v.end()));
      const auto [lo, hi] = std::minmax_element(c.rc.stage_layers.begin(), c.rc.stage_layers.end());
      EXPECT_LE(*hi - *lo, 1);
    }
  }
  EXPECT_TRUE(interleaved) << "no interleaved layout ranked";
}

// 126 layers over pp 16 x vpp 8 = 128 virtual stages: only Megatron's split with the embedding
// and the loss as layer slots fits, the first virtual stage the embedding alone and the last
// the output head alone.
TEST(Planner, EmbeddingAndLossSlotsMakeMoreVirtualStagesThanLayers) {
  Json j = {{"model", "llama3.1-405b"},
            {"hardware", "h100-sxm"},
            {"cluster", {{"num_gpus", 2048}}},
            {"training", {{"seq_len", 8192}, {"global_batch_size", 256}}},
            {"parallel", {{"tp", 8}, {"pp", 16}, {"vpp", 8}, {"cp", 1}}}};
  PlanOptions o = small_options();
  o.top_k = 1;
  const PlanResult r = plan(j, "<plan-test>", "", o);
  ASSERT_FALSE(r.ranked.empty());
  const auto& v = r.ranked.front().rc.vstage_layers;
  ASSERT_EQ(v.size(), 128u);
  EXPECT_EQ(v.front(), 0);
  EXPECT_EQ(v.back(), 0);
  EXPECT_EQ(std::count(v.begin(), v.end(), 1), 126);
  EXPECT_EQ(r.rejected.count("layers do not split over pp*vpp"), 0u);
}

// A run's Megatron pipeline layout fixes the split: every ranked layout with its pp x vpp holds
// the layout's layers per virtual stage (written out as stage_layers), and a layout's split
// does not carry over to other pipeline shapes.
TEST(Planner, PipelineLayoutKeepsItsSplit) {
  Json j = run_8b();
  j["parallel"] = {{"pp", 4}, {"vpp", 2}, {"tp", 2}, {"pipeline_layout", "Et*3|(t*4|)*6t*5L"}};
  PlanOptions o = small_options();
  o.top_k = 0;
  const PlanResult r = plan(j, "<plan-test>", "", o);
  ASSERT_FALSE(r.ranked.empty());
  for (const auto& c : r.ranked) {
    EXPECT_EQ(c.rc.parallel.pp, 4);
    EXPECT_EQ(c.rc.vstage_layers, (std::vector<int64_t>{3, 4, 4, 4, 4, 4, 4, 5}));
    EXPECT_TRUE(c.rc.parallel.pipeline_layout.is_null());
  }
}

// Two stages cannot take Megatron's shorter first and last stages: an odd layer count splits
// as torchtitan's split points do, the remainder on the last stage.
TEST(Planner, OddLayersOnTwoStagesSplitByList) {
  Json j = run_8b();
  j["model"] = {{"hidden_size", 1024}, {"num_attention_heads", 8}, {"num_hidden_layers", 13}, {"intermediate_size", 4096},
                {"vocab_size", 32000}, {"hidden_act", "silu"}};
  j["parallel"] = {{"pp", 2}, {"tp", 1}};
  PlanOptions o = small_options();
  o.top_k = 0;
  const PlanResult r = plan(j, "<plan-test>", "", o);
  ASSERT_FALSE(r.ranked.empty());
  // Both ways round: the balanced list and its mirror (the head-carrying last stage lighter).
  bool mirrored = false;
  for (const auto& c : r.ranked) {
    const auto& st = c.rc.stage_layers;
    EXPECT_TRUE(st == (std::vector<int64_t>{6, 7}) || st == (std::vector<int64_t>{7, 6})) << st.front() << "," << st.back();
    mirrored = mirrored || st == (std::vector<int64_t>{7, 6});
  }
  EXPECT_TRUE(mirrored) << "the mirrored split was not ranked";
}

// plan --json carries every setting the planner chose, so its layouts re-run as ranked: the
// CP exchange when cp > 1 and the expert-tensor-parallel size of a MoE model.
TEST(Planner, JsonLayoutsCarryCpExchangeAndEtp) {
  Json j = run_8b();
  j["model"] = {{"hidden_size", 1024}, {"num_attention_heads", 8}, {"num_key_value_heads", 8}, {"num_hidden_layers", 4},
                {"intermediate_size", 4096}, {"moe_intermediate_size", 1024}, {"num_local_experts", 8},
                {"num_experts_per_tok", 2}, {"vocab_size", 32000}};
  j["parallel"] = {{"pp", 1}, {"cp", 2}, {"tp", 2}};
  PlanOptions o = small_options();
  o.top_k = 1;
  const PlanResult r = plan(j, "<plan-test>", "", o);
  ASSERT_FALSE(r.ranked.empty());
  const Json out = plan_json(r, 5);
  for (const auto& l : out["layouts"]) {
    EXPECT_TRUE(l["parallel"].contains("cp_comm")) << l["layout"];
    EXPECT_TRUE(l["parallel"].contains("etp")) << l["layout"];
    // Re-running the JSON layout gives a valid run.
    Json again = j;
    again["parallel"] = l["parallel"];
    EXPECT_NO_THROW(config::parse_run(again, "<rerun>", "")) << l["layout"];
  }
}

// plan --json layouts carry the output contract's keys (docs/OUTPUT.md) under the same names
// as estimate and simulate, the simulated ones read from the simulation.
TEST(Planner, JsonLayoutsCarryTheOutputContract) {
  const PlanResult r = plan(run_8b(), "<plan-test>", "", small_options());
  ASSERT_FALSE(r.ranked.empty());
  const Json out = plan_json(r, 5);
  ASSERT_FALSE(out["layouts"].empty());
  for (const auto& l : out["layouts"]) {
    for (const char* k : {"step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu", "tflops_per_gpu", "model_flops_per_step",
                          "bubble_fraction", "peak_memory_bytes", "fits"}) {
      EXPECT_TRUE(l.contains(k)) << k << " missing in " << l["layout"];
    }
    for (const char* k : {"compute_s", "recompute_s", "host_s", "bubble_s", "optimizer_s", "exposed_comm_s"}) {
      EXPECT_TRUE(l["breakdown"].contains(k)) << k << " missing in " << l["layout"];
    }
    const double gpus = 16, tokens = 64.0 * 4096.0;
    EXPECT_NEAR(l["tokens_per_s"].get<double>(), tokens / l["step_time_s"].get<double>(), 1e-6 * l["tokens_per_s"].get<double>());
    EXPECT_NEAR(l["tokens_per_s_per_gpu"].get<double>() * gpus, l["tokens_per_s"].get<double>(), 1e-6 * l["tokens_per_s"].get<double>());
  }
  const auto& best = r.ranked.front();
  ASSERT_TRUE(best.simulated);
  EXPECT_DOUBLE_EQ(out["layouts"][0]["step_time_s"].get<double>(), best.sim_step_s);
  EXPECT_DOUBLE_EQ(out["layouts"][0]["breakdown"]["compute_s"].get<double>(), best.sim_breakdown.compute);
}

TEST(Planner, BadRunFileIsAConfigError) {
  Json j = run_8b();
  j["training"]["seq_len"] = -1;
  EXPECT_THROW(plan(j, "<plan-test>", "", small_options()), core::ConfigError);
}

}  // namespace
}  // namespace stepcast::plan
