// ftruncate through the cache: shrinking drops cached bytes beyond the new end (they never come
// back from a later write-back), growing reads as zeros, the file's own size changes nothing;
// O_TRUNC on a file the layer caches.
#include "posix_layer/support.hpp"

namespace tai::test {
namespace {

class Truncate : public LayerTest, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    posix::detail::Settings s = layer_settings(GetParam());
    s.options.flush_idle_ns = -1;  // the bytes beyond stay dirty in the cache until truncated
    restart(s);
  }
};

TEST_P(Truncate, ShrinkDropsCachedBytesBeyond) {
  const std::string path = file("shrink.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  const std::string data = pattern(50000, 4);
  ASSERT_EQ(write_all(fd, data), 50000);
  ASSERT_EQ(posix::ftruncate(fd, 1000), 0) << std::strerror(errno);
  // The offset is not moved by ftruncate.
  EXPECT_EQ(posix::lseek(fd, 0, SEEK_CUR), 50000);
  struct stat st {};
  ASSERT_EQ(posix::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, 1000);
  EXPECT_EQ(posix::lseek(fd, 0, SEEK_END), 1000);
  std::string back(2000, '\0');
  ASSERT_EQ(posix::pread(fd, back.data(), back.size(), 0), 1000);
  EXPECT_TRUE(back.substr(0, 1000) == data.substr(0, 1000));
  ASSERT_EQ(posix::fsync(fd), 0);
  ASSERT_EQ(posix::close(fd), 0);
  EXPECT_TRUE(kernel_contents(path) == data.substr(0, 1000));
}

TEST_P(Truncate, GrowReadsZerosAndKeepsTheData) {
  const std::string path = file("grow.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write_all(fd, "abc"), 3);
  ASSERT_EQ(posix::ftruncate(fd, 10000), 0);
  EXPECT_EQ(posix::lseek(fd, 0, SEEK_END), 10000);
  std::string back(10000, 'x');
  ASSERT_EQ(posix::pread(fd, back.data(), back.size(), 0), 10000);
  EXPECT_EQ(back.substr(0, 3), "abc");
  EXPECT_EQ(back.substr(3), std::string(9997, '\0'));
  ASSERT_EQ(posix::pwrite(fd, "Z", 1, 5000), 1);
  ASSERT_EQ(posix::close(fd), 0);
  const std::string k = kernel_contents(path);
  ASSERT_EQ(k.size(), 10000u);
  EXPECT_EQ(k[5000], 'Z');
}

TEST_P(Truncate, OTruncOfAFileStillCachedDropsItsCache) {
  const std::string path = file("otrunc.dat");
  const int a = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(a, 0);
  ASSERT_EQ(write_all(a, pattern(30000, 1)), 30000);
  const int b = posix::open(path.c_str(), O_WRONLY | O_TRUNC);
  ASSERT_GE(b, 0);
  EXPECT_EQ(posix::lseek(a, 0, SEEK_END), 0);
  ASSERT_EQ(write_all(b, "new"), 3);
  ASSERT_EQ(posix::close(b), 0);
  ASSERT_EQ(posix::close(a), 0);
  EXPECT_EQ(kernel_contents(path), "new");
}

TEST_P(Truncate, ThroughASecondDescriptorAfterTheFirstWasClosedAndItsNumberReused) {
  const std::string path = file("second.dat"), other = file("other.dat");
  const int a = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  const int b = posix::open(path.c_str(), O_RDWR);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  const std::string data = pattern(20000, 6);
  ASSERT_EQ(write_all(b, data), 20000);
  ASSERT_EQ(posix::close(a), 0);
  const int o = ::open(other.c_str(), O_RDWR | O_CREAT, 0644);  // takes a's number
  ASSERT_EQ(o, a);
  ASSERT_EQ(posix::ftruncate(b, 100), 0) << std::strerror(errno);
  ASSERT_EQ(posix::pwrite(b, "tail", 4, 100), 4);
  ASSERT_EQ(posix::close(b), 0);
  ::close(o);
  EXPECT_TRUE(kernel_contents(path) == data.substr(0, 100) + "tail");
  EXPECT_EQ(kernel_contents(other), "");
}

TEST_P(Truncate, BadLengthAndReadOnlyDescriptor) {
  const std::string path = file("bad.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(posix::ftruncate(fd, -1), -1);
  EXPECT_EQ(errno, EINVAL);
  const int r = posix::open(path.c_str(), O_RDONLY);  // joins the routed file, read-only
  ASSERT_GE(r, 0);
  const int kr = ::open(path.c_str(), O_RDONLY);
  ASSERT_EQ(::ftruncate(kr, 0), -1);
  const int kernel_errno = errno;
  EXPECT_EQ(posix::ftruncate(r, 0), -1);
  EXPECT_EQ(errno, kernel_errno);
  ::close(kr);
  EXPECT_EQ(posix::close(r), 0);
  EXPECT_EQ(posix::close(fd), 0);
}

// SQLite sets its database's size after every WAL checkpoint to the size it has: that truncation
// changes no byte and keeps the cache (no write-back and reopen). The kernel's file is grown to
// the size when the cache still holds the bytes that reach it.
TEST_P(Truncate, ToTheOwnSizeKeepsTheCacheAndGrowsTheKernelsFile) {
  const std::string path = file("own.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  const std::string data = pattern(20000, 6);
  ASSERT_EQ(write_all(fd, data), 20000);
  ASSERT_EQ(posix::ftruncate(fd, 20000), 0) << std::strerror(errno);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 20000) << "the kernel's file has the size the program set";
  std::string back(20000, '\0');
  ASSERT_EQ(posix::pread(fd, back.data(), back.size(), 0), 20000);
  EXPECT_TRUE(back == data);
  ASSERT_EQ(posix::close(fd), 0);
  EXPECT_TRUE(kernel_contents(path) == data);
}

// Another process grew the file behind the layer's back: a truncation to the size the layer knows
// is a real one then, and cuts what the other process wrote, as the kernel's would.
TEST_P(Truncate, ToTheOwnSizeOfAFileAnotherProcessGrewCutsIt) {
  const std::string path = file("grown.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write_all(fd, pattern(1000, 2)), 1000);
  ASSERT_EQ(posix::fsync(fd), 0);
  const int other = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(other, 0);
  ASSERT_EQ(::pwrite(other, "tail", 4, 5000), 4);
  ::close(other);
  ASSERT_EQ(posix::ftruncate(fd, 1000), 0) << std::strerror(errno);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 1000);
  ASSERT_EQ(posix::close(fd), 0);
  EXPECT_TRUE(kernel_contents(path) == pattern(1000, 2));
}

INSTANTIATE_TEST_SUITE_P(Trees, Truncate, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "trivial" : "default"; });

}  // namespace
}  // namespace tai::test
