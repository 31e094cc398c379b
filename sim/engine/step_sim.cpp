#include "sim/engine/step_sim.hpp"

#include <algorithm>
#include <stdexcept>
#include <cstdio>

#include "sim/core/error.hpp"
#include "sim/engine/step_builder.hpp"
#include "sim/estimate/workload.hpp"
#include "sim/memory/ledger.hpp"

namespace stepcast::engine {

using config::Schedule;

namespace {

// Metrics read from the timeline as it runs.
class StepObserver : public Observer {
 public:
  StepObserver(const StepBuilder& b, int32_t pp, int32_t m) : b_(b), m_(m), gates_(b.dp_gates()) {
    const auto n = static_cast<size_t>(b.ranks());
    busy_.assign(n, 0);
    compute_.assign(n, 0);
    tp_.assign(n, 0);
    slowed_.assign(n, 0);
    stretched_.assign(n, 0);
    running_since_.assign(n, 0);
    pp_.assign(n, 0);
    pipe_end_.assign(n, 0);
    inflight_.assign(n, 0);
    max_inflight_.assign(n, 0);
    act_.assign(n, 0);
    peak_act_.assign(n, 0);
    wait_.assign(n, 0);
    dp_in_.assign(n, 0);
    off_in_.assign(n, 0);
    if (!gates_.empty()) {
      dp_finish_.assign(b.graph()->size(), 0);
      dp_start_.assign(b.graph()->size(), 0);
      gated_.assign(b.graph()->size(), 0);
      for (const auto& gt : gates_) gated_[gt.compute] = 1;
      other_ready_.assign(b.graph()->size(), 0);
    }
    if (b.rc().parallel.pp_rendezvous) send_start_.assign(b.graph()->size(), 0);
    v_ = static_cast<int32_t>(b.rc().parallel.vpp);
    chunk_bytes_.resize(static_cast<size_t>(pp * v_));
    chunk_w_bytes_.resize(static_cast<size_t>(pp * v_));
    chunk_kept_.resize(static_cast<size_t>(pp * v_));
    for (int32_t s = 0; s < pp; ++s) {
      for (int32_t c = 0; c < v_; ++c) {
        chunk_bytes_[static_cast<size_t>(s * v_ + c)] = b.chunk_activation_bytes(s, c);
        chunk_w_bytes_[static_cast<size_t>(s * v_ + c)] = b.chunk_weight_grad_bytes(s, c);
        chunk_kept_[static_cast<size_t>(s * v_ + c)] = memory::chunk_kept_output_bytes(b.rc(), s, c).value();
      }
    }
  }
  void on_start(const TaskGraph& g, TaskId id, Tick ready, Tick start) override {
    const Task& t = g.task(id);
    const auto r = static_cast<size_t>(t.rank);
    wait_[r] += start - ready;
    if (!dp_start_.empty() && (t.kind == TaskKind::kDpComm || t.kind == TaskKind::kHostCopy)) dp_start_[id] = start;
    if (!send_start_.empty() && t.kind == TaskKind::kPpSend) send_start_[id] = start;
    if (t.stream != Stream::kCompute) return;
    running_since_[r] = start;
    if (gates_.empty()) return;
    // ZeRO-3 / FSDP: the compute stream's idle time before this task while the data-parallel
    // collectives it waited for ran (or, for a prefetched gather, until it ended) is
    // data-parallel communication; idle time when none of them ran (a pipeline receive an
    // in-line gather waited for) stays bubble.
    spans_.clear();
    off_spans_.clear();
    // Only the idle time after the task's other inputs (a pipeline receive, the work before it
    // on the stream) were ready can be the collectives' doing.
    const Tick others = std::max(pipe_end_[r], other_ready_[id]);
    for (auto it = std::lower_bound(gates_.begin(), gates_.end(), StepBuilder::DpGate{id, 0, false});
         it != gates_.end() && it->compute == id; ++it) {
      const Tick a = it->from_idle ? others : std::max(others, dp_start_[it->dp]);
      const Tick b = std::min(start, dp_finish_[it->dp]);
      if (b > a) (it->offload ? off_spans_ : spans_).emplace_back(a, b);
    }
    // Idle time under both kinds of wait is the collectives'; activation copies take the rest.
    const Tick dp = union_length(spans_);
    dp_in_[r] += dp;
    if (!off_spans_.empty()) {
      spans_.insert(spans_.end(), off_spans_.begin(), off_spans_.end());
      off_in_[r] += union_length(spans_) - dp;
    }
  }
  void on_finish(const TaskGraph& g, TaskId id, Tick finish) override {
    const Task& t = g.task(id);
    const auto r = static_cast<size_t>(t.rank);
    if (!dp_finish_.empty()) {
      if (t.kind == TaskKind::kDpComm || t.kind == TaskKind::kHostCopy) dp_finish_[id] = finish;
      // A gated compute task's inputs other than its gating collectives.
      const auto& off = g.succ_offsets();
      const auto& succ = g.successors();
      for (uint32_t e = off[id]; e < off[id + 1]; ++e) {
        const TaskId nx = succ[e];
        if (!gated_[nx] || is_gate(nx, id)) continue;
        other_ready_[nx] = std::max(other_ready_[nx], finish);
      }
    }
    if (!send_start_.empty() && t.kind == TaskKind::kPpSend) {
      // A blocking pair: the receiving stage's compute stream is held for the transfer too.
      const auto& off = g.succ_offsets();
      const auto& succ = g.successors();
      for (uint32_t e = off[id]; e < off[id + 1]; ++e) {
        const Task& rx = g.task(succ[e]);
        if (rx.kind != TaskKind::kBarrier || !b_.is_receive(rx.name)) continue;
        const auto rr = static_cast<size_t>(rx.rank);
        pp_[rr] += finish - send_start_[id];
        busy_[rr] += finish - send_start_[id];
        pipe_end_[rr] = std::max(pipe_end_[rr], finish);
      }
    }
    const bool pipeline = t.kind == TaskKind::kForward || t.kind == TaskKind::kBackward ||
                          t.kind == TaskKind::kBackwardWeight || t.kind == TaskKind::kTpComm ||
                          (t.kind == TaskKind::kPpSend && t.stream == Stream::kCompute);
    if (pipeline && t.stream == Stream::kCompute) {
      // A task can run longer than its duration: compute slowed by communication beside it
      // (data-parallel traffic, or pipeline sends on their own stream; booked as DP cost), or
      // an exchange on the compute stream whose flows share links with others or wait for a
      // slower member's (booked as that exchange's own time).
      const bool compute = t.kind != TaskKind::kTpComm && t.kind != TaskKind::kPpSend;
      const Tick stretch = std::max<Tick>(0, finish - running_since_[r] - t.duration);
      const Tick slowed = compute ? stretch : 0;
      busy_[r] += t.duration + stretch;
      slowed_[r] += slowed;
      if (t.kind == TaskKind::kTpComm) stretched_[r] += stretch;
      (t.kind == TaskKind::kTpComm ? tp_ : t.kind == TaskKind::kPpSend ? pp_ : compute_)[r] += t.duration + (compute ? 0 : stretch);
      pipe_end_[r] = std::max(pipe_end_[r], finish);
    }
    // Activation accounting per chunk: a chunk's forward stores its activations when its first
    // layer starts storing; approximated at the chunk's first forward op, released at the end of
    // its backward (first/last ops identified by the builder).
    if (t.microbatch < 0) return;
    const size_t k = static_cast<size_t>(t.chunk) * static_cast<size_t>(m_) + static_cast<size_t>(t.microbatch);
    if (t.kind == TaskKind::kForward && b_.forward_passes()[r][k].first == id) {
      ++inflight_[r];
      max_inflight_[r] = std::max(max_inflight_[r], inflight_[r]);
      // An output the runtime keeps until the step ends (keep_step_outputs) is never released.
      const auto ci = static_cast<size_t>(b_.stage_of(t.rank) * v_ + t.chunk);
      act_[r] += chunk_bytes_[ci] + chunk_kept_[ci];
      peak_act_[r] = std::max(peak_act_[r], act_[r]);
    }
    if ((t.kind == TaskKind::kBackward || t.kind == TaskKind::kTpComm || t.kind == TaskKind::kPpSend) &&
        !b_.backward_passes()[r].empty() && b_.backward_passes()[r][k].last_compute == id) {
      // A split backward (ZB-H1, ZB-V, most of DualPipeV's cool-down) keeps the weight-gradient
      // inputs until its W pass.
      const auto& pass = b_.backward_passes()[r][k];
      const auto ci = static_cast<size_t>(b_.stage_of(t.rank) * v_ + t.chunk);
      --inflight_[r];
      act_[r] += (pass.whole_backward ? 0.0 : chunk_w_bytes_[ci]) - chunk_bytes_[ci];
      peak_act_[r] = std::max(peak_act_[r], act_[r]);
    }
    if (t.kind == TaskKind::kBackwardWeight && !b_.weight_passes().empty() && b_.weight_passes()[r][k].last_compute == id) {
      act_[r] -= chunk_w_bytes_[static_cast<size_t>(b_.stage_of(t.rank) * v_ + t.chunk)];
    }
  }

  std::vector<Tick> busy_, compute_, tp_, pp_, slowed_, stretched_, running_since_, pipe_end_, wait_;
  std::vector<Tick> dp_in_;   // compute-stream time waiting for ZeRO-3 / FSDP collectives
  std::vector<Tick> off_in_;  // compute-stream time waiting for activation copies (offload)
  std::vector<int64_t> inflight_, max_inflight_;
  std::vector<double> act_, peak_act_;

 private:
  const StepBuilder& b_;
  int32_t m_ = 1, v_ = 1;
  std::vector<double> chunk_bytes_, chunk_w_bytes_, chunk_kept_;  // [stage * vpp + chunk]
  [[nodiscard]] bool is_gate(TaskId compute, TaskId dp) const {
    return std::binary_search(gates_.begin(), gates_.end(), StepBuilder::DpGate{compute, dp, false});
  }
  const std::vector<StepBuilder::DpGate>& gates_;  // sorted by compute task
  std::vector<uint8_t> gated_;                     // per task: has gating collectives
  std::vector<Tick> other_ready_;                  // per gated task: when its other inputs were ready
  std::vector<Tick> dp_start_, dp_finish_;         // start and finish of each data-parallel task or host copy (gated runs)
  std::vector<Tick> send_start_;                   // start of each pipeline send (blocking pairs only)
  std::vector<std::pair<Tick, Tick>> spans_;       // scratch: a task's gating collectives inside its idle time
  std::vector<std::pair<Tick, Tick>> off_spans_;   // scratch: its gating activation copies

  // Total length of a set of intervals (sorted in place), overlaps counted once.
  static Tick union_length(std::vector<std::pair<Tick, Tick>>& spans) {
    std::sort(spans.begin(), spans.end());
    Tick covered_to = 0, total = 0;
    for (const auto& [a, b] : spans) {
      const Tick from = std::max(a, covered_to);
      if (b > from) total += b - from;
      covered_to = std::max(covered_to, b);
    }
    return total;
  }
};

}  // namespace

namespace {
SimResult simulate_step_checked(const config::RunConfig& rc, const SimOptions& opt);
}  // namespace

SimResult simulate_step(const config::RunConfig& rc, const SimOptions& opt) {
  // A step's graph holds every micro-batch of every layer; size it before building (a bound of
  // 64 operators per layer and micro-batch on the one rank per stage simulated; most layers
  // build fewer) and refuse what would not fit in memory.
  const double symmetric = 64.0 * static_cast<double>(rc.num_microbatches) * static_cast<double>(rc.model.num_layers);
  if (opt.max_tasks > 0 && symmetric > static_cast<double>(opt.max_tasks)) {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "the step has %lld micro-batches of %lld layers, up to %.3g million operators to simulate, over the limit of %.3g "
                  "million; reduce training.global_batch_size or raise micro_batch_size (or the limit, --max-tasks)",
                  static_cast<long long>(rc.num_microbatches), static_cast<long long>(rc.model.num_layers), symmetric / 1e6,
                  static_cast<double>(opt.max_tasks) / 1e6);
    throw core::UserError(buf);
  }
  try {
    return simulate_step_checked(rc, opt);
  } catch (const std::range_error& e) {
    throw core::UserError(std::string("the step cannot be simulated: ") + e.what() +
                          "; check the run file's sizes (model, batch), the hardware profile's rates and times (efficiency, "
                          "network) and the scenario's times");
  }
}

namespace {

SimResult simulate_step_checked(const config::RunConfig& rc, const SimOptions& opt) {
  const bool full = opt.full || rc.scenario.present;
  if (full && opt.max_tasks > 0) {
    // Size the all-ranks graph from the symmetric one before building it (about 100 bytes
    // of memory per task), and refuse clearly rather than run out of memory.
    StepBuilder probe(rc, false, opt.ideal, opt.compute_scale);
    probe.build();
    const double per_stage = static_cast<double>(rc.parallel.tp * rc.parallel.cp * rc.parallel.dp);
    const double estimate = static_cast<double>(probe.graph()->size()) * per_stage;
    if (estimate > static_cast<double>(opt.max_tasks)) {
      char buf[320];
      std::snprintf(buf, sizeof buf,
                    "simulating every rank needs about %.3g million tasks (~%.3g GiB), over the limit of %.3g million; "
                    "drop the scenario to simulate one rank per stage, or raise the limit",
                    estimate / 1e6, estimate * 100.0 / 1073741824.0, static_cast<double>(opt.max_tasks) / 1e6);
      throw core::UserError(buf);
    }
  }
  StepBuilder b(rc, full, opt.ideal, opt.compute_scale);
  if (opt.progress) opt.progress("building", 0.0);
  b.build();
  auto graph = b.graph();
  Engine eng(*graph);
  if (opt.progress) {
    opt.progress("simulating", 0.0);
    eng.set_progress([&](double f) { opt.progress("simulating", f); });
  }
  StepObserver obs(b, static_cast<int32_t>(rc.parallel.pp), static_cast<int32_t>(rc.num_microbatches));
  eng.add_observer(&obs);
  const RunStats stats = eng.run();
  // Picosecond ticks wrap past 106 days; a step that long is not a training step.
  if (stats.makespan < 0) throw std::range_error("the step would last longer than the simulator's range of 106 days");

  SimResult out;
  out.full = full;
  out.events = stats.events;
  out.tasks = graph->size();
  out.ranks_simulated = b.ranks();
  const int64_t pp = rc.parallel.pp;
  out.stages.assign(static_cast<size_t>(pp), StageStats{});
  out.rank_wait_s.resize(static_cast<size_t>(b.ranks()));
  for (const Tick w : eng.kernel_waits()) out.kernel_wait_s += to_seconds(w);
  for (int64_t r = 0; r < b.ranks(); ++r) {
    const auto ri = static_cast<size_t>(r);
    const double w = to_seconds(obs.wait_[ri]);
    out.rank_wait_s[ri] = w;
    out.collective_wait_s += w;
    out.max_rank_wait_s = std::max(out.max_rank_wait_s, w);
    auto& st = out.stages[static_cast<size_t>(b.stage_of(r))];
    if (to_seconds(obs.busy_[ri]) >= st.busy_s) {
      // The stage's busiest rank sets its pace; report its split.
      st.compute_s = to_seconds(obs.compute_[ri]);
      st.tp_comm_s = to_seconds(obs.tp_[ri]);
      st.pp_comm_s = to_seconds(obs.pp_[ri]);
      st.slowed_s = to_seconds(obs.slowed_[ri]);
      st.comm_stretch_s = to_seconds(obs.stretched_[ri]);
      st.dp_wait_s = to_seconds(obs.dp_in_[ri]);
      st.offload_wait_s = to_seconds(obs.off_in_[ri]);
    }
    st.busy_s = std::max(st.busy_s, to_seconds(obs.busy_[ri]));
    st.pipeline_end_s = std::max(st.pipeline_end_s, to_seconds(obs.pipe_end_[ri]));
    st.max_inflight = std::max<int64_t>(st.max_inflight, obs.max_inflight_[ri]);
    st.peak_activation_bytes = std::max(st.peak_activation_bytes, obs.peak_act_[ri]);
  }
  const auto& ledger = b.ledger();
  for (int64_t s = 0; s < pp; ++s) {
    auto& st = out.stages[static_cast<size_t>(s)];
    const auto& ls = ledger.stages[static_cast<size_t>(s)];
    st.peak_memory_bytes = (ls.resident() - ls.activations - ls.kept_outputs).value() + st.peak_activation_bytes +
                           std::max(ls.transient, ls.logits).value();
    if (st.peak_memory_bytes > out.memory_timeline_peak_bytes) {
      out.memory_timeline_peak_bytes = st.peak_memory_bytes;
      out.memory_peak_stage = s;
    }
  }

  // Output contract from the timeline.
  auto& e = out.step;
  e.memory = ledger;
  e.step_time_s = to_seconds(stats.makespan);
  double span = 0;
  size_t crit = 0;
  for (size_t s = 0; s < out.stages.size(); ++s) {
    span = std::max(span, out.stages[s].pipeline_end_s);
    if (out.stages[s].busy_s > out.stages[crit].busy_s) crit = s;
  }
  e.pipeline_time_s = span;
  // Idle time inside the pipeline that is not the ZeRO-3 / FSDP or activation-copy wait is the
  // bubble.
  const double bubble = std::max(0.0, span - out.stages[crit].busy_s - out.stages[crit].dp_wait_s - out.stages[crit].offload_wait_s);
  e.bubble_fraction = span > 0 ? bubble / span : 0.0;
  const double tokens = static_cast<double>(rc.tokens_per_step());
  const double gpus = static_cast<double>(rc.cluster.num_gpus);
  e.tokens_per_s = tokens / e.step_time_s;
  e.tokens_per_s_per_gpu = e.tokens_per_s / gpus;
  e.model_flops_per_step = estimate::model_flops_per_step(rc);
  const double peak = rc.hardware.peak_for(rc.training.precision).value();
  e.mfu = e.model_flops_per_step / (e.step_time_s * gpus * peak);
  e.tflops_per_gpu = e.model_flops_per_step / (e.step_time_s * gpus) / 1e12;

  // Breakdown on the critical stage: compute and TP comm from the tasks it ran.
  const auto& ls = ledger.stages[crit];
  const estimate::StageCost sc = estimate::stage_cost(rc, b.workload(), static_cast<int64_t>(crit));
  const double rec = sc.recompute, tp = sc.tp, cp = sc.cp, ep = sc.ep, compute = sc.compute;
  e.hfu = e.mfu * (sc.model_flops > 0 ? sc.hardware_flops / sc.model_flops : 1.0);
  auto& br = e.breakdown;
  // Compute, exposed TP/CP/EP and pipeline-send time as the critical stage ran them; the
  // recompute share and the TP/CP/EP split follow the workload's proportions.
  const auto& cs = out.stages[crit];
  br.compute = cs.compute_s;
  br.recompute = compute > 0 ? cs.compute_s * rec / compute : 0.0;
  br.host = compute > 0 ? cs.compute_s * sc.host / compute : 0.0;
  // The time the exchanges lost sharing links goes to the kinds whose traffic crosses the NIC
  // (all of them in proportion when none does: a degraded or shared node link).
  const double comm = tp + cp + ep, nic = sc.tp_nic + sc.cp_nic + sc.ep_nic;
  const double unshared = cs.tp_comm_s - cs.comm_stretch_s;
  auto share = [&](double kind, double kind_nic) {
    if (comm <= 0) return 0.0;
    return unshared * kind / comm + cs.comm_stretch_s * (nic > 0 ? kind_nic / nic : kind / comm);
  };
  br.exposed_comm["tp"] = share(tp, sc.tp_nic);
  br.exposed_comm["cp"] = share(cp, sc.cp_nic);
  br.exposed_comm["ep"] = share(ep, sc.ep_nic);
  br.exposed_comm["pp"] = cs.pp_comm_s;
  br.exposed_comm["offload"] = cs.offload_wait_s;
  br.bubble = bubble;
  br.optimizer = estimate::optimizer_time_s(rc, ls);
  // DP: the tail after the pipeline, the compute its traffic (and overlapped sends) slowed, and
  // the pipeline's waits for ZeRO-3 / FSDP collectives.
  br.exposed_comm["dp"] = std::max(0.0, e.step_time_s - span - br.optimizer) + cs.slowed_s + cs.dp_wait_s;
  e.stage_fwd_s.assign(static_cast<size_t>(pp), 0);
  e.stage_bwd_s.assign(static_cast<size_t>(pp), 0);

  if (opt.keep_timeline) {
    out.graph = graph;
    out.start = eng.start_times();
    out.finish = eng.finish_times();
    out.rank_ids.resize(static_cast<size_t>(b.ranks()));
    for (int64_t r = 0; r < b.ranks(); ++r) out.rank_ids[static_cast<size_t>(r)] = b.global_rank(r);
  }
  return out;
}

}  // namespace

namespace {

void append_us(std::string& out, Tick t) {
  // Microseconds with picosecond resolution, printed exactly.
  const Tick us = t / 1'000'000, rem = t % 1'000'000;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%lld.%06lld", static_cast<long long>(us), static_cast<long long>(rem));
  out += buf;
}

}  // namespace

std::string trace_json(const config::RunConfig& rc, const SimResult& r, const std::vector<int64_t>& only_ranks, bool operators) {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  if (!r.graph) return out + "]}\n";
  std::unique_ptr<estimate::WorkloadBuilder> ops_wb;
  if (operators) ops_wb = std::make_unique<estimate::WorkloadBuilder>(rc);
  const bool split_w = rc.parallel.split_backward();
  const TaskGraph& g = *r.graph;
  const int64_t per_stage = r.full ? rc.parallel.tp * rc.parallel.cp * rc.parallel.dp : 1;
  std::vector<char> keep(r.rank_ids.size(), only_ranks.empty() ? 1 : 0);
  for (size_t i = 0; i < r.rank_ids.size(); ++i) {
    for (int64_t want : only_ranks) {
      if (r.rank_ids[i] == want) keep[i] = 1;
    }
  }
  bool first = true;
  auto sep = [&]() {
    if (!first) out += ",\n";
    first = false;
  };
  for (size_t i = 0; i < r.rank_ids.size(); ++i) {
    if (!keep[i]) continue;
    sep();
    out += "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + std::to_string(r.rank_ids[i]) +
           ",\"args\":{\"name\":\"rank " + std::to_string(r.rank_ids[i]) + " (stage " +
           std::to_string(static_cast<int64_t>(i) / per_stage) + ")\"}}";
    for (int sidx = 0; sidx < static_cast<int>(Stream::kCount); ++sidx) {
      sep();
      out += "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + std::to_string(r.rank_ids[i]) +
             ",\"tid\":" + std::to_string(sidx) + ",\"args\":{\"name\":\"" + to_string(static_cast<Stream>(sidx)) + "\"}}";
    }
  }
  const int64_t L = rc.model.num_layers;
  for (TaskId id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    if (!keep[static_cast<size_t>(t.rank)]) continue;
    if (t.duration == 0 && t.kind != TaskKind::kBarrier) continue;
    // A blocking pair's receive (parallel.pp_rendezvous) spans from its ready marker, added just
    // before it, to the transfer's end: the time the stage waited for its neighbour and the data.
    Tick from = r.start[id];
    if (t.kind == TaskKind::kBarrier && t.duration == 0 && t.microbatch >= 0) {
      const std::string& marker = g.name(t.name);
      if (marker == "ready to receive") continue;
      if ((marker == "receive activation" || marker == "receive gradient") && id > 0) from = r.finish[id - 1];
    }
    std::string name;
    if (t.layer == -1 && t.microbatch >= 0 && (t.kind == TaskKind::kForward || t.kind == TaskKind::kBackward)) {
      name = "embedding ";
    } else if (t.layer == L) {
      name = "output+loss ";
    } else if (t.layer >= 0) {
      name = "L" + std::to_string(t.layer) + " ";
    }
    name += g.name(t.name);
    if (t.microbatch >= 0) name += " mb" + std::to_string(t.microbatch);
    if (rc.parallel.vpp > 1 && t.microbatch >= 0) name += " c" + std::to_string(t.chunk);
    sep();
    out += "{\"ph\":\"X\",\"name\":\"" + name + "\",\"cat\":\"" + to_string(t.kind) + "\",\"pid\":" +
           std::to_string(r.rank_ids[static_cast<size_t>(t.rank)]) + ",\"tid\":" +
           std::to_string(static_cast<int>(t.stream)) + ",\"ts\":";
    append_us(out, from);
    // What the task took on the timeline: longer than its own duration when communication
    // beside it slowed a compute task or concurrent flows shared its link (a collective over
    // flows runs from its last member's arrival until its slowest member is done).
    const Tick took = r.finish[id] - from;
    out += ",\"dur\":";
    append_us(out, took);
    out += "}";
    if (ops_wb && (t.kind == TaskKind::kForward || t.kind == TaskKind::kBackward || t.kind == TaskKind::kBackwardWeight)) {
      // Nested operator slices: the layer's compute operators in order, scaled to the task's
      // time on the timeline (which includes slowdowns, jitter and sequence-length scaling).
      const estimate::LayerCost& lc = t.layer == -1  ? ops_wb->embedding()
                                      : t.layer == L ? ops_wb->output_layer()
                                                     : ops_wb->layer(t.layer);
      const auto& list = t.kind == TaskKind::kForward ? lc.fwd : lc.bwd;
      // The task's own operators: no communication; a deferred weight-gradient task holds the
      // weight-gradient GEMMs, its backward the rest.
      auto in_task = [&](const estimate::Op& o) {
        return o.kind != estimate::OpKind::kComm &&
               (t.kind == TaskKind::kBackwardWeight ? o.weight_grad
                                                    : !(split_w && t.kind == TaskKind::kBackward && o.weight_grad));
      };
      double total = 0;
      for (const auto& o : list) {
        if (in_task(o)) total += o.time.value();
      }
      Tick at = r.start[id];
      for (const auto& o : list) {
        if (!in_task(o) || total <= 0) continue;
        const auto dur = static_cast<Tick>(static_cast<double>(took) * o.time.value() / total);
        sep();
        out += "{\"ph\":\"X\",\"name\":\"" + o.name + "\",\"cat\":\"op\",\"pid\":" +
               std::to_string(r.rank_ids[static_cast<size_t>(t.rank)]) + ",\"tid\":" +
               std::to_string(static_cast<int>(t.stream)) + ",\"ts\":";
        append_us(out, at);
        out += ",\"dur\":";
        append_us(out, dur);
        out += "}";
        at += dur;
      }
    }
  }
  out += "\n]}\n";
  return out;
}

}  // namespace stepcast::engine
