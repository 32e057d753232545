// A bump allocator for per-transaction scratch memory (buffered write values, scan copies).
//
// Owned by one thread. reset() forgets every allocation but keeps the first block, so a
// transaction in steady state allocates nothing. Pointers stay valid until reset().
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "src/base/assert.h"

namespace shoal {

class Arena {
 public:
  static constexpr size_t kBlockBytes = 64 * 1024;

  Arena() = default;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Returns 8-byte aligned memory for n bytes.
  void* allocate(size_t n) {
    n = (n + 7) & ~size_t{7};
    if (n > remaining_) [[unlikely]] grow(n);
    void* p = cursor_;
    cursor_ += n;
    remaining_ -= n;
    return p;
  }
  uint64_t* allocate_words(size_t nwords) {
    return static_cast<uint64_t*>(allocate(nwords * sizeof(uint64_t)));
  }

  void reset() {
    if (blocks_.size() > 1) blocks_.resize(1);  // big transactions don't pin memory forever
    if (blocks_.empty()) {
      cursor_ = nullptr;
      remaining_ = 0;
      return;
    }
    cursor_ = blocks_[0].data.get();
    remaining_ = blocks_[0].bytes;
  }

  size_t block_count() const { return blocks_.size(); }

 private:
  struct Block {
    std::unique_ptr<char[]> data;
    size_t bytes;
  };
  void grow(size_t n) {
    const size_t bytes = n > kBlockBytes ? n : kBlockBytes;
    blocks_.push_back(Block{std::unique_ptr<char[]>(new char[bytes]), bytes});
    cursor_ = blocks_.back().data.get();
    remaining_ = bytes;
  }

  std::vector<Block> blocks_;
  char* cursor_ = nullptr;
  size_t remaining_ = 0;
};

}  // namespace shoal
