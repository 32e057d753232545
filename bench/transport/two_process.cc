#include "bench/transport/two_process.h"

#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "src/net/transport.h"

namespace shoal::bench::transport {

static_assert(sizeof(cpu_set_t) <= 128);

void pin_to_cpu(int cpu) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  // Best effort: a container may forbid a CPU; the numbers are then merely noisier.
  (void)sched_setaffinity(0, sizeof(set), &set);
}

AffinityGuard::AffinityGuard() {
  saved_ = sched_getaffinity(0, sizeof(cpu_set_t), reinterpret_cast<cpu_set_t*>(mask_)) == 0;
}

AffinityGuard::~AffinityGuard() {
  if (saved_) (void)sched_setaffinity(0, sizeof(cpu_set_t), reinterpret_cast<cpu_set_t*>(mask_));
}

pid_t fork_pinned_child() {
  std::fflush(nullptr);  // do not let the child inherit (and later repeat) buffered output
  const pid_t pid = fork();
  if (pid == 0) pin_to_cpu(1);
  return pid;
}

void exit_child(int code) {
  _exit(code);
}

Status reap_child(pid_t pid, uint64_t timeout_ns, const std::string& what) {
  const uint64_t deadline = net::mono_ns() + timeout_ns;
  int status = 0;
  for (;;) {  // bounded by the deadline
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0) return Status::IOError(fmt::format("{}: waitpid: {}", what, std::strerror(errno)));
    if (net::mono_ns() >= deadline) {
      kill(pid, SIGKILL);  // our own child, by pid
      waitpid(pid, &status, 0);
      return Status::Timeout(fmt::format("{}: server process did not finish", what));
    }
    usleep(1000);
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::Ok();
  return Status::IOError(fmt::format("{}: server process failed ({} {})", what,
                                     WIFEXITED(status) ? "exit code" : "signal",
                                     WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status)));
}

void* map_shared_bytes(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void unmap_shared_bytes(void* p, size_t bytes) {
  munmap(p, bytes);
}

}  // namespace shoal::bench::transport
