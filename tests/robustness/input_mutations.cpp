// stepcast_input_mutations: the bad-input standard checked against the real executable.
//
// Every field of a set of valid run files is mutated one at a time (deleted; replaced by a
// value of the wrong JSON type, a negative, zero, fractional or huge number, an unknown word,
// a damaged unit; an unknown key added to every object), and the file itself is damaged
// (truncated, trailing garbage, comments, an empty file, ...). `stepcast memory` runs on every
// mutant, `estimate --json` on every mutant memory accepts, and `simulate --json` on those of
// the bases named with --simulate. Each run must:
//   - end by itself (no signal, no crash) within the time limit (no hang);
//   - exit 0 (accepted), 2 (bad input) or 3 (does not fit), never 1 (an exception the tool
//     did not turn into a message) or 70 (an internal error);
//   - when it fails, print a short message that starts with "stepcast:" and carries no text of
//     a library's exception (nlohmann, std::, ...);
//   - when it succeeds with --json, print JSON whose step time is a positive finite number.
// Mutations that can never be valid (a wrong JSON type, an unknown key, a negative count, an
// unknown word in place of a name or a unit, damaged JSON) must be refused with exit 2, and the
// message must name the mutated key. Other mutations (deleting a key, zero, huge numbers) may
// be accepted or refused; only the rules above apply to them.
//
// The command line gets the same treatment: every numeric option of plan, capacity, simulate,
// estimate and memory (read from the command's --help) is given a negative number, a word, an
// empty string, an overflowing number and NaN on an otherwise valid command line; each must be
// refused with exit 2 and a message naming the option.
//
// With --rows, published rows (the accuracy harness's input) get the same: every field of every
// --row-stride-th row of each kind mutated, all mutants through one `stepcast accuracy` run,
// each of which must come out once, predicted with finite numbers or listed with a reason.
//
// With --sweep, a sweep file's own keys are mutated the same way and run with `stepcast sweep`;
// an accepted sweep must write one result per point.
//
// Usage: stepcast_input_mutations STEPCAST [--report FILE.md] [--simulate NAME,...] [--timeout S] [--list-accepted]
//        [--rows ROWS.jsonl [--row-stride N]] [--sweep SWEEP.json]... BASE.json...
// (--list-accepted prints every mutant `memory` accepted, to review for silent defaults.)
// Exit status: 0 when every run keeps the rules, 1 otherwise (each violation is listed).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

enum class Expect { kAny, kRefuse };

struct Mutant {
  std::string base;      // base file stem
  std::string path;      // JSON pointer of the mutated field ("" for file-level damage)
  std::string kind;      // what was done
  std::string key;       // the key a refusal must name ("" when none is required)
  Expect expect = Expect::kAny;
  std::string text;      // the mutated file
  bool sweep = false;    // a sweep file (run with `stepcast sweep`)
};

struct RunResult {
  int rc = 0;            // exit status; -signal when killed by one; -1000 on timeout
  std::string out, err;
  double seconds = 0;
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `argv` with stdout and stderr captured, killed after `timeout_s`.
RunResult run(const std::vector<std::string>& argv, const fs::path& dir, double timeout_s) {
  const fs::path out = dir / "stdout", err = dir / "stderr";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  RunResult r;
  const auto t0 = std::chrono::steady_clock::now();
  pid_t pid = 0;
  if (posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ) != 0) {
    posix_spawn_file_actions_destroy(&fa);
    r.rc = -2000;
    r.err = "cannot start " + argv[0];
    return r;
  }
  posix_spawn_file_actions_destroy(&fa);
  int status = 0;
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (done == pid) break;
    if (r.seconds > timeout_s) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      r.rc = -1000;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (r.rc != -1000) r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

// Relative "path" values resolve against the base file's folder; the mutants are written
// elsewhere, so they get absolute paths.
void absolutise_paths(Json& j, const fs::path& dir) {
  if (j.is_object()) {
    for (auto& [k, v] : j.items()) {
      if (k == "path" && v.is_string() && !v.get<std::string>().empty() && v.get<std::string>()[0] != '/') {
        v = fs::weakly_canonical(dir / v.get<std::string>()).string();
      } else {
        absolutise_paths(v, dir);
      }
    }
  } else if (j.is_array()) {
    for (auto& v : j) absolutise_paths(v, dir);
  }
}

bool free_text(const std::string& key) { return key == "name" || key == "description" || key == "notes"; }

// Where a mutation that looks invalid is valid by design:
// - a model object is a hub config.json, which writes null for unset settings, and its
//   model_type is metadata (an unknown family takes the generic defaults);
// - `measured` maps any published figure's name to its value;
// - whole numbers in the bases that are real quantities take fractions;
// - a MoE imbalance is an object or a max/mean ratio.
bool in_model(const std::string& path) { return path.rfind("/model/", 0) == 0; }
bool real_valued(const std::string& path, const std::string& key) {
  return key == "gemm_half_dim" || key == "collective_sms" || key == "bucket_mb" || path.find("curve") != std::string::npos;
}

// A unit-suffixed value such as "80GiB", "400GB/s", "20ms".
bool has_unit(const std::string& s) { return std::regex_match(s, std::regex(R"(\s*[0-9.eE+-]+\s*[A-Za-z/]+\s*)")); }
std::string unit_of(const std::string& s) { return std::regex_replace(s, std::regex(R"(^\s*[0-9.eE+-]+\s*)"), ""); }

class Generator {
 public:
  explicit Generator(std::vector<Mutant>& out) : out_(out) {}

  // A sweep file: its own keys are mutated like a run file's (its base run is covered by the
  // run-file bases); a value an axis lists may make points invalid, which a sweep reports as
  // results with "ok": false, so those mutations may be accepted.
  void sweep(const std::string& stem, const Json& root) {
    sweep_ = true;
    base(stem, root);
    sweep_ = false;
  }

  void base(const std::string& stem, const Json& root) {
    stem_ = stem;
    root_ = root;
    walk(root_, Json::json_pointer(), "");
    Json j = root_;
    j["zz_unknown_key"] = 1;
    add("", "unknown key at the top", "zz_unknown_key", Expect::kRefuse, j.dump(1));
    text_damage(root_.dump(1));
  }

 private:
  void add(const std::string& path, const std::string& kind, const std::string& key, Expect e, std::string text) {
    if (sweep_ && path.find("/values/") != std::string::npos) e = Expect::kAny;
    out_.push_back({stem_, path, kind, key, e, std::move(text), sweep_});
  }
  void set(const Json::json_pointer& p, const std::string& kind, const std::string& key, Expect e, const Json& v) {
    Json j = root_;
    j[p] = v;
    add(p.to_string(), kind, key, e, j.dump(1));
  }

  void walk(const Json& node, const Json::json_pointer& p, const std::string& key) {
    const bool top = p.empty();
    if (sweep_ && p.to_string().rfind("/base/", 0) == 0) return;
    if (!top && node.is_object() == false && node.is_array() == false) {
      leaf(node, p, key);
      return;
    }
    if (!top && node.is_object()) {
      set(p, "object -> array", key, Expect::kRefuse, Json::array());
      set(p, "object -> 1", key, key == "imbalance" ? Expect::kAny : Expect::kRefuse, 1);
      set(p, "object -> null", key, Expect::kRefuse, nullptr);
      set(p, "object -> true", key, Expect::kRefuse, true);
      Json j = root_;
      j[p]["zz_unknown_key"] = 1;
      add(p.to_string(), "unknown key", "zz_unknown_key", key == "measured" ? Expect::kAny : Expect::kRefuse, j.dump(1));
    }
    if (!top && node.is_array()) {
      set(p, "array -> object", key, Expect::kRefuse, Json::object());
      // Model sections read null as absent (hub files write null for unset settings), lists too.
      set(p, "array -> null", key, in_model(p.to_string()) ? Expect::kAny : Expect::kRefuse, nullptr);
      set(p, "array -> \"zz\"", key, Expect::kRefuse, "zz");
      set(p, "array -> []", key, Expect::kAny, Json::array());
      if (!node.empty()) {
        Json longer = node;
        for (int i = 0; i < 3; ++i) longer.push_back(node.front());
        set(p, "array, first element repeated", key, Expect::kAny, longer);
      }
    }
    if (key == "sources" || key == "assumptions") return;  // free text lists
    if (node.is_object()) {
      for (const auto& [k, v] : node.items()) {
        if (!top || k != "zz") {
          Json j = root_;
          j[p].erase(k);
          add((p / k).to_string(), "deleted", "", Expect::kAny, j.dump(1));
        }
        walk(v, p / k, k);
      }
    } else {
      // The first element of a list stands for the rest; its refusal names the list.
      if (!node.empty()) walk(node.front(), p / 0, key);
    }
  }

  void leaf(const Json& v, const Json::json_pointer& p, const std::string& key) {
    const Expect refuse = Expect::kRefuse;
    const std::string where = p.to_string();
    set(p, "-> null", key, in_model(where) ? Expect::kAny : refuse, nullptr);
    set(p, "-> []", key, refuse, Json::array());
    set(p, "-> {\"x\": 1}", key, refuse, Json{{"x", 1}});
    if (free_text(key)) {
      set(p, "-> 7", key, refuse, 7);
      return;
    }
    if (v.is_boolean()) {
      set(p, "-> \"yes\"", key, refuse, "yes");
      set(p, "-> 2", key, refuse, 2);
      return;
    }
    if (v.is_number()) {
      set(p, "-> true", key, refuse, true);
      set(p, "-> \"zz\"", key, refuse, "zz");
      set(p, "-> -1", key, refuse, -1);
      set(p, "-> -0.5", key, refuse, -0.5);
      set(p, "-> 0", key, Expect::kAny, 0);
      set(p, "-> 0.5", key, v.is_number_integer() && !real_valued(where, key) ? refuse : Expect::kAny, 0.5);
      set(p, "-> 2^40", key, Expect::kAny, 1099511627776LL);
      set(p, "-> 1e308", key, Expect::kAny, 1e308);
      set(p, "-> 1e-300", key, Expect::kAny, 1e-300);
      set(p, "-> as text", key, Expect::kAny, v.dump());
      return;
    }
    if (v.is_string()) {
      const std::string s = v.get<std::string>();
      set(p, "-> true", key, refuse, true);
      const Expect word = key == "model_type" ? Expect::kAny : refuse;
      set(p, "-> \"zz_bogus\"", key, word, "zz_bogus");
      set(p, "-> \"\"", key, word, "");
      set(p, "-> 7", key, Expect::kAny, 7);
      if (has_unit(s)) {
        const std::string u = unit_of(s);
        set(p, "unit: negative", key, refuse, "-" + s);
        set(p, "unit: unknown unit", key, refuse, "5 zzB");
        set(p, "unit: nan", key, refuse, "nan" + u);
        set(p, "unit: 1e400", key, refuse, "1e400" + u);
        set(p, "unit: unit alone", key, refuse, u);
        set(p, "unit: zero", key, Expect::kAny, "0" + u);
      }
    }
  }

  void text_damage(const std::string& t) {
    const Expect refuse = Expect::kRefuse;
    for (double f : {0.1, 0.5, 0.9}) add("", "truncated at " + std::to_string(int(f * 100)) + "%", "", refuse, t.substr(0, size_t(t.size() * f)));
    add("", "trailing garbage", "", refuse, t + "\n} zz");
    add("", "trailing comma", "", refuse, t.substr(0, t.rfind('}')) + ",}");
    add("", "comment line", "", refuse, "// comment\n" + t);
    add("", "single quotes", "", refuse, std::regex_replace(t, std::regex("\""), "'"));
    add("", "empty file", "", refuse, "");
    add("", "JSON null", "", refuse, "null");
    add("", "JSON array", "", refuse, "[]");
    add("", "JSON number", "", refuse, "42");
    add("", "empty object", "", refuse, "{}");
    add("", "NUL byte", "", refuse, std::string("{\"na\0me\": 1}", 12));
  }

  std::vector<Mutant>& out_;
  std::string stem_;
  Json root_;
  bool sweep_ = false;
};

const std::regex kLibraryText(R"(type_error|parse_error\.|\[json\.exception|bad_alloc|std::|what\(\)|basic_string|\bsto[idl]\b|nlohmann|terminate called|Assertion|out_of_range|invalid_argument)");

struct Tally {
  int runs = 0, accepted = 0, refused = 0, no_fit = 0;
};

struct RowTally {
  int rows = 0, mutants = 0, predicted = 0, listed = 0, must_list = 0, listed_as_required = 0;
};

// The fields the harness requires to be positive where a row gives them (sim/accuracy).
const std::set<std::string> kPositiveRowFields = {
    "num_gpus", "gpus_per_node", "tp", "pp", "dp", "cp", "ep", "etp", "vp", "micro_batch", "global_batch_seqs", "global_batch_tokens",
    "grad_accum", "seq_len", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "moe_experts", "moe_topk", "moe_ffn_hidden",
    "params_b", "iteration_time_s", "tokens_per_s_per_gpu", "tokens_per_s_total", "tflops_per_gpu", "mfu", "mfu_peak_tflops_per_gpu",
    "memory_gib_per_gpu", "num_ranks", "num_nodes", "message_bytes", "time_us", "busbw_gbps", "algbw_gbps", "gemm_m", "gemm_n", "gemm_k",
    "achieved_tflops", "peak_tflops", "efficiency"};

bool finite_positive(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_number() && std::isfinite(j[key].get<double>()) && j[key].get<double>() > 0;
}

RowTally check_rows(const std::string& bin, const std::string& rows_path, int stride, const fs::path& work,
                    std::vector<std::string>& violations) {
  RowTally t;
  std::map<std::string, std::string> must;  // mutant id -> the field its reason must name
  std::map<std::string, int> per_kind;
  std::ostringstream out;
  std::istringstream in(read_file(rows_path));
  std::vector<std::string> ids;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const Json row = Json::parse(line);
    const std::string kind = row.value("row_type", "");
    if (per_kind[kind]++ % stride != 0) continue;
    ++t.rows;
    const std::string id = row.value("id", "row");
    for (const auto& [k, v] : row.items()) {
      if (k == "id" || v.is_null()) continue;
      const std::vector<std::pair<std::string, Json>> values = {
          {"null", nullptr}, {"word", "zz"}, {"empty", ""}, {"0", 0}, {"-1", -1}, {"1e300", 1e300}, {"[]", Json::array()}, {"{}", Json::object()}};
      auto emit = [&](const std::string& what, const Json* value) {
        Json m = row;
        if (value == nullptr) {
          m.erase(k);
        } else {
          m[k] = *value;
        }
        m["id"] = id + "#" + k + "#" + what;
        ids.push_back(m["id"]);
        if (what == "-1" && kPositiveRowFields.count(k)) must[m["id"]] = k;
        out << m.dump() << "\n";
      };
      emit("deleted", nullptr);
      for (const auto& [what, value] : values) emit(what, &value);
    }
  }
  t.mutants = static_cast<int>(ids.size());
  t.must_list = static_cast<int>(must.size());
  const fs::path file = work / "rows.jsonl";
  {
    std::ofstream f(file);
    f << out.str();
  }
  const RunResult r = run({bin, "accuracy", "--data", file.string(), "--json"}, work, 1200);
  auto bad = [&](const std::string& what) { violations.push_back("`accuracy` published-row mutants: " + what); };
  if (r.rc != 0) {
    bad("exit status " + std::to_string(r.rc) + " | " + r.err.substr(0, r.err.find('\n')));
    return t;
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(r.out);
  } catch (const std::exception& e) {
    bad(std::string("output is not JSON (") + e.what() + ")");
    return t;
  }
  std::map<std::string, int> seen;
  for (const auto& row : j.value("rows", nlohmann::json::array())) {
    const std::string id = row.value("id", "");
    ++seen[id];
    ++t.predicted;
    if (!finite_positive(row, "predicted_step_s") || !finite_positive(row, "simulated_step_s") || !row["error"].is_number() ||
        !std::isfinite(row["error"].get<double>())) {
      bad(id + ": a prediction that is not a positive finite step time");
    }
    if (must.count(id)) bad(id + ": predicted, but its " + must[id] + " is negative");
  }
  for (const auto& m : j.value("measurements", nlohmann::json::array())) {
    const std::string id = m.value("id", "");
    ++seen[id];
    ++t.predicted;
    if (!finite_positive(m, "predicted_s") || !m["error"].is_number() || !std::isfinite(m["error"].get<double>())) {
      bad(id + ": a prediction that is not a positive finite time");
    }
    if (must.count(id)) bad(id + ": predicted, but its " + must[id] + " is negative");
  }
  for (const auto& d : j.value("datasheets", nlohmann::json::array())) {
    ++seen[d.value("id", "")];
    ++t.predicted;
  }
  for (const auto& s : j.value("skipped", nlohmann::json::array())) {
    const std::string id = s.value("id", ""), reason = s.value("reason", "");
    ++seen[id];
    ++t.listed;
    if (reason.empty()) bad(id + ": listed without a reason");
    if (std::regex_search(reason, kLibraryText)) bad(id + ": library text in the reason | " + reason.substr(0, 200));
    if (must.count(id)) {
      if (reason.find(must[id]) == std::string::npos) {
        bad(id + ": the reason does not name '" + must[id] + "' | " + reason.substr(0, 200));
      } else {
        ++t.listed_as_required;
      }
    }
  }
  for (const auto& id : ids) {
    if (seen[id] != 1) bad(id + ": appears " + std::to_string(seen[id]) + " times in the output (once expected)");
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: stepcast_input_mutations STEPCAST [--report FILE.md] [--simulate NAME,...] [--timeout S] BASE.json...\n";
    return 2;
  }
  const std::string bin = fs::absolute(argv[1]).string();
  std::string report;
  std::set<std::string> simulate;
  double timeout_s = 30;
  bool list_accepted = false;
  std::string rows_path;
  int row_stride = 8;
  std::vector<fs::path> sweeps;
  std::vector<fs::path> bases;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--report" && i + 1 < argc) {
      report = argv[++i];
    } else if (a == "--simulate" && i + 1 < argc) {
      std::stringstream ss(argv[++i]);
      for (std::string s; std::getline(ss, s, ',');) simulate.insert(s);
    } else if (a == "--rows" && i + 1 < argc) {
      rows_path = argv[++i];
    } else if (a == "--sweep" && i + 1 < argc) {
      sweeps.emplace_back(argv[++i]);
    } else if (a == "--row-stride" && i + 1 < argc) {
      row_stride = std::max(1, std::stoi(argv[++i]));
    } else if (a == "--list-accepted") {
      list_accepted = true;
    } else if (a == "--timeout" && i + 1 < argc) {
      timeout_s = std::stod(argv[++i]);
    } else {
      bases.emplace_back(a);
    }
  }

  std::vector<Mutant> mutants;
  Generator gen(mutants);
  // A base file with its relative paths made absolute (the mutants are written elsewhere).
  auto load = [](const fs::path& b) {
    Json j = Json::parse(read_file(b));
    absolutise_paths(j, fs::absolute(b).parent_path());
    return j;
  };
  try {
    for (const auto& b : bases) gen.base(b.stem().string(), load(b));
    for (const auto& b : sweeps) gen.sweep(b.stem().string(), load(b));
  } catch (const std::exception& e) {
    std::cerr << "a base file is not valid JSON (" << e.what() << ")\n";
    return 2;
  }

  const fs::path work = fs::temp_directory_path() / ("stepcast-mutations-" + std::to_string(getpid()));
  fs::create_directories(work);
  const fs::path file = work / "run.json";

  std::map<std::string, Tally> tally;  // by command
  int must_refuse = 0, refused_as_required = 0;
  std::vector<std::string> violations;
  double slowest = 0;
  std::string slowest_what;

  // `judged`: this run decides whether a mutant that can never be valid was refused.
  auto check = [&](const Mutant& m, const std::string& cmd, const RunResult& r, bool json, bool judged) {
    auto& t = tally[cmd];
    ++t.runs;
    std::vector<std::string> bad;
    if (r.seconds > slowest) slowest = r.seconds, slowest_what = cmd + " " + m.base + " " + m.path + " (" + m.kind + ")";
    if (r.rc == -1000) bad.push_back("no exit within " + std::to_string(int(timeout_s)) + " s");
    else if (r.rc < 0) bad.push_back("killed by signal " + std::to_string(-r.rc));
    else if (r.rc != 0 && r.rc != 2 && r.rc != 3) bad.push_back("exit status " + std::to_string(r.rc));
    if (r.rc == 0) ++t.accepted;
    if (r.rc == 2) ++t.refused;
    if (r.rc == 3) ++t.no_fit;
    if (r.rc > 0) {
      if (r.err.rfind("stepcast", 0) != 0) bad.push_back("message does not start with 'stepcast'");
      if (std::regex_search(r.err, kLibraryText)) bad.push_back("library text in the message");
      if (r.err.size() > 12000 || std::count(r.err.begin(), r.err.end(), '\n') > 60) bad.push_back("message longer than 60 lines or 12,000 characters");
    }
    if (r.rc == 0 && json) {
      try {
        const auto j = nlohmann::json::parse(r.out);
        const double step = j.at("step_time_s").get<double>();
        if (!(std::isfinite(step) && step > 0)) bad.push_back("step_time_s " + std::to_string(step));
      } catch (const std::exception& e) {
        bad.push_back(std::string("output is not the JSON contract (") + e.what() + ")");
      }
    }
    if (m.expect == Expect::kRefuse && judged) {
      ++must_refuse;
      if (r.rc != 2) {
        bad.push_back("accepted (exit " + std::to_string(r.rc) + "), must be refused");
      } else if (!m.key.empty() && r.err.find(m.key) == std::string::npos) {
        bad.push_back("the message does not name '" + m.key + "'");
      } else {
        ++refused_as_required;
      }
    }
    for (const auto& b : bad) {
      std::string first = r.err.substr(0, r.err.find('\n'));
      if (first.size() > 200) first = first.substr(0, 200) + "...";
      violations.push_back("`" + cmd + "` " + m.base + " `" + (m.path.empty() ? "(file)" : m.path) + "` " + m.kind + ": " + b +
                           (first.empty() ? "" : " | " + first));
    }
    return r.rc;
  };

  size_t done = 0;
  for (const auto& m : mutants) {
    {
      std::ofstream f(file, std::ios::binary | std::ios::trunc);
      f << m.text;
    }
    if (m.sweep) {
      // Accepted: every point is a JSON result that says whether it is ok.
      const fs::path results = work / "results.jsonl";
      fs::remove(results);
      if (check(m, "sweep", run({bin, "sweep", file.string(), "--out", results.string()}, work, timeout_s), false, true) == 0) {
        std::istringstream lines(read_file(results));
        int points = 0;
        for (std::string line; std::getline(lines, line); ++points) {
          try {
            const auto p = nlohmann::json::parse(line);
            if (!p.at("ok").is_boolean() || (p["ok"].get<bool>() && !finite_positive(p, "step_time_s"))) throw std::runtime_error("bad point");
          } catch (const std::exception&) {
            violations.push_back("`sweep` " + m.base + " `" + m.path + "` " + m.kind + ": a result line is not a point with ok and a step time");
            break;
          }
        }
        if (points == 0) violations.push_back("`sweep` " + m.base + " `" + m.path + "` " + m.kind + ": accepted, but no results");
      }
      ++done;
      continue;
    }
    const int rc = check(m, "memory", run({bin, "memory", file.string()}, work, timeout_s), false, true);
    if (list_accepted && rc == 0) std::cerr << "accepted: " << m.base << " " << m.path << " (" << m.kind << ")\n";
    if (rc == 0 || rc == 3) {
      // A mutant memory accepts that a later command refuses is listed for review too.
      auto later = [&](const std::string& cmd) {
        const RunResult r = run({bin, cmd, file.string(), "--json", "--allow-oom"}, work, timeout_s);
        if (check(m, cmd, r, true, false) != 0 && list_accepted) {
          std::cerr << "refused by " << cmd << ": " << m.base << " " << m.path << " (" << m.kind << "): " << r.err.substr(0, r.err.find('\n')) << "\n";
        }
      };
      later("estimate");
      if (simulate.count(m.base)) {
        later("simulate");
        // compare reads both sides the same way: the mutant against itself (estimated).
        const RunResult r = run({bin, "compare", file.string(), file.string(), "--estimate", "--json", "--allow-oom"}, work, timeout_s);
        if (check(m, "compare", r, false, false) == 0) {
          try {
            const auto j = nlohmann::json::parse(r.out);
            for (const char* side : {"a", "b"}) {
              if (!finite_positive(j.at(side), "step_time_s")) throw std::runtime_error("no step time");
            }
          } catch (const std::exception&) {
            violations.push_back("`compare` " + m.base + " `" + m.path + "` " + m.kind + ": accepted, but the output lacks both sides' step times");
          }
        } else if (list_accepted) {
          std::cerr << "refused by compare: " << m.base << " " << m.path << " (" << m.kind << "): " << r.err.substr(0, r.err.find('\n')) << "\n";
        }
        // sensitivity re-evaluates the mutant with each resource better (estimated).
        const RunResult sr = run({bin, "sensitivity", file.string(), "--estimate", "--json", "--allow-oom"}, work, timeout_s);
        if (check(m, "sensitivity", sr, false, false) == 0) {
          try {
            const auto j = nlohmann::json::parse(sr.out);
            if (!finite_positive(j.at("base"), "step_time_s")) throw std::runtime_error("no step time");
            for (const auto& row : j.at("resources")) {
              if (!finite_positive(row, "step_time_s")) throw std::runtime_error("no step time");
            }
          } catch (const std::exception&) {
            violations.push_back("`sensitivity` " + m.base + " `" + m.path + "` " + m.kind + ": accepted, but a step time is missing or not finite");
          }
        }
      }
    }
    if (++done % 500 == 0) std::cerr << "input mutations: " << done << " of " << mutants.size() << "\n";
  }
  // Command-line options: the numeric options each command's --help lists.
  struct CliCase {
    std::vector<std::string> argv;  // the command line, without the executable
    std::string option, value;
  };
  std::vector<CliCase> cli;
  if (!bases.empty()) {
    const std::string runfile = fs::absolute(bases.front()).string();
    const std::vector<std::vector<std::string>> templates = {
        {"plan", "--model", "llama3.1-8b", "--hardware", "h100-sxm", "--gpus", "8", "--seq", "2048", "--batch", "16", "--top", "1", "--rows", "3"},
        {"capacity", "--model", "llama3.1-8b", "--hardware", "h100-sxm", "--seq", "2048", "--batch", "64", "--tokens", "1e9", "--days", "1"},
        {"simulate", runfile},
        {"estimate", runfile},
        {"memory", runfile},
        {"sensitivity", runfile, "--estimate"},
        {"scaling", "--model", "llama3.1-8b", "--hardware", "h100-sxm", "--seq", "2048", "--batch", "16", "--gpus", "8"}};
    const std::regex numeric(R"(^\s+(--[a-z0-9-]+)\s+(INT|UINT|FLOAT)\b)");
    for (const auto& t : templates) {
      const RunResult help = run({bin, t[0], "--help"}, work, timeout_s);
      std::istringstream lines(help.out);
      for (std::string line; std::getline(lines, line);) {
        std::smatch mt;
        if (!std::regex_search(line, mt, numeric)) continue;
        const std::string opt = mt[1];
        for (const std::string bad : {"-1", "abc", "", "1e400", "nan", "99999999999999999999"}) {
          std::vector<std::string> argv = t;
          const auto at = std::find(argv.begin(), argv.end(), opt);
          if (at != argv.end()) {
            *(at + 1) = bad;
          } else {
            argv.push_back(opt);
            argv.push_back(bad);
          }
          cli.push_back({argv, opt, bad});
        }
      }
    }
  }
  // Quantities with units and prices: a damaged unit, a negative or non-finite value, a price
  // for a profile not given, each names the option.
  for (const auto& [opt, bad] : std::vector<std::pair<std::string, std::string>>{
           {"--storage-bw", "abc"}, {"--storage-bw", "-5GB/s"}, {"--storage-bw", "10GB"}, {"--restart", "-1min"}, {"--restart", "nan"},
           {"--checkpoint-time", "5 parsecs"}, {"--checkpoint-time", ""}, {"--price", "-1"}, {"--price", "abc"}, {"--price", "h100-sxm=abc"},
           {"--price", "b200=3"}, {"--price", "1e400"}}) {
    cli.push_back({{"capacity", "--model", "llama3.1-8b", "--hardware", "h100-sxm", "--seq", "2048", "--batch", "64", "--tokens", "1e9", "--days", "1", opt, bad},
                   opt, bad});
  }
  for (const std::string bad : {"abc", "8,-16", "", "16,8", "8,,16", "99999999999999999999"}) {
    cli.push_back({{"scaling", "--model", "llama3.1-8b", "--hardware", "h100-sxm", "--seq", "2048", "--batch", "16", "--gpus", bad}, "--gpus", bad});
  }
  // What-if settings (--set PATH=VALUE) that can never be valid: each names its path.
  if (!bases.empty()) {
    const std::string runfile = fs::absolute(bases.front()).string();
    const std::vector<std::pair<std::string, std::string>> sets = {
        {"parallel.tp=abc", "parallel.tp"},         {"parallel.tpp=2", "tpp"},       {"=4", "--set"},
        {"parallel..tp=4", "--set"},                {"parallel.tp", "--set"},        {"model.hidden_size=4096", "model"},
        {"training.precision=fp7", "precision"},   {"parallel=5", "parallel"},      {"cluster.num_gpus=-8", "num_gpus"},
        {"parallel.tp=[1", "parallel.tp"},          {"scenario.jitter.cv=2", "cv"}, {"hardware.gpu.memory=80XB", "hardware"}};
    for (const auto& [set, key] : sets) {
      cli.push_back({{"estimate", runfile, "--set", set}, key, set});
      cli.push_back({{"compare", runfile, "--set-b", set}, key, set});
    }
  }
  for (const auto& c : cli) {
    std::vector<std::string> argv{bin};
    argv.insert(argv.end(), c.argv.begin(), c.argv.end());
    const Mutant m{"command line", c.argv[0] + " " + c.option, "\"" + c.value + "\"", c.option, Expect::kRefuse, ""};
    check(m, "command-line options", run(argv, work, timeout_s), false, true);
  }
  // Published rows (the accuracy harness's input): every field of every row_stride-th row of
  // each kind mutated, all mutants in one file through one `stepcast accuracy --data` run.
  // Each mutant must come out once, predicted with finite numbers or listed with a reason, and
  // a count or measurement made negative must be listed with the field named.
  RowTally rt;
  if (!rows_path.empty()) rt = check_rows(bin, rows_path, row_stride, work, violations);
  fs::remove_all(work);

  std::string simulated;  // the --simulate list, as given (sorted)
  for (const auto& s : simulate) simulated += (simulated.empty() ? "" : ",") + s;
  std::ostringstream o;
  o << "# Bad input: mutated run files against the stepcast executable\n\n"
    << "Regenerate with `./build/tests/stepcast_input_mutations ./build/stepcast --report reports/robustness.md --simulate "
    << simulated
    << " --rows data/published-runs.jsonl --sweep tests/data/sweep/mutation-base.sweep.json "
       "tests/data/mutation-bases/*.json` (also a CTest test, label `robustness`).\n"
    << "Each field of the base run files in `tests/data/mutation-bases/` is mutated one at a time (deleted; a value of the "
       "wrong JSON type; negative, zero, fractional, huge; an unknown word; a damaged unit; an unknown key in every object) "
       "and each file is damaged as text (truncated, trailing garbage, comments, empty); each numeric command-line option "
       "gets a negative number, a word, an empty string, an overflowing number and NaN, and `estimate --set` gets settings "
       "that can never be valid. Every run must end by itself with exit "
       "0, 2 (bad input) or 3 (does not fit) and a short message free of library text; a mutation that can never be valid must "
       "be refused with exit 2 and a message naming the key.\n\n"
    << "| command | runs | accepted (0) | refused (2) | does not fit (3) |\n|---|---:|---:|---:|---:|\n";
  for (const auto& [cmd, t] : tally) {
    o << "| " << cmd << " | " << t.runs << " | " << t.accepted << " | " << t.refused << " | " << t.no_fit << " |\n";
  }
  o << "\n" << mutants.size() << " mutants of " << bases.size() << " run files and " << sweeps.size() << " sweep file(s), and " << cli.size()
    << " bad command-line values (the numeric options of plan, capacity, simulate, estimate, memory, sensitivity and scaling, scaling's GPU counts, capacity's quantities with units and prices, and --set and compare --set-b); " << refused_as_required << " of "
    << must_refuse << " that can never be valid were refused with a message naming the key or option.\n\n";
  if (rt.mutants > 0) {
    o << "Published rows: " << rt.mutants << " single-field mutants of " << rt.rows << " rows of `" << fs::path(rows_path).filename().string()
      << "` (every " << row_stride << "th row of each kind; each field deleted, null, a word, an empty string, 0, -1, 1e300, [] "
         "and {}) in one `stepcast accuracy --data` run: "
      << rt.predicted << " predicted, " << rt.listed << " listed with a reason; " << rt.listed_as_required << " of " << rt.must_list
      << " made negative where a positive count or measurement is required were listed naming the field.\n\n";
  }
  o << "**Violations: " << violations.size() << "**\n";
  for (const auto& v : violations) o << "- " << v << "\n";
  std::cout << o.str();
  std::cerr << "slowest run: " << slowest << " s (" << slowest_what << ")\n";
  if (!report.empty()) {
    const std::string tmp = report + ".tmp";
    std::ofstream(tmp) << o.str();
    fs::rename(tmp, report);
  }
  return violations.empty() ? 0 : 1;
}
