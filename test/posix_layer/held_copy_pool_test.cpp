// The pool that lends the `order` mode's held-back copies and log batches their memory
// (src/posix/held_copy_pool.hpp): blocks by size class (four per power of two), reused once given back, the
// spare memory bounded, large blocks left to the allocator. The pool is the process's, shared
// with the layer: the checks count relative to what it held before.
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
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
  // The allocator's spare blocks within kKeepBytes; the slab's blocks (carved by other tests in
  // this process) on top.
  EXPECT_LE(pool.kept_bytes(), HeldCopyPool::kKeepBytes + pool.slab_bytes())
      << "what passes the bound goes back to the allocator";
  EXPECT_GE(pool.kept_bytes(), HeldCopyPool::kKeepBytes - HeldCopyPool::kLargest) << "up to the bound is kept";
}

// A program whose writes changed size (here: large blocks first, then 100 KiB ones, which the
// slab never holds): the budget full of spare blocks of the old size must not make every block of
// the new size go back to the allocator and come from it again.
TEST(HeldCopyPool, BlocksOfTheSizeInUseWinOverSparesOfOtherSizes) {
  constexpr std::size_t kNew = 100 << 10;
  HeldCopyPool& pool = HeldCopyPool::instance();
  // Spares of the new size that earlier tests in this process left are taken out first.
  std::vector<AlignedBuffer> spares;
  for (std::uint64_t before = pool.allocations(); pool.allocations() == before;) {
    spares.push_back(pool.take(kNew));
    ASSERT_FALSE(spares.back().empty());
  }
  std::vector<AlignedBuffer> blocks;
  for (std::size_t i = 0; i < 2 * HeldCopyPool::kKeepBytes / HeldCopyPool::kLargest; ++i) {
    blocks.push_back(pool.take(HeldCopyPool::kLargest));
    ASSERT_FALSE(blocks.back().empty());
  }
  blocks.clear();  // the budget is full of the large blocks now
  spares.clear();
  const std::uint64_t allocated = pool.allocations();
  for (int i = 0; i < 20; ++i) {
    AlignedBuffer b = pool.take(kNew);
    ASSERT_FALSE(b.empty());
  }
  EXPECT_LE(pool.allocations() - allocated, 1u) << "the 100 KiB block came back and was lent again";
  EXPECT_LE(pool.kept_bytes(), HeldCopyPool::kKeepBytes + pool.slab_bytes()) << "within the bound still";
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

// The mapping holding `p`, from /proc/self/smaps: its range and THPeligible (-1: no such line).
struct Mapping {
  std::uintptr_t lo = 0, hi = 0;
  int thp_eligible = -1;
};
Mapping mapping_of(const void* p) {
  std::ifstream f("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  Mapping m;
  bool in = false;
  for (std::string line; std::getline(f, line);) {
    const auto colon = line.find(':'), space = line.find(' ');
    if (colon == std::string::npos || space < colon) {  // a mapping's first line: "lo-hi perms ..."
      if (in) break;
      std::uintptr_t lo = 0, hi = 0;
      char dash = 0;
      std::istringstream head(line);
      if (head >> std::hex >> lo >> dash >> hi && dash == '-' && lo <= at && at < hi) {
        in = true;
        m.lo = lo;
        m.hi = hi;
      }
      continue;
    }
    if (in && line.rfind("THPeligible:", 0) == 0) m.thp_eligible = std::stoi(line.substr(12));
  }
  return m;
}

// Held copies (blocks below 64 KiB) are carved one after another from the slab, which is kept:
// every carved block comes back to the free lists. Past the slab's first 256 KiB the mapping is
// whole huge pages advised for them, where the kernel has them; the first 256 KiB lie in no huge
// page.
TEST(HeldCopyPool, SmallBlocksAreCarvedFromOneSlabAdvisedForHugePages) {
  constexpr std::size_t kBlock = 16384;
  constexpr std::uintptr_t kHuge = std::uintptr_t{2} << 20;
  HeldCopyPool& pool = HeldCopyPool::instance();
  const std::uint64_t carved_before = pool.slab_bytes();
  if (carved_before + kBlock > HeldCopyPool::kSlabBytes)
    GTEST_SKIP() << "an earlier test in this process used the slab up";
  std::vector<AlignedBuffer> blocks;
  std::vector<std::byte*> carved;  // blocks the slab grew for, in order
  for (std::size_t i = 0; i < 2 * HeldCopyPool::kSlabBytes / kBlock && pool.slab_bytes() + kBlock <= HeldCopyPool::kSlabBytes; ++i) {
    const std::uint64_t before = pool.slab_bytes();
    blocks.push_back(pool.take(kBlock));
    ASSERT_FALSE(blocks.back().empty());
    ASSERT_EQ(blocks.back().size(), kBlock);
    if (pool.slab_bytes() > before) carved.push_back(blocks.back().data());
  }
  ASSERT_GT(pool.slab_bytes() + kBlock, HeldCopyPool::kSlabBytes) << "the slab is used up";
  ASSERT_FALSE(carved.empty());
  for (std::size_t i = 1; i < carved.size(); ++i) ASSERT_EQ(carved[i], carved[i - 1] + kBlock) << "packed in order";
  const std::uint64_t slab_after = pool.slab_bytes();
  for (int i = 0; i < 8; ++i) {
    blocks.push_back(pool.take(kBlock));  // from the allocator now
    ASSERT_FALSE(blocks.back().empty());
  }
  EXPECT_EQ(pool.slab_bytes(), slab_after);
  if (carved_before == 0) {
    const Mapping head = mapping_of(carved.front());
    EXPECT_LT(head.hi - head.lo, kHuge) << "the slab's small-page part holds no whole huge page";
  }
  const std::string mode = thp_mode();
  if (mode == "always" || mode == "madvise") {
    const Mapping tail = mapping_of(carved.back());
    EXPECT_EQ(tail.lo % kHuge, 0u) << "the advised part starts on a huge page";
    EXPECT_EQ(tail.hi % kHuge, 0u) << "and ends on one: whole huge pages";
    if (tail.thp_eligible >= 0) {
      EXPECT_EQ(tail.thp_eligible, 1) << "advised for huge pages (THP " << mode << ")";
    }
  }
  const std::uint64_t kept_before = pool.slab_kept_bytes();
  blocks.clear();  // the allocator's blocks among them may push other spares out; the slab's stay
  EXPECT_GE(pool.slab_kept_bytes(), kept_before + carved.size() * kBlock) << "every slab block is kept";
  EXPECT_LE(pool.kept_bytes(), HeldCopyPool::kKeepBytes + HeldCopyPool::kSlabBytes) << "the bound of the header";
}

}  // namespace
}  // namespace tai::test
