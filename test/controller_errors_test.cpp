// Errors (DESIGN section 2, "Errors are never lost" and "Bad input gets a clear error"), through
// the controller, with the fault engine (engines/fault) registered by Controller::add_engine:
//  * an injected EIO/ENOSPC on an engine write reaches that write's receipt (BTreeTrivial: the
//    write goes to the engine), or, for a write the cache took (BTreeDefault), the next fsync
//    or close of the file;
//  * a later fsync succeeds only once the data was written back again successfully (the cache
//    still holds it), and then the file holds it;
//  * an injected fsync error fails that fsync and every later one until the data it covered is
//    written again and synced: at once when the cache holds it (BTreeDefault), never on that
//    handle when it does not (BTreeTrivial);
//  * a short engine write is never reported as a complete one;
//  * bad input gets a clear error on the receipt, never a crash or a hang: an end past 2^64
//    (EOVERFLOW), a null buffer with a nonzero length (EFAULT), a closed or empty handle
//    (EBADF, rejected), a bad path or engine name at open (an Error naming it).
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "engines/fault/fault_engine.hpp"
#include "engines/posix/posix_engine.hpp"
#include "support/controller_support.hpp"
#include "support/test_env.hpp"
#include "tai/tai.hpp"

namespace tai::test {
namespace {

constexpr auto kHang = std::chrono::seconds(60);

std::error_code errno_code(int e) { return std::error_code(e, std::generic_category()); }

/// Waits (bounded: a hang fails the test instead of stalling it); true when finished.
bool finished(const Receipt& r) {
  if (r.wait_for(kHang)) return true;
  ADD_FAILURE() << "a receipt did not finish within 60 s (state " << to_string(r.state()) << ")";
  return false;
}

#define EXPECT_FAILS_WITH(receipt, err)                                                        \
  do {                                                                                         \
    const ::tai::Receipt r_ = (receipt);                                                       \
    if (!finished(r_)) break;                                                                  \
    EXPECT_FALSE(r_.ok());                                                                     \
    EXPECT_EQ(r_.error(), errno_code(err)) << r_.message();                                    \
    EXPECT_FALSE(r_.message().empty()) << "a failed receipt must say what failed";             \
    EXPECT_TRUE(r_.state() == ::tai::TaskState::failed || r_.state() == ::tai::TaskState::rejected) \
        << to_string(r_.state());                                                              \
  } while (0)

#define EXPECT_OK(receipt)                                     \
  do {                                                         \
    const ::tai::Receipt r_ = (receipt);                       \
    if (!finished(r_)) break;                                  \
    EXPECT_TRUE(r_.ok()) << r_.message();                      \
    EXPECT_EQ(r_.state(), ::tai::TaskState::done);             \
  } while (0)

/// Controller options for these tests: no idle flush rounds (write-back happens only where the
/// test asks for it: fsync, close, flush, shutdown), 2 workers.
ControllerOptions quiet_options() { return two_quiet_workers("posix"); }

/// A controller with a fault engine (over `inner`: posix, synchronous, or uring, asynchronous)
/// registered as "fault".
struct FaultyController {
  FaultyController(const std::string& rules, const std::string& inner, const ControllerOptions& options = quiet_options())
      : ctl(std::make_unique<Controller>(options)) {
    auto made = make_engine(inner, options.engine_options);
    EXPECT_TRUE(made.ok()) << (made.ok() ? "" : made.error().message);
    auto engine = engines::make_fault(made.ok() ? std::move(made.value()) : engines::make_posix(options.engine_options));
    fault = engine.get();
    if (!rules.empty()) {
      auto added = fault->add_rules(rules);
      EXPECT_TRUE(added.ok()) << (added.ok() ? "" : added.error().message);
    }
    EXPECT_TRUE(ctl->add_engine("fault", std::move(engine)));
  }
  template <class Tree>
  File open(const std::string& path) {
    auto f = ctl->open<Tree>(path, Open::read | Open::write | Open::create, "fault");
    EXPECT_TRUE(f.ok()) << (f.ok() ? "" : f.error().message);
    return f.ok() ? std::move(f.value()) : File();
  }
  std::unique_ptr<Controller> ctl;
  engines::FaultEngine* fault = nullptr;  // owned by ctl
};

bool file_holds(const std::string& path, std::uint64_t offset, const std::vector<unsigned char>& data) {
  const std::vector<unsigned char> disk = read_with_pread(path);
  if (disk.size() < offset + data.size()) return false;
  return std::memcmp(disk.data() + offset, data.data(), data.size()) == 0;
}

struct FaultCase {
  int err;            // the errno injected on writes
  const char* inner;  // the engine the fault engine wraps
};

void PrintTo(const FaultCase& c, std::ostream* os) { *os << c.err << " over " << c.inner; }

class ControllerWriteErrors : public testing::TestWithParam<FaultCase> {
 protected:
  void SetUp() override {
    TAI_SKIP_UNLESS_ENGINE_AVAILABLE(GetParam().inner);
  }
};

TEST_P(ControllerWriteErrors, UncachedWriteFailsOnItsReceipt) {
  const int err = GetParam().err;
  const std::string inner = GetParam().inner;
  ScratchDir dir;
  const std::string path = dir.file("trivial");
  FaultyController fc("write:nth=1:errno=" + std::to_string(err) + ":once", inner);
  File f = fc.open<BTreeTrivial>(path);
  const auto data = pattern(4096, 1);
  EXPECT_FAILS_WITH(f.write(0, data.data(), data.size()), err);
  EXPECT_EQ(fc.fault->injections(0), 1u);
  EXPECT_EQ(f.write(0, data.data(), data.size()).bytes(), 4096) << "the next write (no fault) goes through";
  EXPECT_OK(f.fsync());
  EXPECT_TRUE(file_holds(path, 0, data));
  EXPECT_OK(f.close());
}

/// quiet_options() with the tree options a program gets by default (write-around on).
ControllerOptions default_tree_options() {
  ControllerOptions o = quiet_options();
  o.tree_options = ControllerOptions{}.tree_options;
  return o;
}

// Under the default options a page written over a range the tree holds nothing of goes to the
// engine uncached (write-around), so its error comes back on its own receipt, as BTreeTrivial's
// does; a small write beside it is still cached, and both reach the file.
TEST_P(ControllerWriteErrors, UnderTheDefaultOptionsAWriteAroundFailsOnItsReceipt) {
  const int err = GetParam().err;
  const std::string inner = GetParam().inner;
  const std::uint64_t around = ControllerOptions{}.tree_options.write_around_bytes;
  ASSERT_GT(around, 0u) << "write-around is off by default: this test has nothing to check";
  ASSERT_LE(around, 4096u);
  ScratchDir dir;
  const std::string path = dir.file("around");
  FaultyController fc("write:nth=1:errno=" + std::to_string(err) + ":once", inner, default_tree_options());
  File f = fc.open<BTreeDefault>(path);
  const auto page = pattern(4096, 1);
  EXPECT_FAILS_WITH(f.write(0, page.data(), page.size()), err);
  EXPECT_EQ(fc.fault->injections(0), 1u) << "the write did not reach the engine: it was cached";
  EXPECT_EQ(f.write(0, page.data(), page.size()).bytes(), 4096) << "the next write (no fault) goes through";
  const auto small = pattern(100, 2);
  EXPECT_EQ(f.write(8192, small.data(), small.size()).bytes(), 100);
  EXPECT_GE(fc.ctl->stats().write_arounds, 2u);
  EXPECT_OK(f.fsync());
  EXPECT_TRUE(file_holds(path, 0, page));
  EXPECT_TRUE(file_holds(path, 8192, small));
  EXPECT_OK(f.close());
}

TEST_P(ControllerWriteErrors, CachedWriteFailsTheNextFsyncUntilWrittenAgain) {
  const int err = GetParam().err;
  const std::string inner = GetParam().inner;
  ScratchDir dir;
  const std::string path = dir.file("default");
  // The first two engine writes fail: the first two write-backs of the cached block.
  FaultyController fc("write:nth=1:errno=" + std::to_string(err) + ":once, write:nth=2:errno=" + std::to_string(err) + ":once", inner);
  File f = fc.open<BTreeDefault>(path);
  const auto data = pattern(4096, 2);
  EXPECT_OK(f.write(8192, data.data(), data.size()));  // a fresh aligned block: cached
  EXPECT_EQ(fc.fault->matches(0), 0u) << "the write was expected to stay in the cache until fsync";
  EXPECT_FAILS_WITH(f.fsync(), err);
  EXPECT_FALSE(file_holds(path, 8192, data)) << "the injected failure wrote nothing";
  // The second write-back failed too: this fsync must not succeed.
  EXPECT_FAILS_WITH(f.fsync(), err);
  EXPECT_EQ(fc.fault->total_injections(), 2u);
  EXPECT_OK(f.fsync());  // the third write-back succeeds: the cache kept the data
  EXPECT_TRUE(file_holds(path, 8192, data)) << "fsync succeeded, so the data must be in the file";
  EXPECT_OK(f.fsync());  // nothing failed since
  EXPECT_OK(f.close());
}

TEST_P(ControllerWriteErrors, CachedWriteFailsTheClose) {
  const int err = GetParam().err;
  const std::string inner = GetParam().inner;
  ScratchDir dir;
  const std::string path = dir.file("default-close");
  FaultyController fc("write:nth=1:errno=" + std::to_string(err) + ":once", inner);
  File f = fc.open<BTreeDefault>(path);
  const auto data = pattern(4096, 3);
  EXPECT_OK(f.write(0, data.data(), data.size()));
  EXPECT_FAILS_WITH(f.close(), err);
  EXPECT_EQ(fc.fault->injections(0), 1u);
}

TEST_P(ControllerWriteErrors, FlushReportsAFailedWriteBackAndTheNextFsyncToo) {
  const int err = GetParam().err;
  const std::string inner = GetParam().inner;
  ScratchDir dir;
  const std::string path = dir.file("default-flush");
  FaultyController fc("write:nth=1:errno=" + std::to_string(err) + ":once", inner);
  File f = fc.open<BTreeDefault>(path);
  const auto data = pattern(4096, 4);
  EXPECT_OK(f.write(0, data.data(), data.size()));
  // flush() fails with the first error of a part; whether the file's next fsync reports it
  // again is the contract of fsync: it fails once with an earlier write-back's error, or
  // succeeds only after writing the data back again.
  EXPECT_EQ(fc.fault->matches(0), 0u) << "the write was expected to stay in the cache until flush()";
  Receipt flushed = fc.ctl->flush();
  EXPECT_FAILS_WITH(flushed, err);
  EXPECT_EQ(fc.fault->matches(0), 1u) << "a finished flush() has handed the dirty block to the engine";
  Receipt synced = f.fsync();
  ASSERT_TRUE(finished(synced));
  if (synced.ok()) {
    EXPECT_TRUE(file_holds(path, 0, data)) << "fsync succeeded after a failed write-back: the data must be in the file";
  } else {
    EXPECT_EQ(synced.error(), errno_code(err)) << synced.message();
    EXPECT_OK(f.fsync());
    EXPECT_TRUE(file_holds(path, 0, data));
  }
  EXPECT_OK(f.close());
}

INSTANTIATE_TEST_SUITE_P(Controller, ControllerWriteErrors,
                         testing::Values(FaultCase{EIO, "posix"}, FaultCase{ENOSPC, "posix"}, FaultCase{EIO, "uring"},
                                         FaultCase{ENOSPC, "uring"}),
                         [](const testing::TestParamInfo<FaultCase>& info) {
                           return std::string(info.param.err == EIO ? "EIO_" : "ENOSPC_") + info.param.inner;
                         });

/// Fault tests over each inner engine (posix: synchronous; uring: asynchronous, reaped in the
/// rounds).
class ControllerFaults : public testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    TAI_SKIP_UNLESS_ENGINE_AVAILABLE(GetParam());
  }
};

TEST_P(ControllerFaults, AFailedEngineFsyncFailsUntilTheCachedDataIsWrittenAgainAndSynced) {
  ScratchDir dir;
  const std::string path = dir.file("refsync");
  // Rule 0 fails the first engine fsync; rule 1 never injects, it counts the engine's writes.
  FaultyController fc("fsync:nth=1:errno=EIO:once, write:p=0:errno=EIO", GetParam());
  File f = fc.open<BTreeDefault>(path);
  const auto data = pattern(4096, 5);
  EXPECT_OK(f.write(0, data.data(), data.size()));
  EXPECT_FAILS_WITH(f.fsync(), EIO);
  EXPECT_EQ(fc.fault->injections(0), 1u);
  EXPECT_EQ(f.status().sticky_error, errno_code(EIO));
  const std::uint64_t writes_before = fc.fault->matches(1);
  EXPECT_GE(writes_before, 1u);
  // What the kernel may do after a failed fsync: drop the page it could not write. Simulated by
  // overwriting the file's bytes behind the controller's back.
  const std::vector<unsigned char> zeros(4096, 0);
  ASSERT_TRUE(write_with_pwrite(path, 0, zeros));
  ASSERT_FALSE(file_holds(path, 0, data));
  // The cache still holds the block: the next fsync writes it again, syncs, and succeeds.
  EXPECT_OK(f.fsync());
  EXPECT_GT(fc.fault->matches(1), writes_before) << "the data was not written again";
  EXPECT_TRUE(file_holds(path, 0, data)) << "an fsync succeeded, but the file lacks data written before it";
  EXPECT_FALSE(f.status().sticky_error);
  // Recovered for good: later fsyncs and the close succeed.
  EXPECT_OK(f.write(4096, data.data(), data.size()));
  EXPECT_OK(f.fsync());
  EXPECT_OK(f.close());
}

TEST_P(ControllerFaults, AFailedEngineFsyncAfterAnUncachedWriteStaysForTheLifeOfTheHandle) {
  ScratchDir dir;
  const std::string path = dir.file("sticky");
  FaultyController fc("fsync:nth=1:errno=EIO:once", GetParam());
  File f = fc.open<BTreeTrivial>(path);  // nothing cached: TAI cannot write the data again
  const auto data = pattern(4096, 5);
  EXPECT_OK(f.write(0, data.data(), data.size()));
  EXPECT_FAILS_WITH(f.fsync(), EIO);
  EXPECT_EQ(fc.fault->injections(0), 1u);
  EXPECT_EQ(f.status().sticky_error, errno_code(EIO));
  // The engine would succeed now (the rule fired once), but after a failed fsync the kernel may
  // have dropped dirty pages: no later fsync of this handle may claim durability.
  EXPECT_FAILS_WITH(f.fsync(), EIO);
  EXPECT_OK(f.write(0, data.data(), data.size()));
  EXPECT_FAILS_WITH(f.fsync(), EIO);
  EXPECT_FAILS_WITH(f.fdatasync(), EIO);
  EXPECT_EQ(f.status().sticky_error, errno_code(EIO));
  EXPECT_FAILS_WITH(f.close(), EIO);
  // A new handle starts clean.
  File again = fc.open<BTreeTrivial>(path);
  EXPECT_OK(again.write(0, data.data(), data.size()));
  EXPECT_OK(again.fsync());
  EXPECT_OK(again.close());
}

// A written-around page is not in the cache, so after a failed engine fsync TAI cannot write it
// again: the error stays for the handle, as for BTreeTrivial, while cached data beside it would
// have been recoverable. (The price of write-around, the kernel's own rule for such data.)
TEST_P(ControllerFaults, UnderTheDefaultOptionsAFailedFsyncAfterAWriteAroundIsSticky) {
  ScratchDir dir;
  const std::string path = dir.file("around-sticky");
  FaultyController fc("fsync:nth=1:errno=EIO:once", GetParam(), default_tree_options());
  File f = fc.open<BTreeDefault>(path);
  const auto data = pattern(8192, 5);
  EXPECT_OK(f.write(0, data.data(), data.size()));
  ASSERT_GE(fc.ctl->stats().write_arounds, 1u) << "the default options cached a write of two pages";
  EXPECT_FAILS_WITH(f.fsync(), EIO);
  EXPECT_EQ(f.status().sticky_error, errno_code(EIO));
  EXPECT_FAILS_WITH(f.fsync(), EIO);
  EXPECT_FAILS_WITH(f.close(), EIO);
  File again = fc.open<BTreeDefault>(path);
  EXPECT_OK(again.write(0, data.data(), data.size()));
  EXPECT_OK(again.fsync());
  EXPECT_OK(again.close());
  EXPECT_TRUE(file_holds(path, 0, data));
}

TEST_P(ControllerFaults, ShutdownReportsAnUnrecoveredFsyncFailureAndNotARecoveredOne) {
  // DESIGN section 2, "Shutdown loses nothing": the controller's shutdown closes both files; the
  // one whose failed fsync could not be recovered from is reported, the recovered one is not.
  ScratchDir dir;
  const std::string lost = dir.file("unrecovered"), kept = dir.file("recovered");
  FaultyController fc("fsync:nth=1:errno=EIO:once, fsync:nth=2:errno=EIO:once", GetParam());
  File uncached = fc.open<BTreeTrivial>(lost);
  File cached = fc.open<BTreeDefault>(kept);
  const auto data = pattern(4096, 9);
  EXPECT_OK(uncached.write(0, data.data(), data.size()));
  EXPECT_OK(cached.write(0, data.data(), data.size()));
  EXPECT_FAILS_WITH(uncached.fsync(), EIO);
  EXPECT_FAILS_WITH(cached.fsync(), EIO);
  EXPECT_OK(cached.fsync());  // written again and synced
  const ShutdownReport report = fc.ctl->shutdown();
  const std::string text = report.to_string();
  EXPECT_FALSE(report.ok());
  EXPECT_NE(text.find(lost), std::string::npos) << text;
  EXPECT_EQ(text.find(kept), std::string::npos) << text;
  EXPECT_TRUE(file_holds(kept, 0, data));
}

TEST_P(ControllerFaults, AFailedFdatasyncIsStickyAndFailsTheBarrier) {
  ScratchDir dir;
  const std::string path = dir.file("sticky-fdatasync");
  FaultyController fc("fdatasync:nth=1:errno=EIO:once", GetParam());
  File f = fc.open<BTreeTrivial>(path);
  const auto data = pattern(512, 6);
  EXPECT_OK(f.write(0, data.data(), data.size()));
  EXPECT_FAILS_WITH(f.fdatasync(), EIO);
  EXPECT_FAILS_WITH(f.fsync(), EIO);
  EXPECT_EQ(f.status().sticky_error, errno_code(EIO));
  f.close().wait_for(kHang);
}

TEST_P(ControllerFaults, AShortEngineWriteIsNeverReportedComplete) {
  ScratchDir dir;
  const std::string path = dir.file("short");
  FaultyController fc("write:nth=1:short=half:once", GetParam());
  File f = fc.open<BTreeTrivial>(path);
  const auto data = pattern(4096, 7);
  Receipt w = f.write(0, data.data(), data.size());
  ASSERT_TRUE(finished(w));
  EXPECT_EQ(fc.fault->injections(0), 1u);
  EXPECT_OK(f.fsync());
  if (w.ok() && w.bytes() == 4096) {
    EXPECT_TRUE(file_holds(path, 0, data)) << "the write was reported complete: all of it must be in the file";
  } else if (w.ok()) {
    EXPECT_LT(w.bytes(), 4096);
    EXPECT_TRUE(file_holds(path, 0, std::vector<unsigned char>(data.begin(), data.begin() + w.bytes())));
  } else {
    EXPECT_FALSE(w.message().empty());
  }
  EXPECT_OK(f.close());
}

TEST_P(ControllerFaults, AShortWriteBackIsNeverReportedDurable) {
  ScratchDir dir;
  const std::string path = dir.file("short-default");
  FaultyController fc("write:nth=1:short=half:once", GetParam());
  File f = fc.open<BTreeDefault>(path);
  const auto data = pattern(4096, 8);
  EXPECT_OK(f.write(0, data.data(), data.size()));
  Receipt s = f.fsync();
  ASSERT_TRUE(finished(s));
  if (s.ok()) {
    EXPECT_TRUE(file_holds(path, 0, data)) << "fsync succeeded after a short write-back: all of the data must be in the file";
  } else {
    EXPECT_FALSE(s.message().empty());
    EXPECT_OK(f.fsync());
    EXPECT_TRUE(file_holds(path, 0, data));
  }
  EXPECT_OK(f.close());
}

INSTANTIATE_TEST_SUITE_P(Controller, ControllerFaults, testing::Values("posix", "uring"),
                         [](const testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

// ---------------------------------------------------------------------------------------------
// Bad input

class ControllerBadInput : public testing::Test {
 protected:
  void SetUp() override {
    ctl = std::make_unique<Controller>(quiet_options());
    path = dir.file("bad-input");
    auto f = ctl->open<BTreeDefault>(path, Open::read | Open::write | Open::create);
    ASSERT_TRUE(f.ok()) << f.error().message;
    file = std::move(f.value());
  }
  ScratchDir dir;
  std::string path;
  std::unique_ptr<Controller> ctl;
  File file;
};

TEST_F(ControllerBadInput, EndPastTwoToTheSixtyFourIsEoverflow) {
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  char buf[100] = {};
  EXPECT_FAILS_WITH(file.write(kMax - 10, buf, sizeof buf), EOVERFLOW);
  EXPECT_FAILS_WITH(file.read(kMax - 10, buf, sizeof buf), EOVERFLOW);
  EXPECT_FAILS_WITH(file.read(kMax, 2), EOVERFLOW);
  EXPECT_FAILS_WITH(file.write(kMax, Buffer::copy_of(buf, 2)), EOVERFLOW);
  // The file is unharmed: later operations work.
  EXPECT_EQ(file.write(0, buf, 10).bytes(), 10);
  EXPECT_OK(file.fsync());
}

TEST_F(ControllerBadInput, NullBufferWithALengthIsEfault) {
  EXPECT_FAILS_WITH(file.write(0, nullptr, 10), EFAULT);
  EXPECT_FAILS_WITH(file.read(0, nullptr, 10), EFAULT);
  EXPECT_OK(file.fsync());
}

TEST_F(ControllerBadInput, ZeroLengthsCompleteWithZeroBytes) {
  char buf[1] = {};
  Receipt w = file.write(0, nullptr, 0);
  EXPECT_OK(w);
  EXPECT_EQ(w.bytes(), 0);
  Receipt r = file.read(0, buf, 0);
  EXPECT_OK(r);
  EXPECT_EQ(r.bytes(), 0);
  Receipt rb = file.read(123, 0);
  EXPECT_OK(rb);
  EXPECT_EQ(rb.take_buffer().size(), 0u);
  EXPECT_EQ(file.status().size.value_or(0), 0u) << "a zero-length write does not grow the file";
}

TEST_F(ControllerBadInput, ReadingPastTheEndGivesZeroBytes) {
  char buf[64];
  EXPECT_EQ(file.write(0, "0123456789", 10).bytes(), 10);
  Receipt r = file.read(4, buf, sizeof buf);
  EXPECT_OK(r);
  EXPECT_EQ(r.bytes(), 6);
  EXPECT_EQ(std::memcmp(buf, "456789", 6), 0);
  Receipt past = file.read(1 << 20, buf, sizeof buf);
  EXPECT_OK(past);
  EXPECT_EQ(past.bytes(), 0);
}

TEST_F(ControllerBadInput, EveryOperationAfterCloseIsRejectedWithEbadf) {
  char buf[16] = {};
  EXPECT_OK(file.write(0, buf, sizeof buf));
  EXPECT_OK(file.close());
  EXPECT_FALSE(file.is_open());
  EXPECT_FALSE(file.status().open);
  std::atomic<bool> hook_ran{false};
  std::vector<Receipt> after = {file.write(0, buf, sizeof buf),
                                file.write(0, Buffer::copy_of(buf, sizeof buf)),
                                file.read(0, buf, sizeof buf),
                                file.read(0, sizeof buf),
                                file.fsync(),
                                file.fdatasync(),
                                file.barrier(),
                                file.hook([&hook_ran] { hook_ran = true; }),
                                file.close()};
  for (const Receipt& r : after) {
    EXPECT_FAILS_WITH(r, EBADF);
    EXPECT_EQ(r.state(), TaskState::rejected);
  }
  EXPECT_FALSE(hook_ran.load()) << "a hook on a closed file must not run";
}

TEST_F(ControllerBadInput, AnEmptyHandleRejectsEverything) {
  File empty;
  EXPECT_FALSE(empty.is_open());
  EXPECT_EQ(empty.path(), "");
  EXPECT_FALSE(empty.status().open);
  char buf[16] = {};
  std::atomic<bool> hook_ran{false};
  for (const Receipt& r : {empty.write(0, buf, sizeof buf), empty.read(0, buf, sizeof buf), empty.fsync(),
                           empty.barrier(), empty.hook([&hook_ran] { hook_ran = true; }), empty.close()}) {
    EXPECT_FAILS_WITH(r, EBADF);
    EXPECT_EQ(r.state(), TaskState::rejected);
  }
  EXPECT_FALSE(hook_ran.load());
  empty.detach();  // harmless
}

TEST_F(ControllerBadInput, AMovedFromHandleIsEmpty) {
  File moved = std::move(file);
  EXPECT_TRUE(moved.is_open());
  EXPECT_FALSE(file.is_open());  // NOLINT(bugprone-use-after-move): the contract says so
  char buf[8] = {};
  EXPECT_FAILS_WITH(file.write(0, buf, sizeof buf), EBADF);
  EXPECT_OK(moved.write(0, buf, sizeof buf));
  EXPECT_OK(moved.close());
}

// BTreeTrivial over posix runs each request inline, on the home worker, when the tree is idle
// (TreeCore::try_inline, Worker::io_now): an engine error there must still reach the request's
// receipt, and nothing else may be affected.
TEST(ControllerEngineErrors, AnUncachedRequestsEngineErrorReachesItsReceipt) {
  ScratchDir dir;
  const std::string path = dir.file("read-only");
  const auto data = pattern(4096, 9);
  {
    Controller ctl(quiet_options());
    File w = open_or_fail<BTreeTrivial>(ctl, path);
    EXPECT_OK(w.write(0, data.data(), data.size()));
    EXPECT_OK(w.close());
  }
  Controller ctl(quiet_options());
  File f = open_or_fail<BTreeTrivial>(ctl, path, Open::read);
  const auto other = pattern(512, 10);
  for (int i = 0; i < 3; ++i) EXPECT_FAILS_WITH(f.write(512 * i, other.data(), other.size()), EBADF);
  std::vector<unsigned char> back(data.size());
  Receipt r = f.read(0, back.data(), back.size());
  EXPECT_OK(r);
  EXPECT_EQ(r.bytes(), data.size());
  EXPECT_EQ(back, data) << "the failed writes changed nothing";
  EXPECT_OK(f.fsync());  // an engine error of a write is that write's, not the file's
  EXPECT_OK(f.close());
}

TEST(ControllerOpenErrors, ABadPathIsAnErrorNamingThePath) {
  ScratchDir dir;
  Controller ctl(quiet_options());
  const std::string missing = dir.file("no-such-dir/file");
  auto r = ctl.open<BTreeDefault>(missing, Open::read);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, errno_code(ENOENT)) << r.error().message;
  EXPECT_NE(r.error().message.find(missing), std::string::npos) << r.error().message;

  auto not_created = ctl.open<BTreeTrivial>(dir.file("absent"), Open::read | Open::write);
  ASSERT_FALSE(not_created.ok());
  EXPECT_NE(not_created.error().message.find(dir.file("absent")), std::string::npos) << not_created.error().message;

  auto a_directory = ctl.open<BTreeDefault>(dir.path().string(), Open::read | Open::write);
  ASSERT_FALSE(a_directory.ok());
  EXPECT_NE(a_directory.error().message.find(dir.path().string()), std::string::npos) << a_directory.error().message;

  // The controller is unharmed.
  auto good = ctl.open<BTreeDefault>(dir.file("good"), Open::read | Open::write | Open::create);
  ASSERT_TRUE(good.ok()) << good.error().message;
  EXPECT_EQ(good->write(0, "x", 1).bytes(), 1);
}

TEST(ControllerOpenErrors, AnUnknownEngineNameIsAnErrorNamingIt) {
  ScratchDir dir;
  Controller ctl(quiet_options());
  auto r = ctl.open<BTreeDefault>(dir.file("f"), Open::read | Open::write | Open::create, "no-such-engine");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("no-such-engine"), std::string::npos) << r.error().message;
  EXPECT_FALSE(r.error().code == std::error_code()) << r.error().message;
}

TEST(ControllerOpenErrors, AnUnavailableEngineIsAnErrorWithTheReason) {
  std::string unavailable, reason;
  for (const EngineInfo& e : list_engines()) {
    if (!e.available) {
      unavailable = e.name;
      reason = e.reason;
      break;
    }
  }
  if (unavailable.empty()) GTEST_SKIP() << "every engine is built and available here: none to refuse";
  ScratchDir dir;
  Controller ctl(quiet_options());
  auto r = ctl.open<BTreeDefault>(dir.file("f"), Open::read | Open::write | Open::create, unavailable);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find(unavailable), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("unavailable"), std::string::npos) << r.error().message;
}

TEST(ControllerOpenErrors, AnEngineNameIsRegisteredOnce) {
  Controller ctl(quiet_options());
  EXPECT_TRUE(ctl.add_engine("mine", engines::make_posix({})));
  EXPECT_FALSE(ctl.add_engine("mine", engines::make_posix({}))) << "the name is taken";
}

TEST(ControllerOpenErrors, UnalignedDirectIoIsBouncedNotEinval) {
  ScratchDir dir;
  Controller ctl(quiet_options());
  const std::string path = dir.file("direct");
  for (int tree = 0; tree < 2; ++tree) {
    auto opened = tree == 0 ? ctl.open<BTreeTrivial>(path, Open::read | Open::write | Open::create | Open::direct, "posix")
                            : ctl.open<BTreeDefault>(path, Open::read | Open::write | Open::direct, "posix");
    if (!opened.ok() && opened.error().code == errno_code(EINVAL))
      GTEST_SKIP() << "O_DIRECT refused on " << dir.path() << ": " << opened.error().message;
    ASSERT_TRUE(opened.ok()) << opened.error().message;
    File f = std::move(opened.value());
    std::vector<unsigned char> storage(200);
    const auto data = pattern(100, 9 + tree);
    std::memcpy(storage.data() + 3, data.data(), data.size());  // unaligned memory
    const std::uint64_t at = 4093 + 1000 * tree;                // unaligned offset, crosses a block
    Receipt w = f.write(at, storage.data() + 3, data.size());
    EXPECT_OK(w);
    EXPECT_EQ(w.bytes(), 100);
    std::vector<unsigned char> back(101);
    Receipt r = f.read(at, back.data() + 1, data.size());
    EXPECT_OK(r);
    EXPECT_EQ(r.bytes(), 100);
    EXPECT_EQ(std::memcmp(back.data() + 1, data.data(), data.size()), 0);
    EXPECT_OK(f.close());
    EXPECT_TRUE(file_holds(path, at, data));
  }
}

}  // namespace
}  // namespace tai::test
