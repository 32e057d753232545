#include "src/net/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "src/base/assert.h"

namespace shoal::net {
namespace {

constexpr std::string_view kMagic = "SHOALAU1";
constexpr uint8_t kAccepted = 1;
constexpr uint8_t kRefused = 0;

using Nonce = std::array<uint8_t, kAuthNonceBytes>;
using Mac = std::array<uint8_t, kAuthMacBytes>;

std::string g_secret;

uint64_t mono_ms() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// Waits for `events` on fd until deadline_ms. Timeout when it passes.
Status wait_for(int fd, short events, uint64_t deadline_ms) {
  for (;;) {
    const uint64_t now = mono_ms();
    if (now >= deadline_ms) return Status::Timeout("authentication: no answer in time");
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(deadline_ms - now));
    if (n > 0) return Status::Ok();
    if (n < 0 && errno != EINTR) return Status::IOError(std::string("poll: ") + strerror(errno));
  }
}

Status write_all(int fd, const uint8_t* data, size_t n, uint64_t deadline_ms) {
  while (n > 0) {
    SHOAL_TRY(wait_for(fd, POLLOUT, deadline_ms));
    const ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (w <= 0) return Status::Unavailable("authentication: the connection closed");
    data += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status read_exact(int fd, uint8_t* data, size_t n, uint64_t deadline_ms) {
  while (n > 0) {
    SHOAL_TRY(wait_for(fd, POLLIN, deadline_ms));
    const ssize_t r = ::recv(fd, data, n, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (r <= 0) return Status::Unavailable("authentication: the connection closed");
    data += r;
    n -= static_cast<size_t>(r);
  }
  return Status::Ok();
}

Nonce fresh_nonce() {
  Nonce n{};
  SHOAL_ASSERT(getrandom(n.data(), n.size(), 0) == static_cast<ssize_t>(n.size()), "%s",
               "getrandom failed");
  return n;
}

// HMAC-SHA256(secret, role | nonce): the role keeps one side's proof from being replayed as
// the other's.
Mac proof(std::string_view secret, std::string_view role, const Nonce& nonce) {
  uint8_t msg[16 + kAuthNonceBytes];
  SHOAL_ASSERT(role.size() <= 16, "%s", "auth role too long");
  std::memcpy(msg, role.data(), role.size());
  std::memcpy(msg + role.size(), nonce.data(), nonce.size());
  Mac mac{};
  unsigned int len = 0;
  SHOAL_ASSERT(HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), msg,
                    role.size() + nonce.size(), mac.data(), &len) != nullptr &&
                   len == mac.size(),
               "%s", "HMAC-SHA256 failed");
  return mac;
}

bool same(const Mac& a, const uint8_t* b) {
  return CRYPTO_memcmp(a.data(), b, a.size()) == 0;
}

}  // namespace

void set_cluster_secret(std::string secret) {
  g_secret = std::move(secret);
}
const std::string& cluster_secret() {
  return g_secret;
}

Status prove_to_acceptor(int fd, std::string_view secret, std::string_view peer,
                         uint64_t challenge_wait_ms) {
  uint8_t challenge[kMagic.size() + kAuthNonceBytes];
  if (Status s = read_exact(fd, challenge, sizeof(challenge), mono_ms() + challenge_wait_ms);
      !s.ok()) {
    std::string why = std::string(peer) + ": no authentication challenge (" + s.message() +
                      "): does it have the cluster's secret_file?";
    return status_from_code(s.code(), std::move(why));
  }
  if (std::memcmp(challenge, kMagic.data(), kMagic.size()) != 0) {
    return Status::InvalidArgument(std::string(peer) + ": not a Shoal authentication challenge");
  }
  const uint64_t deadline = mono_ms() + kAuthTimeoutMs;
  Nonce theirs;
  std::memcpy(theirs.data(), challenge + kMagic.size(), theirs.size());
  const Nonce ours = fresh_nonce();
  uint8_t answer[kMagic.size() + kAuthNonceBytes + kAuthMacBytes];
  std::memcpy(answer, kMagic.data(), kMagic.size());
  std::memcpy(answer + kMagic.size(), ours.data(), ours.size());
  const Mac mine = proof(secret, "dialer", theirs);
  std::memcpy(answer + kMagic.size() + ours.size(), mine.data(), mine.size());
  SHOAL_TRY(write_all(fd, answer, sizeof(answer), deadline));
  uint8_t verdict[1 + kAuthMacBytes];
  if (Status s = read_exact(fd, verdict, 1, deadline); !s.ok() || verdict[0] != kAccepted) {
    return Status::InvalidArgument(std::string(peer) + " refused our cluster secret");
  }
  SHOAL_TRY(read_exact(fd, verdict + 1, kAuthMacBytes, deadline));
  if (!same(proof(secret, "acceptor", ours), verdict + 1)) {
    return Status::InvalidArgument(std::string(peer) + " does not know the cluster secret");
  }
  return Status::Ok();
}

Status verify_dialer(int fd, std::string_view secret) {
  const uint64_t deadline = mono_ms() + kAuthTimeoutMs;
  const Nonce ours = fresh_nonce();
  uint8_t challenge[kMagic.size() + kAuthNonceBytes];
  std::memcpy(challenge, kMagic.data(), kMagic.size());
  std::memcpy(challenge + kMagic.size(), ours.data(), ours.size());
  SHOAL_TRY(write_all(fd, challenge, sizeof(challenge), deadline));
  uint8_t answer[kMagic.size() + kAuthNonceBytes + kAuthMacBytes];
  // The magic first: a dialer without a secret sends a frame, maybe shorter than an answer,
  // and waits for its reply.
  SHOAL_TRY(read_exact(fd, answer, kMagic.size(), deadline));
  if (std::memcmp(answer, kMagic.data(), kMagic.size()) != 0) {
    (void)write_all(fd, &kRefused, 1, deadline);
    return Status::InvalidArgument("the dialer sent no authentication (no secret?)");
  }
  SHOAL_TRY(read_exact(fd, answer + kMagic.size(), sizeof(answer) - kMagic.size(), deadline));
  if (!same(proof(secret, "dialer", ours), answer + kMagic.size() + kAuthNonceBytes)) {
    (void)write_all(fd, &kRefused, 1, deadline);
    return Status::InvalidArgument("the dialer's cluster secret is wrong");
  }
  Nonce theirs;
  std::memcpy(theirs.data(), answer + kMagic.size(), theirs.size());
  uint8_t verdict[1 + kAuthMacBytes];
  verdict[0] = kAccepted;
  const Mac mine = proof(secret, "acceptor", theirs);
  std::memcpy(verdict + 1, mine.data(), mine.size());
  return write_all(fd, verdict, sizeof(verdict), deadline);
}

bool starts_with_auth_challenge(std::span<const uint8_t> bytes) {
  return bytes.size() >= kMagic.size() &&
         std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) == 0;
}

}  // namespace shoal::net
