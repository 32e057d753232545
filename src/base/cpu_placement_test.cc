#include "src/base/cpu_placement.h"

#include <sched.h>

#include <thread>

#include <gtest/gtest.h>

namespace shoal {
namespace {

TEST(CpuPlacement, WorkersTakeTheFirstCpusAndTheRestGoToOtherThreads) {
  const std::vector<int> allowed = {0, 1, 2, 3};
  const CpuPlacement p = plan_cpu_placement(allowed, 1);
  ASSERT_TRUE(p.pinned());
  EXPECT_EQ(p.worker_cpus, (std::vector<int>{0}));
  EXPECT_EQ(p.other_cpus, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(p.describe(), "worker on cpu 0; other threads on cpu 1-3");

  const CpuPlacement two = plan_cpu_placement(allowed, 3);
  EXPECT_EQ(two.worker_cpus, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(two.other_cpus, (std::vector<int>{3}));
  EXPECT_EQ(two.describe(), "workers on cpu 0-2; other threads on cpu 3");
}

TEST(CpuPlacement, PlansOverThisThreadsCpusOrNotAtAll) {
  auto allowed = allowed_cpus();
  ASSERT_TRUE(allowed.ok());
  auto none = plan_cpu_placement_here("none", 1);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->pinned());
  EXPECT_EQ(none->describe(), "nothing pinned: --cpu-placement none");
  auto bad = plan_cpu_placement_here("pinned", 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'pinned' is not auto or none"), std::string::npos);
  auto automatic = plan_cpu_placement_here("auto", 1);
  ASSERT_TRUE(automatic.ok());
  EXPECT_EQ(automatic->pinned(), allowed->size() > 1);
  if (automatic->pinned()) {
    EXPECT_EQ(automatic->usable_cpus, *allowed);
  }
}

TEST(CpuPlacement, RespectsAnAffinityMaskWithHoles) {
  const std::vector<int> allowed = {2, 3, 6};  // e.g. under `taskset -c 2,3,6`
  const CpuPlacement p = plan_cpu_placement(allowed, 1);
  EXPECT_EQ(p.worker_cpus, (std::vector<int>{2}));
  EXPECT_EQ(p.other_cpus, (std::vector<int>{3, 6}));
  EXPECT_EQ(p.usable_cpus, allowed);
}

TEST(CpuPlacement, PinsNothingWhenNoCpuIsLeftForTheOtherThreads) {
  const std::vector<int> allowed = {0, 1};
  for (uint32_t workers : {2u, 3u}) {
    const CpuPlacement p = plan_cpu_placement(allowed, workers);
    EXPECT_FALSE(p.pinned());
    EXPECT_TRUE(p.other_cpus.empty());
    EXPECT_NE(p.describe().find("none left for the other threads"), std::string::npos)
        << p.describe();
  }
  EXPECT_FALSE(plan_cpu_placement(std::vector<int>{5}, 1).pinned());
}

TEST(CpuPlacement, FormatsCpuListsAsRanges) {
  EXPECT_EQ(format_cpu_list(std::vector<int>{}), "");
  EXPECT_EQ(format_cpu_list(std::vector<int>{4}), "4");
  EXPECT_EQ(format_cpu_list(std::vector<int>{0, 1, 2, 3, 6, 8, 9}), "0-3,6,8-9");
}

TEST(CpuPlacement, ParsesWhatItFormats) {
  for (const std::vector<int>& cpus : {std::vector<int>{0}, std::vector<int>{0, 1, 2, 3, 6},
                                       std::vector<int>{1, 3, 5, 6, 7, 12}}) {
    auto parsed = parse_cpu_list(format_cpu_list(cpus), "--cpus");
    ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
    EXPECT_EQ(*parsed, cpus);
  }
}

TEST(CpuPlacement, RefusesMalformedCpuLists) {
  for (const char* text : {"", ",", "1,", "a", "1-", "-1", "3-1", "1,1", "2,1", "1;2", "99999"}) {
    auto parsed = parse_cpu_list(text, "--cpus");
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.status().code(), Code::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("--cpus '"), std::string::npos)
        << parsed.status().message();
  }
}

// Applies placements to real threads and reads them back; restores the mask afterwards.
TEST(CpuPlacement, PinAndConfineChangeTheThreadsAffinity) {
  auto before = allowed_cpus();
  ASSERT_TRUE(before.ok());
  const std::vector<int> all = *before;
  ASSERT_FALSE(all.empty());
  const int target = all.back();

  std::thread t([&] {
    ASSERT_TRUE(pin_current_thread(target).ok());
    auto now = allowed_cpus();
    ASSERT_TRUE(now.ok());
    EXPECT_EQ(*now, std::vector<int>{target});
  });
  t.join();

  const std::vector<int> one = {target};
  ASSERT_TRUE(confine_threads(0, one).ok());
  auto confined = allowed_cpus();
  ASSERT_TRUE(confined.ok());
  EXPECT_EQ(*confined, one);
  // A thread started now inherits the confinement.
  std::thread child([&] {
    auto inherited = allowed_cpus();
    ASSERT_TRUE(inherited.ok());
    EXPECT_EQ(*inherited, one);
  });
  child.join();
  ASSERT_TRUE(confine_threads(0, all).ok());
  auto restored = allowed_cpus();
  ASSERT_TRUE(restored.ok());
  EXPECT_EQ(*restored, all);
}

TEST(CpuPlacement, RefusesAProcessThatDoesNotExist) {
  const std::vector<int> cpus = {0};
  const Status s = confine_threads(0x3fffffff, cpus);
  EXPECT_TRUE(s.is_not_found()) << s.to_string();
  EXPECT_NE(s.message().find("no process"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace shoal
