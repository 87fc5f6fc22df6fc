// Behaviour of the cstdio engine beyond the cross-engine conformance suite and what it shares with
// the fstream engine (stream_engines_test.cpp): read-after-write through the stdio buffer, when
// other descriptors see the data (fsync, dsync), a dsync write's error, hints, and an fdopen that
// must not truncate.
#include "engines/cstdio/cstdio_engine.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/engine_test_support.hpp"
#include "support/test_env.hpp"

namespace {

using tai::Engine;
using tai::EngineFile;
using tai::Open;
using tai::Op;
using tai::test::kernel_view;
using tai::test::run_request;

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

}  // namespace
