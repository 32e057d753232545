#include "src/net/shm_transport.h"

#include <errno.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include <fmt/format.h>

namespace shoal::net {

namespace {

constexpr uint64_t kHelloMagic = 0x53686f616c53686dULL;  // "ShoalShm"
constexpr uint64_t kPageBytes = 4096;
constexpr uint64_t kMaxSleepSliceNs = 10'000'000;  // peer liveness is rechecked this often

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
  return Status::Ok();
}

sockaddr_un abstract_address(const std::string& name, socklen_t* len) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof(addr.sun_path) - 2);
  std::memcpy(addr.sun_path + 1, name.data(), n);  // sun_path[0] == 0: abstract namespace
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return addr;
}

// Sends `hello` with `fd` attached as SCM_RIGHTS.
Status send_fd(int sock, int fd, const Hello& hello) {
  iovec iov{const_cast<Hello*>(&hello), sizeof(hello)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  if (sendmsg(sock, &msg, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(hello))) {
    return errno_status("shm rendezvous: sendmsg");
  }
  return Status::Ok();
}

// Receives a Hello and its memfd; returns the fd.
Result<int> recv_fd(int sock, Hello* hello, uint64_t timeout_ms) {
  pollfd p{sock, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout_ms)) <= 0) {
    return Status::Timeout("shm rendezvous: no hello from the listener");
  }
  iovec iov{hello, sizeof(*hello)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (n != static_cast<ssize_t>(sizeof(*hello)) || c == nullptr || c->cmsg_type != SCM_RIGHTS) {
    return Status::Corruption("shm rendezvous: malformed hello");
  }
  int fd;
  std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
  if (hello->magic != kHelloMagic) {
    ::close(fd);
    return Status::Corruption("shm rendezvous: bad hello magic");
  }
  return fd;
}

Result<int> make_memfd(size_t ring_bytes) {
  const int fd = memfd_create("shoal-shm", MFD_CLOEXEC);
  if (fd < 0) return errno_status("memfd_create");
  if (ftruncate(fd, static_cast<off_t>(2 * ring_slot_bytes(ring_bytes))) != 0) {
    Status s = errno_status("ftruncate memfd");
    ::close(fd);
    return s;
  }
  return fd;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Setup and teardown (cold paths)

Result<ShmEndpoint> ShmEndpoint::attach(int memfd, int sock, size_t ring_bytes, int side,
                                        bool init, const EndpointOptions& options) {
  const size_t slot = ring_slot_bytes(ring_bytes);
  struct stat st{};
  if (fstat(memfd, &st) != 0 || static_cast<size_t>(st.st_size) < 2 * slot) {
    ::close(memfd);
    ::close(sock);
    return Status::Corruption("shm: memfd smaller than its two rings");
  }
  void* p = mmap(nullptr, 2 * slot, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  ::close(memfd);  // the mapping keeps the memory alive
  if (p == MAP_FAILED) {
    ::close(sock);
    return errno_status("shm: mmap");
  }
  ShmEndpoint ep;
  ep.options_ = options;
  ep.options_.ring_bytes = ring_bytes;
  ep.map_ = static_cast<uint8_t*>(p);
  ep.map_bytes_ = 2 * slot;
  ep.sock_ = sock;
  std::span<uint8_t> rings[2] = {{ep.map_, slot}, {ep.map_ + slot, slot}};
  for (auto& r : rings) {
    if (init) ring_init(r, ring_bytes);
    SHOAL_TRY(ring_validate(r));  // ep's destructor unmaps and closes
  }
  ep.tx_ = RingProducer(rings[side]);
  ep.rx_ = RingConsumer(rings[1 - side]);
  ep.assembler_ = MessageAssembler(options.max_message_bytes);
  return ep;
}

Result<std::pair<ShmEndpoint, ShmEndpoint>> ShmEndpoint::pair(const EndpointOptions& options) {
  SHOAL_TRY(check_options(options));
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return errno_status("socketpair");
  }
  auto memfd = make_memfd(options.ring_bytes);
  if (!memfd.ok()) {
    ::close(sv[0]);
    ::close(sv[1]);
    return memfd.status();
  }
  const int fd2 = dup(*memfd);
  auto a = attach(*memfd, sv[0], options.ring_bytes, 0, true, options);
  if (!a.ok()) {
    ::close(fd2);
    ::close(sv[1]);
    return a.status();
  }
  auto b = attach(fd2, sv[1], options.ring_bytes, 1, false, options);
  if (!b.ok()) return b.status();
  return std::make_pair(std::move(*a), std::move(*b));
}

Result<ShmEndpoint> ShmEndpoint::connect(const std::string& name, const EndpointOptions& options,
                                         uint64_t timeout_ms) {
  const uint64_t deadline = mono_ns() + timeout_ms * 1'000'000;
  socklen_t len;
  const sockaddr_un addr = abstract_address(name, &len);
  for (;;) {  // bounded by the deadline: the listener may not be up yet
    const int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (sock < 0) return errno_status("socket");
    if (::connect(sock, reinterpret_cast<const sockaddr*>(&addr), len) == 0) {
      Hello hello{};
      auto fd = recv_fd(sock, &hello, timeout_ms);
      if (!fd.ok()) {
        ::close(sock);
        return fd.status();
      }
      EndpointOptions theirs = options;
      theirs.ring_bytes = hello.ring_bytes;
      if (Status s = check_options(theirs); !s.ok()) {
        ::close(*fd);
        ::close(sock);
        return s;
      }
      return attach(*fd, sock, hello.ring_bytes, 1, false, options);
    }
    const int err = errno;
    ::close(sock);
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
  tx_ = other.tx_;
  rx_ = other.rx_;
  assembler_ = std::move(other.assembler_);
  batch_outstanding_ = other.batch_outstanding_;
  empty_polls_ = other.empty_polls_;
  failed_ = std::move(other.failed_);
  return *this;
}

void ShmEndpoint::close() {
  if (map_ != nullptr) munmap(map_, map_bytes_);
  if (sock_ >= 0) ::close(sock_);
  map_ = nullptr;
  sock_ = -1;
  if (failed_.ok()) failed_ = Status::Unavailable("shm endpoint closed");
}

Status ShmEndpoint::fail(Status status) {
  if (failed_.ok()) failed_ = std::move(status);
  return failed_;
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

// ---------------------------------------------------------------------------------------------
// Data path

Status ShmEndpoint::push(uint32_t flags, uint32_t imm, uint64_t epoch,
                         std::span<const uint8_t> payload) {
  if (tx_.try_push(flags, imm, epoch, payload)) [[likely]] return Status::Ok();
  // Out of credit: spin, then sleep on the credit futex; recheck the peer between sleeps.
  const uint64_t start = mono_ns();
  for (uint64_t spins = 0;; ++spins) {
    if (tx_.try_push(flags, imm, epoch, payload)) return Status::Ok();
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

Status ShmEndpoint::send(uint32_t session, std::span<const uint8_t> bytes) {
  if (!failed_.ok()) return failed_;
  if (bytes.size() > options_.max_message_bytes) {
    return Status::InvalidArgument(fmt::format("message of {} bytes above max_message_bytes {}",
                                               bytes.size(), options_.max_message_bytes));
  }
  const size_t fragment = tx_.max_payload_bytes();
  size_t offset = 0;
  do {  // bounded: max_message_bytes / fragment iterations
    const size_t n = std::min(fragment, bytes.size() - offset);
    const bool more = offset + n < bytes.size();
    Status s = push(more ? kFlagMore : 0, session, 0, bytes.subspan(offset, n));
    if (!s.ok()) {
      // Half a message in the peer's ring cannot be taken back: the link is unusable.
      return offset == 0 && s.code() == Code::kTimeout ? s : fail(std::move(s));
    }
    offset += n;
  } while (offset < bytes.size());
  return Status::Ok();
}

Status ShmEndpoint::write_with_imm(uint64_t epoch, uint32_t imm, std::span<const uint8_t> bytes) {
  if (!failed_.ok()) return failed_;
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

Result<Frame> ShmEndpoint::next_frame() { return rx_.next(); }

Result<size_t> ShmEndpoint::poll(Completion* out, size_t max) {
  if (!failed_.ok()) [[unlikely]] return failed_;
  SHOAL_ASSERT(!batch_outstanding_, "poll() before release() of the previous batch");
  auto n = poll_frames(*this, assembler_, out, max);
  if (!n.ok()) return fail(n.status());
  batch_outstanding_ = *n > 0;
  if (*n == 0 && (++empty_polls_ & 1023) == 0) {
    // Idle: is the peer still there? Frames it published before dying were delivered first.
    Status s = check_peer();
    if (!s.ok() && !rx_.has_data()) return fail(std::move(s));
  }
  return n;
}

void ShmEndpoint::release() {
  assembler_.release();
  rx_.release();
  batch_outstanding_ = false;
}

Status ShmEndpoint::wait(uint64_t timeout_ns) {
  if (!failed_.ok()) return failed_;
  if (rx_.has_data()) return Status::Ok();
  const uint64_t start = mono_ns();
  const uint64_t spin_end = start + std::min(options_.spin_ns, timeout_ns);
  do {  // spin: a message usually arrives within microseconds when the peer is busy
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
  auto data = tx_.raw_data_for_test();
  const uint64_t offset = tx_.tail() & (data.size() - 1);
  SHOAL_ASSERT(offset + round_up8(bytes.size()) <= data.size(), "inject: no room before wrap");
  std::memcpy(data.data() + offset, bytes.data(), bytes.size());
  tx_.publish_raw_for_test(round_up8(bytes.size()));
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
  const sockaddr_un addr = abstract_address(name, &len);
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

Result<ShmEndpoint> ShmListener::accept(uint64_t timeout_ms) {
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout_ms)) <= 0) {
    return Status::Timeout("shm accept: no connection");
  }
  const int sock = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (sock < 0) return errno_status("shm accept");
  auto memfd = make_memfd(options_.ring_bytes);
  if (!memfd.ok()) {
    ::close(sock);
    return memfd.status();
  }
  const int shared = dup(*memfd);
  auto ep = ShmEndpoint::attach(*memfd, sock, options_.ring_bytes, 0, true, options_);
  if (!ep.ok()) {
    ::close(shared);
    return ep.status();
  }
  Status s = send_fd(sock, shared, Hello{kHelloMagic, options_.ring_bytes});
  ::close(shared);
  if (!s.ok()) return s;
  return ep;
}

}  // namespace shoal::net
