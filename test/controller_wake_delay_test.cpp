// ControllerOptions::write_wake_delay_ns: a program's write may leave a sleeping master asleep
// until the doorbell's timer, but never longer, and never when the program waits for anything.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "support/controller_support.hpp"
#include "support/test_env.hpp"
#include "tai/tai.hpp"

namespace tai::test {
namespace {

using Clock = std::chrono::steady_clock;

ControllerOptions delayed(std::chrono::milliseconds delay) {
  ControllerOptions o = two_quiet_workers("posix");
  o.write_wake_delay_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(delay).count();
  return o;
}

// Lets the master finish its spin and fall asleep, so the next submission meets a sleeper.
void let_the_master_sleep() { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Nobody waits: the timer alone brings the write to the file, within the delay (plus slack for a
// loaded machine), and the file holds it.
TEST(ControllerWakeDelay, AnUnwaitedWriteFinishesByTheTimer) {
  ScratchDir dir;
  Controller ctl(delayed(std::chrono::milliseconds(30)));
  auto f = ctl.open<BTreeTrivial>(dir.file("f"), Open::read | Open::write | Open::create);
  ASSERT_TRUE(f) << f.error().message;
  const std::string bytes(8192, 'w');
  for (int i = 0; i < 5; ++i) {
    let_the_master_sleep();
    const auto t0 = Clock::now();
    Receipt w = f->write(static_cast<std::uint64_t>(i) * bytes.size(), bytes.data(), bytes.size());
    while (!w.finished() && seconds_since(t0) < 30) std::this_thread::sleep_for(std::chrono::microseconds(200));
    ASSERT_TRUE(w.finished()) << "write " << i << " never reached the engine without a wait";
    EXPECT_TRUE(w.ok()) << w.message();
  }
  std::vector<char> back(bytes.size());
  Receipt r = f->read(4 * bytes.size(), back.data(), back.size());
  ASSERT_TRUE(wait_ok(r));
  EXPECT_EQ(std::string(back.begin(), back.end()), bytes);
}

// A delay far longer than the test: a wait(), an fsync and a read each wake the master at once.
TEST(ControllerWakeDelay, WaitsFsyncsAndReadsDoNotWaitForTheTimer) {
  ScratchDir dir;
  Controller ctl(delayed(std::chrono::minutes(10)));
  auto f = ctl.open<BTreeDefault>(dir.file("f"), Open::read | Open::write | Open::create);
  ASSERT_TRUE(f) << f.error().message;
  const std::string bytes(64 * 1024, 'x');
  let_the_master_sleep();
  auto t0 = Clock::now();
  Receipt w = f->write(0, bytes.data(), bytes.size());
  ASSERT_TRUE(wait_ok(w, std::chrono::seconds(60)));
  EXPECT_LT(seconds_since(t0), 30.0) << "wait() woke the master";

  let_the_master_sleep();
  t0 = Clock::now();
  Receipt w2 = f->write(bytes.size(), bytes.data(), bytes.size());
  Receipt s = f->fsync();
  ASSERT_TRUE(wait_ok(s, std::chrono::seconds(60)));
  EXPECT_TRUE(w2.finished()) << "the fsync covers the write before it";
  EXPECT_LT(seconds_since(t0), 30.0);

  let_the_master_sleep();
  t0 = Clock::now();
  Receipt w3 = f->write(2 * bytes.size(), bytes.data(), bytes.size());
  std::vector<char> back(bytes.size());
  Receipt r = f->read(2 * bytes.size(), back.data(), back.size());
  const Receipt both[] = {w3, r};
  for (int done = 0; done < 2;) {
    const std::ptrdiff_t i = Receipt::wait_any(both, 2, std::int64_t{60} * 1'000'000'000);
    ASSERT_GE(i, 0) << "wait_any woke nothing within a minute";
    done = both[0].finished() + both[1].finished();
  }
  EXPECT_LT(seconds_since(t0), 30.0);
  EXPECT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(std::string(back.begin(), back.end()), bytes) << "the read sees the write before it";
}

// A full write-copy budget wakes the master: the writes that would make room must not sit for
// the delay. 64 writes of 256 KiB against a 1 MiB budget, each write submitted to a sleeping
// master's timer, must take far less than the delay.
TEST(ControllerWakeDelay, AFullCopyBudgetWakesTheMaster) {
  ScratchDir dir;
  ControllerOptions o = delayed(std::chrono::minutes(10));
  o.write_copy_budget = 1u << 20;
  o.caller_writes = false;  // the workers' copies are what fills the budget
  Controller ctl(o);
  auto f = ctl.open<BTreeTrivial>(dir.file("f"), Open::write | Open::create);
  ASSERT_TRUE(f) << f.error().message;
  const std::string bytes(256 * 1024, 'b');
  let_the_master_sleep();
  const auto t0 = Clock::now();
  std::vector<Receipt> rs;
  for (int i = 0; i < 64; ++i) rs.push_back(f->write(static_cast<std::uint64_t>(i) * bytes.size(), bytes.data(), bytes.size()));
  for (const Receipt& r : rs) ASSERT_TRUE(wait_ok(r, std::chrono::seconds(60)));
  EXPECT_LT(seconds_since(t0), 30.0);
  EXPECT_GT(ctl.stats().write_copy_waits, 0u) << "the budget was never full: the test proves nothing";
}

// Shutdown loses nothing: a controller destroyed while its master sleeps on a write that only
// armed the timer writes it at once (the close wakes the master), not after the delay.
TEST(ControllerWakeDelay, ShutdownWritesWhatTheTimerWouldHave) {
  ScratchDir dir;
  const std::string path = dir.file("f");
  const std::string bytes(32 * 1024, 's');
  const auto t0 = Clock::now();
  {
    Controller ctl(delayed(std::chrono::minutes(10)));
    auto f = ctl.open<BTreeDefault>(path, Open::write | Open::create);
    ASSERT_TRUE(f) << f.error().message;
    let_the_master_sleep();
    (void)f->write(0, bytes.data(), bytes.size());
  }
  EXPECT_LT(seconds_since(t0), 30.0) << "the shutdown waited for the timer";
  FILE* in = std::fopen(path.c_str(), "rb");
  ASSERT_NE(in, nullptr);
  std::string back(bytes.size() + 1, '\0');
  const std::size_t got = std::fread(back.data(), 1, back.size(), in);
  std::fclose(in);
  back.resize(got);
  EXPECT_EQ(back, bytes);
}

}  // namespace
}  // namespace tai::test
