#include "calibrate/cuda_suite.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <stdexcept>

#include "calibrate/cuda_device.hpp"
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

std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

cost::Collective op_of(const std::string& op) {
  if (op == "all_reduce") return cost::Collective::kAllReduce;
  if (op == "all_gather") return cost::Collective::kAllGather;
  if (op == "reduce_scatter") return cost::Collective::kReduceScatter;
  if (op == "all_to_all") return cost::Collective::kAllToAll;
  if (op == "broadcast") return cost::Collective::kBroadcast;
  return cost::Collective::kSendRecv;
}

struct Shape {
  int m, n, k;
};

}  // namespace

SuiteResult run_cuda_suite(int rank, int size, const SuiteOptions& opt) {
  const int devices = cuda::device_count();
  if (devices == 0) throw core::UserError("calibrate --backend cuda: no CUDA device is visible (cudaGetDeviceCount returned 0)");
  SuiteResult r;
  r.ranks = size;
  try {
    const cuda::DeviceInfo dev = cuda::open(rank % devices);
    auto say = [&](const std::string& s) {
      if (rank == 0 && opt.progress) opt.progress(s);
    };
    MeasureOptions mo;
    mo.budget_s = opt.budget_per_benchmark_s;
    // Tokens per micro-batch (256 .. 65,536) against the zoo's hidden and FFN widths split by TP.
    std::vector<Shape> fit_shapes, held_shapes;
    for (int m : {256, 1024, 4096, 16384, 65536}) {
      for (auto [n, k] : {std::pair{4096, 4096}, {14336, 4096}, {4096, 14336}, {1024, 8192}, {16032, 4096}}) fit_shapes.push_back({m, n, k});
    }
    for (int m : {512, 2048, 8192}) held_shapes.push_back({m, 6144, 5120});
    held_shapes.push_back({32768, 3584, 8192});
    const double overhead = cuda::time_gemm_bf16(16, 16, 16, mo).median_s;
    std::vector<GemmSample> gs;
    for (const auto& s : fit_shapes) {
      const double t = cuda::time_gemm_bf16(s.m, s.n, s.k, mo).median_s;
      gs.push_back({static_cast<double>(s.m), static_cast<double>(s.n), static_cast<double>(s.k), t});
      say("gemm bf16 " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) + ": " +
          fmt("%.1f", 2.0 * s.m * s.n * s.k / t / 1e12) + " TFLOP/s");
    }
    r.gemm = fit_gemm(gs, overhead);
    r.gemm_samples = gs;
    r.bytes_per_element = 2;
    std::vector<std::pair<Shape, double>> held_gemm;
    for (const auto& s : held_shapes) held_gemm.emplace_back(s, cuda::time_gemm_bf16(s.m, s.n, s.k, mo).median_s);
    r.copy_bandwidth = cuda::copy_bandwidth(mo);
    say("HBM copy: " + fmt("%.0f", r.copy_bandwidth / 1e9) + " GB/s moved");
    std::vector<std::pair<std::string, std::pair<size_t, double>>> held_coll;
#ifdef STEPCAST_HAVE_MPI
    if (size > 1) {
      char id[128] = {};
      if (rank == 0) cuda::nccl_unique_id(id);
      MPI_Bcast(id, 128, MPI_BYTE, 0, MPI_COMM_WORLD);
      cuda::nccl_init(rank, size, id);
      auto barrier = [] { MPI_Barrier(MPI_COMM_WORLD); };
      auto maxr = [](double d) {
        double m = 0;
        MPI_Allreduce(&d, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        return m;
      };
      std::vector<size_t> fit_sizes, held_sizes;
      for (size_t b = 4096; b <= (size_t{1} << 30); b *= 2) fit_sizes.push_back(b);
      for (size_t b = 4096; b < (size_t{1} << 30); b *= 4) held_sizes.push_back(b + b / 2);
      for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv"}) {
        std::vector<CollSample> cs;
        for (size_t b : fit_sizes) cs.push_back({static_cast<double>(b), cuda::time_collective(op, b, rank, size, mo, barrier, maxr)});
        const std::string o = op;
        const double bf = o == "send_recv" || o == "broadcast" ? 1.0 : cost::bus_factor(op_of(o), size);
        r.collectives.push_back(fit_collective(o, size, bf, cs));
        say(o + ": plateau busbw " + fmt("%.1f", r.collectives.back().plateau_busbw / 1e9) + " GB/s");
        for (size_t b : held_sizes) held_coll.push_back({o, {b, cuda::time_collective(op, b, rank, size, mo, barrier, maxr)}});
      }
      cuda::nccl_finalize();
    }
#endif
    char date[32];
    const std::time_t tt = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&tt));
    Json fabric = {{"name", "measured-intra-node"}, {"span", size}, {"busbw", "1GB/s"}, {"p2p_bandwidth", "1GB/s"}, {"latency", "5us"}};
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
    }
    if (!curves.empty()) fabric["size_curves"] = curves;
    const double attn = std::pow(4096.0 / (4096.0 + r.gemm.half_dim), 3.0);
    r.profile = {
        {"name", "measured-" + dev.name},
        {"description", "Measured by stepcast calibrate --backend cuda on " + std::to_string(size) + " x " + dev.name},
        {"sources",
         {"command: " + opt.command, "date: " + std::string(date),
          "cuBLAS cublasGemmEx, bf16 inputs, fp32 accumulation, CUDA-event timing; NCCL " + cuda::nccl_version(),
          "peak_flops bf16 = fitted large-GEMM rate (gemm_max 1.0); half-dimension fitted over " + std::to_string(gs.size()) + " shapes",
          "attention efficiencies = GEMM efficiency at 4096-wide tiles (no fused attention kernel measured yet)",
          "collectives: NCCL bus bandwidth by size per operation (size_curves), plateaus = best measured"}},
        {"gpu",
         {{"name", dev.name},
          {"peak_flops", {{"bf16", fmt("%.6e", r.gemm.rate) + "FLOPS"}, {"fp16", fmt("%.6e", r.gemm.rate) + "FLOPS"}}},
          {"memory", fmt("%.0f", dev.memory_bytes) + "B"},
          {"memory_bandwidth", fmt("%.6e", r.copy_bandwidth) + "B/s"},
          {"sm_count", dev.sm_count}}},
        {"efficiency",
         {{"gemm_max", {{"bf16", 1.0}, {"fp16", 1.0}}},
          {"gemm_half_dim", r.gemm.half_dim},
          {"sustained_clock", 1.0},
          {"attention_fwd", attn},
          {"attention_bwd", attn},
          {"memory_bound", 1.0},
          {"kernel_overhead", fmt("%.3f", overhead * 1e6) + "us"}}},
        {"node", {{"gpus_per_node", size}, {"fabric", Json::array({fabric})}}},
        {"network", {{"name", "not measured"}, {"nic_bandwidth", "400Gb/s"}, {"nics_per_node", size}}}};
    if (rank == 0) {
      core::Issues issues;
      const auto hw = hw::parse_hardware(r.profile, "$.hardware", issues);
      if (!issues.empty()) throw core::InternalError("calibrate: the written profile does not parse: " + issues.lines().front());
      for (const auto& [s, t] : held_gemm) {
        const double pred =
            cost::gemm_time(cost::GemmShape{static_cast<double>(s.m), static_cast<double>(s.n), static_cast<double>(s.k), 1.0}, hw::Dtype::kBf16, hw)
                .value();
        r.held_out.push_back({"gemm bf16 " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k), t, pred});
      }
      const mesh::Placement node{size, 1, size, 0, size - 1};
      for (const auto& [op, bt] : held_coll) {
        r.held_out.push_back({op + " " + std::to_string(bt.first) + " B", bt.second,
                              cost::collective_time(op_of(op), core::Bytes(static_cast<double>(bt.first)), node, hw).value()});
      }
    }
    cuda::close();
  } catch (const std::runtime_error& e) {
    cuda::close();
    if (dynamic_cast<const core::UserError*>(&e) != nullptr) throw;
    throw core::UserError(std::string("calibrate --backend cuda: ") + e.what());
  }
  return r;
}

}  // namespace stepcast::calibrate
