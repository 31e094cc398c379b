// Seeded mutations of the example run files: every mutated file either loads and yields a
// finite estimate and ledger, or is refused with one UserError that names a JSON path. Any
// other exception, a non-finite number or a crash fails the test. The seed fixes the cases, so
// a failure reproduces.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "sim/config/run_config.hpp"
#include "sim/core/error.hpp"
#include "sim/core/json_reader.hpp"
#include "sim/estimate/estimate.hpp"
#include "sim/memory/ledger.hpp"

#ifndef STEPCAST_SOURCE_DIR
#error "STEPCAST_SOURCE_DIR comes from stepcast::model"
#endif

namespace stepcast::config {
namespace {

using core::Json;

// Every value slot of a document, as pointers to the JSON values (objects and arrays included).
void slots(Json& j, std::vector<Json*>& out) {
  out.push_back(&j);
  if (j.is_object()) {
    for (auto& [k, v] : j.items()) slots(v, out);
  } else if (j.is_array()) {
    for (auto& v : j) slots(v, out);
  }
}

Json odd_value(std::mt19937_64& rng) {
  const std::vector<Json> values = {0,     -1,    1,      2,      3,       7,       1e30,    -1e30, 1e-30,   0.5,
                                    "x",   "",    "80GiB", "-5GB", "nan",  "inf",   nullptr, true,  Json::array(),
                                    Json::object(), Json::array({1, 2}), Json{{"a", 1}}, 4611686018427387904LL, 65536};
  return values[std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng)];
}

// One mutation: replace a value (an integer often by another power of two), delete a key, or
// misspell a key.
void mutate(Json& doc, std::mt19937_64& rng) {
  std::vector<Json*> all;
  slots(doc, all);
  std::vector<Json*> objects;
  for (Json* s : all) {
    if (s->is_object() && !s->empty()) objects.push_back(s);
  }
  const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
  if (kind < 2 && !objects.empty()) {
    Json& o = *objects[std::uniform_int_distribution<size_t>(0, objects.size() - 1)(rng)];
    auto it = o.begin();
    std::advance(it, std::uniform_int_distribution<long>(0, static_cast<long>(o.size()) - 1)(rng));
    const std::string key = it.key();
    Json v = it.value();
    o.erase(key);
    if (kind == 1) o[key + "_typo"] = v;
  } else if (all.size() > 1) {
    Json& slot = *all[std::uniform_int_distribution<size_t>(1, all.size() - 1)(rng)];
    if (slot.is_number_integer() && kind < 7) {
      // A plausible size: many of these still give a valid layout, so the cost model runs too.
      slot = int64_t{1} << std::uniform_int_distribution<int>(0, 5)(rng);
    } else {
      slot = odd_value(rng);
    }
  }
}

TEST(MutatedInputs, LoadOrAreRefusedWithAPath) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(std::string(STEPCAST_SOURCE_DIR) + "/configs/examples")) {
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty());
  std::mt19937_64 rng(20261202);
  int loaded = 0, refused = 0;
  for (int i = 0; i < 300; ++i) {
    const std::string& f = files[static_cast<size_t>(i) % files.size()];
    Json doc = core::load_json_file(f);
    const int n = std::uniform_int_distribution<int>(1, 3)(rng);
    for (int k = 0; k < n; ++k) mutate(doc, rng);
    SCOPED_TRACE("case " + std::to_string(i) + " from " + f + ": " + core::show(doc));
    try {
      const RunConfig rc = parse_run(doc, "<mutated>", std::filesystem::path(f).parent_path().string());
      const auto ledger = memory::compute_ledger(rc);
      EXPECT_TRUE(std::isfinite(ledger.peak().value()));
      if (ledger.fits()) {
        const auto e = estimate::estimate_step(rc, ledger);
        EXPECT_TRUE(std::isfinite(e.step_time_s) && e.step_time_s > 0) << e.step_time_s;
        EXPECT_TRUE(std::isfinite(e.mfu));
      }
      ++loaded;
    } catch (const core::UserError& e) {
      // One clear message naming where: a JSON path, or the option/field it concerns.
      const std::string m = e.what();
      EXPECT_FALSE(m.empty());
      EXPECT_NE(m.find('$'), std::string::npos) << m;
      ++refused;
    }
  }
  // Both outcomes occur, so the mutations exercise the validator and the cost model alike.
  EXPECT_GT(loaded, 20);
  EXPECT_GT(refused, 100);
  RecordProperty("loaded", loaded);
  RecordProperty("refused", refused);
}

}  // namespace
}  // namespace stepcast::config
