// A bug the crash-state suite found with two threads on one file:
// operations are admitted in the order of the submitting threads' queues, not in the order they
// were submitted.
//
// Each application thread pushes into a Pending queue of its own (Worker::inbox[p], one per
// thread and worker); a round admits inbox 0, then inbox 1, ... (src/controller/rounds.cpp). So
// when thread B's write() has returned and thread A then calls fsync() or close(), and both wait
// in the queues for the same round, A's operation is admitted first if A's inbox comes first:
//  * the fsync completes successfully without B's write, which reaches the engine after it
//    (DESIGN section 2: "When an fsync receipt completes successfully, every write submitted
//    before it to that file is on stable storage"); found by the suite's concurrent runs as
//      "required durable by fsync#4 t0 ... {write#2 t1 [200, +100) ...}", the write's event
//      after the fsync's in the crash log;
//  * the close is admitted first and B's earlier write is rejected with EBADF "the file is
//    closed" (File::close: "operations already submitted go on").
// The workers' inboxes carry submission stamps (stamp_submit); admitting by stamp across inboxes
// would be one way to fix it.
//
// Disabled until it is fixed (both fail today, deterministically: a single worker is held in a
// task while B and then A submit, so that both wait for the same admission). Run them with
//   tai_tests --gtest_also_run_disabled_tests --gtest_filter='CrashSimBug.*'
// The suite's concurrent runs check the order per thread meanwhile (CrashRig::run_concurrent's
// order_across_threads = false) and wait for every thread's receipts before the close.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "engines/crashsim/crashsim_engine.hpp"
#include "support/controller_support.hpp"
#include "support/test_env.hpp"
#include "tai/controller.hpp"
#include "tai/engine_selector.hpp"

namespace tai::test {
namespace {

/// One worker, held inside a task until release(): what is submitted meanwhile waits in the
/// queues for one admission.
class HeldWorker {
 public:
  explicit HeldWorker(Controller& ctl) {
    held_ = ctl.submit([this] {
      started_.store(true, std::memory_order_release);
      while (!go_.load(std::memory_order_acquire)) std::this_thread::sleep_for(std::chrono::microseconds(50));
    });
    // Admitted and running: everything submitted from now on waits for the same admission.
    while (!started_.load(std::memory_order_acquire)) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  void release() { go_.store(true, std::memory_order_release); }
  ~HeldWorker() {
    release();
    held_.wait();
  }

 private:
  std::atomic<bool> go_{false};
  std::atomic<bool> started_{false};
  Receipt held_;
};

ControllerOptions one_worker() {
  ControllerOptions o = two_quiet_workers();
  o.workers = 1;
  return o;
}

TEST(CrashSimBug, DISABLED_AnFsyncCoversAWriteAnotherThreadSubmittedBeforeIt) {
  ScratchDir dir;
  const std::string path = dir.file("f");
  Controller ctl(one_worker());
  auto sim = engines::make_crashsim(make_engine("posix").value());
  engines::CrashSimEngine* log = sim.get();
  ctl.add_engine("crashsim", std::move(sim));
  File f = open_or_fail<BTreeTrivial>(ctl, path, Open::read | Open::write | Open::create, "crashsim");
  ASSERT_TRUE(f);
  HeldWorker hold(ctl);  // this thread's first submission: its inbox comes first
  const std::vector<unsigned char> data = pattern(4096, 3);
  Receipt w;
  std::thread other([&] { w = f.write(0, data.data(), data.size()); });
  other.join();  // the write was submitted before the fsync below
  Receipt s = f.fsync();
  hold.release();
  ASSERT_TRUE(wait_ok(s));
  ASSERT_TRUE(wait_ok(w));
  // The write must have completed on the engine before the fsync was issued.
  const engines::CrashLog l = log->snapshot();
  std::uint64_t write_done = 0, sync_issued = 0;
  for (const auto& e : l.events) {
    if (e.kind == engines::CrashEvent::Kind::write) write_done = e.complete_seq;
    if (e.kind == engines::CrashEvent::Kind::sync && !sync_issued) sync_issued = e.submit_seq;
  }
  ASSERT_NE(write_done, 0u);
  ASSERT_NE(sync_issued, 0u);
  EXPECT_LT(write_done, sync_issued) << "the fsync reached the engine before a write submitted before it";
}

TEST(CrashSimBug, DISABLED_ACloseDoesNotRejectAWriteAnotherThreadSubmittedBeforeIt) {
  ScratchDir dir;
  const std::string path = dir.file("f");
  Controller ctl(one_worker());
  File f = open_or_fail<BTreeDefault>(ctl, path, Open::read | Open::write | Open::create);
  ASSERT_TRUE(f);
  HeldWorker hold(ctl);
  const std::vector<unsigned char> data = pattern(4096, 4);
  Receipt w;
  std::thread other([&] { w = f.write(0, data.data(), data.size()); });
  other.join();  // the write was submitted before the close below
  Receipt c = f.close();
  hold.release();
  EXPECT_TRUE(wait_ok(c));
  EXPECT_TRUE(wait_ok(w)) << "a write submitted before close() was rejected";
  EXPECT_EQ(read_with_pread(path).size(), data.size());
}

}  // namespace
}  // namespace tai::test
