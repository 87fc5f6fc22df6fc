// TAI's threads block every signal that can be blocked, from their first instruction: a signal
// sent to the process must run the program's handler on one of the program's threads (a handler
// may write to a file the drop-in layer routes, or longjmp), never on a controller worker or an
// I/O queue thread. The threads start with everything blocked (SignalsBlockedScope around their
// creation, engines/common/own_descriptors.hpp), whatever their creator's mask, and say who they
// are in their names ("tai-...", for top -H, perf and gdb).
#include <gtest/gtest.h>

#include <pthread.h>
#include <signal.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engines/common/own_descriptors.hpp"
#include "support/thread_masks.hpp"
#include "tai/tai.hpp"

namespace tai::test {
namespace {

// The blocked mask of the calling thread, as the kernel prints it.
std::string own_mask() { return blocked_signals_in("/proc/thread-self/status"); }

TEST(ThreadSignalMask, AThreadStartedInsideTheScopeStartsWithEverythingBlockedAndTheCreatorGetsItsMaskBack) {
  const std::string all = everything_blockable_mask();
  ASSERT_FALSE(all.empty()) << "no SigBlk line in /proc/thread-self/status";
  on_a_thread_blocking_nothing([&] {
    const std::string creator_before = own_mask();
    std::string first_mask;
    {
      const detail::SignalsBlockedScope blocked;
      // The new thread reads its mask before it does anything else: the mask it was born with.
      std::thread([&first_mask] { first_mask = own_mask(); }).join();
    }
    EXPECT_EQ(first_mask, all) << "a thread started inside SignalsBlockedScope did not start with every signal blocked";
    EXPECT_EQ(own_mask(), creator_before) << "the scope did not give its creator its mask back";
  });
}

TEST(ThreadSignalMask, ControllerWorkersBlockEverySignalAndAreNamed) {
  const std::string all = everything_blockable_mask();
  on_a_thread_blocking_nothing([&] {
    ControllerOptions o;
    o.workers = 3;
    Controller ctl(o);
    const std::vector<ThreadMask> masters = threads_named_at_least("tai-master", 1);
    const std::vector<ThreadMask> followers = threads_named_at_least("tai-worker", 2);
    // Other tests' controllers are gone by now; a count above ours would only be a leftover
    // detached shutdown thread's controller, which is checked the same way.
    EXPECT_GE(masters.size(), 1u) << "no thread named tai-master";
    EXPECT_GE(followers.size(), 2u) << "fewer than two threads named tai-worker";
    for (const ThreadMask& t : masters) EXPECT_EQ(t.blocked, all) << t.name << " " << t.tid;
    for (const ThreadMask& t : followers) EXPECT_EQ(t.blocked, all) << t.name << " " << t.tid;
  });
}

TEST(ThreadSignalMask, IoQueueThreadsBlockEverySignalAndAreNamed) {
  const std::string all = everything_blockable_mask();
  on_a_thread_blocking_nothing([&] {
    IoQueueOptions o;
    o.depth = 4;
    o.threads = 2;
    auto q = IoQueue::create("posix", o);
    ASSERT_TRUE(q) << q.error().message;
    const std::vector<ThreadMask> pool = threads_named_at_least("tai-io-queue", 2);
    EXPECT_GE(pool.size(), 2u) << "the posix engine's queue started fewer than two named threads";
    for (const ThreadMask& t : pool) EXPECT_EQ(t.blocked, all) << t.name << " " << t.tid;
  });
}

}  // namespace
}  // namespace tai::test
