// stepcast accuracy harness: published training runs -> run files -> predictions vs measured.
//
// Each training_run row of data/published-runs.jsonl that has a layout and a measured step time
// (or throughput) becomes an ordinary run file (model, hardware, cluster, training, parallel)
// whose "assumptions" list states every value the row does not give (micro-batch, attention
// kernel, recompute, dropout, sequence parallelism, ...). The run is estimated like any user
// run; the measured step time is the row's iteration time, else global tokens / (tokens/s/GPU *
// GPUs), else the Megatron paper's FLOPs formula (Eq. 3, which counts recomputation) divided by
// the reported TFLOP/s. Rows that cannot be expressed are listed with the reason.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "sim/core/json_reader.hpp"

namespace stepcast::accuracy {

struct AccuracyOptions {
  std::string data_path;
  std::string report_path;  // Markdown output (optional)
  std::string runs_dir;     // write one run file per usable row (optional)
  // Also search each row's (model, hardware, GPUs, batch, sequence) with the planner and
  // compare its best layout with the published one.
  bool compare_plans = false;
  // How the report names its inputs: the command line that produced it and the data file.
  std::string command = "stepcast accuracy --plans --out reports/accuracy.md --emit-runs configs/published";
  std::string data_label = "data/published-runs.jsonl";
  // Called as the work advances: phase ("predicting" rows, "planning" settings), done, total.
  std::function<void(const char* phase, size_t done, size_t total)> progress;
};

struct RowResult {
  std::string id;
  std::string source;
  std::string model;
  std::string hardware;
  int64_t num_gpus = 0;
  std::string layout;
  std::string measured_from;  // iteration_time_s | tokens_per_s_per_gpu | tokens_per_s_total | mfu | tflops_per_gpu
  double measured_s = 0;
  double predicted_s = 0;
  double error = 0;           // (predicted - measured) / measured
  double simulated_s = 0;     // discrete-event simulation (stepcast simulate)
  double sim_error = 0;
  double measured_mem_gib = -1;
  double predicted_mem_gib = -1;
  double mem_error = 0;
  std::string memory_basis;   // what the measured memory includes
  bool fits = true;
  std::vector<std::string> assumptions;
  core::Json run;             // the row's run file
};

// The planner's best layout for a published setting against the layout the team chose, both
// simulated. ids: the rows sharing the setting.
struct PlanComparison {
  std::vector<std::string> ids;
  std::string model, hardware;
  int64_t num_gpus = 0;
  std::string theirs, ours;
  double theirs_s = 0, ours_s = 0;
  std::string why;  // what the faster one avoids (empty when they tie)
  std::string note; // e.g. no layout found
};

// A published collective or GEMM measurement predicted with the cost model (sim/cost) of the
// matching built-in hardware profile.
struct MeasurementResult {
  std::string id, source;
  std::string kind;           // collective | gemm
  std::string what;           // "all_reduce, 8 ranks on 1 node, 1048576 B" / "bf16 1024x10240x5120"
  std::string hardware;
  std::string measured_from;  // time_us | algbw_gbps | busbw_gbps | achieved_tflops
  double measured_s = 0, predicted_s = 0;
  double error = 0;           // (predicted - measured) / measured time
  bool cited = false;         // the profile's sources cite this row (its values came from it)
  std::vector<std::string> notes;
};

// A datasheet row against the built-in profile it maps to: each figure the row gives beside
// the profile's.
struct DatasheetCheck {
  std::string id, hardware;
  struct Field {
    std::string name, unit;
    double datasheet = 0, profile = 0;
  };
  std::vector<Field> fields;
};

struct SkippedRow {
  std::string id;
  std::string reason;
};

struct AccuracyResult {
  std::vector<RowResult> rows;
  std::vector<MeasurementResult> measurements;  // collective and GEMM rows
  std::vector<DatasheetCheck> datasheets;       // hardware rows
  std::vector<SkippedRow> skipped;
  std::vector<PlanComparison> plans;
  std::string command, data_label;  // from AccuracyOptions, for the report's header
  [[nodiscard]] core::Json to_json() const;
  [[nodiscard]] std::string summary() const;
  [[nodiscard]] std::string markdown() const;
};

// What the conversion had to choose because the row does not say, for the caller to refine
// with the cost model (the converter itself stays a pure mapping of the row's fields).
struct RowGaps {
  bool micro_batch_unstated = false;  // micro-batch set to 1 as a placeholder
};

// Converts one published row into a run-file JSON object; returns false with a reason when
// the row cannot be expressed.
bool row_to_run(const core::Json& row, core::Json& run, std::string& reason, RowGaps* gaps = nullptr);

// A hardware (datasheet) row against the built-in profile it maps to.
bool check_datasheet(const core::Json& row, DatasheetCheck& out, std::string& reason);

// Predicts one collective or GEMM row; returns false with a reason when it cannot.
bool predict_measurement(const core::Json& row, MeasurementResult& out, std::string& reason);

AccuracyResult run_accuracy(const AccuracyOptions& opts);

}  // namespace stepcast::accuracy
