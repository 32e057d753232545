// The connection over a backend that suspends every call (as a cross-shard one does): the
// same replies, byte for byte, as over the inline MemBackend, for pipelined scripts with
// MULTI/EXEC/WATCH, conflicts and QUIT; no input is taken while a request is in flight.
#include <gtest/gtest.h>

#include <algorithm>
#include <coroutine>
#include <cstring>
#include <deque>
#include <string>

#include "src/resp/testing/mem_backend.h"
#include "src/resp/testing/test_client.h"

namespace shoal::resp {
namespace {

using testing::ManualEnv;
using testing::MemBackend;
using testing::MemTxn;

// Parked coroutines, resumed by the test in FIFO order (a loop's ready queue).
struct Parking {
  std::deque<std::coroutine_handle<>> parked;
  uint64_t suspensions = 0;
  auto park() {
    struct Awaiter {
      Parking* p;
      bool await_ready() noexcept { return false; }
      void await_suspend(std::coroutine_handle<> h) {
        ++p->suspensions;
        p->parked.push_back(h);
      }
      void await_resume() noexcept {}
    };
    return Awaiter{this};
  }
};

// MemTxn's semantics, each call suspended once before it runs.
class ParkingTxn final : public KvTxn {
 public:
  ParkingTxn(MemBackend& b, Parking& p) : inner_(b), parking_(p) {}
  void begin() override { inner_.begin(); }
  rt::Task<Status> get(std::string_view key, std::string* value, uint64_t* version) override {
    co_await parking_.park();
    co_return inner_.get_now(key, value, version);
  }
  rt::Task<Status> put(std::string_view key, std::string_view value) override {
    co_await parking_.park();
    co_return inner_.put_now(key, value);
  }
  rt::Task<Status> del(std::string_view key) override {
    co_await parking_.park();
    co_return inner_.del_now(key);
  }
  rt::Task<Status> scan(const ScanRange& range, size_t limit, size_t prefix,
                        std::vector<KeyValue>* out) override {
    co_await parking_.park();
    co_return inner_.scan_now(range, limit, prefix, out);
  }
  rt::Task<Result<CommitInfo>> commit() override {
    co_await parking_.park();
    co_return inner_.commit_now();
  }
  rt::Task<void> abort() override {
    co_await parking_.park();
    co_await inner_.abort();
  }

 private:
  MemTxn inner_;
  Parking& parking_;
};

class ParkingBackend final : public KvBackend {
 public:
  explicit ParkingBackend(Parking& p) : parking_(p) {}
  std::unique_ptr<KvTxn> open() override { return std::make_unique<ParkingTxn>(store, parking_); }
  rt::Task<Result<uint64_t>> count_keys() override {
    co_await parking_.park();
    co_return store.count_keys_now();
  }
  MemBackend store;

 private:
  Parking& parking_;
};

// Drives a connection as a server does: read while it wants input, process, and await a
// suspended request from a task; returns every reply byte.
void serve(Connection& conn, Parking& parking, std::string_view input, size_t chunk,
           std::string& replies) {
  size_t at = 0;
  rt::Task<void> finisher;
  for (int rounds = 0; rounds < 100000; ++rounds) {
    if (finisher.valid()) {
      // One parked call resumed per round, the output sent in between: a suspended request's
      // partial reply must not leave (a conflict takes it back, which would then assert).
      if (finisher.done()) {
        finisher = rt::Task<void>();
      } else {
        ASSERT_FALSE(parking.parked.empty());
        auto h = parking.parked.front();
        parking.parked.pop_front();
        h.resume();
      }
    } else if (conn.in_flight()) {
      EXPECT_FALSE(conn.wants_input());
      finisher = conn.finish_in_flight();
      EXPECT_FALSE(finisher.start_inline());  // the request is parked: the finisher waits
    } else if (conn.has_work()) {
      conn.process();
    } else if (at < input.size() && conn.wants_input()) {
      auto space = conn.input_space();
      const size_t n = std::min({space.size(), input.size() - at, chunk});
      std::memcpy(space.data(), input.data() + at, n);
      conn.commit_input(n);
      at += n;
    } else {
      break;
    }
    const std::string_view out = conn.sendable();
    replies.append(out);
    conn.consume_output(out.size());
  }
}

std::string serve(Connection& conn, Parking& parking, std::string_view input, size_t chunk) {
  std::string replies;
  serve(conn, parking, input, chunk, replies);
  return replies;
}

std::string script() {
  using testing::encode_command;
  std::string s;
  s += encode_command({"SET", "a", "1"});
  s += encode_command({"INCR", "a"});
  s += encode_command({"MSET", "b", "x", "c", "y"});
  s += encode_command({"MGET", "a", "b", "none"});
  s += encode_command({"WATCH", "a", "b"});
  s += encode_command({"MULTI"});
  s += encode_command({"INCRBY", "a", "10"});
  s += encode_command({"APPEND", "b", "zz"});
  s += encode_command({"EXEC"});
  s += encode_command({"SCAN", "0", "COUNT", "2"});
  s += encode_command({"SCAN", "1"});
  s += encode_command({"DEL", "c", "none"});
  s += encode_command({"DBSIZE"});
  s += encode_command({"GETDEL", "b"});
  s += encode_command({"SET", "e", "1", "NX", "GET"});
  s += encode_command({"PING"});
  s += encode_command({"QUIT"});
  s += encode_command({"GET", "a"});  // after QUIT: never answered
  return s;
}

TEST(ConnectionAsync, SuspendingBackendRepliesAsInline) {
  ManualEnv env;
  MemBackend inline_backend;
  testing::TestClient reference(inline_backend, env);
  const std::string expected = reference.send_raw(script());
  ASSERT_NE(expected.find("*2\r\n:12\r\n:3\r\n"), std::string::npos) << expected;
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{64}, size_t{100000}}) {
    Parking parking;
    ParkingBackend backend(parking);
    Connection conn(backend, env);
    EXPECT_EQ(serve(conn, parking, script(), chunk), expected) << "chunk " << chunk;
    EXPECT_TRUE(conn.should_close());
    EXPECT_GT(parking.suspensions, 20u);
  }
}

TEST(ConnectionAsync, ConflictRetriesAcrossSuspensions) {
  ManualEnv env;
  Parking parking;
  ParkingBackend backend(parking);
  backend.store.fail_next_commits(3);  // three commits fail: each retried after suspending
  Connection conn(backend, env);
  const std::string in = testing::encode_command({"INCR", "n"}) +
                         testing::encode_command({"MULTI"}) +
                         testing::encode_command({"INCR", "n"}) + testing::encode_command({"EXEC"});
  EXPECT_EQ(serve(conn, parking, in, 1000), ":1\r\n+OK\r\n+QUEUED\r\n*1\r\n:2\r\n");
  EXPECT_EQ(backend.store.commits(), 2u);
}

// A connection destroyed while a request is parked destroys its coroutine frames (the
// backend's parked handle is dropped unresumed, as a server drops a closed client's).
TEST(ConnectionAsync, DestroyedWhileInFlight) {
  ManualEnv env;
  Parking parking;
  ParkingBackend backend(parking);
  {
    Connection conn(backend, env);
    const std::string in = testing::encode_command({"GET", "k"});
    auto space = conn.input_space();
    std::memcpy(space.data(), in.data(), in.size());
    conn.commit_input(in.size());
    conn.process();
    ASSERT_TRUE(conn.in_flight());
    EXPECT_FALSE(conn.wants_input());
    EXPECT_FALSE(conn.has_work());
  }
  parking.parked.clear();
}

}  // namespace
}  // namespace shoal::resp
