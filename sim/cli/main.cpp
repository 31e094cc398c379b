// stepcast command-line interface. The only place exceptions become exit codes:
//   0 ok, 2 bad input (message names the field), 3 layout does not fit in memory,
//   70 internal error (a bug: please report), 1 anything else.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>
#include <unistd.h>
#include <filesystem>
#include <vector>
#include <fstream>
#include <sstream>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <map>
#include <regex>
#include <set>
#include <string>

#include "models/model_spec.hpp"
#include "sim/accuracy/published.hpp"
#include "sim/accuracy/titan_import.hpp"
#include "sim/config/hardware.hpp"
#include "sim/config/framework_export.hpp"
#include "sim/config/framework_import.hpp"
#include "sim/config/run_config.hpp"
#include "sim/core/error.hpp"
#include "sim/core/journal.hpp"
#include "sim/engine/step_sim.hpp"
#include "sim/estimate/estimate.hpp"
#include "sim/lab/pcie_lab.hpp"
#include "sim/plan/compare.hpp"
#include "sim/plan/sensitivity.hpp"
#include "sim/plan/planner.hpp"
#include "sim/plan/split.hpp"
#include "sim/plan/sizing.hpp"
#include "sim/sweep/sweep.hpp"
#include "sim/report/html_report.hpp"
#include "calibrate/cpu_suite.hpp"
#include "calibrate/mpi_world.hpp"
#include "calibrate/profile.hpp"
#include "validate/executor.hpp"
#include "validate/measurement.hpp"
#include "validate/program.hpp"
#ifdef STEPCAST_HAVE_CUDA
#include "calibrate/cuda_suite.hpp"
#include "validate/cuda_exec.hpp"
#endif
#include "sim/report/output.hpp"
#include "sim/report/sim_output.hpp"

#ifdef STEPCAST_HAVE_MPI
#include <mpi.h>
#endif

namespace {

// Erases a progress line on stderr when it goes out of scope (also when the work ends with
// an error), so the result or the error starts on a clean line.
struct EraseLine {
  bool on;
  ~EraseLine() {
    if (on) std::fprintf(stderr, "\r\033[K");
  }
};

using stepcast::core::Json;

// Under mpirun (Open MPI or a PMIx launcher) the sweep splits its points across ranks.
bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
         std::getenv("PMI_SIZE") != nullptr;
}
bool g_mpi_active = false;

// A whole number in [lo, hi], checked on the text (an integer option would otherwise clamp
// "99999999999999999999" to the largest int64 and report that value).
CLI::Validator count_range(int64_t lo, int64_t hi) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        double v = 0;
        const bool ok = CLI::detail::lexical_cast(text, v) && std::isfinite(v) && v == std::floor(v) && v >= static_cast<double>(lo) &&
                        v <= static_cast<double>(hi);
        return ok ? std::string() : "got " + text + "; must be a whole number in " + range;
      },
      "INTEGER in " + range);
}
// A real number in [lo, hi] (CLI11's Range lets "nan" through: every comparison with it is false).
CLI::Validator finite_range(double lo, double hi) {
  const std::string range = "[" + CLI::detail::to_string(lo) + ", " + CLI::detail::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        double v = 0;
        const bool ok = CLI::detail::lexical_cast(text, v) && std::isfinite(v) && v >= lo && v <= hi;
        return ok ? std::string() : "got " + text + "; must be a number in " + range;
      },
      "NUMBER in " + range);
}
// A quantity with a unit ("2TB/s", "10min"), checked by its parser: positive, or zero too.
template <class Parse>
CLI::Validator quantity(Parse parse, const std::string& example, bool zero_ok) {
  return CLI::Validator(
      [parse, zero_ok](std::string& text) -> std::string {
        try {
          const double v = parse(text).value();
          if (v > 0 || (zero_ok && v == 0)) return std::string();
          return "got " + text + "; must be " + (zero_ok ? "zero or positive" : "positive");
        } catch (const std::exception& e) {
          return e.what();
        }
      },
      "QUANTITY like " + example);
}
// CLI11's wording for the common command-line mistakes, said the way the rest of stepcast says
// things ("--top: given 2 times; give it once").
std::string cli_message(std::string m) {
  static const std::regex repeated(R"(^(\S+): At Most 1 required but received (\d+)$)");
  static const std::regex convert(R"(^Could not convert: (\S+) = (.*)$)");
  static const std::regex extra(R"(^The following arguments? (?:was|were) not expected: (.*)$)");
  std::smatch g;
  if (std::regex_match(m, g, repeated)) return g[1].str() + ": given " + g[2].str() + " times; give it once";
  if (std::regex_match(m, g, convert)) return g[1].str() + ": got \"" + g[2].str() + "\"; not a value of the expected type (a number, or numbers separated by commas)";
  if (std::regex_match(m, g, extra)) return "unexpected argument(s): " + g[1].str() + " (a misspelt flag, or a second input where one is taken?)";
  return m;
}

// What stops a file or folder being made at `path`: its folder missing or read-only ("" if none).
std::string parent_problem(const std::string& path) {
  std::error_code ec;
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) parent = ".";
  if (!std::filesystem::is_directory(parent, ec)) return "the directory " + parent.string() + " does not exist";
  if (::access(parent.c_str(), W_OK) != 0) return "the directory " + parent.string() + " is not writable";
  return "";
}
// An output file: not a directory, in a directory that exists and is writable; checked when
// the command line is parsed, before any work.
const CLI::Validator kOutputFile(
    [](std::string& path) -> std::string {
      std::error_code ec;
      if (path.empty()) return "an empty path; give a file path";
      if (std::filesystem::is_directory(path, ec)) return path + " is a directory; give a file path";
      return parent_problem(path);
    },
    "FILE");
// An output directory: a directory, or creatable in an existing one.
const CLI::Validator kOutputDir(
    [](std::string& path) -> std::string {
      std::error_code ec;
      if (path.empty()) return "an empty path; give a folder path";
      if (std::filesystem::exists(path, ec)) return std::filesystem::is_directory(path, ec) ? "" : path + " exists and is not a directory";
      return parent_problem(path);
    },
    "DIR");
// The largest count a command-line flag takes (GPUs, sequence length, batch): the run file's
// bound on every dimension, 2^24.
constexpr int64_t kMaxCount = int64_t{1} << 24;
constexpr const char* kSchedulesHelp =
    "pipeline schedules to search, comma-separated (gpipe, 1f1b, interleaved, zb-h1, zbv, dualpipev; default all but gpipe), "
    "e.g. 1f1b,interleaved for a framework without zero-bubble schedules";
const char* const kFrameworkHelp =
    "search only layouts this framework runs as they are, the ones `export` writes (megatron: 1F1B and interleaved schedules, no "
    "CPU offload; torchtitan: FSDP2 or DDP, no ZeRO-1/2, op-level or layer-interval recomputation; deepspeed: ZeRO 0-3 data "
    "parallelism alone, CPU offload, every layer or no layer recomputed; accelerate: FSDP or DDP data parallelism alone); the "
    "others are rejected naming the setting. Under torchtitan, deepspeed and accelerate every layout is costed as that framework "
    "runs it (its exported config imported back)";

constexpr int kExitBadInput = 2;
constexpr int kExitDoesNotFit = 3;
constexpr int kExitInternal = 70;

// The command as the user typed it (validate re-launches itself under mpirun by its resolved
// path and passes the name it was called by).
std::string command_line(int argc, char** argv) {
  std::string s;
  const char* launcher = std::getenv("STEPCAST_LAUNCHED_AS");
  for (int i = 0; i < argc; ++i) s += (i ? " " : "") + std::string(i == 0 && launcher ? launcher : argv[i]);
  return s;
}

// A cost-balanced split of a run's layers on which it fits the GPU where its own split does not
// (plan::balanced_split within the GPU's memory), and the bytes that leaves free; none where
// the run has no pipeline, a hybrid pattern marks its stages, or no split the search reaches
// fits.
struct SplitFit {
  std::vector<int64_t> layers;
  double free_bytes = 0;
};
// The run with its pipeline split replaced by `list` (the layers of every virtual stage),
// validated again into `issues`.
stepcast::config::RunConfig with_split(stepcast::config::RunConfig rc, const std::vector<int64_t>& list, stepcast::core::Issues& issues) {
  rc.parallel.set_split(-1, -1, list);
  stepcast::config::derive_and_validate(rc, issues);
  return rc;
}

std::optional<SplitFit> fitting_split(const stepcast::config::RunConfig& rc) {
  if (rc.parallel.pp <= 1 || !rc.model.pattern_stages.empty()) return std::nullopt;
  const stepcast::plan::BalancedSplit bs = stepcast::plan::balanced_split(rc, 1.0);
  if (bs.layers.empty() || !bs.fits || bs.layers == rc.vstage_layers) return std::nullopt;
  stepcast::core::Issues issues;
  const auto r = with_split(rc, bs.layers, issues);
  if (!issues.empty()) return std::nullopt;
  const auto l = stepcast::memory::compute_ledger(r);
  if (!l.fits()) return std::nullopt;
  return SplitFit{bs.layers, l.capacity.value() - l.peak().value()};
}

// Why a run does not fit, with what would make it fit. `split`: fitting_split(rc), when the
// caller has it already.
std::string fit_message(const stepcast::config::RunConfig& rc, const stepcast::memory::MemoryLedger& l,
                        const std::optional<SplitFit>& split) {
  char buf[256];
  if (l.peak() <= l.capacity && !l.host_fits()) {
    std::snprintf(buf, sizeof buf, "does not fit: the offloaded state (offload %s) takes %.1f GiB of host memory per node, a node has %.1f GiB",
                  stepcast::config::offload_label(rc.parallel).c_str(), l.host_per_node.value() / 1073741824.0,
                  l.host_capacity.value() / 1073741824.0);
    return buf;
  }
  std::snprintf(buf, sizeof buf, "does not fit: stage %lld needs %.2f GiB per GPU, the GPU has %.2f GiB (over by %.2f GiB)",
                static_cast<long long>(l.peak_stage), l.peak().value() / 1073741824.0, l.capacity.value() / 1073741824.0,
                (l.peak().value() - l.capacity.value()) / 1073741824.0);
  std::string out = buf;
  const std::string hint = stepcast::memory::fit_hint(rc);
  if (!hint.empty()) out += "; " + hint;
  if (split) {
    // Stages hold different memory (1F1B keeps more micro-batches in flight on the early
    // ones), so moving layers may make the layout fit as it is.
    char more[160];
    std::snprintf(more, sizeof more, " (parallel.stage_layers; %.2f GiB free; --balanced-split applies it)", split->free_bytes / 1073741824.0);
    out += std::string(hint.empty() ? "; it fits" : "; or") + " with its layers split within memory as stages " +
           stepcast::config::run_length_text(split->layers) + more;
  }
  return out;
}

std::string fit_message(const stepcast::config::RunConfig& rc, const stepcast::memory::MemoryLedger& l) {
  return fit_message(rc, l, l.peak() > l.capacity ? fitting_split(rc) : std::nullopt);
}

// --balanced-split: the run with its pipeline split replaced by the cost-balanced one
// (sim/plan/split), validated again; `said` gets the split before and after and Megatron-Core's
// flag that sets it (plan::megatron_split_flag; empty where Megatron-Core has no such run).
stepcast::config::RunConfig with_balanced_split(stepcast::config::RunConfig rc, Json& said) {
  if (rc.parallel.pp <= 1) throw stepcast::core::UserError("--balanced-split: the run has no pipeline (parallel.pp is 1)");
  if (!rc.model.pattern_stages.empty()) {
    throw stepcast::core::UserError("--balanced-split: the model's hybrid_override_pattern marks its own pipeline stages with '|'; drop the marks to balance");
  }
  const std::vector<int64_t> before = rc.vstage_layers;
  // Balanced by time within the GPU's memory (the run's ledger capacity).
  const stepcast::plan::BalancedSplit bs = stepcast::plan::balanced_split(rc, 1.0);
  const std::vector<int64_t>& list = bs.layers;
  if (list.empty()) throw stepcast::core::UserError("--balanced-split: the layers cannot fill every virtual stage between the first and the last");
  stepcast::core::Issues issues;
  rc = with_split(std::move(rc), list, issues);
  if (!issues.empty()) throw stepcast::core::UserError("--balanced-split: with stage_layers " + stepcast::config::run_length_text(list) + ": " + issues.lines().front());
  said = {{"stage_layers", list}, {"previous_stage_layers", before}, {"megatron", stepcast::plan::megatron_split_flag(rc)}};
  if (bs.memory_bound || !bs.fits) {
    // What memory did to it: the split by time alone overfills a stage.
    said["memory"] = {{"fits", bs.fits},
                      {"limit_bytes", bs.limit_bytes},
                      {"time_only_stage_layers", bs.time_only},
                      {"time_only_stage", bs.time_only_stage},
                      {"time_only_peak_bytes", bs.time_only_peak_bytes}};
  }
  return rc;
}

std::string balanced_split_text(const Json& said) {
  const auto list = said["stage_layers"].get<std::vector<int64_t>>(), before = said["previous_stage_layers"].get<std::vector<int64_t>>();
  const std::string flag = said["megatron"].get<std::string>();
  std::string memory;
  if (said.contains("memory")) {
    const Json& m = said["memory"];
    char buf[256];
    std::snprintf(buf, sizeof buf, "needs %.2f GiB on stage %lld, over the GPU's %.2f GiB", m["time_only_peak_bytes"].get<double>() / 1073741824.0,
                  static_cast<long long>(m["time_only_stage"].get<int64_t>()), m["limit_bytes"].get<double>() / 1073741824.0);
    const std::string time_only = stepcast::config::run_length_text(m["time_only_stage_layers"].get<std::vector<int64_t>>());
    memory = m["fits"].get<bool>() ? "; the split balanced by time alone, " + time_only + ", " + buf + ", so full stages give up layers"
                                   : "; balanced by time alone: it " + std::string(buf) + " and no balanced split found fits";
  }
  return "pipeline split (--balanced-split): stages " + stepcast::config::run_length_text(list) + (list == before ? " (the run's own)" : " instead of " + stepcast::config::run_length_text(before)) +
         memory + (flag.empty() ? std::string() : "; Megatron-Core: " + flag) + "\n\n";
}

// False, after printing why with the ledger hint, when the run does not fit and --allow-oom was
// not given (`who`: how the error names the run).
bool fits_or_says(const stepcast::config::RunConfig& rc, const stepcast::memory::MemoryLedger& l, bool allow_oom, const std::string& who) {
  if (l.fits() || allow_oom) return true;
  std::cerr << "stepcast: error: " << who << ": " << fit_message(rc, l) << "; run `stepcast memory` for the ledger or pass --allow-oom\n";
  return false;
}

// Writes `text` to `path` whole: through a temporary file renamed into place, except for a
// device or pipe (/dev/stdout, a fifo), written in place because renaming would replace it.
void write_text(const std::string& path, const std::string& text) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  const bool in_place = !ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st);
  const std::string tmp = in_place ? path : path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) throw stepcast::core::UserError(path + ": cannot write");
    out << text;
    out.flush();
    if (!out) {
      out.close();
      if (!in_place) std::remove(tmp.c_str());
      throw stepcast::core::UserError(path + ": writing failed (disk full?)");
    }
  }
  if (in_place) return;
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw stepcast::core::UserError(path + ": cannot rename into place");
  }
}

// A run file given by path, by flags, or by a file with flags overriding it (plan, capacity).
struct RunFlags {
  std::string file, model, hardware, precision;
  int64_t gpus = 0, gpus_per_node = 0, seq = 0, batch = 0, lora_rank = 0, packed_docs = 0;
  bool qlora = false;
  std::string source = "<flags>", base_dir;
};

void add_run_flags(CLI::App* cmd, RunFlags& f, bool with_gpus, const std::string& file_help) {
  cmd->add_option("run", f.file, file_help);
  cmd->add_option("--model", f.model,
                  "model (zoo name, or a model-hub config.json path) when no run file is given, or to override it");
  cmd->add_option("--hardware", f.hardware, "hardware profile (built-in name, or a profile JSON path such as calibrate writes)");
  if (with_gpus) cmd->add_option("--gpus", f.gpus, "number of GPUs")->check(count_range(1, kMaxCount));
  cmd->add_option("--gpus-per-node", f.gpus_per_node, "GPUs per node (default: the hardware's)")->check(count_range(1, kMaxCount));
  cmd->add_option("--seq", f.seq, "sequence length")->check(count_range(1, kMaxCount));
  cmd->add_option("--batch", f.batch, "global batch size (sequences)")->check(count_range(1, kMaxCount));
  cmd->add_option("--precision", f.precision, "training precision (bf16, fp16, fp8, fp32)");
  cmd->add_option("--lora", f.lora_rank,
                  "LoRA fine-tuning: the base model frozen, adapters of this rank on every attention and MLP projection "
                  "(training.lora; a run file's lora block keeps its targets)")
      ->check(count_range(1, 65536));
  cmd->add_flag("--qlora", f.qlora,
                "QLoRA: the frozen base stored in 4-bit NormalFloat (training.lora.base_quantization nf4); "
                "needs --lora or a run file's lora block");
  cmd->add_option("--packed-document-tokens", f.packed_docs,
                  "sequence packing: the mean document length inside each packed sequence (training.packed_document_tokens; "
                  "attention runs per document)")
      ->check(count_range(1, kMaxCount));
}

Json run_from_flags(RunFlags& f, const std::string& command, bool need_gpus) {
  Json run = Json::object();
  if (!f.file.empty()) {
    run = stepcast::core::load_json_file(f.file);
    f.source = f.file;
    f.base_dir = std::filesystem::path(f.file).parent_path().string();
    if (!run.is_object()) throw stepcast::core::UserError(f.file + ": expected a JSON object");
  } else if (f.model.empty() || f.hardware.empty() || (need_gpus && f.gpus == 0) || f.seq == 0 || f.batch == 0) {
    throw stepcast::core::UserError(command + " needs a run file, or --model, --hardware, " + (need_gpus ? "--gpus, " : "") + "--seq and --batch");
  }
  // A value naming a file (or ending in .json) is that file: a hub config.json, a profile.
  auto name_or_path = [](const std::string& v) -> Json {
    const bool file = v.size() > 5 && v.compare(v.size() - 5, 5, ".json") == 0;
    if (!file && !std::filesystem::is_regular_file(v)) return v;
    return Json{{"path", std::filesystem::absolute(v).string()}};
  };
  if (!f.model.empty()) run["model"] = name_or_path(f.model);
  if (!f.hardware.empty()) run["hardware"] = name_or_path(f.hardware);
  if (f.gpus > 0) run["cluster"]["num_gpus"] = f.gpus;
  if (f.gpus_per_node > 0) run["cluster"]["gpus_per_node"] = f.gpus_per_node;
  if (f.seq > 0) run["training"]["seq_len"] = f.seq;
  if (f.batch > 0) run["training"]["global_batch_size"] = f.batch;
  if (!f.precision.empty()) run["training"]["precision"] = f.precision;
  if (f.lora_rank > 0) {
    Json& lora = run["training"]["lora"];
    if (!lora.is_object()) lora = Json::object();
    lora["rank"] = f.lora_rank;
  }
  if (f.packed_docs > 0) run["training"]["packed_document_tokens"] = f.packed_docs;
  if (f.qlora) {
    Json& lora = run["training"]["lora"];
    if (!lora.is_object()) {
      throw stepcast::core::UserError("--qlora quantizes the frozen base of a LoRA run: give --lora RANK (or a run file with training.lora)");
    }
    lora["base_quantization"] = "nf4";
  }
  return run;
}

struct ValidateArgs {
  std::vector<std::string> files;
  std::string backend = "cpu", profile, json_out, report, trace, sim_trace;
  int steps = 5, warmup = 1, rounds = 1;
  double timeout_s = 120;
  bool json = false, resume = false;
  // Gates (negative: off): exceeding one ends validate with exit code 1 after the report.
  double max_median_error = -1, max_error = -1, max_memory_error = -1;
};

// A run file for validation: --profile replaces its hardware; the backend's execution
// semantics apply (stepcast::validate::executed_run); refused before launch when the executor
// cannot run it or the ledger says it does not fit.
stepcast::config::RunConfig validation_run(const std::string& file, const ValidateArgs& a) {
  Json j = stepcast::core::load_json_file(file);
  if (!j.is_object()) throw stepcast::core::UserError(file + ": expected a JSON object");
  if (!a.profile.empty()) j["hardware"] = Json{{"path", std::filesystem::absolute(a.profile).string()}};
  auto rc = stepcast::config::parse_run(j, file, std::filesystem::path(file).parent_path().string());
  rc = stepcast::validate::executed_run(rc, a.backend);
  stepcast::validate::check_executable(rc, a.backend);
  const auto l = stepcast::memory::compute_ledger(rc);
  if (!l.fits()) throw stepcast::validate::DoesNotFit(file + ": " + fit_message(rc, l));
  return rc;
}

// Executes one plan once on every rank: its measurement as JSON on rank 0 (what the journal
// records for the plan and round), null on the others.
Json execute_plan(const stepcast::config::RunConfig& rc, const ValidateArgs& a, const stepcast::validate::ExecOptions& eo, int rank) {
  auto backend = a.backend == "cuda" ? stepcast::validate::make_cuda_backend(rank) : stepcast::validate::make_cpu_backend(rank);
  if (!backend) throw stepcast::core::UserError("validate --backend " + a.backend + ": not available in this build");
  const auto meas = stepcast::validate::execute(rc, eo, *backend);
  backend.reset();
  return rank == 0 ? stepcast::validate::measured_json(meas) : Json(nullptr);
}

// A plan's measurement (every round) against its simulation, on rank 0: the comparison's JSON
// and Markdown. The last plan also writes the traces asked for (its last round's measured step).
Json compare_plan(const stepcast::config::RunConfig& rc, const ValidateArgs& a, const stepcast::validate::Measured& meas,
                  const std::string& cmdline, bool last) {
  stepcast::engine::SimOptions so;
  so.keep_timeline = last && !a.sim_trace.empty();
  const auto sim = stepcast::engine::simulate_step(rc, so);
  auto c = stepcast::validate::compare(rc, sim, meas);
  c.command = cmdline;
  if (c.reference_measured_s > 0 && c.reference_predicted_s > 0) {
    stepcast::engine::SimOptions drift;
    drift.compute_scale = c.reference_measured_s / c.reference_predicted_s;
    c.drift_adjusted_step_s = stepcast::engine::simulate_step(rc, drift).step.step_time_s;
  }
  // Traces of the last plan: measured next to simulated.
  if (last && !a.trace.empty()) write_text(a.trace, stepcast::validate::measured_trace_json(rc, meas));
  if (last && !a.sim_trace.empty()) write_text(a.sim_trace, stepcast::engine::trace_json(rc, sim));
  return Json{{"plan", stepcast::validate::comparison_json(rc, c, meas)}, {"markdown", stepcast::validate::comparison_markdown(rc, c, meas)}};
}

int run_validate(const ValidateArgs& a, int argc, char** argv, const std::string& cmdline) {
#ifndef STEPCAST_HAVE_CUDA
  if (a.backend == "cuda") {
    throw stepcast::core::UserError("validate --backend cuda: this build has no CUDA backend (nvcc, cuBLAS or NCCL were not found at configure time); use --backend cpu");
  }
#else
  if (a.backend == "cuda" && stepcast::validate::cudaexec::device_count() == 0) {
    throw stepcast::core::UserError("validate --backend cuda: no GPU is visible on this machine (CUDA reports no device); use --backend cpu");
  }
#endif
  // Each finished plan is journalled beside the results (--out, else --report); --resume takes
  // the plans an interrupted run finished from it (sim/core/journal.hpp).
  const std::string journal_path = !a.json_out.empty() ? a.json_out + ".journal" : !a.report.empty() ? a.report + ".journal" : "";
  const char* journal_what = "the plans an interrupted validation finished";
  if (a.resume && journal_path.empty()) throw stepcast::core::UserError("validate --resume: needs --out or --report (the journal of finished plans is kept beside it)");
  if (!launched_by_mpi()) (void)stepcast::core::previous_journal(journal_path, a.resume, journal_what);  // refused before launch
  std::vector<stepcast::config::RunConfig> runs;
  for (const auto& f : a.files) runs.push_back(validation_run(f, a));
  const int64_t ranks = runs.front().cluster.num_gpus;
  for (const auto& rc : runs) {
    if (rc.cluster.num_gpus != ranks) {
      throw stepcast::core::UserError(rc.source_name + ": cluster.num_gpus " + std::to_string(rc.cluster.num_gpus) + " differs from " +
                                      runs.front().source_name + "'s " + std::to_string(ranks) + "; validate plans of one size together");
    }
  }
#ifdef STEPCAST_HAVE_MPI
  if (!launched_by_mpi() && ranks > 1) {
    // The plans are valid: launch one process per rank.
    std::vector<std::string> args{"mpirun", "-n", std::to_string(ranks)};
    args.push_back(std::filesystem::read_symlink("/proc/self/exe").string());
    for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
    std::vector<char*> cargs;
    for (auto& x : args) cargs.push_back(x.data());
    cargs.push_back(nullptr);
    std::fprintf(stderr, "validate: launching %lld ranks: mpirun -n %lld ...\n", static_cast<long long>(ranks), static_cast<long long>(ranks));
    std::fflush(stderr);
    setenv("STEPCAST_LAUNCHED_AS", argv[0], 1);
    execvp("mpirun", cargs.data());
    throw stepcast::core::UserError("validate: cannot start mpirun (" + std::string(std::strerror(errno)) + "); install OpenMPI or launch with mpirun -n " + std::to_string(ranks));
  }
  MPI_Init(&argc, &argv);
  g_mpi_active = true;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
#else
  const int rank = 0;
  (void)argc;
  (void)argv;
#endif
  stepcast::validate::ExecOptions eo;
  eo.steps = a.steps;
  eo.warmup = a.warmup;
  eo.timeout_s = a.timeout_s;
  // A plan is identified by its file and content (with the model and profile files it refers
  // to); the journal's header by what every result depends on.
  std::string previous;
  if (rank == 0 && !journal_path.empty()) previous = stepcast::core::previous_journal(journal_path, a.resume, journal_what);
  const stepcast::calibrate::MpiWorld world;
  std::string profile_text;
  if (!a.profile.empty()) profile_text = stepcast::core::load_json_file(a.profile).dump();
  stepcast::core::Journal journal({{"backend", a.backend}, {"ranks", ranks}, {"steps", a.steps}, {"warmup", a.warmup},
                                   {"build", stepcast::calibrate::build_description()}, {"profile", stepcast::core::digest(profile_text)}},
                                  world.broadcast(previous), journal_path, rank == 0 ? journal_path : "");
  if (rank == 0 && journal.unused() > 0) {
    std::fprintf(stderr, "validate: resuming: %zu plan runs finished by an interrupted run in %s\n", journal.unused(), journal_path.c_str());
  }
  // Each plan is executed --rounds times, the plans in turn (round 1: every plan, then round
  // 2, ...), so a spell of the machine running slow falls on a few steps of many plans instead
  // of every step of one, and each plan's median step sets it aside. Every plan's round is
  // journalled as it finishes.
  std::vector<std::string> plan_keys;
  for (const auto& f : a.files) {
    plan_keys.push_back("plan " + f + " " +
                        stepcast::core::digest(stepcast::config::with_referenced_files(stepcast::core::load_json_file(f),
                                                                                       std::filesystem::path(f).parent_path().string())
                                                   .dump()));
  }
  std::vector<std::vector<stepcast::validate::Measured>> measured(runs.size());
  // A journalled measurement that does not read back whole: the journal, the plan and what is wrong.
  auto damaged = [&](size_t i, const std::string& what) {
    return stepcast::core::UserError(journal_path + ": the journalled measurement of " + a.files[i] + ": " + what +
                                     "; remove the file to start afresh");
  };
  for (int round = 1; round <= a.rounds; ++round) {
    for (size_t i = 0; i < runs.size(); ++i) {
      const std::string key = plan_keys[i] + " round " + std::to_string(round);
      const bool reused = journal.recorded(key);
      if (rank == 0) {
        std::fprintf(stderr, "validate: %s (%lld ranks%s)%s\n", runs[i].source_name.c_str(), static_cast<long long>(ranks),
                     a.rounds > 1 ? (", round " + std::to_string(round) + " of " + std::to_string(a.rounds)).c_str() : "",
                     reused ? ": finished before, from the journal" : "");
      }
      const Json done = journal.record(key, [&] { return execute_plan(runs[i], a, eo, rank); });
      if (rank != 0) continue;
      try {
        measured[i].push_back(stepcast::validate::measured_from_json(done));
      } catch (const Json::exception& e) {
        throw damaged(i, std::string("not a validate result (") + e.what() + ")");
      } catch (const stepcast::core::UserError& e) {
        throw damaged(i, e.what());
      }
    }
  }
  std::vector<stepcast::validate::Comparison> comps;
  Json out = Json::array();
  std::string md;
  for (size_t i = 0; rank == 0 && i < runs.size(); ++i) {
    stepcast::validate::Measured merged;
    try {
      merged = stepcast::validate::merge_rounds(measured[i]);
    } catch (const stepcast::core::UserError& e) {
      throw damaged(i, e.what());
    }
    const Json done = compare_plan(runs[i], a, merged, cmdline, i + 1 == runs.size());
    comps.push_back(stepcast::validate::comparison_from_json(done.at("plan")));
    md += done.at("markdown").get<std::string>();
    out.push_back(done.at("plan"));
  }
  if (rank == 0) {
    const auto s = stepcast::validate::summarize(comps);
    Json doc{{"plans", out},
             {"summary", {{"plans", s.plans}, {"median_abs_step_error", s.median_abs_step_error}, {"max_abs_step_error", s.max_abs_step_error},
                          {"worst_memory_error", s.worst_memory_error}, {"max_abs_reference_drift", s.max_abs_reference_drift},
                          {"median_abs_drift_adjusted_error", s.median_abs_drift_adjusted_error},
                          {"max_abs_drift_adjusted_error", s.max_abs_drift_adjusted_error}, {"rounds", a.rounds}}}};
    const std::string summary = stepcast::validate::suite_markdown(comps);
    if (!a.json_out.empty()) write_text(a.json_out, doc.dump(2) + "\n");
    if (!a.report.empty()) {
      char date[32];
      const std::time_t now = std::time(nullptr);
      std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
      const auto& hw = runs.front().hardware;
      write_text(a.report, "# stepcast validate: predicted against measured\n\nCommand: `" + cmdline + "`\n\nDate: " + date + "; " +
                               std::to_string(ranks) + " ranks on " + std::to_string(std::thread::hardware_concurrency()) +
                               " cores; profile " + hw.name + ": " + hw.description + "\n\n" + summary + "\n" + md);
    }
    if (a.json) {
      std::cout << doc.dump(2) << "\n";
    } else {
      std::cout << md << summary;
    }
    std::error_code ec;
    if (!journal_path.empty()) std::filesystem::remove(journal_path, ec);  // the results hold every plan now
  }
  int code = 0;
  if (rank == 0) {
    const auto s = stepcast::validate::summarize(comps);
    auto gate = [&](double value, double limit, const char* what, const char* flag) {
      if (limit < 0 || value <= limit) return;
      std::fprintf(stderr, "stepcast: validate: %s %.1f%% exceeds %s %.1f%%\n", what, 100.0 * value, flag, 100.0 * limit);
      code = 1;
    };
    gate(s.median_abs_step_error, a.max_median_error, "median absolute step-time error", "--max-median-error");
    gate(s.max_abs_step_error, a.max_error, "largest absolute step-time error", "--max-error");
    gate(s.worst_memory_error, a.max_memory_error, "largest peak-memory error", "--max-memory-error");
  }
#ifdef STEPCAST_HAVE_MPI
  MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  g_mpi_active = false;
#endif
  return code;
}

#ifdef STEPCAST_CUDA_HELPER
// `calibrate --backend cuda` and `validate --backend cuda` run in the tool's CUDA half, a second
// executable beside this one (see CMakeLists.txt): this one links no CUDA library, so every
// other command starts without loading cuBLAS and NCCL and runs where they are not installed.
bool wants_cuda_backend(int argc, char** argv) {
  if (argc < 2 || (std::strcmp(argv[1], "calibrate") != 0 && std::strcmp(argv[1], "validate") != 0)) return false;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--backend=cuda") == 0) return true;
    if (std::strcmp(argv[i], "--backend") == 0 && i + 1 < argc && std::strcmp(argv[i + 1], "cuda") == 0) return true;
  }
  return false;
}

[[noreturn]] void exec_cuda_helper(char** argv) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const auto helper = (ec ? std::filesystem::path(argv[0]).parent_path() : self.parent_path()) / STEPCAST_CUDA_HELPER;
  if (!std::filesystem::exists(helper)) {
    throw stepcast::core::UserError(std::string(argv[1]) + " --backend cuda: the CUDA backend is the executable " + helper.string() +
                                    ", which is missing; it is built beside stepcast when the CUDA toolkit is found (copy it with stepcast)");
  }
  execv(helper.c_str(), argv);
  throw stepcast::core::UserError(std::string(argv[1]) + " --backend cuda: cannot start " + helper.string() + " (" + std::strerror(errno) + ")");
}
#endif

int run(int argc, char** argv) {
#ifdef STEPCAST_CUDA_HELPER
  if (wants_cuda_backend(argc, argv)) exec_cuda_helper(argv);
#endif
  CLI::App app{"stepcast: predict step time, memory and the best layout for distributed LLM training"};
  app.require_subcommand(1);
  // The revision and the backends this build has (a GPU test skips where cuda is absent).
  std::string backends = "cpu";
#ifdef STEPCAST_HAVE_MPI
  backends += " (MPI)";
#endif
#ifdef STEPCAST_HAVE_CUDA
  backends += ", cuda";
#endif
#ifdef STEPCAST_CUDA_HELPER
  backends += ", cuda (" STEPCAST_CUDA_HELPER ")";
#endif
  app.set_version_flag("--version", "stepcast " + stepcast::calibrate::build_description() + "; backends: " + backends);
  const std::string cmdline = command_line(argc, argv);

  // estimate
  std::string est_file;
  bool est_json = false, est_allow_oom = false, est_ops = false;
  auto* est = app.add_subcommand("estimate", "analytical step time, throughput, MFU and memory of a run file");
  est->add_option("run", est_file, "run file (JSON)")->required();
  est->add_flag("--json", est_json, "print the output contract as JSON");
  est->add_flag("--allow-oom", est_allow_oom, "report the estimate even when the layout does not fit");
  est->add_flag("--ops", est_ops, "also list every operator of one micro-batch per layer kind and pass: time, share, FLOP/s, bytes/s, hidden communication (JSON: key \"operators\")");
  // What-if settings over the run file, shared by estimate, simulate and memory.
  std::vector<std::string> run_sets;
  const char* set_help = "override a run-file field, e.g. --set parallel.tp=4 --set training.precision=fp8 (repeatable; VALUE is JSON or a string)";
  est->add_option("--set", run_sets, set_help)->allow_extra_args(false);
  bool est_balanced = false;
  const char* balanced_help = "replace the run's pipeline split by the cost-balanced one (each layer, the embedding and the output layer weighed by their pass times, as the planner does) and print it with Megatron-Core's flag for it";
  est->add_flag("--balanced-split", est_balanced, balanced_help);

  // simulate
  std::string sim_file, sim_trace;
  bool sim_json = false, sim_allow_oom = false, sim_full = false;
  auto* sim = app.add_subcommand("simulate", "discrete-event simulation of one training step of a run file");
  sim->add_option("run", sim_file, "run file (JSON)")->required();
  sim->add_flag("--json", sim_json, "print the output contract as JSON");
  sim->add_option("--set", run_sets, set_help)->allow_extra_args(false);
  auto* trace_opt = sim->add_option("--trace", sim_trace, "write a Perfetto / Chrome trace of the step here")->check(kOutputFile);
  sim->add_flag("--allow-oom", sim_allow_oom, "simulate even when the layout does not fit");
  sim->add_flag("--all-ranks", sim_full, "simulate every rank (default only with a scenario)");
  bool sim_ideal = false;
  int64_t sim_max_tasks = 200'000'000;
  bool sim_trace_ops = false;
  auto* trace_ops_opt = sim->add_flag("--trace-ops", sim_trace_ops, "nest each layer's operators (GEMMs, attention, norms) inside its trace slice");
  sim->add_option("--max-tasks", sim_max_tasks, "refuse a step whose graph is estimated above this many operators (one rank per stage: 64 per layer and micro-batch; every rank: the built graph times the ranks per stage) (0: no limit)")
      ->check(count_range(0, std::int64_t{1} << 53));
  std::vector<int64_t> sim_trace_ranks;
  auto* trace_ranks_opt = sim->add_option("--trace-ranks", sim_trace_ranks,
                  "global ranks to put in the trace (default: all simulated ranks, or the first rank of each stage when every rank is simulated)")
      ->delimiter(',');
  trace_ranks_opt->needs(trace_opt);  // without a trace they would do nothing
  trace_ops_opt->needs(trace_opt);
  sim->add_flag("--ideal", sim_ideal, "schedule study: uniform transformer stages, free communication, no optimizer");
  bool sim_balanced = false;
  sim->add_flag("--balanced-split", sim_balanced, balanced_help);

  // memory
  std::string mem_file;
  bool mem_json = false;
  auto* mem = app.add_subcommand("memory", "per-stage memory ledger of a run file");
  mem->add_option("run", mem_file, "run file (JSON)")->required();
  mem->add_flag("--json", mem_json, "print the ledger as JSON");
  mem->add_option("--set", run_sets, set_help)->allow_extra_args(false);

  // export
  std::string exp_framework, exp_file, exp_out;
  bool exp_json = false;
  auto* exp = app.add_subcommand("export", "a run file as a training framework's launch configuration (megatron: torchrun + Megatron-LM's pretrain_gpt.py "
                                           "arguments for its model, batch, precision, layout, recomputation and overlap; torchtitan: a job config TOML; "
                                           "deepspeed: a DeepSpeed config JSON; accelerate: an Accelerate config YAML); import reads each back");
  exp->add_option("framework", exp_framework, "megatron, torchtitan, deepspeed or accelerate")->required()->check(CLI::IsMember({"megatron", "torchtitan", "deepspeed", "accelerate"}));
  exp->add_option("run", exp_file, "run file (JSON), e.g. with the parallel block of a layout `plan --json` ranked")->required();
  exp->add_option("--set", run_sets, set_help)->allow_extra_args(false);
  exp->add_option("--out", exp_out, "write it here (megatron: a shell script; torchtitan: the TOML; deepspeed: the config JSON, its notes printed; accelerate: the YAML; default: print it, deepspeed's notes on stderr)")->check(kOutputFile);
  exp->add_flag("--json", exp_json, "print it as JSON (megatron: {framework, launcher, args, notes}; torchtitan, deepspeed, accelerate: {framework, model, config, notes})");
  bool exp_allow_oom = false;
  exp->add_flag("--allow-oom", exp_allow_oom, "export even when the layout does not fit");

  // compare
  std::vector<std::string> cmp_files, cmp_sets_a, cmp_sets_b;
  bool cmp_json = false, cmp_estimate = false, cmp_allow_oom = false;
  auto* cmp = app.add_subcommand("compare", "two run files (or one and a what-if of it) side by side: step time, rates, memory and every time category, and why one is faster");
  cmp->add_option("runs", cmp_files, "run files A and B (one file: B is A with the --set-b changes)")->required()->expected(1, 2);
  cmp->add_option("--set-a", cmp_sets_a, "override a field of A (repeatable; as --set)")->allow_extra_args(false);
  cmp->add_option("--set-b", cmp_sets_b, "override a field of B (repeatable; as --set)")->allow_extra_args(false);
  cmp->add_flag("--json", cmp_json, "print both sides, the differences and the verdict as JSON");
  cmp->add_flag("--estimate", cmp_estimate, "compare the analytical estimates instead of simulating both steps");
  cmp->add_flag("--allow-oom", cmp_allow_oom, "compare even when a layout does not fit");

  // scaling
  RunFlags scl_run;
  bool scl_json = false;
  std::string scl_gpus;
  stepcast::plan::SizingOptions scl_opt;
  scl_opt.plan.top_k = 3;
  auto* scl = app.add_subcommand("scaling", "the planner's best layout at several GPU counts: step time, throughput, MFU, scaling efficiency and, "
                                            "with a token budget, days, GPU-hours, cost and goodput");
  add_run_flags(scl, scl_run, false, "run file (JSON): model, hardware, training; the GPU count comes from --gpus, the layout is searched except keys its parallel block gives");
  scl->add_option("--gpus", scl_gpus, "GPU counts, increasing, e.g. 64,128,256,512")->required();
  scl->add_option("--tokens", scl_opt.tokens, "token budget (adds days, GPU-hours, cost and goodput)")->check(finite_range(1.0, 1e18));
  scl->add_option("--tokens-per-param", scl_opt.tokens_per_param, "token budget as tokens per parameter")->check(finite_range(1e-6, 1e6));
  scl->add_option("--price", scl_opt.usd_per_gpu_hour, "price per GPU-hour (USD)")->check(finite_range(0.0, 1e6));
  scl->add_option("--threads", scl_opt.plan.threads, "worker threads for the search (default: all cores)")->check(count_range(0, 4096));
  scl->add_option("--memory-headroom", scl_opt.plan.memory_headroom,
                  "share of GPU memory a layout must leave free beyond the ledger (allocator fragmentation), e.g. 0.1")
      ->check(finite_range(0.0, 0.9));
  scl->add_flag("--offload", scl_opt.plan.offload,
                "also try CPU offload: the optimizer's on sharded layouts, the parameters' too under FSDP (needs the profile's host)");
  std::string scl_schedules;
  scl->add_option("--schedules", scl_schedules, kSchedulesHelp);
  scl->add_option("--framework", scl_opt.plan.framework, kFrameworkHelp)->check(CLI::IsMember({"megatron", "torchtitan", "deepspeed", "accelerate"}));
  scl->add_flag("--json", scl_json, "print the points as JSON");

  // sensitivity
  std::string sens_file;
  std::vector<std::string> sens_sets;
  double sens_factor = 1.1;
  bool sens_json = false, sens_estimate = false, sens_allow_oom = false;
  auto* sens = app.add_subcommand("sensitivity",
                                  "which hardware resource bounds a run's step: the step again with each resource (compute, HBM, node fabric, "
                                  "network, latency, kernel overhead, the host under CPU offload) better by a factor");
  sens->add_option("run", sens_file, "run file (JSON)")->required();
  sens->add_option("--set", sens_sets, set_help)->allow_extra_args(false);
  sens->add_option("--factor", sens_factor, "how much better each resource is made: rates x F, latencies / F (default 1.1)")
      ->check(finite_range(1.001, 10.0));
  sens->add_flag("--estimate", sens_estimate, "use the analytical estimate instead of simulating each step");
  sens->add_flag("--json", sens_json, "print the steps, changes and elasticities as JSON");
  sens->add_flag("--allow-oom", sens_allow_oom, "run even when the layout does not fit");

  // import
  std::string imp_framework, imp_args_file, imp_out;
  std::vector<std::string> imp_args;
  stepcast::config::ImportOptions imp_opt;
  std::string imp_config;
  auto* imp = app.add_subcommand("import", "a training framework's configuration as a run file (megatron: Megatron-LM / Megatron-Core launch "
                                           "arguments; deepspeed: a DeepSpeed config JSON; torchtitan: a job config TOML; accelerate: a Hugging Face "
                                           "Accelerate config YAML)");
  imp->add_option("framework", imp_framework, "megatron, deepspeed, torchtitan or accelerate")
      ->required()
      ->check(CLI::IsMember({"megatron", "deepspeed", "torchtitan", "accelerate"}));
  imp->add_option("--config", imp_config, "deepspeed: the DeepSpeed config JSON; torchtitan: the job config TOML; accelerate: the Accelerate config YAML")
      ->check(CLI::ExistingFile);
  imp->add_option("--seq", imp_opt.seq_len, "deepspeed, accelerate: sequence length")->check(count_range(1, kMaxCount));
  imp->add_option("--recompute", imp_opt.recompute, "deepspeed, accelerate: the model code's activation checkpointing")
      ->check(CLI::IsMember({"none", "selective", "full"}));
  imp->add_option("--micro-batch", imp_opt.micro_batch,
                  "accelerate: the per-device batch (required); deepspeed: fills train_micro_batch_size_per_gpu \"auto\"")
      ->check(count_range(1, kMaxCount));
  imp->add_option("--grad-accum", imp_opt.grad_accum, "accelerate, deepspeed (\"auto\"): gradient accumulation steps (default 1)")->check(count_range(1, kMaxCount));
  imp->add_option("--precision", imp_opt.precision, "deepspeed: fills bf16 / fp16 enabled \"auto\"")->check(CLI::IsMember({"bf16", "fp16", "fp32"}));
  imp->add_option("args", imp_args, "the framework's arguments, after -- (e.g. -- --num-layers 32 --hidden-size 4096 ...)");
  imp->add_option("--args-file", imp_args_file, "a launch script or text file holding the arguments (continuation lines, quotes, and the script's own variables and arrays expanded as the shell would)")
      ->check(CLI::ExistingFile);
  imp->add_option("--gpus", imp_opt.gpus, "GPUs of the job (default: torchrun's --nnodes x --nproc-per-node among the arguments)")
      ->check(count_range(1, kMaxCount));
  imp->add_option("--gpus-per-node", imp_opt.gpus_per_node, "GPUs per node (default: torchrun's --nproc-per-node, else the profile's)")
      ->check(count_range(1, 1024));
  imp->add_option("--hardware", imp_opt.hardware, "hardware profile the run file names (default h100-sxm)");
  imp->add_option("--model", imp_opt.model, "a zoo model or a model config file (megatron: instead of the architecture arguments; deepspeed: required)");
  imp->add_option("--out", imp_out, "write the run file here (default: print it)")->check(kOutputFile);

  // models / hardware
  auto* models = app.add_subcommand("models", "list the built-in model zoo, or describe one model (a zoo name or a model-hub config.json) as stepcast reads it");
  bool models_json = false;
  std::string models_name;
  models->add_flag("--json", models_json, "print as JSON");
  models->add_option("model", models_name, "a zoo name or a model config file (HuggingFace config.json): prints its shapes, layer kinds and parameter counts");
  auto* hardware = app.add_subcommand("hardware", "list built-in hardware profiles, or print one (a built-in, or a profile file checked)");
  std::string hw_name;
  hardware->add_option("name", hw_name, "profile to print as JSON: a built-in name, or a profile file (such as calibrate writes), checked first")
      ->check(CLI::Validator([](std::string& t) { return t.empty() ? std::string("an empty name; give a profile name") : std::string(); }, "NAME"));

  // accuracy
  stepcast::accuracy::AccuracyOptions acc;
  acc.data_path = std::string(STEPCAST_SOURCE_DIR) + "/data/published-runs.jsonl";
  auto* accuracy = app.add_subcommand("accuracy", "predict every published training run and report the error");
  accuracy->add_option("--data", acc.data_path, "published runs (JSON lines)");
  accuracy->add_option("--out", acc.report_path, "write the Markdown report here (e.g. reports/accuracy.md)")->check(kOutputFile);
  accuracy->add_option("--emit-runs", acc.runs_dir, "write each row's run file (with its assumptions) into this folder")->check(kOutputDir);
  bool acc_json = false;
  accuracy->add_flag("--plans", acc.compare_plans, "also compare the planner's best layout with each published layout");
  accuracy->add_flag("--json", acc_json, "print per-row results as JSON");

  // pcie-lab
  std::string lab_data = std::string(STEPCAST_SOURCE_DIR) + "/data/pcie-lab", lab_out;
  auto* lab = app.add_subcommand("pcie-lab", "reproduce the 8-GPU PCIe lab measurements from the hardware profile");
  lab->add_option("--data", lab_data, "lab data folder (collectives.csv, ddp_buckets.csv, gpipe_bubble.csv)");
  lab->add_option("--out", lab_out, "write the Markdown report here (e.g. reports/pcie-lab.md)")->check(kOutputFile);

  // plan
  RunFlags plan_run;
  std::string plan_csv_out;
  size_t plan_rows = 20;
  bool plan_json = false;
  std::vector<std::string> plan_fix;
  stepcast::plan::PlanOptions popt;
  auto* plan = app.add_subcommand("plan", "search every valid layout for a model on a GPU count and rank them");
  add_run_flags(plan, plan_run, true, "run file (JSON) whose parallel block is omitted or partly fixed");
  plan->add_option("--top", popt.top_k, "re-simulate this many of the best estimated layouts (0: estimate only)")
      ->check(CLI::Range(0, 1000));
  plan->add_option("--rows", plan_rows, "layouts to print")->check(CLI::Range(size_t{1}, size_t{1000000}));
  plan->add_option("--max-tp", popt.max_tp, "largest tensor-parallel size to consider")->check(count_range(1, kMaxCount));
  plan->add_option("--max-pp", popt.max_pp, "largest pipeline-parallel size to consider")->check(count_range(1, kMaxCount));
  plan->add_option("--max-cp", popt.max_cp, "largest context-parallel size to consider")->check(count_range(1, kMaxCount));
  plan->add_option("--max-mbs", popt.max_mbs, "largest micro-batch size to consider")->check(count_range(1, kMaxCount));
  plan->add_option("--fix", plan_fix, "fix a parallel setting, e.g. --fix pp=4 --fix recompute=full (repeatable)")->allow_extra_args(false);
  plan->add_option("--threads", popt.threads, "worker threads for the search (default: all cores)")->check(count_range(0, 4096));
  plan->add_option("--memory-headroom", popt.memory_headroom,
                   "share of GPU memory a layout must leave free beyond the ledger (allocator fragmentation), e.g. 0.1")
      ->check(finite_range(0.0, 0.9));
  plan->add_flag("--offload", popt.offload,
                 "also try CPU offload: the optimizer's on sharded layouts, the parameters' too under FSDP (needs the profile's host)");
  std::string plan_schedules;
  plan->add_option("--schedules", plan_schedules, kSchedulesHelp);
  plan->add_option("--framework", popt.framework, kFrameworkHelp)->check(CLI::IsMember({"megatron", "torchtitan", "deepspeed", "accelerate"}));
  plan->add_flag("--json", plan_json, "print the ranked layouts as JSON");
  plan->add_option("--csv", plan_csv_out, "also write the ranked layouts as CSV here")->check(kOutputFile);
  std::string plan_emit_run;
  plan->add_option("--emit-run", plan_emit_run,
                   "also write the best layout as a run file (the input run with its parallel block as ranked), for simulate, memory or export")
      ->check(kOutputFile);

  // capacity
  RunFlags cap_run;
  bool cap_json = false;
  stepcast::plan::SizingOptions sopt;
  sopt.plan.top_k = 3;
  auto* cap = app.add_subcommand("capacity", "size the cluster (whole nodes) that trains a token budget before a deadline");
  add_run_flags(cap, cap_run, false, "run file (JSON): model, hardware, training; the cluster size is chosen, and the layout too except keys its parallel block gives (they stay fixed, as in plan)");
  cap->add_option("--tokens", sopt.tokens, "token budget")->check(finite_range(1.0, 1e18));
  cap->add_option("--tokens-per-param", sopt.tokens_per_param, "token budget as tokens per parameter (e.g. 20)")->check(finite_range(1e-6, 1e6));
  cap->add_option("--days", sopt.target_days, "deadline in days of wall clock")->required()->check(finite_range(1e-6, 1e6));
  std::string cap_price;
  cap->add_option("--price", cap_price,
                  "price per GPU-hour (USD); with several --hardware profiles one price for all or NAME=USD for each, e.g. h100-sxm=2.5,b200=4");
  cap->add_option("--mfu", sopt.fixed_mfu, "use this fixed MFU instead of the simulated one (capacity-cases arithmetic)")
      ->check(finite_range(0.001, 1.0));
  cap->add_option("--max-gpus", sopt.max_gpus, "largest cluster to consider")->check(count_range(1, kMaxCount));
  cap->add_option("--margin", sopt.margin,
                  "safety margin: meet the deadline with every step this fraction slower than predicted, e.g. 0.1 "
                  "(reports/accuracy.md gives the prediction's error on published runs)")
      ->check(finite_range(0.0, 1.0));
  cap->add_option("--memory-headroom", sopt.plan.memory_headroom,
                  "share of GPU memory a layout must leave free beyond the ledger (allocator fragmentation), e.g. 0.1")
      ->check(finite_range(0.0, 0.9));
  cap->add_flag("--offload", sopt.plan.offload,
                "also try CPU offload: the optimizer's on sharded layouts, the parameters' too under FSDP (needs the profile's host)");
  std::string cap_schedules;
  cap->add_option("--schedules", cap_schedules, kSchedulesHelp);
  cap->add_option("--framework", sopt.plan.framework, kFrameworkHelp)->check(CLI::IsMember({"megatron", "torchtitan", "deepspeed", "accelerate"}));
  std::string cap_storage_bw, cap_restart, cap_checkpoint_time;
  cap->add_flag("--goodput", sopt.size_for_goodput,
                "size for the expected wall clock with failures, checkpoints and restarts (always estimated and printed)");
  cap->add_option("--mtbf-gpu-hours", sopt.reliability.gpu_mtbf_hours,
                  "GPU-hours between job-interrupting failures per GPU (default 50677: Llama 3's 419 interruptions in 54 days on 16,384 GPUs)")
      ->check(finite_range(1e-3, 1e12));
  cap->add_option("--storage-bw", cap_storage_bw, "checkpoint storage bandwidth of the whole cluster, written and read, e.g. 200GB/s (default 122MB/s per GPU: Llama 3's 2TB/s over 16,384 GPUs)")
      ->check(quantity(stepcast::core::parse_bandwidth, "200GB/s", false));
  cap->add_option("--restart", cap_restart, "time from a failure to relaunched training before the checkpoint is read, e.g. 15min (default 10min)")
      ->check(quantity(stepcast::core::parse_duration, "15min", true));
  cap->add_option("--checkpoint-time", cap_checkpoint_time,
                  "time a checkpoint stalls training, e.g. 5s for asynchronous saves (default: checkpoint bytes / --storage-bw)")
      ->check(quantity(stepcast::core::parse_duration, "5s", true));
  cap->add_option("--checkpoint-every", sopt.reliability.checkpoint_every_steps, "checkpoint every N steps (default: Daly's optimum)")
      ->check(count_range(1, kMaxCount));
  cap->add_flag("--json", cap_json, "print the result as JSON");

  // sweep
  std::string sweep_file, sweep_out;
  bool sweep_resume = false;
  auto* sweep = app.add_subcommand("sweep", "predict every point of a sweep over run-file fields (JSONL out; mpirun splits the points)");
  sweep->add_option("sweep", sweep_file, "sweep file (JSON: base, axes, mode)")->required();
  sweep->add_option("--out", sweep_out, "results (JSON lines, one per point, sorted by point)")->required()->check(kOutputFile);
  sweep->add_flag("--resume", sweep_resume, "skip the points already in the results (and part files of a killed run)");

  // calibrate
  std::string cal_backend = "cpu", cal_out, cal_report, cal_html;
  double cal_budget = 0.4;
  bool cal_resume = false;
  auto* cal = app.add_subcommand("calibrate", "measure this machine (GEMMs, memory, collectives) into a hardware profile");
  cal->add_option("--backend", cal_backend, "cpu (Eigen + MPI) or cuda (cuBLAS + NCCL)")->check(CLI::IsMember({"cpu", "cuda"}));
  cal->add_option("--out", cal_out, "write the measured hardware profile (JSON) here")->required()->check(kOutputFile);
  cal->add_option("--report", cal_report, "write a Markdown report (fit and held-out comparison) here")->check(kOutputFile);
  cal->add_option("--html", cal_html, "write an HTML report (roofline, collective bandwidth by size, held-out table) here")->check(kOutputFile);
  cal->add_flag("--resume", cal_resume,
                "reuse the measurements an interrupted run of the same calibration recorded in OUT.journal (the journal is removed once "
                "the profile is written)");
  cal->add_option("--budget", cal_budget, "time budget per benchmark in seconds (adaptive stopping)")->check(finite_range(0.01, 60.0));
  double cal_time_limit = -1;
  cal->add_option("--time-limit", cal_time_limit,
                  "whole-run limit in seconds after which the optional GPU benchmarks (other dtypes, attention, smaller groups, "
                  "interference) are skipped; default 360 for cuda, none for cpu; 0: none")
      ->check(finite_range(0.0, 86400.0));

  // report
  std::string rep_in, rep_html, rep_md, rep_csv;
  auto* rep = app.add_subcommand("report", "render plan, sweep or validate results as HTML (inline SVG plots), Markdown and CSV");
  rep->add_option("results", rep_in, "results: the JSON of `stepcast plan --json` or `validate --json`, or a sweep's JSONL")->required();
  rep->add_option("--html", rep_html, "write the self-contained HTML page here")->check(kOutputFile);
  rep->add_option("--md", rep_md, "write a Markdown table here")->check(kOutputFile);
  rep->add_option("--csv", rep_csv, "write a CSV table here")->check(kOutputFile);

  // validate
  ValidateArgs va;
  auto* val = app.add_subcommand("validate", "execute plans on this machine (CPU: Eigen + MPI, one process per rank) and compare with the prediction");
  val->add_option("runs", va.files, "run files (all with the same cluster.num_gpus)")->required();
  val->add_option("--backend", va.backend, "cpu (Eigen + MPI) or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  val->add_option("--profile", va.profile, "measured hardware profile (stepcast calibrate) replacing the run files' hardware");
  val->add_option("--steps", va.steps, "measured steps after warm-up, in each round")->check(CLI::Range(1, 1000));
  val->add_option("--warmup", va.warmup, "warm-up steps (not measured), in each round")->check(CLI::Range(0, 100));
  val->add_option("--rounds", va.rounds,
                  "execute the plans this many times in turn (each time every plan, with its warm-up and --steps measured steps); a "
                  "plan's median is over the steps of every round, so a slow spell of the machine falls on few steps of each plan")
      ->check(CLI::Range(1, 100));
  val->add_option("--timeout", va.timeout_s, "seconds without progress on a rank before the run is ended")->check(finite_range(1.0, 86400.0));
  val->add_flag("--json", va.json, "print the comparison as JSON");
  val->add_flag("--resume", va.resume,
                "take the plans an interrupted run finished from its journal (beside --out, else --report) and run the rest");
  val->add_option("--out", va.json_out, "write the comparison JSON here")->check(kOutputFile);
  val->add_option("--report", va.report, "write a Markdown report (predicted vs measured, per phase and memory) here")->check(kOutputFile);
  val->add_option("--trace", va.trace, "write the measured step of the last plan as a Perfetto / Chrome trace")->check(kOutputFile);
  val->add_option("--max-median-error", va.max_median_error, "exit 1 when the median absolute step-time error over the plans exceeds this fraction")->check(finite_range(0.0, 10.0));
  val->add_option("--max-error", va.max_error, "exit 1 when any plan's absolute step-time error exceeds this fraction")->check(finite_range(0.0, 10.0));
  val->add_option("--max-memory-error", va.max_memory_error, "exit 1 when any rank's peak-memory error exceeds this fraction")->check(finite_range(0.0, 10.0));
  val->add_option("--sim-trace", va.sim_trace, "write the simulated step of the last plan as a Perfetto / Chrome trace")->check(kOutputFile);

  // A first word that is no command gets named (CLI11 would say only that one is required).
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const CLI::App* sc : app.get_subcommands([](const CLI::App*) { return true; })) {
      known = known || sc->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + sc->get_name();
    }
    if (!known) {
      std::cerr << "stepcast: error: unknown command '" << argv[1] << "'; commands: " << names << " (run with --help for usage)\n";
      return kExitBadInput;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Bad command lines are bad input like bad run files: one message, exit code 2.
    std::cerr << "stepcast: error: " << cli_message(e.what()) << " (run with --help for usage)\n";
    return kExitBadInput;
  }

  if (cal->parsed()) {
#ifndef STEPCAST_HAVE_CUDA
    if (cal_backend == "cuda") {
      throw stepcast::core::UserError("calibrate --backend cuda: this build has no CUDA backend (nvcc, cuBLAS or NCCL were not found at configure time); use --backend cpu");
    }
#endif
    int rank = 0, size = 1;
#ifdef STEPCAST_HAVE_MPI
    if (launched_by_mpi()) {
      MPI_Init(&argc, &argv);
      g_mpi_active = true;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      MPI_Comm_size(MPI_COMM_WORLD, &size);
    }
#endif
    stepcast::calibrate::SuiteOptions so;
    so.budget_per_benchmark_s = cal_budget;
    so.time_limit_s = cal_time_limit >= 0 ? cal_time_limit : (cal_backend == "cuda" ? 360.0 : 0.0);
    so.command = cmdline;
    so.progress = [](const std::string& line) {
      std::fprintf(stderr, "calibrate: %s\n", line.c_str());
      std::fflush(stderr);
    };
    // Every measurement is journalled beside the profile as it is taken; --resume reuses an
    // interrupted run's (calibrate/journal.hpp).
    // (None for an output that is a device or pipe.)
    std::error_code out_ec;
    if (!std::filesystem::exists(cal_out, out_ec) || std::filesystem::is_regular_file(cal_out, out_ec)) so.journal_path = cal_out + ".journal";
    if (rank == 0 && !so.journal_path.empty()) {
      so.journal_previous = stepcast::core::previous_journal(so.journal_path, cal_resume, "an interrupted calibration's measurements");
      if (cal_resume && so.journal_previous.empty()) so.progress("--resume: no journal at " + so.journal_path + "; calibrating from the start");
    }
#ifdef STEPCAST_HAVE_CUDA
    const auto r = cal_backend == "cuda" ? stepcast::calibrate::run_cuda_suite(rank, size, so) : stepcast::calibrate::run_cpu_suite(rank, size, so);
#else
    const auto r = stepcast::calibrate::run_cpu_suite(rank, size, so);
#endif
    if (rank == 0) {
      write_text(cal_out, r.profile.dump(2) + "\n");
      const std::string md = stepcast::calibrate::suite_markdown(r);
      if (!cal_report.empty()) write_text(cal_report, md);
      if (!cal_html.empty()) write_text(cal_html, stepcast::calibrate::suite_html(r));
      std::error_code ec;
      if (!so.journal_path.empty()) std::filesystem::remove(so.journal_path, ec);  // the profile holds every measurement now
      std::cout << md;
    }
#ifdef STEPCAST_HAVE_MPI
    if (g_mpi_active) MPI_Finalize();
    g_mpi_active = false;
#endif
    return 0;
  }
  if (val->parsed()) return run_validate(va, argc, argv, cmdline);
  if (rep->parsed()) {
    std::error_code ec;
    if (std::filesystem::is_directory(rep_in, ec)) throw stepcast::core::UserError(rep_in + ": is a directory; give the plan JSON or sweep JSONL file");
    const auto data = stepcast::report::load_report_data(stepcast::core::load_text_file(rep_in), rep_in);
    if (rep_html.empty() && rep_md.empty() && rep_csv.empty()) {
      std::cout << stepcast::report::render_markdown(data);
      return 0;
    }
    if (!rep_html.empty()) write_text(rep_html, stepcast::report::render_html(data));
    if (!rep_md.empty()) write_text(rep_md, stepcast::report::render_markdown(data));
    if (!rep_csv.empty()) write_text(rep_csv, stepcast::report::render_csv(data));
    if (data.validation.is_object()) {
      std::printf("report: %zu validated plans from %s\n", data.validation["plans"].size(), rep_in.c_str());
    } else if (!data.table.columns.empty()) {
      std::printf("report: %zu rows from %s\n", data.table.rows.size(), rep_in.c_str());
    } else {
      std::printf("report: %zu layouts from %s\n", data.rows.size(), rep_in.c_str());
    }
    return 0;
  }
  if (sweep->parsed()) {
    const auto spec = stepcast::sweep::load_sweep_file(sweep_file);
    stepcast::sweep::RunOptions ro;
    ro.out = sweep_out;
    ro.resume = sweep_resume;
#ifdef STEPCAST_HAVE_MPI
    if (launched_by_mpi()) {
      MPI_Init(&argc, &argv);
      g_mpi_active = true;
      MPI_Comm_rank(MPI_COMM_WORLD, &ro.rank);
      MPI_Comm_size(MPI_COMM_WORLD, &ro.size);
      ro.barrier = [] { MPI_Barrier(MPI_COMM_WORLD); };
    }
#else
    if (launched_by_mpi()) std::cerr << "stepcast: warning: built without MPI; every rank would run the whole sweep, so rank-split is off\n";
#endif
    const bool tty = ::isatty(2) != 0;
    const auto t0 = std::chrono::steady_clock::now();
    const int rank = ro.rank, size = ro.size;
    ro.progress = [tty, t0, rank, size](size_t done, size_t total) {
      if (rank != 0) return;
      const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double rate = el > 0 ? static_cast<double>(done) / el : 0.0;
      const double eta = rate > 0 ? static_cast<double>(total - done) / rate : 0.0;
      if (tty) {
        const int width = 30, fill = static_cast<int>(width * static_cast<double>(done) / static_cast<double>(std::max<size_t>(1, total)));
        std::fprintf(stderr, "\r[%.*s%*s] %zu/%zu points (rank 0 of %d), %.1f/s, ETA %.0f s", fill,
                     "##############################", width - fill, "", done, total, size, rate, eta);
        if (done == total) std::fprintf(stderr, "\n");
      } else if (done == total || done % std::max<size_t>(1, total / 10) == 0) {
        std::fprintf(stderr, "stepcast sweep: %zu/%zu points (rank 0 of %d), %.1f/s, ETA %.0f s\n", done, total, size, rate, eta);
      }
      std::fflush(stderr);
    };
    const auto sum = stepcast::sweep::run_sweep(spec, ro);
    if (ro.rank == 0) {
      std::printf("sweep: %zu points, %zu already done, %zu evaluated by rank 0 (%zu ok); results in %s\n", sum.points, sum.skipped,
                  sum.evaluated, sum.ok, sweep_out.c_str());
    }
#ifdef STEPCAST_HAVE_MPI
    if (g_mpi_active) MPI_Finalize();
    g_mpi_active = false;
#endif
    return 0;
  }
  if (cap->parsed()) {
    Json run = run_from_flags(cap_run, "capacity", false);
    if (!cap_schedules.empty()) sopt.plan.schedules = stepcast::plan::parse_schedules(cap_schedules, "--schedules");
    stepcast::plan::apply_framework(sopt.plan, "--framework");
    if (sopt.tokens > 0 && sopt.tokens_per_param > 0) throw stepcast::core::UserError("capacity: give --tokens or --tokens-per-param, not both");
    // Checked by their validators when parsed.
    if (!cap_storage_bw.empty()) sopt.reliability.storage_bytes_per_s = stepcast::core::parse_bandwidth(cap_storage_bw).value();
    if (!cap_restart.empty()) sopt.reliability.restart_overhead_s = stepcast::core::parse_duration(cap_restart).value();
    if (!cap_checkpoint_time.empty()) sopt.reliability.checkpoint_save_s = stepcast::core::parse_duration(cap_checkpoint_time).value();
    // A terminal sees which cluster size is being searched and how far, on one erased line.
    const bool cap_tty = ::isatty(2) != 0;
    auto searching = std::make_shared<int64_t>(0);
    if (cap_tty) {
      sopt.on_search = [searching](int64_t gpus, int) { *searching = gpus; };
      sopt.plan.progress = [searching](const char* phase, size_t done, size_t total) {
        std::fprintf(stderr, "\r\033[Kstepcast capacity: %lld GPUs: %s %zu of %s%zu layouts", static_cast<long long>(*searching), phase,
                     done, std::strcmp(phase, "simulating") == 0 ? "up to " : "", total);
        std::fflush(stderr);
      };
    }
    // Several profiles (--hardware a,b,c): the budget sized on each, side by side.
    std::vector<std::string> profiles;
    {
      std::stringstream in(cap_run.hardware);
      for (std::string h; std::getline(in, h, ',');) profiles.push_back(h);
    }
    const std::vector<std::string> priced = profiles.empty() ? std::vector<std::string>{"*"} : profiles;
    const auto prices = stepcast::plan::parse_prices(cap_price, priced);
    if (profiles.size() > 1) {
      std::vector<stepcast::plan::HardwareSizing> all;
      for (const auto& h : profiles) {
        if (std::count(profiles.begin(), profiles.end(), h) > 1) throw stepcast::core::UserError("--hardware: " + h + " is given twice");
        stepcast::plan::HardwareSizing hs;
        hs.hardware = h;
        hs.usd_per_gpu_hour = prices.at(h);
        RunFlags one = cap_run;
        one.hardware = h;
        stepcast::plan::SizingOptions o = sopt;
        o.usd_per_gpu_hour = hs.usd_per_gpu_hour;
        try {
          const EraseLine erase{cap_tty};
          hs.result = stepcast::plan::size_for_deadline(run_from_flags(one, "capacity", false), one.source, one.base_dir, o);
          hs.ok = true;
        } catch (const stepcast::core::UserError& e) {
          hs.error = e.what();
        }
        all.push_back(std::move(hs));
      }
      if (cap_json) {
        std::cout << stepcast::plan::sizing_comparison_json(all).dump(2) << "\n";
      } else {
        std::cout << stepcast::plan::sizing_comparison_text(all);
      }
      const bool any = std::any_of(all.begin(), all.end(), [](const auto& h) { return h.ok && h.result.met; });
      if (!any) {
        std::cerr << "stepcast: capacity: no hardware profile meets the deadline (up to --max-gpus " << sopt.max_gpus << ")\n";
        return kExitDoesNotFit;
      }
      return 0;
    }
    sopt.usd_per_gpu_hour = prices.at(priced.front());
    const auto r = [&] {
      const EraseLine erase{cap_tty};
      return stepcast::plan::size_for_deadline(run, cap_run.source, cap_run.base_dir, sopt);
    }();
    if (cap_json) {
      std::cout << stepcast::plan::sizing_json(r).dump(2) << "\n";
    } else {
      std::cout << stepcast::plan::sizing_text(r);
    }
    if (!r.met) {
      // Like a layout that does not fit: the answer is printed, and the exit code says it is not one.
      std::cerr << "stepcast: capacity: the deadline is not met by any cluster considered (up to --max-gpus " << sopt.max_gpus
                << ", and at most 8 GPUs per sequence of the global batch); the figures above are the largest one's\n";
      return kExitDoesNotFit;
    }
    return 0;
  }
  if (plan->parsed()) {
    Json run = run_from_flags(plan_run, "plan", true);
    std::set<std::string> fixed_keys;
    for (const auto& f : plan_fix) {
      const auto eq = f.find('=');
      if (eq == std::string::npos || eq == 0) throw stepcast::core::UserError("--fix " + f + ": expected KEY=VALUE, e.g. pp=4");
      const std::string key = f.substr(0, eq), val = f.substr(eq + 1);
      if (!fixed_keys.insert(key).second) throw stepcast::core::UserError("--fix " + f + ": " + key + " is fixed twice; give it once");
      const Json v = stepcast::core::setting_value(val);
      // A group size that cannot tile the GPUs leaves nothing to search: say so, not "no layout fits".
      const Json& gpus = run["cluster"]["num_gpus"];
      if ((key == "tp" || key == "pp" || key == "cp" || key == "dp") && v.is_number_integer() && v.get<int64_t>() > 0 &&
          gpus.is_number_integer() && gpus.get<int64_t>() % v.get<int64_t>() != 0) {
        throw stepcast::core::UserError("--fix " + f + ": " + key + " " + val + " does not divide the " + gpus.dump() + " GPUs");
      }
      run["parallel"][key] = v;
    }
    if (!plan_schedules.empty()) popt.schedules = stepcast::plan::parse_schedules(plan_schedules, "--schedules");
    stepcast::plan::apply_framework(popt, "--framework");
    popt.keep = plan_rows;  // the rows printed (at least what the re-simulation and explanation use)
    // A terminal sees the search's progress on one line, erased when the search ends.
    const bool plan_tty = ::isatty(2) != 0;
    if (plan_tty) {
      popt.progress = [](const char* phase, size_t done, size_t total) {
        std::fprintf(stderr, "\r\033[Kstepcast plan: %s %zu of %s%zu layouts", phase, done,
                     std::strcmp(phase, "simulating") == 0 ? "up to " : "", total);
        std::fflush(stderr);
      };
    }
    const auto r = [&] {
      const EraseLine erase{plan_tty};
      return stepcast::plan::plan(run, plan_run.source, plan_run.base_dir, popt);
    }();
    if (!plan_csv_out.empty()) write_text(plan_csv_out, stepcast::plan::plan_csv(r, plan_rows));
    if (!plan_emit_run.empty() && !r.ranked.empty()) {
      // The input run with the best layout's settings over its parallel block (what the run file
      // fixed stays), and its model and hardware files by absolute path.
      Json best = run;
      const Json ranked = stepcast::plan::plan_json(r, 1)["layouts"][0]["parallel"];
      if (!best.contains("parallel") || !best["parallel"].is_object()) best["parallel"] = Json::object();
      best["parallel"].update(ranked);
      for (const char* k : {"model", "hardware"}) {
        if (best.contains(k) && best[k].is_object() && best[k].contains("path") && best[k]["path"].is_string() &&
            std::filesystem::path(best[k]["path"].get<std::string>()).is_relative()) {
          best[k]["path"] = (std::filesystem::absolute(plan_run.base_dir) / best[k]["path"].get<std::string>()).lexically_normal().string();
        }
      }
      write_text(plan_emit_run, best.dump(2) + "\n");
    }
    if (plan_json) {
      Json j = stepcast::plan::plan_json(r, plan_rows);
      j.update(stepcast::report::provenance_json(cmdline));
      if (!popt.framework.empty()) j["framework"] = popt.framework;
      j["title"] = run["model"].is_string() ? run["model"].get<std::string>() + " on " + run["cluster"]["num_gpus"].dump() + " GPUs"
                                            : plan_run.source;
      if (!r.ranked.empty()) j["detail"] = stepcast::plan::plan_detail(r.ranked.front());
      std::cout << j.dump(2) << "\n";
    } else {
      std::cout << stepcast::plan::plan_table(r, plan_rows);
      // The frameworks whose layouts the planner costs through their own runtime.
      static const std::map<std::string, std::pair<const char*, const char*>> kCosted = {
          {"torchtitan", {"torchtitan", "FSDP2 with fp32 sharded parameters and reductions, SDPA's FlashAttention-2, its loss and pipeline buffers"}},
          {"deepspeed", {"DeepSpeed", "ZeRO's gradient dtype and buckets, its BF16 optimizer, its overlap defaults and in-step parameter gathers"}},
          {"accelerate", {"Accelerate", "its FSDP mixed precision, the models' SDPA attention"}}};
      if (const auto it = kCosted.find(popt.framework); it != kCosted.end() && !r.ranked.empty()) {
        std::printf("Every layout is costed as %s runs it (%s): what `export %s` of the --emit-run file, imported back, estimates.\n",
                    it->second.first, it->second.second, popt.framework.c_str());
      }
    }
    if (r.ranked.empty()) {
      // Name the commonest reason, with one layout's full message when it was invalid.
      std::string why;
      // Layouts that were valid but did not fit settle it: memory is the reason, however many
      // other layouts a field refused (with one GPU and one sequence, the micro-batches larger
      // than the batch outnumber the two layouts that are merely too big).
      auto most = r.rejected.find("does not fit in memory");
      if (most == r.rejected.end()) {
        most = std::max_element(r.rejected.begin(), r.rejected.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
      }
      // Layouts refused mostly for a field outside the layout (the model, training, cluster or
      // hardware), none of them for memory: the input is bad, whatever the layout.
      if (most != r.rejected.end() && most->first.rfind("invalid $.", 0) == 0 && most->first.rfind("invalid $.parallel", 0) != 0) {
        const auto ex = r.rejected_example.find(most->first);
        throw stepcast::core::UserError(plan_run.source + ": " + (ex == r.rejected_example.end() ? most->first : ex->second.message));
      }
      if (most != r.rejected.end()) {
        why = "; " + std::to_string(most->second) + " of " + std::to_string(r.enumerated) + " layouts: " + most->first;
        if (const auto ex = r.rejected_example.find(most->first); ex != r.rejected_example.end()) {
          why += " (e.g. " + ex->second.layout + ": " + ex->second.message + ")";
        }
      } else if (r.enumerated == 0) {
        why = "; no layout could be formed from the fixed settings";
      }
      if (const auto& l = r.lightest_rejected; l && most != r.rejected.end() && most->first == "does not fit in memory") {
        why += "; " + l->text() + " (stepcast capacity sizes the cluster" + (r.offload_untried ? "; --offload also tries CPU offload" : "") + ")";
      }
      std::cerr << "stepcast: error: " << plan_run.source << ": no layout fits on " << run["cluster"]["num_gpus"].dump() << " GPUs" << why << "\n";
      return kExitDoesNotFit;
    }
    return 0;
  }
  if (lab->parsed()) {
    const auto r = stepcast::lab::run_pcie_lab(lab_data);
    if (!lab_out.empty()) write_text(lab_out, r.markdown);
    std::cout << r.markdown;
    std::cout << "checks passed: " << r.passed << " of " << r.checks << "\n";
    return 0;
  }

  if (est->parsed()) {
    Json balanced;
    const auto rc = est_balanced ? with_balanced_split(stepcast::config::load_run_file(est_file, run_sets), balanced)
                                 : stepcast::config::load_run_file(est_file, run_sets);
    const auto e = stepcast::estimate::estimate_step(rc);
    if (!fits_or_says(rc, e.memory, est_allow_oom, rc.source_name)) return kExitDoesNotFit;
    if (est_json) {
      auto j = stepcast::report::estimate_json(rc, e, cmdline);
      if (est_balanced) j["balanced_split"] = balanced;
      if (est_ops) j["operators"] = stepcast::report::operator_json(rc);
      std::cout << j.dump(2) << "\n";
    } else {
      if (est_balanced) std::cout << balanced_split_text(balanced);
      std::cout << stepcast::report::estimate_table(rc, e);
      if (est_ops) std::cout << stepcast::report::operator_table(rc);
    }
    return 0;
  }
  if (cmp->parsed()) {
    if (cmp_files.size() == 1 && cmp_sets_b.empty() && cmp_sets_a.empty()) {
      throw stepcast::core::UserError("compare: give two run files, or one with --set-b changes to compare it against");
    }
    const std::string file_b = cmp_files.size() == 2 ? cmp_files[1] : cmp_files[0];
    // Each side is called by its file and the changes made to it.
    auto name = [](const std::string& file, const std::vector<std::string>& sets) {
      std::string n = file;
      for (const auto& x : sets) n += " " + x;
      return n;
    };
    const std::string name_a = name(cmp_files[0], cmp_sets_a), name_b = name(file_b, cmp_sets_b);
    const auto rc_a = stepcast::config::load_run_file(cmp_files[0], cmp_sets_a);
    const auto rc_b = stepcast::config::load_run_file(file_b, cmp_sets_b);
    if (!fits_or_says(rc_a, stepcast::memory::compute_ledger(rc_a), cmp_allow_oom, "compare: A (" + name_a + ")") ||
        !fits_or_says(rc_b, stepcast::memory::compute_ledger(rc_b), cmp_allow_oom, "compare: B (" + name_b + ")")) {
      return kExitDoesNotFit;
    }
    const auto a = stepcast::plan::evaluate_side(rc_a, name_a, !cmp_estimate);
    const auto b = stepcast::plan::evaluate_side(rc_b, name_b, !cmp_estimate);
    if (cmp_json) {
      std::cout << stepcast::plan::compare_json(a, b, cmdline).dump(2) << "\n";
    } else {
      std::cout << stepcast::plan::compare_table(a, b);
    }
    return 0;
  }
  if (scl->parsed()) {
    Json run = run_from_flags(scl_run, "scaling", false);
    if (!scl_schedules.empty()) scl_opt.plan.schedules = stepcast::plan::parse_schedules(scl_schedules, "--schedules");
    stepcast::plan::apply_framework(scl_opt.plan, "--framework");
    if (scl_opt.tokens > 0 && scl_opt.tokens_per_param > 0) throw stepcast::core::UserError("scaling: give --tokens or --tokens-per-param, not both");
    std::vector<int64_t> counts;
    {
      std::stringstream in(scl_gpus);
      for (std::string c; std::getline(in, c, ',');) {
        std::string text = c;
        if (!count_range(1, kMaxCount)(text).empty()) throw stepcast::core::UserError("--gpus: got '" + c + "'; expected GPU counts such as 64,128,256");
        counts.push_back(std::stoll(c));
      }
    }
    const bool tty = ::isatty(2) != 0;
    auto searching = std::make_shared<int64_t>(0);
    if (tty) {
      scl_opt.on_search = [searching](int64_t gpus, int) { *searching = gpus; };
      scl_opt.plan.progress = [searching](const char* phase, size_t done, size_t total) {
        std::fprintf(stderr, "\r\033[Kstepcast scaling: %lld GPUs: %s %zu of %s%zu layouts", static_cast<long long>(*searching), phase, done,
                     std::strcmp(phase, "simulating") == 0 ? "up to " : "", total);
        std::fflush(stderr);
      };
    }
    const auto pts = [&] {
      const EraseLine erase{tty};
      return stepcast::plan::scaling(run, scl_run.source, scl_run.base_dir, counts, scl_opt);
    }();
    if (scl_json) {
      Json j = stepcast::report::provenance_json(cmdline);
      j.update(stepcast::plan::scaling_json(pts));
      std::cout << j.dump(2) << "\n";
    } else {
      std::cout << stepcast::plan::scaling_text(pts);
    }
    const bool any = std::any_of(pts.begin(), pts.end(), [](const auto& p) { return p.ok; });
    return any ? 0 : kExitDoesNotFit;
  }
  if (sens->parsed()) {
    const auto rc = stepcast::config::load_run_file(sens_file, sens_sets);
    if (!fits_or_says(rc, stepcast::memory::compute_ledger(rc), sens_allow_oom, rc.source_name)) return kExitDoesNotFit;
    const auto s = stepcast::plan::sensitivity(rc, sens_file, sens_factor, !sens_estimate);
    if (sens_json) {
      std::cout << stepcast::plan::sensitivity_json(s, cmdline).dump(2) << "\n";
    } else {
      std::cout << stepcast::plan::sensitivity_text(s);
    }
    return 0;
  }
  if (sim->parsed()) {
    Json balanced;
    const auto rc = sim_balanced ? with_balanced_split(stepcast::config::load_run_file(sim_file, run_sets), balanced)
                                 : stepcast::config::load_run_file(sim_file, run_sets);
    const auto ledger = stepcast::memory::compute_ledger(rc);
    if (!fits_or_says(rc, ledger, sim_allow_oom, rc.source_name)) return kExitDoesNotFit;
    stepcast::engine::SimOptions opt;
    opt.full = sim_full;
    opt.ideal = sim_ideal;
    opt.max_tasks = sim_max_tasks;
    opt.keep_timeline = !sim_trace.empty();
    const bool sim_tty = ::isatty(2) != 0;
    if (sim_full || rc.scenario.present) {
      // Every rank simulated: large clusters take seconds, so report progress on stderr: a
      // terminal sees one line with the share done, a log one line per phase.
      opt.progress = [tty = sim_tty, last = std::string()](const char* phase, double f) mutable {
        if (tty) {
          std::fprintf(stderr, "\r\033[Kstepcast: %s %3.0f%%", phase, 100.0 * f);
        } else if (last != phase) {
          last = phase;
          std::fprintf(stderr, "stepcast: %s\n", phase);
        }
        std::fflush(stderr);
      };
    }
    for (int64_t x : sim_trace_ranks) {  // before the simulation, which can take seconds
      if (x < 0 || x >= rc.cluster.num_gpus) {
        throw stepcast::core::UserError("--trace-ranks: rank " + std::to_string(x) + " does not exist (ranks 0.." +
                                        std::to_string(rc.cluster.num_gpus - 1) + ")");
      }
    }
    const auto r = stepcast::engine::simulate_step(rc, opt);
    if (opt.progress) {
      std::fprintf(stderr, "%sstepcast: simulated %lld ranks, %zu tasks\n", sim_tty ? "\r\033[K" : "",
                   static_cast<long long>(r.ranks_simulated), r.tasks);
    }
    if (!sim_trace.empty()) {
      std::vector<int64_t> ranks = sim_trace_ranks;
      if (ranks.empty() && r.full) {
        // Every rank simulated: keep the trace readable with one rank per stage.
        const int64_t per_stage = rc.parallel.tp * rc.parallel.cp * rc.parallel.dp;
        for (int64_t s = 0; s < rc.parallel.pp; ++s) ranks.push_back(s * per_stage);
      }
      write_text(sim_trace, stepcast::engine::trace_json(rc, r, ranks, sim_trace_ops));
    }
    if (sim_json) {
      Json j = stepcast::report::simulate_json(rc, r, cmdline);
      if (sim_balanced) j["balanced_split"] = balanced;
      std::cout << j.dump(2) << "\n";
    } else {
      if (sim_balanced) std::cout << balanced_split_text(balanced);
      std::cout << stepcast::report::simulate_table(rc, r);
    }
    return 0;
  }
  if (exp->parsed()) {
    const auto rc = stepcast::config::load_run_file(exp_file, run_sets);
    // A launch command for a layout that runs out of memory is refused as estimate refuses it.
    if (!fits_or_says(rc, stepcast::memory::compute_ledger(rc), exp_allow_oom, rc.source_name)) return kExitDoesNotFit;
    std::string text;
    if (exp_framework != "megatron") {
      const auto cfg = exp_framework == "torchtitan" ? stepcast::config::export_torchtitan(rc)
                       : exp_framework == "deepspeed" ? stepcast::config::export_deepspeed(rc)
                                                      : stepcast::config::export_accelerate(rc);
      if (exp_json) {
        text = Json{{"framework", cfg.framework}, {"model", cfg.model}, {"config", cfg.tables}, {"notes", cfg.notes}}.dump(2) + "\n";
      } else if (exp_framework == "torchtitan") {
        text = stepcast::config::toml_text(cfg);
      } else if (exp_framework == "accelerate") {
        text = stepcast::config::yaml_text(cfg);
      } else {
        // JSON holds no comments: the notes go beside the config (stderr when it is printed).
        text = stepcast::config::json_config_text(cfg);
        std::ostream& notes = exp_out.empty() ? std::cerr : std::cout;
        for (const auto& n : cfg.notes) notes << "# " << n << "\n";
      }
    } else {
      const auto cmd = stepcast::config::export_megatron(rc);
      text = exp_json ? Json{{"framework", cmd.framework}, {"launcher", cmd.launcher}, {"args", cmd.args}, {"notes", cmd.notes}}.dump(2) + "\n"
                      : stepcast::config::shell_text(cmd);
    }
    if (exp_out.empty()) {
      std::cout << text;
    } else {
      write_text(exp_out, text);
    }
    return 0;
  }
  if (mem->parsed()) {
    const auto rc = stepcast::config::load_run_file(mem_file, run_sets);
    const auto l = stepcast::memory::compute_ledger(rc);
    // Why it does not fit and the split that would make it fit, worked out once.
    const std::optional<SplitFit> split = l.peak() > l.capacity ? fitting_split(rc) : std::nullopt;
    const std::string why = l.fits() ? std::string() : fit_message(rc, l, split);
    if (mem_json) {
      Json j = stepcast::report::ledger_json(l);
      j["run"] = stepcast::report::run_summary_json(rc);
      if (!l.fits()) {
        // What stderr says, for scripts: by how much, and the lightest recomputation that fits.
        j["overshoot_bytes"] = l.peak().value() - l.capacity.value();
        j["does_not_fit"] = why;
        if (split) j["fits_with_stage_layers"] = split->layers;
      }
      std::cout << j.dump(2) << "\n";
    } else {
      std::cout << stepcast::report::ledger_table(rc, l);
    }
    if (!l.fits()) {
      std::cerr << "stepcast: " << rc.source_name << ": " << why << "\n";
      return kExitDoesNotFit;
    }
    return 0;
  }
  if (imp->parsed()) {
    Json run;
    if (imp_framework != "megatron" && imp_config.empty()) throw stepcast::core::UserError("import " + imp_framework + ": --config: required");
    if (imp_framework == "deepspeed") {
      run = stepcast::config::import_deepspeed(stepcast::core::load_json_file(imp_config), imp_config, imp_opt);
    } else if (imp_framework == "torchtitan") {
      run = stepcast::accuracy::import_torchtitan(stepcast::config::parse_toml(stepcast::core::load_text_file(imp_config), imp_config), imp_config, imp_opt);
    } else if (imp_framework == "accelerate") {
      run = stepcast::config::import_accelerate(stepcast::config::parse_yaml(stepcast::core::load_text_file(imp_config), imp_config), imp_config, imp_opt);
    } else {
      std::vector<std::string> words = imp_args;
      if (!imp_args_file.empty()) {
        const auto more = stepcast::config::split_command_line(stepcast::core::load_text_file(imp_args_file));
        words.insert(words.begin(), more.begin(), more.end());
      }
      if (words.empty()) throw stepcast::core::UserError("import: no arguments: give them after -- or with --args-file");
      run = stepcast::config::import_megatron(words, imp_opt);
    }
    // The file must load as it is written: the validator's verdict, naming the run file's field.
    (void)stepcast::config::parse_run(run, "the imported run", "");
    const std::string text = run.dump(2) + "\n";
    if (imp_out.empty()) {
      std::cout << text;
    } else {
      write_text(imp_out, text);
    }
    if (run.contains("notes")) std::cerr << "stepcast: import: " << run["notes"].get<std::string>() << "\n";
    return 0;
  }
  if (models->parsed() && !models_name.empty()) {
    // A zoo name or a config file, resolved as every importer's --model is.
    stepcast::core::Issues issues;
    const auto m = stepcast::model::parse_model(stepcast::config::model_reference(models_name), models_name, issues, "");
    issues.throw_if_any();
    const Json d = stepcast::model::describe_model(m);
    if (models_json) {
      std::cout << d.dump(2) << "\n";
      return 0;
    }
    // A parameter count at a readable scale.
    const auto count = [](double x) {
      return x >= 1e9   ? stepcast::core::fmt("%.3fB", x / 1e9)
             : x >= 1e6 ? stepcast::core::fmt("%.1fM", x / 1e6)
             : x >= 1e3 ? stepcast::core::fmt("%.1fK", x / 1e3)
                        : stepcast::core::fmt("%.0f", x);
    };
    const auto ll = [](int64_t v) { return static_cast<long long>(v); };
    const auto yes = [](bool b) { return b ? "yes" : "no"; };
    std::printf("%s: %s\n", m.name.c_str(), m.source.c_str());
    std::printf("  %-14s %s total, %s active per token (embedding %s; output layer and final norm %s)\n", "parameters",
                count(m.total_params()).c_str(), count(m.active_params()).c_str(), count(m.embedding_params()).c_str(),
                count(m.output_params()).c_str());
    std::string kinds;
    for (auto it = d["layer_kinds"].begin(); it != d["layer_kinds"].end(); ++it) {
      kinds += (kinds.empty() ? "" : ", ") + std::to_string(it.value().get<int64_t>()) + " " + it.key();
    }
    std::printf("  %-14s %lld (%s); hidden %lld; vocab %lld, %s embeddings\n", "layers", ll(m.num_layers), kinds.c_str(), ll(m.hidden),
                ll(m.vocab), m.tied_embeddings ? "tied" : "untied");
    if (m.num_attention_layers() > 0) {
      std::printf("  %-14s %lld heads, %lld K/V heads of %lld; Q/K/V biases %s; Q/K norm %s%s\n", "attention", ll(m.heads), ll(m.kv_heads),
                  ll(m.head_dim), yes(m.has_qkv_bias()), yes(m.qk_norm),
                  m.attn_output_gate ? "; output gate" : "");
      if (m.shared_block_norm) std::printf("  %-14s attention and MLP side by side behind one norm\n", "parallel block");
    }
    if (m.sliding_window > 0 || m.attention_chunk > 0) {
      std::printf("  %-14s %s of %lld tokens in %.0f%% of the attention layers\n", "local",
                  m.attention_chunk > 0 ? "chunks" : "a sliding window", ll(m.attention_chunk > 0 ? m.attention_chunk : m.sliding_window),
                  100.0 * m.sliding_layer_fraction);
    }
    if (m.mla.enabled()) {
      std::printf("  %-14s q_lora_rank %lld, kv_lora_rank %lld; Q/K heads of %lld + %lld (rotary), V heads of %lld\n", "latent (MLA)",
                  ll(m.mla.q_lora_rank), ll(m.mla.kv_lora_rank), ll(m.mla.qk_nope_head_dim), ll(m.mla.qk_rope_head_dim), ll(m.mla.v_head_dim));
    }
    if (m.mamba.enabled()) {
      std::printf("  %-14s %lld heads of %lld, state %lld, %lld groups\n", "Mamba-2", ll(m.mamba.heads), ll(m.mamba.head_dim), ll(m.mamba.state),
                  ll(m.mamba.groups));
    }
    if (m.linear.enabled()) {
      std::printf("  %-14s %lld key heads of %lld, %lld value heads of %lld\n", "Gated DeltaNet", ll(m.linear.k_heads), ll(m.linear.k_dim),
                  ll(m.linear.v_heads), ll(m.linear.v_dim));
    }
    const char* mlp_kind = m.mlp == stepcast::model::MlpKind::kGated ? "gated" : "plain";
    bool dense = false;
    for (const auto& k : m.layer_kinds()) dense = dense || k.ffn == stepcast::model::Ffn::kDense;
    if (dense) {
      std::printf("  %-14s %s (%lld matrices) of %lld; biases %s\n", "MLP", mlp_kind, ll(m.mlp_matrices()), ll(m.ffn_hidden), yes(m.linear_bias));
    }
    if (m.moe.enabled()) {
      std::printf("  %-14s %lld %s experts of %lld, top %lld", "MoE", ll(m.moe.num_experts), mlp_kind, ll(m.moe.expert_ffn), ll(m.moe.top_k));
      if (m.moe.shared_experts > 0) std::printf(", %lld shared of %lld", ll(m.moe.shared_experts), ll(m.moe.shared_expert_ffn));
      std::printf("; %lld MoE layers\n", ll(m.num_moe_layers()));
    }
    std::printf("  %-14s %s%s; positions %s\n", "norm", d["norm"].get<std::string>().c_str(), m.embedding_norm ? " (also on the embeddings)" : "",
                d["position_embedding"].get<std::string>().c_str());
    for (auto it = d["params"]["per_layer_kind"].begin(); it != d["params"]["per_layer_kind"].end(); ++it) {
      const Json& p = it.value();
      std::string parts;
      if (p["mixer"].get<double>() > 0) parts += "mixer " + count(p["mixer"].get<double>());
      if (p["ffn"].get<double>() > 0) {
        parts += std::string(parts.empty() ? "" : ", ") + "MLP " + count(p["ffn"].get<double>());
        if (p["ffn_active"].get<double>() != p["ffn"].get<double>()) parts += " (" + count(p["ffn_active"].get<double>()) + " per token)";
      }
      std::printf("  %-14s %s per layer\n", it.key().c_str(), parts.c_str());
    }
    return 0;
  }
  if (models->parsed()) {
    Json list = Json::array();
    for (const auto& n : stepcast::model::zoo_names()) {
      const auto m = stepcast::model::zoo_model(n);
      list.push_back({{"name", n}, {"params", m.total_params()}, {"active_params", m.active_params()},
                      {"layers", m.num_layers}, {"hidden", m.hidden}, {"source", m.source}});
    }
    if (models_json) {
      std::cout << list.dump(2) << "\n";
    } else {
      for (const auto& j : list) {
        std::printf("%-18s %8.2fB params (%7.2fB active)  %3lld layers  hidden %6lld  %s\n",
                    j["name"].get<std::string>().c_str(), j["params"].get<double>() / 1e9,
                    j["active_params"].get<double>() / 1e9, static_cast<long long>(j["layers"].get<int64_t>()),
                    static_cast<long long>(j["hidden"].get<int64_t>()), j["source"].get<std::string>().c_str());
      }
    }
    return 0;
  }
  if (hardware->parsed()) {
    if (!hw_name.empty()) {
      std::error_code ec;
      if (std::filesystem::is_regular_file(hw_name, ec)) {
        // A profile file: read as a run file's {"path": ...} reads it (every field checked),
        // then printed as written.
        stepcast::core::Issues issues;
        (void)stepcast::hw::parse_hardware(stepcast::core::Json{{"path", hw_name}}, hw_name + ": $", issues);
        issues.throw_if_any();
        std::cout << stepcast::core::load_json_file(hw_name).dump(2) << "\n";
        return 0;
      }
      std::cout << stepcast::hw::builtin_hardware_json(hw_name).dump(2) << "\n";
      return 0;
    }
    for (const auto& n : stepcast::hw::builtin_hardware_names()) {
      const auto h = stepcast::hw::builtin_hardware(n);
      std::printf("%-22s %s\n", n.c_str(), h.description.c_str());
    }
    return 0;
  }
  if (accuracy->parsed()) {
    // The report's header names the command and data as given (paths relative to the caller).
    acc.command = "stepcast";
    for (int i = 1; i < argc; ++i) acc.command += std::string(" ") + argv[i];
    if (accuracy->count("--data") > 0) acc.data_label = acc.data_path;
    // A terminal sees which row or setting is being worked on, on one line erased at the end.
    const bool acc_tty = ::isatty(2) != 0;
    if (acc_tty) {
      acc.progress = [](const char* phase, size_t done, size_t total) {
        std::fprintf(stderr, "\r\033[Kstepcast accuracy: %s %zu of %zu %s", phase, done, total,
                     std::strcmp(phase, "planning") == 0 ? "settings" : "rows");
        std::fflush(stderr);
      };
    }
    const auto result = [&] {
      const EraseLine erase{acc_tty};
      return stepcast::accuracy::run_accuracy(acc);
    }();
    if (acc_json) {
      std::cout << result.to_json().dump(2) << "\n";
    } else {
      std::cout << result.summary();
    }
    if (!acc.report_path.empty()) write_text(acc.report_path, result.markdown());
    return 0;
  }
  return 0;
}

}  // namespace

// Under MPI an error on one rank must not leave the others waiting in a barrier.
int finish(int code) {
#ifdef STEPCAST_HAVE_MPI
  if (g_mpi_active) {
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1) MPI_Abort(MPI_COMM_WORLD, code);
    MPI_Finalize();
  }
#endif
  return code;
}

int main(int argc, char** argv) {
  try {
    const int code = run(argc, argv);
    // Output that could not be written (a full disk, a closed pipe) is a failure, not a result.
    std::cout.flush();
    if (!std::cout) {
      std::cerr << "stepcast: error: writing the standard output failed\n";
      return finish(1);
    }
    return code;
  } catch (const stepcast::validate::DoesNotFit& e) {
    std::cerr << "stepcast: " << e.what() << "\n";
    return finish(kExitDoesNotFit);
  } catch (const stepcast::core::UserError& e) {
    std::cerr << "stepcast: error: " << e.what() << "\n";
    return finish(kExitBadInput);
  } catch (const stepcast::core::InternalError& e) {
    std::cerr << "stepcast: internal error (please report): " << e.what() << "\n";
    return finish(kExitInternal);
  } catch (const std::exception& e) {
    std::cerr << "stepcast: error: " << e.what() << "\n";
    return finish(1);
  }
}
