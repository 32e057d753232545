// RequestParser: both request forms, pipelining, requests split at every byte, the limits and
// malformed input (an error in Redis's wording, never a crash).
#include "src/resp/resp_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace shoal::resp {
namespace {

using Args = std::vector<std::string>;

// Parses every complete request in buf; returns them and leaves *rest the unparsed bytes.
Result<std::vector<Args>> parse_all(RequestParser& p, std::string_view buf, size_t* rest) {
  std::vector<Args> out;
  for (int i = 0; i < 100000; ++i) {
    auto r = p.parse(buf);
    if (!r.ok()) return r.status();
    if (*r == 0) break;
    out.emplace_back(p.args().begin(), p.args().end());
    buf.remove_prefix(*r);
  }
  *rest = buf.size();
  return out;
}

std::vector<Args> parse_ok(std::string_view buf) {
  RequestParser p;
  size_t rest = 0;
  auto r = parse_all(p, buf, &rest);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(rest, 0u);
  return r.ok() ? *r : std::vector<Args>{};
}

std::string parse_error(std::string_view buf, ParserLimits limits = {}) {
  RequestParser p(limits);
  size_t rest = 0;
  auto r = parse_all(p, buf, &rest);
  return r.ok() ? "no error" : r.status().message();
}

TEST(RespParser, ArrayOfBulkStrings) {
  auto reqs = parse_ok("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nv\r\nal\r\n");
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0], (Args{"SET", "k", "v\r\nal"}));  // binary-safe
}

TEST(RespParser, EmptyBulkAndEmptyRequests) {
  auto reqs = parse_ok("*2\r\n$4\r\nECHO\r\n$0\r\n\r\n*0\r\n*-1\r\n\r\n\n");
  ASSERT_EQ(reqs.size(), 5u);
  EXPECT_EQ(reqs[0], (Args{"ECHO", ""}));
  for (size_t i = 1; i < reqs.size(); ++i) EXPECT_TRUE(reqs[i].empty()) << i;
}

TEST(RespParser, InlineCommandsAndQuoting) {
  auto reqs = parse_ok(
      "SET  k   v\r\nPING\n  get \"a b\\x41\\n\" 'it\\'s'\r\nset x\"y z\"\r\nECHO \"\"\r\n");
  ASSERT_EQ(reqs.size(), 5u);
  EXPECT_EQ(reqs[0], (Args{"SET", "k", "v"}));
  EXPECT_EQ(reqs[1], (Args{"PING"}));
  EXPECT_EQ(reqs[2], (Args{"get", "a bA\n", "it's"}));
  EXPECT_EQ(reqs[3], (Args{"set", "xy z"}));
  EXPECT_EQ(reqs[4], (Args{"ECHO", ""}));
}

TEST(RespParser, PipelinedMixedForms) {
  std::string buf;
  for (int i = 0; i < 100; ++i) {
    buf += "*2\r\n$3\r\nGET\r\n$" + std::to_string(std::to_string(i).size()) + "\r\n" +
           std::to_string(i) + "\r\nINCR n\r\n";
  }
  auto reqs = parse_ok(buf);
  ASSERT_EQ(reqs.size(), 200u);
  EXPECT_EQ(reqs[198], (Args{"GET", "99"}));
  EXPECT_EQ(reqs[199], (Args{"INCR", "n"}));
}

// Every split point of a pipeline gives the same requests as the whole, and the parser never
// asks for fewer bytes than it then needs.
TEST(RespParser, SplitAtEveryByte) {
  const std::string buf =
      "*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$10\r\n0123456789\r\nGET \"q\\x41\" key\r\n"
      "*1\r\n$4\r\nPING\r\n*0\r\n";
  const std::vector<Args> whole = parse_ok(buf);
  ASSERT_EQ(whole.size(), 4u);
  for (size_t step = 1; step <= buf.size(); ++step) {
    RequestParser p;
    std::vector<Args> got;
    std::string pending;  // unconsumed bytes, grown as if received in reads of `step` bytes
    size_t fed = 0;
    while (fed < buf.size() || !pending.empty()) {
      const size_t n = std::min(step, buf.size() - fed);
      pending.append(buf, fed, n);
      fed += n;
      size_t rest = 0;
      auto r = parse_all(p, pending, &rest);
      ASSERT_TRUE(r.ok()) << r.status().to_string() << " step " << step;
      got.insert(got.end(), r->begin(), r->end());
      pending.erase(0, pending.size() - rest);
      if (n == 0) break;
    }
    EXPECT_EQ(got, whole) << "step " << step;
  }
}

TEST(RespParser, BytesWantedForALargeBulk) {
  RequestParser p;
  std::string buf = "*2\r\n$3\r\nSET\r\n$1000\r\n";
  ASSERT_EQ(*p.parse(buf), 0u);
  EXPECT_EQ(p.bytes_wanted(), 1002u);
  buf += std::string(1000, 'x');
  ASSERT_EQ(*p.parse(buf), 0u);
  EXPECT_EQ(p.bytes_wanted(), 2u);
  buf += "\r\n";
  auto r = p.parse(buf);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, buf.size());
  EXPECT_EQ(p.args()[1].size(), 1000u);
}

// Count lines take a one-pass path when digits and CRLF are all there; both paths agree.
TEST(RespParser, CountLinesAtTheirBounds) {
  EXPECT_EQ(parse_ok("*02\r\n$003\r\nGET\r\n$1\r\nk\r\n"), (std::vector<Args>{{"GET", "k"}}));
  const std::string zeros17(17, '0');
  EXPECT_EQ(parse_ok("*1\r\n$" + zeros17 + "3\r\nabc\r\n"), (std::vector<Args>{{"abc"}}));
  EXPECT_EQ(parse_error("*1\r\n$" + zeros17 + "03\r\nabc\r\n"),
            "Protocol error: invalid bulk length");  // 19 digits
  EXPECT_EQ(parse_error("*1\r\n$1x\r\n"), "Protocol error: invalid bulk length");
  EXPECT_EQ(parse_error("*1\r\n$1\r\r\n"), "Protocol error: invalid bulk length");
  EXPECT_EQ(parse_error("*1x\r\n"), "Protocol error: invalid multibulk length");
  EXPECT_EQ(parse_error("*1\r\n$\r\n"), "Protocol error: invalid bulk length");
}

// A whole request takes a one-pass path (parse_whole_array); the same request at the limits,
// and cut anywhere, reads the same, and an incomplete one leaves no arguments behind.
TEST(RespParser, WholeRequestsAtTheLimitsAgreeWithPieces) {
  ParserLimits small;
  small.max_args = 3;
  small.max_bulk_bytes = 100;
  small.max_request_bytes = 200;
  const std::string fits =
      "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100\r\n" + std::string(100, 'v') + "\r\n";
  ASSERT_LE(fits.size(), 200u);
  for (size_t cut = 0; cut <= fits.size(); ++cut) {
    RequestParser p(small);
    auto first = p.parse(std::string_view(fits).substr(0, cut));
    if (cut < fits.size()) {
      ASSERT_TRUE(first.ok() && *first == 0u) << "cut " << cut;
      EXPECT_TRUE(p.args().empty()) << "cut " << cut;
    }
    auto r = p.parse(fits);
    ASSERT_TRUE(r.ok()) << r.status().to_string() << " cut " << cut;
    EXPECT_EQ(*r, fits.size());
    ASSERT_EQ(p.args().size(), 3u);
    EXPECT_EQ(p.args()[2], std::string(100, 'v'));
  }
  RequestParser too_many(small);
  EXPECT_EQ(too_many.parse("*4\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n").status().message(),
            "Protocol error: invalid multibulk length");
  small.max_request_bytes = 120;
  RequestParser too_big(small);
  EXPECT_EQ(too_big.parse(fits).status().message(), "Protocol error: too big request");
}

TEST(RespParser, MalformedInputGetsRedisErrors) {
  EXPECT_EQ(parse_error("*2\r\n$-5\r\n"), "Protocol error: invalid bulk length");
  EXPECT_EQ(parse_error("*1\r\n$1073741824\r\n"), "Protocol error: invalid bulk length");
  EXPECT_EQ(parse_error("*2\r\n:4\r\n"), "Protocol error: expected '$', got ':'");
  EXPECT_EQ(parse_error("*x\r\n"), "Protocol error: invalid multibulk length");
  EXPECT_EQ(parse_error("*1\r\n$x\r\n"), "Protocol error: invalid bulk length");
  EXPECT_EQ(parse_error("*1\r\n$+1\r\nx\r\n"), "Protocol error: invalid bulk length");
  EXPECT_EQ(parse_error("*99999999\r\n"), "Protocol error: invalid multibulk length");
  EXPECT_EQ(parse_error("*1\r\n$2\r\nabcd\r\n"),
            "Protocol error: bulk string not terminated by CRLF");
  EXPECT_EQ(parse_error("*1\r\n$1\rx"), "Protocol error: invalid bulk length");
  EXPECT_EQ(parse_error("*" + std::string(40, '1')), "Protocol error: too big mbulk count string");
  EXPECT_EQ(parse_error("*1\r\n$" + std::string(40, '1')),
            "Protocol error: too big bulk count string");
  EXPECT_EQ(parse_error("*2\r\n*1\r\n$1\r\na\r\n"), "Protocol error: expected '$', got '*'");
  EXPECT_EQ(parse_error("SET \"abc\r\n"), "Protocol error: unbalanced quotes in request");
  EXPECT_EQ(parse_error("SET \"abc\"x\r\n"), "Protocol error: unbalanced quotes in request");
  EXPECT_EQ(parse_error(std::string(70000, 'a')), "Protocol error: too big inline request");
}

TEST(RespParser, LimitsAreEnforcedBeforeTheBytesArrive) {
  ParserLimits small;
  small.max_args = 3;
  small.max_bulk_bytes = 100;
  small.max_request_bytes = 150;
  small.max_inline_bytes = 20;
  EXPECT_EQ(parse_error("*4\r\n", small), "Protocol error: invalid multibulk length");
  EXPECT_EQ(parse_error("*1\r\n$101\r\n", small), "Protocol error: invalid bulk length");
  EXPECT_EQ(parse_error("*2\r\n$100\r\n" + std::string(100, 'a') + "\r\n$60\r\n", small),
            "Protocol error: too big request");
  EXPECT_EQ(parse_error("a b c d\r\n", small), "Protocol error: invalid multibulk length");
  EXPECT_EQ(parse_error(std::string(21, 'a'), small), "Protocol error: too big inline request");
  // Exactly at the limits is fine.
  RequestParser p(small);
  const std::string ok = "*1\r\n$100\r\n" + std::string(100, 'a') + "\r\n";
  EXPECT_EQ(*p.parse(ok), ok.size());
}

TEST(RespParser, ErrorIsStickyUntilReset) {
  RequestParser p;
  ASSERT_FALSE(p.parse("*1\r\n$-2\r\n").ok());
  EXPECT_FALSE(p.parse("*1\r\n$4\r\nPING\r\n").ok());
  p.reset();
  EXPECT_EQ(*p.parse("*1\r\n$4\r\nPING\r\n"), 14u);
}

TEST(RespParser, ArgumentsViewTheBuffer) {
  RequestParser p;
  const std::string buf = "*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n";
  ASSERT_EQ(*p.parse(buf), buf.size());
  EXPECT_GE(p.args()[1].data(), buf.data());
  EXPECT_LT(p.args()[1].data(), buf.data() + buf.size());
}

}  // namespace
}  // namespace shoal::resp
