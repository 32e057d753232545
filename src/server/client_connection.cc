#include "src/server/client_connection.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "src/resp/value_format.h"

namespace shoal::server {

namespace proto = client::proto;
using proto::Op;

ClientConnection::ClientConnection(resp::KvBackend& backend, Env& env,
                                   ClientConnectionOptions options)
    : backend_(backend), env_(env), options_(options) {}

ClientConnection::~ClientConnection() = default;

size_t ClientConnection::frame_bytes_wanted() const {
  const size_t have = in_len_ - in_head_;
  if (!hello_done_ || have < proto::kLengthBytes) return 0;
  uint32_t len = 0;
  std::memcpy(&len, in_.data() + in_head_, sizeof(len));
  const size_t total = proto::kLengthBytes + std::min(len, proto::kMaxRequestFrameBytes);
  return total > have ? total - have : 0;
}

std::span<char> ClientConnection::input_space() {
  if (in_head_ > 0) {  // the unparsed tail to the front (no view into it is live here)
    std::memmove(in_.data(), in_.data() + in_head_, in_len_ - in_head_);
    in_len_ -= in_head_;
    in_head_ = 0;
  }
  const size_t want = std::max(options_.read_bytes, frame_bytes_wanted());
  if (in_.size() < in_len_ + want) in_.resize(in_len_ + want);
  return {in_.data() + in_len_, want};
}

void ClientConnection::commit_input(size_t n) {
  SHOAL_ASSERT(in_len_ + n <= in_.size(), "commit_input(%zu) past the space offered", n);
  in_len_ += n;
  has_work_ = n > 0 || has_work_;
}

bool ClientConnection::take_hello(std::string_view buf) {
  Result<proto::Hello> hello = proto::parse_hello(buf);
  Status refused = hello.ok() ? Status::Ok() : hello.status();
  if (hello.ok() && hello->bytes == 0) return false;
  if (refused.ok()) refused = proto::check_password(*hello, options_.password);
  if (!refused.ok()) {
    reply_error(0, refused);
    closing_ = true;
    return false;
  }
  in_head_ += hello->bytes;
  hello_done_ = true;
  proto::FrameWriter w = begin_reply(0, Code::kOk);
  w.u16(hello->version);  // the client's: a version 1 client reads its own back
  w.u32(proto::kMaxRequestFrameBytes);
  w.u32(proto::kMaxHeldReplies);
  end_reply(w);
  return true;
}

void ClientConnection::process() {
  SHOAL_ASSERT(!in_flight(), "%s", "ClientConnection::process() while a request is in flight");
  has_work_ = false;
  for (size_t done = 0; done < options_.max_requests_per_turn; ++done) {
    if (closing_ || overflowed_) return;
    if (blocked()) {
      has_work_ = in_head_ < in_len_;
      return;
    }
    const std::string_view buf(in_.data() + in_head_, in_len_ - in_head_);
    if (!hello_done_) {
      if (!take_hello(buf)) return;
      continue;
    }
    Result<proto::FrameView> f = proto::next_frame(buf, proto::kMaxRequestFrameBytes);
    if (!f.ok()) {
      reply_error(0, f.status());
      closing_ = true;
      return;
    }
    if (f->total_bytes == 0) return;
    request_bytes_ = f->total_bytes;
    rt::Task<void> request = execute(f->id, f->op_or_code, f->body);
    if (!request.start_inline()) {
      in_flight_ = std::move(request);
      has_work_ = true;  // process() again once it ended
      return;
    }
    complete_request();
  }
  has_work_ = in_head_ < in_len_;
}

rt::Task<void> ClientConnection::finish_in_flight() {
  SHOAL_ASSERT(in_flight(), "%s", "finish_in_flight() without a request in flight");
  co_await in_flight_.join();
  in_flight_ = rt::Task<void>();
  complete_request();
  has_work_ = in_head_ < in_len_;
}

void ClientConnection::complete_request() {
  in_head_ += request_bytes_;
  request_bytes_ = 0;
}

std::string_view ClientConnection::sendable(const std::function<bool(uint64_t)>& is_durable) {
  while (!gates_.empty() && (!is_durable || is_durable(gates_.front().token))) {
    gates_.pop_front();
  }
  // A request in flight has written nothing yet (its reply is written when it ends).
  uint64_t end = written_total();
  if (!gates_.empty()) end = std::min(end, gates_.front().output_start);
  return std::string_view(out_).substr(out_head_, static_cast<size_t>(end - consumed_total_));
}

void ClientConnection::consume_output(size_t n) {
  SHOAL_ASSERT(n <= pending_output_bytes(), "consume_output(%zu) past the output", n);
  out_head_ += n;
  consumed_total_ += n;
  if (out_head_ == out_.size()) {
    out_.clear();
    out_head_ = 0;
  } else if (out_head_ > out_.size() / 2) {
    out_.erase(0, out_head_);
    out_head_ = 0;
  }
}

void ClientConnection::release_buffers() {
  if (in_flight()) return;
  if (in_head_ == in_len_) {
    std::vector<char>().swap(in_);
    in_head_ = in_len_ = 0;
  }
  if (pending_output_bytes() == 0) {
    std::string().swap(out_);
    out_head_ = 0;
  }
  std::string().swap(value_);
  std::string().swap(stored_);
  std::string().swap(cursor_);
  std::vector<resp::KeyValue>().swap(entries_);
}

std::unique_ptr<resp::KvTxn> ClientConnection::take_open_txn() {
  SHOAL_ASSERT(!in_flight(), "%s", "take_open_txn() with a request in flight");
  if (!txn_open_) return nullptr;
  txn_open_ = false;
  return std::move(txn_);
}

proto::FrameWriter ClientConnection::begin_reply(uint64_t id, Code code) {
  proto::FrameWriter w(&out_);
  w.begin(id, static_cast<uint8_t>(code));
  return w;
}

void ClientConnection::end_reply(proto::FrameWriter& w) {
  (void)w.end();
  if (pending_output_bytes() > options_.output_hard_limit_bytes) overflowed_ = true;
}

void ClientConnection::reply_error(uint64_t id, const Status& s) {
  SHOAL_ASSERT(!s.ok(), "%s", "reply_error with an ok status");
  proto::FrameWriter w = begin_reply(id, s.code());
  w.str(s.message().empty() ? std::string(code_name(s.code())) : s.message());
  end_reply(w);
}

void ClientConnection::reply_malformed(uint64_t id, uint8_t op) {
  reply_error(id, Status::InvalidArgument(
                      fmt::format("malformed {} request (its fields overrun or underrun the "
                                  "frame)",
                                  proto::op_name(op))));
  closing_ = true;
}

void ClientConnection::hold_next_reply(uint64_t token) {
  if (token != 0) gates_.push_back({written_total(), token});
}

Result<bool> ClientConnection::visible(std::string_view stored, std::string_view* payload) const {
  Result<resp::StoredString> s = resp::decode_string(stored);
  if (!s.ok()) return s.status();
  if (s->expired(env_.wall_us() / 1000)) return false;
  *payload = s->payload;
  return true;
}

rt::Task<void> ClientConnection::execute(uint64_t id, uint8_t op, std::string_view body) {
  if (op == 0 || op > proto::kOpMax) {
    reply_error(id, Status::InvalidArgument(fmt::format("unknown opcode {}", op)));
    co_return;
  }
  const auto o = static_cast<Op>(op);
  if (o == Op::kGetOne || o == Op::kPutOne || o == Op::kDelOne) {
    co_await single(id, o, body);
    co_return;
  }
  if (o == Op::kBegin || o == Op::kAbort) {
    if (!body.empty()) {
      reply_malformed(id, op);
      co_return;
    }
    if (o == Op::kBegin && txn_open_) {
      reply_error(id, Status::InvalidArgument("begin: a transaction is already open"));
      co_return;
    }
    if (o == Op::kBegin) {
      if (txn_ == nullptr) txn_ = backend_.open_interactive();
      txn_->begin();
      txn_open_ = true;
    } else if (txn_open_) {
      txn_open_ = false;
      co_await txn_->abort();
    }
    proto::FrameWriter w = begin_reply(id, Code::kOk);
    end_reply(w);
    co_return;
  }
  if (!txn_open_) {
    reply_error(id, Status::InvalidArgument(fmt::format("{}: no transaction is open (begin first)",
                                                        proto::op_name(op))));
    co_return;
  }
  co_await txn_op(id, o, body);
}

rt::Task<void> ClientConnection::fail_txn(uint64_t id, Status s) {
  txn_open_ = false;
  co_await txn_->abort();
  if (s.is_aborted()) {
    s = Status::Aborted(s.message().empty() ? "conflict: the transaction was aborted; retry it"
                                            : "conflict: " + s.message() + "; retry it");
  }
  reply_error(id, s);
}

rt::Task<void> ClientConnection::txn_op(uint64_t id, Op op, std::string_view body) {
  proto::FrameReader r(body);
  if (op == Op::kScan) {
    co_await scan(id, r);
    co_return;
  }
  if (op == Op::kCommit) {
    co_await commit(id, r);
    co_return;
  }
  const std::string_view key = r.str();
  const std::string_view value = op == Op::kPut ? r.str() : std::string_view();
  if (!r.done()) {
    reply_malformed(id, static_cast<uint8_t>(op));
    co_return;
  }
  Status bad = proto::check_key(key);
  if (bad.ok()) bad = proto::check_value(value);
  if (!bad.ok()) {  // refused before it reached the transaction, which stays open
    reply_error(id, bad);
    co_return;
  }
  Status s;
  if (op == Op::kGet) {
    uint64_t version = 0;
    s = co_await txn_->get(key, &value_, &version);
  } else if (op == Op::kPut) {
    resp::encode_string(value, resp::kNoExpiry, &stored_);
    s = co_await txn_->put(key, stored_);
  } else {
    s = co_await txn_->del(key);
  }
  std::string_view payload;
  if (s.ok() && op == Op::kGet) {
    Result<bool> v = visible(value_, &payload);
    s = !v.ok() ? v.status() : *v ? Status::Ok() : Status::NotFound();
  }
  if (s.is_not_found()) {
    reply_error(id, s);
    co_return;
  }
  if (!s.ok()) {
    co_await fail_txn(id, std::move(s));
    co_return;
  }
  proto::FrameWriter w = begin_reply(id, Code::kOk);
  if (op == Op::kGet) w.str(payload);
  end_reply(w);
}

rt::Task<void> ClientConnection::scan(uint64_t id, proto::FrameReader& r) {
  const std::string_view start = r.str();
  const bool start_exclusive = r.u8() != 0;
  const std::string_view end = r.str();
  const uint32_t limit = r.u32();
  if (!r.done()) {
    reply_malformed(id, static_cast<uint8_t>(Op::kScan));
    co_return;
  }
  if (limit == 0 || limit > proto::kScanLimitMax || start.size() > proto::kMaxKeyBytes ||
      end.size() > proto::kMaxKeyBytes) {
    reply_error(id, Status::InvalidArgument(
                        fmt::format("scan: limit {} not in [1, {}], or a bound over {} bytes",
                                    limit, proto::kScanLimitMax, proto::kMaxKeyBytes)));
    co_return;
  }
  resp::ScanRange range{start, !start_exclusive, end};
  entries_.clear();
  size_t shown_bytes = 0;
  bool more = false;
  for (uint32_t got = 0; got < limit;) {  // one bounded batch per pass
    const uint32_t batch = std::min(limit - got, proto::kScanBatchMax);
    const size_t before = entries_.size();
    Status s = co_await txn_->scan(range, batch, resp::kMaxStoredValueBytes, &entries_);
    const size_t n = entries_.size() - before;
    if (s.ok() && n > 0) cursor_ = entries_.back().key;  // where the next batch starts
    // Keep what the client sees: payloads, expired keys dropped.
    size_t kept = before;
    for (size_t i = before; s.ok() && i < entries_.size(); ++i) {
      std::string_view payload;
      Result<bool> v = visible(entries_[i].value, &payload);
      if (!v.ok()) s = v.status();
      if (!v.ok() || !*v) continue;
      entries_[i].value.erase(0, payload.data() - entries_[i].value.data());
      shown_bytes += entries_[i].key.size() + entries_[i].value.size();
      if (kept != i) entries_[kept] = std::move(entries_[i]);
      ++kept;
    }
    if (!s.ok()) {
      co_await fail_txn(id, std::move(s));
      co_return;
    }
    entries_.resize(kept);
    got += static_cast<uint32_t>(n);
    if (n < batch || got == limit) break;  // the range is exhausted, or the limit reached
    if (shown_bytes >= proto::kScanReplyBudgetBytes) {
      more = true;  // the client goes on after the last key shown (which exists: bytes > 0)
      break;
    }
    range.start = cursor_;
    range.start_inclusive = false;
  }
  proto::FrameWriter w = begin_reply(id, Code::kOk);
  w.u32(static_cast<uint32_t>(entries_.size()));
  for (const resp::KeyValue& e : entries_) {
    w.str(e.key);
    w.str(e.value);
  }
  w.u8(more ? 1 : 0);
  end_reply(w);
}

rt::Task<void> ClientConnection::commit(uint64_t id, proto::FrameReader& r) {
  const uint8_t durability = r.u8();
  if (!r.done() || durability > static_cast<uint8_t>(proto::Durability::kSpeculative)) {
    reply_malformed(id, static_cast<uint8_t>(Op::kCommit));
    co_return;
  }
  txn_open_ = false;
  Result<resp::CommitInfo> c = co_await txn_->commit();
  if (!c.ok()) {
    Status s = c.status();
    if (s.is_aborted()) {
      s = Status::Aborted(s.message().empty() ? "conflict at commit: retry the transaction"
                                              : "conflict at commit: " + s.message());
    }
    reply_error(id, s);
    co_return;
  }
  const bool durable =
      durability == static_cast<uint8_t>(proto::Durability::kDurable) && options_.durable_acks;
  if (durable) hold_next_reply(c->durable_token);
  proto::FrameWriter w = begin_reply(id, Code::kOk);
  w.u8(durable ? 1 : 0);
  end_reply(w);
}

rt::Task<void> ClientConnection::single(uint64_t id, Op op, std::string_view body) {
  proto::FrameReader r(body);
  const uint8_t durability = r.u8();
  const std::string_view key = r.str();
  const std::string_view value = op == Op::kPutOne ? r.str() : std::string_view();
  if (!r.done() || durability > static_cast<uint8_t>(proto::Durability::kSpeculative)) {
    reply_malformed(id, static_cast<uint8_t>(op));
    co_return;
  }
  Status s = proto::check_key(key);
  if (s.ok()) s = proto::check_value(value);
  if (!s.ok()) {
    reply_error(id, s);
    co_return;
  }
  if (op == Op::kPutOne) resp::encode_string(value, resp::kNoExpiry, &stored_);
  if (one_ == nullptr) one_ = backend_.open();
  bool found = true;
  Result<resp::CommitInfo> c = resp::CommitInfo{};
  for (uint32_t attempt = 0; attempt < options_.max_txn_attempts; ++attempt) {
    one_->begin();
    uint64_t version = 0;
    if (op == Op::kGetOne) {
      s = co_await one_->get(key, &value_, &version);
    } else if (op == Op::kPutOne) {
      s = co_await one_->put(key, stored_);
    } else {
      s = co_await one_->del(key);
    }
    found = !s.is_not_found();
    if (!found) s = Status::Ok();
    if (!s.ok()) {
      co_await one_->abort();
      if (s.is_aborted()) continue;
      break;
    }
    c = co_await one_->commit();
    s = c.ok() ? Status::Ok() : c.status();
    if (!s.is_aborted()) break;
  }
  std::string_view payload;
  if (s.ok() && op == Op::kGetOne && found) {
    Result<bool> v = visible(value_, &payload);
    s = v.ok() ? Status::Ok() : v.status();
    found = v.ok() && *v;
  }
  if (s.is_aborted()) {
    s = Status::Aborted(fmt::format("{}: gave up after {} conflicting attempts",
                                    proto::op_name(static_cast<uint8_t>(op)),
                                    options_.max_txn_attempts));
  }
  const bool durable =
      durability == static_cast<uint8_t>(proto::Durability::kDurable) && options_.durable_acks;
  if (s.ok() && durable) hold_next_reply(c->durable_token);
  if (!s.ok()) {
    reply_error(id, s);
  } else if (!found) {
    reply_error(id, Status::NotFound());
  } else {
    proto::FrameWriter w = begin_reply(id, Code::kOk);
    if (op == Op::kGetOne) w.str(payload);
    w.u8(durable ? 1 : 0);
    end_reply(w);
  }
}

}  // namespace shoal::server
