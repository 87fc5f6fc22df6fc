// Errno is never clobbered by the layer's own work: every successful call leaves the caller's
// errno as it was (the layer's internal system calls, reopen fallbacks, controller start-up).
#include <sys/uio.h>

#include "posix_layer/support.hpp"

namespace tai::test {
namespace {

using ErrnoPreserved = LayerTest;

TEST_F(ErrnoPreserved, SuccessfulCallsLeaveErrnoAlone) {
  constexpr int kMarker = 9999;
  const std::string path = file("keep.dat");
  errno = kMarker;
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);  // first use: makes the controller
  ASSERT_GE(fd, 0);
  EXPECT_EQ(errno, kMarker);
  ASSERT_TRUE(posix::routed(fd));
  char buf[64];
  struct iovec v = {buf, 8};
  struct stat st;
  auto check = [&](const char* what, long r) {
    EXPECT_GE(r, 0) << what;
    EXPECT_EQ(errno, kMarker) << what;
    errno = kMarker;
  };
  check("write", posix::write(fd, "abcdefgh", 8));
  check("pwrite", posix::pwrite(fd, "ABCD", 4, 100));
  check("writev", posix::writev(fd, &v, 1));
  check("lseek", posix::lseek(fd, 0, SEEK_SET));
  check("read", posix::read(fd, buf, 8));
  check("pread", posix::pread(fd, buf, 64, 90));
  check("pread at eof", posix::pread(fd, buf, 64, 1000));
  check("readv", posix::readv(fd, &v, 1));
  check("lseek end", posix::lseek(fd, 0, SEEK_END));
  check("fstat", posix::fstat(fd, &st));
  check("fsync", posix::fsync(fd));
  check("fdatasync", posix::fdatasync(fd));
  check("ftruncate", posix::ftruncate(fd, 50));
  check("barrier", posix::barrier(fd));
  check("wait", posix::wait(fd));
  const int ro = posix::open(path.c_str(), O_RDONLY);  // joins the routed file
  check("open read-only", ro);
  check("close read-only", posix::close(ro));
  check("close", posix::close(fd));
  // A write-only file: the engine's O_RDWR reopen fails with EACCES and falls back (not root).
  const int wo = posix::open(file("wo.dat").c_str(), O_WRONLY | O_CREAT, 0200);
  check("open write-only file", wo);
  check("close write-only file", posix::close(wo));
  // fsync_async answers on its receipt, never through errno.
  const Receipt bad = posix::fsync_async(-1);
  EXPECT_EQ(bad.error().value(), EBADF);
  EXPECT_EQ(errno, kMarker);
}

TEST_F(ErrnoPreserved, AFailingCallSetsErrnoOnce) {
  errno = 0;
  EXPECT_EQ(posix::fsync(-1), -1);
  EXPECT_EQ(errno, EBADF);
  const int fd = posix::open(file("x.dat").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  errno = 0;
  EXPECT_EQ(posix::pwrite(fd, "x", 1, -3), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(posix::close(fd), 0);
}

}  // namespace
}  // namespace tai::test
