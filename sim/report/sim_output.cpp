#include "sim/report/sim_output.hpp"

#include <cstdio>
#include <sstream>

#include "sim/report/output.hpp"

namespace stepcast::report {

using core::Json;

Json simulate_json(const config::RunConfig& rc, const engine::SimResult& r, const std::string& command) {
  Json out = estimate_json(rc, r.step, command);
  out["memory_timeline_peak_bytes"] = r.memory_timeline_peak_bytes;
  out["memory_timeline_peak_stage"] = r.memory_peak_stage;
  Json stages = Json::array();
  for (size_t s = 0; s < r.stages.size(); ++s) {
    const auto& st = r.stages[s];
    stages.push_back({{"stage", s},
                      {"busy_s", st.busy_s},
                      {"compute_s", st.compute_s},
                      {"tp_comm_s", st.tp_comm_s},
                      {"comm_shared_s", st.comm_stretch_s},
                      {"pp_comm_s", st.pp_comm_s},
                      {"pipeline_end_s", st.pipeline_end_s},
                      {"max_inflight_microbatches", st.max_inflight},
                      {"peak_activation_bytes", st.peak_activation_bytes},
                      {"peak_memory_bytes", st.peak_memory_bytes}});
  }
  out["simulation"] = {{"mode", r.full ? "all-ranks" : "symmetric"},
                       {"ranks_simulated", r.ranks_simulated},
                       {"tasks", r.tasks},
                       {"events", r.events},
                       {"collective_wait_s", r.collective_wait_s},
                       {"max_rank_collective_wait_s", r.max_rank_wait_s},
                       {"kernel_wait_s", r.kernel_wait_s},
                       {"stages", stages}};
  return out;
}

std::string simulate_table(const config::RunConfig& rc, const engine::SimResult& r) {
  std::ostringstream o;
  std::string body = estimate_table(rc, r.step);
  const std::string from = "analytical estimate";
  if (body.compare(0, from.size(), from) == 0) body.replace(0, from.size(), "simulated step");
  o << body;
  char buf[256];
  std::snprintf(buf, sizeof buf, "simulation: %s, %lld ranks, %zu tasks, %llu events; memory timeline peak %.2f GiB (stage %lld)\n",
                r.full ? "all ranks" : "one rank per stage", static_cast<long long>(r.ranks_simulated), r.tasks,
                static_cast<unsigned long long>(r.events), r.memory_timeline_peak_bytes / 1073741824.0,
                static_cast<long long>(r.memory_peak_stage));
  o << buf;
  // What the compute stream's exchanges lost to flows sharing their links, on the stage that
  // lost most: contention a layout could avoid (place the groups inside a node, or keep the
  // ZeRO-3 traffic off the NIC).
  size_t worst = 0;
  for (size_t s = 1; s < r.stages.size(); ++s) {
    if (r.stages[s].comm_stretch_s > r.stages[worst].comm_stretch_s) worst = s;
  }
  if (!r.stages.empty() && r.stages[worst].comm_stretch_s > 0.005 * r.step.step_time_s) {
    std::snprintf(buf, sizeof buf, "link sharing: %.4f s of stage %zu's exposed TP/CP/EP time (%.4f s) is lost to other flows on its links\n",
                  r.stages[worst].comm_stretch_s, worst, r.stages[worst].tp_comm_s);
    o << buf;
  }
  // Data-parallel collectives held back by the compute kernel in flight (their stream's
  // priority equal to compute's): on the timeline only where their stream is busy, but it says
  // why many small buckets cost more.
  const double kernel_wait = r.kernel_wait_s / static_cast<double>(std::max<int64_t>(1, r.ranks_simulated));
  if (kernel_wait > 0.005 * r.step.step_time_s) {
    std::snprintf(buf, sizeof buf,
                  "kernel wait: data-parallel collectives waited %.4f s per simulated rank for compute kernels to free SMs "
                  "(time on their streams; the step pays it where those streams are busy; parallel.comm_high_priority: "
                  "their streams outrank compute)\n",
                  kernel_wait);
    o << buf;
  }
  if (r.full) {
    std::snprintf(buf, sizeof buf, "collective wait: %.4f s summed over ranks, %.4f s on the rank that waited most\n",
                  r.collective_wait_s, r.max_rank_wait_s);
    o << buf;
  }
  return o.str();
}

}  // namespace stepcast::report
