// LocalLink: a ShardLink to a participant in the same process, for the simulator and for a
// coordinator's own shard. Each call hops over the event loop with a delay drawn from the
// loop's Env-driven Rng (one way out, one way back), so under SimEnv the interleavings of many
// in-flight transactions follow the seed; a delay of zero makes it a direct call with a yield.
// A direct link (make_direct) does not hop at all: a shard server's coordinator reaching its
// own participant, where a yield would queue the call behind every other ready terminal.
//
// Threads: the link, its participant and the calling coroutines share one loop thread.
#pragma once

#include <cstdint>
#include <memory>

#include "src/base/env.h"
#include "src/dist/coordinator.h"
#include "src/runtime/event_loop.h"

namespace shoal::dist {

class LocalLink final : public ShardLink {
 public:
  // Delays are uniform in [delay_min_ns, delay_max_ns] per hop.
  LocalLink(Participant& participant, rt::EventLoop& loop, Rng& rng, uint64_t delay_min_ns,
            uint64_t delay_max_ns)
      : participant_(participant),
        loop_(loop),
        rng_(rng),
        delay_min_ns_(delay_min_ns),
        delay_max_ns_(delay_max_ns) {}

  // No hops: every call runs the participant at once (see the header comment).
  static std::unique_ptr<LocalLink> make_direct(Participant& participant, rt::EventLoop& loop,
                                                Rng& rng) {
    auto link = std::make_unique<LocalLink>(participant, loop, rng, 0, 0);
    link->direct_ = true;
    return link;
  }

  // A crashed link fails every call with Unavailable (the shard process is gone).
  void set_crashed(bool crashed) { crashed_ = crashed; }

  rt::Task<Status> read(TxnId id, uint64_t epoch, uint32_t table_id, const uint64_t* key,
                        uint32_t key_word_count, void* out, uint32_t out_bytes,
                        uint32_t* size_out) override {
    SHOAL_CO_TRY(co_await hop());
    Status s =
        participant_.read(id, epoch, table_id, key, key_word_count, out, out_bytes, size_out);
    SHOAL_CO_TRY(co_await hop());
    co_return s;
  }
  rt::Task<Status> exec(TxnId id, uint64_t epoch, uint32_t fragment, std::span<const uint8_t> args,
                        std::span<uint8_t> out, uint32_t* out_size, bool* wrote,
                        uint64_t* proposed_tid, ExecPrepared* prepared) override {
    SHOAL_CO_TRY(co_await hop());
    Status s =
        participant_.exec(id, epoch, fragment, args, out, out_size, wrote, proposed_tid, prepared);
    SHOAL_CO_TRY(co_await hop());
    co_return s;
  }
  rt::Task<Status> lock(TxnId id, uint64_t epoch, const StagedWrite* writes, size_t count,
                        uint64_t* proposed_tid) override {
    SHOAL_CO_TRY(co_await hop());
    Status s = participant_.lock(id, epoch, writes, count, proposed_tid);
    SHOAL_CO_TRY(co_await hop());
    co_return s;
  }
  rt::Task<Status> validate(TxnId id, uint64_t epoch, txn::DepVec* deps) override {
    SHOAL_CO_TRY(co_await hop());
    Status s = participant_.validate(id, epoch, deps);
    SHOAL_CO_TRY(co_await hop());
    co_return s;
  }
  rt::Task<Status> install(TxnId id, uint64_t epoch, uint64_t tid, const txn::DepVec& vector,
                           uint64_t* installed_tid) override {
    SHOAL_CO_TRY(co_await hop());
    Status s = participant_.install(id, epoch, tid, vector, installed_tid);
    co_return s;
  }
  rt::Task<Status> validate_install(TxnId id, uint64_t epoch, const txn::DepVec& vector,
                                    txn::DepVec* deps, uint64_t* tid,
                                    const FragmentCall* fragment) override {
    SHOAL_CO_TRY(co_await hop());
    Status s = participant_.validate_install(id, epoch, vector, deps, tid, fragment);
    SHOAL_CO_TRY(co_await hop());
    co_return s;
  }
  rt::Task<Status> abort(TxnId id, uint64_t epoch) override {
    (void)epoch;
    SHOAL_CO_TRY(co_await hop());
    participant_.abort(id);
    co_return Status::Ok();
  }
  rt::Task<Status> decision(TxnId id, uint64_t* tid, txn::DepVec* vector) override {
    SHOAL_CO_TRY(co_await hop());
    Status s = participant_.decision(id, tid, vector);
    SHOAL_CO_TRY(co_await hop());
    co_return s;
  }

 private:
  rt::Task<Status> hop() {
    if (crashed_) co_return Status::Unavailable("shard link down");
    if (direct_) co_return Status::Ok();
    const uint64_t delay = delay_max_ns_ == 0 ? 0 : rng_.uniform(delay_min_ns_, delay_max_ns_);
    if (delay == 0) {
      co_await loop_.yield();
    } else {
      SHOAL_CO_TRY(co_await loop_.sleep_for(delay));
    }
    if (crashed_) co_return Status::Unavailable("shard link down");
    co_return Status::Ok();
  }

  Participant& participant_;
  rt::EventLoop& loop_;
  Rng& rng_;
  uint64_t delay_min_ns_;
  uint64_t delay_max_ns_;
  bool crashed_ = false;
  bool direct_ = false;
};

}  // namespace shoal::dist
