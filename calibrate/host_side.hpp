// The host side of a GPU node, measured for CPU offload (a profile's `host` block): physical
// memory, the memory bandwidth the node's cores reach together, and the rate they run the
// Adam step at. Each calibration process (one per GPU) runs its share of the cores at once with
// the others, so the node's figure is the sum over its processes.
#pragma once

namespace stepcast::calibrate {

struct MeasureOptions;

// Cores for each of `local_ranks` processes on this machine (at least 1).
int host_threads(int local_ranks);

// Physical memory of this machine in bytes (0 where the system does not say).
double host_memory_bytes();

// Bytes read and written per second by `threads` threads each copying its own 64 MiB at once
// (memcpy, buffers rotating past the caches): this process's share of the memory bandwidth.
double host_copy_bandwidth(int threads, const MeasureOptions& mo);

// Parameters per second `threads` threads update at once with the Adam step (calibrate/
// cpu_kernels.hpp), each over its own 4 Mi parameters (64 MiB of state, past the caches).
double host_optimizer_rate(int threads, const MeasureOptions& mo);

}  // namespace stepcast::calibrate
