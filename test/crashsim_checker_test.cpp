// The crash checker catches what it is there to catch: a controller over a deliberately broken
// engine (placed above the crashsim engine, so the log shows what the broken engine really
// handed to the device) that drops a write, lets a sync overtake the writes before it, or lets a
// write overtake another across a barrier, must produce violations; the same workloads over the
// unbroken engine must not. Plus oracle cases on hand-made logs.
#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

#include "engines/common/wrapper_engine.hpp"
#include "support/crash_workloads.hpp"

namespace tai::test::crash {
namespace {

/// A broken engine over a synchronous one. It acknowledges the writes it misplaces at once (as a
/// write-back cache that lies would) and hands them down later, or never.
/// Thread-safety: as tai::Engine (submit/reap from the queue owner's thread).
class BrokenEngine final : public engines::WrapperEngine {
 public:
  enum class Mode {
    drop_write,             ///< write number `nth` never reaches the device
    sync_overtakes_writes,  ///< every write waits for the next sync and goes down after it
    write_overtakes_write,  ///< write number `nth` goes down after the write that follows it
  };
  BrokenEngine(std::unique_ptr<Engine> inner, Mode mode, unsigned nth)
      : WrapperEngine("broken", std::move(inner)), mode_(mode), nth_(nth) {}

 protected:
  std::size_t do_submit(const Request* rs, std::size_t n) override {
    for (std::size_t i = 0; i < n; ++i) {
      const Request& r = rs[i];
      if (r.op == Op::write) {
        ++writes_;
        const bool misplace = mode_ == Mode::sync_overtakes_writes || writes_ == nth_;
        if (misplace) {
          acked_.push_back(Completion{r.user_data, static_cast<std::int64_t>(r.length)});
          if (mode_ != Mode::drop_write) hold(r);
          continue;
        }
        pass(r);
        if (mode_ == Mode::write_overtakes_write) release();
        continue;
      }
      pass(r);
      if (r.op != Op::read && mode_ == Mode::sync_overtakes_writes) release();
    }
    return n;
  }
  std::size_t do_reap(Completion* out, std::size_t max, std::size_t, Timeout) override {
    // The inner engine is synchronous: everything handed down has completed already.
    std::vector<Completion> got(64);
    for (;;) {
      const std::size_t k = native_reap(inner(), got.data(), got.size(), 0, Timeout(0));
      for (std::size_t j = 0; j < k; ++j)
        if (!(got[j].user_data & kMine)) acked_.push_back(got[j]);  // our own hand-downs stay here
      if (k < got.size()) break;
    }
    std::size_t n = 0;
    while (n < max && !acked_.empty()) {
      out[n++] = acked_.front();
      acked_.pop_front();
    }
    return n;
  }

 private:
  static constexpr std::uint64_t kMine = std::uint64_t{1} << 63;
  struct Held {
    Request request;
    std::vector<unsigned char> bytes;
  };
  void pass(const Request& r) { (void)native_submit(inner(), &r, 1); }
  void hold(const Request& r) {
    Held h{r, std::vector<unsigned char>(static_cast<const unsigned char*>(r.buffer),
                                         static_cast<const unsigned char*>(r.buffer) + r.length)};
    held_.push_back(std::move(h));
  }
  void release() {
    for (auto& h : held_) {
      Request r = h.request;
      r.buffer = h.bytes.data();
      r.user_data = kMine | next_++;
      pass(r);
    }
    held_.clear();
  }

  const Mode mode_;
  const unsigned nth_;
  unsigned writes_ = 0;
  std::uint64_t next_ = 0;
  std::deque<Held> held_;
  std::deque<Completion> acked_;
};

Workload make(const std::string& name, std::vector<WOp> ops) { return Workload{name, std::move(ops)}; }

/// Runs `w` on BTreeTrivial/posix (every write goes straight to the engine, so the broken
/// engine's write numbers are the workload's) and returns every failure line.
std::vector<std::string> run_broken(const Workload& w, const CrashRig::Wrap& wrap) {
  CrashDir dir;
  CrashRig rig(CrashConfig{"posix", false, TreeKind::trivial, false}, dir.path(), wrap);
  EXPECT_EQ(rig.error(), "");
  engines::CrashStateOptions opt;
  RunResult r = rig.run(w, 7, opt);
  return r.failures;
}

CrashRig::Wrap broken(BrokenEngine::Mode mode, unsigned nth) {
  return [mode, nth](std::unique_ptr<engines::CrashSimEngine> sim) -> std::unique_ptr<Engine> {
    return std::make_unique<BrokenEngine>(std::move(sim), mode, nth);
  };
}

bool any_contains(const std::vector<std::string>& lines, const std::string& what) {
  for (const auto& l : lines)
    if (l.find(what) != std::string::npos) return true;
  return false;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

const Workload kTwoSyncedWrites =
    make("two synced writes", {{WOp::Kind::write, 0, 4096}, {WOp::Kind::fsync}, {WOp::Kind::write, 4096, 4096}, {WOp::Kind::fsync}});
const Workload kBarrier = make("barrier between writes", {{WOp::Kind::write, 0, 4096},
                                                          {WOp::Kind::barrier},
                                                          {WOp::Kind::write, 4096, 4096},
                                                          {WOp::Kind::write, 8192, 4096}});

TEST(CrashSimChecker, TheUnbrokenEngineHasNoViolations) {
  EXPECT_EQ(joined(run_broken(kTwoSyncedWrites, {})), "");
  EXPECT_EQ(joined(run_broken(kBarrier, {})), "");
}

TEST(CrashSimChecker, CatchesADroppedSyncedWrite) {
  const auto lines = run_broken(kTwoSyncedWrites, broken(BrokenEngine::Mode::drop_write, 1));
  EXPECT_TRUE(any_contains(lines, "violation:") && any_contains(lines, "required durable by fsync"))
      << joined(lines);
}

TEST(CrashSimChecker, CatchesASyncThatOvertakesTheWritesBeforeIt) {
  // The file is right in the end (each held write goes down right after the sync): only the
  // crash states between the sync and the late write show the lie.
  const auto lines = run_broken(kTwoSyncedWrites, broken(BrokenEngine::Mode::sync_overtakes_writes, 0));
  EXPECT_FALSE(any_contains(lines, "no crash")) << joined(lines);
  EXPECT_TRUE(any_contains(lines, "violation:") && any_contains(lines, "required durable by fsync"))
      << joined(lines);
}

TEST(CrashSimChecker, CatchesAWriteThatOvertakesAnotherAcrossABarrier) {
  const auto lines = run_broken(kBarrier, broken(BrokenEngine::Mode::write_overtakes_write, 1));
  EXPECT_TRUE(any_contains(lines, "barrier#2") && any_contains(lines, "broken: offset")) << joined(lines);  // op 0 is the truncating open
}

// ---------------------------------------------------------------------------------------------
// Hand-made logs: the oracle's rules one at a time.

struct Hand {
  engines::CrashLog log;
  std::vector<engines::ProgramOp> ops;
  std::uint64_t seq = 1;

  Hand() {
    log.paths = {"f"};
    log.initial = {{}};
  }
  std::vector<unsigned char> bytes(std::size_t n, unsigned char v) { return std::vector<unsigned char>(n, v); }
  /// The program writes and the engine writes it at once (one op, one event).
  void write(std::uint64_t off, std::vector<unsigned char> data) {
    engines::ProgramOp op;
    op.kind = engines::ProgramOp::Kind::write;
    op.path = "f";
    op.offset = off;
    op.data = data;
    op.submit_begin = seq++;
    op.submit_end = seq++;
    engines::CrashEvent e;
    e.kind = engines::CrashEvent::Kind::write;
    e.offset = off;
    e.data = std::move(data);
    e.result = static_cast<std::int64_t>(e.data.size());
    e.submit_seq = seq++;
    e.complete_seq = seq++;
    op.done_seq = seq++;
    op.ok = true;
    ops.push_back(std::move(op));
    log.events.push_back(std::move(e));
  }
  void sync(engines::ProgramOp::Kind kind) {
    engines::ProgramOp op;
    op.kind = kind;
    op.path = "f";
    op.submit_begin = seq++;
    op.submit_end = seq++;
    engines::CrashEvent e;
    e.kind = engines::CrashEvent::Kind::sync;
    e.op = Op::fdatasync;
    e.submit_seq = seq++;
    e.complete_seq = seq++;
    op.done_seq = seq++;
    op.ok = true;
    ops.push_back(std::move(op));
    log.events.push_back(std::move(e));
  }
  /// Checks `image` as a crash at time `at` (default: after everything).
  std::vector<std::string> check(const std::vector<unsigned char>& image, std::uint64_t at = UINT64_MAX) {
    engines::TaiCrashOracle oracle(log, ops);
    engines::CrashState st;
    st.file = 0;
    st.seq = at;
    st.image = &image;
    std::vector<std::string> out;
    oracle.check(st, out);
    return out;
  }
};

TEST(CrashSimOracle, DurableBytesMustReadBackAndStaleOnesMayNotReturn) {
  Hand h;
  h.write(0, h.bytes(8, 0xA1));
  h.sync(engines::ProgramOp::Kind::fsync);
  h.write(0, h.bytes(4, 0xB2));  // not synced
  auto img = h.bytes(8, 0xA1);
  EXPECT_TRUE(h.check(img).empty());  // the overwrite did not reach the disk: fine
  img[0] = img[1] = img[2] = img[3] = 0xB2;
  EXPECT_TRUE(h.check(img).empty());  // it did: fine
  img[2] = 0xA1;
  EXPECT_TRUE(h.check(img).empty());  // partly (bytes of either version): fine
  EXPECT_FALSE(h.check(std::vector<unsigned char>(4, 0xA1)).empty());  // the synced tail is gone
  EXPECT_FALSE(h.check(h.bytes(8, 0)).empty());                         // the synced bytes are gone
  auto garbage = h.bytes(8, 0xA1);
  garbage[7] = 0x5C;
  EXPECT_FALSE(h.check(garbage).empty());  // a byte nobody wrote
  auto longer = h.bytes(9, 0xA1);
  longer[8] = 0x77;
  EXPECT_FALSE(h.check(longer).empty());  // data past every write
  longer[8] = 0;
  EXPECT_TRUE(h.check(longer).empty());  // zeros past every write: direct-I/O padding
}

TEST(CrashSimOracle, BeforeTheSyncFinishesNothingIsRequired) {
  Hand h;
  h.write(0, h.bytes(8, 0xA1));
  h.sync(engines::ProgramOp::Kind::fsync);
  const std::uint64_t sync_done = h.ops.back().done_seq;
  EXPECT_TRUE(h.check({}, sync_done).empty());  // a crash before the program was told: empty file is fine
  EXPECT_FALSE(h.check({}, sync_done + 1).empty());
}

TEST(CrashSimOracle, ABarrierForbidsLaterWritesWithoutEarlierOnes) {
  Hand h;
  h.write(0, h.bytes(4, 0xA1));
  engines::ProgramOp b;  // a barrier whose receipt has not finished
  b.kind = engines::ProgramOp::Kind::barrier;
  b.path = "f";
  b.submit_begin = h.seq++;
  b.submit_end = h.seq++;
  h.ops.push_back(b);
  h.write(4, h.bytes(4, 0xC3));
  std::vector<unsigned char> img = {0, 0, 0, 0, 0xC3, 0xC3, 0xC3, 0xC3};
  const auto lines = h.check(img);
  EXPECT_TRUE(any_contains(lines, "barrier#1")) << joined(lines);
  img = {0xA1, 0xA1, 0xA1, 0xA1, 0xC3, 0xC3, 0xC3, 0xC3};
  EXPECT_TRUE(h.check(img).empty());
  img = {0xA1, 0xA1, 0xA1, 0xA1};
  EXPECT_TRUE(h.check(img).empty());
}

}  // namespace
}  // namespace tai::test::crash
