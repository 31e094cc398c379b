// Rank mesh: Megatron order (tp fastest, then cp, dp, pp), groups partition the world along each
// dimension, and expert groups are carved from the dp*cp ranks of one pipeline stage.
#include "sim/mesh/rank_mesh.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <tuple>
#include <vector>

namespace stepcast::mesh {
namespace {

using ::testing::ElementsAre;
using V = std::vector<int64_t>;

// KNOWLEDGE example: 16 ranks, tp2 pp4 dp2 -> TP [0,1], DP [0,2], PP [0,4,8,12].
TEST(RankMesh, MegatronExample) {
  const RankMesh m(/*tp=*/2, /*cp=*/1, /*dp=*/2, /*pp=*/4);
  EXPECT_EQ(m.world(), 16);
  EXPECT_THAT(m.group(0, Dim::kTp), ElementsAre(0, 1));
  EXPECT_THAT(m.group(0, Dim::kDp), ElementsAre(0, 2));
  EXPECT_THAT(m.group(0, Dim::kPp), ElementsAre(0, 4, 8, 12));
  EXPECT_THAT(m.group(5, Dim::kTp), ElementsAre(4, 5));
  EXPECT_THAT(m.group(5, Dim::kDp), ElementsAre(5, 7));
  EXPECT_THAT(m.group(5, Dim::kPp), ElementsAre(1, 5, 9, 13));
  EXPECT_EQ(m.all_groups(Dim::kTp).size(), 8u);
  EXPECT_EQ(m.all_groups(Dim::kDp).size(), 8u);
  EXPECT_EQ(m.all_groups(Dim::kPp).size(), 4u);
}

// rank = tp_i + tp*(cp_i + cp*(dp_i + dp*pp_i)) and coord() is its inverse.
TEST(RankMesh, CoordRoundTrip) {
  const RankMesh m(2, 2, 3, 2);
  for (int64_t r = 0; r < m.world(); ++r) {
    const Coord c = m.coord(r);
    EXPECT_EQ(m.rank_of(c.tp, c.cp, c.dp, c.pp), r);
    EXPECT_EQ(r, c.tp + 2 * (c.cp + 2 * (c.dp + 3 * c.pp)));
  }
}

// Every rank is in exactly one group per dimension, every group has size(d) ranks, and a
// rank's group() is the one all_groups() lists for it.
class MeshPartition : public ::testing::TestWithParam<std::tuple<int, int, int, int, int, int>> {};

TEST_P(MeshPartition, GroupsPartitionTheWorld) {
  const auto [tp, cp, dp, pp, ep, etp] = GetParam();
  const RankMesh m(tp, cp, dp, pp, ep, etp);
  for (Dim d : {Dim::kTp, Dim::kCp, Dim::kDp, Dim::kPp, Dim::kDpCp, Dim::kEp, Dim::kEtp, Dim::kEdp}) {
    SCOPED_TRACE(to_string(d));
    const auto groups = m.all_groups(d);
    std::vector<int> seen(static_cast<size_t>(m.world()), 0);
    for (const auto& g : groups) {
      EXPECT_EQ(static_cast<int64_t>(g.size()), m.size(d));
      for (auto r : g) ++seen[static_cast<size_t>(r)];
    }
    for (int64_t r = 0; r < m.world(); ++r) {
      EXPECT_EQ(seen[static_cast<size_t>(r)], 1) << "rank " << r;
      const auto g = m.group(r, d);
      EXPECT_NE(std::find(g.begin(), g.end(), r), g.end()) << "rank " << r << " not in its own group";
    }
    EXPECT_EQ(static_cast<int64_t>(groups.size()) * m.size(d), m.world());
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, MeshPartition,
                         ::testing::Values(std::make_tuple(2, 1, 2, 4, 1, 1),
                                           std::make_tuple(8, 1, 4, 2, 1, 1),
                                           std::make_tuple(2, 2, 2, 2, 1, 1),
                                           std::make_tuple(1, 1, 8, 1, 8, 1),
                                           std::make_tuple(2, 1, 4, 2, 4, 1),
                                           std::make_tuple(2, 2, 4, 1, 4, 2),
                                           std::make_tuple(4, 1, 4, 2, 2, 2)));

// Group sizes: EDP = tp*cp*dp / (ep*etp).
TEST(RankMesh, GroupSizes) {
  const RankMesh m(2, 2, 4, 3, /*ep=*/4, /*etp=*/1);
  EXPECT_EQ(m.size(Dim::kTp), 2);
  EXPECT_EQ(m.size(Dim::kCp), 2);
  EXPECT_EQ(m.size(Dim::kDp), 4);
  EXPECT_EQ(m.size(Dim::kPp), 3);
  EXPECT_EQ(m.size(Dim::kDpCp), 8);
  EXPECT_EQ(m.size(Dim::kEp), 4);
  EXPECT_EQ(m.size(Dim::kEtp), 1);
  EXPECT_EQ(m.size(Dim::kEdp), 2 * 2 * 4 / 4);
  EXPECT_EQ(m.world(), 48);
}

// EP is carved from the dp*cp (and tp, via etp) ranks of one pipeline stage: an EP group never
// crosses a stage boundary, and with etp == 1 and tp == 1 it is a subset of a DP group.
TEST(RankMesh, ExpertGroupsStayInsideOneStage) {
  const RankMesh m(/*tp=*/1, /*cp=*/1, /*dp=*/8, /*pp=*/2, /*ep=*/4, /*etp=*/1);
  EXPECT_THAT(m.group(0, Dim::kEp), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(m.group(4, Dim::kEp), ElementsAre(4, 5, 6, 7));
  EXPECT_THAT(m.group(0, Dim::kEdp), ElementsAre(0, 4));
  EXPECT_THAT(m.group(8, Dim::kEp), ElementsAre(8, 9, 10, 11));
  for (int64_t r = 0; r < m.world(); ++r) {
    const int64_t stage = m.coord(r).pp;
    const auto dp_group = m.group(r, Dim::kDp);
    const std::set<int64_t> dp_set(dp_group.begin(), dp_group.end());
    for (auto q : m.group(r, Dim::kEp)) {
      EXPECT_EQ(m.coord(q).pp, stage);
      EXPECT_TRUE(dp_set.count(q)) << "EP peer " << q << " of rank " << r << " outside its DP group";
    }
  }
}

// With tp=2 and etp=1 the expert layers re-factor the stage's tp*dp ranks: EP may span the TP
// ranks, and EP x EDP x ETP still covers exactly the stage.
TEST(RankMesh, ExpertGroupsRefactorTpDpCp) {
  const RankMesh m(/*tp=*/2, /*cp=*/1, /*dp=*/4, /*pp=*/1, /*ep=*/4, /*etp=*/1);
  EXPECT_THAT(m.group(0, Dim::kEp), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(m.group(0, Dim::kEdp), ElementsAre(0, 4));
  EXPECT_EQ(m.size(Dim::kEdp), 2);
}

// Hybrid sharding splits each data-parallel group into replicas of consecutive dp indices: the
// shard group is one replica's dp ranks times cp (consecutive ranks at the tp stride), the
// replicate group the same position in every replica; the expert-data-parallel group splits
// the same way. Shard x replicate covers the dp*cp group exactly.
TEST(RankMesh, HybridShardingSplitsTheDataParallelGroup) {
  const RankMesh m(/*tp=*/2, /*cp=*/1, /*dp=*/8, /*pp=*/1, /*ep=*/1, /*etp=*/1, /*replicate=*/2);
  EXPECT_THAT(m.group(0, Dim::kShard), ElementsAre(0, 2, 4, 6));
  EXPECT_THAT(m.group(0, Dim::kReplicate), ElementsAre(0, 8));
  EXPECT_THAT(m.group(11, Dim::kShard), ElementsAre(9, 11, 13, 15));
  EXPECT_THAT(m.group(11, Dim::kReplicate), ElementsAre(3, 11));
  EXPECT_EQ(m.size(Dim::kShard) * m.size(Dim::kReplicate), m.size(Dim::kDpCp));
  // cp joins the shard group, not the replicas.
  const RankMesh c(/*tp=*/1, /*cp=*/2, /*dp=*/4, /*pp=*/2, 1, 1, /*replicate=*/2);
  EXPECT_THAT(c.group(0, Dim::kShard), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(c.group(9, Dim::kReplicate), ElementsAre(9, 13));
  EXPECT_EQ(c.size(Dim::kShard), 4);
  // Experts: edp = 8 / 2 = 4, split into 2 replicas of 2.
  const RankMesh e(/*tp=*/1, /*cp=*/1, /*dp=*/8, /*pp=*/1, /*ep=*/2, /*etp=*/1, /*replicate=*/2);
  EXPECT_THAT(e.group(0, Dim::kEdp), ElementsAre(0, 2, 4, 6));
  EXPECT_THAT(e.group(0, Dim::kEdpShard), ElementsAre(0, 2));
  EXPECT_THAT(e.group(0, Dim::kEdpReplicate), ElementsAre(0, 4));
  EXPECT_THAT(e.group(7, Dim::kEdpShard), ElementsAre(5, 7));
  // One replica: the shard groups are the whole groups.
  const RankMesh one(2, 2, 4, 3, 4, 1);
  for (int64_t r = 0; r < one.world(); ++r) {
    EXPECT_EQ(one.group(r, Dim::kShard), one.group(r, Dim::kDpCp));
    EXPECT_EQ(one.group(r, Dim::kEdpShard), one.group(r, Dim::kEdp));
    EXPECT_THAT(one.group(r, Dim::kReplicate), ElementsAre(r));
  }
}

// Placement: consecutive ranks fill a node, so TP (fastest) stays inside it; a DP group with
// stride 8 lands one rank per node.
TEST(Placement, NodesAndLocalSpan) {
  const Placement tp = place({8, 9, 10, 11}, 8);
  EXPECT_TRUE(tp.intra_node());
  EXPECT_EQ(tp.nodes, 1);
  EXPECT_EQ(tp.size, 4);
  EXPECT_EQ(tp.local_lo, 0);
  EXPECT_EQ(tp.local_hi, 3);
  const Placement dp = place({0, 8, 16, 24}, 8);
  EXPECT_FALSE(dp.intra_node());
  EXPECT_EQ(dp.nodes, 4);
  EXPECT_EQ(dp.ranks_per_node, 1);
  const Placement mixed = place({0, 1, 2, 3, 8, 9, 10, 11}, 8);
  EXPECT_EQ(mixed.nodes, 2);
  EXPECT_EQ(mixed.ranks_per_node, 4);
}

}  // namespace
}  // namespace stepcast::mesh
