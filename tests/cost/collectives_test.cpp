// Collective costs: ring bus factors and alpha-beta times (nccl-tests conventions), bus-bandwidth
// conversions, and which link a group uses (fabric tier inside a node, NIC across nodes).
#include "sim/cost/collectives.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "sim/config/hardware.hpp"
#include "sim/core/error.hpp"
#include "sim/core/json_reader.hpp"
#include "sim/mesh/rank_mesh.hpp"

namespace stepcast::cost {
namespace {

using core::Bandwidth;
using core::Bytes;
using core::Duration;

// Relative closeness for exact formulas evaluated in a different order.
void expect_rel(double got, double want, double rel = 1e-12) {
  EXPECT_NEAR(got, want, std::abs(want) * rel) << "got " << got << ", want " << want;
}

// Ring bus factor: all-reduce 2(N-1)/N, all-gather / reduce-scatter (N-1)/N.
TEST(Collectives, BusFactors) {
  for (int64_t n : {2, 4, 8, 16, 64}) {
    const double dn = static_cast<double>(n);
    EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllReduce, n), 2.0 * (dn - 1) / dn) << n;
    EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllGather, n), (dn - 1) / dn) << n;
    EXPECT_DOUBLE_EQ(bus_factor(Collective::kReduceScatter, n), (dn - 1) / dn) << n;
  }
  // A group of one moves nothing.
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllReduce, 1), 0.0);
}

// Ring steps: all-reduce 2(N-1) (reduce-scatter then all-gather), AG / RS N-1.
TEST(Collectives, RingSteps) {
  EXPECT_EQ(ring_steps(Collective::kAllReduce, 8), 14);
  EXPECT_EQ(ring_steps(Collective::kAllGather, 8), 7);
  EXPECT_EQ(ring_steps(Collective::kReduceScatter, 8), 7);
  EXPECT_EQ(ring_steps(Collective::kAllReduce, 1), 0);
}

// Ring all-reduce: T = 2(N-1)/N * S/B + 2(N-1) * alpha.
TEST(Collectives, RingAllReduceTime) {
  const Bytes s(256e6);
  const Bandwidth b(100e9);
  const Duration alpha(5e-6);
  for (int64_t n : {2, 4, 8, 32}) {
    const double dn = static_cast<double>(n);
    const double want = 2.0 * (dn - 1) / dn * s.value() / b.value() + 2.0 * (dn - 1) * alpha.value();
    expect_rel(ring_time(Collective::kAllReduce, s, n, b, alpha).value(), want);
  }
}

// Ring all-gather / reduce-scatter: T = (N-1)/N * S/B + (N-1) * alpha; an all-reduce costs the
// same as one reduce-scatter plus one all-gather.
TEST(Collectives, RingAllGatherReduceScatterTime) {
  const Bytes s(64e6);
  const Bandwidth b(50e9);
  const Duration alpha(2e-6);
  const int64_t n = 8;
  const double want = 7.0 / 8.0 * s.value() / b.value() + 7.0 * alpha.value();
  expect_rel(ring_time(Collective::kAllGather, s, n, b, alpha).value(), want);
  expect_rel(ring_time(Collective::kReduceScatter, s, n, b, alpha).value(), want);
  expect_rel(ring_time(Collective::kAllReduce, s, n, b, alpha).value(),
             (ring_time(Collective::kReduceScatter, s, n, b, alpha) + ring_time(Collective::kAllGather, s, n, b, alpha)).value());
}

// Latency floor: a tiny message costs about the alpha steps; large messages are bandwidth bound.
TEST(Collectives, SmallMessagesHitLatencyFloor) {
  const Bandwidth b(100e9);
  const Duration alpha(5e-6);
  const double tiny = ring_time(Collective::kAllReduce, Bytes(8), 8, b, alpha).value();
  EXPECT_NEAR(tiny, 14 * 5e-6, 1e-9);
  const double big = ring_time(Collective::kAllReduce, Bytes(1e9), 8, b, alpha).value();
  EXPECT_GT(1.75e9 / 100e9 / big, 0.99);  // > 99% of time is the bandwidth term
}

// nccl-tests: algbw = S / t; busbw = algbw * bus factor. Inverting ring_time's bandwidth term
// recovers the link bandwidth.
TEST(Collectives, BusBandwidthConversions) {
  const Bytes s(1e9);
  const Duration t(0.01);
  EXPECT_DOUBLE_EQ(algbw(s, t), 1e11);
  EXPECT_DOUBLE_EQ(busbw(Collective::kAllReduce, s, 8, t), 1e11 * 2.0 * 7.0 / 8.0);
  EXPECT_DOUBLE_EQ(busbw(Collective::kAllGather, s, 8, t), 1e11 * 7.0 / 8.0);
  EXPECT_DOUBLE_EQ(busbw(Collective::kReduceScatter, s, 4, t), 1e11 * 3.0 / 4.0);
  // With zero latency, the busbw of a ring_time prediction is the link bandwidth itself.
  const Bandwidth link(123e9);
  for (auto c : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter}) {
    const Duration pt = ring_time(c, s, 16, link, Duration(0));
    expect_rel(busbw(c, s, 16, pt), link.value());
  }
}

// Intra-node groups run on the fabric tier of the narrowest domain that holds them: on the
// PCIe box a pair under one switch uses the switch tier, a group crossing sockets uses the
// socket link (one slow tier caps the whole ring).
TEST(Collectives, IntraNodeUsesFabricTier) {
  const auto hw = hw::builtin_hardware("rtx-pro-6000-pcie-8x");
  ASSERT_EQ(hw.fabric.size(), 3u);
  const Bytes s(100e6);
  const auto pair = mesh::place({0, 1}, hw.gpus_per_node);
  ASSERT_TRUE(pair.intra_node());
  const auto& sw = hw.fabric[0];
  expect_rel(collective_time(Collective::kAllReduce, s, pair, hw).value(),
             sw.base_latency.value() + ring_time(Collective::kAllReduce, s, 2, sw.allreduce_busbw, sw.latency).value());
  const auto four = mesh::place({0, 1, 2, 3}, hw.gpus_per_node);
  const auto& sock = hw.fabric[1];
  expect_rel(collective_time(Collective::kAllGather, s, four, hw).value(),
             sock.base_latency.value() + ring_time(Collective::kAllGather, s, 4, sock.busbw, sock.latency).value());
  const auto eight = mesh::place({0, 1, 2, 3, 4, 5, 6, 7}, hw.gpus_per_node);
  const auto& link = hw.fabric[2];
  expect_rel(collective_time(Collective::kAllReduce, s, eight, hw).value(),
             link.base_latency.value() + ring_time(Collective::kAllReduce, s, 8, link.allreduce_busbw, link.latency).value());
  // Per-op plateaus: reduce-scatter has its own; a ring broadcast over more than two ranks is
  // pipelined (latency hidden behind the transfer); rooted scatter moves (n-1)/n of S at p2p speed.
  expect_rel(collective_time(Collective::kReduceScatter, s, eight, hw).value(),
             link.base_latency.value() + ring_time(Collective::kReduceScatter, s, 8, link.reduce_scatter_busbw, link.latency).value());
  expect_rel(collective_time(Collective::kBroadcast, s, eight, hw).value(), s.value() / link.broadcast_busbw.value());
  expect_rel(collective_time(Collective::kScatter, s, eight, hw).value(),
             link.base_latency.value() + link.latency.value() + s.value() * 7.0 / 8.0 / link.p2p_bandwidth.value());
  // A pair that straddles the socket boundary pays the slow tier.
  const auto straddle = mesh::place({3, 4}, hw.gpus_per_node);
  EXPECT_GT(collective_time(Collective::kAllReduce, s, straddle, hw).value(),
            collective_time(Collective::kAllReduce, s, pair, hw).value());
  // The node's fabric, not the NIC, carries an H100 all-reduce within a node.
  const auto h100 = hw::builtin_hardware("h100-sxm");
  const auto node = mesh::place({0, 1, 2, 3, 4, 5, 6, 7}, 8);
  expect_rel(collective_time(Collective::kAllReduce, s, node, h100).value(),
             tier_time(Collective::kAllReduce, s, 8, h100.fabric.back()).value());
}

// Two ranks on different nodes talk over the NIC: per-GPU scale-out bandwidth (line rate x
// efficiency x NICs / GPUs) and the network latency; for N=2 the ring (2 steps, S/B) beats the
// tree.
TEST(Collectives, CrossNodePairUsesNic) {
  const auto hw = hw::builtin_hardware("h100-sxm");
  const auto pair = mesh::place({0, 8}, hw.gpus_per_node);
  ASSERT_FALSE(pair.intra_node());
  ASSERT_EQ(pair.nodes, 2);
  const double nic = hw.nic_bandwidth_per_gpu().value();
  EXPECT_DOUBLE_EQ(nic, 400e9 / 8 * 0.85);  // one 400 Gb/s NIC per GPU at 85% efficiency
  const Bytes s(100e6);
  const double want = 2.0 * hw.network.latency.value() + s.value() / nic;
  expect_rel(collective_time(Collective::kAllReduce, s, pair, hw).value(), want);
  expect_rel(collective_time(Collective::kAllGather, s, pair, hw).value(),
             hw.network.latency.value() + 0.5 * s.value() / nic);
  // Much slower than the same pair inside one node.
  const auto local = mesh::place({0, 1}, hw.gpus_per_node);
  EXPECT_GT(collective_time(Collective::kAllReduce, s, pair, hw).value(),
            3.0 * collective_time(Collective::kAllReduce, s, local, hw).value());
}

// Inter-node rings grow slower as they grow (latency steps): a fixed per-GPU message takes
// longer on 64 nodes than on 4.
TEST(Collectives, InterNodeTimeGrowsWithRingSize) {
  const auto hw = hw::builtin_hardware("h100-sxm");
  auto dp_group = [](int64_t nodes) {
    std::vector<int64_t> r;
    for (int64_t i = 0; i < nodes; ++i) r.push_back(i * 8);
    return r;
  };
  const Bytes s(25e6);
  const double t4 = collective_time(Collective::kAllReduce, s, mesh::place(dp_group(4), 8), hw).value();
  const double t64 = collective_time(Collective::kAllReduce, s, mesh::place(dp_group(64), 8), hw).value();
  EXPECT_GT(t64, t4);
}

// A full mesh (xGMI on MI300X, NVLink inside a quad GH200 node) has no switch: the profile's
// ring plateau is the whole domain's, all span - 1 links of each GPU; a smaller group has only
// the links among its GPUs. A switched fabric (NVSwitch) gives any group the same plateau.
TEST(Collectives, FullMeshGroupsDriveOnlyTheirOwnLinks) {
  const Bytes s(1073741824.0);
  const auto mi = hw::builtin_hardware("mi300x");
  const auto& xgmi = mi.fabric.back();
  ASSERT_TRUE(xgmi.full_mesh);
  const auto pair = mesh::place({0, 1}, mi.gpus_per_node);
  const auto four = mesh::place({0, 1, 2, 3}, mi.gpus_per_node);
  const auto eight = mesh::place({0, 1, 2, 3, 4, 5, 6, 7}, mi.gpus_per_node);
  expect_rel(collective_time(Collective::kAllGather, s, eight, mi).value(),
             ring_time(Collective::kAllGather, s, 8, xgmi.busbw, xgmi.latency).value());
  // Two GPUs: one of the seven links (48 GB/s); four: three.
  expect_rel(collective_time(Collective::kAllGather, s, pair, mi).value(),
             ring_time(Collective::kAllGather, s, 2, xgmi.busbw * (1.0 / 7.0), xgmi.latency).value());
  expect_rel(collective_time(Collective::kAllReduce, s, four, mi).value(),
             ring_time(Collective::kAllReduce, s, 4, xgmi.allreduce_busbw * (3.0 / 7.0), xgmi.latency).value());
  EXPECT_NEAR(xgmi.busbw.value() / 7.0, xgmi.p2p_bandwidth.value(), 1e-6 * xgmi.p2p_bandwidth.value());
  // An all-to-all inside the pair moves its half over the one link.
  expect_rel(collective_time(Collective::kAllToAll, s, pair, mi).value(),
             xgmi.latency.value() + s.value() / 2.0 / xgmi.p2p_bandwidth.value(), 1e-6);

  // The quad GH200 node: three NVLink4 links per GPU, 370 GB/s over all of them, 123 GB/s a pair.
  const auto gh = hw::builtin_hardware("gh200");
  ASSERT_EQ(gh.gpus_per_node, 4);
  const auto& nvl = gh.fabric.back();
  ASSERT_TRUE(nvl.full_mesh);
  const auto gpair = mesh::place({0, 1}, gh.gpus_per_node);
  const auto gfour = mesh::place({0, 1, 2, 3}, gh.gpus_per_node);
  const double t4 = collective_time(Collective::kAllReduce, s, gfour, gh).value();
  const double t2 = collective_time(Collective::kAllReduce, s, gpair, gh).value();
  // 1 GiB reaches 0.97 of the plateau on the NVLink4 size curve.
  expect_rel(busbw(Collective::kAllReduce, s, 4, Duration(t4)), 370e9 * 0.97);
  expect_rel(busbw(Collective::kAllReduce, s, 2, Duration(t2)), 370e9 / 3.0 * 0.97);
  // Across quad nodes a rank's ring traffic inside the node has only the links among the
  // node's ranks of the group: two per node leave one link, slower than the 200 Gb/s NIC here
  // only when the node's share of the ring is large, which it is not (1/2 on the NIC).
  const auto two_by_two = mesh::place({0, 1, 4, 5}, gh.gpus_per_node);
  ASSERT_EQ(two_by_two.nodes, 2);
  const double moved = s.value() * 3.0 / 4.0;
  const double t_nic = moved / 2.0 / gh.nic_bandwidth_per_gpu(2).value();
  const double t_fab = moved / 2.0 / (nvl.busbw.value() / 3.0);
  ASSERT_GT(t_nic, t_fab);
  expect_rel(collective_time(Collective::kAllGather, s, two_by_two, gh).value(), 3.0 * gh.network.latency.value() + t_nic);

  // NVSwitch: a pair of H100s rings at the node's plateau.
  const auto h = hw::builtin_hardware("h100-sxm");
  ASSERT_FALSE(h.fabric.back().full_mesh);
  const auto hpair = mesh::place({0, 1}, h.gpus_per_node);
  const auto height = mesh::place({0, 1, 2, 3, 4, 5, 6, 7}, h.gpus_per_node);
  EXPECT_NEAR(busbw(Collective::kAllGather, s, 2, collective_time(Collective::kAllGather, s, hpair, h)),
              busbw(Collective::kAllGather, s, 8, collective_time(Collective::kAllGather, s, height, h)),
              0.02 * h.fabric.back().busbw.value());
}

// Whole nodes across the network: NCCL's ring runs over all 32 ranks, each rank's rail carries
// 1/8 of its node's ring traffic while the other hops run on NVLink at the same time, so the
// slower of the two sets the time (the NIC here), not their sum. Published check: 4 GiB on 4 x 8
// H200 (AWS p5en) ran at 364.9 GB/s busbw, 22.8 ms; the model gives 24.8 ms, inside the 15% the
// simulator is held to for collectives.
TEST(Collectives, CrossNodeRingIsPipelinedOverNicAndFabric) {
  const auto hw = hw::builtin_hardware("h200");
  std::vector<int64_t> ranks;
  for (int64_t r = 0; r < 32; ++r) ranks.push_back(r);
  const auto group = mesh::place(ranks, 8);
  ASSERT_EQ(group.nodes, 4);
  const Bytes s(4294967296.0);
  const double nic = hw.nic_bandwidth_per_gpu().value();
  const double moved = s.value() * 2.0 * 31.0 / 32.0;
  const double t_nic = moved / 8.0 / nic;
  const double t_fab = moved * 7.0 / 8.0 / hw.fabric.back().busbw.value();
  ASSERT_GT(t_nic, t_fab);
  const double ring = 62.0 * hw.network.latency.value() + t_nic;
  expect_rel(collective_time(Collective::kAllReduce, s, group, hw).value(), ring);
  EXPECT_NEAR(collective_time(Collective::kAllReduce, s, group, hw).value(), 22.8e-3, 0.15 * 22.8e-3);
  // All-gather: the same ring with half the traffic and n - 1 steps.
  expect_rel(collective_time(Collective::kAllGather, s, group, hw).value(),
             31.0 * hw.network.latency.value() + s.value() * 31.0 / 32.0 / 8.0 / nic);
  // What a rank sends over its NIC: its 1/8 of the node's ring traffic.
  expect_rel(link_bytes(Collective::kAllReduce, s, group), moved / 8.0);
  // Broadcast pipelines along the same rings: each node takes the buffer in once over its 8
  // rails (not all of it through one NIC), after 3 network hops and 28 NVLink hops.
  const auto& nvl = hw.fabric.back();
  expect_rel(collective_time(Collective::kBroadcast, s, group, hw).value(),
             3.0 * hw.network.latency.value() + 28.0 * nvl.latency.value() + s.value() / 8.0 / nic);
  expect_rel(link_bytes(Collective::kBroadcast, s, group), s.value() / 8.0);
  EXPECT_LT(collective_time(Collective::kBroadcast, s, group, hw).value(), 1.1 * collective_time(Collective::kAllGather, s, group, hw).value());
  // One rank per node: the whole buffer over each rank's one NIC.
  const auto spread = mesh::place({0, 8, 16, 24}, 8);
  expect_rel(collective_time(Collective::kBroadcast, s, spread, hw).value(), 3.0 * hw.network.latency.value() + s.value() / nic);
}

// A group of one, or an empty message, costs nothing.
TEST(Collectives, TrivialCasesAreFree) {
  const auto hw = hw::builtin_hardware("h100-sxm");
  EXPECT_DOUBLE_EQ(collective_time(Collective::kAllReduce, Bytes(1e9), mesh::place({3}, 8), hw).value(), 0.0);
  EXPECT_DOUBLE_EQ(collective_time(Collective::kAllReduce, Bytes(0), mesh::place({0, 1}, 8), hw).value(), 0.0);
}

// PCIe topology: a ring spanning both sockets is capped by the socket link; one inside a
// socket runs at the PCIe ring rate; rooted transfers are bounded by the root's own port.
TEST(Topology, SocketLinkCapsRingsNotRootedTransfers) {
  const hw::HardwareProfile hw = hw::builtin_hardware("rtx-pro-6000-pcie-8x");
  ASSERT_TRUE(hw.has_topology);
  const auto& t = hw.topology;
  ASSERT_LT(t.socket_link.value(), t.ring_bandwidth.value());
  const auto& node = hw.tier_for_span(0, 7);
  const auto& socket = hw.tier_for_span(0, 3);
  EXPECT_DOUBLE_EQ(node.busbw.value(), t.socket_link.value());
  EXPECT_DOUBLE_EQ(socket.busbw.value(), t.ring_bandwidth.value());
  // Reductions through the socket link run at its reduce efficiency; an all-reduce is the
  // harmonic mean of its reduce-scatter and all-gather phases.
  EXPECT_DOUBLE_EQ(node.reduce_scatter_busbw.value(), t.socket_link.value() * t.socket_reduce_efficiency);
  expect_rel(node.allreduce_busbw.value(), 2.0 / (1.0 / node.reduce_scatter_busbw.value() + 1.0 / node.busbw.value()));
  // 1 GiB: the 8-rank all-gather takes 7/8 GiB over the socket link; a scatter from rank 0
  // pushes the same 7/8 GiB through rank 0's PCIe port, more than twice as fast.
  mesh::Placement eight{8, 1, 8, 0, 7};
  const Bytes gib(1073741824.0);
  const double ag = collective_time(Collective::kAllGather, gib, eight, hw).value();
  const double sc = collective_time(Collective::kScatter, gib, eight, hw).value();
  expect_rel(ag, gib.value() * 7.0 / 8.0 / t.socket_link.value(), 1e-3);
  expect_rel(sc, gib.value() * 7.0 / 8.0 / t.gpu_link.value(), 1e-3);
  EXPECT_GT(ag, 2.0 * sc);
}

// The 8-card PCIe server profiles reuse the lab machine's topology: at Gen5 (h100-pcie-8x) its
// measured tiers as they are; at Gen4 (a100-pcie-80gb-8x, l40s-pcie-8x) the GPU-side rates
// halved, so a ring across the sockets is bound by PCIe peer-to-peer, no longer by the socket
// link, and a 1 GiB all-gather over the node takes 7/8 GiB at the Gen4 ring rate.
TEST(Topology, PcieServerProfilesScaleTheLabLinks) {
  const hw::HardwareProfile lab = hw::builtin_hardware("rtx-pro-6000-pcie-8x");
  const hw::HardwareProfile h100 = hw::builtin_hardware("h100-pcie-8x");
  ASSERT_TRUE(h100.has_topology);
  ASSERT_EQ(h100.fabric.size(), lab.fabric.size());
  for (size_t i = 0; i < lab.fabric.size(); ++i) {
    EXPECT_DOUBLE_EQ(h100.fabric[i].busbw.value(), lab.fabric[i].busbw.value()) << i;
    EXPECT_DOUBLE_EQ(h100.fabric[i].allreduce_busbw.value(), lab.fabric[i].allreduce_busbw.value()) << i;
  }
  mesh::Placement eight{8, 1, 8, 0, 7};
  const Bytes gib(1073741824.0);
  for (const char* name : {"a100-pcie-80gb-8x", "l40s-pcie-8x"}) {
    const hw::HardwareProfile g4 = hw::builtin_hardware(name);
    ASSERT_TRUE(g4.has_topology) << name;
    const auto& t = g4.topology;
    expect_rel(t.gpu_link.value(), lab.topology.gpu_link.value() / 2.0);
    expect_rel(t.ring_bandwidth.value(), lab.topology.ring_bandwidth.value() / 2.0);
    ASSERT_GT(t.socket_link.value() * t.socket_reduce_efficiency, t.ring_bandwidth.value());
    const auto& node = g4.tier_for_span(0, 7);
    EXPECT_DOUBLE_EQ(node.busbw.value(), t.ring_bandwidth.value()) << name;
    EXPECT_DOUBLE_EQ(node.allreduce_busbw.value(), t.ring_bandwidth.value()) << name;
    expect_rel(collective_time(Collective::kAllGather, gib, eight, g4).value(), gib.value() * 7.0 / 8.0 / t.ring_bandwidth.value(), 1e-3);
    // The lab's Gen5 node is capped by its socket link, so Gen4 is slower by 19.2 / 10.1, not 2.
    expect_rel(collective_time(Collective::kAllGather, gib, eight, g4).value() / collective_time(Collective::kAllGather, gib, eight, lab).value(),
               lab.topology.socket_link.value() / t.ring_bandwidth.value(), 1e-3);
  }
}

// Point-to-point floor: scatter, gather and send/recv take at least the profile's measured
// point-to-point handshake (plus the step latency), which overlaps the data movement, so small
// transfers sit at the floor and large ones are unchanged; profiles without the measurement
// have no floor.
TEST(Topology, PointToPointTransfersTakeTheHandshakeFloor) {
  const hw::HardwareProfile hw = hw::builtin_hardware("rtx-pro-6000-pcie-8x");
  ASSERT_TRUE(hw.topology.p2p_latency.has_value());
  const double p2p = hw.topology.p2p_latency->value();
  const auto pair = mesh::place({0, 1}, hw.gpus_per_node);
  const auto& sw = hw.tier_for_span(0, 1);
  for (auto c : {Collective::kScatter, Collective::kGather, Collective::kSendRecv}) {
    expect_rel(collective_time(c, Bytes(4096), pair, hw).value(), p2p + sw.latency.value());
  }
  // The floor is above a ring operation's launch and step latency at the same size.
  EXPECT_GT(collective_time(Collective::kGather, Bytes(4096), pair, hw).value(),
            collective_time(Collective::kAllGather, Bytes(4096), pair, hw).value());
  // At 1 GiB the transfer dominates: the root's port carries (n-1)/n of S.
  mesh::Placement eight{8, 1, 8, 0, 7};
  const auto& node = hw.tier_for_span(0, 7);
  const Bytes gib(1073741824.0);
  expect_rel(collective_time(Collective::kScatter, gib, eight, hw).value(),
             node.base_latency.value() + node.latency.value() + gib.value() * 7.0 / 8.0 / node.p2p_bandwidth.value());
  // Eight ranks cross the socket link: its step latency adds to the floor.
  expect_rel(collective_time(Collective::kGather, Bytes(4096), eight, hw).value(), p2p + node.latency.value());
  // No measured floor: a small send is its step latency plus the bytes.
  const auto h100 = hw::builtin_hardware("h100-sxm");
  const auto& nv = h100.fabric.back();
  ASSERT_FALSE(nv.p2p_latency.has_value());
  expect_rel(collective_time(Collective::kSendRecv, Bytes(4096), mesh::place({0, 1}, 8), h100).value(),
             nv.latency.value() + 4096.0 / nv.p2p_bandwidth.value());
}

// A send between nodes gets its GPU's share of the node's NICs: every GPU of a node sends at
// once (pipeline stages, context-parallel rings), as the simulated flows share the NIC links.
// Four 100 Gb/s NICs for eight GPUs (Jean Zay's Omni-Path) give each 50 Gb/s; eight NICs
// give each a whole one.
TEST(Topology, SendsBetweenNodesShareTheNodesNics) {
  core::Json j = hw::builtin_hardware_json("a100-sxm-80gb");
  j["name"] = "a100-four-nics";
  j["network"]["nic_bandwidth"] = "100Gb/s";
  j["network"]["nics_per_node"] = 4;
  core::Issues issues;
  const hw::HardwareProfile four = hw::parse_hardware(j, "$.hardware", issues);
  ASSERT_TRUE(issues.empty()) << issues.lines().front();
  const auto pair = mesh::place({0, 8}, 8);  // one rank on each of two nodes
  ASSERT_FALSE(pair.intra_node());
  const Bytes big(1e9);
  const double eff = four.network.efficiency;
  expect_rel(collective_time(Collective::kSendRecv, big, pair, four).value(), four.network.latency.value() + 1e9 / (100e9 / 8 * 4 / 8 * eff));
  j["network"]["nics_per_node"] = 8;
  core::Issues ok;
  const hw::HardwareProfile eight = hw::parse_hardware(j, "$.hardware", ok);
  ASSERT_TRUE(ok.empty());
  expect_rel(collective_time(Collective::kSendRecv, big, pair, eight).value(), eight.network.latency.value() + 1e9 / (100e9 / 8 * eff));
}

// Fabric tiers given as a list take the same point-to-point floor key.
TEST(Topology, FabricTierReadsThePointToPointFloor) {
  core::Json j = hw::builtin_hardware_json("h100-sxm");
  j["name"] = "h100-with-floor";
  j["node"]["fabric"][0]["p2p_latency"] = "20us";
  core::Issues issues;
  const hw::HardwareProfile hw = hw::parse_hardware(j, "$.hardware", issues);
  ASSERT_TRUE(issues.empty()) << issues.lines().front();
  ASSERT_TRUE(hw.fabric.front().p2p_latency.has_value());
  EXPECT_DOUBLE_EQ(hw.fabric.front().p2p_latency->value(), 20e-6);
  const auto pair = mesh::place({0, 1}, 8);
  expect_rel(collective_time(Collective::kSendRecv, Bytes(4096), pair, hw).value(), 20e-6 + hw.fabric.front().latency.value());
  j["node"]["fabric"][0]["p2p_latency"] = "-1us";
  core::Issues bad;
  (void)hw::parse_hardware(j, "$.hardware", bad);
  ASSERT_FALSE(bad.empty());
  EXPECT_NE(bad.lines().front().find("$.hardware.node.fabric[0].p2p_latency"), std::string::npos) << bad.lines().front();
}

TEST(Topology, FabricAndTopologyTogetherIsAnError) {
  core::Json j = hw::builtin_hardware_json("rtx-pro-6000-pcie-8x");
  j["node"]["fabric"] = core::Json::array({{{"name", "x"}, {"span", 8}, {"busbw", "20GB/s"}}});
  core::Issues issues;
  (void)hw::parse_hardware(j, "$.hardware", issues);
  ASSERT_FALSE(issues.empty());
  std::string all;
  for (const auto& l : issues.lines()) all += l + "\n";
  EXPECT_NE(all.find("$.hardware.node.fabric"), std::string::npos) << all;
}

// Oversubscription applies above the leaf: a ring over 4 nodes under one leaf runs at full NIC
// bandwidth, one over 8 nodes crosses the spine at 1/oversubscription.
TEST(Topology, OversubscriptionAboveTheLeaf) {
  hw::HardwareProfile hw = hw::builtin_hardware("h100-sxm");
  hw.network.oversubscription = 2.0;
  hw.network.nodes_per_leaf = 4;
  EXPECT_DOUBLE_EQ(hw.nic_bandwidth_per_gpu(4).value(), 2.0 * hw.nic_bandwidth_per_gpu(8).value());
  const Bytes big(4e9);
  // One rank per node: the ring's bytes grow from 3/4 to 7/8 of the data and the bandwidth
  // halves, so the time grows 2 * (7/8) / (3/4) = 2.33x (less a little latency).
  mesh::Placement four{4, 4, 1, 0, 0}, eight{8, 8, 1, 0, 0};
  const double ratio = collective_time(Collective::kAllGather, big, eight, hw).value() /
                       collective_time(Collective::kAllGather, big, four, hw).value();
  EXPECT_NEAR(ratio, 2.0 * (7.0 / 8.0) / (3.0 / 4.0), 0.01);
}

// Published tables spell collectives many ways; they name one operation.
TEST(Collectives, NamesAcrossSpellings) {
  for (const char* s : {"all_reduce", "allreduce", "all-reduce", "AllReduce", "ncclAllReduce"}) {
    EXPECT_EQ(collective_from_name(s), Collective::kAllReduce) << s;
  }
  EXPECT_EQ(collective_from_name("ReduceScatter"), Collective::kReduceScatter);
  EXPECT_EQ(collective_from_name("allgather"), Collective::kAllGather);
  EXPECT_EQ(collective_from_name("all2all"), Collective::kAllToAll);
  EXPECT_EQ(collective_from_name("sendrecv"), Collective::kSendRecv);
  EXPECT_EQ(collective_from_name("reduce"), std::nullopt);  // rooted reduce: not modelled
  EXPECT_EQ(collective_from_name("zz"), std::nullopt);
}

}  // namespace
}  // namespace stepcast::cost
