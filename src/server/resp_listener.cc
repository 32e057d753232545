#include "src/server/resp_listener.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "src/client/protocol.h"

namespace shoal::server {
namespace {

constexpr int kEventsPerPoll = 64;
constexpr int kAcceptSliceMs = 100;  // how often the accept thread sees stop()

void set_nodelay(int fd) {
  const int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

}  // namespace

// ---- the protocols ----

resp::ConnectionOptions RespProtocol::options(uint64_t client_id, bool /*durable_acks*/,
                                              std::string_view password) {
  resp::ConnectionOptions options;
  options.session.client_id = client_id;
  options.session.password = password;
  // As the coordinator's own retries (shard_load.cc): with backoff capped at 2 ms, a hot key
  // whose locks live for network round trips on a loaded machine needs more than 64.
  options.session.max_txn_attempts = 1000;
  // 4 KiB reads: a 16-command pipeline of GETs is 0.5 KiB, and 10,000 clients that all send at
  // once hold 40 MB of input, not 160 (larger requests grow the buffer, connection.h).
  options.read_bytes = 4096;
  return options;
}

std::string_view RespProtocol::too_many() {
  return "-ERR max number of clients reached\r\n";
}

ClientConnectionOptions ClientProtocol::options(uint64_t /*client_id*/, bool durable_acks,
                                                std::string_view password) {
  ClientConnectionOptions options;
  options.durable_acks = durable_acks;
  options.password = password;
  return options;
}

std::string_view ClientProtocol::too_many() {
  // An error frame of id 0, where the client waits for the hello's reply.
  static const std::string frame = [] {
    std::string out;
    client::proto::FrameWriter w(&out);
    w.begin(0, static_cast<uint8_t>(Code::kUnavailable));
    w.str("max number of clients reached");
    (void)w.end();
    return out;
  }();
  return frame;
}

template <typename P>
struct StreamWorker<P>::Client {
  Client(resp::KvBackend& backend, Env& env, typename P::Options options)
      : conn(backend, env, options) {}
  int fd = -1;
  uint32_t slot = 0;
  bool readable = false;     // the socket may have input (edge seen, no EAGAIN since)
  bool writable = true;      // the socket may take output
  bool peer_closed = false;  // EOF or an error: no more input
  bool hung_up = false;      // the peer shut down its side: read until EOF, even after a short read
  bool broken = false;       // a send failed: no more output either
  bool active = false;       // in active_
  bool gated = false;        // in gated_
  bool resuming = false;     // a request is in flight; resume() completes it
  bool quiet = false;        // in quiet_: its buffers go after kQuietNs without traffic
  uint64_t quiet_since_ns = 0;
  typename P::Connection conn;
};

template <typename P>
StreamWorker<P>::StreamWorker(rt::EventLoop& loop, resp::KvBackend& backend, KvAcks* acks, Env& env,
                              uint32_t max_clients, std::string_view password)
    : loop_(loop),
      backend_(backend),
      acks_(acks),
      env_(env),
      max_clients_(max_clients),
      password_(password) {}

template <typename P>
StreamWorker<P>::~StreamWorker() {
  for (auto& c : clients_) {
    if (c != nullptr && c->fd >= 0) ::close(c->fd);
  }
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  std::lock_guard<std::mutex> lock(hand_off_mu_);
  for (int fd : hand_offs_) ::close(fd);
}

template <typename P>
Status StreamWorker<P>::start() {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) return Status::IOError(fmt::format("epoll_create1: {}", strerror(errno)));
  rt::PollerWake wake;
  wake.prepare = &StreamWorker<P>::prepare_wake;
  return loop_.add_poller(&StreamWorker<P>::poll_thunk, this, nullptr, wake);
}

template <typename P>
void StreamWorker<P>::shutdown() {
  loop_.remove_poller(this);
  for (auto& c : clients_) {
    if (c == nullptr || c->fd < 0) continue;
    ::close(c->fd);
    c->fd = -1;
    if (on_close_ != nullptr) on_close_(on_close_ctx_);
  }
  active_.clear();
  gated_.clear();
  quiet_.clear();
}

template <typename P>
bool StreamWorker<P>::prepare_wake(void* self, int fds[rt::kMaxPollerFds]) {
  auto* w = static_cast<StreamWorker<P>*>(self);
  // Work without a new event: the loop must not sleep.
  if (!w->active_.empty() || w->hand_offs_waiting_.load(std::memory_order_acquire)) return false;
  if (w->acks_ != nullptr && w->acks_->acknowledged() != w->acks_seen_ && !w->gated_.empty()) {
    return false;
  }
  // Without clients the epoll set is empty: a new one arrives by hand_off(), whose post wakes
  // the loop.
  if (w->live_ > 0) fds[0] = w->epoll_fd_;
  return true;
}

template <typename P>
bool StreamWorker<P>::hand_off(int fd) {
  {
    std::lock_guard<std::mutex> lock(hand_off_mu_);
    if (hand_offs_.size() >= kHandOffMax) return false;
    hand_offs_.push_back(fd);
  }
  hand_offs_waiting_.store(true, std::memory_order_release);
  // A full post ring is fine: the poller drains the queue too (the flag keeps the loop up).
  loop_.post(&StreamWorker<P>::drain_hand_offs, this).ignore();
  return true;
}

template <typename P>
void StreamWorker<P>::drain_hand_offs(void* self) {
  auto* w = static_cast<StreamWorker<P>*>(self);
  std::vector<int> fds;
  {
    std::lock_guard<std::mutex> lock(w->hand_off_mu_);
    fds.swap(w->hand_offs_);
    w->hand_offs_waiting_.store(false, std::memory_order_release);
  }
  for (int fd : fds) w->adopt(fd);
}

template <typename P>
void StreamWorker<P>::adopt(int fd) {
  if (epoll_fd_ < 0 || live_ >= max_clients_) {
    const std::string_view too_many = P::too_many();
    (void)::send(fd, too_many.data(), too_many.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::close(fd);
    if (on_close_ != nullptr) on_close_(on_close_ctx_);
    return;
  }
  auto client = std::make_unique<Client>(
      backend_, env_, P::options(next_client_id_++, acks_ != nullptr, password_));
  client->fd = fd;
  if (free_slots_.empty()) {
    free_slots_.push_back(static_cast<uint32_t>(clients_.size()));
    clients_.emplace_back();
  }
  client->slot = free_slots_.back();
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.ptr = client.get();
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    ::close(fd);
    if (on_close_ != nullptr) on_close_(on_close_ctx_);
    return;
  }
  free_slots_.pop_back();
  set_nodelay(fd);
  ++live_;
  ++stats_.accepted;
  clients_[client->slot] = std::move(client);
}

template <typename P>
void StreamWorker<P>::activate(Client* c) {
  if (c->active || c->fd < 0) return;
  c->active = true;
  active_.push_back(c);
}

template <typename P>
bool StreamWorker<P>::poll() {
  bool did = false;
  if (hand_offs_waiting_.load(std::memory_order_acquire)) {
    drain_hand_offs(this);
    did = true;
  }
  epoll_event events[kEventsPerPoll];
  // No clients, no events: skip the system call, which the spinning loop would otherwise make
  // on every pass for a port nobody uses (a server has two: Redis and the client protocol).
  // Nor right after one that found nothing (kEmptyPollGapNs).
  const uint64_t now = loop_.iteration_now_ns();
  int n = 0;
  if (epoll_fd_ >= 0 && live_ > 0 && now >= next_epoll_ns_) {
    n = epoll_wait(epoll_fd_, events, kEventsPerPoll, 0);
    next_epoll_ns_ = n > 0 ? 0 : now + kEmptyPollGapNs;
  }
  for (int i = 0; i < n; ++i) {
    auto* c = static_cast<Client*>(events[i].data.ptr);
    if ((events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) c->readable = true;
    if ((events[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) c->hung_up = true;
    if ((events[i].events & (EPOLLOUT | EPOLLHUP | EPOLLERR)) != 0) c->writable = true;
    activate(c);
  }
  if (acks_ != nullptr && acks_->acknowledged() != acks_seen_) {
    acks_seen_ = acks_->acknowledged();
    for (Client* c : gated_) {
      c->gated = false;
      activate(c);
    }
    gated_.clear();
  }
  release_quiet_buffers();
  // Serve a bounded batch; who still has work goes to the back.
  const size_t batch = std::min(active_.size(), kActivePerPoll);
  did |= batch > 0 || n > 0;
  for (size_t i = 0; i < batch; ++i) {
    Client* c = active_[i];
    c->active = false;
    if (serve(c)) continue;
  }
  active_.erase(active_.begin(), active_.begin() + static_cast<std::ptrdiff_t>(batch));
  return did;
}

template <typename P>
bool StreamWorker<P>::read_some(Client* c) {
  auto space = c->conn.input_space();
  const ssize_t got = ::recv(c->fd, space.data(), space.size(), MSG_DONTWAIT);
  if (got > 0) {
    c->conn.commit_input(static_cast<size_t>(got));
    // A short read drained the socket (edge mode), unless the peer's end of stream came with
    // the same edge: no new edge will announce it, so read on to the EOF.
    if (static_cast<size_t>(got) < space.size() && !c->hung_up) c->readable = false;
    return true;
  }
  c->conn.commit_input(0);
  if (got == 0) {
    c->peer_closed = true;
  } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
    c->readable = false;
  } else if (errno != EINTR) {
    c->peer_closed = true;
  }
  return false;
}

template <typename P>
void StreamWorker<P>::write_some(Client* c) {
  while (c->writable) {  // each pass sends bytes or stops
    const std::string_view out =
        acks_ == nullptr
            ? c->conn.sendable()
            : c->conn.sendable([this](uint64_t token) { return acks_->is_durable(token); });
    if (out.empty()) return;
    const ssize_t sent = ::send(c->fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent > 0) {
      c->conn.consume_output(static_cast<size_t>(sent));
      continue;
    }
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      c->writable = false;
    } else if (sent < 0 && errno != EINTR) {
      c->peer_closed = c->broken = true;  // reset: nothing more can be sent
      c->writable = false;
      c->conn.consume_output(c->conn.pending_output_bytes());
    }
  }
}

template <typename P>
bool StreamWorker<P>::serve(Client* c) {
  if (c->resuming || c->fd < 0) return true;  // resume() activates it again
  if (c->readable && !c->peer_closed && c->conn.wants_input()) read_some(c);
  if (c->conn.has_work()) {
    c->conn.process();
    if (c->conn.in_flight()) {
      ++stats_.suspensions;
      c->resuming = true;
      // One task per client at most: the loop's max_tasks counts them (server's make_worker).
      if (Status st = loop_.spawn(resume(this, c)); !st.ok()) loop_.adopt(resume(this, c));
    }
  }
  write_some(c);
  const bool flushed = c->conn.pending_output_bytes() == 0;
  if (c->conn.must_close_now() || (!c->resuming && flushed && c->conn.should_close()) ||
      (!c->resuming && c->peer_closed && (flushed || c->broken) && !c->conn.has_work())) {
    if (c->conn.must_close_now() || c->conn.should_close()) ++stats_.protocol_errors;
    close_client(c);
    return false;
  }
  if (c->resuming) return true;
  const bool can_read = c->readable && !c->peer_closed && c->conn.wants_input();
  const bool held =
      !flushed &&
      (acks_ == nullptr
           ? c->conn.sendable().empty()
           : c->conn.sendable([this](uint64_t t) { return acks_->is_durable(t); }).empty());
  if (c->conn.has_work() || can_read || (c->writable && !flushed && !held)) {
    activate(c);
  } else if (held && !c->gated) {
    c->gated = true;
    gated_.push_back(c);
  }
  if (!c->conn.has_work() && flushed && !c->conn.in_flight()) {
    // Quiet now; its buffers go only if it stays so (a pipelining client is quiet between
    // batches, and freeing then would cost an allocation per batch).
    c->quiet_since_ns = loop_.iteration_now_ns();
    if (!c->quiet) {
      c->quiet = true;
      quiet_.push_back(c);
    }
  }
  return true;
}

template <typename P>
void StreamWorker<P>::release_quiet_buffers() {
  const uint64_t now = loop_.iteration_now_ns();
  if (now < next_sweep_ns_) return;
  next_sweep_ns_ = now + kQuietNs;
  std::erase_if(quiet_, [now](Client* c) {
    const bool still = !c->conn.has_work() && !c->conn.in_flight() &&
                       c->conn.pending_output_bytes() == 0 && !c->readable;
    if (still && now - c->quiet_since_ns < kQuietNs) return false;  // look again next sweep
    if (still) c->conn.release_buffers();
    c->quiet = false;
    return true;
  });
}

template <typename P>
rt::Task<void> StreamWorker<P>::resume(StreamWorker<P>* w, Client* c) {
  co_await c->conn.finish_in_flight();
  c->resuming = false;
  w->activate(c);
}

template <typename P>
rt::Task<void> StreamWorker<P>::abort_orphan(std::unique_ptr<resp::KvTxn> txn) {
  co_await txn->abort();
}

template <typename P>
void StreamWorker<P>::close_client(Client* c) {
  if (c->fd >= 0) {
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
    ::close(c->fd);
    c->fd = -1;
    if (on_close_ != nullptr) on_close_(on_close_ctx_);
  }
  // Its open transaction (a client gone mid-transaction) is aborted, releasing what the
  // shards hold for it, by a task of its own: the client's state goes now.
  if (std::unique_ptr<resp::KvTxn> open = P::take_open_txn(c->conn); open != nullptr) {
    ++stats_.orphans_aborted;
    // Without task room (every client's budget in use), dropping it is safe too: the
    // participants release a transaction whose coordinator is silent for their lease.
    if (loop_.task_room() > 0) loop_.spawn(abort_orphan(std::move(open))).ignore();
  }
  if (c->gated) std::erase(gated_, c);
  if (c->quiet) std::erase(quiet_, c);
  if (c->active) std::erase(active_, c);
  ++stats_.closed;
  --live_;
  const uint32_t slot = c->slot;
  free_slots_.push_back(slot);
  clients_[slot].reset();  // no request in flight (serve() checked): nothing references it
}

template class StreamWorker<RespProtocol>;
template class StreamWorker<ClientProtocol>;

// ---- StreamListener ----

Result<std::unique_ptr<StreamListener>> StreamListener::listen(
    const std::string& what, const std::string& host, uint16_t port,
    std::vector<StreamAcceptor*> workers, uint32_t max_connections, std::string_view too_many) {
  SHOAL_ASSERT(!workers.empty(), "%s", "StreamListener without workers");
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) {
    return Status::InvalidArgument(fmt::format("{}: cannot resolve '{}'", what, host));
  }
  sockaddr_in addr = *reinterpret_cast<sockaddr_in*>(found->ai_addr);
  freeaddrinfo(found);
  addr.sin_port = htons(port);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::IOError(fmt::format("{}: socket: {}", what, strerror(errno)));
  const int one = 1;
  (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 1024) != 0) {
    const std::string why = strerror(errno);
    ::close(fd);
    return Status::IOError(fmt::format("{}: cannot listen on {}:{}: {}", what, host, port, why));
  }
  socklen_t len = sizeof(addr);
  (void)getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::unique_ptr<StreamListener> l(new StreamListener());
  l->fd_ = fd;
  l->port_ = ntohs(addr.sin_port);
  l->max_connections_ = max_connections;
  l->too_many_ = too_many;
  l->workers_ = std::move(workers);
  for (StreamAcceptor* w : l->workers_) w->set_on_close(&StreamListener::on_client_closed, l.get());
  return l;
}

StreamListener::~StreamListener() {
  stop();
  if (fd_ >= 0) ::close(fd_);
}

void StreamListener::start() {
  thread_ = std::thread([this] { accept_loop(); });
}

void StreamListener::stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void StreamListener::accept_loop() {
  size_t next = 0;
  while (!stop_.load()) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, kAcceptSliceMs) <= 0) continue;
    const int client = accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (client < 0) {
      // Out of descriptors: the listen socket stays readable, so wait instead of spinning.
      if (errno == EMFILE || errno == ENFILE)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;  // EAGAIN, ECONNABORTED: the next one
    }
    if (connections_.fetch_add(1) >= max_connections_) {
      (void)::send(client, too_many_.data(), too_many_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::close(client);
      connections_.fetch_sub(1);
      continue;
    }
    StreamAcceptor* w = workers_[next++ % workers_.size()];
    // A full hand-off queue: its loop is busy; wait for it a little (bounded) before giving up.
    bool handed = false;
    for (int i = 0; i < 1000 && !(handed = w->hand_off(client)) && !stop_.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!handed) {
      ::close(client);
      connections_.fetch_sub(1);
    }
  }
}

}  // namespace shoal::server
