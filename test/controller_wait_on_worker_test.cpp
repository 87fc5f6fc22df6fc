// A wait for an unfinished receipt on a worker thread of the receipt's own controller (inside a
// then() continuation, a submitted function or a hook) holds up the rounds that would finish it:
// it used to hang in some engine/tree combinations, run to run. Every wait now refuses at once:
// ok() false, error() EDEADLK with a message, wait_for() false, wait_any() -1. A receipt that has
// finished still answers normally there, and a wait for another controller's receipt is served.
// One body over every engine x {BTreeDefault, BTreeTrivial}; every wait of the test is bounded.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <string>
#include <system_error>
#include <thread>

#include "support/controller_support.hpp"
#include "support/test_env.hpp"
#include "tai/tai.hpp"

namespace tai::test {
namespace {

constexpr auto kDeadline = std::chrono::seconds(20);
const std::error_code kDeadlock(EDEADLK, std::generic_category());

/// What a wait on the worker saw, filled in there and read by the test once `ran` is set.
struct Seen {
  bool ok = true;
  std::error_code error;
  std::string message;
  bool wait_for_finished = true;
  std::ptrdiff_t wait_any = 0;
  std::int64_t bytes = -1;
  std::atomic<bool> ran{false};  // release store last, acquire loads: publishes the fields above
};

class WaitOnWorker : public testing::TestWithParam<EngineAndTree> {
 protected:
  void SetUp() override {
    engine = std::get<0>(GetParam());
    TAI_SKIP_UNLESS_ENGINE_AVAILABLE(engine);
    ctl = std::make_unique<Controller>(two_quiet_workers());
    auto f = open_engine_and_tree(*ctl, GetParam(), dir.file("w"), Open::read | Open::write | Open::create);
    ASSERT_TRUE(f.ok()) << f.error().message;
    file = std::move(f.value());
  }
  /// On the worker: submit a write of this controller's file and wait for it every way.
  static void wait_for_fresh_write(File& file, Seen& s) {
    static const char data[4096] = {1};
    Receipt w = file.write(0, data, sizeof data);
    Receipt both[2] = {file.fsync(), file.write(8192, data, sizeof data)};
    s.wait_any = Receipt::wait_any(both, 2);
    s.wait_for_finished = w.wait_for(std::chrono::seconds(5));
    s.ok = w.ok();
    s.error = w.error();
    s.message = w.message();
    s.bytes = w.bytes();
    s.ran.store(true, std::memory_order_release);
  }
  static void expect_refused(const Seen& s) {
    ASSERT_TRUE(s.ran);
    // The write may in principle finish before the wait looks (an inline path on the submitting
    // worker): then it must have succeeded. Otherwise every wait was refused.
    if (s.ok) {
      EXPECT_EQ(s.bytes, 4096);
      return;
    }
    EXPECT_EQ(s.error, kDeadlock) << s.message;
    EXPECT_NE(s.message.find("would never end"), std::string::npos) << s.message;
    EXPECT_FALSE(s.wait_for_finished);
    EXPECT_EQ(s.bytes, 0);
  }
  std::string engine;
  ScratchDir dir;
  std::unique_ptr<Controller> ctl;
  File file;
};

TEST_P(WaitOnWorker, InsideAContinuationAWaitForAnUnfinishedReceiptIsRefusedNotHung) {
  Seen s;
  // A receipt that cannot finish before then() is attached: its function waits for `go`.
  std::atomic<bool> go{false};
  Receipt gate = ctl->submit([&go] {
    while (!go.load(std::memory_order_acquire)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  File* f = &file;
  ASSERT_TRUE(gate.then([f, &s] { wait_for_fresh_write(*f, s); }));
  go.store(true, std::memory_order_release);
  ASSERT_TRUE(gate.wait_for(kDeadline));
  // The continuation may still be running after the receipt reports finished: wait for it.
  ASSERT_TRUE(eventually([&] { return s.ran.load(std::memory_order_acquire); }, std::chrono::milliseconds(20000))) << "the controller hung";
  expect_refused(s);
  EXPECT_TRUE(wait_ok(file.fsync()));
  EXPECT_TRUE(wait_ok(file.close()));
}

TEST_P(WaitOnWorker, InsideASubmittedFunctionAWaitForAnUnfinishedReceiptIsRefusedNotHung) {
  Seen s;
  File* f = &file;
  Receipt task = ctl->submit([f, &s] { wait_for_fresh_write(*f, s); });
  ASSERT_TRUE(task.wait_for(kDeadline)) << "the controller hung";
  EXPECT_TRUE(task.ok()) << task.message();
  expect_refused(s);
  EXPECT_TRUE(wait_ok(file.fsync()));
}

TEST_P(WaitOnWorker, InsideAHookAWaitForAnUnfinishedReceiptIsRefusedNotHung) {
  Seen s;
  File* f = &file;
  Receipt hook = file.hook([f, &s] { wait_for_fresh_write(*f, s); });
  ASSERT_TRUE(hook.wait_for(kDeadline)) << "the controller hung";
  EXPECT_TRUE(hook.ok()) << hook.message();
  ASSERT_TRUE(s.ran);
  // A hook holds every later operation of its file: the write can never finish before the hook.
  EXPECT_FALSE(s.ok);
  EXPECT_EQ(s.error, kDeadlock) << s.message;
  EXPECT_TRUE(wait_ok(file.fsync()));
}

TEST_P(WaitOnWorker, OnAWorkerAFinishedReceiptAndAnotherControllersReceiptAnswerNormally) {
  ScratchDir other_dir;
  ControllerOptions o;
  o.workers = 1;
  Controller other(o);
  auto of = other.open<BTreeDefault>(other_dir.file("o"), Open::read | Open::write | Open::create, "posix");
  ASSERT_TRUE(of.ok()) << of.error().message;
  File other_file = std::move(of.value());
  Receipt done_before = file.write(0, "abc", 3);
  ASSERT_TRUE(wait_ok(done_before));
  std::int64_t finished_bytes = -1;
  std::int64_t other_bytes = -1;
  File* g = &other_file;
  Receipt task = ctl->submit([&, g] {
    finished_bytes = done_before.bytes();        // finished: answered at once
    other_bytes = g->write(0, "defg", 4).bytes();  // another controller: waited for normally
  });
  ASSERT_TRUE(task.wait_for(kDeadline)) << "the controller hung";
  EXPECT_TRUE(task.ok()) << task.message();
  EXPECT_EQ(finished_bytes, 3);
  EXPECT_EQ(other_bytes, 4);
}

INSTANTIATE_TEST_SUITE_P(Controller, WaitOnWorker,
                         testing::Combine(testing::Values("posix", "cstdio", "libaio", "uring"), testing::Bool()),
                         engine_and_tree_name);

}  // namespace
}  // namespace tai::test
