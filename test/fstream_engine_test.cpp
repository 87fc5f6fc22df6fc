// Behaviour of the fstream engine beyond the cross-engine conformance suite and what it shares with
// the cstdio engine (stream_engines_test.cpp): emulated create, truncate and dsync, the "out means
// truncate" trap, durable sync through the path (and its descriptor surviving a rename), no
// descriptor, and a close after a failed flush on a really full file system, which must not
// write the bytes libstdc++'s filebuf kept.
#include "engines/fstream/fstream_engine.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/engine_test_support.hpp"
#include "support/small_fs.hpp"
#include "support/test_env.hpp"

namespace {

using tai::Engine;
using tai::EngineFile;
using tai::Open;
using tai::Op;
using tai::test::kernel_view;
using tai::test::run_request;
using tai::test::write_in_pieces;

mode_t current_umask() {
  const mode_t m = ::umask(0);
  ::umask(m);
  return m;
}

TEST(FstreamEngine, NoDescriptor) {
  tai::test::ScratchDir dir;
  auto engine = tai::engines::make_fstream({});
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

// On a really full file system (a 1 MiB tmpfs, root only): libstdc++'s filebuf keeps the bytes of a
// failed flush in its put area (the next flush would write them again, from wherever the partial
// write left the descriptor's offset). What the cstdio engine shares is in stream_engines_test.cpp.
class FstreamFullDisk : public testing::Test {
 protected:
  void SetUp() override {
    if (!fs_.mounted()) GTEST_SKIP() << fs_.skip_reason();
  }
  tai::test::SmallTmpfs fs_{1 << 20};
};

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
