#include "validate/measurement.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>

#include "sim/core/error.hpp"
#include "sim/memory/ledger.hpp"
#include "sim/mesh/rank_mesh.hpp"
#include "sim/report/output.hpp"

namespace stepcast::validate {

using core::Json;

double Measured::median_step_s() const { return median(step_s); }
double Measured::min_step_s() const { return step_s.empty() ? 0.0 : *std::min_element(step_s.begin(), step_s.end()); }
double Measured::max_step_s() const { return step_s.empty() ? 0.0 : *std::max_element(step_s.begin(), step_s.end()); }

double Comparison::worst_memory_error() const {
  double w = 0;
  for (const auto& m : memory) w = std::max(w, std::abs(m.predicted_bytes / m.measured_bytes - 1.0));
  return w;
}

namespace {

// Median over the measured steps of one category on one rank.
double category_median(const RankMeasurement& r, Category c) {
  std::vector<double> v;
  for (const auto& s : r.category_s) v.push_back(s[static_cast<size_t>(c)]);
  return median(v);
}

using core::fmt;

}  // namespace

Json rank_measurement_json(const RankMeasurement& r) {
  Json cats = Json::array();
  for (const auto& c : r.category_s) cats.push_back(std::vector<double>(c.begin(), c.end()));
  Json trace = Json::array();
  for (const auto& e : r.trace) trace.push_back({e.start_s, e.dur_s, e.name, static_cast<int>(e.category), e.microbatch, e.layer});
  return {{"rank", r.rank}, {"stage", r.stage}, {"step_s", r.step_s}, {"category_s", cats},
          {"peak_allocated_bytes", r.peak_allocated_bytes}, {"peak_reserved_bytes", r.peak_reserved_bytes},
          {"rss_delta_bytes", r.rss_delta_bytes}, {"workspace_bytes", r.workspace_bytes}, {"trace", trace},
          {"trace_t0_s", r.trace_t0_s}};
}

Json measured_json(const Measured& m) {
  Json ranks = Json::array();
  for (const auto& r : m.ranks) ranks.push_back(rank_measurement_json(r));
  return {{"backend", m.backend}, {"steps", m.steps}, {"warmup", m.warmup}, {"rounds", m.rounds}, {"step_s", m.step_s},
          {"ranks", ranks}, {"reference", {m.reference.m, m.reference.n, m.reference.k, m.reference.batch}},
          {"reference_samples_s", m.reference_samples_s}};
}

namespace {

// A measured time or byte count: finite and not negative.
double measured_amount(const Json& j, const char* field) {
  const double v = j.get<double>();
  if (!std::isfinite(v) || v < 0) {
    throw core::UserError(std::string("a measurement's ") + field + " is " + fmt("%g", v) +
                          ", not a finite non-negative number");
  }
  return v;
}

std::vector<double> measured_amounts(const Json& j, const char* field) {
  if (!j.is_array()) throw core::UserError(std::string("a measurement's ") + field + " is not a list of numbers");
  std::vector<double> v;
  for (const auto& x : j) v.push_back(measured_amount(x, field));
  return v;
}

}  // namespace

RankMeasurement rank_measurement_from_json(const Json& x) {
  RankMeasurement r;
  r.rank = x.at("rank").get<int64_t>();
  r.stage = x.at("stage").get<int32_t>();
  r.step_s = measured_amounts(x.at("step_s"), "ranks.step_s");
  for (const auto& c : x.at("category_s")) {
    const auto v = measured_amounts(c, "ranks.category_s");
    if (v.size() != kCategories) {
      throw core::UserError("a measurement's category_s holds " + std::to_string(v.size()) + " values per step, not " +
                            std::to_string(kCategories));
    }
    std::array<double, kCategories> a{};
    std::copy(v.begin(), v.end(), a.begin());
    r.category_s.push_back(a);
  }
  if (r.category_s.size() != r.step_s.size()) {
    throw core::UserError("a measurement's rank " + std::to_string(r.rank) + " holds " + std::to_string(r.step_s.size()) +
                          " step times and " + std::to_string(r.category_s.size()) + " category breakdowns");
  }
  r.peak_allocated_bytes = measured_amount(x.at("peak_allocated_bytes"), "peak_allocated_bytes");
  r.peak_reserved_bytes = measured_amount(x.at("peak_reserved_bytes"), "peak_reserved_bytes");
  r.rss_delta_bytes = measured_amount(x.at("rss_delta_bytes"), "rss_delta_bytes");
  r.workspace_bytes = measured_amount(x.at("workspace_bytes"), "workspace_bytes");
  for (const auto& e : x.at("trace")) {
    const int cat = e.at(3).get<int>();
    if (cat < 0 || cat >= static_cast<int>(kCategories)) {
      throw core::UserError("a trace event's category is " + std::to_string(cat) + ", not 0 to " +
                            std::to_string(kCategories - 1));
    }
    r.trace.push_back({measured_amount(e.at(0), "trace start"), measured_amount(e.at(1), "trace duration"), e.at(2).get<uint32_t>(),
                       static_cast<Category>(cat), e.at(4).get<int32_t>(), e.at(5).get<int32_t>()});
  }
  r.trace_t0_s = measured_amount(x.at("trace_t0_s"), "trace_t0_s");
  return r;
}

Measured measured_from_json(const Json& j) {
  Measured m;
  m.backend = j.at("backend").get<std::string>();
  m.steps = j.at("steps").get<int>();
  m.warmup = j.at("warmup").get<int>();
  m.rounds = j.at("rounds").get<int>();
  if (m.rounds < 1 || m.warmup < 0) throw core::UserError("a measurement's rounds or warmup is out of range");
  m.step_s = measured_amounts(j.at("step_s"), "step_s");
  if (m.steps < 1 || m.step_s.size() != static_cast<size_t>(m.steps)) {
    throw core::UserError("a measurement holds " + std::to_string(m.step_s.size()) + " step times for " +
                          std::to_string(m.steps) + " measured steps");
  }
  for (const auto& x : j.at("ranks")) {
    RankMeasurement r = rank_measurement_from_json(x);
    if (r.step_s.size() != m.step_s.size()) {
      throw core::UserError("a measurement's rank " + std::to_string(r.rank) + " holds " + std::to_string(r.step_s.size()) +
                            " step times for " + std::to_string(m.step_s.size()) + " measured steps");
    }
    m.ranks.push_back(std::move(r));
  }
  if (m.ranks.empty()) throw core::UserError("a measurement lists no ranks");
  const Json& g = j.at("reference");
  m.reference = {g.at(0).get<double>(), g.at(1).get<double>(), g.at(2).get<double>(), g.at(3).get<double>()};
  m.reference_samples_s = measured_amounts(j.at("reference_samples_s"), "reference_samples_s");
  return m;
}

Measured merge_rounds(const std::vector<Measured>& rounds) {
  if (rounds.empty()) throw core::InternalError("validate: merging no rounds");
  Measured out = rounds.front();
  for (size_t i = 1; i < rounds.size(); ++i) {
    const Measured& m = rounds[i];
    if (m.backend != out.backend || m.ranks.size() != out.ranks.size() || m.reference.m != out.reference.m ||
        m.reference.n != out.reference.n || m.reference.k != out.reference.k) {
      throw core::UserError("the rounds of one plan differ in backend, ranks or reference GEMM");
    }
    out.steps += m.steps;
    out.rounds += m.rounds;
    out.step_s.insert(out.step_s.end(), m.step_s.begin(), m.step_s.end());
    out.reference_samples_s.insert(out.reference_samples_s.end(), m.reference_samples_s.begin(), m.reference_samples_s.end());
    for (size_t r = 0; r < m.ranks.size(); ++r) {
      RankMeasurement& o = out.ranks[r];
      const RankMeasurement& x = m.ranks[r];
      if (o.rank != x.rank || o.stage != x.stage) throw core::UserError("the rounds of one plan list different ranks");
      o.step_s.insert(o.step_s.end(), x.step_s.begin(), x.step_s.end());
      o.category_s.insert(o.category_s.end(), x.category_s.begin(), x.category_s.end());
      o.peak_allocated_bytes = std::max(o.peak_allocated_bytes, x.peak_allocated_bytes);
      o.peak_reserved_bytes = std::max(o.peak_reserved_bytes, x.peak_reserved_bytes);
      o.rss_delta_bytes = std::max(o.rss_delta_bytes, x.rss_delta_bytes);
      o.workspace_bytes = std::max(o.workspace_bytes, x.workspace_bytes);
      o.trace = x.trace;
      o.trace_t0_s = x.trace_t0_s;
    }
  }
  return out;
}

std::pair<double, std::string> reference_baseline(const config::RunConfig& rc, const cost::GemmShape& g) {
  const auto& cal = rc.hardware.calibration_reference;
  if (cal.seconds > 0 && cal.m == g.m && cal.n == g.n && cal.k == g.k && g.batch == 1 && cal.dtype == rc.training.precision) {
    return {cal.seconds, "calibration samples"};
  }
  return {cost::gemm_time(g, rc.training.precision, rc.hardware).value(), "cost model"};
}

Comparison compare(const config::RunConfig& rc, const engine::SimResult& sim, const Measured& meas) {
  Comparison c;
  c.run = rc.source_name;
  c.profile = rc.hardware.name;
  c.predicted_step_s = sim.step.step_time_s;
  c.measured_step_s = meas.median_step_s();
  c.measured_min_s = meas.min_step_s();
  c.measured_max_s = meas.max_step_s();
  // Phases on the simulation's critical stage, measured as the mean over that stage's ranks.
  size_t crit = 0;
  for (size_t s = 0; s < sim.stages.size(); ++s) {
    if (sim.stages[s].busy_s > sim.stages[crit].busy_s) crit = s;
  }
  const auto& st = sim.stages[crit];
  const auto& br = sim.step.breakdown;
  auto measured = [&](Category cat) {
    double sum = 0;
    int n = 0;
    for (const auto& r : meas.ranks) {
      if (static_cast<size_t>(r.stage) != crit) continue;
      sum += category_median(r, cat);
      ++n;
    }
    return n ? sum / n : 0.0;
  };
  auto exposed = [&](const char* k) {
    auto it = br.exposed_comm.find(k);
    return it == br.exposed_comm.end() ? 0.0 : it->second;
  };
  // Waiting inside collectives, from the last step's timestamps: a member's wait is the
  // group's last arrival minus its own arrival.
  std::map<int64_t, const RankMeasurement*> by_rank;
  for (const auto& r : meas.ranks) by_rank[r.rank] = &r;
  const auto& pl = rc.parallel;
  const mesh::RankMesh mesh(pl.tp, pl.cp, pl.dp, pl.pp, pl.ep, pl.etp);
  auto waited = [&](Category cat) {
    double sum = 0;
    int n = 0;
    for (const auto& r : meas.ranks) {
      if (static_cast<size_t>(r.stage) != crit || r.trace.empty()) continue;
      const auto group = mesh.group(r.rank, cat == Category::kTpComm   ? mesh::Dim::kTp
                                            : cat == Category::kEpComm ? mesh::Dim::kEp
                                            : cat == Category::kCpComm ? mesh::Dim::kCp
                                                                       : mesh::Dim::kDpCp);
      auto starts = [&](const RankMeasurement& x) {
        std::vector<double> s;
        for (const auto& e : x.trace) {
          if (e.category == cat) s.push_back(x.trace_t0_s + e.start_s);
        }
        return s;
      };
      const std::vector<double> mine = starts(r);
      std::vector<double> last = mine;
      bool complete = true;
      for (int64_t g : group) {
        auto it = by_rank.find(g);
        if (it == by_rank.end() || it->second->trace.empty()) {
          complete = false;
          break;
        }
        const std::vector<double> other = starts(*it->second);
        if (other.size() != mine.size()) {
          complete = false;
          break;
        }
        for (size_t i = 0; i < mine.size(); ++i) last[i] = std::max(last[i], other[i]);
      }
      if (!complete) return -1.0;
      double w = 0;
      for (size_t i = 0; i < mine.size(); ++i) w += last[i] - mine[i];
      sum += w;
      ++n;
    }
    return n ? sum / n : -1.0;
  };
  c.phases.push_back({"compute", st.compute_s, measured(Category::kCompute)});
  // The simulation books exposed TP, CP and EP communication together; the breakdown splits it.
  const double ep_s = exposed("ep"), cp_s = exposed("cp");
  c.phases.push_back({"tensor-parallel communication", st.tp_comm_s - ep_s - cp_s, measured(Category::kTpComm), waited(Category::kTpComm)});
  if (pl.cp > 1) c.phases.push_back({"context-parallel communication", cp_s, measured(Category::kCpComm), waited(Category::kCpComm)});
  if (pl.ep > 1) c.phases.push_back({"expert-parallel communication", ep_s, measured(Category::kEpComm), waited(Category::kEpComm)});
  // The pipeline's idle time on that stage less its waits for ZeRO-3 / FSDP collectives (the
  // breakdown's bubble), which are data-parallel communication.
  c.phases.push_back({"pipeline send/receive and bubble", st.pp_comm_s + br.bubble, measured(Category::kPpComm)});
  c.phases.push_back({"data-parallel communication", exposed("dp"), measured(Category::kDpComm), waited(Category::kDpComm)});
  c.phases.push_back({"optimizer", br.optimizer, measured(Category::kOptimizer)});
  c.reference_measured_s = meas.reference_s();
  std::tie(c.reference_predicted_s, c.reference_baseline) = reference_baseline(rc, meas.reference);
  for (const auto& r : meas.ranks) {
    const auto& ls = sim.step.memory.stages[static_cast<size_t>(r.stage)];
    c.memory.push_back({r.rank, r.stage, ls.total().value(), r.peak_allocated_bytes, r.rss_delta_bytes, r.peak_reserved_bytes,
                        r.workspace_bytes});
  }
  return c;
}

Json comparison_json(const config::RunConfig& rc, const Comparison& c, const Measured& m) {
  Json j;
  j["run"] = c.run;
  j["command"] = c.command;
  j["backend"] = m.backend;
  j["profile"] = c.profile;
  j["layout"] = report::layout_json(rc);  // the output contract's layout
  j["steps"] = m.steps;
  j["warmup_steps"] = m.warmup;
  j["rounds"] = m.rounds;
  j["predicted"] = {{"step_time_s", c.predicted_step_s}};
  j["measured"] = {{"step_time_s", c.measured_step_s}, {"min_s", c.measured_min_s}, {"max_s", c.measured_max_s}, {"steps_s", m.step_s}};
  j["step_time_error"] = c.step_error();
  j["drift_adjusted"] = {{"predicted_step_time_s", c.drift_adjusted_step_s}, {"step_time_error", c.drift_adjusted_error()}};
  Json phases = Json::array();
  for (const auto& p : c.phases) {
    Json x{{"phase", p.name}, {"predicted_s", p.predicted_s}, {"measured_s", p.measured_s}};
    if (p.measured_wait_s >= 0) x["measured_wait_s"] = p.measured_wait_s;
    phases.push_back(x);
  }
  j["phases"] = phases;
  Json mem = Json::array();
  for (const auto& x : c.memory) {
    mem.push_back({{"rank", x.rank}, {"stage", x.stage}, {"predicted_bytes", x.predicted_bytes}, {"measured_bytes", x.measured_bytes},
                   {"rss_delta_bytes", x.rss_delta_bytes}, {"reserved_bytes", x.reserved_bytes},
                   {"workspace_bytes", x.workspace_bytes}, {"error", x.predicted_bytes / x.measured_bytes - 1.0}});
  }
  j["memory"] = mem;
  j["memory_worst_error"] = c.worst_memory_error();
  j["reference_gemm"] = {{"m", m.reference.m}, {"n", m.reference.n}, {"k", m.reference.k},
                         {"predicted_s", c.reference_predicted_s}, {"measured_s", c.reference_measured_s},
                         {"samples_s", m.reference_samples_s}, {"baseline", c.reference_baseline}};
  return j;
}

Comparison comparison_from_json(const Json& j) {
  Comparison c;
  c.run = j.at("run").get<std::string>();
  c.command = j.at("command").get<std::string>();
  c.profile = j.at("profile").get<std::string>();
  c.predicted_step_s = j.at("predicted").at("step_time_s").get<double>();
  const Json& meas = j.at("measured");
  c.measured_step_s = meas.at("step_time_s").get<double>();
  c.measured_min_s = meas.at("min_s").get<double>();
  c.measured_max_s = meas.at("max_s").get<double>();
  c.drift_adjusted_step_s = j.at("drift_adjusted").at("predicted_step_time_s").get<double>();
  for (const auto& p : j.at("phases")) {
    c.phases.push_back({p.at("phase").get<std::string>(), p.at("predicted_s").get<double>(), p.at("measured_s").get<double>(),
                        p.value("measured_wait_s", -1.0)});
  }
  for (const auto& x : j.at("memory")) {
    c.memory.push_back({x.at("rank").get<int64_t>(), x.at("stage").get<int32_t>(), x.at("predicted_bytes").get<double>(),
                        x.at("measured_bytes").get<double>(), x.at("rss_delta_bytes").get<double>(), x.at("reserved_bytes").get<double>(),
                        x.at("workspace_bytes").get<double>()});
  }
  c.reference_predicted_s = j.at("reference_gemm").at("predicted_s").get<double>();
  c.reference_measured_s = j.at("reference_gemm").at("measured_s").get<double>();
  c.reference_baseline = j.at("reference_gemm").at("baseline").get<std::string>();
  return c;
}

namespace {
// " (a-b ms over n samples)", or nothing for fewer than two.
std::string sample_range(const std::vector<double>& v) {
  if (v.size() < 2) return "";
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return " (" + fmt("%.3f", *lo * 1e3) + "-" + fmt("%.3f", *hi * 1e3) + " ms over " + std::to_string(v.size()) + " samples)";
}
}  // namespace

std::string comparison_markdown(const config::RunConfig& rc, const Comparison& c, const Measured& m) {
  std::ostringstream o;
  const auto& p = rc.parallel;
  o << "## " << c.run << "\n\n";
  o << "Layout: tp " << p.tp << ", pp " << p.pp << " (" << config::to_string(p.schedule) << "), dp " << p.dp << (p.sp ? ", sp" : "")
    << (p.cp > 1 ? ", cp " + std::to_string(p.cp) + " (" + config::to_string(p.cp_comm) + ")" : std::string())
    << (p.ep > 1 ? ", ep " + std::to_string(p.ep) : std::string())
    << (p.fsdp ? std::string(", FSDP") : ", ZeRO " + std::to_string(p.effective_zero()))
    << (p.dp_replicate > 1 ? " in " + std::to_string(p.dp_replicate) + " replicas" : std::string()) << ", recompute " << config::to_string(p.recompute) << ", micro-batch " << p.micro_batch_size << " x "
    << rc.num_microbatches << "; backend " << m.backend << ", profile " << c.profile << "; " << m.steps << " measured steps after "
    << m.warmup << " warm-up"
    << (m.rounds > 1 ? " in each of " + std::to_string(m.rounds) + " rounds (the plans executed in turn, each round every plan)" : std::string())
    << ".\n\n";
  o << "| | predicted | measured | error |\n|---|---:|---:|---:|\n";
  o << "| step time (median) | " << fmt("%.1f", c.predicted_step_s * 1e3) << " ms | " << fmt("%.1f", c.measured_step_s * 1e3)
    << " ms (min " << fmt("%.1f", c.measured_min_s * 1e3) << ", max " << fmt("%.1f", c.measured_max_s * 1e3) << ") | "
    << fmt("%+.1f%%", 100.0 * c.step_error()) << " |\n";
  for (const auto& ph : c.phases) {
    std::string measured = fmt("%.1f", ph.measured_s * 1e3) + " ms";
    if (ph.measured_wait_s >= 0 && ph.measured_s > 1e-4) measured += " (" + fmt("%.1f", ph.measured_wait_s * 1e3) + " waiting for the group)";
    o << "| " << ph.name << " | " << fmt("%.1f", ph.predicted_s * 1e3) << " ms | " << measured << " | "
      << (ph.measured_s > 1e-4 ? fmt("%+.1f%%", 100.0 * (ph.predicted_s / ph.measured_s - 1.0)) : std::string("-")) << " |\n";
  }
  for (const auto& x : c.memory) {
    o << "| peak memory rank " << x.rank << " (stage " << x.stage << ") | " << fmt("%.1f", x.predicted_bytes / 1048576.0) << " MiB | "
      << fmt("%.1f", x.measured_bytes / 1048576.0) << " MiB (RSS growth " << fmt("%.1f", x.rss_delta_bytes / 1048576.0) << ") | "
      << fmt("%+.1f%%", 100.0 * (x.predicted_bytes / x.measured_bytes - 1.0)) << " |\n";
  }
  if (c.reference_measured_s > 0) {
    o << "\nMachine speed: a reference " << fmt("%.0f", m.reference.m) << "x" << fmt("%.0f", m.reference.n) << "x" << fmt("%.0f", m.reference.k)
      << " GEMM timed before this plan, before each measured step and after the last took a median "
      << fmt("%.3f", c.reference_measured_s * 1e3) << " ms" << sample_range(m.reference_samples_s) << "; "
      << (c.reference_baseline == "calibration samples" ? "its median over the calibration's samples was " : "the profile predicts ")
      << fmt("%.3f", c.reference_predicted_s * 1e3) << " ms (" << fmt("%+.1f%%", 100.0 * (c.reference_predicted_s / c.reference_measured_s - 1.0))
      << "): the part of the step-time error that is the machine drifting since calibration. With compute scaled by it the prediction is "
      << fmt("%.1f", c.drift_adjusted_step_s * 1e3) << " ms (" << fmt("%+.1f%%", 100.0 * c.drift_adjusted_error()) << ").\n";
  }
  o << "\n";
  return o.str();
}

SuiteSummary summarize(const std::vector<Comparison>& cs) {
  SuiteSummary s;
  s.plans = static_cast<int>(cs.size());
  std::vector<double> errs;
  for (const auto& c : cs) {
    errs.push_back(std::abs(c.step_error()));
    s.max_abs_step_error = std::max(s.max_abs_step_error, errs.back());
    s.worst_memory_error = std::max(s.worst_memory_error, c.worst_memory_error());
    if (c.reference_measured_s > 0) {
      s.max_abs_reference_drift = std::max(s.max_abs_reference_drift, std::abs(c.reference_predicted_s / c.reference_measured_s - 1.0));
    }
  }
  s.median_abs_step_error = median(errs);
  std::vector<double> adjusted;
  for (const auto& c : cs) {
    adjusted.push_back(std::abs(c.drift_adjusted_step_s > 0 ? c.drift_adjusted_error() : c.step_error()));
    s.max_abs_drift_adjusted_error = std::max(s.max_abs_drift_adjusted_error, adjusted.back());
  }
  s.median_abs_drift_adjusted_error = median(adjusted);
  return s;
}

std::string suite_markdown(const std::vector<Comparison>& cs) {
  std::ostringstream o;
  o << "| plan | predicted ms | measured ms (min-max) | step error | memory error (worst rank) | reference GEMM error | step error at the machine's current speed |\n|---|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& c : cs) {
    o << "| " << c.run << " | " << fmt("%.1f", c.predicted_step_s * 1e3) << " | " << fmt("%.1f", c.measured_step_s * 1e3) << " ("
      << fmt("%.1f", c.measured_min_s * 1e3) << "-" << fmt("%.1f", c.measured_max_s * 1e3) << ") | " << fmt("%+.1f%%", 100.0 * c.step_error())
      << " | " << fmt("%.1f%%", 100.0 * c.worst_memory_error()) << " | "
      << (c.reference_measured_s > 0 ? fmt("%+.1f%%", 100.0 * (c.reference_predicted_s / c.reference_measured_s - 1.0)) : std::string("-")) << " | "
      << (c.drift_adjusted_step_s > 0 ? fmt("%+.1f%%", 100.0 * c.drift_adjusted_error()) : std::string("-")) << " |\n";
  }
  const SuiteSummary s = summarize(cs);
  o << "\n" << s.plans << " plans: median absolute step-time error " << fmt("%.1f%%", 100.0 * s.median_abs_step_error) << ", largest "
    << fmt("%.1f%%", 100.0 * s.max_abs_step_error) << "; largest peak-memory error " << fmt("%.1f%%", 100.0 * s.worst_memory_error)
    << "; machine speed drift since calibration (reference GEMM) up to " << fmt("%.1f%%", 100.0 * s.max_abs_reference_drift)
    << "; at the machine's current speed median absolute error " << fmt("%.1f%%", 100.0 * s.median_abs_drift_adjusted_error)
    << ", largest " << fmt("%.1f%%", 100.0 * s.max_abs_drift_adjusted_error) << ".\n";
  return o.str();
}

std::string measured_trace_json(const config::RunConfig& rc, const Measured& m) {
  Json events = Json::array();
  for (const auto& r : m.ranks) {
    const Program prog = build_program(rc, r.rank);
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", r.rank}, {"args", {{"name", "rank " + std::to_string(r.rank) + " (measured)"}}}});
    for (size_t c = 0; c < kCategories; ++c) {
      events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", r.rank}, {"tid", c},
                        {"args", {{"name", to_string(static_cast<Category>(c))}}}});
    }
    for (const auto& e : r.trace) {
      std::string name = e.name < prog.names.size() ? prog.names[e.name] : "instruction " + std::to_string(e.name);
      if (e.layer >= -1) name += " L" + std::to_string(e.layer);
      if (e.microbatch >= 0) name += " mb" + std::to_string(e.microbatch);
      events.push_back({{"ph", "X"}, {"name", name}, {"pid", r.rank}, {"tid", static_cast<int>(e.category)},
                        {"ts", e.start_s * 1e6}, {"dur", e.dur_s * 1e6}});
    }
  }
  Json j;
  j["traceEvents"] = events;
  j["displayTimeUnit"] = "ms";
  return j.dump() + "\n";
}

}  // namespace stepcast::validate
