// TPC-C's foreign payments (workload::ForeignPayments: the HISTORY sums one shard holds for other
// shards' customers) as control-plane JSON: [[kind, key, cents], ...], kind 0 by warehouse, 1 by
// district, 2 by customer, keys as in ForeignPayments. The shard servers' "payments"/"check"
// scan steps and the followers' check (src/server/replica_cli.cc) both read this form.
//
// Threads: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include "shoal/status.h"
#include "src/workload/tpcc/tpcc.h"

namespace shoal::server {

nlohmann::json payments_to_json(const workload::ForeignPayments& payments);
// Adds the entries of `entries` (null: none) into *out. InvalidArgument naming `field` on a
// malformed entry.
[[nodiscard]] Status payments_from_json(const nlohmann::json& entries, const std::string& field,
                                        workload::ForeignPayments* out);

}  // namespace shoal::server
