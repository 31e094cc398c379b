// stepcast task graph: the operators of one training step as tasks on per-rank streams.
//
// A task runs on one (rank, stream). Tasks on the same stream run in the order they were added
// (a CUDA stream is FIFO), so each task implicitly depends on its stream predecessor; explicit
// dependencies express data flow across streams and ranks (a layer's backward after its
// forward, a pipeline receive after the neighbour's send). A collective ties one task per
// participant: it starts when the last participant is ready, on all of them at once, and lasts
// the collective's duration; the time earlier arrivals spend waiting is recorded. A task may
// also be a flow of bytes over links (NIC directions, NVLink ports, a socket interconnect):
// flows active at the same time share each link max-min fairly, and a collective whose
// participants are flows ends when the last of them has moved its bytes.
//
// Time is an integer number of picoseconds (Tick) so the simulation is exact and reproducible.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

namespace stepcast::engine {

using Tick = int64_t;  // picoseconds
inline constexpr Tick kTicksPerSecond = 1'000'000'000'000;
// The longest time the simulator represents: picosecond ticks in 64 bits hold 106 days; one
// operation is held to a tenth of that so a step's sum of them stays in range too.
inline constexpr double kMaxTaskSeconds = 9.2e5;
// Throws std::range_error past kMaxTaskSeconds (the caller names the input that caused it).
Tick to_ticks(double seconds);
inline double to_seconds(Tick t) { return static_cast<double>(t) / static_cast<double>(kTicksPerSecond); }

// kOffload / kReload: copy engines that move offloaded activations to and from host memory.
enum class Stream : uint8_t { kCompute = 0, kTp, kDp, kDpReduce, kPpSend, kHost, kOffload, kReload, kCount };
const char* to_string(Stream s);

enum class TaskKind : uint8_t {
  kForward,        // forward compute of a layer (or embedding / output)
  kBackward,       // backward compute (input gradient, and weight gradient unless split)
  kBackwardWeight, // weight-gradient compute deferred by zero-bubble schedules
  kTpComm,         // tensor / context / expert parallel communication on the critical path
  kPpSend,         // pipeline activation or gradient transfer to the neighbour stage
  kDpComm,         // gradient reduction / parameter gather
  kOptimizer,
  kHost,           // host-side work (data loading, logging) before the step's barrier
  kHostCopy,       // a copy between GPU and host memory (CPU offload), by DMA: no SMs taken
  kBarrier,
};
const char* to_string(TaskKind k);

using TaskId = uint32_t;
inline constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

struct Task {
  Tick duration = 0;
  int32_t rank = 0;      // simulated rank index (a representative rank under symmetry)
  int32_t layer = -1;    // layer index on its stage (-1: not a layer op)
  int32_t microbatch = -1;
  int32_t chunk = 0;     // virtual pipeline chunk
  uint32_t name = 0;     // index into TaskGraph::names
  uint32_t collective = kNone;
  // A flow over shared links (TaskGraph::set_flow): `duration` is its time alone.
  uint32_t flow = kNone;
  Stream stream = Stream::kCompute;
  TaskKind kind = TaskKind::kForward;
  // Compute tasks: index of the length of the kernel in flight (TaskGraph::kernel_share); 0 when
  // the task's kernels are unknown.
  uint16_t kernel = 0;
};
// A full-rank step holds hundreds of millions of tasks (reports/performance.md): keep them small.
static_assert(sizeof(Task) <= 40, "Task grew past 40 bytes");

// A shared channel: capacity in bytes per second.
struct Link {
  double capacity = 0;
  uint32_t name = 0;
};

// Bytes moved over up to kMaxFlowLinks links. Alone a flow runs at max_rate (bytes/s), the
// rate that makes it last its task's duration; with others it gets its max-min fair share.
inline constexpr size_t kMaxFlowLinks = 4;
struct Flow {
  double bytes = 0;
  double max_rate = 0;
  uint32_t links[kMaxFlowLinks] = {kNone, kNone, kNone, kNone};
  uint32_t num_links = 0;
};

struct CollectiveOp {
  Tick duration = 0;
  uint32_t participants = 0;
  uint32_t name = 0;
  uint32_t group = 1;  // ranks of the real group (under symmetry more than participate here)
};

class TaskGraph {
 public:
  explicit TaskGraph(int32_t num_ranks);

  // Adds a task at the end of its (rank, stream) queue.
  TaskId add(const Task& t);
  // b runs after a finishes (a and b may be on any ranks and streams).
  void depend(TaskId a, TaskId b);
  // Declares a collective over a group of `group` ranks; attach participant tasks with join().
  uint32_t add_collective(Tick duration, uint32_t name, uint32_t group = 1);
  void join(uint32_t collective, TaskId t);
  uint32_t intern(const std::string& name);
  // Declares a link of the given capacity (bytes per second, > 0).
  uint32_t add_link(const std::string& name, double bytes_per_second);
  // Makes task `id` a flow of `bytes` over `links` (1 to kMaxFlowLinks). Its rate alone is
  // bytes / duration, capped by the slowest link it crosses. A task without duration or bytes
  // stays a plain task.
  void set_flow(TaskId id, double bytes, std::initializer_list<uint32_t> links);
  [[nodiscard]] size_t num_links() const { return links_.size(); }
  // Share of a GPU's compute a communication kernel takes while it runs beside compute on the
  // same rank (its SMs over the GPU's). While a rank has a DP/FSDP collective or an
  // overlapped pipeline send in flight, its compute tasks progress at (1 - fraction) speed.
  void set_comm_compute_share(double fraction) { comm_compute_share_ = fraction; }
  [[nodiscard]] double comm_compute_share() const { return comm_compute_share_; }
  // Collective kernels and SMs: a data-parallel collective issued on its own stream while a
  // compute kernel holds every SM starts only once that kernel has handed out its last thread
  // blocks (streams of equal priority are served in launch order); its participants wait in
  // different phases of their kernels, so the collective waits about n / (n + 1) of the kernel
  // in flight for a group of n. Set when collectives run on SMs and their streams do not
  // outrank compute.
  void set_comm_waits_for_kernels(bool on) { comm_waits_for_kernels_ = on; }
  [[nodiscard]] bool comm_waits_for_kernels() const { return comm_waits_for_kernels_; }
  // The kernel in flight of a compute task, as a share of the task's duration (the
  // length-biased mean kernel: sum t^2 / sum t over its kernels, over the task's time):
  // registers a share and returns its index for Task::kernel (equal shares share an index).
  uint16_t kernel_share_index(double share);
  [[nodiscard]] double kernel_share(uint16_t index) const { return kernel_shares_[index]; }
  [[nodiscard]] const Link& link(uint32_t l) const { return links_[l]; }
  [[nodiscard]] const Flow& flow(uint32_t f) const { return flows_[f]; }

  [[nodiscard]] size_t size() const { return tasks_.size(); }
  [[nodiscard]] int32_t num_ranks() const { return num_ranks_; }
  [[nodiscard]] const Task& task(TaskId id) const { return tasks_[id]; }
  [[nodiscard]] Task& task(TaskId id) { return tasks_[id]; }
  [[nodiscard]] const CollectiveOp& collective(uint32_t id) const { return collectives_[id]; }
  [[nodiscard]] const std::string& name(uint32_t id) const { return names_[id]; }
  [[nodiscard]] const std::vector<Task>& tasks() const { return tasks_; }

  // Compressed successor lists and dependency counts; built once before simulation.
  void finalize();
  [[nodiscard]] bool finalized() const { return finalized_; }
  [[nodiscard]] const std::vector<uint32_t>& succ_offsets() const { return succ_off_; }
  [[nodiscard]] const std::vector<TaskId>& successors() const { return succ_; }
  [[nodiscard]] const std::vector<uint32_t>& dep_counts() const { return deps_; }

 private:
  int32_t num_ranks_;
  std::vector<Task> tasks_;
  std::vector<CollectiveOp> collectives_;
  std::vector<Link> links_;
  std::vector<Flow> flows_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, uint32_t> name_index_;
  std::vector<std::pair<TaskId, TaskId>> edges_;
  std::vector<TaskId> last_on_stream_;  // per rank * stream
  std::vector<uint32_t> succ_off_;
  std::vector<TaskId> succ_;
  std::vector<uint32_t> deps_;
  double comm_compute_share_ = 0;
  bool comm_waits_for_kernels_ = false;
  std::vector<double> kernel_shares_{0.0};  // index 0: no kernel known
  bool finalized_ = false;
};

}  // namespace stepcast::engine
