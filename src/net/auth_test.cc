// Cluster authentication (auth.h): both halves over a socket pair, with the right secret, a
// wrong one, none on either side, and an acceptor that cannot prove the secret; then TCP
// endpoints of a process that has a secret.
#include "src/net/auth.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <thread>

#include "src/net/tcp_transport.h"

namespace shoal::net {
namespace auth_test {  // named, not anonymous: unique in a unity build

struct Pair {
  Pair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0); }
  ~Pair() {
    ::close(fds[0]);
    ::close(fds[1]);
  }
  int fds[2] = {-1, -1};
};

// Runs the acceptor's half with `acceptor_secret` and the dialer's with `dialer_secret`.
std::pair<Status, Status> handshake(std::string_view acceptor_secret,
                                    std::string_view dialer_secret) {
  Pair p;
  Status accepted;
  std::thread acceptor([&] { accepted = verify_dialer(p.fds[0], acceptor_secret); });
  Status dialed = prove_to_acceptor(p.fds[1], dialer_secret, "peer x");
  acceptor.join();
  return {accepted, dialed};
}

TEST(ClusterAuth, TheSameSecretPassesBothWays) {
  auto [accepted, dialed] = handshake("s3cret", "s3cret");
  EXPECT_TRUE(accepted.ok()) << accepted.to_string();
  EXPECT_TRUE(dialed.ok()) << dialed.to_string();
}

TEST(ClusterAuth, AWrongSecretIsRefusedAndTheDialerIsTold) {
  auto [accepted, dialed] = handshake("s3cret", "guess");
  EXPECT_EQ(accepted.code(), Code::kInvalidArgument);
  EXPECT_EQ(accepted.message(), "the dialer's cluster secret is wrong");
  EXPECT_EQ(dialed.code(), Code::kInvalidArgument);
  EXPECT_EQ(dialed.message(), "peer x refused our cluster secret");
}

// A dialer without a secret sends its first frame instead of a proof: refused.
TEST(ClusterAuth, ADialerWithoutASecretIsRefused) {
  Pair p;
  Status accepted;
  std::thread acceptor([&] { accepted = verify_dialer(p.fds[0], "s3cret"); });
  std::array<uint8_t, 80> frame{};
  frame.fill(0x5a);
  ASSERT_EQ(::write(p.fds[1], frame.data(), frame.size()), static_cast<ssize_t>(frame.size()));
  acceptor.join();
  EXPECT_EQ(accepted.code(), Code::kInvalidArgument);
  EXPECT_EQ(accepted.message(), "the dialer sent no authentication (no secret?)");
  uint8_t challenge_and_verdict[41] = {};
  ASSERT_EQ(::read(p.fds[1], challenge_and_verdict, sizeof(challenge_and_verdict)), 41);
  EXPECT_EQ(std::memcmp(challenge_and_verdict, "SHOALAU1", 8), 0);
  EXPECT_EQ(challenge_and_verdict[40], 0);  // refused
}

// An acceptor without a secret sends no challenge: the dialer gives up after kAuthTimeoutMs
// and says why.
TEST(ClusterAuth, AnAcceptorWithoutASecretTimesOutTheDialer) {
  Pair p;
  const Status dialed = prove_to_acceptor(p.fds[1], "s3cret", "peer y");
  EXPECT_EQ(dialed.code(), Code::kTimeout);
  EXPECT_NE(dialed.message().find("peer y: no authentication challenge"), std::string::npos)
      << dialed.message();
  EXPECT_NE(dialed.message().find("secret_file"), std::string::npos);
}

// An impostor acceptor that accepts anything cannot prove the secret back.
TEST(ClusterAuth, AnAcceptorThatCannotProveTheSecretIsRejected) {
  Pair p;
  std::thread impostor([&] {
    uint8_t challenge[40] = {};
    std::memcpy(challenge, "SHOALAU1", 8);
    ASSERT_EQ(::write(p.fds[0], challenge, sizeof(challenge)), 40);
    uint8_t answer[72];
    ASSERT_EQ(::read(p.fds[0], answer, sizeof(answer)), 72);
    uint8_t verdict[33] = {1};
    ASSERT_EQ(::write(p.fds[0], verdict, sizeof(verdict)), 33);
  });
  const Status dialed = prove_to_acceptor(p.fds[1], "s3cret", "peer z");
  impostor.join();
  EXPECT_EQ(dialed.code(), Code::kInvalidArgument);
  EXPECT_EQ(dialed.message(), "peer z does not know the cluster secret");
}

// TCP endpoints of a process with a secret prove it on connect and accept, then carry frames
// as before.
TEST(ClusterAuth, TcpEndpointsProveTheProcessSecret) {
  set_cluster_secret("tcp secret");
  auto listener = TcpListener::listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status().to_string();
  Result<TcpEndpoint> accepted = Status::Timeout("not yet");
  std::thread acceptor([&] { accepted = listener->accept(5000); });
  auto dialed = TcpEndpoint::connect("127.0.0.1", listener->port());
  acceptor.join();
  set_cluster_secret("");
  ASSERT_TRUE(dialed.ok()) << dialed.status().to_string();
  ASSERT_TRUE(accepted.ok()) << accepted.status().to_string();
  const uint8_t hello[] = {1, 2, 3};
  ASSERT_TRUE(dialed->send(7, hello).ok());
  ASSERT_TRUE(dialed->flush().ok());
  Completion c[1];
  size_t n = 0;
  for (int i = 0; i < 1000 && n == 0; ++i) {  // bounded: 1 s
    auto got = accepted->poll(c, 1);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    n = *got;
    if (n == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(c[0].imm, 7u);
  ASSERT_EQ(c[0].bytes.size(), 3u);
  accepted->release();
}

// A process without a secret dialing an acceptor that has one reads its challenge where a
// frame belongs: the endpoint says the peer asks for the secret, not "frame too long".
TEST(ClusterAuth, ADialerWithoutASecretIsToldThePeerAsksForIt) {
  ASSERT_TRUE(cluster_secret().empty());
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len), 0);
  std::thread acceptor([&] {  // an acceptor with a secret: its challenge first
    const int fd = ::accept(listener, nullptr, nullptr);
    ASSERT_GE(fd, 0);
    uint8_t challenge[40] = {};
    std::memcpy(challenge, "SHOALAU1", 8);
    ASSERT_EQ(::write(fd, challenge, sizeof(challenge)), 40);
    uint8_t answer[8];
    (void)::read(fd, answer, sizeof(answer));  // until the dialer closes
    ::close(fd);
  });
  Status failed;
  {
    auto dialed = TcpEndpoint::connect("127.0.0.1", ntohs(a.sin_port));
    EXPECT_TRUE(dialed.ok()) << dialed.status().to_string();
    Completion c[1];
    for (int i = 0; dialed.ok() && i < 1000 && failed.ok(); ++i) {  // bounded: 1 s
      auto got = dialed->poll(c, 1);
      if (!got.ok()) {
        failed = got.status();
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  }  // closes the socket: the acceptor's read returns
  EXPECT_EQ(failed.code(), Code::kInvalidArgument) << failed.to_string();
  EXPECT_EQ(failed.message(),
            "tcp: the peer asks for the cluster secret ([cluster] secret_file) and this process "
            "has none");
  acceptor.join();
  ::close(listener);
}

}  // namespace auth_test
}  // namespace shoal::net
