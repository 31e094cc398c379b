// stepcast benchmarks (Google Benchmark): raw engine throughput and the step simulations the
// issue sets targets for. scripts/bench.sh runs them and writes reports/performance.md.
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <string>
#include <vector>

#include "sim/config/run_config.hpp"
#include "sim/engine/engine.hpp"
#include "sim/engine/step_sim.hpp"

namespace {

using stepcast::engine::Engine;
using stepcast::engine::Task;
using stepcast::engine::TaskGraph;

// 64 ranks x N tasks on two streams, with a collective every 16 tasks.
void BM_EngineEvents(benchmark::State& state) {
  const int32_t ranks = 64;
  const int64_t per_rank = state.range(0);
  uint64_t events = 0;
  for (auto _ : state) {
    state.PauseTiming();
    TaskGraph g(ranks);
    const uint32_t name = g.intern("op");
    std::vector<uint32_t> colls;
    for (int64_t k = 0; k < per_rank / 16; ++k) colls.push_back(g.add_collective(1000, name));
    for (int32_t r = 0; r < ranks; ++r) {
      for (int64_t k = 0; k < per_rank; ++k) {
        Task t;
        t.rank = r;
        t.duration = 1000 + (k * 7 + r) % 13;
        t.name = name;
        t.stream = (k % 3 == 0) ? stepcast::engine::Stream::kDp : stepcast::engine::Stream::kCompute;
        const auto id = g.add(t);
        if (k % 16 == 15) g.join(colls[static_cast<size_t>(k / 16)], id);
      }
    }
    state.ResumeTiming();
    Engine e(g);
    events += e.run().events;
  }
  state.counters["events_per_s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EngineEvents)->Arg(16384)->Unit(benchmark::kMillisecond);

// The issues' target steps are the example run files (configs/examples), loaded from the
// source tree so the benchmarks and the examples cannot drift apart.
stepcast::config::RunConfig example(const std::string& name, const std::vector<std::string>& overrides = {}) {
  return stepcast::config::load_run_file(std::string(STEPCAST_SOURCE_DIR) + "/configs/examples/" + name + ".json", overrides);
}

// Issue 3 target: llama3.1-405b on 16,384 h100-sxm (tp 8, pp 16 with first and last stages one
// layer short, dp 128, 1F1B); with one slow rank every rank is simulated.
stepcast::config::RunConfig llama405b(bool slow_rank) {
  return example("llama3.1-405b-h100x16384",
                 slow_rank ? std::vector<std::string>{R"(scenario={"slowdown": {"ranks": [5], "factor": 1.1}})"} : std::vector<std::string>{});
}

void BM_Llama405bSymmetric(benchmark::State& state) {
  const auto rc = llama405b(false);
  double step = 0;
  for (auto _ : state) step = stepcast::engine::simulate_step(rc).step.step_time_s;
  state.counters["step_time_s"] = step;
}
BENCHMARK(BM_Llama405bSymmetric)->Unit(benchmark::kMillisecond);

void BM_Llama405bAllRanks(benchmark::State& state) {
  const auto rc = llama405b(true);
  stepcast::engine::SimResult r;
  for (auto _ : state) r = stepcast::engine::simulate_step(rc);
  state.counters["step_time_s"] = r.step.step_time_s;
  state.counters["tasks"] = static_cast<double>(r.tasks);
  state.counters["events"] = static_cast<double>(r.events);
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  state.counters["peak_rss_GiB"] = static_cast<double>(ru.ru_maxrss) / (1024.0 * 1024.0);
}
BENCHMARK(BM_Llama405bAllRanks)->Unit(benchmark::kSecond)->Iterations(1);

// Issue 4 target: deepseek-v3 on 2,048 h800 (pp 16, ep 64, dp 128, tp 1) with symmetry < 2 s.
void BM_DeepseekV3Symmetric(benchmark::State& state) {
  const auto rc = example("deepseek-v3-h800x2048");
  stepcast::engine::SimResult r;
  for (auto _ : state) r = stepcast::engine::simulate_step(rc);
  state.counters["step_time_s"] = r.step.step_time_s;
  state.counters["tasks"] = static_cast<double>(r.tasks);
}
BENCHMARK(BM_DeepseekV3Symmetric)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
