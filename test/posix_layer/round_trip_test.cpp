// Round trips through tai/posix.hpp: what is written comes back (read, pread, readv), in the
// cache and from the kernel after close, on both trees; creat/openat; offsets move as POSIX says.
#include <sys/uio.h>

#include "posix_layer/support.hpp"

namespace tai::test {
namespace {

class RoundTrip : public LayerTest, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override { restart(layer_settings(GetParam())); }
};

TEST_P(RoundTrip, WriteThenReadBackThroughTheLayerAndTheKernel) {
  const std::string path = file("rt.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  EXPECT_TRUE(posix::routed(fd));
  std::string expect;
  for (unsigned i = 0; i < 64; ++i) {
    const std::string piece = pattern(1000 + i * 37, i);  // not block aligned
    ASSERT_EQ(write_all(fd, piece), static_cast<ssize_t>(piece.size()));
    expect += piece;
  }
  EXPECT_EQ(posix::lseek(fd, 0, SEEK_CUR), static_cast<off_t>(expect.size()));
  ASSERT_EQ(posix::lseek(fd, 0, SEEK_SET), 0);
  std::string got(expect.size() + 100, '\0');
  ASSERT_EQ(posix::read(fd, got.data(), got.size()), static_cast<ssize_t>(expect.size()));
  got.resize(expect.size());
  EXPECT_TRUE(got == expect);
  EXPECT_EQ(posix::read(fd, got.data(), 10), 0);  // at end of file

  std::string mid(5000, '\0');
  ASSERT_EQ(posix::pread(fd, mid.data(), mid.size(), 12345), 5000);
  EXPECT_TRUE(mid == expect.substr(12345, 5000));
  EXPECT_EQ(posix::lseek(fd, 0, SEEK_CUR), static_cast<off_t>(expect.size()));  // pread keeps the offset

  ASSERT_EQ(posix::close(fd), 0) << std::strerror(errno);
  EXPECT_TRUE(kernel_contents(path) == expect);
}

TEST_P(RoundTrip, PwriteOverwritesAndLeavesHolesAsZeros) {
  const std::string path = file("pw.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(posix::pwrite(fd, "hello world", 11, 0), 11);
  ASSERT_EQ(posix::pwrite(fd, "WORLD", 5, 6), 5);
  ASSERT_EQ(posix::pwrite(fd, "end", 3, 20000), 3);  // a hole
  char buf[32] = {};
  ASSERT_EQ(posix::pread(fd, buf, 11, 0), 11);
  EXPECT_EQ(std::string(buf, 11), "hello WORLD");
  std::string hole(20003 - 11, 'x');
  ASSERT_EQ(posix::pread(fd, hole.data(), hole.size(), 11), static_cast<ssize_t>(hole.size()));
  EXPECT_EQ(hole.substr(0, hole.size() - 3), std::string(hole.size() - 3, '\0'));
  EXPECT_EQ(hole.substr(hole.size() - 3), "end");
  EXPECT_EQ(posix::lseek(fd, 0, SEEK_CUR), 0);  // pwrite keeps the offset
  ASSERT_EQ(posix::close(fd), 0);
  const std::string k = kernel_contents(path);
  ASSERT_EQ(k.size(), 20003u);
  EXPECT_EQ(k.substr(0, 11), "hello WORLD");
}

TEST_P(RoundTrip, WritevAndReadvKeepTheOrderOfThePieces) {
  const std::string path = file("vec.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  std::string a = pattern(3000, 1), b = pattern(0, 2), c = pattern(70000, 3);
  struct iovec w[3] = {{a.data(), a.size()}, {b.data(), b.size()}, {c.data(), c.size()}};
  ASSERT_EQ(posix::writev(fd, w, 3), static_cast<ssize_t>(a.size() + c.size()));
  ASSERT_EQ(posix::lseek(fd, 0, SEEK_SET), 0);
  std::string x(1000, '\0'), y(80000, '\0');
  struct iovec r[2] = {{x.data(), x.size()}, {y.data(), y.size()}};
  ASSERT_EQ(posix::readv(fd, r, 2), static_cast<ssize_t>(a.size() + c.size()));
  EXPECT_TRUE(x + y.substr(0, a.size() + c.size() - 1000) == a + c);
  EXPECT_EQ(posix::lseek(fd, 0, SEEK_CUR), static_cast<off_t>(a.size() + c.size()));
  ASSERT_EQ(posix::close(fd), 0);
  EXPECT_TRUE(kernel_contents(path) == a + c);
}

TEST_P(RoundTrip, CreatAndOpenatCreateRoutedFiles) {
  const std::string path = file("creat.dat");
  const int fd = posix::creat(path.c_str(), 0640);
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(posix::routed(fd));
  ASSERT_EQ(write_all(fd, "creat"), 5);
  char b[8];
  EXPECT_EQ(posix::pread(fd, b, 5, 0), -1);  // creat opens write-only
  EXPECT_EQ(errno, EBADF);
  ASSERT_EQ(posix::close(fd), 0);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u & ~[] { mode_t m = ::umask(0); ::umask(m); return m; }());
  EXPECT_EQ(kernel_contents(path), "creat");

  const std::string dir = path.substr(0, path.rfind('/'));
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(dfd, 0);
  const int f2 = posix::openat(dfd, "at.dat", O_WRONLY | O_CREAT | O_EXCL, 0644);
  ASSERT_GE(f2, 0) << std::strerror(errno);
  EXPECT_TRUE(posix::routed(f2));
  ASSERT_EQ(write_all(f2, "openat"), 6);
  ASSERT_EQ(posix::close(f2), 0);
  EXPECT_EQ(posix::openat(dfd, "at.dat", O_WRONLY | O_CREAT | O_EXCL, 0644), -1);
  EXPECT_EQ(errno, EEXIST);
  ::close(dfd);
  EXPECT_EQ(kernel_contents(dir + "/at.dat"), "openat");
}

TEST_P(RoundTrip, LargeWritesLargerThanABlockAndTheQuota) {
  posix::detail::Settings s = layer_settings(GetParam());
  s.options.weak_quota = 1 << 20;
  s.options.strict_quota = 2 << 20;
  restart(s);
  const std::string path = file("big.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  const std::string big = pattern(5 << 20, 9);
  ASSERT_EQ(write_all(fd, big), static_cast<ssize_t>(big.size()));
  std::string back(big.size(), '\0');
  ASSERT_EQ(posix::pread(fd, back.data(), back.size(), 0), static_cast<ssize_t>(big.size()));
  EXPECT_TRUE(back == big);
  ASSERT_EQ(posix::close(fd), 0);
  EXPECT_TRUE(kernel_contents(path) == big);
}

INSTANTIATE_TEST_SUITE_P(Trees, RoundTrip, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "trivial" : "default"; });

}  // namespace
}  // namespace tai::test
