#include "models/model_spec.hpp"

#include <algorithm>
#include <filesystem>

#include "sim/core/embedded.hpp"

namespace stepcast::model {

using core::Issues;
using core::Json;
using core::ObjectReader;

int64_t ModelSpec::q_dim() const { return heads * head_dim; }
int64_t ModelSpec::kv_dim() const { return kv_heads * head_dim; }

bool ModelSpec::is_moe_layer(int64_t layer) const {
  if (!moe.enabled() || layer < moe.first_k_dense) return false;
  if (std::binary_search(moe.dense_layers.begin(), moe.dense_layers.end(), layer)) return false;
  return (layer + moe.layer_offset) % std::max<int64_t>(1, moe.layer_freq) == 0;
}

int64_t ModelSpec::num_moe_layers() const {
  int64_t n = 0;
  for (int64_t l = 0; l < num_layers; ++l) n += is_moe_layer(l) ? 1 : 0;
  return n;
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
  if (linear_bias) p += q + 2.0 * kv + h;
  else if (qkv_bias) p += q + 2.0 * kv;
  if (qk_norm) p += 2.0 * static_cast<double>(head_dim);
  return p;
}

double ModelSpec::dense_mlp_params() const {
  const double h = static_cast<double>(hidden);
  const double f = static_cast<double>(ffn_hidden);
  double p = norm_params() + static_cast<double>(mlp_matrices()) * h * f;
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

double ModelSpec::layer_params(int64_t layer) const {
  return attention_params() + (is_moe_layer(layer) ? moe_mlp_params() : dense_mlp_params());
}

double ModelSpec::embedding_params() const {
  double p = static_cast<double>(vocab) * static_cast<double>(hidden);
  if (position == PositionKind::kLearned) p += static_cast<double>(max_positions * hidden);
  if (embedding_norm) p += norm_params();
  return p;
}

double ModelSpec::output_params() const {
  double p = norm_params();
  if (!tied_embeddings) p += static_cast<double>(vocab) * static_cast<double>(hidden);
  return p;
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
    p += attention_params() + (is_moe_layer(l) ? moe_mlp_active_params() : dense_mlp_params());
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
      "max_window_layers", "use_sliding_window", "swiglu_limit", "router_aux_loss_coef",
      "is_decoder", "use_parallel_residual", "bias_dropout_fusion", "apply_residual_connection_post_layernorm",
      "tie_encoder_decoder", "output_attentions", "output_hidden_states", "return_dict",
      "torchscript", "id2label", "label2id", "problem_type", "finetuning_task", "prefix",
      "use_bfloat16", "attn_config", "init_config", "no_bias", "learned_pos_emb", "emb_pdrop",
      "logit_scale", "verbose", "moe_aux_loss_coeff", "aux_loss_coef", "router_dtype",
      "initial_context_length", "rope_ntk_alpha", "rope_ntk_beta", "rope_scaling_factor",
      "enable_moe_block", "qk_layernorm_eps", "mtp_num_layers",
      // BLOOM: kernel-fusion and tensor-parallel flags of the training code, ALiBi offset.
      "masked_softmax_fusion", "offset_alibi", "skip_bias_add", "skip_bias_add_qkv", "slow_but_exact",
      "unk_token_id", "attention_softmax_in_fp32",
  };
  return keys;
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

// First present key among aliases; marks all aliases read.
// The first of several names for one setting (hub configs of different families); two of them
// given with different values is an error naming both.
std::optional<int64_t> int_alias(ObjectReader& r, std::initializer_list<std::string_view> keys,
                                 int64_t lo, int64_t hi) {
  std::optional<int64_t> out;
  std::string first;
  for (auto k : keys) {
    if (!r.has(k)) {
      r.ignore({k});
      continue;
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

ModelSpec parse_model_object(const Json& j, const std::string& path, Issues& issues) {
  ObjectReader r(j, path, issues);
  r.accept_null_as_absent();  // hub config.json files write null for unset settings
  ModelSpec m;
  m.name = r.get_string("name").value_or("custom");
  m.source = r.get_string("source").value_or("user-supplied");
  const std::string model_type = r.get_string("model_type").value_or("");
  const bool gpt2_like = model_type == "gpt2" || model_type == "gpt_bigcode" || r.has("n_embd");
  // BLOOM's config.json names none of these; the architecture fixes them: ALiBi, LayerNorm
  // (also on the embeddings), biases on every linear layer, a plain GeLU MLP.
  const bool bloom = model_type == "bloom";

  constexpr int64_t kBig = int64_t{1} << 40;
  auto layers = int_alias(r, {"num_hidden_layers", "n_layer", "num_layers"}, 1, 100000);
  auto hidden = int_alias(r, {"hidden_size", "n_embd", "d_model"}, 1, kBig);
  auto heads = int_alias(r, {"num_attention_heads", "n_head", "n_heads"}, 1, 1 << 20);
  // Missing, not wrong: a bad value of one of the names is reported by the reader already.
  auto none_of = [&](std::initializer_list<const char*> keys) {
    for (const char* k : keys) {
      if (r.has(k) && !j.at(k).is_null()) return false;
    }
    return true;
  };
  if (!layers && none_of({"num_hidden_layers", "n_layer", "num_layers"})) issues.add(path, "missing the layer count (num_hidden_layers or n_layer)");
  if (!hidden && none_of({"hidden_size", "n_embd", "d_model"})) issues.add(path, "missing the hidden size (hidden_size or n_embd)");
  if (!heads && none_of({"num_attention_heads", "n_head", "n_heads"})) issues.add(path, "missing the head count (num_attention_heads or n_head)");
  m.num_layers = layers.value_or(0);
  m.hidden = hidden.value_or(0);
  m.heads = heads.value_or(0);
  m.kv_heads = r.get_int("num_key_value_heads", 1, 1 << 20).value_or(m.heads);
  m.head_dim = r.get_int("head_dim", 1, 1 << 20).value_or(m.heads > 0 ? m.hidden / m.heads : 0);
  if (!r.has("head_dim") && m.heads > 0 && m.hidden % m.heads != 0) {
    issues.add(path + ".num_attention_heads", "hidden_size " + std::to_string(m.hidden) +
                                                  " is not divisible by " +
                                                  std::to_string(m.heads) +
                                                  " heads; give head_dim explicitly");
  }
  // GPT-2 writes n_inner: null (or leaves it out) for 4*h; other families must give the size.
  auto ffn = int_alias(r, {"intermediate_size", "n_inner", "ffn_hidden_size"}, 1, kBig);
  m.ffn_hidden = ffn.value_or(4 * m.hidden);
  const bool moe_config = r.has("num_local_experts") || r.has("n_routed_experts") || r.has("num_experts");
  if (!ffn && !gpt2_like && !r.has("n_inner") && !moe_config) {
    issues.add(path + ".intermediate_size", "required integer is missing (the MLP's hidden width; only GPT-2 style configs default to 4 x hidden)");
  }
  auto vocab = r.get_int("vocab_size", 1, kBig);
  if (!vocab && (!r.has("vocab_size") || j.at("vocab_size").is_null())) issues.add(path + ".vocab_size", "required integer is missing");
  m.vocab = vocab.value_or(0);
  m.max_positions =
      int_alias(r, {"max_position_embeddings", "n_positions", "max_seq_len"}, 1, kBig).value_or(0);

  std::string act = "silu";
  std::string act_key = "hidden_act";
  if (r.has("activation_function")) {
    act_key = "activation_function";
    act = r.get_string("activation_function").value_or(act);
    r.ignore({"hidden_act"});
  } else if (r.has("hidden_act")) {
    act = r.get_string("hidden_act").value_or(act);
  } else if (gpt2_like) {
    act = "gelu_new";
  } else if (bloom) {
    act = "gelu";
  }
  bool act_ok = true;
  m.mlp = mlp_from_activation(act, act_ok);
  if (!act_ok) {
    issues.add(path + "." + act_key, "got \"" + act +
                                         "\"; allowed: silu, swiglu, swish, geglu, reglu (gated, 3 "
                                         "matrices) or gelu, gelu_new, gelu_pytorch_tanh, relu, "
                                         "relu2, squared_relu (2 matrices)");
  }
  m.tied_embeddings = r.get_bool("tie_word_embeddings", true);

  const std::string pos = r.get_choice("position_embedding", {"rotary", "learned", "alibi"},
                                       gpt2_like ? "learned" : bloom ? "alibi" : "rotary");
  m.position = pos == "learned" ? PositionKind::kLearned
               : pos == "alibi" ? PositionKind::kAlibi
                                : PositionKind::kRotary;
  if (m.position == PositionKind::kLearned && m.max_positions == 0) {
    issues.add(path, "learned position embeddings need n_positions or max_position_embeddings");
  }
  const bool layernorm_default = gpt2_like || bloom || model_type == "nemotron" || model_type == "gpt_neox";
  const std::string norm =
      r.get_choice("norm", {"rmsnorm", "layernorm"}, layernorm_default ? "layernorm" : "rmsnorm");
  m.norm = norm == "layernorm" ? NormKind::kLayerNorm : NormKind::kRmsNorm;
  m.linear_bias = r.get_bool("linear_bias", gpt2_like || bloom);
  const bool attention_bias = r.get_bool("attention_bias", false);
  m.qkv_bias = r.get_bool("qkv_bias", attention_bias || model_type == "qwen2" ||
                                          model_type == "qwen2_moe");
  m.qk_norm = r.get_bool("qk_norm", model_type == "qwen3" || model_type == "qwen3_moe");
  m.embedding_norm = r.get_bool("embedding_norm", bloom);

  // Sliding-window attention (Mistral, gpt-oss alternating layers).
  auto window = r.get_int("sliding_window", 1, kBig);
  bool use_window = true;
  if (r.has("use_sliding_window")) use_window = r.get_bool("use_sliding_window", true);
  if (window && use_window) {
    m.sliding_window = *window;
    m.sliding_layer_fraction = 1.0;
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
  } else {
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

  // Mixture of experts.
  auto experts = int_alias(r, {"num_local_experts", "n_routed_experts", "num_experts"}, 0, 1 << 20);
  m.moe.num_experts = experts.value_or(0);
  const auto top_k = int_alias(r, {"num_experts_per_tok", "experts_per_token", "moe_topk"}, 1, 1 << 20);
  m.moe.top_k = top_k.value_or(0);
  if (m.moe.num_experts > 0 && !top_k && !r.has("num_experts_per_tok") && !r.has("experts_per_token") && !r.has("moe_topk")) {
    issues.add(path + ".num_experts_per_tok", "required integer is missing (experts each token is routed to) for a model with " +
                                                  std::to_string(m.moe.num_experts) + " experts");
  }
  m.moe.expert_ffn = r.get_int("moe_intermediate_size", 1, kBig).value_or(m.ffn_hidden);
  m.moe.shared_experts = r.get_int("n_shared_experts", 0, 1 << 20).value_or(0);
  m.moe.shared_expert_ffn = m.moe.expert_ffn;
  if (auto sf = r.get_int("shared_expert_intermediate_size", 0, kBig); sf && *sf > 0) {
    if (m.moe.shared_experts == 0) m.moe.shared_experts = 1;
    m.moe.shared_expert_ffn = *sf;
  }
  m.moe.first_k_dense = r.get_int("first_k_dense_replace", 0, 100000).value_or(0);
  // MoE layer spacing: Megatron / DeepSeek count from layer 0, Qwen-MoE and Llama 4 from layer 1.
  const auto freq_from_0 = r.get_int("moe_layer_freq", 1, 100000);
  const auto freq_from_1 = int_alias(r, {"decoder_sparse_step", "interleave_moe_layer_step"}, 1, 100000);
  if (freq_from_0 && freq_from_1 && *freq_from_0 > 1 && *freq_from_1 > 1) {
    issues.add(path + ".decoder_sparse_step", "got " + std::to_string(*freq_from_1) + " beside moe_layer_freq " +
                                                  std::to_string(*freq_from_0) +
                                                  "; the two place MoE layers differently (from layer 1 and from layer 0), give one");
  } else if (freq_from_1 && *freq_from_1 > 1) {
    m.moe.layer_freq = *freq_from_1;
    m.moe.layer_offset = 1;
  } else if (freq_from_0) {
    m.moe.layer_freq = *freq_from_0;
  }
  m.moe.groups = r.get_int("n_group", 1, 1 << 20).value_or(0);
  m.moe.group_topk = r.get_int("topk_group", 1, 1 << 20).value_or(0);
  if (const Json* mlp_only = r.get_raw("mlp_only_layers"); mlp_only != nullptr) {
    const std::string where = path + ".mlp_only_layers";
    if (!mlp_only->is_array()) {
      issues.add(where, "expected a list of layer indices (from 0) whose MLP is dense");
    } else {
      for (size_t i = 0; i < mlp_only->size(); ++i) {
        const Json& v = (*mlp_only)[i];
        if (!v.is_number_integer() || v.get<int64_t>() < 0) {
          issues.add(where + "[" + std::to_string(i) + "]", "got " + v.dump() + "; expected a layer index (an integer from 0)");
          continue;
        }
        m.moe.dense_layers.push_back(v.get<int64_t>());
      }
      std::sort(m.moe.dense_layers.begin(), m.moe.dense_layers.end());
      if (std::adjacent_find(m.moe.dense_layers.begin(), m.moe.dense_layers.end()) != m.moe.dense_layers.end()) {
        issues.add(where, "lists a layer twice");
      }
    }
  }
  if (m.moe.num_experts == 0) {
    m.moe = MoeSpec{};
  }

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
    issues.add(path + ".num_key_value_heads",
               "got " + std::to_string(m.kv_heads) + "; must divide num_attention_heads (" +
                   std::to_string(m.heads) + ")");
  }
  if (m.moe.enabled()) {
    if (m.moe.top_k > m.moe.num_experts) {
      issues.add(path + ".num_experts_per_tok",
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
      issues.add(path + ".first_k_dense_replace",
                 "got " + std::to_string(m.moe.first_k_dense) + "; leaves no MoE layer in " +
                     std::to_string(m.num_layers) + " layers");
    } else if (!m.moe.dense_layers.empty() && m.moe.dense_layers.back() >= m.num_layers) {
      issues.add(path + ".mlp_only_layers", "got layer " + std::to_string(m.moe.dense_layers.back()) + "; the model has layers 0.." +
                                                std::to_string(m.num_layers - 1));
    } else if (m.num_moe_layers() == 0) {
      const std::string key = m.moe.layer_offset == 1 ? "decoder_sparse_step" : "moe_layer_freq";
      issues.add(path + "." + key, "got " + std::to_string(m.moe.layer_freq) + " (one MoE layer every that many); with " +
                                       std::to_string(m.num_layers) + " layers, first_k_dense_replace " +
                                       std::to_string(m.moe.first_k_dense) + " and mlp_only_layers it leaves no MoE layer");
    }
  }
  if (m.mla.enabled() && (m.mla.qk_nope_head_dim <= 0 || m.mla.v_head_dim <= 0)) {
    issues.add(path + ".kv_lora_rank",
               "multi-head latent attention needs qk_nope_head_dim and v_head_dim as well");
  }
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
      issues.add(path, "a {\"path\": ...} model takes no other keys");
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
  for (const auto& e : embedded::zoo_models()) {
    if (e.name == name) {
      Issues issues;
      ModelSpec m = parse_model_object(core::parse_json_text(std::string(e.text), "zoo:" + name),
                                       "zoo:" + name, issues);
      validate_model(m, "zoo:" + name, issues);
      issues.throw_if_any();
      return m;
    }
  }
  std::string list;
  for (const auto& n : zoo_names()) list += (list.empty() ? "" : ", ") + n;
  throw core::UserError("unknown model '" + name + "'; built-in models: " + list);
}

std::vector<std::string> zoo_names() {
  std::vector<std::string> out;
  for (const auto& e : embedded::zoo_models()) out.emplace_back(e.name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace stepcast::model
