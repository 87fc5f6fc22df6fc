// Operations of different threads on one file: an fsync, a close or a barrier comes after every
// operation another thread submitted before it (DESIGN section 2: "When an fsync receipt
// completes successfully, every write submitted before it to that file is on stable storage").
//
// Each application thread pushes into a queue of its own per worker (Worker::inbox). The
// crash-state suite found that a round admitted inbox 0, then inbox 1, ...: when thread B's
// write() had returned and thread A then called fsync() or close(), and both waited for the same
// admission, A's operation was admitted first if A's queue came first:
//  * the fsync completed successfully without B's write, which reached the engine after it;
//  * the close was admitted first and B's earlier write was rejected with EBADF.
// Admission now follows submission keys (Worker::stamp_admission, take_new in rounds.cpp). The
// tests below hold the single worker in a task while B and then A submit, so that both wait for
// the same admission (deterministic), and a stress test races them without the hold.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "engines/crashsim/crashsim_engine.hpp"
#include "support/controller_support.hpp"
#include "support/test_env.hpp"
#include "tai/testing/crash_checker.hpp"
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

TEST(CrossThreadOrder, AnFsyncCoversAWriteAnotherThreadSubmittedBeforeIt) {
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

TEST(CrossThreadOrder, ACloseDoesNotRejectAWriteAnotherThreadSubmittedBeforeIt) {
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

// Without the hold: thread B writes, then hands over to thread A, which fsyncs at once; 300
// rounds on two workers. Each round's fsync must be served by an engine sync issued after that
// round's write completed on the engine, and completed before the fsync's receipt. A stress
// check of the same rule under real timing: the window it needs (a worker between reading B's
// queue and A's) is a few nanoseconds, so the old queue-order admission passed it too; the two
// held tests above are the ones that fail on it.
TEST(CrossThreadOrder, HandedOverFsyncsAlwaysFollowTheWriteUnderRaces) {
  ScratchDir dir;
  const std::string path = dir.file("f");
  Controller ctl(two_quiet_workers());
  auto sim = engines::make_crashsim(make_engine("posix").value());
  engines::CrashSimEngine* log = sim.get();
  ctl.add_engine("crashsim", std::move(sim));
  File f = open_or_fail<BTreeTrivial>(ctl, path, Open::read | Open::write | Open::create, "crashsim");
  ASSERT_TRUE(f);
  engines::ProgramLog prog([log] { return log->tick(); });
  constexpr std::size_t kRounds = 300;
  constexpr std::size_t kBytes = 512;
  std::atomic<std::size_t> written{0};  // rounds whose write() returned
  std::atomic<std::size_t> synced{0};   // rounds whose fsync() returned
  std::vector<Receipt> writes(kRounds), syncs(kRounds);
  std::vector<std::size_t> sync_op(kRounds);
  std::thread writer([&] {
    for (std::size_t i = 0; i < kRounds; ++i) {
      while (synced.load(std::memory_order_acquire) != i) std::this_thread::yield();
      const std::vector<unsigned char> data = pattern(kBytes, static_cast<unsigned>(i));
      writes[i] = f.write(i * kBytes, data.data(), data.size());
      written.store(i + 1, std::memory_order_release);
    }
  });
  for (std::size_t i = 0; i < kRounds; ++i) {
    while (written.load(std::memory_order_acquire) != i + 1) std::this_thread::yield();
    sync_op[i] = prog.begin_op(engines::ProgramOp::Kind::fsync, path);
    syncs[i] = f.fsync();
    prog.submitted(sync_op[i]);
    ASSERT_TRUE(prog.track(sync_op[i], syncs[i]));
    synced.store(i + 1, std::memory_order_release);
  }
  writer.join();
  for (std::size_t i = 0; i < kRounds; ++i) {
    ASSERT_TRUE(wait_ok(writes[i])) << i;
    ASSERT_TRUE(wait_ok(syncs[i])) << i;
  }
  const engines::CrashLog l = log->snapshot();
  const std::vector<engines::ProgramOp> ops = prog.ops();
  std::vector<std::uint64_t> write_done(kRounds, 0);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> engine_syncs;  // (submit, complete)
  for (const auto& e : l.events) {
    if (e.kind == engines::CrashEvent::Kind::write)
      for (std::uint64_t b = e.offset / kBytes; b * kBytes < e.end() && b < kRounds; ++b)
        write_done[b] = std::max(write_done[b], e.complete_seq);
    if (e.kind == engines::CrashEvent::Kind::sync) engine_syncs.emplace_back(e.submit_seq, e.complete_seq);
  }
  for (std::size_t i = 0; i < kRounds; ++i) {
    ASSERT_NE(write_done[i], 0u) << "round " << i << ": the write never reached the engine";
    const std::uint64_t receipt_done = ops[sync_op[i]].done_seq;
    ASSERT_NE(receipt_done, 0u) << "round " << i;
    const bool covered = std::any_of(engine_syncs.begin(), engine_syncs.end(), [&](const auto& s) {
      return s.first > write_done[i] && s.second < receipt_done;
    });
    EXPECT_TRUE(covered) << "round " << i << ": no engine sync after the write (done at " << write_done[i]
                         << ") finished before the fsync receipt (" << receipt_done << ")";
  }
}

}  // namespace
}  // namespace tai::test
