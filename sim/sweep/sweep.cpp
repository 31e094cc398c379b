#include "sim/sweep/sweep.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "sim/config/run_config.hpp"
#include "sim/core/error.hpp"
#include "sim/engine/step_sim.hpp"
#include "sim/estimate/estimate.hpp"
#include "sim/memory/ledger.hpp"

namespace stepcast::sweep {

using core::Json;

namespace {

const char* const kSections[] = {"model", "hardware", "cluster", "training", "parallel", "scenario"};

std::string part_path(const std::string& out, int rank) { return out + ".part" + std::to_string(rank); }

std::vector<std::string> part_files(const std::string& out) {
  std::vector<std::string> files;
  const auto p = std::filesystem::path(out);
  const auto dir = p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
  const std::string prefix = p.filename().string() + ".part";
  if (!std::filesystem::exists(dir)) return files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && name.size() > prefix.size() &&
        std::all_of(name.begin() + static_cast<long>(prefix.size()), name.end(), ::isdigit)) {
      files.push_back(e.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Complete result lines of a file (a line cut short by a kill is ignored), by point index.
void read_results(const std::string& path, std::map<size_t, std::string>& into) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) break;  // unterminated tail
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    const Json j = Json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("point") || !j["point"].is_number_unsigned()) continue;
    into.emplace(j["point"].get<size_t>(), line);
  }
}

// Drops an unterminated last line (a write cut short by a kill) before appending again.
void truncate_partial_tail(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec || size == 0) return;
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t last = text.rfind('\n');
  const size_t keep = last == std::string::npos ? 0 : last + 1;
  if (keep != text.size()) std::filesystem::resize_file(path, keep);
}

}  // namespace

size_t SweepSpec::num_points() const {
  size_t n = 1;
  for (const auto& a : axes) n *= a.size();
  return axes.empty() ? 1 : n;
}

Json SweepSpec::settings(size_t i) const {
  Json s = Json::object();
  for (size_t a = axes.size(); a-- > 0;) {
    const Axis& ax = axes[a];
    const size_t k = i % ax.size();
    i /= ax.size();
    for (size_t f = 0; f < ax.fields.size(); ++f) s[ax.fields[f]] = ax.values[f][k];
  }
  return s;
}

Json SweepSpec::run(size_t i) const {
  Json r = base;
  const Json s = settings(i);
  for (const auto& [field, v] : s.items()) core::set_json_path(r, field, v, true);  // a zoo name gives way to an object
  return r;
}

namespace {
constexpr double kMaxPoints = 1e6;
}  // namespace

SweepSpec parse_sweep(const Json& j, const std::string& source, const std::string& base_dir) {
  core::Issues issues;
  SweepSpec spec;
  spec.base_dir = base_dir;
  core::ObjectReader r(j, "$", issues);
  if (const Json* b = r.get_raw("base"); b == nullptr) {
    issues.add("$.base", "required: a run file object or a path to one");
  } else if (b->is_string()) {
    const auto p = std::filesystem::path(base_dir) / b->get<std::string>();
    spec.base = core::load_json_file(p.string());
    spec.base_dir = p.parent_path().string();
  } else if (b->is_object()) {
    spec.base = *b;
  } else {
    issues.add("$.base", "expected a run file object or a path, got " + b->dump());
  }
  spec.simulate = r.get_choice("mode", {"simulate", "estimate"}, "simulate") == "simulate";
  auto parse_one = [&](const Json& a, const std::string& path, std::string& field, std::vector<Json>& values) {
    core::ObjectReader ar(a, path, issues);
    const auto f = ar.get_string("field");  // a non-string is reported by the reader
    field = f.value_or("");
    const std::string top = field.substr(0, field.find('.'));
    const std::string expected = "a run-file field such as \"parallel.tp\" (sections: model, hardware, cluster, training, parallel, scenario)";
    if (!ar.has("field")) {
      issues.add(ar.child_path("field"), "required: " + expected);
    } else if (f && (field.empty() || std::find(std::begin(kSections), std::end(kSections), top) == std::end(kSections))) {
      issues.add(ar.child_path("field"), "got \"" + field + "\"; expected " + expected);
    }
    const Json* v = ar.get_raw("values");
    if (v != nullptr && v->is_array() && !v->empty()) {
      values.assign(v->begin(), v->end());
    } else if (v != nullptr || !ar.has("values")) {  // a null value the reader has reported
      issues.add(ar.child_path("values"), "required non-empty array of values");
    }
    ar.finish();
  };
  if (const Json* axes = r.get_raw("axes"); axes == nullptr || !axes->is_array() || axes->empty()) {
    issues.add("$.axes", "required non-empty array of axes");
  } else {
    for (size_t i = 0; i < axes->size(); ++i) {
      const std::string path = "$.axes[" + std::to_string(i) + "]";
      const Json& a = (*axes)[i];
      Axis ax;
      if (a.is_object() && a.contains("zip")) {
        core::ObjectReader zr(a, path, issues);
        const Json* z = zr.get_raw("zip");
        if (!z->is_array() || z->empty()) {
          issues.add(path + ".zip", "expected a non-empty array of {field, values}");
        } else {
          for (size_t k = 0; k < z->size(); ++k) {
            std::string field;
            std::vector<Json> values;
            parse_one((*z)[k], path + ".zip[" + std::to_string(k) + "]", field, values);
            if (!ax.values.empty() && values.size() != ax.values.front().size()) {
              issues.add(path + ".zip[" + std::to_string(k) + "].values",
                         "zipped axes need equal lengths: " + std::to_string(values.size()) + " vs " + std::to_string(ax.values.front().size()));
            }
            ax.fields.push_back(field);
            ax.values.push_back(values);
          }
        }
        zr.finish();
      } else {
        std::string field;
        std::vector<Json> values;
        parse_one(a, path, field, values);
        ax.fields.push_back(field);
        ax.values.push_back(values);
      }
      if (ax.size() > 0) spec.axes.push_back(ax);
    }
  }
  // One field on two axes would let the later silently override the earlier.
  std::map<std::string, std::string> field_axis;
  for (size_t a = 0; a < spec.axes.size(); ++a) {
    for (const auto& f : spec.axes[a].fields) {
      const auto [it, fresh] = field_axis.emplace(f, "$.axes[" + std::to_string(a) + "]");
      if (!fresh) issues.add("$.axes[" + std::to_string(a) + "]", "field \"" + f + "\" is already swept by " + it->second + "; sweep each field on one axis");
    }
  }
  // A field through a value of the base that is not an object (model.hidden_size over the zoo
  // name "llama3.1-8b") would replace that value with a one-key object; --set refuses the same.
  for (size_t a = 0; a < spec.axes.size(); ++a) {
    for (const auto& f : spec.axes[a].fields) {
      Json probe = spec.base;
      if (const auto blocked = core::set_json_path(probe, f, Json(0), false); blocked && field_axis.count(blocked->path) == 0) {
        issues.add("$.axes[" + std::to_string(a) + "]", "field \"" + f + "\" goes through $." + blocked->path + ", which the base sets to " +
                                                            core::show(blocked->value) + ", not an object; give the base an object there, or sweep \"" +
                                                            blocked->path + "\" with whole values");
      }
    }
  }
  // The grid is enumerated point by point; past a million points a sweep belongs in pieces.
  double grid = 1;
  for (const auto& ax : spec.axes) grid *= static_cast<double>(ax.size());
  if (grid > kMaxPoints) {
    issues.add("$.axes", "the axes make " + core::fmt("%.4g", grid) + " points, over the limit of " + core::fmt("%.0f", kMaxPoints) +
                             " per sweep; split the sweep (e.g. one file per value of the longest axis)");
  }
  // Free text for the reader: not used, but text.
  (void)r.get_string("name");
  (void)r.get_string("description");
  r.finish();
  issues.throw_if_any();
  // A misspelt key would fail every point the same way: check the first point once.
  try {
    (void)config::parse_run(spec.run(0), source + " point 0", spec.base_dir, false);
  } catch (const core::ConfigError& e) {
    const std::string msg = e.what();
    if (msg.find("unknown key") != std::string::npos) throw core::UserError(source + ": point 0: " + msg);
  }
  return spec;
}

SweepSpec load_sweep_file(const std::string& path) {
  const Json j = core::load_json_file(path);
  return parse_sweep(j, path, std::filesystem::path(path).parent_path().string());
}

Json evaluate_point(const SweepSpec& spec, size_t i) {
  Json rec = {{"point", i}, {"settings", spec.settings(i)}};
  try {
    const auto rc = config::parse_run(spec.run(i), "point " + std::to_string(i), spec.base_dir);
    const auto ledger = memory::compute_ledger(rc);
    rec["peak_memory_bytes"] = ledger.peak().value();
    if (!ledger.fits()) {
      rec["ok"] = false;
      rec["error"] = "does not fit in memory";
      return rec;
    }
    double step = 0, tps = 0, mfu = 0, bubble = 0;
    if (spec.simulate) {
      const auto s = engine::simulate_step(rc);
      step = s.step.step_time_s;
      tps = s.step.tokens_per_s_per_gpu;
      mfu = s.step.mfu;
      bubble = s.step.bubble_fraction;
      rec["peak_memory_bytes"] = s.memory_timeline_peak_bytes;
    } else {
      const auto e = estimate::estimate_step(rc);
      step = e.step_time_s;
      tps = e.tokens_per_s_per_gpu;
      mfu = e.mfu;
      bubble = e.bubble_fraction;
    }
    rec["ok"] = true;
    rec["simulated"] = spec.simulate;  // where step_time_s comes from (report's "from" column)
    rec["step_time_s"] = step;
    rec["tokens_per_s_per_gpu"] = tps;
    rec["mfu"] = mfu;
    rec["bubble_fraction"] = bubble;
  } catch (const core::UserError& e) {
    rec["ok"] = false;
    rec["error"] = e.what();
  }
  return rec;
}

std::set<size_t> finished_points(const std::string& out) {
  std::map<size_t, std::string> all;
  read_results(out, all);
  for (const auto& f : part_files(out)) read_results(f, all);
  std::set<size_t> s;
  for (const auto& [k, v] : all) s.insert(k);
  return s;
}

namespace {

// Before resuming into `path`: every complete line must be a result of this sweep (a point it
// has, with that point's settings), so a file of something else is never overwritten and a
// result of another sweep is never kept as this one's. Adds the finished points to `done`.
void check_resumable(const SweepSpec& spec, const std::string& path, std::set<size_t>& done) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  std::string line;
  size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (in.eof()) break;  // an unterminated tail is a cut write, dropped on resume
    const Json j = Json::parse(line, nullptr, false);
    const std::string where = path + ":" + std::to_string(lineno) + ": ";
    if (j.is_discarded() || !j.is_object() || !j.contains("point") || !j["point"].is_number_unsigned() || !j.contains("settings")) {
      throw core::UserError(where + "not a sweep result line; --resume continues a results file of this sweep only (refusing to overwrite it)");
    }
    const size_t point = j["point"].get<size_t>();
    if (point >= spec.num_points() || j["settings"] != spec.settings(point)) {
      throw core::UserError(where + "point " + std::to_string(point) + " was made by a different sweep (its settings are " +
                            core::show(j["settings"]) + "); write to a new --out");
    }
    done.insert(point);
  }
}

}  // namespace

RunSummary run_sweep(const SweepSpec& spec, const RunOptions& opt) {
  RunSummary sum;
  sum.points = spec.num_points();
  std::error_code ec;
  if (std::filesystem::is_directory(opt.out, ec)) throw core::UserError(opt.out + ": is a directory; --out names the results file");
  if (!opt.resume && (std::filesystem::exists(opt.out) || !part_files(opt.out).empty())) {
    throw core::UserError(opt.out + ": results already exist; pass --resume to continue them or remove the file");
  }
  std::set<size_t> done;
  if (opt.resume) {
    check_resumable(spec, opt.out, done);
    for (const auto& f : part_files(opt.out)) check_resumable(spec, f, done);
  }
  if (opt.barrier) opt.barrier();  // every rank sees the same starting state
  std::vector<size_t> mine;
  for (size_t i = static_cast<size_t>(opt.rank); i < sum.points; i += static_cast<size_t>(opt.size)) {
    if (done.count(i) == 0) mine.push_back(i);
  }
  sum.skipped = done.size();
  const std::string part = part_path(opt.out, opt.rank);
  truncate_partial_tail(part);
  const int fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) throw core::UserError(part + ": cannot open for appending results");
  for (size_t k = 0; k < mine.size(); ++k) {
    const Json rec = evaluate_point(spec, mine[k]);
    const std::string line = rec.dump() + "\n";
    // One write per line on an O_APPEND descriptor: a kill leaves whole lines or a cut tail.
    if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      ::close(fd);
      throw core::UserError(part + ": short write");
    }
    ++sum.evaluated;
    if (rec.value("ok", false)) ++sum.ok;
    if (opt.progress) opt.progress(k + 1, mine.size());
  }
  ::fsync(fd);
  ::close(fd);
  if (opt.barrier) opt.barrier();
  if (opt.rank != 0) return sum;
  // Merge: previous output + every part file, sorted by point, written atomically.
  std::map<size_t, std::string> all;
  read_results(opt.out, all);
  const auto parts = part_files(opt.out);
  for (const auto& f : parts) read_results(f, all);
  const std::string tmp = opt.out + ".tmp";
  {
    std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
    if (!o) throw core::UserError(tmp + ": cannot write");
    for (const auto& [k, line] : all) o << line << "\n";
  }
  std::filesystem::rename(tmp, opt.out);
  for (const auto& f : parts) std::filesystem::remove(f);
  return sum;
}

}  // namespace stepcast::sweep
