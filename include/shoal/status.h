// Status and Result: the channel for expected failures (not found, aborted, bad input, I/O).
//
// Broken invariants never travel through here: they stop the process (src/base/assert.h).
// A Status without a message allocates nothing and is two words whose moves are pointer copies
// (its message, when it has one, lives behind a pointer), so the data path builds, moves and
// drops them freely; messages are for cold paths (configuration, command line, recovery).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "src/base/assert.h"

namespace shoal {

enum class Code : uint8_t {
  kOk = 0,
  kNotFound,
  kAlreadyExists,
  kAborted,          // a transaction lost a conflict; retrying may succeed
  kUserAbort,        // a stored procedure chose to roll back (TPC-C invalid item)
  kInvalidArgument,  // bad input from a user, a config or a peer
  kCorruption,       // bytes that fail a checksum or a format check
  kIOError,
  kUnavailable,      // a peer or resource is gone
  kTimeout,
  kNotSupported,
  kPermissionDenied,  // a credential is missing or wrong (the client port's password)
};
// The highest Code: a byte above it that crossed the wire is no Code.
inline constexpr Code kLastCode = Code::kPermissionDenied;

std::string_view code_name(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(const Status& other) : code_(other.code_), msg_(copy_message(other)) {}
  Status& operator=(const Status& other) {
    if (this != &other) {
      code_ = other.code_;
      msg_ = copy_message(other);
    }
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;
  static Status Ok() { return Status(); }
  static Status NotFound(std::string msg = {}) { return Status(Code::kNotFound, std::move(msg)); }
  static Status AlreadyExists(std::string msg = {}) {
    return Status(Code::kAlreadyExists, std::move(msg));
  }
  static Status Aborted(std::string msg = {}) { return Status(Code::kAborted, std::move(msg)); }
  static Status UserAbort(std::string msg = {}) { return Status(Code::kUserAbort, std::move(msg)); }
  static Status InvalidArgument(std::string msg) {
    return Status(Code::kInvalidArgument, std::move(msg));
  }
  static Status Corruption(std::string msg) { return Status(Code::kCorruption, std::move(msg)); }
  static Status IOError(std::string msg) { return Status(Code::kIOError, std::move(msg)); }
  static Status Unavailable(std::string msg) { return Status(Code::kUnavailable, std::move(msg)); }
  static Status Timeout(std::string msg) { return Status(Code::kTimeout, std::move(msg)); }
  static Status NotSupported(std::string msg) {
    return Status(Code::kNotSupported, std::move(msg));
  }
  static Status PermissionDenied(std::string msg) {
    return Status(Code::kPermissionDenied, std::move(msg));
  }

  bool ok() const { return code_ == Code::kOk; }
  bool is_not_found() const { return code_ == Code::kNotFound; }
  bool is_aborted() const { return code_ == Code::kAborted; }
  bool is_user_abort() const { return code_ == Code::kUserAbort; }
  Code code() const { return code_; }
  const std::string& message() const { return msg_ != nullptr ? *msg_ : empty_message(); }
  // "Aborted: lock conflict" style text for people.
  std::string to_string() const;

  // Marks a status as deliberately ignored.
  void ignore() const {}

 private:
  Status(Code code, std::string msg)
      : code_(code), msg_(msg.empty() ? nullptr : std::make_unique<std::string>(std::move(msg))) {}
  static std::unique_ptr<std::string> copy_message(const Status& s) {
    return s.msg_ != nullptr ? std::make_unique<std::string>(*s.msg_) : nullptr;
  }
  static const std::string& empty_message();

  Code code_ = Code::kOk;
  std::unique_ptr<std::string> msg_;  // null: no message
};

// Rebuilds a Status from a code that crossed the wire (an RPC reply, the client protocol):
// Corruption for a byte that is no Code.
[[nodiscard]] Status status_from_code(Code code, std::string msg);

// A value or the Status saying why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    SHOAL_ASSERT(!status_.ok(), "Result built from an ok Status without a value");
  }
  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  // REQUIRES: ok()
  T& value() & {
    SHOAL_ASSERT(ok(), "Result::value() on an error: %s", status_.to_string().c_str());
    return *value_;
  }
  const T& value() const& {
    SHOAL_ASSERT(ok(), "Result::value() on an error: %s", status_.to_string().c_str());
    return *value_;
  }
  T&& value() && {
    SHOAL_ASSERT(ok(), "Result::value() on an error: %s", status_.to_string().c_str());
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  T& operator*() { return value(); }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace shoal

// Returns early from the enclosing function when `expr` is not ok.
#define SHOAL_TRY(expr)                           \
  do {                                            \
    ::shoal::Status shoal_try_status_ = (expr);   \
    if (!shoal_try_status_.ok()) [[unlikely]]     \
      return shoal_try_status_;                   \
  } while (0)

// SHOAL_TRY for coroutines: co_returns early from the enclosing coroutine when `expr` is not ok.
#define SHOAL_CO_TRY(expr)                        \
  do {                                            \
    ::shoal::Status shoal_try_status_ = (expr);   \
    if (!shoal_try_status_.ok()) [[unlikely]]     \
      co_return shoal_try_status_;                \
  } while (0)
