// stepcast run file: model + hardware + cluster + training + parallel layout.
//
// Parsed once into plain structs and validated as a whole; every problem is reported with its
// JSON path, the bad value and what is allowed (ConfigError). Derived quantities (dp when
// omitted, micro-batches per step, layers per pipeline stage, padded vocabulary) are computed
// here so every consumer sees the same numbers.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "models/model_spec.hpp"
#include "sim/config/hardware.hpp"
#include "sim/core/json_reader.hpp"

namespace stepcast::config {

enum class Optimizer { kAdam, kSgd };
enum class Recompute { kNone, kSelective, kSelectiveOp, kFull };
// What recompute "selective" rebuilds in backward instead of keeping (Megatron-Core's
// --recompute-modules): bit flags over these modules.
enum RecomputeModule : uint32_t {
  kRecomputeCoreAttn = 1u << 0,     // the attention core (only unfused attention keeps anything)
  kRecomputeMoeAct = 1u << 1,       // the routed experts' activation
  kRecomputeLayernorm = 1u << 2,    // norms that are separate modules (MoE pre-MLP norm, MLA input norm)
  kRecomputeMlaUpProj = 1u << 3,    // MLA up-projections and RoPE (their Q, K, V)
  kRecomputeMlp = 1u << 4,          // a dense layer's whole MLP
  kRecomputeMoe = 1u << 5,          // a MoE layer's whole MoE block (router to combine)
  kRecomputeSharedExperts = 1u << 6,
};
// Module names in run files and output, in flag order.
const std::vector<std::string>& recompute_module_names();
enum class LossImpl { kFused, kEager };
// kZbV: the zero-bubble V schedule (Qi et al. 2024, torch.distributed.pipelining's
// ScheduleZBVZeroBubble): two chunks per stage placed in a V, backward split into input- and
// weight-gradient work. kDualPipeV: DeepSeek's DualPipe folded into the same V (DualPipeV, as
// torch.distributed.pipelining's ScheduleDualPipeV orders it): mostly whole backwards paired
// with another micro-batch's forward, split ones only where they fill the cool-down.
enum class Schedule { kGpipe, kOneFOneB, kInterleaved, kZbH1, kZbV, kDualPipeV };
// Schedules that split the backward into input-gradient (B) and weight-gradient (W) passes.
[[nodiscard]] inline bool splits_backward(Schedule s) {
  return s == Schedule::kZbH1 || s == Schedule::kZbV || s == Schedule::kDualPipeV;
}
// kFlash: the profile's fused attention kernel (cuDNN / FlashAttention-3 class on Hopper);
// kFlash2: FlashAttention-2 (PyTorch SDPA's flash backend), slower on Hopper; kTriton: the
// FlashAttention kernel written in Triton (flash_attn_triton.py, which llm-foundry's MPT runs
// as attn_impl: triton), slower still, costed only on profiles that measured it.
enum class AttentionImpl { kFlash, kFlash2, kUnfused, kTriton };
// Context-parallel exchange of K/V: kRing (p2p ring, each hop hidden behind a block), kAllGather
// (gather every shard, one attention, reduce-scatter dK/dV), kUlysses (all-to-all of heads),
// kRotateAllGather (the ring loop of blocks and online-softmax merges whose K/V shards arrive by
// one all-gather issued before the first block; dK/dV accumulate in fp32 and travel the ring;
// PyTorch context_parallel's default rotation).
enum class CpComm { kRing, kAllGather, kUlysses, kRotateAllGather };
// What a pipeline runtime keeps of each micro-batch's stage output after its backward, until the
// step ends: nothing (Megatron, DeepSpeed), the model's last stage's outputs (the logits), which
// torch.distributed.pipelining keeps so that step() can return them merged, or every stage's
// outputs (torch.distributed.pipelining before PyTorch 2.8, pytorch/pytorch PR 153383).
enum class StepOutputs { kNone, kLastStage, kAllStages };
// How data-parallel gradient buckets are formed. PyTorch DDP: a first bucket of 1 MB, then
// bucket_mb buckets on every stage, across virtual-pipeline chunks. Megatron-Core: one DDP per
// model chunk (no bucket spans two), bucket_mb buckets only on the first pipeline stage's
// first chunk, and a single bucket for every other chunk and stage (their reductions are off
// the critical path), no small first bucket.
enum class BucketLayout { kDdp, kMegatron };
// CPU offload of model state (DeepSpeed ZeRO-Offload / offload_param, PyTorch FSDP CPUOffload):
// optimizer: each rank's optimizer state (fp32 master and moments) and fp32 gradient shard live
//   in host memory and the optimizer step runs on the CPU; each reduced gradient shard goes to
//   the host after its reduction, the updated 16-bit weights come back beside the CPU step.
// params: also the parameter shard (ZeRO-3 / FSDP); every gather first copies the shard up.
enum class Offload { kNone, kOptimizer, kParams };
std::string to_string(Offload o);
// kFlex: DeepEP / HybridEP (Megatron-Core's flex dispatcher): a token crosses the network once
// per destination node and is forwarded to its experts there over the node fabric.
enum class MoeDispatcher { kAllToAll, kAllGather, kFlex };

// How tokens reach the experts of a MoE layer: the dispatcher, the expert capacity and the
// routing imbalance. Balanced dropless routing with the all-to-all dispatcher by default.
struct MoeRouting {
  bool given = false;  // the run file has a parallel.moe block
  MoeDispatcher dispatcher = MoeDispatcher::kAllToAll;
  // Tokens an expert accepts per micro-batch, as a multiple of the balanced mean T*k/E;
  // 0 = dropless (every routed token is processed). Tokens above capacity are dropped.
  double capacity_factor = 0;
  bool pad_to_capacity = false;  // every expert computes exactly its capacity (drop-and-pad)
  // Imbalance: a given ratio of the busiest expert's tokens to the mean (1 = balanced), or a
  // seeded lognormal popularity over experts drawn per MoE layer (sigma > 0).
  double max_over_mean = 1.0;
  double sigma = 0;
  uint64_t seed = 1;
  // What hides dispatch and combine: nothing; the shared experts' computation (Megatron-Core
  // moe_shared_expert_overlap); or the computation of another micro-batch running at the same
  // time (DeepSeek's DualPipe, Megatron's combined 1F1B A2A overlap), which hides up to the
  // layer's whole attention and expert compute.
  enum class Overlap { kNone, kSharedExperts, kMicroBatch };
  Overlap overlap = Overlap::kNone;
  // Node-limited routing (DeepSeek-V3: at most 4 nodes per token): a token crosses the network
  // once per destination node and is forwarded to its experts there over the node fabric.
  // 0 = unlimited, every routed copy travels on its own.
  int64_t max_nodes_per_token = 0;
  // Host time per local expert and MoE layer, forward and backward together, that the expert
  // block adds to the layer (seconds): a grouped-GEMM path that handles each expert's tensors
  // one by one (Transformer Engine's GroupedLinear under Megatron-Core: per-expert splits,
  // allocations, quantization and GEMM launches) while the dropless routing's token counts
  // keep the host from running ahead. 0 for a single fused grouped kernel.
  double expert_overhead = 220e-6;
  bool operator==(const MoeRouting&) const = default;
};

std::string to_string(Recompute r);
struct Parallel;
// The recompute mode as printed: "full(N)" when full recomputation covers the first N layers
// of each virtual stage.
std::string recompute_label(const Parallel& p);
// What a layout keeps in host memory: "optimizer", "params", "activations(N)" or both joined
// by "+"; empty without offload.
std::string offload_label(const Parallel& p);
// The modules recompute selective rebuilds, in flag order (empty unless selective).
std::vector<std::string> recompute_module_list(const Parallel& p);
std::string to_string(Schedule s);
std::string to_string(Optimizer o);
std::string to_string(CpComm c);
std::string to_string(AttentionImpl a);  // the run file's training.attention word

struct Cluster {
  int64_t num_gpus = 0;
  int64_t gpus_per_node = 0;
  [[nodiscard]] int64_t num_nodes() const { return (num_gpus + gpus_per_node - 1) / gpus_per_node; }
};

// LoRA (low-rank adaptation, parameter-efficient fine-tuning): the base model is frozen and
// only low-rank adapters beside the targeted linear layers train (A: input width x rank, B: rank x
// output width; under TP each adapter is split the way its layer is on the split side and
// replicated on the rank side). Frozen layers skip their weight-gradient GEMMs and keep no
// gradients or optimizer state; a frozen linear that carries no adapter keeps no input for
// backward either.
enum LoraTarget : uint32_t {
  kLoraQkv = 1u << 0,   // the attention's input projections (QKV, or MLA's down/up projections)
  kLoraOProj = 1u << 1, // the attention's output projection
  kLoraFc1 = 1u << 2,   // the MLP's first projection (dense layers and shared experts)
  kLoraFc2 = 1u << 3,   // the MLP's second projection
};
const std::vector<std::string>& lora_target_names();  // in bit order
struct Lora {
  int64_t rank = 0;       // 0: no LoRA, every parameter trains
  uint32_t targets = 0;   // LoraTarget bits
  // QLoRA: the frozen transformer layers' weights stored as 4-bit NormalFloat with double-
  // quantized block scales (4.127 bits per weight), dequantized to the compute dtype before
  // each forward and input-gradient GEMM. false: stored in param_dtype.
  bool nf4 = false;
  [[nodiscard]] bool enabled() const { return rank > 0; }
};
// Bytes per NF4 weight: 4 bits, an fp8 absmax per 64-weight block and an fp32 scale per 256
// blocks (QLoRA's double quantization: 0.127 bits of constants per weight).
inline constexpr double kNf4BytesPerWeight = (4.0 + 8.0 / 64.0 + 32.0 / (64.0 * 256.0)) / 8.0;
// Of those, the packed 4-bit data (what ZeRO-3 / FSDP shards and gathers: FSDP-QLoRA stores the
// packed weights as a 16-bit tensor FSDP can flatten) and the block constants, which stay
// replicated on every rank beside the shard (bitsandbytes keeps them outside the parameter).
inline constexpr double kNf4PackedBytesPerWeight = 0.5;
inline constexpr double kNf4ScaleBytesPerWeight = kNf4BytesPerWeight - kNf4PackedBytesPerWeight;
// The LoRA target a linear layer of the workload belongs to (its operator name: "qkv",
// "o_proj", "fc1", "shared.fc2", ...); 0 for layers no target covers (routed experts, router,
// Mamba and linear-attention projections, the output head, MTP projections).
uint32_t lora_target_of(std::string_view linear_name);
// "rank 16 on qkv, o_proj (nf4 base)", or "none" without LoRA.
std::string lora_label(const Lora& lora);
std::vector<std::string> lora_target_list(uint32_t targets);  // target names in bit order

// How fp8 linear layers get their fp8 weights. kPrimary: the parameters are fp8 with a cached
// fp8 transpose (Megatron's --fp8-param-gather with Transformer Engine), two bytes per weight
// like 16-bit parameters, quantized once per step from the master copy. kCached: 16-bit
// parameters plus each weight's fp8 copy and transpose, cast at the step's first micro-batch
// and kept to its end (TE under Megatron without fp8 parameters): two more bytes per layer
// weight. kCast: quantized again at every use (torchao float8; TE with
// disable_parameter_transpose_cache).
enum class Fp8Weights { kPrimary, kCached, kCast };

struct Training {
  int64_t seq_len = 0;
  int64_t global_batch_size = 0;  // sequences per optimizer step
  hw::Dtype precision = hw::Dtype::kBf16;
  Optimizer optimizer = Optimizer::kAdam;
  hw::Dtype grad_dtype = hw::Dtype::kBf16;  // gradient buffer / reduction dtype
  bool master_weights = true;               // fp32 master copy (16-byte vs 12-byte convention)
  AttentionImpl attention = AttentionImpl::kFlash;
  bool dropout = false;                     // dropout masks stored for backward
  bool fp32_logits = true;                  // loss computed on an fp32 copy of the logits
  // Stored parameter dtype. Equal to the compute dtype for Megatron-style mixed precision (with
  // a separate fp32 master copy); fp32 for PyTorch FSDP mixed precision, where the sharded fp32
  // parameters are the master and the 16-bit copy exists only while gathered.
  hw::Dtype param_dtype = hw::Dtype::kBf16;
  // ZeRO-3 / FSDP: dtype of the gathered (unsharded) weights and of the gradient
  // reduce-scatter. PyTorch FSDP with MixedPrecision(param_dtype=bf16) gathers 16-bit copies;
  // FSDP without a param_dtype (Composer's 2023 'DEFAULT') gathers the fp32 parameters and
  // autocast casts each weight to 16 bits per use. Defaults: the compute dtype (16-bit for fp8)
  // and grad_dtype.
  hw::Dtype gather_dtype = hw::Dtype::kBf16;
  hw::Dtype reduce_dtype = hw::Dtype::kBf16;
  // Cross-entropy implementation: fused (vocab-parallel kernel working in place on one fp32
  // copy) or eager (PyTorch cross_entropy on an upcast copy: log-softmax output and its gradient
  // are separate fp32 tensors).
  LossImpl loss = LossImpl::kFused;
  // 16-bit gradients kept beside the grad_dtype accumulation buffer (DeepSpeed BF16_Optimizer
  // keeps both); false: the 16-bit gradient is folded into the buffer and freed (Megatron).
  bool lp_grads = false;
  // Element-wise work runs as fused kernels (Megatron / Transformer Engine, torch.compile).
  // false: eager PyTorch, where RMSNorm, rotary embeddings and the gated activation run as
  // chains of separate kernels, each a full pass over memory.
  bool fused_elementwise = true;
  // K and V repeated to the query heads before the attention call (an attention kernel called
  // without grouped-query support, e.g. torchtitan's repeat_kv): attention and any
  // context-parallel exchange see the expanded tensors.
  bool repeat_kv = false;
  // fp8 training only: linear layers keep their inputs for the weight gradient in FP8, one byte
  // per element (Transformer Engine saves the quantized copy it fed the GEMM). false: they keep
  // the 16-bit inputs and quantize again in backward (torchao float8).
  bool fp8_saved_inputs = false;
  // fp8 training with sequence parallelism: the TP all-gathers move fp8 data (one byte per
  // element), as the linears quantize the sequence shard before gathering it: the forward
  // input, its backward re-gather, and the row-parallel output gradient in backward (Transformer
  // Engine; torchao's float8 tensor parallelism, Float8ColwiseParallel / Float8RowwiseParallel /
  // PrepareFloat8ModuleInput). A gathered input kept for the weight gradient is then the fp8
  // copy. Reductions of GEMM outputs stay 16-bit. false: 16-bit gathers. Default: precision fp8.
  bool fp8_tp_gather = false;
  // fp8 training: the norm before a linear that Transformer Engine fuses with it (Megatron's
  // TELayerNormColumnParallelLinear: qkv, fc1, MLA's q_up and kv_up, Mamba's in_proj) writes the
  // linear's fp8 input itself, so that linear has no cast pass in forward, and its weight
  // gradient reads an fp8 transpose of the (gathered) input kept in fp8 (read 1, write 1 byte
  // per element) instead of a cast. false: every linear casts its input (torchao float8).
  // Default: precision fp8.
  bool fp8_norm_quantize = false;
  // fp8 training: the fp8 weights the linear layers compute with (RunConfig::fp8_weights
  // resolves it; unset: kPrimary with fp8_saved_inputs, Transformer Engine's conventions, else
  // kCast).
  std::optional<Fp8Weights> fp8_weights;
  // Multi-token prediction depth (DeepSeek-V3, Megatron --mtp-num-layers): each module adds,
  // on the last pipeline stage, one transformer layer of the model's last-layer kind, a 2h -> h
  // projection, three norms and a second pass through the shared output head and loss.
  // A hub config's num_nextn_predict_layers describes the checkpoint and does not set it.
  int64_t mtp_layers = 0;
  // Parameter-efficient fine-tuning (training.lora); rank 0 trains every parameter.
  Lora lora;
  // Sequence packing: each sequence holds documents of this many tokens on average and the
  // attention kernels run per document (variable-length FlashAttention over cu_seqlens), so a
  // query sees the keys of its own document only. 0: one document per sequence.
  int64_t packed_document_tokens = 0;
  // The tokens one attention call spans: a packed document, or the whole sequence.
  [[nodiscard]] int64_t attention_span() const {
    return packed_document_tokens > 0 && packed_document_tokens < seq_len ? packed_document_tokens : seq_len;
  }
};

struct Parallel {
  int64_t tp = 1, pp = 1, dp = 1, cp = 1, ep = 1, etp = 1, vpp = 1;
  bool etp_given = false;  // the run file set etp (which means nothing for a dense model)
  bool sp = false;
  int64_t micro_batch_size = 1;
  int zero_stage = 0;
  bool fsdp = false;
  // Hybrid sharding (PyTorch HSDP, torchtitan's data_parallel_replicate_degree, Megatron's
  // num_distributed_optimizer_instances): the dp ranks form dp_replicate replicas of dp /
  // dp_replicate consecutive ranks each; ZeRO state is sharded within a replica (over its dp
  // ranks times cp) and replicated across them. Gradients are reduce-scattered within the
  // replica, then each shard is all-reduced across the replicas; parameters are gathered within
  // the replica. 1 = one replica (plain ZeRO / FSDP).
  int64_t dp_replicate = 1;
  bool reshard_after_forward = true;
  // PyTorch FSDP2 (fully_shard) gathers a layer into one flat buffer and copies each parameter
  // out of it on the compute stream before the layer runs (split_with_sizes_copy); FSDP1's flat
  // parameters, DeepSpeed ZeRO-3 and Megatron-FSDP use views of the gathered buffer instead.
  bool fsdp_copy_out = false;
  // ZeRO-3 / FSDP collectives as flat rings over the data-parallel group, every hop over the
  // network, so a GPU's NIC carries (N-1)/N of the gathered bytes (DeepSpeed ZeRO-3 as
  // benchmarked in 2021 gathered parameter by parameter); false: hierarchical (NCCL's rings
  // over all of a node's NICs).
  bool zero3_flat_collectives = false;
  // ZeRO-3 with full recompute gathers the parameters again for the recomputed forward
  // (DeepSpeed releases them after each module's forward); false: one gather serves the
  // recompute and the backward (PyTorch FSDP).
  bool zero3_recompute_regather = false;
  Recompute recompute = Recompute::kNone;
  // Full recomputation through PyTorch's non-reentrant checkpoint (torch.utils.checkpoint with
  // use_reentrant=False, which stops recomputing once the backward's saved tensors are back:
  // set_checkpoint_early_stop, on by default) or torch.compile's partitioner: a dense layer's
  // recomputed forward ends before its MLP down projection, whose output (and its TP exit
  // collective and residual add) the backward does not need. Megatron's and DeepSpeed's
  // recomputation re-runs the whole layer (false).
  bool recompute_stops_early = false;
  // With recompute full: the layers recomputed in each virtual stage, its first ones (Megatron's
  // --recompute-method block --recompute-num-layers N); the rest keep their activations.
  // 0 = every layer.
  int64_t recompute_layers = 0;
  // With recompute selective: the RecomputeModule flags (default: the attention core).
  uint32_t recompute_modules = kRecomputeCoreAttn;
  [[nodiscard]] bool recomputes(RecomputeModule m) const {
    return recompute == Recompute::kSelective && (recompute_modules & m) != 0;
  }
  Schedule schedule = Schedule::kOneFOneB;
  double bucket_mb = 25.0;  // DDP gradient bucket size in MB (1e6 bytes)
  BucketLayout bucket_layout = BucketLayout::kDdp;
  // Uneven pipeline split, Megatron's way: the first / last pipeline stage holds this many
  // layers and the other stages share the rest evenly (with vpp > 1, every stage's layers
  // split evenly over its vpp chunks). -1 = even split.
  int64_t first_stage_layers = -1;
  int64_t last_stage_layers = -1;
  // Or the layers of every virtual stage in pipeline order (pp * vpp entries; see vstage()
  // for which stage runs each), as split points give them (torchtitan).
  // Empty = derived from the two fields above.
  std::vector<int64_t> stage_layer_list;
  // Megatron-Core's account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split:
  // the input embedding and the output head with the loss each count as one layer slot, the
  // num_layers + slots split evenly over every virtual stage, and the first (last) virtual
  // stage gives one of its slots to the embedding (the loss). A virtual stage may then hold
  // the embedding or the head alone.
  bool embedding_slot = false;
  bool loss_slot = false;
  // Megatron-Core's pipeline_model_parallel_layout, as given (a string such as "Et|(tt|)*30mL"
  // or a list of lists of "embedding", "decoder", "mtp", "loss"; empty = none): every virtual
  // stage's modules in pipeline order. stepcast runs the embedding on the first virtual stage
  // and the multi-token-prediction modules and the loss on the last, so the layout fixes the
  // transformer layers of each virtual stage.
  core::Json pipeline_layout;
  CpComm cp_comm = CpComm::kRing;
  // Causal context parallelism splits the sequence into 2*cp chunks and gives rank i chunks i
  // and 2cp-1-i so every rank does the same attention work; false: contiguous 1/cp slices,
  // where the last rank's queries see the whole sequence and set the pace.
  bool cp_load_balance = true;
  // The ring variants' K/V (and dK/dV) hops hide behind the block computation they run beside;
  // false: every hop is exposed (an executor that exchanges and computes one after the other).
  bool cp_overlap = true;
  MoeRouting moe;
  bool tp_comm_overlap = false;
  // Under tp_comm_overlap, whether the column-parallel layers' input-gradient reduction (the
  // backward reduce-scatter, an all-reduce without SP) hides too. Transformer Engine's
  // userbuffers overlap it with the weight-gradient GEMM (true). PyTorch's async TP (Inductor's
  // micro-pipeline pass) fuses all-gather -> matmul and matmul -> reduce-scatter patterns only,
  // and these reduce-scatters take the sum of several matmuls' outputs (Q, K and V; w1 and w3),
  // so they run unfused and exposed (false).
  bool tp_overlap_input_grad = true;
  // Without tp_comm_overlap, whether a column-parallel linear's backward collectives run
  // asynchronously beside its GEMMs (Megatron-LM from 2022 and Transformer Engine): under SP the
  // input's re-gather beside the input-gradient GEMM and the input gradient's reduce-scatter
  // beside the weight-gradient GEMM; without SP the input gradient's all-reduce beside the
  // weight-gradient GEMM. false: each collective blocks the compute stream (eager DTensor,
  // Megatron-LM before 2022, DeepSpeed's Megatron fork), and under SP the kept sequence shard
  // is gathered again in line. Unset: see async_linear_backward().
  std::optional<bool> tp_async_backward;
  bool grad_reduce_overlap = true;
  bool param_gather_overlap = true;
  // The data-parallel collectives' streams outrank compute (PyTorch TORCH_NCCL_HIGH_PRIORITY=1,
  // Megatron-Core --high-priority-stream-groups): a collective takes SMs as the compute kernel
  // in flight frees them instead of waiting for it to hand out its last thread blocks.
  bool comm_high_priority = false;
  // ZeRO-1/2 with param_gather_overlap: the gathers of every pipeline stage start at the step's
  // start (Megatron-Core's align_param_gather) or, not aligned, each stage's when its first
  // forward starts (after its input arrives), so they cannot hide behind the pipeline fill.
  // kInterleaved: aligned only under the interleaved schedule (NeMo / Megatron-Bridge).
  enum class GatherAlign { kAlways, kNever, kInterleaved };
  GatherAlign param_gather_align = GatherAlign::kAlways;
  [[nodiscard]] bool gathers_aligned() const {
    return param_gather_align == GatherAlign::kAlways ||
           (param_gather_align == GatherAlign::kInterleaved && schedule == Schedule::kInterleaved);
  }
  // Gradient accumulation: reduce gradients once after the last micro-batch (no_sync, the
  // default) or after every micro-batch.
  bool no_sync = true;
  // Pipeline engines that keep each in-flight micro-batch's stage output until its backward
  // (DeepSpeed's pipe buffers); Megatron frees the output's data once it is sent.
  bool keep_stage_outputs = false;
  // Pipeline runtimes that allocate a receive buffer per micro-batch once and hold them for the
  // run (torch.distributed.pipelining: the stage input of every non-first stage chunk and the
  // output gradient of every non-last one); others reuse one buffer.
  bool recv_buffer_per_microbatch = false;
  // Stage outputs kept from their forward until the step ends (see StepOutputs); with
  // kAllStages they replace keep_stage_outputs' in-flight ones (the same tensors).
  StepOutputs keep_step_outputs = StepOutputs::kNone;
  // Tensor parallelism through DTensor (torchtitan): a column-parallel linear saves its
  // all-gathered (sequence-replicated) input for the weight gradient, where Megatron saves the
  // sequence-parallel shard and gathers it again in backward: the output layer (never
  // recomputed) and, unless async TP micro-pipelines the gather (tp_comm_overlap), the QKV and
  // MLP inputs of every layer whose activations are kept or rebuilt.
  bool tp_saves_gathered_input = false;
  // Every TP rank sends the whole activation to the next stage (DeepSpeed's pipeline engine);
  // Megatron sends 1/tp of it and all-gathers on the receiver.
  bool pp_send_full_activation = false;
  // Pipeline transfers as blocking send/receive pairs (DeepSpeed's pipeline engine): a transfer
  // starts once both stages reach it (the sender waits for the receiver to post its receive),
  // blocks both compute streams until it ends, and a backward's input gradient goes to the
  // previous stage only after the next forward's input has been received. 1F1B only.
  bool pp_rendezvous = false;
  Offload offload = Offload::kNone;
  // CPU activation offload (Megatron-Core cpu_offloading with cpu_offloading_num_layers): the
  // first N transformer layers of each stage copy the tensors they save for backward to host
  // memory after their forward and back before their backward, double-buffered. 0: none.
  int64_t activation_offload_layers = 0;
  bool operator==(const Parallel&) const = default;
  // Sets the pipeline split to Megatron's end-stage counts (-1: unset) or, when `list` is
  // given, to the layers of every virtual stage, dropping whatever set it before (a pipeline
  // layout, embedding and loss slots). derive_and_validate checks it.
  void set_split(int64_t first, int64_t last, std::vector<int64_t> list = {}) {
    first_stage_layers = first;
    last_stage_layers = last;
    stage_layer_list = std::move(list);
    pipeline_layout = nullptr;
    embedding_slot = loss_slot = false;
  }
  // The same split in the form a Megatron-Core run file writes it: end-stage counts when the
  // run has no virtual stages and every middle stage holds the same number (pp >= 3), else the list.
  void set_split(const std::vector<int64_t>& vstage_layers);
  // ZeRO stage as the ledger applies it (fsdp => 3).
  [[nodiscard]] int effective_zero() const { return fsdp ? 3 : zero_stage; }
  [[nodiscard]] bool split_backward() const { return splits_backward(schedule); }
  // Whether the column-parallel linears run their backward TP collectives asynchronously
  // (tp_async_backward). Unset, it follows the layout: under SP with each linear keeping only its
  // sequence shard (tp_saves_gathered_input false) the linear layers are Megatron-LM's or
  // Transformer Engine's, the implementations that keep the shard, and they run it so; otherwise
  // blocking. Never under tp_comm_overlap, whose kernels schedule those collectives themselves.
  [[nodiscard]] bool async_linear_backward() const {
    if (tp <= 1 || tp_comm_overlap) return false;
    return tp_async_backward.value_or(sp && !tp_saves_gathered_input);
  }
  // Sequence parallelism in effect (it means nothing without TP).
  [[nodiscard]] bool sp_active() const { return sp && tp > 1; }
  // Under SP, whether each column-parallel linear keeps its all-gathered input for the weight
  // gradient (tp_saves_gathered_input, DTensor) rather than its sequence shard, which the
  // backward gathers again. Async TP's compiled fused gathers (tp_comm_overlap) keep the shard.
  // The ledger and the workload both read it.
  [[nodiscard]] bool keeps_gathered_input() const { return sp_active() && tp_saves_gathered_input && !tp_comm_overlap; }
  // Two chunks per stage folded into a V (ZB-V, DualPipeV).
  [[nodiscard]] bool v_shape() const { return schedule == Schedule::kZbV || schedule == Schedule::kDualPipeV; }
  // Placement of virtual stages (pipeline order) on pipeline stages. Interleaving loops the
  // chunks round the stages: chunk c of stage s is virtual stage c * pp + s. ZB-V folds its two
  // chunks into a V: chunk 0 runs down the stages, chunk 1 back up (virtual stage
  // 2 pp - 1 - s), so stage 0 holds both the first and the last virtual stage and the turn at
  // stage pp - 1 stays on one rank.
  [[nodiscard]] int64_t vstage(int64_t stage, int64_t chunk) const {
    return v_shape() && chunk == 1 ? 2 * pp - 1 - stage : chunk * pp + stage;
  }
  [[nodiscard]] int64_t stage_of_vstage(int64_t vs) const {
    return v_shape() && vs >= pp ? 2 * pp - 1 - vs : vs % pp;
  }
  [[nodiscard]] int64_t chunk_of_vstage(int64_t vs) const { return vs / pp; }
  // The stage and chunk that run the output layer and the loss (the last virtual stage).
  [[nodiscard]] bool holds_head(int64_t stage, int64_t chunk) const { return vstage(stage, chunk) == pp * vpp - 1; }
  [[nodiscard]] int64_t head_stage() const { return stage_of_vstage(pp * vpp - 1); }
  // Ranks that shard the dense ZeRO state (dp * cp, divided over the replicas).
  [[nodiscard]] int64_t shard_group() const { return dp * cp / std::max<int64_t>(1, dp_replicate); }
  // Ranks that shard the routed experts' ZeRO state: the expert-data-parallel group
  // (tp * dp * cp / (ep * etp)) divided over the replicas.
  [[nodiscard]] int64_t expert_shard_group() const {
    return std::max<int64_t>(1, tp * dp * cp / std::max<int64_t>(1, ep * etp) / std::max<int64_t>(1, dp_replicate));
  }
};

// What makes ranks differ. Any scenario switches the simulator from one representative rank
// per pipeline stage to every rank simulated.
struct Slowdown {
  std::vector<int64_t> ranks;   // global ranks (Megatron order)
  std::vector<int64_t> stages;  // or whole pipeline stages
  double factor = 1.0;          // compute time multiplier (1.25 = 25% slower)
};
struct Scenario {
  bool present = false;
  std::vector<Slowdown> slowdowns;
  double jitter_cv = 0;        // per-operator compute time noise, coefficient of variation
  uint64_t seed = 1;           // jitter seed
  int64_t host_rank = -1;      // rank doing host-side work before the step's barrier
  double host_seconds = 0;
  // A degraded link: every collective and transfer this rank takes part in runs at the given
  // fraction of its bandwidth (bandwidth-bound approximation: time / factor).
  int64_t degraded_rank = -1;
  double degraded_factor = 1.0;
  // Variable sequence lengths: each data-parallel replica's micro-batch gets its own length,
  // drawn from the distribution (deterministic per seed); compute scales linearly in tokens
  // and quadratically in the attention part.
  std::string seq_dist;        // "", "uniform", "lognormal"
  double seq_min = 0, seq_max = 0;      // uniform bounds (tokens)
  double seq_median = 0, seq_sigma = 0; // lognormal
  uint64_t seq_seed = 1;
};

struct RunConfig {
  std::string source_name;  // file path or "<inline>"
  model::ModelSpec model;
  hw::HardwareProfile hardware;
  Cluster cluster;
  Training training;
  Parallel parallel;
  Scenario scenario;
  std::vector<std::string> assumptions;  // free text carried to reports

  // --- derived (filled by validation) ---
  int64_t num_microbatches = 0;             // per DP rank per step
  int64_t padded_vocab = 0;                 // vocab padded to a multiple of 128 * tp
  std::vector<int64_t> stage_layers;          // transformer layers on each pipeline stage
  std::vector<int64_t> vstage_layers;         // ... on each virtual stage (pp * vpp, pipeline order)
  std::vector<int64_t> vstage_first_layer;    // global index of each virtual stage's first layer

  // Chunk c of pipeline stage s is virtual stage parallel.vstage(s, c).
  [[nodiscard]] int64_t chunk_layers(int64_t stage, int64_t chunk) const {
    return vstage_layers[static_cast<size_t>(parallel.vstage(stage, chunk))];
  }
  [[nodiscard]] int64_t chunk_first_layer(int64_t stage, int64_t chunk) const {
    return vstage_first_layer[static_cast<size_t>(parallel.vstage(stage, chunk))];
  }
  // The global indices of a pipeline stage's layers, chunk by chunk.
  [[nodiscard]] std::vector<int64_t> stage_layer_ids(int64_t stage) const;
  // The same indices handed to f one by one, without building the list (the planner asks
  // for every stage of millions of layouts).
  template <class F>
  void for_each_stage_layer(int64_t stage, F&& f) const {
    for (int64_t c = 0; c < parallel.vpp; ++c) {
      const int64_t first = chunk_first_layer(stage, c), n = chunk_layers(stage, c);
      for (int64_t l = first; l < first + n; ++l) f(l);
    }
  }
  // Whether full recomputation rebuilds this layer's activations (every layer under recompute
  // full, or the first recompute_layers of its virtual stage).
  [[nodiscard]] bool full_recompute_layer(int64_t layer) const;
  // Recompute full covers some layers of a virtual stage but not all.
  [[nodiscard]] bool partial_recompute() const;
  // Whether a transformer layer's saved activations go to host memory between its forward and
  // backward (the first parallel.activation_offload_layers of its stage).
  [[nodiscard]] bool activation_offloaded(int64_t layer) const;
  // Data-parallel collectives issued beside compute wait for the compute kernel in flight:
  // they run on SMs (efficiency.collective_sms) and their streams do not outrank compute.
  [[nodiscard]] bool comm_waits_for_kernels() const {
    return hardware.collective_compute_share() > 0 && !parallel.comm_high_priority;
  }
  // Bytes per element of stored activations and element-wise work: 16-bit, fp32 only for fp32
  // training (fp8 runs keep bf16 activations).
  [[nodiscard]] double activation_bytes() const { return training.precision == hw::Dtype::kFp32 ? 4.0 : 2.0; }
  // Bytes per element of the weights the layers compute with: the gathered copy under ZeRO-3 /
  // FSDP, the stored parameters otherwise.
  [[nodiscard]] double compute_weight_bytes() const {
    return hw::bytes_per_element(parallel.effective_zero() >= 3 ? training.gather_dtype : training.param_dtype);
  }
  // Bytes per weight a ZeRO-3 / FSDP gather of a transformer layer's base weights carries: the
  // gather dtype, or QLoRA's packed 4 bits (the block constants stay resident on every rank).
  [[nodiscard]] double gathered_layer_weight_bytes() const {
    return training.lora.nf4 ? kNf4PackedBytesPerWeight : hw::bytes_per_element(training.gather_dtype);
  }
  // Bytes per element of the residual stream between layers. Autocast over weights wider than
  // the 16-bit compute dtype looks the token embeddings up in the weights' dtype, and adding a
  // 16-bit branch output to that wider stream promotes the sum, so the stream and its gradient
  // stay in the weights' dtype through every layer; otherwise it is the activation dtype.
  [[nodiscard]] double residual_bytes() const { return std::max(activation_bytes(), compute_weight_bytes()); }
  // training.fp8_weights, resolved (meaningful under precision fp8 only).
  [[nodiscard]] Fp8Weights fp8_weights() const {
    return training.fp8_weights.value_or(training.fp8_saved_inputs ? Fp8Weights::kPrimary : Fp8Weights::kCast);
  }
  [[nodiscard]] int64_t tokens_per_step() const { return training.global_batch_size * training.seq_len; }
  [[nodiscard]] int64_t micro_batch_tokens() const { return parallel.micro_batch_size * training.seq_len; }
};

// The layers of every virtual stage (pipeline order) that Megatron's end-stage counts give
// (parallel.first_stage_layers / last_stage_layers; the other stages share the rest evenly and
// every stage's layers split evenly over its vpp chunks), or the even split when neither is set.
// Empty when the layers do not split so; `why`, when given, then gets the JSON key and the reason.
std::vector<int64_t> end_stage_split(int64_t layers, const Parallel& p, std::pair<std::string, std::string>* why = nullptr);
// An uneven split of `layers` over `stages` (virtual) pipeline stages as torchtitan's automatic
// split points make it: each gets layers / stages, the middle ones one more while the
// remainder lasts, and the last what is left (so the first and last, which also hold the
// embedding and the output layer, are the short ones).
std::vector<int64_t> balanced_stage_layers(int64_t layers, int64_t stages);
// Megatron-Core's split with the embedding and/or the loss counted as layer slots (see
// Parallel::embedding_slot); empty when layers + slots do not divide evenly over the stages.
std::vector<int64_t> slot_stage_layers(int64_t layers, int64_t stages, bool embedding_slot, bool loss_slot);

// Layer counts with runs of equal entries as n*k: "[3, 4*6, 5]".
std::string run_length_text(const std::vector<int64_t>& counts);

// A Megatron pipeline layout read: the modules of every virtual stage (E embedding, t
// transformer layer, m multi-token-prediction layer, L loss), or `error` saying what is wrong.
struct PipelineLayout {
  std::vector<std::string> stages;
  std::string error;
  // The transformer layers (t) of every virtual stage.
  [[nodiscard]] std::vector<int64_t> layers() const;
};
// The string form: '|' separates virtual stages, "X*N" repeats one module and "(...)*N" a
// group (nested), spaces and commas are ignored. The list form: one list per virtual stage of "embedding",
// "decoder", "mtp" and "loss".
PipelineLayout parse_pipeline_layout(const core::Json& layout);
// A split over virtual stages written as Megatron-Core's --pipeline-model-parallel-layout: the
// embedding on the first virtual stage, the MTP layers and the loss on the last, runs of equal
// middle stages as "(t*4|)*14" ("Et*4|(t*4|)*14tmL"). parse_pipeline_layout reads it back.
std::string megatron_layout_text(const std::vector<int64_t>& vstage_layers, int64_t mtp_layers);
// A hybrid model's block pattern with '|' before the first block of each virtual stage after the
// first (Megatron-Core's flexible split of --hybrid-layer-pattern); empty when the counts do not
// add up to the pattern's blocks.
std::string pattern_with_stages(const std::string& pattern, const std::vector<int64_t>& vstage_layers);

// Megatron-style uneven split over pp >= 3 stages: the middle stages take ceil(layers / pp) and
// the first and last share what is left (the first one layer fewer when odd). Returns false
// when that cannot work.
bool megatron_end_stages(int64_t layers, int64_t pp, int64_t& first, int64_t& last);

// Parses and validates a run file object. base_dir resolves relative model paths.
// Throws core::ConfigError listing every problem.
// validate_layout = false parses every section but leaves the layout unchecked and underived
// (the planner fills in and validates each candidate layout itself).
// The run with its model and hardware {"path": FILE} references replaced by the files' content
// (relative to base_dir, as parse_run reads them), so a digest of it changes when a referenced
// file does; a reference that cannot be read is left as it is (parse_run reports it).
core::Json with_referenced_files(core::Json run, const std::string& base_dir);

RunConfig parse_run(const core::Json& j, const std::string& source_name, const std::string& base_dir,
                    bool validate_layout = true);
// overrides: "PATH=VALUE" settings applied to the file's JSON before validation (the CLI's --set).
RunConfig load_run_file(const std::string& path, const std::vector<std::string>& overrides = {});

// Fills derived fields and checks the layout against the model; records problems in issues.
void derive_and_validate(RunConfig& rc, core::Issues& issues);

// Widths (elements per token) of attention's Q, K and V and of its output on one TP rank.
// K and V are at the query heads when `expanded` (repeated before the attention call), else at
// the key/value heads, replicated when tp exceeds them; MLA has as many K as Q heads.
struct AttentionWidths {
  double q = 0, k = 0, v = 0, out = 0;
};
AttentionWidths attention_widths(const RunConfig& rc, bool expanded);

}  // namespace stepcast::config
