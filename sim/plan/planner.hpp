// stepcast planner: every valid layout of a model on a GPU count, ranked.
//
// The run file fixes the model, hardware, cluster and training; its parallel block (possibly
// empty) fixes the dimensions it names. The planner enumerates the others (tp, cp, pp with
// Megatron-style uneven end stages, vpp, dp, ep, micro-batch, ZeRO stage or FSDP, recompute,
// schedule), rejects layouts the validator refuses or that do not fit memory (each reason
// counted), ranks the rest with the analytical estimate, re-simulates the best K with the event
// engine and ranks those by simulated step time. Deterministic: ties break on the layout text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sim/config/run_config.hpp"
#include "sim/core/json_reader.hpp"
#include "sim/estimate/estimate.hpp"

namespace stepcast::plan {

struct PlanOptions {
  int top_k = 5;           // layouts re-simulated with the event engine (0: estimate only)
  int64_t max_tp = 0;      // 0: up to the node size
  int64_t max_pp = 0;      // 0: up to the layer count
  int64_t max_cp = 8;
  int64_t max_mbs = 8;
  int64_t max_vpp = 8;
  int threads = 0;         // 0: hardware concurrency
  // Share of the GPU's memory a layout must leave free (the caching allocator's fragmentation
  // and anything else the ledger does not hold): a layout fits when its ledger peak is at most
  // (1 - memory_headroom) x capacity. 0 keeps the ledger's own verdict.
  double memory_headroom = 0;
  // Also try CPU offload on the sharded layouts: the optimizer's (ZeRO 1-3) and the parameters'
  // (ZeRO-3 / FSDP), on profiles that describe their host. A run file's parallel.offload is
  // kept as it is either way.
  bool offload = false;
  // Pipeline schedules the search may use (empty: 1F1B and ZB-H1 without virtual stages,
  // interleaved with them, ZB-V and DualPipeV at vpp 2; GPipe only when listed). A framework without
  // zero-bubble schedules lists what it runs, e.g. {1f1b, interleaved}.
  std::vector<config::Schedule> schedules;
  // Keep only layouts this framework runs as they are ("megatron", "torchtitan", "deepspeed",
  // "accelerate"; empty: any), the ones `stepcast export` writes: the others are rejected with
  // the setting at fault. Under torchtitan, deepspeed and accelerate each layout is costed as the
  // framework runs it (its exported config imported back).
  std::string framework;
  // Ranked layouts returned in full (PlanResult::ranked), best first; every fitting layout is
  // still estimated and counted in PlanResult::fit. 0 keeps them all; otherwise at least
  // 3 * top_k (what the re-simulation may reach) and 64 (for the explanation's runner-up).
  size_t keep = 0;
  // Progress, when set: (phase, done, total) for "estimated" (layouts through the validator,
  // the ledger and the estimate) and "simulating" (re-simulations, the total an upper bound).
  // Called from one thread at a time.
  std::function<void(const char* phase, size_t done, size_t total)> progress;
};

// Fills PlanOptions::schedules, when empty, with the schedules PlanOptions::framework runs
// (megatron: 1F1B and interleaved; torchtitan: those and ZB-V and DualPipeV, whose zero-bubble
// schedules take virtual stages; deepspeed, accelerate: no pipeline, 1F1B as the one
// placeholder). An unknown framework name is a UserError naming `option`.
void apply_framework(PlanOptions& opt, const std::string& option);

// A comma-separated list of schedule names (gpipe, 1f1b, interleaved, zb-h1, zbv, dualpipev) for
// PlanOptions::schedules; a bad or repeated name is a UserError naming `option`.
std::vector<config::Schedule> parse_schedules(const std::string& list, const std::string& option);

struct Candidate {
  config::RunConfig rc;
  estimate::StepEstimate est;
  bool simulated = false;
  double sim_step_s = 0;          // simulated step time (when simulated)
  double sim_bubble_fraction = 0;
  estimate::Breakdown sim_breakdown;
  double peak_memory_bytes = 0;   // simulated memory timeline peak, else the ledger peak
  bool balanced_split = false;    // a cost-balanced pipeline split added after the enumeration
  bool schedule_leader = false;   // simulated as the best of its schedule that the cut left out
  bool memory_rescued = false;    // fits only on its memory-balanced split (PlanResult::rescued)
  [[nodiscard]] double step_s() const { return simulated ? sim_step_s : est.step_time_s; }
  [[nodiscard]] const estimate::Breakdown& breakdown() const { return simulated ? sim_breakdown : est.breakdown; }
  [[nodiscard]] double bubble_fraction() const { return simulated ? sim_bubble_fraction : est.bubble_fraction; }
  // Runs the event simulation of rc and keeps its step, bubble, breakdown and memory peak.
  void simulate();
};

struct PlanResult {
  std::vector<Candidate> ranked;             // best first: simulated ones, then the rest by estimate (PlanOptions::keep)
  std::map<std::string, int64_t> rejected;   // reason -> layouts
  struct Rejection {
    std::string layout;   // the first layout rejected for the reason (layout_text)
    std::string message;  // its validator message ("$.training.seq_len: got ...")
  };
  std::map<std::string, Rejection> rejected_example;  // reason -> the first such layout, when it was invalid
  // Of the layouts that do not fit in memory, the one with the smallest ledger peak (the first
  // in enumeration order on a tie): how far the GPU count is from fitting.
  struct Lightest {
    std::string layout;
    double peak_bytes = 0, capacity_bytes = 0;
    // "the lightest, LAYOUT, needs X GiB per GPU of Y GiB": how far the GPU count is from fitting.
    [[nodiscard]] std::string text() const;
  };
  std::optional<Lightest> lightest_rejected;
  int64_t enumerated = 0;
  int64_t fit = 0;
  // Cost-balanced pipeline splits (sim/plan/split.hpp) of the best layouts by estimate: how many
  // differed from every split the enumeration tried and were evaluated, and how many of those
  // fit and joined the ranking. Counted apart from enumerated / fit / rejected. Of those tried,
  // balanced_memory_bound were balanced within the memory limit after the split by time alone
  // overfilled a stage (that split is tried as well).
  int64_t balanced_tried = 0;
  int64_t balanced_added = 0;
  int64_t balanced_memory_bound = 0;
  // Layouts that fit on none of the enumeration's splits but have a stage with room: the best
  // by estimate were split by cost within the memory limit (rescue_tried) and `rescued` of them
  // fit and joined the ranking (flagged memory_rescued and balanced_split; not in `fit`).
  int64_t rescue_tried = 0;
  int64_t rescued = 0;
  // Of the simulated layouts within kNearBest of the winner's step, the one whose peak leaves
  // the most memory free, when that is at least kRoomierBy of the GPU's memory more than the
  // winner leaves (an index into `ranked`): the pick for a run that needs allocator room.
  std::optional<size_t> roomier;
  std::string explanation;                   // why the winner beats the runner-up
  // CPU offload was not searched (no --offload) though the profile describes its host.
  bool offload_untried = false;
};

// A step's time by category (compute, recomputation, host-side expert work, pipeline bubble,
// optimizer step, exposed communication by kind), seconds.
std::vector<std::pair<std::string, double>> time_categories(const estimate::Breakdown& b);

// What `a` (called `subject`) avoids and pays against `b` (breakdown differences, largest
// first).
std::string compare_text(const Candidate& a, const Candidate& b, const std::string& subject = "the winner");

// One candidate's figures as the tables print them: rates of the estimate scaled to the
// (simulated) step time.
struct Row {
  std::string layout;
  double step, est_step, tok_gpu, mfu, peak_gib, bubble, comm;
  bool simulated;
  double tok_s, hfu, tflops;
};
Row row_of(const Candidate& c);
// Layout differences of a against b, e.g. "pp 4 vs 8, micro-batch 2 vs 1".
std::string layout_diff(const config::Parallel& a, const config::Parallel& b);

using memory::kAllocatorReserve;
// Steps this close to the best are a tie at the model's resolution (its error on published
// runs is several percent; between layouts of one model on one machine it is smaller, but not
// 1%), and a layout with this much more memory free is worth naming beside the winner.
inline constexpr double kNearBest = 0.01;
inline constexpr double kRoomierBy = 0.05;
// The simulated layout within kNearBest of the best step that leaves the most memory free, if
// it leaves at least kRoomierBy of the memory more than the best (ranked best first).
std::optional<size_t> roomier_near_best(const std::vector<Candidate>& ranked);
// A warning when a layout's peak leaves less than kAllocatorReserve of memory free and the
// search was not already held to that headroom (empty otherwise).
std::string memory_margin_note(double peak_bytes, double capacity_bytes, double headroom);
// One-line layout, e.g. "tp 8 pp 4 dp 32 cp 1 ep 1 vpp 2 mbs 1 zero 1 rc selective interleaved".
std::string layout_text(const config::Parallel& p);
// The Megatron-Core flag that sets a run's uneven pipeline split (--pipeline-model-parallel-layout,
// or --hybrid-layer-pattern with '|' marks); empty for pp 1, an even split, a schedule other
// than 1F1B and interleaved (which Megatron-Core runs), or a hybrid pattern that marks its own
// stages.
std::string megatron_split_flag(const config::RunConfig& rc);
// Its uneven pipeline split part ("first 3 last 2", "stages [1, 2*30, 1*33]"; empty when even).
std::string split_text(const config::Parallel& p);

// run: a run file object whose parallel block is absent or partial (keys present are fixed).
PlanResult plan(const core::Json& run, const std::string& source_name, const std::string& base_dir,
                const PlanOptions& opt);

// Output. Each shows the best `rows` layouts, and the roomier layout near the best where the
// explanation names one ranked below them.
std::vector<size_t> shown_ranks(const PlanResult& r, size_t rows);  // indices into r.ranked
std::string plan_table(const PlanResult& r, size_t rows);
std::string plan_csv(const PlanResult& r, size_t rows);
core::Json plan_json(const PlanResult& r, size_t rows);
// The best layout's memory ledger and a timeline excerpt (the first part of its simulated step,
// one row per stage and stream), for `stepcast report`.
core::Json plan_detail(const Candidate& best);

}  // namespace stepcast::plan
