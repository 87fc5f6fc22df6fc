// ControllerOptions::batch_scheduling: on, the controller's master and workers run under
// SCHED_BATCH (the same CPU share as the program's threads, but their wake-ups do not preempt a
// compute thread) and the program's own threads are left as they were; off (the default), the
// workers keep their creator's policy.
#include <gtest/gtest.h>

#include <pthread.h>
#include <sched.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "support/thread_masks.hpp"
#include "tai/tai.hpp"

namespace tai::test {
namespace {

// Whether this machine lets a thread take SCHED_BATCH (a container's seccomp profile may not):
// probed on a thread of the test's own, so the test's thread keeps its policy.
bool batch_policy_allowed(std::string& why) {
  int err = 0;
  std::thread([&err] {
    struct sched_param p {};
    err = ::pthread_setschedparam(::pthread_self(), SCHED_BATCH, &p);
  }).join();
  if (err != 0) why = std::string("pthread_setschedparam(SCHED_BATCH) refused here: ") + std::strerror(err);
  return err == 0;
}

// The scheduling policies of the process's threads whose names start with `prefix`, once
// `count` of them exist; a worker names itself before it sets its policy, so this polls until
// every one shows `want` (or 10 s passed) and returns what it saw last.
std::vector<int> policies_of(const std::string& prefix, std::size_t count, int want) {
  std::vector<int> seen;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    seen.clear();
    for (const ThreadMask& t : threads_named_at_least(prefix, count)) seen.push_back(::sched_getscheduler(t.tid));
    bool all = seen.size() >= count;
    for (int p : seen) all = all && p == want;
    if (all || std::chrono::steady_clock::now() >= end) return seen;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

TEST(ControllerThreadPolicy, TurnedOnMasterAndWorkersRunUnderBatchScheduling) {
  std::string why;
  if (!batch_policy_allowed(why)) GTEST_SKIP() << why;
  ASSERT_EQ(::sched_getscheduler(0), SCHED_OTHER) << "the test expects to start under the default policy";
  ControllerOptions o;
  o.workers = 3;
  o.batch_scheduling = true;
  Controller ctl(o);
  const std::vector<int> master = policies_of("tai-master", 1, SCHED_BATCH);
  const std::vector<int> workers = policies_of("tai-worker", 2, SCHED_BATCH);
  ASSERT_EQ(master.size(), 1u);
  ASSERT_EQ(workers.size(), 2u) << "another controller's workers are alive in this process";
  EXPECT_EQ(master[0], SCHED_BATCH);
  for (int p : workers) EXPECT_EQ(p, SCHED_BATCH);
  EXPECT_EQ(::sched_getscheduler(0), SCHED_OTHER) << "the program's own thread is left as it was";
  ctl.shutdown();
}

TEST(ControllerThreadPolicy, ByDefaultTheWorkersKeepTheCreatorsPolicy) {
  ControllerOptions o;
  o.workers = 2;
  ASSERT_FALSE(o.batch_scheduling) << "the default";
  Controller ctl(o);
  // SCHED_OTHER is what they inherit here; give a wrong setting time to show before reading.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::vector<int> master = policies_of("tai-master", 1, SCHED_OTHER);
  const std::vector<int> workers = policies_of("tai-worker", 1, SCHED_OTHER);
  ASSERT_EQ(master.size(), 1u);
  ASSERT_EQ(workers.size(), 1u) << "another controller's workers are alive in this process";
  EXPECT_EQ(master[0], SCHED_OTHER);
  EXPECT_EQ(workers[0], SCHED_OTHER);
  ctl.shutdown();
}

}  // namespace
}  // namespace tai::test
