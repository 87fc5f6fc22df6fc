// Behaviour of the fstream engine beyond the cross-engine conformance suite: emulated create,
// truncate and dsync, the "out means truncate" trap, durable sync through the path (and its
// descriptor surviving a rename), no direct I/O, no descriptor, and flush errors that are never lost
// (on /dev/full and on a really full file system, where the stream must work again once the error
// was reported).
#include "engines/fstream/fstream_engine.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support/engine_test_support.hpp"
#include "support/small_fs.hpp"
#include "support/test_env.hpp"

namespace {

using tai::Completion;
using tai::Engine;
using tai::EngineFile;
using tai::Open;
using tai::Op;
using tai::Request;
using tai::test::kernel_view;
using tai::test::run_request;

mode_t current_umask() {
  const mode_t m = ::umask(0);
  ::umask(m);
  return m;
}

TEST(FstreamEngine, CapabilitiesNoDescriptorAndDirectRefused) {
  tai::test::ScratchDir dir;
  auto engine = tai::engines::make_fstream({});
  EXPECT_EQ(engine->name(), "fstream");
  EXPECT_FALSE(engine->capabilities().direct_io);
  EXPECT_TRUE(engine->capabilities().durable_sync);
  auto d = engine->open(dir.file("d"), {Open::read | Open::write | Open::create | Open::direct});
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, std::errc::invalid_argument);
  EXPECT_NE(d.error().message.find("engine 'fstream' cannot do direct I/O"), std::string::npos) << d.error().message;

  auto f = engine->open(dir.file("f"), {Open::read | Open::write | Open::create});
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_EQ(f.value()->fd(), -1);
}

TEST(FstreamEngine, CreateWithPermissionsAndMissingFileErrors) {
  tai::test::ScratchDir dir;
  auto engine = tai::engines::make_fstream({});
  const std::string path = dir.file("created");
  auto missing = engine->open(path, {Open::read | Open::write});
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, std::errc::no_such_file_or_directory);
  EXPECT_NE(missing.error().message.find(path), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(path));

  auto f = engine->open(path, {Open::write | Open::create, 0640});
  ASSERT_TRUE(f) << f.error().message;
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u & ~current_umask());
}

TEST(FstreamEngine, WriteOnlyOpenDoesNotTruncateButTruncateDoes) {
  // std::ios::out alone means "w": it truncates. Opening for write must keep the contents.
  tai::test::ScratchDir dir;
  const std::string path = dir.file("keep");
  auto engine = tai::engines::make_fstream({});
  {
    auto f = engine->open(path, {Open::write | Open::create});
    ASSERT_TRUE(f);
    ASSERT_EQ(run_request(*engine, Op::write, f->get(), "0123456789", 0, 10).result, 10);
    EXPECT_FALSE(engine->close(**f));
  }
  {
    auto f = engine->open(path, {Open::write});
    ASSERT_TRUE(f);
    ASSERT_EQ(run_request(*engine, Op::write, f->get(), "ab", 4, 2).result, 2);
  }  // destroyed without close(): flushed
  EXPECT_EQ(kernel_view(path), "0123ab6789");
  {
    auto f = engine->open(path, {Open::write | Open::truncate});
    ASSERT_TRUE(f);
    EXPECT_EQ(kernel_view(path), "");
    ASSERT_EQ(run_request(*engine, Op::write, f->get(), "new", 0, 3).result, 3);
  }
  EXPECT_EQ(kernel_view(path), "new");
}

TEST(FstreamEngine, DurableSyncThroughThePath) {
  tai::test::ScratchDir dir;
  const std::string path = dir.file("sync");
  auto engine = tai::engines::make_fstream({});
  auto f = engine->open(path, {Open::read | Open::write | Open::create});
  ASSERT_TRUE(f);
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), "buffered", 0, 8).result, 8);
  EXPECT_EQ(kernel_view(path), "") << "still in the filebuf";
  ASSERT_EQ(run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0).result, 0);
  EXPECT_EQ(kernel_view(path), "buffered");

  // The sync descriptor was opened with the file: a rename does not make fsync miss the file.
  const std::string moved = dir.file("moved");
  ASSERT_EQ(::rename(path.c_str(), moved.c_str()), 0);
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), "!", 8, 1).result, 1);
  ASSERT_EQ(run_request(*engine, Op::fdatasync, f->get(), nullptr, 0, 0).result, 0);
  EXPECT_EQ(kernel_view(moved), "buffered!");
}

TEST(FstreamEngine, DsyncIsEmulatedPerWrite) {
  tai::test::ScratchDir dir;
  const std::string path = dir.file("dsync");
  auto engine = tai::engines::make_fstream({});
  auto f = engine->open(path, {Open::write | Open::create | Open::dsync | Open::dontneed});
  ASSERT_TRUE(f);
  EXPECT_TRUE(f.value()->capabilities().dsync);
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), "now", 0, 3).result, 3);
  EXPECT_EQ(kernel_view(path), "now");
}

TEST(FstreamEngine, ReadAfterWriteAndEndOfFileDoNotPoisonTheStream) {
  tai::test::ScratchDir dir;
  auto engine = tai::engines::make_fstream({});
  auto f = engine->open(dir.file("rw"), {Open::read | Open::write | Open::create | Open::sequential |
                                         Open::random | Open::noreuse | Open::willneed | Open::dontneed});
  ASSERT_TRUE(f) << f.error().message;
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), "0123456789", 0, 10).result, 10);
  char back[32] = {};
  EXPECT_EQ(run_request(*engine, Op::read, f->get(), back, 2, sizeof back).result, 8) << "short read at end of file";
  EXPECT_STREQ(back, "23456789");
  EXPECT_EQ(run_request(*engine, Op::read, f->get(), back, 50, 4).result, 0);
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), "xyz", 10, 3).result, 3) << "eof state was cleared";
  std::memset(back, 0, sizeof back);
  EXPECT_EQ(run_request(*engine, Op::read, f->get(), back, 7, 6).result, 6);
  EXPECT_STREQ(back, "789xyz");
  // Overwrite inside, read across, sequential reads continue without a seek.
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), "AB", 0, 2).result, 2);
  std::memset(back, 0, sizeof back);
  EXPECT_EQ(run_request(*engine, Op::read, f->get(), back, 0, 4).result, 4);
  EXPECT_EQ(run_request(*engine, Op::read, f->get(), back + 4, 4, 4).result, 4);
  EXPECT_STREQ(back, "AB234567");
}

TEST(FstreamEngine, SequentialReadAfterEndOfFileSeesTheFileGrow) {
  tai::test::ScratchDir dir;
  const std::string path = dir.file("grow");
  auto engine = tai::engines::make_fstream({});
  auto f = engine->open(path, {Open::read | Open::create});
  ASSERT_TRUE(f);
  char back[8] = {};
  EXPECT_EQ(run_request(*engine, Op::read, f->get(), back, 0, 4).result, 0);
  // Another writer appends; the next read continues at the same position (no seek needed),
  // so only clearing the stream's eof state lets it see the new bytes.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, "grew", 4, 0), 4);
  ::close(fd);
  EXPECT_EQ(run_request(*engine, Op::read, f->get(), back, 0, 4).result, 4);
  EXPECT_STREQ(back, "grew");
}

TEST(FstreamEngine, ConcurrentWritersToOneFileDoNotTearEachOther) {
  tai::test::ScratchDir dir;
  const std::string path = dir.file("threads");
  auto engine = tai::engines::make_fstream({});
  auto* sync = dynamic_cast<tai::SyncEngine*>(engine.get());
  ASSERT_NE(sync, nullptr);
  auto f = engine->open(path, {Open::read | Open::write | Open::create});
  ASSERT_TRUE(f);
  constexpr int kThreads = 4, kRecords = 500, kRecordSize = 61;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<char> record(kRecordSize, static_cast<char>('a' + t));
      for (int i = 0; i < kRecords; ++i) {
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
  for (std::size_t slot = 0; slot < static_cast<std::size_t>(kThreads * kRecords); ++slot)
    for (std::size_t k = 0; k < kRecordSize; ++k)
      ASSERT_EQ(content[slot * kRecordSize + k], static_cast<char>('a' + slot % kThreads)) << "slot " << slot;
}

TEST(FstreamEngine, AFailedFlushIsReportedByTheNextSyncAndByACloseThatNoSyncPreceded) {
  // /dev/full accepts the filebuf's bytes and refuses them at flush with ENOSPC: the write
  // itself completes, the error must come out of the next fsync; a failed flush that no sync
  // reported comes out of close.
  auto engine = tai::engines::make_fstream({});
  auto f = engine->open("/dev/full", {Open::read | Open::write});
  if (!f) GTEST_SKIP() << f.error().message;
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), "lost", 0, 4).result, 4);
  EXPECT_EQ(run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0).result, -ENOSPC);
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), "lost", 0, 4).result, 4);
  EXPECT_EQ(engine->close(**f), std::errc::no_space_on_device);

  // The failed flush of a write that must reposition: the write that caused it fails, and
  // the next sync fails too (the flush dropped bytes of an earlier, completed write).
  auto g = engine->open("/dev/full", {Open::read | Open::write});
  ASSERT_TRUE(g) << g.error().message;
  ASSERT_EQ(run_request(*engine, Op::write, g->get(), "lost", 0, 4).result, 4);
  EXPECT_EQ(run_request(*engine, Op::write, g->get(), "moved", 100, 5).result, -ENOSPC);
  EXPECT_EQ(run_request(*engine, Op::fdatasync, g->get(), nullptr, 0, 0).result, -ENOSPC);
}

// On a really full file system (a 1 MiB tmpfs, root only): what a failed flush leaves behind in
// the stream. libstdc++'s filebuf keeps the bytes of a failed flush in its put area (the next
// flush would write them again, from wherever the partial write left the descriptor's offset);
// writes of 1 KiB or more go straight to write(2) together with whatever the buffer held.
class FstreamFullDisk : public testing::Test {
 protected:
  void SetUp() override {
    if (!fs_.mounted()) GTEST_SKIP() << fs_.skip_reason();
  }
  // Writes `data` at `offset` in pieces of `piece` bytes (small pieces stay in the filebuf).
  static void write_in_pieces(Engine& engine, EngineFile* f, const std::string& data, std::uint64_t offset,
                              std::size_t piece) {
    for (std::size_t at = 0; at < data.size(); at += piece) {
      const std::size_t n = std::min(piece, data.size() - at);
      ASSERT_EQ(run_request(engine, Op::write, f, data.data() + at, offset + at, n).result,
                static_cast<std::int64_t>(n))
          << "piece at " << offset + at;
    }
  }
  tai::test::SmallTmpfs fs_{1 << 20};
};

TEST_F(FstreamFullDisk, AFailedSyncIsReportedOnceAndTheStreamThenWritesWhereAsked) {
  ASSERT_EQ(fs_.fill("filler", 8192), "");
  const std::string path = fs_.file("data");
  auto engine = tai::engines::make_fstream({});
  auto f = engine->open(path, {Open::read | Open::write | Open::create});
  ASSERT_TRUE(f) << f.error().message;
  const std::string a(32768, 'A'), b(4096, 'B');
  write_in_pieces(*engine, f->get(), a, 0, 512);  // buffered by the filebuf
  if (HasFatalFailure()) return;
  EXPECT_EQ(run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0).result, -ENOSPC) << "only 8 KiB fit";
  ASSERT_EQ(::unlink(fs_.file("filler").c_str()), 0);
  // The write continues where the last one ended: it must land at 32768 even though the failed
  // flush left the descriptor at 8192 (and the filebuf still holding the 32 KiB). Then the
  // rewrite a cache does after a failed sync.
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), b.data(), 32768, b.size()).result, 4096);
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), a.data(), 0, a.size()).result, 32768);
  EXPECT_EQ(run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0).result, 0)
      << "the error was reported, the data written again: the stream must not stay failed";
  EXPECT_TRUE(kernel_view(path) == a + b) << "the file lacks data or holds it at the wrong offset";
  EXPECT_FALSE(engine->close(**f));
}

TEST_F(FstreamFullDisk, AWriteWhoseFlushFailedIsNeverReportedComplete) {
  ASSERT_EQ(fs_.fill("filler", 16384), "");
  const std::string path = fs_.file("data");
  auto engine = tai::engines::make_fstream({});
  auto f = engine->open(path, {Open::write | Open::create});
  ASSERT_TRUE(f) << f.error().message;
  const std::string a(40000, 'A'), b(40000, 'B');
  write_in_pieces(*engine, f->get(), a, 0, 1000);  // buffered by the filebuf
  if (HasFatalFailure()) return;
  // b goes to write(2) together with the 40000 buffered bytes, and only 16 KiB fit.
  EXPECT_EQ(run_request(*engine, Op::write, f->get(), b.data(), 40000, b.size()).result, -ENOSPC);
  EXPECT_EQ(run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0).result, -ENOSPC)
      << "the flush dropped bytes of the first, completed write";
  ASSERT_EQ(::unlink(fs_.file("filler").c_str()), 0);
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), a.data(), 0, a.size()).result, 40000);
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), b.data(), 40000, b.size()).result, 40000);
  EXPECT_EQ(run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0).result, 0);
  EXPECT_TRUE(kernel_view(path) == a + b) << "the file lacks data or holds it at the wrong offset";
  EXPECT_FALSE(engine->close(**f));
}

TEST_F(FstreamFullDisk, AWriteThatFailsAloneFailsOnlyItselfAsOnPosix) {
  // Nothing else buffered: the failed write lost only its own bytes and says so; the next sync
  // has nothing to report (pwrite + fsync behave the same way).
  ASSERT_EQ(fs_.fill("filler", 8192), "");
  const std::string path = fs_.file("data");
  auto engine = tai::engines::make_fstream({});
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

TEST_F(FstreamFullDisk, ACloseAfterAFailedFlushWritesNothingItWasNotAskedTo) {
  // The close of a stream whose flush failed, once there is room again: the bytes the failed
  // flush held must not be written then (from wherever the partial write left the offset).
  ASSERT_EQ(fs_.fill("filler", 4096), "");
  const std::string path = fs_.file("data");
  auto engine = tai::engines::make_fstream({});
  auto f = engine->open(path, {Open::write | Open::create});
  ASSERT_TRUE(f) << f.error().message;
  const std::string a(16384, 'A');
  write_in_pieces(*engine, f->get(), a, 0, 512);
  if (HasFatalFailure()) return;
  EXPECT_EQ(run_request(*engine, Op::fdatasync, f->get(), nullptr, 0, 0).result, -ENOSPC);
  ASSERT_EQ(::unlink(fs_.file("filler").c_str()), 0);
  EXPECT_FALSE(engine->close(**f)) << "the error was reported by the sync";
  EXPECT_TRUE(kernel_view(path) == a.substr(0, 4096)) << "the close wrote bytes again at the wrong offset";
}

}  // namespace
