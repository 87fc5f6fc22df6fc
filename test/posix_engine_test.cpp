// Behaviour of the posix engine beyond the cross-engine conformance suite: open flags and
// permissions, fadvise hints (dontneed really drops the page cache), O_DIRECT alignment and
// refusal messages, descriptor lifetime.
#include "engines/posix/posix_engine.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/engine_test_support.hpp"
#include "support/test_env.hpp"

namespace {

using tai::Completion;
using tai::Engine;
using tai::EngineFile;
using tai::Open;
using tai::Op;
using tai::Request;
using tai::test::run_request;
using tai::test::resident_pages;

std::vector<unsigned char> pattern(std::size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 131 + seed * 7 + i / 4096) & 0xFF);
  return v;
}

TEST(PosixEngine, Capabilities) {
  auto engine = tai::engines::make_posix({});
  EXPECT_EQ(engine->name(), "posix");
  EXPECT_FALSE(engine->capabilities().asynchronous);
  EXPECT_TRUE(engine->capabilities().direct_io);
  EXPECT_TRUE(engine->capabilities().durable_sync);
  EXPECT_TRUE(engine->capabilities().stores_data);
}

TEST(PosixEngine, CreateHonoursPermissionsAndTruncateEmpties) {
  tai::test::ScratchDir dir;
  auto engine = tai::engines::make_posix({});
  const std::string path = dir.file("perm");
  {
    auto f = engine->open(path, {Open::write | Open::create, 0640});
    ASSERT_TRUE(f) << f.error().message;
    EXPECT_GE(f.value()->fd(), 0);
    auto data = pattern(1000, 1);
    EXPECT_EQ(run_request(*engine, Op::write, f->get(), data.data(), 0, data.size()).result, 1000);
    EXPECT_FALSE(engine->close(**f));
    EXPECT_EQ(f.value()->fd(), -1);
    EXPECT_EQ(engine->close(**f), std::errc::bad_file_descriptor) << "closing twice";
  }
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u & ~[] { mode_t m = ::umask(0); ::umask(m); return m; }());
  EXPECT_EQ(st.st_size, 1000);

  auto again = engine->open(path, {Open::read | Open::write});
  ASSERT_TRUE(again);
  std::vector<unsigned char> back(1000);
  EXPECT_EQ(run_request(*engine, Op::read, again->get(), back.data(), 0, back.size()).result, 1000) << "no truncation asked";
  again.value().reset();  // destroyed without close(): the descriptor is released

  auto truncated = engine->open(path, {Open::write | Open::truncate});
  ASSERT_TRUE(truncated);
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 0);
}

TEST(PosixEngine, OpenErrorsNameThePathAndReason) {
  tai::test::ScratchDir dir;
  auto engine = tai::engines::make_posix({});
  const std::string path = dir.file("missing");
  auto f = engine->open(path, {Open::read});
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error().code, std::errc::no_such_file_or_directory);
  EXPECT_NE(f.error().message.find(path), std::string::npos) << f.error().message;
  EXPECT_NE(f.error().message.find("No such file"), std::string::npos) << f.error().message;
}

TEST(PosixEngine, EveryHintIsAccepted) {
  tai::test::ScratchDir dir;
  auto engine = tai::engines::make_posix({});
  const Open hints[] = {Open::sequential, Open::random, Open::noreuse, Open::willneed, Open::dontneed,
                        Open::sequential | Open::noreuse | Open::willneed | Open::dontneed};
  int i = 0;
  for (Open hint : hints) {
    const std::string path = dir.file("hint" + std::to_string(i++));
    auto f = engine->open(path, {Open::read | Open::write | Open::create | hint});
    ASSERT_TRUE(f) << f.error().message;
    auto data = pattern(100000, static_cast<unsigned>(i));
    EXPECT_EQ(run_request(*engine, Op::write, f->get(), data.data(), 123, data.size()).result, 100000);
    std::vector<unsigned char> back(data.size());
    EXPECT_EQ(run_request(*engine, Op::read, f->get(), back.data(), 123, back.size()).result, 100000);
    EXPECT_EQ(back, data);
    EXPECT_EQ(run_request(*engine, Op::fdatasync, f->get(), nullptr, 0, 0).result, 0);
  }
}

TEST(PosixEngine, DontneedDropsTheReadRangeFromThePageCache) {
  tai::test::ScratchDir dir;
  if (const std::string why = tai::test::page_cache_not_droppable_reason(dir.path().string()); !why.empty())
    GTEST_SKIP() << why;
  const std::string path = dir.file("cached");
  constexpr std::uint64_t kSize = 4 << 20, kRange = 2 << 20;
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  auto engine = tai::engines::make_posix({});
  {
    auto w = engine->open(path, {Open::write | Open::create});
    ASSERT_TRUE(w);
    auto data = pattern(kSize, 3);
    ASSERT_EQ(run_request(*engine, Op::write, w->get(), data.data(), 0, kSize).result, static_cast<std::int64_t>(kSize));
    ASSERT_EQ(run_request(*engine, Op::fsync, w->get(), nullptr, 0, 0).result, 0);  // clean pages can be dropped
  }
  if (resident_pages(path, 0, kSize) != kSize / page)
    GTEST_SKIP() << "freshly written pages are not all cached (memory pressure?)";

  auto r = engine->open(path, {Open::read | Open::dontneed});
  ASSERT_TRUE(r);
  std::vector<unsigned char> back(kRange);
  ASSERT_EQ(run_request(*engine, Op::read, r->get(), back.data(), 0, kRange).result, static_cast<std::int64_t>(kRange));
  const auto expected = pattern(kSize, 3);
  EXPECT_TRUE(std::equal(back.begin(), back.end(), expected.begin()));
  EXPECT_EQ(resident_pages(path, 0, kRange), 0u) << "the range read with Open::dontneed is still cached";
  EXPECT_EQ(resident_pages(path, kRange, kSize - kRange), (kSize - kRange) / page) << "pages outside the range were dropped too";

  // Without the hint, a read leaves the pages cached.
  auto plain = engine->open(path, {Open::read});
  ASSERT_TRUE(plain);
  ASSERT_EQ(run_request(*engine, Op::read, plain->get(), back.data(), 0, kRange).result, static_cast<std::int64_t>(kRange));
  EXPECT_GT(resident_pages(path, 0, kRange), 0u);
}

TEST(PosixEngine, DontneedWithDsyncDropsWrittenPages) {
  tai::test::ScratchDir dir;
  if (const std::string why = tai::test::page_cache_not_droppable_reason(dir.path().string()); !why.empty())
    GTEST_SKIP() << why;
  const std::string path = dir.file("dsync");
  constexpr std::uint64_t kSize = 1 << 20;
  auto engine = tai::engines::make_posix({});
  auto f = engine->open(path, {Open::write | Open::create | Open::dsync | Open::dontneed});
  ASSERT_TRUE(f);
  EXPECT_TRUE(f.value()->capabilities().dsync);
  auto data = pattern(kSize, 4);
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), data.data(), 0, kSize).result, static_cast<std::int64_t>(kSize));
  // O_DSYNC wrote the pages back before pwrite returned: clean, so DONTNEED dropped them.
  EXPECT_EQ(resident_pages(path, 0, kSize), 0u);
}

TEST(PosixEngine, DirectOpenReportsAlignmentAndTransfersAlignedBlocks) {
  tai::test::ScratchDir dir;
  auto engine = tai::engines::make_posix({});
  auto f = engine->open(dir.file("direct"), {Open::read | Open::write | Open::create | Open::direct});
  if (!f && f.error().code == std::errc::invalid_argument) GTEST_SKIP() << f.error().message;
  ASSERT_TRUE(f) << f.error().message;
  const auto& caps = f.value()->capabilities();
  EXPECT_TRUE(caps.direct);
  EXPECT_STRNE(caps.alignment.source, "none");
  EXPECT_GE(caps.alignment.offset, 512u);
  EXPECT_GE(caps.alignment.memory, 1u);
  EXPECT_NE(::fcntl(f.value()->fd(), F_GETFL) & O_DIRECT, 0);

  const std::uint64_t block = caps.alignment.offset;
  void* mem = nullptr;
  ASSERT_EQ(::posix_memalign(&mem, 4096, 4 * block), 0);
  std::memset(mem, 0xC3, 4 * block);
  EXPECT_EQ(run_request(*engine, Op::write, f->get(), mem, block, 4 * block).result, static_cast<std::int64_t>(4 * block));
  std::memset(mem, 0, 4 * block);
  EXPECT_EQ(run_request(*engine, Op::read, f->get(), mem, block, 4 * block).result, static_cast<std::int64_t>(4 * block));
  EXPECT_EQ(static_cast<unsigned char*>(mem)[4 * block - 1], 0xC3);
  std::free(mem);
}

TEST(PosixEngine, NonDirectOpenHasNoODirect) {
  tai::test::ScratchDir dir;
  auto engine = tai::engines::make_posix({});
  auto f = engine->open(dir.file("buffered"), {Open::write | Open::create | Open::dsync});
  ASSERT_TRUE(f);
  const int flags = ::fcntl(f.value()->fd(), F_GETFL);
  EXPECT_EQ(flags & O_DIRECT, 0);
  EXPECT_NE(flags & O_DSYNC, 0);
  EXPECT_NE(::fcntl(f.value()->fd(), F_GETFD) & FD_CLOEXEC, 0) << "O_CLOEXEC is always set";
  EXPECT_FALSE(f.value()->capabilities().direct);
}

TEST(PosixEngine, RefusedODirectIsExplainedNotABareEinval) {
  auto engine = tai::engines::make_posix({});
  // procfs refuses O_DIRECT on every kernel; tmpfs did before Linux 6.6.
  auto f = engine->open("/proc/self/status", {Open::read | Open::direct});
  if (f) GTEST_SKIP() << "this kernel accepts O_DIRECT on procfs";
  EXPECT_EQ(f.error().code, std::errc::invalid_argument);
  EXPECT_NE(f.error().message.find("refuses O_DIRECT"), std::string::npos) << f.error().message;
  EXPECT_NE(f.error().message.find("/proc/self/status"), std::string::npos) << f.error().message;

  std::string shm = "/dev/shm/tai-posix-XXXXXX";
  const int fd = ::mkstemp(shm.data());
  if (fd < 0) return;
  ::close(fd);
  auto t = engine->open(shm, {Open::read | Open::write | Open::direct});
  if (!t) {
    EXPECT_NE(t.error().message.find("refuses O_DIRECT"), std::string::npos) << t.error().message;
  } else {
    std::printf("tmpfs accepts O_DIRECT here (Linux >= 6.6); alignment %u (%s)\n",
                t.value()->capabilities().alignment.offset, t.value()->capabilities().alignment.source);
  }
  ::unlink(shm.c_str());
}

TEST(PosixEngine, ReadsPastEndOfFileAreShortNotErrors) {
  tai::test::ScratchDir dir;
  auto engine = tai::engines::make_posix({});
  auto f = engine->open(dir.file("short"), {Open::read | Open::write | Open::create});
  ASSERT_TRUE(f);
  auto data = pattern(100, 5);
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), data.data(), 0, 100).result, 100);
  std::vector<unsigned char> back(1000);
  EXPECT_EQ(run_request(*engine, Op::read, f->get(), back.data(), 50, 1000).result, 50);
  EXPECT_EQ(run_request(*engine, Op::read, f->get(), back.data(), 5000, 1000).result, 0);
}

}  // namespace
