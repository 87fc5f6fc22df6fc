// Open::shared_writers: a direct file that other processes write too.
//
// An unaligned direct write whose last block lies past end of file writes the whole block (the
// device takes nothing smaller), which pads the file with zeros up to the block boundary. On a
// file of one writer the engine cuts that padding back (fstat, then ftruncate); between those two
// calls another process's write past the block would be cut off too, and no lock of this process
// can order that. With Open::shared_writers the padding stays and nothing is cut:
//
//  * PaddingStaysAtTheBlockBoundary: every unaligned write past end of file leaves the file at
//    its block boundary, zeros after the data; both drivers (submit/reap and SyncEngine::execute).
//  * AnotherProcessLosesNothing: a forked process writes the block right after each padded one
//    while the engine writes it (timed to sweep the engine's whole write, fstat and truncate
//    included), many times; with the flag not one of its bytes may be missing. The same loop
//    without the flag is run too and its losses printed: that is the hazard the flag removes
//    (not asserted: it is a race, caught only some of the time).
//  * ControllerPassesTheFlag: Controller::open hands the flag to the engine (a File's padded
//    write-back keeps the padding), and without it the file keeps its exact size.
//
// Single-writer behaviour (the trim, exact sizes) is checked over every engine by
// EngineConformance.UnalignedAppendLeavesExactFileSize. Configurations without direct I/O are
// skipped, and so is a scratch file system that refuses O_DIRECT (tmpfs before Linux 6.6).
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>

#include "support/engine_configs.hpp"
#include "tai/tai.hpp"

namespace tai::test {
namespace {

class SharedWriters : public EngineTest {
 protected:
  void SetUp() override {
    EngineTest::SetUp();
    if (IsSkipped()) return;
    if (!config().direct) GTEST_SKIP() << "configuration does not use direct I/O (nothing is ever padded)";
    if (!stores_data()) GTEST_SKIP() << kNoData;
  }
  // Opens `path` with Open::direct (plus `extra`); skips the test when the file system refuses
  // O_DIRECT, fails it on any other error.
  std::unique_ptr<EngineFile> open_direct(const std::string& path, Open extra) {
    auto opened = engine().open(path, Open::read | Open::write | Open::create | Open::direct | extra);
    if (!opened) {
      if (opened.error().message.find("refuses O_DIRECT") != std::string::npos) {
        skip_reason_ = opened.error().message;
      } else {
        ADD_FAILURE() << "open " << path << ": " << opened.error().message;
      }
      return nullptr;
    }
    return std::move(opened.value());
  }
  static std::uint64_t block_of(const EngineFile& f) {
    const Alignment& a = f.capabilities().alignment;
    return std::max<std::uint64_t>({a.offset, a.length, 1});
  }
  // Runs one request through the queue driver, or through SyncEngine::execute when `inline_driver`.
  Completion run_via(const Request& r, bool inline_driver) {
    if (!inline_driver) return run(r);
    return dynamic_cast<SyncEngine&>(engine()).execute(r);
  }
  std::string skip_reason_;
};

std::uint64_t round_up(std::uint64_t x, std::uint64_t b) { return (x + b - 1) / b * b; }

TEST_P(SharedWriters, PaddingStaysAtTheBlockBoundary) {
  const bool has_inline = dynamic_cast<SyncEngine*>(&engine()) != nullptr;
  for (int driver = 0; driver < (has_inline ? 2 : 1); ++driver) {
    const bool inline_driver = driver == 1;
    SCOPED_TRACE(inline_driver ? "SyncEngine::execute" : "submit/reap");
    const std::string path = scratch_.file(inline_driver ? "padded-inline" : "padded");
    std::vector<std::uint8_t> model = pattern(0, 10000, 900);
    write_file(path, model);
    auto f = open_direct(path, Open::shared_writers);
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    ASSERT_TRUE(f);
    const std::uint64_t block = block_of(*f);
    struct Step {
      std::size_t misalign;
      std::uint64_t offset;
      std::size_t length;
    };
    const Step steps[] = {
        {1, 10000, 1000},  // from an unaligned end of file: the last block is read, then padded
        {0, 11000, 5000},  // over the padding, past it again
        {3, 20000, 1},     // past the end: a hole, then a padded block
        {1, 20001, 4095},  // inside the padding (the size stays) and past it
        {0, 100, 200},     // inside the file: the size must not change
    };
    std::uint64_t seed = 900;
    for (const Step& s : steps) {
      SCOPED_TRACE(::testing::Message() << "write misalign=" << s.misalign << " offset=" << s.offset
                                        << " length=" << s.length);
      TestBuffer b(s.length + 8);
      fill_pattern(b.at(s.misalign), s.offset, s.length, ++seed);
      Request w = make_request(Op::write, f.get(), b.at(s.misalign), s.offset, s.length, seed);
      expect_result(w, run_via(w, inline_driver), static_cast<std::int64_t>(s.length));
      const std::uint64_t end = s.offset + s.length;
      if (end > model.size()) model.resize(round_up(end, block), 0);  // zeros: the padding
      model_write(model, s.offset, b.at(s.misalign), s.length);
      EXPECT_EQ(file_size(path), static_cast<std::int64_t>(model.size()))
          << "with Open::shared_writers the file must end at the block boundary (block " << block << ")";
    }
    expect_file_equals(path, model);
    EXPECT_FALSE(engine().close(*f));
  }
}

// The state the engine's process and the other writer share (an anonymous shared mapping).
struct RaceShared {
  std::atomic<std::int64_t> go{-1};    // the engine's process starts write k
  std::atomic<std::int64_t> done{-1};  // the other process has written its block of round k
  std::atomic<std::uint64_t> window_ns{100000};  // how long the engine's last write took
};
static_assert(std::atomic<std::int64_t>::is_always_lock_free, "shared across processes");

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

// Rounds of the race per run: $TAI_SHARED_WRITERS_ROUNDS, else 600 (150 in a quick run, where
// the race still lands in the trim window within a few dozen rounds).
unsigned race_rounds() {
  if (const char* s = std::getenv("TAI_SHARED_WRITERS_ROUNDS")) return static_cast<unsigned>(std::strtoul(s, nullptr, 0));
  return static_cast<unsigned>(600 * test_depth_factor());
}

struct RaceOutcome {
  std::uint64_t lost_bytes = 0;   // bytes of the other process missing or wrong
  std::uint64_t lost_blocks = 0;  // rounds in which the other process lost anything
  std::uint64_t own_bad = 0;      // bytes of the engine's own writes wrong
  std::string first;              // where the first loss is
};

// Round k: this process writes [2k*B, 2k*B + L) (unaligned, past end of file: a padded write)
// through `f`, while the forked process writes block 2k+1 with plain pwrite after a random
// delay within the engine's last write time, so that over the rounds its write lands before,
// inside and after the engine's write, fstat and truncate. Then every block is read back.
RaceOutcome race(SharedWriters* t, EngineFile* f, const std::string& path, std::uint64_t block, unsigned rounds,
                 std::uint64_t seed, const std::function<Completion(const Request&)>& run_request) {
  RaceOutcome out;
  void* mem = ::mmap(nullptr, sizeof(RaceShared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    ADD_FAILURE() << "mmap: " << std::strerror(errno);
    return out;
  }
  auto* sh = new (mem) RaceShared();
  const std::size_t mine = static_cast<std::size_t>(block / 2 + 7);  // unaligned: bounced and padded
  const std::uint64_t other_seed = seed + 1;
  const pid_t child = ::fork();
  if (child < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    ::munmap(mem, sizeof(RaceShared));
    return out;
  }
  if (child == 0) {
    // The other writer: plain descriptor, plain pwrite; async-signal-safe calls and spins only.
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) ::_exit(3);
    std::vector<std::uint8_t> buf(block);
    std::mt19937_64 rng(seed ^ 0xC0FFEE);
    for (std::int64_t k = 0; k < static_cast<std::int64_t>(rounds); ++k) {
      const std::uint64_t give_up = now_ns() + 30'000'000'000ull;
      while (sh->go.load(std::memory_order_acquire) < k)
        if (now_ns() > give_up) ::_exit(4);
      const std::uint64_t window = sh->window_ns.load(std::memory_order_relaxed);
      const std::uint64_t until = now_ns() + rng() % (window + window / 4 + 1);
      while (now_ns() < until) {
      }
      const std::uint64_t off = (2 * static_cast<std::uint64_t>(k) + 1) * block;
      fill_pattern(buf.data(), off, buf.size(), other_seed);
      if (::pwrite(fd, buf.data(), buf.size(), static_cast<off_t>(off)) != static_cast<ssize_t>(buf.size())) ::_exit(5);
      sh->done.store(k, std::memory_order_release);
    }
    ::close(fd);
    ::_exit(0);
  }
  TestBuffer b(block + 8);
  for (std::int64_t k = 0; k < static_cast<std::int64_t>(rounds); ++k) {
    const std::uint64_t off = 2 * static_cast<std::uint64_t>(k) * block;
    fill_pattern(b.at(1), off, mine, seed);
    const Request w = make_request(Op::write, f, b.at(1), off, mine, static_cast<std::uint64_t>(k) + 1);
    sh->go.store(k, std::memory_order_release);
    const std::uint64_t t0 = now_ns();
    const Completion c = run_request(w);
    sh->window_ns.store(now_ns() - t0, std::memory_order_relaxed);
    if (c.result != static_cast<std::int64_t>(mine)) {
      ADD_FAILURE() << "round " << k << ": " << describe(w) << " returned " << result_text(c.result);
      break;
    }
    const std::uint64_t give_up = now_ns() + 30'000'000'000ull;
    while (sh->done.load(std::memory_order_acquire) < k && now_ns() < give_up) std::this_thread::yield();
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the other writer ended with status " << status;
  ::munmap(mem, sizeof(RaceShared));
  (void)t;

  const std::vector<std::uint8_t> disk = read_file(path);
  for (std::uint64_t k = 0; k < rounds; ++k) {
    const std::uint64_t own = 2 * k * block, other = own + block;
    const std::vector<std::uint8_t> want_own = pattern(own, mine, seed), want_other = pattern(other, block, other_seed);
    for (std::size_t i = 0; i < mine; ++i)
      if (own + i >= disk.size() || disk[own + i] != want_own[i]) ++out.own_bad;
    std::uint64_t lost = 0;
    for (std::size_t i = 0; i < block; ++i)
      if (other + i >= disk.size() || disk[other + i] != want_other[i]) ++lost;
    if (lost) {
      ++out.lost_blocks;
      if (out.first.empty())
        out.first = "round " + std::to_string(k) + ": " + std::to_string(lost) + " bytes of the block at " +
                    std::to_string(other) + " (file size now " + std::to_string(disk.size()) + ")";
    }
    out.lost_bytes += lost;
  }
  return out;
}

TEST_P(SharedWriters, AnotherProcessLosesNothing) {
  const unsigned rounds = race_rounds();
  const bool has_inline = dynamic_cast<SyncEngine*>(&engine()) != nullptr;
  for (int driver = 0; driver < (has_inline ? 2 : 1); ++driver) {
    const bool inline_driver = driver == 1;
    auto run_request = [&](const Request& r) { return run_via(r, inline_driver); };
    for (const bool flag : {true, false}) {
      SCOPED_TRACE(::testing::Message() << (inline_driver ? "SyncEngine::execute" : "submit/reap")
                                        << (flag ? ", Open::shared_writers" : ", without Open::shared_writers"));
      const std::string path = scratch_.file(std::string("race") + (inline_driver ? "-inline" : "") + (flag ? "" : "-trim"));
      auto f = open_direct(path, (flag ? Open::shared_writers : Open::none) | Open::truncate);
      if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
      ASSERT_TRUE(f);
      const std::uint64_t block = block_of(*f);
      const RaceOutcome o = race(this, f.get(), path, block, rounds, 4000 + driver * 10 + flag, run_request);
      EXPECT_FALSE(engine().close(*f));
      EXPECT_EQ(o.own_bad, 0u) << "bytes of the engine's own writes are wrong";
      if (flag) {
        EXPECT_EQ(o.lost_bytes, 0u) << "with Open::shared_writers the other process lost bytes in " << o.lost_blocks
                                    << " of " << rounds << " rounds; first: " << o.first;
        std::printf("[ shared_writers ] %s, %s: %u rounds, the other process lost %llu bytes\n", config().label,
                    inline_driver ? "execute" : "submit/reap", rounds, static_cast<unsigned long long>(o.lost_bytes));
      } else {
        std::printf("[ trim (no flag) ] %s, %s: %u rounds, the other process lost %llu bytes in %llu rounds%s%s "
                    "(the hazard Open::shared_writers removes; a race, not asserted)\n",
                    config().label, inline_driver ? "execute" : "submit/reap", rounds,
                    static_cast<unsigned long long>(o.lost_bytes), static_cast<unsigned long long>(o.lost_blocks),
                    o.first.empty() ? "" : "; first: ", o.first.c_str());
      }
    }
  }
}

TEST_P(SharedWriters, ControllerPassesTheFlag) {
  if (config().engine != std::string("posix")) GTEST_SKIP() << "one engine is enough for the controller's open path";
  // A direct file's alignment, as the engine finds it here.
  std::uint64_t block = 0;
  {
    auto probe = open_direct(scratch_.file("probe"), Open::none);
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    ASSERT_TRUE(probe);
    block = block_of(*probe);
    EXPECT_FALSE(engine().close(*probe));
  }
  for (const bool flag : {true, false}) {
    for (const bool cached : {true, false}) {
      SCOPED_TRACE(::testing::Message() << (flag ? "Open::shared_writers" : "no flag") << ", "
                                        << (cached ? "BTreeDefault" : "BTreeTrivial"));
      const std::string path = scratch_.file(std::string("ctl") + (flag ? "-shared" : "") + (cached ? "-def" : "-triv"));
      const std::vector<std::uint8_t> data = pattern(0, 100, 77);
      {
        ControllerOptions opts;
        opts.workers = 2;
        opts.engine = "posix";
        Controller ctl(opts);
        const Open mode = Open::write | Open::create | Open::truncate | Open::direct | (flag ? Open::shared_writers : Open::none);
        auto f = cached ? ctl.open<BTreeDefault>(path, mode) : ctl.open<BTreeTrivial>(path, mode);
        ASSERT_TRUE(f) << f.error().message;
        Receipt w = f.value().write(0, data.data(), data.size());
        w.wait();
        EXPECT_TRUE(w.ok()) << w.message();
        Receipt c = f.value().close();
        c.wait();
        EXPECT_TRUE(c.ok()) << c.message();
      }
      std::vector<std::uint8_t> want = data;
      if (flag) want.resize(block, 0);
      EXPECT_EQ(file_size(path), static_cast<std::int64_t>(want.size()))
          << (flag ? "the padding must stay" : "a single writer's file keeps its exact size");
      expect_file_equals(path, want);
    }
  }
}

TAI_INSTANTIATE_ENGINE_CONFIGS(SharedWriters);

}  // namespace
}  // namespace tai::test
