// stepcast report: renders planner or sweep results as a self-contained HTML page (inline SVG
// plots, no scripts, no network fetches), Markdown and CSV.
//
// Input: the JSON of `stepcast plan --json` (ranked layouts, the best layout's memory ledger
// and a timeline excerpt under "detail"), a sweep's JSONL results (one object per point), or
// the JSON of `stepcast validate --json` / `--out` (plans predicted against measured), or the
// JSON of `stepcast compare --json` (its two runs as two rows, the verdict as the explanation),
// or `stepcast scaling --json` (tokens/s per GPU, step time and days by GPU count) or
// `stepcast sensitivity --json` (elasticity and step time by resource), drawn as bar charts
// and a table.
// Plots: ranked layouts by step time, the Pareto front of step time against peak memory, the
// best layout's memory ledger as stacked bars per stage, the time breakdown per layout, and a
// timeline excerpt (one row per pipeline stage and stream). Validation results: each plan's
// predicted and measured step by phase side by side, and its worst rank's peak memory.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "sim/core/json_reader.hpp"

namespace stepcast::report {

struct ReportRow {
  std::string label;
  double step_time_s = 0, peak_memory_bytes = 0, mfu = 0, tokens_per_s_per_gpu = 0, bubble_fraction = 0;
  // {"compute_s", "recompute_s", "host_s", "bubble_s", "optimizer_s", "exposed_comm_s": {...}} (the
  // output contract's names; plan JSON from before schema 1 without the _s, still read) or null
  core::Json breakdown;
  // Where step_time_s comes from: "simulated" (event simulation), "estimate" (the analytical
  // pass; the planner simulates only its best K), or "" when the input does not say.
  std::string source;
};

// A result drawn as bar charts and one table rather than as layouts (stepcast scaling, stepcast
// sensitivity).
struct BarChart {
  std::string id, title, unit;
  std::string format = "%.2f";  // printf format of each bar's value
  std::vector<std::pair<std::string, double>> bars;
};
struct TableReport {
  std::vector<BarChart> charts;
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;  // cells as printed
};

struct ReportData {
  std::string title;
  std::vector<ReportRow> rows;  // best first
  core::Json ledger;            // ledger_json of the best layout, or null
  core::Json timeline;          // [{"stage","stream","kind","label","start_s","end_s"}], or null
  std::string explanation;
  // A validation (stepcast validate's JSON: "plans" and "summary"), checked; null otherwise.
  core::Json validation;
  // A scaling or sensitivity result; empty (no columns) otherwise.
  TableReport table;
};

// Reads plan JSON (an object with "layouts"), validation JSON (an object with "plans"), compare
// JSON (an object with "a", "b" and "verdict"), scaling JSON ("points"), sensitivity JSON
// ("base" and "resources") or sweep JSONL text (ok points only).
ReportData load_report_data(const std::string& text, const std::string& source);

std::string render_html(const ReportData& d);
std::string render_markdown(const ReportData& d);
std::string render_csv(const ReportData& d);

}  // namespace stepcast::report
