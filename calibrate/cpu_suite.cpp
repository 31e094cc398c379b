#include "calibrate/cpu_suite.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
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

std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
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

const char* const kOps[] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv"};

cost::Collective op_of(const std::string& op) {
  if (op == "all_reduce") return cost::Collective::kAllReduce;
  if (op == "all_gather") return cost::Collective::kAllGather;
  if (op == "reduce_scatter") return cost::Collective::kReduceScatter;
  if (op == "all_to_all") return cost::Collective::kAllToAll;
  if (op == "broadcast") return cost::Collective::kBroadcast;
  return cost::Collective::kSendRecv;
}

double bus_factor_of(const std::string& op, int n) {
  if (op == "send_recv" || op == "broadcast") return 1.0;
  return cost::bus_factor(op_of(op), n);
}

#ifdef STEPCAST_HAVE_MPI
// One collective of `bytes` (nccl-tests convention) on every rank; the time is the slowest
// rank's, so every rank sees the same samples and stops after the same repetitions.
double time_collective(const std::string& op, size_t bytes, int rank, int size, const MeasureOptions& mo) {
  const size_t count = bytes / sizeof(float);
  std::vector<float> in(count), out(count);
  for (size_t i = 0; i < count; ++i) in[i] = 0.5f * static_cast<float>(rank + 1) + static_cast<float>(i % 7) * 0.125f;
  const int per = static_cast<int>(count / static_cast<size_t>(size));
  auto run_op = [&]() {
    if (op == "all_reduce") {
      MPI_Allreduce(in.data(), out.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    } else if (op == "all_gather") {
      MPI_Allgather(in.data(), per, MPI_FLOAT, out.data(), per, MPI_FLOAT, MPI_COMM_WORLD);
    } else if (op == "reduce_scatter") {
      MPI_Reduce_scatter_block(in.data(), out.data(), per, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    } else if (op == "all_to_all") {
      MPI_Alltoall(in.data(), per, MPI_FLOAT, out.data(), per, MPI_FLOAT, MPI_COMM_WORLD);
    } else if (op == "broadcast") {
      MPI_Bcast(in.data(), static_cast<int>(count), MPI_FLOAT, 0, MPI_COMM_WORLD);
    } else {
      const int peer = rank ^ 1;
      if (peer < size) {
        MPI_Sendrecv(in.data(), static_cast<int>(count), MPI_FLOAT, peer, 7, out.data(), static_cast<int>(count), MPI_FLOAT, peer, 7,
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
  const int batch = static_cast<int>(std::clamp(std::ceil(1e-3 / std::max(probe, 1e-9)), 1.0, 2000.0));
  auto once = [&]() { return timed_batch(batch); };
  const Measurement m = measure(once, mo);
  if (op == "all_reduce") {
    // Every element is the sum over ranks of 0.5 (r + 1) + (i % 7) / 8.
    const double want = 0.25 * size * (size + 1) + static_cast<double>(size) * 0.125 * 3.0;
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
  // --- compute: GEMM shapes of small transformer layers (tokens x hidden / ffn) ---
  const std::vector<Shape> fit_shapes{{32, 256, 256},   {32, 1024, 256},   {32, 256, 1024},   {128, 256, 256},
                                      {128, 1024, 256}, {128, 256, 1024},  {128, 1024, 1024}, {512, 256, 256},
                                      {512, 1024, 256}, {512, 256, 1024},  {512, 1024, 1024}, {2048, 1024, 1024}};
  const std::vector<Shape> held_shapes{{64, 512, 512}, {256, 768, 768}, {1024, 512, 2048}, {96, 1536, 384}};
  const double overhead = time_gemm({8, 8, 8}, mo, true);
  std::vector<GemmSample> gs;
  for (const auto& s : fit_shapes) {
    const double t = time_gemm(s, mo, true);
    gs.push_back({static_cast<double>(s.m), static_cast<double>(s.n), static_cast<double>(s.k), t});
    say("gemm fp32 " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) + ": " + fmt("%.3f", t * 1e3) +
        " ms, " + fmt("%.1f", 2.0 * s.m * s.n * s.k / t / 1e9) + " GFLOP/s");
  }
  r.gemm = fit_gemm(gs, overhead);
  say("gemm fit: rate " + fmt("%.1f", r.gemm.rate / 1e9) + " GFLOP/s, half-dimension " + fmt("%.0f", r.gemm.half_dim) +
      ", rms error " + fmt("%.1f", 100.0 * r.gemm.rms_rel_error) + "%");
  std::vector<std::pair<Shape, double>> held_gemm;
  for (const auto& s : held_shapes) held_gemm.emplace_back(s, time_gemm(s, mo, true));
  r.copy_bandwidth = copy_bandwidth(mo);
  say("memory copy: " + fmt("%.2f", r.copy_bandwidth / 1e9) + " GB/s moved");

  // --- communication ---
  std::vector<std::pair<std::string, std::pair<size_t, double>>> held_coll;
#ifdef STEPCAST_HAVE_MPI
  if (size > 1) {
    // Every power of two from 4 KiB to 16 MiB is fitted; the held-out sizes sit halfway (1.5x).
    std::vector<size_t> fit_sizes, held_sizes;
    for (size_t b = 4096; b <= (size_t{16} << 20); b *= 2) fit_sizes.push_back(b);
    for (size_t b = 4096; b < (size_t{16} << 20); b *= 4) held_sizes.push_back(b + b / 2);
    for (const char* op : kOps) {
      std::vector<CollSample> cs;
      for (size_t b : fit_sizes) cs.push_back({static_cast<double>(b), time_collective(op, b, rank, size, mo)});
      r.collectives.push_back(fit_collective(op, size, bus_factor_of(op, size), cs));
      say(std::string(op) + ": plateau busbw " + fmt("%.2f", r.collectives.back().plateau_busbw / 1e9) + " GB/s, latency " +
          fmt("%.1f", r.collectives.back().alpha_s * 1e6) + " us");
      for (size_t b : held_sizes) held_coll.push_back({op, {b, time_collective(op, b, rank, size, mo)}});
    }
  }
#endif

  // --- profile ---
  char date[32];
  const std::time_t tt = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&tt));
  const double attn_eff = std::pow(1024.0 / (1024.0 + r.gemm.half_dim), 3.0);
  Json fabric = {{"name", "shared-memory"},
                 {"span", size},
                 {"busbw", "1GB/s"},
                 {"p2p_bandwidth", "1GB/s"},
                 {"latency", "1us"}};
  Json curves = Json::object();
  for (const auto& c : r.collectives) {
    Json pts = Json::array();
    for (const auto& [b, bw] : c.curve) pts.push_back({b, bw});
    curves[c.op] = pts;
    const std::string plateau = fmt("%.6e", c.plateau_busbw) + "B/s";
    if (c.op == "all_gather") fabric["busbw"] = plateau;
    if (c.op == "all_reduce") fabric["allreduce_busbw"] = plateau;
    if (c.op == "reduce_scatter") fabric["reduce_scatter_busbw"] = plateau;
    if (c.op == "broadcast") fabric["broadcast_busbw"] = plateau;
    if (c.op == "send_recv") fabric["p2p_bandwidth"] = plateau;
    if (c.op == "all_gather" && size > 1) fabric["latency"] = fmt("%.3f", std::max(0.0, c.alpha_s) * 1e6 / (size - 1)) + "us";
  }
  if (!curves.empty()) fabric["size_curves"] = curves;
  r.profile = {
      {"name", "measured-cpu"},
      {"description", "Measured by stepcast calibrate --backend cpu: " + cpu_model() + ", " + std::to_string(size) +
                          " processes standing in for GPUs (fp32 Eigen GEMMs, memcpy bandwidth, MPI collectives over shared memory)"},
      {"sources",
       {"command: " + opt.command, "date: " + std::string(date),
        "Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) + "." + std::to_string(EIGEN_MINOR_VERSION) +
            ", single-threaded GEMMs, one per process at a time",
        "peak_flops fp32 = fitted large-GEMM rate (gemm_max 1.0); gemm_half_dim fitted over " + std::to_string(gs.size()) + " shapes (rms error " +
            fmt("%.1f", 100.0 * r.gemm.rms_rel_error) + "%)",
        "memory_bandwidth = memcpy of 64 MiB (bytes read + written); kernel_overhead = an 8x8x8 GEMM",
        "attention efficiencies = GEMM efficiency at 1024-wide tiles (attention is not measured on CPUs); bf16 rate = fp32 rate (the CPU path computes in fp32; run files use precision fp32)",
        "collectives: MPI over shared memory, bus bandwidth by size per operation (size_curves), plateaus = best measured"}},
      {"gpu",
       {{"name", cpu_model()},
        {"peak_flops", {{"fp32", fmt("%.6e", r.gemm.rate) + "FLOPS"}, {"bf16", fmt("%.6e", r.gemm.rate) + "FLOPS"}}},
        {"memory", fmt("%.0f", mem_total_bytes() / size) + "B"},
        {"memory_bandwidth", fmt("%.6e", r.copy_bandwidth) + "B/s"},
        {"runtime_reserved", "0B"},
        {"sm_count", 1}}},
      {"efficiency",
       {{"gemm_max", {{"fp32", 1.0}, {"bf16", 1.0}}},
        {"gemm_half_dim", r.gemm.half_dim},
        {"sustained_clock", 1.0},
        {"attention_fwd", attn_eff},
        {"attention_bwd", attn_eff},
        {"memory_bound", 1.0},
        {"kernel_overhead", fmt("%.3f", overhead * 1e6) + "us"}}},
      {"node", {{"gpus_per_node", size}, {"fabric", Json::array({fabric})}}},
      {"network", {{"name", "none (one machine)"}, {"nic_bandwidth", "10Gb/s"}, {"nics_per_node", 1}}}};

  // --- held-out sizes predicted back through the simulator's cost model ---
  if (rank == 0) {
    core::Issues issues;
    const auto hw = hw::parse_hardware(r.profile, "$.hardware", issues);
    if (!issues.empty()) throw core::InternalError("calibrate: the written profile does not parse: " + issues.lines().front());
    for (const auto& [s, t] : held_gemm) {
      const double pred = cost::gemm_time(cost::GemmShape{static_cast<double>(s.m), static_cast<double>(s.n), static_cast<double>(s.k), 1.0},
                                          hw::Dtype::kFp32, hw)
                              .value();
      r.held_out.push_back({"gemm fp32 " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k), t, pred});
    }
    const mesh::Placement node{size, 1, size, 0, size - 1};
    for (const auto& [op, bt] : held_coll) {
      const double pred = cost::collective_time(op_of(op), core::Bytes(static_cast<double>(bt.first)), node, hw).value();
      r.held_out.push_back({op + " " + std::to_string(bt.first) + " B", bt.second, pred});
    }
  }
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
  o << "- processes: " << r.ranks << "\n\n";
  if (!r.collectives.empty()) {
    o << "| collective | plateau busbw GB/s | alpha us | beta GB/s |\n|---|---:|---:|---:|\n";
    for (const auto& c : r.collectives) {
      o << "| " << c.op << " | " << fmt("%.2f", c.plateau_busbw / 1e9) << " | " << fmt("%.1f", c.alpha_s * 1e6) << " | "
        << fmt("%.2f", c.beta_s_per_byte > 0 ? 1e-9 / c.beta_s_per_byte : 0.0) << " |\n";
    }
    o << "\n";
  }
  int within = 0;
  o << "Held-out sizes (not fitted), measured against the simulator's cost model with the written profile:\n\n"
    << "| benchmark | measured ms | predicted ms | error |\n|---|---:|---:|---:|\n";
  for (const auto& h : r.held_out) {
    within += std::abs(h.error()) <= 0.10;
    o << "| " << h.what << " | " << fmt("%.4f", h.measured_s * 1e3) << " | " << fmt("%.4f", h.predicted_s * 1e3) << " | "
      << fmt("%+.1f%%", 100.0 * h.error()) << " |\n";
  }
  o << "\nHeld-out within 10%: " << within << " of " << r.held_out.size() << ".\n";
  return o.str();
}

}  // namespace stepcast::calibrate
