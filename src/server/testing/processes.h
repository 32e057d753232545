// Tests only: helpers for tests that run real `shoal server` processes and talk to them over
// loopback TCP (resp_server_test.cc, client_server_test.cc, server_cli_test.cc). Header only,
// inline: the test binary compiles its files in unity batches, where file-local copies would
// collide. Threads: any; each call is independent.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

extern char** environ;

namespace shoal::server::test_processes {

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// True if host:port (an IPv4 address) can be bound now.
inline bool port_free(uint16_t port, const char* host = "127.0.0.1") {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  EXPECT_EQ(inet_pton(AF_INET, host, &a.sin_addr), 1) << host;
  a.sin_port = htons(port);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

// The first of `count` consecutive ports on `host` that are free now, below the kernel's
// ephemeral range, for the ports a config names before its servers start (0 if none found).
// Not a port from binding port 0: that one is ephemeral, and an outgoing connection of any
// process (the servers dialing each other, another test) may take it before its server binds
// it (bind, close, reuse). Below the range only a program binding that very port can. The
// search starts at a place set by the pid, and moves on at each call, so that tests running
// side by side and successive calls of one test pick different ports.
inline uint16_t free_low_ports(uint32_t count, const char* host = "127.0.0.1") {
  constexpr uint32_t kLowest = 10'000;
  uint32_t ephemeral_lo = 32'768;
  if (std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range"); range) range >> ephemeral_lo;
  if (ephemeral_lo < kLowest + 2 * count) return 0;
  const uint32_t span = ephemeral_lo - kLowest - count;
  static uint32_t calls = 0;  // a test's calls: each one another block
  for (uint32_t attempt = 0; attempt < 200; ++attempt) {
    const uint32_t at = static_cast<uint32_t>(getpid()) * 7919 + (calls * 200 + attempt) * 337;
    const auto base = static_cast<uint16_t>(kLowest + at % span);
    bool free = true;
    for (uint32_t p = base; p < base + count && free; ++p)
      free = port_free(static_cast<uint16_t>(p), host);
    if (free) {
      ++calls;
      return base;
    }
  }
  return 0;
}

// A TCP connection to host:port (-1 on failure), its reads bounded by 10 s.
inline int dial(uint16_t port, const char* host = "127.0.0.1") {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  EXPECT_EQ(inet_pton(AF_INET, host, &a.sin_addr), 1) << host;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// Starts args[0] with args, stdout and stderr to `log`.
inline pid_t spawn(const std::vector<std::string>& args, const std::string& log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

// The port a server printed after `line` ("redis protocol on 127.0.0.1:"), once its log also
// says " ready on "; waits up to 60 s, 0 when it did not come.
inline uint16_t wait_for_printed_port(const std::string& log, std::string_view line) {
  for (int i = 0; i < 600; ++i) {  // bounded: 60 s
    const std::string text = slurp(log);
    const size_t at = text.find(line);
    if (at != std::string::npos && text.find(" ready on ") != std::string::npos) {
      return static_cast<uint16_t>(std::stoi(text.substr(at + line.size())));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return 0;
}

// A fixture's end: prints the servers' logs when the test failed, stops each server still
// running (SIGTERM, then waits for it) and removes its directory.
inline void stop_servers(std::span<const pid_t> pids, std::span<const std::string> logs,
                         const std::filesystem::path& dir, bool failed) {
  if (failed) {
    for (const std::string& log : logs)
      std::printf("--- %s:\n%s\n", log.c_str(), slurp(log).c_str());
  }
  for (pid_t pid : pids) {
    if (pid <= 0) continue;
    kill(pid, SIGTERM);
    waitpid(pid, nullptr, 0);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace shoal::server::test_processes
