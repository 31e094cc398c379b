#include "sim/mesh/rank_mesh.hpp"

#include <algorithm>
#include <set>

#include "sim/core/error.hpp"

namespace stepcast::mesh {

std::string to_string(Dim d) {
  switch (d) {
    case Dim::kTp: return "tp";
    case Dim::kCp: return "cp";
    case Dim::kDp: return "dp";
    case Dim::kPp: return "pp";
    case Dim::kDpCp: return "dp*cp";
    case Dim::kEp: return "ep";
    case Dim::kEtp: return "etp";
    case Dim::kEdp: return "edp";
    case Dim::kShard: return "dp_shard*cp";
    case Dim::kReplicate: return "dp_replicate";
    case Dim::kEdpShard: return "edp_shard";
    case Dim::kEdpReplicate: return "edp_replicate";
  }
  return "?";
}

RankMesh::RankMesh(int64_t tp, int64_t cp, int64_t dp, int64_t pp, int64_t ep, int64_t etp, int64_t replicate)
    : tp_(tp), cp_(cp), dp_(dp), pp_(pp), ep_(ep), etp_(etp), edp_(0), rep_(replicate) {
  STEPCAST_CHECK(tp > 0 && cp > 0 && dp > 0 && pp > 0 && ep > 0 && etp > 0 && replicate > 0, "mesh sizes must be positive");
  STEPCAST_CHECK((tp * cp * dp) % (ep * etp) == 0, "ep*etp must divide tp*cp*dp");
  edp_ = tp * cp * dp / (ep * etp);
  STEPCAST_CHECK(dp % replicate == 0 && edp_ % replicate == 0, "dp_replicate must divide dp and the expert-data-parallel group");
}

Coord RankMesh::coord(int64_t rank) const {
  STEPCAST_CHECK(rank >= 0 && rank < world(), "rank out of range");
  Coord c;
  c.tp = rank % tp_;
  c.cp = (rank / tp_) % cp_;
  c.dp = (rank / (tp_ * cp_)) % dp_;
  c.pp = rank / (tp_ * cp_ * dp_);
  const int64_t local = rank % (tp_ * cp_ * dp_);
  c.etp = local % etp_;
  c.ep = (local / etp_) % ep_;
  c.edp = local / (etp_ * ep_);
  return c;
}

int64_t RankMesh::rank_of(int64_t tp_i, int64_t cp_i, int64_t dp_i, int64_t pp_i) const {
  return tp_i + tp_ * (cp_i + cp_ * (dp_i + dp_ * pp_i));
}

int64_t RankMesh::size(Dim d) const {
  switch (d) {
    case Dim::kTp: return tp_;
    case Dim::kCp: return cp_;
    case Dim::kDp: return dp_;
    case Dim::kPp: return pp_;
    case Dim::kDpCp: return dp_ * cp_;
    case Dim::kEp: return ep_;
    case Dim::kEtp: return etp_;
    case Dim::kEdp: return edp_;
    case Dim::kShard: return dp_ / rep_ * cp_;
    case Dim::kReplicate: return rep_;
    case Dim::kEdpShard: return edp_ / rep_;
    case Dim::kEdpReplicate: return rep_;
  }
  return 1;
}

std::vector<int64_t> RankMesh::group(int64_t rank, Dim d) const {
  const Coord c = coord(rank);
  std::vector<int64_t> out;
  const int64_t stage_base = c.pp * tp_ * cp_ * dp_;
  switch (d) {
    case Dim::kTp:
      for (int64_t i = 0; i < tp_; ++i) out.push_back(rank_of(i, c.cp, c.dp, c.pp));
      break;
    case Dim::kCp:
      for (int64_t i = 0; i < cp_; ++i) out.push_back(rank_of(c.tp, i, c.dp, c.pp));
      break;
    case Dim::kDp:
      for (int64_t i = 0; i < dp_; ++i) out.push_back(rank_of(c.tp, c.cp, i, c.pp));
      break;
    case Dim::kPp:
      for (int64_t i = 0; i < pp_; ++i) out.push_back(rank_of(c.tp, c.cp, c.dp, i));
      break;
    case Dim::kDpCp:
      for (int64_t di = 0; di < dp_; ++di)
        for (int64_t ci = 0; ci < cp_; ++ci) out.push_back(rank_of(c.tp, ci, di, c.pp));
      break;
    case Dim::kEtp:
      for (int64_t i = 0; i < etp_; ++i) out.push_back(stage_base + i + etp_ * (c.ep + ep_ * c.edp));
      break;
    case Dim::kEp:
      for (int64_t i = 0; i < ep_; ++i) out.push_back(stage_base + c.etp + etp_ * (i + ep_ * c.edp));
      break;
    case Dim::kEdp:
      for (int64_t i = 0; i < edp_; ++i) out.push_back(stage_base + c.etp + etp_ * (c.ep + ep_ * i));
      break;
    case Dim::kShard: {
      const int64_t per = dp_ / rep_, first = c.dp / per * per;
      for (int64_t di = first; di < first + per; ++di)
        for (int64_t ci = 0; ci < cp_; ++ci) out.push_back(rank_of(c.tp, ci, di, c.pp));
      break;
    }
    case Dim::kReplicate: {
      const int64_t per = dp_ / rep_;
      for (int64_t k = 0; k < rep_; ++k) out.push_back(rank_of(c.tp, c.cp, k * per + c.dp % per, c.pp));
      break;
    }
    case Dim::kEdpShard: {
      const int64_t per = edp_ / rep_, first = c.edp / per * per;
      for (int64_t i = first; i < first + per; ++i) out.push_back(stage_base + c.etp + etp_ * (c.ep + ep_ * i));
      break;
    }
    case Dim::kEdpReplicate: {
      const int64_t per = edp_ / rep_;
      for (int64_t k = 0; k < rep_; ++k) out.push_back(stage_base + c.etp + etp_ * (c.ep + ep_ * (k * per + c.edp % per)));
      break;
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::vector<int64_t>> RankMesh::all_groups(Dim d) const {
  std::set<std::vector<int64_t>> seen;
  std::vector<std::vector<int64_t>> out;
  for (int64_t r = 0; r < world(); ++r) {
    auto g = group(r, d);
    if (seen.insert(g).second) out.push_back(std::move(g));
  }
  std::sort(out.begin(), out.end());
  return out;
}

Placement place(const std::vector<int64_t>& ranks, int64_t gpus_per_node) {
  Placement p;
  p.size = static_cast<int64_t>(ranks.size());
  // Ranks per node: the group's node ids in order (a group's ranks usually ascend already),
  // counted by runs.
  std::vector<int64_t> node_of(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) node_of[i] = ranks[i] / gpus_per_node;
  if (!std::is_sorted(node_of.begin(), node_of.end())) std::sort(node_of.begin(), node_of.end());
  p.nodes = 0;
  p.ranks_per_node = 0;
  for (size_t i = 0; i < node_of.size();) {
    size_t j = i;
    while (j < node_of.size() && node_of[j] == node_of[i]) ++j;
    ++p.nodes;
    p.ranks_per_node = std::max(p.ranks_per_node, static_cast<int64_t>(j - i));
    i = j;
  }
  const int64_t first_node = ranks.empty() ? 0 : ranks.front() / gpus_per_node;
  p.local_lo = static_cast<int>(gpus_per_node);
  p.local_hi = 0;
  for (auto r : ranks) {
    if (r / gpus_per_node != first_node) continue;
    p.local_lo = std::min(p.local_lo, static_cast<int>(r % gpus_per_node));
    p.local_hi = std::max(p.local_hi, static_cast<int>(r % gpus_per_node));
  }
  return p;
}

}  // namespace stepcast::mesh
