// The command layer over the in-memory backend: Redis's replies and error wording, expiry
// with a manual clock, MULTI/EXEC/WATCH, conflict retry, SCAN, limits, and the connection's
// pipelining, back-pressure and durability gate. Parameterized by the backend
// (testing/commands_fixture.h): MemBackend here, the storage engine's in kv_test.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "src/resp/testing/commands_fixture.h"
#include "src/resp/testing/mem_backend.h"
#include "src/resp/testing/test_client.h"
#include "src/resp/value_format.h"

namespace shoal::resp {
namespace {

using testing::BackendCase;
using testing::Commands;
using testing::FaultBackend;
using testing::ManualEnv;
using testing::MemBackend;
using testing::TestClient;

INSTANTIATE_TEST_SUITE_P(
    Mem, Commands,
    ::testing::Values(BackendCase{
        "Mem", [] { return std::unique_ptr<KvBackend>(std::make_unique<MemBackend>()); }}),
    testing::backend_name);

std::string bulk(std::string_view s) {
  return "$" + std::to_string(s.size()) + "\r\n" + std::string(s) + "\r\n";
}

TEST_P(Commands, StringBasics) {
  EXPECT_EQ(c.call({"PING"}), "+PONG\r\n");
  EXPECT_EQ(c.call({"ping", "hi"}), bulk("hi"));
  EXPECT_EQ(c.call({"ECHO", "x y"}), bulk("x y"));
  EXPECT_EQ(c.call({"GET", "k"}), "$-1\r\n");
  EXPECT_EQ(c.call({"SET", "k", "v1"}), "+OK\r\n");
  EXPECT_EQ(c.call({"GET", "k"}), bulk("v1"));
  EXPECT_EQ(c.call({"GETSET", "k", "v2"}), bulk("v1"));
  EXPECT_EQ(c.call({"SETNX", "k", "v3"}), ":0\r\n");
  EXPECT_EQ(c.call({"SETNX", "n", "v3"}), ":1\r\n");
  EXPECT_EQ(c.call({"APPEND", "k", "abc"}), ":5\r\n");
  EXPECT_EQ(c.call({"STRLEN", "k"}), ":5\r\n");
  EXPECT_EQ(c.call({"STRLEN", "none"}), ":0\r\n");
  EXPECT_EQ(c.call({"MSET", "a", "1", "b", "2"}), "+OK\r\n");
  EXPECT_EQ(c.call({"MGET", "a", "none", "b"}), "*3\r\n" + bulk("1") + "$-1\r\n" + bulk("2"));
  EXPECT_EQ(c.call({"EXISTS", "a", "a", "none"}), ":2\r\n");
  EXPECT_EQ(c.call({"DBSIZE"}), ":4\r\n");
  EXPECT_EQ(c.call({"DEL", "a", "a", "none"}), ":1\r\n");
  EXPECT_EQ(c.call({"GETDEL", "b"}), bulk("2"));
  EXPECT_EQ(c.call({"GETDEL", "b"}), "$-1\r\n");
  EXPECT_EQ(c.call({"DBSIZE"}), ":2\r\n");
  EXPECT_EQ(c.call({"SELECT", "0"}), "+OK\r\n");
  EXPECT_EQ(c.call({"SELECT", "1"}), "-ERR DB index is out of range\r\n");
}

TEST_P(Commands, SetOptionsAsRedis) {
  EXPECT_EQ(c.call({"SET", "a", "1", "NX", "XX"}), "-ERR syntax error\r\n");
  EXPECT_EQ(c.call({"SET", "a", "1", "EX", "0"}), "-ERR invalid expire time in 'set' command\r\n");
  EXPECT_EQ(c.call({"SET", "a", "1", "EX", "abc"}),
            "-ERR value is not an integer or out of range\r\n");
  EXPECT_EQ(c.call({"SET", "a", "1", "EX", "10", "PX", "100"}), "-ERR syntax error\r\n");
  EXPECT_EQ(c.call({"SET", "a", "1", "EX", "10", "EX", "20"}), "+OK\r\n");
  EXPECT_EQ(c.call({"SET", "a", "1", "KEEPTTL", "EX", "10"}), "-ERR syntax error\r\n");
  EXPECT_EQ(c.call({"SET", "a", "1", "EX"}), "-ERR syntax error\r\n");
  EXPECT_EQ(c.call({"SET", "a", "1", "PX", "9223372036854775807"}),
            "-ERR invalid expire time in 'set' command\r\n");
  EXPECT_EQ(c.call({"SET", "a", "2", "GET", "NX"}), bulk("1"));  // NX fails, GET answers
  EXPECT_EQ(c.call({"SET", "a", "3", "XX", "GET"}), bulk("1"));
  EXPECT_EQ(c.call({"SET", "z", "3", "XX"}), "$-1\r\n");
  EXPECT_EQ(c.call({"SET", "z", "3", "NX"}), "+OK\r\n");
  EXPECT_EQ(c.call({"GET", "a"}), bulk("3"));
}

TEST_P(Commands, IntegersAsRedis) {
  EXPECT_EQ(c.call({"INCR", "n"}), ":1\r\n");
  EXPECT_EQ(c.call({"INCRBY", "n", "41"}), ":42\r\n");
  EXPECT_EQ(c.call({"DECR", "n"}), ":41\r\n");
  EXPECT_EQ(c.call({"DECRBY", "n", "-9"}), ":50\r\n");
  const std::string not_int = "-ERR value is not an integer or out of range\r\n";
  for (const char* bad : {"01", "+1", " 1", "1 ", "-0", "", "1.5", "9223372036854775808"}) {
    EXPECT_EQ(c.call({"INCRBY", "n", bad}), not_int) << bad;
    EXPECT_EQ(c.call({"SET", "s", bad}), "+OK\r\n");
    EXPECT_EQ(c.call({"INCR", "s"}), not_int) << bad;
  }
  EXPECT_EQ(c.call({"SET", "big", "9223372036854775807"}), "+OK\r\n");
  EXPECT_EQ(c.call({"INCR", "big"}), "-ERR increment or decrement would overflow\r\n");
  EXPECT_EQ(c.call({"SET", "small", "-9223372036854775808"}), "+OK\r\n");
  EXPECT_EQ(c.call({"DECR", "small"}), "-ERR increment or decrement would overflow\r\n");
  EXPECT_EQ(c.call({"DECRBY", "n", "-9223372036854775808"}), "-ERR decrement would overflow\r\n");
  EXPECT_EQ(c.call({"GET", "big"}), bulk("9223372036854775807"));
}

TEST_P(Commands, ArityAndUnknownCommandWording) {
  EXPECT_EQ(c.call({"get"}), "-ERR wrong number of arguments for 'get' command\r\n");
  EXPECT_EQ(c.call({"GET", "a", "b"}), "-ERR wrong number of arguments for 'get' command\r\n");
  EXPECT_EQ(c.call({"MSET", "a", "1", "b"}),
            "-ERR wrong number of arguments for 'mset' command\r\n");
  EXPECT_EQ(c.call({"PING", "a", "b"}), "-ERR wrong number of arguments for 'ping' command\r\n");
  EXPECT_EQ(c.call({"FOO", "a", "b"}),
            "-ERR unknown command 'FOO', with args beginning with: 'a' 'b' \r\n");
  EXPECT_EQ(c.call({"CLIENT"}), "-ERR wrong number of arguments for 'client' command\r\n");
  EXPECT_EQ(c.call({"CLIENT", "SETNAME"}),
            "-ERR wrong number of arguments for 'client|setname' command\r\n");
  EXPECT_EQ(c.call({"client", "foo"}), "-ERR unknown subcommand 'foo'. Try CLIENT HELP.\r\n");
  EXPECT_EQ(c.call({"CLIENT", "SETNAME", "a b"}),
            "-ERR Client names cannot contain spaces, newlines or special characters.\r\n");
  EXPECT_EQ(c.call({"CLIENT", "GETNAME"}), "$-1\r\n");
  // The session remembers the last name it resolved (exact bytes): a run of one command, the
  // same name in another case, a container between and a near miss resolve as before.
  EXPECT_EQ(c.call({"SET", "k", "1"}), "+OK\r\n");
  EXPECT_EQ(c.call({"SET", "k", "2"}), "+OK\r\n");
  EXPECT_EQ(c.call({"set", "k"}), "-ERR wrong number of arguments for 'set' command\r\n");
  EXPECT_EQ(c.call({"CLIENT", "GETNAME"}), "$-1\r\n");
  EXPECT_EQ(c.call({"SETX", "k"}), "-ERR unknown command 'SETX', with args beginning with: 'k' \r\n");
  EXPECT_EQ(c.call({"GET", "k"}), "$1\r\n2\r\n");
  EXPECT_EQ(c.call({"CLIENT", "SETNAME", "app"}), "+OK\r\n");
  EXPECT_EQ(c.call({"CLIENT", "GETNAME"}), bulk("app"));
}

TEST_P(Commands, ExpiryUsesTheInjectedClock) {
  EXPECT_EQ(c.call({"SET", "k", "v", "EX", "10"}), "+OK\r\n");
  auto raw = backend.raw("k");
  ASSERT_TRUE(raw.has_value());
  auto decoded = decode_string(*raw);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->expiry_ms, env.wall_us() / 1000 + 10000);
  EXPECT_EQ(c.call({"INCR", "counter"}), ":1\r\n");
  EXPECT_EQ(c.call({"SET", "counter", "5", "PX", "5000"}), "+OK\r\n");
  EXPECT_EQ(c.call({"INCR", "counter"}), ":6\r\n");  // keeps its expiry, as Redis
  EXPECT_EQ(c.call({"SET", "kept", "1", "PX", "5000"}), "+OK\r\n");
  EXPECT_EQ(c.call({"SET", "kept", "2", "KEEPTTL"}), "+OK\r\n");
  env.advance_ms(4999);
  EXPECT_EQ(c.call({"GET", "counter"}), bulk("6"));
  env.advance_ms(1);
  EXPECT_EQ(c.call({"GET", "counter"}), "$-1\r\n");
  EXPECT_EQ(c.call({"GET", "kept"}), "$-1\r\n");
  EXPECT_EQ(c.call({"EXISTS", "counter"}), ":0\r\n");
  EXPECT_EQ(c.call({"INCR", "counter"}), ":1\r\n");  // an expired key counts as absent
  EXPECT_EQ(c.call({"GET", "k"}), bulk("v"));
  env.advance_ms(5000);
  EXPECT_EQ(c.call({"GET", "k"}), "$-1\r\n");
  EXPECT_EQ(c.call({"SETNX", "k", "w"}), ":1\r\n");
  EXPECT_EQ(c.call({"SET", "old", "x", "EXAT", "1"}), "+OK\r\n");  // in the past: deleted
  EXPECT_FALSE(backend.raw("old").has_value());
}

TEST_P(Commands, MultiExecAsRedis) {
  EXPECT_EQ(c.call({"EXEC"}), "-ERR EXEC without MULTI\r\n");
  EXPECT_EQ(c.call({"DISCARD"}), "-ERR DISCARD without MULTI\r\n");
  EXPECT_EQ(c.call({"MULTI"}), "+OK\r\n");
  EXPECT_EQ(c.call({"MULTI"}), "-ERR MULTI calls can not be nested\r\n");
  EXPECT_EQ(c.call({"WATCH", "a"}), "-ERR WATCH inside MULTI is not allowed\r\n");
  EXPECT_EQ(c.call({"SET", "a", "1"}), "+QUEUED\r\n");
  EXPECT_EQ(c.call({"INCR", "a"}), "+QUEUED\r\n");
  EXPECT_EQ(c.call({"SET", "a", "1", "BAD"}), "+QUEUED\r\n");  // syntax: found at EXEC
  EXPECT_EQ(c.call({"GET", "a"}), "+QUEUED\r\n");
  EXPECT_EQ(c.call({"EXEC"}), "*4\r\n+OK\r\n:2\r\n-ERR syntax error\r\n" + bulk("2"));
  // A rejected command while queuing aborts the whole transaction.
  EXPECT_EQ(c.call({"MULTI"}), "+OK\r\n");
  EXPECT_EQ(c.call({"SET", "a", "9"}), "+QUEUED\r\n");
  EXPECT_EQ(c.call({"SET", "a"}), "-ERR wrong number of arguments for 'set' command\r\n");
  EXPECT_EQ(c.call({"EXEC"}), "-EXECABORT Transaction discarded because of previous errors.\r\n");
  EXPECT_EQ(c.call({"MULTI"}), "+OK\r\n");
  EXPECT_EQ(c.call({"NOPE"}), "-ERR unknown command 'NOPE', with args beginning with: \r\n");
  EXPECT_EQ(c.call({"EXEC"}), "-EXECABORT Transaction discarded because of previous errors.\r\n");
  EXPECT_EQ(c.call({"GET", "a"}), bulk("2"));
  EXPECT_EQ(c.call({"MULTI"}), "+OK\r\n");
  EXPECT_EQ(c.call({"SET", "a", "7"}), "+QUEUED\r\n");
  EXPECT_EQ(c.call({"DISCARD"}), "+OK\r\n");
  EXPECT_EQ(c.call({"GET", "a"}), bulk("2"));
  EXPECT_EQ(c.call({"MULTI"}), "+OK\r\n");
  EXPECT_EQ(c.call({"EXEC"}), "*0\r\n");
}

TEST_P(Commands, WatchedKeyChangedByAnotherClientMakesExecNull) {
  TestClient other{backend, env};
  EXPECT_EQ(c.call({"SET", "balance", "100"}), "+OK\r\n");
  EXPECT_EQ(c.call({"WATCH", "balance", "absent"}), "+OK\r\n");
  EXPECT_EQ(other.call({"INCRBY", "balance", "5"}), ":105\r\n");
  EXPECT_EQ(c.call({"MULTI"}), "+OK\r\n");
  EXPECT_EQ(c.call({"SET", "balance", "0"}), "+QUEUED\r\n");
  EXPECT_EQ(c.call({"EXEC"}), "*-1\r\n");
  EXPECT_EQ(c.call({"GET", "balance"}), bulk("105"));
  // EXEC unwatched: the next transaction goes through.
  EXPECT_EQ(other.call({"SET", "balance", "1"}), "+OK\r\n");
  EXPECT_EQ(c.call({"MULTI"}), "+OK\r\n");
  EXPECT_EQ(c.call({"SET", "balance", "0"}), "+QUEUED\r\n");
  EXPECT_EQ(c.call({"EXEC"}), "*1\r\n+OK\r\n");
  // Creating a watched absent key is a change too.
  EXPECT_EQ(c.call({"WATCH", "absent"}), "+OK\r\n");
  EXPECT_EQ(other.call({"SET", "absent", "x"}), "+OK\r\n");
  EXPECT_EQ(c.call({"MULTI"}), "+OK\r\n");
  EXPECT_EQ(c.call({"GET", "absent"}), "+QUEUED\r\n");
  EXPECT_EQ(c.call({"EXEC"}), "*-1\r\n");
  // Unchanged, and UNWATCH'd changes, let EXEC run.
  EXPECT_EQ(c.call({"WATCH", "balance"}), "+OK\r\n");
  EXPECT_EQ(c.call({"UNWATCH"}), "+OK\r\n");
  EXPECT_EQ(other.call({"SET", "balance", "2"}), "+OK\r\n");
  EXPECT_EQ(c.call({"MULTI"}), "+OK\r\n");
  EXPECT_EQ(c.call({"GET", "balance"}), "+QUEUED\r\n");
  EXPECT_EQ(c.call({"EXEC"}), "*1\r\n" + bulk("2"));
}

TEST_P(Commands, WatchSeesOwnWritesAndExpiry) {
  EXPECT_EQ(c.call({"SET", "k", "1", "PX", "100"}), "+OK\r\n");
  EXPECT_EQ(c.call({"WATCH", "k"}), "+OK\r\n");
  env.advance_ms(100);  // expired since WATCH: Redis 7 aborts EXEC
  EXPECT_EQ(c.call({"MULTI"}), "+OK\r\n");
  EXPECT_EQ(c.call({"EXEC"}), "*-1\r\n");
  EXPECT_EQ(c.call({"WATCH", "k"}), "+OK\r\n");
  EXPECT_EQ(c.call({"SET", "k", "mine"}), "+OK\r\n");  // the watcher's own write counts
  EXPECT_EQ(c.call({"MULTI"}), "+OK\r\n");
  EXPECT_EQ(c.call({"EXEC"}), "*-1\r\n");
}

TEST_P(Commands, ConflictsAreRetriedAndRepliedOnce) {
  backend.fail_next_commits(3);
  EXPECT_EQ(c.call({"INCR", "n"}), ":1\r\n");
  EXPECT_EQ(c.call({"MULTI"}), "+OK\r\n");
  EXPECT_EQ(c.call({"INCR", "n"}), "+QUEUED\r\n");
  EXPECT_EQ(c.call({"INCR", "n"}), "+QUEUED\r\n");
  backend.fail_next_commits(5);
  EXPECT_EQ(c.call({"EXEC"}), "*2\r\n:2\r\n:3\r\n");
  backend.fail_next_commits(1000);
  EXPECT_EQ(c.call({"SET", "x", "1"}),
            "-ERR transaction conflicted 64 times in a row; try again\r\n");
  backend.fail_next_commits(0);
  EXPECT_EQ(c.call({"GET", "x"}), "$-1\r\n");
  EXPECT_EQ(c.call({"GET", "n"}), bulk("3"));
}

TEST_P(Commands, ScanVisitsEveryKeyOnceInOrder) {
  std::set<std::string> keys;
  for (int i = 0; i < 250; ++i) {
    const std::string k = (i % 2 == 0 ? "user:" : "item:") + std::to_string(i);
    keys.insert(k);
    ASSERT_EQ(c.call({"SET", k, "v"}), "+OK\r\n");
  }
  ASSERT_EQ(c.call({"SET", "user:gone", "v", "PX", "1"}), "+OK\r\n");
  env.advance_ms(1);
  for (const char* count : {"1", "7", "1000"}) {
    std::set<std::string> seen;
    std::string cursor = "0";
    for (int round = 0; round < 1000; ++round) {
      // The reply: *2 $n cursor *m ($len key)*
      const std::string reply = c.call({"SCAN", cursor, "COUNT", count});
      ASSERT_EQ(reply.substr(0, 4), "*2\r\n") << reply;
      size_t at = 4;
      const size_t cursor_len = std::stoul(reply.substr(at + 1));
      at = reply.find("\r\n", at) + 2;
      cursor = reply.substr(at, cursor_len);
      at += cursor_len + 2;
      const size_t n = std::stoul(reply.substr(at + 1));
      at = reply.find("\r\n", at) + 2;
      for (size_t i = 0; i < n; ++i) {
        const size_t len = std::stoul(reply.substr(at + 1));
        at = reply.find("\r\n", at) + 2;
        EXPECT_TRUE(seen.insert(reply.substr(at, len)).second);
        at += len + 2;
      }
      if (cursor == "0") break;
    }
    EXPECT_EQ(seen, keys) << "COUNT " << count;
  }
  EXPECT_EQ(c.call({"SCAN", "0", "MATCH", "user:1?", "COUNT", "1000"}),
            "*2\r\n$1\r\n0\r\n*5\r\n" + bulk("user:10") + bulk("user:12") + bulk("user:14") +
                bulk("user:16") + bulk("user:18"));
  EXPECT_EQ(c.call({"SCAN", "0", "MATCH", "*:24[68]", "TYPE", "string", "COUNT", "1000"}),
            "*2\r\n$1\r\n0\r\n*2\r\n" + bulk("user:246") + bulk("user:248"));
  EXPECT_EQ(c.call({"SCAN", "0", "TYPE", "hash", "COUNT", "1000"}), "*2\r\n$1\r\n0\r\n*0\r\n");
  EXPECT_EQ(c.call({"SCAN", "77777"}), "-ERR invalid cursor\r\n");
  EXPECT_EQ(c.call({"SCAN", "x"}), "-ERR invalid cursor\r\n");
  EXPECT_EQ(c.call({"SCAN", "0", "COUNT", "0"}), "-ERR syntax error\r\n");
  EXPECT_EQ(c.call({"SCAN", "0", "MATCH"}), "-ERR syntax error\r\n");
}

TEST_P(Commands, KeyAndValueLimits) {
  const std::string key_ok(kMaxKeyBytes, 'k');
  const std::string key_long(kMaxKeyBytes + 1, 'k');
  const std::string value_ok(kMaxValueBytes, 'v');
  const std::string value_long(kMaxValueBytes + 1, 'v');
  EXPECT_EQ(c.call({"SET", key_ok, value_ok}), "+OK\r\n");
  EXPECT_EQ(c.call({"STRLEN", key_ok}), ":1048576\r\n");
  EXPECT_EQ(c.call({"SET", key_long, "v"}), "-ERR key length must be 1 to 8192 bytes\r\n");
  EXPECT_EQ(c.call({"GET", ""}), "-ERR key length must be 1 to 8192 bytes\r\n");
  EXPECT_EQ(c.call({"MGET", "a", key_long}), "-ERR key length must be 1 to 8192 bytes\r\n");
  const std::string too_big = "-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n";
  EXPECT_EQ(c.call({"SET", "k", value_long}), too_big);
  EXPECT_EQ(c.call({"APPEND", key_ok, "x"}), too_big);
  EXPECT_EQ(c.call({"MSET", "a", "1", "b", value_long}), too_big);
  EXPECT_EQ(c.call({"EXISTS", "a"}), ":0\r\n");
}

TEST_P(Commands, HelloSwitchesToResp3) {
  EXPECT_EQ(c.call({"HELLO", "4"}), "-NOPROTO unsupported protocol version\r\n");
  EXPECT_EQ(c.call({"HELLO", "x"}), "-ERR Protocol version is not an integer or out of range\r\n");
  EXPECT_EQ(c.call({"HELLO", "3", "AUTH", "bob", "pw"}),
            "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
  EXPECT_EQ(c.call({"HELLO", "2", "FOO"}), "-ERR Syntax error in HELLO option 'FOO'\r\n");
  const std::string hello = c.call({"HELLO", "3", "AUTH", "default", "pw", "SETNAME", "me"});
  EXPECT_EQ(hello.substr(0, 4), "%7\r\n") << hello;
  EXPECT_NE(hello.find("proto\r\n:3\r\n"), std::string::npos);
  EXPECT_EQ(c.call({"GET", "none"}), "_\r\n");
  EXPECT_EQ(c.call({"CLIENT", "GETNAME"}), bulk("me"));
  EXPECT_EQ(c.call({"MULTI"}), "+OK\r\n");
  EXPECT_EQ(c.call({"EXEC"}), "*0\r\n");
  EXPECT_EQ(c.call({"INFO", "keyspace"}).substr(0, 1), "=");
  EXPECT_EQ(c.call({"HELLO", "2"}).substr(0, 5), "*14\r\n");
  EXPECT_EQ(c.call({"GET", "none"}), "$-1\r\n");
}

// requirepass: nothing but AUTH, HELLO ... AUTH and QUIT before the password; Redis 7's replies.
TEST_P(Commands, PasswordIsRequiredBeforeAnyCommand) {
  ConnectionOptions options;
  options.session.password = "s3cret";
  TestClient locked(backend, env, options);
  const std::string noauth = "-NOAUTH Authentication required.\r\n";
  const std::string wrongpass =
      "-WRONGPASS invalid username-password pair or user is disabled.\r\n";
  EXPECT_EQ(locked.call({"SET", "k", "v"}), noauth);
  EXPECT_EQ(locked.call({"PING"}), noauth);
  EXPECT_EQ(locked.call({"MULTI"}), noauth);
  EXPECT_EQ(locked.call({"NOSUCH"}).substr(0, 20), "-ERR unknown command");  // lookup first
  EXPECT_EQ(locked.call({"HELLO", "3"}).substr(0, 50),
            "-NOAUTH HELLO must be called with the client alrea");
  EXPECT_EQ(locked.call({"AUTH", "wrong"}), wrongpass);
  EXPECT_EQ(locked.call({"AUTH", "s3cre"}), wrongpass);
  EXPECT_EQ(locked.call({"AUTH", "s3cret!"}), wrongpass);
  EXPECT_EQ(locked.call({"AUTH", "bob", "s3cret"}), wrongpass);
  EXPECT_EQ(locked.call({"HELLO", "3", "AUTH", "default", "no"}), wrongpass);
  EXPECT_EQ(locked.call({"GET", "k"}), noauth);
  EXPECT_EQ(locked.call({"AUTH", "s3cret"}), "+OK\r\n");
  EXPECT_EQ(locked.call({"SET", "k", "v"}), "+OK\r\n");

  TestClient by_hello(backend, env, options);
  EXPECT_EQ(by_hello.call({"HELLO", "2", "AUTH", "default", "s3cret"}).substr(0, 5), "*14\r\n");
  EXPECT_EQ(by_hello.call({"GET", "k"}), bulk("v"));

  TestClient quitter(backend, env, options);
  EXPECT_EQ(quitter.call({"QUIT"}), "+OK\r\n");

  // Without a password: AUTH <password> is an error, the user "default" takes any password.
  EXPECT_EQ(c.call({"AUTH", "x"}).substr(0, 60),
            "-ERR AUTH <password> called without any password configured ");
  EXPECT_EQ(c.call({"AUTH", "default", "x"}), "+OK\r\n");
  EXPECT_EQ(c.call({"AUTH", "a", "b", "c"}), "-ERR syntax error\r\n");
}

TEST_P(Commands, CommandIntrospectionForRedisCli) {
  EXPECT_EQ(c.call({"COMMAND", "COUNT"}), ":32\r\n");
  EXPECT_EQ(c.call({"COMMAND", "COUNT", "x"}),
            "-ERR wrong number of arguments for 'command|count' command\r\n");
  EXPECT_EQ(c.call({"COMMAND", "FOO"}), "-ERR unknown subcommand 'FOO'. Try COMMAND HELP.\r\n");
  const std::string info = c.call({"COMMAND", "INFO", "get", "nosuch"});
  EXPECT_EQ(info.substr(0, 22), "*2\r\n*10\r\n$3\r\nget\r\n:2\r\n") << info;
  EXPECT_NE(info.find("$-1\r\n"), std::string::npos);
  const std::string docs = c.call({"COMMAND", "DOCS", "set"});
  EXPECT_NE(docs.find("summary"), std::string::npos);
  EXPECT_EQ(c.call({"COMMAND"}).substr(0, 5), "*32\r\n");
  EXPECT_EQ(c.call({"CONFIG", "GET", "APPENDONLY", "data*"}),
            "*4\r\n" + bulk("appendonly") + bulk("no") + bulk("databases") + bulk("1"));
  EXPECT_EQ(c.call({"CONFIG", "SET", "save", ""}),
            "-ERR unknown subcommand 'SET'. Try CONFIG HELP.\r\n");
  const std::string inf = c.call({"INFO"});
  EXPECT_NE(inf.find("# Server\r\nredis_version:"), std::string::npos);
  EXPECT_NE(inf.find("# Keyspace"), std::string::npos);
}

TEST_P(Commands, ProtocolErrorRepliesAndCloses) {
  EXPECT_EQ(c.send_raw("*1\r\n$4\r\nPING\r\n*2\r\n$-5\r\n*1\r\n$4\r\nPING\r\n"),
            "+PONG\r\n-ERR Protocol error: invalid bulk length\r\n");
  EXPECT_TRUE(c.conn.should_close());
}

TEST_P(Commands, QuitRepliesAndCloses) {
  EXPECT_EQ(c.send_raw("PING\r\nQUIT\r\nPING\r\n"), "+PONG\r\n+OK\r\n");
  EXPECT_TRUE(c.conn.should_close());
}

// The same pipeline fed in pieces of every size gives the same bytes back.
TEST_P(Commands, PipelineSplitAnywhereGivesTheSameReplies) {
  const std::string script =
      "*3\r\n$3\r\nSET\r\n$1\r\na\r\n$3\r\n100\r\nINCR a\r\nGET a\r\n"
      "*1\r\n$5\r\nMULTI\r\n*2\r\n$4\r\nINCR\r\n$1\r\na\r\nEXEC\r\n*2\r\n$3\r\nDEL\r\n$1\r\na\r\n";
  const std::string expected = "+OK\r\n:101\r\n$3\r\n101\r\n+OK\r\n+QUEUED\r\n*1\r\n:102\r\n:1\r\n";
  for (size_t step = 1; step <= script.size(); ++step) {
    FaultBackend b{GetParam().make()};
    TestClient t{b, env};
    std::string got;
    for (size_t at = 0; at < script.size(); at += step) got += t.send_raw(script.substr(at, step));
    EXPECT_EQ(got, expected) << "step " << step;
  }
}

TEST_P(Commands, OutputBackPressureStopsParsing) {
  ConnectionOptions o;
  o.writer = WriterLimits{4096, 1 << 20};
  TestClient t{backend, env, o};
  ASSERT_EQ(t.call({"SET", "big", std::string(3000, 'x')}), "+OK\r\n");
  std::string pipeline;
  for (int i = 0; i < 10; ++i) pipeline += testing::encode_command({"GET", "big"});
  t.conn.feed(pipeline);
  EXPECT_FALSE(t.conn.wants_input());  // two replies (6 KB) pass the 4 KB soft limit
  EXPECT_TRUE(t.conn.has_work());
  size_t replies = 0;
  for (int round = 0; round < 20 && (t.conn.has_work() || t.conn.pending_output_bytes()); ++round) {
    replies += t.drain().size() / 3009;
    t.conn.process();
  }
  EXPECT_EQ(replies, 10u);
  EXPECT_TRUE(t.conn.wants_input());
}

TEST_P(Commands, OutputOverTheHardLimitCloses) {
  ConnectionOptions o;
  o.writer = WriterLimits{1024, 8192};
  TestClient t{backend, env, o};
  ASSERT_EQ(t.call({"SET", "big", std::string(5000, 'x')}), "+OK\r\n");
  t.conn.feed(testing::encode_command({"MGET", "big", "big"}));
  EXPECT_TRUE(t.conn.must_close_now());
}

TEST_P(Commands, IdleConnectionReleasesItsBuffers) {
  ASSERT_EQ(c.call({"SET", "big", std::string(100000, 'x')}), "+OK\r\n");
  ASSERT_EQ(c.call({"GET", "big"}).size(), 100011u);
  EXPECT_GE(c.conn.buffer_bytes(), 200000u);
  c.conn.release_buffers();
  EXPECT_LT(c.conn.buffer_bytes(), 64u);  // an empty std::string keeps its inline bytes
  EXPECT_EQ(c.call({"STRLEN", "big"}), ":100000\r\n");
  EXPECT_LT(sizeof(Connection), 1024u);
}

TEST_P(Commands, RepliesWaitForDurability) {
  uint64_t durable = 0;
  auto is_durable = [&](uint64_t token) { return token <= durable; };
  c.conn.feed(testing::encode_command({"SET", "a", "1"}) + testing::encode_command({"GET", "a"}));
  EXPECT_EQ(c.conn.sendable(is_durable), "");  // the SET's reply and all behind it wait
  durable = ~uint64_t{0};  // a backend's tokens are its own (the engine's: commit TIDs)
  EXPECT_EQ(c.conn.sendable(is_durable), "+OK\r\n$1\r\n1\r\n");
}

}  // namespace
}  // namespace shoal::resp
