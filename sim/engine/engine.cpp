#include "sim/engine/engine.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace stepcast::engine {

void Engine::push(Tick t, EventType type, TaskId id, uint32_t version) {
  queue_.push(Event{t, seq_++, type, id, version});
}

void Engine::start(TaskId id, Tick ready, Tick at) {
  start_[id] = at;
  for (auto* o : observers_) o->on_start(g_, id, ready, at);
  const uint32_t r = g_.task(id).resource;
  if (r == kNone) {
    push(at + g_.task(id).duration, EventType::kFinish, id);
    return;
  }
  reshare(r, at);
  res_[r].tasks.push_back(id);
  res_[r].remaining.push_back(static_cast<double>(g_.task(id).duration));
  reshare(r, at);
}

void Engine::reshare(uint32_t r, Tick now) {
  auto& a = res_[r];
  const double k = static_cast<double>(a.tasks.size());
  if (k > 0) {
    const double done = static_cast<double>(now - a.last) / k;
    for (double& x : a.remaining) x = std::max(0.0, x - done);
  }
  a.last = now;
  for (size_t i = 0; i < a.tasks.size(); ++i) {
    const TaskId t = a.tasks[i];
    const auto left = static_cast<Tick>(std::ceil(a.remaining[i] * k - 1e-9));
    push(now + std::max<Tick>(0, left), EventType::kFinish, t, ++version_[t]);
  }
}

RunStats Engine::run() {
  g_.finalize();
  const size_t n = g_.size();
  start_.assign(n, -1);
  finish_.assign(n, -1);
  ready_.assign(n, -1);
  pending_ = g_.dep_counts();
  res_.assign(g_.num_resources(), ActiveResource{});
  version_.assign(n, 0);
  size_t ncoll = 0;
  for (const auto& t : g_.tasks()) {
    if (t.collective != kNone) ncoll = std::max<size_t>(ncoll, t.collective + 1);
  }
  arrived_.assign(ncoll, 0);
  last_arrival_.assign(ncoll, 0);
  waiting_.assign(ncoll, {});
  for (TaskId i = 0; i < n; ++i) {
    if (pending_[i] == 0) push(0, EventType::kReady, i);
  }
  RunStats stats;
  const auto& off = g_.succ_offsets();
  const auto& succ = g_.successors();
  while (!queue_.empty()) {
    const Event ev = queue_.top();
    queue_.pop();
    ++stats.events;
    const Task& t = g_.task(ev.task);
    if (ev.type == EventType::kReady) {
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
    } else {
      if (ev.version != version_[ev.task]) continue;  // superseded by a re-share
      if (t.resource != kNone) {
        auto& a = res_[t.resource];
        reshare(t.resource, ev.time);
        const auto it = std::find(a.tasks.begin(), a.tasks.end(), ev.task);
        const auto idx = static_cast<size_t>(it - a.tasks.begin());
        a.tasks.erase(it);
        a.remaining.erase(a.remaining.begin() + static_cast<long>(idx));
        ++version_[ev.task];
        reshare(t.resource, ev.time);
      }
      finish_[ev.task] = ev.time;
      stats.makespan = std::max(stats.makespan, ev.time);
      ++stats.tasks_run;
      if (progress_ && stats.tasks_run % progress_every_ == 0) progress_(static_cast<double>(stats.tasks_run) / static_cast<double>(n));
      for (auto* o : observers_) o->on_finish(g_, ev.task, ev.time);
      for (uint32_t k = off[ev.task]; k < off[ev.task + 1]; ++k) {
        const TaskId s = succ[k];
        if (--pending_[s] == 0) push(ev.time, EventType::kReady, s);
      }
    }
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
