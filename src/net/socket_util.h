// Socket set-up shared by the transports (tcp, uring; the rendezvous sockets of shm and
// fabric): address parsing, dialing with retries, abstract unix names, the peer-uid check, and
// errno → Status with the transport's name in it. Cold paths only.
#pragma once

#include <netinet/in.h>
#include <sys/un.h>

#include <cstdint>
#include <string>

#include "shoal/status.h"

namespace shoal::net {

// Unavailable for the errors that mean the peer went away (EPIPE, ECONNRESET, ENOTCONN,
// ECONNABORTED), IOError otherwise; `transport` names who saw it ("tcp", "uring").
Status socket_errno_status(const char* transport, const char* what, int err);

// An IPv4 address; InvalidArgument naming the host when it is not one.
Result<sockaddr_in> parse_ipv4(const std::string& host, uint16_t port);

// Connects a blocking socket, retrying refusals (the listener may be starting or restarting)
// until timeout_ms has passed. Returns the fd.
Result<int> dial_tcp(const sockaddr_in& addr, uint64_t timeout_ms, const char* transport);
// dial_tcp, then, when the process has a cluster secret, the dialer's half of the proof
// (net/auth.h; `peer` names the acceptor in its errors). The socket is closed on failure.
Result<int> dial_tcp_proven(const sockaddr_in& addr, uint64_t timeout_ms, const char* transport,
                            const std::string& peer);

// The address of `name` in the abstract unix socket namespace (no file; gone with its last
// socket), truncated to what sun_path holds.
sockaddr_un abstract_unix_address(const std::string& name, socklen_t* len);

// PermissionDenied unless the process at the other end of unix socket `sock` runs as our
// effective uid: the local transports connect processes of one user only.
Status check_peer_uid(int sock, const char* transport, const char* side);

}  // namespace shoal::net
