// Durability (DESIGN section 2): when an fsync or fdatasync receipt completes successfully,
// every write submitted before it to that file has reached the engine and the engine's sync
// has finished, before the receipt completed. Proved from the engine's side with the recording
// engine (engines/recording), which logs every request the engine is asked to do with sequence
// numbers from one counter:
//
//  * A thread takes `before = rec.now()` just before it submits a user write W: every engine
//    write carrying W's bytes has submit_seq >= before.
//  * Every fsync receipt F gets a continuation that takes `finish = rec.now()` when F finished
//    (it runs on the worker right after the task finished, or at once on the calling thread if
//    it already had). An engine event with seq >= finish did not happen before F finished.
//  * For every user write W of the thread submitted before F: each byte of W must be covered
//    by an engine write on that file submitted at or after W's `before` that completed with
//    those bytes transferred; need(F) is the latest of the earliest such completions over all
//    bytes of all those writes. Then some engine sync S of the file (fsync for an fsync receipt;
//    fsync or fdatasync for an fdatasync receipt) must have completed successfully with
//    need(F) < S.submit_seq (the data was at the engine before the sync started, so the sync
//    covers it) and S.complete_seq < finish(F).
// With BTreeDefault the tree caches writes: one engine write (a write-back) may carry several
// user writes, and a user write overwritten while cached is carried by the engine write of the
// later data (submitted after both). Coverage is therefore checked byte by byte, never by
// counting requests.
//
// Workload: 4 threads share one file, each writing random lengths (1 byte to 32 KiB) in its own
// region (the regions are not block-aligned, so cache blocks at the edges are shared), mixing in
// fsyncs and fdatasyncs, waiting for some of them and keeping the others in flight. At the end
// the file (read with plain pread) must hold exactly what the threads wrote. Over posix (and
// uring when the kernel has it), BTreeDefault and BTreeTrivial, with the default quota and 2
// workers, and with a small quota (recycling and rerouting write data back outside of fsyncs)
// and 3 workers.
//
// Sizes: 10,000 operations per thread in an optimised build, 1/10 in a debug build, 1/50 under a
// sanitizer (TAI_CONTROLLER_DURABILITY_SCALE, a factor, overrides); the engine's fsync (a few ms
// on the test disk) dominates the run time. The seed is printed with every failure
// (TAI_TEST_SEED=<seed> replays the same operation sequences).
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

constexpr unsigned kThreads = 4;
constexpr std::uint64_t kRegion = (192 << 10) + 1000;  // each thread's region; not block-aligned
constexpr auto kHang = std::chrono::seconds(120);
constexpr std::size_t kWindow = 48;  // write receipts one thread keeps in flight

std::uint64_t ops_per_thread() {
  const double v = 10000.0 * controller_test_scale("TAI_CONTROLLER_DURABILITY_SCALE");
  return v < 100 ? 100 : static_cast<std::uint64_t>(v);
}

// ---------------------------------------------------------------------------------------------
// Reading the log


std::string syncs_near(const std::vector<RecordEntry>& log, std::uint64_t file_id, std::uint64_t from,
                       std::uint64_t to) {
  std::ostringstream s;
  int shown = 0;
  for (const RecordEntry& e : log) {
    if (e.kind != RecordEntry::Kind::request || e.file_id != file_id) continue;
    if (e.op != Op::fsync && e.op != Op::fdatasync) continue;
    if (e.submit_seq + 1 < from || e.submit_seq > to) continue;
    if (++shown > 12) {
      s << "    ...\n";
      break;
    }
    s << "    " << e.to_string() << "\n";
  }
  if (shown == 0) s << "    (no engine sync of the file in that window)\n";
  return s.str();
}

// ---------------------------------------------------------------------------------------------
// The workload

struct UserWrite {
  std::uint64_t offset, length;
  std::uint64_t before;  // rec.now() just before the write was submitted
};

/// The seq the continuation of a sync receipt took when it ran (0: not yet).
struct FinishMark {
  std::atomic<std::uint64_t> seq{0};  // release store by the continuation, acquire load by the checker
};

struct UserSync {
  bool data_only;          // fdatasync (else fsync)
  std::uint64_t before;    // rec.now() just before it was submitted
  std::size_t writes_before;  // how many of the thread's writes were submitted before it
  Receipt receipt;
  std::unique_ptr<FinishMark> finish;
};

struct ThreadLog {
  std::vector<UserWrite> writes;
  std::vector<UserSync> syncs;
  std::vector<Receipt> write_receipts;
};

struct Case {
  const char* engine;   // the inner engine: "posix" or "uring"
  bool small_quota;
};

std::unique_ptr<Engine> make_inner(const std::string& name, std::string& why_not) {
  if (name == "posix") return engines::make_posix({});
  why_not = engine_unavailable_reason(name);
  if (!why_not.empty()) return nullptr;
  auto e = make_engine(name);
  if (!e.ok()) {
    why_not = e.error().message;
    return nullptr;
  }
  return std::move(e.value());
}

void wait_or_abort(const Receipt& r, std::uint64_t seed, const char* what) {
  if (!r.wait_for(kHang)) {
    std::fprintf(stderr, "controller_durability_test: a %s receipt did not finish in %lld s (seed %llu)\n", what,
                 static_cast<long long>(kHang.count()), static_cast<unsigned long long>(seed));
    std::abort();
  }
}

template <class Tree>
void run_durability(const Case& c) {
  std::string why_not;
  std::unique_ptr<Engine> inner = make_inner(c.engine, why_not);
  if (!inner) GTEST_SKIP() << why_not;

  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TAI_TEST_SEED=" + std::to_string(seed) + ")");
  const std::uint64_t ops = ops_per_thread();

  ScratchDir dir;
  const std::string path = dir.file("durable.dat");
  ControllerOptions options;
  options.workers = c.small_quota ? 3 : 2;  // 3 on 2 cores: more stealing and preemption
  if (c.small_quota) {
    options.weak_quota = 64 << 10;
    options.strict_quota = 256 << 10;
  }
  Controller ctl(options);
  auto recording = engines::make_recording(std::move(inner));
  RecordingEngine* rec = recording.get();  // owned by the controller from here on
  ASSERT_TRUE(ctl.add_engine("recording", std::move(recording)));
  auto opened = ctl.open<Tree>(path, Open::read | Open::write | Open::create | Open::truncate, "recording");
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  File file = std::move(opened.value());

  std::vector<unsigned char> model(kThreads * kRegion, 0);  // each thread writes its own region only
  std::vector<ThreadLog> logs(kThreads);
  const auto started = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ThreadLog& log = logs[t];
      std::mt19937_64 rng(seed ^ (0x9E3779B97F4A7C15ull * (t + 1)));
      const std::uint64_t base = t * kRegion;
      std::vector<unsigned char> data(32 << 10);
      for (std::uint64_t i = 0; i < ops; ++i) {
        const unsigned roll = static_cast<unsigned>(rng() % 100);
        if (roll < 92) {
          const unsigned shape = static_cast<unsigned>(rng() % 10);
          std::uint64_t len = shape < 3 ? 1 + rng() % 64 : shape < 7 ? 1 + rng() % 4096 : 4096 + rng() % (28 << 10);
          const std::uint64_t off = base + rng() % (kRegion - len + 1);
          const std::uint64_t stamp = rng();
          for (std::uint64_t k = 0; k < len; ++k)
            data[k] = static_cast<unsigned char>((stamp >> (8 * (k % 8))) + k / 8);
          std::memcpy(&model[off], data.data(), len);
          const std::uint64_t before = rec->now();
          log.write_receipts.push_back(file.write(off, data.data(), len));
          log.writes.push_back({off, len, before});
          if (log.write_receipts.size() > kWindow)
            wait_or_abort(log.write_receipts[log.write_receipts.size() - kWindow - 1], seed, "write");
        } else {
          UserSync s;
          s.data_only = roll >= 96;
          s.writes_before = log.writes.size();
          s.finish = std::make_unique<FinishMark>();
          s.before = rec->now();
          s.receipt = s.data_only ? file.fdatasync() : file.fsync();
          FinishMark* mark = s.finish.get();
          if (!s.receipt.then([mark, rec] { mark->seq.store(rec->now(), std::memory_order_release); })) {
            // No continuation taken: the finish time is bounded by when wait() returns.
            s.receipt.wait();
            mark->seq.store(rec->now(), std::memory_order_release);
          }
          if (rng() % 2 == 0) wait_or_abort(s.receipt, seed, "fsync");
          log.syncs.push_back(std::move(s));
        }
      }
      for (auto& r : log.write_receipts) wait_or_abort(r, seed, "write");
      for (auto& s : log.syncs) wait_or_abort(s.receipt, seed, "fsync");
    });
  }
  for (auto& th : threads) th.join();

  // Every receipt finished; every continuation runs right after its task finished: give them a
  // moment to be seen (they are on the workers).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (auto& log : logs)
    for (auto& s : log.syncs)
      while (s.finish->seq.load(std::memory_order_acquire) == 0) {
        ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "a continuation of a finished receipt never ran";
        std::this_thread::yield();
      }

  const auto ran = std::chrono::steady_clock::now();
  const std::vector<RecordEntry> entries = rec->snapshot();
  std::uint64_t file_id = 0;
  for (const RecordEntry& e : entries)
    if (e.kind == RecordEntry::Kind::open && e.path == path && !e.error) file_id = e.file_id;
  ASSERT_NE(file_id, 0u) << "the controller never opened the file through the recording engine";
  const WriteCoverage coverage(entries, file_id);
  struct SyncRecord {
    Op op;
    bool ok;
    std::uint64_t submit_seq, complete_seq;
  };
  std::vector<SyncRecord> syncs;  // the file's engine syncs, in submit order
  for (const RecordEntry& e : entries)
    if (e.kind == RecordEntry::Kind::request && e.file_id == file_id && (e.op == Op::fsync || e.op == Op::fdatasync))
      syncs.push_back({e.op, e.complete_ok(), e.submit_seq, e.complete_seq});

  std::uint64_t checked = 0, failures = 0, engine_syncs = 0, engine_writes = 0;
  for (const RecordEntry& e : entries) {
    if (e.kind != RecordEntry::Kind::request || e.file_id != file_id) continue;
    engine_syncs += e.op == Op::fsync || e.op == Op::fdatasync;
    engine_writes += e.op == Op::write;
  }
  for (unsigned t = 0; t < kThreads && failures < 5; ++t) {
    const ThreadLog& log = logs[t];
    std::size_t failed_writes = 0;
    for (const Receipt& r : log.write_receipts)
      if (!r.ok() && ++failed_writes <= 3) ADD_FAILURE() << "thread " << t << ": a write failed: " << r.message();
    EXPECT_EQ(failed_writes, 0u) << "thread " << t << ": writes that failed (the first 3 shown)";
    std::uint64_t need = 0;  // running max of the writes' coverage
    std::size_t w = 0;
    std::size_t need_write = 0;  // the write that set `need` (for the message)
    for (std::size_t k = 0; k < log.syncs.size() && failures < 5; ++k) {
      const UserSync& s = log.syncs[k];
      for (; w < s.writes_before; ++w) {
        const UserWrite& uw = log.writes[w];
        const std::uint64_t got = coverage.covered_by(uw.offset, uw.length, uw.before);
        if (got > need) {  // kNever (uncovered) is the largest value: it sticks
          need = got;
          need_write = w;
        }
      }
      if (!s.receipt.ok()) {
        ADD_FAILURE() << "thread " << t << ": " << (s.data_only ? "fdatasync" : "fsync") << " #" << k
                      << " failed: " << s.receipt.message();
        ++failures;
        continue;
      }
      if (s.writes_before == 0) continue;  // nothing to make durable: an engine sync is optional
      ++checked;
      const std::uint64_t finish = s.finish->seq.load(std::memory_order_acquire);
      const char* kind = s.data_only ? "fdatasync" : "fsync";
      if (need == kNever) {
        const UserWrite& uw = log.writes[need_write];
        std::uint64_t uncovered = 0;
        coverage.covered_by(uw.offset, uw.length, uw.before, &uncovered);
        ADD_FAILURE() << "thread " << t << ": " << kind << " #" << k << " finished (seq " << finish
                      << ") but byte " << uncovered << " of its earlier write #" << need_write << " [" << uw.offset
                      << ", +" << uw.length << ") submitted at seq " << uw.before
                      << " was never written by the engine afterwards";
        ++failures;
        continue;
      }
      if (need >= finish) {
        const UserWrite& uw = log.writes[need_write];
        ADD_FAILURE() << "thread " << t << ": " << kind << " #" << k << " finished at seq " << finish
                      << " before the engine had written its earlier write #" << need_write << " [" << uw.offset
                      << ", +" << uw.length << ") (submitted at seq " << uw.before << "; written by seq " << need
                      << ")";
        ++failures;
        continue;
      }
      // The first sync submitted after `need`, then on while they were submitted before `finish`.
      bool synced = false;
      auto it = std::upper_bound(syncs.begin(), syncs.end(), need,
                                 [](std::uint64_t seq, const SyncRecord& r) { return seq < r.submit_seq; });
      for (; it != syncs.end() && it->submit_seq < finish && !synced; ++it)
        synced = it->ok && (it->op == Op::fsync || s.data_only) && it->complete_seq < finish;
      if (!synced) {
        ADD_FAILURE() << "thread " << t << ": " << kind << " #" << k << " (submitted at seq " << s.before
                      << ") finished at seq " << finish << ", but no engine "
                      << (s.data_only ? "fsync/fdatasync" : "fsync")
                      << " of the file started after its earlier writes were at the engine (seq " << need
                      << ") and completed successfully before it finished. Engine syncs in that window:\n"
                      << syncs_near(entries, file_id, need, finish);
        ++failures;
      }
    }
  }

  const auto checked_at = std::chrono::steady_clock::now();
  Receipt closed = file.close();
  wait_or_abort(closed, seed, "close");
  EXPECT_TRUE(closed.ok()) << closed.message();
  const std::vector<unsigned char> on_disk = read_with_pread(path);
  std::uint64_t end = 0;
  for (std::uint64_t i = model.size(); i-- > 0;)
    if (model[i] != 0) {
      end = i + 1;
      break;
    }
  EXPECT_GE(on_disk.size(), end) << "the file is shorter than what was written";
  if (on_disk.size() >= end) {
    std::uint64_t first_bad = kNever;
    for (std::uint64_t i = 0; i < end && first_bad == kNever; ++i)
      if (on_disk[i] != model[i]) first_bad = i;
    EXPECT_EQ(first_bad, kNever) << "the file differs from what the threads wrote at byte " << first_bad;
  }
  EXPECT_GT(checked, 0u) << "no sync was checked";
  EXPECT_GT(engine_syncs, 0u);
  ::testing::Test::RecordProperty("syncs_checked", static_cast<int>(checked));
  auto ms = [](auto d) { return static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()); };
  std::printf("  [durability] %s%s: %llu syncs checked, %llu engine writes, %llu engine syncs, workload %lld ms, "
              "check %lld ms, seed %llu\n",
              c.engine, c.small_quota ? " small quota" : "", static_cast<unsigned long long>(checked),
              static_cast<unsigned long long>(engine_writes), static_cast<unsigned long long>(engine_syncs),
              ms(ran - started), ms(checked_at - ran), static_cast<unsigned long long>(seed));
}

template <class Tree>
class ControllerDurability : public ::testing::Test {};

using Trees = ::testing::Types<BTreeDefault, BTreeTrivial>;
TYPED_TEST_SUITE(ControllerDurability, Trees, TreeNames);

TYPED_TEST(ControllerDurability, FsyncReceiptsFollowTheEngineOverPosix) {
  run_durability<TypeParam>({"posix", false});
}

TYPED_TEST(ControllerDurability, FsyncReceiptsFollowTheEngineOverPosixWithASmallQuota) {
  run_durability<TypeParam>({"posix", true});
}

TYPED_TEST(ControllerDurability, FsyncReceiptsFollowTheEngineOverUring) {
  run_durability<TypeParam>({"uring", false});
}

}  // namespace
}  // namespace tai::test
