// libFuzzer target for the RESP request parser and the command layer behind it:
//   1. the input parsed as one buffer: every request's arguments lie inside the buffer (or
//      the parser's scratch), sizes add up, and every rejection is InvalidArgument;
//   2. the same input received in pieces (sizes from the input) gives the same requests and
//      the same outcome: the incremental state machine agrees with the one-shot parse;
//   3. the input fed to a Connection over the in-memory backend, with small limits: whatever
//      the commands, nothing crashes, loops or grows past the limits.
//
// This file is part of the resp library as an empty translation unit; it becomes a fuzzer
// only when compiled by clang with SHOAL_FUZZ_TARGET defined:  src/resp/fuzz/build.sh
#if defined(SHOAL_FUZZ_TARGET)

#include <cstdlib>
#include <string>
#include <vector>

#include "src/resp/resp_parser.h"
#include "src/resp/testing/mem_backend.h"
#include "src/resp/testing/test_client.h"

namespace {

using shoal::resp::ParserLimits;
using shoal::resp::RequestParser;

ParserLimits small_limits() {
  ParserLimits l;
  l.max_args = 64;
  l.max_bulk_bytes = 4096;
  l.max_request_bytes = 16384;
  l.max_inline_bytes = 2048;
  return l;
}

struct Outcome {
  std::vector<std::vector<std::string>> requests;
  bool failed = false;
};

void check(bool ok) {
  if (!ok) std::abort();
}

// Parses `data` delivered in pieces of `step` bytes (0: all at once).
Outcome parse_in_pieces(std::string_view data, size_t step) {
  Outcome o;
  RequestParser p(small_limits());
  std::string pending;
  size_t fed = 0;
  for (int guard = 0; guard < 1'000'000; ++guard) {
    const size_t n = step == 0 ? data.size() - fed : std::min(step, data.size() - fed);
    pending.append(data.substr(fed, n));
    fed += n;
    for (;;) {  // each pass consumes a request or stops
      auto r = p.parse(pending);
      if (!r.ok()) {
        check(r.status().code() == shoal::Code::kInvalidArgument);
        o.failed = true;
        return o;
      }
      if (*r == 0) break;
      check(*r <= pending.size());
      std::vector<std::string> args;
      for (std::string_view a : p.args()) args.emplace_back(a);
      o.requests.push_back(std::move(args));
      pending.erase(0, *r);
    }
    if (fed == data.size()) return o;
  }
  std::abort();  // no progress
}

void check_connection(std::string_view data) {
  shoal::resp::testing::MemBackend backend;
  shoal::resp::testing::ManualEnv env;
  shoal::resp::ConnectionOptions options;
  options.parser = small_limits();
  options.writer = shoal::resp::WriterLimits{8192, 1 << 20};
  shoal::resp::testing::TestClient client(backend, env, options);
  for (size_t at = 0; at < data.size(); at += 97) {
    client.send_raw(data.substr(at, 97));
    env.advance_ms(3);
    if (client.conn.should_close() || client.conn.must_close_now()) break;
  }
  for (int i = 0; i < 10000 && client.conn.has_work(); ++i) {
    client.conn.process();
    client.drain();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const Outcome whole = parse_in_pieces(input, 0);
  const size_t step = size == 0 ? 1 : 1 + data[0] % 13;
  const Outcome pieces = parse_in_pieces(input, step);
  check(whole.failed == pieces.failed);
  check(whole.requests == pieces.requests);
  check_connection(input);
  return 0;
}

#endif  // SHOAL_FUZZ_TARGET
