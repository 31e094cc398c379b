#include "sim/accuracy/published.hpp"

#include "sim/plan/planner.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>

#include "models/model_spec.hpp"
#include "sim/config/framework_import.hpp"
#include "sim/config/run_config.hpp"
#include "sim/core/embedded.hpp"
#include "sim/cost/collectives.hpp"
#include "sim/cost/compute.hpp"
#include "sim/engine/step_sim.hpp"
#include "sim/estimate/estimate.hpp"
#include "sim/memory/ledger.hpp"

namespace stepcast::accuracy {

using core::Json;

namespace {

// The assumption a row without a micro-batch gets from the converter; process_row replaces it
// with the micro-batch it chooses.
const char* const kUnstatedMicroBatch = "parallel: micro-batch size 1 (not stated)";

bool has(const Json& r, const char* k) { return r.contains(k) && !r[k].is_null(); }
// A numeric field, written as a number or as text ("8", "1.5e3"); anything else names the field.
double num(const Json& r, const char* k, double fallback = 0) {
  if (!has(r, k)) return fallback;
  const Json& v = r[k];
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const std::string& t = v.get_ref<const std::string&>();
    char* end = nullptr;
    const double x = std::strtod(t.c_str(), &end);
    if (!t.empty() && end == t.c_str() + t.size() && std::isfinite(x)) return x;
  }
  throw core::UserError(std::string("field '") + k + "': expected a number, got " + core::show(v));
}
// A count: every count a row gives (GPUs, layout sizes, sequence, batch, model dimensions) is
// far below 2^31; beyond that it is a typo, and rounding it to an integer would overflow.
int64_t inum(const Json& r, const char* k, int64_t fallback = 0) {
  if (!has(r, k)) return fallback;
  constexpr double kMaxCount = 2147483647.0;
  const double x = num(r, k);
  if (!(std::abs(x) <= kMaxCount)) {
    throw core::UserError(std::string("field '") + k + "': expected a count up to 2147483647, got " + core::show(r[k]));
  }
  return static_cast<int64_t>(std::llround(x));
}
// The year the row was published or run (0 when it does not say); the era of a framework's
// kernels and defaults follows from it.
int64_t row_year(const Json& r) { return inum(r, "year", 0); }
// The first of these fields the row gives that is not a finite positive number, as a reason
// that names it ("" when all are).
std::string non_positive_field(const Json& r, std::initializer_list<const char*> fields) {
  for (const char* k : fields) {
    if (has(r, k) && !(num(r, k) > 0 && std::isfinite(num(r, k)))) return std::string("field '") + k + "' must be positive, got " + core::show(r[k]);
  }
  return "";
}
std::string str(const Json& r, const char* k) { return has(r, k) && r[k].is_string() ? r[k].get<std::string>() : ""; }
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// kGptStyle: decoders of the GPT-3 lineage that the zoo lacks by name (OPT, MT-NLG, GPT-NeoX /
// Pythia, GPT-J, Falcon, StarCoder, Gopher / Chinchilla, Galactica, CodeGen): a 2-matrix MLP of
// 4h with LayerNorm, built like the Megatron GPT rows. kRecurrent: state-space and other
// recurrent token mixers whose layer pattern a row does not give.
enum class Family {
  kMegatronGpt,
  kGptStyle,
  kGpt3,
  kLlama,
  kNemotron,
  kNemotronH,
  kMpt,
  kBloom,
  kQwenMoe,
  kGptOss,
  kMixtral,
  kDeepSeek,
  kRecurrent,
  kUnknown
};

Family family_of(const Json& r) {
  const std::string m = lower(str(r, "model"));
  if (contains(m, "bloom")) return Family::kBloom;
  if (contains(m, "mpt")) return Family::kMpt;
  if (contains(m, "llama")) return Family::kLlama;
  // Nemotron-H and Nemotron 3 (hybrid Mamba-2) before Nemotron-4 (a transformer).
  if (contains(m, "nemotron-h") || contains(m, "nemotronh") || contains(m, "nemotron_h") || contains(m, "nemotron h") ||
      contains(m, "nemotron 3") || contains(m, "nemotron-3") || contains(m, "nemotron_3") || contains(m, "nemotron3"))
    return Family::kNemotronH;
  if (contains(m, "nemotron")) return Family::kNemotron;
  // Recurrent and hybrid families before the transformer names they share (Falcon Mamba,
  // Falcon-H1).
  static const std::regex recurrent(R"(mamba|jamba|zamba|rwkv|xlstm|retnet|minimax|hymba|falcon[-_ ]?h1)");
  if (std::regex_search(m, recurrent)) return Family::kRecurrent;
  static const std::regex gpt_style(
      R"(\bopt\b|mt[-_ ]?nlg|megatron[-_ ]turing|turing[-_ ]nlg|neox|pythia|gpt[-_ ]?j\b|falcon|starcoder|santacoder|gopher|chinchilla|galactica|codegen)");
  if (std::regex_search(m, gpt_style)) return Family::kGptStyle;
  if (contains(m, "qwen3")) return Family::kQwenMoe;
  if (contains(m, "mixtral")) return Family::kMixtral;
  if (contains(m, "deepseek")) return Family::kDeepSeek;
  if (contains(m, "gpt oss") || contains(m, "gpt_oss") || contains(m, "gpt-oss")) return Family::kGptOss;
  if (contains(m, "gpt3-175b")) return Family::kGpt3;
  if (contains(m, "gpt")) return Family::kMegatronGpt;
  return Family::kUnknown;
}

// Maps the row's GPU description onto a built-in profile (with overrides where the row's
// hardware differs from the built-in part). `gpu_only`: the row measures the GPU alone (one
// GEMM), so a board whose node no profile describes may still map onto its GPU's profile.
bool hardware_for(const Json& r, Json& hw, std::vector<std::string>& notes, std::string& reason, bool gpu_only = false) {
  const std::string g = str(r, "gpu_type");
  // Matched without regard to case or spacing ("H100 SXM", "h100-sxm5", "A100 40 GB").
  const std::string gl = lower(g);
  static const std::regex forty_gb(R"(\b40\s?gb\b)");
  if (g.empty()) {
    reason = "field 'gpu_type' not stated";
    return false;
  }
  if (contains(gl, "gh200")) {
    // The built-in gh200 profile is the quad node (4 superchips on an NVLink mesh, one NIC
    // each) with the 96 GB HBM3 part; the 144 GB part carries H200's HBM3e stacks. A GEMM row
    // measures the GPU alone, whatever node it sits in.
    const int64_t per_node = inum(r, "gpus_per_node", 4);
    if (!gpu_only && per_node > 4) {
      reason = "no built-in hardware profile for " + std::to_string(per_node) + " GH200 per NVLink domain (gh200 is the quad node)";
      return false;
    }
    static const std::regex hbm3e(R"(hbm3e|\b14[14]\s?gi?b\b)");
    if (std::regex_search(gl, hbm3e) || std::regex_search(lower(str(r, "notes")), hbm3e)) {
      hw = Json{{"base", "gh200"},
                {"name", "gh200-144gb"},
                {"gpu", {{"name", g + " (HBM3e)"}, {"memory", "140.4GiB"}, {"memory_bandwidth", "4.9TB/s"}}}};
      notes.push_back("hardware: gh200 profile with the 144 GB HBM3e part: 140.4 GiB usable (H200's HBM3e stacks) at 4.9 TB/s (GH200 datasheet)");
    } else {
      hw = "gh200";
    }
    return true;
  }
  // The RTX PRO 6000 Blackwell is a PCIe card; the built-in profile is the lab's 8-GPU machine
  // (600 W cards). The 300 W Max-Q edition runs slower clocks than the profile's measurements.
  if (contains(gl, "rtx pro 6000") && !contains(gl, "max-q")) {
    hw = "rtx-pro-6000-pcie-8x";
    notes.push_back("hardware: the rtx-pro-6000-pcie-8x profile: 8 cards on PCIe Gen5, pairs under PCIe switches, two CPU sockets (the PCIe lab's machine)");
    return true;
  }
  // PCIe cards: the 8-card PCIe server profiles (a100-pcie-80gb-8x, h100-pcie-8x,
  // l40s-pcie-8x: pairs under PCIe switches, two sockets, no NVLink bridges). A card bridged by
  // NVLink, or an NVL board pair ("H100 NVL"; "NVLink" in a description of an SXM node's fabric
  // is not one), is a node no profile describes: no profile rather than a wrong one for a
  // training run. A GEMM row measures the GPU alone: an H100 NVL card is the SXM sibling's die at
  // the card's datasheet peaks.
  static const std::regex nvl_board(R"(\bnvl\b)");
  const bool nvl = std::regex_search(gl, nvl_board);
  const bool pcie = contains(gl, "pcie") || contains(gl, "l40s");
  const bool bridged = pcie && (contains(gl, "nvlink") || contains(lower(str(r, "intra_node_link")), "nvlink"));
  if (pcie && (gpu_only || (!bridged && inum(r, "gpus_per_node", 8) <= 8))) {
    const bool forty = std::regex_search(gl, forty_gb);
    if (contains(gl, "h100")) {
      hw = "h100-pcie-8x";
      return true;
    }
    if (contains(gl, "a100") && !forty) {
      hw = "a100-pcie-80gb-8x";
      return true;
    }
    if (contains(gl, "a100")) {
      hw = Json{{"base", "a100-pcie-80gb-8x"},
                {"name", "a100-pcie-40gb-8x"},
                {"gpu", {{"name", g}, {"memory", "39.6GiB"}, {"memory_bandwidth", "1555GB/s"}, {"tdp_watts", 250}}},
                {"efficiency", {{"sustained_clock", 0.855}}}};
      notes.push_back("hardware: a100-pcie-80gb-8x with the 40 GB card: 39.6 GiB usable (as a100-sxm-40gb), HBM2 at 1,555 GB/s, 250 W: "
                      "sustained clock (250/400)^(1/3) = 0.855 of boost (datasheet; the profile's power rule)");
      return true;
    }
    if (contains(gl, "l40s")) {
      hw = "l40s-pcie-8x";
      return true;
    }
  }
  if (nvl && gpu_only && contains(gl, "h100")) {
    hw = Json{{"base", "h100-sxm"},
              {"name", "h100-nvl-gpu"},
              {"gpu",
               {{"name", g},
                {"peak_flops", {{"bf16", "835.5TFLOPS"}, {"fp16", "835.5TFLOPS"}, {"fp8", "1670.5TFLOPS"}, {"tf32", "417.5TFLOPS"}}},
                {"memory", "93.1GiB"},
                {"memory_bandwidth", "3.9TB/s"}}}};
    notes.push_back("hardware: H100 NVL card: the h100-sxm profile's GPU at the card's datasheet peaks (dense BF16 835.5, FP8 1,670.5 TFLOP/s; "
                    "94 GB HBM3 at 3.9 TB/s); its 400 W limit against SXM's 700 W is not modelled (a GEMM row needs no node)");
    return true;
  }
  if (pcie || nvl) {
    reason = "no built-in hardware profile for GPU '" + g + "'" +
             (bridged || nvl ? " (NVLink-bridged cards: the PCIe server profiles have no bridges)"
                             : pcie ? " (the PCIe server profiles hold A100, H100 and L40S cards, 8 per node)" : "");
    return false;
  }
  if (contains(gl, "v100") && contains(gl, "dgx-2h")) {
    hw = Json{{"base", "v100-sxm-32gb"},
              {"name", "v100-sxm3-32gb-dgx2h"},
              {"gpu", {{"name", "V100 SXM3 32GB 450 W (DGX-2H)"}, {"peak_flops", {{"fp16", "131.25TFLOPS"}}}}}};
    notes.push_back("hardware: DGX-2H parts run faster clocks: 2.1 PFLOP/s over 16 GPUs = 131 TFLOP/s fp16 each (DGX-2H datasheet)");
    return true;
  }
  // The 16 GB V100 (DGX-1 and cloud V100 nodes): the V100 profile with its memory.
  static const std::regex sixteen_gb(R"(\b16\s?gb\b)");
  if (contains(gl, "v100") && std::regex_search(gl, sixteen_gb)) {
    hw = Json{{"base", "v100-sxm-32gb"}, {"name", "v100-sxm-16gb"}, {"gpu", {{"name", "V100 SXM 16GB"}, {"memory", "15.78GiB"}}}};
    notes.push_back("hardware: v100-sxm-32gb profile with the 16 GB part's memory: 15.78 GiB usable (16,160 MiB as nvidia-smi reports it)");
    return true;
  }
  static const std::regex ninety_six_gb(R"(\b96\s?gb\b)");
  if (contains(gl, "h100") && std::regex_search(gl, ninety_six_gb)) {
    hw = Json{{"base", "h100-sxm"},
              {"name", "h100-96gb-500w"},
              {"gpu", {{"name", "H100 SXM 96GB HBM2e (500 W cap)"}, {"memory", "94.9GiB"}, {"memory_bandwidth", "2.4TB/s"}}},
              {"efficiency", {{"sustained_clock", 0.77}}}};
    notes.push_back("hardware: h100-sxm profile with 94.9 GiB usable memory (the row's 96 GB part; torchtitan prints 82.4 GiB as 86.8%)");
    notes.push_back("hardware: 96 GB HBM2e at 2.4 TB/s peak, not the 80 GB part's HBM3 3.35 TB/s (torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Hardware)");
    notes.push_back("hardware: 500 W power cap: sustained clock 0.86 x (500/700)^(1/3) = 0.77 of boost (dynamic power ~ f V^2 with V ~ f)");
    return true;
  }
  // The first name the description contains (GB200 before B200, GB300 before B300, H200 and
  // H800 before H100).
  static const std::pair<const char*, const char*> kProfiles[] = {
      {"v100", "v100-sxm-32gb"}, {"a800", "a800-sxm-80gb"}, {"a100", "a100-sxm-80gb"}, {"gb200", "gb200-nvl72"}, {"mi300x", "mi300x"}, {"mi325x", "mi325x"},
      {"mi355x", "mi355x"},      {"gb300", "gb300-nvl72"},    {"b300", "b300"},           {"h200", "h200"},         {"h800", "h800"},     {"h100", "h100-sxm"},
      {"b200", "b200"}};
  for (const auto& [part, profile] : kProfiles) {
    if (!contains(gl, part)) continue;
    hw = std::string(part) == "a100" && std::regex_search(gl, forty_gb) ? "a100-sxm-40gb" : profile;
    return true;
  }
  reason = "no built-in hardware profile for GPU '" + g + "'";
  return false;
}

// GPUs per node as the simulator means it (one NVLink or PCIe domain). A GB200 or GB300 NVL72
// row counts the 4 GPUs of a tray, but all 72 of a rack share NVLink: the job's GPUs per
// domain is the largest divisor of its GPU count up to 72 (64 for 128 or 256 GPUs, 72 for 144).
// A GH200 row that does not say is a quad node; any other, an 8-GPU node.
int64_t gpus_per_nvlink_domain(const Json& r, const Json& hw, int64_t gpus, std::vector<std::string>& notes) {
  const std::string profile = hw.is_string() ? hw.get<std::string>() : "";
  const bool quad = profile == "gh200" || (hw.is_object() && hw.value("base", "") == "gh200");
  const int64_t stated = inum(r, "gpus_per_node", quad ? 4 : 8);
  if (profile != "gb200-nvl72" && profile != "gb300-nvl72") return stated;
  int64_t best = 1;
  for (int64_t d = 1; d <= std::min<int64_t>(72, gpus); ++d) {
    if (gpus % d == 0) best = d;
  }
  notes.push_back("cluster: " + std::string(profile == "gb300-nvl72" ? "GB300" : "GB200") +
                  " NVL72 racks share NVLink across 72 GPUs; the job's " + std::to_string(gpus) + " GPUs taken as domains of " +
                  std::to_string(best) + " (the row's " + std::to_string(stated) + " per node is a tray)");
  return best;
}

// Zoo model names of a family (Llama narrowed by the generation the row names).
std::vector<std::string> family_zoo(const Json& r, Family f) {
  const std::string m = lower(str(r, "model"));
  std::vector<std::string> prefixes;
  switch (f) {
    case Family::kLlama: {
      const bool two = contains(m, "llama 2") || contains(m, "llama-2") || contains(m, "llama2");
      const bool three = contains(m, "llama 3") || contains(m, "llama-3") || contains(m, "llama3");
      if (two || !three) prefixes.push_back("llama2-");
      if (three || !two) prefixes.push_back("llama3");
      break;
    }
    case Family::kNemotron: prefixes = {"nemotron4-"}; break;
    case Family::kNemotronH: prefixes = {"nemotron-h-", "nemotron-3-"}; break;
    case Family::kGpt3: prefixes = {"gpt3-"}; break;
    case Family::kMegatronGpt:
    case Family::kGptStyle: prefixes = {"gpt2-", "gpt3-"}; break;  // by parameter count, for rows without dimensions
    case Family::kQwenMoe: prefixes = {"qwen3-"}; break;
    case Family::kGptOss: prefixes = {"gpt-oss-"}; break;
    case Family::kMixtral: prefixes = {"mixtral-"}; break;
    case Family::kDeepSeek: prefixes = {"deepseek-"}; break;
    case Family::kUnknown: prefixes = {"llama3", "mixtral-"}; break;  // a modern dense or MoE decoder
    default: break;
  }
  std::vector<std::string> out;
  for (const auto& n : model::zoo_names()) {
    for (const auto& p : prefixes) {
      if (n.rfind(p, 0) == 0) out.push_back(n);
    }
  }
  return out;
}

// A dense row that gives no FFN width takes the convention `m` holds (GPT: 4h; a zoo member's
// width scaled to the row's hidden size) unless the row's parameter count rules it out: the
// parameters are affine in the width, so the width that gives the row's count is solved for and
// rounded to a multiple of 128. The convention stands while it lands within 5% of the count, or
// within one vocabulary x hidden matrix of it (tied or untied and padded embeddings are counted
// differently from paper to paper), and also when the solved width is implausible (outside
// hidden/2 .. 8 hidden: the count is then of something else).
// Returns whether it changed the width.
bool resolve_ffn(const Json& r, Json& m, const char* ffn_key, std::vector<std::string>& notes) {
  if (has(r, "ffn_hidden") || inum(r, "moe_experts") > 0 || !(num(r, "params_b") > 0) || !m.contains(ffn_key)) return false;
  auto params_with = [&](int64_t ffn, model::ModelSpec* spec) -> double {
    Json trial = m;
    trial[ffn_key] = ffn;
    core::Issues issues;
    try {
      const model::ModelSpec ms = model::parse_model(trial, "$.model", issues, "");
      if (!issues.empty()) return -1;
      if (spec != nullptr) *spec = ms;
      return ms.total_params();
    } catch (const std::exception&) {
      return -1;
    }
  };
  const int64_t f0 = m[ffn_key].get<int64_t>();
  model::ModelSpec spec;
  const double p0 = params_with(f0, &spec);
  const double p1 = params_with(f0 + 128, nullptr);
  if (p0 <= 0 || p1 <= p0) return false;  // an invalid model is reported where the run is parsed
  const double row_p = num(r, "params_b") * 1e9;
  const double tolerance = std::max(0.05 * row_p, static_cast<double>(spec.vocab) * static_cast<double>(spec.hidden));
  if (std::fabs(p0 - row_p) <= tolerance) return false;
  const double solved = static_cast<double>(f0) + (row_p - p0) / ((p1 - p0) / 128.0);
  const int64_t f = std::max<int64_t>(128, std::llround(solved / 128.0) * 128);
  const auto fmt_b = [](double p) { return core::fmt("%.1f", p / 1e9) + "B"; };
  if (f < spec.hidden / 2 || f > 8 * spec.hidden) {
    notes.push_back("model: FFN width " + std::to_string(f0) + " (the convention; the row does not give it) gives " + fmt_b(p0) +
                    " parameters against the row's " + fmt_b(row_p) + ", which no plausible width reaches; kept");
    return false;
  }
  m[ffn_key] = f;
  notes.push_back("model: FFN width " + std::to_string(f) + " solved from the row's " + fmt_b(row_p) + " parameters (the row does not give it; the convention's " +
                  std::to_string(f0) + " would give " + fmt_b(p0) + ")");
  return true;
}

// The row's model from the zoo: the family member whose dimensions match every one the row
// gives (layers, hidden, heads, KV heads, FFN, vocab, experts), nearest in parameters when the
// row gives none. When the row's dimensions match no member, the nearest member's
// architecture (activation, norm, positions, MoE routing) with the row's dimensions.
Json zoo_model_for(const Json& r, Family f, std::vector<std::string>& notes, std::string& reason) {
  std::vector<std::string> names = family_zoo(r, f);
  // A family whose built-in members are all dense (or all MoE) lends its architecture only to
  // rows of the same kind: an MoE row of a dense family (Llama 4) takes Mixtral's routing, a
  // dense row of an MoE family (a dense Qwen3) a Llama-style decoder.
  const bool row_moe = inum(r, "moe_experts") > 0;
  const bool any_kind = std::any_of(names.begin(), names.end(), [&](const std::string& n) { return model::zoo_model(n).moe.enabled() == row_moe; });
  // A hybrid family's blocks follow a layer pattern the rows do not give: no transformer stands in.
  if (!names.empty() && !any_kind && f != Family::kNemotronH) names.push_back(row_moe ? "mixtral-8x7b" : "llama3.1-8b");
  if (names.empty()) {
    reason = "no built-in model of the row's family";
    return nullptr;
  }
  struct Score {
    std::string name;
    int mismatches = 0;
    double param_gap = 0;
  };
  std::vector<Score> scores;
  for (const auto& n : names) {
    const model::ModelSpec z = model::zoo_model(n);
    Score sc{n, 0, 0};
    auto check = [&](const char* key, int64_t v) {
      if (has(r, key) && inum(r, key) != v) ++sc.mismatches;
    };
    check("layers", z.num_layers);
    check("hidden", z.hidden);
    check("heads", z.heads);
    check("kv_heads", z.kv_heads);
    check("vocab", z.vocab);
    // A dense member for an MoE row, or the reverse, is a different architecture: ranked last.
    if (z.moe.enabled() != row_moe) sc.mismatches += 100;
    if (z.moe.enabled()) {
      check("moe_experts", z.moe.num_experts);
      check("moe_topk", z.moe.top_k);
      check("moe_ffn_hidden", z.moe.expert_ffn);
    } else {
      check("ffn_hidden", z.ffn_hidden);
    }
    if (has(r, "params_b") && num(r, "params_b") > 0) sc.param_gap = std::fabs(std::log(z.total_params() / (num(r, "params_b") * 1e9)));
    scores.push_back(sc);
  }
  std::sort(scores.begin(), scores.end(), [](const Score& a, const Score& b) {
    return a.mismatches != b.mismatches ? a.mismatches < b.mismatches : a.param_gap != b.param_gap ? a.param_gap < b.param_gap : a.name < b.name;
  });
  const Score& best = scores.front();
  const bool dims = has(r, "layers") && has(r, "hidden");
  if (!dims) {
    // Without dimensions the parameter count is all that names the model. Members of a family
    // are 1.5x or more apart (7/13/70B, 8/70/405B), and counting conventions (tied or padded
    // embeddings) move a count by up to ~15%: a member more than 25% off is another model.
    const double row_b = num(r, "params_b");
    if (!(row_b > 0)) {
      reason = "the row gives neither the model's dimensions (layers, hidden) nor its parameter count";
      return nullptr;
    }
    if (best.param_gap > std::log(1.25)) {
      reason = "no built-in model within 25% of the row's " + core::fmt("%g", row_b) + "B parameters (nearest: " + best.name + ", " +
               core::fmt("%.1f", model::zoo_model(best.name).total_params() / 1e9) + "B) and no dimensions (layers, hidden) to build it from";
      return nullptr;
    }
  }
  if (best.mismatches == 0) {
    if (!dims) notes.push_back("model: " + best.name + ", the built-in " + str(r, "model") + " nearest in parameter count (the row gives no dimensions)");
    return best.name;
  }
  if (!dims) {
    notes.push_back("model: " + best.name + " (nearest built-in model by parameter count; the row gives no layers/hidden)");
    return best.name;
  }
  // The row's dimensions on the nearest member's architecture.
  Json m;
  for (const auto& e : embedded::zoo_models()) {
    if (e.name == best.name) m = Json::parse(e.text);
  }
  if (m.contains("hybrid_override_pattern")) {
    // A hybrid's blocks follow its layer pattern, which a row does not give.
    reason = "no built-in hybrid model with the row's dimensions (nearest: " + best.name + "), and the row does not give the layer pattern";
    return nullptr;
  }
  m["name"] = str(r, "model");
  m["source"] = "data/published-runs.jsonl row " + str(r, "id") + ": " + best.name + "'s architecture with the row's dimensions";
  const bool gpt2_keys = m.contains("n_layer");  // GPT-2 style key names
  m[gpt2_keys ? "n_layer" : "num_hidden_layers"] = inum(r, "layers");
  m[gpt2_keys ? "n_embd" : "hidden_size"] = inum(r, "hidden");
  if (has(r, "heads")) {
    const model::ModelSpec z = model::zoo_model(best.name);
    // An explicit head width that differs from hidden / heads (gpt-oss: 64) is the family's;
    // one that equals it follows the row's dimensions.
    if (z.head_dim == 0 || z.head_dim * z.heads == z.hidden) m.erase("head_dim");
    m[gpt2_keys ? "n_head" : "num_attention_heads"] = inum(r, "heads");
  }
  if (m.contains("layer_types") && m["layer_types"].is_array() && !m["layer_types"].empty()) {
    // Per-layer attention kinds (sliding / full) repeat their pattern over the row's layers.
    const Json pattern = m["layer_types"];
    Json types = Json::array();
    for (int64_t i = 0; i < inum(r, "layers"); ++i) types.push_back(pattern[static_cast<size_t>(i) % pattern.size()]);
    m["layer_types"] = types;
  }
  if (has(r, "kv_heads") && !gpt2_keys) m["num_key_value_heads"] = inum(r, "kv_heads");
  if (has(r, "vocab")) m["vocab_size"] = inum(r, "vocab");
  const char* ffn_key = gpt2_keys ? "n_inner" : "intermediate_size";
  if (has(r, "ffn_hidden") && !m.contains("moe_intermediate_size")) {
    m[ffn_key] = inum(r, "ffn_hidden");
  } else if (!row_moe && m.contains(ffn_key) && m[ffn_key].is_number_integer()) {
    // The member's FFN width in proportion to its hidden size (Llama 3: 3.5h), on the row's
    // hidden size, in multiples of 256.
    const model::ModelSpec z = model::zoo_model(best.name);
    if (z.hidden != inum(r, "hidden") && z.hidden > 0) {
      const double scaled = static_cast<double>(m[ffn_key].get<int64_t>()) * static_cast<double>(inum(r, "hidden")) / static_cast<double>(z.hidden);
      m[ffn_key] = std::max<int64_t>(256, std::llround(scaled / 256.0) * 256);
    }
    resolve_ffn(r, m, ffn_key, notes);
  }
  if (gpt2_keys && has(r, "seq_len")) m["n_positions"] = std::max(inum(r, "seq_len"), m.value("n_positions", int64_t{0}));
  for (const char* k : {"num_local_experts", "n_routed_experts", "num_experts"}) {
    if (m.contains(k) && has(r, "moe_experts")) m[k] = inum(r, "moe_experts");
  }
  if (inum(r, "moe_shared_experts") > 0) m["n_shared_experts"] = inum(r, "moe_shared_experts");  // each of the routed experts' width
  for (const char* k : {"num_experts_per_tok", "experts_per_token"}) {
    if (m.contains(k) && has(r, "moe_topk")) m[k] = inum(r, "moe_topk");
  }
  if (has(r, "moe_ffn_hidden")) {
    if (m.contains("moe_intermediate_size")) {
      m["moe_intermediate_size"] = inum(r, "moe_ffn_hidden");
    } else if (m.contains("num_local_experts")) {
      m["intermediate_size"] = inum(r, "moe_ffn_hidden");  // Mixtral: the experts' FFN
    }
  }
  notes.push_back(f == Family::kUnknown ? "model: a family the zoo lacks, taken as a Llama-style decoder (" + best.name +
                                             "'s gated SiLU MLP, RMSNorm, RoPE, untied embeddings) with the row's dimensions"
                                       : "model: " + best.name + "'s architecture with the row's dimensions (no built-in model has them)");
  return m;
}

Json model_for(const Json& r, Family f, std::vector<std::string>& notes, std::string& reason) {
  const int64_t layers = inum(r, "layers");
  const int64_t hidden = inum(r, "hidden");
  const int64_t heads = inum(r, "heads");
  switch (f) {
    case Family::kLlama:
    case Family::kNemotron:
    case Family::kNemotronH:
    case Family::kGpt3:
    case Family::kQwenMoe:
    case Family::kGptOss:
    case Family::kMixtral:
    case Family::kDeepSeek:
    case Family::kUnknown: return zoo_model_for(r, f, notes, reason);
    default: break;
  }
  // A GPT row that gives only its parameter count is the zoo's GPT of that size (GPT-3 175B),
  // within 25% of it, as other families' rows without dimensions are.
  if ((f == Family::kMegatronGpt || f == Family::kGptStyle) && !(layers > 0 && hidden > 0) && num(r, "params_b") > 0) {
    return zoo_model_for(r, f, notes, reason);
  }
  if (layers <= 0 || hidden <= 0 || heads <= 0) {
    reason = "row lacks layers/hidden/heads";
    return nullptr;
  }
  if (f == Family::kGptStyle) {
    notes.push_back("model: a GPT-lineage family the zoo lacks, taken as a GPT-style decoder (2-matrix GELU MLP, LayerNorm, learned positions, "
                    "tied embeddings, biases) with the row's dimensions");
  }
  if (!has(r, "vocab")) notes.push_back("model: vocabulary 51,200 (GPT-2's, padded as Megatron pads it; the row does not give it)");
  Json m = {{"name", str(r, "model")},
            {"source", "data/published-runs.jsonl row " + str(r, "id")},
            {"num_hidden_layers", layers},
            {"hidden_size", hidden},
            {"num_attention_heads", heads},
            {"num_key_value_heads", inum(r, "kv_heads", heads)},
            {"vocab_size", inum(r, "vocab", 51200)},
            {"hidden_act", "gelu"},
            {"norm", "layernorm"},
            {"tie_word_embeddings", true}};
  std::optional<size_t> four_h_note;
  if (has(r, "ffn_hidden")) {
    m["intermediate_size"] = inum(r, "ffn_hidden");
  } else {
    m["intermediate_size"] = 4 * hidden;
    four_h_note = notes.size();
    notes.push_back("model: ffn = 4h (standard GPT; not given in the row)");
  }
  if (f == Family::kMegatronGpt || f == Family::kGptStyle) {
    m["position_embedding"] = "learned";
    m["max_position_embeddings"] = inum(r, "seq_len");
    m["linear_bias"] = true;
  } else if (f == Family::kBloom) {
    m["position_embedding"] = "alibi";
    m["linear_bias"] = true;
    m["embedding_norm"] = true;
    notes.push_back("model: BLOOM normalises the token embeddings (word_embeddings_layernorm, --embed-layernorm)");
  } else if (f == Family::kMpt) {
    // The benchmark's configs (scripts/train/yamls/pretrain/mpt-*.yaml) leave attn_config.alibi
    // unset, so MPTConfig's default learned position embeddings of max_seq_len x d_model are
    // trained: the table's NumParams grows by d_model per position (MPT-7B: 6,658,859,008 at
    // 2,048 tokens, 6,667,247,616 at 4,096).
    m["position_embedding"] = "learned";
    m["max_position_embeddings"] = inum(r, "seq_len");
    // MPTConfig's no_bias defaults to false and the configs leave it: the table's NumParams
    // counts the biases (MPT-760M: 24 x (12 d^2 + 13 d) + (50,368 + 2,048) d + 2 d =
    // 760,470,528 at d 1,536: 9 d of linear biases and 4 d of norm weights and biases per layer).
    m["linear_bias"] = true;
    notes.push_back("model: MPT as the llm-foundry benchmark configs build it: learned position embeddings (no ALiBi; "
                    "NumParams grows by d_model per position of the sequence), biases (MPTConfig's no_bias default), tied embeddings");
  }
  if (four_h_note && resolve_ffn(r, m, "intermediate_size", notes)) notes.erase(notes.begin() + static_cast<std::ptrdiff_t>(*four_h_note));
  return m;
}

// A field written as a switch: true/false, a number (non-zero is on) or a word (yes, on,
// enabled, 1 / no, off, disabled, none, 0); nullopt for anything else.
std::optional<bool> switch_of(const Json& r, const char* k) {
  const Json& v = r[k];
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0;
  const std::string t = lower(str(r, k));
  for (const char* on : {"true", "yes", "on", "enabled", "1"}) {
    if (t == on) return true;
  }
  for (const char* off : {"false", "no", "off", "disabled", "none", "0"}) {
    if (t == off) return false;
  }
  return std::nullopt;
}

// The sharding a row's fsdp field names: "full" (FULL_SHARD, FSDP2's fully_shard, true),
// "grad_op" (SHARD_GRAD_OP: parameters stay gathered from the forward to the backward),
// "none" (absent, false, NO_SHARD), "hybrid" (HYBRID_SHARD / HSDP: sharded within a group and
// replicated across; the run file's parallel.dp_replicate), or "" (wording the harness does not
// know; a wrong guess changes every gather, so the row is listed).
std::string fsdp_mode(const Json& r) {
  if (!has(r, "fsdp")) return "none";
  if (const auto on = switch_of(r, "fsdp")) return *on ? "full" : "none";
  const std::string f = lower(str(r, "fsdp"));
  if (f.empty() || contains(f, "no_shard")) return "none";
  if (contains(f, "hybrid") || contains(f, "hsdp")) return "hybrid";
  if (contains(f, "grad_op")) return "grad_op";
  // FSDP's default (FULL_SHARD, FSDP2's fully_shard, Megatron FSDP's parameters, gradients and
  // optimizer state), ZeRO-3.
  if (contains(f, "full") || contains(f, "fsdp") || contains(f, "zero-3") || contains(f, "zero3")) return "full";
  return "";
}

// The ZeRO stage a row states (a number, or text such as "ZeRO-1" or "stage 3"): 0-3, -1 when
// the row states none, -2 when it states one the harness cannot read (a fraction, a word).
int zero_stage_of(const Json& r) {
  if (!has(r, "zero_stage")) return -1;
  const Json& v = r["zero_stage"];
  if (v.is_number()) {
    const double z = v.get<double>();
    return z == std::floor(z) && z >= 0 && z <= 3 ? static_cast<int>(z) : -2;
  }
  static const std::regex digit(R"((?:^|[^0-9])([0-3])(?:$|[^0-9]))");
  std::smatch m;
  const std::string t = str(r, "zero_stage");
  if (v.is_string() && std::regex_search(t, m, digit)) return m[1].str()[0] - '0';
  return -2;
}

// Sequence parallelism as a row states it: 1 on, 0 off, -1 not stated, -2 unreadable.
int sp_of(const Json& r) {
  if (!has(r, "sp")) return -1;
  const auto on = switch_of(r, "sp");
  return on ? (*on ? 1 : 0) : -2;
}

// NeMo 2.0's own releases of 2025 (25.01-25.12), whose performance tables come from its
// scripts/performance recipes; not Megatron-Bridge's tables, which name their container too.
bool nemo_perf_scripts_2025(const std::string& fw_lower) {
  if (contains(fw_lower, "megatron-bridge")) return false;
  static const std::regex release(R"(\bnemo\s+25\.(\d\d))");
  return std::regex_search(fw_lower, release);
}

// The training precision a row names, or "" when it names one the simulator has no mode for
// (TF32 matmuls over fp32 storage). A row that names none trains in the 16-bit type its GPU
// has: bf16, or fp16 on V100, which has no bf16 (recorded by the caller).
std::string precision_of(const Json& r) {
  const std::string p = lower(str(r, "precision"));
  if (p.empty()) return contains(lower(str(r, "gpu_type")), "v100") ? "fp16" : "bf16";
  if (contains(p, "fp8") || contains(p, "float8")) return "fp8";
  if (contains(p, "bf16") || contains(p, "bfloat16")) return "bf16";
  if (contains(p, "fp16") || contains(p, "float16") || contains(p, "half")) return "fp16";
  if (contains(p, "tf32")) return "";
  if (contains(p, "fp32") || contains(p, "float32") || contains(p, "full precision")) return "fp32";
  // Mixed precision naming no type: torch.autocast on CUDA and Apex AMP default to fp16.
  if (contains(p, "mixed") || contains(p, "amp")) return "fp16";
  return "";
}

// The recompute mode a row names, or "" when its wording is none the harness knows (a wrong
// guess moves the step by a third, so such a row is listed rather than predicted).
std::string recompute_of(const Json& r) {
  if (!has(r, "recompute")) return "none";
  if (const auto on = switch_of(r, "recompute")) return *on ? "full" : "none";
  const std::string rc = lower(str(r, "recompute"));
  if (rc.empty()) return "none";
  // "SAC" is PyTorch's selective activation checkpointing (torchtitan's op or layer mode).
  static const std::regex sac(R"(\bsac\b)");
  if (contains(rc, "selective") || contains(rc, "partial") || std::regex_search(rc, sac)) return "selective";
  static const std::regex off_word(R"(\boff\b)");
  if (rc.rfind("no ", 0) == 0 || rc.rfind("none", 0) == 0 || contains(rc, "disabled") || contains(rc, "without") ||
      std::regex_search(rc, off_word)) {
    return "none";
  }
  for (const char* on : {"full", "checkpoint", "recompute", "recomputation"}) {
    if (contains(rc, on)) return "full";
  }
  return "";
}

// Megatron-LM paper Eq. 3 (includes activation recomputation): 96*B*s*l*h^2*(1 + s/6h + V/16lh).
double megatron_eq3_flops(double B, double s, double l, double h, double V) {
  return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
}

}  // namespace

namespace {
// The row with the layout fields a rule filled in, converted, and that rule recorded among the
// run's assumptions.
bool with_layout(const Json& r, const Json& fields, Json& run, std::string& reason, RowGaps* gaps, const std::string& assumption) {
  Json filled = r;
  filled.update(fields);
  if (!row_to_run(filled, run, reason, gaps)) return false;
  run["assumptions"].push_back(assumption);
  return true;
}
}  // namespace

// Hybrid sharding's replicas (parallel.dp_replicate): the row's dp_replicate (torchtitan's
// data_parallel_replicate_degree), or dp over its dp_shard, or for HYBRID_SHARD without either
// PyTorch FSDP's default: the ranks of each node shard the state and the nodes replicate it.
// `model_parallel`: tp * cp, the ranks of one data-parallel index.
bool hybrid_replicas(const Json& r, const std::string& fsdp, int64_t dp, int64_t model_parallel, Json& parallel,
                     std::vector<std::string>& notes, std::string& reason) {
  int64_t replicas = 1;
  if (has(r, "dp_replicate") || has(r, "dp_shard")) {
    const char* key = has(r, "dp_replicate") ? "dp_replicate" : "dp_shard";
    const int64_t v = inum(r, key);
    if (dp % v != 0) {
      reason = std::string(key) + " " + std::to_string(v) + " does not divide the row's dp " + std::to_string(dp);
      return false;
    }
    replicas = has(r, "dp_replicate") ? v : dp / v;
    notes.push_back("parallel: hybrid sharding, " + std::to_string(replicas) + " replicas of " + std::to_string(dp / replicas) +
                    " data-parallel ranks (the row's " + key + ")");
  } else if (fsdp == "hybrid") {
    const int64_t gpn = inum(r, "gpus_per_node", 8);
    const int64_t in_node = gpn % model_parallel == 0 ? gpn / model_parallel : 0;
    if (in_node == 0 || (dp > in_node && dp % in_node != 0)) {
      reason = "fsdp " + core::show(r["fsdp"]) + ": hybrid sharding within a node, but dp " + std::to_string(dp) +
               " does not split into nodes of " + std::to_string(gpn) + " GPUs at tp*cp " + std::to_string(model_parallel) +
               " (the row gives no dp_replicate or dp_shard)";
      return false;
    }
    replicas = std::max<int64_t>(1, dp / in_node);
    notes.push_back("parallel: HYBRID_SHARD shards within each node (" + std::to_string(std::min(dp, in_node)) +
                    " data-parallel ranks) and replicates across " + std::to_string(replicas) +
                    " (PyTorch FSDP's default groups; the row names no groups)");
  }
  if (replicas > 1) parallel["dp_replicate"] = replicas;
  return true;
}

bool row_to_run(const Json& r, Json& run, std::string& reason, RowGaps* gaps) {
  // Counts and sizes the conversion divides by or builds shapes from must be positive.
  reason = non_positive_field(r, {"num_gpus", "gpus_per_node", "tp", "pp", "dp", "cp", "ep", "etp", "vp", "micro_batch", "global_batch_seqs",
                                  "global_batch_tokens", "grad_accum", "seq_len", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab",
                                  "moe_experts", "moe_topk", "moe_ffn_hidden", "params_b", "dp_replicate", "dp_shard", "iteration_time_s", "tokens_per_s_per_gpu",
                                  "tokens_per_s_total", "tflops_per_gpu", "mfu", "mfu_peak_tflops_per_gpu", "memory_gib_per_gpu"});
  if (!reason.empty()) return false;
  if (num(r, "mfu") > 1.0) {
    reason = "field 'mfu' is a fraction of peak at most 1, got " + core::show(r["mfu"]);
    return false;
  }
  if (!(num(r, "num_gpus") > 0)) {
    reason = "field 'num_gpus' not stated";
    return false;
  }
  std::vector<std::string> notes;
  const std::string id = str(r, "id");
  const Family fam = family_of(r);
  if (fam == Family::kRecurrent) {
    reason = "model '" + str(r, "model") + "': a recurrent or hybrid (state-space) family, whose layer pattern a row does not give";
    return false;
  }
  if (fam == Family::kUnknown && !(has(r, "layers") && has(r, "hidden") && has(r, "heads"))) {
    reason = "model family not recognised and the row gives no layers/hidden/heads";
    return false;
  }
  // A row that states dp but leaves out one of tp and pp: the GPU count fixes the other.
  if (has(r, "dp") && has(r, "tp") != has(r, "pp")) {
    const char* missing = has(r, "tp") ? "pp" : "tp";
    const int64_t known = inum(r, has(r, "tp") ? "tp" : "pp") * inum(r, "dp") * inum(r, "cp", 1);
    const int64_t gpus = inum(r, "num_gpus");
    if (known <= 0 || gpus % known != 0) {
      reason = std::string("layout: the row gives no ") + missing + " and the GPU count " + std::to_string(gpus) +
               " is not a multiple of the stated dimensions' product " + std::to_string(known);
      return false;
    }
    return with_layout(r, {{missing, gpus / known}}, run, reason, gaps,
                       std::string("parallel: ") + missing + " " + std::to_string(gpus / known) + " = GPUs / (the stated dimensions' product " +
                           std::to_string(known) + "); the row does not give it");
  }
  // A fully sharded data-parallel run (FSDP, ZeRO) that states no model parallelism has none.
  // The sharding wording, read once (validated below, before it is used to build the run).
  const std::string fsdp = fsdp_mode(r);
  const int stated_zero = zero_stage_of(r), stated_sp = sp_of(r);
  const bool sharded = fsdp == "full" || fsdp == "grad_op" || fsdp == "hybrid";
  const bool sharded_dp = sharded || stated_zero > 0;
  if ((!has(r, "tp") || !has(r, "pp")) && !(sharded_dp && !has(r, "tp") && !has(r, "pp"))) {
    // Rows that give only the model-parallel size ("TP*PP=16"): Megatron-LM keeps tensor
    // parallelism inside a node, up to 8 ways and dividing the heads, and pipelines the rest.
    static const std::regex mp_re(R"(TP\s*\*\s*PP\s*=\s*(\d+))");
    std::smatch m;
    const std::string text = str(r, "notes");
    if (has(r, "tp") || has(r, "pp") || !std::regex_search(text, m, mp_re)) {
      reason = "layout not stated (only the model-parallel product is given)";
      return false;
    }
    const int64_t mp = std::stoll(m[1].str());
    int64_t tp = 1;
    for (int64_t t : {8, 4, 2}) {
      if (mp % t == 0 && t <= inum(r, "gpus_per_node", 8) && (inum(r, "heads", 0) == 0 || inum(r, "heads", 0) % t == 0)) {
        tp = t;
        break;
      }
    }
    return with_layout(r, {{"tp", tp}, {"pp", mp / tp}}, run, reason, gaps,
                       "parallel: tp " + std::to_string(tp) + ", pp " + std::to_string(mp / tp) + ": the row gives only the model-parallel size " +
                           std::to_string(mp) + "; Megatron-LM keeps tensor parallelism inside a node (up to 8 ways) and pipelines the rest");
  }
  if (!has(r, "tp") && !has(r, "pp")) notes.push_back("parallel: tp 1, pp 1 (a sharded data-parallel run that states no model parallelism)");
  if (!has(r, "seq_len")) {
    reason = "sequence length not stated";
    return false;
  }
  if (precision_of(r).empty()) {
    reason = "precision \"" + str(r, "precision") + "\" has no training mode here (bf16, fp16, fp8, fp32)";
    return false;
  }
  if (!has(r, "precision")) notes.push_back("training: " + precision_of(r) + " (the row states no precision; the GPU's 16-bit type)");
  if (recompute_of(r).empty()) {
    reason = "recompute \"" + str(r, "recompute") + "\" not recognised (none, selective or full)";
    return false;
  }
  if (stated_zero == -2) {
    reason = "zero_stage " + core::show(r["zero_stage"]) + " not recognised (a stage 0-3)";
    return false;
  }
  if (stated_sp == -2) {
    reason = "sp " + core::show(r["sp"]) + " not recognised (true or false)";
    return false;
  }
  if (fsdp.empty()) {
    reason = "fsdp " + core::show(r["fsdp"]) + " not recognised (full shard, HYBRID_SHARD, SHARD_GRAD_OP, NO_SHARD, true or false)";
    return false;
  }
  Json hw;
  if (!hardware_for(r, hw, notes, reason)) return false;
  {
    // The inter-node network when the row names one that differs from the profile's.
    const std::string link = lower(str(r, "inter_node_link"));
    Json net;
    if (contains(link, "omni-path")) {
      net = {{"name", "omni-path-100"}, {"nic_bandwidth", "100Gb/s"}, {"nics_per_node", 4}, {"latency", "8us"}};
      notes.push_back("network: Omni-Path, 4 x 100 Gb/s per node (Jean Zay A100 nodes; the row names Omni-Path)");
    } else if (contains(link, "4x hdr")) {
      net = {{"nic_bandwidth", "200Gb/s"}, {"nics_per_node", 4}};
      notes.push_back("network: 4 x HDR 200 Gb/s per node as the row states");
    }
    if (!net.is_null()) {
      if (hw.is_string()) hw = Json{{"base", hw.get<std::string>()}};
      hw["network"] = net;
    }
  }
  Json model = model_for(r, fam, notes, reason);
  if (model.is_null()) return false;

  const int64_t gpus = inum(r, "num_gpus");
  const int64_t tp = inum(r, "tp", 1), pp = inum(r, "pp", 1), cp = inum(r, "cp", 1), ep = inum(r, "ep", 1);
  const int64_t dp = gpus / (tp * pp * cp);
  if (tp * pp * cp * dp != gpus || (has(r, "dp") && inum(r, "dp") != dp)) {
    reason = "layout: tp " + std::to_string(tp) + " x pp " + std::to_string(pp) + " x cp " + std::to_string(cp) + " x dp " +
             std::to_string(has(r, "dp") ? inum(r, "dp") : dp) + " does not make the row's " + std::to_string(gpus) + " GPUs";
    return false;
  }
  const std::string fw = lower(str(r, "framework"));
  const bool nemo = contains(fw, "nemo") || contains(fw, "megatron-bridge") || contains(fw, "megatron-core");
  const bool torchtitan = contains(fw, "torchtitan");
  const bool deepspeed = contains(fw, "deepspeed");
  // Megatron-LM and Megatron-DeepSpeed took FlashAttention (--use-flash-attn) in 2023; rows
  // from before (or of no stated year) ran their own softmax over the full score tensor.
  const bool pre_flash = row_year(r) < 2023;
  const bool megatron_old = contains(fw, "megatron-lm") && !nemo && pre_flash;

  Json training = {{"seq_len", inum(r, "seq_len")}, {"precision", precision_of(r)}};
  int64_t gbs = inum(r, "global_batch_seqs");
  int64_t mbs = inum(r, "micro_batch");
  if (gbs <= 0 && inum(r, "global_batch_tokens") > 0 && inum(r, "global_batch_tokens") % inum(r, "seq_len", 1) == 0) {
    gbs = inum(r, "global_batch_tokens") / inum(r, "seq_len");
    notes.push_back("training: global batch = " + std::to_string(gbs) + " sequences (the row's global batch tokens / sequence length)");
  }
  if (gbs <= 0 && mbs > 0 && inum(r, "grad_accum") > 0) {
    gbs = mbs * inum(r, "grad_accum") * dp;
    notes.push_back("training: global batch = micro-batch x gradient accumulation x dp = " + std::to_string(gbs) + " sequences");
  }
  if (gbs <= 0 && torchtitan) {
    gbs = 8 * dp;
    notes.push_back("training: global batch = 8 sequences per data-parallel rank (torchtitan 'local batch size 8')");
  }
  if (gbs <= 0) {
    reason = "global batch not stated";
    return false;
  }
  if (has(r, "global_batch_seqs") && mbs > 0 && inum(r, "grad_accum") > 0 && mbs * inum(r, "grad_accum") * dp != gbs) {
    // The step's work is the global batch; a stated accumulation that disagrees is noted.
    notes.push_back("training: the row's gradient accumulation disagrees with its global batch (micro-batch " + std::to_string(mbs) + " x " +
                    std::to_string(inum(r, "grad_accum")) + " x dp " + std::to_string(dp) + " = " +
                    std::to_string(mbs * inum(r, "grad_accum") * dp) + " sequences, not " + std::to_string(gbs) + "); the global batch is used");
  }
  training["global_batch_size"] = gbs;

  // Fine-tuning rows: LoRA's rank and target layers, and packed sequences whose attention runs
  // per document (the row's mean document length).
  const std::string finetune = lower(str(r, "finetune"));
  if (finetune == "lora") {
    Json lora = {{"rank", inum(r, "lora_rank", 0)}};
    if (has(r, "lora_targets")) lora["targets"] = r.at("lora_targets");
    training["lora"] = lora;
    notes.push_back("training: LoRA rank " + std::to_string(inum(r, "lora_rank", 0)) + " on " +
                    (has(r, "lora_targets") ? r.at("lora_targets").dump() : std::string("every attention and MLP projection")) +
                    "; the base model frozen");
  } else if (!finetune.empty() && finetune != "sft") {
    reason = "finetune \"" + finetune + "\": only full fine-tuning (sft) and LoRA are modelled";
    return false;
  }
  if (inum(r, "packed_document_tokens", 0) > 0) {
    training["packed_document_tokens"] = inum(r, "packed_document_tokens");
    notes.push_back("training: packed sequences, attention per document of " + std::to_string(inum(r, "packed_document_tokens")) +
                    " tokens on average (the row's estimate)");
  }

  // Attention kernel and dropout by era/framework.
  if (megatron_old || (deepspeed && pre_flash) || fam == Family::kBloom) {
    training["attention"] = "unfused";
    notes.push_back("training: unfused attention (no FlashAttention in this framework at the time)");
  }
  if ((fam == Family::kMegatronGpt || fam == Family::kGptStyle) && megatron_old) {
    training["dropout"] = true;
    notes.push_back("training: dropout 0.1 on hidden states and attention (Megatron GPT defaults)");
  }
  if (fam == Family::kBloom || (deepspeed && precision_of(r) == "bf16")) {
    training["grad_dtype"] = "fp32";
    training["lp_grads"] = true;
    notes.push_back("training: DeepSpeed BF16Optimizer: bf16 gradients kept beside the fp32 accumulation buffer");
  } else if (deepspeed) {
    training["grad_dtype"] = precision_of(r);
    notes.push_back("training: DeepSpeed fp16 optimizer: gradients kept and reduced in fp16 (communication_data_type follows the model dtype)");
  } else if (nemo_perf_scripts_2025(fw) && precision_of(r) == "fp8") {
    // NeMo 2.0's performance scripts of 2025 (scripts/performance/llm, helpers.py
    // set_precision_configs) set grad_reduce_in_fp32 = False on their FP8 plugins: the
    // gradient buffers, and so the data-parallel reduce-scatters, are bf16.
    training["grad_dtype"] = "bf16";
    notes.push_back("training: bf16 gradient buffers and reduction (NeMo 2.0 performance scripts set grad_reduce_in_fp32 = False for FP8)");
  } else if (nemo) {
    training["grad_dtype"] = "fp32";
    notes.push_back("training: fp32 gradient reduction (Megatron-Core default main_grads)");
  } else if (fam == Family::kMpt) {
    // Composer's get_mixed_precision of that era: 'DEFAULT' sets reduce_dtype to the amp
    // precision and leaves param_dtype unset, so FSDP gathers the fp32 flat parameters;
    // 'PURE' sets param, reduce and buffer dtypes to the precision.
    training["grad_dtype"] = "fp32";
    training["param_dtype"] = "fp32";
    // (amp_fp8 runs Transformer Engine's fp8 GEMMs under bf16 autocast: the amp dtype is bf16.)
    const std::string amp = precision_of(r) == "fp8" ? "bf16" : precision_of(r);
    training["reduce_dtype"] = amp;
    if (contains(lower(str(r, "precision")), "pure")) {
      notes.push_back("training: Composer FSDP mixed precision PURE: fp32 sharded parameters gathered as " + amp +
                      " copies, gradients reduced in " + amp);
    } else {
      training["gather_dtype"] = "fp32";
      notes.push_back("training: Composer FSDP mixed precision DEFAULT (2023): no FSDP param_dtype, so the fp32 parameters are gathered in fp32 "
                      "and autocast casts each weight to " + amp + " per use; the fp32 token and position embeddings keep the residual "
                      "stream in fp32 (MPT's low-precision LayerNorm casts its input down); gradients reduced in " + amp);
    }
  } else if (torchtitan) {
    training["grad_dtype"] = "fp32";
    training["param_dtype"] = "fp32";
    notes.push_back("training: FSDP mixed precision: fp32 sharded parameters are the master copy, gradients reduced in fp32");
  }
  // torchtitan runs are compiled when the row says so; 2025 Float8 runs are compiled (Float8
  // training in torchtitan runs under torch.compile).
  const bool tt_float8_2025 = torchtitan && contains(fw, "2025") && contains(lower(str(r, "precision")), "float8");
  const bool tt_compiled = contains(lower(str(r, "source_ref")) + lower(str(r, "notes")), "compile") || tt_float8_2025;
  if (torchtitan && !tt_compiled) {
    training["fused_elementwise"] = false;
    notes.push_back("training: eager PyTorch element-wise kernels (no torch.compile in this run)");
  }
  if (fam == Family::kMpt) {
    // llm-foundry's benchmark configs (scripts/train/yamls/pretrain/mpt-*.yaml) and its sweep
    // script (submit_benchmarks.py, --attn_impl default 'triton') run MPT's attn_impl: triton,
    // the FlashAttention kernel written in Triton (flash_attn_triton.py).
    training["attention"] = "triton";
    notes.push_back("training: the FlashAttention Triton kernel (MPT attn_impl: triton, as the benchmark configs and sweep script set it)");
  } else if (torchtitan || (deepspeed && !pre_flash && fam != Family::kBloom)) {
    // (Megatron-DeepSpeed's --use-flash-attn-v2 calls flash-attn 2.)
    training["attention"] = "flash2";
    notes.push_back("training: FlashAttention-2 kernels (PyTorch SDPA flash backend / flash-attn 2), not Hopper's FA3/cuDNN class");
  }
  if (torchtitan && contains(fw, "2024")) {
    // torchtitan's Llama 3 attention (2024) repeats K and V to the query heads and calls SDPA
    // without grouped-query support, so attention and any CP exchange see the expanded tensors.
    training["repeat_kv"] = true;
    notes.push_back("training: K/V repeated to the query heads before SDPA (torchtitan's 2024 Llama 3 attention calls repeat_kv)");
  }
  if (torchtitan && precision_of(r) == "fp8") {
    training["fp8_weights"] = "cast";
    notes.push_back("training: torchao float8 linears cast their weights to fp8 at every use (no cache across micro-batches)");
    training["fp8_norm_quantize"] = false;
    notes.push_back("training: torchao float8 linears cast their inputs in their own kernels (no norm writes fp8)");
    if (inum(r, "tp", 1) > 1) {
      // Float8 tensor parallelism casts each TP linear's input to fp8 before the linear (and any
      // sequence all-gather), so the tensor the float8 matmul saves for backward is that copy.
      notes.push_back("training: torchao float8 tensor parallelism (Float8ColwiseParallel, Float8RowwiseParallel, PrepareFloat8ModuleInput) "
                      "casts the linears' inputs, and in backward the row-parallel outputs' gradients, to fp8 before their sequence "
                      "all-gathers; the float8 matmul keeps that fp8 input (DTensor: the gathered one) for the weight gradient");
    } else {
      training["fp8_saved_inputs"] = false;
      notes.push_back("training: torchao float8 linears keep their bf16 inputs for backward and quantize again there");
    }
  }
  if (torchtitan && contains(lower(str(r, "precision")), "float8 all-gather")) {
    training["gather_dtype"] = "fp8";
    notes.push_back("training: FSDP float8 all-gather: weights are cast to fp8 on the shard and gathered in fp8 (the row says so)");
  }
  if (tt_float8_2025) {
    // Float8 training runs under torch.compile, which by 2025 torchtitan applies to the loss
    // too: the upcast and log-softmax fuse into one kernel (no fp32 logit copies).
    training["loss"] = "fused";
    notes.push_back("training: compiled cross-entropy (Float8 runs use torch.compile, which 2025 torchtitan applies to the loss; inferred)");
  } else if (torchtitan) {
    training["loss"] = "eager";
    notes.push_back("training: eager PyTorch cross-entropy on fp32-upcast logits (torchtitan loss_fn)");
  }
  if ((fam == Family::kMegatronGpt || contains(fw, "megatron")) && !deepspeed && !nemo && precision_of(r) != "fp32") {
    // Megatron-LM keeps fp32 main gradients under fp16 (its fp16 optimizer) and bf16 or fp8
    // (accumulate_allreduce_grads_in_fp32, forced on with --bf16) alike.
    training["grad_dtype"] = "fp32";
    if (precision_of(r) != "fp16") {
      notes.push_back("training: fp32 main gradients, accumulated and reduced in fp32 (Megatron-LM forces it with bf16)");
    }
  }

  if (has(r, "grad_reduce_dtype")) {
    // A recipe that states its gradient buffers' dtype (NeMo's optim.grad_sync_dtype,
    // Megatron's --grad-reduce-in-bf16) keeps and reduces the gradients in it, whatever the
    // framework's default above; the framework's other settings stay.
    const std::string g = lower(str(r, "grad_reduce_dtype"));
    if (g != "bf16" && g != "fp16" && g != "fp32") {
      reason = "grad_reduce_dtype " + core::show(r["grad_reduce_dtype"]) + " not recognised (bf16, fp16 or fp32)";
      return false;
    }
    training["grad_dtype"] = g;
    notes.push_back("training: gradients kept and reduced in " + g + " (the row's recipe states it; this replaces the framework default)");
  }
  Json parallel = {{"tp", tp}, {"pp", pp}, {"dp", dp}};
  if (cp > 1) parallel["cp"] = cp;
  if (ep > 1) parallel["ep"] = ep;
  if (ep > 1 && has(r, "etp")) parallel["etp"] = inum(r, "etp", 1);  // else Megatron's default: etp = tp
  if (dp * tp * pp * cp != gpus) {
    reason = "layout product does not match num_gpus";
    return false;
  }
  if (mbs <= 0 && contains(fw, "megatron-lm (2020)")) {
    // Megatron-LM 2020 had no gradient accumulation: its --batch-size is the per-replica batch.
    mbs = gbs / dp;
    notes.push_back("parallel: micro-batch = per-replica batch " + std::to_string(mbs) + " (Megatron-LM 2020 has no gradient accumulation)");
  }
  if (mbs <= 0) {
    if (torchtitan && pp > 1) {
      // pp micro-batches for the looped (interleaved) schedule too, although later torchtitan
      // defaults to pp * stages per rank: the published 1F1B / interleaved step times (40.96 s,
      // 32.0 s) stand in the ratio of their bubbles at m = pp (1.31) and not at m = 2 pp (1.54).
      const int64_t local = gbs / dp;
      mbs = std::max<int64_t>(1, local / pp);
      notes.push_back("parallel: pipeline micro-batches = pp (torchtitan default), so micro-batch = local batch / pp = " + std::to_string(mbs));
    } else {
      mbs = 1;
      notes.push_back(kUnstatedMicroBatch);
      if (gaps != nullptr) gaps->micro_batch_unstated = true;
    }
  }
  parallel["micro_batch_size"] = mbs;
  if (gbs % (dp * mbs) != 0) {
    reason = "global batch " + std::to_string(gbs) + " is not a multiple of dp*micro_batch";
    return false;
  }
  const int64_t vp = inum(r, "vp", 1);
  if (vp > 1) {
    parallel["vpp"] = vp;
    parallel["schedule"] = "interleaved";
  }
  if (contains(lower(id), "interleaved")) {
    parallel["vpp"] = 2;
    parallel["schedule"] = "interleaved";
    notes.push_back("parallel: interleaved 1F1B with 2 virtual stages per rank (count not stated)");
  }
  if (tp > 1 && stated_sp >= 0) {
    parallel["sp"] = stated_sp == 1;
  } else if (tp > 1 && (nemo || torchtitan)) {
    parallel["sp"] = true;
    notes.push_back("parallel: sequence parallelism with TP (framework default for these recipes)");
  }
  if (tp > 1 && torchtitan) {
    parallel["tp_saves_gathered_input"] = true;
    notes.push_back("parallel: DTensor TP saves the LM head's all-gathered input for its weight gradient");
  }
  if (nemo && tp > 1) {
    parallel["tp_comm_overlap"] = true;
    notes.push_back("parallel: TP communication overlapped with GEMMs (NeMo recipe default)");
  } else if (tp > 1 && contains(fw, "megatron-lm") && !deepspeed && row_year(r) >= 2022) {
    // Megatron-LM's linear layers launch their backward collectives asynchronously from 2022
    // (LinearWithGradAccumulationAndAsyncCommunication; before, --async-tensor-model-parallel-allreduce).
    parallel["tp_async_backward"] = true;
    notes.push_back("parallel: the column-parallel layers' backward TP collectives run beside their GEMMs (Megatron-LM's "
                    "asynchronous linear-layer backward: the input re-gather beside the input-gradient GEMM under SP, the "
                    "input-gradient reduction beside the weight-gradient GEMM)");
  } else if (torchtitan && tp > 1 && (contains(lower(id), "asynctp") || contains(lower(str(r, "source_ref")), "asynctp"))) {
    parallel["tp_comm_overlap"] = true;
    parallel["tp_overlap_input_grad"] = false;
    notes.push_back("parallel: async TP overlaps TP communication with the GEMMs, except the backward reduce-scatters of the "
                    "column-parallel layers' input gradients, which sum several matmuls (wq, wk, wv; w1, w3) and so match no "
                    "fused pattern (PyTorch's micro-pipeline TP pass)");
  }
  if (sharded) {
    parallel["fsdp"] = true;
    if (!hybrid_replicas(r, fsdp, dp, tp * cp, parallel, notes, reason)) return false;
    if (fsdp == "grad_op") {
      parallel["reshard_after_forward"] = false;
      notes.push_back("parallel: SHARD_GRAD_OP keeps each layer's gathered parameters from its forward to its backward");
    }
    if (torchtitan && dp * cp > 1) {
      parallel["fsdp_copy_out"] = true;
      notes.push_back("parallel: FSDP2 copies each gathered layer out of its all-gather buffer on the compute stream (foreach_all_gather_copy_out)");
    }
  } else if (stated_zero >= 0) {
    parallel["zero_stage"] = stated_zero;
  } else if (nemo) {
    parallel["zero_stage"] = 1;
    notes.push_back("parallel: distributed optimizer (ZeRO-1) as in Megatron-Core recipes");
  }
  if (!sharded && parallel.value("zero_stage", 0) > 0 && !hybrid_replicas(r, fsdp, dp, tp * cp, parallel, notes, reason)) return false;
  if (nemo && dp * cp > 1) {
    // NeMo's and Megatron-Bridge's communication-overlap setup (MegatronCommOverlap): with data
    // parallelism, buckets of 128 Mi parameters (fp32 main grads), the parameter all-gather
    // overlapped with the next forward, aligned across pipeline stages only under the
    // interleaved schedule; Megatron-Core's DDP buckets only the first stage's first chunk.
    const double bucket_params = 128.0 * 1024 * 1024;
    parallel["bucket_mb"] = 4.0 * bucket_params / 1e6;
    parallel["bucket_layout"] = "megatron";
    notes.push_back("parallel: gradient buckets of 128 Mi parameters (" + core::fmt("%g", 4.0 * bucket_params / 1e6) +
                    " MB of fp32 gradients, NeMo / Megatron-Bridge communication-overlap default) on the first pipeline stage's first "
                    "model chunk, one bucket per chunk elsewhere (Megatron-Core DDP)");
    if (pp > 1) {
      parallel["param_gather_align"] = "interleaved";
      notes.push_back("parallel: parameter all-gathers aligned across pipeline stages only under the interleaved schedule (NeMo / "
                      "Megatron-Bridge); otherwise each stage starts its gathers at its first forward");
    }
  }
  if (deepspeed && (fam == Family::kBloom || stated_zero == 1 || stated_zero == 2)) {
    // DeepSpeed's ZeRO-1/2 optimizer step all-gathers the updated partitions before it returns.
    parallel["param_gather_overlap"] = false;
    notes.push_back("parallel: DeepSpeed ZeRO-1/2 all-gathers the updated parameter partitions inside the optimizer step (not overlapped with the next forward)");
  }
  if (fam == Family::kBloom || (deepspeed && pp > 1)) {
    // Its flattened buckets hold fp32 gradients here (the BF16 optimizer's accumulation buffer).
    config::deepspeed_pipeline_engine(parallel, 4.0, notes);
  }
  if (fam == Family::kBloom) {
    parallel["zero_stage"] = 1;
    // 70 layers + embedding slots on both ends over 12 stages: 5 layers on the first and last.
    parallel["first_stage_layers"] = 5;
    parallel["last_stage_layers"] = 5;
    notes.push_back("parallel: BLOOM counts the embedding as a pipeline slot, so the first and last stages hold 5 layers and the rest 6");
  }
  const int64_t vstages = pp * parallel.value("vpp", int64_t{1});
  // The model's own layer count (the row may not state it).
  const int64_t L = model.is_string() ? model::zoo_model(model.get<std::string>()).num_layers
                                      : model.value("num_hidden_layers", model.value("n_layer", inum(r, "layers")));
  if (fam == Family::kDeepSeek && contains(fw, "megatron-bridge")) {
    // Megatron-Bridge's DeepSeek-V3 recipes and performance configs train one multi-token-
    // prediction module (mtp_num_layers 1) unless the table says "w/o MTP", and place the
    // embedding, the layers, the MTP module and the loss with an explicit pipeline layout
    // (set_deepseek_v3_pipeline_model_parallel_layout; pp 8 x vpp 4 from the H100 preset).
    const std::string name = lower(str(r, "model"));
    const int64_t mtp = contains(name, "w/o mtp") || contains(name, "without mtp") ? 0 : 1;
    if (mtp > 0) training["mtp_layers"] = mtp;
    notes.push_back(mtp > 0 ? "training: one multi-token-prediction module (Megatron-Bridge's DeepSeek-V3 recipes: mtp_num_layers 1)"
                            : "training: no multi-token-prediction module (the row is marked w/o MTP)");
    const std::string last = std::string(static_cast<size_t>(mtp), 'm') + "L";
    const int64_t vpp = parallel.value("vpp", int64_t{1});
    std::string layout;
    if (pp == 4 && vpp == 1) layout = "Et*16|t*16|t*16|t*13" + last;
    if ((pp == 8 && vpp == 1) || (pp == 4 && vpp == 2)) layout = "Et*8|(t*8|)*6t*5" + last;
    if (pp * vpp == 16 && pp >= 2) layout = "Et*4|(t*4|)*14t" + last;
    if (pp == 8 && vpp == 4) layout = "Et|(tt|)*30" + last;
    if (!layout.empty() && L == 61) {
      parallel["pipeline_layout"] = layout;
      notes.push_back("parallel: Megatron-Bridge's DeepSeek-V3 pipeline layout for pp " + std::to_string(pp) + " x vpp " + std::to_string(vpp) +
                      ": \"" + layout + "\"");
    }
  }
  if (pp > 1 && L % vstages != 0 && fam != Family::kBloom && !parallel.contains("pipeline_layout")) {
    int64_t first = 0, last = 0;
    if (nemo && !config::slot_stage_layers(L, vstages, true, true).empty()) {
      // Megatron-Bridge's recipes for layer counts that do not divide (Llama 3.1 405B's 126,
      // Qwen3 235B's 94) count the embedding and the loss as pipeline layer slots.
      parallel["account_for_embedding_in_pipeline_split"] = true;
      parallel["account_for_loss_in_pipeline_split"] = true;
      notes.push_back("parallel: the embedding and the loss each count as a layer slot in the pipeline split "
                      "(Megatron-Bridge recipes' account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split)");
    } else if (!torchtitan && vstages == pp && config::megatron_end_stages(L, pp, first, last)) {
      // Megatron: shorter first and last stages take the remainder.
      parallel["first_stage_layers"] = first;
      parallel["last_stage_layers"] = last;
      notes.push_back("parallel: uneven split, first/last stages take the remainder");
    } else if (L >= vstages) {
      // torchtitan's automatic split points (generate_split_points); for other frameworks the
      // same balanced split over every virtual stage, the first and last shortest.
      const Json list = config::balanced_stage_layers(L, vstages);
      parallel["stage_layers"] = list;
      notes.push_back(std::string(torchtitan ? "parallel: torchtitan's automatic split points over " : "parallel: uneven split (not stated), balanced over ") +
                      std::to_string(vstages) + " virtual stages: " + list.dump() + " layers");
    }
  }
  parallel["recompute"] = recompute_of(r);
  // A stated layer count ("recompute_num_layers=5", "full, 5 layers"): Megatron's block method,
  // the first N layers of each virtual stage.
  if (recompute_of(r) == "full") {
    static const std::regex count(R"((?:num_layers\s*=?\s*(\d+))|(?:(\d+)\s*(?:of\s*\d+\s*)?layers))");
    std::smatch mt;
    const std::string text = lower(str(r, "recompute"));
    if (std::regex_search(text, mt, count)) {
      const std::string n = mt[1].matched ? mt[1].str() : mt[2].str();
      parallel["recompute_layers"] = std::stoll(n);
      notes.push_back("parallel: full recompute of the first " + n + " layers of each virtual stage (the row says so)");
    }
  }
  // The 26.04 H100 recipes (Megatron-Bridge scripts/performance/configs) set what their tables
  // do not state.
  const bool recipe_2604_h100 = contains(fw, "26.04") && contains(lower(str(r, "gpu_type")), "h100");
  if (!has(r, "recompute") && fam == Family::kGptOss && recipe_2604_h100) {
    // The 26.04 GPT-OSS 120B recipe for H100 recomputes the MoE layers' norm and expert
    // activation (recompute_modules = layernorm, moe_act).
    parallel["recompute"] = "selective";
    parallel["recompute_modules"] = Json::array({"layernorm", "moe_act"});
    notes.push_back("parallel: selective recompute of the layer norms and the experts' activation (recompute_modules layernorm, moe_act, as the 26.04 H100 recipe sets)");
  }
  if (!has(r, "recompute") && has(r, "tflops_per_gpu") &&
      (contains(lower(str(r, "source")), "2104.04473") || contains(lower(str(r, "tflops_definition")), "paper formula") ||
       contains(lower(str(r, "tflops_definition")), "incl. recompute"))) {
    // The throughput is quoted in Megatron's formula FLOPs, which count activation
    // recomputation: the runs recomputed activations.
    parallel["recompute"] = "full";
    notes.push_back("parallel: full activation recomputation (the quoted TFLOP/s use Megatron's formula, which counts it)");
  }
  if (deepspeed && stated_zero >= 3) {
    // The Megatron-LM 2021 ZeRO-3 rows move 21-24 GB/s per GPU of the full parameter volume
    // (gather, re-gather for the recomputed forward, gather, reduce-scatter) at every GPU count
    // from 768 up, one HDR NIC's rate, with time flat in the GPU count.
    parallel["zero3_flat_collectives"] = true;
    notes.push_back("parallel: DeepSpeed ZeRO-3 gathers and reduce-scatters parameter by parameter as flat rings, each GPU's NIC carrying the gathered volume (the rows' step time is flat in the GPU count at one NIC's rate)");
    if (parallel.value("recompute", std::string("none")) == "full") {
      parallel["zero3_recompute_regather"] = true;
      notes.push_back("parallel: DeepSpeed ZeRO-3 releases parameters after each module's forward, so the recomputed forward gathers them again");
    }
  }
  if (torchtitan && cp > 1) {
    parallel["cp_comm"] = "rotate-allgather";
    notes.push_back("parallel: PyTorch context_parallel with its default all-gather rotation: the K/V all-gather hides only behind the first "
                    "block, per-block merges run in fp32, dK/dV accumulate in fp32 around the ring");
  }
  if (torchtitan && parallel.value("recompute", std::string("none")) == "full" && (tt_compiled || precision_of(r) != "fp8")) {
    // torchtitan's full AC wraps each block in checkpoint_wrapper (NO_REENTRANT): torch.utils.
    // checkpoint without re-entry stops recomputing at the last saved tensor (early stop, on by
    // default in the PyTorch 2.x these runs used), and a compiled block's partitioner recomputes
    // only what the backward reads. An eager float8 linear is a custom autograd Function whose
    // saved tensors are packed after its matmul has run, so an eager float8 run recomputes the
    // down projection too. (llm-foundry's 2023 tables ran PyTorch 1.13, its benchmark image,
    // whose non-reentrant checkpoint re-ran the whole block.)
    parallel["recompute_stops_early"] = true;
    notes.push_back("parallel: torchtitan's full AC (non-reentrant checkpoint, or torch.compile's partitioner) stops the recomputed "
                    "forward before each layer's MLP down projection");
  }
  if (torchtitan && recompute_of(r) == "selective") {
    parallel["recompute"] = "selective-op";
    notes.push_back("parallel: torchtitan's selective AC is op-level (selective_ac_option = 'op')");
  }
  if (torchtitan && pp > 1) {
    parallel["keep_stage_outputs"] = true;
    notes.push_back("parallel: torch.distributed.pipelining keeps each in-flight micro-batch's stage output until its backward");
    // PipelineStage.forward_one_chunk appends every output to output_chunks, which step()
    // merges and returns and the next step clears; from PyTorch 2.8 (pytorch/pytorch PR 153383)
    // only the last stage keeps them. These runs used a December 2024 nightly.
    parallel["keep_step_outputs"] = "all-stages";
    notes.push_back("parallel: torch.distributed.pipelining (2024) keeps every micro-batch's stage output, the last stage's 16-bit logits included, "
                    "until the step ends, for step() to return (PipelineStage.output_chunks; only the last stage from PyTorch 2.8)");
    parallel["recv_buffer_per_microbatch"] = true;
    notes.push_back("parallel: torch.distributed.pipelining allocates a receive buffer per micro-batch for stage inputs and output gradients (PipelineStage _prepare_forward_infra / _setup_backward_recv_info)");
    if (parallel.contains("fsdp")) {
      parallel["reshard_after_forward"] = false;
      notes.push_back("parallel: FSDP does not reshard after forward under pipeline parallelism (torchtitan)");
    }
  }
  const bool moe_model = model.is_string() ? model::zoo_model(model.get<std::string>()).moe.enabled()
                                            : (model.contains("num_local_experts") || model.contains("n_routed_experts") || model.contains("num_experts"));
  const bool bridge = contains(fw, "megatron-bridge");
  if (moe_model && bridge) {
    // Megatron-Bridge benchmarks force balanced routing (random router logits: per-expert
    // counts within a few percent of the mean at these token counts).
    // The DeepSeek-V3 recipes use the flex dispatcher (DeepEP / HybridEP), which sends a token
    // once per destination node, and so does the 26.04 Qwen3-30B-A3B recipe for H100 (expert
    // parallelism 16 over two nodes, HybridEP); the other recipes the all-to-all dispatcher.
    // Token-drop runs use the all-to-all dispatcher whatever the model: Megatron-Bridge's token
    // drop (apply_moe_token_drop) requires it, and Megatron-Core refuses padding to capacity with
    // the flex dispatcher.
    const std::string model_name = lower(str(r, "model"));
    const bool tokendrop = contains(model_name, "tokendrop");
    const bool qwen3_30b_2604 = fam == Family::kQwenMoe && contains(model_name, "30b") && recipe_2604_h100;
    const bool flex = !tokendrop && (fam == Family::kDeepSeek || qwen3_30b_2604);
    const std::string dispatcher = !flex ? "all-to-all dispatcher"
                                   : qwen3_30b_2604 ? "flex dispatcher (HybridEP, as the 26.04 H100 recipe sets)"
                                                    : "flex dispatcher (DeepEP / HybridEP, as the DeepSeek-V3 recipes set)";
    Json moe = {{"dispatcher", flex ? "flex" : "alltoall"}, {"imbalance", 1.0}};
    if (tokendrop) {
      moe["capacity_factor"] = 1.0;
      moe["pad_to_capacity"] = true;
      notes.push_back("moe: balanced routing (forced by the benchmark), token drop at capacity factor 1.0 padded to capacity, " + dispatcher);
    } else {
      notes.push_back("moe: balanced routing (forced by the benchmark), dropless, " + dispatcher);
    }
    parallel["moe"] = moe;
  } else if (moe_model && torchtitan) {
    // torchtitan runs every local expert in one torch._grouped_mm call: no per-expert host work.
    parallel["moe"] = Json{{"dispatcher", "alltoall"}, {"imbalance", 1.0}, {"expert_overhead", 0}};
    notes.push_back("moe: routing not stated: balanced (load-balancing loss), dropless, all-to-all dispatcher; experts in one grouped GEMM call (torch._grouped_mm), no per-expert host time");
  } else if (moe_model) {
    parallel["moe"] = Json{{"dispatcher", "alltoall"}, {"imbalance", 1.0}};
    notes.push_back("moe: routing not stated: balanced (load-balancing loss), dropless, all-to-all dispatcher (Megatron-Core defaults)");
  }

  Json measured = Json::object();
  if (has(r, "memory_gib_per_gpu")) measured["memory_gib_per_gpu"] = num(r, "memory_gib_per_gpu");

  run = {{"name", id},
         {"model", model},
         {"hardware", hw},
         {"cluster", {{"num_gpus", gpus}, {"gpus_per_node", gpus_per_nvlink_domain(r, hw, gpus, notes)}}},
         {"training", training},
         {"parallel", parallel},
         {"assumptions", notes},
         {"measured", measured}};
  return true;
}

namespace {

std::string layout_string(const config::RunConfig& rc) {
  const auto& p = rc.parallel;
  std::ostringstream o;
  o << "tp" << p.tp << " pp" << p.pp << " dp" << p.dp;
  if (p.cp > 1) o << " cp" << p.cp;
  if (p.ep > 1) o << " ep" << p.ep;
  if (p.vpp > 1) o << " v" << p.vpp;
  o << " mb" << p.micro_batch_size;
  if (p.fsdp) o << " fsdp";
  else if (p.zero_stage > 0) o << " z" << p.zero_stage;
  if (p.dp_replicate > 1) o << "x" << p.dp_replicate;  // hybrid sharding's replicas
  if (p.recompute != config::Recompute::kNone) o << " rc-" << config::recompute_label(p);
  return o.str();
}

// What a row's TFLOP/s (or MFU) count: stepcast's model FLOPs (no recomputation, causal
// attention); the Megatron paper's Eq. 3, which counts a recomputed forward; or what
// Megatron-LM's training loop logs since Megatron-Core (num_floating_point_operations: three
// passes, no recomputation, but the whole s x s attention, unmasked). By the row's stated
// definition ("num_floating_point_operations" or Megatron-LM's logged throughput; "Eq. 3",
// "recompute", "hardware", "HFU" or "paper formula"; "model"); a row that states none is read
// by its framework: Megatron-LM from 2023 (Megatron-Core) its logged FLOPs, earlier Megatron-LM
// and DeepSpeed rows Eq. 3, the rest model FLOPs.
enum class FlopsDefinition { kModel, kEq3, kMegatronLogged };

FlopsDefinition flops_definition(const Json& r) {
  const std::string d = lower(str(r, "tflops_definition"));
  if (contains(d, "num_floating_point_operations") || contains(d, "megatron-lm log") || contains(d, "megatron-core log")) {
    return FlopsDefinition::kMegatronLogged;
  }
  if (!d.empty()) {
    const bool eq3 = contains(d, "eq.3") || contains(d, "eq. 3") || contains(d, "recompute") || contains(d, "hardware") ||
                     contains(d, "paper formula") || contains(d, "megatron formula") || contains(d, "hfu");
    return !eq3 && contains(d, "model") ? FlopsDefinition::kModel : FlopsDefinition::kEq3;
  }
  const std::string fw = lower(str(r, "framework"));
  const bool megatron_lm = contains(fw, "megatron-lm") && !contains(fw, "deepspeed");
  if (megatron_lm && row_year(r) >= 2023) return FlopsDefinition::kMegatronLogged;
  return megatron_lm || contains(fw, "deepspeed") ? FlopsDefinition::kEq3 : FlopsDefinition::kModel;
}

// Megatron-LM's num_floating_point_operations for a transformer of attention layers (dense or
// MoE MLPs): per token 12 h^2 (1 + g/a + s/h) q/h per attention layer (Q, K, V and output
// projections and the unmasked s x s scores, x3 for forward and backward), 12 h f per MLP
// layer (x3/2 gated; an MoE layer's f is top-k x the expert width plus the shared experts') and
// 6 h V for the logits (padded vocabulary). Nullopt for the layer kinds it is not written for
// here (multi-head latent attention, Mamba, linear attention).
std::optional<double> megatron_logged_flops(const config::RunConfig& rc) {
  const auto& m = rc.model;
  if (m.mla.enabled() || m.hybrid()) return std::nullopt;
  const double h = static_cast<double>(m.hidden), s = static_cast<double>(rc.training.seq_len);
  const double q = static_cast<double>(m.heads * m.head_dim) / h;
  const double gated = m.mlp == model::MlpKind::kGated ? 1.5 : 1.0;
  double per_token = 6.0 * h * static_cast<double>(rc.padded_vocab > 0 ? rc.padded_vocab : m.vocab);
  for (int64_t l = 0; l < m.num_layers; ++l) {
    const model::LayerKind k = m.layer_kind(l);
    if (k.mixer != model::Mixer::kAttention) return std::nullopt;
    per_token += 12.0 * h * h * q * (1.0 + static_cast<double>(m.kv_heads) / static_cast<double>(m.heads) + s / h);
    double f = 0;
    if (k.moe()) {
      f = static_cast<double>(m.moe.top_k * m.moe.expert_ffn + m.moe.shared_experts * m.moe.shared_expert_ffn);
    } else if (k.ffn != model::Ffn::kNone) {
      f = static_cast<double>(m.ffn_hidden);
    }
    per_token += 12.0 * h * f * gated;
  }
  return per_token * static_cast<double>(rc.tokens_per_step());
}

double measured_step(const Json& r, const config::RunConfig& rc, std::string& from) {
  if (has(r, "iteration_time_s")) {
    from = "iteration_time_s";
    return num(r, "iteration_time_s");
  }
  if (has(r, "tokens_per_s_per_gpu")) {
    from = "tokens_per_s_per_gpu";
    return static_cast<double>(rc.tokens_per_step()) / (num(r, "tokens_per_s_per_gpu") * static_cast<double>(rc.cluster.num_gpus));
  }
  if (has(r, "tokens_per_s_total")) {
    from = "tokens_per_s_total";
    return static_cast<double>(rc.tokens_per_step()) / num(r, "tokens_per_s_total");
  }
  const double gpus = static_cast<double>(rc.cluster.num_gpus);
  const FlopsDefinition def = flops_definition(r);
  const std::optional<double> logged = def == FlopsDefinition::kMegatronLogged ? megatron_logged_flops(rc) : std::nullopt;
  // The FLOPs without recomputation the row counts (Megatron-LM's logged ones where it can be
  // computed, else stepcast's model FLOPs).
  const double counted = logged.value_or(estimate::model_flops_per_step(rc));
  const std::string counted_name = logged ? "Megatron-LM's logged FLOPs" : "stepcast's model FLOPs";
  if (!has(r, "tflops_per_gpu") && has(r, "mfu")) {
    // MFU alone: the step that gives it with stepcast's model FLOPs (6 x parameters x tokens
    // plus the attention term), or Megatron-LM's logged FLOPs for the rows that count those,
    // and the row's peak, or, where the row states none, the profile's dense peak of the
    // training precision (stepcast's own MFU, and the convention of the recipes that state
    // theirs: NeMo's 989 / 1,979 TFLOP/s for BF16 / FP8 on H100).
    const bool stated = has(r, "mfu_peak_tflops_per_gpu");
    from = "mfu (" + counted_name + (stated ? ", the row's peak)" : ", the profile's dense peak of the precision)");
    const double peak = stated ? num(r, "mfu_peak_tflops_per_gpu") * 1e12 : rc.hardware.peak_for(rc.training.precision).value();
    return counted / (num(r, "mfu") * peak * gpus);
  }
  if (has(r, "tflops_per_gpu") && def != FlopsDefinition::kEq3) {
    // Model TFLOP/s (Megatron-Bridge's and most recipes' logs) or Megatron-LM's logged ones:
    // the FLOPs without recomputation.
    from = "tflops_per_gpu (" + counted_name + ")";
    return counted / (num(r, "tflops_per_gpu") * 1e12 * gpus);
  }
  if (has(r, "tflops_per_gpu")) {
    from = "tflops_per_gpu (Megatron Eq. 3)";
    const double f = megatron_eq3_flops(static_cast<double>(rc.training.global_batch_size),
                                        static_cast<double>(rc.training.seq_len),
                                        static_cast<double>(rc.model.num_layers), static_cast<double>(rc.model.hidden),
                                        static_cast<double>(rc.model.vocab));
    return f / (num(r, "tflops_per_gpu") * 1e12 * static_cast<double>(rc.cluster.num_gpus));
  }
  return 0;
}

std::string short_source(const std::string& s) {
  if (contains(s, "Megatron-LM GitHub README (Sept 2020)")) return "Megatron-LM 2020 README";
  if (contains(s, "Megatron-LM GitHub README (Jan 2021)")) return "Megatron-LM 2021 README";
  if (contains(s, "Narayanan") && contains(s, "Table 2")) return "Megatron-LM 2021 paper, Table 2 (transcribed)";
  if (contains(s, "Narayanan")) return "Megatron-LM 2021 paper, Table 1";
  if (contains(s, "DGX Cloud") && contains(s, "v24.11")) return "NVIDIA DGX Cloud recipes 24.11";
  if (contains(s, "DGX Cloud")) {
    // Other releases: the container the source names ("..., NeMo 24.09 container (...)").
    const size_t at = s.find("recipes, ");
    const std::string what = at == std::string::npos ? "" : s.substr(at + 9, s.find_first_of("(", at) - at - 9);
    std::string label = "NVIDIA DGX Cloud recipes" + (what.empty() ? "" : ", " + what);
    while (!label.empty() && label.back() == ' ') label.pop_back();
    return label;
  }
  if (contains(s, "Megatron-Bridge")) return "NVIDIA Megatron-Bridge";
  if (contains(s, "trainy")) return "torchtitan (Trainy H200)";
  if (contains(s, "torchtitan")) return "torchtitan (PyTorch team)";
  if (contains(s, "MosaicML")) return "MosaicML llm-foundry";
  if (contains(s, "BigScience")) return "BigScience BLOOM";
  // Other sources: up to the first comma or parenthesis (the name, not the reference).
  const size_t cut = s.find_first_of(",(");
  std::string head = cut == std::string::npos || cut == 0 ? s : s.substr(0, cut);
  while (!head.empty() && head.back() == ' ') head.pop_back();
  return head;
}

}  // namespace

namespace {

// Layout keys the planner chooses; the rest of a published run's parallel block describes the
// framework (pipeline buffers, DTensor behaviour, MoE routing) and stays fixed.
const char* const kLayoutKeys[] = {"tp", "pp", "dp", "cp", "ep", "etp", "vpp", "sp", "micro_batch_size", "zero_stage",
                                   "fsdp", "recompute", "recompute_layers", "recompute_modules", "schedule", "first_stage_layers",
                                   "last_stage_layers", "stage_layers", "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split", "pipeline_layout",
                                   "reshard_after_forward", "cp_comm", "dp_replicate"};

void compare_with_planner(AccuracyResult& res, const std::function<void(const char*, size_t, size_t)>& progress) {
  std::map<std::string, std::vector<const RowResult*>> groups;
  for (const auto& r : res.rows) {
    Json key = r.run;
    for (const char* k : kLayoutKeys) key["parallel"].erase(k);
    key.erase("name");
    key.erase("assumptions");
    key.erase("measured");
    if (key["model"].is_object()) key["model"].erase("source");
    groups[key.dump()].push_back(&r);
  }
  plan::PlanOptions opt;
  opt.top_k = 3;
  opt.keep = 1;  // only the best layout is compared
  size_t done = 0;
  for (const auto& [key, rows] : groups) {
    if (progress) progress("planning", ++done, groups.size());
    PlanComparison pc;
    const RowResult& first = *rows.front();
    for (const auto* r : rows) pc.ids.push_back(r->id);
    pc.model = first.model;
    pc.hardware = first.hardware;
    pc.num_gpus = first.num_gpus;
    // Theirs: the fastest simulated published layout of the group.
    const RowResult* best = rows.front();
    for (const auto* r : rows) {
      if (r->simulated_s < best->simulated_s) best = r;
    }
    pc.theirs = best->layout;
    pc.theirs_s = best->simulated_s;
    Json run = Json::parse(key);
    try {
      const auto pr = plan::plan(run, "published:" + first.id, "", opt);
      if (pr.ranked.empty()) {
        pc.note = "the planner finds no layout that fits";
      } else {
        const auto& ours = pr.ranked.front();
        pc.ours = plan::layout_text(ours.rc.parallel);
        pc.ours_s = ours.step_s();
        plan::Candidate theirs;
        theirs.rc = config::parse_run(best->run, "published:" + best->id, "");
        const auto sim = engine::simulate_step(theirs.rc);
        theirs.simulated = true;
        theirs.sim_step_s = sim.step.step_time_s;
        theirs.sim_breakdown = sim.step.breakdown;
        theirs.est = estimate::estimate_step(theirs.rc);
        if (pc.ours_s < pc.theirs_s * 0.995) {
          pc.why = plan::layout_diff(ours.rc.parallel, theirs.rc.parallel) + ". " + plan::compare_text(ours, theirs);
        } else if (pc.ours_s > pc.theirs_s * 1.005) {
          pc.why = "the published layout is outside the search (" + plan::layout_diff(theirs.rc.parallel, ours.rc.parallel) + ")";
        }
      }
    } catch (const core::UserError& e) {
      pc.note = std::string("planner: ") + e.what();
    }
    res.plans.push_back(pc);
  }
}

}  // namespace

namespace {

// Whether the profile's sources name the row: its id, or a "prefix-*" pattern it matches.
bool cited_by(const Json& profile, const std::string& id) {
  if (!profile.contains("sources")) return false;
  for (const auto& src : profile["sources"]) {
    if (!src.is_string()) continue;
    const std::string t = src.get<std::string>();
    if (t.find(id) != std::string::npos) return true;
    for (size_t star = t.find('*'); star != std::string::npos; star = t.find('*', star + 1)) {
      size_t b = star;
      while (b > 0 && t[b - 1] != ' ' && t[b - 1] != '(' && t[b - 1] != ',') --b;
      const std::string prefix = t.substr(b, star - b);
      if (!prefix.empty() && id.rfind(prefix, 0) == 0) return true;
    }
  }
  return false;
}

// "8x 50 GB/s EFA v4 per node", "4x HDR 200 Gb/s IB per node": NICs per node and each one's
// bandwidth in bits per second; false when the text does not say.
bool parse_nics(const std::string& text, int64_t& nics, double& bits_per_s) {
  static const std::regex re(R"((\d+)\s*x\s*(?:[A-Za-z]+\s+)?(\d+(?:\.\d+)?)\s*(Gb/s|GB/s))");
  std::smatch m;
  if (!std::regex_search(text, m, re)) return false;
  nics = std::stoll(m[1].str());
  bits_per_s = std::stod(m[2].str()) * 1e9 * (m[3].str() == "GB/s" ? 8.0 : 1.0);
  return nics > 0 && bits_per_s > 0;
}

// A profile name becomes an override object on that profile, so single fields can be set.
void as_override(Json& hw_json) {
  if (hw_json.is_string()) hw_json = Json{{"base", hw_json.get<std::string>()}};
}

// The hardware JSON (profile name or override object) as a profile; nullopt with the first
// problem as the reason.
std::optional<hw::HardwareProfile> profile_of(const Json& hw_json, std::string& reason) {
  core::Issues issues;
  auto hw = hw::parse_hardware(hw_json, "$.hardware", issues);
  if (!issues.empty()) {
    reason = "hardware: " + issues.lines().front();
    return std::nullopt;
  }
  return hw;
}

}  // namespace

bool predict_measurement(const Json& r, MeasurementResult& out, std::string& reason) {
  const std::string type = str(r, "row_type");
  out.id = str(r, "id");
  out.source = short_source(str(r, "source"));
  out.kind = type;
  reason = non_positive_field(r, {"num_gpus", "num_ranks", "num_nodes", "gpus_per_node", "message_bytes", "time_us", "busbw_gbps", "algbw_gbps", "gemm_m",
                                  "gemm_n", "gemm_k", "achieved_tflops", "peak_tflops", "efficiency", "hw_bf16_dense_tflops",
                                  "hw_fp8_dense_tflops", "hw_hbm_gb", "hw_hbm_tbps", "hw_nvlink_unidir_gbps", "hw_nvlink_bidir_gbps",
                                  "hw_nic_gbit_per_gpu", "hw_tdp_w"});
  if (!reason.empty()) return false;
  // A message or GEMM operand beyond a TiB fits no GPU: a typo, not a measurement.
  constexpr double kTiB = 1099511627776.0;
  const double m = num(r, "gemm_m", 1), n = num(r, "gemm_n", 1), k = num(r, "gemm_k", 1);
  if (num(r, "message_bytes") > kTiB || std::max({m * k, k * n, m * n}) > kTiB) {
    reason = "sizes out of range: a message or GEMM operand larger than any GPU's memory";
    return false;
  }
  Json hw_json;
  if (!hardware_for(r, hw_json, out.notes, reason, /*gpu_only=*/type == "gemm")) return false;
  // The profile whose sources say what went into it: a built-in, or the built-in an override
  // is based on.
  Json resolved = hw_json.is_string()                                      ? hw::builtin_hardware_json(hw_json.get<std::string>())
                  : hw_json.contains("base") && hw_json["base"].is_string() ? hw::builtin_hardware_json(hw_json["base"].get<std::string>())
                                                                            : hw_json;
  if (type == "collective") {
    const auto c = cost::collective_from_name(str(r, "collective"));
    if (!c) {
      reason = str(r, "collective").empty() ? "field 'collective' not stated" : "collective '" + str(r, "collective") + "' is not one stepcast models";
      return false;
    }
    const int64_t n = inum(r, "num_ranks") > 0 ? inum(r, "num_ranks") : inum(r, "num_gpus");
    const int64_t nodes = std::max<int64_t>(1, inum(r, "num_nodes"));
    const double bytes = num(r, "message_bytes");
    if (n < 2 || bytes <= 0) {
      reason = "no message size or rank count (a statement of peak bandwidth, not a measurement at a size)";
      return false;
    }
    if (n % nodes != 0) {
      reason = "ranks do not split evenly over the nodes";
      return false;
    }
    // The row's own scale-out network where it names one (cloud nodes differ from DGX).
    int64_t nics = 0;
    double bits = 0;
    if (nodes > 1 && parse_nics(str(r, "inter_node_link"), nics, bits)) {
      Json net = hw::builtin_hardware_json(hw_json.is_string() ? hw_json.get<std::string>() : hw_json.value("base", std::string()))["network"];
      net["nics_per_node"] = nics;
      net["nic_bandwidth"] = core::fmt("%.0f", bits / 1e9) + "Gb/s";
      net["name"] = str(r, "inter_node_link");
      as_override(hw_json);
      hw_json["network"] = net;
      out.notes.push_back("network: " + std::to_string(nics) + " NICs per node at " + core::fmt("%.0f", bits / 1e9) + " Gb/s (the row's " +
                          str(r, "inter_node_link") + ")");
    }
    const auto profile = profile_of(hw_json, reason);
    if (!profile) return false;
    const auto& hw = *profile;
    out.hardware = hw.name;
    const int64_t per_node = n / nodes;
    const mesh::Placement where{n, nodes, per_node, 0, static_cast<int>(per_node - 1)};
    const core::Bytes b(bytes);
    if (has(r, "time_us")) {
      out.measured_s = num(r, "time_us") * 1e-6;
      out.measured_from = "time_us";
    } else if (has(r, "algbw_gbps")) {
      out.measured_s = bytes / (num(r, "algbw_gbps") * 1e9);
      out.measured_from = "algbw_gbps";
    } else if (has(r, "busbw_gbps")) {
      const double bf = *c == cost::Collective::kSendRecv || *c == cost::Collective::kBroadcast ? 1.0 : cost::bus_factor(*c, n);
      out.measured_s = bytes * bf / (num(r, "busbw_gbps") * 1e9);
      out.measured_from = "busbw_gbps";
    } else {
      reason = "no measured time or bandwidth";
      return false;
    }
    const std::string algo = lower(str(r, "algorithm"));
    if (*c == cost::Collective::kAllReduce && nodes == 1 && contains(algo, "ring") && contains(algo, "nvls_enable=0")) {
      // NVLink SHARP switched off: the ring all-reduce, a reduce-scatter then an all-gather.
      out.predicted_s = (cost::collective_time(cost::Collective::kReduceScatter, b, where, hw) +
                         cost::collective_time(cost::Collective::kAllGather, b, where, hw)).value();
      out.notes.push_back("algorithm: ring forced (NVLS off): a reduce-scatter then an all-gather on the NVLink fabric");
    } else {
      out.predicted_s = cost::collective_time(*c, b, where, hw).value();
    }
    out.what = std::string(cost::to_string(*c)) + ", " + std::to_string(n) + " ranks on " + std::to_string(nodes) + (nodes == 1 ? " node, " : " nodes, ") +
               core::fmt("%.0f", bytes) + " B";
  } else if (type == "gemm") {
    // Framework spellings: torch.bfloat16, half, float8_e4m3fn, float (fp32) ...
    std::string d = lower(str(r, "dtype"));
    if (d.rfind("torch.", 0) == 0) d.erase(0, 6);
    hw::Dtype dtype;
    if (d == "bf16" || d == "bfloat16") {
      dtype = hw::Dtype::kBf16;
    } else if (d == "fp16" || d == "float16" || d == "half") {
      dtype = hw::Dtype::kFp16;
    } else if (contains(d, "fp8") || contains(d, "float8") || contains(d, "e4m3")) {
      dtype = hw::Dtype::kFp8;
    } else if (d == "tf32") {
      dtype = hw::Dtype::kTf32;
    } else if (d == "fp32" || d == "float32" || d == "float") {
      dtype = hw::Dtype::kFp32;
    } else {
      reason = str(r, "dtype").empty() ? "field 'dtype' not stated" : "GEMM dtype '" + str(r, "dtype") + "' is not one stepcast models";
      return false;
    }
    const double m = num(r, "gemm_m"), n = num(r, "gemm_n"), k = num(r, "gemm_k"), tflops = num(r, "achieved_tflops");
    if (m <= 0 || n <= 0 || k <= 0 || tflops <= 0) {
      reason = "no GEMM shape or achieved rate";
      return false;
    }
    // A matmul benchmark times short bursts, which run at boost clock; the profile's
    // sustained_clock is what a long training step settles at under its power limit.
    as_override(hw_json);
    hw_json["efficiency"]["sustained_clock"] = 1.0;
    out.notes.push_back("clock: boost (sustained_clock 1), as a short matmul benchmark runs");
    const auto profile = profile_of(hw_json, reason);
    if (!profile) return false;
    const auto& hw = *profile;
    if (!hw.has_dtype(dtype)) {
      reason = "profile " + hw.name + " has no " + hw::to_string(dtype) + " peak";
      return false;
    }
    out.hardware = hw.name;
    const cost::GemmShape g{m, n, k, 1.0};
    out.measured_s = 2.0 * m * n * k / (tflops * 1e12);
    out.measured_from = "achieved_tflops";
    out.predicted_s = cost::gemm_time(g, dtype, hw).value();
    out.what = hw::to_string(dtype) + " " + core::fmt("%.0f", m) + "x" + core::fmt("%.0f", n) + "x" + core::fmt("%.0f", k);
    out.notes.push_back("the best shape of a brute-force search (a ceiling), timed at boost clock over 100 iterations");
  } else {
    reason = "row type '" + type + "' is not a measurement stepcast predicts";
    return false;
  }
  out.cited = cited_by(resolved, out.id);
  out.error = (out.predicted_s - out.measured_s) / out.measured_s;
  if (!std::isfinite(out.error)) {
    reason = "sizes out of range: the measured or predicted time is not a finite number";
    return false;
  }
  return true;
}

bool check_datasheet(const Json& r, DatasheetCheck& d, std::string& reason) {
  Json hw_json;
  std::vector<std::string> notes;
  if (!hardware_for(r, hw_json, notes, reason)) return false;
  const auto profile = profile_of(hw_json, reason);
  if (!profile) return false;
  const auto& hw = *profile;
  d = DatasheetCheck{str(r, "id"), hw.name, {}};
  auto add = [&](const char* key, const char* name, const char* unit, double profile) {
    if (has(r, key)) d.fields.push_back({name, unit, num(r, key), profile});
  };
  auto peak = [&](hw::Dtype dt) { return hw.has_dtype(dt) ? hw.peak_for(dt).value() / 1e12 : 0.0; };
  add("hw_bf16_dense_tflops", "bf16 dense peak", "TFLOP/s", peak(hw::Dtype::kBf16));
  add("hw_fp8_dense_tflops", "fp8 dense peak", "TFLOP/s", peak(hw::Dtype::kFp8));
  add("hw_hbm_gb", "HBM", "GB; profile: usable GiB", hw.hbm_capacity.value() / 1073741824.0);
  add("hw_hbm_tbps", "HBM bandwidth", "TB/s", hw.hbm_bandwidth.value() / 1e12);
  add("hw_nic_gbit_per_gpu", "NIC per GPU", "Gb/s",
      hw.network.nic_bandwidth.value() * 8.0 / 1e9 * hw.network.nics_per_node / std::max(1, hw.gpus_per_node));
  return true;
}

namespace {

// One published row into res: a datasheet check, a measurement prediction, a predicted
// training run, or a skipped row with its reason.
void process_row(const Json& r, const AccuracyOptions& opts, AccuracyResult& res) {
  // A datasheet or measurement row: its result, or the reason it is skipped.
  auto keep = [&](auto& results, auto check) {
    typename std::decay_t<decltype(results)>::value_type out;
    std::string reason;
    if (check(r, out, reason)) {
      results.push_back(std::move(out));
    } else {
      res.skipped.push_back({str(r, "id"), reason});
    }
  };
  const std::string type = str(r, "row_type");
  if (type == "hardware") return keep(res.datasheets, check_datasheet);
  if (type == "collective" || type == "gemm") return keep(res.measurements, predict_measurement);
  const std::string id = str(r, "id");
  if (type != "training_run") {
    res.skipped.push_back({id, (type.empty() ? std::string("no row_type") : "row_type '" + type + "' is not one stepcast reads") +
                                   " (training_run, collective, gemm or hardware)"});
    return;
  }
  if (!has(r, "iteration_time_s") && !has(r, "tokens_per_s_per_gpu") && !has(r, "tokens_per_s_total") && !has(r, "tflops_per_gpu") && !has(r, "mfu")) {
    res.skipped.push_back({id, "no measured step time or throughput"});
    return;
  }
  Json run;
  std::string reason;
  RowGaps gaps;
  if (!row_to_run(r, run, reason, &gaps)) {
    res.skipped.push_back({id, reason});
    return;
  }
  config::RunConfig rc;
  try {
    rc = config::parse_run(run, "published:" + id, "");
    // The run trained, so it fit: when the stated layout does not fit and the row leaves them
    // unstated, the memory savers that cost (almost) no time come first, each only while it
    // still does not fit: sequence parallelism with TP (activations outside the GEMMs sharded
    // over TP; Korthikanti et al. 2022, so not for earlier rows), then the distributed
    // optimizer (ZeRO-1: optimizer state sharded over the data-parallel ranks). Recomputation,
    // which costs a third more forward work, is tried only after them (below).
    {
      const int64_t year = row_year(r);
      const auto& par = run["parallel"];
      const int64_t tp = par.value("tp", int64_t{1}), dp = par.value("dp", int64_t{1}), cp = par.value("cp", int64_t{1});
      struct Saver {
        bool open;
        const char* key;
        Json value;
        const char* what;
      };
      const Saver savers[] = {
          {tp > 1 && !has(r, "sp") && !par.contains("sp") && (year == 0 || year >= 2022), "sp", true, "sequence parallelism with TP"},
          {dp * cp > 1 && !has(r, "zero_stage") && !has(r, "fsdp") && !par.value("fsdp", false) && par.value("zero_stage", int64_t{0}) == 0,
           "zero_stage", 1, "distributed optimizer (ZeRO-1)"}};
      bool fits = memory::compute_ledger(rc).fits();
      for (const Saver& sv : savers) {
        if (fits) break;
        if (!sv.open) continue;
        run["parallel"][sv.key] = sv.value;
        run["assumptions"].push_back(std::string("parallel: ") + sv.what + " (not stated; the layout does not fit in memory without it)");
        rc = config::parse_run(run, "published:" + id, "");
        fits = memory::compute_ledger(rc).fits();
      }
    }
    // A benchmark table that does not state its micro-batch ran the one its authors found
    // fastest for the layout (Megatron-LM 2021, Sec. 4.2: the best micro-batch depends on the
    // model, p, d and B, and its tables are tuned): the power of two dividing the per-replica
    // batch that fits with the stated recomputation and gives the shortest estimated step.
    if (gaps.micro_batch_unstated) {
      auto& notes_json = run["assumptions"];
      const auto it = std::find(notes_json.begin(), notes_json.end(), kUnstatedMicroBatch);
      const int64_t local = rc.training.global_batch_size / std::max<int64_t>(1, rc.parallel.dp);
      double best = memory::compute_ledger(rc).fits() ? estimate::estimate_step(rc).step_time_s : 1e300;
      int64_t best_mbs = 1;
      for (int64_t b = 2; b <= std::min<int64_t>(local, 64); b *= 2) {
        if (local % b != 0) continue;
        Json trial = run;
        trial["parallel"]["micro_batch_size"] = b;
        try {
          config::RunConfig trc = config::parse_run(trial, "published:" + id, "");
          if (!memory::compute_ledger(trc).fits()) continue;
          const double t = estimate::estimate_step(trc).step_time_s;
          if (t < best) best = t, best_mbs = b;
        } catch (const core::UserError&) {
          continue;  // the schedule refuses this micro-batch count
        }
      }
      const std::string chosen = "parallel: micro-batch size " + std::to_string(best_mbs) +
          " (not stated; the power of two dividing the per-replica batch that fits and gives the shortest estimated step, as tuned benchmark tables ran)";
      if (it != notes_json.end()) {
        *it = chosen;
      } else {
        notes_json.push_back(chosen);
      }
      run["parallel"]["micro_batch_size"] = best_mbs;
      rc = config::parse_run(run, "published:" + id, "");
    }
    // The run trained, so it fit: when the row does not state recomputation and the stated
    // layout does not fit without it, take the lightest recompute that fits: selective, else
    // full recomputation of the fewest layers per virtual stage, else of every layer.
    if (!has(r, "recompute") && run["parallel"].value("recompute", "none") == "none" &&
        !memory::compute_ledger(rc).fits()) {
      for (const std::string mode : {"selective", "full"}) {
        Json trial = run;
        trial["parallel"]["recompute"] = mode;
        std::string what = mode;
        if (mode == "full") {
          if (const int64_t n = memory::fewest_recompute_layers(config::parse_run(trial, "published:" + id, "")); n > 0) {
            trial["parallel"]["recompute_layers"] = n;
            what = "full of the first " + std::to_string(n) + " layers of each virtual stage";
          }
        }
        trial["assumptions"].push_back("parallel: recompute " + what + " (not stated; the layout does not fit in memory with less)");
        config::RunConfig trc = config::parse_run(trial, "published:" + id, "");
        if (memory::compute_ledger(trc).fits() || mode == "full") {
          run = trial;
          rc = trc;
          break;
        }
      }
    }
  } catch (const core::UserError& e) {
    res.skipped.push_back({id, std::string("run file rejected: ") + e.what()});
    return;
  }
  if (!opts.runs_dir.empty()) {
    std::string fname = id;
    for (auto& ch : fname) {
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '.' && ch != '_') ch = '_';
    }
    std::ofstream out(opts.runs_dir + "/" + fname + ".json");
    out << run.dump(2) << "\n";
  }
  const auto e = estimate::estimate_step(rc);
  RowResult row;
  row.id = id;
  row.source = short_source(str(r, "source"));
  row.model = str(r, "model");
  row.hardware = rc.hardware.name;
  row.num_gpus = rc.cluster.num_gpus;
  row.layout = layout_string(rc);
  row.measured_s = measured_step(r, rc, row.measured_from);
  if (!(row.measured_s > 0 && std::isfinite(row.measured_s))) {
    res.skipped.push_back({id, "measured step out of range (" + std::to_string(row.measured_s) + " s from " + row.measured_from + ")"});
    return;
  }
  row.predicted_s = e.step_time_s;
  row.error = (row.predicted_s - row.measured_s) / row.measured_s;
  row.simulated_s = engine::simulate_step(rc).step.step_time_s;
  row.sim_error = (row.simulated_s - row.measured_s) / row.measured_s;
  row.fits = e.memory.fits();
  row.assumptions = rc.assumptions;
  row.run = run;
  if (has(r, "memory_gib_per_gpu")) {
    row.measured_mem_gib = num(r, "memory_gib_per_gpu");
    // What the row measured: the device's view of the process (nvidia-smi, NVML, rocm-smi:
    // CUDA context and NCCL buffers included) or the framework's allocator (torch.cuda's peak
    // reserved or allocated bytes: tensors only), which the ledger's runtime line is not part of.
    const std::string def = lower(str(r, "memory_definition"));
    const bool includes_runtime = contains(def, "nvidia-smi") || contains(def, "nvml") || contains(def, "rocm-smi");
    const double peak = e.memory.peak().value() - (includes_runtime ? 0.0 : e.memory.stages[static_cast<size_t>(e.memory.peak_stage)].runtime.value());
    row.predicted_mem_gib = peak / 1073741824.0;
    row.mem_error = (row.predicted_mem_gib - row.measured_mem_gib) / row.measured_mem_gib;
    row.memory_basis = includes_runtime               ? "nvidia-smi (includes CUDA context and NCCL buffers)"
                       : contains(def, "allocated") ? "allocator allocated peak (live tensors; excludes CUDA context and NCCL)"
                                                    : "allocator reserved peak (excludes CUDA context and NCCL)";
  }
  res.rows.push_back(row);
}

}  // namespace

AccuracyResult run_accuracy(const AccuracyOptions& opts) {
  std::error_code ec;
  if (std::filesystem::is_directory(opts.data_path, ec)) throw core::UserError(opts.data_path + ": is a directory; --data names a JSON-lines file");
  std::ifstream in(opts.data_path);
  if (!in) throw core::UserError(opts.data_path + ": cannot open published runs");
  AccuracyResult res;
  res.command = opts.command;
  res.data_label = opts.data_label;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(std::move(line));
  int64_t lineno = 0, rows_read = 0;
  if (!opts.runs_dir.empty()) {
    std::filesystem::create_directories(opts.runs_dir, ec);
    if (ec || !std::filesystem::is_directory(opts.runs_dir)) {
      throw core::UserError(opts.runs_dir + ": cannot create the directory for --emit-runs (" + ec.message() + ")");
    }
  }
  for (const std::string& line : lines) {
    ++lineno;
    if (opts.progress) opts.progress("predicting", static_cast<size_t>(lineno), lines.size());
    if (line.empty()) continue;
    const Json r = core::parse_json_text(line, opts.data_path + ":" + std::to_string(lineno));
    if (!r.is_object()) {
      throw core::UserError(opts.data_path + ":" + std::to_string(lineno) + ": expected one JSON object per line (a published row), got " + core::show(r));
    }
    ++rows_read;
    // A row with a field of an unexpected type (a number written as text, say) is listed with
    // the reason instead of ending the run.
    // A row without an id is named by its line, in every result it produces.
    Json row = r;
    if (str(row, "id").empty()) row["id"] = opts.data_path + ":" + std::to_string(lineno);
    try {
      process_row(row, opts, res);
    } catch (const std::exception& e) {
      res.skipped.push_back({str(row, "id"), std::string("row not understood: ") + e.what()});
    }
  }
  if (rows_read == 0) throw core::UserError(opts.data_path + ": no rows (expected one JSON object per line)");
  if (opts.compare_plans) compare_with_planner(res, opts.progress);
  return res;
}

Json AccuracyResult::to_json() const {
  Json rows_j = Json::array();
  for (const auto& r : rows) {
    Json j = {{"id", r.id}, {"source", r.source}, {"model", r.model}, {"hardware", r.hardware}, {"num_gpus", r.num_gpus},
              {"layout", r.layout}, {"measured_from", r.measured_from}, {"measured_step_s", r.measured_s},
              {"predicted_step_s", r.predicted_s}, {"error", r.error}, {"simulated_step_s", r.simulated_s},
              {"simulate_error", r.sim_error}, {"fits", r.fits}, {"assumptions", r.assumptions}};
    if (r.measured_mem_gib >= 0) {
      j["measured_memory_gib"] = r.measured_mem_gib;
      j["predicted_memory_gib"] = r.predicted_mem_gib;
      j["memory_error"] = r.mem_error;
    }
    rows_j.push_back(j);
  }
  Json sk = Json::array();
  for (const auto& s : skipped) sk.push_back({{"id", s.id}, {"reason", s.reason}});
  Json pl = Json::array();
  for (const auto& p : plans) {
    pl.push_back({{"rows", p.ids}, {"model", p.model}, {"hardware", p.hardware}, {"num_gpus", p.num_gpus},
                  {"published_layout", p.theirs}, {"published_simulated_s", p.theirs_s}, {"planner_layout", p.ours},
                  {"planner_simulated_s", p.ours_s}, {"why", p.why}, {"note", p.note}});
  }
  Json ms = Json::array();
  for (const auto& m : measurements) {
    ms.push_back({{"id", m.id}, {"source", m.source}, {"kind", m.kind}, {"what", m.what}, {"hardware", m.hardware},
                  {"measured_from", m.measured_from}, {"measured_s", m.measured_s}, {"predicted_s", m.predicted_s}, {"error", m.error},
                  {"cited_by_profile", m.cited}, {"notes", m.notes}});
  }
  Json ds = Json::array();
  for (const auto& d : datasheets) {
    Json fields = Json::array();
    for (const auto& f : d.fields) fields.push_back({{"name", f.name}, {"unit", f.unit}, {"datasheet", f.datasheet}, {"profile", f.profile}});
    ds.push_back({{"id", d.id}, {"hardware", d.hardware}, {"fields", fields}});
  }
  return {{"rows", rows_j}, {"measurements", ms}, {"datasheets", ds}, {"skipped", sk}, {"plans", pl}};
}

namespace {

struct SourceStats {
  double abs_sum = 0;
  int n = 0;
  double worst = 0;
  double sim_abs_sum = 0;
  double sim_worst = 0;
};

std::map<std::string, SourceStats> by_source(const std::vector<RowResult>& rows) {
  std::map<std::string, SourceStats> m;
  for (const auto& r : rows) {
    auto& s = m[r.source];
    s.abs_sum += std::fabs(r.error);
    s.n += 1;
    s.worst = std::max(s.worst, std::fabs(r.error));
    s.sim_abs_sum += std::fabs(r.sim_error);
    s.sim_worst = std::max(s.sim_worst, std::fabs(r.sim_error));
  }
  return m;
}

std::string pct(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", 100.0 * x);
  return buf;
}

}  // namespace

namespace {

// Error of one kind of measurement row (collective or gemm): all of them, and those the
// profiles' sources do not cite.
struct MeasurementStats {
  int n = 0, uncited = 0;
  double mape = 0, worst = 0, uncited_mape = 0;
};

MeasurementStats measurement_stats(const std::vector<MeasurementResult>& ms, const std::string& kind) {
  MeasurementStats st;
  for (const auto& m : ms) {
    if (m.kind != kind) continue;
    const double e = std::fabs(m.error);
    ++st.n;
    st.mape += e;
    st.worst = std::max(st.worst, e);
    if (!m.cited) ++st.uncited, st.uncited_mape += e;
  }
  if (st.n > 0) st.mape /= st.n;
  if (st.uncited > 0) st.uncited_mape /= st.uncited;
  return st;
}

}  // namespace

std::string AccuracyResult::summary() const {
  std::ostringstream o;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-58s %8s %10s %10s %8s\n", "row", "GPUs", "measured", "predicted", "error");
  o << buf;
  for (const auto& r : rows) {
    std::snprintf(buf, sizeof buf, "%-58s %8lld %9.3fs %9.3fs %8s\n", r.id.c_str(), static_cast<long long>(r.num_gpus),
                  r.measured_s, r.predicted_s, pct(r.error).c_str());
    o << buf;
  }
  double all = 0;
  for (const auto& r : rows) all += std::fabs(r.error);
  o << "\nmean absolute error by source:\n";
  for (const auto& [src, s] : by_source(rows)) {
    std::snprintf(buf, sizeof buf, "  %-48s %3d rows  MAPE %5.1f%%  worst %5.1f%%  simulate MAPE %5.1f%%\n", src.c_str(), s.n,
                  100.0 * s.abs_sum / s.n, 100.0 * s.worst, 100.0 * s.sim_abs_sum / s.n);
    o << buf;
  }
  std::snprintf(buf, sizeof buf, "  %-48s %3zu rows  MAPE %5.1f%%\n", "all", rows.size(), rows.empty() ? 0.0 : 100.0 * all / static_cast<double>(rows.size()));
  o << buf;
  for (const char* kind : {"collective", "gemm"}) {
    const MeasurementStats st = measurement_stats(measurements, kind);
    if (st.n == 0) continue;
    const std::string name = std::string(kind) + " measurements";
    if (st.uncited > 0) {
      std::snprintf(buf, sizeof buf, "  %-48s %3d rows  MAPE %5.1f%%  (%d not cited by the profiles: MAPE %5.1f%%)\n", name.c_str(), st.n,
                    100.0 * st.mape, st.uncited, 100.0 * st.uncited_mape);
    } else {
      std::snprintf(buf, sizeof buf, "  %-48s %3d rows  MAPE %5.1f%%  (all cited by the profiles)\n", name.c_str(), st.n, 100.0 * st.mape);
    }
    o << buf;
  }
  o << skipped.size() << " rows not predicted (reasons in the report)\n";
  return o.str();
}

std::string AccuracyResult::markdown() const {
  std::ostringstream o;
  o << "# stepcast accuracy against published training runs\n\n";
  o << "Generated by `" << command << "` from `" << data_label << "`. Each row is converted into an ordinary run file (with its assumptions listed; `--emit-runs` "
       "writes them out) and predicted with the analytical estimate (`stepcast estimate`). Error = "
       "(predicted - measured) / measured step time. Where a row gives only throughput, the measured step time is "
       "global tokens / (tokens/s/GPU x GPUs) or global tokens / (tokens/s of the job); where it gives only MFU, "
       "stepcast's model FLOPs / (MFU x the row's peak, else the profile's dense peak of the precision, x GPUs); where it gives only "
       "TFLOP/s, the Megatron paper's Eq. 3 FLOPs (which count recomputation) / (TFLOP/s x GPUs) for rows that quote that formula "
       "(Megatron-LM before 2023 and DeepSpeed rows that state no definition), Megatron-LM's logged FLOPs "
       "(num_floating_point_operations: no recomputation, unmasked attention) for Megatron-LM rows from 2023 and rows that name "
       "it, stepcast's model FLOPs for rows that quote model TFLOP/s.\n\n";
  o << "The `simulate` columns run the same run files through the discrete-event simulator "
       "(`stepcast simulate`, one representative rank per pipeline stage).\n\n";
  o << "## Mean absolute percentage error by source\n\n| source | rows | estimate MAPE | estimate worst | simulate MAPE | simulate worst |\n"
       "|---|---:|---:|---:|---:|---:|\n";
  double all = 0, sim_all = 0;
  for (const auto& r : rows) {
    all += std::fabs(r.error);
    sim_all += std::fabs(r.sim_error);
  }
  char buf[512];
  for (const auto& [src, s] : by_source(rows)) {
    std::snprintf(buf, sizeof buf, "| %s | %d | %.1f%% | %.1f%% | %.1f%% | %.1f%% |\n", src.c_str(), s.n, 100.0 * s.abs_sum / s.n,
                  100.0 * s.worst, 100.0 * s.sim_abs_sum / s.n, 100.0 * s.sim_worst);
    o << buf;
  }
  const double n_rows = rows.empty() ? 1.0 : static_cast<double>(rows.size());
  std::snprintf(buf, sizeof buf, "| **all** | %zu | **%.1f%%** | | **%.1f%%** | |\n\n", rows.size(), 100.0 * all / n_rows,
                100.0 * sim_all / n_rows);
  o << buf;
  o << "## Step time per row\n\n| row | hardware | GPUs | layout | measured from | measured s | estimate s | error | simulate s | error |\n"
       "|---|---|---:|---|---|---:|---:|---:|---:|---:|\n";
  for (const auto& r : rows) {
    std::snprintf(buf, sizeof buf, "| %s | %s | %lld | %s | %s | %.3f | %.3f | %s | %.3f | %s |\n", r.id.c_str(), r.hardware.c_str(),
                  static_cast<long long>(r.num_gpus), r.layout.c_str(), r.measured_from.c_str(), r.measured_s, r.predicted_s,
                  pct(r.error).c_str(), r.simulated_s, pct(r.sim_error).c_str());
    o << buf;
  }
  o << "\n## Peak memory per GPU (rows that report it)\n\n"
       "The ledger counts live tensors (and, for nvidia-smi rows, the CUDA context and NCCL buffers). Both measured bases "
       "also hold what PyTorch's caching allocator keeps reserved beyond them: torchtitan logs `torch.cuda.max_memory_reserved` "
       "(its `max_reserved_gib`), nvidia-smi shows the process's whole allocation; freed blocks cached for reuse and "
       "fragmentation are not modelled.\n\n"
       "| row | basis | measured GiB | ledger GiB | error |\n|---|---|---:|---:|---:|\n";
  for (const auto& r : rows) {
    if (r.measured_mem_gib < 0) continue;
    std::snprintf(buf, sizeof buf, "| %s | %s | %.1f | %.1f | %s |\n", r.id.c_str(), r.memory_basis.c_str(), r.measured_mem_gib,
                  r.predicted_mem_gib, pct(r.mem_error).c_str());
    o << buf;
  }
  {
    std::map<std::string, std::vector<double>> mem_by_source;
    for (const auto& r : rows) {
      if (r.measured_mem_gib >= 0) mem_by_source[r.source].push_back(std::abs(r.mem_error));
    }
    o << "\n| source | memory rows | mean abs error | rows within 10% |\n|---|---:|---:|---:|\n";
    for (const auto& [src, errs] : mem_by_source) {
      double sum = 0;
      int within = 0;
      for (double e : errs) {
        sum += e;
        if (e <= 0.10) ++within;
      }
      std::snprintf(buf, sizeof buf, "| %s | %zu | %.1f%% | %d |\n", src.c_str(), errs.size(), 100.0 * sum / static_cast<double>(errs.size()), within);
      o << buf;
    }
  }
  if (!plans.empty()) {
    o << "\n## Planner vs the published layout\n\n"
         "For every distinct published setting (model, hardware, GPUs, batch, sequence and the framework's own "
         "behaviour), `stepcast plan` searches all layouts and re-simulates its best three; the published team's "
         "layout is simulated the same way (the fastest one where a setting has several rows). Where ours is faster "
         "the last column says which costs it avoids.\n\n"
         "| rows | model | GPUs | published layout | simulated s | planner's layout | simulated s | ours vs theirs | why |\n"
         "|---|---|---:|---|---:|---|---:|---:|---|\n";
    int faster = 0, n = 0;
    for (const auto& p : plans) {
      std::string ids = p.ids.front() + (p.ids.size() > 1 ? " (+" + std::to_string(p.ids.size() - 1) + ")" : "");
      if (!p.note.empty()) {
        o << "| " << ids << " | " << p.model << " | " << p.num_gpus << " | " << p.theirs << " | " << p.theirs_s << " | - | - | - | "
          << p.note << " |\n";
        continue;
      }
      ++n;
      if (p.ours_s < p.theirs_s * 0.995) ++faster;
      char t[64], u[64], d[64];
      std::snprintf(t, sizeof t, "%.3f", p.theirs_s);
      std::snprintf(u, sizeof u, "%.3f", p.ours_s);
      std::snprintf(d, sizeof d, "%+.1f%%", 100.0 * (p.ours_s / p.theirs_s - 1.0));
      o << "| " << ids << " | " << p.model << " | " << p.num_gpus << " | " << p.theirs << " | " << t << " | " << p.ours << " | " << u
        << " | " << d << " | " << p.why << " |\n";
    }
    std::snprintf(buf, sizeof buf, "\nThe planner finds a faster layout (by more than 0.5%%) for %d of %d settings.\n", faster, n);
    o << buf;
  }
  for (const char* kind : {"collective", "gemm"}) {
    const bool coll = std::string(kind) == "collective";
    const MeasurementStats st = measurement_stats(measurements, kind);
    if (st.n == 0) continue;
    o << (coll ? "\n## Collective measurements\n\nEach published collective row predicted with `sim/cost`'s collective model on the "
                 "matching built-in profile (the group on as many nodes as the row ran, its ranks spread evenly; a ring forced by "
                 "switching NVLink SHARP off is a reduce-scatter then an all-gather). Measured time: the row's time, else bytes / "
                 "algbw, else bytes x bus factor / busbw. `cited` marks rows the profile's sources name: their values went into the "
                 "profile, so they check the model's shape, not a prediction.\n\n"
               : "\n## GEMM measurements\n\nEach published GEMM row (maximum achievable matmul FLOPS: the best shape of a "
                 "brute-force search) predicted with `sim/cost`'s GEMM model (peak x gemm_max x the shape ramp r(m) r(n) r(k)) on "
                 "the matching built-in profile at boost clock (the search times short bursts; training steps run at the "
                 "profile's lower sustained clock). The profiles' gemm_max come from these rows (`cited`) but the model applies the "
                 "shape ramp on top, which at these best shapes still costs 5-15%: the ramp x / (x + half_dim) is set by how much "
                 "slower small micro-batches run and saturates later than cuBLAS does.\n\n");
    if (st.uncited > 0) {
      std::snprintf(buf, sizeof buf, "%d rows: MAPE %.1f%%, worst %.1f%%; %d rows not cited by the profiles: MAPE %.1f%%.\n\n", st.n,
                    100.0 * st.mape, 100.0 * st.worst, st.uncited, 100.0 * st.uncited_mape);
    } else {
      std::snprintf(buf, sizeof buf, "%d rows: MAPE %.1f%%, worst %.1f%%; every row is cited by its profile.\n\n", st.n, 100.0 * st.mape,
                    100.0 * st.worst);
    }
    o << buf;
    o << "| row | hardware | measurement | measured from | measured | predicted | error | cited |\n|---|---|---|---|---:|---:|---:|---|\n";
    for (const auto& m : measurements) {
      if (m.kind != kind) continue;
      std::snprintf(buf, sizeof buf, "| %s | %s | %s | %s | %.1f us | %.1f us | %s | %s |\n", m.id.c_str(), m.hardware.c_str(), m.what.c_str(),
                    m.measured_from.c_str(), m.measured_s * 1e6, m.predicted_s * 1e6, pct(m.error).c_str(), m.cited ? "yes" : "");
      o << buf;
    }
  }
  if (!datasheets.empty()) {
    o << "\n## Datasheet rows against the built-in profiles\n\nEach hardware row's figures beside the profile it maps to (the "
         "profile's memory is what a process can use, in GiB, so it sits a little under the marketing figure).\n\n"
         "| row | profile | figure | datasheet | profile | difference |\n|---|---|---|---:|---:|---:|\n";
    for (const auto& d : datasheets) {
      for (const auto& f : d.fields) {
        std::snprintf(buf, sizeof buf, "| %s | %s | %s (%s) | %.4g | %.4g | %s |\n", d.id.c_str(), d.hardware.c_str(), f.name.c_str(), f.unit.c_str(),
                      f.datasheet, f.profile, f.datasheet > 0 ? pct(f.profile / f.datasheet - 1.0).c_str() : "-");
        o << buf;
      }
    }
  }
  o << "\n## Rows not predicted\n\n| row | reason |\n|---|---|\n";
  for (const auto& s : skipped) o << "| " << s.id << " | " << s.reason << " |\n";
  o << "\n## Assumptions per row\n\n";
  for (const auto& r : rows) {
    if (r.assumptions.empty()) continue;
    o << "- **" << r.id << "**: ";
    for (size_t i = 0; i < r.assumptions.size(); ++i) o << (i ? "; " : "") << r.assumptions[i];
    o << "\n";
  }
  return o.str();
}

}  // namespace stepcast::accuracy
