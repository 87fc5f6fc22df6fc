// Whole-node overwrite: a write covering a whole node drops its children (dirty or not),
// returns their blocks to the quota and makes the node the leaf, but only once every earlier
// step below it has finished (ordering with engine requests still in flight).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "btree_fuzz/btree_harness.hpp"
#include "tai/btree.hpp"
#include "tai/btree_driver.hpp"

namespace tai::test::btree {
namespace {

constexpr std::uint64_t k2M = std::uint64_t{2} << 20;

TEST(BTreeOverwrite, AWholeNodeWriteDropsDirtyChildrenAndBecomesTheLeaf) {
  MemoryFile mem;
  RecordingExecutor rec(mem);
  Quota quota;
  BTreeOptions o;
  o.file_size = 0;
  BTreeDefault tree(nullptr, quota, o);
  SequentialDriver::Options d;
  d.executor = &rec;
  SequentialDriver driver(d);
  std::vector<std::uint8_t> small(100, 1);
  for (int i = 0; i < 10; ++i)
    ASSERT_EQ(run_op(driver, tree, TreeOp::write, std::uint64_t(i) * 8192 + 50, 100, small.data()), 100);
  EXPECT_EQ(tree.stats().blocks, 10u);
  EXPECT_EQ(tree.stats().dirty_bytes, 1000u);
  std::vector<std::uint8_t> big(k2M);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::uint8_t>(i * 31 + 7);
  ASSERT_EQ(run_op(driver, tree, TreeOp::write, 0, k2M, big.data()), static_cast<std::int64_t>(k2M));
  const BTreeStats st = tree.stats();
  EXPECT_EQ(st.restructures, 1u);
  EXPECT_EQ(st.blocks, 1u);
  EXPECT_EQ(st.cached_bytes, k2M);
  EXPECT_EQ(quota.used(), k2M);
  EXPECT_EQ(st.dirty_bytes, k2M);
  EXPECT_EQ(st.merged_bytes, 1000u);  // the children's dirty bytes never reach the engine
  EXPECT_EQ(st.nodes, 3u);            // root, 1 GiB node, and the 2 MiB node as the leaf
  EXPECT_TRUE(rec.log().empty());
  std::vector<std::uint8_t> back(k2M);
  ASSERT_EQ(run_op(driver, tree, TreeOp::read, 0, k2M, back.data()), static_cast<std::int64_t>(k2M));
  EXPECT_EQ(back, big);
  ASSERT_EQ(run_op(driver, tree, TreeOp::write_back, 0, 0), 0);
  auto log = rec.log();
  ASSERT_EQ(log.size(), 1u);  // one request for the whole node
  EXPECT_EQ(log[0].length, k2M);
  EXPECT_EQ(tree.check_invariants(), "");
}

TEST(BTreeOverwrite, AWholeNodeWriteWithoutQuotaGoesToTheEngine) {
  MemoryFile mem;
  Quota quota(Quota::kUnlimited, 64 * 4096);  // room for small blocks, not for 2 MiB
  BTreeOptions o;
  o.file_size = 0;
  BTreeDefault tree(nullptr, quota, o);
  SequentialDriver::Options d;
  d.executor = &mem;
  SequentialDriver driver(d);
  std::vector<std::uint8_t> small(10, 1);
  ASSERT_EQ(run_op(driver, tree, TreeOp::write, 5000, 10, small.data()), 10);
  std::vector<std::uint8_t> big(k2M, 9);
  ASSERT_EQ(run_op(driver, tree, TreeOp::write, 0, k2M, big.data()), static_cast<std::int64_t>(k2M));
  EXPECT_EQ(tree.stats().blocks, 0u);
  EXPECT_EQ(tree.stats().reroutes, 1u);
  EXPECT_EQ(mem.bytes_written(), k2M);  // the child's dirty bytes were dropped, not written
  std::vector<std::uint8_t> back(20);
  ASSERT_EQ(run_op(driver, tree, TreeOp::read, 4995, 20, back.data()), 20);
  EXPECT_EQ(back, std::vector<std::uint8_t>(20, 9));
  EXPECT_EQ(tree.check_invariants(), "");
}

// The overwrite must come after an earlier read whose fill is still in flight below: the read
// sees the old bytes, the file ends with the new ones.
TEST(BTreeOverwrite, WaitsForEarlierStepsStillActiveBelow) {
  MemoryFile mem;
  std::vector<std::uint8_t> old_bytes(8192, 0x11);
  Request pre;
  pre.op = Op::write;
  pre.buffer = old_bytes.data();
  pre.length = old_bytes.size();
  mem.execute(pre);
  Quota quota;
  BTreeOptions o;
  o.file_size = 8192;
  o.min_block_bytes = 1;
  // Nodes: 4 KiB (depth 1), 256 B (depth 2), 16 B blocks (depth 3): the fill is two levels
  // below the node the overwrite covers.
  BTree<52, 4, 4, 4> tree(nullptr, quota, o);
  ManualDriver driver(mem);
  std::vector<std::uint8_t> got(8, 0);
  Operation read(TreeOp::read, 100, 8, got.data());
  std::vector<std::uint8_t> fresh(4096, 0x22);
  Operation write(TreeOp::write, 0, 4096, fresh.data());
  driver.start(tree, read);
  driver.start(tree, write);
  driver.run_steps();
  ASSERT_EQ(driver.pending_io(), 1u);  // the read's fill; the overwrite waits for it
  EXPECT_EQ(driver.request(0).op, Op::read);
  EXPECT_FALSE(write.done());
  driver.run_all();
  ASSERT_TRUE(read.done() && write.done());
  EXPECT_EQ(read.result(), 8);
  EXPECT_EQ(got, std::vector<std::uint8_t>(8, 0x11));
  EXPECT_EQ(write.result(), 4096);
  EXPECT_EQ(tree.stats().restructures, 1u);
  std::vector<std::uint8_t> back(8);
  Operation again(TreeOp::read, 100, 8, back.data());
  driver.start(tree, again);
  driver.run_all();
  EXPECT_EQ(back, std::vector<std::uint8_t>(8, 0x22));
  EXPECT_EQ(tree.check_invariants(), "");
}

}  // namespace
}  // namespace tai::test::btree
