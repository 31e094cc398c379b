#include "calibrate/cpu_suite.hpp"

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

#include "sim/config/hardware.hpp"
#include "sim/core/error.hpp"
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
  static RotatingBuffer in_ring(kRingBytes), out_ring(kRingBytes);
  static const bool filled = [&]() {
    auto* f = reinterpret_cast<float*>(in_ring.next(0));
    for (size_t i = 0; i < kRingBytes / sizeof(float); ++i) f[i] = 0.5f * static_cast<float>(rank + 1);
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
  const Measurement m = measure(once, mo);
  if (op == "all_reduce") {
    // Every element is the sum over ranks of 0.5 (r + 1).
    const double want = 0.25 * size * (size + 1);
    if (std::abs(out[3] - want) > 1e-4 * want) throw core::InternalError("calibrate: all-reduce result check failed");
  }
  return m.median_s;
}
#endif

}  // namespace

SuiteResult run_cpu_suite(int rank, int size, const SuiteOptions& opt) {
  SuiteResult r;
  r.ranks = size;
  auto say = [&](const std::string& s) {
    if (rank == 0 && opt.progress) opt.progress(s);
  };
  MeasureOptions mo;
  mo.budget_s = opt.budget_per_benchmark_s;
  // A synchronous job runs at its slowest device's pace: every rank measures at the same time
  // (sharing the memory system as training does) and the slowest rank's result is kept.
  const MpiWorld world;
  auto slowest = [&](double seconds) { return world.max(seconds); };
  // --- compute: GEMM shapes of small transformer layers (tokens x hidden / ffn) ---
  const std::vector<Shape> fit_shapes{{32, 256, 256},   {32, 1024, 256},   {32, 256, 1024},   {128, 256, 256},
                                      {128, 1024, 256}, {128, 256, 1024},  {128, 1024, 1024}, {512, 256, 256},
                                      {512, 1024, 256}, {512, 256, 1024},  {512, 1024, 1024}, {2048, 1024, 1024},
                                      // attention per head: QK^T (s x s x d) and PV (s x d x s) with d = 64
                                      {256, 256, 64},   {256, 64, 256},    {1024, 1024, 64},  {1024, 64, 1024}};
  const std::vector<Shape> held_shapes{{64, 512, 512}, {256, 768, 768}, {1024, 512, 2048}, {96, 1536, 384}, {512, 512, 64}, {512, 64, 512}};
  // Compute is measured twice, before and after the collectives (tens of seconds apart), and
  // averaged: a shared machine's per-core speed drifts by up to ~20% over such spans, and a
  // profile frozen at one moment describes the machine less well than its mean.
  struct ComputePass {
    double overhead = 0, copy_s = 0, optimizer_s = 0;  // copy: seconds per byte moved; optimizer: per parameter
    std::vector<double> fit, held;
  };
  auto compute_pass = [&]() {
    ComputePass c;
    c.overhead = slowest(time_gemm({8, 8, 8}, mo, true));
    for (const auto& sh : fit_shapes) c.fit.push_back(slowest(time_gemm(sh, mo, true)));
    for (const auto& sh : held_shapes) c.held.push_back(slowest(time_gemm(sh, mo, true)));
    c.copy_s = slowest(1.0 / copy_bandwidth(mo));
    c.optimizer_s = slowest(1.0 / optimizer_rate(mo));
    return c;
  };
  const ComputePass first = compute_pass();
  say("compute, first pass: gemm " + fmt("%.1f", 2.0 * 2048 * 1024 * 1024 / first.fit[11] / 1e9) + " GFLOP/s at 2048x1024x1024");
  std::vector<HeldGemm> held_gemm;
  auto finish_compute = [&](const ComputePass& second) {
    std::vector<GemmSample> gs;
    for (size_t i = 0; i < fit_shapes.size(); ++i) {
      const auto& sh = fit_shapes[i];
      const double t = 0.5 * (first.fit[i] + second.fit[i]);
      gs.push_back({static_cast<double>(sh.m), static_cast<double>(sh.n), static_cast<double>(sh.k), t});
      say("gemm fp32 " + std::to_string(sh.m) + "x" + std::to_string(sh.n) + "x" + std::to_string(sh.k) + ": " + fmt("%.3f", t * 1e3) +
          " ms, " + fmt("%.1f", 2.0 * sh.m * sh.n * sh.k / t / 1e9) + " GFLOP/s (passes " + fmt("%.1f", 1e3 * first.fit[i]) + " and " +
          fmt("%.1f", 1e3 * second.fit[i]) + " ms)");
    }
    r.gemm = fit_gemm(gs, 0.5 * (first.overhead + second.overhead));
    r.gemm_samples = gs;
    say("gemm fit: rate " + fmt("%.1f", r.gemm.rate / 1e9) + " GFLOP/s, half-dimension " + fmt("%.0f", r.gemm.half_dim) + ", rms error " +
        fmt("%.1f", 100.0 * r.gemm.rms_rel_error) + "%");
    for (size_t i = 0; i < held_shapes.size(); ++i) {
      const double a = first.held[i], b = second.held[i];
      held_gemm.push_back({held_shapes[i].m, held_shapes[i].n, held_shapes[i].k, 0.5 * (a + b), std::abs(a - b) / (0.5 * (a + b))});
    }
    r.copy_bandwidth = 2.0 / (first.copy_s + second.copy_s);
    say("memory copy: " + fmt("%.2f", r.copy_bandwidth / 1e9) + " GB/s moved");
    r.optimizer_rate = 2.0 / (first.optimizer_s + second.optimizer_s);
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
    constexpr int kPasses = 3, kExtraPasses = 2;
    constexpr double kNoisy = 0.10;
    auto spread_of = [](const std::vector<double>& v) {  // {median, (max - min) / median}
      const Measurement m = summarize(v);
      return std::pair{m.median_s, (*std::max_element(v.begin(), v.end()) - m.min_s) / m.median_s};
    };
    for (const char* op : kOps) {
      std::vector<CollSample> cs;
      std::vector<std::vector<double>> runs(order.size());
      for (int pass = 0; pass < kPasses; ++pass) {
        for (size_t i = 0; i < order.size(); ++i) runs[i].push_back(time_collective(op, order[i].first, rank, size, mo));
      }
      for (int extra = 0; extra < kExtraPasses; ++extra) {
        for (size_t i = 0; i < order.size(); ++i) {
          if (spread_of(runs[i]).second > kNoisy) runs[i].push_back(time_collective(op, order[i].first, rank, size, mo));
        }
      }
      for (size_t i = 0; i < order.size(); ++i) {
        const auto [b, held] = order[i];
        const auto [t, spread] = spread_of(runs[i]);
        if (held) {
          held_coll.push_back({op, b, t, spread});
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

  finish_compute(compute_pass());

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
               "collectives: MPI over shared memory, inputs and outputs rotating through 64 MiB",
               "collective_sms 0: an MPI collective progresses only inside the calling process's MPI call, so it never runs beside that process's compute"};
  d.dtypes = {"fp32", "bf16"};
  d.memory_bytes = mem_total_bytes() / size;
  d.sm_count = 1;
  d.attention_tile = 1024;
  d.fabric_name = "shared-memory";
  d.network = {{"name", "none (one machine)"}, {"nic_bandwidth", "10Gb/s"}, {"nics_per_node", 1}};
  write_profile(r, d, r.gemm.overhead_s, opt.command);
  if (rank == 0) predict_held_out(r, held_gemm, hw::Dtype::kFp32, held_coll);
  return r;
}

std::string suite_markdown(const SuiteResult& r) {
  std::ostringstream o;
  o << "# CPU calibration\n\n";
  if (r.profile.contains("description")) o << r.profile["description"].get<std::string>() << "\n\n";
  if (r.profile.contains("sources")) {
    for (const auto& line : r.profile["sources"]) o << "- " << line.get<std::string>() << "\n";
    o << "\n";
  }
  o << "- GEMM fit: " << fmt("%.2f", r.gemm.rate / 1e9) << " GFLOP/s large-shape rate, half-dimension " << fmt("%.0f", r.gemm.half_dim)
    << ", per-call overhead " << fmt("%.2f", r.gemm.overhead_s * 1e6) << " us, rms error over the fitted shapes "
    << fmt("%.1f", 100.0 * r.gemm.rms_rel_error) << "%\n";
  o << "- memory copy: " << fmt("%.2f", r.copy_bandwidth / 1e9) << " GB/s (read + write)\n";
  if (r.optimizer_rate > 0) o << "- optimizer (Adam, fp32): " << fmt("%.1f", r.optimizer_rate / 1e6) << " M parameters/s\n";
  o << "- processes: " << r.ranks << "\n\n";
  if (!r.collectives.empty()) {
    o << "| collective | plateau busbw GB/s | alpha us | beta GB/s |\n|---|---:|---:|---:|\n";
    for (const auto& c : r.collectives) {
      o << "| " << c.op << " | " << fmt("%.2f", c.plateau_busbw / 1e9) << " | " << fmt("%.1f", c.alpha_s * 1e6) << " | "
        << fmt("%.2f", c.beta_s_per_byte > 0 ? 1e-9 / c.beta_s_per_byte : 0.0) << " |\n";
    }
    o << "\n";
  }
  int within = 0, noisy_misses = 0;
  o << "Held-out sizes (not fitted), measured against the simulator's cost model with the written profile. "
       "`pass spread` is how far the passes measuring that benchmark disagreed with each other, (max - min) / median:\n\n"
    << "| benchmark | measured ms | predicted ms | error | pass spread |\n|---|---:|---:|---:|---:|\n";
  for (const auto& h : r.held_out) {
    const bool ok = std::abs(h.error()) <= 0.10;
    within += ok;
    noisy_misses += !ok && h.spread > 0.10;
    o << "| " << h.what << " | " << fmt("%.4f", h.measured_s * 1e3) << " | " << fmt("%.4f", h.predicted_s * 1e3) << " | "
      << fmt("%+.1f%%", 100.0 * h.error()) << " | " << fmt("%.1f%%", 100.0 * h.spread) << " |\n";
  }
  o << "\nHeld-out within 10%: " << within << " of " << r.held_out.size() << ".";
  if (within < static_cast<int>(r.held_out.size())) {
    o << " Of the " << r.held_out.size() - static_cast<size_t>(within) << " outside, " << noisy_misses
      << " had passes more than 10% apart themselves (the machine's speed changed while it was measured).";
  }
  o << "\n";
  return o.str();
}

namespace {

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) o += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
  return o;
}

// Log-log scatter with optional polyline series; returns an <svg>.
struct Series {
  std::string name, colour;
  std::vector<std::pair<double, double>> pts;
  bool line = false;
};

std::string loglog_svg(const char* id, const std::string& xlabel, const std::string& ylabel, const std::vector<Series>& series) {
  const double w = 760, h = 420, l = 80, b = 50, t = 20, r = 160;
  double x0 = 1e300, x1 = 0, y0 = 1e300, y1 = 0;
  for (const auto& s : series) {
    for (const auto& [x, y] : s.pts) {
      if (x <= 0 || y <= 0) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  }
  std::ostringstream o;
  o << "<svg id=\"" << id << "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h << "\">";
  if (x1 <= 0) return o.str() + "</svg>";
  const double lx0 = std::floor(std::log10(x0)), lx1 = std::ceil(std::log10(x1)), ly0 = std::floor(std::log10(y0)), ly1 = std::ceil(std::log10(y1));
  auto X = [&](double x) { return l + (w - l - r) * (std::log10(x) - lx0) / std::max(1e-9, lx1 - lx0); };
  auto Y = [&](double y) { return h - b - (h - b - t) * (std::log10(y) - ly0) / std::max(1e-9, ly1 - ly0); };
  o << "<line x1=\"" << l << "\" y1=\"" << h - b << "\" x2=\"" << w - r << "\" y2=\"" << h - b << "\" stroke=\"#333\"/><line x1=\"" << l
    << "\" y1=\"" << t << "\" x2=\"" << l << "\" y2=\"" << h - b << "\" stroke=\"#333\"/>";
  for (double e = lx0; e <= lx1; e += 1) o << "<text x=\"" << X(std::pow(10, e)) << "\" y=\"" << h - b + 16 << "\" font-size=\"11\" text-anchor=\"middle\">1e" << e << "</text>";
  for (double e = ly0; e <= ly1; e += 1) o << "<text x=\"" << l - 6 << "\" y=\"" << Y(std::pow(10, e)) + 4 << "\" font-size=\"11\" text-anchor=\"end\">1e" << e << "</text>";
  o << "<text x=\"" << (l + w - r) / 2 << "\" y=\"" << h - 10 << "\" text-anchor=\"middle\" font-size=\"13\">" << html_escape(xlabel) << "</text>";
  o << "<text x=\"16\" y=\"" << (h - b) / 2 << "\" transform=\"rotate(-90 16 " << (h - b) / 2 << ")\" text-anchor=\"middle\" font-size=\"13\">"
    << html_escape(ylabel) << "</text>";
  double ly = t + 10;
  for (const auto& s : series) {
    if (s.line) {
      std::string d;
      for (size_t i = 0; i < s.pts.size(); ++i) d += (i ? " L " : "M ") + fmt("%.1f", X(s.pts[i].first)) + " " + fmt("%.1f", Y(s.pts[i].second));
      o << "<path d=\"" << d << "\" fill=\"none\" stroke=\"" << s.colour << "\" stroke-width=\"2\"/>";
    } else {
      for (const auto& [x, y] : s.pts) {
        o << "<circle cx=\"" << fmt("%.1f", X(x)) << "\" cy=\"" << fmt("%.1f", Y(y)) << "\" r=\"4\" fill=\"" << s.colour << "\"/>";
      }
    }
    o << "<rect x=\"" << w - r + 10 << "\" y=\"" << ly - 9 << "\" width=\"10\" height=\"10\" fill=\"" << s.colour << "\"/><text x=\"" << w - r + 24
      << "\" y=\"" << ly << "\" font-size=\"11\">" << html_escape(s.name) << "</text>";
    ly += 16;
  }
  o << "</svg>";
  return o.str();
}

}  // namespace

std::string suite_html(const SuiteResult& r) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>stepcast calibration</title><style>body{font-family:sans-serif;margin:24px}"
       "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child{text-align:left}</style>"
       "</head><body>\n<h1>stepcast calibration</h1>\n";
  if (r.profile.contains("description")) o << "<p>" << html_escape(r.profile["description"].get<std::string>()) << "</p>\n";
  // Roofline: attainable = min(rate, bandwidth * intensity); intensity of C = A B with operands
  // and output of `bytes_per_element`.
  Series meas{"measured GEMMs", "#4e79a7", {}, false}, roof{"roofline", "#e15759", {}, true};
  double ai_min = 1e300, ai_max = 0;
  for (const auto& s : r.gemm_samples) {
    const double flops = 2.0 * s.m * s.n * s.k;
    const double bytes = (s.m * s.k + s.k * s.n + s.m * s.n) * r.bytes_per_element;
    meas.pts.emplace_back(flops / bytes, flops / s.seconds);
    ai_min = std::min(ai_min, flops / bytes), ai_max = std::max(ai_max, flops / bytes);
  }
  const double bw = r.copy_bandwidth / 2.0;  // one direction of the copy: the streaming rate
  for (double ai = std::max(0.01, ai_min / 100); ai <= ai_max * 10; ai *= 1.2) roof.pts.emplace_back(ai, std::min(r.gemm.rate, bw * ai));
  o << "<h2>GEMMs against the roofline</h2>\n<p>Ceilings: " << fmt("%.3g", r.gemm.rate) << " FLOP/s (fitted large-GEMM rate), "
    << fmt("%.3g", bw) << " B/s streaming bandwidth.</p>\n"
    << loglog_svg("roofline", "arithmetic intensity (FLOP/byte)", "FLOP/s", {roof, meas}) << "\n";
  if (!r.collectives.empty()) {
    std::vector<Series> cs;
    const char* colours[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#b07aa1"};
    size_t i = 0;
    for (const auto& c : r.collectives) cs.push_back({c.op, colours[i++ % 6], c.curve, true});
    o << "<h2>Collective bus bandwidth by size (" << r.ranks << " processes)</h2>\n" << loglog_svg("collectives", "message bytes", "bus bandwidth (B/s)", cs) << "\n";
  }
  o << "<h2>Held-out sizes: measured vs the cost model</h2>\n<table><tr><th>benchmark</th><th>measured ms</th><th>predicted ms</th><th>error</th></tr>\n";
  for (const auto& h : r.held_out) {
    o << "<tr><td>" << html_escape(h.what) << "</td><td>" << fmt("%.4f", h.measured_s * 1e3) << "</td><td>" << fmt("%.4f", h.predicted_s * 1e3)
      << "</td><td>" << fmt("%+.1f%%", 100.0 * h.error()) << "</td></tr>\n";
  }
  o << "</table>\n</body></html>\n";
  return o.str();
}

}  // namespace stepcast::calibrate
