// The controller's life (DESIGN sections 2 and 3; include/tai/controller.hpp, receipt.hpp):
// several controllers at once, isolated; destruction with work in flight loses nothing and
// finishes every receipt; shutdown() reports what could not be written back (fault engine);
// receipts outlive their file and their controller; Controller::submit tasks, then()
// continuations, wait_for timeouts, File::hook order, Controller::flush(), stats() tables.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "engines/fault/fault_engine.hpp"
#include "engines/posix/posix_engine.hpp"
#include "support/controller_support.hpp"
#include "support/test_env.hpp"
#include "tai/tai.hpp"

namespace tai::test {
namespace {

constexpr auto kHang = std::chrono::seconds(60);

ControllerOptions options(unsigned workers = 2) {
  ControllerOptions o;
  o.workers = workers;
  o.flush_idle_ns = -1;
  o.engine = "posix";
  o.tree_options.write_around_bytes = 0;  // every write cached: the tests count what the cache holds
  return o;
}



// ---------------------------------------------------------------------------------------------
// Several controllers

TEST(ControllerLifecycle, SeveralControllersAtOnceAreIsolated) {
  constexpr unsigned kControllers = 3;
  constexpr unsigned kWrites = 600;
  ScratchDir dir;
  std::vector<std::unique_ptr<Controller>> ctls;
  for (unsigned c = 0; c < kControllers; ++c) ctls.push_back(std::make_unique<Controller>(options(1 + c % 2)));
  // Each controller has its own engine registry: the same name in each.
  for (auto& ctl : ctls) EXPECT_TRUE(ctl->add_engine("mine", engines::make_posix({})));

  std::vector<std::vector<unsigned char>> expected(kControllers * 2, std::vector<unsigned char>(256 << 10, 0));
  std::vector<std::string> failures(kControllers);
  std::vector<std::thread> threads;
  for (unsigned c = 0; c < kControllers; ++c) {
    threads.emplace_back([&, c] {
      Controller& ctl = *ctls[c];
      std::mt19937_64 rng(c + 1);
      File files[2] = {open_or_fail<BTreeDefault>(ctl, dir.file("c" + std::to_string(c) + "a")),
                       open_or_fail<BTreeTrivial>(ctl, dir.file("c" + std::to_string(c) + "b"), Open::read | Open::write | Open::create, "mine")};
      std::vector<Receipt> receipts;
      for (unsigned i = 0; i < kWrites; ++i) {
        const unsigned which = static_cast<unsigned>(rng() % 2);
        std::vector<unsigned char>& model = expected[c * 2 + which];
        const std::size_t n = 1 + rng() % 8192;
        const std::uint64_t at = rng() % (model.size() - n);
        const auto data = pattern(n, rng());
        std::memcpy(model.data() + at, data.data(), n);
        receipts.push_back(files[which].write(at, data.data(), n));
        if (i % 100 == 99) receipts.push_back(ctl.submit([] {}));
      }
      for (File& f : files) receipts.push_back(f.close());
      const auto deadline = std::chrono::steady_clock::now() + kHang;
      for (const Receipt& r : receipts)
        if (std::string why = receipt_outcome(r, deadline); !why.empty()) failures[c] += why + "; ";
      // The counters are this controller's only.
      const ControllerStats s = ctl.stats();
      if (s.requests[static_cast<std::size_t>(RequestKind::write)] != kWrites)
        failures[c] += "write requests counted: " + std::to_string(s.requests[static_cast<std::size_t>(RequestKind::write)]) + "; ";
      if (s.requests[static_cast<std::size_t>(RequestKind::task)] != kWrites / 100)
        failures[c] += "tasks counted: " + std::to_string(s.requests[static_cast<std::size_t>(RequestKind::task)]) + "; ";
      if (c == 0) {
        // The first one shuts down while the others may still be working.
        const ShutdownReport report = ctl.shutdown();
        if (!report.ok()) failures[c] += "shutdown: " + report.to_string();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (unsigned c = 0; c < kControllers; ++c) EXPECT_EQ(failures[c], "") << "controller " << c;
  for (unsigned c = 0; c < kControllers; ++c) {
    EXPECT_EQ(ctls[c]->workers(), 1 + c % 2);
    for (unsigned which = 0; which < 2; ++which) {
      std::vector<unsigned char> disk = read_with_pread(dir.file("c" + std::to_string(c) + (which ? "b" : "a")));
      disk.resize(expected[c * 2 + which].size(), 0);  // bytes never written read as 0
      EXPECT_TRUE(disk == expected[c * 2 + which]) << "controller " << c << ", file " << which;
    }
  }
  // The second controller still works after the first shut down and the third is destroyed.
  ctls[2].reset();
  File late = open_or_fail<BTreeDefault>(*ctls[1], dir.file("late"));
  EXPECT_TRUE(wait_ok(late.write(0, "late", 4)));
  EXPECT_TRUE(wait_ok(late.close()));
}

// ---------------------------------------------------------------------------------------------
// Destruction and shutdown

TEST(ControllerLifecycle, DestructionWithWorkInFlightFinishesEveryReceiptAndKeepsTheData) {
  ScratchDir dir;
  constexpr unsigned kWrites = 2000;
  constexpr unsigned kTasks = 1000;
  constexpr std::size_t kLength = 4096;
  const std::string cached_path = dir.file("cached");
  const std::string direct_path = dir.file("uncached");
  std::vector<unsigned char> cached_model(kLength * 512, 0), direct_model(kLength * 512, 0);
  std::vector<Receipt> receipts;
  std::atomic<unsigned> tasks_run{0};  // relaxed: read after the controller is destroyed (joins its workers)
  auto ctl = std::make_unique<Controller>(options());
  File cached = open_or_fail<BTreeDefault>(*ctl, cached_path);
  File direct = open_or_fail<BTreeTrivial>(*ctl, direct_path);
  std::mt19937_64 rng(7);
  for (unsigned i = 0; i < kWrites; ++i) {
    const bool to_cached = i % 2 == 0;
    std::vector<unsigned char>& model = to_cached ? cached_model : direct_model;
    const std::uint64_t at = (rng() % 512) * kLength + rng() % 64;
    const std::size_t n = std::min<std::size_t>(kLength, model.size() - at);
    const auto data = pattern(n, i);
    std::memcpy(model.data() + at, data.data(), n);
    receipts.push_back((to_cached ? cached : direct).write(at, data.data(), n));
    if (i % 2 == 1) receipts.push_back(ctl->submit([&tasks_run] { tasks_run.fetch_add(1, std::memory_order_relaxed); }));
  }
  ctl.reset();  // at once: the destructor must finish everything
  EXPECT_EQ(tasks_run.load(std::memory_order_relaxed), kTasks);
  std::size_t unfinished = 0, failed = 0;
  for (const Receipt& r : receipts) {
    if (!r.finished()) ++unfinished;
    else if (!r.ok()) ++failed;
  }
  EXPECT_EQ(unfinished, 0u) << "every receipt has finished by the time the controller is destroyed";
  EXPECT_EQ(failed, 0u);
  EXPECT_TRUE(read_with_pread(cached_path) == cached_model);
  EXPECT_TRUE(read_with_pread(direct_path) == direct_model);
  // The Files outlive the controller: their operations are rejected, their destructors are safe.
  EXPECT_FALSE(cached.status().open);
  Receipt late = cached.write(0, "x", 1);
  ASSERT_TRUE(late.wait_for(kHang));
  EXPECT_EQ(late.state(), TaskState::rejected);
  EXPECT_FALSE(late.message().empty());
  Receipt late_close = direct.close();
  ASSERT_TRUE(late_close.wait_for(kHang));
  EXPECT_FALSE(late_close.ok());
}

/// A controller whose "fault" engine (over posix) fails every engine write.
struct FailingController {
  FailingController() : ctl(std::make_unique<Controller>(options())) {
    auto engine = engines::make_fault(engines::make_posix({}));
    auto added = engine->add_rules("write:nth=1:errno=EIO:persistent");
    EXPECT_TRUE(added.ok());
    fault = engine.get();
    EXPECT_TRUE(ctl->add_engine("fault", std::move(engine)));
  }
  std::unique_ptr<Controller> ctl;
  engines::FaultEngine* fault = nullptr;  // owned by ctl
};

TEST(ControllerLifecycle, ShutdownReportsDataThatCouldNotBeWrittenBack) {
  ScratchDir dir;
  FailingController fc;
  const std::string open_path = dir.file("still-open");
  const std::string detached_path = dir.file("detached");
  File open_file = open_or_fail<BTreeDefault>(*fc.ctl, open_path, Open::read | Open::write | Open::create, "fault");
  File detached = open_or_fail<BTreeDefault>(*fc.ctl, detached_path, Open::read | Open::write | Open::create, "fault");
  EXPECT_TRUE(wait_ok(open_file.write(0, "cached", 6)));  // the cache takes it: no engine write yet
  EXPECT_TRUE(wait_ok(detached.write(0, "cached too", 10)));
  detached.detach();
  const ShutdownReport report = fc.ctl->shutdown();
  EXPECT_FALSE(report.ok()) << "two files' data could not be written back";
  const std::string text = report.to_string();
  EXPECT_NE(text.find(open_path), std::string::npos) << text;
  EXPECT_NE(text.find(detached_path), std::string::npos) << text;
  EXPECT_GE(report.failures.size(), 2u) << text;
  EXPECT_GE(fc.fault->injections(0), 2u) << "the failures must come from the injected EIO: " << text;
  EXPECT_NE(text.find(std::error_code(EIO, std::generic_category()).message()), std::string::npos)
      << "the report says why: " << text;

  EXPECT_TRUE(fc.ctl->shutdown().ok()) << "a second shutdown() reports nothing new";
  // After shutdown: submissions are rejected, the handle is closed.
  Receipt task = fc.ctl->submit([] {});
  ASSERT_TRUE(task.wait_for(kHang));
  EXPECT_EQ(task.state(), TaskState::rejected);
  EXPECT_FALSE(open_file.status().open);
  Receipt w = open_file.write(0, "x", 1);
  ASSERT_TRUE(w.wait_for(kHang));
  EXPECT_EQ(w.state(), TaskState::rejected);
  auto reopened = fc.ctl->open<BTreeDefault>(dir.file("after"), Open::read | Open::write | Open::create);
  if (reopened.ok()) {
    Receipt w2 = reopened->write(0, "x", 1);
    ASSERT_TRUE(w2.wait_for(kHang));
    EXPECT_EQ(w2.state(), TaskState::rejected) << "a file opened after shutdown took a write";
  } else {
    EXPECT_FALSE(reopened.error().message.empty());
  }
}

TEST(ControllerLifecycle, TheDestructorPrintsWhatCouldNotBeWrittenBack) {
  ScratchDir dir;
  const std::string path = dir.file("lost-at-destruction");
  testing::internal::CaptureStderr();
  {
    FailingController fc;
    File f = open_or_fail<BTreeDefault>(*fc.ctl, path, Open::read | Open::write | Open::create, "fault");
    f.write(0, "doomed", 6);
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find(path), std::string::npos) << "stderr was: " << err;
}

TEST(ControllerLifecycle, ACleanShutdownReportsNothing) {
  ScratchDir dir;
  Controller ctl(options());
  File f = open_or_fail<BTreeDefault>(ctl, dir.file("clean"));
  f.write(0, "fine", 4);
  const ShutdownReport report = ctl.shutdown();
  EXPECT_TRUE(report.ok()) << report.to_string();
  EXPECT_TRUE(report.failures.empty());
  EXPECT_TRUE(read_with_pread(dir.file("clean")) == std::vector<unsigned char>({'f', 'i', 'n', 'e'}));
}

// ---------------------------------------------------------------------------------------------
// Receipts

TEST(ControllerLifecycle, ReceiptsOutliveTheirFileAndController) {
  ScratchDir dir;
  const std::vector<unsigned char> data = pattern(10000, 21);
  Receipt write, read_buffer, read_into, sync, task, hook;
  std::vector<unsigned char> dst(100);
  {
    Controller ctl(options());
    File f = open_or_fail<BTreeDefault>(ctl, dir.file("outlive"));
    write = f.write(0, data.data(), data.size());
    read_buffer = f.read(100, 5000);
    read_into = f.read(9950, dst.data(), dst.size());
    sync = f.fsync();
    hook = f.hook([] {});
    task = ctl.submit([] {});
    Receipt copy = write;  // a copy destroyed before the controller
  }
  for (const Receipt* r : {&write, &read_buffer, &read_into, &sync, &task, &hook}) {
    EXPECT_TRUE(r->finished());
    EXPECT_EQ(r->state(), TaskState::done);
    EXPECT_TRUE(r->ok()) << r->message();
    EXPECT_EQ(r->message(), "");
    EXPECT_FALSE(r->error());
  }
  EXPECT_EQ(write.bytes(), 10000);
  EXPECT_EQ(read_into.bytes(), 50) << "the read stops at the end of the file";
  EXPECT_EQ(std::memcmp(dst.data(), data.data() + 9950, 50), 0);
  Buffer b = read_buffer.take_buffer();
  ASSERT_EQ(b.size(), 5000u);
  EXPECT_EQ(std::memcmp(b.data(), data.data() + 100, 5000), 0);
  EXPECT_EQ(read_buffer.take_buffer().size(), 0u) << "the buffer moved out with the first call";
  EXPECT_EQ(sync.bytes(), 0);
  // A continuation on a receipt whose controller is gone runs at once, here.
  bool ran = false;
  EXPECT_TRUE(write.then([&ran](const Receipt& r) { ran = r.ok() && r.bytes() == 10000; }));
  EXPECT_TRUE(ran);
  Receipt copy = write;  // copies made after the controller is gone
  EXPECT_EQ(copy.bytes(), 10000);
}

TEST(ControllerLifecycle, AnEmptyReceiptIsRejected) {
  Receipt empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_TRUE(empty.finished());
  EXPECT_EQ(empty.state(), TaskState::rejected);
  EXPECT_FALSE(empty.ok());
  EXPECT_EQ(empty.error(), std::error_code(EINVAL, std::generic_category()));
  EXPECT_TRUE(empty.wait_for(std::chrono::seconds(0)));
  EXPECT_FALSE(empty.then([] {}));
  EXPECT_EQ(empty.bytes(), 0);
}

// ---------------------------------------------------------------------------------------------
// Tasks, continuations, waits

TEST(ControllerLifecycle, SubmitRunsTasksOnWorkers) {
  Controller ctl(options());
  const std::thread::id me = std::this_thread::get_id();
  std::atomic<int> on_caller{0};
  std::atomic<int> ran{0};
  std::vector<Receipt> receipts;
  std::vector<std::thread> submitters;
  std::vector<std::vector<Receipt>> per_thread(3);
  for (int t = 0; t < 3; ++t) {
    submitters.emplace_back([&, t] {
      const std::thread::id submitter = std::this_thread::get_id();
      for (int i = 0; i < 500; ++i) {
        per_thread[t].push_back(ctl.submit([&, submitter, me] {
          if (std::this_thread::get_id() == submitter || std::this_thread::get_id() == me)
            on_caller.fetch_add(1, std::memory_order_relaxed);
          ran.fetch_add(1, std::memory_order_relaxed);
        }));
      }
    });
  }
  for (auto& t : submitters) t.join();
  for (auto& v : per_thread)
    for (const Receipt& r : v) EXPECT_TRUE(wait_ok(r));
  EXPECT_EQ(ran.load(), 1500) << "every task runs exactly once";
  EXPECT_EQ(on_caller.load(), 0) << "tasks run on workers, not on the submitting thread";

  Receipt throws = ctl.submit([] { throw std::runtime_error("boom"); });
  ASSERT_TRUE(throws.wait_for(kHang));
  EXPECT_EQ(throws.state(), TaskState::failed);
  EXPECT_FALSE(throws.ok());
  EXPECT_FALSE(throws.message().empty());
  EXPECT_TRUE(wait_ok(ctl.submit([] {}))) << "the worker survived the exception";
}

// Each worker's shared queue holds at most 1,024 tasks (the workers' own pushes and the
// submitting threads past the 64th): a task that submits several times that from a worker
// spills to the worker's overflow list, and 80 threads (16 past the 64 with queues of their
// own) wait for room. Every task runs once either way.
TEST(ControllerLifecycle, PushesPastTheSharedQueueAllRun) {
  Controller ctl(options());
  std::atomic<int> ran{0};
  constexpr int kFromWorker = 5000;
  std::vector<Receipt> inner;
  inner.reserve(kFromWorker);
  Receipt outer = ctl.submit([&] {
    for (int i = 0; i < kFromWorker; ++i) inner.push_back(ctl.submit([&ran] { ran.fetch_add(1, std::memory_order_relaxed); }));
  });
  ASSERT_TRUE(wait_ok(outer));
  for (const Receipt& r : inner) EXPECT_TRUE(wait_ok(r));
  EXPECT_EQ(ran.load(), kFromWorker);

  constexpr int kThreads = 80, kEach = 200;
  std::vector<std::vector<Receipt>> per_thread(kThreads);
  std::vector<std::thread> submitters;
  for (int t = 0; t < kThreads; ++t)
    submitters.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) per_thread[t].push_back(ctl.submit([&ran] { ran.fetch_add(1, std::memory_order_relaxed); }));
    });
  for (auto& t : submitters) t.join();
  for (auto& v : per_thread)
    for (const Receipt& r : v) EXPECT_TRUE(wait_ok(r));
  EXPECT_EQ(ran.load(), kFromWorker + kThreads * kEach);
}

TEST(ControllerLifecycle, ThenRunsOnTheWorkerOrInlineWhenFinished) {
  Controller ctl(options());
  Gate gate;
  std::atomic<std::thread::id> task_thread{};
  Receipt r = ctl.submit([&] {
    task_thread.store(std::this_thread::get_id());
    gate.pass();
  });
  ASSERT_TRUE(eventually([&] { return gate.reached.load(std::memory_order_acquire); }));
  EXPECT_EQ(r.state(), TaskState::running);
  std::atomic<std::thread::id> continuation_thread{};
  std::atomic<bool> continuation_saw_done{false};
  EXPECT_TRUE(r.then([&](const Receipt& done) {
    continuation_saw_done.store(done.finished() && done.ok());
    continuation_thread.store(std::this_thread::get_id());
  }));
  EXPECT_FALSE(r.then([] {})) << "one continuation per task";
  EXPECT_EQ(continuation_thread.load(), std::thread::id()) << "the continuation ran before the task finished";
  gate.open_it();
  ASSERT_TRUE(wait_ok(r));
  ASSERT_TRUE(eventually([&] { return continuation_thread.load() != std::thread::id(); }));
  EXPECT_EQ(continuation_thread.load(), task_thread.load()) << "the continuation runs on the worker that finished the task";
  EXPECT_NE(continuation_thread.load(), std::this_thread::get_id());
  EXPECT_TRUE(continuation_saw_done.load());

  // Already finished: inline, on this thread, before then() returns.
  std::thread::id inline_thread{};
  Receipt fresh = ctl.submit([] {});
  ASSERT_TRUE(wait_ok(fresh));
  EXPECT_TRUE(fresh.then([&inline_thread] { inline_thread = std::this_thread::get_id(); }));
  EXPECT_EQ(inline_thread, std::this_thread::get_id());

  // A continuation on a file operation, and a chain: a continuation may submit more work.
  ScratchDir dir;
  File f = open_or_fail<BTreeDefault>(ctl, dir.file("then"));
  std::atomic<bool> chained{false};
  Receipt w = f.write(0, "abc", 3);
  Receipt follow_up;
  std::atomic<bool> follow_up_set{false};
  w.then([&](const Receipt& done) {
    if (done.bytes() == 3) {
      follow_up = ctl.submit([&chained] { chained = true; });
      follow_up_set.store(true, std::memory_order_release);
    }
  });
  ASSERT_TRUE(wait_ok(w));
  ASSERT_TRUE(eventually([&] { return follow_up_set.load(std::memory_order_acquire); }));
  EXPECT_TRUE(wait_ok(follow_up));
  EXPECT_TRUE(chained.load());
}

TEST(ControllerLifecycle, WaitForTimesOut) {
  Controller ctl(options());
  Gate gate;
  Receipt r = ctl.submit([&gate] { gate.pass(); });
  ASSERT_TRUE(eventually([&] { return gate.reached.load(std::memory_order_acquire); }));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(r.wait_for(std::chrono::milliseconds(50)));
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(45));
  EXPECT_LT(waited, std::chrono::seconds(5));
  EXPECT_FALSE(r.wait_for(std::chrono::nanoseconds(0)));
  EXPECT_FALSE(r.finished());
  EXPECT_EQ(r.state(), TaskState::running);
  gate.open_it();
  EXPECT_TRUE(r.wait_for(kHang));
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(r.wait_for(std::chrono::nanoseconds(0)));
}

// ---------------------------------------------------------------------------------------------
// Hooks

struct HookCheck {
  std::vector<Receipt> earlier;  // receipts of the operations submitted before the hook
  std::string path;              // read with pread inside the hook
  std::vector<unsigned char> expected;
  std::size_t unfinished_earlier = ~std::size_t{0};
  bool file_matched = false;
  std::atomic<bool> done{false};  // release store at the hook's end, acquire load by continuations
};

template <class Tree>
void hook_sees_every_earlier_operation(bool fsync_before_hook) {
  ScratchDir dir;
  Controller ctl(options());
  HookCheck check;
  check.path = dir.file("hooked");
  File f = open_or_fail<Tree>(ctl, check.path);
  check.expected.assign(64 * 4096, 0);
  for (unsigned i = 0; i < 64; ++i) {
    const auto data = pattern(4096, 100 + i);
    std::memcpy(check.expected.data() + i * 4096, data.data(), 4096);
    check.earlier.push_back(f.write(i * 4096, data.data(), 4096));
  }
  if (fsync_before_hook) check.earlier.push_back(f.fsync());
  Receipt hook = f.hook([c = &check] {
    c->unfinished_earlier = 0;
    for (const Receipt& r : c->earlier) c->unfinished_earlier += r.finished() ? 0 : 1;
    c->file_matched = read_with_pread(c->path) == c->expected;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // later operations must wait for this
    c->done.store(true, std::memory_order_release);
  });
  // Later operations wait for the hook: each continuation sees it done.
  std::atomic<int> overtook{0};
  std::vector<Receipt> later;
  for (unsigned i = 0; i < 16; ++i) {
    later.push_back(i % 2 ? f.write(i * 100, "later", 5) : f.read(i * 100, 5));
    later.back().then([c = &check, &overtook] {
      if (!c->done.load(std::memory_order_acquire)) overtook.fetch_add(1);
    });
  }
  ASSERT_TRUE(wait_ok(hook));
  for (const Receipt& r : later) ASSERT_TRUE(wait_ok(r));
  EXPECT_EQ(check.unfinished_earlier, 0u) << "the hook ran before every earlier operation had finished";
  if (fsync_before_hook || std::is_same_v<Tree, BTreeTrivial>) {
    EXPECT_TRUE(check.file_matched) << "inside the hook, the file holds every earlier write";
  }
  ASSERT_TRUE(eventually([&] { return f.status().in_flight == 0; }));
  EXPECT_EQ(overtook.load(), 0) << "an operation submitted after the hook finished before it";
  EXPECT_TRUE(wait_ok(f.close()));
}

TEST(ControllerLifecycle, HookRunsInTheFilesOrderUncached) { hook_sees_every_earlier_operation<BTreeTrivial>(false); }
TEST(ControllerLifecycle, HookRunsInTheFilesOrderCached) { hook_sees_every_earlier_operation<BTreeDefault>(false); }
TEST(ControllerLifecycle, HookAfterFsyncSeesTheDataInTheFile) { hook_sees_every_earlier_operation<BTreeDefault>(true); }

TEST(ControllerLifecycle, AThrowingHookFailsItsReceiptOnly) {
  ScratchDir dir;
  Controller ctl(options());
  File f = open_or_fail<BTreeDefault>(ctl, dir.file("hook-throws"));
  Receipt before = f.write(0, "abc", 3);
  Receipt hook = f.hook([] { throw std::runtime_error("hook failed"); });
  Receipt after = f.write(3, "def", 3);
  ASSERT_TRUE(hook.wait_for(kHang));
  EXPECT_EQ(hook.state(), TaskState::failed);
  EXPECT_FALSE(hook.message().empty());
  EXPECT_TRUE(wait_ok(before));
  EXPECT_TRUE(wait_ok(after));
  EXPECT_TRUE(wait_ok(f.close()));
  EXPECT_TRUE(read_with_pread(dir.file("hook-throws")) == std::vector<unsigned char>({'a', 'b', 'c', 'd', 'e', 'f'}));
}

// ---------------------------------------------------------------------------------------------
// Barriers: the gate they put on the file comes off, on synchronous and asynchronous engines

struct BarrierCase {
  const char* label;
  const char* engine;
  bool cached;
};

void PrintTo(const BarrierCase& c, std::ostream* os) { *os << c.label; }

class ControllerBarrierLifecycle : public testing::TestWithParam<BarrierCase> {};

TEST_P(ControllerBarrierLifecycle, BarriersFinishAndTheHandlesStayValid) {
  // 8 threads share 4 files (homed on 3 workers), each thread writing its own part of every
  // file and putting a barrier after every 8th write: barriers of one thread wait behind
  // another thread's, gates come and go on every worker.
  const BarrierCase& c = GetParam();
  TAI_SKIP_UNLESS_ENGINE_AVAILABLE(c.engine);
  constexpr unsigned kThreads = 8;
  constexpr unsigned kFiles = 4;
  constexpr std::size_t kPart = 16 << 10;
  ScratchDir dir;
  std::vector<std::vector<unsigned char>> models(kFiles, std::vector<unsigned char>(kThreads * kPart, 0));
  std::vector<std::string> failures(kThreads);
  {
    ControllerOptions o = options(3);
    Controller ctl(o);
    std::vector<File> files;
    for (unsigned k = 0; k < kFiles; ++k) {
      const std::string path = dir.file("barriers" + std::to_string(k));
      files.push_back(c.cached ? open_or_fail<BTreeDefault>(ctl, path, Open::read | Open::write | Open::create, c.engine)
                               : open_or_fail<BTreeTrivial>(ctl, path, Open::read | Open::write | Open::create, c.engine));
    }
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        const auto deadline = std::chrono::steady_clock::now() + kHang;
        std::vector<Receipt> receipts;
        std::mt19937_64 rng(t + 3);
        for (int i = 0; i < 1000; ++i) {
          const unsigned k = static_cast<unsigned>(rng() % kFiles);
          const std::size_t n = 1 + rng() % 2048;
          const std::uint64_t at = t * kPart + rng() % (kPart - n);
          const auto data = pattern(n, i * kThreads + t);
          std::memcpy(models[k].data() + at, data.data(), n);
          receipts.push_back(files[k].write(at, data.data(), n));
          if (i % 8 == 7) receipts.push_back(files[k].barrier());
          if (receipts.size() >= 32) {
            for (const Receipt& r : receipts)
              if (std::string why = receipt_outcome(r, deadline); !why.empty()) failures[t] += why + "; ";
            receipts.clear();
          }
        }
        for (const Receipt& r : receipts)
          if (std::string why = receipt_outcome(r, deadline); !why.empty()) failures[t] += why + "; ";
      });
    }
    for (auto& th : threads) th.join();
    for (unsigned t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], "") << "thread " << t;
    for (File& f : files) {
      EXPECT_TRUE(f.is_open());
      EXPECT_TRUE(f.status().open);
      EXPECT_TRUE(wait_ok(f.close()));
    }
  }  // ~File, then ~Controller: each handle still holds its reference to its file
  for (unsigned k = 0; k < kFiles; ++k) {
    std::vector<unsigned char> disk = read_with_pread(dir.file("barriers" + std::to_string(k)));
    disk.resize(models[k].size(), 0);
    EXPECT_TRUE(disk == models[k]) << "file " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Controller, ControllerBarrierLifecycle,
                         testing::Values(BarrierCase{"Default_posix", "posix", true}, BarrierCase{"Trivial_posix", "posix", false},
                                         BarrierCase{"Default_uring", "uring", true}, BarrierCase{"Trivial_uring", "uring", false}),
                         [](const testing::TestParamInfo<BarrierCase>& info) { return std::string(info.param.label); });

// ---------------------------------------------------------------------------------------------
// flush() and stats()

class ControllerFlush : public testing::TestWithParam<const char*> {};

TEST_P(ControllerFlush, FlushWritesBackEveryDirtyBlockOfEveryFile) {
  TAI_SKIP_UNLESS_ENGINE_AVAILABLE(GetParam());
  ScratchDir dir;
  Controller ctl(options());
  std::vector<File> files;
  std::vector<std::vector<unsigned char>> data;
  for (int i = 0; i < 3; ++i) {
    files.push_back(open_or_fail<BTreeDefault>(ctl, dir.file("flush" + std::to_string(i)),
                                               Open::read | Open::write | Open::create, GetParam()));
    data.push_back(pattern(300000 + 1000 * i, 30 + i));
    EXPECT_TRUE(wait_ok(files.back().write(0, data.back().data(), data.back().size())));
  }
  for (int i = 0; i < 3; ++i) EXPECT_GT(files[i].status().dirty_bytes, 0u) << "flush_idle_ns < 0: still dirty";
  Receipt flushed = ctl.flush();
  EXPECT_TRUE(wait_ok(flushed));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(files[i].status().dirty_bytes, 0u);
    EXPECT_TRUE(read_with_pread(dir.file("flush" + std::to_string(i))) == data[i]) << "file " << i;
  }
  EXPECT_EQ(ctl.stats().dirty_bytes, 0u);
  EXPECT_TRUE(wait_ok(ctl.flush())) << "nothing dirty: flush succeeds at once";
}

INSTANTIATE_TEST_SUITE_P(Controller, ControllerFlush, testing::Values("posix", "uring"),
                         [](const testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

TEST(ControllerLifecycle, StatsCountRequestsAndPrintAsATable) {
  ScratchDir dir;
  ControllerOptions o = options();
  o.latency_histograms = true;
  o.latency_sample_every = 1;
  Controller ctl(o);
  File f = open_or_fail<BTreeDefault>(ctl, dir.file("stats"));
  std::vector<Receipt> receipts;
  const auto data = pattern(4096, 40);
  for (int i = 0; i < 100; ++i) receipts.push_back(f.write(i * 4096, data.data(), data.size()));
  for (int i = 0; i < 50; ++i) receipts.push_back(f.read(i * 4096, 4096));
  for (int i = 0; i < 30; ++i) receipts.push_back(ctl.submit([] {}));
  receipts.push_back(f.fsync());
  receipts.push_back(f.hook([] {}));
  for (const Receipt& r : receipts) ASSERT_TRUE(wait_ok(r));
  const ControllerStats s = ctl.stats();
  auto count = [&s](RequestKind k) { return s.requests[static_cast<std::size_t>(k)]; };
  EXPECT_EQ(s.workers, 2u);
  EXPECT_EQ(count(RequestKind::write), 100u);
  EXPECT_EQ(count(RequestKind::read), 50u);
  EXPECT_EQ(count(RequestKind::task), 30u);
  EXPECT_EQ(count(RequestKind::fsync), 1u);
  EXPECT_EQ(count(RequestKind::hook), 1u);
  EXPECT_EQ(s.bytes_written, 100u * 4096);
  EXPECT_EQ(s.bytes_read, 50u * 4096);
  EXPECT_GE(s.cache_hits, 50u) << "the reads hit the blocks the writes left";
  EXPECT_GE(s.bytes_to_engine, 100u * 4096) << "fsync wrote everything back";
  EXPECT_GE(s.engine_syncs, 1u);
  EXPECT_EQ(s.open_files, 1u);
  EXPECT_EQ(s.failed, 0u);
  EXPECT_EQ(s.rejected, 0u);
  EXPECT_GT(s.rounds_normal, 0u);
  EXPECT_EQ(s.latency[static_cast<std::size_t>(RequestKind::write)].count(), 100u);
  EXPECT_GT(s.latency[static_cast<std::size_t>(RequestKind::write)].quantile_ns(0.5), 0u);
  EXPECT_EQ(s.quota_weak, o.weak_quota);
  // Sampled: one write in 8 from this thread is timed.
  ControllerOptions sampled = options();
  sampled.latency_sample_every = 8;
  Controller ctl8(sampled);
  File g = open_or_fail<BTreeDefault>(ctl8, dir.file("stats8"));
  std::vector<Receipt> more;
  for (int i = 0; i < 80; ++i) more.push_back(g.write(i * 4096, data.data(), data.size()));
  for (const Receipt& r : more) ASSERT_TRUE(wait_ok(r));
  const std::uint64_t timed = ctl8.stats().latency[static_cast<std::size_t>(RequestKind::write)].count();
  EXPECT_GE(timed, 10u);
  EXPECT_LE(timed, 11u);
  EXPECT_EQ(s.quota_strict, o.strict_quota);
  EXPECT_GT(s.quota_used, 0u);

  const std::string table = s.table();
  std::ostringstream printed;
  printed << s;
  EXPECT_EQ(printed.str(), table);
  for (const char* word : {"write", "read", "fsync", "task", "hook", "cache", "steals", "sleeps"})
    EXPECT_NE(table.find(word), std::string::npos) << "the table has no '" << word << "':\n" << table;
  EXPECT_EQ(std::string(to_string(RequestKind::fdatasync)), "fdatasync");
  std::printf("%s", table.c_str());

  // A closed file's engine traffic stays in the totals; open_files drops.
  ASSERT_TRUE(wait_ok(f.close()));
  const ControllerStats after = ctl.stats();
  EXPECT_EQ(after.open_files, 0u);
  EXPECT_GE(after.bytes_to_engine, s.bytes_to_engine);
  EXPECT_EQ(after.requests[static_cast<std::size_t>(RequestKind::close)], 1u);
}

}  // namespace
}  // namespace tai::test
