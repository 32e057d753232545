// Real Redis clients against the command layer, hosted by the test TCP server
// (testing/socket_server.h) over the in-memory backend: the hiredis library (Debian
// libhiredis-dev) and the redis-cli binary (redis-tools), including a WATCH conflict between
// two redis-cli sessions. Each part is skipped, with a message, when its client is missing.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#if defined(SHOAL_HAVE_HIREDIS)
#include <hiredis/hiredis.h>
#endif

#include "src/resp/testing/mem_backend.h"
#include "src/resp/testing/socket_server.h"

extern char** environ;

namespace shoal::resp {
namespace {

constexpr const char* kRedisCli = "/usr/bin/redis-cli";

class RedisClients : public ::testing::Test {
 protected:
  testing::MemBackend backend;
  testing::TestServer server{backend, RealEnv::instance()};

  // Runs redis-cli with args (and --no-raw: the formatted output a terminal shows), its
  // stdin fed by the shell command `feed` when given.
  std::string cli(const std::string& args, const std::string& feed = "") {
    const std::string cmd = (feed.empty() ? "" : feed + " | ") + kRedisCli + " -p " +
                            std::to_string(server.port()) + " --no-raw " + args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    pclose(p);
    return out;
  }
};

#if defined(SHOAL_HAVE_HIREDIS)
std::string reply_text(redisReply* r) {
  if (r == nullptr) return "<null reply>";
  std::string s;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      s = "\"" + std::string(r->str, r->len) + "\"";
      break;
    case REDIS_REPLY_STATUS:
      s = "+" + std::string(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      s = "-" + std::string(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      s = std::to_string(r->integer);
      break;
    case REDIS_REPLY_NIL:
      s = "nil";
      break;
    case REDIS_REPLY_ARRAY:
      s = "[";
      for (size_t i = 0; i < r->elements; ++i) s += (i ? "," : "") + reply_text(r->element[i]);
      s += "]";
      break;
  }
  return s;
}

std::string run(redisContext* c, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  auto* r = static_cast<redisReply*>(redisvCommand(c, fmt, ap));
  va_end(ap);
  std::string s = reply_text(r);
  if (r != nullptr) freeReplyObject(r);
  return s;
}
#endif

TEST_F(RedisClients, Hiredis) {
#if !defined(SHOAL_HAVE_HIREDIS)
  GTEST_SKIP() << "hiredis not found at build time (apt-get install libhiredis-dev)";
#else
  redisContext* c = redisConnect("127.0.0.1", server.port());
  ASSERT_TRUE(c != nullptr && c->err == 0) << (c ? c->errstr : "no context");
  EXPECT_EQ(run(c, "SET %s %b", "bin", "a\0b\r\n", size_t{5}), "+OK");
  EXPECT_EQ(run(c, "GET bin"), std::string("\"a\0b\r\n\"", 7));
  EXPECT_EQ(run(c, "INCRBY n 41"), "41");
  EXPECT_EQ(run(c, "INCR n"), "42");
  EXPECT_EQ(run(c, "MGET n nokey"), "[\"42\",nil]");
  EXPECT_EQ(run(c, "MULTI"), "+OK");
  EXPECT_EQ(run(c, "INCR n"), "+QUEUED");
  EXPECT_EQ(run(c, "GET n"), "+QUEUED");
  EXPECT_EQ(run(c, "EXEC"), "[43,\"43\"]");
  EXPECT_EQ(run(c, "GET"), "-ERR wrong number of arguments for 'get' command");
  // Pipelining: 1000 commands sent before any reply is read.
  for (int i = 0; i < 1000; ++i) redisAppendCommand(c, "SET key:%d %d", i, i);
  for (int i = 0; i < 1000; ++i) {
    redisReply* r = nullptr;
    ASSERT_EQ(redisGetReply(c, reinterpret_cast<void**>(&r)), REDIS_OK);
    EXPECT_EQ(reply_text(r), "+OK");
    freeReplyObject(r);
  }
  EXPECT_EQ(run(c, "DBSIZE"), "1002");
  redisFree(c);
#endif
}

TEST_F(RedisClients, RedisCli) {
  if (access(kRedisCli, X_OK) != 0) GTEST_SKIP() << kRedisCli << " not installed (redis-tools)";
  EXPECT_EQ(cli("SET greeting hello"), "OK\n");
  EXPECT_EQ(cli("GET greeting"), "\"hello\"\n");
  EXPECT_EQ(cli("INCR visits"), "(integer) 1\n");
  EXPECT_EQ(cli("GET nokey"), "(nil)\n");
  EXPECT_EQ(cli("MGET greeting nokey"), "1) \"hello\"\n2) (nil)\n");
  EXPECT_EQ(cli("SCAN 0 MATCH gr* COUNT 100"), "1) \"0\"\n2) 1) \"greeting\"\n");
  EXPECT_EQ(cli("GETT greeting"),
            "(error) ERR unknown command 'GETT', with args beginning with: 'greeting' \n");
  EXPECT_EQ(cli("-3 GET nokey"), "(nil)\n");  // RESP3 via HELLO 3
  // Commands from stdin, one connection: a transaction.
  EXPECT_EQ(cli("", "printf 'MULTI\\nINCR visits\\nSET greeting bye\\nEXEC\\n'"),
            "OK\nQUEUED\nQUEUED\n1) (integer) 2\n2) OK\n");
}

// Two redis-cli sessions: the first WATCHes, the second changes the key, the first's EXEC
// returns nil and its SET is not applied.
TEST_F(RedisClients, RedisCliWatchConflict) {
  if (access(kRedisCli, X_OK) != 0) GTEST_SKIP() << kRedisCli << " not installed (redis-tools)";
  EXPECT_EQ(cli("SET balance 100"), "OK\n");
  int in[2], out[2];
  ASSERT_EQ(pipe(in), 0);
  ASSERT_EQ(pipe(out), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, in[1]);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  const std::string port = std::to_string(server.port());
  const char* argv[] = {kRedisCli, "-p", port.c_str(), "--no-raw", nullptr};
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, kRedisCli, &fa, nullptr, const_cast<char**>(argv), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  const uint64_t commits = backend.commits();
  ASSERT_EQ(write(in[1], "WATCH balance\n", 14), 14);
  // WATCH commits a read-only transaction: wait for it (up to 10 s).
  for (int i = 0; i < 1000 && backend.commits() == commits; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GT(backend.commits(), commits) << "the first session's WATCH never ran";
  EXPECT_EQ(cli("INCRBY balance 5"), "(integer) 105\n");
  const std::string rest = "MULTI\nSET balance 0\nEXEC\n";
  ASSERT_EQ(write(in[1], rest.data(), rest.size()), static_cast<ssize_t>(rest.size()));
  close(in[1]);
  std::string got;
  char buf[4096];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof(buf))) > 0) got.append(buf, static_cast<size_t>(n));
  close(out[0]);
  waitpid(pid, nullptr, 0);
  EXPECT_EQ(got, "OK\nOK\nQUEUED\n(nil)\n");
  EXPECT_EQ(cli("GET balance"), "\"105\"\n");
}

}  // namespace
}  // namespace shoal::resp
