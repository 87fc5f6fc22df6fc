// No heap allocation per request on the hot path (include/tai/detail/task.hpp and
// src/detail/task_pool.hpp): after a warm-up, N writes of 512-byte spans (copied), N reads into
// caller memory, N tasks and N continuations, each waited for, cause fewer than N/100 heap
// allocations in all.
//
// How allocations are counted: this file replaces the global operator new and delete (every
// form) for the whole test binary, and interposes posix_memalign and aligned_alloc (what
// tai::detail::AlignedBuffer, the quota's cache blocks and the engines' bounce buffers use),
// forwarding to the next definition (libc, jemalloc or the sanitizer runtime). They count only
// while `g_counting` is set, from every thread (the workers' allocations count too); otherwise
// they cost one relaxed load. tai::detail::tasks_allocated() counts the task pool's heap tasks.
// malloc/calloc/realloc called directly are not counted (interposing malloc itself would fight
// the sanitizers' interceptors); TAI's sources call neither on a request path.
//
// Under ASan and TSan the replaced operators stay correct (they allocate with malloc and free
// with free, which the sanitizers intercept) and the counts are the same, so the tests run there
// too; not the one over records of varying size, whose count depends on timing (see there).
#include <dlfcn.h>
#include <stdlib.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "support/controller_support.hpp"
#include "support/test_env.hpp"
#include "src/detail/small_copy_pool.hpp"
#include "src/detail/task_pool.hpp"
#include "tai/tai.hpp"

namespace {

// Set by the test around the measured loop; relaxed loads and stores: the count is read after
// the measured requests were waited for (their receipts' acquire/release orders the workers'
// increments before the test's read) and nothing else is published through the flag.
std::atomic<bool> g_counting{false};
std::atomic<std::uint64_t> g_operator_new{0};    // relaxed counter
std::atomic<std::uint64_t> g_aligned_alloc{0};   // relaxed counter: posix_memalign, aligned_alloc

inline void count(std::atomic<std::uint64_t>& counter) noexcept {
  if (g_counting.load(std::memory_order_relaxed)) counter.fetch_add(1, std::memory_order_relaxed);
}

using PosixMemalignFn = int (*)(void**, std::size_t, std::size_t);
using AlignedAllocFn = void* (*)(std::size_t, std::size_t);

// The next definitions after this executable's. Resolved on first use; dlsym does not call
// posix_memalign or aligned_alloc, so there is no recursion.
PosixMemalignFn real_posix_memalign() noexcept {
  static PosixMemalignFn fn = reinterpret_cast<PosixMemalignFn>(dlsym(RTLD_NEXT, "posix_memalign"));
  return fn;
}
AlignedAllocFn real_aligned_alloc() noexcept {
  static AlignedAllocFn fn = reinterpret_cast<AlignedAllocFn>(dlsym(RTLD_NEXT, "aligned_alloc"));
  return fn;
}

void* aligned_new(std::size_t n, std::align_val_t a) noexcept {
  void* p = nullptr;
  std::size_t alignment = static_cast<std::size_t>(a);
  if (alignment < sizeof(void*)) alignment = sizeof(void*);
  if (real_posix_memalign()(&p, alignment, n ? n : 1) != 0) return nullptr;
  return p;
}

}  // namespace

extern "C" int posix_memalign(void** out, std::size_t alignment, std::size_t size) {
  count(g_aligned_alloc);
  return real_posix_memalign()(out, alignment, size);
}

extern "C" void* aligned_alloc(std::size_t alignment, std::size_t size) {
  count(g_aligned_alloc);
  return real_aligned_alloc()(alignment, size);
}

void* operator new(std::size_t n) {
  count(g_operator_new);
  void* p = std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  return p;
}
void* operator new[](std::size_t n) {
  count(g_operator_new);
  void* p = std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  return p;
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  count(g_operator_new);
  return std::malloc(n ? n : 1);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  count(g_operator_new);
  return std::malloc(n ? n : 1);
}
void* operator new(std::size_t n, std::align_val_t a) {
  count(g_operator_new);
  void* p = aligned_new(n, a);
  if (!p) throw std::bad_alloc();
  return p;
}
void* operator new[](std::size_t n, std::align_val_t a) {
  count(g_operator_new);
  void* p = aligned_new(n, a);
  if (!p) throw std::bad_alloc();
  return p;
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  count(g_operator_new);
  return aligned_new(n, a);
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  count(g_operator_new);
  return aligned_new(n, a);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

namespace tai::test {
namespace {

struct AllocCase {
  const char* label;
  const char* engine;
  bool cached;  // BTreeDefault (writes into warm cache blocks) or BTreeTrivial
};

void PrintTo(const AllocCase& c, std::ostream* os) { *os << c.label; }

/// Requests of each kind in the measured loop: 20,000 in an optimised build, 10,000 in a debug
/// build or under a sanitizer (the limit is 1% of it either way).
std::uint64_t requests_per_kind() {
  const double s = controller_test_scale("TAI_CONTROLLER_ALLOC_SCALE");
  return s >= 1.0 ? 20000 : (s >= 0.1 ? 10000 : 5000);
}

/// A controller of `workers` workers over the null engine, without write-back rounds in the
/// measured loops (records whose copies are counted).
ControllerOptions null_engine_options(unsigned workers) {
  ControllerOptions options;
  options.workers = workers;
  options.flush_idle_ns = -1;
  options.engine = "null";
  return options;
}

struct Counts {
  std::uint64_t operator_new = 0, aligned = 0, tasks = 0;
  std::uint64_t copies_dropped = 0;  // small copies freed at the end of a write a receipt held (keep_finished_copy)
  std::uint64_t total() const { return operator_new + aligned + tasks; }
};

/// Runs `run(n / 4)` as a warm-up (task pools, copy buffers, cache blocks, engine state), then
/// counts the heap allocations of `run(n)`.
template <class Run>
Counts count_allocations(std::uint64_t n, Run&& run) {
  run(n / 4);
  const std::uint64_t tasks_before = detail::tasks_allocated();
  const std::uint64_t dropped_before = detail::finished_copies_dropped();
  g_operator_new.store(0, std::memory_order_relaxed);
  g_aligned_alloc.store(0, std::memory_order_relaxed);
  g_counting.store(true, std::memory_order_relaxed);
  run(n);
  g_counting.store(false, std::memory_order_relaxed);
  Counts counts;
  counts.operator_new = g_operator_new.load(std::memory_order_relaxed);
  counts.aligned = g_aligned_alloc.load(std::memory_order_relaxed);
  counts.tasks = detail::tasks_allocated() - tasks_before;
  counts.copies_dropped = detail::finished_copies_dropped() - dropped_before;
  return counts;
}

class ControllerAlloc : public testing::TestWithParam<AllocCase> {};

TEST_P(ControllerAlloc, NoHeapAllocationPerRequest) {
  const AllocCase& c = GetParam();
  ScratchDir dir;
  ControllerOptions options;
  options.workers = 2;
  options.flush_idle_ns = -1;  // no write-back rounds in the measured loop
  options.engine = c.engine;
  Controller ctl(options);
  auto opened = c.cached ? ctl.open<BTreeDefault>(dir.file("alloc"), Open::read | Open::write | Open::create, c.engine)
                         : ctl.open<BTreeTrivial>(dir.file("alloc"), Open::read | Open::write | Open::create, c.engine);
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  File f = std::move(opened.value());

  constexpr std::size_t kBatch = 32;  // requests in flight at once
  constexpr std::size_t kSpan = 512;
  constexpr std::uint64_t kRegion = 64 << 10;  // writes and reads stay in 64 KiB: warm blocks when cached
  std::vector<unsigned char> src = pattern(kSpan, 1);
  std::vector<unsigned char> dst(kSpan * kBatch);
  Receipt batch[kBatch];
  std::atomic<std::uint64_t> continuations{0};
  std::atomic<std::uint64_t> tasks_run{0};
  std::uint64_t failures = 0;

  auto run = [&](std::uint64_t n) {
    for (std::uint64_t done = 0; done < n; done += kBatch) {
      for (std::size_t i = 0; i < kBatch; ++i) {
        const std::uint64_t at = ((done + i) * kSpan) % kRegion;
        src[0] = static_cast<unsigned char>(done + i);
        batch[i] = f.write(at, src.data(), kSpan);
      }
      for (Receipt& r : batch) failures += r.ok() && r.bytes() == static_cast<std::int64_t>(kSpan) ? 0 : 1;
      for (std::size_t i = 0; i < kBatch; ++i)
        batch[i] = f.read(((done + i) * kSpan) % kRegion, dst.data() + i * kSpan, kSpan);
      for (Receipt& r : batch) failures += r.ok() && r.bytes() == static_cast<std::int64_t>(kSpan) ? 0 : 1;
      for (std::size_t i = 0; i < kBatch; ++i) {
        batch[i] = ctl.submit([&tasks_run] { tasks_run.fetch_add(1, std::memory_order_relaxed); });
        batch[i].then([&continuations] { continuations.fetch_add(1, std::memory_order_relaxed); });
      }
      for (Receipt& r : batch) failures += r.ok() ? 0 : 1;
    }
    for (Receipt& r : batch) r = Receipt();
  };

  const std::uint64_t n = requests_per_kind();
  const Counts counts = count_allocations(n, run);

  EXPECT_EQ(failures, 0u);
  std::printf("[ alloc    ] %s: %llu writes + %llu reads + %llu tasks (+ continuations): operator new %llu, "
              "posix_memalign/aligned_alloc %llu, pool tasks from the heap %llu\n",
              c.label, static_cast<unsigned long long>(n), static_cast<unsigned long long>(n),
              static_cast<unsigned long long>(n), static_cast<unsigned long long>(counts.operator_new),
              static_cast<unsigned long long>(counts.aligned), static_cast<unsigned long long>(counts.tasks));
  const std::uint64_t limit = n / 100;
  EXPECT_LT(counts.operator_new + counts.aligned, limit)
      << "heap allocations (operator new + aligned) during " << n << " writes, " << n << " reads and " << n << " tasks";
  EXPECT_LT(counts.tasks, limit) << "tasks the pool took from the heap after the warm-up";
  // Continuations run after the receipt finishes (on the worker, after waking waiters): give
  // the last ones a moment before counting them.
  auto rounded = [](std::uint64_t k) { return (k + kBatch - 1) / kBatch * kBatch; };
  const std::uint64_t submitted = rounded(n / 4) + rounded(n);
  for (int i = 0; i < 10000 && continuations.load() < submitted; ++i) {
    struct timespec ts{0, 1000000};
    nanosleep(&ts, nullptr);
  }
  EXPECT_EQ(tasks_run.load(), submitted);
  EXPECT_EQ(continuations.load(), submitted);
  EXPECT_TRUE(f.close().ok());
}

INSTANTIATE_TEST_SUITE_P(Controller, ControllerAlloc,
                         testing::Values(AllocCase{"Trivial_null", "null", false},
                                         AllocCase{"Trivial_posix", "posix", false},
                                         AllocCase{"Default_posix", "posix", true}),
                         [](const testing::TestParamInfo<AllocCase>& info) { return std::string(info.param.label); });

// Records of varying size, as a program writes compressed images: most between 4 KiB and
// Task::kKeepDataBytes, a few bytes apart, and one in 25 above it (a copy from the controller's
// pool). A recycled task's copy must fit the next small record (copies of that range are
// allocated at kKeepDataBytes), and a large record must not cost the task its small copy (it is
// set aside until the write ends). With copies allocated at the size asked, 1,673-2,241 of the
// 20,000 records below allocated again; with the small copy freed at each large record,
// 721-771; with both right, 0-8 in 20 runs beside two busy loops (the serial image loop under
// the drop-in layer, before both: 15,259 in 104,000 writes).
TEST(ControllerAllocRecordSizes, RecordsOfVaryingSizeReuseTheirTasksCopies) {
  // The count depends on how far the workers lag behind the submitting thread, which a
  // sanitizer's slowdown changes: under TSan the exact-size regression showed as 192 copies in
  // 10,000 records, and a loaded machine without it reached 176 (against a limit of 100). The
  // optimised build separates them by about a hundred times (721-2,241 against 0-8).
  if (sanitized_build()) GTEST_SKIP() << "copy counts depend on the workers' lag, which the sanitizer changes; checked in the optimised build";
  ScratchDir dir;
  const ControllerOptions options = null_engine_options(2);
  // Declared before the controller: a continuation still queued when a check below returns
  // early runs in the controller's destructor, and may touch them.
  std::atomic<std::uint64_t> failures{0};
  std::atomic<int> burst_done{0};
  Gate gates[2];
  Controller ctl(options);
  File f = open_or_fail<BTreeTrivial>(ctl, dir.file("records"), Open::read | Open::write | Open::create, "null");
  ASSERT_TRUE(f.is_open());
  constexpr std::size_t kSmallMin = 4097, kSmallMax = detail::Task::kKeepDataBytes;
  constexpr std::size_t kLarge = detail::Task::kKeepDataBytes + 3000;
  const std::vector<unsigned char> src = pattern(kLarge, 5);
  std::uint64_t at = 0, k = 0;
  auto next_size = [&k] {
    // A spread of sizes that rises and falls (a multiplicative walk), so that every task sees
    // larger and smaller records in turn.
    const std::uint64_t i = k++;
    return i % 25 == 24 ? kLarge - (i * 7919) % 2000 : kSmallMin + (i * 7919) % (kSmallMax - kSmallMin + 1);
  };
  // First a burst, as when a program's writes outrun the workers at its start: hundreds of
  // tasks in the pool, which the loop below then cycles through. The workers are held at a gate
  // while the burst is queued, so that the tasks pile up on any machine. Each receipt is dropped
  // at once, as the drop-in layer does: a task a receipt still holds when its write ends keeps
  // its copy only within the process's kept-copy limit (4 MiB), so 512 held receipts left about
  // half the tasks without a copy, deep in the pool, and how many of those the loop below
  // reached depended on how far the workers lagged (a loaded machine under TSan: up to 176).
  {
    constexpr int kBurst = 512;
    // Tasks are spread round-robin over the workers: one gate each.
    Receipt held[2] = {ctl.submit([&gates] { gates[0].pass(); }), ctl.submit([&gates] { gates[1].pass(); })};
    eventually([&gates] { return gates[0].reached.load() && gates[1].reached.load(); }, std::chrono::milliseconds(2000));
    for (int i = 0; i < kBurst; ++i) {
      const std::size_t size = next_size();
      Receipt r = f.write(at, src.data(), size);
      at += size;
      r.then([&failures, &burst_done](const Receipt& done) {
        if (!done.ok()) failures.fetch_add(1, std::memory_order_relaxed);
        burst_done.fetch_add(1, std::memory_order_release);
      });
    }
    for (Gate& g : gates) g.open_it();
    for (const Receipt& r : held) failures += r.ok() ? 0 : 1;
    eventually([&burst_done] { return burst_done.load(std::memory_order_acquire) == kBurst; }, std::chrono::seconds(20));
    ASSERT_EQ(burst_done.load(), kBurst) << "the burst's writes did not all end within 20 s";
  }
  Receipt last;
  auto run = [&](std::uint64_t n) {
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::size_t size = next_size();
      Receipt r = f.write(at, src.data(), size);
      at += size;
      r.then([&failures](const Receipt& done) {
        if (!done.ok()) failures.fetch_add(1, std::memory_order_relaxed);
      });
      // The drop-in layer's way: only the last write's receipt is held, without waiting, so a
      // task often ends its life on a worker and comes back through the shared pool.
      last = std::move(r);
    }
    if (last.valid() && !last.ok()) ++failures;
    last = Receipt();
  };
  const std::uint64_t n = requests_per_kind();
  const Counts counts = count_allocations(n, run);
  EXPECT_EQ(failures.load(), 0u);
  std::printf("[ alloc    ] %llu records of 4-19 KiB: posix_memalign/aligned_alloc %llu, operator new %llu, "
              "pool tasks %llu, copies dropped at the kept-copy limit %llu\n",
              static_cast<unsigned long long>(n), static_cast<unsigned long long>(counts.aligned),
              static_cast<unsigned long long>(counts.operator_new),
              static_cast<unsigned long long>(counts.tasks), static_cast<unsigned long long>(counts.copies_dropped));
  // Only the last receipt is held, so hardly a write ends while a receipt holds it: the kept-copy
  // limit must not be what the loop runs into.
  EXPECT_LT(counts.copies_dropped, n / 100) << "small copies freed at the kept-copy limit with one receipt held";
  // Writes that outrun the workers make new tasks (operator new), each with its first copy, and
  // a copy dropped at the kept-copy limit is allocated again by design; what is counted is the
  // copies allocated beyond those.
  const std::uint64_t expected = counts.tasks + counts.copies_dropped;
  const std::uint64_t regrown = counts.aligned > expected ? counts.aligned - expected : 0;
  EXPECT_LT(regrown, n / 100) << "copies allocated for tasks that had one, during " << n << " records of varying size";
  EXPECT_TRUE(f.close().ok());
}

// New tasks take their small copies from the process's pool, not from the program's allocator
// (src/detail/small_copy_pool.hpp): the copies of writes that outrun the workers shared the
// allocator's extents with the program's own short-lived allocations, which then faulted in
// fresh memory (the serial image loop under the drop-in layer: about 2,400 page faults more in
// zlib in a run writing 1.08 GiB). The workers are held at a gate while 1,000 records of 11,000 bytes are
// queued, so that most of them need a new task and a first copy; before the pool each of those
// copies was an allocation (as many as the new tasks).
TEST(ControllerAllocRecordSizes, NewTasksTakeTheirSmallCopiesFromThePool) {
  {
    const detail::AlignedBuffer probe = detail::SmallCopyPool::instance().take(1);
    if (!detail::SmallCopyPool::owns(probe))
      GTEST_SKIP() << "this build takes small copies from the allocator (AddressSanitizer, so that a use after free of one is caught)";
  }
  ScratchDir dir;
  const ControllerOptions options = null_engine_options(1);
  std::atomic<std::uint64_t> failures{0};
  Gate gate;
  Controller ctl(options);
  File f = open_or_fail<BTreeTrivial>(ctl, dir.file("records"), Open::read | Open::write | Open::create, "null");
  ASSERT_TRUE(f.is_open());
  const std::vector<unsigned char> src = pattern(11000, 7);
  constexpr int kRecords = 1000;
  Receipt held = ctl.submit([&gate] { gate.pass(); });
  eventually([&gate] { return gate.reached.load(); }, std::chrono::milliseconds(2000));
  const std::uint64_t tasks_before = detail::tasks_allocated();
  g_aligned_alloc.store(0, std::memory_order_relaxed);
  g_counting.store(true, std::memory_order_relaxed);
  std::vector<Receipt> receipts;
  receipts.reserve(kRecords);
  for (int i = 0; i < kRecords; ++i) receipts.push_back(f.write(static_cast<std::uint64_t>(i) * src.size(), src.data(), src.size()));
  g_counting.store(false, std::memory_order_relaxed);
  const std::uint64_t aligned = g_aligned_alloc.load(std::memory_order_relaxed);
  const std::uint64_t new_tasks = detail::tasks_allocated() - tasks_before;
  gate.open_it();
  EXPECT_TRUE(held.ok());
  for (const Receipt& r : receipts) failures += r.ok() ? 0 : 1;
  EXPECT_EQ(failures.load(), 0u);
  std::printf("[ alloc    ] %d queued records of 11,000 bytes: %llu new tasks, posix_memalign/aligned_alloc %llu\n", kRecords,
              static_cast<unsigned long long>(new_tasks), static_cast<unsigned long long>(aligned));
  if (new_tasks < static_cast<std::uint64_t>(kRecords / 2))
    GTEST_SKIP() << "only " << new_tasks << " of the queued writes needed a new task: the process's task pool held "
                 << "tasks (and their copies) from earlier tests; ctest runs each test in a process of its own";
  EXPECT_LT(aligned, 10u) << "small copies of new tasks came from the allocator";
  EXPECT_TRUE(f.close().ok());
}


// The same promise for a program that keeps a queue depth over an asynchronous engine:
// receipts attached to a CompletionQueue, each read resubmitted as its tag comes back. Covers
// the deferred wake-ups of the queue's consumer (DeferredWakes keeps its capacity), the
// engine's submit batches and the queue itself (its capacity holds every tag in flight).
TEST(ControllerAllocCompletionQueue, NoHeapAllocationPerResubmittedRead) {
  TAI_SKIP_UNLESS_ENGINE_AVAILABLE("uring");
  ScratchDir dir;
  ControllerOptions options;
  options.workers = 2;
  Controller ctl(options);
  File f = open_or_fail<BTreeTrivial>(ctl, dir.file("cq-alloc"), Open::read | Open::write | Open::create, "uring");
  ASSERT_TRUE(f.is_open());
  constexpr std::size_t kDepth = 32, kSpan = 4096;
  constexpr std::uint64_t kBlocks = 64;
  const std::vector<unsigned char> content = pattern(kSpan * kBlocks, 3);
  ASSERT_TRUE(f.write(0, content.data(), content.size()).ok());

  CompletionQueue done(kDepth);
  std::vector<unsigned char> buffers(kSpan * kDepth);
  Receipt slots[kDepth];
  std::uint64_t tags[kDepth];
  std::uint64_t failures = 0, issued = 0;
  auto issue = [&](std::size_t s) {
    slots[s] = f.read((issued++ % kBlocks) * kSpan, buffers.data() + s * kSpan, kSpan);
    if (!slots[s].then(done.post(s))) ++failures;
  };
  auto run = [&](std::uint64_t n) {
    const std::uint64_t end = issued + n;
    for (std::size_t s = 0; s < kDepth; ++s) issue(s);
    for (std::size_t in_flight = kDepth; in_flight > 0;) {
      const std::size_t k = done.pop(tags, kDepth, 1, 30'000'000'000);
      if (k == 0) {
        ++failures;
        break;
      }
      for (std::size_t i = 0; i < k; ++i) {
        const std::size_t s = tags[i];
        if (!slots[s].ok() || slots[s].bytes() != static_cast<std::int64_t>(kSpan)) ++failures;
        if (issued < end)
          issue(s);
        else
          --in_flight;
      }
    }
  };

  const std::uint64_t n = requests_per_kind();
  const Counts counts = count_allocations(n, run);
  EXPECT_EQ(failures, 0u);
  const std::uint64_t heap = counts.operator_new + counts.aligned;
  std::printf("[ alloc    ] CompletionQueue over uring: %llu reads: operator new + aligned %llu, pool tasks %llu\n",
              static_cast<unsigned long long>(n), static_cast<unsigned long long>(heap),
              static_cast<unsigned long long>(counts.tasks));
  EXPECT_LT(heap, n / 100) << "heap allocations during " << n << " reads resubmitted through a CompletionQueue";
  EXPECT_LT(counts.tasks, n / 100);
}

TEST(ControllerAllocCounter, CountsAllocationsWhileSet) {
  // The counter itself works: a test that cannot fail would prove nothing.
  g_operator_new.store(0);
  g_aligned_alloc.store(0);
  g_counting.store(true);
  auto* p = new std::vector<int>(100);
  void* q = nullptr;
  ASSERT_EQ(posix_memalign(&q, 4096, 4096), 0);
  tai::Buffer b(100);  // AlignedBuffer: posix_memalign
  g_counting.store(false);
  delete p;
  free(q);
  EXPECT_GE(g_operator_new.load(), 2u);  // the vector object and its storage
  EXPECT_GE(g_aligned_alloc.load(), 2u);
  // Allocations on the workers count too: a read returning a tai::Buffer allocates one there.
  {
    ScratchDir dir;
    ControllerOptions options;
    options.workers = 2;
    Controller ctl(options);
    auto f = ctl.open<BTreeTrivial>(dir.file("counted"), Open::read | Open::write | Open::create, "posix");
    ASSERT_TRUE(f.ok()) << f.error().message;
    ASSERT_TRUE(f->write(0, "0123456789", 10).ok());
    const std::uint64_t aligned_before = g_aligned_alloc.load();
    g_counting.store(true);
    Receipt r = f->read(0, 10);
    r.wait();
    g_counting.store(false);
    EXPECT_EQ(r.take_buffer().size(), 10u);
    EXPECT_GE(g_aligned_alloc.load(), aligned_before + 1) << "the read's Buffer was not counted";
  }
  const std::uint64_t counted = g_operator_new.load();
  auto* r = new int(1);
  delete r;
  EXPECT_EQ(g_operator_new.load(), counted) << "nothing is counted while the flag is off";
}

}  // namespace
}  // namespace tai::test
