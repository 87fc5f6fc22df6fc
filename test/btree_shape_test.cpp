// The shapes of tai::BTree: the predefined trees' levels and node sizes, a user's own shape
// compiled from the headers alone, and sparse tables for wide levels.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "btree_fuzz/btree_harness.hpp"
#include "tai/btree.hpp"
#include "tai/btree_driver.hpp"

namespace tai::test::btree {
namespace {

BTreeOptions sized(std::uint64_t size = 0) {
  BTreeOptions o;
  o.file_size = size;
  return o;
}

TEST(BTreeShape, DefaultHasThePapersNodeSizes) {
  static_assert(BTreeDefault::kLevels == 4);
  // 16 EiB, 1 GiB, 2 MiB, 4 KiB
  static_assert(BTreeDefault::kShift[0] == 64 && BTreeDefault::kShift[1] == 30 && BTreeDefault::kShift[2] == 21 &&
                BTreeDefault::kShift[3] == 12);
  static_assert(std::is_same_v<BTreeDefault, BTree<34, 9, 9, 12>>);
  Quota quota;
  BTreeDefault tree(nullptr, quota, sized());
  EXPECT_EQ(tree.levels(), 4u);
  EXPECT_EQ(tree.node_shift(0), 64u);
  EXPECT_EQ(tree.node_shift(3), 12u);
}

TEST(BTreeShape, TrivialIsOneNodeThatNeverCaches) {
  static_assert(BTreeTrivial::kLevels == 1 && BTreeTrivial::kShift[0] == 64);
  MemoryFile mem;
  Quota quota;
  BTreeTrivial tree(nullptr, quota, sized());
  SequentialDriver::Options o;
  o.executor = &mem;
  SequentialDriver driver(o);
  std::vector<std::uint8_t> data(4096, 7);
  EXPECT_EQ(run_op(driver, tree, TreeOp::write, 0, data.size(), data.data()), 4096);
  const BTreeStats st = tree.stats();
  EXPECT_EQ(st.uncached, 1u);
  EXPECT_EQ(st.cached_bytes, 0u);
  EXPECT_EQ(mem.bytes_written(), 4096u);
  EXPECT_EQ(quota.used(), 0u);
}

TEST(BTreeShape, BinaryIsATwoThenSixtyTwoOnes) {
  static_assert(BTreeBinary::kLevels == 63);
  static_assert(BTreeBinary::kBits[0] == 2 && BTreeBinary::kBits[1] == 1 && BTreeBinary::kBits[62] == 1);
  static_assert(BTreeBinary::kShift[1] == 62 && BTreeBinary::kShift[62] == 1);
  MemoryFile mem;
  Quota quota;
  BTreeOptions opt = sized();
  opt.min_block_bytes = 1;  // let a request descend to the last level (2-byte nodes)
  BTreeBinary tree(nullptr, quota, opt);
  SequentialDriver::Options o;
  o.executor = &mem;
  SequentialDriver driver(o);
  std::uint8_t byte = 42;
  EXPECT_EQ(run_op(driver, tree, TreeOp::write, 5, 1, &byte), 1);
  EXPECT_EQ(tree.stats().nodes, 63u);       // one node per level
  EXPECT_EQ(tree.stats().cached_bytes, 2u); // a block of the last level: 2 bytes
  // One step per level down to the leaf's parent, which writes into the idle leaf itself
  // (tai/btree.hpp, "Writes across many blocks").
  EXPECT_GE(driver.steps_run(), 62u);
  std::uint8_t back = 0;
  EXPECT_EQ(run_op(driver, tree, TreeOp::read, 5, 1, &back), 1);
  EXPECT_EQ(back, 42);
  EXPECT_EQ(tree.check_invariants(), "");
}

// Not one of the predefined trees: its shape reaches the one compiled tree at run time.
using MyTree = BTree<20, 20, 12, 12>;  // two sparse levels (2^20 children), 16 MiB / 4 KiB nodes

TEST(BTreeShape, AUsersOwnShapeCompilesFromTheHeaders) {
  static_assert(MyTree::kShift[0] == 64 && MyTree::kShift[1] == 44 && MyTree::kShift[2] == 24 && MyTree::kShift[3] == 12);
  MemoryFile mem;
  Quota quota;
  MyTree tree(nullptr, quota, sized());
  SequentialDriver::Options o;
  o.executor = &mem;
  o.defer_io = true;
  SequentialDriver driver(o);
  const std::uint64_t offsets[] = {0, (std::uint64_t{1} << 44) - 100, std::uint64_t{1} << 60, ~std::uint64_t{0} - 5000};
  for (std::uint64_t off : offsets) {
    std::vector<std::uint8_t> data(300);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::uint8_t>(off + i);
    ASSERT_EQ(run_op(driver, tree, TreeOp::write, off, data.size(), data.data()), 300);
    std::vector<std::uint8_t> back(300);
    ASSERT_EQ(run_op(driver, tree, TreeOp::read, off, back.size(), back.data()), 300);
    EXPECT_EQ(back, data) << "at " << off;
  }
  EXPECT_EQ(tree.check_invariants(), "");
  EXPECT_EQ(run_op(driver, tree, TreeOp::fsync, 0, 0), 0);
  EXPECT_EQ(tree.stats().dirty_bytes, 0u);
}

TEST(BTreeShape, WideLevelsHoldOnlyTheChildrenThatExist) {
  // The top level of BTreeDefault has 2^34 slots: writes far apart create just their paths.
  MemoryFile mem;
  Quota quota;
  BTreeDefault tree(nullptr, quota, sized());
  SequentialDriver::Options o;
  o.executor = &mem;
  SequentialDriver driver(o);
  std::uint8_t b = 1;
  for (std::uint64_t off : {std::uint64_t{0}, std::uint64_t{1} << 40, std::uint64_t{1} << 62, ~std::uint64_t{0}})
    ASSERT_EQ(run_op(driver, tree, TreeOp::write, off, 1, &b), 1);
  EXPECT_EQ(tree.stats().nodes, 1u + 4 * 3);  // root + (1 GiB, 2 MiB, 4 KiB) per write
  EXPECT_EQ(tree.stats().blocks, 4u);
  EXPECT_EQ(tree.check_invariants(), "");
  // Dropping everything gives the memory back and prunes the empty paths.
  ASSERT_EQ(run_op(driver, tree, TreeOp::drop, 0, 0), 0);
  EXPECT_EQ(tree.stats().blocks, 0u);
  EXPECT_EQ(quota.used(), 0u);
  ASSERT_EQ(run_op(driver, tree, TreeOp::drop, 0, 0), 0);  // the second pass collects empty nodes
  EXPECT_EQ(tree.stats().nodes, 1u);
  EXPECT_EQ(tree.check_invariants(), "");
}

// The factory takes the shape at run time (the controller's open<Tree> and every BTree<Bits...>
// go through it), so it refuses what the template's static_asserts refuse, instead of building
// a tree whose root does not cover 2^64 or whose last level does not end at its block.
TEST(BTreeShape, TheRunTimeFactoryRefusesWhatTheTemplateRefuses) {
  Quota quota;
  const std::array<unsigned, 4> misprint{43, 9, 9, 12};  // sums to 73
  const std::array<unsigned, 2> short_sum{30, 30};
  const std::array<unsigned, 3> zero_level{32, 0, 32};
  EXPECT_THROW(detail::make_tree_core(4, misprint.data(), nullptr, quota, sized()), std::invalid_argument);
  EXPECT_THROW(detail::make_tree_core(2, short_sum.data(), nullptr, quota, sized()), std::invalid_argument);
  EXPECT_THROW(detail::make_tree_core(3, zero_level.data(), nullptr, quota, sized()), std::invalid_argument);
  EXPECT_THROW(detail::make_tree_core(0, misprint.data(), nullptr, quota, sized()), std::invalid_argument);
  detail::TreePtr core = detail::make_tree_core(4, BTreeDefault::kBits.data(), nullptr, quota, sized());
  ASSERT_NE(core, nullptr);
  EXPECT_EQ(core->levels(), 4u);
  EXPECT_EQ(core->node_shift(1), 30u);
  EXPECT_EQ(core->check_invariants(), "");
}

}  // namespace
}  // namespace tai::test::btree
