// What the cstdio and fstream engines share beyond the cross-engine conformance suite: both keep
// a user-space buffer in front of the file (stdio's, the filebuf's) under one lock per file. So
// neither can do direct I/O, writers on several threads must not tear each other, a failed flush must come out of the next
// sync or of a close that no sync preceded, a read after end of file must see the file grow, and
// on a full file system a failed flush is reported once and leaves the stream writing where it is
// asked. What differs between the two buffers is tested in cstdio_engine_test.cpp and
// fstream_engine_test.cpp.
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "engines/cstdio/cstdio_engine.hpp"
#include "engines/fstream/fstream_engine.hpp"
#include "support/engine_test_support.hpp"
#include "support/small_fs.hpp"
#include "support/test_env.hpp"

namespace {

using tai::Completion;
using tai::Engine;
using tai::Open;
using tai::Op;
using tai::Request;
using tai::test::kernel_view;
using tai::test::run_request;
using tai::test::write_in_pieces;

struct StreamEngineKind {
  std::string name;
  std::function<std::unique_ptr<Engine>()> make;
  // How /dev/full is opened for writing: the fstream engine's filebuf asks for read and write.
  Open dev_full_write;
  // The largest write the buffer keeps: stdio copies a write that fits its 64 KiB buffer, while
  // libstdc++'s filebuf sends one of 1 KiB or more straight to write(2), with what it held.
  std::size_t buffered_piece;
};

std::vector<StreamEngineKind> stream_engine_kinds() {
  return {{"cstdio", [] { return tai::engines::make_cstdio({}); }, Open::write, tai::engines::CstdioEngine::kStreamBufferSize},
          {"fstream", [] { return tai::engines::make_fstream({}); }, Open::read | Open::write, 512}};
}

// gtest prints the parameter in test listings and failures: the engine's name, not its bytes.
void PrintTo(const StreamEngineKind& kind, std::ostream* os) { *os << kind.name; }

std::string stream_engine_name(const testing::TestParamInfo<StreamEngineKind>& info) { return info.param.name; }

class StreamEngine : public testing::TestWithParam<StreamEngineKind> {};

TEST_P(StreamEngine, CapabilitiesAndDirectIsRefusedWithAMessage) {
  // A stream's buffer flushes unaligned pieces: neither engine can do direct I/O.
  tai::test::ScratchDir dir;
  auto engine = GetParam().make();
  EXPECT_EQ(engine->name(), GetParam().name);
  EXPECT_FALSE(engine->capabilities().direct_io);
  EXPECT_TRUE(engine->capabilities().durable_sync);
  EXPECT_FALSE(engine->capabilities().asynchronous);
  auto f = engine->open(dir.file("d"), {Open::read | Open::write | Open::create | Open::direct});
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error().code, std::errc::invalid_argument);
  EXPECT_NE(f.error().message.find("engine '" + GetParam().name + "' cannot do direct I/O"), std::string::npos)
      << f.error().message;
  EXPECT_FALSE(std::filesystem::exists(dir.file("d"))) << "a refused open must not create the file";
}

TEST_P(StreamEngine, ConcurrentWritersToOneFileDoNotTearEachOther) {
  // execute() from several threads at once on one stream: without the per-file lock, one
  // thread's seek lands between another's seek and write and data goes to wrong offsets.
  tai::test::ScratchDir dir;
  const std::string path = dir.file("threads");
  auto engine = GetParam().make();
  auto* sync = dynamic_cast<tai::SyncEngine*>(engine.get());
  ASSERT_NE(sync, nullptr);
  auto f = engine->open(path, {Open::read | Open::write | Open::create});
  ASSERT_TRUE(f);
  // A record size that is no divisor of the buffer's, so that records straddle its flushes.
  constexpr int kThreads = 4, kRecords = 500, kRecordSize = 97;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<char> record(kRecordSize, static_cast<char>('A' + t));
      for (int i = 0; i < kRecords; ++i) {
        // Records interleave: thread t owns every kThreads-th slot.
        const std::uint64_t slot = static_cast<std::uint64_t>(i) * kThreads + static_cast<std::uint64_t>(t);
        Completion c = sync->execute(Request{Op::write, f->get(), record.data(), slot * kRecordSize, kRecordSize, 0});
        if (c.result != kRecordSize) ADD_FAILURE() << "write returned " << c.result;
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0).result, 0);
  const std::string content = kernel_view(path);
  ASSERT_EQ(content.size(), static_cast<std::size_t>(kThreads * kRecords * kRecordSize));
  for (std::size_t slot = 0; slot < static_cast<std::size_t>(kThreads * kRecords); ++slot) {
    const char want = static_cast<char>('A' + slot % kThreads);
    for (std::size_t k = 0; k < kRecordSize; ++k)
      ASSERT_EQ(content[slot * kRecordSize + k], want) << "slot " << slot << " byte " << k;
  }
}

TEST_P(StreamEngine, AFailedFlushIsReportedByTheNextSyncAndByACloseThatNoSyncPreceded) {
  // /dev/full accepts the buffer's bytes and refuses them at flush with ENOSPC: the write itself
  // completes, the error must come out of the next fsync; a failed flush that no sync reported
  // comes out of close.
  auto engine = GetParam().make();
  auto f = engine->open("/dev/full", {GetParam().dev_full_write});
  if (!f) GTEST_SKIP() << f.error().message;
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), "lost", 0, 4).result, 4);
  EXPECT_EQ(run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0).result, -ENOSPC);
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), "lost", 0, 4).result, 4);
  EXPECT_EQ(engine->close(**f), std::errc::no_space_on_device);

  // The failed flush of a write that must reposition: the write that caused it fails, and
  // the next sync fails too (the flush dropped bytes of an earlier, completed write).
  auto g = engine->open("/dev/full", {GetParam().dev_full_write});
  ASSERT_TRUE(g) << g.error().message;
  ASSERT_EQ(run_request(*engine, Op::write, g->get(), "lost", 0, 4).result, 4);
  EXPECT_EQ(run_request(*engine, Op::write, g->get(), "moved", 100, 5).result, -ENOSPC);
  EXPECT_EQ(run_request(*engine, Op::fdatasync, g->get(), nullptr, 0, 0).result, -ENOSPC);
}

TEST_P(StreamEngine, SequentialReadAfterEndOfFileSeesTheFileGrow) {
  tai::test::ScratchDir dir;
  const std::string path = dir.file("grow");
  auto engine = GetParam().make();
  auto f = engine->open(path, {Open::read | Open::create});
  ASSERT_TRUE(f);
  char back[8] = {};
  EXPECT_EQ(run_request(*engine, Op::read, f->get(), back, 0, 4).result, 0);
  // Another writer appends; the next read continues at the same position (no seek needed),
  // so only clearing the stream's end-of-file state lets it see the new bytes.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, "grew", 4, 0), 4);
  ::close(fd);
  EXPECT_EQ(run_request(*engine, Op::read, f->get(), back, 0, 4).result, 4);
  EXPECT_STREQ(back, "grew");
}

INSTANTIATE_TEST_SUITE_P(, StreamEngine, testing::ValuesIn(stream_engine_kinds()), stream_engine_name);

// On a really full file system (a 1 MiB tmpfs, root only): what a failed flush leaves behind in the
// stream. glibc drops the buffer's bytes on a failed flush and leaves the stream's position where
// the written part ended, not where the buffered writes ended; libstdc++'s filebuf keeps the bytes
// of a failed flush in its put area (the next flush would write them again, from wherever the
// partial write left the descriptor's offset). Either way the engine must report the failure once
// and then write where it is asked.
class StreamEngineFullDisk : public testing::TestWithParam<StreamEngineKind> {
 protected:
  void SetUp() override {
    if (!fs_.mounted()) GTEST_SKIP() << fs_.skip_reason();
  }
  tai::test::SmallTmpfs fs_{1 << 20};
};

TEST_P(StreamEngineFullDisk, AFailedSyncIsReportedOnceAndTheStreamThenWritesWhereAsked) {
  ASSERT_EQ(fs_.fill("filler", 8192), "");
  const std::string path = fs_.file("data");
  auto engine = GetParam().make();
  auto f = engine->open(path, {Open::read | Open::write | Open::create});
  ASSERT_TRUE(f) << f.error().message;
  const std::string a(32768, 'A'), b(4096, 'B');
  write_in_pieces(*engine, f->get(), a, 0, GetParam().buffered_piece);  // kept by the buffer
  if (HasFatalFailure()) return;
  EXPECT_EQ(run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0).result, -ENOSPC) << "only 8 KiB fit";
  ASSERT_EQ(::unlink(fs_.file("filler").c_str()), 0);
  // The write continues where the last one ended: it must land at 32768 even though the failed
  // flush left the stream or its descriptor at 8192. Then the rewrite a cache does after a
  // failed sync.
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), b.data(), 32768, b.size()).result, 4096);
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), a.data(), 0, a.size()).result, 32768);
  EXPECT_EQ(run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0).result, 0)
      << "the error was reported, the data written again: the stream must not stay failed";
  EXPECT_TRUE(kernel_view(path) == a + b) << "the file lacks data or holds it at the wrong offset";
  EXPECT_FALSE(engine->close(**f));
}

TEST_P(StreamEngineFullDisk, AWriteWhoseFlushFailedIsNeverReportedComplete) {
  ASSERT_EQ(fs_.fill("filler", 16384), "");
  const std::string path = fs_.file("data");
  auto engine = GetParam().make();
  auto f = engine->open(path, {Open::write | Open::create});
  ASSERT_TRUE(f) << f.error().message;
  const std::string a(40000, 'A'), b(40000, 'B');
  write_in_pieces(*engine, f->get(), a, 0, GetParam().buffered_piece);  // kept by the buffer
  if (HasFatalFailure()) return;
  // b overflows stdio's buffer (stdio copies part of b in, flushes, fails and drops the buffer;
  // fwrite then counts the part it had copied as written) or goes to write(2) together with the
  // filebuf's 40000 bytes; either way only 16 KiB fit.
  EXPECT_EQ(run_request(*engine, Op::write, f->get(), b.data(), 40000, b.size()).result, -ENOSPC)
      << "bytes the buffer dropped were reported written";
  EXPECT_EQ(run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0).result, -ENOSPC)
      << "the flush dropped bytes of the first, completed write";
  ASSERT_EQ(::unlink(fs_.file("filler").c_str()), 0);
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), a.data(), 0, a.size()).result, 40000);
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), b.data(), 40000, b.size()).result, 40000);
  EXPECT_EQ(run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0).result, 0);
  EXPECT_TRUE(kernel_view(path) == a + b) << "the file lacks data or holds it at the wrong offset";
  EXPECT_FALSE(engine->close(**f));
}

TEST_P(StreamEngineFullDisk, AWriteThatFailsAloneFailsOnlyItselfAsOnPosix) {
  // Nothing else buffered: the failed write lost only its own bytes and says so; the next sync
  // has nothing to report (pwrite + fsync behave the same way).
  ASSERT_EQ(fs_.fill("filler", 8192), "");
  const std::string path = fs_.file("data");
  auto engine = GetParam().make();
  auto f = engine->open(path, {Open::write | Open::create});
  ASSERT_TRUE(f) << f.error().message;
  const std::string big(100000, 'G');
  EXPECT_EQ(run_request(*engine, Op::write, f->get(), big.data(), 0, big.size()).result, -ENOSPC);
  EXPECT_EQ(run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0).result, 0);
  ASSERT_EQ(::unlink(fs_.file("filler").c_str()), 0);
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), big.data(), 0, big.size()).result, 100000);
  EXPECT_EQ(run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0).result, 0);
  EXPECT_TRUE(kernel_view(path) == big);
  EXPECT_FALSE(engine->close(**f));
}

INSTANTIATE_TEST_SUITE_P(, StreamEngineFullDisk, testing::ValuesIn(stream_engine_kinds()), stream_engine_name);

}  // namespace
