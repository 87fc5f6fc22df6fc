// lseek(SEEK_END), fstat's st_size, SEEK_DATA/SEEK_HOLE count the writes still in the cache.
#include "posix_layer/support.hpp"

namespace tai::test {
namespace {

class Size : public LayerTest, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    posix::detail::Settings s = layer_settings(GetParam());
    s.options.flush_idle_ns = -1;  // keep the data in the cache: the kernel's size stays behind
    restart(s);
  }
};

TEST_P(Size, SeekEndAndFstatIncludeCachedWrites) {
  const std::string path = file("size.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  struct stat st {};
  ASSERT_EQ(posix::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, 0);
  ASSERT_EQ(posix::pwrite(fd, "abc", 3, 100000), 3);
  ASSERT_EQ(posix::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, 100003);
  EXPECT_EQ(posix::lseek(fd, 0, SEEK_END), 100003);
  EXPECT_EQ(posix::lseek(fd, -3, SEEK_END), 100000);
  char b[3];
  ASSERT_EQ(posix::read(fd, b, 3), 3);
  EXPECT_EQ(std::string(b, 3), "abc");
  // Writing at SEEK_END appends.
  ASSERT_EQ(posix::lseek(fd, 0, SEEK_END), 100003);
  ASSERT_EQ(posix::write(fd, "de", 2), 2);
  EXPECT_EQ(posix::lseek(fd, 0, SEEK_END), 100005);
  // A write below the end does not change the size.
  ASSERT_EQ(posix::pwrite(fd, "x", 1, 10), 1);
  ASSERT_EQ(posix::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, 100005);
  // SEEK_DATA / SEEK_HOLE: the whole file is data.
  EXPECT_EQ(posix::lseek(fd, 5, SEEK_DATA), 5);
  EXPECT_EQ(posix::lseek(fd, 5, SEEK_HOLE), 100005);
  EXPECT_EQ(posix::lseek(fd, 100005, SEEK_DATA), -1);
  EXPECT_EQ(errno, ENXIO);
  ASSERT_EQ(posix::close(fd), 0);
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 100005);
}

TEST_P(Size, AnExistingFileStartsWithItsKernelSize) {
  const std::string path = file("exists.dat");
  {
    const int k = ::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_GE(k, 0);
    ASSERT_EQ(::pwrite(k, "0123456789", 10, 0), 10);
    ::close(k);
  }
  const int fd = posix::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(posix::lseek(fd, 0, SEEK_END), 10);
  ASSERT_EQ(posix::write(fd, "ab", 2), 2);
  EXPECT_EQ(posix::lseek(fd, 0, SEEK_CUR), 12);
  struct stat st {};
  ASSERT_EQ(posix::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, 12);
  ASSERT_EQ(posix::close(fd), 0);
  EXPECT_EQ(kernel_contents(path), "0123456789ab");
}

INSTANTIATE_TEST_SUITE_P(Trees, Size, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "trivial" : "default"; });

}  // namespace
}  // namespace tai::test
