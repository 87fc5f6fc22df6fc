// The clean budget: while the quota holds more clean bytes than its budget, a block that its
// write-back leaves clean goes back to the quota (and its pool) at once; within the budget clean
// blocks stay cached and reads hit them; dirty data is never released early. Typed over trees
// that hold blocks at different depths.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <vector>

#include "btree_fuzz/btree_harness.hpp"
#include "tai/btree.hpp"
#include "tai/btree_driver.hpp"
#include "tai/quota.hpp"

namespace tai::test::btree {
namespace {

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(seed + i * 7);
  return v;
}

template <class Tree>
struct CleanBudgetRig {
  explicit CleanBudgetRig(std::uint64_t clean_budget)
      : quota(Quota::kUnlimited, Quota::kUnlimited, 1u << 10, Quota::kDefaultPoolLimit, clean_budget) {
    BTreeOptions o;
    o.file_size = 0;
    o.gather_bytes = 0;  // one write-back per block: the budget is checked at each
    tree = std::make_unique<Tree>(nullptr, quota, o);
    SequentialDriver::Options d;
    d.executor = &mem;
    driver = std::make_unique<SequentialDriver>(d);
  }
  std::int64_t op(TreeOp kind, std::uint64_t offset = 0, std::uint64_t length = 0, void* buffer = nullptr) {
    return run_op(*driver, *tree, kind, offset, length, buffer);
  }
  MemoryFile mem;
  Quota quota;
  std::unique_ptr<Tree> tree;
  std::unique_ptr<SequentialDriver> driver;
};

template <class Tree>
class QuotaCleanBudget : public testing::Test {};
using Trees = testing::Types<BTreeDefault, BTree<52, 12>, BTree<48, 4, 12>>;
TYPED_TEST_SUITE(QuotaCleanBudget, Trees);

TYPED_TEST(QuotaCleanBudget, TheQuotaCountsDirtyBytesAsTheTreeDoes) {
  CleanBudgetRig<TypeParam> f(Quota::kUnlimited);
  auto a = pattern(10000, 1);
  ASSERT_EQ(f.op(TreeOp::write, 100, a.size(), a.data()), 10000);
  EXPECT_EQ(f.quota.dirty(), f.tree->stats().dirty_bytes);
  EXPECT_EQ(f.quota.dirty(), 10000u);
  ASSERT_EQ(f.op(TreeOp::fsync), 0);
  EXPECT_EQ(f.quota.dirty(), 0u);
  ASSERT_EQ(f.op(TreeOp::write, 50000, 10, a.data()), 10);
  EXPECT_EQ(f.quota.dirty(), 10u);
  ASSERT_EQ(f.op(TreeOp::drop), 0);  // written back, then freed
  EXPECT_EQ(f.quota.dirty(), 0u);
  EXPECT_EQ(f.quota.used(), 0u);
}

TYPED_TEST(QuotaCleanBudget, WithinTheBudgetCleanBlocksStayAndReadsHitThem) {
  CleanBudgetRig<TypeParam> f(64 * 4096);
  auto a = pattern(16 * 4096, 3);
  ASSERT_EQ(f.op(TreeOp::write, 0, a.size(), a.data()), static_cast<std::int64_t>(a.size()));
  ASSERT_EQ(f.op(TreeOp::fsync), 0);
  EXPECT_EQ(f.tree->stats().cached_bytes, a.size());
  EXPECT_EQ(f.tree->stats().dirty_bytes, 0u);
  std::vector<std::uint8_t> back(a.size());
  const std::uint64_t hits = f.tree->stats().cache_hits;
  const std::uint64_t reads = f.tree->stats().engine_reads;
  ASSERT_EQ(f.op(TreeOp::read, 0, back.size(), back.data()), static_cast<std::int64_t>(back.size()));
  EXPECT_EQ(back, a);
  EXPECT_GT(f.tree->stats().cache_hits, hits);
  EXPECT_EQ(f.tree->stats().engine_reads, reads);
}

TYPED_TEST(QuotaCleanBudget, PastTheBudgetWrittenBackBlocksGoBackToThePool) {
  const std::uint64_t budget = 4 * 4096;
  CleanBudgetRig<TypeParam> f(budget);
  auto a = pattern(32 * 4096, 5);
  ASSERT_EQ(f.op(TreeOp::write, 0, a.size(), a.data()), static_cast<std::int64_t>(a.size()));
  const BTreeStats before = f.tree->stats();
  EXPECT_EQ(before.cached_bytes, a.size()) << "dirty data is never released early";
  ASSERT_GT(before.blocks, 1u);
  const std::uint64_t block = before.cached_bytes / before.blocks;
  ASSERT_EQ(f.op(TreeOp::fsync), 0);
  const BTreeStats s = f.tree->stats();
  EXPECT_EQ(s.dirty_bytes, 0u);
  EXPECT_LE(s.cached_bytes, budget + block) << "clean blocks past the budget were released";
  EXPECT_GT(s.cached_bytes + block, budget) << "the budget's worth stays cached";
  EXPECT_EQ(f.quota.used(), s.cached_bytes);
  EXPECT_GE(f.quota.pooled(), a.size() - s.cached_bytes) << "released blocks are kept for reuse";
  // The next writes reuse the released blocks.
  const std::uint64_t hits = f.quota.pool_hits();
  auto b = pattern(a.size(), 9);  // the same shape, so the same block sizes
  ASSERT_EQ(f.op(TreeOp::write, 1u << 22, b.size(), b.data()), static_cast<std::int64_t>(b.size()));
  EXPECT_GT(f.quota.pool_hits(), hits);
  ASSERT_EQ(f.op(TreeOp::fsync), 0);
  // Every byte reached the file, and reads give it back (from the cache or the file).
  EXPECT_EQ(f.mem.bytes_written(), a.size() + b.size());
  std::vector<std::uint8_t> back(a.size());
  ASSERT_EQ(f.op(TreeOp::read, 0, back.size(), back.data()), static_cast<std::int64_t>(back.size()));
  EXPECT_EQ(back, a);
}

TYPED_TEST(QuotaCleanBudget, AnUnlimitedBudgetKeepsEveryCleanBlock) {
  CleanBudgetRig<TypeParam> f(Quota::kUnlimited);
  auto a = pattern(32 * 4096, 7);
  ASSERT_EQ(f.op(TreeOp::write, 0, a.size(), a.data()), static_cast<std::int64_t>(a.size()));
  ASSERT_EQ(f.op(TreeOp::fsync), 0);
  EXPECT_EQ(f.tree->stats().cached_bytes, a.size());
  EXPECT_FALSE(f.quota.over_clean_budget());
}

// The errors promise over released blocks: a block the budget released before its bytes were
// synced cannot be made dirty again after a failed sync, so the failure must stay the file's
// error; no later fsync may report success over bytes the kernel may have dropped.
TYPED_TEST(QuotaCleanBudget, AFailedSyncOverReleasedBlocksStaysTheFilesError) {
  CleanBudgetRig<TypeParam> f(4 * 4096);
  auto a = pattern(32 * 4096, 3);
  ASSERT_EQ(f.op(TreeOp::write, 0, a.size(), a.data()), static_cast<std::int64_t>(a.size()));
  ASSERT_EQ(f.op(TreeOp::write_back, 0, a.size()), 0);
  ASSERT_LT(f.tree->stats().cached_bytes, a.size()) << "the budget released written-back blocks";
  f.mem.fail_syncs(-EIO);
  EXPECT_EQ(f.op(TreeOp::fsync), -EIO);
  f.mem.fail_syncs(0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(f.op(TreeOp::fsync), -EIO) << "an fsync cleared the error of released bytes";
  EXPECT_EQ(f.tree->check_invariants(), "");
}

}  // namespace
}  // namespace tai::test::btree
