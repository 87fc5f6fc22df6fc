// Engine conformance suite, part 1: moving bytes. One check body per behaviour runs over every
// engine configuration of test/support/engine_configs.hpp (posix, posix+direct, cstdio, fstream,
// null, libaio, libaio+direct, uring, uring+direct, uring with registered files, fault over
// posix); a configuration this build or kernel cannot run is skipped with the selector's reason.
//
// Every write is checked against the file as the kernel sees it (plain pread on a separate
// descriptor), and every read against bytes put there with plain pwrite, so that an engine is
// never its own witness. The null engine stores nothing: on it only the counts are checked.
//
// Part 2 (conformance_concurrency_test.cpp): threads and the random model.
// Part 3 (conformance_errors_test.cpp): error paths and injected faults.
#include <poll.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>

#include <cctype>
#include <climits>
#include <cstdlib>

#include "support/engine_configs.hpp"

namespace tai::test {
namespace {

constexpr std::uint64_t KiB = 1024;
constexpr std::uint64_t MiB = 1024 * KiB;

class EngineConformance : public EngineTest {};

std::string lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool is_power_of_two(std::uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

// ---------------------------------------------------------------------------------------------

TEST_P(EngineConformance, CapabilitiesMatchTheConfiguration) {
  const Capabilities& caps = engine().capabilities();
  const std::string name = config().engine;
  if (!config().fault_wrapped) { EXPECT_EQ(engine().name(), name); }
  EXPECT_EQ(caps.stores_data, name != "null");
  EXPECT_TRUE(caps.vectored_writes) << "every built-in engine takes Request::iov natively (pwritev or a loop)";
  const bool kernel_queue = name == "libaio" || name == "uring";
  EXPECT_EQ(caps.asynchronous, kernel_queue);
  if (kernel_queue) {
    EXPECT_TRUE(caps.async_sync) << "libaio and uring issue fsync/fdatasync as asynchronous requests";
    EXPECT_TRUE(caps.eventfd) << "libaio and uring offer an eventfd for poll loops";
  }
  EXPECT_EQ(caps.eventfd, engine().eventfd() >= 0) << "eventfd() = " << engine().eventfd();
  if (config().direct) { EXPECT_TRUE(caps.direct_io); }
  if (name == "cstdio" || name == "fstream") { EXPECT_FALSE(caps.direct_io); }
  if (config().register_files) {
    EXPECT_TRUE(caps.registered_files) << "EngineOptions::uring_register_files was set but the engine reports "
                                          "that no registered files are in use";
  }
  if (!config().fault_wrapped) {
    EXPECT_EQ(dynamic_cast<SyncEngine*>(&engine()) != nullptr, !caps.asynchronous)
        << "synchronous engines derive from SyncEngine (execute() from many threads)";
  }
  EXPECT_EQ(engine().depth(), EngineOptions{}.depth);
  EXPECT_EQ(engine().in_flight(), 0u);
}

TEST_P(EngineConformance, DirectFileReportsItsAlignment) {
  if (!config().direct) GTEST_SKIP() << "configuration does not use direct I/O";
  const std::string path = scratch_.file("aligned");
  auto f = create_file(path);
  ASSERT_TRUE(f);
  const FileCapabilities& fc = f->capabilities();
  EXPECT_TRUE(fc.direct);
  const Alignment& a = fc.alignment;
  EXPECT_TRUE(is_power_of_two(a.memory)) << "memory alignment " << a.memory;
  EXPECT_TRUE(is_power_of_two(a.offset)) << "offset alignment " << a.offset;
  EXPECT_TRUE(is_power_of_two(a.length)) << "length alignment " << a.length;
  // A real disk file system never allows byte-granular O_DIRECT offsets: 1 would mean the
  // alignment was not discovered at all.
  EXPECT_GT(a.offset, 1u) << "source " << a.source;
  EXPECT_STRNE(a.source, "none");
}

// reap(min = 0) must return at once with 0 when nothing is in flight (no waiting, no hang).
TEST_P(EngineConformance, ReapWithNothingInFlightReturnsZero) {
  Completion out[4];
  EXPECT_EQ(engine().in_flight(), 0u);
  EXPECT_EQ(engine().reap(out, 4, 0, Timeout(0)), 0u);
  EXPECT_EQ(engine().reap(out, 4, 0, kForever), 0u) << "min = 0 never waits";
  // Nothing can arrive, so even min = 1 returns 0 at once (bounded here, so a bug fails, not hangs).
  EXPECT_EQ(engine().reap(out, 4, 1, std::chrono::seconds(2)), 0u);

  // The same once a request has come and gone.
  const std::string path = scratch_.file("reap");
  auto f = create_file(path);
  ASSERT_TRUE(f);
  TestBuffer b(4096);
  fill_pattern(b.at(), 0, 4096, 1);
  Request w = make_request(Op::write, f.get(), b.at(), 0, 4096, 11);
  expect_result(w, run(w), 4096);
  EXPECT_EQ(engine().in_flight(), 0u);
  EXPECT_EQ(engine().reap(out, 4, 0, Timeout(0)), 0u);
  EXPECT_EQ(engine().reap(out, 4, 0, kForever), 0u);
}

TEST_P(EngineConformance, WriteThenReadRoundTrip) {
  const std::string path = scratch_.file("roundtrip");
  auto f = create_file(path);
  ASSERT_TRUE(f);
  const std::size_t total = MiB + 256 * KiB;
  TestBuffer out(total), in(total);
  fill_pattern(out.at(), 0, total, 1);
  std::memset(in.at(), 0xEE, total);

  std::vector<Request> writes = {make_request(Op::write, f.get(), out.at(), 0, MiB, 1),
                                 make_request(Op::write, f.get(), out.at() + MiB, MiB, 256 * KiB, 2)};
  auto wc = run(writes);
  expect_result(writes[0], wc[0], MiB);
  expect_result(writes[1], wc[1], 256 * KiB);

  std::vector<Request> reads = {make_request(Op::read, f.get(), in.at(), 0, MiB, 3),
                                make_request(Op::read, f.get(), in.at() + MiB, MiB, 256 * KiB, 4)};
  auto rc = run(reads);
  expect_result(reads[0], rc[0], MiB);
  expect_result(reads[1], rc[1], 256 * KiB);
  EXPECT_EQ(engine().close(*f), std::error_code());
  if (!stores_data()) GTEST_SKIP() << kNoData << " (counts were checked)";

  EXPECT_EQ(mismatch(in.at(), out.at(), total), "") << "read back through the engine";
  expect_file_equals(path, std::vector<std::uint8_t>(out.at(), out.at() + total), "after the engine's writes: ");

  // A fresh read-only handle sees the same bytes.
  auto g = open_file(path, Open::read);
  ASSERT_TRUE(g);
  std::memset(in.at(), 0, total);
  Request r = make_request(Op::read, g.get(), in.at(), 0, total, 5);
  expect_result(r, run(r), static_cast<std::int64_t>(total));
  EXPECT_EQ(mismatch(in.at(), out.at(), total), "") << "read back through a new handle";
}

// Unaligned memory, offsets and lengths, with and without direct I/O. A write whose ends are
// not block-aligned must leave the neighbouring bytes as they were (read-modify-write on a
// direct file).
TEST_P(EngineConformance, UnalignedWritesPreserveNeighbouringBytesAndReadBack) {
  const std::string path = scratch_.file("unaligned");
  std::vector<std::uint8_t> model = pattern(0, 64 * KiB, 100);
  write_file(path, model);
  auto f = open_file(path, Open::read | Open::write);
  ASSERT_TRUE(f);

  struct Case {
    std::size_t misalign;
    std::uint64_t offset;
    std::size_t length;
  };
  const Case cases[] = {
      {1, 4097, 1000},      {1, 4097, 5000},        {0, 4097, 1000}, {0, 4097, 5000},
      {1, 4096, 4096},      // only the memory is unaligned
      {0, 0, 1000},         // only the length is unaligned
      {3, 511, 1},          {0, 8191, 2},  // one byte each side of a block boundary
      {5, 12288, 1},        {1, 3 * 4096 + 1, 3 * 4096},
      {1, 60000, 5536},     // ends exactly at end of file
      {7, 65000, 1000},     // crosses end of file: the file grows to 66000
  };
  std::uint64_t seed = 200;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "write misalign=" << c.misalign << " offset=" << c.offset
                                      << " length=" << c.length);
    TestBuffer b(c.length + 16);
    fill_pattern(b.at(c.misalign), c.offset, c.length, ++seed);
    Request w = make_request(Op::write, f.get(), b.at(c.misalign), c.offset, c.length, seed);
    expect_result(w, run(w), static_cast<std::int64_t>(c.length));
    model_write(model, c.offset, b.at(c.misalign), c.length);
    if (stores_data()) {
      publish(f.get());
      expect_file_equals(path, model);
    }
  }

  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "read misalign=" << c.misalign << " offset=" << c.offset
                                      << " length=" << c.length);
    TestBuffer b(c.length + 16);
    Request r = make_request(Op::read, f.get(), b.at(c.misalign), c.offset, c.length, 1);
    const std::vector<std::uint8_t> want = model_read(model, c.offset, c.length);
    expect_result(r, run(r), static_cast<std::int64_t>(stores_data() ? want.size() : c.length));
    if (stores_data()) { EXPECT_EQ(mismatch(b.at(c.misalign), want.data(), want.size(), c.offset), ""); }
  }
  if (!stores_data()) GTEST_SKIP() << kNoData << " (counts were checked)";
  EXPECT_EQ(model.size(), 66000u);
}

// A file opened for writing only: on a direct file the read-modify-write of an unaligned
// write still has to read its edge blocks, so the engine must be able to (the user's reads stay
// refused).
TEST_P(EngineConformance, UnalignedWritesToAWriteOnlyFileLand) {
  const std::string path = scratch_.file("unaligned_write_only");
  std::vector<std::uint8_t> model = pattern(0, 3 * 4096, 300);
  write_file(path, model);
  auto f = open_file(path, Open::write);
  ASSERT_TRUE(f);
  std::uint64_t seed = 301;
  for (const auto& [offset, length] : {std::pair<std::uint64_t, std::size_t>{100, 10}, {4000, 200}, {12000, 500}}) {
    SCOPED_TRACE(::testing::Message() << "write offset=" << offset << " length=" << length);
    TestBuffer b(length);
    fill_pattern(b.at(), offset, length, ++seed);
    Request w = make_request(Op::write, f.get(), b.at(), offset, length, seed);
    expect_result(w, run(w), static_cast<std::int64_t>(length));
    model_write(model, offset, b.at(), length);
  }
  TestBuffer in(16);
  Request r = make_request(Op::read, f.get(), in.at(), 0, 16, 9);
  expect_result(r, run(r), -EBADF);
  EXPECT_EQ(engine().close(*f), std::error_code());
  if (!stores_data()) GTEST_SKIP() << kNoData << " (results were checked)";
  expect_file_equals(path, model);
}

// Non-overlapping unaligned writes submitted together share edge blocks on a direct file; in
// flight at once they must not undo each other (a read-modify-write must not write back a
// stale copy of its neighbour's bytes). Appends in one batch must leave the largest end as size.
TEST_P(EngineConformance, UnalignedWritesInOneBatchAllLand) {
  if (!stores_data()) GTEST_SKIP() << kNoData;
  const std::string path = scratch_.file("batch");
  std::vector<std::uint8_t> model = pattern(0, 10000, 300);
  write_file(path, model);
  auto f = open_file(path, Open::read | Open::write);
  ASSERT_TRUE(f);

  struct Piece {
    std::uint64_t offset;
    std::size_t length;
  };
  // Touching neighbours inside the file, then appends past its end (one leaves a hole).
  const std::vector<Piece> rounds[] = {
      {{4097, 1000}, {5097, 5000 - 2000}, {8097, 3}, {8100, 1000}, {100, 10}, {110, 402}},
      {{10000, 1000}, {11000, 1000}, {12000, 100}, {20000, 50}, {12100, 1}},
  };
  std::uint64_t seed = 400;
  for (const auto& pieces : rounds) {
    std::vector<TestBuffer> buffers;
    std::vector<Request> batch;
    buffers.reserve(pieces.size());
    for (const Piece& p : pieces) {
      buffers.emplace_back(p.length + 8);
      fill_pattern(buffers.back().at(1), p.offset, p.length, ++seed);
      batch.push_back(make_request(Op::write, f.get(), buffers.back().at(1), p.offset, p.length, seed));
    }
    auto done = run(batch);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      expect_result(batch[i], done[i], static_cast<std::int64_t>(pieces[i].length));
      model_write(model, pieces[i].offset, buffers[i].at(1), pieces[i].length);
    }
    publish(f.get());
    expect_file_equals(path, model, "after one batch of unaligned writes: ");
  }
  EXPECT_EQ(file_size(path), 20050);
}

// An unaligned append at end of file must leave the size exactly offset + length: on a direct
// file the aligned block written past the end must be cut back.
TEST_P(EngineConformance, UnalignedAppendLeavesExactFileSize) {
  if (!stores_data()) GTEST_SKIP() << kNoData;
  const std::string path = scratch_.file("append");
  std::vector<std::uint8_t> model = pattern(0, 10000, 500);
  write_file(path, model);
  auto f = open_file(path, Open::read | Open::write);
  ASSERT_TRUE(f);

  struct Step {
    std::size_t misalign;
    std::uint64_t offset;
    std::size_t length;
  };
  const Step steps[] = {
      {1, 10000, 1000},  // from an unaligned end of file
      {0, 11000, 5000},
      {3, 20000, 1},     // past the end: leaves a hole
      {1, 20001, 4095},
      {0, 24096, 4096},
      {0, 28672, 512},   // aligned offset and length past an unaligned end: a hole again
      {0, 100, 200},     // inside the file: the size must not change
  };
  std::uint64_t seed = 600;
  for (const Step& s : steps) {
    SCOPED_TRACE(::testing::Message() << "append misalign=" << s.misalign << " offset=" << s.offset
                                      << " length=" << s.length);
    TestBuffer b(s.length + 8);
    fill_pattern(b.at(s.misalign), s.offset, s.length, ++seed);
    Request w = make_request(Op::write, f.get(), b.at(s.misalign), s.offset, s.length, seed);
    expect_result(w, run(w), static_cast<std::int64_t>(s.length));
    model_write(model, s.offset, b.at(s.misalign), s.length);
    publish(f.get());
    EXPECT_EQ(file_size(path), static_cast<std::int64_t>(model.size())) << "stat size after the append";
  }
  expect_file_equals(path, model);
}

// A read that reaches end of file returns the bytes up to it; one entirely past it returns 0.
TEST_P(EngineConformance, ShortReadAtEndOfFile) {
  const std::string path = scratch_.file("eof");
  const std::vector<std::uint8_t> model = pattern(0, 10000, 700);
  write_file(path, model);
  auto f = open_file(path, Open::read);
  ASSERT_TRUE(f);

  struct Case {
    std::size_t misalign;
    std::uint64_t offset;
    std::size_t length;
    std::int64_t expected;
  };
  const Case cases[] = {
      {0, 8000, 4096, 2000}, {1, 8000, 4096, 2000}, {0, 9999, 1, 1},       {1, 9999, 4096, 1},
      {0, 10000, 4096, 0},   {1, 10000, 1, 0},      {0, 20000, 100, 0},    {0, 1ull << 40, 4096, 0},
      {0, 0, 20000, 10000},  {1, 1, 20000, 9999},   {0, 4096, 8192, 5904}, {0, 8192, 4096, 1808},
  };
  std::uint64_t tag = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "read misalign=" << c.misalign << " offset=" << c.offset
                                      << " length=" << c.length);
    TestBuffer b(c.length + 8);
    Request r = make_request(Op::read, f.get(), b.at(c.misalign), c.offset, c.length, ++tag);
    Completion done = run(r);
    if (!stores_data()) {
      expect_result(r, done, static_cast<std::int64_t>(c.length));  // null: no end of file
      continue;
    }
    expect_result(r, done, c.expected);
    if (c.expected > 0) {
      EXPECT_EQ(mismatch(b.at(c.misalign), model.data() + c.offset, static_cast<std::size_t>(c.expected), c.offset),
                "");
    }
  }
  if (!stores_data()) GTEST_SKIP() << kNoData << " (counts were checked)";
}

// A zero-length read or write completes at once (the next reap(min = 0) returns it) with 0,
// and a zero-length write never changes the file, not even past its end.
TEST_P(EngineConformance, ZeroLengthCompletesAtOnceWithZero) {
  const std::string path = scratch_.file("zero");
  const std::vector<std::uint8_t> model = pattern(0, 8192, 800);
  write_file(path, model);
  auto f = open_file(path, Open::read | Open::write);
  ASSERT_TRUE(f);
  TestBuffer b(4096);
  const Request requests[] = {
      make_request(Op::read, f.get(), b.at(), 0, 0, 1),
      make_request(Op::read, f.get(), b.at(1), 4097, 0, 2),
      make_request(Op::read, f.get(), b.at(), 1ull << 40, 0, 3),
      make_request(Op::write, f.get(), b.at(1), 4097, 0, 4),
      make_request(Op::write, f.get(), b.at(), 100000, 0, 5),  // past the end: must not extend
      make_request(Op::read, f.get(), nullptr, 0, 0, 6),
      make_request(Op::write, f.get(), nullptr, 0, 0, 7),
  };
  for (const Request& r : requests) {
    SCOPED_TRACE(describe(r));
    ASSERT_EQ(engine().submit(&r, 1), 1u);
    Completion c{0, kNeverCompleted};
    const std::size_t got = engine().reap(&c, 1, 0, Timeout(0));
    EXPECT_EQ(got, 1u) << "the completion of a zero-length request was not ready at once";
    if (got == 0) { ASSERT_EQ(engine().reap(&c, 1, 1, kCompletionTimeout), 1u); }
    expect_result(r, c, 0);
  }
  EXPECT_EQ(engine().in_flight(), 0u);
  if (!stores_data()) GTEST_SKIP() << kNoData << " (counts were checked)";
  publish(f.get());
  expect_file_equals(path, model, "after zero-length writes: ");
}

TEST_P(EngineConformance, FsyncAndFdatasyncAfterWrites) {
  const std::string path = scratch_.file("sync");
  auto f = create_file(path);
  ASSERT_TRUE(f);
  const std::size_t chunk = 64 * KiB;
  TestBuffer b(8 * chunk);
  fill_pattern(b.at(), 0, 8 * chunk, 900);
  auto write_at = [&](std::size_t k, std::uint64_t tag) {
    return make_request(Op::write, f.get(), b.at() + k * chunk, k * chunk, chunk, tag);
  };

  // One at a time.
  Request w0 = write_at(0, 1);
  expect_result(w0, run(w0), chunk);
  Request s0 = make_request(Op::fsync, f.get(), nullptr, 0, 0, 2);
  expect_result(s0, run(s0), 0);
  Request w1 = write_at(1, 3);
  expect_result(w1, run(w1), chunk);
  Request d1 = make_request(Op::fdatasync, f.get(), nullptr, 0, 0, 4);
  expect_result(d1, run(d1), 0);

  // In one batch, and as a linked chain (write -> fsync -> write -> fdatasync).
  for (bool linked : {false, true}) {
    SCOPED_TRACE(linked ? "linked batch" : "batch");
    const std::size_t base = linked ? 6 : 2;
    std::vector<Request> batch = {write_at(base, 10), make_request(Op::fsync, f.get(), nullptr, 0, 0, 11),
                                  write_at(base + 1, 12), make_request(Op::fdatasync, f.get(), nullptr, 0, 0, 13)};
    if (linked)
      for (std::size_t i = 0; i + 1 < batch.size(); ++i) batch[i].link = true;
    auto done = run(batch);
    expect_result(batch[0], done[0], chunk);
    expect_result(batch[1], done[1], 0);
    expect_result(batch[2], done[2], chunk);
    expect_result(batch[3], done[3], 0);
  }
  if (!stores_data()) GTEST_SKIP() << kNoData << " (counts were checked)";
  std::vector<std::uint8_t> model(b.at(), b.at() + 4 * chunk);
  model.resize(6 * chunk, 0);
  model.insert(model.end(), b.at() + 6 * chunk, b.at() + 8 * chunk);
  expect_file_equals(path, model);
}

TEST_P(EngineConformance, OpenWithDsyncWritesDurably) {
  const std::string path = scratch_.file("dsync");
  auto f = open_file(path, Open::read | Open::write | Open::create | Open::dsync);
  ASSERT_TRUE(f);
  EXPECT_TRUE(f->capabilities().dsync);
  TestBuffer b(8192);
  fill_pattern(b.at(1), 4097, 5000, 950);
  Request w = make_request(Op::write, f.get(), b.at(1), 4097, 5000, 1);
  expect_result(w, run(w), 5000);
  if (!stores_data()) GTEST_SKIP() << kNoData << " (counts were checked)";
  std::vector<std::uint8_t> model;
  model_write(model, 4097, b.at(1), 5000);
  expect_file_equals(path, model);
}

// One request of 96 MiB each way, then a 64 MiB one with unaligned memory, offset and length
// (bounced whole on a direct file).
TEST_P(EngineConformance, RequestsOf64MiBAndMore) {
  const std::size_t big = 96 * MiB;
  const std::size_t odd = 64 * MiB + 5;
  const std::string path = scratch_.file("big");
  auto f = create_file(path);
  ASSERT_TRUE(f);
  TestBuffer out(big), in(big);
  fill_pattern(out.at(), 0, big, 1000);

  Request w = make_request(Op::write, f.get(), out.at(), 0, big, 1);
  expect_result(w, run(w), static_cast<std::int64_t>(big));
  Request r = make_request(Op::read, f.get(), in.at(), 0, big, 2);
  expect_result(r, run(r), static_cast<std::int64_t>(big));
  if (stores_data()) { EXPECT_EQ(mismatch(in.at(), out.at(), big), "") << "96 MiB read back"; }

  // Unaligned: out[1, 1 + odd) goes to file offset 4097, then comes back into in.at(3).
  Request uw = make_request(Op::write, f.get(), out.at(1), 4097, odd, 3);
  expect_result(uw, run(uw), static_cast<std::int64_t>(odd));
  Request ur = make_request(Op::read, f.get(), in.at(3), 4097, odd, 4);
  expect_result(ur, run(ur), static_cast<std::int64_t>(odd));
  if (!stores_data()) GTEST_SKIP() << kNoData << " (counts were checked)";
  EXPECT_EQ(mismatch(in.at(3), out.at(1), odd, 4097), "") << "unaligned 64 MiB read back";

  std::vector<std::uint8_t> model(out.at(), out.at() + big);
  std::memcpy(model.data() + 4097, out.at(1), odd);
  publish(f.get());
  expect_file_equals(path, model);
}

// libaio and uring: the eventfd becomes readable when a completion arrives, for every kind of
// request, and a poll loop of the documented shape (poll, read the eventfd to drain it, reap with
// min = 0 until it returns 0) collects every completion, bounced direct writes included (their
// read-modify-write takes several native completions). The others have no eventfd (-1).
TEST_P(EngineConformance, EventfdBecomesReadableWhenACompletionArrives) {
  const int efd = engine().eventfd();
  if (!engine().capabilities().eventfd) {
    EXPECT_EQ(efd, -1) << "an engine without Capabilities::eventfd returns -1";
    return;
  }
  ASSERT_GE(efd, 0);
  auto readable = [&](int timeout_ms) {
    pollfd p{efd, POLLIN, 0};
    const int n = ::poll(&p, 1, timeout_ms);
    return n == 1 && (p.revents & POLLIN) != 0;
  };
  EXPECT_FALSE(readable(0)) << "eventfd readable before any request";

  const std::string path = scratch_.file("eventfd");
  auto f = create_file(path);
  ASSERT_TRUE(f);
  TestBuffer b(64 * KiB);
  fill_pattern(b.at(), 0, 64 * KiB, 1100);
  const Request requests[] = {
      make_request(Op::write, f.get(), b.at(), 0, 64 * KiB, 1),
      make_request(Op::read, f.get(), b.at(), 0, 64 * KiB, 2),
      make_request(Op::fsync, f.get(), nullptr, 0, 0, 3),
      make_request(Op::fdatasync, f.get(), nullptr, 0, 0, 4),
      make_request(Op::write, f.get(), b.at(1), 4097, 1000, 5),  // bounced with read-modify-write when direct
      make_request(Op::read, f.get(), b.at(3), 4097, 1000, 6),   // bounced when direct
  };
  const std::int64_t expected[] = {64 * KiB, 64 * KiB, 0, 0, 1000, 1000};
  for (std::size_t i = 0; i < std::size(requests); ++i) {
    SCOPED_TRACE(describe(requests[i]));
    ASSERT_EQ(engine().submit(&requests[i], 1), 1u);
    Completion c{0, kNeverCompleted};
    std::size_t got = 0;
    for (int wakeups = 0; got == 0 && wakeups < 16; ++wakeups) {
      if (!readable(10000)) {
        ADD_FAILURE() << "eventfd not readable within 10 s while the request is in flight (wakeup " << wakeups
                      << ")";
        break;
      }
      std::uint64_t counter = 0;
      EXPECT_EQ(::read(efd, &counter, sizeof counter), static_cast<ssize_t>(sizeof counter));
      got = engine().reap(&c, 1, 0, Timeout(0));
    }
    if (got == 0) {
      ADD_FAILURE() << "the poll loop did not collect the completion";
      ASSERT_EQ(engine().reap(&c, 1, 1, kCompletionTimeout), 1u);
    }
    expect_result(requests[i], c, expected[i]);
    Completion extra;
    EXPECT_EQ(engine().reap(&extra, 1, 0, Timeout(0)), 0u);
  }
}

// ---------------------------------------------------------------------------------------------
// Open errors

TEST_P(EngineConformance, OpenOfAMissingFileWithoutCreateFailsWithENOENT) {
  if (!stores_data()) GTEST_SKIP() << "null engine never touches the file system (open accepts any path)";
  const std::string path = scratch_.file("does-not-exist");
  for (Open mode : {Open::read, Open::write, Open::read | Open::write}) {
    auto opened = engine().open(path, with_config(mode));
    ASSERT_FALSE(opened) << "open of a missing file without Open::create succeeded";
    EXPECT_EQ(opened.error().code, std::error_code(ENOENT, std::generic_category())) << opened.error().message;
    EXPECT_NE(opened.error().message.find(path), std::string::npos)
        << "the message names the path: " << opened.error().message;
  }
  EXPECT_EQ(file_size(path), -1) << "a failed open created the file";
}

TEST_P(EngineConformance, OpenNeitherForReadingNorWritingFails) {
  const std::string path = scratch_.file("nomode");
  auto opened = engine().open(path, OpenMode(Open::create));
  ASSERT_FALSE(opened);
  EXPECT_EQ(opened.error().code, std::error_code(EINVAL, std::generic_category())) << opened.error().message;
  EXPECT_NE(opened.error().message.find(path), std::string::npos) << opened.error().message;
}

// Engines without direct I/O refuse Open::direct with a message that says so.
TEST_P(EngineConformance, OpenDirectOnAnEngineWithoutDirectIoSaysSo) {
  if (engine().capabilities().direct_io) GTEST_SKIP() << "engine '" << engine().name() << "' supports direct I/O";
  const std::string path = scratch_.file("direct");
  auto opened = engine().open(path, OpenMode(Open::read | Open::write | Open::create | Open::direct));
  ASSERT_FALSE(opened) << "engine without direct_io opened a file with Open::direct";
  EXPECT_EQ(opened.error().code, std::error_code(EINVAL, std::generic_category())) << opened.error().message;
  EXPECT_NE(lowercase(opened.error().message).find("direct"), std::string::npos) << opened.error().message;
  EXPECT_NE(opened.error().message.find(path), std::string::npos) << opened.error().message;
}

// tmpfs (/dev/shm): since Linux 6.6 it accepts O_DIRECT; before, open fails with EINVAL. Either
// the file works (unaligned I/O included), or the message says what is wrong: never a bare EINVAL.
// A check of the direct configurations that opens its file outside the scratch directory: it
// runs whatever file system the scratch directory is on.
class EngineDirectElsewhere : public EngineTest {
 protected:
  EngineDirectElsewhere() { needs_direct_scratch_ = false; }
};

TEST_P(EngineDirectElsewhere, OpenDirectOnTmpfsWorksOrSaysWhy) {
  if (!config().direct) GTEST_SKIP() << "configuration does not use direct I/O";
  struct statfs fs {};
  if (::statfs("/dev/shm", &fs) != 0 || fs.f_type != 0x01021994 /* TMPFS_MAGIC */)
    GTEST_SKIP() << "/dev/shm is not a tmpfs here";
  char name[] = "/dev/shm/tai-conform-XXXXXX";
  const int fd = ::mkstemp(name);
  ASSERT_GE(fd, 0);
  ::close(fd);
  const std::string path = name;
  struct Unlink {
    std::string p;
    ~Unlink() { ::unlink(p.c_str()); }
  } cleanup{path};

  auto opened = engine().open(path, OpenMode(Open::read | Open::write | Open::truncate | Open::direct));
  if (!opened) {
    const std::string& m = opened.error().message;
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find("O_DIRECT"), std::string::npos) << "the message says the file system refuses O_DIRECT: " << m;
    EXPECT_NE(m, std::strerror(EINVAL));
    return;
  }
  auto f = std::move(opened.value());
  EXPECT_TRUE(f->capabilities().direct);
  TestBuffer out(8192), in(8192);
  fill_pattern(out.at(1), 4097, 1000, 1200);
  Request w = make_request(Op::write, f.get(), out.at(1), 4097, 1000, 1);
  expect_result(w, run(w), 1000);
  Request r = make_request(Op::read, f.get(), in.at(3), 4097, 1000, 2);
  expect_result(r, run(r), 1000);
  EXPECT_EQ(mismatch(in.at(3), out.at(1), 1000, 4097), "");
  EXPECT_EQ(file_size(path), 5097);
}

// A file system that refuses O_DIRECT (procfs) gets a message that says so, never a bare EINVAL.
TEST_P(EngineConformance, OpenDirectWhereTheFileSystemRefusesItSaysWhy) {
  if (!config().direct) GTEST_SKIP() << "configuration does not use direct I/O";
  const std::string path = "/proc/version";
  {
    const int probe = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (probe >= 0) {
      ::close(probe);
      GTEST_SKIP() << "this kernel accepts O_DIRECT on " << path;
    }
  }
  auto opened = engine().open(path, OpenMode(Open::read | Open::direct));
  ASSERT_FALSE(opened);
  const std::string& m = opened.error().message;
  EXPECT_EQ(opened.error().code, std::error_code(EINVAL, std::generic_category())) << m;
  EXPECT_NE(m.find(path), std::string::npos) << m;
  EXPECT_NE(m.find("O_DIRECT"), std::string::npos) << "the message says the file system refuses O_DIRECT: " << m;
}

// ---------------------------------------------------------------------------------------------
// Vectored writes (Request::iov)

/// One segment of a vectored write: `misalign` bytes past a page boundary, `length` bytes.
struct Segment {
  std::size_t misalign;
  std::size_t length;
};

/// The segments' buffers, filled with the pattern of `seed` for the file range starting at
/// `offset`, and the iovec array naming them.
struct Segments {
  Segments(const std::vector<Segment>& shape, std::uint64_t offset, std::uint64_t seed) {
    buffers.reserve(shape.size());
    std::uint64_t at = offset;
    for (const Segment& s : shape) {
      buffers.emplace_back(s.length + 16);
      fill_pattern(buffers.back().at(s.misalign), at, s.length, seed);
      iov.push_back({buffers.back().at(s.misalign), s.length});
      bytes.insert(bytes.end(), buffers.back().at(s.misalign), buffers.back().at(s.misalign) + s.length);
      at += s.length;
    }
  }
  Request request(EngineFile* f, std::uint64_t offset, std::uint64_t user_data) const {
    Request r = make_request(Op::write, f, nullptr, offset, bytes.size(), user_data);
    r.iov = iov.data();
    r.iov_count = static_cast<std::uint32_t>(iov.size());
    return r;
  }
  std::vector<TestBuffer> buffers;
  std::vector<::iovec> iov;
  std::vector<std::uint8_t> bytes;  // what the segments carry, in order
};

struct VectoredCase {
  const char* what;
  std::uint64_t offset;
  std::vector<Segment> shape;
};

std::vector<VectoredCase> vectored_cases() {
  std::vector<Segment> many(300, Segment{0, 512});
  return {
      // On a direct file: every segment meets the alignment, so the write goes out as it is.
      {"aligned blocks", 8192, {{0, 4096}, {0, 4096}, {0, 8192}, {0, 4096}}},
      // Odd lengths and addresses: a direct file bounces it through one aligned copy.
      {"unaligned segments", 4097, {{1, 1000}, {0, 3000}, {5, 1}, {0, 4096}}},
      {"an empty segment", 0, {{0, 4096}, {0, 0}, {0, 4096}}},
      {"aligned memory, unaligned length", 16384, {{0, 4096}, {0, 100}, {0, 3996}}},
      {"crossing end of file", 62000, {{0, 4096}, {3, 700}}},
      {"300 segments", 20480, many},
  };
}

// Every byte of every segment lands, in order, at the request's offset; nothing around it
// moves; the result is the segments' sum. Through submit/reap and, on a synchronous engine,
// through SyncEngine::execute (the thread-pool queue's path).
TEST_P(EngineConformance, VectoredWritesLandInOrder) {
  auto* sync = dynamic_cast<SyncEngine*>(&engine());
  for (const bool inline_driver : {false, true}) {
    if (inline_driver && sync == nullptr) continue;
    SCOPED_TRACE(inline_driver ? "SyncEngine::execute" : "submit/reap");
    const std::string path = scratch_.file(inline_driver ? "vectored_inline" : "vectored");
    std::vector<std::uint8_t> model = pattern(0, 64 * KiB, 500);
    write_file(path, model);
    auto f = open_file(path, Open::read | Open::write);
    ASSERT_TRUE(f);
    std::uint64_t seed = 510;
    for (const VectoredCase& c : vectored_cases()) {
      SCOPED_TRACE(c.what);
      const Segments segs(c.shape, c.offset, ++seed);
      const Request w = segs.request(f.get(), c.offset, seed);
      const auto want = static_cast<std::int64_t>(segs.bytes.size());
      expect_result(w, inline_driver ? sync->execute(w) : run(w), want);
      model_write(model, c.offset, segs.bytes.data(), segs.bytes.size());
      if (stores_data()) {
        publish(f.get());
        expect_file_equals(path, model);
      }
    }
    // Read back through the engine too (a direct file's reads see what its writes wrote).
    TestBuffer in(model.size());
    Request r = make_request(Op::read, f.get(), in.at(), 0, model.size(), 9);
    expect_result(r, run(r), static_cast<std::int64_t>(model.size()));
    if (stores_data()) { EXPECT_EQ(mismatch(in.at(), model.data(), model.size()), ""); }
    EXPECT_EQ(engine().close(*f), std::error_code());
  }
}

// Vectored writes in one batch, with plain ones between them, each completing on its own.
TEST_P(EngineConformance, VectoredAndPlainWritesInOneBatch) {
  const std::string path = scratch_.file("vectored_batch");
  auto f = create_file(path);
  ASSERT_TRUE(f);
  std::vector<std::uint8_t> model;
  std::vector<Segments> vec;
  vec.reserve(4);
  std::vector<TestBuffer> plain;
  plain.reserve(4);
  std::vector<Request> batch;
  for (std::uint64_t k = 0; k < 4; ++k) {
    const std::uint64_t off = k * 32 * KiB;
    vec.emplace_back(std::vector<Segment>{{0, 4096}, {k, 5000}, {0, 4096}}, off, 600 + k);
    batch.push_back(vec.back().request(f.get(), off, 600 + k));
    plain.emplace_back(4096);
    fill_pattern(plain.back().at(), off + 16 * KiB, 4096, 700 + k);
    batch.push_back(make_request(Op::write, f.get(), plain.back().at(), off + 16 * KiB, 4096, 700 + k));
  }
  auto done = run(batch);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    expect_result(batch[i], done[i], static_cast<std::int64_t>(batch[i].length));
    std::vector<std::uint8_t> bytes(batch[i].length);
    copy_request_bytes(batch[i], bytes.data());
    model_write(model, batch[i].offset, bytes.data(), bytes.size());
  }
  if (!stores_data()) GTEST_SKIP() << kNoData << " (results were checked)";
  publish(f.get());
  expect_file_equals(path, model);
}

// What a vectored request may not be: each completes at once with its error, on both drivers,
// and writes nothing.
TEST_P(EngineConformance, InvalidVectoredRequestsFailAndWriteNothing) {
  const std::string path = scratch_.file("vectored_invalid");
  const std::vector<std::uint8_t> model = pattern(0, 16 * KiB, 800);
  write_file(path, model);
  auto f = open_file(path, Open::read | Open::write);
  ASSERT_TRUE(f);
  const Segments segs({{0, 4096}, {0, 4096}}, 0, 801);
  std::vector<::iovec> too_many(Request::kMaxSegments + 1, ::iovec{segs.iov[0].iov_base, 1});
  std::vector<::iovec> null_base = {{nullptr, 4096}};

  struct Bad {
    const char* what;
    Request r;
    std::int64_t want;
  };
  std::vector<Bad> cases;
  Request read = segs.request(f.get(), 0, 1);
  read.op = Op::read;
  cases.push_back({"a vectored read", read, -EINVAL});
  Request longer = segs.request(f.get(), 0, 2);
  longer.length += 1;
  cases.push_back({"length above the segments' sum", longer, -EINVAL});
  Request shorter = segs.request(f.get(), 0, 3);
  shorter.length -= 1;
  cases.push_back({"length below the segments' sum", shorter, -EINVAL});
  Request no_array = segs.request(f.get(), 0, 4);
  no_array.iov = nullptr;
  cases.push_back({"segments without an array", no_array, -EFAULT});
  Request many = make_request(Op::write, f.get(), nullptr, 0, too_many.size(), 5);
  many.iov = too_many.data();
  many.iov_count = static_cast<std::uint32_t>(too_many.size());
  cases.push_back({"more than kMaxSegments", many, -EINVAL});
  Request hole = make_request(Op::write, f.get(), nullptr, 0, 4096, 6);
  hole.iov = null_base.data();
  hole.iov_count = 1;
  cases.push_back({"a segment without memory", hole, -EFAULT});
  Request sync = segs.request(f.get(), 0, 7);
  sync.op = Op::fsync;
  cases.push_back({"an fsync with segments", sync, -EINVAL});

  auto* inline_engine = dynamic_cast<SyncEngine*>(&engine());
  for (const Bad& b : cases) {
    SCOPED_TRACE(b.what);
    expect_result(b.r, run(b.r), b.want);
    if (inline_engine != nullptr) expect_result(b.r, inline_engine->execute(b.r), b.want);
  }
  // A read-only file refuses a vectored write as it refuses a plain one.
  auto ro = open_file(path, Open::read);
  ASSERT_TRUE(ro);
  Request w = segs.request(ro.get(), 0, 8);
  expect_result(w, run(w), -EBADF);
  EXPECT_EQ(engine().close(*f), std::error_code());
  if (!stores_data()) GTEST_SKIP() << kNoData << " (results were checked)";
  expect_file_equals(path, model, "after refused requests: ");
}

// An injected short write of a vectored request: the fault engine cuts the segment array, the
// result is fewer bytes than asked, and exactly that prefix is on disk (plain and bounced).
TEST_P(EngineConformance, ShortVectoredWriteReportsWhatLanded) {
  for (const auto* shape_name : {"aligned", "unaligned"}) {
    SCOPED_TRACE(shape_name);
    const bool aligned = std::string(shape_name) == "aligned";
    engines::FaultRule rule;
    rule.op = engines::FaultOp::write;
    rule.effect = engines::FaultRule::Effect::short_half;
    rule.once = true;
    auto inner = make_engine(config().engine, options_for(config()));
    ASSERT_TRUE(inner) << inner.error().message;
    auto e = engines::make_fault(std::move(inner.value()), {rule});
    const std::string path = scratch_.file(std::string("vectored_short_") + shape_name);
    std::vector<std::uint8_t> model = pattern(0, 32 * KiB, 900);
    write_file(path, model);
    auto f = open_file(path, Open::read | Open::write, e.get());
    ASSERT_TRUE(f);
    const std::uint64_t off = aligned ? 4096 : 4097;
    const Segments segs(aligned ? std::vector<Segment>{{0, 4096}, {0, 4096}, {0, 4096}, {0, 4096}}
                                : std::vector<Segment>{{1, 3000}, {0, 5000}, {3, 4000}},
                        off, 901);
    const Request w = segs.request(f.get(), off, 77);
    const Completion c = run_one(*e, w);
    EXPECT_GT(c.result, 0) << result_text(c.result);
    EXPECT_LT(c.result, static_cast<std::int64_t>(segs.bytes.size()));
    if (c.result > 0) model_write(model, off, segs.bytes.data(), static_cast<std::size_t>(c.result));
    const bool data = e->capabilities().stores_data;
    // Visible to a plain read (cstdio and fstream keep completed writes in their stream).
    Request sync = make_request(Op::fdatasync, f.get(), nullptr, 0, 0, 76);
    EXPECT_EQ(run_one(*e, sync).result, 0);
    if (data) expect_file_equals(path, model, "after the short write, result " + std::to_string(c.result) + ": ");
    // The next vectored write is whole (the rule fired once).
    const Request again = segs.request(f.get(), off, 78);
    EXPECT_EQ(run_one(*e, again).result, static_cast<std::int64_t>(segs.bytes.size()));
    EXPECT_EQ(e->close(*f), std::error_code());
    model_write(model, off, segs.bytes.data(), segs.bytes.size());
    if (data) expect_file_equals(path, model, "after the whole write: ");
  }
}

/// A synchronous engine over memory whose every write moves at most `chunk` bytes (a vectored
/// one the first `chunk` bytes of its segments, as a short pwritev would): the base must
/// continue a short vectored write from the right segment and byte.
class ChunkyEngine final : public SyncEngine {
 public:
  ChunkyEngine(std::uint64_t chunk, bool vectored)
      : SyncEngine("chunky", caps(vectored), EngineOptions{}), chunk_(chunk) {}
  std::vector<std::uint8_t> bytes;
  std::uint64_t native_writes = 0;
  std::uint64_t vectored_native_writes = 0;

 private:
  struct File final : EngineFile {
    File(Engine& e, const std::string& p, OpenMode m) : EngineFile(e, p, m, FileCapabilities{}) {}
  };
  static Capabilities caps(bool vectored) {
    Capabilities c;
    c.vectored_writes = vectored;
    return c;
  }
  Result<std::unique_ptr<EngineFile>> do_open(const std::string& path, OpenMode mode) override {
    return std::unique_ptr<EngineFile>(std::make_unique<File>(*this, path, mode));
  }
  std::error_code do_close(EngineFile&) override { return {}; }
  std::int64_t transfer(const Request& r) override {
    if (r.op != Op::write) return 0;
    std::lock_guard<std::mutex> g(mu_);
    ++native_writes;
    if (r.iov_count != 0) ++vectored_native_writes;
    const std::uint64_t n = std::min(r.length, chunk_);
    std::vector<std::uint8_t> all(r.length);
    EXPECT_EQ(copy_request_bytes(r, all.data()), r.length);
    EXPECT_EQ(r.iov_count != 0 ? segment_bytes(r) : r.length, r.length) << "the array the base passes on";
    if (bytes.size() < r.offset + n) bytes.resize(r.offset + n);
    std::memcpy(bytes.data() + r.offset, all.data(), n);
    return static_cast<std::int64_t>(n);
  }
  std::uint64_t chunk_;
  std::mutex mu_;
};

// An engine without Capabilities::vectored_writes (one written before vectored requests) gets
// one plain write of the segments' bytes instead, continued the same way.
TEST(VectoredShortTransfers, TheBaseContinuesFromTheRightSegmentAndByte) {
  for (const bool vectored : {true, false})
  for (const std::uint64_t chunk : {1u, 700u, 4096u, 5000u}) {
    for (const bool inline_driver : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "chunk " << chunk << (inline_driver ? " execute" : " submit/reap")
                                        << (vectored ? " vectored engine" : " engine without vectored writes"));
      ChunkyEngine e(chunk, vectored);
      auto f = e.open("mem", OpenMode(Open::write));
      ASSERT_TRUE(f);
      const Segments segs({{1, 1000}, {0, 0}, {0, 4096}, {7, 3}, {0, 6000}}, 100, 42);
      const Request w = segs.request(f.value().get(), 100, 1);
      const Completion c = inline_driver ? e.execute(w) : run_one(e, w);
      EXPECT_EQ(c.result, static_cast<std::int64_t>(segs.bytes.size()));
      ASSERT_EQ(e.bytes.size(), 100 + segs.bytes.size());
      EXPECT_EQ(mismatch(e.bytes.data() + 100, segs.bytes.data(), segs.bytes.size(), 100), "");
      EXPECT_EQ(e.native_writes, (segs.bytes.size() + chunk - 1) / chunk);
      if (vectored) {
        EXPECT_EQ(e.vectored_native_writes, e.native_writes) << "continuations stay vectored";
      } else {
        EXPECT_EQ(e.vectored_native_writes, 0u) << "the base copies the segments for this engine";
      }
      EXPECT_EQ(e.close(*f.value()), std::error_code());
    }
  }
}

TAI_INSTANTIATE_ENGINE_CONFIGS(EngineConformance);
TAI_INSTANTIATE_ENGINE_CONFIGS(EngineDirectElsewhere);

}  // namespace
}  // namespace tai::test
