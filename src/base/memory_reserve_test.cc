#include "src/base/memory_reserve.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

namespace shoal {
namespace {

TEST(MemoryReserve, ZeroBytesIsRefused) {
  auto m = map_prefaulted_memory(0);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kInvalidArgument);
}

TEST(MemoryReserve, MoreThanTheMachineHasAvailableIsRefused) {
  const uint64_t available = available_memory_bytes();
  ASSERT_GT(available, 0u) << "/proc/meminfo has no MemAvailable";
  auto m = map_prefaulted_memory(available + (uint64_t{1} << 30));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kInvalidArgument);
  EXPECT_NE(m.status().to_string().find("MiB this machine has available"), std::string::npos)
      << m.status().to_string();
}

// Processes started together each see the memory free before any of them took its reserve:
// the parent asks for all of them at once.
TEST(MemoryReserve, ReservesOfSeveralProcessesMustFitTogether) {
  const uint64_t available = available_memory_bytes();
  ASSERT_GT(available, 0u);
  const uint64_t each = available / 2 + kMemoryReserveUnitBytes;  // one fits, two do not
  EXPECT_TRUE(check_memory_reserves_fit(each, 1).ok());
  const Status two = check_memory_reserves_fit(each, 2);
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.code(), Code::kInvalidArgument);
  EXPECT_NE(two.to_string().find("2 memory reserves of"), std::string::npos) << two.to_string();
  auto m = map_prefaulted_memory(each, 2);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kInvalidArgument);
}

// Every page of the reserve is resident before the call returns (a later first touch would
// be the cost the reserve exists to move), and the reserve is whole aligned units.
TEST(MemoryReserve, IsRoundedUpAlignedAndResidentOnReturn) {
  auto m = map_prefaulted_memory(3 << 20);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->bytes, kMemoryReserveUnitBytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(m->start) % kMemoryReserveUnitBytes, 0u);
  const auto page_bytes = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident(m->bytes / page_bytes);
  ASSERT_EQ(::mincore(m->start, m->bytes, resident.data()), 0);
  uint64_t missing = 0;
  for (unsigned char r : resident) missing += (r & 1) == 0 ? 1 : 0;
  EXPECT_EQ(missing, 0u) << "of " << resident.size() << " pages";
  // Zeroed and writable, as an allocator expects fresh memory to be.
  auto* bytes = static_cast<unsigned char*>(m->start);
  EXPECT_EQ(bytes[0], 0);
  EXPECT_EQ(bytes[m->bytes - 1], 0);
  bytes[m->bytes - 1] = 7;
  EXPECT_EQ(bytes[m->bytes - 1], 7);
  ::munmap(m->start, m->bytes);
}

}  // namespace
}  // namespace shoal
