// stepcast event engine: runs a TaskGraph in simulated time.
//
// Events are typed (a task becomes ready, a task finishes) and ordered by (time, sequence
// number); the sequence number is the insertion order, so ties resolve the same way on every
// run and the result is deterministic. There is no global state: an Engine owns its queue and
// per-run arrays. Observers see every start and finish (metrics, memory timeline, traces).
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

#include "sim/engine/task_graph.hpp"

namespace stepcast::engine {

enum class EventType : uint8_t { kReady, kFinish };

struct Event {
  Tick time = 0;
  uint64_t seq = 0;
  EventType type = EventType::kReady;
  TaskId task = 0;
  uint32_t version = 0;  // finish events of tasks on shared resources are re-issued on changes
};

struct EventLater {
  bool operator()(const Event& a, const Event& b) const {
    return a.time != b.time ? a.time > b.time : a.seq > b.seq;
  }
};

class Observer {
 public:
  virtual ~Observer() = default;
  // ready: when the task's own dependencies were met; start > ready for collectives whose
  // other participants arrived later (the difference is collective wait).
  virtual void on_start(const TaskGraph& /*g*/, TaskId /*id*/, Tick /*ready*/, Tick /*start*/) {}
  virtual void on_finish(const TaskGraph& /*g*/, TaskId /*id*/, Tick /*finish*/) {}
};

struct RunStats {
  uint64_t events = 0;
  Tick makespan = 0;
  size_t tasks_run = 0;
};

class Engine {
 public:
  explicit Engine(TaskGraph& graph) : g_(graph) {}
  void add_observer(Observer* o) { observers_.push_back(o); }
  // Called every `every` finished tasks with the fraction done (long runs show progress).
  void set_progress(std::function<void(double)> cb, size_t every = size_t{1} << 20) {
    progress_ = std::move(cb);
    progress_every_ = every;
  }
  // Runs every task; throws std::runtime_error naming a stuck task when the graph deadlocks
  // (a dependency cycle or a collective whose participants never all arrive).
  RunStats run();

  [[nodiscard]] const std::vector<Tick>& start_times() const { return start_; }
  [[nodiscard]] const std::vector<Tick>& finish_times() const { return finish_; }

 private:
  void push(Tick t, EventType type, TaskId id, uint32_t version = 0);
  void start(TaskId id, Tick ready, Tick at);
  // Processor sharing: bring every active task on resource r up to time `now` at the rate it
  // had, then re-issue their finish events for the new number of sharers.
  void reshare(uint32_t r, Tick now);

  struct ActiveResource {
    std::vector<TaskId> tasks;       // active, in start order
    std::vector<double> remaining;   // ticks of work left at full rate
    Tick last = 0;
  };
  std::vector<ActiveResource> res_;
  std::vector<uint32_t> version_;

  TaskGraph& g_;
  std::vector<Observer*> observers_;
  std::function<void(double)> progress_;
  size_t progress_every_ = 0;
  std::priority_queue<Event, std::vector<Event>, EventLater> queue_;
  uint64_t seq_ = 0;
  std::vector<Tick> start_, finish_, ready_;
  std::vector<uint32_t> pending_;
  std::vector<uint32_t> arrived_;                 // per collective
  std::vector<Tick> last_arrival_;                // per collective
  std::vector<std::vector<TaskId>> waiting_;      // per collective: arrived participants
};

}  // namespace stepcast::engine
