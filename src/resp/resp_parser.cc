#include "src/resp/resp_parser.h"

#include <algorithm>
#include <cstring>

namespace shoal::resp {
namespace {

// A count line ("*3", "$11") holds a sign and at most 19 digits before its CRLF; anything
// longer is an error, not a reason to wait (Redis allows 64 KiB here, which buys nothing).
constexpr size_t kMaxCountLine = 32;

bool is_inline_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A count line's usual form at p: 1 to 18 digits and their CRLF, all before end. Returns the
// count and moves p past the CRLF; -1 (p unchanged) for anything else, which the general path
// then reads (and accepts or rejects) as before.
[[gnu::always_inline]] inline int64_t read_plain_count(const char*& p, const char* end) {
  const char* q = p;
  const char* const stop = end - q > 18 ? q + 18 : end;
  int64_t v = 0;
  for (; q < stop && static_cast<unsigned char>(*q - '0') <= 9; ++q) v = v * 10 + (*q - '0');
  if (q == p || end - q < 2 || q[0] != '\r' || q[1] != '\n') return -1;
  p = q + 2;
  return v;
}

// Strict decimal (Redis's string2ll for counts): optional '-', no '+', no spaces.
bool parse_count(std::string_view s, int64_t* out) {
  bool negative = false;
  if (!s.empty() && s[0] == '-') {
    negative = true;
    s.remove_prefix(1);
  }
  if (s.empty() || s.size() > 18) return false;  // 18 digits: no overflow, far above any limit
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = negative ? -v : v;
  return true;
}

// The character a backslash escape inside double quotes stands for.
char unescape(char c) {
  switch (c) {
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    case 'b':
      return '\b';
    case 'a':
      return '\a';
    default:
      return c;
  }
}

}  // namespace

RequestParser::RequestParser(ParserLimits limits) : limits_(limits) {
  SHOAL_ASSERT(limits_.max_args >= 1 && limits_.max_bulk_bytes < limits_.max_request_bytes,
               "ParserLimits: max_args %u, max_bulk_bytes %u, max_request_bytes %u",
               limits_.max_args, limits_.max_bulk_bytes, limits_.max_request_bytes);
}

void RequestParser::reset() {
  stage_ = Stage::kStart;
  error_ = Status::Ok();
  pos_ = 0;
  expected_ = 0;
  bulk_len_ = -1;
  wanted_ = 1;
  spans_.clear();
  args_.clear();
}

Status RequestParser::fail(const char* message) {
  stage_ = Stage::kFailed;
  error_ = Status::InvalidArgument(message);
  return error_;
}

Result<size_t> RequestParser::parse(std::string_view buf) {
  if (stage_ == Stage::kFailed) return error_;
  if (stage_ == Stage::kStart) {
    args_.clear();
    spans_.clear();
    if (buf.empty()) {
      wanted_ = 1;
      return size_t{0};
    }
    if (buf[0] != '*') return parse_inline(buf);
    if (size_t used = 0; parse_whole_array(buf, &used)) return used;
    args_.clear();  // what the fast pass took of an incomplete request
  }
  return parse_array(buf);
}

bool RequestParser::parse_whole_array(std::string_view buf, size_t* used) {
  const char* p = buf.data() + 1;  // past the '*'
  const char* const end = buf.data() + buf.size();
  const int64_t n = read_plain_count(p, end);
  if (n <= 0 || n > static_cast<int64_t>(limits_.max_args)) return false;
  // Each pass takes one whole bulk string or returns: at most n passes.
  for (int64_t i = 0; i < n; ++i) {
    if (p == end || *p != '$') return false;
    ++p;
    const int64_t len = read_plain_count(p, end);
    if (len < 0 || len > static_cast<int64_t>(limits_.max_bulk_bytes) || end - p < len + 2 ||
        p[len] != '\r' || p[len + 1] != '\n') {
      return false;
    }
    args_.emplace_back(p, static_cast<size_t>(len));
    p += len + 2;
  }
  // The general path checks this bulk by bulk; the whole request's size decides the same.
  if (static_cast<size_t>(p - buf.data()) > limits_.max_request_bytes) return false;
  *used = static_cast<size_t>(p - buf.data());
  wanted_ = 1;
  return true;
}

RequestParser::Line RequestParser::read_count_line(std::string_view buf, char prefix,
                                                   int64_t* value, const char* too_big,
                                                   const char* invalid) {
  SHOAL_ASSERT(pos_ < buf.size() && buf[pos_] == prefix, "count line at %u", pos_);
  // The usual line, 1 to 18 digits and its CRLF all in buf, read in one pass (the general path
  // below, memchr then parse_count, gives the same value; anything else goes there). A third of
  // a pipelined GET's parsing was here.
  {
    size_t i = pos_ + 1;
    const size_t stop = std::min(buf.size(), i + 18);
    int64_t v = 0;
    for (; i < stop && static_cast<unsigned char>(buf[i] - '0') <= 9; ++i)
      v = v * 10 + (buf[i] - '0');
    if (i > pos_ + 1u && i + 1 < buf.size() && buf[i] == '\r' && buf[i + 1] == '\n') {
      *value = v;
      pos_ = static_cast<uint32_t>(i + 2);
      return Line::kRead;
    }
  }
  const size_t avail = buf.size() - pos_;
  const size_t scan = avail < kMaxCountLine ? avail : kMaxCountLine;
  const void* cr = std::memchr(buf.data() + pos_, '\r', scan);
  if (cr == nullptr) {
    if (avail >= kMaxCountLine) {
      fail(too_big).ignore();
      return Line::kFailed;
    }
    wanted_ = 1;
    return Line::kIncomplete;
  }
  const size_t cr_at = static_cast<const char*>(cr) - buf.data();
  if (cr_at + 1 >= buf.size()) {
    wanted_ = 1;
    return Line::kIncomplete;
  }
  if (buf[cr_at + 1] != '\n' || !parse_count(buf.substr(pos_ + 1, cr_at - pos_ - 1), value)) {
    fail(invalid).ignore();
    return Line::kFailed;
  }
  pos_ = static_cast<uint32_t>(cr_at + 2);
  return Line::kRead;
}

Result<size_t> RequestParser::parse_array(std::string_view buf) {
  if (stage_ == Stage::kStart) {
    int64_t n = 0;
    auto got = read_count_line(buf, '*', &n, "Protocol error: too big mbulk count string",
                               "Protocol error: invalid multibulk length");
    if (got == Line::kFailed) return error_;
    if (got == Line::kIncomplete) return size_t{0};
    if (n > static_cast<int64_t>(limits_.max_args)) {
      return fail("Protocol error: invalid multibulk length");
    }
    if (n <= 0) {  // "*0" and "*-1": an empty request, ignored by the caller
      const size_t used = pos_;
      pos_ = 0;
      return used;
    }
    expected_ = static_cast<uint32_t>(n);
    stage_ = Stage::kArrayArgs;
  }
  // Each pass either completes one argument or returns: at most expected_ passes.
  while (spans_.size() < expected_) {
    if (bulk_len_ < 0) {
      if (pos_ >= buf.size()) {
        wanted_ = 1;
        return size_t{0};
      }
      if (buf[pos_] != '$') {
        std::string msg = "Protocol error: expected '$', got '";
        msg += buf[pos_];
        msg += "'";
        stage_ = Stage::kFailed;
        error_ = Status::InvalidArgument(std::move(msg));
        return error_;
      }
      int64_t len = 0;
      auto got = read_count_line(buf, '$', &len, "Protocol error: too big bulk count string",
                                 "Protocol error: invalid bulk length");
      if (got == Line::kFailed) return error_;
      if (got == Line::kIncomplete) return size_t{0};
      if (len < 0 || len > static_cast<int64_t>(limits_.max_bulk_bytes)) {
        return fail("Protocol error: invalid bulk length");
      }
      if (pos_ + static_cast<uint64_t>(len) + 2 > limits_.max_request_bytes) {
        return fail("Protocol error: too big request");
      }
      bulk_len_ = len;
    }
    const size_t end = pos_ + static_cast<size_t>(bulk_len_);
    if (buf.size() < end + 2) {
      wanted_ = end + 2 - buf.size();
      return size_t{0};
    }
    if (buf[end] != '\r' || buf[end + 1] != '\n') {
      return fail("Protocol error: bulk string not terminated by CRLF");
    }
    spans_.push_back({pos_, static_cast<uint32_t>(bulk_len_)});
    pos_ = static_cast<uint32_t>(end + 2);
    bulk_len_ = -1;
  }
  finish(buf);
  const size_t used = pos_;
  pos_ = 0;
  stage_ = Stage::kStart;
  return used;
}

void RequestParser::finish(std::string_view buf) {
  args_.clear();
  args_.reserve(spans_.size());
  for (const Span& s : spans_) args_.push_back(buf.substr(s.offset, s.length));
  wanted_ = 1;
}

Result<size_t> RequestParser::parse_inline(std::string_view buf) {
  // pos_ is how far an earlier call searched for the newline: each byte is searched once.
  const void* nl = std::memchr(buf.data() + pos_, '\n', buf.size() - pos_);
  if (nl == nullptr) {
    if (buf.size() > limits_.max_inline_bytes)
      return fail("Protocol error: too big inline request");
    pos_ = static_cast<uint32_t>(buf.size());
    wanted_ = 1;
    return size_t{0};
  }
  const size_t nl_at = static_cast<const char*>(nl) - buf.data();
  if (nl_at > limits_.max_inline_bytes) return fail("Protocol error: too big inline request");
  std::string_view line = buf.substr(0, nl_at);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  pos_ = 0;
  if (Status s = split_inline(line); !s.ok()) return s;
  wanted_ = 1;
  return nl_at + 1;
}

// Splits an inline line as Redis's sdssplitargs does. Unquoted arguments are views into
// line; quoted ones are unescaped into scratch_, reserved up front so that it never moves
// (unescaped text is never longer than its source).
Status RequestParser::split_inline(std::string_view line) {
  scratch_.clear();
  scratch_.reserve(line.size());
  args_.clear();
  size_t p = 0;
  while (p < line.size()) {  // each pass consumes >= 1 byte
    while (p < line.size() && is_inline_space(line[p])) ++p;
    if (p == line.size()) break;
    if (args_.size() >= limits_.max_args) return fail("Protocol error: invalid multibulk length");
    const size_t start = p;
    while (p < line.size() && !is_inline_space(line[p]) && line[p] != '"' && line[p] != '\'') ++p;
    if (p == line.size() || is_inline_space(line[p])) {
      args_.push_back(line.substr(start, p - start));  // plain: zero-copy
      continue;
    }
    // Quotes somewhere in this argument: build it in scratch_.
    const size_t out_start = scratch_.size();
    scratch_.append(line.substr(start, p - start));
    while (p < line.size() && !is_inline_space(line[p])) {
      const char q = line[p++];
      if (q != '"' && q != '\'') {
        scratch_.push_back(q);
        continue;
      }
      bool closed = false;
      while (p < line.size()) {
        const char c = line[p++];
        if (c == q) {
          closed = true;
          break;
        }
        if (c == '\\' && q == '"' && p + 2 < line.size() && line[p] == 'x' &&
            hex_digit(line[p + 1]) >= 0 && hex_digit(line[p + 2]) >= 0) {
          scratch_.push_back(
              static_cast<char>(hex_digit(line[p + 1]) * 16 + hex_digit(line[p + 2])));
          p += 3;
        } else if (c == '\\' && p < line.size() && (q == '"' || line[p] == '\'')) {
          scratch_.push_back(q == '"' ? unescape(line[p]) : '\'');
          ++p;
        } else {
          scratch_.push_back(c);
        }
      }
      // A closing quote must end the argument (Redis: "foo"bar is an error).
      if (!closed || (p < line.size() && !is_inline_space(line[p]))) {
        return fail("Protocol error: unbalanced quotes in request");
      }
      break;
    }
    args_.push_back(std::string_view(scratch_).substr(out_start));
  }
  return Status::Ok();
}

}  // namespace shoal::resp
