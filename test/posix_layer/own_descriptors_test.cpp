// TAI's own descriptors (engine files, eventfds, io_uring rings) stay out of the program's way:
// high numbers, close-on-exec, recorded, so that the program's next open gets the number it
// expects and the preload library can spare them in close_range.
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>

#include "posix_layer/support.hpp"
#include "engines/common/own_descriptors.hpp"

namespace tai::test {
namespace {

using OwnDescriptors = LayerTest;

// Every descriptor the process has open, read from /proc/self/fd (TAI's may be far above 4096:
// half the soft limit).
std::vector<int> open_descriptors() {
  std::vector<int> fds;
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return fds;
  const int own = ::dirfd(dir);
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const int fd = std::atoi(e->d_name);
    if (fd != own) fds.push_back(fd);
  }
  ::closedir(dir);
  return fds;
}

TEST_F(OwnDescriptors, AreHighCloseOnExecAndRecorded) {
  const std::vector<int> before = open_descriptors();
  const int fd = posix::open(file("own.dat").c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(posix::routed(fd));
  ASSERT_EQ(posix::write(fd, "x", 1), 1);
  ASSERT_EQ(posix::fsync(fd), 0);  // the workers made their eventfds by now
  int own = 0;
  for (const int d : open_descriptors()) {
    if (std::find(before.begin(), before.end(), d) != before.end() || d == fd) continue;
    // Everything the layer opened since is TAI's: high, close-on-exec, recorded.
    EXPECT_GE(d, tai::detail::own_descriptor_base()) << "descriptor " << d;
    EXPECT_TRUE(::fcntl(d, F_GETFD) & FD_CLOEXEC) << "descriptor " << d;
    EXPECT_TRUE(tai::detail::is_own_descriptor(d)) << "descriptor " << d;
    ++own;
  }
  EXPECT_GE(own, 1);  // at least the engine's descriptor of the file
  EXPECT_FALSE(tai::detail::is_own_descriptor(fd));
  // The program's next open gets the lowest free number, as it would without TAI.
  const int next = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(next, 0);
  EXPECT_LT(next, tai::detail::own_descriptor_base());
  ::close(next);
  ASSERT_EQ(posix::close(fd), 0);
}

TEST(OwnDescriptorBase, IsHalfTheSoftLimitAndAtLeast256) {
  rlimit rl{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &rl), 0);
  const int base = tai::detail::own_descriptor_base();
  EXPECT_GE(base, 256);
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur >= 512 && rl.rlim_cur <= (1u << 20)) {
    EXPECT_EQ(base, static_cast<int>(rl.rlim_cur / 2));
  }
}

TEST(OwnDescriptorAdopt, MovesClosesTheOriginalAndForgetsOnClose) {
  const int low = ::open("/dev/null", O_RDONLY);  // no O_CLOEXEC: adopt sets it
  ASSERT_GE(low, 0);
  const int saved_errno = (errno = 1234);
  const int high = tai::detail::adopt_own_descriptor(low);
  EXPECT_EQ(errno, saved_errno);
  ASSERT_GE(high, tai::detail::own_descriptor_base());
  EXPECT_LT(::fcntl(low, F_GETFD), 0);  // the original is closed
  EXPECT_TRUE(::fcntl(high, F_GETFD) & FD_CLOEXEC);
  EXPECT_TRUE(tai::detail::is_own_descriptor(high));
  EXPECT_EQ(tai::detail::close_own_descriptor(high), 0);
  EXPECT_FALSE(tai::detail::is_own_descriptor(high));
  EXPECT_EQ(tai::detail::adopt_own_descriptor(-1), -1);
}

TEST(OwnDescriptorThreads, TheCallerIsNotTaisAControllerWorkerIsAndBlocksSignals) {
  EXPECT_FALSE(tai::detail::this_thread_is_tai());
  Controller c([] {
    ControllerOptions o;
    o.workers = 2;
    o.engine = "posix";
    return o;
  }());
  Receipt r = c.submit([] {
    if (!tai::detail::this_thread_is_tai()) throw std::runtime_error("a worker is not marked as TAI's");
    // A process-directed signal must find the program's threads, not TAI's.
    sigset_t now;
    pthread_sigmask(SIG_BLOCK, nullptr, &now);
    if (!sigismember(&now, SIGALRM) || !sigismember(&now, SIGCHLD) || !sigismember(&now, SIGUSR1))
      throw std::runtime_error("a worker does not block the program's signals");
  });
  r.wait();
  EXPECT_TRUE(r.ok()) << r.error().message();
  EXPECT_TRUE(c.shutdown().ok());
}

}  // namespace
}  // namespace tai::test
