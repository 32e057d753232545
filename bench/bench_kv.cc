// run_kv_bench (bench_kv.h): the load, the measured YCSB run and the client-side bank check,
// all through the client library.
#include "bench/bench_kv.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "bench/live.h"
#include "bench/local_cluster.h"
#include "bench/runner.h"
#include "shoal/client.h"
#include "src/base/env.h"
#include "src/base/histogram.h"
#include "src/base/process_memory.h"
#include "src/check/history.h"
#include "src/cluster/config.h"
#include "src/server/control.h"
#include "src/server/dist_bank.h"
#include "src/workload/ycsb/ycsb.h"

namespace shoal::server {
namespace {
// A namespace of its own: in a unity batch this file's helpers meet its neighbours'.
namespace kv_bench {

constexpr uint32_t kRead = 0, kUpdate = 1, kRmw = 2, kOpTypes = 3;
constexpr const char* kOpNames[kOpTypes] = {"read", "update", "rmw"};
constexpr uint64_t kReadyTimeoutMs = 120'000;
// Check accounts per shard: few, so that transfers conflict and the checker sees contention.
constexpr uint32_t kCheckAccountsPerShard = 8;
constexpr uint32_t kKeyLetters = 26 * 26;  // "aa".."zz"

// The two lower-case letters of prefix p in [0, 676).
std::string letters(uint64_t p) {
  return {static_cast<char>('a' + p / 26 % 26), static_cast<char>('a' + p % 26)};
}

std::string record_key(uint64_t i) {
  return fmt::format("{}user{:010}", letters(workload::fnv1a64(i) % kKeyLetters), i);
}

uint32_t read_pct(char workload) {
  switch (workload) {
    case 'B':
      return 95;
    case 'C':
      return 100;
    default:  // A and F
      return 50;
  }
}

uint64_t now_ns() {
  return RealEnv::instance().now_ns();
}

struct Endpoint {
  std::string host;
  uint16_t port = 0;
};

// What the run talks to: a local cluster it started, or a running one's config.
struct Target {
  LocalCluster local;
  cluster::ClusterConfig config;
  std::string config_path;
  ClientOptions client_options;
  std::vector<Endpoint> leaders;  // per shard: its first replica with a client port
};

Status open_target(const KvBenchOptions& o, Target* t) {
  if (!o.cluster_path.empty()) {
    auto c = cluster::load_config_file(o.cluster_path);
    if (!c.ok()) return c.status();
    t->config = std::move(*c);
    t->config_path = o.cluster_path;
  } else {
    DistBenchOptions d = o.local;
    d.client_ports = true;
    d.workload = "micro";  // the servers' own tables stay tiny: the run uses resp_kv
    d.keys_per_partition = 4;
    fmt::print(stderr, "starting {} local shard server{} x {} replica{} with client ports...\n",
               d.shards, d.shards == 1 ? "" : "s", d.replicas, d.replicas == 1 ? "" : "s");
    SHOAL_TRY(start_local(d, &t->local));
    ControlClient control(t->local.config);
    if (Status s = wait_ready(control, t->local.procs, kReadyTimeoutMs); !s.ok()) {
      t->local.keep_dir = true;  // keep the logs the error points at
      return s;
    }
    t->config = t->local.config;
    t->config_path = t->local.dir + "/cluster.toml";
  }
  for (const cluster::Shard& shard : t->config.shards) {
    for (const cluster::Replica& r : shard.replicas) {
      if (r.client_port == 0) continue;
      t->leaders.push_back({r.host, r.client_port});
      break;
    }
  }
  if (t->leaders.empty()) {
    return Status::InvalidArgument(
        fmt::format("cluster '{}' has no client_port in any [[shard.replica]]: bench kv talks to "
                    "the client port",
                    t->config.name));
  }
  if (!t->config.resp_password_file.empty()) {
    auto password =
        cluster::read_password_file(t->config.resp_password_file, "cluster.resp_password_file");
    if (!password.ok()) return password.status();
    t->client_options.password = std::move(*password);
  }
  return Status::Ok();
}

// Connection i goes to shard (i mod shards)'s server; when that one does not answer, to any
// server of the config.
Result<std::unique_ptr<Client>> connect_one(const Target& t, uint32_t i) {
  const Endpoint& e = t.leaders[i % t.leaders.size()];
  auto c = Client::connect(e.host, e.port, t.client_options);
  if (c.ok() || c.status().code() == Code::kPermissionDenied) return c;
  return Client::connect_cluster(t.config_path, t.client_options);
}

// Everything one connection's thread owns; read by the main thread after the join (and its
// live counters by the sampler meanwhile).
struct alignas(64) Connection {
  bench::LiveCounters live;
  std::unique_ptr<Client> client;
  uint32_t index = 0;
  uint64_t committed[kOpTypes] = {};
  uint64_t aborts[kOpTypes] = {};  // run()'s retried conflicts (rmw)
  uint64_t failed[kOpTypes] = {};
  Histogram latency[kOpTypes];
  uint64_t durable = 0;  // writes whose commit returned durable
  uint64_t last_end_ns = 0;
  std::string first_error;
  // The check.
  uint64_t check_committed = 0, check_cross = 0, check_aborts = 0, check_gave_up = 0;
  uint64_t unrecorded = 0;  // outcome unknown (the connection broke at the commit)
  std::vector<std::string> check_errors;

  // After a failure: notes the first error; a broken connection is replaced. False when it
  // cannot be (the thread stops).
  bool failed_with(const Target& t, const Status& s) {
    if (first_error.empty()) first_error = s.to_string();
    if (client->connected()) return true;
    auto c = connect_one(t, index);
    if (!c.ok()) return false;
    client = std::move(*c);
    return true;
  }
};

bool stopping(const KvBenchOptions& o) {
  return o.stop != nullptr && o.stop->load(std::memory_order_relaxed);
}

// Runs body(connection) on a thread per connection and joins them.
template <typename Body>
void on_every_connection(std::vector<std::unique_ptr<Connection>>& conns, const Body& body) {
  std::vector<std::thread> threads;
  threads.reserve(conns.size());
  for (auto& c : conns) threads.emplace_back([&body, &c] { body(*c); });
  for (auto& t : threads) t.join();
}

// The load: records i, i + connections, ... from each connection, speculative single-key puts.
Status load(const KvBenchOptions& o, const Target& t,
            std::vector<std::unique_ptr<Connection>>& conns) {
  const std::string value(o.value_bytes, 'v');
  std::atomic<bool> failed{false};
  on_every_connection(conns, [&](Connection& c) {
    for (uint64_t i = c.index; i < o.keys && !failed.load(std::memory_order_relaxed);
         i += conns.size()) {
      if (stopping(o)) return;
      auto r = c.client->put(record_key(i), value, Durability::kSpeculative);
      if (!r.ok() && !c.failed_with(t, r.status())) failed.store(true);
    }
  });
  for (const auto& c : conns) {
    if (!c->first_error.empty()) {
      return Status::Unavailable(fmt::format("load: connection {}: {}", c->index, c->first_error));
    }
  }
  if (stopping(o)) return Status::Aborted("interrupted during the load");
  return Status::Ok();
}

// One connection's share of the measurement, until deadline_ns or *stop.
void measure(const KvBenchOptions& o, const Target& t, const workload::Zipfian* zipf,
             uint64_t deadline_ns, const std::atomic<bool>& stop, Connection& c) {
  Rng rng(o.seed * 1'000'003 + c.index);
  const Durability durability = o.speculative ? Durability::kSpeculative : Durability::kDurable;
  shoal::RunOptions run_options;
  run_options.durability = durability;
  const uint32_t reads = read_pct(o.workload);
  std::string value(o.value_bytes, 'v');
  std::string got;
  for (uint64_t n = 0;; ++n) {  // bounded by the deadline
    const uint64_t start_ns = now_ns();
    if (start_ns >= deadline_ns || stop.load(std::memory_order_relaxed) || stopping(o)) return;
    const uint64_t record =
        zipf != nullptr ? workload::scrambled_zipfian(*zipf, rng) : rng.uniform(0, o.keys - 1);
    const std::string key = record_key(record);
    const uint32_t type = rng.uniform(0, 99) < reads ? kRead : o.workload == 'F' ? kRmw : kUpdate;
    uint32_t attempts = 1;
    CommitResult how;
    Status s;
    if (type == kRead) {
      s = c.client->get(key, &got, durability);
    } else if (type == kUpdate) {
      if (!value.empty()) value[0] = static_cast<char>('a' + n % 26);  // a new value each time
      auto r = c.client->put(key, value, durability);
      s = r.ok() ? Status::Ok() : r.status();
      if (r.ok()) how = *r;
    } else {
      attempts = 0;
      s = c.client->run(
          [&](Transaction& txn) -> Status {
            ++attempts;
            SHOAL_TRY(txn.get(key, &got));
            if (!got.empty()) got[0] = static_cast<char>('a' + (got[0] - 'a' + 1) % 26);
            return txn.put(key, got);
          },
          run_options, &how);
    }
    const uint64_t end_ns = now_ns();
    const uint64_t retries = attempts > 0 ? attempts - 1 : 0;
    c.aborts[type] += retries;
    if (retries != 0) bench::bump(c.live.conflict_aborts, retries);
    if (s.ok()) {
      ++c.committed[type];
      c.durable += how.durable ? 1 : 0;
      c.latency[type].record(end_ns - start_ns);
      bench::bump(c.live.committed);
      bench::bump(c.live.latency_buckets[Histogram::bucket_of(end_ns - start_ns)]);
    } else {
      ++c.failed[type];
      bench::bump(c.live.failed);
      if (!c.failed_with(t, s)) return;
    }
    c.last_end_ns = end_ns;
  }
}

// ---- The check: bank transfers through the client, a client-side history ----

struct Account {
  int64_t balance = 0;
  uint64_t seq = 0;     // version
  uint64_t writer = 0;  // id of the attempt that wrote it (0: the load)
};

std::string account_value(const Account& a) {
  return fmt::format("{} {} {}", a.balance, a.seq, a.writer);
}

Status parse_account(const std::string& key, const std::string& v, Account* a) {
  const char* end = v.data() + v.size();
  auto r = std::from_chars(v.data(), end, a->balance);
  bool ok = r.ec == std::errc() && r.ptr != end && *r.ptr == ' ';
  if (ok) {
    r = std::from_chars(r.ptr + 1, end, a->seq);
    ok = r.ec == std::errc() && r.ptr != end && *r.ptr == ' ';
  }
  if (ok) {
    r = std::from_chars(r.ptr + 1, end, a->writer);
    ok = r.ec == std::errc() && r.ptr == end;
  }
  if (ok) return Status::Ok();
  return Status::Corruption(fmt::format("account {}: malformed value '{:.60}'", key, v));
}

struct Accounts {
  std::vector<std::string> keys;
  std::vector<uint32_t> shard;
  uint32_t shards_used = 0;
};

// kCheckAccountsPerShard accounts on every shard: account a's key is the first of
// "<2 letters>chk<tag>-<a>" that the config's kv_split_keys give to shard a mod shards.
Accounts make_accounts(const cluster::ClusterConfig& config, const std::string& tag) {
  Accounts out;
  const auto shards = static_cast<uint32_t>(config.shards.size());
  std::vector<bool> used(shards, false);
  for (uint32_t a = 0; a < kCheckAccountsPerShard * shards; ++a) {
    std::string key;
    for (uint32_t p = 0; p < kKeyLetters; ++p) {  // bounded: 676 prefixes
      key = fmt::format("{}chk{}-{}", letters(p), tag, a);
      if (config.shard_for_kv_key(key) == a % shards) break;
    }
    const uint32_t s = config.shard_for_kv_key(key);
    out.shards_used += used[s] ? 0 : 1;
    used[s] = true;
    out.keys.push_back(std::move(key));
    out.shard.push_back(s);
  }
  return out;
}

// One connection's transfers and audits until deadline_ns, recorded in `log`.
void check_transfers(const KvBenchOptions& o, const Target& t, const Accounts& acc,
                     uint64_t deadline_ns, check::HistoryRecorder::ThreadLog& log, Connection& c) {
  Rng rng(o.seed * 7919 + c.index + 1);
  shoal::RunOptions run_options;
  run_options.durability = o.speculative ? Durability::kSpeculative : Durability::kDurable;
  const auto n_accounts = static_cast<uint64_t>(acc.keys.size());
  while (now_ns() < deadline_ns && !stopping(o)) {  // bounded by the deadline
    const bool audit = rng.uniform(0, 99) < kBankAuditPct;
    const uint32_t n = audit ? kBankAuditKeys : 2;
    uint64_t pick[kBankAuditKeys];
    for (uint32_t j = 0; j < n; ++j) {
      bool fresh = false;
      while (!fresh) {  // bounded: n <= 4 of at least 8 accounts
        pick[j] = rng.uniform(0, n_accounts - 1);
        fresh = std::find(pick, pick + j, pick[j]) == pick + j;
      }
    }
    const auto amount = static_cast<int64_t>(rng.uniform(1, 20));
    check::TxnRecord rec;
    uint32_t attempts = 0;
    Status s = c.client->run(
        [&](Transaction& txn) -> Status {
          ++attempts;
          rec = check::TxnRecord{};
          rec.id = log.next_txn_id();
          Account a[kBankAuditKeys];
          for (uint32_t j = 0; j < n; ++j) {
            std::string v;
            SHOAL_TRY(txn.get(acc.keys[pick[j]], &v));
            SHOAL_TRY(parse_account(acc.keys[pick[j]], v, &a[j]));
            rec.read(pick[j], a[j].seq, a[j].writer);
          }
          if (audit) return Status::Ok();
          a[0].balance -= amount;
          a[1].balance += amount;
          for (uint32_t j = 0; j < 2; ++j) {
            a[j].seq += 1;
            a[j].writer = rec.id;
            SHOAL_TRY(txn.put(acc.keys[pick[j]], account_value(a[j])));
            rec.write(pick[j], a[j].seq);
          }
          return Status::Ok();
        },
        run_options);
    c.check_aborts += attempts > 0 ? attempts - 1 : 0;
    if (s.ok()) {
      ++c.check_committed;
      c.check_cross += !audit && acc.shard[pick[0]] != acc.shard[pick[1]] ? 1 : 0;
      log.append(std::move(rec));
      continue;
    }
    if (s.is_aborted()) {  // conflicts past run()'s attempts: nothing installed
      ++c.check_gave_up;
      continue;
    }
    if (s.code() == Code::kCorruption || s.is_not_found()) {
      c.check_errors.push_back(s.to_string());  // an account unreadable or malformed
      return;
    }
    // The connection broke or timed out: the commit may have happened.
    ++c.unrecorded;
    if (!c.failed_with(t, s)) return;
  }
}

struct CheckOutcome {
  std::string text;
  nlohmann::json json = nlohmann::json::object();
  std::vector<std::string> failures;
};

CheckOutcome run_check(const KvBenchOptions& o, const Target& t,
                       std::vector<std::unique_ptr<Connection>>& conns) {
  CheckOutcome out;
  const Accounts acc = make_accounts(t.config, fmt::format("{:x}", now_ns() ^ o.seed));
  Client& first = *conns[0]->client;
  for (const std::string& key : acc.keys) {
    auto r = first.put(key, account_value(Account{kBankInitialBalance, 0, 0}));
    if (!r.ok()) {
      out.failures.push_back("check: loading the accounts: " + r.status().to_string());
      return out;
    }
  }
  fmt::print(stderr, "check: bank transfers over {} accounts on {} shard{} for {:.1f} s...\n",
             acc.keys.size(), acc.shards_used, acc.shards_used == 1 ? "" : "s", o.check_seconds);
  check::HistoryRecorder recorder(conns.size());
  const uint64_t deadline_ns = now_ns() + static_cast<uint64_t>(o.check_seconds * 1e9);
  on_every_connection(conns, [&](Connection& c) {
    check_transfers(o, t, acc, deadline_ns, recorder.thread_log(c.index), c);
  });
  uint64_t committed = 0, cross = 0, aborts = 0, gave_up = 0, unrecorded = 0;
  for (const auto& c : conns) {
    committed += c->check_committed;
    cross += c->check_cross;
    aborts += c->check_aborts;
    gave_up += c->check_gave_up;
    unrecorded += c->unrecorded;
    for (const std::string& e : c->check_errors) out.failures.push_back("check: " + e);
  }
  // Money: every balance read in one transaction (a consistent cut).
  int64_t balance = 0;
  Status summed = conns[0]->client->run([&](Transaction& txn) -> Status {
    balance = 0;
    for (const std::string& key : acc.keys) {
      std::string v;
      Account a;
      SHOAL_TRY(txn.get(key, &v));
      SHOAL_TRY(parse_account(key, v, &a));
      balance += a.balance;
    }
    return Status::Ok();
  });
  const int64_t expected = static_cast<int64_t>(acc.keys.size()) * kBankInitialBalance;
  out.json = {
      {"accounts", acc.keys.size()},  {"shards", acc.shards_used},
      {"seconds", o.check_seconds},   {"committed", committed},
      {"committed_cross", cross},     {"conflict_aborts", aborts},
      {"gave_up", gave_up},           {"balance_sum", balance},
      {"balance_expected", expected}, {"money_conserved", summed.ok() && balance == expected}};
  out.text += fmt::format(
      "check: {} transfers and audits committed through the client library over {} accounts on "
      "{} shard{} ({} transfers cross-shard), {} conflicts retried, {} gave up\n",
      committed, acc.keys.size(), acc.shards_used, acc.shards_used == 1 ? "" : "s", cross, aborts,
      gave_up);
  if (!summed.ok()) {
    out.text += "money: not checked: " + summed.to_string() + "\n";
    out.failures.push_back("money: the balances could not be read: " + summed.to_string());
  } else if (balance == expected) {
    out.text += fmt::format("money: ok ({} over {} accounts)\n", balance, acc.keys.size());
  } else {
    out.text +=
        fmt::format("money: FAILED: the balances sum to {}, expected {}\n", balance, expected);
    out.failures.push_back(fmt::format("money: {} made or lost", balance - expected));
  }
  BankHistoryNotes notes;
  notes.unrecorded = "the connection broke at their commit: outcome unknown";
  notes.id_legend = fmt::format(
      "transaction ids are attempt x {} + connection + 1, recorded by the client", conns.size());
  check_bank_history(recorder.merge(), unrecorded, notes, &out.failures, &out.text, &out.json);
  return out;
}

// ---- Report ----

bench::RunResult aggregate(const KvBenchOptions& o,
                           const std::vector<std::unique_ptr<Connection>>& conns, uint64_t start_ns,
                           double load_s) {
  bench::RunResult r;
  r.workload = fmt::format("kv-ycsb-{}", static_cast<char>(o.workload - 'A' + 'a'));
  r.workers = static_cast<uint32_t>(conns.size());
  r.requested_seconds = o.seconds;
  r.load_seconds = load_s;
  auto all = std::make_unique<Histogram>();
  auto one = std::make_unique<Histogram>();
  uint64_t last_end_ns = start_ns;
  for (uint32_t type = 0; type < kOpTypes; ++type) {
    bench::TypeResult tr;
    tr.name = kOpNames[type];
    one->reset();
    for (const auto& c : conns) {
      tr.committed += c->committed[type];
      tr.conflict_aborts += c->aborts[type];
      tr.failed += c->failed[type];
      one->merge(c->latency[type]);
      last_end_ns = std::max(last_end_ns, c->last_end_ns);
    }
    if (tr.committed + tr.failed == 0) continue;  // not in this workload
    tr.latency_us = bench::summarize(*one);
    all->merge(*one);
    r.committed += tr.committed;
    r.conflict_aborts += tr.conflict_aborts;
    r.failed += tr.failed;
    r.per_type.push_back(std::move(tr));
  }
  r.latency_us = bench::summarize(*all);
  r.commit_latency_us = r.latency_us;  // a commit returns once durable (or speculative)
  r.seconds = static_cast<double>(last_end_ns - start_ns) / 1e9;
  const double seconds = std::max(r.seconds, 1e-9);
  r.committed_per_sec = static_cast<double>(r.committed) / seconds;
  r.aborts_per_sec = static_cast<double>(r.conflict_aborts) / seconds;
  r.rss_bytes = current_rss_bytes();
  r.peak_rss_bytes = peak_rss_bytes();
  return r;
}

Status run(const KvBenchOptions& o) {
  if (std::string_view("ABCF").find(o.workload) == std::string_view::npos) {
    return Status::InvalidArgument(fmt::format("--workload: {} not in {{a,b,c,f}}", o.workload));
  }
  if (o.connections < 1 || o.connections > kKvBenchConnectionsMax) {
    return Status::InvalidArgument(fmt::format("--connections: must be in [1, {}], not {}",
                                               kKvBenchConnectionsMax, o.connections));
  }
  if (o.keys < 2 || !(o.theta >= 0 && o.theta < 1) || !(o.seconds > 0) || !(o.check_seconds > 0)) {
    return Status::InvalidArgument("--keys, --theta, --seconds or --check-seconds out of range");
  }
  if (!o.json_path.empty()) {  // fail before the load, not after the run
    std::FILE* f = std::fopen(o.json_path.c_str(), "a");
    if (f == nullptr) return Status::IOError("--json: cannot write " + o.json_path);
    std::fclose(f);
  }
  Target t;
  SHOAL_TRY(open_target(o, &t));
  const auto shards = static_cast<uint32_t>(t.config.shards.size());
  std::vector<std::unique_ptr<Connection>> conns;
  for (uint32_t i = 0; i < o.connections; ++i) {
    auto c = connect_one(t, i);
    if (!c.ok()) return c.status();
    conns.push_back(std::make_unique<Connection>());
    conns.back()->index = i;
    conns.back()->client = std::move(*c);
  }
  std::vector<uint64_t> keys_per_shard(shards, 0);
  for (uint64_t i = 0; i < o.keys; ++i) ++keys_per_shard[t.config.shard_for_kv_key(record_key(i))];
  std::unique_ptr<workload::Zipfian> zipf;
  if (o.zipfian) zipf = std::make_unique<workload::Zipfian>(o.keys, o.theta);

  fmt::print(stderr, "loading {} keys of {} bytes through the client library ({} connections)...\n",
             o.keys, o.value_bytes, o.connections);
  const uint64_t load_start_ns = now_ns();
  SHOAL_TRY(load(o, t, conns));
  const double load_s = static_cast<double>(now_ns() - load_start_ns) / 1e9;
  for (auto& c : conns) c->first_error.clear();
  fmt::print(stderr, "loaded in {:.2f} s ({:.0f} keys/s); running YCSB {} for {:.1f} s...\n",
             load_s, static_cast<double>(o.keys) / std::max(load_s, 1e-9), o.workload, o.seconds);

  // The measurement, with a live line per second (bench/live.h).
  std::atomic<bool> stop{false};
  const uint64_t start_ns = now_ns();
  const uint64_t deadline_ns = start_ns + static_cast<uint64_t>(o.seconds * 1e9);
  std::vector<const bench::LiveCounters*> live;
  for (const auto& c : conns) live.push_back(&c->live);
  bench::LiveSampler sampler(std::move(live));
  std::vector<bench::SecondSample> series;
  bool interrupted = false;
  {
    std::vector<std::thread> threads;
    for (auto& c : conns) {
      threads.emplace_back(
          [&, conn = c.get()] { measure(o, t, zipf.get(), deadline_ns, stop, *conn); });
    }
    uint64_t last_tick_ns = start_ns;
    for (uint64_t tick = 1;; ++tick) {  // bounded by the deadline
      const uint64_t tick_ns = std::min(start_ns + tick * 1'000'000'000, deadline_ns);
      while (now_ns() < tick_ns && !stopping(o)) sleep_ms(20);
      if (stopping(o)) {
        interrupted = true;
        break;
      }
      const uint64_t now = now_ns();
      if (now - last_tick_ns < 100'000'000 && now >= deadline_ns) break;  // no stub second
      series.push_back(sampler.sample(static_cast<double>(now - start_ns) / 1e9,
                                      static_cast<double>(now - last_tick_ns) / 1e9, false));
      bench::LiveSampler::print(stderr, series.back(), false);
      last_tick_ns = now;
      if (now >= deadline_ns) break;
    }
    stop.store(true);
    for (auto& th : threads) th.join();
  }
  bench::RunResult r = aggregate(o, conns, start_ns, load_s);
  r.interrupted = interrupted;
  r.cpu_placement = o.cluster_path.empty() ? "local servers: " + t.local.placement.describe()
                                           : std::string("the running cluster's");
  r.series = series;
  uint64_t durable = 0, writes = 0;
  std::string first_error;
  for (const auto& c : conns) {
    durable += c->durable;
    writes += c->committed[kUpdate] + c->committed[kRmw];
    if (first_error.empty()) first_error = c->first_error;
  }

  CheckOutcome check;
  if (o.check) {
    check = run_check(o, t, conns);
    r.checked = true;
    r.check_failures = check.failures;
  }

  // The report: the run's setup, the runner's table, the check.
  std::string text = fmt::format(
      "\nkv: YCSB {} through the client library, {} shard{} x {} replica{}, {} connection{}, {} "
      "keys of {} bytes (per shard: {}), {} keys, {} commits\n",
      o.workload, shards, shards == 1 ? "" : "s", t.config.replicas_per_shard,
      t.config.replicas_per_shard == 1 ? "" : "s", o.connections, o.connections == 1 ? "" : "s",
      o.keys, o.value_bytes, fmt::join(keys_per_shard, " / "),
      o.zipfian ? fmt::format("zipfian {}", o.theta) : std::string("uniform"),
      o.speculative ? "speculative" : "durable");
  text += r.to_table();
  const char* one_replica = !o.cluster_path.empty()
                                ? " (one replica: durable as far as its servers log)"
                            : o.local.lone_replica_log ? " (one replica: synced to its WAL)"
                                                       : " (one replica, no WAL: memory only)";
  text += fmt::format("writes acknowledged durable: {} of {}{}\n", durable, writes,
                      t.config.replicas_per_shard == 1 ? one_replica : "");
  if (r.failed != 0) text += "first failure: " + first_error + "\n";
  text += check.text;
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);

  nlohmann::json j = r.to_json();
  j["commit_latency_us"] = bench::latency_json(r.commit_latency_us);
  nlohmann::json per_second = nlohmann::json::array();
  for (const bench::SecondSample& x : series) per_second.push_back(x.committed_per_sec);
  j["committed_per_second"] = per_second;
  j["consistency"] = !r.checked ? "skipped" : r.consistent() ? "ok" : "failed";
  j["check_failures"] = r.check_failures;
  if (o.check) j["check"] = check.json;
  j["ycsb_workload"] = std::string(1, o.workload);
  j["connections"] = o.connections;
  j["keys"] = o.keys;
  j["keys_per_shard"] = keys_per_shard;
  j["value_bytes"] = o.value_bytes;
  j["distribution"] = o.zipfian ? "zipfian" : "uniform";
  j["theta"] = o.theta;
  j["durability"] = o.speculative ? "speculative" : "durable";
  j["writes_acknowledged_durable"] = durable;
  j["load"] = "client library: single-key speculative puts";
  j["shards"] = shards;
  j["replicas"] = t.config.replicas_per_shard;
  j["cluster"] = o.cluster_path.empty() ? "local" : o.cluster_path;
  j["rss_bytes_of"] = "the bench client (not the servers)";
  if (!o.json_path.empty()) {
    std::ofstream f(o.json_path, std::ios::trunc);
    f << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    if (!f) return Status::IOError(fmt::format("--json: cannot write {}", o.json_path));
  }
  if (!r.consistent()) {
    return Status::Corruption("bench kv check failed (serializability or money)");
  }
  if (r.failed != 0) {
    return Status::Unavailable(
        fmt::format("{} operations failed (first: {})", r.failed, first_error));
  }
  return Status::Ok();
}

}  // namespace kv_bench
}  // namespace

Status run_kv_bench(const KvBenchOptions& options) {
  return kv_bench::run(options);
}

}  // namespace shoal::server
