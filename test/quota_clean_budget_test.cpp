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
    o.write_around_bytes = 0;  // every write cached: the test is about what the cache does
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

// The errors promise under the budget: the budget releases only synced blocks, so written-back
// blocks whose bytes a failed sync may have dropped stay cached past the budget; the failed
// fsync makes them dirty again (its redirty), and the next fsync writes them again from the
// cache and clears the error: the file then holds every byte, written twice.
TYPED_TEST(QuotaCleanBudget, AFailedSyncOverWrittenBackBlocksIsRecoveredByALaterFsync) {
  const std::uint64_t budget = 4 * 4096;
  CleanBudgetRig<TypeParam> f(budget);
  auto a = pattern(32 * 4096, 3);
  ASSERT_EQ(f.op(TreeOp::write, 0, a.size(), a.data()), static_cast<std::int64_t>(a.size()));
  ASSERT_EQ(f.op(TreeOp::write_back, 0, a.size()), 0);
  EXPECT_EQ(f.tree->stats().dirty_bytes, 0u);
  EXPECT_EQ(f.tree->stats().cached_bytes, a.size()) << "the budget released written-back blocks before a sync covered them";
  EXPECT_TRUE(f.quota.over_clean_budget());
  f.mem.fail_syncs(-EIO);
  EXPECT_EQ(f.op(TreeOp::fsync), -EIO);
  EXPECT_EQ(f.tree->stats().dirty_bytes, a.size()) << "the failed sync's redirty";
  f.mem.fail_syncs(0);
  const std::uint64_t written = f.mem.bytes_written();
  EXPECT_EQ(f.op(TreeOp::fsync), 0) << "a later fsync could not recover";
  EXPECT_EQ(f.mem.bytes_written() - written, a.size()) << "the recovering fsync writes every byte again";
  EXPECT_EQ(f.op(TreeOp::fsync), 0);
  std::vector<std::uint8_t> on_file(a.size());
  ASSERT_EQ(f.mem.image().readable(0, a.size()), a.size());
  f.mem.image().bytes.read(0, a.size(), on_file.data());
  EXPECT_EQ(on_file, a);
  EXPECT_FALSE(f.quota.over_clean_budget()) << "the good sync released the synced blocks";
  EXPECT_EQ(f.tree->check_invariants(), "");
}

// In steady state the budget holds: written-back blocks wait for a sync, and the fsync whose
// sync succeeds releases the clean blocks it covered until the clean bytes are within the
// budget again; the released blocks go to the pool for the next writes.
TYPED_TEST(QuotaCleanBudget, AfterASuccessfulSyncTheCleanBytesDropUnderTheBudget) {
  const std::uint64_t budget = 4 * 4096;
  CleanBudgetRig<TypeParam> f(budget);
  for (std::uint8_t round = 0; round < 3; ++round) {
    auto a = pattern(32 * 4096, static_cast<std::uint8_t>(11 + round));
    const std::uint64_t at = std::uint64_t{round} << 20;
    ASSERT_EQ(f.op(TreeOp::write, at, a.size(), a.data()), static_cast<std::int64_t>(a.size()));
    ASSERT_EQ(f.op(TreeOp::write_back, at, a.size()), 0);
    EXPECT_GT(f.quota.used() - f.quota.dirty(), budget) << "written back, not yet synced: kept";
    const std::uint64_t pooled = f.quota.pooled();
    ASSERT_EQ(f.op(TreeOp::fsync), 0);
    EXPECT_LE(f.quota.used() - f.quota.dirty(), budget) << "round " << int{round};
    EXPECT_FALSE(f.quota.over_clean_budget());
    EXPECT_GT(f.quota.pooled(), pooled) << "released blocks are kept for reuse";
    std::vector<std::uint8_t> back(a.size());
    ASSERT_EQ(f.op(TreeOp::read, at, back.size(), back.data()), static_cast<std::int64_t>(back.size()));
    EXPECT_EQ(back, a);
  }
  EXPECT_EQ(f.tree->check_invariants(), "");
}

}  // namespace
}  // namespace tai::test::btree
