// TreeOp::collect frees the nodes that hold nothing (no block in their subtree) and that no
// operation is in, and touches nothing else: cached blocks, dirty ranges, the logical size and
// what reads return stay as they were. Empty nodes come from evicted or dropped blocks and from
// leaves made for a write the strict quota then rerouted to the engine.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "btree_fuzz/btree_harness.hpp"
#include "tai/btree.hpp"

namespace tai::test::btree {
namespace {

std::vector<std::uint8_t> bytes(std::size_t n, std::uint8_t v) { return std::vector<std::uint8_t>(n, v); }

TEST(BTreeCollect, FreesTheNodesOfDroppedBlocksAndKeepsEverythingCached) {
  TreeOnMemory<> t;
  const std::uint64_t two_mib = 2u << 20;
  auto a = bytes(4096, 1);
  // 64 blocks in each of three 2 MiB nodes, and one far away (another 1 GiB node).
  for (std::uint64_t node = 0; node < 3; ++node)
    for (std::uint64_t i = 0; i < 64; ++i) ASSERT_EQ(t.op(TreeOp::write, node * two_mib + i * 4096, 4096, a.data()), 4096);
  auto far = bytes(100, 7);
  ASSERT_EQ(t.op(TreeOp::write, std::uint64_t{5} << 30, far.size(), far.data()), 100);
  // Drop the first two 2 MiB nodes' blocks (written back first): their nodes now hold nothing.
  ASSERT_EQ(t.op(TreeOp::drop, 0, 2 * two_mib), 0);
  // Something dirty that the collection must leave alone.
  auto d = bytes(10, 9);
  ASSERT_EQ(t.op(TreeOp::write, 2 * two_mib + 100, d.size(), d.data()), 10);
  const BTreeStats before = t.tree->stats();
  ASSERT_EQ(before.blocks, 65u);
  ASSERT_EQ(t.op(TreeOp::collect, 0, 0), 0);
  const BTreeStats after = t.tree->stats();
  EXPECT_LT(after.nodes, before.nodes - 128) << "the 128 emptied leaves (and their parents) are gone";
  EXPECT_LT(after.node_bytes, before.node_bytes);
  EXPECT_EQ(after.blocks, before.blocks);
  EXPECT_EQ(after.cached_bytes, before.cached_bytes);
  EXPECT_EQ(after.dirty_bytes, before.dirty_bytes);
  EXPECT_EQ(t.tree->logical_size(), std::optional<std::uint64_t>((std::uint64_t{5} << 30) + 100));
  // Reads: cached blocks still serve (no engine read), dropped ranges come from the file.
  t.rec.clear();
  std::vector<std::uint8_t> back(4096);
  ASSERT_EQ(t.op(TreeOp::read, 2 * two_mib, 4096, back.data()), 4096);
  auto expect = a;
  std::copy(d.begin(), d.end(), expect.begin() + 100);
  EXPECT_EQ(back, expect);
  EXPECT_TRUE(t.rec.log().empty()) << "a cached block was served from the engine";
  ASSERT_EQ(t.op(TreeOp::read, two_mib + 8192, 4096, back.data()), 4096);
  EXPECT_EQ(back, a) << "the dropped block was written back before it was freed";
  std::vector<std::uint8_t> far_back(100);
  ASSERT_EQ(t.op(TreeOp::read, std::uint64_t{5} << 30, 100, far_back.data()), 100);
  EXPECT_EQ(far_back, far);
  // The tree still works and the nodes come back as needed.
  ASSERT_EQ(t.op(TreeOp::write, 4096, 4096, a.data()), 4096);
  ASSERT_EQ(t.op(TreeOp::fsync, 0, 0), 0);
  EXPECT_EQ(t.tree->check_invariants(), "");
}

TEST(BTreeCollect, FreesTheLeavesOfWritesTheStrictQuotaRerouted) {
  TreeOnMemory<> t(TreeOnMemory<>::empty_file(), /*strict_bytes=*/4096);
  auto a = bytes(4096, 3);
  ASSERT_EQ(t.op(TreeOp::write, 0, 4096, a.data()), 4096);  // the one block the quota allows
  // The 2 MiB node has a child now: later writes below it make a leaf each, and the quota
  // refuses them a block: rerouted to the engine, their leaves stay empty.
  for (std::uint64_t i = 1; i < 200; ++i) ASSERT_EQ(t.op(TreeOp::write, i * 4096, 4096, a.data()), 4096);
  const BTreeStats before = t.tree->stats();
  ASSERT_GE(before.reroutes, 199u);
  ASSERT_EQ(t.op(TreeOp::collect, 0, 0), 0);
  const BTreeStats after = t.tree->stats();
  EXPECT_LE(after.nodes, before.nodes - 199);
  EXPECT_EQ(after.blocks, 1u);
  std::vector<std::uint8_t> back(4096);
  for (std::uint64_t i : {0, 1, 199}) {
    ASSERT_EQ(t.op(TreeOp::read, i * 4096, 4096, back.data()), 4096);
    EXPECT_EQ(back, a) << "block " << i;
  }
  EXPECT_EQ(t.tree->check_invariants(), "");
}

TEST(BTreeCollect, AskedForOnceTheNodesHaveGrownAndOnlyOnceAtATime) {
  TreeOnMemory<> t;
  auto a = bytes(4096, 3);
  ASSERT_EQ(t.op(TreeOp::write, 0, 4096, a.data()), 4096);
  EXPECT_FALSE(t.tree->take_collect_request()) << "a small tree needs no collection";
  std::uint64_t i = 1;
  auto grow_until_asked = [&] {
    while (!t.tree->take_collect_request()) {
      ASSERT_EQ(t.op(TreeOp::write, i * 4096, 4096, a.data()), 4096);
      ASSERT_LT(++i, 100000u) << "never asked for a collection";
    }
  };
  grow_until_asked();
  const std::uint64_t first = t.tree->stats().node_bytes;
  EXPECT_GE(first, 512u << 10) << "asked for below the floor";
  EXPECT_FALSE(t.tree->take_collect_request()) << "one request until that collection completes";
  ASSERT_EQ(t.op(TreeOp::collect, 0, 0), 0);
  EXPECT_EQ(t.tree->stats().collects, 1u);
  // Every node holds a block: nothing was freed, and the next request waits until the nodes
  // have doubled, so that a collection never walks more than it can free.
  EXPECT_EQ(t.tree->stats().node_bytes, first);
  EXPECT_FALSE(t.tree->take_collect_request());
  grow_until_asked();
  EXPECT_GE(t.tree->stats().node_bytes, 2 * first);
}

}  // namespace
}  // namespace tai::test::btree
