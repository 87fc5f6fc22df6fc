// Write-through under the order mode (TAI_FSYNC=order with Settings::sync_through_bytes): a file
// synced after little data goes write-through after the order thread's sync of it, and from then
// on the order thread writes its held-back bytes and syncs it on its own descriptor, not through
// the controller. The epoch rule must hold all the same: a write made while an earlier epoch is
// not durable stays out of the kernel until it is. What the kernel has is read with a plain
// ::open/::pread; the recording engine shows what bypassed the controller.
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <thread>

#include "engines/recording/recording_engine.hpp"
#include "posix_layer/support.hpp"
#include "posix_layer/through_settings.hpp"

namespace tai::test {
namespace {

constexpr std::uint64_t kOrderThroughBytes = 64 * 1024;

class OrderThrough : public LayerTest {
 protected:
  void SetUp() override { restart(settings()); }
  void TearDown() override {
    posix::detail::hold_order_thread_for_testing(false);
    LayerTest::TearDown();
  }

  posix::detail::Settings settings() {
    posix::detail::Settings s = through_settings(kOrderThroughBytes, recording_);
    s.fsync_mode = posix::FsyncMode::order;
    s.fsync_max_delay_ms = 600'000;  // the fsyncs below never wait for the held thread
    return s;
  }
  // The recording engine is the controller's, made at the first file that goes to the cache:
  // made here if no file has yet (the requests counted from then on).
  engines::RecordingEngine& log() {
    if (*recording_ == nullptr) (void)posix::detail::controller();
    return **recording_;
  }

  std::string read_back(int fd, std::size_t n) {
    std::string got(n, '\0');
    const ssize_t r = posix::pread(fd, got.data(), n, 0);
    if (r < 0) return "<pread failed: " + std::string(std::strerror(errno)) + ">";
    got.resize(static_cast<std::size_t>(r));
    return got;
  }

  // Writes `s` at the end of what `want` holds, through the layer, and appends it to `want`.
  static void append(int fd, std::string& want, const std::string& s) {
    ASSERT_EQ(posix::pwrite(fd, s.data(), s.size(), static_cast<off_t>(want.size())), static_cast<ssize_t>(s.size()));
    want += s;
  }

  // A file that exists with `bytes` before the layer opens it: it starts cached (an empty one
  // starts write-through in order mode), then opened through the layer.
  int open_nonempty(const std::string& path, const std::string& bytes) {
    const int k = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (k < 0 || ::write(k, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) return -1;
    ::close(k);
    return posix::open(path.c_str(), O_RDWR, 0644);
  }

  // Small records, each synced: the file goes write-through once the order thread synced it
  // (the file holds `want` before).
  std::string make_through(int fd, std::string want = "") {
    append(fd, want, pattern(300, 1));
    EXPECT_EQ(posix::fdatasync(fd), 0);
    EXPECT_EQ(posix::sync_now(), 0);
    return want;
  }

 private:
  std::shared_ptr<engines::RecordingEngine*> recording_;
};

TEST_F(OrderThrough, ASmallSyncedFileGoesWriteThroughAndItsLaterEpochsWaitForTheEarlierOnes) {
  const posix::FsyncOrderStats base = posix::fsync_order_stats();  // the process's counts so far
  const std::string path = file("journal.dat");
  const std::string before = pattern(1000, 9);
  const int fd = open_nonempty(path, before);
  ASSERT_GE(fd, 0);
  const std::size_t engine_requests_cached = log().size();
  std::string want = make_through(fd, before);
  ASSERT_EQ(kernel_contents(path), want);
  const std::size_t engine_requests = log().size();
  EXPECT_GT(engine_requests, engine_requests_cached) << "the file was cached before its first sync";

  // The gate open: a write goes to the kernel as it returns.
  append(fd, want, pattern(200, 2));
  EXPECT_EQ(kernel_contents(path), want) << "the file did not go write-through after a small synced epoch";

  // The device stuck on the next epoch: what is written after its fsync is held back, out of
  // the kernel, until that epoch is durable.
  posix::detail::hold_order_thread_for_testing(true);
  ASSERT_EQ(posix::fdatasync(fd), 0);  // epoch n: returns without waiting
  const std::string durable_first = want;
  append(fd, want, pattern(500, 3));
  EXPECT_EQ(kernel_contents(path), durable_first) << "a write of epoch n+1 reached the kernel before epoch n was durable";
  ASSERT_EQ(posix::fdatasync(fd), 0);  // epoch n+1
  append(fd, want, pattern(100, 4));
  EXPECT_EQ(kernel_contents(path), durable_first);
  posix::detail::hold_order_thread_for_testing(false);

  // Every epoch durable: the order thread wrote the held bytes and synced on its own descriptor.
  ASSERT_EQ(posix::sync_now(), 0);
  EXPECT_EQ(kernel_contents(path), want);
  EXPECT_EQ(read_back(fd, want.size() + 10), want);
  const posix::FsyncOrderStats s = posix::fsync_order_stats();
  EXPECT_EQ(s.epochs_durable - base.epochs_durable, s.epochs_closed - base.epochs_closed);
  EXPECT_EQ(log().size(), engine_requests) << "a write-through file's writes and syncs bypass the controller's engine";
  struct stat st {};
  ASSERT_EQ(posix::fstat(fd, &st), 0);
  EXPECT_EQ(static_cast<std::size_t>(st.st_size), want.size());
  ASSERT_EQ(posix::close(fd), 0);
  EXPECT_EQ(kernel_contents(path), want);
}

// The write-through file's writes held back behind another file's epoch: the other file's
// bytes reach the kernel and are synced first (epochs are process-wide).
TEST_F(OrderThrough, AWriteThroughFileWaitsForAnotherFilesEarlierEpoch) {
  const std::string jpath = file("journal.dat"), dpath = file("db.dat");
  const int j = posix::open(jpath.c_str(), O_RDWR | O_CREAT, 0644);
  const int d = open_nonempty(dpath, "x");  // cached
  ASSERT_GE(j, 0);
  ASSERT_GE(d, 0);
  std::string jwant = make_through(j);
  std::string dwant = "x";
  posix::detail::hold_order_thread_for_testing(true);
  append(d, dwant, pattern(8192, 5));  // the gate is open: cached, or written around the cache
  ASSERT_EQ(posix::fsync(d), 0);       // epoch n: the database's pages
  append(j, jwant, pattern(64, 6));    // epoch n+1: held back
  ASSERT_EQ(posix::fsync(j), 0);
  EXPECT_EQ(kernel_contents(jpath), pattern(300, 1)) << "the journal's write passed the database's epoch";
  posix::detail::hold_order_thread_for_testing(false);
  ASSERT_EQ(posix::sync_now(), 0);
  EXPECT_TRUE(kernel_contents(dpath) == dwant);
  EXPECT_TRUE(kernel_contents(jpath) == jwant);
  ASSERT_EQ(posix::close(j), 0);
  ASSERT_EQ(posix::close(d), 0);
}

// Under order too, a process whose files all start write-through (made empty: git's objects,
// lock files, a journal) makes no controller; its epochs still wait for one another (a write
// after an fsync is held back while the epoch before it is not durable) and all are durable at
// sync_now.
TEST_F(OrderThrough, EmptyFilesMakeNoControllerAndTheirEpochsStillWait) {
  ASSERT_FALSE(posix::detail::controller_made_for_testing()) << "a restart leaves no controller";
  const std::string a = file("object.dat"), b = file("ref.dat");
  const int fa = posix::open(a.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  const int fb = posix::open(b.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fa, 0);
  ASSERT_GE(fb, 0);
  std::string want_a, want_b;
  append(fa, want_a, pattern(500, 3));
  posix::detail::hold_order_thread_for_testing(true);  // the epoch below cannot become durable
  ASSERT_EQ(posix::fsync(fa), 0);
  append(fb, want_b, pattern(40, 4));
  EXPECT_EQ(kernel_contents(b), "") << "a write of the next epoch reached the kernel before the epoch before it was durable";
  EXPECT_TRUE(read_back(fb, want_b.size()) == want_b) << "the held write reads back";
  posix::detail::hold_order_thread_for_testing(false);
  ASSERT_EQ(posix::fsync(fb), 0);
  ASSERT_EQ(posix::sync_now(), 0);
  EXPECT_TRUE(kernel_contents(a) == want_a);
  EXPECT_TRUE(kernel_contents(b) == want_b);
  EXPECT_FALSE(posix::detail::controller_made_for_testing())
      << "a controller was made although every routed file stayed write-through";
  ASSERT_EQ(posix::close(fa), 0);
  ASSERT_EQ(posix::close(fb), 0);
}

TEST_F(OrderThrough, ManyBytesBetweenSyncsGoBackToTheCache) {
  const std::string path = file("back.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);  // empty: starts write-through
  ASSERT_GE(fd, 0);
  std::string want = make_through(fd);
  const std::size_t engine_requests = log().size();
  for (int i = 0; i < 20; ++i) append(fd, want, pattern(8192, 10 + static_cast<unsigned>(i)));
  EXPECT_LT(kernel_contents(path).size(), want.size()) << "the writes past the threshold are cached";
  EXPECT_TRUE(read_back(fd, want.size()) == want);
  ASSERT_EQ(posix::fsync(fd), 0);
  ASSERT_EQ(posix::sync_now(), 0);
  EXPECT_TRUE(kernel_contents(path) == want);
  EXPECT_GT(log().size(), engine_requests) << "back in the cache, the file's writes go through the engine";
  ASSERT_EQ(posix::close(fd), 0);
}

// The write-through rule counts the bytes between the program's own fsyncs, not between the
// device's syncs of the file: those come later (the device behind, or with the log only at a
// checkpoint), and a file synced after every small record (SQLite's WAL) must not go back to
// the cache because the device lags.
TEST_F(OrderThrough, AFileSyncedAfterEverySmallRecordStaysWriteThroughWhileTheDeviceLags) {
  // A 16 KiB rule, so that what waits behind the held device (24 KiB) stays within the queue
  // bound another test checks on the process's counters.
  posix::detail::Settings s = settings();
  s.sync_through_bytes = 16 * 1024;
  restart(s);
  const std::string path = file("wal.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);  // empty: starts write-through
  ASSERT_GE(fd, 0);
  std::string want = make_through(fd);
  const std::size_t engine_requests = log().size();
  posix::detail::hold_order_thread_for_testing(true);  // no device sync of the file from here
  for (unsigned i = 0; i < 24; ++i) {  // 24 KiB, past the 16 KiB rule, 1 KiB per fsync
    append(fd, want, pattern(1024, 20 + i));
    ASSERT_EQ(posix::fdatasync(fd), 0) << std::strerror(errno);
  }
  posix::detail::hold_order_thread_for_testing(false);
  ASSERT_EQ(posix::sync_now(), 0) << std::strerror(errno);
  EXPECT_TRUE(kernel_contents(path) == want);
  EXPECT_EQ(log().size(), engine_requests) << "the file went back to the cache: its writes reached the engine";
  ASSERT_EQ(posix::close(fd), 0);
}

// An empty file opened in order mode starts write-through (a lock file, an object, a journal:
// small and synced at once); one that is not empty starts cached.
TEST_F(OrderThrough, AnEmptyFileStartsWriteThroughANonEmptyOneCached) {
  const std::string epath = file("empty.lock"), fpath = file("full.dat");
  const int e = posix::open(epath.c_str(), O_RDWR | O_CREAT | O_EXCL, 0644);
  const int f = open_nonempty(fpath, "0123456789");
  ASSERT_GE(e, 0);
  ASSERT_GE(f, 0);
  std::string ewant, fwant = "0123456789";
  append(e, ewant, pattern(40, 11));
  append(f, fwant, pattern(40, 12));
  EXPECT_EQ(kernel_contents(epath), ewant) << "the empty file did not start write-through";
  EXPECT_EQ(kernel_contents(fpath), "0123456789") << "the non-empty file's write went to the kernel before any sync";
  ASSERT_EQ(posix::close(e), 0);
  ASSERT_EQ(posix::close(f), 0);
  EXPECT_EQ(kernel_contents(fpath), fwant);
}

// The errors promise for write-through files: a held-back write that the kernel refuses when the
// order thread makes it (here a file-size limit, EFBIG) is returned by the next fsync, and the
// program is never told that epoch is durable.
TEST_F(OrderThrough, AWriteTheKernelRefusesLaterIsReturnedByTheNextFsync) {
  const std::string path = file("limited.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  std::string want = make_through(fd);
  struct rlimit before {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &before), 0);
  if (before.rlim_max != RLIM_INFINITY && before.rlim_max < 8192) GTEST_SKIP() << "RLIMIT_FSIZE hard limit below 8 KiB";
  const auto old_handler = ::signal(SIGXFSZ, SIG_IGN);  // the write fails with EFBIG instead
  posix::detail::hold_order_thread_for_testing(true);
  append(fd, want, pattern(100, 14));  // the gate open: to the kernel
  ASSERT_EQ(posix::fdatasync(fd), 0);  // an epoch in flight: what follows is held back
  const std::string big = pattern(8000, 13);
  ASSERT_EQ(posix::pwrite(fd, big.data(), big.size(), static_cast<off_t>(want.size())), static_cast<ssize_t>(big.size()))
      << "held back: the kernel has not seen it yet";
  ASSERT_EQ(posix::fdatasync(fd), 0);  // closes the epoch holding that write
  struct rlimit small = before;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  posix::detail::hold_order_thread_for_testing(false);
  errno = 0;
  const int r = posix::sync_now();
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &before), 0);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(r, -1) << "the epoch whose write failed was reported durable";
  EXPECT_EQ(errno, EFBIG);
  EXPECT_LT(kernel_contents(path).size(), want.size() + big.size());
  ASSERT_EQ(posix::close(fd), 0);
}

// SQLite deletes its rollback journal after each transaction and makes it again: a file made
// again under the name of one that went write-through starts so, in order mode too.
TEST_F(OrderThrough, AFileMadeAgainUnderAWriteThroughNameStartsWriteThrough) {
  const std::string path = file("t.db-journal");
  int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  (void)make_through(fd);
  ASSERT_EQ(posix::close(fd), 0);
  ASSERT_EQ(::unlink(path.c_str()), 0);
  fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(posix::routed(fd));
  std::string want;
  append(fd, want, pattern(700, 7));
  EXPECT_EQ(kernel_contents(path), want) << "the new file did not start write-through";
  posix::detail::hold_order_thread_for_testing(true);
  ASSERT_EQ(posix::fdatasync(fd), 0);
  const std::string first = want;
  append(fd, want, pattern(50, 8));
  EXPECT_EQ(kernel_contents(path), first) << "held back behind the epoch in flight";
  posix::detail::hold_order_thread_for_testing(false);
  ASSERT_EQ(posix::close(fd), 0);  // waits for every epoch
  EXPECT_EQ(kernel_contents(path), want);
}

// A close gives what a close gives under `full`: every fsync made before it is durable when it
// returns, and the file's writes since its last fsync are in the kernel, not synced. They stay
// in the open epoch, and the next fsync of any routed file makes them durable with it, on the
// order thread's own descriptor of the closed file. (Making them durable at the close cost an
// fsync per written file that the program never asked for: tar extracting 1,613 files under
// order took 2.5 times as long as under full.)
TEST_F(OrderThrough, ACloseWaitsForTheEpochsBeforeItAndLeavesItsOwnWritesToTheNextEpoch) {
  const posix::FsyncOrderStats base = posix::fsync_order_stats();  // the process's counts so far
  const std::string apath = file("synced.dat"), bpath = file("unsynced.out"), cpath = file("next.dat");
  const int a = posix::open(apath.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);  // empty: write-through
  ASSERT_GE(a, 0);
  std::string awant;
  append(a, awant, pattern(400, 31));
  posix::detail::hold_order_thread_for_testing(true);
  ASSERT_EQ(posix::fsync(a), 0);  // returns early: its epoch waits for the held device
  const auto start = std::chrono::steady_clock::now();
  std::thread device([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    posix::detail::hold_order_thread_for_testing(false);
  });
  const int closed = posix::close(a);
  const auto waited = std::chrono::steady_clock::now() - start;
  device.join();
  ASSERT_EQ(closed, 0) << std::strerror(errno);
  EXPECT_GE(waited, std::chrono::milliseconds(100)) << "the close returned before the fsync before it was durable";
  posix::FsyncOrderStats st = posix::fsync_order_stats();
  EXPECT_EQ(st.epochs_durable - base.epochs_durable, st.epochs_closed - base.epochs_closed) << "the close returned with an epoch before it not durable";

  // Nothing in flight: a file written and closed without an fsync closes no epoch and syncs nothing.
  const int b = posix::open(bpath.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(b, 0);
  std::string bwant;
  append(b, bwant, pattern(3000, 32));
  const std::uint64_t syncs = posix::detail::kernel_syncs_for_testing();
  const auto before = posix::fsync_order_stats();
  ASSERT_EQ(posix::close(b), 0);
  EXPECT_EQ(posix::fsync_order_stats().epochs_closed, before.epochs_closed) << "the close closed an epoch";
  EXPECT_EQ(posix::detail::kernel_syncs_for_testing(), syncs) << "the close synced a file the program never synced";
  EXPECT_EQ(kernel_contents(bpath), bwant) << "a closed file's bytes are in the kernel, as after a plain close";

  // The next fsync, of another file, makes the closed file's writes durable with its own: the
  // epoch syncs both (the closed one on the order thread's descriptor of it).
  const int c = posix::open(cpath.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(c, 0);
  std::string cwant;
  append(c, cwant, pattern(100, 33));
  ASSERT_EQ(posix::fsync(c), 0);
  ASSERT_EQ(posix::sync_now(), 0);
  EXPECT_EQ(posix::detail::kernel_syncs_for_testing(), syncs + 2)
      << "the epoch after the close did not sync both the closed file and the fsynced one";
  st = posix::fsync_order_stats();
  EXPECT_EQ(st.epochs_durable - base.epochs_durable, st.epochs_closed - base.epochs_closed);
  ASSERT_EQ(posix::close(c), 0);
}

// A write held back behind an epoch in flight, then the file closed: the close waits for that
// epoch, and its own write is in the kernel when it returns. Which way depends on timing (the
// order thread writes it as the gate opens, or the close, finding it still held, makes every
// write durable itself): the test checks what both ways promise, not which one ran.
TEST_F(OrderThrough, ACloseOfAFileWithAHeldWriteReturnsWithItInTheKernel) {
  const posix::FsyncOrderStats base = posix::fsync_order_stats();  // the process's counts so far
  const std::string apath = file("first.dat"), bpath = file("held.out");
  const int a = posix::open(apath.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(a, 0);
  std::string awant, bwant;
  append(a, awant, pattern(200, 35));
  const int b = posix::open(bpath.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(b, 0);
  ASSERT_EQ(posix::fsync(a), 0);
  ASSERT_EQ(posix::sync_now(), 0);
  append(a, awant, pattern(100, 36));
  posix::detail::hold_order_thread_for_testing(true);
  ASSERT_EQ(posix::fsync(a), 0);  // returns early
  append(b, bwant, pattern(1500, 37));
  EXPECT_EQ(kernel_contents(bpath), "") << "held back behind the epoch in flight";
  std::thread device([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    posix::detail::hold_order_thread_for_testing(false);
  });
  const int closed = posix::close(b);
  device.join();
  ASSERT_EQ(closed, 0) << std::strerror(errno);
  EXPECT_EQ(kernel_contents(bpath), bwant) << "the close returned with its file's write still held";
  const auto st = posix::fsync_order_stats();
  EXPECT_EQ(st.epochs_durable - base.epochs_durable, st.epochs_closed - base.epochs_closed);
  ASSERT_EQ(posix::close(a), 0);
  EXPECT_EQ(kernel_contents(apath), awant);
}

// Each closed file the open epoch holds keeps TAI's descriptors of it open until the epoch is
// durable. A program that writes and closes many files between two fsyncs (tar, a build) must not
// run out of descriptors: past a bound, one file per file system stands for the rest, and the
// next epoch syncs that file system whole.
TEST_F(OrderThrough, ManyFilesClosedBetweenTwoFsyncsHoldFewDescriptors) {
  const posix::FsyncOrderStats base = posix::fsync_order_stats();  // the process's counts so far
  if (open_descriptor_count() == 0) GTEST_SKIP() << "/proc/self/fd is not readable here: descriptors cannot be counted";
  constexpr int kFiles = 300;
  const std::size_t before = open_descriptor_count();
  std::vector<std::string> paths;
  for (int i = 0; i < kFiles; ++i) {
    paths.push_back(file("many-" + std::to_string(i) + ".out"));
    const int fd = posix::open(paths.back().c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);  // write-through
    ASSERT_GE(fd, 0) << "file " << i << ": " << std::strerror(errno);
    std::string want;
    append(fd, want, pattern(100, 50 + static_cast<unsigned>(i % 7)));
    ASSERT_EQ(posix::close(fd), 0) << "file " << i;
  }
  const std::size_t held = open_descriptor_count() - before;
  EXPECT_LE(held, 2u * 64u + 8u) << "every closed file keeps its descriptors open until the next epoch";
  const std::uint64_t syncs = posix::detail::kernel_syncs_for_testing();
  const std::uint64_t whole = posix::detail::kernel_syncfs_for_testing();
  const std::string cpath = file("the-fsync.dat");
  const int c = posix::open(cpath.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(c, 0);
  std::string cwant;
  append(c, cwant, pattern(100, 60));
  ASSERT_EQ(posix::fsync(c), 0);
  ASSERT_EQ(posix::sync_now(), 0);
  EXPECT_EQ(posix::detail::kernel_syncfs_for_testing(), whole + 1) << "the file system of the closed files was not synced once";
  EXPECT_LE(posix::detail::kernel_syncs_for_testing() - syncs, 64u + 2u) << "more files synced one by one than the bound";
  const auto st = posix::fsync_order_stats();
  EXPECT_EQ(st.epochs_durable - base.epochs_durable, st.epochs_closed - base.epochs_closed);
  EXPECT_LE(open_descriptor_count(), before + 3) << "the durable epoch did not let go of the closed files";
  for (int i = 0; i < kFiles; ++i) EXPECT_EQ(kernel_contents(paths[i]), pattern(100, 50 + static_cast<unsigned>(i % 7))) << paths[i];
  ASSERT_EQ(posix::close(c), 0);
}

// The errors promise at close and exit: a write of the open epoch held behind an epoch in flight,
// which the kernel refuses when the order thread writes it as the gate opens (a file-size limit,
// EFBIG), is returned by the close of its file, and reported by the exit handler's shutdown.
class OrderThroughRefused : public OrderThrough {
 protected:
  // Returns the file's descriptor with a held write past a 4 KiB RLIMIT_FSIZE, the device held.
  int held_write_past_the_limit(const std::string& path) {
    const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
    if (fd < 0) return -1;
    std::string want = make_through(fd);
    posix::detail::hold_order_thread_for_testing(true);
    append(fd, want, pattern(100, 70));
    if (posix::fdatasync(fd) != 0) return -1;  // an epoch in flight: what follows is held back
    const std::string big = pattern(8000, 71);
    if (posix::pwrite(fd, big.data(), big.size(), static_cast<off_t>(want.size())) != static_cast<ssize_t>(big.size())) return -1;
    struct rlimit small = before_;
    small.rlim_cur = 4096;
    if (::setrlimit(RLIMIT_FSIZE, &small) != 0) return -1;
    return fd;
  }
  void SetUp() override {
    OrderThrough::SetUp();
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &before_), 0);
    if (before_.rlim_max != RLIM_INFINITY && before_.rlim_max < 8192) GTEST_SKIP() << "RLIMIT_FSIZE hard limit below 8 KiB";
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);  // the write fails with EFBIG instead
  }
  void TearDown() override {
    (void)::setrlimit(RLIMIT_FSIZE, &before_);
    ::signal(SIGXFSZ, old_handler_);
    OrderThrough::TearDown();
  }
  struct rlimit before_ {};
  void (*old_handler_)(int) = SIG_DFL;
};

TEST_F(OrderThroughRefused, ACloseReturnsItsFilesHeldWriteThatFailed) {
  const int fd = held_write_past_the_limit(file("limited-close.dat"));
  ASSERT_GE(fd, 0) << std::strerror(errno);
  posix::detail::hold_order_thread_for_testing(false);
  errno = 0;
  const int r = posix::close(fd);
  const int e = errno;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &before_), 0);
  EXPECT_EQ(r, -1) << "the close returned 0 although its file's held write failed";
  EXPECT_EQ(e, EFBIG);
}

TEST_F(OrderThroughRefused, AnExitReportsAHeldWriteThatFailed) {
  const int fd = held_write_past_the_limit(file("limited-exit.dat"));
  ASSERT_GE(fd, 0) << std::strerror(errno);
  std::thread device([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    posix::detail::hold_order_thread_for_testing(false);
  });
  const auto failures = posix::detail::shutdown_for_testing();
  device.join();
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &before_), 0);
  ASSERT_FALSE(failures.empty()) << "the exit reported nothing although a held write failed";
  EXPECT_NE(failures.front().find(std::strerror(EFBIG)), std::string::npos) << failures.front();
  // posix::close: the descriptor is the kernel's after the shutdown, but the layer's table still
  // names it (a later test's pipe on the same number would look routed).
  EXPECT_EQ(posix::close(fd), 0);
}

// A cached file's last close writes its cache back to the engine, and an epoch syncs only files
// whose cache is open: its close still makes every write durable, as it closes the open epoch.
TEST_F(OrderThrough, ACachedFilesCloseMakesEveryWriteDurable) {
  const posix::FsyncOrderStats base = posix::fsync_order_stats();  // the process's counts so far
  const std::string path = file("cached.dat");
  const int fd = open_nonempty(path, "0123456789");  // not empty: cached
  ASSERT_GE(fd, 0);
  std::string want = "0123456789";
  append(fd, want, pattern(5000, 34));
  const auto before = posix::fsync_order_stats();
  ASSERT_EQ(posix::close(fd), 0);
  const auto after = posix::fsync_order_stats();
  EXPECT_EQ(after.epochs_closed, before.epochs_closed + 1) << "the close of a cached file closed no epoch";
  EXPECT_EQ(after.epochs_durable - base.epochs_durable, after.epochs_closed - base.epochs_closed);
  EXPECT_EQ(kernel_contents(path), want);
}

// The exit handler's shutdown (shutdown_for_testing runs the same steps) gives what an exit gives
// under `full`: it waits for the epochs closed before it, lets the writes held behind them reach
// the kernel, and syncs nothing the program did not fsync.
TEST_F(OrderThrough, AnExitWaitsForTheClosedEpochsAndSyncsNothingElse) {
  const posix::FsyncOrderStats base = posix::fsync_order_stats();  // the process's counts so far
  const std::string apath = file("synced.dat"), bpath = file("written.out");
  const int a = posix::open(apath.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  const int b = posix::open(bpath.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  std::string awant, bwant;
  append(a, awant, pattern(700, 41));
  ASSERT_EQ(posix::fsync(a), 0);  // its epoch syncs both files (b made by its open)
  ASSERT_EQ(posix::sync_now(), 0);
  append(a, awant, pattern(300, 43));
  const std::uint64_t syncs = posix::detail::kernel_syncs_for_testing();
  posix::detail::hold_order_thread_for_testing(true);
  ASSERT_EQ(posix::fsync(a), 0);  // returns early
  append(b, bwant, pattern(900, 42));  // held back behind a's epoch
  EXPECT_EQ(kernel_contents(bpath), "") << "a write of the open epoch reached the kernel before the epoch before it was durable";
  const auto before = posix::fsync_order_stats();
  std::thread device([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    posix::detail::hold_order_thread_for_testing(false);
  });
  const auto failures = posix::detail::shutdown_for_testing();
  device.join();
  EXPECT_TRUE(failures.empty()) << failures.front();
  const auto after = posix::fsync_order_stats();
  EXPECT_EQ(after.epochs_durable - base.epochs_durable, after.epochs_closed - base.epochs_closed) << "the exit did not wait for the fsync's epoch";
  EXPECT_EQ(after.epochs_closed, before.epochs_closed) << "the exit closed an epoch the program never closed";
  EXPECT_EQ(posix::detail::kernel_syncs_for_testing(), syncs + 1) << "the exit synced more than the fsync's epoch";
  EXPECT_EQ(kernel_contents(apath), awant);
  EXPECT_EQ(kernel_contents(bpath), bwant) << "the held write did not reach the kernel at the exit";
  EXPECT_EQ(posix::close(a), 0);  // see AnExitReportsAHeldWriteThatFailed
  EXPECT_EQ(posix::close(b), 0);
}

}  // namespace
}  // namespace tai::test
