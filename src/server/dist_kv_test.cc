// KvAcks (dist_kv.h): durability tokens become durable only once the vectorized watermark
// covers their vectors; the tokens of our own shard's vectors, however many, are freed by one
// resumption of one task per raise (the worker's loop resumes one ready task per iteration),
// and vectors naming other shards wait for those shards' entries too; shutdown frees them.
// DistKvBackend's local fast path answers get, put, del and commit with ready tasks (no
// coroutine frame), and a conflict still goes through the backoff before the retry. A
// transaction of one get commits at its read (no validation) and replies as one validated at
// its commit would; with acknowledgements its token still covers the version it read; a GET
// through a Redis session (no coroutine frame) answers as the same GET inside MULTI/EXEC.
#include "src/server/dist_kv.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "src/cluster/config.h"
#include "src/dist/coordinator.h"
#include "src/resp/connection.h"
#include "src/resp/testing/test_client.h"
#include "src/resp/value_format.h"
#include "src/txn/engine.h"

namespace shoal::server {
namespace dist_kv_test {  // named: unity builds put test files together

// {shard: ts}, and with `also` a second entry {also_shard: also_ts}.
txn::DepVec vec(uint32_t shard, uint64_t ts, uint32_t also_shard = 0, uint64_t also_ts = 0) {
  txn::DepVec v;
  v.raise(shard, ts);
  if (also_ts != 0) v.raise(also_shard, also_ts);
  return v;
}

rt::Task<void> take(KvAcks& acks, txn::DepVec v, uint64_t* token) {
  *token = co_await acks.token_for(v);
}

rt::LoopOptions one_task_per_iteration() {
  rt::LoopOptions lo;
  lo.ready_batch = 1;  // as the shard server's workers (make_worker)
  return lo;
}

// Runs `loop` until it has nothing to do (bounded); how many iterations did something.
int drain(rt::EventLoop& loop) {
  int n = 0;
  while (n < 100'000 && loop.run_once()) ++n;
  return n;
}

TEST(KvAcks, OneRaiseFreesEveryOwnShardTokenInOneResumption) {
  rt::EventLoop loop(RealEnv::instance(), one_task_per_iteration());
  dist::VectorWatermark vw(loop, 2, 16);
  constexpr uint32_t kTokens = 500;
  KvAcks acks(loop, vw, 1024, /*own_shard=*/0);
  std::vector<uint64_t> tokens(kTokens, 0);
  for (uint32_t i = 0; i < kTokens; ++i) {
    ASSERT_TRUE(loop.spawn(take(acks, vec(0, i + 1), &tokens[i])).ok());
  }
  drain(loop);
  EXPECT_EQ(acks.pending(), kTokens);
  for (uint64_t t : tokens) {
    ASSERT_NE(t, 0u);
    EXPECT_FALSE(acks.is_durable(t));
  }
  EXPECT_EQ(vw.waiting(), 1u);  // one task waits for all of them

  // Half of them covered: exactly those become durable.
  ASSERT_TRUE(vw.raise(0, kTokens / 2).ok());
  const uint64_t resumes = loop.stats().resumes;
  const int iterations = drain(loop);
  EXPECT_LE(iterations, 3);
  EXPECT_LE(loop.stats().resumes - resumes, 2u);
  EXPECT_EQ(acks.acknowledged(), kTokens / 2);
  for (uint32_t i = 0; i < kTokens; ++i) {
    EXPECT_EQ(acks.is_durable(tokens[i]), i + 1 <= kTokens / 2) << i;
  }
  ASSERT_TRUE(vw.raise(0, kTokens).ok());
  EXPECT_LE(drain(loop), 3);
  EXPECT_EQ(acks.acknowledged(), kTokens);
  EXPECT_EQ(acks.pending(), 0u);
  for (uint64_t t : tokens) EXPECT_TRUE(acks.is_durable(t));
}

TEST(KvAcks, NoTokenIsDurableBeforeEveryEntryIsCovered) {
  rt::EventLoop loop(RealEnv::instance(), one_task_per_iteration());
  dist::VectorWatermark vw(loop, 2, 16);
  KvAcks acks(loop, vw, 16, /*own_shard=*/0);
  // Our shard's, out of TID order (a read's version below an earlier write), then vectors
  // naming the other shard.
  const std::vector<txn::DepVec> vectors = {vec(0, 50), vec(0, 10), vec(0, 30), vec(0, 5, 1, 7),
                                            vec(1, 3)};
  std::vector<uint64_t> tokens(vectors.size(), 0);
  for (size_t i = 0; i < vectors.size(); ++i) {
    ASSERT_TRUE(loop.spawn(take(acks, vectors[i], &tokens[i])).ok());
  }
  drain(loop);
  auto durable_exactly_when_covered_or_later = [&] {
    for (size_t i = 0; i < vectors.size(); ++i) {
      if (!vw.covers(vectors[i])) {
        EXPECT_FALSE(acks.is_durable(tokens[i])) << i;
      }
    }
  };
  ASSERT_TRUE(vw.raise(0, 20).ok());
  drain(loop);
  durable_exactly_when_covered_or_later();
  EXPECT_FALSE(acks.is_durable(tokens[3]));  // shard 1 is not there yet
  ASSERT_TRUE(vw.raise(0, 50).ok());
  drain(loop);
  durable_exactly_when_covered_or_later();
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(acks.is_durable(tokens[i])) << i;
  EXPECT_FALSE(acks.is_durable(tokens[3]));
  EXPECT_FALSE(acks.is_durable(tokens[4]));
  ASSERT_TRUE(vw.raise(1, 7).ok());
  drain(loop);
  for (size_t i = 0; i < vectors.size(); ++i) EXPECT_TRUE(acks.is_durable(tokens[i])) << i;
  EXPECT_EQ(acks.pending(), 0u);
  EXPECT_EQ(acks.acknowledged(), vectors.size());
  // A vector covered already needs no token.
  uint64_t covered = 1;
  ASSERT_TRUE(loop.spawn(take(acks, vec(0, 40, 1, 2), &covered)).ok());
  drain(loop);
  EXPECT_EQ(covered, 0u);
}

// Shutdown (VectorWatermark::release_all) ends the waits: the tokens are freed, as a token
// with an ack task of its own always was, so nothing waits on a stopped loop.
TEST(KvAcks, ReleaseAllFreesEveryPendingToken) {
  rt::EventLoop loop(RealEnv::instance(), one_task_per_iteration());
  dist::VectorWatermark vw(loop, 2, 16);
  KvAcks acks(loop, vw, 16, /*own_shard=*/1);
  std::vector<uint64_t> tokens(4, 0);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const txn::DepVec v = i < 3 ? vec(1, 10 + i) : vec(0, 3, 1, 2);
    ASSERT_TRUE(loop.spawn(take(acks, v, &tokens[i])).ok());
  }
  drain(loop);
  EXPECT_EQ(acks.pending(), tokens.size());
  vw.release_all(Status::Unavailable("shutting down"));
  drain(loop);
  EXPECT_EQ(acks.pending(), 0u);
  for (uint64_t t : tokens) EXPECT_TRUE(acks.is_durable(t));
}

// One shard, no replication: every key is the worker's own, on the local Txn.
struct LocalKv {
  // The coordinator is never reached (every key is local): its one link stays null.
  LocalKv() : coordinator(dist::CoordinatorOptions{}, {nullptr}, &epoch) {
    config.shards.resize(1);
    table = engine.create_bytes_table("resp_kv");
    DistKvOptions o;
    o.coordinator = &coordinator;
    o.config = &config;
    o.local = &engine.make_worker()->txn();
    o.table = table;
    backend = std::make_unique<DistKvBackend>(o);
  }
  txn::Engine engine{txn::EngineOptions{}};
  txn::BytesTable* table = nullptr;
  uint64_t epoch = 1;
  dist::Coordinator coordinator;
  cluster::ClusterConfig config;
  std::unique_ptr<DistKvBackend> backend;
};

TEST(DistKvBackend, LocalCallsAnswerWithReadyTasks) {
  LocalKv kv;
  auto t = kv.backend->open();
  t->begin();
  rt::Task<Status> put = t->put("k", "v1");
  ASSERT_TRUE(put.is_ready());  // no coroutine frame: the put is done
  EXPECT_TRUE(put.take().ok());
  rt::Task<Status> again = t->put("k", "v2");
  ASSERT_TRUE(again.is_ready());
  EXPECT_TRUE(again.take().ok());
  rt::Task<Result<resp::CommitInfo>> commit = t->commit();
  ASSERT_TRUE(commit.is_ready());
  auto info = commit.take();
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->durable_token, 0u);  // no acks: replies at the commit

  t->begin();
  std::string value;
  uint64_t version = 0;
  rt::Task<Status> get = t->get("k", &value, &version);
  ASSERT_TRUE(get.is_ready());
  EXPECT_TRUE(get.take().ok());
  EXPECT_EQ(value, "v2");
  EXPECT_NE(version, 0u);
  rt::Task<Status> missing = t->get("nope", &value, &version);
  ASSERT_TRUE(missing.is_ready());
  EXPECT_TRUE(missing.take().is_not_found());
  rt::Task<Status> del = t->del("k");
  ASSERT_TRUE(del.is_ready());
  EXPECT_TRUE(del.take().ok());
  ASSERT_TRUE(t->commit().take().ok());

  t->begin();
  EXPECT_TRUE(t->get("k", &value, &version).take().is_not_found());
  ASSERT_TRUE(t->commit().take().ok());
}

TEST(DistKvBackend, ALocalConflictBacksOffBeforeTheRetry) {
  LocalKv kv;
  rt::EventLoop loop(RealEnv::instance());
  DistKvOptions o = kv.backend->options();
  o.loop = &loop;  // the backoff's yield needs a loop
  DistKvBackend backend(o);
  txn::Txn& other = kv.engine.make_worker()->txn();
  auto t = backend.open();
  t->begin();
  std::string value;
  uint64_t version = 0;
  EXPECT_TRUE(t->get("k", &value, &version).take().is_not_found());
  ASSERT_TRUE(t->put("k", "mine").take().ok());
  // Another transaction inserts the key first: ours fails validation at commit.
  other.begin();
  ASSERT_TRUE(other.put(*kv.table, "k", "theirs").ok());
  ASSERT_TRUE(other.commit().ok());
  other.end();
  rt::Task<Result<resp::CommitInfo>> commit = t->commit();
  EXPECT_FALSE(commit.is_ready());  // the backoff is a wait: a coroutine
  Result<resp::CommitInfo> got = resp::CommitInfo{};
  ASSERT_TRUE(loop.spawn([](rt::Task<Result<resp::CommitInfo>> c, Result<resp::CommitInfo>* out)
                             -> rt::Task<void> { *out = co_await c; }(std::move(commit), &got))
                  .ok());
  for (int i = 0; i < 100 && loop.live_tasks() > 0; ++i) loop.run_once();
  EXPECT_EQ(loop.live_tasks(), 0u);
  EXPECT_TRUE(got.status().is_aborted()) << got.status().to_string();
}

// Another worker's committed write of key.
void write_elsewhere(LocalKv& kv, std::string_view key, std::string_view value) {
  txn::Txn& other = kv.engine.make_worker()->txn();
  other.begin();
  ASSERT_TRUE(other.put(*kv.table, key, value).ok());
  ASSERT_TRUE(other.commit().ok());
  other.end();
}

// A transaction of one get commits at its read: a write committed between the read and the
// commit does not abort it (the read is its serialization point), while a transaction of two
// reads, or of a read and a write, is still validated at its commit and aborts.
TEST(DistKvBackend, OneGetCommitsAtItsRead) {
  LocalKv kv;
  write_elsewhere(kv, "a", "a1");
  write_elsewhere(kv, "b", "b1");
  auto t = kv.backend->open();
  std::string value;
  uint64_t version = 0;

  t->begin();
  ASSERT_TRUE(t->get("a", &value, &version).take().ok());
  write_elsewhere(kv, "a", "a2");
  ASSERT_TRUE(t->commit().take().ok());
  EXPECT_EQ(value, "a1");

  t->begin();  // a missing key: its leaf guards nothing after the read
  EXPECT_TRUE(t->get("z", &value, &version).take().is_not_found());
  EXPECT_EQ(version, 0u);
  write_elsewhere(kv, "z", "z1");
  ASSERT_TRUE(t->commit().take().ok());

  t->begin();  // two reads: validated
  ASSERT_TRUE(t->get("a", &value, &version).take().ok());
  ASSERT_TRUE(t->get("b", &value, &version).take().ok());
  write_elsewhere(kv, "a", "a3");
  EXPECT_TRUE(resp::testing::now(t->commit()).status().is_aborted());

  t->begin();  // a read and a write: validated
  ASSERT_TRUE(t->get("a", &value, &version).take().ok());
  ASSERT_TRUE(t->put("b", "b2").take().ok());
  write_elsewhere(kv, "a", "a4");
  EXPECT_TRUE(resp::testing::now(t->commit()).status().is_aborted());

  t->begin();  // the aborted write left nothing
  ASSERT_TRUE(t->get("b", &value, &version).take().ok());
  EXPECT_EQ(value, "b1");
  ASSERT_TRUE(t->commit().take().ok());
}

// A one-shard backend whose commits wait for acknowledgements: tokens a test frees by
// raising the shard's watermark by hand.
struct AckedKv {
  LocalKv kv;
  rt::EventLoop loop{RealEnv::instance(), one_task_per_iteration()};
  dist::VectorWatermark vw{loop, 1, 16};
  KvAcks acks{loop, vw, 16, /*own_shard=*/0};
  DistKvBackend backend{with_acks(kv.backend->options(), &acks)};
  static DistKvOptions with_acks(DistKvOptions o, KvAcks* acks) {
    o.acks = acks;
    return o;
  }
};

// With acknowledgements, a one-get transaction's token covers the version it read (our shard
// at that version's TID): its reply waits until the watermark passes it, as any read's.
TEST(DistKvBackend, OneGetWaitsForTheVersionItRead) {
  AckedKv a;
  auto& [kv, loop, vw, acks, backend] = a;
  auto t = backend.open();
  std::string value;
  uint64_t version = 0;

  t->begin();  // a miss of a key never removed: nothing to wait for
  EXPECT_TRUE(t->get("k", &value, &version).take().is_not_found());
  auto missed = t->commit().take();
  ASSERT_TRUE(missed.ok());
  EXPECT_EQ(missed->durable_token, 0u);

  write_elsewhere(kv, "k", "v1");
  t->begin();
  ASSERT_TRUE(t->get("k", &value, &version).take().ok());
  ASSERT_NE(version, 0u);
  auto read = t->commit().take();
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  ASSERT_NE(read->durable_token, 0u);
  EXPECT_FALSE(acks.is_durable(read->durable_token));
  ASSERT_TRUE(vw.raise(0, version - 1).ok());
  drain(loop);
  EXPECT_FALSE(acks.is_durable(read->durable_token));
  ASSERT_TRUE(vw.raise(0, version).ok());
  drain(loop);
  EXPECT_TRUE(acks.is_durable(read->durable_token));
}

void remove_elsewhere(LocalKv& kv, std::string_view key, uint64_t* tid) {
  txn::Txn& other = kv.engine.make_worker()->txn();
  other.begin();
  ASSERT_TRUE(other.remove(*kv.table, key).ok());
  ASSERT_TRUE(other.commit().ok());
  *tid = other.last_commit_tid();
  other.end();
}

// A key that a remove unlinked leaves no version behind, so a miss (a GET, or a SCAN that no
// longer meets the key) waits on the table's newest remove instead: its reply must not report
// the key gone while a crash could still lose the remove.
TEST(DistKvBackend, AMissWaitsForTheRemoveThatMadeIt) {
  AckedKv a;
  auto& [kv, loop, vw, acks, backend] = a;
  auto t = backend.open();
  std::string value;
  uint64_t version = 0;
  write_elsewhere(kv, "k", "v1");
  uint64_t removed = 0;
  remove_elsewhere(kv, "k", &removed);
  ASSERT_NE(removed, 0u);

  t->begin();
  EXPECT_TRUE(t->get("k", &value, &version).take().is_not_found());
  auto missed = t->commit().take();
  ASSERT_TRUE(missed.ok()) << missed.status().to_string();
  ASSERT_NE(missed->durable_token, 0u);

  t->begin();
  std::vector<resp::KeyValue> found;
  const resp::ScanRange range{"a", true, "z"};  // the coroutine holds it by reference
  auto scan = t->scan(range, 10, 0, &found);
  ASSERT_TRUE(scan.start_inline());  // one local shard: it never suspends
  ASSERT_TRUE(scan.take().ok());
  EXPECT_TRUE(found.empty());
  auto scanned = t->commit().take();
  ASSERT_TRUE(scanned.ok()) << scanned.status().to_string();
  ASSERT_NE(scanned->durable_token, 0u);

  ASSERT_TRUE(vw.raise(0, removed - 1).ok());
  drain(loop);
  EXPECT_FALSE(acks.is_durable(missed->durable_token));
  EXPECT_FALSE(acks.is_durable(scanned->durable_token));
  ASSERT_TRUE(vw.raise(0, removed).ok());
  drain(loop);
  EXPECT_TRUE(acks.is_durable(missed->durable_token));
  EXPECT_TRUE(acks.is_durable(scanned->durable_token));
}

// What a client reads through the Redis session: GET outside MULTI (one get, committed at its
// read, no coroutine frame) against the same GET inside MULTI/EXEC (its own transaction
// path): an existing key, one overwritten by another worker, a missing key, an expired key,
// and a value that is not a string's encoding (the layer's WRONGTYPE case: an error reply).
TEST(DistKvBackend, SessionGetAnswersAsInsideExec) {
  LocalKv kv;
  resp::testing::ManualEnv env;
  resp::Connection conn(*kv.backend, env);
  auto run = [&](const std::vector<std::string_view>& cmd) {
    conn.feed(resp::testing::encode_command(cmd));
    std::string out(conn.sendable());
    conn.consume_output(out.size());
    return out;
  };
  auto via_exec = [&](std::string_view key) {  // EXEC's reply: "*1\r\n" and GET's, or an error
    EXPECT_EQ(run({"MULTI"}), "+OK\r\n");
    EXPECT_EQ(run({"GET", key}), "+QUEUED\r\n");
    return run({"EXEC"});
  };
  std::string stored;
  resp::encode_string("plain", 0, &stored);
  write_elsewhere(kv, "plain", stored);
  EXPECT_EQ(run({"GET", "plain"}), "$5\r\nplain\r\n");
  EXPECT_EQ(via_exec("plain"), "*1\r\n$5\r\nplain\r\n");
  resp::encode_string("again", 0, &stored);
  write_elsewhere(kv, "plain", stored);
  EXPECT_EQ(run({"GET", "plain"}), "$5\r\nagain\r\n");
  EXPECT_EQ(via_exec("plain"), "*1\r\n$5\r\nagain\r\n");
  EXPECT_EQ(run({"GET", "missing"}), "$-1\r\n");
  EXPECT_EQ(via_exec("missing"), "*1\r\n$-1\r\n");
  EXPECT_EQ(run({"SET", "brief", "x", "PX", "100"}), "+OK\r\n");
  EXPECT_EQ(run({"GET", "brief"}), "$1\r\nx\r\n");
  env.advance_ms(101);
  EXPECT_EQ(run({"GET", "brief"}), "$-1\r\n");
  EXPECT_EQ(via_exec("brief"), "*1\r\n$-1\r\n");
  write_elsewhere(kv, "odd", "not an encoded string");
  const std::string odd = run({"GET", "odd"});
  EXPECT_TRUE(odd.starts_with("-ERR ")) << odd;
  EXPECT_EQ(via_exec("odd"), odd);  // the failed handler fails the whole EXEC, as the GET
  EXPECT_EQ(run({"GET", "plain"}), "$5\r\nagain\r\n");  // the session goes on
}

}  // namespace dist_kv_test
}  // namespace shoal::server
