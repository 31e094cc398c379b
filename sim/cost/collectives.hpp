// Collective communication costs (pure functions).
//
// Convention (nccl-tests): `bytes` is the full buffer of the operation: all-reduce in = out =
// S; all-gather S is the gathered output; reduce-scatter S is the input; all-to-all S is what
// one rank sends in total; broadcast and send/recv S is the payload.
// Ring algorithm per rank: all-reduce moves 2(n-1)/n*S in 2(n-1) steps, all-gather and
// reduce-scatter (n-1)/n*S in n-1 steps; time = steps*alpha + factor*S/busbw, where busbw is the
// bus bandwidth the link sustains (nccl-tests' busbw). A tier with a measured size curve uses
// busbw(S) = plateau * fraction(S) instead (log-size interpolation).
// Across nodes, all-reduce, all-gather and reduce-scatter run as NCCL's ring over all n ranks,
// rail-aligned: a node's ring traffic leaves over its g NICs (each rank's rail carries 1/g of
// it) while the remaining hops run on the node fabric, and since the ring's chunks move over
// every hop at once the slower link type sets the time (steps * network alpha + max(NIC term,
// fabric term)); all-reduce takes the faster of that ring and a double binary tree across nodes
// (2*log2(nodes) latency steps, 2 S/g per rail) pipelined with a chain inside each node.
#pragma once

#include <optional>
#include <string>

#include "sim/config/hardware.hpp"
#include "sim/core/units.hpp"
#include "sim/mesh/rank_mesh.hpp"

namespace stepcast::cost {

// kScatter / kGather are rooted one-way transfers: the root's own link carries (n-1)/n of S.
enum class Collective { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kBroadcast, kSendRecv, kScatter, kGather };
const char* to_string(Collective c);
// The inverse of to_string ("all_reduce", "send_recv", ...); nullopt for other names.
std::optional<Collective> collective_from_name(const std::string& name);

// Bytes each rank moves over its busiest link per byte of buffer (nccl-tests bus factor).
double bus_factor(Collective c, int64_t n);
// Latency steps of the ring algorithm.
int64_t ring_steps(Collective c, int64_t n);

// Alpha-beta ring time for n ranks on a link of bus bandwidth busbw and step latency alpha.
core::Duration ring_time(Collective c, core::Bytes bytes, int64_t n, core::Bandwidth busbw,
                         core::Duration alpha);

// Time inside one fabric tier (uses the tier's size curve when it has one).
core::Duration tier_time(Collective c, core::Bytes bytes, int64_t n, const hw::FabricTier& tier);

// Time of one collective over a group placed as `where` on hardware `hw`.
core::Duration collective_time(Collective c, core::Bytes bytes, const mesh::Placement& where,
                               const hw::HardwareProfile& hw);

// Algorithm bandwidth view of a measured or predicted time (bytes / time) and its bus bandwidth.
double algbw(core::Bytes bytes, core::Duration t);
double busbw(Collective c, core::Bytes bytes, int64_t n, core::Duration t);

// Bytes one rank moves over its busiest link during the collective: its NIC when the group
// spans nodes (the hierarchical algorithms send 1/g of the data per rank across nodes, g ranks
// of the group per node), its intra-node fabric port otherwise. The event engine turns this
// into a flow that shares the link with concurrent traffic.
double link_bytes(Collective c, core::Bytes bytes, const mesh::Placement& where);

}  // namespace stepcast::cost
