// CPU placement: worker threads own cores, everything else shares the cores left over.
//
// Why: a worker runs transactions back to back and is the throughput of its stream. On a
// machine where it shares cores with the replication threads and with follower processes
// (every `shoal bench --replicas R` run, where all replicas live on one host), the scheduler
// preempts it to run them, moves it between cores and lets them trash its L1/L2; measured on
// this project's 2-vCPU VM, the worker's time per TPC-C transaction rose from 8.0 us alone to
// 11.0 us beside two followers (docs/REPLICATION.md, "The WAL leaves the page cache; workers
// own their cores"). Silo, eRPC and Mako pin
// their workers for the same reason.
//
// The plan is pure (plan_cpu_placement) so its rules are tested without touching the process;
// applying it is two calls: confine_threads() for every thread that is not a worker (of this
// process and of child processes), pin_current_thread() inside each worker.
//
// Rule: with W workers and C usable CPUs (the calling thread's affinity mask, so `taskset`
// and cgroups are respected), W < C pins worker i to the i-th usable CPU and gives the other
// C - W CPUs to everything else. W >= C pins nothing: with no core left over the other threads
// would have to preempt a worker anyway, and the scheduler balances better unpinned.
//
// Threads: plain functions; each acts on the threads it names.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/status.h"

namespace shoal {

struct CpuPlacement {
  std::vector<int> usable_cpus;  // the plan's input: every cpu the caller may use
  std::vector<int> worker_cpus;  // worker i on worker_cpus[i]; empty: nothing is pinned
  std::vector<int> other_cpus;   // every thread that is not a worker; empty when unpinned
  std::string reason;            // why nothing is pinned (empty when pinned)

  bool pinned() const { return !worker_cpus.empty(); }
  // One line for the operator, e.g. "workers on cpu 0; other threads on cpu 1-3".
  std::string describe() const;
};

// REQUIRES: allowed holds distinct CPU numbers; workers >= 1.
CpuPlacement plan_cpu_placement(std::span<const int> allowed, uint32_t workers);

// The CPUs the calling thread may run on, ascending.
[[nodiscard]] Result<std::vector<int>> allowed_cpus();

// A `--cpu-placement` mode applied: "auto" plans over allowed_cpus(), "none" pins nothing
// (reason "--cpu-placement none"); InvalidArgument for any other mode.
[[nodiscard]] Result<CpuPlacement> plan_cpu_placement_here(std::string_view mode, uint32_t workers);

// Pins the calling thread to one CPU.
[[nodiscard]] Status pin_current_thread(int cpu);
// A worker thread's start: pins it to `cpu` (< 0: nothing to do); a failure is not fatal, the
// worker runs unpinned and "<who> runs unpinned: <why>" goes to stderr.
void pin_worker_thread(int cpu, std::string_view who);

// Sets the affinity of every thread of process `pid` (0: this process) to `cpus`. Threads it
// creates afterwards inherit the mask of their creator, hence the same set. A thread that
// exits meanwhile is skipped; NotFound when the process does not exist (any more).
// REQUIRES: cpus not empty.
[[nodiscard]] Status confine_threads(pid_t pid, std::span<const int> cpus);

// "0-3,6" for {0, 1, 2, 3, 6}.
std::string format_cpu_list(std::span<const int> cpus);
// The inverse: a list of CPU numbers and ranges ("0-3,6"), ascending and without repeats.
// InvalidArgument naming `what` (a flag) on anything else, an empty list included.
[[nodiscard]] Result<std::vector<int>> parse_cpu_list(std::string_view text, std::string_view what);

}  // namespace shoal
