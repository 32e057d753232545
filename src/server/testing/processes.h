// Tests only: helpers for tests that run real `shoal server` processes and talk to them over
// loopback TCP (resp_server_test.cc, client_server_test.cc). Header only, inline: the test
// binary compiles its files in unity batches, where file-local copies would collide.
// Threads: any; each call is independent.
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

// A port the kernel says is free on `host` now (bind to 0).
inline uint16_t free_port(const char* host = "127.0.0.1") {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  EXPECT_EQ(inet_pton(AF_INET, host, &a.sin_addr), 1) << host;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
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
