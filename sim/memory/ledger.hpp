// stepcast memory ledger: bytes per GPU on each pipeline stage.
//
// Model state per parameter (mixed precision): weights w (2 bytes bf16/fp16, 4 fp32), gradients
// g (grad_dtype), optimizer o (Adam: 8 for m and v, + 4 fp32 master when master_weights; SGD
// momentum 4 + master 4). ZeRO over N data-parallel ranks (dp*cp for dense parameters, the
// expert-data-parallel group for experts; each divided by parallel.dp_replicate under hybrid
// sharding, whose replicas each hold a full copy of the sharded state):
//   stage 0: w + g + o;  1: w + g + o/N;  2: w + (g + o)/N;  3 / FSDP: (w + g + o)/N
// (Adam, bf16: 16 bytes, stage 1 2+2+12/N, stage 2 2+14/N, stage 3 16/N). ZeRO-3 adds gather
// buffers: the largest unit gathered at once (a layer, or the embedding or output layer when
// larger) and its unsharded gradient, plus a prefetched layer unless gathers run in line
// (param_gather_overlap off); FSDP without
// reshard_after_forward (ZeRO-3 too) keeps every unsharded weight (compute dtype, beside the resident shard)
// resident through backward. lp_grads (DeepSpeed BF16 optimizer) keeps 16-bit gradients beside
// the fp32 buffer and, while adding them in, one fp32 copy of the largest parameter tensor.
//
// Activations per layer and micro-batch (Korthikanti et al. 2022, generalised to GQA, gated MLPs
// and MoE): with e bytes per element, per token:
//   replicated across TP unless SP: 2 norm inputs (2eh), QKV input (eh), MLP input (eh),
//     dropout masks (2h, 1 byte each, when dropout is on)
//   split by TP: Q, K, V (e*(q + 2kv)), attention output (e*q), MLP: gated 3ef, plain 2ef
//   attention scores (unfused only, dropped by selective recompute): heads*s*(e + 1 + e)
//   selective recompute's other modules drop what they rebuild: layernorm the norm outputs of
//   separate norms (MoE pre-MLP, MLA input), moe_act each routed copy's activation output,
//   mlp a dense MLP's activations, moe the routed copies and routing probabilities,
//   shared_experts theirs, mla_up_proj MLA's Q, K and V
//   flash attention keeps only the fp32 log-sum-exp (4 bytes per head and token)
// For GPT (f = 4h, kv = heads, plain MLP, dropout, unfused) this is s*b*h*(34 + 5*a*s/h),
// with TP t: s*b*h*(10 + 24/t + 5*a*s/(h*t)), with SP: s*b*h/t*(34 + 5*a*s/h).
// Full recompute keeps only each layer's input (2sbh, /t with SP) plus one layer rebuilt at a
// time. CP divides s. Micro-batches in flight on stage r (0-based) of p: GPipe m; 1F1B and
// ZB-H1 min(m, p - r); interleaved min(m*v, 2(p - r - 1) + (v - 1)p + 1) chunks of L/(p*v) layers.
// A model with an embedding norm (BLOOM) keeps its input on stage 0 per micro-batch in flight.
// The last stage keeps the inputs of the final norm and the LM head per micro-batch in flight
// and holds one micro-batch's logits (all m under GPipe) (16-bit output + fp32 copy for the loss;
// eager PyTorch cross-entropy keeps three fp32 copies at its peak). A runtime that keeps stage
// outputs until the step ends (torch.distributed.pipelining returns the last stage's outputs
// from step()) holds all m of them at the last micro-batch: the last stage's 16-bit logits
// (which then leave the loss working set), and before PyTorch 2.8 every other stage's
// boundary output per chunk too. Peak = resident state + max(layer backward working set, loss
// working set): the two are live at different times.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "sim/config/run_config.hpp"
#include "sim/core/units.hpp"

namespace stepcast::memory {

struct StageMemory {
  int64_t stage = 0;
  int64_t layers = 0;
  double params = 0;          // parameters held by one rank of this stage (before ZeRO sharding)
  double dense_params = 0;    // of which sharded over dp*cp (non-expert)
  double expert_params = 0;   // of which sharded over the expert-data-parallel group
  // Parameters that train (gradients, optimizer state, data-parallel reduction): all of them,
  // or under LoRA (training.lora) only the adapters, which params and dense_params include.
  double trainable_dense_params = 0, trainable_expert_params = 0;
  // QLoRA (training.lora.base_quantization nf4): the transformer layers' frozen weights stored in
  // 4 bits (config::kNf4BytesPerWeight), which the ZeRO-3 / FSDP gathers carry packed; 0 otherwise.
  double quantized_dense_params = 0, quantized_expert_params = 0;
  // The bytes one gather of `params` dense parameters of this stage carries (quantized layer
  // weights packed, the rest in the gather dtype); `expert` for routed experts.
  [[nodiscard]] double gathered_bytes(double params, double gather_bytes, bool expert = false) const {
    const double all = expert ? expert_params : dense_params;
    const double q = expert ? quantized_expert_params : quantized_dense_params;
    const double share = all > 0 ? q / all : 0.0;
    return params * (share * config::kNf4PackedBytesPerWeight + (1.0 - share) * gather_bytes);
  }
  [[nodiscard]] double trainable_params() const { return trainable_dense_params + trainable_expert_params; }
  double largest_layer_params = 0;
  core::Bytes weights, gradients, optimizer;
  core::Bytes activations;    // stored activations for all in-flight micro-batches
  core::Bytes transient;      // backward working set (one layer's worth) and recompute buffer
  core::Bytes logits;         // last stage: logits of one micro-batch
  core::Bytes kept_outputs;   // stage outputs kept until the step ends (keep_step_outputs), all m
  core::Bytes buffers;        // communication buckets, ZeRO-3 gather buffers
  core::Bytes host;           // host memory this rank's offloaded state takes (parallel.offload)
  core::Bytes runtime;        // CUDA context and NCCL communicators (from the hardware profile)
  core::Bytes nccl;           // of which NCCL communicator buffers
  int64_t communicators = 0;  // NCCL communicators this rank joins (groups of 3+ ranks)
  int64_t pair_communicators = 0;  // and 2-rank ones
  int64_t alltoall_peers = 0;      // peers connected by all-to-alls (EP dispatch, Ulysses CP)
  int64_t inflight_microbatches = 0;  // in layer-stack units for interleaved (chunks / v)
  core::Bytes activation_per_layer;   // one layer, one micro-batch
  [[nodiscard]] core::Bytes model_state() const { return weights + gradients + optimizer; }
  // Peak: the loss (logits and its fp32 copies) and the backward working set of a layer are
  // live at different times (the loss is released before the last layer's backward starts),
  // so the larger of the two adds to what is resident throughout.
  [[nodiscard]] core::Bytes resident() const {
    return weights + gradients + optimizer + activations + kept_outputs + buffers + runtime;
  }
  [[nodiscard]] core::Bytes total() const { return resident() + std::max(transient, logits); }
};

struct MemoryLedger {
  std::vector<StageMemory> stages;
  core::Bytes capacity;
  int64_t peak_stage = 0;
  [[nodiscard]] core::Bytes peak() const { return stages[static_cast<size_t>(peak_stage)].total(); }
  // Host memory of one node the offloaded state takes (its GPUs' shares of the largest stage's)
  // against what a node has (hardware.host.memory); 0 without offload.
  core::Bytes host_per_node, host_capacity;
  [[nodiscard]] bool host_fits() const { return host_per_node <= host_capacity; }
  [[nodiscard]] bool fits() const { return peak() <= capacity && host_fits(); }
};

// Bytes per parameter of each state under the run's precision and optimizer (unsharded).
struct StateBytes {
  double weights = 2, gradients = 2, optimizer = 12;
  [[nodiscard]] double total() const { return weights + gradients + optimizer; }
};
StateBytes state_bytes(const config::Training& t);

// Per-GPU model-state bytes per parameter under ZeRO stage z over n ranks.
double zero_bytes_per_param(const StateBytes& s, int zero_stage, int64_t n);

// Activation bytes of one transformer layer for one micro-batch on one rank.
// LoRA adapter parameters of one layer on one rank (0 without training.lora): rank x (input +
// output width) per targeted linear layer, with each width as that rank holds it (the TP-split
// side divided by tp, the other whole; MLA's down-projections are not split).
double lora_layer_params(const config::RunConfig& rc, model::LayerKind kind);
// Per adapter, the widths (input, output) of the linear layers one layer adapts on one rank, in
// forward order; lora_layer_params is rank x the sum of their widths.
// `whole`: the unsplit widths (as with tp 1), for counting the model's adapter parameters.
std::vector<std::pair<double, double>> lora_adapted_linears(const config::RunConfig& rc, model::LayerKind kind, bool whole = false);
// Every layer's adapters, unsplit: the adapter parameters the model trains.
double lora_model_params(const config::RunConfig& rc);
core::Bytes layer_activation_bytes(const config::RunConfig& rc, bool moe_layer);
core::Bytes layer_activation_bytes(const config::RunConfig& rc, model::LayerKind kind);

// Extra bytes live while a context-parallel attention runs its backward, beyond one rank's own
// layer activations: gathered K/V of every CP rank (all-gather variants) and, for PyTorch's
// all-gather rotation, the fp32 dQ/dK/dV accumulators and the ring's dK/dV buffers. 0 without
// CP, for the p2p ring and for Ulysses.
core::Bytes cp_attention_working_bytes(const config::RunConfig& rc);

// Bytes per token of one layer kept under op-level selective checkpointing.
double selective_op_bytes_per_token(const config::RunConfig& rc, bool moe_layer);
double selective_op_bytes_per_token(const config::RunConfig& rc, model::LayerKind kind);

// Live bytes per logit at the loss's peak (compute-dtype logits plus the loss's fp32 copies).
double loss_peak_bytes_per_logit(const config::RunConfig& rc);

// Micro-batches (in units of a full stage's layers) in flight on `stage`.
// NCCL communicators a rank of `stage` joins in a training step: the world group (barriers), and
// each group its step communicates in: TP, CP, data-parallel (over dp*cp), EP and the expert
// data-parallel group, under hybrid sharding the shard and replicate groups (a group of every
// rank is the world group), the pipeline neighbours and,
// with tied embeddings under pipeline parallelism, the first/last-stage embedding pair.
// Returns {groups of 3+ ranks, 2-rank groups}.
std::pair<int64_t, int64_t> nccl_communicators(const config::RunConfig& rc, int64_t stage);

// Peers a rank's all-to-alls connect (each on every channel): the expert-parallel group's under
// the all-to-all dispatcher, and the context-parallel group's under Ulysses.
int64_t nccl_alltoall_peers(const config::RunConfig& rc);

// Bytes of the flex dispatcher's (DeepEP / HybridEP) own communication buffers on each rank
// (0 without it): NVLink receive queues for the node's peers and, when the expert-parallel
// group leaves the node, RDMA queues per remote node.
double flex_dispatch_buffer_bytes(const config::RunConfig& rc);

// Elements of the largest single parameter tensor a rank holds (fused QKV, first MLP
// projection, one expert, or the vocabulary matrix on the stages that hold it).
double largest_parameter_tensor(const config::RunConfig& rc, bool holds_vocab);

double inflight_microbatches(const config::RunConfig& rc, int64_t stage);

// Bytes of one micro-batch's output of chunk `chunk` of pipeline stage `stage` that the runtime
// keeps from the chunk's forward until the step ends (parallel.keep_step_outputs): the 16-bit
// logits for the model's last chunk (not under GPipe, which holds all m logits anyway), the
// stage-boundary hidden states for the others under kAllStages; 0 otherwise.
core::Bytes chunk_kept_output_bytes(const config::RunConfig& rc, int64_t stage, int64_t chunk);

// One micro-batch's saved activations of the layers of chunk `chunk` of pipeline stage `stage`.
core::Bytes chunk_layer_activation_bytes(const config::RunConfig& rc, int64_t stage, int64_t chunk);
// What one layer keeps for one micro-batch between its input-gradient pass and its deferred
// weight-gradient pass (ZB-H1): every linear layer's input and the gradient of its output; per
// chunk, the last stage's chunk adds the LM head (and multi-token-prediction modules).
core::Bytes layer_weight_grad_bytes(const config::RunConfig& rc, bool moe_layer);
core::Bytes layer_weight_grad_bytes(const config::RunConfig& rc, model::LayerKind kind);
core::Bytes chunk_layer_weight_grad_bytes(const config::RunConfig& rc, int64_t stage, int64_t chunk);
// ... of the LM head (and multi-token-prediction modules) on the last stage.
core::Bytes output_weight_grad_bytes(const config::RunConfig& rc);
// The stage's saved layer activations at its peak: in-flight micro-batches times the stage's
// layers; under the interleaved schedule the in-flight (chunk, micro-batch) passes are those
// of Megatron's order (the k-th forward runs chunk (k / pp) mod vpp), each with its chunk's
// own layers; under ZB-H1 the weight-gradient inputs of the passes each stage holds back are
// counted until their W.
core::Bytes stage_layer_activation_bytes(const config::RunConfig& rc, int64_t stage);

// What stage `stage` of a schedule's order holds at each moment, as counts per chunk: in each
// entry the first v count chunk c's forwards whose activations are held (stored until the
// chunk's backward), the last v its split backwards whose weight-gradient inputs are held (until
// their W). Only the entries no other entry bounds from above in every count are kept: held
// bytes are these counts times non-negative per-chunk sizes, so the largest over them is the
// largest over the whole walk (stage_layer_activation_bytes). Each order is walked once per
// thread (the planner meets the same ones across many layouts).
const std::vector<std::vector<int32_t>>& held_envelope(config::Schedule sched, int64_t pp, int64_t stage, int64_t m, int64_t v);

MemoryLedger compute_ledger(const config::RunConfig& rc);
// One layer's parameters on a rank before ZeRO sharding: {dense (split over tp), routed experts
// (split over ep and etp)}, as the ledger counts them.
std::pair<double, double> layer_param_split(const config::RunConfig& rc, int64_t layer);

// Under recompute full: the fewest layers per virtual stage (parallel.recompute_layers) whose
// ledger peak stays within `usable` of the GPU's memory, by bisection (memory falls as the
// count grows). 0 means every layer: all of them are needed, or even that does not fit.
int64_t fewest_recompute_layers(const config::RunConfig& rc, double usable = 1.0);
// A stage's layers under activation offload (parallel.activation_offload_layers): how many,
// the saved tensors of one micro-batch they send to the host, and the two layers' worth the
// GPU keeps as copy buffers (the one going down while the next runs; in backward the one
// prefetched while its successor runs).
struct OffloadedActivations {
  int64_t layers = 0;
  core::Bytes bytes{0}, buffers{0};
};
OffloadedActivations offloaded_activations(const config::RunConfig& rc, int64_t stage);
// The fewest layers per stage whose activations, offloaded to the host
// (parallel.activation_offload_layers), bring the ledger's peak within `usable` of the GPU's
// memory with the host's memory holding them; 0 when none does (or offload cannot apply: a
// run that recomputes, vpp > 1, zb-h1, or a profile without a host).
int64_t fewest_offload_layers(const config::RunConfig& rc, double usable = 1.0);

// The share of memory measured runs reserve beyond the ledger's live tensors: PyTorch's caching
// allocator keeps freed blocks and fragments (torchtitan's reserved peaks, BLOOM's nvidia-smi
// readings: up to 16% above the ledger, reports/accuracy.md).
inline constexpr double kAllocatorReserve = 0.10;

// For a layout that does not fit: the lightest full recomputation that makes it fit, as the
// run-file settings to write and the memory it leaves free ("it fits with parallel.recompute
// "full" and parallel.recompute_layers 12 (3.10 GiB free)"), else the lighter CPU offload that
// does (sharded state and a profile with a host); empty when neither makes it fit.
std::string fit_hint(const config::RunConfig& rc);

}  // namespace stepcast::memory
