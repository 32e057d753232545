#include "src/net/uring_transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include <fmt/format.h>

#include "src/net/socket_util.h"

// Older uapi headers lack the SEND_ZC usage report (kernel 6.2); the values are ABI.
#ifndef IORING_SEND_ZC_REPORT_USAGE
#define IORING_SEND_ZC_REPORT_USAGE (1U << 3)
#endif
#ifndef IORING_NOTIF_USAGE_ZC_COPIED
#define IORING_NOTIF_USAGE_ZC_COPIED (1U << 31)
#endif

namespace shoal::net {

namespace {

constexpr uint32_t kControlFence = 1;  // control frame: epoch = the sender's new fence
constexpr uint32_t kRecvBuffers = 32;  // provided buffers; a power of two (buffer ring rule)
constexpr uint16_t kBufferGroup = 1;
constexpr unsigned kRingEntries = 64;  // SQ depth; the CQ gets twice that
constexpr uint64_t kTagRecv = 1, kTagSend = 2, kTagCancel = 3;
constexpr size_t kPeekBatch = 64;
constexpr uint64_t kCloseDrainNs = 1'000'000'000;  // close() waits this long for sends at most

uint64_t user_data(uint64_t tag, uint32_t slot) {
  return (tag << 8) | slot;
}

Status errno_status(const char* what, int err) {
  return socket_errno_status("uring", what, err);
}

unsigned mode_flags(UringMode mode) {
  switch (mode) {
    case UringMode::kDeferTaskrun:
      return IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_TASKRUN_FLAG;
    case UringMode::kCoopTaskrun:
      return IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
    default:
      return 0;
  }
}

// Logs the ring mode the first time this process uses it (fallbacks are worth knowing about
// when reading latency numbers; once per mode keeps tests with many endpoints quiet).
void log_mode_once(UringMode mode, const std::string& fallback_note) {
  static std::atomic<uint32_t> logged{0};
  const uint32_t bit = 1u << static_cast<uint32_t>(mode);
  if ((logged.fetch_or(bit) & bit) != 0) return;
  fmt::print(stderr, "uring transport: io_uring mode {}{}\n", uring_mode_name(mode), fallback_note);
}

struct SendSlot {
  uint8_t* base = nullptr;
  size_t len = 0;   // bytes encoded (and, once submitted, to send)
  size_t sent = 0;  // bytes the kernel has taken so far
  bool inflight = false;
  uint32_t notifs_pending = 0;  // SEND_ZC notifications still to come
  bool idle() const { return !inflight && notifs_pending == 0; }
};

struct Chunk {
  uint16_t bid;
  uint32_t len;
};

}  // namespace

const char* uring_mode_name(UringMode mode) {
  switch (mode) {
    case UringMode::kAuto:
      return "auto";
    case UringMode::kDeferTaskrun:
      return "defer_taskrun";
    case UringMode::kCoopTaskrun:
      return "coop_taskrun";
    case UringMode::kDefault:
      return "default";
  }
  return "?";
}

// All endpoint state; heap-allocated so the endpoint moves cheaply and so `ring` (whose
// pointers reference its own mmaps, not itself) never moves after setup.
struct UringEndpoint::State {
  EndpointOptions opt;
  UringOptions uopt;
  int fd = -1;
  int event_fd = -1;
  uint32_t max_payload = 0;
  Status failed;

  // Ring (created by setup() on first use).
  bool ring_ready = false;
  io_uring ring{};
  UringMode mode = UringMode::kAuto;
  uint8_t* mem = nullptr;  // send slots, then receive buffers (one mmap)
  size_t mem_bytes = 0;
  io_uring_buf_ring* buf_ring = nullptr;
  size_t buf_ring_bytes = 0;
  bool send_registered = false;
  bool eventfd_registered = false;  // on the first prepare_to_block(): others never pay for it

  // Sending.
  SendSlot slots[2];
  size_t slot_bytes = 0;
  uint32_t active = 0;
  uint64_t tx_pos = 0;
  bool reserved = false;
  uint64_t fence = 0;
  uint64_t peer_fence = 0;
  uint64_t zc_sends = 0, zc_copied = 0;
  uint64_t sent_copied = 0;  // payload bytes copied into send slots

  // Receiving: chunks [q_head, q_cursor) are decoded (maybe lent out); q_cursor is decoded
  // up to cur_off; the rest up to q_tail is untouched. Counters are free-running.
  uint8_t* recv_base = nullptr;
  size_t buf_bytes = 0;
  Chunk chunks[kRecvBuffers] = {};
  uint32_t q_head = 0, q_cursor = 0, q_tail = 0;
  uint32_t cur_off = 0;
  std::unique_ptr<uint8_t[]> staging;
  size_t staging_len = 0;
  bool staging_pinned = false;  // a completion points into staging
  uint64_t rx_pos = 0;
  bool recv_armed = false;
  bool peer_closed = false;
  Status recv_error;
  uint64_t fenced_drops = 0;
  MessageAssembler assembler{0};
  bool batch_outstanding = false;

  ~State() { close(); }

  Status fail(Status s) {
    if (failed.ok()) failed = std::move(s);
    return failed;
  }
  Status usable() {
    if (!failed.ok()) [[unlikely]]
      return failed;
    if (!ring_ready) [[unlikely]]
      return setup();
    return Status::Ok();
  }

  // ---- setup / teardown (cold)
  Status setup();
  Status init_ring();
  Status init_memory();
  Status init_buffer_ring();
  void close();
  void drain_for_close();

  // ---- submission and completion
  io_uring_sqe* sqe();
  Status submit();
  Status arm_recv();
  void maybe_rearm();
  void reap();
  void on_cqe(const io_uring_cqe& cqe);
  void on_recv_cqe(const io_uring_cqe& cqe);
  void on_send_cqe(const io_uring_cqe& cqe, uint32_t slot);
  void return_buffer(uint16_t bid, uint32_t index) {
    io_uring_buf_ring_add(buf_ring, recv_base + size_t{bid} * buf_bytes,
                          static_cast<unsigned>(buf_bytes), bid,
                          io_uring_buf_ring_mask(kRecvBuffers), static_cast<int>(index));
  }

  // ---- sending
  Status submit_slot(uint32_t i);
  Status flush_active();
  // sent_is_enough: return once the socket took the bytes (a SEND_ZC notification may follow).
  Status wait_slot_idle(uint32_t i, uint64_t timeout_ns, bool sent_is_enough = false);
  Status make_room(size_t bytes);
  // One frame whose payload is the next `payload_bytes` bytes of `cursor`, copied into the
  // active slot.
  Status append_frame(uint32_t flags, uint32_t imm, uint64_t epoch, GatherCursor& cursor,
                      size_t payload_bytes);
  Status append_frame(uint32_t flags, uint32_t imm, uint64_t epoch,
                      std::span<const uint8_t> payload) {
    const std::span<const uint8_t> one[1] = {payload};
    GatherCursor cursor(one);
    return append_frame(flags, imm, epoch, cursor, payload.size());
  }
  Status send_fragments(uint32_t session, GatherCursor& cursor, size_t bytes);
  Status flush();

  // ---- receiving (poll_frames source)
  bool ready() const { return q_cursor != q_tail || peer_closed || !recv_error.ok(); }
  void advance_chunk() {
    ++q_cursor;
    cur_off = 0;
  }
  Result<Frame> end_of_data();
  Result<Frame> fill_staging();
  Result<Frame> decode_next();  // frame_bytes == 0: none for now
  bool next_frame(Frame* out, Status* error) {
    Result<Frame> f = decode_next();
    if (!f.ok()) [[unlikely]] {
      *error = f.status();
      return false;
    }
    *out = *f;
    return out->frame_bytes != 0;
  }
  void release_consumed();
  void on_control(const Frame& f) {
    if (f.imm == kControlFence) peer_fence = std::max(peer_fence, f.epoch);
    // Unknown control types are ignored: a newer peer may send more of them.
  }
  void defer_error(Status s) { fail(std::move(s)).ignore(); }
};

// ---------------------------------------------------------------------------------------------
// Setup and teardown (cold paths)

Status UringEndpoint::State::init_ring() {
  UringMode order[3] = {uopt.mode, UringMode::kAuto, UringMode::kAuto};
  size_t tries = 1;
  if (uopt.mode == UringMode::kAuto) {
    order[0] = UringMode::kDeferTaskrun;
    order[1] = UringMode::kCoopTaskrun;
    order[2] = UringMode::kDefault;
    tries = 3;
  }
  std::string note;
  int rc = -ENOSYS;
  for (size_t i = 0; i < tries; ++i) {
    io_uring_params p{};
    p.flags = mode_flags(order[i]);
    rc = io_uring_queue_init_params(kRingEntries, &ring, &p);
    if (rc == 0) {
      mode = order[i];
      log_mode_once(mode, note);
      return Status::Ok();
    }
    note += fmt::format(" ({} unavailable: {})", uring_mode_name(order[i]), std::strerror(-rc));
  }
  return Status::NotSupported(fmt::format("io_uring setup failed:{}", note));
}

Status UringEndpoint::State::init_memory() {
  slot_bytes = opt.tcp_buffer_bytes / 2;
  buf_bytes = opt.tcp_buffer_bytes / kRecvBuffers;
  mem_bytes = 2 * slot_bytes + kRecvBuffers * buf_bytes;
  void* m = mmap(nullptr, mem_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return errno_status("uring mmap buffers", errno);
  mem = static_cast<uint8_t*>(m);
  slots[0].base = mem;
  slots[1].base = mem + slot_bytes;
  recv_base = mem + 2 * slot_bytes;
  staging = std::make_unique<uint8_t[]>(frame_bytes(max_payload));
  // Registered send slots let SEND_ZC skip pinning pages per send. Optional: without them
  // (e.g. a tight memlock limit) zero-copy sends use plain user addresses.
  iovec iov[2] = {{slots[0].base, slot_bytes}, {slots[1].base, slot_bytes}};
  send_registered = io_uring_register_buffers(&ring, iov, 2) == 0;
  return Status::Ok();
}

Status UringEndpoint::State::init_buffer_ring() {
  buf_ring_bytes = kRecvBuffers * sizeof(io_uring_buf);
  void* m =
      mmap(nullptr, buf_ring_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return errno_status("uring mmap buffer ring", errno);
  buf_ring = static_cast<io_uring_buf_ring*>(m);
  io_uring_buf_ring_init(buf_ring);
  io_uring_buf_reg reg{};
  reg.ring_addr = reinterpret_cast<uint64_t>(buf_ring);
  reg.ring_entries = kRecvBuffers;
  reg.bgid = kBufferGroup;
  const int rc = io_uring_register_buf_ring(&ring, &reg, 0);
  if (rc != 0) {
    return Status::NotSupported(
        fmt::format("io_uring provided buffer ring: {}", std::strerror(-rc)));
  }
  for (uint32_t i = 0; i < kRecvBuffers; ++i) return_buffer(static_cast<uint16_t>(i), i);
  io_uring_buf_ring_advance(buf_ring, static_cast<int>(kRecvBuffers));
  return Status::Ok();
}

Status UringEndpoint::State::setup() {
  SHOAL_ASSERT(!ring_ready, "%s", "ring set up twice");
  if (Status s = init_ring(); !s.ok()) return fail(std::move(s));
  ring_ready = true;  // from here on close() tears the ring down
  if (int rc = io_uring_register_files(&ring, &fd, 1); rc != 0) {
    return fail(errno_status("io_uring register socket", -rc));
  }
  if (Status s = init_memory(); !s.ok()) return fail(std::move(s));
  if (Status s = init_buffer_ring(); !s.ok()) return fail(std::move(s));
  if (Status s = arm_recv(); !s.ok()) return fail(std::move(s));
  return Status::Ok();
}

// Cancels the multishot receive and waits (bounded) for submitted sends, so the kernel
// touches none of our memory after it is unmapped. Best effort: from a thread that is not the
// ring's issuer (SINGLE_ISSUER) the kernel refuses, and we fall through to teardown.
void UringEndpoint::State::drain_for_close() {
  if (recv_armed) {
    if (io_uring_sqe* e = io_uring_get_sqe(&ring)) {
      io_uring_prep_cancel64(e, user_data(kTagRecv, 0), 0);
      io_uring_sqe_set_data64(e, user_data(kTagCancel, 0));
      if (io_uring_submit(&ring) < 0) return;
    }
  }
  const uint64_t deadline = mono_ns() + std::min(opt.send_timeout_ns, kCloseDrainNs);
  for (;;) {  // bounded by the deadline
    reap();
    if (!recv_armed && slots[0].idle() && slots[1].idle()) return;
    if (mono_ns() >= deadline) return;
    io_uring_cqe* cqe = nullptr;
    __kernel_timespec ts{0, 10'000'000};
    const int rc = io_uring_wait_cqe_timeout(&ring, &cqe, &ts);
    if (rc < 0 && rc != -ETIME && rc != -EINTR) return;  // e.g. -EEXIST: not the issuer
  }
}

void UringEndpoint::State::close() {
  if (ring_ready) {
    drain_for_close();
    io_uring_queue_exit(&ring);
    ring_ready = false;
  }
  // Unmapped, not freed to the heap: a kernel write racing teardown faults instead of
  // landing in reused memory.
  if (mem != nullptr) munmap(mem, mem_bytes);
  if (buf_ring != nullptr) munmap(buf_ring, buf_ring_bytes);
  mem = nullptr;
  buf_ring = nullptr;
  if (fd >= 0) ::close(fd);
  if (event_fd >= 0) ::close(event_fd);
  fd = event_fd = -1;
  if (failed.ok()) failed = Status::Unavailable("uring endpoint closed");
}

// ---------------------------------------------------------------------------------------------
// Submission and completion

io_uring_sqe* UringEndpoint::State::sqe() {
  io_uring_sqe* e = io_uring_get_sqe(&ring);
  if (e == nullptr) {  // SQ full: everything queued so far goes to the kernel first
    io_uring_submit(&ring);
    e = io_uring_get_sqe(&ring);
  }
  SHOAL_ASSERT(e != nullptr, "%s", "io_uring SQ still full after submit");
  return e;
}

Status UringEndpoint::State::submit() {
  const int rc = io_uring_submit(&ring);
  if (rc < 0) return fail(errno_status("io_uring_submit", -rc));
  return Status::Ok();
}

Status UringEndpoint::State::arm_recv() {
  io_uring_sqe* e = sqe();
  io_uring_prep_recv_multishot(e, 0, nullptr, 0, 0);
  e->flags |= IOSQE_FIXED_FILE | IOSQE_BUFFER_SELECT;
  e->buf_group = kBufferGroup;
  io_uring_sqe_set_data64(e, user_data(kTagRecv, 0));
  recv_armed = true;
  return submit();
}

// The multishot receive ends when the kernel runs out of provided buffers (ENOBUFS); re-arm
// once some are back with the kernel.
void UringEndpoint::State::maybe_rearm() {
  if (recv_armed || peer_closed || !recv_error.ok() || !failed.ok()) return;
  if (q_tail - q_head == kRecvBuffers) return;  // every buffer is still ours
  arm_recv().ignore();                          // a failure is recorded in `failed`
}

void UringEndpoint::State::reap() {
  io_uring_cqe* batch[kPeekBatch];
  for (int round = 0; round < 4; ++round) {  // bounded: the CQ holds 2 * kRingEntries
    // Enters the kernel only when task work is pending (IORING_SQ_TASKRUN) or CQ overflowed.
    const unsigned n = io_uring_peek_batch_cqe(&ring, batch, kPeekBatch);
    for (unsigned i = 0; i < n; ++i) on_cqe(*batch[i]);
    io_uring_cq_advance(&ring, n);
    if (n < kPeekBatch) return;
  }
}

void UringEndpoint::State::on_cqe(const io_uring_cqe& cqe) {
  const uint64_t tag = cqe.user_data >> 8;
  if (tag == kTagRecv) {
    on_recv_cqe(cqe);
  } else if (tag == kTagSend) {
    on_send_cqe(cqe, static_cast<uint32_t>(cqe.user_data & 0xff));
  }
  // kTagCancel: nothing to do; the receive's own final CQE clears recv_armed.
}

void UringEndpoint::State::on_recv_cqe(const io_uring_cqe& cqe) {
  if ((cqe.flags & IORING_CQE_F_MORE) == 0) recv_armed = false;
  if (cqe.flags & IORING_CQE_F_BUFFER) {
    const auto bid = static_cast<uint16_t>(cqe.flags >> IORING_CQE_BUFFER_SHIFT);
    if (cqe.res > 0) {
      SHOAL_ASSERT(q_tail - q_head < kRecvBuffers, "%s", "more filled buffers than exist");
      chunks[q_tail++ % kRecvBuffers] = {bid, static_cast<uint32_t>(cqe.res)};
    } else {
      return_buffer(bid, 0);
      io_uring_buf_ring_advance(buf_ring, 1);
    }
  }
  if (cqe.res == 0) {
    peer_closed = true;
  } else if (cqe.res < 0) {
    const int err = -cqe.res;
    if (err == ECONNRESET || err == EPIPE || err == ENOTCONN) {
      peer_closed = true;  // like EOF: deliver what arrived, then Unavailable
    } else if (err != ENOBUFS && err != ECANCELED && err != EINTR) {
      recv_error = errno_status("uring recv", err);
    }
  }
}

void UringEndpoint::State::on_send_cqe(const io_uring_cqe& cqe, uint32_t i) {
  SHOAL_ASSERT(i < 2, "send completion for slot %u", i);
  SendSlot& s = slots[i];
  if (cqe.flags & IORING_CQE_F_NOTIF) {  // SEND_ZC: the kernel is done with the pages
    SHOAL_ASSERT(s.notifs_pending > 0, "%s", "unexpected SEND_ZC notification");
    --s.notifs_pending;
    ++zc_sends;
    if (static_cast<uint32_t>(cqe.res) & IORING_NOTIF_USAGE_ZC_COPIED) ++zc_copied;
    return;
  }
  if (cqe.flags & IORING_CQE_F_MORE) ++s.notifs_pending;
  if (cqe.res < 0) {
    s.inflight = false;
    s.len = s.sent = 0;
    fail(errno_status("uring send", -cqe.res)).ignore();
    return;
  }
  s.sent += static_cast<size_t>(cqe.res);
  if (s.sent < s.len) {
    submit_slot(i).ignore();  // short send: the rest goes next (a failure lands in `failed`)
    return;
  }
  s.inflight = false;
  s.len = s.sent = 0;
}

// ---------------------------------------------------------------------------------------------
// Sending

Status UringEndpoint::State::submit_slot(uint32_t i) {
  SendSlot& s = slots[i];
  io_uring_sqe* e = sqe();
  uint8_t* from = s.base + s.sent;
  const size_t left = s.len - s.sent;
  if (uopt.zero_copy_send && left >= uopt.zero_copy_min_bytes) {
    if (send_registered) {
      io_uring_prep_send_zc_fixed(e, 0, from, left, MSG_NOSIGNAL, IORING_SEND_ZC_REPORT_USAGE, i);
    } else {
      io_uring_prep_send_zc(e, 0, from, left, MSG_NOSIGNAL, IORING_SEND_ZC_REPORT_USAGE);
    }
  } else {
    io_uring_prep_send(e, 0, from, left, MSG_NOSIGNAL);
  }
  e->flags |= IOSQE_FIXED_FILE;
  io_uring_sqe_set_data64(e, user_data(kTagSend, i));
  s.inflight = true;
  return submit();
}

// Submits the active slot and returns once the socket has taken every byte (usually inline,
// during the submit: then no further system call). Waiting keeps one send in flight per
// socket (two concurrent sends on a stream could interleave after a short send) and gives
// flush() the tcp meaning: afterwards the bytes are the kernel's, whether or not this thread
// enters the ring again (with DEFER_TASKRUN a parked send would only progress when it does).
// A SEND_ZC slot may still await its notification: the other slot is used next.
Status UringEndpoint::State::flush_active() {
  const uint32_t i = active;
  SHOAL_TRY(submit_slot(i));
  active ^= 1;
  reap();
  if (slots[i].inflight) [[unlikely]]
    return wait_slot_idle(i, opt.send_timeout_ns, /*sent_is_enough=*/true);
  return failed;
}

Status UringEndpoint::State::wait_slot_idle(uint32_t i, uint64_t timeout_ns, bool sent_is_enough) {
  const uint64_t start = mono_ns();
  for (;;) {  // bounded by timeout_ns
    reap();
    if (!failed.ok()) return failed;
    if (slots[i].idle() || (sent_is_enough && !slots[i].inflight)) return Status::Ok();
    if (mono_ns() - start >= timeout_ns) {
      return fail(Status::Timeout("uring send: socket buffer full for send_timeout_ns"));
    }
    io_uring_cqe* cqe = nullptr;
    __kernel_timespec ts{0, 10'000'000};
    const int rc = io_uring_wait_cqe_timeout(&ring, &cqe, &ts);
    if (rc < 0 && rc != -ETIME && rc != -EINTR) return fail(errno_status("io_uring wait", -rc));
  }
}

// Makes the active slot idle with room for `bytes` more.
Status UringEndpoint::State::make_room(size_t bytes) {
  SHOAL_ASSERT(bytes <= slot_bytes, "frame of %zu bytes above the send slot", bytes);
  if (slots[active].len + bytes > slot_bytes) SHOAL_TRY(flush_active());
  if (!slots[active].idle()) [[unlikely]]
    SHOAL_TRY(wait_slot_idle(active, opt.send_timeout_ns));
  return Status::Ok();
}

Status UringEndpoint::State::append_frame(uint32_t flags, uint32_t imm, uint64_t epoch,
                                          GatherCursor& cursor, size_t payload_bytes) {
  SHOAL_ASSERT(!reserved, "%s", "a send while a reserve() is outstanding");
  const size_t bytes = frame_bytes(payload_bytes);
  SHOAL_TRY(make_room(bytes));
  SendSlot& s = slots[active];
  cursor.copy_to(s.base + s.len + kFrameHeaderBytes, payload_bytes);
  seal_frame(s.base + s.len, tx_pos, flags, imm, epoch, static_cast<uint32_t>(payload_bytes));
  sent_copied += payload_bytes;
  s.len += bytes;
  tx_pos += bytes;
  return Status::Ok();
}

Status UringEndpoint::State::send_fragments(uint32_t session, GatherCursor& cursor, size_t bytes) {
  size_t offset = 0;
  do {  // bounded: max_message_bytes / max_payload iterations
    const size_t n = std::min<size_t>(max_payload, bytes - offset);
    const bool more = offset + n < bytes;
    SHOAL_TRY(append_frame(more ? kFlagMore : 0, session, 0, cursor, n));
    offset += n;
  } while (offset < bytes);
  return Status::Ok();
}

Status UringEndpoint::State::flush() {
  SHOAL_TRY(usable());
  // A reserved frame pins the slot (the caller holds a pointer into it) until committed.
  if (slots[active].len == 0 || reserved) return Status::Ok();
  return flush_active();
}

// ---------------------------------------------------------------------------------------------
// Receiving

Result<Frame> UringEndpoint::State::end_of_data() {
  if (!recv_error.ok()) return recv_error;
  if (!peer_closed) return Frame{};
  if (staging_len == 0) return Status::Unavailable("uring peer closed the connection");
  return Status::Corruption(
      fmt::format("uring: truncated frame at stream position {}: peer closed after {} of its bytes",
                  rx_pos, staging_len));
}

// Completes the frame that spans buffers in the staging area: copies exactly the bytes it
// still needs (header first, then the rest), so staging never holds more than one frame.
Result<Frame> UringEndpoint::State::fill_staging() {
  for (uint32_t round = 0; round < 2 * kRecvBuffers + 4; ++round) {  // each round: +1 buffer
    auto f = decode_frame({staging.get(), staging_len}, rx_pos, max_payload);
    if (!f.ok()) return f.status();
    if (f->frame_bytes != 0) {
      staging_len = 0;
      rx_pos += f->frame_bytes;
      return f;
    }
    size_t want = kFrameHeaderBytes - std::min(staging_len, kFrameHeaderBytes);
    if (want == 0) {
      uint32_t length_flags;
      std::memcpy(&length_flags, staging.get(), 4);
      // decode_frame rejected lengths above max_payload, so the frame fits in staging.
      want = frame_bytes(length_flags & kLengthMask) - staging_len;
    }
    if (q_cursor == q_tail) return Frame{};  // the rest has not arrived yet
    const Chunk& c = chunks[q_cursor % kRecvBuffers];
    const size_t n = std::min<size_t>(want, c.len - cur_off);
    std::memcpy(staging.get() + staging_len, recv_base + size_t{c.bid} * buf_bytes + cur_off, n);
    staging_len += n;
    cur_off += static_cast<uint32_t>(n);
    if (cur_off == c.len) advance_chunk();
  }
  SHOAL_ASSERT(false, "%s", "staging did not converge");
  return Frame{};
}

Result<Frame> UringEndpoint::State::decode_next() {
  bool reaped = false;
  for (uint32_t round = 0; round < 4 * kRecvBuffers; ++round) {  // fenced drops, refills
    Result<Frame> f = Frame{};
    if (staging_len != 0) {
      if (staging_pinned) return Frame{};  // a completion still points into staging
      f = fill_staging();
      if (!f.ok()) return f;
      if (f->frame_bytes == 0) {
        if (reaped) return end_of_data();
        reap();
        reaped = true;
        continue;
      }
    } else if (q_cursor == q_tail) {
      if (reaped) return end_of_data();
      reap();
      reaped = true;
      continue;
    } else {
      const Chunk& c = chunks[q_cursor % kRecvBuffers];
      const uint8_t* at = recv_base + size_t{c.bid} * buf_bytes + cur_off;
      f = decode_frame({at, c.len - cur_off}, rx_pos, max_payload);
      if (!f.ok()) return f;
      if (f->frame_bytes == 0) {  // continues in the next buffer: stage it
        if (staging_pinned) return Frame{};
        staging_len = c.len - cur_off;
        std::memcpy(staging.get(), at, staging_len);
        advance_chunk();
        continue;
      }
      cur_off += f->frame_bytes;
      rx_pos += f->frame_bytes;
      if (cur_off == c.len) advance_chunk();
    }
    if ((f->flags & kFlagWrite) && f->epoch < fence) {
      ++fenced_drops;  // the writer had not yet seen our fence
      continue;
    }
    if (f->payload == staging.get() + kFrameHeaderBytes) staging_pinned = true;
    return f;
  }
  return Frame{};
}

void UringEndpoint::State::release_consumed() {
  staging_pinned = false;
  uint32_t n = 0;
  for (; q_head != q_cursor; ++q_head, ++n) return_buffer(chunks[q_head % kRecvBuffers].bid, n);
  if (n != 0) io_uring_buf_ring_advance(buf_ring, static_cast<int>(n));
  maybe_rearm();
}

// ---------------------------------------------------------------------------------------------
// UringEndpoint: construction

bool UringEndpoint::supported(std::string* why_not) {
  io_uring ring;
  const int rc = io_uring_queue_init(4, &ring, 0);
  if (rc != 0) {
    if (why_not) *why_not = fmt::format("io_uring_queue_init: {}", std::strerror(-rc));
    return false;
  }
  io_uring_probe* probe = io_uring_get_probe_ring(&ring);
  // SEND_ZC (6.0) arrived with multishot receive; provided buffer rings came in 5.19.
  const bool ok = probe != nullptr && io_uring_opcode_supported(probe, IORING_OP_SEND_ZC);
  if (probe != nullptr) io_uring_free_probe(probe);
  io_uring_queue_exit(&ring);
  if (!ok && why_not) *why_not = "kernel lacks IORING_OP_SEND_ZC / multishot receive (< 6.0)";
  return ok;
}

UringEndpoint::UringEndpoint() : s_(std::make_unique<State>()) {
  s_->failed = Status::Unavailable("uring endpoint not connected");
}
UringEndpoint::UringEndpoint(std::unique_ptr<State> state) : s_(std::move(state)) {}
UringEndpoint::UringEndpoint(UringEndpoint&&) noexcept = default;
UringEndpoint& UringEndpoint::operator=(UringEndpoint&&) noexcept = default;
UringEndpoint::~UringEndpoint() = default;

Result<UringEndpoint> UringEndpoint::adopt(int fd, const EndpointOptions& options,
                                           const UringOptions& uring) {
  auto s = std::make_unique<State>();
  s->fd = fd;  // owned from here on, also on the error paths below
  if (options.tcp_buffer_bytes < 64 * 1024 || options.tcp_buffer_bytes > (size_t{1} << 30)) {
    return Status::InvalidArgument("tcp_buffer_bytes must be in [64 KiB, 1 GiB]");
  }
  if (options.max_message_bytes > kMaxMessageBytesLimit) {
    return Status::InvalidArgument("max_message_bytes above 1 GiB");
  }
  const int one = 1;
  // io_uring parks a request on the socket's wait queue when it would block; O_NONBLOCK would
  // instead make every such request fail with EAGAIN.
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0 ||
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
    return errno_status("uring setsockopt/fcntl", errno);
  }
  s->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s->event_fd < 0) return errno_status("eventfd", errno);
  s->opt = options;
  s->uopt = uring;
  s->max_payload =
      static_cast<uint32_t>(options.tcp_buffer_bytes / 4 - kFrameHeaderBytes - kFrameCanaryBytes);
  s->assembler = MessageAssembler(options.max_message_bytes);
  return UringEndpoint(std::move(s));
}

Result<UringEndpoint> UringEndpoint::connect(const std::string& host, uint16_t port,
                                             const EndpointOptions& options,
                                             const UringOptions& uring, uint64_t timeout_ms) {
  auto addr = parse_ipv4(host, port);
  if (!addr.ok()) return addr.status();
  auto fd = dial_tcp_proven(*addr, timeout_ms, "uring", fmt::format("uring {}:{}", host, port));
  if (!fd.ok()) return fd.status();
  return adopt(*fd, options, uring);
}

Result<std::pair<UringEndpoint, UringEndpoint>> UringEndpoint::pair(const EndpointOptions& options,
                                                                    const UringOptions& uring) {
  const int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (l < 0) return errno_status("socket", errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(l, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(l, 1) != 0 ||
      getsockname(l, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    ::close(l);
    return errno_status("uring loopback listen", err);
  }
  auto b = connect("127.0.0.1", ntohs(addr.sin_port), options, uring);
  const int a_fd = b.ok() ? accept4(l, nullptr, nullptr, SOCK_CLOEXEC) : -1;
  const int err = errno;
  ::close(l);
  if (!b.ok()) return b.status();
  if (a_fd < 0) return errno_status("uring accept", err);
  auto a = adopt(a_fd, options, uring);
  if (!a.ok()) return a.status();
  return std::make_pair(std::move(*a), std::move(*b));
}

// ---------------------------------------------------------------------------------------------
// UringEndpoint: data path

Status UringEndpoint::send(uint32_t session, std::span<const uint8_t> bytes) {
  State& s = *s_;
  SHOAL_TRY(s.usable());
  if (bytes.size() > s.opt.max_message_bytes) {
    return Status::InvalidArgument(fmt::format("message of {} bytes above max_message_bytes {}",
                                               bytes.size(), s.opt.max_message_bytes));
  }
  const std::span<const uint8_t> one[1] = {bytes};
  GatherCursor cursor(one);
  return s.send_fragments(session, cursor, bytes.size());
}

Status UringEndpoint::send_gather(uint32_t session, GatherList pieces) {
  State& s = *s_;
  SHOAL_TRY(s.usable());
  auto bytes = gather_message_bytes(pieces, s.opt.max_message_bytes);
  if (!bytes.ok()) return bytes.status();
  GatherCursor cursor(pieces);
  return s.send_fragments(session, cursor, *bytes);
}

uint64_t UringEndpoint::sent_copied_bytes() const {
  return s_ ? s_->sent_copied : 0;
}

Status UringEndpoint::write_with_imm(uint64_t epoch, uint32_t imm, std::span<const uint8_t> bytes) {
  State& s = *s_;
  SHOAL_TRY(s.usable());
  if (bytes.size() > s.max_payload) {
    return Status::InvalidArgument(
        fmt::format("one-sided write of {} bytes above the limit {}", bytes.size(), s.max_payload));
  }
  if (epoch < s.peer_fence) {
    return Status::Aborted(fmt::format(
        "write epoch {} below the peer's fence {}: stale writer fenced", epoch, s.peer_fence));
  }
  return s.append_frame(kFlagWrite, imm, epoch, bytes);
}

Result<std::span<uint8_t>> UringEndpoint::reserve(size_t bytes) {
  State& s = *s_;
  SHOAL_TRY(s.usable());
  SHOAL_ASSERT(!s.reserved, "%s", "reserve() with a reservation outstanding");
  if (bytes > s.max_payload) {
    return Status::InvalidArgument(
        fmt::format("reserve of {} bytes above max_write_bytes {}", bytes, s.max_payload));
  }
  SHOAL_TRY(s.make_room(frame_bytes(bytes)));
  s.reserved = true;
  SendSlot& slot = s.slots[s.active];
  return std::span<uint8_t>(slot.base + slot.len + kFrameHeaderBytes, bytes);
}

Status UringEndpoint::commit_send(uint32_t session, size_t bytes) {
  State& s = *s_;
  SHOAL_ASSERT(s.reserved, "%s", "commit without reserve()");
  s.reserved = false;
  SendSlot& slot = s.slots[s.active];
  seal_frame(slot.base + slot.len, s.tx_pos, 0, session, 0, static_cast<uint32_t>(bytes));
  slot.len += frame_bytes(bytes);
  s.tx_pos += frame_bytes(bytes);
  return s.failed;
}

Status UringEndpoint::commit_write(uint64_t epoch, uint32_t imm, size_t bytes) {
  State& s = *s_;
  SHOAL_ASSERT(s.reserved, "%s", "commit without reserve()");
  if (epoch < s.peer_fence) {
    cancel();
    return Status::Aborted(fmt::format(
        "write epoch {} below the peer's fence {}: stale writer fenced", epoch, s.peer_fence));
  }
  s.reserved = false;
  SendSlot& slot = s.slots[s.active];
  seal_frame(slot.base + slot.len, s.tx_pos, kFlagWrite, imm, epoch, static_cast<uint32_t>(bytes));
  slot.len += frame_bytes(bytes);
  s.tx_pos += frame_bytes(bytes);
  return s.failed;
}

void UringEndpoint::cancel() {
  s_->reserved = false;
}

Status UringEndpoint::set_fence_epoch(uint64_t epoch) {
  State& s = *s_;
  SHOAL_TRY(s.usable());
  if (epoch < s.fence) return Status::InvalidArgument("fence epochs only move forward");
  s.fence = epoch;
  SHOAL_TRY(s.append_frame(kFlagControl, kControlFence, epoch, {}));
  return s.flush();
}

Status UringEndpoint::flush() {
  return s_->flush();
}

Result<size_t> UringEndpoint::poll(Completion* out, size_t max) {
  State& s = *s_;
  if (Status st = s.usable(); !st.ok()) [[unlikely]]
    return st;
  SHOAL_ASSERT(!s.batch_outstanding, "%s", "poll() before release() of the previous batch");
  SHOAL_TRY(s.flush());
  auto n = poll_frames(s, s.assembler, out, max);
  if (!n.ok()) return s.fail(n.status());  // the batch's good frames came first
  s.batch_outstanding = *n > 0;
  return n;
}

void UringEndpoint::release() {
  State& s = *s_;
  s.assembler.release();
  if (s.ring_ready) s.release_consumed();
  s.batch_outstanding = false;
}

Status UringEndpoint::wait(uint64_t timeout_ns) {
  State& s = *s_;
  SHOAL_TRY(s.flush());
  s.maybe_rearm();
  const uint64_t start = mono_ns();
  const uint64_t spin_end = start + std::min(s.opt.spin_ns, timeout_ns);
  // Spin on the CQ and the TASKRUN flag: with DEFER_TASKRUN this touches only shared memory
  // until the kernel says there is work, so a busy wait costs no system calls.
  for (uint32_t i = 0;; ++i) {  // bounded by spin_ns
    s.reap();
    if (!s.failed.ok()) return s.failed;
    if (s.ready()) return Status::Ok();
    if ((i & 15) == 15 && mono_ns() >= spin_end) break;
    cpu_relax();
  }
  const uint64_t deadline = start + timeout_ns;
  for (;;) {  // block in io_uring_enter; bounded by the deadline
    s.reap();
    if (!s.failed.ok()) return s.failed;
    if (s.ready()) return Status::Ok();
    const uint64_t now = mono_ns();
    if (now >= deadline) return Status::Timeout("");
    const uint64_t slice_ns = std::min<uint64_t>(deadline - now, 100'000'000);
    __kernel_timespec ts{0, static_cast<long long>(slice_ns)};
    io_uring_cqe* cqe = nullptr;
    const int rc = io_uring_wait_cqe_timeout(&s.ring, &cqe, &ts);
    if (rc < 0 && rc != -ETIME && rc != -EINTR) return s.fail(errno_status("io_uring wait", -rc));
  }
}

Status UringEndpoint::inject_raw_for_test(std::span<const uint8_t> bytes) {
  State& s = *s_;
  SHOAL_TRY(s.flush());
  if (bytes.size() > s.slot_bytes) return Status::InvalidArgument("raw bytes above a send slot");
  SHOAL_TRY(s.make_room(bytes.size()));
  SendSlot& slot = s.slots[s.active];
  std::memcpy(slot.base + slot.len, bytes.data(), bytes.size());
  slot.len += bytes.size();
  return s.flush();  // at once: the next frame must start 8-byte aligned in a fresh slot
}

// ---------------------------------------------------------------------------------------------
// UringEndpoint: event loop integration and accessors

int UringEndpoint::wait_fd() const {
  return s_->event_fd;
}
int UringEndpoint::liveness_fd() const {
  return s_->fd;
}

bool UringEndpoint::prepare_to_block() {
  State& s = *s_;
  if (!s.flush().ok()) return false;  // let poll() report it
  if (!s.eventfd_registered) {
    // The ring signals it when completion work arrives (with DEFER_TASKRUN: when work is
    // queued for us, before it runs), so a loop blocked in poll(2) wakes for it.
    if (int rc = io_uring_register_eventfd(&s.ring, s.event_fd); rc != 0) {
      s.fail(errno_status("io_uring register eventfd", -rc)).ignore();
      return false;
    }
    s.eventfd_registered = true;
  }
  uint64_t drained;
  // Drain first, then look: a completion after this point signals the eventfd again. One
  // read takes the whole counter.
  if (read(s.event_fd, &drained, sizeof(drained)) < 0 && errno != EAGAIN) return false;
  s.reap();
  return s.failed.ok() && !s.ready();
}

size_t UringEndpoint::max_message_bytes() const {
  return s_->opt.max_message_bytes;
}
size_t UringEndpoint::max_write_bytes() const {
  return s_->max_payload;
}
uint64_t UringEndpoint::fenced_drops() const {
  return s_->fenced_drops;
}
UringMode UringEndpoint::setup_mode() const {
  return s_->mode;
}
uint64_t UringEndpoint::zero_copy_sends() const {
  return s_->zc_sends;
}
uint64_t UringEndpoint::zero_copy_copied() const {
  return s_->zc_copied;
}
void UringEndpoint::close() {
  // A moved-from endpoint closes nothing, as tcp's and shm's: replication's leader closes
  // every connection it still lists, some of them moved into a peer link (it crashed here).
  if (s_) s_->close();
}

}  // namespace shoal::net
