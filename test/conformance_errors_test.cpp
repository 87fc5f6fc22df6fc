// Engine conformance suite, part 3: error paths (see engine_conformance_test.cpp for the
// configurations and the rules). Every error reaches the caller on the completion of the
// request that caused it, with that request's user_data, and leaves the next request unharmed:
//  * bad descriptors: no file, a file of another engine, a closed file (-EBADF; close twice
//    returns EBADF);
//  * a write to a read-only file, a read of a write-only file (-EBADF);
//  * an offset whose end passes 2^64, or the kernel's largest offset (-EOVERFLOW, what
//    engines/engine.cpp's validation answers), a missing buffer (-EFAULT);
//  * EIO, ENOSPC and short transfers injected by the fault engine wrapped around each
//    configuration's engine, on reads, writes, fsync and fdatasync.
#include <poll.h>

#include <limits>

#include "support/engine_configs.hpp"

namespace tai::test {
namespace {

constexpr std::uint64_t KiB = 1024;

class EngineErrors : public EngineTest {
 protected:
  /// The request's completion through submit/reap and, on a SyncEngine, through execute().
  void expect_both_ways(const Request& r, std::int64_t want) {
    expect_result(r, run(r), want);
    if (auto* sync = dynamic_cast<SyncEngine*>(&engine())) {
      SCOPED_TRACE("SyncEngine::execute");
      expect_result(r, sync->execute(r), want);
    }
  }
};

const Op kAllOps[] = {Op::read, Op::write, Op::fsync, Op::fdatasync};

bool transfers(Op op) { return op == Op::read || op == Op::write; }

// ---------------------------------------------------------------------------------------------

TEST_P(EngineErrors, RequestWithoutAFileFailsWithEBADF) {
  TestBuffer b(4096);
  std::uint64_t tag = 0;
  for (Op op : kAllOps) {
    SCOPED_TRACE(to_string(op));
    expect_both_ways(make_request(op, nullptr, transfers(op) ? b.at() : nullptr, 0, transfers(op) ? 4096 : 0, ++tag),
                     -EBADF);
  }
}

// A file opened by another engine (another instance of this configuration, and a posix engine)
// is refused, in a batch where a valid request still succeeds.
TEST_P(EngineErrors, FileOfAnotherEngineFailsWithEBADF) {
  auto other_same = make_config_engine(config());
  ASSERT_TRUE(other_same) << other_same.error().message;
  auto other_posix = make_engine("posix");
  ASSERT_TRUE(other_posix) << other_posix.error().message;
  const std::string path = scratch_.file("theirs");
  write_file(path, {});  // the null engine creates no file, the posix engine needs one
  auto mine = create_file(path);
  ASSERT_TRUE(mine);
  auto theirs_same = open_file(path, Open::read | Open::write, other_same.value().get());
  ASSERT_TRUE(theirs_same);
  auto theirs_posix = other_posix.value()->open(path, OpenMode(Open::read | Open::write));
  ASSERT_TRUE(theirs_posix) << theirs_posix.error().message;

  TestBuffer b(4096);
  fill_pattern(b.at(), 0, 4096, 1);
  std::uint64_t tag = 0;
  for (EngineFile* foreign : {theirs_same.get(), theirs_posix.value().get()}) {
    for (Op op : kAllOps) {
      SCOPED_TRACE(::testing::Message() << to_string(op) << " on a file of engine '" << foreign->engine().name()
                                        << "'");
      const std::uint64_t len = transfers(op) ? 4096 : 0;
      std::vector<Request> batch = {make_request(op, foreign, transfers(op) ? b.at() : nullptr, 0, len, ++tag),
                                    make_request(Op::write, mine.get(), b.at(), 0, 4096, ++tag)};
      auto done = run(batch);
      expect_result(batch[0], done[0], -EBADF);
      expect_result(batch[1], done[1], 4096);
      if (auto* sync = dynamic_cast<SyncEngine*>(&engine())) expect_result(batch[0], sync->execute(batch[0]), -EBADF);
    }
  }
  EXPECT_EQ(engine().close(*theirs_same), std::make_error_code(std::errc::bad_file_descriptor))
      << "closing another engine's file";
  EXPECT_TRUE(theirs_same->is_open());
}

TEST_P(EngineErrors, WriteToAReadOnlyFileFailsWithEBADF) {
  const std::string path = scratch_.file("readonly");
  const std::vector<std::uint8_t> model = pattern(0, 8192, 2);
  write_file(path, model);
  auto f = open_file(path, Open::read);
  ASSERT_TRUE(f);
  TestBuffer b(8192);
  fill_pattern(b.at(), 0, 8192, 3);
  expect_both_ways(make_request(Op::write, f.get(), b.at(), 0, 4096, 1), -EBADF);
  expect_both_ways(make_request(Op::write, f.get(), b.at(1), 4097, 1000, 2), -EBADF);
  // The next request is unharmed.
  Request r = make_request(Op::read, f.get(), b.at(), 0, 8192, 3);
  expect_result(r, run(r), 8192);
  if (!stores_data()) GTEST_SKIP() << kNoData << " (results were checked)";
  EXPECT_EQ(mismatch(b.at(), model.data(), 8192), "");
  expect_file_equals(path, model, "after refused writes: ");
}

TEST_P(EngineErrors, ReadOfAWriteOnlyFileFailsWithEBADF) {
  const std::string path = scratch_.file("writeonly");
  write_file(path, pattern(0, 8192, 4));
  auto f = open_file(path, Open::write);
  ASSERT_TRUE(f);
  TestBuffer b(8192);
  expect_both_ways(make_request(Op::read, f.get(), b.at(), 0, 4096, 1), -EBADF);
  expect_both_ways(make_request(Op::read, f.get(), b.at(1), 4097, 1000, 2), -EBADF);
  fill_pattern(b.at(), 0, 8192, 5);
  Request w = make_request(Op::write, f.get(), b.at(), 0, 8192, 3);
  expect_result(w, run(w), 8192);
  if (!stores_data()) GTEST_SKIP() << kNoData << " (results were checked)";
  publish(f.get());
  expect_file_equals(path, std::vector<std::uint8_t>(b.at(), b.at() + 8192));
}

TEST_P(EngineErrors, ClosedHandleFailsWithEBADFAndClosingTwiceReturnsEBADF) {
  const std::string path = scratch_.file("closed");
  auto f = create_file(path);
  ASSERT_TRUE(f);
  TestBuffer b(4096);
  fill_pattern(b.at(), 0, 4096, 6);
  Request w = make_request(Op::write, f.get(), b.at(), 0, 4096, 1);
  expect_result(w, run(w), 4096);
  EXPECT_EQ(engine().close(*f), std::error_code());
  EXPECT_FALSE(f->is_open());
  std::uint64_t tag = 10;
  for (Op op : kAllOps) {
    SCOPED_TRACE(to_string(op));
    expect_both_ways(make_request(op, f.get(), transfers(op) ? b.at() : nullptr, 0, transfers(op) ? 4096 : 0, ++tag),
                     -EBADF);
  }
  EXPECT_EQ(engine().close(*f), std::make_error_code(std::errc::bad_file_descriptor)) << "second close";
  // The engine is still fine.
  auto g = open_file(path, Open::read);
  ASSERT_TRUE(g);
  Request r = make_request(Op::read, g.get(), b.at(), 0, 4096, 99);
  expect_result(r, run(r), 4096);
}

// engines/engine.cpp validates the range: an end past 2^64 (the sum wraps) or past the largest
// offset off_t can hold completes with -EOVERFLOW; a transfer without a buffer with -EFAULT.
TEST_P(EngineErrors, OffsetPlusLengthPastTwoToThe64FailsWithEOVERFLOW) {
  const std::string path = scratch_.file("overflow");
  auto f = create_file(path);
  ASSERT_TRUE(f);
  TestBuffer b(8192);
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  constexpr std::uint64_t kMaxOffT = static_cast<std::uint64_t>(std::numeric_limits<off_t>::max());
  struct Case {
    std::uint64_t offset, length;
  };
  const Case cases[] = {
      {kMax - 10, 100},     // wraps past 2^64
      {1, kMax},            // wraps past 2^64
      {kMax, 1},            // wraps past 2^64
      {kMaxOffT, 1},        // ends one past the largest off_t
      {kMaxOffT - 100, 4097},
  };
  std::uint64_t tag = 0;
  for (Op op : {Op::read, Op::write}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message() << to_string(op) << " offset=" << c.offset << " length=" << c.length);
      expect_both_ways(make_request(op, f.get(), b.at(1), c.offset, c.length, ++tag), -EOVERFLOW);
    }
    SCOPED_TRACE(::testing::Message() << to_string(op) << " without a buffer");
    expect_both_ways(make_request(op, f.get(), nullptr, 0, 100, ++tag), -EFAULT);
  }
  // The next request is unharmed, and nothing was written.
  fill_pattern(b.at(), 0, 4096, 7);
  Request w = make_request(Op::write, f.get(), b.at(), 0, 4096, ++tag);
  expect_result(w, run(w), 4096);
  if (stores_data()) {
    publish(f.get());
    EXPECT_EQ(file_size(path), 4096);
  }
}

// ---------------------------------------------------------------------------------------------
// Injected faults: the fault engine wrapped around this configuration's own engine.

class InjectedFaults : public EngineTest {
 protected:
  /// This configuration's engine (never itself wrapped) inside a fault engine with `rules`.
  std::unique_ptr<engines::FaultEngine> faulty(std::vector<engines::FaultRule> rules) {
    auto inner = make_engine(config().engine, options_for(config()));
    if (!inner) {
      ADD_FAILURE() << inner.error().message;
      return nullptr;
    }
    return engines::make_fault(std::move(inner.value()), std::move(rules));
  }
};

struct FaultCase {
  Op op;
  engines::FaultRule::Effect effect;
  int error;  // Effect::error
};

std::string fault_name(const FaultCase& c) {
  std::string s = to_string(c.op);
  if (c.effect == engines::FaultRule::Effect::short_half) return s + " short=half";
  return s + (c.error == EIO ? " errno=EIO" : " errno=ENOSPC");
}

engines::FaultOp fault_op(Op op) {
  switch (op) {
    case Op::read: return engines::FaultOp::read;
    case Op::write: return engines::FaultOp::write;
    case Op::fsync: return engines::FaultOp::fsync;
    case Op::fdatasync: return engines::FaultOp::fdatasync;
  }
  return engines::FaultOp::any;
}

// For each operation kind: a `once` rule on the first operation of that kind. The faulted
// request and the next one of the same kind are in flight together; the fault is reported on the
// first one's completion (matched by user_data), the second one succeeds, and the file holds
// exactly what the results say.
TEST_P(InjectedFaults, EioEnospcAndShortTransfersReachTheirRequestOnly) {
  using Effect = engines::FaultRule::Effect;
  std::vector<FaultCase> cases;
  for (Op op : kAllOps) {
    cases.push_back({op, Effect::error, EIO});
    cases.push_back({op, Effect::error, ENOSPC});
    if (transfers(op)) cases.push_back({op, Effect::short_half, 0});
  }
  constexpr std::size_t kLen = 64 * KiB;
  std::uint64_t file_no = 0;
  for (const FaultCase& c : cases) {
    SCOPED_TRACE(fault_name(c));
    engines::FaultRule rule;
    rule.op = fault_op(c.op);
    rule.trigger = engines::FaultRule::Trigger::nth;
    rule.n = 1;
    rule.effect = c.effect;
    rule.error = c.error;
    rule.once = true;
    auto e = faulty({rule});
    ASSERT_TRUE(e);
    const bool data = e->capabilities().stores_data;

    const std::string path = scratch_.file("fault" + std::to_string(++file_no));
    std::vector<std::uint8_t> model = pattern(0, 2 * kLen, 10 + file_no);
    write_file(path, model);
    auto f = open_file(path, Open::read | Open::write, e.get());
    ASSERT_TRUE(f);
    TestBuffer first(kLen), second(kLen);
    fill_pattern(first.at(), 0, kLen, 100 + file_no);
    fill_pattern(second.at(), kLen, kLen, 200 + file_no);

    std::vector<Request> batch;
    if (transfers(c.op)) {
      batch = {make_request(c.op, f.get(), first.at(), 0, kLen, 1000 + file_no),
               make_request(c.op, f.get(), second.at(), kLen, kLen, 2000 + file_no)};
    } else {
      // Something to sync first (the rule does not match writes).
      Request w = make_request(Op::write, f.get(), first.at(), 0, kLen, 3000 + file_no);
      expect_result(w, run_one(*e, w), kLen);
      model_write(model, 0, first.at(), kLen);
      batch = {make_request(c.op, f.get(), nullptr, 0, 0, 1000 + file_no),
               make_request(c.op, f.get(), nullptr, 0, 0, 2000 + file_no)};
    }
    auto done = run_requests(*e, batch);
    std::int64_t want_first = transfers(c.op) ? static_cast<std::int64_t>(kLen) : 0;
    if (c.effect == Effect::error) want_first = -c.error;
    if (c.effect == Effect::short_half) want_first = static_cast<std::int64_t>(kLen / 2);
    expect_result(batch[0], done[0], want_first);
    expect_result(batch[1], done[1], transfers(c.op) ? static_cast<std::int64_t>(kLen) : 0);
    EXPECT_EQ(e->injections(0), 1u);

    // The next request of that kind is unaffected.
    Request again = batch[1];
    again.user_data += 5000;
    expect_result(again, run_one(*e, again), transfers(c.op) ? static_cast<std::int64_t>(kLen) : 0);
    EXPECT_EQ(e->injections(0), 1u) << "a once rule injected twice";
    EXPECT_EQ(e->close(*f), std::error_code());
    if (!data) continue;

    if (c.op == Op::write) {
      const std::size_t landed = done[0].result > 0 ? static_cast<std::size_t>(done[0].result) : 0;
      model_write(model, 0, first.at(), landed);
      model_write(model, kLen, second.at(), kLen);
      expect_file_equals(path, model, "the file holds exactly what the write results say: ");
    } else if (c.op == Op::read) {
      if (done[0].result > 0) {
        EXPECT_EQ(mismatch(first.at(), model.data(), static_cast<std::size_t>(done[0].result)), "");
      }
      EXPECT_EQ(mismatch(second.at(), model.data() + kLen, kLen, kLen), "");
    } else {
      expect_file_equals(path, model);
    }
  }
}

// An injected short write of an unaligned request (bounced, with read-modify-write, on a direct
// file): the result is fewer bytes than asked, and exactly that prefix is on disk; the bytes
// after it are as they were.
TEST_P(InjectedFaults, ShortUnalignedWriteReportsWhatLanded) {
  engines::FaultRule rule;
  rule.op = engines::FaultOp::write;
  rule.effect = engines::FaultRule::Effect::short_half;
  auto e = faulty({rule});
  ASSERT_TRUE(e);
  if (!e->capabilities().stores_data) GTEST_SKIP() << kNoData;
  const std::string path = scratch_.file("shortwrite");
  std::vector<std::uint8_t> model = pattern(0, 16 * KiB, 30);
  write_file(path, model);
  auto f = open_file(path, Open::read | Open::write, e.get());
  ASSERT_TRUE(f);
  TestBuffer b(8192);
  fill_pattern(b.at(1), 4097, 5000, 31);
  Request w = make_request(Op::write, f.get(), b.at(1), 4097, 5000, 77);
  Completion c = run_one(*e, w);
  EXPECT_EQ(c.user_data, 77u);
  EXPECT_GT(c.result, 0) << result_text(c.result);
  EXPECT_LT(c.result, 5000);
  if (c.result > 0) model_write(model, 4097, b.at(1), static_cast<std::size_t>(std::min<std::int64_t>(c.result, 5000)));
  EXPECT_EQ(e->close(*f), std::error_code());
  expect_file_equals(path, model, "result " + std::to_string(c.result) + ": ");
}

// A persistent rule (every 2nd write fails with ENOSPC) hits exactly its operations.
TEST_P(InjectedFaults, PersistentRuleHitsEveryNthOperation) {
  engines::FaultRule rule;
  rule.op = engines::FaultOp::write;
  rule.trigger = engines::FaultRule::Trigger::every;
  rule.n = 2;
  rule.error = ENOSPC;
  rule.once = false;
  auto e = faulty({rule});
  ASSERT_TRUE(e);
  const std::string path = scratch_.file("every");
  auto f = open_file(path, Open::read | Open::write | Open::create, e.get());
  ASSERT_TRUE(f);
  TestBuffer b(4096);
  fill_pattern(b.at(), 0, 4096, 40);
  for (std::uint64_t k = 1; k <= 6; ++k) {
    Request w = make_request(Op::write, f.get(), b.at(), 0, 4096, k);
    expect_result(w, run_one(*e, w), k % 2 == 0 ? -ENOSPC : 4096);
  }
  EXPECT_EQ(e->injections(0), 3u);
  EXPECT_EQ(e->close(*f), std::error_code());
}

// On an engine with an eventfd, an injected completion wakes a poll loop like a real one.
TEST_P(InjectedFaults, InjectedCompletionMakesTheEventfdReadable) {
  engines::FaultRule rule;
  rule.op = engines::FaultOp::fsync;
  rule.error = EIO;
  auto e = faulty({rule});
  ASSERT_TRUE(e);
  if (!e->capabilities().eventfd) GTEST_SKIP() << "engine '" << config().engine << "' has no eventfd";
  const std::string path = scratch_.file("fault-eventfd");
  auto f = open_file(path, Open::read | Open::write | Open::create, e.get());
  ASSERT_TRUE(f);
  Request s = make_request(Op::fsync, f.get(), nullptr, 0, 0, 5);
  ASSERT_EQ(e->submit(&s, 1), 1u);
  pollfd p{e->eventfd(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 10000), 1) << "eventfd not readable within 10 s of an injected completion";
  Completion c;
  ASSERT_EQ(e->reap(&c, 1, 1, kCompletionTimeout), 1u);
  expect_result(s, c, -EIO);
  EXPECT_EQ(e->close(*f), std::error_code());
}

TAI_INSTANTIATE_ENGINE_CONFIGS(EngineErrors);
TAI_INSTANTIATE_ENGINE_CONFIGS(InjectedFaults);

}  // namespace
}  // namespace tai::test
