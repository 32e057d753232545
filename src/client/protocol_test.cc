// The client protocol's framing (protocol.h): round trips, frames split at every byte,
// the size limits, hellos and the key/value limits.
#include "src/client/protocol.h"

#include <gtest/gtest.h>

#include <string>

namespace shoal::client::proto {
namespace {

TEST(ClientProtocol, FrameRoundTripAtEverySplit) {
  std::string wire;
  FrameWriter w(&wire);
  w.begin(0x0102030405060708ULL, static_cast<uint8_t>(Op::kScan));
  w.str("start");
  w.u8(1);
  w.str(std::string("\0end", 4));
  w.u32(77);
  EXPECT_EQ(w.end(), wire.size() - kLengthBytes);
  w.begin(9, static_cast<uint8_t>(Op::kBegin));
  (void)w.end();
  for (size_t cut = 0; cut < wire.size(); ++cut) {
    Result<FrameView> f = next_frame(std::string_view(wire).substr(0, cut), kMaxRequestFrameBytes);
    ASSERT_TRUE(f.ok()) << cut;
    const size_t first = wire.size() - kLengthBytes - kFrameMinBytes;
    EXPECT_EQ(f->total_bytes == 0, cut < first) << cut;
  }
  Result<FrameView> f = next_frame(wire, kMaxRequestFrameBytes);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->id, 0x0102030405060708ULL);
  EXPECT_EQ(f->op_or_code, static_cast<uint8_t>(Op::kScan));
  FrameReader r(f->body);
  EXPECT_EQ(r.str(), "start");
  EXPECT_EQ(r.u8(), 1);
  EXPECT_EQ(r.str(), std::string_view("\0end", 4));
  EXPECT_EQ(r.u32(), 77u);
  EXPECT_TRUE(r.done());
  Result<FrameView> second =
      next_frame(std::string_view(wire).substr(f->total_bytes), kMaxRequestFrameBytes);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->id, 9u);
  EXPECT_TRUE(second->body.empty());
  EXPECT_EQ(f->total_bytes + second->total_bytes, wire.size());
}

TEST(ClientProtocol, ReaderFailsPastTheEnd) {
  std::string body;
  FrameWriter(&body).str("abc");
  FrameReader r(std::string_view(body).substr(0, body.size() - 1));  // one byte short
  EXPECT_EQ(r.str(), "");
  EXPECT_FALSE(r.ok());
  FrameReader extra(body + "x");
  EXPECT_EQ(extra.str(), "abc");
  EXPECT_TRUE(extra.ok());
  EXPECT_FALSE(extra.done());  // a byte left over
  FrameReader empty("");
  EXPECT_EQ(empty.u64(), 0u);
  EXPECT_FALSE(empty.ok());
}

TEST(ClientProtocol, FrameLengthLimits) {
  auto with_length = [](uint32_t len) {
    std::string s(4, '\0');
    std::memcpy(s.data(), &len, 4);
    return s;
  };
  Result<FrameView> big = next_frame(with_length(kMaxRequestFrameBytes + 1), kMaxRequestFrameBytes);
  EXPECT_EQ(big.status().message(), "frame of 1064961 bytes exceeds the maximum of 1064960");
  EXPECT_TRUE(next_frame(with_length(kMaxRequestFrameBytes), kMaxRequestFrameBytes).ok());
  Result<FrameView> small = next_frame(with_length(8), kMaxRequestFrameBytes);
  EXPECT_EQ(small.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(small.status().message(), "frame of 8 bytes is shorter than its header (9)");
}

TEST(ClientProtocol, Hello) {
  EXPECT_EQ(hello().size(), kHelloBytes);
  EXPECT_EQ(hello(kVersion, "pw").size(), kHelloBytes + 2);
  EXPECT_EQ(hello(1, "ignored").size(), kHelloBytes);  // version 1 has no password
  const std::string bytes = hello(kVersion, "secret") + "next frame";
  Result<Hello> h = parse_hello(bytes);  // its password views `bytes`
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_EQ(h->version, 2);
  EXPECT_EQ(h->password, "secret");
  EXPECT_EQ(h->bytes, kHelloBytes + 6);
  h = parse_hello(hello(1));
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->version, 1);
  EXPECT_EQ(h->bytes, kHelloBytes);
  // Incomplete at every length short of the whole.
  const std::string full = hello(kVersion, "secret");
  for (size_t n = 0; n < full.size(); ++n) {
    h = parse_hello(std::string_view(full).substr(0, n));
    ASSERT_TRUE(h.ok()) << n;
    EXPECT_EQ(h->bytes, 0u) << n;
  }
  EXPECT_EQ(parse_hello(hello(3)).status().message(),
            "unsupported client protocol version 3 (this server speaks 1 to 2)");
  EXPECT_EQ(parse_hello(hello(0)).status().code(), Code::kInvalidArgument);
  std::string bad = hello();
  bad[0] = 'X';
  EXPECT_EQ(parse_hello(bad).status().code(), Code::kInvalidArgument);
  EXPECT_NE(parse_hello(bad).status().message().find("bad magic"), std::string::npos);
  std::string long_password = hello();  // a length over the limit is refused before its bytes
  long_password[6] = static_cast<char>(0x01);
  long_password[7] = static_cast<char>(0x10);  // 4097
  EXPECT_EQ(parse_hello(long_password).status().message(),
            "hello: a password of 4097 bytes (at most 4096)");
  EXPECT_TRUE(parse_hello(hello(kVersion, std::string(kMaxPasswordBytes, 'p'))).ok());
}

TEST(ClientProtocol, PasswordCheck) {
  auto check = [](const std::string& bytes, std::string_view required) {
    Result<Hello> h = parse_hello(bytes);
    EXPECT_TRUE(h.ok() && h->bytes > 0);
    return check_password(*h, required);
  };
  EXPECT_TRUE(check(hello(), "").ok());  // no password asked: anything goes
  EXPECT_TRUE(check(hello(1), "").ok());
  EXPECT_TRUE(check(hello(kVersion, "unasked"), "").ok());
  EXPECT_TRUE(check(hello(kVersion, "s3cret"), "s3cret").ok());
  const Status wrong = check(hello(kVersion, "s3creT"), "s3cret");
  EXPECT_EQ(wrong.code(), Code::kPermissionDenied);
  EXPECT_EQ(wrong.message(), "wrong password");
  EXPECT_EQ(check(hello(kVersion, "s3cret!"), "s3cret").code(), Code::kPermissionDenied);
  EXPECT_EQ(check(hello(kVersion, "s3cre"), "s3cret").code(), Code::kPermissionDenied);
  const Status missing = check(hello(), "s3cret");
  EXPECT_EQ(missing.code(), Code::kPermissionDenied);
  EXPECT_NE(missing.message().find("asks for a password"), std::string::npos);
  const Status old = check(hello(1), "s3cret");
  EXPECT_EQ(old.code(), Code::kPermissionDenied);
  EXPECT_NE(old.message().find("version 1 cannot carry"), std::string::npos);
  EXPECT_EQ(status_from_code(Code::kPermissionDenied, "x").to_string(), "PermissionDenied: x");
}

TEST(ClientProtocol, KeyAndValueLimits) {
  EXPECT_EQ(check_key("").message(), "key of 0 bytes: keys are 1 to 8192 bytes");
  EXPECT_TRUE(check_key("k").ok());
  EXPECT_TRUE(check_key(std::string(8192, 'k')).ok());
  EXPECT_FALSE(check_key(std::string(8193, 'k')).ok());
  EXPECT_TRUE(check_value("").ok());
  EXPECT_TRUE(check_value(std::string(1 << 20, 'v')).ok());
  EXPECT_EQ(check_value(std::string((1 << 20) + 1, 'v')).message(),
            "value of 1048577 bytes: values are at most 1048576 bytes");
  EXPECT_STREQ(op_name(static_cast<uint8_t>(Op::kPutOne)), "single-key put");
  EXPECT_STREQ(op_name(200), "unknown");
}

}  // namespace
}  // namespace shoal::client::proto
