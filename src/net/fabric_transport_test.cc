// Fabric-transport specific tests (the conformance suite covers the common contract): a peer
// that registers a too-small ring, a writer that announces bytes past the ring's bounds, stale
// epochs, the rendezvous over loopback TCP and by abstract unix name across processes (and
// its same-uid rule, as shm_access_test.cc checks shm's), loopback-only addresses, and kept
// regions (keep_received: the writer stops short of them, resumes intact once they are let go;
// keeps refused past three quarters of the ring and outside it; bad input leaves them intact).
#include "src/net/fabric_transport.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "src/net/socket_util.h"
#include "src/net/transport_test_util.h"

namespace shoal::net {
namespace {

using namespace ::shoal::net::test_util;  // NOLINT: test helpers

class FabricTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!FabricEndpoint::supported(&why)) {
      GTEST_SKIP() << "no libfabric provider with FI_EP_RDM + FI_RMA + remote CQ data works on "
                      "127.0.0.1: "
                   << why;
    }
  }
};

// A client that speaks the rendezvous by hand and sends `hello` (not a real endpoint).
Status accept_with_hello(const FabricHello& hello) {
  auto listener = FabricListener::listen("127.0.0.1", 0);
  if (!listener.ok()) return listener.status();
  std::thread client([&] {
    auto addr = parse_ipv4("127.0.0.1", listener->port());
    auto fd = dial_tcp(*addr, 5000, "test");
    if (!fd.ok()) return;
    (void)!::send(*fd, &hello, sizeof(hello), MSG_NOSIGNAL);
    FabricHello theirs;  // the listener's hello, then wait for it to hang up
    char sink[sizeof(theirs)];
    while (::recv(*fd, sink, sizeof(sink), 0) > 0) {
    }
    ::close(*fd);
  });
  auto ep = listener->accept();
  Status s = ep.status();
  listener = FabricListener();  // closes the listening socket
  if (ep.ok()) ep->close();
  client.join();
  return s;
}

FabricHello plausible_hello() {
  FabricHello h;
  h.address_bytes = 16;  // never used: the hello is refused before the address is
  h.ring_bytes = 64 * 1024;
  h.region_bytes = fabric_region_bytes(h.ring_bytes);
  std::strncpy(h.provider, FabricEndpoint::provider_name().c_str(), sizeof(h.provider) - 1);
  return h;
}

TEST_F(FabricTest, PeerWithATooSmallRingIsRefused) {
  FabricHello tiny = plausible_hello();
  tiny.ring_bytes = 1024;
  tiny.region_bytes = fabric_region_bytes(1024);
  Status s = accept_with_hello(tiny);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("receive ring of 1024 bytes"), std::string::npos) << s.message();

  FabricHello short_region = plausible_hello();  // claims 64 KiB, registered 4 KiB
  short_region.region_bytes = 4096;
  s = accept_with_hello(short_region);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("too small for its ring"), std::string::npos) << s.message();

  FabricHello odd = plausible_hello();
  odd.ring_bytes = 96 * 1024;  // not a power of two
  EXPECT_EQ(accept_with_hello(odd).code(), Code::kInvalidArgument);

  FabricHello garbage = plausible_hello();
  garbage.magic = 42;
  EXPECT_EQ(accept_with_hello(garbage).code(), Code::kCorruption);
}

TEST_F(FabricTest, WritePastTheRingsBoundsIsCorruption) {
  EndpointOptions o;
  o.ring_bytes = 64 * 1024;
  auto link = FabricEndpoint::pair(o);
  ASSERT_TRUE(link.ok()) << link.status().to_string();
  auto& [a, b] = *link;
  ASSERT_TRUE(a.send(1, as_bytes("ok")).ok());
  ASSERT_TRUE(a.flush().ok());
  // A writer that ignores its credit: announces two rings' worth beyond what b released.
  ASSERT_TRUE(a.announce_for_test(frame_bytes(2) + 2 * o.ring_bytes).ok());
  Received r;
  ASSERT_TRUE(recv_one(b, &r).ok());  // what came before is still delivered
  EXPECT_EQ(std::string(r.bytes.begin(), r.bytes.end()), "ok");
  Status s = recv_one(b, &r, 5 * kSecondNs);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.to_string();
  EXPECT_NE(s.message().find("past the ring's bounds"), std::string::npos) << s.message();
  EXPECT_EQ(b.send(1, as_bytes("x")).code(), Code::kCorruption);  // final
}

TEST_F(FabricTest, StaleEpochWritesAreDroppedThenRefused) {
  auto link = FabricEndpoint::pair();
  ASSERT_TRUE(link.ok()) << link.status().to_string();
  auto& [a, b] = *link;
  ASSERT_TRUE(b.set_fence_epoch(7).ok());
  // a has not polled the fence yet: its write goes out and b drops it.
  ASSERT_TRUE(a.write_with_imm(6, 1, as_bytes("stale, in flight")).ok());
  ASSERT_TRUE(a.write_with_imm(7, 2, as_bytes("current")).ok());
  ASSERT_TRUE(a.flush().ok());
  Received r;
  ASSERT_TRUE(recv_one(b, &r).ok());
  EXPECT_EQ(r.imm, 2u);
  EXPECT_EQ(b.fenced_drops(), 1u);
  ASSERT_TRUE(b.send(0, as_bytes("sync")).ok());
  ASSERT_TRUE(b.flush().ok());
  ASSERT_TRUE(recv_one(a, &r).ok());  // a has now processed the fence announcement
  EXPECT_EQ(a.write_with_imm(6, 3, as_bytes("stale")).code(), Code::kAborted);
  auto span = a.reserve(5);
  ASSERT_TRUE(span.ok());
  EXPECT_EQ(a.commit_write(5, 4, 5).code(), Code::kAborted);
  EXPECT_EQ(b.set_fence_epoch(6).code(), Code::kInvalidArgument);  // fences only move forward
}

// A forked child's side of the rendezvous tests: echoes one message (session + 1), then waits
// for the parent's goodbye. Its exit code says how far it got (0: all of it).
int echo_once(Result<FabricEndpoint> ep) {
  if (!ep.ok()) return 1;
  Received r;
  if (!recv_one(*ep, &r).ok()) return 2;
  if (!ep->send(r.imm + 1, r.bytes).ok() || !ep->flush().ok()) return 3;
  if (!recv_one(*ep, &r).ok()) return 4;  // the parent's goodbye
  return 0;
}

TEST_F(FabricTest, RendezvousOverLoopbackTcpAcrossProcesses) {
  auto listener = FabricListener::listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status().to_string();
  const uint16_t port = listener->port();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(echo_once(FabricEndpoint::connect("127.0.0.1", port)));
  auto ep = listener->accept(10'000);
  ASSERT_TRUE(ep.ok()) << ep.status().to_string();
  const auto big = pattern(3 << 20, 5);  // fragmented, several laps of the 1 MiB ring
  ASSERT_TRUE(ep->send(41, big).ok());
  ASSERT_TRUE(ep->flush().ok());
  Received r;
  ASSERT_TRUE(recv_one(*ep, &r).ok());
  EXPECT_EQ(r.imm, 42u);
  EXPECT_TRUE(r.bytes == big);
  ASSERT_TRUE(ep->send(0, as_bytes("bye")).ok());
  ASSERT_TRUE(ep->flush().ok());
  EXPECT_EQ(wait_child(pid), 0);
}

// The shard servers' and replication's rendezvous (listen_local/connect_local): a name, no
// port; a name is taken once; nobody listening is an error within the dialer's timeout.
TEST_F(FabricTest, RendezvousByLocalNameAcrossProcesses) {
  const std::string name = "shoal-fabric-test-" + std::to_string(getpid());
  auto listener = FabricListener::listen_local(name);
  ASSERT_TRUE(listener.ok()) << listener.status().to_string();
  EXPECT_EQ(listener->port(), 0);
  EXPECT_FALSE(FabricListener::listen_local(name).ok());  // taken
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(echo_once(FabricEndpoint::connect_local(name)));
  auto ep = listener->accept(10'000);
  ASSERT_TRUE(ep.ok()) << ep.status().to_string();
  const auto msg = pattern(100'000, 9);
  ASSERT_TRUE(ep->send(7, msg).ok());
  ASSERT_TRUE(ep->flush().ok());
  Received r;
  ASSERT_TRUE(recv_one(*ep, &r).ok());
  EXPECT_EQ(r.imm, 8u);
  EXPECT_TRUE(r.bytes == msg);
  ASSERT_TRUE(ep->send(0, as_bytes("bye")).ok());
  ASSERT_TRUE(ep->flush().ok());
  EXPECT_EQ(wait_child(pid), 0);
  const uint64_t start = mono_ns();
  auto none = FabricEndpoint::connect_local(name + "-nobody", {}, {}, 50);
  EXPECT_FALSE(none.ok());
  EXPECT_LT(mono_ns() - start, 2'000'000'000u);
}

// A peer that closes its endpoint while our writes are arriving, with credit going both ways
// and its own writes to us in flight. libfabric 1.17's tcp;ofi_rxm segfaults in fi_close when
// a connection still holds a partly received RMA write (its cancellation is reported with a
// NULL context that rxm dereferences); close() must first make sure none can be (see the
// header, "Closing"). The child reads, echoes and releases `reads` messages, then closes
// mid-stream; exit code 0 means its close() returned, having had our goodbye in return well
// before its 1 s bound (4: it waited that out).
int read_some_then_close(Result<FabricEndpoint> ep, int reads) {
  if (!ep.ok()) return 1;
  Received r;
  for (int i = 0; i < reads; ++i) {
    if (!recv_one(*ep, &r).ok()) return 2;
    if (!ep->send(2, std::span<const uint8_t>(r.bytes).first(4096)).ok()) return 3;
  }
  const uint64_t start = mono_ns();
  ep->close();
  return mono_ns() - start < 900'000'000 ? 0 : 4;
}

// Streams `msg` to `ep` (polling and releasing what comes back) until the link fails or
// `deadline`; returns the failure. A Timeout (no credit yet) is not a failure.
Status stream_until_failure(FabricEndpoint& ep, std::span<const uint8_t> msg, uint64_t deadline) {
  while (mono_ns() < deadline) {  // bounded by the deadline
    Status s = ep.send(1, msg);
    if (s.ok()) s = ep.flush();
    if (!s.ok() && s.code() != Code::kTimeout) return s;
    Completion c[8];
    auto n = ep.poll(c, 8);
    if (!n.ok()) return n.status();
    if (*n > 0) ep.release();
  }
  return Status::Timeout("the link never failed");
}

TEST_F(FabricTest, PeerClosingWithWritesInFlightLeavesACleanStatus) {
  for (int round = 0; round < 8; ++round) {
    const std::string name =
        "shoal-fabric-close-" + std::to_string(getpid()) + "-" + std::to_string(round);
    auto listener = FabricListener::listen_local(name);
    ASSERT_TRUE(listener.ok()) << listener.status().to_string();
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) _exit(read_some_then_close(FabricEndpoint::connect_local(name), 3 + 5 * round));
    auto ep = listener->accept(10'000);
    ASSERT_TRUE(ep.ok()) << ep.status().to_string();
    const auto msg = pattern(60 * 1024, round);
    Status s = stream_until_failure(*ep, msg, mono_ns() + 20 * kSecondNs);
    EXPECT_EQ(s.code(), Code::kUnavailable) << "round " << round << ": " << s.to_string();
    EXPECT_NE(s.message().find("peer closed the link"), std::string::npos) << s.message();
    ep->close();
    EXPECT_EQ(wait_child(pid), 0) << "round " << round << ": the closing peer crashed or failed";
  }
}

// The survivor's side: a peer process that dies (no close) in the middle of its own stream of
// writes to us. We see Unavailable, and our close() afterwards does not crash.
TEST_F(FabricTest, PeerDyingWithWritesInFlightLeavesACleanStatus) {
  for (int round = 0; round < 8; ++round) {
    const std::string name =
        "shoal-fabric-die-" + std::to_string(getpid()) + "-" + std::to_string(round);
    auto listener = FabricListener::listen_local(name);
    ASSERT_TRUE(listener.ok()) << listener.status().to_string();
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // streams to us (reading what we send), then dies without closing
      auto ep = FabricEndpoint::connect_local(name);
      if (!ep.ok()) _exit(1);
      const auto msg = pattern(60 * 1024, round);
      for (int i = 0; i < 10 + 9 * round; ++i) {
        Status s = ep->send(1, msg);
        if (s.ok()) s = ep->flush();
        if (!s.ok() && s.code() != Code::kTimeout) _exit(2);
        Completion c[8];
        auto n = ep->poll(c, 8);
        if (!n.ok()) _exit(3);
        if (*n > 0) ep->release();
      }
      _exit(0);
    }
    auto ep = listener->accept(10'000);
    ASSERT_TRUE(ep.ok()) << ep.status().to_string();
    const auto msg = pattern(4096, round);
    Status s = stream_until_failure(*ep, msg, mono_ns() + 20 * kSecondNs);
    EXPECT_EQ(s.code(), Code::kUnavailable) << "round " << round << ": " << s.to_string();
    ep->close();
    EXPECT_EQ(wait_child(pid), 0) << "round " << round;
  }
}

// The crash itself: a peer that stops reading, so our writes and then our control words
// (credit requests, credit) queue in the provider behind a full socket, and then dies. The
// provider cancels what it still has queued; an injected control word was cancelled with a
// NULL context, which ofi_rxm dereferenced (segfault at 0x20 in fi_cq_read or fi_close).
// Control words are now ordinary writes with a context: we see Unavailable, and close.
TEST_F(FabricTest, PeerDyingWithOurControlWritesQueuedLeavesACleanStatus) {
  for (int round = 0; round < 4; ++round) {
    const std::string name =
        "shoal-fabric-stuck-" + std::to_string(getpid()) + "-" + std::to_string(round);
    EndpointOptions o;
    o.send_timeout_ns = 200'000'000;  // out of credit or queue room: give up quickly
    auto listener = FabricListener::listen_local(name, o);
    ASSERT_TRUE(listener.ok()) << listener.status().to_string();
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // connects with a large ring, then never polls: it is killed
      EndpointOptions big;
      big.ring_bytes = size_t{16} << 20;
      auto ep = FabricEndpoint::connect_local(name, big);
      const char c = ep.ok() ? 'y' : 'n';
      (void)!::write(ready[1], &c, 1);
      for (;;) pause();
    }
    ::close(ready[1]);
    auto ep = listener->accept(10'000);
    ASSERT_TRUE(ep.ok()) << ep.status().to_string();
    char c = 0;
    ASSERT_EQ(::read(ready[0], &c, 1), 1);
    ::close(ready[0]);
    ASSERT_EQ(c, 'y');
    // Fill the peer's ring and the sockets between us: sends end in Timeout (no credit, or
    // the provider's queue full), with a credit request queued behind the unsent bytes.
    const auto msg = pattern(1 << 20, round);
    Status s;
    for (int i = 0; i < 64 && s.ok(); ++i) {
      s = ep->send(1, msg);
      if (s.ok()) s = ep->flush();
    }
    EXPECT_EQ(s.code(), Code::kTimeout) << s.to_string();
    kill(pid, SIGKILL);
    EXPECT_EQ(wait_child(pid), 128 + SIGKILL);
    s = stream_until_failure(*ep, std::span<const uint8_t>(msg).first(64),
                             mono_ns() + 20 * kSecondNs);
    EXPECT_EQ(s.code(), Code::kUnavailable) << "round " << round << ": " << s.to_string();
    ep->close();
  }
}

// The local rendezvous admits processes of our uid only, both ways. The other user is a child
// that drops to nobody (uid 65534): needs root, skipped otherwise.
constexpr uid_t kNobody = 65534;

TEST_F(FabricTest, LocalRendezvousRefusesAnotherUser) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a child as another user";
  const std::string name = "shoal-fabric-uid-" + std::to_string(getpid());
  auto listener = FabricListener::listen_local(name);
  ASSERT_TRUE(listener.ok()) << listener.status().to_string();
  Status accepted;
  std::thread acceptor([&] {
    auto e = listener->accept(10'000);
    accepted = e.ok() ? Status::Ok() : e.status();
  });
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // the dialer of another user: refused before any hello
    if (setgid(kNobody) != 0 || setuid(kNobody) != 0) _exit(99);
    _exit(FabricEndpoint::connect_local(name, {}, {}, 5000).ok() ? 1 : 0);
  }
  acceptor.join();
  EXPECT_EQ(wait_child(pid), 0) << "the other user's connect_local got an endpoint";
  EXPECT_EQ(accepted.code(), Code::kPermissionDenied) << accepted.to_string();
  // And a listener of another user on a name: our dialer refuses it.
  const std::string squatted = name + "-squatted";
  const pid_t squatter =
      fork_squatter_as_nobody([&] { return FabricListener::listen_local(squatted); });
  ASSERT_GT(squatter, 0) << "the squatter could not listen";
  auto dialed = FabricEndpoint::connect_local(squatted, {}, {}, 5000);
  EXPECT_EQ(dialed.status().code(), Code::kPermissionDenied) << dialed.status().to_string();
  EXPECT_EQ(wait_child(squatter), 0) << "the squatter got an endpoint";
}

// ---- Kept regions (FabricEndpoint::keep_received)

constexpr size_t kKeepMessage = 4000;  // frame_bytes 4024: 16 to a 64 KiB ring, a pad at the end
constexpr uint64_t kMs = 1'000'000;

// Polls one message off `rx`, waiting up to timeout_ns: its bytes (until release()), or empty.
// drive_tx: the writer is `tx` in this thread, so progress it too (its provider moves bytes
// only when called).
std::span<const uint8_t> poll_one(FabricEndpoint& rx, Completion* c, uint64_t timeout_ns,
                                  FabricEndpoint* drive_tx = nullptr) {
  const uint64_t deadline = mono_ns() + timeout_ns;
  for (;;) {  // bounded by the deadline
    auto n = rx.poll(c, 1);
    EXPECT_TRUE(n.ok()) << n.status().to_string();
    if (!n.ok()) return {};
    if (*n == 1) return c[0].bytes;
    if (drive_tx != nullptr) (void)drive_tx->flush();
    const uint64_t now = mono_ns();
    if (now >= deadline) return {};
    if (Status s = rx.wait(std::min(deadline - now, 5 * kMs));
        !s.ok() && s.code() != Code::kTimeout) {
      return {};
    }
  }
}

struct FabricKeepPair {
  explicit FabricKeepPair(uint64_t send_timeout_ns = 20 * kMs) {
    o.ring_bytes = 64 << 10;  // a frame carries up to 16 KiB
    o.max_message_bytes = 64 << 10;
    o.spin_ns = 0;
    o.send_timeout_ns = send_timeout_ns;
    auto p = FabricEndpoint::pair(o);
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    tx = std::move(p->first);
    rx = std::move(p->second);
  }
  // Sends one message of `size` bytes of `fill` and polls it (both ends in this thread): its
  // bytes, or empty when the send failed or nothing came.
  std::span<const uint8_t> round(uint8_t fill, size_t size = kKeepMessage) {
    const std::vector<uint8_t> msg(size, fill);
    if (!tx.send(7, msg).ok() || !tx.flush().ok()) return {};
    return poll_one(rx, c, kSecondNs, &tx);
  }
  EndpointOptions o;
  FabricEndpoint tx, rx;
  Completion c[1];
};

uint64_t process_cpu_ns() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * kSecondNs +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1000ull;
}

// A receiver that keeps a region returns credit only up to it: the writer (its own thread)
// stops short of the kept bytes and waits without spinning, an event loop over the receiver
// gets nothing to wake it, and once the region is let go on another thread while the receiver
// sleeps in wait(), the credit goes back, the writer resumes, and four laps arrive intact.
TEST_F(FabricTest, KeepAWriterStopsShortOfKeptBytesAndResumesIntactOnceLetGo) {
  FabricKeepPair p(/*send_timeout_ns=*/30 * kSecondNs);
  std::shared_ptr<const uint64_t[]> kept = p.rx.keep_received(p.round(0x3c));
  ASSERT_TRUE(kept);
  EXPECT_EQ(p.rx.kept_regions(), 1u);
  EXPECT_TRUE(p.rx.in_receive_ring(kept.get()));
  p.rx.release();
  EXPECT_EQ(p.rx.receive_held_bytes(), frame_bytes(kKeepMessage) - kFrameHeaderBytes);
  constexpr int kSends = 64;  // four laps of the ring
  std::atomic<int> sent{0};
  Status writer_status;
  std::thread writer([&] {
    for (int i = 1; i <= kSends; ++i) {
      const std::vector<uint8_t> msg(kKeepMessage, static_cast<uint8_t>(i));
      Status s = p.tx.send(7, msg);
      if (s.ok()) s = p.tx.flush();
      if (!s.ok()) {
        writer_status = s;
        return;
      }
      sent.store(i);
    }
  });
  int next = 1;  // the fill of the next message
  for (; next <= kSends; ++next) {
    const std::span<const uint8_t> b = poll_one(p.rx, p.c, 200 * kMs);
    if (b.empty()) break;
    ASSERT_TRUE(all_of(b, static_cast<uint8_t>(next))) << next;
    p.rx.release();
  }
  // Stopped by the kept region: about a ring's worth of frames, the kept one included.
  const int ring_frames = static_cast<int>(p.o.ring_bytes / frame_bytes(kKeepMessage));
  EXPECT_GE(next, ring_frames - 2);
  EXPECT_LE(next, ring_frames);
  EXPECT_LT(sent.load(), kSends);
  EXPECT_TRUE(all_of(kept, kKeepMessage, 0x3c));
  // The writer waits for credit without spinning.
  const uint64_t cpu_before = process_cpu_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_LT(process_cpu_ns() - cpu_before, 100 * kMs) << "a writer out of credit spins";
  // An event loop over the receiver sleeps: nothing is pending and nothing wakes it.
  ASSERT_TRUE(p.rx.prepare_to_block());
  ASSERT_GE(p.rx.wait_fd(), 0);
  pollfd fds[1] = {{p.rx.wait_fd(), POLLIN, 0}};
  EXPECT_EQ(::poll(fds, 1, 20), 0) << "the receiver's wait fd is readable with nothing to do";
  p.rx.end_block();
  // Let go on another thread while the receiver sleeps in wait(): it returns the credit.
  std::thread let_go([&kept] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    kept.reset();
  });
  const uint64_t start = mono_ns();
  const Status woke = p.rx.wait(5 * kSecondNs);
  const uint64_t waited = mono_ns() - start;
  let_go.join();
  EXPECT_TRUE(woke.ok()) << woke.to_string();
  EXPECT_GE(waited, 40 * kMs);
  EXPECT_LT(waited, 2 * kSecondNs);
  for (; next <= kSends; ++next) {
    const std::span<const uint8_t> b = poll_one(p.rx, p.c, 10 * kSecondNs);
    ASSERT_EQ(b.size(), kKeepMessage) << next;
    ASSERT_TRUE(all_of(b, static_cast<uint8_t>(next))) << next;
    // Keep every fifth for a while: lets-go out of order leave the rest intact.
    if (next % 5 == 0) kept = p.rx.keep_received(b);
    p.rx.release();
    if (next % 5 == 0) {
      EXPECT_TRUE(all_of(kept, kKeepMessage, static_cast<uint8_t>(next)));
    }
  }
  writer.join();
  EXPECT_TRUE(writer_status.ok()) << writer_status.to_string();
  EXPECT_EQ(sent.load(), kSends);
  kept.reset();
  // Kept bytes outlive both endpoints (the region is unmapped by the last handle).
  EXPECT_TRUE(kept_bytes_outlive_both_ends(p, kKeepMessage));
}

// Keeping is refused once kept regions would hold more than three quarters of the ring back
// from the writer (the receiver then copies), and for bytes that are not a polled message's
// in the ring: elsewhere, empty, misaligned, past the frame, or a reassembled message.
TEST_F(FabricTest, KeepRefusedPastThreeQuartersOfTheRingAndOutsideIt) {
  FabricKeepPair p;
  std::vector<std::shared_ptr<const uint64_t[]>> kept;
  const int refused = keep_every_round(p, 14, &kept);
  EXPECT_EQ(kept.size(), (p.o.ring_bytes / 4 * 3) / frame_bytes(kKeepMessage));
  EXPECT_EQ(refused, 14 - static_cast<int>(kept.size()));
  EXPECT_GT(refused, 0);
  const std::vector<uint8_t> elsewhere(kKeepMessage);
  const std::span<const uint8_t> b = p.round(1);
  ASSERT_EQ(b.size(), kKeepMessage);
  EXPECT_EQ(p.rx.keep_received(elsewhere), nullptr);
  EXPECT_EQ(p.rx.keep_received(b.subspan(0, 0)), nullptr);
  EXPECT_EQ(p.rx.keep_received(b.subspan(4)), nullptr);
  EXPECT_EQ(p.rx.keep_received({b.data(), b.size() + 64}), nullptr);
  p.rx.release();
  for (size_t i = 0; i < kept.size(); ++i) {
    EXPECT_TRUE(all_of(kept[i], kKeepMessage, static_cast<uint8_t>(i))) << i;
  }
  kept.clear();
  // The next poll sees them let go and returns their credit to the writer.
  EXPECT_GT(p.rx.receive_held_bytes(), p.o.ring_bytes / 2);
  auto none = p.rx.poll(p.c, 1);
  ASSERT_TRUE(none.ok() && *none == 0);
  EXPECT_EQ(p.rx.receive_held_bytes(), 0u);
  // A message above a frame's payload is reassembled outside the ring (and counted): not kept.
  const uint64_t copied_before = p.rx.received_copied_bytes();
  const std::span<const uint8_t> big = p.round(9, 40 << 10);
  ASSERT_EQ(big.size(), 40u << 10);
  EXPECT_TRUE(all_of(big, 9));
  EXPECT_FALSE(p.rx.in_receive_ring(big.data()));
  EXPECT_EQ(p.rx.keep_received(big), nullptr);
  EXPECT_EQ(p.rx.received_copied_bytes() - copied_before, 40u << 10);
  p.rx.release();
}

// Bad input after a kept region (a frame with a bad canary, one cut short by the announced end,
// an announcement past the ring's bounds): the endpoint fails with Corruption, the kept bytes
// stay intact, past both endpoints.
TEST_F(FabricTest, KeepMalformedOrTruncatedInputFailsTheEndpointAndLeavesKeptBytesIntact) {
  for (const int bad : {0, 1, 2}) {
    std::shared_ptr<const uint64_t[]> kept;
    {
      FabricKeepPair p;
      kept = p.rx.keep_received(p.round(0x77));
      ASSERT_TRUE(kept);
      p.rx.release();
      std::vector<uint8_t> frame(frame_bytes(64), 0xee);  // a bad canary
      const uint32_t length = 64;
      std::memcpy(frame.data(), &length, 4);
      if (bad == 1) frame.resize(40);  // cut inside the payload by the announced end
      if (bad == 2) {
        ASSERT_TRUE(p.tx.announce_for_test(frame_bytes(kKeepMessage) + 2 * p.o.ring_bytes).ok());
      } else {
        ASSERT_TRUE(p.tx.inject_raw_for_test(frame).ok());
      }
      ASSERT_TRUE(p.tx.flush().ok());
      Status failure;
      for (int i = 0; i < 200 && failure.ok(); ++i) {  // bounded: 200 waits of 5 ms
        auto n = p.rx.poll(p.c, 1);
        if (!n.ok()) failure = n.status();
        if (n.ok() && *n != 0) p.rx.release();
        if (failure.ok()) (void)p.rx.wait(5 * kMs);
      }
      EXPECT_EQ(failure.code(), Code::kCorruption) << bad << ": " << failure.to_string();
      const char* const what[] = {"canary", "truncated", "past the ring's bounds"};
      EXPECT_NE(failure.message().find(what[bad]), std::string::npos) << failure.message();
      EXPECT_TRUE(all_of(kept, kKeepMessage, 0x77)) << bad;
    }
    EXPECT_TRUE(all_of(kept, kKeepMessage, 0x77)) << bad;
  }
}

TEST(FabricAddressTest, OnlyLoopbackAddresses) {
  EXPECT_EQ(FabricListener::listen("10.1.2.3", 0).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(FabricEndpoint::connect("192.0.2.1", 9).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace shoal::net
