#include "sim/engine/task_graph.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <unordered_map>

namespace stepcast::engine {

const char* to_string(Stream s) {
  switch (s) {
    case Stream::kCompute: return "compute";
    case Stream::kTp: return "tp-comm";
    case Stream::kDp: return "dp-gather";
    case Stream::kDpReduce: return "dp-reduce";
    case Stream::kPpSend: return "pp-send";
    case Stream::kHost: return "host";
    case Stream::kOffload: return "offload d2h";
    case Stream::kReload: return "offload h2d";
    case Stream::kCount: break;
  }
  return "?";
}

const char* to_string(TaskKind k) {
  switch (k) {
    case TaskKind::kForward: return "forward";
    case TaskKind::kBackward: return "backward";
    case TaskKind::kBackwardWeight: return "backward-weight";
    case TaskKind::kTpComm: return "tp-comm";
    case TaskKind::kPpSend: return "pp-send";
    case TaskKind::kDpComm: return "dp-comm";
    case TaskKind::kOptimizer: return "optimizer";
    case TaskKind::kHost: return "host";
    case TaskKind::kHostCopy: return "host-copy";
    case TaskKind::kBarrier: return "barrier";
  }
  return "?";
}

namespace {
constexpr size_t kStreams = static_cast<size_t>(Stream::kCount);
}

Tick to_ticks(double seconds) {
  if (!(seconds <= kMaxTaskSeconds)) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "an operation of %.3g s is beyond the simulator's range of %.3g s per operation", seconds,
                  kMaxTaskSeconds);
    throw std::range_error(buf);
  }
  return static_cast<Tick>(seconds * static_cast<double>(kTicksPerSecond) + 0.5);
}

TaskGraph::TaskGraph(int32_t num_ranks)
    : num_ranks_(num_ranks), last_on_stream_(static_cast<size_t>(num_ranks) * kStreams, kNone) {
  names_.emplace_back("");
  name_index_.emplace("", 0);
}

TaskId TaskGraph::add(const Task& t) {
  if (finalized_) throw std::logic_error("task graph already finalized");
  if (t.rank < 0 || t.rank >= num_ranks_) throw std::logic_error("task rank out of range");
  if (t.duration < 0) throw std::logic_error("negative task duration");
  if (t.flow != kNone) throw std::logic_error("flows are attached with set_flow");
  const auto id = static_cast<TaskId>(tasks_.size());
  tasks_.push_back(t);
  auto& last = last_on_stream_[static_cast<size_t>(t.rank) * kStreams + static_cast<size_t>(t.stream)];
  if (last != kNone) edges_.emplace_back(last, id);
  last = id;
  return id;
}

void TaskGraph::depend(TaskId a, TaskId b) {
  if (a == kNone || b == kNone) return;
  if (a >= tasks_.size() || b >= tasks_.size()) throw std::logic_error("dependency on unknown task");
  edges_.emplace_back(a, b);
}

uint32_t TaskGraph::add_collective(Tick duration, uint32_t name, uint32_t group) {
  collectives_.push_back(CollectiveOp{duration, 0, name, std::max<uint32_t>(1, group)});
  return static_cast<uint32_t>(collectives_.size() - 1);
}

uint16_t TaskGraph::kernel_share_index(double share) {
  if (!(share > 0)) return 0;
  share = std::min(share, 1.0);
  for (size_t i = 1; i < kernel_shares_.size(); ++i) {
    if (kernel_shares_[i] == share) return static_cast<uint16_t>(i);
  }
  if (kernel_shares_.size() > 0xffff) throw std::logic_error("too many kernel shares");
  kernel_shares_.push_back(share);
  return static_cast<uint16_t>(kernel_shares_.size() - 1);
}

void TaskGraph::join(uint32_t collective, TaskId t) {
  auto& c = collectives_.at(collective);
  tasks_.at(t).collective = collective;
  tasks_.at(t).duration = c.duration;
  ++c.participants;
}

uint32_t TaskGraph::add_link(const std::string& name, double bytes_per_second) {
  if (!(bytes_per_second > 0)) throw std::logic_error("link '" + name + "' needs a positive capacity");
  links_.push_back(Link{bytes_per_second, intern(name)});
  return static_cast<uint32_t>(links_.size() - 1);
}

void TaskGraph::set_flow(TaskId id, double bytes, std::initializer_list<uint32_t> links) {
  if (finalized_) throw std::logic_error("task graph already finalized");
  Task& t = tasks_.at(id);
  if (links.size() == 0 || links.size() > kMaxFlowLinks) throw std::logic_error("a flow crosses 1 to 4 links");
  if (t.duration <= 0 || !(bytes > 0)) return;
  Flow f;
  f.bytes = bytes;
  double cap = std::numeric_limits<double>::infinity();
  for (uint32_t l : links) {
    if (l >= links_.size()) throw std::logic_error("flow over an undeclared link");
    f.links[f.num_links++] = l;
    cap = std::min(cap, links_[l].capacity);
  }
  f.max_rate = std::min(cap, bytes / to_seconds(t.duration));
  t.flow = static_cast<uint32_t>(flows_.size());
  flows_.push_back(f);
}

uint32_t TaskGraph::intern(const std::string& name) {
  auto it = name_index_.find(name);
  if (it != name_index_.end()) return it->second;
  const auto id = static_cast<uint32_t>(names_.size());
  names_.push_back(name);
  name_index_.emplace(name, id);
  return id;
}

void TaskGraph::finalize() {
  if (finalized_) return;
  const size_t n = tasks_.size();
  succ_off_.assign(n + 1, 0);
  deps_.assign(n, 0);
  for (const auto& [a, b] : edges_) {
    ++succ_off_[a + 1];
    ++deps_[b];
  }
  for (size_t i = 0; i < n; ++i) succ_off_[i + 1] += succ_off_[i];
  succ_.assign(edges_.size(), 0);
  std::vector<uint32_t> fill(succ_off_.begin(), succ_off_.end() - 1);
  for (const auto& [a, b] : edges_) succ_[fill[a]++] = b;
  edges_.clear();
  edges_.shrink_to_fit();
  last_on_stream_.clear();
  last_on_stream_.shrink_to_fit();
  finalized_ = true;
}

}  // namespace stepcast::engine
