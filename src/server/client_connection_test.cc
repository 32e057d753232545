// ClientConnection (the server side of the client protocol) over the engine's KvBackend
// (src/kv, a real engine in process): a pipelined session gives the same replies however its
// bytes are split, a transaction's replies, the open transaction handed over at a close,
// a password checked before any request, and random bytes (with and without a good hello)
// never break it: every reply is a well-formed frame and the connection ends up closing or
// waiting for more.
#include "src/server/client_connection.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "src/base/env.h"
#include "src/kv/engine_kv_backend.h"

namespace shoal::server {
namespace client_connection_test {

namespace proto = client::proto;
using proto::Op;

// Moves `bytes` in as a server would (reading only while the connection wants input) and
// takes every sendable byte out. REQUIRES: a backend that never suspends.
std::string pump(ClientConnection& c, std::string_view bytes) {
  std::string out;
  for (int guard = 0; guard < 1'000'000; ++guard) {  // each pass moves input or output
    if (c.has_work()) c.process();
    EXPECT_FALSE(c.in_flight());
    const std::string_view s = c.sendable();
    out.append(s);
    c.consume_output(s.size());
    if (c.should_close() || c.must_close_now()) break;
    if (c.has_work()) continue;
    if (bytes.empty() || !c.wants_input()) break;
    auto space = c.input_space();
    const size_t n = std::min(space.size(), bytes.size());
    std::memcpy(space.data(), bytes.data(), n);
    c.commit_input(n);
    bytes.remove_prefix(n);
  }
  return out;
}

std::string frame(uint64_t id, Op op, const std::string& body = "") {
  std::string out;
  proto::FrameWriter w(&out);
  w.begin(id, static_cast<uint8_t>(op));
  out.append(body);
  (void)w.end();
  return out;
}

std::string key_body(std::string_view key, std::string_view value = {}, bool with_value = false) {
  std::string body;
  proto::FrameWriter w(&body);
  w.str(key);
  if (with_value) w.str(value);
  return body;
}

std::string one_body(std::string_view key) {
  return std::string(1, '\0') + key_body(key);
}

// Splits replies into frames; false when the bytes are not whole, well-formed frames.
bool frames(std::string_view out, std::vector<proto::FrameView>* got) {
  while (!out.empty()) {
    auto f = proto::next_frame(out, proto::kMaxReplyFrameBytes);
    if (!f.ok() || f->total_bytes == 0) return false;
    got->push_back(*f);
    out.remove_prefix(f->total_bytes);
  }
  return true;
}

class ClientConnectionTest : public ::testing::Test {
 protected:
  std::string session() {
    std::string in = proto::hello();
    in += frame(1, Op::kBegin);
    in += frame(2, Op::kPut, key_body("k", "v1", true));
    in += frame(3, Op::kGet, key_body("k"));
    in += frame(4, Op::kCommit, std::string(1, '\1'));
    in += frame(5, Op::kGetOne, one_body("k"));
    in += frame(6, Op::kGet, key_body("k"));  // no transaction: refused
    in += frame(7, static_cast<Op>(77));      // unknown: refused, goes on
    in += frame(8, Op::kDelOne, one_body("k"));
    in += frame(9, Op::kGetOne, one_body("k"));
    return in;
  }
  kv::OwnedEngineKvBackend backend_;
};

TEST_F(ClientConnectionTest, SameRepliesAtEverySplit) {
  const std::string in = session();
  ClientConnection whole(backend_, RealEnv::instance());
  const std::string expected = pump(whole, in);
  std::vector<proto::FrameView> got;
  ASSERT_TRUE(frames(expected, &got));
  ASSERT_EQ(got.size(), 10u);  // the hello's and nine
  const std::vector<Code> codes = {Code::kOk,
                                   Code::kOk,
                                   Code::kOk,
                                   Code::kOk,
                                   Code::kOk,
                                   Code::kOk,
                                   Code::kInvalidArgument,
                                   Code::kInvalidArgument,
                                   Code::kOk,
                                   Code::kNotFound};
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].id, i) << i;
    EXPECT_EQ(got[i].op_or_code, static_cast<uint8_t>(codes[i])) << i;
  }
  proto::FrameReader value(got[3].body);
  EXPECT_EQ(value.str(), "v1");  // the transaction reads its own write
  for (size_t cut = 1; cut < in.size(); ++cut) {
    ClientConnection split(backend_, RealEnv::instance());
    std::string out = pump(split, std::string_view(in).substr(0, cut));
    out += pump(split, std::string_view(in).substr(cut));
    ASSERT_EQ(out, expected) << "split at " << cut;
  }
}

TEST_F(ClientConnectionTest, OpenTransactionIsHandedOverAtClose) {
  ClientConnection c(backend_, RealEnv::instance());
  pump(c, proto::hello() + frame(1, Op::kBegin) + frame(2, Op::kPut, key_body("x", "1", true)));
  std::unique_ptr<resp::KvTxn> open = c.take_open_txn();
  ASSERT_NE(open, nullptr);
  EXPECT_EQ(c.take_open_txn(), nullptr);
  // The engine backend's abort completes inline.
  rt::Task<void> abort = open->abort();
  EXPECT_TRUE(abort.start_inline());
  ClientConnection other(backend_, RealEnv::instance());
  std::vector<proto::FrameView> got;
  const std::string out = pump(other, proto::hello() + frame(1, Op::kGetOne, one_body("x")));
  ASSERT_TRUE(frames(out, &got));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].op_or_code, static_cast<uint8_t>(Code::kNotFound));
}

// An idle connection's memory once its buffers are released (docs/CLIENT.md, "Bounds").
TEST_F(ClientConnectionTest, QuietConnectionIsSmall) {
  EXPECT_LT(sizeof(ClientConnection), 1024u);
  ClientConnection c(backend_, RealEnv::instance());
  const std::string big(100'000, 'v');
  pump(c, proto::hello() + frame(1, Op::kPutOne, std::string(1, '\0') + key_body("k", big, true)) +
              frame(2, Op::kGetOne, one_body("k")));
  c.release_buffers();
  EXPECT_EQ(c.buffer_bytes(), 0u);
}

// With a password: the right one is served; a wrong or missing one (a version 1 hello, an
// empty password) gets one PermissionDenied frame and the connection closes, and the request
// sent behind the hello was not executed. Refused at every split of the hello.
TEST_F(ClientConnectionTest, PasswordIsCheckedBeforeAnyRequest) {
  ClientConnectionOptions options;
  options.password = "s3cret";
  const std::string put = frame(1, Op::kPutOne, std::string(1, '\1') + key_body("k", "v", true));
  const std::string get = frame(1, Op::kGetOne, one_body("k"));
  for (const std::string& bad : {proto::hello(proto::kVersion, "s3creT"), proto::hello(),
                                 proto::hello(1), proto::hello(proto::kVersion, "s3cret-")}) {
    const std::string in = bad + put;
    for (size_t cut = 0; cut <= in.size(); ++cut) {
      ClientConnection c(backend_, RealEnv::instance(), options);
      std::string out = pump(c, std::string_view(in).substr(0, cut));
      if (!c.should_close()) out += pump(c, std::string_view(in).substr(cut));
      std::vector<proto::FrameView> got;
      ASSERT_TRUE(frames(out, &got));
      ASSERT_EQ(got.size(), 1u) << "cut " << cut;
      EXPECT_EQ(got[0].id, 0u);
      EXPECT_EQ(got[0].op_or_code, static_cast<uint8_t>(Code::kPermissionDenied));
      EXPECT_TRUE(c.should_close());
    }
  }
  ClientConnection good(backend_, RealEnv::instance(), options);
  std::vector<proto::FrameView> got;
  std::string out = pump(good, proto::hello(proto::kVersion, "s3cret") + get);
  ASSERT_TRUE(frames(out, &got));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].op_or_code, static_cast<uint8_t>(Code::kOk));
  proto::FrameReader version(got[0].body);
  EXPECT_EQ(version.u16(), proto::kVersion);
  EXPECT_EQ(got[1].op_or_code, static_cast<uint8_t>(Code::kNotFound)) << "a refused put ran";
  EXPECT_FALSE(good.should_close());
  // A version 1 client is served by a server without a password, and told version 1.
  ClientConnection old(backend_, RealEnv::instance());
  got.clear();
  out = pump(old, proto::hello(1) + get);
  ASSERT_TRUE(frames(out, &got));
  ASSERT_EQ(got.size(), 2u);
  proto::FrameReader v1(got[0].body);
  EXPECT_EQ(v1.u16(), 1u);
}

// Deterministic random input: bytes after a good hello, and bytes from the start.
TEST_F(ClientConnectionTest, RandomBytesNeverBreakIt) {
  Rng rng(42);
  for (int run = 0; run < 2000; ++run) {
    std::string in = run % 2 == 0 ? proto::hello() : "";
    const size_t n = 1 + rng.next() % 300;
    for (size_t i = 0; i < n; ++i) in.push_back(static_cast<char>(rng.next()));
    // A plausible length, so bodies get decoded, in the frame after the hello (8 bytes) or the
    // first: only when the input reaches that frame's opcode byte (the check used to be
    // in.size() > 12 for both, and ASan caught the write past the end after a hello).
    const size_t frame_at = run % 2 == 0 ? 8 : 0;
    if (run % 3 == 0 && in.size() > frame_at + 12) {
      const uint32_t len = static_cast<uint32_t>(rng.next() % 64 + 9);
      std::memcpy(in.data() + frame_at, &len, 4);
      in[frame_at + 12] = static_cast<char>(1 + rng.next() % 10);  // an opcode
    }
    ClientConnection c(backend_, RealEnv::instance());
    const std::string out = pump(c, in);
    std::vector<proto::FrameView> got;
    ASSERT_TRUE(frames(out, &got)) << "run " << run;
    EXPECT_FALSE(c.in_flight());
    if (std::unique_ptr<resp::KvTxn> open = c.take_open_txn(); open != nullptr) {
      rt::Task<void> abort = open->abort();
      EXPECT_TRUE(abort.start_inline());
    }
  }
}

}  // namespace client_connection_test
}  // namespace shoal::server
