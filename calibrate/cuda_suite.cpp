#include "calibrate/cuda_suite.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "calibrate/cuda_device.hpp"
#include "calibrate/fit.hpp"
#include "calibrate/profile.hpp"
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

using core::fmt;

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
    std::vector<HeldGemm> held_gemm;
    for (const auto& s : held_shapes) held_gemm.push_back({s.m, s.n, s.k, cuda::time_gemm_bf16(s.m, s.n, s.k, mo).median_s});
    r.copy_bandwidth = cuda::copy_bandwidth(mo);
    say("HBM copy: " + fmt("%.0f", r.copy_bandwidth / 1e9) + " GB/s moved");
    std::vector<HeldCollective> held_coll;
    double collective_sms = 0;
    std::string interference_note = "collective_sms 0: not measured (one GPU; the measurement needs a collective across ranks)";
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
        r.collectives.push_back(fit_collective(o, size, op_bus_factor(o, size), cs));
        say(o + ": plateau busbw " + fmt("%.1f", r.collectives.back().plateau_busbw / 1e9) + " GB/s");
        for (size_t b : held_sizes) held_coll.push_back({o, b, cuda::time_collective(op, b, rank, size, mo, barrier, maxr)});
      }
      // Interference: a large GEMM beside a 256 MiB all-reduce on another stream.
      const auto [alone, beside] = cuda::gemm_beside_all_reduce(8192, 8192, 8192, size_t{256} << 20, mo, barrier, maxr);
      const std::string slower = fmt("%.1f", 100.0 * (beside / alone - 1.0)) + "% slower";
      interference_note = "collective_sms: a bf16 8192^3 GEMM took " + fmt("%.3f", alone * 1e3) + " ms alone and " +
                          fmt("%.3f", beside * 1e3) + " ms beside back-to-back 256 MiB NCCL all-reduces on another stream (" +
                          slower + ")";
      collective_sms = collective_sms_from(alone, beside, dev.sm_count);
      say("interference: GEMM " + slower + " beside an all-reduce = " + fmt("%.1f", collective_sms) + " of " +
          std::to_string(dev.sm_count) + " SMs");
      cuda::nccl_finalize();
    }
#endif
    DeviceDescription d;
    d.name = "measured-" + dev.name;
    d.device = dev.name;
    d.description = "Measured by stepcast calibrate --backend cuda on " + std::to_string(size) + " x " + dev.name;
    d.sources = {"cuBLAS cublasGemmEx, bf16 inputs, fp32 accumulation, CUDA-event timing; NCCL " + cuda::nccl_version(),
                 "memory_bandwidth = device-to-device copy of 1 GiB (bytes read + written); kernel_overhead = a 16x16x16 GEMM",
                 "attention efficiencies = GEMM efficiency at 4096-wide tiles (no fused attention kernel measured yet)"};
    d.dtypes = {"bf16", "fp16"};
    d.memory_bytes = dev.memory_bytes;
    d.sm_count = dev.sm_count;
    d.collective_sms = collective_sms;
    d.sources.push_back(interference_note);
    d.attention_tile = 4096;
    d.fabric_name = "measured-intra-node";
    d.network = {{"name", "not measured"}, {"nic_bandwidth", "400Gb/s"}, {"nics_per_node", size}};
    write_profile(r, d, overhead, opt.command);
    if (rank == 0) predict_held_out(r, held_gemm, hw::Dtype::kBf16, held_coll);
    cuda::close();
  } catch (const std::runtime_error& e) {
    cuda::close();
    if (dynamic_cast<const core::UserError*>(&e) != nullptr) throw;
    throw core::UserError(std::string("calibrate --backend cuda: ") + e.what());
  }
  return r;
}

}  // namespace stepcast::calibrate
