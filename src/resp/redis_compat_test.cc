// Byte-for-byte compatibility with redis-server: the test starts Debian's redis-server 7 on a
// free port, sends it a script of commands (RESP2, then RESP3 after HELLO 3) one at a time,
// and asserts that a Session over the in-memory backend replies the very same bytes to each.
// Skipped, with a message, when redis-server is not installed (scripts/install-deps.sh
// installs it). Commands whose replies name the server (HELLO, INFO) are sent to both but
// not compared.
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "src/resp/testing/mem_backend.h"
#include "src/resp/testing/test_client.h"

extern char** environ;

namespace shoal::resp {
namespace {

constexpr const char* kRedisServer = "/usr/bin/redis-server";

// End of the reply starting at pos, or npos when buf does not hold all of it yet.
size_t reply_end(std::string_view buf, size_t pos, int depth = 0) {
  if (pos >= buf.size() || depth > 32) return std::string_view::npos;
  const size_t eol = buf.find("\r\n", pos);
  if (eol == std::string_view::npos) return eol;
  const char type = buf[pos];
  const std::string_view text = buf.substr(pos + 1, eol - pos - 1);
  const long long n = (type == '$' || type == '=' || type == '!' || type == '*' || type == '~' ||
                       type == '%' || type == '>' || type == '|')
                          ? std::stoll(std::string(text))
                          : 0;
  size_t at = eol + 2;
  if (type == '$' || type == '=' || type == '!') {
    if (n < 0) return at;
    at += static_cast<size_t>(n) + 2;
    return at <= buf.size() ? at : std::string_view::npos;
  }
  if (type == '*' || type == '~' || type == '%' || type == '>' || type == '|') {
    const long long elements = (type == '%' || type == '|') ? 2 * n : n;
    for (long long i = 0; i < elements; ++i) {
      at = reply_end(buf, at, depth + 1);
      if (at == std::string_view::npos) return at;
    }
  }
  return at;
}

class RedisServer {
 public:
  // redis-server listens on a unix socket of its own (`--port 0`: no TCP), so there is no
  // free-port race: a TCP port found free, closed and passed on could be taken by any other
  // process before redis-server binds it, and the test would talk to whatever took it.
  bool start() {
    socket_path_ = (std::filesystem::temp_directory_path() /
                    ("shoal-redis-compat-" + std::to_string(getpid()) + ".sock"))
                       .string();
    std::filesystem::remove(socket_path_);
    std::vector<std::string> args = {
        kRedisServer, "--port",      "0",  "--unixsocket", socket_path_, "--unixsocketperm",
        "700",        "--save",      "",   "--appendonly", "no",         "--databases",
        "1",          "--daemonize", "no", "--logfile",    "/dev/null"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, kRedisServer, nullptr, nullptr, argv.data(), environ) != 0) return false;
    for (int i = 0; i < 100; ++i) {  // up to 5 s for it to listen
      if (connect_once()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  ~RedisServer() {
    if (fd_ >= 0) close(fd_);
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
    if (!socket_path_.empty()) std::filesystem::remove(socket_path_);
  }
  // Sends one command and returns its whole reply.
  std::string call(const std::vector<std::string_view>& args) {
    const std::string req = testing::encode_command(args);
    if (send(fd_, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
      return "<send failed>";
    }
    std::string got;
    char buf[65536];
    while (reply_end(got, 0) == std::string_view::npos) {
      const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) return got + "<connection closed>";
      got.append(buf, static_cast<size_t>(n));
    }
    return got;
  }

 private:
  bool connect_once() {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (socket_path_.size() >= sizeof(addr.sun_path)) {
      close(fd);
      return false;
    }
    std::memcpy(addr.sun_path, socket_path_.c_str(), socket_path_.size() + 1);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd);
      return false;
    }
    timeval timeout{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    fd_ = fd;
    return true;
  }

  pid_t pid_ = -1;
  std::string socket_path_;
  int fd_ = -1;
};

struct Step {
  std::vector<std::string_view> args;
  bool compare = true;
};

// RESP2: the string commands' replies and errors.
std::vector<Step> resp2_string_steps() {
  const std::string_view kMin = "-9223372036854775808";
  return {
      {{"PING"}},
      {{"PING", "hello"}},
      {{"ECHO", "a b\r\nc"}},
      {{"SET", "k", "v"}},
      {{"GET", "k"}},
      {{"GET", "nokey"}},
      {{"SET", "k", "v2", "NX"}},
      {{"SET", "k", "v3", "XX", "GET"}},
      {{"SET", "k2", "v", "NX"}},
      {{"GETSET", "k", "new"}},
      {{"GETDEL", "k2"}},
      {{"GETDEL", "k2"}},
      {{"SETNX", "k", "x"}},
      {{"SETNX", "k3", "x"}},
      {{"APPEND", "k3", "yz"}},
      {{"STRLEN", "k3"}},
      {{"STRLEN", "none"}},
      {{"MSET", "a", "1", "b", "2", "c", "3"}},
      {{"MGET", "a", "b", "none", "c"}},
      {{"EXISTS", "a", "b", "none", "a"}},
      {{"DEL", "a", "none"}},
      {{"INCR", "n"}},
      {{"INCRBY", "n", "10"}},
      {{"DECR", "n"}},
      {{"DECRBY", "n", "5"}},
      {{"INCR", "k"}},
      {{"INCRBY", "n", "1.5"}},
      {{"INCRBY", "n", "01"}},
      {{"SET", "big", "9223372036854775807"}},
      {{"INCR", "big"}},
      {{"DECRBY", "n", kMin}},
      {{"SET", "e", "v", "EX", "1000"}},
      {{"GET", "e"}},
      {{"SET", "e", "v", "PX", "0"}},
      {{"SET", "e", "v", "EX", "abc"}},
      {{"SET", "e", "v", "EX", "10", "EX", "20"}},
      {{"SET", "a", "1", "NX", "XX"}},
      {{"SET", "a", "1", "EX", "10", "PX", "10"}},
      {{"SET", "a", "1", "KEEPTTL"}},
      {{"SET", "a", "1", "KEEPTTL", "EX", "5"}},
      {{"SET", "a", "1", "FOO"}},
      {{"SET", "a", "1", "EX"}},
  };
}

// RESP2: connection and server commands, arity and unknown-command errors, MULTI/EXEC/WATCH,
// SCAN.
std::vector<Step> resp2_server_steps() {
  return {
      {{"DBSIZE"}},
      {{"SELECT", "0"}},
      {{"SELECT", "1"}},
      {{"SELECT", "x"}},
      {{"CLIENT", "GETNAME"}},
      {{"CLIENT", "SETNAME", "conn1"}},
      {{"CLIENT", "GETNAME"}},
      {{"CLIENT", "SETNAME", "a b"}},
      {{"CLIENT", "FOO"}},
      {{"CLIENT"}},
      {{"CLIENT", "SETNAME"}},
      {{"GET"}},
      {{"GET", "a", "b"}},
      {{"MSET", "a"}},
      {{"MSET", "a", "1", "b"}},
      {{"FOOBAR", "x", "y"}},
      {{"foobar"}},
      {{"COMMAND", "FOO"}},
      {{"COMMAND", "COUNT", "x"}},
      {{"MULTI"}},
      {{"SET", "t", "1"}},
      {{"INCR", "t"}},
      {{"SET", "t", "1", "BAD"}},
      {{"GET", "t"}},
      {{"EXEC"}},
      {{"MULTI"}},
      {{"MULTI"}},
      {{"SET", "t"}},
      {{"EXEC"}},
      {{"MULTI"}},
      {{"NOPE"}},
      {{"EXEC"}},
      {{"MULTI"}},
      {{"INCR", "t"}},
      {{"DISCARD"}},
      {{"EXEC"}},
      {{"DISCARD"}},
      {{"WATCH", "t"}},
      {{"MULTI"}},
      {{"WATCH", "x"}},
      {{"INCR", "t"}},
      {{"EXEC"}},
      {{"WATCH", "t"}},
      {{"SET", "t", "5"}},
      {{"MULTI"}},
      {{"GET", "t"}},
      {{"EXEC"}},
      {{"WATCH"}},
      {{"UNWATCH"}},
      {{"SCAN", "0", "MATCH", "k3*", "COUNT", "1000"}},
      {{"SCAN", "0", "COUNT", "0"}},
      {{"SCAN", "0", "COUNT", "x"}},
      {{"SCAN", "x"}},
      {{"SCAN", "0", "FOO", "bar"}},
      {{"HELLO", "4"}},
      {{"HELLO", "x"}},
      {{"HELLO", "2", "FOO"}},
      {{"HELLO", "3", "AUTH", "bob", "x"}},
  };
}

// After HELLO 3: RESP3 replies (null, map), then back to RESP2.
std::vector<Step> resp3_steps() {
  return {
      {{"HELLO", "3"}, false},
      {{"GET", "nokey"}},
      {{"MGET", "a", "nokey"}},
      {{"CLIENT", "GETNAME"}},
      {{"SET", "t", "1", "NX"}},
      {{"MULTI"}},
      {{"GET", "nokey"}},
      {{"INCR", "t"}},
      {{"EXEC"}},
      {{"WATCH", "t"}},
      {{"INCR", "t"}},
      {{"MULTI"}},
      {{"EXEC"}},
      {{"CONFIG", "GET", "appendonly"}},
      {{"CONFIG", "GET", "databases"}},  // (Redis orders several parameters at random)
      {{"CONFIG", "GET", "save"}},
      {{"CONFIG", "GET", "nosuch"}},
      {{"CONFIG"}},
      {{"CONFIG", "GET"}},
      {{"CONFIG", "FOO"}},
      {{"INFO"}, false},
      {{"HELLO", "2"}, false},
      {{"GET", "nokey"}},
      {{"DBSIZE"}},
      {{"QUIT"}},
  };
}

TEST(RedisCompat, SameBytesAsRedisServer) {
  if (access(kRedisServer, X_OK) != 0) {
    GTEST_SKIP() << kRedisServer << " not installed (apt-get install redis-server): the "
                 << "byte-for-byte comparison did not run";
  }
  RedisServer redis;
  ASSERT_TRUE(redis.start()) << "could not start " << kRedisServer;
  testing::MemBackend backend;
  testing::ManualEnv env;
  testing::TestClient ours{backend, env};
  int compared = 0;
  std::vector<Step> script = resp2_string_steps();
  for (Step& step : resp2_server_steps()) script.push_back(std::move(step));
  for (Step& step : resp3_steps()) script.push_back(std::move(step));
  for (const Step& step : script) {
    const std::string want = redis.call(step.args);
    const std::string got = ours.call(step.args);
    if (!step.compare) continue;
    std::string cmd;
    for (auto a : step.args) cmd += std::string(a) + " ";
    EXPECT_EQ(got, want) << "command: " << cmd;
    ++compared;
  }
  EXPECT_GT(compared, 100);
}

}  // namespace
}  // namespace shoal::resp
