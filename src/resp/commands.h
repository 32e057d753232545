// Session: one Redis client connection's command state machine, over a KvBackend.
//
// execute() takes one parsed request (resp_parser.h) and appends its reply (resp_writer.h).
// Semantics follow redis-server 7.0 for the commands in the table (command_table.cc): PING,
// ECHO, AUTH, HELLO (RESP2/RESP3, with AUTH), SELECT 0, QUIT, GET, SET (EX PX EXAT PXAT KEEPTTL NX
// XX GET), SETNX, GETSET, GETDEL, DEL, EXISTS, MGET, MSET, INCR, INCRBY, DECR, DECRBY, APPEND,
// STRLEN, SCAN (MATCH COUNT TYPE), DBSIZE, INFO, CLIENT SETNAME/GETNAME/ID, COMMAND (COUNT, INFO,
// DOCS, LIST), CONFIG GET, MULTI, EXEC, DISCARD, WATCH, UNWATCH; error replies in Redis's
// wording.
//
// Transactions: each data command is one backend transaction; each EXEC is one transaction
// holding its queued commands, so EXEC is serializable and atomic. A transaction that meets a
// conflict (Aborted) is rolled back, its partial reply taken back, and run again, at most
// SessionOptions::max_txn_attempts times. WATCH remembers each key's version; EXEC re-reads
// the watched keys inside its transaction and replies a null array when one changed (or, having
// been live at WATCH, has since expired) (kv_backend.h for the contract).
// Differences from Redis: keys must be 1 to 8192 bytes and values at most 1 MiB; SCAN cursors
// are per session (a table of the latest kScanCursors), iterate in key order, and an unknown
// cursor is an error; a key absent at WATCH that was created and deleted again before EXEC
// is seen as unchanged.
// Authentication: SessionOptions::password is the only user's ("default") password, as Redis's
// requirepass; without one, AUTH <user> <any> with the user "default" succeeds, as in Redis.
// Expiry: EX/PX/EXAT/PXAT store an absolute Unix-ms expiry in the value (value_format.h) and
// an expired key is absent to every command; "now" is Env::wall_us() of the injected Env.
// Threads: a Session belongs to its connection's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/env.h"
#include "src/resp/kv_backend.h"
#include "src/resp/resp_writer.h"
#include "src/runtime/task.h"

namespace shoal::resp {

struct SessionOptions {
  uint64_t client_id = 1;               // CLIENT ID and HELLO's "id"
  size_t max_queued_commands = 10000;   // MULTI queue
  size_t max_queued_bytes = 64u << 20;  // MULTI queue, arguments' bytes
  size_t max_watched_keys = 10000;
  int max_txn_attempts = 64;  // conflicts before "-ERR ... conflict"
  // Redis's requirepass: when not empty, every command but AUTH, HELLO (with AUTH) and QUIT
  // is refused with NOAUTH until the client proves it (AUTH [default] <password>).
  // REQUIRES: the bytes it views outlive the session.
  std::string_view password;
};

struct SessionState;  // command_table.h
struct MultiState;    // commands.cc
struct CommandSpec;   // command_table.h

class Session {
 public:
  Session(KvBackend& backend, Env& env, SessionOptions options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Executes one request and appends its reply to out (an empty request is ignored). Its task
  // suspends only when the backend does (kv_backend.h). REQUIRES: args and out
  // stay valid and untouched by others until the task completes (queued commands are copied);
  // one execute() at a time per session.
  rt::Task<void> execute(std::span<const std::string_view> args, ReplyWriter& out);

  // QUIT was answered: close once the output is flushed.
  bool quit_requested() const;
  bool in_multi() const;
  int protocol() const;
  // The largest CommitInfo::durable_token of the transactions committed since the last call
  // (0: none): the replies written meanwhile may leave only once it is durable.
  uint64_t take_durable_token();

 private:
  // Everything but a data command outside MULTI (execute()'s fast path): rejections, MULTI's
  // queue, MULTI/EXEC/DISCARD/WATCH and the commands without a transaction.
  rt::Task<void> run_other(std::span<const std::string_view> args, const CommandSpec* spec,
                           ReplyWriter& out);

  std::unique_ptr<SessionState> state_;
  std::unique_ptr<MultiState> multi_;
};

}  // namespace shoal::resp
