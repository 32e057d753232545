#include "src/base/interrupt.h"

#include <signal.h>
#include <unistd.h>

#include <cstring>

namespace shoal {
namespace {

std::atomic<bool> g_interrupted{false};
std::atomic<int> g_sigints{0};
const char* g_first_message = "";

static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free,
              "the SIGINT handler may only touch lock-free atomics");

// Async-signal-safe: atomics, write(2) and _exit(2) only.
void write_stderr(const char* text) {
  size_t left = std::strlen(text);
  // Bounded: each pass writes at least one byte or gives up (the message is only a courtesy).
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, text, left);
    if (n <= 0) return;
    text += n;
    left -= static_cast<size_t>(n);
  }
}

void on_sigint(int) {
  if (g_sigints.fetch_add(1) == 0) {
    g_interrupted.store(true);
    write_stderr(g_first_message);
    return;
  }
  write_stderr("\nshoal: interrupted again: exiting now\n");
  ::_exit(kExitInterrupted);
}

}  // namespace

void install_interrupt_handler(const char* what_happens_next) {
  g_first_message = what_happens_next;
  struct sigaction sa {};
  sa.sa_handler = &on_sigint;
  sigemptyset(&sa.sa_mask);
  // SA_RESTART: a sleep or read in the run is not cut short with EINTR, the run polls the flag.
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
}

const std::atomic<bool>& interrupt_flag() {
  return g_interrupted;
}

}  // namespace shoal
