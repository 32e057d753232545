// The interface between a benchmark workload (TPC-C, the microbenchmark, YCSB) and the
// benchmark runner that drives it (bench/runner.h) for `shoal bench`.
//
// Threads: load() and check() run on one thread with no transactions in flight. Each runner
// thread makes one Client with make_client() and is the only caller of that Client.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shoal/status.h"
#include "src/txn/engine.h"

namespace shoal::workload {

// What one call of Client::run_one did.
struct Outcome {
  uint32_t type = 0;  // index into Workload::txn_types()
  // Ok: committed. UserAbort: rolled back by the workload's rules (TPC-C's 1% invalid items),
  // which counts as completed business. Anything else: failed (conflict retries exhausted, ...).
  Status status;
};

class Client {
 public:
  virtual ~Client() = default;
  // Generates one transaction's input and runs it to completion (with the Worker's retries).
  virtual Outcome run_one() = 0;
};

struct LoadOptions {
  uint32_t workers = 1;     // threads that will run; loaders may use them in parallel
  uint32_t warehouses = 1;  // TPC-C scale; other workloads read their own settings
  uint64_t seed = 1;
};

class Workload {
 public:
  virtual ~Workload() = default;
  virtual std::string name() const = 0;
  // Names of the transaction types, in Outcome::type order.
  virtual std::vector<std::string> txn_types() const = 0;
  // Creates the tables and loads the initial data. progress(fraction in [0, 1]) may be called
  // any number of times from the loading thread.
  virtual Status load(txn::Engine& engine, const LoadOptions& options,
                      const std::function<void(double)>& progress) = 0;
  // REQUIRES: load() succeeded. worker_index in [0, workers).
  virtual std::unique_ptr<Client> make_client(txn::Worker& worker, uint32_t worker_index,
                                              uint64_t seed) = 0;
  // Consistency conditions over the quiescent database: names (with details) of the failed
  // ones; empty when all hold. Workloads without conditions return empty.
  virtual std::vector<std::string> check(txn::Engine& engine) = 0;
};

}  // namespace shoal::workload
