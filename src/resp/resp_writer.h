// ReplyWriter: encodes replies in RESP2 or RESP3 into a connection's output buffer.
//
// The protocol is per connection (HELLO switches it); every call encodes in the current one,
// so the command layer writes each reply once and RESP3-only types degrade as Redis degrades
// them: map -> flat array of 2n, set -> array, null -> null bulk ($-1) or null array (*-1),
// double -> bulk string, boolean -> integer 0/1, verbatim string -> bulk string.
//
// Output and back-pressure: bytes accumulate until the connection sends them (pending(),
// consume()). Two limits, both per writer:
//   - soft_limit_bytes: over_soft_limit() turns true; the connection stops parsing requests
//     (and stops reading the socket) until the peer drains the output below it. A reply
//     already started is always written whole, so the buffer can exceed the soft limit by one
//     reply.
//   - hard_limit_bytes: a reply that would take the buffer above it is not written: the
//     writer is overflowed() from then on (every later write is dropped) and the connection
//     must close, as redis-server closes a client over its output buffer limit. This bounds
//     the memory one connection can pin (MGET of thousands of 1 MiB values).
// Threads: owned by the connection's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace shoal::resp {

struct WriterLimits {
  size_t soft_limit_bytes = 1u << 20;
  size_t hard_limit_bytes = 64u << 20;
};

class ReplyWriter {
 public:
  explicit ReplyWriter(WriterLimits limits = {});

  // REQUIRES: version is 2 or 3.
  void set_protocol(int version);
  int protocol() const { return protocol_; }

  // "+OK". CR and LF in s become spaces (a simple string cannot hold them).
  void simple(std::string_view s);
  // "-ERR message": s starts with the error code (ERR, WRONGTYPE, EXECABORT, ...). CR and LF
  // become spaces, as redis-server does.
  void error(std::string_view s);
  void integer(int64_t v);
  void bulk(std::string_view s);
  // Null bulk string (RESP2 "$-1", RESP3 "_").
  void null();
  // Null array (RESP2 "*-1", RESP3 "_"): EXEC's reply when a watched key changed.
  void null_array();
  // Headers: the next n (map: 2n, key then value) replies are the elements.
  void array_header(size_t n);
  void map_header(size_t n);
  void set_header(size_t n);
  void double_value(double v);
  void boolean(bool v);
  // RESP3 "=<len>\r\ntxt:<text>\r\n"; RESP2 a bulk string of text. REQUIRES: format is 3 bytes.
  void verbatim(std::string_view format, std::string_view text);
  // Bytes already encoded as replies in this writer's protocol (EXEC's staged replies).
  void append_raw(std::string_view encoded);
  // Marks the writer overflowed: the connection must close (a staged reply overflowed).
  void set_overflowed() { overflowed_ = true; }

  std::string_view pending() const { return std::string_view(buf_).substr(head_); }
  size_t pending_bytes() const { return buf_.size() - head_; }
  // REQUIRES: n <= pending_bytes().
  void consume(size_t n);
  // Takes back the bytes written after `mark` (a written_total() taken earlier): the command
  // layer rolls back the reply of a transaction attempt that conflicted. REQUIRES:
  // consumed_total() <= mark <= written_total() (nothing consumed since the mark).
  void rollback(uint64_t mark);
  // Frees the buffer's memory when nothing is pending (an idle connection).
  void shrink() {
    if (pending_bytes() == 0) {
      std::string().swap(buf_);
      head_ = 0;
    }
  }
  size_t capacity_bytes() const { return buf_.capacity(); }
  bool over_soft_limit() const { return pending_bytes() >= limits_.soft_limit_bytes; }
  bool overflowed() const { return overflowed_; }
  // Bytes ever written / consumed: positions that stay valid across consume().
  uint64_t written_total() const { return consumed_total_ + pending_bytes(); }
  uint64_t consumed_total() const { return consumed_total_; }

 private:
  // Whether n more bytes fit under the hard limit; marks overflow when not.
  bool reserve(size_t n);
  void header(char type, int64_t n);
  void line(char type, std::string_view s);

  WriterLimits limits_;
  int protocol_ = 2;
  bool overflowed_ = false;
  std::string buf_;
  size_t head_ = 0;  // bytes of buf_ already consumed
  uint64_t consumed_total_ = 0;
};

}  // namespace shoal::resp
