#include "shoal/client.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "src/base/env.h"
#include "src/client/protocol.h"
#include "src/cluster/config.h"

namespace shoal {

namespace proto = client::proto;
using proto::Op;

namespace {

// Each recv() asks for at least this much room (grown once at connect: no per-read fill).
constexpr size_t kReadBytes = 64 << 10;
// Waits that do not poll after a poll ran out, at most (Client::fill).
constexpr uint32_t kSpinSkipMax = 256;
// Queued pipelined requests are sent once they are this many bytes (a socket buffer's worth).
constexpr size_t kFlushBytes = 64 << 10;
constexpr uint64_t kBackoffMinNs = 50'000;      // run(): the first retry's wait, at most
constexpr uint64_t kBackoffMaxNs = 20'000'000;  // and the cap

void set_timeout(int fd, int option, int ms) {
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  (void)setsockopt(fd, SOL_SOCKET, option, &tv, sizeof(tv));
}

// A connected TCP socket to host:port, or Unavailable saying why.
Result<int> dial(const std::string& host, uint16_t port, int timeout_ms) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) {
    return Status::Unavailable(fmt::format("cannot resolve '{}'", host));
  }
  sockaddr_in addr = *reinterpret_cast<sockaddr_in*>(found->ai_addr);
  freeaddrinfo(found);
  addr.sin_port = htons(port);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Unavailable(fmt::format("socket: {}", strerror(errno)));
  set_timeout(fd, SO_SNDTIMEO, timeout_ms);  // Linux bounds connect() by it too
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const std::string why = strerror(errno);
    ::close(fd);
    return Status::Unavailable(fmt::format("cannot connect to {}:{}: {}", host, port, why));
  }
  const int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

uint64_t mono_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

struct Client::Reply {
  Code code = Code::kOk;
  std::string_view body;  // an ok reply's fields; an error's message (into Client::in_)
  Status status() const {
    if (code == Code::kOk) return Status::Ok();
    proto::FrameReader r(body);
    const std::string_view msg = r.str();
    return status_from_code(code, std::string(r.ok() ? msg : std::string_view(body)));
  }
};

// ---- Client ----

Result<std::unique_ptr<Client>> Client::connect(const std::string& host, uint16_t port,
                                                ClientOptions options) {
  if (options.password.size() > proto::kMaxPasswordBytes) {
    return Status::InvalidArgument(fmt::format("password of {} bytes: at most {}",
                                               options.password.size(), proto::kMaxPasswordBytes));
  }
  Result<int> fd = dial(host, port, options.connect_timeout_ms);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<Client> c(new Client());
  c->fd_ = *fd;
  c->server_ = fmt::format("{}:{}", host, port);
  c->options_ = options;
  c->in_.resize(kReadBytes);  // once: recv() writes into it without filling it first
  set_timeout(c->fd_, SO_SNDTIMEO, options.io_timeout_ms);
  set_timeout(c->fd_, SO_RCVTIMEO, options.io_timeout_ms);
  SHOAL_TRY(c->handshake());
  return c;
}

Result<std::unique_ptr<Client>> Client::connect_cluster(const std::string& config_path,
                                                        ClientOptions options) {
  Result<cluster::ClusterConfig> config = cluster::load_config_file(config_path);
  if (!config.ok()) return config.status();
  if (options.password.empty() && !config->resp_password_file.empty()) {
    Result<std::string> password =
        cluster::read_password_file(config->resp_password_file, "cluster.resp_password_file");
    if (!password.ok()) return password.status();
    options.password = std::move(*password);
  }
  // Leaders first (replica 0 at start), from a shard picked by the process id so that
  // clients spread over the servers; then every other replica (a promoted follower).
  std::vector<const cluster::Replica*> order;
  const size_t shards = config->shards.size();
  const size_t first = static_cast<size_t>(getpid()) % shards;
  for (size_t pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < shards; ++i) {
      const cluster::Shard& shard = config->shards[(first + i) % shards];
      for (size_t r = pass == 0 ? 0 : 1; r < (pass == 0 ? 1 : shard.replicas.size()); ++r) {
        if (shard.replicas[r].client_port != 0) order.push_back(&shard.replicas[r]);
      }
    }
  }
  if (order.empty()) {
    return Status::InvalidArgument(
        fmt::format("{}: no replica has a client_port (docs/CLIENT.md)", config_path));
  }
  std::string tried;
  for (const cluster::Replica* r : order) {
    Result<std::unique_ptr<Client>> c = connect(r->host, r->client_port, options);
    if (c.ok()) return c;
    if (c.status().code() != Code::kUnavailable) return c.status();
    tried += fmt::format("{}{}", tried.empty() ? "" : "; ", c.status().message());
  }
  return Status::Unavailable(fmt::format(
      "no server of cluster '{}' answers on its client port ({})", config->name, tried));
}

Client::~Client() {
  if (fd_ >= 0) ::close(fd_);
}

Status Client::broken(Status why) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  in_head_ = in_len_ = consumed_ = 0;
  out_.clear();
  pipelined_ = 0;  // their replies will not come
  return why;
}

Status Client::check_idle(const char* what) const {
  if (pipelined_ == 0) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "{}: {} pipelined gets outstanding (receive_get() them first)", what, pipelined_));
}

Status Client::handshake() {
  out_ = proto::hello(proto::kVersion, options_.password);
  SHOAL_TRY(send_out());
  Reply r;
  SHOAL_TRY(read_reply(0, &r));
  if (r.code != Code::kOk) return broken(r.status());
  proto::FrameReader f(r.body);
  const uint16_t version = f.u16();
  (void)f.u32();  // the server's frame maximum: ours (kMaxRequestFrameBytes) is below it
  (void)f.u32();
  if (!f.ok() || version != proto::kVersion) {
    return broken(Status::Corruption(
        fmt::format("server {} answered the hello with version {}", server_, version)));
  }
  return Status::Ok();
}

Status Client::send_out() {
  if (fd_ < 0) return Status::Unavailable(fmt::format("not connected to {}", server_));
  std::string_view bytes(out_);
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      bytes.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
      return broken(
          Status::Unavailable(fmt::format("server {}: send failed: {}", server_, strerror(errno))));
    }
    // The socket is full: the server may be waiting for us to read its replies (pipelined
    // requests) before it reads more, so take what it sent while waiting for room.
    pollfd p{fd_, POLLIN | POLLOUT, 0};
    const int ready = ::poll(&p, 1, options_.io_timeout_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      return broken(Status::Timeout(fmt::format("server {} takes no input", server_)));
    }
    if ((p.revents & POLLIN) != 0) {
      const int64_t got = recv_some(MSG_DONTWAIT);
      if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        return broken(Status::Unavailable(fmt::format("server {} closed the connection", server_)));
      }
    } else if ((p.revents & (POLLERR | POLLHUP)) != 0 && (p.revents & POLLOUT) == 0) {
      return broken(Status::Unavailable(fmt::format("server {}: connection lost", server_)));
    }
  }
  out_.clear();
  return Status::Ok();
}

int64_t Client::recv_some(int flags) {
  if (in_head_ > 0 && in_.size() - in_len_ < kReadBytes) {  // the unread tail to the front
    std::memmove(in_.data(), in_.data() + in_head_, in_len_ - in_head_);
    in_len_ -= in_head_;
    in_head_ = 0;
  }
  // Grows only for replies larger than the buffer (or many pipelined ones read at once).
  if (in_.size() - in_len_ < kReadBytes) in_.resize(in_len_ + kReadBytes);
  const ssize_t n = ::recv(fd_, in_.data() + in_len_, in_.size() - in_len_, flags);
  if (n > 0) in_len_ += static_cast<size_t>(n);
  return n;
}

Status Client::fill() {
  if (fd_ < 0) return Status::Unavailable(fmt::format("not connected to {}", server_));
  // Poll first, bounded: a reply that comes within spin_us saves the sleep and the wake-up.
  // A poll that runs out without one (a slow request, or a machine with no core to spare for
  // both us and the server: then polling only delays the server) doubles spin_backoff_ (up to
  // kSpinSkipMax), a reply caught while polling halves it; after either, the next
  // spin_backoff_ waits sleep at once. So a client that keeps missing polls about once per
  // kSpinSkipMax waits, and it takes a run of caught replies to poll every time again.
  uint64_t spin_ns = static_cast<uint64_t>(std::max(options_.spin_us, 0)) * 1000;
  if (spin_skip_ > 0) {
    --spin_skip_;
    spin_ns = 0;
  }
  const uint64_t start = spin_ns > 0 ? mono_ns() : 0;
  for (bool spinning = spin_ns > 0;;) {
    if (spinning && mono_ns() - start >= spin_ns) {
      spinning = false;
      spin_backoff_ = std::min(std::max(2 * spin_backoff_, 1u), kSpinSkipMax);
      spin_skip_ = spin_backoff_;
    }
    const int64_t n = recv_some(spinning ? MSG_DONTWAIT : 0);
    if (n > 0) {
      if (spinning) {
        spin_backoff_ /= 2;
        spin_skip_ = spin_backoff_;
      }
      return Status::Ok();
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (spinning) continue;
      return broken(Status::Timeout(
          fmt::format("server {} did not answer within {} ms", server_, options_.io_timeout_ms)));
    }
    return broken(Status::Unavailable(
        n == 0 ? fmt::format("server {} closed the connection", server_)
               : fmt::format("server {}: receive failed: {}", server_, strerror(errno))));
  }
}

Status Client::read_reply(uint64_t id, Reply* reply) {
  in_head_ += consumed_;  // the previous reply's frame: its body is no longer referenced
  consumed_ = 0;
  for (;;) {  // each pass reads more bytes, or returns
    const std::string_view buf(in_.data() + in_head_, in_len_ - in_head_);
    Result<proto::FrameView> f = proto::next_frame(buf, proto::kMaxReplyFrameBytes);
    if (!f.ok()) return broken(Status::Corruption("reply: " + f.status().message()));
    if (f->total_bytes > 0) {
      if (f->id != id && f->id != 0) {
        return broken(Status::Corruption(
            fmt::format("server {} answered request {} when {} was due", server_, f->id, id)));
      }
      reply->code = static_cast<Code>(f->op_or_code);
      reply->body = f->body;
      consumed_ = f->total_bytes;
      // An id of 0 on a request's reply: the server refused the connection or the stream.
      if (f->id != id && reply->code == Code::kOk) return broken(Status::Corruption("reply id 0"));
      if (f->id != id) {
        const Status why = reply->status();
        return broken(why);
      }
      return Status::Ok();
    }
    SHOAL_TRY(fill());
  }
}

Status Client::call(uint8_t op, Reply* reply) {
  if (fd_ < 0)
    return Status::Unavailable(fmt::format("not connected to {} (connect again)", server_));
  SHOAL_TRY(check_idle(proto::op_name(op)));
  out_.clear();
  proto::FrameWriter w(&out_);
  const bool in_txn = op <= static_cast<uint8_t>(Op::kAbort);
  uint64_t begin_id = 0;
  if (in_txn && begin_pending_) {  // the transaction's begin goes with its first operation
    begin_id = next_id_++;
    w.begin(begin_id, static_cast<uint8_t>(Op::kBegin));
    (void)w.end();
    begin_pending_ = false;
  }
  const uint64_t id = next_id_++;
  w.begin(id, op);
  out_.append(body_);
  (void)w.end();
  SHOAL_TRY(send_out());
  if (begin_id != 0) {
    Reply begun;
    SHOAL_TRY(read_reply(begin_id, &begun));
    const Status begun_status = begun.status();  // its body goes with the next read
    SHOAL_TRY(read_reply(id, reply));
    if (!begun_status.ok()) return begun_status;  // the operation failed as well
  } else {
    SHOAL_TRY(read_reply(id, reply));
  }
  return Status::Ok();
}

Status Client::send_get(std::string_view key, Durability durability) {
  if (fd_ < 0)
    return Status::Unavailable(fmt::format("not connected to {} (connect again)", server_));
  SHOAL_TRY(proto::check_key(key));
  if (txn_open_) return Status::InvalidArgument("send_get: a transaction is open");
  if (pipelined_ >= kMaxPipelined) {
    return Status::InvalidArgument(
        fmt::format("send_get: {} gets outstanding, the most a client pipelines (receive first)",
                    kMaxPipelined));
  }
  proto::FrameWriter w(&out_);  // behind the gets queued before it
  w.begin(next_id_++, static_cast<uint8_t>(Op::kGetOne));
  w.u8(static_cast<uint8_t>(durability));
  w.str(key);
  (void)w.end();
  ++pipelined_;
  if (out_.size() >= kFlushBytes) return send_out();
  return Status::Ok();
}

Status Client::flush() {
  if (out_.empty()) return Status::Ok();
  return send_out();
}

Status Client::receive_get(std::string* value) {
  if (pipelined_ == 0) return Status::InvalidArgument("receive_get: no get outstanding");
  SHOAL_TRY(flush());
  Reply r;
  SHOAL_TRY(read_reply(next_id_ - pipelined_, &r));
  --pipelined_;
  return get_one_result(r, value);
}

Status Client::get_one_result(const Reply& r, std::string* value) {
  SHOAL_TRY(r.status());
  proto::FrameReader f(r.body);
  value->assign(f.str());
  (void)f.u8();
  if (!f.done()) return broken(Status::Corruption("malformed single-key get reply"));
  return Status::Ok();
}

Result<Transaction> Client::begin() {
  if (fd_ < 0)
    return Status::Unavailable(fmt::format("not connected to {} (connect again)", server_));
  SHOAL_TRY(check_idle("begin"));
  if (txn_open_) {
    return Status::InvalidArgument("begin: this client has a transaction open (one at a time)");
  }
  txn_open_ = true;
  begin_pending_ = true;
  return Transaction(this);
}

Status Client::run(const std::function<Status(Transaction&)>& fn, RunOptions options,
                   CommitResult* result) {
  Env& env = options_.env != nullptr ? *options_.env : RealEnv::instance();
  Rng rng(env.seed());
  Status last = Status::Aborted("run: max_attempts is 0");
  for (uint32_t attempt = 0; attempt < options.max_attempts; ++attempt) {
    if (attempt > 0) {  // randomized, growing: two clients that collided do not collide again
      const uint64_t cap = std::min(kBackoffMaxNs, kBackoffMinNs << std::min(attempt, 16u));
      env.sleep_ns(rng.next() % cap);
    }
    Result<Transaction> t = begin();
    if (!t.ok()) return t.status();
    Status s = fn(*t);
    if (s.ok() && t->open()) {
      Result<CommitResult> c = t->commit(options.durability);
      if (c.ok() && result != nullptr) *result = *c;
      s = c.ok() ? Status::Ok() : c.status();
    } else if (t->open()) {
      t->abort().ignore();  // fn's error is the answer; the abort's own is secondary
    }
    if (!s.is_aborted()) return s;
    last = std::move(s);
  }
  return last;
}

Status Client::get(std::string_view key, std::string* value, Durability durability) {
  SHOAL_TRY(proto::check_key(key));
  body_.clear();
  proto::FrameWriter w(&body_);
  w.u8(static_cast<uint8_t>(durability));
  w.str(key);
  Reply r;
  SHOAL_TRY(call(static_cast<uint8_t>(Op::kGetOne), &r));
  return get_one_result(r, value);
}

Result<CommitResult> Client::put(std::string_view key, std::string_view value,
                                 Durability durability) {
  SHOAL_TRY(proto::check_value(value));
  return write_one(static_cast<uint8_t>(Op::kPutOne), key, &value, durability);
}

Result<CommitResult> Client::del(std::string_view key, Durability durability) {
  return write_one(static_cast<uint8_t>(Op::kDelOne), key, nullptr, durability);
}

Result<CommitResult> Client::write_one(uint8_t op, std::string_view key,
                                       const std::string_view* value, Durability durability) {
  SHOAL_TRY(proto::check_key(key));
  body_.clear();
  proto::FrameWriter w(&body_);
  w.u8(static_cast<uint8_t>(durability));
  w.str(key);
  if (value != nullptr) w.str(*value);
  Reply r;
  SHOAL_TRY(call(op, &r));
  SHOAL_TRY(r.status());
  proto::FrameReader f(r.body);
  CommitResult c{f.u8() != 0};
  if (!f.done()) return broken(Status::Corruption("malformed single-key write reply"));
  return c;
}

// ---- Transaction ----

Transaction::Transaction(Transaction&& other) noexcept : client_(other.client_) {
  other.client_ = nullptr;
}

Transaction& Transaction::operator=(Transaction&& other) noexcept {
  if (this != &other) {
    if (open()) abort().ignore();
    client_ = other.client_;
    other.client_ = nullptr;
  }
  return *this;
}

Transaction::~Transaction() {
  if (open()) abort().ignore();
}

void Transaction::finish() {
  client_->txn_open_ = false;
  client_->begin_pending_ = false;
  client_ = nullptr;
}

namespace {

Status ended() {
  return Status::InvalidArgument("the transaction has ended (commit or abort)");
}

}  // namespace

Status Transaction::get(std::string_view key, std::string* value) {
  if (!open()) return ended();
  SHOAL_TRY(proto::check_key(key));
  client_->body_.clear();
  proto::FrameWriter(&client_->body_).str(key);
  Client::Reply r;
  Status s = client_->call(static_cast<uint8_t>(Op::kGet), &r);
  if (s.ok()) s = r.status();
  if (s.ok()) {
    proto::FrameReader f(r.body);
    value->assign(f.str());
    if (!f.done()) s = client_->broken(Status::Corruption("malformed get reply"));
  }
  // NotFound and a refused argument leave it open; anything else ended it on the server.
  if (!s.ok() && !s.is_not_found() && s.code() != Code::kInvalidArgument) finish();
  return s;
}

Status Transaction::put(std::string_view key, std::string_view value) {
  if (!open()) return ended();
  SHOAL_TRY(proto::check_key(key));
  SHOAL_TRY(proto::check_value(value));
  client_->body_.clear();
  proto::FrameWriter w(&client_->body_);
  w.str(key);
  w.str(value);
  Client::Reply r;
  Status s = client_->call(static_cast<uint8_t>(Op::kPut), &r);
  if (s.ok()) s = r.status();
  if (!s.ok() && s.code() != Code::kInvalidArgument) finish();
  return s;
}

Status Transaction::del(std::string_view key) {
  if (!open()) return ended();
  SHOAL_TRY(proto::check_key(key));
  client_->body_.clear();
  proto::FrameWriter(&client_->body_).str(key);
  Client::Reply r;
  Status s = client_->call(static_cast<uint8_t>(Op::kDel), &r);
  if (s.ok()) s = r.status();
  if (!s.ok() && s.code() != Code::kInvalidArgument) finish();
  return s;
}

Status Transaction::scan(std::string_view start, std::string_view end, uint32_t limit,
                         std::vector<KeyValue>* out) {
  if (!open()) return ended();
  if (limit == 0 || limit > proto::kScanLimitMax) {
    return Status::InvalidArgument(
        fmt::format("scan: limit {} not in [1, {}]", limit, proto::kScanLimitMax));
  }
  std::string cursor(start);
  bool exclusive = false;
  for (uint32_t left = limit; left > 0;) {  // a reply per pass; each shows >= 1 key or ends
    client_->body_.clear();
    proto::FrameWriter w(&client_->body_);
    w.str(cursor);
    w.u8(exclusive ? 1 : 0);
    w.str(end);
    w.u32(left);
    Client::Reply r;
    Status s = client_->call(static_cast<uint8_t>(Op::kScan), &r);
    if (s.ok()) s = r.status();
    if (!s.ok()) {
      if (s.code() != Code::kInvalidArgument) finish();
      return s;
    }
    proto::FrameReader f(r.body);
    const uint32_t n = std::min(f.u32(), left);
    for (uint32_t i = 0; i < n && f.ok(); ++i) {
      KeyValue kv;
      kv.key.assign(f.str());
      kv.value.assign(f.str());
      out->push_back(std::move(kv));
    }
    const bool more = f.u8() != 0;
    if (!f.done() || (more && n == 0)) {
      Status bad = client_->broken(Status::Corruption("malformed scan reply"));
      finish();
      return bad;
    }
    left -= n;
    if (!more) break;
    cursor = out->back().key;
    exclusive = true;
  }
  return Status::Ok();
}

Result<CommitResult> Transaction::commit(Durability durability) {
  if (!open()) return ended();
  Client* c = client_;
  c->body_.assign(1, static_cast<char>(durability));
  Client::Reply r;
  const Status sent = c->call(static_cast<uint8_t>(Op::kCommit), &r);
  finish();  // whatever the outcome, it has ended
  SHOAL_TRY(sent);
  SHOAL_TRY(r.status());
  proto::FrameReader f(r.body);
  CommitResult result{f.u8() != 0};
  if (!f.done()) return c->broken(Status::Corruption("malformed commit reply"));
  return result;
}

Status Transaction::abort() {
  if (!open()) return Status::Ok();
  Client* c = client_;
  const bool sent = !c->begin_pending_;
  finish();
  if (!sent) return Status::Ok();  // nothing reached the server
  c->body_.clear();
  Client::Reply r;
  SHOAL_TRY(c->call(static_cast<uint8_t>(Op::kAbort), &r));
  return r.status();
}

}  // namespace shoal
