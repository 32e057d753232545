#include "src/resp/connection.h"

#include <algorithm>
#include <cstring>

namespace shoal::resp {

Connection::Connection(KvBackend& backend, Env& env, ConnectionOptions options)
    : options_(options),
      parser_(options.parser),
      session_(backend, env, options.session),
      out_(options.writer) {}

std::span<char> Connection::input_space() {
  // Move the unparsed tail to the front once the parsed prefix is no longer needed (the
  // parser keeps offsets, not pointers, so the partial request may move).
  if (in_head_ > 0) {
    std::memmove(in_.data(), in_.data() + in_head_, in_len_ - in_head_);
    in_len_ -= in_head_;
    in_head_ = 0;
  }
  const size_t want =
      std::max(options_.read_bytes,
               std::min(parser_.bytes_wanted(), size_t{options_.parser.max_request_bytes}));
  if (in_.size() < in_len_ + want) in_.resize(in_len_ + want);
  return {in_.data() + in_len_, want};
}

void Connection::commit_input(size_t n) {
  SHOAL_ASSERT(in_len_ + n <= in_.size(), "commit_input(%zu) past the space offered", n);
  in_len_ += n;
  has_work_ = n > 0 || has_work_;
}

void Connection::feed(std::string_view bytes) {
  while (!bytes.empty() && !closing_ && !out_.overflowed()) {  // each pass takes >= 1 byte
    auto space = input_space();
    const size_t n = std::min(space.size(), bytes.size());
    std::memcpy(space.data(), bytes.data(), n);
    commit_input(n);
    bytes.remove_prefix(n);
    // Each process() executes a request or stops for want of bytes or output room.
    do {
      process();
      SHOAL_ASSERT(!in_flight(), "%s", "Connection::feed() over a backend that suspended");
    } while (has_work() && !out_.over_soft_limit());
  }
}

void Connection::process() {
  SHOAL_ASSERT(!in_flight(), "%s", "Connection::process() while a request is in flight");
  has_work_ = false;
  for (size_t done = 0; done < options_.max_requests_per_turn; ++done) {
    if (closing_ || out_.overflowed()) return;
    if (out_.over_soft_limit()) {
      has_work_ = in_head_ < in_len_;
      return;
    }
    const std::string_view buf(in_.data() + in_head_, in_len_ - in_head_);
    auto parsed = parser_.parse(buf);
    if (!parsed.ok()) {
      out_.error("ERR " + parsed.status().message());
      closing_ = true;
      return;
    }
    if (*parsed == 0) return;
    request_bytes_ = *parsed;
    reply_start_ = out_.written_total();
    rt::Task<void> request = session_.execute(parser_.args(), out_);
    if (!request.start_inline()) {
      in_flight_ = std::move(request);
      has_work_ = true;  // process() again once it ended
      return;
    }
    complete_request();
  }
  has_work_ = in_head_ < in_len_;
}

rt::Task<void> Connection::finish_in_flight() {
  SHOAL_ASSERT(in_flight(), "%s", "finish_in_flight() without a request in flight");
  co_await in_flight_.join();
  in_flight_ = rt::Task<void>();
  complete_request();
  has_work_ = in_head_ < in_len_;
}

void Connection::complete_request() {
  in_head_ += request_bytes_;
  request_bytes_ = 0;
  if (const uint64_t token = session_.take_durable_token(); token != 0) {
    gates_.push_back({reply_start_, token});
  }
  if (session_.quit_requested()) closing_ = true;
}

std::string_view Connection::sendable(const std::function<bool(uint64_t)>& is_durable) {
  while (!gates_.empty() && (!is_durable || is_durable(gates_.front().token))) {
    gates_.pop_front();
  }
  const std::string_view pending = out_.pending();
  // A suspended request's partial reply stays: a conflict rolls it back (ReplyWriter::rollback
  // cannot take back bytes already sent).
  uint64_t end = in_flight() ? reply_start_ : out_.written_total();
  if (!gates_.empty()) end = std::min(end, gates_.front().output_start);
  return pending.substr(0, static_cast<size_t>(end - out_.consumed_total()));
}

void Connection::consume_output(size_t n) {
  out_.consume(n);
}

void Connection::release_buffers() {
  if (in_flight()) return;  // its arguments live in the input, its reply may be half written
  if (in_head_ == in_len_) {
    std::vector<char>().swap(in_);
    in_head_ = in_len_ = 0;
  }
  out_.shrink();
}

}  // namespace shoal::resp
