// Connection: one RESP client connection's bytes-in, bytes-out engine: input buffer, parser,
// session, output writer and the durability gate. It does no I/O; the network server (or a
// test) moves bytes:
//
//   auto space = conn.input_space();  n = read(fd, space)  ->  conn.commit_input(n);
//   conn.process();                   parses and executes complete requests
//   if (conn.in_flight()) co_await conn.finish_in_flight();   (a request suspended)
//   auto out = conn.sendable(is_durable);  n = write(fd, out)  ->  conn.consume_output(n);
//   close when conn.should_close() and the output is flushed, or at once when
//   conn.must_close_now().
//
// Back-pressure: process() stops before a request while the output is over the writer's soft
// limit (resp_writer.h) and wants_input() turns false; the server stops reading the socket
// until the peer drains the output. Input is bounded by the parser's max_request_bytes plus
// one read when the server reads only while wants_input(); output by the writer's hard limit.
// Fairness: process() executes at most max_requests_per_turn requests, then returns with
// has_work() true, so one pipelining client cannot hold a server thread.
// Durability: a committed transaction's reply may leave only once its CommitInfo token is
// durable; sendable() returns the prefix of the output not held behind a non-durable token
// (later replies wait too: replies leave in order).
// Suspension: a request runs as a coroutine (Session::execute) started inline; when the backend
// suspends it (a round trip to another shard), process() returns with in_flight() true and
// the server awaits finish_in_flight() from a task on the loop that resumes the backend, then
// calls process() again. Meanwhile nothing else may touch the connection but the output calls
// (sendable, consume_output): the request's arguments point into the input buffer.
// Threads: owned by one thread (a server: its event loop's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "src/base/env.h"
#include "src/resp/commands.h"
#include "src/resp/kv_backend.h"
#include "src/resp/resp_parser.h"
#include "src/resp/resp_writer.h"
#include "src/runtime/task.h"

namespace shoal::resp {

struct ConnectionOptions {
  ParserLimits parser;
  WriterLimits writer;
  SessionOptions session;
  size_t read_bytes = 16 * 1024;  // input_space()'s size (more while a large bulk is due)
  size_t max_requests_per_turn = 1024;
};

class Connection {
 public:
  Connection(KvBackend& backend, Env& env, ConnectionOptions options = {});

  // Space for the next read; REQUIRES: commit_input() before the next call.
  std::span<char> input_space();
  // n bytes were written at the start of input_space(). REQUIRES: n <= its size.
  void commit_input(size_t n);
  // Copies bytes in and runs process() (tests and benchmarks). It does not wait for the output
  // to drain: bytes beyond a full output stay buffered (input is then unbounded).
  // REQUIRES: a backend that completes inline (asserted: nothing here resumes a suspension).
  void feed(std::string_view bytes);

  // Executes complete requests until one suspends, the input runs out, the output is over its
  // soft limit or max_requests_per_turn ran. REQUIRES: !in_flight().
  void process();
  // A request suspended in its backend: await finish_in_flight(), then process() again.
  bool in_flight() const { return in_flight_.valid(); }
  // Waits for the suspended request to end and completes it (its reply, durability gate,
  // QUIT). REQUIRES: in_flight(); awaited once, on the thread that resumes the backend.
  rt::Task<void> finish_in_flight();

  // The output that may be sent now; is_durable(token) says whether a commit token is durable
  // (nullptr: every token is, replies at the speculative commit). Never the reply of a request
  // in flight (a retry after a conflict takes it back).
  std::string_view sendable(const std::function<bool(uint64_t)>& is_durable = nullptr);
  void consume_output(size_t n);
  size_t pending_output_bytes() const { return out_.pending_bytes(); }

  // Whether to read the socket: not while complete requests wait (has_work(): call process()
  // first) or the output is over its soft limit. Reading only then bounds the input to one
  // partial request (max_request_bytes) plus one read.
  bool wants_input() const {
    return !closing_ && !has_work_ && !in_flight() && !out_.over_soft_limit();
  }
  // Unparsed input remains and process() can make progress on it.
  bool has_work() const { return !closing_ && has_work_ && !in_flight(); }
  // QUIT or a protocol error: close once the output is sent.
  bool should_close() const { return closing_; }
  // The output went over its hard limit: close without sending.
  bool must_close_now() const { return out_.overflowed(); }
  Session& session() { return session_; }

  // Frees the input and output buffers when both are empty, so that an idle connection costs
  // sizeof(Connection) plus its session's small state (a server calls it when a connection
  // goes quiet; 10,000 idle clients must not pin 10,000 x 16 KiB).
  void release_buffers();
  size_t buffer_bytes() const { return in_.capacity() + out_.capacity_bytes(); }

 private:
  // Bookkeeping after a request ended: consumed input, durability gate, QUIT.
  void complete_request();

  struct Gate {
    uint64_t output_start;  // ReplyWriter::written_total() before the gated reply
    uint64_t token;
  };

  ConnectionOptions options_;
  RequestParser parser_;
  Session session_;
  ReplyWriter out_;
  std::vector<char> in_;  // in_[in_head_, in_len_) is unparsed input
  size_t in_head_ = 0;
  size_t in_len_ = 0;
  bool closing_ = false;
  bool has_work_ = false;
  std::deque<Gate> gates_;
  rt::Task<void> in_flight_;  // the request that suspended (empty: none)
  size_t request_bytes_ = 0;  // the executing request's length in the input
  uint64_t reply_start_ = 0;  // ReplyWriter::written_total() before its reply
};

}  // namespace shoal::resp
