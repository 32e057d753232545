// The client library (include/shoal/client.h) and the client protocol against real
// `shoal server` processes (SHOAL_BINARY): two shards split at "m", each with a client port
// from the config. Cross-shard transactions are atomic (concurrent transfers through both
// servers conserve the total), a conflicting interactive transaction is Aborted and run()
// retries it, scans across the split are ordered, commits are speculative without
// replication, a dead server gives Unavailable; raw sockets send a bad magic, a wrong
// version, an oversized, a truncated and a malformed frame and an unknown opcode, and the
// servers keep serving other clients; `shoal kv` reads and writes through the library.
// ClientReplicated: `shoal cluster up` of 2 shards x 2 replicas, where a durable commit is
// durable and a speculative one is not; with the watermark exchange ticking once a minute,
// durable commits on one shard still come back at once (issue 15).
// ClientAuth: `shoal cluster up` of 1 shard x 2 replicas (127.0.0.2 and 127.0.0.3) with a
// cluster secret and a client password (issue 17 item 4): every listener of both processes
// (data, replication, Redis, client, metrics) is bound to its replica's host only (from
// /proc/<pid>/fd and /proc/net/tcp{,6}); the client port refuses a wrong password, none and
// a version 1 hello (PermissionDenied, then closed, the request behind it not run) and serves
// the right one, which connect_cluster and `shoal kv` read from the config or --password-file;
// the Redis port asks the same password.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "shoal/client.h"
#include "src/client/protocol.h"
#include "src/net/auth.h"
#include "src/server/testing/processes.h"

extern char** environ;

namespace shoal::server {
namespace client_server_test {

namespace fs = std::filesystem;
namespace proto = client::proto;

using test_processes::dial;
using test_processes::slurp;
using test_processes::spawn;

void send_bytes(int fd, std::string_view bytes) {
  ASSERT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
}

// One reply frame from a raw socket; code 255 when the connection closed first.
struct RawReply {
  uint64_t id = 0;
  uint8_t code = 255;
  std::string body;
  std::string message() const {
    proto::FrameReader r(body);
    return std::string(r.str());
  }
};

RawReply read_frame(int fd, std::string* buffered) {
  RawReply out;
  char buf[4096];
  for (int i = 0; i < 10'000; ++i) {  // bounded: each pass reads or returns
    auto f = proto::next_frame(*buffered, proto::kMaxReplyFrameBytes);
    if (f.ok() && f->total_bytes > 0) {
      out.id = f->id;
      out.code = f->op_or_code;
      out.body = std::string(f->body);
      buffered->erase(0, f->total_bytes);
      return out;
    }
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return out;
    buffered->append(buf, static_cast<size_t>(n));
  }
  return out;
}

// True when the server closed the connection (EOF) within 10 s.
bool closed_by_server(int fd, std::string* buffered) {
  char buf[4096];
  for (int i = 0; i < 1000; ++i) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0) return true;
    if (n < 0) return errno == ECONNRESET;
    buffered->append(buf, static_cast<size_t>(n));
  }
  return false;
}

std::string frame(uint64_t id, uint8_t op, const std::string& body) {
  std::string out;
  proto::FrameWriter w(&out);
  w.begin(id, op);
  out.append(body);
  (void)w.end();
  return out;
}

std::string get_one_body(std::string_view key) {
  std::string body;
  proto::FrameWriter w(&body);
  w.u8(static_cast<uint8_t>(proto::Durability::kSpeculative));
  w.str(key);
  return body;
}

struct Shell {
  int exit_code = -1;
  std::string output;
};

Shell shell(const std::string& cmd) {
  Shell s;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) s.output.append(buf, n);
  const int status = pclose(p);
  s.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return s;
}

class ClientServer : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("shoal-client-{}", getpid());
    fs::create_directories(dir_);
    config_ = (dir_ / "c.toml").string();
    ports_[0] = test_processes::free_low_ports(2);
    ASSERT_NE(ports_[0], 0) << "no two free ports below the ephemeral range";
    ports_[1] = static_cast<uint16_t>(ports_[0] + 1);
    write_config();
    // Client ports picked by the servers (--client-port 0: a port chosen here could be taken
    // by the servers' own outgoing connections first), then written into the config for
    // connect_cluster and `shoal kv`.
    for (int s = 0; s < 2; ++s) {
      logs_[s] = (dir_ / fmt::format("s{}.log", s)).string();
      pids_[s] = spawn({SHOAL_BINARY, "server", "--config", config_, "--shard", std::to_string(s),
                        "--keys-per-partition", "1000", "--client-port", "0"},
                       logs_[s]);
    }
    for (int s = 0; s < 2; ++s) {
      client_ports_[s] = wait_for_port(logs_[s]);
      ASSERT_NE(client_ports_[s], 0) << slurp(logs_[s]);
    }
    write_config();
  }
  void write_config() {
    auto client_port = [&](int s) {
      return client_ports_[s] == 0 ? std::string()
                                   : fmt::format("client_port = {}\n", client_ports_[s]);
    };
    std::ofstream(config_) << fmt::format(
        "[cluster]\nname = \"client-{}\"\ntransport = \"tcp\"\nworkers = 1\nreplicas = 1\n"
        "kv_split_keys = [\"m\"]\n\n[[region]]\nname = \"r0\"\n\n"
        "[[shard]]\nid = 0\npartition_lo = 1\npartition_hi = 2\n[[shard.replica]]\n"
        "region = \"r0\"\nhost = \"127.0.0.1\"\nport = {}\n{}\n"
        "[[shard]]\nid = 1\npartition_lo = 2\npartition_hi = 3\n[[shard.replica]]\n"
        "region = \"r0\"\nhost = \"127.0.0.1\"\nport = {}\n{}",
        getpid(), ports_[0], client_port(0), ports_[1], client_port(1));
  }
  void TearDown() override { test_processes::stop_servers(pids_, logs_, dir_, HasFailure()); }
  // The client port a server printed ("client protocol on 127.0.0.1:P"), waiting up to 60 s
  // for it and for "ready"; 0 when it did not come.
  static uint16_t wait_for_port(const std::string& log) {
    return test_processes::wait_for_printed_port(log, "client protocol on 127.0.0.1:");
  }
  std::unique_ptr<Client> connect(int shard) {
    auto c = Client::connect("127.0.0.1", client_ports_[shard]);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    return c.ok() ? std::move(*c) : nullptr;
  }
  // A raw connection after a good hello (its reply consumed).
  int raw_after_hello(int shard, std::string* buffered) {
    const int fd = dial(client_ports_[shard]);
    EXPECT_GE(fd, 0);
    send_bytes(fd, proto::hello());
    const RawReply r = read_frame(fd, buffered);
    EXPECT_EQ(r.code, static_cast<uint8_t>(Code::kOk));
    return fd;
  }
  // Another client is still served by `shard`.
  void expect_served(int shard) {
    auto c = connect(shard);
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(c->put("served", "yes").ok());
    std::string v;
    ASSERT_TRUE(c->get("served", &v).ok());
    EXPECT_EQ(v, "yes");
  }

  fs::path dir_;
  std::string config_;
  pid_t pids_[2] = {-1, -1};
  std::string logs_[2];
  uint16_t ports_[2] = {0, 0};
  uint16_t client_ports_[2] = {0, 0};
};

TEST_F(ClientServer, SingleKeyOperationsOnBothShards) {
  auto c = connect(0);
  ASSERT_NE(c, nullptr);
  for (const char* key : {"apple", "zebra"}) {  // shard 0 and shard 1, through shard 0
    auto put = c->put(key, std::string("v-") + key);
    ASSERT_TRUE(put.ok()) << put.status().to_string();
    EXPECT_FALSE(put->durable);  // no replication: every commit is speculative
  }
  auto other = connect(1);
  std::string v;
  ASSERT_TRUE(other->get("apple", &v).ok());
  EXPECT_EQ(v, "v-apple");
  ASSERT_TRUE(other->get("zebra", &v).ok());
  EXPECT_EQ(v, "v-zebra");
  EXPECT_TRUE(other->get("nokey", &v).is_not_found());
  ASSERT_TRUE(c->del("zebra").ok());
  EXPECT_TRUE(other->get("zebra", &v).is_not_found());
  ASSERT_TRUE(c->put("empty", "").ok());
  ASSERT_TRUE(c->get("empty", &v).ok());
  EXPECT_EQ(v, "");
  // The byte tables' limits, refused with InvalidArgument; the connection goes on.
  EXPECT_EQ(c->put("", "x").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(c->put(std::string(8193, 'k'), "x").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(c->put("big", std::string((1 << 20) + 1, 'v')).status().code(), Code::kInvalidArgument);
  const std::string mib(1 << 20, 'v');
  ASSERT_TRUE(c->put(std::string(8192, 'z'), mib).ok());
  ASSERT_TRUE(other->get(std::string(8192, 'z'), &v).ok());
  EXPECT_EQ(v, mib);
}

// Pipelined single-key gets: results in the order sent, across both shards, absent keys as
// NotFound, the bound on outstanding gets, and no other call while any is outstanding. Long
// keys with large values: a megabyte of requests against megabytes of replies, which the
// library reads while it still sends (else both sides could wait on full sockets).
TEST_F(ClientServer, PipelinedGets) {
  auto c = connect(0);
  ASSERT_NE(c, nullptr);
  const std::string big_key(8192, 'b');  // shard 0
  const std::string big_value(64 << 10, 'v');
  ASSERT_TRUE(c->put("apple", "red").ok());
  ASSERT_TRUE(c->put("zebra", "striped").ok());  // shard 1, through shard 0
  ASSERT_TRUE(c->put(big_key, big_value).ok());
  std::string v;
  EXPECT_EQ(c->receive_get(&v).code(), Code::kInvalidArgument);  // none outstanding
  for (uint32_t i = 0; i < Client::kMaxPipelined; ++i) {
    const char* small[] = {"apple", "zebra", "nokey"};
    ASSERT_TRUE(c->send_get(i % 2 == 0 ? std::string_view(big_key) : small[i % 3]).ok()) << i;
  }
  EXPECT_EQ(c->outstanding(), Client::kMaxPipelined);
  EXPECT_EQ(c->send_get("apple").code(), Code::kInvalidArgument);  // over the bound
  EXPECT_EQ(c->get("apple", &v).code(), Code::kInvalidArgument);   // gets outstanding
  EXPECT_EQ(c->begin().status().code(), Code::kInvalidArgument);
  EXPECT_EQ(c->send_get("").code(), Code::kInvalidArgument);  // a key under the limits
  ASSERT_TRUE(c->flush().ok());
  for (uint32_t i = 0; i < Client::kMaxPipelined; ++i) {
    const Status s = c->receive_get(&v);
    if (i % 2 == 0) {
      ASSERT_TRUE(s.ok()) << i << ": " << s.to_string();
      ASSERT_EQ(v, big_value) << i;
    } else if (i % 3 == 2) {
      ASSERT_TRUE(s.is_not_found()) << i << ": " << s.to_string();
    } else {
      ASSERT_TRUE(s.ok()) << i << ": " << s.to_string();
      ASSERT_EQ(v, i % 3 == 0 ? "red" : "striped") << i;
    }
  }
  EXPECT_EQ(c->outstanding(), 0u);
  EXPECT_EQ(c->receive_get(&v).code(), Code::kInvalidArgument);
  // The client goes on as before, and so does a transaction.
  ASSERT_TRUE(c->get("zebra", &v).ok());
  EXPECT_EQ(v, "striped");
  ASSERT_TRUE(c->send_get("apple").ok());
  ASSERT_TRUE(c->receive_get(&v).ok());  // receive_get() sends what is queued
  EXPECT_EQ(v, "red");
  auto t = c->begin();
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(c->send_get("apple").code(), Code::kInvalidArgument);  // a transaction is open
  ASSERT_TRUE(t->get("apple", &v).ok());
  ASSERT_TRUE(t->commit().ok());
}

// Transfers between a key of each shard, through both servers at once, with a reader
// checking the total in its own transactions: every committed transaction is all or nothing.
TEST_F(ClientServer, CrossShardTransactionsAreAtomic) {
  auto setup = connect(0);
  ASSERT_NE(setup, nullptr);
  ASSERT_TRUE(setup->put("acct-a", "1000").ok());
  ASSERT_TRUE(setup->put("zacct-b", "1000").ok());
  // An aborted transaction installs nothing.
  {
    auto t = setup->begin();
    ASSERT_TRUE(t.ok());
    ASSERT_TRUE(t->put("acct-a", "0").ok());
    ASSERT_TRUE(t->put("zacct-b", "0").ok());
    ASSERT_TRUE(t->abort().ok());
  }
  std::atomic<int> bad_totals{0}, failures{0};
  std::atomic<bool> stop{false};
  auto transfer = [&](int shard, int delta) {
    auto c = connect(shard);
    for (int i = 0; i < 100 && c != nullptr; ++i) {
      Status s = c->run([&](Transaction& t) -> Status {
        std::string a, b;
        SHOAL_TRY(t.get("acct-a", &a));
        SHOAL_TRY(t.get("zacct-b", &b));
        SHOAL_TRY(t.put("acct-a", std::to_string(std::stoi(a) - delta)));
        return t.put("zacct-b", std::to_string(std::stoi(b) + delta));
      });
      if (!s.ok()) ++failures;
    }
  };
  std::thread reader([&] {
    auto c = connect(1);
    while (c != nullptr && !stop.load()) {
      bool torn = false;  // an attempt's reads count only once its commit validated them
      Status s = c->run([&](Transaction& t) -> Status {
        std::string a, b;
        SHOAL_TRY(t.get("acct-a", &a));
        SHOAL_TRY(t.get("zacct-b", &b));
        torn = std::stoi(a) + std::stoi(b) != 2000;
        return Status::Ok();
      });
      if (!s.ok()) ++failures;
      if (s.ok() && torn) ++bad_totals;
    }
  });
  std::thread t0(transfer, 0, 3), t1(transfer, 1, 5);
  t0.join();
  t1.join();
  stop.store(true);
  reader.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(bad_totals.load(), 0);
  std::string a, b;
  ASSERT_TRUE(setup->get("acct-a", &a).ok());
  ASSERT_TRUE(setup->get("zacct-b", &b).ok());
  EXPECT_EQ(a, std::to_string(1000 - 300 - 500));
  EXPECT_EQ(b, std::to_string(1000 + 300 + 500));
}

TEST_F(ClientServer, ConflictIsAbortedAndRunRetriesIt) {
  auto c = connect(0);
  auto other = connect(1);
  ASSERT_TRUE(c->put("zcount", "1").ok());
  {  // read, then another client writes the key, then the commit fails validation
    auto t = c->begin();
    ASSERT_TRUE(t.ok());
    std::string v;
    ASSERT_TRUE(t->get("zcount", &v).ok());
    ASSERT_TRUE(other->put("zcount", "100").ok());
    ASSERT_TRUE(t->put("zcount", "2").ok());
    auto r = t->commit();
    EXPECT_TRUE(r.status().is_aborted()) << r.status().to_string();
    EXPECT_FALSE(t->open());
  }
  int attempts = 0;
  Status s = c->run([&](Transaction& t) -> Status {
    ++attempts;
    std::string v;
    SHOAL_TRY(t.get("zcount", &v));
    if (attempts == 1) {  // a conflicting write between our read and our commit
      EXPECT_TRUE(other->put("zcount", "200").ok());
    }
    return t.put("zcount", std::to_string(std::stoi(v) + 1));
  });
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(attempts, 2);
  std::string v;
  ASSERT_TRUE(other->get("zcount", &v).ok());
  EXPECT_EQ(v, "201");
  // fn's own error is returned, not retried, and nothing of it is installed.
  s = c->run([&](Transaction& t) -> Status {
    SHOAL_TRY(t.put("zcount", "0"));
    return Status::InvalidArgument("changed my mind");
  });
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  ASSERT_TRUE(other->get("zcount", &v).ok());
  EXPECT_EQ(v, "201");
}

TEST_F(ClientServer, ScanAcrossTheSplitIsOrdered) {
  auto c = connect(1);
  const std::vector<std::string> keys = {"a", "b1", "b2", "l", "m", "m1", "q", "zz"};
  for (auto it = keys.rbegin(); it != keys.rend(); ++it) ASSERT_TRUE(c->put(*it, "v" + *it).ok());
  std::vector<KeyValue> got;
  ASSERT_TRUE(c->run([&](Transaction& t) {
                 got.clear();
                 return t.scan("", "", 100, &got);
               }).ok());
  ASSERT_EQ(got.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(got[i].key, keys[i]);
    EXPECT_EQ(got[i].value, "v" + keys[i]);
  }
  ASSERT_TRUE(c->run([&](Transaction& t) {
                 got.clear();
                 return t.scan("b2", "q", 100, &got);
               }).ok());
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].key, "b2");
  EXPECT_EQ(got[3].key, "m1");
  ASSERT_TRUE(c->run([&](Transaction& t) {
                 got.clear();
                 return t.scan("l", "", 3, &got);
               }).ok());
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[2].key, "m1");
  // Large values: replies stop at their byte budget and the library goes on.
  const std::string big(600 << 10, 'x');
  for (const char* k : {"big1", "big2", "big3", "nbig1", "nbig2"}) ASSERT_TRUE(c->put(k, big).ok());
  ASSERT_TRUE(c->run([&](Transaction& t) {
                 got.clear();
                 return t.scan("big", "o", 100, &got);
               }).ok());
  std::vector<std::string> names;
  for (const KeyValue& e : got) names.push_back(e.key);
  EXPECT_EQ(names,
            (std::vector<std::string>{"big1", "big2", "big3", "l", "m", "m1", "nbig1", "nbig2"}));
  EXPECT_TRUE(got[0].value == big) << got[0].value.size();  // not printed: 600 KiB
  EXPECT_TRUE(got[7].value == big) << got[7].value.size();
}

TEST_F(ClientServer, TransactionReadsItsOwnWritesAndSpeculativeCommit) {
  auto c = connect(0);
  auto t = c->begin();
  ASSERT_TRUE(t.ok());
  std::string v;
  EXPECT_TRUE(t->get("own", &v).is_not_found());  // NotFound leaves it open
  ASSERT_TRUE(t->put("own", "1").ok());
  ASSERT_TRUE(t->put("zown", "2").ok());
  ASSERT_TRUE(t->get("own", &v).ok());
  EXPECT_EQ(v, "1");
  EXPECT_EQ(t->put("", "x").code(), Code::kInvalidArgument);  // refused; still open
  ASSERT_TRUE(t->del("own").ok());
  EXPECT_TRUE(t->get("own", &v).is_not_found());
  auto r = t->commit(Durability::kSpeculative);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->durable);
  EXPECT_EQ(t->put("after", "x").code(), Code::kInvalidArgument);  // ended
  ASSERT_TRUE(c->get("zown", &v).ok());
  EXPECT_EQ(v, "2");
  EXPECT_TRUE(c->get("own", &v).is_not_found());
  auto second = c->begin();
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(c->begin().status().code(), Code::kInvalidArgument);  // one at a time
}

TEST_F(ClientServer, DeadServerIsUnavailable) {
  auto c = connect(1);
  ASSERT_TRUE(c->put("zz", "1").ok());
  kill(pids_[1], SIGKILL);
  waitpid(pids_[1], nullptr, 0);
  pids_[1] = -1;
  std::string v;
  Status s = c->get("zz", &v);
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.to_string();
  EXPECT_FALSE(c->connected());
  EXPECT_EQ(c->get("zz", &v).code(), Code::kUnavailable);
  auto again = Client::connect("127.0.0.1", client_ports_[1]);
  EXPECT_EQ(again.status().code(), Code::kUnavailable) << again.status().to_string();
  // connect_cluster finds the live server.
  auto any = Client::connect_cluster(config_);
  ASSERT_TRUE(any.ok()) << any.status().to_string();
  EXPECT_EQ((*any)->server(), fmt::format("127.0.0.1:{}", client_ports_[0]));
}

TEST_F(ClientServer, BadHellosAreAnsweredAndClosed) {
  std::string buffered;
  int fd = dial(client_ports_[0]);
  send_bytes(fd, "GET / HTTP/1.1\r\n\r\n");
  RawReply r = read_frame(fd, &buffered);
  EXPECT_EQ(r.code, static_cast<uint8_t>(Code::kInvalidArgument));
  EXPECT_NE(r.message().find("bad magic"), std::string::npos) << r.message();
  EXPECT_TRUE(closed_by_server(fd, &buffered));
  close(fd);
  buffered.clear();
  fd = dial(client_ports_[0]);
  send_bytes(fd, proto::hello(7));
  r = read_frame(fd, &buffered);
  EXPECT_EQ(r.code, static_cast<uint8_t>(Code::kInvalidArgument));
  EXPECT_NE(r.message().find("unsupported client protocol version 7 (this server speaks 1 to 2)"),
            std::string::npos)
      << r.message();
  EXPECT_TRUE(closed_by_server(fd, &buffered));
  close(fd);
  expect_served(0);
}

TEST_F(ClientServer, BadFramesAreAnsweredOrClosed) {
  std::string buffered;
  // Unknown opcode: answered with its id; the connection goes on.
  int fd = raw_after_hello(0, &buffered);
  send_bytes(fd, frame(41, 99, "whatever") + frame(42, 8, get_one_body("nokey")));
  RawReply r = read_frame(fd, &buffered);
  EXPECT_EQ(r.id, 41u);
  EXPECT_EQ(r.code, static_cast<uint8_t>(Code::kInvalidArgument));
  EXPECT_EQ(r.message(), "unknown opcode 99");
  r = read_frame(fd, &buffered);
  EXPECT_EQ(r.id, 42u);
  EXPECT_EQ(r.code, static_cast<uint8_t>(Code::kNotFound));
  // A get outside a transaction is refused; still on.
  send_bytes(fd, frame(43, static_cast<uint8_t>(proto::Op::kGet), std::string("\x01\0\0\0k", 5)));
  r = read_frame(fd, &buffered);
  EXPECT_EQ(r.code, static_cast<uint8_t>(Code::kInvalidArgument));
  EXPECT_NE(r.message().find("no transaction is open"), std::string::npos) << r.message();
  // Malformed body (a key longer than its frame): answered, then closed.
  send_bytes(
      fd, frame(44, static_cast<uint8_t>(proto::Op::kGetOne), std::string("\x01\xff\0\0\0k", 6)));
  r = read_frame(fd, &buffered);
  EXPECT_EQ(r.id, 44u);
  EXPECT_EQ(r.code, static_cast<uint8_t>(Code::kInvalidArgument));
  EXPECT_NE(r.message().find("malformed single-key get"), std::string::npos) << r.message();
  EXPECT_TRUE(closed_by_server(fd, &buffered));
  close(fd);
  // Oversized frame: answered (id 0), then closed, before its bytes arrive.
  buffered.clear();
  fd = raw_after_hello(0, &buffered);
  const uint32_t huge = 64u << 20;
  send_bytes(fd, std::string_view(reinterpret_cast<const char*>(&huge), 4));
  r = read_frame(fd, &buffered);
  EXPECT_EQ(r.id, 0u);
  EXPECT_EQ(r.code, static_cast<uint8_t>(Code::kInvalidArgument));
  EXPECT_NE(r.message().find("exceeds the maximum"), std::string::npos) << r.message();
  EXPECT_TRUE(closed_by_server(fd, &buffered));
  close(fd);
  // Truncated frame: the peer stops mid-frame; the server closes without a reply.
  buffered.clear();
  fd = raw_after_hello(1, &buffered);
  const std::string whole = frame(45, static_cast<uint8_t>(proto::Op::kGetOne), get_one_body("a"));
  send_bytes(fd, std::string_view(whole).substr(0, whole.size() - 2));
  shutdown(fd, SHUT_WR);
  EXPECT_TRUE(closed_by_server(fd, &buffered));
  EXPECT_TRUE(buffered.empty());
  close(fd);
  // Binary noise after a good hello.
  buffered.clear();
  fd = raw_after_hello(1, &buffered);
  std::string noise(3000, '\0');
  for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<char>((i * 131 + 7) % 251);
  send_bytes(fd, noise);
  r = read_frame(fd, &buffered);
  EXPECT_NE(r.code, static_cast<uint8_t>(Code::kOk));
  close(fd);
  expect_served(0);
  expect_served(1);
}

// A client that goes away mid-transaction: nothing of it is installed, and its keys are
// free for others at once.
TEST_F(ClientServer, DisconnectMidTransactionInstallsNothing) {
  std::string buffered;
  const int fd = raw_after_hello(0, &buffered);
  std::string put_body;
  proto::FrameWriter w(&put_body);
  w.str("zheld");
  w.str("orphan");
  std::string get_body;
  proto::FrameWriter(&get_body).str("held");
  send_bytes(fd, frame(1, static_cast<uint8_t>(proto::Op::kBegin), "") +
                     frame(2, static_cast<uint8_t>(proto::Op::kGet), get_body) +
                     frame(3, static_cast<uint8_t>(proto::Op::kPut), put_body));
  for (uint64_t id = 1; id <= 3; ++id) EXPECT_EQ(read_frame(fd, &buffered).id, id);
  close(fd);
  auto c = connect(1);
  std::string v;
  EXPECT_TRUE(c->get("zheld", &v).is_not_found());
  Status s = c->run([&](Transaction& t) -> Status {
    SHOAL_TRY(t.put("held", "mine"));
    return t.put("zheld", "mine");
  });
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_TRUE(c->get("zheld", &v).ok());
  EXPECT_EQ(v, "mine");
}

TEST_F(ClientServer, KvCommandLine) {
  const std::string kv = fmt::format("{} kv", SHOAL_BINARY);
  Shell o = shell(fmt::format("{} put apple red --cluster {}", kv, config_));
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(o.output, "OK (speculative)\n");
  o = shell(fmt::format("{} put zebra striped --cluster {}", kv, config_));
  EXPECT_EQ(o.exit_code, 0) << o.output;
  o = shell(fmt::format("{} get zebra --cluster {}", kv, config_));
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(o.output, "striped\n");
  o = shell(fmt::format("{} scan --cluster {}", kv, config_));
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(o.output, "apple\tred\nzebra\tstriped\n");
  o = shell(fmt::format("{} del apple --cluster {}", kv, config_));
  EXPECT_EQ(o.exit_code, 0) << o.output;
  o = shell(fmt::format("{} get apple --cluster {}", kv, config_));
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_EQ(o.output, "");
  o = shell(fmt::format("{} get '' --cluster {}", kv, config_));
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.output, "shoal: error: InvalidArgument: key of 0 bytes: keys are 1 to 8192 bytes\n");
  kill(pids_[0], SIGKILL);
  kill(pids_[1], SIGKILL);
  for (pid_t& pid : pids_) {
    waitpid(pid, nullptr, 0);
    pid = -1;
  }
  o = shell(fmt::format("{} get zebra --cluster {}", kv, config_));
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.output.find("shoal: error: Unavailable: no server of cluster"), std::string::npos)
      << o.output;
}

// A replicated cluster (`shoal cluster up`, 2 shards x 2 replicas): a durable commit returns
// durable, a speculative one does not; both are visible.
class ClientReplicated : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("shoal-client-repl-{}", getpid());
    fs::create_directories(dir_);
    config_ = (dir_ / "c.toml").string();
    // Below the ephemeral range: a process dialing out must not take a port bound later
    // (a leader's replication port, port + 1).
    uint16_t port = test_processes::free_low_ports(12);
    ASSERT_NE(port, 0) << "no 12 free ports below the ephemeral range";
    std::string toml =
        "[cluster]\nname = \"client-repl\"\ntransport = \"tcp\"\nworkers = 1\nreplicas = 2\n"
        "kv_split_keys = [\"m\"]\n\n[[region]]\nname = \"r0\"\n\n[[region]]\nname = \"r1\"\n";
    for (int s = 0; s < 2; ++s) {
      toml += fmt::format("\n[[shard]]\nid = {}\npartition_lo = {}\npartition_hi = {}\n", s, s + 1,
                          s + 2);
      for (int r = 0; r < 2; ++r) {
        toml += fmt::format(
            "[[shard.replica]]\nregion = \"r{}\"\nhost = \"127.0.0.1\"\nport = {}\n"
            "client_port = {}\n",
            r, port, port + 2);
        if (s == 0 && r == 0) shard0_client_port_ = static_cast<uint16_t>(port + 2);
        port = static_cast<uint16_t>(port + 3);
      }
    }
    std::ofstream(config_) << toml;
    Shell up = cluster("up", "--keys-per-partition 1000");
    ASSERT_EQ(up.exit_code, 0) << up.output;
  }
  void TearDown() override {
    Shell down = cluster("down", "");
    EXPECT_EQ(down.exit_code, 0) << down.output;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_ / "run", ec)) {
      if (HasFailure() && e.path().extension() == ".log") {
        std::printf("--- %s:\n%s\n", e.path().c_str(), slurp(e.path().string()).c_str());
      }
    }
    fs::remove_all(dir_, ec);
  }
  Shell cluster(const std::string& verb, const std::string& extra) {
    return shell(fmt::format("{} cluster {} --config {} --run-dir {} {}", SHOAL_BINARY, verb,
                             config_, (dir_ / "run").string(), extra));
  }

  fs::path dir_;
  std::string config_;
  uint16_t shard0_client_port_ = 0;  // shard 0's leader's client port
};

// The same cluster with the workers' watermark exchange ticking once a minute
// (SHOAL_WATERMARK_EXCHANGE_PERIOD_US, inherited by the servers `cluster up` starts).
class ClientReplicatedSlowExchange : public ClientReplicated {
 protected:
  void SetUp() override {
    ASSERT_EQ(setenv("SHOAL_WATERMARK_EXCHANGE_PERIOD_US", "60000000", 1), 0);
    ClientReplicated::SetUp();
    unsetenv("SHOAL_WATERMARK_EXCHANGE_PERIOD_US");
  }
};

// Issue 15: a durable reply does not wait for the exchange's tick. The replication leader's
// chosen callback raises the workers' own shard entry at once (ShardServer::entries_chosen),
// so 20 durable puts on one shard through its own server, one after another, come back
// durable in milliseconds each; waiting for the tick, the first alone would take up to a
// minute. (Through the other shard's server, its coordinator would learn our shard's entry
// from the exchange only: a minute.)
TEST_F(ClientReplicatedSlowExchange, DurableRepliesDoNotWaitForTheTick) {
  auto c = Client::connect("127.0.0.1", shard0_client_port_);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    auto put = (*c)->put("apple", std::to_string(i));  // shard 0 only
    ASSERT_TRUE(put.ok()) << i << ": " << put.status().to_string();
    EXPECT_TRUE(put->durable);
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  EXPECT_LT(ms, 10'000) << "20 durable puts took " << ms << " ms";
  std::string v;
  ASSERT_TRUE((*c)->get("apple", &v).ok());
  EXPECT_EQ(v, "19");
}

TEST_F(ClientReplicated, DurableAndSpeculativeCommits) {
  auto c = Client::connect_cluster(config_);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto durable = (*c)->put("apple", "1");
  ASSERT_TRUE(durable.ok()) << durable.status().to_string();
  EXPECT_TRUE(durable->durable);
  auto speculative = (*c)->put("zebra", "2", Durability::kSpeculative);
  ASSERT_TRUE(speculative.ok()) << speculative.status().to_string();
  EXPECT_FALSE(speculative->durable);
  CommitResult how;
  Status s = (*c)->run(
      [](Transaction& t) -> Status {
        std::string a, z;
        SHOAL_TRY(t.get("apple", &a));
        SHOAL_TRY(t.get("zebra", &z));
        SHOAL_TRY(t.put("apple", z));
        return t.put("zebra", a);
      },
      {}, &how);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(how.durable);
  std::string v;
  ASSERT_TRUE((*c)->get("apple", &v).ok());
  EXPECT_EQ(v, "2");
  ASSERT_TRUE((*c)->get("zebra", &v, Durability::kSpeculative).ok());
  EXPECT_EQ(v, "1");
}

constexpr const char* kHosts[2] = {"127.0.0.2", "127.0.0.3"};
constexpr const char* kPassword = "open sesame";

struct Listening {
  std::string address;  // "127.0.0.2" (IPv4) or "v6" for any IPv6 socket
  uint16_t port = 0;
};

// The listening TCP sockets of process `pid`: its socket inodes (/proc/<pid>/fd) looked up in
// /proc/net/tcp and tcp6 (state 0A: LISTEN).
std::vector<Listening> listening_sockets(pid_t pid) {
  std::set<std::string> inodes;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fmt::format("/proc/{}/fd", pid), ec)) {
    const std::string target = fs::read_symlink(e.path(), ec).string();
    if (target.starts_with("socket:[")) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::vector<Listening> out;
  for (const char* table : {"tcp", "tcp6"}) {
    std::ifstream in(fmt::format("/proc/{}/net/{}", pid, table));
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      f >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >>
          inode;
      if (state != "0A" || inodes.count(inode) == 0) continue;
      const size_t colon = local.find(':');
      Listening l;
      l.port = static_cast<uint16_t>(std::stoul(local.substr(colon + 1), nullptr, 16));
      if (std::string_view(table) == "tcp") {
        in_addr a{};
        a.s_addr = static_cast<in_addr_t>(std::stoul(local.substr(0, colon), nullptr, 16));
        char text[INET_ADDRSTRLEN];
        l.address = inet_ntop(AF_INET, &a, text, sizeof(text));
      } else {
        l.address = "v6";
      }
      out.push_back(l);
    }
  }
  return out;
}

// ClientReplicated's cluster commands and teardown over a config of its own.
class ClientAuth : public ClientReplicated {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("shoal-client-auth-{}", getpid());
    fs::create_directories(dir_);
    config_ = (dir_ / "c.toml").string();
    std::ofstream(dir_ / "secret") << "cluster secret\n";
    std::ofstream(dir_ / "client.pw") << kPassword << "\n";
    std::ofstream(dir_ / "wrong.pw") << "open sesame!\n";
    std::string toml =
        "[cluster]\nname = \"client-auth\"\ntransport = \"tcp\"\nworkers = 1\nreplicas = 2\n"
        "secret_file = \"secret\"\nresp_password_file = \"client.pw\"\n\n"
        "[[region]]\nname = \"r0\"\n\n[[region]]\nname = \"r1\"\n\n"
        "[[shard]]\nid = 0\npartition_lo = 1\npartition_hi = 2\n";
    for (int r = 0; r < 2; ++r) {
      // port, port + 1 (the leader's replication port), Redis, client, metrics.
      const uint16_t base = test_processes::free_low_ports(5, kHosts[r]);
      ASSERT_NE(base, 0) << kHosts[r];
      const uint16_t p[4] = {base, static_cast<uint16_t>(base + 2), static_cast<uint16_t>(base + 3),
                             static_cast<uint16_t>(base + 4)};
      ports_[r] = {p[0], static_cast<uint16_t>(p[0] + 1), p[1], p[2], p[3]};
      toml += fmt::format(
          "[[shard.replica]]\nregion = \"r{}\"\nhost = \"{}\"\nport = {}\nresp_port = {}\n"
          "client_port = {}\nmetrics_port = {}\n",
          r, kHosts[r], p[0], p[1], p[2], p[3]);
    }
    std::ofstream(config_) << toml;
    // The same cluster without the password file: for clients that are not told it.
    std::string bare = toml;
    const std::string password_line = "resp_password_file = \"client.pw\"\n";
    bare.erase(bare.find(password_line), password_line.size());
    std::ofstream(dir_ / "bare.toml") << bare;
    const Shell up = cluster("up", "--keys-per-partition 1000");
    ASSERT_EQ(up.exit_code, 0) << up.output;
  }
  Shell kv(const std::string& args) { return shell(fmt::format("{} kv {}", SHOAL_BINARY, args)); }
  pid_t pid_of(const std::string& file) {
    pid_t pid = -1;
    std::ifstream(dir_ / "run" / file) >> pid;
    return pid;
  }
  uint16_t client_port() const { return ports_[0][3]; }
  Result<std::unique_ptr<Client>> connect_leader(std::string password) {
    ClientOptions options;
    options.password = std::move(password);
    return Client::connect(kHosts[0], client_port(), options);
  }

  // Per replica: port, replication port, Redis, client, metrics.
  std::array<uint16_t, 5> ports_[2];
};

TEST_F(ClientAuth, EveryListenerBindsItsReplicaHost) {
  const pid_t pids[2] = {pid_of("shard-0.pid"), pid_of("shard-0-replica-1.pid")};
  // The leader listens on all five; its follower on its metrics port (it opens the others
  // when promoted, on the same host).
  const std::set<uint16_t> expected[2] = {
      {ports_[0].begin(), ports_[0].end()},
      {ports_[1][4]},
  };
  for (int r = 0; r < 2; ++r) {
    ASSERT_GT(pids[r], 0) << r;
    std::set<uint16_t> seen;
    for (const Listening& l : listening_sockets(pids[r])) {
      EXPECT_EQ(l.address, kHosts[r])
          << "replica " << r << " listens on " << l.address << ":" << l.port;
      seen.insert(l.port);
    }
    for (uint16_t port : expected[r]) {
      EXPECT_EQ(seen.count(port), 1u) << "replica " << r << " does not listen on " << port;
    }
    // Nothing answers on another loopback address at the same ports.
    for (uint16_t port : seen) {
      const int fd = dial(port, "127.0.0.1");
      EXPECT_LT(fd, 0) << "127.0.0.1:" << port << " accepted a connection";
      if (fd >= 0) close(fd);
    }
  }
}

TEST_F(ClientAuth, ClientPortAsksThePassword) {
  // The library: a wrong password and none are refused, the right one is served.
  auto wrong = connect_leader("open sesame!");
  EXPECT_EQ(wrong.status().code(), Code::kPermissionDenied) << wrong.status().to_string();
  EXPECT_EQ(wrong.status().message(), "wrong password");
  auto none = connect_leader("");
  EXPECT_EQ(none.status().code(), Code::kPermissionDenied) << none.status().to_string();
  auto right = connect_leader(kPassword);
  ASSERT_TRUE(right.ok()) << right.status().to_string();
  ASSERT_TRUE((*right)->put("apple", "red").ok());
  // connect_cluster reads the config's password file; with a config without it, refused.
  auto from_config = Client::connect_cluster(config_);
  ASSERT_TRUE(from_config.ok()) << from_config.status().to_string();
  std::string v;
  ASSERT_TRUE((*from_config)->get("apple", &v).ok());
  EXPECT_EQ(v, "red");
  auto bare = Client::connect_cluster((dir_ / "bare.toml").string());
  EXPECT_EQ(bare.status().code(), Code::kPermissionDenied) << bare.status().to_string();

  // Raw hellos with a request behind them: one error frame of id 0, then the server closes,
  // and the put was not executed.
  std::string put;
  proto::FrameWriter w(&put);
  w.begin(1, static_cast<uint8_t>(proto::Op::kPutOne));
  w.u8(static_cast<uint8_t>(proto::Durability::kSpeculative));
  w.str("apple");
  w.str("stolen");
  (void)w.end();
  for (const std::string& hello :
       {proto::hello(proto::kVersion, "open sesame!"), proto::hello(), proto::hello(1)}) {
    const int fd = dial(client_port(), kHosts[0]);
    ASSERT_GE(fd, 0);
    send_bytes(fd, hello + put);
    std::string buffered;
    const RawReply r = read_frame(fd, &buffered);
    EXPECT_EQ(r.id, 0u);
    EXPECT_EQ(r.code, static_cast<uint8_t>(Code::kPermissionDenied)) << r.message();
    EXPECT_TRUE(closed_by_server(fd, &buffered));
    EXPECT_EQ(buffered, "") << "more than the refusal came back";
    close(fd);
  }
  ASSERT_TRUE((*right)->get("apple", &v).ok());
  EXPECT_EQ(v, "red");

  // The Redis port asks the same password.
  {
    const int fd = dial(ports_[0][2], kHosts[0]);
    ASSERT_GE(fd, 0);
    const std::string ping = "PING\r\n";
    ASSERT_EQ(send(fd, ping.data(), ping.size(), MSG_NOSIGNAL), 6);
    char buf[256];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    close(fd);
    ASSERT_GT(n, 0);
    EXPECT_EQ(std::string(buf, static_cast<size_t>(n)).substr(0, 7), "-NOAUTH");
  }

  // `shoal kv`: the config's password, --password-file over it, a bare config without one.
  const std::string bare_config = (dir_ / "bare.toml").string();
  Shell o = kv(fmt::format("put pear green --cluster {}", config_));
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(o.output, "OK (durable)\n");
  o = kv(fmt::format("get pear --cluster {} --password-file {}", bare_config,
                     (dir_ / "client.pw").string()));
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(o.output, "green\n");
  o = kv(fmt::format("get pear --cluster {}", bare_config));
  EXPECT_EQ(o.exit_code, 1) << o.output;
  EXPECT_NE(o.output.find("shoal: error: PermissionDenied: this server asks for a password"),
            std::string::npos)
      << o.output;
  o = kv(fmt::format("get pear --cluster {} --password-file {}", config_,
                     (dir_ / "wrong.pw").string()));
  EXPECT_EQ(o.exit_code, 1) << o.output;
  EXPECT_EQ(o.output, "shoal: error: PermissionDenied: wrong password\n");
  o = kv(fmt::format("get pear --cluster {} --password-file {}", config_,
                     (dir_ / "missing.pw").string()));
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("--password-file: cannot read"), std::string::npos) << o.output;
}

// The cluster secret guards the leader's data and control port and its replication port (port
// + 1): a dialer proving another secret is told so and closed, one that sends a frame instead
// of a proof (no secret) gets the challenge and a refusal, then EOF; the leader logs each
// refusal; then the shard still serves (`cluster status`, which proves the right secret).
TEST_F(ClientAuth, ClusterPortsRefuseAWrongSecretAndNone) {
  const struct {
    uint16_t port;
    const char* log_prefix;  // who logs the refusal in the leader's log
  } ports[] = {{ports_[0][0], "shoal server: shard 0: tcp accept: refused "},
               {ports_[0][1], "replication: tcp accept: refused "}};
  for (const auto& p : ports) {
    SCOPED_TRACE(fmt::format("port {}", p.port));
    int fd = dial(p.port, kHosts[0]);
    ASSERT_GE(fd, 0);
    const Status proved = net::prove_to_acceptor(fd, "a guessed secret", "the leader");
    EXPECT_EQ(proved.code(), Code::kInvalidArgument) << proved.to_string();
    EXPECT_EQ(proved.message(), "the leader refused our cluster secret");
    std::string buffered;
    EXPECT_TRUE(closed_by_server(fd, &buffered));
    close(fd);

    fd = dial(p.port, kHosts[0]);
    ASSERT_GE(fd, 0);
    // A frame's first 8 bytes where the proof's magic belongs (the acceptor reads those 8
    // and refuses: more unread bytes would make its close a reset, losing the verdict).
    send_bytes(fd, std::string(8, 'Z'));
    buffered.clear();
    EXPECT_TRUE(closed_by_server(fd, &buffered));
    close(fd);
    ASSERT_EQ(buffered.size(), 41u) << "the challenge and a one-byte verdict";
    EXPECT_EQ(buffered.substr(0, 8), "SHOALAU1");
    EXPECT_EQ(buffered[40], 0) << "not refused";
  }
  // The refusals are logged (the leader's stderr; a moment for it to be written).
  std::string log;
  for (int i = 0; i < 50; ++i) {
    log = slurp((dir_ / "run" / "shard-0.log").string());
    size_t found = 0;
    for (const auto& p : ports) {
      for (const char* why :
           {"the dialer's cluster secret is wrong", "the dialer sent no authentication"}) {
        const size_t at = log.find(p.log_prefix);
        found += at != std::string::npos && log.find(why, at) != std::string::npos;
      }
    }
    if (found == 4) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (const auto& p : ports) {
    EXPECT_NE(log.find(std::string(p.log_prefix)), std::string::npos) << log;
  }
  EXPECT_NE(log.find("the dialer's cluster secret is wrong"), std::string::npos) << log;
  EXPECT_NE(log.find("the dialer sent no authentication"), std::string::npos) << log;
  const Shell status = shell(fmt::format("{} cluster status --config {}", SHOAL_BINARY, config_));
  EXPECT_EQ(status.exit_code, 0) << status.output;
}

}  // namespace client_server_test
}  // namespace shoal::server
