// The work journal: an interrupted calibration resumes with the measurements it had, takes the
// same path through the suite and measures only what was missing; validate's plans likewise.
#include "sim/core/journal.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace stepcast::core {
namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("stepcast-journal-test-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir / "profile.json.journal";
}

Json header(int ranks = 2) { return {{"backend", "cpu"}, {"ranks", ranks}, {"budget_per_benchmark_s", 0.4}}; }

// A suite in miniature: three passes over two benchmarks, then an extra measurement of every
// benchmark whose passes disagree by more than 10% (a choice made on the measured values, as
// the real suites make them). A measurement's value depends on its benchmark and on which of
// its measurements it is, so a replay that handed back the wrong one would show.
struct MiniSuite {
  int stop_after = -1;  // throw (an interruption) when this many have run
  int runs = 0;
  std::vector<double> operator()(Journal& j) {
    std::map<std::string, int> calls;
    auto bench = [&](const std::string& name) {
      const int n = calls[name]++;
      return j.measure(name, [&] {
        if (runs == stop_after) throw std::runtime_error("interrupted");
        ++runs;
        return name == "noisy" ? 1.0 + 0.3 * (n % 2) : 2.0 + 0.01 * n;
      });
    };
    std::vector<double> out;
    std::map<std::string, std::vector<double>> by;
    for (int pass = 0; pass < 3; ++pass) {
      for (const char* name : {"steady", "noisy"}) by[name].push_back(bench(name));
    }
    for (auto& [name, v] : by) {
      const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
      if ((*hi - *lo) / *lo > 0.10) v.push_back(bench(name));
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }
};

TEST(Journal, AnInterruptedRunResumesWithTheSameResultsMeasuringOnlyWhatWasMissing) {
  const fs::path path = scratch("resume");
  Journal whole_journal;
  MiniSuite whole;
  const auto expected = whole(whole_journal);
  EXPECT_EQ(whole.runs, 7);  // 6 passes and the noisy benchmark's extra measurement

  MiniSuite first;
  first.stop_after = 4;
  {
    Journal j(header(), "", path.string(), path.string());
    EXPECT_THROW(first(j), std::runtime_error);
    EXPECT_EQ(j.done(), 4);
  }
  MiniSuite second;
  Journal j(header(), read(path), path.string(), path.string());
  EXPECT_EQ(j.unused(), 4u);
  EXPECT_EQ(second(j), expected);
  EXPECT_EQ(second.runs, 3);  // only what the interrupted run had not measured
  EXPECT_EQ(j.reused(), 4);
  EXPECT_EQ(j.done(), 3);
  EXPECT_EQ(j.unused(), 0u);
  // The journal now holds the header and all seven measurements.
  std::istringstream lines(read(path));
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) ++n;
  EXPECT_EQ(n, 8);
}

TEST(Journal, ACutLastLineIsDroppedAndMeasuredAgain) {
  const fs::path path = scratch("cut");
  {
    Journal j(header(), "", path.string(), path.string());
    j.measure("gemm 64x64x64", [] { return 1.5; });
    j.measure("gemm 64x64x64", [] { return 1.6; });
  }
  std::string text = read(path);
  text.resize(text.size() - 5);  // the second entry cut mid-write
  Journal j(header(), text, path.string(), path.string());
  EXPECT_EQ(j.unused(), 1u);
  int ran = 0;
  EXPECT_EQ(j.measure("gemm 64x64x64", [&] { return ++ran, 9.0; }), 1.5);
  EXPECT_EQ(j.measure("gemm 64x64x64", [&] { return ++ran, 2.5; }), 2.5);
  EXPECT_EQ(ran, 1);
}

TEST(Journal, TheReusedMeasurementsRecordedTimeCountsTowardsATimeLimit) {
  Json h = header();
  h["stepcast_journal"] = 1;
  const std::string text = h.dump() + "\n" + R"({"key":"copy#0","value":[3.0],"spent_s":40.0})" + "\n";
  Journal j(header(), text, "prev.journal", "");
  EXPECT_LT(j.elapsed_s(), 40.0);
  EXPECT_EQ(j.measure("copy", [] { return 0.0; }), 3.0);
  EXPECT_GE(j.elapsed_s(), 40.0);
}

TEST(Journal, AJournalOfAnotherCalibrationIsRefusedNamingTheField) {
  const fs::path path = scratch("other");
  { Journal j(header(2), "", path.string(), path.string()); }
  try {
    Journal j(header(4), read(path), path.string(), "");
    FAIL() << "a journal of 2 ranks was taken for 4";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("ranks 2, this run 4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
}

TEST(Journal, AFileThatIsNoJournalIsRefusedWithItsLine) {
  try {
    Journal j(header(), "{\"model\": \"llama3.1-8b\"}\n", "run.json", "");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("run.json:1: not a stepcast journal"), std::string::npos) << e.what();
  }
  Json h = header();
  h["stepcast_journal"] = 1;
  const std::string good_header = h.dump();
  try {
    Journal j(header(), good_header + "\n{\"key\": \"copy#0\", \"value\": [\"fast\"], \"spent_s\": 1}\n", "x.journal", "");
    (void)j.measure("copy", [] { return 1.0; });
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("x.journal: the recorded value of copy is not a list of numbers"), std::string::npos) << e.what();
  }
}

TEST(Journal, AnExistingJournalNeedsResume) {
  const fs::path path = scratch("needs-resume");
  EXPECT_EQ(previous_journal(path.string(), false, "measurements"), "");  // none: a fresh run
  { Journal j(header(), "", path.string(), path.string()); }
  try {
    (void)previous_journal(path.string(), false, "measurements");
    FAIL() << "an interrupted run's measurements would have been overwritten";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--resume"), std::string::npos) << e.what();
  }
  EXPECT_NE(previous_journal(path.string(), true, "measurements").find("stepcast_journal"), std::string::npos);
}

TEST(Journal, AFailedMeasurementIsNotRecorded) {
  const fs::path path = scratch("failed");
  {
    Journal j(header(), "", path.string(), path.string());
    EXPECT_THROW(j.measure("gemm fp8 4096x4096x4096", []() -> double { throw std::runtime_error("layout refused"); }), std::runtime_error);
  }
  Journal j(header(), read(path), path.string(), "");
  EXPECT_EQ(j.unused(), 0u);
}

}  // namespace
}  // namespace stepcast::core
