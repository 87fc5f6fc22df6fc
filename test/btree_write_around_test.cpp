// The write-around rule under the default tree options: a write of a page or more over a range
// the tree holds nothing of goes to the engine uncached, smaller writes and writes over cached
// ranges are cached, and on a direct-I/O file only pieces aligned for direct I/O go around (an
// unaligned one is cached, so its overwrites merge in the block).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "btree_fuzz/btree_harness.hpp"
#include "support/direct_tree_rig.hpp"
#include "support/test_env.hpp"
#include "tai/btree.hpp"
#include "tai/btree_driver.hpp"

namespace tai::test::btree {
namespace {

std::vector<std::uint8_t> filled(std::size_t n, std::uint8_t v) { return std::vector<std::uint8_t>(n, v); }

TEST(BTreeWriteAround, IsOnByDefaultForAPageOrMore) {
  EXPECT_GT(BTreeOptions{}.write_around_bytes, 0u);
  EXPECT_LE(BTreeOptions{}.write_around_bytes, 4096u) << "a page-sized write must qualify";
}

TEST(BTreeWriteAround, APageOverNothingCachedGoesAroundAndSmallWritesAreCached) {
  MemoryFile mem;
  RecordingExecutor rec(mem);
  Quota quota;
  BTreeOptions o;  // the defaults, but an empty file (a memory file has no size to read)
  o.file_size = 0;
  BTreeDefault tree(nullptr, quota, o);
  SequentialDriver::Options d;
  d.executor = &rec;
  SequentialDriver driver(d);
  auto page = filled(8192, 1);
  ASSERT_EQ(run_op(driver, tree, TreeOp::write, 0, page.size(), page.data()), 8192);
  EXPECT_GE(tree.stats().write_arounds, 1u);
  EXPECT_EQ(tree.stats().dirty_bytes, 0u) << "the page was cached";
  ASSERT_FALSE(rec.log().empty()) << "the page did not reach the engine at once";
  const std::uint64_t arounds = tree.stats().write_arounds;
  rec.clear();
  auto small = filled(100, 2);
  ASSERT_EQ(run_op(driver, tree, TreeOp::write, 1 << 20, small.size(), small.data()), 100);
  EXPECT_EQ(tree.stats().write_arounds, arounds);
  EXPECT_EQ(tree.stats().dirty_bytes, 100u) << "a small write went around the cache";
  EXPECT_TRUE(rec.log().empty());
  // A page over the cached range is cached too: the rule is for ranges that hold nothing.
  auto over = filled(4096, 3);
  ASSERT_EQ(run_op(driver, tree, TreeOp::write, 1 << 20, over.size(), over.data()), 4096);
  EXPECT_EQ(tree.stats().write_arounds, arounds);
  ASSERT_EQ(run_op(driver, tree, TreeOp::fsync, 0, 0), 0);
  std::vector<std::uint8_t> got(8192);
  ASSERT_EQ(run_op(driver, tree, TreeOp::read, 0, got.size(), got.data()), 8192);
  EXPECT_EQ(got, page);
  got.resize(4096);
  ASSERT_EQ(run_op(driver, tree, TreeOp::read, 1 << 20, got.size(), got.data()), 4096);
  EXPECT_EQ(got, over);
}

TEST(BTreeWriteAround, OnADirectFileOnlyAlignedPiecesGoAround) {
  ScratchDir dir;
  std::string why;
  auto rig = DirectTreeRig::make(dir, BTreeOptions{}, why);  // the default options
  if (!rig) GTEST_SKIP() << why;
  BTreeDefault& tree = *rig->tree;
  SequentialDriver& driver = rig->driver;
  RecordingExecutor& rec = rig->rec;
  auto aligned = filled(8192, 1);
  ASSERT_EQ(run_op(driver, tree, TreeOp::write, 0, aligned.size(), aligned.data()), 8192);
  EXPECT_GE(tree.stats().write_arounds, 1u) << "an aligned page on a direct file was cached";
  const std::uint64_t arounds = tree.stats().write_arounds;
  // An unaligned record written twice: cached, so the device sees it once, at fsync.
  const std::uint64_t off = 65536 + 100;
  auto first = filled(5000, 2), second = filled(5000, 3);
  rec.clear();
  ASSERT_EQ(run_op(driver, tree, TreeOp::write, off, first.size(), first.data()), 5000);
  ASSERT_EQ(run_op(driver, tree, TreeOp::write, off, second.size(), second.data()), 5000);
  EXPECT_EQ(tree.stats().write_arounds, arounds) << "an unaligned write on a direct file went around";
  EXPECT_EQ(tree.stats().dirty_bytes, 5000u);
  // So is a long unaligned write: its aligned middle is cached with its ends, not sent around
  // block by block.
  auto longer = filled(5 * 4096 + 300, 4);
  ASSERT_EQ(run_op(driver, tree, TreeOp::write, 1 << 20, longer.size(), longer.data()), static_cast<std::int64_t>(longer.size()));
  EXPECT_EQ(tree.stats().write_arounds, arounds) << "part of a long unaligned write went around";
  EXPECT_EQ(tree.stats().dirty_bytes, 5000u + longer.size());
  for (const auto& e : rec.log()) EXPECT_NE(e.op, Op::write) << "a cached write reached the engine before the fsync";
  ASSERT_EQ(run_op(driver, tree, TreeOp::fsync, 0, 0), 0);
  std::vector<std::uint8_t> got(5000);
  ASSERT_EQ(run_op(driver, tree, TreeOp::read, off, got.size(), got.data()), 5000);
  EXPECT_EQ(got, second);
}

}  // namespace
}  // namespace tai::test::btree
