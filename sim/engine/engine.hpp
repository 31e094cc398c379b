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

// kGate: a task whose dependencies are met looks at what runs beside it before it is ready
// (a collective kernel waiting for the compute kernel in flight to hand out its SMs).
enum class EventType : uint8_t { kReady, kFinish, kGate };

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
  // Per rank: time its collectives waited for the compute kernel in flight to free SMs
  // (TaskGraph::comm_waits_for_kernels; empty when off).
  [[nodiscard]] const std::vector<Tick>& kernel_waits() const { return kernel_wait_; }

 private:
  void push(Tick t, EventType type, TaskId id, uint32_t version = 0);
  void start(TaskId id, Tick ready, Tick at);
  void complete(TaskId id, Tick now, RunStats& stats);
  // Flows: gather the flows connected to `seed_links` through shared links, bring them up to
  // `now` at their old rates, give them max-min fair rates and re-issue their finish events.
  void reshare(const uint32_t* seed_links, uint32_t count, Tick now);
  // Compute-communication interference (TaskGraph::comm_compute_share): a communication task
  // starting or ending on a rank re-rates the compute task running there.
  [[nodiscard]] static bool slows_compute(const Task& t);
  [[nodiscard]] static bool is_compute(const Task& t);
  void rerate(int32_t rank, Tick now);
  // A data-parallel collective on its own stream, which waits for the compute kernel in flight
  // on its rank when TaskGraph::comm_waits_for_kernels() is set.
  [[nodiscard]] static bool waits_for_kernel(const Task& t);
  // How long a collective issued now on `rank` waits for the compute kernel in flight there.
  [[nodiscard]] Tick kernel_wait(const Task& comm, Tick now) const;

  struct RunningCompute {
    TaskId task = kNone;
    double left = 0;   // ticks of work at full speed
    double rate = 1;   // work per tick
    Tick last = 0;
  };
  std::vector<RunningCompute> compute_;  // per rank
  std::vector<uint32_t> comm_active_;    // per rank: interfering communication tasks running
  double share_ = 0;
  bool kernel_waits_ = false;
  std::vector<TaskId> on_compute_;  // per rank: the compute task running (kNone when idle)
  std::vector<uint8_t> gated_;      // per task: its kernel wait has been taken
  std::vector<Tick> kernel_wait_;   // per rank: kernel waits taken

  struct ActiveFlow {
    double remaining = 0;  // bytes
    double rate = 0;       // bytes per tick
    Tick last = 0;         // when `remaining` was last brought up to date
  };
  std::vector<ActiveFlow> flows_;                 // per flow
  std::vector<std::vector<TaskId>> link_tasks_;   // per link: active flow tasks, in start order
  std::vector<uint32_t> version_;
  std::vector<uint32_t> link_mark_, flow_mark_;   // component search stamps
  uint32_t stamp_ = 0;
  std::vector<uint32_t> link_slot_;               // link -> index in the component being shared
  std::vector<uint32_t> scratch_links_;
  std::vector<TaskId> scratch_comp_;
  std::vector<double> scratch_left_;
  std::vector<uint32_t> scratch_users_;
  std::vector<uint32_t> coll_done_;               // per collective: participants done moving bytes
  std::vector<std::vector<TaskId>> coll_parked_;  // per collective: done, waiting for the rest
  std::vector<uint8_t> coll_flows_;               // per collective: has flow participants

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
