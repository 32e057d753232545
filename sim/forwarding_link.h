// Test-only: a dist::ShardLink that forwards every transaction message (read, exec, lock,
// validate, install, abort, validate_install) to another link unchanged, so that a test that
// intercepts one of them overrides only that one. decision() and exchange_watermark() are not
// forwarded: they keep ShardLink's defaults, as a link that cannot ask would.
//
// Single-threaded: used on the loop of the coordinator that owns it. REQUIRES: `inner`
// outlives the link.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "src/dist/coordinator.h"

namespace shoal::sim {

class ForwardingLink : public dist::ShardLink {
 public:
  explicit ForwardingLink(dist::ShardLink& inner) : inner_(inner) {}

  rt::Task<Status> read(dist::TxnId id, uint64_t epoch, uint32_t table_id, const uint64_t* key,
                        uint32_t key_word_count, void* out, uint32_t out_bytes,
                        uint32_t* size_out) override {
    co_return co_await inner_.read(id, epoch, table_id, key, key_word_count, out, out_bytes,
                                   size_out);
  }
  rt::Task<Status> exec(dist::TxnId id, uint64_t epoch, uint32_t fragment,
                        std::span<const uint8_t> args, std::span<uint8_t> out, uint32_t* out_size,
                        bool* wrote, uint64_t* proposed_tid,
                        dist::ExecPrepared* prepared) override {
    co_return co_await inner_.exec(id, epoch, fragment, args, out, out_size, wrote, proposed_tid,
                                   prepared);
  }
  rt::Task<Status> lock(dist::TxnId id, uint64_t epoch, const dist::StagedWrite* writes,
                        size_t count, uint64_t* proposed_tid) override {
    co_return co_await inner_.lock(id, epoch, writes, count, proposed_tid);
  }
  rt::Task<Status> validate(dist::TxnId id, uint64_t epoch, txn::DepVec* deps) override {
    co_return co_await inner_.validate(id, epoch, deps);
  }
  rt::Task<Status> install(dist::TxnId id, uint64_t epoch, uint64_t tid, const txn::DepVec& vector,
                           uint64_t* installed_tid) override {
    co_return co_await inner_.install(id, epoch, tid, vector, installed_tid);
  }
  rt::Task<Status> abort(dist::TxnId id, uint64_t epoch) override {
    co_return co_await inner_.abort(id, epoch);
  }
  rt::Task<Status> validate_install(dist::TxnId id, uint64_t epoch, const txn::DepVec& vector,
                                    txn::DepVec* deps, uint64_t* tid,
                                    const dist::FragmentCall* fragment) override {
    co_return co_await inner_.validate_install(id, epoch, vector, deps, tid, fragment);
  }

 protected:
  dist::ShardLink& inner_;
};

}  // namespace shoal::sim
