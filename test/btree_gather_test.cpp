// Gathered write-back and writes across many blocks (tai/btree.hpp, "Gathered write-back" and
// "Writes across many blocks"): adjacent dirty blocks under one parent reach the engine in ONE
// write (up to BTreeOptions::gather_bytes, through a staging copy charged to the quota), a
// failed or short gathered write fails every block it covered exactly as a write of its own
// would (all stay dirty, the error is recorded and reported by the next fsync, a failed engine
// sync makes them all dirty again), and a write over many idle blocks runs in one step at their
// parent. Typed over trees whose gathering parent sits at different depths.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include "btree_fuzz/btree_harness.hpp"
#include "tai/btree.hpp"
#include "tai/btree_driver.hpp"

namespace tai::test::btree {
namespace {

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(seed * 31 + i * 7 + (i >> 12));
  return v;
}

/// Passes requests on to `inner`; fails (or shortens to half) the writes it is told to.
class FaultyWrites final : public IoExecutor {
 public:
  explicit FaultyWrites(IoExecutor& inner) : inner_(inner) {}
  /// The next `n` writes fail with `err` (0: they are cut to half their length instead).
  void fail_next(unsigned n, std::int64_t err) {
    left_ = n;
    err_ = err;
  }
  Completion execute(const Request& r) override {
    if (r.op == Op::write && left_ > 0) {
      --left_;
      if (err_ != 0) return {r.user_data, err_};
      Request half = r;
      half.length = r.length / 2;
      return inner_.execute(half);
    }
    return inner_.execute(r);
  }

 private:
  IoExecutor& inner_;
  unsigned left_ = 0;
  std::int64_t err_ = 0;
};

/// A tree shape and how its gathered write-back goes out: vectored (one segment per block,
/// from the blocks) or through the staging copy.
template <class T, bool Vectored>
struct Config {
  using Tree = T;
  static constexpr bool vectored = Vectored;
  static constexpr auto kLevels = T::kLevels;
};

/// A tree over an in-memory file (empty at first) whose requests are logged.
template <class C>
struct Fixture {
  using Tree = typename C::Tree;
  explicit Fixture(std::uint64_t gather_bytes = BTreeOptions{}.gather_bytes, Quota* q = nullptr)
      : quota(q != nullptr ? *q : own_quota),
        tree(nullptr, quota, [&] {
          BTreeOptions o;
          o.write_around_bytes = 0;  // every write cached: the test is about what the cache does
          o.file_size = 0;
          o.gather_bytes = gather_bytes;
          o.vectored_write_back = C::vectored;
          return o;
        }()) {}
  ~Fixture() {
    if (!C::vectored) EXPECT_EQ(mem.vectored(), 0u) << "vectored_write_back off: no vectored write";
  }
  MemoryFile mem;
  FaultyWrites faults{mem};
  RecordingExecutor rec{faults};
  Quota own_quota;
  Quota& quota;
  Tree tree;
  SequentialDriver driver{[this] {
    SequentialDriver::Options d;
    d.executor = &rec;
    return d;
  }()};
  std::int64_t op(TreeOp kind, std::uint64_t offset = 0, std::uint64_t length = 0, std::uint8_t* data = nullptr) {
    return run_op(driver, tree, kind, offset, length, data);
  }
  std::size_t engine_writes_logged() const {
    std::size_t n = 0;
    for (const auto& e : rec.log()) n += e.op == Op::write;
    return n;
  }
  bool file_holds(std::uint64_t offset, const std::vector<std::uint8_t>& data) const {
    std::vector<std::uint8_t> got(data.size());
    mem.image().bytes.read(offset, got.size(), got.data());
    return got == data;
  }
};

template <class Tree>
class BTreeGather : public testing::Test {};
// The gathering parent: the 2 MiB node (depth 2), the root's sparse table, a 64 KiB node.
using Trees = testing::Types<Config<BTreeDefault, true>, Config<BTree<52, 12>, true>, Config<BTree<48, 4, 12>, true>,
                             Config<BTreeDefault, false>, Config<BTree<52, 12>, false>,
                             Config<BTree<48, 4, 12>, false>>;
TYPED_TEST_SUITE(BTreeGather, Trees);

TYPED_TEST(BTreeGather, TenAdjacentDirtyBlocksGoInOneEngineWrite) {
  Fixture<TypeParam> f;
  auto data = pattern(10 * 4096, 1);
  ASSERT_EQ(f.op(TreeOp::write, 0, data.size(), data.data()), static_cast<std::int64_t>(data.size()));
  ASSERT_EQ(f.tree.stats().dirty_blocks, 10u);
  ASSERT_EQ(f.op(TreeOp::write_back), 0);
  const auto log = f.rec.log();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].op, Op::write);
  EXPECT_EQ(log[0].offset, 0u);
  EXPECT_EQ(log[0].length, 10u * 4096);
  const BTreeStats s = f.tree.stats();
  EXPECT_EQ(s.engine_writes, 1u);
  EXPECT_EQ(s.gathered_blocks, 10u);
  EXPECT_EQ(s.bytes_to_engine, 10u * 4096);
  EXPECT_EQ(s.dirty_bytes, 0u);
  EXPECT_EQ(s.blocks, 10u) << "the blocks stay cached, clean";
  EXPECT_EQ(f.quota.used(), 10u * 4096) << "the staging copy went back to the quota";
  EXPECT_EQ(f.mem.vectored(), TypeParam::vectored ? 1u : 0u);
  if (TypeParam::vectored) {
    EXPECT_EQ(f.quota.peak(), 10u * 4096) << "vectored: no memory beyond the blocks";
  } else {
    EXPECT_GT(f.quota.peak(), 10u * 4096) << "staged: the copy is charged too";
  }
  EXPECT_TRUE(f.file_holds(0, data));
  EXPECT_EQ(f.tree.check_invariants(), "");
}

TYPED_TEST(BTreeGather, AnUnalignedRecordIsOneWriteFromItsFirstToItsLastByte) {
  Fixture<TypeParam> f;
  auto data = pattern(37 * 1000 + 123, 2);  // starts and ends inside blocks
  const std::uint64_t at = 4096 + 700;
  ASSERT_EQ(f.op(TreeOp::write, at, data.size(), data.data()), static_cast<std::int64_t>(data.size()));
  ASSERT_EQ(f.op(TreeOp::fsync), 0);
  const auto log = f.rec.log();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].op, Op::write);
  EXPECT_EQ(log[0].offset, at);
  EXPECT_EQ(log[0].length, data.size());
  EXPECT_EQ(log[1].op, Op::fsync);
  EXPECT_TRUE(f.file_holds(at, data));
  EXPECT_EQ(f.tree.check_invariants(), "");
}

TYPED_TEST(BTreeGather, GapsSplitTheWriteAndOnlyDirtyBytesAreWritten) {
  Fixture<TypeParam> f;
  auto a = pattern(3 * 4096, 3), b = pattern(4 * 4096, 4), c = pattern(100, 5);
  ASSERT_EQ(f.op(TreeOp::write, 0, a.size(), a.data()), static_cast<std::int64_t>(a.size()));  // blocks 0-2
  ASSERT_EQ(f.op(TreeOp::write, 4 * 4096, b.size(), b.data()), static_cast<std::int64_t>(b.size()));  // 4-7
  // Block 8 holds [0, 100) only: it ends the run of 4-7. Block 9's range starts inside it.
  ASSERT_EQ(f.op(TreeOp::write, 8 * 4096, c.size(), c.data()), 100);
  ASSERT_EQ(f.op(TreeOp::write, 9 * 4096 + 50, c.size(), c.data()), 100);
  ASSERT_EQ(f.op(TreeOp::write_back), 0);
  const auto log = f.rec.log();
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[0].offset, 0u);
  EXPECT_EQ(log[0].length, 3u * 4096);
  EXPECT_EQ(log[1].offset, 4u * 4096);
  EXPECT_EQ(log[1].length, 4u * 4096 + 100);
  EXPECT_EQ(log[2].offset, 9u * 4096 + 50);
  EXPECT_EQ(log[2].length, 100u);
  EXPECT_EQ(f.tree.stats().gathered_blocks, 3u + 5u);
  EXPECT_EQ(f.tree.stats().dirty_bytes, 0u);
  EXPECT_EQ(f.mem.bytes_written(), a.size() + b.size() + 2 * c.size());
  EXPECT_EQ(f.tree.check_invariants(), "");
}

TYPED_TEST(BTreeGather, GatherBytesBoundsOneWriteAndZeroTurnsGatheringOff) {
  {
    Fixture<TypeParam> f(16384);
    auto data = pattern(10 * 4096, 6);
    ASSERT_EQ(f.op(TreeOp::write, 0, data.size(), data.data()), static_cast<std::int64_t>(data.size()));
    ASSERT_EQ(f.op(TreeOp::write_back), 0);
    const auto log = f.rec.log();
    ASSERT_EQ(log.size(), 3u);  // 4 + 4 + 2 blocks
    EXPECT_EQ(log[0].length, 16384u);
    EXPECT_EQ(log[1].length, 16384u);
    EXPECT_EQ(log[2].length, 8192u);
    EXPECT_TRUE(f.file_holds(0, data));
  }
  {
    Fixture<TypeParam> f(0);
    auto data = pattern(10 * 4096, 7);
    ASSERT_EQ(f.op(TreeOp::write, 0, data.size(), data.data()), static_cast<std::int64_t>(data.size()));
    ASSERT_EQ(f.op(TreeOp::write_back), 0);
    EXPECT_EQ(f.engine_writes_logged(), 10u);
    EXPECT_EQ(f.tree.stats().gathered_blocks, 0u);
    EXPECT_TRUE(f.file_holds(0, data));
    EXPECT_EQ(f.tree.check_invariants(), "");
  }
}

TYPED_TEST(BTreeGather, AQuotaWithoutRoomForTheCopyWritesBlockByBlock) {
  Quota tight(10 * 4096, 10 * 4096);  // exactly the blocks: no room for a staging copy
  Fixture<TypeParam> f(BTreeOptions{}.gather_bytes, &tight);
  auto data = pattern(10 * 4096, 8);
  ASSERT_EQ(f.op(TreeOp::write, 0, data.size(), data.data()), static_cast<std::int64_t>(data.size()));
  ASSERT_EQ(f.tree.stats().blocks, 10u);
  ASSERT_EQ(f.op(TreeOp::fsync), 0);
  // A vectored write needs no memory: it gathers under the full quota too.
  EXPECT_EQ(f.engine_writes_logged(), TypeParam::vectored ? 1u : 10u);
  EXPECT_EQ(f.tree.stats().gathered_blocks, TypeParam::vectored ? 10u : 0u);
  EXPECT_EQ(tight.peak(), 10u * 4096) << "never above the strict limit";
  EXPECT_EQ(tight.denials(), 0u) << "the gather checks for room before asking";
  EXPECT_TRUE(f.file_holds(0, data));
  EXPECT_EQ(f.tree.check_invariants(), "");
}

TYPED_TEST(BTreeGather, AFailedGatheredWriteFailsEveryBlockItCoveredAndTheNextFsync) {
  Fixture<TypeParam> f;
  auto data = pattern(10 * 4096, 9);
  ASSERT_EQ(f.op(TreeOp::write, 0, data.size(), data.data()), static_cast<std::int64_t>(data.size()));
  f.faults.fail_next(1, -EIO);
  // A background write-back (a flush round) fails: every block stays dirty, the error is kept.
  EXPECT_EQ(f.op(TreeOp::write_back), -EIO);
  EXPECT_EQ(f.engine_writes_logged(), 1u) << "one gathered write";
  BTreeStats s = f.tree.stats();
  EXPECT_EQ(s.write_back_errors, 10u) << "each block it covered failed";
  EXPECT_EQ(s.dirty_bytes, 10u * 4096);
  EXPECT_EQ(s.dirty_blocks, 10u);
  EXPECT_EQ(s.bytes_to_engine, 0u);
  EXPECT_EQ(f.tree.recorded_error(), std::errc::io_error);
  EXPECT_EQ(f.quota.used(), 10u * 4096) << "the staging copy went back to the quota";
  // The next fsync writes them again (in one write) but reports the failure, once.
  EXPECT_EQ(f.op(TreeOp::fsync), -EIO);
  EXPECT_EQ(f.engine_writes_logged(), 2u);
  EXPECT_EQ(f.tree.stats().dirty_bytes, 0u);
  EXPECT_TRUE(f.file_holds(0, data));
  EXPECT_EQ(f.op(TreeOp::fsync), 0);
  EXPECT_EQ(f.engine_writes_logged(), 2u) << "nothing left to write";
  EXPECT_EQ(f.tree.check_invariants(), "");
}

TYPED_TEST(BTreeGather, AFailedGatheredWriteInsideAnFsyncFailsItAndTheBlocksStayDirty) {
  Fixture<TypeParam> f;
  auto data = pattern(10 * 4096, 10);
  ASSERT_EQ(f.op(TreeOp::write, 0, data.size(), data.data()), static_cast<std::int64_t>(data.size()));
  f.faults.fail_next(2, -ENOSPC);
  EXPECT_EQ(f.op(TreeOp::fdatasync), -ENOSPC);
  EXPECT_EQ(f.op(TreeOp::fdatasync), -ENOSPC) << "its write-back failed again";
  EXPECT_EQ(f.tree.stats().dirty_bytes, 10u * 4096);
  EXPECT_EQ(f.tree.stats().write_back_errors, 20u);
  EXPECT_EQ(f.op(TreeOp::fdatasync), 0);
  EXPECT_TRUE(f.file_holds(0, data));
  EXPECT_EQ(f.tree.stats().dirty_bytes, 0u);
  EXPECT_EQ(f.tree.check_invariants(), "");
}

TYPED_TEST(BTreeGather, AShortGatheredWriteFailsEveryBlockItCovered) {
  Fixture<TypeParam> f;
  auto data = pattern(10 * 4096, 11);
  ASSERT_EQ(f.op(TreeOp::write, 0, data.size(), data.data()), static_cast<std::int64_t>(data.size()));
  f.faults.fail_next(1, 0);  // half of it reaches the file
  EXPECT_EQ(f.op(TreeOp::fsync), -EIO);
  const BTreeStats s = f.tree.stats();
  EXPECT_EQ(s.write_back_errors, 10u) << "which blocks reached the file is not known: all failed";
  EXPECT_EQ(s.dirty_bytes, 10u * 4096);
  EXPECT_EQ(s.bytes_to_engine, 5u * 4096) << "the bytes that did reach the engine are counted";
  EXPECT_FALSE(f.tree.recorded_error()) << "the failing fsync itself reported it";
  EXPECT_EQ(f.op(TreeOp::fsync), 0) << "writes every block again";
  EXPECT_EQ(f.engine_writes_logged(), 2u);
  EXPECT_EQ(f.tree.stats().dirty_bytes, 0u);
  EXPECT_TRUE(f.file_holds(0, data));
  EXPECT_EQ(f.tree.check_invariants(), "");
}

TYPED_TEST(BTreeGather, AFailedEngineSyncMakesEveryGatheredBlockDirtyAgain) {
  Fixture<TypeParam> f;
  auto data = pattern(10 * 4096, 12);
  ASSERT_EQ(f.op(TreeOp::write, 0, data.size(), data.data()), static_cast<std::int64_t>(data.size()));
  f.mem.fail_syncs(-EIO);
  EXPECT_EQ(f.op(TreeOp::fsync), -EIO);
  EXPECT_EQ(f.tree.sync_error(), std::errc::io_error);
  EXPECT_EQ(f.tree.stats().dirty_bytes, 10u * 4096) << "the redirty reached every block the gathered write covered";
  f.mem.fail_syncs(0);
  EXPECT_EQ(f.op(TreeOp::fsync), 0);
  EXPECT_EQ(f.engine_writes_logged(), 2u) << "written again, gathered again";
  EXPECT_EQ(f.mem.bytes_written(), 2u * 10 * 4096);
  EXPECT_FALSE(f.tree.sync_error());
  EXPECT_TRUE(f.file_holds(0, data));
  EXPECT_EQ(f.tree.check_invariants(), "");
}

TYPED_TEST(BTreeGather, ADropWritesBackGatheredAndFreesEveryBlock) {
  Fixture<TypeParam> f;
  auto data = pattern(10 * 4096, 13);
  ASSERT_EQ(f.op(TreeOp::write, 0, data.size(), data.data()), static_cast<std::int64_t>(data.size()));
  ASSERT_EQ(f.op(TreeOp::drop), 0);
  EXPECT_EQ(f.engine_writes_logged(), 1u);
  EXPECT_EQ(f.tree.stats().blocks, 0u);
  EXPECT_EQ(f.quota.used(), 0u);
  EXPECT_TRUE(f.file_holds(0, data));
  EXPECT_EQ(f.tree.check_invariants(), "");
}

TYPED_TEST(BTreeGather, AWriteOverManyIdleBlocksIsOneStepAtTheirParent) {
  Fixture<TypeParam> f;
  auto data = pattern(10 * 4096, 14);
  // Twice: into fresh blocks (allocated by the parent's step), then into the cached ones.
  for (int round = 0; round < 2; ++round) {
    const std::uint64_t before = f.driver.steps_run();
    ASSERT_EQ(f.op(TreeOp::write, 0, data.size(), data.data()), static_cast<std::int64_t>(data.size()));
    const std::uint64_t steps = f.driver.steps_run() - before;
    EXPECT_LE(steps, static_cast<std::uint64_t>(TypeParam::kLevels)) << "round " << round << ": a step per level, not per block";
  }
  EXPECT_EQ(f.tree.stats().merged_bytes, data.size()) << "the second write overwrote the dirty bytes";
  EXPECT_EQ(f.tree.stats().dirty_blocks, 10u);
  EXPECT_EQ(f.engine_writes_logged(), 0u);
  ASSERT_EQ(f.op(TreeOp::fsync), 0);
  EXPECT_TRUE(f.file_holds(0, data));
  EXPECT_EQ(f.tree.check_invariants(), "");
}

TYPED_TEST(BTreeGather, ABusyBlockGetsItsStepAndItsNeighboursAreStillWrittenHere) {
  // Block 2 is in a tiny-write overflow (more than DirtyRanges::kMax ranges, not valid): the
  // parent's step leaves it to a step of its own (a write-through); the others take the copy.
  Fixture<TypeParam> f;
  auto one = pattern(10, 15);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(f.op(TreeOp::write, 2 * 4096 + 3900 + 50 * i, 10, one.data()), 10);
  ASSERT_EQ(f.tree.stats().dirty_bytes, 40u);
  auto data = pattern(3 * 4096 - 200, 16);  // blocks 0-2, ending at 2*4096 + 3896: a 5th range in block 2
  ASSERT_EQ(f.op(TreeOp::write, 0, data.size(), data.data()), static_cast<std::int64_t>(data.size()));
  EXPECT_EQ(f.tree.stats().write_throughs, 1u);
  EXPECT_EQ(f.engine_writes_logged(), 1u);
  ASSERT_EQ(f.op(TreeOp::fsync), 0);
  EXPECT_TRUE(f.file_holds(0, data));
  EXPECT_EQ(f.tree.check_invariants(), "");
}

}  // namespace
}  // namespace tai::test::btree
