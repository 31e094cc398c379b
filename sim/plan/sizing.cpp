#include "sim/plan/sizing.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>

#include "sim/core/error.hpp"
#include "sim/memory/ledger.hpp"

namespace stepcast::plan {

using core::Json;

namespace {

// Whole-node GPU counts up to max_gpus for which some tp (within a node) x pp x cp leaves a
// data-parallel size dividing the global batch.
std::vector<int64_t> feasible_counts(const config::RunConfig& base, int64_t max_gpus) {
  const int64_t gpn = base.cluster.gpus_per_node > 0 ? base.cluster.gpus_per_node : base.hardware.gpus_per_node;
  const int64_t gbs = base.training.global_batch_size;
  const int64_t L = base.model.num_layers;
  std::vector<int64_t> out;
  for (int64_t g = gpn; g <= max_gpus; g += gpn) {
    bool ok = false;
    for (int64_t tp = 1; tp <= gpn && !ok; tp *= 2) {
      for (int64_t cp = 1; cp <= 8 && !ok; cp *= 2) {
        for (int64_t pp = 1; pp <= L && !ok; ++pp) {
          if (g % (tp * cp * pp) != 0) continue;
          const int64_t dp = g / (tp * cp * pp);
          ok = gbs % dp == 0;
        }
      }
    }
    if (ok) out.push_back(g);
  }
  return out;
}

// Layouts rejected by reason over one or more searches, with an example message per reason.
struct Rejections {
  std::map<std::string, int64_t> count;
  std::map<std::string, std::string> example;
  bool offload_untried = false;  // CPU offload not searched, though the profile could price it
  std::optional<PlanResult::Lightest> lightest;  // the smallest ledger peak of those too big
  void add(const PlanResult& pr) {
    offload_untried = offload_untried || pr.offload_untried;
    if (const auto& l = pr.lightest_rejected; l && (!lightest || l->peak_bytes < lightest->peak_bytes)) lightest = l;
    for (const auto& [reason, n] : pr.rejected) {
      count[reason] += n;
      const auto ex = pr.rejected_example.find(reason);
      if (ex != pr.rejected_example.end() && !ex->second.message.empty()) example.emplace(reason, ex->second.message);
    }
  }
  // Why nothing fits: memory when any valid layout was too big (the other refusals are
  // layouts the batch or the model rules out), else the reason most layouts were rejected
  // for; with its example message.
  [[nodiscard]] std::string why() const {
    if (count.empty()) return "";
    auto top = count.find("does not fit in memory");
    const bool memory = top != count.end();
    if (!memory) top = std::max_element(count.begin(), count.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    const auto ex = example.find(top->first);
    if (!memory) return " (most layouts tried fail with: " + (ex != example.end() ? ex->second : top->first) + ")";
    std::string out = " (the valid layouts do not fit in memory";
    if (lightest) out += "; " + lightest->text();
    return out + (offload_untried ? "; --offload also tries CPU offload" : "") + ")";
  }
};

// A checkpoint holds the weights and the optimizer state (its fp32 master copy included), not
// the gradients; under LoRA only the adapters', the frozen base being on storage already.
double checkpoint_bytes(const config::RunConfig& rc) {
  const memory::StateBytes sb = memory::state_bytes(rc.training);
  const double trained = rc.training.lora.enabled() ? memory::lora_model_params(rc) : rc.model.total_params();
  return trained * (sb.weights + sb.optimizer);
}

// What a restart reads back: the checkpoint, and under LoRA the frozen base too (in its stored
// dtype; 4-bit under QLoRA).
double restart_read_bytes(const config::RunConfig& rc) {
  if (!rc.training.lora.enabled()) return checkpoint_bytes(rc);
  const double per_weight = rc.training.lora.nf4 ? config::kNf4BytesPerWeight : memory::state_bytes(rc.training).weights;
  return checkpoint_bytes(rc) + rc.model.total_params() * per_weight;
}

// A sized result's figures from the planner's best layout on g GPUs.
void fill_from_layout(SizingResult& r, const Candidate& best, int64_t g, int64_t gpn, const SizingOptions& opt, const capacity::Goodput& goodput) {
  const double seq_tokens = static_cast<double>(best.rc.training.global_batch_size * best.rc.training.seq_len);
  r.gpus = g;
  r.nodes = g / gpn;
  r.step_time_s = best.step_s();
  r.tokens_per_s = seq_tokens / r.step_time_s;
  r.mfu = best.est.mfu * best.est.step_time_s / r.step_time_s;
  r.wall_days = r.steps * r.step_time_s / 86400.0;
  r.goodput = goodput;
  r.margin = opt.margin;
  r.gpu_hours = r.wall_days * 24.0 * static_cast<double>(g);
  r.cost_usd = r.gpu_hours * opt.usd_per_gpu_hour;
  r.layout = layout_text(best.rc.parallel);
  r.peak_memory_bytes = best.peak_memory_bytes;
  r.memory_capacity_bytes = best.est.memory.capacity.value();
  r.memory_headroom = opt.plan.memory_headroom;
  r.tdp_watts = best.rc.hardware.tdp_watts;
}

}  // namespace

SizingResult size_for_deadline(const Json& run_in, const std::string& source_name, const std::string& base_dir,
                               const SizingOptions& opt) {
  if (!(opt.target_days > 0)) throw core::UserError("capacity: --days must be positive");
  if (!(opt.margin >= 0 && opt.margin <= 1)) throw core::UserError("capacity: --margin must be in [0, 1]");
  // The deadline the predicted days must meet so that days x (1 + margin) meet the real one.
  const double target_days = opt.target_days / (1.0 + opt.margin);
  Json run = run_in;
  if (!run.contains("cluster")) run["cluster"] = Json::object();
  if (!run["cluster"].contains("num_gpus")) run["cluster"]["num_gpus"] = 8;  // placeholder, replaced per candidate
  const config::RunConfig base = config::parse_run(run, source_name, base_dir, false);
  SizingResult r;
  r.tokens = opt.tokens > 0 ? opt.tokens : opt.tokens_per_param * base.model.total_params();
  if (!(r.tokens > 0)) throw core::UserError("capacity: give a token budget (--tokens) or --tokens-per-param");
  const double seq_tokens = static_cast<double>(base.training.global_batch_size * base.training.seq_len);
  r.steps = r.tokens / seq_tokens;
  const double state_bytes = checkpoint_bytes(base), read_bytes = restart_read_bytes(base);
  auto goodput_on = [&](int64_t gpus, double step_s) {
    return capacity::expected_goodput(opt.reliability, step_s, r.steps, gpus, state_bytes, read_bytes);
  };
  r.sized_for_goodput = opt.size_for_goodput;
  const int64_t gpn = base.cluster.gpus_per_node > 0 ? base.cluster.gpus_per_node : base.hardware.gpus_per_node;

  if (opt.fixed_mfu > 0) {
    capacity::CapacityInput in;
    in.params = base.model.total_params();
    in.tokens = r.tokens;
    in.global_batch_seqs = static_cast<double>(base.training.global_batch_size);
    in.seq_len = static_cast<double>(base.training.seq_len);
    in.peak_flops = base.hardware.peak_for(base.training.precision).value();
    in.mfu = opt.fixed_mfu;
    in.target_days = target_days;
    in.usd_per_gpu_hour = opt.usd_per_gpu_hour;
    in.gpus_per_node = gpn;
    in.hbm_bytes = base.hardware.hbm_capacity.value();
    in.max_gpus = opt.max_gpus;
    r.fixed = capacity::size_cluster(in);
    auto step_on = [&](const capacity::CapacityResult& f) { return f.wall_days * 86400.0 / r.steps; };
    if (opt.size_for_goodput) {
      // Failures cost more on more GPUs: from the failure-free count, add nodes until the
      // expected wall clock meets the deadline (or the cap is reached).
      while (r.fixed.met && goodput_on(r.fixed.gpus, step_on(r.fixed)).wall_s / 86400.0 > target_days) {
        const double next = static_cast<double>(r.fixed.gpus + gpn);
        in.target_days = r.fixed.gpu_hours / ((next - 0.5) * 24.0);  // sizes exactly `next` GPUs
        r.fixed = capacity::size_cluster(in);
      }
    }
    r.goodput = goodput_on(r.fixed.gpus, step_on(r.fixed));
    if (opt.size_for_goodput && r.expected_wall_days() > target_days) r.fixed.met = false;
    r.mode = "fixed MFU";
    r.tdp_watts = base.hardware.tdp_watts;
    r.met = r.fixed.met;
    r.gpus = r.fixed.gpus;
    r.nodes = r.gpus / gpn;
    r.mfu = opt.fixed_mfu;
    r.gpu_hours = r.fixed.gpu_hours;
    r.wall_days = r.fixed.wall_days;
    r.cost_usd = r.fixed.cost_usd;
    r.step_time_s = r.wall_days * 86400.0 / r.steps;
    r.tokens_per_s = r.tokens / (r.wall_days * 86400.0);
    // The arithmetic sizes GPUs, not a layout: tp is the smallest that fits the static state
    // (weights, gradients, ZeRO-1 optimizer), and no layout is searched or checked against the
    // batch.
    r.margin = opt.margin;
    r.layout = r.fixed.tp_fits ? "no layout searched (fixed MFU); tp " + std::to_string(r.fixed.tp) + " fits the static memory"
                               : "no layout searched (fixed MFU); even tp " + std::to_string(r.fixed.tp) +
                                     " does not fit the static memory (weights, gradients, ZeRO-1 optimizer): add pipeline stages or sharding";
    return r;
  }

  r.mode = "simulated";
  // Without a scale-out network in the profile only one node can be costed.
  const auto counts = feasible_counts(base, base.hardware.network.stated ? opt.max_gpus : std::min<int64_t>(opt.max_gpus, gpn));
  if (counts.empty()) throw core::UserError("capacity: no whole-node GPU count divides the global batch into data-parallel replicas");
  struct Eval {
    bool fits = false;
    double days = 0;
    Candidate best;
  };
  std::map<int64_t, Eval> cache;
  Rejections rejected;  // over every count searched: why nothing fits when nothing does
  auto eval = [&](int64_t g) -> const Eval& {
    auto it = cache.find(g);
    if (it != cache.end()) return it->second;
    Json j = run;
    j["cluster"]["num_gpus"] = g;
    if (opt.on_search) opt.on_search(g, r.plans_run);
    PlanOptions po = opt.plan;
    po.keep = 1;  // sizing reads only each GPU count's best layout
    const PlanResult pr = plan(j, source_name, base_dir, po);
    ++r.plans_run;
    Eval e;
    rejected.add(pr);
    if (!pr.ranked.empty()) {
      e.fits = true;
      e.best = pr.ranked.front();
      e.days = r.steps * e.best.step_s() / 86400.0;
      if (opt.size_for_goodput) e.days = goodput_on(g, e.best.step_s()).wall_s / 86400.0;
    }
    return cache.emplace(g, std::move(e)).first->second;
  };
  auto meets = [&](int64_t g) {
    const Eval& e = eval(g);
    return e.fits && e.days <= target_days;
  };
  // Node counts whose prime factors are all <= 5 admit many layouts, so the best step time
  // falls (nearly) monotonically along them: bisect over those for the smallest count that
  // meets the deadline, then try the other feasible counts between it and the smooth count
  // below it (a few more plans at most).
  auto smooth = [&](int64_t g) {
    int64_t n = g / gpn;
    for (int64_t f : {2, 3, 5}) {
      while (n % f == 0) n /= f;
    }
    return n == 1;
  };
  std::vector<int64_t> grid;
  for (int64_t g : counts) {
    if (smooth(g)) grid.push_back(g);
  }
  if (grid.empty()) grid = counts;
  // Doubling from the smallest count until one meets the deadline (more GPUs than the batch
  // can use would stop fitting any layout, so the search never jumps there), then bisection.
  int64_t chosen = 0;
  size_t idx = 0;
  long prev_fail = -1;
  while (idx < grid.size() && !meets(grid[idx])) {
    prev_fail = static_cast<long>(idx);
    const int64_t want = 2 * grid[idx];
    while (idx < grid.size() && grid[idx] < want) ++idx;
  }
  if (idx == grid.size()) {
    // No count meets the deadline: report the fastest cluster evaluated as the best effort.
    r.met = false;
    double best_days = 0;
    for (const auto& [g, e] : cache) {
      if (e.fits && (chosen == 0 || e.days < best_days)) chosen = g, best_days = e.days;
    }
    if (chosen == 0) {
      throw core::UserError("capacity: no layout fits on any cluster of up to " + std::to_string(grid.back()) + " GPUs" +
                            rejected.why());
    }
    if (!base.hardware.network.stated) {
      throw core::UserError("capacity: one node (" + std::to_string(gpn) + " GPUs) does not meet the deadline, and the profile '" + base.hardware.name +
                            "' gives no scale-out network to size beyond it ($.hardware.network: nic_bandwidth, nics_per_node)");
    }
  } else {
    r.met = true;
    size_t lo = static_cast<size_t>(prev_fail + 1), hi = idx;
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (meets(grid[mid])) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    chosen = grid[lo];
    const int64_t below = lo > 0 ? grid[lo - 1] : 0;
    int tried = 0;
    for (int64_t g : counts) {
      if (g <= below || g >= chosen || tried >= 16) continue;
      ++tried;
      if (meets(g)) {
        chosen = g;
        break;
      }
    }
  }
  const Candidate& best = eval(chosen).best;
  fill_from_layout(r, best, chosen, gpn, opt, goodput_on(chosen, best.step_s()));
  return r;
}

std::vector<ScalingPoint> scaling(const Json& run_in, const std::string& source_name, const std::string& base_dir,
                                  const std::vector<int64_t>& counts, const SizingOptions& opt) {
  if (counts.empty()) throw core::UserError("scaling: --gpus needs at least one GPU count");
  for (size_t i = 1; i < counts.size(); ++i) {
    if (counts[i] <= counts[i - 1]) {
      throw core::UserError("scaling: --gpus must be increasing, got " + std::to_string(counts[i]) + " after " + std::to_string(counts[i - 1]));
    }
  }
  Json run = run_in;
  run["cluster"]["num_gpus"] = counts.front();
  const config::RunConfig base = config::parse_run(run, source_name, base_dir, false);
  const double seq_tokens = static_cast<double>(base.training.global_batch_size * base.training.seq_len);
  const double tokens = opt.tokens > 0 ? opt.tokens : opt.tokens_per_param * base.model.total_params();
  const double steps = tokens > 0 ? tokens / seq_tokens : 0.0;
  const double state_bytes = checkpoint_bytes(base), read_bytes = restart_read_bytes(base);
  const int64_t gpn = base.cluster.gpus_per_node > 0 ? base.cluster.gpus_per_node : base.hardware.gpus_per_node;
  std::vector<ScalingPoint> out;
  for (int64_t g : counts) {
    ScalingPoint p;
    p.gpus = g;
    Json j = run;
    j["cluster"]["num_gpus"] = g;
    if (opt.on_search) opt.on_search(g, static_cast<int>(out.size()));
    PlanOptions po = opt.plan;
    po.keep = 1;
    try {
      const PlanResult pr = plan(j, source_name, base_dir, po);
      if (pr.ranked.empty()) {
        Rejections rejected;
        rejected.add(pr);
        p.error = "no layout fits" + rejected.why();
      } else {
        p.ok = true;
        p.r.tokens = tokens;
        p.r.steps = steps;
        p.r.sized_for_goodput = opt.size_for_goodput;
        p.r.mode = "simulated";
        p.r.met = true;
        const Candidate& best = pr.ranked.front();
        fill_from_layout(p.r, best, g, gpn, opt,
                         steps > 0 ? capacity::expected_goodput(opt.reliability, best.step_s(), steps, g, state_bytes, read_bytes) : capacity::Goodput{});
      }
    } catch (const core::UserError& e) {
      p.error = e.what();
    }
    out.push_back(std::move(p));
  }
  return out;
}

std::string scaling_text(const std::vector<ScalingPoint>& pts) {
  std::ostringstream o;
  const ScalingPoint* first = nullptr;
  for (const auto& p : pts) {
    if (p.ok) {
      first = &p;
      break;
    }
  }
  const bool budget = first != nullptr && first->r.steps > 0;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%7s %9s %12s %10s %7s %8s", "GPUs", "step s", "tokens/s", "tok/s/GPU", "MFU", "scaling");
  o << buf;
  if (budget) {
    std::snprintf(buf, sizeof buf, " %9s %12s %12s %8s %9s", "days", "GPU-hours", "cost USD", "goodput", "w/ fail");
    o << buf;
  }
  o << "  layout\n";
  for (const auto& p : pts) {
    if (!p.ok) {
      std::snprintf(buf, sizeof buf, "%7lld  %s\n", static_cast<long long>(p.gpus), p.error.c_str());
      o << buf;
      continue;
    }
    const SizingResult& r = p.r;
    // Scaling efficiency: tokens/s per GPU against the smallest count that has a layout.
    const double eff = (r.tokens_per_s / static_cast<double>(r.gpus)) / (first->r.tokens_per_s / static_cast<double>(first->r.gpus));
    std::snprintf(buf, sizeof buf, "%7lld %9.3f %12.0f %10.0f %6.1f%% %7.1f%%", static_cast<long long>(r.gpus), r.step_time_s, r.tokens_per_s,
                  r.tokens_per_s / static_cast<double>(r.gpus), 100.0 * r.mfu, 100.0 * eff);
    o << buf;
    if (budget) {
      std::snprintf(buf, sizeof buf, " %9.2f %12.0f %12.0f %7.1f%% %9.2f", r.wall_days, r.gpu_hours, r.cost_usd, 100.0 * r.goodput.goodput,
                    r.expected_wall_days());
      o << buf;
    }
    o << "  " << r.layout << "\n";
  }
  o << "\nscaling: tokens/s per GPU against the first count with a layout (" << (first ? std::to_string(first->gpus) + " GPUs" : "none") << ")";
  if (budget) o << "; days and cost without failures; goodput and days w/ fail with failures, checkpoints and restarts (as capacity)";
  o << ".\n";
  return o.str();
}

Json scaling_json(const std::vector<ScalingPoint>& pts) {
  Json rows = Json::array();
  for (const auto& p : pts) {
    Json j = p.ok ? sizing_json(p.r) : Json{{"gpus", p.gpus}, {"error", p.error}};
    rows.push_back(std::move(j));
  }
  return {{"points", rows}};
}

std::string sizing_text(const SizingResult& r) {
  std::ostringstream o;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%s: %lld GPUs (%lld nodes), %s\n  tokens %.4g in %.0f steps; step %.3f s, %.0f tokens/s, MFU %.1f%%\n"
                "  wall clock %.2f days, %.0f GPU-hours, cost %.0f USD\n",
                r.met ? "deadline met" : "deadline NOT met (largest cluster searched)", static_cast<long long>(r.gpus),
                static_cast<long long>(r.nodes), r.layout.c_str(), r.tokens, r.steps, r.step_time_s, r.tokens_per_s,
                100.0 * r.mfu, r.wall_days, r.gpu_hours, r.cost_usd);
  o << buf;
  const capacity::Goodput& g = r.goodput;
  if (g.wall_s > 0 || g.goodput == 0) {
    if (std::isfinite(g.wall_s)) {
      std::snprintf(buf, sizeof buf, "  with failures: %.1f%% goodput, %.2f days, %.0f GPU-hours, cost %.0f USD (%s)\n", 100.0 * g.goodput,
                    r.expected_wall_days(), r.expected_gpu_hours(), r.expected_cost_usd(),
                    r.sized_for_goodput ? "the deadline was held to these days" : "not in the sizing; --goodput sizes for them");
    } else {
      std::snprintf(buf, sizeof buf, "  with failures: the run never finishes (interrupted before a checkpoint interval and its restart complete)\n");
    }
    o << buf;
    std::snprintf(buf, sizeof buf,
                  "    one interruption per %.4g h on %lld GPUs (%s expected); a %.4g GB checkpoint every %lld steps (%.2f h%s), "
                  "%.1f s to save at %.4g GB/s; restart %.1f min + %.1f s to load\n",
                  g.cluster_mtbf_s / 3600.0, static_cast<long long>(r.gpus),
                  std::isfinite(g.interruptions) ? core::fmt("%.1f", g.interruptions).c_str() : "unbounded", g.state_bytes / 1e9,
                  static_cast<long long>(g.interval_steps), g.interval_s / 3600.0, g.optimal_interval ? ", Daly's optimum" : "", g.save_s,
                  g.storage_bytes_per_s / 1e9, (g.restart_s - g.load_s) / 60.0, g.load_s);
    o << buf;
  }
  if (r.tdp_watts > 0) {
    std::snprintf(buf, sizeof buf, "  GPU power %.0f kW (%.0f W board power each); %.0f MWh for the GPU-hours, %.0f MWh with failures (hosts, network and cooling on top)\n",
                  r.gpu_power_kw(), r.tdp_watts, r.gpu_energy_mwh(), r.expected_gpu_hours() * r.tdp_watts / 1e6);
    o << buf;
  }
  if (r.margin > 0) {
    std::snprintf(buf, sizeof buf, "  with the %.0f%% margin: %.2f days against the deadline\n", 100.0 * r.margin, r.wall_days_with_margin());
    o << buf;
  }
  o << "  MFU source: " << r.mode;
  if (r.mode == "simulated") o << " (planner's best layout, " << r.plans_run << " GPU counts searched)";
  o << "\n";
  if (r.memory_capacity_bytes > 0) {
    std::snprintf(buf, sizeof buf, "  peak memory %.2f of %.2f GiB per GPU\n", r.peak_memory_bytes / 1073741824.0,
                  r.memory_capacity_bytes / 1073741824.0);
    o << buf;
    if (const std::string note = memory_margin_note(r.peak_memory_bytes, r.memory_capacity_bytes, r.memory_headroom); !note.empty()) {
      o << "  " << note << "\n";
    }
  }
  return o.str();
}

namespace {
Json goodput_json(const SizingResult& r) {
  const capacity::Goodput& g = r.goodput;
  // An unfinishable run's wall time is infinite, which JSON cannot hold: null.
  auto finite = [](double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); };
  return {{"goodput", g.goodput},
          {"expected_wall_days", finite(r.expected_wall_days())},
          {"expected_gpu_hours", finite(r.expected_gpu_hours())},
          {"expected_cost_usd", finite(r.expected_cost_usd())},
          {"sized_for", r.sized_for_goodput},
          {"cluster_mtbf_h", g.cluster_mtbf_s / 3600.0},
          {"expected_interruptions", finite(g.interruptions)},
          {"checkpoint_bytes", g.state_bytes},
          {"checkpoint_every_steps", g.interval_steps},
          {"checkpoint_interval_s", g.interval_s},
          {"checkpoint_interval_optimal", g.optimal_interval},
          {"checkpoint_save_s", g.save_s},
          {"storage_bytes_per_s", g.storage_bytes_per_s},
          {"checkpoint_load_s", g.load_s},
          {"restart_s", g.restart_s}};
}
}  // namespace

Json sizing_json(const SizingResult& r) {
  return {{"deadline_met", r.met}, {"gpus", r.gpus}, {"nodes", r.nodes}, {"layout", r.layout}, {"tokens", r.tokens},
          {"steps", r.steps}, {"step_time_s", r.step_time_s}, {"tokens_per_s", r.tokens_per_s}, {"mfu", r.mfu},
          {"wall_days", r.wall_days}, {"margin", r.margin}, {"wall_days_with_margin", r.wall_days_with_margin()}, {"gpu_hours", r.gpu_hours}, {"cost_usd", r.cost_usd}, {"mfu_source", r.mode},
          {"plans_run", r.plans_run}, {"peak_memory_bytes", r.peak_memory_bytes}, {"goodput", goodput_json(r)},
          {"gpu_power_kw", r.tdp_watts > 0 ? Json(r.gpu_power_kw()) : Json(nullptr)},
          {"gpu_energy_mwh", r.tdp_watts > 0 ? Json(r.gpu_energy_mwh()) : Json(nullptr)}};
}

namespace {

// Expected days and cost with failures when sized for them, else the failure-free ones.
double days_of(const SizingResult& r) { return r.sized_for_goodput ? r.expected_wall_days() : r.wall_days; }
double cost_of(const SizingResult& r) { return r.sized_for_goodput ? r.expected_cost_usd() : r.cost_usd; }
double gpu_hours_of(const SizingResult& r) { return r.sized_for_goodput ? r.expected_gpu_hours() : r.gpu_hours; }

// Met first; then by cost when every profile has a price, else by GPU-hours; the name breaks ties.
std::vector<const HardwareSizing*> ranked(const std::vector<HardwareSizing>& all) {
  bool priced = true;
  for (const auto& h : all) priced = priced && (!h.ok || h.usd_per_gpu_hour > 0);
  std::vector<const HardwareSizing*> out;
  for (const auto& h : all) out.push_back(&h);
  std::stable_sort(out.begin(), out.end(), [priced](const HardwareSizing* a, const HardwareSizing* b) {
    const int ka = a->ok ? (a->result.met ? 0 : 1) : 2, kb = b->ok ? (b->result.met ? 0 : 1) : 2;
    if (ka != kb) return ka < kb;
    if (ka == 2) return a->hardware < b->hardware;
    const double va = priced ? cost_of(a->result) : gpu_hours_of(a->result), vb = priced ? cost_of(b->result) : gpu_hours_of(b->result);
    if (va != vb) return va < vb;
    return a->hardware < b->hardware;
  });
  return out;
}

}  // namespace

std::map<std::string, double> parse_prices(const std::string& text, const std::vector<std::string>& hardware) {
  std::map<std::string, double> out;
  auto number = [&](const std::string& v, const std::string& what) {
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(x) || x < 0 || x > 1e6) {
      throw core::UserError("--price: " + what + "got '" + v + "'; expected a price per GPU-hour in [0, 1e6]");
    }
    return x;
  };
  if (text.empty()) {
    for (const auto& h : hardware) out[h] = 0;
    return out;
  }
  if (text.find('=') == std::string::npos) {
    const double x = number(text, "");
    for (const auto& h : hardware) out[h] = x;
    return out;
  }
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) throw core::UserError("--price: '" + item + "': expected NAME=USD, e.g. h100-sxm=2.5");
    const std::string name = item.substr(0, eq);
    if (std::find(hardware.begin(), hardware.end(), name) == hardware.end()) {
      throw core::UserError("--price: " + name + " is not among the --hardware profiles");
    }
    if (!out.emplace(name, number(item.substr(eq + 1), name + ": ")).second) throw core::UserError("--price: " + name + " is priced twice");
  }
  for (const auto& h : hardware) {
    if (!out.count(h)) throw core::UserError("--price: no price for " + h + " (give NAME=USD for every --hardware profile, or one price for all)");
  }
  return out;
}

std::string sizing_comparison_text(const std::vector<HardwareSizing>& all) {
  std::ostringstream o;
  for (const auto* h : ranked(all)) {
    o << "== " << h->hardware << " ==\n";
    o << (h->ok ? sizing_text(h->result) : "no answer: " + h->error + "\n") << "\n";
  }
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-22s %7s %9s %7s %9s %13s %14s  %s\n", "hardware", "GPUs", "step s", "MFU", "days", "GPU-hours", "cost USD", "layout");
  o << buf;
  for (const auto* h : ranked(all)) {
    if (!h->ok) {
      std::snprintf(buf, sizeof buf, "%-22s %7s  %s\n", h->hardware.c_str(), "-", h->error.c_str());
      o << buf;
      continue;
    }
    const SizingResult& r = h->result;
    std::snprintf(buf, sizeof buf, "%-22s %7lld %9.3f %6.1f%% %9.2f %13.0f %14.0f  %s%s\n", h->hardware.c_str(), static_cast<long long>(r.gpus),
                  r.step_time_s, 100.0 * r.mfu, days_of(r), gpu_hours_of(r), cost_of(r), r.met ? "" : "(deadline NOT met) ", r.layout.c_str());
    o << buf;
  }
  const auto order = ranked(all);
  if (!order.empty() && order.front()->ok && order.front()->result.met) {
    const bool priced = std::all_of(all.begin(), all.end(), [](const HardwareSizing& h) { return !h.ok || h.usd_per_gpu_hour > 0; });
    o << "\n" << order.front()->hardware << " meets the deadline " << (priced ? "at the lowest cost" : "in the fewest GPU-hours (give --price for cost)");
    if (order.front()->result.sized_for_goodput) o << ", failures, checkpoints and restarts included";
    o << ".\n";
  } else {
    o << "\nNo profile meets the deadline.\n";
  }
  return o.str();
}

Json sizing_comparison_json(const std::vector<HardwareSizing>& all) {
  Json rows = Json::array();
  std::string best;
  for (const auto* h : ranked(all)) {
    Json j = h->ok ? sizing_json(h->result) : Json{{"error", h->error}};
    j["hardware"] = h->hardware;
    j["usd_per_gpu_hour"] = h->usd_per_gpu_hour;
    if (best.empty() && h->ok && h->result.met) best = h->hardware;
    rows.push_back(std::move(j));
  }
  return {{"hardware", rows}, {"best", best.empty() ? Json(nullptr) : Json(best)}};
}

}  // namespace stepcast::plan
