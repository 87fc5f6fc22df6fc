// The pool that lends the `order` mode's held-back copies and log batches their memory
// (src/posix/held_copy_pool.hpp): blocks by size class (four per power of two), reused once given back, the
// spare memory bounded, large blocks left to the allocator. The pool is the process's, shared
// with the layer: the checks count relative to what it held before.
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <iostream>

#include <gtest/gtest.h>

#include "src/posix/held_copy_pool.hpp"

namespace tai::test {
namespace {

using posix::detail::HeldCopyPool;
using tai::detail::AlignedBuffer;

TEST(HeldCopyPool, BlocksFitTheirClassAndComeBackFromThePool) {
  HeldCopyPool& pool = HeldCopyPool::instance();
  AlignedBuffer small = pool.take(1);
  ASSERT_FALSE(small.empty());
  EXPECT_EQ(small.size(), 512u);
  EXPECT_TRUE(small.borrowed()) << "the pool is its home";
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(small.data()) % 64, 0u);
  AlignedBuffer frame = pool.take(4096 + 24);  // an SQLite WAL frame: page and header
  ASSERT_FALSE(frame.empty());
  EXPECT_EQ(frame.size(), 5120u) << "a quarter step above 4 KiB, not the next power of two";
  EXPECT_EQ(pool.take(4096).size(), 4096u);
  EXPECT_EQ(pool.take(600).size(), 640u);
  EXPECT_EQ(pool.take(8000).size(), 8192u);
  AlignedBuffer batch = pool.take(100 << 10);
  EXPECT_EQ(batch.size(), std::size_t{112} << 10);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(batch.data()) % 4096, 0u) << "a log batch is page-aligned";
  std::byte* const at = frame.data();
  frame.reset();  // back to the pool
  const std::uint64_t reused = pool.reuses(), allocated = pool.allocations();
  AlignedBuffer again = pool.take(4500);
  EXPECT_EQ(again.data(), at) << "the block given back is lent again";
  EXPECT_EQ(pool.reuses(), reused + 1);
  EXPECT_EQ(pool.allocations(), allocated);
}

TEST(HeldCopyPool, SpareMemoryIsBoundedAndLargeBlocksAreNotPooled) {
  HeldCopyPool& pool = HeldCopyPool::instance();
  AlignedBuffer large = pool.take(HeldCopyPool::kLargest + 1);
  ASSERT_FALSE(large.empty());
  EXPECT_FALSE(large.borrowed()) << "above the largest class: the allocator's, freed by it";
  std::vector<AlignedBuffer> blocks;
  for (std::size_t i = 0; i < 2 * HeldCopyPool::kKeepBytes / HeldCopyPool::kLargest; ++i) {
    blocks.push_back(pool.take(HeldCopyPool::kLargest));
    ASSERT_FALSE(blocks.back().empty());
  }
  blocks.clear();
  EXPECT_LE(pool.kept_bytes(), HeldCopyPool::kKeepBytes) << "what passes the bound goes back to the allocator";
  // The slab's carved bytes count against the bound (its blocks may be lent elsewhere).
  EXPECT_GE(pool.kept_bytes() + pool.slab_bytes(), HeldCopyPool::kKeepBytes - HeldCopyPool::kLargest)
      << "up to the bound is kept";
}

// The transparent huge pages setting ("always [madvise] never": the bracketed one), or "" when
// the kernel has none.
std::string thp_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string all;
  std::getline(f, all);
  const auto open = all.find('['), close = all.find(']');
  return open == std::string::npos || close == std::string::npos ? "" : all.substr(open + 1, close - open - 1);
}

// /proc/self/smaps's THPeligible of the mapping holding `p` (-1: not found, or no such line).
int thp_eligible(const void* p) {
  std::ifstream f("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  bool in = false;
  for (std::string line; std::getline(f, line);) {
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (line.find(':') == std::string::npos || line.find(' ') < line.find(':')) {
      if (head >> std::hex >> lo >> dash >> hi && dash == '-') in = lo <= at && at < hi;
      continue;
    }
    if (in && line.rfind("THPeligible:", 0) == 0) return std::stoi(line.substr(12));
  }
  return -1;
}

// Held copies (blocks below 64 KiB) are carved one after another from the slab, which is kept:
// every carved block comes back to the free lists. Past the slab's first 256 KiB the mapping is
// advised for huge pages, where the kernel has them.
TEST(HeldCopyPool, SmallBlocksAreCarvedFromOneSlabAdvisedForHugePages) {
  HeldCopyPool& pool = HeldCopyPool::instance();
  const std::uint64_t carved_before = pool.slab_bytes();
  std::vector<AlignedBuffer> blocks;
  // More than the slab holds: the rest comes from the allocator.
  const std::size_t n = (HeldCopyPool::kSlabBytes - carved_before) / 16384 + 8;
  for (std::size_t i = 0; i < n; ++i) {
    blocks.push_back(pool.take(16384));
    ASSERT_FALSE(blocks.back().empty());
    ASSERT_EQ(blocks.back().size(), 16384u);
  }
  EXPECT_GT(pool.slab_bytes(), HeldCopyPool::kSlabBytes - 16384) << "the slab is used up";
  // Blocks taken from the free lists first (given back by the other tests), then carved in order.
  std::size_t carved_in_a_row = 0;
  for (std::size_t i = 1; i < blocks.size(); ++i)
    if (blocks[i].data() == blocks[i - 1].data() + 16384) ++carved_in_a_row;
  EXPECT_GE(carved_in_a_row, (HeldCopyPool::kSlabBytes - carved_before) / 16384 - 2) << "packed one after another";
  const std::string mode = thp_mode();
  const int eligible = thp_eligible(blocks[blocks.size() - 9].data());
  if (mode == "always" || mode == "madvise") {
    if (eligible < 0) {
      std::cout << "[ SKIPPED  ] huge-page check: /proc/self/smaps has no THPeligible line\n";
    } else {
      EXPECT_EQ(eligible, 1) << "the slab's last block is in a range advised for huge pages (THP " << mode << ")";
    }
  }
  const std::uint64_t kept_before = pool.kept_bytes();
  blocks.clear();
  EXPECT_GE(pool.kept_bytes(), kept_before + (HeldCopyPool::kSlabBytes - carved_before) / 16384 * 16384 - 16384)
      << "every slab block is kept";
  EXPECT_LE(pool.kept_bytes(), HeldCopyPool::kKeepBytes + HeldCopyPool::kSlabBytes) << "the bound of the header";
}

}  // namespace
}  // namespace tai::test
