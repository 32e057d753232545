// Socket set-up shared by the stream transports (tcp, uring): address parsing, dialing with
// retries, and errno → Status with the transport's name in it. Cold paths only.
#pragma once

#include <netinet/in.h>

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

}  // namespace shoal::net
