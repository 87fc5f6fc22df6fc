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
#include "tai/btree_driver.hpp"

namespace tai::test::btree {
namespace {

std::vector<std::uint8_t> bytes(std::size_t n, std::uint8_t v) { return std::vector<std::uint8_t>(n, v); }

/// Passes requests on to `inner`; once armed, fails the next engine sync it sees (only that one).
class NextSyncFails final : public IoExecutor {
 public:
  explicit NextSyncFails(IoExecutor& inner) : inner_(inner) {}
  void arm() { armed_ = true; }
  Completion execute(const Request& r) override {
    if ((r.op == Op::fsync || r.op == Op::fdatasync) && armed_) {
      armed_ = false;
      return {r.user_data, -EIO};
    }
    return inner_.execute(r);
  }

 private:
  IoExecutor& inner_;
  bool armed_ = false;
};

/// A tree over an in-memory file (empty at first), its engine requests through a NextSyncFails,
/// and a SequentialDriver for operations run one at a time.
template <class Tree = BTreeDefault>
struct Fixture {
  MemoryFile mem;
  NextSyncFails exec{mem};
  Quota quota;
  BTreeOptions options = [] {
    BTreeOptions o;
    o.file_size = 0;
    return o;
  }();
  Tree tree{nullptr, quota, options};
  SequentialDriver driver{[this] {
    SequentialDriver::Options d;
    d.executor = &exec;
    return d;
  }()};
  std::int64_t op(TreeOp kind, std::uint64_t offset = 0, std::uint64_t length = 0, std::uint8_t* data = nullptr) {
    return run_op(driver, tree, kind, offset, length, data);
  }
};

/// The next fsync writes the cached bytes again (the file has then been sent `written` bytes in
/// all), succeeds, and clears the error.
void expect_recovery(Fixture<>& f, std::uint64_t written) {
  EXPECT_EQ(f.op(TreeOp::fsync), 0);
  EXPECT_EQ(f.mem.bytes_written(), written) << "the recovering fsync did not write the bytes again";
  EXPECT_FALSE(f.tree.sync_error());
  EXPECT_EQ(f.tree.check_invariants(), "");
}

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

TEST(BTreeFailedSync, AnFsyncStartedBeforeTheFailedOneCompletedCannotClearTheError) {
  Fixture<> f;
  auto a = bytes(100, 1);
  ASSERT_EQ(f.op(TreeOp::write, 0, 100, a.data()), 100);
  // Both start before the first one's failure is known: the second one's write-back may pass a
  // block before the redirty does, so its (successful) engine sync proves nothing.
  Operation first(TreeOp::fsync, 0, 0), second(TreeOp::fsync, 0, 0);
  f.exec.arm();
  f.driver.start(f.tree, first);
  f.driver.start(f.tree, second);
  f.driver.run();
  ASSERT_TRUE(first.done());
  ASSERT_TRUE(second.done());
  EXPECT_EQ(first.result(), -EIO);
  EXPECT_EQ(second.result(), -EIO) << "an fsync that may have missed the redirty cleared the error";
  EXPECT_EQ(f.mem.syncs(), 1u);  // the second engine sync succeeded
  // One started after the failed fsync completed writes the block again and clears it.
  expect_recovery(f, f.mem.bytes_written() + 100);
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

/// Writes 100 bytes at 0, then runs an fsync whose engine sync fails, and starts `other` at the
/// moment the failure has been recorded and the redirty's first step is about to be queued.
/// True when both completed and the fsync failed with EIO.
bool fail_a_sync_and_start_before_its_redirty(Fixture<>& f, Operation& other) {
  auto a = bytes(100, 1);
  Operation write(TreeOp::write, 0, 100, a.data()), failing(TreeOp::fsync, 0, 0);
  InterposingDriver driver(f.exec, failing, [&] { f.tree.start(other, driver); });
  f.exec.arm();
  f.tree.start(write, driver);
  f.tree.start(failing, driver);
  driver.run();
  return failing.done() && other.done() && failing.result() == -EIO;
}

TEST(BTreeFailedSync, AnFsyncThatStartsWhileTheRedirtyIsUnderWayCannotClearTheError) {
  Fixture<> f;
  Operation early(TreeOp::fsync, 0, 0);
  ASSERT_TRUE(fail_a_sync_and_start_before_its_redirty(f, early));
  // It saw the error, but its visits ran ahead of the redirty's: its write-back found nothing
  // dirty and its engine sync (which succeeded) covered nothing written again.
  EXPECT_EQ(early.result(), -EIO) << "an fsync that ran ahead of the redirty cleared the error";
  EXPECT_EQ(f.mem.bytes_written(), 100u);
  expect_recovery(f, 200);
}

TEST(BTreeFailedSync, EngineSyncsOfOneTreeRunOneAtATime) {
  // The kernel reports a write-back error to one of several overlapping fsyncs of a file only:
  // the success of a sync that overlapped a failing one could cover a dropped page. So the
  // second fsync's engine sync waits until the first one's has completed (and failed).
  Fixture<> f;
  ManualDriver driver(f.exec);
  auto a = bytes(100, 1);
  Operation write(TreeOp::write, 0, 100, a.data()), first(TreeOp::fsync, 0, 0), second(TreeOp::fdatasync, 0, 0);
  driver.start(f.tree, write);
  driver.start(f.tree, first);
  driver.start(f.tree, second);
  driver.run_steps();
  ASSERT_EQ(driver.pending_io(), 1u);  // the write-back
  ASSERT_EQ(driver.request(0).op, Op::write);
  driver.complete(0);
  driver.run_steps();
  ASSERT_EQ(driver.pending_io(), 1u) << "two engine syncs of one tree in flight at once";
  ASSERT_EQ(driver.request(0).op, Op::fsync);
  f.exec.arm();
  driver.complete(0);  // the first one fails
  driver.run_steps();
  ASSERT_EQ(driver.pending_io(), 1u);  // now the second one's
  EXPECT_EQ(driver.request(0).op, Op::fdatasync);
  driver.run_all();  // it succeeds at the engine
  ASSERT_TRUE(first.done());
  ASSERT_TRUE(second.done());
  EXPECT_EQ(first.result(), -EIO);
  EXPECT_EQ(second.result(), -EIO) << "it started before the failure: its write-back missed the redirty";
  EXPECT_EQ(f.tree.stats().dirty_bytes, 100u) << "the block was not made dirty again";
  expect_recovery(f, 200);
}

// A write-back reaches the engine before a sync is issued, but its completion step runs only
// after that sync failed: the failure may have dropped those bytes, so they count as written
// before it (the epoch when the write was issued, not when its completion ran) and the failed
// fsync's redirty makes them dirty again. Stamped at completion instead, they would count as
// written after the failure and stay clean: a later eviction would free them unwritten and the
// next fsync clear the error. (On a controller: the write-back's completion is reaped by one
// worker while another issues and fails the sync.)
TEST(BTreeFailedSync, AWriteBackIssuedBeforeAFailedSyncButCompletedAfterItIsWrittenAgain) {
  Fixture<> f;
  ManualDriver driver(f.exec);
  auto a = bytes(100, 1);
  Operation failing(TreeOp::fsync, 0, 0), write(TreeOp::write, 0, 100, a.data()), back(TreeOp::write_back, 0, 0);
  driver.start(f.tree, failing);  // the tree is clean: its pass finds nothing and issues the sync
  driver.run_steps();
  ASSERT_EQ(driver.pending_io(), 1u);
  ASSERT_EQ(driver.request(0).op, Op::fsync);
  driver.start(f.tree, write);  // dirties block 0 behind the fsync's pass
  driver.start(f.tree, back);   // and sends it to the engine while the sync is in flight
  driver.run_steps();
  ASSERT_TRUE(write.done());
  ASSERT_EQ(driver.pending_io(), 2u);
  ASSERT_EQ(driver.request(1).op, Op::write);
  f.exec.arm();
  driver.complete(0);  // the sync fails first (its redirty pass then waits for the block) ...
  driver.run_steps();
  ASSERT_EQ(driver.pending_io(), 1u);
  driver.complete(0);  // ... then the write-back's completion runs
  driver.run_all();
  ASSERT_TRUE(failing.done());
  ASSERT_TRUE(back.done());
  EXPECT_EQ(failing.result(), -EIO);
  EXPECT_EQ(f.mem.bytes_written(), 100u);
  EXPECT_EQ(f.tree.stats().dirty_bytes, 100u) << "the write-back's bytes, which the failed sync may have dropped, "
                                                 "are not dirty again";
  Operation drop(TreeOp::drop, 0, 0);  // the block leaves the cache (a recycle round's eviction)
  driver.start(f.tree, drop);
  driver.run_all();
  ASSERT_EQ(f.tree.stats().blocks, 0u);
  EXPECT_EQ(f.mem.bytes_written(), 200u) << "the eviction freed the block without writing it again";
  EXPECT_EQ(f.op(TreeOp::fsync), 0);  // rewritten after the failure and now synced: recovered
  EXPECT_FALSE(f.tree.sync_error());
  EXPECT_EQ(f.tree.check_invariants(), "");
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
  Fixture<> f;
  Operation drop(TreeOp::drop, 0, 0);
  ASSERT_TRUE(fail_a_sync_and_start_before_its_redirty(f, drop));
  EXPECT_EQ(f.tree.stats().blocks, 0u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(f.op(TreeOp::fsync), -EIO) << "an fsync cleared the error of dropped bytes";
  EXPECT_EQ(f.mem.bytes_written(), 100u);
  EXPECT_EQ(f.tree.check_invariants(), "");
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
