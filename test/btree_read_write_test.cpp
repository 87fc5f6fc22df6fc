// tai::BTree reads and writes: cached writes stay in memory until written back, read misses
// fill a block and later reads hit it, reads stop at the end of the file, partly dirty blocks
// read only their clean gaps, and bad input is refused at start().
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "btree_fuzz/btree_harness.hpp"
#include "tai/btree.hpp"
#include "tai/btree_driver.hpp"

namespace tai::test::btree {
namespace {

struct Fixture : TreeOnMemory<> {
  explicit Fixture(std::uint64_t file_size = 0) : TreeOnMemory<>(sized(file_size)) {}
  static BTreeOptions sized(std::uint64_t file_size) {
    BTreeOptions o;
    o.file_size = file_size;
    return o;
  }
  // Puts bytes in the file behind the tree's back (as if it had been there before).
  void preload(std::uint64_t off, const std::vector<std::uint8_t>& data) {
    Request r;
    r.op = Op::write;
    r.buffer = const_cast<std::uint8_t*>(data.data());
    r.offset = off;
    r.length = data.size();
    mem.execute(r);
  }
  RecordingExecutor& recorder = rec;
};

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(seed + i * 7);
  return v;
}

TEST(BTreeReadWrite, ACachedWriteReachesTheEngineOnlyAtWriteBack) {
  Fixture f;
  auto data = pattern(100, 1);
  ASSERT_EQ(f.op(TreeOp::write, 10, 100, data.data()), 100);
  EXPECT_EQ(f.mem.bytes_written(), 0u);
  BTreeStats st = f.tree->stats();
  EXPECT_EQ(st.blocks, 1u);
  EXPECT_EQ(st.cached_bytes, 4096u);
  EXPECT_EQ(st.dirty_bytes, 100u);
  std::vector<std::uint8_t> back(100);
  ASSERT_EQ(f.op(TreeOp::read, 10, 100, back.data()), 100);
  EXPECT_EQ(back, data);
  EXPECT_EQ(f.tree->stats().cache_hits, 1u);
  EXPECT_TRUE(f.recorder.log().empty());
  ASSERT_EQ(f.op(TreeOp::write_back, 0, 0), 0);
  auto log = f.recorder.log();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].offset, 10u);  // a fresh block was never read: only its dirty range goes
  EXPECT_EQ(log[0].length, 100u);
  EXPECT_EQ(f.tree->stats().dirty_bytes, 0u);
  EXPECT_EQ(f.tree->stats().bytes_to_engine, 100u);
  EXPECT_EQ(f.tree->check_invariants(), "");
}

TEST(BTreeReadWrite, AReadMissFillsTheBlockAndTheNextReadHits) {
  Fixture f(8192);
  auto file = pattern(8192, 3);
  f.preload(0, file);
  std::vector<std::uint8_t> back(100);
  ASSERT_EQ(f.op(TreeOp::read, 100, 100, back.data()), 100);
  EXPECT_EQ(0, std::memcmp(back.data(), file.data() + 100, 100));
  auto log = f.recorder.log();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].op, Op::read);
  EXPECT_EQ(log[0].offset, 0u);
  EXPECT_EQ(log[0].length, 4096u);
  ASSERT_EQ(f.op(TreeOp::read, 4000, 96, back.data()), 96);
  EXPECT_EQ(0, std::memcmp(back.data(), file.data() + 4000, 96));
  EXPECT_EQ(f.recorder.log().size(), 1u);
  EXPECT_EQ(f.tree->stats().fills, 1u);
  EXPECT_EQ(f.tree->stats().cache_hits, 1u);
}

TEST(BTreeReadWrite, ReadsStopAtTheEndOfTheFile) {
  Fixture f(1000);
  f.preload(0, pattern(1000, 5));
  std::vector<std::uint8_t> back(300, 0xEE);
  EXPECT_EQ(f.op(TreeOp::read, 900, 300, back.data()), 100);
  EXPECT_EQ(f.op(TreeOp::read, 1000, 300, back.data()), 0);
  EXPECT_EQ(f.op(TreeOp::read, 5000, 300, back.data()), 0);
  // A write past the end moves it; the hole between reads as zeros.
  auto data = pattern(10, 9);
  ASSERT_EQ(f.op(TreeOp::write, 6000, 10, data.data()), 10);
  EXPECT_EQ(f.tree->logical_size(), std::optional<std::uint64_t>(6010));
  std::vector<std::uint8_t> hole(300, 0xEE);
  EXPECT_EQ(f.op(TreeOp::read, 5000, 300, hole.data()), 300);
  EXPECT_EQ(hole, std::vector<std::uint8_t>(300, 0));
}

TEST(BTreeReadWrite, APartlyDirtyBlockReadsOnlyItsCleanGaps) {
  Fixture f(8192);
  auto file = pattern(8192, 11);
  f.preload(0, file);
  auto data = pattern(100, 77);
  ASSERT_EQ(f.op(TreeOp::write, 100, 100, data.data()), 100);
  // Inside the dirty range: no engine request.
  std::vector<std::uint8_t> back(4096);
  ASSERT_EQ(f.op(TreeOp::read, 120, 50, back.data()), 50);
  EXPECT_TRUE(f.recorder.log().empty());
  // Across it: the two clean gaps are read, the dirty bytes are kept.
  ASSERT_EQ(f.op(TreeOp::read, 0, 4096, back.data()), 4096);
  auto log = f.recorder.log();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].offset, 0u);
  EXPECT_EQ(log[0].length, 100u);
  EXPECT_EQ(log[1].offset, 200u);
  EXPECT_EQ(log[1].length, 3896u);
  auto want = file;
  std::memcpy(want.data() + 100, data.data(), 100);
  EXPECT_EQ(0, std::memcmp(back.data(), want.data(), 4096));
  EXPECT_EQ(f.tree->stats().dirty_bytes, 100u);
}

TEST(BTreeReadWrite, WritesAcrossNodeBoundariesOfEveryLevelReadBack) {
  Fixture f;
  for (std::uint64_t boundary : {std::uint64_t{4096}, std::uint64_t{2} << 20, std::uint64_t{1} << 30}) {
    auto data = pattern(64, static_cast<std::uint8_t>(boundary));
    ASSERT_EQ(f.op(TreeOp::write, boundary - 32, 64, data.data()), 64);
    std::vector<std::uint8_t> back(64);
    ASSERT_EQ(f.op(TreeOp::read, boundary - 32, 64, back.data()), 64);
    EXPECT_EQ(back, data) << "boundary " << boundary;
  }
  EXPECT_EQ(f.tree->stats().blocks, 6u);
  ASSERT_EQ(f.op(TreeOp::fsync, 0, 0), 0);
  EXPECT_EQ(f.mem.bytes_written(), 3u * 64);
  EXPECT_EQ(f.tree->check_invariants(), "");
}

TEST(BTreeReadWrite, TheLastBytesOfTheAddressSpaceWorkInCache) {
  Fixture f;
  auto data = pattern(100, 13);
  const std::uint64_t off = ~std::uint64_t{0} - 99;  // ends exactly at 2^64
  ASSERT_EQ(f.op(TreeOp::write, off, 100, data.data()), 100);
  std::vector<std::uint8_t> back(100);
  ASSERT_EQ(f.op(TreeOp::read, off, 100, back.data()), 100);
  EXPECT_EQ(back, data);
  EXPECT_EQ(f.tree->logical_size(), std::optional<std::uint64_t>(~std::uint64_t{0}));
}

TEST(BTreeReadWrite, BadInputIsRefusedAtStart) {
  Fixture f;
  std::uint8_t b = 0;
  Operation zero(TreeOp::write, 0, 0, &b);
  f.driver->start(*f.tree, zero);
  EXPECT_TRUE(zero.done());  // completed inside start()
  EXPECT_EQ(zero.result(), 0);
  Operation null_buffer(TreeOp::read, 0, 10, nullptr);
  f.driver->start(*f.tree, null_buffer);
  ASSERT_TRUE(null_buffer.done());
  EXPECT_EQ(null_buffer.result(), -EFAULT);
  Operation past_end(TreeOp::write, ~std::uint64_t{0} - 9, 11, &b);
  f.driver->start(*f.tree, past_end);
  ASSERT_TRUE(past_end.done());
  EXPECT_EQ(past_end.result(), -EOVERFLOW);
  EXPECT_EQ(past_end.error(), std::errc::value_too_large);
  EXPECT_TRUE(f.tree->idle());
}

TEST(BTreeReadWrite, AboveTheEnginesOffsetLimitTheEngineErrorIsReported) {
  // The engine layer refuses ends past 2^63 - 1: cached data there is fine until it must reach
  // the engine; then the engine's EOVERFLOW comes back, and the block stays dirty.
  auto engine = engines::make_null({});
  auto file = engine->open("null", OpenMode(Open::read | Open::write)).value();
  Quota quota;
  BTreeDefault tree(file.get(), quota);
  SequentialDriver driver;
  auto data = pattern(10, 1);
  const std::uint64_t off = std::uint64_t{1} << 63;
  ASSERT_EQ(run_op(driver, tree, TreeOp::write, off, 10, data.data()), 10);
  std::vector<std::uint8_t> back(10);
  EXPECT_EQ(run_op(driver, tree, TreeOp::read, off, 10, back.data()), 10);
  EXPECT_EQ(back, data);
  EXPECT_EQ(run_op(driver, tree, TreeOp::write_back, 0, 0), -EOVERFLOW);
  EXPECT_EQ(tree.stats().dirty_bytes, 10u);
  EXPECT_EQ(tree.stats().write_back_errors, 1u);
  EXPECT_EQ(run_op(driver, tree, TreeOp::read, off + 4096, 10, back.data()), -EOVERFLOW);  // a miss
  EXPECT_EQ(run_op(driver, tree, TreeOp::drop, 0, 0), -EOVERFLOW);  // cannot write back: kept
  EXPECT_EQ(tree.stats().dirty_bytes, 10u);
  EXPECT_EQ(tree.check_invariants(), "");
  (void)engine->close(*file);
}

TEST(BTreeReadWrite, AFileWithoutSizeNeverShortensReads) {
  auto engine = engines::make_null({});
  auto file = engine->open("null", OpenMode(Open::read | Open::write)).value();
  Quota quota;
  BTreeDefault tree(file.get(), quota);
  EXPECT_FALSE(tree.logical_size().has_value());
  SequentialDriver driver;
  std::vector<std::uint8_t> back(10000, 1);
  EXPECT_EQ(run_op(driver, tree, TreeOp::read, 123456, back.size(), back.data()), 10000);
  EXPECT_EQ(back, std::vector<std::uint8_t>(10000, 0));
  (void)engine->close(*file);
}

}  // namespace
}  // namespace tai::test::btree
