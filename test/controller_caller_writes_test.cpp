// Caller writes (ControllerOptions::caller_writes): which writes the submitting thread carries
// out itself, and that the promises of DESIGN section 2 hold for them as they do on the
// workers' path:
//  * taken on every synchronous engine and tree, for writes the tree would send around its
//    cache anyway; not on an asynchronous engine, not once the tree holds data, not while
//    another operation of the file is pending, not with the option off;
//  * order: a read, barrier or close submitted while a caller write is in progress waits for it
//    (and so never sees half of it); a read after it sees it;
//  * errors: a failed caller write fails its receipt with the engine's errno, and what the next
//    fsync reports is what it reports after the same failure on the workers' path;
//  * threads: several threads writing one file (caller writes, small cached writes, reads,
//    fsyncs) leave exactly what a model of their writes says, also under ThreadSanitizer.
// The deterministic cases run over a steered in-memory engine (SteeredEngine below), which can
// hold a write at a gate and fail writes, and logs which thread ran each request.
#include <sched.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "support/controller_support.hpp"
#include "support/test_env.hpp"
#include "tai/engine.hpp"
#include "tai/tai.hpp"

namespace tai::test {
namespace {

constexpr std::size_t kLarge = 256 * 1024;  // far past the default write-around size (4 KiB)
constexpr std::uint64_t kNone = ~std::uint64_t{0};

/// An in-memory synchronous engine the tests steer. Thread-safe (one mutex over the bytes and
/// the log; the gate is waited for outside it).
class SteeredEngine final : public SyncEngine {
 public:
  SteeredEngine() : SyncEngine("steered", Capabilities{}, EngineOptions{}) {}

  struct Entry {
    Op op;
    std::uint64_t offset;
    std::thread::id thread;
    bool ended;  // false: logged as it began (writes only), true: as it ended
  };

  /// A write whose range holds this offset waits at `gate` before it is applied.
  std::atomic<std::uint64_t> gate_offset{kNone};  // relaxed: set before the write is submitted
  Gate gate;
  /// Writes whose range holds this offset fail with `fail_errno` (relaxed, as above).
  std::atomic<std::uint64_t> fail_offset{kNone};
  std::atomic<int> fail_errno{0};
  /// The next this many fsync/fdatasync requests fail with EIO.
  std::atomic<int> fail_syncs{0};

  std::vector<Entry> log() const {
    std::lock_guard<std::mutex> lock(mu_);
    return log_;
  }
  std::vector<unsigned char> bytes(const std::string& path) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = files_.find(path);
    return it == files_.end() ? std::vector<unsigned char>() : it->second;
  }

 private:
  class MemoryFile final : public EngineFile {
   public:
    MemoryFile(Engine& e, const std::string& path, OpenMode mode) : EngineFile(e, path, mode, FileCapabilities{}) {}
  };
  static bool holds(const Request& r, std::uint64_t at) { return at >= r.offset && at - r.offset < r.length; }

  Result<std::unique_ptr<EngineFile>> do_open(const std::string& path, OpenMode mode) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      files_[path];  // an empty file when new
    }
    return std::unique_ptr<EngineFile>(std::make_unique<MemoryFile>(*this, path, mode));
  }
  std::error_code do_close(EngineFile&) override {
    std::lock_guard<std::mutex> lock(mu_);
    log_.push_back({Op::fsync, kNone, std::this_thread::get_id(), true});  // a close: offset kNone
    return {};
  }
  std::int64_t transfer(const Request& r) override {
    if (r.op == Op::fsync || r.op == Op::fdatasync) {
      int left = fail_syncs.load(std::memory_order_relaxed);
      while (left > 0 && !fail_syncs.compare_exchange_weak(left, left - 1, std::memory_order_relaxed)) {
      }
      if (left > 0) return -EIO;
    }
    if (r.op == Op::write) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        log_.push_back({r.op, r.offset, std::this_thread::get_id(), false});
      }
      if (holds(r, gate_offset.load(std::memory_order_relaxed))) gate.pass();
      if (holds(r, fail_offset.load(std::memory_order_relaxed))) {
        std::lock_guard<std::mutex> lock(mu_);
        log_.push_back({r.op, r.offset, std::this_thread::get_id(), true});
        return -fail_errno.load(std::memory_order_relaxed);
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<unsigned char>& b = files_[r.file->path()];
    std::int64_t result = 0;
    if (r.op == Op::write) {
      std::vector<unsigned char> src(r.length);
      if (r.iov_count == 0) {
        std::memcpy(src.data(), r.buffer, r.length);
      } else {
        std::size_t at = 0;
        for (std::uint32_t i = 0; i < r.iov_count; ++i) {
          std::memcpy(src.data() + at, r.iov[i].iov_base, r.iov[i].iov_len);
          at += r.iov[i].iov_len;
        }
      }
      if (b.size() < r.offset + r.length) b.resize(r.offset + r.length);
      std::memcpy(b.data() + r.offset, src.data(), r.length);
      result = static_cast<std::int64_t>(r.length);
    } else if (r.op == Op::read) {
      const std::uint64_t n = r.offset >= b.size() ? 0 : std::min<std::uint64_t>(r.length, b.size() - r.offset);
      if (n != 0) std::memcpy(r.buffer, b.data() + r.offset, n);
      result = static_cast<std::int64_t>(n);
    }
    log_.push_back({r.op, r.offset, std::this_thread::get_id(), true});
    return result;
  }

  mutable std::mutex mu_;
  std::map<std::string, std::vector<unsigned char>> files_;
  std::vector<Entry> log_;
};

ControllerOptions quiet(bool caller_writes = true) {
  ControllerOptions o;
  o.workers = 2;
  o.flush_idle_ns = -1;  // write-back only where a test asks for it
  o.caller_writes = caller_writes;
  o.caller_write_threads = 1;  // from the first submitting thread, whatever the CPU count
  return o;
}

/// A controller with a SteeredEngine registered as "steered".
struct SteeredController {
  explicit SteeredController(const ControllerOptions& o = quiet()) : ctl(std::make_unique<Controller>(o)) {
    auto e = std::make_unique<SteeredEngine>();
    engine = e.get();
    EXPECT_TRUE(ctl->add_engine("steered", std::move(e)));
  }
  template <class Tree = BTreeDefault>
  File open(const std::string& path) {
    return open_or_fail<Tree>(*ctl, path, Open::read | Open::write | Open::create, "steered");
  }
  std::unique_ptr<Controller> ctl;
  SteeredEngine* engine = nullptr;  // owned by ctl
};

/// Where the engine ran the write at `offset` that ended last, if any.
std::thread::id writer_of(const std::vector<SteeredEngine::Entry>& log, std::uint64_t offset) {
  std::thread::id who;
  for (const auto& e : log)
    if (e.op == Op::write && e.ended && e.offset == offset) who = e.thread;
  return who;
}
/// The position in the log of the first entry matching op/offset/ended (log.size() if none).
std::size_t position_of(const std::vector<SteeredEngine::Entry>& log, Op op, std::uint64_t offset, bool ended) {
  for (std::size_t i = 0; i < log.size(); ++i)
    if (log[i].op == op && log[i].offset == offset && log[i].ended == ended) return i;
  return log.size();
}

// --- which writes are caller writes, over every engine and tree ------------------------------

class CallerWritesOverEngines : public testing::TestWithParam<EngineAndTree> {};

// Two large writes to a new file, then an fsync and a close: on a synchronous engine both are
// caller writes (their receipts finished when write() returned, the engine ran them on this
// thread), on an asynchronous one neither; the file holds them either way, and the counts treat
// caller writes as writes.
TEST_P(CallerWritesOverEngines, LargeWritesToAFreshFileAreCallerWritesOnSynchronousEngines) {
  const std::string engine = std::get<0>(GetParam());
  TAI_SKIP_UNLESS_ENGINE_AVAILABLE(engine);
  auto made = make_engine(engine);
  ASSERT_TRUE(made.ok()) << made.error().message;
  const bool synchronous = dynamic_cast<SyncEngine*>(made.value().get()) != nullptr;
  ScratchDir dir;
  const std::string path = dir.file("fresh.dat");
  const auto a = pattern(kLarge, 1), b = pattern(kLarge + 1000, 2);
  Controller ctl(quiet());
  {
    auto opened = open_engine_and_tree(ctl, GetParam(), path, Open::read | Open::write | Open::create);
    ASSERT_TRUE(opened.ok()) << opened.error().message;
    File f = std::move(opened.value());
    std::vector<unsigned char> reused = a;  // the caller's memory, reused once write() returned
    const Receipt ra = f.write(0, reused.data(), reused.size());
    if (synchronous) EXPECT_TRUE(ra.finished()) << "a caller write's receipt is finished when write() returns";
    std::fill(reused.begin(), reused.end(), 0xEE);
    const Receipt rb = f.write(kLarge, b.data(), b.size());
    EXPECT_TRUE(wait_ok(ra));
    EXPECT_TRUE(wait_ok(rb));
    EXPECT_EQ(ra.error(), std::error_code());
    EXPECT_TRUE(wait_ok(f.fsync()));
    std::vector<unsigned char> back(a.size() + b.size());
    EXPECT_TRUE(wait_ok(f.read(0, back.data(), back.size())));
    if (engine != "null") {
      EXPECT_EQ(0, std::memcmp(back.data(), a.data(), a.size())) << "a read after a caller write sees it";
      EXPECT_EQ(0, std::memcmp(back.data() + a.size(), b.data(), b.size()));
    }
    EXPECT_TRUE(f.close().ok());
  }
  const ControllerStats s = ctl.stats();
  EXPECT_EQ(s.caller_writes, synchronous ? 2u : 0u) << engine << (synchronous ? " is synchronous" : " is asynchronous");
  EXPECT_EQ(s.bytes_written, a.size() + b.size()) << "caller writes count as writes";
  EXPECT_EQ(s.failed, 0u);
  if (engine != "null") {
    const auto disk = read_with_pread(path);
    ASSERT_EQ(disk.size(), a.size() + b.size());
    EXPECT_EQ(0, std::memcmp(disk.data(), a.data(), a.size()));
    EXPECT_EQ(0, std::memcmp(disk.data() + a.size(), b.data(), b.size()));
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, CallerWritesOverEngines,
                         testing::Combine(testing::Values("posix", "cstdio", "fstream", "null", "uring", "libaio"),
                                          testing::Bool()),
                         engine_and_tree_name);

// --- when they are not taken -----------------------------------------------------------------

TEST(CallerWrites, TheOptionOffHandsEveryWriteToTheWorkers) {
  SteeredController c(quiet(false));
  File f = c.open("off");
  const auto a = pattern(kLarge, 3);
  EXPECT_TRUE(wait_ok(f.write(0, a.data(), a.size())));
  EXPECT_TRUE(wait_ok(f.fsync()));
  EXPECT_NE(writer_of(c.engine->log(), 0), std::this_thread::get_id()) << "a worker ran it";
  EXPECT_EQ(c.ctl->stats().caller_writes, 0u);
  EXPECT_TRUE(f.close().ok());
  EXPECT_EQ(c.engine->bytes("off"), a);
}

// A write the write-around rule keeps in the cache (smaller than write_around_bytes) is the
// workers'; after it the tree holds data, and later large writes are the workers' too (they
// may have to merge with, or reorder against, what the cache holds).
TEST(CallerWrites, NotTakenForSmallWritesNorOnceTheTreeHoldsData) {
  SteeredController c;
  File f = c.open("cached");
  const auto small = pattern(100, 4), large = pattern(kLarge, 5);
  EXPECT_TRUE(wait_ok(f.write(10, small.data(), small.size())));
  EXPECT_TRUE(wait_ok(f.write(1 << 20, large.data(), large.size())));
  EXPECT_EQ(c.ctl->stats().caller_writes, 0u);
  EXPECT_NE(writer_of(c.engine->log(), 1 << 20), std::this_thread::get_id());
  EXPECT_TRUE(f.close().ok());
  const auto b = c.engine->bytes("cached");
  ASSERT_EQ(b.size(), (1u << 20) + large.size());
  EXPECT_EQ(0, std::memcmp(b.data() + 10, small.data(), small.size()));
  EXPECT_EQ(0, std::memcmp(b.data() + (1 << 20), large.data(), large.size()));
}

// While another operation of the file is pending (a hook holding its worker here), a large
// write is handed to the workers behind it, not written past it.
TEST(CallerWrites, NotTakenWhileAnotherOperationOfTheFileIsPending) {
  SteeredController c;
  File f = c.open("behind");
  Gate hold;
  const Receipt hook = f.hook([&hold] { hold.pass(); });
  ASSERT_TRUE(eventually([&] { return hold.reached.load(std::memory_order_acquire); }));
  const auto a = pattern(kLarge, 6);
  const Receipt w = f.write(0, a.data(), a.size());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(w.finished()) << "the write went past the hook before it";
  EXPECT_EQ(position_of(c.engine->log(), Op::write, 0, false), c.engine->log().size());
  hold.open_it();
  EXPECT_TRUE(wait_ok(hook));
  EXPECT_TRUE(wait_ok(w));
  EXPECT_EQ(c.ctl->stats().caller_writes, 0u);
  // With nothing pending any more, the next one is the caller's again.
  EXPECT_TRUE(wait_ok(f.write(kLarge, a.data(), a.size())));
  EXPECT_EQ(c.ctl->stats().caller_writes, 1u);
  EXPECT_EQ(writer_of(c.engine->log(), kLarge), std::this_thread::get_id());
  EXPECT_TRUE(f.close().ok());
}

// By default caller writes wait until as many threads have submitted as the process has CPUs
// (here the rule is set to 2 threads, so that it does not depend on the machine): one
// thread's large writes go to the workers, until a second thread has submitted.
TEST(CallerWrites, TakenOnlyOnceEnoughThreadsHaveSubmitted) {
  ControllerOptions o = quiet();
  o.caller_write_threads = 2;
  SteeredController c(o);
  File f = c.open("threads");
  const auto a = pattern(kLarge, 13);
  EXPECT_TRUE(wait_ok(f.write(0, a.data(), a.size())));
  EXPECT_EQ(c.ctl->stats().caller_writes, 0u) << "one submitting thread, the rule asks for two";
  std::thread([&] { EXPECT_TRUE(wait_ok(f.fsync())); }).join();
  EXPECT_TRUE(wait_ok(f.write(kLarge, a.data(), a.size())));
  EXPECT_EQ(c.ctl->stats().caller_writes, 1u) << "two threads have submitted now";
  EXPECT_TRUE(f.close().ok());
}

// With the default rule (0: the process's CPUs), a program with more submitting threads than
// CPUs takes caller writes; derived from the affinity mask, not assumed.
TEST(CallerWrites, TheDefaultRuleCountsTheProcesssCpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(::sched_getaffinity(0, sizeof(set), &set), 0);
  const unsigned cpus = static_cast<unsigned>(CPU_COUNT(&set));
  if (cpus > 16) GTEST_SKIP() << cpus << " CPUs: more submitting threads than this test starts";
  ControllerOptions o = quiet();
  o.caller_write_threads = 0;
  SteeredController c(o);
  File f = c.open("cpus");
  const auto a = pattern(kLarge, 14);
  for (unsigned t = 1; t < cpus; ++t) std::thread([&] { EXPECT_TRUE(wait_ok(f.fsync())); }).join();
  EXPECT_TRUE(wait_ok(f.write(0, a.data(), a.size())));  // this thread: the cpus-th, pushed
  EXPECT_EQ(c.ctl->stats().caller_writes, cpus == 1 ? 1u : 0u);
  EXPECT_TRUE(wait_ok(f.write(kLarge, a.data(), a.size())));
  EXPECT_EQ(c.ctl->stats().caller_writes, cpus == 1 ? 2u : 1u) << cpus << " CPUs, " << cpus << " threads submitted";
  EXPECT_TRUE(f.close().ok());
}

// A direct file's writes stay the workers': on the caller's thread a caller write would be the
// device's latency, which is what the workers hide.
TEST(CallerWrites, NotTakenOnADirectFile) {
  ScratchDir dir;
  Controller ctl(quiet());
  auto opened = ctl.open<BTreeDefault>(dir.file("direct.dat"), Open::read | Open::write | Open::create | Open::direct, "posix");
  if (!opened.ok()) GTEST_SKIP() << "no O_DIRECT file in the scratch directory: " << opened.error().message;
  File f = std::move(opened.value());
  void* raw = std::aligned_alloc(4096, kLarge);
  ASSERT_NE(raw, nullptr);
  std::unique_ptr<void, decltype(&std::free)> mem(raw, &std::free);
  const auto a = pattern(kLarge, 10);
  std::memcpy(raw, a.data(), a.size());
  EXPECT_TRUE(wait_ok(f.write(0, raw, kLarge)));
  EXPECT_TRUE(f.close().ok());
  EXPECT_EQ(ctl.stats().caller_writes, 0u);
  EXPECT_EQ(read_with_pread(dir.file("direct.dat")), a);
}

// A file opened while an earlier handle of its path is still closing takes no caller write
// until its tree has been made again (after that handle closed); then it does.
TEST(CallerWrites, AReopenedFileTakesCallerWritesOnceItsTreeIsReplaced) {
  SteeredController c;
  File first = c.open("again");
  Gate hold;
  const Receipt hook = first.hook([&hold] { hold.pass(); });
  ASSERT_TRUE(eventually([&] { return hold.reached.load(std::memory_order_acquire); }));
  const Receipt closing = first.close();  // queued behind the hook: still closing
  File second = c.open("again");
  const auto a = pattern(kLarge, 11);
  const Receipt w = second.write(0, a.data(), a.size());
  EXPECT_EQ(c.ctl->stats().caller_writes, 0u) << "a caller write while the earlier handle was closing";
  hold.open_it();
  EXPECT_TRUE(wait_ok(hook));
  EXPECT_TRUE(wait_ok(closing));
  EXPECT_TRUE(wait_ok(w));
  EXPECT_TRUE(wait_ok(second.write(kLarge, a.data(), a.size())));
  EXPECT_EQ(c.ctl->stats().caller_writes, 1u) << "the reopened file never took caller writes";
  EXPECT_TRUE(second.close().ok());
  const auto b = c.engine->bytes("again");
  ASSERT_EQ(b.size(), 2 * kLarge);
  EXPECT_EQ(0, std::memcmp(b.data(), a.data(), kLarge));
  EXPECT_EQ(0, std::memcmp(b.data() + kLarge, a.data(), kLarge));
}

// A write submitted from one of the controller's own threads (here a task function; a
// continuation alike) is queued, not made there: those threads must not block on the engine.
TEST(CallerWrites, NotTakenOnTheControllersOwnThreads) {
  SteeredController c;
  File f = c.open("inside");
  const auto a = pattern(kLarge, 12);
  Receipt inner;
  EXPECT_TRUE(wait_ok(c.ctl->submit([&] { inner = f.write(0, a.data(), a.size()); })));
  EXPECT_TRUE(wait_ok(inner));
  EXPECT_EQ(c.ctl->stats().caller_writes, 0u);
  EXPECT_TRUE(f.close().ok());
  EXPECT_EQ(c.engine->bytes("inside"), a);
}

// --- order: what is submitted during a caller write waits for it --------------------------

/// A caller write of `data` at offset 0 on a thread of its own, held inside the steered engine
/// (its gate at `gate_at`) until release(). Not thread-safe: the test's thread only.
class HeldCallerWrite {
 public:
  HeldCallerWrite(SteeredController& c, File& f, const std::vector<unsigned char>& data, std::uint64_t gate_at = 0)
      : c_(c) {
    c.engine->gate_offset.store(gate_at, std::memory_order_relaxed);
    writer_ = std::thread([this, &f, &data] { receipt_ = f.write(0, data.data(), data.size()); });
  }
  ~HeldCallerWrite() { release(); }
  /// Whether the write reached the gate (within the tests' patience).
  bool held() const {
    return eventually([&] { return c_.engine->gate.reached.load(std::memory_order_acquire); });
  }
  /// Lets the write go on and waits for its thread; its receipt.
  const Receipt& release() {
    c_.engine->gate.open_it();
    if (writer_.joinable()) writer_.join();
    return receipt_;
  }

 private:
  SteeredController& c_;
  Receipt receipt_;
  std::thread writer_;
};

// Another thread's caller write is held inside the engine; a read of its range submitted now
// must not run before it ends (it would see half of it), nor may a barrier finish.
TEST(CallerWrites, AReadOrBarrierSubmittedDuringACallerWriteWaitsForIt) {
  SteeredController c;
  File f = c.open("during");
  const auto a = pattern(kLarge, 7);
  HeldCallerWrite w(c, f, a);
  ASSERT_TRUE(w.held());
  std::vector<unsigned char> back(a.size());
  const Receipt r = f.read(0, back.data(), back.size());
  const Receipt b = f.barrier();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(r.finished()) << "a read ran beside a caller write of its range";
  EXPECT_FALSE(b.finished()) << "a barrier passed a caller write in progress";
  EXPECT_TRUE(wait_ok(w.release()));
  EXPECT_TRUE(wait_ok(r));
  EXPECT_TRUE(wait_ok(b));
  EXPECT_EQ(back, a) << "the read saw the write whole";
  const auto log = c.engine->log();
  EXPECT_NE(writer_of(log, 0), std::this_thread::get_id());
  EXPECT_EQ(c.ctl->stats().caller_writes, 1u) << "the held write was not a caller write: the test proves nothing";
  EXPECT_TRUE(f.close().ok());
}

/// CPU seconds of the whole process so far.
double process_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// A worker that admits a task while a caller write of its file is in progress sleeps until the
// write ends, rather than spinning or yielding: the kernel can hold a write in its dirty-page
// throttle for hundreds of milliseconds, and a spinning worker would take that CPU time from
// the program. Here the engine holds the write for 300 ms; the process (the writer blocked in
// the engine, the worker waiting, every other thread idle) must use little CPU meanwhile.
TEST(CallerWrites, AWorkerWaitingForACallerWriteSleeps) {
  SteeredController c;
  File f = c.open("sleeps");
  const auto a = pattern(kLarge, 9);
  HeldCallerWrite w(c, f, a);
  ASSERT_TRUE(w.held());
  std::vector<unsigned char> back(a.size());
  const Receipt r = f.read(0, back.data(), back.size());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the worker's short spin
  const double cpu0 = process_cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double cpu = process_cpu_seconds() - cpu0;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(r.finished()) << "the read ran beside a caller write of its range";
  EXPECT_TRUE(wait_ok(w.release()));
  EXPECT_TRUE(wait_ok(r)) << "the worker was not woken when the caller write ended";
  EXPECT_EQ(back, a);
  EXPECT_EQ(c.ctl->stats().caller_writes, 1u) << "the held write was not a caller write: the test proves nothing";
  std::printf("[ info     ] %.3f s of CPU in %.3f s while a worker waited for a caller write\n", cpu, wall);
  EXPECT_LT(cpu, 0.25 * wall) << "the process used " << cpu << " s of CPU in " << wall
                              << " s while a worker waited for a caller write";
  EXPECT_TRUE(f.close().ok());
}

// A close submitted while a caller write is in progress waits for it: the write is not lost,
// its receipt succeeds, and the engine closes the file only after it.
TEST(CallerWrites, ACloseWaitsForACallerWriteInProgress) {
  SteeredController c;
  File f = c.open("closing");
  const auto a = pattern(kLarge, 8);
  HeldCallerWrite w(c, f, a, 4096);
  ASSERT_TRUE(w.held());
  std::atomic<bool> closed{false};  // release store by the closer, acquire load here
  std::thread closer([&] {
    EXPECT_TRUE(f.close().ok());
    closed.store(true, std::memory_order_release);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(closed.load(std::memory_order_acquire)) << "the close finished during a caller write";
  EXPECT_TRUE(wait_ok(w.release()));
  closer.join();
  const auto log = c.engine->log();
  EXPECT_LT(position_of(log, Op::write, 0, true), position_of(log, Op::fsync, kNone, true)) << "closed before the write ended";
  EXPECT_EQ(c.engine->bytes("closing"), a);
  EXPECT_EQ(c.ctl->stats().caller_writes, 1u) << "the held write was not a caller write: the test proves nothing";
}

// --- errors -----------------------------------------------------------------------------------

// A failed write reports the same to the program whichever thread wrote it: its receipt fails
// with the engine's errno, stats count it failed, and the fsync after it has the same outcome.
TEST(CallerWrites, AFailedCallerWriteReportsWhatTheWorkersPathReports) {
  struct Outcome {
    TaskState write_state, sync_state;
    std::error_code write_error, sync_error;
    std::uint64_t failed, caller_writes;
  };
  auto run = [](bool caller_writes) {
    SteeredController c(quiet(caller_writes));
    c.engine->fail_offset.store(kLarge + 10, std::memory_order_relaxed);
    c.engine->fail_errno.store(ENOSPC, std::memory_order_relaxed);
    File f = c.open("failing");
    const auto a = pattern(kLarge, 9);
    EXPECT_TRUE(wait_ok(f.write(0, a.data(), a.size())));
    const Receipt w = f.write(kLarge, a.data(), a.size());
    w.wait();
    const Receipt s = f.fsync();
    s.wait();
    Outcome o{w.state(), s.state(), w.error(), s.error(), c.ctl->stats().failed, c.ctl->stats().caller_writes};
    f.close();
    return o;
  };
  const Outcome workers = run(false), callers = run(true);
  EXPECT_EQ(callers.caller_writes, 2u) << "both writes of the caller run were caller writes";
  EXPECT_EQ(workers.caller_writes, 0u);
  EXPECT_EQ(callers.write_state, TaskState::failed);
  EXPECT_EQ(callers.write_error, std::error_code(ENOSPC, std::generic_category()));
  EXPECT_EQ(callers.write_state, workers.write_state);
  EXPECT_EQ(callers.write_error, workers.write_error);
  EXPECT_EQ(callers.sync_state, workers.sync_state);
  EXPECT_EQ(callers.sync_error, workers.sync_error);
  EXPECT_EQ(callers.failed, workers.failed);
  EXPECT_GE(callers.failed, 1u);
}

// Durability after a failed sync: the kernel may have dropped a caller write's pages when the
// fsync after it failed, so no later fsync may report them durable; what the second fsync
// reports is what it reports after the same failure on the workers' path (the caller write
// stamps the sync epoch as the workers' uncached write does).
TEST(CallerWrites, AFailedFsyncAfterACallerWriteIsNotFollowedBySuccess) {
  struct Outcome {
    std::error_code first, second;
    std::uint64_t caller_writes;
  };
  auto run = [](bool caller_writes) {
    SteeredController c(quiet(caller_writes));
    File f = c.open("synced");
    const auto a = pattern(kLarge, 15);
    EXPECT_TRUE(wait_ok(f.write(0, a.data(), a.size())));
    c.engine->fail_syncs.store(1, std::memory_order_relaxed);
    const Receipt first = f.fsync();
    first.wait();
    const Receipt second = f.fsync();
    second.wait();
    Outcome o{first.error(), second.error(), c.ctl->stats().caller_writes};
    f.close();
    return o;
  };
  const Outcome workers = run(false), callers = run(true);
  EXPECT_EQ(callers.caller_writes, 1u);
  EXPECT_EQ(workers.caller_writes, 0u);
  EXPECT_EQ(callers.first, std::error_code(EIO, std::generic_category()));
  EXPECT_TRUE(callers.second) << "an fsync after a failed one said the caller write was durable";
  EXPECT_EQ(callers.first, workers.first);
  EXPECT_EQ(callers.second, workers.second);
}

// --- threads ------------------------------------------------------------------------------

// Four threads write one file: each its own region, records of 4 KiB to 96 KiB (most of them
// caller writes while the tree is empty), and in the second half small cached writes too, with
// reads of their own records checked against their model and fsyncs mixed in; the file then
// holds exactly every thread's last write of each byte. Over posix and both trees.
class CallerWritesThreads : public testing::TestWithParam<bool /*BTreeDefault*/> {};

TEST_P(CallerWritesThreads, ThreadsWritingOneFileLeaveWhatTheirModelsSay) {
  constexpr unsigned kThreads = 4;
  constexpr std::uint64_t kRegion = 1 << 20;
  const int rounds = static_cast<int>(400 * controller_test_scale("TAI_CALLER_WRITES_SCALE"));
  ScratchDir dir;
  const std::string path = dir.file("shared.dat");
  ControllerOptions o = quiet();
  o.strict_quota = 8 << 20;  // small: the cache evicts, and the tree empties again at times
  o.weak_quota = 4 << 20;
  Controller ctl(o);
  File f;
  {
    auto opened = open_engine_and_tree(ctl, EngineAndTree{"posix", GetParam()}, path, Open::read | Open::write | Open::create);
    ASSERT_TRUE(opened.ok()) << opened.error().message;
    f = std::move(opened.value());
  }
  std::vector<std::vector<unsigned char>> model(kThreads, std::vector<unsigned char>(kRegion, 0));
  std::atomic<int> mismatches{0};  // relaxed: read after the joins
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(test_seed() + t);
      std::vector<unsigned char>& m = model[t];
      const std::uint64_t base = t * kRegion;
      for (int i = 0; i < rounds; ++i) {
        const unsigned kind = static_cast<unsigned>(rng() % 10);
        if (kind < 6 || (kind < 8 && i < rounds / 2)) {  // a large write
          const std::size_t n = 4096 + rng() % (92 * 1024);
          const std::uint64_t at = rng() % (kRegion - n);
          const auto data = pattern(n, rng());
          std::memcpy(m.data() + at, data.data(), n);
          const Receipt w = f.write(base + at, data.data(), n);
          if (!w.wait_for(std::chrono::seconds(60)) || !w.ok()) mismatches.fetch_add(1, std::memory_order_relaxed);
        } else if (kind < 8) {  // a small write, cached
          const std::size_t n = 1 + rng() % 1000;
          const std::uint64_t at = rng() % (kRegion - n);
          const auto data = pattern(n, rng());
          std::memcpy(m.data() + at, data.data(), n);
          f.write(base + at, data.data(), n);  // not waited for: a later read of this thread sees it
        } else if (kind < 9) {  // a read of its own region
          const std::size_t n = 1 + rng() % (64 * 1024);
          const std::uint64_t at = rng() % (kRegion - n);
          std::vector<unsigned char> back(n);
          const Receipt r = f.read(base + at, back.data(), n);
          if (!r.wait_for(std::chrono::seconds(60)) || !r.ok() || std::memcmp(back.data(), m.data() + at, n) != 0)
            mismatches.fetch_add(1, std::memory_order_relaxed);
        } else {
          const Receipt s = f.fsync();
          if (!s.wait_for(std::chrono::seconds(60)) || !s.ok()) mismatches.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(std::memory_order_relaxed), 0) << "seed " << test_seed();
  EXPECT_TRUE(f.close().ok());
  const ControllerStats s = ctl.stats();
  EXPECT_GT(s.caller_writes, 0u) << "no caller write: the test proves nothing";
  std::printf("[ caller ] %s: %llu caller writes of %llu writes\n", GetParam() ? "BTreeDefault" : "BTreeTrivial",
              static_cast<unsigned long long>(s.caller_writes),
              static_cast<unsigned long long>(s.requests[static_cast<std::size_t>(RequestKind::write)]));
  const auto disk = read_with_pread(path);
  ASSERT_LE(disk.size(), kThreads * kRegion);
  for (unsigned t = 0; t < kThreads; ++t) {
    std::vector<unsigned char> region(kRegion, 0);
    const std::uint64_t base = t * kRegion;
    if (disk.size() > base) std::memcpy(region.data(), disk.data() + base, std::min<std::uint64_t>(kRegion, disk.size() - base));
    EXPECT_TRUE(region == model[t]) << "thread " << t << "'s region differs from its model; seed " << test_seed();
  }
}

INSTANTIATE_TEST_SUITE_P(Trees, CallerWritesThreads, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& i) { return i.param ? "Default" : "Trivial"; });

}  // namespace
}  // namespace tai::test
