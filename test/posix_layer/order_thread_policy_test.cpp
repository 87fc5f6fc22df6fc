// The fsync order thread runs under SCHED_BATCH: the same share of the CPU as the program's
// threads, but its wake-ups (a log batch's sync done) do not preempt the program's thread on that
// CPU, which under SQLite's WAL they did about 190 times per 10,000 transactions on 2 CPUs.
#include <sched.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "posix_layer/support.hpp"
#include "support/thread_masks.hpp"

namespace tai::test {
namespace {

using OrderThreadPolicy = LayerTest;

TEST_F(OrderThreadPolicy, TheOrderThreadDoesNotPreemptTheProgram) {
  posix::detail::Settings s = layer_settings();
  s.fsync_mode = posix::FsyncMode::order;  // the order thread starts at the first fsync
  restart(s);
  const int fd = posix::open(file("policy.dat").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(posix::write(fd, "0123456789", 10), 10);
  ASSERT_EQ(posix::fsync(fd), 0);
  const std::vector<ThreadMask> threads = threads_named_at_least("tai-fsync-order", 1);
  ASSERT_EQ(threads.size(), 1u) << "one order thread per process";
  // It names itself first and sets its policy right after: polled.
  int policy = -1;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((policy = ::sched_getscheduler(threads[0].tid)) != SCHED_BATCH && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(policy, SCHED_BATCH);
  EXPECT_EQ(::sched_getscheduler(0), SCHED_OTHER) << "the program's own thread is left as it was";
  ASSERT_EQ(posix::close(fd), 0);
}

}  // namespace
}  // namespace tai::test
