// A write-back that fails (the fault engine) is reported by the next fsync and by close, once,
// with its errno (EIO, ENOSPC), and a later fsync that succeeds has written the data again.
#include "posix_layer/support.hpp"

namespace tai::test {
namespace {

using FailedWriteBack = LayerTest;

TEST_F(FailedWriteBack, TheNextFsyncReportsItThenTheDataIsWrittenAgain) {
  restart(fault_settings("write:nth=1:errno=EIO:once"));
  const std::string path = file("eio.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(posix::routed(fd));
  ASSERT_EQ(write_all(fd, "lost once"), 9);  // cached: the write itself succeeds
  errno = 0;
  EXPECT_EQ(posix::fsync(fd), -1);
  EXPECT_EQ(errno, EIO);
  // The data stayed dirty in the cache: the next fsync writes it again and succeeds.
  EXPECT_EQ(posix::fsync(fd), 0) << std::strerror(errno);
  EXPECT_EQ(kernel_contents(path), "lost once");
  EXPECT_EQ(posix::close(fd), 0);
}

TEST_F(FailedWriteBack, CloseReportsIt) {
  restart(fault_settings("write:nth=1:errno=ENOSPC:once"));
  const std::string path = file("enospc.dat");
  const int fd = posix::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write_all(fd, pattern(20000, 2)), 20000);
  errno = 0;
  EXPECT_EQ(posix::close(fd), -1);
  EXPECT_EQ(errno, ENOSPC);
  // The descriptor is closed all the same (as close(2) does after reporting an error).
  EXPECT_EQ(::fcntl(fd, F_GETFD), -1);
  EXPECT_EQ(errno, EBADF);
}

TEST_F(FailedWriteBack, AFailedEngineSyncIsReported) {
  restart(fault_settings("fsync:nth=1:errno=EIO:once"));
  const int fd = posix::open(file("sync.dat").c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write_all(fd, "data"), 4);
  EXPECT_EQ(posix::fsync(fd), -1);
  EXPECT_EQ(errno, EIO);
  // fsyncgate: the cache still holds the data, the next fsync (submitted after the failure)
  // writes it again and its success is real.
  EXPECT_EQ(posix::fsync(fd), 0) << std::strerror(errno);
  EXPECT_EQ(posix::close(fd), 0);
}

TEST_F(FailedWriteBack, AnUncachedWriteThatFailsIsReportedByFsync) {
  restart(fault_settings("write:nth=1:errno=EIO:once", /*trivial=*/true));  // no cache: writes go through
  const std::string path = file("uncached.dat");
  const int fd = posix::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  // Uncached, the write may run on this thread (the controller's inline path) and fail before
  // it returns: then write itself reports it, as write(2) would. Otherwise it returns 3 and the
  // next fsync reports the failure.
  const ssize_t w = write_all(fd, "abc");
  if (w == -1) {
    EXPECT_EQ(errno, EIO);
  } else {
    EXPECT_EQ(w, 3);
    EXPECT_EQ(posix::fsync(fd), -1);
    EXPECT_EQ(errno, EIO);
  }
  EXPECT_EQ(posix::fsync(fd), 0);  // reported once
  EXPECT_EQ(posix::close(fd), 0);
}

TEST_F(FailedWriteBack, FsyncAsyncReceiptCarriesTheError) {
  restart(fault_settings("write:nth=1:errno=EIO:once"));
  const int fd = posix::open(file("async.dat").c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write_all(fd, "x"), 1);
  Receipt r = posix::fsync_async(fd);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.error().value(), EIO);
  EXPECT_EQ(posix::wait(fd), -1);  // wait() reports the last fsync_async's error
  EXPECT_EQ(errno, EIO);
  EXPECT_EQ(posix::fsync(fd), 0);
  EXPECT_EQ(posix::close(fd), 0);
}

TEST_F(FailedWriteBack, ExitWritesBackAndReportsWhatFailed) {
  restart(fault_settings("write:nth=1:errno=EIO:once"));
  const std::string ok_path = file("exit-ok.dat");
  const int fd = posix::open(file("exit.dat").c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write_all(fd, "will fail"), 9);
  const std::vector<std::string> failures = posix::detail::shutdown_for_testing();
  ASSERT_FALSE(failures.empty());
  EXPECT_NE(failures[0].find("exit.dat"), std::string::npos) << failures[0];
  // After the shutdown the descriptor is served by libc directly.
  EXPECT_FALSE(posix::routed(fd));
  EXPECT_EQ(write_all(fd, "!"), 1);
  EXPECT_EQ(posix::close(fd), 0);
}

}  // namespace
}  // namespace tai::test
