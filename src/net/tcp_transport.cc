#include "src/net/tcp_transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include <fmt/format.h>

#include "src/net/auth.h"
#include "src/net/socket_util.h"

namespace shoal::net {

namespace {

constexpr uint32_t kControlFence = 1;  // control frame: epoch = the sender's new fence

Status errno_status(const char* what, int err) {
  return socket_errno_status("tcp", what, err);
}

Status make_fast(int fd) {
  const int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0 ||
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
    return errno_status("tcp setsockopt/fcntl", errno);
  }
  return Status::Ok();
}

// A receive ring of `bytes` (a power of two, a multiple of the page size) mapped twice back to
// back from one memfd, so that any run of up to `bytes` bytes from any offset of the ring is
// contiguous in memory: a frame cut by the ring's end is read on into the second mapping. One
// munmap of 2 * bytes from the returned address frees it. With `populate` its pages are
// mapped now (best effort), so that the first lap of a receiver that laps (one that keeps
// what it received) takes no page faults; others fault in the few pages they use.
Result<uint8_t*> map_mirrored_ring(size_t bytes, bool populate) {
  const int fd = memfd_create("shoal-tcp-receive", MFD_CLOEXEC);
  if (fd < 0) return errno_status("tcp receive ring memfd_create", errno);
  void* base = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
    base = mmap(nullptr, 2 * bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  }
  bool mapped = base != MAP_FAILED;
  for (int half = 0; mapped && half < 2; ++half) {
    mapped = mmap(static_cast<uint8_t*>(base) + half * bytes, bytes, PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_FIXED, fd, 0) != MAP_FAILED;
  }
  const int err = errno;
  ::close(fd);
  if (!mapped) {
    if (base != MAP_FAILED) munmap(base, 2 * bytes);
    return errno_status("tcp receive ring mmap", err);
  }
  if (populate) (void)madvise(base, 2 * bytes, MADV_POPULATE_WRITE);
  return static_cast<uint8_t*>(base);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Setup and teardown (cold paths)

Result<TcpEndpoint> TcpEndpoint::adopt(int fd, const EndpointOptions& options) {
  TcpEndpoint ep;
  ep.fd_ = fd;
  if (options.tcp_buffer_bytes < 64 * 1024 || options.tcp_buffer_bytes > (size_t{1} << 30)) {
    return Status::InvalidArgument("tcp_buffer_bytes must be in [64 KiB, 1 GiB]");
  }
  if (options.max_message_bytes > kMaxMessageBytesLimit) {
    return Status::InvalidArgument("max_message_bytes above 1 GiB");
  }
  if (options.tcp_receive_ring_bytes > (size_t{1} << 30)) {
    return Status::InvalidArgument("tcp_receive_ring_bytes above 1 GiB");
  }
  SHOAL_TRY(make_fast(fd));
  ep.options_ = options;
  ep.max_payload_bytes_ =
      static_cast<uint32_t>(options.tcp_buffer_bytes / 4 - kFrameHeaderBytes - kFrameCanaryBytes);
  // Not zeroed: only frames written into it are sent. Zeroing the replication links' 8.7 MB
  // took 30-120 ms of page faults inside a leader's accept, on its replication thread: its
  // other followers heard nothing meanwhile and suspected it (a restart under load).
  ep.out_ = std::make_unique_for_overwrite<uint8_t[]>(options.tcp_buffer_bytes);
  auto ring = map_mirrored_ring(
      std::bit_ceil(std::max(options.tcp_buffer_bytes, options.tcp_receive_ring_bytes)),
      /*populate=*/options.tcp_receive_ring_bytes > options.tcp_buffer_bytes);
  if (!ring.ok()) return ring.status();
  ep.in_ = *ring;
  ep.in_capacity_ =
      std::bit_ceil(std::max(options.tcp_buffer_bytes, options.tcp_receive_ring_bytes));
  ep.assembler_ = MessageAssembler(options.max_message_bytes);
  return ep;
}

Result<TcpEndpoint> TcpEndpoint::connect(const std::string& host, uint16_t port,
                                         const EndpointOptions& options, uint64_t timeout_ms) {
  auto addr = parse_ipv4(host, port);
  if (!addr.ok()) return addr.status();
  auto fd = dial_tcp_proven(*addr, timeout_ms, "tcp", fmt::format("tcp {}:{}", host, port));
  if (!fd.ok()) return fd.status();
  auto ep = adopt(*fd, options);
  if (!ep.ok()) return ep.status();
  ep->connector_ = true;
  ep->remote_ = *addr;
  return ep;
}

Result<std::pair<TcpEndpoint, TcpEndpoint>> TcpEndpoint::pair(const EndpointOptions& options) {
  auto listener = TcpListener::listen("127.0.0.1", 0, options);
  if (!listener.ok()) return listener.status();
  auto b = connect("127.0.0.1", listener->port(), options);
  if (!b.ok()) return b.status();
  auto a = listener->accept();
  if (!a.ok()) return a.status();
  return std::make_pair(std::move(*a), std::move(*b));
}

TcpEndpoint& TcpEndpoint::operator=(TcpEndpoint&& other) noexcept {
  if (this == &other) return *this;
  close();
  unmap_receive_ring();
  options_ = other.options_;
  fd_ = std::exchange(other.fd_, -1);
  connector_ = other.connector_;
  remote_ = other.remote_;
  max_payload_bytes_ = other.max_payload_bytes_;
  out_ = std::move(other.out_);
  out_len_ = other.out_len_;
  tx_pos_ = other.tx_pos_;
  in_ = std::exchange(other.in_, nullptr);
  holds_ = std::exchange(other.holds_, nullptr);
  in_capacity_ = other.in_capacity_;
  in_begin_ = other.in_begin_;
  in_cursor_ = other.in_cursor_;
  in_end_ = other.in_end_;
  rx_pos_ = other.rx_pos_;
  peer_closed_ = other.peer_closed_;
  fence_epoch_ = other.fence_epoch_;
  peer_fence_epoch_ = other.peer_fence_epoch_;
  fenced_drops_ = other.fenced_drops_;
  assembler_ = std::move(other.assembler_);
  batch_outstanding_ = other.batch_outstanding_;
  assembled_out_ = other.assembled_out_;
  reserved_ = other.reserved_;
  sent_copied_bytes_ = other.sent_copied_bytes_;
  moved_bytes_ = other.moved_bytes_;
  failed_ = std::move(other.failed_);
  return *this;
}

void TcpEndpoint::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (failed_.ok()) failed_ = Status::Unavailable("tcp endpoint closed");
}

void TcpEndpoint::unmap_receive_ring() {
  if (in_ == nullptr) return;
  if (holds_ != nullptr) {
    holds_->unref();  // it unmaps once no kept region is left
    holds_ = nullptr;
  } else {
    munmap(in_, 2 * in_capacity_);
  }
  in_ = nullptr;
}

void TcpEndpoint::reset_stream() {
  out_len_ = 0;
  tx_pos_ = 0;
  // The old stream's unread bytes go; ring positions go on (kept regions are still held).
  in_cursor_ = in_end_;
  batch_outstanding_ = false;
  release_consumed();
  rx_pos_ = 0;
  peer_closed_ = false;
  assembler_ = MessageAssembler(options_.max_message_bytes);
  batch_outstanding_ = false;
  assembled_out_ = false;
  reserved_ = false;
  failed_ = Status::Ok();
}

Status TcpEndpoint::reconnect(uint64_t timeout_ms) {
  SHOAL_ASSERT(connector_, "reconnect() on an accepted endpoint");
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  auto fd = dial_tcp(remote_, timeout_ms, "tcp");
  if (!fd.ok()) return fail(fd.status());
  fd_ = *fd;
  reset_stream();  // a new stream: positions restart at 0; the peer fence we knew is kept
  SHOAL_TRY(make_fast(fd_));
  if (fence_epoch_ != 0) SHOAL_TRY(set_fence_epoch(fence_epoch_));
  return Status::Ok();
}

Status TcpEndpoint::fail(Status status) {
  if (failed_.ok()) failed_ = std::move(status);
  return failed_;
}

// ---------------------------------------------------------------------------------------------
// Sending

Status TcpEndpoint::write_all(iovec* iov, int count) {
  const uint64_t start = mono_ns();
  while (count > 0) {  // bounded by send_timeout_ns
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(count);
    const ssize_t n = sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) return fail(errno_status("tcp sendmsg", errno));
      if (mono_ns() - start >= options_.send_timeout_ns) {
        return fail(Status::Timeout("tcp send: socket buffer full for send_timeout_ns"));
      }
      // Keep reading meanwhile: the peer may itself be blocked sending to us.
      if (Status s = read_while_blocked(); !s.ok()) return fail(std::move(s));
      const bool can_read = !peer_closed_ && receive_room();
      pollfd p{fd_, static_cast<short>(POLLOUT | (can_read ? POLLIN : 0)), 0};
      ::poll(&p, 1, 10);
      continue;
    }
    auto left = static_cast<size_t>(n);
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov->iov_base = static_cast<uint8_t*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return Status::Ok();
}

Status TcpEndpoint::flush() {
  if (!failed_.ok()) return failed_;
  // A reserved frame pins the buffer (the caller holds a pointer into it) until committed.
  if (out_len_ == 0 || reserved_) return Status::Ok();
  iovec iov{out_.get(), out_len_};
  out_len_ = 0;
  return write_all(&iov, 1);
}

Status TcpEndpoint::append_frame(uint32_t flags, uint32_t imm, uint64_t epoch,
                                 std::span<const uint8_t> payload) {
  const std::span<const uint8_t> one[1] = {payload};
  GatherCursor cursor(one);
  return append_frame(flags, imm, epoch, cursor, payload.size());
}

Status TcpEndpoint::append_frame(uint32_t flags, uint32_t imm, uint64_t epoch, GatherCursor& cursor,
                                 size_t payload_bytes) {
  SHOAL_ASSERT(!reserved_, "%s", "a send while a reserve() is outstanding");
  const size_t bytes = frame_bytes(payload_bytes);
  const auto n = static_cast<uint32_t>(payload_bytes);
  if (payload_bytes < kGatherBytes) {
    // Small: copied into the send buffer, batched with the frames around it.
    if (out_len_ + bytes > options_.tcp_buffer_bytes) SHOAL_TRY(flush());
    uint8_t* frame = out_.get() + out_len_;
    cursor.copy_to(frame + kFrameHeaderBytes, payload_bytes);
    seal_frame(frame, tx_pos_, flags, imm, epoch, n);
    sent_copied_bytes_ += payload_bytes;
    out_len_ += bytes;
    tx_pos_ += bytes;
    if (out_len_ >= options_.tcp_buffer_bytes / 2) return flush();
    return Status::Ok();
  }
  // Large payload: no copy. Header and trailer are built beside the caller's bytes, which go
  // to the kernel as they are (a piece per iovec; at most kGatherPiecesMax of them).
  SHOAL_TRY(flush());
  const uint32_t length_flags = flags | n;
  uint8_t header[kFrameHeaderBytes];
  std::memcpy(header, &length_flags, 4);
  std::memcpy(header + 4, &imm, 4);
  std::memcpy(header + 8, &epoch, 8);
  uint8_t trailer[8 + kFrameCanaryBytes] = {};
  const size_t pad = round_up8(n) - n;
  const uint64_t canary = frame_canary(tx_pos_, length_flags, imm, epoch);
  std::memcpy(trailer + pad, &canary, 8);
  iovec iov[kGatherPiecesMax + 2];
  int count = 0;
  iov[count++] = {header, sizeof(header)};
  for (size_t left = payload_bytes; left > 0;) {  // bounded: one piece per iteration
    const std::span<const uint8_t> chunk = cursor.take(left);
    SHOAL_ASSERT(!chunk.empty() && count < static_cast<int>(kGatherPiecesMax) + 1, "%s",
                 "gather list shorter than its frame, or too many pieces");
    iov[count++] = {const_cast<uint8_t*>(chunk.data()), chunk.size()};
    left -= chunk.size();
  }
  iov[count++] = {trailer, pad + kFrameCanaryBytes};
  tx_pos_ += bytes;
  return write_all(iov, count);
}

Status TcpEndpoint::send(uint32_t session, std::span<const uint8_t> bytes) {
  if (!failed_.ok()) return failed_;
  if (bytes.size() > options_.max_message_bytes) {
    return Status::InvalidArgument(fmt::format("message of {} bytes above max_message_bytes {}",
                                               bytes.size(), options_.max_message_bytes));
  }
  const std::span<const uint8_t> one[1] = {bytes};
  GatherCursor cursor(one);
  return send_fragments(session, cursor, bytes.size());
}

Status TcpEndpoint::send_gather(uint32_t session, GatherList pieces) {
  if (!failed_.ok()) return failed_;
  auto bytes = gather_message_bytes(pieces, options_.max_message_bytes);
  if (!bytes.ok()) return bytes.status();
  GatherCursor cursor(pieces);
  return send_fragments(session, cursor, *bytes);
}

Status TcpEndpoint::send_fragments(uint32_t session, GatherCursor& cursor, size_t bytes) {
  size_t offset = 0;
  do {  // bounded: max_message_bytes / max_payload_bytes_ iterations
    const size_t n = std::min<size_t>(max_payload_bytes_, bytes - offset);
    const bool more = offset + n < bytes;
    SHOAL_TRY(append_frame(more ? kFlagMore : 0, session, 0, cursor, n));
    offset += n;
  } while (offset < bytes);
  return Status::Ok();
}

Status TcpEndpoint::write_with_imm(uint64_t epoch, uint32_t imm, std::span<const uint8_t> bytes) {
  if (!failed_.ok()) return failed_;
  if (bytes.size() > max_payload_bytes_) {
    return Status::InvalidArgument(fmt::format("one-sided write of {} bytes above the limit {}",
                                               bytes.size(), max_payload_bytes_));
  }
  if (epoch < peer_fence_epoch_) {
    return Status::Aborted(fmt::format(
        "write epoch {} below the peer's fence {}: stale writer fenced", epoch, peer_fence_epoch_));
  }
  return append_frame(kFlagWrite, imm, epoch, bytes);
}

Result<std::span<uint8_t>> TcpEndpoint::reserve(size_t bytes) {
  if (!failed_.ok()) return failed_;
  SHOAL_ASSERT(!reserved_, "reserve() with a reservation outstanding");
  if (bytes > max_payload_bytes_) {
    return Status::InvalidArgument(
        fmt::format("reserve of {} bytes above max_write_bytes {}", bytes, max_payload_bytes_));
  }
  if (out_len_ + frame_bytes(bytes) > options_.tcp_buffer_bytes) SHOAL_TRY(flush());
  reserved_ = true;
  return std::span<uint8_t>(out_.get() + out_len_ + kFrameHeaderBytes, bytes);
}

Status TcpEndpoint::seal_reserved(uint32_t flags, uint32_t imm, uint64_t epoch, size_t bytes) {
  SHOAL_ASSERT(reserved_, "commit without reserve()");
  reserved_ = false;
  seal_frame(out_.get() + out_len_, tx_pos_, flags, imm, epoch, static_cast<uint32_t>(bytes));
  out_len_ += frame_bytes(bytes);
  tx_pos_ += frame_bytes(bytes);
  if (out_len_ >= options_.tcp_buffer_bytes / 2) return flush();
  return failed_;
}

Status TcpEndpoint::commit_send(uint32_t session, size_t bytes) {
  return seal_reserved(0, session, 0, bytes);
}

Status TcpEndpoint::commit_write(uint64_t epoch, uint32_t imm, size_t bytes) {
  if (epoch < peer_fence_epoch_) {
    cancel();
    return Status::Aborted(fmt::format(
        "write epoch {} below the peer's fence {}: stale writer fenced", epoch, peer_fence_epoch_));
  }
  return seal_reserved(kFlagWrite, imm, epoch, bytes);
}

Status TcpEndpoint::set_fence_epoch(uint64_t epoch) {
  if (!failed_.ok()) return failed_;
  if (epoch < fence_epoch_) return Status::InvalidArgument("fence epochs only move forward");
  fence_epoch_ = epoch;
  SHOAL_TRY(append_frame(kFlagControl, kControlFence, epoch, {}));
  return flush();
}

Status TcpEndpoint::inject_raw_for_test(std::span<const uint8_t> bytes) {
  SHOAL_TRY(flush());
  iovec iov{const_cast<uint8_t*>(bytes.data()), bytes.size()};
  return write_all(&iov, 1);
}

// ---------------------------------------------------------------------------------------------
// Receiving

Status TcpEndpoint::fill() {
  if (peer_closed_) return Status::Ok();
  // Up to the first byte still owned by the caller (a completion, or a kept region): the
  // mirror makes the free run contiguous however it wraps.
  const size_t room = in_begin_ + in_capacity_ - in_end_;
  if (room == 0) return Status::Ok();
  for (;;) {  // retries EINTR only
    const ssize_t n = recv(fd_, in_at(in_end_), room, 0);
    if (n > 0) {
      in_end_ += static_cast<size_t>(n);
      return Status::Ok();
    }
    if (n == 0) {
      peer_closed_ = true;
      return Status::Ok();
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN) return Status::Ok();
    if (errno == ECONNRESET) {
      peer_closed_ = true;
      return Status::Ok();
    }
    return errno_status("tcp recv", errno);
  }
}

bool TcpEndpoint::receive_room() const {
  return in_end_ - in_begin_ < in_capacity_;
}

void TcpEndpoint::let_go_of_kept() {
  if (holds_ != nullptr && !batch_outstanding_) in_begin_ = holds_->floor(in_cursor_);
}

void TcpEndpoint::grow_receive_buffer() {
  // Cold path, at most a few times per endpoint: the ring only grows, up to the bound.
  const size_t bound = std::bit_ceil(options_.tcp_buffer_bytes + options_.max_message_bytes);
  let_go_of_kept();
  if (batch_outstanding_ || in_capacity_ >= bound || receive_room()) return;
  auto bigger = map_mirrored_ring(2 * in_capacity_, /*populate=*/false);
  if (!bigger.ok()) return;  // the send waits on as before
  const size_t live = in_end_ - in_cursor_;
  std::memcpy(*bigger, in_at(in_cursor_), live);
  moved_bytes_ += live;
  unmap_receive_ring();  // regions kept in it stay valid: the holds table unmaps it last
  in_ = *bigger;
  in_capacity_ *= 2;
  in_begin_ = in_cursor_ = 0;
  in_end_ = live;
}

Status TcpEndpoint::read_while_blocked() {
  for (int round = 0; round < 16; ++round) {  // bounded: 16 receive-buffer refills
    grow_receive_buffer();
    SHOAL_TRY(fill());
    bool absorbed = false;
    // Bounded by the frames in the receive buffer.
    while (!assembler_.holding()) {
      Frame f;
      const std::span<const uint8_t> input(in_at(in_cursor_), in_end_ - in_cursor_);
      if (decode_frame_fast(input, rx_pos_, max_payload_bytes_, &f) != Decode::kFrame) break;
      // Only fragments move out; whole frames (and anything malformed) wait for poll().
      if ((f.flags & (kFlagControl | kFlagWrite)) != 0) break;
      if (!(f.flags & kFlagMore) && !assembler_.active()) break;
      if (!assembler_.feed(f).ok()) break;  // poll() feeds it again and reports the error
      in_cursor_ += f.frame_bytes;
      rx_pos_ += f.frame_bytes;
      if (!batch_outstanding_) release_consumed();  // else completions still point into in_
      absorbed = true;
    }
    if (!absorbed) break;
  }
  return Status::Ok();
}

bool TcpEndpoint::input_ready() const {
  return frame_ready() || assembler_.holding() || peer_closed_;
}

bool TcpEndpoint::frame_ready() const {
  const size_t avail = in_end_ - in_cursor_;
  if (avail < kFrameHeaderBytes) return false;
  uint32_t length_flags;
  std::memcpy(&length_flags, in_at(in_cursor_), 4);
  const uint32_t length = length_flags & kLengthMask;
  // A malformed length is "ready": poll() must see it and report Corruption.
  return length > max_payload_bytes_ || avail >= frame_bytes(length);
}

bool TcpEndpoint::next_frame(Frame* out, Status* error) {
  for (int round = 0; round < 64; ++round) {
    const std::span<const uint8_t> input(in_at(in_cursor_), in_end_ - in_cursor_);
    const Decode d = decode_frame_fast(input, rx_pos_, max_payload_bytes_, out);
    if (d == Decode::kFrame) {
      in_cursor_ += out->frame_bytes;
      rx_pos_ += out->frame_bytes;
      if ((out->flags & kFlagWrite) && out->epoch < fence_epoch_) [[unlikely]] {
        ++fenced_drops_;  // the writer had not yet seen our fence
        continue;
      }
      return true;
    }
    if (d != Decode::kIncomplete) [[unlikely]] {
      // An acceptor with a cluster secret opens with its challenge (auth.h): to a process
      // without one that is no frame, and "the peer asks for the secret" says what to fix.
      *error = rx_pos_ == 0 && starts_with_auth_challenge(input)
                   ? Status::InvalidArgument(
                         "tcp: the peer asks for the cluster secret ([cluster] secret_file) and "
                         "this process has none")
                   : decode_error(d, input, rx_pos_, max_payload_bytes_);
      return false;
    }
    if (peer_closed_) {
      *error = input.empty() ? Status::Unavailable("tcp peer closed the connection")
                             : Status::Corruption(fmt::format(
                                   "tcp: truncated frame at stream position {}: peer closed after "
                                   "{} of its bytes",
                                   rx_pos_, input.size()));
      return false;
    }
    const size_t before = in_end_;
    if (Status s = fill(); !s.ok()) {
      *error = std::move(s);
      return false;
    }
    if (in_end_ == before && !peer_closed_) return false;  // nothing more for now
  }
  return false;
}

void TcpEndpoint::release_consumed() {
  in_begin_ = holds_ == nullptr ? in_cursor_ : holds_->floor(in_cursor_);
  // Nothing unread, nothing kept: the next recv starts at the ring's start again, so that a
  // receiver of small messages touches its first pages only (positions only move forward).
  if (in_begin_ == in_end_) {
    in_begin_ = in_cursor_ = in_end_ = (in_end_ + in_capacity_ - 1) & ~uint64_t{in_capacity_ - 1};
  }
}

void TcpEndpoint::on_control(const Frame& frame) {
  if (frame.imm == kControlFence) {
    peer_fence_epoch_ = std::max(peer_fence_epoch_, frame.epoch);
  }
  // Unknown control types are ignored: a newer peer may send more of them.
}

Result<size_t> TcpEndpoint::poll(Completion* out, size_t max) {
  if (!failed_.ok()) [[unlikely]]
    return failed_;
  SHOAL_ASSERT(!batch_outstanding_, "poll() before release() of the previous batch");
  if (out_len_ != 0) SHOAL_TRY(flush());
  let_go_of_kept();  // regions let go since, on any thread: room for recv
  if (assembler_.holding() && max > 0) [[unlikely]] {
    // Completed by read_while_blocked() during a send; the frames after it are still unread.
    out[0] = {Completion::Kind::kRecv, assembler_.imm(), 0, assembler_.message()};
    batch_outstanding_ = true;
    assembled_out_ = true;
    return size_t{1};
  }
  auto n = poll_frames(*this, assembler_, out, max);
  assembled_out_ = assembler_.holding();  // it was not on entry: this batch completed it
  if (!n.ok()) {
    // Deliver what this batch already holds; the failure surfaces on the next call.
    return fail(n.status());
  }
  batch_outstanding_ = *n > 0;
  return n;
}

void TcpEndpoint::release() {
  // Only a message this batch delivered: one completed meanwhile by read_while_blocked() (a
  // send while the batch was out) is still to be delivered.
  if (assembled_out_) assembler_.release();
  assembled_out_ = false;
  release_consumed();
  batch_outstanding_ = false;
}

std::shared_ptr<const uint64_t[]> TcpEndpoint::keep_received(std::span<const uint8_t> bytes) {
  SHOAL_ASSERT(batch_outstanding_, "%s", "keep_received() outside a poll batch");
  if (bytes.empty() || !in_receive_ring(bytes.data()) ||
      reinterpret_cast<uintptr_t>(bytes.data()) % 8 != 0) {
    return nullptr;
  }
  // The bytes' ring position: the one below the cursor, within what the caller still owns.
  const uint64_t offset = static_cast<uint64_t>(bytes.data() - in_) & (in_capacity_ - 1);
  const uint64_t back = (in_cursor_ - offset) & (in_capacity_ - 1);
  if (back == 0 || back > in_cursor_ - in_begin_ || bytes.size() > back) return nullptr;
  const uint64_t begin = in_cursor_ - back;
  if (holds_ == nullptr) holds_ = RingHolds::create(kKeepRecords, in_, 2 * in_capacity_);
  // Held from recv if we keep these: from the oldest kept region (or these bytes) to the
  // cursor. At most three quarters of the ring, so the largest frame still finds room.
  const uint64_t oldest = std::min(holds_->floor(in_cursor_), begin);
  if (in_cursor_ - oldest > in_capacity_ / 4 * 3) return nullptr;
  return holds_->hold(bytes.data(), begin, bytes.size());
}

bool TcpEndpoint::prepare_to_block() {
  if (!failed_.ok() || !flush().ok()) return false;  // let poll() report it
  let_go_of_kept();
  return !input_ready();
}

Status TcpEndpoint::wait(uint64_t timeout_ns) {
  if (!failed_.ok()) return failed_;
  SHOAL_TRY(flush());
  const uint64_t start = mono_ns();
  const uint64_t spin_end = start + std::min(options_.spin_ns, timeout_ns);
  for (uint32_t i = 0;; ++i) {  // spin on recv; bounded by spin_ns
    let_go_of_kept();
    if (input_ready()) return Status::Ok();
    if (Status s = fill(); !s.ok()) return fail(std::move(s));
    if ((i & 15) == 15 && mono_ns() >= spin_end) break;
  }
  const uint64_t deadline = start + timeout_ns;
  for (;;) {  // block in poll(2); bounded by the deadline
    if (input_ready()) return Status::Ok();
    const uint64_t now = mono_ns();
    if (now >= deadline) return Status::Timeout("");
    pollfd p{fd_, POLLIN, 0};
    const uint64_t slice_ms = std::min<uint64_t>((deadline - now + 999'999) / 1'000'000, 100);
    // A ring full of kept regions: the socket stays readable, so this waits in slices of
    // 1 ms for the holder to let go instead of returning at once.
    const bool room = receive_room();
    ::poll(room ? &p : nullptr, room ? 1 : 0, static_cast<int>(room ? slice_ms : 1));
    let_go_of_kept();
    if (Status s = fill(); !s.ok()) return fail(std::move(s));
  }
}

// ---------------------------------------------------------------------------------------------
// Listener

Result<TcpListener> TcpListener::listen(const std::string& host, uint16_t port,
                                        const EndpointOptions& options) {
  auto addr = parse_ipv4(host, port);
  if (!addr.ok()) return addr.status();
  TcpListener l;
  l.options_ = options;
  l.fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (l.fd_ < 0) return errno_status("socket", errno);
  const int one = 1;
  setsockopt(l.fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(l.fd_, reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr)) != 0) {
    return errno_status("tcp bind", errno);
  }
  if (::listen(l.fd_, 128) != 0) return errno_status("tcp listen", errno);
  sockaddr_in bound{};
  socklen_t len = sizeof(bound);
  getsockname(l.fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  l.port_ = ntohs(bound.sin_port);
  return l;
}

TcpListener& TcpListener::operator=(TcpListener&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    options_ = other.options_;
    fd_ = std::exchange(other.fd_, -1);
    port_ = other.port_;
  }
  return *this;
}

TcpListener::~TcpListener() {
  if (fd_ >= 0) ::close(fd_);
}

Result<TcpEndpoint> TcpListener::accept(uint64_t timeout_ms) {
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout_ms)) <= 0) {
    return Status::Timeout("tcp accept: no connection");
  }
  sockaddr_in from{};
  socklen_t from_len = sizeof(from);
  const int fd = accept4(fd_, reinterpret_cast<sockaddr*>(&from), &from_len, SOCK_CLOEXEC);
  if (fd < 0) return errno_status("tcp accept", errno);
  if (const std::string& secret = cluster_secret(); !secret.empty()) {
    if (Status s = verify_dialer(fd, secret); !s.ok()) {
      ::close(fd);
      char ip[INET_ADDRSTRLEN] = "?";
      inet_ntop(AF_INET, &from.sin_addr, ip, sizeof(ip));
      return Status::InvalidArgument(
          fmt::format("tcp accept: refused {}:{}: {}", ip, ntohs(from.sin_port), s.message()));
    }
  }
  return TcpEndpoint::adopt(fd, options_);
}

}  // namespace shoal::net
