#pragma once

// `stepcast compare A.json B.json`: two run files side by side — each simulated (or only
// estimated), their step time, rates, bubble, peak memory and every time category with the
// difference, what differs between the runs, and what the faster one avoids and pays.

#include <string>

#include "sim/core/json_reader.hpp"
#include "sim/plan/planner.hpp"

namespace stepcast::plan {

struct Side {
  std::string name;  // how the output calls it (the file name)
  Candidate c;
  double capacity_bytes = 0;  // the GPU's usable memory
  bool fits = true;
};

// One run evaluated as the planner evaluates a candidate: the estimate, and the simulated
// step when `simulate` (its timeline's memory peak, else the ledger's).
Side evaluate_side(const config::RunConfig& rc, const std::string& name, bool simulate);
// One side as compare --json prints it: name, run summary, step, rates, bubble, memory, fit and
// breakdown.
core::Json side_json(const Side& s);

// What differs between the two runs beyond the layout ("model a vs b", "hardware ...",
// "GPUs ...", "sequence ...", "global batch ...", "precision ..."), then the layout's
// differences; "nothing" when they are the same run.
std::string run_diff(const config::RunConfig& a, const config::RunConfig& b);

std::string compare_table(const Side& a, const Side& b);
core::Json compare_json(const Side& a, const Side& b, const std::string& command);

}  // namespace stepcast::plan
