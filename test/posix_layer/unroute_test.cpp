// The seams the preload library uses for calls the layer does not do itself (mmap, sendfile,
// fork, posix_spawn, fcntl locks, stat by path, close_range): a file taken out of the layer has
// its cached writes in the kernel and its offset in the kernel descriptor, and is served by libc
// from then on.
#include <sys/resource.h>

#include "posix_layer/support.hpp"

namespace tai::test {
namespace {

using Unroute = LayerTest;

TEST_F(Unroute, HandsTheCacheAndTheOffsetToTheKernel) {
  const std::string path = file("unroute.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  const int alias = ::dup(fd);
  ASSERT_EQ(posix::detail::alias_descriptor(fd, alias), 0);
  ASSERT_EQ(posix::write(fd, "hello world", 11), 11);
  EXPECT_EQ(posix::detail::unroute_file(fd), 0);
  EXPECT_FALSE(posix::routed(fd));
  EXPECT_FALSE(posix::routed(alias));  // every descriptor of the file
  EXPECT_EQ(kernel_contents(path), "hello world");
  EXPECT_EQ(::lseek(fd, 0, SEEK_CUR), 11);  // the kernel continues where the layer was
  ASSERT_EQ(::write(alias, "!", 1), 1);
  EXPECT_EQ(kernel_contents(path), "hello world!");
  EXPECT_EQ(posix::detail::unroute_file(fd), 0);  // not routed: nothing to do
  ::close(alias);
  ::close(fd);
}

TEST_F(Unroute, AllCanSpareCloseOnExecDescriptors) {
  const int inherit = posix::open(file("inherit.dat").c_str(), O_WRONLY | O_CREAT, 0644);
  const int keep = posix::open(file("keep.dat").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_TRUE(posix::routed(inherit));
  ASSERT_TRUE(posix::routed(keep));
  ASSERT_EQ(posix::write(inherit, "a", 1), 1);
  ASSERT_EQ(posix::write(keep, "b", 1), 1);
  EXPECT_EQ(posix::detail::unroute_all(/*inheritable_only=*/true), 0);
  EXPECT_FALSE(posix::routed(inherit));
  EXPECT_TRUE(posix::routed(keep));
  EXPECT_EQ(kernel_contents(file("inherit.dat")), "a");
  EXPECT_EQ(posix::detail::unroute_all(false), 0);
  EXPECT_FALSE(posix::routed(keep));
  EXPECT_EQ(kernel_contents(file("keep.dat")), "b");
  ::close(inherit);
  ::close(keep);
}

// The scans of the descriptor table (exec, fork, exit) read only as far as its highest used
// chunk: a descriptor numbered far above the others, made after them, is still found.
TEST_F(Unroute, AllFindsADescriptorFarAboveTheOthers) {
  struct rlimit lim {};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &lim), 0);
  if (lim.rlim_cur < 8192) GTEST_SKIP() << "RLIMIT_NOFILE is " << lim.rlim_cur << ": no room for a descriptor above 4096";
  const std::string path = file("far.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  const int far = ::fcntl(fd, F_DUPFD, 6000);  // in a chunk of its own, far past fd's
  ASSERT_GE(far, 6000);
  ASSERT_EQ(posix::detail::alias_descriptor(fd, far), 0);
  ASSERT_EQ(posix::close(fd), 0);  // only the far one is left
  ASSERT_EQ(posix::write(far, "far away", 8), 8);
  EXPECT_EQ(posix::detail::unroute_all(false), 0);
  EXPECT_FALSE(posix::routed(far)) << "the scan stopped before the descriptor's chunk";
  EXPECT_EQ(kernel_contents(path), "far away");
  EXPECT_EQ(::lseek(far, 0, SEEK_CUR), 8);
  ::close(far);
}

TEST_F(Unroute, WriteBackAllKeepsTheRouting) {
  const std::string path = file("wb.dat");
  const int fd = posix::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_EQ(posix::write(fd, "cached", 6), 6);
  EXPECT_EQ(posix::detail::write_back_all(), 0);
  EXPECT_EQ(kernel_contents(path), "cached");
  EXPECT_TRUE(posix::routed(fd));
  ASSERT_EQ(posix::close(fd), 0);
}

TEST_F(Unroute, CachedSizeIsTheLogicalSize) {
  const std::string path = file("size.dat");
  const int fd = posix::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_EQ(posix::pwrite(fd, "z", 1, 99), 1);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  std::uint64_t size = 0;
  ASSERT_TRUE(posix::detail::cached_size(st.st_dev, st.st_ino, &size));
  EXPECT_EQ(size, 100u);
  EXPECT_EQ(posix::detail::unroute_inode(st.st_dev, st.st_ino), 0);
  EXPECT_FALSE(posix::routed(fd));
  EXPECT_FALSE(posix::detail::cached_size(st.st_dev, st.st_ino, &size));
  ::close(fd);
}

TEST_F(Unroute, ForgetRangeForgetsOnlyTheRange) {
  const int a = posix::open(file("a.dat").c_str(), O_WRONLY | O_CREAT, 0644);
  const int b = posix::open(file("b.dat").c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_LT(a, b);
  ASSERT_EQ(posix::write(b, "b", 1), 1);
  EXPECT_EQ(posix::detail::forget_range(static_cast<unsigned>(b), ~0u), 0);
  EXPECT_TRUE(posix::routed(a));
  EXPECT_FALSE(posix::routed(b));
  EXPECT_EQ(kernel_contents(file("b.dat")), "b");  // its last description: written back
  ::close(b);
  ASSERT_EQ(posix::close(a), 0);
}

TEST_F(Unroute, RouteDescriptorSaysWhyNot) {
  const int ro = ::open(file("ro.dat").c_str(), O_RDONLY | O_CREAT, 0644);
  ASSERT_GE(ro, 0);
  const char* why = posix::detail::route_descriptor(ro, O_RDONLY, file("ro.dat").c_str());
  ASSERT_NE(why, nullptr);
  EXPECT_NE(std::string(why).find("read-only"), std::string::npos) << why;
  const int rw = ::open(file("ro.dat").c_str(), O_RDWR);
  EXPECT_EQ(posix::detail::route_descriptor(rw, O_RDWR, file("ro.dat").c_str()), nullptr);
  EXPECT_TRUE(posix::routed(rw));
  // Now that the file is routed, a read-only descriptor shares its cache.
  EXPECT_EQ(posix::detail::route_descriptor(ro, O_RDONLY, file("ro.dat").c_str()), nullptr);
  EXPECT_EQ(posix::close(ro), 0);
  EXPECT_EQ(posix::close(rw), 0);
}

}  // namespace
}  // namespace tai::test
