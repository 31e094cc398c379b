// stepcast validate, CPU backend: one single-threaded process per rank. Eigen GEMMs with the
// program's shapes (as the CPU calibration measured them), memcpy memory passes over a ring
// larger than the caches, MPI collectives on communicators split from the rank mesh with
// inputs rotating through 64 MiB (as calibrated), pipeline sends as MPI_Isend and blocking
// receives, Adam from calibrate/cpu_kernels. Timestamps are the host's steady clock.
#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "calibrate/cpu_kernels.hpp"
#include "sim/core/error.hpp"
#include "validate/executor.hpp"

#ifdef STEPCAST_HAVE_MPI
#include <mpi.h>
#endif

namespace stepcast::validate {

#ifndef STEPCAST_HAVE_MPI
std::unique_ptr<Backend> make_cpu_backend(int64_t) { throw core::UserError("validate --backend cpu needs MPI (install OpenMPI and rebuild)"); }
#else

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int to_int(double x) { return static_cast<int>(std::max<long long>(1, std::llround(x))); }

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int64_t rank) : rank_(rank) { comms_.fill(MPI_COMM_NULL); }
  ~CpuBackend() override {
    for (MPI_Comm& c : comms_) {
      if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
    }
  }

  [[nodiscard]] std::string name() const override { return "cpu"; }

  void prepare(const config::RunConfig& rc, const Program& prog) override {
    rc_ = &rc;
    arena_ = std::make_unique<Arena>(
        rc.hardware.hbm_capacity.value(), rank_,
        [](size_t n) -> void* {
          char* p = new (std::nothrow) char[n];
          if (p) std::memset(p, 0x3c, n);  // 0x3c3c3c3c: a small, non-zero float; pages resident
          return p;
        },
        [](void* p) { delete[] static_cast<char*>(p); });
    // One communicator per group kind; every rank splits each in the same order (collectively),
    // coloured by its group's first rank.
    for (size_t g = 0; g < comms_.size(); ++g) {
      MPI_Comm_split(MPI_COMM_WORLD, static_cast<int>(prog.group(static_cast<Group>(g)).front()), static_cast<int>(rank_), &comms_[g]);
    }
    WorkspaceNeeds w = workspace_needs(prog);
    w.gemm(reference_shape().m, reference_shape().n, reference_shape().k);
    const size_t a = w.a, b = w.b, c = w.c, p2p = static_cast<size_t>(w.p2p_bytes / 4.0) + 1;
    std::mt19937 rng(1234u + static_cast<unsigned>(rank_));
    std::uniform_real_distribution<float> u(0.5f, 1.5f);
    for (int s = 0; s < kSets; ++s) {
      A_[s].resize(a), B_[s].resize(b), C_[s].assign(c, 0.0f);
      for (auto* v : {&A_[s], &B_[s]}) {
        for (auto& x : *v) x = u(rng);
      }
    }
    for (auto& sbuf : send_ring_) sbuf.assign(p2p, 1.0f);
    recv_.assign(p2p, 0.0f);
    for (auto& s : stream_) s.assign(kStreamBytes, 1);
    marks_.assign(prog.step.size() + 1, 0.0);
    workspace_ = 4.0 * static_cast<double>(kSets * (a + b + c) + (send_ring_.size() + 1) * p2p) +
                 static_cast<double>(comm_in_.size() + comm_out_.size()) + static_cast<double>(kStreamBytes) * static_cast<double>(stream_.size());
  }

  [[nodiscard]] cost::GemmShape reference_shape() const override {
    const auto& r = calibrate::kCpuReferenceGemm;
    return {static_cast<double>(r.m), static_cast<double>(r.n), static_cast<double>(r.k), 1};
  }
  // The calibration's reference GEMM (calibrate/cpu_kernels.hpp) on the kernel operand buffers,
  // which prepare() sized for it too, so timing it between steps allocates nothing.
  double reference_gemm_s(const cost::GemmShape& g, int reps) override {
    return calibrate::time_reference_gemm(A_[0].data(), B_[0].data(), C_[0].data(), {to_int(g.m), to_int(g.n), to_int(g.k)}, reps);
  }

  void allocate_state(const Program& prog) override {
    const int32_t base = prog.buffers;
    weights_ = static_cast<float*>(arena_->alloc(base, prog.weight_bytes));
    grads_ = static_cast<float*>(arena_->alloc(base + 1, prog.gradient_bytes));
    moments_ = static_cast<float*>(arena_->alloc(base + 2, prog.optimizer_bytes));
    if (prog.bucket_buffer_bytes > 0) staging_ = static_cast<float*>(arena_->alloc(base + 3, prog.bucket_buffer_bytes));
  }

  void run(const Instr& in) override {
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
      case Kind::kOptimizer: {
        const auto n = static_cast<size_t>(in.elements);
        calibrate::adam_step(weights_, grads_, moments_, moments_ + n, n);
        return;
      }
      case Kind::kAlloc: arena_->alloc(in.buffer, in.bytes); return;
      case Kind::kFree: arena_->free(in.buffer); return;
      case Kind::kJoin: return;  // CPU collectives are blocking
    }
  }

  void mark(size_t i) override { marks_[i] = now_s(); }

  double finish_step() override {
    const double t0 = now_s();
    for (auto& r : send_req_) {
      if (r != MPI_REQUEST_NULL) MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
    return now_s() - t0;
  }

  double elapsed(size_t i) override { return marks_[i + 1] - marks_[i]; }
  double since_start(size_t i) override { return marks_[i] - marks_[0]; }

  [[nodiscard]] MemoryStats memory() const override {
    return {arena_ ? arena_->peak() : 0.0, arena_ ? arena_->peak_reserved() : 0.0, workspace_};
  }

 private:
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
    const double passes = 3.0 * e + (rc_->training.dropout ? 2.0 * e + 1.0 : 0.0);
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
    MPI_Comm comm = comms_[static_cast<size_t>(in.group)];
    int size = 1;
    MPI_Comm_size(comm, &size);
    if (size <= 1) return;
    const int count = to_int(in.bytes / 4.0);
    const int per = std::max(1, count / size);
    // Inputs and outputs rotate through rings larger than the caches, as in the calibration;
    // gradient buckets reduce out of the bucket's communication buffer.
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
      case cost::Collective::kSendRecv: {
        // One ring hop: `bytes` to the next rank of the group, the same from the previous one.
        int me = 0;
        MPI_Comm_rank(comm, &me);
        MPI_Sendrecv(src, count, MPI_FLOAT, (me + 1) % size, 0, dst, count, MPI_FLOAT, (me + size - 1) % size, 0, comm, MPI_STATUS_IGNORE);
        break;
      }
      default: throw core::InternalError(std::string("validate: ") + cost::to_string(in.collective) + " is not executed as a group collective");
    }
  }

  void send(const Instr& in) {
    const size_t slot = send_next_++ % send_ring_.size();
    if (send_req_[slot] != MPI_REQUEST_NULL) MPI_Wait(&send_req_[slot], MPI_STATUS_IGNORE);
    MPI_Isend(send_ring_[slot].data(), to_int(in.bytes / 4.0), MPI_FLOAT, in.peer, in.tag, MPI_COMM_WORLD, &send_req_[slot]);
  }

  static constexpr int kSets = 3;
  static constexpr size_t kStreamBytes = size_t{64} << 20;
  int64_t rank_;
  const config::RunConfig* rc_ = nullptr;
  std::unique_ptr<Arena> arena_;
  // Indexed by Group: tensor, data (shard), expert, expert-data (shard), context parallel, and
  // the replicate groups of hybrid sharding.
  std::array<MPI_Comm, kGroups> comms_;
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
  std::vector<double> marks_;
  double workspace_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int64_t rank) { return std::make_unique<CpuBackend>(rank); }

#endif

}  // namespace stepcast::validate
