#include "src/resp/resp_writer.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "src/base/assert.h"

namespace shoal::resp {
namespace {

// Compaction threshold: the consumed prefix is dropped once it is both this large and more
// than half the buffer, so a connection that keeps a little pending does not memmove per send.
constexpr size_t kCompactBytes = 64 * 1024;

}  // namespace

ReplyWriter::ReplyWriter(WriterLimits limits) : limits_(limits) {
  SHOAL_ASSERT(limits_.soft_limit_bytes <= limits_.hard_limit_bytes, "soft %zu > hard %zu",
               limits_.soft_limit_bytes, limits_.hard_limit_bytes);
}

void ReplyWriter::set_protocol(int version) {
  SHOAL_ASSERT(version == 2 || version == 3, "RESP version %d", version);
  protocol_ = version;
}

bool ReplyWriter::reserve(size_t n) {
  if (overflowed_) return false;
  if (pending_bytes() + n > limits_.hard_limit_bytes) {
    overflowed_ = true;
    return false;
  }
  return true;
}

void ReplyWriter::header(char type, int64_t n) {
  char tmp[24];
  tmp[0] = type;
  char* end = std::to_chars(tmp + 1, tmp + sizeof(tmp) - 2, n).ptr;
  *end++ = '\r';
  *end++ = '\n';
  if (reserve(end - tmp)) buf_.append(tmp, end - tmp);
}

void ReplyWriter::line(char type, std::string_view s) {
  if (!reserve(s.size() + 3)) return;
  buf_.push_back(type);
  const size_t at = buf_.size();
  buf_.append(s);
  for (size_t i = at; i < buf_.size(); ++i) {
    if (buf_[i] == '\r' || buf_[i] == '\n') buf_[i] = ' ';
  }
  buf_.append("\r\n", 2);
}

void ReplyWriter::simple(std::string_view s) {
  line('+', s);
}
void ReplyWriter::error(std::string_view s) {
  line('-', s);
}
void ReplyWriter::integer(int64_t v) {
  header(':', v);
}

void ReplyWriter::bulk(std::string_view s) {
  if (!reserve(s.size() + 24)) return;
  // A short value (a GET's usual reply) goes in with one append: three appends were a third
  // of a pipelined GET's reply.
  constexpr size_t kShortBytes = 64;
  if (s.size() <= kShortBytes) {
    char tmp[24 + kShortBytes];
    tmp[0] = '$';
    char* end = std::to_chars(tmp + 1, tmp + 22, s.size()).ptr;
    *end++ = '\r';
    *end++ = '\n';
    std::memcpy(end, s.data(), s.size());
    end += s.size();
    *end++ = '\r';
    *end++ = '\n';
    buf_.append(tmp, static_cast<size_t>(end - tmp));
    return;
  }
  header('$', static_cast<int64_t>(s.size()));
  buf_.append(s);
  buf_.append("\r\n", 2);
}

void ReplyWriter::null() {
  if (protocol_ == 3) {
    if (reserve(3)) buf_.append("_\r\n", 3);
  } else if (reserve(5)) {
    buf_.append("$-1\r\n", 5);
  }
}

void ReplyWriter::null_array() {
  if (protocol_ == 3) {
    if (reserve(3)) buf_.append("_\r\n", 3);
  } else if (reserve(5)) {
    buf_.append("*-1\r\n", 5);
  }
}

void ReplyWriter::array_header(size_t n) {
  header('*', static_cast<int64_t>(n));
}

void ReplyWriter::map_header(size_t n) {
  if (protocol_ == 3) {
    header('%', static_cast<int64_t>(n));
  } else {
    header('*', static_cast<int64_t>(2 * n));
  }
}

void ReplyWriter::set_header(size_t n) {
  header(protocol_ == 3 ? '~' : '*', static_cast<int64_t>(n));
}

void ReplyWriter::double_value(double v) {
  char tmp[48];
  int len;
  if (std::isinf(v)) {
    len = std::snprintf(tmp, sizeof(tmp), "%s", v > 0 ? "inf" : "-inf");
  } else if (std::isnan(v)) {
    len = std::snprintf(tmp, sizeof(tmp), "nan");
  } else {
    len = std::snprintf(tmp, sizeof(tmp), "%.17g", v);
  }
  const std::string_view text(tmp, static_cast<size_t>(len));
  if (protocol_ == 3) {
    line(',', text);
  } else {
    bulk(text);
  }
}

void ReplyWriter::boolean(bool v) {
  if (protocol_ == 3) {
    if (reserve(4)) buf_.append(v ? "#t\r\n" : "#f\r\n", 4);
  } else {
    integer(v ? 1 : 0);
  }
}

void ReplyWriter::verbatim(std::string_view format, std::string_view text) {
  SHOAL_ASSERT(format.size() == 3, "verbatim format '%.*s'", static_cast<int>(format.size()),
               format.data());
  if (protocol_ != 3) {
    bulk(text);
    return;
  }
  if (!reserve(text.size() + 32)) return;
  header('=', static_cast<int64_t>(text.size() + 4));
  buf_.append(format);
  buf_.push_back(':');
  buf_.append(text);
  buf_.append("\r\n", 2);
}

void ReplyWriter::append_raw(std::string_view encoded) {
  if (reserve(encoded.size())) buf_.append(encoded);
}

void ReplyWriter::consume(size_t n) {
  SHOAL_ASSERT(n <= pending_bytes(), "consume %zu of %zu pending", n, pending_bytes());
  head_ += n;
  consumed_total_ += n;
  if (head_ == buf_.size()) {
    buf_.clear();
    head_ = 0;
  } else if (head_ >= kCompactBytes && head_ > buf_.size() / 2) {
    buf_.erase(0, head_);
    head_ = 0;
  }
}

void ReplyWriter::rollback(uint64_t mark) {
  SHOAL_ASSERT(mark >= consumed_total_ && mark <= written_total(),
               "rollback to %llu outside [%llu, %llu]", static_cast<unsigned long long>(mark),
               static_cast<unsigned long long>(consumed_total_),
               static_cast<unsigned long long>(written_total()));
  buf_.resize(head_ + static_cast<size_t>(mark - consumed_total_));
}

}  // namespace shoal::resp
