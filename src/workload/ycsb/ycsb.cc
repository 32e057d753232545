#include "src/workload/ycsb/ycsb.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>

namespace shoal::workload {

Zipfian::Zipfian(uint64_t items, double theta) : items_(items), theta_(theta) {
  SHOAL_ASSERT(items >= 2 && theta >= 0 && theta < 1, "zipfian(%llu, %f)",
               static_cast<unsigned long long>(items), theta);
  double zetan = 0;
  for (uint64_t i = 1; i <= items; ++i) zetan += 1.0 / std::pow(static_cast<double>(i), theta);
  const double zeta2 = 1.0 + 1.0 / std::pow(2.0, theta);
  zetan_ = zetan;
  alpha_ = 1.0 / (1.0 - theta);
  eta_ = (1.0 - std::pow(2.0 / static_cast<double>(items), 1.0 - theta)) / (1.0 - zeta2 / zetan);
  half_pow_theta_ = std::pow(0.5, theta);
}

uint64_t Zipfian::next(Rng& rng) const {
  const double u = rng.uniform01();
  const double uz = u * zetan_;
  if (uz < 1.0) return 0;
  if (uz < 1.0 + half_pow_theta_) return 1;
  const auto rank =
      static_cast<uint64_t>(static_cast<double>(items_) * std::pow(eta_ * u - eta_ + 1.0, alpha_));
  return rank < items_ ? rank : items_ - 1;  // guard against rounding at u -> 1
}

uint64_t fnv1a64(uint64_t value) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (int i = 0; i < 8; ++i) {
    hash ^= value & 0xff;
    hash *= 0x100000001b3ULL;
    value >>= 8;
  }
  return hash;
}

namespace {

enum class Op : uint8_t { kRead, kUpdate, kReadModifyWrite };

struct YcsbArgs {
  txn::Table<1>* table;
  uint64_t key;
  uint32_t field;               // rmw: which field to change
  char value[kYcsbValueBytes];  // update: the new record; rmw: the new field in [0, 10)
};

Status ycsb_read(txn::Txn& txn, const void* raw, void* /*result*/) {
  const auto& a = *static_cast<const YcsbArgs*>(raw);
  char value[kYcsbValueBytes];
  return txn.get(*a.table, key1(a.key), value, kYcsbValueBytes);
}

Status ycsb_update(txn::Txn& txn, const void* raw, void* /*result*/) {
  const auto& a = *static_cast<const YcsbArgs*>(raw);
  return txn.put(*a.table, key1(a.key), a.value, kYcsbValueBytes);
}

Status ycsb_rmw(txn::Txn& txn, const void* raw, void* /*result*/) {
  const auto& a = *static_cast<const YcsbArgs*>(raw);
  char value[kYcsbValueBytes];
  SHOAL_TRY(txn.get(*a.table, key1(a.key), value, kYcsbValueBytes));
  std::memcpy(value + a.field * kYcsbFieldBytes, a.value, kYcsbFieldBytes);
  return txn.put(*a.table, key1(a.key), value, kYcsbValueBytes);
}

void random_bytes(Rng& rng, char* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>(' ' + rng.uniform(0, 94));
}

// The operation mix of one workload letter: read fraction, then update or rmw for the rest.
struct Mix {
  double read_fraction;
  Op other;
};

Mix mix_of(char letter) {
  switch (letter) {
    case 'A':
      return {0.5, Op::kUpdate};
    case 'B':
      return {0.95, Op::kUpdate};
    case 'C':
      return {1.0, Op::kUpdate};
    default:
      return {0.5, Op::kReadModifyWrite};  // 'F'
  }
}

class YcsbClient final : public Client {
 public:
  YcsbClient(txn::Worker& worker, txn::Table<1>* table, const Zipfian& zipf, Mix mix, uint64_t seed)
      : worker_(worker), table_(table), zipf_(zipf), mix_(mix), rng_(seed) {}

  Outcome run_one() override {
    args_.table = table_;
    args_.key = scrambled_zipfian(zipf_, rng_);
    Outcome outcome;
    if (rng_.uniform01() < mix_.read_fraction) {
      outcome.type = 0;
      outcome.status = worker_.run(&ycsb_read, &args_);
    } else if (mix_.other == Op::kUpdate) {
      outcome.type = 1;
      random_bytes(rng_, args_.value, kYcsbValueBytes);
      outcome.status = worker_.run(&ycsb_update, &args_);
    } else {
      outcome.type = 1;
      args_.field = static_cast<uint32_t>(rng_.uniform(0, kYcsbFields - 1));
      random_bytes(rng_, args_.value, kYcsbFieldBytes);
      outcome.status = worker_.run(&ycsb_rmw, &args_);
    }
    return outcome;
  }

 private:
  txn::Worker& worker_;
  txn::Table<1>* table_;
  const Zipfian& zipf_;
  Mix mix_;
  Rng rng_;
  YcsbArgs args_{};
};

class YcsbWorkload final : public Workload {
 public:
  explicit YcsbWorkload(const YcsbOptions& options) : options_(options) {}

  std::string name() const override { return fmt::format("ycsb-{}", options_.workload); }

  std::vector<std::string> txn_types() const override {
    const Mix mix = mix_of(options_.workload);
    if (mix.read_fraction >= 1.0) return {"read"};
    return {"read", mix.other == Op::kUpdate ? "update" : "rmw"};
  }

  Status load(txn::Engine& engine, const LoadOptions& options,
              const std::function<void(double)>& progress) override {
    table_ = engine.create_table<1>("usertable");
    Rng rng(options.seed);
    char value[kYcsbValueBytes];
    const uint64_t step = std::max<uint64_t>(options_.records / 100, 1);
    for (uint64_t k = 0; k < options_.records; ++k) {
      random_bytes(rng, value, kYcsbValueBytes);
      SHOAL_TRY(table_->load(key1(k), value, kYcsbValueBytes));
      if (k % step == 0) progress(0.9 * static_cast<double>(k) / options_.records);
    }
    // The zeta sum is O(records): part of loading, not of the first transactions.
    zipf_ = std::make_unique<Zipfian>(options_.records, options_.theta);
    progress(1.0);
    return Status::Ok();
  }

  std::unique_ptr<Client> make_client(txn::Worker& worker, uint32_t /*worker_index*/,
                                      uint64_t seed) override {
    return std::make_unique<YcsbClient>(worker, table_, *zipf_, mix_of(options_.workload), seed);
  }

  // Conditions: every record is still there with a 100-byte value (updates never insert or
  // delete, never change sizes).
  std::vector<std::string> check(txn::Engine& /*engine*/) override {
    uint64_t records = 0, bad_sizes = 0;
    table_->for_each(Key1::min(), Key1::max(), [&](const Key1&, const void*, uint32_t size) {
      ++records;
      bad_sizes += size != kYcsbValueBytes;
      return true;
    });
    std::vector<std::string> failures;
    if (records != options_.records) {
      failures.push_back(
          fmt::format("record count: {} records, expected {}", records, options_.records));
    }
    if (bad_sizes != 0) {
      failures.push_back(
          fmt::format("value size: {} records not {} bytes", bad_sizes, kYcsbValueBytes));
    }
    return failures;
  }

 private:
  YcsbOptions options_;
  txn::Table<1>* table_ = nullptr;
  std::unique_ptr<Zipfian> zipf_;
};

}  // namespace

Result<std::unique_ptr<Workload>> make_ycsb_workload(const YcsbOptions& options) {
  const char w = options.workload;
  if (w != 'A' && w != 'B' && w != 'C' && w != 'F') {
    return Status::InvalidArgument(fmt::format("ycsb: unknown workload '{}' (A, B, C or F)", w));
  }
  if (options.records < 2) {
    return Status::InvalidArgument(
        fmt::format("ycsb: --records must be >= 2, not {}", options.records));
  }
  if (!(options.theta >= 0 && options.theta < 1)) {
    return Status::InvalidArgument(
        fmt::format("ycsb: --theta must be in [0, 1), not {}", options.theta));
  }
  return std::unique_ptr<Workload>(std::make_unique<YcsbWorkload>(options));
}

}  // namespace shoal::workload
