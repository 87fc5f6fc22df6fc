// The tiny-write rule: a write that would give a block a fifth dirty range goes straight to the
// engine (and updates the clean cached copy) when one request costs less than writing back the
// smallest gap; otherwise the smallest gap is bridged. See tai/btree.hpp.
#include <gtest/gtest.h>

#include <vector>

#include "btree_fuzz/btree_harness.hpp"
#include "tai/btree.hpp"

namespace tai::test::btree {
namespace {

constexpr std::uint64_t k2M = std::uint64_t{2} << 20;

struct Fixture : TreeOnMemory<> {
  explicit Fixture(bool rule) : TreeOnMemory<>(options(rule)) {}
  static BTreeOptions options(bool rule) {
    BTreeOptions o = empty_file();
    o.tiny_write_rule = rule;
    return o;
  }
  // A clean, valid 2 MiB block with four far-apart dirty ranges of 10 bytes.
  void prepare() {
    std::vector<std::uint8_t> big(k2M, 1);
    ASSERT_EQ(run_op(*driver, *tree, TreeOp::write, 0, k2M, big.data()), static_cast<std::int64_t>(k2M));
    ASSERT_EQ(run_op(*driver, *tree, TreeOp::write_back, 0, 0), 0);
    for (std::uint64_t at : {std::uint64_t{0}, std::uint64_t{512} << 10, std::uint64_t{1} << 20, std::uint64_t{1536} << 10})
      ASSERT_EQ(run_op(*driver, *tree, TreeOp::write, at, 10, ten.data()), 10);
    ASSERT_EQ(tree->stats().dirty_bytes, 40u);
    rec.clear();
  }
  std::vector<std::uint8_t> ten = std::vector<std::uint8_t>(10, 5);
};

TEST(BTreeTinyWrite, AFarTinyWriteGoesStraightToTheEngine) {
  Fixture f(true);
  f.prepare();
  std::vector<std::uint8_t> tiny(8, 9);
  const std::uint64_t at = std::uint64_t{1792} << 10;  // 256 KiB from the nearest range
  ASSERT_EQ(run_op(*f.driver, *f.tree, TreeOp::write, at, 8, tiny.data()), 8);
  auto log = f.rec.log();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].op, Op::write);
  EXPECT_EQ(log[0].offset, at);
  EXPECT_EQ(log[0].length, 8u);
  EXPECT_EQ(f.tree->stats().write_throughs, 1u);
  EXPECT_EQ(f.tree->stats().dirty_bytes, 40u);  // unchanged: the write is clean in the cache
  std::vector<std::uint8_t> back(8);
  ASSERT_EQ(run_op(*f.driver, *f.tree, TreeOp::read, at, 8, back.data()), 8);
  EXPECT_EQ(back, tiny);  // the cached copy was updated
  EXPECT_EQ(f.rec.log().size(), 1u);
}

TEST(BTreeTinyWrite, ANearWriteBridgesTheSmallestGap) {
  Fixture f(true);
  f.prepare();
  std::vector<std::uint8_t> tiny(8, 9);
  const std::uint64_t at = (std::uint64_t{1} << 20) + 1000;  // 990 bytes past the range at 1 MiB
  ASSERT_EQ(run_op(*f.driver, *f.tree, TreeOp::write, at, 8, tiny.data()), 8);
  EXPECT_TRUE(f.rec.log().empty());
  EXPECT_EQ(f.tree->stats().write_throughs, 0u);
  EXPECT_EQ(f.tree->stats().dirty_bytes, 40u + 990 + 8);
  ASSERT_EQ(run_op(*f.driver, *f.tree, TreeOp::write_back, 0, 0), 0);
  EXPECT_EQ(f.mem.bytes_written(), k2M + 40 + 990 + 8);
}

TEST(BTreeTinyWrite, WithoutTheRuleFarWritesBridgeToo) {
  Fixture f(false);
  f.prepare();
  std::vector<std::uint8_t> tiny(8, 9);
  const std::uint64_t at = std::uint64_t{1792} << 10;
  ASSERT_EQ(run_op(*f.driver, *f.tree, TreeOp::write, at, 8, tiny.data()), 8);
  EXPECT_TRUE(f.rec.log().empty());
  EXPECT_EQ(f.tree->stats().write_throughs, 0u);
  EXPECT_GT(f.tree->stats().dirty_bytes, 40u + (std::uint64_t{256} << 10) - 100);  // a 256 KiB gap bridged
}

TEST(BTreeTinyWrite, ABlockThatWasNeverReadCannotBridge) {
  Fixture f(false);  // even without the rule: the gap's bytes are unknown
  std::vector<std::uint8_t> b(4, 3);
  for (std::uint64_t at : {0, 100, 200, 300}) ASSERT_EQ(run_op(*f.driver, *f.tree, TreeOp::write, at, 4, b.data()), 4);
  ASSERT_TRUE(f.rec.log().empty());
  ASSERT_EQ(run_op(*f.driver, *f.tree, TreeOp::write, 400, 4, b.data()), 4);
  ASSERT_EQ(f.rec.log().size(), 1u);
  EXPECT_EQ(f.tree->stats().write_throughs, 1u);
  EXPECT_EQ(f.tree->stats().dirty_bytes, 16u);
  std::vector<std::uint8_t> back(404);
  ASSERT_EQ(run_op(*f.driver, *f.tree, TreeOp::read, 0, 404, back.data()), 404);  // fills the gaps
  EXPECT_EQ(back[400], 3);
  EXPECT_EQ(back[50], 0);
}

}  // namespace
}  // namespace tai::test::btree
