// stepcast rank mesh: which global ranks form each parallel group.
//
// Megatron order: tp varies fastest, then cp, then dp, then pp:
//   rank = tp_i + tp * (cp_i + cp * (dp_i + dp * pp_i)).
// Expert layers re-factor the tp*cp*dp ranks of one pipeline stage as etp (fastest), ep, then
// expert-data-parallel (edp), so EP is carved from dp*cp. Example (16 ranks, tp2 pp4 dp2):
// TP [0,1], DP [0,2], PP [0,4,8,12]. Ranks fill nodes in order, so the fastest dimensions stay
// inside a node; Placement tells the cost model how a group lands on nodes.
// Hybrid sharding splits the dp ranks into `replicate` replicas of consecutive dp indices: the
// shard group (kShard: the replica's dp ranks times cp) shards ZeRO state, the replicate group
// (kReplicate: the same position in every replica) all-reduces each shard; kEdpShard and
// kEdpReplicate split the expert-data-parallel group the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stepcast::mesh {

enum class Dim { kTp, kCp, kDp, kPp, kDpCp, kEp, kEtp, kEdp, kShard, kReplicate, kEdpShard, kEdpReplicate };
std::string to_string(Dim d);

struct Coord {
  int64_t tp = 0, cp = 0, dp = 0, pp = 0;
  int64_t etp = 0, ep = 0, edp = 0;
};

// How one group's ranks sit on nodes.
struct Placement {
  int64_t size = 1;            // ranks in the group
  int64_t nodes = 1;           // distinct nodes touched
  int64_t ranks_per_node = 1;  // ranks of the group on each node (max)
  int local_lo = 0;            // lowest and highest local GPU index on a node (first node)
  int local_hi = 0;
  [[nodiscard]] bool intra_node() const { return nodes == 1; }
};

class RankMesh {
 public:
  RankMesh(int64_t tp, int64_t cp, int64_t dp, int64_t pp, int64_t ep = 1, int64_t etp = 1, int64_t replicate = 1);

  [[nodiscard]] int64_t world() const { return tp_ * cp_ * dp_ * pp_; }
  [[nodiscard]] Coord coord(int64_t rank) const;
  [[nodiscard]] int64_t rank_of(int64_t tp_i, int64_t cp_i, int64_t dp_i, int64_t pp_i) const;
  // All ranks in rank's group along d, ascending.
  [[nodiscard]] std::vector<int64_t> group(int64_t rank, Dim d) const;
  // Every distinct group along d (each ascending; groups ordered by first rank).
  [[nodiscard]] std::vector<std::vector<int64_t>> all_groups(Dim d) const;
  [[nodiscard]] int64_t size(Dim d) const;

 private:
  int64_t tp_, cp_, dp_, pp_, ep_, etp_, edp_, rep_;
};

Placement place(const std::vector<int64_t>& ranks, int64_t gpus_per_node);

}  // namespace stepcast::mesh
