// stepcast validate: the program one rank executes for one optimizer step.
//
// The program is built from the same objects the simulator uses (WorkloadBuilder's operators
// with their exact shapes, the stage's pipeline schedule order, the layer slots and their
// gradient buckets, the memory ledger's state bytes), so a backend (Eigen + MPI on CPUs)
// runs exactly what was predicted:
//   - per action of the stage's schedule: receive the input from the previous virtual stage,
//     run every layer's forward (or backward / weight-gradient) operators, send the output;
//   - operators: GEMMs with their per-rank shapes, attention (unfused: batched QK^T and PV
//     GEMMs with memory passes over the probabilities), element-wise memory passes of the
//     op's bytes, TP collectives on the tensor-parallel group; mixture-of-experts layers as the
//     workload shapes them: the router GEMM, permutation passes, the dispatch and combine
//     (all-to-all, or all-gather and reduce-scatter) on the expert-parallel group and the local
//     experts' GEMMs at the busiest rank's tokens per expert; context parallelism's K/V
//     exchanges (ring hops, all-gathers and reduce-scatters, all-to-alls) on the
//     context-parallel group around an attention of the rank's queries against the whole
//     sequence;
//   - after the last backward: gradient buckets (all-reduce, or reduce-scatter under ZeRO-1/2)
//     on the data-parallel group (routed-expert buckets on the expert-data-parallel group), the
//     optimizer over the local shard, and under ZeRO-1/2 the all-gather of the updated weights
//     in bucket-sized pieces; under hybrid sharding (parallel.dp_replicate) state is sharded
//     within a replica and every reduce-scatter is followed by the all-reduce of the reduced
//     shard across the replicas, as the simulation issues them.
// Memory is part of the program: forward operators allocate what autograd keeps for backward
// (Op::saved_bytes; the probabilities unless selective recompute drops them; only the layer
// input under full recompute), a layer's backward allocates the gradients of its saved tensors
// (and under recompute the rebuilt activations) and frees everything at its end, the output
// layer holds the logits and the loss's fp32 copy until its backward ends. Model state
// (weights, gradients, optimizer moments) is allocated once, sharded as the ZeRO stage says.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/config/run_config.hpp"
#include "sim/cost/collectives.hpp"
#include "sim/cost/compute.hpp"

namespace stepcast::validate {

// The plan needs more memory than the device has (exit code 3).
class DoesNotFit : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Kind : uint8_t {
  kGemm,        // gemm shape (batch independent GEMMs)
  kAttention,   // attention shape, forward or backward
  kStream,      // a memory pass moving `bytes` (read + write)
  kCollective,  // `collective` of `bytes` (nccl-tests convention) over `group`
  kSend,        // pipeline send of `bytes` to `peer` with `tag`
  kRecv,        // pipeline receive
  kOptimizer,   // Adam over `elements` local parameters
  kAlloc,       // allocate buffer `buffer` of `bytes`
  kFree,        // free buffer `buffer`
  kJoin,        // wait for the asynchronous (gradient-reduction) stream
};

// kDp: the group that shards ZeRO state (data-parallel ranks times context-parallel ranks, or
// under hybrid sharding the replica's share of them); kDpReplicate: the same shard position
// in every replica (all-reduces each reduced gradient shard under hybrid sharding).
// kEp: the expert-parallel group (token dispatch and combine); kEdp: the expert-data-parallel
// group that reduces routed-expert gradients (its shard group under hybrid sharding), and
// kEdpReplicate its replicas.
// kCp: the context-parallel group (its send/receive is one ring hop: to the next rank, from the
// previous).
enum class Group : uint8_t { kTp, kDp, kEp, kEdp, kCp, kDpReplicate, kEdpReplicate };
inline constexpr size_t kGroups = 7;

// Where the time of an instruction is booked.
enum class Category : uint8_t { kCompute, kTpComm, kPpComm, kDpComm, kOptimizer, kEpComm, kCpComm, kCount };
const char* to_string(Category c);

struct Instr {
  Kind kind = Kind::kStream;
  Category category = Category::kCompute;
  uint32_t name = 0;  // index into Program::names
  cost::GemmShape gemm;
  cost::AttentionShape attention;
  bool backward = false;
  // Collectives: may run on a second stream (gradient buckets launched as their gradients
  // become final); a later kJoin waits for them.
  bool async = false;
  cost::Collective collective = cost::Collective::kAllReduce;
  Group group = Group::kTp;
  double bytes = 0;
  double elements = 0;
  int32_t peer = -1, tag = 0;
  int32_t buffer = -1;
  int32_t microbatch = -1, layer = -2;
};

struct Program {
  int64_t rank = 0;
  int32_t stage = 0;
  std::vector<std::string> names;
  std::vector<Instr> step;          // one optimizer step
  int32_t buffers = 0;              // distinct buffer ids used by kAlloc/kFree
  // Model state allocated once before the first step (bytes on this rank).
  double weight_bytes = 0, gradient_bytes = 0, optimizer_bytes = 0, bucket_buffer_bytes = 0;
  double local_params = 0;          // parameters the optimizer updates on this rank
  // Global ranks, ascending (see Group).
  std::vector<int64_t> tp_group, dp_group, ep_group, edp_group, cp_group, dp_replicate_group, edp_replicate_group;
  [[nodiscard]] const std::vector<int64_t>& group(Group g) const {
    switch (g) {
      case Group::kTp: return tp_group;
      case Group::kDp: return dp_group;
      case Group::kEp: return ep_group;
      case Group::kEdp: return edp_group;
      case Group::kDpReplicate: return dp_replicate_group;
      case Group::kEdpReplicate: return edp_replicate_group;
      case Group::kCp: break;
    }
    return cp_group;
  }
  [[nodiscard]] double state_bytes() const { return weight_bytes + gradient_bytes + optimizer_bytes + bucket_buffer_bytes; }
};

// What the executors support; throws UserError naming the feature otherwise.
void check_executable(const config::RunConfig& rc, const std::string& backend);

// The step program of global rank `rank`.
Program build_program(const config::RunConfig& rc, int64_t rank);

// What a backend sizes its workspace by: the largest GEMM operands and result (elements) over
// the program's GEMMs and attention (QK^T, PV and the backward products), and the largest
// collective and pipeline transfer (bytes).
struct WorkspaceNeeds {
  size_t a = 1, b = 1, c = 1;
  double collective_bytes = 0, p2p_bytes = 0;
  void gemm(double m, double n, double k);
};
WorkspaceNeeds workspace_needs(const Program& p);

// Peak of live bytes over the program (state + the allocations' high-water mark): what the
// executor's allocator must reach when it runs the program.
double program_peak_bytes(const Program& p);

// The run a backend executes. On CPUs each rank is one core and shared-memory MPI copies with
// the CPU, so gradient buckets and the ZeRO parameter all-gathers run after the pipeline, not
// overlapped (grad_reduce_overlap and param_gather_overlap off); the CUDA executor launches
// each bucket on a second stream as its gradients become final when grad_reduce_overlap is on
// (the parameter all-gathers stay after the optimizer, param_gather_overlap off). The
// simulation is told the same, so prediction and execution describe one schedule.
config::RunConfig executed_run(config::RunConfig rc, const std::string& backend);

}  // namespace stepcast::validate
