// stepcast validate, CUDA backend (host side): one process per GPU; cuBLAS GEMMs in the
// plan's precision, device copies for element-wise work, NCCL collectives on one communicator
// per tensor- and data-parallel group and one per pipeline direction between two ranks (each
// used from one stream only), Adam as a device kernel, buffers from cudaMalloc through the
// caching allocator. The device code is validate/cuda_exec.cu.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <stdexcept>

#include "sim/core/error.hpp"
#include "sim/mesh/rank_mesh.hpp"
#include "validate/executor.hpp"

#ifdef STEPCAST_HAVE_CUDA
#include "validate/cuda_exec.hpp"
#endif
#ifdef STEPCAST_HAVE_MPI
#include <mpi.h>
#endif

namespace stepcast::validate {

#if !defined(STEPCAST_HAVE_CUDA)
std::unique_ptr<Backend> make_cuda_backend(int64_t) { return nullptr; }
#else

namespace {

namespace cx = cudaexec;

int to_int(double x) { return static_cast<int>(std::max<long long>(1, std::llround(x))); }

#ifdef STEPCAST_HAVE_MPI
// A communicator over `members` (global ranks; this rank among them or not), whose NCCL rank
// is the member's index: every rank calls this in the same order (MPI_Comm_split is
// collective over the world).
int make_comm(const std::vector<int64_t>& members, int64_t me) {
  const auto it = std::find(members.begin(), members.end(), me);
  const bool in = it != members.end();
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, in ? 0 : MPI_UNDEFINED, static_cast<int>(me), &sub);
  if (!in) return -1;
  char id[128] = {};
  int r = 0;
  MPI_Comm_rank(sub, &r);
  if (r == 0) cx::unique_id(id);
  MPI_Bcast(id, 128, MPI_CHAR, 0, sub);
  MPI_Comm_free(&sub);
  return cx::comm_init(static_cast<int>(it - members.begin()), static_cast<int>(members.size()), id);
}
#endif

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int64_t rank) : rank_(rank) {}
  ~CudaBackend() override {
    arena_.reset();
    if (open_) cx::close();
  }

  [[nodiscard]] std::string name() const override { return "cuda"; }

  void prepare(const config::RunConfig& rc, const Program& prog) override {
    rc_ = &rc;
    const int devices = cx::device_count();
    if (devices == 0) throw core::UserError("validate --backend cuda: no GPU is visible to rank " + std::to_string(rank_));
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    const int device = static_cast<int>((local ? std::atoll(local) : rank_) % devices);
    cx::Workspace ws;
    ws.dtype = rc.training.precision == hw::Dtype::kFp32 ? cx::Dtype::kFp32
               : rc.training.precision == hw::Dtype::kFp16 ? cx::Dtype::kFp16
                                                           : cx::Dtype::kBf16;
    elem_ = ws.dtype == cx::Dtype::kFp32 ? 4.0 : 2.0;
    WorkspaceNeeds w = workspace_needs(prog);
    w.gemm(reference_.m, reference_.n, reference_.k);
    ws.a = w.a, ws.b = w.b, ws.c = w.c;
    ws.p2p_bytes = static_cast<size_t>(w.p2p_bytes) + 256;
    ws.ring_bytes = std::max(ws.ring_bytes, static_cast<size_t>(w.collective_bytes) + 256);
    ws.marks = prog.step.size() + 1;
    device_memory_ = cx::open(device, ws);
    open_ = true;
    workspace_ = static_cast<double>(3 * (ws.a + ws.b) + ws.c) * elem_ + 2.0 * static_cast<double>(ws.ring_bytes) + static_cast<double>(ws.p2p_bytes);
    arena_ = std::make_unique<Arena>(
        std::min(rc.hardware.hbm_capacity.value(), device_memory_ - workspace_), rank_, [](size_t n) { return cx::device_alloc(n); },
        [](void* p) { cx::device_free(p); });

    if (rc.cluster.num_gpus > 1) make_communicators(rc);
  }

  [[nodiscard]] cost::GemmShape reference_shape() const override { return reference_; }

  // Communicators, created in the same order on every rank: the tensor- and data-parallel
  // groups of every rank, then one per ordered pipeline pair (sender, receiver).
  void make_communicators(const config::RunConfig& rc) {
#ifndef STEPCAST_HAVE_MPI
    throw core::UserError("validate --backend cuda: this build has no MPI, so it runs single-GPU plans only (cluster.num_gpus " +
                          std::to_string(rc.cluster.num_gpus) + ")");
#else
    const mesh::RankMesh mesh(rc.parallel.tp, rc.parallel.cp, rc.parallel.dp, rc.parallel.pp, rc.parallel.ep, rc.parallel.etp);
    for (const auto& grp : mesh.all_groups(mesh::Dim::kTp)) {
      if (grp.size() < 2) continue;
      const int h = make_comm(grp, rank_);
      if (h >= 0) tp_ = h, tp_size_ = static_cast<int>(grp.size());
    }
    for (const auto& grp : mesh.all_groups(mesh::Dim::kDpCp)) {
      if (grp.size() < 2) continue;
      const int h = make_comm(grp, rank_);
      if (h >= 0) dp_ = h, dp_size_ = static_cast<int>(grp.size());
    }
    std::set<std::pair<int64_t, int64_t>> pairs;
    for (int64_t r = 0; r < mesh.world(); ++r) {
      for (const auto& in : build_program(rc, r).step) {
        if (in.kind == Kind::kSend) pairs.insert({r, in.peer});
      }
    }
    for (const auto& [from, to] : pairs) {
      // The sender is rank 0 of the pair's communicator, the receiver rank 1.
      const int h = make_comm({from, to}, rank_);
      if (h >= 0) (rank_ == from ? send_comm_[to] : recv_comm_[from]) = h;
    }
#endif
  }

  double reference_gemm_s(const cost::GemmShape& g, int reps) override { return cx::reference_gemm_s(to_int(g.m), to_int(g.n), to_int(g.k), reps); }


  void allocate_state(const Program& prog) override {
    const int32_t base = prog.buffers;
    weights_ = arena_->alloc(base, prog.weight_bytes);
    grads_ = arena_->alloc(base + 1, prog.gradient_bytes);
    moments_ = static_cast<float*>(arena_->alloc(base + 2, prog.optimizer_bytes));
    if (prog.bucket_buffer_bytes > 0) staging_ = arena_->alloc(base + 3, prog.bucket_buffer_bytes);
    const double local = std::max(1.0, prog.local_params);
    master_ = prog.optimizer_bytes / local > 10.0;  // fp32 master + m + v (12 bytes) vs m + v (8)
    fp32_grads_ = prog.gradient_bytes > 0 && rc_->training.grad_dtype == hw::Dtype::kFp32;
  }

  void run(const Instr& in) override {
    switch (in.kind) {
      case Kind::kGemm:
        for (int i = 0; i < to_int(in.gemm.batch); ++i) cx::gemm(to_int(in.gemm.m), to_int(in.gemm.n), to_int(in.gemm.k));
        return;
      case Kind::kAttention: attention(in.attention, in.backward); return;
      case Kind::kStream: cx::copy_pass(in.bytes); return;
      case Kind::kCollective: {
        const bool tp = in.group == Group::kTp;
        const int comm = tp ? tp_ : dp_;
        const int size = tp ? tp_size_ : dp_size_;
        if (comm < 0 || size <= 1) return;
        void* src = in.category == Category::kDpComm && staging_ && in.collective != cost::Collective::kAllGather ? staging_ : nullptr;
        cx::collective(comm, op_of(in.collective), static_cast<size_t>(in.bytes / elem_), size, src, in.async);
        return;
      }
      case Kind::kJoin: cx::join(); return;
      case Kind::kSend: cx::send(send_comm_.at(in.peer), 1, static_cast<size_t>(in.bytes / elem_)); return;
      case Kind::kRecv: cx::recv(recv_comm_.at(in.peer), 0, static_cast<size_t>(in.bytes / elem_)); return;
      case Kind::kOptimizer: cx::adam(weights_, grads_, moments_, static_cast<size_t>(in.elements), master_, fp32_grads_); return;
      case Kind::kAlloc: arena_->alloc(in.buffer, in.bytes); return;
      case Kind::kFree: arena_->free(in.buffer); return;
    }
  }

  void mark(size_t i) override { cx::mark(i); }
  double finish_step() override {
    cx::synchronize();
    return 0.0;
  }
  double elapsed(size_t i) override { return cx::since(i, i + 1); }
  double since_start(size_t i) override { return cx::since(0, i); }
  [[nodiscard]] MemoryStats memory() const override { return {arena_->peak(), arena_->peak_reserved(), workspace_}; }

 private:
  static cx::Op op_of(cost::Collective c) {
    switch (c) {
      case cost::Collective::kAllReduce: return cx::Op::kAllReduce;
      case cost::Collective::kAllGather: return cx::Op::kAllGather;
      case cost::Collective::kReduceScatter: return cx::Op::kReduceScatter;
      case cost::Collective::kAllToAll: return cx::Op::kAllToAll;
      case cost::Collective::kBroadcast: return cx::Op::kBroadcast;
      default: break;
    }
    throw core::InternalError(std::string("validate: ") + cost::to_string(c) + " is not executed as a group collective");
  }

  // Unfused attention as the cost model describes it: batched QK^T and PV GEMMs with memory
  // passes over the probabilities (four GEMMs with their real shapes in backward).
  void attention(const cost::AttentionShape& a, bool backward) {
    const int batch = to_int(a.batch * a.heads);
    const double scores = a.batch * a.heads * a.sq * a.sk;
    const double passes = 3.0 * elem_ + (rc_->training.dropout ? 2.0 * elem_ + 1.0 : 0.0);
    const int sq = to_int(a.sq), sk = to_int(a.sk), dq = to_int(a.d_qk), dv = to_int(a.d_v);
    if (!backward) {
      for (int i = 0; i < batch; ++i) cx::gemm(sq, sk, dq);
      cx::copy_pass(scores * passes);
      for (int i = 0; i < batch; ++i) cx::gemm(sq, dv, sk);
      return;
    }
    for (int i = 0; i < batch; ++i) cx::gemm(sk, dv, sq);
    for (int i = 0; i < batch; ++i) cx::gemm(sq, sk, dv);
    cx::copy_pass(scores * passes * 2.0);
    for (int i = 0; i < batch; ++i) cx::gemm(sq, dq, sk);
    for (int i = 0; i < batch; ++i) cx::gemm(sk, dq, sq);
  }

  int64_t rank_;
  const config::RunConfig* rc_ = nullptr;
  bool open_ = false;
  double elem_ = 2, device_memory_ = 0, workspace_ = 0;
  cost::GemmShape reference_{8192, 8192, 8192, 1};  // ~1-5 ms on current GPUs
  std::unique_ptr<Arena> arena_;
  int tp_ = -1, dp_ = -1, tp_size_ = 1, dp_size_ = 1;
  std::map<int64_t, int> send_comm_, recv_comm_;
  void* weights_ = nullptr;
  void* grads_ = nullptr;
  void* staging_ = nullptr;
  float* moments_ = nullptr;
  bool master_ = true, fp32_grads_ = false;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int64_t rank) { return std::make_unique<CudaBackend>(rank); }

#endif

}  // namespace stepcast::validate
