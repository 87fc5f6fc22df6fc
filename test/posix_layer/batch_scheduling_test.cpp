// TAI_BATCH_SCHEDULING (docs/drop-in.md): 1 runs the layer's controller workers under
// SCHED_BATCH (ControllerOptions::batch_scheduling: their wake-ups do not preempt the program's
// threads), 0 or unset leaves them with the policy of the thread that started them, anything
// else is reported and ignored.
#include <sched.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "posix_layer/support.hpp"
#include "support/thread_masks.hpp"

namespace tai::test {
namespace {

TEST(BatchSchedulingSetting, OneTurnsItOnZeroAndUnsetLeaveItOffOtherTextIsReported) {
  {
    EnvVar b("TAI_BATCH_SCHEDULING", nullptr);
    std::vector<std::string> w;
    EXPECT_FALSE(posix::detail::settings_from_env(&w).options.batch_scheduling) << "the default";
    EXPECT_TRUE(w.empty());
  }
  for (const char* v : {"0", "1"}) {
    EnvVar b("TAI_BATCH_SCHEDULING", v);
    std::vector<std::string> w;
    EXPECT_EQ(posix::detail::settings_from_env(&w).options.batch_scheduling, v[0] == '1') << v;
    EXPECT_TRUE(w.empty()) << v;
  }
  for (const char* bad : {"yes", "2", "on"}) {
    EnvVar b("TAI_BATCH_SCHEDULING", bad);
    std::vector<std::string> w;
    EXPECT_FALSE(posix::detail::settings_from_env(&w).options.batch_scheduling) << bad;
    ASSERT_EQ(w.size(), 1u) << bad;
    EXPECT_NE(w[0].find("TAI_BATCH_SCHEDULING"), std::string::npos) << w[0];
  }
}

using LayerBatchScheduling = LayerTest;

TEST_F(LayerBatchScheduling, TheLayersWorkersRunUnderBatchSchedulingWhenAsked) {
  int refused = 0;
  std::thread([&refused] {  // probed on a thread of its own: the test's thread keeps its policy
    struct sched_param p {};
    refused = ::pthread_setschedparam(::pthread_self(), SCHED_BATCH, &p);
  }).join();
  if (refused != 0) GTEST_SKIP() << "pthread_setschedparam(SCHED_BATCH) refused here: " << std::strerror(refused);
  posix::detail::Settings s = layer_settings();
  s.options.batch_scheduling = true;
  restart(s);
  const int fd = posix::open(file("batch.dat").c_str(), O_RDWR | O_CREAT, 0644);  // starts the controller
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(posix::routed(fd));
  ASSERT_EQ(posix::write(fd, "0123456789", 10), 10);
  std::vector<ThreadMask> workers = threads_named_at_least("tai-master", 1);
  for (const ThreadMask& t : threads_named_at_least("tai-worker", 1)) workers.push_back(t);
  ASSERT_GE(workers.size(), 2u);
  // A worker names itself before it sets its policy: polled.
  for (const ThreadMask& t : workers) {
    int policy = -1;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while ((policy = ::sched_getscheduler(t.tid)) != SCHED_BATCH && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(policy, SCHED_BATCH) << t.name << " " << t.tid;
  }
  EXPECT_EQ(::sched_getscheduler(0), SCHED_OTHER) << "the program's own thread is left as it was";
  ASSERT_EQ(posix::close(fd), 0);
}

}  // namespace
}  // namespace tai::test
