#include "sim/plan/split.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "sim/cost/collectives.hpp"
#include "sim/estimate/estimate.hpp"
#include "sim/estimate/workload.hpp"
#include "sim/core/error.hpp"
#include "sim/memory/ledger.hpp"

namespace stepcast::plan {

namespace {
// The fewest layers virtual stage v of n holds: the first and the last, which also hold the
// embedding and the output layer, may hold none.
int64_t fewest_layers(size_t v, size_t n) { return v == 0 || v + 1 == n ? 0 : 1; }
}  // namespace

std::vector<int64_t> min_max_split(const std::vector<double>& weights, const std::vector<double>& extra, int64_t stages,
                                   const std::vector<int64_t>& max_layers) {
  const auto n = static_cast<int64_t>(weights.size());
  if (stages < 1 || static_cast<int64_t>(extra.size()) != stages || n < std::max<int64_t>(0, stages - 2)) return {};
  if (!max_layers.empty() && static_cast<int64_t>(max_layers.size()) != stages) return {};
  std::vector<double> prefix(static_cast<size_t>(n + 1), 0.0);
  for (int64_t i = 0; i < n; ++i) prefix[static_cast<size_t>(i + 1)] = prefix[static_cast<size_t>(i)] + weights[static_cast<size_t>(i)];
  const double inf = std::numeric_limits<double>::infinity();
  const auto V = static_cast<size_t>(stages), N = static_cast<size_t>(n + 1);
  // cost of group g holding layers [j, i)
  auto cost = [&](size_t g, size_t j, size_t i) { return prefix[i] - prefix[j] + extra[g]; };
  // The fewest layers group g holds (middle groups hold a layer).
  auto min_size = [&](size_t g) { return static_cast<size_t>(fewest_layers(g, V)); };
  // The smallest j group g may start at when it ends at i (its cap).
  auto first_j = [&](size_t g, size_t i) -> size_t {
    if (max_layers.empty()) return 0;
    const auto most = static_cast<size_t>(std::max<int64_t>(0, max_layers[g]));
    return i > most ? i - most : 0;
  };
  auto close = [](double a, double b) { return std::abs(a - b) <= 1e-12 * std::max(std::abs(a), std::abs(b)); };

  // Pass 1: the smallest largest group cost over the first g + 1 groups ending at layer i.
  std::vector<std::vector<double>> worst(V, std::vector<double>(N, inf));
  for (size_t i = 0; i < N; ++i) worst[0][i] = (V == 1 && i + 1 != N) || first_j(0, i) > 0 ? inf : cost(0, 0, i);
  for (size_t g = 1; g < V; ++g) {
    const size_t lo_i = g + 1 == V ? N - 1 : 0;
    for (size_t i = lo_i; i < N; ++i) {
      double best = inf;
      for (size_t j = first_j(g, i); j + min_size(g) <= i; ++j) {
        if (worst[g - 1][j] == inf) continue;
        best = std::min(best, std::max(worst[g - 1][j], cost(g, j, i)));
      }
      worst[g][i] = best;
    }
  }
  const double limit = worst[V - 1][N - 1];
  if (limit == inf) return {};
  const double allowed = limit + 1e-12 * std::abs(limit);

  // Pass 2: among splits whose groups all stay within that cost, the smallest sum of squares.
  std::vector<std::vector<double>> squares(V, std::vector<double>(N, inf));
  std::vector<std::vector<size_t>> from(V, std::vector<size_t>(N, 0));
  for (size_t i = 0; i < N; ++i) {
    const double c = cost(0, 0, i);
    if (c <= allowed && (V > 1 || i + 1 == N) && first_j(0, i) == 0) squares[0][i] = c * c;
  }
  for (size_t g = 1; g < V; ++g) {
    const size_t lo_i = g + 1 == V ? N - 1 : 0;
    for (size_t i = lo_i; i < N; ++i) {
      double best = inf;
      size_t arg = 0;
      for (size_t j = first_j(g, i); j + min_size(g) <= i; ++j) {
        if (squares[g - 1][j] == inf) continue;
        const double c = cost(g, j, i);
        if (c > allowed) continue;
        const double s = squares[g - 1][j] + c * c;
        // Ties (within rounding) keep the smaller j: this group, and so the later ones, hold more.
        if (best == inf || (s < best && !close(s, best))) {
          best = s;
          arg = j;
        }
      }
      squares[g][i] = best;
      from[g][i] = arg;
    }
  }
  if (squares[V - 1][N - 1] == inf) return {};
  std::vector<int64_t> out(V, 0);
  size_t i = N - 1;
  for (size_t g = V - 1; g > 0; --g) {
    const size_t j = from[g][i];
    out[g] = static_cast<int64_t>(i - j);
    i = j;
  }
  out[0] = static_cast<int64_t>(i);
  return out;
}

std::vector<int64_t> balance_stages(std::vector<int64_t> counts, const std::vector<double>& weights, const std::vector<double>& extra,
                                    const std::vector<int64_t>& owner, const std::vector<int64_t>& max_layers) {
  const size_t V = counts.size();
  if (V < 2 || extra.size() != V || owner.size() != V) return counts;
  const int64_t stages = *std::max_element(owner.begin(), owner.end()) + 1;
  struct Score {
    double stage_max = 0, vstage_max = 0, squares = 0;
  };
  auto score = [&](const std::vector<int64_t>& c) {
    Score s;
    std::vector<double> per_stage(static_cast<size_t>(stages), 0.0);
    size_t layer = 0;
    for (size_t v = 0; v < V; ++v) {
      double cost = extra[v];
      for (int64_t k = 0; k < c[v]; ++k) cost += weights[layer++];
      per_stage[static_cast<size_t>(owner[v])] += cost;
      s.vstage_max = std::max(s.vstage_max, cost);
      s.squares += cost * cost;
    }
    s.stage_max = *std::max_element(per_stage.begin(), per_stage.end());
    return s;
  };
  // Strictly better beyond rounding, key by key.
  auto better = [](const Score& a, const Score& b) {
    const double keys_a[] = {a.stage_max, a.vstage_max, a.squares}, keys_b[] = {b.stage_max, b.vstage_max, b.squares};
    for (size_t k = 0; k < 3; ++k) {
      const double tol = 1e-12 * std::max(std::abs(keys_a[k]), std::abs(keys_b[k]));
      if (keys_a[k] < keys_b[k] - tol) return true;
      if (keys_a[k] > keys_b[k] + tol) return false;
    }
    return false;
  };
  Score current = score(counts);
  // Each accepted move lowers the score, so the walk ends; the bound only guards rounding.
  for (size_t round = 0; round < 4 * weights.size() * V; ++round) {
    std::vector<int64_t> best_counts;
    Score best = current;
    for (size_t v = 0; v + 1 < V; ++v) {
      for (const int dir : {+1, -1}) {  // +1: the last layer of v moves to v + 1
        std::vector<int64_t> c = counts;
        const size_t from = dir > 0 ? v : v + 1, to = dir > 0 ? v + 1 : v;
        if (c[from] - 1 < fewest_layers(from, V)) continue;
        if (!max_layers.empty() && c[to] + 1 > max_layers[to]) continue;
        --c[from];
        ++c[to];
        const Score s = score(c);
        if (better(s, best)) {
          best = s;
          best_counts = std::move(c);
        }
      }
    }
    if (best_counts.empty()) break;
    counts = std::move(best_counts);
    current = best;
  }
  return counts;
}

BalancedSplit balanced_split(const config::RunConfig& rc, double memory_fraction) {
  BalancedSplit out;
  const auto& p = rc.parallel;
  if (p.pp <= 1) return out;
  const estimate::WorkloadBuilder wb(rc);
  std::vector<double> weights;
  weights.reserve(static_cast<size_t>(rc.model.num_layers));
  // Under ZeRO-3 / FSDP each layer's parameters are gathered before its forward (and, when
  // resharded after it, again before its backward) and its gradients reduce-scattered after its
  // backward, on their own streams one layer ahead: a pass is no shorter than its layer's
  // collectives, which weigh what its parameters weigh (MoE layers far more than dense ones).
  const bool zero3 = p.effective_zero() >= 3 && p.dp * p.cp > 1;
  const auto& places = wb.placements();
  auto sharded = [&](cost::Collective c, double params, double bytes_per_param, const mesh::Placement& shard, const mesh::Placement& replicate) {
    return params > 0 ? estimate::sharded_collective_time(c, core::Bytes(params * bytes_per_param), shard, replicate, rc.hardware).value() : 0.0;
  };
  const double gather_bytes = hw::bytes_per_element(rc.training.gather_dtype), reduce_bytes = hw::bytes_per_element(rc.training.reduce_dtype);
  for (int64_t l = 0; l < rc.model.num_layers; ++l) {
    const auto& lc = wb.layer_as_run(l);
    double fwd = lc.fwd_time().value(), bwd = lc.bwd_time().value();
    if (zero3) {
      const auto [dense, expert] = memory::layer_param_split(rc, l);
      // Under LoRA the layer's adapters are gathered beside it and alone reduced; QLoRA's
      // frozen weights are gathered packed.
      const bool lora = rc.training.lora.enabled();
      const double adapters = lora ? memory::lora_layer_params(rc, rc.model.layer_kind(l)) : 0.0;
      const double base_bytes = rc.gathered_layer_weight_bytes();
      const double ag = sharded(cost::Collective::kAllGather, dense * base_bytes + adapters * gather_bytes, 1.0, places.zero3, places.dp_replicate) +
                        sharded(cost::Collective::kAllGather, expert, base_bytes, places.edp, places.edp_replicate);
      const double rs = lora ? sharded(cost::Collective::kReduceScatter, adapters, reduce_bytes, places.zero3, places.dp_replicate)
                             : sharded(cost::Collective::kReduceScatter, dense, reduce_bytes, places.zero3, places.dp_replicate) +
                                   sharded(cost::Collective::kReduceScatter, expert, reduce_bytes, places.edp, places.edp_replicate);
      fwd = std::max(fwd, ag);
      bwd = std::max(bwd, (p.reshard_after_forward ? ag : 0.0) + rs);
    }
    weights.push_back(fwd + bwd);
  }
  const int64_t stages = p.pp * p.vpp;
  std::vector<double> extra(static_cast<size_t>(stages), 0.0);
  extra.front() += (wb.embedding().fwd_time() + wb.embedding().bwd_time()).value();
  extra.back() += (wb.output_layer().fwd_time() + wb.output_layer().bwd_time()).value();
  std::vector<int64_t> owner(static_cast<size_t>(stages));
  for (int64_t v = 0; v < stages; ++v) owner[static_cast<size_t>(v)] = p.stage_of_vstage(v);
  std::vector<int64_t> caps;  // per virtual stage; empty: none
  auto solve = [&] {
    std::vector<int64_t> counts = min_max_split(weights, extra, stages, caps);
    return counts.empty() ? counts : balance_stages(std::move(counts), weights, extra, owner, caps);
  };
  out.layers = solve();
  if (out.layers.empty() || memory_fraction <= 0) return out;

  // The ledger of the run on a split: false when the split is not valid for the run (its own
  // validation names why when the caller applies it).
  std::optional<memory::MemoryLedger> ledger;
  auto ledger_of = [&](const std::vector<int64_t>& list) {
    config::RunConfig r = rc;
    r.parallel.set_split(-1, -1, list);
    core::Issues issues;
    config::derive_and_validate(r, issues);
    if (!issues.empty()) return false;
    ledger = memory::compute_ledger(r);
    return true;
  };
  if (!ledger_of(out.layers)) return out;
  out.limit_bytes = memory_fraction * ledger->capacity.value();
  // The stages over the limit; `worst` gets the one furthest over.
  auto over = [&](int64_t* worst, double* worst_bytes) {
    std::vector<int64_t> list;
    for (const auto& st : ledger->stages) {
      const double bytes = st.total().value();
      if (bytes <= out.limit_bytes) continue;
      list.push_back(st.stage);
      if (worst != nullptr && bytes > *worst_bytes) {
        *worst = st.stage;
        *worst_bytes = bytes;
      }
    }
    return list;
  };
  std::vector<int64_t> full = over(&out.time_only_stage, &out.time_only_peak_bytes);
  if (full.empty()) return out;
  out.time_only = out.layers;
  caps.assign(static_cast<size_t>(stages), rc.model.num_layers);
  std::vector<int64_t> counts = out.layers;
  // Every pass lowers one cap below what its virtual stage holds, so the search ends.
  while (true) {
    bool capped = false;
    for (const int64_t s : full) {
      int64_t pick = -1;  // the virtual stage of s holding the most layers, the first of equals
      for (int64_t v = 0; v < stages; ++v) {
        const auto vi = static_cast<size_t>(v);
        if (owner[vi] != s || counts[vi] <= fewest_layers(vi, owner.size())) continue;
        if (pick < 0 || counts[vi] > counts[static_cast<size_t>(pick)]) pick = v;
      }
      if (pick < 0) continue;
      caps[static_cast<size_t>(pick)] = counts[static_cast<size_t>(pick)] - 1;
      capped = true;
    }
    if (!capped) break;
    counts = solve();
    if (counts.empty() || !ledger_of(counts)) break;
    full = over(nullptr, nullptr);
    if (full.empty()) {
      out.layers = std::move(counts);
      out.memory_bound = true;
      return out;
    }
  }
  out.fits = false;
  return out;
}

std::vector<int64_t> balanced_vstage_layers(const config::RunConfig& rc) { return balanced_split(rc, 0).layers; }

}  // namespace stepcast::plan
