// The recording engine (engines/recording): it passes every request to the inner engine
// unchanged and logs open, close and every native request with its submit and completion
// sequence numbers and result, in order; over posix, null and (when the kernel has it) uring.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engines/null/null_engine.hpp"
#include "engines/posix/posix_engine.hpp"
#include "engines/recording/recording_engine.hpp"
#include "support/engine_configs.hpp"
#include "support/test_env.hpp"
#include "tai/engine_selector.hpp"

namespace tai::test {
namespace {

using engines::RecordEntry;
using engines::RecordingEngine;

class RecordingOver : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    rec_ = make();
    if (!rec_) GTEST_SKIP() << skip_reason_;
  }

  std::unique_ptr<RecordingEngine> make() {
    std::unique_ptr<Engine> inner;
    if (GetParam() == "posix") {
      inner = engines::make_posix({});
    } else if (GetParam() == "null") {
      inner = engines::make_null({});
    } else {
      auto e = make_engine(GetParam());
      if (!e.ok()) {
        skip_reason_ = e.error().message;
        return nullptr;
      }
      inner = std::move(e.value());
    }
    return engines::make_recording(std::move(inner));
  }

  bool stores_data() const { return GetParam() != "null"; }

  std::unique_ptr<EngineFile> create(const std::string& name, Open extra = Open::none) {
    auto f = rec_->open(scratch_.file(name), Open::read | Open::write | Open::create | Open::truncate | extra);
    EXPECT_TRUE(f.ok()) << (f.ok() ? "" : f.error().message);
    return f.ok() ? std::move(f.value()) : nullptr;
  }

  /// The request entries of the log.
  std::vector<RecordEntry> requests() const {
    std::vector<RecordEntry> out;
    for (auto& e : rec_->snapshot())
      if (e.kind == RecordEntry::Kind::request) out.push_back(e);
    return out;
  }

  ScratchDir scratch_;
  std::unique_ptr<RecordingEngine> rec_;
  std::string skip_reason_;
};

INSTANTIATE_TEST_SUITE_P(Inner, RecordingOver, ::testing::Values("posix", "null", "uring"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST_P(RecordingOver, IsTheInnerEngineWithTheSameCapabilities) {
  EXPECT_EQ(rec_->name(), "recording(" + GetParam() + ")");
  EXPECT_EQ(rec_->capabilities().asynchronous, rec_->inner().capabilities().asynchronous);
  EXPECT_EQ(rec_->capabilities().stores_data, rec_->inner().capabilities().stores_data);
  EXPECT_EQ(rec_->capabilities().direct_io, rec_->inner().capabilities().direct_io);
  EXPECT_EQ(rec_->eventfd(), rec_->inner().eventfd());
  auto f = create("same");
  ASSERT_TRUE(f);
  EXPECT_TRUE(rec_->owns(*f));
  std::vector<std::uint8_t> data = pattern(0, 10000, 7), back(10000, 0xEE);
  // One at a time: an asynchronous engine runs the requests of one batch in any order.
  EXPECT_EQ(run_one(*rec_, make_request(Op::write, f.get(), data.data(), 0, data.size(), 1)).result, 10000);
  EXPECT_EQ(run_one(*rec_, make_request(Op::fsync, f.get(), nullptr, 0, 0, 2)).result, 0);
  EXPECT_EQ(run_one(*rec_, make_request(Op::read, f.get(), back.data(), 0, back.size(), 3)).result, 10000);
  if (stores_data()) {
    EXPECT_EQ(mismatch(back.data(), data.data(), data.size()), "");
  }
  EXPECT_FALSE(rec_->close(*f));
}

// One request at a time: the log holds open, each request, close, in that order, with the
// right paths, offsets, lengths, results, and seqs that grow with time.
TEST_P(RecordingOver, LogsEveryCallInOrderWithItsSeqs) {
  const std::uint64_t start = rec_->now();
  auto f = create("log");
  ASSERT_TRUE(f);
  const std::string path = scratch_.file("log");
  std::vector<std::uint8_t> data = pattern(0, 8192, 3), back(8192);
  struct Want {
    Op op;
    std::uint64_t offset, length;
    std::int64_t result;
  };
  const std::vector<Want> wants = {{Op::write, 0, 8192, 8192},   {Op::fsync, 0, 0, 0},
                                   {Op::write, 100, 300, 300},   {Op::read, 4096, 4096, 4096},
                                   {Op::fdatasync, 0, 0, 0},     {Op::read, 0, 8192, 8192}};
  std::vector<std::uint64_t> after;  // now() after each request completed
  std::uint64_t ud = 10;
  for (const Want& w : wants) {
    void* buf = w.op == Op::write ? static_cast<void*>(data.data()) : static_cast<void*>(back.data());
    const Completion c = run_one(*rec_, make_request(w.op, f.get(), w.op == Op::fsync || w.op == Op::fdatasync ? nullptr : buf,
                                                     w.offset, w.length, ud++));
    EXPECT_EQ(c.result, w.result) << to_string(w.op);
    after.push_back(rec_->now());
  }
  ASSERT_FALSE(rec_->close(*f));
  const std::uint64_t end = rec_->now();

  const auto log = rec_->snapshot();
  ASSERT_EQ(log.size(), wants.size() + 2) << "open + requests + close";
  EXPECT_EQ(log.front().kind, RecordEntry::Kind::open);
  EXPECT_EQ(log.back().kind, RecordEntry::Kind::close);
  EXPECT_EQ(log.front().path, path);
  EXPECT_EQ(log.back().path, path);
  EXPECT_FALSE(log.front().error);
  EXPECT_FALSE(log.back().error);
  const std::uint64_t id = log.front().file_id;
  EXPECT_NE(id, 0u);
  EXPECT_EQ(log.back().file_id, id);
  std::uint64_t previous = start;
  for (std::size_t i = 0; i < log.size(); ++i) {
    const RecordEntry& e = log[i];
    SCOPED_TRACE(e.to_string());
    EXPECT_GE(e.submit_seq, previous) << "seqs grow along the log";
    EXPECT_GT(e.complete_seq, e.submit_seq);
    EXPECT_LT(e.complete_seq, end);
    previous = std::max(e.complete_seq, e.reap_seq);
    if (e.kind != RecordEntry::Kind::request) continue;
    const Want& w = wants[i - 1];
    EXPECT_EQ(e.op, w.op);
    EXPECT_EQ(e.file_id, id);
    EXPECT_EQ(e.path, path);
    EXPECT_EQ(e.offset, w.offset);
    EXPECT_EQ(e.length, w.length);
    EXPECT_EQ(e.result, w.result);
    EXPECT_TRUE(e.reaped());
    EXPECT_GE(e.reap_seq, e.complete_seq);
    EXPECT_TRUE(e.complete_ok());
    EXPECT_LT(e.reap_seq, after[i - 1]) << "completed before now() returned after it";
    if (i >= 2) {
      EXPECT_GE(e.submit_seq, after[i - 2]) << "submitted after the previous one was observed done";
    }
    EXPECT_TRUE(e.data.empty()) << "data recording is off by default";
  }
}

// On a synchronous engine a batch runs in order inside submit(): the log shows each request
// completing before the next one is submitted. On an asynchronous engine the whole batch is
// submitted before anything completes.
TEST_P(RecordingOver, BatchCompletionOrderFollowsTheEngineKind) {
  auto f = create("batch");
  ASSERT_TRUE(f);
  std::vector<std::uint8_t> data = pattern(0, 4096, 5);
  auto c = run_requests(*rec_, {make_request(Op::write, f.get(), data.data(), 0, 4096, 1),
                                make_request(Op::write, f.get(), data.data(), 4096, 4096, 2),
                                make_request(Op::fdatasync, f.get(), nullptr, 0, 0, 3)});
  for (const Completion& x : c) EXPECT_GE(x.result, 0);
  const auto r = requests();
  ASSERT_EQ(r.size(), 3u);
  if (rec_->capabilities().asynchronous) {
    EXPECT_LT(r[2].submit_seq, r[0].complete_seq) << "the batch reached the kernel as one";
  } else {
    EXPECT_LT(r[0].complete_seq, r[1].submit_seq);
    EXPECT_LT(r[1].complete_seq, r[2].submit_seq);
    EXPECT_LT(r[2].complete_seq, r[2].reap_seq) << "a synchronous transfer is logged done when it returns";
  }
}

TEST_P(RecordingOver, RecordsWriteDataWhenAsked) {
  auto f = create("data");
  ASSERT_TRUE(f);
  std::vector<std::uint8_t> one = pattern(0, 5000, 1), two = pattern(0, 700, 2);
  ASSERT_EQ(run_one(*rec_, make_request(Op::write, f.get(), one.data(), 0, one.size(), 1)).result, 5000);
  rec_->set_record_data(true);
  ASSERT_EQ(run_one(*rec_, make_request(Op::write, f.get(), two.data(), 123, two.size(), 2)).result, 700);
  const auto r = requests();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_TRUE(r[0].data.empty());
  ASSERT_EQ(r[1].data.size(), 700u);
  EXPECT_EQ(std::memcmp(r[1].data.data(), two.data(), 700), 0);
}

// Requests the base completes itself never reach the engine and are not logged; a short native
// read that the base continues is logged as the two native reads it is.
TEST_P(RecordingOver, LogsNativeRequestsOnly) {
  auto f = create("native");
  ASSERT_TRUE(f);
  std::vector<std::uint8_t> data = pattern(0, 4096, 9), back(10000);
  ASSERT_EQ(run_one(*rec_, make_request(Op::write, f.get(), data.data(), 0, 4096, 1)).result, 4096);
  EXPECT_EQ(run_one(*rec_, make_request(Op::write, f.get(), data.data(), 0, 0, 2)).result, 0);
  EXPECT_EQ(run_one(*rec_, make_request(Op::write, nullptr, data.data(), 0, 10, 3)).result, -EBADF);
  EXPECT_EQ(requests().size(), 1u) << "zero-length and invalid requests never reach the engine";

  const Completion c = run_one(*rec_, make_request(Op::read, f.get(), back.data(), 0, back.size(), 4));
  const auto r = requests();
  if (!stores_data()) {
    EXPECT_EQ(c.result, 10000) << "null has no end of file";
    EXPECT_EQ(r.size(), 2u);
    return;
  }
  EXPECT_EQ(c.result, 4096);
  ASSERT_EQ(r.size(), 3u) << "the short read and its continuation";
  EXPECT_EQ(r[1].op, Op::read);
  EXPECT_EQ(r[1].offset, 0u);
  EXPECT_EQ(r[1].length, 10000u);
  EXPECT_EQ(r[1].result, 4096);
  EXPECT_FALSE(r[1].complete_ok()) << "short";
  EXPECT_EQ(r[2].offset, 4096u);
  EXPECT_EQ(r[2].length, 10000u - 4096u);
  EXPECT_EQ(r[2].result, 0) << "end of file";
}

TEST_P(RecordingOver, FileIdsTellReopensApartAndFailedOpensAreLogged) {
  const std::string path = scratch_.file("ids");
  auto a = create("ids");
  ASSERT_TRUE(a);
  ASSERT_FALSE(rec_->close(*a));
  a.reset();
  auto b = rec_->open(path, Open::read | Open::write);
  ASSERT_TRUE(b.ok()) << b.error().message;
  std::vector<std::uint8_t> data = pattern(0, 100, 1);
  ASSERT_EQ(run_one(*rec_, make_request(Op::write, b.value().get(), data.data(), 0, 100, 1)).result, 100);
  auto bad = rec_->open(scratch_.file("no/such/dir/x"), Open::read);
  const auto log = rec_->snapshot();
  std::vector<std::uint64_t> opened;
  for (const auto& e : log)
    if (e.kind == RecordEntry::Kind::open && !e.error && e.path == path) opened.push_back(e.file_id);
  ASSERT_EQ(opened.size(), 2u);
  EXPECT_NE(opened[0], opened[1]) << "a reopen of the same path is another file";
  const auto r = requests();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].file_id, opened[1]);
  if (!bad.ok()) {  // null opens any path
    ASSERT_EQ(log.back().kind, RecordEntry::Kind::open);
    EXPECT_TRUE(log.back().error);
    EXPECT_EQ(log.back().file_id, 0u);
  }
  EXPECT_FALSE(rec_->close(*b.value()));
}

TEST_P(RecordingOver, ClearForgetsTheLogButNotTheCounter) {
  auto f = create("clear");
  ASSERT_TRUE(f);
  std::vector<std::uint8_t> data = pattern(0, 100, 1);
  ASSERT_EQ(run_one(*rec_, make_request(Op::write, f.get(), data.data(), 0, 100, 1)).result, 100);
  const std::uint64_t before = rec_->now();
  rec_->clear();
  EXPECT_EQ(rec_->size(), 0u);
  ASSERT_EQ(run_one(*rec_, make_request(Op::fsync, f.get(), nullptr, 0, 0, 2)).result, 0);
  const auto r = requests();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].op, Op::fsync);
  EXPECT_GE(r[0].submit_seq, before);
  EXPECT_EQ(r[0].file_id, 1u) << "file ids survive clear()";
}

// A submitting thread, threads reading the log and opening/closing other files at the same
// time: every request is logged once, with consistent seqs (run it under TSan).
TEST_P(RecordingOver, IsSafeToReadWhileRequestsRun) {
  auto f = create("threads");
  ASSERT_TRUE(f);
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&, t] {
      std::uint64_t last_now = 0;
      int k = 0;
      while (!stop.load(std::memory_order_acquire)) {
        const std::uint64_t n = rec_->now();
        EXPECT_GE(n, last_now);
        last_now = n;
        for (const auto& e : rec_->snapshot()) EXPECT_LT(e.submit_seq, rec_->now());
        auto g = rec_->open(scratch_.file("other" + std::to_string(t) + "_" + std::to_string(k++)),
                            Open::write | Open::create);
        if (g.ok()) {
          EXPECT_FALSE(rec_->close(*g.value()));
        }
      }
    });
  }
  std::vector<std::uint8_t> data = pattern(0, 512, 4);
  const int n = 300;
  for (int i = 0; i < n; ++i) {
    const Op op = i % 10 == 9 ? Op::fdatasync : Op::write;
    ASSERT_GE(run_one(*rec_, make_request(op, f.get(), op == Op::write ? data.data() : nullptr,
                                          static_cast<std::uint64_t>(i) * 512, op == Op::write ? 512 : 0,
                                          static_cast<std::uint64_t>(i)))
                  .result,
              0);
  }
  stop.store(true, std::memory_order_release);
  for (auto& t : readers) t.join();
  std::size_t mine = 0;
  for (const auto& e : requests()) {
    if (e.path != scratch_.file("threads")) continue;
    ++mine;
    EXPECT_TRUE(e.complete_ok()) << e.to_string();
  }
  EXPECT_EQ(mine, static_cast<std::size_t>(n));
}

}  // namespace
}  // namespace tai::test
