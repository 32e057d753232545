#include "src/server/payments_json.h"

namespace shoal::server {

nlohmann::json payments_to_json(const workload::ForeignPayments& payments) {
  nlohmann::json entries = nlohmann::json::array();
  int kind = 0;
  for (const auto* m : {&payments.by_warehouse, &payments.by_district, &payments.by_customer}) {
    for (const auto& [key, cents] : *m)
      entries.push_back(nlohmann::json::array({kind, key, cents}));
    ++kind;
  }
  return entries;
}

Status payments_from_json(const nlohmann::json& entries, const std::string& field,
                          workload::ForeignPayments* out) {
  if (entries.is_null()) return Status::Ok();
  if (!entries.is_array()) return Status::InvalidArgument(field + ": not a list");
  for (const auto& e : entries) {
    if (!e.is_array() || e.size() != 3 || !e[0].is_number_unsigned() || e[0].get<int>() > 2 ||
        !e[1].is_number_unsigned() || !e[2].is_number()) {
      return Status::InvalidArgument(field + ": bad [kind, key, cents] entry");
    }
    auto* m = e[0].get<int>() == 0   ? &out->by_warehouse
              : e[0].get<int>() == 1 ? &out->by_district
                                     : &out->by_customer;
    (*m)[e[1].get<uint64_t>()] += e[2].get<int64_t>();
  }
  return Status::Ok();
}

}  // namespace shoal::server
