// Cost-balanced pipeline splits: the min-max split is optimal (checked against every split of
// small cases), the stage-level walk never makes the busiest pipeline stage slower, balanced
// splits of real runs estimate faster than layer-count splits, and the planner adds them only
// where it chooses the split.
#include "sim/plan/split.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <random>

#include "sim/estimate/estimate.hpp"
#include "sim/memory/ledger.hpp"
#include "sim/plan/planner.hpp"

namespace stepcast::plan {
namespace {

using core::Json;

std::vector<double> group_costs(const std::vector<int64_t>& counts, const std::vector<double>& w, const std::vector<double>& extra) {
  std::vector<double> out;
  size_t layer = 0;
  for (size_t g = 0; g < counts.size(); ++g) {
    double c = extra[g];
    for (int64_t k = 0; k < counts[g]; ++k) c += w[layer++];
    out.push_back(c);
  }
  return out;
}

double largest(const std::vector<double>& c) { return *std::max_element(c.begin(), c.end()); }

// A random split problem: 3-10 layers weighing 0.5-3 each over `min_groups` to
// `min_groups + spread - 1` groups, the first and last group with an end cost of 0-6.
struct Problem {
  int64_t n, groups;
  std::vector<double> w, extra;
};
Problem random_problem(std::mt19937_64& rng, int64_t min_groups, uint64_t spread) {
  std::uniform_real_distribution<double> weight(0.5, 3.0), end(0.0, 6.0);
  Problem p;
  p.n = 3 + static_cast<int64_t>(rng() % 8);
  p.groups = min_groups + static_cast<int64_t>(rng() % spread);
  p.w.resize(static_cast<size_t>(p.n));
  for (auto& x : p.w) x = weight(rng);
  p.extra.assign(static_cast<size_t>(p.groups), 0.0);
  p.extra.front() += end(rng);
  p.extra.back() += end(rng);
  return p;
}

// Every split of n layers over `groups` (middle groups at least one layer).
void every_split(int64_t n, int64_t groups, const std::function<void(const std::vector<int64_t>&)>& visit) {
  std::vector<int64_t> counts(static_cast<size_t>(groups), 0);
  std::function<void(int64_t, int64_t)> rec = [&](int64_t g, int64_t left) {
    if (g + 1 == groups) {
      counts[static_cast<size_t>(g)] = left;
      visit(counts);
      return;
    }
    const int64_t lo = g == 0 ? 0 : 1;
    for (int64_t k = lo; k <= left; ++k) {
      counts[static_cast<size_t>(g)] = k;
      rec(g + 1, left - k);
    }
  };
  rec(0, n);
}

// The smallest largest group cost over every split within `caps` (none when empty) and, among
// those, the smallest sum of squared group costs; infinity when no split is within the caps.
std::pair<double, double> best_by_search(int64_t n, int64_t groups, const std::vector<double>& w, const std::vector<double>& extra,
                                         const std::vector<int64_t>& caps = {}) {
  double best_max = std::numeric_limits<double>::infinity(), best_sq = best_max;
  every_split(n, groups, [&](const std::vector<int64_t>& c) {
    for (size_t g = 0; g < caps.size(); ++g) {
      if (c[g] > caps[g]) return;
    }
    const auto g = group_costs(c, w, extra);
    const double m = largest(g);
    double sq = 0;
    for (double x : g) sq += x * x;
    if (m < best_max - 1e-9) {
      best_max = m;
      best_sq = sq;
    } else if (m <= best_max + 1e-9) {
      best_sq = std::min(best_sq, sq);
    }
  });
  return {best_max, best_sq};
}

// Checks a split min_max_split returned against the searched optimum.
void expect_optimal(const std::vector<int64_t>& got, int64_t n, const std::vector<double>& w, const std::vector<double>& extra,
                    std::pair<double, double> best, int trial) {
  EXPECT_EQ(std::accumulate(got.begin(), got.end(), int64_t{0}), n);
  for (size_t g = 1; g + 1 < got.size(); ++g) EXPECT_GE(got[g], 1);
  const auto g = group_costs(got, w, extra);
  double sq = 0;
  for (double x : g) sq += x * x;
  EXPECT_NEAR(largest(g), best.first, 1e-9 * best.first) << "trial " << trial;
  EXPECT_NEAR(sq, best.second, 1e-9 * best.second) << "trial " << trial;
}

TEST(Split, MinMaxSplitIsOptimalAgainstEverySplit) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const auto [n, groups, w, extra] = random_problem(rng, 1, 4);
    const auto best = best_by_search(n, groups, w, extra);
    const auto got = min_max_split(w, extra, groups);
    ASSERT_EQ(static_cast<int64_t>(got.size()), groups) << "trial " << trial;
    expect_optimal(got, n, w, extra, best, trial);
  }
}

TEST(Split, CappedMinMaxSplitIsOptimalAgainstEverySplitWithinTheCaps) {
  std::mt19937_64 rng(11);
  int infeasible = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const auto [n, groups, w, extra] = random_problem(rng, 2, 3);
    std::vector<int64_t> caps(static_cast<size_t>(groups));
    for (auto& c : caps) c = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
    const auto best = best_by_search(n, groups, w, extra, caps);
    const auto got = min_max_split(w, extra, groups, caps);
    if (best.first == std::numeric_limits<double>::infinity()) {
      EXPECT_TRUE(got.empty()) << "trial " << trial;
      ++infeasible;
      continue;
    }
    ASSERT_EQ(static_cast<int64_t>(got.size()), groups) << "trial " << trial;
    for (size_t g = 0; g < got.size(); ++g) EXPECT_LE(got[g], caps[g]) << "trial " << trial;
    expect_optimal(got, n, w, extra, best, trial);
    // The stage walk keeps the caps too.
    std::vector<int64_t> owner(static_cast<size_t>(groups));
    for (int64_t v = 0; v < groups; ++v) owner[static_cast<size_t>(v)] = v % 2;
    const auto walked = balance_stages(got, w, extra, owner, caps);
    for (size_t v = 0; v < walked.size(); ++v) EXPECT_LE(walked[v], caps[v]) << "trial " << trial;
  }
  // Both kinds of case were drawn.
  EXPECT_GT(infeasible, 10);
  EXPECT_LT(infeasible, 290);
}

TEST(Split, EqualLayersWithAHeavyOutputLayerShortenTheLastStage) {
  // 32 equal layers, the embedding worth 0.1 of one on the first of four stages and the output
  // layer 2.5 on the last: the busiest stage holds 9 layers' worth (8.65 is the average), and
  // the last stage fewer layers.
  const std::vector<double> w(32, 1.0);
  const std::vector<double> extra{0.1, 0.0, 0.0, 2.5};
  const auto got = min_max_split(w, extra, 4);
  EXPECT_NEAR(largest(group_costs(got, w, extra)), 9.0, 1e-12);
  EXPECT_LT(got.back(), got.front());
  // The only split within 9: the first stage cannot take 9 layers on top of the embedding.
  EXPECT_EQ(got, (std::vector<int64_t>{8, 9, 9, 6}));
}

TEST(Split, EdgeCases) {
  EXPECT_EQ(min_max_split({1, 2, 3}, {0}, 1), (std::vector<int64_t>{3}));
  EXPECT_TRUE(min_max_split({1}, {0, 0, 0, 0}, 4).empty());  // two middle stages need two layers
  EXPECT_EQ(min_max_split({1, 1}, {0, 0, 0, 0}, 4), (std::vector<int64_t>{0, 1, 1, 0}));
  EXPECT_TRUE(min_max_split({1, 1}, {0, 0}, 0).empty());
  EXPECT_TRUE(min_max_split({1, 1}, {0}, 2).empty());  // one extra per group
}

TEST(Split, StageWalkBalancesPipelineStagesUnderAV) {
  // A V over two stages: virtual stages 0 and 3 on stage 0, 1 and 2 on stage 1. The embedding
  // is light and the output layer heavy, both on stage 0.
  const std::vector<double> w(16, 1.0);
  const std::vector<double> extra{0.2, 0.0, 0.0, 3.0};
  const std::vector<int64_t> owner{0, 1, 1, 0};
  const auto counts = min_max_split(w, extra, 4);
  auto stage_max = [&](const std::vector<int64_t>& c) {
    const auto g = group_costs(c, w, extra);
    return std::max(g[0] + g[3], g[1] + g[2]);
  };
  const auto walked = balance_stages(counts, w, extra, owner);
  EXPECT_LE(stage_max(walked), stage_max(counts) + 1e-12);
  // The best any split reaches: 19.2 over two stages, so at least 9.6 (whole layers: 10).
  double best = std::numeric_limits<double>::infinity();
  every_split(16, 4, [&](const std::vector<int64_t>& c) { best = std::min(best, stage_max(c)); });
  EXPECT_NEAR(stage_max(walked), best, 1e-12);
  EXPECT_EQ(std::accumulate(walked.begin(), walked.end(), int64_t{0}), 16);
}

config::RunConfig parse(const Json& j) { return config::parse_run(j, "<split-test>", ""); }

Json run(const std::string& model, int64_t gpus, const Json& parallel) {
  return {{"model", model},
          {"hardware", "h100-sxm"},
          {"cluster", {{"num_gpus", gpus}}},
          {"training", {{"seq_len", 8192}, {"global_batch_size", 128}}},
          {"parallel", parallel}};
}

// The balanced split of a run, and the estimate with it against the run's own split.
std::pair<double, double> balanced_against_count(Json j) {
  const auto rc = parse(j);
  const auto list = balanced_vstage_layers(rc);
  EXPECT_EQ(static_cast<int64_t>(list.size()), rc.parallel.pp * rc.parallel.vpp);
  EXPECT_NE(list, rc.vstage_layers);
  j["parallel"]["stage_layers"] = list;
  return {estimate::estimate_step(parse(j)).step_time_s, estimate::estimate_step(rc).step_time_s};
}

TEST(Split, BalancedSplitsOfRealRunsEstimateFaster) {
  // Llama 3.1 8B on four stages: its 128k-entry output layer weighs about 2.5 layers, so an even
  // split of 32 layers leaves the last stage the busiest.
  {
    const auto rc = parse(run("llama3.1-8b", 32, {{"tp", 2}, {"pp", 4}, {"micro_batch_size", 1}, {"sp", true}}));
    const auto list = balanced_vstage_layers(rc);
    ASSERT_EQ(list.size(), 4u);
    EXPECT_LT(list.back(), 8);
    const auto [balanced, even] = balanced_against_count(run("llama3.1-8b", 32, {{"tp", 2}, {"pp", 4}, {"micro_batch_size", 1}, {"sp", true}}));
    EXPECT_LT(balanced, 0.97 * even) << "balanced " << balanced << " s, even " << even << " s";
  }
  // Nemotron-H 8B's 52 Mamba-2, attention and MLP blocks under ZB-V on four stages: the
  // layer-count split (6 or 7 blocks per virtual stage, as the planner enumerates it) puts the
  // output layer on top of a full share on stage 0.
  {
    const Json par = {{"pp", 4}, {"vpp", 2}, {"schedule", "zbv"}, {"micro_batch_size", 1}, {"stage_layers", {6, 7, 7, 7, 7, 6, 6, 6}}};
    const auto [balanced, counted] = balanced_against_count(run("nemotron-h-8b", 32, par));
    EXPECT_LT(balanced, 0.95 * counted) << "balanced " << balanced << " s, by count " << counted << " s";
  }
}

TEST(Split, MemoryCapsMoveLayersOffAFullStage) {
  // Llama 3.1 8B on four 1F1B stages at 16k tokens without recomputation: stage 0 holds four
  // micro-batches of activations, so 8 layers there need about 105 GiB of the H100's 79.6. By
  // time alone the output layer pushes layers forward ([8, 8, 9, 7]); within the memory the
  // early stages give layers to the later ones, which hold fewer micro-batches.
  const Json j = run("llama3.1-8b", 16, {{"pp", 4}, {"micro_batch_size", 1}});
  Json jj = j;
  jj["training"]["seq_len"] = 16384;
  const auto rc = parse(jj);
  EXPECT_FALSE(memory::compute_ledger(rc).fits());  // the run's own even split
  const BalancedSplit by_time = balanced_split(rc, 0);
  EXPECT_FALSE(by_time.memory_bound);
  EXPECT_EQ(by_time.layers, balanced_vstage_layers(rc));
  const BalancedSplit bs = balanced_split(rc, 1.0);
  ASSERT_TRUE(bs.memory_bound);
  EXPECT_TRUE(bs.fits);
  EXPECT_EQ(bs.time_only, by_time.layers);
  EXPECT_EQ(bs.time_only_stage, 0);
  ASSERT_EQ(bs.layers.size(), 4u);
  EXPECT_LT(bs.layers.front(), by_time.layers.front());
  EXPECT_EQ(std::accumulate(bs.layers.begin(), bs.layers.end(), int64_t{0}), 32);
  // Its ledger fits, every stage within the limit; the time-only one's stage 0 did not.
  Json fitted = jj;
  fitted["parallel"]["stage_layers"] = bs.layers;
  const auto ledger = memory::compute_ledger(parse(fitted));
  EXPECT_TRUE(ledger.fits());
  EXPECT_LE(ledger.peak().value(), bs.limit_bytes);
  EXPECT_GT(bs.time_only_peak_bytes, bs.limit_bytes);
  // Against every split of the 32 layers: at this limit some fit and the search found one; at
  // 90% of the memory none does, and the search says so.
  const double capacity = ledger.capacity.value();
  double lightest = std::numeric_limits<double>::infinity();
  every_split(32, 4, [&](const std::vector<int64_t>& c) {
    if (c.front() == 0 || c.back() == 0) return;  // the ends hold layers in this run's splits
    config::RunConfig r = rc;
    r.parallel.set_split(-1, -1, c);
    core::Issues issues;
    config::derive_and_validate(r, issues);
    ASSERT_TRUE(issues.empty()) << issues.lines().front();
    lightest = std::min(lightest, memory::compute_ledger(r).peak().value());
  });
  EXPECT_LE(lightest, capacity);
  EXPECT_GT(lightest, 0.9 * capacity);
  EXPECT_FALSE(balanced_split(rc, 0.9).fits);
  // Where no split fits the search says so and keeps the split by time alone.
  jj["training"]["seq_len"] = 65536;
  const auto huge = parse(jj);
  const BalancedSplit none = balanced_split(huge, 1.0);
  EXPECT_FALSE(none.fits);
  EXPECT_FALSE(none.memory_bound);
  EXPECT_EQ(none.layers, balanced_vstage_layers(huge));
  // A run whose split by time alone fits is left to time.
  const auto small = parse(j);
  const BalancedSplit roomy = balanced_split(small, 1.0);
  EXPECT_FALSE(roomy.memory_bound);
  EXPECT_TRUE(roomy.fits);
  EXPECT_EQ(roomy.layers, balanced_vstage_layers(small));
}

TEST(Split, PlannerAddsBalancedSplitsOnlyWhereItChoosesTheSplit) {
  PlanOptions o;
  o.top_k = 2;
  o.threads = 2;
  Json j = run("nemotron-h-8b", 32, {{"pp", 4}});
  const PlanResult r = plan(j, "<split-test>", "", o);
  EXPECT_GT(r.balanced_tried, 0);
  EXPECT_GT(r.balanced_added, 0);
  ASSERT_FALSE(r.ranked.empty());
  // The best layout is a balanced split, faster than the best layer-count split.
  EXPECT_TRUE(r.ranked.front().balanced_split);
  const auto counted = std::find_if(r.ranked.begin(), r.ranked.end(), [](const Candidate& c) { return !c.balanced_split; });
  ASSERT_NE(counted, r.ranked.end());
  EXPECT_LT(r.ranked.front().est.step_time_s, counted->est.step_time_s);
  // Balanced candidates are valid layouts with the split they claim.
  for (const auto& c : r.ranked) {
    if (!c.balanced_split) continue;
    EXPECT_EQ(std::accumulate(c.rc.vstage_layers.begin(), c.rc.vstage_layers.end(), int64_t{0}), c.rc.model.num_layers);
  }
  // A split the run file gives is kept as given.
  j["parallel"]["stage_layers"] = {13, 13, 13, 13};
  const PlanResult fixed = plan(j, "<split-test>", "", o);
  EXPECT_EQ(fixed.balanced_tried, 0);
  for (const auto& c : fixed.ranked) EXPECT_FALSE(c.balanced_split);
}

TEST(Split, PlannerKeepsTheSplitAHybridPatternMarks) {
  // Nemotron-H 8B's pattern with one '|': only layouts with two virtual stages, split there.
  const char* pattern = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-";
  const std::string blocks(pattern);
  const std::string marked = blocks.substr(0, 28) + "|" + blocks.substr(28);
  const Json model = {{"model_type", "nemotron_h"}, {"vocab_size", 131072}, {"hidden_size", 4096}, {"intermediate_size", 21504},
                      {"num_hidden_layers", 52}, {"hybrid_override_pattern", marked}, {"num_attention_heads", 32}, {"head_dim", 128},
                      {"num_key_value_heads", 8}, {"mlp_hidden_act", "relu2"}, {"ssm_state_size", 128}, {"mamba_num_heads", 128},
                      {"mamba_head_dim", 64}, {"n_groups", 8}};
  PlanOptions o;
  o.top_k = 2;
  o.threads = 2;
  const Json j = {{"model", model},
                  {"hardware", "h100-sxm"},
                  {"cluster", {{"num_gpus", 32}}},
                  {"training", {{"seq_len", 8192}, {"global_batch_size", 128}}}};
  const PlanResult r = plan(j, "<split-test>", "", o);
  ASSERT_FALSE(r.ranked.empty());
  EXPECT_EQ(r.balanced_tried, 0);
  for (const auto& c : r.ranked) {
    EXPECT_EQ(c.rc.parallel.pp * c.rc.parallel.vpp, 2);
    EXPECT_EQ(c.rc.vstage_layers, (std::vector<int64_t>{28, 24}));
  }
}

// The split as Megatron-Core's flags: the layout string reads back to the same split, and a
// hybrid pattern takes '|' marks before each virtual stage's first block.
TEST(Split, MegatronLayoutTextReadsBack) {
  const std::vector<std::vector<int64_t>> splits = {{5, 4, 4, 4, 4, 0}, {4, 4, 4, 4}, {0, 3, 3, 2, 3, 3, 1}, {7}, {1, 2}, {2, 2, 2, 2, 3, 3, 3, 1}};
  for (const auto& list : splits) {
    for (int64_t mtp : {0, 1}) {
      const std::string text = config::megatron_layout_text(list, mtp);
      const auto lay = config::parse_pipeline_layout(Json(text));
      ASSERT_TRUE(lay.error.empty()) << text << ": " << lay.error;
      EXPECT_EQ(lay.layers(), list) << text;
      EXPECT_EQ(lay.stages.front().front(), 'E') << text;
      EXPECT_EQ(lay.stages.back().back(), 'L') << text;
      EXPECT_EQ(std::count(text.begin(), text.end(), 'm'), mtp) << text;
    }
  }
  EXPECT_EQ(config::megatron_layout_text({5, 4, 4, 4, 0}, 1), "Et*5|(t*4|)*3mL");
  EXPECT_EQ(config::pattern_with_stages("M-M*-M-", {3, 4}), "M-M|*-M-");
  EXPECT_EQ(config::pattern_with_stages("M-M*-M-", {3, 3}), "");  // the counts must cover the pattern
  // The flag a plan prints: only for an uneven split under a schedule Megatron-Core runs.
  const Json par = {{"tp", 2}, {"pp", 4}, {"micro_batch_size", 1}, {"sp", true}, {"stage_layers", {9, 8, 8, 7}}};
  EXPECT_EQ(megatron_split_flag(parse(run("llama3.1-8b", 32, par))), "--pipeline-model-parallel-layout \"Et*9|(t*8|)*2t*7L\"");
  Json even = par;
  even.erase("stage_layers");
  EXPECT_EQ(megatron_split_flag(parse(run("llama3.1-8b", 32, even))), "");
  Json zb = par;
  zb["schedule"] = "zb-h1";
  EXPECT_EQ(megatron_split_flag(parse(run("llama3.1-8b", 32, zb))), "");
}

}  // namespace
}  // namespace stepcast::plan
