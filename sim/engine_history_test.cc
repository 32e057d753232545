// Runs a register workload on the real engine, records what every committed transaction saw
// and wrote, and checks the history with the serializability checker.
//
// Every value is a register {seq, writer}: a transaction read-modify-writes it to {seq + 1, its
// own id}, so each read names the version (seq) and writer it saw, and each write the version
// it created. A procedure may run several times (conflict retries); it records into a buffer
// that each attempt clears, and the buffer enters the history only when Worker::run returns Ok.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "src/check/history.h"
#include "src/check/serializability.h"
#include "src/txn/engine.h"

namespace shoal::sim {
namespace {

using txn::Engine;
using txn::EngineOptions;
using txn::Table;
using txn::Txn;
using txn::Worker;

struct Register {
  uint64_t seq;
  uint64_t writer;  // TxnId of the transaction that wrote this version
  uint64_t pad[2];
};

// Tests scale down under sanitizers (SHOAL_TEST_SCALE=small), like the engine's tests, and up
// for soak runs (SHOAL_TEST_SCALE=large).
size_t scaled(size_t n) {
  const char* s = std::getenv("SHOAL_TEST_SCALE");
  if (s != nullptr && std::string(s) == "small") return std::max<size_t>(1, n / 10);
  if (s != nullptr && std::string(s) == "large") return n * 20;
  return n;
}

// What one transaction does. The first `writes` of `keys` are read-modify-written.
struct Plan {
  Table<1>* table = nullptr;
  check::TxnId id = check::kInitialTxn;
  uint64_t keys[4] = {};
  uint32_t reads = 0;
  uint32_t writes = 0;
  bool scan = false;
  uint64_t scan_lo = 0;
  uint64_t scan_hi = 0;
  // Test hook run once, on the first attempt only, between the reads and the writes: lets a
  // test commit another transaction in the middle of this one (deterministic interleaving).
  std::function<void()> after_reads;
};

// One attempt's observations; reset at the start of every attempt.
struct Observations {
  std::vector<check::Op> ops;
  bool hook_ran = false;
};

void observe(Observations& obs, uint64_t key, const Register& r) {
  obs.ops.push_back(check::Op{check::OpKind::kRead, key, r.seq, r.writer});
}

Status register_txn(Txn& txn, const void* args, void* result) {
  const Plan& p = *static_cast<const Plan*>(args);
  Observations& obs = *static_cast<Observations*>(result);
  obs.ops.clear();  // a retry starts over: only the committed attempt's view counts
  Register seen[4];
  for (uint32_t i = 0; i < p.reads; ++i) {
    SHOAL_TRY(txn.get(*p.table, key1(p.keys[i]), &seen[i]));
    observe(obs, p.keys[i], seen[i]);
  }
  if (p.scan) {
    SHOAL_TRY(txn.scan(*p.table, key1(p.scan_lo), key1(p.scan_hi), SIZE_MAX,
                       [&](const Key<1>& key, const void* value, uint32_t size_bytes) {
                         SHOAL_ASSERT(size_bytes == sizeof(Register), "value of %u bytes",
                                      size_bytes);
                         Register r;
                         std::memcpy(&r, value, sizeof(r));
                         observe(obs, key.w[0], r);
                         return true;
                       }));
  }
  if (p.after_reads && !obs.hook_ran) {
    obs.hook_ran = true;
    p.after_reads();
  }
  for (uint32_t i = 0; i < p.writes; ++i) {
    const Register next{seen[i].seq + 1, p.id, {}};
    SHOAL_TRY(txn.put(*p.table, key1(p.keys[i]), next));
    obs.ops.push_back(check::Op{check::OpKind::kWrite, p.keys[i], next.seq, check::kUnknownWriter});
  }
  return Status::Ok();
}

struct Shape {
  uint64_t keys = 64;
  uint32_t reads_min = 2;
  uint32_t reads_max = 4;
  uint32_t writes_max = 2;
  double read_only_fraction = 0.15;
  double scan_fraction = 0.1;
};

Plan random_plan(Rng& rng, Table<1>* table, check::TxnId id, const Shape& shape) {
  Plan p;
  p.table = table;
  p.id = id;
  p.reads = static_cast<uint32_t>(rng.uniform(shape.reads_min, shape.reads_max));
  for (uint32_t i = 0; i < p.reads; ++i) {
    bool fresh = false;
    while (!fresh) {
      p.keys[i] = rng.uniform(0, shape.keys - 1);
      fresh = std::find(p.keys, p.keys + i, p.keys[i]) == p.keys + i;
    }
  }
  if (rng.uniform01() >= shape.read_only_fraction) {
    p.writes = static_cast<uint32_t>(rng.uniform(1, std::min(shape.writes_max, p.reads)));
  }
  if (rng.uniform01() < shape.scan_fraction) {
    p.scan = true;
    p.scan_lo = rng.uniform(0, shape.keys - 1);
    p.scan_hi = std::min(shape.keys - 1, p.scan_lo + rng.uniform(2, 7));
  }
  return p;
}

// A fresh engine with `keys` registers at version 0 (written by the initial transaction).
struct Store {
  explicit Store(const EngineOptions& options, uint64_t keys) : engine(options) {
    table = engine.create_table<1>("registers");
    for (uint64_t k = 0; k < keys; ++k) {
      SHOAL_ASSERT(table->load(key1(k), Register{0, check::kInitialTxn, {}}).ok(), "load");
    }
  }
  Engine engine;
  Table<1>* table = nullptr;
};

struct RunStats {
  uint64_t committed = 0;
  uint64_t gave_up = 0;  // Worker::run exhausted its retries: nothing installed, not recorded
  uint64_t conflict_aborts = 0;
};

// Runs `txns_per_thread` random transactions on each of `threads` threads and returns the
// merged history of the committed ones.
check::History run_concurrently(Store& store, size_t threads, size_t txns_per_thread,
                                const Shape& shape, uint64_t seed, RunStats* stats) {
  check::HistoryRecorder recorder(threads);
  std::vector<Worker*> workers;
  for (size_t t = 0; t < threads; ++t) workers.push_back(store.engine.make_worker());
  std::vector<RunStats> per_thread(threads);
  // Threads start together so that their transactions really overlap.
  std::atomic<size_t> ready{0};
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      check::HistoryRecorder::ThreadLog& log = recorder.thread_log(t);
      Rng rng(seed * 1000 + t);
      Observations obs;
      ready.fetch_add(1);
      while (ready.load() < threads) std::this_thread::yield();
      for (size_t n = 0; n < txns_per_thread; ++n) {
        const Plan plan = random_plan(rng, store.table, log.next_txn_id(), shape);
        const Status s = workers[t]->run(&register_txn, &plan, &obs);
        if (s.ok()) {
          log.append(check::TxnRecord{plan.id, true, obs.ops});
          ++per_thread[t].committed;
        } else {
          SHOAL_ASSERT(s.is_aborted(), "unexpected status %s", s.to_string().c_str());
          ++per_thread[t].gave_up;
        }
      }
      per_thread[t].conflict_aborts = workers[t]->stats().conflict_aborts;
    });
  }
  for (std::thread& th : pool) th.join();
  for (const RunStats& s : per_thread) {
    stats->committed += s.committed;
    stats->gave_up += s.gave_up;
    stats->conflict_aborts += s.conflict_aborts;
  }
  return recorder.merge();
}

// The final committed value of every key must be the history's last version of it.
void expect_final_state_matches(const Store& store, const check::History& h, uint64_t keys) {
  std::vector<Register> last(keys, Register{0, check::kInitialTxn, {}});
  for (const check::TxnRecord& t : h.txns) {
    for (const check::Op& op : t.ops) {
      if (op.kind == check::OpKind::kWrite && op.version > last[op.key].seq) {
        last[op.key] = Register{op.version, t.id, {}};
      }
    }
  }
  for (uint64_t k = 0; k < keys; ++k) {
    Register r{};
    ASSERT_TRUE(store.table->peek(key1(k), &r, sizeof(r)).ok());
    EXPECT_EQ(r.seq, last[k].seq) << "key " << k;
    EXPECT_EQ(r.writer, last[k].writer) << "key " << k;
  }
}

TEST(EngineHistory, ConcurrentHistoryIsSerializable) {
  const Shape shape;
  Store store(EngineOptions{}, shape.keys);
  RunStats stats;
  const check::History h = run_concurrently(store, 2, scaled(20000), shape, /*seed=*/7, &stats);
  const check::CheckReport r = check::check_report(h);
  EXPECT_TRUE(r.serializable()) << r.to_string();
  EXPECT_EQ(stats.committed, h.txns.size());
  EXPECT_GT(stats.committed, 0u);
  expect_final_state_matches(store, h, shape.keys);
  std::printf("%zu committed, %lu gave up, %lu conflict retries; %s\n", h.txns.size(),
              stats.gave_up, stats.conflict_aborts, r.to_string().c_str());
}

// Few keys, more threads than cores (preemption lands mid-transaction), many scans: validation
// and retries are exercised hard.
TEST(EngineHistory, ConcurrentHighContentionHistoryIsSerializable) {
  const Shape shape{.keys = 8, .scan_fraction = 0.3};
  Store store(EngineOptions{}, shape.keys);
  RunStats stats;
  const check::History h = run_concurrently(store, 4, scaled(10000), shape, /*seed=*/11, &stats);
  const check::CheckReport r = check::check_report(h);
  EXPECT_TRUE(r.serializable()) << r.to_string();
  EXPECT_EQ(stats.committed, h.txns.size());
  expect_final_state_matches(store, h, shape.keys);
  std::printf("%zu committed, %lu gave up, %lu conflict retries; %s\n", h.txns.size(),
              stats.gave_up, stats.conflict_aborts, r.to_string().c_str());
}

// Write skew and lost updates: few keys, every transaction reads two and writes one.
constexpr Shape kSkewShape{.keys = 4,
                           .reads_min = 2,
                           .reads_max = 2,
                           .writes_max = 1,
                           .read_only_fraction = 0,
                           .scan_fraction = 0};

TEST(EngineHistory, SkippedReadValidationIsCaught) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (uint64_t round = 1;; ++round) {
    Store store(EngineOptions{.unsafe_skip_read_validation = true}, kSkewShape.keys);
    RunStats stats;
    const check::History h = run_concurrently(store, 2, scaled(2000), kSkewShape, round, &stats);
    const check::CheckReport r = check::check_report(h);
    if (!r.serializable()) {
      std::printf("round %lu: %zu committed txns\n%s", round, h.txns.size(), r.to_string().c_str());
      EXPECT_TRUE(r.has(check::AnomalyKind::kGSingle) || r.has(check::AnomalyKind::kG2) ||
                  r.has(check::AnomalyKind::kG0) || r.has(check::AnomalyKind::kImpossible))
          << r.to_string();
      return;
    }
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << "no anomaly in " << round << " rounds with read validation off";
  }
}

// Deterministic write skew on one thread: A reads x and y; in the middle B (another Worker)
// reads x and y and writes y; then A writes x. Returns the recorded history.
check::History interleaved_write_skew(const EngineOptions& options, Status* a_status) {
  Store store(options, 2);
  Worker* wa = store.engine.make_worker();
  Worker* wb = store.engine.make_worker();
  check::HistoryRecorder recorder(1);
  check::HistoryRecorder::ThreadLog& log = recorder.thread_log(0);
  Plan b;
  b.table = store.table;
  b.id = log.next_txn_id();
  b.keys[0] = 1;  // writes y
  b.keys[1] = 0;
  b.reads = 2;
  b.writes = 1;
  Plan a;
  a.table = store.table;
  a.id = log.next_txn_id();
  a.keys[0] = 0;  // writes x
  a.keys[1] = 1;
  a.reads = 2;
  a.writes = 1;
  a.after_reads = [&] {
    Observations obs_b;
    const Status s = wb->run(&register_txn, &b, &obs_b);
    SHOAL_ASSERT(s.ok(), "B: %s", s.to_string().c_str());
    log.append(check::TxnRecord{b.id, true, obs_b.ops});
  };
  Observations obs_a;
  *a_status = wa->run(&register_txn, &a, &obs_a);
  if (a_status->ok()) log.append(check::TxnRecord{a.id, true, obs_a.ops});
  return recorder.merge();
}

TEST(EngineHistory, InterleavedWriteSkewIsCaughtWithoutReadValidation) {
  Status a_status;
  const check::History h =
      interleaved_write_skew(EngineOptions{.unsafe_skip_read_validation = true}, &a_status);
  ASSERT_TRUE(a_status.ok()) << a_status.to_string();
  const check::CheckReport r = check::check_report(h);
  ASSERT_TRUE(r.has(check::AnomalyKind::kG2)) << r.to_string();
  const check::Anomaly* a = &r.anomalies.front();
  EXPECT_EQ(a->explanation, "T1 -rw(k=0,v=0)-> T2 -rw(k=1,v=0)-> T1") << r.to_string();
}

TEST(EngineHistory, InterleavedWriteSkewIsPreventedByReadValidation) {
  Status a_status;
  const check::History h = interleaved_write_skew(EngineOptions{}, &a_status);
  ASSERT_TRUE(a_status.ok()) << a_status.to_string();
  ASSERT_EQ(h.txns.size(), 2u);
  const check::CheckReport r = check::check_report(h);
  EXPECT_TRUE(r.serializable()) << r.to_string();
  // A retried after B committed, so its committed attempt saw B's write of y.
  const check::TxnRecord& a = h.txns[1];
  EXPECT_EQ(a.ops[1].key, 1u);
  EXPECT_EQ(a.ops[1].version, 1u);
  EXPECT_EQ(a.ops[1].writer, h.txns[0].id);
}

}  // namespace
}  // namespace shoal::sim
