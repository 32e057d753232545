// Checked reads of JSON that another process sent (peers, followers, shard servers).
//
// nlohmann::json's accessors (.at(), .get<T>(), .value() on a present field of another type,
// operator[] on a non-object) throw, and an exception escaping a message handler aborts the
// process: a malformed message from a peer must be an error Status instead. Every read of a
// peer-supplied field goes through json_field / json_optional_field, which name the field in
// the error ("'replica': a string, not an unsigned integer of 32 bits").
//
// Types: bool, unsigned and signed integers (range-checked for T), double (any JSON number),
// std::string, std::vector<std::string>, and nlohmann::json (any value). Errors are
// InvalidArgument; callers add where the message came from.
//
// Threads: pure functions.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "shoal/status.h"

namespace shoal {
namespace json_detail {

template <typename T>
std::string type_name() {
  if constexpr (std::is_same_v<T, nlohmann::json>) {
    return "any value";
  } else if constexpr (std::is_same_v<T, bool>) {
    return "a boolean";
  } else if constexpr (std::is_integral_v<T>) {
    return fmt::format("{} integer of {} bits", std::is_signed_v<T> ? "a signed" : "an unsigned",
                       sizeof(T) * 8);
  } else if constexpr (std::is_floating_point_v<T>) {
    return "a number";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return "a string";
  } else {
    static_assert(std::is_same_v<T, std::vector<std::string>>, "json_field: unsupported type");
    return "a list of strings";
  }
}

// Converts `v` to T without throwing; false when its type or range does not fit.
template <typename T>
bool convert(const nlohmann::json& v, T* out) {
  if constexpr (std::is_same_v<T, nlohmann::json>) {
    *out = v;
    return true;
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) return false;
    *out = v.get<bool>();
    return true;
  } else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) {
    if (!v.is_number_unsigned()) return false;
    const uint64_t x = v.get<uint64_t>();
    if (x > std::numeric_limits<T>::max()) return false;
    *out = static_cast<T>(x);
    return true;
  } else if constexpr (std::is_integral_v<T>) {
    if (!v.is_number_integer()) return false;
    if (v.is_number_unsigned()) {
      const uint64_t x = v.get<uint64_t>();
      if (x > static_cast<uint64_t>(std::numeric_limits<T>::max())) return false;
      *out = static_cast<T>(x);
      return true;
    }
    const int64_t x = v.get<int64_t>();
    if (x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max()) return false;
    *out = static_cast<T>(x);
    return true;
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) return false;
    *out = v.get<T>();
    return true;
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) return false;
    *out = v.get<std::string>();
    return true;
  } else {
    static_assert(std::is_same_v<T, std::vector<std::string>>, "json_field: unsupported type");
    if (!v.is_array()) return false;
    std::vector<std::string> items;
    items.reserve(v.size());
    for (const auto& item : v) {
      if (!item.is_string()) return false;
      items.push_back(item.get<std::string>());
    }
    *out = std::move(items);
    return true;
  }
}

// "a string", "an array", "the number -3", ...: what a peer sent instead.
inline std::string describe(const nlohmann::json& v) {
  if (v.is_number()) return "the number " + v.dump();
  if (v.is_null()) return "null";
  const std::string_view type = v.type_name();
  return fmt::format("{} {}", type == "object" || type == "array" ? "an" : "a", type);
}

template <typename T>
Status wrong_type(std::string_view name, const nlohmann::json& v) {
  return Status::InvalidArgument(
      fmt::format("'{}': {}, not {}", name, describe(v), type_name<T>()));
}

// The field, or nullptr when `j` has none; an error when `j` is no object.
inline Result<const nlohmann::json*> find(const nlohmann::json& j, std::string_view name) {
  if (!j.is_object()) {
    return Status::InvalidArgument(
        fmt::format("'{}': the message is {}, not an object", name, describe(j)));
  }
  const auto it = j.find(name);
  return it == j.end() ? nullptr : &*it;
}

}  // namespace json_detail

// Field `name` of object `j`, which must be there and be a T.
template <typename T>
[[nodiscard]] Result<T> json_field(const nlohmann::json& j, std::string_view name) {
  auto field = json_detail::find(j, name);
  if (!field.ok()) return field.status();
  if (*field == nullptr) return Status::InvalidArgument(fmt::format("'{}': missing", name));
  T value{};
  if (!json_detail::convert(**field, &value)) return json_detail::wrong_type<T>(name, **field);
  return value;
}

// Field `name` of object `j` into *out when it is there (absent or null: *out unchanged); a
// field of another type is an error.
template <typename T>
[[nodiscard]] Status json_optional_field(const nlohmann::json& j, std::string_view name, T* out) {
  auto field = json_detail::find(j, name);
  if (!field.ok()) return field.status();
  if (*field == nullptr || (*field)->is_null()) return Status::Ok();
  if (!json_detail::convert(**field, out)) return json_detail::wrong_type<T>(name, **field);
  return Status::Ok();
}

// Text a peer sent, parsed without throwing: InvalidArgument "`what`: not JSON" otherwise.
[[nodiscard]] inline Result<nlohmann::json> parse_peer_json(std::string_view text,
                                                            std::string_view what) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument(fmt::format("{}: not JSON", what));
  return j;
}

}  // namespace shoal
