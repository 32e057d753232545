// ClientConnection: the server's side of one Shoal client protocol connection
// (src/client/protocol.h, docs/CLIENT.md): input buffer, frame decoding, the client's
// transactions over a resp::KvBackend, the reply buffer and its durability gate. It does no
// I/O: a StreamWorker (resp_listener.h) moves its bytes exactly as it does a resp::Connection's,
// with the same calls:
//
//   auto space = conn.input_space();  n = read(fd, space)  ->  conn.commit_input(n);
//   conn.process();                   handshake, then complete request frames in order
//   if (conn.in_flight()) co_await conn.finish_in_flight();   (a request suspended)
//   auto out = conn.sendable(is_durable);  n = write(fd, out)  ->  conn.consume_output(n);
//   close when should_close() and the output is flushed, or at once when must_close_now().
//
// Transactions: one interactive transaction at a time (begin ... commit/abort), on a KvTxn
// from KvBackend::open_interactive() (it stays open between the client's requests, so it may
// not hold anything the loop's other sessions need); single-key operations run on a second
// KvTxn (KvBackend::open(): the local fast path) as one transaction each, retried on
// conflicts up to max_txn_attempts. An operation's failure other than NotFound or a bad
// argument ends the open transaction (aborted; Aborted means "retry it"). When the client
// goes away with a transaction open, the server takes it (take_open_txn()) and aborts it.
// Values are stored in the Redis layer's format (resp/value_format.h, plain), so both ports
// see one key space: a key SET with an expiry that has passed is absent here too.
// Durability: a commit (or single-key operation) asked durable has its reply held until its
// token is durable (sendable(is_durable)); replies leave in request order, so later replies
// wait behind it. The reply says durable only when the server acknowledges by the vectorized
// watermark (options.durable_acks: a replicated cluster); else the commit is speculative.
// Bounds: a request frame of at most proto::kMaxRequestFrameBytes (the input holds one partial
// frame plus one read); at most proto::kMaxHeldReplies replies held for durability (beyond,
// no input is read or processed); output soft limit (stop processing) and hard limit (close).
// Authentication: with options.password set, a hello without that password is answered with
// a PermissionDenied error frame and the connection closes; nothing after the hello is
// executed before it was accepted.
// Malformed input (bad hello, oversized or malformed frame) is answered with an error frame
// (id 0 when the frame's id is unknown) and the connection closes; an unknown opcode is
// answered and the connection goes on.
// Threads: owned by one thread (the server's event loop that serves the client).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/env.h"
#include "src/client/protocol.h"
#include "src/resp/kv_backend.h"
#include "src/runtime/task.h"

namespace shoal::server {

struct ClientConnectionOptions {
  size_t read_bytes = 4096;  // input_space()'s size (more while a large frame is due)
  size_t max_requests_per_turn = 1024;
  uint32_t max_txn_attempts = 1000;  // a single-key operation's conflicts before Aborted
  size_t output_soft_limit_bytes = size_t{1} << 20;
  size_t output_hard_limit_bytes = size_t{64} << 20;
  // The backend's commit tokens stand for the vectorized watermark (a replicated cluster):
  // a reply held until its token is durable says durable.
  bool durable_acks = false;
  // The password the hello must carry (empty: none asked). Its bytes outlive the connection.
  std::string_view password;
};

class ClientConnection {
 public:
  ClientConnection(resp::KvBackend& backend, Env& env, ClientConnectionOptions options = {});
  ~ClientConnection();
  ClientConnection(const ClientConnection&) = delete;
  ClientConnection& operator=(const ClientConnection&) = delete;

  // Space for the next read; REQUIRES: commit_input() before the next call.
  std::span<char> input_space();
  // n bytes were written at the start of input_space(). REQUIRES: n <= its size.
  void commit_input(size_t n);
  // Handles the hello, then executes complete frames until one suspends, the input runs out,
  // the output is over its soft limit, kMaxHeldReplies are held or max_requests_per_turn ran.
  // REQUIRES: !in_flight().
  void process();
  bool in_flight() const { return in_flight_.valid(); }
  // Waits for the suspended request to end and completes it. REQUIRES: in_flight(); awaited
  // once, on the thread that resumes the backend.
  rt::Task<void> finish_in_flight();

  // The output that may be sent now (nullptr: every token is durable).
  std::string_view sendable(const std::function<bool(uint64_t)>& is_durable = nullptr);
  void consume_output(size_t n);
  size_t pending_output_bytes() const { return out_.size() - out_head_; }

  bool wants_input() const { return !closing_ && !has_work_ && !in_flight() && !blocked(); }
  bool has_work() const { return !closing_ && has_work_ && !in_flight() && !blocked(); }
  bool should_close() const { return closing_; }
  bool must_close_now() const { return overflowed_; }
  // Frees the input and output buffers and large scratch when they are empty (an idle
  // connection: it then holds sizeof(ClientConnection) plus its KvTxns once used).
  void release_buffers();
  // Heap bytes held by its buffers and scratch.
  size_t buffer_bytes() const {
    return in_.capacity() + heap_bytes(out_) + heap_bytes(value_) + heap_bytes(stored_) +
           heap_bytes(cursor_) + entries_.capacity() * sizeof(resp::KeyValue);
  }
  // The interactive transaction when one is open (the client went away: abort it), else
  // nullptr. REQUIRES: !in_flight().
  std::unique_ptr<resp::KvTxn> take_open_txn();

 private:
  struct Gate {
    uint64_t output_start;  // written_total() before the held reply
    uint64_t token;
  };
  static size_t heap_bytes(const std::string& s) {
    return s.capacity() > std::string().capacity() ? s.capacity() : 0;  // not the inline buffer
  }
  bool blocked() const {
    return pending_output_bytes() >= options_.output_soft_limit_bytes ||
           gates_.size() >= client::proto::kMaxHeldReplies;
  }
  uint64_t written_total() const { return consumed_total_ + pending_output_bytes(); }
  // The hello at the start of the input: false while incomplete or when it was refused (a
  // bad magic or version, or the password).
  bool take_hello(std::string_view buf);
  rt::Task<void> execute(uint64_t id, uint8_t op, std::string_view body);
  rt::Task<void> txn_op(uint64_t id, client::proto::Op op, std::string_view body);
  rt::Task<void> scan(uint64_t id, client::proto::FrameReader& r);
  rt::Task<void> commit(uint64_t id, client::proto::FrameReader& r);
  rt::Task<void> single(uint64_t id, client::proto::Op op, std::string_view body);
  // Ends the open transaction after a failed operation and answers `s`.
  rt::Task<void> fail_txn(uint64_t id, Status s);
  // A stored value as the client sees it: false when absent (expired); error when malformed.
  Result<bool> visible(std::string_view stored, std::string_view* payload) const;
  void complete_request();
  void reply_error(uint64_t id, const Status& s);
  void reply_malformed(uint64_t id, uint8_t op);
  // Starts a reply frame; end_reply() closes it (and checks the hard limit).
  client::proto::FrameWriter begin_reply(uint64_t id, Code code);
  void end_reply(client::proto::FrameWriter& w);
  // Holds the next reply until `token` is durable (0: nothing to hold).
  void hold_next_reply(uint64_t token);
  size_t frame_bytes_wanted() const;

  resp::KvBackend& backend_;
  Env& env_;
  ClientConnectionOptions options_;
  std::unique_ptr<resp::KvTxn> txn_;  // interactive (open_interactive()); made on first use
  std::unique_ptr<resp::KvTxn> one_;  // single-key operations (open()); made on first use
  bool txn_open_ = false;
  bool hello_done_ = false;
  bool closing_ = false;
  bool overflowed_ = false;
  bool has_work_ = false;
  std::vector<char> in_;  // in_[in_head_, in_len_) is unparsed input
  size_t in_head_ = 0;
  size_t in_len_ = 0;
  std::string out_;  // out_[out_head_, size) is unsent output
  size_t out_head_ = 0;
  uint64_t consumed_total_ = 0;
  std::deque<Gate> gates_;
  rt::Task<void> in_flight_;
  size_t request_bytes_ = 0;
  // Per request scratch, kept for reuse (freed by release_buffers()).
  std::string value_;
  std::string stored_;
  std::string cursor_;
  std::vector<resp::KeyValue> entries_;
};

}  // namespace shoal::server
