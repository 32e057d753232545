// AcceptorLog: the durable state of one Paxos acceptor of one stream on one replica, i.e.
// what PaxosAcceptorStore must not forget across a crash (docs/REPLICATION.md "Durability").
//
// Two files in the replica's directory:
//  - stream-<s>.wal: every copy of a log entry the acceptor stored, byte for byte, in the
//    order it stored them (src/repl/wal.h, with allow_rewrites: a slot accepted again appears
//    again, the last copy wins);
//  - stream-<s>.acc: a journal of fixed 48-byte records (format 2): format(2) first, then
//    promise(ballot, wal_offset), chosen(index, wal_offset) hints and, in a closed segment,
//    sealed(highest slot). Each record carries its own XXH3, so a torn tail is detected and cut.
// Why the ballots are not inside the WAL: the entry bytes must stay identical on every replica
// (checksummed, replayed as they are), while the ballot an acceptor accepted them in is that
// acceptor's own fact.
//
// The ballot of a WAL copy comes from its position. Between two promises an acceptor accepts
// only in its promised ballot (accepting at b > promised raises the promise to b first), so a
// promise record is written whenever the promise rises, naming the WAL's end offset at that
// moment: every copy at or above that offset (and below the next promise record's) was
// accepted in that ballot. A copy's ballot = that of the last promise record at or below its
// offset; a re-accept of bytes already held in a lower ballot appends them again (a new copy
// above the new promise record), so one rule covers it. Before a promise record is written the
// WAL is made durable up to its offset (an fdatasync, on elections only), then the record is
// synced (kBatch, kAlways; kNone syncs nothing). Promise records' offsets therefore never
// decrease and never lie beyond the durable WAL. Per log entry: one WAL write and, with group
// commit, one fdatasync per group (of the WAL only).
//
// Learned copies (a chosen value stored by catch-up) get no record either: they pair with the
// promise record below them like any copy. Reporting a chosen value v as accepted in any
// ballot keeps Paxos safe: if v was chosen in ballot c by a quorum Q, a later phase-1 quorum
// meets Q in an acceptor that accepted v in c; it never learns over that slot (learn writes
// only bytes that differ from what the slot holds, and every proposal at a ballot >= c carries
// v), so its last copy of the slot is v accepted at a ballot >= c, with that ballot (by the
// rule above). The highest ballot reported is thus >= c, and every report at a ballot >= c
// carries v: honest acceptances by Paxos' invariant, learned copies because they are v. A copy
// learned before the acceptor ever promised lies under a promise record of ballot 0 (written
// for it): recovery restores it as chosen.
//
// Recovery reads each segment's journal, then its WAL: entries are self-validating (checksum;
// the WAL cuts a torn tail), each copy pairs with its ballot as above, and the last copy of a
// slot wins (highest offset, so a ballot >= the earlier ones'). A copy below the segment's
// first promise record cannot exist (every append follows a synced one): Corruption. Chosen
// hints are written without a sync and name the WAL's end offset: recovery trusts only those
// whose offset the recovered WAL reaches (so a lost re-accept or learned copy never leaves an
// older value marked chosen); losing them costs a re-learn from the leader. Records beyond the
// WAL's recovered end (only after kNone and an OS crash) are cut and the promise written again
// at that end.
//
// Segments (WAL truncation on followers): the files are split into segments, segment 0 being
// the unnumbered pair above and segment n stream-<s>.<n>.{wal,acc}. Only the newest is
// appended to; rotate() starts the next one (after a durable checkpoint) after sealing the old
// one's journal with its highest slot; the new journal opens with the promise at offset 0 and
// the chosen hint. drop_covered_segments(cut) deletes closed segments whose highest slot is at
// or below a checkpoint's cut. A slot may appear in several segments (rewrites); recovery
// reads them oldest first, so the last copy still wins, skips slots the checkpoint covers, and
// does not even read the WAL of a sealed segment the cut covers. A leader rotates too, once it
// holds a checkpoint fetched from a follower (leader.h "WAL truncation on the leader"); its
// syncer thread may be inside sync_from_any_thread() meanwhile, so the swap of the active WAL
// and that sync exclude each other (swap_mu_).
//
// Offsets in the index are global: segment n's byte b is at base(n) + b, where base(n + 1) =
// base(n) + the bytes of segment n, so copies that lie back to back across a rotation still
// form a regular group, and a read resolves an offset to the segment holding it.
//
// Serving chosen slots (ChosenSlotSource): a leader catches up a follower that lags beyond the
// slots its store retains by reading them back from this WAL, byte for byte. The index is
// sparse: per group of kIndexGroupSlots chosen slots, the offset of the first slot's copy when
// the group's last copies lie back to back (the normal case: one proposal after another),
// else one offset per slot of that group (rare: rewrites after an election, retransmissions
// out of order); per slot (offset, checksum) only for slots not yet in a sealed group (above
// the chosen index, bounded by the acceptance window). Copies in every live segment are indexed
// (a closed segment is read through a read-only descriptor kept while it lives), except, after
// a restart, slots a checkpoint covers (never read: NotFound); slots of deleted segments are
// not found either. A read pread()s at most max_bytes into
// one reusable buffer and validates every entry before returning it: its own checksum over its
// bytes (a torn or flipped copy fails), its sequence against the slot (a copy of another slot
// fails), and for unsealed slots the checksum the index took from the copy when it was written
// (another copy at that offset fails). No journal is needed for that: the index points at the
// slot's last copy, which is the value the acceptor holds.
//
// Format versioning: a journal without the format record (format 1, with a record per accepted
// entry) is refused with NotSupported naming the file; so is a newer format. Follower
// directories also carry the layout marker (follower.cc).
//
// Threads: owned by the stream's thread (the replica's event loop); hooks() and read() run
// there; sync_from_any_thread() may run elsewhere.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "shoal/status.h"
#include "src/repl/paxos_stream.h"
#include "src/repl/wal.h"

namespace shoal::repl {

struct AcceptorRecovery {
  Ballot promised = 0;
  uint64_t slots = 0;         // slots restored into the store (their last copies)
  uint64_t chosen_index = 0;  // from the chosen hints (slots marked chosen in the store)
  uint64_t superseded = 0;    // earlier copies of those slots (a later copy won)
  uint64_t wal_bytes = 0;
};

// How far one stream's acceptor log in a replica directory reaches, read without writing
// anything (read_acceptor_reach): what `cluster up` compares between the replicas of a shard
// before it picks the one to restart as its leader (docs/REPLICATION.md, "Restarting a whole
// cluster from disk"). A candidate whose chosen index lags the other acceptors' by more than
// the chosen slots they retain cannot complete phase 1 (promises do not page from the WAL).
struct AcceptorReach {
  // The highest chosen hint of the newest journal that holds one, among the hints whose WAL
  // offset the segment's WAL file reaches: the chosen index recovery would restore (unless an
  // OS crash lost WAL bytes below a hint it kept, which only a full WAL scan would see). A
  // checkpoint's cut never exceeds it: every rotation (after a checkpoint, on followers and
  // leaders alike) writes the chosen hint into the new journal, synced. 0: none.
  uint64_t chosen = 0;
  // The highest slot of a copy held (>= chosen): the closed segments' sealed records and the
  // active WAL's entries from where copies above the chosen hint can begin (the offset of a
  // hint twice the acceptance window below it). Copies above `chosen` may never be chosen.
  uint64_t highest_slot = 0;
  // False when the scan stopped at its byte bound (or the journal's bytes read ended before that
  // earlier hint): highest_slot is then a lower bound.
  bool highest_exact = true;
  uint64_t segments = 0;            // WAL segments on disk
  uint64_t wal_bytes = 0;           // their file sizes (preallocated zeros included)
  uint64_t journal_bytes_torn = 0;  // the active journal's tail recovery would cut
  // The stream carries a rejoin mark (AcceptorLog::mark_rejoining): the replica lost its
  // directory and has not caught up yet, so it must not lead (it cannot vote).
  bool rejoining = false;
};

// Reads the reach of <dir>/stream-<stream>: the journals' last records (backwards from each
// end, at most kReachJournalBytesMax per journal, newest segment first; a closed segment's
// sealed record) and the active WAL's last entries (from a hint some 512 slots below the
// chosen one: at most scan_bytes_max, each entry checked whole). Opens every file read-only
// and takes no lock, so it may run beside the replica (a snapshot of a moving log, then). NotFound
// when dir does not exist; a directory without this stream's files reaches nothing (all zeros).
// NotSupported for a journal of another format (the replica would refuse it too), naming the file.
inline constexpr uint64_t kReachJournalBytesMax = uint64_t{1} << 20;
inline constexpr uint64_t kReachScanBytesMax = uint64_t{16} << 20;
[[nodiscard]] Result<AcceptorReach> read_acceptor_reach(
    const std::string& dir, uint32_t stream, uint64_t scan_bytes_max = kReachScanBytesMax);

class AcceptorLog final : public ChosenSlotSource {
 public:
  // A rejoin mark (docs/REPLICATION.md, "A replica that lost its directory rejoins without a
  // vote"): <dir>/stream-<stream>.rejoin says that this stream's acceptor lost its state in a
  // cluster with history, so its store must start rejoining (PaxosAcceptorStore::rejoining:
  // no promise, no vote) until it caught up. Written (synced, directory included) before the
  // stream's first log file, so a directory with a log and no mark is a voter's; open() reads
  // it (rejoining()) and the on_rejoined hook deletes it once the WAL is synced. Its content
  // does not matter: its presence is the mark (a damaged one still marks).
  [[nodiscard]] static Status mark_rejoining(const std::string& dir, uint32_t stream);
  static std::string rejoin_mark_path(const std::string& dir, uint32_t stream);
  // Whether <dir> holds this stream's log: a WAL of some segment (a journal alone is a log
  // whose WAL was lost).
  [[nodiscard]] static Result<bool> holds_stream_log(const std::string& dir, uint32_t stream);

  // Opens (creating) the newest segment of <dir>/stream-<stream>: segment 0 is
  // stream-<stream>.{wal,acc}, segment n >= 1 stream-<stream>.<n>.{wal,acc} (rotate()).
  // REQUIRES: dir exists.
  // accept_sync_elsewhere: the accept hook never syncs (nor marks dirty); the owner syncs
  // with sync_from_any_thread() on its own schedule (a leader's syncer thread, with
  // PaxosOptions::defer_self_ack). Promises still sync in the hook.
  [[nodiscard]] static Result<std::unique_ptr<AcceptorLog>> open(
      const std::string& dir, uint32_t stream, FsyncPolicy fsync,
      bool accept_sync_elsewhere = false);
  ~AcceptorLog();
  AcceptorLog(const AcceptorLog&) = delete;
  AcceptorLog& operator=(const AcceptorLog&) = delete;

  // Rebuilds `store` (fresh) from the files of every segment, oldest first (a later copy of
  // a slot wins): promise, accepted slots with their ballots, and chosen slots up to the
  // persisted hint. Cuts torn tails. NotSupported for a journal of another format,
  // Corruption for a copy without a ballot; both name the file. Slots <= `covered` (a checkpoint
  // holds their effect) are neither read into memory nor put in the store: it starts after them
  // (PaxosAcceptorStore::start_after). REQUIRES: once, before hooks() and any append.
  [[nodiscard]] Result<AcceptorRecovery> recover(PaxosAcceptorStore& store, uint64_t covered = 0);
  // recover() of the closed segments numbered <= `through` alone, read-only: a lone leader's
  // compaction (leader.h) rebuilds its store from them on another thread while the live log
  // appends to a newer segment. No segment is opened for appending; intact (closed, synced)
  // files are not written. REQUIRES: those segments were closed by rotate() and are not
  // deleted during the call.
  [[nodiscard]] static Result<AcceptorRecovery> recover_closed(const std::string& dir,
                                                               uint32_t stream, uint64_t through,
                                                               PaxosAcceptorStore& store,
                                                               uint64_t covered);

  // WAL truncation (a follower, after a durable checkpoint): closes the active segment (both
  // files synced, the journal sealed with its highest slot) and starts segment n + 1, whose
  // journal opens with the promise at offset 0 and the chosen hint (synced), so an older
  // segment holds nothing a later one needs once its slots are covered. Reads (ChosenSlotSource)
  // still serve the closed segment's copies until drop_covered_segments() deletes it. Safe
  // while another thread is in sync_from_any_thread() (a leader's syncer).
  [[nodiscard]] Status rotate();
  // Deletes the closed segments whose every slot is <= `covered` (a
  // durable checkpoint's cut, which is chosen), and the index groups of their slots.
  // Returns the bytes deleted.
  [[nodiscard]] Result<uint64_t> drop_covered_segments(uint64_t covered);
  size_t segments() const { return closed_.size() + 1; }
  uint64_t active_segment() const { return active_; }  // the closed ones are numbered below it
  // The oldest live segment's number: above 0 once truncation deleted the log's head (its
  // slots then come only from a checkpoint, or another replica's WAL).
  uint64_t first_segment() const { return closed_.empty() ? active_ : closed_.front().number; }
  // The highest slot of the oldest closed segment's copies (0: only the active segment
  // lives). Tests and metrics.
  uint64_t oldest_segment_max_slot() const {
    return closed_.empty() ? 0 : closed_.front().max_slot;
  }

  // The PersistHooks to install on the store (they capture this object). on_rejoined syncs
  // the WAL (whatever the fsync policy: the vote rests on it) and deletes the rejoin mark.
  PersistHooks hooks();
  bool rejoining() const { return rejoining_; }  // the mark was there at open()
  // Records that slots <= index are chosen (no sync: a hint). Call after delivery.
  void note_chosen(uint64_t index);
  // Group commit (FsyncPolicy::kBatch and kAlways alike): hooks append without syncing and
  // leave the log dirty; the owner calls sync() before anything can reveal those acceptances (a
  // follower before it sends the replies of a batch of messages, a leader before it handles
  // any reply to its proposals). One fdatasync per file per group instead of two per entry.
  // kNone never syncs.
  [[nodiscard]] Status sync();
  bool dirty() const { return dirty_; }
  // A follower's log becoming a leader's (a takeover, leader.h): syncs what is dirty, then the
  // accept hook leaves syncing to the owner's syncer thread (sync_from_any_thread), as a log
  // opened with accept_sync_elsewhere does. REQUIRES: fsync is not kNone; called on the log's
  // thread, no append in flight.
  [[nodiscard]] Status sync_elsewhere_from_now_on();
  // fdatasync of the WAL, safe from another thread than the appender's: it covers every
  // append that returned before the call (promise records are synced in the hook). Leaves dirty()
  // alone (the owner's flag).
  [[nodiscard]] Status sync_from_any_thread() const;

  // WAL bytes over every segment: their logical ends (the active segment's preallocated
  // zeros, at most one step of Wal preallocation, are not counted).
  uint64_t wal_bytes() const { return wal_->end_offset() + closed_bytes_; }

  // ChosenSlotSource: slots at or below the index given to note_chosen() (or recovered), read
  // back from the WAL. Not found: not chosen yet, or this replica's WAL lacks the slot.
  [[nodiscard]] Status read(uint64_t from_slot, uint64_t to_slot, uint32_t max_entries,
                            size_t max_bytes, std::vector<ChosenEntry>* out) override;
  // Memory held by the slot index (the bound the tests check).
  size_t index_bytes() const;

  static constexpr uint32_t kIndexGroupSlots = 64;

 private:
  struct Segment {  // a closed segment
    uint64_t number = 0;
    uint64_t max_slot = 0;  // the highest slot of its copies
    uint64_t bytes = 0;     // WAL bytes
    uint64_t base = 0;      // the global offset of its byte 0 (see the header comment)
    int read_fd = -1;       // read-only, for serving its copies; -1: not served
    std::string path;       // its WAL's (messages)
  };
  // Where a global offset lies: a descriptor to pread() and the offset in that file.
  struct FileAt {
    int fd = -1;
    uint64_t offset = 0;
    const std::string* path = nullptr;  // for messages
  };
  [[nodiscard]] Result<FileAt> resolve(uint64_t global_offset, uint64_t bytes) const;
  uint64_t segment_base_of(uint64_t global_offset) const;
  AcceptorLog(std::string dir, uint32_t stream, FsyncPolicy fsync, bool accept_sync_elsewhere)
      : dir_(std::move(dir)),
        stream_(stream),
        fsync_(fsync),
        accept_sync_elsewhere_(accept_sync_elsewhere) {}
  std::string wal_path(uint64_t segment) const;
  std::string journal_path(uint64_t segment) const;
  [[nodiscard]] Status open_segment(uint64_t number);
  // Recovery (acceptor_log.cc).
  struct JournalFile;  // one segment's journal records
  struct Copies;       // the WAL copies recovery restores
  struct RecoveryScan {
    Ballot promised = 0;
    uint64_t chosen_hint = 0;
    uint64_t wal_bytes = 0;  // the active segment's
  };
  [[nodiscard]] Result<bool> decode_record(const std::byte* r, uint64_t pos, JournalFile* jf);
  [[nodiscard]] Status load_journal(uint64_t segment, JournalFile* jf);
  [[nodiscard]] Result<WalRecovery> scan_copies(Wal& wal, const JournalFile& jf, uint64_t covered,
                                                uint64_t base, uint64_t* max_slot, Copies* copies);
  [[nodiscard]] Status repair_journal(JournalFile* jf, uint64_t wal_end);
  [[nodiscard]] Status recover_segment(uint64_t number, Segment* seg, uint64_t covered,
                                       Copies* copies, RecoveryScan* scan);
  void note_slot(uint64_t slot) { active_max_slot_ = std::max(active_max_slot_, slot); }
  [[nodiscard]] Status append_record(uint32_t kind, uint64_t value, Ballot ballot,
                                     uint64_t wal_offset, bool sync);
  [[nodiscard]] Status persist_promise(Ballot b);
  [[nodiscard]] Status persist_accept(uint64_t slot, Ballot b, std::span<const std::byte> entry);
  [[nodiscard]] Status persist_learn(uint64_t slot, std::span<const std::byte> entry);

  // The slot index (see the header comment).
  static constexpr uint64_t kNoOffset = UINT64_MAX;
  static constexpr uint64_t kRegularGroup = UINT64_MAX;
  static constexpr uint64_t kRecentSlotsMax = uint64_t{1} << 20;  // beyond: not indexed
  struct SlotCopy {                                               // the last copy of one slot
    uint64_t offset = kNoOffset;
    uint64_t checksum = 0;
    uint64_t bytes = 0;
  };
  struct Group {
    uint64_t offset = kNoOffset;         // first slot's copy; kNoOffset: a slot is missing
    uint64_t irregular = kRegularGroup;  // else irregular_[irregular - irregular_base_]
  };
  struct Location {
    uint64_t offset = 0;
    uint64_t checksum = 0;  // 0: unknown (sealed slot; the copy was checked when sealed)
  };
  void index_copy(uint64_t slot, const SlotCopy& copy);
  void seal_groups(uint64_t chosen_index);
  [[nodiscard]] Result<Location> locate(uint64_t slot);
  [[nodiscard]] Result<uint64_t> read_entry_size(uint64_t slot, uint64_t offset) const;
  [[nodiscard]] Status pread_exact(std::byte* dst, size_t bytes, uint64_t offset) const;
  [[nodiscard]] Status read_one(uint64_t slot, const Location& at, size_t room, std::byte* dst,
                                uint64_t* entry_bytes) const;

  std::string dir_;
  uint32_t stream_ = 0;
  std::unique_ptr<Wal> wal_;  // the active segment's
  int journal_fd_ = -1;
  std::string journal_path_;
  uint64_t active_ = 0;  // the active segment's number
  uint64_t active_max_slot_ = 0;
  std::vector<Segment> closed_;  // oldest first
  uint64_t closed_bytes_ = 0;
  uint64_t active_base_ = 0;  // the active segment's global base offset
  // Held while wal_ is replaced (rotate) and while sync_from_any_thread() uses it.
  mutable std::mutex swap_mu_;
  Ballot promised_ = 0;            // the latest promise persisted (carried into a new segment)
  bool segment_promised_ = false;  // the active journal holds a promise record
  FsyncPolicy fsync_;
  bool accept_sync_elsewhere_ = false;
  uint64_t journal_end_ = 0;
  uint64_t chosen_noted_ = 0;
  bool dirty_ = false;
  bool rejoining_ = false;
  [[nodiscard]] Status finish_rejoin();

  std::deque<SlotCopy> recent_;  // slots [recent_base_, ...): not yet in a sealed group
  uint64_t recent_base_ = 1;     // 1 + kIndexGroupSlots * (group_base_ + groups_.size())
  uint64_t group_base_ = 0;      // groups before it are not indexed (an older segment's)
  std::deque<Group> groups_;
  std::deque<std::array<uint64_t, kIndexGroupSlots>> irregular_;
  uint64_t irregular_base_ = 0;  // Group::irregular - irregular_base_ indexes irregular_
  uint64_t cursor_slot_ = 0, cursor_offset_ = 0;  // where the slot after the last read lies
  std::unique_ptr<uint64_t[]> read_buf_;          // reused; grows to the largest max_bytes
  size_t read_buf_bytes_ = 0;
};

}  // namespace shoal::repl
