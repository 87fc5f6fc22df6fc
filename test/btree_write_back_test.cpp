// Write-back: dirty ranges reach the engine grouped, a direct-I/O file gets the aligned superset
// straight from the block, a failed write-back keeps the block dirty and is reported by the next
// fsync (once), and fsync writes everything back before the engine's sync.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "btree_fuzz/btree_harness.hpp"
#include "support/direct_tree_rig.hpp"
#include "support/test_env.hpp"
#include "tai/btree.hpp"
#include "tai/btree_driver.hpp"

namespace tai::test::btree {
namespace {

std::vector<std::uint8_t> bytes(std::size_t n, std::uint8_t v) { return std::vector<std::uint8_t>(n, v); }

TEST(BTreeWriteBack, RangesOfAValidBlockGoInOneRequestWhenTheGapsAreSmall) {
  MemoryFile mem;
  RecordingExecutor rec(mem);
  Quota quota;
  BTreeOptions o;
  o.write_around_bytes = 0;  // every write cached: the test is about what the cache does
  o.file_size = 0;
  BTreeDefault tree(nullptr, quota, o);
  SequentialDriver::Options d;
  d.executor = &rec;
  SequentialDriver driver(d);
  auto full = bytes(4096, 1);
  ASSERT_EQ(run_op(driver, tree, TreeOp::write, 0, 4096, full.data()), 4096);  // valid block
  ASSERT_EQ(run_op(driver, tree, TreeOp::write_back, 0, 0), 0);
  rec.clear();
  auto b = bytes(10, 2);
  ASSERT_EQ(run_op(driver, tree, TreeOp::write, 100, 10, b.data()), 10);
  ASSERT_EQ(run_op(driver, tree, TreeOp::write, 3000, 10, b.data()), 10);
  ASSERT_EQ(run_op(driver, tree, TreeOp::write_back, 0, 0), 0);
  auto log = rec.log();
  ASSERT_EQ(log.size(), 1u);  // the 2890-byte gap is clean and valid: cheaper than a request
  EXPECT_EQ(log[0].offset, 100u);
  EXPECT_EQ(log[0].length, 2910u);
  // A block that was never read sends each range alone (its gaps are unknown).
  rec.clear();
  ASSERT_EQ(run_op(driver, tree, TreeOp::write, 8192 + 100, 10, b.data()), 10);
  ASSERT_EQ(run_op(driver, tree, TreeOp::write, 8192 + 3000, 10, b.data()), 10);
  ASSERT_EQ(run_op(driver, tree, TreeOp::write_back, 0, 0), 0);
  log = rec.log();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].length, 10u);
  EXPECT_EQ(log[1].length, 10u);
  EXPECT_EQ(tree.stats().dirty_bytes, 0u);
}

TEST(BTreeWriteBack, AFailedWriteBackStaysDirtyAndTheNextFsyncReportsIt) {
  MemoryFile mem;
  Quota quota;
  BTreeOptions o;
  o.write_around_bytes = 0;  // every write cached: the test is about what the cache does
  o.file_size = 0;
  BTreeDefault tree(nullptr, quota, o);
  SequentialDriver::Options d;
  d.executor = &mem;
  SequentialDriver driver(d);
  auto b = bytes(100, 7);
  ASSERT_EQ(run_op(driver, tree, TreeOp::write, 0, 100, b.data()), 100);
  mem.fail_writes(-EIO);
  // A background write-back (what a recycle or flush round does) fails: recorded, kept dirty.
  EXPECT_EQ(run_op(driver, tree, TreeOp::write_back, 0, 0), -EIO);
  EXPECT_EQ(tree.stats().dirty_bytes, 100u);
  EXPECT_EQ(tree.recorded_error(), std::errc::io_error);
  mem.fail_writes(0);
  // The next fsync writes the block again (now it works) but reports the earlier failure once.
  EXPECT_EQ(run_op(driver, tree, TreeOp::fsync, 0, 0), -EIO);
  EXPECT_EQ(tree.stats().dirty_bytes, 0u);
  EXPECT_FALSE(tree.recorded_error());
  EXPECT_EQ(run_op(driver, tree, TreeOp::fsync, 0, 0), 0);
  EXPECT_EQ(mem.bytes_written(), 100u);
  // An fsync whose own write-back fails fails, and so does the next one until a write-back works.
  ASSERT_EQ(run_op(driver, tree, TreeOp::write, 50, 100, b.data()), 100);
  mem.fail_writes(-ENOSPC);
  EXPECT_EQ(run_op(driver, tree, TreeOp::fdatasync, 0, 0), -ENOSPC);
  EXPECT_EQ(run_op(driver, tree, TreeOp::fdatasync, 0, 0), -ENOSPC);
  EXPECT_EQ(tree.stats().dirty_bytes, 100u);
  EXPECT_EQ(tree.stats().write_back_errors, 3u);
  mem.fail_writes(0);
  EXPECT_EQ(run_op(driver, tree, TreeOp::fdatasync, 0, 0), 0);
  EXPECT_EQ(tree.stats().dirty_bytes, 0u);
  EXPECT_EQ(tree.check_invariants(), "");
}

TEST(BTreeWriteBack, AFailedEngineSyncFailsTheFsync) {
  MemoryFile mem;
  Quota quota;
  BTreeOptions o;
  o.write_around_bytes = 0;  // every write cached: the test is about what the cache does
  o.file_size = 0;
  BTreeDefault tree(nullptr, quota, o);
  SequentialDriver::Options d;
  d.executor = &mem;
  SequentialDriver driver(d);
  mem.fail_syncs(-EIO);
  EXPECT_EQ(run_op(driver, tree, TreeOp::fsync, 0, 0), -EIO);
  mem.fail_syncs(0);
  EXPECT_EQ(run_op(driver, tree, TreeOp::fsync, 0, 0), 0);
  EXPECT_EQ(mem.syncs(), 2u);
}

TEST(BTreeWriteBack, FsyncWritesEverythingBackBeforeTheEngineSync) {
  MemoryFile mem;
  RecordingExecutor rec(mem);
  Quota quota;
  BTreeOptions o;
  o.write_around_bytes = 0;  // every write cached: the test is about what the cache does
  o.file_size = 0;
  BTreeDefault tree(nullptr, quota, o);
  SequentialDriver::Options d;
  d.executor = &rec;
  d.defer_io = true;
  SequentialDriver driver(d);
  auto b = bytes(10, 3);
  std::vector<std::unique_ptr<Operation>> ops;
  for (std::uint64_t i = 0; i < 20; ++i) {
    ops.push_back(std::make_unique<Operation>(TreeOp::write, i * 100000, 10, b.data()));
    driver.start(tree, *ops.back());
  }
  Operation sync(TreeOp::fsync, 0, 0);
  driver.start(tree, sync);
  driver.run();
  ASSERT_TRUE(sync.done());
  EXPECT_EQ(sync.result(), 0);
  auto log = rec.log();
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log.back().op, Op::fsync);
  std::size_t writes = 0;
  for (auto& e : log) writes += e.op == Op::write;
  EXPECT_EQ(writes, 20u);
}

TEST(BTreeWriteBack, ADirectFileGetsTheAlignedSupersetOfAValidBlock) {
  ScratchDir dir;
  BTreeOptions cached_writes;
  cached_writes.write_around_bytes = 0;  // the 8 KiB write must fill blocks, not go around them
  std::string why;
  auto rig = DirectTreeRig::make(dir, cached_writes, why);
  if (!rig) GTEST_SKIP() << why;
  BTreeDefault& tree = *rig->tree;
  SequentialDriver& driver = rig->driver;
  RecordingExecutor& rec = rig->rec;
  const std::uint64_t align = rig->align;
  auto full = bytes(8192, 1);
  ASSERT_EQ(run_op(driver, tree, TreeOp::write, 0, 8192, full.data()), 8192);
  ASSERT_EQ(run_op(driver, tree, TreeOp::fsync, 0, 0), 0);
  rec.clear();
  auto b = bytes(100, 2);
  ASSERT_EQ(run_op(driver, tree, TreeOp::write, 4096 + 1000, 100, b.data()), 100);
  ASSERT_EQ(run_op(driver, tree, TreeOp::write_back, 0, 0), 0);
  auto log = rec.log();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].offset % align, 0u);
  EXPECT_EQ(log[0].length % align, 0u);
  EXPECT_LE(log[0].offset, 4096u + 1000);
  EXPECT_GE(log[0].offset + log[0].length, 4096u + 1100);
  // A block that was never read: the exact range, the engine base does the read-modify-write.
  rec.clear();
  ASSERT_EQ(run_op(driver, tree, TreeOp::write, 8192 + 10, 20, b.data()), 20);
  ASSERT_EQ(run_op(driver, tree, TreeOp::fsync, 0, 0), 0);
  log = rec.log();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].offset, 8192u + 10);
  EXPECT_EQ(log[0].length, 20u);
  (void)rig->engine->close(*rig->file);
  // The file holds exactly what was written, and is not longer.
  const int fd = ::open(dir.file("direct.bin").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(::lseek(fd, 0, SEEK_END), 8192 + 30);
  std::vector<std::uint8_t> got(8192 + 30);
  ASSERT_EQ(::pread(fd, got.data(), got.size(), 0), static_cast<ssize_t>(got.size()));
  ::close(fd);
  auto want = full;
  want.resize(8192 + 30, 0);
  std::memcpy(want.data() + 4096 + 1000, b.data(), 100);
  std::memcpy(want.data() + 8192 + 10, b.data(), 20);
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace tai::test::btree
