#include "calibrate/cuda_suite.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "calibrate/cuda_device.hpp"
#include "calibrate/cuda_plan.hpp"
#include "calibrate/fit.hpp"
#include "calibrate/host_side.hpp"
#include "calibrate/mpi_world.hpp"
#include "calibrate/profile.hpp"
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

using core::fmt;

}  // namespace

SuiteResult run_cuda_suite(int rank, int size, const SuiteOptions& opt) {
  const int devices = cuda::device_count();
  if (devices == 0) throw core::UserError("calibrate --backend cuda: no CUDA device is visible (cudaGetDeviceCount returned 0)");
  SuiteResult r;
  r.backend = "cuda";
  r.ranks = size;
  try {
    const cuda::DeviceInfo dev = cuda::open(rank % devices);
    MeasureOptions mo;
    mo.budget_s = opt.budget_per_benchmark_s;
    // Every measurement goes through the journal (an interrupted run resumes from it); the time
    // limit counts the reused measurements' recorded time too.
    const MpiWorld world;
    core::Journal journal({{"backend", "cuda"}, {"ranks", size}, {"device", dev.name + " (compute capability " + std::to_string(dev.cc_major) + "." + std::to_string(dev.cc_minor) + ")"},
                     {"budget_per_benchmark_s", opt.budget_per_benchmark_s}, {"build", build_description()}},
                    world.broadcast(opt.journal_previous), opt.journal_path, world.rank == 0 ? opt.journal_path : "");
    // Each progress line says the work behind it: seconds (reused measurements count their
    // recorded time) and measurements taken or reused.
    auto say = [&](const std::string& s) {
      if (rank == 0 && opt.progress) opt.progress(fmt("[%.0f s, ", journal.elapsed_s()) + std::to_string(journal.done() + journal.reused()) + " measured] " + s);
    };
    if (journal.unused() > 0) say("resuming: " + std::to_string(journal.unused()) + " measurements recorded by an interrupted run in " + opt.journal_path);
    auto elapsed = [&] { return journal.elapsed_s(); };
    auto gemm_s = [&](const std::string& dtype, int m, int n, int k, const char* role) {
      return journal.measure("gemm " + dtype + " " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + role,
                             [&] { return cuda::time_gemm(dtype, m, n, k, mo).median_s; });
    };
    auto past_limit = [&](double seconds) { return opt.time_limit_s > 0 && seconds > opt.time_limit_s; };
    auto skipped = [&](const std::string& what) {
      r.not_measured.push_back(what + ": skipped, the run had used its --time-limit of " + fmt("%.0f", opt.time_limit_s) + " s");
      say(what + ": skipped (time limit)");
    };
    // --- GEMMs, every dtype the device has (cuda_plan decides), on the same shapes ---
    const double overhead = gemm_s("bf16", 16, 16, 16, "");
    std::vector<DtypeGemmSamples> by_dtype;
    std::vector<HeldGemm> held_gemm;
    for (const auto& dtype : cuda_gemm_dtypes(dev.cc_major, dev.cc_minor)) {
      if (dtype != "bf16" && past_limit(elapsed())) {
        skipped("GEMM " + dtype);
        continue;
      }
      DtypeGemmSamples ds{dtype, {}};
      std::vector<HeldGemm> held;
      try {
        for (const auto& s : cuda_gemm_fit_shapes(dtype)) {
          const double t = gemm_s(dtype, s.m, s.n, s.k, "");
          ds.samples.push_back({static_cast<double>(s.m), static_cast<double>(s.n), static_cast<double>(s.k), t});
          say("gemm " + dtype + " " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) + ": " +
              fmt("%.1f", 2.0 * s.m * s.n * s.k / t / 1e12) + " TFLOP/s");
        }
        for (const auto& s : cuda_gemm_held_shapes()) {
          const double t = gemm_s(dtype, s.m, s.n, s.k, " held out");
          held.push_back({s.m, s.n, s.k, t, 0.0, dtype, {}});  // one pass: no spread
        }
      } catch (const std::runtime_error& e) {
        // One dtype the device or library refuses (an fp8 layout, say) does not end the run.
        if (dtype == "bf16") throw;
        r.not_measured.push_back("GEMM " + dtype + ": " + e.what());
        say("gemm " + dtype + ": not measured (" + e.what() + ")");
        continue;
      }
      by_dtype.push_back(ds);
      held_gemm.insert(held_gemm.end(), held.begin(), held.end());
    }
    std::vector<std::string> dtypes;
    for (const auto& f : fit_gemm_dtypes(by_dtype, overhead)) {
      for (const auto& ds : by_dtype) {
        if (ds.dtype == f.dtype) r.gemm_dtypes.push_back({f.dtype, gemm_operand_bytes(f.dtype), f.fit, ds.samples});
      }
      dtypes.push_back(f.dtype);
      say("gemm fit " + f.dtype + ": " + fmt("%.1f", f.fit.rate / 1e12) + " TFLOP/s, half-dimension " + fmt("%.0f", f.fit.half_dim) +
          ", rms error " + fmt("%.1f", 100.0 * f.fit.rms_rel_error) + "%");
    }
    r.gemm = r.gemm_dtypes.front().fit;  // bf16 comes first
    r.gemm_samples = r.gemm_dtypes.front().samples;
    r.bytes_per_element = 2;
    r.copy_bandwidth = journal.measure("memory copy", [&] { return cuda::copy_bandwidth(mo); });
    say("HBM copy: " + fmt("%.0f", r.copy_bandwidth / 1e9) + " GB/s moved");
    // --- the host side (CPU offload): every process at once, as a node's GPUs offload together ---
    {
      const int threads = host_threads(size);
      const size_t bytes = size_t{256} << 20;
      r.host.memory_bytes = host_memory_bytes();
      r.host.memory_bandwidth = journal.measure("host memory copy", [&] {
        world.barrier();
        return world.sum(host_copy_bandwidth(threads, mo));
      });
      r.host.optimizer_rate = journal.measure("host optimizer adam", [&] {
        world.barrier();
        return world.sum(host_optimizer_rate(threads, mo));
      });
      const double slowest = journal.measure("host link", [&] {
        world.barrier();
        const double up = world.max(cuda::host_copy_seconds(bytes, true, mo));
        world.barrier();
        return std::max(up, world.max(cuda::host_copy_seconds(bytes, false, mo)));
      });
      r.host.link = static_cast<double>(bytes) / slowest;
      say("host: memory copy " + fmt("%.0f", r.host.memory_bandwidth / 1e9) + " GB/s moved, Adam " + fmt("%.0f", r.host.optimizer_rate / 1e6) +
          " M parameters/s, link " + fmt("%.1f", r.host.link / 1e9) + " GB/s per GPU");
    }
    // --- memory-bound kernels ---
    for (const auto& c : cuda_elementwise_cases()) {
      try {
        const double t = journal.measure(c.name(), [&] { return cuda::time_elementwise(c.kernel, c.rows, c.cols, mo).median_s; });
        r.elementwise.push_back({c.name(), c.bytes(), c.flops(), t});
        say(c.name() + ": " + fmt("%.1f", t * 1e6) + " us, " + fmt("%.0f", c.bytes() / t / 1e9) + " GB/s");
      } catch (const std::runtime_error& e) {
        r.not_measured.push_back(c.name() + ": " + e.what());
      }
    }
    // --- causal attention, stepcast's own tiled kernels (reported, not written to the profile) ---
    for (const auto& c : cuda_attention_cases()) {
      if (past_limit(elapsed())) {
        skipped("attention " + std::to_string(c.bh) + "x" + std::to_string(c.seq));
        continue;
      }
      try {
        const auto t = journal.measure("attention " + std::to_string(c.bh) + "x" + std::to_string(c.seq), [&] {
          const auto fb = cuda::time_attention(c.bh, c.seq, mo);
          return std::vector<double>{fb.forward_s, fb.backward_s};
        });
        r.attention.push_back({"stepcast tiled (FlashAttention-2 algorithm, WMMA)", c.bh, c.seq, 128, t.at(0), t.at(1)});
        const auto& a = r.attention.back();
        say("attention " + std::to_string(c.bh) + "x" + std::to_string(c.seq) + ": forward " + fmt("%.1f", a.forward_flops() / a.forward_s / 1e12) +
            " TFLOP/s, backward " + fmt("%.1f", 2.5 * a.forward_flops() / a.backward_s / 1e12) + " TFLOP/s");
      } catch (const std::runtime_error& e) {
        r.not_measured.push_back("attention " + std::to_string(c.bh) + "x" + std::to_string(c.seq) + ": " + e.what());
        break;  // a failed check fails every size alike
      }
    }
    r.not_measured.push_back("fused attention from a library (cuDNN's SDPA, FlashAttention) is not called: the profile's attention_fwd/bwd stay "
                             "the bf16 GEMM efficiency at 4096-wide tiles; stepcast's own tiled kernels are measured and reported as a lower bound "
                             "(tuned library kernels are faster), not written to the profile");
    std::vector<HeldCollective> held_coll;
    double collective_sms = 0;
    std::string interference_note = "collective_sms 0: not measured (one GPU; the measurement needs a collective across ranks)";
#ifdef STEPCAST_HAVE_MPI
    if (size > 1) {
      auto barrier = [] { MPI_Barrier(MPI_COMM_WORLD); };
      auto maxr = [](double d) {
        double m = 0;
        MPI_Allreduce(&d, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        return m;
      };
      // One communicator per group size: groups of consecutive ranks, every group of a size
      // measured at once (as every TP group of a job runs at once); the world is the last.
      const std::vector<int> groups = collective_group_sizes(size);
      std::vector<int> comm_of;
      for (const int g : groups) {
        MPI_Comm sub = MPI_COMM_NULL;
        MPI_Comm_split(MPI_COMM_WORLD, rank / g, rank, &sub);
        char id[128] = {};
        if (rank % g == 0) cuda::nccl_unique_id(id);
        MPI_Bcast(id, 128, MPI_BYTE, 0, sub);
        MPI_Comm_free(&sub);
        comm_of.push_back(cuda::nccl_init(rank % g, g, id));
      }
      // The whole group first (its sizes are the held-out ones), then the smaller groups while
      // the time limit allows; every rank decides on the slowest rank's clock, so all agree.
      std::vector<size_t> order{groups.size() - 1};
      for (size_t gi = 0; gi + 1 < groups.size(); ++gi) order.push_back(gi);
      for (const size_t gi : order) {
        const int g = groups[gi];
        const bool world = g == size;
        if (!world && past_limit(maxr(elapsed()))) {
          skipped("collectives over groups of " + std::to_string(g));
          continue;
        }
        cuda::nccl_select(comm_of[gi]);
        for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv"}) {
          const std::string o = op;
          auto coll_s = [&](size_t b, const char* role) {
            return journal.measure(o + " x" + std::to_string(g) + " " + std::to_string(b) + " B" + role,
                                   [&] { return cuda::time_collective(op, b, rank % g, g, mo, barrier, maxr); });
          };
          std::vector<CollSample> cs;
          for (size_t b : cuda_collective_fit_sizes()) cs.push_back({static_cast<double>(b), coll_s(b, "")});
          r.collectives.push_back(fit_collective(o, g, op_bus_factor(o, g), cs));
          say(o + " x" + std::to_string(g) + ": plateau busbw " + fmt("%.1f", r.collectives.back().plateau_busbw / 1e9) + " GB/s");
          if (world) {
            for (size_t b : cuda_collective_held_sizes()) held_coll.push_back({o, b, coll_s(b, " held out"), 0.0, {}});
          }
        }
      }
      // Interference: a large GEMM beside a 256 MiB all-reduce on another stream (world group).
      cuda::nccl_select(comm_of.back());
      if (past_limit(maxr(elapsed()))) {
        skipped("compute-communication interference");
        interference_note = "collective_sms 0: not measured (the run reached its --time-limit)";
      } else {
        const auto ab = journal.measure("gemm 8192^3 beside all_reduce 256 MiB", [&] {
          const auto [a, b] = cuda::gemm_beside_all_reduce(8192, 8192, 8192, size_t{256} << 20, mo, barrier, maxr);
          return std::vector<double>{a, b};
        });
        const double alone = ab.at(0), beside = ab.at(1);
        const std::string slower = fmt("%.1f", 100.0 * (beside / alone - 1.0)) + "% slower";
        interference_note = "collective_sms: a bf16 8192^3 GEMM took " + fmt("%.3f", alone * 1e3) + " ms alone and " +
                            fmt("%.3f", beside * 1e3) + " ms beside back-to-back 256 MiB NCCL all-reduces on another stream (" +
                            slower + ")";
        collective_sms = collective_sms_from(alone, beside, dev.sm_count);
        say("interference: GEMM " + slower + " beside an all-reduce = " + fmt("%.1f", collective_sms) + " of " +
            std::to_string(dev.sm_count) + " SMs");
      }
      cuda::nccl_finalize();
    }
#endif
    DeviceDescription d;
    d.name = "measured-" + dev.name;
    d.device = dev.name;
    d.description = "Measured by stepcast calibrate --backend cuda on " + std::to_string(size) + " x " + dev.name + " (compute capability " +
                    std::to_string(dev.cc_major) + "." + std::to_string(dev.cc_minor) + ")";
    d.sources = {"cuBLAS cublasGemmEx (bf16, fp16, tf32, fp32; fp32 accumulation) and cuBLASLt (fp8 E4M3 operands, bf16 result), "
                 "CUDA-event timing; " + cuda::toolkit_versions() + "; NCCL " + cuda::nccl_version(),
                 "NCCL collectives: inputs and outputs rotate through up to 256 MiB; every size's result is checked on sampled elements",
                 "memory_bandwidth = device-to-device copy of 1 GiB (bytes read + written); kernel_overhead = a 16x16x16 GEMM",
                 "attention efficiencies = bf16 GEMM efficiency at 4096-wide tiles (library attention kernels are not measured; stepcast's own "
                 "tiled kernels are, in the report)"};
    d.dtypes = dtypes;
    d.memory_bytes = dev.memory_bytes;
    d.sm_count = dev.sm_count;
    d.collective_sms = collective_sms;
    d.sources.push_back(interference_note);
    d.attention_tile = 4096;
    d.fabric_name = "measured-intra-node";
    d.network = {{"name", "not measured"}, {"nic_bandwidth", "400Gb/s"}, {"nics_per_node", size}};
    r.reused_measurements = journal.reused();
    r.new_measurements = journal.done();
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
