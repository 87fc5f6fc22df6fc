// The fault engine (engines/fault): rule parsing, each trigger kind, once vs persistent, errno
// and short-transfer effects on every operation kind, reproducible probabilities, linked
// chains, and the continuation of genuine short transfers, over the posix and null engines.
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engines/fault/fault_engine.hpp"
#include "engines/null/null_engine.hpp"
#include "engines/posix/posix_engine.hpp"
#include "support/engine_configs.hpp"
#include "support/test_env.hpp"
#include "tai/engine_selector.hpp"

namespace tai::test {
namespace {

using engines::FaultEngine;
using engines::FaultOp;
using engines::FaultRule;

FaultRule rule_of(const std::string& text) {
  auto r = FaultRule::parse(text);
  EXPECT_TRUE(r.ok()) << text << ": " << (r.ok() ? "" : r.error().message);
  return r.ok() ? r.value() : FaultRule{};
}

// ---------------------------------------------------------------------------------------------
// Parsing

TEST(FaultRuleParse, ReadsEveryField) {
  FaultRule r = rule_of("write:nth=3:errno=EIO:once");
  EXPECT_EQ(r.op, FaultOp::write);
  EXPECT_EQ(r.trigger, FaultRule::Trigger::nth);
  EXPECT_EQ(r.n, 3u);
  EXPECT_EQ(r.effect, FaultRule::Effect::error);
  EXPECT_EQ(r.error, EIO);
  EXPECT_TRUE(r.once);

  r = rule_of(" read : p=0.25 : seed=7 : short=half ");
  EXPECT_EQ(r.op, FaultOp::read);
  EXPECT_EQ(r.trigger, FaultRule::Trigger::probability);
  EXPECT_DOUBLE_EQ(r.probability, 0.25);
  EXPECT_EQ(r.seed, 7u);
  EXPECT_EQ(r.effect, FaultRule::Effect::short_half);
  EXPECT_FALSE(r.once) << "probability rules are persistent unless told";

  r = rule_of("fdatasync:every=2:errno=ENOSPC");
  EXPECT_EQ(r.op, FaultOp::fdatasync);
  EXPECT_EQ(r.trigger, FaultRule::Trigger::every);
  EXPECT_EQ(r.error, ENOSPC);
  EXPECT_FALSE(r.once) << "every rules are persistent unless told";

  r = rule_of("any:nth=1:short=-4096:persistent");
  EXPECT_EQ(r.op, FaultOp::any);
  EXPECT_EQ(r.effect, FaultRule::Effect::short_by);
  EXPECT_EQ(r.short_bytes, 4096u);
  EXPECT_FALSE(r.once);

  r = rule_of("sync:nth=2:errno=5");
  EXPECT_EQ(r.op, FaultOp::sync);
  EXPECT_EQ(r.error, 5);
  EXPECT_TRUE(r.once) << "nth rules fire once unless told";
}

TEST(FaultRuleParse, RoundTripsThroughToString) {
  for (const char* text : {"write:nth=3:errno=EIO:once", "read:p=0.1:seed=42:short=half:persistent",
                           "fsync:every=2:errno=ENOSPC:persistent", "any:nth=1:short=-512:once",
                           "sync:every=1:errno=EDQUOT:once", "read:p=0.3333333333333333:seed=0:errno=EIO:persistent", "write:p=1:seed=3:errno=EIO:persistent"}) {
    FaultRule r = rule_of(text);
    EXPECT_EQ(r.to_string(), text);
    FaultRule again = rule_of(r.to_string());
    EXPECT_EQ(again.to_string(), r.to_string());
    EXPECT_EQ(again.probability, r.probability);
  }
}

TEST(FaultRuleParse, RejectsBadTextWithTheReason) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c : {Case{"writ:nth=1:errno=EIO", "'writ' is not one of"},
                        Case{"write:errno=EIO", "needs a trigger"},
                        Case{"write:nth=1", "needs an effect"},
                        Case{"write:nth=0:errno=EIO", "'nth=0' needs a whole number >= 1"},
                        Case{"write:nth=x:errno=EIO", "'nth=x'"},
                        Case{"write:nth=1:every=2:errno=EIO", "more than one trigger"},
                        Case{"write:p=1.5:errno=EIO", "between 0 and 1"},
                        Case{"write:nth=1:seed=3:errno=EIO", "seed= goes with p= only"},
                        Case{"write:nth=1:errno=EWHAT", "'errno=EWHAT' needs an errno name"},
                        Case{"write:nth=1:errno=EIO:short=half", "more than one effect"},
                        Case{"fsync:nth=1:short=half", "read and write only"},
                        Case{"write:nth=1:short=third", "short=half or short=-BYTES"},
                        Case{"write:nth=1:short=-0", "short=half or short=-BYTES"},
                        Case{"write:nth=1:errno=EIO:sometimes", "neither key=value nor once/persistent"},
                        Case{"write:nth=1:errno=EIO:colour=red", "unknown field 'colour'"}}) {
    auto r = FaultRule::parse(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.error().code, std::errc::invalid_argument) << c.text;
    EXPECT_NE(r.error().message.find(c.says), std::string::npos) << c.text << " -> " << r.error().message;
    EXPECT_NE(r.error().message.find(std::string("fault rule '") + c.text), std::string::npos)
        << r.error().message;
  }
}

TEST(FaultRuleParse, ListsAndAddRulesIsAllOrNothing) {
  auto list = FaultRule::parse_list("write:nth=1:errno=EIO, read:every=2:short=half ; fsync:nth=1:errno=ENOSPC");
  ASSERT_TRUE(list.ok()) << list.error().message;
  ASSERT_EQ(list.value().size(), 3u);
  EXPECT_EQ(list.value()[2].op, FaultOp::fsync);

  auto fault = engines::make_fault(engines::make_null({}));
  auto bad = fault->add_rules("write:nth=1:errno=EIO,read:nth=1:errno=EBOGUS");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("EBOGUS"), std::string::npos) << bad.error().message;
  EXPECT_EQ(fault->rule_count(), 0u) << "a list with one bad rule adds none";
  auto good = fault->add_rules("write:nth=1:errno=EIO,read:nth=1:errno=EIO");
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(good.value(), 2u);
  EXPECT_EQ(fault->rule_count(), 2u);
}

// ---------------------------------------------------------------------------------------------
// Over the posix and null engines

class FaultOver : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { fault_ = make(); }

  bool is_posix() const { return GetParam() == "posix"; }

  std::unique_ptr<FaultEngine> make(std::vector<FaultRule> rules = {}) {
    std::unique_ptr<Engine> inner = is_posix() ? engines::make_posix({}) : engines::make_null({});
    return engines::make_fault(std::move(inner), std::move(rules));
  }

  /// A new read-write file of `engine` (the fixture's by default).
  std::unique_ptr<EngineFile> create(const std::string& name, Open extra = Open::none, FaultEngine* engine = nullptr) {
    FaultEngine& e = engine ? *engine : *fault_;
    auto f = e.open(scratch_.file(name), Open::read | Open::write | Open::create | Open::truncate | extra);
    EXPECT_TRUE(f.ok()) << (f.ok() ? "" : f.error().message);
    return f.ok() ? std::move(f.value()) : nullptr;
  }

  ScratchDir scratch_;
  std::unique_ptr<FaultEngine> fault_;
};

INSTANTIATE_TEST_SUITE_P(Inner, FaultOver, ::testing::Values("posix", "null"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST_P(FaultOver, WithoutRulesItIsTheInnerEngine) {
  EXPECT_EQ(fault_->name(), "fault(" + GetParam() + ")");
  EXPECT_EQ(fault_->capabilities().direct_io, fault_->inner().capabilities().direct_io);
  EXPECT_EQ(fault_->capabilities().stores_data, fault_->inner().capabilities().stores_data);
  EXPECT_EQ(fault_->capabilities().asynchronous, fault_->inner().capabilities().asynchronous);
  auto f = create("plain");
  ASSERT_TRUE(f);
  EXPECT_TRUE(fault_->owns(*f));
  EXPECT_EQ(&f->engine(), &fault_->inner()) << "the inner engine opened the file";

  std::vector<std::uint8_t> data = pattern(0, 10000, 1), back(10000, 0xEE);
  auto c = run_requests(*fault_, {make_request(Op::write, f.get(), data.data(), 0, data.size(), 1),
                                  make_request(Op::fsync, f.get(), nullptr, 0, 0, 2),
                                  make_request(Op::read, f.get(), back.data(), 0, back.size(), 3)});
  EXPECT_EQ(c[0].result, 10000);
  EXPECT_EQ(c[1].result, 0);
  EXPECT_EQ(c[2].result, 10000);
  if (is_posix()) { EXPECT_EQ(mismatch(back.data(), data.data(), data.size()), ""); }
  EXPECT_FALSE(fault_->close(*f));
  EXPECT_TRUE(fault_->close(*f)) << "closing twice is EBADF";
  EXPECT_EQ(run_one(*fault_, make_request(Op::fsync, f.get(), nullptr, 0, 0, 4)).result, -EBADF);
}

// Each operation kind x {EIO, ENOSPC}: the rule "<op>:nth=2:errno=E:once" fails exactly the
// second operation of that kind, on that request's completion, and nothing else.
TEST_P(FaultOver, NthOnceFailsExactlyThatOperationOfEachKind) {
  const Op kinds[] = {Op::read, Op::write, Op::fsync, Op::fdatasync};
  for (Op target : kinds) {
    for (int err : {EIO, ENOSPC}) {
      const std::string text = std::string(to_string(target)) + ":nth=2:errno=" + (err == EIO ? "EIO" : "ENOSPC") + ":once";
      SCOPED_TRACE(text);
      auto fault = make({rule_of(text)});
      auto f = create("kinds", Open::none, fault.get());
      ASSERT_TRUE(f);
      std::vector<std::uint8_t> data = pattern(0, 4096, 2), back(4096);
      ASSERT_EQ(run_one(*fault, make_request(Op::write, f.get(), data.data(), 0, 4096, 99)).result, 4096);
      // Three rounds of read, write, fsync, fdatasync (plus the write above for the write count).
      std::vector<Request> batch;
      std::uint64_t ud = 0;
      for (int round = 0; round < 3; ++round) {
        batch.push_back(make_request(Op::read, f.get(), back.data(), 0, 4096, ud++));
        batch.push_back(make_request(Op::write, f.get(), data.data(), 0, 4096, ud++));
        batch.push_back(make_request(Op::fsync, f.get(), nullptr, 0, 0, ud++));
        batch.push_back(make_request(Op::fdatasync, f.get(), nullptr, 0, 0, ud++));
      }
      auto c = run_requests(*fault, batch);
      int seen = target == Op::write ? 1 : 0;  // operations of the target kind so far
      for (std::size_t i = 0; i < batch.size(); ++i) {
        const bool transfer = batch[i].op == Op::read || batch[i].op == Op::write;
        std::int64_t want = transfer ? 4096 : 0;
        if (batch[i].op == target && ++seen == 2) want = -err;
        EXPECT_EQ(c[i].result, want) << describe(batch[i]);
      }
      EXPECT_EQ(fault->matches(0), target == Op::write ? 4u : 3u);
      EXPECT_EQ(fault->injections(0), 1u);
      EXPECT_FALSE(fault->close(*f));
    }
  }
}

// Open and close of the engine file: the rule "open:nth=2:errno=EACCES" fails the second open
// (nothing opened), "close:nth=1:errno=EIO" the first close (the inner file closed all the same,
// as close(2) releases the descriptor); requests are not counted by either, nor they by "any".
TEST_P(FaultOver, OpenAndCloseFailWithTheirErrno) {
  EXPECT_FALSE(FaultRule::parse("open:nth=1:short=half").ok()) << "a short open means nothing";
  EXPECT_EQ(rule_of("close:every=2:errno=ENOSPC").op, FaultOp::close);
  EXPECT_EQ(rule_of("open:nth=1:errno=EMFILE").to_string(), rule_of(rule_of("open:nth=1:errno=EMFILE").to_string()).to_string());
  const std::size_t open_rule = fault_->add_rule(rule_of("open:nth=2:errno=EACCES:once"));
  const std::size_t close_rule = fault_->add_rule(rule_of("close:nth=1:errno=EIO:once"));
  const std::size_t any_rule = fault_->add_rule(rule_of("any:nth=1000:errno=EIO"));
  auto a = create("first");
  ASSERT_TRUE(a);
  auto b = fault_->open(scratch_.file("second"), Open::read | Open::write | Open::create);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().code.value(), EACCES);
  EXPECT_NE(b.error().message.find("injected"), std::string::npos) << b.error().message;
  if (is_posix()) { EXPECT_FALSE(std::filesystem::exists(scratch_.file("second"))) << "a failed open creates nothing"; }
  auto c = create("third");  // once: the third open goes through
  ASSERT_TRUE(c);
  std::vector<std::uint8_t> data(512, 9);
  EXPECT_EQ(run_one(*fault_, make_request(Op::write, a.get(), data.data(), 0, 512, 1)).result, 512);
  const int fd = a->fd();
  EXPECT_EQ(fault_->close(*a), std::error_code(EIO, std::generic_category()));
  if (is_posix() && fd >= 0) { EXPECT_EQ(::fcntl(fd, F_GETFD), -1) << "the inner file was closed all the same"; }
  EXPECT_TRUE(fault_->close(*a)) << "closed: a second close is EBADF";
  EXPECT_FALSE(fault_->close(*c));
  EXPECT_EQ(fault_->matches(open_rule), 3u);
  EXPECT_EQ(fault_->injections(open_rule), 1u);
  EXPECT_EQ(fault_->matches(close_rule), 2u);  // the EBADF close never reached the engine
  EXPECT_EQ(fault_->injections(close_rule), 1u);
  EXPECT_EQ(fault_->matches(any_rule), 1u) << "the one write; opens and closes are not `any`";
}

TEST_P(FaultOver, NthPersistentFailsFromTheNthOn) {
  fault_->add_rule(rule_of("write:nth=2:errno=ENOSPC:persistent"));
  auto f = create("persistent");
  ASSERT_TRUE(f);
  std::vector<std::uint8_t> data(512, 7);
  std::vector<Request> batch;
  for (std::uint64_t i = 0; i < 5; ++i) batch.push_back(make_request(Op::write, f.get(), data.data(), i * 512, 512, i));
  auto c = run_requests(*fault_, batch);
  EXPECT_EQ(c[0].result, 512);
  for (int i = 1; i < 5; ++i) EXPECT_EQ(c[i].result, -ENOSPC) << "write " << i + 1;
  EXPECT_EQ(fault_->injections(0), 4u);
  // The failed writes did no I/O: only the first 512 bytes exist.
  if (is_posix()) { EXPECT_EQ(file_size(f->path()), 512); }
}

TEST_P(FaultOver, EveryNthOnceAndPersistent) {
  for (bool once : {false, true}) {
    SCOPED_TRACE(once ? "once" : "persistent");
    auto fault = make({rule_of(std::string("read:every=3:errno=EIO") + (once ? ":once" : ""))});
    auto f = create("every", Open::none, fault.get());
    ASSERT_TRUE(f);
    std::vector<std::uint8_t> data(100, 1), back(100);
    ASSERT_EQ(run_one(*fault, make_request(Op::write, f.get(), data.data(), 0, 100, 100)).result, 100);
    std::vector<Request> batch;
    for (std::uint64_t i = 0; i < 9; ++i) batch.push_back(make_request(Op::read, f.get(), back.data(), 0, 100, i));
    auto c = run_requests(*fault, batch);
    for (int i = 0; i < 9; ++i) {
      const int k = i + 1;
      const bool fails = k % 3 == 0 && (!once || k == 3);
      EXPECT_EQ(c[i].result, fails ? -EIO : 100) << "read " << k;
    }
    EXPECT_EQ(fault->matches(0), 9u);
    EXPECT_EQ(fault->injections(0), once ? 1u : 3u);
  }
}

TEST_P(FaultOver, InjectedWriteErrorDoesNoIo) {
  fault_->add_rule(rule_of("write:nth=2:errno=EIO"));
  auto f = create("noio");
  ASSERT_TRUE(f);
  std::vector<std::uint8_t> a(4096, 'a'), b(4096, 'b');
  auto c = run_requests(*fault_, {make_request(Op::write, f.get(), a.data(), 0, 4096, 1),
                                  make_request(Op::write, f.get(), b.data(), 0, 4096, 2)});
  EXPECT_EQ(c[0].result, 4096);
  EXPECT_EQ(c[1].result, -EIO);
  if (is_posix()) expect_file_equals(f->path(), a, "the failed write must not have reached the file: ");
}

TEST_P(FaultOver, ShortWriteReportsWhatWasWritten) {
  struct Case {
    const char* rule;
    std::int64_t want;
  };
  for (const Case& k : {Case{"write:nth=1:short=half", 2048}, Case{"write:nth=1:short=-1000", 3096},
                        Case{"write:nth=1:short=-5000", 0}}) {
    SCOPED_TRACE(k.rule);
    auto fault = make({rule_of(k.rule)});
    auto f = create("shortw", Open::none, fault.get());
    ASSERT_TRUE(f);
    std::vector<std::uint8_t> data = pattern(0, 4096, 3);
    auto c = run_requests(*fault, {make_request(Op::write, f.get(), data.data(), 0, 4096, 1),
                                   make_request(Op::write, f.get(), data.data(), 8192, 4096, 2)});
    EXPECT_EQ(c[0].result, k.want) << "the injected short write is reported as it is, not continued";
    EXPECT_EQ(c[1].result, 4096) << "the once rule is spent";
    EXPECT_EQ(fault->injections(0), 1u);
    if (is_posix()) {
      std::vector<std::uint8_t> on_disk = read_file(f->path());
      ASSERT_EQ(on_disk.size(), 12288u);
      EXPECT_EQ(mismatch(on_disk.data(), data.data(), static_cast<std::size_t>(k.want)), "");
      EXPECT_TRUE(std::all_of(on_disk.begin() + k.want, on_disk.begin() + 8192, [](std::uint8_t b) { return b == 0; }))
          << "bytes past the short write were written";
    }
  }
}

TEST_P(FaultOver, ShortReadReportsWhatWasRead) {
  auto f = create("shortr");
  ASSERT_TRUE(f);
  std::vector<std::uint8_t> data = pattern(0, 8192, 4);
  ASSERT_EQ(run_one(*fault_, make_request(Op::write, f.get(), data.data(), 0, 8192, 1)).result, 8192);
  // Rules may be added between requests, from the queue's owner thread.
  fault_->add_rule(rule_of("read:nth=1:short=half"));
  fault_->add_rule(rule_of("read:nth=2:short=-100"));
  std::vector<std::uint8_t> back(8192, 0xEE);
  auto c = run_requests(*fault_, {make_request(Op::read, f.get(), back.data(), 0, 8192, 1)});
  EXPECT_EQ(c[0].result, 4096);
  if (is_posix()) { EXPECT_EQ(mismatch(back.data(), data.data(), 4096), ""); }
  EXPECT_EQ(back[4096], 0xEE) << "the short read wrote past what it reported";
  c = run_requests(*fault_, {make_request(Op::read, f.get(), back.data(), 0, 8192, 2)});
  EXPECT_EQ(c[0].result, 8092);
  EXPECT_EQ(fault_->injections(0), 1u);
  EXPECT_EQ(fault_->injections(1), 1u);
  EXPECT_EQ(fault_->matches(0), 2u);
}

TEST_P(FaultOver, ShortRulesLeaveSyncsAlone) {
  fault_->add_rule(rule_of("any:every=1:short=half"));
  auto f = create("anyshort");
  ASSERT_TRUE(f);
  std::vector<std::uint8_t> data(1000, 9);
  auto c = run_requests(*fault_, {make_request(Op::write, f.get(), data.data(), 0, 1000, 1),
                                  make_request(Op::fsync, f.get(), nullptr, 0, 0, 2),
                                  make_request(Op::fdatasync, f.get(), nullptr, 0, 0, 3),
                                  make_request(Op::read, f.get(), data.data(), 0, 1000, 4)});
  EXPECT_EQ(c[0].result, 500);
  EXPECT_EQ(c[1].result, 0);
  EXPECT_EQ(c[2].result, 0);
  EXPECT_EQ(c[3].result, 500) << "half of the 1000 bytes asked";
  EXPECT_EQ(fault_->matches(0), 2u) << "a short rule counts reads and writes only";
  EXPECT_EQ(fault_->injections(0), 2u);
}

TEST_P(FaultOver, ShortOnADirectFileStaysAligned) {
  TAI_SKIP_WITHOUT_DIRECT_IO(scratch_.path());
  auto f = create("direct", Open::direct);
  ASSERT_TRUE(f);
  const std::uint64_t block =
      std::max<std::uint64_t>({f->capabilities().alignment.offset, f->capabilities().alignment.length, 1});
  TestBuffer buf(4 * 4096);
  fill_pattern(buf.at(), 0, 4 * 4096, 5);
  fault_->add_rule(rule_of("write:nth=1:short=-1"));
  auto c = run_one(*fault_, make_request(Op::write, f.get(), buf.at(), 0, 4 * 4096, 1));
  EXPECT_EQ(static_cast<std::uint64_t>(c.result), (4 * 4096 - 1) / block * block)
      << "one byte fewer, rounded down to the block of " << block;
  if (is_posix()) { EXPECT_EQ(file_size(f->path()), c.result); }
}

TEST_P(FaultOver, ProbabilityIsReproducibleWithItsSeed) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("TAI_TEST_SEED=" + std::to_string(seed));
  auto pattern_of = [&](std::uint64_t s, double p) {
    FaultRule r = rule_of("write:p=0.5:errno=EIO");
    r.seed = s;
    r.probability = p;
    auto fault = make({r});
    auto f = create("prob", Open::none, fault.get());
    std::vector<std::uint8_t> data(64, 1);
    std::vector<Request> batch;
    for (std::uint64_t i = 0; i < 200; ++i) batch.push_back(make_request(Op::write, f.get(), data.data(), 0, 64, i));
    std::string failed;
    for (const auto& c : run_requests(*fault, batch)) failed += c.result == -EIO ? 'x' : (c.result == 64 ? '.' : '?');
    EXPECT_EQ(fault->injections(0), static_cast<std::uint64_t>(std::count(failed.begin(), failed.end(), 'x')));
    return failed;
  };
  const std::string first = pattern_of(seed, 0.3);
  EXPECT_EQ(first.find('?'), std::string::npos) << first;
  EXPECT_EQ(pattern_of(seed, 0.3), first) << "same seed, same operations: same faults";
  const auto hits = std::count(first.begin(), first.end(), 'x');
  EXPECT_GT(hits, 20) << first;  // 60 expected; 20 and 110 are more than 6 sigma away
  EXPECT_LT(hits, 110) << first;
  EXPECT_NE(pattern_of(seed + 1, 0.3), first) << "another seed gives other faults";
  EXPECT_EQ(pattern_of(seed, 0.0), std::string(200, '.'));
  EXPECT_EQ(pattern_of(seed, 1.0), std::string(200, 'x'));
}

TEST_P(FaultOver, TheFirstEligibleRuleInjectsAndShadowsTheOthers) {
  fault_->add_rule(rule_of("write:nth=2:errno=EIO"));
  fault_->add_rule(rule_of("write:every=2:errno=ENOSPC"));
  auto f = create("shadow");
  ASSERT_TRUE(f);
  std::vector<std::uint8_t> data(10, 1);
  std::vector<Request> batch;
  for (std::uint64_t i = 0; i < 4; ++i) batch.push_back(make_request(Op::write, f.get(), data.data(), 0, 10, i));
  auto c = run_requests(*fault_, batch);
  EXPECT_EQ(c[0].result, 10);
  EXPECT_EQ(c[1].result, -EIO);
  EXPECT_EQ(c[2].result, 10);
  EXPECT_EQ(c[3].result, -ENOSPC);
  EXPECT_EQ(fault_->matches(0), 4u);
  EXPECT_EQ(fault_->matches(1), 4u);
  EXPECT_EQ(fault_->injections(0), 1u);
  EXPECT_EQ(fault_->injections(1), 1u);
  EXPECT_EQ(fault_->total_injections(), 2u);
}

TEST_P(FaultOver, AnInjectedErrorBreaksALinkChain) {
  fault_->add_rule(rule_of("write:nth=1:errno=EIO"));
  auto f = create("chain");
  ASSERT_TRUE(f);
  std::vector<std::uint8_t> a(100, 'a'), b(100, 'b');
  std::vector<Request> batch = {make_request(Op::write, f.get(), a.data(), 0, 100, 1),
                                make_request(Op::write, f.get(), b.data(), 100, 100, 2),
                                make_request(Op::fsync, f.get(), nullptr, 0, 0, 3)};
  batch[0].link = batch[1].link = true;
  auto c = run_requests(*fault_, batch);
  EXPECT_EQ(c[0].result, -EIO);
  EXPECT_EQ(c[1].result, -ECANCELED);
  EXPECT_EQ(c[2].result, -ECANCELED);
  if (is_posix()) { EXPECT_EQ(file_size(f->path()), 0); }
  EXPECT_EQ(fault_->matches(0), 1u) << "cancelled requests never ran";
}

// The file of ChunkyEngine and StingyEngine below: nothing but its path and mode.
class BareFile final : public EngineFile {
 public:
  BareFile(Engine& e, std::string path, OpenMode mode) : EngineFile(e, std::move(path), mode, FileCapabilities{}) {}
};

// ---------------------------------------------------------------------------------------------
// Genuine short transfers of the inner engine are continued (the base does not, for a fault
// engine), injected ones are not. The inner engine here moves at most 1000 bytes per call.

class ChunkyEngine final : public SyncEngine {
 public:
  static constexpr std::uint64_t kChunk = 1000;
  ChunkyEngine() : SyncEngine("chunky", Capabilities{}, EngineOptions{}) {}
  std::vector<std::uint8_t> bytes = std::vector<std::uint8_t>(1 << 16, 0);
  std::uint64_t calls = 0;

 protected:
  Result<std::unique_ptr<EngineFile>> do_open(const std::string& path, OpenMode mode) override {
    return std::unique_ptr<EngineFile>(std::make_unique<BareFile>(*this, path, mode));
  }
  std::error_code do_close(EngineFile&) override { return {}; }
  std::int64_t transfer(const Request& r) override {
    ++calls;
    if (r.op != Op::read && r.op != Op::write) return 0;
    if (r.offset >= bytes.size()) return 0;
    const std::uint64_t n = std::min({r.length, kChunk, bytes.size() - r.offset});
    if (r.op == Op::read)
      std::memcpy(r.buffer, bytes.data() + r.offset, n);
    else
      std::memcpy(bytes.data() + r.offset, r.buffer, n);
    return static_cast<std::int64_t>(n);
  }
};

TEST(FaultContinuation, GenuineShortsAreContinuedInjectedOnesAreNot) {
  auto owned = std::make_unique<ChunkyEngine>();
  ChunkyEngine* chunky = owned.get();
  auto fault = engines::make_fault(std::move(owned));
  auto f = fault->open("mem", Open::read | Open::write);
  ASSERT_TRUE(f.ok()) << f.error().message;
  std::vector<std::uint8_t> data = pattern(0, 4096, 6);
  EXPECT_EQ(run_one(*fault, make_request(Op::write, f.value().get(), data.data(), 0, 4096, 1)).result, 4096);
  EXPECT_EQ(chunky->calls, 5u) << "4096 bytes in pieces of 1000";
  EXPECT_EQ(mismatch(chunky->bytes.data(), data.data(), 4096), "");

  fault->add_rule(rule_of("write:nth=1:short=half"));  // rules count from when they are added
  chunky->calls = 0;
  EXPECT_EQ(run_one(*fault, make_request(Op::write, f.value().get(), data.data(), 8192, 4096, 2)).result, 1000)
      << "shortened to 2048, of which the inner engine moved 1000: reported as it is";
  EXPECT_EQ(chunky->calls, 1u);

  // Reads up to the end: continued until the end of the inner engine's memory (a 0 is EOF).
  std::vector<std::uint8_t> back(3000);
  EXPECT_EQ(run_one(*fault, make_request(Op::read, f.value().get(), back.data(), (1 << 16) - 2500, 3000, 3)).result,
            2500);
  EXPECT_FALSE(fault->close(*f.value()));
}

// An inner engine that takes at most two requests per native submit (as io_submit may under
// pressure): the fault engine must count each operation once, however the batch is split.
class StingyEngine final : public Engine {
 public:
  StingyEngine() : Engine("stingy", Capabilities{}, EngineOptions{}) {}
  std::uint64_t native_submits = 0;

 protected:
  Result<std::unique_ptr<EngineFile>> do_open(const std::string& path, OpenMode mode) override {
    return std::unique_ptr<EngineFile>(std::make_unique<BareFile>(*this, path, mode));
  }
  std::error_code do_close(EngineFile&) override { return {}; }
  std::size_t do_submit(const Request* r, std::size_t n) override {
    ++native_submits;
    const std::size_t take = std::min<std::size_t>(n, 2);
    for (std::size_t i = 0; i < take; ++i)
      done_.push_back({r[i].user_data, r[i].op == Op::read || r[i].op == Op::write ? static_cast<std::int64_t>(r[i].length) : 0});
    return take;
  }
  std::size_t do_reap(Completion* out, std::size_t max, std::size_t, Timeout) override {
    const std::size_t k = std::min(max, done_.size());
    std::copy(done_.begin(), done_.begin() + static_cast<std::ptrdiff_t>(k), out);
    done_.erase(done_.begin(), done_.begin() + static_cast<std::ptrdiff_t>(k));
    return k;
  }

 private:
  std::vector<Completion> done_;
};

TEST(FaultPartialSubmit, EachOperationIsCountedOnceWhenTheInnerEngineTakesFewer) {
  auto owned = std::make_unique<StingyEngine>();
  StingyEngine* stingy = owned.get();
  auto fault = engines::make_fault(std::move(owned), {rule_of("write:every=2:errno=EIO"), rule_of("write:nth=5:errno=ENOSPC")});
  auto f = fault->open("mem", Open::read | Open::write);
  ASSERT_TRUE(f.ok()) << f.error().message;
  std::vector<std::uint8_t> data(10, 1);
  std::vector<Request> batch;
  for (std::uint64_t i = 0; i < 7; ++i) batch.push_back(make_request(Op::write, f.value().get(), data.data(), 0, 10, i));
  auto c = run_requests(*fault, batch);
  const std::int64_t want[] = {10, -EIO, 10, -EIO, -ENOSPC, -EIO, 10};
  for (std::size_t i = 0; i < 7; ++i) EXPECT_EQ(c[i].result, want[i]) << "write " << i + 1;
  EXPECT_GE(stingy->native_submits, 2u) << "the batch was not split: the test proves nothing";
  EXPECT_EQ(fault->matches(0), 7u);
  EXPECT_EQ(fault->matches(1), 7u);
  EXPECT_EQ(fault->injections(0), 3u);
  EXPECT_EQ(fault->injections(1), 1u);
  EXPECT_FALSE(fault->close(*f.value()));
}

// ---------------------------------------------------------------------------------------------
// Over the asynchronous engines, where this machine has them

TEST(FaultAsync, KernelLinkedChainIsCancelledAfterAnInjection) {
  auto inner = make_engine("uring");
  if (!inner) GTEST_SKIP() << inner.error().message;
  if (!inner.value()->capabilities().linked_requests) GTEST_SKIP() << "uring without linked requests";
  auto fault = engines::make_fault(std::move(inner.value()), {rule_of("write:nth=2:errno=ENOSPC")});
  ScratchDir dir;
  auto f = fault->open(dir.file("chain"), Open::read | Open::write | Open::create);
  ASSERT_TRUE(f.ok()) << f.error().message;
  std::vector<std::uint8_t> a(100, 'a');
  std::vector<Request> batch = {make_request(Op::write, f.value().get(), a.data(), 0, 100, 1),
                                make_request(Op::write, f.value().get(), a.data(), 100, 100, 2),
                                make_request(Op::write, f.value().get(), a.data(), 200, 100, 3),
                                make_request(Op::fsync, f.value().get(), nullptr, 0, 0, 4),
                                make_request(Op::write, f.value().get(), a.data(), 300, 100, 5)};
  batch[0].link = batch[1].link = batch[2].link = true;  // 1 -> 2 -> 3 -> fsync; 5 is on its own
  auto c = run_requests(*fault, batch);
  EXPECT_EQ(c[0].result, 100);
  EXPECT_EQ(c[1].result, -ENOSPC);
  EXPECT_EQ(c[2].result, -ECANCELED);
  EXPECT_EQ(c[3].result, -ECANCELED);
  EXPECT_EQ(c[4].result, 100);
  EXPECT_EQ(file_size(f.value()->path()), 400);
  std::vector<std::uint8_t> on_disk = read_file(f.value()->path());
  EXPECT_TRUE(std::all_of(on_disk.begin() + 100, on_disk.begin() + 300, [](std::uint8_t b) { return b == 0; }));
  EXPECT_FALSE(fault->close(*f.value()));
}

TEST(FaultAsync, InjectedCompletionsSignalTheEventfd) {
  for (const char* name : {"libaio", "uring"}) {
    SCOPED_TRACE(name);
    auto inner = make_engine(name);
    if (!inner) {
      std::printf("[  SKIPPED ] part %s: %s\n", name, inner.error().message.c_str());
      continue;
    }
    if (inner.value()->eventfd() < 0) continue;
    auto fault = engines::make_fault(std::move(inner.value()), {rule_of("fsync:nth=1:errno=EIO")});
    const int efd = fault->eventfd();
    ASSERT_GE(efd, 0);
    pollfd ready{efd, POLLIN, 0};
    std::uint64_t drained = 0;
    if (::poll(&ready, 1, 0) == 1) {
      ASSERT_EQ(::read(efd, &drained, sizeof drained), 8);  // start from 0
    }
    ScratchDir dir;
    auto f = fault->open(dir.file("efd"), Open::read | Open::write | Open::create);
    ASSERT_TRUE(f.ok()) << f.error().message;
    Request r = make_request(Op::fsync, f.value().get(), nullptr, 0, 0, 7);
    ASSERT_EQ(fault->submit(&r, 1), 1u);
    pollfd p{efd, POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 5000), 1) << "the eventfd did not become readable for an injected completion";
    Completion c;
    ASSERT_EQ(fault->reap(&c, 1, 1, std::chrono::seconds(10)), 1u);
    EXPECT_EQ(c.result, -EIO);
    EXPECT_FALSE(fault->close(*f.value()));
  }
}

}  // namespace
}  // namespace tai::test
