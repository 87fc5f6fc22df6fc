// The seam the preload library uses for dup/dup2/fcntl(F_DUPFD): an alias shares the routed
// descriptor's offset and cache, and the file is written back at the last close of either.
#include "posix_layer/support.hpp"

namespace tai::test {
namespace {

using Alias = LayerTest;

TEST_F(Alias, ADupSharesTheOffsetAndTheCache) {
  const std::string path = file("dup.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  const int copy = ::dup(fd);
  ASSERT_GE(copy, 0);
  EXPECT_FALSE(posix::routed(copy));
  ASSERT_EQ(posix::detail::alias_descriptor(fd, copy), 0);
  EXPECT_TRUE(posix::routed(copy));
  ASSERT_EQ(posix::write(fd, "abc", 3), 3);
  ASSERT_EQ(posix::write(copy, "def", 3), 3);  // at the shared offset
  EXPECT_EQ(posix::lseek(fd, 0, SEEK_CUR), 6);
  ASSERT_EQ(posix::close(fd), 0);
  char b[8] = {};
  ASSERT_EQ(posix::pread(copy, b, 8, 0), 6);  // still routed through the alias
  EXPECT_EQ(std::string(b, 6), "abcdef");
  ASSERT_EQ(posix::close(copy), 0);
  EXPECT_EQ(kernel_contents(path), "abcdef");
  EXPECT_EQ(posix::detail::alias_descriptor(fd, copy), -1);  // not routed any more
}

TEST_F(Alias, ForgetLeavesTheKernelDescriptorAndWritesBackAtTheLast) {
  const std::string path = file("forget.dat");
  const int fd = posix::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(posix::write(fd, "kept", 4), 4);
  EXPECT_EQ(posix::detail::forget_descriptor(fd), 0);
  EXPECT_FALSE(posix::routed(fd));
  EXPECT_EQ(kernel_contents(path), "kept");  // the last description went: written back
  EXPECT_EQ(::close(fd), 0);                 // the kernel descriptor was left open
}

}  // namespace
}  // namespace tai::test
