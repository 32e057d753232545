#include "src/net/shm_transport.h"

#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include <fmt/format.h>

#include "src/net/socket_util.h"

namespace shoal::net {

namespace {

constexpr uint64_t kHelloMagic = 0x53686f616c53686dULL;  // "ShoalShm"
constexpr uint64_t kPageBytes = 4096;
constexpr uint64_t kMaxSleepSliceNs = 10'000'000;       // peer liveness is rechecked this often
constexpr uint64_t kLivenessCheckNs = 1'000'000;        // by an idle poll() (one poll(2) syscall)
constexpr size_t kPrefaultMaxBytes = size_t{64} << 20;  // both rings; larger ones fault lazily

struct Hello {
  uint64_t magic;
  uint64_t ring_bytes;
};

size_t ring_slot_bytes(size_t ring_bytes) {
  return (ring_region_bytes(ring_bytes) + kPageBytes - 1) & ~(kPageBytes - 1);
}

Status errno_status(const char* what) {
  return Status::IOError(fmt::format("{}: {}", what, std::strerror(errno)));
}

Status check_options(const EndpointOptions& o) {
  if (!std::has_single_bit(o.ring_bytes) || o.ring_bytes < kRingMinDataBytes ||
      o.ring_bytes > (size_t{1} << 30)) {
    return Status::InvalidArgument(
        fmt::format("ring_bytes {} must be a power of two in [4 KiB, 1 GiB]", o.ring_bytes));
  }
  if (o.max_message_bytes > kMaxMessageBytesLimit) {
    return Status::InvalidArgument("max_message_bytes above 1 GiB");
  }
  return Status::Ok();
}

// Sends `hello` with `fds` (at most kMaxFds) attached as SCM_RIGHTS.
constexpr size_t kMaxFds = 2;
Status send_fds(int sock, std::span<const int> fds, const Hello& hello) {
  SHOAL_CHECK(!fds.empty() && fds.size() <= kMaxFds);
  iovec iov{const_cast<Hello*>(&hello), sizeof(hello)};
  alignas(cmsghdr) char control[CMSG_SPACE(kMaxFds * sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(fds.size() * sizeof(int));
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
  std::memcpy(CMSG_DATA(c), fds.data(), fds.size() * sizeof(int));
  if (sendmsg(sock, &msg, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(hello))) {
    return errno_status("shm rendezvous: sendmsg");
  }
  return Status::Ok();
}

// Receives a Hello carrying exactly out.size() fds.
Status recv_fds(int sock, std::span<Fd> out, Hello* hello, uint64_t timeout_ms) {
  SHOAL_CHECK(!out.empty() && out.size() <= kMaxFds);
  pollfd p{sock, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout_ms)) <= 0) {
    return Status::Timeout("shm rendezvous: no hello from the peer");
  }
  iovec iov{hello, sizeof(*hello)};
  alignas(cmsghdr) char control[CMSG_SPACE(kMaxFds * sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  // A peer that closed before its hello (it refused us, or it is exiting) is gone, not corrupt:
  // callers retry or look for another peer.
  if (n == 0) return Status::Unavailable("shm rendezvous: the peer closed before its hello");
  if (n < 0) return errno_status("shm rendezvous: recvmsg");
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (c == nullptr || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
    return Status::Corruption("shm rendezvous: hello without file descriptors");
  }
  const size_t got = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
  int fds[kMaxFds] = {-1, -1};
  std::memcpy(fds, CMSG_DATA(c), std::min(got, kMaxFds) * sizeof(int));
  for (size_t i = 0; i < std::min(got, kMaxFds); ++i) {
    if (i < out.size()) {
      out[i] = Fd(fds[i]);
    } else {
      ::close(fds[i]);
    }
  }
  if (n != static_cast<ssize_t>(sizeof(*hello)) || got != out.size() ||
      hello->magic != kHelloMagic) {
    return Status::Corruption("shm rendezvous: malformed hello");
  }
  return Status::Ok();
}

// Abstract unix socket names have no file permissions: any process of the host (in the same
// network namespace) may connect to a listener, or bind a name first. Only processes of our
// own user share rings with us; SO_PEERCRED gives the peer's at connect()/listen() time.
Status check_peer_user(int sock, const char* side) {
  return check_peer_uid(sock, "shm", side);
}

Result<Fd> make_eventfd() {
  Fd fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!fd.ok()) return errno_status("eventfd");
  return fd;
}

Result<Fd> make_memfd(size_t ring_bytes) {
  Fd fd(memfd_create("shoal-shm", MFD_CLOEXEC));
  if (!fd.ok()) return errno_status("memfd_create");
  // A memfd starts at mode 0777; /proc/<pid>/fd/N reopens it by that mode (for whoever may
  // reach the process's fd directory), so the rings are made the owner's alone.
  if (fchmod(fd.get(), 0600) != 0) return errno_status("fchmod memfd");
  if (ftruncate(fd.get(), static_cast<off_t>(2 * ring_slot_bytes(ring_bytes))) != 0) {
    return errno_status("ftruncate memfd");
  }
  return fd;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Setup and teardown (cold paths)

Result<ShmEndpoint> ShmEndpoint::attach(Fd memfd, Fd sock, Fd doorbell, size_t ring_bytes, int side,
                                        bool init, const EndpointOptions& options) {
  if (!memfd.ok() || !sock.ok() || !doorbell.ok()) return errno_status("shm: dup");
  const size_t slot = ring_slot_bytes(ring_bytes);
  struct stat st {};
  if (fstat(memfd.get(), &st) != 0 || static_cast<size_t>(st.st_size) < 2 * slot) {
    return Status::Corruption("shm: memfd smaller than its two rings");
  }
  // The mapping keeps the memory alive after memfd closes.
  void* p = mmap(nullptr, 2 * slot, PROT_READ | PROT_WRITE, MAP_SHARED, memfd.get(), 0);
  if (p == MAP_FAILED) return errno_status("shm: mmap");
  ShmEndpoint ep;
  ep.options_ = options;
  ep.options_.ring_bytes = ring_bytes;
  ep.map_ = static_cast<uint8_t*>(p);
  ep.map_bytes_ = 2 * slot;
  ep.sock_ = sock.release();
  ep.doorbell_fd_ = doorbell.release();
  std::span<uint8_t> rings[2] = {{ep.map_, slot}, {ep.map_ + slot, slot}};
  for (auto& r : rings) {
    if (init) ring_init(r, ring_bytes);
    SHOAL_TRY(ring_validate(r));  // ep's destructor unmaps and closes
  }
  ep.prefault();
  ep.tx_ = RingProducer(rings[side]);
  ep.rx_ = RingConsumer(rings[1 - side]);
  ep.fast_send_bytes_ = static_cast<uint32_t>(
      std::min<size_t>(options.max_message_bytes, ep.tx_.max_payload_bytes()));
  ep.assembler_ = MessageAssembler(options.max_message_bytes);
  return ep;
}

void ShmEndpoint::set_peer_doorbell(Fd fd) {
  if (peer_doorbell_fd_ >= 0) ::close(peer_doorbell_fd_);
  peer_doorbell_fd_ = fd.release();
  tx_.set_doorbell_fd(peer_doorbell_fd_);
}

Result<std::pair<ShmEndpoint, ShmEndpoint>> ShmEndpoint::pair(const EndpointOptions& options) {
  SHOAL_TRY(check_options(options));
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return errno_status("socketpair");
  }
  Fd sock_a(sv[0]), sock_b(sv[1]);
  auto memfd = make_memfd(options.ring_bytes);
  auto bell_a = make_eventfd();
  auto bell_b = make_eventfd();
  if (!memfd.ok()) return memfd.status();
  if (!bell_a.ok()) return bell_a.status();
  if (!bell_b.ok()) return bell_b.status();
  Fd peer_of_a(dup(bell_b->get())), peer_of_b(dup(bell_a->get()));
  auto a = attach(Fd(dup(memfd->get())), std::move(sock_a), std::move(*bell_a), options.ring_bytes,
                  0, true, options);
  if (!a.ok()) return a.status();
  auto b = attach(std::move(*memfd), std::move(sock_b), std::move(*bell_b), options.ring_bytes, 1,
                  false, options);
  if (!b.ok()) return b.status();
  if (!peer_of_a.ok() || !peer_of_b.ok()) return errno_status("shm: dup");
  a->set_peer_doorbell(std::move(peer_of_a));
  b->set_peer_doorbell(std::move(peer_of_b));
  return std::make_pair(std::move(*a), std::move(*b));
}

// The connecting side: receives the memfd and the listener's doorbell, answers with its own.
Result<ShmEndpoint> ShmEndpoint::handshake(Fd sock, const EndpointOptions& options,
                                           uint64_t timeout_ms) {
  Hello hello{};
  Fd fds[2];  // memfd, the listener's doorbell
  SHOAL_TRY(recv_fds(sock.get(), fds, &hello, timeout_ms));
  EndpointOptions theirs = options;
  theirs.ring_bytes = hello.ring_bytes;
  SHOAL_TRY(check_options(theirs));
  auto bell = make_eventfd();
  if (!bell.ok()) return bell.status();
  const int mine = bell->get();
  SHOAL_TRY(send_fds(sock.get(), {&mine, 1}, Hello{kHelloMagic, hello.ring_bytes}));
  auto ep = attach(std::move(fds[0]), std::move(sock), std::move(*bell), hello.ring_bytes, 1, false,
                   options);
  if (!ep.ok()) return ep.status();
  ep->set_peer_doorbell(std::move(fds[1]));
  return ep;
}

Result<ShmEndpoint> ShmEndpoint::connect(const std::string& name, const EndpointOptions& options,
                                         uint64_t timeout_ms) {
  const uint64_t deadline = mono_ns() + timeout_ms * 1'000'000;
  socklen_t len;
  const sockaddr_un addr = abstract_unix_address(name, &len);
  for (;;) {  // bounded by the deadline: the listener may not be up yet
    Fd sock(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    if (!sock.ok()) return errno_status("socket");
    if (::connect(sock.get(), reinterpret_cast<const sockaddr*>(&addr), len) == 0) {
      SHOAL_TRY(check_peer_user(sock.get(), "connect"));
      return handshake(std::move(sock), options, timeout_ms);
    }
    const int err = errno;
    if ((err != ECONNREFUSED && err != ENOENT) || mono_ns() >= deadline) {
      errno = err;
      return errno_status("shm connect");
    }
    usleep(1000);
  }
}

ShmEndpoint& ShmEndpoint::operator=(ShmEndpoint&& other) noexcept {
  if (this == &other) return *this;
  close();
  options_ = other.options_;
  map_ = std::exchange(other.map_, nullptr);
  map_bytes_ = std::exchange(other.map_bytes_, 0);
  sock_ = std::exchange(other.sock_, -1);
  doorbell_fd_ = std::exchange(other.doorbell_fd_, -1);
  peer_doorbell_fd_ = std::exchange(other.peer_doorbell_fd_, -1);
  tx_ = other.tx_;
  rx_ = other.rx_;
  assembler_ = std::move(other.assembler_);
  batch_outstanding_ = other.batch_outstanding_;
  reserved_ = other.reserved_;
  prefaulted_ = other.prefaulted_;
  fast_send_bytes_ = other.fast_send_bytes_;
  last_liveness_check_ns_ = other.last_liveness_check_ns_;
  empty_polls_ = other.empty_polls_;
  sent_copied_bytes_ = other.sent_copied_bytes_;
  holds_ = std::exchange(other.holds_, nullptr);
  failed_ = std::move(other.failed_);
  return *this;
}

void ShmEndpoint::close() {
  if (map_ != nullptr) {
    tx_.flush();  // frames sent before close() still reach the peer
    if (holds_ != nullptr) {
      holds_->unref();  // it unmaps once no kept region is left
      holds_ = nullptr;
    } else {
      munmap(map_, map_bytes_);
    }
  }
  for (int* fd : {&sock_, &doorbell_fd_, &peer_doorbell_fd_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
  map_ = nullptr;
  if (failed_.ok()) failed_ = Status::Unavailable("shm endpoint closed");
}

Status ShmEndpoint::fail(Status status) {
  if (failed_.ok()) failed_ = std::move(status);
  return failed_;
}

// Maps every page of both rings into this process before traffic needs them. Otherwise the
// first lap around a ring takes a page fault per 4 KiB in the producer (allocation) and in the
// consumer (mapping), ~8 us each time: 1% of 64 B round trips on a 1 MiB ring. attach() does
// it (the allocation, ~0.3 ms for 2 MiB, is then part of connection setup), and the first
// poll()/send does it again because a fork()ed child does not inherit the page tables of a
// shared mapping (in the same process the second pass only walks present pages). Best effort:
// without MADV_POPULATE_WRITE (Linux < 5.14) pages fault lazily as before; rings above
// kPrefaultMaxBytes too.
void ShmEndpoint::prefault() {
  if (map_ == nullptr || map_bytes_ > kPrefaultMaxBytes) return;
  [[maybe_unused]] const int rc = madvise(map_, map_bytes_, MADV_POPULATE_WRITE);
}

void ShmEndpoint::prefault_once() {
  prefaulted_ = true;
  prefault();
}

Status ShmEndpoint::check_peer() {
  pollfd p{sock_, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) < 0) return errno_status("shm: poll on the liveness socket");
  if (p.revents & (POLLHUP | POLLRDHUP | POLLERR)) {
    return Status::Unavailable("shm peer closed the link or died");
  }
  if (p.revents & POLLIN) {
    char c;
    if (recv(sock_, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
      return Status::Unavailable("shm peer closed the link or died");
    }
  }
  return Status::Ok();
}

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool ShmEndpoint::prepare_to_block() {
  if (!failed_.ok()) return false;  // let poll() report it
  tx_.flush();
  if (holds_ != nullptr) release_consumed();  // kept regions let go since: credit for the peer
  return rx_.begin_doorbell_wait();
}

void ShmEndpoint::end_block() {
  rx_.end_doorbell_wait();
  uint64_t count;
  [[maybe_unused]] const ssize_t n = ::read(doorbell_fd_, &count, sizeof(count));  // drain
}

// ---------------------------------------------------------------------------------------------
// Data path

Result<uint8_t*> ShmEndpoint::reserve_blocking(uint32_t bytes) {
  if (!prefaulted_) [[unlikely]]
    prefault_once();
  if (uint8_t* p = tx_.try_reserve(bytes)) [[likely]]
    return p;
  // Out of credit: spin, then sleep on the credit futex; recheck the peer between sleeps.
  const uint64_t start = mono_ns();
  for (uint64_t spins = 0;; ++spins) {
    if (uint8_t* p = tx_.try_reserve(bytes)) return p;
    if ((spins & 63) != 0) {
      cpu_relax();
      continue;
    }
    const uint64_t waited = mono_ns() - start;
    if (waited >= options_.send_timeout_ns) {
      return Status::Timeout(fmt::format("shm send: no credit for {} ms", waited / 1'000'000));
    }
    if (waited < options_.spin_ns) continue;
    SHOAL_TRY(check_peer());
    tx_.wait_for_credit(kMaxSleepSliceNs);
  }
}

Status ShmEndpoint::push(uint32_t flags, uint32_t imm, uint64_t epoch,
                         std::span<const uint8_t> payload) {
  const auto n = static_cast<uint32_t>(payload.size());
  auto dst = reserve_blocking(n);
  if (!dst.ok()) return dst.status();
  if (n != 0) std::memcpy(*dst, payload.data(), n);
  tx_.commit(flags, imm, epoch, n, /*publish_now=*/false);
  sent_copied_bytes_ += n;
  return Status::Ok();
}

Result<std::span<uint8_t>> ShmEndpoint::reserve(size_t bytes) {
  if (!failed_.ok()) return failed_;
  SHOAL_ASSERT(!reserved_, "reserve() with a reservation outstanding");
  if (bytes > tx_.max_payload_bytes()) {
    return Status::InvalidArgument(fmt::format("reserve of {} bytes above max_write_bytes {}",
                                               bytes, tx_.max_payload_bytes()));
  }
  auto p = reserve_blocking(static_cast<uint32_t>(bytes));
  if (!p.ok()) return p.status();
  reserved_ = true;
  return std::span<uint8_t>(*p, bytes);
}

Status ShmEndpoint::commit_send(uint32_t session, size_t bytes) {
  SHOAL_ASSERT(reserved_, "commit_send() without reserve()");
  reserved_ = false;
  tx_.commit(0, session, 0, static_cast<uint32_t>(bytes), false);
  return failed_;
}

Status ShmEndpoint::commit_write(uint64_t epoch, uint32_t imm, size_t bytes) {
  SHOAL_ASSERT(reserved_, "commit_write() without reserve()");
  const uint64_t fence = tx_.fence_epoch();
  if (epoch < fence) {
    cancel();
    return Status::Aborted(
        fmt::format("write epoch {} below the peer's fence {}: stale writer fenced", epoch, fence));
  }
  reserved_ = false;
  tx_.commit(kFlagWrite, imm, epoch, static_cast<uint32_t>(bytes), false);
  return failed_;
}

Status ShmEndpoint::send_slow(uint32_t session, std::span<const uint8_t> bytes) {
  if (!failed_.ok()) return failed_;
  SHOAL_ASSERT(!reserved_, "%s", "send() while a reserve() is outstanding");
  if (bytes.size() > options_.max_message_bytes) {
    return Status::InvalidArgument(fmt::format("message of {} bytes above max_message_bytes {}",
                                               bytes.size(), options_.max_message_bytes));
  }
  const std::span<const uint8_t> one[1] = {bytes};
  GatherCursor cursor(one);
  return send_fragments(session, cursor, bytes.size());
}

Status ShmEndpoint::send_gather(uint32_t session, GatherList pieces) {
  if (!failed_.ok()) return failed_;
  SHOAL_ASSERT(!reserved_, "%s", "send_gather() while a reserve() is outstanding");
  auto bytes = gather_message_bytes(pieces, options_.max_message_bytes);
  if (!bytes.ok()) return bytes.status();
  GatherCursor cursor(pieces);
  return send_fragments(session, cursor, *bytes);
}

Status ShmEndpoint::send_fragments(uint32_t session, GatherCursor& cursor, size_t bytes) {
  const size_t fragment = tx_.max_payload_bytes();
  size_t offset = 0;
  do {  // bounded: max_message_bytes / fragment iterations
    const size_t n = std::min(fragment, bytes - offset);
    const bool more = offset + n < bytes;
    auto dst = reserve_blocking(static_cast<uint32_t>(n));
    if (!dst.ok()) {
      // Half a message in the peer's ring cannot be taken back: the link is unusable.
      return offset == 0 && dst.status().code() == Code::kTimeout ? dst.status()
                                                                  : fail(dst.status());
    }
    cursor.copy_to(*dst, n);  // the one copy: the pieces straight into the peer's ring
    tx_.commit(more ? kFlagMore : 0, session, 0, static_cast<uint32_t>(n), /*publish_now=*/false);
    sent_copied_bytes_ += n;
    offset += n;
  } while (offset < bytes);
  return Status::Ok();
}

Status ShmEndpoint::write_with_imm(uint64_t epoch, uint32_t imm, std::span<const uint8_t> bytes) {
  if (!failed_.ok()) return failed_;
  SHOAL_ASSERT(!reserved_, "%s", "write_with_imm() while a reserve() is outstanding");
  if (bytes.size() > tx_.max_payload_bytes()) {
    return Status::InvalidArgument(fmt::format("one-sided write of {} bytes above the limit {}",
                                               bytes.size(), tx_.max_payload_bytes()));
  }
  const uint64_t fence = tx_.fence_epoch();
  if (epoch < fence) {
    return Status::Aborted(
        fmt::format("write epoch {} below the peer's fence {}: stale writer fenced", epoch, fence));
  }
  return push(kFlagWrite, imm, epoch, bytes);
}

Status ShmEndpoint::set_fence_epoch(uint64_t epoch) {
  if (!failed_.ok()) return failed_;
  if (epoch < rx_.fence_epoch()) return Status::InvalidArgument("fence epochs only move forward");
  rx_.set_fence_epoch(epoch);
  return Status::Ok();
}

Result<size_t> ShmEndpoint::poll_slow(Completion* out, size_t max) {
  if (!failed_.ok()) [[unlikely]]
    return failed_;
  SHOAL_ASSERT(!batch_outstanding_, "poll() before release() of the previous batch");
  if (!prefaulted_) [[unlikely]]
    prefault_once();
  tx_.flush();  // publishes committed frames only, never an outstanding reservation
  // Kept regions let go on other threads since the last release: their credit (a waiting
  // peer makes idle() false, so this runs).
  if (holds_ != nullptr) release_consumed();
  auto polled = poll_frames(*this, assembler_, out, max);
  if (!polled.ok()) return fail(polled.status());
  // Return a count, not `polled`: moving a Result moves its Status's string (a memcpy call and a
  // store-forwarding stall on every poll, most of an empty poll's cost).
  const size_t n = *polled;
  batch_outstanding_ = n > 0;
  if (n == 0 && (++empty_polls_ & 63) == 0) [[unlikely]]
    return idle_check(out, max);
  return n;
}

Result<size_t> ShmEndpoint::idle_check(Completion* out, size_t max) {
  if (rx_.has_data()) return poll_slow(out, max);
  // Liveness: at most once per interval, and the clock is read only every 64 empty polls.
  // Frames the peer published before dying were delivered first.
  const uint64_t now = mono_ns();
  if (now - last_liveness_check_ns_ >= kLivenessCheckNs) {
    last_liveness_check_ns_ = now;
    Status s = check_peer();
    if (!s.ok() && !rx_.has_data()) return fail(std::move(s));
  }
  return size_t{0};
}

void ShmEndpoint::release() {
  assembler_.release();
  release_consumed();
  batch_outstanding_ = false;
}

std::shared_ptr<const uint64_t[]> ShmEndpoint::keep_received(std::span<const uint8_t> bytes) {
  SHOAL_ASSERT(batch_outstanding_, "%s", "keep_received() outside a poll batch");
  const uint64_t begin = rx_.position_of(bytes.data());
  if (begin == UINT64_MAX || bytes.empty() || reinterpret_cast<uintptr_t>(bytes.data()) % 8 != 0 ||
      begin + bytes.size() > rx_.cursor()) {
    return nullptr;
  }
  if (holds_ == nullptr) holds_ = RingHolds::create(kKeepRecords, map_, map_bytes_);
  // Held back from the peer if we keep these: from the oldest kept region (or these bytes)
  // to the cursor. At most three quarters of the ring, so a frame of a quarter finds room.
  const uint64_t oldest = std::min(holds_->floor(rx_.cursor()), begin);
  if (rx_.cursor() - oldest > rx_.data_bytes() / 4 * 3) return nullptr;
  return holds_->hold(bytes.data(), begin, bytes.size());
}

Status ShmEndpoint::wait(uint64_t timeout_ns) {
  if (!failed_.ok()) return failed_;
  tx_.flush();
  if (rx_.has_data()) return Status::Ok();
  const uint64_t start = mono_ns();
  const uint64_t spin_end = start + std::min(options_.spin_ns, timeout_ns);
  do {  // spin: a message usually arrives within microseconds when the peer is busy
    // A producer that ran out of credit while we spin would otherwise wait for the
    // quarter-ring write-back that only more reading triggers.
    rx_.service_credit();
    for (int i = 0; i < 64; ++i) {
      if (rx_.has_data()) return Status::Ok();
      cpu_relax();
    }
  } while (mono_ns() < spin_end);
  const uint64_t deadline = start + timeout_ns;
  for (;;) {  // bounded by the deadline
    if (rx_.has_data()) return Status::Ok();
    Status s = check_peer();
    if (!s.ok()) return rx_.has_data() ? Status::Ok() : fail(std::move(s));
    const uint64_t now = mono_ns();
    if (now >= deadline) return Status::Timeout("");
    rx_.wait_for_data(std::min(deadline - now, kMaxSleepSliceNs));
  }
}

Status ShmEndpoint::inject_raw_for_test(std::span<const uint8_t> bytes) {
  tx_.flush();
  tx_.inject_raw_for_test(bytes);
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Listener

Result<ShmListener> ShmListener::listen(const std::string& name, const EndpointOptions& options) {
  SHOAL_TRY(check_options(options));
  ShmListener l;
  l.options_ = options;
  l.fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (l.fd_ < 0) return errno_status("socket");
  socklen_t len;
  const sockaddr_un addr = abstract_unix_address(name, &len);
  if (bind(l.fd_, reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
    return errno_status("shm listen: bind");
  }
  if (::listen(l.fd_, 64) != 0) return errno_status("shm listen");
  return l;
}

ShmListener& ShmListener::operator=(ShmListener&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    options_ = other.options_;
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

ShmListener::~ShmListener() {
  if (fd_ >= 0) ::close(fd_);
}

Result<ShmEndpoint> ShmListener::accept(uint64_t timeout_ms, uint64_t handshake_timeout_ms) {
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout_ms)) <= 0) {
    return Status::Timeout("shm accept: no connection");
  }
  Fd sock(accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC));
  if (!sock.ok()) return errno_status("shm accept");
  SHOAL_TRY(check_peer_user(sock.get(), "accept"));
  auto memfd = make_memfd(options_.ring_bytes);
  if (!memfd.ok()) return memfd.status();
  auto bell = make_eventfd();
  if (!bell.ok()) return bell.status();
  const int sock_fd = sock.get();
  const int shared[2] = {memfd->get(), bell->get()};
  // Format the rings before the peer can map them, then hand over memfd and doorbell.
  Fd memfd_copy(dup(memfd->get())), bell_copy(dup(bell->get()));
  auto ep = ShmEndpoint::attach(std::move(memfd_copy), std::move(sock), std::move(bell_copy),
                                options_.ring_bytes, 0, true, options_);
  if (!ep.ok()) return ep.status();
  SHOAL_TRY(send_fds(sock_fd, shared, Hello{kHelloMagic, options_.ring_bytes}));
  Hello reply{};
  Fd peer_bell[1];
  SHOAL_TRY(recv_fds(sock_fd, peer_bell, &reply, handshake_timeout_ms));
  ep->set_peer_doorbell(std::move(peer_bell[0]));
  return ep;
}

}  // namespace shoal::net
