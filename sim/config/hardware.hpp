// stepcast hardware profile: one GPU type, its node fabric and its scale-out network.
//
// Peak rates and capacities come from datasheets; every efficiency is a measured ratio
// (achieved / peak) with its measurement cited in configs/hardware/<name>.json. The cost
// model in sim/cost consumes these fields only; nothing is tuned per training run.
//
// Fabric tiers: GPUs in a node are grouped into nested domains (e.g. PCIe switch pairs inside
// a CPU socket inside the node, or one NVSwitch domain of 8). A ring collective among GPUs of
// one node runs at the bus bandwidth of the widest tier it must cross; one slow tier caps the
// whole ring. Rooted one-way transfers use the tier's point-to-point bandwidth.
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sim/core/json_reader.hpp"
#include "sim/core/units.hpp"

namespace stepcast::hw {

enum class Dtype { kFp32, kTf32, kBf16, kFp16, kFp8 };
std::string to_string(Dtype d);
Dtype dtype_from_string(const std::string& s);  // throws std::invalid_argument
double bytes_per_element(Dtype d);             // 4, 4, 2, 2, 1

struct FabricTier {
  std::string name;
  int span = 1;                         // GPUs in one domain of this tier (divides gpus_per_node)
  core::Bandwidth busbw;                // large-message ring bus bandwidth crossing this tier
  core::Bandwidth allreduce_busbw;      // all-reduce plateau (NVLS / in-switch reduction); = busbw if unset
  core::Bandwidth reduce_scatter_busbw;  // reduce-scatter plateau; = busbw if unset
  core::Bandwidth broadcast_busbw;      // pipelined ring broadcast plateau; = busbw if unset
  core::Bandwidth p2p_bandwidth;        // one-way GPU-to-GPU copy bandwidth across this tier
  core::Duration latency;               // per ring step latency (alpha)
  core::Duration base_latency;          // fixed cost of one collective (launch, handshake); 0 if unset
  // Floor of a point-to-point transfer (send/recv, and scatter/gather, which NCCL runs as
  // grouped sends and receives rather than ring kernels), on top of the per-step latency: the
  // peers' handshake, which overlaps the data movement, so a transfer takes the longer of the
  // two. Unset: no floor beyond the launch and per-step latency.
  std::optional<core::Duration> p2p_latency;
  // Optional measured curve: (message bytes, achieved fraction of the plateau), ascending.
  // When present it replaces the alpha-beta model for collectives inside this tier.
  std::vector<std::pair<double, double>> size_curve;
  // Optional per-operation measured bus bandwidth by message size, [[bytes, bytes/s], ...]
  // (keys all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send_recv), as
  // `stepcast calibrate` writes them; they take precedence over the plateaus and size_curve for
  // their operation. The time is interpolated log-log between the measured sizes; below the
  // first size it stays at the first point's time (the latency floor).
  std::map<std::string, std::vector<std::pair<double, double>>> op_curves;
  // Every GPU of a domain has its own direct link to each other one (xGMI on MI300X-class
  // platforms, NVLink between the GPUs of a quad GH200 node), with no switch: the ring plateaus
  // are those of the whole domain, which drives all span - 1 links of each GPU; a group of n
  // ranks inside it has only n - 1 of them.
  bool full_mesh = false;
  // Share of the ring plateaus a group with `ranks` GPUs in one domain of this tier reaches.
  double mesh_share(int64_t ranks) const {
    if (!full_mesh || span <= 1 || ranks >= span) return 1.0;
    return static_cast<double>(std::max<int64_t>(1, ranks - 1)) / static_cast<double>(span - 1);
  }
};

struct Network {
  std::string name;
  core::Bandwidth nic_bandwidth;  // line rate of one NIC
  int nics_per_node = 0;
  double efficiency = 0.9;        // achieved fraction of line rate for large collectives
  core::Duration latency;         // per hop latency (alpha) of an inter-node step
  double oversubscription = 1.0;  // oversubscription ratio above the leaf switches (>= 1)
  // Scale-out network as a two-level tree: nodes_per_leaf nodes under one leaf layer (a
  // rail-optimised scalable unit, where NCCL keeps ring traffic and PXN-routed all-to-all on
  // the rails, or a fat-tree leaf), spine above it at 1/oversubscription. Groups spanning at
  // most nodes_per_leaf nodes run at full NIC bandwidth. 0: oversubscription applies to all
  // inter-node traffic.
  int64_t nodes_per_leaf = 0;
  // The profile gives a network; without one a run must stay inside one node.
  bool stated = false;
};

// The host side of a node, for CPU offload (parallel.offload): the host memory the GPUs'
// offloaded state lives in, the bandwidth the CPU optimizer streams it at, and the link each
// GPU copies over. Absent (stated false): the profile says nothing, and offload is refused.
struct Host {
  core::Bytes memory;               // host memory of one node
  core::Bandwidth memory_bandwidth;  // one node's host memory bandwidth (all sockets, datasheet peak)
  double memory_efficiency = 0.8;   // share of it a streaming kernel (the CPU optimizer) reaches
  // A GPU's link to host memory, one direction, while every GPU of the node copies at once.
  core::Bandwidth link;
  // Parameters per second the node's CPUs update with Adam when compute-bound (measured); 0:
  // the CPU optimizer is bound by host memory traffic alone.
  double optimizer_rate = 0;
  bool stated = false;
};

struct Efficiency {
  std::map<Dtype, double> gemm_max;  // best achieved fraction of peak for large GEMMs
  double gemm_half_dim = 128;        // a GEMM dimension of this size runs at half the large-shape rate
  // Sustained tensor-core clock under training load over the clock the burst measurements
  // (gemm_max, attention) ran at: power- and thermally-limited parts settle below boost.
  double sustained_clock = 1.0;
  // SMs the TP-overlap communication kernels occupy while a GEMM runs beside them
  // (Transformer Engine's userbuffers default to 16); the GEMM loses that share of the GPU.
  double tp_overlap_sms = 16;
  // SMs one NCCL collective kernel occupies (its channels, one thread block each) while it
  // runs beside compute: gradient reductions, parameter gathers, context-parallel ring
  // transfers and expert all-to-alls hidden behind computation slow it by that share of the
  // GPU. 0: communication does not interfere.
  double collective_sms = 0;
  // Attention kernel throughput at long sequences (the asymptote; sim/cost/compute scales it by
  // the keys a query row runs over and the masked share of the tiles computed).
  double attention_fwd = 0.5;        // fused attention forward: fraction of dense 16-bit peak
  double attention_bwd = 0.4;        // fused attention backward
  double attention_flash2_fwd = 0.5; // FlashAttention-2 forward (= attention_fwd unless given)
  double attention_flash2_bwd = 0.4;
  // The FlashAttention Triton kernel (flash_attn_triton.py; llm-foundry's attn_impl: triton):
  // 0 where the profile has no measurement of it, and a run that asks for it is refused.
  double attention_triton_fwd = 0;
  double attention_triton_bwd = 0;
  // Key tile of the attention kernels (keys per inner-loop step; FlashAttention-3 and cuDNN on
  // Hopper use 128): a causal mask computes each query row's diagonal tile whole and a sliding
  // window one partial tile more per row. 0: no tile granularity.
  double attention_tile = 128;
  double attention_flash2_tile = 64;  // FlashAttention-2's forward key block at head dim 128
  double attention_triton_tile = 128; // the Triton kernel's key block (BLOCK_N)
  // Attention kernel throughput by head dimension relative to the efficiencies above (which
  // hold at the points' 1.0): (head dim, factor) points, interpolated in log2 of the head dim
  // and held flat beyond the ends; empty: no dependence measured. Fused and FlashAttention-2
  // kernels scale differently (their tiling differs).
  std::vector<std::pair<double, double>> attention_head_dim_scale, attention_flash2_head_dim_scale;
  // Measured GEMMs (calibrate writes them as efficiency.gemm_measured: per dtype, [m, n, k,
  // achieved fraction of that dtype's peak]): the shape model above is corrected towards them,
  // by the ratio measured / modelled at each point, interpolated by inverse squared distance in
  // log2(m, n, k) against a prior of no correction two octaves out (sim/cost/compute). Each
  // point keeps its log2 coordinates and the log of that ratio.
  struct GemmPoint {
    double lm = 0, ln = 0, lk = 0, log_ratio = 0;
  };
  std::map<Dtype, std::vector<GemmPoint>> gemm_measured;
  double memory_bound = 0.8;         // fraction of HBM bandwidth that element-wise kernels reach
  // Parameters per second the optimizer kernel updates when it is compute-bound (measured by
  // the CPU calibration); 0: the optimizer is bound by memory traffic alone (fused GPU Adam).
  double optimizer_rate = 0;
  core::Duration kernel_overhead;    // per-kernel launch and tail cost
};

// A PCIe node described by its links rather than fitted per tier: GPUs in pairs (or more)
// under PCIe switches, switches under CPU sockets, sockets joined by one inter-socket link.
// The fabric tiers (one per switch, socket and node span) are derived from it.
struct PcieTopology {
  int gpus_per_switch = 2;
  int gpus_per_socket = 4;
  core::Bandwidth gpu_link;         // a GPU's PCIe port, one direction (bounds rooted transfers)
  core::Bandwidth ring_bandwidth;   // what one NCCL ring step sustains over PCIe peer-to-peer
  core::Bandwidth chain_bandwidth;  // pipelined broadcast chain (one-way forwarding)
  core::Bandwidth socket_link;      // inter-socket link, one direction, for GPU peer traffic
  double socket_reduce_efficiency = 1.0;  // reductions streamed through the socket link
  core::Duration launch_latency;    // fixed cost of one collective
  std::optional<core::Duration> p2p_latency;  // floor of a point-to-point transfer (FabricTier::p2p_latency)
  core::Duration switch_hop, socket_hop, socket_link_hop;  // per ring step, by slowest hop
};

// Tiers of a PCIe node: spans gpus_per_switch, gpus_per_socket and the node. A ring crossing
// the socket link carries its whole per-rank traffic through it once in each direction, so the
// link caps the ring; rooted transfers (scatter, gather, 2-rank copies) are bounded by the
// root's own PCIe port and do not queue on it.
std::vector<FabricTier> pcie_tiers(const PcieTopology& t, int gpus_per_node);

struct HardwareProfile {
  std::string name;
  std::string description;
  std::vector<std::string> sources;
  std::string gpu_name;
  std::map<Dtype, core::FlopRate> peak;  // dense peak per dtype
  core::Bytes hbm_capacity;
  core::Bandwidth hbm_bandwidth;
  core::Bytes runtime_reserved;  // CUDA context and kernels a process holds before any tensor
  // GPU memory one NCCL communicator holds per rank once it has run a collective (protocol
  // buffers per channel and connected peer), for groups of 3+ ranks and for 2-rank groups
  // (pipeline neighbours, tied-embedding pairs). 0 where the profile has no measurement.
  core::Bytes nccl_comm_memory;
  core::Bytes nccl_pair_memory;
  // An all-to-all connects every peer of its group on every channel: GPU memory per peer.
  core::Bytes nccl_alltoall_peer_memory;
  int sm_count = 0;
  double tdp_watts = 0;  // board power (thermal design power); 0 where the profile does not give it
  int gpus_per_node = 8;
  std::vector<FabricTier> fabric;  // ordered from narrowest to widest; last spans the node
  bool has_topology = false;       // fabric derived from a PcieTopology
  PcieTopology topology;
  Network network;
  Host host;
  Efficiency efficiency;
  // A measured profile's reference GEMM (stepcast calibrate on CPUs): the shape and dtype of the
  // kernel by which calibration and validation read the machine's speed, and the median seconds
  // of its samples across the calibration (0: not measured). validate reads the machine's drift
  // since calibration against it.
  struct CalibrationReference {
    double m = 0, n = 0, k = 0;
    Dtype dtype = Dtype::kFp32;
    double seconds = 0;
  } calibration_reference;

  [[nodiscard]] core::FlopRate peak_for(Dtype d) const;   // throws UserError if absent
  [[nodiscard]] bool has_dtype(Dtype d) const { return peak.count(d) != 0; }
  [[nodiscard]] double gemm_max_for(Dtype d) const;
  // The GEMM shape model before the clock and measured corrections: gemm_max x r(m) r(n) r(k),
  // with r(x) = x / (x + gemm_half_dim) (1 when the half-dimension is 0).
  [[nodiscard]] double gemm_shape_efficiency(Dtype d, double m, double n, double k) const;
  // Share of the GPU a collective running beside compute takes (efficiency.collective_sms over
  // sm_count, at most 0.9); 0 without both.
  [[nodiscard]] double collective_compute_share() const {
    return sm_count > 0 ? std::min(0.9, efficiency.collective_sms / static_cast<double>(sm_count)) : 0.0;
  }
  // What one second of communication hidden behind compute adds to that compute, which runs at
  // (1 - share) meanwhile: share / (1 - share).
  [[nodiscard]] double collective_slowdown() const {
    const double share = collective_compute_share();
    return share / (1.0 - share);
  }
  // Tier a group of local GPU indices [lo, hi] must cross (narrowest domain holding both).
  [[nodiscard]] const FabricTier& tier_for_span(int lo, int hi) const;
  // Scale-out bandwidth available to one GPU when all GPUs of its node talk at once.
  // nodes: how many nodes the traffic spans (oversubscription applies above the leaf).
  [[nodiscard]] core::Bandwidth nic_bandwidth_per_gpu(int64_t nodes = 1) const;
  // One GPU's port into the node fabric of gpus_per_node GPUs: the fastest rate any collective
  // or transfer reaches on the tier that spans the node (the link intra-node traffic shares).
  [[nodiscard]] core::Bandwidth fabric_port_bandwidth(int64_t gpus_per_node) const;
};

// Reads a profile: a built-in name, or an object (optionally {"base": NAME, ...overrides}).
// {"path": "profile.json"} reads a profile file (relative to base_dir), e.g. one written by
// `stepcast calibrate`, or a file holding the {"base": NAME, ...overrides} form.
HardwareProfile parse_hardware(const core::Json& j, const std::string& path, core::Issues& issues,
                               const std::string& base_dir = "");
HardwareProfile builtin_hardware(const std::string& name);  // throws UserError listing choices
std::vector<std::string> builtin_hardware_names();
core::Json builtin_hardware_json(const std::string& name);

}  // namespace stepcast::hw
