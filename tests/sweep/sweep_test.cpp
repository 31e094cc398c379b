// Sweeps: point numbering (cartesian, zipped), field errors up front, failures recorded as
// results, resume skipping finished points and ignoring a line cut short by a kill.
#include "sim/sweep/sweep.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "sim/core/error.hpp"

namespace stepcast::sweep {
namespace {

using core::Json;

Json sweep_json() {
  return {{"base",
           {{"model", "llama3.1-8b"}, {"hardware", "h100-sxm"}, {"cluster", {{"num_gpus", 8}}},
            {"training", {{"seq_len", 4096}, {"global_batch_size", 32}}}, {"parallel", {{"zero_stage", 1}}}}},
          {"mode", "estimate"},
          {"axes",
           {{{"field", "parallel.tp"}, {"values", {1, 2, 3}}},
            {{"zip", {{{"field", "parallel.micro_batch_size"}, {"values", {1, 2}}}, {{"field", "parallel.recompute"}, {"values", {"none", "full"}}}}}}}}};
}

std::string temp_out(const char* name) {
  const auto dir = std::filesystem::temp_directory_path() / ("stepcast-sweep-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto p = dir / name;
  std::filesystem::remove(p);
  for (int r = 0; r < 4; ++r) std::filesystem::remove(p.string() + ".part" + std::to_string(r));
  return p.string();
}

TEST(Sweep, PointsAreCartesianWithZippedAxes) {
  const SweepSpec s = parse_sweep(sweep_json(), "<sweep-test>", "");
  ASSERT_EQ(s.num_points(), 6u);
  // Last axis fastest; the zipped fields move together.
  EXPECT_EQ(s.settings(0), (Json{{"parallel.tp", 1}, {"parallel.micro_batch_size", 1}, {"parallel.recompute", "none"}}));
  EXPECT_EQ(s.settings(1), (Json{{"parallel.tp", 1}, {"parallel.micro_batch_size", 2}, {"parallel.recompute", "full"}}));
  EXPECT_EQ(s.settings(5), (Json{{"parallel.tp", 3}, {"parallel.micro_batch_size", 2}, {"parallel.recompute", "full"}}));
  EXPECT_EQ(s.run(5)["parallel"]["tp"], 3);
}

TEST(Sweep, ErrorsNameTheField) {
  Json bad = sweep_json();
  bad["axes"][0]["field"] = "paralel.tp";
  try {
    parse_sweep(bad, "<sweep-test>", "");
    FAIL();
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("$.axes[0].field"), std::string::npos) << e.what();
  }
  Json uneven = sweep_json();
  uneven["axes"][1]["zip"][1]["values"] = {"none"};
  EXPECT_THROW(parse_sweep(uneven, "<sweep-test>", ""), core::ConfigError);
  Json typo = sweep_json();
  typo["axes"][0]["field"] = "parallel.tpp";
  try {
    parse_sweep(typo, "<sweep-test>", "");
    FAIL();
  } catch (const core::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("tpp"), std::string::npos) << e.what();
  }
}

// tp 3 does not divide 8 GPUs: the point is a result carrying the validator's message.
TEST(Sweep, InvalidPointsAreResults) {
  const SweepSpec s = parse_sweep(sweep_json(), "<sweep-test>", "");
  const Json ok = evaluate_point(s, 0);
  EXPECT_TRUE(ok["ok"].get<bool>());
  EXPECT_GT(ok["step_time_s"].get<double>(), 0.0);
  // The line says where its step time comes from (the sweep's mode), for report's "from" column.
  ASSERT_TRUE(ok.contains("simulated"));
  EXPECT_EQ(ok["simulated"].get<bool>(), s.simulate);
  const Json bad = evaluate_point(s, 4);
  EXPECT_FALSE(bad["ok"].get<bool>());
  EXPECT_NE(bad["error"].get<std::string>().find("tp*cp*pp = 3"), std::string::npos) << bad.dump();
}

TEST(Sweep, ResumeSkipsFinishedPointsAndIgnoresACutLine) {
  const SweepSpec s = parse_sweep(sweep_json(), "<sweep-test>", "");
  const std::string full = temp_out("full.jsonl");
  RunOptions o;
  o.out = full;
  run_sweep(s, o);
  std::ifstream fin(full);
  const std::string want((std::istreambuf_iterator<char>(fin)), std::istreambuf_iterator<char>());

  // A killed run: points 0 and 3 recorded in a part file, then half a line.
  const std::string cut = temp_out("cut.jsonl");
  {
    std::ofstream part(cut + ".part1");
    part << evaluate_point(s, 0).dump() << "\n" << evaluate_point(s, 3).dump() << "\n" << R"({"point": 4, "sett)";
  }
  EXPECT_EQ(finished_points(cut), (std::set<size_t>{0, 3}));
  RunOptions again;
  again.out = cut;
  EXPECT_THROW(run_sweep(s, again), core::UserError);  // results exist: must say --resume
  again.resume = true;
  const RunSummary sum = run_sweep(s, again);
  EXPECT_EQ(sum.skipped, 2u);
  EXPECT_EQ(sum.evaluated, 4u);
  std::ifstream cin(cut);
  const std::string got((std::istreambuf_iterator<char>(cin)), std::istreambuf_iterator<char>());
  EXPECT_EQ(got, want);
  EXPECT_FALSE(std::filesystem::exists(cut + ".part1"));
}

// A field on two axes (the later would override the earlier) and a grid past a million points
// are refused when the sweep is read; resuming refuses a file of something else (never
// overwritten) and results another sweep wrote.
TEST(Sweep, RefusesAmbiguousHugeAndForeignWork) {
  Json dup = sweep_json();
  dup["axes"].push_back({{"field", "parallel.tp"}, {"values", {4}}});
  try {
    parse_sweep(dup, "<sweep-test>", "");
    FAIL();
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("$.axes[2]: field \"parallel.tp\" is already swept by $.axes[0]"), std::string::npos) << e.what();
  }
  Json huge = sweep_json();
  Json many = Json::array();
  for (int i = 0; i < 2000; ++i) many.push_back(i + 1);
  huge["axes"] = {{{"field", "training.seq_len"}, {"values", many}}, {{"field", "training.global_batch_size"}, {"values", many}}};
  try {
    parse_sweep(huge, "<sweep-test>", "");
    FAIL();
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("4e+06 points, over the limit"), std::string::npos) << e.what();
  }
  const SweepSpec s = parse_sweep(sweep_json(), "<sweep-test>", "");
  const std::string notes = temp_out("notes.txt");
  {
    std::ofstream o(notes);
    o << "my notes\n";
  }
  RunOptions o;
  o.out = notes;
  o.resume = true;
  EXPECT_THROW(run_sweep(s, o), core::UserError);
  std::ifstream kept(notes);
  std::string line;
  std::getline(kept, line);
  EXPECT_EQ(line, "my notes");
  const std::string foreign = temp_out("foreign.jsonl");
  {
    std::ofstream f(foreign);
    Json other = evaluate_point(s, 1);
    other["settings"]["parallel.tp"] = 8;  // not what point 1 of this sweep sets
    f << other.dump() << "\n";
  }
  o.out = foreign;
  try {
    run_sweep(s, o);
    FAIL();
  } catch (const core::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("point 1 was made by a different sweep"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace stepcast::sweep
