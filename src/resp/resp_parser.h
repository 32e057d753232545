// RequestParser: an incremental parser of Redis client requests over a connection's receive
// buffer. Both forms a client may send are accepted:
//   - RESP arrays of bulk strings ("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"), what client libraries and
//     redis-cli send;
//   - inline commands ("GET k\r\n", "\n" ending also accepted), what telnet sends, with Redis's
//     quoting: "double quoted" with \n \r \t \b \a \\ \" \xHH escapes, and 'single quoted'
//     with \' as the only escape.
//
// Use (one parser per connection, owned by the connection's thread; not thread-safe):
//   buf = the bytes received and not yet consumed, oldest first;
//   r = parser.parse(buf);  error -> reply "-ERR " + message and close the connection;
//                           0     -> wait for more bytes, then call again with buf extended;
//                           n > 0 -> one request of n bytes: args() views it; consume n bytes.
// A request with no arguments (an empty inline line, "*0\r\n", "*-1\r\n") is returned as n > 0
// with args() empty: Redis ignores those, and so should the caller (no reply).
//
// Incremental: after a 0 return, the parser remembers how far it got (offsets from the start of
// the request, so the caller may move its buffer, e.g. grow or compact it). REQUIRES: the next
// call's buf starts with the same request bytes, unchanged, plus zero or more new ones. Each
// byte of a request is examined a bounded number of times however it is split across reads.
//
// Zero-copy: args() are views into buf (or, for inline arguments with escapes, into the
// parser's scratch). They stay valid until the next parse() or reset() call, or until the
// caller modifies, frees or moves the buffer bytes they point into, whichever comes first.
//
// Bounded: every limit below is checked before any byte beyond it is waited for, so a peer can
// make the caller hold at most max_request_bytes (+ the bytes of one read) per connection.
// Errors carry Redis's wording ("Protocol error: invalid bulk length", ...); after an error the
// parser stays failed (every later call returns the same error) until reset().
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/status.h"

namespace shoal::resp {

struct ParserLimits {
  // Arguments in one command. MSET of N keys needs 2N + 1.
  uint32_t max_args = 64 * 1024;
  // One bulk string: a Shoal value is at most 1 MiB, a key 8 KiB; the slack lets the command
  // layer answer an oversized value with its own error instead of a protocol error.
  uint32_t max_bulk_bytes = (1u << 20) + 64 * 1024;
  // One whole request, headers included (MSET of several large values).
  uint32_t max_request_bytes = 8u << 20;
  // One inline command line (Redis: PROTO_INLINE_MAX_SIZE, 64 KiB).
  uint32_t max_inline_bytes = 64 * 1024;
};

class RequestParser {
 public:
  explicit RequestParser(ParserLimits limits = {});

  // Parses the request at the front of buf. Returns its size in bytes when complete, 0 when
  // more bytes are needed, or InvalidArgument with a Redis protocol error message.
  [[nodiscard]] Result<size_t> parse(std::string_view buf);

  // The arguments of the request the last parse() completed. See the validity rule above.
  std::span<const std::string_view> args() const { return args_; }

  // Bytes the parser needs beyond buf.size() before it can make progress (at least 1 while a
  // request is incomplete): a connection may size its next read by it.
  size_t bytes_wanted() const { return wanted_; }

  // Forgets any partial request and error.
  void reset();

 private:
  struct Span {
    uint32_t offset;
    uint32_t length;
  };
  enum class Stage : uint8_t { kStart, kArrayArgs, kFailed };

  // A whole array request at the front of buf whose count lines are plain digits (the usual
  // case, a pipelined client's every request but a batch's last, cut one): parsed in one pass
  // straight into args_ (true, *used its size). False for anything else, incomplete or
  // malformed, having decided nothing: parse_array() then reads it as before. Half of an
  // MSET's instructions were the general path's, which keeps offsets for a request that may
  // arrive in pieces.
  bool parse_whole_array(std::string_view buf, size_t* used);
  Result<size_t> parse_array(std::string_view buf);
  Result<size_t> parse_inline(std::string_view buf);
  // Reads a "<prefix><integer>\r\n" line at pos_: kRead (*value and pos_ past it),
  // kIncomplete, or kFailed (malformed: the parser failed, error_ says why). Not a Result: a
  // Status built and dropped three times per GET showed in its profile.
  enum class Line { kRead, kIncomplete, kFailed };
  Line read_count_line(std::string_view buf, char prefix, int64_t* value, const char* too_big,
                       const char* invalid);
  Status split_inline(std::string_view line);
  Status fail(const char* message);
  void finish(std::string_view buf);

  ParserLimits limits_;
  Stage stage_ = Stage::kStart;
  Status error_;
  uint32_t pos_ = 0;       // the next unparsed byte, from the start of the request
  uint32_t expected_ = 0;  // array stage: the arguments the header announced
  int64_t bulk_len_ = -1;  // array stage: the bulk whose header was read, -1 for none
  size_t wanted_ = 1;
  std::vector<Span> spans_;
  std::vector<std::string_view> args_;
  std::string scratch_;  // inline arguments, unescaped
};

}  // namespace shoal::resp
