// The process-wide pool of File::write's small copies (src/detail/small_copy_pool.hpp): two
// sizes, reused from free lists, safe from many threads. That File::write takes its small copies
// here, not from the program's allocator, is checked by controller_alloc_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "src/detail/small_copy_pool.hpp"

namespace {

using tai::detail::AlignedBuffer;
using tai::detail::SmallCopyPool;

// Skips the calling test where the build takes every copy from the allocator (AddressSanitizer,
// so that a use after free of a copy is still caught).
#define SKIP_WITHOUT_POOL()                                                                          \
  do {                                                                                               \
    AlignedBuffer probe = SmallCopyPool::instance().take(1);                                         \
    if (!SmallCopyPool::owns(probe))                                                                 \
      GTEST_SKIP() << "this build takes small copies from the allocator (AddressSanitizer, or no "  \
                      "memory for the pool)";                                                        \
  } while (0)

TEST(SmallCopyPool, CopiesComeInTwoSizesAlignedForTheCopy) {
  SmallCopyPool& pool = SmallCopyPool::instance();
  for (std::size_t n : {std::size_t{1}, std::size_t{512}, std::size_t{4096}}) {
    AlignedBuffer b = pool.take(n);
    ASSERT_FALSE(b.empty());
    EXPECT_EQ(b.size(), SmallCopyPool::kSmallBytes) << n;
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % 64, 0u) << n;
    std::memset(b.data(), 0x5a, b.size());  // the whole class is usable
  }
  for (std::size_t n : {std::size_t{4097}, std::size_t{11000}, SmallCopyPool::kLargeBytes}) {
    AlignedBuffer b = pool.take(n);
    ASSERT_FALSE(b.empty());
    EXPECT_EQ(b.size(), SmallCopyPool::kLargeBytes) << n;
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % 64, 0u) << n;
    std::memset(b.data(), 0xa5, b.size());
  }
}

TEST(SmallCopyPool, FreedCopiesAreTakenAgainBeforeAnyNewMemory) {
  SKIP_WITHOUT_POOL();
  SmallCopyPool& pool = SmallCopyPool::instance();
  for (std::size_t n : {SmallCopyPool::kSmallBytes, SmallCopyPool::kLargeBytes}) {
    std::vector<AlignedBuffer> first;
    std::set<const std::byte*> addresses;
    for (int i = 0; i < 300; ++i) {  // more than one 2 MiB chunk of the large class
      first.push_back(pool.take(n));
      ASSERT_TRUE(SmallCopyPool::owns(first.back()));
      addresses.insert(first.back().data());
    }
    ASSERT_EQ(addresses.size(), first.size()) << "two live copies share memory";
    const std::uint64_t mapped = pool.mapped_bytes();
    first.clear();  // every copy back to the free list
    EXPECT_GE(pool.free_bytes(), 300 * n);
    std::vector<AlignedBuffer> second;
    for (int i = 0; i < 300; ++i) {
      second.push_back(pool.take(n));
      EXPECT_EQ(addresses.count(second.back().data()), 1u) << "copy " << i << " is new memory, not a freed copy";
    }
    EXPECT_EQ(pool.mapped_bytes(), mapped) << "the pool mapped more while freed copies were there";
  }
}

// Memory is bounded (DESIGN, section 2): past kMaxMappedBytes of chunks the pool maps no more,
// and copies come from the allocator. The copies are taken and not touched, so the chunks stay
// address space, not resident memory.
TEST(SmallCopyPool, PastItsLimitCopiesComeFromTheAllocator) {
  SKIP_WITHOUT_POOL();
  SmallCopyPool& pool = SmallCopyPool::instance();
  std::vector<AlignedBuffer> held;
  const std::size_t most = SmallCopyPool::kMaxMappedBytes / SmallCopyPool::kLargeBytes + 4096;
  held.reserve(most);
  while (held.size() < most) {
    held.push_back(pool.take(SmallCopyPool::kLargeBytes));
    ASSERT_FALSE(held.back().empty());
    if (!SmallCopyPool::owns(held.back())) break;
  }
  ASSERT_FALSE(SmallCopyPool::owns(held.back())) << held.size() << " copies taken, all from the pool";
  EXPECT_EQ(pool.mapped_bytes(), SmallCopyPool::kMaxMappedBytes);
  AlignedBuffer small = pool.take(1);
  EXPECT_LE(pool.mapped_bytes(), SmallCopyPool::kMaxMappedBytes);
  EXPECT_EQ(small.size(), SmallCopyPool::kSmallBytes);
  held.clear();
  // Given back, the pool's copies are taken again.
  EXPECT_TRUE(SmallCopyPool::owns(pool.take(SmallCopyPool::kLargeBytes)));
}

TEST(SmallCopyPool, ThreadsTakeAndGiveBackWithoutSharingACopy) {
  // Each thread fills its copies with its own byte and checks them before giving them back (to
  // another thread's list half the time): a copy handed to two threads at once shows up here
  // as a foreign byte.
  constexpr int kThreads = 4;
  constexpr int kRounds = 4000;
  std::atomic<int> foreign{0};
  std::vector<std::vector<AlignedBuffer>> handed(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &foreign, &handed] {
      std::vector<AlignedBuffer> live;
      const auto mark = static_cast<unsigned char>(t + 1);
      for (int i = 0; i < kRounds; ++i) {
        const std::size_t n = (i % 3 == 0) ? 100 : 9000;
        live.push_back(SmallCopyPool::instance().take(n));
        std::memset(live.back().data(), mark, live.back().size());
        if (live.size() > 16) {
          AlignedBuffer& b = live.front();
          const auto* p = reinterpret_cast<const unsigned char*>(b.data());
          if (std::any_of(p, p + b.size(), [mark](unsigned char c) { return c != mark; }))
            foreign.fetch_add(1, std::memory_order_relaxed);
          live.erase(live.begin());
        }
      }
      handed[static_cast<std::size_t>(t)] = std::move(live);  // freed by the main thread below
    });
  }
  for (auto& th : threads) th.join();
  handed.clear();
  EXPECT_EQ(foreign.load(), 0);
}

}  // namespace
