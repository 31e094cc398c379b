// Report rendering: plan JSON and sweep JSONL both load; the page is self-contained with every
// plot; the Pareto front holds exactly the non-dominated layouts.
#include "sim/report/html_report.hpp"

#include <gtest/gtest.h>

#include "sim/core/error.hpp"

namespace stepcast::report {
namespace {

using core::Json;

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// Three layouts: A fast and large, B slower and smaller, C slower and larger than B (dominated).
Json plan_json() {
  auto layout = [](const char* name, double step, double gib) {
    return Json{{"layout", name}, {"step_time_s", step}, {"peak_memory_bytes", gib * 1073741824.0}, {"mfu", 0.4},
                {"tokens_per_s_per_gpu", 1000.0}, {"bubble_fraction", 0.1},
                {"breakdown", {{"compute_s", step * 0.8}, {"recompute_s", 0.0}, {"bubble_s", step * 0.1}, {"optimizer_s", 0.01},
                               {"exposed_comm_s", {{"tp", step * 0.09}}}}}};
  };
  Json stage = {{"stage", 0}, {"weights_bytes", 1e9}, {"gradients_bytes", 1e9}, {"optimizer_bytes", 2e9}, {"activations_bytes", 3e9},
                {"transient_bytes", 1e8}, {"logits_bytes", 0.0}, {"buffers_bytes", 1e7}, {"runtime_bytes", 1e9}};
  Json event = {{"stage", 0}, {"stream", "compute"}, {"kind", "forward"}, {"label", "fwd L0 mb0"}, {"start_s", 0.0}, {"end_s", 0.01}};
  Json j = Json::object();
  j["title"] = "test";
  j["explanation"] = "A wins.";
  j["layouts"] = Json::array({layout("A", 1.0, 60), layout("B", 1.2, 40), layout("C", 1.3, 50)});
  j["detail"]["ledger"]["stages"] = Json::array({stage});
  j["detail"]["timeline"] = Json::array({event});
  return j;
}

TEST(Report, PlanPageHasEveryPlotAndNoExternalFetch) {
  const ReportData d = load_report_data(plan_json().dump(), "plan.json");
  ASSERT_EQ(d.rows.size(), 3u);
  const std::string html = render_html(d);
  for (const char* id : {"ranked", "pareto", "breakdown", "ledger", "timeline"}) {
    EXPECT_NE(html.find(std::string("<svg id=\"") + id + "\""), std::string::npos) << id;
  }
  EXPECT_NE(html.find("xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);  // a namespace, not a fetch
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("src=\"http"), std::string::npos);
  EXPECT_EQ(html.find("href=\"http"), std::string::npos);
  // Front: A (fastest) and B (less memory than every faster layout); C is dominated by B.
  EXPECT_EQ(count(html, "class=\"front-point\""), 2u);
  EXPECT_EQ(html.find("Offloaded to host memory"), std::string::npos);  // nothing offloaded
}

// A layout with CPU offload says what it keeps in host memory, per GPU and per node.
TEST(Report, PlanPageNamesTheOffloadedHostMemory) {
  Json j = plan_json();
  j["detail"]["ledger"]["stages"][0]["host_bytes"] = 16.0 * 1073741824.0;
  j["detail"]["ledger"]["host_per_node_bytes"] = 128.0 * 1073741824.0;
  j["detail"]["ledger"]["host_capacity_bytes"] = 2048.0 * 1073741824.0;
  const std::string html = render_html(load_report_data(j.dump(), "plan.json"));
  EXPECT_NE(html.find("GiB per GPU: stage 0 16.00; per node 128.0 of 2048.0."), std::string::npos) << html;
}

TEST(Report, SweepLinesLoadSortedAndSkipFailures) {
  const std::string jsonl =
      R"({"point":0,"ok":true,"settings":{"parallel.tp":1},"step_time_s":2.0,"peak_memory_bytes":1e10,"mfu":0.3,"tokens_per_s_per_gpu":10,"bubble_fraction":0})"
      "\n"
      R"({"point":1,"ok":false,"settings":{"parallel.tp":3},"error":"bad"})"
      "\n"
      R"({"point":2,"ok":true,"settings":{"parallel.tp":2},"step_time_s":1.5,"peak_memory_bytes":2e10,"mfu":0.4,"tokens_per_s_per_gpu":12,"bubble_fraction":0})"
      "\n";
  const ReportData d = load_report_data(jsonl, "sweep.jsonl");
  ASSERT_EQ(d.rows.size(), 2u);
  EXPECT_EQ(d.rows[0].label, "tp=2");
  EXPECT_NE(render_csv(d).find("1,\"tp=2\",1.500000"), std::string::npos) << render_csv(d);
  EXPECT_NE(render_markdown(d).find("| 2 | tp=1 |"), std::string::npos);
}

// A sweep line's "simulated" fills the from column; plan JSON written before the output
// contract's names (compute, exposed_comm, ...) still renders the same breakdown.
TEST(Report, SourceColumnAndLegacyBreakdownNames) {
  const std::string jsonl =
      R"({"point":0,"ok":true,"simulated":true,"settings":{"parallel.tp":1},"step_time_s":2.0,"peak_memory_bytes":1e10,"mfu":0.3,"tokens_per_s_per_gpu":10,"bubble_fraction":0})"
      "\n";
  const ReportData d = load_report_data(jsonl, "sweep.jsonl");
  ASSERT_EQ(d.rows.size(), 1u);
  EXPECT_EQ(d.rows[0].source, "simulated");
  EXPECT_NE(render_markdown(d).find("| simulated |"), std::string::npos) << render_markdown(d);
  Json legacy = plan_json();
  for (auto& l : legacy["layouts"]) {
    Json b = l["breakdown"];
    l["breakdown"] = Json{{"compute", b["compute_s"]}, {"recompute", b["recompute_s"]}, {"bubble", b["bubble_s"]},
                          {"optimizer", b["optimizer_s"]}, {"exposed_comm", b["exposed_comm_s"]}};
  }
  EXPECT_EQ(render_html(load_report_data(legacy.dump(), "plan.json")), render_html(load_report_data(plan_json().dump(), "plan.json")));
}

// stepcast validate's JSON: each plan's predicted and measured step by phase, and the rank the
// ledger missed most (rank 1 here, 10% over against rank 0's 1%).
TEST(Report, ValidationPageComparesEveryPlan) {
  auto plan = [](const char* run, double predicted, double measured) {
    return Json{{"run", run},
                {"predicted", {{"step_time_s", predicted}}},
                {"measured", {{"step_time_s", measured}, {"min_s", measured}, {"max_s", measured}}},
                {"drift_adjusted", {{"predicted_step_time_s", measured}, {"step_time_error", 0.0}}},
                {"phases", Json::array({{{"phase", "compute"}, {"predicted_s", predicted * 0.9}, {"measured_s", measured * 0.8}},
                                        {{"phase", "data-parallel communication"}, {"predicted_s", predicted * 0.1}, {"measured_s", measured * 0.2},
                                         {"measured_wait_s", 0.01}}})},
                {"memory", Json::array({{{"rank", 0}, {"predicted_bytes", 1.01e9}, {"measured_bytes", 1e9}},
                                        {{"rank", 1}, {"predicted_bytes", 1.1e9}, {"measured_bytes", 1e9}}})},
                {"memory_worst_error", 0.1}};
  };
  const Json v{{"plans", Json::array({plan("configs/validate/dp2.json", 1.0, 1.1), plan("configs/validate/tp2.json", 1.2, 1.0)})},
               {"summary", {{"plans", 2}, {"median_abs_step_error", 0.14}, {"max_abs_step_error", 0.2}, {"worst_memory_error", 0.1}}}};
  const ReportData d = load_report_data(v.dump(), "validation.json");
  ASSERT_TRUE(d.validation.is_object());
  const std::string html = render_html(d);
  EXPECT_EQ(count(html, "<svg"), 2u);
  EXPECT_EQ(count(html, "http://") + count(html, "https://"), count(html, "http://www.w3.org/2000/svg"));  // no fetches
  EXPECT_NE(html.find("dp2.json predicted"), std::string::npos);
  EXPECT_NE(html.find("tp2.json measured"), std::string::npos);
  EXPECT_NE(html.find("dp2.json rank 1 predicted"), std::string::npos);
  EXPECT_EQ(html.find("rank 0 predicted"), std::string::npos);
  EXPECT_NE(html.find("comm dp"), std::string::npos);
  EXPECT_NE(render_markdown(d).find("| configs/validate/tp2.json | 1200.0 | 1000.0 | +20.0% | 10.0% |"), std::string::npos) << render_markdown(d);
  EXPECT_NE(render_csv(d).find("\"configs/validate/dp2.json\",1.000000,1.100000,-0.090909,0.100000"), std::string::npos) << render_csv(d);
  // A plan without its measurement is named.
  Json bad = v;
  bad["plans"][1].erase("measured");
  try {
    (void)load_report_data(bad.dump(), "validation.json");
    FAIL() << "a plan without its measurement was rendered";
  } catch (const core::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("validation.json: plans[1]: \"measured\" is missing"), std::string::npos) << e.what();
  }
}

// compare --json: A and B as two rows in that order (B faster here), the runs' differences and
// the verdict as the explanation; a side without its step time is named.
TEST(Report, ComparePageShowsBothRuns) {
  Json j = plan_json();
  Json cmp = {{"a", j["layouts"][2]}, {"b", j["layouts"][0]}, {"differs_in", "tp 2 vs 4"}, {"verdict", "B is 30.0% faster than A."}};
  cmp["a"]["name"] = "run.json";
  cmp["b"]["name"] = "run.json parallel.tp=4";
  const ReportData d = load_report_data(cmp.dump(), "cmp.json");
  ASSERT_EQ(d.rows.size(), 2u);
  EXPECT_EQ(d.rows[0].label, "A: run.json");
  EXPECT_EQ(d.rows[1].label, "B: run.json parallel.tp=4");
  EXPECT_EQ(d.explanation, "Differs in: tp 2 vs 4. B is 30.0% faster than A.");
  const std::string html = render_html(d);
  EXPECT_NE(html.find("B is 30.0% faster"), std::string::npos);
  EXPECT_EQ(count(html, "<svg"), 3u);  // ranked, Pareto, breakdown
  cmp["b"].erase("step_time_s");
  try {
    (void)load_report_data(cmp.dump(), "cmp.json");
    FAIL() << "a side without step_time_s was accepted";
  } catch (const core::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("cmp.json: b: \"step_time_s\" is missing"), std::string::npos) << e.what();
  }
}

// scaling --json: bars of tokens/s per GPU, step time and (with a budget) days by GPU count, a
// table with the scaling efficiency against the first count; a count without a layout is a row
// with its error and no bar.
TEST(Report, ScalingPageDrawsEachCount) {
  const Json j = {{"points",
                   {{{"gpus", 64}, {"layout", "tp 2 pp 4"}, {"step_time_s", 100.0}, {"tokens_per_s", 64000.0}, {"mfu", 0.5}, {"steps", 10.0},
                     {"wall_days", 3.0}, {"gpu_hours", 4608.0}, {"cost_usd", 9216.0}, {"goodput", {{"expected_wall_days", 3.1}}}},
                    {{"gpus", 96}, {"error", "no layout fits"}},
                    {{"gpus", 128}, {"layout", "tp 2 pp 8"}, {"step_time_s", 52.0}, {"tokens_per_s", 121600.0}, {"mfu", 0.48}, {"steps", 10.0},
                     {"wall_days", 1.6}, {"gpu_hours", 4915.0}, {"cost_usd", 9830.0}, {"goodput", {{"expected_wall_days", 1.7}}}}}}};
  const ReportData d = load_report_data(j.dump(), "scaling.json");
  ASSERT_EQ(d.table.rows.size(), 3u);
  EXPECT_EQ(d.table.rows[1][1], "no layout fits");
  EXPECT_EQ(d.table.rows[2][5], "95.0%");  // 950 tokens/s per GPU against 1000
  ASSERT_EQ(d.table.charts.size(), 3u);
  EXPECT_EQ(d.table.charts[0].bars.size(), 2u);
  EXPECT_EQ(d.table.charts[2].bars[1].second, 1.7);  // days with failures
  const std::string html = render_html(d);
  EXPECT_EQ(count(html, "<svg"), 3u);
  EXPECT_NE(html.find("95.0% of 64 GPUs"), std::string::npos);
  EXPECT_NE(render_markdown(d).find("| 96 | no layout fits |"), std::string::npos) << render_markdown(d);
  EXPECT_NE(render_csv(d).find("\"128\",\"tp 2 pp 8\""), std::string::npos) << render_csv(d);
  Json bad = j;
  bad["points"][2].erase("tokens_per_s");
  EXPECT_THROW((void)load_report_data(bad.dump(), "scaling.json"), core::UserError);
}

// sensitivity --json: elasticity and step time by resource, the summary as the explanation.
TEST(Report, SensitivityPageDrawsEachResource) {
  const Json j = {{"base", {{"step_time_s", 2.0}}},
                  {"resources", {{{"resource", "compute"}, {"what", "peak"}, {"step_time_s", 1.85}, {"elasticity", 0.82}},
                                 {{"resource", "network"}, {"what", "NIC"}, {"step_time_s", 1.98}, {"elasticity", 0.1}}}},
                  {"summary", "compute bounds the step most"}};
  const ReportData d = load_report_data(j.dump(), "sens.json");
  EXPECT_EQ(d.explanation, "compute bounds the step most");
  ASSERT_EQ(d.table.rows.size(), 3u);  // as given, compute, network
  EXPECT_EQ(d.table.rows[1][2], "-7.5%");
  EXPECT_EQ(render_html(d).find("<svg id=\"elasticity\"") != std::string::npos, true);
  Json bad = j;
  bad["resources"][1]["elasticity"] = "high";
  try {
    (void)load_report_data(bad.dump(), "sens.json");
    FAIL() << "a resource without a numeric elasticity was accepted";
  } catch (const core::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("sens.json: resources[1]: \"elasticity\""), std::string::npos) << e.what();
  }
}

TEST(Report, GarbageIsAClearError) {
  EXPECT_THROW(load_report_data("not json at all\n", "x.jsonl"), core::UserError);
  EXPECT_THROW(load_report_data(R"({"point":0,"ok":false})" "\n", "x.jsonl"), core::UserError);
  // A result without its step time, or with text where a number belongs, names the row and field
  // (it read as a 0 s step before).
  auto message = [](const std::string& text) {
    try {
      (void)load_report_data(text, "plan.json");
    } catch (const core::UserError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(message(R"({"layouts": [{"layout": "a", "step_time_s": 1.0}, {"layout": "b"}]})"),
            "plan.json: layouts[1]: \"step_time_s\" is missing; results from stepcast plan --json or sweep carry it");
  EXPECT_NE(message(R"({"layouts": [{"layout": "a", "step_time_s": 1.0, "mfu": "high"}]})").find("layouts[0]: \"mfu\" is \"high\""),
            std::string::npos);
  EXPECT_NE(message(R"({"layouts": 3})").find("\"layouts\" is 3; expected an array"), std::string::npos);
}

}  // namespace
}  // namespace stepcast::report
