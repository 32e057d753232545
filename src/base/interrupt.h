// Ctrl-C for long runs (`shoal bench`): the first SIGINT asks the run to stop early and still
// report what it measured; the second ends the process at once.
//
// The first SIGINT only sets a flag (interrupt_flag()) that the run polls; the handler writes
// one line to stderr so the user knows a report is coming. The second calls _exit(kExitInterrupted)
// from the handler: no destructors run, so children must be tied to this process by
// PR_SET_PDEATHSIG (the bench's shard servers and followers are) to be stopped with it, and
// temporary directories stay behind.
//
// Children the bench starts must not get the terminal's SIGINT themselves (Ctrl-C signals the
// whole foreground process group): they are put in process groups of their own
// (src/server/process.cc, bench/runner_repl.cc) so that the bench decides when they stop.
//
// Threads: install once from the main thread before starting others; the flag may be read
// from any thread (a lock-free atomic, also what makes it safe in a signal handler).
#pragma once

#include <atomic>

namespace shoal {

// The exit status of a run that was interrupted, by convention 128 + SIGINT: both after an
// interrupted run that still reported (first Ctrl-C) and when a second Ctrl-C ends it at once.
inline constexpr int kExitInterrupted = 130;

// Installs the SIGINT handler described above. `what_happens_next` is written to stderr on
// the first SIGINT (a string literal: it must outlive the process; the handler cannot format).
void install_interrupt_handler(const char* what_happens_next);

// Set by the first SIGINT after install_interrupt_handler(); never cleared.
const std::atomic<bool>& interrupt_flag();

}  // namespace shoal
