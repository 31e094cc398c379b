#include "models/model_spec.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "sim/core/embedded.hpp"
#include "sim/core/memo.hpp"

namespace stepcast::model {

using core::Issues;
using core::Json;
using core::ObjectReader;

int64_t ModelSpec::q_dim() const { return heads * head_dim; }
int64_t ModelSpec::kv_dim() const { return kv_heads * head_dim; }

std::string LayerKind::label() const {
  const char* mx = mixer == Mixer::kAttention ? "attention" : mixer == Mixer::kMamba ? "mamba" : mixer == Mixer::kLinear ? "linear" : "";
  const char* ff = ffn == Ffn::kDense ? "mlp" : ffn == Ffn::kMoe ? "moe" : "";
  if (*mx == 0) return ff;
  if (*ff == 0) return mx;
  return std::string(mx) + "+" + ff;
}

bool ModelSpec::is_moe_layer(int64_t layer) const {
  if (hybrid()) return moe.enabled() && layer >= 0 && layer < static_cast<int64_t>(layer_pattern.size()) && layer_pattern[static_cast<size_t>(layer)] == 'E';
  if (!moe.enabled() || layer < moe.first_k_dense) return false;
  if (std::binary_search(moe.dense_layers.begin(), moe.dense_layers.end(), layer)) return false;
  return (layer + moe.layer_offset) % std::max<int64_t>(1, moe.layer_freq) == 0;
}

double ModelSpec::local_keys_per_query(int64_t seq_len) const {
  if (sliding_layer_fraction <= 0 || seq_len <= 0) return 0;
  const double s = static_cast<double>(seq_len);
  if (attention_chunk > 0) {
    if (attention_chunk >= seq_len) return 0;
    // Whole chunks of C keys (C(C+1)/2 pairs each) and the last partial chunk of r.
    const double c = static_cast<double>(attention_chunk);
    const double whole = std::floor(s / c), rest = s - whole * c;
    return (whole * c * (c + 1.0) / 2.0 + rest * (rest + 1.0) / 2.0) / s;
  }
  if (sliding_window <= 0 || sliding_window >= seq_len) return 0;
  // The first W queries see 1..W keys, the rest W each.
  const double w = static_cast<double>(sliding_window);
  return (w * (w + 1.0) / 2.0 + (s - w) * w) / s;
}

int64_t ModelSpec::num_moe_layers() const {
  int64_t n = 0;
  for (int64_t l = 0; l < num_layers; ++l) n += is_moe_layer(l) ? 1 : 0;
  return n;
}

LayerKind ModelSpec::layer_kind(int64_t layer) const {
  if (!hybrid()) {
    const bool linear_layer = layer >= 0 && layer < static_cast<int64_t>(mixer_pattern.size()) && mixer_pattern[static_cast<size_t>(layer)] == 'L';
    return {linear_layer ? Mixer::kLinear : Mixer::kAttention, is_moe_layer(layer) ? Ffn::kMoe : Ffn::kDense};
  }
  const char ch = layer >= 0 && layer < static_cast<int64_t>(layer_pattern.size()) ? layer_pattern[static_cast<size_t>(layer)] : '*';
  switch (ch) {
    case 'M': return {Mixer::kMamba, Ffn::kNone};
    case '-': return {Mixer::kNone, Ffn::kDense};
    case 'E': return {Mixer::kNone, Ffn::kMoe};
    default: return {Mixer::kAttention, Ffn::kNone};
  }
}

int64_t ModelSpec::num_attention_layers() const {
  int64_t n = 0;
  for (int64_t l = 0; l < num_layers; ++l) n += layer_kind(l).mixer == Mixer::kAttention ? 1 : 0;
  return n;
}

int64_t ModelSpec::num_linear_layers() const {
  int64_t n = 0;
  for (int64_t l = 0; l < num_layers; ++l) n += layer_kind(l).mixer == Mixer::kLinear ? 1 : 0;
  return n;
}

int64_t ModelSpec::num_mamba_layers() const {
  int64_t n = 0;
  for (int64_t l = 0; l < num_layers; ++l) n += layer_kind(l).mixer == Mixer::kMamba ? 1 : 0;
  return n;
}

std::vector<LayerKind> ModelSpec::layer_kinds() const {
  std::vector<LayerKind> out;
  for (int64_t l = 0; l < num_layers; ++l) {
    const LayerKind k = layer_kind(l);
    if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
  }
  return out;
}

double ModelSpec::norm_params() const {
  return norm == NormKind::kLayerNorm ? 2.0 * static_cast<double>(hidden) : static_cast<double>(hidden);
}

double ModelSpec::attention_params() const {
  const double h = static_cast<double>(hidden);
  double p = norm_params();
  if (mla.enabled()) {
    const double qk_head = static_cast<double>(mla.qk_nope_head_dim + mla.qk_rope_head_dim);
    const double a = static_cast<double>(heads);
    if (mla.q_lora_rank > 0) {
      const double r = static_cast<double>(mla.q_lora_rank);
      p += h * r + r + r * a * qk_head;  // down-projection, its norm, up-projection
    } else {
      p += h * a * qk_head;
    }
    const double kvr = static_cast<double>(mla.kv_lora_rank);
    p += h * (kvr + static_cast<double>(mla.qk_rope_head_dim));  // joint KV down + rope key
    p += kvr;                                                     // kv norm
    p += kvr * a * static_cast<double>(mla.qk_nope_head_dim + mla.v_head_dim);  // KV up
    p += a * static_cast<double>(mla.v_head_dim) * h;                            // output
    return p;
  }
  const double q = static_cast<double>(q_dim());
  const double kv = static_cast<double>(kv_dim());
  p += h * q + 2.0 * h * kv + q * h;
  if (attn_output_gate) p += h * q;  // the gate half of q_proj
  if (has_qkv_bias()) p += q + 2.0 * kv;
  if (has_out_bias()) p += h;
  if (qk_norm) p += 2.0 * static_cast<double>(head_dim);
  return p;
}

double ModelSpec::dense_mlp_params() const {
  const double h = static_cast<double>(hidden);
  const double f = static_cast<double>(ffn_hidden);
  // A parallel block's MLP reads the attention's normed input.
  double p = (shared_block_norm ? 0.0 : norm_params()) + static_cast<double>(mlp_matrices()) * h * f;
  if (linear_bias) p += (mlp_matrices() - 1) * f + h;
  return p;
}

double ModelSpec::expert_params() const {
  const double h = static_cast<double>(hidden);
  const double f = static_cast<double>(moe.expert_ffn);
  double p = static_cast<double>(mlp_matrices()) * h * f;
  if (linear_bias) p += (mlp_matrices() - 1) * f + h;
  return p;
}

double ModelSpec::moe_mlp_params() const {
  const double h = static_cast<double>(hidden);
  double p = norm_params() + h * static_cast<double>(moe.num_experts);  // router
  if (linear_bias) p += static_cast<double>(moe.num_experts);
  p += static_cast<double>(moe.num_experts) * expert_params();
  p += static_cast<double>(mlp_matrices()) * h * static_cast<double>(moe.shared_experts) *
       static_cast<double>(moe.shared_expert_ffn);
  return p;
}

double ModelSpec::moe_mlp_active_params() const {
  const double h = static_cast<double>(hidden);
  return norm_params() + h * static_cast<double>(moe.num_experts) +
         static_cast<double>(moe.top_k) * expert_params() +
         static_cast<double>(mlp_matrices()) * h * static_cast<double>(moe.shared_experts) *
             static_cast<double>(moe.shared_expert_ffn);
}

double ModelSpec::mamba_params() const {
  const double h = static_cast<double>(hidden);
  const double in = static_cast<double>(mamba.in_proj_width());
  const double conv = static_cast<double>(mamba.conv_channels());
  const double di = static_cast<double>(mamba.d_inner());
  double p = norm_params() + h * in + di * h;                      // pre-norm, in_proj, out_proj
  p += conv * static_cast<double>(mamba.conv_kernel) + (mamba.conv_bias ? conv : 0.0);  // depthwise conv1d
  p += 3.0 * static_cast<double>(mamba.heads);                     // dt_bias, A_log, D
  p += di;                                                         // gated RMSNorm weight
  if (mamba.proj_bias) p += in + h;
  return p;
}

double ModelSpec::linear_attention_params() const {
  const double h = static_cast<double>(hidden);
  const auto& la = linear;
  double p = norm_params() + h * static_cast<double>(la.in_proj_width()) + static_cast<double>(la.value_width()) * h;  // in_proj, out_proj
  p += static_cast<double>(la.conv_channels() * la.conv_kernel);                     // depthwise conv1d (no bias)
  p += 2.0 * static_cast<double>(la.v_heads) + static_cast<double>(la.v_dim);       // dt_bias, A_log; the gated norm's weight
  return p;
}

double ModelSpec::mixer_params(LayerKind k) const {
  switch (k.mixer) {
    case Mixer::kAttention: return attention_params();
    case Mixer::kMamba: return mamba_params();
    case Mixer::kLinear: return linear_attention_params();
    case Mixer::kNone: return 0;
  }
  return 0;
}

double ModelSpec::ffn_params(LayerKind k, bool active) const {
  switch (k.ffn) {
    case Ffn::kDense: return dense_mlp_params();
    case Ffn::kMoe: return active ? moe_mlp_active_params() : moe_mlp_params();
    case Ffn::kNone: return 0;
  }
  return 0;
}

double ModelSpec::layer_params(int64_t layer) const {
  const LayerKind k = layer_kind(layer);
  return mixer_params(k) + ffn_params(k);
}

double ModelSpec::embedding_params() const {
  double p = static_cast<double>(vocab) * static_cast<double>(hidden);
  if (position == PositionKind::kLearned) p += static_cast<double>((max_positions + position_offset) * hidden);
  if (embedding_norm) p += norm_params();
  return p;
}

double ModelSpec::output_params() const {
  double p = norm_params();
  if (!tied_embeddings) p += static_cast<double>(vocab) * static_cast<double>(hidden);
  if (head_bias) p += static_cast<double>(vocab);
  return p;
}

double ModelSpec::mtp_layer_active_params() const {
  const double h = static_cast<double>(hidden);
  const LayerKind last = layer_kind(num_layers - 1);
  return mixer_params(last) + ffn_params(last, true) + 2.0 * h * h + 3.0 * norm_params();
}

double ModelSpec::total_params() const {
  double p = embedding_params() + output_params();
  for (int64_t l = 0; l < num_layers; ++l) p += layer_params(l);
  return p;
}

double ModelSpec::active_params() const {
  if (!moe.enabled()) return total_params();
  double p = embedding_params() + output_params();
  for (int64_t l = 0; l < num_layers; ++l) {
    const LayerKind k = layer_kind(l);
    p += mixer_params(k) + ffn_params(k, true);
  }
  return p;
}

double ModelSpec::flop_params() const {
  double p = active_params() - embedding_params() + static_cast<double>(vocab * hidden);
  if (!tied_embeddings) p -= static_cast<double>(vocab * hidden);
  // p now counts layers + final norm + one V*h output matrix.
  return p;
}

namespace {

// HuggingFace config keys that do not change cost; accepted and ignored.
const std::vector<std::string>& ignored_hf_keys() {
  static const std::vector<std::string> keys = {
      "_name_or_path", "architectures", "auto_map", "torch_dtype", "dtype", "transformers_version",
      "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
      "rope_theta", "rope_scaling", "rope_type", "partial_rotary_factor", "rotary_pct",
      "rotary_emb_base", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_epsilon",
      "initializer_range", "initializer_factor", "use_cache", "attention_dropout", "hidden_dropout",
      "resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_type", "summary_use_proj",
      "summary_activation", "summary_proj_to_labels", "summary_first_dropout",
      "task_specific_params", "n_ctx", "scale_attn_weights", "reorder_and_upcast_attn",
      "scale_attn_by_inverse_layer_idx", "tokenizer_class", "pretraining_tp", "mlp_bias",
      "output_router_logits", "router_aux_loss_coef", "router_jitter_noise", "norm_topk_prob",
      "scoring_func", "topk_method", "routed_scaling_factor",
      "aux_loss_alpha", "seq_aux", "ep_size", "num_nextn_predict_layers", "quantization_config",
      "use_sliding_window", "swiglu_limit", "router_aux_loss_coef",
      "is_decoder", "use_parallel_residual", "bias_dropout_fusion", "apply_residual_connection_post_layernorm",
      "tie_encoder_decoder", "output_attentions", "output_hidden_states", "return_dict",
      "torchscript", "id2label", "label2id", "problem_type", "finetuning_task", "prefix",
      "use_bfloat16", "init_config", "learned_pos_emb", "emb_pdrop",
      "logit_scale", "verbose", "moe_aux_loss_coeff", "aux_loss_coef", "router_dtype",
      "initial_context_length", "rope_ntk_alpha", "rope_ntk_beta", "rope_scaling_factor",
      "enable_moe_block", "qk_layernorm_eps", "mtp_num_layers",
      // BLOOM: kernel-fusion and tensor-parallel flags of the training code, ALiBi offset.
      "masked_softmax_fusion", "offset_alibi", "skip_bias_add", "skip_bias_add_qkv", "slow_but_exact",
      "unk_token_id", "attention_softmax_in_fp32",
      // Runtime, export and serving settings.
      "transformers.js_config", "custom_pipelines", "attn_implementation", "cache_implementation",
      "classifier_dropout", "init_device", "tokenizer_name", "embedding_fraction",
      // Scalars that scale activations, logits or RoPE: no parameters, no extra passes worth costing.
      "original_max_position_embeddings", "attention_multiplier", "embedding_multiplier", "logits_scaling",
      "residual_multiplier", "query_pre_attn_scalar", "rope_local_base_freq", "attn_logit_softcapping",
      "final_logit_softcapping", "rotary_dim", "attn_scale", "attn_temperature_tuning", "floor_scale",
      "use_routing_bias", "qk_norm_type", "router_bias", "moe_router_enable_expert_bias",
      // Falcon's parallel attention + MLP: the same matrices and FLOPs as the sequential block
      // (parallel_attn and num_ln_in_parallel_attn are read for its norm count).
      "parallel_attn", "mlp_type",
      // Multi-token-prediction modules of the checkpoint (DeepSeek-V3, GLM, MiniMax): a training
      // choice, not part of the decoder stepcast costs.
      "num_mtp_modules", "mtp_transformer_layers", "use_mtp", "mtp_num_hidden_layers", "mtp_use_dedicated_embeddings",
      // transformers 5's grouping of the RoPE settings above (theta, scaling, partial factor).
      "rope_parameters",
      // Llama 4: a quantization-tooling flag.
      "for_llm_compressor",
      // ERNIE 4.5 router settings (capacity for inference, gate kind, bias-based balancing).
      "moe_capacity", "moe_gate", "moe_use_aux_free", "moe_norm_min",
      // transformers' PretrainedConfig: generation defaults and serialization fields that older
      // releases wrote into every config.json (sampling, beam search, token forcing), and
      // settings of inference or of the training script rather than of the architecture.
      "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
      "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
      "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
      "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
      "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
      "suppress_tokens", "begin_suppress_tokens", "chunk_size_feed_forward", "cross_attention_hidden_size",
      "tf_legacy_loss", "num_labels", "gradient_checkpointing", "model_max_length", "_from_model_config",
      "_commit_hash", "_attn_implementation_autoset", "z_loss_weight",
      // Dropout rates under their older and family names (GPT-NeoX, OPT, Phi): stepcast costs
      // dropout as the other rate keys above, not at all.
      "attention_probs_dropout_prob", "hidden_dropout_prob", "dropout", "activation_dropout", "layerdrop",
      "embed_dropout", "resid_dropout", "residual_dropout",
      // Seed-OSS: a bias on the attention's output projection (hidden_size parameters).
      "attention_out_bias",
      // Value clamping (OLMo, OLMoE), MiniCPM's muP scalars, OPT's initialisation and norm
      // placement (the same matrices before or after), PhiMoE's input jitter: no parameters or
      // passes worth costing. PhiMoE's lm_head_bias adds vocab_size parameters (under 0.001%).
      "clip_qkv", "scale_emb", "dim_model_base", "scale_depth", "init_std", "do_layer_norm_before",
      "_remove_final_layer_norm", "layer_norm_elementwise_affine", "input_jitter_noise", "lm_head_bias",
      // GPT-BigCode (StarCoder 1): its inference runner's settings and softmax precision; Falcon
      // 40B/180B's count of layer norms before the parallel attention and MLP (2h parameters).
      "inference_runner", "max_batch_size", "max_sequence_length", "pad_key_length", "pre_allocate_kv_cache",
      "validate_runner_input", "scale_attention_softmax_in_fp32", "num_ln_in_parallel_attn",
  };
  return keys;
}

// PretrainedConfig settings that make a config something other than a decoder-only language
// model. Their defaults (false, null, {}) are what every decoder's file writes; anything else is
// refused naming the key rather than costed as a plain decoder.
void refuse_non_decoder(ObjectReader& r, const std::string& path, Issues& issues) {
  if (r.get_bool("is_encoder_decoder", false)) {
    issues.add(path + ".is_encoder_decoder", "true: an encoder-decoder model (T5, BART style); stepcast costs decoder-only language models");
  }
  if (r.get_bool("add_cross_attention", false)) {
    issues.add(path + ".add_cross_attention", "true: decoder layers that attend to an encoder's output, which stepcast does not cost; "
                                              "it costs decoder-only language models");
  }
  if (const Json* ph = r.get_raw("pruned_heads"); ph != nullptr && !ph->is_null() && !(ph->is_object() && ph->empty())) {
    issues.add(path + ".pruned_heads", "got " + core::show(*ph) + "; pruned attention heads (a head count per layer) are not "
                                       "modelled: give the unpruned model's config");
  }
}

MlpKind mlp_from_activation(const std::string& act, bool& ok) {
  ok = true;
  static const std::vector<std::string> gated = {"silu", "swiglu", "swish", "geglu", "reglu"};
  static const std::vector<std::string> plain = {"gelu", "gelu_new", "gelu_pytorch_tanh",
                                                 "gelu_fast", "relu", "relu2", "squared_relu",
                                                 "quick_gelu"};
  if (std::find(gated.begin(), gated.end(), act) != gated.end()) return MlpKind::kGated;
  if (std::find(plain.begin(), plain.end(), act) != plain.end()) return MlpKind::kPlain;
  ok = false;
  return MlpKind::kGated;
}

// The first of several names for one setting (hub configs of different families); two of them
// given with different values is an error naming both. Marks all names read. `given`, when
// passed, receives the first name the config writes a value under (right or wrong), so errors
// can quote it and a wrong value is not also reported as missing.
std::optional<int64_t> int_alias(ObjectReader& r, std::initializer_list<std::string_view> keys,
                                 int64_t lo, int64_t hi, std::string* given = nullptr) {
  std::optional<int64_t> out;
  std::string first;
  for (auto k : keys) {
    if (!r.has(k)) {
      r.ignore({k});
      continue;
    }
    if (given != nullptr && given->empty()) {
      if (const Json* raw = r.get_raw(k); raw != nullptr && !raw->is_null()) *given = std::string(k);
    }
    auto v = r.get_int(k, lo, hi);
    if (!v) continue;
    if (!out) {
      out = v;
      first = std::string(k);
    } else if (*v != *out) {
      r.issues().add(r.child_path(k), "got " + std::to_string(*v) + "; conflicts with " + first + " (" + std::to_string(*out) +
                                          "), another name for the same setting");
    }
  }
  return out;
}

// The first present of several boolean names for one setting; `negated` names mean the
// opposite (MPT's no_bias). Two that disagree are an error naming both.
std::optional<bool> bool_alias(ObjectReader& r, std::initializer_list<std::string_view> keys,
                               std::initializer_list<std::string_view> negated = {}) {
  std::optional<bool> out;
  std::string first;
  auto take = [&](std::string_view k, bool flip) {
    if (!r.has(k)) {
      r.ignore({k});
      return;
    }
    auto v = r.get_bool(k);
    if (!v) return;
    const bool b = flip ? !*v : *v;
    if (!out) {
      out = b;
      first = std::string(k);
    } else if (b != *out) {
      r.issues().add(r.child_path(k), "conflicts with " + first + ", another name for the same setting");
    }
  };
  for (auto k : keys) take(k, false);
  for (auto k : negated) take(k, true);
  return out;
}

// Families whose layers alternate Gated DeltaNet and output-gated softmax attention: Qwen3-Next
// and Qwen3.5 (its decoders, dense and MoE, as the multimodal wrapper's text_config names them).
bool gated_deltanet_family(const std::string& model_type) {
  return model_type == "qwen3_next" || model_type == "qwen3_5_text" || model_type == "qwen3_5_moe_text";
}

// Architectures whose token mixing is not softmax attention in every layer (state-space or
// linear-attention layers): stepcast's layer model would cost them as full attention, so they
// are refused with the reason instead of loading with wrong numbers. Returns the reason or "".
std::string unsupported_mixer(const Json& j, const std::string& model_type) {
  static const std::vector<std::string> types = {
      "mamba", "mamba2", "falcon_mamba", "jamba", "zamba", "zamba2", "bamba", "falcon_h1",
      "granitemoehybrid", "rwkv", "rwkv5", "rwkv6", "recurrent_gemma", "lfm2", "plamo2",
      "minimax", "minimax_m1", "xlstm"};
  if (std::find(types.begin(), types.end(), model_type) != types.end()) {
    return "model_type \"" + model_type + "\" has state-space or linear-attention layers";
  }
  // Nemotron-H stacks Mamba-2, attention, MLP and MoE blocks by its pattern, which stepcast
  // models (ModelSpec::layer_pattern); its LatentMoE variant (Nemotron 3 Super and Ultra)
  // projects tokens to a smaller width before the experts, which it does not.
  // Qwen3-Next and Qwen3.5 alternate Gated DeltaNet and softmax attention layers
  // (ModelSpec::mixer_pattern).
  if (gated_deltanet_family(model_type) || model_type == "qwen3_5" || model_type == "qwen3_5_moe") return "";
  if (model_type == "nemotron_h" || j.contains("hybrid_override_pattern")) {
    if (j.contains("moe_latent_size") && !j["moe_latent_size"].is_null()) {
      return "its \"moe_latent_size\" key describes LatentMoE experts (a down-projection before routing), which stepcast does not cost";
    }
    return "";
  }
  for (const char* k : {"state_size", "ssm_cfg", "mamba_d_state", "linear_num_key_heads", "layers_block_type", "attn_layer_period"}) {
    if (j.contains(k)) return std::string("its \"") + k + "\" key describes state-space or linear-attention layers";
  }
  if (auto it = j.find("attn_type_list"); it != j.end() && it->is_array()) {
    for (const auto& t : *it) {
      if (t.is_number_integer() && t.get<int64_t>() == 0) return "attn_type_list marks linear-attention layers (0)";
    }
  }
  if (auto it = j.find("layer_types"); it != j.end() && it->is_array()) {
    for (const auto& t : *it) {
      if (t.is_string() && t.get<std::string>() != "sliding_attention" && t.get<std::string>() != "full_attention" &&
          t.get<std::string>() != "chunked_attention") {
        return "layer_types names \"" + t.get<std::string>() + "\" layers";
      }
    }
  }
  return "";
}

// Nemotron-H's layer pattern and Mamba-2 mixer (transformers' NemotronHConfig names and the
// names of its older remote-code files). The pattern comes as hybrid_override_pattern
// ("M-M*-E...") or as layers_block_type (["mamba", "attention", "mlp", "moe", ...]); MoE keys
// take effect only where the pattern has E blocks (configs carry the class's MoE defaults).
void read_hybrid(ObjectReader& r, const Json& j, const std::string& path, ModelSpec& m, const std::optional<int64_t>& layers) {
  Issues& issues = r.issues();
  std::string pattern;
  bool pattern_ok = true;
  if (auto p = r.get_string("hybrid_override_pattern")) pattern = *p;
  // Megatron-Core's pattern may mark pipeline stage boundaries ('|') and append
  // multi-token-prediction blocks after '/'.
  if (const size_t slash = pattern.find('/'); pattern_ok && slash != std::string::npos) {
    issues.add(path + ".hybrid_override_pattern", "has '/' at position " + std::to_string(slash) +
                                                      ": multi-token-prediction blocks of hybrid models are not modelled; drop the part from '/'");
    pattern_ok = false;
  }
  if (pattern_ok && pattern.find('|') != std::string::npos) {
    std::vector<int64_t> stages{0};
    std::string blocks;
    for (const char c : pattern) {
      if (c == '|') {
        stages.push_back(0);
      } else {
        ++stages.back();
        blocks.push_back(c);
      }
    }
    m.pattern_stages = std::move(stages);
    pattern = std::move(blocks);
  }
  if (const Json* bt = r.get_raw("layers_block_type"); bt != nullptr && !bt->is_null()) {
    std::string from_list;
    if (!bt->is_array()) {
      issues.add(path + ".layers_block_type", "got " + core::show(*bt) + "; expected a list of \"mamba\", \"attention\", \"mlp\" or \"moe\", one per layer");
      pattern_ok = false;
    } else {
      for (size_t i = 0; i < bt->size(); ++i) {
        const Json& t = (*bt)[i];
        const std::string v = t.is_string() ? t.get<std::string>() : "";
        const char ch = v == "mamba" ? 'M' : v == "attention" ? '*' : v == "mlp" ? '-' : v == "moe" ? 'E' : 0;
        if (ch == 0) {
          issues.add(path + ".layers_block_type[" + std::to_string(i) + "]", "got " + core::show(t) + "; expected \"mamba\", \"attention\", \"mlp\" or \"moe\"");
          pattern_ok = false;
          continue;
        }
        from_list.push_back(ch);
      }
    }
    if (pattern_ok && !pattern.empty() && pattern != from_list) {
      issues.add(path + ".layers_block_type", "disagrees with hybrid_override_pattern \"" + pattern + "\"");
      pattern_ok = false;
    }
    if (pattern.empty()) pattern = from_list;
  }
  // transformers derives layer_types (mamba / attention / moe) from the pattern.
  r.ignore({"layer_types"});

  if (pattern.empty() && pattern_ok) {
    issues.add(path + ".hybrid_override_pattern", "required string is missing (one character per layer: M Mamba-2, * attention, - MLP, E MoE)");
    pattern_ok = false;
  }
  for (size_t i = 0; pattern_ok && i < pattern.size(); ++i) {
    if (std::string_view("M*-E").find(pattern[i]) == std::string_view::npos) {
      issues.add(path + ".hybrid_override_pattern", "has '" + std::string(1, pattern[i]) + "' as block " + std::to_string(i) +
                                                        "; allowed: M (Mamba-2), * (attention), - (MLP), E (MoE), and '|' between pipeline stages");
      pattern_ok = false;
    }
  }
  if (pattern_ok && layers && static_cast<int64_t>(pattern.size()) != *layers) {
    issues.add(path + ".hybrid_override_pattern", "has " + std::to_string(pattern.size()) + " layers; num_hidden_layers is " +
                                                      std::to_string(*layers));
    pattern_ok = false;
  }
  if (pattern_ok) m.layer_pattern = pattern;
  if (!pattern_ok) m.pattern_stages.clear();
  const bool mamba_layers = pattern.find('M') != std::string::npos;
  auto& mb = m.mamba;
  std::string heads_key;
  const auto heads = int_alias(r, {"mamba_num_heads", "mamba_n_heads"}, 1, 1 << 20, &heads_key);
  if (!heads && heads_key.empty() && mamba_layers) issues.add(path + ".mamba_num_heads", "required integer is missing (the Mamba-2 heads)");
  std::string state_key;
  const auto state = int_alias(r, {"ssm_state_size", "mamba_d_state"}, 1, 1 << 20, &state_key);
  if (!state && state_key.empty() && mamba_layers) issues.add(path + ".ssm_state_size", "required integer is missing (the Mamba-2 state size)");
  mb.heads = heads.value_or(0);
  mb.state = state.value_or(0);
  mb.head_dim = int_alias(r, {"mamba_head_dim", "mamba_d_head"}, 1, 1 << 20).value_or(64);
  mb.groups = int_alias(r, {"n_groups", "mamba_n_groups", "mamba_num_groups"}, 1, 1 << 20).value_or(8);
  mb.conv_kernel = int_alias(r, {"conv_kernel", "mamba_d_conv"}, 1, 1 << 10).value_or(4);
  mb.chunk = int_alias(r, {"chunk_size", "mamba_chunk_size"}, 1, 1 << 20).value_or(128);
  mb.conv_bias = bool_alias(r, {"use_conv_bias", "mamba_conv_bias"}).value_or(true);
  mb.proj_bias = r.get_bool("mamba_proj_bias", false);
  if (!mamba_layers) mb = MambaSpec{};
  // expand is read (a positive integer) but sets nothing: the mixer's inner width is
  // mamba_num_heads x mamba_head_dim (Nemotron 3 Nano's files keep a nominal expand of 2 beside
  // 64 x 64 heads on a 2688-wide model).
  (void)int_alias(r, {"expand", "mamba_expand"}, 1, 1 << 10);
  // Settings with no cost: the SSM's activation and time-step initialisation, kernel choice,
  // inference-only and initialisation flags.
  r.ignore({"mamba_ssm_cache_dtype", "norm_eps", "mtp_layers_block_type", "mamba_hidden_act", "time_step_min", "time_step_max", "time_step_limit", "time_step_floor", "mamba_dt_min", "mamba_dt_max",
            "mamba_dt_limit", "mamba_dt_init_floor", "use_mamba_kernels", "num_logits_to_keep", "residual_in_fp32",
            "rescale_prenorm_residual", "mlp_hidden_act", "mamba_step_rank", "mtp_hybrid_override_pattern"});
  // MoE blocks exist only where the pattern puts them.
  if (pattern.find('E') == std::string::npos) {
    m.moe = MoeSpec{};
  } else if (!m.moe.enabled()) {
    issues.add(path + ".n_routed_experts", "required integer is missing: the pattern has MoE (E) layers");
  }
  (void)j;
}

// Qwen3-Next's Gated DeltaNet layers: which layers use them (layer_types, or every
// full_attention_interval-th layer is softmax attention) and their shapes. Its softmax
// attention layers gate their output and normalise Q and K.
void read_linear_attention(ObjectReader& r, const std::string& path, ModelSpec& m, const std::optional<int64_t>& layers) {
  Issues& issues = r.issues();
  auto& la = m.linear;
  auto need = [&](const char* key, int64_t lo) {
    const auto v = r.get_int(key, lo, 1 << 20);
    const Json* raw = r.get_raw(key);
    if (!v && (raw == nullptr || raw->is_null())) issues.add(path + "." + key, "required integer is missing (Gated DeltaNet layers)");
    return v.value_or(0);
  };
  la.k_heads = need("linear_num_key_heads", 1);
  la.v_heads = need("linear_num_value_heads", 1);
  la.k_dim = need("linear_key_head_dim", 1);
  la.v_dim = need("linear_value_head_dim", 1);
  la.conv_kernel = r.get_int("linear_conv_kernel_dim", 1, 1 << 10).value_or(4);
  if (la.k_heads > 0 && la.v_heads % la.k_heads != 0) {
    issues.add(path + ".linear_num_value_heads", "got " + std::to_string(la.v_heads) + "; must be a multiple of linear_num_key_heads (" +
                                                     std::to_string(la.k_heads) + "), which the value heads share");
  }
  const int64_t n = layers.value_or(0);
  std::string pattern;
  if (const Json* lt = r.get_raw("layer_types"); lt != nullptr && !lt->is_null()) {
    if (!lt->is_array() || static_cast<int64_t>(lt->size()) != n) {
      issues.add(path + ".layer_types", "expected a list of \"linear_attention\" or \"full_attention\", one per layer (" + std::to_string(n) + ")");
      return;
    }
    for (size_t i = 0; i < lt->size(); ++i) {
      const Json& t = (*lt)[i];
      const std::string v = t.is_string() ? t.get<std::string>() : "";
      if (v != "linear_attention" && v != "full_attention") {
        issues.add(path + ".layer_types[" + std::to_string(i) + "]", "got " + core::show(t) + "; expected \"linear_attention\" or \"full_attention\"");
        return;
      }
      pattern.push_back(v == "linear_attention" ? 'L' : 'A');
    }
    r.ignore({"full_attention_interval"});
  } else {
    // transformers' rule: layer i is softmax attention when (i + 1) is a multiple of the interval.
    const int64_t every = r.get_int("full_attention_interval", 1, 1 << 20).value_or(4);
    for (int64_t i = 0; i < n; ++i) pattern.push_back((i + 1) % every == 0 ? 'A' : 'L');
  }
  if (pattern.find('L') != std::string::npos) m.mixer_pattern = pattern;
  // Both families gate the softmax layers' output (Qwen3.5's files say so in attn_output_gate).
  m.attn_output_gate = r.get_bool("attn_output_gate", true);
}

ModelSpec parse_model_object(const Json& j, const std::string& path, Issues& issues) {
  // A run file given where a model config belongs (its own model, cluster and training
  // sections) would otherwise read as a dozen missing and unknown model keys.
  if (j.is_object() && j.contains("model") && j.contains("training") && j.contains("cluster")) {
    issues.add(path, "this is a run file (model, cluster, training sections), not a model config; give its model here instead");
    return {};
  }
  if (j.is_object() && j.contains("model_type") && !j["model_type"].is_null() && !j["model_type"].is_string()) {
    issues.add(path + ".model_type", "got " + core::show(j["model_type"]) + "; expected a string (the model family, as a hub config names it)");
    return {};
  }
  {
    const std::string why = unsupported_mixer(j, j.contains("model_type") && j["model_type"].is_string()
                                                      ? j["model_type"].get<std::string>()
                                                      : std::string());
    if (!why.empty()) {
      issues.add(path, why + "; stepcast models decoders with softmax attention in every layer (dense or MoE MLPs) and "
                             "Nemotron-H's Mamba-2 hybrids, so it cannot cost this architecture");
      return {};
    }
  }
  // Multimodal wrappers (Llama 4, Gemma 3, ...) keep the language model under text_config:
  // stepcast costs that decoder (the vision tower is not modelled). The wrapper's own keys and
  // hub metadata are accepted; its name, source, tie_word_embeddings and model_type carry into
  // the decoder when text_config lacks them; any other top-level key is an error at its path.
  if (j.is_object() && j.contains("text_config")) {
    const Json& tc = j["text_config"];
    if (!tc.is_object()) {
      issues.add(path + ".text_config", "got " + core::show(tc) + "; expected the language model's config object");
      return {};
    }
    for (const char* k : {"num_hidden_layers", "n_layer", "num_layers", "hidden_size"}) {
      if (j.contains(k)) {
        issues.add(path + ".text_config", std::string("given beside a top-level ") + k +
                                              "; a multimodal config keeps the decoder's settings in text_config only");
        return {};
      }
    }
    static const std::vector<std::string> wrapper = {
        "text_config", "vision_config", "image_token_index", "image_token_id", "boi_token_index", "eoi_token_index",
        "boi_token_id", "eoi_token_id", "mm_tokens_per_image", "vision_feature_layer", "vision_feature_select_strategy",
        "projector_hidden_act", "multi_modal_projector_bias", "model_type", "architectures", "video_token_id",
        "vision_start_token_id", "vision_end_token_id"};
    ObjectReader top(j, path, issues);
    top.accept_null_as_absent();
    top.ignore(wrapper);
    top.ignore(ignored_hf_keys());
    refuse_non_decoder(top, path, issues);
    Json text = tc;
    for (const char* k : {"name", "source", "tie_word_embeddings"}) {
      const Json* v = top.get_raw(k);
      if (v == nullptr || v->is_null()) continue;
      if (!text.contains(k) || text[k].is_null()) {
        text[k] = *v;
      } else if (text[k] != *v) {
        issues.add(path + "." + k, "got " + core::show(*v) + "; text_config." + k + " says " + core::show(text[k]));
      }
    }
    if ((!text.contains("model_type") || text["model_type"].is_null()) && j.contains("model_type")) text["model_type"] = j["model_type"];
    top.finish();
    return parse_model_object(text, path + ".text_config", issues);
  }
  // Gemma 3's multimodal files keep a minimal text_config and rely on transformers'
  // Gemma3TextConfig defaults for the rest (one global layer in six, a 4,096-token window).
  if (j.is_object() && j.contains("model_type") && j["model_type"] == "gemma3_text") {
    static const Json defaults = {{"vocab_size", 262208}, {"num_attention_heads", 8}, {"num_key_value_heads", 4},
                                  {"head_dim", 256}, {"sliding_window", 4096}, {"sliding_window_pattern", 6},
                                  {"max_position_embeddings", 131072}};
    Json filled = j;
    const bool pattern_given = j.contains("_sliding_window_pattern") || j.contains("layer_types");
    for (auto it = defaults.begin(); it != defaults.end(); ++it) {
      if (it.key() == "sliding_window_pattern" && pattern_given) continue;
      if (!filled.contains(it.key()) || filled[it.key()].is_null()) filled[it.key()] = it.value();
    }
    if (filled != j) return parse_model_object(filled, path, issues);
  }
  ObjectReader r(j, path, issues);
  r.accept_null_as_absent();  // hub config.json files write null for unset settings
  ModelSpec m;
  m.name = r.get_string("name").value_or("custom");
  m.source = r.get_string("source").value_or("user-supplied");
  const std::string model_type = r.get_string("model_type").value_or("");
  refuse_non_decoder(r, path, issues);
  const bool gpt2_like = model_type == "gpt2" || model_type == "gpt_bigcode" || r.has("n_embd");
  // GPT-J and CodeGen: GPT-2's key names, rotary positions (GPT-J's files say "rotary": true).
  const bool gptj = model_type == "gptj" || model_type == "codegen";
  // GPT-Neo: local attention in every other layer (attention_layers), a 4h MLP when
  // intermediate_size is null, learned positions, LayerNorm, biases.
  const bool gpt_neo = model_type == "gpt_neo";
  // OPT: learned positions, LayerNorm, biases on every linear layer (enable_bias), a plain
  // ReLU MLP of ffn_dim, tied embeddings.
  const bool opt = model_type == "opt";
  // ChatGLM / GLM-4 (THUDM's files): Megatron-style names (kv_channels, ffn_hidden_size,
  // padded_vocab_size), grouped K/V by multi_query_group_num, Q/K/V biases by add_qkv_bias,
  // RMSNorm by rmsnorm, a SwiGLU MLP (dense_h_to_4h is twice ffn_hidden_size wide).
  const bool chatglm = model_type == "chatglm";
  if (chatglm) {
    r.ignore({"apply_query_key_layer_scaling", "fp32_residual_connection", "layernorm_epsilon", "original_rope", "post_layer_norm",
              "rope_ratio", "quantization_bit", "pre_seq_len", "prefix_projection"});
  }
  // BLOOM's config.json names none of these; the architecture fixes them: ALiBi, LayerNorm
  // (also on the embeddings), biases on every linear layer, a plain GeLU MLP.
  const bool bloom = model_type == "bloom";
  // Gemma's MLP is gated (GeGLU) whatever its activation is called.
  const bool gemma = model_type.rfind("gemma", 0) == 0;
  const bool falcon = model_type == "falcon" || model_type == "RefinedWeb" || model_type == "RefinedWebModel";
  const bool llama4 = model_type == "llama4_text" || model_type == "llama4";
  // Nemotron-H: Mamba-2, attention, MLP and MoE blocks stacked by hybrid_override_pattern.
  const bool nemotron_h = model_type == "nemotron_h" || r.has("hybrid_override_pattern");
  // MPT and DBRX keep attention settings in attn_config and DBRX its MLP / experts in
  // ffn_config; each is read with its own known keys (elsewhere they are unknown keys).
  constexpr int64_t kBig = int64_t{1} << 40;
  const bool mpt_family = model_type == "mpt" || model_type == "dbrx";
  struct Nested {
    std::optional<int64_t> kv_heads, ffn, experts, top_k;
    std::optional<bool> alibi;
    bool multi_query = false, top_k_written = false;
    std::string act;  // ffn_config.ffn_act_fn.name
  } nested;
  if (mpt_family) {
    if (const Json* ac = r.get_raw("attn_config"); ac != nullptr && !ac->is_null()) {
      ObjectReader a(*ac, path + ".attn_config", issues);
      a.accept_null_as_absent();
      nested.kv_heads = a.get_int("kv_n_heads", 1, 1 << 20);
      nested.alibi = a.get_bool("alibi");
      const std::string kind = a.get_choice("attn_type", {"multihead_attention", "multiquery_attention", "grouped_query_attention"},
                                            "multihead_attention");
      nested.multi_query = kind == "multiquery_attention";
      a.ignore({"clip_qkv", "rope_theta", "attn_pdrop", "attn_impl", "alibi_bias_max", "prefix_lm", "qk_ln", "qk_gn",
                "softmax_scale", "attn_uses_sequence_id", "sliding_window_size", "rope", "rope_impl", "rope_dail_config",
                "rope_hf_config", "fused_qkv", "model_type", "transformers_version"});
      a.finish();
    }
    if (const Json* fc = r.get_raw("ffn_config"); fc != nullptr && !fc->is_null()) {
      ObjectReader f(*fc, path + ".ffn_config", issues);
      f.accept_null_as_absent();
      nested.ffn = f.get_int("ffn_hidden_size", 1, kBig);
      nested.experts = f.get_int("moe_num_experts", 1, 1 << 20);
      nested.top_k = f.get_int("moe_top_k", 1, 1 << 20);
      if (const Json* act = f.get_raw("ffn_act_fn"); act != nullptr && act->is_object() && act->contains("name") &&
                                                   (*act)["name"].is_string()) {
        nested.act = (*act)["name"].get<std::string>();
      }
      nested.top_k_written = f.has("moe_top_k") && !(*fc)["moe_top_k"].is_null();
      f.ignore({"moe_jitter_eps", "moe_loss_weight", "moe_normalize_expert_weights", "uniform_expert_assignment",
                "ffn_type", "fc_type", "moe_weight_parallelism", "model_type", "transformers_version"});
      f.finish();
    }
  }
  // A setting given both at the top level and in attn_config / ffn_config must agree.
  auto agree = [&](std::optional<int64_t>& top, const std::optional<int64_t>& inner, const char* top_key, const char* inner_key) {
    if (!inner) return;
    if (top && *top != *inner) {
      issues.add(path + "." + top_key, "got " + std::to_string(*top) + "; " + inner_key + " says " + std::to_string(*inner));
    }
    top = inner;
  };
  auto layers = int_alias(r, {"num_hidden_layers", "n_layer", "num_layers", "n_layers"}, 1, 100000);
  auto hidden = int_alias(r, {"hidden_size", "n_embd", "d_model"}, 1, kBig);
  auto heads = int_alias(r, {"num_attention_heads", "n_head", "n_heads", "num_heads"}, 1, 1 << 20);
  // Missing, not wrong: a bad value of one of the names is reported by the reader already.
  auto none_of = [&](std::initializer_list<const char*> keys) {
    for (const char* k : keys) {
      if (r.has(k) && !j.at(k).is_null()) return false;
    }
    return true;
  };
  // Present with a value (hub configs write null for unset).
  auto given = [&](std::initializer_list<const char*> keys) { return !none_of(keys); };
  if (!layers && none_of({"num_hidden_layers", "n_layer", "num_layers", "n_layers"})) issues.add(path, "missing the layer count (num_hidden_layers or n_layer)");
  if (!hidden && none_of({"hidden_size", "n_embd", "d_model"})) issues.add(path, "missing the hidden size (hidden_size or n_embd)");
  if (!heads && none_of({"num_attention_heads", "n_head", "n_heads", "num_heads"})) issues.add(path, "missing the head count (num_attention_heads or n_head)");
  m.num_layers = layers.value_or(0);
  m.hidden = hidden.value_or(0);
  m.heads = heads.value_or(0);
  auto kv_heads = r.get_int("num_key_value_heads", 1, 1 << 20);
  if (chatglm && r.get_bool("multi_query_attention", false)) {
    std::optional<int64_t> groups = r.get_int("multi_query_group_num", 1, 1 << 20);
    if (!groups) issues.add(path + ".multi_query_group_num", "required with multi_query_attention: true (the K/V head count)");
    m.key_names.kv_heads = "multi_query_group_num";
    agree(kv_heads, groups, "num_key_value_heads", "multi_query_group_num");
  } else if (chatglm) {
    r.ignore({"multi_query_group_num"});
  }
  if (falcon) {
    // Falcon: new_decoder_architecture groups K/V (num_kv_heads); otherwise multi_query means
    // one K/V head. (Older files also print num_kv_heads equal to the head count.)
    const bool new_arch = r.get_bool("new_decoder_architecture", false);
    const bool multi_query = r.get_bool("multi_query", true);
    const auto kv = r.get_int("num_kv_heads", 1, 1 << 20);
    std::optional<int64_t> falcon_kv;
    if (new_arch || !multi_query) {
      // transformers: num_kv_heads when new_decoder_architecture or not multi_query.
      falcon_kv = kv ? kv : heads;
      m.key_names.kv_heads = "num_kv_heads";
    } else {
      falcon_kv = 1;
      m.key_names.kv_heads = "multi_query";
    }
    if (falcon_kv) agree(kv_heads, falcon_kv, "num_key_value_heads", m.key_names.kv_heads.c_str());
  }
  if (model_type == "gpt_bigcode") {
    // GPT-BigCode (StarCoder 1, SantaCoder): one K/V head shared by every query head unless
    // multi_query is false (transformers' default is true).
    std::optional<int64_t> bigcode_kv = r.get_bool("multi_query", true) ? std::optional<int64_t>(1) : heads;
    m.key_names.kv_heads = "multi_query";
    agree(kv_heads, bigcode_kv, "num_key_value_heads", "multi_query");
  }
  if (nested.multi_query) nested.kv_heads = 1;
  if (nested.kv_heads) {
    m.key_names.kv_heads = nested.multi_query ? "attn_config.attn_type" : "attn_config.kv_n_heads";
    agree(kv_heads, nested.kv_heads, "num_key_value_heads", m.key_names.kv_heads.c_str());
  }
  m.kv_heads = kv_heads.value_or(m.heads);
  // Nemotron-H's older files name it attention_head_dim.
  m.head_dim = (chatglm ? int_alias(r, {"head_dim", "kv_channels"}, 1, 1 << 20) : int_alias(r, {"head_dim", "attention_head_dim"}, 1, 1 << 20))
                   .value_or(m.heads > 0 ? m.hidden / m.heads : 0);
  const bool mla_config = r.has("kv_lora_rank");  // MLA sets the head widths itself (below)
  if (!given({"head_dim", "attention_head_dim"}) && !mla_config && m.heads > 0 && m.hidden % m.heads != 0) {
    issues.add(path + ".num_attention_heads", "hidden_size " + std::to_string(m.hidden) +
                                                  " is not divisible by " +
                                                  std::to_string(m.heads) +
                                                  " heads; give head_dim explicitly");
  }
  // GPT-2 writes n_inner: null (or leaves it out) for 4*h; other families must give the size.
  auto ffn = int_alias(r, {"intermediate_size", "n_inner", "ffn_hidden_size", "ffn_dim"}, 1, kBig);
  agree(ffn, nested.ffn, "intermediate_size", "ffn_config.ffn_hidden_size");
  // n_inner: null is GPT-2's (and BLOOM's) way of saying 4 x hidden.
  bool ffn_given = given({"intermediate_size", "ffn_hidden_size", "ffn_dim"}) || r.has("n_inner") || (mpt_family && r.has("ffn_config"));
  if (given({"expansion_ratio"})) {
    // MPT: the MLP is expansion_ratio x d_model wide.
    ffn_given = true;
    if (auto ratio = r.get_number("expansion_ratio", 0.0, 1e6)) {
      const auto width = static_cast<int64_t>(std::llround(*ratio * static_cast<double>(m.hidden)));
      if (width < 1) {
        issues.add(path + ".expansion_ratio", "got " + core::fmt("%g", *ratio) + "; the MLP would be " + std::to_string(width) +
                                                  " wide (expansion_ratio x d_model must be at least 1)");
      } else {
        std::optional<int64_t> from_ratio = width;
        agree(ffn, from_ratio, "intermediate_size", "expansion_ratio x d_model");
      }
    }
  }
  m.ffn_hidden = ffn.value_or(4 * m.hidden);
  const bool moe_config = given({"num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts"}) || nested.experts;
  // Llama 4: routed and shared experts are intermediate_size wide, the dense layers intermediate_size_mlp.
  const auto llama4_dense = llama4 ? r.get_int("intermediate_size_mlp", 1, kBig) : std::nullopt;
  // A mixture-of-experts config may give only its experts' width (moe_intermediate_size).
  if (!ffn_given && !gpt2_like && !falcon && !gpt_neo && !(moe_config && given({"moe_intermediate_size"}))) {
    issues.add(path + ".intermediate_size", moe_config ? "required integer is missing (the experts' hidden width: intermediate_size or moe_intermediate_size)"
                                                       : "required integer is missing (the MLP's hidden width; only GPT-2 style configs default to 4 x hidden)");
  }
  auto vocab = chatglm ? int_alias(r, {"vocab_size", "padded_vocab_size"}, 1, kBig) : r.get_int("vocab_size", 1, kBig);
  if (!vocab && (chatglm ? none_of({"vocab_size", "padded_vocab_size"}) : none_of({"vocab_size"}))) {
    issues.add(path + ".vocab_size", "required integer is missing");
  }
  m.vocab = vocab.value_or(0);
  m.max_positions =
      (chatglm ? int_alias(r, {"max_position_embeddings", "seq_length"}, 1, kBig)
                     : int_alias(r, {"max_position_embeddings", "n_positions", "max_seq_len"}, 1, kBig))
          .value_or(0);
  if (opt) {
    // OPT-350m embeds tokens at word_embed_proj_dim and projects them into and out of the
    // decoder's width; those projections are not modelled.
    if (const auto d = r.get_int("word_embed_proj_dim", 1, kBig); d && hidden && *d != *hidden) {
      issues.add(path + ".word_embed_proj_dim", "got " + std::to_string(*d) + ", not hidden_size " + std::to_string(*hidden) +
                                                    ": OPT's projections of the embeddings into and out of the decoder's width "
                                                    "are not modelled");
    }
  }

  std::string act = "silu";
  std::string act_key = "hidden_act";
  if (r.has("activation_function")) {
    act_key = "activation_function";
    act = r.get_string("activation_function").value_or(act);
    r.ignore({"hidden_act", "hidden_activation"});
  } else if (r.has("hidden_activation")) {
    act_key = "hidden_activation";  // Gemma's name (newer files carry hidden_act beside it)
    act = r.get_string("hidden_activation").value_or(act);
    r.ignore({"hidden_act"});
  } else if (r.has("hidden_act")) {
    act = r.get_string("hidden_act").value_or(act);
  } else if (nemotron_h) {
    act_key = "mlp_hidden_act";  // Nemotron-H: squared ReLU MLPs unless it says otherwise
    act = r.get_string("mlp_hidden_act").value_or("relu2");
  } else if (model_type == "dbrx") {
    act = "silu";  // DBRX: a GLU expert MLP (w1, v1, w2) whatever ffn_act_fn names
  } else if (!nested.act.empty()) {
    act = nested.act;  // MPT's ffn_config.ffn_act_fn
  } else if (gpt2_like || falcon) {
    act = gpt2_like ? "gelu_new" : "gelu";
  } else if (bloom || model_type == "mpt") {
    act = "gelu";
  }
  bool act_ok = true;
  m.mlp = mlp_from_activation(act, act_ok);
  if (gemma && act_ok) m.mlp = MlpKind::kGated;
  if (!act_ok) {
    issues.add(path + "." + act_key, "got \"" + act +
                                         "\"; allowed: silu, swiglu, swish, geglu, reglu (gated, 3 "
                                         "matrices) or gelu, gelu_new, gelu_pytorch_tanh, relu, "
                                         "relu2, squared_relu (2 matrices)");
  }
  // transformers writes tie_word_embeddings unless it equals both the library default (true) and
  // the family's, so a published file carries it; a hand-written one that leaves it out gets the
  // family's default (false for these families, the library's true otherwise).
  static const std::vector<std::string> untied_families = {
      "llama", "llama4", "llama4_text", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
      "deepseek_v2", "deepseek_v3", "kimi_k2", "dbrx", "phi3", "olmo", "olmo2", "olmoe", "granite", "nemotron", "glm4_moe"};
  const bool untied_default = std::find(untied_families.begin(), untied_families.end(), model_type) != untied_families.end();
  m.tied_embeddings = r.get_bool("tie_word_embeddings", !untied_default);

  // ALiBi: BLOOM always; Falcon and MPT by their flag (MPT's in attn_config).
  bool alibi = bloom;
  std::string alibi_key;
  if (falcon && given({"alibi"})) {
    alibi = r.get_bool("alibi", false);
    alibi_key = "alibi";
  }
  if (nested.alibi) {
    alibi = *nested.alibi;
    alibi_key = "attn_config.alibi";
  }
  // MPT learns positions unless it uses ALiBi (learned_pos_emb is true by default there).
  const bool mpt_learned = model_type == "mpt" && !alibi;
  // Nemotron-H's attention layers use no position embedding (the Mamba layers carry order).
  // GPT-J's rotary flag: true in its files; a GPT-J without it would learn positions as GPT-2 does.
  const bool gptj_rotary = gptj && (model_type == "codegen" || r.get_bool("rotary", true));
  const std::string pos_default = ((gpt2_like && !gptj_rotary) || mpt_learned || opt || gpt_neo) ? "learned"
                                  : alibi                                              ? "alibi"
                                  : nemotron_h                                         ? "none"
                                                                                       : "rotary";
  const std::string pos = r.get_choice("position_embedding", {"rotary", "learned", "alibi", "none"}, pos_default);
  if (!alibi_key.empty() && given({"position_embedding"}) && pos != pos_default) {
    issues.add(path + ".position_embedding", "got \"" + pos + "\"; " + alibi_key + " says " + (alibi ? "alibi" : "not alibi"));
  }
  m.position = pos == "learned" ? PositionKind::kLearned
               : pos == "alibi" ? PositionKind::kAlibi
               : pos == "none"  ? PositionKind::kNone
                                : PositionKind::kRotary;
  if (m.position == PositionKind::kLearned && m.max_positions == 0) {
    issues.add(path, "learned position embeddings need n_positions or max_position_embeddings");
  }
  const bool layernorm_default = gpt2_like || bloom || falcon || model_type == "nemotron" || model_type == "gpt_neox" ||
                                 model_type == "mpt" || model_type == "dbrx" || model_type == "starcoder2" ||
                                 model_type == "phi" || model_type == "stablelm" || opt || gpt_neo;
  std::string norm_default = layernorm_default ? "layernorm" : "rmsnorm";
  if (chatglm) norm_default = r.get_bool("rmsnorm", true) ? "rmsnorm" : "layernorm";
  bool norm_type_given = false;
  if (auto nt = r.get_string("norm_type")) {
    // StarCoder2 / MPT name the norm: layer_norm, low_precision_layernorm, rms_norm, RMSNorm, ...
    std::string t = *nt;
    std::transform(t.begin(), t.end(), t.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    const bool rms = t.find("rms") != std::string::npos;
    const bool ln = !rms && (t.find("layer") != std::string::npos || t.find("ln") != std::string::npos);
    if (!rms && !ln) {
      issues.add(path + ".norm_type", "got \"" + *nt + "\"; expected a LayerNorm (layer_norm, low_precision_layernorm) or an RMSNorm (rms_norm)");
    } else {
      norm_default = rms ? "rmsnorm" : "layernorm";
      norm_type_given = true;
    }
  }
  const std::string norm = r.get_choice("norm", {"rmsnorm", "layernorm"}, norm_default);
  if (norm_type_given && given({"norm"}) && norm != norm_default) {
    issues.add(path + ".norm", "got \"" + norm + "\"; norm_type says " + norm_default);
  }
  m.norm = norm == "layernorm" ? NormKind::kLayerNorm : NormKind::kRmsNorm;
  // Biases on every linear layer: GPT-2 style, BLOOM, GPT-NeoX (its attention_bias, true by
  // default, covers the attention's), Phi-1/2 and OPT (enable_bias).
  m.linear_bias = bool_alias(r, {"linear_bias", "bias", "use_bias", "enable_bias", "add_bias_linear"}, {"no_bias"})
                      .value_or(gpt2_like || bloom || model_type == "gpt_neox" || model_type == "phi" || opt || gpt_neo);
  const bool attention_bias = r.get_bool("attention_bias", false);
  // StableLM names it use_qkv_bias, ChatGLM add_qkv_bias.
  m.qkv_bias = bool_alias(r, {"qkv_bias", "use_qkv_bias", "add_qkv_bias"})
                   .value_or(attention_bias || model_type == "qwen2" || model_type == "qwen2_moe");
  // Q/K norms: Qwen3 and OLMo 2 / OLMoE always (OLMo's over the whole projection, the same
  // passes); other families by their flag.
  m.qk_norm = bool_alias(r, {"qk_norm", "use_qk_norm", "qk_layernorm"})
                  .value_or(model_type == "qwen3" || model_type == "qwen3_moe" || model_type == "olmo2" ||
                            model_type == "olmoe" || gated_deltanet_family(model_type));
  m.embedding_norm = r.get_bool("embedding_norm", bloom);
  // Where the families' modules leave biases out, share a norm or offset positions (their
  // transformers implementations; none of it is a config key).
  if (gpt_neo) m.qkv_linear_bias = false;  // q_proj, k_proj, v_proj: bias=False; out_proj has one
  if (gptj) m.qkv_linear_bias = m.out_linear_bias = false;  // GPT-J / CodeGen attention: no biases
  m.head_bias = !m.tied_embeddings && (gptj || model_type == "phi");
  // One norm before the parallel attention and MLP: GPT-J, CodeGen, Phi-1/2, and Falcon's
  // parallel_attn blocks outside new_decoder_architecture (num_ln_in_parallel_attn 1).
  const bool falcon_new_arch = falcon && r.get_bool("new_decoder_architecture", false);
  const std::optional<int64_t> falcon_norms = falcon ? r.get_int("num_ln_in_parallel_attn", 1, 2) : std::nullopt;
  const bool falcon_one_norm = falcon && r.get_bool("parallel_attn", true) && (!falcon_new_arch || falcon_norms.value_or(2) == 1);
  m.shared_block_norm = gptj || model_type == "phi" || falcon_one_norm;
  if (opt) m.position_offset = 2;  // OPTLearnedPositionalEmbedding keeps two rows more

  // A list of layer indices (from 0) in [0, layers): entries checked one by one, sorted, no
  // repeats. Returns false when the list had a mistake (reported at its path).
  auto layer_list = [&](const Json& v, const std::string& where, std::vector<int64_t>& out) {
    if (!v.is_array()) {
      issues.add(where, "got " + core::show(v) + "; expected a list of layer indices (integers from 0)");
      return false;
    }
    bool ok = true;
    for (size_t i = 0; i < v.size(); ++i) {
      const Json& x = v[i];
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || (layers && x.get<int64_t>() >= *layers)) {
        issues.add(where + "[" + std::to_string(i) + "]", "got " + core::show(x) + "; expected a layer index from 0 to " +
                                                              (layers ? std::to_string(*layers - 1) : std::string("the last layer")));
        ok = false;
        continue;
      }
      out.push_back(x.get<int64_t>());
    }
    std::sort(out.begin(), out.end());
    if (ok && std::adjacent_find(out.begin(), out.end()) != out.end()) {
      issues.add(where, "lists a layer twice");
      ok = false;
    }
    return ok;
  };
  // A per-layer list of 0/1 flags (Llama 4's no_rope_layers, MiniMax's attn_type_list): the
  // count of 1s, or nullopt after reporting a mistake at its path.
  auto flag_list = [&](const Json& v, const std::string& where) -> std::optional<int64_t> {
    if (!v.is_array() || (layers && static_cast<int64_t>(v.size()) != *layers)) {
      issues.add(where, "got " + (v.is_array() ? std::to_string(v.size()) + " entries" : core::show(v)) +
                            "; expected a list of 0/1 flags, one per layer" + (layers ? " (" + std::to_string(*layers) + ")" : ""));
      return std::nullopt;
    }
    int64_t ones = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_number_integer() || (v[i].get<int64_t>() != 0 && v[i].get<int64_t>() != 1)) {
        issues.add(where + "[" + std::to_string(i) + "]", "got " + core::show(v[i]) + "; expected 0 or 1");
        return std::nullopt;
      }
      ones += v[i].get<int64_t>();
    }
    return ones;
  };
  if (const Json* atl = r.get_raw("attn_type_list"); atl != nullptr && !atl->is_null()) {
    flag_list(*atl, path + ".attn_type_list");  // all 1 (softmax) here: a 0 was refused before parsing
  }

  // Sliding-window attention (Mistral, gpt-oss and Gemma 2 alternating layers, Gemma 3 five
  // local layers to one global) and Llama 4's chunked attention (three layers in four).
  auto window = int_alias(r, {"sliding_window", "sliding_window_size"}, 1, kBig);
  bool use_window = true;
  if (r.has("use_sliding_window")) use_window = r.get_bool("use_sliding_window", true);
  const auto pattern = int_alias(r, {"sliding_window_pattern", "_sliding_window_pattern"}, 1, 100000);
  // Gemma 3 embedding models attend both ways, which the causal cost model does not describe.
  if (r.get_bool("use_bidirectional_attention", false)) {
    issues.add(path + ".use_bidirectional_attention", "got true; stepcast costs causal decoders (bidirectional attention is an encoder's)");
  }
  const auto chunk = r.get_int("attention_chunk_size", 1, kBig);
  if (chunk && window && use_window) {
    issues.add(path + ".attention_chunk_size", "given beside sliding_window; a model uses one kind of local attention");
  }
  if (chunk && !(window && use_window)) {
    // A chunk of C tokens attends causally within itself: C/2 keys per query on average,
    // as many as a sliding window of C/2 sees (ModelSpec::local_keys_per_query counts it).
    m.attention_chunk = *chunk;
    // Every no_rope_layer_interval-th layer is global (NoPE): transformers' default is 4.
    const auto interval = r.get_int("no_rope_layer_interval", 1, 100000);
    m.sliding_layer_fraction = 1.0 - 1.0 / static_cast<double>(interval.value_or(4));
    // An explicit per-layer list (empty: the interval's default, as transformers reads it).
    if (const Json* nr = r.get_raw("no_rope_layers"); nr != nullptr && !nr->is_null() && !(nr->is_array() && nr->empty())) {
      // 1 = a RoPE layer with chunked attention, 0 = a global NoPE layer.
      if (auto chunked = flag_list(*nr, path + ".no_rope_layers"); chunked && !nr->empty()) {
        m.sliding_layer_fraction = static_cast<double>(*chunked) / static_cast<double>(nr->size());
      }
    }
  } else {
    r.ignore({"no_rope_layers", "no_rope_layer_interval"});
  }
  if (window && use_window) {
    m.sliding_window = *window;
    m.sliding_layer_fraction = 1.0;
    if (model_type == "gemma2") m.sliding_layer_fraction = 0.5;  // local and global layers alternate
    // Qwen2/3: layers from max_window_layers on slide (transformers' layer_types rule).
    if (auto mwl = r.get_int("max_window_layers", 0, 100000); mwl && layers) {
      m.sliding_layer_fraction = static_cast<double>(std::max<int64_t>(0, *layers - std::min(*mwl, *layers))) /
                                 static_cast<double>(*layers);
    }
    // Gemma 3: every pattern-th layer is global, the others local.
    if (pattern) m.sliding_layer_fraction = 1.0 - 1.0 / static_cast<double>(*pattern);
    if (const Json* lt = r.get_raw("layer_types"); lt != nullptr) {
      if (!lt->is_array() || lt->empty()) {
        issues.add(path + ".layer_types", "expected a non-empty array of layer type strings");
      } else if (layers && static_cast<int64_t>(lt->size()) != *layers) {
        issues.add(path + ".layer_types", "has " + std::to_string(lt->size()) + " entries; expected one per layer (" +
                                              std::to_string(*layers) + ")");
      } else {
        int64_t sliding = 0;
        for (size_t i = 0; i < lt->size(); ++i) {
          const Json& t = (*lt)[i];
          if (!t.is_string() || (t.get<std::string>() != "sliding_attention" && t.get<std::string>() != "full_attention")) {
            issues.add(path + ".layer_types[" + std::to_string(i) + "]", "got " + core::show(t) + "; expected \"sliding_attention\" or \"full_attention\"");
            continue;
          }
          sliding += t.get<std::string>() == "sliding_attention" ? 1 : 0;
        }
        m.sliding_layer_fraction = static_cast<double>(sliding) / static_cast<double>(lt->size());
      }
    }
  } else if (gpt_neo) {
    r.ignore({"max_window_layers"});
    // GPT-Neo: "local" layers attend within window_size tokens (transformers' default 256),
    // "global" ones over the whole sequence. attention_layers names each layer; attention_types
    // is its run-length form ([[["global", "local"], 12]]), read when the list is absent.
    const int64_t w = r.get_int("window_size", 1, kBig, 256);
    std::vector<std::string> kinds;
    std::string list_key = "attention_layers";
    const Json* al = r.get_raw("attention_layers");
    const Json* at = r.get_raw("attention_types");
    if (al != nullptr && !al->is_null()) {
      if (!al->is_array()) {
        issues.add(path + ".attention_layers", "got " + core::show(*al) + "; expected a list of \"global\" or \"local\", one per layer");
      } else {
        for (const auto& k : *al) kinds.push_back(k.is_string() ? k.get<std::string>() : core::show(k));
      }
    } else if (at != nullptr && !at->is_null()) {
      list_key = "attention_types";
      bool ok = at->is_array();
      for (size_t i = 0; ok && i < at->size(); ++i) {
        const Json& e = (*at)[i];
        ok = e.is_array() && e.size() == 2 && e[0].is_array() && e[1].is_number_integer() && e[1].get<int64_t>() >= 0 &&
             e[1].get<int64_t>() <= 100000;
        // Expanded up to one entry past any real layer count, so a run-length list that names
        // far too many layers is reported by its count, not built.
        for (int64_t n = 0; ok && n < e[1].get<int64_t>() && kinds.size() <= 100000; ++n) {
          for (const auto& k : e[0]) kinds.push_back(k.is_string() ? k.get<std::string>() : core::show(k));
        }
      }
      if (!ok) {
        issues.add(path + ".attention_types", "got " + core::show(*at) + "; expected [[[\"global\", \"local\"], N], ...] (a pattern and its repeat count)");
        kinds.clear();
      }
    }
    if (kinds.empty() && (al == nullptr || al->is_null()) && (at == nullptr || at->is_null()) && layers) {
      // Neither given: transformers' default pattern, global and local layers alternating.
      for (int64_t l = 0; l < *layers; ++l) kinds.emplace_back(l % 2 == 0 ? "global" : "local");
    }
    if (!kinds.empty()) {
      int64_t local = 0;
      bool ok = true;
      for (size_t i = 0; i < kinds.size(); ++i) {
        if (kinds[i] != "global" && kinds[i] != "local") {
          issues.add(path + "." + list_key, "entry " + std::to_string(i) + " is " + kinds[i] + "; expected \"global\" or \"local\"");
          ok = false;
          break;
        }
        local += kinds[i] == "local" ? 1 : 0;
      }
      if (ok && layers && static_cast<int64_t>(kinds.size()) != *layers) {
        issues.add(path + "." + list_key, "names " + std::to_string(kinds.size()) + " layers; the model has " + std::to_string(*layers));
      } else if (ok && local > 0) {
        m.sliding_window = w;
        m.sliding_layer_fraction = static_cast<double>(local) / static_cast<double>(kinds.size());
      }
    }
  } else {
    r.ignore({"max_window_layers"});
    // Layer types without a window to slide: only full attention is meaningful.
    if (const Json* lt = r.get_raw("layer_types"); lt != nullptr && lt->is_array()) {
      for (const auto& t : *lt) {
        if (t.is_string() && t.get<std::string>() == "sliding_attention" && use_window) {
          issues.add(path + ".layer_types", "names sliding_attention layers but sliding_window is not given");
          break;
        }
      }
    }
  }

  // Mixture of experts. Each setting may come under several families' names; the name given
  // is the one an error quotes (ModelSpec::key_names).
  std::string experts_key, top_k_key, freq_1_key;
  auto experts = int_alias(r, {"num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts"}, 0, 1 << 20, &experts_key);
  agree(experts, nested.experts, experts_key.empty() ? "num_local_experts" : experts_key.c_str(), "ffn_config.moe_num_experts");
  auto top_k = int_alias(r, {"num_experts_per_tok", "experts_per_token", "moe_topk", "moe_k"}, 1, 1 << 20, &top_k_key);
  if (nested.top_k && top_k_key.empty()) top_k_key = "ffn_config.moe_top_k";
  agree(top_k, nested.top_k, top_k_key.empty() ? "num_experts_per_tok" : top_k_key.c_str(), "ffn_config.moe_top_k");
  if (!top_k_key.empty()) m.key_names.top_k = top_k_key;
  m.moe.top_k = top_k.value_or(0);
  m.moe.num_experts = experts.value_or(0);
  // Written but wrong (already reported) is not missing.
  const bool top_k_written = !top_k_key.empty() || nested.top_k_written;
  if (m.moe.num_experts > 0 && !top_k && !top_k_written) {
    issues.add(path + (mpt_family ? ".ffn_config.moe_top_k" : ".num_experts_per_tok"), "required integer is missing (experts each token is routed to) for a model with " +
                                                  std::to_string(m.moe.num_experts) + " experts");
  }
  m.moe.expert_ffn = r.get_int("moe_intermediate_size", 1, kBig).value_or(m.ffn_hidden);
  m.moe.shared_experts = int_alias(r, {"n_shared_experts", "moe_num_shared_experts"}, 0, 1 << 20).value_or(0);
  m.moe.shared_expert_ffn = m.moe.expert_ffn;
  if (auto sf = int_alias(r, {"shared_expert_intermediate_size", "shared_intermediate_size", "moe_shared_expert_intermediate_size"}, 0, kBig);
      sf && *sf > 0) {
    if (m.moe.shared_experts == 0) m.moe.shared_experts = 1;
    m.moe.shared_expert_ffn = *sf;
  }
  if (llama4 && m.moe.num_experts > 0) {
    // Every Llama 4 MoE layer adds one always-on shared expert as wide as a routed one.
    m.moe.shared_experts = 1;
    m.moe.shared_expert_ffn = m.moe.expert_ffn;
    if (llama4_dense) m.ffn_hidden = *llama4_dense;
  }
  // Leading dense layers: DeepSeek's first_k_dense_replace or ERNIE's moe_layer_start_index.
  auto first_k = r.get_int("first_k_dense_replace", 0, 100000);
  if (auto start = r.get_int("moe_layer_start_index", 0, 100000)) {
    agree(first_k, start, "first_k_dense_replace", "moe_layer_start_index");
    m.key_names.first_k = "moe_layer_start_index";
  }
  m.moe.first_k_dense = first_k.value_or(0);
  // MoE layer spacing: Megatron / DeepSeek count from layer 0; Qwen-MoE, Llama 4 and ERNIE
  // from layer 1.
  const auto freq_from_0 = r.get_int("moe_layer_freq", 1, 100000);
  auto freq_from_1 = int_alias(r, {"decoder_sparse_step", "interleave_moe_layer_step"}, 1, 100000, &freq_1_key);
  if (auto interval = r.get_int("moe_layer_interval", 1, 100000)) {
    agree(freq_from_1, interval, freq_1_key.empty() ? "decoder_sparse_step" : freq_1_key.c_str(), "moe_layer_interval");
    freq_1_key = "moe_layer_interval";
  }
  if (freq_from_0 && freq_from_1 && *freq_from_0 > 1 && *freq_from_1 > 1) {
    issues.add(path + "." + freq_1_key, "got " + std::to_string(*freq_from_1) + " beside moe_layer_freq " +
                                            std::to_string(*freq_from_0) +
                                            "; the two place MoE layers differently (from layer 1 and from layer 0), give one");
  } else if (freq_from_1 && *freq_from_1 > 1) {
    m.moe.layer_freq = *freq_from_1;
    m.moe.layer_offset = 1;
    m.key_names.moe_spacing = freq_1_key;
  } else if (freq_from_0) {
    m.moe.layer_freq = *freq_from_0;
  }
  // ERNIE's last MoE layer: -1 (or absent) means the last layer.
  std::optional<int64_t> moe_end = r.get_int("moe_layer_end_index", -1, 100000);
  if (moe_end && *moe_end < 0) moe_end.reset();
  bool placement_ok = true;
  if (moe_end && *moe_end < m.moe.first_k_dense) {
    issues.add(path + ".moe_layer_end_index", "got " + std::to_string(*moe_end) + "; before the first MoE layer (" +
                                                  m.key_names.first_k + " " + std::to_string(m.moe.first_k_dense) + ")");
    placement_ok = false;
  }
  m.moe.groups = r.get_int("n_group", 1, 1 << 20).value_or(0);
  m.moe.group_topk = r.get_int("topk_group", 1, 1 << 20).value_or(0);
  if (const Json* mlp_only = r.get_raw("mlp_only_layers"); mlp_only != nullptr && !mlp_only->is_null()) {
    placement_ok = layer_list(*mlp_only, path + ".mlp_only_layers", m.moe.dense_layers) && placement_ok;
  }
  if (moe_end) {
    for (int64_t l = *moe_end + 1; l < m.num_layers; ++l) m.moe.dense_layers.push_back(l);
  }
  // An explicit list of MoE layers (transformers' Llama 4 moe_layers) decides on its own, as
  // in transformers: every other layer is dense.
  if (const Json* ml = r.get_raw("moe_layers"); ml != nullptr && !ml->is_null()) {
    std::vector<int64_t> listed;
    if (layer_list(*ml, path + ".moe_layers", listed)) {
      m.moe.first_k_dense = 0;
      m.moe.layer_freq = 1;
      m.moe.layer_offset = 0;
      m.key_names.moe_spacing = "moe_layers";
      for (int64_t l = 0; l < m.num_layers; ++l) {
        if (!std::binary_search(listed.begin(), listed.end(), l)) m.moe.dense_layers.push_back(l);
      }
    } else {
      placement_ok = false;
    }
  }
  std::sort(m.moe.dense_layers.begin(), m.moe.dense_layers.end());
  m.moe.dense_layers.erase(std::unique(m.moe.dense_layers.begin(), m.moe.dense_layers.end()), m.moe.dense_layers.end());
  m.key_names.placement_ok = placement_ok;
  if (m.moe.num_experts == 0) {
    m.moe = MoeSpec{};
  }

  if (nemotron_h) read_hybrid(r, j, path, m, layers);
  if (gated_deltanet_family(model_type)) read_linear_attention(r, path, m, layers);

  // DeepSeek multi-head latent attention.
  m.mla.q_lora_rank = r.get_int("q_lora_rank", 0, kBig).value_or(0);
  m.mla.kv_lora_rank = r.get_int("kv_lora_rank", 0, kBig).value_or(0);
  m.mla.qk_nope_head_dim = r.get_int("qk_nope_head_dim", 0, kBig).value_or(0);
  m.mla.qk_rope_head_dim = r.get_int("qk_rope_head_dim", 0, kBig).value_or(0);
  m.mla.v_head_dim = r.get_int("v_head_dim", 0, kBig).value_or(0);
  if (!m.mla.enabled() && (m.mla.q_lora_rank > 0 || m.mla.qk_nope_head_dim > 0 || m.mla.qk_rope_head_dim > 0 || m.mla.v_head_dim > 0)) {
    issues.add(path + ".kv_lora_rank", "required for multi-head latent attention (the other MLA keys are given); a positive integer");
  }
  if (m.mla.enabled()) {
    // Attention cost uses the query/key head width; MLA keeps no separate KV heads.
    m.head_dim = m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim;
    m.kv_heads = m.heads;
  }
  r.ignore(ignored_hf_keys());
  r.finish();
  return m;
}

}  // namespace

void validate_model(const ModelSpec& m, const std::string& path, Issues& issues) {
  if (m.num_layers <= 0 || m.hidden <= 0 || m.heads <= 0 || m.vocab <= 0) return;  // reported
  if (m.kv_heads <= 0 || m.heads % m.kv_heads != 0) {
    issues.add(path + "." + m.key_names.kv_heads,
               "got " + std::to_string(m.kv_heads) + "; must divide num_attention_heads (" +
                   std::to_string(m.heads) + ")");
  }
  if (m.moe.enabled()) {
    if (m.moe.top_k > m.moe.num_experts) {
      issues.add(path + "." + m.key_names.top_k,
                 "got " + std::to_string(m.moe.top_k) + "; cannot exceed the number of experts (" +
                     std::to_string(m.moe.num_experts) + ")");
    }
    if (m.moe.groups > 0 && (m.moe.num_experts % m.moe.groups != 0 || m.moe.group_topk <= 0 ||
                             m.moe.group_topk > m.moe.groups)) {
      issues.add(path + ".n_group",
                 "got " + std::to_string(m.moe.groups) + " groups with topk_group " + std::to_string(m.moe.group_topk) +
                     "; group-limited routing needs n_group to divide the " + std::to_string(m.moe.num_experts) +
                     " experts and 1 <= topk_group <= n_group");
    }
    if (m.moe.first_k_dense >= m.num_layers) {
      issues.add(path + "." + m.key_names.first_k,
                 "got " + std::to_string(m.moe.first_k_dense) + "; leaves no MoE layer in " +
                     std::to_string(m.num_layers) + " layers");
    } else if (m.key_names.placement_ok && m.num_moe_layers() == 0) {
      // Name the placement the config used (a list, a spacing) and what else removed layers.
      const std::string& key = m.key_names.moe_spacing;
      std::string detail = key == "moe_layers" ? "lists no layer" : "got " + std::to_string(m.moe.layer_freq) + " (one MoE layer every that many)";
      issues.add(path + "." + key, detail + "; with " + std::to_string(m.num_layers) + " layers, " + m.key_names.first_k + " " +
                                       std::to_string(m.moe.first_k_dense) + " and the dense layers listed it leaves no MoE layer");
    }
  }
  if (m.linear.enabled() && (m.linear.k_dim <= 0 || m.linear.v_dim <= 0 || m.linear.k_heads <= 0)) {
    issues.add(path + ".linear_num_key_heads", "Gated DeltaNet layers need positive key heads and head widths");
  }
  if (m.mamba.enabled()) {
    if (m.mamba.head_dim <= 0 || m.mamba.state <= 0 || m.mamba.groups <= 0 || m.mamba.heads % m.mamba.groups != 0) {
      issues.add(path + ".n_groups", "got " + std::to_string(m.mamba.groups) + "; must divide mamba_num_heads (" +
                                         std::to_string(m.mamba.heads) + ")");
    }
  }
  if (m.mla.enabled() && (m.mla.qk_nope_head_dim <= 0 || m.mla.v_head_dim <= 0)) {
    issues.add(path + ".kv_lora_rank",
               "multi-head latent attention needs qk_nope_head_dim and v_head_dim as well");
  }
}

Json describe_model(const ModelSpec& m) {
  Json kinds = Json::object();
  for (int64_t l = 0; l < m.num_layers; ++l) {
    const std::string k = m.layer_kind(l).label();
    kinds[k] = kinds.value(k, 0) + 1;
  }
  Json attention = {{"heads", m.heads},
                    {"kv_heads", m.kv_heads},
                    {"head_dim", m.head_dim},
                    {"qkv_bias", m.has_qkv_bias()},
                    {"output_bias", m.has_out_bias()},
                    {"qk_norm", m.qk_norm},
                    {"output_gate", m.attn_output_gate}};
  if (m.sliding_window > 0 || m.attention_chunk > 0) {
    attention["local"] = {{m.attention_chunk > 0 ? "chunk" : "window", m.attention_chunk > 0 ? m.attention_chunk : m.sliding_window},
                          {"layer_fraction", m.sliding_layer_fraction}};
  }
  if (m.mla.enabled()) {
    attention["mla"] = {{"q_lora_rank", m.mla.q_lora_rank}, {"kv_lora_rank", m.mla.kv_lora_rank},
                        {"qk_nope_head_dim", m.mla.qk_nope_head_dim}, {"qk_rope_head_dim", m.mla.qk_rope_head_dim},
                        {"v_head_dim", m.mla.v_head_dim}};
  }
  Json j = {{"name", m.name},
            {"source", m.source},
            {"layers", m.num_layers},
            {"layer_kinds", kinds},
            {"hidden", m.hidden},
            {"vocab", m.vocab},
            {"tied_embeddings", m.tied_embeddings},
            {"norm", m.norm == NormKind::kLayerNorm ? "layernorm" : "rmsnorm"},
            {"embedding_norm", m.embedding_norm},
            {"position_embedding", m.position == PositionKind::kLearned ? "learned"
                                   : m.position == PositionKind::kAlibi ? "alibi"
                                   : m.position == PositionKind::kNone  ? "none"
                                                                        : "rotary"},
            {"max_positions", m.max_positions},
            {"linear_bias", m.linear_bias},
            {"head_bias", m.head_bias},
            {"parallel_block_norm", m.shared_block_norm},
            {"attention", attention},
            {"mlp", {{"kind", m.mlp == MlpKind::kGated ? "gated" : "plain"}, {"matrices", m.mlp_matrices()}, {"ffn_hidden", m.ffn_hidden}}}};
  if (m.moe.enabled()) {
    j["moe"] = {{"experts", m.moe.num_experts},          {"top_k", m.moe.top_k},
                {"expert_ffn", m.moe.expert_ffn},        {"shared_experts", m.moe.shared_experts},
                {"shared_expert_ffn", m.moe.shared_expert_ffn}, {"moe_layers", m.num_moe_layers()},
                {"first_dense_layers", m.moe.first_k_dense}};
    if (m.moe.groups > 0) j["moe"]["routing_groups"] = {{"groups", m.moe.groups}, {"per_token", m.moe.group_topk}};
  }
  if (m.mamba.enabled()) {
    j["mamba"] = {{"heads", m.mamba.heads}, {"head_dim", m.mamba.head_dim}, {"state", m.mamba.state}, {"groups", m.mamba.groups}};
  }
  if (m.linear.enabled()) {
    j["linear_attention"] = {{"key_heads", m.linear.k_heads}, {"value_heads", m.linear.v_heads},
                             {"key_dim", m.linear.k_dim}, {"value_dim", m.linear.v_dim}};
  }
  Json per_kind = Json::object();
  for (const LayerKind& k : m.layer_kinds()) {
    per_kind[k.label()] = {{"mixer", m.mixer_params(k)}, {"ffn", m.ffn_params(k)}, {"ffn_active", m.ffn_params(k, true)}};
  }
  j["params"] = {{"total", m.total_params()},
                 {"active", m.active_params()},
                 {"embedding", m.embedding_params()},
                 {"output", m.output_params()},
                 {"per_layer_kind", per_kind}};
  return j;
}

ModelSpec parse_model(const Json& j, const std::string& path, Issues& issues,
                      const std::string& base_dir) {
  if (j.is_string()) {
    try {
      return zoo_model(j.get<std::string>());
    } catch (const core::UserError& e) {
      issues.add(path, e.what());
      return {};
    }
  }
  if (j.is_object() && j.contains("path")) {
    if (j.size() != 1) {
      issues.add(path, "a {\"path\": ...} model takes no other keys (got " + core::other_keys(j, "path") + ")");
      return {};
    }
    if (!j["path"].is_string()) {
      issues.add(path + ".path", "got " + core::show(j["path"]) + "; expected a file path string");
      return {};
    }
    std::filesystem::path p = j["path"].get<std::string>();
    if (p.is_relative() && !base_dir.empty()) p = std::filesystem::path(base_dir) / p;
    Json loaded;
    try {
      loaded = core::load_json_file(p.string());
    } catch (const core::UserError& e) {
      issues.add(path + ".path", e.what());
      return {};
    }
    ModelSpec m = parse_model_object(loaded, path + "(" + p.string() + ")", issues);
    if (m.name == "custom") m.name = p.stem().string();
    validate_model(m, path, issues);
    return m;
  }
  if (!j.is_object()) {
    issues.add(path, "got " + core::show(j) +
                         "; expected a zoo name, an object of model keys, or {\"path\": FILE}");
    return {};
  }
  ModelSpec m = parse_model_object(j, path, issues);
  validate_model(m, path, issues);
  return m;
}

ModelSpec zoo_model(const std::string& name) {
  static core::OncePerName<ModelSpec> parsed;
  return parsed.get(name, [&] {
    for (const auto& e : embedded::zoo_models()) {
      if (e.name == name) {
        Issues issues;
        ModelSpec m = parse_model_object(core::parse_json_text(std::string(e.text), "zoo:" + name), "zoo:" + name, issues);
        validate_model(m, "zoo:" + name, issues);
        issues.throw_if_any();
        return m;
      }
    }
    std::string list;
    for (const auto& n : zoo_names()) list += (list.empty() ? "" : ", ") + n;
    if (name.find('/') != std::string::npos || std::filesystem::path(name).extension() == ".json") {
      // A hub repository id or a config path that is not there: stepcast reads files only.
      throw core::UserError("no such model config file '" + name + "', and no built-in model of that name; stepcast does not "
                            "download models: save the repository's config.json and give its path, or use a built-in model: " + list);
    }
    throw core::UserError("unknown model '" + name + "'" + core::did_you_mean(name, zoo_names()) + "; built-in models: " + list);
  });
}

std::vector<std::string> zoo_names() {
  std::vector<std::string> out;
  for (const auto& e : embedded::zoo_models()) out.emplace_back(e.name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace stepcast::model
