#include "sim/engine/engine.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace stepcast::engine {

void Engine::push(Tick t, EventType type, TaskId id, uint32_t version) {
  queue_.push(Event{t, seq_++, type, id, version});
}

namespace {
// The time `ticks` after `now`, refused (std::range_error, which the step simulation turns into
// a user error) when it would pass the clock's range instead of wrapping.
Tick after(Tick now, double ticks) {
  const double room = static_cast<double>(std::numeric_limits<Tick>::max() - now);
  if (!(ticks <= room * 0.999)) throw std::range_error("the step would last longer than the simulator's range of 106 days");
  return now + static_cast<Tick>(std::max(0.0, ticks));
}
}  // namespace

bool Engine::is_compute(const Task& t) {
  return t.stream == Stream::kCompute && t.collective == kNone && t.flow == kNone &&
         (t.kind == TaskKind::kForward || t.kind == TaskKind::kBackward || t.kind == TaskKind::kBackwardWeight ||
          t.kind == TaskKind::kOptimizer);
}

// Communication that runs beside compute: gradient reductions and parameter gathers on the DP
// streams, and pipeline sends on their own stream. Communication on the compute stream blocks
// it, so nothing runs beside it.
bool Engine::slows_compute(const Task& t) {
  return t.stream != Stream::kCompute && t.duration > 0 && (t.kind == TaskKind::kDpComm || t.kind == TaskKind::kPpSend);
}

bool Engine::waits_for_kernel(const Task& t) {
  return t.kind == TaskKind::kDpComm && t.stream != Stream::kCompute && t.duration > 0;
}

Tick Engine::kernel_wait(const Task& comm, Tick now) const {
  const auto r = static_cast<size_t>(comm.rank);
  const TaskId c = on_compute_[r];
  if (c == kNone || g_.task(c).kernel == 0) return 0;
  const Task& ct = g_.task(c);
  // The kernel's length and the task's time left at the rate it runs now (slowed while
  // communication runs beside it).
  double kernel = g_.kernel_share(ct.kernel) * static_cast<double>(ct.duration);
  double left = static_cast<double>(start_[c] + ct.duration - now);
  if (share_ > 0) {
    kernel /= compute_[r].rate;
    left = compute_[r].left / compute_[r].rate - static_cast<double>(now - compute_[r].last);
  }
  const double n = comm.collective != kNone ? static_cast<double>(g_.collective(comm.collective).group) : 1.0;
  // The participants' kernels are in different phases: the last of n to get its SMs waits
  // n / (n + 1) of a kernel on average. No longer than the compute task still runs.
  return static_cast<Tick>(std::clamp(kernel * n / (n + 1.0), 0.0, std::max(0.0, left)));
}

void Engine::rerate(int32_t rank, Tick now) {
  RunningCompute& c = compute_[static_cast<size_t>(rank)];
  if (c.task == kNone) return;
  c.left = std::max(0.0, c.left - c.rate * static_cast<double>(now - c.last));
  c.last = now;
  c.rate = comm_active_[static_cast<size_t>(rank)] > 0 ? 1.0 - share_ : 1.0;
  push(after(now, std::ceil(c.left / c.rate - 1e-6)), EventType::kFinish, c.task, ++version_[c.task]);
}

void Engine::start(TaskId id, Tick ready, Tick at) {
  start_[id] = at;
  for (auto* o : observers_) o->on_start(g_, id, ready, at);
  const Task& t = g_.task(id);
  if (kernel_waits_ && is_compute(t)) on_compute_[static_cast<size_t>(t.rank)] = id;
  if (share_ > 0) {
    const auto r = static_cast<size_t>(t.rank);
    if (is_compute(t)) {
      compute_[r] = RunningCompute{id, static_cast<double>(t.duration), 1.0, at};
      rerate(t.rank, at);
      return;
    }
    if (slows_compute(t) && comm_active_[r]++ == 0) rerate(t.rank, at);
  }
  if (t.flow == kNone) {
    push(after(at, static_cast<double>(t.duration)), EventType::kFinish, id);
    return;
  }
  const Flow& f = g_.flow(t.flow);
  flows_[t.flow] = ActiveFlow{f.bytes, 0.0, at};
  for (uint32_t i = 0; i < f.num_links; ++i) link_tasks_[f.links[i]].push_back(id);
  reshare(f.links, f.num_links, at);
}

// Max-min fairness by progressive filling over one connected component of links and flows:
// raise every unfrozen flow's rate together; a flow freezes at its own maximum rate or when a
// link it crosses runs out of capacity (then every flow on that link freezes at the level).
void Engine::reshare(const uint32_t* seed_links, uint32_t count, Tick now) {
  ++stamp_;
  auto& links = scratch_links_;
  auto& comp = scratch_comp_;
  links.assign(seed_links, seed_links + count);
  comp.clear();
  for (size_t i = 0; i < links.size(); ++i) {
    link_mark_[links[i]] = stamp_;
    link_slot_[links[i]] = static_cast<uint32_t>(i);
  }
  for (size_t i = 0; i < links.size(); ++i) {
    for (TaskId t : link_tasks_[links[i]]) {
      const uint32_t fi = g_.task(t).flow;
      if (flow_mark_[fi] == stamp_) continue;
      flow_mark_[fi] = stamp_;
      comp.push_back(t);
      const Flow& f = g_.flow(fi);
      for (uint32_t k = 0; k < f.num_links; ++k) {
        if (link_mark_[f.links[k]] != stamp_) {
          link_mark_[f.links[k]] = stamp_;
          link_slot_[f.links[k]] = static_cast<uint32_t>(links.size());
          links.push_back(f.links[k]);
        }
      }
    }
  }
  if (comp.empty()) return;
  // Bring the component's flows up to now.
  for (TaskId t : comp) {
    ActiveFlow& a = flows_[g_.task(t).flow];
    a.remaining = std::max(0.0, a.remaining - a.rate * static_cast<double>(now - a.last));
    a.last = now;
    a.rate = -1.0;  // unfrozen
  }
  // Progressive filling. Rates in bytes per tick.
  const double per_tick = 1.0 / static_cast<double>(kTicksPerSecond);
  auto& left = scratch_left_;
  auto& users = scratch_users_;
  left.resize(links.size());
  users.assign(links.size(), 0);
  for (size_t i = 0; i < links.size(); ++i) left[i] = g_.link(links[i]).capacity * per_tick;
  for (TaskId t : comp) {
    const Flow& f = g_.flow(g_.task(t).flow);
    for (uint32_t k = 0; k < f.num_links; ++k) ++users[link_slot_[f.links[k]]];
  }
  double level = 0;
  size_t unfrozen = comp.size();
  while (unfrozen > 0) {
    // The next level at which something freezes: a link's remaining capacity spread over its
    // unfrozen flows, or an unfrozen flow's own maximum.
    double next = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < links.size(); ++i) {
      if (users[i] > 0) next = std::min(next, level + left[i] / static_cast<double>(users[i]));
    }
    for (size_t j = 0; j < comp.size(); ++j) {
      if (flows_[g_.task(comp[j]).flow].rate < 0) next = std::min(next, g_.flow(g_.task(comp[j]).flow).max_rate * per_tick);
    }
    const double step = next - level;
    for (size_t i = 0; i < links.size(); ++i) left[i] -= step * static_cast<double>(users[i]);
    level = next;
    for (size_t j = 0; j < comp.size(); ++j) {
      ActiveFlow& a = flows_[g_.task(comp[j]).flow];
      if (a.rate >= 0) continue;
      const Flow& f = g_.flow(g_.task(comp[j]).flow);
      bool freeze = f.max_rate * per_tick <= level * (1.0 + 1e-12);
      for (uint32_t k = 0; k < f.num_links && !freeze; ++k) {
        const uint32_t li = link_slot_[f.links[k]];
        freeze = left[li] <= 1e-12 * g_.link(links[li]).capacity * per_tick;
      }
      if (!freeze) continue;
      a.rate = level;
      --unfrozen;
      for (uint32_t k = 0; k < f.num_links; ++k) --users[link_slot_[f.links[k]]];
    }
  }
  for (TaskId t : comp) {
    const ActiveFlow& a = flows_[g_.task(t).flow];
    push(after(now, std::ceil(a.remaining / a.rate - 1e-6)), EventType::kFinish, t, ++version_[t]);
  }
}

void Engine::complete(TaskId id, Tick now, RunStats& stats) {
  finish_[id] = now;
  if (kernel_waits_) {
    TaskId& running = on_compute_[static_cast<size_t>(g_.task(id).rank)];
    if (running == id) running = kNone;
  }
  if (share_ > 0) {
    const Task& t = g_.task(id);
    const auto r = static_cast<size_t>(t.rank);
    if (is_compute(t)) compute_[r].task = kNone;
    if (slows_compute(t) && --comm_active_[r] == 0) rerate(t.rank, now);
  }
  stats.makespan = std::max(stats.makespan, now);
  ++stats.tasks_run;
  if (progress_ && stats.tasks_run % progress_every_ == 0) progress_(static_cast<double>(stats.tasks_run) / static_cast<double>(g_.size()));
  for (auto* o : observers_) o->on_finish(g_, id, now);
  const auto& off = g_.succ_offsets();
  const auto& succ = g_.successors();
  for (uint32_t k = off[id]; k < off[id + 1]; ++k) {
    const TaskId s = succ[k];
    if (--pending_[s] == 0) push(now, EventType::kReady, s);
  }
}

RunStats Engine::run() {
  g_.finalize();
  const size_t n = g_.size();
  start_.assign(n, -1);
  finish_.assign(n, -1);
  ready_.assign(n, -1);
  pending_ = g_.dep_counts();
  version_.assign(n, 0);
  share_ = std::clamp(g_.comm_compute_share(), 0.0, 0.9);
  compute_.assign(static_cast<size_t>(g_.num_ranks()), RunningCompute{});
  kernel_waits_ = g_.comm_waits_for_kernels();
  on_compute_.assign(kernel_waits_ ? static_cast<size_t>(g_.num_ranks()) : 0, kNone);
  gated_.assign(kernel_waits_ ? n : 0, 0);
  kernel_wait_.assign(kernel_waits_ ? static_cast<size_t>(g_.num_ranks()) : 0, 0);
  comm_active_.assign(static_cast<size_t>(g_.num_ranks()), 0);
  size_t nflows = 0;
  size_t ncoll = 0;
  for (const auto& t : g_.tasks()) {
    if (t.collective != kNone) ncoll = std::max<size_t>(ncoll, t.collective + 1);
    if (t.flow != kNone) nflows = std::max<size_t>(nflows, t.flow + 1);
  }
  flows_.assign(nflows, ActiveFlow{});
  flow_mark_.assign(nflows, 0);
  link_tasks_.assign(g_.num_links(), {});
  link_mark_.assign(g_.num_links(), 0);
  link_slot_.assign(g_.num_links(), 0);
  arrived_.assign(ncoll, 0);
  last_arrival_.assign(ncoll, 0);
  waiting_.assign(ncoll, {});
  coll_done_.assign(ncoll, 0);
  coll_parked_.assign(ncoll, {});
  coll_flows_.assign(ncoll, 0);
  for (const auto& t : g_.tasks()) {
    if (t.collective != kNone && t.flow != kNone) coll_flows_[t.collective] = 1;
  }
  for (TaskId i = 0; i < n; ++i) {
    if (pending_[i] == 0) push(0, EventType::kReady, i);
  }
  RunStats stats;
  while (!queue_.empty()) {
    const Event ev = queue_.top();
    queue_.pop();
    ++stats.events;
    const Task& t = g_.task(ev.task);
    if (ev.type == EventType::kGate) {
      // Processed after the tasks made ready at the same time (a compute task that starts as
      // the collective's input is final holds the SMs first).
      gated_[ev.task] = 1;
      const Tick wait = kernel_wait(t, ev.time);
      kernel_wait_[static_cast<size_t>(t.rank)] += wait;
      push(after(ev.time, static_cast<double>(wait)), EventType::kReady, ev.task);
      continue;
    }
    if (ev.type == EventType::kReady) {
      if (kernel_waits_ && gated_[ev.task] == 0 && waits_for_kernel(t)) {
        push(ev.time, EventType::kGate, ev.task);
        continue;
      }
      ready_[ev.task] = ev.time;
      if (t.collective == kNone) {
        start(ev.task, ev.time, ev.time);
        continue;
      }
      const uint32_t c = t.collective;
      waiting_[c].push_back(ev.task);
      last_arrival_[c] = std::max(last_arrival_[c], ev.time);
      if (++arrived_[c] == g_.collective(c).participants) {
        // The last participant arrived: everyone starts now, in arrival order.
        for (TaskId p : waiting_[c]) start(p, ready_[p], last_arrival_[c]);
        waiting_[c].clear();
        waiting_[c].shrink_to_fit();
      }
      continue;
    }
    if (ev.version != version_[ev.task]) continue;  // superseded by a re-share
    if (t.flow != kNone) {
      // The flow has moved its bytes: leave its links and re-share what it used.
      const Flow& f = g_.flow(t.flow);
      flows_[t.flow].remaining = 0;
      for (uint32_t i = 0; i < f.num_links; ++i) {
        auto& lt = link_tasks_[f.links[i]];
        lt.erase(std::find(lt.begin(), lt.end(), ev.task));
      }
      ++version_[ev.task];
      reshare(f.links, f.num_links, ev.time);
    }
    if (t.collective != kNone && coll_flows_[t.collective] != 0) {
      // A collective over flows ends for everyone when its slowest participant is done.
      const uint32_t c = t.collective;
      coll_parked_[c].push_back(ev.task);
      if (++coll_done_[c] < g_.collective(c).participants) continue;
      for (TaskId p : coll_parked_[c]) complete(p, ev.time, stats);
      coll_parked_[c].clear();
      coll_parked_[c].shrink_to_fit();
      continue;
    }
    complete(ev.task, ev.time, stats);
  }
  if (stats.tasks_run != n) {
    for (TaskId i = 0; i < n; ++i) {
      if (finish_[i] < 0) {
        const Task& t = g_.task(i);
        std::string why = pending_[i] > 0 ? "waits on " + std::to_string(pending_[i]) + " unfinished dependencies"
                                          : "waits for collective participants";
        throw std::runtime_error("simulation deadlock: task '" + g_.name(t.name) + "' on rank " +
                                 std::to_string(t.rank) + " (" + to_string(t.stream) + ") " + why);
      }
    }
  }
  return stats;
}

}  // namespace stepcast::engine
