// The fragment paths of distributed transactions (src/dist: DistTxn::exec, exec_at_commit,
// Participant::exec and validate_install with a FragmentCall, wire kExec / kValidateInstall)
// under the simulator. Contract checked here:
//   - A bank whose transactions move money with fragments (a debit run with last_on_shard, a
//     credit deferred with exec_at_commit, two-step fragments on one shard, read-only peeks and
//     audits, debits refused for insufficient funds, fragments that fail) runs over RpcLink on a
//     faulty SimNetwork (loss, duplication, reordering, partitions). After every seed: money is
//     conserved, committed audits saw the invariant total, no participant context and no lock
//     is left, the history (reads/writes with versions, reported by the fragments or, for
//     deferred ones whose result nobody receives, by a receipt row they insert) is
//     serializable, failures are exactly the planned ones, and a run is a function of its seed.
//   - A planted bug (no read validation) is caught.
//   - A deferred fragment cannot slip a write between the other shards' validations and the
//     commit decision (a directed interleaving; coordinator.h C5, participant.h F8).
//   - kExec / kValidateInstall requests and replies that are truncated, overlong or carry
//     out-of-range fields are refused (Corruption / InvalidArgument) and leave nothing behind.
//   - The participant's fragment rules (F7 repeats, F8 failures, exec refusals) one by one.
// 500 seeds by default, 20 under SHOAL_TEST_SCALE=small; SHOAL_SIM_SEED=<seed> replays one.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "sim/dist_cluster_test_util.h"
#include "sim/forwarding_link.h"
#include "sim/sim_env.h"
#include "sim/sim_network.h"
#include "src/check/history.h"
#include "src/check/serializability.h"
#include "src/dist/coordinator.h"
#include "src/dist/local_link.h"
#include "src/dist/participant.h"
#include "src/dist/rpc_link.h"
#include "src/runtime/event_loop.h"
#include "src/runtime/rpc.h"

namespace shoal::sim {
namespace dist_fragment_sim_test {  // named, not anonymous: unique in a unity build

// Small balances: debits run dry now and then. Few accounts: transactions collide often.
constexpr uint64_t kKeysPerShard = 32;
constexpr uint32_t kAccounts = 0;  // table ids, the same on every shard
constexpr uint32_t kReceipts = 1;
constexpr int64_t kInitial = 100;
constexpr int64_t kTotal = int64_t{kShards} * kKeysPerShard * kInitial;
constexpr uint64_t kTraceTxn = 0xf4a9;

// ---- fragments (registered on every shard) ----

enum FragmentId : uint32_t {
  kDebit = 0,
  kCredit = 1,
  kPeek = 2,
  kAudit = 3,
  kFail = 4,
  kShuffle = 5
};

struct Seen {
  uint64_t key, seq, writer;
};
struct MoveArgs {
  uint64_t key;
  int64_t amount;
  uint64_t history_id;
  uint64_t receipt;  // 1: also insert a receipt (a deferred fragment's result reaches nobody)
};
struct MoveResult {
  Seen read;
  uint64_t new_seq;
  int64_t balance;
};
// What a deferred move saw and wrote, kept in the receipts table under receipt_key().
struct Receipt {
  uint64_t key, read_seq, read_writer, new_seq;
};
uint64_t receipt_key(uint64_t history_id, uint64_t slot) {
  return history_id * 2 + slot;
}
// Two accounts of one shard: src pays dst.
struct ShuffleArgs {
  uint64_t src, dst;
  int64_t amount;
  uint64_t history_id;
};
struct PeekArgs {
  uint64_t count;
  uint64_t keys[4];
};
struct PeekResult {
  Seen reads[4];
  int64_t balances[4];
};
struct AuditArgs {
  uint64_t shard;
};
struct AuditResult {
  int64_t sum;
  Seen reads[kKeysPerShard];
};

struct ShardTables {
  txn::TableBase* accounts;
  txn::TableBase* receipts;
};

template <typename T>
Status parse(std::span<const uint8_t> args, T* out) {
  if (args.size() != sizeof(T)) return Status::InvalidArgument("fragment arguments of bad size");
  std::memcpy(out, args.data(), sizeof(T));
  return Status::Ok();
}
template <typename T>
Status reply(const T& r, std::span<uint8_t> out, uint32_t* out_size) {
  if (out.size() < sizeof(T)) return Status::InvalidArgument("fragment result buffer too small");
  std::memcpy(out.data(), &r, sizeof(T));
  *out_size = sizeof(T);
  return Status::Ok();
}

// Read-modify-write of one account, with a receipt in `slot` unless it is ~0; a debit the
// balance cannot cover is a UserAbort.
Status apply_move(txn::Txn& txn, const ShardTables& t, const MoveArgs& a, int64_t sign,
                  uint64_t slot, MoveResult* r) {
  Account acc{};
  SHOAL_TRY(t.accounts->txn_get(txn, &a.key, &acc, sizeof acc, nullptr));
  r->read = Seen{a.key, acc.seq, acc.writer};
  if (sign < 0 && acc.balance < a.amount) return Status::UserAbort("insufficient funds");
  acc.balance += sign * a.amount;
  acc.seq += 1;
  acc.writer = a.history_id;
  SHOAL_TRY(t.accounts->txn_put(txn, &a.key, &acc, sizeof acc));
  if (slot != ~0ULL) {
    const Receipt rc{a.key, r->read.seq, r->read.writer, acc.seq};
    const uint64_t key = receipt_key(a.history_id, slot);
    SHOAL_TRY(t.receipts->txn_insert(txn, &key, &rc, sizeof rc));
  }
  r->new_seq = acc.seq;
  r->balance = acc.balance;
  return Status::Ok();
}
Status move(txn::Txn& txn, const void* ctx, std::span<const uint8_t> args, std::span<uint8_t> out,
            uint32_t* out_size, int64_t sign) {
  MoveArgs a{};
  SHOAL_TRY(parse(args, &a));
  MoveResult r{};
  SHOAL_TRY(apply_move(txn, *static_cast<const ShardTables*>(ctx), a, sign,
                       a.receipt != 0 ? 0 : ~0ULL, &r));
  return reply(r, out, out_size);
}
Status debit(txn::Txn& txn, const void* ctx, std::span<const uint8_t> args, std::span<uint8_t> out,
             uint32_t* out_size) {
  return move(txn, ctx, args, out, out_size, -1);
}
Status credit(txn::Txn& txn, const void* ctx, std::span<const uint8_t> args, std::span<uint8_t> out,
              uint32_t* out_size) {
  return move(txn, ctx, args, out, out_size, +1);
}
// A transfer inside one shard, for the one-shot path (F8 on first contact): receipts in slots
// 0 (debit) and 1 (credit).
Status shuffle(txn::Txn& txn, const void* ctx, std::span<const uint8_t> args,
               std::span<uint8_t> out, uint32_t* out_size) {
  const auto& t = *static_cast<const ShardTables*>(ctx);
  ShuffleArgs a{};
  SHOAL_TRY(parse(args, &a));
  MoveResult r{};
  SHOAL_TRY(apply_move(txn, t, MoveArgs{a.src, a.amount, a.history_id, 1}, -1, 0, &r));
  SHOAL_TRY(apply_move(txn, t, MoveArgs{a.dst, a.amount, a.history_id, 1}, +1, 1, &r));
  return reply(r, out, out_size);
}
// Read-only: up to four accounts.
Status peek(txn::Txn& txn, const void* ctx, std::span<const uint8_t> args, std::span<uint8_t> out,
            uint32_t* out_size) {
  const auto& t = *static_cast<const ShardTables*>(ctx);
  PeekArgs a{};
  SHOAL_TRY(parse(args, &a));
  if (a.count > 4) return Status::InvalidArgument("peek of more than four accounts");
  PeekResult r{};
  for (uint64_t i = 0; i < a.count; ++i) {
    Account acc{};
    SHOAL_TRY(t.accounts->txn_get(txn, &a.keys[i], &acc, sizeof acc, nullptr));
    r.reads[i] = Seen{a.keys[i], acc.seq, acc.writer};
    r.balances[i] = acc.balance;
  }
  return reply(r, out, out_size);
}
// Read-only: every account of the shard and their sum.
Status audit(txn::Txn& txn, const void* ctx, std::span<const uint8_t> args, std::span<uint8_t> out,
             uint32_t* out_size) {
  const auto& t = *static_cast<const ShardTables*>(ctx);
  AuditArgs a{};
  SHOAL_TRY(parse(args, &a));
  AuditResult r{};
  for (uint64_t k = 0; k < kKeysPerShard; ++k) {
    const uint64_t key = a.shard * kKeysPerShard + k;
    Account acc{};
    SHOAL_TRY(t.accounts->txn_get(txn, &key, &acc, sizeof acc, nullptr));
    r.reads[k] = Seen{key, acc.seq, acc.writer};
    r.sum += acc.balance;
  }
  return reply(r, out, out_size);
}
// Mints money into an account, then fails: if its write ever became visible the money check
// would see it.
Status fail(txn::Txn& txn, const void* ctx, std::span<const uint8_t> args, std::span<uint8_t>,
            uint32_t*) {
  const auto& t = *static_cast<const ShardTables*>(ctx);
  MoveArgs a{};
  SHOAL_TRY(parse(args, &a));
  Account acc{};
  SHOAL_TRY(t.accounts->txn_get(txn, &a.key, &acc, sizeof acc, nullptr));
  acc.balance += 1000;
  acc.seq += 1;
  SHOAL_TRY(t.accounts->txn_put(txn, &a.key, &acc, sizeof acc));
  return Status::IOError("injected fragment failure");
}

// One shard's storage and fragment table (the table points at the tables: keep it in place).
struct ShardState {
  std::unique_ptr<txn::Engine> engine;
  ShardTables tables{};
  dist::FragmentTable fragments;
  std::unique_ptr<dist::Participant> participant;
};

std::unique_ptr<ShardState> make_shard(SimEnv& env, uint32_t s, bool skip_validation,
                                       dist::ParticipantOptions po) {
  auto st = std::make_unique<ShardState>();
  st->engine = std::make_unique<txn::Engine>(sim_engine_options(s, skip_validation), &env);
  auto* accounts = st->engine->create_table<1>("accounts");
  auto* receipts = st->engine->create_table<1>("receipts");
  SHOAL_CHECK(accounts->id() == kAccounts && receipts->id() == kReceipts);
  for (uint64_t k = 0; k < kKeysPerShard; ++k) {
    SHOAL_CHECK(
        accounts->load(key1(s * kKeysPerShard + k), Account{0, check::kInitialTxn, kInitial}).ok());
  }
  st->tables = ShardTables{accounts, receipts};
  st->fragments.ctx = &st->tables;
  st->fragments.fns[kDebit] = &debit;
  st->fragments.fns[kCredit] = &credit;
  st->fragments.fns[kPeek] = &peek;
  st->fragments.fns[kAudit] = &audit;
  st->fragments.fns[kFail] = &fail;
  st->fragments.fns[kShuffle] = &shuffle;
  st->participant = std::make_unique<dist::Participant>(*st->engine, s, po);
  st->participant->set_fragments(&st->fragments);
  return st;
}

// Reads every account and receipt of a shard with a fresh local transaction: a lock left
// behind fails the read. Returns how many failed.
size_t unreadable_records(ShardState& sh) {
  std::vector<uint64_t> receipt_keys;
  static_cast<txn::Table<1>*>(sh.tables.receipts)
      ->for_each(key1(0), Key1::max(), [&](const Key1& k, const void*, uint32_t) {
        receipt_keys.push_back(k.w[0]);
        return true;
      });
  ReadBack rb(*sh.engine);
  const uint64_t first = static_cast<uint64_t>(sh.participant->shard_id()) * kKeysPerShard;
  for (uint64_t key = first; key < first + kKeysPerShard; ++key) {
    rb.read<Account>(*sh.tables.accounts, key);
  }
  for (uint64_t key : receipt_keys) rb.read<Receipt>(*sh.tables.receipts, key);
  return rb.failed();
}

// Adds each receipt's read and write to the committed transaction that left it. Returns
// receipts whose transaction the clients never saw commit.
uint64_t merge_receipts(std::vector<std::unique_ptr<ShardState>>& shards, check::History* h,
                        uint64_t* merged) {
  std::unordered_map<check::TxnId, size_t> index;
  for (size_t i = 0; i < h->txns.size(); ++i) index.emplace(h->txns[i].id, i);
  uint64_t orphans = 0;
  for (auto& sh : shards) {
    static_cast<txn::Table<1>*>(sh->tables.receipts)
        ->for_each(key1(0), Key1::max(), [&](const Key1& k, const void* v, uint32_t) {
          const check::TxnId hid = k.w[0] / 2;
          const auto& rc = *static_cast<const Receipt*>(v);
          auto it = index.find(hid);
          if (it == index.end()) {
            ++orphans;
            return true;
          }
          h->txns[it->second].read(rc.key, rc.read_seq, rc.read_writer);
          h->txns[it->second].write(rc.key, rc.new_seq);
          ++*merged;
          return true;
        });
  }
  return orphans;
}

// ---- the cluster over RPC ----

using RunConfig = ClusterRunConfig;

struct RpcCluster : SimCluster<ShardState> {
  RpcCluster(uint64_t seed, const RunConfig& cfg)
      : SimCluster(
            seed, cfg.faults,
            [&](SimEnv& env, uint32_t s, const dist::ParticipantOptions& po) {
              return make_shard(env, s, cfg.skip_validation, po);
            },
            // Audits read every account: without backoff they retry dozens of times per commit.
            /*coordinator_backoff=*/true) {}
};

// ---- workload ----

enum class Kind : uint8_t {
  kTransfer,       // debit (exec, last_on_shard) + credit deferred (exec_at_commit)
  kDeferredDebit,  // credit (exec, last_on_shard) + debit deferred: UserAbort at commit
  kGuarded,        // peeks on the debited shard and a third one, then as kTransfer
  kTwoStep,        // debit then credit, both exec, the second maybe on the same shard
  kAudit,          // every account of every shard, read-only fragments
  kFailExec,       // debit, then a fragment that fails in exec
  kFailAtCommit,   // debit, then a deferred fragment that fails at commit
  kOneShot,        // only a deferred transfer inside one shard: F8 on first contact
  kCount,
};
constexpr const char* kKindNames[] = {"transfer", "deferred-debit", "guarded",        "two-step",
                                      "audit",    "fail-exec",      "fail-at-commit", "one-shot"};

struct TxnArgs {
  Kind kind;
  uint32_t a, b, c;  // a: exec'd shard; b: the deferred / second one; c: the third shard
  uint64_t src, dst;
  uint64_t guard_a, guard_c;  // kGuarded: read-only accounts on shards a and c
  int64_t amount;
  bool second_last;  // kTwoStep: the second exec locks at once
  check::TxnId history_id;
};
struct TxnResult {
  check::TxnRecord record;
  int64_t audited = 0;
};

MoveArgs move_args(uint64_t key, int64_t amount, check::TxnId hid, bool receipt) {
  return MoveArgs{key, amount, hid, receipt ? 1u : 0u};
}

// Runs a move fragment by exec and records what it read and wrote.
rt::Task<Status> exec_move(dist::DistTxn& txn, uint32_t shard, uint32_t fragment, uint64_t key,
                           int64_t amount, check::TxnId hid, bool last, check::TxnRecord* rec) {
  MoveResult r{};
  SHOAL_CO_TRY(co_await txn.exec(shard, fragment, move_args(key, amount, hid, false), &r, last));
  rec->read(r.read.key, r.read.seq, r.read.writer);
  rec->write(key, r.new_seq);
  co_return Status::Ok();
}

rt::Task<Status> exec_peek(dist::DistTxn& txn, uint32_t shard, uint64_t key,
                           check::TxnRecord* rec) {
  PeekArgs p{};
  p.count = 1;
  p.keys[0] = key;
  PeekResult r{};
  SHOAL_CO_TRY(co_await txn.exec(shard, kPeek, p, &r));
  rec->read(r.reads[0].key, r.reads[0].seq, r.reads[0].writer);
  co_return Status::Ok();
}

rt::Task<Status> bank_txn(dist::DistTxn& txn, const void* args_ptr, void* result_ptr) {
  const auto& a = *static_cast<const TxnArgs*>(args_ptr);
  auto& r = *static_cast<TxnResult*>(result_ptr);
  r.record = check::TxnRecord{};
  r.record.id = a.history_id;
  r.audited = 0;
  check::TxnRecord* rec = &r.record;
  switch (a.kind) {
    case Kind::kTransfer:
      SHOAL_CO_TRY(co_await exec_move(txn, a.a, kDebit, a.src, a.amount, a.history_id, true, rec));
      co_return txn.exec_at_commit(a.b, kCredit, move_args(a.dst, a.amount, a.history_id, true));
    case Kind::kDeferredDebit:
      SHOAL_CO_TRY(co_await exec_move(txn, a.a, kCredit, a.dst, a.amount, a.history_id, true, rec));
      co_return txn.exec_at_commit(a.b, kDebit, move_args(a.src, a.amount, a.history_id, true));
    case Kind::kGuarded:
      // The peeked accounts are read, not written: only validation protects them.
      SHOAL_CO_TRY(co_await exec_peek(txn, a.a, a.guard_a, rec));
      SHOAL_CO_TRY(co_await exec_peek(txn, a.c, a.guard_c, rec));
      SHOAL_CO_TRY(co_await exec_move(txn, a.a, kDebit, a.src, a.amount, a.history_id, true, rec));
      co_return txn.exec_at_commit(a.b, kCredit, move_args(a.dst, a.amount, a.history_id, true));
    case Kind::kTwoStep:
      SHOAL_CO_TRY(co_await exec_move(txn, a.a, kDebit, a.src, a.amount, a.history_id, false, rec));
      co_return co_await exec_move(txn, a.b, kCredit, a.dst, a.amount, a.history_id, a.second_last,
                                   rec);
    case Kind::kAudit:
      for (uint32_t s = 0; s < kShards; ++s) {
        AuditResult ar{};
        SHOAL_CO_TRY(co_await txn.exec(s, kAudit, AuditArgs{s}, &ar));
        for (const Seen& seen : ar.reads) rec->read(seen.key, seen.seq, seen.writer);
        r.audited += ar.sum;
      }
      co_return Status::Ok();
    case Kind::kFailExec: {
      SHOAL_CO_TRY(co_await exec_move(txn, a.a, kDebit, a.src, a.amount, a.history_id, true, rec));
      MoveResult unused{};
      co_return co_await txn.exec(a.b, kFail, move_args(a.dst, 0, a.history_id, false), &unused);
    }
    case Kind::kFailAtCommit:
      SHOAL_CO_TRY(co_await exec_move(txn, a.a, kDebit, a.src, a.amount, a.history_id, true, rec));
      co_return txn.exec_at_commit(a.b, kFail, move_args(a.dst, 0, a.history_id, false));
    case Kind::kOneShot:  // src and dst both on b
      co_return txn.exec_at_commit(a.b, kShuffle,
                                   ShuffleArgs{a.src, a.dst, a.amount, a.history_id});
    case Kind::kCount:
      break;
  }
  co_return Status::InvalidArgument("bad kind");
}

uint64_t pick_key(Rng& rng, uint32_t shard, uint64_t not1 = ~0ULL, uint64_t not2 = ~0ULL) {
  for (;;) {  // bounded in practice: 16 keys per shard, at most two excluded
    const uint64_t k = shard * kKeysPerShard + rng.uniform(0, kKeysPerShard - 1);
    if (k != not1 && k != not2) return k;
  }
}

// Coordinator `coord` may not defer to its own shard (DistTxn::exec_at_commit), so b != coord.
TxnArgs make_args(Rng& rng, uint32_t coord, check::HistoryRecorder::ThreadLog* log) {
  TxnArgs args{};
  const uint64_t dice = rng.uniform(0, 99);
  args.kind = dice < 30   ? Kind::kTransfer
              : dice < 40 ? Kind::kDeferredDebit
              : dice < 60 ? Kind::kGuarded
              : dice < 80 ? Kind::kTwoStep
              : dice < 83 ? Kind::kAudit
              : dice < 88 ? Kind::kFailExec
              : dice < 94 ? Kind::kFailAtCommit
                          : Kind::kOneShot;
  args.b = (coord + 1 + static_cast<uint32_t>(rng.uniform(0, kShards - 2))) % kShards;
  args.a = (args.b + 1 + static_cast<uint32_t>(rng.uniform(0, kShards - 2))) % kShards;
  args.c = kShards - args.a - args.b;  // the third shard (kShards == 3)
  if (args.kind == Kind::kTwoStep) {
    args.b = static_cast<uint32_t>(rng.uniform(0, kShards - 1));  // often == a: same shard
    args.second_last = rng.uniform(0, 1) == 0;
  }
  args.src = pick_key(rng, args.a);
  args.dst = pick_key(rng, args.b, args.src);
  args.guard_a = pick_key(rng, args.a, args.src, args.dst);
  args.guard_c = pick_key(rng, args.c, args.src, args.dst);
  if (args.kind == Kind::kDeferredDebit) std::swap(args.src, args.dst);  // debit on b
  if (args.kind == Kind::kOneShot) args.src = pick_key(rng, args.b, args.dst);
  args.amount = static_cast<int64_t>(rng.uniform(1, 60));
  args.history_id = log->next_txn_id();
  return args;
}

struct Outcomes {
  uint64_t committed[size_t(Kind::kCount)] = {};
  uint64_t user_aborts[size_t(Kind::kCount)] = {};
  uint64_t injected[size_t(Kind::kCount)] = {};  // IOError from the failing fragment
  uint64_t receipts = 0;                         // committed deferred moves leave one each
  uint64_t bad_audits = 0;
  uint64_t unexpected = 0;
  std::string first_unexpected;
  int clients_done = 0;
};

bool expected_outcome(Kind kind, const Status& s) {
  const bool fails = kind == Kind::kFailExec || kind == Kind::kFailAtCommit;
  if (s.ok()) return !fails;
  if (s.is_user_abort()) return kind != Kind::kAudit;  // every other kind debits
  return fails && s.code() == Code::kIOError;
}

rt::Task<void> client(RpcCluster* c, uint32_t coord, check::HistoryRecorder::ThreadLog* log,
                      uint64_t seed, int count, Outcomes* out) {
  Rng rng(seed);
  dist::DistTxn txn;
  for (int i = 0; i < count; ++i) {
    TxnArgs args = make_args(rng, coord, log);
    TxnResult result;
    Status s = co_await c->coords[coord]->run(txn, &bank_txn, &args, &result);
    c->env.trace(kTraceTxn, args.history_id, static_cast<uint64_t>(s.code()));
    const size_t k = static_cast<size_t>(args.kind);
    if (!expected_outcome(args.kind, s)) {
      if (out->unexpected++ == 0) {
        out->first_unexpected = fmt::format("{}: {}", kKindNames[k], s.to_string());
      }
      continue;
    }
    if (s.is_user_abort()) out->user_aborts[k]++;
    if (s.code() == Code::kIOError) out->injected[k]++;
    if (!s.ok()) continue;
    out->committed[k]++;
    if (args.kind == Kind::kTransfer || args.kind == Kind::kDeferredDebit ||
        args.kind == Kind::kGuarded) {
      out->receipts++;
    }
    if (args.kind == Kind::kOneShot) out->receipts += 2;
    if (args.kind == Kind::kAudit && result.audited != kTotal) out->bad_audits++;
    log->append(std::move(result.record));
  }
  out->clients_done++;
}

struct RunResult : ClusterRunResult {
  Outcomes outcomes;
  uint64_t repeated_installs = 0;
  uint64_t receipts_merged = 0;
  uint64_t orphan_receipts = 0;
};

RunResult run_bank(uint64_t seed, const RunConfig& cfg) {
  RpcCluster c(seed, cfg);
  RunResult out;
  c.spawn_clients(cfg.clients_per_coordinator, seed,
                  [&](uint32_t co, check::HistoryRecorder::ThreadLog* log, uint64_t client_seed) {
                    return client(&c, co, log, client_seed, cfg.txns_per_client, &out.outcomes);
                  });
  c.start_chaos();
  if (!c.run_until_quiet(out.outcomes.clients_done, &out.hint)) return out;
  out.finished = true;
  for (auto& sh : c.shards) {
    out.contexts_left += sh->participant->active();
    out.repeated_installs += sh->participant->stats().repeated_installs;
    out.unreadable += unreadable_records(*sh);
    out.total_balance += balance_sum(*sh->tables.accounts);
  }
  c.record_run(&out);
  out.orphan_receipts = merge_receipts(c.shards, &out.history, &out.receipts_merged);
  return out;
}

// A healthy run whose audits saw the whole bank, whose transactions ended as planned and whose
// deferred moves each left their receipt; false (with gtest failures) otherwise.
bool check_run(const RunResult& r, uint64_t seed) {
  expect_healthy_run(r, seed, kTotal);
  if (!r.finished) return false;
  EXPECT_EQ(r.outcomes.bad_audits, 0u) << "a committed audit saw a wrong total; " << r.hint;
  EXPECT_EQ(r.outcomes.unexpected, 0u)
      << "unexpected outcomes (first: " << r.outcomes.first_unexpected << "); " << r.hint;
  EXPECT_EQ(r.orphan_receipts, 0u) << "receipts of transactions that did not commit; " << r.hint;
  EXPECT_EQ(r.receipts_merged, r.outcomes.receipts)
      << "committed deferred fragments without their receipt; " << r.hint;
  return !::testing::Test::HasFailure();
}

TEST(DistFragmentSim, BankOfFragmentsOverFaultyNetworkIsSerializableOverManySeeds) {
  const uint64_t base = SimEnv::seed_from_env(1);
  const int seeds = seed_count(500, 20);
  const auto t0 = std::chrono::steady_clock::now();
  Outcomes sum;
  dist::CoordinatorStats coord;
  uint64_t repeated = 0, lost = 0, duplicated = 0, partition_drops = 0;
  for (int i = 0; i < seeds; ++i) {
    const uint64_t seed = base + i;
    RunResult r = run_bank(seed, RunConfig{});
    if (!check_run(r, seed)) {
      std::fprintf(stderr, "dist fragment sim failed: %s\n", r.hint.c_str());
      return;
    }
    for (size_t k = 0; k < size_t(Kind::kCount); ++k) {
      sum.committed[k] += r.outcomes.committed[k];
      sum.user_aborts[k] += r.outcomes.user_aborts[k];
      sum.injected[k] += r.outcomes.injected[k];
    }
    sum_coordinator(r.coord, &coord);
    repeated += r.repeated_installs;
    lost += r.net.lost;
    duplicated += r.net.duplicated;
    partition_drops += r.net.partition_drops;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Every path must really run: each kind commits (or fails as planned), UserAbort comes back
  // from both an exec'd and a deferred debit, the injected failure from both places.
  for (size_t k = 0; k < size_t(Kind::kCount); ++k) {
    const bool fails = k == size_t(Kind::kFailExec) || k == size_t(Kind::kFailAtCommit);
    EXPECT_GT(fails ? sum.injected[k] : sum.committed[k], 0u) << kKindNames[k];
  }
  EXPECT_GT(sum.user_aborts[size_t(Kind::kTransfer)], 0u);
  EXPECT_GT(sum.user_aborts[size_t(Kind::kDeferredDebit)], 0u);
  EXPECT_GT(sum.user_aborts[size_t(Kind::kOneShot)], 0u);
  EXPECT_GT(coord.conflict_aborts, 0u);
  EXPECT_GT(coord.timeouts, 0u);
  EXPECT_GT(coord.own_decided, 0u);  // C6: remote writers voted at their exec (F9)
  std::string kinds;
  for (size_t k = 0; k < size_t(Kind::kCount); ++k) {
    kinds += fmt::format(" {} {}/{}/{}", kKindNames[k], sum.committed[k], sum.user_aborts[k],
                         sum.injected[k]);
  }
  std::printf(
      "dist fragment sim: %d seeds in %.1f s; %llu committed (%llu cross-shard, %llu decided by "
      "the coordinator's own shard after early votes), %llu conflict retries, %llu timeout "
      "retries, %llu repeated installs; net: %llu lost, %llu duplicated, "
      "%llu partition drops; committed/user-aborted/injected per kind:%s\n",
      seeds, secs, (unsigned long long)coord.committed, (unsigned long long)coord.cross_shard,
      (unsigned long long)coord.own_decided, (unsigned long long)coord.conflict_aborts,
      (unsigned long long)coord.timeouts, (unsigned long long)repeated, (unsigned long long)lost,
      (unsigned long long)duplicated, (unsigned long long)partition_drops, kinds.c_str());
}

TEST(DistFragmentSim, SameSeedSameTrace) {
  RunResult a, b;
  auto run = [](uint64_t seed) { return run_bank(seed, RunConfig{}); };
  if (!expect_same_seed_same_trace(SimEnv::seed_from_env(4242), run, &a, &b)) return;
  EXPECT_EQ(a.coord.committed, b.coord.committed);
  EXPECT_EQ(a.history.txns.size(), b.history.txns.size());
}

// Without read validation at the participants, the checker or the money checks must see it.
TEST(DistFragmentSim, SkippedValidationIsCaught) {
  expect_planted_bug_caught([](uint64_t seed) {
    RunConfig cfg;
    cfg.skip_validation = true;
    RunResult r = run_bank(seed, cfg);
    return !r.finished || !check::check(r.history).empty() || r.total_balance != kTotal ||
           r.outcomes.bad_audits != 0;
  });
}

// ---- a directed interleaving: a write slipped in just before the last agent's message ----

// A ShardLink that forwards to another and, once, runs `hook` just before the first
// validate_install goes out: the moment every other shard has voted.
class HookLink final : public ForwardingLink {
 public:
  using Hook = rt::Task<void> (*)(void* ctx);
  HookLink(dist::ShardLink& inner, Hook hook, void* ctx)
      : ForwardingLink(inner), hook_(hook), ctx_(ctx) {}
  bool fired() const { return fired_; }

  rt::Task<Status> exec(check::TxnId id, uint64_t epoch, uint32_t fragment,
                        std::span<const uint8_t> args, std::span<uint8_t> out, uint32_t* out_size,
                        bool* wrote, uint64_t* proposed_tid,
                        dist::ExecPrepared* prepared) override {
    // T's only contact with the hooked shard is its deferred fragment, run at commit (C5).
    // When it voted there at once (F9, C6) there is no last-agent message: the other
    // transaction goes right after that vote, before T's own shard validates.
    Status s = co_await inner_.exec(id, epoch, fragment, args, out, out_size, wrote, proposed_tid,
                                    prepared);
    if (!fired_ && s.ok() && prepared != nullptr && prepared->prepared) {
      fired_ = true;
      co_await hook_(ctx_);
    }
    co_return s;
  }
  rt::Task<Status> validate_install(check::TxnId id, uint64_t epoch, const txn::DepVec& vector,
                                    txn::DepVec* deps, uint64_t* tid,
                                    const dist::FragmentCall* fragment) override {
    if (!fired_) {
      fired_ = true;
      co_await hook_(ctx_);
    }
    co_return co_await inner_.validate_install(id, epoch, vector, deps, tid, fragment);
  }

 private:
  Hook hook_;
  void* ctx_;
  bool fired_ = false;
};

// Two shards on one loop. T (coordinator 0) peeks account g on shard 0, debits src there
// (last_on_shard) and defers a credit of dst to shard 1. Just before T's last-agent message
// to shard 1 (or, when that credit voted at its exec (C6), right after that vote), T' (coordinator
// 1) moves money from g to dst and commits if it can. If T then also commits, T read g before T'
// wrote it but credited the dst T' wrote: a cycle, unless T's write to dst was locked before shard
// 0 validated g.
struct SlipIn {
  SimEnv env{11};
  rt::EventLoop loop{env};
  Rng rng{11};
  uint64_t epoch = 1;
  std::vector<std::unique_ptr<ShardState>> shards;
  std::vector<std::unique_ptr<dist::LocalLink>> links;
  std::unique_ptr<HookLink> hooked;
  std::unique_ptr<dist::Coordinator> coord_t, coord_u;
  check::HistoryRecorder recorder{2};
  Status t_status, u_status;
  bool t_done = false;

  static constexpr uint64_t kG = 1, kSrc = 2, kDst = kKeysPerShard + 3;

  SlipIn() {
    env.attach(loop);
    for (uint32_t s = 0; s < 2; ++s) {
      shards.push_back(make_shard(env, s, false, dist::ParticipantOptions{}));
      links.push_back(std::make_unique<dist::LocalLink>(*shards[s]->participant, loop, rng, 0, 0));
    }
    hooked = std::make_unique<HookLink>(*links[1], &SlipIn::run_u, this);
    dist::CoordinatorOptions o;
    o.max_retries = 3;  // no retry loop needed: each must commit or give up at once
    coord_t = std::make_unique<dist::Coordinator>(
        o, std::vector<dist::ShardLink*>{links[0].get(), hooked.get()}, &epoch);
    o.worker_id = 1;  // distinct TxnIds
    coord_u = std::make_unique<dist::Coordinator>(
        o, std::vector<dist::ShardLink*>{links[0].get(), links[1].get()}, &epoch);
  }
  ~SlipIn() {
    coord_t.reset();
    coord_u.reset();
    env.detach(loop);
  }

  static rt::Task<void> run_u(void* self) {
    auto* me = static_cast<SlipIn*>(self);
    TxnArgs args{};
    args.kind = Kind::kTwoStep;
    args.a = 0;
    args.b = 1;
    args.src = kG;
    args.dst = kDst;
    args.amount = 5;
    args.second_last = true;
    args.history_id = me->recorder.thread_log(1).next_txn_id();
    TxnResult result;
    dist::DistTxn txn;
    me->u_status = co_await me->coord_u->run(txn, &bank_txn, &args, &result);
    if (me->u_status.ok()) me->recorder.thread_log(1).append(std::move(result.record));
  }
  static rt::Task<void> run_t(SlipIn* me) {
    TxnArgs args{};
    args.kind = Kind::kGuarded;
    args.a = 0;
    args.b = 1;
    args.c = 0;  // two shards: both peeks on shard 0
    args.src = kSrc;
    args.dst = kDst;
    args.guard_a = kG;
    args.guard_c = kSrc + 1;
    args.amount = 7;
    args.history_id = me->recorder.thread_log(0).next_txn_id();
    TxnResult result;
    dist::DistTxn txn;
    me->t_status = co_await me->coord_t->run(txn, &bank_txn, &args, &result);
    if (me->t_status.ok()) me->recorder.thread_log(0).append(std::move(result.record));
    me->t_done = true;
  }
};

TEST(DistFragmentSim, DeferredFragmentCannotSlipBetweenValidations) {
  SlipIn s;
  ASSERT_TRUE(s.loop.spawn(SlipIn::run_t(&s)).ok());
  ASSERT_TRUE(s.env.run_until_true([&] { return s.t_done; }, 10'000 * kMs).ok());
  EXPECT_TRUE(s.hooked->fired());
  check::History h = s.recorder.merge();
  uint64_t merged = 0;
  EXPECT_EQ(merge_receipts(s.shards, &h, &merged), 0u);
  auto anomalies = check::check(h);
  EXPECT_TRUE(anomalies.empty()) << "T: " << s.t_status.to_string()
                                 << ", T': " << s.u_status.to_string() << ": "
                                 << (anomalies.empty() ? "" : anomalies.front().explanation);
  int64_t total = 0;
  for (auto& sh : s.shards) {
    EXPECT_EQ(sh->participant->active(), 0u);
    EXPECT_EQ(unreadable_records(*sh), 0u);
    total += balance_sum(*sh->tables.accounts);
  }
  EXPECT_EQ(total, 2 * int64_t{kKeysPerShard} * kInitial);
}

// ---- malformed messages ----

template <typename T>
std::span<const uint8_t> bytes_of(const T& v) {
  return {reinterpret_cast<const uint8_t*>(&v), sizeof(T)};
}
template <typename T>
std::span<uint8_t> out_of(T* v) {
  return {reinterpret_cast<uint8_t*>(v), sizeof(T)};
}

// One shard with the bank's fragments, served through a ParticipantService.
struct OneShard {
  OneShard() {
    env.attach(loop);
    dist::ParticipantOptions po;
    po.lease_ns = kLeaseNs;
    shard = make_shard(env, 0, false, po);
    service = std::make_unique<dist::ParticipantService>(*shard->participant, loop);
  }
  ~OneShard() {
    service.reset();
    shard.reset();
    env.detach(loop);
  }
  dist::Participant& p() { return *shard->participant; }
  int64_t balance(uint64_t key) {
    Account a{};
    SHOAL_CHECK(
        static_cast<txn::Table<1>*>(shard->tables.accounts)->peek(key1(key), &a, sizeof a).ok());
    return a.balance;
  }
  // Nothing left behind: no context, every record readable, no money minted or lost.
  void expect_clean(int64_t total = int64_t{kKeysPerShard} * kInitial) {
    EXPECT_EQ(p().active(), 0u);
    EXPECT_EQ(unreadable_records(*shard), 0u);
    EXPECT_EQ(balance_sum(*shard->tables.accounts), total);
  }

  SimEnv env{7};
  rt::EventLoop loop{env};
  std::unique_ptr<ShardState> shard;
  std::unique_ptr<dist::ParticipantService> service;
};

const MoveArgs kCredit5{3, 5, 100, 0};

txn::DepVec some_vector() {
  txn::DepVec v;
  v.raise(1, 5);
  v.raise(2, 9);
  return v;
}

// Valid kExec and kValidateInstall requests for `id`: exec (locking after), validate_install
// with a fragment, with arguments whose size is not a multiple of 8 (padding), and without one.
std::vector<WireRequest> valid_requests(check::TxnId id) {
  std::vector<WireRequest> out;
  rt::MsgBuffer b;
  SHOAL_CHECK(dist::wire::encode_exec(id, 1, kCredit, bytes_of(kCredit5), sizeof(MoveResult),
                                      dist::wire::kExecLockAfter, &b)
                  .ok());
  out.emplace_back(dist::wire::kExec, payload_of(b));
  const dist::FragmentCall call{kCredit, bytes_of(kCredit5)};
  SHOAL_CHECK(dist::wire::encode_validate_install(id, 1, some_vector(), &call, &b).ok());
  out.emplace_back(dist::wire::kValidateInstall, payload_of(b));
  const uint8_t five[5] = {1, 2, 3, 4, 5};
  const dist::FragmentCall odd{kCredit, five};
  SHOAL_CHECK(dist::wire::encode_validate_install(id, 1, some_vector(), &odd, &b).ok());
  out.emplace_back(dist::wire::kValidateInstall, payload_of(b));
  SHOAL_CHECK(dist::wire::encode_validate_install(id, 1, some_vector(), nullptr, &b).ok());
  out.emplace_back(dist::wire::kValidateInstall, payload_of(b));
  return out;
}

TEST(DistFragmentWire, TruncatedAndOverlongRequestsAreRefused) {
  OneShard sh;
  expect_truncated_and_overlong_refused(*sh.service, valid_requests(42), [](const Status& s) {
    return s.code() == Code::kCorruption;
  });
  sh.expect_clean();
  EXPECT_EQ(sh.p().tombstones(), 0u) << "a refused request reached the participant";
}

TEST(DistFragmentWire, OutOfRangeRequestFieldsAreInvalidArgument) {
  OneShard sh;
  rt::MsgBuffer resp;
  const auto reqs = valid_requests(43);
  auto patched = [&](size_t which, size_t offset, uint32_t value) {
    std::vector<uint8_t> m = reqs[which].second;
    std::memcpy(m.data() + offset, &value, 4);
    return sh.service->serve(reqs[which].first, m, &resp).code();
  };
  constexpr uint32_t kBig = dist::kFragmentBytesMax + 1;
  // kExec: fragment u32 @16, out_bytes @20, args_bytes @24, flags @28.
  EXPECT_EQ(patched(0, 16, 9), Code::kInvalidArgument);  // registered nowhere
  EXPECT_EQ(patched(0, 16, dist::kFragmentsMax), Code::kInvalidArgument);
  EXPECT_EQ(patched(0, 16, ~0u), Code::kInvalidArgument);
  EXPECT_EQ(patched(0, 20, kBig), Code::kInvalidArgument);
  EXPECT_EQ(patched(0, 24, kBig), Code::kInvalidArgument);
  EXPECT_EQ(patched(0, 24, ~0u), Code::kInvalidArgument);
  EXPECT_EQ(patched(0, 28, 2), Code::kInvalidArgument);  // flag bits beyond "lock after"
  EXPECT_EQ(patched(0, 28, 0x80000001u), Code::kInvalidArgument);
  // kValidateInstall: fragment u32 @16, args_bytes @20, args (32 bytes), count @56.
  EXPECT_EQ(patched(1, 16, 9), Code::kInvalidArgument);
  EXPECT_EQ(patched(1, 16, dist::kFragmentsMax), Code::kInvalidArgument);
  EXPECT_EQ(patched(1, 16, ~0u), Code::kInvalidArgument);  // "no fragment", with arguments
  EXPECT_EQ(patched(1, 20, kBig), Code::kInvalidArgument);
  EXPECT_EQ(patched(1, 20, ~0u), Code::kInvalidArgument);
  EXPECT_EQ(patched(1, 56, ~0u), Code::kInvalidArgument);  // vector entries
  EXPECT_EQ(patched(1, 56, dist::DistTxn::kShardsMax + 1), Code::kInvalidArgument);
  // An unknown fragment answers InvalidArgument before any context starts.
  sh.expect_clean();
  EXPECT_EQ(sh.service->malformed(), 15u);
  // The encoders refuse what the decoders would.
  std::vector<uint8_t> huge(kBig);
  rt::MsgBuffer b;
  EXPECT_EQ(dist::wire::encode_exec(1, 1, kCredit, huge, 16, 0, &b).code(), Code::kInvalidArgument);
  EXPECT_EQ(dist::wire::encode_exec(1, 1, kCredit, {}, kBig, 0, &b).code(), Code::kInvalidArgument);
  const dist::FragmentCall call{kCredit, huge};
  EXPECT_EQ(dist::wire::encode_validate_install(1, 1, some_vector(), &call, &b).code(),
            Code::kInvalidArgument);
}

TEST(DistFragmentWire, MalformedRepliesAreRefused) {
  // kExec reply: flags u32, proposed TID u64, size u32, size bytes.
  auto exec_reply = [](uint32_t flags, uint64_t tid, uint32_t size, size_t bytes) {
    std::vector<uint8_t> m(16 + bytes, 0xab);
    std::memcpy(m.data(), &flags, 4);
    std::memcpy(m.data() + 4, &tid, 8);
    std::memcpy(m.data() + 12, &size, 4);
    return m;
  };
  uint8_t out[8] = {};
  uint32_t size = 0;
  bool wrote = false;
  uint64_t tid = 0;
  const auto ok = exec_reply(dist::wire::kExecWrote, 77, 4, 4);
  ASSERT_TRUE(dist::wire::decode_exec_reply(ok, out, &size, &wrote, &tid).ok());
  EXPECT_TRUE(wrote);
  EXPECT_EQ(size, 4u);
  EXPECT_EQ(tid, 77u);
  EXPECT_EQ(out[3], 0xab);
  for (size_t n = 0; n < ok.size(); ++n) {
    EXPECT_EQ(dist::wire::decode_exec_reply({ok.data(), n}, out, &size, &wrote, &tid).code(),
              Code::kCorruption)
        << "prefix " << n;
  }
  auto code = [&](const std::vector<uint8_t>& m) {
    return dist::wire::decode_exec_reply(m, out, &size, &wrote, &tid).code();
  };
  EXPECT_EQ(code(exec_reply(1, 77, 4, 5)), Code::kCorruption);       // a trailing byte
  EXPECT_EQ(code(exec_reply(2, 77, 4, 4)), Code::kInvalidArgument);  // unknown flag
  EXPECT_EQ(code(exec_reply(0, 77, 9, 9)), Code::kInvalidArgument);  // larger than out
  EXPECT_EQ(code(exec_reply(0, 77, ~0u, 0)), Code::kInvalidArgument);
  // F9: a prepared reply carries the deps after the result; only a caller that asked may get
  // one, and only with writes.
  auto prepared_reply = [&](uint32_t flags, uint32_t entries, size_t cut) {
    // The compact vector (src/txn/depvec.h): count u16, then (shard u16, ts u64) per entry.
    std::vector<uint8_t> m = exec_reply(flags, 77, 4, 4);
    m.resize(m.size() + 2 + 10 * entries);
    const auto count = static_cast<uint16_t>(entries);
    std::memcpy(m.data() + 20, &count, 2);
    for (uint32_t e = 0; e < entries; ++e) {
      const auto shard = static_cast<uint16_t>(e);
      const uint64_t ts = 100 + e;
      std::memcpy(m.data() + 22 + 10 * e, &shard, 2);
      std::memcpy(m.data() + 24 + 10 * e, &ts, 8);
    }
    m.resize(m.size() - cut);
    return m;
  };
  const uint32_t both = dist::wire::kExecWrote | dist::wire::kExecPrepared;
  dist::ExecPrepared prep;
  ASSERT_TRUE(
      dist::wire::decode_exec_reply(prepared_reply(both, 2, 0), out, &size, &wrote, &tid, &prep)
          .ok());
  EXPECT_TRUE(prep.prepared);
  EXPECT_EQ(prep.deps.get(1), 101u);
  EXPECT_EQ(code(prepared_reply(both, 2, 0)), Code::kInvalidArgument);  // not asked for
  EXPECT_EQ(dist::wire::decode_exec_reply(prepared_reply(dist::wire::kExecPrepared, 0, 0), out,
                                          &size, &wrote, &tid, &prep)
                .code(),
            Code::kInvalidArgument);  // prepared without writes
  EXPECT_EQ(
      dist::wire::decode_exec_reply(prepared_reply(both, 2, 5), out, &size, &wrote, &tid, &prep)
          .code(),
      Code::kCorruption);  // vector cut short
  ASSERT_TRUE(dist::wire::decode_exec_reply(ok, out, &size, &wrote, &tid, &prep).ok());
  EXPECT_FALSE(prep.prepared);
  rt::MsgBuffer req;
  EXPECT_EQ(
      dist::wire::encode_exec(1, 1, kCredit, {}, 8, dist::wire::kExecPrepareIfPinned, &req).code(),
      Code::kInvalidArgument);  // prepare without lock
  // kValidateInstall reply: tid u64, count u16, (shard u16, ts u64)* (compact vector).
  std::vector<uint8_t> vi(8 + 2 + 2 * 10, 0);
  const uint64_t t9 = 9;
  const uint16_t two = 2, one = 1, three = 3;
  const uint64_t ts = 5;
  std::memcpy(vi.data(), &t9, 8);
  std::memcpy(vi.data() + 8, &two, 2);
  std::memcpy(vi.data() + 10, &one, 2);
  std::memcpy(vi.data() + 12, &ts, 8);
  std::memcpy(vi.data() + 20, &three, 2);
  std::memcpy(vi.data() + 22, &ts, 8);
  txn::DepVec deps;
  ASSERT_TRUE(dist::wire::decode_validate_install_reply(vi, &deps, &tid).ok());
  EXPECT_EQ(tid, 9u);
  EXPECT_EQ(deps.get(1), 5u);
  EXPECT_EQ(deps.get(3), 5u);
  for (size_t n = 0; n < vi.size(); ++n) {
    EXPECT_EQ(dist::wire::decode_validate_install_reply({vi.data(), n}, &deps, &tid).code(),
              Code::kCorruption)
        << "prefix " << n;
  }
  std::vector<uint8_t> longer = vi;
  longer.push_back(0);
  EXPECT_EQ(dist::wire::decode_validate_install_reply(longer, &deps, &tid).code(),
            Code::kCorruption);
  const uint16_t huge = 0xffff;
  std::memcpy(vi.data() + 8, &huge, 2);
  EXPECT_EQ(dist::wire::decode_validate_install_reply(vi, &deps, &tid).code(),
            Code::kInvalidArgument);
}

// Random corruption of valid fragment requests (txn header kept, so every id can be aborted
// after): never a crash; afterwards aborts and leases leave no context and no lock.
TEST(DistFragmentWire, FuzzedFragmentRequestsNeverCrashAndLeaveNothingBehind) {
  OneShard sh;
  Rng rng(SimEnv::seed_from_env(99));
  rt::MsgBuffer resp;
  uint64_t refused = 0, served = 0;
  const int rounds = seed_count(3000, 300);
  for (int i = 0; i < rounds; ++i) {
    const auto [method, msg] = fuzzed_request(rng, valid_requests);
    Status s = sh.service->serve(method, msg, &resp);
    refused += is_refusal(s) ? 1 : 0;
    served += s.ok() ? 1 : 0;
  }
  for (check::TxnId id = kFuzzFirstId; id < kFuzzFirstId + kFuzzIds; ++id) sh.p().abort(id);
  ASSERT_TRUE(sh.env.run_for(2 * kLeaseNs).ok());
  EXPECT_GT(refused, 0u);
  EXPECT_GT(served, 0u);
  EXPECT_EQ(sh.p().active(), 0u);
  EXPECT_EQ(unreadable_records(*sh.shard), 0u);
}

// ---- the participant's fragment rules, without the network ----

TEST(DistFragmentRules, LastAgentRepeatsAnswerAsTheFirstTime) {
  OneShard sh;
  dist::Participant& p = sh.p();
  MoveResult r{};
  uint32_t size = 0;
  bool wrote = false;
  uint64_t proposed = 0, tid = 0, tid2 = 0;
  txn::DepVec deps, deps2;
  // F7 after it installed: Ok with the same TID; F8's fragment is not run again.
  ASSERT_TRUE(
      p.exec(10, 1, kCredit, bytes_of(kCredit5), out_of(&r), &size, &wrote, &proposed).ok());
  EXPECT_TRUE(wrote);
  EXPECT_EQ(size, sizeof r);
  EXPECT_GT(proposed, 0u);
  ASSERT_TRUE(p.validate_install(10, 1, some_vector(), &deps, &tid).ok());
  EXPECT_GE(tid, proposed);
  EXPECT_EQ(p.active(), 0u);
  EXPECT_EQ(sh.balance(3), kInitial + 5);
  ASSERT_TRUE(p.validate_install(10, 1, some_vector(), &deps2, &tid2).ok());
  EXPECT_EQ(tid2, tid);
  const dist::FragmentCall call{kCredit, bytes_of(kCredit5)};
  ASSERT_TRUE(p.validate_install(10, 1, some_vector(), &deps2, &tid2, &call).ok());
  EXPECT_EQ(tid2, tid);
  EXPECT_EQ(sh.balance(3), kInitial + 5) << "a repeated F8 ran its fragment again";
  EXPECT_EQ(p.stats().repeated_installs, 2u);
  // The same for a one-shot F8 (first contact).
  const MoveArgs credit7{7, 2, 101, 1};
  const dist::FragmentCall call7{kCredit, bytes_of(credit7)};
  ASSERT_TRUE(p.validate_install(11, 1, some_vector(), &deps, &tid, &call7).ok());
  ASSERT_TRUE(p.validate_install(11, 1, some_vector(), &deps2, &tid2, &call7).ok());
  EXPECT_EQ(tid2, tid);
  EXPECT_EQ(sh.balance(7), kInitial + 2);
  // F7 after it aborted (its read no longer validates): Aborted, every time.
  PeekArgs pa{};
  pa.count = 1;
  pa.keys[0] = 4;
  PeekResult pr{};
  ASSERT_TRUE(p.exec(12, 1, kPeek, bytes_of(pa), out_of(&pr), &size, &wrote, nullptr).ok());
  EXPECT_FALSE(wrote);
  const MoveArgs credit5{5, 3, 102, 0};
  ASSERT_TRUE(p.exec(12, 1, kCredit, bytes_of(credit5), out_of(&r), &size, &wrote, &proposed).ok());
  {
    txn::Txn t(sh.shard->engine.get(), 2);  // overwrites what 12 read
    t.begin();
    const uint64_t key = 4;
    const Account acc{1, 999, kInitial};
    ASSERT_TRUE(sh.shard->tables.accounts->txn_put(t, &key, &acc, sizeof acc).ok());
    ASSERT_TRUE(t.commit().ok());
    t.end();
  }
  EXPECT_TRUE(p.validate_install(12, 1, some_vector(), &deps, &tid).is_aborted());
  EXPECT_EQ(p.active(), 0u);
  EXPECT_TRUE(p.validate_install(12, 1, some_vector(), &deps, &tid).is_aborted());
  const dist::FragmentCall call5{kCredit, bytes_of(credit5)};
  EXPECT_TRUE(p.validate_install(12, 1, some_vector(), &deps, &tid, &call5).is_aborted());
  EXPECT_EQ(p.install(12, 1, proposed, some_vector()).code(), Code::kInvalidArgument);
  EXPECT_EQ(sh.balance(5), kInitial) << "an aborted transaction's write showed";
  // After the coordinator's abort: Aborted too.
  ASSERT_TRUE(p.exec(13, 1, kCredit, bytes_of(credit5), out_of(&r), &size, &wrote, &proposed).ok());
  p.abort(13);
  EXPECT_TRUE(p.validate_install(13, 1, some_vector(), &deps, &tid).is_aborted());
  sh.expect_clean(int64_t{kKeysPerShard} * kInitial + 5 + 2);
}

// F9: an exec that locks and whose reads are all rows it locked votes at once; one with any
// other read does not.
TEST(DistFragmentRules, PinnedExecVotesAtOnce) {
  OneShard sh;
  dist::Participant& p = sh.p();
  MoveResult r{};
  uint32_t size = 0;
  bool wrote = false;
  uint64_t proposed = 0;
  dist::ExecPrepared prep;
  txn::DepVec deps;
  const MoveArgs credit5{5, 3, 104, 0};
  ASSERT_TRUE(
      p.exec(20, 1, kCredit, bytes_of(credit5), out_of(&r), &size, &wrote, &proposed, &prep).ok());
  EXPECT_TRUE(prep.prepared);
  EXPECT_GT(prep.deps.get(0), 0u);  // the version it read
  EXPECT_TRUE(p.validate(20, 1, &deps).is_aborted()) << "a second vote";
  p.abort_unless_prepared(20);  // prepared: only the decision ends it (F3)
  EXPECT_EQ(p.active(), 1u);
  ASSERT_TRUE(p.install(20, 1, proposed, some_vector()).ok());
  EXPECT_EQ(sh.balance(5), kInitial + 3);
  // A peek first: that read is not locked, so the exec locks but does not vote.
  PeekArgs pa{};
  pa.count = 1;
  pa.keys[0] = 4;
  PeekResult pr{};
  ASSERT_TRUE(p.exec(21, 1, kPeek, bytes_of(pa), out_of(&pr), &size, &wrote, nullptr).ok());
  const MoveArgs credit6{6, 3, 105, 0};
  ASSERT_TRUE(
      p.exec(21, 1, kCredit, bytes_of(credit6), out_of(&r), &size, &wrote, &proposed, &prep).ok());
  EXPECT_FALSE(prep.prepared);
  ASSERT_TRUE(p.validate(21, 1, &deps).ok());
  ASSERT_TRUE(p.install(21, 1, proposed, some_vector()).ok());
  // Asked to vote but not to lock: neither.
  const MoveArgs credit7{7, 3, 106, 0};
  ASSERT_TRUE(
      p.exec(22, 1, kCredit, bytes_of(credit7), out_of(&r), &size, &wrote, nullptr, &prep).ok());
  EXPECT_FALSE(prep.prepared);
  p.abort(22);
  sh.expect_clean(int64_t{kKeysPerShard} * kInitial + 6);
}

TEST(DistFragmentRules, FailedOneShotFragmentEndsTheContext) {
  OneShard sh;
  dist::Participant& p = sh.p();
  txn::DepVec deps;
  uint64_t tid = 0;
  // A fragment that wrote, then failed: its error comes back, nothing is held or shown, the
  // id is ended (an install is refused, a repeat does not run the fragment again).
  const MoveArgs mint{6, 0, 103, 0};
  const dist::FragmentCall fails{kFail, bytes_of(mint)};
  EXPECT_EQ(p.validate_install(20, 1, some_vector(), &deps, &tid, &fails).code(), Code::kIOError);
  EXPECT_EQ(p.active(), 0u);
  EXPECT_EQ(p.install(20, 1, 1, some_vector()).code(), Code::kInvalidArgument);
  EXPECT_TRUE(p.validate_install(20, 1, some_vector(), &deps, &tid, &fails).is_aborted());
  // A deferred debit the balance cannot cover: UserAbort, same ending.
  const MoveArgs overdraw{6, kInitial + 1, 104, 1};
  const dist::FragmentCall debit_call{kDebit, bytes_of(overdraw)};
  EXPECT_TRUE(p.validate_install(21, 1, some_vector(), &deps, &tid, &debit_call).is_user_abort());
  EXPECT_EQ(p.active(), 0u);
  EXPECT_EQ(p.install(21, 1, 1, some_vector()).code(), Code::kInvalidArgument);
  // An unknown fragment: refused before any context starts.
  const dist::FragmentCall unknown{9, bytes_of(mint)};
  EXPECT_EQ(p.validate_install(22, 1, some_vector(), &deps, &tid, &unknown).code(),
            Code::kInvalidArgument);
  // A stale epoch: refused, nothing run.
  p.advance_epoch(3);
  EXPECT_TRUE(p.validate_install(23, 2, some_vector(), &deps, &tid, &fails).is_aborted());
  sh.expect_clean();
}

TEST(DistFragmentRules, ExecRefusals) {
  OneShard sh;
  dist::Participant& p = sh.p();
  MoveResult r{};
  uint32_t size = 0;
  bool wrote = false;
  uint64_t proposed = 0;
  txn::DepVec deps;
  // Unknown fragments and oversized buffers: InvalidArgument, no context started.
  for (uint32_t f : {9u, dist::kFragmentsMax, ~0u}) {
    EXPECT_EQ(p.exec(30, 1, f, bytes_of(kCredit5), out_of(&r), &size, &wrote, nullptr).code(),
              Code::kInvalidArgument)
        << f;
  }
  std::vector<uint8_t> big(dist::kFragmentBytesMax + 1);
  EXPECT_EQ(p.exec(30, 1, kCredit, big, out_of(&r), &size, &wrote, nullptr).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(p.exec(30, 1, kCredit, bytes_of(kCredit5), big, &size, &wrote, nullptr).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(p.active(), 0u);
  {
    dist::Participant bare(*sh.shard->engine, 0);  // no fragment table registered
    EXPECT_EQ(
        bare.exec(30, 1, kCredit, bytes_of(kCredit5), out_of(&r), &size, &wrote, nullptr).code(),
        Code::kInvalidArgument);
    EXPECT_EQ(bare.active(), 0u);
  }
  // A fragment's own error leaves the context to the coordinator's abort.
  EXPECT_EQ(p.exec(31, 1, kCredit, bytes_of(kCredit5), {}, &size, &wrote, nullptr).code(),
            Code::kInvalidArgument);  // its result does not fit
  EXPECT_EQ(p.active(), 1u);
  p.abort(31);
  // After the exec that locked (last_on_shard): Aborted.
  ASSERT_TRUE(
      p.exec(32, 1, kCredit, bytes_of(kCredit5), out_of(&r), &size, &wrote, &proposed).ok());
  EXPECT_TRUE(
      p.exec(32, 1, kCredit, bytes_of(kCredit5), out_of(&r), &size, &wrote, nullptr).is_aborted());
  EXPECT_TRUE(p.exec(32, 1, kCredit, bytes_of(kCredit5), out_of(&r), &size, &wrote, &proposed)
                  .is_aborted());
  p.abort(32);
  // After lock(), and after the yes vote: Aborted.
  ASSERT_TRUE(p.exec(33, 1, kCredit, bytes_of(kCredit5), out_of(&r), &size, &wrote, nullptr).ok());
  ASSERT_TRUE(p.lock(33, 1, nullptr, 0, &proposed).ok());
  EXPECT_TRUE(
      p.exec(33, 1, kCredit, bytes_of(kCredit5), out_of(&r), &size, &wrote, nullptr).is_aborted());
  ASSERT_TRUE(p.validate(33, 1, &deps).ok());  // prepared
  EXPECT_TRUE(
      p.exec(33, 1, kCredit, bytes_of(kCredit5), out_of(&r), &size, &wrote, nullptr).is_aborted());
  ASSERT_TRUE(p.install(33, 1, proposed, deps).ok());
  EXPECT_EQ(sh.balance(3), kInitial + 5);
  // last_on_shard with nothing written locks nothing: the shard stays read-only.
  PeekArgs pa{};
  pa.count = 2;
  pa.keys[0] = 8;
  pa.keys[1] = 9;
  PeekResult pr{};
  proposed = 0;
  ASSERT_TRUE(p.exec(34, 1, kPeek, bytes_of(pa), out_of(&pr), &size, &wrote, &proposed).ok());
  EXPECT_FALSE(wrote);
  EXPECT_EQ(proposed, 0u);
  EXPECT_EQ(pr.balances[1], kInitial);
  ASSERT_TRUE(p.validate(34, 1, &deps).ok());
  EXPECT_EQ(p.active(), 0u) << "a read-only context is finished by validate";
  // Ended (F1) and stale (epoch) ids: Aborted, no context.
  p.abort(35);
  EXPECT_TRUE(
      p.exec(35, 1, kCredit, bytes_of(kCredit5), out_of(&r), &size, &wrote, nullptr).is_aborted());
  p.advance_epoch(3);
  EXPECT_TRUE(
      p.exec(36, 2, kCredit, bytes_of(kCredit5), out_of(&r), &size, &wrote, nullptr).is_aborted());
  sh.expect_clean(int64_t{kKeysPerShard} * kInitial + 5);
}

}  // namespace dist_fragment_sim_test

// ---- F11: prepared halves of a dead coordinator wait for its shard's new leader ----

namespace dist_fragment_sim_test {

// Runs a credit of `amount` to `key` as transaction `id` and locks it; with `prepare`, also
// validates it (its yes vote: the context is prepared). Returns the proposed TID.
uint64_t credit_locked(dist::Participant& p, check::TxnId id, uint64_t key, int64_t amount,
                       bool prepare) {
  const MoveArgs args{key, amount, 200 + id % 1000, 0};
  MoveResult r{};
  uint32_t size = 0;
  bool wrote = false;
  uint64_t proposed = 0;
  SHOAL_CHECK(p.exec(id, 1, kCredit, bytes_of(args), out_of(&r), &size, &wrote, &proposed).ok());
  SHOAL_CHECK(wrote && proposed != 0);
  txn::DepVec deps;
  if (prepare) SHOAL_CHECK(p.validate(id, 1, &deps).ok());
  return proposed;
}

TEST(DistFragmentRules, PreparedHalvesWaitForTheCoordinatorsNewLeaderAndFollowItsWord) {
  OneShard sh;
  dist::Participant& p = sh.p();
  const check::TxnId committed = dist::make_txn_id(2, 0, 1), lost = dist::make_txn_id(2, 0, 2);
  const check::TxnId unvoted = dist::make_txn_id(2, 0, 3), elsewhere = dist::make_txn_id(1, 0, 4);
  const uint64_t proposed = credit_locked(p, committed, 3, 5, true);
  credit_locked(p, lost, 4, 7, true);
  credit_locked(p, unvoted, 5, 9, false);
  credit_locked(p, elsewhere, 6, 11, true);
  // Coordinator shard 2 died: what has not voted ends; the prepared halves wait.
  EXPECT_EQ(p.abort_coordinated_by(2, /*keep_prepared=*/true), 1u);
  std::vector<check::TxnId> waiting;
  p.prepared_coordinated_by(2, &waiting);
  EXPECT_EQ(waiting, (std::vector<check::TxnId>{committed, lost}));
  // Its new leader found `committed` in its log: installed here at the vector it logged.
  txn::DepVec vector;
  vector.raise(0, proposed + 100);
  vector.raise(2, 77);
  uint64_t tid = 0;
  ASSERT_TRUE(p.resolve(committed, true, vector, &tid).ok());
  EXPECT_EQ(tid, proposed + 100);
  EXPECT_EQ(sh.balance(3), kInitial + 5);
  // ... and not `lost` (its half died with the failover): aborted, nothing installed.
  EXPECT_TRUE(p.resolve(lost, false, {}, &tid).is_aborted());
  EXPECT_EQ(sh.balance(4), kInitial);
  EXPECT_EQ(p.resolve(lost, true, vector, &tid).code(), Code::kNotFound);  // ended already
  EXPECT_EQ(p.stats().resolved_committed, 1u);
  EXPECT_EQ(p.stats().resolved_aborted, 1u);
  // Presumed abort (no failover follows) ends prepared ones too.
  EXPECT_EQ(p.abort_coordinated_by(1), 1u);
  sh.expect_clean(int64_t{kKeysPerShard} * kInitial + 5);
}

bool decided_only_42(const void* ctx, check::TxnId id, uint64_t* tid, txn::DepVec* vector) {
  (void)ctx;
  if (id != 42) return false;
  *tid = 4200;
  vector->clear();
  vector->raise(0, 4200);
  vector->raise(1, 17);
  return true;
}

TEST(DistFragmentWire, ResolveAnswersWhatTheShardsLogDecided) {
  OneShard sh;
  rt::MsgBuffer req, resp;
  dist::wire::encode_txn_only(42, 0, &req);
  // A replica that did not take over from a log knows no decisions.
  EXPECT_EQ(sh.service->serve(dist::wire::kResolve, payload_of(req), &resp).code(),
            Code::kUnavailable);
  sh.p().set_decision_lookup(&decided_only_42, nullptr);
  ASSERT_TRUE(sh.service->serve(dist::wire::kResolve, payload_of(req), &resp).ok());
  uint64_t tid = 0;
  txn::DepVec vector;
  ASSERT_TRUE(dist::wire::decode_validate_install_reply(payload_of(resp), &vector, &tid).ok());
  EXPECT_EQ(tid, 4200u);
  EXPECT_EQ(vector.get(1), 17u);
  dist::wire::encode_txn_only(43, 0, &req);
  EXPECT_EQ(sh.service->serve(dist::wire::kResolve, payload_of(req), &resp).code(),
            Code::kNotFound);
  // A resolve carries nothing after its header.
  std::vector<uint8_t> longer = payload_of(req);
  longer.push_back(0);
  EXPECT_EQ(sh.service->serve(dist::wire::kResolve, longer, &resp).code(), Code::kCorruption);
  sh.expect_clean();
}

}  // namespace dist_fragment_sim_test
}  // namespace shoal::sim
