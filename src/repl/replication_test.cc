// End-to-end replication of one shard in one process: a ReplicationLeader over a real engine
// whose workers commit through the commit hook, two Followers on their own threads over TCP
// loopback, each with its WAL in a temporary directory. Checks digests, watermarks, replay,
// and a follower restarted from its WAL catching up.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "src/base/temp_dir.h"
#include "src/repl/bootstrap.h"
#include "src/repl/checkpoint.h"
#include "src/repl/copy_count.h"
#include "src/repl/follower.h"
#include "src/repl/leader.h"

namespace shoal::repl {
namespace replication_test {  // named, not anonymous: unique in a unity build

struct Row {
  uint64_t a, b;
};

Status bump(txn::Txn& txn, const void* args, void*) {
  auto* table = static_cast<txn::Table<1>*>(txn.engine().tables()[0].get());
  const uint64_t k = *static_cast<const uint64_t*>(args);
  Row r{};
  Status s = txn.get(*table, Key<1>{{k}}, &r);
  if (s.is_not_found()) return txn.insert(*table, Key<1>{{k}}, Row{k, 1});
  SHOAL_TRY(s);
  if (r.b % 7 == 6) return txn.remove(*table, Key<1>{{k}});
  r.b++;
  return txn.put(*table, Key<1>{{k}}, r);
}

class FollowerThread {
 public:
  FollowerThread(FollowerOptions o) : options_(std::move(o)) {}
  ~FollowerThread() { stop(); }
  void start() {
    auto f = Follower::open(options_);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    follower_ = std::move(*f);
    recovered_ = follower_->recovered_slots();
    recovered_tid_ = follower_->applied_tid();
    stop_ = false;
    thread_ = std::thread([this] { EXPECT_TRUE(follower_->run(&stop_).ok()); });
  }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    follower_.reset();
  }
  // Waits until run() returns by itself (its leader went away); the follower stays.
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  // Runs again (after set_leader, say) on a new thread.
  void rerun() {
    stop_ = false;
    thread_ = std::thread([this] { EXPECT_TRUE(follower_->run(&stop_).ok()); });
  }
  uint64_t recovered() const { return recovered_; }
  Follower& follower() { return *follower_; }
  uint64_t recovered_tid() const { return recovered_tid_; }

 private:
  FollowerOptions options_;
  std::unique_ptr<Follower> follower_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  uint64_t recovered_ = 0, recovered_tid_ = 0;
};

struct Cluster {
  TempDir dir;
  std::unique_ptr<txn::Engine> engine;
  std::unique_ptr<ReplicationLeader> leader;
  std::vector<std::unique_ptr<FollowerThread>> followers;

  FsyncPolicy fsync;
  LinkKind link;
  uint64_t checkpoint_ms = 0;  // followers checkpoint and the leader fetches this often
  uint64_t one_way_ns = 0;     // WAN delay each way between the leader and each follower
  explicit Cluster(uint32_t streams, FsyncPolicy f = FsyncPolicy::kNone, uint32_t batch_txns = 16,
                   uint64_t retain_slots = 256, LinkKind link_kind = LinkKind::kTcp,
                   uint64_t checkpoint_interval_ms = 0, uint64_t one_way_delay_ns = 0,
                   uint32_t replicas = 3)
      : fsync(f),
        link(link_kind),
        checkpoint_ms(checkpoint_interval_ms),
        one_way_ns(one_way_delay_ns) {
    engine = std::make_unique<txn::Engine>();
    engine->create_table<1>("rows");
    LeaderOptions lo;
    lo.streams = streams;
    lo.replicas = replicas;
    lo.appender.limits.batch_txns_max = batch_txns;
    lo.appender.limits.batch_bytes_max = 64 * 1024;
    lo.appender.pool_buffers = 8;
    lo.wal_dir = dir.path() + "/r0";
    std::filesystem::create_directories(lo.wal_dir);
    lo.fsync = fsync;
    lo.paxos = paxos_options_for_rtt(2 * one_way_ns);
    lo.receive_shapes.assign(replicas, net::LinkShape{one_way_ns, 0});
    lo.receive_shapes[0] = {};
    lo.retain_chosen_slots = retain_slots;
    lo.follower_lag_slots_max = retain_slots * 3 / 4;
    lo.schema = Schema::of(*engine, "");
    lo.link = link;
    lo.checkpoint_fetch_interval_ms = checkpoint_ms;
    if (checkpoint_ms != 0 || replicas == 1) {
      lo.checkpoint_dir = lo.wal_dir;
      // What shard_server.cc writes: a former leader restarts over this directory.
      EXPECT_TRUE(prepare_replica_dir(lo.wal_dir).ok());
      EXPECT_TRUE(write_replica_schema(lo.wal_dir, lo.schema, streams).ok());
    }
    auto l = ReplicationLeader::start(lo, *engine);
    EXPECT_TRUE(l.ok()) << l.status().to_string();
    leader = std::move(*l);
    for (uint32_t r = 1; r < replicas; ++r) {
      followers.push_back(std::make_unique<FollowerThread>(follower_options(r)));
      followers.back()->start();
    }
  }
  FollowerOptions follower_options(uint32_t r) const {
    FollowerOptions fo;
    fo.replica = r;
    fo.replicas = 3;
    fo.leader_port = leader->port();
    fo.link = link;
    fo.data_dir = dir.path() + "/r" + std::to_string(r);
    fo.fsync = fsync;
    fo.paxos = paxos_options_for_rtt(2 * one_way_ns);
    fo.paxos.max_message_bytes = replication_message_bytes(fo.paxos, 64 * 1024);
    fo.receive_shape = {one_way_ns, 0};
    fo.quiet = true;
    fo.checkpoint_interval_ms = checkpoint_ms;
    return fo;
  }
  // Runs `txns` transactions on each of the leader's streams (one worker thread each).
  void run(uint32_t txns, uint64_t seed) {
    std::vector<std::thread> threads;
    for (uint32_t s = 0; s < leader->streams(); ++s) {
      threads.emplace_back([this, s, txns, seed] {
        txn::Worker* w = engine->make_worker();
        w->set_commit_hook(&StreamAppender::commit_hook, &leader->appender(s));
        // A new Worker after close() sealed a floor: its TIDs must go above it.
        w->txn().set_tid_floor(leader->appender(s).promised_tid());
        Rng rng(seed * 31 + s);
        for (uint32_t i = 0; i < txns; ++i) {
          const uint64_t k = rng.uniform(1, 200);
          const Status st = w->run(&bump, &k);
          EXPECT_TRUE(st.ok()) << st.to_string();
        }
        leader->appender(s).flush();
        w->set_commit_hook(nullptr, nullptr);
      });
    }
    for (auto& t : threads) t.join();
  }
  uint64_t close() {
    uint64_t floor = 0;
    for (uint32_t s = 0; s < leader->streams(); ++s) {
      floor = std::max(floor, leader->appender(s).last_commit_tid());
    }
    for (uint32_t s = 0; s < leader->streams(); ++s) {
      EXPECT_TRUE(leader->appender(s).finish(floor).ok());
    }
    return floor;
  }
};

// fsync batch: followers group-commit before answering, the leader's syncer thread makes its
// own votes durable before they count.
TEST(Replication, FollowersConvergeToTheLeadersStore) {
  Cluster c(/*streams=*/2, FsyncPolicy::kBatch);
  ASSERT_TRUE(c.leader->wait_leading(10'000).ok());
  c.run(2000, 1);
  const uint64_t final_tid = c.close();
  auto reports = c.leader->collect_reports(final_tid, true, false, 20'000);
  ASSERT_TRUE(reports.ok()) << reports.status().to_string();
  EXPECT_GE(c.leader->watermark(), final_tid);
  const uint64_t digest = engine_digest(*c.engine);
  ASSERT_EQ(reports->size(), 2u);
  for (const FollowerReport& r : *reports) {
    EXPECT_EQ(r.digest, digest) << "replica " << r.replica;
    EXPECT_GE(r.applied_tid, final_tid);
    EXPECT_EQ(r.replay_txns, 4000u);
  }
  // Both followers hear the same designated successor, one of them (the ratekeeper's).
  uint32_t a = Follower::kNoReplica, b = Follower::kNoReplica;
  for (int i = 0; i < 300 && (a == Follower::kNoReplica || a != b); ++i) {  // bounded: 3 s
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    a = c.followers[0]->follower().successor_hint();
    b = c.followers[1]->follower().successor_hint();
  }
  EXPECT_EQ(a, b);
  EXPECT_TRUE(a == 1 || a == 2) << a;
  // What /metrics reads (src/server/server_metrics.h), published by the ticks: every stream
  // chosen, durable and known chosen by both followers; both fsynced their WAL (kBatch).
  ReplicationPositions p;
  for (int i = 0; i < 300; ++i) {  // bounded: 3 s
    p = c.leader->positions();
    // The leader's own sync may report after two followers chose the last entry.
    if (p.streams.size() == 2 && p.streams[0].peer_chosen[1] == p.streams[0].chosen &&
        p.streams[1].peer_chosen[2] == p.streams[1].chosen &&
        p.streams[0].persisted == p.streams[0].chosen &&
        p.streams[1].persisted == p.streams[1].chosen) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(p.streams.size(), 2u);
  ASSERT_EQ(p.followers.size(), 3u);
  for (const StreamPosition& s : p.streams) {
    EXPECT_GT(s.chosen, 0u);
    EXPECT_EQ(s.persisted, s.chosen);
    EXPECT_GT(s.wal_bytes, 0u);
    EXPECT_GT(s.chosen_entries, 0u);
    EXPECT_GT(s.chosen_bytes, s.chosen_entries);
  }
  EXPECT_TRUE(p.followers[1].connected && p.followers[2].connected);
  EXPECT_GT(c.leader->fsync_latency().count(), 0u);
  for (auto& f : c.followers) {
    const std::vector<FollowerStreamPosition> fp = f->follower().positions();
    ASSERT_EQ(fp.size(), 2u);
    for (size_t s = 0; s < fp.size(); ++s) {
      EXPECT_GE(fp[s].received, fp[s].chosen);
      EXPECT_GT(fp[s].wal_bytes, 0u);
    }
    EXPECT_GT(f->follower().fsync_latency().count(), 0u);
  }
}

// Quiesces the cluster at `final_tid`: both followers report the leader's digest, having
// replayed `txns` transactions.
void expect_followers_converge(Cluster& c, uint64_t final_tid, uint64_t txns) {
  auto reports = c.leader->collect_reports(final_tid, true, false, 20'000);
  ASSERT_TRUE(reports.ok()) << reports.status().to_string();
  const uint64_t digest = engine_digest(*c.engine);
  ASSERT_EQ(reports->size(), 2u);
  for (const FollowerReport& r : *reports) {
    EXPECT_EQ(r.digest, digest) << "replica " << r.replica;
    EXPECT_EQ(r.replay_txns, txns);
  }
}

// A replicated run over `link` in which nobody copies an entry into an acceptor store (the
// leader proposes its appender's buffers, the followers keep theirs in their receive rings)
// or on its way in (a WAN shaper holds them in those rings too), and the stores converge.
void expect_followers_keep_entries(LinkKind link, uint64_t seed, uint64_t one_way_ns = 0) {
  const CopyCounts start = copy_counts();
  Cluster c(/*streams=*/2, FsyncPolicy::kBatch, /*batch_txns=*/16, /*retain_slots=*/256, link,
            /*checkpoint_interval_ms=*/0, one_way_ns);
  ASSERT_TRUE(c.leader->wait_leading(10'000).ok());
  c.run(2000, seed);
  expect_followers_converge(c, c.close(), 4000);
  const CopyCounts d = copy_counts() - start;
  EXPECT_GT(d.entry_bytes_received, 0u);
  EXPECT_EQ(d.bytes[static_cast<size_t>(CopyHop::kAcceptorStore)], 0u);
  EXPECT_EQ(d.bytes[static_cast<size_t>(CopyHop::kReceiveCopy)], 0u);  // no compaction
  EXPECT_EQ(d.bytes[static_cast<size_t>(CopyHop::kShaperHold)], 0u);
  // A socket still carries them (fabric: the net provider's); not shared memory.
  if (link != LinkKind::kShm) {
    EXPECT_GE(d.bytes[static_cast<size_t>(CopyHop::kSocketReceive)], d.entry_bytes_received);
  }
}

// Over tcp the followers keep every received entry where recv() put it, in their receive
// rings (TcpEndpoint::keep_received).
TEST(Replication, FollowersOverTcpKeepEntriesInTheirReceiveRings) {
  expect_followers_keep_entries(LinkKind::kTcp, 11);
}

// Over fabric the same: each follower keeps every received entry where the leader's RMA write
// put it, in its registered receive ring (FabricEndpoint::keep_received), and the stores
// converge.
TEST(Replication, FollowersOverFabricKeepEntriesInTheirReceiveRings) {
  std::string why;
  if (!net::FabricEndpoint::supported(&why)) GTEST_SKIP() << "no libfabric provider: " << why;
  expect_followers_keep_entries(LinkKind::kFabric, 13);
}

// Over a 10 ms WAN round trip, shared memory and tcp alike, the shaper holds each message in
// the follower's receive ring and the store keeps its entries there (WanShaped::
// keep_received): no copy on the way in either.
TEST(Replication, FollowersOverAWanKeepEntriesInTheirReceiveRings) {
  expect_followers_keep_entries(LinkKind::kShm, 17, 5'000'000);
  expect_followers_keep_entries(LinkKind::kTcp, 19, 5'000'000);
}

// The followers on this host reach the leader over shared memory: the leader's sends are
// copies into their rings, the replies come back the same way, and the stores converge.
TEST(Replication, FollowersConvergeOverSharedMemory) {
  Cluster c(/*streams=*/2, FsyncPolicy::kBatch, /*batch_txns=*/16, /*retain_slots=*/256,
            LinkKind::kShm);
  ASSERT_TRUE(c.leader->wait_leading(10'000).ok());
  c.run(2000, 7);
  expect_followers_converge(c, c.close(), 4000);
}

// The bootstrap ships a load of 30000 rows in about 30 entries (records at distinct TIDs below
// S, then a floor at S flagged as the bootstrap's end): bootstrap_followers returns only once
// every follower installed all of it. When every record carried S, a follower's applied TID
// reached S with the first entry and the call returned with up to 8 entries still in flight.
TEST(Replication, BootstrapReturnsOnlyOnceEveryFollowerInstalledAllOfIt) {
  Cluster c(/*streams=*/1, FsyncPolicy::kNone);
  auto* table = static_cast<txn::Table<1>*>(c.engine->tables()[0].get());
  constexpr uint64_t kRows = 30000;
  for (uint64_t k = 1; k <= kRows; ++k) {
    ASSERT_TRUE(table->load(Key<1>{{k}}, Row{k, 1}).ok());
  }
  // Past epoch 1 (Table::load's versions), as after any real load: patches of loaded rows
  // then apply onto the bootstrap's versions (bootstrap.h).
  c.engine->advance_epoch_for_tests();
  ASSERT_TRUE(c.leader->wait_leading(10'000).ok());
  auto boot = bootstrap_followers(*c.leader, *c.engine, 60'000);
  ASSERT_TRUE(boot.ok()) << boot.status().to_string();
  EXPECT_EQ(boot->records, (kRows + 63) / 64);
  EXPECT_GT(c.leader->appender(0).stats().entries, 20u);
  for (auto& f : c.followers) {
    EXPECT_EQ(f->follower().replayed_txns(), boot->records) << "returned before it was installed";
    EXPECT_GE(f->follower().applied_tid(), boot->snapshot_tid);
  }
  // Transactions after it (patches of bootstrapped rows included) replay onto it.
  c.run(500, 9);
  const uint64_t final_tid = c.close();
  auto reports = c.leader->collect_reports(final_tid, true, false, 20'000);
  ASSERT_TRUE(reports.ok()) << reports.status().to_string();
  for (const FollowerReport& r : *reports) {
    EXPECT_EQ(r.digest, engine_digest(*c.engine)) << "replica " << r.replica;
  }
}

// One stream: puts that keep their size are logged as patches of the changed bytes, and the
// followers, applying them onto the versions they hold, still converge.
TEST(Replication, OneStreamLogsPatchesAndFollowersConverge) {
  Cluster c(/*streams=*/1, FsyncPolicy::kBatch);
  ASSERT_TRUE(c.leader->wait_leading(10'000).ok());
  c.run(2000, 4);
  const uint64_t final_tid = c.close();
  EXPECT_GT(c.leader->appender(0).stats().patches, 500u);
  expect_followers_converge(c, final_tid, 2000);
}

// The leader retains only 16 chosen slots and the streams seal every 4 transactions (300
// entries): it must hold proposals while a slow follower lags, or that follower falls more
// than 16 slots behind, can never be caught up from memory, and the run waits for it forever
// (a WAN bench run did exactly that).
TEST(Replication, FollowersStayWithinTheRetainedSlots) {
  Cluster c(/*streams=*/2, FsyncPolicy::kNone, /*batch_txns=*/4, /*retain_slots=*/16);
  // Replica 2 syncs every accepted entry: far slower than the leader and replica 1, which
  // form a majority without it.
  c.followers[1]->stop();
  FollowerOptions slow = c.follower_options(2);
  slow.fsync = FsyncPolicy::kAlways;
  c.followers[1] = std::make_unique<FollowerThread>(slow);
  c.followers[1]->start();
  ASSERT_TRUE(c.leader->wait_leading(10'000).ok());
  c.run(600, 5);
  const uint64_t final_tid = c.close();
  auto reports = c.leader->collect_reports(final_tid, true, false, 30'000);
  ASSERT_TRUE(reports.ok()) << reports.status().to_string();
  const uint64_t digest = engine_digest(*c.engine);
  for (const FollowerReport& r : *reports) EXPECT_EQ(r.digest, digest) << "replica " << r.replica;
}

TEST(Replication, LagBoundMustBeBelowTheRetainedSlots) {
  txn::Engine engine;
  LeaderOptions lo;
  lo.retain_chosen_slots = 64;
  lo.follower_lag_slots_max = 64;
  auto l = ReplicationLeader::start(lo, engine);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(l.status().message(),
            "replication: follower_lag_slots_max 64 must be in [1, retain_chosen_slots 64)");
}

TEST(Replication, FollowerRestartedFromItsWalRecoversAndCatchesUp) {
  Cluster c(/*streams=*/1);
  ASSERT_TRUE(c.leader->wait_leading(10'000).ok());
  c.run(500, 2);
  uint64_t tid = c.close();
  ASSERT_TRUE(c.leader->collect_reports(tid, false, false, 20'000).ok());
  // "Crash" replica 2 (its files stay), keep committing with replica 1 as the majority.
  c.followers[1]->stop();
  c.run(500, 3);
  tid = c.close();
  EXPECT_GT(c.leader->appender(0).stats().patches, 0u);  // recovery replays patches too
  // Restart it from its WAL: it restores what it had before talking to the leader ...
  c.followers[1] = std::make_unique<FollowerThread>(c.follower_options(2));
  c.followers[1]->start();
  EXPECT_GT(c.followers[1]->recovered(), 0u);
  EXPECT_GT(c.followers[1]->recovered_tid(), 0u);
  // ... and catches up on what it missed.
  auto reports = c.leader->collect_reports(tid, true, false, 20'000);
  ASSERT_TRUE(reports.ok()) << reports.status().to_string();
  const uint64_t digest = engine_digest(*c.engine);
  for (const FollowerReport& r : *reports) EXPECT_EQ(r.digest, digest) << "replica " << r.replica;
}

// A follower down while the leader commits far more entries than it retains (64) comes back
// from its WAL and is caught up from the leader's WAL, while the leader keeps committing (it
// does not wait for a follower that far behind); in the end every store is identical.
TEST(Replication, FollowerFarBehindIsCaughtUpFromTheLeadersWalWhileTheShardCommits) {
  Cluster c(/*streams=*/1, FsyncPolicy::kBatch, /*batch_txns=*/1, /*retain_slots=*/64);
  ASSERT_TRUE(c.leader->wait_leading(10'000).ok());
  c.run(200, 6);
  c.followers[1]->stop();
  c.run(2500, 7);  // one entry per transaction: ~40 times the retained slots
  const uint64_t chosen_before = c.leader->stats().chosen;
  ASSERT_GT(chosen_before, 2500u);
  std::atomic<bool> done{false};
  std::thread workers([&] {
    c.run(3000, 8);
    done = true;
  });
  // Restart the follower while the shard commits; watch the leader's progress meanwhile.
  c.followers[1] = std::make_unique<FollowerThread>(c.follower_options(2));
  c.followers[1]->start();
  EXPECT_GT(c.followers[1]->recovered(), 100u);
  uint64_t chosen_while_catching_up = 0, last_chosen = c.leader->stats().chosen;
  for (int i = 0; i < 30'000 && !done; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const LeaderStats st = c.leader->stats();
    if (st.catching_up > 0 && st.chosen > last_chosen) {
      chosen_while_catching_up += st.chosen - last_chosen;
    }
    last_chosen = st.chosen;
  }
  workers.join();
  const uint64_t tid = c.close();
  auto reports = c.leader->collect_reports(tid, true, false, 30'000);
  ASSERT_TRUE(reports.ok()) << reports.status().to_string();
  const uint64_t digest = engine_digest(*c.engine);
  for (const FollowerReport& r : *reports) EXPECT_EQ(r.digest, digest) << "replica " << r.replica;
  const LeaderStats st = c.leader->stats();
  EXPECT_GT(st.catchup_wal_entries, 2000u);  // trimmed long ago: from the WAL
  EXPECT_EQ(st.catchup_errors, 0u);
  EXPECT_GT(chosen_while_catching_up, 50u) << "the leader stalled while replica 2 caught up";
  // The leader learns the follower's chosen index from its next answers and republishes its
  // stats on a tick: "caught up" shows a moment after the reports. Bounded: 10 s.
  uint64_t catching_up = st.catching_up;
  for (int i = 0; i < 1000 && catching_up != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    catching_up = c.leader->stats().catching_up;
  }
  EXPECT_EQ(catching_up, 0u);
}

// Bytes of every WAL segment in a replica's directory (stream-<s>[.<n>].wal); a segment
// deleted while we look counts 0.
uint64_t wal_bytes_on_disk(const std::string& dir) {
  uint64_t bytes = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with("stream-") || !name.ends_with(".wal")) continue;
    const uint64_t size = std::filesystem::file_size(e.path(), ec);
    if (!ec) bytes += size;
  }
  return bytes;
}

// Restarts replica 2 (index 1) with a checkpoint every 30 ms; returns its options.
FollowerOptions with_checkpoints(Cluster& c) {
  c.followers[1]->stop();
  FollowerOptions fo = c.follower_options(2);
  fo.checkpoint_interval_ms = 30;
  c.followers[1] = std::make_unique<FollowerThread>(fo);
  c.followers[1]->start();
  return fo;
}

// Runs rounds of transactions until replica 2 (index 1) published `checkpoints` more
// checkpoints; returns its WAL size on disk after each round. Bounded: 400 rounds.
std::vector<uint64_t> run_until_checkpoints(Cluster& c, uint64_t checkpoints, uint64_t seed) {
  const uint64_t target = c.followers[1]->follower().checkpoints().written + checkpoints;
  std::vector<uint64_t> wal_sizes;
  for (int round = 0; round < 400; ++round) {
    c.run(100, seed + static_cast<uint64_t>(round));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    wal_sizes.push_back(wal_bytes_on_disk(c.dir.path() + "/r2"));
    if (c.followers[1]->follower().checkpoints().written >= target) break;
  }
  EXPECT_GE(c.followers[1]->follower().checkpoints().written, target);
  return wal_sizes;
}

// Replica 2 checkpoints every 30 ms and truncates its WAL; replica 1 never does. Over a run
// with many checkpoints replica 2's WAL stays bounded (far below replica 1's, which grows with
// the run); restarted, it loads its newest checkpoint and replays only the WAL after it, and
// ends with the same store as the leader and as replica 1, which never truncated.
TEST(Replication, FollowerCheckpointsBoundItsWalAndARestartFromThemConverges) {
  Cluster c(/*streams=*/2, FsyncPolicy::kBatch);
  const FollowerOptions fo = with_checkpoints(c);
  ASSERT_TRUE(c.leader->wait_leading(10'000).ok());
  std::vector<uint64_t> sizes = run_until_checkpoints(c, 30, 100);
  const uint64_t full_wal = wal_bytes_on_disk(c.dir.path() + "/r1");
  const CheckpointCounters before = c.followers[1]->follower().checkpoints();
  EXPECT_GT(before.wal_bytes_deleted, 0u);
  // Over the second half of the run replica 2 keeps about three checkpoint intervals of WAL
  // (the median: a checkpoint delayed by a loaded machine lets it grow for a moment).
  ASSERT_GE(sizes.size(), 4u);
  std::vector<uint64_t> late(sizes.begin() + static_cast<ptrdiff_t>(sizes.size() / 2), sizes.end());
  std::nth_element(late.begin(), late.begin() + static_cast<ptrdiff_t>(late.size() / 2),
                   late.end());
  const uint64_t median = late[late.size() / 2];
  EXPECT_LT(median * 4, full_wal) << "replica 2's WAL: median " << median << " bytes over the "
                                  << "second half, replica 1's (never truncated) " << full_wal;
  uint64_t tid = c.close();
  ASSERT_TRUE(c.leader->collect_reports(tid, false, false, 20'000).ok());
  // Crash replica 2 (its files stay), commit on without it, restart it.
  c.followers[1]->stop();
  c.run(300, 9);
  c.followers[1] = std::make_unique<FollowerThread>(fo);
  c.followers[1]->start();
  const CheckpointCounters after = c.followers[1]->follower().checkpoints();
  EXPECT_GT(after.loaded_seq, 0u);
  EXPECT_EQ(after.refused, 0u);
  EXPECT_GT(c.followers[1]->recovered_tid(), 0u);
  tid = c.close();
  auto reports = c.leader->collect_reports(tid, true, false, 20'000);
  ASSERT_TRUE(reports.ok()) << reports.status().to_string();
  const uint64_t digest = engine_digest(*c.engine);
  ASSERT_EQ(reports->size(), 2u);
  for (const FollowerReport& r : *reports) EXPECT_EQ(r.digest, digest) << "replica " << r.replica;
}

// The newest checkpoint corrupted: the restart refuses it (saying so), loads the previous
// one, whose WAL was kept, and converges. Then every checkpoint torn: it recovers from the
// WAL it still has, learns the truncated prefix from the leader's WAL, and converges again.
TEST(Replication, FollowerRefusesABadCheckpointAndStillRecoversCorrectly) {
  Cluster c(/*streams=*/1, FsyncPolicy::kBatch);
  FollowerOptions fo = with_checkpoints(c);
  ASSERT_TRUE(c.leader->wait_leading(10'000).ok());
  run_until_checkpoints(c, 4, 200);
  c.followers[1]->stop();
  const std::string dir = c.dir.path() + "/r2";
  auto seqs = list_checkpoints(dir);
  ASSERT_TRUE(seqs.ok());
  // Two are kept; a third if it stopped between publishing one and deleting the oldest.
  ASSERT_GE(seqs->size(), 2u);
  ASSERT_LE(seqs->size(), 3u);
  {
    const std::string newest = checkpoint_path(dir, seqs->back());
    std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(newest) / 2));
    f.put('\x77');
  }
  // A crash while writing one leaves its .tmp: never loaded, removed at open.
  const std::string stale = checkpoint_path(dir, seqs->back() + 1000) + ".tmp";
  std::ofstream(stale) << "half a checkpoint";
  c.followers[1] = std::make_unique<FollowerThread>(fo);
  c.followers[1]->start();
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_EQ(c.followers[1]->follower().checkpoints().refused, 1u);
  EXPECT_EQ(c.followers[1]->follower().checkpoints().loaded_seq, (*seqs)[seqs->size() - 2]);
  uint64_t tid = c.close();
  auto reports = c.leader->collect_reports(tid, true, false, 20'000);
  ASSERT_TRUE(reports.ok()) << reports.status().to_string();
  for (const FollowerReport& r : *reports) {
    EXPECT_EQ(r.digest, engine_digest(*c.engine)) << "replica " << r.replica;
  }
  c.followers[1]->stop();
  seqs = list_checkpoints(dir);
  ASSERT_TRUE(seqs.ok());
  for (const uint64_t seq : *seqs) std::filesystem::resize_file(checkpoint_path(dir, seq), 100);
  fo.checkpoint_interval_ms = 0;
  c.followers[1] = std::make_unique<FollowerThread>(fo);
  c.followers[1]->start();
  EXPECT_EQ(c.followers[1]->follower().checkpoints().refused, seqs->size());
  EXPECT_EQ(c.followers[1]->follower().checkpoints().loaded_seq, 0u);
  c.run(100, 300);
  tid = c.close();
  reports = c.leader->collect_reports(tid, true, false, 30'000);
  ASSERT_TRUE(reports.ok()) << reports.status().to_string();
  for (const FollowerReport& r : *reports) {
    EXPECT_EQ(r.digest, engine_digest(*c.engine)) << "replica " << r.replica;
  }
}

// A replica directory marked with a newer layout (say, one whose WAL this binary would
// misread) is refused with one line naming the file; this binary's own marker is accepted.
// A leader that sends malformed control messages (wrong types, not JSON) does not crash its
// follower: they are dropped and it keeps answering; a malformed schema ends its run with an
// error naming it (nothing could be replayed without one).
TEST(Replication, FollowerDropsMalformedControlMessagesAndRefusesABadSchema) {
  auto listener = net::TcpListener::listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status().to_string();
  TempDir dir;
  FollowerOptions fo;
  fo.data_dir = dir.path();
  fo.quiet = true;
  fo.leader_port = listener->port();
  auto f = Follower::open(fo);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  Status ran;
  std::thread follower([&] { ran = (*f)->run(); });
  auto leader = listener->accept(10'000);
  ASSERT_TRUE(leader.ok()) << leader.status().to_string();
  auto send = [&](const std::string& text) {
    ASSERT_TRUE(
        leader->send(kControlSession, {reinterpret_cast<const uint8_t*>(text.data()), text.size()})
            .ok());
    ASSERT_TRUE(leader->flush().ok());
  };
  for (const char* bad : {"not json", "[1, 2]", R"({"type": 5})", R"({"type": "report",
       "target": "x"})",
                          R"({"type": "report", "digest": 1})", R"({"type": "replayed"})"}) {
    send(bad);
  }
  send(R"({"type": "report", "target": 0})");  // still answering: a status report comes back
  bool reported = false;
  for (int i = 0; i < 1000 && !reported; ++i) {  // bounded: 10 s
    net::Completion c[8];
    auto n = leader->poll(c, 8);
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    for (size_t k = 0; k < *n; ++k) {
      auto j = nlohmann::json::parse(c[k].bytes.begin(), c[k].bytes.end(), nullptr, false);
      reported = reported ||
                 (c[k].imm == kControlSession && j.is_object() && j.value("type", "") == "status");
    }
    leader->release();
    if (!reported) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(reported);
  send(R"({"type": "schema", "schema": 3, "streams": 1})");
  follower.join();
  EXPECT_EQ(ran.code(), Code::kInvalidArgument) << ran.to_string();
  EXPECT_NE(ran.message().find("the leader's schema"), std::string::npos) << ran.to_string();
}

// A connection whose hello is malformed (wrong field types) is refused, and garbage after a
// good follower's hello is dropped: the leader stays up and keeps its follower.
TEST(Replication, LeaderRefusesMalformedHellosAndDropsMalformedReports) {
  txn::Engine engine;
  LeaderOptions lo;
  lo.replicas = 2;
  auto l = ReplicationLeader::start(lo, engine);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  auto send = [](net::TcpEndpoint& ep, const std::string& text) {
    (void)ep.send(kControlSession, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
    (void)ep.flush();
  };
  for (const char* bad : {R"({"type": "hello", "replica": "one"})", R"({"type": 1})", "{"}) {
    auto ep = net::TcpEndpoint::connect("127.0.0.1", (*l)->port());
    ASSERT_TRUE(ep.ok()) << ep.status().to_string();
    send(*ep, bad);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ((*l)->followers_connected(), 0u) << bad;
  }
  auto ep = net::TcpEndpoint::connect("127.0.0.1", (*l)->port());
  ASSERT_TRUE(ep.ok()) << ep.status().to_string();
  send(*ep, R"({"type": "hello", "replica": 1})");
  // Bounded at 30 s: under TSan on a loaded machine the hello took 4-5 s to register.
  for (int i = 0; i < 3000 && (*l)->followers_connected() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ((*l)->followers_connected(), 1u);
  for (const char* bad : {R"({"type": "replayed", "tid": -1})", R"({"type": "status",
       "applied_tid": "x"})",
                          R"({"type": ["status"]})", "[]"}) {
    send(*ep, bad);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ((*l)->followers_connected(), 1u);
}

TEST(Replication, FollowerRefusesANewerDirectoryLayout) {
  TempDir dir;
  FollowerOptions fo;
  fo.data_dir = dir.path();
  fo.quiet = true;
  auto f = Follower::open(fo);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  f->reset();
  ASSERT_TRUE(Follower::open(fo).ok());  // its own marker, written by the first open
  std::ofstream(dir.path() + "/layout") << "shoal-replica-dir 4\n";
  auto newer = Follower::open(fo);
  ASSERT_FALSE(newer.ok());
  EXPECT_EQ(newer.status().code(), Code::kNotSupported);
  EXPECT_EQ(newer.status().message(), "follower: " + dir.path() +
                                          "/layout: directory layout 4, this binary reads up "
                                          "to 3; refused");
}

// Layouts 2 and 1 (no marker, replica files) hold acceptor journals with a record per entry,
// which this binary no longer reads: refused with what to do; an empty directory is fine.
TEST(Replication, FollowerRefusesAnOlderDirectoryLayout) {
  const std::string advice =
      ", this binary reads layout 3; move the directory away and start the replica on an "
      "empty one (it bootstraps from its leader)";
  FollowerOptions fo;
  fo.quiet = true;
  {
    TempDir dir;
    fo.data_dir = dir.path();
    std::ofstream(dir.path() + "/layout") << "shoal-replica-dir 2\n";
    auto older = Follower::open(fo);
    ASSERT_FALSE(older.ok());
    EXPECT_EQ(older.status().code(), Code::kNotSupported);
    EXPECT_EQ(older.status().message(),
              "follower: " + dir.path() + "/layout: directory layout 2" + advice);
  }
  TempDir dir;
  fo.data_dir = dir.path();
  std::ofstream(dir.path() + "/stream-0.wal") << "";
  auto unmarked = Follower::open(fo);
  ASSERT_FALSE(unmarked.ok());
  EXPECT_EQ(unmarked.status().message(),
            "follower: " + dir.path() + "/layout: directory layout 1" + advice);
  std::filesystem::remove(dir.path() + "/stream-0.wal");
  EXPECT_TRUE(Follower::open(fo).ok());
}

}  // namespace replication_test
}  // namespace shoal::repl

namespace shoal::repl {
namespace replication_test {  // named, not anonymous: unique in a unity build

Status insert_row(txn::Txn& txn, const void* args, void*) {
  auto* table = static_cast<txn::Table<1>*>(txn.engine().tables()[0].get());
  const uint64_t k = *static_cast<const uint64_t*>(args);
  return txn.insert(*table, Key<1>{{k}}, Row{k, k * 3});
}

// Runs `txns` inserts of fresh keys on each stream of `leader` over `engine`; returns each
// key's commit TID.
std::vector<std::pair<uint64_t, uint64_t>> insert_keys(txn::Engine& engine,
                                                       ReplicationLeader& leader, uint32_t txns,
                                                       uint64_t key_base) {
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> per(leader.streams());
  std::vector<std::thread> threads;
  for (uint32_t s = 0; s < leader.streams(); ++s) {
    threads.emplace_back([&, s] {
      txn::Worker* w = engine.make_worker();
      StreamAppender& a = leader.appender(s);
      w->set_commit_hook(&StreamAppender::commit_hook, &a);
      w->txn().set_tid_floor(a.promised_tid());
      for (uint32_t i = 0; i < txns; ++i) {
        const uint64_t k = key_base + s * 1'000'000 + i;
        const Status st = w->run(&insert_row, &k);
        EXPECT_TRUE(st.ok()) << st.to_string();
        per[s].emplace_back(k, a.last_commit_tid());
      }
      a.flush();
      w->set_commit_hook(nullptr, nullptr);
    });
  }
  for (auto& t : threads) t.join();
  std::vector<std::pair<uint64_t, uint64_t>> all;
  for (auto& v : per) all.insert(all.end(), v.begin(), v.end());
  return all;
}

bool has_key(txn::Engine& engine, txn::Worker* w, uint64_t k) {
  auto* table = static_cast<txn::Table<1>*>(engine.tables()[0].get());
  Row r{};
  struct Args {
    txn::Table<1>* table;
    uint64_t k;
    Row* out;
  } args{table, k, &r};
  const Status st = w->run(
      [](txn::Txn& txn, const void* a, void*) {
        const auto* x = static_cast<const Args*>(a);
        return txn.get(*x->table, Key<1>{{x->k}}, x->out);
      },
      &args);
  return st.ok() && r.a == k && r.b == k * 3;
}

// Stops the lone leader of `c` and opens its directory as `shoal server --recover-epoch` does:
// a follower of one replica, itself its leader. Null after a failed expectation.
std::unique_ptr<Follower> reopen_lone_replica(Cluster& c) {
  FollowerOptions fo = c.follower_options(0);
  c.leader->stop();
  c.leader.reset();
  fo.replicas = 1;
  fo.leader_replica = 0;
  auto lone = Follower::open(fo);
  EXPECT_TRUE(lone.ok()) << lone.status().to_string();
  return lone.ok() ? std::move(*lone) : nullptr;
}

// What `shoal server --recover-epoch` does over a lone replica's directory: `lone`, opened
// over it, handed over and led in epoch 2 with the takeover. Its store must hold every
// transaction up to final_tid, discard none, and have `digest`.
void lead_recovered_lone_replica(Follower& lone, uint32_t streams, uint64_t final_tid,
                                 uint64_t digest) {
  std::unique_ptr<txn::Engine> engine;
  auto takeover = lone.hand_over(&engine);
  ASSERT_TRUE(takeover.ok()) << takeover.status().to_string();
  LeaderOptions lo;
  lo.streams = streams;
  lo.replicas = 1;
  lo.appender.epoch = 2;
  lo.fsync = FsyncPolicy::kAlways;
  lo.paxos = paxos_options_for_rtt(0);
  lo.paxos.epoch = 2;
  lo.schema = Schema::of(*engine, "");
  auto led = ReplicationLeader::start(lo, *engine, &*takeover);
  ASSERT_TRUE(led.ok()) << led.status().to_string();
  auto result = (*led)->wait_takeover(20'000);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_GE(result->final_tid, final_tid);
  EXPECT_EQ(result->discarded_txns, 0u);
  EXPECT_EQ(engine_digest(*engine), digest);
  (*led)->stop();
}

// A shard's only replica given a WAL (`cluster up --fsync` on one replica per shard): a stream
// of one acceptor, synced on the replication thread (no syncer), whose own vote chooses each
// entry only once synced. Every committed transaction is chosen and persisted, and the
// directory alone rebuilds the same store: opened as a lone follower (itself its leader) and
// handed over, then led in epoch 2 with the takeover, as `shoal server --recover-epoch` does.
TEST(Replication, LoneReplicaSyncsBeforeItChoosesAndRebuildsItsStoreFromItsWal) {
  Cluster c(/*streams=*/2, FsyncPolicy::kAlways, 16, 256, LinkKind::kTcp, 0, 0, /*replicas=*/1);
  ASSERT_TRUE(c.leader->wait_leading(10'000).ok());
  c.run(1500, 11);
  const uint64_t final_tid = c.close();
  for (int i = 0; i < 500 && c.leader->watermark() < final_tid; ++i) {  // bounded: 5 s
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GE(c.leader->watermark(), final_tid);
  ReplicationPositions p = c.leader->positions();
  for (int i = 0; i < 300 && (p.streams.size() != 2 || p.streams[1].persisted == 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the tick publishes them
    p = c.leader->positions();
  }
  ASSERT_EQ(p.streams.size(), 2u);
  for (const StreamPosition& s : p.streams) {
    EXPECT_GT(s.chosen, 0u);
    EXPECT_EQ(s.persisted, s.chosen);  // nothing chosen that its WAL had not synced
  }
  EXPECT_GT(c.leader->fsync_latency().count(), 0u);
  const uint64_t digest = engine_digest(*c.engine);
  std::unique_ptr<Follower> lone = reopen_lone_replica(c);
  ASSERT_NE(lone, nullptr);
  std::atomic<bool> stop{false};
  EXPECT_EQ(lone->run(&stop).code(), Code::kInvalidArgument);  // nobody to follow
  lead_recovered_lone_replica(*lone, /*streams=*/2, final_tid, digest);
}

// A lone replica with a checkpoint interval (`--checkpoint-interval-ms` on one replica per
// shard): no follower writes checkpoints for it, so every interval its replication thread
// closes each stream's WAL segment and a background thread rebuilds the store at that cut from
// the directory alone (the newest checkpoint plus the closed segments), publishes it as a
// checkpoint and the leader deletes the segments the older of its two newest covers. A stream
// never holds more than four segments (one closed per compaction, those behind the older held
// checkpoint deleted at each registration, whatever the machine's load makes a rebuild take),
// most of what was logged is deleted, and a restart loads the newest checkpoint, reads only
// the WAL after it and rebuilds the live engine's store exactly (two streams: the cut is per
// stream, with records held above the shard watermark).
TEST(Replication, LoneReplicaCompactsItsWalIntoCheckpointsAndRestartsFromThem) {
  Cluster c(/*streams=*/2, FsyncPolicy::kAlways, 16, 256, LinkKind::kTcp,
            /*checkpoint_interval_ms=*/50, 0, /*replicas=*/1);
  ASSERT_TRUE(c.leader->wait_leading(10'000).ok());
  const std::string dir = c.dir.path() + "/r0";
  size_t segments_max = 0;  // of one stream, live at once
  const auto note_segments = [&] {
    for (uint32_t s = 0; s < 2; ++s) {
      size_t n = 0;
      for (const auto& e : std::filesystem::directory_iterator(dir)) {
        const std::string name = e.path().filename().string();
        n += name.starts_with(fmt::format("stream-{}.", s)) && name.ends_with(".wal");
      }
      segments_max = std::max(segments_max, n);
    }
  };
  // After each round of writes a compaction registers (one that began during the next round's
  // writes covers this round's), so the older checkpoint held at the end covers all but the
  // last two rounds: however slow the machine makes a rebuild (its thread runs at nice 10).
  for (uint32_t round = 0; round < 8; ++round) {
    c.run(250, 40 + round);
    const uint64_t until = c.leader->stats().checkpoints_compacted + 1;
    for (int i = 0; i < 3000 && c.leader->stats().checkpoints_compacted < until; ++i) {
      note_segments();  // bounded: 30 s
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    note_segments();
  }
  const uint64_t final_tid = c.close();
  for (int i = 0; i < 500 && c.leader->watermark() < final_tid; ++i) {  // bounded: 5 s
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GE(c.leader->watermark(), final_tid);
  const LeaderStats st = c.leader->stats();
  EXPECT_GE(st.checkpoints_compacted, 8u);
  EXPECT_EQ(st.compactions_failed, 0u);
  EXPECT_EQ(st.checkpoints_fetched, 0u);
  EXPECT_GT(st.wal_bytes_deleted, 0u);
  uint64_t logged = 0;
  for (const StreamPosition& s : c.leader->positions().streams) logged += s.chosen_bytes;
  EXPECT_GT(st.wal_bytes_deleted, logged / 4) << "logged " << logged;
  EXPECT_LE(segments_max, 4u);
  EXPECT_FALSE(std::filesystem::exists(dir + "/stream-0.wal")) << "segment 0 deleted";
  auto kept = list_checkpoints(dir);
  ASSERT_TRUE(kept.ok());
  EXPECT_GE(kept->size(), 2u);
  EXPECT_LE(kept->size(), 3u);  // two held (and one being published)
  const uint64_t digest = engine_digest(*c.engine);
  const ReplicationPositions positions = c.leader->positions();
  // The restart (`--recover-epoch`): the newest checkpoint, then the WAL after it.
  std::unique_ptr<Follower> lone = reopen_lone_replica(c);
  ASSERT_NE(lone, nullptr);
  // The newest (one that was being written when the leader stopped is as good).
  EXPECT_GE(lone->checkpoints().loaded_seq, kept->back());
  uint64_t slots = 0;
  for (const StreamPosition& s : positions.streams) slots += s.chosen;
  EXPECT_LT(lone->recovered_slots(), slots / 2) << "only the WAL after the checkpoint";
  EXPECT_FALSE(lone->wal_head_missing());
  lead_recovered_lone_replica(*lone, /*streams=*/2, final_tid, digest);
}

// Design section 5: follower 1 (index 0), its run over, promoted in place as the leader of
// epoch 2 over its own engine and acceptor state; follower 2 re-pointed at it and running.
// Null (after a failed expectation) when the hand-over or the start fails.
std::unique_ptr<ReplicationLeader> promote_follower_1(Cluster& c,
                                                      std::unique_ptr<txn::Engine>* engine) {
  auto takeover = c.followers[0]->follower().hand_over(engine);
  EXPECT_TRUE(takeover.ok()) << takeover.status().to_string();
  if (!takeover.ok()) return nullptr;
  LeaderOptions lo;
  lo.streams = 2;
  lo.replicas = 3;
  lo.replica = 1;
  lo.appender.epoch = 2;
  lo.appender.limits.batch_txns_max = 16;
  lo.appender.limits.batch_bytes_max = 64 * 1024;
  lo.appender.pool_buffers = 8;
  lo.fsync = FsyncPolicy::kBatch;
  lo.paxos = paxos_options_for_rtt(0);
  lo.paxos.epoch = 2;
  lo.schema = Schema::of(**engine, "");
  auto promoted = ReplicationLeader::start(lo, **engine, &*takeover);
  EXPECT_TRUE(promoted.ok()) << promoted.status().to_string();
  if (!promoted.ok()) return nullptr;
  c.followers[1]->follower().set_leader(1, "127.0.0.1", (*promoted)->port());
  c.followers[1]->rerun();
  return std::move(*promoted);
}

// Design section 5, one shard: the leader dies with transactions in flight; follower 1 is
// promoted in place (its replayed engine becomes the leader's store, its acceptor state the
// streams'), runs phase 1 with a higher ballot, installs what a majority holds up to the
// final watermark, and leads a new epoch that follower 2 (re-pointed at it) replicates.
// Every acknowledged transaction (at or below the old leader's watermark) survives; nothing
// above the final watermark is installed anywhere; the survivors converge.
TEST(Replication, FollowerPromotedInPlaceKeepsEveryAcknowledgedTransaction) {
  Cluster c(/*streams=*/2, FsyncPolicy::kBatch);
  ASSERT_TRUE(c.leader->wait_leading(10'000).ok());
  c.run(500, 7);  // updates and removes of keys 1..200
  auto before = insert_keys(*c.engine, *c.leader, 300, 1'000);
  // What a client was told: every transaction at or below the watermark is acknowledged.
  const uint64_t acknowledged = c.leader->watermark();
  c.leader->stop();  // the leader is gone; its last entries may be chosen, accepted or lost
  for (auto& f : c.followers) f->join();

  std::unique_ptr<txn::Engine> engine;
  std::unique_ptr<ReplicationLeader> promoted = promote_follower_1(c, &engine);
  ASSERT_NE(promoted, nullptr);
  ReplicationLeader& leader = *promoted;
  auto result = leader.wait_takeover(20'000);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_GE(result->final_tid, acknowledged);
  EXPECT_GE(result->floor_tid, result->final_tid);
  std::fprintf(stderr,
               "takeover: acknowledged %lx, final %lx, floor %lx, %lu txns installed, %lu "
               "discarded, %.1f ms\n",
               acknowledged, result->final_tid, result->floor_tid, result->replayed_txns,
               result->discarded_txns, static_cast<double>(result->elapsed_ns) / 1e6);
  txn::Worker* reader = engine->make_worker();
  for (const auto& [k, tid] : before) {
    if (tid <= acknowledged) {
      ASSERT_TRUE(has_key(*engine, reader, k))
          << "acknowledged key " << k << " (TID " << tid << ") lost";
    }
    EXPECT_EQ(has_key(*engine, reader, k), tid <= result->final_tid) << "key " << k;
  }
  for (uint32_t s = 0; s < 2; ++s) {
    ASSERT_TRUE(
        leader.appender(s).finish(result->floor_tid, kLogFlagEpochStart, result->final_tid).ok());
  }
  engine->start_leading((result->floor_tid >> 32) + 1);
  auto after = insert_keys(*engine, leader, 300, 5'000'000);
  uint64_t floor = 0;
  for (uint32_t s = 0; s < 2; ++s) floor = std::max(floor, leader.appender(s).last_commit_tid());
  for (uint32_t s = 0; s < 2; ++s) ASSERT_TRUE(leader.appender(s).finish(floor).ok());
  auto reports = leader.collect_reports(floor, true, false, 20'000, nullptr, /*skip_lost=*/true);
  ASSERT_TRUE(reports.ok()) << reports.status().to_string();
  const uint64_t digest = engine_digest(*engine);
  bool follower2_reported = false;
  for (const FollowerReport& r : *reports) {
    if (r.replica == 2) {
      follower2_reported = true;
      EXPECT_EQ(r.digest, digest) << "follower 2 differs from the promoted leader";
    } else {
      EXPECT_TRUE(r.lost) << "replica " << r.replica;
    }
  }
  EXPECT_TRUE(follower2_reported);
  for (const auto& [k, tid] : after) EXPECT_TRUE(has_key(*engine, reader, k)) << k;
  leader.stop();
  c.followers[1]->stop();
}

// WAL truncation on the leader: both followers checkpoint every 30 ms and the leader fetches
// their checkpoints into its own directory and deletes the WAL segments every replica can do
// without, so over a run of many checkpoints its WAL stays bounded (far below what it wrote).
// Then the leader dies; follower 1 is promoted, and the former leader restarts over its
// truncated directory as a follower of it: it loads the fetched checkpoint, replays its WAL
// after the cut, catches up from the new leader, and ends with the new leader's store.
TEST(Replication, LeaderTruncatesItsWalBehindFetchedCheckpointsAndAFormerLeaderRejoins) {
  Cluster c(/*streams=*/2, FsyncPolicy::kBatch, 16, 256, LinkKind::kTcp,
            /*checkpoint_interval_ms=*/30);
  ASSERT_TRUE(c.leader->wait_leading(10'000).ok());
  const std::string r0 = c.dir.path() + "/r0";
  std::vector<uint64_t> sizes;
  for (int round = 0; round < 400; ++round) {  // bounded
    c.run(100, 1000 + static_cast<uint64_t>(round));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    sizes.push_back(wal_bytes_on_disk(r0));
    if (c.leader->stats().checkpoints_fetched >= 30 && round >= 100) break;
  }
  const LeaderStats st = c.leader->stats();
  EXPECT_GE(st.checkpoints_fetched, 30u);
  EXPECT_GT(st.checkpoint_bytes_fetched, 0u);
  EXPECT_EQ(st.checkpoint_fetches_failed, 0u);
  ASSERT_GT(st.wal_bytes_deleted, 0u);
  // Written = on disk + deleted. Over the second half of the run the leader keeps a small
  // part of it (median: a fetch delayed by a loaded machine lets it grow for a moment).
  const uint64_t written = wal_bytes_on_disk(r0) + st.wal_bytes_deleted;
  ASSERT_GE(sizes.size(), 4u);
  std::vector<uint64_t> late(sizes.begin() + static_cast<ptrdiff_t>(sizes.size() / 2), sizes.end());
  std::nth_element(late.begin(), late.begin() + static_cast<ptrdiff_t>(late.size() / 2),
                   late.end());
  const uint64_t median = late[late.size() / 2];
  EXPECT_LT(median * 4, written) << "leader WAL: median " << median << " bytes on disk over the "
                                 << "second half, " << written << " written";
  EXPECT_FALSE(std::filesystem::exists(r0 + "/stream-0.wal")) << "the first segment stayed";
  auto held = list_checkpoints(r0);
  ASSERT_TRUE(held.ok());
  EXPECT_GE(held->size(), 2u);
  EXPECT_LE(held->size(), 3u);
  const uint64_t tid = c.close();
  auto reports = c.leader->collect_reports(tid, true, false, 20'000);
  ASSERT_TRUE(reports.ok()) << reports.status().to_string();
  auto before = insert_keys(*c.engine, *c.leader, 200, 1'000);  // some in flight at the crash
  const uint64_t acknowledged = c.leader->watermark();

  FollowerOptions fo = c.follower_options(0);  // the former leader's, once it restarts
  // The leader dies (its files closed, as with the process). Follower 1 takes over.
  c.leader->stop();
  for (auto& f : c.followers) f->join();
  c.leader.reset();
  std::unique_ptr<txn::Engine> engine;
  std::unique_ptr<ReplicationLeader> promoted = promote_follower_1(c, &engine);
  ASSERT_NE(promoted, nullptr);
  ReplicationLeader& leader = *promoted;
  auto result = leader.wait_takeover(20'000);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_GE(result->final_tid, acknowledged);
  for (uint32_t s = 0; s < 2; ++s) {
    ASSERT_TRUE(
        leader.appender(s).finish(result->floor_tid, kLogFlagEpochStart, result->final_tid).ok());
  }
  engine->start_leading((result->floor_tid >> 32) + 1);

  // The former leader restarts over its truncated directory, as a follower of replica 1.
  fo.data_dir = r0;
  fo.leader_replica = 1;
  fo.leader_port = leader.port();
  fo.checkpoint_interval_ms = 0;
  FollowerThread former(fo);
  former.start();
  ASSERT_GT(former.follower().checkpoints().loaded_seq, 0u) << "no fetched checkpoint loaded";
  EXPECT_EQ(former.follower().checkpoints().refused, 0u);
  EXPECT_GE(former.recovered_tid(), tid);
  auto after = insert_keys(*engine, leader, 200, 5'000'000);
  uint64_t floor = 0;
  for (uint32_t s = 0; s < 2; ++s) floor = std::max(floor, leader.appender(s).last_commit_tid());
  for (uint32_t s = 0; s < 2; ++s) ASSERT_TRUE(leader.appender(s).finish(floor).ok());
  auto rejoined = leader.collect_reports(floor, true, false, 30'000);
  ASSERT_TRUE(rejoined.ok()) << rejoined.status().to_string();
  const uint64_t digest = engine_digest(*engine);
  ASSERT_EQ(rejoined->size(), 2u);
  for (const FollowerReport& r : *rejoined) {
    EXPECT_EQ(r.digest, digest) << "replica " << r.replica << " differs from the new leader";
  }
  txn::Worker* reader = engine->make_worker();
  for (const auto& [k, t] : before) {
    if (t <= acknowledged) {
      EXPECT_TRUE(has_key(*engine, reader, k)) << "acknowledged " << k;
    }
  }
  for (const auto& [k, t] : after) EXPECT_TRUE(has_key(*engine, reader, k)) << k;
  leader.stop();
  former.stop();
  c.followers[1]->stop();

  // Every checkpoint of the former leader torn: its WAL lost its head, so it cannot rebuild
  // its store alone, and says so (`--recover-epoch` refuses on this, replica_cli.cc).
  auto seqs = list_checkpoints(r0);
  ASSERT_TRUE(seqs.ok());
  ASSERT_FALSE(seqs->empty());
  for (const uint64_t seq : *seqs) std::filesystem::resize_file(checkpoint_path(r0, seq), 100);
  auto torn = Follower::open(fo);
  ASSERT_TRUE(torn.ok()) << torn.status().to_string();
  EXPECT_EQ((*torn)->checkpoints().refused, seqs->size());
  EXPECT_TRUE((*torn)->wal_head_missing());
}

// Suspecting a leader (docs/REPLICATION.md): a follower's directory after a bootstrap and some
// transactions, its leader and the other follower stopped; the follower is not open.
struct StoppedFollowerDir {
  Cluster c{/*streams=*/1};
  StoppedFollowerDir() {
    EXPECT_TRUE(c.leader->wait_leading(10'000).ok());
    auto boot = bootstrap_followers(*c.leader, *c.engine, 60'000);
    EXPECT_TRUE(boot.ok()) << boot.status().to_string();
    c.run(100, 21);
    const uint64_t tid = c.close();
    EXPECT_TRUE(c.leader->collect_reports(tid, false, false, 20'000).ok());
    for (auto& f : c.followers) f->stop();
    c.leader->stop();
  }
  // Replica 1 restarting from its directory towards `leader_port`, which suspects a serving
  // leader after 50 ms of silence.
  FollowerOptions restarted(uint16_t leader_port, uint64_t connect_timeout_ms) const {
    FollowerOptions fo = c.follower_options(1);
    fo.leader_port = leader_port;
    fo.leader_timeout_ms = 50;
    fo.connect_timeout_ms = connect_timeout_ms;
    return fo;
  }
};

// A follower's run on its own thread: when it returned, and whether it found its leader
// silent.
struct TimedRun {
  std::unique_ptr<Follower> follower;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> ended_ns{0};
  bool silent = false;
  std::thread thread;
  explicit TimedRun(const FollowerOptions& fo) {
    auto f = Follower::open(fo);
    EXPECT_TRUE(f.ok()) << f.status().to_string();
    if (!f.ok()) return;
    follower = std::move(*f);
    thread = std::thread([this] {
      EXPECT_TRUE(follower->run().ok());
      silent = follower->leader_silent();
      ended_ns = RealEnv::instance().now_ns();
      done = true;
    });
  }
  ~TimedRun() {
    if (thread.joinable()) thread.join();
  }
};

void send_text(net::TcpEndpoint& ep, const std::string& text) {
  ASSERT_TRUE(
      ep.send(kControlSession, {reinterpret_cast<const uint8_t*>(text.data()), text.size()}).ok());
  ASSERT_TRUE(ep.flush().ok());
}

// Reads (and drops) what the follower sent, for about `ms`: its hello, heartbeats, reports.
void drain_for(net::TcpEndpoint& ep, uint64_t ms) {
  const uint64_t until = RealEnv::instance().now_ns() + ms * 1'000'000;
  while (RealEnv::instance().now_ns() < until) {  // bounded by `ms`
    net::Completion c[16];
    auto n = ep.poll(c, 16);
    if (!n.ok()) return;
    ep.release();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// The restart of a cluster from disk under load: a follower restarted from its WAL (its
// bootstrap installed, so its leader timeout armed) connects as soon as its restarting leader
// listens, while that leader still sets up its streams and takes over; a follower that started
// its 100 ms clock at the connection found a live leader silent and had it deposed (2 of 3
// restarts on a loaded 2-core machine). Now silence counts against the leader timeout only
// once the leader spoke and serves: here a leader that accepts 10 leader timeouts late, then
// says it is starting and is silent 10 leader timeouts more, is not suspected; once it says
// it serves, its silence is suspected within the leader timeout as before.
TEST(Replication, RestartedFollowerSuspectsItsLeaderOnlyOnceItServes) {
  StoppedFollowerDir d;
  auto listener = net::TcpListener::listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status().to_string();
  TimedRun run(d.restarted(listener->port(), 60'000));
  ASSERT_NE(run.follower, nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // listening, not talking
  EXPECT_FALSE(run.done) << "suspected a leader that had not spoken yet";
  auto leader = listener->accept(10'000);
  ASSERT_TRUE(leader.ok()) << leader.status().to_string();
  send_text(*leader, nlohmann::json{{"type", "schema"},
                                    {"schema", Schema::of(*d.c.engine, "").to_json()},
                                    {"streams", 1},
                                    {"leader", 0},
                                    {"starting", true}}
                         .dump());
  drain_for(*leader, 500);  // starting, and silent
  EXPECT_FALSE(run.done) << "suspected a starting leader";
  EXPECT_FALSE(run.follower->leader_serving());
  const uint64_t serving_ns = RealEnv::instance().now_ns();
  send_text(*leader, R"({"type": "serving"})");
  drain_for(*leader, 2'000);  // silent from now on (returns early once the follower hangs up)
  for (int i = 0; i < 200 && !run.done; ++i) {  // bounded: its run() ends after it hangs up
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(run.done) << "a serving leader silent for 2 s was not suspected";
  EXPECT_TRUE(run.silent);
  EXPECT_TRUE(run.follower->leader_serving());
  const uint64_t took_ms = (run.ended_ns - serving_ns) / 1'000'000;
  EXPECT_GE(took_ms, 50u);
  EXPECT_LT(took_ms, 1'000u) << "the leader timeout is 50 ms";
}

// A leader that never speaks (its connection accepted by the kernel, nothing more) is given
// up on after the connect timeout, as one that never listens: bounded, and not by the much
// shorter leader timeout.
TEST(Replication, RestartedFollowerGivesUpOnALeaderThatNeverSpeaksAfterItsConnectTimeout) {
  StoppedFollowerDir d;
  auto listener = net::TcpListener::listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status().to_string();
  const uint64_t start_ns = RealEnv::instance().now_ns();
  TimedRun run(d.restarted(listener->port(), /*connect_timeout_ms=*/400));
  ASSERT_NE(run.follower, nullptr);
  for (int i = 0; i < 1000 && !run.done; ++i) {  // bounded: 10 s
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(run.done);
  EXPECT_TRUE(run.silent);
  EXPECT_FALSE(run.follower->leader_serving());
  EXPECT_GE((run.ended_ns - start_ns) / 1'000'000, 400u) << "suspected before the connect timeout";
}

// The real leader's side: with announces_serving its schema message says it is starting, and
// note_serving() reaches the followers connected before it.
TEST(Replication, LeaderAnnouncesWhenItServes) {
  TempDir dir;
  txn::Engine engine;
  engine.create_table<1>("rows");
  LeaderOptions lo;
  lo.replicas = 2;
  lo.paxos = paxos_options_for_rtt(0);
  lo.schema = Schema::of(engine, "");
  lo.announces_serving = true;
  auto leader = ReplicationLeader::start(lo, engine);
  ASSERT_TRUE(leader.ok()) << leader.status().to_string();
  FollowerOptions fo;
  fo.replicas = 2;
  fo.leader_port = (*leader)->port();
  fo.data_dir = dir.path() + "/r1";
  fo.paxos.max_message_bytes = replication_message_bytes(fo.paxos, BatchLimits{}.batch_bytes_max);
  fo.quiet = true;
  FollowerThread f(fo);
  f.start();
  ASSERT_TRUE((*leader)->wait_leading(10'000).ok());  // the follower heard the leader
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(f.follower().leader_serving()) << "the schema said it is starting";
  (*leader)->note_serving();
  for (int i = 0; i < 1000 && !f.follower().leader_serving(); ++i) {  // bounded: 10 s
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(f.follower().leader_serving());
  f.stop();
  (*leader)->stop();
}

}  // namespace replication_test
}  // namespace shoal::repl
