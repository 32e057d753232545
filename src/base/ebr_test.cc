#include "src/base/ebr.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace shoal::ebr {
namespace {

std::atomic<int> g_freed{0};

void count_free(void* p) {
  g_freed.fetch_add(1, std::memory_order_relaxed);
  delete static_cast<int*>(p);
}

// Every test starts and ends with nothing pending: the EBR state is process-wide.
class EbrTest : public ::testing::Test {
 protected:
  void SetUp() override {
    drain_all_for_tests();
    g_freed.store(0);
  }
  void TearDown() override {
    drain_all_for_tests();
    EXPECT_EQ(pending_count(), 0u);
  }
};

// Calls quiesce() until nothing is pending or the bound is hit; returns pending_count().
size_t quiesce_until_empty(int max_rounds = 1000) {
  for (int i = 0; i < max_rounds && pending_count() != 0; ++i) quiesce();
  return pending_count();
}

TEST_F(EbrTest, RetiredObjectsAreFreedEventually) {
  constexpr int kObjects = 1000;
  for (int i = 0; i < kObjects; ++i) retire(new int(i), &count_free);
  EXPECT_EQ(quiesce_until_empty(), 0u);
  EXPECT_EQ(g_freed.load(), kObjects);
}

TEST_F(EbrTest, RetireInsideGuardFreesAfterGuardEnds) {
  {
    Guard g;
    retire(new int(1), &count_free);
    for (int i = 0; i < 10; ++i) quiesce();
    EXPECT_EQ(g_freed.load(), 0);
  }
  EXPECT_EQ(quiesce_until_empty(), 0u);
  EXPECT_EQ(g_freed.load(), 1);
}

TEST_F(EbrTest, NestedGuardsCountDepth) {
  Guard outer;
  { Guard inner; }
  // The outer guard is still active: an object retired now must survive quiesce().
  retire(new int(1), &count_free);
  for (int i = 0; i < 10; ++i) quiesce();
  EXPECT_EQ(g_freed.load(), 0);
  EXPECT_EQ(pending_count(), 1u);
}

// Coroutine transactions on one thread end their guards in any order. Once the oldest guard
// ends, the thread must announce the younger one's epoch, so memory retired before that
// younger guard began is freed while it is still open (not only when every guard is gone).
TEST_F(EbrTest, GuardsEndingOutOfOrderLetReclamationProceed) {
  auto* older = new Guard;
  retire(new int(1), &count_free);
  for (int i = 0; i < 10; ++i) quiesce();  // the epoch moves at most one past `older`
  EXPECT_EQ(g_freed.load(), 0);
  auto* younger = new Guard;  // entered after the retirement's epoch
  delete older;
  EXPECT_EQ(quiesce_until_empty(), 0u) << "reclamation stuck behind a guard that ended";
  EXPECT_EQ(g_freed.load(), 1);
  // And the younger guard still protects what is retired while it is open.
  retire(new int(2), &count_free);
  for (int i = 0; i < 10; ++i) quiesce();
  EXPECT_EQ(g_freed.load(), 1);
  delete younger;
  EXPECT_EQ(quiesce_until_empty(), 0u);
  EXPECT_EQ(g_freed.load(), 2);
}

std::atomic<bool> g_flag_freed{false};
void flag_free(void* p) {
  g_flag_freed.store(true, std::memory_order_release);
  delete static_cast<int*>(p);
}

TEST_F(EbrTest, NotFreedWhileOtherThreadHoldsOlderGuard) {
  g_flag_freed.store(false);
  std::atomic<int> stage{0};
  std::thread reader([&] {
    Guard g;
    stage.store(1);
    while (stage.load() != 2) std::this_thread::yield();
  });
  while (stage.load() != 1) std::this_thread::yield();
  retire(new int(7), &flag_free);
  for (int i = 0; i < 200; ++i) {
    quiesce();
    ASSERT_FALSE(g_flag_freed.load()) << "freed while an older guard is held, round " << i;
  }
  stage.store(2);
  reader.join();
  EXPECT_EQ(quiesce_until_empty(), 0u);
  EXPECT_TRUE(g_flag_freed.load());
}

TEST_F(EbrTest, ExitedThreadsHandOverTheirLists) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 10;  // few enough that no thread frees on its own
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < kPerThread; ++i) retire(new int(i), &count_free);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(pending_count(), static_cast<size_t>(kThreads * kPerThread));
  EXPECT_EQ(quiesce_until_empty(), 0u);
  EXPECT_EQ(g_freed.load(), kThreads * kPerThread);
}

TEST_F(EbrTest, DrainFreesEverything) {
  for (int i = 0; i < 100; ++i) retire(new int(i), &count_free);
  drain_all_for_tests();
  EXPECT_EQ(pending_count(), 0u);
  EXPECT_EQ(g_freed.load(), 100);
}

void free_and_retire_another(void* p) {
  int* v = static_cast<int*>(p);
  if (*v > 0) retire(new int(*v - 1), &free_and_retire_another);
  g_freed.fetch_add(1, std::memory_order_relaxed);
  delete v;
}

TEST_F(EbrTest, FreeFunctionMayRetire) {
  retire(new int(5), &free_and_retire_another);
  EXPECT_EQ(quiesce_until_empty(), 0u);
  EXPECT_EQ(g_freed.load(), 6);
}

// Readers chase a shared pointer while a writer swaps and retires it. A premature free shows
// up as a dead magic value here, and as a use-after-free under TSan/ASan.
constexpr uint64_t kAlive = 0xA11CE;
constexpr uint64_t kDead = 0xDEAD;

struct Obj {
  std::atomic<uint64_t> magic{kAlive};
  uint64_t payload;
};

void free_obj(void* p) {
  Obj* o = static_cast<Obj*>(p);
  o->magic.store(kDead, std::memory_order_relaxed);
  delete o;
}

TEST_F(EbrTest, ConcurrentReadersAndRetiringWriterStress) {
  constexpr int kReaders = 3;
  constexpr int kSwaps = 20000;
  std::atomic<Obj*> shared{new Obj{kAlive, 0}};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> bad{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&] {
      for (uint64_t n = 0; !stop.load(std::memory_order_relaxed); ++n) {
        Guard g;
        Obj* o = shared.load(std::memory_order_acquire);
        for (int i = 0; i < 4; ++i) {
          if (o->magic.load(std::memory_order_relaxed) != kAlive) bad.fetch_add(1);
        }
        if (n % 64 == 0) quiesce();
      }
    });
  }
  for (int i = 1; i <= kSwaps; ++i) {
    Obj* fresh = new Obj{kAlive, static_cast<uint64_t>(i)};
    Obj* old = shared.exchange(fresh, std::memory_order_acq_rel);
    retire(old, &free_obj);
  }
  stop.store(true);
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_EQ(quiesce_until_empty(), 0u);
  free_obj(shared.load());
}

}  // namespace
}  // namespace shoal::ebr
