#include "src/repl/bootstrap.h"

#include <algorithm>
#include <vector>

#include "src/txn/record.h"

namespace shoal::repl {
namespace {

constexpr uint64_t kBootstrapInflightMax = 8;  // entries proposed and not yet chosen

}  // namespace

Result<FsyncPolicy> parse_fsync(const std::string& text, const std::string& field) {
  if (text == "none") return FsyncPolicy::kNone;
  if (text == "batch") return FsyncPolicy::kBatch;
  if (text == "always") return FsyncPolicy::kAlways;
  return Status::InvalidArgument(field + ": must be none, batch or always, not '" + text + "'");
}

Result<BootstrapResult> bootstrap_followers(ReplicationLeader& leader, txn::Engine& engine,
                                            uint64_t timeout_ms) {
  Env& env = engine.env();
  BootstrapResult out;
  const uint64_t start_ns = env.now_ns();
  // No transaction runs yet: every later commit reads an epoch >= this one, so its TID is
  // above S, and every loaded version is at or below the current epoch.
  out.snapshot_tid = (engine.epoch() << 32) - 1;
  StreamAppender& a = leader.appender(0);
  constexpr size_t kRowsPerRecord = 64;
  constexpr size_t kRecordBytesMax = 256 * 1024;
  std::vector<uint64_t> keys(kRowsPerRecord * 8);
  std::vector<TxnWrite> writes;
  writes.reserve(kRowsPerRecord);
  size_t record_bytes = 0;
  // The load is shipped in 1 MiB entries far faster than followers write and sync them: with
  // the whole Paxos pipeline (64 entries) in flight a follower syncing 64 MiB on a busy disk
  // went silent past the election timeout and the leader stepped down. Keep a few in flight.
  const uint64_t deadline_ns = start_ns + timeout_ms * 1'000'000;
  Status throttled;
  auto emit = [&] {
    if (writes.empty()) return;
    a.append_record(out.snapshot_tid, {}, writes);
    writes.clear();
    record_bytes = 0;
    ++out.records;
    for (;;) {  // bounded by the deadline
      const LeaderStats st = leader.stats();
      if (st.proposed - std::min(st.chosen, st.proposed) < kBootstrapInflightMax) break;
      if (env.now_ns() >= deadline_ns) {
        throttled = Status::Timeout("replication: bootstrap entries not chosen in time");
        break;
      }
      env.sleep_ns(1'000'000);
    }
  };
  for (const auto& table : engine.tables()) {
    const size_t kw = table->key_words();
    if (!throttled.ok()) return throttled;
    table->scan_committed([&](const uint64_t* key, const void* value, uint32_t size, uint64_t) {
      const size_t bytes = log_write_bytes(kw, size);
      if (writes.size() == kRowsPerRecord || record_bytes + bytes > kRecordBytesMax) emit();
      uint64_t* k = keys.data() + writes.size() * 8;
      std::copy(key, key + kw, k);
      // Values stay where they are: nothing changes the engine until the run starts.
      writes.push_back(
          {table->id(), WriteOp::kInsert, {k, kw}, {static_cast<const std::byte*>(value), size}});
      record_bytes += bytes;
      return throttled.ok();
    });
    emit();
  }
  if (!throttled.ok()) return throttled;
  for (uint32_t s = 0; s < leader.streams(); ++s) leader.appender(s).finish(out.snapshot_tid);
  auto reports = leader.collect_reports(out.snapshot_tid, false, false, timeout_ms);
  if (!reports.ok()) return reports.status();
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
