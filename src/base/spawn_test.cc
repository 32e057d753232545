#include "src/base/spawn.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace shoal {
namespace spawn_test {

int wait_status(pid_t pid) {
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string temp_log() {
  return testing::TempDir() + "spawn_test_" + std::to_string(::getpid()) + ".log";
}

TEST(SpawnChild, RunsTheProgramWithItsOutputInTheLog) {
  const std::string log = temp_log();
  auto pid = spawn_child({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"},
                         {.die_with_parent = true, .own_process_group = true, .log_path = log});
  ASSERT_TRUE(pid.ok()) << pid.status().to_string();
  EXPECT_EQ(wait_status(*pid), 3);
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "out\nerr\n");
  std::remove(log.c_str());
}

TEST(SpawnChild, AProgramThatCannotRunExitsWith127) {
  auto pid = spawn_child({"/nonexistent/program"}, {});
  ASSERT_TRUE(pid.ok()) << pid.status().to_string();
  EXPECT_EQ(wait_status(*pid), 127);
}

TEST(SpawnChild, TheChildGetsItsOwnProcessGroup) {
  auto pid = spawn_child({"/bin/sh", "-c", "sleep 0.2"},
                         {.die_with_parent = false, .own_process_group = true, .log_path = ""});
  ASSERT_TRUE(pid.ok());
  // The child may not have run setpgid yet only if clone returned early: CLONE_VFORK waits
  // for its exec, which comes after.
  EXPECT_EQ(::getpgid(*pid), *pid);
  EXPECT_EQ(wait_status(*pid), 0);
}

// Page faults of this thread while it writes one byte in each page of `pages`.
long faults_rewriting(std::span<char> pages) {
  rusage before{}, after{};
  ::getrusage(RUSAGE_THREAD, &before);
  for (size_t i = 0; i < pages.size(); i += 4096) pages[i] = static_cast<char>(pages[i] + 1);
  ::getrusage(RUSAGE_THREAD, &after);
  return after.ru_minflt - before.ru_minflt;
}

// Why spawn_child exists: fork() write-protects the parent's pages, so writing them
// afterwards faults once per page even after the child exec'd; spawn_child leaves them alone.
TEST(SpawnChild, LeavesTheParentsPagesWritableWhereForkDoesNot) {
  constexpr size_t kPages = 4096;
  // Small pages (a huge page would fault once per 2 MiB), every one touched: mapped, writable.
  void* mem =
      ::mmap(nullptr, kPages * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  (void)::madvise(mem, kPages * 4096, MADV_NOHUGEPAGE);
  std::span<char> pages(static_cast<char*>(mem), kPages * 4096);
  std::memset(pages.data(), 1, pages.size());
  ASSERT_LT(faults_rewriting(pages), static_cast<long>(kPages / 8));

  auto pid = spawn_child({"/bin/true"}, {});
  ASSERT_TRUE(pid.ok());
  EXPECT_EQ(wait_status(*pid), 0);
  EXPECT_LT(faults_rewriting(pages), static_cast<long>(kPages / 8));

  const pid_t forked = ::fork();  // the control: what the bench used to do
  ASSERT_GE(forked, 0);
  if (forked == 0) {
    ::execl("/bin/true", "true", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  EXPECT_EQ(wait_status(forked), 0);
  EXPECT_GT(faults_rewriting(pages), static_cast<long>(kPages / 2));
  ::munmap(mem, kPages * 4096);
}

}  // namespace spawn_test
}  // namespace shoal
