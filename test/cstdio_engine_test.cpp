// Behaviour of the cstdio engine beyond the cross-engine conformance suite: no direct I/O,
// read-after-write through the stdio buffer, when other descriptors see the data (fsync, dsync),
// the per-file lock around seek+transfer, and flush errors that are never lost (on /dev/full and on
// a really full file system, where the stream must work again once the error was reported).
#include "engines/cstdio/cstdio_engine.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support/small_fs.hpp"
#include "support/engine_test_support.hpp"
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

TEST(CstdioEngine, CapabilitiesAndDirectIsRefusedWithAMessage) {
  tai::test::ScratchDir dir;
  auto engine = tai::engines::make_cstdio({});
  EXPECT_EQ(engine->name(), "cstdio");
  EXPECT_FALSE(engine->capabilities().direct_io);
  EXPECT_TRUE(engine->capabilities().durable_sync);
  EXPECT_FALSE(engine->capabilities().asynchronous);
  auto f = engine->open(dir.file("d"), {Open::read | Open::write | Open::create | Open::direct});
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error().code, std::errc::invalid_argument);
  EXPECT_NE(f.error().message.find("engine 'cstdio' cannot do direct I/O"), std::string::npos) << f.error().message;
  EXPECT_FALSE(std::filesystem::exists(dir.file("d"))) << "a refused open must not create the file";
}

TEST(CstdioEngine, ReadAfterWriteSeesItAndOthersSeeItAfterFsync) {
  tai::test::ScratchDir dir;
  const std::string path = dir.file("rw");
  auto engine = tai::engines::make_cstdio({});
  auto f = engine->open(path, {Open::read | Open::write | Open::create, 0600});
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_GE(f.value()->fd(), 0);

  const std::string hello = "hello, stdio";
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), hello.data(), 10, hello.size()).result,
            static_cast<std::int64_t>(hello.size()));
  EXPECT_EQ(kernel_view(path), "") << "a small write stays in the stdio buffer until a flush";

  std::string back(hello.size(), '\0');
  ASSERT_EQ(run_request(*engine, Op::read, f->get(), back.data(), 10, back.size()).result, static_cast<std::int64_t>(back.size()));
  EXPECT_EQ(back, hello);

  // Write, then overwrite part of it, then read across both without any sync in between.
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), "XY", 12, 2).result, 2);
  std::string mixed(14, '\0');
  ASSERT_EQ(run_request(*engine, Op::read, f->get(), mixed.data(), 8, mixed.size()).result, 14);
  EXPECT_EQ(mixed, std::string("\0\0heXYo, stdio", 14));

  ASSERT_EQ(run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0).result, 0);
  EXPECT_EQ(kernel_view(path), std::string(10, '\0') + "heXYo, stdio");

  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(CstdioEngine, SequentialWritesStayBufferedAndFdatasyncFlushes) {
  tai::test::ScratchDir dir;
  const std::string path = dir.file("seq");
  auto engine = tai::engines::make_cstdio({});
  auto f = engine->open(path, {Open::write | Open::create});
  ASSERT_TRUE(f);
  std::string expected;
  for (int i = 0; i < 100; ++i) {
    const std::string line = "line " + std::to_string(i) + "\n";
    ASSERT_EQ(run_request(*engine, Op::write, f->get(), line.data(), expected.size(), line.size()).result,
              static_cast<std::int64_t>(line.size()));
    expected += line;
  }
  EXPECT_EQ(kernel_view(path), "") << "sequential small writes should not each reach the kernel";
  ASSERT_EQ(run_request(*engine, Op::fdatasync, f->get(), nullptr, 0, 0).result, 0);
  EXPECT_EQ(kernel_view(path), expected);
}

TEST(CstdioEngine, DsyncFlushesEveryWrite) {
  tai::test::ScratchDir dir;
  const std::string path = dir.file("dsync");
  auto engine = tai::engines::make_cstdio({});
  auto f = engine->open(path, {Open::write | Open::create | Open::dsync});
  ASSERT_TRUE(f);
  EXPECT_TRUE(f.value()->capabilities().dsync);
  EXPECT_NE(::fcntl(f.value()->fd(), F_GETFL) & O_DSYNC, 0);
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), "durable", 0, 7).result, 7);
  EXPECT_EQ(kernel_view(path), "durable") << "with Open::dsync a completed write has left the stdio buffer";
}

TEST(CstdioEngine, ConcurrentWritersToOneFileDoNotTearEachOther) {
  // execute() from several threads at once on one FILE*: without the per-file lock, one
  // thread's fseeko lands between another's fseeko and fwrite and data goes to wrong offsets.
  tai::test::ScratchDir dir;
  const std::string path = dir.file("threads");
  auto engine = tai::engines::make_cstdio({});
  auto* sync = dynamic_cast<tai::SyncEngine*>(engine.get());
  ASSERT_NE(sync, nullptr);
  auto f = engine->open(path, {Open::read | Open::write | Open::create});
  ASSERT_TRUE(f);
  constexpr int kThreads = 4, kRecords = 500, kRecordSize = 97;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<char> record(kRecordSize, static_cast<char>('A' + t));
      for (int i = 0; i < kRecords; ++i) {
        // Records interleave: thread t owns every kThreads-th slot.
        const std::uint64_t slot = static_cast<std::uint64_t>(i) * kThreads + static_cast<std::uint64_t>(t);
        Request r{Op::write, f->get(), record.data(), slot * kRecordSize, kRecordSize, 0};
        Completion c = sync->execute(r);
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

TEST(CstdioEngine, AFailedFlushIsReportedByTheNextSyncAndByACloseThatNoSyncPreceded) {
  // /dev/full accepts the stdio buffer's bytes and refuses them at flush with ENOSPC: the
  // write itself completes, the error must come out of the next fsync; a failed flush that no
  // sync reported comes out of close.
  auto engine = tai::engines::make_cstdio({});
  auto f = engine->open("/dev/full", {Open::write});
  if (!f) GTEST_SKIP() << f.error().message;
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), "lost", 0, 4).result, 4);
  EXPECT_EQ(run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0).result, -ENOSPC);
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), "lost", 0, 4).result, 4);
  EXPECT_EQ(engine->close(**f), std::errc::no_space_on_device);

  // The failed flush of a write that must reposition: the write that caused it fails, and
  // the next sync fails too (the flush dropped bytes of an earlier, completed write).
  auto g = engine->open("/dev/full", {Open::write});
  ASSERT_TRUE(g);
  ASSERT_EQ(run_request(*engine, Op::write, g->get(), "lost", 0, 4).result, 4);
  EXPECT_EQ(run_request(*engine, Op::write, g->get(), "moved", 100, 5).result, -ENOSPC);
  EXPECT_EQ(run_request(*engine, Op::fdatasync, g->get(), nullptr, 0, 0).result, -ENOSPC);
}

TEST(CstdioEngine, DsyncWriteErrorIsReportedOnTheWrite) {
  auto engine = tai::engines::make_cstdio({});
  auto f = engine->open("/dev/full", {Open::write | Open::dsync});
  if (!f) GTEST_SKIP() << f.error().message;
  EXPECT_EQ(run_request(*engine, Op::write, f->get(), "lost", 0, 4).result, -ENOSPC);
}

TEST(CstdioEngine, HintsAreAcceptedAndShortReadAtEndOfFile) {
  tai::test::ScratchDir dir;
  auto engine = tai::engines::make_cstdio({});
  auto f = engine->open(dir.file("hints"), {Open::read | Open::write | Open::create | Open::sequential |
                                            Open::noreuse | Open::willneed | Open::dontneed});
  ASSERT_TRUE(f) << f.error().message;
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), "0123456789", 0, 10).result, 10);
  char back[32] = {};
  EXPECT_EQ(run_request(*engine, Op::read, f->get(), back, 4, sizeof back).result, 6);
  EXPECT_STREQ(back, "456789");
  EXPECT_EQ(run_request(*engine, Op::read, f->get(), back, 100, sizeof back).result, 0);
  // After end of file the stream is usable again: the file grows and the next read sees it.
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), "abc", 10, 3).result, 3);
  std::memset(back, 0, sizeof back);
  EXPECT_EQ(run_request(*engine, Op::read, f->get(), back, 8, sizeof back).result, 5);
  EXPECT_STREQ(back, "89abc");
}

TEST(CstdioEngine, SequentialReadAfterEndOfFileSeesTheFileGrow) {
  tai::test::ScratchDir dir;
  const std::string path = dir.file("grow");
  auto engine = tai::engines::make_cstdio({});
  auto f = engine->open(path, {Open::read | Open::create});
  ASSERT_TRUE(f);
  char back[8] = {};
  EXPECT_EQ(run_request(*engine, Op::read, f->get(), back, 0, 4).result, 0);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, "grew", 4, 0), 4);
  ::close(fd);
  EXPECT_EQ(run_request(*engine, Op::read, f->get(), back, 0, 4).result, 4);
  EXPECT_STREQ(back, "grew");
}

TEST(CstdioEngine, TruncateAndReadOnly) {
  tai::test::ScratchDir dir;
  const std::string path = dir.file("t");
  auto engine = tai::engines::make_cstdio({});
  {
    auto f = engine->open(path, {Open::write | Open::create});
    ASSERT_TRUE(f);
    ASSERT_EQ(run_request(*engine, Op::write, f->get(), "keep me", 0, 7).result, 7);
  }  // destroyed without close(): flushed and closed
  EXPECT_EQ(kernel_view(path), "keep me");
  {
    auto f = engine->open(path, {Open::write});  // fdopen "wb" must not truncate
    ASSERT_TRUE(f);
    ASSERT_EQ(run_request(*engine, Op::write, f->get(), "K", 0, 1).result, 1);
    EXPECT_FALSE(engine->close(**f));
  }
  EXPECT_EQ(kernel_view(path), "Keep me");
  auto r = engine->open(path, {Open::read});
  ASSERT_TRUE(r);
  char back[8] = {};
  EXPECT_EQ(run_request(*engine, Op::read, r->get(), back, 0, 7).result, 7);
  EXPECT_STREQ(back, "Keep me");
  auto t = engine->open(path, {Open::write | Open::truncate});
  ASSERT_TRUE(t);
  EXPECT_EQ(kernel_view(path), "");
}

// On a really full file system (a 1 MiB tmpfs, root only): what a failed flush leaves behind
// in the stream. glibc drops the buffer's bytes on a failed flush and leaves the stream's
// position where the written part ended, not where the buffered writes ended.
class CstdioFullDisk : public testing::Test {
 protected:
  void SetUp() override {
    if (!fs_.mounted()) GTEST_SKIP() << fs_.skip_reason();
  }
  tai::test::SmallTmpfs fs_{1 << 20};
};

TEST_F(CstdioFullDisk, AFailedSyncIsReportedOnceAndTheStreamThenWritesWhereAsked) {
  ASSERT_EQ(fs_.fill("filler", 8192), "");
  const std::string path = fs_.file("data");
  auto engine = tai::engines::make_cstdio({});
  auto f = engine->open(path, {Open::read | Open::write | Open::create});
  ASSERT_TRUE(f) << f.error().message;
  const std::string a(32768, 'A'), b(4096, 'B');
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), a.data(), 0, a.size()).result, 32768) << "buffered by stdio";
  EXPECT_EQ(run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0).result, -ENOSPC) << "only 8 KiB fit";
  ASSERT_EQ(::unlink(fs_.file("filler").c_str()), 0);
  // The write continues where the last one ended: it must land at 32768 even though the failed
  // flush left the stream at 8192. Then the rewrite a cache does after a failed sync.
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), b.data(), 32768, b.size()).result, 4096);
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), a.data(), 0, a.size()).result, 32768);
  EXPECT_EQ(run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0).result, 0)
      << "the error was reported, the data written again: the stream must not stay failed";
  EXPECT_TRUE(kernel_view(path) == a + b) << "the file lacks data or holds it at the wrong offset";
  EXPECT_FALSE(engine->close(**f));
}

TEST_F(CstdioFullDisk, AWriteWhoseFlushFailedIsNeverReportedComplete) {
  ASSERT_EQ(fs_.fill("filler", 16384), "");
  const std::string path = fs_.file("data");
  auto engine = tai::engines::make_cstdio({});
  auto f = engine->open(path, {Open::write | Open::create});
  ASSERT_TRUE(f) << f.error().message;
  const std::string a(40000, 'A'), b(40000, 'B');
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), a.data(), 0, a.size()).result, 40000) << "buffered by stdio";
  // b overflows the 64 KiB buffer: stdio copies part of b in, flushes, fails, and drops the
  // buffer; fwrite then counts the part of b it had copied as written.
  const std::int64_t second = run_request(*engine, Op::write, f->get(), b.data(), 40000, b.size()).result;
  EXPECT_EQ(second, -ENOSPC) << "bytes stdio dropped were reported written";
  EXPECT_EQ(run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0).result, -ENOSPC)
      << "the flush dropped bytes of the first, completed write";
  ASSERT_EQ(::unlink(fs_.file("filler").c_str()), 0);
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), a.data(), 0, a.size()).result, 40000);
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), b.data(), 40000, b.size()).result, 40000);
  EXPECT_EQ(run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0).result, 0);
  EXPECT_TRUE(kernel_view(path) == a + b) << "the file lacks data or holds it at the wrong offset";
  EXPECT_FALSE(engine->close(**f));
}

TEST_F(CstdioFullDisk, AWriteThatFailsAloneFailsOnlyItselfAsOnPosix) {
  // Nothing else buffered: the failed fwrite lost only its own bytes and says so; the next sync
  // has nothing to report (pwrite + fsync behave the same way).
  ASSERT_EQ(fs_.fill("filler", 8192), "");
  const std::string path = fs_.file("data");
  auto engine = tai::engines::make_cstdio({});
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

}  // namespace
