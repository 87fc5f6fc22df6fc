// File::barrier() (DESIGN section 3, "Ordering barrier"): no write submitted after a barrier
// becomes durable before every write submitted ahead of it. Checked at the engine with the
// recording engine (engines/recording), which logs every engine request with sequence numbers
// from one counter and, here, a copy of every engine write's bytes. For every barrier k of a
// file there must be one engine sync S (fdatasync or fsync) of that file that
//  (a) started after every write submitted before the barrier had reached the engine: each byte
//      of each such write was written by an engine write submitted at or after that user write
//      was submitted, and completed before S.submit_seq;
//  (b) completed successfully before the first engine write carrying any data submitted after
//      the barrier was submitted to the engine;
//  (c) completed before the barrier's receipt finished (the receipt "finishes when that
//      fdatasync does").
// To tell which engine writes carry post-barrier data, every byte a thread writes is its epoch +
// 1, where the epoch is the number of barriers the thread issued on the file before that write
// (at most 250 barriers per file, so a byte value names one epoch). An engine write may mix
// epochs (a cached block written back whole): its latest epoch is what counts for (b).
//
// Workload: 3 threads, each with its own file of one controller (one submitter per file, so the
// file's order is the thread's order), submitting random writes (1 byte to 32 KiB; tiny writes
// exercise the tree's write-through rule), barriers, and now and then an fdatasync; sometimes
// the thread waits for a barrier's receipt. Several seeds per case (the first from
// TAI_TEST_SEED or random, then +1, +2 ...), half of them with a small quota (recycle rounds and
// rerouted writes reach the engine outside of barriers) and 3 workers instead of 2. At the end each file, read with plain
// pread, must hold exactly what its thread wrote. BTreeDefault and BTreeTrivial, over posix.
//
// Sizes: 8000 operations per file and 4 seeds in an optimised build; 1/10 of the operations in
// a debug build, 1/50 under a sanitizer (TAI_CONTROLLER_BARRIER_SCALE, a factor, overrides);
// 3 seeds in a debug build, 2 under a sanitizer. The engine's fdatasync (a few ms on the test
// disk) dominates the run time. Every failure names its seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engines/posix/posix_engine.hpp"
#include "engines/recording/recording_engine.hpp"
#include "support/write_coverage.hpp"
#include "support/controller_support.hpp"
#include "support/test_env.hpp"
#include "tai/tai.hpp"

namespace tai::test {
namespace {

using engines::RecordEntry;
using engines::RecordingEngine;

constexpr unsigned kFiles = 3;                           // one thread each
constexpr std::uint64_t kFileBytes = (256 << 10) + 333;  // the range each thread writes in
constexpr unsigned kMaxBarriers = 250;                   // epochs 0..250 fit a byte as epoch + 1
constexpr auto kHang = std::chrono::seconds(120);
constexpr std::size_t kWindow = 48;

std::uint64_t ops_per_file() {
  const double v = 8000.0 * controller_test_scale("TAI_CONTROLLER_BARRIER_SCALE");
  return v < 150 ? 150 : static_cast<std::uint64_t>(v);
}

unsigned seeds_per_case() {
  if (sanitized_build()) return 2;
#ifndef NDEBUG
  return 3;
#else
  return 4;
#endif
}

// ---------------------------------------------------------------------------------------------
// Reading the log


// ---------------------------------------------------------------------------------------------
// The workload

struct UserWrite {
  std::uint64_t offset, length;
  std::uint64_t before;  // rec.now() just before it was submitted
};

struct FinishMark {
  std::atomic<std::uint64_t> seq{0};  // release store by the continuation, acquire load by the checker
};

struct UserBarrier {
  std::uint64_t before;       // rec.now() just before it was submitted
  std::size_t writes_before;  // how many of the file's writes were submitted before it
  Receipt receipt;
  std::unique_ptr<FinishMark> finish;
};

struct FileLog {
  std::string path;
  std::vector<UserWrite> writes;
  std::vector<UserBarrier> barriers;
  std::vector<Receipt> receipts;  // writes and fdatasyncs
  std::vector<unsigned char> model = std::vector<unsigned char>(kFileBytes, 0);
};

void wait_or_abort(const Receipt& r, std::uint64_t seed, const char* what) {
  if (!r.wait_for(kHang)) {
    std::fprintf(stderr, "controller_barrier_test: a %s receipt did not finish in %lld s (seed %llu)\n", what,
                 static_cast<long long>(kHang.count()), static_cast<unsigned long long>(seed));
    std::abort();
  }
}

void run_file(File& file, FileLog& log, RecordingEngine* rec, std::uint64_t seed, unsigned index) {
  std::mt19937_64 rng(seed ^ (0xD6E8FEB86659FD93ull * (index + 1)));
  const std::uint64_t ops = ops_per_file();
  std::vector<unsigned char> data(32 << 10);
  unsigned epoch = 0;
  for (std::uint64_t i = 0; i < ops; ++i) {
    const unsigned roll = static_cast<unsigned>(rng() % 100);
    if (roll < 5 && epoch < kMaxBarriers) {
      UserBarrier b;
      b.writes_before = log.writes.size();
      b.finish = std::make_unique<FinishMark>();
      b.before = rec->now();
      b.receipt = file.barrier();
      FinishMark* mark = b.finish.get();
      if (!b.receipt.then([mark, rec] { mark->seq.store(rec->now(), std::memory_order_release); })) {
        b.receipt.wait();
        mark->seq.store(rec->now(), std::memory_order_release);
      }
      if (rng() % 4 == 0) wait_or_abort(b.receipt, seed, "barrier");
      log.barriers.push_back(std::move(b));
      ++epoch;
    } else if (roll < 6) {
      log.receipts.push_back(file.fdatasync());
    } else {
      const unsigned shape = static_cast<unsigned>(rng() % 10);
      const std::uint64_t len = shape < 4 ? 1 + rng() % 64 : shape < 8 ? 1 + rng() % 4096 : 4096 + rng() % (28 << 10);
      const std::uint64_t off = rng() % (kFileBytes - len + 1);
      std::memset(data.data(), static_cast<int>(epoch + 1), len);
      std::memset(&log.model[off], static_cast<int>(epoch + 1), len);
      const std::uint64_t before = rec->now();
      log.receipts.push_back(file.write(off, data.data(), len));
      log.writes.push_back({off, len, before});
    }
    if (log.receipts.size() > kWindow) wait_or_abort(log.receipts[log.receipts.size() - kWindow - 1], seed, "write");
  }
  for (auto& r : log.receipts) wait_or_abort(r, seed, "write");
  for (auto& b : log.barriers) wait_or_abort(b.receipt, seed, "barrier");
}

/// Checks every barrier of one file against the log; returns the number checked.
std::uint64_t check_file(const FileLog& log, const std::vector<RecordEntry>& entries, std::uint64_t seed) {
  std::uint64_t file_id = 0;
  for (const RecordEntry& e : entries)
    if (e.kind == RecordEntry::Kind::open && e.path == log.path && !e.error) file_id = e.file_id;
  EXPECT_NE(file_id, 0u) << log.path << " was never opened through the recording engine";
  if (file_id == 0) return 0;

  // For (b): first_post[k] = the earliest submit_seq of an engine write carrying a byte of epoch
  // >= k (value >= k + 1), whether it completed or not.
  const std::size_t barriers = log.barriers.size();
  std::vector<std::uint64_t> first_post(barriers + 2, kNever);
  std::vector<const RecordEntry*> first_post_entry(barriers + 2, nullptr);
  std::vector<const RecordEntry*> syncs;
  for (const RecordEntry& e : entries) {
    if (e.kind != RecordEntry::Kind::request || e.file_id != file_id) continue;
    if (e.op == Op::fsync || e.op == Op::fdatasync) syncs.push_back(&e);
    if (e.op != Op::write) continue;
    EXPECT_EQ(e.data.size(), e.length) << "data recording is on: " << e.to_string();
    unsigned latest = 0;
    for (std::byte b : e.data) latest = std::max(latest, static_cast<unsigned>(b));
    if (latest == 0) continue;  // zeros only: no user data
    const std::size_t epoch = latest - 1;
    if (epoch > barriers) {
      ADD_FAILURE() << "an engine write carries a byte value no write had: " << e.to_string();
      continue;
    }
    if (e.submit_seq < first_post[epoch]) {
      first_post[epoch] = e.submit_seq;
      first_post_entry[epoch] = &e;
    }
  }
  for (std::size_t k = barriers + 1; k-- > 0;) {  // suffix minimum: epoch >= k
    if (first_post[k + 1] < first_post[k]) {
      first_post[k] = first_post[k + 1];
      first_post_entry[k] = first_post_entry[k + 1];
    }
  }

  const WriteCoverage coverage(entries, file_id);
  std::uint64_t need = 0;  // running max over the writes so far (kNever sticks)
  std::size_t w = 0, failures = 0, checked = 0;
  for (std::size_t k = 0; k < barriers && failures < 5; ++k) {
    const UserBarrier& b = log.barriers[k];
    for (; w < b.writes_before; ++w)
      need = std::max(need, coverage.covered_by(log.writes[w].offset, log.writes[w].length, log.writes[w].before));
    const std::size_t number = k + 1;  // separates epoch k from epoch k + 1
    std::ostringstream where;
    where << "seed " << seed << ", " << log.path << ", barrier " << number << " of " << barriers
          << " (submitted at seq " << b.before << " after " << b.writes_before << " writes)";
    if (!b.receipt.ok()) {
      ADD_FAILURE() << where.str() << ": the barrier failed: " << b.receipt.message();
      ++failures;
      continue;
    }
    if (b.writes_before == 0) continue;  // nothing ahead of it to order
    ++checked;
    const std::uint64_t finish = b.finish->seq.load(std::memory_order_acquire);
    const std::uint64_t post = first_post[number];
    if (need == kNever) {
      ADD_FAILURE() << where.str() << ": a write submitted before it never reached the engine afterwards";
      ++failures;
      continue;
    }
    bool ordered = false;
    for (const RecordEntry* s : syncs)
      if (s->complete_ok() && s->submit_seq > need && s->complete_seq < post && s->complete_seq < finish) {
        ordered = true;
        break;
      }
    if (!ordered) {
      std::ostringstream near;
      int shown = 0;
      // The syncs between the barrier's submission and its receipt's finish (and the next one).
      for (const RecordEntry* s : syncs) {
        if (s->submit_seq < b.before) continue;
        if (shown++ == 8) break;
        near << "\n    " << s->to_string();
        if (s->submit_seq >= finish) break;
      }
      ADD_FAILURE() << where.str() << ": no engine sync started after the writes ahead of it were at the engine"
                    << " (seq " << need << ") and completed before both the first engine write of later data ("
                    << (first_post_entry[number] ? first_post_entry[number]->to_string() : std::string("none"))
                    << ") and the barrier's receipt (finished at seq " << finish << "). Engine syncs nearby:"
                    << (shown ? near.str() : std::string("\n    (none)"));
      ++failures;
    }
  }
  return checked;
}

template <class Tree>
void run_seed(std::uint64_t seed, bool small_quota) {
  SCOPED_TRACE("seed " + std::to_string(seed) + (small_quota ? ", small quota" : "") +
               " (rerun with TAI_TEST_SEED=" + std::to_string(seed) + ")");
  ScratchDir dir;
  ControllerOptions options;
  options.workers = small_quota ? 3 : 2;  // 3 on 2 cores: more stealing and preemption
  if (small_quota) {
    options.weak_quota = 64 << 10;
    options.strict_quota = 256 << 10;
  }
  Controller ctl(options);
  auto recording = engines::make_recording(engines::make_posix({}));
  RecordingEngine* rec = recording.get();  // owned by the controller from here on
  rec->set_record_data(true);
  ASSERT_TRUE(ctl.add_engine("recording", std::move(recording)));

  std::vector<FileLog> logs(kFiles);
  std::vector<File> files(kFiles);
  for (unsigned f = 0; f < kFiles; ++f) {
    logs[f].path = dir.file("barrier" + std::to_string(f) + ".dat");
    auto opened = ctl.open<Tree>(logs[f].path, Open::read | Open::write | Open::create | Open::truncate, "recording");
    ASSERT_TRUE(opened.ok()) << opened.error().message;
    files[f] = std::move(opened.value());
  }
  std::vector<std::thread> threads;
  for (unsigned f = 0; f < kFiles; ++f)
    threads.emplace_back([&, f] { run_file(files[f], logs[f], rec, seed, f); });
  for (auto& t : threads) t.join();

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (auto& log : logs)
    for (auto& b : log.barriers)
      while (b.finish->seq.load(std::memory_order_acquire) == 0) {
        ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "a continuation of a finished receipt never ran";
        std::this_thread::yield();
      }
  for (auto& log : logs) {
    std::size_t failed = 0;
    for (const Receipt& r : log.receipts)
      if (!r.ok() && ++failed <= 3) ADD_FAILURE() << log.path << ": " << r.message();
    EXPECT_EQ(failed, 0u) << log.path << ": receipts of writes and fdatasyncs that failed (the first 3 shown)";
  }

  const std::vector<RecordEntry> entries = rec->snapshot();
  std::uint64_t checked = 0;
  for (const FileLog& log : logs) checked += check_file(log, entries, seed);
  EXPECT_GT(checked, 0u) << "no barrier was checked";

  for (unsigned f = 0; f < kFiles; ++f) {
    Receipt closed = files[f].close();
    wait_or_abort(closed, seed, "close");
    EXPECT_TRUE(closed.ok()) << closed.message();
    const std::vector<unsigned char> on_disk = read_with_pread(logs[f].path);
    const std::vector<unsigned char>& model = logs[f].model;
    std::uint64_t end = model.size();
    while (end > 0 && model[end - 1] == 0) --end;
    ASSERT_GE(on_disk.size(), end) << logs[f].path << " is shorter than what was written";
    for (std::uint64_t i = 0; i < end; ++i)
      if (on_disk[i] != model[i]) {
        ADD_FAILURE() << logs[f].path << " differs from what its thread wrote at byte " << i << ": "
                      << static_cast<unsigned>(on_disk[i]) << " instead of " << static_cast<unsigned>(model[i]);
        break;
      }
  }
  std::printf("  [barrier] seed %llu%s: %llu barriers checked\n", static_cast<unsigned long long>(seed),
              small_quota ? " (small quota)" : "", static_cast<unsigned long long>(checked));
}

template <class Tree>
class ControllerBarrier : public ::testing::Test {};

using Trees = ::testing::Types<BTreeDefault, BTreeTrivial>;
TYPED_TEST_SUITE(ControllerBarrier, Trees, TreeNames);

TYPED_TEST(ControllerBarrier, EngineOrderRespectsEveryBarrier) {
  const std::uint64_t first = test_seed();
  for (unsigned i = 0; i < seeds_per_case(); ++i) {
    run_seed<TypeParam>(first + i, i % 2 == 1);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// A barrier's reference belongs to the gate that holds its file's later operations; the worker
// that completes it (another one when an asynchronous engine's completion is reaped by the
// master) still touches the task after publishing the finish: the deferred wake-up of a thread
// that waited, the continuation. Receipts dropped at once, continuations attached, waits that
// give up: each continuation must run exactly once, after its barrier finished.
TEST(ControllerBarrierLifetime, AContinuationRunsOnceAfterItsBarrierFinishedWhenTheReceiptIsGone) {
  TAI_SKIP_UNLESS_ENGINE_AVAILABLE("uring");
  ScratchDir dir;
  ControllerOptions o;
  o.workers = 2;
  Controller ctl(o);
  // Two files: their home workers differ, so one of them is not the master that reaps.
  std::vector<File> files;
  for (int i = 0; i < 2; ++i)
    files.push_back(open_or_fail<BTreeTrivial>(ctl, dir.file("barrier-lifetime-" + std::to_string(i)),
                                               Open::read | Open::write | Open::create, "uring"));
  if (::testing::Test::HasFailure()) return;
  const unsigned n = static_cast<unsigned>(4000 * controller_test_scale("TAI_BARRIER_LIFETIME_SCALE")) + 1;
  std::atomic<unsigned> ran{0};
  std::atomic<unsigned> early{0};
  for (unsigned i = 0; i < n; ++i) {
    Receipt b = files[i % 2].barrier();
    b.then([&](const Receipt& r) {
      if (!r.finished()) early.fetch_add(1);
      ran.fetch_add(1);
    });
    // Sets the waiter bit and usually gives up: the finish then has a wake-up to defer for a
    // receipt that is gone.
    if (i % 2 == 1) b.wait_for(std::chrono::microseconds(1));
  }
  EXPECT_TRUE(eventually([&] { return ran.load() >= n; })) << ran.load() << " of " << n << " continuations ran";
  for (File& f : files) EXPECT_TRUE(wait_ok(f.close()));
  EXPECT_EQ(ran.load(), n) << "a continuation ran twice";
  EXPECT_EQ(early.load(), 0u) << "continuations that ran before their barrier had finished";
}

}  // namespace
}  // namespace tai::test
