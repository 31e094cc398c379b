#include "sim/lab/pcie_lab.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "sim/config/hardware.hpp"
#include "sim/core/error.hpp"
#include "sim/config/run_config.hpp"
#include "sim/cost/collectives.hpp"
#include "sim/cost/compute.hpp"
#include "sim/engine/engine.hpp"
#include "sim/engine/step_sim.hpp"
#include "sim/mesh/rank_mesh.hpp"

namespace stepcast::lab {

namespace {

std::vector<std::vector<std::string>> read_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw core::UserError(path + ": cannot read the lab data");
  std::vector<std::vector<std::string>> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<std::string> cells;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) cells.push_back(cell);
    if (!line.empty() && line.back() == ',') cells.emplace_back();
    rows.push_back(cells);
  }
  return rows;
}

cost::Collective collective_of(const std::string& op) {
  const auto c = cost::collective_from_name(op);
  if (!c) throw core::UserError("collectives.csv: unknown op '" + op + "'");
  return *c;
}

std::string pct(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", 100.0 * x);
  return buf;
}

// GPT-2 124M as the lab ran it: vocab padded to 50304, seq 1024, micro-batch 12, fp32
// parameters under bf16 autocast, fp32 gradients, eager cross-entropy, fused AdamW.
config::RunConfig ddp_run(int64_t world, double bucket_mb, int64_t accum, bool no_sync) {
  core::Json j = {
      {"model",
       {{"name", "gpt2-124m (lab)"}, {"n_embd", 768}, {"n_head", 12}, {"n_layer", 12}, {"n_positions", 1024},
        {"vocab_size", 50304}, {"tie_word_embeddings", true}, {"activation_function", "gelu_new"}}},
      {"hardware", "rtx-pro-6000-pcie-8x"},
      {"cluster", {{"num_gpus", world}}},
      {"training",
       {{"seq_len", 1024}, {"global_batch_size", 12 * world * accum}, {"precision", "bf16"}, {"param_dtype", "fp32"},
        {"grad_dtype", "fp32"}, {"loss", "eager"}}},
      {"parallel", {{"micro_batch_size", 12}, {"bucket_mb", bucket_mb}, {"no_sync", no_sync}}}};
  return config::parse_run(j, "<pcie-lab ddp>", "");
}

void ddp_sweep(const std::string& data_dir, std::ostringstream& o, LabResult& res) {
  const auto rows = read_csv(data_dir + "/ddp_buckets.csv");
  // Compute calibration: this workload's single-GPU step (the calibration measurement a
  // profiling run gives) over the cost model's prediction scales every compute operator.
  double single_meas = 0;
  for (size_t i = 1; i < rows.size(); ++i) {
    if (rows[i][0] == "single") single_meas = std::stod(rows[i][5]) * 1e-3;
  }
  if (single_meas <= 0) throw core::UserError(data_dir + "/ddp_buckets.csv: no 'single' row to calibrate compute");
  const double single_pred = engine::simulate_step(ddp_run(1, 25, 1, true)).step.step_time_s;
  engine::SimOptions opt;
  opt.compute_scale = single_meas / single_pred;
  char buf[2048];
  std::snprintf(buf, sizeof buf,
                "## DDP gradient buckets (GPT-2 124M, 8 GPUs)\n\n"
                "Compute calibration: the cost model predicts %.2f ms for the single-GPU step; the lab\n"
                "measured %.2f ms (PyTorch eager with autocast runs far below kernel peaks), so every\n"
                "compute operator is scaled by %.3f. That one factor, from the single-GPU row, is the only\n"
                "input taken from this table; bucket formation (whole tensors in reverse registration order,\n"
                "first bucket 1 MB, the tied embedding's gradient complete only after the embedding\n"
                "backward), overlap with backward, and all-reduce times come from the simulator and the\n"
                "hardware profile.\n\n"
                "| mode | bucket MB | grad accum | no_sync | measured ms | predicted ms | error |\n|---|---:|---:|---:|---:|---:|---:|\n",
                single_pred * 1e3, single_meas * 1e3, opt.compute_scale);
  o << buf;
  int rows_n = 0, rows_ok = 0, nosync_n = 0, nosync_ok = 0;
  double best_meas = 1e30, best_pred = 1e30, best_meas_mb = 0, best_pred_mb = 0;
  for (size_t i = 1; i < rows.size(); ++i) {
    const auto& r = rows[i];
    if (r[0] == "single") continue;
    const int64_t world = std::stoll(r[1]);
    const double bucket = std::stod(r[2]);
    const int64_t accum = std::stoll(r[3]);
    const bool has_nosync = r.size() > 4 && !r[4].empty();
    const bool no_sync = has_nosync ? r[4] == "1" : true;
    const double meas = std::stod(r[5]) * 1e-3;
    const double pred = engine::simulate_step(ddp_run(world, bucket, accum, no_sync), opt).step.step_time_s;
    const double err = pred / meas - 1.0;
    const bool ok = std::abs(err) <= 0.05;
    if (has_nosync) {
      ++nosync_n;
      nosync_ok += ok;
    } else {
      ++rows_n;
      rows_ok += ok;
      if (meas < best_meas) best_meas = meas, best_meas_mb = bucket;
      if (pred < best_pred) best_pred = pred, best_pred_mb = bucket;
    }
    std::snprintf(buf, sizeof buf, "| %s x%lld | %.0f | %lld | %s | %.2f | %.2f | %s%s |\n", r[0].c_str(),
                  static_cast<long long>(world), bucket, static_cast<long long>(accum), has_nosync ? r[4].c_str() : "-",
                  meas * 1e3, pred * 1e3, pct(err).c_str(), ok ? "" : " (over 5%)");
    o << buf;
  }
  std::snprintf(buf, sizeof buf,
                "\nBucket sweep: %d of %d rows within 5%%; fastest bucket measured %.0f MB, predicted %.0f MB.\n"
                "Gradient accumulation rows (with and without no_sync): %d of %d within 5%%.\n\n",
                rows_ok, rows_n, best_meas_mb, best_pred_mb, nosync_ok, nosync_n);
  o << buf;
  res.checks += 3;
  res.passed += (rows_ok == rows_n) + (best_meas_mb == best_pred_mb) + (nosync_ok == nosync_n);
}

// Host time to issue one eager-mode operator (Python, autograd bookkeeping, dispatch and the
// CUDA launch) in the lab's PyTorch loop: a typical eager figure, not fitted to the sweep.
constexpr double kHostLaunchS = 50e-6;

// GPipe on 4 GPUs: each stage 6 x (Linear 4096x4096 without bias + GeLU) in bf16, a batch of
// 8192 rows split into m micro-batches, blocking receive and asynchronous send, SGD step.
void gpipe_sweep(const std::string& data_dir, const hw::HardwareProfile& hw, std::ostringstream& o, LabResult& res) {
  using engine::Stream;
  using engine::Task;
  using engine::TaskKind;
  using engine::to_ticks;
  const auto rows = read_csv(data_dir + "/gpipe_bubble.csv");
  const int32_t p = 4;
  const double width = 4096, batch = 8192;
  const int layers = 6;
  char buf[512];
  o << "## GPipe micro-batch sweep (4 stages of 6 x Linear 4096 + GeLU)\n\n"
    << "No calibration: GEMM times from the profile's bf16 efficiency and its shape ramp, GeLU as\n"
    << "memory-bound passes, activations sent between neighbouring GPUs over the fabric tier they\n"
    << "share; the host issues each operator (50 us, a typical eager cost) and a blocking receive\n"
    << "holds the host until the data has arrived; from the second micro-batch on, autograd adds\n"
    << "each weight gradient into the parameter's gradient (one memory-bound kernel per layer).\n\n"
    << "| m | measured slot ms | predicted slot ms | measured step ms | predicted step ms | error |\n|---:|---:|---:|---:|---:|---:|\n";
  int n = 0, ok = 0;
  double best_meas = 1e30, best_pred = 1e30;
  int64_t best_meas_m = 0, best_pred_m = 0;
  for (size_t i = 1; i < rows.size(); ++i) {
    const int64_t m = std::stoll(rows[i][0]);
    const double slot_meas = std::stod(rows[i][1]) * 1e-3;
    const double meas = std::stod(rows[i][2]) * 1e-3;
    const double r = batch / static_cast<double>(m);
    const cost::GemmShape g{r, width, width, 1.0};
    const double gemm = cost::gemm_time(g, hw::Dtype::kBf16, hw).value();
    const double act = r * width * 2.0;
    const double gelu_f = (cost::memory_time(core::Bytes(2.0 * act), hw) + hw.efficiency.kernel_overhead).value();
    const double gelu_b = (cost::memory_time(core::Bytes(3.0 * act), hw) + hw.efficiency.kernel_overhead).value();
    const double fwd = layers * (gemm + gelu_f);
    const double bwd = layers * (2.0 * gemm + gelu_b);
    const double accumulate =
        layers * (cost::memory_time(core::Bytes(3.0 * width * width * 2.0), hw) + hw.efficiency.kernel_overhead).value();
    engine::TaskGraph graph(p);
    const uint32_t nf = graph.intern("fwd"), nb = graph.intern("bwd"), ns = graph.intern("send"), no = graph.intern("sgd"),
                   nh = graph.intern("host launch");
    std::vector<std::vector<engine::TaskId>> f(p), b(p), sf(p), sb(p), hf(p), hb(p);
    // Host side: an eager framework issues every kernel from the CPU. A blocking receive
    // returns to the host only when the data has arrived, so the next micro-batch's kernels are
    // launched after it: the first kernel can start one launch later, and the work cannot end
    // before the host has issued its last kernel.
    const double launch = kHostLaunchS;
    auto host_gate = [&](int32_t s, int kernels, std::vector<engine::TaskId>& first_out) {
      Task h;
      h.rank = s;
      h.stream = Stream::kHost;
      h.kind = TaskKind::kHost;
      h.name = nh;
      h.duration = to_ticks(launch);
      const auto h1 = graph.add(h);
      h.duration = to_ticks(launch * (kernels - 1));
      const auto h2 = graph.add(h);
      first_out.push_back(h1);
      return std::pair<engine::TaskId, engine::TaskId>{h1, h2};
    };
    for (int32_t s = 0; s < p; ++s) {
      const auto where = mesh::place({s, s + 1}, hw.gpus_per_node);
      const auto back = mesh::place({s - 1, s}, hw.gpus_per_node);
      const double send_f = cost::collective_time(cost::Collective::kSendRecv, core::Bytes(act), where, hw).value();
      const double send_b = s > 0 ? cost::collective_time(cost::Collective::kSendRecv, core::Bytes(act), back, hw).value() : 0.0;
      // One micro-batch's forward or backward: host issue, GPU work, asynchronous send.
      auto pass = [&](TaskKind kind, int kernels, double seconds, double send, uint32_t name, int64_t k,
                      std::vector<engine::TaskId>& hosts, std::vector<engine::TaskId>& work,
                      std::vector<engine::TaskId>& sends) {
        const auto [h1, h2] = host_gate(s, kernels, hosts);
        Task t;
        t.rank = s;
        t.kind = kind;
        t.microbatch = static_cast<int32_t>(k);
        t.duration = to_ticks(seconds);
        t.name = name;
        work.push_back(graph.add(t));
        graph.depend(h1, work.back());
        Task tail = t;
        tail.duration = 0;
        graph.depend(h2, graph.add(tail));
        Task snd = t;
        snd.kind = TaskKind::kPpSend;
        snd.stream = Stream::kPpSend;
        snd.duration = to_ticks(send);
        snd.name = ns;
        sends.push_back(graph.add(snd));
        graph.depend(work.back(), sends.back());
      };
      const auto si = static_cast<size_t>(s);
      for (int64_t k = 0; k < m; ++k) pass(TaskKind::kForward, 2 * layers, fwd, s < p - 1 ? send_f : 0.0, nf, k, hf[si], f[si], sf[si]);
      // Backward: per layer a data-gradient and a weight-gradient GEMM and the GeLU backward.
      // From the second micro-batch on, autograd's AccumulateGrad adds each new weight gradient
      // into the parameter's .grad (read both, write the sum: one more kernel per layer).
      for (int64_t k = 0; k < m; ++k) {
        pass(TaskKind::kBackward, (k > 0 ? 4 : 3) * layers, k > 0 ? bwd + accumulate : bwd, send_b, nb, k, hb[si], b[si], sb[si]);
      }
      Task opt;
      opt.rank = s;
      opt.kind = TaskKind::kOptimizer;
      opt.name = no;
      // SGD over the stage's bf16 weights: read weight and gradient, write the weight.
      opt.duration = to_ticks(cost::memory_time(core::Bytes(layers * width * width * 6.0), hw).value() +
                              hw.efficiency.kernel_overhead.value() * layers);
      const auto oid = graph.add(opt);
      for (auto id : sb[static_cast<size_t>(s)]) graph.depend(id, oid);
    }
    // Blocking receive: a stage's forward waits for the previous stage's send of that
    // micro-batch, its backward for the next stage's gradient send. The receive is a NCCL
    // kernel that PyTorch orders behind the work already queued on the compute stream, and the
    // host blocks until it completes: the host cannot queue micro-batch k's kernels before the
    // GPU has finished micro-batch k - 1, so every received micro-batch pays its kernel issue.
    for (int32_t s = 0; s < p; ++s) {
      const auto si = static_cast<size_t>(s);
      for (int64_t k = 0; k < m; ++k) {
        const auto ki = static_cast<size_t>(k);
        if (s > 0) {
          graph.depend(sf[si - 1][ki], hf[si][ki]);
          if (k > 0) graph.depend(f[si][ki - 1], hf[si][ki]);
        }
        if (s < p - 1) {
          graph.depend(sb[si + 1][ki], hb[si][ki]);
          graph.depend(k > 0 ? b[si][ki - 1] : f[si][static_cast<size_t>(m - 1)], hb[si][ki]);
        }
      }
    }
    engine::Engine eng(graph);
    const double pred = engine::to_seconds(eng.run().makespan);
    const double err = pred / meas - 1.0;
    ++n;
    ok += std::abs(err) <= 0.10;
    if (meas < best_meas) best_meas = meas, best_meas_m = m;
    if (pred < best_pred) best_pred = pred, best_pred_m = m;
    std::snprintf(buf, sizeof buf, "| %lld | %.2f | %.2f | %.1f | %.1f | %s%s |\n", static_cast<long long>(m), slot_meas * 1e3,
                  (fwd + bwd) * 1e3, meas * 1e3, pred * 1e3, pct(err).c_str(), std::abs(err) <= 0.10 ? "" : " (over 10%)");
    o << buf;
  }
  std::snprintf(buf, sizeof buf, "\nGPipe sweep: %d of %d rows within 10%%; best m measured %lld, predicted %lld.\n", ok, n,
                static_cast<long long>(best_meas_m), static_cast<long long>(best_pred_m));
  o << buf;
  res.checks += 2;
  res.passed += (ok == n) + (best_meas_m == best_pred_m);
}

}  // namespace

LabResult run_pcie_lab(const std::string& data_dir) {
  LabResult res;
  std::ostringstream o;
  const auto hw = hw::builtin_hardware("rtx-pro-6000-pcie-8x");
  char buf[512];
  o << "# PCIe lab reproduction\n\n"
    << "Regenerate with `stepcast pcie-lab --out reports/pcie-lab.md`. Every number is predicted from\n"
    << "the `rtx-pro-6000-pcie-8x` hardware profile and the workload the lab describes\n"
    << "(data/pcie-lab/README.md); no row has its own constant.\n\n";

  // ---- collectives ----
  const auto rows = read_csv(data_dir + "/collectives.csv");
  o << "## Collectives\n\n| op | N | bytes | measured ms | predicted ms | error |\n|---|---:|---:|---:|---:|---:|\n";
  int big = 0, big_ok = 0, floor_n = 0, floor_ok = 0, all_floor_n = 0, all_floor_ok = 0;
  double worst_big = 0, worst_floor = 0;
  std::map<std::string, double> smallest;  // op/N -> smallest size seen
  std::string floor_misses;
  for (size_t i = 1; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const std::string key = r[0] + "/" + r[1];
    const double bytes = std::stod(r[2]);
    if (!smallest.count(key) || bytes < smallest[key]) smallest[key] = bytes;
  }
  for (size_t i = 1; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const int64_t n = std::stoll(r[1]);
    const double bytes = std::stod(r[2]);
    const double meas = std::stod(r[3]) * 1e-3;
    std::vector<int64_t> ranks(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) ranks[static_cast<size_t>(k)] = k;
    const auto where = mesh::place(ranks, hw.gpus_per_node);
    const double pred = cost::collective_time(collective_of(r[0]), core::Bytes(bytes), where, hw).value();
    const double err = pred / meas - 1.0;
    std::string note;
    if (bytes >= 1048576.0) {
      ++big;
      worst_big = std::max(worst_big, std::abs(err));
      if (std::abs(err) <= 0.15) ++big_ok; else note = " (over 15%)";
    }
    if (bytes == smallest[r[0] + "/" + r[1]]) {
      ++all_floor_n;
      all_floor_ok += std::abs(err) <= 0.30;
      if (r[0] == "all_reduce") {
        // The lab's latency floor: all-reduce at its smallest size (README).
        ++floor_n;
        worst_floor = std::max(worst_floor, std::abs(err));
        if (std::abs(err) <= 0.30) ++floor_ok;
      }
      if (std::abs(err) > 0.30) {
        note = " (floor over 30%)";
        floor_misses += (floor_misses.empty() ? "" : ", ") + r[0] + " N=" + r[1] + " (" + pct(err) + ")";
      }
    }
    std::snprintf(buf, sizeof buf, "| %s | %lld | %.0f | %.4f | %.4f | %s%s |\n", r[0].c_str(), static_cast<long long>(n), bytes,
                  meas * 1e3, pred * 1e3, pct(err).c_str(), note.c_str());
    o << buf;
  }
  std::snprintf(buf, sizeof buf,
                "\nSizes from 1 MiB: %d of %d within 15%% (worst %.1f%%). All-reduce latency floor (4 KiB, N = 2, 4, 8): %d of %d within 30%% (worst %.1f%%).\n"
                "Smallest size of every op and N: %d of %d within 30%% (scatter and gather take the profile's point-to-point floor, ring ops their launch and step latencies)",
                big_ok, big, 100.0 * worst_big, floor_ok, floor_n, 100.0 * worst_floor, all_floor_ok, all_floor_n);
  o << buf << (floor_misses.empty() ? "" : "; outside: " + floor_misses) << ".\n\n";
  res.checks += 2;
  res.passed += (big_ok == big) + (floor_ok == floor_n);
  ddp_sweep(data_dir, o, res);
  gpipe_sweep(data_dir, hw, o, res);
  std::snprintf(buf, sizeof buf, "\n**Checks passed: %d of %d.**\n", res.passed, res.checks);
  o << buf;
  res.markdown = o.str();
  return res;
}

}  // namespace stepcast::lab
