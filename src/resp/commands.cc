// Session: dispatch, transactions (one per data command, one per EXEC) with conflict retry,
// and MULTI/EXEC/DISCARD/WATCH.
#include "src/resp/commands.h"

#include "src/resp/command_table.h"
#include "src/resp/value_format.h"

namespace shoal::resp {
namespace {

// A command queued by MULTI: its spec and its arguments, copied into the session's arena.
struct QueuedCommand {
  const CommandSpec* spec;
  uint32_t first_span;
  uint32_t nargs;
};

}  // namespace

// The MULTI state lives beside SessionState (which handlers see) because no handler needs it.
struct MultiState {
  bool active = false;
  bool dirty = false;  // a command was rejected while queuing: EXEC answers EXECABORT
  std::vector<QueuedCommand> commands;
  std::vector<std::pair<uint32_t, uint32_t>> spans;  // (offset, length) into arena
  std::string arena;
  std::vector<std::string_view> args;  // EXEC's scratch

  void clear() {
    active = dirty = false;
    commands.clear();
    spans.clear();
    arena.clear();
  }
};

namespace {

// Unknown command: Redis's wording, which quotes the first arguments up to ~128 bytes.
void reply_unknown_command(ReplyWriter& out, Args args) {
  std::string quoted;
  for (size_t i = 1; i < args.size() && quoted.size() < 128; ++i) {
    quoted += '\'';
    quoted.append(args[i].substr(0, 128 - quoted.size() + 1));
    quoted += "' ";
  }
  std::string msg = "ERR unknown command '";
  msg.append(args[0].substr(0, 128));
  msg += "', with args beginning with: ";
  msg += quoted;
  out.error(msg);
}

bool arity_ok(const CommandSpec& spec, size_t argc) {
  const auto n = static_cast<int64_t>(argc);
  return spec.arity > 0 ? n == spec.arity : n >= -spec.arity;
}

// The command named exactly args[0] (same bytes, same case) as last time: a pipelining client
// sends runs of one command, and the table's lookup (lower-casing and hashing) was a
// fifteenth of a GET. Commands with subcommands are not remembered.
const CommandSpec* find_command_remembered(SessionState& s, std::string_view name) {
  if (s.last_command_spec != nullptr && name == s.last_command_name) return s.last_command_spec;
  const CommandSpec* spec = find_command(name);
  if (spec != nullptr && spec->subcommands.empty()) {
    s.last_command_name.assign(name);
    s.last_command_spec = spec;
  }
  return spec;
}

// Resolves args to a command, or writes the rejection (unknown, arity) and returns nullptr.
const CommandSpec* resolve(SessionState& s, Args args, ReplyWriter& out) {
  const CommandSpec* spec = find_command_remembered(s, args[0]);
  if (spec == nullptr) {
    reply_unknown_command(out, args);
    return nullptr;
  }
  if (!spec->subcommands.empty() && args.size() >= 2) {
    const CommandSpec* sub = find_subcommand(*spec, args[1]);
    if (sub == nullptr) {
      std::string upper(args[0]);
      for (char& ch : upper) ch = (ch >= 'a' && ch <= 'z') ? static_cast<char>(ch - 32) : ch;
      out.error("ERR unknown subcommand '" + std::string(args[1].substr(0, 128)) + "'. Try " +
                upper + " HELP.");
      return nullptr;
    }
    spec = sub;
  }
  if (!arity_ok(*spec, args.size())) {
    reply_arity_error(out, *spec);
    return nullptr;
  }
  return spec;
}

// Keys must be 1 to kMaxKeyBytes; checked by the spec's key positions before a data command
// runs, so handlers and the backend never see another.
bool keys_ok(const CommandSpec& spec, Args args, ReplyWriter& out) {
  if (spec.first_key <= 0) return true;
  const size_t last = spec.last_key < 0 ? args.size() - 1 : static_cast<size_t>(spec.last_key);
  for (size_t i = static_cast<size_t>(spec.first_key); i <= last && i < args.size();
       i += static_cast<size_t>(spec.key_step)) {
    if (args[i].empty() || args[i].size() > kMaxKeyBytes) {
      out.error("ERR key length must be 1 to 8192 bytes");
      return false;
    }
  }
  return true;
}

uint64_t now_ms(Env& env) {
  return env.wall_us() / 1000;
}

void reply_backend_error(ReplyWriter& out, const Status& s) {
  out.error("ERR " + s.to_string());
}

void reply_too_many_conflicts(ReplyWriter& out, int attempts) {
  out.error("ERR transaction conflicted " + std::to_string(attempts) +
            " times in a row; try again");
}

}  // namespace

// Everything Session does, split off so that its header stays small. Coroutines where the
// backend may suspend; each completes inline over a backend that does not.
class SessionImpl {
 public:
  static rt::Task<void> run_single(SessionState& s, const CommandSpec& spec, Args args,
                                   ReplyWriter& out);
  static rt::Task<void> run_exec(SessionState& s, MultiState& m, ReplyWriter& out);
  static rt::Task<void> run_watch(SessionState& s, Args args, ReplyWriter& out);
  static void queue(SessionState& s, MultiState& m, const CommandSpec& spec, Args args,
                    ReplyWriter& out);
  // One attempt at EXEC's transaction. Ok: committed (reply written) or watched key changed
  // (null written); Aborted: conflict (the caller rolls back the reply); other: failure.
  static rt::Task<Status> exec_attempt(SessionState& s, MultiState& m, ReplyWriter& out);
  static rt::Task<Status> watched_unchanged(SessionState& s, uint64_t now, bool* unchanged);
  // One WATCH attempt: reads every new key of args into s.watched and commits. Ok, or a
  // failure (everything added is dropped again); a limit error is a reply (*replied).
  static rt::Task<Status> watch_attempt(SessionState& s, Args args, ReplyWriter& out,
                                        bool* replied);
  // Commits the open transaction (Ok: noted) or aborts it after a failed handler.
  static rt::Task<Status> finish(SessionState& s, Status handler_status);
  static void note_commit(SessionState& s, const CommitInfo& info) {
    ++s.commits;
    if (info.durable_token > s.durable_token) s.durable_token = info.durable_token;
  }
};

rt::Task<Status> SessionImpl::finish(SessionState& s, Status handler_status) {
  if (!handler_status.ok()) {
    co_await s.txn->abort();
    co_return handler_status;
  }
  auto committed = co_await s.txn->commit();
  if (!committed.ok()) co_return committed.status();
  note_commit(s, *committed);
  co_return Status::Ok();
}

rt::Task<void> SessionImpl::run_single(SessionState& s, const CommandSpec& spec, Args args,
                                       ReplyWriter& out) {
  if (!keys_ok(spec, args, out)) co_return;
  const uint64_t mark = out.written_total();
  for (int attempt = 0; attempt < s.options.max_txn_attempts; ++attempt) {
    s.txn->begin();
    Ctx c{s, args, out, s.txn.get(), now_ms(s.env)};
    // finish()'s work, inline: a frame fewer on every data command's path.
    Status st = co_await spec.handler(c);
    if (!st.ok()) {
      co_await s.txn->abort();
    } else if (auto committed = co_await s.txn->commit(); committed.ok()) {
      note_commit(s, *committed);
      co_return;
    } else {
      st = committed.status();
    }
    out.rollback(mark);
    if (!st.is_aborted()) {
      reply_backend_error(out, st);
      co_return;
    }
    ++s.conflicts;
  }
  reply_too_many_conflicts(out, s.options.max_txn_attempts);
}

rt::Task<Status> SessionImpl::watched_unchanged(SessionState& s, uint64_t now, bool* unchanged) {
  *unchanged = true;
  for (const WatchedKey& w : s.watched) {
    uint64_t version = 0;
    Status st = co_await s.txn->get(w.key, &s.raw, &version);
    if (!st.ok() && !st.is_not_found()) co_return st;
    bool live = false;
    if (st.ok()) {
      auto decoded = decode_string(s.raw);
      live = decoded.ok() && !decoded->expired(now);
    }
    // Changed by a write, or live at WATCH and expired since (Redis 7 aborts then too).
    if (version != w.version || (w.live && !live)) *unchanged = false;
  }
  co_return Status::Ok();
}

rt::Task<Status> SessionImpl::exec_attempt(SessionState& s, MultiState& m, ReplyWriter& out) {
  s.txn->begin();
  const uint64_t now = now_ms(s.env);
  bool unchanged = true;
  if (Status st = co_await watched_unchanged(s, now, &unchanged); !st.ok()) {
    co_await s.txn->abort();
    co_return st;
  }
  if (!unchanged) {
    co_await s.txn->abort();
    out.null_array();
    co_return Status::Ok();
  }
  out.array_header(m.commands.size());
  for (const QueuedCommand& q : m.commands) {
    m.args.clear();
    for (uint32_t i = 0; i < q.nargs; ++i) {
      const auto [offset, length] = m.spans[q.first_span + i];
      m.args.push_back(std::string_view(m.arena).substr(offset, length));
    }
    if ((q.spec->flags & kData) != 0 && !keys_ok(*q.spec, m.args, out)) continue;
    Ctx c{s, m.args, out, s.txn.get(), now};
    if (Status st = co_await q.spec->handler(c); !st.ok()) co_return co_await finish(s, st);
  }
  co_return co_await finish(s, Status::Ok());
}

rt::Task<void> SessionImpl::run_exec(SessionState& s, MultiState& m, ReplyWriter& out) {
  if (!m.active) {
    out.error("ERR EXEC without MULTI");
    co_return;
  }
  if (m.dirty) {
    out.error("EXECABORT Transaction discarded because of previous errors.");
  } else {
    const uint64_t mark = out.written_total();
    const int protocol = s.protocol;  // a queued HELLO may change it: restored on retry
    int attempt = 0;
    for (; attempt < s.options.max_txn_attempts; ++attempt) {
      Status st = co_await exec_attempt(s, m, out);
      if (st.ok()) break;
      out.rollback(mark);
      s.protocol = protocol;
      out.set_protocol(protocol);
      if (!st.is_aborted()) {
        reply_backend_error(out, st);
        break;
      }
      ++s.conflicts;
    }
    if (attempt == s.options.max_txn_attempts) reply_too_many_conflicts(out, attempt);
  }
  m.clear();
  s.watched.clear();  // EXEC always unwatches
}

rt::Task<Status> SessionImpl::watch_attempt(SessionState& s, Args args, ReplyWriter& out,
                                            bool* replied) {
  s.txn->begin();
  const uint64_t now = now_ms(s.env);
  Status st;
  for (size_t i = 1; i < args.size() && st.ok(); ++i) {
    bool seen = false;  // already watched: Redis keeps the first WATCH's view
    for (const WatchedKey& w : s.watched) seen |= w.key == args[i];
    if (seen) continue;
    if (s.watched.size() >= s.options.max_watched_keys) {
      out.error("ERR too many watched keys (the limit is " +
                std::to_string(s.options.max_watched_keys) + ")");
      *replied = true;
      co_await s.txn->abort();
      co_return Status::Ok();
    }
    WatchedKey w{std::string(args[i]), 0, false};
    st = co_await s.txn->get(w.key, &s.raw, &w.version);
    if (st.is_not_found()) {
      st = Status::Ok();
    } else if (st.ok()) {
      auto decoded = decode_string(s.raw);
      w.live = decoded.ok() && !decoded->expired(now);
    }
    s.watched.push_back(std::move(w));
  }
  co_return co_await finish(s, st);
}

rt::Task<void> SessionImpl::run_watch(SessionState& s, Args args, ReplyWriter& out) {
  const CommandSpec& spec = *find_command("watch");
  if (!keys_ok(spec, args, out)) co_return;
  const size_t before = s.watched.size();
  for (int attempt = 0; attempt < s.options.max_txn_attempts; ++attempt) {
    bool replied = false;
    const Status st = co_await watch_attempt(s, args, out, &replied);
    if (replied) {
      s.watched.resize(before);
      co_return;
    }
    if (st.ok()) {
      out.simple("OK");
      co_return;
    }
    s.watched.resize(before);
    if (!st.is_aborted()) {
      reply_backend_error(out, st);
      co_return;
    }
    ++s.conflicts;
  }
  reply_too_many_conflicts(out, s.options.max_txn_attempts);
}

void SessionImpl::queue(SessionState& s, MultiState& m, const CommandSpec& spec, Args args,
                        ReplyWriter& out) {
  size_t bytes = 0;
  for (std::string_view a : args) bytes += a.size();
  if (m.commands.size() >= s.options.max_queued_commands ||
      m.arena.size() + bytes > s.options.max_queued_bytes) {
    m.dirty = true;
    out.error("ERR MULTI queue is over its limit of " +
              std::to_string(s.options.max_queued_commands) + " commands or " +
              std::to_string(s.options.max_queued_bytes) + " bytes");
    return;
  }
  m.commands.push_back(
      {&spec, static_cast<uint32_t>(m.spans.size()), static_cast<uint32_t>(args.size())});
  for (std::string_view a : args) {
    m.spans.emplace_back(static_cast<uint32_t>(m.arena.size()), static_cast<uint32_t>(a.size()));
    m.arena.append(a);
  }
  out.simple("QUEUED");
}

Session::Session(KvBackend& backend, Env& env, SessionOptions options)
    : state_(std::make_unique<SessionState>(backend, env, options)),
      multi_(std::make_unique<MultiState>()) {
  state_->txn = backend.open();
  SHOAL_ASSERT(state_->txn != nullptr, "KvBackend::open() returned null");
}

Session::~Session() = default;

bool Session::quit_requested() const {
  return state_->quit;
}
bool Session::in_multi() const {
  return multi_->active;
}
int Session::protocol() const {
  return state_->protocol;
}

uint64_t Session::take_durable_token() {
  const uint64_t t = state_->durable_token;
  state_->durable_token = 0;
  return t;
}

// Not a coroutine: it returns the task of the path it takes (a data command's is run_single's
// own, a frame fewer per command), or run_other's.
rt::Task<void> Session::execute(Args args, ReplyWriter& out) {
  SessionState& s = *state_;
  MultiState& m = *multi_;
  if (!args.empty()) {
    ++s.commands;
    out.set_protocol(s.protocol);
  }
  const CommandSpec* spec = args.empty() ? nullptr : resolve(s, args, out);
  if (spec != nullptr && s.authenticated && !m.active &&
      (spec->flags & (kData | kNoQueue)) == kData) {
    return SessionImpl::run_single(s, *spec, args, out);
  }
  return run_other(args, spec, out);
}

rt::Task<void> Session::run_other(Args args, const CommandSpec* spec, ReplyWriter& out) {
  if (args.empty()) co_return;
  SessionState& s = *state_;
  MultiState& m = *multi_;
  if (spec == nullptr) {
    m.dirty |= m.active;  // a rejected command aborts the transaction being queued
    co_return;
  }
  const std::string_view name = spec->name;
  if (!s.authenticated && (spec->flags & kNoAuth) == 0) {
    out.error("NOAUTH Authentication required.");
    m.dirty |= m.active;
    co_return;
  }
  if (m.active && (spec->flags & kNoQueue) == 0) {
    SessionImpl::queue(s, m, *spec, args, out);
  } else if (name == "multi") {
    if (m.active) {
      out.error("ERR MULTI calls can not be nested");
    } else {
      m.active = true;
      out.simple("OK");
    }
  } else if (name == "exec") {
    co_await SessionImpl::run_exec(s, m, out);
  } else if (name == "discard") {
    if (!m.active) {
      out.error("ERR DISCARD without MULTI");
    } else {
      m.clear();
      s.watched.clear();
      out.simple("OK");
    }
  } else if (name == "watch") {
    if (m.active) {
      out.error("ERR WATCH inside MULTI is not allowed");
    } else {
      co_await SessionImpl::run_watch(s, args, out);
    }
  } else if ((spec->flags & kData) != 0) {
    co_await SessionImpl::run_single(s, *spec, args, out);
  } else {
    Ctx c{s, args, out, nullptr, now_ms(s.env)};
    if (Status st = co_await spec->handler(c); !st.ok()) reply_backend_error(out, st);
  }
}

}  // namespace shoal::resp
