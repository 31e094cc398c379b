// The work journal that lets long, interrupted work resume without losing what it finished
// (stepcast calibrate's measurements, stepcast validate's plans).
//
// Every unit of work goes through Journal::record under a name ("gemm fp32 128x256x1024", a
// plan's file and content digest); the n-th call with a name is its n-th occurrence (a second
// pass, an extra measurement of a noisy benchmark). The writer (rank 0 under MPI) appends each
// result to the journal file as one JSON line, flushed and synced before the work goes on, so
// a killed run loses at most the unit in progress. A run given an interrupted run's journal
// takes each recorded occurrence from it instead of doing it again: when the work's choices
// depend only on recorded values (every rank holding the same ones), a replay takes the same
// path and every rank agrees on what is done afresh. The journal's first line names the run
// (the fields a result depends on: backend, ranks, device, build, ...); a journal of a
// different run is refused with the field that differs. Failed work is not recorded (a resumed
// run tries it again). The command removes the file once its results are written.
#pragma once

#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "sim/core/json_reader.hpp"

namespace stepcast::core {

class Journal {
 public:
  // Records nothing and reuses nothing: every call runs.
  Journal() = default;
  // `header`: the fields that identify the run. `previous`: an interrupted run's journal text
  // (empty: a fresh run), read from `source` (for messages). `path`: where this run's journal
  // is written (empty on every rank but the writer); it starts as the header and the previous
  // run's complete lines (a cut last line is dropped).
  Journal(Json header, const std::string& previous, const std::string& source, std::string path);
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;
  ~Journal();

  // The next occurrence of `name`: the recorded value, or run()'s (then recorded).
  Json record(const std::string& name, const std::function<Json()>& run);
  // Measurements: the same with the value a list of numbers (a recorded value that is not one
  // is refused naming the journal).
  std::vector<double> measure(const std::string& name, const std::function<std::vector<double>()>& run);
  double measure(const std::string& name, const std::function<double()>& run);
  // Whether the next occurrence of `name` is recorded (it would be reused, not run).
  [[nodiscard]] bool recorded(const std::string& name) const;

  // Seconds of work this run has behind it: the recorded time of everything reused plus the
  // wall time since this run started (a time limit counts both).
  [[nodiscard]] double elapsed_s() const;
  [[nodiscard]] int reused() const { return reused_; }
  [[nodiscard]] int done() const { return done_; }
  // Recorded entries of the previous run not taken by this one (0 after a full replay).
  [[nodiscard]] size_t unused() const;

 private:
  struct Entry {
    Json value;
    double spent_s = 0;
  };
  [[nodiscard]] std::string key(const std::string& name) const;
  void append(const Json& line);
  std::map<std::string, Entry> recorded_;  // "name#occurrence" -> entry
  std::map<std::string, int> occurrences_;
  std::string path_, source_;
  std::FILE* file_ = nullptr;
  double start_s_ = 0, credited_s_ = 0;
  int reused_ = 0, done_ = 0;
};

// Text of the journal at `path` for a run given --resume (empty when there is none); without
// --resume an existing journal is an error naming it (its finished work would be lost);
// `what` names that work ("an interrupted calibration's measurements").
std::string previous_journal(const std::string& path, bool resume, const std::string& what);

// FNV-1a 64-bit digest of a text, as 16 hex digits (a journal key for content).
std::string digest(const std::string& text);

}  // namespace stepcast::core
