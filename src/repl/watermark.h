// Watermarks of one shard (design section 4): each stream's committed TID and the shard
// watermark, the minimum over the shard's streams.
//
// A stream's committed TID is the max_tid of the last entry of its chosen prefix. Entries are
// sealed in order and a worker's TIDs increase, so it only grows; an entry's max_tid is also a
// promise that the stream logs no later record at or below it (LogBatchBuilder::seal's floor).
// Hence every record with TID <= the shard watermark, on any stream, is chosen: that is what a
// leader may acknowledge and what a follower may expose.
//
// Idle streams: a stream without commits would hold the minimum back forever; its worker seals
// empty entries whose floor (max_tid) rises with the engine epoch (StreamAppender::tick), and
// after a run every stream is closed with a floor above every TID logged (finish()).
//
// Threads: owned by one thread (the replication thread on a leader, the replay loop on a
// follower); publish the result through an atomic where other threads read it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "src/base/assert.h"

namespace shoal::repl {

class ShardWatermark {
 public:
  // REQUIRES: streams >= 1.
  explicit ShardWatermark(uint32_t streams) : streams_(streams, 0) {
    SHOAL_ASSERT(streams >= 1, "%s", "a shard has at least one stream");
  }

  // Stream `stream`'s chosen prefix now ends with an entry of max_tid `tid`. Returns the new
  // shard watermark. Lower values (an empty entry without a floor) change nothing.
  // REQUIRES: stream < streams().
  uint64_t advance(uint32_t stream, uint64_t tid) {
    SHOAL_ASSERT(stream < streams_.size(), "stream %u of %zu", stream, streams_.size());
    uint64_t& s = streams_[stream];
    if (tid <= s) return shard_;
    const bool was_min = s == shard_;
    s = tid;
    if (was_min) shard_ = *std::min_element(streams_.begin(), streams_.end());
    return shard_;
  }

  uint64_t stream(uint32_t stream) const { return streams_[stream]; }
  uint64_t shard() const { return shard_; }
  uint32_t streams() const { return static_cast<uint32_t>(streams_.size()); }

 private:
  std::vector<uint64_t> streams_;
  uint64_t shard_ = 0;
};

}  // namespace shoal::repl
