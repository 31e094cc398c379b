#include "validate/cpu_executor.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <unistd.h>

#include "calibrate/cpu_kernels.hpp"
#include "sim/core/error.hpp"

#ifdef STEPCAST_HAVE_MPI
#include <mpi.h>
#endif

namespace stepcast::validate {

#ifndef STEPCAST_HAVE_MPI
Measured execute_cpu(const config::RunConfig& rc, const ExecOptions&) {
  if (rc.cluster.num_gpus > 1) throw core::UserError("validate --backend cpu: this build has no MPI, so it cannot run more than one rank");
  throw core::UserError("validate --backend cpu needs MPI (install OpenMPI and rebuild)");
}
#else

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Resident set size (VmRSS) or its high-water mark (VmHWM) in bytes.
double proc_status_bytes(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string k;
  double kb = 0;
  std::string unit;
  while (in >> k) {
    if (k == key) {
      in >> kb >> unit;
      return kb * 1024.0;
    }
    std::getline(in, unit);
  }
  return 0.0;
}

std::string gib(double b) {
  char s[64];
  std::snprintf(s, sizeof s, "%.3f GiB", b / 1073741824.0);
  return s;
}

// A caching allocator: freed blocks are kept by size and reused, new blocks are written once
// (so their pages are resident). Live bytes are what the program holds; reserved includes the
// cache.
class Arena {
 public:
  Arena(double capacity, int64_t rank) : capacity_(capacity), rank_(rank) {}

  char* alloc(int32_t id, double bytes_d) {
    const auto bytes = static_cast<size_t>(std::max(64.0, std::ceil(bytes_d)));
    if (live_ + static_cast<double>(bytes) > capacity_) {
      throw DoesNotFit(std::string("does not fit: rank ") + std::to_string(rank_) + " needed " + gib(live_ + static_cast<double>(bytes)) +
                       " at its peak so far, the device has " + gib(capacity_));
    }
    std::unique_ptr<char[]> block;
    auto it = cache_.find(bytes);
    if (it != cache_.end()) {
      block = std::move(it->second);
      cache_.erase(it);
    } else {
      try {
        block.reset(new char[bytes]);
      } catch (const std::bad_alloc&) {
        throw DoesNotFit(std::string("does not fit: rank ") + std::to_string(rank_) + " could not allocate " + gib(static_cast<double>(bytes)) +
                         " with " + gib(live_) + " live (host memory exhausted)");
      }
      std::memset(block.get(), 0x3c, bytes);  // 0x3c3c3c3c: a small, non-zero float
      reserved_ += static_cast<double>(bytes);
      peak_reserved_ = std::max(peak_reserved_, reserved_);
    }
    if (static_cast<size_t>(id) >= blocks_.size()) blocks_.resize(static_cast<size_t>(id) + 1);
    char* p = block.get();
    blocks_[static_cast<size_t>(id)] = {bytes, std::move(block)};
    live_ += static_cast<double>(bytes);
    peak_ = std::max(peak_, live_);
    return p;
  }

  void free(int32_t id) {
    auto& b = blocks_[static_cast<size_t>(id)];
    if (!b.second) return;
    live_ -= static_cast<double>(b.first);
    cache_.emplace(b.first, std::move(b.second));
    b.first = 0;
  }

  [[nodiscard]] double peak() const { return peak_; }
  [[nodiscard]] double peak_reserved() const { return peak_reserved_; }

 private:
  double capacity_;
  int64_t rank_;
  double live_ = 0, peak_ = 0, reserved_ = 0, peak_reserved_ = 0;
  std::vector<std::pair<size_t, std::unique_ptr<char[]>>> blocks_;
  std::multimap<size_t, std::unique_ptr<char[]>> cache_;
};

int to_int(double x) { return static_cast<int>(std::max(1.0, std::llround(x) * 1.0)); }

class Runner {
 public:
  Runner(const config::RunConfig& rc, const Program& prog, int64_t world_rank)
      : rc_(rc), prog_(prog), rank_(world_rank), arena_(rc.hardware.hbm_capacity.value(), world_rank) {
    MPI_Comm_split(MPI_COMM_WORLD, static_cast<int>(prog.tp_group.front()), static_cast<int>(rank_), &tp_);
    MPI_Comm_split(MPI_COMM_WORLD, static_cast<int>(prog.dp_group.front()), static_cast<int>(rank_), &dp_);
    size_workspace();
  }
  ~Runner() {
    MPI_Comm_free(&tp_);
    MPI_Comm_free(&dp_);
  }

  // Model state: allocated once, before the first step.
  void allocate_state() {
    rss_base_ = proc_status_bytes("VmRSS:");
    const int32_t base = prog_.buffers;
    weights_ = reinterpret_cast<float*>(arena_.alloc(base, prog_.weight_bytes));
    grads_ = reinterpret_cast<float*>(arena_.alloc(base + 1, prog_.gradient_bytes));
    moments_ = reinterpret_cast<float*>(arena_.alloc(base + 2, prog_.optimizer_bytes));
    if (prog_.bucket_buffer_bytes > 0) staging_ = reinterpret_cast<float*>(arena_.alloc(base + 3, prog_.bucket_buffer_bytes));
  }

  // One step; returns this rank's wall time and fills the category times.
  double step(int index, std::array<double, kCategories>& cat, std::vector<TraceEvent>* trace, std::atomic<int64_t>& cursor,
              std::atomic<double>& progress, const std::string& fault) {
    cat.fill(0.0);
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = now_s();
    last_start_ = t0;
    progress.store(t0);
    const auto& code = prog_.step;
    for (size_t i = 0; i < code.size(); ++i) {
      cursor.store(static_cast<int64_t>(i));
      const Instr& in = code[i];
      if (index == 0 && !fault.empty() && i == code.size() / 3) inject(fault);
      const double a = now_s();
      run(in);
      const double b = now_s();
      progress.store(b);
      if (in.kind == Kind::kAlloc || in.kind == Kind::kFree) continue;
      cat[static_cast<size_t>(in.category)] += b - a;
      if (trace) trace->push_back({a - t0, b - a, in.name, in.category, in.microbatch, in.layer});
    }
    const double w0 = now_s();
    wait_sends();
    cat[static_cast<size_t>(Category::kPpComm)] += now_s() - w0;
    progress.store(now_s());
    return now_s() - t0;
  }

  [[nodiscard]] double last_start() const { return last_start_; }

  // The reference GEMM (Measured::reference) on every rank at once; the slowest rank's median
  // of 7 after one warm-up.
  double reference_gemm_s() {
    const cost::GemmShape g = Measured{}.reference;
    Eigen::MatrixXf A = Eigen::MatrixXf::Constant(static_cast<int>(g.m), static_cast<int>(g.k), 1.0f);
    Eigen::MatrixXf B = Eigen::MatrixXf::Constant(static_cast<int>(g.k), static_cast<int>(g.n), 0.5f);
    Eigen::MatrixXf C(static_cast<int>(g.m), static_cast<int>(g.n));
    std::vector<double> t;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < 8; ++i) {
      const double a = now_s();
      C.noalias() = A * B;
      if (i > 0) t.push_back(now_s() - a);
    }
    double mine = median(t), worst = 0;
    MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return worst;
  }

  [[nodiscard]] RankMeasurement finish_measurement() const {
    RankMeasurement r;
    r.rank = rank_;
    r.stage = prog_.stage;
    r.peak_allocated_bytes = arena_.peak();
    r.peak_reserved_bytes = arena_.peak_reserved();
    r.rss_delta_bytes = std::max(0.0, proc_status_bytes("VmHWM:") - rss_base_);
    r.workspace_bytes = workspace_bytes_;
    return r;
  }

  [[nodiscard]] std::string describe(int64_t i) const {
    if (i < 0 || i >= static_cast<int64_t>(prog_.step.size())) return "between steps";
    const Instr& in = prog_.step[static_cast<size_t>(i)];
    std::string s = "'" + prog_.names[in.name] + "'";
    if (in.microbatch >= 0) s += std::string(", micro-batch ") + std::to_string(in.microbatch);
    if (in.layer >= -1) s += in.layer == -1 ? ", embedding" : std::string(", layer ") + std::to_string(in.layer);
    auto group = [](const std::vector<int64_t>& g) {
      std::string t = "[";
      for (size_t i = 0; i < g.size(); ++i) {
        if (i) t += ",";
        t += std::to_string(g[i]);
      }
      t += "]";
      return t;
    };
    switch (in.kind) {
      case Kind::kCollective:
        s += std::string(" (") + cost::to_string(in.collective) + " on the " + (in.group == Group::kTp ? "tensor" : "data") +
             "-parallel group " + group(in.group == Group::kTp ? prog_.tp_group : prog_.dp_group) + ")";
        break;
      case Kind::kRecv: s += std::string(" (waiting for rank ") + std::to_string(in.peer) + ")"; break;
      case Kind::kSend: s += std::string(" (to rank ") + std::to_string(in.peer) + ")"; break;
      default: s += std::string(" (") + to_string(in.category) + ")"; break;
    }
    return s;
  }

 private:
  void inject(const std::string& fault) {
    const auto colon = fault.find(':');
    if (colon == std::string::npos || std::atoll(fault.c_str() + colon + 1) != rank_) return;
    if (fault.compare(0, colon, "die") == 0) std::raise(SIGKILL);
    if (fault.compare(0, colon, "hang") == 0) {
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }

  void size_workspace() {
    size_t a = 1, b = 1, c = 1, comm = 1, p2p = 1;
    auto need = [&](double m, double n, double k) {
      a = std::max(a, static_cast<size_t>(m * k));
      b = std::max(b, static_cast<size_t>(k * n));
      c = std::max(c, static_cast<size_t>(m * n));
    };
    for (const auto& in : prog_.step) {
      if (in.kind == Kind::kGemm) need(in.gemm.m, in.gemm.n, in.gemm.k);
      if (in.kind == Kind::kAttention) {
        const auto& at = in.attention;
        need(at.sq, at.sk, std::max(at.d_qk, at.d_v));
        need(at.sk, std::max(at.d_qk, at.d_v), at.sq);
        need(at.sq, std::max(at.d_qk, at.d_v), at.sk);
      }
      if (in.kind == Kind::kCollective) comm = std::max(comm, static_cast<size_t>(in.bytes / 4.0) + 1);
      if (in.kind == Kind::kSend || in.kind == Kind::kRecv) p2p = std::max(p2p, static_cast<size_t>(in.bytes / 4.0) + 1);
    }
    std::mt19937 rng(1234u + static_cast<unsigned>(rank_));
    std::uniform_real_distribution<float> u(0.5f, 1.5f);
    for (int s = 0; s < kSets; ++s) {
      A_[s].resize(a), B_[s].resize(b), C_[s].resize(c);
      for (auto* v : {&A_[s], &B_[s]}) {
        for (auto& x : *v) x = u(rng);
      }
      std::fill(C_[s].begin(), C_[s].end(), 0.0f);
    }
    for (auto& sbuf : send_ring_) sbuf.assign(p2p, 1.0f);
    recv_.assign(p2p, 0.0f);
    for (auto& s : stream_) s.assign(kStreamBytes, 1);
    (void)comm;
    workspace_bytes_ = 4.0 * static_cast<double>(kSets * (a + b + c) + (send_ring_.size() + 1) * p2p) +
                       static_cast<double>(comm_in_.size() + comm_out_.size()) +
                       static_cast<double>(kStreamBytes) * static_cast<double>(stream_.size());
  }

  void gemm(double m_d, double n_d, double k_d) {
    const int m = to_int(m_d), n = to_int(n_d), k = to_int(k_d);
    const int s = next_set_++ % kSets;
    Eigen::Map<Eigen::MatrixXf> A(A_[s].data(), m, k), B(B_[s].data(), k, n), C(C_[s].data(), m, n);
    C.noalias() = A * B;
  }

  // A memory pass moving `bytes` (read + write), as the calibration's copy bandwidth counts it,
  // over a ring much larger than the caches so it runs at memory speed.
  void stream(double bytes) {
    size_t left = static_cast<size_t>(bytes / 2.0);
    while (left > 0) {
      const size_t n = std::min(left, kStreamBytes / 2);
      if (stream_off_ + n > kStreamBytes) stream_off_ = 0;
      const size_t src = stream_i_ % stream_.size(), dst = (stream_i_ + 1) % stream_.size();
      std::memcpy(stream_[dst].data() + stream_off_, stream_[src].data() + stream_off_, n);
      stream_off_ += n;
      if (stream_off_ >= kStreamBytes) stream_off_ = 0, ++stream_i_;
      left -= n;
    }
  }

  void attention(const cost::AttentionShape& a, bool backward) {
    const int batch = to_int(a.batch * a.heads);
    const double scores = a.batch * a.heads * a.sq * a.sk;
    const double e = 4.0;
    const double passes = 3.0 * e + (rc_.training.dropout ? 2.0 * e + 1.0 : 0.0);
    if (!backward) {
      // S = Q K^T, scale-mask-softmax over S (memory passes), O = P V.
      for (int i = 0; i < batch; ++i) gemm(a.sq, a.sk, a.d_qk);
      stream(scores * passes);
      for (int i = 0; i < batch; ++i) gemm(a.sq, a.d_v, a.sk);
      return;
    }
    // dV = P^T dO, dP = dO V^T, softmax backward (memory passes), dQ = dS K, dK = dS^T Q.
    for (int i = 0; i < batch; ++i) gemm(a.sk, a.d_v, a.sq);
    for (int i = 0; i < batch; ++i) gemm(a.sq, a.sk, a.d_v);
    stream(scores * passes * 2.0);
    for (int i = 0; i < batch; ++i) gemm(a.sq, a.d_qk, a.sk);
    for (int i = 0; i < batch; ++i) gemm(a.sk, a.d_qk, a.sq);
  }

  void collective(const Instr& in) {
    MPI_Comm comm = in.group == Group::kTp ? tp_ : dp_;
    int size = 1;
    MPI_Comm_size(comm, &size);
    if (size <= 1) return;
    const int count = to_int(in.bytes / 4.0);
    const int per = std::max(1, count / size);
    // Gradient buckets reduce out of the bucket's communication buffer.
    // Inputs and outputs rotate through rings larger than the caches, as in the calibration.
    const auto n = static_cast<size_t>(count) * sizeof(float);
    float* src = in.category == Category::kDpComm && staging_ && in.collective != cost::Collective::kAllGather
                     ? staging_
                     : reinterpret_cast<float*>(comm_in_.next(n));
    float* dst = reinterpret_cast<float*>(comm_out_.next(n));
    switch (in.collective) {
      case cost::Collective::kAllReduce: MPI_Allreduce(src, dst, count, MPI_FLOAT, MPI_SUM, comm); break;
      case cost::Collective::kAllGather: MPI_Allgather(src, per, MPI_FLOAT, dst, per, MPI_FLOAT, comm); break;
      case cost::Collective::kReduceScatter: MPI_Reduce_scatter_block(src, dst, per, MPI_FLOAT, MPI_SUM, comm); break;
      case cost::Collective::kAllToAll: MPI_Alltoall(src, per, MPI_FLOAT, dst, per, MPI_FLOAT, comm); break;
      case cost::Collective::kBroadcast: MPI_Bcast(src, count, MPI_FLOAT, 0, comm); break;
      default: throw core::InternalError(std::string("validate: ") + cost::to_string(in.collective) + " is not executed as a group collective");
    }
  }

  void send(const Instr& in) {
    const size_t slot = send_next_++ % send_ring_.size();
    if (send_req_[slot] != MPI_REQUEST_NULL) MPI_Wait(&send_req_[slot], MPI_STATUS_IGNORE);
    MPI_Isend(send_ring_[slot].data(), to_int(in.bytes / 4.0), MPI_FLOAT, in.peer, in.tag, MPI_COMM_WORLD, &send_req_[slot]);
  }

  void wait_sends() {
    for (auto& r : send_req_) {
      if (r != MPI_REQUEST_NULL) MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
  }

  void adam(double elements) {
    const auto n = static_cast<size_t>(elements);
    calibrate::adam_step(weights_, grads_, moments_, moments_ + n, n);
  }

  void run(const Instr& in) {
    switch (in.kind) {
      case Kind::kGemm:
        for (int i = 0; i < to_int(in.gemm.batch); ++i) gemm(in.gemm.m, in.gemm.n, in.gemm.k);
        return;
      case Kind::kAttention: attention(in.attention, in.backward); return;
      case Kind::kStream: stream(in.bytes); return;
      case Kind::kCollective: collective(in); return;
      case Kind::kSend: send(in); return;
      case Kind::kRecv:
        MPI_Recv(recv_.data(), to_int(in.bytes / 4.0), MPI_FLOAT, in.peer, in.tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        return;
      case Kind::kOptimizer: adam(in.elements); return;
      case Kind::kAlloc: arena_.alloc(in.buffer, in.bytes); return;
      case Kind::kFree: arena_.free(in.buffer); return;
    }
  }

  static constexpr int kSets = 3;
  static constexpr size_t kStreamBytes = size_t{64} << 20;
  const config::RunConfig& rc_;
  const Program& prog_;
  int64_t rank_;
  Arena arena_;
  MPI_Comm tp_ = MPI_COMM_NULL, dp_ = MPI_COMM_NULL;
  std::vector<float> A_[kSets], B_[kSets], C_[kSets];
  int next_set_ = 0;
  std::vector<float> recv_;
  calibrate::RotatingBuffer comm_in_{size_t{64} << 20}, comm_out_{size_t{64} << 20};
  std::array<std::vector<float>, 4> send_ring_;
  std::array<MPI_Request, 4> send_req_{MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  size_t send_next_ = 0;
  std::array<std::vector<char>, 3> stream_;
  size_t stream_off_ = 0, stream_i_ = 0;
  float *weights_ = nullptr, *grads_ = nullptr, *moments_ = nullptr, *staging_ = nullptr;
  double workspace_bytes_ = 0, rss_base_ = 0, last_start_ = 0;
};

// Packs a rank's measurement as doubles for MPI_Gatherv.
std::vector<double> pack(const RankMeasurement& r) {
  std::vector<double> v{static_cast<double>(r.rank), static_cast<double>(r.stage), static_cast<double>(r.step_s.size()),
                        r.peak_allocated_bytes, r.peak_reserved_bytes, r.rss_delta_bytes, r.workspace_bytes,
                        static_cast<double>(r.trace.size()), r.trace_t0_s};
  for (size_t i = 0; i < r.step_s.size(); ++i) {
    v.push_back(r.step_s[i]);
    for (double c : r.category_s[i]) v.push_back(c);
  }
  for (const auto& e : r.trace) {
    v.insert(v.end(), {e.start_s, e.dur_s, static_cast<double>(e.name), static_cast<double>(e.category),
                       static_cast<double>(e.microbatch), static_cast<double>(e.layer)});
  }
  return v;
}

RankMeasurement unpack(const double* v) {
  RankMeasurement r;
  r.rank = static_cast<int64_t>(v[0]);
  r.stage = static_cast<int32_t>(v[1]);
  const auto steps = static_cast<size_t>(v[2]);
  r.peak_allocated_bytes = v[3];
  r.peak_reserved_bytes = v[4];
  r.rss_delta_bytes = v[5];
  r.workspace_bytes = v[6];
  const auto events = static_cast<size_t>(v[7]);
  r.trace_t0_s = v[8];
  size_t k = 9;
  for (size_t i = 0; i < steps; ++i) {
    r.step_s.push_back(v[k++]);
    std::array<double, kCategories> c{};
    for (auto& x : c) x = v[k++];
    r.category_s.push_back(c);
  }
  for (size_t i = 0; i < events; ++i, k += 6) {
    r.trace.push_back({v[k], v[k + 1], static_cast<uint32_t>(v[k + 2]), static_cast<Category>(static_cast<int>(v[k + 3])),
                       static_cast<int32_t>(v[k + 4]), static_cast<int32_t>(v[k + 5])});
  }
  return r;
}

}  // namespace

Measured execute_cpu(const config::RunConfig& rc, const ExecOptions& opt) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != rc.cluster.num_gpus) {
    throw core::UserError(rc.source_name + std::string(": the run has ") + std::to_string(rc.cluster.num_gpus) + " ranks (cluster.num_gpus) but " +
                          std::to_string(size) + std::string(" processes were started; run it with mpirun -n ") + std::to_string(rc.cluster.num_gpus));
  }
  const Program prog = build_program(rc, rank);
  Runner runner(rc, prog, rank);
  const char* fault_env = std::getenv("STEPCAST_VALIDATE_FAULT");
  const std::string fault = fault_env ? fault_env : "";

  // Watchdog: no completed instruction for timeout_s ends this rank with a message.
  std::atomic<int64_t> cursor{-1};
  std::atomic<double> progress{now_s()};
  std::atomic<int> step_no{-1};
  std::atomic<bool> done{false};
  std::thread watchdog([&]() {
    while (!done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const double idle = now_s() - progress.load();
      if (idle > opt.timeout_s && !done.load()) {
        const std::string where = runner.describe(cursor.load());
        std::fprintf(stderr, "stepcast: error: validate: rank %d made no progress for %.0f s in step %d at %s; ending the run\n", rank,
                     idle, step_no.load(), where.c_str());
        std::fflush(stderr);
        std::_Exit(124);
      }
    }
  });
  RankMeasurement mine;
  try {
    const double reference_s = runner.reference_gemm_s();
    runner.allocate_state();
    const int total = opt.warmup + opt.steps;
    std::vector<double> step_max;
    for (int s = 0; s < total; ++s) {
      step_no.store(s);
      std::array<double, kCategories> cat{};
      std::vector<TraceEvent> trace;
      const bool last = s == total - 1;
      const double t = runner.step(s, cat, last ? &trace : nullptr, cursor, progress, fault);
      cursor.store(-1);
      double tmax = 0;
      MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      progress.store(now_s());
      if (rank == 0) {
        std::fprintf(stderr, "validate: step %d/%d%s: %.1f ms\n", s + 1, total, s < opt.warmup ? " (warm-up)" : "", tmax * 1e3);
        std::fflush(stderr);
      }
      if (s < opt.warmup) continue;
      mine.step_s.push_back(t);
      mine.category_s.push_back(cat);
      step_max.push_back(tmax);
      if (last) {
        mine.trace = std::move(trace);
        mine.trace_t0_s = runner.last_start();
      }
    }
    const RankMeasurement fin = runner.finish_measurement();
    mine.rank = fin.rank;
    mine.stage = fin.stage;
    mine.peak_allocated_bytes = fin.peak_allocated_bytes + 0.0;
    mine.peak_reserved_bytes = fin.peak_reserved_bytes;
    mine.rss_delta_bytes = fin.rss_delta_bytes;
    mine.workspace_bytes = fin.workspace_bytes;

    // Gather every rank's measurement on rank 0.
    const std::vector<double> packed = pack(mine);
    int n = static_cast<int>(packed.size());
    std::vector<int> counts(static_cast<size_t>(size)), displs(static_cast<size_t>(size));
    MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
    std::vector<double> all;
    if (rank == 0) {
      int off = 0;
      for (int r = 0; r < size; ++r) displs[static_cast<size_t>(r)] = off, off += counts[static_cast<size_t>(r)];
      all.resize(static_cast<size_t>(off));
    }
    MPI_Gatherv(packed.data(), n, MPI_DOUBLE, all.data(), counts.data(), displs.data(), MPI_DOUBLE, 0, MPI_COMM_WORLD);
    done.store(true);
    watchdog.join();
    Measured out;
    out.backend = "cpu";
    out.steps = opt.steps;
    out.warmup = opt.warmup;
    out.step_s = step_max;
    out.reference_s = reference_s;
    if (rank == 0) {
      for (int r = 0; r < size; ++r) out.ranks.push_back(unpack(all.data() + displs[static_cast<size_t>(r)]));
    }
    return out;
  } catch (...) {
    done.store(true);
    watchdog.join();
    throw;
  }
}

#endif

}  // namespace stepcast::validate
