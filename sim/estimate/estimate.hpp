// stepcast analytical step estimate: the fast, pure pass the planner ranks layouts with.
//
// Per stage and micro-batch, forward and backward times come from the workload (compute plus
// the TP/CP/EP communication left exposed after overlap). The pipeline then costs
//   T_pipe = m * t_max + (sum_s t_s - t_max) * bubble_scale + exposed p2p
// with t_s = forward + backward of stage s for one micro-batch; bubble_scale is 1 for GPipe and
// 1F1B, 1/v for interleaved, and (F + B - 2W)/(F + B) for ZB-H1 (W = weight-gradient work; with
// m < p at least the chain (m + p - 1)(F + B - W) + W); uniform stages give the textbook bubble
// (p-1)/(m+p-1) (divided by v when interleaved).
// Data-parallel gradient reduction overlaps the last micro-batch's backward in buckets (the first
// bucket small, then bucket_mb); what does not fit behind it is exposed. ZeRO-1/2 reduce-scatter
// gradients and all-gather updated parameters (overlapped with the next forward when
// param_gather_overlap); ZeRO-3/FSDP gather each layer's weights one layer ahead of use and
// reduce-scatter its gradients: every micro-batch, exposed where a pass's traffic outlasts its
// compute, or (parameters unsharded between micro-batches) once per step on the pipeline's fill
// and drain. The
// optimizer is HBM-bound over the local shard.
// MFU = model FLOPs (6 * N * tokens + causal attention, no recompute) / (step * GPUs * dense
// peak of the training precision). HFU counts recomputed forward work too.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sim/config/run_config.hpp"
#include "sim/cost/collectives.hpp"
#include "sim/memory/ledger.hpp"

namespace stepcast::estimate {

class WorkloadCache;  // sim/estimate/workload.hpp

struct Breakdown {
  double compute = 0;         // seconds of compute on the critical path (incl. recompute)
  double recompute = 0;       // part of compute spent recomputing forward work
  double host = 0;            // part of compute the GPU waits for host-side work (MoE per-expert)
  std::map<std::string, double> exposed_comm;  // tp, cp, ep, pp, dp, offload (activation copies)
  double bubble = 0;
  double optimizer = 0;
};

struct StepEstimate {
  double step_time_s = 0;
  double tokens_per_s = 0;
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;
  double hfu = 0;
  double tflops_per_gpu = 0;  // model TFLOP/s per GPU
  double bubble_fraction = 0; // bubble time / pipeline time
  double model_flops_per_step = 0;
  double pipeline_time_s = 0;
  std::vector<double> stage_fwd_s, stage_bwd_s;  // per micro-batch
  Breakdown breakdown;
  memory::MemoryLedger memory;
};

// Model FLOPs of one optimizer step (6*N*D over the active parameters plus causal attention).
double model_flops_per_step(const config::RunConfig& rc);

StepEstimate estimate_step(const config::RunConfig& rc);
// The same with the run's memory ledger already computed (the planner checks it first).
StepEstimate estimate_step(const config::RunConfig& rc, memory::MemoryLedger ledger);
// And with the layer costs of a matching earlier layout when `cache` has them (the planner's
// search; the result is the same as without).
StepEstimate estimate_step(const config::RunConfig& rc, memory::MemoryLedger ledger, WorkloadCache* cache);

// One micro-batch through one pipeline stage: the layer costs of its transformer layers (dense
// and MoE) plus the embedding on the first stage and the output layer on the last, summed.
struct StageCost {
  double fwd = 0, bwd = 0;           // forward / backward time incl. exposed comm
  double bwd_weight = 0;             // weight-gradient compute (zero-bubble schedules split it)
  double compute = 0, recompute = 0; // compute time (incl. recompute) and its recompute part
  double host = 0;                   // ... and its host-side part
  double tp = 0, cp = 0, ep = 0;     // exposed communication by kind
  double fwd_nic = 0, bwd_nic = 0;   // exposed communication over the NIC (forward / backward)
  double tp_nic = 0, cp_nic = 0, ep_nic = 0;  // ... by kind (forward + backward)
  double hardware_flops = 0, model_flops = 0;
  // The compute kernel in flight during the forward / backward of the stage's transformer
  // layers (their kernels weighted by compute time): what a data-parallel bucket or a ZeRO-3
  // layer collective issued beside them waits for. The embedding's and the output layer's
  // GEMMs, far longer on a large vocabulary, run before the first bucket is due or after the
  // last, so they are left out.
  double fwd_kernel = 0, bwd_kernel = 0;
};
class WorkloadBuilder;
StageCost stage_cost(const config::RunConfig& rc, const WorkloadBuilder& wb, int64_t stage);

// A data-parallel collective over a sharding group; under hybrid sharding a reduce-scatter is
// followed by the all-reduce of the reduced shard across the replicas (same stream, in order).
core::Duration sharded_collective_time(cost::Collective c, core::Bytes bytes, const mesh::Placement& shard, const mesh::Placement& replicate,
                                       const hw::HardwareProfile& hw);

// Optimizer step time of one stage (HBM-bound over the local shard plus kernel launches).
double optimizer_time_s(const config::RunConfig& rc, const memory::StageMemory& st);

// Tied embeddings split across the pipeline (the head off stage 0, ZeRO 0-2, not under LoRA):
// each first-stage rank and its peer on the head's stage all-reduce the embedding gradient
// (vocab/tp x hidden in the gradient dtype) before the optimizer (Megatron-Core's
// _allreduce_word_embedding_grads, DeepSpeed's ReduceTiedGrads). The bytes and the pair's
// placement; nullopt when the run has no such reduction.
struct TiedEmbeddingSync {
  double bytes = 0;
  mesh::Placement pair{};
};
std::optional<TiedEmbeddingSync> tied_embedding_sync(const config::RunConfig& rc);

}  // namespace stepcast::estimate
