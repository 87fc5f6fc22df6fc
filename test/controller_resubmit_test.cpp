// A program that keeps a queue depth through the controller: it resubmits on completion, waiting
// in a CompletionQueue. Covers what serves that pattern:
//  * ControllerOptions::engine_submit_batch: asynchronous engines get at most that many requests
//    per submit() call, and every read still lands, whatever the batch (one body, run over the
//    kernel queues and batch sizes);
//  * a worker defers a sleeping CompletionQueue consumer's wake-up to a point of its part; the
//    consumer may destroy the queue as soon as it has its tag, so the queue must outlive the
//    deferred wake-up (the destructor waits for it).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "support/controller_support.hpp"
#include "support/test_env.hpp"
#include "tai/tai.hpp"

namespace tai::test {
namespace {

struct Config {
  const char* engine;
  unsigned batch;
};

std::string config_name(const testing::TestParamInfo<Config>& info) {
  return std::string(info.param.engine) + "_batch" + std::to_string(info.param.batch);
}

class ControllerResubmit : public testing::TestWithParam<Config> {};

// depth reads in flight over a file of known content, each resubmitted as its tag comes back,
// every read's data checked; then the count of submit calls against the batch bound.
TEST_P(ControllerResubmit, KeepsTheDepthAndEveryReadLands) {
  const Config cfg = GetParam();
  TAI_SKIP_UNLESS_ENGINE_AVAILABLE(cfg.engine);
  constexpr std::size_t kBlock = 4096, kBlocks = 256, kDepth = 32, kReads = 1000;
  ScratchDir dir;
  const std::string path = dir.file("depth");
  const std::vector<unsigned char> content = pattern(kBlock * kBlocks, 7);
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(content.data(), 1, content.size(), f), content.size());
    std::fclose(f);
  }
  ControllerOptions o;
  o.workers = 2;
  o.engine_submit_batch = cfg.batch;
  Controller ctl(o);
  File file = open_or_fail<BTreeTrivial>(ctl, path, Open::read, cfg.engine);
  ASSERT_TRUE(file.is_open());

  CompletionQueue done(kDepth);
  std::vector<unsigned char> buffers(kBlock * kDepth);
  std::vector<std::uint64_t> block_of(kDepth);
  std::vector<Receipt> slots(kDepth);
  std::mt19937_64 rng(cfg.batch);
  auto issue = [&](std::size_t s) {
    block_of[s] = rng() % kBlocks;
    std::memset(&buffers[s * kBlock], 0, kBlock);
    slots[s] = file.read(block_of[s] * kBlock, &buffers[s * kBlock], kBlock);
    ASSERT_TRUE(slots[s].then(done.post(s)));
  };
  for (std::size_t s = 0; s < kDepth; ++s) issue(s);
  std::size_t issued = kDepth, finished = 0;
  std::vector<std::uint64_t> tags(kDepth);
  while (finished < kReads) {
    const std::size_t k = done.pop(tags.data(), kDepth, 1, 30'000'000'000);
    ASSERT_GT(k, 0u) << "no read finished within 30 s; " << finished << " done";
    for (std::size_t i = 0; i < k; ++i) {
      const std::size_t s = tags[i];
      ASSERT_TRUE(slots[s].ok()) << slots[s].message();
      ASSERT_EQ(slots[s].bytes(), static_cast<std::int64_t>(kBlock));
      ASSERT_EQ(std::memcmp(&buffers[s * kBlock], &content[block_of[s] * kBlock], kBlock), 0)
          << "read of block " << block_of[s] << " returned other data";
      ++finished;
      if (issued < kReads) {
        issue(s);
        ++issued;
      }
    }
  }
  const ControllerStats st = ctl.stats();
  EXPECT_EQ(st.engine_reads, kReads);
  // Each call hands over at most `batch` requests, so at least reads / batch calls were made.
  EXPECT_GE(st.engine_submit_calls, (kReads + cfg.batch - 1) / cfg.batch);
  if (cfg.batch == 1) {
    EXPECT_EQ(st.engine_submit_calls, kReads) << "one call per read";
  }
  EXPECT_LE(st.engine_submit_calls, kReads);
}

INSTANTIATE_TEST_SUITE_P(KernelQueues, ControllerResubmit,
                         testing::Values(Config{"uring", 1}, Config{"uring", 4}, Config{"uring", 64},
                                         Config{"libaio", 1}, Config{"libaio", 4}, Config{"libaio", 64}),
                         config_name);

// The consumer destroys its queue right after it has its tag. Its waits are short (a timeout
// shorter than the task), so it often returns after the worker took its `sleeping` flag and
// before the worker's deferred wake-up ran: that wake-up must find the queue alive (ASan reports
// the use after free otherwise).
TEST(CompletionQueueLifetime, DestroyedRightAfterItsLastTagWhileAWakeUpIsDeferred) {
  ControllerOptions o;
  o.workers = 2;
  Controller ctl(o);
  const int rounds = 3000;
  for (int i = 0; i < rounds; ++i) {
    auto cq = std::make_unique<CompletionQueue>(4);
    // Longer than the queue's spin, so that the consumer is asleep (or timing out) when the
    // worker posts; varied, so that the post meets every point of the consumer's wait.
    const auto busy = std::chrono::nanoseconds(5'000 + (i % 8) * 5'000);
    Receipt r = ctl.submit([busy] {
      const auto until = std::chrono::steady_clock::now() + busy;
      while (std::chrono::steady_clock::now() < until) {
      }
    });
    ASSERT_TRUE(r.then(cq->post(1)));
    std::uint64_t tag = 0;
    std::size_t got = 0;
    for (int tries = 0; got == 0 && tries < 10'000'000; ++tries) got = cq->pop(&tag, 1, 1, 7'000);
    ASSERT_EQ(got, 1u);
    ASSERT_EQ(tag, 1u);
    cq.reset();  // at once: the worker may still be inside push() or holding a deferred wake-up
    ASSERT_TRUE(r.ok()) << r.message();
  }
}

// A task (unlike a continuation) may block: one that posts to a CompletionQueue and then waits
// for the consumer's answer must find the consumer woken at the post, not after the task
// returns (which would never come).
TEST(CompletionQueueFromTask, APostFromATaskWakesTheConsumerAtOnce) {
  ControllerOptions o;
  o.workers = 2;
  Controller ctl(o);
  CompletionQueue cq(4);
  std::atomic<bool> answered{false};
  std::thread consumer([&] {
    std::uint64_t tag = 0;
    if (cq.pop(&tag, 1, 1, 20'000'000'000) == 1 && tag == 7) answered.store(true);
  });
  Receipt r = ctl.submit([&] {
    // Long enough for the consumer to have stopped spinning and gone to sleep.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    cq.push(7);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!answered.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  });
  ASSERT_TRUE(wait_ok(r));
  EXPECT_TRUE(answered.load()) << "the consumer was not woken while the posting task ran";
  consumer.join();
}

}  // namespace
}  // namespace tai::test
