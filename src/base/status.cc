#include "shoal/status.h"

#include <cstdarg>

namespace shoal {

std::string_view code_name(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kNotFound: return "NotFound";
    case Code::kAlreadyExists: return "AlreadyExists";
    case Code::kAborted: return "Aborted";
    case Code::kUserAbort: return "UserAbort";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kCorruption: return "Corruption";
    case Code::kIOError: return "IOError";
    case Code::kUnavailable: return "Unavailable";
    case Code::kTimeout: return "Timeout";
    case Code::kNotSupported: return "NotSupported";
    case Code::kPermissionDenied: return "PermissionDenied";
  }
  return "Unknown";
}

std::string Status::to_string() const {
  std::string out(code_name(code_));
  if (msg_ != nullptr) {
    out += ": ";
    out += *msg_;
  }
  return out;
}

const std::string& Status::empty_message() {
  static const std::string empty;
  return empty;
}

namespace detail {
void assert_fail(const char* cond, const char* file, int line, const char* fmt, ...) {
  std::fprintf(stderr, "shoal: assertion failed at %s:%d: %s", file, line, cond);
  if (fmt != nullptr && fmt[0] != '\0') {
    std::fputs(": ", stderr);
    va_list args;
    va_start(args, fmt);
    std::vfprintf(stderr, fmt, args);
    va_end(args);
  }
  std::fputc('\n', stderr);
  std::fflush(stderr);
  std::abort();
}
}  // namespace detail

Status status_from_code(Code code, std::string msg) {
  switch (code) {
    case Code::kOk:
      return Status::Ok();
    case Code::kNotFound:
      return Status::NotFound(std::move(msg));
    case Code::kAlreadyExists:
      return Status::AlreadyExists(std::move(msg));
    case Code::kAborted:
      return Status::Aborted(std::move(msg));
    case Code::kUserAbort:
      return Status::UserAbort(std::move(msg));
    case Code::kInvalidArgument:
      return Status::InvalidArgument(std::move(msg));
    case Code::kCorruption:
      return Status::Corruption(std::move(msg));
    case Code::kIOError:
      return Status::IOError(std::move(msg));
    case Code::kUnavailable:
      return Status::Unavailable(std::move(msg));
    case Code::kTimeout:
      return Status::Timeout(std::move(msg));
    case Code::kNotSupported:
      return Status::NotSupported(std::move(msg));
    case Code::kPermissionDenied:
      return Status::PermissionDenied(std::move(msg));
  }
  return Status::Corruption("unknown status code");
}

}  // namespace shoal
