#include "sim/estimate/moe_routing.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace stepcast::estimate {

namespace {

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Standard normal from (seed, index), Box-Muller on two splitmix64 uniforms.
double normal(uint64_t seed, uint64_t index) {
  const uint64_t a = mix(seed * 0x100000001b3ULL ^ index);
  const uint64_t b = mix(a);
  const double u1 = (static_cast<double>(a >> 11) + 0.5) / 9007199254740992.0;
  const double u2 = (static_cast<double>(b >> 11) + 0.5) / 9007199254740992.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// Applies the capacity to per-expert token counts (in units of the balanced mean) and returns
// the layer's statistics.
ExpertLoad layer_load(std::vector<double> n, int64_t ep, double cap, bool pad) {
  const size_t E = n.size();
  const size_t per_rank = E / static_cast<size_t>(ep);
  double routed = 0, dropped = 0;
  for (double& x : n) {
    routed += x;
    if (cap > 0) {
      dropped += std::max(0.0, x - cap);
      x = pad ? cap : std::min(x, cap);
    }
  }
  ExpertLoad out;
  double busiest = 0;
  for (size_t r = 0; r < static_cast<size_t>(ep); ++r) {
    double load = 0;
    for (size_t e = r * per_rank; e < (r + 1) * per_rank; ++e) load += n[e];
    busiest = std::max(busiest, load);
  }
  out.busiest_rank_factor = busiest / static_cast<double>(per_rank);
  out.busiest_expert_factor = *std::max_element(n.begin(), n.end());
  out.dropped_fraction = routed > 0 ? dropped / routed : 0.0;
  return out;
}

}  // namespace

int64_t expert_capacity(double tokens, int64_t top_k, int64_t experts, double capacity_factor) {
  return static_cast<int64_t>(std::ceil(capacity_factor * tokens * static_cast<double>(top_k) / static_cast<double>(experts) - 1e-9));
}

ExpertLoad expert_load(const config::MoeRouting& r, int64_t experts, int64_t ep, double mean_tokens,
                       int64_t moe_layers) {
  const auto E = static_cast<size_t>(experts);
  // Capacity in units of the balanced mean (rounded up to whole tokens like the framework).
  double cap = 0;
  if (r.capacity_factor > 0 && mean_tokens > 0) {
    cap = std::ceil(r.capacity_factor * mean_tokens - 1e-9) / mean_tokens;
  }
  if (r.sigma <= 0) {
    // Balanced, or one expert at the given ratio and the rest sharing what is left equally.
    std::vector<double> n(E, 1.0);
    if (r.max_over_mean > 1.0 && E > 1) {
      const double top = std::min(r.max_over_mean, static_cast<double>(E));
      n[0] = top;
      for (size_t e = 1; e < E; ++e) n[e] = (static_cast<double>(E) - top) / static_cast<double>(E - 1);
    }
    return layer_load(std::move(n), ep, cap, r.pad_to_capacity);
  }
  // Seeded lognormal popularity, a fresh draw per MoE layer, normalised to E * mean tokens.
  ExpertLoad sum{0, 0, 0};
  const int64_t layers = std::max<int64_t>(1, moe_layers);
  for (int64_t l = 0; l < layers; ++l) {
    std::vector<double> n(E);
    double total = 0;
    for (size_t e = 0; e < E; ++e) {
      n[e] = std::exp(r.sigma * normal(r.seed, static_cast<uint64_t>(l) * E + e));
      total += n[e];
    }
    for (double& x : n) x *= static_cast<double>(E) / total;
    const ExpertLoad one = layer_load(std::move(n), ep, cap, r.pad_to_capacity);
    sum.busiest_rank_factor += one.busiest_rank_factor;
    sum.busiest_expert_factor += one.busiest_expert_factor;
    sum.dropped_fraction += one.dropped_fraction;
  }
  const double k = static_cast<double>(layers);
  return ExpertLoad{sum.busiest_rank_factor / k, sum.busiest_expert_factor / k, sum.dropped_fraction / k};
}

int64_t reachable_nodes(const model::MoeSpec& moe, int64_t ep, int64_t nodes, int64_t max_nodes_per_token) {
  int64_t c = std::max<int64_t>(1, nodes);
  if (max_nodes_per_token > 0) c = std::min(c, max_nodes_per_token);
  if (moe.groups > 0 && moe.group_topk > 0 && moe.group_topk < moe.groups && nodes > 0 && ep % nodes == 0 &&
      moe.num_experts % nodes == 0) {
    const int64_t per_node = moe.num_experts / nodes;
    const int64_t per_group = moe.num_experts / moe.groups;
    if (per_group % per_node == 0) {
      c = std::min(c, moe.group_topk * (per_group / per_node));
    } else if (per_node % per_group == 0) {
      c = std::min(c, moe.group_topk);
    }
  }
  return c;
}

}  // namespace stepcast::estimate
