#include "bench/runner.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "bench/live.h"
#include "bench/runner_repl.h"
#include "src/base/assert.h"
#include "src/base/cpu_placement.h"
#include "src/base/histogram.h"
#include "src/base/process_memory.h"

namespace shoal::bench {
namespace {

struct TypeTally {
  uint64_t committed = 0;
  uint64_t user_aborts = 0;
  uint64_t conflict_aborts = 0;
  uint64_t failed = 0;
};

// Transactions waiting for the shard watermark (replication): a bounded FIFO in TID order
// per worker (a worker's required TIDs only grow, except read-only ones, which need less).
struct PendingAck {
  uint64_t required_tid;
  uint64_t start_ns;
  bool measured;
};
class AckQueue {
 public:
  static constexpr uint32_t kCapacity = 1 << 16;
  AckQueue() : slots_(kCapacity) {}
  bool full() const { return tail_ - head_ == kCapacity; }
  bool empty() const { return tail_ == head_; }
  void push(const PendingAck& a) { slots_[tail_++ % kCapacity] = a; }
  // Records every pending transaction the watermark covers, as of now_ns (measured ones in
  // commit_latency; all of them in the live line's buckets when `live` is given).
  void drain(uint64_t watermark, uint64_t now_ns, Histogram& commit_latency, LiveCounters* live) {
    while (!empty()) {
      const PendingAck& a = slots_[head_ % kCapacity];
      if (a.required_tid > watermark) return;
      const uint64_t latency_ns = now_ns - a.start_ns;
      if (a.measured) commit_latency.record(latency_ns);
      if (live != nullptr) bump(live->commit_latency_buckets[Histogram::bucket_of(latency_ns)]);
      ++head_;
    }
  }

 private:
  std::vector<PendingAck> slots_;
  uint64_t head_ = 0, tail_ = 0;
};

// Everything one worker thread owns. Written only by that thread until it is joined.
struct alignas(64) ThreadState {
  explicit ThreadState(size_t types) : tally(types), latency(types) {}
  LiveCounters live;
  std::vector<TypeTally> tally;    // measured phase only, per type
  std::vector<Histogram> latency;  // measured phase only, per type
  Histogram commit_latency;        // measured phase only (replication)
  AckQueue acks;
  uint64_t last_end_ns = 0;
};

// Start/stop coordination between the main thread and the workers.
struct RunClock {
  std::atomic<uint32_t> ready{0};
  std::atomic<bool> go{false};
  std::atomic<bool> stop{false};  // ends the run before the deadline (RunOptions::stop)
  uint64_t measure_start_ns = 0;  // written before `go` is released
  uint64_t deadline_ns = 0;
};

void worker_main(workload::Workload& workload, txn::Engine& engine, const RunOptions& options,
                 uint32_t index, std::mutex& setup_mu, RunClock& clock, ThreadState& state,
                 repl::ReplicationLeader* leader, int cpu) {
  Env& env = engine.env();
  // Before setup, so the worker's buffers are first touched where it will run.
  pin_worker_thread(cpu, fmt::format("shoal: worker {}", index));
  txn::Worker* worker = nullptr;
  std::unique_ptr<workload::Client> client;
  {
    // Setup is serialized: make_worker / make_client need not be thread-safe.
    std::lock_guard<std::mutex> lock(setup_mu);
    worker = engine.make_worker();
    client = workload.make_client(*worker, index, options.seed * 1'000'003 + index);
  }
  repl::StreamAppender* appender = leader != nullptr ? &leader->appender(index) : nullptr;
  if (appender != nullptr) {
    worker->set_commit_hook(&repl::StreamAppender::commit_hook, appender);
    worker->txn().set_tid_floor(appender->promised_tid());
  }
  clock.ready.fetch_add(1, std::memory_order_acq_rel);
  // Bounded by the main thread, which releases `go` once every worker is ready.
  while (!clock.go.load(std::memory_order_acquire)) std::this_thread::yield();

  const size_t types = state.tally.size();
  const uint64_t measure_start_ns = clock.measure_start_ns;
  const uint64_t deadline_ns = clock.deadline_ns;
  uint64_t aborts_before = worker->stats().conflict_aborts;
  uint64_t now_ns = env.now_ns();
  // A relaxed load per transaction: the stop only has to be seen soon, not at once.
  while (now_ns < deadline_ns && !clock.stop.load(std::memory_order_relaxed)) {
    const uint64_t start_ns = now_ns;
    const uint64_t logged_before = appender != nullptr ? appender->stats().txns : 0;
    const workload::Outcome outcome = client->run_one();
    now_ns = env.now_ns();
    if (appender != nullptr && (outcome.status.ok() || outcome.status.is_user_abort())) {
      // Acknowledgement (docs/REPLICATION.md, "Vectorized watermark across shards"): a logged
      // transaction needs its own TID under the watermark; one that logged nothing (read-only,
      // rolled back) needs what it read.
      const uint64_t required = appender->stats().txns != logged_before
                                    ? appender->last_logged_tid()
                                    : worker->txn().max_seen_version();
      // Bounded by replication progress: a full queue waits for the watermark. The worker is
      // between transactions with nothing to run, so it seals its batch (idle, or tick once
      // aged) or it would wait on itself.
      while (state.acks.full()) {
        if (!appender->idle()) appender->tick();
        state.acks.drain(leader->watermark(), env.now_ns(), state.commit_latency, &state.live);
        std::this_thread::yield();
      }
      state.acks.push({required, start_ns, start_ns >= measure_start_ns});
      state.acks.drain(leader->watermark(), now_ns, state.commit_latency, &state.live);
    }
    const uint64_t aborts_now = worker->stats().conflict_aborts;
    const uint64_t retries = aborts_now - aborts_before;
    aborts_before = aborts_now;
    SHOAL_ASSERT(outcome.type < types, "workload returned txn type %u of %zu",
                 static_cast<unsigned>(outcome.type), types);
    const bool completed = outcome.status.ok() || outcome.status.is_user_abort();
    const uint64_t latency_ns = now_ns - start_ns;
    if (retries != 0) bump(state.live.conflict_aborts, retries);
    if (completed) {
      bump(state.live.committed);
      bump(state.live.latency_buckets[Histogram::bucket_of(latency_ns)]);
    } else {
      bump(state.live.failed);
    }
    if (start_ns < measure_start_ns) continue;  // warmup: live line only
    TypeTally& tally = state.tally[outcome.type];
    tally.conflict_aborts += retries;
    if (completed) {
      ++tally.committed;
      if (outcome.status.is_user_abort()) ++tally.user_aborts;
      state.latency[outcome.type].record(latency_ns);
    } else {
      ++tally.failed;
    }
  }
  state.last_end_ns = now_ns;
  if (appender != nullptr) {
    appender->flush();
    worker->set_commit_hook(nullptr, nullptr);
  }
}

// Load progress: a redrawn bar on a terminal, a line per 10% otherwise.
class LoadProgressDisplay {
 public:
  LoadProgressDisplay(std::FILE* out, std::string name, Env& env)
      : out_(out),
        name_(std::move(name)),
        env_(env),
        start_ns_(env.now_ns()),
        last_draw_ns_(start_ns_) {
    tty_ = out_ != nullptr && isatty(fileno(out_)) != 0;
  }

  void update(double fraction) {
    if (out_ == nullptr) return;
    fraction = std::clamp(fraction, 0.0, 1.0);
    const uint64_t now_ns = env_.now_ns();
    if (tty_) {
      if (now_ns - last_draw_ns_ < kNsPerSec / 10 && fraction < 1.0) return;  // ≤ 10 redraws/s
      last_draw_ns_ = now_ns;
      constexpr int kWidth = 30;
      const int filled = static_cast<int>(fraction * kWidth);
      fmt::print(out_, "\rloading {} [{}{}] {:3.0f}%  {:.1f} s", name_, std::string(filled, '#'),
                 std::string(kWidth - filled, ' '), fraction * 100, seconds(now_ns));
      std::fflush(out_);
      drawn_ = true;
    } else {
      // Logs and pipes: a line every 2 s, so short loads print only the final line.
      if (now_ns - last_draw_ns_ < 2 * kNsPerSec || fraction >= 1.0) return;
      last_draw_ns_ = now_ns;
      fmt::print(out_, "loading {}: {:.0f}% ({:.1f} s)\n", name_, fraction * 100, seconds(now_ns));
      std::fflush(out_);
    }
  }

  void finish(uint64_t rss_bytes) {
    if (out_ == nullptr) return;
    if (drawn_) fmt::print(out_, "\n");
    fmt::print(out_, "loaded {} in {:.2f} s, RSS {:.1f} MiB\n", name_, seconds(env_.now_ns()),
               static_cast<double>(rss_bytes) / (1 << 20));
    std::fflush(out_);
  }

  double seconds(uint64_t now_ns) const {
    return static_cast<double>(now_ns - start_ns_) / kNsPerSec;
  }

 private:
  std::FILE* out_;
  std::string name_;
  Env& env_;
  uint64_t start_ns_;
  uint64_t last_draw_ns_;
  bool tty_ = false;
  bool drawn_ = false;
};

}  // namespace

LatencyUs summarize(const Histogram& h) {
  LatencyUs l;
  l.p50 = h.percentile(50) / 1e3;
  l.p90 = h.percentile(90) / 1e3;
  l.p99 = h.percentile(99) / 1e3;
  l.p999 = h.percentile(99.9) / 1e3;
  l.mean = h.mean() / 1e3;
  l.max = h.max() / 1e3;
  return l;
}

nlohmann::json latency_json(const LatencyUs& l) {
  return {{"p50", l.p50},   {"p90", l.p90},   {"p99", l.p99},
          {"p999", l.p999}, {"mean", l.mean}, {"max", l.max}};
}

namespace {

Status check_options(const RunOptions& o) {
  if (!(o.seconds > 0) || !std::isfinite(o.seconds)) {
    return Status::InvalidArgument(fmt::format("seconds must be > 0, not {}", o.seconds));
  }
  if (o.workers < 1 || o.workers > kMaxWorkers) {
    return Status::InvalidArgument(
        fmt::format("workers must be in [1, {}], not {}", kMaxWorkers, o.workers));
  }
  if (!(o.warmup_s >= 0) || !std::isfinite(o.warmup_s)) {
    return Status::InvalidArgument(fmt::format("warmup must be >= 0, not {}", o.warmup_s));
  }
  if (o.replicas < 1 || o.replicas > 16) {
    return Status::InvalidArgument(fmt::format("replicas must be in [1, 16], not {}", o.replicas));
  }
  if (!(o.wan_rtt_ms >= 0) || !(o.wan_rtt_ms <= 10'000)) {
    return Status::InvalidArgument(
        fmt::format("wan-rtt-ms must be in [0, 10000], not {}", o.wan_rtt_ms));
  }
  if (o.batch_txns < 1 || o.batch_txns > 65'535) {
    return Status::InvalidArgument(
        fmt::format("batch-txns must be in [1, 65535], not {}", o.batch_txns));
  }
  if (!(o.batch_us > 0) || !(o.batch_us <= 10'000'000)) {
    return Status::InvalidArgument(fmt::format("batch-us must be in (0, 1e7], not {}", o.batch_us));
  }
  if (o.replica_nice < 0 || o.replica_nice > 19) {
    return Status::InvalidArgument(
        fmt::format("replica-nice must be in [0, 19], not {}", o.replica_nice));
  }
  if (o.cpu_placement != "auto" && o.cpu_placement != "none") {
    return Status::InvalidArgument("cpu-placement must be auto or none, not " + o.cpu_placement);
  }
  if (o.fsync != "none" && o.fsync != "batch" && o.fsync != "always") {
    return Status::InvalidArgument("fsync must be none, batch or always, not " + o.fsync);
  }
  if (!o.json_path.empty()) {
    // Fail before a long load rather than after the run; "a" neither truncates nor needs
    // the file to exist.
    std::FILE* f = std::fopen(o.json_path.c_str(), "a");
    if (f == nullptr) return Status::IOError("cannot write JSON to " + o.json_path);
    std::fclose(f);
  }
  return Status::Ok();
}

// How often the main thread looks at RunOptions::stop between live lines: Ctrl-C ends the
// measurement within this much.
constexpr uint64_t kStopPollNs = 50'000'000;

// Starts the workers (worker i on placement.worker_cpus[i] when pinned), prints live lines
// until the deadline or RunOptions::stop (then *interrupted), joins them.
void run_workers(workload::Workload& workload, txn::Engine& engine, const RunOptions& options,
                 const CpuPlacement& placement, std::vector<std::unique_ptr<ThreadState>>& states,
                 uint64_t* measure_start_ns, bool* interrupted, repl::ReplicationLeader* leader,
                 std::vector<SecondSample>* series) {
  Env& env = engine.env();
  const size_t types = workload.txn_types().size();
  for (uint32_t i = 0; i < options.workers; ++i)
    states.push_back(std::make_unique<ThreadState>(types));
  std::mutex setup_mu;
  RunClock clock;
  std::vector<std::thread> threads;
  threads.reserve(options.workers);
  for (uint32_t i = 0; i < options.workers; ++i) {
    const int cpu = placement.pinned() ? placement.worker_cpus[i] : -1;
    threads.emplace_back(worker_main, std::ref(workload), std::ref(engine), std::cref(options), i,
                         std::ref(setup_mu), std::ref(clock), std::ref(*states[i]), leader, cpu);
  }
  // Bounded: every worker increments `ready` once after its (finite) setup.
  while (clock.ready.load(std::memory_order_acquire) < options.workers) env.sleep_ns(1'000'000);
  const uint64_t start_ns = env.now_ns();
  clock.measure_start_ns = start_ns + static_cast<uint64_t>(options.warmup_s * kNsPerSec);
  clock.deadline_ns = clock.measure_start_ns + static_cast<uint64_t>(options.seconds * kNsPerSec);
  clock.go.store(true, std::memory_order_release);

  // Ticks at whole seconds from the start (warmup included), so a run of N seconds prints N
  // lines.
  std::vector<const LiveCounters*> live;
  for (const auto& s : states) live.push_back(&s->live);
  LiveSampler sampler(std::move(live));
  uint64_t last_tick_ns = start_ns;
  uint64_t ticks = 0;
  // Bounded: every pass either prints a tick, sleeps towards the next tick or the deadline,
  // or ends the loop at the deadline or on a stop request.
  for (;;) {
    const uint64_t now_ns = env.now_ns();
    const uint64_t next_tick_ns = start_ns + (ticks + 1) * kNsPerSec;
    if (now_ns >= next_tick_ns) {
      ticks = (now_ns - start_ns) / kNsPerSec;  // skips ticks missed while descheduled
      series->push_back(sampler.sample(static_cast<double>(now_ns - start_ns) / kNsPerSec,
                                       static_cast<double>(now_ns - last_tick_ns) / kNsPerSec,
                                       now_ns < clock.measure_start_ns));
      if (options.progress != nullptr) {
        LiveSampler::print(options.progress, series->back(), leader != nullptr);
      }
      last_tick_ns = now_ns;
      continue;
    }
    if (now_ns >= clock.deadline_ns) break;
    if (options.stop != nullptr && options.stop->load(std::memory_order_relaxed)) {
      clock.stop.store(true, std::memory_order_relaxed);
      *interrupted = true;
      break;
    }
    env.sleep_ns(std::min({next_tick_ns, clock.deadline_ns, now_ns + kStopPollNs}) - now_ns);
  }
  for (auto& t : threads) t.join();
  *measure_start_ns = clock.measure_start_ns;
}

void aggregate(const workload::Workload& workload,
               const std::vector<std::unique_ptr<ThreadState>>& states, uint64_t measure_start_ns,
               RunResult& r) {
  const std::vector<std::string> names = workload.txn_types();
  auto all = std::make_unique<Histogram>();
  auto per_type = std::make_unique<Histogram>();
  uint64_t last_end_ns = measure_start_ns;
  for (const auto& s : states) last_end_ns = std::max(last_end_ns, s->last_end_ns);
  for (size_t t = 0; t < names.size(); ++t) {
    TypeResult tr;
    tr.name = names[t];
    per_type->reset();
    for (const auto& s : states) {
      const TypeTally& x = s->tally[t];
      tr.committed += x.committed;
      tr.user_aborts += x.user_aborts;
      tr.conflict_aborts += x.conflict_aborts;
      tr.failed += x.failed;
      per_type->merge(s->latency[t]);
    }
    tr.latency_us = summarize(*per_type);
    all->merge(*per_type);
    r.committed += tr.committed;
    r.user_aborts += tr.user_aborts;
    r.conflict_aborts += tr.conflict_aborts;
    r.failed += tr.failed;
    r.per_type.push_back(std::move(tr));
  }
  r.latency_us = summarize(*all);
  all->reset();
  for (const auto& s : states) all->merge(s->commit_latency);
  r.commit_latency_us = summarize(*all);
  r.seconds = static_cast<double>(last_end_ns - measure_start_ns) / kNsPerSec;
  const double seconds = std::max(r.seconds, 1e-9);
  r.committed_per_sec = static_cast<double>(r.committed) / seconds;
  r.aborts_per_sec = static_cast<double>(r.conflict_aborts) / seconds;
}

Status write_json(const RunResult& r, const std::string& path) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return Status::IOError("cannot write JSON to " + path);
  // `replace`: check failure texts are not guaranteed UTF-8; never throw on them.
  out << r.to_json().dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  out.flush();
  if (!out) return Status::IOError("error writing JSON to " + path);
  return Status::Ok();
}

}  // namespace

nlohmann::json RunResult::to_json() const {
  nlohmann::json j;
  j["workload"] = workload;
  j["workers"] = workers;
  j["seconds"] = seconds;
  j["requested_seconds"] = requested_seconds;
  j["interrupted"] = interrupted;
  j["load_seconds"] = load_seconds;
  j["committed"] = committed;
  j["user_aborts"] = user_aborts;
  j["conflict_aborts"] = conflict_aborts;
  j["failed"] = failed;
  j["committed_per_sec"] = committed_per_sec;
  j["aborts_per_sec"] = aborts_per_sec;
  j["latency_us"] = latency_json(latency_us);
  j["speculative_latency_us"] = latency_json(latency_us);
  if (replication.enabled) {
    j["commit_latency_us"] = latency_json(commit_latency_us);
    const ReplicationResult& rp = replication;
    nlohmann::json followers = nlohmann::json::array();
    for (const FollowerResult& f : rp.followers) {
      followers.push_back(
          {{"replica", f.replica},
           {"digest", fmt::format("{:016x}", f.digest)},
           {"digest_match", f.digest_match},
           {"consistency", !f.checked                 ? nlohmann::json("skipped")
                           : f.check_failures.empty() ? nlohmann::json("ok")
                                                      : nlohmann::json(f.check_failures)},
           {"replay_txns", f.replay_txns},
           {"replay_writes", f.replay_writes},
           {"replay_cpu_s", f.replay_cpu_s},
           {"replay_txns_per_sec_per_core", f.replay_txns_per_cpu_sec},
           {"wal_bytes", f.wal_bytes},
           {"follower_reads", f.reads.threads == 0 ? nlohmann::json(nullptr) : f.reads.to_json()}});
    }
    j["replication"] = {
        {"replicas", rp.replicas},
        {"wan_rtt_ms", rp.wan_rtt_ms},
        {"batch_txns", rp.batch_txns},
        {"batch_us", rp.batch_us},
        {"fsync", rp.fsync},
        {"transport", rp.transport},
        {"entries", rp.entries},
        {"log_bytes", rp.log_bytes},
        {"logged_txns", rp.logged_txns},
        {"floor_entries", rp.floor_entries},
        {"buffer_waits", rp.buffer_waits},
        {"buffer_wait_ms", static_cast<double>(rp.buffer_wait_ns) / 1e6},
        {"lead_hold_wait_ms", static_cast<double>(rp.lead_hold_wait_ns) / 1e6},
        {"backlog_wait_ms", static_cast<double>(rp.backlog_wait_ns) / 1e6},
        {"lead_waits", rp.lead_waits},
        {"idle_seals", rp.idle_seals},
        {"retained_shed", rp.retained_shed},
        {"lag_waits", rp.lag_waits},
        {"replay_lag_waits", rp.replay_lag_waits},
        {"replay_lag_ms_max", rp.replay_lag_ms_max},
        {"replay_lag_stop_ms", rp.replay_lag_stop_ms},
        {"lead_holds", rp.lead_holds},
        {"lead_hold_unproposed_ms", static_cast<double>(rp.lead_hold_unproposed_ns) / 1e6},
        {"lead_hold_unchosen_ms", static_cast<double>(rp.lead_hold_unchosen_ns) / 1e6},
        {"pace_limited_ms", static_cast<double>(rp.pace_limited_ns) / 1e6},
        {"pace_rate_mean", rp.pace_limited_ns == 0
                               ? 0.0
                               : static_cast<double>(rp.pace_limited_txns) * 1e9 /
                                     static_cast<double>(rp.pace_limited_ns)},
        {"pace_replay_per_s", rp.pace_replay_per_s},
        {"pace_waits", rp.pace_waits},
        {"pace_wait_ms", static_cast<double>(rp.pace_wait_ns) / 1e6},
        {"bootstrap_records", rp.bootstrap_records},
        {"retransmits", rp.retransmits},
        {"catchup_entries", rp.catchup_entries},
        {"catchup_bytes", rp.catchup_bytes},
        {"bootstrap_s", rp.bootstrap_s},
        {"quiesce_s", rp.quiesce_s},
        {"final_tid", rp.final_tid},
        {"leader_digest", fmt::format("{:016x}", rp.leader_digest)},
        {"followers", followers}};
    nlohmann::json per_hop = nlohmann::json::object();
    for (size_t i = 0; i < repl::kCopyHops; ++i) {
      per_hop[std::string(repl::copy_hop_name(static_cast<repl::CopyHop>(i)))] =
          rp.copies_per_byte.per_hop[i];
    }
    j["replication"]["copies_per_byte"] = rp.copies_per_byte.user;
    j["replication"]["kernel_copies_per_byte"] = rp.copies_per_byte.kernel;
    j["replication"]["copies_per_byte_by_hop"] = per_hop;
    j["replication"]["copied_bytes"] = {{"leader", repl::copy_counts_json(rp.leader_copies)},
                                        {"followers", repl::copy_counts_json(rp.follower_copies)}};
  }
  nlohmann::json types = nlohmann::json::object();
  for (const TypeResult& t : per_type) {
    types[t.name] = {{"committed", t.committed},
                     {"user_aborts", t.user_aborts},
                     {"aborts", t.conflict_aborts},
                     {"failed", t.failed},
                     {"latency_us", latency_json(t.latency_us)}};
  }
  j["per_type"] = std::move(types);
  if (!checked) {
    j["consistency"] = "skipped";
  } else if (check_failures.empty()) {
    j["consistency"] = "ok";
  } else {
    j["consistency"] = check_failures;
  }
  j["rss_bytes"] = rss_bytes;
  j["peak_rss_bytes"] = peak_rss_bytes;
  j["memory_reserve_mb"] = memory_reserve_mb;
  j["cpu_placement"] = cpu_placement;
  nlohmann::json series_json = nlohmann::json::array();
  for (const SecondSample& x : series) {
    nlohmann::json e = {{"t_s", x.t_s},
                        {"warmup", x.warmup},
                        {"committed_per_sec", x.committed_per_sec},
                        {"aborts_per_sec", x.aborts_per_sec},
                        {"failed_per_sec", x.failed_per_sec},
                        {"latency_p50_us", x.latency_p50_us},
                        {"latency_p99_us", x.latency_p99_us}};
    if (replication.enabled) {
      e["acked_per_sec"] = x.acked_per_sec;
      e["commit_latency_p50_us"] = x.commit_latency_p50_us;
      e["commit_latency_p99_us"] = x.commit_latency_p99_us;
    }
    series_json.push_back(std::move(e));
  }
  j["series"] = std::move(series_json);
  return j;
}

// "2.50 in user space (acceptor_store 1.50, ...), 1.50 in the kernel (...)": hops that copied.
static std::string copies_text(const repl::CopiesPerByte& c) {
  std::string user, kernel;
  for (size_t i = 0; i < repl::kCopyHops; ++i) {
    const auto hop = static_cast<repl::CopyHop>(i);
    if (c.per_hop[i] == 0) continue;
    std::string& to = repl::copy_hop_in_kernel(hop) ? kernel : user;
    to +=
        fmt::format("{}{} {:.2f}", to.empty() ? "" : ", ", repl::copy_hop_name(hop), c.per_hop[i]);
  }
  return fmt::format("{:.2f} in user space ({}), {:.2f} in the kernel ({})", c.user, user, c.kernel,
                     kernel);
}

std::string RunResult::to_table() const {
  std::string s =
      fmt::format("\n{}: {} worker{}, {:.2f} s measured{}, load {:.2f} s\n", workload, workers,
                  workers == 1 ? "" : "s", seconds,
                  interrupted ? fmt::format(" (interrupted; {:g} s requested)", requested_seconds)
                              : std::string(),
                  load_seconds);
  s += fmt::format("{:<14} {:>12} {:>11} {:>11} {:>8} {:>9} {:>9} {:>9} {:>9}\n", "type",
                   "committed", "user_abort", "conflicts", "failed", "p50_us", "p90_us", "p99_us",
                   "p999_us");
  auto row = [&s](const std::string& name, uint64_t c, uint64_t u, uint64_t a, uint64_t f,
                  const LatencyUs& l) {
    s += fmt::format("{:<14} {:>12} {:>11} {:>11} {:>8} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f}\n",
                     name, c, u, a, f, l.p50, l.p90, l.p99, l.p999);
  };
  for (const TypeResult& t : per_type) {
    row(t.name, t.committed, t.user_aborts, t.conflict_aborts, t.failed, t.latency_us);
  }
  row("total", committed, user_aborts, conflict_aborts, failed, latency_us);
  if (replication.enabled) {
    row("commit(acked)", committed, user_aborts, conflict_aborts, failed, commit_latency_us);
  }
  s += fmt::format("throughput: {:.0f} committed/s, {:.0f} aborts/s", committed_per_sec,
                   aborts_per_sec);
  if (failed != 0) s += fmt::format(", {} failed", failed);
  s += fmt::format("\nmemory: RSS after load {:.1f} MiB, peak RSS {:.1f} MiB",
                   static_cast<double>(rss_bytes) / (1 << 20),
                   static_cast<double>(peak_rss_bytes) / (1 << 20));
  if (memory_reserve_mb != 0) s += fmt::format(" ({} MiB reserved at start)", memory_reserve_mb);
  s += "\n";
  if (replication.enabled) {
    const ReplicationResult& rp = replication;
    s += fmt::format(
        "replication: {} replicas over {}, WAN RTT {} ms, batch {} txns / {} us, fsync {}: {} "
        "entries, {:.1f} MiB logged; bootstrap {:.2f} s, quiesce {:.2f} s\n",
        rp.replicas, rp.transport, rp.wan_rtt_ms, rp.batch_txns, rp.batch_us, rp.fsync, rp.entries,
        static_cast<double>(rp.log_bytes) / (1 << 20), rp.bootstrap_s, rp.quiesce_s);
    s += "  copies per replicated byte: " + copies_text(rp.copies_per_byte) + "\n";
    for (const FollowerResult& f : rp.followers) {
      s += fmt::format(
          "  replica {}: digest {:016x} {}, consistency {}, replay {:.0f} txn/s per core "
          "({} txns in {:.2f} CPU s), WAL {:.1f} MiB\n",
          f.replica, f.digest, f.digest_match ? "= leader" : "!= leader",
          !f.checked                 ? "skipped"
          : f.check_failures.empty() ? "ok"
                                     : "FAILED",
          f.replay_txns_per_cpu_sec, f.replay_txns, f.replay_cpu_s,
          static_cast<double>(f.wal_bytes) / (1 << 20));
      if (f.reads.threads > 0) s += "    " + f.reads.to_text() + "\n";
    }
  }
  if (!checked) {
    s += "consistency: skipped\n";
  } else if (check_failures.empty()) {
    s += "consistency: ok\n";
  } else {
    s += fmt::format("consistency: FAILED ({} condition{})\n", check_failures.size(),
                     check_failures.size() == 1 ? "" : "s");
    for (const std::string& f : check_failures) s += "  - " + f + "\n";
  }
  return s;
}

namespace {

// Confines every thread of this process and of the follower processes to `cpus`. A follower
// that has exited is skipped: the run notices it on its own.
Status confine_run(std::span<const int> cpus, const ReplicatedRun* replicated) {
  SHOAL_TRY(confine_threads(0, cpus));
  if (replicated == nullptr) return Status::Ok();
  for (pid_t pid : replicated->children()) {
    const Status s = confine_threads(pid, cpus);
    if (!s.ok() && !s.is_not_found()) return s;
  }
  return Status::Ok();
}

// Gives every thread of the run every cpu again. A failure costs speed, not results: it is
// reported on stderr and the run goes on.
void restore_run(std::span<const int> all_cpus, const ReplicatedRun* replicated) {
  const Status s = confine_run(all_cpus, replicated);
  if (!s.ok()) {
    fmt::print(stderr, "shoal: threads stay on their run's cpus: {}\n", s.to_string());
  }
}

// Plans the run's CPU placement (RunOptions::cpu_placement) and confines the threads that are
// not workers; the workers pin themselves. The plan's usable_cpus are restored afterwards.
Result<CpuPlacement> place_run(const RunOptions& options, const ReplicatedRun* replicated) {
  auto placement = plan_cpu_placement_here(options.cpu_placement, options.workers);
  if (!placement.ok() || !placement->pinned()) return placement;
  const Status confined = confine_run(placement->other_cpus, replicated);
  if (!confined.ok()) {
    // Some threads may be confined already: give them every cpu back before failing.
    restore_run(placement->usable_cpus, replicated);
    return confined;
  }
  return placement;
}

}  // namespace

Result<RunResult> run_benchmark(workload::Workload& workload, txn::Engine& engine,
                                const RunOptions& options) {
  SHOAL_TRY(check_options(options));
  RunResult r;
  r.workload = workload.name();
  r.workers = options.workers;
  r.requested_seconds = options.seconds;
  Env& env = engine.env();

  LoadProgressDisplay progress(options.progress, r.workload, env);
  const uint64_t load_start_ns = env.now_ns();
  workload::LoadOptions load_options;
  load_options.workers = options.workers;
  load_options.warehouses = options.warehouses;
  load_options.seed = options.seed;
  SHOAL_TRY(workload.load(engine, load_options, [&progress](double f) { progress.update(f); }));
  r.load_seconds = static_cast<double>(env.now_ns() - load_start_ns) / kNsPerSec;
  r.rss_bytes = current_rss_bytes();
  r.memory_reserve_mb = options.memory_reserve_mb;
  progress.finish(r.rss_bytes);

  std::unique_ptr<ReplicatedRun> replicated;
  if (options.replicas > 1) {
    auto started = ReplicatedRun::start(workload, engine, options, &r.replication);
    if (!started.ok()) return started.status();
    replicated = std::move(*started);
  }

  auto placed = place_run(options, replicated.get());
  if (!placed.ok()) return placed.status();
  const CpuPlacement& placement = *placed;
  r.cpu_placement = options.cpu_placement == "none" ? "none" : placement.describe();
  if (options.progress != nullptr)
    fmt::print(options.progress, "cpu placement: {}\n", r.cpu_placement);
  std::vector<std::unique_ptr<ThreadState>> states;
  uint64_t measure_start_ns = 0;
  run_workers(workload, engine, options, placement, states, &measure_start_ns, &r.interrupted,
              replicated ? &replicated->leader() : nullptr, &r.series);
  // The quiesce, the checks and the followers' last replay may use every CPU again.
  if (placement.pinned()) restore_run(placement.usable_cpus, replicated.get());
  if (replicated) {
    // Close every stream above every TID committed, then wait for the tail's acknowledgement.
    const uint64_t final_tid = replicated->close_streams();
    const uint64_t deadline_ns = env.now_ns() + 60 * kNsPerSec;
    // Bounded by the deadline.
    for (;;) {
      const uint64_t w = replicated->leader().watermark();
      bool pending = false;
      for (auto& s : states) {
        s->acks.drain(w, env.now_ns(), s->commit_latency, nullptr);
        pending = pending || !s->acks.empty();
      }
      if (!pending && w >= final_tid) break;
      if (env.now_ns() >= deadline_ns) {
        return Status::Timeout("replication: the watermark did not cover the run within 60 s");
      }
      env.sleep_ns(50'000);
    }
  }
  aggregate(workload, states, measure_start_ns, r);
  r.peak_rss_bytes = peak_rss_bytes();

  if (options.check) {
    r.checked = true;
    r.check_failures = workload.check(engine);
  }
  if (replicated) {
    SHOAL_TRY(replicated->finish(engine, options.check, &r.replication));
    for (const FollowerResult& f : r.replication.followers) {
      if (!f.digest_match) {
        r.check_failures.push_back(
            fmt::format("replica {}: store digest {:016x} differs from the leader's {:016x}",
                        f.replica, f.digest, r.replication.leader_digest));
      }
      for (const std::string& why : f.check_failures) {
        r.check_failures.push_back(fmt::format("replica {}: {}", f.replica, why));
      }
      if (f.reads.torn > 0) {
        r.check_failures.push_back(
            fmt::format("replica {}: {} torn snapshots in follower reads: {}", f.replica,
                        f.reads.torn, f.reads.first_violation));
      }
    }
    replicated.reset();  // stops the leader; followers exit
  }
  if (options.report != nullptr) {
    fmt::print(options.report, "{}", r.to_table());
    std::fflush(options.report);
  }
  if (!options.json_path.empty()) SHOAL_TRY(write_json(r, options.json_path));
  return r;
}

}  // namespace shoal::bench
