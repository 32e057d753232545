#include "src/workload/micro/micro.h"

#include <atomic>
#include <cstring>
#include <deque>
#include <mutex>

#include <fmt/format.h>

#include "src/base/env.h"

namespace shoal::workload {
namespace {

constexpr uint32_t kKeysPerTxn = 4;

struct MicroValue {
  uint64_t counter;  // incremented by every committed transaction that touches the key
  char payload[24];  // filler: Mako's values are small records, not bare counters
};
static_assert(sizeof(MicroValue) == 32);

struct MicroArgs {
  txn::Table<1>* table;
  uint64_t keys[kKeysPerTxn];
};

// Reads all 4 keys, then writes each back with its counter incremented.
Status read_modify_write4(txn::Txn& txn, const void* raw_args, void* /*result*/) {
  const auto& args = *static_cast<const MicroArgs*>(raw_args);
  MicroValue values[kKeysPerTxn];
  for (uint32_t i = 0; i < kKeysPerTxn; ++i) {
    SHOAL_TRY(txn.get(*args.table, key1(args.keys[i]), &values[i]));
  }
  for (uint32_t i = 0; i < kKeysPerTxn; ++i) {
    ++values[i].counter;
    SHOAL_TRY(txn.put(*args.table, key1(args.keys[i]), values[i]));
  }
  return Status::Ok();
}

class MicroClient final : public Client {
 public:
  MicroClient(txn::Worker& worker, txn::Table<1>* table, uint64_t keys, uint64_t seed,
              std::atomic<uint64_t>* commits)
      : worker_(worker), table_(table), keys_(keys), rng_(seed), commits_(commits) {}

  Outcome run_one() override {
    MicroArgs args;
    args.table = table_;
    pick_distinct_keys(args.keys);
    Outcome outcome;
    outcome.type = 0;
    outcome.status = worker_.run(&read_modify_write4, &args);
    if (outcome.status.ok()) {
      // Single writer: a relaxed load+store, no locked RMW.
      commits_->store(commits_->load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
    return outcome;
  }

 private:
  // Uniform keys; a collision moves to the next free key, so the loop is bounded by 4 steps
  // per key (keys_ >= 4 guarantees a free one).
  void pick_distinct_keys(uint64_t* out) {
    for (uint32_t i = 0; i < kKeysPerTxn; ++i) {
      uint64_t k = rng_.uniform(0, keys_ - 1);
      for (uint32_t step = 0; step < kKeysPerTxn; ++step) {
        bool taken = false;
        for (uint32_t j = 0; j < i; ++j) taken |= out[j] == k;
        if (!taken) break;
        k = (k + 1) % keys_;
      }
      out[i] = k;
    }
  }

  txn::Worker& worker_;
  txn::Table<1>* table_;
  uint64_t keys_;
  Rng rng_;
  std::atomic<uint64_t>* commits_;
};

class MicroWorkload final : public Workload {
 public:
  explicit MicroWorkload(const MicroOptions& options) : options_(options) {}

  std::string name() const override { return "micro"; }
  std::vector<std::string> txn_types() const override { return {"rmw4"}; }

  Status load(txn::Engine& engine, const LoadOptions& options,
              const std::function<void(double)>& progress) override {
    table_ = engine.create_table<1>("micro");
    Rng rng(options.seed);
    const uint64_t step = std::max<uint64_t>(options_.keys / 100, 1);
    for (uint64_t k = 0; k < options_.keys; ++k) {
      MicroValue v{};
      for (char& c : v.payload) c = static_cast<char>('a' + rng.uniform(0, 25));
      SHOAL_TRY(table_->load(key1(k), v));
      if (k % step == 0) progress(static_cast<double>(k) / static_cast<double>(options_.keys));
    }
    progress(1.0);
    return Status::Ok();
  }

  std::unique_ptr<Client> make_client(txn::Worker& worker, uint32_t /*worker_index*/,
                                      uint64_t seed) override {
    std::lock_guard<std::mutex> lock(mu_);
    commits_.emplace_back(0);  // deque: earlier slots never move
    return std::make_unique<MicroClient>(worker, table_, options_.keys, seed, &commits_.back());
  }

  std::vector<std::string> check(txn::Engine& /*engine*/) override {
    std::vector<std::string> failures;
    uint64_t commits = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& c : commits_) commits += c.load(std::memory_order_relaxed);
    }
    uint64_t sum = 0, records = 0;
    table_->for_each(Key1::min(), Key1::max(), [&](const Key1&, const void* value, uint32_t size) {
      ++records;
      if (size == sizeof(MicroValue)) {
        MicroValue v;
        std::memcpy(&v, value, sizeof v);
        sum += v.counter;
      }
      return true;
    });
    if (records != options_.keys) {
      failures.push_back(
          fmt::format("record count: {} records, expected {}", records, options_.keys));
    }
    if (sum != commits * kKeysPerTxn) {
      failures.push_back(fmt::format("counter sum: {} increments, expected {} (4 x {} commits)",
                                     sum, commits * kKeysPerTxn, commits));
    }
    return failures;
  }

 private:
  MicroOptions options_;
  txn::Table<1>* table_ = nullptr;
  std::mutex mu_;  // guards commits_ growth (setup only)
  std::deque<std::atomic<uint64_t>> commits_;
};

}  // namespace

Result<std::unique_ptr<Workload>> make_micro_workload(const MicroOptions& options) {
  if (options.keys < kKeysPerTxn) {
    return Status::InvalidArgument(
        fmt::format("micro: --keys must be >= {}, not {}", kKeysPerTxn, options.keys));
  }
  return std::unique_ptr<Workload>(std::make_unique<MicroWorkload>(options));
}

}  // namespace shoal::workload
