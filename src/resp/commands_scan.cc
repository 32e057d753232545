// SCAN cursor [MATCH pattern] [COUNT n] [TYPE type].
//
// The key space is ordered, so a cursor stands for "after this key". Redis cursors are
// numbers, which cannot hold an 8 KiB key: the session keeps the last key of each of its
// latest kScanCursors scans under a fresh number and hands out the number. COUNT is how many
// keys one call examines (capped at kMaxScanCount), MATCH filters them afterwards, as in
// Redis; a MATCH pattern with a literal prefix restricts the scan to that prefix's range.
#include <charconv>

#include "src/resp/command_table.h"
#include "src/resp/glob.h"
#include "src/resp/value_format.h"

namespace shoal::resp {
namespace {

constexpr int64_t kMaxScanCount = 1000;
constexpr int64_t kDefaultScanCount = 10;
// SCAN needs only a value's header (format byte and expiry).
constexpr size_t kValueHeaderBytes = 9;

struct ScanArgs {
  uint64_t cursor = 0;
  int64_t count = kDefaultScanCount;
  std::string_view pattern;  // empty: no MATCH
  bool has_type = false;
  std::string_view type;
};

// Parses the arguments, or writes the error reply and returns false.
bool parse_scan(Ctx& c, ScanArgs* a) {
  const std::string_view cursor = c.args[1];
  const auto [end, ec] = std::from_chars(cursor.data(), cursor.data() + cursor.size(), a->cursor);
  if (cursor.empty() || ec != std::errc() || end != cursor.data() + cursor.size()) {
    c.out.error("ERR invalid cursor");
    return false;
  }
  for (size_t j = 2; j < c.args.size(); j += 2) {  // each pass consumes an option and its value
    if (j + 1 >= c.args.size()) {
      c.out.error("ERR syntax error");
      return false;
    }
    const std::string opt = lower(c.args[j]);
    const std::string_view value = c.args[j + 1];
    if (opt == "count") {
      if (!parse_i64(value, &a->count)) {
        c.out.error("ERR value is not an integer or out of range");
        return false;
      }
      if (a->count < 1) {
        c.out.error("ERR syntax error");
        return false;
      }
    } else if (opt == "match") {
      a->pattern = value;
    } else if (opt == "type") {
      a->has_type = true;
      a->type = value;
    } else {
      c.out.error("ERR syntax error");
      return false;
    }
  }
  return true;
}

// The first key after every key starting with prefix ("" when there is none: unbounded).
std::string prefix_end(std::string prefix) {
  while (!prefix.empty() && static_cast<uint8_t>(prefix.back()) == 0xff) prefix.pop_back();
  if (!prefix.empty()) prefix.back() = static_cast<char>(static_cast<uint8_t>(prefix.back()) + 1);
  return prefix;
}

ScanCursor* find_cursor(SessionState& s, uint64_t id) {
  for (ScanCursor& cur : s.cursors) {
    if (cur.id == id) return &cur;
  }
  return nullptr;
}

// Stores last_key under a fresh cursor number in the oldest slot. The cursor the call
// continued stays valid: a transaction retried after a conflict runs the same SCAN again.
uint64_t save_cursor(SessionState& s, std::string_view last_key) {
  ScanCursor* slot = &s.cursors[s.next_cursor_slot];
  s.next_cursor_slot = (s.next_cursor_slot + 1) % kScanCursors;
  slot->id = s.next_cursor_id++;
  slot->last_key.assign(last_key);
  return slot->id;
}

bool keep_key(Ctx& c, const ScanArgs& a, const KeyValue& kv) {
  auto decoded = decode_string(kv.value);
  // A value cut to its header decodes (the payload is cut, the expiry is whole).
  if (decoded.ok() && decoded->expired(c.now_ms)) return false;
  if (a.has_type && lower(a.type) != "string") return false;
  return a.pattern.empty() || glob_match(a.pattern, kv.key);
}

}  // namespace

rt::Task<Status> cmd_scan(Ctx& c) {
  ScanArgs a;
  if (!parse_scan(c, &a)) co_return Status::Ok();
  ScanCursor* cur = nullptr;
  if (a.cursor != 0) {
    cur = find_cursor(c.state, a.cursor);
    if (cur == nullptr) {
      c.out.error("ERR invalid cursor");
      co_return Status::Ok();
    }
  }
  const std::string prefix = glob_literal_prefix(a.pattern);
  const std::string end = prefix_end(prefix);
  ScanRange range;
  range.end = end;
  if (cur != nullptr && cur->last_key >= prefix) {
    range.start = cur->last_key;
    range.start_inclusive = false;
  } else {
    range.start = prefix;
  }
  const size_t limit = static_cast<size_t>(std::min(a.count, kMaxScanCount));
  std::vector<KeyValue>& batch = c.state.scan_batch;
  batch.clear();
  SHOAL_CO_TRY(co_await c.txn->scan(range, limit, kValueHeaderBytes, &batch));
  uint64_t next = 0;
  if (batch.size() >= limit) next = save_cursor(c.state, batch.back().key);
  size_t kept = 0;
  for (const KeyValue& kv : batch) kept += keep_key(c, a, kv) ? 1 : 0;
  char digits[24];
  const auto digits_end = std::to_chars(digits, digits + sizeof(digits), next).ptr;
  c.out.array_header(2);
  c.out.bulk(std::string_view(digits, digits_end - digits));
  c.out.array_header(kept);
  for (const KeyValue& kv : batch) {
    if (keep_key(c, a, kv)) c.out.bulk(kv.key);
  }
  co_return Status::Ok();
}

}  // namespace shoal::resp
