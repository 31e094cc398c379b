// stepcast sweep: one run file, axes over any of its fields, every point predicted.
//
// A sweep file is {"base": RUN or "path.json", "axes": [...], "mode": "simulate"|"estimate"}.
// An axis is {"field": "parallel.tp", "values": [1, 2, 4]} (cartesian with the other axes) or
// {"zip": [{"field": ..., "values": [...]}, ...]} (fields advancing together, equal lengths).
// Points are numbered in row-major order, the last axis fastest. Each point's result is one
// JSON line; invalid layouts and layouts that do not fit are results too ("ok": false with
// the reason). Results are appended as they finish, one write per line, to a part file per
// process; at the end they are merged, sorted by point, into the output file (written to a
// temporary file and renamed). A killed run keeps every finished point: --resume skips the
// points found in the output and part files and merges them with the rest.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "sim/core/json_reader.hpp"

namespace stepcast::sweep {

struct Axis {
  std::vector<std::string> fields;          // one, or several zipped
  std::vector<std::vector<core::Json>> values;  // per field
  [[nodiscard]] size_t size() const { return values.empty() ? 0 : values.front().size(); }
};

struct SweepSpec {
  core::Json base;
  std::string base_dir;
  std::vector<Axis> axes;
  bool simulate = true;
  [[nodiscard]] size_t num_points() const;
  // The settings of point i: {"parallel.tp": 2, ...}.
  [[nodiscard]] core::Json settings(size_t i) const;
  // The run file of point i.
  [[nodiscard]] core::Json run(size_t i) const;
};

// Parses a sweep file; errors name the JSON path. The first point's run file is checked for
// unknown keys so a misspelt field fails once, up front.
SweepSpec parse_sweep(const core::Json& j, const std::string& source, const std::string& base_dir);
SweepSpec load_sweep_file(const std::string& path);

// One point's result line (deterministic: no timings).
core::Json evaluate_point(const SweepSpec& spec, size_t i);

struct RunOptions {
  std::string out;       // merged JSONL output
  bool resume = false;
  int rank = 0, size = 1;  // this process among `size` sharing the sweep
  // Called after each finished point with (done by this process, its share).
  std::function<void(size_t, size_t)> progress;
  // Synchronises the processes before the merge (MPI barrier); no-op for one process.
  std::function<void()> barrier;
};

struct RunSummary {
  size_t points = 0, skipped = 0, evaluated = 0, ok = 0;
};

// Indices of the points already recorded in the output file and every part file.
std::set<size_t> finished_points(const std::string& out);
RunSummary run_sweep(const SweepSpec& spec, const RunOptions& opt);

}  // namespace stepcast::sweep
