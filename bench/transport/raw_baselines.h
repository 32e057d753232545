// Raw baselines for `shoal bench transport`: the same ping-pong as the RPC runs with nothing of
// Shoal's in the way, measured in the same run so a transport is compared with the floor the
// machine offers at that moment.
//
//   raw_shm_pingpong:  a bare single-producer/single-consumer ring per direction in anonymous
//                      shared memory; a message is copied in, published with one release store
//                      per 64 KiB chunk, copied out on the other side. Both sides busy-poll.
//   raw_tcp_pingpong:  a bare loopback TCP connection (TCP_NODELAY), send() and busy-polled
//                      recv(MSG_DONTWAIT); the peer echoes every message.
//
// Both fork the echoing peer onto CPU 1 (two_process.h) and time, on CPU 0, `iterations`
// round trips of `message_bytes` each way. Errors: IOError (fork, socket, a peer that fails),
// Timeout (no progress for kRawTimeoutNs: the peer died).
#pragma once

#include <cstddef>

#include "bench/transport/latency.h"
#include "shoal/status.h"

namespace shoal::bench::transport {

inline constexpr uint64_t kRawTimeoutNs = 10'000'000'000;
inline constexpr size_t kRawMaxMessageBytes = size_t{8} << 20;

// REQUIRES: 0 < message_bytes <= kRawMaxMessageBytes; iterations >= 10.
[[nodiscard]] Result<LatencyUs> raw_shm_pingpong(size_t message_bytes, int iterations);
[[nodiscard]] Result<LatencyUs> raw_tcp_pingpong(size_t message_bytes, int iterations);

}  // namespace shoal::bench::transport
