#include "src/resp/command_table.h"

#include <climits>
#include <unordered_map>

namespace shoal::resp {
namespace {

constexpr uint32_t kRead = kData;
constexpr uint32_t kReadWrite = kData | kWrite;

// Container subcommands (Redis names them "container|sub").
// clang-format off
// Columns: name, arity, flags, first key, last key, key step, handler, group, since, summary,
// subcommands.
constexpr CommandSpec kClientSubcommands[] = {
    {"client|getname", 2, kAdmin, 0, 0, 0, cmd_client_getname, "connection", "2.6.9",
     "Returns the name of the connection.", {}},
    {"client|id", 2, kAdmin, 0, 0, 0, cmd_client_id, "connection", "5.0.0",
     "Returns the unique client ID of the connection.", {}},
    {"client|setname", 3, kAdmin, 0, 0, 0, cmd_client_setname, "connection", "2.6.9",
     "Sets the connection name.", {}},
};

constexpr CommandSpec kCommandSubcommands[] = {
    {"command|count", 2, kAdmin, 0, 0, 0, cmd_command_count, "server", "2.8.13",
     "Returns a count of commands.", {}},
    {"command|docs", -2, kAdmin, 0, 0, 0, cmd_command_docs, "server", "7.0.0",
     "Returns documentary information about one, multiple or all commands.", {}},
    {"command|info", -2, kAdmin, 0, 0, 0, cmd_command_info, "server", "2.8.13",
     "Returns information about one, multiple or all commands.", {}},
    {"command|list", -2, kAdmin, 0, 0, 0, cmd_command_list, "server", "7.0.0",
     "Returns a list of command names.", {}},
};

constexpr CommandSpec kConfigSubcommands[] = {
    {"config|get", -3, kAdmin, 0, 0, 0, cmd_config_get, "server", "2.0.0",
     "Returns the effective values of configuration parameters.", {}},
};

constexpr CommandSpec kCommands[] = {
    {"append", 3, kReadWrite, 1, 1, 1, cmd_append, "string", "2.0.0",
     "Appends a string to the value of a key. Creates the key if it doesn't exist.", {}},
    {"auth", -2, kAdmin | kNoAuth, 0, 0, 0, cmd_auth, "connection", "1.0.0",
     "Authenticates the connection.", {}},
    {"client", -2, kAdmin, 0, 0, 0, nullptr, "connection", "2.4.0",
     "A container for client connection commands.", kClientSubcommands},
    {"command", -1, kAdmin, 0, 0, 0, cmd_command, "server", "2.8.13",
     "Returns detailed information about all commands.", kCommandSubcommands},
    {"config", -2, kAdmin, 0, 0, 0, nullptr, "server", "2.0.0",
     "A container for server configuration commands.", kConfigSubcommands},
    {"dbsize", 1, kAdmin, 0, 0, 0, cmd_dbsize, "server", "1.0.0",
     "Returns the number of keys in the database.", {}},
    {"decr", 2, kReadWrite, 1, 1, 1, cmd_decr, "string", "1.0.0",
     "Decrements the integer value of a key by one.", {}},
    {"decrby", 3, kReadWrite, 1, 1, 1, cmd_decrby, "string", "1.0.0",
     "Decrements a number from the integer value of a key.", {}},
    {"del", -2, kReadWrite, 1, -1, 1, cmd_del, "generic", "1.0.0",
     "Deletes one or more keys.", {}},
    {"discard", 1, kNoQueue, 0, 0, 0, nullptr, "transactions", "2.0.0",
     "Discards a transaction.", {}},
    {"echo", 2, kAdmin, 0, 0, 0, cmd_echo, "connection", "1.0.0",
     "Returns the given string.", {}},
    {"exec", 1, kNoQueue, 0, 0, 0, nullptr, "transactions", "1.2.0",
     "Executes all commands in a transaction.", {}},
    {"exists", -2, kRead, 1, -1, 1, cmd_exists, "generic", "1.0.0",
     "Determines whether one or more keys exist.", {}},
    {"get", 2, kRead, 1, 1, 1, cmd_get, "string", "1.0.0",
     "Returns the string value of a key.", {}},
    {"getdel", 2, kReadWrite, 1, 1, 1, cmd_getdel, "string", "6.2.0",
     "Returns the string value of a key after deleting the key.", {}},
    {"getset", 3, kReadWrite, 1, 1, 1, cmd_getset, "string", "1.0.0",
     "Returns the previous string value of a key after setting it to a new value.", {}},
    {"hello", -1, kAdmin | kNoAuth, 0, 0, 0, cmd_hello, "connection", "6.0.0",
     "Handshakes with the server.", {}},
    {"incr", 2, kReadWrite, 1, 1, 1, cmd_incr, "string", "1.0.0",
     "Increments the integer value of a key by one.", {}},
    {"incrby", 3, kReadWrite, 1, 1, 1, cmd_incrby, "string", "1.0.0",
     "Increments the integer value of a key by a number.", {}},
    {"info", -1, kAdmin, 0, 0, 0, cmd_info, "server", "1.0.0",
     "Returns information and statistics about the server.", {}},
    {"mget", -2, kRead, 1, -1, 1, cmd_mget, "string", "1.0.0",
     "Atomically returns the string values of one or more keys.", {}},
    {"mset", -3, kReadWrite, 1, -1, 2, cmd_mset, "string", "1.0.1",
     "Atomically creates or modifies the string values of one or more keys.", {}},
    {"multi", 1, kNoQueue, 0, 0, 0, nullptr, "transactions", "1.2.0",
     "Starts a transaction.", {}},
    {"ping", -1, kAdmin, 0, 0, 0, cmd_ping, "connection", "1.0.0",
     "Returns the server's liveliness response.", {}},
    {"quit", -1, kNoQueue | kNoAuth, 0, 0, 0, cmd_quit, "connection", "1.0.0",
     "Closes the connection.", {}},
    {"scan", -2, kRead, 0, 0, 0, cmd_scan, "generic", "2.8.0",
     "Iterates over the key names in the database.", {}},
    {"select", 2, kAdmin, 0, 0, 0, cmd_select, "connection", "1.0.0",
     "Changes the selected database.", {}},
    {"set", -3, kReadWrite, 1, 1, 1, cmd_set, "string", "1.0.0",
     "Sets the string value of a key, ignoring its type. The key is created if it doesn't exist.",
     {}},
    {"setnx", 3, kReadWrite, 1, 1, 1, cmd_setnx, "string", "1.0.0",
     "Set the string value of a key only when the key doesn't exist.", {}},
    {"strlen", 2, kRead, 1, 1, 1, cmd_strlen, "string", "2.2.0",
     "Returns the length of a string value.", {}},
    {"unwatch", 1, kAdmin, 0, 0, 0, cmd_unwatch, "transactions", "2.2.0",
     "Forgets about watched keys of a transaction.", {}},
    {"watch", -2, kNoQueue, 1, -1, 1, nullptr, "transactions", "2.2.0",
     "Monitors changes to keys to determine the execution of a transaction.", {}},
};
// clang-format on

// Lower-cases a command name into a small buffer; names longer than it are unknown anyway.
bool lower_name(std::string_view name, char (&buf)[32], std::string_view* out) {
  if (name.empty() || name.size() > sizeof(buf)) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    buf[i] = (c >= 'A' && c <= 'Z') ? static_cast<char>(c + ('a' - 'A')) : c;
  }
  *out = std::string_view(buf, name.size());
  return true;
}

const std::unordered_map<std::string_view, const CommandSpec*>& by_name() {
  static const auto* map = [] {
    auto* m = new std::unordered_map<std::string_view, const CommandSpec*>();
    for (const CommandSpec& spec : kCommands) m->emplace(spec.name, &spec);
    return m;
  }();
  return *map;
}

}  // namespace

const CommandSpec* find_command(std::string_view name) {
  char buf[32];
  std::string_view key;
  if (!lower_name(name, buf, &key)) return nullptr;
  const auto& map = by_name();
  auto it = map.find(key);
  return it == map.end() ? nullptr : it->second;
}

const CommandSpec* find_subcommand(const CommandSpec& container, std::string_view name) {
  char buf[32];
  std::string_view key;
  if (!lower_name(name, buf, &key)) return nullptr;
  for (const CommandSpec& sub : container.subcommands) {
    // "client|setname": compare what follows the container's name and the '|'.
    if (sub.name.substr(container.name.size() + 1) == key) return &sub;
  }
  return nullptr;
}

std::span<const CommandSpec> all_commands() {
  return kCommands;
}

bool parse_i64(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  if (s.size() == 1 && s[0] == '0') {
    *out = 0;
    return true;
  }
  size_t i = 0;
  const bool negative = s[0] == '-';
  if (negative) i = 1;
  if (i == s.size() || s[i] < '1' || s[i] > '9') return false;
  uint64_t v = 0;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    const uint64_t digit = static_cast<uint64_t>(s[i] - '0');
    if (v > (UINT64_MAX - digit) / 10) return false;
    v = v * 10 + digit;
  }
  if (negative) {
    if (v > static_cast<uint64_t>(LLONG_MAX) + 1) return false;
    *out = static_cast<int64_t>(0 - v);
  } else {
    if (v > static_cast<uint64_t>(LLONG_MAX)) return false;
    *out = static_cast<int64_t>(v);
  }
  return true;
}

void reply_arity_error(ReplyWriter& out, const CommandSpec& spec) {
  std::string msg = "ERR wrong number of arguments for '";
  msg += spec.name;
  msg += "' command";
  out.error(msg);
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + ('a' - 'A'));
  }
  return out;
}

}  // namespace shoal::resp
