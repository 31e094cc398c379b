#include "sim/cost/collectives.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace stepcast::cost {

using core::Bandwidth;
using core::Bytes;
using core::Duration;

const char* to_string(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllToAll: return "all_to_all";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kSendRecv: return "send_recv";
    case Collective::kScatter: return "scatter";
    case Collective::kGather: return "gather";
  }
  return "?";
}

std::optional<Collective> collective_from_name(const std::string& name) {
  // Spellings differ by case, separators and an NCCL prefix: all_reduce, allreduce, all-reduce,
  // AllReduce and ncclAllReduce are one operation.
  auto key = [](const std::string& s) {
    std::string k;
    for (char ch : s) {
      if (ch != '_' && ch != '-' && ch != ' ') k += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    }
    if (k.rfind("nccl", 0) == 0) k.erase(0, 4);
    return k == "all2all" ? std::string("alltoall") : k == "p2p" ? std::string("sendrecv") : k;
  };
  const std::string k = key(name);
  for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter, Collective::kAllToAll,
                       Collective::kBroadcast, Collective::kSendRecv, Collective::kScatter, Collective::kGather}) {
    if (k == key(to_string(c))) return c;
  }
  return std::nullopt;
}

double bus_factor(Collective c, int64_t n) {
  if (n <= 1) return 0.0;
  const double dn = static_cast<double>(n);
  switch (c) {
    case Collective::kAllReduce: return 2.0 * (dn - 1.0) / dn;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
    case Collective::kScatter:
    case Collective::kGather: return (dn - 1.0) / dn;
    case Collective::kBroadcast:
    case Collective::kSendRecv: return 1.0;
  }
  return 1.0;
}

int64_t ring_steps(Collective c, int64_t n) {
  if (n <= 1) return 0;
  switch (c) {
    case Collective::kAllReduce: return 2 * (n - 1);
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
    case Collective::kBroadcast: return n - 1;
    case Collective::kSendRecv:
    case Collective::kScatter:
    case Collective::kGather: return 1;
  }
  return n - 1;
}

Duration ring_time(Collective c, Bytes bytes, int64_t n, Bandwidth busbw, Duration alpha) {
  if (n <= 1 || bytes.value() <= 0.0) return Duration(0);
  return alpha * static_cast<double>(ring_steps(c, n)) + Bytes(bytes.value() * bus_factor(c, n)) / busbw;
}

namespace {

// Fraction of the plateau reached at `bytes`, interpolated in log(size).
double curve_fraction(const std::vector<std::pair<double, double>>& curve, double bytes) {
  if (bytes <= curve.front().first) {
    // Below the first point the time stays at the first point's time (latency floor).
    return curve.front().second * bytes / curve.front().first;
  }
  if (bytes >= curve.back().first) return curve.back().second;
  for (size_t i = 1; i < curve.size(); ++i) {
    if (bytes <= curve[i].first) {
      const double x0 = std::log(curve[i - 1].first);
      const double x1 = std::log(curve[i].first);
      const double w = (std::log(bytes) - x0) / (x1 - x0);
      return curve[i - 1].second + w * (curve[i].second - curve[i - 1].second);
    }
  }
  return curve.back().second;
}

Bandwidth plateau(Collective c, const hw::FabricTier& tier, int64_t n) {
  if (c == Collective::kSendRecv || c == Collective::kScatter || c == Collective::kGather || (c == Collective::kBroadcast && n <= 2)) {
    return tier.p2p_bandwidth;
  }
  // Ring collectives: on a full mesh a group smaller than the domain drives only its own links.
  const double share = tier.mesh_share(n);
  if (c == Collective::kAllReduce) return tier.allreduce_busbw * share;
  if (c == Collective::kReduceScatter) return tier.reduce_scatter_busbw * share;
  if (c == Collective::kBroadcast) return tier.broadcast_busbw * share;
  return tier.busbw * share;
}

}  // namespace

Duration tier_time(Collective c, Bytes bytes, int64_t n, const hw::FabricTier& tier) {
  if (n <= 1 || bytes.value() <= 0.0) return Duration(0);
  if (const auto it = tier.op_curves.find(to_string(c)); it != tier.op_curves.end()) {
    // A measured bus-bandwidth curve for this operation: time interpolated piecewise linearly
    // in log(time) against log(size), which follows both the latency floor (flat) and the
    // bandwidth regime (slope 1); below the first size the first time, above the last the
    // last bandwidth.
    const double bf = c == Collective::kSendRecv || c == Collective::kBroadcast ? 1.0 : bus_factor(c, n);
    const auto& cv = it->second;
    const double s = bytes.value();
    auto time_at = [&](size_t i) { return cv[i].first * bf / cv[i].second; };
    if (s <= cv.front().first) return Duration(time_at(0));
    if (s >= cv.back().first) return Duration(s * bf / cv.back().second);
    size_t i = 1;
    while (cv[i].first < s) ++i;
    const double w = (std::log(s) - std::log(cv[i - 1].first)) / (std::log(cv[i].first) - std::log(cv[i - 1].first));
    return Duration(std::exp(std::log(time_at(i - 1)) + w * (std::log(time_at(i)) - std::log(time_at(i - 1)))));
  }
  const Bandwidth top = plateau(c, tier, n);
  // Point-to-point transfers (send/recv, and scatter/gather, which NCCL runs as grouped sends
  // and receives) take at least the tier's point-to-point floor where the profile measured one:
  // the handshake between the peers, which overlaps the data movement rather than preceding it.
  const Duration p2p_floor = tier.p2p_latency ? *tier.p2p_latency + tier.latency : Duration(0);
  if (c == Collective::kSendRecv) return std::max(p2p_floor, tier.latency + bytes / top);
  // Rooted transfers: the root exchanges with every peer at once over its own link.
  if (c == Collective::kScatter || c == Collective::kGather) {
    return std::max(p2p_floor, tier.base_latency + tier.latency + Bytes(bytes.value() * bus_factor(c, n)) / top);
  }
  // A ring broadcast over more than two ranks is pipelined in chunks: each hop's latency hides
  // behind the transfer of other chunks, so the slower of the two sets the time.
  if (c == Collective::kBroadcast && n > 2 && tier.size_curve.empty()) {
    return std::max(tier.base_latency + tier.latency * static_cast<double>(n - 1), bytes / top);
  }
  if (tier.size_curve.empty()) return tier.base_latency + ring_time(c, bytes, n, top, tier.latency);
  const double f = curve_fraction(tier.size_curve, bytes.value());
  return Bytes(bytes.value() * bus_factor(c, n)) / Bandwidth(top.value() * f);
}

Duration collective_time(Collective c, Bytes bytes, const mesh::Placement& where, const hw::HardwareProfile& hw) {
  const int64_t n = where.size;
  if (n <= 1 || bytes.value() <= 0.0) return Duration(0);
  if (where.intra_node()) {
    return tier_time(c, bytes, n, hw.tier_for_span(where.local_lo, where.local_hi));
  }
  const int64_t g = std::max<int64_t>(1, where.ranks_per_node);
  const int64_t nodes = where.nodes;
  const hw::FabricTier& intra = hw.tier_for_span(where.local_lo, where.local_hi);
  const Bandwidth nic = hw.nic_bandwidth_per_gpu(where.nodes);
  const Duration a_net = hw.network.latency;
  const Bytes per_rail(bytes.value() / static_cast<double>(g));

  // NCCL's ring spans every rank of the group, rail-aligned: each node's ring traffic leaves
  // over its g NICs (1/g each) while the other hops run on the node fabric, and the ring's
  // chunks move over all hops at once, so the slower link type sets the bandwidth term
  // (pipelined, not an intra-node phase, then an inter-node phase, then another intra-node
  // phase). Every ring step waits for its slowest hop, a network one.
  const double dg = static_cast<double>(g);
  auto flat_ring = [&](Collective op) {
    const double moved = bytes.value() * bus_factor(op, n);  // per rank, over the whole ring
    const Duration t_nic = Bytes(moved / dg) / nic;
    const Duration t_fab = g > 1 ? Bytes(moved * (dg - 1.0) / dg) / (intra.busbw * intra.mesh_share(g)) : Duration(0);
    return a_net * static_cast<double>(ring_steps(op, n)) + std::max(t_nic, t_fab);
  };
  switch (c) {
    case Collective::kAllReduce: {
      // NCCL's double binary tree across nodes (2 log2(nodes) latency steps, every rank's rail
      // sends and receives its 1/g share twice) with a chain inside each node, pipelined too;
      // NCCL takes the faster of ring and tree.
      const double tree_steps = 2.0 * std::ceil(std::log2(static_cast<double>(nodes)));
      const Duration tree_net = Bytes(2.0 * per_rail.value()) / nic;
      const Duration tree_fab = g > 1 ? tier_time(Collective::kReduceScatter, bytes, g, intra) + tier_time(Collective::kAllGather, bytes, g, intra)
                                      : Duration(0);
      const Duration tree = a_net * tree_steps + std::max(tree_net, tree_fab);
      return std::min(flat_ring(c), tree);
    }
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      return flat_ring(c);
    case Collective::kAllToAll: {
      // Each rank sends S/n to every peer: (n-g)/n of S leaves the node over its NIC while
      // (g-1)/n stays on the fabric; the two run concurrently.
      const double dn = static_cast<double>(n);
      const Bytes off_node(bytes.value() * static_cast<double>(n - g) / dn);
      const Bytes on_node(bytes.value() * static_cast<double>(g - 1) / dn);
      const Duration t_net = a_net + off_node / nic;
      const Duration t_fab = g > 1 ? intra.latency + on_node / (intra.busbw * intra.mesh_share(g)) : Duration(0);
      return std::max(t_net, t_fab);
    }
    case Collective::kBroadcast: {
      // NCCL pipelines the broadcast in chunks along the same rail-aligned rings (one per
      // channel): every node receives the buffer once, spread over its g NICs, and passes it
      // on over the node fabric, so the slower of the two sets the time after the first
      // chunk's hops (nodes - 1 across the network, the rest inside nodes).
      const Duration t_nic = Bytes(bytes.value() / dg) / nic;
      const Duration t_fab = g > 1 ? Bytes(bytes.value() * (dg - 1.0) / dg) / (intra.broadcast_busbw * intra.mesh_share(g)) : Duration(0);
      return a_net * static_cast<double>(nodes - 1) + intra.latency * static_cast<double>(n - nodes) + std::max(t_nic, t_fab);
    }
    case Collective::kSendRecv:
      // Every GPU of a node sends at once (pipeline stages, context-parallel rings span nodes
      // rank by rank), so each gets its share of the node's NICs, as the simulated flows do.
      return a_net + bytes / nic;
    case Collective::kScatter:
    case Collective::kGather:
      return a_net + Bytes(bytes.value() * bus_factor(c, n)) / nic;
  }
  return Duration(0);
}

double algbw(Bytes bytes, Duration t) { return t.value() > 0 ? bytes.value() / t.value() : 0.0; }

double busbw(Collective c, Bytes bytes, int64_t n, Duration t) { return algbw(bytes, t) * bus_factor(c, n); }

double link_bytes(Collective c, Bytes bytes, const mesh::Placement& where) {
  const int64_t n = where.size;
  if (n <= 1 || bytes.value() <= 0.0) return 0.0;
  const double S = bytes.value();
  if (where.intra_node()) return c == Collective::kSendRecv ? S : S * bus_factor(c, n);
  const double g = static_cast<double>(std::max<int64_t>(1, where.ranks_per_node));
  switch (c) {
    case Collective::kAllReduce:
    case Collective::kAllGather:
    case Collective::kReduceScatter: return S / g * bus_factor(c, n);  // the flat ring's share of the node's egress
    case Collective::kAllToAll: return S * (static_cast<double>(n) - g) / static_cast<double>(n);
    case Collective::kScatter:
    case Collective::kGather: return S * bus_factor(c, n);
    case Collective::kBroadcast: return S / g;  // the node's one copy, over its g rails
    case Collective::kSendRecv: return S;
  }
  return S;
}

}  // namespace stepcast::cost
