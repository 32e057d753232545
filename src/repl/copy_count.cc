#include "src/repl/copy_count.h"

#include <atomic>

#include "src/base/assert.h"

namespace shoal::repl {
namespace {

struct Counters {
  std::array<std::atomic<uint64_t>, kCopyHops> bytes{};
  std::atomic<uint64_t> proposed{0};
  std::atomic<uint64_t> received{0};
};

Counters& counters() {
  static Counters c;
  return c;
}

}  // namespace

std::string_view copy_hop_name(CopyHop hop) {
  switch (hop) {
    case CopyHop::kAcceptorStore:
      return "acceptor_store";
    case CopyHop::kMessageBuild:
      return "message_build";
    case CopyHop::kRingWrite:
      return "ring_write";
    case CopyHop::kSendBuffer:
      return "send_buffer";
    case CopyHop::kShaperHold:
      return "shaper_hold";
    case CopyHop::kReceiveCopy:
      return "receive_copy";
    case CopyHop::kSocketSend:
      return "socket_send";
    case CopyHop::kSocketReceive:
      return "socket_receive";
    case CopyHop::kWalWrite:
      return "wal_write";
    case CopyHop::kCount:
      break;
  }
  SHOAL_ASSERT(false, "copy hop %u", static_cast<unsigned>(hop));
}

bool copy_hop_in_kernel(CopyHop hop) {
  return hop == CopyHop::kSocketSend || hop == CopyHop::kSocketReceive || hop == CopyHop::kWalWrite;
}

void count_copy(CopyHop hop, size_t bytes) {
  counters().bytes[static_cast<size_t>(hop)].fetch_add(bytes, std::memory_order_relaxed);
}

void count_entry_proposed(size_t bytes) {
  counters().proposed.fetch_add(bytes, std::memory_order_relaxed);
}

void count_entry_received(size_t bytes) {
  counters().received.fetch_add(bytes, std::memory_order_relaxed);
}

CopyCounts copy_counts() {
  CopyCounts out;
  const Counters& c = counters();
  for (size_t i = 0; i < kCopyHops; ++i) out.bytes[i] = c.bytes[i].load(std::memory_order_relaxed);
  out.entry_bytes_proposed = c.proposed.load(std::memory_order_relaxed);
  out.entry_bytes_received = c.received.load(std::memory_order_relaxed);
  return out;
}

CopyCounts& CopyCounts::operator+=(const CopyCounts& o) {
  for (size_t i = 0; i < kCopyHops; ++i) bytes[i] += o.bytes[i];
  entry_bytes_proposed += o.entry_bytes_proposed;
  entry_bytes_received += o.entry_bytes_received;
  return *this;
}

CopyCounts CopyCounts::operator-(const CopyCounts& o) const {
  // Counters only grow; a snapshot older than `o` would wrap, which the caller's order rules out.
  CopyCounts d;
  for (size_t i = 0; i < kCopyHops; ++i) d.bytes[i] = bytes[i] - o.bytes[i];
  d.entry_bytes_proposed = entry_bytes_proposed - o.entry_bytes_proposed;
  d.entry_bytes_received = entry_bytes_received - o.entry_bytes_received;
  return d;
}

uint64_t CopyCounts::user_bytes() const {
  uint64_t n = 0;
  for (size_t i = 0; i < kCopyHops; ++i) {
    if (!copy_hop_in_kernel(static_cast<CopyHop>(i))) n += bytes[i];
  }
  return n;
}

uint64_t CopyCounts::kernel_bytes() const {
  uint64_t n = 0;
  for (size_t i = 0; i < kCopyHops; ++i) {
    if (copy_hop_in_kernel(static_cast<CopyHop>(i))) n += bytes[i];
  }
  return n;
}

CopiesPerByte copies_per_byte(const CopyCounts& leader, const CopyCounts& followers) {
  CopiesPerByte out;
  const uint64_t replicated = followers.entry_bytes_received;
  if (replicated == 0) return out;
  CopyCounts all = leader;
  all += followers;
  const double denominator = static_cast<double>(replicated);
  out.user = static_cast<double>(all.user_bytes()) / denominator;
  out.kernel = static_cast<double>(all.kernel_bytes()) / denominator;
  for (size_t i = 0; i < kCopyHops; ++i) {
    out.per_hop[i] = static_cast<double>(all.bytes[i]) / denominator;
  }
  return out;
}

}  // namespace shoal::repl
