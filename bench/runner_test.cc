#include "bench/runner.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "src/base/memory_reserve.h"
#include "src/workload/micro/micro.h"
#include "src/workload/ycsb/ycsb.h"

namespace shoal::bench {
namespace {

// A counter table: "incr" adds 1 to the shared counter (two workers conflict on it);
// every 4th transaction is "rollback", which reads the counter and rolls back deliberately.
struct CounterArgs {
  txn::Table<1>* table;
};

Status incr(txn::Txn& txn, const void* raw, void*) {
  auto* table = static_cast<const CounterArgs*>(raw)->table;
  uint64_t v = 0;
  SHOAL_TRY(txn.get(*table, key1(0), &v));
  return txn.put(*table, key1(0), v + 1);
}

Status rollback(txn::Txn& txn, const void* raw, void*) {
  auto* table = static_cast<const CounterArgs*>(raw)->table;
  uint64_t v = 0;
  SHOAL_TRY(txn.get(*table, key1(0), &v));
  SHOAL_TRY(txn.put(*table, key1(0), v + 1000));
  return Status::UserAbort();
}

class CounterWorkload final : public workload::Workload {
 public:
  explicit CounterWorkload(bool report_failure = false) : report_failure_(report_failure) {}
  std::string name() const override { return "counter"; }
  std::vector<std::string> txn_types() const override { return {"incr", "rollback"}; }
  Status load(txn::Engine& engine, const workload::LoadOptions&,
              const std::function<void(double)>& progress) override {
    table_ = engine.create_table<1>("counter");
    progress(0.5);
    SHOAL_TRY(table_->load(key1(0), uint64_t{0}));
    progress(1.0);
    return Status::Ok();
  }
  std::unique_ptr<workload::Client> make_client(txn::Worker& worker, uint32_t, uint64_t) override {
    class C final : public workload::Client {
     public:
      C(CounterWorkload& w, txn::Worker& worker) : w_(w), worker_(worker) {}
      workload::Outcome run_one() override {
        CounterArgs args{w_.table_};
        const bool roll = (++n_ % 4) == 0;
        workload::Outcome o{roll ? 1u : 0u, worker_.run(roll ? &rollback : &incr, &args)};
        if (!roll && o.status.ok()) w_.incr_ok_.fetch_add(1);
        if (roll && o.status.is_user_abort()) w_.rollbacks_.fetch_add(1);
        return o;
      }

     private:
      CounterWorkload& w_;
      txn::Worker& worker_;
      uint64_t n_ = 0;
    };
    return std::make_unique<C>(*this, worker);
  }
  std::vector<std::string> check(txn::Engine&) override {
    uint64_t v = 0;
    EXPECT_TRUE(table_->peek(key1(0), &v, sizeof v).ok());
    std::vector<std::string> failures;
    if (v != incr_ok_.load()) failures.push_back("counter != committed increments");
    if (report_failure_) failures.push_back("deliberate failure \"quoted\"");
    return failures;
  }

  txn::Table<1>* table_ = nullptr;
  std::atomic<uint64_t> incr_ok_{0};
  std::atomic<uint64_t> rollbacks_{0};
  bool report_failure_;
};

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          (name + "." + std::to_string(::getpid()) + ".json"))
      .string();
}

RunOptions quiet(double seconds, uint32_t workers) {
  RunOptions o;
  o.seconds = seconds;
  o.workers = workers;
  o.progress = nullptr;
  o.report = nullptr;
  return o;
}

// A quiet run of one worker with `replicas` replicas, followers started from `exe`.
RunOptions replicated(double seconds, uint32_t replicas, const std::string& exe) {
  RunOptions o = quiet(seconds, 1);
  o.replicas = replicas;
  o.replica_exe = exe;
  return o;
}

TEST(RunnerTest, CountsMatchTheDatabaseAndJson) {
  CounterWorkload w;
  txn::Engine engine;
  RunOptions o = quiet(0.3, 2);
  o.check = true;
  o.json_path = temp_path("runner_test");
  Result<RunResult> r = run_benchmark(w, engine, o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->per_type.size(), 2u);
  const TypeResult& inc = r->per_type[0];
  const TypeResult& rb = r->per_type[1];
  EXPECT_EQ(inc.name, "incr");
  EXPECT_GT(inc.committed, 0u);
  EXPECT_EQ(inc.committed, w.incr_ok_.load());
  EXPECT_EQ(rb.committed, w.rollbacks_.load());
  EXPECT_EQ(rb.user_aborts, rb.committed);  // every rollback is a user abort
  EXPECT_EQ(inc.user_aborts, 0u);
  EXPECT_EQ(r->committed, inc.committed + rb.committed);
  EXPECT_EQ(r->user_aborts, rb.user_aborts);
  EXPECT_EQ(r->failed, 0u);
  EXPECT_TRUE(r->checked);
  EXPECT_TRUE(r->consistent());
  EXPECT_GT(r->seconds, 0.29);
  EXPECT_GT(r->committed_per_sec, 0);
  EXPECT_GT(r->rss_bytes, 0u);
  EXPECT_GE(r->peak_rss_bytes, r->rss_bytes);
  EXPECT_GT(r->latency_us.p50, 0);
  EXPECT_LE(r->latency_us.p50, r->latency_us.p99);
  EXPECT_LE(r->latency_us.p99, r->latency_us.p999);

  std::ifstream in(o.json_path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["workload"], "counter");
  EXPECT_EQ(j["workers"], 2);
  EXPECT_EQ(j["committed"], r->committed);
  EXPECT_EQ(j["consistency"], "ok");
  for (const char* key : {"seconds", "committed_per_sec", "aborts_per_sec", "rss_bytes",
                          "peak_rss_bytes", "load_seconds"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  for (const char* p : {"p50", "p90", "p99", "p999"}) EXPECT_TRUE(j["latency_us"].contains(p));
  ASSERT_TRUE(j["per_type"].contains("incr"));
  ASSERT_TRUE(j["per_type"].contains("rollback"));
  EXPECT_EQ(j["per_type"]["incr"]["committed"], inc.committed);
  EXPECT_EQ(j["per_type"]["rollback"]["user_aborts"], rb.user_aborts);
  EXPECT_EQ(j["per_type"]["incr"]["aborts"], inc.conflict_aborts);
  EXPECT_TRUE(j["per_type"]["incr"]["latency_us"].contains("p999"));
  std::filesystem::remove(o.json_path);
}

TEST(RunnerTest, ReportsCheckFailuresAndSkippedCheck) {
  {
    CounterWorkload w(/*report_failure=*/true);
    txn::Engine engine;
    RunOptions o = quiet(0.1, 1);
    o.check = true;
    o.json_path = temp_path("runner_test_fail");
    Result<RunResult> r = run_benchmark(w, engine, o);
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r->consistent());
    ASSERT_EQ(r->check_failures.size(), 1u);
    EXPECT_NE(r->to_table().find("FAILED"), std::string::npos);
    std::ifstream in(o.json_path);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    ASSERT_TRUE(j["consistency"].is_array());
    EXPECT_EQ(j["consistency"][0], "deliberate failure \"quoted\"");
    std::filesystem::remove(o.json_path);
  }
  {
    CounterWorkload w;
    txn::Engine engine;
    Result<RunResult> r = run_benchmark(w, engine, quiet(0.1, 1));
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r->checked);
    EXPECT_EQ(r->to_json()["consistency"], "skipped");
  }
}

TEST(RunnerTest, WarmupIsNotCounted) {
  CounterWorkload w;
  txn::Engine engine;
  RunOptions o = quiet(0.2, 1);
  o.warmup_s = 0.2;
  Result<RunResult> r = run_benchmark(w, engine, o);
  ASSERT_TRUE(r.ok());
  EXPECT_GT(r->per_type[0].committed, 0u);
  EXPECT_LT(r->per_type[0].committed, w.incr_ok_.load());  // warmup commits excluded
  EXPECT_LT(r->seconds, 0.35);
}

// RunOptions::stop (Ctrl-C) ends a 60 s run soon after it is set; the result covers the time
// measured and is otherwise complete (check run, JSON written, marked interrupted).
TEST(RunnerTest, StopEndsTheRunEarlyAndReportsTheTimeMeasured) {
  CounterWorkload w;
  txn::Engine engine;
  std::atomic<bool> stop{false};
  RunOptions o = quiet(60, 2);
  o.stop = &stop;
  o.check = true;
  o.json_path = temp_path("runner_test_stop");
  std::thread stopper([&stop] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop.store(true);
  });
  const auto started = std::chrono::steady_clock::now();
  Result<RunResult> r = run_benchmark(w, engine, o);
  const double took_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  stopper.join();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_LT(took_s, 10.0);
  EXPECT_TRUE(r->interrupted);
  EXPECT_EQ(r->requested_seconds, 60.0);
  EXPECT_GT(r->seconds, 0.25);
  EXPECT_LT(r->seconds, 10.0);
  EXPECT_GT(r->committed, 0u);
  EXPECT_DOUBLE_EQ(r->committed_per_sec, static_cast<double>(r->committed) / r->seconds);
  EXPECT_TRUE(r->checked);
  EXPECT_TRUE(r->consistent());
  EXPECT_EQ(r->per_type[0].committed, w.incr_ok_.load());  // nothing ran past the report
  EXPECT_NE(r->to_table().find("(interrupted; 60 s requested)"), std::string::npos);
  std::ifstream in(o.json_path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  EXPECT_EQ(j.value("interrupted", false), true);
  EXPECT_EQ(j.value("requested_seconds", 0.0), 60.0);
  EXPECT_EQ(j.value("consistency", ""), "ok");
  std::filesystem::remove(o.json_path);

  // Not set: the run lasts its seconds and says nothing of an interruption.
  CounterWorkload w2;
  txn::Engine engine2;
  std::atomic<bool> never{false};
  RunOptions full = quiet(0.2, 1);
  full.stop = &never;
  Result<RunResult> r2 = run_benchmark(w2, engine2, full);
  ASSERT_TRUE(r2.ok());
  EXPECT_FALSE(r2->interrupted);
  EXPECT_GT(r2->seconds, 0.19);
  EXPECT_EQ(r2->to_table().find("interrupted"), std::string::npos);
}

TEST(RunnerTest, RejectsBadOptions) {
  CounterWorkload w;
  txn::Engine engine;
  EXPECT_EQ(run_benchmark(w, engine, quiet(0, 1)).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(run_benchmark(w, engine, quiet(-1, 1)).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(run_benchmark(w, engine, quiet(1, 0)).status().code(), Code::kInvalidArgument);
  RunOptions o = quiet(1, 1);
  o.json_path = "/nonexistent-dir/x.json";
  EXPECT_EQ(run_benchmark(w, engine, o).status().code(), Code::kIOError);
  EXPECT_EQ(w.table_, nullptr);  // rejected before loading
}

TEST(RunnerTest, ProgressAndLiveLines) {
  CounterWorkload w;
  txn::Engine engine;
  RunOptions o = quiet(1.2, 1);
  std::FILE* progress = std::tmpfile();
  std::FILE* report = std::tmpfile();
  ASSERT_NE(progress, nullptr);
  ASSERT_NE(report, nullptr);
  o.progress = progress;
  o.report = report;
  ASSERT_TRUE(run_benchmark(w, engine, o).ok());
  auto slurp = [](std::FILE* f) {
    std::rewind(f);
    std::string s;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
    std::fclose(f);
    return s;
  };
  const std::string p = slurp(progress);
  const std::string t = slurp(report);
  EXPECT_NE(p.find("loaded counter"), std::string::npos) << p;
  EXPECT_NE(p.find("committed/s"), std::string::npos) << p;  // one live line at 1 s
  EXPECT_NE(p.find("p99"), std::string::npos) << p;
  EXPECT_NE(t.find("incr"), std::string::npos) << t;
  EXPECT_NE(t.find("consistency: skipped"), std::string::npos) << t;
}

TEST(MicroTest, SumInvariantHoldsAfterRun) {
  Result<std::unique_ptr<workload::Workload>> w = workload::make_micro_workload({.keys = 1000});
  ASSERT_TRUE(w.ok());
  txn::Engine engine;
  RunOptions o = quiet(0.3, 2);
  o.check = true;
  Result<RunResult> r = run_benchmark(**w, engine, o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_GT(r->committed, 0u);
  EXPECT_TRUE(r->consistent()) << r->check_failures[0];
  EXPECT_FALSE(workload::make_micro_workload({.keys = 3}).ok());
}

// The log's counts in the report are the run's: a micro transaction writes, so each committed
// one is one logged record; the bootstrap's records (the loaded keys, shipped through the same
// streams before the run) are reported apart and not counted again.
TEST(ReplicatedRunTest, LogCountsAreTheRunsWithoutTheBootstrap) {
  Result<std::unique_ptr<workload::Workload>> w = workload::make_micro_workload({.keys = 50000});
  ASSERT_TRUE(w.ok());
  txn::Engine engine;
  RunOptions o = replicated(0.2, 2, SHOAL_BINARY);
  Result<RunResult> r = run_benchmark(**w, engine, o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const ReplicationResult& rp = r->replication;
  ASSERT_GT(r->committed, 0u);
  // Within a transaction per worker of the measured ones (the one at the deadline either way):
  // the bootstrap's hundreds of records counted in would be far outside.
  ASSERT_GT(rp.bootstrap_records, 10 * o.workers);
  EXPECT_LE(rp.logged_txns, r->committed + o.workers)
      << "bootstrap records " << rp.bootstrap_records;
  EXPECT_GE(rp.logged_txns + o.workers, r->committed);
}

// Writes an executable shell script at `path` that runs `prelude`, then execs the real `shoal`
// with its arguments: a stand-in for the followers' binary (RunOptions::replica_exe).
void write_replica_wrapper(const std::string& path, const std::string& prelude) {
  {
    std::ofstream out(path, std::ios::trunc);
    out << "#!/bin/sh\n" << prelude << "\nexec \"" << SHOAL_BINARY << "\" \"$@\"\n";
  }
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
}

// A follower process that exits during start-up (under load one lost its shm link and, with no
// configuration manager, stopped) never installs the load: the run must fail at once naming
// it, not sit out bootstrap's 300 s wait for every follower (it looked like a hang).
TEST(ReplicatedRunTest, FollowerThatExitsFailsTheStartAtOnce) {
  const std::string script = (std::filesystem::temp_directory_path() /
                              ("shoal-exit-replica2." + std::to_string(::getpid()) + ".sh"))
                                 .string();
  // Replica 1 is real (with the leader, a majority of 3: the streams lead); replica 2 exits.
  write_replica_wrapper(script, "case \" $* \" in *\" --replica 2 \"*) exit 3;; esac");
  Result<std::unique_ptr<workload::Workload>> w = workload::make_micro_workload({.keys = 1000});
  ASSERT_TRUE(w.ok());
  txn::Engine engine;
  RunOptions o = replicated(0.3, 3, script);
  const auto start = std::chrono::steady_clock::now();
  Result<RunResult> r = run_benchmark(**w, engine, o);
  const auto took = std::chrono::steady_clock::now() - start;
  std::filesystem::remove(script);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnavailable) << r.status().to_string();
  EXPECT_NE(r.status().message().find("follower 2 (pid"), std::string::npos)
      << r.status().to_string();
  EXPECT_NE(r.status().message().find("exited (exit status 3)"), std::string::npos)
      << r.status().to_string();
  // Far below bootstrap's 300 s; the start itself takes a second or two.
  EXPECT_LT(took, std::chrono::seconds(60));
}

// Runs `shoal <args>` writing its JSON to a fresh file; returns the JSON (null on failure).
nlohmann::json run_shoal_json(const std::string& args, const std::string& name) {
  const std::string json =
      (std::filesystem::temp_directory_path() / (name + "." + std::to_string(::getpid()) + ".json"))
          .string();
  const std::string cmd =
      fmt::format("\"{}\" {} --json {} > /dev/null 2>&1", SHOAL_BINARY, args, json);
  if (std::system(cmd.c_str()) != 0) return {};
  std::ifstream in(json);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  std::filesystem::remove(json);
  return j;
}

// A bench JSON's byte count, or 0 when the key is missing or not a number.
uint64_t json_bytes(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number_unsigned() ? j[key].get<uint64_t>()
                                                                         : 0;
}

// `--memory-reserve-mb`: the allocator serves the load from the reserve instead of asking the
// OS for more. Without the handoff to the allocator the reserve would only add to the peak:
// reserve + what the run alone needs.
TEST(MemoryReserveRun, TheAllocatorServesTheLoadFromTheReserve) {
  const uint64_t reserve_mb = 512;
  if (available_memory_bytes() < 4 * (reserve_mb << 20)) GTEST_SKIP() << "too little memory free";
  const std::string args = "bench micro --keys 2000000 --workers 1 --seconds 0.2";
  const nlohmann::json alone = run_shoal_json(args, "shoal-reserve-none");
  const uint64_t alone_peak = json_bytes(alone, "peak_rss_bytes");
  ASSERT_GT(alone_peak, uint64_t{80} << 20) << "the run must need memory for this to mean much";
  ASSERT_LT(alone_peak, reserve_mb << 20) << "the run must fit in the reserve";
  const nlohmann::json reserved =
      run_shoal_json(args + fmt::format(" --memory-reserve-mb {}", reserve_mb), "shoal-reserve");
  ASSERT_TRUE(reserved.is_object()) << "shoal " << args << " --memory-reserve-mb failed";
  EXPECT_EQ(json_bytes(reserved, "memory_reserve_mb"), reserve_mb);
  EXPECT_GE(json_bytes(reserved, "rss_bytes"), reserve_mb << 20)
      << "the reserve is resident from the start";
  const uint64_t peak = json_bytes(reserved, "peak_rss_bytes");
  EXPECT_LT(peak, (reserve_mb << 20) + alone_peak / 2)
      << "alone " << (alone_peak >> 20) << " MiB, with a " << reserve_mb << " MiB reserve "
      << (peak >> 20) << " MiB";
}

// Each follower process of a replicated run reserves as much as the bench does.
TEST(MemoryReserveRun, FollowersAreStartedWithTheSameReserve) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("shoal-reserve-args." + std::to_string(::getpid())))
                              .string();
  std::filesystem::create_directories(dir);
  const std::string script = dir + "/replica.sh";
  write_replica_wrapper(script, "echo \"$*\" >> " + dir + "/args");
  Result<std::unique_ptr<workload::Workload>> w = workload::make_micro_workload({.keys = 1000});
  ASSERT_TRUE(w.ok());
  txn::Engine engine;
  RunOptions o = replicated(0.2, 2, script);
  o.memory_reserve_mb = 64;
  Result<RunResult> r = run_benchmark(**w, engine, o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->memory_reserve_mb, 64u);
  std::ifstream in(dir + "/args");
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_NE(line.find("--memory-reserve-mb 64"), std::string::npos) << line;
  std::filesystem::remove_all(dir);
}

TEST(YcsbTest, AllWorkloadsRunAndCheck) {
  for (char letter : {'A', 'B', 'C', 'F'}) {
    Result<std::unique_ptr<workload::Workload>> w =
        workload::make_ycsb_workload({.workload = letter, .records = 2000, .theta = 0.99});
    ASSERT_TRUE(w.ok());
    txn::Engine engine;
    RunOptions o = quiet(0.1, 2);
    o.check = true;
    Result<RunResult> r = run_benchmark(**w, engine, o);
    ASSERT_TRUE(r.ok()) << letter;
    EXPECT_GT(r->committed, 0u) << letter;
    EXPECT_TRUE(r->consistent()) << letter;
    EXPECT_EQ(r->per_type.size(), letter == 'C' ? 1u : 2u) << letter;
    if (letter == 'C') {
      EXPECT_EQ(r->per_type[0].name, "read");
    }
    if (letter == 'F') {
      EXPECT_EQ(r->per_type[1].name, "rmw");
    }
  }
  EXPECT_FALSE(workload::make_ycsb_workload({.workload = 'D'}).ok());
  EXPECT_FALSE(workload::make_ycsb_workload({.workload = 'A', .records = 1000, .theta = 1.0}).ok());
}

// The Zipfian generator's rank frequencies follow 1/rank^theta (checked loosely at theta
// 0.99), ranks stay in range, and scrambling stays in range.
TEST(YcsbTest, ZipfianShape) {
  constexpr uint64_t kItems = 1000;
  workload::Zipfian z(kItems, 0.99);
  Rng rng(11);
  std::vector<uint64_t> hits(kItems, 0);
  constexpr int kDraws = 500'000;
  for (int i = 0; i < kDraws; ++i) {
    const uint64_t r = z.next(rng);
    ASSERT_LT(r, kItems);
    ++hits[r];
  }
  // Expected share of rank 0 is 1/zeta(items, theta); of rank 1, 2^-theta of that.
  double zeta = 0;
  for (uint64_t i = 1; i <= kItems; ++i) zeta += std::pow(static_cast<double>(i), -0.99);
  const double p0 = static_cast<double>(hits[0]) / kDraws;
  EXPECT_NEAR(p0, 1.0 / zeta, 0.01);
  EXPECT_NEAR(static_cast<double>(hits[1]) / hits[0], std::pow(0.5, 0.99), 0.05);
  EXPECT_GT(hits[10], hits[100]);
  // Scrambling keeps the range and moves the hot key away from 0.
  Rng rng2(11);
  for (int i = 0; i < 1000; ++i) ASSERT_LT(workload::scrambled_zipfian(z, rng2), kItems);
  EXPECT_NE(workload::fnv1a64(0) % kItems, 0u);
}

}  // namespace
}  // namespace shoal::bench
