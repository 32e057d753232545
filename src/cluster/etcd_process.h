// EtcdProcess: a local single-member etcd (the configuration manager's server) started as a
// child process, for `shoal cluster up` and tests. It listens on 127.0.0.1 only: a client
// port (the JSON gateway EtcdConfigManager talks to) and a peer port, both given or picked
// free, and keeps its data in data_dir, so a restart on the same directory and ports finds
// what was written.
//
// start() fails clearly, never hangs: NotFound when the etcd binary is missing (install
// etcd-server, scripts/install-deps.sh), AlreadyExists naming the port when one is taken,
// Unavailable quoting the end of etcd's log when it exits or does not answer /health within
// start_timeout_ms. stop() sends SIGTERM, then SIGKILL after grace_ms, and reaps the child;
// kill() is SIGKILL at once (a crash, for tests). The destructor stops a running child.
//
// The child gets PR_SET_PDEATHSIG (SIGKILL): it dies with the thread that started it, so a
// test that crashes leaves no etcd behind. That thread must therefore outlive the process
// (unless options.detach: `cluster up`'s etcd, stopped by `cluster down`).
//
// Threads: one owner thread calls everything.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "shoal/status.h"
#include "src/base/assert.h"

namespace shoal::cluster {

struct EtcdProcessOptions {
  std::string data_dir;         // REQUIRED; created if missing
  std::string binary = "etcd";  // a path, or a name looked up in PATH
  std::string name = "shoal";   // the member's name
  uint16_t client_port = 0;     // 0: a free port
  uint16_t peer_port = 0;       // 0: a free port
  uint64_t start_timeout_ms = 10'000;
  // Raft timing. The minimum lease TTL etcd grants is 1.5 x election_ms (rounded up to whole
  // seconds): the defaults give 2 s; tests use 10 / 100 for 1 s leases.
  uint32_t heartbeat_ms = 100;
  uint32_t election_ms = 1000;
  std::string log_path;  // "": <data_dir>.log
  // Outlives its starter (`shoal cluster up`, which exits while the cluster runs): no
  // PR_SET_PDEATHSIG, a session of its own; release() then hands its pid over (to
  // `cluster down`, through the run directory).
  bool detach = false;
};

class EtcdProcess {
 public:
  [[nodiscard]] static Result<std::unique_ptr<EtcdProcess>> start(EtcdProcessOptions options);
  ~EtcdProcess();
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  // SIGTERM, SIGKILL after grace_ms; Ok if it was already stopped.
  [[nodiscard]] Status stop(uint64_t grace_ms = 5'000);
  // SIGKILL and reap.
  void kill();
  // Starts it again with the same options, ports and data_dir. REQUIRES: stopped.
  [[nodiscard]] Status restart();

  // Forgets the child (the destructor no longer stops it) and returns its pid, for a detached
  // etcd that outlives this process. REQUIRES: running().
  pid_t release() {
    SHOAL_ASSERT(pid_ > 0, "release of an etcd that is not running");
    const pid_t pid = pid_;
    pid_ = -1;
    return pid;
  }
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  uint16_t client_port() const { return options_.client_port; }
  uint16_t peer_port() const { return options_.peer_port; }
  std::string endpoint() const;  // "127.0.0.1:<client_port>"
  const std::string& log_path() const { return options_.log_path; }

 private:
  explicit EtcdProcess(EtcdProcessOptions options) : options_(std::move(options)) {}
  Status launch();

  EtcdProcessOptions options_;  // ports and log_path resolved
  std::string binary_path_;
  pid_t pid_ = -1;
};

// A port on 127.0.0.1 that was free a moment ago (bound to port 0 and released).
[[nodiscard]] Result<uint16_t> free_loopback_port();

}  // namespace shoal::cluster
