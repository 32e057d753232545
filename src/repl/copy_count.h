// Bytes copied on the replication path, counted per hop (issue 16: the data plane promises
// that a log entry's bytes are written once and the same bytes go on the wire, into the
// follower's log and onto its disk; this is how far the code is from that, measured).
//
// Every site that copies a log entry's bytes (or a Paxos message carrying them) adds to its
// hop's counter; the denominator is entry bytes: proposed (the leader) and received (a
// follower, accepted or learned). `bench --replicas R` reports, from the leader process's
// counts and every follower's (FollowerReport::copies), copies per replicated byte:
//   user   = (leader's user-space copies + followers' user-space copies) / followers' entry bytes
//   kernel = the same for the copies the kernel makes (socket send and receive, WAL write)
// A replicated byte is one entry byte arriving at one follower, so a leader's per-entry copy
// (into its acceptor store, into the message it broadcasts: neither is made any more when the
// leader proposes its appender's sealed entries over gathering links) counts 1/F per
// replicated byte with F followers, and a per-follower copy (the send) counts 1.
//
// Threads: process-wide relaxed atomics; any thread adds, any thread reads (a snapshot of
// counters read one by one: close enough for a report, not a consistent cut).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "shoal/status.h"

namespace shoal::repl {

enum class CopyHop : uint8_t {
  kAcceptorStore,  // user: an entry into an acceptor's store (EntryBuffer), leader or follower
  kMessageBuild,   // user: an entry into an outgoing Paxos message (add_entry)
  kRingWrite,      // user: a message into the peer's shared-memory receive ring
  kSendBuffer,     // user: a message into a transport's own send buffer before the kernel or
                   // the provider takes it (tcp's frames below 16 KiB, fabric's registered
                   // mirror of the peer's ring)
  kShaperHold,     // user: a received message into the WAN shaper's hold queue
  kReceiveCopy,    // user: received bytes a transport moved or reassembled on the way in
                   // (fragments of a large message, tcp's receive-ring growth)
  kSocketSend,     // kernel: a message into a TCP socket (or fabric's tcp provider)
  kSocketReceive,  // kernel: a message out of a TCP socket into the receive buffer
  kWalWrite,       // kernel: an entry written to the acceptor's WAL (page cache)
  kCount,
};
inline constexpr size_t kCopyHops = static_cast<size_t>(CopyHop::kCount);

// The report's name of a hop ("acceptor_store", ...) and whether the kernel makes it.
std::string_view copy_hop_name(CopyHop hop);
bool copy_hop_in_kernel(CopyHop hop);

struct CopyCounts {
  std::array<uint64_t, kCopyHops> bytes{};
  uint64_t entry_bytes_proposed = 0;  // leader: entries it proposed (new slots)
  uint64_t entry_bytes_received = 0;  // follower: entries it accepted or learned (new bytes)

  CopyCounts& operator+=(const CopyCounts& o);
  CopyCounts operator-(const CopyCounts& o) const;  // a later snapshot minus an earlier one
  uint64_t user_bytes() const;
  uint64_t kernel_bytes() const;
};

void count_copy(CopyHop hop, size_t bytes);
void count_entry_proposed(size_t bytes);
void count_entry_received(size_t bytes);
// This process's counts so far.
CopyCounts copy_counts();

// Copies per replicated byte over a run: the leader process's counts and the sum of its
// followers' (each a difference over the run). 0 when no entry byte reached a follower.
struct CopiesPerByte {
  double user = 0, kernel = 0;
  std::array<double, kCopyHops> per_hop{};
};
CopiesPerByte copies_per_byte(const CopyCounts& leader, const CopyCounts& followers);

}  // namespace shoal::repl
