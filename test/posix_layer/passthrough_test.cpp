// What the layer does not route goes to libc untouched: read-only opens, directories, pipes,
// /dev/null, descriptors it did not open; and the environment's settings.
#include <sys/uio.h>

#include "posix_layer/support.hpp"

namespace tai::test {
namespace {

using PassThrough = LayerTest;

TEST_F(PassThrough, ReadOnlyDirectoriesPipesAndDevicesAreNotRouted) {
  const std::string path = file("ro.dat");
  {
    const int k = ::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_EQ(::write(k, "kernel", 6), 6);
    ::close(k);
  }
  const int ro = posix::open(path.c_str(), O_RDONLY);
  ASSERT_GE(ro, 0);
  EXPECT_FALSE(posix::routed(ro));
  char b[8] = {};
  EXPECT_EQ(posix::read(ro, b, 8), 6);
  EXPECT_EQ(posix::close(ro), 0);

  const std::string dir = path.substr(0, path.rfind('/'));
  const int d = posix::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(d, 0);
  EXPECT_FALSE(posix::routed(d));
  EXPECT_EQ(posix::read(d, b, 8), -1);
  EXPECT_EQ(errno, EISDIR);
  EXPECT_EQ(posix::close(d), 0);

  const int null = posix::open("/dev/null", O_WRONLY);
  ASSERT_GE(null, 0);
  EXPECT_FALSE(posix::routed(null));
  EXPECT_EQ(posix::write(null, "x", 1), 1);
  EXPECT_EQ(posix::close(null), 0);

  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  EXPECT_FALSE(posix::routed(p[1]));
  EXPECT_EQ(posix::write(p[1], "pipe", 4), 4);
  EXPECT_EQ(posix::read(p[0], b, 4), 4);
  EXPECT_EQ(posix::lseek(p[0], 0, SEEK_CUR), -1);
  EXPECT_EQ(errno, ESPIPE);
  struct iovec v = {b, 4};
  EXPECT_EQ(posix::writev(p[1], &v, 1), 4);
  EXPECT_EQ(posix::readv(p[0], &v, 1), 4);
  EXPECT_EQ(posix::close(p[0]), 0);
  EXPECT_EQ(posix::close(p[1]), 0);
}

TEST_F(PassThrough, DescriptorsTheLayerDidNotOpenGoToLibc) {
  const std::string path = file("libc.dat");
  const int k = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(k, 0);
  EXPECT_FALSE(posix::routed(k));
  EXPECT_EQ(posix::write(k, "abc", 3), 3);
  EXPECT_EQ(posix::lseek(k, 0, SEEK_CUR), 3);  // the kernel's offset moved
  EXPECT_EQ(posix::fsync(k), 0);
  struct stat st {};
  EXPECT_EQ(posix::fstat(k, &st), 0);
  EXPECT_EQ(st.st_size, 3);
  EXPECT_EQ(posix::close(k), 0);
}

TEST_F(PassThrough, SyncAndDirectOpensAreNotRouted) {
  for (int flag : {O_SYNC, O_DSYNC, O_PATH}) {
    const int fd = posix::open(file("sync.dat").c_str(), (flag == O_PATH ? O_PATH : O_WRONLY | O_CREAT | flag), 0644);
    ASSERT_GE(fd, 0) << flag << ": " << std::strerror(errno);
    EXPECT_FALSE(posix::routed(fd));
    EXPECT_EQ(posix::close(fd), 0);
  }
}

TEST(PassThroughSettings, TheEnvironmentIsRead) {
  ::setenv("TAI_ENGINE", "posix", 1);
  ::setenv("TAI_TREE", "trivial", 1);
  ::setenv("TAI_WORKERS", "3", 1);
  ::setenv("TAI_QUOTA", "1M,4M", 1);
  ::setenv("TAI_LOG", "1", 1);
  ::setenv("TAI_WRITE_BEHIND_MS", "50", 1);
  ::setenv("TAI_FLUSH_IDLE_MS", "7", 1);
  ::setenv("TAI_WRITE_COPY_BUDGET", "8M", 1);
  std::vector<std::string> warnings;
  posix::detail::Settings s = posix::detail::settings_from_env(&warnings);
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(s.options.engine, "posix");
  EXPECT_TRUE(s.trivial_tree);
  EXPECT_EQ(s.options.workers, 3u);
  EXPECT_EQ(s.options.weak_quota, 1u << 20);
  EXPECT_EQ(s.options.strict_quota, 4u << 20);
  EXPECT_TRUE(s.log);
  EXPECT_EQ(s.write_behind_ms, 50u);
  EXPECT_EQ(s.options.flush_idle_ns, 7'000'000);
  EXPECT_EQ(s.options.write_copy_budget, 8u << 20);
  ::setenv("TAI_TREE", "binary", 1);
  ::setenv("TAI_WORKERS", "lots", 1);
  ::setenv("TAI_QUOTA", "4M,1M", 1);
  ::setenv("TAI_WRITE_BEHIND_MS", "-1", 1);
  ::setenv("TAI_FLUSH_IDLE_MS", "soon", 1);
  ::setenv("TAI_WRITE_COPY_BUDGET", "a lot", 1);
  warnings.clear();
  s = posix::detail::settings_from_env(&warnings);
  EXPECT_EQ(warnings.size(), 6u);
  EXPECT_EQ(s.options.write_copy_budget, ControllerOptions{}.write_copy_budget);  // the default
  EXPECT_EQ(s.options.flush_idle_ns, ControllerOptions{}.flush_idle_ns);  // the default
  EXPECT_FALSE(s.trivial_tree);
  EXPECT_EQ(s.options.workers, 2u);
  EXPECT_EQ(s.write_behind_ms, 200u);  // the default
  ::setenv("TAI_WRITE_BEHIND_MS", "0", 1);
  warnings.clear();
  EXPECT_EQ(posix::detail::settings_from_env(&warnings).write_behind_ms, 0u);  // off
  ::setenv("TAI_FLUSH_IDLE_MS", "off", 1);
  EXPECT_LT(posix::detail::settings_from_env(&warnings).options.flush_idle_ns, 0);
  for (const char* v : {"TAI_ENGINE", "TAI_TREE", "TAI_WORKERS", "TAI_QUOTA", "TAI_LOG", "TAI_WRITE_BEHIND_MS", "TAI_FLUSH_IDLE_MS",
                        "TAI_WRITE_COPY_BUDGET"})
    ::unsetenv(v);
}

}  // namespace
}  // namespace tai::test
