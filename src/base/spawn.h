// spawn_child: starts another program as a child without fork()'s copy-on-write marking of
// the caller's memory.
//
// Why: fork() write-protects every private page of the parent, so after the child has exec'd,
// the parent's first write to each page still takes a page fault (do_wp_page), one per 4 KiB.
// A replicated bench (bench/runner_repl.cc) forks its followers after loading TPC-C: its
// worker then faulted once on every page of the store it wrote during the run (perf: 7-12% of
// the worker's samples in native_set_pte under lock_write_set on this VM, where a page-table
// update is a hypervisor call), a cost the unreplicated run never pays. Here the child is a
// clone(CLONE_VM | CLONE_VFORK) on a stack of its own, as glibc's posix_spawn does: it
// shares the parent's memory until it execs, and the parent's page tables are left alone.
// posix_spawn itself cannot set PR_SET_PDEATHSIG, which the bench's children need.
//
// The child, before exec: signal handlers back to the default (it shares the parent's
// memory, so a handler must not run there), the parent's signal mask, optionally
// PR_SET_PDEATHSIG and a process group of its own, stdout and stderr to a log file. Only
// system calls, no allocation.
//
// Threads: any; the calling thread is suspended until the child has exec'd or exited.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "shoal/status.h"

namespace shoal {

struct SpawnOptions {
  // The child is sent SIGKILL when the calling thread's process dies (PR_SET_PDEATHSIG); if
  // the parent is already gone when the child starts, the child exits with status 1.
  bool die_with_parent = false;
  bool own_process_group = false;  // setpgid(0, 0): the terminal's Ctrl-C does not reach it
  std::string log_path;            // stdout and stderr (truncated); empty: inherited
};

// Starts argv[0] (a path) with argv; returns the child's pid. IOError if the child could
// not be created; a child that cannot exec exits with status 127.
// REQUIRES: argv is not empty.
[[nodiscard]] Result<pid_t> spawn_child(const std::vector<std::string>& argv,
                                        const SpawnOptions& options);

}  // namespace shoal
