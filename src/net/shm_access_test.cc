// What guards the shared-memory transport (shm_transport.h, "Access"): the rings' memfd is
// mode 0600 (seen through the mappings in /proc/self/map_files), for a listener's
// connections and for pair(); a process of another user can neither connect to a listener
// (the listener refuses it) nor be connected to (the dialer refuses a listener of another
// user). The other-user cases fork a child that drops to
// nobody (uid 65534), so they need root and are skipped otherwise.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "src/net/shm_transport.h"
#include "src/net/transport_test_util.h"

namespace shoal::net {
namespace shm_access_test {  // named, not anonymous: unique in a unity build

constexpr uid_t kNobody = 65534;

// The permission bits of every ring memfd this process has mapped (an endpoint closes its
// memfd once mapped: the mapping is what remains). False when /proc/self/map_files cannot be
// read (it needs CAP_SYS_ADMIN).
bool ring_memfd_modes(std::vector<mode_t>* modes) {
  DIR* dir = opendir("/proc/self/map_files");
  if (dir == nullptr) return false;
  bool readable = true;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const std::string path = std::string("/proc/self/map_files/") + e->d_name;
    char target[PATH_MAX];
    const ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
    if (n <= 0) {
      readable = false;
      break;
    }
    target[n] = '\0';
    if (std::string_view(target).starts_with("/memfd:shoal-shm")) {
      struct stat st {};
      if (stat(path.c_str(), &st) == 0) modes->push_back(st.st_mode & 07777);
    }
  }
  closedir(dir);
  return readable;
}

std::string unique_name(const char* what) {
  return fmt::format("shoal-shm-access-{}-{}", what, getpid());
}

// Forks a child that becomes nobody and runs fn; returns its exit code (-1: it did not exit).
template <typename Fn>
int as_nobody(Fn fn) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (setgid(kNobody) != 0 || setuid(kNobody) != 0) _exit(99);
    _exit(fn());
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

TEST(ShmAccess, RingMemfdIsTheOwnersAlone) {
  {
    auto pair = ShmEndpoint::pair();
    ASSERT_TRUE(pair.ok()) << pair.status().to_string();
    std::vector<mode_t> modes;
    if (!ring_memfd_modes(&modes)) GTEST_SKIP() << "/proc/self/map_files is not readable";
    ASSERT_GE(modes.size(), 2u);  // both ends' mappings of one memfd
    for (mode_t m : modes) EXPECT_EQ(m, 0600u) << std::oct << m;
  }
  const std::string name = unique_name("mode");
  auto listener = ShmListener::listen(name);
  ASSERT_TRUE(listener.ok()) << listener.status().to_string();
  Result<ShmEndpoint> dialed = Status::Unavailable("not yet");
  std::thread dialer([&] { dialed = ShmEndpoint::connect(name); });
  auto accepted = listener->accept();
  dialer.join();
  ASSERT_TRUE(accepted.ok()) << accepted.status().to_string();
  ASSERT_TRUE(dialed.ok()) << dialed.status().to_string();
  std::vector<mode_t> modes;
  ASSERT_TRUE(ring_memfd_modes(&modes));
  ASSERT_GE(modes.size(), 2u);  // the listener's and the dialer's mappings of one memfd
  for (mode_t m : modes) EXPECT_EQ(m, 0600u) << std::oct << m;
}

TEST(ShmAccess, ListenerRefusesAnotherUser) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a child as another user";
  const std::string name = unique_name("listener");
  auto listener = ShmListener::listen(name);
  ASSERT_TRUE(listener.ok()) << listener.status().to_string();
  Status accepted;
  std::thread acceptor([&] {
    auto e = listener->accept(10'000);
    accepted = e.ok() ? Status::Ok() : e.status();
  });
  // The child's connect() succeeds at the socket level; the listener then closes it unshared.
  const int child = as_nobody([&] { return ShmEndpoint::connect(name, {}, 5000).ok() ? 1 : 0; });
  acceptor.join();
  EXPECT_EQ(child, 0) << "the other user's connect got rings";
  EXPECT_EQ(accepted.code(), Code::kPermissionDenied) << accepted.to_string();
  EXPECT_NE(accepted.message().find(fmt::format("of uid {}", kNobody)), std::string::npos)
      << accepted.message();
}

TEST(ShmAccess, DialerRefusesAListenerOfAnotherUser) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a child as another user";
  const std::string name = unique_name("dialer");
  const pid_t pid = test_util::fork_squatter_as_nobody([&] { return ShmListener::listen(name); });
  ASSERT_GT(pid, 0) << "the squatter could not listen";
  auto dialed = ShmEndpoint::connect(name, {}, 5000);
  EXPECT_EQ(dialed.status().code(), Code::kPermissionDenied) << dialed.status().to_string();
  EXPECT_EQ(test_util::wait_child(pid), 0) << "the squatter got a connection with rings";
}

}  // namespace shm_access_test
}  // namespace shoal::net
