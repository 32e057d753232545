// PaxosStream over a hand-stepped in-memory message queue (no simulator): basic choose, leader
// change that must keep an accepted-but-not-chosen value, holes filled by no-ops, a restarted
// acceptor catching up, duplicated/reordered/lost messages, malformed input, propose checks.
#include "src/repl/paxos_stream.h"

#include "src/net/ring_holds.h"
#include "src/repl/copy_count.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

namespace shoal::repl {
namespace paxos_stream_test {  // named, not anonymous: unique in a unity build

constexpr uint64_t kMs = 1'000'000;
using Bytes = std::vector<std::byte>;

class FakeEnv final : public Env {
 public:
  uint64_t now_ns() override { return now_; }
  uint64_t wall_us() override { return now_ / 1000; }
  void sleep_ns(uint64_t ns) override { now_ += ns; }
  uint64_t seed() override { return 7; }
  uint64_t now_ = 1'000 * kMs;
};

struct Packet {
  uint32_t from, to;
  Bytes bytes;
};

struct Queue;
class QueueTransport final : public PaxosTransport {
 public:
  // gather: takes messages with entries as pieces (what a leader's network links do), which
  // it joins into the packet as a wire would.
  QueueTransport(Queue* q, uint32_t self, bool gather = false)
      : q_(q), self_(self), gather_(gather) {}
  void send(uint32_t to, std::span<const std::byte> m) override;
  bool gathers() const override { return gather_; }
  void send_gather(uint32_t to, std::span<const std::span<const std::byte>> pieces) override {
    EXPECT_LE(pieces.size(), kPaxosGatherPiecesMax);
    Bytes joined;
    for (const std::span<const std::byte> p : pieces)
      joined.insert(joined.end(), p.begin(), p.end());
    send(to, joined);
  }

 private:
  Queue* q_;
  uint32_t self_;
  bool gather_;
};

struct Queue {
  std::deque<Packet> packets;
  // Return true to drop a packet instead of queueing it.
  std::function<bool(const Packet&)> drop;
  bool record = false;
  std::vector<Packet> sent;  // with record: every packet sent, dropped ones too
};

void QueueTransport::send(uint32_t to, std::span<const std::byte> m) {
  Packet p{self_, to, Bytes(m.begin(), m.end())};
  if (q_->record) q_->sent.push_back(p);
  if (q_->drop && q_->drop(p)) return;
  q_->packets.push_back(std::move(p));
}

// A sealed entry for `slot` carrying one record with commit TID `tid`.
Bytes make_entry(uint64_t slot, uint64_t tid, uint32_t stream = 0) {
  alignas(8) std::byte buf[512];
  LogBatchBuilder b;
  b.reset(buf, {0, stream, 1, slot}, BatchLimits{});
  const uint64_t key[1] = {tid};
  const std::byte value[16] = {std::byte{0x5a}};
  const TxnWrite w{1, WriteOp::kPut, key, value};
  EXPECT_EQ(b.append(tid, {}, {&w, 1}), AppendResult::kOk);
  const auto e = b.seal();
  return Bytes(e.begin(), e.end());
}

bool is_noop(const Bytes& e) {
  auto v = LogEntryView::parse(e);
  return v.ok() && (v->flags() & kLogFlagNoop) != 0;
}

// A follower's receive buffer that entries may stay in (what a shared-memory link's receive
// ring is to a real follower): the packet being delivered lives in a shared buffer, and keep()
// hands out EntryBuffers over its bytes, no copy.
class PacketKeeper final : public EntryKeeper {
 public:
  EntryBuffer keep(std::span<const std::byte> bytes) override {
    if (!packet || bytes.data() < packet->data() ||
        bytes.data() + bytes.size() > packet->data() + packet->size()) {
      return {};
    }
    ++kept;
    return EntryBuffer::adopt(
        std::shared_ptr<const uint64_t[]>(packet, reinterpret_cast<const uint64_t*>(bytes.data())),
        bytes.size());
  }
  std::shared_ptr<const Bytes> packet;  // during its delivery
  uint64_t kept = 0;
};

struct Cluster {
  explicit Cluster(uint32_t n = 3, PaxosOptions base = {}, uint64_t retain = uint64_t{1} << 16,
                   bool gather = false)
      : options(base), retain(retain) {
    options.replica_count = n;
    for (uint32_t i = 0; i < n; ++i) {
      transports.push_back(std::make_unique<QueueTransport>(&queue, i, gather));
      stores.push_back(std::make_unique<PaxosAcceptorStore>(retain));
      logs.emplace_back();
      streams.emplace_back();
      restart(i);
    }
  }
  void restart(uint32_t i) {
    PaxosOptions o = options;
    o.replica_id = i;
    streams[i] = std::make_unique<PaxosStream>(
        env, *transports[i], *stores[i], o, [this, i](uint64_t slot, const EntryBuffer& e) {
          ASSERT_EQ(slot, logs[i].size() + 1) << "chosen callback out of order";
          logs[i].emplace_back(e.span().begin(), e.span().end());
        });
  }
  void crash(uint32_t i) { streams[i].reset(); }
  // Replica i restarts over an empty store: its directory was lost. `rejoining`: it knows
  // (the durable mark a replica restarted over a lost directory gets), and *rejoined counts
  // its on_rejoined calls.
  void lose_state(uint32_t i, bool rejoining, int* rejoined = nullptr) {
    crash(i);
    stores[i] = std::make_unique<PaxosAcceptorStore>(retain);
    stores[i]->set_rejoining(rejoining);
    if (rejoined != nullptr) {
      PersistHooks h;
      h.on_rejoined = [rejoined] {
        ++*rejoined;
        return Status::Ok();
      };
      stores[i]->set_hooks(std::move(h));
    }
    logs[i].clear();
    restart(i);
  }
  // Delivers queued packets (and what they cause) in order; packets to crashed replicas are
  // lost. Bounded.
  void deliver() {
    for (int n = 0; n < 100'000 && !queue.packets.empty(); ++n) {
      Packet p = std::move(queue.packets.front());
      queue.packets.pop_front();
      if (!streams[p.to]) continue;
      PacketKeeper* k = p.to < keepers.size() ? keepers[p.to] : nullptr;
      if (k == nullptr) {
        streams[p.to]->on_message(p.from, p.bytes);
        continue;
      }
      k->packet = std::make_shared<const Bytes>(std::move(p.bytes));
      streams[p.to]->on_message(p.from, *k->packet, k);
      k->packet.reset();
    }
  }
  void run_ms(uint64_t ms) {
    for (uint64_t t = 0; t < ms; ++t) {
      env.now_ += kMs;
      for (auto& s : streams) {
        if (s) s->tick();
      }
      deliver();
    }
  }
  int leader() const {
    for (size_t i = 0; i < streams.size(); ++i) {
      if (streams[i] && streams[i]->is_leader()) return static_cast<int>(i);
    }
    return -1;
  }
  Result<uint64_t> propose(uint32_t at, uint64_t tid) {
    return streams[at]->propose(make_entry(streams[at]->next_slot(), tid));
  }
  // Replica `cut` hears nothing while replica 0 proposes (TIDs from *tid on) until slot `last`
  // is chosen; the cut stays (queue.drop) for the caller to lift.
  void choose_without(uint32_t cut, uint64_t last, uint64_t* tid) {
    queue.drop = [cut](const Packet& p) { return p.from == cut || p.to == cut; };
    for (int ms = 0; ms < 2000 && streams[0]->chosen_index() < last; ++ms) {
      while (streams[0]->pipeline_room() > 0 && streams[0]->next_slot() <= last) {
        ASSERT_TRUE(propose(0, (*tid)++).ok());
      }
      run_ms(1);
    }
  }
  // Every pair of logs agrees on their common prefix.
  void expect_prefix_consistent() const {
    for (size_t a = 0; a < logs.size(); ++a) {
      for (size_t b = a + 1; b < logs.size(); ++b) {
        const size_t n = std::min(logs[a].size(), logs[b].size());
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(logs[a][i], logs[b][i])
              << "replicas " << a << " and " << b << " slot " << i + 1;
        }
      }
    }
  }

  PaxosOptions options;
  uint64_t retain;
  FakeEnv env;
  Queue queue;
  std::vector<std::unique_ptr<QueueTransport>> transports;
  std::vector<std::unique_ptr<PaxosAcceptorStore>> stores;
  std::vector<std::unique_ptr<PaxosStream>> streams;
  std::vector<std::vector<Bytes>> logs;
  std::vector<PacketKeeper*> keepers;  // per replica: its receive buffer keeps entries (or null)
};

TEST(PaxosStream, ElectsReplicaZeroAndChoosesInOrder) {
  Cluster c;
  c.run_ms(100);
  ASSERT_EQ(c.leader(), 0);
  std::vector<Bytes> proposed;
  for (uint64_t i = 0; i < 10; ++i) {
    proposed.push_back(make_entry(c.streams[0]->next_slot(), 100 + i));
    auto slot = c.streams[0]->propose(proposed.back());
    ASSERT_TRUE(slot.ok()) << slot.status().to_string();
    EXPECT_EQ(*slot, i + 1);
  }
  c.run_ms(20);
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(c.streams[r]->chosen_index(), 10u) << "replica " << r;
    EXPECT_EQ(c.logs[r], proposed) << "replica " << r;
  }
  EXPECT_EQ(c.streams[0]->stats().stepped_down, 0u);
}

// What an entry costs in copies (copy_count.h): one into the leader's store, one into the
// accept message it broadcasts, one into each follower's store (the follower's aligned copy
// is what its store keeps: it used to copy it twice); a retransmitted accept of bytes a
// follower already holds costs it none.
TEST(PaxosStream, EachReplicaCopiesAnEntryOnceIntoItsStore) {
  Cluster c;
  c.run_ms(100);
  ASSERT_EQ(c.leader(), 0);
  const CopyCounts before = copy_counts();
  const Bytes entry = make_entry(c.streams[0]->next_slot(), 7);
  ASSERT_TRUE(c.streams[0]->propose(entry).ok());
  const std::deque<Packet> accepts = c.queue.packets;  // the broadcast, to replicas 1 and 2
  ASSERT_EQ(accepts.size(), 2u);
  c.deliver();
  const CopyCounts once = copy_counts() - before;
  const auto hop = [](const CopyCounts& d, CopyHop h) { return d.bytes[static_cast<size_t>(h)]; };
  EXPECT_EQ(once.entry_bytes_proposed, entry.size());
  EXPECT_EQ(once.entry_bytes_received, 2 * entry.size());
  EXPECT_EQ(hop(once, CopyHop::kAcceptorStore), 3 * entry.size());
  EXPECT_EQ(hop(once, CopyHop::kMessageBuild), entry.size());
  EXPECT_EQ(c.streams[1]->chosen_index() + c.streams[2]->chosen_index(), 0u);  // not told yet

  const CopyCounts middle = copy_counts();
  for (const Packet& p : accepts) c.streams[p.to]->on_message(p.from, p.bytes);
  c.deliver();
  const CopyCounts again = copy_counts() - middle;
  EXPECT_EQ(again.entry_bytes_received, 0u);
  EXPECT_EQ(hop(again, CopyHop::kAcceptorStore), 0u);
  c.run_ms(20);
  for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(c.logs[r], std::vector<Bytes>{entry}) << r;
}

// The leader's own sealed buffer (propose(EntryBuffer&&)) over a gathering transport: the
// leader copies nothing, neither into its store (which keeps that buffer) nor into its
// messages (their entries go as pieces), while every message on the wire, retransmitted
// accepts of several entries included, is byte for byte what the copying leader sends, and
// the followers end with the same logs. (The shed test below covers catch-up's gathers.)
TEST(PaxosStream, ALeaderProposingItsOwnBufferOverGatheringLinksCopiesNothing) {
  const auto hop = [](const CopyCounts& d, CopyHop h) { return d.bytes[static_cast<size_t>(h)]; };
  // The same run twice: proposing copies over a copying transport, then buffers over a
  // gathering one. Replica 2 misses the first dozen messages: their accepts are
  // retransmitted, several per message.
  struct Run {
    std::vector<Packet> sent;
    std::vector<std::vector<Bytes>> logs;
    CopyCounts leader_propose;  // the copies proposing made (the followers had nothing yet)
    CopyCounts all;
  };
  const auto run = [&](bool gather) {
    Cluster c(3, {}, uint64_t{1} << 16, gather);
    c.run_ms(100);
    EXPECT_EQ(c.leader(), 0);
    c.queue.record = true;
    uint64_t sent_to_2 = 0;
    c.queue.drop = [&](const Packet& p) { return p.to == 2 && ++sent_to_2 <= 12; };
    Run r;
    const CopyCounts start = copy_counts();
    for (uint64_t i = 0; i < 6; ++i) {
      const Bytes entry = make_entry(c.streams[0]->next_slot(), 500 + i);
      const CopyCounts before = copy_counts();
      auto slot = gather ? c.streams[0]->propose(EntryBuffer(entry), PaxosStream::EntryCheck::kFull)
                         : c.streams[0]->propose(entry);
      EXPECT_TRUE(slot.ok()) << slot.status().to_string();
      r.leader_propose += copy_counts() - before;
      c.run_ms(3);
    }
    c.run_ms(400);  // retransmission, heartbeats, catch-up of replica 2
    r.all = copy_counts() - start;
    r.sent = c.queue.sent;
    r.logs = c.logs;
    return r;
  };
  const Run copied = run(false);
  const Run gathered = run(true);
  uint64_t entry_bytes = 0;
  for (const Bytes& e : copied.logs[0]) entry_bytes += e.size();
  // Proposing: the copying leader copies each entry into its store and into the accept.
  EXPECT_EQ(hop(copied.leader_propose, CopyHop::kAcceptorStore), entry_bytes);
  EXPECT_EQ(hop(copied.leader_propose, CopyHop::kMessageBuild), entry_bytes);
  // ... the gathering one copies nothing, and nothing later either: every message_build copy
  // of the run (the retransmissions) is gone, and acceptor_store copies are the
  // followers' only (one per follower per entry).
  EXPECT_EQ(hop(gathered.leader_propose, CopyHop::kAcceptorStore), 0u);
  EXPECT_EQ(hop(gathered.leader_propose, CopyHop::kMessageBuild), 0u);
  EXPECT_GE(hop(copied.all, CopyHop::kMessageBuild), 2 * entry_bytes);  // and resent
  EXPECT_EQ(hop(gathered.all, CopyHop::kMessageBuild), 0u);
  EXPECT_EQ(hop(gathered.all, CopyHop::kAcceptorStore), 2 * entry_bytes);
  EXPECT_EQ(gathered.all.entry_bytes_proposed, entry_bytes);
  // The wire: the same messages, byte for byte.
  ASSERT_EQ(gathered.sent.size(), copied.sent.size());
  for (size_t i = 0; i < copied.sent.size(); ++i) {
    EXPECT_EQ(gathered.sent[i].from, copied.sent[i].from) << i;
    EXPECT_EQ(gathered.sent[i].to, copied.sent[i].to) << i;
    ASSERT_EQ(gathered.sent[i].bytes, copied.sent[i].bytes) << "message " << i;
  }
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(copied.logs[r].size(), 6u) << r;
    EXPECT_EQ(gathered.logs[r], copied.logs[0]) << r;
  }
}

// The follower's half: followers whose receive buffers can be kept (a shared-memory link's
// ring) store every entry where it arrived, accepted or learned, so with a leader proposing
// its own buffers over gathering links nobody copies an entry at all; the logs are the
// copying run's. Replica 2 misses the first dozen messages (retransmitted accepts, catch-up).
TEST(PaxosStream, FollowersKeepingTheirReceiveBuffersOverGatheringLinksCopyNothing) {
  const auto hop = [](const CopyCounts& d, CopyHop h) { return d.bytes[static_cast<size_t>(h)]; };
  const auto run = [&](bool keep, CopyCounts* counts, std::array<uint64_t, 3>* kept) {
    Cluster c(3, {}, uint64_t{1} << 16, /*gather=*/true);
    PacketKeeper keepers[3];
    if (keep) c.keepers = {nullptr, &keepers[1], &keepers[2]};
    c.run_ms(100);
    EXPECT_EQ(c.leader(), 0);
    uint64_t sent_to_2 = 0;
    c.queue.drop = [&](const Packet& p) { return p.to == 2 && ++sent_to_2 <= 12; };
    const CopyCounts start = copy_counts();
    for (uint64_t i = 0; i < 6; ++i) {
      const Bytes entry = make_entry(c.streams[0]->next_slot(), 700 + i);
      EXPECT_TRUE(c.streams[0]->propose(EntryBuffer(entry)).ok());
      c.run_ms(3);
    }
    c.run_ms(400);
    *counts = copy_counts() - start;
    for (uint32_t r = 0; r < 3; ++r) (*kept)[r] = c.streams[r]->stats().entries_kept;
    EXPECT_EQ(keepers[1].kept, (*kept)[1]);
    EXPECT_EQ(keepers[2].kept, (*kept)[2]);
    return c.logs;
  };
  CopyCounts copied_counts, kept_counts;
  std::array<uint64_t, 3> copied_kept{}, kept_kept{};
  const std::vector<std::vector<Bytes>> copied = run(false, &copied_counts, &copied_kept);
  const std::vector<std::vector<Bytes>> kept = run(true, &kept_counts, &kept_kept);
  uint64_t entry_bytes = 0;
  for (const Bytes& e : copied[0]) entry_bytes += e.size();
  // Copying followers copy each entry once into their stores; keeping ones not at all.
  EXPECT_EQ(hop(copied_counts, CopyHop::kAcceptorStore), 2 * entry_bytes);
  EXPECT_EQ(hop(kept_counts, CopyHop::kAcceptorStore), 0u);
  EXPECT_EQ(hop(kept_counts, CopyHop::kMessageBuild), 0u);
  EXPECT_EQ(kept_counts.entry_bytes_received, 2 * entry_bytes);
  EXPECT_EQ(copied_kept, (std::array<uint64_t, 3>{0, 0, 0}));
  EXPECT_EQ(kept_kept, (std::array<uint64_t, 3>{0, 6, 6}));
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(copied[r].size(), 6u) << r;
    EXPECT_EQ(kept[r], copied[0]) << r;
  }
}

// A follower's store holding kept ring regions lets go of them when it sheds its chosen
// slots (what a follower does when its receive ring runs short): the ring's release floor
// comes back up to the cursor; accepted slots not yet chosen stay held.
TEST(PaxosAcceptorStore, SheddingChosenSlotsReleasesTheirKeptRingRegions) {
  net::RingHolds* holds = net::RingHolds::create(16, nullptr, 0);
  std::vector<Bytes> entries;
  std::vector<std::vector<uint64_t>> ring(4);  // stands for the ring's bytes, 8-aligned
  PaxosAcceptorStore store(/*retain_chosen_slots=*/256);
  for (uint64_t slot = 1; slot <= 4; ++slot) {
    entries.push_back(make_entry(slot, 40 + slot));
    ring[slot - 1].resize((entries.back().size() + 7) / 8);
    std::memcpy(ring[slot - 1].data(), entries.back().data(), entries.back().size());
    const auto* at = reinterpret_cast<const uint8_t*>(ring[slot - 1].data());
    auto held = holds->hold(at, slot * 1000, entries.back().size());
    ASSERT_TRUE(held);
    ASSERT_TRUE(
        store.accept(slot, 5, EntryBuffer::adopt(std::move(held), entries.back().size())).ok());
  }
  for (uint64_t slot = 1; slot <= 3; ++slot) store.mark_chosen(slot);
  EXPECT_EQ(store.advance(), 3u);
  store.trim();  // within the retention: nothing goes
  EXPECT_EQ(holds->floor(9000), 1000u);
  EXPECT_EQ(store.shed_chosen(/*keep_copies=*/false), 3u);
  EXPECT_EQ(holds->floor(9000), 4000u);  // slot 4, accepted only, still held
  ASSERT_NE(store.find(4), nullptr);
  EXPECT_TRUE(store.find(4)->value.same_bytes(entries[3]));
  store.mark_chosen(4);
  EXPECT_EQ(store.advance(), 4u);
  EXPECT_EQ(store.shed_chosen(false), 1u);
  EXPECT_EQ(holds->floor(9000), 9000u);
  // Still short with slots accepted only (the leader waits for credit and will not send the
  // chosen index that lets them go): copy_out() copies the ring's ones, leaving the others.
  auto held =
      holds->hold(reinterpret_cast<const uint8_t*>(ring[0].data()), 9000, entries[0].size());
  ASSERT_TRUE(held);
  const Bytes other = make_entry(6, 46);
  ASSERT_TRUE(store.accept(5, 5, EntryBuffer::adopt(std::move(held), entries[0].size())).ok());
  ASSERT_TRUE(store.accept(6, 5, other).ok());
  const auto* ring_bytes = reinterpret_cast<const std::byte*>(ring[0].data());
  const CopyCounts before = copy_counts();
  EXPECT_EQ(store.copy_out([&](std::span<const std::byte> b) { return b.data() == ring_bytes; }),
            1u);
  EXPECT_EQ((copy_counts() - before).bytes[static_cast<size_t>(CopyHop::kAcceptorStore)],
            entries[0].size());
  EXPECT_EQ(holds->floor(9500), 9500u);  // let go
  EXPECT_TRUE(store.find(5)->value.same_bytes(entries[0]));
  EXPECT_NE(store.find(5)->value.span().data(), ring_bytes);
  EXPECT_TRUE(store.find(6)->value.same_bytes(other));
  holds->unref();
}

// Followers that answer every accept 15 ms after it was sent (a WAL sync slower than the
// 10 ms retransmit period): the leader learns their answer time and stops sending the
// entries again; the first ones, before any answer came back, are still re-sent once.
TEST(PaxosStream, AcceptsAreNotResentToFollowersThatAnswerSlowlyButSurely) {
  Cluster c;
  c.run_ms(100);
  ASSERT_EQ(c.leader(), 0);
  constexpr uint64_t kAnswerDelayMs = 15;
  std::deque<std::pair<uint64_t, Packet>> answers;  // (due time, packet to the leader)
  // One ms: followers' answers are held for kAnswerDelayMs, everything else goes at once.
  auto step = [&] {
    c.env.now_ += kMs;
    for (auto& st : c.streams) st->tick();
    for (int n = 0; n < 10'000 && !c.queue.packets.empty(); ++n) {  // bounded
      Packet p = std::move(c.queue.packets.front());
      c.queue.packets.pop_front();
      if (p.to == 0) {
        answers.emplace_back(c.env.now_ + kAnswerDelayMs * kMs, std::move(p));
      } else {
        c.streams[p.to]->on_message(p.from, p.bytes);
      }
    }
    while (!answers.empty() && answers.front().first <= c.env.now_) {
      c.streams[0]->on_message(answers.front().second.from, answers.front().second.bytes);
      answers.pop_front();
    }
  };
  uint64_t retransmits_late = 0;
  for (int i = 0; i < 200; ++i) {  // an entry every 2 ms for 400 ms
    if (i == 100) retransmits_late = c.streams[0]->stats().retransmits;
    ASSERT_TRUE(c.propose(0, 1000 + static_cast<uint64_t>(i)).ok());
    step();
    step();
  }
  for (int i = 0; i < 50; ++i) step();
  EXPECT_EQ(c.streams[0]->stats().retransmits, retransmits_late)
      << "entries re-sent after the answer time was learnt";
  EXPECT_EQ(c.streams[0]->chosen_index(), 200u);
  for (uint32_t r = 1; r < 3; ++r) EXPECT_EQ(c.logs[r], c.logs[0]) << r;
}

TEST(CopyCount, CopiesPerReplicatedByteCountALeadersCopiesOncePerFollower) {
  CopyCounts leader, followers;
  leader.entry_bytes_proposed = 1000;
  leader.bytes[static_cast<size_t>(CopyHop::kAcceptorStore)] = 1000;
  leader.bytes[static_cast<size_t>(CopyHop::kMessageBuild)] = 1000;
  leader.bytes[static_cast<size_t>(CopyHop::kRingWrite)] = 2000;  // one per follower
  followers.entry_bytes_received = 2000;                          // two followers
  followers.bytes[static_cast<size_t>(CopyHop::kAcceptorStore)] = 2000;
  followers.bytes[static_cast<size_t>(CopyHop::kWalWrite)] = 2000;
  const CopiesPerByte c = copies_per_byte(leader, followers);
  EXPECT_DOUBLE_EQ(c.user, 3.0);  // (1000 + 1000 + 2000 + 2000) / 2000
  EXPECT_DOUBLE_EQ(c.kernel, 1.0);
  EXPECT_DOUBLE_EQ(c.per_hop[static_cast<size_t>(CopyHop::kAcceptorStore)], 1.5);
  EXPECT_DOUBLE_EQ(copies_per_byte(leader, CopyCounts{}).user, 0.0);  // nothing replicated
}

TEST(PaxosStream, ProposeChecks) {
  PaxosOptions o;
  o.pipeline_slots = 4;
  Cluster c(3, o);
  c.run_ms(100);
  ASSERT_EQ(c.leader(), 0);
  EXPECT_EQ(c.propose(1, 1).status().code(), Code::kUnavailable);  // a follower
  EXPECT_EQ(c.streams[0]->propose(make_entry(5, 1)).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(c.streams[0]->propose(make_entry(1, 1, /*stream=*/3)).status().code(),
            Code::kInvalidArgument);
  Bytes bad = make_entry(1, 1);
  bad[100] ^= std::byte{1};  // checksum no longer matches
  EXPECT_EQ(c.streams[0]->propose(bad).status().code(), Code::kCorruption);
  // Nothing is answered: the pipeline bound stops the fifth proposal.
  c.queue.drop = [](const Packet&) { return true; };
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(c.propose(0, 10 + i).ok());
  EXPECT_EQ(c.streams[0]->pipeline_room(), 0u);
  EXPECT_EQ(c.propose(0, 20).status().code(), Code::kUnavailable);
  c.queue.drop = nullptr;
  c.run_ms(30);  // retransmission gets them chosen
  EXPECT_EQ(c.streams[2]->chosen_index(), 4u);
  EXPECT_EQ(c.streams[0]->pipeline_room(), 4u);
}

// The leader's value reached one acceptor only and nobody learned it was chosen; the leader
// dies. The next leader must find it in phase 1 and choose it at the same slot.
TEST(PaxosStream, LeaderChangeKeepsAcceptedButNotChosenValue) {
  Cluster c;
  c.run_ms(100);
  ASSERT_EQ(c.leader(), 0);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(c.propose(0, i).ok());
  c.run_ms(10);
  const Bytes x = make_entry(4, 777);
  // Only 0 -> 2 gets through: 2 accepts x, its answer is lost, 1 never sees x.
  c.queue.drop = [](const Packet& p) { return !(p.from == 0 && p.to == 2); };
  ASSERT_EQ(*c.streams[0]->propose(x), 4u);
  c.deliver();
  EXPECT_EQ(c.stores[2]->find(4)->value.same_bytes(x), true);
  EXPECT_EQ(c.stores[1]->find(4), nullptr);
  c.queue.drop = nullptr;
  c.crash(0);
  c.run_ms(200);
  ASSERT_EQ(c.leader(), 1);
  EXPECT_GE(c.streams[1]->stats().reproposed, 1u);
  ASSERT_EQ(c.logs[1].size(), 4u);
  EXPECT_EQ(c.logs[1][3], x);
  EXPECT_EQ(c.logs[2][3], x);
  // The old leader restarts over its durable store and catches up.
  c.restart(0);
  ASSERT_TRUE(c.propose(1, 900).ok());
  c.run_ms(100);
  EXPECT_EQ(c.leader(), 1);  // no needless takeover by the lower id
  for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(c.logs[r].size(), 5u) << "replica " << r;
  c.expect_prefix_consistent();
}

// A value only the dead leader holds is not chosen; if a later slot was accepted elsewhere,
// the new leader fills the hole with a no-op, and the restarted old leader learns the no-op
// over its own stale accepted value.
TEST(PaxosStream, HoleBecomesNoopAndStaleAcceptIsReplaced) {
  Cluster c;
  c.run_ms(100);
  ASSERT_EQ(c.leader(), 0);
  ASSERT_TRUE(c.propose(0, 1).ok());
  c.run_ms(10);
  c.queue.drop = [](const Packet&) { return true; };
  const Bytes x = make_entry(2, 222);
  ASSERT_EQ(*c.streams[0]->propose(x), 2u);  // only replica 0 holds x
  c.queue.drop = [](const Packet& p) { return !(p.from == 0 && p.to == 2); };
  const Bytes y = make_entry(3, 333);
  ASSERT_EQ(*c.streams[0]->propose(y), 3u);  // 0 and 2 hold y
  c.deliver();
  c.queue.drop = nullptr;
  c.crash(0);
  c.run_ms(200);
  ASSERT_EQ(c.leader(), 1);
  ASSERT_EQ(c.logs[1].size(), 3u);
  EXPECT_TRUE(is_noop(c.logs[1][1]));
  EXPECT_EQ(c.logs[1][2], y);
  EXPECT_TRUE(c.stores[0]->find(2)->value.same_bytes(x));  // stale, not chosen
  c.restart(0);
  c.run_ms(100);
  ASSERT_EQ(c.logs[0].size(), 3u);
  EXPECT_TRUE(is_noop(c.logs[0][1]));
  c.expect_prefix_consistent();
}

// Messages arrive shuffled, duplicated and sometimes not at all: the logs still agree and
// every proposal is chosen (no leader change happens at this loss rate).
TEST(PaxosStream, DuplicatedReorderedAndLostMessages) {
  Cluster c;
  c.run_ms(100);
  ASSERT_EQ(c.leader(), 0);
  Rng rng(99);
  uint64_t proposed = 0;
  for (int ms = 0; ms < 2'000; ++ms) {
    c.env.now_ += kMs;
    for (auto& s : c.streams) s->tick();
    while (proposed < 300 && c.streams[0]->pipeline_room() > 0 && rng.uniform(0, 2) == 0) {
      ASSERT_TRUE(c.propose(0, 1000 + proposed).ok());
      ++proposed;
    }
    // Shuffle what is queued, duplicate some, drop some, then deliver that batch.
    std::vector<Packet> batch(std::make_move_iterator(c.queue.packets.begin()),
                              std::make_move_iterator(c.queue.packets.end()));
    c.queue.packets.clear();
    for (size_t i = batch.size(); i > 1; --i) std::swap(batch[i - 1], batch[rng.uniform(0, i - 1)]);
    for (const Packet& p : batch) {
      const uint64_t dice = rng.uniform(0, 9);
      if (dice == 0) continue;  // lost
      c.streams[p.to]->on_message(p.from, p.bytes);
      if (dice <= 3) c.streams[p.to]->on_message(p.from, p.bytes);  // duplicate
    }
  }
  c.run_ms(100);
  EXPECT_EQ(proposed, 300u);
  for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(c.logs[r].size(), 300u) << "replica " << r;
  c.expect_prefix_consistent();
  EXPECT_EQ(c.streams[0]->stats().stepped_down, 0u);
  EXPECT_GT(c.streams[0]->stats().retransmits, 0u);
}

TEST(PaxosStream, MalformedMessagesAreDropped) {
  Cluster c;
  c.run_ms(100);
  ASSERT_TRUE(c.propose(0, 5).ok());
  // Capture a real accept (with an entry) from 0 to 1.
  ASSERT_FALSE(c.queue.packets.empty());
  const Packet accept = c.queue.packets.front();
  c.deliver();
  PaxosStream& s = *c.streams[1];
  const uint64_t before = s.stats().malformed;
  for (size_t cut = 0; cut < accept.bytes.size(); cut += 8) {
    s.on_message(0, std::span(accept.bytes).first(cut));
  }
  s.on_message(2, accept.bytes);  // claims another sender
  Bytes flipped = accept.bytes;
  flipped[3] = std::byte{99};  // unknown type
  s.on_message(0, flipped);
  flipped = accept.bytes;
  flipped[8] ^= std::byte{1};  // other stream
  s.on_message(0, flipped);
  EXPECT_EQ(s.stats().malformed - before, accept.bytes.size() / 8 + 3);
  // A corrupted entry value inside a well-formed message is refused, not stored.
  flipped = accept.bytes;
  flipped.back() ^= std::byte{1};
  const uint64_t bad = s.stats().bad_entries;
  c.stores[1] = std::make_unique<PaxosAcceptorStore>();
  c.restart(1);
  c.streams[1]->on_message(0, flipped);
  EXPECT_EQ(c.streams[1]->stats().bad_entries, bad + 1);
  EXPECT_EQ(c.stores[1]->find(1), nullptr);
}

TEST(PaxosStream, SingleReplicaChoosesAtOnce) {
  Cluster c(1);
  c.run_ms(100);
  ASSERT_EQ(c.leader(), 0);
  ASSERT_TRUE(c.propose(0, 1).ok());
  EXPECT_EQ(c.streams[0]->chosen_index(), 1u);
  EXPECT_EQ(c.logs[0].size(), 1u);
}

// Entry buffers are shared by reference (a follower's store and its replay queue) and their
// blocks are pooled: a share outlives the original, and a reused block never shows a
// previous entry's bytes beyond the new entry's size (the span is exact).
TEST(EntryBuffer, SharesOutliveTheOriginalAndPooledBlocksHoldOnlyTheirBytes) {
  std::vector<std::byte> big(100'000), small(40);
  for (size_t i = 0; i < big.size(); ++i) big[i] = std::byte(i * 7);
  for (size_t i = 0; i < small.size(); ++i) small[i] = std::byte(0xA0 + i);
  EntryBuffer shared;
  {
    EntryBuffer original(big);
    shared = original.share();
    EXPECT_EQ(shared.span().data(), original.span().data());  // one copy, two handles
  }
  ASSERT_TRUE(shared.same_bytes(big));  // the share keeps the block alive
  shared = EntryBuffer();               // back to the pool
  EXPECT_TRUE(shared.empty());
  for (int round = 0; round < 100; ++round) {  // blocks come back from the pool
    EntryBuffer a(big), b(small);
    ASSERT_TRUE(a.same_bytes(big));
    ASSERT_EQ(b.span().size(), small.size());
    ASSERT_TRUE(b.same_bytes(small));
  }
  EXPECT_TRUE(EntryBuffer(std::span<const std::byte>{}).empty());
}

}  // namespace paxos_stream_test
}  // namespace shoal::repl

namespace shoal::repl {
namespace paxos_stream_test {  // named, not anonymous: unique in a unity build

// An accepted (not chosen) suffix larger than one message: the new leader's phase 1 pages
// through it (incomplete promises, same ballot, next page after the shortest one) and keeps
// every value at its slot. Before paging, such a candidate retried forever.
TEST(PaxosStream, PhaseOnePagesThroughAnAcceptedSuffixLargerThanAMessage) {
  PaxosOptions o;
  o.max_message_bytes = 2048;  // ~13 of these entries per message
  Cluster c(3, o);
  c.run_ms(100);
  ASSERT_EQ(c.leader(), 0);
  // Only 0 -> 2 gets through: 2 accepts 40 values, nobody learns they were chosen.
  c.queue.drop = [](const Packet& p) { return !(p.from == 0 && p.to == 2); };
  std::vector<Bytes> proposed;
  for (uint64_t i = 0; i < 40; ++i) {
    proposed.push_back(make_entry(c.streams[0]->next_slot(), 1000 + i));
    ASSERT_TRUE(c.streams[0]->propose(proposed.back()).ok());
  }
  c.deliver();
  c.crash(0);
  c.queue.drop = nullptr;
  c.run_ms(400);
  ASSERT_EQ(c.leader(), 1);
  c.run_ms(50);
  for (uint32_t r = 1; r < 3; ++r) {
    ASSERT_EQ(c.streams[r]->chosen_index(), 40u) << "replica " << r;
    EXPECT_EQ(c.logs[r], proposed) << "replica " << r;
  }
}

// The same suffix over a slow network: every message takes 0.3 election timeouts, so paging
// through it takes longer than one election timeout. Each page that comes back is progress
// and extends the candidate's deadline; before that, every election started over from the
// same place and the stream stayed leaderless (seen on a loaded machine).
TEST(PaxosStream, SlowPhaseOnePagingStillElects) {
  PaxosOptions o;
  o.max_message_bytes = 2048;
  Cluster c(3, o);
  c.run_ms(100);
  ASSERT_EQ(c.leader(), 0);
  c.queue.drop = [](const Packet& p) { return !(p.from == 0 && p.to == 2); };
  std::vector<Bytes> proposed;
  for (uint64_t i = 0; i < 60; ++i) {
    proposed.push_back(make_entry(c.streams[0]->next_slot(), 1000 + i));
    ASSERT_TRUE(c.streams[0]->propose(proposed.back()).ok());
  }
  c.deliver();
  c.crash(0);
  c.queue.drop = nullptr;
  const uint64_t step_ns = o.election_timeout_ns * 3 / 10;
  std::deque<Packet> in_flight;  // sent during the previous step
  for (int i = 0; i < 200 && c.leader() != 1; ++i) {
    c.env.now_ += step_ns;
    for (auto& s : c.streams) {
      if (s) s->tick();
    }
    std::deque<Packet> arriving = std::move(in_flight);
    in_flight.clear();
    while (!arriving.empty()) {
      Packet p = std::move(arriving.front());
      arriving.pop_front();
      if (c.streams[p.to]) c.streams[p.to]->on_message(p.from, p.bytes);
    }
    in_flight = std::move(c.queue.packets);
    c.queue.packets.clear();
  }
  ASSERT_EQ(c.leader(), 1);
  c.run_ms(50);
  for (uint32_t r = 1; r < 3; ++r) {
    ASSERT_EQ(c.streams[r]->chosen_index(), 60u) << "replica " << r;
    EXPECT_EQ(c.logs[r], proposed) << "replica " << r;
  }
}

}  // namespace paxos_stream_test
}  // namespace shoal::repl

namespace shoal::repl {
namespace paxos_stream_test {  // named, not anonymous: unique in a unity build

// defer_self_ack: the leader's own vote counts only once note_self_durable says its WAL has it.
// With one follower down, a slot needs that vote; with both up, the followers choose alone.
TEST(PaxosStream, DeferredSelfAckCountsOnlyWhenDurable) {
  PaxosOptions o;
  o.defer_self_ack = true;
  Cluster c(3, o);
  c.run_ms(100);
  ASSERT_EQ(c.leader(), 0);
  ASSERT_TRUE(c.propose(0, 1).ok());
  c.run_ms(5);
  EXPECT_EQ(c.streams[0]->chosen_index(), 1u);  // replicas 1 and 2 are a majority
  c.crash(2);
  ASSERT_TRUE(c.propose(0, 2).ok());
  c.run_ms(5);
  EXPECT_EQ(c.streams[0]->chosen_index(), 1u);  // 0 (not durable yet) + 1: not enough
  c.streams[0]->note_self_durable(c.streams[0]->ballot() + 1, 2);  // another ballot: ignored
  EXPECT_EQ(c.streams[0]->chosen_index(), 1u);
  c.streams[0]->note_self_durable(c.streams[0]->ballot(), 2);
  EXPECT_EQ(c.streams[0]->chosen_index(), 2u);
}

// may_lead = false (the followers of a replicated shard): replica 0 silent past the election
// timeout makes no follower a candidate; replica 0 leads again once it is back. With
// followers allowed to lead, replica 1 took over and replica 0, hearing its heartbeats, never
// led again: a shard whose workers (on replica 0) could then propose nothing, for good.
// Restarts every replica but `leader` as one that may not lead (a replicated shard's followers).
void only_one_may_lead(Cluster& c, uint32_t leader) {
  for (uint32_t r = 0; r < c.streams.size(); ++r) {
    if (r == leader) continue;
    c.options.may_lead = false;
    c.restart(r);
  }
  c.options.may_lead = true;
}

TEST(PaxosStream, FollowersThatMayNotLeadLeaveTheLeadToReplicaZero) {
  PaxosOptions o;
  Cluster c(3, o);
  only_one_may_lead(c, 0);
  c.run_ms(100);
  ASSERT_EQ(c.leader(), 0);
  ASSERT_TRUE(c.propose(0, 1).ok());
  c.run_ms(10);
  // Replica 0 starved: nothing from it reaches the others for many election timeouts.
  c.queue.drop = [](const Packet& p) { return p.from == 0; };
  c.run_ms(500);
  EXPECT_EQ(c.streams[1]->stats().elections, 0u);
  EXPECT_EQ(c.streams[2]->stats().elections, 0u);
  EXPECT_NE(c.leader(), 1);
  EXPECT_NE(c.leader(), 2);
  c.queue.drop = nullptr;
  c.run_ms(200);
  ASSERT_EQ(c.leader(), 0);
  ASSERT_TRUE(c.propose(0, 2).ok());
  c.run_ms(10);
  EXPECT_EQ(c.streams[0]->chosen_index(), 2u);
  c.expect_prefix_consistent();
}

// A leader that only the configuration manager replaces (a replicated shard's, appointed by
// etcd: its followers may not lead) hears no majority for many election timeouts (its
// followers starved of CPU on a loaded machine), then hears them again. Returns whether it
// leads at the end and the chosen index it reached.
std::pair<bool, uint64_t> lead_through_silence(bool step_down_without_majority) {
  PaxosOptions o;
  Cluster c(3, o);
  only_one_may_lead(c, 2);
  c.options.step_down_without_majority = step_down_without_majority;
  c.restart(2);
  c.streams[2]->campaign();  // appointed
  c.run_ms(100);
  EXPECT_EQ(c.leader(), 2);
  EXPECT_TRUE(c.propose(2, 1).ok());
  c.run_ms(10);
  EXPECT_EQ(c.streams[2]->chosen_index(), 1u);
  c.queue.drop = [](const Packet& p) { return p.to == 2; };  // nothing reaches the leader
  c.run_ms(10 * o.election_timeout_ns / 1'000'000);
  c.queue.drop = nullptr;
  c.run_ms(200);
  if (c.streams[2]->is_leader()) {
    EXPECT_TRUE(c.propose(2, 2).ok());
    c.run_ms(10);
  }
  c.expect_prefix_consistent();
  return {c.streams[2]->is_leader(), c.streams[2]->chosen_index()};
}

// Stepped down, it never led again: the followers may not stand and a lower-numbered replica
// lives, so it does not either; its shard chose nothing more, for good (a region kill's
// collapse: docs/RESULTS.md, the failover campaign). Kept leading, it chooses again.
TEST(PaxosStream, ALeaderOnlyTheConfigurationReplacesLeadsThroughASilence) {
  const auto [leads, chosen] = lead_through_silence(/*step_down_without_majority=*/false);
  EXPECT_TRUE(leads);
  EXPECT_EQ(chosen, 2u);
  const auto [stepped_leads, stepped_chosen] = lead_through_silence(true);
  EXPECT_FALSE(stepped_leads);  // the old behaviour, which its default keeps
  EXPECT_EQ(stepped_chosen, 1u);
}

// The hazard of a replica that lost its directory (docs/REPLICATION.md, "A replica that lost
// its directory rejoins without a vote"): slot 4 = x is chosen by {0, 1} while 2 lags; 1
// restarts over an empty store and 0 dies. Returns x and leaves 1 and 2 running.
Bytes lose_a_chosen_slots_majority(Cluster& c, bool rejoining, int* rejoined) {
  c.run_ms(100);
  EXPECT_EQ(c.leader(), 0);
  for (uint64_t i = 0; i < 3; ++i) EXPECT_TRUE(c.propose(0, i + 1).ok());
  c.run_ms(10);
  uint64_t tid = 100;
  c.choose_without(2, 4, &tid);
  EXPECT_EQ(c.streams[0]->chosen_index(), 4u);
  EXPECT_EQ(c.streams[2]->chosen_index(), 3u);
  EXPECT_EQ(c.stores[2]->find(4), nullptr);  // 2 never saw x
  const Bytes x = c.logs[0][3];
  c.queue.drop = nullptr;
  c.crash(0);
  c.lose_state(1, rejoining, rejoined);
  return x;
}

// Without the mark, the empty replica's promise completes phase 1 with the lagging one and
// the chosen x is replaced: what the rejoin rule closes.
TEST(PaxosStream, AnAcceptorThatLostItsStateAndVotesLosesAChosenValue) {
  Cluster c;
  const Bytes x = lose_a_chosen_slots_majority(c, /*rejoining=*/false, nullptr);
  c.run_ms(300);  // 1, the lowest live replica, stands; 2 promises
  ASSERT_EQ(c.leader(), 1);
  ASSERT_TRUE(c.propose(1, 555).ok());
  c.run_ms(20);
  ASSERT_GE(c.logs[1].size(), 4u);
  EXPECT_NE(c.logs[1][3], x) << "slot 4 kept x: the hazard did not reproduce";
  EXPECT_EQ(c.logs[1][3], c.logs[2][3]);  // chosen again, with another value
}

// With the mark, 1 answers no prepare and stands for nothing: 2 cannot complete phase 1 with
// it, the shard waits for a replica that holds x (0 restarts), whose phase 1 with 2 keeps x.
// 1 then catches up from 0 without a vote and votes once 2 accepted in 0's ballot after 1
// first answered and 1 holds 0's log up to the tail it had then: then 0 and 1 choose
// without 2.
TEST(PaxosStream, AnAcceptorThatLostItsStateRejoinsWithoutAVoteUntilCaughtUp) {
  Cluster c;
  int rejoined = 0;
  const Bytes x = lose_a_chosen_slots_majority(c, /*rejoining=*/true, &rejoined);
  c.run_ms(300);
  EXPECT_EQ(c.leader(), -1);
  EXPECT_GT(c.streams[1]->stats().rejoin_elections_refused, 0u);
  c.streams[2]->campaign();  // 2 stands: 0 is dead and 1 must stay silent
  c.run_ms(300);
  EXPECT_EQ(c.leader(), -1) << "a phase 1 completed with the empty replica's promise";
  EXPECT_GT(c.streams[1]->stats().rejoin_prepares_ignored, 0u);
  EXPECT_EQ(c.stores[1]->promised(), 0u);  // an ignored prepare changes nothing
  EXPECT_TRUE(c.stores[1]->rejoining());

  c.restart(0);  // its store holds x chosen
  c.run_ms(300);
  ASSERT_EQ(c.leader(), 0);
  ASSERT_TRUE(c.propose(0, 200).ok());
  c.run_ms(50);
  EXPECT_FALSE(c.stores[1]->rejoining());
  EXPECT_EQ(rejoined, 1);
  EXPECT_EQ(c.streams[1]->stats().rejoined, 1u);
  EXPECT_GT(c.streams[0]->stats().nonvoting_replies, 0u);
  for (uint32_t r = 0; r < 3; ++r) {
    ASSERT_EQ(c.logs[r].size(), 5u) << "replica " << r;
    EXPECT_EQ(c.logs[r][3], x) << "replica " << r;
  }
  c.expect_prefix_consistent();

  c.crash(2);  // 1 votes now: {0, 1} choose
  ASSERT_TRUE(c.propose(0, 201).ok());
  c.run_ms(20);
  EXPECT_EQ(c.streams[0]->chosen_index(), 6u);
  EXPECT_EQ(c.logs[1].size(), 6u);
}

// A rejoining acceptor stores what the leader sends (durably, like any acceptance) but its
// acceptances choose nothing: with the third replica down, the leader and it choose nothing
// until that replica is back (it must accept in the leader's ballot before the rejoiner
// votes). With two replicas the leader is the only other one: the rejoiner votes once it
// holds the leader's log.
TEST(PaxosStream, ARejoiningAcceptorsAcceptancesChooseNothing) {
  Cluster c;
  c.run_ms(100);
  ASSERT_EQ(c.leader(), 0);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(c.propose(0, i + 1).ok());
  c.run_ms(10);
  c.crash(2);
  int rejoined = 0;
  c.lose_state(1, /*rejoining=*/true, &rejoined);
  ASSERT_TRUE(c.propose(0, 4).ok());
  c.run_ms(30);
  EXPECT_EQ(c.streams[0]->chosen_index(), 3u) << "a rejoining acceptor's acceptance counted";
  ASSERT_NE(c.stores[1]->find(4), nullptr);
  EXPECT_FALSE(c.stores[1]->find(4)->value.empty());  // stored all the same
  EXPECT_EQ(c.stores[1]->chosen_index(), 3u);         // caught up to the chosen index...
  EXPECT_TRUE(c.stores[1]->rejoining());              // ... but nothing chosen past its tail
  c.restart(2);
  c.run_ms(300);
  const int leader = c.leader();
  ASSERT_GE(leader, 0);
  ASSERT_NE(leader, 1);
  for (uint64_t i = 0; i < 2; ++i)
    ASSERT_TRUE(c.propose(static_cast<uint32_t>(leader), 10 + i).ok());
  c.run_ms(50);
  EXPECT_FALSE(c.stores[1]->rejoining());
  EXPECT_EQ(rejoined, 1);
  EXPECT_EQ(c.logs[1].size(), c.logs[leader].size());
  c.expect_prefix_consistent();

  Cluster two(2);
  two.run_ms(100);
  ASSERT_EQ(two.leader(), 0);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(two.propose(0, i + 1).ok());
  two.run_ms(10);
  two.lose_state(1, /*rejoining=*/true);
  ASSERT_TRUE(two.propose(0, 4).ok());
  two.run_ms(50);
  EXPECT_FALSE(two.stores[1]->rejoining());
  EXPECT_EQ(two.streams[0]->chosen_index(), 4u);
  EXPECT_EQ(two.logs[1].size(), 4u);
}

// The same for a value re-proposed after an election: a new leader that found x (accepted by
// one acceptor only) in phase 1 counts its own acceptance of x in its ballot only once
// note_self_durable says so. Before, it counted at once, and x was chosen on one follower's
// acceptance plus a vote the new leader's WAL might not have had.
TEST(PaxosStream, DeferredSelfAckCoversReproposals) {
  PaxosOptions o;
  o.defer_self_ack = true;
  Cluster c(3, o);
  c.run_ms(100);
  ASSERT_EQ(c.leader(), 0);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(c.propose(0, i).ok());
  c.run_ms(10);
  ASSERT_EQ(c.streams[0]->chosen_index(), 3u);
  const Bytes x = make_entry(4, 777);
  c.queue.drop = [](const Packet& p) { return !(p.from == 0 && p.to == 2); };
  ASSERT_EQ(*c.streams[0]->propose(x), 4u);
  c.deliver();
  ASSERT_TRUE(c.stores[2]->find(4) != nullptr && c.stores[2]->find(4)->value.same_bytes(x));
  // Replica 2 still promises and hears heartbeats (accepts without entries), but accepts
  // nothing more (type 3, accept, with entries; REPLICATION.md "Wire format"): the new
  // leader's re-proposal of x gets no acceptance from it.
  c.queue.drop = [](const Packet& p) {
    return p.to == 2 && p.bytes.size() > 44 && static_cast<uint8_t>(p.bytes[3]) == 3 &&
           load_u32(p.bytes.data() + 40) > 0;
  };
  c.crash(0);
  c.run_ms(200);
  ASSERT_EQ(c.leader(), 1);
  EXPECT_GE(c.streams[1]->stats().reproposed, 1u);
  EXPECT_EQ(c.streams[1]->chosen_index(), 3u);
  // Replica 0 comes back and accepts the re-proposal: with our own vote a majority, but that
  // vote is not durable yet.
  c.restart(0);
  c.run_ms(50);
  ASSERT_EQ(c.leader(), 1);
  ASSERT_TRUE(c.stores[0]->find(4) != nullptr && c.stores[0]->find(4)->value.same_bytes(x));
  EXPECT_EQ(c.streams[1]->chosen_index(), 3u) << "the re-proposal counted an undurable vote";
  c.streams[1]->note_self_durable(c.streams[1]->ballot(), 4);
  EXPECT_EQ(c.streams[1]->chosen_index(), 4u);
  ASSERT_EQ(c.logs[1].size(), 4u);
  EXPECT_EQ(c.logs[1][3], x);
}

}  // namespace paxos_stream_test
}  // namespace shoal::repl

namespace shoal::repl {
namespace paxos_stream_test {  // named, not anonymous: unique in a unity build

// A ChosenSlotSource over a replica's delivered log (what its WAL would hold), counting reads.
class LogSource final : public ChosenSlotSource {
 public:
  explicit LogSource(const std::vector<Bytes>& log) : log_(log) {}
  Status read(uint64_t from, uint64_t to, uint32_t max_entries, size_t max_bytes,
              std::vector<ChosenEntry>* out) override {
    out->clear();
    ++reads;
    if (from == 0 || from > log_.size()) return Status::NotFound("not chosen");
    size_t used = 0;
    for (uint64_t s = from; s <= std::min<uint64_t>(to, log_.size()); ++s) {
      const Bytes& e = log_[s - 1];
      if (out->size() == max_entries || used + e.size() > max_bytes) break;
      out->push_back({s, e});
      used += e.size();
    }
    max_returned = std::max<size_t>(max_returned, out->size());
    return Status::Ok();
  }
  uint64_t reads = 0;
  size_t max_returned = 0;

 private:
  const std::vector<Bytes>& log_;
};

// Replica 2 is cut off while the leader chooses ten times the slots its store retains (16).
// Healed, it cannot be caught up from memory (counted, nothing sent); given a source (the
// leader's WAL), it catches up fully, a few messages in flight at a time, and its log is
// identical to the others'.
TEST(PaxosStream, IsolatedReplicaCatchesUpBeyondTheRetainedSlotsFromTheSource) {
  PaxosOptions o;
  o.pipeline_slots = 8;
  o.max_entries_per_message = 8;
  Cluster c(3, o, /*retain=*/16);
  c.run_ms(100);
  ASSERT_EQ(c.leader(), 0);
  uint64_t tid = 1;
  c.choose_without(2, 160, &tid);
  ASSERT_EQ(c.streams[0]->chosen_index(), 160u);
  ASSERT_GT(c.stores[0]->first_slot(), 100u);  // trimmed: memory cannot serve replica 2
  const uint64_t isolated_at = c.streams[2]->chosen_index();
  ASSERT_LT(isolated_at, 10u);
  c.queue.drop = nullptr;
  c.run_ms(500);
  const int leader = c.leader();
  ASSERT_GE(leader, 0);
  ASSERT_NE(leader, 2);  // 2 is far behind: it cannot win a majority's promises
  EXPECT_LT(c.streams[2]->chosen_index(), 160u);
  EXPECT_GT(c.streams[leader]->stats().catchup_unavailable, 0u);
  LogSource source(c.logs[leader]);
  c.streams[leader]->set_chosen_source(&source);
  // What goes to replica 2 now is catch-up (a follower with a full replay queue drops exactly
  // these, PaxosStream::is_learn_message); the heartbeats it answers with are not.
  int learns = 0, others = 0;
  c.queue.drop = [&](const Packet& p) {
    (PaxosStream::is_learn_message(p.bytes) ? learns : others) += p.to == 2 || p.from == 2;
    return false;
  };
  for (int ms = 0; ms < 2000 && c.streams[2]->chosen_index() < 160; ++ms) c.run_ms(1);
  c.queue.drop = nullptr;
  EXPECT_GT(learns, 0);
  EXPECT_GT(others, 0);
  EXPECT_FALSE(PaxosStream::is_learn_message(make_entry(1, 1)));  // not a Paxos message
  EXPECT_EQ(c.streams[2]->chosen_index(), 160u);
  EXPECT_EQ(c.logs[2].size(), 160u);
  EXPECT_EQ(c.logs[2], c.logs[0]);
  c.expect_prefix_consistent();
  const PaxosStats& ls = c.streams[leader]->stats();
  EXPECT_GT(ls.catchup_source_entries, 100u);
  EXPECT_EQ(ls.catchup_source_errors, 0u);
  EXPECT_LE(source.max_returned, 8u);  // one message's worth per read
  // New proposals still reach everyone.
  ASSERT_TRUE(c.propose(leader, tid++).ok());
  c.run_ms(20);
  EXPECT_EQ(c.streams[2]->chosen_index(), 161u);
}

// quiet() is what lets a replication thread tick at heartbeat pace (leader.h, kQuietTickNs): a
// leader is quiet only with nothing proposed and unchosen and no follower far behind; a
// follower is quiet unless it stands for election.
TEST(PaxosStream, QuietOnlyWithNothingInFlightOrFarBehind) {
  PaxosOptions o;
  o.pipeline_slots = 8;
  Cluster c(3, o);
  c.run_ms(100);
  ASSERT_EQ(c.leader(), 0);
  for (uint32_t r = 0; r < 3; ++r) EXPECT_TRUE(c.streams[r]->quiet()) << "replica " << r;
  ASSERT_TRUE(c.propose(0, 1).ok());
  EXPECT_FALSE(c.streams[0]->quiet());  // in flight
  c.run_ms(5);
  ASSERT_EQ(c.streams[0]->chosen_index(), 1u);
  EXPECT_TRUE(c.streams[0]->quiet());
  // Replica 2 cut off while more than a pipeline is chosen: far behind, so not quiet.
  uint64_t tid = 2;
  c.choose_without(2, 20, &tid);
  ASSERT_EQ(c.streams[0]->chosen_index(), 20u);
  EXPECT_FALSE(c.streams[0]->quiet());
  c.queue.drop = nullptr;
  for (int ms = 0; ms < 2000 && c.streams[2]->chosen_index() < 20; ++ms) c.run_ms(1);
  ASSERT_EQ(c.streams[2]->chosen_index(), 20u);
  c.run_ms(20);  // its chosen index reaches the leader with its next answer
  EXPECT_TRUE(c.streams[0]->quiet());
}

// A follower's heartbeat leaves early with its answer when it is due within the slack, and
// not when it was just sent: heartbeats then go out more often, never less.
TEST(PaxosStream, AFollowersHeartbeatLeavesEarlyOnlyWithinTheSlack) {
  Cluster c;
  c.run_ms(100);
  ASSERT_EQ(c.leader(), 0);
  c.deliver();
  const auto heartbeats_from_1 = [&] {
    return std::count_if(c.queue.packets.begin(), c.queue.packets.end(),
                         [](const Packet& p) { return p.from == 1; });
  };
  c.streams[1]->heartbeat_if_due_within(c.options.heartbeat_ns);  // due within a period: sent
  EXPECT_EQ(heartbeats_from_1(), 2);                              // to replicas 0 and 2
  c.deliver();
  c.streams[1]->heartbeat_if_due_within(c.options.heartbeat_ns / 2);  // just sent: not due
  EXPECT_EQ(heartbeats_from_1(), 0);
  c.streams[0]->heartbeat_if_due_within(c.options.heartbeat_ns);  // a leader: never
  EXPECT_TRUE(c.queue.packets.empty());
}

// A source that refuses (a corrupted WAL copy) sends nothing and keeps the error.
TEST(PaxosStream, SourceErrorsAreCountedAndNothingIsSent) {
  class Refusing final : public ChosenSlotSource {
   public:
    Status read(uint64_t, uint64_t, uint32_t, size_t, std::vector<ChosenEntry>* out) override {
      out->clear();
      return Status::Corruption("acceptor WAL x: slot 3: bad; not served");
    }
  } refusing;
  Cluster c(3, {}, /*retain=*/4);
  c.run_ms(100);
  ASSERT_EQ(c.leader(), 0);
  c.streams[0]->set_chosen_source(&refusing);
  c.queue.drop = [](const Packet& p) { return p.from == 2 || p.to == 2; };
  for (uint64_t i = 0; i < 20; ++i) {
    ASSERT_TRUE(c.propose(0, i + 1).ok());
    c.run_ms(1);
  }
  c.run_ms(20);
  const uint64_t behind = c.streams[2]->chosen_index();
  c.queue.drop = nullptr;
  c.run_ms(300);
  EXPECT_EQ(c.streams[2]->chosen_index(), behind);
  EXPECT_GT(c.streams[0]->stats().catchup_source_errors, 0u);
  EXPECT_EQ(c.streams[0]->stats().catchup_source_entries, 0u);
  EXPECT_EQ(c.streams[0]->last_catchup_error().message(),
            "acceptor WAL x: slot 3: bad; not served");
}

// The store of a leader whose appender runs short of ring space lets go of its retained
// chosen slots: dropped when a source serves catch-up (a follower then lagging gets them from
// it), copied into the entry pool (counted) when there is none.
TEST(PaxosStream, ShedRetainedDropsChosenSlotsOrCopiesThemWithoutASource) {
  for (const bool with_source : {true, false}) {
    Cluster c(3, {}, /*retain=*/64, /*gather=*/true);
    c.run_ms(100);
    ASSERT_EQ(c.leader(), 0);
    for (uint64_t i = 0; i < 5; ++i) {
      ASSERT_TRUE(
          c.streams[0]->propose(EntryBuffer(make_entry(c.streams[0]->next_slot(), 50 + i))).ok());
      c.run_ms(2);
    }
    ASSERT_EQ(c.streams[0]->chosen_index(), 5u);
    LogSource source(c.logs[0]);
    if (with_source) c.streams[0]->set_chosen_source(&source);
    const CopyCounts before = copy_counts();
    EXPECT_EQ(c.streams[0]->shed_retained(), 5u);
    const CopyCounts d = copy_counts() - before;
    uint64_t entry_bytes = 0;
    for (const Bytes& e : c.logs[0]) entry_bytes += e.size();
    if (with_source) {
      EXPECT_EQ(c.stores[0]->first_slot(), 6u);  // nothing held below the next slot
      EXPECT_EQ(d.bytes[static_cast<size_t>(CopyHop::kAcceptorStore)], 0u);
    } else {
      EXPECT_EQ(c.stores[0]->first_slot(), 1u);  // kept, as copies
      ASSERT_NE(c.stores[0]->find(3), nullptr);
      EXPECT_TRUE(c.stores[0]->find(3)->value.same_bytes(c.logs[0][2]));
      EXPECT_EQ(d.bytes[static_cast<size_t>(CopyHop::kAcceptorStore)], entry_bytes);
    }
    // A replica that lost everything still catches up, from the source or the copies.
    c.crash(2);
    c.stores[2] = std::make_unique<PaxosAcceptorStore>(64);
    c.logs[2].clear();
    c.restart(2);
    c.run_ms(100);
    EXPECT_EQ(c.logs[2], c.logs[0]) << "with_source " << with_source;
  }
}

}  // namespace paxos_stream_test
}  // namespace shoal::repl
