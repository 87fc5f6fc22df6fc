// A failed engine sync (tai/btree.hpp, "Failed engine syncs"): the tree keeps the error and
// fails every later fsync until the bytes written since the last good sync have been written
// again and synced. It can do that itself when its blocks still hold those bytes (the failed
// fsync makes them dirty again); when some are not held (an uncached write, a dropped or evicted
// block) the error stays for the life of the tree.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <system_error>
#include <vector>

#include "btree_fuzz/btree_harness.hpp"
#include "tai/btree.hpp"

namespace tai::test::btree {
namespace {

std::vector<std::uint8_t> bytes(std::size_t n, std::uint8_t v) { return std::vector<std::uint8_t>(n, v); }

template <class Tree = BTreeDefault>
struct Fixture {
  MemoryFile mem;
  Quota quota;
  BTreeOptions options = [] {
    BTreeOptions o;
    o.file_size = 0;
    return o;
  }();
  Tree tree{nullptr, quota, options};
  SequentialDriver driver{[this] {
    SequentialDriver::Options d;
    d.executor = &mem;
    return d;
  }()};
  std::int64_t op(TreeOp kind, std::uint64_t offset = 0, std::uint64_t length = 0, std::uint8_t* data = nullptr) {
    return run_op(driver, tree, kind, offset, length, data);
  }
};

TEST(BTreeFailedSync, TheFailedFsyncMakesTheBytesItCoveredDirtyAgainAndTheNextFsyncClearsTheError) {
  Fixture<> f;
  auto a = bytes(100, 1);
  ASSERT_EQ(f.op(TreeOp::write, 0, 100, a.data()), 100);
  ASSERT_EQ(f.op(TreeOp::write, 8192, 100, a.data()), 100);
  f.mem.fail_syncs(-EIO);
  EXPECT_EQ(f.op(TreeOp::fsync), -EIO);
  EXPECT_EQ(f.tree.sync_error(), std::errc::io_error);
  EXPECT_EQ(f.mem.bytes_written(), 200u);
  EXPECT_EQ(f.tree.stats().dirty_bytes, 200u) << "the bytes the failed sync covered are not dirty again";
  f.mem.fail_syncs(0);
  EXPECT_EQ(f.op(TreeOp::fsync), 0);
  EXPECT_EQ(f.mem.bytes_written(), 400u) << "the recovering fsync did not write them again";
  EXPECT_FALSE(f.tree.sync_error());
  EXPECT_EQ(f.tree.stats().dirty_bytes, 0u);
  // Recovered: a later failure starts over from here.
  EXPECT_EQ(f.op(TreeOp::fdatasync), 0);
  EXPECT_EQ(f.mem.bytes_written(), 400u);
  EXPECT_EQ(f.tree.check_invariants(), "");
}

TEST(BTreeFailedSync, BytesAGoodSyncCoveredAreNotWrittenAgain) {
  Fixture<> f;
  auto a = bytes(100, 1);
  ASSERT_EQ(f.op(TreeOp::write, 0, 100, a.data()), 100);
  ASSERT_EQ(f.op(TreeOp::fsync), 0);
  ASSERT_EQ(f.op(TreeOp::write, 8192, 50, a.data()), 50);
  f.mem.fail_syncs(-EIO);
  EXPECT_EQ(f.op(TreeOp::fsync), -EIO);
  EXPECT_EQ(f.tree.stats().dirty_bytes, 50u) << "only the block written since the good sync";
  f.mem.fail_syncs(0);
  EXPECT_EQ(f.op(TreeOp::fsync), 0);
  EXPECT_EQ(f.mem.bytes_written(), 200u);
  EXPECT_EQ(f.tree.check_invariants(), "");
}

/// Fails only the first engine sync it sees; passes everything on to `inner`.
class FirstSyncFails final : public IoExecutor {
 public:
  explicit FirstSyncFails(IoExecutor& inner) : inner_(inner) {}
  Completion execute(const Request& r) override {
    if ((r.op == Op::fsync || r.op == Op::fdatasync) && !failed_) {
      failed_ = true;
      return {r.user_data, -EIO};
    }
    return inner_.execute(r);
  }

 private:
  IoExecutor& inner_;
  bool failed_ = false;
};

TEST(BTreeFailedSync, AnFsyncStartedBeforeTheFailedOneCompletedCannotClearTheError) {
  MemoryFile mem;
  FirstSyncFails exec(mem);
  Quota quota;
  BTreeOptions o;
  o.file_size = 0;
  BTreeDefault tree(nullptr, quota, o);
  SequentialDriver::Options d;
  d.executor = &exec;
  SequentialDriver driver(d);
  auto a = bytes(100, 1);
  ASSERT_EQ(run_op(driver, tree, TreeOp::write, 0, 100, a.data()), 100);
  // Both start before the first one's failure is known: the second one's write-back may pass a
  // block before the redirty does, so its (successful) engine sync proves nothing.
  Operation first(TreeOp::fsync, 0, 0), second(TreeOp::fsync, 0, 0);
  driver.start(tree, first);
  driver.start(tree, second);
  driver.run();
  ASSERT_TRUE(first.done());
  ASSERT_TRUE(second.done());
  EXPECT_EQ(first.result(), -EIO);
  EXPECT_EQ(second.result(), -EIO) << "an fsync that may have missed the redirty cleared the error";
  EXPECT_EQ(mem.syncs(), 1u);  // the second engine sync succeeded
  // One started after the failed fsync completed writes the block again and clears it.
  const std::uint64_t written = mem.bytes_written();
  EXPECT_EQ(run_op(driver, tree, TreeOp::fsync, 0, 0), 0);
  EXPECT_EQ(mem.bytes_written(), written + 100);
  EXPECT_FALSE(tree.sync_error());
  EXPECT_EQ(tree.check_invariants(), "");
}

/// Runs steps FIFO and executes requests at once, and lets a test start an operation at one
/// chosen moment: just before the first visit step `watched` emits after its engine sync (the
/// redirty's root visit). On a controller, the worker that completes the failed sync emits that
/// step while the file's home worker may already be starting the next fsync.
class InterposingDriver final : public StepSink {
 public:
  InterposingDriver(IoExecutor& executor, Operation& watched, std::function<void()> before)
      : executor_(executor), watched_(watched), before_(std::move(before)) {}
  void emit(const Step& s) override {
    if (armed_ && s.op == &watched_ && s.kind == StepKind::visit) {
      armed_ = false;
      before_();
    }
    steps_.push_back(s);
  }
  void io(const Request& r, const Step& c) override {
    if (c.op == &watched_ && (r.op == Op::fsync || r.op == Op::fdatasync)) armed_ = true;
    Step k = c;
    k.io_result = executor_.execute(r).result;
    steps_.push_back(k);
  }
  void run() {
    while (!steps_.empty()) {
      const Step s = steps_.front();
      steps_.pop_front();
      s.run(*this);
    }
  }

 private:
  IoExecutor& executor_;
  Operation& watched_;
  std::function<void()> before_;
  bool armed_ = false;
  std::deque<Step> steps_;
};

TEST(BTreeFailedSync, AnFsyncThatStartsWhileTheRedirtyIsUnderWayCannotClearTheError) {
  MemoryFile mem;
  FirstSyncFails exec(mem);
  Quota quota;
  BTreeOptions o;
  o.file_size = 0;
  BTreeDefault tree(nullptr, quota, o);
  auto a = bytes(100, 1);
  Operation write(TreeOp::write, 0, 100, a.data()), failing(TreeOp::fsync, 0, 0), early(TreeOp::fsync, 0, 0);
  InterposingDriver driver(exec, failing, [&] { tree.start(early, driver); });
  tree.start(write, driver);
  tree.start(failing, driver);
  driver.run();
  ASSERT_TRUE(failing.done());
  ASSERT_TRUE(early.done());
  EXPECT_EQ(failing.result(), -EIO);
  // It saw the error, but its visits ran ahead of the redirty's: its write-back found nothing
  // dirty and its engine sync (which succeeded) covered nothing written again.
  EXPECT_EQ(early.result(), -EIO) << "an fsync that ran ahead of the redirty cleared the error";
  EXPECT_EQ(mem.bytes_written(), 100u);
  SequentialDriver::Options d;
  d.executor = &exec;
  SequentialDriver later(d);
  EXPECT_EQ(run_op(later, tree, TreeOp::fsync, 0, 0), 0);
  EXPECT_EQ(mem.bytes_written(), 200u);
  EXPECT_FALSE(tree.sync_error());
  EXPECT_EQ(tree.check_invariants(), "");
}

TEST(BTreeFailedSync, EngineSyncsOfOneTreeRunOneAtATime) {
  // The kernel reports a write-back error to one of several overlapping fsyncs of a file only:
  // the success of a sync that overlapped a failing one could cover a dropped page. So the
  // second fsync's engine sync waits until the first one's has completed (and failed).
  MemoryFile mem;
  Quota quota;
  BTreeOptions o;
  o.file_size = 0;
  BTreeDefault tree(nullptr, quota, o);
  ManualDriver driver(mem);
  auto a = bytes(100, 1);
  Operation write(TreeOp::write, 0, 100, a.data()), first(TreeOp::fsync, 0, 0), second(TreeOp::fdatasync, 0, 0);
  driver.start(tree, write);
  driver.start(tree, first);
  driver.start(tree, second);
  driver.run_steps();
  ASSERT_EQ(driver.pending_io(), 1u);  // the write-back
  ASSERT_EQ(driver.request(0).op, Op::write);
  driver.complete(0);
  driver.run_steps();
  ASSERT_EQ(driver.pending_io(), 1u) << "two engine syncs of one tree in flight at once";
  ASSERT_EQ(driver.request(0).op, Op::fsync);
  mem.fail_syncs(-EIO);
  driver.complete(0);  // the first one fails
  mem.fail_syncs(0);
  driver.run_steps();
  ASSERT_EQ(driver.pending_io(), 1u);  // now the second one's
  EXPECT_EQ(driver.request(0).op, Op::fdatasync);
  driver.run_all();  // it succeeds at the engine
  ASSERT_TRUE(first.done());
  ASSERT_TRUE(second.done());
  EXPECT_EQ(first.result(), -EIO);
  EXPECT_EQ(second.result(), -EIO) << "it started before the failure: its write-back missed the redirty";
  EXPECT_EQ(tree.stats().dirty_bytes, 100u) << "the block was not made dirty again";
  SequentialDriver::Options d;
  d.executor = &mem;
  SequentialDriver later(d);
  EXPECT_EQ(run_op(later, tree, TreeOp::fsync, 0, 0), 0);
  EXPECT_EQ(mem.bytes_written(), 200u);
  EXPECT_FALSE(tree.sync_error());
  EXPECT_EQ(tree.check_invariants(), "");
}

TEST(BTreeFailedSync, ABlockDroppedBeforeTheFailureMakesTheErrorPermanent) {
  Fixture<> f;
  auto a = bytes(100, 1);
  ASSERT_EQ(f.op(TreeOp::write, 0, 100, a.data()), 100);
  ASSERT_EQ(f.op(TreeOp::drop, 0, 0), 0);  // written back, then freed: the cache no longer holds it
  f.mem.fail_syncs(-EIO);
  EXPECT_EQ(f.op(TreeOp::fsync), -EIO);
  f.mem.fail_syncs(0);
  // Even rewriting the same bytes through the tree does not help: the tree cannot know that
  // every lost byte was rewritten.
  ASSERT_EQ(f.op(TreeOp::write, 0, 100, a.data()), 100);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(f.op(TreeOp::fsync), -EIO);
  EXPECT_EQ(f.tree.sync_error(), std::errc::io_error);
  EXPECT_EQ(f.tree.check_invariants(), "");
}

TEST(BTreeFailedSync, ABlockDroppedAfterTheFailureWasRecordedMakesTheErrorPermanentToo) {
  // The drop reaches the block after the failed sync was checked for lost bytes but before its
  // redirty does: the block's unsynced bytes leave the cache then, and no fsync may clear the
  // error afterwards. (On a controller: a recycle round's eviction, queued at the block.)
  MemoryFile mem;
  FirstSyncFails exec(mem);
  Quota quota;
  BTreeOptions o;
  o.file_size = 0;
  BTreeDefault tree(nullptr, quota, o);
  auto a = bytes(100, 1);
  Operation write(TreeOp::write, 0, 100, a.data()), sync(TreeOp::fsync, 0, 0), drop(TreeOp::drop, 0, 0);
  InterposingDriver driver(exec, sync, [&] { tree.start(drop, driver); });
  tree.start(write, driver);
  tree.start(sync, driver);
  driver.run();
  ASSERT_TRUE(sync.done());
  ASSERT_TRUE(drop.done());
  EXPECT_EQ(sync.result(), -EIO);
  EXPECT_EQ(tree.stats().blocks, 0u);
  SequentialDriver::Options d;
  d.executor = &exec;
  SequentialDriver later(d);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(run_op(later, tree, TreeOp::fsync, 0, 0), -EIO) << "an fsync cleared the error of dropped bytes";
  EXPECT_EQ(mem.bytes_written(), 100u);
  EXPECT_EQ(tree.check_invariants(), "");
}

TEST(BTreeFailedSync, ABlockDroppedAfterAGoodSyncDoesNot) {
  Fixture<> f;
  auto a = bytes(100, 1);
  ASSERT_EQ(f.op(TreeOp::write, 0, 100, a.data()), 100);
  ASSERT_EQ(f.op(TreeOp::fsync), 0);
  ASSERT_EQ(f.op(TreeOp::drop, 0, 0), 0);  // durable before it left
  ASSERT_EQ(f.op(TreeOp::write, 8192, 100, a.data()), 100);
  f.mem.fail_syncs(-EIO);
  EXPECT_EQ(f.op(TreeOp::fsync), -EIO);
  f.mem.fail_syncs(0);
  EXPECT_EQ(f.op(TreeOp::fsync), 0);
  EXPECT_FALSE(f.tree.sync_error());
}

TEST(BTreeFailedSync, AnUncachedWriteBeforeTheFailureMakesTheErrorPermanent) {
  Fixture<BTreeTrivial> f;
  auto a = bytes(100, 1);
  ASSERT_EQ(f.op(TreeOp::write, 0, 100, a.data()), 100);
  f.mem.fail_syncs(-EIO);
  EXPECT_EQ(f.op(TreeOp::fsync), -EIO);
  f.mem.fail_syncs(0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(f.op(TreeOp::fdatasync), -EIO);
  EXPECT_EQ(f.tree.sync_error(), std::errc::io_error);
}

TEST(BTreeFailedSync, AFailureWithNothingWrittenSinceTheLastGoodSyncRecoversAtOnce) {
  Fixture<BTreeTrivial> f;
  auto a = bytes(100, 1);
  ASSERT_EQ(f.op(TreeOp::write, 0, 100, a.data()), 100);
  ASSERT_EQ(f.op(TreeOp::fsync), 0);
  f.mem.fail_syncs(-EIO);
  EXPECT_EQ(f.op(TreeOp::fsync), -EIO);
  f.mem.fail_syncs(0);
  EXPECT_EQ(f.op(TreeOp::fsync), 0);
  EXPECT_FALSE(f.tree.sync_error());
}

}  // namespace
}  // namespace tai::test::btree
