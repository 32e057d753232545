// The Shoal client library: serializable transactions across shards over the network, from
// any process (docs/CLIENT.md). A Client holds one TCP connection to one `shoal server`'s
// client port; that server coordinates every transaction, across all shards.
//
//   auto client = shoal::Client::connect_cluster("cluster.toml");   // or connect(host, port)
//   if (!client.ok()) ... client.status() ...
//   Status s = (*client)->run([](shoal::Transaction& t) -> shoal::Status {
//     std::string v;
//     SHOAL_TRY(t.get("alice", &v));
//     SHOAL_TRY(t.put("bob", v));
//     return shoal::Status::Ok();                 // run() commits, retrying conflicts
//   });
//   (*client)->put("k", "v");                     // a single-key transaction, one round trip
//
// Data: byte-string keys of 1 to 8192 bytes in unsigned byte order, values of 0 to 1 MiB (the
// byte tables' limits); the key space is the Redis port's (docs/RESP.md), range-partitioned
// across shards by the config's kv_split_keys.
// Transactions are serializable: reads go to the shard owning the key and are validated at
// commit by the servers' OCC/2PC path. Reads inside a transaction are confirmed only by its
// commit (a transaction that fails to commit may have read anything).
// Commit: by default commit() returns once the vectorized watermark covers the transaction
// (its writes, and the versions it read, are on a majority of every shard it touched):
// CommitResult::durable is true. Durability::kSpeculative returns at the commit point
// instead (durable false: a failover may still take it back). On a cluster without
// replication every commit is speculative (durable false): nothing is more durable there.
// Authentication: a cluster with [cluster] resp_password_file asks its password in the hello
// (ClientOptions::password; connect_cluster reads the file itself): PermissionDenied otherwise.
// Errors (Status): Aborted for a conflict (the transaction is over; run() retries it),
// NotFound for a missing key (the transaction goes on), InvalidArgument for a key or value
// over the limits or a call out of order, Unavailable when the server cannot be reached or
// the connection broke (the Client is then unusable: connect again), Timeout when the server
// did not answer within ClientOptions::io_timeout_ms (likewise).
// An interactive transaction idle for more than about 2 s (the participants' lease) is
// aborted by the servers; its next call fails with Aborted.
// Pipelining: send_get() queues single-key gets without waiting, receive_get() collects their
// results in the order sent; at most kMaxPipelined outstanding per Client (the bound on its
// requests in flight), and no other call while any is outstanding.
// Waiting: a call that waits for a reply polls the socket for ClientOptions::spin_us first
// (bounded; a server answers a get in a few microseconds), then sleeps in the kernel.
// Threads: a Client and its Transaction are not thread-safe: one thread at a time (use a
// Client per thread). Calls block. At most one Transaction per Client is open at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/status.h"

namespace shoal {

enum class Durability : uint8_t {
  kDurable = 0,      // return once the vectorized watermark covers the transaction
  kSpeculative = 1,  // return at the commit point
};

struct CommitResult {
  bool durable = false;  // the watermark covered it before commit() returned
};

struct KeyValue {
  std::string key;
  std::string value;
};

class Env;  // src/base/env.h

struct ClientOptions {
  Env* env = nullptr;  // clock, sleeps and seeds for run()'s backoff (nullptr: the machine's)
  int connect_timeout_ms = 5000;
  int io_timeout_ms = 30'000;  // one request's reply; beyond: Timeout, connection closed
  // The cluster's client password ([cluster] resp_password_file: the Redis port's, so an
  // application has one credential for both), sent in the hello. Empty: none, except that
  // connect_cluster() then reads the config's file when it names one. A server that asks for
  // another (or one, and gets none) refuses the connection: PermissionDenied. Sent in clear.
  std::string password;
  // How long a call polls for its reply before sleeping (0: sleep at once). A reply that
  // comes within it saves the sleep and the wake-up (about a loopback round trip's worth).
  // Adaptive: after a poll that ran out without a reply, the next waits sleep at once (1, 2,
  // 4 ... up to 256 of them; a reply caught while polling halves that), so a client on a
  // machine without a core to spare mostly stops polling.
  int spin_us = 50;
};

struct RunOptions {
  uint32_t max_attempts = 100;  // conflicts (Aborted) retried; then the last Aborted
  Durability durability = Durability::kDurable;
};

class Client;

// An interactive transaction (Client::begin). Ends with commit() or abort(); destroying an
// open one aborts it. A call after it ended returns InvalidArgument.
class Transaction {
 public:
  Transaction(Transaction&& other) noexcept;
  Transaction& operator=(Transaction&& other) noexcept;
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();

  // Ok and *value, or NotFound. Sees the transaction's own writes.
  [[nodiscard]] Status get(std::string_view key, std::string* value);
  // Buffered until commit.
  [[nodiscard]] Status put(std::string_view key, std::string_view value);
  // Deleting an absent key is not an error.
  [[nodiscard]] Status del(std::string_view key);
  // Appends to *out up to `limit` (1 to 100,000) keys k with start <= k < end, in key order,
  // with their values (end empty: to the last key; start empty: from the first). The scanned
  // range is part of the transaction (validated at commit: no phantoms).
  [[nodiscard]] Status scan(std::string_view start, std::string_view end, uint32_t limit,
                            std::vector<KeyValue>* out);
  [[nodiscard]] Result<CommitResult> commit(Durability durability = Durability::kDurable);
  // Installs nothing. Ok also when the transaction had already ended.
  [[nodiscard]] Status abort();
  bool open() const { return client_ != nullptr; }

 private:
  friend class Client;
  explicit Transaction(Client* client) : client_(client) {}
  // The transaction ended (commit, abort or a failed operation).
  void finish();
  Client* client_;  // nullptr once ended
};

class Client {
 public:
  // Connects to host:port (a server's client port) and performs the handshake (with
  // options.password: PermissionDenied when the server wants another, or one and got none;
  // InvalidArgument when it is over 4096 bytes).
  [[nodiscard]] static Result<std::unique_ptr<Client>> connect(const std::string& host,
                                                               uint16_t port,
                                                               ClientOptions options = {});
  // Reads a cluster config (TOML, docs/OPERATIONS.md) and connects to a server with a
  // client_port: shard leaders first, starting at one picked by the process id, then the
  // other replicas (a promoted follower opens its port). Unavailable when none answers.
  // Without options.password, the config's resp_password_file (when it names one) is read
  // for it (InvalidArgument when it cannot be).
  [[nodiscard]] static Result<std::unique_ptr<Client>> connect_cluster(
      const std::string& config_path, ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Starts a transaction (sent with its first operation). InvalidArgument when one is open.
  [[nodiscard]] Result<Transaction> begin();
  // Runs fn in a transaction and commits it; a conflict (Aborted from fn or the commit) runs
  // it again, after a short randomized backoff, up to options.max_attempts times. fn's own
  // error ends it (aborted) and is returned. *result (optional) gets the commit's result.
  [[nodiscard]] Status run(const std::function<Status(Transaction&)>& fn, RunOptions options = {},
                           CommitResult* result = nullptr);

  // Single-key transactions, one round trip each (the server retries their conflicts).
  // get: Ok and *value, or NotFound.
  [[nodiscard]] Status get(std::string_view key, std::string* value,
                           Durability durability = Durability::kDurable);
  [[nodiscard]] Result<CommitResult> put(std::string_view key, std::string_view value,
                                         Durability durability = Durability::kDurable);
  [[nodiscard]] Result<CommitResult> del(std::string_view key,
                                         Durability durability = Durability::kDurable);

  // Pipelined single-key gets (the same transaction as get()'s, one per key; the server runs
  // them in order). send_get() queues one and returns at once: InvalidArgument when the key
  // is over the limits, when kMaxPipelined are outstanding (receive first) or when a
  // Transaction is open. Queued requests go out when they fill a socket's worth, at
  // receive_get(), or at flush(). receive_get() returns the oldest outstanding get's result
  // (Ok and *value, or NotFound, or its error), waiting for it; InvalidArgument when none is
  // outstanding. A transport failure (Unavailable, Timeout) drops every outstanding get.
  // While gets are outstanding, every other call returns InvalidArgument.
  static constexpr uint32_t kMaxPipelined = 256;
  [[nodiscard]] Status send_get(std::string_view key, Durability durability = Durability::kDurable);
  [[nodiscard]] Status flush();
  [[nodiscard]] Status receive_get(std::string* value);
  // Gets sent or queued whose results receive_get() has not returned yet.
  uint32_t outstanding() const { return pipelined_; }

  // "host:port" of the server this client talks to.
  const std::string& server() const { return server_; }
  // False once the connection broke (every call then returns Unavailable).
  bool connected() const { return fd_ >= 0; }

 private:
  friend class Transaction;
  struct Reply;
  Client() = default;
  // Sends a request frame of `op` with body_ (a pending begin first) and reads its replies;
  // the request's is returned in *reply, valid until the next call. A transport failure closes
  // the connection.
  [[nodiscard]] Status call(uint8_t op, Reply* reply);
  // Sends out_ whole; while the socket takes no more, reads what the server sends meanwhile
  // into in_ (so a server blocked on its replies never blocks us). Clears out_.
  [[nodiscard]] Status send_out();
  // The next reply frame, which must be request `id`'s. Its body stays valid until the next
  // read_reply() (the frame is consumed then).
  [[nodiscard]] Status read_reply(uint64_t id, Reply* reply);
  // Reads more bytes into in_: polls for spin_us, then waits up to io_timeout_ms.
  [[nodiscard]] Status fill();
  // recv() into in_'s free space; what recv returned.
  int64_t recv_some(int flags);
  [[nodiscard]] Status broken(Status why);
  [[nodiscard]] Status handshake();
  [[nodiscard]] Status check_idle(const char* what) const;
  // A single-key get's reply: Ok and *value, or its error.
  [[nodiscard]] Status get_one_result(const Reply& r, std::string* value);
  // A single-key put (value) or del (value nullptr).
  [[nodiscard]] Result<CommitResult> write_one(uint8_t op, std::string_view key,
                                               const std::string_view* value,
                                               Durability durability);

  int fd_ = -1;
  std::string server_;
  ClientOptions options_;
  uint64_t next_id_ = 1;
  bool txn_open_ = false;       // a Transaction exists and has not ended
  bool begin_pending_ = false;  // its begin is not sent yet (it goes with its first operation)
  uint32_t pipelined_ = 0;      // gets sent or queued, not received (ids next_id_ - pipelined_ ...)
  std::string body_;            // the request body being built (reused: no allocation per call)
  std::string out_;             // frames being sent
  std::string in_;              // in_[in_head_, in_len_): bytes read, not yet consumed
  size_t in_head_ = 0;
  size_t in_len_ = 0;
  size_t consumed_ = 0;        // the last reply frame's bytes, consumed at the next read_reply()
  uint32_t spin_skip_ = 0;     // waits left that sleep at once (fill())
  uint32_t spin_backoff_ = 0;  // the next skip after a poll that ran out
};

}  // namespace shoal
