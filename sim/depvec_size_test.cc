// How many bytes of dependency metadata a transaction carries, compact against uncompacted and
// dense, at 2 to 1000 shards (issue 4, "sparse dependency vectors"; issue 16 item 5). The whole
// cluster runs in the simulator: S shards (Engine + Participant each), one coordinator per
// shard running read-modify-write transactions of which a fraction reaches a second shard,
// every hop delayed by a seeded amount. After each commit the transaction's real vector
// (DistTxn::vector(): the proposals of the shards it wrote, merged with everything its reads
// depended on, transitively) is encoded by the code the servers ship (src/txn/depvec.h): its
// 2PC install message's compact form (txn::dep_wire_entries / encode_dep_wire) and each
// written shard's log record (txn::compact_entries, repl::log_dep_bytes), both against a real
// dist::VectorWatermark as the base. Only that watermark's values are modelled here, as
// "every shard's commits older than the replication lag are replicated" (the shard servers
// learn theirs from the Paxos streams, piggybacked replies and the exchange).
#include <gtest/gtest.h>

#include <cstdio>
#include <deque>
#include <memory>
#include <vector>

#include "sim/sim_env.h"
#include "src/base/test_scale.h"
#include "src/dist/coordinator.h"
#include "src/dist/local_link.h"
#include "src/dist/vector_watermark.h"
#include "src/repl/log_format.h"
#include "src/runtime/event_loop.h"
#include "src/txn/depvec.h"

namespace shoal::sim {
namespace {

constexpr uint32_t kTableId = 0;
constexpr uint64_t kKeysPerShard = 64;
constexpr uint64_t kReplicationLagNs = 20'000'000;  // 20 ms: a WAN round trip and a batch

struct Counter {
  uint64_t value;
};

// Per-shard commit log for the watermark model: (virtual commit time, TID), oldest first.
struct ShardCommits {
  std::deque<std::pair<uint64_t, uint64_t>> recent;
  uint64_t replicated_tid = 0;
  void advance(uint64_t now_ns) {
    while (!recent.empty() && recent.front().first + kReplicationLagNs <= now_ns) {
      replicated_tid = std::max(replicated_tid, recent.front().second);
      recent.pop_front();
    }
  }
};

struct SizeStats {
  uint64_t txns = 0;
  txn::DepVecBytes wire;  // the install message's vector, compact (encode_dep_wire)
  uint64_t log_records = 0;
  uint64_t log_bytes = 0;       // each written shard's record: log_dep_bytes of the compact entries
  uint64_t log_full_bytes = 0;  // the same with every other-shard entry (before)
  uint64_t max_entries = 0;     // most entries above the base in one vector
};

struct World {
  World(uint64_t seed, uint32_t shards)
      : env(seed), loop(env, rt::LoopOptions{}), rng(seed), watermark(loop, shards, 1) {
    env.attach(loop);
    commits.resize(shards);
    for (uint32_t s = 0; s < shards; ++s) {
      txn::EngineOptions o;
      o.epoch_ticker = false;
      o.shard_id = s;
      o.lock_wait_spins_max = 16;
      engines.push_back(std::make_unique<txn::Engine>(o, &env));
      auto* table = engines.back()->create_table<1>("counters");
      for (uint64_t k = 0; k < kKeysPerShard; ++k) {
        Status st = table->load(key1(s * kKeysPerShard + k), Counter{0});
        SHOAL_ASSERT(st.ok(), "%s", st.to_string().c_str());
      }
      participants.push_back(std::make_unique<dist::Participant>(*engines.back(), s, 64));
      links.push_back(
          std::make_unique<dist::LocalLink>(*participants.back(), loop, rng, 20'000, 200'000));
    }
    std::vector<dist::ShardLink*> ptrs;
    for (auto& l : links) ptrs.push_back(l.get());
    for (uint32_t s = 0; s < shards; ++s) {
      dist::CoordinatorOptions co;
      co.shard_id = s;
      co.max_retries = 1000;
      coordinators.push_back(std::make_unique<dist::Coordinator>(co, ptrs, &epoch));
    }
  }
  ~World() { env.detach(loop); }

  SimEnv env;
  rt::EventLoop loop;
  Rng rng;
  dist::VectorWatermark watermark;  // the base: raised from the model below, never waited on
  uint64_t epoch = 1;
  std::vector<std::unique_ptr<txn::Engine>> engines;
  std::vector<std::unique_ptr<dist::Participant>> participants;
  std::vector<std::unique_ptr<dist::LocalLink>> links;
  std::vector<std::unique_ptr<dist::Coordinator>> coordinators;
  std::vector<ShardCommits> commits;
};

struct IncrementArgs {
  uint64_t keys[2];
  uint32_t shards[2];
};

rt::Task<Status> increment_two(dist::DistTxn& txn, const void* args_ptr, void*) {
  const auto& a = *static_cast<const IncrementArgs*>(args_ptr);
  for (int i = 0; i < 2; ++i) {
    Counter c{};
    SHOAL_CO_TRY(co_await txn.get(a.shards[i], kTableId, &a.keys[i], 1, &c, sizeof(c)));
    c.value += 1;
    SHOAL_CO_TRY(txn.put(a.shards[i], kTableId, &a.keys[i], 1, &c, sizeof(c)));
  }
  co_return Status::Ok();
}

void account(World* w, const dist::DistTxn& txn, SizeStats* stats) {
  const uint64_t now = w->env.now_ns();
  for (const txn::DepEntry& e : txn.vector().entries()) {
    w->commits[e.shard].recent.emplace_back(now, e.ts);  // written shards commit at e.ts
  }
  for (const txn::DepEntry& e : txn.vector().entries()) {
    ShardCommits& sc = w->commits[e.shard];
    sc.advance(now);
    Status st = w->watermark.raise(e.shard, sc.replicated_tid);
    SHOAL_ASSERT(st.ok(), "%s", st.to_string().c_str());
  }
  const txn::DepBase base = w->watermark.base();
  // The wire: the vector as the coordinator's install request carries it.
  const size_t above = txn::dep_wire_entries(txn.vector(), base);
  std::vector<uint8_t> wire(txn::dep_wire_bytes(above));
  txn::encode_dep_wire(txn.vector(), base, wire, &stats->wire);
  txn::DepVec decoded;
  Status st = txn::decode_dep_wire(wire, &decoded, "install");
  SHOAL_ASSERT(st.ok() && decoded.size() == above, "%s", st.to_string().c_str());
  // The log: each written shard's record names the other shards' entries above the base.
  std::vector<txn::DepEntry> entries;
  for (uint32_t shard : txn.written_shards()) {
    const uint32_t omitted = txn::compact_entries(txn.vector(), base, shard, &entries);
    stats->log_records++;
    stats->log_bytes += repl::log_dep_bytes(entries.size());
    stats->log_full_bytes += repl::log_dep_bytes(entries.size() + omitted);
  }
  stats->txns++;
  stats->max_entries = std::max<uint64_t>(stats->max_entries, above);
}

rt::Task<void> client(World* w, uint32_t home, uint64_t seed, int count, uint32_t cross_pct,
                      SizeStats* stats) {
  Rng rng(seed);
  dist::DistTxn txn;
  const uint32_t shards = static_cast<uint32_t>(w->engines.size());
  for (int i = 0; i < count; ++i) {
    IncrementArgs args{};
    args.shards[0] = home;
    args.shards[1] = home;
    if (shards > 1 && rng.uniform(1, 100) <= cross_pct) {
      args.shards[1] = static_cast<uint32_t>((home + rng.uniform(1, shards - 1)) % shards);
    }
    args.keys[0] = args.shards[0] * kKeysPerShard + rng.uniform(0, kKeysPerShard / 2 - 1);
    args.keys[1] =
        args.shards[1] * kKeysPerShard + kKeysPerShard / 2 + rng.uniform(0, kKeysPerShard / 2 - 1);
    Status s = co_await w->coordinators[home]->run(txn, &increment_two, &args, nullptr);
    if (s.ok()) account(w, txn, stats);
    Status slept = co_await w->loop.sleep_for(rng.uniform(100'000, 2'000'000));
    if (!slept.ok()) co_return;
  }
}

SizeStats measure(uint32_t shards, uint32_t cross_pct, uint64_t seed) {
  World w(seed, shards);
  SizeStats stats;
  // A third under the sanitizers: the sizes are averages, steady well before that.
  const int per_client = scaled(shards >= 1000 ? 60 : 300, 3);
  for (uint32_t s = 0; s < shards; ++s) {
    Status st = w.loop.spawn(client(&w, s, seed * 7 + s, per_client, cross_pct, &stats));
    SHOAL_ASSERT(st.ok(), "%s", st.to_string().c_str());
  }
  Status st = w.env.run_until_true([&] { return w.loop.live_tasks() == 0; },
                                   /*deadline_ns=*/600'000'000'000ULL);
  EXPECT_TRUE(st.ok()) << st.to_string() << " " << w.env.replay_hint();
  return stats;
}

TEST(DepVecSize, SparseVectorsTrackTheDependencyFootprintNotTheShardCount) {
  // Bytes per transaction: wire = the install message's vector (compact: count u16, 10 per
  // entry above the base; full: count u32, 12 per entry, the encoding before); log = per
  // record, the dependency area of each written shard's record (12 per entry, padded to 8).
  std::printf("%7s %6s %7s %11s %11s %11s %11s %8s %10s %10s\n", "shards", "cross%", "txns",
              "wire B/txn", "wire full", "log B/rec", "log full", "max ent", "dense u32",
              "dense u64");
  for (uint32_t shards : {2u, 10u, 100u, 1000u}) {
    const SizeStats st = measure(shards, /*cross_pct=*/10, /*seed=*/shards);
    ASSERT_GT(st.txns, 0u);
    ASSERT_GT(st.log_records, 0u);
    const double wire = double(st.wire.bytes) / st.txns;
    const double wire_full = double(st.wire.full_bytes) / st.txns;
    const double log = double(st.log_bytes) / st.log_records;
    const double log_full = double(st.log_full_bytes) / st.log_records;
    std::printf("%7u %6u %7llu %11.2f %11.2f %11.2f %11.2f %8llu %10u %10u\n", shards, 10u,
                static_cast<unsigned long long>(st.txns), wire, wire_full, log, log_full,
                static_cast<unsigned long long>(st.max_entries), 4 * shards, 8 * shards);
    // The point of the representation: beyond a handful of shards it is far smaller than a
    // dense vector, its size does not grow with the shard count, and the base takes off what
    // the watermark already covers.
    EXPECT_LT(wire, 64.0) << "entries above the watermark stay a handful";
    EXPECT_LT(wire, wire_full);
    EXPECT_LE(log, log_full);
    if (shards >= 100) {
      EXPECT_LT(wire, 4.0 * shards / 10);
    }
  }
}

}  // namespace
}  // namespace shoal::sim
