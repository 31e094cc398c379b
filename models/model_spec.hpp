// stepcast model architecture: a decoder-only transformer as the cost model sees it.
//
// A ModelSpec holds shapes only (no weights). It is read from a built-in zoo name, an inline
// object, or a HuggingFace config.json (keys accepted as-is; cost-free keys ignored from a known
// list). Parameter counts follow the architecture exactly:
//   attention  = h*(a*d) [Q] + 2*h*(kv*d) [K,V] + (a*d)*h [O]   (MLA: low-rank Q and KV paths)
//   dense MLP  = 3*h*f (gated: gate, up, down) or 2*h*f (plain)
//   MoE layer  = router h*E + E*expert_mlp + shared experts
//   norms      = 2 per layer (h each for RMSNorm, 2h for LayerNorm; 1 where a parallel block
//                shares it) + final norm
//   embeddings = V*h (+ V*h untied output layer) (+ positions*h when learned) (+ embedding norm)
// Sources for each zoo entry are in models/zoo/*.json ("source").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/core/json_reader.hpp"

namespace stepcast::model {

enum class MlpKind { kGated, kPlain };           // silu/swiglu = gated (3 matrices); gelu/relu2 = plain
enum class NormKind { kRmsNorm, kLayerNorm };
enum class PositionKind { kRotary, kLearned, kAlibi, kNone };  // kNone: no position signal (Nemotron-H)

// What one layer holds. A transformer layer has both a token mixer (attention) and an MLP (dense
// or MoE); a hybrid model (Nemotron-H's hybrid_override_pattern) stacks single blocks instead:
// a Mamba-2 mixer, an attention block, a dense MLP or a MoE block, each with its pre-norm and
// residual.
enum class Mixer { kAttention, kMamba, kLinear, kNone };  // kLinear: Gated DeltaNet linear attention
enum class Ffn { kDense, kMoe, kNone };
struct LayerKind {
  Mixer mixer = Mixer::kAttention;
  Ffn ffn = Ffn::kDense;
  [[nodiscard]] bool moe() const { return ffn == Ffn::kMoe; }
  bool operator==(const LayerKind&) const = default;
  // "attention+mlp", "attention+moe", "linear+moe", "mamba", "attention", "mlp", "moe".
  [[nodiscard]] std::string label() const;
};

// A Mamba-2 (state-space duality) mixer as Megatron-Core's MambaMixer builds it: in_proj to
// [z, x, B, C, dt] (2*d_inner + 2*groups*state + heads), a depthwise causal conv1d of width
// conv_kernel over x, B and C, the chunked SSD scan (chunk tokens per chunk), a gated RMSNorm
// over d_inner and out_proj back to hidden. d_inner = heads * head_dim.
// Gated DeltaNet linear attention (Yang et al. 2024) as Qwen3-Next builds it: in_proj to q, k
// (k_heads x k_dim each), v and the output gate z (v_heads x v_dim each) and the per-head
// decay and write strength (a, b); a depthwise causal conv1d of width conv_kernel over q, k and
// v; the chunked gated delta rule with a k_dim x v_dim state per value head (q and k shared by
// v_heads / k_heads heads); a gated RMSNorm; out_proj back to hidden.
struct LinearAttnSpec {
  int64_t k_heads = 0;
  int64_t v_heads = 0;
  int64_t k_dim = 0;
  int64_t v_dim = 0;
  int64_t conv_kernel = 4;
  int64_t chunk = 64;  // the chunked kernels' block of tokens
  [[nodiscard]] bool enabled() const { return v_heads > 0; }
  [[nodiscard]] int64_t key_width() const { return k_heads * k_dim; }
  [[nodiscard]] int64_t value_width() const { return v_heads * v_dim; }
  [[nodiscard]] int64_t conv_channels() const { return 2 * key_width() + value_width(); }
  [[nodiscard]] int64_t in_proj_width() const { return 2 * key_width() + 2 * value_width() + 2 * v_heads; }
};

struct MambaSpec {
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t state = 0;        // ssm_state_size (N)
  int64_t groups = 1;       // n_groups: B and C are shared by heads / groups heads
  int64_t conv_kernel = 4;
  int64_t chunk = 128;      // SSD chunk length (Q)
  bool conv_bias = true;
  bool proj_bias = false;
  [[nodiscard]] bool enabled() const { return heads > 0; }
  [[nodiscard]] int64_t d_inner() const { return heads * head_dim; }
  [[nodiscard]] int64_t conv_channels() const { return d_inner() + 2 * groups * state; }
  [[nodiscard]] int64_t in_proj_width() const { return 2 * d_inner() + 2 * groups * state + heads; }
};

struct MoeSpec {
  int64_t num_experts = 0;       // routed experts (0 = dense model)
  int64_t top_k = 0;             // experts per token
  int64_t expert_ffn = 0;        // intermediate size of one routed expert
  int64_t shared_experts = 0;    // always-on experts
  int64_t shared_expert_ffn = 0; // intermediate size of one shared expert
  int64_t first_k_dense = 0;     // leading dense layers (DeepSeek first_k_dense_replace)
  // Layer l (from 0) is MoE when (l + layer_offset) % layer_freq == 0, l >= first_k_dense and
  // l is not in dense_layers. Megatron's and DeepSeek's moe_layer_freq count from layer 0
  // (offset 0: layers 0, f, 2f, ...); Qwen-MoE's decoder_sparse_step and Llama 4's
  // interleave_moe_layer_step from layer 1 (offset 1: layers f-1, 2f-1, ...).
  int64_t layer_freq = 1;
  int64_t layer_offset = 0;
  std::vector<int64_t> dense_layers;  // Qwen-MoE mlp_only_layers: dense MLP in these layers (sorted)
  // Group-limited routing (DeepSeek-V3 n_group / topk_group): the experts form `groups`
  // contiguous groups and a token's top-k experts come from its best `group_topk` groups.
  // 0 = routing over all experts.
  int64_t groups = 0;
  int64_t group_topk = 0;
  [[nodiscard]] bool enabled() const { return num_experts > 0; }
};

struct MlaSpec {  // DeepSeek multi-head latent attention
  int64_t q_lora_rank = 0;  // 0 = full-rank Q projection
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  [[nodiscard]] bool enabled() const { return kv_lora_rank > 0; }
};

struct ModelSpec {
  std::string name;
  std::string source;
  int64_t num_layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t ffn_hidden = 0;   // dense MLP intermediate size
  int64_t vocab = 0;
  int64_t max_positions = 0;
  int64_t sliding_window = 0;       // 0 = full attention everywhere
  int64_t attention_chunk = 0;      // Llama 4 chunked attention: tokens attend within chunks of this size
  double sliding_layer_fraction = 0;  // share of layers that use the window (or the chunks)
  MlpKind mlp = MlpKind::kGated;
  NormKind norm = NormKind::kRmsNorm;
  PositionKind position = PositionKind::kRotary;
  bool tied_embeddings = false;
  bool linear_bias = false;  // biases on every linear layer (GPT-2 style)
  // Exceptions to linear_bias in the attention: GPT-Neo's Q/K/V carry none (its output
  // projection does); GPT-J's and CodeGen's attention carries none at all.
  bool qkv_linear_bias = true;
  bool out_linear_bias = true;
  bool head_bias = false;        // a bias on the untied LM head (GPT-J, CodeGen, Phi-1/2)
  bool shared_block_norm = false;  // one norm feeds the parallel attention and MLP (GPT-J, Phi-1/2, Falcon 7B)
  int64_t position_offset = 0;   // learned position rows beyond max_positions (OPT's 2)
  // Whether Q/K/V, and the attention's output projection, carry biases (linear_bias with its
  // exceptions, or qkv_bias alone).
  [[nodiscard]] bool has_qkv_bias() const { return qkv_bias || (linear_bias && qkv_linear_bias); }
  [[nodiscard]] bool has_out_bias() const { return linear_bias && out_linear_bias; }
  bool qkv_bias = false;     // biases on Q, K, V only (Qwen2 style)
  bool qk_norm = false;      // per-head RMSNorm on Q and K (Qwen3)
  bool embedding_norm = false;  // a norm on the token embeddings (BLOOM's word_embeddings_layernorm)
  MoeSpec moe;
  MlaSpec mla;
  MambaSpec mamba;
  LinearAttnSpec linear;
  // Models whose token mixer alternates (Qwen3-Next): one character per layer, L (Gated
  // DeltaNet) or A (softmax attention), each layer with its MLP. Empty: attention everywhere
  // (or layer_pattern decides).
  std::string mixer_pattern;
  bool attn_output_gate = false;  // a sigmoid gate on the attention output (q_proj twice as wide)
  // Hybrid models: one character per layer, M (Mamba-2 mixer), * (attention), - (dense MLP),
  // E (MoE block). Empty: every layer is attention + MLP.
  std::string layer_pattern;
  // Blocks per virtual stage where the pattern marks pipeline stage boundaries with '|'
  // (Megatron-Core's flexible pipeline split, "M-M*-|M-M*-"); empty otherwise. The run's
  // pipeline must have one virtual stage per segment.
  std::vector<int64_t> pattern_stages;
  // The config keys some settings were read from (families name them differently), so a check
  // on the parsed model names the key the user wrote.
  struct KeyNames {
    std::string kv_heads = "num_key_value_heads";
    std::string top_k = "num_experts_per_tok";
    std::string first_k = "first_k_dense_replace";
    std::string moe_spacing = "moe_layer_freq";
    bool placement_ok = true;  // false: the MoE layer lists had mistakes (already reported)
  } key_names;

  // --- derived shapes ---
  [[nodiscard]] int64_t q_dim() const;      // width of all query heads
  [[nodiscard]] int64_t kv_dim() const;     // width of all key (or value) heads
  [[nodiscard]] bool is_moe_layer(int64_t layer) const;  // layer index from 0
  [[nodiscard]] int64_t num_moe_layers() const;
  [[nodiscard]] bool hybrid() const { return !layer_pattern.empty(); }
  // Layers differ in more than dense / MoE (a block pattern or alternating token mixers).
  [[nodiscard]] bool mixed() const { return hybrid() || !mixer_pattern.empty(); }
  [[nodiscard]] int64_t num_linear_layers() const;
  [[nodiscard]] LayerKind layer_kind(int64_t layer) const;
  [[nodiscard]] int64_t num_attention_layers() const;
  [[nodiscard]] int64_t num_mamba_layers() const;
  // The distinct layer kinds of the model, in order of first appearance.
  [[nodiscard]] std::vector<LayerKind> layer_kinds() const;
  [[nodiscard]] int64_t mlp_matrices() const { return mlp == MlpKind::kGated ? 3 : 2; }
  // Keys a query of the local layers sees on average at sequence length seq_len, mask
  // included (0: those layers attend to the whole causal prefix, the window or chunk covering
  // the sequence). Query i sees min(i+1, W) keys under a window W, (i mod C)+1 under chunks of C.
  [[nodiscard]] double local_keys_per_query(int64_t seq_len) const;

  // --- parameter counts ---
  [[nodiscard]] double norm_params() const;           // one norm: h (RMSNorm) or 2h (LayerNorm)
  [[nodiscard]] double attention_params() const;      // one layer, including its norm
  [[nodiscard]] double dense_mlp_params() const;      // one dense layer's MLP, including its norm
  [[nodiscard]] double expert_params() const;         // one routed expert
  [[nodiscard]] double moe_mlp_params() const;        // one MoE layer's MLP block (all experts)
  [[nodiscard]] double moe_mlp_active_params() const; // the part one token touches
  [[nodiscard]] double mamba_params() const;         // one Mamba-2 mixer, including its norm
  [[nodiscard]] double linear_attention_params() const;  // one Gated DeltaNet mixer, including its norm
  // A layer kind's token mixer and MLP parts (each with its norm); `active`: the part one token
  // touches (top-k routed experts).
  [[nodiscard]] double mixer_params(LayerKind k) const;
  [[nodiscard]] double ffn_params(LayerKind k, bool active = false) const;
  [[nodiscard]] double layer_params(int64_t layer) const;
  // What one token touches in a multi-token-prediction module (DeepSeek-V3): a layer of the
  // last layer's kind, the 2h -> h projection and its three norms (embedding and head are shared).
  [[nodiscard]] double mtp_layer_active_params() const;
  [[nodiscard]] double embedding_params() const;      // input embedding (+ learned positions)
  [[nodiscard]] double output_params() const;         // LM head (0 when tied) + final norm
  [[nodiscard]] double total_params() const;
  [[nodiscard]] double active_params() const;         // per-token active (MoE) or total (dense)
  // Parameters that take part in 6*N*D FLOPs: active params without the input embedding
  // lookup (a gather, not a matmul). The output layer counts even when tied.
  [[nodiscard]] double flop_params() const;
};

// Reads a model from any accepted form: a zoo name string, an object (stepcast or HF keys),
// or {"path": "config.json"} (relative paths resolve against base_dir).
ModelSpec parse_model(const core::Json& j, const std::string& path, core::Issues& issues,
                      const std::string& base_dir);

// Built-in zoo. Throws UserError naming the valid choices when the name is unknown.
ModelSpec zoo_model(const std::string& name);
std::vector<std::string> zoo_names();

// What stepcast read from a model, as `stepcast models MODEL --json` prints it: the shapes
// that set cost (layers and their kinds, attention, local attention, MLP, MoE, MLA, hybrid
// mixers, norm, positions, biases, embeddings) and the parameter counts, total and per part.
core::Json describe_model(const ModelSpec& m);

// Checks shapes that every consumer relies on (positive sizes, heads divide, etc.).
void validate_model(const ModelSpec& m, const std::string& path, core::Issues& issues);

}  // namespace stepcast::model
