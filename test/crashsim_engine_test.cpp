// The crashsim engine's log (engines/crashsim/crashsim_engine.hpp) and the crash-state
// enumeration (engines/crashsim/crash_states.hpp): what is logged, and how many states each
// device model gives for logs whose answer is known.
#include <gtest/gtest.h>

#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "engines/crashsim/crash_states.hpp"
#include "engines/crashsim/crashsim_engine.hpp"
#include "support/engine_configs.hpp"
#include "tai/engine_selector.hpp"

namespace tai::test {
namespace {

using engines::CrashEvent;
using engines::CrashLog;
using engines::CrashStateOptions;

// ---------------------------------------------------------------------------------------------
// The log

class CrashSimLog : public ::testing::TestWithParam<bool /*forward_syncs*/> {};

TEST_P(CrashSimLog, LogsWritesSyncsTruncatesAndMarksInCompletionOrder) {
  ScratchDir dir;
  engines::CrashSimOptions o;
  o.forward_syncs = GetParam();
  auto sim = engines::make_crashsim(make_engine("posix").value(), o);
  const std::string path = dir.file("f");
  write_file(path, {1, 2, 3});  // the content before the first open
  auto f = sim->open(path, Open::read | Open::write).value();
  std::vector<std::uint8_t> a = pattern(0, 4096, 1), b = pattern(100, 50, 2), back(4096);
  auto res = run_requests(*sim, {make_request(Op::write, f.get(), a.data(), 0, a.size(), 1),
                                 make_request(Op::read, f.get(), back.data(), 0, back.size(), 2),
                                 make_request(Op::fsync, f.get(), nullptr, 0, 0, 3),
                                 make_request(Op::write, f.get(), b.data(), 100, b.size(), 4),
                                 make_request(Op::fdatasync, f.get(), nullptr, 0, 0, 5)});
  for (const auto& c : res) EXPECT_GE(c.result, 0) << c.user_data;
  const std::uint64_t m = sim->mark("receipt ok");
  EXPECT_GT(sim->tick(), m);
  ASSERT_FALSE(sim->close(*f));
  auto g = sim->open(path, Open::write | Open::truncate).value();
  sim->close(*g);

  const CrashLog log = sim->snapshot();
  ASSERT_EQ(log.paths.size(), 1u);
  EXPECT_EQ(log.paths[0], path);
  EXPECT_EQ(log.initial[0], (std::vector<unsigned char>{1, 2, 3}));
  ASSERT_EQ(log.events.size(), 6u);  // the read is not logged
  EXPECT_EQ(log.events[0].kind, CrashEvent::Kind::write);
  EXPECT_EQ(log.events[0].data, std::vector<unsigned char>(a.begin(), a.end()));
  EXPECT_EQ(log.events[0].result, 4096);
  EXPECT_EQ(log.events[1].kind, CrashEvent::Kind::sync);
  EXPECT_EQ(log.events[1].op, Op::fsync);
  EXPECT_GT(log.events[1].submit_seq, log.events[0].complete_seq);  // a synchronous engine: one at a time
  EXPECT_EQ(log.events[2].offset, 100u);
  EXPECT_EQ(log.events[3].op, Op::fdatasync);
  EXPECT_EQ(log.events[4].kind, CrashEvent::Kind::mark);
  EXPECT_EQ(log.events[4].label, "receipt ok");
  EXPECT_EQ(log.events[5].kind, CrashEvent::Kind::truncate);
  for (std::size_t i = 1; i < log.events.size(); ++i)
    EXPECT_LT(log.events[i - 1].complete_seq, log.events[i].complete_seq);
  // The data reached the file either way (forward_syncs only decides about the syncs).
  EXPECT_EQ(file_size(path), 0);
  sim->clear();
  EXPECT_EQ(sim->size(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Syncs, CrashSimLog, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "forwarded" : "absorbed"; });

TEST(CrashSimLogAsync, AnAsynchronousEngineLogsAtReapAndAbsorbedSyncsComplete) {
  for (const char* name : {"uring", "libaio"}) {
    auto made = make_engine(name);
    if (!made) {
      std::printf("skipping %s: %s\n", name, made.error().message.c_str());
      continue;
    }
    for (bool forward : {true, false}) {
      ScratchDir dir;
      engines::CrashSimOptions o;
      o.forward_syncs = forward;
      auto sim = engines::make_crashsim(make_engine(name).value(), o);
      auto f = sim->open(dir.file("f"), Open::read | Open::write | Open::create).value();
      std::vector<std::uint8_t> a = pattern(0, 8192, 3);
      auto res = run_requests(*sim, {make_request(Op::write, f.get(), a.data(), 0, a.size(), 1),
                                     make_request(Op::fsync, f.get(), nullptr, 0, 0, 2)});
      EXPECT_EQ(res[0].result, 8192) << name;
      EXPECT_EQ(res[1].result, 0) << name;
      sim->close(*f);
      const CrashLog log = sim->snapshot();
      ASSERT_EQ(log.events.size(), 2u) << name << " forward=" << forward;
      for (const auto& e : log.events) EXPECT_GT(e.complete_seq, e.submit_seq);
    }
  }
}

// The synchronous kind: what SyncEngine::execute makes on the calling thread (the controller's
// caller writes) is logged as the requests of submit/reap are.
class CrashSimSyncLog : public ::testing::TestWithParam<bool /*forward_syncs*/> {};

TEST_P(CrashSimSyncLog, LogsWhatExecuteMakesOnTheCallingThread) {
  ScratchDir dir;
  engines::CrashSimOptions o;
  o.forward_syncs = GetParam();
  auto sim = engines::make_crashsim_sync(make_engine("posix").value(), o);
  ASSERT_NE(sim, nullptr);
  const std::string path = dir.file("f");
  write_file(path, {1, 2, 3});  // the content before the first open
  auto f = sim->open(path, Open::read | Open::write).value();
  std::vector<std::uint8_t> a = pattern(0, 4096, 1), back(4096);
  EXPECT_EQ(sim->execute(make_request(Op::write, f.get(), a.data(), 0, a.size(), 1)).result, 4096);
  EXPECT_EQ(sim->execute(make_request(Op::read, f.get(), back.data(), 0, back.size(), 2)).result, 4096);
  EXPECT_EQ(back, a);
  EXPECT_EQ(sim->execute(make_request(Op::fsync, f.get(), nullptr, 0, 0, 3)).result, 0);
  std::vector<std::uint8_t> b = pattern(100, 10, 2), c = pattern(110, 20, 3);
  std::vector<::iovec> iov = {{b.data(), b.size()}, {c.data(), c.size()}};
  Request w = make_request(Op::write, f.get(), nullptr, 100, 30, 4);
  w.iov = iov.data();
  w.iov_count = static_cast<std::uint32_t>(iov.size());
  EXPECT_EQ(sim->execute(w).result, 30);
  EXPECT_EQ(run_one(*sim, make_request(Op::fdatasync, f.get(), nullptr, 0, 0, 5)).result, 0);  // submit/reap
  ASSERT_FALSE(sim->close(*f));
  auto g = sim->open(path, Open::write | Open::truncate).value();
  sim->close(*g);

  const CrashLog log = sim->log().snapshot();
  ASSERT_EQ(log.paths.size(), 1u);
  EXPECT_EQ(log.paths[0], path);
  EXPECT_EQ(log.initial[0], (std::vector<unsigned char>{1, 2, 3}));
  ASSERT_EQ(log.events.size(), 6u);  // the read is not logged; the vectored write is two
  EXPECT_EQ(log.events[0].kind, CrashEvent::Kind::write);
  EXPECT_EQ(log.events[0].data, std::vector<unsigned char>(a.begin(), a.end()));
  EXPECT_EQ(log.events[0].result, 4096);
  EXPECT_EQ(log.events[1].op, Op::fsync);
  EXPECT_GT(log.events[1].submit_seq, log.events[0].complete_seq);
  EXPECT_EQ(log.events[2].offset, 100u);
  EXPECT_EQ(log.events[2].data, std::vector<unsigned char>(b.begin(), b.end()));
  EXPECT_EQ(log.events[3].offset, 110u);
  EXPECT_EQ(log.events[3].data, std::vector<unsigned char>(c.begin(), c.end()));
  EXPECT_EQ(log.events[4].op, Op::fdatasync);
  EXPECT_EQ(log.events[5].kind, CrashEvent::Kind::truncate);
  for (const auto& e : log.events) EXPECT_LE(e.submit_seq, e.complete_seq);
  for (std::size_t i = 1; i < log.events.size(); ++i)
    EXPECT_LE(log.events[i - 1].complete_seq, log.events[i].complete_seq);
  EXPECT_EQ(file_size(path), 0);
}

INSTANTIATE_TEST_SUITE_P(Syncs, CrashSimSyncLog, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "forwarded" : "absorbed"; });

TEST(CrashSimSyncLog, AnEngineThatIsNotSynchronousIsRefused) {
  EXPECT_EQ(engines::make_crashsim_sync(engines::make_crashsim(make_engine("posix").value())), nullptr);
}

// ---------------------------------------------------------------------------------------------
// Enumeration on hand-made logs

struct LogBuilder {
  CrashLog log;
  std::uint64_t seq = 1;
  LogBuilder() {
    log.paths = {"f"};
    log.initial = {{}};
  }
  void write(std::uint64_t off, std::size_t n, unsigned char v) {
    CrashEvent e;
    e.kind = CrashEvent::Kind::write;
    e.offset = off;
    e.data.assign(n, v);
    e.result = static_cast<std::int64_t>(n);
    e.submit_seq = seq++;
    e.complete_seq = seq++;
    log.events.push_back(e);
  }
  void sync() {
    CrashEvent e;
    e.kind = CrashEvent::Kind::sync;
    e.op = Op::fsync;
    e.submit_seq = seq++;
    e.complete_seq = seq++;
    log.events.push_back(e);
  }
};

/// Collects the distinct images it is shown.
class Collect : public engines::CrashChecker {
 public:
  void check(const engines::CrashState& s, std::vector<std::string>&) override {
    images.insert(*s.image);
    ++calls;
  }
  std::set<std::vector<unsigned char>> images;
  std::uint64_t calls = 0;
};

engines::CrashStats count(const CrashLog& log, CrashStateOptions opt, Collect* out = nullptr) {
  Collect c;
  auto st = engines::enumerate_crash_states(log, 0, opt, c);
  EXPECT_EQ(c.calls, st.unique);
  if (out) *out = c;
  return st;
}

// A vectored write is logged as the writes it is made of: one event per segment, with the
// request's times, so a crash may keep any subset of the segments (pwritev is no more atomic
// than the pwrites it replaces). Synchronous and asynchronous inner engines alike.
TEST(CrashSimLog, AVectoredWriteIsLoggedAsItsSegments) {
  for (const char* name : {"posix", "uring", "libaio"}) {
    auto inner = make_engine(name);
    if (!inner) {
      std::cout << "[ info     ] " << name << " not available here: " << inner.error().message << "\n";
      continue;
    }
    SCOPED_TRACE(name);
    ScratchDir dir;
    engines::CrashSimOptions o;
    auto sim = engines::make_crashsim(std::move(inner.value()), o);
    const std::string path = dir.file("v");
    auto f = sim->open(path, Open::read | Open::write | Open::create).value();
    std::vector<std::uint8_t> a = pattern(0, 10, 1), b = pattern(10, 10, 2), c = pattern(20, 10, 3);
    std::vector<::iovec> iov = {{a.data(), a.size()}, {b.data(), 0}, {b.data(), b.size()}, {c.data(), c.size()}};
    Request w = make_request(Op::write, f.get(), nullptr, 0, 30, 1);
    w.iov = iov.data();
    w.iov_count = static_cast<std::uint32_t>(iov.size());
    EXPECT_EQ(run_one(*sim, w).result, 30);
    ASSERT_FALSE(sim->close(*f));
    const CrashLog log = sim->snapshot();
    ASSERT_EQ(log.events.size(), 3u) << "one event per non-empty segment";
    const std::vector<std::uint8_t>* parts[] = {&a, &b, &c};
    for (std::size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(log.events[k].kind, CrashEvent::Kind::write);
      EXPECT_EQ(log.events[k].offset, 10 * k);
      EXPECT_EQ(log.events[k].data, std::vector<unsigned char>(parts[k]->begin(), parts[k]->end()));
      EXPECT_EQ(log.events[k].result, 10);
      EXPECT_EQ(log.events[k].submit_seq, log.events[0].submit_seq);
      EXPECT_EQ(log.events[k].complete_seq, log.events[0].complete_seq);
    }
    CrashStateOptions opt;
    opt.sector_size = 0;  // atomic writes: the segments are the units
    Collect images;
    EXPECT_EQ(count(log, opt, &images).unique, 8u) << "any subset of the three segments";
    EXPECT_TRUE(images.images.count(std::vector<unsigned char>(a.begin(), a.end())))
        << "the first segment alone";
  }
}

TEST(CrashStates, AnySubsetAndSequentialOfAtomicWrites) {
  LogBuilder b;
  b.write(0, 10, 1);
  b.write(10, 10, 2);
  b.write(20, 10, 3);
  CrashStateOptions opt;
  opt.sector_size = 0;  // atomic writes
  // Any subset of 3 writes at the last point (each earlier point's states are among them).
  Collect c;
  EXPECT_EQ(count(b.log, opt, &c).unique, 8u);
  EXPECT_EQ(c.images.size(), 8u);
  EXPECT_TRUE(c.images.count({}));  // nothing persisted
  opt.order = CrashStateOptions::Order::sequential;
  EXPECT_EQ(count(b.log, opt).unique, 4u);  // prefixes: none, 1, 1+2, 1+2+3
}

TEST(CrashStates, TornWritesPersistSectorsIndependently) {
  LogBuilder b;
  b.write(0, 2048, 7);
  CrashStateOptions opt;
  opt.sector_size = 512;
  Collect c;
  EXPECT_EQ(count(b.log, opt, &c).unique, 16u);  // 2^4 sector subsets
  // A persisted last sector alone gives a file of 2048 bytes with a hole before it.
  std::vector<unsigned char> hole(2048, 0);
  std::fill(hole.begin() + 1536, hole.end(), 7);
  EXPECT_TRUE(c.images.count(hole));
  opt.sector_size = 4096;
  EXPECT_EQ(count(b.log, opt).unique, 2u);
  opt.sector_size = 512;
  opt.order = CrashStateOptions::Order::sequential;
  EXPECT_EQ(count(b.log, opt).unique, 16u);  // the only write is the torn last one of the prefix
}

TEST(CrashStates, ASyncMakesEarlierWritesDurable) {
  LogBuilder b;
  b.write(0, 10, 1);
  b.sync();
  b.write(10, 10, 2);
  CrashStateOptions opt;
  opt.sector_size = 0;
  Collect c;
  count(b.log, opt, &c);
  for (const auto& img : c.images) {
    // Before the sync completed the first write may be missing; after it, never. The images
    // with the second write all have the first.
    if (img.size() > 10) {
      EXPECT_EQ(img[0], 1);
    }
  }
  EXPECT_EQ(c.images.size(), 3u);  // {}, {1}, {1,2}; the second write never persists without the first
}

TEST(CrashStates, IdenticalImagesAreCountedOnce) {
  LogBuilder b;
  b.write(0, 10, 5);
  b.write(0, 10, 5);  // the same bytes again
  CrashStateOptions opt;
  opt.sector_size = 0;
  auto st = count(b.log, opt);
  EXPECT_EQ(st.unique, 2u);
  EXPECT_GT(st.generated, st.unique);
}

TEST(CrashStates, ManyUnitsAreSampledReproducibly) {
  LogBuilder b;
  for (int i = 0; i < 16; ++i) b.write(static_cast<std::uint64_t>(i) * 100, 100, static_cast<unsigned char>(i + 1));
  CrashStateOptions opt;
  opt.sector_size = 0;
  opt.exhaustive_bound = 12;
  opt.samples = 100;
  opt.seed = 42;
  Collect a, c;
  auto sa = count(b.log, opt, &a);
  EXPECT_GT(sa.sampled_points, 0u);
  EXPECT_LE(sa.max_units, 16u);
  count(b.log, opt, &c);
  EXPECT_EQ(a.images, c.images);  // same seed, same states
  opt.seed = 43;
  Collect d;
  count(b.log, opt, &d);
  EXPECT_NE(a.images, d.images);
  opt.max_states = 10;
  EXPECT_EQ(count(b.log, opt).unique, 10u);
}

}  // namespace
}  // namespace tai::test
