// fsync, fdatasync, fsync_async + wait, barrier: after they return (or their receipt finishes
// ok) the data is in the kernel, visible to a plain ::open/::pread, before any close.
#include <thread>

#include "posix_layer/support.hpp"

namespace tai::test {
namespace {

class Fsync : public LayerTest, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    posix::detail::Settings s = layer_settings(GetParam());
    s.options.flush_idle_ns = -1;  // no idle write-back: only fsync puts the data in the kernel
    restart(s);
  }
};

TEST_P(Fsync, DataIsInTheKernelAfterFsync) {
  const std::string path = file("durable.dat");
  const int fd = posix::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  std::string all;
  for (unsigned round = 0; round < 5; ++round) {
    const std::string p = pattern(10000 + round * 3333, round);
    ASSERT_EQ(write_all(fd, p), static_cast<ssize_t>(p.size()));
    all += p;
    if (round % 2 == 0) {
      ASSERT_EQ(posix::fsync(fd), 0) << std::strerror(errno);
    } else {
      ASSERT_EQ(posix::fdatasync(fd), 0) << std::strerror(errno);
    }
    EXPECT_TRUE(kernel_contents(path) == all) << "round " << round;
  }
  ASSERT_EQ(posix::close(fd), 0);
}

TEST_P(Fsync, FsyncAsyncAndWait) {
  const std::string path = file("async.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  const std::string p = pattern(123456, 7);
  ASSERT_EQ(write_all(fd, p), static_cast<ssize_t>(p.size()));
  Receipt r = posix::fsync_async(fd);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_TRUE(kernel_contents(path) == p);
  ASSERT_EQ(posix::pwrite(fd, "tail", 4, 123456), 4);
  (void)posix::fsync_async(fd);
  ASSERT_EQ(posix::wait(fd), 0);
  EXPECT_TRUE(kernel_contents(path) == p + "tail");
  // A barrier returns at once; wait() then covers it.
  ASSERT_EQ(posix::pwrite(fd, "more", 4, 123460), 4);
  ASSERT_EQ(posix::barrier(fd), 0);
  ASSERT_EQ(posix::wait(fd), 0);
  EXPECT_TRUE(kernel_contents(path) == p + "tailmore");
  ASSERT_EQ(posix::close(fd), 0);
}

TEST_P(Fsync, FsyncCoversWritesOfOtherThreadsThatHappenedBefore) {
  const std::string path = file("threads.dat");
  const int fd = posix::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  std::thread w([&] {
    for (int i = 0; i < 100; ++i) ASSERT_EQ(posix::pwrite(fd, "0123456789", 10, i * 10), 10);
  });
  w.join();
  ASSERT_EQ(posix::fsync(fd), 0);
  const std::string k = kernel_contents(path);
  ASSERT_EQ(k.size(), 1000u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(k.substr(static_cast<std::size_t>(i) * 10, 10), "0123456789");
  ASSERT_EQ(posix::close(fd), 0);
}

TEST_P(Fsync, UnroutedDescriptorsUseTheKernel) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  EXPECT_EQ(posix::fsync(p[1]), -1);  // the kernel's answer for a pipe
  EXPECT_EQ(errno, EINVAL);
  Receipt r = posix::fsync_async(p[1]);
  EXPECT_FALSE(r.ok());
  ::close(p[0]);
  ::close(p[1]);
  Receipt bad = posix::fsync_async(p[1]);
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().value(), EBADF);
  EXPECT_EQ(posix::wait(p[1]), -1);
  EXPECT_EQ(errno, EBADF);
}

INSTANTIATE_TEST_SUITE_P(Trees, Fsync, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "trivial" : "default"; });

}  // namespace
}  // namespace tai::test
