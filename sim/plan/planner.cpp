#include "sim/plan/planner.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <filesystem>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "sim/accuracy/titan_import.hpp"
#include "sim/config/framework_export.hpp"
#include "sim/core/error.hpp"
#include "sim/core/stats.hpp"
#include "sim/engine/step_sim.hpp"
#include "sim/estimate/workload.hpp"
#include "sim/memory/ledger.hpp"
#include "sim/plan/split.hpp"
#include "sim/report/output.hpp"

namespace stepcast::plan {

using config::Parallel;
using config::Recompute;
using config::RunConfig;
using config::Schedule;
using core::Json;

namespace {

std::vector<int64_t> powers_of_two_upto(int64_t hi) {
  std::vector<int64_t> out;
  for (int64_t x = 1; x <= hi; x *= 2) out.push_back(x);
  return out;
}

std::vector<int64_t> divisors(int64_t n, int64_t hi) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= std::min(n, hi); ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

struct Sharding {
  int zero;
  bool fsdp;
  int64_t replicate = 1;  // parallel.dp_replicate
  config::Offload offload = config::Offload::kNone;
};

using core::fmt;

}  // namespace

void Candidate::simulate() {
  const auto s = engine::simulate_step(rc);
  simulated = true;
  sim_step_s = s.step.step_time_s;
  sim_bubble_fraction = s.step.bubble_fraction;
  sim_breakdown = s.step.breakdown;
  peak_memory_bytes = s.memory_timeline_peak_bytes;
}

std::vector<std::pair<std::string, double>> time_categories(const estimate::Breakdown& b) {
  std::vector<std::pair<std::string, double>> out{{"compute", b.compute - b.recompute - b.host},
                                                  {"recomputation", b.recompute},
                                                  {"host-side expert work", b.host},
                                                  {"pipeline bubble", b.bubble},
                                                  {"optimizer step", b.optimizer}};
  for (const auto& [k, v] : b.exposed_comm) out.emplace_back("exposed " + k + " communication", v);
  return out;
}

// An uneven pipeline split as the layout column writes it ("first 3 last 2", or the virtual
// stages' list with runs of equal stages as n*k: "stages [1, 2*30, 1*33]"); empty when even.
std::string split_text(const Parallel& p) {
  std::ostringstream o;
  if (p.first_stage_layers >= 0) o << "first " << p.first_stage_layers;
  if (p.last_stage_layers >= 0) o << (o.tellp() > 0 ? " " : "") << "last " << p.last_stage_layers;
  if (!p.stage_layer_list.empty()) o << (o.tellp() > 0 ? " " : "") << "stages " << config::run_length_text(p.stage_layer_list);
  return o.str();
}

std::string layout_diff(const Parallel& a, const Parallel& b) {
  std::vector<std::string> d;
  auto num = [&](const char* name, int64_t x, int64_t y) {
    if (x != y) d.push_back(std::string(name) + " " + std::to_string(x) + " vs " + std::to_string(y));
  };
  num("tp", a.tp, b.tp);
  num("pp", a.pp, b.pp);
  num("dp", a.dp, b.dp);
  num("cp", a.cp, b.cp);
  num("ep", a.ep, b.ep);
  if (a.ep > 1 || b.ep > 1) num("etp", a.etp, b.etp);  // etp only means something with experts
  num("vpp", a.vpp, b.vpp);
  // Sequence parallelism, which the layout column does not show (the planner turns it on with
  // TP unless the run file sets it), changes activation memory and what a pipeline stage sends.
  if (a.sp_active() != b.sp_active()) d.push_back(std::string("SP ") + (a.sp_active() ? "on" : "off") + " vs " + (b.sp_active() ? "on" : "off"));
  if (a.cp > 1 && b.cp > 1 && a.cp_comm != b.cp_comm) {
    d.push_back("CP " + config::to_string(a.cp_comm) + " vs " + config::to_string(b.cp_comm));
  }
  num("micro-batch", a.micro_batch_size, b.micro_batch_size);
  num("ZeRO stage", a.effective_zero(), b.effective_zero());
  num("dp_replicate", a.dp_replicate, b.dp_replicate);
  if (config::recompute_label(a) != config::recompute_label(b)) {
    d.push_back("recompute " + config::recompute_label(a) + " vs " + config::recompute_label(b));
  }
  if (a.schedule != b.schedule) d.push_back(config::to_string(a.schedule) + " vs " + config::to_string(b.schedule));
  if (config::offload_label(a) != config::offload_label(b)) {
    auto or_none = [](const std::string& t) { return t.empty() ? std::string("none") : t; };
    d.push_back("offload " + or_none(config::offload_label(a)) + " vs " + or_none(config::offload_label(b)));
  }
  // The pipeline split, when the stage counts agree (otherwise pp already says it), written as
  // the layout column writes it.
  if (a.pp == b.pp && a.vpp == b.vpp && split_text(a) != split_text(b)) {
    auto or_even = [](const std::string& t) { return t.empty() ? std::string("even split") : t; };
    d.push_back(or_even(split_text(a)) + " vs " + or_even(split_text(b)));
  }
  std::string s;
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + d[i];
  return s;
}

std::string compare_text(const Candidate& w, const Candidate& u, const std::string& subject) {
  auto wc = time_categories(w.breakdown()), uc = time_categories(u.breakdown());
  std::vector<std::pair<std::string, double>> delta;  // u minus w
  for (const auto& [k, v] : uc) {
    double mine = 0;
    for (const auto& [k2, v2] : wc) {
      if (k2 == k) mine = v2;
    }
    delta.emplace_back(k, v - mine);
  }
  for (const auto& [k, v] : wc) {
    if (std::none_of(uc.begin(), uc.end(), [&](const auto& x) { return x.first == k; })) delta.emplace_back(k, -v);
  }
  std::stable_sort(delta.begin(), delta.end(), [](const auto& a, const auto& b) { return std::abs(a.second) > std::abs(b.second); });
  std::string saves, pays, s;
  int ns = 0, np = 0;
  for (const auto& [k, v] : delta) {
    if (std::abs(v) < 1e-3 * w.step_s()) continue;
    if (v > 0 && ns < 3) saves += std::string(ns++ ? ", " : "") + fmt("%.3f", v) + " s of " + k;
    if (v < 0 && np < 2) pays += std::string(np++ ? ", " : "") + fmt("%.3f", -v) + " s more " + k;
  }
  if (!saves.empty()) s += "Against it " + subject + " avoids " + saves + ".";
  if (!pays.empty()) s += std::string(s.empty() ? "" : " ") + "It pays " + pays + ".";
  return s;
}

std::optional<size_t> roomier_near_best(const std::vector<Candidate>& ranked) {
  if (ranked.empty() || !ranked.front().simulated) return std::nullopt;
  const Candidate& w = ranked.front();
  const double capacity = w.est.memory.capacity.value();
  if (!(capacity > 0)) return std::nullopt;
  std::optional<size_t> best;
  double lowest = w.peak_memory_bytes;
  for (size_t i = 1; i < ranked.size(); ++i) {
    const Candidate& c = ranked[i];
    if (!c.simulated || c.step_s() > w.step_s() * (1.0 + kNearBest)) continue;
    if (c.peak_memory_bytes < lowest) {
      lowest = c.peak_memory_bytes;
      best = i;
    }
  }
  if (best && (w.peak_memory_bytes - lowest) / capacity >= kRoomierBy) return best;
  return std::nullopt;
}

namespace {

std::string explain(const PlanResult& r, double headroom) {
  if (r.ranked.empty()) return "No layout fits: see the rejection counts.";
  const Candidate& w = r.ranked.front();
  std::string s = "Best: " + layout_text(w.rc.parallel) + " at " + fmt("%.3f", w.step_s()) + " s per step (" +
                  fmt("%.1f", 100.0 * w.est.mfu * w.est.step_time_s / w.step_s()) + "% MFU).";
  if (w.memory_rescued) {
    s += " It fits only on this split: on every layer-count split the search gave it, a stage is over the memory limit.";
  }
  if (const std::string note = memory_margin_note(w.peak_memory_bytes, w.est.memory.capacity.value(), headroom); !note.empty()) {
    s += " " + note;
  }
  if (r.ranked.size() < 2) return s + " It is the only layout that fits.";
  // Layouts within 0.1% of the winner are equivalent (e.g. cp 2 with twice the micro-batch):
  // name how many, and explain against the first layout that is really slower.
  size_t ui = 1, equivalent = 0;
  while (ui < r.ranked.size() && r.ranked[ui].simulated == w.simulated && r.ranked[ui].step_s() <= w.step_s() * 1.001) {
    ++ui;
    ++equivalent;
  }
  if (equivalent > 0) {
    s += " " + std::to_string(equivalent) + (equivalent == 1 ? " other layout ties" : " other layouts tie") + " with it (within 0.1%).";
  }
  if (ui < r.ranked.size()) {
    const Candidate& u = r.ranked[ui];
    s += " The runner-up (" + layout_diff(u.rc.parallel, w.rc.parallel) + ") takes " + fmt("%.3f", u.step_s()) + " s, " +
         fmt("%.1f", 100.0 * (u.step_s() / w.step_s() - 1.0)) + "% longer.";
    s += " " + compare_text(w, u);
  }
  // The table lists the layouts past the re-simulated ones by their estimate, which can sit below
  // the winner's simulated step although the simulation usually finds steps longer than the
  // estimate: say how many, and how far the estimate fell short on the layouts re-simulated.
  if (w.simulated) {
    size_t below = 0;
    double lowest = w.step_s();
    std::vector<double> over;
    for (const Candidate& c : r.ranked) {
      if (c.simulated) {
        if (c.est.step_time_s > 0) over.push_back(c.sim_step_s / c.est.step_time_s - 1.0);
      } else if (c.est.step_time_s < w.step_s()) {
        ++below;
        lowest = std::min(lowest, c.est.step_time_s);
      }
    }
    if (below > 0 && !over.empty()) {
      s += " " + std::to_string(below) + (below == 1 ? " layout" : " layouts") + " past the re-simulated ones " +
           (below == 1 ? "has an estimate" : "have estimates") + " below its step (by up to " +
           fmt("%.1f", 100.0 * (1.0 - lowest / w.step_s())) + "%), where the re-simulated layouts' steps ran a median " +
           fmt("%+.1f", 100.0 * core::median(over)) + "% from their estimates; a larger --top re-simulates them.";
    }
  }
  if (r.roomier) {
    const Candidate& c = r.ranked[*r.roomier];
    const double capacity = w.est.memory.capacity.value();
    s += " Within " + fmt("%.0f", 100.0 * kNearBest) + "% of its step, rank " + std::to_string(*r.roomier + 1) + " (" +
         layout_diff(c.rc.parallel, w.rc.parallel) + ") leaves " + fmt("%.1f", 100.0 * (1.0 - c.peak_memory_bytes / capacity)) +
         "% of GPU memory free against " + fmt("%.1f", 100.0 * (1.0 - w.peak_memory_bytes / capacity)) + "% at " + fmt("%.3f", c.step_s()) +
         " s: the safer pick where the allocator or a longer sequence needs room.";
  }
  return s;
}

}  // namespace


std::string PlanResult::Lightest::text() const {
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  return "the lightest, " + layout + ", needs " + core::fmt("%.1f", peak_bytes / kGiB) + " GiB per GPU of " +
         core::fmt("%.1f", capacity_bytes / kGiB) + " GiB";
}

std::string memory_margin_note(double peak_bytes, double capacity_bytes, double headroom) {
  if (capacity_bytes <= 0 || headroom >= kAllocatorReserve) return "";
  const double free_share = 1.0 - peak_bytes / capacity_bytes;
  if (free_share >= kAllocatorReserve) return "";
  return "Its peak leaves " + fmt("%.1f", 100.0 * free_share) +
         "% of GPU memory free; PyTorch runs reserve up to ~16% beyond live tensors (caching allocator), so "
         "--memory-headroom 0.1 keeps only layouts with room for that.";
}

std::string layout_text(const Parallel& p) {
  std::ostringstream o;
  o << "tp " << p.tp << " pp " << p.pp << " dp " << p.dp << " cp " << p.cp;
  if (p.cp > 1) o << " " << config::to_string(p.cp_comm);
  if (p.ep > 1) o << " ep " << p.ep;
  if (p.etp > 1 && (p.ep > 1 || p.etp != p.tp)) o << " etp " << p.etp;  // etp means something with experts
  if (p.vpp > 1) o << " vpp " << p.vpp;
  o << " mbs " << p.micro_batch_size << (p.fsdp ? " fsdp" : " zero " + std::to_string(p.zero_stage));
  if (p.dp_replicate > 1) o << " dp_replicate " << p.dp_replicate;
  if (const std::string off = config::offload_label(p); !off.empty()) o << " offload " << off;
  o << " rc " << config::recompute_label(p);
  if (p.pp > 1) o << " " << config::to_string(p.schedule);
  const std::string split = split_text(p);
  if (!split.empty()) o << " " << split;
  return o.str();
}

namespace {

// One layout through the validator, the memory ledger (with the fewest recomputed layers that
// fit, when the planner searches them) and the analytical estimate.
struct Evaluated {
  bool ok = false;
  std::string reason, message;  // message: the validator's, when invalid
  double peak_bytes = 0, capacity_bytes = 0;  // the ledger's, when it does not fit
  // It does not fit, but its lightest pipeline stage is within the memory limit, so another
  // split of its layers may fit (MemorySearch::rescue); c.est then holds its estimate on the
  // split it has.
  bool rescuable = false;
  Candidate c;
};

// What evaluate() may size to the memory: the layers full recomputation covers, and (with
// --offload) the layers whose activations a layout without recomputation offloads.
struct MemorySearch {
  bool recompute_layers = false;
  bool offload_layers = false;
  bool rescue = false;  // estimate the layouts a memory-balanced split may make fit (Evaluated::rescuable)
  // --framework torchtitan / deepspeed / accelerate: the run file's model as it gives it (as_framework_runs_it).
  const Json* runtime_model = nullptr;
};

// --framework torchtitan, deepspeed or accelerate: the layout as that framework runs it, its
// exported config imported back (torchtitan: FSDP2's fp32 sharded parameters and fp32 gradient
// reduction, SDPA's FlashAttention-2 kernels, its loss and pipeline buffers; DeepSpeed: ZeRO's
// gradient dtype and buckets, its BF16 optimizer, its overlap defaults and in-step parameter
// gathers; Accelerate: its FSDP mixed precision and the models' SDPA attention), so
// the memory check, the recomputation the memory needs and the ranking are the framework's. The
// candidate's own settings (layout, split, recomputation) go through unchanged; a run the
// framework cannot express is rejected with the reason. Megatron-LM's round trip reproduces the
// run file as it is (tests/config/framework_export_test.cpp), so its layouts are costed as given,
// with its linear layers' asynchronous backward TP collectives (what `import megatron` reads
// back without --tp-comm-overlap).
bool as_framework_runs_it(RunConfig& rc, const std::string& framework, const Json* model_json, Evaluated& ev) {
  if (framework == "megatron" && rc.parallel.tp > 1 && !rc.parallel.tp_comm_overlap) rc.parallel.tp_async_backward = true;
  if (framework != "torchtitan" && framework != "deepspeed" && framework != "accelerate") return true;
  try {
    const Json model = model_json != nullptr ? *model_json : Json();
    RunConfig t = framework == "torchtitan"  ? accuracy::as_torchtitan_runs_it(rc, model)
                  : framework == "deepspeed" ? config::as_deepspeed_runs_it(rc, model)
                                             : config::as_accelerate_runs_it(rc, model);
    t.source_name = rc.source_name;
    rc = std::move(t);
    return true;
  } catch (const core::UserError& e) {
    ev.reason = "not costed with " + framework + "'s runtime";
    ev.message = e.what();
    return false;
  }
}

// `cache`: the calling worker's layer costs of earlier layouts of this search (or none).
Evaluated evaluate(const RunConfig& base, const Parallel& cand, const PlanOptions& opt, MemorySearch search,
                   estimate::WorkloadCache* cache = nullptr) {
  Evaluated ev;
  RunConfig rc = base;
  rc.parallel = cand;
  core::Issues issues;
  config::derive_and_validate(rc, issues);
  if (!issues.empty()) {
    const std::string& line = issues.lines().front();
    ev.reason = "invalid " + line.substr(0, line.find(": "));
    ev.message = line;
    return ev;
  }
  // A layout the framework cannot run (PlanOptions::framework), named by the setting at fault.
  auto why_refused = [&](const RunConfig& r) {
    return opt.framework == "megatron"     ? config::megatron_refusal(r)
           : opt.framework == "torchtitan" ? config::torchtitan_refusal(r)
           : opt.framework == "deepspeed"  ? config::deepspeed_refusal(r)
           : opt.framework == "accelerate" ? config::accelerate_refusal(r)
                                           : std::string();
  };
  auto refused = [&](const RunConfig& r) {
    const std::string why = why_refused(r);
    if (why.empty()) return false;
    ev.reason = "not run by " + opt.framework + ": " + why.substr(0, why.find(": "));
    ev.message = why;
    return true;
  };
  if (refused(rc)) return ev;
  if (!as_framework_runs_it(rc, opt.framework, search.runtime_model, ev)) return ev;
  auto ledger = memory::compute_ledger(rc);
  if (search.offload_layers && rc.parallel.recompute == Recompute::kNone &&
      ledger.peak().value() > (1.0 - opt.memory_headroom) * ledger.capacity.value()) {
    // Offload the activations of as few layers as the memory needs instead of recomputing.
    // (Not for a framework that does not offload activations: torchtitan, DeepSpeed.)
    RunConfig trial = rc;
    trial.parallel.activation_offload_layers = 1;
    const int64_t n = why_refused(trial).empty() ? memory::fewest_offload_layers(rc, 1.0 - opt.memory_headroom) : 0;
    if (n > 0) {
      rc.parallel.activation_offload_layers = n;
      ledger = memory::compute_ledger(rc);
    }
  }
  const double limit = (1.0 - opt.memory_headroom) * ledger.capacity.value();
  if (!ledger.fits() || ledger.peak().value() > limit) {
    if (!ledger.fits()) {
      ev.reason = "does not fit in memory";
      ev.peak_bytes = ledger.peak().value();
      ev.capacity_bytes = ledger.capacity.value();
    } else {
      ev.reason = "fits, but not within the memory headroom";
    }
    // Stages differ in memory (1F1B keeps more micro-batches in flight on early stages; the
    // vocabulary sits on the end stages), so when one has room, moving layers onto it may
    // make the layout fit.
    if (search.rescue && rc.parallel.pp > 1 && ledger.host_fits()) {
      double lightest = ledger.peak().value();
      for (const auto& st : ledger.stages) lightest = std::min(lightest, st.total().value());
      if (lightest <= limit) {
        try {
          ev.c.est = estimate::estimate_step(rc, std::move(ledger), cache);
          ev.rescuable = true;
        } catch (const core::UserError&) {
          // not costable: stays rejected
        }
      }
    }
    return ev;
  }
  if (search.recompute_layers && rc.parallel.recompute == Recompute::kFull) {
    // Recompute only as many layers of each virtual stage as the memory needs (Megatron's
    // block method). When nothing needs recomputing the no-recompute candidate covers the
    // layout.
    if (int64_t n = memory::fewest_recompute_layers(rc, 1.0 - opt.memory_headroom); n > 0) {
      // torchtitan checkpoints every k-th layer: as many layers as a whole interval gives.
      const int64_t per_vstage = rc.model.num_layers / (rc.parallel.pp * rc.parallel.vpp);
      if (opt.framework == "torchtitan") {
        while (n < per_vstage && per_vstage % n != 0) ++n;
      }
      // DeepSpeed, Accelerate: the model's gradient checkpointing (or FSDP's) recomputes every
      // layer (0) or none.
      if (opt.framework == "deepspeed" || opt.framework == "accelerate") n = 0;
      rc.parallel.recompute_layers = n;
      ledger = memory::compute_ledger(rc);
    }
    if (refused(rc)) return ev;
  }
  ev.c.peak_memory_bytes = ledger.peak().value();
  try {
    ev.c.est = estimate::estimate_step(rc, std::move(ledger), cache);
  } catch (const core::UserError& e) {
    // A layout the estimate cannot cost (a non-finite time from extreme profile values) is
    // rejected with its reason, not thrown out of the worker thread.
    ev.reason = "cannot be estimated";
    ev.message = e.what();
    return ev;
  }
  ev.c.rc = std::move(rc);
  ev.ok = true;
  return ev;
}

// The pipeline splits tried for one (pp, vpp): the primary one (Megatron's first and last stage
// counts, or a list over every virtual stage; both unset for an even split) and alternatives.
struct Splits {
  bool ok = true;  // false: the layers do not split over pp * vpp
  int64_t first = -1, last = -1;
  std::vector<int64_t> stage_list;
  std::vector<std::pair<int64_t, int64_t>> end_splits;  // alternatives to (first, last)
  std::vector<std::vector<int64_t>> alt_lists;          // alternatives to stage_list
};

Splits pipeline_splits(const RunConfig& base, const Json& par, int64_t pp, int64_t vpp) {
  const Parallel& bp = base.parallel;
  const int64_t L = base.model.num_layers;
  Splits sp;
  if (!base.model.pattern_stages.empty()) {
    // The hybrid pattern's '|' marks give the split: only its number of virtual stages.
    sp.ok = static_cast<int64_t>(base.model.pattern_stages.size()) == pp * vpp;
  } else if (par.contains("first_stage_layers") || par.contains("last_stage_layers")) {
    sp.first = bp.first_stage_layers;
    sp.last = bp.last_stage_layers;
  } else if (par.contains("stage_layers")) {
    sp.stage_list = bp.stage_layer_list;
  } else if (par.contains("pipeline_layout")) {
    // The layout's transformer layers per virtual stage (checked against pp*vpp when each
    // candidate is validated).
    sp.stage_list = config::parse_pipeline_layout(bp.pipeline_layout).layers();
    sp.ok = !sp.stage_list.empty();
  } else if (bp.embedding_slot || bp.loss_slot) {
    // The run's own Megatron split flags, written out as the list they give for this pp*vpp.
    sp.stage_list = config::slot_stage_layers(L, pp * vpp, bp.embedding_slot, bp.loss_slot);
    sp.ok = !sp.stage_list.empty();
  } else if (L % (pp * vpp) != 0) {
    // Megatron's shorter first and last stages without virtual stages where they exist;
    // otherwise the balanced split over every virtual stage (torchtitan's split points).
    const bool megatron_ends = vpp == 1 && config::megatron_end_stages(L, pp, sp.first, sp.last);  // sets first, last
    if (megatron_ends) {
      // Every way to share the remainder between the two end stages (each at most a middle
      // stage's count): the last stage also runs the output head (and any
      // multi-token-prediction modules), so a lighter last stage can be the faster one. With
      // MTP modules the first stage may take more than a middle stage.
      const int64_t per = (L + pp - 1) / pp, ends = sp.first + sp.last;
      const int64_t max_first = base.training.mtp_layers > 0 ? ends - 1 : std::min(per, ends - 1);
      for (int64_t f = std::max<int64_t>(1, ends - per); f <= max_first; ++f) {
        if (f != sp.first) sp.end_splits.emplace_back(f, ends - f);
      }
    } else {
      // Megatron's split with the embedding and the loss counted as layer slots, where it
      // divides: with one slot per virtual stage the first holds the embedding alone and the
      // last the output head alone.
      std::vector<int64_t> slotted = config::slot_stage_layers(L, pp * vpp, true, true);
      if (L >= pp * vpp) {
        sp.stage_list = config::balanced_stage_layers(L, pp * vpp);
        // The balanced list puts the extra layers last; the mirrored one keeps the last
        // (head-carrying) stage light.
        std::vector<int64_t> mirrored(sp.stage_list.rbegin(), sp.stage_list.rend());
        if (mirrored != sp.stage_list) sp.alt_lists.push_back(std::move(mirrored));
        auto add_alt = [&](std::vector<int64_t> list) {
          if (!list.empty() && list != sp.stage_list && std::find(sp.alt_lists.begin(), sp.alt_lists.end(), list) == sp.alt_lists.end()) {
            sp.alt_lists.push_back(std::move(list));
          }
        };
        add_alt(std::move(slotted));
        if (base.training.mtp_layers > 0) {
          // The last virtual stage also runs the MTP modules: the layers filled from the front,
          // the last virtual stage taking the remainder (Megatron-Bridge's DeepSeek-V3 layouts:
          // 61 layers over 16 virtual stages as [4*15, 1]).
          const int64_t per = (L + pp * vpp - 1) / (pp * vpp), rest = L - per * (pp * vpp - 1);
          if (rest >= 0) {
            std::vector<int64_t> front(static_cast<size_t>(pp * vpp - 1), per);
            front.push_back(rest);
            add_alt(std::move(front));
          }
          // Or the last virtual stage runs the MTP modules and the head alone (under a V it
          // shares stage 0 with the embedding, so no stage carries the MTP work on top of
          // its share of layers).
          auto head_alone = config::balanced_stage_layers(L, pp * vpp - 1);
          if (!head_alone.empty()) {
            head_alone.push_back(0);
            add_alt(std::move(head_alone));
          }
        }
      } else {
        sp.stage_list = std::move(slotted);
      }
      sp.ok = !sp.stage_list.empty();
    }
  } else if (vpp == 1 && pp >= 2) {
    // Even stages, and a shorter last stage: k layers moved to the first stage (one, or any
    // number when the last stage also runs multi-token-prediction modules).
    const int64_t per = L / pp;
    const int64_t moves = base.training.mtp_layers > 0 ? per - 1 : std::min<int64_t>(per - 1, 1);
    for (int64_t k = 1; k <= moves; ++k) {
      if (pp >= 3) {
        sp.end_splits.emplace_back(per + k, per - k);
      } else {
        sp.alt_lists.push_back({per + k, per - k});  // two stages: a list (Megatron's ends need a middle)
      }
    }
  }
  return sp;
}

// Every candidate layout of the search space (cheap arithmetic filters only; the validator
// decides). Layouts the filters drop are counted in res.enumerated and res.rejected.
std::vector<Parallel> enumerate_layouts(const RunConfig& base, const Json& par, const PlanOptions& opt, PlanResult& res) {
  const auto& m = base.model;
  const int64_t N = base.cluster.num_gpus;
  const int64_t gpn = base.cluster.gpus_per_node > 0 ? base.cluster.gpus_per_node : base.hardware.gpus_per_node;
  const int64_t L = m.num_layers;
  auto fixed = [&](const char* k) { return par.contains(k); };
  const Parallel& bp = base.parallel;

  const auto tps = fixed("tp") ? std::vector<int64_t>{bp.tp} : powers_of_two_upto(std::min(gpn, opt.max_tp > 0 ? opt.max_tp : gpn));
  std::vector<int64_t> cps{bp.cp};
  if (!fixed("cp")) {
    cps.clear();
    for (int64_t c : powers_of_two_upto(opt.max_cp)) {
      if (base.training.seq_len % (2 * c) == 0 || c == 1) cps.push_back(c);
    }
  }
  const auto pps = fixed("pp") ? std::vector<int64_t>{bp.pp} : divisors(N, std::min(L, opt.max_pp > 0 ? opt.max_pp : L));
  // Every vpp up to the limit: where the layers do not divide over pp * vpp the split lists
  // below spread them (and the cost-balanced pass refines the best).
  std::vector<int64_t> vpps{bp.vpp};
  if (!fixed("vpp")) {
    vpps.clear();
    for (int64_t v = 1; v <= std::min(opt.max_vpp, L); ++v) vpps.push_back(v);
  }
  const auto mbss = fixed("micro_batch_size") ? std::vector<int64_t>{bp.micro_batch_size} : powers_of_two_upto(opt.max_mbs);
  std::vector<int64_t> eps{bp.ep};
  if (m.moe.enabled() && !fixed("ep")) eps = powers_of_two_upto(m.moe.num_experts);
  std::vector<Sharding> shards{{0, false}, {1, false}, {3, true}};
  // DeepSpeed shards with ZeRO alone, every stage of it (ZeRO-2's sharded gradients are its own).
  if (opt.framework == "deepspeed") shards = {{0, false}, {1, false}, {2, false}, {3, false}};
  // Accelerate: DDP or FSDP (HYBRID_SHARD's one replica per machine comes with FSDP below).
  if (opt.framework == "accelerate") shards = {{0, false}, {3, true}};
  if (fixed("zero_stage") || fixed("fsdp")) shards = {{bp.zero_stage, bp.fsdp}};
  // Selective recompute of the attention core only changes anything with unfused attention
  // (flash attention recomputes it anyway). MoE models also try Megatron-Core's cheap modules:
  // the experts' activation and the separate norms (and MLA's up-projections), which save the
  // widest activations for a few element-wise passes.
  struct RecomputeChoice {
    Recompute mode;
    uint32_t modules;
  };
  std::vector<RecomputeChoice> recomputes{{Recompute::kNone, config::kRecomputeCoreAttn}, {Recompute::kFull, config::kRecomputeCoreAttn}};
  if (base.training.attention == config::AttentionImpl::kUnfused) {
    recomputes.insert(recomputes.begin() + 1, {Recompute::kSelective, config::kRecomputeCoreAttn});
  }
  if (m.moe.enabled()) {
    const uint32_t mods = config::kRecomputeMoeAct | config::kRecomputeLayernorm | (m.mla.enabled() ? config::kRecomputeMlaUpProj : 0u);
    recomputes.insert(recomputes.end() - 1, {Recompute::kSelective, mods});
  }
  if (fixed("recompute")) recomputes = {{bp.recompute, bp.recompute_modules}};
  if (fixed("recompute_layers")) recomputes = {{Recompute::kFull, config::kRecomputeCoreAttn}};  // a layer count is full recomputation's
  // Hybrid sharding: FSDP layouts whose data-parallel group leaves the node also try sharding
  // within the node and replicating across nodes (HSDP), which keeps the per-layer gathers on
  // the node fabric at the cost of a full copy of the sharded state per node and an all-reduce
  // of each gradient shard over the network.
  // CPU offload: as the run file sets it, on the shardings it applies to; with
  // PlanOptions::offload also the optimizer's (and, under FSDP, the parameters') offload of
  // every sharded layout.
  auto offloads = [&](const Sharding& sh) {
    const int zero = sh.fsdp ? 3 : sh.zero;
    std::vector<config::Offload> out;
    if (fixed("offload")) {
      const bool applies = bp.offload == config::Offload::kNone || (zero >= 1 && (bp.offload != config::Offload::kParams || zero >= 3));
      if (applies) out.push_back(bp.offload);
      return out;
    }
    out.push_back(config::Offload::kNone);
    if (opt.offload && zero >= 1) out.push_back(config::Offload::kOptimizer);
    if (opt.offload && zero >= 3) out.push_back(config::Offload::kParams);
    return out;
  };
  // Without a data-parallel group to shard over (dp * cp = 1, and for MoE models an expert
  // data-parallel group of one), the ZeRO stages hold the same state as plain data parallelism
  // and add only FSDP's gather buffers: such a layout keeps ZeRO 0, and a sharding only as the
  // carrier of an offload (which differs by framework: FSDP copies each layer's gradient down
  // as its backward ends, ZeRO-1 after the backward).
  auto shardings = [&](int64_t tp, int64_t cp, int64_t dp, int64_t ep_etp) {
    std::vector<Sharding> out;
    const bool nothing_to_shard = !fixed("zero_stage") && !fixed("fsdp") && dp * cp == 1 && (!m.moe.enabled() || tp * dp * cp == ep_etp);
    auto add = [&](Sharding sh) {
      for (const config::Offload o : offloads(sh)) {
        if (nothing_to_shard && (sh.fsdp || sh.zero > 0) && o == config::Offload::kNone) continue;
        sh.offload = o;
        out.push_back(sh);
      }
    };
    for (Sharding sh : shards) {
      if (fixed("dp_replicate")) sh.replicate = bp.dp_replicate;
      add(sh);
      if (fixed("dp_replicate") || !sh.fsdp || gpn % (tp * cp) != 0) continue;
      const int64_t in_node = gpn / (tp * cp);
      if (dp % in_node != 0 || dp / in_node <= 1 || (tp * dp * cp / ep_etp) % (dp / in_node) != 0) continue;
      sh.replicate = dp / in_node;
      add(sh);
    }
    return out;
  };

  std::vector<Parallel> cands;
  for (int64_t tp : tps) {
    // Expert tensor parallelism: none, or as wide as tp.
    std::vector<int64_t> etps{fixed("etp") ? bp.etp : 1};
    if (m.moe.enabled() && !fixed("etp") && tp > 1) etps.push_back(tp);
    // Ulysses splits heads over cp (the validator's rule, applied before enumerating).
    const int64_t kv_local = m.mla.enabled() ? m.heads / tp : std::max<int64_t>(1, m.kv_heads / tp);
    for (int64_t cp : cps) {
      std::vector<config::CpComm> cp_methods{bp.cp_comm};
      if (cp > 1 && !fixed("cp_comm")) cp_methods = {config::CpComm::kRing, config::CpComm::kAllGather, config::CpComm::kUlysses};
      for (int64_t pp : pps) {
        if (N % (tp * cp * pp) != 0) continue;
        const int64_t dp = N / (tp * cp * pp);
        if (fixed("dp") && dp != bp.dp) continue;
        for (int64_t vpp : vpps) {
          if (vpp > 1 && pp < 2) continue;
          if (fixed("schedule") && bp.v_shape() && vpp != 2) continue;  // a V of two chunks
          // A fixed schedule without virtual stages takes vpp 1; the interleaved one more.
          if (fixed("schedule") && !bp.v_shape() && (bp.schedule == Schedule::kInterleaved) != (vpp > 1)) continue;
          std::vector<Schedule> scheds;
          if (fixed("schedule")) {
            scheds = {bp.schedule};
          } else if (pp == 1) {
            scheds = {Schedule::kOneFOneB};
          } else {
            if (vpp == 1) scheds = {Schedule::kOneFOneB, Schedule::kZbH1, Schedule::kGpipe};
            if (vpp > 1) scheds = {Schedule::kInterleaved};
            if (vpp == 2) scheds.insert(scheds.end(), {Schedule::kZbV, Schedule::kDualPipeV});
            // GPipe (never faster than 1F1B, with more memory) only when asked for.
            std::erase_if(scheds, [&](Schedule sc) {
              return opt.schedules.empty() ? sc == Schedule::kGpipe
                                           : std::find(opt.schedules.begin(), opt.schedules.end(), sc) == opt.schedules.end();
            });
            if (scheds.empty()) continue;
          }
          const Splits splits = pipeline_splits(base, par, pp, vpp);
          if (!splits.ok) {
            ++res.enumerated;
            ++res.rejected["layers do not split over pp*vpp"];
            continue;
          }
          // The layout with the primary split, then with each alternative.
          auto emit = [&](Parallel p) {
            p.set_split(splits.first, splits.last, splits.stage_list);
            cands.push_back(p);
            for (const auto& [f, l] : splits.end_splits) {
              p.set_split(f, l, splits.stage_list);
              cands.push_back(p);
            }
            for (const auto& list : splits.alt_lists) {
              p.set_split(splits.first, splits.last, list);
              cands.push_back(p);
            }
          };
          for (config::CpComm cpm : cp_methods) {
            if (cpm == config::CpComm::kUlysses && kv_local % cp != 0) continue;
            for (int64_t etp : etps) {
              for (int64_t ep : eps) {
                // ep * etp is carved out of tp * dp * cp.
                if ((tp * dp * cp) % (ep * etp) != 0 || (m.moe.enabled() && m.moe.num_experts % ep != 0)) continue;
                for (int64_t mbs : mbss) {
                  if (base.training.global_batch_size % (dp * mbs) != 0) {
                    ++res.enumerated;
                    ++res.rejected["invalid $.training.global_batch_size"];
                    continue;
                  }
                  for (const Sharding& sh : shardings(tp, cp, dp, ep * etp)) {
                    for (const RecomputeChoice& rcm : recomputes) {
                      for (Schedule sc : scheds) {
                        Parallel p = bp;
                        p.tp = tp;
                        p.cp = cp;
                        p.pp = pp;
                        p.dp = dp;
                        p.vpp = vpp;
                        p.ep = ep;
                        p.etp = etp;
                        p.cp_comm = cpm;
                        if (!fixed("sp")) p.sp = tp > 1;
                        p.micro_batch_size = mbs;
                        p.zero_stage = sh.zero;
                        p.fsdp = sh.fsdp;
                        p.dp_replicate = sh.replicate;
                        p.offload = sh.offload;
                        p.recompute = rcm.mode;
                        p.recompute_modules = rcm.modules;
                        p.schedule = sc;
                        emit(p);
                      }
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  res.enumerated += static_cast<int64_t>(cands.size());
  return cands;
}

// Whether the planner chooses the pipeline split (the run file sets none of its split keys and
// the model's pattern marks no stages).
bool planner_splits(const RunConfig& base, const Json& par) {
  if (!base.model.pattern_stages.empty()) return false;  // the hybrid pattern's '|' marks
  for (const char* k : {"first_stage_layers", "last_stage_layers", "stage_layers", "pipeline_layout"}) {
    if (par.contains(k)) return false;
  }
  return !base.parallel.embedding_slot && !base.parallel.loss_slot;
}

// The layers of each virtual stage a split of the enumeration gives (pipeline order).
std::vector<int64_t> resolved_split(int64_t layers, int64_t pp, int64_t vpp, int64_t first, int64_t last, const std::vector<int64_t>& list) {
  if (!list.empty()) return list;
  Parallel p;
  p.pp = pp;
  p.vpp = vpp;
  p.set_split(first, last);
  return config::end_stage_split(layers, p);
}

// Adds `more` to the kept layouts, ranks them again by estimate (ties on the layout text) and
// cuts them back to `keep` (0: all).
void merge_by_estimate(std::vector<Candidate> more, size_t keep, std::vector<Candidate>& ok) {
  if (more.empty()) return;
  for (auto& c : more) ok.push_back(std::move(c));
  std::stable_sort(ok.begin(), ok.end(), [](const Candidate& a, const Candidate& b) {
    if (a.est.step_time_s != b.est.step_time_s) return a.est.step_time_s < b.est.step_time_s;
    return layout_text(a.rc.parallel) < layout_text(b.rc.parallel);
  });
  if (keep > 0 && ok.size() > keep) ok.resize(keep);
}

// Each of the best layouts by estimate with a pipeline whose split the planner chose is tried
// once more with its layers spread by cost (sim/plan/split.hpp): the enumerated splits count
// layers, and layers differ in cost (hybrid blocks, dense first layers of MoE models, a large
// output layer). A balanced split that no enumerated split gives, that is valid and fits, joins
// the kept layouts, which are ranked again by estimate and cut back to `keep`. The per-layer
// costs do not depend on the split, so one pass reaches the balance. The first `tried` kept
// layouts are refined whatever `keep` is, so keeping fewer layouts gives the head of the full
// ranking.
void add_balanced_splits(const RunConfig& base, const Json& par, const PlanOptions& opt, MemorySearch search,
                         const std::vector<Parallel>& cands, const std::vector<size_t>& fits, size_t tried, size_t keep,
                         std::vector<Candidate>& ok, PlanResult& res) {
  if (!planner_splits(base, par)) return;
  const int64_t L = base.model.num_layers;
  std::vector<Candidate> more;
  std::set<std::string> added;
  for (size_t j = 0; j < std::min(tried, ok.size()); ++j) {
    const RunConfig& rc = ok[j].rc;
    const Parallel& p0 = rc.parallel;
    if (p0.pp <= 1) continue;
    // Balanced within the planner's memory limit; when that moved layers off a full stage,
    // the split by time alone too (more recomputation may make it fit, and be faster).
    const BalancedSplit bs = balanced_split(rc, 1.0 - opt.memory_headroom);
    std::vector<std::vector<int64_t>> lists{bs.layers};
    if (bs.memory_bound) lists.push_back(bs.time_only);
    // Skip a split the enumeration already tried for this (pp, vpp).
    const Splits sp = pipeline_splits(base, par, p0.pp, p0.vpp);
    for (const auto& list : lists) {
      if (list.empty() || list == rc.vstage_layers) continue;
      bool known = resolved_split(L, p0.pp, p0.vpp, sp.first, sp.last, sp.stage_list) == list;
      for (const auto& [f, l] : sp.end_splits) known = known || resolved_split(L, p0.pp, p0.vpp, f, l, {}) == list;
      for (const auto& alt : sp.alt_lists) known = known || alt == list;
      if (known) continue;
      Parallel p = cands[fits[j]];
      p.set_split(list);  // Megatron's end-stage counts where the middle stages hold the same number
      if (!added.insert(layout_text(p)).second) continue;
      ++res.balanced_tried;
      if (bs.memory_bound && list == bs.layers) ++res.balanced_memory_bound;
      Evaluated ev = evaluate(base, p, opt, search);
      if (!ev.ok) continue;
      ++res.balanced_added;
      ev.c.balanced_split = true;
      more.push_back(std::move(ev.c));
    }
  }
  merge_by_estimate(std::move(more), keep, ok);
}

// Layouts that fit on none of the splits the enumeration gave them, but whose lightest stage
// has room (Evaluated::rescuable), with the layers spread by cost within the memory limit
// (balanced_split): the best `tried` of them by estimate on their own split, each while that
// estimate is below the `tried`-th kept layout's (or fewer than `tried` fit), so the head of the
// ranking does not depend on `keep`. Those that fit join the kept layouts as balanced splits.
// `rescuable`: (estimate on its own split, index into cands).
void rescue_by_split(const RunConfig& base, const Json& par, const PlanOptions& opt, MemorySearch search,
                     const std::vector<Parallel>& cands, std::vector<std::pair<double, size_t>> rescuable, size_t tried, size_t keep,
                     std::vector<Candidate>& ok, PlanResult& res) {
  if (!planner_splits(base, par) || rescuable.empty() || tried == 0) return;
  std::stable_sort(rescuable.begin(), rescuable.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  const double bar = ok.size() >= tried ? ok[tried - 1].est.step_time_s : std::numeric_limits<double>::infinity();
  std::set<std::string> known;
  for (const auto& c : ok) known.insert(layout_text(c.rc.parallel));
  search.rescue = false;
  std::vector<Candidate> more;
  for (size_t j = 0; j < std::min(tried, rescuable.size()) && rescuable[j].first < bar; ++j) {
    const Parallel& cand = cands[rescuable[j].second];
    RunConfig rc = base;
    rc.parallel = cand;
    core::Issues issues;
    config::derive_and_validate(rc, issues);
    if (!issues.empty()) continue;
    if (Evaluated unused; !as_framework_runs_it(rc, opt.framework, search.runtime_model, unused)) continue;
    const BalancedSplit bs = balanced_split(rc, 1.0 - opt.memory_headroom);
    if (!bs.fits || bs.layers.empty() || bs.layers == rc.vstage_layers) continue;
    Parallel p = cand;
    p.set_split(bs.layers);
    ++res.rescue_tried;
    Evaluated ev = evaluate(base, p, opt, search);
    // Two splits of one layout may balance to the same split.
    if (!ev.ok || !known.insert(layout_text(ev.c.rc.parallel)).second) continue;
    ++res.rescued;
    ev.c.balanced_split = true;
    ev.c.memory_rescued = true;
    more.push_back(std::move(ev.c));
  }
  merge_by_estimate(std::move(more), keep, ok);
}

}  // namespace

std::vector<config::Schedule> parse_schedules(const std::string& list, const std::string& option) {
  const std::vector<std::pair<std::string, Schedule>> names{{"gpipe", Schedule::kGpipe},
                                                            {"1f1b", Schedule::kOneFOneB},
                                                            {"interleaved", Schedule::kInterleaved},
                                                            {"zb-h1", Schedule::kZbH1},
                                                            {"zbv", Schedule::kZbV},
                                                            {"dualpipev", Schedule::kDualPipeV}};
  std::vector<Schedule> out;
  std::stringstream in(list);
  std::string name;
  while (std::getline(in, name, ',')) {
    const auto it = std::find_if(names.begin(), names.end(), [&](const auto& n) { return n.first == name; });
    if (it == names.end()) {
      throw core::UserError(option + ": got \"" + name + "\"; expected a comma-separated list of gpipe, 1f1b, interleaved, zb-h1, zbv, dualpipev");
    }
    if (std::find(out.begin(), out.end(), it->second) != out.end()) {
      throw core::UserError(option + ": \"" + name + "\" is listed twice");
    }
    out.push_back(it->second);
  }
  if (out.empty()) throw core::UserError(option + ": expected at least one schedule (gpipe, 1f1b, interleaved, zb-h1, zbv, dualpipev)");
  return out;
}

void apply_framework(PlanOptions& opt, const std::string& option) {
  if (opt.framework.empty()) return;
  if (opt.framework != "megatron" && opt.framework != "torchtitan" && opt.framework != "deepspeed" && opt.framework != "accelerate") {
    throw core::UserError(option + ": got \"" + opt.framework + "\"; expected megatron, torchtitan, deepspeed or accelerate");
  }
  if (!opt.schedules.empty()) return;
  // DeepSpeed's and Accelerate's configs run no pipeline: one schedule, not six, per layout.
  if (opt.framework == "deepspeed" || opt.framework == "accelerate") {
    opt.schedules = parse_schedules("1f1b", option);
    return;
  }
  opt.schedules = parse_schedules(opt.framework == "megatron" ? "1f1b,interleaved" : "1f1b,interleaved,zbv,dualpipev", option);
}

PlanResult plan(const Json& run, const std::string& source_name, const std::string& base_dir, const PlanOptions& opt) {
  const Json par = run.contains("parallel") && run["parallel"].is_object() ? run["parallel"] : Json::object();
  const RunConfig base = config::parse_run(run, source_name, base_dir, false);
  // Under full recomputation the planner recomputes only the layers memory needs, unless the
  // run file or --fix sets the recompute mode or the layer count.
  MemorySearch search;
  search.recompute_layers = !par.contains("recompute") && !par.contains("recompute_layers");
  search.offload_layers = opt.offload && !par.contains("activation_offload_layers");
  search.rescue = planner_splits(base, par);
  // A framework's runtime is costed from the model as the run file gives it, a model file's path
  // made absolute (the round trip parses it from no directory).
  Json runtime_model = run.contains("model") ? run["model"] : Json();
  if (runtime_model.is_object() && runtime_model.contains("path") && runtime_model["path"].is_string() &&
      std::filesystem::path(runtime_model["path"].get<std::string>()).is_relative()) {
    runtime_model["path"] = (std::filesystem::absolute(base_dir.empty() ? "." : base_dir) / runtime_model["path"].get<std::string>()).lexically_normal().string();
  }
  if (!opt.framework.empty()) search.runtime_model = &runtime_model;
  if (opt.offload && !base.hardware.host.stated) {
    throw core::UserError(source_name + ": --offload: hardware '" + base.hardware.name +
                          "' does not describe its host (hardware.host: memory, memory_bandwidth, link), so offload cannot be costed");
  }
  PlanResult res;
  res.offload_untried = !opt.offload && base.hardware.host.stated && !par.contains("offload");
  const std::vector<Parallel> cands = enumerate_layouts(base, par, opt, res);

  // Validate, check memory and estimate, in parallel; results land by index (deterministic).
  // The pass keeps only each layout's verdict and estimated step time; the layouts kept for the
  // result are evaluated again in full, so a search over hundreds of thousands of layouts does
  // not hold a run configuration and a ledger for each.
  struct Scored {
    bool ok = false;
    bool rescuable = false;       // Evaluated::rescuable (est_step_s is then its estimate)
    std::string reason, message;  // message: the validator's, when invalid
    double peak_bytes = 0, capacity_bytes = 0;
    double est_step_s = 0;
    int64_t recompute_layers = 0;  // what the memory search chose (full recomputation)
    int64_t offload_layers = 0;    // and (with --offload) the activations it offloads
  };
  std::vector<Scored> scored(cands.size());
  const size_t total = cands.size();
  std::atomic<size_t> done{0};
  // An error inside a worker (which the estimate does not turn into a rejection) is carried
  // out of its thread and rethrown here, the first one by worker order.
  const size_t threads = std::max<size_t>(1, opt.threads > 0 ? static_cast<size_t>(opt.threads) : std::thread::hardware_concurrency());
  std::vector<std::exception_ptr> failed(threads);
  auto work = [&](size_t worker, size_t lo, size_t hi) {
    try {
      // Layouts next to each other in the enumeration differ mostly in their pipeline split,
      // virtual stages and schedule, which leave each layer's cost as it is.
      estimate::WorkloadCache cache;
      for (size_t i = lo; i < hi; ++i) {
        Evaluated ev = evaluate(base, cands[i], opt, search, &cache);
        Scored& s = scored[i];
        s.ok = ev.ok;
        s.reason = std::move(ev.reason);
        s.message = std::move(ev.message);
        s.peak_bytes = ev.peak_bytes;
        s.capacity_bytes = ev.capacity_bytes;
        s.rescuable = ev.rescuable;
        if (ev.rescuable) s.est_step_s = ev.c.est.step_time_s;
        if (ev.ok) {
          s.est_step_s = ev.c.est.step_time_s;
          s.recompute_layers = ev.c.rc.parallel.recompute_layers;
          s.offload_layers = ev.c.rc.parallel.activation_offload_layers;
        }
        const size_t n = done.fetch_add(1, std::memory_order_relaxed) + 1;
        // The first worker reports for all (the callback need not be thread-safe).
        if (worker == 0 && opt.progress && (i - lo) % 2048 == 0) opt.progress("estimated", n, total);
      }
    } catch (...) {
      failed[worker] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  const size_t chunk = (total + threads - 1) / threads;
  for (size_t t = 0; t < threads && t * chunk < total; ++t) {
    pool.emplace_back(work, t, t * chunk, std::min(total, (t + 1) * chunk));
  }
  for (auto& th : pool) th.join();
  for (const auto& e : failed) {
    if (e) std::rethrow_exception(e);
  }
  if (opt.progress) opt.progress("estimated", total, total);

  std::vector<size_t> fits;
  for (size_t i = 0; i < scored.size(); ++i) {
    const auto& s = scored[i];
    if (s.ok) {
      fits.push_back(i);
    } else {
      ++res.rejected[s.reason];
      if (!s.message.empty() && res.rejected_example.count(s.reason) == 0) {
        res.rejected_example.emplace(s.reason, PlanResult::Rejection{layout_text(cands[i]), s.message});
      }
      if (s.peak_bytes > 0 && (!res.lightest_rejected || s.peak_bytes < res.lightest_rejected->peak_bytes)) {
        res.lightest_rejected = PlanResult::Lightest{layout_text(cands[i]), s.peak_bytes, s.capacity_bytes};
      }
    }
  }
  res.fit = static_cast<int64_t>(fits.size());
  // Rank by estimate; ties break on the layout text (with the recomputed layer count it
  // shows), then on enumeration order, so the order is total and the result deterministic.
  auto text_of = [&](size_t i) {
    Parallel p = cands[i];
    p.recompute_layers = scored[i].recompute_layers;
    p.activation_offload_layers = scored[i].offload_layers;
    return layout_text(p);
  };
  auto by_estimate = [&](size_t a, size_t b) {
    if (scored[a].est_step_s != scored[b].est_step_s) return scored[a].est_step_s < scored[b].est_step_s;
    const std::string ta = text_of(a), tb = text_of(b);
    return ta != tb ? ta < tb : a < b;
  };
  const size_t top = static_cast<size_t>(std::max(0, opt.top_k));
  // Refined: the head whose pipeline splits are balanced by cost (the re-simulation below
  // reaches 3K; 64 at least, enough for the explanation to find a runner-up past any ties).
  // Kept: what the caller asked for and at least that head (0: all).
  const size_t refined = std::max(3 * top, size_t{64});
  const size_t kept_at_most = opt.keep == 0 ? 0 : std::max(opt.keep, refined);
  const size_t keep = kept_at_most == 0 ? fits.size() : std::min(fits.size(), kept_at_most);
  std::partial_sort(fits.begin(), fits.begin() + static_cast<long>(keep), fits.end(), by_estimate);
  std::vector<Candidate> ok;
  ok.reserve(keep);
  for (size_t j = 0; j < keep; ++j) {
    Evaluated ev = evaluate(base, cands[fits[j]], opt, search);
    if (!ev.ok || ev.c.est.step_time_s != scored[fits[j]].est_step_s) {
      throw std::logic_error("planner: a layout evaluated twice gave two results (" + layout_text(cands[fits[j]]) + ")");
    }
    ok.push_back(std::move(ev.c));
  }
  add_balanced_splits(base, par, opt, search, cands, fits, refined, opt.keep == 0 ? 0 : keep, ok, res);
  {
    std::vector<std::pair<double, size_t>> rescuable;
    for (size_t i = 0; i < scored.size(); ++i) {
      if (scored[i].rescuable) rescuable.emplace_back(scored[i].est_step_s, i);
    }
    rescue_by_split(base, par, opt, search, cands, std::move(rescuable), refined, kept_at_most, ok, res);
  }

  // Re-simulate the best K with the event engine and rank them by simulated step time. The
  // simulation usually finds a step longer than the estimate, so the next candidates (up to 3K
  // in all) are simulated too while their estimate is below the slowest simulated step: a
  // layout the estimate ranked lower may still simulate faster than one it ranked higher.
  size_t k = 0;
  double slowest_simulated = 0;
  while (k < ok.size() && (k < top || (k < 3 * top && ok[k].est.step_time_s < slowest_simulated))) {
    if (opt.progress) opt.progress("simulating", k, std::min(ok.size(), 3 * top));
    auto& c = ok[k++];
    c.simulate();
    slowest_simulated = std::max(slowest_simulated, c.sim_step_s);
  }
  // The estimate's error leans differently by pipeline schedule (it plays the interleaved and V
  // orders out but takes 1F1B's and ZB-H1's bubbles in closed form), so a schedule whose layouts
  // all fell past the cut may hide the fastest step: the best layout of each schedule (and of
  // the layouts without a pipeline) that none simulated yet is simulated too when its estimate
  // is below the slowest simulated step, the test the layouts past the first K pass.
  if (top > 0) {
    auto family = [](const Candidate& c) { return c.rc.parallel.pp > 1 ? static_cast<int>(c.rc.parallel.schedule) : -1; };
    std::set<int> seen;
    for (size_t i = 0; i < k; ++i) seen.insert(family(ok[i]));
    for (size_t j = k; j < ok.size() && ok[j].est.step_time_s < slowest_simulated; ++j) {
      if (!seen.insert(family(ok[j])).second) continue;
      std::rotate(ok.begin() + static_cast<long>(k), ok.begin() + static_cast<long>(j), ok.begin() + static_cast<long>(j) + 1);
      ok[k].schedule_leader = true;
      ok[k++].simulate();
    }
  }
  std::sort(ok.begin(), ok.begin() + static_cast<long>(k), [](const Candidate& a, const Candidate& b) {
    if (a.sim_step_s != b.sim_step_s) return a.sim_step_s < b.sim_step_s;
    return layout_text(a.rc.parallel) < layout_text(b.rc.parallel);
  });
  res.ranked = std::move(ok);
  res.roomier = roomier_near_best(res.ranked);
  res.explanation = explain(res, opt.memory_headroom);
  return res;
}

std::string megatron_split_flag(const RunConfig& rc) {
  const auto& v = rc.vstage_layers;
  if (rc.parallel.pp <= 1 || v.empty() || std::all_of(v.begin(), v.end(), [&](int64_t n) { return n == v.front(); })) return "";
  // Megatron-Core runs 1F1B and interleaved 1F1B; its layout segments go to ranks as the
  // interleaved order places them, not as a V would.
  if (rc.parallel.schedule != Schedule::kOneFOneB && rc.parallel.schedule != Schedule::kInterleaved) return "";
  if (rc.model.hybrid()) {
    if (!rc.model.pattern_stages.empty()) return "";  // the model's own marks
    return "--hybrid-layer-pattern \"" + config::pattern_with_stages(rc.model.layer_pattern, v) + "\"";
  }
  return "--pipeline-model-parallel-layout \"" + config::megatron_layout_text(v, rc.training.mtp_layers) + "\"";
}

Row row_of(const Candidate& c) {
  double comm = 0;
  for (const auto& [k, v] : c.breakdown().exposed_comm) comm += v;
  const double scale = c.est.step_time_s / c.step_s();
  return Row{layout_text(c.rc.parallel), c.step_s(), c.est.step_time_s, c.est.tokens_per_s_per_gpu * scale,
             c.est.mfu * scale, c.peak_memory_bytes / 1073741824.0, c.bubble_fraction(), comm, c.simulated,
             c.est.tokens_per_s * scale, c.est.hfu * scale, c.est.tflops_per_gpu * scale};
}

std::vector<size_t> shown_ranks(const PlanResult& r, size_t rows) {
  std::vector<size_t> shown;
  for (size_t i = 0; i < std::min(rows, r.ranked.size()); ++i) shown.push_back(i);
  // The explanation names the roomier layout near the best; it is shown even past the rows asked for.
  if (r.roomier && *r.roomier >= shown.size() && *r.roomier < r.ranked.size()) shown.push_back(*r.roomier);
  return shown;
}

std::string plan_table(const PlanResult& r, size_t rows) {
  std::ostringstream o;
  char buf[1024];
  std::snprintf(buf, sizeof buf, "%lld layouts enumerated, %lld fit; rejected:", static_cast<long long>(r.enumerated),
                static_cast<long long>(r.fit));
  o << buf;
  if (r.rejected.empty()) o << " none";
  for (const auto& [why, n] : r.rejected) o << " " << why << " (" << n << ");";
  if (r.balanced_tried > 0) {
    std::snprintf(buf, sizeof buf, " cost-balanced pipeline splits: %lld tried, %lld fit", static_cast<long long>(r.balanced_tried),
                  static_cast<long long>(r.balanced_added));
    o << buf;
    if (r.balanced_memory_bound > 0) o << " (" << r.balanced_memory_bound << " kept within memory)";
  }
  if (r.rescue_tried > 0) {
    std::snprintf(buf, sizeof buf, "%slayouts that fit only on a memory-balanced split: %lld tried, %lld fit", r.balanced_tried > 0 ? "; " : " ",
                  static_cast<long long>(r.rescue_tried), static_cast<long long>(r.rescued));
    o << buf;
  }
  o << "\n\n";
  // The layout column is as wide as the longest layout shown (at least 62), so the numbers line up.
  const std::vector<size_t> shown = shown_ranks(r, rows);
  std::vector<Row> table;
  table.reserve(shown.size());
  int width = 62;
  for (const size_t i : shown) {
    table.push_back(row_of(r.ranked[i]));
    width = std::max(width, static_cast<int>(table.back().layout.size()));
  }
  std::snprintf(buf, sizeof buf, "%4s  %-*s %9s %9s %10s %6s %9s %7s %9s\n", "rank", width, "layout", "step s", "est s", "tok/s/GPU",
                "MFU", "peak GiB", "bubble", "comm s");
  o << buf;
  for (size_t k = 0; k < shown.size(); ++k) {
    const size_t i = shown[k];
    if (k > 0 && i != shown[k - 1] + 1) o << "   ...\n";
    const Row& x = table[k];
    std::snprintf(buf, sizeof buf, "%4zu  %-*s %9.3f %9.3f %10.1f %5.1f%% %9.2f %6.1f%% %9.3f%s\n", i + 1, width, x.layout.c_str(), x.step,
                  x.est_step, x.tok_gpu, 100.0 * x.mfu, x.peak_gib, 100.0 * x.bubble, x.comm, x.simulated ? "" : "  (estimate)");
    o << buf;
  }
  o << "\n" << r.explanation << "\n";
  if (!r.ranked.empty()) {
    const std::string flag = megatron_split_flag(r.ranked.front().rc);
    if (!flag.empty()) o << "Its pipeline split in Megatron-Core: " << flag << "\n";
  }
  return o.str();
}

std::string plan_csv(const PlanResult& r, size_t rows) {
  std::ostringstream o;
  o << "rank,layout,step_time_s,estimate_step_time_s,simulated,tokens_per_s_per_gpu,mfu,peak_memory_gib,bubble_fraction,exposed_comm_s\n";
  for (const size_t i : shown_ranks(r, rows)) {
    const Row x = row_of(r.ranked[i]);
    char buf[512];
    std::snprintf(buf, sizeof buf, "%zu,\"%s\",%.6f,%.6f,%d,%.3f,%.6f,%.4f,%.6f,%.6f\n", i + 1, x.layout.c_str(), x.step, x.est_step,
                  x.simulated ? 1 : 0, x.tok_gpu, x.mfu, x.peak_gib, x.bubble, x.comm);
    o << buf;
  }
  return o.str();
}

Json plan_json(const PlanResult& r, size_t rows) {
  Json list = Json::array();
  for (const size_t i : shown_ranks(r, rows)) {
    const auto& c = r.ranked[i];
    const Row x = row_of(c);
    const auto& p = c.rc.parallel;
    Json par = {{"tp", p.tp}, {"pp", p.pp}, {"dp", p.dp}, {"cp", p.cp}, {"ep", p.ep}, {"vpp", p.vpp}, {"sp", p.sp},
                {"micro_batch_size", p.micro_batch_size}, {"zero_stage", p.zero_stage}, {"fsdp", p.fsdp},
                {"dp_replicate", p.dp_replicate}, {"recompute", config::to_string(p.recompute)},
                {"schedule", config::to_string(p.schedule)}};
    // Every setting the planner chose, so the layout re-runs as ranked.
    if (p.cp > 1) par["cp_comm"] = config::to_string(p.cp_comm);
    if (p.tp_async_backward.has_value()) par["tp_async_backward"] = *p.tp_async_backward;
    if (c.rc.model.moe.enabled()) par["etp"] = p.etp;
    if (p.recompute_layers > 0) par["recompute_layers"] = p.recompute_layers;
    if (p.offload != config::Offload::kNone) par["offload"] = config::to_string(p.offload);
    if (p.activation_offload_layers > 0) par["activation_offload_layers"] = p.activation_offload_layers;
    if (p.recompute == Recompute::kSelective && p.recompute_modules != config::kRecomputeCoreAttn)
      par["recompute_modules"] = report::recompute_modules_json(p);
    if (p.first_stage_layers >= 0) par["first_stage_layers"] = p.first_stage_layers;
    if (p.last_stage_layers >= 0) par["last_stage_layers"] = p.last_stage_layers;
    if (!p.stage_layer_list.empty()) par["stage_layers"] = p.stage_layer_list;
    // The output contract's keys (docs/OUTPUT.md), from the simulation where the layout was
    // re-simulated (row_of scales the rates to its step time; the model FLOPs do not change).
    const Json br = report::breakdown_json(c.breakdown());
    list.push_back({{"rank", i + 1}, {"layout", x.layout}, {"parallel", par}, {"balanced_split", c.balanced_split},
                    {"memory_rescued", c.memory_rescued}, {"megatron_split", megatron_split_flag(c.rc)}, {"step_time_s", x.step},
                    {"estimate_step_time_s", x.est_step}, {"simulated", x.simulated}, {"schedule_leader", c.schedule_leader}, {"tokens_per_s", x.tok_s},
                    {"tokens_per_s_per_gpu", x.tok_gpu}, {"mfu", x.mfu}, {"hfu", x.hfu},
                    {"tflops_per_gpu", x.tflops}, {"model_flops_per_step", c.est.model_flops_per_step},
                    {"peak_memory_bytes", c.peak_memory_bytes}, {"fits", c.peak_memory_bytes <= c.est.memory.capacity.value()}, {"bubble_fraction", x.bubble},
                    {"breakdown", br}});
  }
  Json rej = Json::object();
  for (const auto& [k, v] : r.rejected) rej[k] = v;
  return {{"enumerated", r.enumerated}, {"fit", r.fit}, {"rejected", rej},
          {"balanced_splits", {{"tried", r.balanced_tried}, {"fit", r.balanced_added}, {"memory_bound", r.balanced_memory_bound},
                                {"rescue_tried", r.rescue_tried}, {"rescued", r.rescued}}},
          {"roomier_near_best", r.roomier ? Json(static_cast<int64_t>(*r.roomier + 1)) : Json(nullptr)},
          {"explanation", r.explanation}, {"layouts", list}};
}

Json plan_detail(const Candidate& best) {
  Json d = {{"ledger", report::ledger_json(memory::compute_ledger(best.rc))}};
  engine::SimOptions opt;
  opt.keep_timeline = true;
  const auto sim = engine::simulate_step(best.rc, opt);
  const engine::Tick span = *std::max_element(sim.finish.begin(), sim.finish.end());
  const auto cut = static_cast<engine::Tick>(0.35 * static_cast<double>(span));
  Json tl = Json::array();
  for (engine::TaskId i = 0; i < sim.graph->size() && tl.size() < 3000; ++i) {
    const auto& t = sim.graph->task(i);
    if (sim.finish[i] <= sim.start[i] || sim.start[i] > cut) continue;
    const char* kind = "other";
    switch (t.kind) {
      case engine::TaskKind::kForward: kind = "forward"; break;
      case engine::TaskKind::kBackward: kind = "backward"; break;
      case engine::TaskKind::kBackwardWeight: kind = "weight grad"; break;
      case engine::TaskKind::kTpComm: kind = "tp/cp/ep comm"; break;
      case engine::TaskKind::kPpSend: kind = "pp send"; break;
      case engine::TaskKind::kDpComm: kind = "dp comm"; break;
      case engine::TaskKind::kOptimizer: kind = "optimizer step"; break;
      default: break;
    }
    std::string label = sim.graph->name(t.name);
    if (t.layer >= 0) label += " L" + std::to_string(t.layer);
    if (t.microbatch >= 0) label += " mb" + std::to_string(t.microbatch);
    tl.push_back({{"stage", t.rank}, {"stream", engine::to_string(t.stream)}, {"kind", kind}, {"label", label},
                  {"start_s", engine::to_seconds(sim.start[i])}, {"end_s", engine::to_seconds(sim.finish[i])}});
  }
  d["timeline"] = tl;
  return d;
}

}  // namespace stepcast::plan
