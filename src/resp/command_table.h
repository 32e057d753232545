// The command table and what command handlers share: internal to src/resp (commands.h is the
// interface). A handler runs one command's semantics against an open transaction (data
// commands) and writes exactly one reply.
//
// Handler contract (a coroutine: rt::Task<Status>): returns Ok once it wrote its reply (an error
// reply too: syntax errors, "not an integer" and the like are replies, not failures, and such a
// command writes nothing to the backend). It returns a backend Status as is (Aborted: the caller
// rolls back and retries; other: the caller rolls back and replies "-ERR <message>"); the reply it
// may have begun is then taken back by the caller. Threads: the table is immutable; a SessionState
// belongs to its session's thread.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/status.h"
#include "src/base/env.h"
#include "src/resp/commands.h"
#include "src/resp/kv_backend.h"
#include "src/resp/resp_writer.h"
#include "src/resp/value_format.h"
#include "src/runtime/task.h"

namespace shoal::resp {

using Args = std::span<const std::string_view>;

inline constexpr size_t kScanCursors = 16;

struct WatchedKey {
  std::string key;
  uint64_t version = 0;
  bool live = false;  // existed and had not expired at WATCH
};

struct ScanCursor {
  uint64_t id = 0;  // 0: free slot
  std::string last_key;
};

// A key as read: whether a record exists at all, and whether it is live (not expired).
struct KeyRead {
  bool found = false;
  bool live = false;
  StoredString value;  // views SessionState::raw: valid until the next read
};

struct SessionState {
  SessionState(KvBackend& b, Env& e, SessionOptions o)
      : backend(b), env(e), options(o), authenticated(o.password.empty()) {}
  KvBackend& backend;
  Env& env;
  SessionOptions options;
  std::unique_ptr<KvTxn> txn;
  int protocol = 2;
  bool quit = false;
  bool authenticated = false;  // AUTH passed, or no password is required
  std::string client_name;
  std::vector<WatchedKey> watched;
  std::array<ScanCursor, kScanCursors> cursors;
  uint64_t next_cursor_id = 1;
  size_t next_cursor_slot = 0;
  uint64_t durable_token = 0;
  // The last command resolved, by its name's exact bytes (commands.cc, resolve()).
  std::string last_command_name;
  const CommandSpec* last_command_spec = nullptr;
  // Counters for INFO.
  uint64_t commands = 0;
  uint64_t commits = 0;
  uint64_t conflicts = 0;
  // Reused buffers: a stored value read (and its version: the backend may write it after a
  // suspension, so it lives here), a value to store, a scan batch.
  std::string raw;
  uint64_t read_version = 0;
  KeyRead read;  // the read of a handler that is not a coroutine (it may finish in one)
  std::string encoded;
  std::string payload;
  std::vector<KeyValue> scan_batch;
};

struct Ctx {
  SessionState& state;
  Args args;
  ReplyWriter& out;
  KvTxn* txn;  // the open transaction; nullptr for commands without kData
  uint64_t now_ms;
};

// A coroutine: data commands await the backend; the rest complete inline.
using Handler = rt::Task<Status> (*)(Ctx&);

enum CommandFlags : uint32_t {
  kData = 1,     // runs inside a backend transaction (and has key arguments)
  kWrite = 2,    // may write (COMMAND's "write" flag; else "readonly" for kData)
  kNoQueue = 4,  // runs at once even inside MULTI: MULTI, EXEC, DISCARD, WATCH, QUIT
  kAdmin = 8,    // connection/server commands (COMMAND's flags: "fast" not set)
  kNoAuth = 16,  // allowed before AUTH when a password is required: AUTH, HELLO, QUIT
};

struct CommandSpec {
  std::string_view name;  // lower case; "client|setname" style for subcommands
  int arity;              // Redis: n > 0 exactly n arguments, n < 0 at least -n
  uint32_t flags;
  int first_key, last_key, key_step;  // Redis's key positions (last_key -1: the last argument)
  Handler handler;  // nullptr for MULTI/EXEC/DISCARD/WATCH, which the session runs
  std::string_view group;
  std::string_view since;
  std::string_view summary;
  std::span<const CommandSpec> subcommands;  // non-empty: a container (CLIENT, COMMAND)
};

// Case-insensitive lookup of a command name (or, with a container, of a subcommand).
const CommandSpec* find_command(std::string_view name);
const CommandSpec* find_subcommand(const CommandSpec& container, std::string_view name);
std::span<const CommandSpec> all_commands();

// Redis's strict string-to-int64 (string2ll): no spaces, no '+', no leading zeros.
bool parse_i64(std::string_view s, int64_t* out);
// "ERR wrong number of arguments for 'get' command".
void reply_arity_error(ReplyWriter& out, const CommandSpec& spec);
std::string lower(std::string_view s);

// Handlers, by file.
rt::Task<Status> cmd_auth(Ctx& c);
rt::Task<Status> cmd_get(Ctx& c);
rt::Task<Status> cmd_set(Ctx& c);
rt::Task<Status> cmd_setnx(Ctx& c);
rt::Task<Status> cmd_getset(Ctx& c);
rt::Task<Status> cmd_getdel(Ctx& c);
rt::Task<Status> cmd_del(Ctx& c);
rt::Task<Status> cmd_exists(Ctx& c);
rt::Task<Status> cmd_mget(Ctx& c);
rt::Task<Status> cmd_mset(Ctx& c);
rt::Task<Status> cmd_incr(Ctx& c);
rt::Task<Status> cmd_incrby(Ctx& c);
rt::Task<Status> cmd_decr(Ctx& c);
rt::Task<Status> cmd_decrby(Ctx& c);
rt::Task<Status> cmd_append(Ctx& c);
rt::Task<Status> cmd_strlen(Ctx& c);
rt::Task<Status> cmd_scan(Ctx& c);  // commands_scan.cc
rt::Task<Status> cmd_dbsize(Ctx& c);
rt::Task<Status> cmd_ping(Ctx& c);  // commands_server.cc
rt::Task<Status> cmd_echo(Ctx& c);
rt::Task<Status> cmd_hello(Ctx& c);
rt::Task<Status> cmd_select(Ctx& c);
rt::Task<Status> cmd_quit(Ctx& c);
rt::Task<Status> cmd_info(Ctx& c);
rt::Task<Status> cmd_unwatch(Ctx& c);
rt::Task<Status> cmd_client_setname(Ctx& c);
rt::Task<Status> cmd_client_getname(Ctx& c);
rt::Task<Status> cmd_client_id(Ctx& c);
rt::Task<Status> cmd_config_get(Ctx& c);
rt::Task<Status> cmd_command(Ctx& c);
rt::Task<Status> cmd_command_count(Ctx& c);
rt::Task<Status> cmd_command_info(Ctx& c);
rt::Task<Status> cmd_command_docs(Ctx& c);
rt::Task<Status> cmd_command_list(Ctx& c);

}  // namespace shoal::resp
