// PaxosStream: see paxos_stream.h for the contract and docs/REPLICATION.md for the wire format.
#include "src/repl/paxos_stream.h"

#include "src/repl/copy_count.h"

#include <cstdlib>

#include <algorithm>
#include <bit>
#include <cstring>
#include <mutex>
#include <vector>

#include <fmt/format.h>

namespace shoal::repl {
namespace {

// Wire header (48 bytes, little-endian), then entry_count entries of 24 bytes + value padded
// to 8. Layout documented in docs/REPLICATION.md.
constexpr uint16_t kMsgMagic = 0x5850;  // "PX"
constexpr uint8_t kMsgVersion = 1;
constexpr size_t kMsgHeaderBytes = 48;
constexpr size_t kEntryHeaderBytes = 24;
constexpr uint32_t kFlagComplete = 1;  // paxos_promise: every held slot >= from_slot included
// paxos_accepted and paxos_heartbeat: from a rejoining acceptor (PaxosAcceptorStore::
// rejoining): no vote (an accepted carries no slots either, only its chosen index), and it
// stands for nothing, so the others do not wait for it to stand (lowest_live).
constexpr uint32_t kFlagNonVoting = 2;
// paxos_accept to a rejoining acceptor: every other replica has accepted in this ballot since
// the receiver first answered it non-voting (so since it lost its state).
constexpr uint32_t kFlagOthersCurrent = 4;
constexpr uint32_t kEntryChosen = 1;

enum MsgType : uint8_t {
  kPaxosPrepare = 1,
  kPaxosPromise = 2,
  kPaxosAccept = 3,  // with no entries: the leader's heartbeat
  kPaxosAccepted = 4,
  kPaxosReject = 5,
  kPaxosLearn = 6,
  kPaxosHeartbeat = 7,  // a non-leader's liveness beacon
  kMsgTypeMax = 7,
};

uint64_t stream_key(const PaxosOptions& o) {
  return (uint64_t{o.shard} << 32) | o.stream;
}

}  // namespace

struct PaxosStream::Msg {
  uint8_t type = 0;
  uint32_t from = 0;
  Ballot ballot = 0;
  uint64_t chosen_index = 0;  // the sender's
  // prepare/promise: from_slot; reject: the rejected ballot; accept: the leader's log tail
  // (its highest proposed slot) when it built the message.
  uint64_t arg = 0;
  uint32_t flags = 0;
  uint32_t entry_count = 0;
  std::span<const std::byte> entries;  // validated: entry_count well-formed entries

  struct Entry {
    uint64_t slot;
    Ballot ballot;
    bool chosen;
    std::span<const std::byte> value;
  };
  // Calls fn(const Entry&) for each entry. Bounds were checked by decode().
  template <typename Fn>
  void for_each(Fn&& fn) const {
    const std::byte* p = entries.data();
    for (uint32_t i = 0; i < entry_count; ++i) {
      const uint32_t len = load_u32(p + 16);
      fn(Entry{load_u64(p),
               load_u64(p + 8),
               (load_u32(p + 20) & kEntryChosen) != 0,
               {p + kEntryHeaderBytes, len}});
      p += kEntryHeaderBytes + pad8(len);
    }
  }
};

// ---- EntryBuffer / PaxosAcceptorStore --------------------------------------------------------

namespace {

// Entry buffers come from a per-process pool of power-of-two blocks (4 KiB .. 4 MiB), so a
// replica's steady stream of ~100 KB entries reuses memory that stays mapped: fresh blocks of
// that size came from the allocator unmapped, and the page faults that zero-filled them on
// first touch were 7% of a follower's CPU (perf, TPC-C). Bounded: at most kPooledBytesMax
// pooled; larger blocks, and blocks beyond the bound, go back to the allocator. Any thread (a
// follower's replay thread drops the last reference to most entries): one mutex, twice per
// entry. Never destroyed, so a buffer released during static destruction still has it.
class EntryPool {
 public:
  static EntryPool& instance() {
    static EntryPool* const pool = new EntryPool;
    return *pool;
  }
  // A block of at least `bytes` (>= 1); *class_bytes is its size, for give().
  uint64_t* take(size_t bytes, size_t* class_bytes) {
    const int c = std::max(kClassMin, static_cast<int>(std::bit_width(bytes - 1)));
    *class_bytes = size_t{1} << c;
    if (c <= kClassMax) {
      std::lock_guard<std::mutex> lock(mu_);
      std::vector<uint64_t*>& list = free_[c - kClassMin];
      if (!list.empty()) {
        uint64_t* block = list.back();
        list.pop_back();
        pooled_bytes_ -= *class_bytes;
        return block;
      }
    }
    return new uint64_t[*class_bytes / 8];
  }
  void give(uint64_t* block, size_t class_bytes) {
    const int c = std::countr_zero(class_bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (c <= kClassMax && pooled_bytes_ + class_bytes <= kPooledBytesMax) {
        free_[c - kClassMin].push_back(block);
        pooled_bytes_ += class_bytes;
        return;
      }
    }
    delete[] block;
  }

 private:
  static constexpr int kClassMin = 12;  // 4 KiB
  static constexpr int kClassMax = 22;  // 4 MiB (entries are at most ~1 MiB by default)
  static constexpr size_t kPooledBytesMax = size_t{64} << 20;
  std::mutex mu_;
  std::vector<uint64_t*> free_[kClassMax - kClassMin + 1];
  size_t pooled_bytes_ = 0;
};

}  // namespace

EntryBuffer::EntryBuffer(std::span<const std::byte> bytes) : size_bytes_(bytes.size()) {
  if (bytes.empty()) return;
  size_t class_bytes = 0;
  uint64_t* block = EntryPool::instance().take(bytes.size(), &class_bytes);
  std::memcpy(block, bytes.data(), bytes.size());
  words_ = std::shared_ptr<const uint64_t[]>(block, [class_bytes](const uint64_t* p) {
    EntryPool::instance().give(const_cast<uint64_t*>(p), class_bytes);
  });
}

bool EntryBuffer::same_bytes(std::span<const std::byte> other) const {
  return other.size() == size_bytes_ &&
         (size_bytes_ == 0 || std::memcmp(words_.get(), other.data(), size_bytes_) == 0);
}

const PaxosSlot* PaxosAcceptorStore::find(uint64_t slot) const {
  if (slot < base_ || slot - base_ >= slots_.size()) return nullptr;
  return &slots_[slot - base_];
}

PaxosSlot& PaxosAcceptorStore::at(uint64_t slot) {
  SHOAL_ASSERT(slot >= base_, "slot %lu below the store's first slot %lu", slot, base_);
  if (slot - base_ >= slots_.size()) slots_.resize(slot - base_ + 1);
  return slots_[slot - base_];
}

Status PaxosAcceptorStore::promise(Ballot b) {
  if (b <= promised_) return Status::Ok();
  if (hooks_.on_promise) SHOAL_TRY(hooks_.on_promise(b));
  promised_ = b;
  return Status::Ok();
}

Status PaxosAcceptorStore::accept(uint64_t slot, Ballot b, std::span<const std::byte> bytes) {
  return accept_bytes(slot, b, bytes, nullptr);
}

Status PaxosAcceptorStore::accept(uint64_t slot, Ballot b, EntryBuffer&& owned) {
  return accept_bytes(slot, b, owned.span(), &owned);
}

EntryBuffer acceptor_copy(std::span<const std::byte> bytes) {
  count_copy(CopyHop::kAcceptorStore, bytes.size());
  return EntryBuffer(bytes);
}

// The store's value for a slot: the caller's buffer when it gave one, else a counted copy.
static EntryBuffer kept_or_copied(std::span<const std::byte> bytes, EntryBuffer* owned) {
  if (owned != nullptr) return std::move(*owned);
  return acceptor_copy(bytes);
}

Status PaxosAcceptorStore::accept_bytes(uint64_t slot, Ballot b, std::span<const std::byte> bytes,
                                        EntryBuffer* owned) {
  PaxosSlot& s = at(slot);
  SHOAL_ASSERT(!s.chosen, "accept into chosen slot %lu", slot);
  // Same bytes (a retransmission, or a leader re-proposing what it holds): raise the ballot
  // only; this also covers `bytes` pointing into the slot itself.
  const bool same = s.value.same_bytes(bytes);
  if (same && s.accepted == b) return Status::Ok();  // a duplicate: nothing to persist
  if (hooks_.on_accept) SHOAL_TRY(hooks_.on_accept(slot, b, bytes, !same));
  if (!same) s.value = kept_or_copied(bytes, owned);
  s.accepted = b;
  return Status::Ok();
}

void PaxosAcceptorStore::mark_chosen(uint64_t slot) {
  PaxosSlot& s = at(slot);
  SHOAL_ASSERT(!s.value.empty(), "slot %lu chosen without a value", slot);
  s.chosen = true;
}

Status PaxosAcceptorStore::learn(uint64_t slot, std::span<const std::byte> bytes) {
  return learn_bytes(slot, bytes, nullptr);
}

Status PaxosAcceptorStore::learn(uint64_t slot, EntryBuffer&& owned) {
  return learn_bytes(slot, owned.span(), &owned);
}

Status PaxosAcceptorStore::learn_bytes(uint64_t slot, std::span<const std::byte> bytes,
                                       EntryBuffer* owned) {
  PaxosSlot& s = at(slot);
  if (s.chosen) {
    SHOAL_ASSERT(s.value.same_bytes(bytes),
                 "Paxos safety violated: two different values chosen for slot %lu", slot);
    return Status::Ok();
  }
  if (!s.value.same_bytes(bytes)) {
    if (hooks_.on_learn) SHOAL_TRY(hooks_.on_learn(slot, bytes));
    s.value = kept_or_copied(bytes, owned);
  }
  s.chosen = true;
  return Status::Ok();
}

Status PaxosAcceptorStore::finish_rejoin() {
  if (!rejoining_) return Status::Ok();
  if (hooks_.on_rejoined) SHOAL_TRY(hooks_.on_rejoined());
  rejoining_ = false;
  return Status::Ok();
}

uint64_t PaxosAcceptorStore::advance() {
  // Bounded by the slots held.
  while (const PaxosSlot* s = find(chosen_index_ + 1)) {
    if (!s->chosen) break;
    ++chosen_index_;
  }
  return chosen_index_;
}

void PaxosAcceptorStore::trim() {
  while (!slots_.empty() && base_ + retain_ <= chosen_index_) {
    slots_.pop_front();
    ++base_;
  }
}

uint64_t PaxosAcceptorStore::shed_chosen(bool keep_copies) {
  uint64_t shed = 0;
  if (!keep_copies) {
    // Bounded by the slots held.
    while (!slots_.empty() && base_ <= chosen_index_) {
      slots_.pop_front();
      ++base_;
      ++shed;
    }
    return shed;
  }
  for (uint64_t slot = base_; slot <= chosen_index_ && slot - base_ < slots_.size(); ++slot) {
    PaxosSlot& s = slots_[slot - base_];
    if (s.value.empty()) continue;
    s.value = acceptor_copy(s.value.span());  // the copy first, then the old handle goes
    ++shed;
  }
  return shed;
}

uint64_t PaxosAcceptorStore::copy_out(
    const std::function<bool(std::span<const std::byte>)>& kept_there) {
  uint64_t copied = 0;
  for (PaxosSlot& s : slots_) {  // bounded by the slots held
    if (s.value.empty() || !kept_there(s.value.span())) continue;
    s.value = acceptor_copy(s.value.span());  // the copy first, then the old handle goes
    ++copied;
  }
  return copied;
}

void PaxosAcceptorStore::start_after(uint64_t covered) {
  SHOAL_ASSERT(slots_.empty() && chosen_index_ == 0, "%s", "start_after() on a used store");
  base_ = covered + 1;
  chosen_index_ = covered;
}

// ---- PaxosStream: setup, propose, tick -------------------------------------------------------

PaxosStream::PaxosStream(Env& env, PaxosTransport& transport, PaxosAcceptorStore& store,
                         const PaxosOptions& options, ChosenFn on_chosen)
    : env_(env),
      transport_(transport),
      store_(store),
      options_(options),
      on_chosen_(std::move(on_chosen)) {
  SHOAL_ASSERT(options_.replica_count >= 1 && options_.replica_count <= kPaxosReplicasMax,
               "replica_count %u", options_.replica_count);
  SHOAL_ASSERT(options_.replica_id < options_.replica_count, "replica_id %u", options_.replica_id);
  SHOAL_ASSERT(options_.max_entries_per_message > 0 && options_.pipeline_slots > 0, "%s",
               "PaxosOptions bounds must be > 0");
  SHOAL_ASSERT(options_.catchup_inflight_messages >= 1 &&
                   options_.catchup_inflight_messages <= kCatchupInflightMax,
               "catchup_inflight_messages %u", options_.catchup_inflight_messages);
  SHOAL_ASSERT(options_.max_entries_per_message <= kPaxosEntriesPerMessageMax,
               "max_entries_per_message %u above %u", options_.max_entries_per_message,
               kPaxosEntriesPerMessageMax);
  gather_ = transport_.gathers();
  if (gather_) {
    out_values_.reserve(options_.max_entries_per_message);
    pieces_.reserve(kPaxosGatherPiecesMax);
  }
  const uint64_t now = env_.now_ns();
  // Assume everyone alive at start: replica 0 wins the first election without a race.
  leader_heard_ns_ = now;
  peer_heard_ns_.fill(now);
  delivered_ = store_.chosen_index();
  max_round_seen_ = ballot_round(store_.promised());
  next_slot_ = store_.chosen_index() + 1;
  inflight_base_ = next_slot_;
}

uint32_t PaxosStream::pipeline_room() const {
  if (role_ != PaxosRole::kLeader) return 0;
  const uint64_t outstanding = next_slot_ - 1 - store_.chosen_index();
  if (options_.pipeline_bytes != 0 && inflight_bytes_ >= options_.pipeline_bytes) return 0;
  return outstanding >= options_.pipeline_slots
             ? 0
             : static_cast<uint32_t>(options_.pipeline_slots - outstanding);
}

Status PaxosStream::verify_entry(uint64_t slot, std::span<const std::byte> bytes,
                                 EntryCheck check) const {
  auto view = check == EntryCheck::kSealedHere
                  ? LogEntryView::reparse(bytes)
                  : LogEntryView::parse(bytes, 0, options_.max_message_bytes);
  if (!view.ok()) return view.status();
  const LogEntryId id = view->id();
  if (id.shard != options_.shard || id.stream != options_.stream || id.sequence != slot ||
      view->entry_bytes() != bytes.size()) {
    return Status::InvalidArgument(fmt::format(
        "entry (shard {} stream {} sequence {}, {} bytes) does not fit slot {} of "
        "shard {} stream {}",
        id.shard, id.stream, id.sequence, bytes.size(), slot, options_.shard, options_.stream));
  }
  return Status::Ok();
}

Result<uint64_t> PaxosStream::propose(std::span<const std::byte> entry, EntryCheck check) {
  return propose_bytes(entry, nullptr, check);
}

Result<uint64_t> PaxosStream::propose(EntryBuffer&& entry, EntryCheck check) {
  return propose_bytes(entry.span(), &entry, check);
}

uint64_t PaxosStream::shed_retained() {
  return store_.shed_chosen(/*keep_copies=*/source_ == nullptr);
}

Result<uint64_t> PaxosStream::propose_bytes(std::span<const std::byte> entry, EntryBuffer* owned,
                                            EntryCheck check) {
  if (role_ != PaxosRole::kLeader) return Status::Unavailable("paxos: not the leader");
  if (pipeline_room() == 0) return Status::Unavailable("paxos: pipeline full");
  if (entry.size() + kMsgHeaderBytes + kEntryHeaderBytes > options_.max_message_bytes) {
    return Status::InvalidArgument(
        fmt::format("entry of {} bytes exceeds a message", entry.size()));
  }
  if (reinterpret_cast<uintptr_t>(entry.data()) % 8 == 0) {
    SHOAL_TRY(verify_entry(next_slot_, entry, check));  // in place: no copy of a large entry
  } else {
    EntryBuffer aligned(entry);  // parse needs 8-byte alignment; the caller's may not have it
    SHOAL_TRY(verify_entry(next_slot_, aligned.span(), check));
  }
  const uint64_t slot = next_slot_;
  SHOAL_ASSERT(inflight_base_ + inflight_.size() == slot, "inflight covers [%lu, +%zu), next %lu",
               inflight_base_, inflight_.size(), slot);
  // An owned entry becomes the store's value (no copy); the caller's bytes are copied into
  // one (counted by the store).
  SHOAL_TRY(owned != nullptr ? store_.accept(slot, ballot_, std::move(*owned))
                             : store_.accept(slot, ballot_, entry));
  count_entry_proposed(entry.size());
  ++next_slot_;
  inflight_.push_back({});
  inflight_.back().bytes = static_cast<uint32_t>(entry.size());
  inflight_bytes_ += entry.size();
  ++stats_.proposed;
  if (!options_.defer_self_ack) count_ack(slot, options_.replica_id);
  const uint64_t now = env_.now_ns();
  inflight_[slot - inflight_base_].first_sent_ns = now;
  inflight_[slot - inflight_base_].last_sent_ns = now;
  begin(kPaxosAccept, ballot_, next_slot_ - 1);
  add_entry(slot, ballot_, false, store_.find(slot)->value.span());
  for (uint32_t p = 0; p < options_.replica_count; ++p) {
    // A follower catching up would refuse a slot beyond its window: spare the bandwidth.
    if (p == options_.replica_id || !in_peer_window(p, slot)) continue;
    store_u32(out_.data() + 44, others_current(p) ? kFlagOthersCurrent : 0);
    send_to(p);
  }
  deliver_chosen();  // a single replica chooses at once
  return slot;
}

void PaxosStream::tick() {
  const uint64_t now = env_.now_ns();
  if (role_ == PaxosRole::kLeader) {
    leader_tick(now);
    return;
  }
  if (now >= next_heartbeat_ns_) send_heartbeat(now);
  if (role_ == PaxosRole::kCandidate) {
    if (now >= phase1_deadline_ns_) {
      role_ = PaxosRole::kFollower;  // this attempt failed; maybe retry below
      merged_.clear();
    } else if (now >= prepare_sent_ns_ + options_.retransmit_ns) {
      send_prepares(/*only_missing=*/true);
      return;
    } else {
      return;
    }
  }
  if (options_.may_lead && now - leader_heard_ns_ > options_.election_timeout_ns &&
      lowest_live(now)) {
    start_election();
  }
}

void PaxosStream::send_heartbeat(uint64_t now) {
  next_heartbeat_ns_ = now + options_.heartbeat_ns;
  begin(kPaxosHeartbeat, store_.promised(), 0);
  if (store_.rejoining()) store_u32(out_.data() + 44, kFlagNonVoting);
  for (uint32_t p = 0; p < options_.replica_count; ++p) {
    if (p != options_.replica_id) send_to(p);
  }
}

void PaxosStream::heartbeat_if_due_within(uint64_t slack_ns) {
  if (role_ == PaxosRole::kLeader) return;
  const uint64_t now = env_.now_ns();
  if (now + slack_ns >= next_heartbeat_ns_) send_heartbeat(now);
}

bool PaxosStream::quiet() const {
  if (role_ == PaxosRole::kCandidate) return false;
  if (role_ != PaxosRole::kLeader) return true;
  const uint64_t chosen = store_.chosen_index();
  if (next_slot_ - 1 != chosen) return false;
  for (uint32_t p = 0; p < options_.replica_count; ++p) {
    if (p == options_.replica_id) continue;
    if (catchup_[p].count > 0 || peer_chosen_[p] + options_.pipeline_slots < chosen) return false;
  }
  return true;
}

void PaxosStream::campaign() {
  if (role_ == PaxosRole::kLeader) return;
  if (role_ == PaxosRole::kCandidate) {
    send_prepares(/*only_missing=*/true);
    return;
  }
  start_election();
}

bool PaxosStream::peer_alive(uint32_t peer, uint64_t now_ns) const {
  return now_ns - peer_heard_ns_[peer] <= options_.election_timeout_ns;
}

bool PaxosStream::lowest_live(uint64_t now_ns) const {
  for (uint32_t p = 0; p < options_.replica_id; ++p) {
    if (peer_alive(p, now_ns) && !peer_rejoining_[p]) return false;
  }
  return true;
}

void PaxosStream::leader_tick(uint64_t now) {
  // A leader that has not heard a majority for an election timeout cannot choose anything;
  // stepping down tells the local proposer (is_leader()) and lets another replica take over.
  uint32_t heard = 1;
  for (uint32_t p = 0; p < options_.replica_count; ++p) {
    if (p != options_.replica_id && peer_alive(p, now)) ++heard;
  }
  if (heard < majority() && options_.step_down_without_majority) {
    step_down("no majority heard");
    return;
  }
  note_majority_heard(heard >= majority(), now);
  const bool heartbeat = now >= next_heartbeat_ns_;
  if (heartbeat) next_heartbeat_ns_ = now + options_.heartbeat_ns;
  send_due_accepts(now, heartbeat);
  // Catch-up only for slots chosen at least one retransmit period ago: a follower is normally
  // one commit index behind and marks those itself from the next accept.
  if (now >= learn_mark_ns_ + options_.retransmit_ns) {
    learn_mark_ns_ = now;
    learn_mark_prev_ = learn_mark_;
    learn_mark_ = store_.chosen_index();
  }
  for (uint32_t p = 0; p < options_.replica_count; ++p) {
    if (p != options_.replica_id) pump_learn(p, now);
  }
}

void PaxosStream::send_due_accepts(uint64_t now, bool heartbeat) {
  for (uint32_t p = 0; p < options_.replica_count; ++p) {
    if (p != options_.replica_id) send_accepts(p, now, heartbeat);
  }
  const uint64_t timeout = accept_timeout_ns();
  bool resent = false;
  for (Inflight& f : inflight_) {
    if (!f.chosen && now >= f.last_sent_ns + timeout) {
      f.last_sent_ns = now;
      f.resent = true;
      resent = true;
    }
  }
  if (resent && accept_backoff_ < kAcceptBackoffMax) ++accept_backoff_;
}

// Sends `peer` the unacknowledged slots whose (re)transmission is due, batched; with nothing
// due and `heartbeat`, an empty accept that carries the commit index.
bool PaxosStream::others_current(uint32_t peer) const {
  const uint32_t all = (options_.replica_count >= 32 ? ~0u : (1u << options_.replica_count) - 1);
  return rejoin_heard_[peer] != 0 && (rejoin_heard_[peer] | (1u << peer)) == all;
}

void PaxosStream::begin_accept(uint32_t peer) {
  begin(kPaxosAccept, ballot_, next_slot_ - 1);
  if (others_current(peer)) store_u32(out_.data() + 44, kFlagOthersCurrent);
}

void PaxosStream::send_accepts(uint32_t peer, uint64_t now, bool heartbeat) {
  begin_accept(peer);
  bool sent_any = false;
  const uint64_t timeout = accept_timeout_ns();
  for (size_t i = 0; i < inflight_.size(); ++i) {
    const Inflight& f = inflight_[i];
    if (f.chosen || (f.acks >> peer & 1) != 0 || now < f.last_sent_ns + timeout) {
      continue;
    }
    const uint64_t slot = inflight_base_ + i;
    if (!in_peer_window(peer, slot)) break;  // the rest too: catch-up first
    const PaxosSlot* s = store_.find(slot);
    if (s == nullptr || s->value.empty()) continue;
    if (!add_entry(slot, ballot_, false, s->value.span())) {
      send_to(peer);
      sent_any = true;
      begin_accept(peer);
      if (!add_entry(slot, ballot_, false, s->value.span())) continue;
    }
    ++stats_.retransmits;
  }
  if (out_entries_ > 0 || (heartbeat && !sent_any)) send_to(peer);
}

// Catch-up of a follower whose chosen index is below what was chosen a retransmit period
// ago. Near (within a pipeline of our chosen index, so accepts bring it the new slots): one
// learn message per retransmit period, as before there was a source. Far: up to
// catchup_inflight_messages unacknowledged messages (its reported chosen index acknowledges
// them), so a follower thousands of slots behind catches up at the pace it can take. A window
// with no progress for a retransmit period starts over from its chosen index (lost, or the
// follower restarted).
void PaxosStream::pump_learn(uint32_t peer, uint64_t now) {
  // A replica silent for an election timeout is down (a failed leader, a killed follower):
  // catching it up would read the WAL and build messages nobody receives, every retransmit
  // period, on the thread that proposes. It says when it is back (every replica heartbeats).
  if (!peer_alive(peer, now)) return;
  CatchUp& c = catchup_[peer];
  while (c.count > 0 && peer_chosen_[peer] >= c.last_slot[c.head]) {
    c.head = (c.head + 1) % kCatchupInflightMax;
    --c.count;
  }
  if (c.count > 0 && now >= c.sent_ns + options_.retransmit_ns) c.count = 0;
  if (c.count == 0 && peer_chosen_[peer] >= learn_mark_prev_) return;  // keeping up
  // Further behind than a pipeline of proposals is more than a slow follower: it lacks chosen
  // slots accepts will not bring (a new leader's ballot does not mark what it accepted under
  // the old one chosen). Paced by its acknowledgements, not by retransmit periods: one learn
  // per period left a follower a few hundred slots behind after a takeover, and the leader's
  // lag bound then held every proposal back for it.
  const bool far = peer_chosen_[peer] + options_.pipeline_slots < store_.chosen_index();
  if (!far && now < c.sent_ns + options_.retransmit_ns) return;
  const uint32_t window = far ? options_.catchup_inflight_messages : 1;
  // Bounded by the window.
  while (c.count < window) {
    const uint64_t from = c.count == 0
                              ? peer_chosen_[peer] + 1
                              : c.last_slot[(c.head + c.count - 1) % kCatchupInflightMax] + 1;
    if (from > store_.chosen_index()) break;
    const uint64_t last = send_learn(peer, from);
    if (last == 0) break;
    c.last_slot[(c.head + c.count) % kCatchupInflightMax] = last;
    ++c.count;
    c.sent_ns = now;
  }
}

// One paxos_learn message of chosen slots from `from` on: trimmed ones from the source, the
// rest from the store. Returns the last slot sent, 0 if nothing was.
uint64_t PaxosStream::send_learn(uint32_t peer, uint64_t from) {
  const uint64_t chosen = store_.chosen_index();
  begin(kPaxosLearn, ballot_, 0);
  uint64_t slot = from;
  if (slot < store_.first_slot()) {
    if (source_ == nullptr) {
      ++stats_.catchup_unavailable;
      return 0;
    }
    // Every entry the source returns fits: room for the headers of a full message.
    const size_t overhead =
        kMsgHeaderBytes + size_t{options_.max_entries_per_message} * kEntryHeaderBytes;
    const size_t budget =
        options_.max_message_bytes > overhead ? options_.max_message_bytes - overhead : 0;
    const Status st = source_->read(slot, std::min(chosen, store_.first_slot() - 1),
                                    options_.max_entries_per_message, budget, &source_entries_);
    if (!st.ok()) {
      ++stats_.catchup_source_errors;
      last_catchup_error_ = st;
      return 0;
    }
    for (const ChosenEntry& e : source_entries_) {
      if (e.slot != slot || !add_entry(slot, 0, true, e.bytes)) break;
      ++stats_.catchup_entries_sent;
      ++stats_.catchup_source_entries;
      ++slot;
    }
  }
  for (; slot >= store_.first_slot() && slot <= chosen; ++slot) {
    const PaxosSlot* s = store_.find(slot);
    if (!add_entry(slot, s->accepted, true, s->value.span())) break;
    ++stats_.catchup_entries_sent;
  }
  if (slot == from) return 0;
  stats_.catchup_bytes_sent += out_bytes_ - kMsgHeaderBytes - (slot - from) * kEntryHeaderBytes;
  send_to(peer);
  return slot - 1;
}

// ---- elections and phase 1 -------------------------------------------------------------------

void PaxosStream::start_election() {
  if (store_.rejoining()) {  // its own promise must not count: it may have forgotten one
    ++stats_.rejoin_elections_refused;
    return;
  }
  const uint64_t round = std::max(max_round_seen_, ballot_round(store_.promised())) + 1;
  const Ballot b = make_ballot(round, options_.replica_id);
  if (!store_.promise(b).ok()) return;  // could not persist: try again next timeout
  max_round_seen_ = round;
  ballot_ = b;
  role_ = PaxosRole::kCandidate;
  ++stats_.elections;
  promise_mask_ = 1u << options_.replica_id;
  phase1_incomplete_ = false;
  phase1_page_end_ = UINT64_MAX;
  phase1_from_slot_ = store_.chosen_index() + 1;
  phase1_max_slot_ = store_.last_slot();  // our own accepted slots count as a promise
  merged_.clear();
  const uint64_t now = env_.now_ns();
  phase1_deadline_ns_ = now + options_.election_timeout_ns;
  leader_heard_ns_ = now;
  send_prepares(/*only_missing=*/false);
  if (std::popcount(promise_mask_) >= static_cast<int>(majority())) finish_phase1();
}

void PaxosStream::send_prepares(bool only_missing) {
  prepare_sent_ns_ = env_.now_ns();
  begin(kPaxosPrepare, ballot_, phase1_from_slot_);
  for (uint32_t p = 0; p < options_.replica_count; ++p) {
    if (p == options_.replica_id || (only_missing && (promise_mask_ >> p & 1) != 0)) continue;
    send_to(p);
  }
}

void PaxosStream::handle_prepare(const Msg& m) {
  if (store_.rejoining()) {
    // An empty promise from an acceptor that forgot what it accepted could complete a phase
    // 1 that misses a chosen value: no answer, and no state change either.
    ++stats_.rejoin_prepares_ignored;
    return;
  }
  if (m.ballot < store_.promised()) {
    begin(kPaxosReject, store_.promised(), m.ballot);
    ++stats_.rejects_sent;
    send_to(m.from);
    return;
  }
  if (!store_.promise(m.ballot).ok()) return;  // not durable: stay silent
  if (ballot_ != m.ballot && role_ != PaxosRole::kFollower) step_down("prepare", m.ballot, m.from);
  leader_heard_ns_ = env_.now_ns();  // someone is taking over: do not compete for a while
  // Everything held from from_slot on, bounded; `complete` when nothing was left out.
  begin(kPaxosPromise, m.ballot, m.arg);
  bool complete = m.arg >= store_.first_slot();
  for (uint64_t slot = std::max(m.arg, store_.first_slot()); complete && slot <= store_.last_slot();
       ++slot) {
    const PaxosSlot* s = store_.find(slot);
    if (s->value.empty()) continue;
    complete = add_entry(slot, s->accepted, s->chosen, s->value.span());
  }
  if (complete) store_u32(out_.data() + 44, kFlagComplete);
  send_to(m.from);
}

void PaxosStream::handle_promise(const Msg& m) {
  if (role_ != PaxosRole::kCandidate || m.ballot != ballot_ || m.arg != phase1_from_slot_) return;
  uint64_t last_reported = phase1_from_slot_ - 1;  // the highest slot this promise covers
  m.for_each([&](const Msg::Entry& e) {
    last_reported = std::max(last_reported, e.slot);
    if (e.slot < store_.first_slot() || e.slot <= store_.chosen_index()) return;
    if (!verify_entry(e.slot, EntryBuffer(e.value).span()).ok()) {
      ++stats_.bad_entries;
      return;
    }
    if (e.chosen) {
      // A chosen value is final: keep it at once (persisted through on_learn).
      if (!store_.learn(e.slot, e.value).ok()) ++stats_.learn_failed;
      return;
    }
    phase1_max_slot_ = std::max(phase1_max_slot_, e.slot);
    Merged& g = merged_[e.slot];
    if (e.ballot > g.ballot) g = Merged{e.ballot, EntryBuffer(e.value)};
  });
  if ((m.flags & kFlagComplete) == 0) {
    phase1_incomplete_ = true;
    phase1_page_end_ = std::min(phase1_page_end_, last_reported);
  }
  promise_mask_ |= 1u << m.from;
  deliver_chosen();
  if (std::popcount(promise_mask_) >= static_cast<int>(majority())) finish_phase1();
}

void PaxosStream::finish_phase1() {
  if (phase1_incomplete_) {
    // Some acceptor had more than one message could carry. We learned the chosen part, and
    // every slot up to the shortest incomplete promise's last one was reported by each
    // promise of this round (a majority): ask again, same ballot, for the slots after that,
    // keeping what was merged (pages of an accepted suffix larger than a message; a superset
    // of a majority's reports is as safe as the majority's). No progress (the acceptor
    // trimmed what we lack): wait for the deadline instead of spinning.
    phase1_incomplete_ = false;
    const uint64_t next_from = std::max(store_.chosen_index(), phase1_page_end_) + 1;
    phase1_page_end_ = UINT64_MAX;
    if (next_from <= phase1_from_slot_) {
      ++stats_.catchup_unavailable;
      return;
    }
    promise_mask_ = 1u << options_.replica_id;
    phase1_from_slot_ = next_from;
    // A page came back from a majority: progress. Each page gets an election timeout of its
    // own, or a long accepted suffix (a leader that stepped down with a full pipeline of
    // megabyte entries, on a loaded machine) could never be paged through in one and every
    // election would start over from the same place.
    phase1_deadline_ns_ = env_.now_ns() + options_.election_timeout_ns;
    send_prepares(/*only_missing=*/false);
    return;
  }
  role_ = PaxosRole::kLeader;
  ++stats_.became_leader;
  const uint64_t chosen = store_.chosen_index();
  const uint64_t top = std::max({phase1_max_slot_, store_.last_slot(), chosen});
  inflight_.clear();
  inflight_bytes_ = 0;
  inflight_base_ = chosen + 1;
  next_slot_ = top + 1;
  inflight_.resize(top - chosen);
  peer_chosen_.fill(chosen);  // optimistic until the first replies say otherwise
  rejoin_heard_.fill(0);
  catchup_.fill(CatchUp{});
  learn_mark_ = learn_mark_prev_ = chosen;
  for (uint64_t slot = chosen + 1; slot <= top; ++slot) repropose(slot);
  merged_.clear();
  deliver_chosen();
  const uint64_t now = env_.now_ns();
  next_heartbeat_ns_ = now + options_.heartbeat_ns;
  learn_mark_ns_ = now;
  send_due_accepts(now, /*heartbeat=*/true);
}

// Phase 2 for one slot after phase 1: the highest-ballot value a promise (or our own store)
// reported, else a no-op. Values already chosen stay as they are.
void PaxosStream::repropose(uint64_t slot) {
  Inflight& f = inflight_[slot - inflight_base_];
  const PaxosSlot* own = store_.find(slot);
  if (own != nullptr && own->chosen) {
    f.chosen = true;
    return;
  }
  auto it = merged_.find(slot);
  const bool own_wins = own != nullptr && !own->value.empty() &&
                        (it == merged_.end() || own->accepted >= it->second.ballot);
  Status st;
  if (own_wins) {
    st = store_.accept(slot, ballot_, own->value.span());
    ++stats_.reproposed;
  } else if (it != merged_.end()) {
    st = store_.accept(slot, ballot_, it->second.value.span());
    ++stats_.reproposed;
  } else {
    alignas(8) std::byte buf[kLogHeaderBytes + kLogRecordHeaderBytes];
    LogBatchBuilder b;
    b.reset(buf, {options_.shard, options_.stream, options_.epoch, slot}, BatchLimits{});
    st = store_.accept(slot, ballot_, b.seal(kLogFlagNoop));
    ++stats_.noops_proposed;
  }
  // As for fresh proposals: with defer_self_ack our vote counts once the WAL has it.
  if (st.ok() && !options_.defer_self_ack) count_ack(slot, options_.replica_id);
}

void PaxosStream::note_majority_heard(bool heard, uint64_t now) {
  static const bool debug = std::getenv("SHOAL_REPL_DEBUG") != nullptr;
  if (!heard && no_majority_since_ns_ == 0) {
    no_majority_since_ns_ = now;
    ++stats_.majority_lost;
    if (debug) {
      std::fprintf(stderr,
                   "paxos %u stream %u: no majority heard for an election timeout; still "
                   "leading (ballot %lx)\n",
                   options_.replica_id, options_.stream, ballot_);
    }
  } else if (heard && no_majority_since_ns_ != 0) {
    if (debug) {
      std::fprintf(stderr, "paxos %u stream %u: a majority heard again after %lu ms\n",
                   options_.replica_id, options_.stream, (now - no_majority_since_ns_) / 1'000'000);
    }
    no_majority_since_ns_ = 0;
  }
}

void PaxosStream::step_down(const char* why, Ballot seen, uint32_t from) {
  if (role_ == PaxosRole::kFollower) return;
  static const bool debug = std::getenv("SHOAL_REPL_DEBUG") != nullptr;
  if (debug) {
    std::fprintf(stderr, "paxos %u stream %u: stepping down (%s; ballot %lx from %u, ours %lx)\n",
                 options_.replica_id, options_.stream, why, seen, from, ballot_);
  }
  role_ = PaxosRole::kFollower;
  ++stats_.stepped_down;
  no_majority_since_ns_ = 0;
  inflight_.clear();
  inflight_bytes_ = 0;
  merged_.clear();
  next_slot_ = store_.chosen_index() + 1;
  inflight_base_ = next_slot_;
  leader_heard_ns_ = env_.now_ns();  // give the new leader an election timeout to show up
}

void PaxosStream::handle_reject(const Msg& m) {
  if (role_ != PaxosRole::kFollower && m.arg == ballot_ && m.ballot > ballot_) {
    step_down("reject", m.ballot, m.from);
  }
}

// ---- phase 2 ---------------------------------------------------------------------------------

void PaxosStream::handle_accept(const Msg& m) {
  if (m.ballot < store_.promised()) {
    begin(kPaxosReject, store_.promised(), m.ballot);
    ++stats_.rejects_sent;
    send_to(m.from);
    return;
  }
  if (!store_.promise(m.ballot).ok()) return;
  if (ballot_ != m.ballot && role_ != PaxosRole::kFollower) step_down("accept", m.ballot, m.from);
  leader_heard_ns_ = env_.now_ns();
  // Reply with the slots now held in m.ballot; acks are entries without values.
  std::vector<uint64_t>& acked = acked_;  // reused; at most max_entries_per_message
  acked.clear();
  m.for_each([&](const Msg::Entry& e) {
    if (e.slot < store_.first_slot()) return;
    if (e.slot > store_.chosen_index() + options_.accept_window_slots) {
      ++stats_.out_of_window;  // catch-up first; the leader retransmits
      return;
    }
    const PaxosSlot* s = store_.find(e.slot);
    if (s != nullptr && s->chosen) {
      // Vote only for the chosen bytes themselves: acking other bytes would forge a vote.
      if (s->value.same_bytes(e.value)) acked.push_back(e.slot);
      return;
    }
    // The bytes as received (kept where they arrived, or the acceptor's one aligned copy),
    // validated in place, then kept by the store. Bytes it already holds (a retransmission)
    // are compared, not copied.
    if (s != nullptr && s->value.same_bytes(e.value)) {
      if (store_.accept(e.slot, m.ballot, e.value).ok()) acked.push_back(e.slot);
      return;
    }
    EntryBuffer copy = keep_or_copy(e.value);
    if (!verify_entry(e.slot, copy.span()).ok()) {
      ++stats_.bad_entries;
      return;
    }
    const size_t entry_bytes = copy.span().size();
    if (store_.accept(e.slot, m.ballot, std::move(copy)).ok()) {
      count_entry_received(entry_bytes);
      acked.push_back(e.slot);
    }
  });
  apply_commit(m.ballot, m.chosen_index);
  begin(kPaxosAccepted, m.ballot, 0);
  if (store_.rejoining()) {
    // Stored (and made durable like any acceptance), but no vote: only the chosen index goes
    // back, which paces the leader's catch-up. The first accept of a ballot fixes the tail
    // this acceptor must hold before it votes (maybe_finish_rejoin).
    if (m.ballot != rejoin_ballot_) {
      rejoin_ballot_ = m.ballot;
      rejoin_tail_ = m.arg;
      rejoin_others_current_ = false;
      ++stats_.rejoin_attached;
    }
    rejoin_others_current_ = rejoin_others_current_ || (m.flags & kFlagOthersCurrent) != 0;
    store_u32(out_.data() + 44, kFlagNonVoting);
    send_to(m.from);
    maybe_finish_rejoin();
    return;
  }
  for (uint64_t slot : acked) add_entry(slot, m.ballot, false, {});
  send_to(m.from);
}

// Why this is enough (docs/REPLICATION.md, "A replica that lost its directory rejoins without
// a vote"): every other replica accepted the attached leader's ballot b after we lost our
// state, so no ballot above b can have been promised by any of them before (nor by us, since
// a candidate promises its own ballot first); we hold every slot up to the leader's tail
// chosen or accepted in b, which covers everything chosen below b; our promise is b or higher.
void PaxosStream::maybe_finish_rejoin() {
  if (!store_.rejoining() || rejoin_ballot_ == 0 || !rejoin_others_current_) return;
  // Bounded by the acceptance window.
  if (rejoin_tail_ > store_.chosen_index() + options_.accept_window_slots) return;
  for (uint64_t slot = store_.chosen_index() + 1; slot <= rejoin_tail_; ++slot) {
    const PaxosSlot* s = store_.find(slot);
    if (s == nullptr || s->value.empty() || (!s->chosen && s->accepted != rejoin_ballot_)) return;
  }
  if (!store_.finish_rejoin().ok()) return;  // not durable yet: asked again next time
  ++stats_.rejoined;
}

// Slots up to the leader's chosen index that we hold accepted in the leader's ballot hold
// the leader's value, which is the chosen one.
void PaxosStream::apply_commit(Ballot b, uint64_t commit_index) {
  const uint64_t last = std::min(commit_index, store_.last_slot());
  for (uint64_t slot = store_.chosen_index() + 1; slot <= last; ++slot) {
    const PaxosSlot* s = store_.find(slot);
    if (s != nullptr && !s->chosen && !s->value.empty() && s->accepted == b) {
      store_.mark_chosen(slot);
    }
  }
  deliver_chosen();
}

void PaxosStream::handle_accepted(const Msg& m) {
  if (role_ != PaxosRole::kLeader || m.ballot != ballot_) return;
  peer_chosen_[m.from] = m.chosen_index;
  if ((m.flags & kFlagNonVoting) != 0) {
    ++stats_.nonvoting_replies;
    // From now on, which replicas accept in our ballot (ourselves: we lead in it), counted by
    // their acceptances of slots proposed from now on: a reply that left before the
    // rejoiner lost its state cannot acknowledge one.
    if (rejoin_heard_[m.from] == 0) {
      rejoin_heard_[m.from] = 1u << options_.replica_id;
      rejoin_from_slot_[m.from] = next_slot_;
    }
    return;
  }
  rejoin_heard_[m.from] = 0;  // it votes
  uint64_t newest = 0;
  m.for_each([&](const Msg::Entry& e) {
    newest = std::max(newest, e.slot);
    count_ack(e.slot, m.from);
  });
  for (uint32_t p = 0; p < options_.replica_count; ++p) {
    if (rejoin_heard_[p] != 0 && newest >= rejoin_from_slot_[p]) rejoin_heard_[p] |= 1u << m.from;
  }
  deliver_chosen();
}

uint64_t PaxosStream::accept_timeout_ns() const {
  const uint64_t learnt = std::max(2 * answer_srtt_ns_, options_.retransmit_ns << accept_backoff_);
  return std::min(learnt, kAcceptTimeoutMaxFactor * options_.retransmit_ns);
}

// A follower's first answer to an accept sent once: srtt += (sample - srtt) / 8, as TCP does.
void PaxosStream::sample_answer(const Inflight& f, uint32_t replica) {
  if (replica == options_.replica_id || f.resent || (f.acks >> replica & 1) != 0) return;
  const uint64_t now = env_.now_ns();
  if (f.first_sent_ns == 0 || now < f.first_sent_ns) return;
  const uint64_t sample = now - f.first_sent_ns;
  answer_srtt_ns_ =
      answer_srtt_ns_ == 0 ? sample : answer_srtt_ns_ - answer_srtt_ns_ / 8 + sample / 8;
  accept_backoff_ = 0;
}

void PaxosStream::count_ack(uint64_t slot, uint32_t replica) {
  if (slot < inflight_base_ || slot - inflight_base_ >= inflight_.size()) return;
  Inflight& f = inflight_[slot - inflight_base_];
  sample_answer(f, replica);
  f.acks |= 1u << replica;
  if (!f.chosen && std::popcount(f.acks) >= static_cast<int>(majority())) {
    f.chosen = true;
    store_.mark_chosen(slot);
  }
}

void PaxosStream::handle_learn(const Msg& m) {
  bool stored = false;
  m.for_each([&](const Msg::Entry& e) {
    if (!e.chosen || e.slot <= store_.chosen_index() || e.slot < store_.first_slot()) return;
    // A leader's next_slot_ is above every chosen slot (phase 1 saw them); keep it that way.
    if (role_ == PaxosRole::kLeader && e.slot >= next_slot_) return;
    if (e.slot > store_.chosen_index() + options_.accept_window_slots) return;
    EntryBuffer copy = keep_or_copy(e.value);
    if (!verify_entry(e.slot, copy.span()).ok()) {
      ++stats_.bad_entries;
      return;
    }
    const size_t entry_bytes = copy.span().size();
    if (!store_.learn(e.slot, std::move(copy)).ok()) {
      ++stats_.learn_failed;  // not durable: the leader sends it again
      return;
    }
    count_entry_received(entry_bytes);
    stored = true;
  });
  deliver_chosen();
  maybe_finish_rejoin();
  // Acknowledge with our new chosen index at once: the leader paces catch-up by it.
  if (stored && role_ != PaxosRole::kLeader) {
    begin(kPaxosHeartbeat, store_.promised(), 0);
    if (store_.rejoining()) store_u32(out_.data() + 44, kFlagNonVoting);
    send_to(m.from);
  }
}

void PaxosStream::handle_heartbeat(const Msg& m) {
  peer_rejoining_[m.from] = (m.flags & kFlagNonVoting) != 0;
  if (role_ == PaxosRole::kLeader) {
    peer_chosen_[m.from] = m.chosen_index;
    if (m.ballot > ballot_) {
      step_down("heartbeat", m.ballot, m.from);  // that replica promised a newer candidate
      return;
    }
    if (catchup_[m.from].count > 0) pump_learn(m.from, env_.now_ns());
  }
}

void PaxosStream::note_self_durable(Ballot b, uint64_t slot) {
  if (role_ != PaxosRole::kLeader || b != ballot_) return;
  const uint64_t last = std::min(slot, next_slot_ - 1);
  for (uint64_t s = inflight_base_; s <= last; ++s) count_ack(s, options_.replica_id);
  deliver_chosen();
}

void PaxosStream::deliver_chosen() {
  const uint64_t chosen = store_.advance();
  for (uint64_t slot = delivered_ + 1; slot <= chosen; ++slot) {
    ++stats_.chosen;
    if (on_chosen_) on_chosen_(slot, store_.find(slot)->value);
  }
  delivered_ = chosen;
  store_.trim();
  if (role_ == PaxosRole::kLeader) {
    while (!inflight_.empty() && inflight_base_ <= chosen) {
      inflight_bytes_ -= inflight_.front().bytes;
      inflight_.pop_front();
      ++inflight_base_;
    }
    if (inflight_.empty()) inflight_base_ = std::max(inflight_base_, chosen + 1);
  }
}

// ---- messages ----------------------------------------------------------------------------------

bool PaxosStream::is_learn_message(std::span<const std::byte> bytes) {
  return bytes.size() >= kMsgHeaderBytes && load_u16(bytes.data()) == kMsgMagic &&
         static_cast<uint8_t>(bytes[3]) == kPaxosLearn;
}

EntryBuffer PaxosStream::keep_or_copy(std::span<const std::byte> value) {
  if (keeper_ != nullptr) {
    EntryBuffer kept = keeper_->keep(value);
    if (!kept.empty()) {
      ++stats_.entries_kept;
      return kept;
    }
  }
  return acceptor_copy(value);
}

void PaxosStream::on_message(uint32_t from, std::span<const std::byte> bytes, EntryKeeper* keeper) {
  keeper_ = keeper;
  dispatch(from, bytes);
  keeper_ = nullptr;
}

void PaxosStream::dispatch(uint32_t from, std::span<const std::byte> bytes) {
  auto m = decode(bytes, options_);
  if (!m.ok() || m->from != from) {
    if (std::getenv("SHOAL_REPL_DEBUG") != nullptr && stats_.malformed < 5) {
      std::fprintf(stderr, "paxos %u: malformed message of %zu bytes from %u: %s\n",
                   options_.replica_id, bytes.size(), from,
                   m.ok() ? "sender mismatch" : m.status().to_string().c_str());
    }
    ++stats_.malformed;
    return;
  }
  ++stats_.messages_received;
  peer_heard_ns_[from] = env_.now_ns();
  max_round_seen_ = std::max(max_round_seen_, ballot_round(m->ballot));
  switch (m->type) {
    case kPaxosPrepare:
      handle_prepare(*m);
      break;
    case kPaxosPromise:
      handle_promise(*m);
      break;
    case kPaxosAccept:
      handle_accept(*m);
      break;
    case kPaxosAccepted:
      handle_accepted(*m);
      break;
    case kPaxosReject:
      handle_reject(*m);
      break;
    case kPaxosLearn:
      handle_learn(*m);
      break;
    case kPaxosHeartbeat:
      handle_heartbeat(*m);
      break;
    default:
      ++stats_.malformed;
      break;
  }
}

void PaxosStream::begin(uint8_t type, Ballot b, uint64_t arg) {
  out_.assign(kMsgHeaderBytes, std::byte{0});
  std::byte* h = out_.data();
  store_u16(h, kMsgMagic);
  h[2] = std::byte{kMsgVersion};
  h[3] = std::byte{type};
  store_u32(h + 4, options_.replica_id);
  store_u64(h + 8, stream_key(options_));
  store_u64(h + 16, b);
  store_u64(h + 24, store_.chosen_index());
  store_u64(h + 32, arg);
  out_entries_ = 0;
  out_bytes_ = kMsgHeaderBytes;
  out_values_.clear();
}

// False (message unchanged) when the entry would break the per-message bounds.
bool PaxosStream::add_entry(uint64_t slot, Ballot b, bool chosen,
                            std::span<const std::byte> value) {
  const size_t need = kEntryHeaderBytes + pad8(value.size());
  if (out_entries_ >= options_.max_entries_per_message ||
      out_bytes_ + need > options_.max_message_bytes) {
    return false;
  }
  // Gathering: out_ gets the entry header and, after the value (which stays where it is),
  // its zero padding. Otherwise the value is copied in between.
  const bool by_reference = gather_ && !value.empty();
  const size_t at = out_.size();
  out_.resize(at + (by_reference ? need - value.size() : need), std::byte{0});
  std::byte* e = out_.data() + at;
  store_u64(e, slot);
  store_u64(e + 8, b);
  store_u32(e + 16, static_cast<uint32_t>(value.size()));
  store_u32(e + 20, chosen ? kEntryChosen : 0);
  if (by_reference) {
    out_values_.push_back({at + kEntryHeaderBytes, value});
  } else if (!value.empty()) {
    std::memcpy(e + kEntryHeaderBytes, value.data(), value.size());
    count_copy(CopyHop::kMessageBuild, value.size());
  }
  out_bytes_ += need;
  ++out_entries_;
  store_u32(out_.data() + 40, out_entries_);
  return true;
}

void PaxosStream::send_to(uint32_t peer) {
  ++stats_.messages_sent;
  if (out_values_.empty()) {
    transport_.send(peer, out_);
    return;
  }
  // The message in order: header bytes up to each value, the value, ..., the last padding.
  // Bounded: 2 * max_entries_per_message + 1 <= kPaxosGatherPiecesMax pieces.
  pieces_.clear();
  const std::span<const std::byte> headers(out_);
  size_t from = 0;
  for (const OutValue& v : out_values_) {
    pieces_.push_back(headers.subspan(from, v.at - from));
    pieces_.push_back(v.bytes);
    from = v.at;
  }
  if (from < headers.size()) pieces_.push_back(headers.subspan(from));
  transport_.send_gather(peer, pieces_);
}

// Validates the header and walks every entry so handlers can iterate without checks.
Result<PaxosStream::Msg> PaxosStream::decode(std::span<const std::byte> b, const PaxosOptions& o) {
  if (b.size() < kMsgHeaderBytes || b.size() > o.max_message_bytes) {
    return Status::Corruption("paxos message size");
  }
  const std::byte* h = b.data();
  PaxosStream::Msg m;
  m.type = static_cast<uint8_t>(h[3]);
  m.from = load_u32(h + 4);
  m.ballot = load_u64(h + 16);
  m.chosen_index = load_u64(h + 24);
  m.arg = load_u64(h + 32);
  m.entry_count = load_u32(h + 40);
  m.flags = load_u32(h + 44);
  if (load_u16(h) != kMsgMagic || static_cast<uint8_t>(h[2]) != kMsgVersion || m.type == 0 ||
      m.type > kMsgTypeMax || m.from >= o.replica_count || m.from == o.replica_id ||
      load_u64(h + 8) != stream_key(o) || m.entry_count > o.max_entries_per_message) {
    return Status::Corruption("paxos message header");
  }
  // Walk the entries once: each header and value must lie inside the message, and the last
  // entry must end exactly at the message end.
  size_t off = kMsgHeaderBytes;
  for (uint32_t i = 0; i < m.entry_count; ++i) {
    if (b.size() - off < kEntryHeaderBytes) return Status::Corruption("paxos entry header");
    const uint64_t len = load_u32(h + off + 16);
    if (load_u64(h + off) == 0 || (b.size() - off - kEntryHeaderBytes) < pad8(len)) {
      return Status::Corruption("paxos entry value");
    }
    off += kEntryHeaderBytes + pad8(len);
  }
  if (off != b.size()) return Status::Corruption("paxos message trailing bytes");
  m.entries = b.subspan(kMsgHeaderBytes);
  return m;
}

}  // namespace shoal::repl
