// Tests of tai::IoQueue (include/tai/io_queue.hpp) over every backend this machine has: the
// kernel queues (uring, libaio) and the thread pool over posix ("threads"), plus its inline
// callback type (tai/detail/inplace_function.hpp).
#include "tai/io_queue.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tai/detail/aligned_buffer.hpp"
#include "tai/detail/inplace_function.hpp"
#include "tai/engine_selector.hpp"
#include "test/support/test_env.hpp"

namespace tai {
namespace {

using test::ScratchDir;

// Byte at `offset` of a pattern file: depends on the offset, so a misplaced read shows.
std::uint8_t pattern_byte(std::uint64_t offset) {
  std::uint64_t x = (offset >> 3) * 0x9E3779B97F4A7C15ull;
  return static_cast<std::uint8_t>((x >> (8 * (offset & 7))) ^ 0x5A);
}

void write_pattern_file(const std::string& path, std::size_t size) {
  std::vector<std::uint8_t> data(size);
  for (std::size_t i = 0; i < size; ++i) data[i] = pattern_byte(i);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  ASSERT_EQ(::pwrite(fd, data.data(), size, 0), static_cast<ssize_t>(size));
  ASSERT_EQ(::fsync(fd), 0);
  ::close(fd);
}

std::vector<std::uint8_t> read_whole_file(const std::string& path) {
  std::vector<std::uint8_t> data;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return data;
  off_t size = ::lseek(fd, 0, SEEK_END);
  data.resize(static_cast<std::size_t>(size));
  ssize_t got = ::pread(fd, data.data(), data.size(), 0);
  data.resize(got > 0 ? static_cast<std::size_t>(got) : 0);
  ::close(fd);
  return data;
}

// ---------------------------------------------------------------------------------------------
// The fixture: one queue per backend, skipped with the selector's reason when unavailable.

class IoQueueTest : public ::testing::TestWithParam<const char*> {
 protected:
  /// "threads" = the thread pool over posix; the others are engine names.
  std::unique_ptr<IoQueue> make_queue(unsigned depth, unsigned threads = 0, unsigned submit_batch = 0) {
    const std::string backend = GetParam();
    EngineOptions eo;
    eo.depth = depth;
    auto engine = make_engine(backend == "threads" ? "posix" : backend, eo);
    if (!engine) {
      skip_reason_ = engine.error().message;
      return nullptr;
    }
    IoQueueOptions qo;
    qo.depth = depth;
    qo.threads = threads;
    qo.submit_batch = submit_batch;
    auto q = std::make_unique<IoQueue>(std::move(engine.value()), qo);
    EXPECT_EQ(q->uses_thread_pool(), backend == "threads");
    return q;
  }
  std::unique_ptr<EngineFile> open(IoQueue& q, const std::string& path, Open flags) {
    auto f = q.engine().open(path, OpenMode(flags));
    EXPECT_TRUE(f.ok()) << (f.ok() ? "" : f.error().message);
    return f.ok() ? std::move(f.value()) : nullptr;
  }
  /// Reaps until nothing is in flight; fails the test rather than hanging.
  static void drain(IoQueue& q) {
    for (int i = 0; q.in_flight() > 0 && i < 100000; ++i) q.reap(1, std::chrono::seconds(10));
    ASSERT_EQ(q.in_flight(), 0u) << "requests never completed";
  }

  std::string skip_reason_;
  ScratchDir dir_;
};

#define MAKE_QUEUE_OR_SKIP(var, ...) \
  auto var = make_queue(__VA_ARGS__); \
  if (!var) {                         \
    GTEST_SKIP() << skip_reason_;     \
  }                                   \
  static_assert(true, "")

TEST_P(IoQueueTest, ReapWithNothingInFlightReturnsZeroAtOnce) {
  MAKE_QUEUE_OR_SKIP(q, 8);
  EXPECT_EQ(q->in_flight(), 0u);
  EXPECT_EQ(q->depth(), 8u);
  EXPECT_EQ(q->reap(0), 0u);
  // min larger than what is in flight is clamped: nothing can arrive, so no wait.
  EXPECT_EQ(q->reap(5), 0u);
}

TEST_P(IoQueueTest, CallbacksRunOnTheCallingThreadOnlyFromReap) {
  MAKE_QUEUE_OR_SKIP(q, 8);
  const std::string path = dir_.file("data");
  write_pattern_file(path, 1 << 16);
  auto f = open(*q, path, Open::read);
  ASSERT_TRUE(f);

  const auto me = std::this_thread::get_id();
  std::atomic<int> ran{0};
  std::atomic<int> on_other_thread{0};
  std::vector<std::vector<std::uint8_t>> bufs(8, std::vector<std::uint8_t>(4096));
  for (int i = 0; i < 8; ++i) {
    ASSERT_FALSE(q->pread(*f, bufs[i].data(), 4096, 4096u * i, [&, me](std::int64_t r) {
      EXPECT_EQ(r, 4096);
      if (std::this_thread::get_id() != me) ++on_other_thread;
      ++ran;
    }));
  }
  // The pool's workers finish these within microseconds; still, no callback may have run.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(q->in_flight(), 8u);
  drain(*q);
  EXPECT_EQ(ran.load(), 8);
  EXPECT_EQ(on_other_thread.load(), 0);
  for (int i = 0; i < 8; ++i)
    for (int k = 0; k < 4096; k += 511) ASSERT_EQ(bufs[i][k], pattern_byte(4096u * i + k)) << i << " " << k;
}

TEST_P(IoQueueTest, DepthLimitReturnsTryAgainUntilReaped) {
  MAKE_QUEUE_OR_SKIP(q, 4);
  const std::string path = dir_.file("data");
  write_pattern_file(path, 1 << 16);
  auto f = open(*q, path, Open::read);
  ASSERT_TRUE(f);
  std::vector<char> buf(5 * 512);
  int ran = 0;
  for (int i = 0; i < 4; ++i) ASSERT_FALSE(q->pread(*f, buf.data() + 512 * i, 512, 512u * i, [&](std::int64_t) { ++ran; }));
  EXPECT_EQ(q->in_flight(), 4u);
  std::error_code ec = q->pread(*f, buf.data() + 2048, 512, 0, [&](std::int64_t) { ++ran; });
  EXPECT_EQ(ec, std::make_error_code(std::errc::resource_unavailable_try_again));
  EXPECT_EQ(q->in_flight(), 4u);
  EXPECT_GE(q->reap(1), 1u);
  EXPECT_FALSE(q->pread(*f, buf.data() + 2048, 512, 0, [&](std::int64_t) { ++ran; }));
  drain(*q);
  EXPECT_EQ(ran, 5);  // the refused request's callback was never stored, never run
}

TEST_P(IoQueueTest, EventfdBecomesReadableAfterACompletion) {
  MAKE_QUEUE_OR_SKIP(q, 8);
  const std::string path = dir_.file("data");
  write_pattern_file(path, 1 << 16);
  auto f = open(*q, path, Open::read);
  ASSERT_TRUE(f);
  const int efd = q->eventfd();
  if (efd < 0) GTEST_SKIP() << "engine '" << q->engine().name() << "' has no eventfd";
  EXPECT_EQ(q->eventfd(), efd);  // the same descriptor every time

  std::vector<char> buf(4096);
  int ran = 0;
  ASSERT_FALSE(q->pread(*f, buf.data(), buf.size(), 0, [&](std::int64_t r) {
    EXPECT_EQ(r, 4096);
    ++ran;
  }));
  // No reap() before the poll: the request must have reached the engine already.
  pollfd p{efd, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 10000), 1) << "eventfd not readable 10 s after a read";
  EXPECT_TRUE(p.revents & POLLIN);
  std::uint64_t counter = 0;
  EXPECT_EQ(::read(efd, &counter, sizeof counter), static_cast<ssize_t>(sizeof counter));
  EXPECT_GE(counter, 1u);
  // The poll-loop pattern: after readiness, reap(0) runs the callback.
  for (int i = 0; ran == 0 && i < 1000; ++i) {
    q->reap(0);
    if (ran == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(ran, 1);
}

TEST_P(IoQueueTest, ManyRandomDirectReadsMatchTheFile) {
  MAKE_QUEUE_OR_SKIP(q, 16);
  const std::string path = dir_.file("data");
  constexpr std::size_t kSize = 8 << 20;
  TAI_SKIP_WITHOUT_DIRECT_IO(dir_.path());
  write_pattern_file(path, kSize);
  auto f = open(*q, path, Open::read | Open::direct);
  ASSERT_TRUE(f);
  const std::uint64_t seed = test::test_seed();
  SCOPED_TRACE("TAI_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);

  constexpr std::size_t kDepth = 16, kMaxLen = 64 << 10;
  detail::AlignedBuffer buffers(kDepth * kMaxLen, 4096);
  std::vector<std::uint32_t> free_bufs;
  for (std::uint32_t i = 0; i < kDepth; ++i) free_bufs.push_back(i);
  struct Check {
    std::uint64_t offset, length;
  };
  std::vector<Check> checks(kDepth);
  int mismatches = 0, done = 0;
  for (int i = 0; i < 3000; ++i) {
    const std::uint32_t b = free_bufs.back();
    free_bufs.pop_back();
    // Mostly block-aligned requests (native O_DIRECT); one in four unaligned (bounced).
    std::uint64_t len, off;
    if (i % 4 != 3) {
      len = 4096 * (1 + rng() % (kMaxLen / 4096));
      off = 4096 * (rng() % ((kSize - len) / 4096 + 1));
    } else {
      len = 1 + rng() % kMaxLen;
      off = rng() % (kSize - len + 1);
    }
    checks[b] = {off, len};
    std::uint8_t* dst = reinterpret_cast<std::uint8_t*>(buffers.data()) + b * kMaxLen;
    ASSERT_FALSE(q->pread(*f, dst, len, off, [&, b, dst](std::int64_t r) {
      const Check c = checks[b];
      if (r != static_cast<std::int64_t>(c.length)) {
        ADD_FAILURE() << "read of " << c.length << " at " << c.offset << " returned " << r;
        ++mismatches;
      } else {
        for (std::uint64_t k = 0; k < c.length; ++k)
          if (dst[k] != pattern_byte(c.offset + k)) {
            ADD_FAILURE() << "byte " << k << " of the read at " << c.offset << " differs";
            ++mismatches;
            break;
          }
      }
      ++done;
      free_bufs.push_back(b);
    }));
    q->reap(q->in_flight() < q->depth() ? 0 : 1);  // the ioqueue benchmark's loop
    ASSERT_EQ(mismatches, 0);
  }
  drain(*q);
  EXPECT_EQ(done, 3000);
  EXPECT_EQ(mismatches, 0);
}

TEST_P(IoQueueTest, WritesFsyncAndErrorsReachTheirCallbacks) {
  MAKE_QUEUE_OR_SKIP(q, 8);
  const std::string path = dir_.file("out");
  auto f = open(*q, path, Open::write | Open::create | Open::truncate);
  ASSERT_TRUE(f);
  std::vector<char> a(4096, 'a'), b(4096, 'b');
  std::int64_t ra = -1, rb = -1, rs = -1, rd = -1, rbad = 0;
  ASSERT_FALSE(q->pwrite(*f, a.data(), a.size(), 0, [&](std::int64_t r) { ra = r; }));
  ASSERT_FALSE(q->pwrite(*f, b.data(), b.size(), 4096, [&](std::int64_t r) { rb = r; }));
  drain(*q);
  ASSERT_FALSE(q->fsync(*f, [&](std::int64_t r) { rs = r; }));
  ASSERT_FALSE(q->fdatasync(*f, [&](std::int64_t r) { rd = r; }));
  // A read of a file opened write-only fails on its own callback, not at submission.
  std::vector<char> in(16);
  ASSERT_FALSE(q->pread(*f, in.data(), in.size(), 0, [&](std::int64_t r) { rbad = r; }));
  drain(*q);
  EXPECT_EQ(ra, 4096);
  EXPECT_EQ(rb, 4096);
  EXPECT_EQ(rs, 0);
  EXPECT_EQ(rd, 0);
  EXPECT_EQ(rbad, -EBADF);
  const auto data = read_whole_file(path);
  ASSERT_EQ(data.size(), 8192u);
  EXPECT_EQ(data[0], 'a');
  EXPECT_EQ(data[4095], 'a');
  EXPECT_EQ(data[4096], 'b');
  EXPECT_EQ(data[8191], 'b');
}

TEST_P(IoQueueTest, ACallbackMaySubmitEvenWhenTheQueueIsFull) {
  MAKE_QUEUE_OR_SKIP(q, 2);
  const std::string path = dir_.file("data");
  write_pattern_file(path, 1 << 16);
  auto f = open(*q, path, Open::read);
  ASSERT_TRUE(f);
  std::vector<char> buf(4 * 512);
  int chained = 0, followups = 0;
  IoQueue* qp = q.get();
  EngineFile* fp = f.get();
  for (int i = 0; i < 2; ++i) {
    ASSERT_FALSE(q->pread(*f, buf.data() + 512 * i, 512, 0, [&, qp, fp, i](std::int64_t) {
      // The queue was full (depth 2): the slot of this request is already free.
      std::error_code ec = qp->pread(*fp, buf.data() + 1024 + 512 * i, 512, 512, [&](std::int64_t r) {
        EXPECT_EQ(r, 512);
        ++followups;
      });
      EXPECT_FALSE(ec) << ec.message();
      if (!ec) ++chained;
    }));
  }
  drain(*q);
  EXPECT_EQ(chained, 2);
  EXPECT_EQ(followups, 2);
}

TEST_P(IoQueueTest, AThrowingCallbackLosesNoOtherCompletion) {
  MAKE_QUEUE_OR_SKIP(q, 8);
  const std::string path = dir_.file("data");
  write_pattern_file(path, 1 << 16);
  auto f = open(*q, path, Open::read);
  ASSERT_TRUE(f);
  std::vector<char> buf(8 * 512);
  int ran = 0, nested = -1;
  IoQueue* qp = q.get();
  for (int i = 0; i < 8; ++i) {
    ASSERT_FALSE(q->pread(*f, buf.data() + 512 * i, 512, 0, [&, i, qp](std::int64_t) {
      ++ran;
      if (i == 0) nested = static_cast<int>(qp->reap(0));  // nested reap: returns 0, harmless
      if (i == 3) throw std::runtime_error("callback 3");
    }));
  }
  int thrown = 0;
  for (int round = 0; q->in_flight() > 0 && round < 1000; ++round) {
    try {
      q->reap(1, std::chrono::seconds(10));
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "callback 3");
      ++thrown;
    }
  }
  EXPECT_EQ(thrown, 1);
  EXPECT_EQ(ran, 8);
  EXPECT_EQ(nested, 0);
  EXPECT_EQ(q->in_flight(), 0u);
}

TEST_P(IoQueueTest, FewerThreadsThanDepthAndSubmitBatchesWork) {
  // threads applies to the pool, submit_batch to the kernel queues; each is ignored by the other.
  MAKE_QUEUE_OR_SKIP(q, 16, /*threads=*/2, /*submit_batch=*/4);
  if (q->uses_thread_pool()) {
    EXPECT_EQ(q->threads(), 2u);
  } else {
    EXPECT_EQ(q->threads(), 0u);
  }
  const std::string path = dir_.file("data");
  write_pattern_file(path, 1 << 20);
  auto f = open(*q, path, Open::read);
  ASSERT_TRUE(f);
  std::vector<std::uint8_t> buf(16 * 4096);
  int ok = 0;
  for (int i = 0; i < 16; ++i)
    ASSERT_FALSE(q->pread(*f, buf.data() + 4096 * i, 4096, 65536u * i, [&, i](std::int64_t r) {
      if (r == 4096 && buf[4096 * i + 7] == pattern_byte(65536u * i + 7)) ++ok;
    }));
  EXPECT_EQ(q->reap(16), 16u);  // min == everything in flight: blocks until all ran
  EXPECT_EQ(ok, 16);
}

TEST_P(IoQueueTest, DestructorWaitsForRequestsInFlightWithoutRunningCallbacks) {
  const std::string backend = GetParam();
  EngineOptions eo;
  eo.depth = 16;
  auto made = make_engine(backend == "threads" ? "posix" : backend, eo);
  if (!made) GTEST_SKIP() << made.error().message;
  std::unique_ptr<Engine> engine = std::move(made.value());  // outlives the files and the queue
  // O_DIRECT where the scratch directory's file system allows it (reads that really wait for the
  // device); buffered reads elsewhere.
  const Open in_flags =
      test::direct_io_unsupported_reason(dir_.path()).empty() ? Open::read | Open::direct : Open::read;

  const std::string in_path = dir_.file("data");
  const std::string out_path = dir_.file("out");
  write_pattern_file(in_path, 1 << 20);
  auto in = engine->open(in_path, OpenMode(in_flags));
  auto out = engine->open(out_path, OpenMode(Open::write | Open::create | Open::truncate));
  ASSERT_TRUE(in.ok() && out.ok());
  auto counter = std::make_shared<int>(0);
  detail::AlignedBuffer wbuf(64 << 10, 4096);
  std::memset(wbuf.data(), 'w', wbuf.size());
  detail::AlignedBuffer rbufs(15 * (64 << 10), 4096);
  {
    IoQueueOptions qo;
    qo.depth = 16;
    IoQueue q(*engine, qo);  // borrowed engine: engine, files, queue; destroyed in reverse
    for (int i = 0; i < 15; ++i)
      ASSERT_FALSE(q.pread(*in.value(), rbufs.data() + i * (64 << 10), 64 << 10, 65536u * i,
                           [counter](std::int64_t) { ++*counter; }));
    ASSERT_FALSE(q.pwrite(*out.value(), wbuf.data(), wbuf.size(), 0, [counter](std::int64_t) { ++*counter; }));
    EXPECT_EQ(q.in_flight(), 16u);
  }  // waits for all 16; the callbacks are destroyed without running
  EXPECT_EQ(*counter, 0);
  EXPECT_EQ(counter.use_count(), 1) << "callbacks (and their captures) were not destroyed";
  EXPECT_EQ(engine->in_flight(), 0u);
  in.value().reset();
  out.value().reset();
  // The accepted write was carried out anyway.
  const auto data = read_whole_file(out_path);
  ASSERT_EQ(data.size(), wbuf.size());
  EXPECT_EQ(data[0], 'w');
  EXPECT_EQ(data.back(), 'w');
}

TEST_P(IoQueueTest, DiscardThenCloseFilesThenDestroyAnOwningQueue) {
  MAKE_QUEUE_OR_SKIP(q, 8);
  const std::string path = dir_.file("data");
  write_pattern_file(path, 1 << 20);
  auto f = open(*q, path, Open::read);
  ASSERT_TRUE(f);
  std::vector<char> buf(8 * 4096);
  int ran = 0;
  for (int i = 0; i < 8; ++i)
    ASSERT_FALSE(q->pread(*f, buf.data() + 4096 * i, 4096, 4096u * i, [&](std::int64_t) { ++ran; }));
  q->discard();
  EXPECT_EQ(q->in_flight(), 0u);
  EXPECT_EQ(q->reap(0), 0u);
  EXPECT_EQ(ran, 0);
  EXPECT_FALSE(q->engine().close(*f));
  f.reset();
  q.reset();  // the engine goes with the queue, after its files
}

INSTANTIATE_TEST_SUITE_P(Backends, IoQueueTest, ::testing::Values("uring", "libaio", "threads"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

TEST(IoQueueCreate, ByNameAndItsErrors) {
  auto unknown = IoQueue::create("no-such-engine");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().code, std::make_error_code(std::errc::invalid_argument));
  EXPECT_NE(unknown.error().message.find("no-such-engine"), std::string::npos) << unknown.error().message;

  IoQueueOptions zero;
  zero.depth = 0;
  auto bad_depth = IoQueue::create("posix", zero);
  ASSERT_FALSE(bad_depth.ok());
  EXPECT_NE(bad_depth.error().message.find("depth"), std::string::npos) << bad_depth.error().message;

  IoQueueOptions four;
  four.depth = 4;
  auto q = IoQueue::create("posix", four);
  ASSERT_TRUE(q.ok()) << q.error().message;
  EXPECT_TRUE(q.value()->uses_thread_pool());
  EXPECT_EQ(q.value()->threads(), 4u);  // threads default to depth
  EXPECT_EQ(q.value()->depth(), 4u);

  auto null_engine = make_engine("posix");
  ASSERT_TRUE(null_engine.ok());
  EXPECT_THROW(IoQueue(std::move(null_engine.value()), zero), std::invalid_argument);
  EXPECT_THROW(IoQueue(std::unique_ptr<Engine>()), std::invalid_argument);
}

TEST(IoQueueCreate, TakesAnAlreadyTypeErasedCallback) {
  ScratchDir dir;
  const std::string path = dir.file("data");
  write_pattern_file(path, 8192);
  auto q = IoQueue::create("posix");
  ASSERT_TRUE(q.ok()) << q.error().message;
  auto f = q.value()->engine().open(path, OpenMode(Open::read));
  ASSERT_TRUE(f.ok());
  std::int64_t got = 0;
  IoQueue::Callback cb([&got](std::int64_t r) { got = r; });
  std::vector<char> buf(100);
  ASSERT_FALSE(q.value()->pread(*f.value(), buf.data(), buf.size(), 10, std::move(cb)));
  EXPECT_EQ(q.value()->reap(1), 1u);
  EXPECT_EQ(got, 100);
  EXPECT_EQ(static_cast<std::uint8_t>(buf[0]), pattern_byte(10));
}

// ---------------------------------------------------------------------------------------------
// The inline callback type

struct Tracked {
  static inline int alive = 0;
  int* calls;
  explicit Tracked(int* c) : calls(c) { ++alive; }
  Tracked(Tracked&& o) noexcept : calls(o.calls) { ++alive; }
  Tracked(const Tracked& o) : calls(o.calls) { ++alive; }
  ~Tracked() { --alive; }
  void operator()(std::int64_t v) { *calls += static_cast<int>(v); }
};

TEST(InplaceFunction, StoresCallsMovesAndDestroysWithoutLeaking) {
  int calls = 0;
  {
    IoQueue::Callback f(Tracked{&calls});
    EXPECT_EQ(Tracked::alive, 1);
    EXPECT_TRUE(f);
    f(2);
    EXPECT_EQ(calls, 2);
    IoQueue::Callback g(std::move(f));
    EXPECT_FALSE(f);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
    EXPECT_EQ(Tracked::alive, 1);
    g(3);
    EXPECT_EQ(calls, 5);
    g.emplace([&calls](std::int64_t v) { calls -= static_cast<int>(v); });
    EXPECT_EQ(Tracked::alive, 0);  // the replaced callable was destroyed
    g(5);
    EXPECT_EQ(calls, 0);
    f = std::move(g);
    EXPECT_FALSE(g);  // NOLINT(bugprone-use-after-move)
    f.reset();
    EXPECT_FALSE(f);
  }
  EXPECT_EQ(Tracked::alive, 0);
}

TEST(InplaceFunction, HoldsMoveOnlyCallablesAndPlainFunctions) {
  auto owned = std::make_unique<int>(7);
  int seen = 0;
  IoQueue::Callback f([p = std::move(owned), &seen](std::int64_t v) { seen = *p + static_cast<int>(v); });
  f(1);
  EXPECT_EQ(seen, 8);
  static int plain_seen = 0;
  IoQueue::Callback g(+[](std::int64_t v) { plain_seen = static_cast<int>(v); });
  g(42);
  EXPECT_EQ(plain_seen, 42);
  static_assert(IoQueue::kCallbackCapacity >= 6 * sizeof(void*), "room for a few captured pointers");
}

}  // namespace
}  // namespace tai
