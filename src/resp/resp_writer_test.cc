// ReplyWriter: the encodings in RESP2 and RESP3, the output limits and rollback; glob_match.
#include "src/resp/resp_writer.h"

#include <gtest/gtest.h>

#include "src/resp/glob.h"
#include "src/resp/value_format.h"

namespace shoal::resp {
namespace {

std::string take(ReplyWriter& w) {
  std::string s(w.pending());
  w.consume(s.size());
  return s;
}

TEST(RespWriter, Resp2Encodings) {
  ReplyWriter w;
  w.simple("OK");
  w.error("ERR bad\r\nthing");
  w.integer(-42);
  w.bulk(std::string_view("a\0b", 3));
  w.null();
  w.null_array();
  w.array_header(2);
  w.map_header(1);
  w.set_header(3);
  w.double_value(1.5);
  w.boolean(true);
  w.verbatim("txt", "hi");
  using namespace std::string_literals;
  EXPECT_EQ(take(w),
            "+OK\r\n-ERR bad  thing\r\n:-42\r\n$3\r\na\0b\r\n$-1\r\n*-1\r\n"
            "*2\r\n*2\r\n*3\r\n$3\r\n1.5\r\n:1\r\n$2\r\nhi\r\n"s);
}

TEST(RespWriter, Resp3Encodings) {
  ReplyWriter w;
  w.set_protocol(3);
  w.null();
  w.null_array();
  w.map_header(2);
  w.set_header(1);
  w.double_value(-0.25);
  w.boolean(false);
  w.verbatim("txt", "hi");
  EXPECT_EQ(take(w), "_\r\n_\r\n%2\r\n~1\r\n,-0.25\r\n#f\r\n=6\r\ntxt:hi\r\n");
}

TEST(RespWriter, SoftAndHardLimits) {
  ReplyWriter w(WriterLimits{100, 200});
  w.bulk(std::string(90, 'x'));
  EXPECT_FALSE(w.over_soft_limit());
  w.bulk(std::string(20, 'x'));
  EXPECT_TRUE(w.over_soft_limit());
  EXPECT_FALSE(w.overflowed());
  w.bulk(std::string(100, 'x'));  // would pass 200: dropped, and the writer is done
  EXPECT_TRUE(w.overflowed());
  const size_t pending = w.pending_bytes();
  w.simple("OK");
  EXPECT_EQ(w.pending_bytes(), pending);
}

TEST(RespWriter, RollbackTakesBackAnAttempt) {
  ReplyWriter w;
  w.simple("A");
  w.consume(2);
  const uint64_t mark = w.written_total();
  w.bulk("partial");
  w.rollback(mark);
  w.integer(1);
  EXPECT_EQ(take(w), "\r\n:1\r\n");
  EXPECT_EQ(w.consumed_total(), w.written_total());
}

TEST(RespWriter, ConsumeCompactsLargeBuffers) {
  ReplyWriter w;
  const std::string big(100000, 'v');
  for (int i = 0; i < 50; ++i) {
    w.bulk(big);
    w.consume(w.pending_bytes() / 2);
  }
  EXPECT_LT(w.pending_bytes(), 200000u);
  EXPECT_EQ(w.written_total() - w.consumed_total(), w.pending_bytes());
}

TEST(Glob, RedisPatterns) {
  struct Case {
    const char* pattern;
    const char* text;
    bool match;
  } cases[] = {
      {"*", "", true},
      {"*", "anything", true},
      {"h?llo", "hello", true},
      {"h?llo", "hllo", false},
      {"h*llo", "heeeello", true},
      {"h[ae]llo", "hallo", true},
      {"h[ae]llo", "hillo", false},
      {"h[^e]llo", "hallo", true},
      {"h[^e]llo", "hello", false},
      {"h[a-b]llo", "hbllo", true},
      {"h[b-a]llo", "hallo", true},
      {"h[a-b]llo", "hcllo", false},
      {"a\\*b", "a*b", true},
      {"a\\*b", "axb", false},
      {"[\\]]", "]", true},
      {"*a*b*c*", "xxaxxbxxcxx", true},
      {"*a*b*c*", "xxaxxcxxbxx", false},
      {"user:*:name", "user:42:name", true},
      {"user:*:name", "user:42:age", false},
      {"[abc", "b", true},
      {"**x", "x", true},
      {"?", "", false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(glob_match(c.pattern, c.text), c.match) << c.pattern << " ~ " << c.text;
  }
  EXPECT_EQ(glob_literal_prefix("user\\*:*"), "user*:");
  EXPECT_EQ(glob_literal_prefix("*"), "");
  EXPECT_EQ(glob_literal_prefix("abc"), "abc");
}

TEST(Glob, AdversarialPatternIsNotExponential) {
  const std::string text(5000, 'a');
  EXPECT_FALSE(glob_match(std::string(30, '*') + "a*a*a*a*a*a*a*a*b", text));
}

TEST(ValueFormat, RoundTripsAndRejectsGarbage) {
  std::string enc;
  encode_string("hello", kNoExpiry, &enc);
  EXPECT_EQ(enc, std::string("\0hello", 6));
  auto d = decode_string(enc);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->payload, "hello");
  EXPECT_EQ(d->expiry_ms, kNoExpiry);
  encode_string("v", 1234567, &enc);
  d = decode_string(enc);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->expiry_ms, 1234567u);
  EXPECT_TRUE(d->expired(1234567));
  EXPECT_FALSE(d->expired(1234566));
  EXPECT_FALSE(decode_string("").ok());
  EXPECT_FALSE(decode_string("\x07x").ok());
  EXPECT_FALSE(decode_string(std::string("\x01\x01\x02", 3)).ok());
}

}  // namespace
}  // namespace shoal::resp
