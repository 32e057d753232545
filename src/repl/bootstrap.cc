#include "src/repl/bootstrap.h"

#include <algorithm>
#include <vector>

#include "src/txn/record.h"

namespace shoal::repl {
namespace {

constexpr uint64_t kBootstrapInflightMax = 8;  // entries proposed and not yet chosen
constexpr uint64_t kReportSliceMs = 200;       // how often the wait for followers sees *stop

}  // namespace

Result<FsyncPolicy> parse_fsync(const std::string& text, const std::string& field) {
  if (text == "none") return FsyncPolicy::kNone;
  if (text == "batch") return FsyncPolicy::kBatch;
  if (text == "always") return FsyncPolicy::kAlways;
  return Status::InvalidArgument(field + ": must be none, batch or always, not '" + text + "'");
}

namespace {

bool stop_requested(const std::atomic<bool>* stop) {
  return stop != nullptr && stop->load(std::memory_order_acquire);
}

// Waits (bounded by the deadline and *stop) until fewer than `inflight_max` proposed entries
// of the leader are not yet chosen.
Status wait_inflight_below(ReplicationLeader& leader, Env& env, uint64_t inflight_max,
                           uint64_t deadline_ns, const std::atomic<bool>* stop) {
  for (;;) {
    const LeaderStats st = leader.stats();
    if (st.proposed - std::min(st.chosen, st.proposed) < inflight_max) return Status::Ok();
    if (stop_requested(stop)) return Status::Unavailable("replication: bootstrap stopped");
    if (env.now_ns() >= deadline_ns) {
      return Status::Timeout("replication: bootstrap entries not chosen in time");
    }
    env.sleep_ns(1'000'000);
  }
}

}  // namespace

Result<BootstrapResult> bootstrap_followers(ReplicationLeader& leader, txn::Engine& engine,
                                            uint64_t timeout_ms, const std::atomic<bool>* stop) {
  Env& env = engine.env();
  BootstrapResult out;
  const uint64_t start_ns = env.now_ns();
  // No transaction runs yet: every later commit reads an epoch >= this one, so its TID is
  // above S, and every loaded version is at or below the current epoch.
  out.snapshot_tid = (engine.epoch() << 32) - 1;
  // Record i (from 1) carries TID S - kBootstrapTidSpan + i: distinct and increasing, so every
  // entry's max_tid keeps the stream's promise (no later record at or below it) and a
  // follower's applied TID reaches S only once every record is installed.
  const uint64_t base_tid = out.snapshot_tid - kBootstrapTidSpan;
  StreamAppender& a = leader.appender(0);
  constexpr size_t kRowsPerRecord = 64;
  constexpr size_t kRecordBytesMax = 256 * 1024;
  // A record's keys: at most its bytes' worth, plus one large row's packed byte key (a row
  // larger than kRecordBytesMax goes alone).
  std::vector<uint64_t> keys(kRecordBytesMax / 8 + txn::kPackedKeyWordsMax);
  size_t key_words_used = 0;
  std::vector<TxnWrite> writes;
  writes.reserve(kRowsPerRecord);
  size_t record_bytes = 0;
  // The load is shipped in 1 MiB entries far faster than followers write and sync them: with
  // the whole Paxos pipeline (64 entries) in flight a follower syncing 64 MiB on a busy disk
  // went silent past the election timeout and the leader stepped down. Keep a few in flight.
  const uint64_t deadline_ns = start_ns + timeout_ms * 1'000'000;
  Status failed;
  auto emit = [&] {
    if (writes.empty() || !failed.ok()) return;
    ++out.records;
    SHOAL_ASSERT(out.records < kBootstrapTidSpan, "%lu bootstrap records", out.records);
    failed = a.append_record(base_tid + out.records, {}, writes);
    writes.clear();
    record_bytes = 0;
    key_words_used = 0;
    if (failed.ok()) {
      failed = wait_inflight_below(leader, env, kBootstrapInflightMax, deadline_ns, stop);
    }
  };
  for (const auto& table : engine.tables()) {
    const size_t kw = table->key_words();
    if (!failed.ok()) return failed;
    table->scan_committed([&](const uint64_t* key, const void* value, uint32_t size, uint64_t) {
      const size_t words = txn::untyped_key_words(kw, key);
      const size_t bytes = log_write_bytes(words, size);
      if (writes.size() == kRowsPerRecord || record_bytes + bytes > kRecordBytesMax) emit();
      uint64_t* k = keys.data() + key_words_used;
      std::copy(key, key + words, k);  // a BytesTable's packed key lives only during the call
      key_words_used += words;
      // Values stay where they are: nothing changes the engine until the run starts.
      TxnWrite w{
          table->id(), WriteOp::kInsert, {k, words}, {static_cast<const std::byte*>(value), size}};
      w.bytes_key = kw == 0;
      writes.push_back(w);
      record_bytes += bytes;
      return failed.ok();
    });
    emit();
  }
  if (!failed.ok()) return failed;
  // The end marker: a follower knows its bootstrap is installed once it applied S.
  for (uint32_t s = 0; s < leader.streams(); ++s) {
    SHOAL_TRY(leader.appender(s).finish(out.snapshot_tid, kLogFlagBootstrapEnd));
  }
  // In slices, so that a stop request is seen while followers are missing.
  for (;;) {  // bounded by the deadline and *stop
    const uint64_t now_ns = env.now_ns();
    const uint64_t left_ms = now_ns >= deadline_ns ? 0 : (deadline_ns - now_ns) / 1'000'000;
    auto reports =
        leader.collect_reports(out.snapshot_tid, false, false, std::min(left_ms, kReportSliceMs));
    if (reports.ok()) break;
    if (reports.status().code() != Code::kTimeout || left_ms <= kReportSliceMs) {
      return reports.status();
    }
    if (stop_requested(stop)) {
      return Status::Unavailable("replication: bootstrap stopped while followers installed it");
    }
  }
  out.ns = env.now_ns() - start_ns;
  return out;
}

uint64_t closing_floor(ReplicationLeader& leader, uint64_t at_least) {
  uint64_t floor = at_least;
  for (uint32_t s = 0; s < leader.streams(); ++s) {
    floor = std::max(floor, leader.appender(s).last_commit_tid());
  }
  return floor;
}

}  // namespace shoal::repl
