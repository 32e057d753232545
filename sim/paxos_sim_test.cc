// PaxosStream under the deterministic simulator: 3 replicas on simulated nodes, a client that
// proposes entries at whichever replica leads, and chaos (loss, duplication, reordering,
// partitions, crashes and restarts of replicas whose acceptor state is durable) over many seeds.
//
// Safety, checked as the run goes: no slot is ever delivered with two different values on any
// replicas; when a slot is first delivered anywhere, a majority of acceptor stores hold its
// bytes. At the end (faults healed, everyone restarted, quiesced): every client entry was
// chosen (liveness), the three chosen logs are identical, and every chosen slot still sits on a
// majority. Determinism: the same seed gives the same trace hash.
// A failure prints the seed; SHOAL_SIM_SEED=<seed> reruns that seed alone.
//
// Lost disks (PaxosSim.SafeAndLiveWhenDisksAreLost): some restarts come back over an empty
// store, one replica at a time (the next only once the last one caught up), marked rejoining
// (docs/REPLICATION.md, "A replica that lost its directory rejoins without a vote"); the same
// checks hold. Unmarked (the planted `forget` mode, what a follower restarted over an empty
// directory did before; PAXOS_SIM_DISKS=forget), some seeds deliver two values for a slot.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "sim/sim_network.h"
#include "sim/sim_test_util.h"
#include "src/repl/paxos_stream.h"

namespace shoal::sim {
namespace paxos_sim_test {  // named, not anonymous: unique in a unity build

using repl::PaxosAcceptorStore;
using repl::PaxosStream;
using Bytes = std::vector<std::byte>;
constexpr uint64_t kMs = 1'000'000;
constexpr uint32_t kReplicas = 3;
constexpr uint32_t kEntriesPerSeed = 300;

// Sends over the node's SimEndpoints (one per peer); a dead or missing link drops the message.
// Gathers, as the leader's network links do: messages with entries come as pieces (joined
// here, as a transport's one copy would), so the stream's gathered messages run under faults.
class SimPaxosTransport final : public repl::PaxosTransport {
 public:
  void send(uint32_t to, std::span<const std::byte> m) override {
    SimEndpoint& ep = eps[to];
    if (!ep.is_open()) return;
    const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(m.data()), m.size());
    if (!ep.send(0, bytes).ok() || !ep.flush().ok()) ep = SimEndpoint();
  }
  bool gathers() const override { return true; }
  void send_gather(uint32_t to, std::span<const std::span<const std::byte>> pieces) override {
    joined_.clear();
    for (const std::span<const std::byte> p : pieces)
      joined_.insert(joined_.end(), p.begin(), p.end());
    send(to, joined_);
  }
  std::array<SimEndpoint, kReplicas> eps;

 private:
  std::vector<std::byte> joined_;  // reused
};

// What a restart may do to the replica's acceptor state.
enum class Disks : uint8_t {
  kKept,    // durable: every restart keeps its store
  kRejoin,  // some restarts lose it and come back rejoining
  kForget,  // planted: some restarts lose it and vote at once
};

struct Node {
  uint32_t id = 0;
  bool up = true;
  bool lost = false;  // restarted over an empty store, not caught up yet
  std::unique_ptr<rt::EventLoop> loop;
  PaxosAcceptorStore store;  // durable: survives crash/restart (models the WAL)
  SimPaxosTransport transport;
  std::unique_ptr<PaxosStream> stream;
  std::vector<Bytes> log;  // every slot this replica delivered, across restarts
};

struct ClientEntry {
  uint64_t tid = 0;
  uint64_t last_proposed_ns = 0;
  uint32_t proposals = 0;
  bool chosen = false;
};

struct RunResult {
  bool finished = false;
  std::string error;  // first safety violation, empty if none
  uint64_t trace_hash = 0;
  uint64_t slots = 0, proposals = 0, crashes = 0, elections = 0, noops = 0;
  uint64_t disks_lost = 0;
  std::string hint;
};

uint64_t entry_tid(std::span<const std::byte> e) {
  auto v = repl::LogEntryView::parse(e);
  uint64_t tid = 0;
  if (v.ok()) v->for_each_record([&](const repl::RecordView& r) { tid = r.commit_tid(); });
  return tid;  // 0: a no-op
}

class PaxosSim {
 public:
  PaxosSim(uint64_t seed, uint32_t entries, Disks disks = Disks::kKept)
      : env_(seed), net_(env_, kReplicas, faults()), chaos_(seed ^ 0x9a705), disks_(disks) {
    for (uint32_t i = 0; i < kReplicas; ++i) {
      nodes_[i].id = i;
      nodes_[i].loop = std::make_unique<rt::EventLoop>(env_);
      env_.attach(*nodes_[i].loop);
      SHOAL_CHECK(nodes_[i].loop->add_poller(&PaxosSim::poll, &nodes_[i]).ok());
      arm_tick(nodes_[i]);
    }
    for (uint32_t a = 0; a < kReplicas; ++a) {
      for (uint32_t b = a + 1; b < kReplicas; ++b) connect(a, b);
    }
    for (auto& n : nodes_) start_stream(n);
    client_.resize(entries);
    for (uint32_t i = 0; i < entries; ++i) client_[i].tid = i + 1;
  }
  ~PaxosSim() {
    for (auto& n : nodes_) n.stream.reset();
  }

  RunResult run(uint64_t chaos_ns) {
    chaos_until_ns_ = chaos_ns;
    release_spacing_ns_ = chaos_ns / (client_.size() + 1);
    env_.after(5 * kMs, &PaxosSim::chaos_tick, this);
    env_.after(1 * kMs, &PaxosSim::client_tick, this);
    RunResult out;
    Status st = env_.run_until(chaos_ns);
    if (st.ok()) {
      // Heal: no more faults, every replica back, then quiesce until everything is chosen
      // everywhere (liveness after healing).
      net_.heal_all();
      net_.set_all_faults(LinkFaults{});
      for (auto& n : nodes_) {
        if (!n.up) restart(n);
      }
      st = env_.run_until_true([&] { return quiesced(); }, env_.now_ns() + 20'000 * kMs);
    }
    out.finished = st.ok();
    if (!st.ok() && error_.empty()) error_ = "not live after healing: " + st.to_string();
    if (error_.empty()) final_checks();
    out.error = error_;
    out.hint = env_.replay_hint();
    out.trace_hash = env_.trace_hash();
    if (std::getenv("PAXOS_SIM_VERBOSE") != nullptr) {
      std::printf("seed %lu: virtual %lu ms, %lu events, net sent %lu lost %lu dup %lu; %s\n",
                  env_.run_seed(), env_.now_ns() / kMs, env_.events_run(), net_.stats().sent,
                  net_.stats().lost, net_.stats().duplicated, st.to_string().c_str());
    }
    out.slots = nodes_[0].log.size();
    out.crashes = crashes_;
    out.disks_lost = disks_lost_;
    for (auto& c : client_) out.proposals += c.proposals;
    for (auto& n : nodes_) {
      out.elections += n.stream->stats().elections;
      out.noops += n.stream->stats().noops_proposed;
    }
    return out;
  }

 private:
  static NetworkOptions faults() {
    NetworkOptions o;
    o.faults.loss = 0.05;
    o.faults.duplicate = 0.1;
    o.faults.reorder = 0.1;
    return o;
  }

  void connect(uint32_t a, uint32_t b) {
    auto pair = net_.connect(a, b);
    SHOAL_CHECK(pair.ok());
    nodes_[a].transport.eps[b] = std::move(pair->first);
    nodes_[b].transport.eps[a] = std::move(pair->second);
  }

  void start_stream(Node& n) {
    repl::PaxosOptions o;
    o.replica_id = n.id;
    o.replica_count = kReplicas;
    o.pipeline_slots = 16;
    n.stream = std::make_unique<PaxosStream>(
        env_, n.transport, n.store, o,
        [this, &n](uint64_t slot, const repl::EntryBuffer& e) { on_chosen(n, slot, e.span()); });
  }

  void crash(Node& n) {
    n.up = false;
    ++crashes_;
    env_.trace(2001, n.id);
    net_.crash(n.id);
    n.stream.reset();  // volatile state gone; n.store (durable) stays
    for (auto& ep : n.transport.eps) ep = SimEndpoint();
  }

  // Whether a replica lost its disk and has not caught up: with kRejoin while its store is
  // marked; with kForget until it delivered what was chosen when it lost it.
  bool recovering(const Node& n) const {
    if (!n.lost) return false;
    if (disks_ == Disks::kRejoin) return n.store.rejoining();
    return n.log.size() <= lost_at_chosen_;
  }

  void restart(Node& n, bool lose_disk = false) {
    env_.trace(2002, n.id);
    net_.restart(n.id);
    n.up = true;
    if (lose_disk) {  // one at a time: two lost of three lose chosen values whatever the rule
      env_.trace(2005, n.id);
      ++disks_lost_;
      n.store = PaxosAcceptorStore();
      n.store.set_rejoining(disks_ == Disks::kRejoin);
      n.log.clear();  // it delivers from slot 1 again (on_chosen checks every value)
      n.lost = true;
      lost_at_chosen_ = 0;
      for (const auto& other : nodes_)
        lost_at_chosen_ = std::max(lost_at_chosen_, other.log.size());
    }
    for (uint32_t p = 0; p < kReplicas; ++p) {
      if (p != n.id && nodes_[p].up) connect(std::min(n.id, p), std::max(n.id, p));
    }
    start_stream(n);
  }

  static bool poll(void* ctx) {
    auto& n = *static_cast<Node*>(ctx);
    if (!n.up) return false;
    return poll_peers(
        n.transport.eps,
        [&](uint32_t p, uint32_t, std::span<const std::byte> m) { n.stream->on_message(p, m); },
        [&] { return n.stream != nullptr; });
  }

  void arm_tick(Node& n) {
    auto id = n.loop->add_timer(env_.now_ns() + kMs, &PaxosSim::tick, this, n.id);
    SHOAL_CHECK(id.ok());
  }
  static void tick(void* self, uint64_t node) {
    auto* s = static_cast<PaxosSim*>(self);
    Node& n = s->nodes_[node];
    if (n.up) n.stream->tick();
    s->arm_tick(n);
  }

  // Safety as it happens: one value per slot across all replicas, and a majority holds it.
  void on_chosen(Node& n, uint64_t slot, std::span<const std::byte> e) {
    if (slot != n.log.size() + 1)
      fail(fmt::format("replica {} delivered slot {} after {}", n.id, slot, n.log.size()));
    n.log.emplace_back(e.begin(), e.end());
    auto [it, first] = chosen_.try_emplace(slot, e.begin(), e.end());
    if (!first) {
      if (it->second != n.log.back()) {
        fail(fmt::format("slot {}: replica {} chose a different value", slot, n.id));
      }
      return;
    }
    env_.trace(2003, slot, entry_tid(e));
    // A replica that lost its disk since the slot was chosen (it cannot vote until it holds
    // it again) may leave it on fewer than a majority of stores: one at a time.
    uint32_t lost = 0;
    for (const auto& other : nodes_) lost += recovering(other) ? 1 : 0;
    if (holders(slot, e) + lost < kReplicas / 2 + 1) {
      fail(fmt::format("slot {} chosen but held by fewer than a majority", slot));
    }
    const uint64_t tid = entry_tid(e);
    if (tid != 0) client_[tid - 1].chosen = true;  // acknowledged to the client
  }

  uint32_t holders(uint64_t slot, std::span<const std::byte> e) const {
    uint32_t n = 0;
    for (const auto& node : nodes_) {
      const repl::PaxosSlot* s = node.store.find(slot);
      if (s != nullptr && s->value.same_bytes(e)) ++n;
    }
    return n;
  }

  void fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
  }

  // Proposes, at the current leader, entries never proposed or not chosen 100 ms after their
  // last proposal (a leader change may have given their slot to another value). An entry may
  // thus be chosen twice; replay deduplicates by TID (not this layer's job).
  static void client_tick(void* self, uint64_t) {
    auto* s = static_cast<PaxosSim*>(self);
    Node* leader = nullptr;
    for (auto& n : s->nodes_) {
      if (n.up && n.stream->is_leader()) leader = &n;
    }
    const uint64_t now = s->env_.now_ns();
    bool pending = false;
    uint32_t budget = 4;  // a few per tick spreads the entries over the chaos period
    for (ClientEntry& c : s->client_) {
      if (c.chosen) continue;
      pending = true;
      if (c.tid * s->release_spacing_ns_ > now) break;  // spread entries over the chaos
      if (leader == nullptr || budget == 0 || leader->stream->pipeline_room() == 0) break;
      if (c.proposals > 0 && now < c.last_proposed_ns + 100 * kMs) continue;
      const Bytes e = s->make_entry(leader->stream->next_slot(), c.tid);
      auto slot = leader->stream->propose(e);
      SHOAL_CHECK(slot.ok());
      s->env_.trace(2004, c.tid, *slot);
      c.last_proposed_ns = now;
      ++c.proposals;
      --budget;
    }
    if (pending) s->env_.after(s->chaos_.uniform(1, 4) * kMs, &PaxosSim::client_tick, self);
  }

  Bytes make_entry(uint64_t slot, uint64_t tid) {
    alignas(8) std::byte buf[256];
    repl::LogBatchBuilder b;
    b.reset(buf, {0, 0, 1, slot}, repl::BatchLimits{});
    const uint64_t key[1] = {tid};
    std::byte value[24];
    std::memcpy(value, &tid, 8);
    std::memset(value + 8, static_cast<int>(tid & 0xff), 16);
    const repl::TxnWrite w{1, repl::WriteOp::kPut, key, value};
    SHOAL_CHECK(b.append(tid, {}, {&w, 1}) == repl::AppendResult::kOk);
    const auto sealed = b.seal();
    return Bytes(sealed.begin(), sealed.end());
  }

  static void chaos_tick(void* self, uint64_t) {
    auto* s = static_cast<PaxosSim*>(self);
    if (s->env_.now_ns() >= s->chaos_until_ns_) return;
    Rng& r = s->chaos_;
    const auto a = static_cast<NodeId>(r.uniform(0, kReplicas - 1));
    const auto b = static_cast<NodeId>(r.uniform(0, kReplicas - 1));
    const uint64_t dice = r.uniform(0, 11);
    if (dice < 3 && a != b) {
      s->net_.partition(a, b);
    } else if (dice < 6) {
      s->net_.heal_all();
    } else if (dice == 6) {
      s->net_.isolate({a});
    } else if (dice <= 8) {
      // Crash a replica (at most two down at once; safety must hold anyway).
      uint32_t down = 0;
      for (auto& n : s->nodes_) down += n.up ? 0 : 1;
      if (s->nodes_[a].up && down < 2) s->crash(s->nodes_[a]);
    } else if (dice <= 10) {
      bool other_recovering = false;
      for (auto& n : s->nodes_) {
        if (n.lost && !s->recovering(n)) n.lost = false;
        other_recovering = other_recovering || s->recovering(n);
      }
      const bool lose = s->disks_ != Disks::kKept && !other_recovering && r.uniform(0, 2) == 0;
      if (!s->nodes_[a].up) s->restart(s->nodes_[a], lose);
    }
    s->env_.after(r.uniform(5, 40) * kMs, &PaxosSim::chaos_tick, self);
  }

  bool quiesced() const {
    if (!error_.empty()) return true;  // stop early; the error is reported
    for (const ClientEntry& c : client_) {
      if (!c.chosen) return false;
    }
    const uint64_t top = nodes_[0].stream->chosen_index();
    for (const auto& n : nodes_) {
      if (n.stream->chosen_index() != top) return false;
    }
    // Nothing in flight at the leader either (all proposals decided).
    for (const auto& n : nodes_) {
      if (n.stream->is_leader() && n.stream->next_slot() != top + 1) return false;
    }
    return true;
  }

  void final_checks() {
    for (const auto& n : nodes_) {
      if (n.log != nodes_[0].log) fail(fmt::format("replica {} log differs from replica 0", n.id));
    }
    for (uint64_t slot = 1; slot <= nodes_[0].log.size(); ++slot) {
      if (holders(slot, nodes_[0].log[slot - 1]) < kReplicas / 2 + 1) {
        fail(fmt::format("slot {} not on a majority at the end", slot));
      }
    }
  }

  SimEnv env_;
  SimNetwork net_;
  Rng chaos_;
  std::array<Node, kReplicas> nodes_;
  std::vector<ClientEntry> client_;
  std::map<uint64_t, Bytes> chosen_;  // slot -> the value first delivered anywhere
  std::string error_;
  uint64_t chaos_until_ns_ = 0;
  uint64_t release_spacing_ns_ = 0;
  uint64_t crashes_ = 0;
  Disks disks_;
  uint64_t disks_lost_ = 0;
  size_t lost_at_chosen_ = 0;
};

uint64_t seed_count() {
  const char* scale = std::getenv("SHOAL_TEST_SCALE");
  return scale != nullptr && std::string(scale) == "small" ? 20 : 1000;
}

RunResult run_seed(uint64_t seed, Disks disks = Disks::kKept) {
  // An always-on assert (e.g. the acceptor store's "two different values chosen") aborts.
  const AbortSeedHint hint("paxos sim", seed);
  PaxosSim sim(seed, kEntriesPerSeed, disks);
  return sim.run(1'500 * kMs);
}

TEST(PaxosSim, SafeAndLiveUnderFaultsOverManySeeds) {
  const uint64_t only = SimEnv::seed_from_env(0);
  const uint64_t first = only != 0 ? only : 5000;
  const uint64_t count = only != 0 ? 1 : seed_count();
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t slots = 0, proposals = 0, crashes = 0, elections = 0, noops = 0;
  for (uint64_t seed = first; seed < first + count; ++seed) {
    const RunResult r = run_seed(seed);
    ASSERT_TRUE(r.error.empty()) << r.error << "; " << r.hint;
    ASSERT_TRUE(r.finished) << r.hint;
    slots += r.slots;
    proposals += r.proposals;
    crashes += r.crashes;
    elections += r.elections;
    noops += r.noops;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "paxos sim: %lu seeds in %.1f s; %lu slots chosen, %lu proposals (%u entries per seed), "
      "%lu crashes, %lu elections, %lu no-ops\n",
      count, secs, slots, proposals, kEntriesPerSeed, crashes, elections, noops);
  EXPECT_GT(crashes, count / 2);  // the chaos did crash replicas
  EXPECT_GT(elections, count);    // and leaders changed
}

// A third of the restarts lose the replica's disk (one replica at a time): marked rejoining,
// every check holds on every seed.
TEST(PaxosSim, SafeAndLiveWhenDisksAreLost) {
  const uint64_t only = SimEnv::seed_from_env(0);
  const uint64_t first = only != 0 ? only : 9000;
  const uint64_t count = only != 0 ? 1 : seed_count() / 2;
  uint64_t lost = 0;
  // PAXOS_SIM_DISKS=forget: the planted mode (fails, or aborts on the store's "two different
  // values chosen" assert, naming the seed).
  const char* mode = std::getenv("PAXOS_SIM_DISKS");
  const Disks disks =
      mode != nullptr && std::string(mode) == "forget" ? Disks::kForget : Disks::kRejoin;
  for (uint64_t seed = first; seed < first + count; ++seed) {
    const RunResult r = run_seed(seed, disks);
    ASSERT_TRUE(r.error.empty()) << r.error << "; " << r.hint;
    ASSERT_TRUE(r.finished) << r.hint;
    lost += r.disks_lost;
  }
  std::printf("paxos sim: %lu seeds, %lu disks lost, rejoined without a vote\n", count, lost);
  if (only == 0) {
    EXPECT_GT(lost, count / 2);  // one seed alone may lose none
  }
}

TEST(PaxosSim, SameSeedSameTrace) {
  const uint64_t seed = SimEnv::seed_from_env(777);
  const RunResult a = run_seed(seed);
  const RunResult b = run_seed(seed);
  const RunResult other = run_seed(seed + 1);
  ASSERT_TRUE(a.finished && a.error.empty()) << a.error << "; " << a.hint;
  EXPECT_EQ(a.trace_hash, b.trace_hash) << "same seed, different run: " << a.hint;
  EXPECT_EQ(a.slots, b.slots);
  EXPECT_NE(a.trace_hash, other.trace_hash) << a.hint;
}

}  // namespace paxos_sim_test
}  // namespace shoal::sim
