// stepcast capacity arithmetic (pure functions).
//
//   FLOPs = 6 * N * D;  GPU-hours = FLOPs / (peak * MFU) / 3600;
//   GPUs = GPU-hours / (days * 24), rounded up to whole nodes;  wall days = GPU-hours / GPUs / 24;
//   cost = GPU-hours * price;  steps = D / (global batch * seq_len);
//   static memory = bytes_per_param * N (12-byte convention: bf16 weights + bf16 grads + 8-byte
//   Adam moments, no fp32 master; 16 with the master copy).
// Tensor parallel pick (capacity-cases convention): the smallest tp in {1, 2, 4, 8} whose
// per-GPU static memory, weights and gradients split by tp and optimizer state by tp*dp
// (distributed optimizer), fits a fraction of HBM.
#pragma once

#include <cstdint>

namespace stepcast::capacity {

struct CapacityInput {
  double params = 0;            // N
  double tokens = 0;            // D
  double global_batch_seqs = 0;
  double seq_len = 0;
  double peak_flops = 0;        // per GPU, FLOP/s
  double mfu = 0;
  double target_days = 0;
  double usd_per_gpu_hour = 0;
  int64_t gpus_per_node = 8;
  double hbm_bytes = 80e9;
  double bytes_per_param = 12;  // static-memory convention
  double weight_grad_bytes = 4; // part of bytes_per_param split only by tp
  double hbm_fraction = 0.55;
  // The largest cluster considered (whole nodes, and at most 8 x the global batch: data
  // parallelism cannot exceed the sequences of a step, TP 8 at most); 0: no limit.
  int64_t max_gpus = 0;
};

struct CapacityResult {
  double steps = 0, flops = 0, gpu_hours = 0, wall_days = 0, cost_usd = 0, static_bytes = 0;
  int64_t gpus = 0, tp = 0, dp = 0;
  bool tp_fits = true;
  bool met = true;            // false: the deadline needs more than max_gpus; gpus is the cap
  double needed_gpus = 0;     // GPUs the deadline needs (before rounding to nodes)
};

double training_flops(double params, double tokens);
CapacityResult size_cluster(const CapacityInput& in);

}  // namespace stepcast::capacity
