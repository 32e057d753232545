// Helpers shared by the simulator tests that run replicas over SimEndpoints
// (sim/paxos_sim_test.cc, sim/epoch_change_sim_test.cc).
//
// Threads: the simulator's one thread. Bounds: one poll batch per peer per call.
#pragma once

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <span>

#include "sim/sim_network.h"

namespace shoal::sim {

// While alive, an abort (an always-on assert deep in the code under test) first prints which
// seed was running and how to replay it: the test's own failure message never comes.
class AbortSeedHint {
 public:
  AbortSeedHint(const char* what, uint64_t seed) {
    std::snprintf(hint_, sizeof hint_,
                  "\n%s aborted during seed=%lu (replay: SHOAL_SIM_SEED=%lu)\n", what, seed, seed);
    previous_ = std::signal(SIGABRT, &print);
  }
  ~AbortSeedHint() { std::signal(SIGABRT, previous_); }
  AbortSeedHint(const AbortSeedHint&) = delete;
  AbortSeedHint& operator=(const AbortSeedHint&) = delete;

 private:
  static void print(int) {
    const ssize_t n = ::write(2, hint_, std::strlen(hint_));  // async-signal-safe
    (void)n;
  }
  static inline char hint_[160];
  void (*previous_)(int) = SIG_DFL;
};

// Polls one batch from each open endpoint (eps[p] leads to replica p) and hands every message
// to on_message(peer, session, bytes) while keep_going() holds. An endpoint whose peer died is
// closed (a restart of the peer reconnects). Returns whether anything arrived.
template <typename OnMessage, typename KeepGoing>
bool poll_peers(std::span<SimEndpoint> eps, OnMessage&& on_message, KeepGoing&& keep_going) {
  bool any = false;
  net::Completion batch[32];
  for (uint32_t p = 0; p < eps.size(); ++p) {
    SimEndpoint& ep = eps[p];
    if (!ep.is_open()) continue;
    auto got = ep.poll(batch, 32);
    if (!got.ok()) {
      ep = SimEndpoint();
      continue;
    }
    for (size_t i = 0; i < *got && keep_going(); ++i) {
      const auto& b = batch[i].bytes;
      on_message(
          p, batch[i].imm,
          std::span<const std::byte>(reinterpret_cast<const std::byte*>(b.data()), b.size()));
    }
    if (ep.is_open()) ep.release();
    any |= *got > 0;
  }
  return any;
}

}  // namespace shoal::sim
