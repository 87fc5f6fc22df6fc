// The exit handler: at exit every routed file is written back; a write-back that fails is
// printed on stderr and the process exits with status 75 even when the program exited 0.
// Death tests in the "threadsafe" style (the child re-executes this binary): a forked child
// would have the parent's controller without its threads.
#include <cstdlib>
#include <filesystem>

#include "posix_layer/support.hpp"

namespace tai::test {
namespace {

class Exit : public LayerTest {
 protected:
  // The re-executed child's fixture made a scratch directory of its own, which exit() would
  // leave behind (no destructors run): the child removes it itself. (It works in the parent's.)
  void drop_own_scratch_dir() {
    std::error_code ec;
    std::filesystem::remove_all(std::filesystem::path(file("x")).parent_path(), ec);
  }
};

// The same path in the parent and in the re-executed child (which inherits the environment).
std::string shared_path(const char* var, const std::string& fresh) {
  if (const char* p = std::getenv(var)) return p;
  ::setenv(var, fresh.c_str(), 1);
  return fresh;
}

TEST_F(Exit, ExitWritesEverythingBack) {
  ::testing::GTEST_FLAG(death_test_style) = "threadsafe";
  const std::string path = shared_path("TAI_POSIX_TEST_EXIT_OK", file("exit-ok.dat"));
  ::unlink(path.c_str());
  EXPECT_EXIT(
      {
        posix::detail::Settings s = layer_settings();
        s.options.flush_idle_ns = -1;  // nothing written back before exit
        posix::detail::restart_for_testing(s);
        const int fd = posix::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
        if (fd < 0 || !posix::routed(fd)) std::_Exit(3);
        if (write_all(fd, pattern(100000, 5)) != 100000) std::_Exit(4);
        drop_own_scratch_dir();
        std::exit(0);  // no fsync, no close
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_TRUE(kernel_contents(path) == pattern(100000, 5));
  ::unsetenv("TAI_POSIX_TEST_EXIT_OK");
}

TEST_F(Exit, AfterTheShutdownLibcContinuesAtTheLayersOffsets) {
  const std::string path = file("handback.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  const int alias = ::dup(fd);
  ASSERT_EQ(posix::detail::alias_descriptor(fd, alias), 0);
  ASSERT_EQ(write_all(fd, "abc"), 3);
  ASSERT_EQ(posix::close(fd), 0);  // the alias keeps the file routed
  EXPECT_TRUE(posix::detail::shutdown_for_testing().empty());
  EXPECT_FALSE(posix::routed(alias));
  ASSERT_EQ(write_all(alias, "d"), 1);  // libc, at the offset the layer handed back
  EXPECT_EQ(posix::close(alias), 0);
  EXPECT_EQ(kernel_contents(path), "abcd");
}

// A process whose routed files are all write-through makes no controller (Settings::
// files_start_through), and its end is the same: libc goes on at the layer's offsets after the
// shutdown.
TEST_F(Exit, WithoutAControllerLibcContinuesAtTheLayersOffsets) {
  posix::detail::Settings s = layer_settings();
  s.sync_through_bytes = 1 << 20;
  s.files_start_through = true;
  restart(s);
  const std::string path = file("handback-through.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  const int alias = ::dup(fd);
  ASSERT_EQ(posix::detail::alias_descriptor(fd, alias), 0);
  ASSERT_EQ(write_all(fd, "abc"), 3);
  ASSERT_EQ(posix::close(fd), 0);
  ASSERT_FALSE(posix::detail::controller_made_for_testing());
  EXPECT_TRUE(posix::detail::shutdown_for_testing().empty());
  EXPECT_FALSE(posix::routed(alias));
  ASSERT_EQ(write_all(alias, "d"), 1);  // libc, at the offset the layer handed back
  EXPECT_EQ(posix::close(alias), 0);
  EXPECT_EQ(kernel_contents(path), "abcd");
}

// Under order, a process without a controller still makes every closed epoch durable at exit: a write
// held back behind an epoch the order thread has not synced yet reaches the file before the
// process ends.
TEST_F(Exit, UnderOrderWithoutAControllerExitWritesTheHeldWrites) {
  ::testing::GTEST_FLAG(death_test_style) = "threadsafe";
  const std::string path = shared_path("TAI_POSIX_TEST_EXIT_ORDER", file("exit-order.dat"));
  ::unlink(path.c_str());
  EXPECT_EXIT(
      {
        posix::detail::Settings s = layer_settings();
        s.sync_through_bytes = 1 << 20;
        s.fsync_mode = posix::FsyncMode::order;
        s.fsync_inline = posix::detail::InlineEpochs::never;  // every epoch the order thread's
        posix::detail::restart_for_testing(s);
        const int fd = posix::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || !posix::routed(fd)) std::_Exit(3);
        if (write_all(fd, pattern(3000, 7)) != 3000) std::_Exit(4);
        posix::detail::hold_order_thread_for_testing(true);
        if (posix::fsync(fd) != 0) std::_Exit(5);
        if (posix::pwrite(fd, "held", 4, 3000) != 4) std::_Exit(6);  // behind the closed epoch
        if (posix::detail::controller_made_for_testing()) std::_Exit(7);
        posix::detail::hold_order_thread_for_testing(false);
        drop_own_scratch_dir();
        std::exit(0);  // no fsync, no close: the exit handler makes the epochs durable
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_TRUE(kernel_contents(path) == pattern(3000, 7) + "held");
  ::unsetenv("TAI_POSIX_TEST_EXIT_ORDER");
}

TEST_F(Exit, AFailedWriteBackAtExitChangesTheStatus) {
  ::testing::GTEST_FLAG(death_test_style) = "threadsafe";
  const std::string path = shared_path("TAI_POSIX_TEST_EXIT_FAIL", file("exit-fail.dat"));
  EXPECT_EXIT(
      {
        posix::detail::restart_for_testing(fault_settings("write:nth=1:errno=EIO:once"));
        const int fd = posix::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
        if (fd < 0 || !posix::routed(fd)) std::_Exit(3);
        if (write_all(fd, "doomed") != 6) std::_Exit(4);
        drop_own_scratch_dir();
        std::exit(0);
      },
      ::testing::ExitedWithCode(75), "data could not be written back");
  ::unsetenv("TAI_POSIX_TEST_EXIT_FAIL");
}

}  // namespace
}  // namespace tai::test
