// The two-process harness of `shoal bench transport`: the server side runs in a fork()ed
// child pinned to CPU 1, the client side in this process pinned to CPU 0 (no pinning on a
// one-CPU machine). The child reports through its exit code only (0: ok); it never returns
// into the caller's code and ends with _exit, so it runs no atexit handlers of the parent.
//
// Contract of run_two_processes(server, client):
//   - server() runs in the child and returns its exit code; client() runs here and returns a
//     Status. The child must end on its own once the client is done (e.g. when it sees the
//     client's endpoint close): after the client returns it gets kChildGraceNs, then it is
//     killed (by its pid) and the run fails.
//   - This process's CPU affinity is restored before returning.
// Threads: call from a process with no other threads (fork() copies only the caller).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "shoal/status.h"

namespace shoal::bench::transport {

inline constexpr uint64_t kChildGraceNs = 10'000'000'000;

// Pins the calling thread to `cpu` when the machine has at least two CPUs.
void pin_to_cpu(int cpu);

// Saves the caller's affinity mask and restores it on destruction.
class AffinityGuard {
 public:
  AffinityGuard();
  ~AffinityGuard();
  AffinityGuard(const AffinityGuard&) = delete;
  AffinityGuard& operator=(const AffinityGuard&) = delete;

 private:
  bool saved_ = false;
  alignas(8) unsigned char mask_[128] = {};  // a cpu_set_t, kept opaque to spare the include
};

// Waits for child `pid` up to timeout_ns, then kills it. Ok when it exited with 0.
[[nodiscard]] Status reap_child(pid_t pid, uint64_t timeout_ns, const std::string& what);

// fork()s a process that is torn down on every path; see the file comment.
template <typename Server, typename Client>
[[nodiscard]] Status run_two_processes(const std::string& what, Server server, Client client);

// Anonymous shared memory that survives fork(): one object of type T visible to both sides.
// T must be trivially destructible (the mapping is just unmapped).
template <typename T>
class Shared {
 public:
  Shared();
  ~Shared();
  Shared(const Shared&) = delete;
  Shared& operator=(const Shared&) = delete;
  bool ok() const { return object_ != nullptr; }
  T* get() const { return object_; }
  T* operator->() const { return object_; }

 private:
  T* object_ = nullptr;
};

// ---- implementation

pid_t fork_pinned_child();  // fork(); the child is pinned to CPU 1. -1 on failure.
void* map_shared_bytes(size_t bytes);
void unmap_shared_bytes(void* p, size_t bytes);
[[noreturn]] void exit_child(int code);

template <typename Server, typename Client>
Status run_two_processes(const std::string& what, Server server, Client client) {
  AffinityGuard affinity;
  const pid_t pid = fork_pinned_child();
  if (pid < 0) return Status::IOError(fmt::format("{}: fork failed", what));
  if (pid == 0) exit_child(server());
  pin_to_cpu(0);
  Status client_status = client();
  Status child_status = reap_child(pid, kChildGraceNs, what);
  if (!client_status.ok()) return client_status;
  return child_status;
}

template <typename T>
Shared<T>::Shared() {
  static_assert(std::is_trivially_destructible_v<T>);
  void* p = map_shared_bytes(sizeof(T));
  if (p != nullptr) object_ = new (p) T();
}

template <typename T>
Shared<T>::~Shared() {
  if (object_ != nullptr) unmap_shared_bytes(object_, sizeof(T));
}

}  // namespace shoal::bench::transport
