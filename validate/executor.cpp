#include "validate/executor.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "calibrate/cpu_kernels.hpp"
#include "calibrate/mpi_world.hpp"
#include "sim/core/error.hpp"

#ifdef STEPCAST_HAVE_MPI
#include <mpi.h>
#endif

namespace stepcast::validate {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Resident set size (VmRSS) or its high-water mark (VmHWM) in bytes.
double proc_status_bytes(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string k, rest;
  double kb = 0;
  while (in >> k) {
    if (k == key) {
      in >> kb;
      return kb * 1024.0;
    }
    std::getline(in, rest);
  }
  return 0.0;
}

}  // namespace

namespace {

// The world the ranks share: MPI when this build has it (and it is initialised), otherwise a
// world of one (a single-GPU validation needs no MPI).
using World = calibrate::MpiWorld;

std::string describe(const Program& prog, int64_t i) {
  if (i < 0) return "between steps";
  if (i >= static_cast<int64_t>(prog.step.size())) return "the end of the step (waiting for outstanding work)";
  const Instr& in = prog.step[static_cast<size_t>(i)];
  std::string s = "'" + prog.names[in.name] + "'";
  if (in.microbatch >= 0) s += std::string(", micro-batch ") + std::to_string(in.microbatch);
  if (in.layer >= -1) s += in.layer == -1 ? std::string(", embedding") : std::string(", layer ") + std::to_string(in.layer);
  auto group = [](const std::vector<int64_t>& g) {
    std::string t = "[";
    for (size_t k = 0; k < g.size(); ++k) {
      if (k) t += ",";
      t += std::to_string(g[k]);
    }
    t += "]";
    return t;
  };
  switch (in.kind) {
    case Kind::kCollective: {
      const char* kind = in.group == Group::kTp    ? "tensor"
                         : in.group == Group::kDp  ? "data"
                         : in.group == Group::kEp  ? "expert"
                         : in.group == Group::kEdp ? "expert-data"
                                                   : "context";
      s += std::string(" (") + cost::to_string(in.collective) + " on the " + kind + "-parallel group " + group(prog.group(in.group)) + ")";
      break;
    }
    case Kind::kRecv: s += std::string(" (waiting for rank ") + std::to_string(in.peer) + ")"; break;
    case Kind::kSend: s += std::string(" (to rank ") + std::to_string(in.peer) + ")"; break;
    default: s += std::string(" (") + to_string(in.category) + ")"; break;
  }
  return s;
}

void inject(const std::string& fault, int64_t rank) {
  const auto colon = fault.find(':');
  if (colon == std::string::npos || std::atoll(fault.c_str() + colon + 1) != rank) return;
  if (fault.compare(0, colon, "die") == 0) std::raise(SIGKILL);
  if (fault.compare(0, colon, "hang") == 0) {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

}  // namespace

Measured execute(const config::RunConfig& rc, const ExecOptions& opt, Backend& backend) {
  const World world;
  const int rank = world.rank, size = world.size;
  if (size != rc.cluster.num_gpus) {
    throw core::UserError(rc.source_name + std::string(": the run has ") + std::to_string(rc.cluster.num_gpus) +
                          " ranks (cluster.num_gpus) but " + std::to_string(size) +
                          std::string(" processes were started; run it with mpirun -n ") + std::to_string(rc.cluster.num_gpus));
  }
  const Program prog = build_program(rc, rank);
  const char* fault_env = std::getenv("STEPCAST_VALIDATE_FAULT");
  const std::string fault = fault_env ? fault_env : "";

  // Watchdog: no completed instruction for timeout_s ends this rank with a message.
  std::atomic<int64_t> cursor{-1};
  std::atomic<double> progress{now_s()};
  std::atomic<int> step_no{-1};
  std::atomic<bool> done{false};
  std::thread watchdog([&]() {
    while (!done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const double idle = now_s() - progress.load();
      if (idle > opt.timeout_s && !done.load()) {
        const std::string where = describe(prog, cursor.load());
        std::fprintf(stderr, "stepcast: error: validate: rank %d made no progress for %.0f s in step %d at %s; ending the run\n", rank,
                     idle, step_no.load(), where.c_str());
        std::fflush(stderr);
        std::_Exit(124);
      }
    }
  });
  struct Join {
    std::atomic<bool>& done;
    std::thread& t;
    ~Join() {
      done.store(true);
      if (t.joinable()) t.join();
    }
  } join{done, watchdog};

  backend.prepare(rc, prog);
  progress.store(now_s());
  Measured out;
  out.backend = backend.name();
  out.steps = opt.steps;
  out.warmup = opt.warmup;
  out.reference = backend.reference_shape();
  // The machine's speed, from the calibration's reference GEMM (calibrate/cpu_kernels.hpp; about
  // 0.1 s on CPUs) timed by every rank at once, the slowest kept: before the plan, before each
  // measured step and after the last. The median of the samples is the plan's reference time.
  auto reference_sample = [&]() {
    world.barrier();
    out.reference_samples_s.push_back(world.max(backend.reference_gemm_s(out.reference, calibrate::kReferenceGemmReps)));
    progress.store(now_s());
  };
  reference_sample();
  const double rss_base = proc_status_bytes("VmRSS:");
  backend.allocate_state(prog);
  progress.store(now_s());

  RankMeasurement me;
  const auto& code = prog.step;
  const int total = opt.warmup + opt.steps;
  for (int s = 0; s < total; ++s) {
    step_no.store(s);
    if (s >= opt.warmup) reference_sample();
    world.barrier();
    const double t0 = now_s();
    progress.store(t0);
    for (size_t i = 0; i < code.size(); ++i) {
      cursor.store(static_cast<int64_t>(i));
      if (s == 0 && !fault.empty() && i == code.size() / 3) inject(fault, rank);
      backend.mark(i);
      backend.run(code[i]);
      progress.store(now_s());
    }
    backend.mark(code.size());
    cursor.store(static_cast<int64_t>(code.size()));
    const double send_wait = backend.finish_step();
    const double t = now_s() - t0;
    cursor.store(-1);
    progress.store(now_s());
    const double tmax = world.max(t);
    if (rank == 0) {
      std::fprintf(stderr, "validate: step %d/%d%s: %.1f ms\n", s + 1, total, s < opt.warmup ? " (warm-up)" : "", tmax * 1e3);
      std::fflush(stderr);
    }
    if (s < opt.warmup) continue;
    std::array<double, kCategories> cat{};
    const bool last = s == total - 1;
    for (size_t i = 0; i < code.size(); ++i) {
      const Instr& in = code[i];
      if (in.kind == Kind::kAlloc || in.kind == Kind::kFree) continue;
      const double d = backend.elapsed(i);
      cat[static_cast<size_t>(in.category)] += d;
      if (last) me.trace.push_back({backend.since_start(i), d, in.name, in.category, in.microbatch, in.layer});
    }
    cat[static_cast<size_t>(Category::kPpComm)] += send_wait;
    if (last) me.trace_t0_s = t0;
    me.step_s.push_back(t);
    me.category_s.push_back(cat);
    out.step_s.push_back(tmax);
  }
  reference_sample();
  const MemoryStats mem = backend.memory();
  me.rank = rank;
  me.stage = prog.stage;
  me.peak_allocated_bytes = mem.peak_allocated;
  me.peak_reserved_bytes = mem.peak_reserved;
  me.workspace_bytes = mem.workspace;
  me.rss_delta_bytes = std::max(0.0, proc_status_bytes("VmHWM:") - rss_base);

  // Every rank's measurement to rank 0, in the form validate journals it.
  for (const std::string& text : world.gather(rank_measurement_json(me).dump())) {
    out.ranks.push_back(rank_measurement_from_json(core::Json::parse(text)));
  }
  return out;
}

}  // namespace stepcast::validate
