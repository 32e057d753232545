#include "src/base/spawn.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "src/base/assert.h"

namespace shoal {
namespace {

// What the child reads, prepared by the parent: the child only makes system calls.
struct ChildPlan {
  const char* path;
  char* const* argv;
  const char* log_path;  // nullptr: inherited
  bool die_with_parent;
  bool own_process_group;
  pid_t parent;
  sigset_t parent_mask;
};

// The child's first and only function, on its own stack, in the parent's memory.
int child_main(void* arg) {
  const auto* plan = static_cast<const ChildPlan*>(arg);
  // Handlers are the parent's code on the parent's data: none may run here. (The child has
  // its own handler table: no CLONE_SIGHAND.)
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction sa {};
    if (::sigaction(sig, nullptr, &sa) != 0) continue;  // SIGKILL, SIGSTOP, glibc's own
    if (sa.sa_handler == SIG_IGN || sa.sa_handler == SIG_DFL) continue;
    sa = {};
    sa.sa_handler = SIG_DFL;
    (void)::sigaction(sig, &sa, nullptr);
  }
  ::sigprocmask(SIG_SETMASK, &plan->parent_mask, nullptr);
  if (plan->die_with_parent) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != plan->parent) ::_exit(1);  // the parent died before the prctl
  }
  if (plan->own_process_group) ::setpgid(0, 0);
  if (plan->log_path != nullptr) {
    const int fd = ::open(plan->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
  }
  ::execv(plan->path, plan->argv);
  ::_exit(127);
}

constexpr size_t kChildStackBytes = 64 * 1024;

}  // namespace

Result<pid_t> spawn_child(const std::vector<std::string>& argv, const SpawnOptions& options) {
  SHOAL_ASSERT(!argv.empty(), "%s", "spawn_child without a program");
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ChildPlan plan{argv[0].c_str(),
                 args.data(),
                 options.log_path.empty() ? nullptr : options.log_path.c_str(),
                 options.die_with_parent,
                 options.own_process_group,
                 ::getpid(),
                 {}};
  void* stack = ::mmap(nullptr, kChildStackBytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) {
    return Status::IOError(fmt::format("spawn {}: no stack: {}", argv[0], std::strerror(errno)));
  }
  // No signal may reach the child before it reset the handlers.
  sigset_t all;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, &plan.parent_mask);
  // CLONE_VFORK: we resume once the child exec'd or exited, so the plan and the stack stay
  // valid for as long as it uses them.
  const pid_t pid = ::clone(&child_main, static_cast<char*>(stack) + kChildStackBytes,
                            CLONE_VM | CLONE_VFORK | SIGCHLD, &plan);
  const int clone_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &plan.parent_mask, nullptr);
  ::munmap(stack, kChildStackBytes);
  if (pid < 0) {
    return Status::IOError(fmt::format("spawn {}: {}", argv[0], std::strerror(clone_errno)));
  }
  return pid;
}

}  // namespace shoal
