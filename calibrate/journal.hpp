// stepcast calibration: the measurement journal that lets an interrupted calibration resume.
//
// Every measurement a suite takes goes through Journal::measure under a name ("gemm fp32
// 128x256x1024", "all_reduce 65536 B"); the n-th call with a name is its n-th occurrence (a
// second pass, an extra measurement of a noisy benchmark). Rank 0 appends each result to the
// journal file as one JSON line, flushed and synced before the suite goes on, so a killed run
// loses at most the measurement in progress. A run given an interrupted run's journal takes
// each recorded occurrence from it instead of measuring it again: a suite's choices depend only
// on the measured values (every rank holds the same slowest-rank results), so a replay takes
// the same path through the suite and every rank agrees on what is measured afresh. The
// journal's first line names the run (backend, ranks, device, budget, build); a journal from a
// different run is refused with the field that differs. Failed measurements are not recorded
// (a resumed run tries them again). `stepcast calibrate` removes the file once the profile is written.
#pragma once

#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "sim/core/json_reader.hpp"

namespace stepcast::calibrate {

class Journal {
 public:
  // Records nothing and reuses nothing: every call measures.
  Journal() = default;
  // `header`: the fields that identify the run. `previous`: an interrupted run's journal text
  // (empty: a fresh run), read from `source` (for messages). `path`: where this run's journal
  // is written (empty on every rank but the writer); it starts as the header and the previous
  // run's complete lines (a cut last line is dropped).
  Journal(core::Json header, const std::string& previous, const std::string& source, std::string path);
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;
  Journal(Journal&& o) noexcept;
  Journal& operator=(Journal&& o) noexcept;
  ~Journal();

  // The next occurrence of `name`: the recorded values, or run()'s (then recorded).
  std::vector<double> measure(const std::string& name, const std::function<std::vector<double>()>& run);
  double measure(const std::string& name, const std::function<double()>& run);

  // Seconds of measuring this calibration has behind it: the recorded time of every reused
  // measurement plus the wall time since this run started (a time limit counts both).
  [[nodiscard]] double elapsed_s() const;
  [[nodiscard]] int reused() const { return reused_; }
  [[nodiscard]] int measured() const { return measured_; }
  // Recorded measurements of the previous run not taken by this one (0 after a full replay).
  [[nodiscard]] size_t unused() const;

 private:
  struct Entry {
    std::vector<double> values;
    double spent_s = 0;
  };
  void append(const core::Json& line);
  std::map<std::string, Entry> recorded_;  // "name#occurrence" -> entry
  std::map<std::string, int> occurrences_;
  std::string path_;
  std::FILE* file_ = nullptr;
  double start_s_ = 0, credited_s_ = 0;
  int reused_ = 0, measured_ = 0;
};

// Text of the journal at `path` for a run given --resume (empty when there is none); without
// --resume an existing journal is an error naming it (its measurements would be lost).
std::string previous_journal(const std::string& path, bool resume);

}  // namespace stepcast::calibrate
