// The string commands: GET SET SETNX GETSET GETDEL DEL EXISTS MGET MSET INCR INCRBY DECR
// DECRBY APPEND STRLEN DBSIZE. Each runs inside the transaction in Ctx::txn.
#include <charconv>
#include <climits>

#include "src/resp/command_table.h"
#include "src/resp/value_format.h"

namespace shoal::resp {
namespace {

constexpr std::string_view kNotInteger = "ERR value is not an integer or out of range";
constexpr std::string_view kTooBig = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";

using Read = KeyRead;

// A ready task of `s`: a handler that is not a coroutine answers with one.
rt::Task<Status> done(Status s) {
  return rt::Task<Status>::ready(std::move(s));
}

// A get's outcome as a Read: NotFound is a key without a record, not a failure.
Status to_read(Ctx& c, Status got, Read* r) {
  *r = Read{};
  if (got.is_not_found()) return Status::Ok();
  SHOAL_TRY(got);
  auto decoded = decode_string(c.state.raw);
  if (!decoded.ok()) return decoded.status();
  r->found = true;
  r->value = *decoded;
  r->live = !r->value.expired(c.now_ms);
  return Status::Ok();
}

rt::Task<Status> finish_read(Ctx& c, rt::Task<Status> got, Read* r) {
  co_return to_read(c, co_await got, r);
}

// Not a coroutine: a get the backend answers at once (a ready task) is read without a frame.
rt::Task<Status> read_key(Ctx& c, std::string_view key, Read* r) {
  rt::Task<Status> got = c.txn->get(key, &c.state.raw, &c.state.read_version);
  if (got.is_ready()) return rt::Task<Status>::ready(to_read(c, got.take(), r));
  return finish_read(c, std::move(got), r);
}

// Not a coroutine: the put's own task, after encoding into the session's buffer.
rt::Task<Status> write_value(Ctx& c, std::string_view key, std::string_view payload,
                             uint64_t expiry_ms) {
  encode_string(payload, expiry_ms, &c.state.encoded);
  return c.txn->put(key, c.state.encoded);
}

void reply_value(Ctx& c, const Read& r) {
  if (r.live) {
    c.out.bulk(r.value.payload);
  } else {
    c.out.null();
  }
}

// SET's options, parsed as Redis 7.0 parses them (parseExtendedStringArgumentsOrReply).
struct SetOptions {
  bool nx = false, xx = false, get = false, keepttl = false;
  char unit = 0;            // 0 none, 'e' EX, 'p' PX, 'E' EXAT, 'P' PXAT
  std::string_view expire;  // the expiry argument
};

bool is_option(std::string_view arg, std::string_view name) {
  if (arg.size() != name.size()) return false;
  for (size_t i = 0; i < arg.size(); ++i) {
    char a = arg[i];
    if (a >= 'a' && a <= 'z') a = static_cast<char>(a - ('a' - 'A'));
    if (a != name[i]) return false;
  }
  return true;
}

bool parse_set_options(Args args, SetOptions* o) {
  static constexpr std::pair<std::string_view, char> kUnits[] = {
      {"EX", 'e'}, {"PX", 'p'}, {"EXAT", 'E'}, {"PXAT", 'P'}};
  for (size_t j = 3; j < args.size(); ++j) {  // each pass consumes 1 or 2 arguments
    const std::string_view a = args[j];
    const bool has_next = j + 1 < args.size();
    if (is_option(a, "NX") && !o->xx) {
      o->nx = true;
    } else if (is_option(a, "XX") && !o->nx) {
      o->xx = true;
    } else if (is_option(a, "GET")) {
      o->get = true;
    } else if (is_option(a, "KEEPTTL") && o->unit == 0) {
      o->keepttl = true;
    } else {
      bool matched = false;
      for (const auto& [name, unit] : kUnits) {
        // The same unit may repeat (the last wins); two different ones may not.
        if (is_option(a, name) && !o->keepttl && (o->unit == 0 || o->unit == unit) && has_next) {
          o->unit = unit;
          o->expire = args[++j];
          matched = true;
          break;
        }
      }
      if (!matched) return false;
    }
  }
  return true;
}

// The absolute expiry in Unix ms for SET's option, or false (reply written) when invalid.
bool expiry_of(Ctx& c, const SetOptions& o, uint64_t* expiry_ms) {
  *expiry_ms = kNoExpiry;
  if (o.unit == 0) return true;
  int64_t v = 0;
  if (!parse_i64(o.expire, &v)) {
    c.out.error(kNotInteger);
    return false;
  }
  const bool seconds = o.unit == 'e' || o.unit == 'E';
  const bool relative = o.unit == 'e' || o.unit == 'p';
  bool ok = v > 0 && (!seconds || v <= LLONG_MAX / 1000);
  if (ok && seconds) v *= 1000;
  if (ok && relative) ok = !__builtin_add_overflow(v, static_cast<int64_t>(c.now_ms), &v);
  if (!ok) {
    c.out.error("ERR invalid expire time in 'set' command");
    return false;
  }
  *expiry_ms = static_cast<uint64_t>(v);
  return true;
}

bool value_fits(Ctx& c, std::string_view value) {
  if (value.size() <= kMaxValueBytes) return true;
  c.out.error(kTooBig);
  return false;
}

// The handlers of the pipelined benchmarks' commands (GET, plain SET, MSET, INCR and kin) are
// not coroutines: when the backend answers at once (ready tasks: the shard server's local
// keys) they answer with a ready task too, a frame fewer per command; the first call that
// would wait hands the rest to a coroutine (the *_rest functions).

rt::Task<Status> reply_integer_after(Ctx& c, rt::Task<Status> put, int64_t value) {
  SHOAL_CO_TRY(co_await put);
  c.out.integer(value);
  co_return Status::Ok();
}

// INCR and kin once the key is read (c.state.read): the new value written and replied.
rt::Task<Status> incr_apply(Ctx& c, int64_t delta) {
  const Read& r = c.state.read;
  int64_t old = 0;
  if (r.live && !parse_i64(r.value.payload, &old)) {
    c.out.error(kNotInteger);
    return done(Status::Ok());
  }
  int64_t result = 0;
  if (__builtin_add_overflow(old, delta, &result)) {
    c.out.error("ERR increment or decrement would overflow");
    return done(Status::Ok());
  }
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof(digits), result).ptr;
  // write_value copies the digits into the session's buffer before it returns.
  rt::Task<Status> put = write_value(c, c.args[1], std::string_view(digits, end - digits),
                                     r.live ? r.value.expiry_ms : kNoExpiry);
  if (!put.is_ready()) return reply_integer_after(c, std::move(put), result);
  Status s = put.take();
  if (s.ok()) c.out.integer(result);
  return done(std::move(s));
}

rt::Task<Status> incr_rest(Ctx& c, rt::Task<Status> read, int64_t delta) {
  SHOAL_CO_TRY(co_await read);
  co_return co_await incr_apply(c, delta);
}

// INCR/INCRBY/DECR/DECRBY: adds delta to the key's integer (absent: 0), keeping its expiry.
rt::Task<Status> incr_by(Ctx& c, int64_t delta) {
  rt::Task<Status> read = read_key(c, c.args[1], &c.state.read);
  if (!read.is_ready()) return incr_rest(c, std::move(read), delta);
  if (Status s = read.take(); !s.ok()) return done(std::move(s));
  return incr_apply(c, delta);
}

// The delta argument of INCRBY/DECRBY, or false (reply written).
bool delta_arg(Ctx& c, int64_t* delta) {
  if (parse_i64(c.args[2], delta)) return true;
  c.out.error(kNotInteger);
  return false;
}

// DEL and EXISTS: replies how many arguments name live keys (a repeated key counts again for
// EXISTS; for DEL it is gone the second time: the transaction sees its own deletes). With
// `remove`, every key found is deleted, expired ones too.
rt::Task<Status> count_live_keys(Ctx& c, bool remove) {
  int64_t live = 0;
  for (size_t i = 1; i < c.args.size(); ++i) {
    Read r;
    SHOAL_CO_TRY(co_await read_key(c, c.args[i], &r));
    if (remove && r.found) SHOAL_CO_TRY(co_await c.txn->del(c.args[i]));
    live += r.live ? 1 : 0;
  }
  c.out.integer(live);
  co_return Status::Ok();
}

}  // namespace

namespace {
rt::Task<Status> get_rest(Ctx& c, rt::Task<Status> read) {
  SHOAL_CO_TRY(co_await read);
  reply_value(c, c.state.read);
  co_return Status::Ok();
}
}  // namespace

rt::Task<Status> cmd_get(Ctx& c) {
  // read_key's work, without its ready task in between (a GET is most of a read workload).
  rt::Task<Status> got = c.txn->get(c.args[1], &c.state.raw, &c.state.read_version);
  if (!got.is_ready()) return get_rest(c, finish_read(c, std::move(got), &c.state.read));
  Status s = to_read(c, got.take(), &c.state.read);
  if (s.ok()) reply_value(c, c.state.read);
  return done(std::move(s));
}

namespace {
rt::Task<Status> reply_ok_after(Ctx& c, rt::Task<Status> put) {
  SHOAL_CO_TRY(co_await put);
  c.out.simple("OK");
  co_return Status::Ok();
}

rt::Task<Status> set_with_options(Ctx& c) {
  SetOptions o;
  if (!parse_set_options(c.args, &o)) {
    c.out.error("ERR syntax error");
    co_return Status::Ok();
  }
  uint64_t expiry = kNoExpiry;
  if (!value_fits(c, c.args[2]) || !expiry_of(c, o, &expiry)) co_return Status::Ok();
  Read r;
  // A plain SET is a blind write: no read, so nothing to validate at commit.
  if (o.get || o.nx || o.xx || o.keepttl) SHOAL_CO_TRY(co_await read_key(c, c.args[1], &r));
  if (o.get) reply_value(c, r);
  if ((o.nx && r.live) || (o.xx && !r.live)) {
    if (!o.get) c.out.null();
    co_return Status::Ok();
  }
  if (o.keepttl && r.live) expiry = r.value.expiry_ms;
  if (expiry != kNoExpiry && expiry <= c.now_ms) {
    SHOAL_CO_TRY(
        co_await c.txn->del(c.args[1]));  // already expired (EXAT in the past): as Redis, gone
  } else {
    SHOAL_CO_TRY(co_await write_value(c, c.args[1], c.args[2], expiry));
  }
  if (!o.get) c.out.simple("OK");
  co_return Status::Ok();
}
}  // namespace

rt::Task<Status> cmd_set(Ctx& c) {
  if (c.args.size() != 3) return set_with_options(c);
  // A plain SET, a blind write: as set_with_options without options.
  if (!value_fits(c, c.args[2])) return done(Status::Ok());
  rt::Task<Status> put = write_value(c, c.args[1], c.args[2], kNoExpiry);
  if (!put.is_ready()) return reply_ok_after(c, std::move(put));
  Status s = put.take();
  if (s.ok()) c.out.simple("OK");
  return done(std::move(s));
}

rt::Task<Status> cmd_setnx(Ctx& c) {
  if (!value_fits(c, c.args[2])) co_return Status::Ok();
  Read r;
  SHOAL_CO_TRY(co_await read_key(c, c.args[1], &r));
  if (!r.live) SHOAL_CO_TRY(co_await write_value(c, c.args[1], c.args[2], kNoExpiry));
  c.out.integer(r.live ? 0 : 1);
  co_return Status::Ok();
}

rt::Task<Status> cmd_getset(Ctx& c) {
  if (!value_fits(c, c.args[2])) co_return Status::Ok();
  Read r;
  SHOAL_CO_TRY(co_await read_key(c, c.args[1], &r));
  SHOAL_CO_TRY(co_await write_value(c, c.args[1], c.args[2], kNoExpiry));
  reply_value(c, r);
  co_return Status::Ok();
}

rt::Task<Status> cmd_getdel(Ctx& c) {
  Read r;
  SHOAL_CO_TRY(co_await read_key(c, c.args[1], &r));
  if (r.found) SHOAL_CO_TRY(co_await c.txn->del(c.args[1]));
  reply_value(c, r);
  co_return Status::Ok();
}

rt::Task<Status> cmd_del(Ctx& c) {
  return count_live_keys(c, /*remove=*/true);  // not a coroutine: no frame of its own
}
rt::Task<Status> cmd_exists(Ctx& c) {
  return count_live_keys(c, /*remove=*/false);  // not a coroutine: no frame of its own
}

rt::Task<Status> cmd_mget(Ctx& c) {
  c.out.array_header(c.args.size() - 1);
  for (size_t i = 1; i < c.args.size(); ++i) {
    Read r;
    SHOAL_CO_TRY(co_await read_key(c, c.args[i], &r));
    reply_value(c, r);
  }
  co_return Status::Ok();
}

namespace {
// MSET from the pair at args[i], whose put `put` waits.
rt::Task<Status> mset_rest(Ctx& c, size_t i, rt::Task<Status> put) {
  SHOAL_CO_TRY(co_await put);
  for (i += 2; i < c.args.size(); i += 2) {
    SHOAL_CO_TRY(co_await write_value(c, c.args[i], c.args[i + 1], kNoExpiry));
  }
  c.out.simple("OK");
  co_return Status::Ok();
}
}  // namespace

rt::Task<Status> cmd_mset(Ctx& c) {
  if (c.args.size() % 2 == 0) {
    reply_arity_error(c.out, *find_command("mset"));
    return done(Status::Ok());
  }
  for (size_t i = 2; i < c.args.size(); i += 2) {
    if (!value_fits(c, c.args[i])) return done(Status::Ok());
  }
  for (size_t i = 1; i < c.args.size(); i += 2) {  // each pass writes one pair or returns
    rt::Task<Status> put = write_value(c, c.args[i], c.args[i + 1], kNoExpiry);
    if (!put.is_ready()) return mset_rest(c, i, std::move(put));
    if (Status s = put.take(); !s.ok()) return done(std::move(s));
  }
  c.out.simple("OK");
  return done(Status::Ok());
}

rt::Task<Status> cmd_incr(Ctx& c) {
  return incr_by(c, 1);  // not a coroutine: no frame of its own
}
rt::Task<Status> cmd_decr(Ctx& c) {
  return incr_by(c, -1);  // not a coroutine: no frame of its own
}

rt::Task<Status> cmd_incrby(Ctx& c) {
  int64_t delta = 0;
  if (!delta_arg(c, &delta)) return done(Status::Ok());
  return incr_by(c, delta);
}

rt::Task<Status> cmd_decrby(Ctx& c) {
  int64_t delta = 0;
  if (!delta_arg(c, &delta)) return done(Status::Ok());
  if (delta == LLONG_MIN) {
    c.out.error("ERR decrement would overflow");
    return done(Status::Ok());
  }
  return incr_by(c, -delta);
}

rt::Task<Status> cmd_append(Ctx& c) {
  Read r;
  SHOAL_CO_TRY(co_await read_key(c, c.args[1], &r));
  std::string& payload = c.state.payload;
  payload.clear();
  if (r.live) {
    if (r.value.payload.size() + c.args[2].size() > kMaxValueBytes) {
      c.out.error(kTooBig);
      co_return Status::Ok();
    }
    payload.append(r.value.payload);
  } else if (!value_fits(c, c.args[2])) {
    co_return Status::Ok();
  }
  payload.append(c.args[2]);
  SHOAL_CO_TRY(co_await write_value(c, c.args[1], payload, r.live ? r.value.expiry_ms : kNoExpiry));
  c.out.integer(static_cast<int64_t>(payload.size()));
  co_return Status::Ok();
}

rt::Task<Status> cmd_strlen(Ctx& c) {
  Read r;
  SHOAL_CO_TRY(co_await read_key(c, c.args[1], &r));
  c.out.integer(r.live ? static_cast<int64_t>(r.value.payload.size()) : 0);
  co_return Status::Ok();
}

rt::Task<Status> cmd_dbsize(Ctx& c) {
  auto n = co_await c.state.backend.count_keys();
  if (!n.ok()) co_return n.status();
  c.out.integer(static_cast<int64_t>(*n));
  co_return Status::Ok();
}

}  // namespace shoal::resp
