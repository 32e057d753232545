// Integration tests of the shard server processes through the built `shoal` binary
// (SHOAL_BINARY, set by CMake): a 2-shard micro run at 0% and 100% cross-shard, a bad config,
// the cluster up/status/down round trip, a shard killed mid-run, and the bank's history check
// (serializable and money conserved; a planted bug caught); replicated shards: digests equal
// on every replica, a dead follower does not stop its shard, a planted difference is found,
// followers of every shard serve read-only transactions at their snapshots; a whole cluster
// restarted from disk (`cluster down`/`up`, and after SIGKILL of every process) keeps its rows
// and every acknowledged transaction, and bad directories are refused.
//
// Robustness on a loaded 2-core machine: every child runs under a deadline and is killed
// (and reaped) when it passes; ports come from the kernel (bind to port 0); each test works
// in its own temporary directory; TearDown stops any cluster a failed test left running.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#if defined(SHOAL_HAVE_HIREDIS)
#include <hiredis/hiredis.h>
#endif

#include "src/base/cpu_placement.h"
#include "src/cluster/cluster_state.h"
#include "src/cluster/etcd_config_manager.h"
#include "src/cluster/etcd_process.h"
#include "src/cluster/http_client.h"
#include "src/ops/metrics_parse.h"
#include "src/ops/promtool.h"
#include "src/repl/acceptor_log.h"
#include "src/server/control.h"
#include "src/server/live_latency.h"
#include "src/server/testing/processes.h"

namespace shoal::server {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Outcome {
  int exit_code = -1;  // -1: killed at the deadline
  std::string output;  // stdout + stderr
};

// Runs `shoal args...` with output to `log`; kills it if it outlives `timeout_s`.
pid_t start(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> all = {SHOAL_BINARY};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* f = freopen(log.c_str(), "w", stdout);
    if (f != nullptr) dup2(fileno(stdout), STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

Outcome finish(pid_t pid, const std::string& log, double timeout_s) {
  Outcome o;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (Clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  o.output = ss.str();
  return o;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Polls `log` until it contains `needle`; false after timeout_s.
bool wait_for_text(const std::string& log, const std::string& needle, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  // Bounded by the deadline.
  while (read_file(log).find(needle) == std::string::npos) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

// The processes `pid`'s threads forked (/proc/<pid>/task/*/children).
std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& task : fs::directory_iterator(fmt::format("/proc/{}/task", pid), ec)) {
    std::ifstream in(task.path() / "children");
    for (pid_t child = 0; in >> child;) out.push_back(child);
  }
  return out;
}

// True while `pid` exists and is not a zombie (a child of ours or reparented).
bool running(pid_t pid) {
  const std::string stat = read_file(fmt::format("/proc/{}/stat", pid));
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

// Waits up to timeout_s for every pid in `pids` to be gone; the ones still running.
std::vector<pid_t> still_running(const std::vector<pid_t>& pids, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  std::vector<pid_t> left = pids;
  // Bounded by the deadline.
  for (;;) {
    std::erase_if(left, [](pid_t p) { return !running(p); });
    if (left.empty() || Clock::now() >= deadline) return left;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

using test_processes::free_low_ports;
using test_processes::port_free;

class ServerCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("shoal-cli-{}-{}", getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!config_.empty()) run({"cluster", "down", "--config", config_, "--run-dir", run_dir()}, 30);
    if (!HasFailure()) fs::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string run_dir() const { return path("run"); }
  Outcome run(const std::vector<std::string>& args, double timeout_s) {
    const std::string log = path(fmt::format("out-{}.log", runs_++));
    return finish(start(args, log), log, timeout_s);
  }
  // `cluster status` until it succeeds: the followers installed the load (bounded: 60 s).
  Outcome wait_status_ok() {
    Outcome o;
    for (int i = 0; i < 300; ++i) {
      o = run({"cluster", "status", "--config", config_}, 10);
      if (o.exit_code == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return o;
  }
  // `cluster digest`, again while a restarted follower has not dialed its leader yet (it is
  // reported lost until then; bounded: 60 s). With the run directory: the leaders its etcd
  // names (not replica 0) are asked.
  Outcome digest_once_dialed(bool leaders_from_run_dir = false) {
    Outcome o;
    std::vector<std::string> args = {"cluster", "digest", "--config", config_};
    if (leaders_from_run_dir) args.insert(args.end(), {"--run-dir", run_dir()});
    for (int i = 0; i < 120; ++i) {
      o = run(args, 120);
      if (o.exit_code != 1 || o.output.find("LOST") == std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    return o;
  }
  // A 2-shard config on free ports (below the ephemeral range: free_low_ports).
  std::string write_config(uint32_t shards = 2) {
    const uint16_t port = free_low_ports(shards);
    EXPECT_NE(port, 0) << "no free ports below the ephemeral range";
    std::string toml =
        "[cluster]\nname = \"clitest\"\ntransport = \"tcp\"\nworkers = 1\n"
        "replicas = 1\n\n[[region]]\nname = \"r0\"\n";
    for (uint32_t s = 0; s < shards; ++s) {
      toml += fmt::format(
          "\n[[shard]]\nid = {}\npartition_lo = {}\npartition_hi = {}\n[[shard.replica]]\n"
          "region = \"r0\"\nhost = \"127.0.0.1\"\nport = {}\n",
          s, s + 1, s + 2, port + s);
    }
    config_ = path("cluster.toml");
    std::ofstream(config_) << toml;
    return config_;
  }
  // A config of `shards` shards x `replicas` replicas (regions r0.. at 1 ms one way), every
  // port below the ephemeral range (a process dialing out must not take a port its owner
  // binds later: a leader's replication port, port + 1, is bound after its load). `up` of
  // three replicas gives them an etcd: 1 s of silence before a follower suspects its leader
  // (a loaded test machine can silence a live one for 100 ms, the default).
  // With resp_ports, each replica also serves the Redis protocol (resp_ports_[s][r]).
  std::string write_replicated_config(uint32_t shards, uint32_t replicas, bool resp_ports = false) {
    std::string toml = fmt::format(
        "[cluster]\nname = \"repltest\"\ntransport = \"tcp\"\nworkers = 1\nreplicas = {}\n"
        "leader_timeout_ms = 1000\n",
        replicas);
    for (uint32_t r = 0; r < replicas; ++r)
      toml += fmt::format("\n[[region]]\nname = \"r{}\"\n", r);
    for (uint32_t r = 1; r < replicas; ++r) {
      toml += fmt::format("\n[[wan]]\nfrom = \"r0\"\nto = \"r{}\"\none_way_ms = 1.0\n", r);
    }
    uint16_t port = free_low_ports(2 * shards * replicas);
    EXPECT_NE(port, 0) << "no free ports below the ephemeral range";
    uint16_t resp = resp_ports ? free_low_ports(shards * replicas) : 0;
    EXPECT_TRUE(!resp_ports || resp != 0) << "no free ports below the ephemeral range";
    resp_ports_.assign(shards, std::vector<uint16_t>(replicas, 0));
    for (uint32_t s = 0; s < shards; ++s) {
      toml += fmt::format("\n[[shard]]\nid = {}\npartition_lo = {}\npartition_hi = {}\n", s, s + 1,
                          s + 2);
      for (uint32_t r = 0; r < replicas; ++r) {
        toml += fmt::format(
            "[[shard.replica]]\nregion = \"r{}\"\nhost = \"127.0.0.1\"\nport = {}\n", r, port);
        port = static_cast<uint16_t>(port + 2);
        if (resp_ports) {
          toml += fmt::format("resp_port = {}\n", resp);
          resp_ports_[s][r] = resp++;
        }
      }
    }
    config_ = path("cluster.toml");
    std::ofstream(config_) << toml;
    return config_;
  }
  // A TPC-C run on the cluster `up --ack-journal` started, and SIGKILL of its `processes`
  // processes (no clean shutdown) once a terminal has journaled an acknowledged NewOrder
  // (bounded: 60 s), not after a fixed time: what a restart must keep exists then, and the run
  // goes on. The run then fails: its cluster died under it.
  void kill_every_process_mid_tpcc_run(size_t processes);
  Outcome up(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {
        "cluster", "up", "--config", config_, "--run-dir", run_dir(), "--keys-per-partition",
        "20000"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run(args, 90);
  }

  fs::path dir_;
  std::string config_;
  std::vector<std::vector<uint16_t>> resp_ports_;  // [shard][replica], 0: none
  int runs_ = 0;
};

nlohmann::json read_json(const std::string& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in, nullptr, false);
}

// The "series" of a run across shard processes (failover_run.h, live_latency.h): one row per
// second of the run, every second that committed with its speculative percentiles (and, with
// `acknowledged`, every second that acknowledged with its commit percentiles), and no more
// commits in it than the run's total; at least `seconds_committing` of its seconds committed
// (default: all). Returns the commits the series counted.
uint64_t expect_series_per_second(const nlohmann::json& j, size_t seconds, bool acknowledged,
                                  size_t seconds_committing = SIZE_MAX) {
  const nlohmann::json& series = j["series"];
  EXPECT_TRUE(series.is_array()) << j.dump();
  EXPECT_EQ(series.size(), seconds) << series.dump();
  EXPECT_EQ(series.size(), j["committed_per_second"].size()) << j.dump();
  uint64_t committed = 0, seconds_with_latency = 0;
  for (size_t i = 0; i < series.size(); ++i) {
    const nlohmann::json& row = series[i];
    EXPECT_EQ(row["t_s"].get<double>(), static_cast<double>(i + 1)) << row.dump();
    EXPECT_EQ(row["committed_per_sec"], j["committed_per_second"][i]) << row.dump();
    EXPECT_TRUE(row.contains("aborts_per_sec")) << row.dump();
    EXPECT_EQ(row.contains("acked_per_sec"), acknowledged) << row.dump();
    const auto n = row["committed_per_sec"].get<uint64_t>();
    committed += n;
    if (n > 0) {
      ++seconds_with_latency;
      EXPECT_GT(row["latency_p50_us"].get<double>(), 0.0) << row.dump();
      EXPECT_GE(row["latency_p99_us"].get<double>(), row["latency_p50_us"].get<double>())
          << row.dump();
    }
    if (acknowledged && row["acked_per_sec"].get<uint64_t>() > 0) {
      EXPECT_GT(row["commit_latency_p50_us"].get<double>(), 0.0) << row.dump();
      EXPECT_GE(row["commit_latency_p99_us"].get<double>(),
                row["commit_latency_p50_us"].get<double>())
          << row.dump();
    }
  }
  EXPECT_GE(seconds_with_latency, std::min(seconds, seconds_committing))
      << "a second committed nothing: " << series.dump();
  EXPECT_LE(committed, j["committed"].get<uint64_t>()) << j.dump();
  return committed;
}

TEST_F(ServerCli, MicroTwoShardsLocalAndCrossShardAreConsistent) {
  for (const char* pct : {"0", "100"}) {
    const std::string json = path(fmt::format("micro-{}.json", pct));
    // One second is thousands of transactions; the assertions need more than 100.
    Outcome o = run({"bench", "micro", "--shards", "2", "--cross-shard-pct", pct, "--seconds", "1",
                     "--keys-per-shard", "20000", "--json", json},
                    120);
    ASSERT_EQ(o.exit_code, 0) << o.output;
    EXPECT_NE(o.output.find("consistency: ok"), std::string::npos) << o.output;
    nlohmann::json j = read_json(json);
    ASSERT_FALSE(j.is_discarded()) << o.output;
    EXPECT_EQ(j["consistency"], "ok");
    EXPECT_GT(j["committed"].get<uint64_t>(), 100u);
    EXPECT_EQ(j["failed"].get<uint64_t>(), 0u);
    expect_series_per_second(j, 1, /*acknowledged=*/false);
    if (std::string(pct) == "100") {
      EXPECT_EQ(j["committed_cross"].get<uint64_t>(), j["committed"].get<uint64_t>());
    } else {
      EXPECT_EQ(j["committed_cross"].get<uint64_t>(), 0u);
    }
  }
}

// `cluster up --no-read-only-hint` is TPC-C's switch: refused, before anything starts, for
// servers that load another workload.
TEST_F(ServerCli, ClusterUpRefusesTheReadOnlyHintSwitchOutsideTpcc) {
  const Outcome o = run({"cluster", "up", "--config", write_config(1), "--run-dir", run_dir(),
                         "--workload", "bank", "--no-read-only-hint"},
                        30);
  EXPECT_NE(o.exit_code, 0);
  EXPECT_NE(o.output.find("--no-read-only-hint: the servers load bank, not tpcc"),
            std::string::npos)
      << o.output;
  EXPECT_FALSE(fs::exists(fs::path(run_dir()) / "shard-0.pid")) << "nothing started";
}

TEST_F(ServerCli, BadConfigFailsNamingTheField) {
  const std::string bad = path("bad.toml");
  std::ofstream(bad)
      << "[cluster]\nname = \"x\"\n\n[[region]]\nname = \"r0\"\n\n[[shard]]\nid = 0\n"
         "partition_lo = 3\npartition_hi = 1\n[[shard.replica]]\nregion = \"r0\"\n"
         "host = \"127.0.0.1\"\nport = 1\n";
  Outcome o = run({"server", "--config", bad, "--shard", "0"}, 30);
  EXPECT_NE(o.exit_code, 0);
  EXPECT_NE(o.output.find("shoal: error:"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("shard[0].partition"), std::string::npos) << o.output;
  o = run({"cluster", "up", "--config", path("missing.toml")}, 30);
  EXPECT_NE(o.exit_code, 0);
  EXPECT_NE(o.output.find("missing.toml"), std::string::npos) << o.output;
  // Replicated: a shard listing fewer replicas than cluster.replicas, and a follower address
  // on its leader's replication port.
  std::string text;
  {
    std::ifstream in(write_replicated_config(1, 3));
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  const size_t last = text.rfind("[[shard.replica]]");
  ASSERT_NE(last, std::string::npos);
  std::ofstream(bad, std::ios::trunc) << text.substr(0, last);
  o = run({"cluster", "up", "--config", bad, "--run-dir", run_dir()}, 30);
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("shard[0].replica: has 2 replicas, cluster.replicas is 3"),
            std::string::npos)
      << o.output;
  const size_t first = text.find("\nport = ");  // not "transport = "
  ASSERT_NE(first, std::string::npos);
  const size_t second = text.find("\nport = ", first + 1) + 1;
  const size_t first_port = std::stoul(text.substr(first + 8));
  std::string clash = text;
  clash.replace(second, clash.find('\n', second) - second,
                fmt::format("port = {}", first_port + 1));
  std::ofstream(bad, std::ios::trunc) << clash;
  o = run({"replica", "--config", bad, "--shard", "0", "--replica", "1"}, 30);
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("shard[0].replica[0].port: its replication port"), std::string::npos)
      << o.output;
  config_.clear();  // nothing started
}

TEST_F(ServerCli, ClusterUpStatusDownRoundTrip) {
  write_config();
  Outcome o = up();
  ASSERT_EQ(o.exit_code, 0) << o.output;
  // One replica per shard without --fsync: nothing on disk, and `up` says so.
  EXPECT_NE(o.output.find("durability: none, memory only"), std::string::npos) << o.output;
  EXPECT_FALSE(fs::exists(run_dir() + "/shard-0-replica-0")) << "a WAL without --fsync";
  o = run({"cluster", "status", "--config", config_}, 30);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("shard 1"), std::string::npos) << o.output;
  o = up();  // a second `up` refuses: the cluster runs
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("already running"), std::string::npos) << o.output;
  o = run({"cluster", "down", "--config", config_, "--run-dir", run_dir()}, 60);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("stopped 2 processes"), std::string::npos) << o.output;
  o = run({"cluster", "status", "--config", config_}, 30);
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("DOWN"), std::string::npos) << o.output;
}

// [cluster] secret_file: servers, followers, `cluster status` and a bench against the cluster
// all prove the secret and work; a config with another secret, or none, is refused, and the
// server says whom it refused.
TEST_F(ServerCli, ClusterSecretIsProvedOnEveryConnection) {
  write_replicated_config(2, 2);
  std::string toml;
  {
    std::ifstream in(config_);
    toml.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string with_secret = "[cluster]\nsecret_file = \"secret\"\n";
  std::ofstream(path("secret")) << "the cluster's secret\n";
  std::ofstream(path("wrong")) << "a guess\n";
  std::ofstream(config_) << with_secret << toml.substr(10);  // after "[cluster]\n"
  Outcome o = up();
  ASSERT_EQ(o.exit_code, 0) << o.output;
  o = wait_status_ok();
  ASSERT_EQ(o.exit_code, 0) << o.output;
  o = run({"bench", "micro", "--cluster", config_, "--cross-shard-pct", "50", "--seconds", "1"},
          120);
  EXPECT_EQ(o.exit_code, 0) << o.output;

  const std::string wrong = path("wrong.toml"), none = path("none.toml");
  std::ofstream(wrong) << "[cluster]\nsecret_file = \"wrong\"\n" << toml.substr(10);
  std::ofstream(none) << toml;
  o = run({"cluster", "status", "--config", wrong}, 30);
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("refused our cluster secret"), std::string::npos) << o.output;
  o = run({"cluster", "status", "--config", none}, 30);
  EXPECT_NE(o.exit_code, 0) << o.output;
  std::string log;
  {
    std::ifstream in(run_dir() + "/shard-0.log");
    log.assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_NE(log.find("the dialer's cluster secret is wrong"), std::string::npos) << log;
  EXPECT_NE(log.find("the dialer sent no authentication"), std::string::npos) << log;
}

// The CPUs each thread of `pid` may run on, as /proc prints them ("0", "1-3").
std::vector<std::string> thread_cpu_lists(pid_t pid) {
  std::vector<std::string> lists;
  for (const auto& task : fs::directory_iterator(fmt::format("/proc/{}/task", pid))) {
    std::ifstream in(task.path() / "status");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("Cpus_allowed_list:", 0) == 0) {
        lists.push_back(line.substr(line.find_first_not_of(" \t", 18)));
      }
    }
  }
  return lists;
}

pid_t read_pid(const std::string& file) {
  pid_t pid = -1;
  std::ifstream(file) >> pid;
  return pid;
}

// cluster up with a core left over: the shard's one worker alone on the first cpu, every
// other thread of the server and of its follower on the rest; --worker-cpus without
// --other-cpus refused.
TEST_F(ServerCli, ClusterUpPinsEachWorkerToACoreOfItsOwn) {
  auto allowed = allowed_cpus();
  ASSERT_TRUE(allowed.ok());
  if (allowed->size() < 2) GTEST_SKIP() << "needs 2 cpus";
  const std::string worker = std::to_string(allowed->front());
  const std::string rest = format_cpu_list(std::span<const int>(*allowed).subspan(1));
  write_replicated_config(1, 2);
  Outcome o = up();
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find(fmt::format("cpu placement: worker on cpu {}; other threads on cpu {}",
                                      worker, rest)),
            std::string::npos)
      << o.output;
  std::vector<std::string> server = thread_cpu_lists(read_pid(run_dir() + "/shard-0.pid"));
  const std::vector<std::string> follower =
      thread_cpu_lists(read_pid(run_dir() + "/shard-0-replica-1.pid"));
  ASSERT_GE(server.size(), 3u) << fmt::format("{}", server);  // main, worker, replication
  ASSERT_FALSE(follower.empty());
  EXPECT_EQ(std::count(server.begin(), server.end(), worker), 1) << fmt::format("{}", server);
  EXPECT_EQ(std::count(server.begin(), server.end(), rest), static_cast<long>(server.size()) - 1)
      << fmt::format("{}", server);
  EXPECT_EQ(std::count(follower.begin(), follower.end(), rest), static_cast<long>(follower.size()))
      << fmt::format("{}", follower);

  // Refused before the server loads or listens (its port is the running cluster's).
  const std::vector<std::pair<std::vector<std::string>, std::string>> refusals = {
      {{"--worker-cpus", "0"}, "--worker-cpus and --other-cpus go together"},
      {{"--worker-cpus", "0-1", "--other-cpus", "2"}, "--worker-cpus '0-1': 2 cpus for 1 workers"},
      {{"--worker-cpus", "0", "--other-cpus", "0-1"}, "share cpu 0"},
  };
  for (const auto& [flags, why] : refusals) {
    std::vector<std::string> args = {"server", "--config", config_, "--shard", "0"};
    args.insert(args.end(), flags.begin(), flags.end());
    o = run(args, 30);
    EXPECT_NE(o.exit_code, 0) << o.output;
    EXPECT_NE(o.output.find(why), std::string::npos) << o.output;
  }
}

TEST_F(ServerCli, KilledShardFailsTransactionsAndSurvivorKeepsNoLocks) {
  write_config();
  Outcome o = up();
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const std::string log = path("bench.log");
  const pid_t bench = start({"bench", "micro", "--cluster", config_, "--cross-shard-pct", "50",
                             "--seconds", "3", "--json", path("kill.json")},
                            log);
  // Mid-run: the bench prints this right before it starts both shards (a fixed sleep from its
  // start could end before the run begins on a loaded machine); then half a second of run.
  ASSERT_TRUE(wait_for_text(log, "running micro on 2 shards", 60)) << read_file(log);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  long victim = 0;
  std::ifstream(run_dir() + "/shard-1.pid") >> victim;
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(static_cast<pid_t>(victim), SIGKILL), 0);
  o = finish(bench, log, 90);
  EXPECT_EQ(o.exit_code, 1) << o.output;  // reported, not hung
  EXPECT_NE(o.output.find("shard 1 unavailable"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("shard 1 unreachable"), std::string::npos) << o.output;
  o = run({"cluster", "status", "--config", config_}, 30);
  EXPECT_NE(o.exit_code, 0);
  EXPECT_NE(o.output.find("shard 0   127.0.0.1"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("lost shards 1"), std::string::npos) << o.output;
  o = run({"cluster", "check", "--config", config_}, 60);
  EXPECT_NE(o.output.find("20000 keys, 0 unreadable"), std::string::npos) << o.output;
}

// The bank over 2 shard processes, half its transactions cross-shard: the merged history of
// every committed transaction is serializable and no money is made or lost.
TEST_F(ServerCli, BankHistoryIsSerializableAndMoneyConserved) {
  const std::string json = path("bank.json");
  Outcome o = run({"bench", "bank", "--shards", "2", "--cross-shard-pct", "50", "--seconds", "2",
                   "--json", json},
                  120);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("serializability: ok ("), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("money: ok"), std::string::npos) << o.output;
  nlohmann::json j = read_json(json);
  ASSERT_FALSE(j.is_discarded()) << o.output;
  EXPECT_EQ(j["serializable"], true);
  EXPECT_EQ(j["money_conserved"], true);
  EXPECT_TRUE(j["anomalies"].empty()) << j["anomalies"].dump();
  // Every commit is in the checked history unless a worker's log filled (bounded): then the
  // rest is counted as not recorded, and what read from it is left out of the check.
  EXPECT_EQ(j["history_txns"].get<uint64_t>() + j["history_not_recorded"].get<uint64_t>() +
                j["history_left_out"].get<uint64_t>(),
            j["committed"].get<uint64_t>());
  // A local run reads the history from the workers' files in the run directory (what a killed
  // leader wrote survives it): one per worker, every commit in them (no replicas: each is
  // acknowledged as it commits), none from another run, nothing stood in for.
  EXPECT_EQ(j["history_source"], "files");
  EXPECT_GE(j["history_files"].get<uint64_t>(), 2u);
  EXPECT_EQ(j["history_refused_files"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["history_recorded"].get<uint64_t>(), j["committed"].get<uint64_t>());
  EXPECT_EQ(j["history_stand_ins"].get<uint64_t>(), 0u);
  EXPECT_GT(j["history_txns"].get<uint64_t>(), 1000u);
  EXPECT_GT(j["committed_cross"].get<uint64_t>(), j["committed"].get<uint64_t>() / 4);
  EXPECT_GT(j["conflict_aborts"].get<uint64_t>(), 0u) << "not contended: the check proves little";
}

// The same with read validation switched off in the servers (a planted bug): the check must
// report anomalies or lost money and exit 3.
TEST_F(ServerCli, BankSkippedReadValidationIsCaught) {
  const std::string json = path("bank-unsafe.json");
  // A failed run keeps its servers' logs in $TMPDIR: keep them in this test's directory.
  const char* tmpdir = std::getenv("TMPDIR");
  const std::string saved = tmpdir != nullptr ? tmpdir : "";
  setenv("TMPDIR", dir_.c_str(), 1);
  Outcome o = run({"bench", "bank", "--shards", "2", "--cross-shard-pct", "50", "--seconds", "2",
                   "--unsafe-skip-read-validation", "--json", json},
                  120);
  if (tmpdir != nullptr) {
    setenv("TMPDIR", saved.c_str(), 1);
  } else {
    unsetenv("TMPDIR");
  }
  EXPECT_EQ(o.exit_code, 3) << o.output;
  const bool anomalies = o.output.find("serializability: FAILED") != std::string::npos;
  const bool money = o.output.find("money: FAILED") != std::string::npos;
  EXPECT_TRUE(anomalies || money) << o.output;
  nlohmann::json j = read_json(json);
  ASSERT_FALSE(j.is_discarded()) << o.output;
  EXPECT_TRUE(j["serializable"] == false || j["money_conserved"] == false) << o.output;
  if (anomalies) {
    EXPECT_FALSE(j["anomalies"].empty());
  }
}

// `bench kv`: YCSB A through the client library against a local 2-shard cluster it starts
// with client ports, then bank transfers through the client whose client-side history the
// checker finds serializable with the money conserved; the JSON has the other benches' keys.
TEST_F(ServerCli, BenchKvThroughTheClientLibraryIsConsistent) {
  const std::string json = path("kv.json");
  Outcome o = run({"bench", "kv", "--shards", "2", "--replicas", "1", "--seconds", "2", "--keys",
                   "2000", "--connections", "4", "--check", "--check-seconds", "1", "--json", json},
                  120);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("serializability: ok ("), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("money: ok"), std::string::npos) << o.output;
  nlohmann::json j = read_json(json);
  ASSERT_FALSE(j.is_discarded()) << o.output;
  EXPECT_EQ(j["consistency"], "ok");
  EXPECT_GT(j["committed_per_sec"].get<double>(), 0.0);
  EXPECT_GT(j["committed"].get<uint64_t>(), 100u);
  EXPECT_EQ(j["failed"].get<uint64_t>(), 0u);
  EXPECT_TRUE(j.contains("aborts_per_sec"));
  for (const char* q : {"p50", "p90", "p99", "p999", "max", "mean"}) {
    EXPECT_TRUE(j["commit_latency_us"].contains(q)) << q;
  }
  EXPECT_GT(j["commit_latency_us"]["p50"].get<double>(), 0.0);
  EXPECT_GE(j["committed_per_second"].size(), 1u);
  EXPECT_EQ(j["per_type"].size(), 2u);  // A: read and update
  EXPECT_EQ(j["shards"], 2);
  // Both shards own records, and the check's history crossed them.
  for (const auto& n : j["keys_per_shard"]) EXPECT_GT(n.get<uint64_t>(), 500u);
  EXPECT_EQ(j["check"]["shards"], 2);
  EXPECT_EQ(j["check"]["serializable"], true);
  EXPECT_EQ(j["check"]["money_conserved"], true);
  EXPECT_GT(j["check"]["history_txns"].get<uint64_t>(), 100u);
  EXPECT_GT(j["check"]["committed_cross"].get<uint64_t>(), 0u);
}

// The same check with read validation switched off in the servers (a planted bug): the
// client-side history must show it (or the money), exit 3.
TEST_F(ServerCli, BenchKvCheckCatchesSkippedReadValidation) {
  const std::string json = path("kv-unsafe.json");
  Outcome o =
      run({"bench", "kv", "--shards", "2", "--seconds", "1", "--keys", "100", "--connections", "4",
           "--check", "--check-seconds", "2", "--unsafe-skip-read-validation", "--json", json},
          120);
  EXPECT_EQ(o.exit_code, 3) << o.output;
  nlohmann::json j = read_json(json);
  ASSERT_FALSE(j.is_discarded()) << o.output;
  EXPECT_EQ(j["consistency"], "failed");
  EXPECT_TRUE(j["check"]["serializable"] == false || j["check"]["money_conserved"] == false)
      << o.output;
}

// 2 shards x 3 replicas: `cluster up` starts the followers (and passes its batching to the
// leaders, its memory reserve to every process), a run over the cluster ends with every
// follower's store identical to its leader's, and so does `cluster digest`.
TEST_F(ServerCli, ReplicatedClusterRunLeavesIdenticalReplicas) {
  write_replicated_config(2, 3);
  // Followers checkpoint every 200 ms (`shoal replica --checkpoint-interval-ms` passed on).
  Outcome o = up({"--batch-txns", "50", "--batch-us", "300", "--checkpoint-interval-ms", "200",
                  "--memory-reserve-mb", "64"});
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("2 shards x 3 replicas up"), std::string::npos) << o.output;
  for (uint32_t s = 0; s < 2; ++s) {
    for (uint32_t r = 0; r < 3; ++r) {
      const std::string log = r == 0 ? fmt::format("{}/shard-{}.log", run_dir(), s)
                                     : fmt::format("{}/shard-{}-replica-{}.log", run_dir(), s, r);
      std::stringstream text;
      text << std::ifstream(log).rdbuf();
      EXPECT_NE(text.str().find("memory reserve: 64 MiB faulted in"), std::string::npos)
          << log << ":\n"
          << text.str();
    }
  }
  o = run({"cluster", "status", "--config", config_}, 30);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("replica 2 (r2)"), std::string::npos) << o.output;
  const std::string json = path("repl.json");
  o = run({"bench", "micro", "--cluster", config_, "--cross-shard-pct", "50", "--seconds", "1",
           "--json", json},
          120);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("replicas: every follower identical to its leader"), std::string::npos)
      << o.output;
  nlohmann::json j = read_json(json);
  ASSERT_FALSE(j.is_discarded()) << o.output;
  EXPECT_GT(j["committed"].get<uint64_t>(), 100u);
  ASSERT_EQ(j["replication"].size(), 6u) << j.dump();
  for (const auto& r : j["replication"]) EXPECT_EQ(r["equal_to_leader"], true) << r.dump();
  EXPECT_EQ(j["batch_txns"], 50) << j.dump();  // what the leaders report using
  EXPECT_EQ(j["batch_us"], 300.0) << j.dump();
  EXPECT_NE(o.output.find("log batching: 50 txns / 300 us per entry"), std::string::npos)
      << o.output;
  for (const char* follower : {"shard-0-replica-1", "shard-1-replica-2"}) {
    int checkpoints = 0;
    for (const auto& e : fs::directory_iterator(run_dir() + "/" + follower)) {
      checkpoints += e.path().extension() == ".ckpt" ? 1 : 0;
    }
    EXPECT_GT(checkpoints, 0) << follower;
  }
  o = run({"cluster", "digest", "--config", config_}, 120);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("identical: every replica"), std::string::npos) << o.output;
  o = run({"cluster", "down", "--config", config_, "--run-dir", run_dir()}, 60);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("stopped 6 processes"), std::string::npos) << o.output;
  o = up({"--fresh"});  // again over the same run directory: the old WALs cleared, loaded
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("loaded afresh"), std::string::npos) << o.output;
  o = run({"cluster", "digest", "--config", config_}, 120);
  EXPECT_EQ(o.exit_code, 0) << o.output;
}

// Follower reads across shard processes: every follower of both shards serves TPC-C's
// read-only transactions at its snapshot during the run, none torn, and the replicas end
// identical with their TPC-C checks passing.
TEST_F(ServerCli, FollowerReadsOnEveryShard) {
  const std::string json = path("reads.json");
  Outcome o = run({"bench", "tpcc", "--shards", "2", "--replicas", "2", "--warehouses", "2",
                   "--follower-reads", "1", "--seconds", "2", "--check", "--json", json},
                  240);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  nlohmann::json j = read_json(json);
  ASSERT_FALSE(j.is_discarded()) << o.output;
  EXPECT_EQ(j["consistency"], "ok") << j.dump();
  EXPECT_EQ(j["replicas_identical"], true) << j.dump();
  // Replicated TPC-C: the series carries the commit (acknowledged) latency too. One of the two
  // seconds may commit nothing on an overloaded machine: a cross-shard transaction slowed to
  // ~1 s by the 2PC round trips between starved processes stops every terminal of both shards
  // (one warehouse each) that long. At load 20-28 the commit gaps were 0.5-0.8 s, each as long
  // as the run's slowest cross-shard transaction, with or without follower reads, while the
  // bench's samples were answered within 78 ms (docs/RESULTS.md, "The test command's time").
  expect_series_per_second(j, 2, /*acknowledged=*/true, /*seconds_committing=*/1);
  uint64_t acked = 0;
  for (const auto& row : j["series"]) acked += row["acked_per_sec"].get<uint64_t>();
  EXPECT_GT(acked, 0u) << j["series"].dump();
  uint32_t followers = 0;
  for (const auto& r : j["replication"]) {
    if (r["replica"] == 0) continue;
    ++followers;
    const auto& reads = r["follower_reads"];
    ASSERT_TRUE(reads.is_object()) << r.dump();
    EXPECT_EQ(reads["threads"], 1) << r.dump();
    EXPECT_GT(reads["transactions"].get<uint64_t>(), 0u) << r.dump();
    EXPECT_GT(reads["snapshots"].get<uint64_t>(), 0u) << r.dump();
    EXPECT_EQ(reads["torn"], 0) << r.dump();
    EXPECT_EQ(r["consistency"], "ok") << r.dump();
  }
  EXPECT_EQ(followers, 2u) << j.dump();
  // Each leader's stream logs TPC-C's same-size puts (STOCK, CUSTOMER, ...) as patches, from
  // its terminals' transactions and its participant's alike; full values cost ~3.2 KB a txn.
  for (const auto& shard : j["per_shard"]) {
    const auto& log = shard["log"];
    ASSERT_TRUE(log.is_object()) << shard.dump();
    const auto txns = log["txns"].get<uint64_t>();
    ASSERT_GT(txns, 0u) << shard.dump();
    EXPECT_GT(log["patches"].get<uint64_t>(), txns) << shard.dump();
    EXPECT_LT(log["bytes"].get<uint64_t>() / txns, 2048u) << shard.dump();
  }
  EXPECT_NE(o.output.find("shard 1 log: "), std::string::npos) << o.output;
  for (const char* line : {"shard 0 replica 1: digest", "shard 1 replica 1: digest"}) {
    const size_t at = o.output.find(line);
    ASSERT_NE(at, std::string::npos) << o.output;
    EXPECT_NE(o.output.find("follower reads: ", at), std::string::npos) << o.output;
  }
}

// A standing cluster started with `cluster up --serve-reads`: a `bench tpcc --cluster` run
// reports every follower's reads (the bench cannot start readers there itself), and a second
// run against it commits as the first did.
TEST_F(ServerCli, ClusterUpServeReadsIsReportedByAClusterRun) {
  write_replicated_config(2, 2);
  Outcome o = up({"--workload", "tpcc", "--serve-reads", "1"});
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const std::string json = path("cluster-reads.json");
  o = run({"bench", "tpcc", "--cluster", config_, "--seconds", "1", "--check", "--json", json},
          180);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  nlohmann::json j = read_json(json);
  ASSERT_FALSE(j.is_discarded()) << o.output;
  uint32_t reading = 0;
  for (const auto& r : j["replication"]) {
    if (r["replica"] == 0) continue;
    ASSERT_TRUE(r["follower_reads"].is_object()) << r.dump();
    EXPECT_GT(r["follower_reads"]["transactions"].get<uint64_t>(), 0u) << r.dump();
    EXPECT_EQ(r["follower_reads"]["torn"], 0) << r.dump();
    ++reading;
  }
  EXPECT_EQ(reading, 2u) << j.dump();
  EXPECT_EQ(j["failed"].get<uint64_t>(), 0u) << o.output;
  // A second run against the same standing cluster: its Payments' HISTORY keys must not
  // collide with the first run's rows (they did: every Payment failed with AlreadyExists).
  o = run({"bench", "tpcc", "--cluster", config_, "--seconds", "1", "--check", "--json", json},
          180);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  j = read_json(json);
  ASSERT_FALSE(j.is_discarded()) << o.output;
  EXPECT_GT(j["committed"].get<uint64_t>(), 100u) << o.output;
  EXPECT_EQ(j["failed"].get<uint64_t>(), 0u) << o.output;
  // The servers count over both runs: the second run's series counts from what they had
  // counted before it (it counted the first run's commits in its first second).
  expect_series_per_second(j, 1, /*acknowledged=*/true);
}

// A follower dies before the run: its shard (still a majority of 3) runs on without failures,
// the run reports the follower lost, `cluster digest` reports it and exits 1 while the other
// replicas stay identical.
TEST_F(ServerCli, DeadFollowerDoesNotStopItsShard) {
  write_replicated_config(2, 3);
  Outcome o = up();
  ASSERT_EQ(o.exit_code, 0) << o.output;
  long victim = 0;
  std::ifstream(run_dir() + "/shard-0-replica-2.pid") >> victim;
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(static_cast<pid_t>(victim), SIGKILL), 0);
  const std::string json = path("repl-dead.json");
  o = run({"bench", "micro", "--cluster", config_, "--cross-shard-pct", "50", "--seconds", "1",
           "--json", json},
          120);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("shard 0 replica 2: LOST"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("shard 0 replica 1: digest"), std::string::npos) << o.output;
  nlohmann::json j = read_json(json);
  ASSERT_FALSE(j.is_discarded()) << o.output;
  EXPECT_GT(j["committed"].get<uint64_t>(), 100u);
  EXPECT_EQ(j["failed"].get<uint64_t>(), 0u);
  o = run({"cluster", "digest", "--config", config_}, 120);
  EXPECT_EQ(o.exit_code, 1) << o.output;
  EXPECT_NE(o.output.find("shard 0 replica 2: LOST"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("shard 1 replica 2: digest"), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("DIFFERS"), std::string::npos) << o.output;
  o = run({"cluster", "down", "--config", config_, "--run-dir", run_dir()}, 60);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("stopped 5 processes"), std::string::npos) << o.output;
}

// A follower killed (SIGKILL) while its shard commits far more entries than its leader keeps
// in memory (--retain-slots 16; a 3 s micro run seals hundreds to thousands of entries),
// restarted from its WAL as `cluster up` starts it
// (`shoal replica ... --data-dir`): the leader catches it up from its own WAL, and `cluster
// digest` finds every replica identical.
TEST_F(ServerCli, KilledFollowerRestartedFarBehindCatchesUpFromTheLeadersWal) {
  write_replicated_config(1, 3);
  struct Children {  // killed and reaped whatever happens
    std::vector<std::pair<pid_t, std::string>> list;
    Outcome reap(size_t i, double timeout_s) {  // once per child
      const Outcome o = finish(list[i].first, list[i].second, timeout_s);
      list[i].first = -1;
      return o;
    }
    ~Children() {
      for (size_t i = 0; i < list.size(); ++i) {
        if (list[i].first <= 0) continue;
        kill(list[i].first, SIGKILL);
        reap(i, 10);
      }
    }
  } children;
  auto spawn = [&](const std::vector<std::string>& args, const std::string& log) {
    const pid_t pid = start(args, path(log));
    children.list.emplace_back(pid, path(log));
    return pid;
  };
  spawn({"server", "--config", config_, "--shard", "0", "--keys-per-partition", "20000",
         "--data-dir", path("r0"), "--retain-slots", "16"},
        "server.log");
  auto replica = [&](const std::string& r, const std::string& log) {
    return spawn({"replica", "--config", config_, "--shard", "0", "--replica", r, "--data-dir",
                  path("r" + r)},
                 log);
  };
  replica("1", "replica-1.log");
  const pid_t victim = replica("2", "replica-2.log");
  Outcome o = wait_status_ok();
  ASSERT_EQ(o.exit_code, 0) << o.output;
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  o = run({"bench", "micro", "--cluster", config_, "--seconds", "3"}, 120);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("shard 0 replica 2: LOST"), std::string::npos) << o.output;
  replica("2", "replica-2-restarted.log");
  o = digest_once_dialed();
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("identical: every replica"), std::string::npos) << o.output;
  kill(children.list[0].first, SIGTERM);
  const Outcome server = children.reap(0, 30);
  const Outcome restarted = children.reap(children.list.size() - 1, 30);
  EXPECT_NE(restarted.output.find("recovered"), std::string::npos) << restarted.output;
  // The leader served slots it no longer held in memory from its WAL, and refused none.
  EXPECT_NE(server.output.find("catching up a follower from the WAL"), std::string::npos)
      << server.output;
  EXPECT_EQ(server.output.find("catch-up from the WAL refused"), std::string::npos)
      << server.output;
  config_.clear();  // nothing for TearDown's `cluster down`
}

// A follower with checkpoints every 200 ms, SIGKILLed in the middle of a run after it wrote
// at least one (and deleted WAL it covered), restarted over its directory: it loads its newest
// checkpoint, replays only the WAL after it, is caught up by the leader, and `cluster digest`
// says identical.
TEST_F(ServerCli, FollowerKilledAfterACheckpointRestartsFromItAndConverges) {
  write_replicated_config(1, 3);
  std::vector<pid_t> children;
  struct Reaper {  // kills whatever is still running when the test ends
    std::vector<pid_t>* list;
    ~Reaper() {
      for (pid_t p : *list) {
        if (p > 0 && kill(p, SIGKILL) == 0) waitpid(p, nullptr, 0);
      }
    }
  } reaper{&children};
  auto spawn = [&](const std::vector<std::string>& args, const std::string& log) {
    children.push_back(start(args, path(log)));
    return children.back();
  };
  const pid_t server = spawn({"server", "--config", config_, "--shard", "0", "--keys-per-partition",
                              "20000", "--data-dir", path("r0")},
                             "server.log");
  auto replica = [&](const std::string& r, const std::string& log) {
    return spawn({"replica", "--config", config_, "--shard", "0", "--replica", r, "--data-dir",
                  path("r" + r), "--checkpoint-interval-ms", "200"},
                 log);
  };
  replica("1", "replica-1.log");
  const pid_t victim = replica("2", "replica-2.log");
  Outcome o = wait_status_ok();
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const std::string bench_log = path("bench.log");
  const pid_t bench = start({"bench", "micro", "--cluster", config_, "--seconds", "4"}, bench_log);
  auto checkpoints_in = [&](const std::string& dir) {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      n += e.path().extension() == ".ckpt" ? 1 : 0;
    }
    return n;
  };
  // Mid-run, once replica 2 has published two checkpoints (the second deletes WAL segments
  // the first covers; bounded: 30 s).
  bool segment0_gone = false;
  for (int i = 0; i < 300 && !segment0_gone; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    segment0_gone =
        checkpoints_in(path("r2")) >= 2 && !std::filesystem::exists(path("r2") + "/stream-0.wal");
  }
  ASSERT_TRUE(segment0_gone) << "replica 2 neither checkpointed nor truncated its WAL";
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  waitpid(victim, nullptr, 0);
  o = finish(bench, bench_log, 120);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const pid_t restarted = replica("2", "replica-2-restarted.log");
  o = digest_once_dialed();
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("identical: every replica"), std::string::npos) << o.output;
  kill(server, SIGTERM);
  finish(server, path("server.log"), 30);
  const Outcome r = finish(restarted, path("replica-2-restarted.log"), 30);
  EXPECT_NE(r.output.find("after its checkpoint"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("loaded " + path("r2") + "/checkpoint-"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("refused"), std::string::npos) << r.output;
  for (pid_t& p : children) {
    if (p == server || p == restarted || p == victim) p = -1;  // reaped
  }
  config_.clear();  // nothing for TearDown's `cluster down`
}

// Every replica's digest in a `cluster digest` output, by "shard S replica R".
std::map<std::string, std::string> digests_of(const std::string& output) {
  std::map<std::string, std::string> out;
  const std::regex line("(shard [0-9]+ replica [0-9]+): digest ([0-9a-f]{16})");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), line);
       it != std::sregex_iterator(); ++it) {
    out[(*it)[1].str()] = (*it)[2].str();
  }
  return out;
}

// How many acknowledged NewOrders `cluster check` looked up, if it found none missing (-1:
// the line is absent or names losses).
int64_t acknowledged_checked_none_lost(const std::string& output) {
  std::smatch m;
  const std::regex line(
      "acknowledged NewOrders \\(journaled by the terminals\\): ([0-9]+) "
      "checked, 0 lost\n");
  return std::regex_search(output, m, line) ? std::stoll(m[1].str()) : -1;
}

// The pids in the run directory's pid files (every server and replica `up` started).
std::vector<pid_t> run_dir_pids(const std::string& dir) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".pid") continue;
    if (e.path().filename() == "etcd.pid") continue;  // `up`'s etcd: not a replica
    long pid = 0;
    std::ifstream(e.path()) >> pid;
    if (pid > 0) out.push_back(static_cast<pid_t>(pid));
  }
  return out;
}

void ServerCli::kill_every_process_mid_tpcc_run(size_t processes) {
  const std::string bench_log = path("bench.log");
  const pid_t bench = start({"bench", "tpcc", "--cluster", config_, "--seconds", "4"}, bench_log);
  auto acknowledged = [&] {
    for (const auto& e : fs::directory_iterator(run_dir())) {
      if (e.path().filename().string().starts_with("acks-") && fs::file_size(e) > 0) return true;
    }
    return false;
  };
  for (int i = 0; i < 600 && !acknowledged(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const std::vector<pid_t> pids = run_dir_pids(run_dir());
  ASSERT_EQ(pids.size(), processes);
  for (pid_t p : pids) EXPECT_EQ(kill(p, SIGKILL), 0) << p;
  const Outcome o = finish(bench, bench_log, 120);
  EXPECT_NE(o.exit_code, 0) << o.output;
  ASSERT_TRUE(acknowledged()) << "no NewOrder was acknowledged before the kill";
}

// The newest WAL segment of stream `s` in a replica directory (stream-<s>.wal is segment 0;
// a leader that truncated its WAL has deleted it).
std::string newest_wal_segment(const std::string& dir, uint32_t s) {
  std::string newest = fmt::format("stream-{}.wal", s);
  uint64_t newest_n = 0;
  const std::regex numbered(fmt::format("stream-{}\\.([0-9]+)\\.wal", s));
  for (const auto& e : fs::directory_iterator(dir)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, m, numbered) && std::stoull(m[1].str()) >= newest_n) {
      newest_n = std::stoull(m[1].str());
      newest = name;
    }
  }
  return dir + "/" + newest;
}

// `cluster down` then `cluster up` over the same run directory: every replica restarts from its
// own disk (leaders and followers; checkpoints and WALs), nothing is loaded, and every replica's
// digest is the one it had before; TPC-C's conditions hold across both shards and every
// acknowledged NewOrder is there; the cluster then runs on in the new epoch. With
// --checkpoint-interval-ms the leaders fetch their followers' checkpoints and truncate their
// own WALs behind them: a leader restarts from a fetched checkpoint and the WAL after it.
TEST_F(ServerCli, ClusterDownThenUpRestartsEveryReplicaFromItsDisk) {
  write_replicated_config(2, 3);
  Outcome o = up({"--workload", "tpcc", "--ack-journal", "--checkpoint-interval-ms", "300"});
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("loaded afresh (workload tpcc, epoch 1)"), std::string::npos) << o.output;
  // A second of TPC-C: acknowledged NewOrders journaled and checkpoints written (every 300 ms).
  o = run({"bench", "tpcc", "--cluster", config_, "--seconds", "1"}, 180);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  o = run({"cluster", "digest", "--config", config_}, 120);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const std::map<std::string, std::string> before = digests_of(o.output);
  ASSERT_EQ(before.size(), 6u) << o.output;
  o = run({"cluster", "down", "--config", config_, "--run-dir", run_dir()}, 60);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  // A flag that disagrees with what the directory holds is refused, nothing started.
  o = up({"--workload", "micro"});
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("--workload micro: "), std::string::npos) << o.output;
  // Each leader holds checkpoints fetched from its followers (their cut is what a restart
  // loads before its WAL).
  for (const char* leader : {"/shard-0-replica-0", "/shard-1-replica-0"}) {
    int checkpoints = 0;
    for (const auto& e : fs::directory_iterator(run_dir() + leader)) {
      checkpoints += e.path().extension() == ".ckpt" ? 1 : 0;
    }
    EXPECT_GT(checkpoints, 0) << leader;
  }
  // A torn tail on shard 0's leader (a write cut short): recovered up to the last whole entry.
  // The bytes land after the WAL's preallocated zeros (src/repl/wal.h) if the segment has any,
  // and the cut then runs from the log's end: zeros followed by data.
  {
    std::ofstream wal(newest_wal_segment(run_dir() + "/shard-0-replica-0", 0),
                      std::ios::binary | std::ios::app);
    ASSERT_TRUE(wal.good());
    wal << std::string(100, '\xab');
  }
  // No flags: the restart runs as the cluster was started (up.json's settings), and says so.
  o = up();
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("restarted from disk in epoch 2"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("as up.json recorded: --checkpoint-interval-ms 300, --ack-journal"),
            std::string::npos)
      << o.output;
  for (const char* process : {"shard-0", "shard-1-replica-2"}) {
    std::string cmdline = read_file(fmt::format(
        "/proc/{}/cmdline", std::stoi(read_file(fmt::format("{}/{}.pid", run_dir(), process)))));
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    EXPECT_NE(cmdline.find(process == std::string("shard-0") ? "--ack-journal "
                                                             : "--checkpoint-interval-ms 300"),
              std::string::npos)
        << process << ": " << cmdline;
  }
  const std::string leader_log = read_file(run_dir() + "/shard-0.log");
  EXPECT_TRUE(leader_log.find("cutting 100 bytes at offset") != std::string::npos ||
              leader_log.find("followed by data at offset") != std::string::npos)
      << leader_log;
  EXPECT_NE(leader_log.find("recovered its store from"), std::string::npos) << leader_log;
  EXPECT_NE(leader_log.find("replica 0: loaded "), std::string::npos) << leader_log;
  o = run({"cluster", "digest", "--config", config_}, 120);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(digests_of(o.output), before) << o.output;
  o = run({"cluster", "check", "--config", config_, "--run-dir", run_dir()}, 300);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("TPC-C conditions hold on all 2 shards"), std::string::npos) << o.output;
  EXPECT_GT(acknowledged_checked_none_lost(o.output), 0) << o.output;
  // It goes on: a run in epoch 2 (new HISTORY keys, new TIDs), its followers identical.
  o = run({"bench", "tpcc", "--cluster", config_, "--seconds", "1", "--check"}, 180);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("replicas: every follower identical to its leader"), std::string::npos)
      << o.output;
  // A stale epoch: its log already started epoch 2.
  o = run({"cluster", "down", "--config", config_, "--run-dir", run_dir()}, 60);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  o = run({"server", "--config", config_, "--shard", "1", "--workload", "tpcc", "--data-dir",
           run_dir() + "/shard-1-replica-0", "--recover-epoch", "2"},
          120);
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("already holds epoch 2"), std::string::npos) << o.output;
}

// Every process of a replicated TPC-C cluster SIGKILLed in the middle of a run (no clean
// shutdown), then `cluster up` over the run directory: each replica recovers what its disk
// holds and the leader takes over its followers in a new epoch (phase 1 recovers every chosen
// entry; the tail above the final watermark, never acknowledged, is discarded). Every NewOrder a
// terminal was told committed is in the store, TPC-C's conditions hold, the replicas are
// identical. (One shard: across shards an unacknowledged transaction's halves can be cut at
// different final watermarks; docs/OPERATIONS.md "Restarting a cluster".)
TEST_F(ServerCli, EveryProcessKilledMidRunRestartsWithEveryAcknowledgedTransaction) {
  write_replicated_config(1, 3);
  Outcome o = up({"--workload", "tpcc", "--ack-journal"});
  ASSERT_EQ(o.exit_code, 0) << o.output;
  kill_every_process_mid_tpcc_run(3);
  if (HasFatalFailure()) return;
  o = up();
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("restarted from disk in epoch 2"), std::string::npos) << o.output;
  o = run({"cluster", "check", "--config", config_, "--run-dir", run_dir()}, 300);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("TPC-C conditions hold on all 1 shard\n"), std::string::npos) << o.output;
  EXPECT_GT(acknowledged_checked_none_lost(o.output), 0) << o.output;
  o = run({"cluster", "digest", "--config", config_}, 120);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(digests_of(o.output).size(), 3u) << o.output;
}

// One replica per shard: the flags that need followers are refused before anything starts.
TEST_F(ServerCli, OneReplicaClusterRefusesWhatNeedsFollowers) {
  write_config(1);
  Outcome o = up({"--workload", "tpcc", "--serve-reads", "1"});
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("--serve-reads: the config's shards have no followers"),
            std::string::npos)
      << o.output;
  // A lone replica checkpoints its WAL (OneReplicaCompactsItsWal... below), which it keeps
  // only with --fsync.
  o = up({"--checkpoint-interval-ms", "1000"});
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("--checkpoint-interval-ms: the config's shards have one replica, which "
                          "keeps a WAL to checkpoint only with --fsync"),
            std::string::npos)
      << o.output;
  EXPECT_FALSE(fs::exists(run_dir() + "/shard-0.pid")) << "nothing started";
  // The same for a server started by hand without a WAL.
  o = run({"server", "--config", config_, "--shard", "0", "--checkpoint-interval-ms", "1000"}, 30);
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("keeps a WAL to checkpoint only with --data-dir"), std::string::npos)
      << o.output;
}

// One replica per shard with --fsync always and --checkpoint-interval-ms 200: no follower
// writes checkpoints for it, so the server compacts its own WAL (every interval its segment
// closes and a background thread rebuilds the store from the directory into a checkpoint) and
// deletes the segments behind them. While SETs go through its Redis port, its directory never
// holds more than a few segments and the WAL there stays a fraction of what it logged. kill -9,
// then `up`: it restarts from its newest checkpoint and the WAL after it, and every SET that
// was answered OK is there with its last value.
TEST_F(ServerCli, OneReplicaCompactsItsWalAndRestartsFromItsCheckpoint) {
#if !defined(SHOAL_HAVE_HIREDIS)
  GTEST_SKIP() << "hiredis not found at build time (apt-get install libhiredis-dev)";
#else
  const uint16_t port = free_low_ports(3);  // the server, its replication port, its Redis port
  ASSERT_NE(port, 0);
  config_ = path("cluster.toml");
  std::ofstream(config_) << fmt::format(
      "[cluster]\nname = \"clitest\"\ntransport = \"tcp\"\nworkers = 1\nreplicas = 1\n\n"
      "[[region]]\nname = \"r0\"\n\n[[shard]]\nid = 0\npartition_lo = 1\npartition_hi = 2\n"
      "[[shard.replica]]\nregion = \"r0\"\nhost = \"127.0.0.1\"\nport = {}\nresp_port = {}\n",
      port, port + 2);
  Outcome o = up({"--fsync", "always", "--checkpoint-interval-ms", "200"});
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const std::string dir = run_dir() + "/shard-0-replica-0";
  const auto compactions = [&] {
    const std::string log = read_file(run_dir() + "/shard-0.log");
    size_t n = 0;
    for (size_t at = log.find("compacted the WAL into"); at != std::string::npos;
         at = log.find("compacted the WAL into", at + 1)) {
      ++n;
    }
    return n;
  };
  redisContext* c = redisConnect("127.0.0.1", port + 2);
  ASSERT_TRUE(c != nullptr && c->err == 0) << (c ? c->errstr : "no context");
  // SETs of 1,000 keys, over and over (each key's last acknowledged value kept), 32 to a
  // pipeline; every WAL segment seen (its largest size), the most bytes and files live at once.
  constexpr uint32_t kKeys = 1000, kPipeline = 32;
  std::vector<int64_t> acked(kKeys, -1);
  std::map<std::string, uint64_t> seen;
  uint64_t live_bytes_max = 0;
  size_t live_files_max = 0;
  int64_t sets = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (compactions() < 8 && std::chrono::steady_clock::now() < deadline) {  // bounded
    for (uint32_t i = 0; i < 20; ++i) {
      for (uint32_t k = 0; k < kPipeline; ++k) {
        const int64_t n = sets + k;
        redisAppendCommand(c, "SET key%d %lld-%s", static_cast<int>(n % kKeys),
                           static_cast<long long>(n), std::string(100, 'v').c_str());
      }
      for (uint32_t k = 0; k < kPipeline; ++k) {
        redisReply* r = nullptr;
        ASSERT_EQ(redisGetReply(c, reinterpret_cast<void**>(&r)), REDIS_OK) << c->errstr;
        ASSERT_EQ(r->type, REDIS_REPLY_STATUS);
        freeReplyObject(r);
        acked[(sets + k) % kKeys] = sets + k;
      }
      sets += kPipeline;
    }
    uint64_t live = 0;
    size_t files = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (!name.ends_with(".wal")) continue;
      const uint64_t bytes = fs::file_size(e.path(), ec);
      if (ec) continue;  // deleted meanwhile
      seen[name] = std::max(seen[name], bytes);
      live += bytes;
      ++files;
    }
    live_bytes_max = std::max(live_bytes_max, live);
    live_files_max = std::max(live_files_max, files);
  }
  redisFree(c);
  ASSERT_GE(compactions(), 8u) << read_file(run_dir() + "/shard-0.log");
  EXPECT_FALSE(fs::exists(dir + "/stream-0.wal")) << "segment 0 deleted";
  uint64_t logged = 0;
  for (const auto& [name, bytes] : seen) logged += bytes;
  EXPECT_GE(seen.size(), 6u);
  EXPECT_LE(live_files_max, 4u) << "segments live at once";
  EXPECT_LT(live_bytes_max, logged * 3 / 4) << "logged at least " << logged;
  const std::vector<pid_t> pids = run_dir_pids(run_dir());
  ASSERT_EQ(pids.size(), 1u);
  EXPECT_EQ(kill(pids[0], SIGKILL), 0);

  o = up();
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("restarted from disk in epoch 2"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("--checkpoint-interval-ms 200"), std::string::npos) << o.output;
  const std::string log = read_file(run_dir() + "/shard-0.log");
  EXPECT_NE(log.find("replica 0: loaded " + dir + "/checkpoint-"), std::string::npos) << log;
  c = redisConnect("127.0.0.1", port + 2);
  ASSERT_TRUE(c != nullptr && c->err == 0) << (c ? c->errstr : "no context");
  uint32_t lost = 0;
  for (uint32_t k = 0; k < kKeys; ++k) {
    auto* r = static_cast<redisReply*>(redisCommand(c, "GET key%d", static_cast<int>(k)));
    ASSERT_TRUE(r != nullptr) << c->errstr;
    const std::string want = fmt::format("{}-{}", acked[k], std::string(100, 'v'));
    if (r->type != REDIS_REPLY_STRING || std::string(r->str, r->len) != want) ++lost;
    freeReplyObject(r);
  }
  redisFree(c);
  EXPECT_EQ(lost, 0u) << "of " << kKeys << " keys, after " << sets << " acknowledged SETs";
#endif
}

// One replica per shard with --fsync always: each server keeps a WAL (a Paxos stream of one
// acceptor; without --fsync nothing: ClusterUpStatusDownRoundTrip). kill -9 in the middle of
// a run, then `up`, restarts it from its disk with every NewOrder a terminal was told
// committed, and the restart keeps the recorded --fsync.
TEST_F(ServerCli, OneReplicaWithFsyncRestartsFromItsWalWithEveryAcknowledgedTransaction) {
  write_config(1);
  Outcome o = up({"--workload", "tpcc", "--ack-journal", "--fsync", "always"});
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("loaded afresh (workload tpcc, epoch 1)"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("durability: each shard's replica logs to its WAL"), std::string::npos)
      << o.output;
  kill_every_process_mid_tpcc_run(1);
  if (HasFatalFailure()) return;
  o = up();
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("restarted from disk in epoch 2"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("as up.json recorded: --fsync always"), std::string::npos) << o.output;
  EXPECT_NE(read_file(run_dir() + "/shard-0.log").find("recovered its store from"),
            std::string::npos);
  o = run({"cluster", "check", "--config", config_, "--run-dir", run_dir()}, 300);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("TPC-C conditions hold on all 1 shard\n"), std::string::npos) << o.output;
  EXPECT_GT(acknowledged_checked_none_lost(o.output), 0) << o.output;
  // It goes on in epoch 2, and commits there.
  o = run({"bench", "tpcc", "--cluster", config_, "--seconds", "1", "--check"}, 180);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("consistency: ok"), std::string::npos) << o.output;
}

// `cluster up` of three replicas starts an etcd for them: kill -9 of a shard's leader leaves
// the shard served by a follower, which `cluster status` finds through that etcd; `down`
// stops the etcd with the replicas. `up` again restarts from disk with that etcd: the
// successor leads, the killed leader follows it, and a second kill fails over again; `up`
// over the running cluster then restarts the killed replica as a follower.
TEST_F(ServerCli, StandingClusterReplacesAKilledLeader) {
  write_replicated_config(1, 3);
  Outcome o = up({"--workload", "micro"});
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("configuration manager: etcd at 127.0.0.1:"), std::string::npos)
      << o.output;
  const pid_t etcd = read_pid(run_dir() + "/etcd.pid");
  ASSERT_GT(etcd, 0);
  const pid_t leader = read_pid(run_dir() + "/shard-0.pid");
  ASSERT_GT(leader, 0);
  ASSERT_EQ(kill(leader, SIGKILL), 0);
  const auto new_leader_serves = [&] {
    o = run({"cluster", "status", "--config", config_, "--run-dir", run_dir()}, 30);
    return o.exit_code == 0 && (o.output.find("leaders: shard 0 replica 1") != std::string::npos ||
                                o.output.find("leaders: shard 0 replica 2") != std::string::npos);
  };
  bool served = false;
  for (int i = 0; i < 60 && !served; ++i) {  // bounded: 30 s and more
    served = new_leader_serves();
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  ASSERT_TRUE(served) << o.output;
  EXPECT_NE(o.output.find("epoch 2"), std::string::npos) << o.output;
  const uint32_t successor =
      o.output.find("leaders: shard 0 replica 1") != std::string::npos ? 1 : 2;
  o = run({"cluster", "down", "--config", config_, "--run-dir", run_dir()}, 60);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("stopped 2 processes and its etcd"), std::string::npos) << o.output;
  std::ifstream stat(fmt::format("/proc/{}/stat", etcd));  // gone, or a zombie not yet reaped
  std::string text;
  std::getline(stat, text);
  EXPECT_TRUE(text.empty() || text.find(") Z ") != std::string::npos)
      << "etcd still running after down: " << text;

  // Restarted from disk: the same etcd data (epoch 2, the successor), the successor leads
  // again in epoch 3 and the killed leader comes back as its follower.
  o = up();
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("restarted from disk in epoch 3"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find(fmt::format("replica {} (r{})", successor, successor)), std::string::npos)
      << o.output;
  EXPECT_NE(o.output.find("(the leader)"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("configuration manager: etcd at 127.0.0.1:"), std::string::npos)
      << o.output;
  o = run({"cluster", "status", "--config", config_, "--run-dir", run_dir()}, 30);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find(fmt::format("epoch 3; leaders: shard 0 replica {}", successor)),
            std::string::npos)
      << o.output;
  o = run({"cluster", "digest", "--config", config_, "--run-dir", run_dir()}, 120);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  // ... and a standing cluster again: its leader killed, another replica takes over (epoch 4).
  const pid_t restarted = read_pid(run_dir() + fmt::format("/shard-0-replica-{}.pid", successor));
  ASSERT_GT(restarted, 0);
  ASSERT_EQ(kill(restarted, SIGKILL), 0);
  served = false;
  for (int i = 0; i < 60 && !served; ++i) {  // bounded: 30 s and more
    o = run({"cluster", "status", "--config", config_, "--run-dir", run_dir()}, 30);
    served =
        o.exit_code == 0 && o.output.find("epoch 4; leaders: shard 0 replica") != std::string::npos;
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  ASSERT_TRUE(served) << o.output;
  EXPECT_EQ(o.output.find(fmt::format("leaders: shard 0 replica {}", successor)), std::string::npos)
      << o.output;
  // `up` over the running cluster brings the killed replica back as a follower; it catches up
  // and matches its new leader.
  o = up();
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find(fmt::format("shard 0 replica {}: restarted as a follower", successor)),
            std::string::npos)
      << o.output;
  o = run({"cluster", "digest", "--config", config_, "--run-dir", run_dir()}, 120);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(digests_of(o.output).size(), 3u) << o.output;
  o = up();  // nothing down: refused as before
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("already running"), std::string::npos) << o.output;
  o = run({"cluster", "down", "--config", config_, "--run-dir", run_dir()}, 60);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("stopped 3 processes and its etcd"), std::string::npos) << o.output;
  config_.clear();  // stopped above
}

// One Redis command to 127.0.0.1:port over a connection of its own: the reply's bytes (a
// status, error or integer line, or a bulk string whole), "" when nothing answers in 10 s.
std::string resp_command(uint16_t port, const std::vector<std::string>& args) {
  const int fd = test_processes::dial(port);
  if (fd < 0) return "";
  std::string request = fmt::format("*{}\r\n", args.size());
  for (const std::string& a : args) request += fmt::format("${}\r\n{}\r\n", a.size(), a);
  std::string reply;
  if (::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
    char buf[4096];
    // Bounded: each read waits at most 10 s (dial's timeout) and the reply is one line or one
    // bulk string.
    for (;;) {
      const size_t eol = reply.find("\r\n");
      if (eol != std::string::npos) {
        if (reply[0] != '$') break;
        const long bulk = std::stol(reply.substr(1, eol - 1));
        if (bulk < 0 || reply.size() >= eol + 2 + static_cast<size_t>(bulk) + 2) break;
      }
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) break;
      reply.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return reply;
}

// A restart from disk whose etcd names a replica that lags the others by more chosen slots
// than they retain (docs/RESULTS.md: a failed restart left such a follower named; its phase 1
// could never complete and every later `up` failed after about 145 s). Replica 2 of a 1 x 3
// cluster is SIGKILLed after some SETs and misses over 512 chosen slots (twice the 256
// retained; idle streams seal floors) and some more SETs; `down`; etcd is made to name it, as
// that failed restart did. `up` restarts the shard with the replica whose log reaches furthest,
// records it in etcd and says why; every acknowledged SET reads back there, and the lagging
// replica catches up as its follower (every replica's digest equal).
TEST_F(ServerCli, RestartNamingALaggingReplicaLeadsWithTheOneThatReachesFurthest) {
  write_replicated_config(1, 3, /*resp_ports=*/true);
  Outcome o = up({"--workload", "micro"});
  ASSERT_EQ(o.exit_code, 0) << o.output;
  constexpr int kKeys = 20;
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_EQ(resp_command(resp_ports_[0][0], {"SET", fmt::format("before-{}", i), "v"}),
              "+OK\r\n");
  }
  const std::string lagging = run_dir() + "/shard-0-replica-2";
  ASSERT_EQ(kill(read_pid(lagging + ".pid"), SIGKILL), 0);
  ASSERT_TRUE(still_running({read_pid(lagging + ".pid")}, 10).empty());
  auto behind = repl::read_acceptor_reach(lagging, 0);
  ASSERT_TRUE(behind.ok()) << behind.status().to_string();
  // SETs (a slot each: the next waits for the last one's reply) until replica 0 chose 512
  // slots more on stream 0 than replica 2 holds (bounded: 20,000 SETs; about 2 s here).
  int after = 0;
  for (uint64_t ahead = 0; ahead < behind->chosen + 512 && after < 20'000; ++after) {
    ASSERT_EQ(resp_command(resp_ports_[0][0], {"SET", fmt::format("after-{}", after), "w"}),
              "+OK\r\n");
    if (after % 64 == 0) {
      auto r0 = repl::read_acceptor_reach(run_dir() + "/shard-0-replica-0", 0);
      ASSERT_TRUE(r0.ok()) << r0.status().to_string();
      ahead = r0->chosen;
    }
  }
  ASSERT_LT(after, 20'000);
  o = run({"cluster", "down", "--config", config_, "--run-dir", run_dir()}, 60);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  {  // etcd names replica 2 in a new epoch, as the failed restart that appointed it left it
    cluster::EtcdProcessOptions eo;
    eo.data_dir = run_dir() + "/etcd";
    eo.name = "repltest";
    eo.log_path = path("etcd-by-test.log");
    eo.heartbeat_ms = 10;  // elected within 100 ms, not a second
    eo.election_ms = 100;
    auto etcd = cluster::EtcdProcess::start(eo);
    ASSERT_TRUE(etcd.ok()) << etcd.status().to_string();
    cluster::EtcdOptions mo;
    mo.endpoints = {(*etcd)->endpoint()};
    auto manager = cluster::EtcdConfigManager::create(mo);
    ASSERT_TRUE(manager.ok()) << manager.status().to_string();
    cluster::ClusterStateStore store(**manager, "repltest");
    auto state = store.load_state();
    ASSERT_TRUE(state.ok()) << state.status().to_string();
    auto named = store.begin_epoch_change(state->epoch, 0, 2);
    ASSERT_TRUE(named.ok() && named->won) << named.status().to_string();
    ASSERT_TRUE((*etcd)->stop().ok());
  }
  const auto started = Clock::now();
  o = up();
  const double up_s = std::chrono::duration<double>(Clock::now() - started).count();
  ASSERT_EQ(o.exit_code, 0) << o.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(o.output, m,
                                std::regex(R"(shard 0: replica 2 \(named by etcd\) lags replica )"
                                           R"([01] by (\d+) slots on stream 0; restarting with )"
                                           R"(replica ([01]) as the leader)")))
      << o.output;
  EXPECT_GE(std::stoull(m[1].str()), 512u) << o.output;
  const uint32_t leader = static_cast<uint32_t>(std::stoul(m[2].str()));
  EXPECT_NE(o.output.find("restarted from disk in epoch 3"), std::string::npos) << o.output;
  if (leader == 0) {  // the shard line is replica 0's
    EXPECT_EQ(o.output.find("(a follower)"), std::string::npos) << o.output;
  } else {
    EXPECT_NE(o.output.find(fmt::format("replica {} (r{})", leader, leader)), std::string::npos)
        << o.output;
    EXPECT_NE(o.output.find("(the leader)"), std::string::npos) << o.output;
  }
  EXPECT_LT(up_s, 60.0) << o.output;
  o = run({"cluster", "status", "--config", config_, "--run-dir", run_dir()}, 30);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find(fmt::format("epoch 3; leaders: shard 0 replica {}", leader)),
            std::string::npos)
      << o.output;
  for (int i = 0; i < kKeys; ++i) {  // every acknowledged SET, through the new leader
    EXPECT_EQ(resp_command(resp_ports_[0][leader], {"GET", fmt::format("before-{}", i)}),
              "$1\r\nv\r\n")
        << i;
  }
  for (int i = 0; i < after; ++i) {
    ASSERT_EQ(resp_command(resp_ports_[0][leader], {"GET", fmt::format("after-{}", i)}),
              "$1\r\nw\r\n")
        << i << " of " << after;
  }
  // Replica 2 follows and catches up: every replica's digest is its leader's.
  o = digest_once_dialed(/*leaders_from_run_dir=*/true);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("identical: every replica"), std::string::npos) << o.output;
  const std::map<std::string, std::string> digests = digests_of(o.output);
  EXPECT_EQ(digests.size(), 3u) << o.output;

  // The leader etcd names lost its directory: refused, not replaced. It would rejoin as an
  // acceptor that forgot what it accepted, and the new leader's phase 1 could count its empty
  // promise instead of a survivor's acceptance of the last chosen entries.
  o = run({"cluster", "down", "--config", config_, "--run-dir", run_dir()}, 60);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  fs::rename(run_dir() + fmt::format("/shard-0-replica-{}", leader), path("lost-directory"));
  o = up();
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_NE(
      o.output.find(fmt::format("(replica {}) holds no log: the cluster cannot restart", leader)),
      std::string::npos)
      << o.output;
  EXPECT_EQ(o.output.find("restarting with replica"), std::string::npos) << o.output;
}

// A follower's directory is lost before a restart (docs/REPLICATION.md, "A replica that lost
// its directory rejoins without a vote"): `up` says so and restarts it without a vote; the
// shard serves with the other two, the rejoiner catches up and its marks go, every
// acknowledged SET reads back and every replica's digest is its leader's.
TEST_F(ServerCli, RestartOverALostFollowerDirectoryRejoinsWithoutAVote) {
  write_replicated_config(1, 3, /*resp_ports=*/true);
  Outcome o = up({"--workload", "micro"});
  ASSERT_EQ(o.exit_code, 0) << o.output;
  constexpr int kKeys = 20;
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_EQ(resp_command(resp_ports_[0][0], {"SET", fmt::format("k-{}", i), "v"}), "+OK\r\n");
  }
  o = run({"cluster", "down", "--config", config_, "--run-dir", run_dir()}, 60);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const std::string lost = run_dir() + "/shard-0-replica-1";
  fs::rename(lost, path("lost-follower-directory"));
  o = up();
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("shard 0 replica 1: " + lost +
                          " holds no log (lost?): it restarts as a follower without a vote"),
            std::string::npos)
      << o.output;
  for (int i = 0; i < kKeys; ++i) {  // served by the leader and replica 2
    EXPECT_EQ(resp_command(resp_ports_[0][0], {"GET", fmt::format("k-{}", i)}), "$1\r\nv\r\n") << i;
  }
  ASSERT_EQ(resp_command(resp_ports_[0][0], {"SET", "after", "w"}), "+OK\r\n");
  // Its streams vote again once caught up: their marks go (idle streams seal floors, so the
  // leader chooses past the tail each had when the rejoiner attached). Bounded: 30 s.
  const auto marks = [&] {
    int n = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(lost, ec)) {
      n += e.path().filename().string().ends_with(".rejoin") ? 1 : 0;
    }
    return n;
  };
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (marks() > 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(marks(), 0);
  EXPECT_TRUE(fs::exists(lost + "/schema.json"));
  EXPECT_FALSE(fs::exists(lost + "/rejoin"));
  o = digest_once_dialed(/*leaders_from_run_dir=*/true);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("identical: every replica"), std::string::npos) << o.output;
  EXPECT_EQ(digests_of(o.output).size(), 3u) << o.output;
  EXPECT_EQ(resp_command(resp_ports_[0][0], {"GET", "after"}), "$1\r\nw\r\n");

  // A leader directory that still carries a rejoin mark (it stopped before it caught up) has
  // no vote: a restart led by it is refused before any replica starts.
  o = run({"cluster", "down", "--config", config_, "--run-dir", run_dir()}, 60);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  std::ofstream(run_dir() + "/shard-0-replica-0/stream-0.rejoin") << "lost\n";
  o = up();
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("(replica 0) lost its log and had not caught up when it stopped"),
            std::string::npos)
      << o.output;
  EXPECT_FALSE(fs::exists(run_dir() + "/shard-0.pid"));
}

// `[cluster] etcd` names a configuration manager that runs already: `up` starts none and
// initializes the cluster's state there, a failover goes through it, `down` leaves it running,
// a restart moves its epoch on, and `up --fresh` starts the cluster's state over (epoch 1).
TEST_F(ServerCli, ClusterOnAnEtcdNamedInTheConfig) {
  cluster::EtcdProcessOptions eo;
  eo.data_dir = path("named-etcd");
  auto etcd = cluster::EtcdProcess::start(eo);
  ASSERT_TRUE(etcd.ok()) << etcd.status().to_string();
  write_replicated_config(1, 3);
  const std::string toml = read_file(config_);
  const auto name_etcd = [&](const std::string& endpoint) {
    std::string named = toml;
    named.replace(named.find("leader_timeout_ms = 1000\n"), 25,
                  fmt::format("leader_timeout_ms = 1000\netcd = [\"{}\"]\n", endpoint));
    std::ofstream(config_) << named;
  };
  name_etcd("127.0.0.1:1");  // nobody listens there: refused before anything starts
  Outcome o = up({"--workload", "micro"});
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("the configuration manager named in the config (etcd at 127.0.0.1:1) "
                          "cannot be used"),
            std::string::npos)
      << o.output;
  EXPECT_FALSE(fs::exists(run_dir() + "/shard-0.pid"));
  name_etcd((*etcd)->endpoint());
  o = up({"--workload", "micro"});
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find(fmt::format("configuration manager: etcd at {} (named in the config",
                                      (*etcd)->endpoint())),
            std::string::npos)
      << o.output;
  EXPECT_FALSE(fs::exists(run_dir() + "/etcd.pid"));
  ASSERT_EQ(kill(read_pid(run_dir() + "/shard-0.pid"), SIGKILL), 0);
  bool served = false;
  for (int i = 0; i < 60 && !served; ++i) {  // bounded: 30 s and more
    o = run({"cluster", "status", "--config", config_, "--run-dir", run_dir()}, 30);
    served =
        o.exit_code == 0 && o.output.find("epoch 2; leaders: shard 0 replica") != std::string::npos;
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  ASSERT_TRUE(served) << o.output;
  o = run({"cluster", "down", "--config", config_, "--run-dir", run_dir()}, 60);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("stopped 2 processes"), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("its etcd"), std::string::npos) << o.output;
  EXPECT_TRUE((*etcd)->running());
  o = up();
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("restarted from disk in epoch 3"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("(the leader)"), std::string::npos) << o.output;
  o = run({"cluster", "down", "--config", config_, "--run-dir", run_dir()}, 60);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  o = up({"--workload", "micro", "--fresh"});
  ASSERT_EQ(o.exit_code, 0) << o.output;
  o = run({"cluster", "status", "--config", config_, "--run-dir", run_dir()}, 30);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("epoch 1; leaders: shard 0 replica 0"), std::string::npos) << o.output;
}

// A restarting leader under etcd must be the one etcd names in the epoch it is given: another
// epoch, or another replica, is refused before it touches anything.
TEST_F(ServerCli, LeaderRecoveryUnderEtcdRefusesAStaleEpochOrReplica) {
  write_replicated_config(1, 3);
  Outcome o = up({"--workload", "micro"});
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const std::string endpoint = read_file(run_dir() + "/etcd.endpoint");
  ASSERT_FALSE(endpoint.empty());
  const std::string etcd_arg = endpoint.substr(0, endpoint.find('\n'));
  o = run({"server", "--config", config_, "--shard", "0", "--data-dir",
           run_dir() + "/shard-0-replica-0", "--recover-epoch", "2", "--etcd", etcd_arg},
          30);
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("etcd is at epoch 1 and names replica 0 as shard 0's leader, not "
                          "replica 0 in epoch 2"),
            std::string::npos)
      << o.output;
  o = run({"server", "--config", config_, "--shard", "0", "--replica", "1", "--data-dir",
           run_dir() + "/shard-0-replica-1", "--recover-epoch", "2"},
          30);
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("without --etcd a restarting leader is replica 0"), std::string::npos)
      << o.output;
  o = run({"server", "--config", config_, "--shard", "0", "--replica", "1"}, 30);
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("--replica: only with --recover-epoch"), std::string::npos) << o.output;
}

// A leader restarted over a directory that is not its own, or over none: a clear message and a
// non-zero exit; nothing written there.
TEST_F(ServerCli, LeaderRecoveryRefusesAMissingOrForeignDirectory) {
  write_replicated_config(1, 3);
  Outcome o = run({"server", "--config", config_, "--shard", "0", "--data-dir", path("none"),
                   "--recover-epoch", "2"},
                  30);
  EXPECT_EQ(o.exit_code, 1) << o.output;
  EXPECT_NE(o.output.find("no replica directory to recover from"), std::string::npos) << o.output;
  EXPECT_FALSE(fs::exists(path("none")));
  // A follower's directory of replica 1, with its identity: not replica 0's.
  fs::create_directories(path("r1"));
  std::ofstream(path("r1/schema.json")) << "{}\n";
  std::ofstream(path("r1/identity.json")) << R"({"cluster":"repltest","replica":1,"shard":0})"
                                          << "\n";
  o = run({"server", "--config", config_, "--shard", "0", "--data-dir", path("r1"),
           "--recover-epoch", "2"},
          30);
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("not to cluster 'repltest' shard 0 replica 0; refused"),
            std::string::npos)
      << o.output;
  EXPECT_EQ(read_file(path("r1/schema.json")), "{}\n");
  // Another cluster's directory, for a follower.
  std::ofstream(path("r1/identity.json")) << R"({"cluster":"other","replica":1,"shard":0})"
                                          << "\n";
  o = run(
      {"replica", "--config", config_, "--shard", "0", "--replica", "1", "--data-dir", path("r1")},
      30);
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find(R"(belongs to {"cluster":"other")"), std::string::npos) << o.output;
  EXPECT_FALSE(fs::exists(path("r1/layout")));
  // A fresh leader over a directory that holds a replica's log: refused, its schema kept.
  o = run({"server", "--config", config_, "--shard", "0", "--keys-per-partition", "20000",
           "--data-dir", path("r1")},
          60);
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("holds a replica's log"), std::string::npos) << o.output;
  EXPECT_EQ(read_file(path("r1/schema.json")), "{}\n");
}

// A leader that changes a record without logging it (a planted bug): `cluster digest` names
// the replica that differs and exits 3.
TEST_F(ServerCli, ClusterDigestFindsAPlantedDifference) {
  write_replicated_config(1, 2);
  const pid_t server = start({"server", "--config", config_, "--shard", "0", "--keys-per-partition",
                              "2000", "--data-dir", path("r0"), "--unsafe-plant-divergence"},
                             path("server.log"));
  const pid_t follower = start(
      {"replica", "--config", config_, "--shard", "0", "--replica", "1", "--data-dir", path("r1")},
      path("follower.log"));
  Outcome o = wait_status_ok();
  ASSERT_EQ(o.exit_code, 0) << o.output;
  o = run({"cluster", "digest", "--config", config_}, 60);
  EXPECT_EQ(o.exit_code, 3) << o.output;
  EXPECT_NE(o.output.find("shard 0 replica 1: digest"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("DIFFERS from the leader"), std::string::npos) << o.output;
  kill(server, SIGTERM);
  finish(server, path("server.log"), 30);
  finish(follower, path("follower.log"), 30);  // exits once its leader is gone
  config_.clear();                             // nothing for TearDown's `cluster down`
}

// Control messages whose fields have the wrong type (issue 17, hardening): each is answered
// InvalidArgument (the RPC carries the code, not the handler's message), and the server goes
// on serving (a throwing accessor on them used to abort the process). kRepl's report reads
// its fields only once the streams are closed: the test closes them first.
TEST_F(ServerCli, IllTypedControlFieldsAreRefusedAndTheServerServesOn) {
  write_replicated_config(1, 2);
  Outcome o = up({"--workload", "tpcc"});
  ASSERT_EQ(o.exit_code, 0) << o.output;
  auto config = cluster::load_config_file(config_);
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  ControlClient client(*config);
  const auto refused = [&](ControlMethod method, const nlohmann::json& request) {
    auto reply = client.call(0, method, request, 10'000);
    ASSERT_FALSE(reply.ok()) << request.dump() << " answered " << reply->dump();
    EXPECT_EQ(reply.status().code(), Code::kInvalidArgument)
        << request.dump() << ": " << reply.status().to_string();
    auto ping = client.call(0, kPing, nlohmann::json::object(), 10'000);
    ASSERT_TRUE(ping.ok()) << "after " << request.dump() << ": " << ping.status().to_string();
  };
  refused(kScan, {{"step", 7}});
  refused(kScan, nlohmann::json::array({"check"}));
  refused(kStats, {{"latency", "yes"}});
  refused(kStats, nlohmann::json::array({"latency"}));
  // Asked well, it answers its (empty: no load ran) latency counts, which read back.
  auto stats = client.call(0, kStats, {{"latency", true}}, 10'000);
  ASSERT_TRUE(stats.ok()) << stats.status().to_string();
  LatencySample sample;
  EXPECT_TRUE(parse_latency_sample(*stats, &sample).ok()) << stats->dump();
  EXPECT_EQ(stats->value("live_conflicts", ~uint64_t{0}), 0u) << stats->dump();
  refused(kRepl, {{"step", {{"close", true}}}});
  auto closing = client.call(0, kRepl, {{"step", "close"}}, 10'000);
  ASSERT_TRUE(closing.ok()) << closing.status().to_string();
  // Until the floor is sealed a report answers {"closed": false} without reading its fields.
  bool closed = false;
  for (int i = 0; i < 100 && !closed; ++i) {
    auto report = client.call(0, kRepl, {{"step", "report"}, {"digest", false}}, 10'000);
    ASSERT_TRUE(report.ok()) << report.status().to_string();
    closed = report->value("closed", false) && report->value("done", false);
    if (!closed) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(closed) << "the streams never closed";
  refused(kRepl, {{"step", "report"}, {"digest", "yes"}});
  refused(kRepl, {{"step", "report"}, {"wait_ms", -5}});
  refused(kRepl, {{"step", "report"}, {"check", 1}});
  o = run({"cluster", "status", "--config", config_}, 30);
  EXPECT_EQ(o.exit_code, 0) << o.output;
}

// A replicated shard whose followers never come waits for them (replication timeout: minutes);
// SIGTERM must end that wait within seconds, with a message saying what it was doing.
TEST_F(ServerCli, ServerWaitingForItsFollowersStopsOnSigterm) {
  write_replicated_config(1, 3);
  const std::string log = path("server.log");
  const pid_t server = start({"server", "--config", config_, "--shard", "0", "--keys-per-partition",
                              "2000", "--data-dir", path("r0")},
                             log);
  // 60 s for the load on a busy machine.
  ASSERT_TRUE(wait_for_text(log, "waiting for a majority", 60))
      << "the server never started waiting for its followers";
  const auto signalled = Clock::now();
  kill(server, SIGTERM);
  const Outcome o = finish(server, log, 10);
  const double took_s = std::chrono::duration<double>(Clock::now() - signalled).count();
  EXPECT_NE(o.exit_code, -1) << "still running 10 s after SIGTERM\n" << o.output;
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_LT(took_s, 5.0) << o.output;
  EXPECT_NE(o.output.find("stopped by a signal while waiting for a majority of its replicas"),
            std::string::npos)
      << o.output;
  config_.clear();  // nothing for TearDown's `cluster down`
}

// The JSON of a 30 s bench that Ctrl-C ended early: interrupted, throughput over the seconds
// measured, not the 30 requested.
void expect_interrupted_json(const std::string& json) {
  const nlohmann::json j = read_json(json);
  ASSERT_TRUE(j.is_object()) << read_file(json);
  EXPECT_EQ(j.value("interrupted", false), true);
  EXPECT_EQ(j.value("requested_seconds", 0.0), 30.0);
  const double seconds = j.value("seconds", 0.0);
  EXPECT_GT(seconds, 1.0);
  EXPECT_LT(seconds, 15.0);
  EXPECT_GT(j.value("committed", uint64_t{0}), 0u);
  EXPECT_NEAR(j.value("committed_per_sec", 0.0),
              static_cast<double>(j.value("committed", uint64_t{0})) / seconds, 1.0);
}

// Ctrl-C (src/base/interrupt.h): the first SIGINT ends a 30 s TPC-C run within seconds of
// its start, and the report covers the seconds measured, with the consistency check and the
// JSON; exit status 130.
TEST_F(ServerCli, CtrlCEndsABenchEarlyAndReportsWhatItMeasured) {
  const std::string log = path("bench.log");
  const std::string json = path("bench.json");
  const auto started = Clock::now();
  const pid_t bench = start({"bench", "tpcc", "--seconds", "30", "--check", "--json", json}, log);
  // The first live line: a second of the run measured (after the load, a second or two).
  ASSERT_TRUE(wait_for_text(log, "committed/s", 60)) << read_file(log);
  const auto signalled = Clock::now();
  kill(bench, SIGINT);
  const Outcome o = finish(bench, log, 30);
  const double after_signal_s = std::chrono::duration<double>(Clock::now() - signalled).count();
  const double in_all_s = std::chrono::duration<double>(Clock::now() - started).count();
  EXPECT_EQ(o.exit_code, 130) << o.output;
  EXPECT_LT(after_signal_s, 10.0) << o.output;
  EXPECT_LT(in_all_s, 25.0) << o.output;
  EXPECT_NE(o.output.find("shoal: interrupted: ending the run"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("(interrupted; 30 s requested)"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("throughput: "), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("consistency: ok"), std::string::npos) << o.output;
  expect_interrupted_json(json);
  EXPECT_EQ(read_json(json).value("consistency", ""), "ok");
  config_.clear();  // nothing for TearDown's `cluster down`
}

// Ctrl-C across shard processes: the controller tells every shard's leader to end its load
// (kStop), then collects, checks and reports as at a run's end, over the seconds measured.
TEST_F(ServerCli, CtrlCEndsARunAcrossShardProcessesEarly) {
  const std::string log = path("bench.log");
  const std::string json = path("bench.json");
  const pid_t bench =
      start({"bench", "tpcc", "--shards", "2", "--seconds", "30", "--check", "--json", json}, log);
  ASSERT_TRUE(wait_for_text(log, "running tpcc on 2 shards", 120)) << read_file(log);
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const auto signalled = Clock::now();
  kill(bench, SIGINT);
  const Outcome o = finish(bench, log, 60);
  const double after_signal_s = std::chrono::duration<double>(Clock::now() - signalled).count();
  EXPECT_EQ(o.exit_code, 130) << o.output;
  EXPECT_LT(after_signal_s, 20.0) << o.output;  // the run had 27 s left
  EXPECT_NE(o.output.find("shoal: interrupted: ending the run on every shard"), std::string::npos)
      << o.output;
  EXPECT_NE(o.output.find("consistency: ok"), std::string::npos) << o.output;
  expect_interrupted_json(json);
  // The per-second series is cut at the stop with committed_per_second.
  const nlohmann::json j = read_json(json);
  EXPECT_EQ(j["series"].size(), j["committed_per_second"].size()) << j.dump();
  EXPECT_LT(j["series"].size(), 30u) << j.dump();
  config_.clear();  // nothing for TearDown's `cluster down`
}

// The replicated in-process bench: after the first Ctrl-C the followers still replay to the
// end, are compared and checked, and are stopped; after a second one (here during the
// report's quiesce or at once) nothing of the run is left running.
TEST_F(ServerCli, CtrlCStopsTheFollowersOfAReplicatedBench) {
  for (const int sigints : {1, 2}) {
    SCOPED_TRACE(fmt::format("{} SIGINT(s)", sigints));
    const std::string log = path(fmt::format("bench-{}.log", sigints));
    const pid_t bench =
        start({"bench", "tpcc", "--replicas", "3", "--seconds", "30", "--check"}, log);
    // The first live line: the followers installed the load and a second of the run passed.
    ASSERT_TRUE(wait_for_text(log, "committed/s", 120)) << read_file(log);
    const std::vector<pid_t> followers = children_of(bench);
    EXPECT_EQ(followers.size(), 2u);
    const auto signalled = Clock::now();
    for (int i = 0; i < sigints; ++i) {
      kill(bench, SIGINT);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    const Outcome o = finish(bench, log, 60);
    const double after_signal_s = std::chrono::duration<double>(Clock::now() - signalled).count();
    EXPECT_EQ(o.exit_code, 130) << o.output;
    EXPECT_LT(after_signal_s, sigints == 1 ? 20.0 : 3.0) << o.output;
    if (sigints == 1) {
      EXPECT_NE(o.output.find("(interrupted; 30 s requested)"), std::string::npos) << o.output;
      EXPECT_NE(o.output.find("replica 2: digest"), std::string::npos) << o.output;
      EXPECT_NE(o.output.find("consistency: ok"), std::string::npos) << o.output;
    } else {
      EXPECT_NE(o.output.find("shoal: interrupted again: exiting now"), std::string::npos)
          << o.output;
    }
    const std::vector<pid_t> left = still_running(followers, 10);
    EXPECT_TRUE(left.empty()) << fmt::format("followers still running: {}", fmt::join(left, ", "));
    for (pid_t p : left) kill(p, SIGKILL);
  }
  config_.clear();  // nothing for TearDown's `cluster down`
}

TEST_F(ServerCli, ClusterTopNeedsAMetricsPortNamingTheShard) {
  write_config();
  const Outcome o = run({"cluster", "top", "--config", config_, "--iterations", "1"}, 30);
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("shard[0]: no replica has a metrics_port"), std::string::npos)
      << o.output;
  config_.clear();  // nothing for TearDown's `cluster down`
}

// GET http://127.0.0.1:port/metrics: the body, empty if it did not answer 200.
std::string scrape(uint16_t port) {
  cluster::HttpClient http;
  cluster::HttpResponse response;
  cluster::HttpFailure failure;
  const std::string url = fmt::format("http://127.0.0.1:{}/metrics", port);
  if (!http.request(url, {}, true, 5000, &response, &failure)) return {};
  return response.status == 200 ? response.body : std::string();
}

double sample_sum(const std::string& text, std::string_view name) {
  auto samples = ops::parse_metrics_text(text);
  return samples.ok() ? ops::sum_samples(*samples, name) : -1;
}

// Every replica serves /metrics on its configured metrics_port: the leaders' counters rise
// under load, the followers report their replay, promtool accepts every scrape, and `cluster
// top` prints a line per shard from them.
TEST_F(ServerCli, EveryReplicaServesMetricsThatPromtoolAccepts) {
  write_replicated_config(2, 2);
  // A metrics port for every replica, above the config's ports and free now.
  std::string toml = read_file(config_), with;
  uint16_t next = 0;
  for (size_t at = toml.find("\nport = "); at != std::string::npos; at = toml.find("\nport = ")) {
    const size_t eol = toml.find('\n', at + 1);
    next = std::max<uint16_t>(next, static_cast<uint16_t>(std::stoi(toml.substr(at + 8)) + 100));
    with += toml.substr(0, eol + 1);
    toml.erase(0, eol + 1);
    while (!port_free(next)) ++next;
    with += fmt::format("metrics_port = {}\n", next++);
  }
  with += toml;
  std::ofstream(config_) << with;
  std::vector<uint16_t> ports;  // shard 0 leader, follower, shard 1 leader, follower
  for (size_t at = with.find("metrics_port = "); at != std::string::npos;
       at = with.find("metrics_port = ", at + 1)) {
    ports.push_back(static_cast<uint16_t>(std::stoi(with.substr(at + 15))));
  }
  ASSERT_EQ(ports.size(), 4u) << with;
  Outcome o = up({"--checkpoint-interval-ms", "200"});
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const std::string before = scrape(ports[0]);
  ASSERT_FALSE(before.empty()) << "shard 0's leader does not serve /metrics";
  const pid_t bench =
      start({"bench", "micro", "--cluster", config_, "--cross-shard-pct", "20", "--seconds", "2"},
            path("bench.log"));
  // `top` gives each scrape 500 ms: on a loaded 2-core machine (the test command's sanitizer
  // builds beside it) one can miss it, and the line then says no leader answered. A few
  // screens, each a new scrape: one of them must show shard 1's leader.
  for (int attempt = 0; attempt < 5; ++attempt) {
    o = run({"cluster", "top", "--config", config_, "--iterations", "1"}, 30);
    if (o.output.find("\n    1       0 ") != std::string::npos) break;
  }
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("txn/s"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("\n    1       0 "), std::string::npos) << o.output;  // shard 1's line
  const Outcome b = finish(bench, path("bench.log"), 120);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const std::string leader = scrape(ports[0]), follower = scrape(ports[1]);
  for (const char* name :
       {"shoal_txn_committed_total", "shoal_txn_aborted_total", "shoal_txn_failed_total",
        "shoal_txn_speculative_latency_seconds_bucket", "shoal_txn_commit_latency_seconds_count",
        "shoal_2pc_committed_total", "shoal_2pc_round_trips_total", "shoal_epoch",
        "shoal_watermark", "shoal_vector_watermark", "shoal_repl_chosen_slot",
        "shoal_repl_persisted_slot", "shoal_repl_lag_seconds", "shoal_repl_lag_bytes",
        "shoal_repl_batch_size_bytes_bucket", "shoal_repl_fsync_latency_seconds",
        "shoal_repl_wal_bytes", "shoal_connections", "shoal_process_resident_bytes"}) {
    EXPECT_NE(leader.find(std::string(name)), std::string::npos) << name << "\n" << leader;
  }
  EXPECT_NE(leader.find("shoal_checkpoints_total{outcome=\"compacted\"}"), std::string::npos)
      << leader;
  EXPECT_GT(sample_sum(leader, "shoal_txn_committed_total"),
            sample_sum(before, "shoal_txn_committed_total") + 100)
      << leader;
  EXPECT_GT(sample_sum(leader, "shoal_2pc_committed_total"), 0) << leader;
  EXPECT_GT(sample_sum(leader, "shoal_2pc_round_trips_total"),
            sample_sum(leader, "shoal_2pc_committed_total"))
      << leader;
  EXPECT_GT(sample_sum(leader, "shoal_repl_chosen_slot"), 0) << leader;
  for (const char* name :
       {"shoal_repl_applied_tid", "shoal_repl_replayed_txns_total", "shoal_repl_received_slot",
        "shoal_checkpoints_total", "shoal_checkpoint_bytes"}) {
    EXPECT_NE(follower.find(std::string(name)), std::string::npos) << name << "\n" << follower;
  }
  EXPECT_GT(sample_sum(follower, "shoal_repl_replayed_txns_total"), 100) << follower;
  EXPECT_GT(sample_sum(follower, "shoal_checkpoint_bytes"), 0) << follower;
  for (const std::string& text : {before, leader, follower, scrape(ports[2]), scrape(ports[3])}) {
    ASSERT_FALSE(text.empty());
    auto verdict = ops::promtool_check_metrics(text);
    if (!verdict.ok() && verdict.status().code() == Code::kNotFound) {
      GTEST_SKIP() << "promtool not installed (Debian package prometheus)";
    }
    ASSERT_TRUE(verdict.ok()) << verdict.status().to_string();
    EXPECT_EQ(*verdict, "") << text;
  }
}

}  // namespace
}  // namespace shoal::server
