// Durability while engine syncs fail at random (DESIGN section 2, "Errors are never lost" and
// "Durability", the fsyncgate case): after a failed fsync the kernel may drop the pages it could
// not write, so an fsync receipt that succeeds later must rest on data written to the engine
// *after* that failure and synced by an engine sync that succeeded. Proved from the engine's
// side with recording(fault(inner)) (the recording engine logs what the fault engine did,
// injected failures included), seq numbers as in controller_durability_test.cpp:
//
//  * For each byte of a user write W (submitted at seq W.before), follow the engine's history:
//    the earliest engine write carrying the byte submitted at or after W.before completes at c;
//    then the first engine sync of the file that completed after c decides. A successful one
//    submitted after c makes the byte durable at its completion. A successful one submitted
//    before c (in flight when the byte arrived) proves nothing: look at the next. A failed one
//    may have dropped the byte: it must be written again, by an engine write submitted after
//    that failure completed, and the walk starts over from there.
//  * d(W) is the latest such durability point over W's bytes (never, if some byte has none).
//    Every fsync receipt F of the thread that succeeded must have finished after d(W) for every
//    W the thread submitted before F.
//  * The file's engine syncs never overlap (the tree runs them one at a time: the kernel reports
//    a write-back error to only one of several overlapping fsyncs).
//
// Workload: 3 threads, each reading its own region once (its blocks become valid), then writing
// 1 byte to 8 KiB at random in it (not block aligned: blocks at the edges are shared) and calling
// fsync now and then (sometimes waiting for it), while the fault engine fails each engine fsync
// with probability 0.2 (seeded). BTreeDefault
// over posix and uring, with the default quota (the failed fsyncs' data stays cached: later
// fsyncs recover) and a small one (evictions: recovery is often impossible and later fsyncs keep
// failing). At the end, with the fault rule still armed, fsync is retried until one succeeds
// when recovery is possible, and the file must then hold exactly what the threads wrote.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engines/fault/fault_engine.hpp"
#include "engines/posix/posix_engine.hpp"
#include "engines/recording/recording_engine.hpp"
#include "support/controller_support.hpp"
#include "support/test_env.hpp"
#include "support/write_coverage.hpp"
#include "tai/tai.hpp"

namespace tai::test {
namespace {

using engines::RecordEntry;

constexpr unsigned kThreads = 3;
constexpr std::uint64_t kRegion = (96 << 10) + 700;
constexpr auto kHang = std::chrono::seconds(120);

struct UserWrite {
  std::uint64_t offset, length, before;
};

struct UserSync {
  std::size_t writes_before;
  Receipt receipt;
  std::unique_ptr<std::atomic<std::uint64_t>> finish;  // rec.now() when it finished
};

struct Case {
  const char* engine;
  bool small_quota;
};

struct EngineSync {
  bool ok;
  std::uint64_t submit_seq, complete_seq;
};

/// When byte `at`, first written to the engine by a write submitted at or after `after`,
/// became durable (see the file comment); kNever if it did not.
std::uint64_t byte_durable(const WriteCoverage& coverage, const std::vector<EngineSync>& syncs, std::uint64_t at,
                           std::uint64_t after) {
  for (;;) {
    const std::uint64_t c = coverage.byte_written(at, after);
    if (c == kNever) return kNever;
    auto it = std::upper_bound(syncs.begin(), syncs.end(), c,
                               [](std::uint64_t seq, const EngineSync& s) { return seq < s.complete_seq; });
    for (; it != syncs.end(); ++it) {
      if (!it->ok) break;
      if (it->submit_seq > c) return it->complete_seq;
    }
    if (it == syncs.end()) return kNever;
    after = it->complete_seq;  // a failure after the byte arrived: it must be written again
  }
}

/// For a failure message: the first byte of the thread's writes before an fsync that was not
/// durable when it finished, and the engine's writes of that byte and the file's syncs.
std::string explain(const WriteCoverage& coverage, const std::vector<EngineSync>& syncs,
                    const std::vector<RecordEntry>& log, std::uint64_t file_id, const std::vector<UserWrite>& writes,
                    std::size_t count, std::uint64_t finish) {
  for (std::size_t x = 0; x < count; ++x) {
    const UserWrite& uw = writes[x];
    for (std::uint64_t b = uw.offset; b < uw.offset + uw.length; ++b) {
      const std::uint64_t d = byte_durable(coverage, syncs, b, uw.before);
      if (d < finish) continue;
      std::string out = "byte " + std::to_string(b) + " of its write #" + std::to_string(x) + " (submitted at seq " +
                        std::to_string(uw.before) + ") became durable " +
                        (d == kNever ? std::string("never") : "at seq " + std::to_string(d)) +
                        " (written again after every failed engine sync that followed it, then synced). The "
                        "engine's writes of that byte and the file's syncs up to then:\n";
      int shown = 0;
      for (const RecordEntry& e : log) {
        if (e.kind != RecordEntry::Kind::request || e.file_id != file_id || e.submit_seq < uw.before) continue;
        if (e.submit_seq > finish + 20 || ++shown > 40) break;
        if (e.op == Op::write && !(e.offset <= b && b < e.offset + e.length)) continue;
        if (e.op == Op::read) continue;
        out += "    " + e.to_string() + "\n";
      }
      return out;
    }
  }
  return "(no byte found)";
}

void run_case(const Case& c) {
  std::unique_ptr<Engine> inner;
  if (std::string(c.engine) == "posix") {
    inner = engines::make_posix({});
  } else {
    TAI_SKIP_UNLESS_ENGINE_AVAILABLE(c.engine);
    auto made = make_engine(c.engine);
    ASSERT_TRUE(made.ok()) << made.error().message;
    inner = std::move(made.value());
  }
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TAI_TEST_SEED=" + std::to_string(seed) + ")");
  const double scale = controller_test_scale("TAI_CONTROLLER_FAILING_SYNC_SCALE");
  const std::uint64_t ops = std::max<std::uint64_t>(100, static_cast<std::uint64_t>(1500 * scale));

  auto fault = engines::make_fault(std::move(inner));
  auto added = fault->add_rules("fsync:p=0.2:seed=" + std::to_string(seed % 1000003) + ":errno=EIO");
  ASSERT_TRUE(added.ok()) << added.error().message;
  auto recording = engines::make_recording(std::move(fault));
  engines::RecordingEngine* rec = recording.get();

  ScratchDir dir;
  const std::string path = dir.file("failing-sync.dat");
  ControllerOptions options;
  options.workers = 2;
  options.flush_idle_ns = -1;  // write-back only where fsyncs (and the quota) ask for it
  if (c.small_quota) {
    options.weak_quota = 32 << 10;
    options.strict_quota = 128 << 10;
  }
  Controller ctl(options);
  ASSERT_TRUE(ctl.add_engine("recording", std::move(recording)));
  // The file exists at its full size (zeros) so that the first reads fill the blocks.
  ASSERT_TRUE(make_zero_file(path, kThreads * kRegion));
  auto opened = ctl.open<BTreeDefault>(path, Open::read | Open::write, "recording");
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  File file = std::move(opened.value());

  std::vector<unsigned char> model(kThreads * kRegion, 0);
  std::vector<std::vector<UserWrite>> writes(kThreads);
  std::vector<std::vector<UserSync>> fsyncs(kThreads);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed ^ (0x9E3779B97F4A7C15ull * (t + 1)));
      std::vector<Receipt> pending;
      std::vector<unsigned char> data(8 << 10);
      // Read the region first: its blocks are then valid (they mirror the file), so their
      // written-back bytes always fit the block's unsynced ranges and every failure is
      // recoverable while the blocks stay cached. (A not-valid block, one that was written but
      // never read, gives up after 4 ranges.)
      {
        std::vector<unsigned char> whole(kRegion);
        Receipt r = file.read(t * kRegion, whole.data(), whole.size());
        ASSERT_TRUE(r.wait_for(kHang)) << "a read hung";
        ASSERT_TRUE(r.ok()) << r.message();
      }
      for (std::uint64_t i = 0; i < ops; ++i) {
        if (rng() % 100 < 88) {
          const std::uint64_t len = rng() % 3 == 0 ? 1 + rng() % 64 : 1 + rng() % (8 << 10);
          const std::uint64_t off = t * kRegion + rng() % (kRegion - len + 1);
          const auto stamp = static_cast<unsigned char>(rng());
          for (std::uint64_t k = 0; k < len; ++k) data[k] = static_cast<unsigned char>(stamp + k * 7);
          std::memcpy(&model[off], data.data(), len);
          writes[t].push_back({off, len, rec->now()});
          pending.push_back(file.write(off, data.data(), len));
        } else {
          UserSync s;
          s.writes_before = writes[t].size();
          s.finish = std::make_unique<std::atomic<std::uint64_t>>(0);
          s.receipt = file.fsync();
          std::atomic<std::uint64_t>* mark = s.finish.get();
          if (!s.receipt.then([mark, rec] { mark->store(rec->now(), std::memory_order_release); })) {
            s.receipt.wait();
            mark->store(rec->now(), std::memory_order_release);
          }
          if (rng() % 2 == 0) {
            ASSERT_TRUE(s.receipt.wait_for(kHang)) << "an fsync hung";
          }
          fsyncs[t].push_back(std::move(s));
        }
        if (pending.size() > 32) {
          ASSERT_TRUE(pending.front().wait_for(kHang)) << "a write hung";
          EXPECT_TRUE(pending.front().ok()) << pending.front().message();
          pending.erase(pending.begin());
        }
      }
      for (auto& r : pending) {
        ASSERT_TRUE(r.wait_for(kHang)) << "a write hung";
        EXPECT_TRUE(r.ok()) << r.message();
      }
      for (auto& s : fsyncs[t]) ASSERT_TRUE(s.receipt.wait_for(kHang)) << "an fsync hung";
    });
  }
  for (auto& th : threads) th.join();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (auto& list : fsyncs)
    for (auto& s : list)
      while (s.finish->load(std::memory_order_acquire) == 0) {
        ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "a continuation of a finished receipt never ran";
        std::this_thread::yield();
      }

  // Recovery at the end: fsyncs one after another (each started after the last one finished)
  // until one succeeds, while the handle can still recover.
  bool recovered = false;
  for (int i = 0; i < 40 && !recovered; ++i) {
    Receipt r = file.fsync();
    ASSERT_TRUE(r.wait_for(kHang)) << "an fsync hung";
    recovered = r.ok();
  }

  const std::vector<RecordEntry> log = rec->snapshot();
  std::uint64_t file_id = 0;
  for (const RecordEntry& e : log)
    if (e.kind == RecordEntry::Kind::open && e.path == path && !e.error) file_id = e.file_id;
  ASSERT_NE(file_id, 0u);
  const WriteCoverage coverage(log, file_id);
  std::vector<EngineSync> syncs;
  for (const RecordEntry& e : log)
    if (e.kind == RecordEntry::Kind::request && e.file_id == file_id && (e.op == Op::fsync || e.op == Op::fdatasync))
      syncs.push_back({e.complete_ok(), e.submit_seq, e.complete_seq});
  std::uint64_t failed_syncs = 0;
  for (std::size_t i = 0; i < syncs.size(); ++i) {
    failed_syncs += !syncs[i].ok;
    ASSERT_NE(syncs[i].complete_seq, 0u) << "an engine sync never completed";
    if (i > 0) {
      ASSERT_LT(syncs[i - 1].complete_seq, syncs[i].submit_seq)
          << "engine syncs " << i - 1 << " and " << i << " of the file overlapped";
    }
  }

  std::uint64_t checked = 0, succeeded = 0, failed = 0;
  for (unsigned t = 0; t < kThreads; ++t) {
    std::uint64_t durable = 0;  // running max of d(W) over the thread's writes so far
    std::size_t w = 0;
    for (std::size_t k = 0; k < fsyncs[t].size(); ++k) {
      const UserSync& s = fsyncs[t][k];
      for (; w < s.writes_before; ++w) {
        const UserWrite& uw = writes[t][w];
        for (std::uint64_t b = uw.offset; b < uw.offset + uw.length && durable != kNever; ++b)
          durable = std::max(durable, byte_durable(coverage, syncs, b, uw.before));
      }
      if (!s.receipt.ok()) {
        ++failed;
        continue;
      }
      ++succeeded;
      if (s.writes_before == 0) continue;
      ++checked;
      const std::uint64_t finish = s.finish->load(std::memory_order_acquire);
      if (durable >= finish) {
        ADD_FAILURE() << "thread " << t << ": fsync #" << k << " succeeded (finished at seq " << finish << "):\n"
                      << explain(coverage, syncs, log, file_id, writes[t], s.writes_before, finish);
        return;
      }
    }
  }
  std::printf("  %llu engine syncs (%llu failed); fsync receipts: %llu succeeded (%llu checked), %llu failed; %s\n",
              static_cast<unsigned long long>(syncs.size()), static_cast<unsigned long long>(failed_syncs),
              static_cast<unsigned long long>(succeeded), static_cast<unsigned long long>(checked),
              static_cast<unsigned long long>(failed),
              recovered ? "recovered at the end" : "not recoverable at the end (data left the cache)");
  EXPECT_GT(failed_syncs, 0u) << "the fault rule never fired: the test proved nothing";
  if (!c.small_quota) {
    // Nothing leaves the default quota's cache here and every block is valid: every failure is
    // recoverable.
    EXPECT_TRUE(recovered) << "40 fsyncs in a row failed with the cache holding every byte";
    EXPECT_GT(succeeded, 0u);
  }
  if (recovered) {
    EXPECT_FALSE(file.status().sticky_error);
    const std::vector<unsigned char> disk = read_with_pread(path);
    for (std::size_t i = 0; i < model.size(); ++i) {
      const unsigned char got = i < disk.size() ? disk[i] : 0;
      ASSERT_EQ(got, model[i]) << "byte " << i << " of the file after a successful fsync";
    }
  }
  file.close().wait_for(kHang);
}

TEST(ControllerFailingSync, SuccessfulFsyncsRestOnDataWrittenAfterTheLastFailureOverPosix) { run_case({"posix", false}); }
TEST(ControllerFailingSync, SuccessfulFsyncsRestOnDataWrittenAfterTheLastFailureOverUring) { run_case({"uring", false}); }
TEST(ControllerFailingSync, SuccessfulFsyncsRestOnDataWrittenAfterTheLastFailureWithASmallQuota) {
  run_case({"posix", true});
}

}  // namespace
}  // namespace tai::test
