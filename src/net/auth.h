// Cluster authentication: every TCP connection between Shoal processes (shard servers' data
// and control connections, replication, the bench's and `cluster` commands' control calls)
// proves the cluster secret before its first frame, when the process has one.
//
// The proof is mutual and never puts the secret on the wire (HMAC-SHA256 over fresh nonces):
//   acceptor -> dialer   "SHOALAU1" | nonce_a (32 B)
//   dialer   -> acceptor "SHOALAU1" | nonce_d (32 B) | HMAC(secret, "dialer" | nonce_a)
//   acceptor -> dialer   1 (accepted) | HMAC(secret, "acceptor" | nonce_d)   or   0, then close
// Both halves run on the blocking socket, before the endpoint is built, and are bounded by
// kAuthTimeoutMs (a dialer that sends nothing holds an acceptor at most that long).
// It authenticates; it does not encrypt: run a cluster across untrusted networks inside a VPN
// or an encrypted overlay.
//
// The secret is the process's ([cluster] secret_file, set once at start-up by whoever loads the
// config, before any connection): set_cluster_secret() is called before threads dial or
// accept; cluster_secret() is then read-only and any thread may read it. Without a secret,
// neither side sends anything (a cluster without secret_file behaves as before).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "shoal/status.h"

namespace shoal::net {

inline constexpr uint64_t kAuthTimeoutMs = 2000;
inline constexpr size_t kAuthNonceBytes = 32;
inline constexpr size_t kAuthMacBytes = 32;

// REQUIRES: called before any thread dials or accepts (start-up). Empty: no authentication.
void set_cluster_secret(std::string secret);
const std::string& cluster_secret();

// The dialer's half on a connected blocking socket. Ok: the acceptor proved the secret and
// accepted ours. InvalidArgument (our secret refused, or the acceptor's proof wrong), Timeout
// (no challenge within challenge_wait_ms: the acceptor has no secret, or has not begun to
// accept: a server accepts only once it serves, so dialers wait for the challenge as long
// as they would wait to connect), Unavailable (closed) or IOError otherwise; `peer` names it.
[[nodiscard]] Status prove_to_acceptor(int fd, std::string_view secret, std::string_view peer,
                                       uint64_t challenge_wait_ms = kAuthTimeoutMs);
// The acceptor's half. Ok: the dialer proved the secret. Otherwise the dialer was told no (when
// it got that far) and the caller closes the socket.
[[nodiscard]] Status verify_dialer(int fd, std::string_view secret);

// True when `bytes` begin with an acceptor's challenge: what a process without a secret reads
// first from a peer that has one. Its transport reports that instead of a malformed frame.
[[nodiscard]] bool starts_with_auth_challenge(std::span<const uint8_t> bytes);

}  // namespace shoal::net
