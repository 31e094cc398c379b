#include "sim/capacity/capacity.hpp"

#include <cmath>
#include <initializer_list>

namespace stepcast::capacity {

double training_flops(double params, double tokens) { return 6.0 * params * tokens; }

CapacityResult size_cluster(const CapacityInput& in) {
  CapacityResult r;
  r.steps = in.tokens / (in.global_batch_seqs * in.seq_len);
  r.flops = training_flops(in.params, in.tokens);
  r.gpu_hours = r.flops / (in.peak_flops * in.mfu) / 3600.0;
  const double raw_gpus = r.gpu_hours / (in.target_days * 24.0);
  const double node = static_cast<double>(in.gpus_per_node);
  r.needed_gpus = raw_gpus;
  // The cluster the deadline needs, unless that is past the cap (checked in doubles: a budget
  // far past any cluster would overflow an integer count).
  double cap = in.max_gpus > 0 ? static_cast<double>(in.max_gpus) : 1e15;
  if (in.global_batch_seqs > 0) cap = std::min(cap, 8.0 * in.global_batch_seqs);
  cap = std::max(node, std::floor(cap / node) * node);
  const double want = std::ceil(raw_gpus / node) * node;
  r.met = want <= cap;
  r.gpus = static_cast<int64_t>(r.met ? want : cap);
  r.wall_days = r.gpu_hours / static_cast<double>(r.gpus) / 24.0;
  r.cost_usd = r.gpu_hours * in.usd_per_gpu_hour;
  r.static_bytes = in.bytes_per_param * in.params;
  const double budget = in.hbm_fraction * in.hbm_bytes;
  r.tp_fits = false;
  for (int64_t tp : {1, 2, 4, 8}) {
    if (r.gpus % tp != 0) continue;
    const double dp = static_cast<double>(r.gpus / tp);
    const double per_gpu = in.weight_grad_bytes * in.params / static_cast<double>(tp) +
                           (in.bytes_per_param - in.weight_grad_bytes) * in.params / (static_cast<double>(tp) * dp);
    r.tp = tp;
    if (per_gpu <= budget) {
      r.tp_fits = true;
      break;
    }
  }
  r.dp = r.gpus / r.tp;
  return r;
}

}  // namespace stepcast::capacity
