// EntryBuffer: one sealed log entry's bytes as the replication path keeps them (the acceptor
// store, the chosen callback, a follower's replay queue). Its own header so that the worker
// side (StreamAppender, which seals entries into buffers that become the leader's store
// entries) and a follower's receive path (EntryKeeper) need no PaxosStream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "src/base/assert.h"

namespace shoal::repl {

// One entry's bytes, 8-byte aligned (LogEntryView::parse needs that) and immutable once
// built, so holders may share them: share() is a second handle on the same bytes (an atomic
// reference count), which is how a follower hands a chosen entry from its store to its replay
// thread without a second copy. Move-only otherwise, so every other copy is explicit.
//
// Where the bytes live: EntryBuffer(span) copies them into a block of the process's entry
// pool (paxos_stream.cc) that goes back to the pool with the last handle; adopt() takes bytes
// someone else owns (a StreamAppender's log ring: the leader's store keeps the very bytes the
// worker sealed), whose `words` deleter and allocator hand the memory back to that owner.
class EntryBuffer {
 public:
  EntryBuffer() = default;
  explicit EntryBuffer(std::span<const std::byte> bytes);
  // REQUIRES: `words` holds size_bytes bytes, 8-byte aligned, never written while any handle
  // lives.
  static EntryBuffer adopt(std::shared_ptr<const uint64_t[]> words, size_t size_bytes) {
    SHOAL_ASSERT(reinterpret_cast<uintptr_t>(words.get()) % 8 == 0, "%s",
                 "an EntryBuffer must be 8-byte aligned");
    EntryBuffer b;
    b.words_ = std::move(words);
    b.size_bytes_ = size_bytes;
    return b;
  }
  EntryBuffer(EntryBuffer&&) noexcept = default;
  EntryBuffer& operator=(EntryBuffer&&) noexcept = default;
  EntryBuffer(const EntryBuffer&) = delete;
  EntryBuffer& operator=(const EntryBuffer&) = delete;
  EntryBuffer share() const {
    EntryBuffer other;
    other.words_ = words_;
    other.size_bytes_ = size_bytes_;
    return other;
  }
  std::span<const std::byte> span() const {
    return {reinterpret_cast<const std::byte*>(words_.get()), size_bytes_};
  }
  bool empty() const { return size_bytes_ == 0; }
  bool same_bytes(std::span<const std::byte> other) const;

 private:
  std::shared_ptr<const uint64_t[]> words_;
  size_t size_bytes_ = 0;
};

// Where received entry bytes may stay instead of being copied: a follower's receive ring,
// shared memory's, tcp's or fabric's (net::ShmEndpoint / TcpEndpoint / FabricEndpoint::
// keep_received), whose region the
// returned buffer holds until its last handle goes. keep() returns an EntryBuffer over those
// very bytes, or an empty one when they cannot be kept (the caller copies them). Called on
// the stream's thread while PaxosStream::on_message handles the message the bytes are part
// of.
class EntryKeeper {
 public:
  virtual EntryBuffer keep(std::span<const std::byte> bytes) = 0;

 protected:
  ~EntryKeeper() = default;
};

}  // namespace shoal::repl
