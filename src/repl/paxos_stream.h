// PaxosStream: one Multi-Paxos log stream (one worker core of one shard) among R replicas.
//
// The stream decides, slot by slot, which sealed log entry (src/repl/log_format.h) sits at
// each position of the stream's log. Values are opaque bytes as LogBatchBuilder sealed them;
// every replica keeps exactly the bytes it received (validated in place, never re-encoded).
//
// Shape: a deterministic state machine. It never reads a clock or a socket on its own: time
// comes from the injected Env, messages go out through PaxosTransport::send() and come in
// through on_message(), and the owner calls tick() periodically (every ~1 ms; the owner's
// EventLoop timer, or the test). The same code therefore runs on real transports, in the
// simulator (sim/paxos_sim_test.cc) and in hand-stepped unit tests (paxos_stream_test.cc).
//
// Protocol (names carry a `paxos_` qualifier: "prepare/commit" also exist in the txn layer):
//  - Ballot = (round, replica id), packed so integer order is ballot order.
//  - Election: when no leader has been heard for election_timeout_ns, the lowest-id replica
//    that hears no lower-id replica alive (every replica broadcasts a heartbeat) becomes a
//    candidate: a fresh ballot, then paxos_prepare(ballot, from_slot = chosen_index + 1).
//  - paxos_promise: an acceptor with promised <= ballot promises and returns every slot it
//    holds from from_slot on (accepted with their ballot, or chosen). Bounded per message; an
//    incomplete promise makes the candidate learn the chosen entries and prepare again from its
//    new chosen index.
//  - With a majority of promises the candidate leads: for every slot above its chosen index
//    up to the highest slot reported it re-proposes the highest-ballot accepted value, or a
//    no-op entry (kLogFlagNoop) for a hole; then new proposals take the following slots.
//  - paxos_accept(ballot, chosen_index, entries): the fast path of each entry (and, empty,
//    the leader's heartbeat). An acceptor with promised <= ballot stores the bytes and answers
//    paxos_accepted; otherwise paxos_reject with its promise (the old leader steps down).
//  - A slot is chosen when a majority accepted it in the leader's ballot. The leader's chosen
//    index rides on every accept/heartbeat; a follower marks slot s chosen when it holds s
//    accepted in that same ballot. Slots it lacks come by paxos_learn (catch-up): the leader
//    sends chosen entries from the follower's reported chosen index on, from its store or,
//    for slots the store trimmed, from a ChosenSlotSource (the acceptor's WAL). A follower
//    within its acceptance window of the chosen index gets one learn message per retransmit
//    period (accepts bring it the rest); one further behind, up to catchup_inflight_messages
//    unacknowledged ones (it answers each with a heartbeat carrying its new chosen index).
//    Accepts are not sent to a follower for slots beyond its acceptance window (it would
//    refuse them).
//
// Safety argument (the classic one): a value is chosen in ballot b only if a majority accepted
// it in b; any later ballot's phase 1 talks to a majority, which intersects that one, and
// adopts the highest-ballot accepted value, so every later proposal for the slot carries the
// chosen value (by induction over ballots). Acceptors never accept below their promise, and a
// ballot has a single proposer that proposes one value per slot, so "accepted in ballot b" on
// a follower equals the leader's value for b (which is why commit marking compares ballots).
// Learned (chosen) bytes overwrite accepted ones, never the other way; an acceptor that holds
// a slot chosen acknowledges an accept for it only when the bytes are identical. A candidate
// never writes other acceptors' values into its own store under their old ballots (that would
// forge acceptances); it re-proposes them in its own ballot.
//
// Durability: PaxosAcceptorStore is the acceptor's durable state (promise, accepted/chosen
// slots). In this version it lives in memory and outlives a PaxosStream (the simulator
// "restarts" a replica by building a new stream over the same store). Its PersistHooks are
// where the WAL (src/repl/wal.h) will append the same bytes before an acknowledgement leaves.
// An acceptor that forgets its promise or accepted values after a crash breaks safety; one
// whose owner knows it lost them (a lost directory) starts rejoining: it answers no prepare,
// stands for nothing, and its acceptances count for nothing, until the leader it follows says
// every other replica accepted in its ballot since (every paxos_accept carries the leader's
// tail, and to a rejoiner whether the others are current) and it holds every slot up to that
// leader's tail when first heard (docs/REPLICATION.md, "A replica that lost its directory
// rejoins without a vote").
//
// Threads: one stream per worker thread; no method is thread-safe. The transport's send()
// and the chosen callback must not call back into the stream.
// Bounds: leader pipeline (pipeline_slots outstanding proposals), acceptor window (slots above
// chosen_index + accept_window_slots are refused), entries and bytes per message, retained
// chosen slots per store (older ones are dropped: a replica that lags further is caught up
// from the ChosenSlotSource, see docs/REPLICATION.md), catch-up messages in flight per peer.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "shoal/status.h"
#include "src/base/env.h"
#include "src/repl/entry_buffer.h"
#include "src/repl/log_format.h"

namespace shoal::repl {

// Ballot = round << 8 | replica: comparing integers compares (round, replica). 0 = none.
using Ballot = uint64_t;
inline constexpr uint32_t kPaxosReplicasMax = 16;
inline constexpr Ballot make_ballot(uint64_t round, uint32_t replica) {
  return (round << 8) | replica;
}
inline constexpr uint64_t ballot_round(Ballot b) {
  return b >> 8;
}
inline constexpr uint32_t ballot_replica(Ballot b) {
  return static_cast<uint32_t>(b & 0xff);
}

struct PaxosOptions {
  uint32_t shard = 0;  // entries must carry this shard and stream id
  uint32_t stream = 0;
  uint64_t epoch = 0;  // written into the no-op entries that fill holes
  uint32_t replica_id = 0;
  uint32_t replica_count = 3;
  uint32_t pipeline_slots = 64;  // leader: proposed and not yet chosen
  // Leader: entry bytes proposed and not yet chosen (0: no bound). A follower over shared
  // memory keeps received entries in its receive ring until they are chosen (and replayed),
  // so more than the ring's worth in flight would make it copy them out to free the space.
  uint64_t pipeline_bytes = 0;
  uint32_t accept_window_slots = 256;  // acceptor: refuse slots > chosen_index + this
  uint32_t max_entries_per_message = 64;
  uint32_t max_message_bytes = 4u << 20;
  uint64_t heartbeat_ns = 5'000'000;
  // Re-send unanswered prepares and catch-up after this; unanswered accepts after the larger
  // of this and twice the smoothed time followers take to answer one (at most
  // kAcceptTimeoutMaxFactor times this): an entry whose follower syncs it in 15 ms is not
  // sent again at 10 ms (over shm that re-sent a third of every entry: copy_count.h).
  uint64_t retransmit_ns = 10'000'000;
  uint64_t election_timeout_ns = 50'000'000;
  // False: this replica never starts an election (it still promises and accepts). For the
  // followers of a replicated shard today: only replica 0 has the workers that propose, and
  // with the star topology a follower that won an election (replica 0 starved past the
  // election timeout on a loaded machine) kept replica 0 from ever leading again, which
  // stalled the shard for good. A follower leads when the configuration manager appoints it
  // (campaign(); docs/REPLICATION.md, "Failover").
  bool may_lead = true;
  // Leader: step down when no majority was heard for election_timeout_ns (the replicas then
  // elect among themselves: the lowest live one stands). False for a leader that only the
  // configuration manager replaces (ReplicationLeader: a replicated shard's followers never
  // stand in Paxos, may_lead above): stepped down it would never lead again while a
  // lower-numbered replica lives, yet stay its shard's leader in etcd, its followers
  // following it, nothing chosen and every acknowledgement stalled for good. It keeps
  // leading instead and retransmits until a majority answers again; a replica appointed in
  // its place fences it with its higher ballot (a reject steps it down) and etcd deposes it.
  bool step_down_without_majority = true;
  // Leader: count its own acceptance of a proposal only once the owner says it is durable
  // (note_self_durable), so a WAL sync can run off the stream's thread while followers'
  // acceptances (durable before they answer) already make a majority. The same for values
  // re-proposed after an election (the owner asks for a sync covering next_slot() - 1).
  bool defer_self_ack = false;
  // Leader: unacknowledged paxos_learn messages per follower lagging beyond its acceptance
  // window (each at most max_message_bytes), so catching up a far-behind follower neither
  // floods its connection nor waits a round trip per message. In [1, kCatchupInflightMax].
  uint32_t catchup_inflight_messages = 2;
};
inline constexpr uint32_t kCatchupInflightMax = 8;
inline constexpr uint64_t kAcceptTimeoutMaxFactor = 8;
// Doublings of the accept timeout while no answer gives a sample: answers up to 4 retransmit
// periods late are then learnt, and a follower back from a crash waits at most that long for
// the accepts it missed.
inline constexpr uint32_t kAcceptBackoffMax = 2;

// Sends one message to a replica. Best effort: it may be lost, duplicated or reordered (the
// protocol retransmits). `message` is valid only during the call. REQUIRES: does not call
// back into the stream. A virtual call per message: negligible next to a network send.
//
// Gathered sends: a transport whose gathers() is true gets every message that carries entry
// bytes as send_gather(): the message is the concatenation of `pieces` (headers the stream
// built, and the entries' bytes where its store keeps them: no copy into a message buffer),
// at most kPaxosGatherPiecesMax of them, all valid only during the call. Messages without
// entry bytes still come as send(). A transport that does not gather gets whole messages,
// with the entries copied in (counted as message_build, copy_count.h).
inline constexpr size_t kPaxosGatherPiecesMax = 256;
// Entries per message, so that a gathered message (a header piece before and after each
// entry's bytes) stays within kPaxosGatherPiecesMax pieces.
inline constexpr uint32_t kPaxosEntriesPerMessageMax = (kPaxosGatherPiecesMax - 1) / 2;
class PaxosTransport {
 public:
  virtual ~PaxosTransport() = default;
  virtual void send(uint32_t to_replica, std::span<const std::byte> message) = 0;
  // Asked once, when a stream is built over the transport.
  virtual bool gathers() const { return false; }
  virtual void send_gather(uint32_t to_replica,
                           std::span<const std::span<const std::byte>> pieces) {
    (void)to_replica;
    (void)pieces;
    SHOAL_ASSERT(false, "%s", "send_gather() on a PaxosTransport that does not gather");
  }
};

// One chosen entry read from a ChosenSlotSource: its slot and its sealed bytes (8-byte aligned).
struct ChosenEntry {
  uint64_t slot = 0;
  std::span<const std::byte> bytes;
};

// Where a leader finds chosen entries its PaxosAcceptorStore no longer holds (trimmed), to
// catch up a follower that lags beyond the retained slots. AcceptorLog implements it over the
// acceptor's WAL; tests may supply one from memory. Called on the stream's thread.
class ChosenSlotSource {
 public:
  virtual ~ChosenSlotSource() = default;
  // Fills `out` (cleared first) with the chosen entries of from_slot, from_slot + 1, ... up to
  // to_slot, in slot order: at most max_entries, and only as many as fit in max_bytes in total
  // (at least one unless an error is returned). Each entry was validated (LogEntryView::parse
  // with its checksum, sequence == slot) and is the value chosen there; a copy failing that is
  // an error, never returned. Spans stay valid until the next read().
  // Errors: NotFound (from_slot is not chosen or not held), Corruption (a bad copy, named in
  // the message), InvalidArgument (from_slot's entry alone exceeds max_bytes), IOError.
  [[nodiscard]] virtual Status read(uint64_t from_slot, uint64_t to_slot, uint32_t max_entries,
                                    size_t max_bytes, std::vector<ChosenEntry>* out) = 0;
};

// Durable hooks: where the WAL appends (and syncs) before the acceptor answers. A non-ok
// status makes the acceptor drop the request unanswered (the proposer retransmits).
struct PersistHooks {
  std::function<Status(Ballot promised)> on_promise;
  // `new_bytes` is false when the slot already holds these bytes and only its ballot rises
  // (a leader re-proposing what it holds). AcceptorLog appends the bytes again all the same:
  // a copy's position in its WAL is what carries its ballot.
  // Not called for an exact duplicate (same bytes, same ballot): nothing changes.
  std::function<Status(uint64_t slot, Ballot accepted, std::span<const std::byte> entry,
                       bool new_bytes)>
      on_accept;
  // A chosen value stored by catch-up (paxos_learn, or a promise reporting it chosen) over
  // what the slot held (nothing, or other bytes): a WAL appends the bytes and notes them chosen.
  std::function<Status(uint64_t slot, std::span<const std::byte> entry)> on_learn;
  // A rejoining acceptor (PaxosAcceptorStore::rejoining) has caught up and votes from now
  // on: make everything it stored durable, then forget the durable "non-voting" mark. Not
  // ok: it stays non-voting (asked again at the next chance).
  std::function<Status()> on_rejoined;
};

// An acceptor's own copy of entry bytes (received, or moved out of a ring that needs its
// space back), counted as the acceptor_store hop (copy_count.h).
EntryBuffer acceptor_copy(std::span<const std::byte> bytes);

struct PaxosSlot {
  Ballot accepted = 0;  // ballot the value was accepted in (0: learned as chosen only)
  bool chosen = false;
  EntryBuffer value;  // empty: nothing accepted here
};

// One acceptor's durable state: the promise and the slots [first_slot(), last_slot()].
// Slots are numbered from 1. Owned by the stream's thread; outlives the PaxosStream objects
// built over it (restart). Bound: at most retain_chosen_slots chosen slots below the chosen
// index plus the accept window above it.
class PaxosAcceptorStore {
 public:
  explicit PaxosAcceptorStore(uint64_t retain_chosen_slots = uint64_t{1} << 16)
      : retain_(retain_chosen_slots) {}
  void set_hooks(PersistHooks hooks) { hooks_ = std::move(hooks); }

  Ballot promised() const { return promised_; }
  // A rejoining acceptor lost its durable state (a replica restarted over a lost directory)
  // and so may have forgotten promises and acceptances: it answers no prepare, starts no
  // election, and its acceptances are not counted, until its stream has caught up from a
  // leader that every other replica follows (PaxosStream; docs/REPLICATION.md, "A replica
  // that lost its directory rejoins without a vote"). Set by the owner from its durable mark
  // before the stream is built; cleared by the stream once on_rejoined succeeded.
  bool rejoining() const { return rejoining_; }
  void set_rejoining(bool rejoining) { rejoining_ = rejoining; }
  // The stream's catch-up is done: on_rejoined, then votes. False (still rejoining) when
  // the hook failed.
  [[nodiscard]] Status finish_rejoin();
  // Every slot <= chosen_index() is chosen and held (or was trimmed after delivery).
  uint64_t chosen_index() const { return chosen_index_; }
  uint64_t first_slot() const { return base_; }
  uint64_t last_slot() const { return base_ + slots_.size() - 1; }  // first_slot()-1: none
  const PaxosSlot* find(uint64_t slot) const;

  [[nodiscard]] Status promise(Ballot b);
  // Stores `bytes` as accepted in ballot b (or only raises the ballot when they are the bytes
  // already held). REQUIRES: slot >= first_slot(); not chosen; bytes validated by the caller.
  [[nodiscard]] Status accept(uint64_t slot, Ballot b, std::span<const std::byte> bytes);
  // The same with bytes the caller already copied (a follower's aligned copy of a received
  // entry): the store keeps that buffer instead of copying it again.
  [[nodiscard]] Status accept(uint64_t slot, Ballot b, EntryBuffer&& owned);
  // Marks a held slot chosen. REQUIRES: it holds a value.
  void mark_chosen(uint64_t slot);
  // Stores chosen bytes (catch-up), persisted through on_learn unless the slot already held
  // them. A slot already chosen must hold the same bytes: anything else is a Paxos safety
  // violation and aborts. A failing hook leaves the slot as it was.
  // REQUIRES: slot >= first_slot().
  [[nodiscard]] Status learn(uint64_t slot, std::span<const std::byte> bytes);
  [[nodiscard]] Status learn(uint64_t slot, EntryBuffer&& owned);  // as accept(EntryBuffer&&)
  // Moves chosen_index over the chosen prefix; returns the new value.
  uint64_t advance();
  // Drops chosen slots beyond the retention below chosen_index. Call after delivery.
  void trim();
  // The owner of the retained slots' memory runs short (a leader's appender ring: its store
  // keeps the ring's bytes): every chosen slot at or below chosen_index() lets go of its
  // buffer now. keep_copies false: the slots are dropped, as trim() drops them past the
  // retention (catch-up reads them from a ChosenSlotSource); true: each is replaced by a
  // copy in the entry pool (counted as acceptor_store), for a store that has no source.
  // Returns the slots shed. Call after delivery.
  uint64_t shed_chosen(bool keep_copies);
  // Every held slot whose bytes `kept_there` says live in memory that must be given back (a
  // follower's receive ring, short of space: the leader's sends wait for it) gets a copy in
  // the entry pool instead (counted as acceptor_store). Returns the slots copied.
  uint64_t copy_out(const std::function<bool(std::span<const std::byte>)>& kept_there);
  // A restart from a checkpoint: slots <= `covered` are chosen and applied elsewhere (the
  // checkpoint), so the store starts empty above them (chosen_index() == covered) and never
  // holds them. REQUIRES: the store holds no slot yet.
  void start_after(uint64_t covered);

 private:
  PaxosSlot& at(uint64_t slot);  // grows the deque; REQUIRES: slot >= base_
  // `owned`, when given, holds `bytes` and is kept instead of a copy.
  [[nodiscard]] Status accept_bytes(uint64_t slot, Ballot b, std::span<const std::byte> bytes,
                                    EntryBuffer* owned);
  [[nodiscard]] Status learn_bytes(uint64_t slot, std::span<const std::byte> bytes,
                                   EntryBuffer* owned);

  uint64_t retain_;
  PersistHooks hooks_;
  Ballot promised_ = 0;
  bool rejoining_ = false;
  uint64_t chosen_index_ = 0;
  uint64_t base_ = 1;
  std::deque<PaxosSlot> slots_;  // slots_[i] is slot base_ + i
};

struct PaxosStats {
  uint64_t proposed = 0, chosen = 0, elections = 0, became_leader = 0, stepped_down = 0;
  uint64_t noops_proposed = 0, reproposed = 0, rejects_sent = 0, malformed = 0;
  uint64_t out_of_window = 0, bad_entries = 0, retransmits = 0, catchup_entries_sent = 0;
  uint64_t catchup_unavailable = 0, messages_sent = 0, messages_received = 0;
  uint64_t catchup_bytes_sent = 0;      // entry bytes of catchup_entries_sent
  uint64_t catchup_source_entries = 0;  // of catchup_entries_sent, read from the source
  uint64_t catchup_source_errors = 0;   // reads of the source that failed (last_catchup_error)
  uint64_t learn_failed = 0;            // learned entries the store could not persist
  uint64_t entries_kept = 0;            // received entries stored where they arrived (keeper)
  uint64_t majority_lost = 0;  // leader: no majority heard for an election timeout, still led
  // A rejoining acceptor: prepares left unanswered, elections not started, leaders it
  // attached to (their ballot and tail), and 1 once it votes again.
  uint64_t rejoin_prepares_ignored = 0, rejoin_elections_refused = 0, rejoin_attached = 0;
  uint64_t rejoined = 0;
  uint64_t nonvoting_replies = 0;  // leader: accepted replies of a rejoining acceptor (no vote)
};

enum class PaxosRole : uint8_t { kFollower, kCandidate, kLeader };

class PaxosStream {
 public:
  // Called once per slot, in slot order, when the slot joins the chosen prefix, with the
  // store's own buffer (a holder that keeps the bytes takes entry.share(), not a copy).
  using ChosenFn = std::function<void(uint64_t slot, const EntryBuffer& entry)>;

  // Slots already chosen in `store` (a restart) are not delivered again.
  // REQUIRES: env, transport and store outlive the stream; replica_count in
  // [1, kPaxosReplicasMax]; replica_id < replica_count.
  PaxosStream(Env& env, PaxosTransport& transport, PaxosAcceptorStore& store,
              const PaxosOptions& options, ChosenFn on_chosen);
  PaxosStream(const PaxosStream&) = delete;
  PaxosStream& operator=(const PaxosStream&) = delete;

  // Leader only: puts a sealed entry at next_slot() and starts phase 2. Errors: Unavailable
  // (not the leader, or the pipeline is full: see pipeline_room()), InvalidArgument (not a
  // valid entry, other shard/stream, sequence != next_slot(), too large for a message).
  // Whether the entry ends up chosen at that slot is known from the chosen callback: a leader
  // change may fill the slot with another value or a no-op (the caller proposes again).
  // kSealedHere: the caller's own LogBatchBuilder sealed the bytes (LogEntryView::reparse):
  // only the header is checked, since every acceptor verifies the whole entry on receipt.
  enum class EntryCheck : uint8_t { kFull, kSealedHere };
  [[nodiscard]] Result<uint64_t> propose(std::span<const std::byte> entry,
                                         EntryCheck check = EntryCheck::kFull);
  // The same without a copy: the store keeps `entry` itself (a leader's sealed entry in its
  // appender's ring). Moved from only on success: on an error the caller still holds it.
  [[nodiscard]] Result<uint64_t> propose(EntryBuffer&& entry, EntryCheck check = EntryCheck::kFull);
  // The buffers behind the store's retained chosen slots are needed back (the leader's
  // appender waits for log ring space): PaxosAcceptorStore::shed_chosen, dropping them when
  // a ChosenSlotSource can serve catch-up, copying them otherwise. Returns the slots shed.
  uint64_t shed_retained();

  // `keeper`, when given, may keep the message's entry bytes where they are (a follower's
  // receive ring): an accepted or learned entry it keeps becomes the store's value with no
  // copy; the others are copied (acceptor_store, copy_count.h).
  void on_message(uint32_t from_replica, std::span<const std::byte> message,
                  EntryKeeper* keeper = nullptr);
  // Whether `message` is a paxos_learn (catch-up): a replica whose chosen entries pile up
  // unapplied may drop these (the leader sends them again) without missing anything else.
  static bool is_learn_message(std::span<const std::byte> message);
  // defer_self_ack: our acceptances of slots <= `slot` made in ballot `b` are durable.
  // Ignored unless we still lead in ballot b.
  void note_self_durable(Ballot b, uint64_t slot);
  // Heartbeats, retransmission, catch-up, elections. Call every ~1 ms (<< heartbeat_ns), or
  // while quiet() every heartbeat_ns at most.
  void tick();
  // Nothing for tick() to hurry: no election under way and, on a leader, no slot in flight and
  // no follower being caught up or far behind. What is left for tick() is the heartbeat (and,
  // on a follower, an election timeout of a second or more).
  bool quiet() const;
  // Not a leader: sends the heartbeat tick() would send within `slack_ns` from now, now. A
  // follower calls it as it answers the leader, so that its heartbeat leaves in that wake-up
  // instead of one of its own (heartbeats then go out more often, never less).
  void heartbeat_if_due_within(uint64_t slack_ns);
  uint64_t heartbeat_ns() const { return options_.heartbeat_ns; }
  // Stand for election now, whatever may_lead and the election timeout say: the replica the
  // configuration manager appointed after the leader failed (docs/REPLICATION.md, "Failover") takes
  // over at once instead of waiting out a timeout. A candidate re-sends its prepares to the
  // acceptors that have not promised (a follower that just connected); a leader does nothing.
  void campaign();
  // Where the leader reads chosen slots its store trimmed (null: such a follower cannot be
  // caught up, counted in catchup_unavailable). REQUIRES: outlives the stream.
  void set_chosen_source(ChosenSlotSource* source) { source_ = source; }
  // Why the last read of the source failed (ok if none did).
  const Status& last_catchup_error() const { return last_catchup_error_; }

  PaxosRole role() const { return role_; }
  bool is_leader() const { return role_ == PaxosRole::kLeader; }
  uint64_t next_slot() const { return next_slot_; }
  // Leader: the chosen index `peer` last reported (accepted replies, heartbeats); 0 if none.
  uint64_t peer_chosen_index(uint32_t peer) const { return peer_chosen_[peer]; }
  uint32_t pipeline_room() const;
  uint64_t chosen_index() const { return store_.chosen_index(); }
  Ballot ballot() const { return ballot_; }
  uint32_t replica_id() const { return options_.replica_id; }
  const PaxosStats& stats() const { return stats_; }

 private:
  struct Msg;           // a decoded message (paxos_stream.cc)
  struct Inflight {     // leader: one slot between chosen_index and next_slot
    uint32_t acks = 0;  // bit per replica
    uint64_t first_sent_ns = 0;
    uint64_t last_sent_ns = 0;
    bool chosen = false;
    bool resent = false;  // an answer's time is then ambiguous: no sample (Karn)
    uint32_t bytes = 0;   // the entry proposed here (0: re-proposed after an election)
  };
  uint64_t inflight_bytes_ = 0;  // sum of inflight_[i].bytes
  // The accept retransmission timeout now (PaxosOptions::retransmit_ns).
  uint64_t accept_timeout_ns() const;
  void sample_answer(const Inflight& f, uint32_t replica);
  uint64_t answer_srtt_ns_ = 0;  // leader: smoothed send-to-accepted time (0: no sample yet)
  // Leader: doublings of the timeout since the last sample. Answers to re-sent accepts give
  // no sample, so without it a timeout below the answer time would never learn better.
  uint32_t accept_backoff_ = 0;
  struct Merged {  // candidate: the highest-ballot value a promise reported for a slot
    Ballot ballot = 0;
    EntryBuffer value;
  };

  [[nodiscard]] static Result<Msg> decode(std::span<const std::byte> bytes,
                                          const PaxosOptions& options);
  void dispatch(uint32_t from, std::span<const std::byte> message);  // on_message's body
  void handle_prepare(const Msg& m);
  void handle_promise(const Msg& m);
  void handle_accept(const Msg& m);
  void handle_accepted(const Msg& m);
  void handle_reject(const Msg& m);
  void handle_learn(const Msg& m);
  void handle_heartbeat(const Msg& m);
  void send_heartbeat(uint64_t now);  // not a leader: to every other replica

  void start_election();
  void send_prepares(bool only_missing);
  void finish_phase1();
  void repropose(uint64_t slot);
  // `why` and the ballot that caused it go to stderr under SHOAL_REPL_DEBUG.
  void step_down(const char* why, Ballot seen = 0, uint32_t from = 0);
  void leader_tick(uint64_t now_ns);
  // Leader without step_down_without_majority: notes (counts, and says under
  // SHOAL_REPL_DEBUG) when it stops and starts hearing a majority.
  void note_majority_heard(bool heard, uint64_t now_ns);
  void send_due_accepts(uint64_t now_ns, bool heartbeat);
  void send_accepts(uint32_t peer, uint64_t now_ns, bool heartbeat);
  void pump_learn(uint32_t peer, uint64_t now_ns);
  uint64_t send_learn(uint32_t peer, uint64_t from_slot);  // last slot sent; 0: none
  bool in_peer_window(uint32_t peer, uint64_t slot) const {
    return slot <= peer_chosen_[peer] + options_.accept_window_slots;
  }
  void count_ack(uint64_t slot, uint32_t replica);
  void apply_commit(Ballot b, uint64_t commit_index);
  // A rejoining acceptor: votes again once the leader it attached to says every other replica
  // accepted in its ballot since (kFlagOthersCurrent) and this store holds every slot up to
  // that leader's tail chosen or accepted in its ballot.
  void maybe_finish_rejoin();
  // Leader: whether every replica but `peer` (rejoining) accepted in our ballot since peer
  // first answered non-voting; begin() of an accept to `peer` that says so.
  bool others_current(uint32_t peer) const;
  void begin_accept(uint32_t peer);
  void deliver_chosen();
  bool lowest_live(uint64_t now_ns) const;
  bool peer_alive(uint32_t peer, uint64_t now_ns) const;
  [[nodiscard]] Status verify_entry(uint64_t slot, std::span<const std::byte> bytes,
                                    EntryCheck check = EntryCheck::kFull) const;
  // A received entry's bytes as the store will keep them: where they arrived when the
  // message's keeper keeps them, else an aligned copy (counted as acceptor_store).
  EntryBuffer keep_or_copy(std::span<const std::byte> value);
  // `owned`, when given, holds `entry` and becomes the store's value.
  [[nodiscard]] Result<uint64_t> propose_bytes(std::span<const std::byte> entry, EntryBuffer* owned,
                                               EntryCheck check);
  // Message building into out_ (header, then entries); flush sends to one replica. With a
  // gathering transport, entry values stay where they are (out_values_) and out_ holds the
  // headers and padding around them.
  void begin(uint8_t type, Ballot b, uint64_t arg);
  bool add_entry(uint64_t slot, Ballot b, bool chosen, std::span<const std::byte> value);
  void send_to(uint32_t peer);
  uint32_t majority() const { return options_.replica_count / 2 + 1; }

  Env& env_;
  PaxosTransport& transport_;
  PaxosAcceptorStore& store_;
  PaxosOptions options_;
  ChosenFn on_chosen_;
  PaxosStats stats_;

  PaxosRole role_ = PaxosRole::kFollower;
  Ballot ballot_ = 0;  // candidate/leader: our own ballot
  uint64_t max_round_seen_ = 0;
  uint64_t delivered_ = 0;  // last slot handed to on_chosen_
  uint64_t leader_heard_ns_ = 0;
  // Leader without step_down_without_majority: since when no majority was heard (0: one is).
  uint64_t no_majority_since_ns_ = 0;
  uint64_t next_heartbeat_ns_ = 0;
  std::array<uint64_t, kPaxosReplicasMax> peer_heard_ns_{};
  std::array<uint64_t, kPaxosReplicasMax> peer_chosen_{};
  // Whose last heartbeat said it is rejoining: it will not stand, so lowest_live skips it.
  std::array<bool, kPaxosReplicasMax> peer_rejoining_{};
  // Leader: per follower, the last slots of its unacknowledged learn messages (a ring).
  struct CatchUp {
    std::array<uint64_t, kCatchupInflightMax> last_slot{};
    uint32_t head = 0, count = 0;
    uint64_t sent_ns = 0;  // of the newest one
  };
  std::array<CatchUp, kPaxosReplicasMax> catchup_{};
  ChosenSlotSource* source_ = nullptr;
  EntryKeeper* keeper_ = nullptr;            // the message on_message() handles: its keeper, if any
  std::vector<ChosenEntry> source_entries_;  // reused
  Status last_catchup_error_;
  uint64_t learn_mark_ = 0;       // leader: chosen index at the last catch-up period
  uint64_t learn_mark_prev_ = 0;  // ... and at the one before (catch-up sends below it)
  uint64_t learn_mark_ns_ = 0;
  std::vector<uint64_t> acked_;  // handle_accept's reply list, reused

  // Rejoining acceptor: the leader it follows (its ballot; 0: none yet), that leader's log
  // tail when it first heard it in that ballot, and whether that leader said since that every
  // other replica accepted in its ballot after this one first answered it.
  Ballot rejoin_ballot_ = 0;
  uint64_t rejoin_tail_ = 0;
  bool rejoin_others_current_ = false;
  // Leader: per rejoining peer, the replicas (a bit each, ours included) heard accepting in our
  // ballot a slot proposed since its first non-voting answer (from rejoin_from_slot_ on); 0:
  // not rejoining, or not heard yet.
  std::array<uint32_t, kPaxosReplicasMax> rejoin_heard_{};
  std::array<uint64_t, kPaxosReplicasMax> rejoin_from_slot_{};

  // Candidate (phase 1).
  uint64_t phase1_from_slot_ = 0;
  uint32_t promise_mask_ = 0;
  bool phase1_incomplete_ = false;
  uint64_t phase1_page_end_ = UINT64_MAX;  // lowest last slot of this round's incomplete promises
  uint64_t phase1_max_slot_ = 0;
  uint64_t phase1_deadline_ns_ = 0;
  uint64_t prepare_sent_ns_ = 0;
  std::map<uint64_t, Merged> merged_;  // bounded by promise sizes

  // Leader (phase 2).
  uint64_t next_slot_ = 1;
  uint64_t inflight_base_ = 1;  // slot of inflight_[0]
  std::deque<Inflight> inflight_;

  // Outgoing message under construction (reused: no allocation once grown).
  std::vector<std::byte> out_;
  uint32_t out_entries_ = 0;
  size_t out_bytes_ = 0;  // the whole message: out_ and the values gathered into it
  // Gathering transport: each value goes before out_[at] (at most max_entries_per_message),
  // and the send's piece list (reserved at construction: at most kPaxosGatherPiecesMax).
  bool gather_ = false;
  struct OutValue {
    size_t at;
    std::span<const std::byte> bytes;
  };
  std::vector<OutValue> out_values_;
  std::vector<std::span<const std::byte>> pieces_;
};

}  // namespace shoal::repl
