// Connection and server commands: PING ECHO HELLO SELECT QUIT INFO UNWATCH CLIENT COMMAND.
#include <string>

#include "src/base/constant_time.h"
#include "src/resp/command_table.h"
#include "src/resp/glob.h"

namespace shoal::resp {
namespace {

// The Redis version whose command semantics the session follows (HELLO, INFO).
constexpr std::string_view kRedisVersion = "7.0.0";

bool valid_client_name(std::string_view name) {
  for (char ch : name) {
    if (ch < '!' || ch > '~') return false;  // Redis: no spaces, newlines or specials
  }
  return true;
}

void reply_hello(Ctx& c) {
  c.out.map_header(7);
  c.out.bulk("server");
  c.out.bulk("shoal");
  c.out.bulk("version");
  c.out.bulk(kRedisVersion);
  c.out.bulk("proto");
  c.out.integer(c.state.protocol);
  c.out.bulk("id");
  c.out.integer(static_cast<int64_t>(c.state.options.client_id));
  c.out.bulk("mode");
  c.out.bulk("standalone");
  c.out.bulk("role");
  c.out.bulk("master");
  c.out.bulk("modules");
  c.out.array_header(0);
}

// HELLO's options after the version: AUTH user pass, SETNAME name. False: reply written.
// The only user is "default"; without a password it accepts any (Redis's "nopass"). The
// comparison takes the same time wherever the first difference is.
bool password_matches(const SessionState& s, std::string_view user, std::string_view password) {
  if (user != "default") return false;
  const std::string_view want = s.options.password;
  if (want.empty()) return true;
  return constant_time_equal(want, password);
}

bool parse_hello_options(Ctx& c, std::string_view* setname, bool* has_setname) {
  for (size_t j = 2; j < c.args.size(); ++j) {  // each pass consumes 2 or 3 arguments
    const std::string opt = lower(c.args[j]);
    const size_t left = c.args.size() - j - 1;
    if (opt == "auth" && left >= 2) {
      if (!password_matches(c.state, c.args[j + 1], c.args[j + 2])) {
        c.out.error("WRONGPASS invalid username-password pair or user is disabled.");
        return false;
      }
      c.state.authenticated = true;
      j += 2;
    } else if (opt == "setname" && left >= 1) {
      *setname = c.args[++j];
      *has_setname = true;
    } else {
      c.out.error("ERR Syntax error in HELLO option '" + std::string(c.args[j]) + "'");
      return false;
    }
  }
  return true;
}

void info_section(std::string* out, std::string_view title, std::string_view body) {
  if (!out->empty()) out->append("\r\n");
  out->append("# ");
  out->append(title);
  out->append("\r\n");
  out->append(body);
}

bool wants_section(Args args, std::string_view name) {
  if (args.size() < 2) return true;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string s = lower(args[i]);
    if (s == name || s == "all" || s == "default" || s == "everything") return true;
  }
  return false;
}

// One COMMAND INFO entry: name, arity, flags, first/last key, step, ACL categories, tips,
// key specs, subcommands.
void reply_command_info(Ctx& c, const CommandSpec& spec) {
  c.out.array_header(10);
  c.out.bulk(spec.name);
  c.out.integer(spec.arity);
  const bool write = (spec.flags & kWrite) != 0;
  const bool read = (spec.flags & kData) != 0 && !write;
  c.out.set_header((write ? 1 : 0) + (read ? 1 : 0));
  if (write) c.out.simple("write");
  if (read) c.out.simple("readonly");
  c.out.integer(spec.first_key);
  c.out.integer(spec.last_key);
  c.out.integer(spec.key_step);
  c.out.set_header(1);
  c.out.simple(std::string("@") + std::string(spec.group));
  c.out.array_header(0);
  c.out.array_header(0);
  c.out.array_header(spec.subcommands.size());
  for (const CommandSpec& sub : spec.subcommands) reply_command_info(c, sub);
}

void reply_command_doc(Ctx& c, const CommandSpec& spec) {
  c.out.bulk(spec.name);
  c.out.map_header(spec.subcommands.empty() ? 3 : 4);
  c.out.bulk("summary");
  c.out.bulk(spec.summary);
  c.out.bulk("since");
  c.out.bulk(spec.since);
  c.out.bulk("group");
  c.out.bulk(spec.group);
  if (spec.subcommands.empty()) return;
  c.out.bulk("subcommands");
  c.out.map_header(spec.subcommands.size());
  for (const CommandSpec& sub : spec.subcommands) reply_command_doc(c, sub);
}

}  // namespace

rt::Task<Status> cmd_ping(Ctx& c) {
  if (c.args.size() > 2) {
    reply_arity_error(c.out, *find_command("ping"));
  } else if (c.args.size() == 2) {
    c.out.bulk(c.args[1]);
  } else {
    c.out.simple("PONG");
  }
  co_return Status::Ok();
}

rt::Task<Status> cmd_echo(Ctx& c) {
  c.out.bulk(c.args[1]);
  co_return Status::Ok();
}

rt::Task<Status> cmd_hello(Ctx& c) {
  int64_t version = c.state.protocol;
  if (c.args.size() >= 2) {
    if (!parse_i64(c.args[1], &version)) {
      c.out.error("ERR Protocol version is not an integer or out of range");
      co_return Status::Ok();
    }
    if (version < 2 || version > 3) {
      c.out.error("NOPROTO unsupported protocol version");
      co_return Status::Ok();
    }
  }
  std::string_view setname;
  bool has_setname = false;
  if (!parse_hello_options(c, &setname, &has_setname)) co_return Status::Ok();
  if (!c.state.authenticated) {
    c.out.error(
        "NOAUTH HELLO must be called with the client already authenticated, otherwise the "
        "HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and "
        "select the RESP protocol version at the same time");
    co_return Status::Ok();
  }
  if (has_setname) {
    if (!valid_client_name(setname)) {
      c.out.error("ERR Client names cannot contain spaces, newlines or special characters.");
      co_return Status::Ok();
    }
    c.state.client_name.assign(setname);
  }
  c.state.protocol = static_cast<int>(version);
  c.out.set_protocol(c.state.protocol);
  reply_hello(c);
  co_return Status::Ok();
}

// AUTH <password> | AUTH <user> <password>, with Redis 7's replies.
rt::Task<Status> cmd_auth(Ctx& c) {
  if (c.args.size() > 3) {
    c.out.error("ERR syntax error");
    co_return Status::Ok();
  }
  if (c.args.size() == 2 && c.state.options.password.empty()) {
    c.out.error(
        "ERR AUTH <password> called without any password configured for the default user. "
        "Are you sure your configuration is correct?");
    co_return Status::Ok();
  }
  const std::string_view user = c.args.size() == 3 ? c.args[1] : "default";
  if (!password_matches(c.state, user, c.args.back())) {
    c.out.error("WRONGPASS invalid username-password pair or user is disabled.");
    co_return Status::Ok();
  }
  c.state.authenticated = true;
  c.out.simple("OK");
  co_return Status::Ok();
}

rt::Task<Status> cmd_select(Ctx& c) {
  int64_t db = 0;
  if (!parse_i64(c.args[1], &db)) {
    c.out.error("ERR value is not an integer or out of range");
  } else if (db != 0) {
    c.out.error("ERR DB index is out of range");
  } else {
    c.out.simple("OK");
  }
  co_return Status::Ok();
}

rt::Task<Status> cmd_quit(Ctx& c) {
  c.state.quit = true;
  c.out.simple("OK");
  co_return Status::Ok();
}

rt::Task<Status> cmd_unwatch(Ctx& c) {
  c.state.watched.clear();
  c.out.simple("OK");
  co_return Status::Ok();
}

rt::Task<Status> cmd_info(Ctx& c) {
  std::string text;
  if (wants_section(c.args, "server")) {
    info_section(&text, "Server",
                 "redis_version:" + std::string(kRedisVersion) +
                     "\r\nshoal_version:0.1\r\nredis_mode:standalone\r\narch_bits:64\r\n");
  }
  if (wants_section(c.args, "clients")) {
    info_section(&text, "Clients",
                 "client_id:" + std::to_string(c.state.options.client_id) +
                     "\r\nresp:" + std::to_string(c.state.protocol) + "\r\n");
  }
  if (wants_section(c.args, "stats")) {
    info_section(&text, "Stats",
                 "session_commands_processed:" + std::to_string(c.state.commands) +
                     "\r\nsession_transactions_committed:" + std::to_string(c.state.commits) +
                     "\r\nsession_transaction_conflicts:" + std::to_string(c.state.conflicts) +
                     "\r\n");
  }
  if (wants_section(c.args, "keyspace")) {
    auto keys = co_await c.state.backend.count_keys();
    if (!keys.ok()) co_return keys.status();
    std::string body;
    if (*keys > 0) body = "db0:keys=" + std::to_string(*keys) + ",expires=0,avg_ttl=0\r\n";
    info_section(&text, "Keyspace", body);
  }
  c.out.verbatim("txt", text);
  co_return Status::Ok();
}

rt::Task<Status> cmd_client_setname(Ctx& c) {
  if (!valid_client_name(c.args[2])) {
    c.out.error("ERR Client names cannot contain spaces, newlines or special characters.");
    co_return Status::Ok();
  }
  c.state.client_name.assign(c.args[2]);
  c.out.simple("OK");
  co_return Status::Ok();
}

rt::Task<Status> cmd_client_getname(Ctx& c) {
  if (c.state.client_name.empty()) {
    c.out.null();
  } else {
    c.out.bulk(c.state.client_name);
  }
  co_return Status::Ok();
}

rt::Task<Status> cmd_client_id(Ctx& c) {
  c.out.integer(static_cast<int64_t>(c.state.options.client_id));
  co_return Status::Ok();
}

// CONFIG GET: the few parameters clients ask about (redis-benchmark reads save and
// appendonly), read-only; Shoal is configured by its cluster config, not by CONFIG SET.
rt::Task<Status> cmd_config_get(Ctx& c) {
  static constexpr std::pair<std::string_view, std::string_view> kParams[] = {
      {"appendonly", "no"}, {"databases", "1"},
      {"maxmemory", "0"},   {"proto-max-bulk-len", "1048576"},
      {"save", ""},
  };
  std::vector<const std::pair<std::string_view, std::string_view>*> hits;
  for (const auto& param : kParams) {
    for (size_t i = 2; i < c.args.size(); ++i) {
      if (glob_match(lower(c.args[i]), param.first)) {
        hits.push_back(&param);
        break;
      }
    }
  }
  c.out.map_header(hits.size());
  for (const auto* h : hits) {
    c.out.bulk(h->first);
    c.out.bulk(h->second);
  }
  co_return Status::Ok();
}

rt::Task<Status> cmd_command(Ctx& c) {
  c.out.array_header(all_commands().size());
  for (const CommandSpec& spec : all_commands()) reply_command_info(c, spec);
  co_return Status::Ok();
}

rt::Task<Status> cmd_command_count(Ctx& c) {
  c.out.integer(static_cast<int64_t>(all_commands().size()));
  co_return Status::Ok();
}

rt::Task<Status> cmd_command_info(Ctx& c) {
  if (c.args.size() == 2) co_return co_await cmd_command(c);
  c.out.array_header(c.args.size() - 2);
  for (size_t i = 2; i < c.args.size(); ++i) {
    const CommandSpec* spec = find_command(c.args[i]);
    if (spec == nullptr) {
      c.out.null();
    } else {
      reply_command_info(c, *spec);
    }
  }
  co_return Status::Ok();
}

rt::Task<Status> cmd_command_docs(Ctx& c) {
  std::vector<const CommandSpec*> specs;
  if (c.args.size() == 2) {
    for (const CommandSpec& spec : all_commands()) specs.push_back(&spec);
  } else {
    for (size_t i = 2; i < c.args.size(); ++i) {
      const CommandSpec* spec = find_command(c.args[i]);
      if (spec != nullptr) specs.push_back(spec);
    }
  }
  c.out.map_header(specs.size());
  for (const CommandSpec* spec : specs) reply_command_doc(c, *spec);
  co_return Status::Ok();
}

rt::Task<Status> cmd_command_list(Ctx& c) {
  c.out.array_header(all_commands().size());
  for (const CommandSpec& spec : all_commands()) c.out.bulk(spec.name);
  co_return Status::Ok();
}

}  // namespace shoal::resp
