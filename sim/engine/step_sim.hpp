// stepcast step simulation: one optimizer step as a discrete-event run.
//
// The builder turns the run (model, layout, schedule, scenario) into a TaskGraph:
//   - per stage and micro-batch, each layer's forward and backward compute on the compute
//     stream, with the layer's exposed TP/CP/EP communication as a collective over the rank's
//     tensor/context-parallel group (blocking, on the compute stream);
//   - the pipeline schedule fixes each stage's compute order (GPipe, 1F1B, interleaved 1F1B
//     with vpp chunks, ZB-H1 with backward split into input- and weight-gradient work whose
//     weight part is deferred into the cool-down); activations and gradients cross stages as
//     sends that the receiver's first layer waits for;
//   - data parallel: DDP buckets (first 1 MB, then bucket_mb) in reverse layer order on the DP
//     stream, each launched when its last layer's final backward is done (or after every
//     micro-batch without no_sync); ZeRO-1/2 reduce-scatter, optimizer, all-gather of updated
//     shards; ZeRO-3/FSDP all-gather per layer before use (prefetched on the DP stream, again in
//     backward when resharding) and reduce-scatter after each layer's backward, or both in line
//     with the compute when param_gather_overlap / grad_reduce_overlap are off;
//   - the optimizer step on the compute stream once the stage's gradients are reduced.
// Identical ranks are simulated once (one representative rank per pipeline stage); a scenario
// (slowdowns, jitter, host work) simulates every rank, so collectives wait for the slowest
// participant. Bubble fraction, exposed communication and the memory timeline's peak are read
// from the simulated timeline (the compute stream's waits for ZeRO-3/FSDP collectives count as
// exposed data-parallel communication, not bubble).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sim/config/run_config.hpp"
#include "sim/engine/engine.hpp"
#include "sim/engine/task_graph.hpp"
#include "sim/estimate/estimate.hpp"

namespace stepcast::engine {

struct SimOptions {
  bool full = false;        // simulate every rank even without a scenario
  bool keep_timeline = false;  // keep the graph and start/finish times (for traces)
  // Schedule study: uniform stages of transformer layers only (no embedding or output layer),
  // free communication and no optimizer, so the timeline shows the schedule's own bubble.
  bool ideal = false;
  // Multiplies every compute operator's time: a measured-over-predicted calibration of one
  // workload on one machine (1 = the cost model as is).
  double compute_scale = 1.0;
  // Progress of long simulations: (phase, fraction done); null for silence.
  std::function<void(const char*, double)> progress;
  // Refuse an all-ranks simulation estimated above this many tasks (0: no limit).
  int64_t max_tasks = 200'000'000;
};

struct StageStats {
  double busy_s = 0;             // compute-stream time of pipeline work (fwd, bwd, tp comm, p2p)
  double compute_s = 0;          // of which layer compute (as simulated: slowdowns, jitter)
  double tp_comm_s = 0;          // of which exposed TP/CP/EP communication
  double comm_stretch_s = 0;     // of which those exchanges lost sharing links with other flows
  double pp_comm_s = 0;          // of which blocking pipeline sends (and, under pp_rendezvous, receives)
  double slowed_s = 0;           // of which compute lost to communication running beside it
  double dp_wait_s = 0;          // compute-stream idle time waiting for ZeRO-3 / FSDP collectives
  double offload_wait_s = 0;     // compute-stream idle time waiting for activation copies
  double pipeline_end_s = 0;     // last pipeline task on this stage
  int64_t max_inflight = 0;      // micro-batch chunks forwarded and not yet backwarded
  double peak_activation_bytes = 0;
  double peak_memory_bytes = 0;  // resident state + activation peak + larger working set
};

struct SimResult {
  estimate::StepEstimate step;       // output contract; bubble and breakdown from the timeline
  std::vector<StageStats> stages;
  double memory_timeline_peak_bytes = 0;
  int64_t memory_peak_stage = 0;
  double collective_wait_s = 0;      // summed over simulated ranks
  // Data-parallel collectives waiting for the compute kernel in flight to free SMs, summed
  // over simulated ranks (Engine::kernel_waits).
  double kernel_wait_s = 0;
  double max_rank_wait_s = 0;        // the rank that waited longest in collectives
  std::vector<double> rank_wait_s;   // per simulated rank
  uint64_t events = 0;
  size_t tasks = 0;
  int64_t ranks_simulated = 0;
  bool full = false;
  // Kept when SimOptions::keep_timeline.
  std::shared_ptr<TaskGraph> graph;
  std::vector<Tick> start, finish;
  std::vector<int64_t> rank_ids;     // global rank of each simulated rank
};

SimResult simulate_step(const config::RunConfig& rc, const SimOptions& opt = {});

// Chrome / Perfetto trace JSON of a kept timeline: one process per rank, one thread per stream,
// operators named by layer and micro-batch. Deterministic text.
// only_ranks: global ranks to include (empty: every simulated rank). operators: nest each
// layer's compute operators (GEMMs, attention, norms, ...) inside its task, scaled to it.
std::string trace_json(const config::RunConfig& rc, const SimResult& r, const std::vector<int64_t>& only_ranks = {},
                       bool operators = false);

}  // namespace stepcast::engine
