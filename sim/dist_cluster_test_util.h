// Test-only: the simulated cluster that the distributed-transaction simulator tests
// (dist_rpc_sim_test, dist_fragment_sim_test) run their bank workloads on.
//
// Contract:
//   - kShards shard nodes (each its own rt::EventLoop, a test-made shard holding an Engine and a
//     Participant, and a ParticipantService) and kCoordinators coordinator nodes (each its own
//     loop and Coordinator with one RpcLink per shard) on one SimEnv, talking through
//     RpcEndpoint over a SimNetwork that loses, duplicates and reorders 5% of messages each
//     when `faults` is on. Node ids: shards 0..kShards-1, then coordinators.
//   - Chaos (start_chaos) partitions random coordinator/shard pairs and now and then isolates a
//     shard, from 5 ms on, until run_until_quiet stops it, heals the network and runs two
//     leases more so that aborts, retried installs and leases end everything still open.
//   - A run is a pure function of the seed: every choice comes from the SimEnv or from Rngs
//     seeded from the seed, in a fixed order (keep it: the tests compare trace hashes).
//   - Single-threaded like SimEnv: a test owns one cluster per thread and touches it only from
//     that thread (the simulation drives every loop of it).
// Besides the cluster: the checks every bank run shares (expect_healthy_run, same seed same
// trace, a planted bug caught) and the wire tests' helpers (truncation, fuzzing). Header-only;
// each test keeps its own workload, shard contents and the checks specific to it.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sim/sim_env.h"
#include "sim/sim_network.h"
#include "src/base/env.h"
#include "src/check/history.h"
#include "src/check/serializability.h"
#include "src/dist/coordinator.h"
#include "src/dist/participant.h"
#include "src/dist/rpc_link.h"
#include "src/dist/vector_watermark.h"
#include "src/index/key.h"
#include "src/runtime/event_loop.h"
#include "src/runtime/rpc.h"
#include "src/txn/engine.h"

namespace shoal::sim {

using Rpc = rt::RpcEndpoint<SimEndpoint>;
using Link = dist::RpcLink<SimEndpoint>;

inline constexpr uint64_t kMs = 1'000'000;
inline constexpr uint32_t kShards = 3;
inline constexpr uint32_t kCoordinators = 3;
inline constexpr uint64_t kLeaseNs = 400 * kMs;
inline constexpr uint32_t kWaitersMax = 64;  // per coordinator's VectorWatermark

inline NodeId shard_node(uint32_t s) {
  return s;
}
inline NodeId coord_node(uint32_t c) {
  return kShards + c;
}

// The bank's record: both tests keep accounts of this shape.
struct Account {
  uint64_t seq;     // per-key version number, for the history checker
  uint64_t writer;  // history id of the transaction that wrote this version
  int64_t balance;
};

// What both bank runs are configured by.
struct ClusterRunConfig {
  bool faults = true;
  bool skip_validation = false;
  int clients_per_coordinator = 4;
  int txns_per_client = 25;
};

// What every bank run reports, whatever its workload; each test adds its own outcomes.
struct ClusterRunResult {
  bool finished = false;
  std::string hint;              // the replay hint
  dist::CoordinatorStats coord;  // summed over the coordinators
  check::History history;
  int64_t total_balance = 0;
  size_t contexts_left = 0;  // participant contexts still open
  size_t unreadable = 0;     // records a fresh transaction cannot read (a lock left behind)
  uint64_t trace_hash = 0;
  uint64_t virtual_ms = 0;
  NetworkStats net;
};

// SHOAL_SIM_SEED set: one seed; SHOAL_TEST_SCALE=small: `small`; else `normal`.
inline int seed_count(int normal, int small) {
  if (std::getenv("SHOAL_SIM_SEED") != nullptr) return 1;
  const char* scale = std::getenv("SHOAL_TEST_SCALE");
  return scale != nullptr && std::string(scale) == "small" ? small : normal;
}

// A shard's engine: no epoch ticker (the simulation owns time) and readers that fail fast on a
// lock, since locks live for round trips here (fail fast, retry).
inline txn::EngineOptions sim_engine_options(uint32_t shard, bool skip_validation) {
  txn::EngineOptions o;
  o.epoch_ticker = false;
  o.lock_wait_spins_max = 16;
  o.shard_id = shard;
  o.unsafe_skip_read_validation = skip_validation;
  return o;
}

inline rt::RpcOptions rpc_options() {
  rt::RpcOptions o;
  o.max_sessions = 16;
  o.window = 8;
  o.retransmit_ns = 2 * kMs;
  o.max_retransmit_ns = 16 * kMs;
  o.timeout_ns = 50 * kMs;
  return o;
}

inline NetworkOptions network_options(bool faults) {
  NetworkOptions o;
  if (faults) {
    o.faults.loss = 0.05;
    o.faults.duplicate = 0.05;
    o.faults.reorder = 0.05;
  }
  return o;
}

inline void sum_coordinator(const dist::CoordinatorStats& s, dist::CoordinatorStats* out) {
  out->committed += s.committed;
  out->conflict_aborts += s.conflict_aborts;
  out->failed += s.failed;
  out->cross_shard += s.cross_shard;
  out->timeouts += s.timeouts;
  out->unavailable += s.unavailable;
  out->in_doubt += s.in_doubt;
  out->own_decided += s.own_decided;
}

// Temporary partitions between random coordinator/shard pairs, and now and then a shard cut
// off from everyone, while `on`.
struct Chaos {
  SimNetwork* net;
  Rng rng;
  bool on = true;
  static void tick(void* self, uint64_t) {
    auto* c = static_cast<Chaos*>(self);
    if (!c->on) return;
    const uint64_t dice = c->rng.uniform(0, 9);
    if (dice < 4) {
      c->net->partition(coord_node(static_cast<uint32_t>(c->rng.uniform(0, kCoordinators - 1))),
                        shard_node(static_cast<uint32_t>(c->rng.uniform(0, kShards - 1))));
    } else if (dice == 4) {
      c->net->isolate({shard_node(static_cast<uint32_t>(c->rng.uniform(0, kShards - 1)))});
    } else if (dice < 8) {
      c->net->heal_all();
    }
    c->net->env().after(c->rng.uniform(2, 30) * kMs, &Chaos::tick, self);
  }
};

// One RPC connection between a coordinator node (side 0) and a shard node (side 1).
struct Conn {
  SimEndpoint ep[2];
  std::unique_ptr<Rpc> rpc[2];
};

// Reads records back with a fresh local transaction of one engine: a read that fails means a
// lock was left behind. Ends (aborts) the transaction when it goes.
class ReadBack {
 public:
  explicit ReadBack(txn::Engine& engine) : t_(&engine, 1) { t_.begin(); }
  ~ReadBack() {
    t_.abort();
    t_.end();
  }
  ReadBack(const ReadBack&) = delete;
  ReadBack& operator=(const ReadBack&) = delete;

  template <typename Value>
  void read(txn::TableBase& table, uint64_t key) {
    Value v{};
    if (!table.txn_get(t_, &key, &v, sizeof v, nullptr).ok()) ++failed_;
  }
  size_t failed() const { return failed_; }

 private:
  txn::Txn t_;
  size_t failed_ = 0;
};

// The sum of the balances of a table of Accounts keyed by one word.
inline int64_t balance_sum(txn::TableBase& accounts) {
  int64_t sum = 0;
  static_cast<txn::Table<1>&>(accounts).for_each(key1(0), Key1::max(),
                                                 [&](const Key1&, const void* v, uint32_t) {
                                                   sum += static_cast<const Account*>(v)->balance;
                                                   return true;
                                                 });
  return sum;
}

// The operations of an anomaly's transactions, for the failure message.
inline std::string describe(const check::History& h, const check::Anomaly& a) {
  std::string out;
  for (check::TxnId id : a.cycle) {
    for (const check::TxnRecord& t : h.txns) {
      if (t.id != id) continue;
      out += fmt::format("\n  T{}:", id);
      for (const check::Op& op : t.ops) {
        out += op.kind == check::OpKind::kRead
                   ? fmt::format(" r(k={},v={},by T{})", op.key, op.version, op.writer)
                   : fmt::format(" w(k={},v={})", op.key, op.version);
      }
    }
  }
  return out;
}

// The checks every healthy run must pass, whatever its workload: it finished, money is
// conserved (`total`), no participant context and no lock is left, nothing is in doubt, and
// the history is serializable. A run that did not finish is checked no further.
inline void expect_healthy_run(const ClusterRunResult& r, uint64_t seed, int64_t total) {
  EXPECT_TRUE(r.finished) << "run did not finish; " << r.hint;
  if (!r.finished) return;
  EXPECT_EQ(r.total_balance, total) << "money not conserved; " << r.hint;
  EXPECT_EQ(r.contexts_left, 0u) << "participant contexts leaked; " << r.hint;
  EXPECT_EQ(r.unreadable, 0u) << "locks left behind; " << r.hint;
  EXPECT_EQ(r.coord.in_doubt, 0u) << r.hint;
  auto anomalies = check::check(r.history);
  EXPECT_TRUE(anomalies.empty()) << "not serializable, seed=" << seed
                                 << " (replay: SHOAL_SIM_SEED=" << seed << "): "
                                 << (anomalies.empty() ? "" : anomalies.front().explanation)
                                 << (anomalies.empty() ? "" : describe(r.history, anomalies[0]));
}

// A run is a function of its seed: run(seed) twice gives the same trace, virtual time and
// conflict count, run(seed + 1) another trace. Fills *a and *b (the two same-seed runs) for
// the test's own comparisons; false if a run did not finish.
template <typename Result, typename Run>
bool expect_same_seed_same_trace(uint64_t seed, Run&& run, Result* a, Result* b) {
  *a = run(seed);
  *b = run(seed);
  const Result other = run(seed + 1);
  EXPECT_TRUE(a->finished && b->finished && other.finished) << a->hint;
  if (!(a->finished && b->finished && other.finished)) return false;
  EXPECT_EQ(a->trace_hash, b->trace_hash) << "same seed, different run: " << a->hint;
  EXPECT_EQ(a->coord.conflict_aborts, b->coord.conflict_aborts);
  EXPECT_EQ(a->virtual_ms, b->virtual_ms);
  EXPECT_NE(a->trace_hash, other.trace_hash) << a->hint;
  return true;
}

// A planted bug must be caught: caught(seed) for seeds 1, 2, ... up to 30 until one is true.
template <typename Caught>
void expect_planted_bug_caught(Caught&& caught) {
  bool found = false;
  uint64_t seed = 1;
  for (; seed <= 30 && !found; ++seed) found = caught(seed);
  EXPECT_TRUE(found);
  std::printf("planted bug (no read validation) caught at seed %llu\n",
              (unsigned long long)(seed - 1));
}

// A request on the participant's wire: method and payload.
using WireRequest = std::pair<uint16_t, std::vector<uint8_t>>;

// Every strict prefix of each request, and each with one byte appended, is served by
// `service`; refused(answer) must hold for every answer.
template <typename Refused>
void expect_truncated_and_overlong_refused(dist::ParticipantService& service,
                                           const std::vector<WireRequest>& requests,
                                           Refused&& refused) {
  rt::MsgBuffer resp;
  for (const auto& [method, msg] : requests) {
    for (size_t n = 0; n < msg.size(); ++n) {  // every strict prefix
      Status s = service.serve(method, {msg.data(), n}, &resp);
      EXPECT_TRUE(refused(s)) << "method " << method << " prefix " << n << ": " << s.to_string();
    }
    std::vector<uint8_t> longer = msg;
    longer.push_back(0);
    Status s = service.serve(method, longer, &resp);
    EXPECT_TRUE(refused(s)) << "method " << method << " + 1 byte: " << s.to_string();
  }
}

// Random corruption of a valid request for the wire fuzzers: one time in three truncated or
// extended past the txn header, then 1-4 bytes after the txn header overwritten.
// The header stays, so the fuzzer can abort every id it used.
inline void corrupt_request(Rng& rng, std::vector<uint8_t>* msg) {
  if (rng.uniform(0, 2) == 0) {
    msg->resize(dist::wire::kTxnHeaderBytes + rng.uniform(0, msg->size() + 8));
  }
  constexpr size_t kHeader = dist::wire::kTxnHeaderBytes;
  for (uint64_t flips = rng.uniform(1, 4); flips > 0 && msg->size() > kHeader; --flips) {
    (*msg)[rng.uniform(kHeader, msg->size() - 1)] = static_cast<uint8_t>(rng.next());
  }
}

// The wire fuzzers' transaction ids: kFuzzFirstId up to kFuzzFirstId + kFuzzIds - 1.
inline constexpr check::TxnId kFuzzFirstId = 1000;
inline constexpr check::TxnId kFuzzIds = 64;

// One wire fuzzer input: one of valid_requests(id), for a random fuzz id, corrupted.
template <typename ValidRequests>
WireRequest fuzzed_request(Rng& rng, ValidRequests&& valid_requests) {
  const check::TxnId id = kFuzzFirstId + static_cast<check::TxnId>(rng.uniform(0, kFuzzIds - 1));
  const std::vector<WireRequest> requests = valid_requests(id);
  WireRequest r = requests[rng.uniform(0, requests.size() - 1)];
  corrupt_request(rng, &r.second);
  return r;
}

// Corruption or InvalidArgument: how the participant's wire refuses a malformed message.
inline bool is_refusal(const Status& s) {
  return s.code() == Code::kCorruption || s.code() == Code::kInvalidArgument;
}
inline std::vector<uint8_t> payload_of(const rt::MsgBuffer& b) {
  return {b.payload().begin(), b.payload().end()};
}

// The cluster. Shard is the test's per-shard state; it must have a
// `std::unique_ptr<dist::Participant> participant` (declared after whatever it runs on, so it
// is destroyed first). Members are declared so that destruction runs coordinators, links, RPC
// endpoints, services, shards (participants release what they hold), then loops.
template <typename Shard>
struct SimCluster {
  // make_shard(env, s, participant_options) builds shard s. With coordinator_backoff, each
  // coordinator backs off between retries on its own loop.
  // With vector_watermarks, each coordinator node also gets a VectorWatermark on its loop
  // (`watermarks[c]`, kShards entries, kWaitersMax waiters) that its RpcLinks raise with every
  // reply's watermark trailer; the test makes the shards' sources and the exchanges.
  template <typename MakeShard>
  SimCluster(uint64_t seed, bool faults, MakeShard&& make_shard, bool coordinator_backoff = false,
             bool vector_watermarks = false)
      : env(seed),
        net(env, kShards + kCoordinators, network_options(faults)),
        chaos{&net, Rng(seed ^ 0xc4a05), faults} {
    for (uint32_t n = 0; n < kShards + kCoordinators; ++n) {
      loops.push_back(std::make_unique<rt::EventLoop>(env));
      env.attach(*loops.back());
      attached.push_back(true);
    }
    dist::ParticipantOptions po;
    po.inflight_max = 256;
    po.lease_ns = kLeaseNs;
    for (uint32_t s = 0; s < kShards; ++s) {
      shards.push_back(make_shard(env, s, po));
      services.push_back(std::make_unique<dist::ParticipantService>(*shards.back()->participant,
                                                                    *loops[shard_node(s)]));
    }
    for (uint32_t c = 0; vector_watermarks && c < kCoordinators; ++c) {
      watermarks.push_back(
          std::make_unique<dist::VectorWatermark>(*loops[coord_node(c)], kShards, kWaitersMax));
    }
    for (uint32_t c = 0; c < kCoordinators; ++c) {
      std::vector<dist::ShardLink*> shard_links;
      for (uint32_t s = 0; s < kShards; ++s) shard_links.push_back(connect(c, s));
      dist::CoordinatorOptions o;
      o.shard_id = c;  // TxnIds: unique per coordinator (and exec_at_commit avoids shard c)
      o.max_retries = 1000;
      if (coordinator_backoff) o.backoff_loop = loops[coord_node(c)].get();
      coords.push_back(std::make_unique<dist::Coordinator>(o, shard_links, &epoch));
    }
  }
  ~SimCluster() {
    for (size_t n = 0; n < loops.size(); ++n) {
      if (attached[n]) env.detach(*loops[n]);
    }
  }
  SimCluster(const SimCluster&) = delete;
  SimCluster& operator=(const SimCluster&) = delete;

  dist::ShardLink* connect(uint32_t c, uint32_t s) {
    auto pair = net.connect(coord_node(c), shard_node(s));
    SHOAL_CHECK(pair.ok());
    auto conn = std::make_unique<Conn>();
    conn->ep[0] = std::move(pair->first);
    conn->ep[1] = std::move(pair->second);
    conn->rpc[0] = std::make_unique<Rpc>(*loops[coord_node(c)], conn->ep[0], rpc_options());
    conn->rpc[1] = std::make_unique<Rpc>(*loops[shard_node(s)], conn->ep[1], rpc_options());
    SHOAL_CHECK(conn->rpc[0]->start().ok());
    SHOAL_CHECK(conn->rpc[1]->start().ok());
    services[s]->attach(*conn->rpc[1]);
    dist::RpcLinkOptions lo;
    if (!watermarks.empty()) lo.watermark = watermarks[c].get();
    lo.shard = s;
    lo.call_timeout_ns = 50 * kMs;
    lo.end_attempts_max = 400;  // 20 s of virtual time: longer than any partition here
    links.push_back(std::make_unique<Link>(*conn->rpc[0], lo));
    conns.push_back(std::move(conn));
    return links.back().get();
  }

  // Spawns `per_coordinator` clients on each coordinator's loop (once per cluster): client i
  // of coordinator co gets thread log co * per_coordinator + i of `recorder` and the seed
  // seed * 1000 + co * 100 + i; make_client(co, log, client_seed) returns its task.
  template <typename MakeClient>
  void spawn_clients(int per_coordinator, uint64_t seed, MakeClient&& make_client) {
    SHOAL_CHECK(recorder == nullptr);
    clients_ = static_cast<int>(kCoordinators) * per_coordinator;
    recorder = std::make_unique<check::HistoryRecorder>(kCoordinators * per_coordinator);
    for (uint32_t co = 0; co < kCoordinators; ++co) {
      for (int i = 0; i < per_coordinator; ++i) {
        auto* log = &recorder->thread_log(co * per_coordinator + i);
        SHOAL_CHECK(
            loops[coord_node(co)]->spawn(make_client(co, log, seed * 1000 + co * 100 + i)).ok());
      }
    }
  }

  // The chaos's first tick at 5 ms, if the network is faulty.
  void start_chaos() {
    if (chaos.on) env.after(5 * kMs, &Chaos::tick, &chaos);
  }

  // Runs until `clients_done` (each client's count when it ends) reaches the number of clients
  // spawned, 600 s of virtual time at most, then quiesces: stops the chaos, heals, and gives
  // aborts, retried installs and leases time to end everything still open. Sets `hint` to the
  // replay hint; false if either phase failed.
  bool run_until_quiet(const int& clients_done, std::string* hint) {
    Status st = env.run_until_true([&] { return clients_done == clients_; }, 600'000 * kMs);
    *hint = env.replay_hint();
    if (!st.ok()) return false;
    chaos.on = false;
    net.heal_all();
    return env.run_for(2 * kLeaseNs).ok();
  }

  // The coordinators' stats (summed), the clients' merged history, the network's stats,
  // virtual time and the trace hash so far. REQUIRES: spawn_clients ran.
  void record_run(ClusterRunResult* out) {
    for (auto& coord : coords) sum_coordinator(coord->stats(), &out->coord);
    out->history = recorder->merge();
    out->net = net.stats();
    out->virtual_ms = env.now_ns() / kMs;
    out->trace_hash = env.trace_hash();
  }

  void crash_shard(uint32_t s) {
    net.crash(shard_node(s));
    env.detach(*loops[shard_node(s)]);  // the crashed node's core stops
    attached[shard_node(s)] = false;
  }

  SimEnv env;
  SimNetwork net;
  Chaos chaos;
  std::unique_ptr<check::HistoryRecorder> recorder;  // the clients' thread logs
  uint64_t epoch = 1;
  std::vector<std::unique_ptr<rt::EventLoop>> loops;  // per node
  std::vector<bool> attached;
  std::vector<std::unique_ptr<Shard>> shards;
  std::vector<std::unique_ptr<dist::ParticipantService>> services;
  std::vector<std::unique_ptr<dist::VectorWatermark>> watermarks;  // per coordinator, optional
  std::vector<std::unique_ptr<Conn>> conns;                        // conns[c * kShards + s]
  std::vector<std::unique_ptr<Link>> links;                        // links[c * kShards + s]
  std::vector<std::unique_ptr<dist::Coordinator>> coords;

 private:
  int clients_ = 0;  // spawned
};

}  // namespace shoal::sim
