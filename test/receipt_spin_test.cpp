// A receipt's wait spins for its controller's ControllerOptions::spin_ns before it sleeps
// (include/tai/receipt.hpp): a program that keeps a few requests in flight waits for the oldest
// a few microseconds at a time, and a sleep there costs the worker that finishes the request a
// futex wake-up. Whether the waiting thread slept is read from the kernel's count of its
// voluntary context switches (a futex sleep is one; spinning and sched_yield are not).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <thread>

#include "tai/tai.hpp"

namespace tai::test {
namespace {

// The calling thread's voluntary context switches so far; -1 when /proc does not say.
long voluntary_switches() {
  std::ifstream in("/proc/thread-self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("voluntary_ctxt_switches:", 0) == 0) return std::stol(line.substr(line.find(':') + 1));
  return -1;
}

// The voluntary switches of one wait() for a task that takes 20 ms, under `spin_ns`.
long switches_of_a_wait(std::int64_t spin_ns, const char* which, std::int64_t* waited_ns = nullptr) {
  ControllerOptions o;
  o.workers = 2;
  o.spin_ns = spin_ns;
  Controller ctl(o);
  Receipt r = ctl.submit([] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
  const auto t0 = std::chrono::steady_clock::now();
  const long before = voluntary_switches();
  r.wait();
  const long after = voluntary_switches();
  if (waited_ns) *waited_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(r.ok()) << which;
  ctl.shutdown();
  return after - before;
}

TEST(ReceiptSpin, AWaitShorterThanTheSpinNeverSleepsAndALongerOneDoes) {
  if (voluntary_switches() < 0) GTEST_SKIP() << "/proc/thread-self/status has no voluntary_ctxt_switches line here";
  std::int64_t waited = 0;
  // The fewest of three tries: a wait that spins can still be switched out once by a lock it
  // meets at the task's end (the worker finishing it at that moment) on a loaded machine; one
  // that sleeps for the task does so every time.
  long fewest = switches_of_a_wait(std::int64_t{200'000'000}, "a 200 ms spin", &waited);
  for (int i = 0; i < 2 && fewest != 0; ++i)
    fewest = std::min(fewest, switches_of_a_wait(std::int64_t{200'000'000}, "a 200 ms spin", &waited));
  EXPECT_EQ(fewest, 0) << "the wait slept although its controller's spin_ns (200 ms) outlasts the 20 ms task";
  EXPECT_GE(waited, 15'000'000) << "the wait returned before the task could have finished";
  EXPECT_GE(switches_of_a_wait(0, "no spin"), 1) << "a wait that does not spin must sleep (the count is not read right)";
}

}  // namespace
}  // namespace tai::test
