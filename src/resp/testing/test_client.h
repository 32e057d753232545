// Test helpers: a settable clock (Env) and a client that drives a Connection with encoded
// commands and collects its replies. Tests, the fuzzer and the benchmark only.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/env.h"
#include "src/resp/connection.h"

namespace shoal::resp::testing {

class ManualEnv final : public Env {
 public:
  uint64_t now_ns() override { return wall_us_ * 1000; }
  uint64_t wall_us() override { return wall_us_; }
  void sleep_ns(uint64_t ns) override { wall_us_ += ns / 1000; }
  uint64_t seed() override { return 42; }
  void set_wall_ms(uint64_t ms) { wall_us_ = ms * 1000; }
  void advance_ms(uint64_t ms) { wall_us_ += ms * 1000; }

 private:
  uint64_t wall_us_ = 1'700'000'000'000'000;  // Nov 2023
};

// The value of a backend call that completes inline (MemBackend, the engine's backend): tests
// call KvTxn directly. REQUIRES (asserted): the task does not suspend.
template <typename T>
T now(rt::Task<T> task) {
  SHOAL_ASSERT(task.start_inline(), "%s", "a backend call suspended in now()");
  return task.take();
}
inline void now(rt::Task<void> task) {
  SHOAL_ASSERT(task.start_inline(), "%s", "a backend call suspended in now()");
}

// A command as a RESP array of bulk strings.
inline std::string encode_command(const std::vector<std::string_view>& args) {
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (std::string_view a : args) {
    out += "$" + std::to_string(a.size()) + "\r\n";
    out.append(a);
    out += "\r\n";
  }
  return out;
}

class TestClient {
 public:
  TestClient(KvBackend& backend, Env& env, ConnectionOptions options = {})
      : conn(backend, env, options) {}

  // Sends raw bytes and returns every reply byte they produced.
  std::string send_raw(std::string_view bytes) {
    conn.feed(bytes);
    return drain();
  }
  std::string call(std::initializer_list<std::string_view> args) {
    return send_raw(encode_command(std::vector<std::string_view>(args)));
  }
  std::string call(const std::vector<std::string_view>& args) {
    return send_raw(encode_command(args));
  }
  std::string drain() {
    std::string out(conn.sendable());
    conn.consume_output(out.size());
    return out;
  }

  Connection conn;
};

}  // namespace shoal::resp::testing
