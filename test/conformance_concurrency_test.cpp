// Engine conformance suite, part 2: concurrency and the random model (see
// engine_conformance_test.cpp for the configurations and the rules).
//  * several threads at once, each with its own engine and file (submit/reap belong to one
//    thread per engine);
//  * SyncEngine::execute from several threads on one engine, on one shared file and on files of
//    their own;
//  * 10,000 random reads, writes and syncs checked against an in-memory model, several in flight
//    at once (never overlapping: requests in flight have no order among themselves).
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>

#include "support/engine_configs.hpp"

namespace tai::test {
namespace {

constexpr std::uint64_t KiB = 1024;
constexpr std::uint64_t MiB = 1024 * KiB;

class EngineConcurrency : public EngineTest {};

// ---------------------------------------------------------------------------------------------

TEST_P(EngineConcurrency, ThreadsWithTheirOwnEnginesOnDifferentFiles) {
  constexpr int kThreads = 4;
  constexpr std::size_t kChunk = 32 * KiB + 7;  // unaligned: bounced on direct files
  constexpr std::size_t kChunks = 48;
  constexpr std::size_t kBatch = 8;
  const bool data = stores_data();
  std::vector<std::string> paths;
  for (int t = 0; t < kThreads; ++t) paths.push_back(scratch_.file("thread" + std::to_string(t)));
  std::vector<std::vector<std::uint8_t>> expected(kThreads);

  auto body = [&](int t) {
    auto made = make_config_engine(config());
    if (!made) {
      ADD_FAILURE() << "thread " << t << ": " << made.error().message;
      return;
    }
    Engine& e = *made.value();
    auto opened = e.open(paths[t], with_config(Open::read | Open::write | Open::create | Open::truncate));
    if (!opened) {
      ADD_FAILURE() << "thread " << t << ": " << opened.error().message;
      return;
    }
    EngineFile* f = opened.value().get();
    const std::uint64_t seed = 5000 + static_cast<std::uint64_t>(t);
    const std::uint64_t base = 1;  // every chunk starts off alignment
    TestBuffer out(kChunks * kChunk), in(kChunks * kChunk);
    fill_pattern(out.at(), base, kChunks * kChunk, seed);
    for (std::size_t first = 0; first < kChunks; first += kBatch) {
      std::vector<Request> batch;
      for (std::size_t k = first; k < first + kBatch; ++k)
        batch.push_back(make_request(Op::write, f, out.at() + k * kChunk, base + k * kChunk, kChunk, k));
      for (const Completion& c : run_requests(e, batch))
        EXPECT_EQ(c.result, static_cast<std::int64_t>(kChunk)) << "thread " << t << " write user_data " << c.user_data;
    }
    EXPECT_EQ(run_one(e, make_request(Op::fsync, f, nullptr, 0, 0, 999)).result, 0) << "thread " << t << " fsync";
    for (std::size_t first = 0; first < kChunks; first += kBatch) {
      std::vector<Request> batch;
      for (std::size_t k = first; k < first + kBatch; ++k)
        batch.push_back(make_request(Op::read, f, in.at() + k * kChunk, base + k * kChunk, kChunk, k));
      for (const Completion& c : run_requests(e, batch))
        EXPECT_EQ(c.result, static_cast<std::int64_t>(kChunk)) << "thread " << t << " read user_data " << c.user_data;
    }
    if (data) { EXPECT_EQ(mismatch(in.at(), out.at(), kChunks * kChunk, base), "") << "thread " << t; }
    EXPECT_EQ(e.close(*f), std::error_code()) << "thread " << t;
    expected[t].assign(base, 0);
    expected[t].insert(expected[t].end(), out.at(), out.at() + kChunks * kChunk);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(body, t);
  for (auto& th : threads) th.join();
  if (!data) GTEST_SKIP() << kNoData << " (counts were checked)";
  for (int t = 0; t < kThreads; ++t) expect_file_equals(paths[t], expected[t], "thread " + std::to_string(t) + ": ");
}

// SyncEngine::execute is thread-safe: threads write neighbouring unaligned regions of one file
// (on a direct file their edge blocks are shared, so read-modify-writes race), and files of
// their own, through the same engine.
TEST_P(EngineConcurrency, SyncExecuteFromSeveralThreadsOnOneEngine) {
  auto* sync = dynamic_cast<SyncEngine*>(&engine());
  if (!sync) GTEST_SKIP() << "engine '" << engine().name() << "' is not a SyncEngine: execute() does not apply";
  constexpr int kThreads = 4;
  constexpr std::size_t kRegion = 256 * KiB + 3;
  constexpr std::size_t kPiece = 10000;
  const bool data = stores_data();
  const std::string shared_path = scratch_.file("shared");
  auto shared = create_file(shared_path);
  ASSERT_TRUE(shared);
  std::vector<std::string> own_paths;
  std::vector<std::unique_ptr<EngineFile>> own;
  for (int t = 0; t < kThreads; ++t) {
    own_paths.push_back(scratch_.file("own" + std::to_string(t)));
    own.push_back(create_file(own_paths.back()));
    ASSERT_TRUE(own.back());
  }
  const std::uint64_t seed = 6000;
  const std::uint64_t base = 1;
  // The shared file's contents: one pattern, each thread writes its own region of it.
  TestBuffer whole(kThreads * kRegion);
  fill_pattern(whole.at(), base, kThreads * kRegion, seed);

  auto body = [&](int t) {
    const std::uint64_t start = base + static_cast<std::uint64_t>(t) * kRegion;
    std::uint8_t* src = whole.at() + static_cast<std::size_t>(t) * kRegion;
    TestBuffer back(kRegion);
    for (std::size_t done = 0; done < kRegion; done += kPiece) {
      const std::size_t n = std::min(kPiece, kRegion - done);
      Completion c = sync->execute(make_request(Op::write, shared.get(), src + done, start + done, n, done));
      EXPECT_EQ(c.user_data, done);
      EXPECT_EQ(c.result, static_cast<std::int64_t>(n)) << "thread " << t << " shared write at " << start + done;
      Completion o = sync->execute(make_request(Op::write, own[t].get(), src + done, done, n, done));
      EXPECT_EQ(o.result, static_cast<std::int64_t>(n)) << "thread " << t << " own write at " << done;
    }
    EXPECT_EQ(sync->execute(make_request(Op::fdatasync, own[t].get(), nullptr, 0, 0, 1)).result, 0);
    Completion r = sync->execute(make_request(Op::read, shared.get(), back.at(1), start, kRegion, 2));
    EXPECT_EQ(r.result, static_cast<std::int64_t>(kRegion)) << "thread " << t << " read back";
    if (data) { EXPECT_EQ(mismatch(back.at(1), src, kRegion, start), "") << "thread " << t << " read back"; }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(body, t);
  for (auto& th : threads) th.join();
  EXPECT_EQ(sync->execute(make_request(Op::fsync, shared.get(), nullptr, 0, 0, 3)).result, 0);
  if (!data) GTEST_SKIP() << kNoData << " (counts were checked)";

  std::vector<std::uint8_t> model(base, 0);
  model.insert(model.end(), whole.at(), whole.at() + kThreads * kRegion);
  expect_file_equals(shared_path, model, "shared file: ");
  for (int t = 0; t < kThreads; ++t) {
    const std::uint8_t* src = whole.at() + static_cast<std::size_t>(t) * kRegion;
    expect_file_equals(own_paths[t], std::vector<std::uint8_t>(src, src + kRegion), "own file " + std::to_string(t) + ": ");
  }
}

// ---------------------------------------------------------------------------------------------
// 10,000 random operations against an in-memory model

/// One request in flight in the random test, with what it must return.
struct InFlight {
  Request request;
  std::unique_ptr<TestBuffer> buffer;
  std::uint64_t lo = 0, hi = 0;         // bytes whose outcome depends on this request
  bool writes = false;
  std::vector<std::uint8_t> expected;   // reads: the bytes it must return
  std::size_t op_index = 0;
};

constexpr std::uint64_t kUnbounded = ~0ull;

bool overlaps(std::uint64_t a0, std::uint64_t a1, std::uint64_t b0, std::uint64_t b1) { return a0 < b1 && b0 < a1; }

TEST_P(EngineConcurrency, TenThousandRandomOperationsMatchAModel) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (replay with TAI_TEST_SEED=" << seed << ")");
  std::mt19937_64 rng(seed);
  auto uniform = [&](std::uint64_t lo, std::uint64_t hi) {  // [lo, hi]
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  };
  constexpr int kOps = 10000;
  constexpr std::uint64_t kSpan = 4 * MiB;
  const bool data = stores_data();
  const std::size_t max_in_flight = asynchronous() ? 16 : 4;

  const std::string path = scratch_.file("random");
  auto f = create_file(path);
  ASSERT_TRUE(f);
  std::vector<std::uint8_t> model;
  std::vector<InFlight> flight;
  std::vector<Completion> out(64);
  bool failed = false;
  // TAI_TEST_TRACE=1 prints every submission and completion (to replay a failing seed).
  const bool trace = std::getenv("TAI_TEST_TRACE") != nullptr;

  // Collects at least one completion and checks it against what the model said at submission.
  auto reap_some = [&](std::size_t min) {
    const std::size_t n = engine().reap(out.data(), out.size(), min, kCompletionTimeout);
    if (n < min) {
      ADD_FAILURE() << "no completion within " << kCompletionTimeout.count() << " s with " << flight.size()
                    << " requests in flight";
      failed = true;
      return false;
    }
    for (std::size_t k = 0; k < n; ++k) {
      const Completion& c = out[k];
      auto it = std::find_if(flight.begin(), flight.end(),
                             [&](const InFlight& x) { return x.request.user_data == c.user_data; });
      if (it == flight.end()) {
        ADD_FAILURE() << "completion with unknown user_data " << c.user_data;
        failed = true;
        continue;
      }
      const Request& r = it->request;
      if (trace) std::printf("complete op %zu user_data %llu result %lld\n", it->op_index,
                             static_cast<unsigned long long>(c.user_data), static_cast<long long>(c.result));
      std::int64_t want = 0;
      if (r.op == Op::write) want = static_cast<std::int64_t>(r.length);
      if (r.op == Op::read) want = static_cast<std::int64_t>(data ? it->expected.size() : r.length);
      if (c.result != want) {
        ADD_FAILURE() << "operation " << it->op_index << " (" << describe(r) << "): result " << result_text(c.result)
                      << ", expected " << result_text(want);
        failed = true;
      } else if (data && r.op == Op::read) {
        std::string diff = mismatch(static_cast<const std::uint8_t*>(r.buffer), it->expected.data(),
                                    it->expected.size(), r.offset);
        if (!diff.empty()) {
          ADD_FAILURE() << "operation " << it->op_index << " (" << describe(r) << "): " << diff;
          failed = true;
        }
      }
      *it = std::move(flight.back());
      flight.pop_back();
    }
    return true;
  };

  std::vector<InFlight> batch;  // generated, not yet submitted
  auto submit_batch = [&]() {
    std::vector<Request> requests;
    for (auto& b : batch) {
      requests.push_back(b.request);
      if (trace) std::printf("submit op %zu %s (file size %zu)\n", b.op_index, describe(b.request).c_str(), model.size());
    }
    if (trace) std::printf("-- submit batch of %zu with %zu in flight\n", requests.size(), flight.size());
    std::size_t at = 0;
    while (at < requests.size()) {
      const std::size_t took = engine().submit(requests.data() + at, requests.size() - at);
      for (std::size_t k = at; k < at + took; ++k) flight.push_back(std::move(batch[k]));
      at += took;
      if (at < requests.size() && !reap_some(1)) break;
    }
    batch.clear();
  };
  auto conflicts = [&](const std::vector<InFlight>& set, const InFlight& x) {
    for (const auto& y : set)
      if ((x.writes || y.writes) && overlaps(x.lo, x.hi, y.lo, y.hi)) return true;
    return false;
  };

  std::uint64_t next_tag = 1;
  for (int i = 0; i < kOps && !failed; ++i) {
    InFlight op;
    op.op_index = static_cast<std::size_t>(i);
    const std::uint64_t kind = uniform(0, 99);
    if (kind < 1 || (kind < 2 && uniform(0, 1) == 0)) {  // 1.5 %: occasional syncs
      op.request = make_request(kind < 1 ? Op::fsync : Op::fdatasync, f.get(), nullptr, 0, 0, next_tag++);
      op.lo = op.hi = 0;  // orders nothing: overlaps no range
    } else {
      // Mostly small, some medium, a few large; one in eight aligned (no bouncing on direct).
      const std::uint64_t size_class = uniform(0, 99);
      std::size_t length = size_class < 70   ? uniform(1, 4096)
                           : size_class < 95 ? uniform(4097, 64 * KiB)
                                             : uniform(64 * KiB + 1, 256 * KiB);
      std::uint64_t offset = uniform(0, kSpan - length);
      std::size_t misalign = uniform(0, 3) == 0 ? 0 : uniform(1, 15);
      if (uniform(0, 7) == 0) {
        length = (length + 4095) / 4096 * 4096;
        offset = offset / 4096 * 4096;
        misalign = 0;
      }
      const bool is_write = kind < 52;
      op.buffer = std::make_unique<TestBuffer>(length + 16);
      std::uint8_t* buf = op.buffer->at(misalign);
      op.request = make_request(is_write ? Op::write : Op::read, f.get(), buf, offset, length, next_tag++);
      op.writes = is_write;
      const std::uint64_t end = offset + length;
      if (is_write) {
        fill_pattern(buf, offset, length, seed ^ static_cast<std::uint64_t>(i));
        // A write past the end also decides the hole before it.
        op.lo = std::min<std::uint64_t>(offset, model.size());
        op.hi = end;
      } else {
        op.lo = offset;
        // A read reaching the end of file depends on every write that may move that end.
        op.hi = end <= model.size() ? end : kUnbounded;
      }
    }
    // Requests in flight have no order among themselves: keep conflicting ones apart.
    if (conflicts(batch, op)) submit_batch();
    while (!failed && conflicts(flight, op)) reap_some(1);
    while (!failed && flight.size() + batch.size() >= max_in_flight) {
      if (!batch.empty()) submit_batch();
      if (flight.size() + batch.size() >= max_in_flight) reap_some(1);
    }
    if (failed) break;
    // The model changes at submission; a read's answer is fixed now (nothing overlapping it
    // is in flight).
    if (op.request.op == Op::write) {
      model_write(model, op.request.offset, static_cast<const std::uint8_t*>(op.request.buffer), op.request.length);
    } else if (op.request.op == Op::read) {
      op.expected = model_read(model, op.request.offset, op.request.length);
    }
    batch.push_back(std::move(op));
    if (batch.size() >= uniform(1, 8)) submit_batch();
  }
  if (!batch.empty()) submit_batch();
  while (!flight.empty() && !failed) reap_some(1);
  if (failed) {
    // Let what is still in flight finish before its buffers go away.
    std::size_t n = 0;
    while (!flight.empty() && (n = engine().reap(out.data(), out.size(), 1, kCompletionTimeout)) > 0) {
      for (std::size_t k = 0; k < n; ++k) {
        const Completion& c = out[k];
        auto it = std::find_if(flight.begin(), flight.end(),
                               [&](const InFlight& x) { return x.request.user_data == c.user_data; });
        if (it != flight.end()) {
          *it = std::move(flight.back());
          flight.pop_back();
        }
      }
    }
    return;
  }
  EXPECT_EQ(run_one(engine(), make_request(Op::fsync, f.get(), nullptr, 0, 0, next_tag++)).result, 0);
  if (!data) GTEST_SKIP() << kNoData << " (counts were checked)";
  expect_file_equals(path, model, "after 10,000 operations: ");
}

TAI_INSTANTIATE_ENGINE_CONFIGS(EngineConcurrency);

}  // namespace
}  // namespace tai::test
