// The pool that lends the `order` mode's held-back copies and log batches their memory
// (src/posix/held_copy_pool.hpp): blocks by size class (four per power of two), reused once given back, the
// spare memory bounded, large blocks left to the allocator. The pool is the process's, shared
// with the layer: the checks count relative to what it held before.
#include <cstdint>
#include <vector>

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
  EXPECT_GE(pool.kept_bytes(), HeldCopyPool::kKeepBytes - HeldCopyPool::kLargest) << "up to the bound is kept";
}

}  // namespace
}  // namespace tai::test
