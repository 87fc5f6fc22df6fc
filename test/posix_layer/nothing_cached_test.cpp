// nothing_cached(): the lock-free answer the preload library asks before a record lock, a stat
// or a metadata call, to skip the layer (and its two rt_sigprocmask calls) when no routed file
// can have bytes in the cache. It must be false whenever a routed file may hold cached bytes,
// or (in the order fsync mode) an epoch waits or a write is held back, and true once every routed
// file is write-through (SQLite's steady state) or closed and nothing waits.
#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "posix_layer/support.hpp"

namespace tai::test {
namespace {

constexpr std::uint64_t kThrough = 64 * 1024;

class NothingCached : public LayerTest {
 protected:
  void SetUp() override { restart(settings(posix::FsyncMode::full)); }
  void TearDown() override {
    posix::detail::hold_order_thread_for_testing(false);
    LayerTest::TearDown();
  }
  // No idle write-back and no write-behind: a cached write stays cached until a sync or close.
  static posix::detail::Settings settings(posix::FsyncMode mode) {
    posix::detail::Settings s = layer_settings();
    s.options.flush_idle_ns = -1;
    s.write_behind_ms = 0;
    s.start_writeback_bytes = 0;
    s.sync_through_bytes = kThrough;
    s.files_start_through = false;  // a file starts cached in the full mode
    s.fsync_mode = mode;
    return s;
  }
};

using posix::detail::nothing_cached;

TEST_F(NothingCached, FollowsACachedFileThroughWriteThroughBackToTheCacheAndClose) {
  EXPECT_TRUE(nothing_cached()) << "no routed file yet";
  const std::string path = file("db.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(posix::routed(fd));
  EXPECT_FALSE(nothing_cached()) << "a routed file that is not write-through may cache";

  const std::string a = pattern(4096, 1);
  ASSERT_EQ(posix::pwrite(fd, a.data(), a.size(), 0), static_cast<ssize_t>(a.size()));
  EXPECT_FALSE(nothing_cached()) << "a cached write";
  EXPECT_EQ(kernel_contents(path), "");

  // A small sync: the file goes write-through, the kernel has every byte.
  ASSERT_EQ(posix::fsync(fd), 0) << std::strerror(errno);
  EXPECT_TRUE(nothing_cached()) << "the only routed file is write-through after a small sync";
  EXPECT_EQ(kernel_contents(path), a);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(a.size())) << "the kernel's size is the logical size";

  // More than the threshold between two syncs: back to the cache.
  const std::string big = pattern(2 * kThrough, 2);
  ASSERT_EQ(posix::pwrite(fd, big.data(), big.size(), 4096), static_cast<ssize_t>(big.size()));
  EXPECT_FALSE(nothing_cached()) << "the file left write-through: its later writes are cached";

  ASSERT_EQ(posix::close(fd), 0) << std::strerror(errno);
  EXPECT_TRUE(nothing_cached()) << "the last close wrote everything back";
  EXPECT_EQ(kernel_contents(path), a + big);
}

TEST_F(NothingCached, ASecondCachedFileKeepsItFalse) {
  const int db = posix::open(file("db.dat").c_str(), O_RDWR | O_CREAT, 0644);
  const int log = posix::open(file("log.dat").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(db, 0);
  ASSERT_GE(log, 0);
  ASSERT_EQ(posix::pwrite(db, "x", 1, 0), 1);
  ASSERT_EQ(posix::fsync(db), 0);
  ASSERT_EQ(posix::pwrite(log, "y", 1, 0), 1);
  EXPECT_FALSE(nothing_cached()) << "log.dat holds a cached write";
  ASSERT_EQ(posix::fsync(log), 0);
  EXPECT_TRUE(nothing_cached());
  ASSERT_EQ(posix::close(db), 0);
  ASSERT_EQ(posix::close(log), 0);
  EXPECT_TRUE(nothing_cached());
}

TEST_F(NothingCached, InTheOrderModeOnlyWhileTheGateIsOpen) {
  restart(settings(posix::FsyncMode::order));
  // A file empty at its open is write-through in the order mode: with the gate open the kernel
  // has every byte, as in the full mode.
  const std::string path = file("journal.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(posix::routed(fd));
  EXPECT_TRUE(nothing_cached()) << "order mode, one write-through file, no epoch";

  // An epoch waits for the device (the order thread held): a record lock would have writes to
  // publish, an unlink epochs to wait for.
  posix::detail::hold_order_thread_for_testing(true);
  ASSERT_EQ(posix::pwrite(fd, "a", 1, 0), 1);
  ASSERT_EQ(posix::fsync(fd), 0);
  EXPECT_FALSE(nothing_cached()) << "an epoch is closed and not durable";
  ASSERT_EQ(posix::pwrite(fd, "b", 1, 1), 1);
  EXPECT_FALSE(nothing_cached()) << "a write is held back behind the gate";
  EXPECT_EQ(kernel_contents(path), "a");

  posix::detail::hold_order_thread_for_testing(false);
  ASSERT_EQ(posix::sync_now(), 0);
  EXPECT_TRUE(nothing_cached()) << "every epoch durable, the held write in the kernel: the gate is open";
  EXPECT_EQ(kernel_contents(path), "ab");

  // A file that was not empty at its open starts cached: false with the gate open too.
  const std::string other = file("db.dat");
  {
    const int k = ::open(other.c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_GE(k, 0);
    ASSERT_EQ(::write(k, "z", 1), 1);
    ::close(k);
  }
  const int db = posix::open(other.c_str(), O_RDWR, 0644);
  ASSERT_GE(db, 0);
  EXPECT_FALSE(nothing_cached()) << "order mode, a cached file";
  ASSERT_EQ(posix::close(db), 0);
  ASSERT_EQ(posix::close(fd), 0);
  EXPECT_TRUE(nothing_cached()) << "order mode, every routed file closed, the gate open";
}

}  // namespace
}  // namespace tai::test
