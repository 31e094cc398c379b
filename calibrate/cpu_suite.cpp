#include "calibrate/cpu_suite.hpp"

#include "calibrate/coll_check.hpp"
#include "calibrate/cpu_kernels.hpp"
#include "calibrate/mpi_world.hpp"
#include "calibrate/profile.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

#include "sim/config/hardware.hpp"
#include "sim/core/error.hpp"
#include "sim/core/journal.hpp"
#include "sim/cost/collectives.hpp"
#include "sim/cost/compute.hpp"

#ifdef STEPCAST_HAVE_MPI
#include <mpi.h>
#endif

namespace stepcast::calibrate {

using core::Json;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

double mem_total_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemTotal:") return kb * 1024.0;
  }
  return 8.0 * 1073741824.0;
}

using core::fmt;

// The MPI library's own version line ("Open MPI v4.1.4, ..."), its first line only.
std::string mpi_library_version() {
#ifdef STEPCAST_HAVE_MPI
  char v[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(v, &len);
  (void)len;  // counts the terminating NUL on some libraries
  std::string s(v);
  s = s.substr(0, s.find_first_of("\r\n"));
  return s.empty() ? "MPI" : s;
#else
  return "no MPI (one process)";
#endif
}

struct Shape {
  int m, n, k;
};

// Random, never-zero inputs in [0.5, 1.5]; several sets rotate so caches do not flatter.
double time_gemm(const Shape& s, const MeasureOptions& mo, bool check) {
  std::mt19937 rng(12345u + static_cast<unsigned>(s.m * 31 + s.n * 7 + s.k));
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  const int sets = 3;
  std::vector<Eigen::MatrixXf> A, B;
  for (int i = 0; i < sets; ++i) {
    A.emplace_back(Eigen::MatrixXf::NullaryExpr(s.m, s.k, [&]() { return u(rng); }));
    B.emplace_back(Eigen::MatrixXf::NullaryExpr(s.k, s.n, [&]() { return u(rng); }));
  }
  Eigen::MatrixXf C(s.m, s.n);
  int next = 0;
  const Measurement m = measure(
      [&]() {
        const int i = next++ % sets;
        const double t0 = now_s();
        C.noalias() = A[static_cast<size_t>(i)] * B[static_cast<size_t>(i)];
        return now_s() - t0;
      },
      mo);
  if (check) {
    const int i = (next - 1) % sets;
    const double want = A[static_cast<size_t>(i)].row(0).cast<double>().dot(B[static_cast<size_t>(i)].col(0).cast<double>());
    if (std::abs(C(0, 0) - want) > 1e-3 * std::abs(want)) {
      throw core::InternalError("calibrate: GEMM result check failed (" + std::to_string(C(0, 0)) + " vs " + std::to_string(want) + ")");
    }
  }
  return m.median_s;
}

double copy_bandwidth(const MeasureOptions& mo) {
  const size_t bytes = size_t{64} << 20;
  std::vector<std::vector<char>> bufs(3, std::vector<char>(bytes));
  for (size_t b = 0; b < bufs.size(); ++b) std::memset(bufs[b].data(), static_cast<int>(b + 1), bytes);
  int i = 0;
  const Measurement m = measure(
      [&]() {
        auto& src = bufs[static_cast<size_t>(i % 3)];
        auto& dst = bufs[static_cast<size_t>((i + 1) % 3)];
        ++i;
        const double t0 = now_s();
        std::memcpy(dst.data(), src.data(), bytes);
        return now_s() - t0;
      },
      mo);
  return 2.0 * static_cast<double>(bytes) / m.median_s;
}

constexpr size_t kRingBytes = size_t{64} << 20;

// Parameters per second of the shared Adam kernel over 4 Mi parameters (64 MiB of state).
double optimizer_rate(const MeasureOptions& mo) {
  const size_t n = size_t{4} << 20;
  std::vector<float> w(n, 1.0f), g(n, 0.01f), m(n, 0.0f), v(n, 0.0f);
  const Measurement t = measure(
      [&]() {
        const double t0 = now_s();
        adam_step(w.data(), g.data(), m.data(), v.data(), n);
        return now_s() - t0;
      },
      mo);
  if (!std::isfinite(w[n / 2]) || w[n / 2] >= 1.0f) throw core::InternalError("calibrate: the Adam step did not update the weights");
  return static_cast<double>(n) / t.median_s;
}

const char* const kOps[] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv"};

#ifdef STEPCAST_HAVE_MPI
// One collective of `bytes` (nccl-tests convention) on every rank; the time is the slowest
// rank's, so every rank sees the same samples and stops after the same repetitions.
double time_collective(const std::string& op, size_t bytes, int rank, int size, const MeasureOptions& mo) {
  const size_t count = bytes / sizeof(float);
  // Inputs and outputs rotate through 64 MiB rings, so caches do not flatter small sizes (a
  // training step's collectives run between kernels that evict them).
  // Allocated once per process (page faults of fresh rings would be timed otherwise).
  // The input ring holds never-zero hashed values (coll_check_value), the same as the check.
  static RotatingBuffer in_ring(kRingBytes), out_ring(kRingBytes);
  static const bool filled = [&]() {
    auto* f = reinterpret_cast<float*>(in_ring.next(0));
    for (size_t i = 0; i < kRingBytes / sizeof(float); ++i) f[i] = coll_check_value(rank, i);
    return true;
  }();
  (void)filled;
  float* in = nullptr;
  float* out = nullptr;
  const int per = static_cast<int>(count / static_cast<size_t>(size));
  auto run_op = [&]() {
    in = reinterpret_cast<float*>(in_ring.next(bytes));
    out = reinterpret_cast<float*>(out_ring.next(bytes));
    if (op == "all_reduce") {
      MPI_Allreduce(in, out, static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    } else if (op == "all_gather") {
      MPI_Allgather(in, per, MPI_FLOAT, out, per, MPI_FLOAT, MPI_COMM_WORLD);
    } else if (op == "reduce_scatter") {
      MPI_Reduce_scatter_block(in, out, per, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    } else if (op == "all_to_all") {
      MPI_Alltoall(in, per, MPI_FLOAT, out, per, MPI_FLOAT, MPI_COMM_WORLD);
    } else if (op == "broadcast") {
      // The root's input is re-filled by the rotation's previous users only; values do not matter.
      MPI_Bcast(out, static_cast<int>(count), MPI_FLOAT, 0, MPI_COMM_WORLD);
    } else {
      const int peer = rank ^ 1;
      if (peer < size) {
        MPI_Sendrecv(in, static_cast<int>(count), MPI_FLOAT, peer, 7, out, static_cast<int>(count), MPI_FLOAT, peer, 7,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      }
    }
  };
  // Like nccl-tests, one sample times a batch of back-to-back operations between barriers, so
  // the barrier's exit skew is spread over the batch; the batch is sized from a probe to last
  // about 1 ms, the same on every rank (the probe's slowest-rank time decides).
  auto timed_batch = [&](int k) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    for (int i = 0; i < k; ++i) run_op();
    double d = (MPI_Wtime() - t0) / k, dmax = 0;
    MPI_Allreduce(&d, &dmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return dmax;
  };
  const double probe = timed_batch(3);
  // Shared-memory collectives of a new size take tens of milliseconds of back-to-back
  // operations to settle (the first few hundred run up to 3x slower); 50 ms of them first, so
  // every size is measured in the same settled state.
  timed_batch(static_cast<int>(std::clamp(std::ceil(0.05 / std::max(probe, 1e-9)), 3.0, 20000.0)));
  const int batch = static_cast<int>(std::clamp(std::ceil(1e-3 / std::max(probe, 1e-9)), 1.0, 2000.0));
  auto once = [&]() { return timed_batch(batch); };
  MeasureOptions lockstep = mo;
  lockstep.agree = [](bool stop) {
    int mine = stop ? 1 : 0, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    return any != 0;
  };
  const Measurement m = measure(once, lockstep);
  // Result check: the rings' starts refilled with check values (the root's output too, for
  // broadcast; every other output poisoned), the operation once more from there, and sampled
  // outputs compared with what it must produce (coll_check).
  in_ring.reset();
  out_ring.reset();
  auto* check_in = reinterpret_cast<float*>(in_ring.next(0));
  auto* check_out = reinterpret_cast<float*>(out_ring.next(0));
  for (size_t i = 0; i < count; ++i) {
    check_in[i] = coll_check_value(rank, i);
    check_out[i] = op == "broadcast" && rank == 0 ? coll_check_value(0, i) : -1.0f;
  }
  run_op();
  const auto idx = coll_sample_indices(coll_output_count(op, count, size));
  std::vector<double> got;
  for (size_t j : idx) got.push_back(out[j]);
  const std::string bad = coll_verify(op, rank, size, count, idx, got, 1e-5, -1.0);
  if (!bad.empty()) throw std::runtime_error("calibrate: " + bad + " (the MPI library returned a wrong result)");
  return m.median_s;
}
#endif

}  // namespace

SuiteResult run_cpu_suite(int rank, int size, const SuiteOptions& opt) {
  SuiteResult r;
  r.ranks = size;
  MeasureOptions mo;
  mo.budget_s = opt.budget_per_benchmark_s;
  // A synchronous job runs at its slowest device's pace: every rank measures at the same time
  // (sharing the memory system as training does) and the slowest rank's result is kept.
  const MpiWorld world;
  auto slowest = [&](double seconds) { return world.max(seconds); };
  // Every measurement goes through the journal (an interrupted run resumes from it).
  core::Journal journal({{"backend", "cpu"}, {"ranks", size}, {"device", cpu_model()}, {"budget_per_benchmark_s", opt.budget_per_benchmark_s},
                   {"build", build_description()}},
                  world.broadcast(opt.journal_previous), opt.journal_path, world.rank == 0 ? opt.journal_path : "");
  // Each progress line says the work behind it: seconds (reused measurements count their
  // recorded time) and measurements taken or reused.
  auto say = [&](const std::string& s) {
    if (rank == 0 && opt.progress) opt.progress(fmt("[%.0f s, ", journal.elapsed_s()) + std::to_string(journal.done() + journal.reused()) + " measured] " + s);
  };
  if (journal.unused() > 0) say("resuming: " + std::to_string(journal.unused()) + " measurements recorded by an interrupted run in " + opt.journal_path);
  auto gemm_s = [&](const Shape& sh) {
    return journal.measure("gemm fp32 " + std::to_string(sh.m) + "x" + std::to_string(sh.n) + "x" + std::to_string(sh.k),
                           [&] { return slowest(time_gemm(sh, mo, true)); });
  };
  // The machine's speed across the calibration: the reference GEMM that validate times beside
  // every measured step (calibrate/cpu_kernels.hpp), sampled by every rank at once at the start
  // of each compute pass and collective sweep and at the end. Their median is the speed the
  // profile's measurements describe; validate reads the drift against it.
  r.reference_gemm = kCpuReferenceGemm;
  const ReferenceGemm& ref = r.reference_gemm;
  std::vector<float> ref_a(static_cast<size_t>(ref.m) * static_cast<size_t>(ref.k)), ref_b(static_cast<size_t>(ref.k) * static_cast<size_t>(ref.n)),
      ref_c(static_cast<size_t>(ref.m) * static_cast<size_t>(ref.n));
  {
    std::mt19937 rng(4321u + static_cast<unsigned>(rank));
    std::uniform_real_distribution<float> u(0.5f, 1.5f);
    for (auto* v : {&ref_a, &ref_b}) {
      for (auto& x : *v) x = u(rng);
    }
  }
  auto reference_sample = [&]() {
    const std::string name = "reference gemm sample " + std::to_string(r.reference_gemm_samples_s.size() + 1);
    r.reference_gemm_samples_s.push_back(journal.measure(name, [&] {
      world.barrier();
      return slowest(time_reference_gemm(ref_a.data(), ref_b.data(), ref_c.data(), ref, kReferenceGemmReps));
    }));
  };
  // --- compute: GEMM shapes of small transformer layers (tokens x hidden / ffn) ---
  const std::vector<Shape> fit_shapes{{32, 256, 256},   {32, 1024, 256},   {32, 256, 1024},   {128, 256, 256},
                                      {128, 1024, 256}, {128, 256, 1024},  {128, 1024, 1024}, {512, 256, 256},
                                      {512, 1024, 256}, {512, 256, 1024},  {512, 1024, 1024}, {2048, 1024, 1024},
                                      // attention per head: QK^T (s x s x d) and PV (s x d x s) with d = 64
                                      {256, 256, 64},   {256, 64, 256},    {1024, 1024, 64},  {1024, 64, 1024}};
  const std::vector<Shape> held_shapes{{64, 512, 512}, {256, 768, 768}, {1024, 512, 2048}, {96, 1536, 384}, {512, 512, 64}, {512, 64, 512}};
  // Compute is measured in three passes, before, amid and after the collectives (tens of
  // seconds apart), and each shape's median kept: a shared machine's per-core speed drifts by up
  // to ~20% over such spans, a profile frozen at one moment describes the machine less well than
  // its typical state, and the median of three sets aside one pass caught in a slow spell.
  // Shapes whose passes disagree by more than 10% are measured up to twice more (as the
  // collectives are); the held-out shapes are treated exactly like the fitted ones.
  struct ComputePass {
    double overhead = 0, copy_s = 0, optimizer_s = 0;  // copy: seconds per byte moved; optimizer: per parameter
    std::vector<double> fit, held;
  };
  // Within a pass, fitted and held-out shapes are measured interleaved by size (each held-out
  // shape between fitted shapes of similar work), so a change of the machine's speed during the
  // pass reaches both alike instead of the held-out shapes measured last.
  std::vector<std::pair<double, int>> gemm_order;  // (work, index: fitted i >= 0, held-out -1 - i)
  for (size_t i = 0; i < fit_shapes.size(); ++i) {
    const auto& sh = fit_shapes[i];
    gemm_order.emplace_back(static_cast<double>(sh.m) * sh.n * sh.k, static_cast<int>(i));
  }
  for (size_t i = 0; i < held_shapes.size(); ++i) {
    const auto& sh = held_shapes[i];
    gemm_order.emplace_back(static_cast<double>(sh.m) * sh.n * sh.k, -1 - static_cast<int>(i));
  }
  std::stable_sort(gemm_order.begin(), gemm_order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  auto compute_pass = [&]() {
    reference_sample();
    ComputePass c;
    c.overhead = gemm_s({8, 8, 8});
    c.fit.assign(fit_shapes.size(), 0.0);
    c.held.assign(held_shapes.size(), 0.0);
    for (const auto& [work, idx] : gemm_order) {
      (void)work;
      if (idx >= 0) {
        c.fit[static_cast<size_t>(idx)] = gemm_s(fit_shapes[static_cast<size_t>(idx)]);
      } else {
        c.held[static_cast<size_t>(-1 - idx)] = gemm_s(held_shapes[static_cast<size_t>(-1 - idx)]);
      }
    }
    c.copy_s = journal.measure("memory copy", [&] { return slowest(1.0 / copy_bandwidth(mo)); });
    c.optimizer_s = journal.measure("optimizer adam", [&] { return slowest(1.0 / optimizer_rate(mo)); });
    return c;
  };
  // One rule for GEMMs and collectives: a benchmark whose passes disagree by more than kNoisy
  // is measured up to kExtraPasses more times, and its median kept.
  constexpr int kComputePasses = 3, kExtraPasses = 2;
  constexpr double kNoisy = 0.10;
  std::vector<ComputePass> passes{compute_pass()};
  say("compute, first pass: gemm " + fmt("%.1f", 2.0 * 2048 * 1024 * 1024 / passes[0].fit[11] / 1e9) + " GFLOP/s at 2048x1024x1024");
  std::vector<HeldGemm> held_gemm;
  auto spread_of = [](const std::vector<double>& v) {  // {median, (max - min) / median}
    const Measurement m = summarize(v);
    return std::pair{m.median_s, (*std::max_element(v.begin(), v.end()) - m.min_s) / m.median_s};
  };
  auto finish_compute = [&]() {
    // Every shape's times across the passes, then the extra measurements of the noisy ones
    // (every rank holds the same slowest-rank times, so all make the same choices).
    std::vector<std::vector<double>> fit_runs(fit_shapes.size()), held_runs(held_shapes.size());
    for (const auto& c : passes) {
      for (size_t i = 0; i < fit_shapes.size(); ++i) fit_runs[i].push_back(c.fit[i]);
      for (size_t i = 0; i < held_shapes.size(); ++i) held_runs[i].push_back(c.held[i]);
    }
    for (int extra = 0; extra < kExtraPasses; ++extra) {
      for (const auto& [work, idx] : gemm_order) {
        (void)work;
        auto& runs = idx >= 0 ? fit_runs[static_cast<size_t>(idx)] : held_runs[static_cast<size_t>(-1 - idx)];
        const Shape& sh = idx >= 0 ? fit_shapes[static_cast<size_t>(idx)] : held_shapes[static_cast<size_t>(-1 - idx)];
        if (spread_of(runs).second > kNoisy) runs.push_back(gemm_s(sh));
      }
    }
    auto ms_list = [](const std::vector<double>& v) {
      std::string out;
      for (size_t i = 0; i < v.size(); ++i) out += (i == 0 ? "" : i + 1 == v.size() ? " and " : ", ") + fmt("%.1f", 1e3 * v[i]);
      return out;
    };
    std::vector<GemmSample> gs;
    for (size_t i = 0; i < fit_shapes.size(); ++i) {
      const auto& sh = fit_shapes[i];
      const double t = spread_of(fit_runs[i]).first;
      gs.push_back({static_cast<double>(sh.m), static_cast<double>(sh.n), static_cast<double>(sh.k), t});
      say("gemm fp32 " + std::to_string(sh.m) + "x" + std::to_string(sh.n) + "x" + std::to_string(sh.k) + ": " + fmt("%.3f", t * 1e3) +
          " ms, " + fmt("%.1f", 2.0 * sh.m * sh.n * sh.k / t / 1e9) + " GFLOP/s (passes " + ms_list(fit_runs[i]) + " ms)");
    }
    double overhead = 0;
    for (const auto& c : passes) overhead += c.overhead / static_cast<double>(passes.size());
    r.gemm = fit_gemm(gs, overhead);
    r.gemm_samples = gs;
    say("gemm fit: rate " + fmt("%.1f", r.gemm.rate / 1e9) + " GFLOP/s, half-dimension " + fmt("%.0f", r.gemm.half_dim) + ", rms error " +
        fmt("%.1f", 100.0 * r.gemm.rms_rel_error) + "%");
    for (size_t i = 0; i < held_shapes.size(); ++i) {
      const auto [t, spread] = spread_of(held_runs[i]);
      // The fitted shapes measured just before and after it in every pass (held-out shapes lie
      // between fitted ones by work).
      const int held_index = -1 - static_cast<int>(i);
      const auto at = std::find_if(gemm_order.begin(), gemm_order.end(), [&](const auto& e) { return e.second == held_index; });
      const auto before = std::find_if(std::make_reverse_iterator(at), gemm_order.rend(), [](const auto& e) { return e.second >= 0; });
      const auto after = std::find_if(at, gemm_order.end(), [](const auto& e) { return e.second >= 0; });
      if (before == gemm_order.rend() || after == gemm_order.end()) throw core::InternalError("calibrate: a held-out GEMM outside the fitted shapes' work");
      auto adjusted = speed_adjusted_runs(fit_runs[static_cast<size_t>(before->second)], fit_runs[static_cast<size_t>(after->second)], held_runs[i]);
      held_gemm.push_back({held_shapes[i].m, held_shapes[i].n, held_shapes[i].k, t, spread, "", std::move(adjusted)});
    }
    double copy_s = 0, optimizer_s = 0;
    for (const auto& c : passes) {
      copy_s += c.copy_s / static_cast<double>(passes.size());
      optimizer_s += c.optimizer_s / static_cast<double>(passes.size());
    }
    r.copy_bandwidth = 1.0 / copy_s;
    say("memory copy: " + fmt("%.2f", r.copy_bandwidth / 1e9) + " GB/s moved");
    r.optimizer_rate = 1.0 / optimizer_s;
    say("optimizer (Adam, fp32): " + fmt("%.1f", r.optimizer_rate / 1e6) + " M parameters/s");
  };

  // --- communication ---
  std::vector<HeldCollective> held_coll;
#ifdef STEPCAST_HAVE_MPI
  if (size > 1) {
    // Sizes every sqrt(2) from 4 KiB to 16 MiB (rounded to 256 bytes) are fitted: protocol
    // switches (MPI's eager limit) and cache-size transitions are steps, so the grid is dense.
    // The held-out sizes, 1.5 x 4^k, fall between grid points and are never fitted.
    std::vector<size_t> fit_sizes, held_sizes;
    for (int i = 0; i <= 24; ++i) {
      fit_sizes.push_back(static_cast<size_t>(std::llround(4096.0 * std::pow(2.0, i / 2.0) / 256.0)) * 256);
    }
    // MPI switches from eager to rendezvous at 4 KiB per message (Open MPI's shared-memory
    // default); a ranks x 4 KiB operation is the first whose per-rank pieces cross it, so the
    // grid brackets the step from below too (the interpolation cannot cross a step it does
    // not see).
    fit_sizes.push_back(static_cast<size_t>(size) * 4096 - 256);
    std::sort(fit_sizes.begin(), fit_sizes.end());
    fit_sizes.erase(std::unique(fit_sizes.begin(), fit_sizes.end()), fit_sizes.end());
    for (size_t b = 4096; b < (size_t{16} << 20); b *= 4) held_sizes.push_back(b + b / 2);
    // Fitted and held-out sizes are measured in one ascending pass, so both see the same
    // machine state (a held-out size is measured between its fitted neighbours).
    std::vector<std::pair<size_t, bool>> order;  // (bytes, held out)
    for (size_t b : fit_sizes) order.emplace_back(b, false);
    for (size_t b : held_sizes) order.emplace_back(b, true);
    std::sort(order.begin(), order.end());
    // Three passes seconds apart, and the median of each size's passes kept: the shared
    // machine's speed drifts over seconds, and a transient slowdown during one pass would
    // otherwise be frozen into one point of the curve (and the interpolation around it).
    // Sizes whose passes disagree by more than 10% get up to two more (adaptive on noise;
    // every rank sees the same slowest-rank times, so all make the same choice).
    constexpr int kPasses = 3;
    for (size_t oi = 0; oi < std::size(kOps); ++oi) {
      const char* op = kOps[oi];
      if (oi == std::size(kOps) / 2) passes.push_back(compute_pass());  // the middle compute pass
      reference_sample();
      std::vector<CollSample> cs;
      std::vector<std::vector<double>> runs(order.size());
      auto coll_s = [&](size_t bytes) {
        return journal.measure(std::string(op) + " " + std::to_string(bytes) + " B", [&] { return time_collective(op, bytes, rank, size, mo); });
      };
      for (int pass = 0; pass < kPasses; ++pass) {
        for (size_t i = 0; i < order.size(); ++i) runs[i].push_back(coll_s(order[i].first));
      }
      for (int extra = 0; extra < kExtraPasses; ++extra) {
        for (size_t i = 0; i < order.size(); ++i) {
          if (spread_of(runs[i]).second > kNoisy) runs[i].push_back(coll_s(order[i].first));
        }
      }
      for (size_t i = 0; i < order.size(); ++i) {
        const auto [b, held] = order[i];
        const auto [t, spread] = spread_of(runs[i]);
        if (held) {
          // Every held-out size lies strictly between two fitted grid sizes, its neighbours in
          // the ascending order.
          const auto& lo = order.at(i - 1);
          const auto& hi = order.at(i + 1);
          if (lo.second || hi.second) throw core::InternalError("calibrate: held-out sizes next to each other");
          auto within = within_pass_errors(static_cast<double>(lo.first), runs[i - 1], static_cast<double>(hi.first), runs[i + 1],
                                           static_cast<double>(b), runs[i]);
          held_coll.push_back({op, b, t, spread, std::move(within)});
        } else {
          cs.push_back({static_cast<double>(b), t});
        }
      }
      r.collectives.push_back(fit_collective(op, size, op_bus_factor(op, size), cs));
      say(std::string(op) + ": plateau busbw " + fmt("%.2f", r.collectives.back().plateau_busbw / 1e9) + " GB/s, latency " +
          fmt("%.1f", r.collectives.back().alpha_s * 1e6) + " us");
    }
  }
#endif

  while (passes.size() < static_cast<size_t>(kComputePasses)) passes.push_back(compute_pass());  // without collectives, back to back
  finish_compute();
  reference_sample();
  say("reference gemm " + std::to_string(ref.m) + "x" + std::to_string(ref.n) + "x" + std::to_string(ref.k) + ": median " +
      fmt("%.3f", core::median(r.reference_gemm_samples_s) * 1e3) + " ms over " + std::to_string(r.reference_gemm_samples_s.size()) + " samples (" +
      fmt("%.3f", *std::min_element(r.reference_gemm_samples_s.begin(), r.reference_gemm_samples_s.end()) * 1e3) + "-" +
      fmt("%.3f", *std::max_element(r.reference_gemm_samples_s.begin(), r.reference_gemm_samples_s.end()) * 1e3) + " ms)");

  // --- profile, and the held-out sizes predicted back through the cost model ---
  DeviceDescription d;
  d.name = "measured-cpu";
  d.device = cpu_model();
  d.description = "Measured by stepcast calibrate --backend cpu: " + d.device + ", " + std::to_string(size) +
                  " processes standing in for GPUs (fp32 Eigen GEMMs, memcpy bandwidth, MPI collectives over shared memory)";
  d.sources = {"Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) + "." + std::to_string(EIGEN_MINOR_VERSION) +
                   ", single-threaded GEMMs, every process at once; each benchmark keeps the slowest process's result",
               "memory_bandwidth = memcpy of 64 MiB (bytes read + written); kernel_overhead = an 8x8x8 GEMM; optimizer_rate = the Adam kernel over 4 Mi fp32 parameters",
               "attention efficiencies = GEMM efficiency at 1024-wide tiles (attention is not measured on CPUs); bf16 rate = fp32 rate (the CPU path computes in fp32; run files use precision fp32)",
               "collectives: " + mpi_library_version() + " over shared memory, inputs (never-zero values) and outputs rotating through 64 MiB; "
                   "every size's result is checked on sampled elements",
               "collective_sms 0: an MPI collective progresses only inside the calling process's MPI call, so it never runs beside that process's compute"};
  d.dtypes = {"fp32", "bf16"};
  d.memory_bytes = mem_total_bytes() / size;
  d.sm_count = 1;
  d.attention_tile = 1024;
  d.fabric_name = "shared-memory";
  d.network = {{"name", "none (one machine)"}, {"nic_bandwidth", "10Gb/s"}, {"nics_per_node", 1}};
  r.reused_measurements = journal.reused();
  r.new_measurements = journal.done();
  write_profile(r, d, r.gemm.overhead_s, opt.command);
  if (rank == 0) predict_held_out(r, held_gemm, hw::Dtype::kFp32, held_coll);
  return r;
}

}  // namespace stepcast::calibrate
