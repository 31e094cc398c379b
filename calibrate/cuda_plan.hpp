// stepcast calibration: what the CUDA suite measures, decided on the host so it is tested
// without a GPU. The device code (calibrate/cuda_device.cu) only runs what this plans.
//
// - GEMM dtypes by compute capability: bf16, fp16 and fp32 everywhere; tf32 from Ampere (8.0);
//   fp8 (E4M3 operands, bf16 result, cuBLASLt) from Ada/Hopper (8.9).
// - GEMM shapes: tokens per micro-batch 256 .. 65,536 against the zoo models' linear layers
//   split by TP, and 128 .. 2,048 tokens per expert against the zoo MoE models' expert GEMMs
//   (fitted), and held-out shapes between them (never fitted).
// - Memory-bound kernels: RMSNorm, SwiGLU (silu(a) * b) and a residual add on bf16 activations,
//   with the bytes and FLOPs each moves, for efficiency.memory_bound and the roofline.
// - Collective group sizes: every size from 2 that divides the ranks, and the ranks.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "calibrate/cpu_suite.hpp"

namespace stepcast::calibrate {

struct GemmPlanShape {
  int m = 0, n = 0, k = 0;
};

std::vector<std::string> cuda_gemm_dtypes(int cc_major, int cc_minor);
double gemm_operand_bytes(const std::string& dtype);  // 1 (fp8), 2 (bf16, fp16), 4 (tf32, fp32)

// The weight shapes (n output x k input features) of a zoo model's linear layers on one TP
// rank: the fused QKV projection, the attention output, the MLP's up (gate and up fused when
// gated) and down projections, and the vocab-parallel LM head; each dimension rounded up to a
// multiple of 16 (fp8 kernels need it), duplicates dropped, in that order. A TP degree that
// does not divide the heads is skipped (Megatron refuses it).
struct LinearShape {
  std::string what;  // "llama3.1-8b tp8 ffn_up"
  int n = 0, k = 0;
};
std::vector<LinearShape> model_linear_shapes(const std::string& model, const std::vector<int>& tps);
// The models and TP degrees the CUDA suite's fitted GEMMs come from: Llama 3.1 8B at TP 1, 2,
// 4 and 8, and 70B at TP 8 (how each is usually split on one node).
std::vector<LinearShape> cuda_gemm_weight_shapes();
// Tokens per micro-batch measured for a dtype: 256 .. 65,536 for the 16- and 8-bit types, up to
// 4,096 for tf32 and fp32 (ten times slower; their large shapes would take most of the run).
std::vector<int> cuda_gemm_tokens(const std::string& dtype);
// The routed-expert GEMMs of a zoo MoE model on one expert: the first projection (gate and up
// fused when gated) and the second; each dimension rounded up to a multiple of 16. Throws
// std::invalid_argument for a dense model.
std::vector<LinearShape> expert_linear_shapes(const std::string& model);
// The expert shapes the CUDA suite fits: Qwen3-30B-A3B, Qwen3-235B-A22B, GPT-OSS 120B,
// DeepSeek-V3 and Mixtral 8x7B, no shape twice. A grouped expert MLP runs one such GEMM per
// local expert at its tokens per expert (Transformer Engine's GroupedLinear issues them one by
// one), which is where the GEMM shape model is least certain: m of 128-2,048.
std::vector<LinearShape> cuda_gemm_expert_shapes();
// Tokens per expert measured for a dtype: 128 .. 2,048 for the 16- and 8-bit types (those MoE
// training runs in); none for tf32 and fp32.
std::vector<int> cuda_gemm_expert_tokens(const std::string& dtype);
// The fitted shapes of a dtype: every weight shape at every token count, then every expert
// shape at every tokens-per-expert count.
std::vector<GemmPlanShape> cuda_gemm_fit_shapes(const std::string& dtype = "bf16");
std::vector<GemmPlanShape> cuda_gemm_held_shapes();

struct ElementwiseCase {
  std::string kernel;  // rmsnorm, swiglu, add
  int rows = 0, cols = 0;
  [[nodiscard]] double bytes() const;  // bf16 tensors read and written (and the norm's weight)
  [[nodiscard]] double flops() const;
  [[nodiscard]] std::string name() const { return kernel + " " + std::to_string(rows) + "x" + std::to_string(cols); }
};
std::vector<ElementwiseCase> cuda_elementwise_cases();

// Causal attention problems: batch x heads and sequence length (head dimension 128), about the
// same tokens each so every size takes similar time.
struct AttentionCase {
  int bh = 0, seq = 0;
};
std::vector<AttentionCase> cuda_attention_cases();

// Every group size that splits the ranks into equal groups of consecutive ranks (2, 3, 4, 6 and
// 12 of 12), the whole world last.
std::vector<int> collective_group_sizes(int ranks);
// Message sizes (bytes) fitted and held out, 4 KiB .. 1 GiB (held out: 1.5 x 4^k).
std::vector<size_t> cuda_collective_fit_sizes();
std::vector<size_t> cuda_collective_held_sizes();

// nccl-tests style table of the measured collectives: per operation and group size, each
// size's time, algorithm bandwidth (bytes / time) and bus bandwidth.
std::string collective_table_markdown(const std::vector<CollFit>& fits);

}  // namespace stepcast::calibrate
