#include "src/base/cpu_placement.h"

#include <pthread.h>
#include <sched.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

namespace shoal {

namespace {

cpu_set_t make_set(std::span<const int> cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    SHOAL_ASSERT(c >= 0 && c < CPU_SETSIZE, "cpu %d out of range", c);
    CPU_SET(c, &set);
  }
  return set;
}

}  // namespace

std::string format_cpu_list(std::span<const int> cpus) {
  std::string out;
  size_t i = 0;
  // Bounded: each pass consumes one run of consecutive CPUs.
  while (i < cpus.size()) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return out;
}

Result<std::vector<int>> parse_cpu_list(std::string_view text, std::string_view what) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument(
        fmt::format("{} '{}': {} (a cpu list is like 0-3,6)", what, text, why));
  };
  std::vector<int> cpus;
  size_t i = 0;
  // Bounded: each pass consumes one item and its comma.
  while (i < text.size()) {
    int range[2] = {-1, -1};
    for (int part = 0; part < 2; ++part) {
      int v = 0;
      size_t digits = 0;
      while (i < text.size() && text[i] >= '0' && text[i] <= '9' && digits < 5) {
        v = v * 10 + (text[i++] - '0');
        ++digits;
      }
      if (digits == 0 || v >= CPU_SETSIZE) return bad("not a cpu number");
      range[part] = v;
      if (part == 0 && (i == text.size() || text[i] != '-')) break;
      if (part == 0) ++i;  // the '-'
    }
    const int hi = range[1] < 0 ? range[0] : range[1];
    if (hi < range[0]) return bad("a range runs downwards");
    for (int c = range[0]; c <= hi; ++c) {
      if (!cpus.empty() && c <= cpus.back()) return bad("not ascending without repeats");
      cpus.push_back(c);
    }
    if (i < text.size() && text[i++] != ',') return bad("unexpected character");
    if (i == text.size() && text.back() == ',') return bad("ends with a comma");
  }
  if (cpus.empty()) return bad("empty");
  return cpus;
}

std::string CpuPlacement::describe() const {
  if (!pinned()) return "nothing pinned: " + reason;
  return fmt::format("worker{} on cpu {}; other threads on cpu {}",
                     worker_cpus.size() == 1 ? "" : "s", format_cpu_list(worker_cpus),
                     format_cpu_list(other_cpus));
}

CpuPlacement plan_cpu_placement(std::span<const int> allowed, uint32_t workers) {
  SHOAL_ASSERT(workers >= 1, "a placement for no worker");
  CpuPlacement p;
  if (workers >= allowed.size()) {
    p.reason =
        fmt::format("{} worker{} and {} usable cpu{}, none left for the other threads", workers,
                    workers == 1 ? "" : "s", allowed.size(), allowed.size() == 1 ? "" : "s");
    return p;
  }
  p.usable_cpus.assign(allowed.begin(), allowed.end());
  p.worker_cpus.assign(allowed.begin(), allowed.begin() + workers);
  p.other_cpus.assign(allowed.begin() + workers, allowed.end());
  return p;
}

Result<std::vector<int>> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) {
    return Status::IOError(fmt::format("sched_getaffinity: {}", std::strerror(errno)));
  }
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

Result<CpuPlacement> plan_cpu_placement_here(std::string_view mode, uint32_t workers) {
  if (mode == "none") {
    CpuPlacement none;
    none.reason = "--cpu-placement none";
    return none;
  }
  if (mode != "auto") {
    return Status::InvalidArgument(fmt::format("--cpu-placement: '{}' is not auto or none", mode));
  }
  auto allowed = allowed_cpus();
  if (!allowed.ok()) return allowed.status();
  return plan_cpu_placement(*allowed, workers);
}

void pin_worker_thread(int cpu, std::string_view who) {
  if (cpu < 0) return;
  const Status pinned = pin_current_thread(cpu);
  if (!pinned.ok()) fmt::print(stderr, "{} runs unpinned: {}\n", who, pinned.to_string());
}

Status pin_current_thread(int cpu) {
  const int one[] = {cpu};
  const cpu_set_t set = make_set(one);
  const int rc = ::pthread_setaffinity_np(::pthread_self(), sizeof(set), &set);
  if (rc != 0) {
    return Status::IOError(
        fmt::format("cannot pin a thread to cpu {}: {}", cpu, std::strerror(rc)));
  }
  return Status::Ok();
}

Status confine_threads(pid_t pid, std::span<const int> cpus) {
  SHOAL_ASSERT(!cpus.empty(), "confine_threads to no cpu");
  const cpu_set_t set = make_set(cpus);
  const std::string dir = pid == 0 ? "/proc/self/task" : fmt::format("/proc/{}/task", pid);
  // Two passes: a thread created during the first, by a thread not yet confined, inherited
  // the old mask; the second pass catches it (the processes here start their threads early
  // and none is starting threads at this point).
  for (int pass = 0; pass < 2; ++pass) {
    std::error_code ec;
    std::filesystem::directory_iterator it(dir, ec);
    // Bounded: a process has finitely many threads; increment(ec) never throws, and a process
    // reaped while listed ends the listing with ENOENT.
    for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      const pid_t tid = static_cast<pid_t>(std::stol(it->path().filename().string()));
      if (::sched_setaffinity(tid, sizeof(set), &set) != 0) {
        const int err = errno;       // before anything below can overwrite it
        if (err == ESRCH) continue;  // the thread exited meanwhile
        return Status::IOError(fmt::format("cannot confine thread {} of {} to cpu {}: {}", tid, dir,
                                           format_cpu_list(cpus), std::strerror(err)));
      }
    }
    if (ec == std::errc::no_such_file_or_directory) {
      return Status::NotFound(fmt::format("no process {} ({} is missing)", pid, dir));
    }
    if (ec) return Status::IOError(fmt::format("cannot list {}: {}", dir, ec.message()));
  }
  return Status::Ok();
}

}  // namespace shoal
