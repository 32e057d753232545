// The leader's WAL truncation rule (leader_wal_truncation_cut): below its own older kept
// checkpoint and below what every other replica reported it may need; nothing while the
// leader keeps fewer than two checkpoints or a replica has not reported.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "src/repl/leader.h"

namespace shoal::repl {
namespace {

using Cuts = std::vector<uint64_t>;
using Kept = std::vector<std::optional<Cuts>>;

TEST(LeaderTruncation, CutIsTheMinimumOfTheOlderOwnCheckpointAndEveryReplicasNeed) {
  // Replica 0 leads; replicas 1 and 2 reported.
  const Kept kept = {std::nullopt, Cuts{500, 40}, Cuts{300, 90}};
  EXPECT_EQ(leader_wal_truncation_cut(2, {Cuts{400, 80}, Cuts{900, 900}}, kept, 0),
            (Cuts{300, 40}));
  // Three held (one more than kept between a publish and the deletion): the older of the
  // two newest counts.
  EXPECT_EQ(leader_wal_truncation_cut(2, {Cuts{1, 1}, Cuts{400, 80}, Cuts{900, 900}}, kept, 0),
            (Cuts{300, 40}));
  // The leader's own older checkpoint may be the lowest.
  EXPECT_EQ(leader_wal_truncation_cut(2, {Cuts{100, 100}, Cuts{900, 900}}, kept, 0),
            (Cuts{100, 40}));
  // A promoted replica 1 leads: its own entry is ignored, replica 0's counts.
  const Kept after_failover = {Cuts{200, 10}, std::nullopt, Cuts{300, 90}};
  EXPECT_EQ(leader_wal_truncation_cut(2, {Cuts{400, 80}, Cuts{900, 900}}, after_failover, 1),
            (Cuts{200, 10}));
}

TEST(LeaderTruncation, NothingIsDeletedWithoutTwoOwnCheckpointsOrWithAnUnknownReplica) {
  const Kept kept = {std::nullopt, Cuts{500}, Cuts{300}};
  EXPECT_EQ(leader_wal_truncation_cut(1, {}, kept, 0), (Cuts{0}));
  // One checkpoint: a restart that refuses it would need the whole WAL.
  EXPECT_EQ(leader_wal_truncation_cut(1, {Cuts{400}}, kept, 0), (Cuts{0}));
  // Replica 2 never reported (down since this leader started): it may need any slot.
  const Kept unknown = {std::nullopt, Cuts{500}, std::nullopt};
  EXPECT_EQ(leader_wal_truncation_cut(1, {Cuts{400}, Cuts{600}}, unknown, 0), (Cuts{0}));
  // A replica that holds fewer than two checkpoints reports kept zeros: nothing either.
  const Kept young = {std::nullopt, Cuts{500}, Cuts{0}};
  EXPECT_EQ(leader_wal_truncation_cut(1, {Cuts{400}, Cuts{600}}, young, 0), (Cuts{0}));
}

}  // namespace
}  // namespace shoal::repl
