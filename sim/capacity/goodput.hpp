// stepcast goodput: the wall clock a training run needs once job-interrupting failures,
// checkpoints and restarts are counted (pure functions).
//
// Failures arrive as a Poisson process: a cluster of N GPUs, each failing once per M_gpu hours,
// is interrupted once per M = M_gpu / N. The run saves a checkpoint after every tau seconds of
// training (a whole number of steps), which stalls it for delta seconds; after a failure it
// restarts (R: detection, relaunch and reading the checkpoint back) and repeats the work since
// the last checkpoint. Daly's model (J. T. Daly, "A higher order estimate of the optimum
// checkpoint interval for restart dumps", Future Generation Computer Systems 22, 2006) gives
// the expected wall time of T_s seconds of failure-free training,
//   T_w = M e^(R/M) (e^((tau + delta)/M) - 1) T_s / tau,
// failures during checkpoints and restarts included, and the interval that minimises it,
//   tau = sqrt(2 delta M) (1 + sqrt(delta / (2M)) / 3 + delta / (18 M)) - delta   (delta < 2M),
//   tau = M otherwise.
// goodput = T_s / T_w, the share of the wall clock that advances training.
//
// Defaults, each from a published figure:
//   M_gpu 50,677 GPU-hours: Llama 3 pre-training saw 419 unexpected interruptions in a 54-day
//     snapshot on 16,384 H100 GPUs (Dubey et al. 2024, "The Llama 3 Herd of Models", §3.3.4):
//     16,384 x 54 x 24 / 419.
//   storage 122 MB/s per GPU of the cluster: the sustained 2 TB/s of the Tectonic file system
//     that checkpointed that run (same paper, §3.3.1) over its 16,384 GPUs, i.e. storage
//     provisioned in proportion to the cluster (a given aggregate bandwidth replaces it).
//   restart overhead 10 min: PyTorch's default timeout for an NCCL process group, the time a
//     job stuck on a dead peer waits before it fails; it stands for detection plus relaunch.
// The checkpoint holds the training state: weights and optimizer state (fp32 master copy and
// moments), not gradients; it is written and read at the storage bandwidth.
#pragma once

#include <cstdint>

namespace stepcast::capacity {

inline constexpr double kLlama3GpuMtbfHours = 16384.0 * 54.0 * 24.0 / 419.0;
inline constexpr double kLlama3StorageBytesPerSPerGpu = 2e12 / 16384.0;
inline constexpr double kDefaultRestartS = 600.0;

struct ReliabilityInput {
  double gpu_mtbf_hours = kLlama3GpuMtbfHours;
  double storage_bytes_per_s = 0;                // aggregate; 0: kLlama3StorageBytesPerSPerGpu per GPU
  double restart_overhead_s = kDefaultRestartS;  // before the checkpoint is read back
  double checkpoint_save_s = -1;                 // < 0: state bytes / storage bandwidth
  int64_t checkpoint_every_steps = 0;            // 0: Daly's optimum, in whole steps
};

struct Goodput {
  double cluster_mtbf_s = 0;      // M
  double state_bytes = 0;         // one checkpoint
  double storage_bytes_per_s = 0; // what the checkpoint is written and read at
  double save_s = 0, load_s = 0;  // delta; reading the checkpoint back
  double restart_s = 0;           // R = restart overhead + load
  int64_t interval_steps = 0;     // checkpoint every this many steps
  double interval_s = 0;          // tau
  bool optimal_interval = true;   // the interval is Daly's optimum (not given)
  double solve_s = 0;             // failure-free training time, T_s
  double wall_s = 0;              // expected wall time, T_w
  double goodput = 1;             // T_s / T_w
  double interruptions = 0;       // expected failures during the run, T_w / M
  double checkpoints = 0;         // checkpoints written, T_s / tau
};

// Daly's expected wall time and optimum interval (seconds).
double daly_wall_time(double solve_s, double tau, double delta, double restart_s, double mtbf_s);
double daly_optimal_interval(double delta, double mtbf_s);

// The run of `steps` steps of `step_s` seconds on `gpus` GPUs with `state_bytes` of training
// state. Throws core::UserError naming the option for a non-positive input.
// `load_bytes`: what a restart reads back, when more than the checkpoint (a LoRA run reloads
// its frozen base beside the adapters' checkpoint); < 0: the checkpoint.
Goodput expected_goodput(const ReliabilityInput& in, double step_s, double steps, int64_t gpus, double state_bytes,
                         double load_bytes = -1);

}  // namespace stepcast::capacity
