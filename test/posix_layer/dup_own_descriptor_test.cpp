// dup_own_descriptor: the duplicate of a program's descriptor that the layer keeps per routed
// file (for sync_file_range and its own syncs) is one of TAI's own (high, close-on-exec,
// recorded) and is made with a single fcntl, not a dup, a second dup and a close: the preload
// library makes one per routed open, and SQLite opens its rollback journal once per transaction.
#include <sys/resource.h>

#include "engines/common/own_descriptors.hpp"
#include "posix_layer/support.hpp"

namespace tai::test {
namespace {

using DupOwnDescriptor = LayerTest;

TEST_F(DupOwnDescriptor, IsHighCloseOnExecRecordedAndTheSameFile) {
  const int fd = ::open(file("a.dat").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  // The lowest free number, which the old way (dup, then move up) took and released.
  const int probe = ::dup(fd);
  ASSERT_GE(probe, 0);
  ::close(probe);

  const int own = tai::detail::dup_own_descriptor(fd);
  ASSERT_GE(own, 0) << std::strerror(errno);
  EXPECT_GE(own, tai::detail::own_descriptor_base());
  EXPECT_TRUE(::fcntl(own, F_GETFD) & FD_CLOEXEC);
  EXPECT_TRUE(tai::detail::is_own_descriptor(own));
  struct stat a {}, b {};
  ASSERT_EQ(::fstat(fd, &a), 0);
  ASSERT_EQ(::fstat(own, &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(a.st_dev, b.st_dev);
  // The program's next descriptor is the one it would get without TAI.
  const int next = ::dup(fd);
  EXPECT_EQ(next, probe);
  if (next >= 0) ::close(next);
  EXPECT_EQ(tai::detail::close_own_descriptor(own), 0);
  EXPECT_FALSE(tai::detail::is_own_descriptor(own));
  ::close(fd);
}

TEST_F(DupOwnDescriptor, ABadDescriptorFailsWithEbadf) {
  errno = 0;
  EXPECT_EQ(tai::detail::dup_own_descriptor(-1), -1);
  EXPECT_EQ(errno, EBADF);
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ::close(fd);
  errno = 0;
  EXPECT_EQ(tai::detail::dup_own_descriptor(fd), -1);
  EXPECT_EQ(errno, EBADF);
}

}  // namespace
}  // namespace tai::test
