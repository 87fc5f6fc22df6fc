// A full disk through the synchronous engines, posix, cstdio and fstream, on a real file system
// (a loop-mounted ext4, test/support/small_loop_fs.hpp, whose ENOSPC comes from its own block
// allocator). posix reports ENOSPC where pwrite does (on the write: ext4 reserves blocks at
// write(2) time); cstdio and fstream buffer in the library and may see it only at the flush, so
// the error may come on the write or on the next fsync. What must be the same for all three:
//  * the error is ENOSPC, on the write or on the fsync after it, and never both a complete write
//    and a successful fsync;
//  * what an fsync covered before the disk filled is still there, byte for byte;
//  * once space is freed, the same handle writes and syncs again (a library stream must not stay
//    failed after one failed flush), the file holds exactly what was written, and close succeeds.
// One typed test, one type per engine. Skipped with the reason without root, mkfs.ext4 or a loop
// device.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "engines/cstdio/cstdio_engine.hpp"
#include "engines/fstream/fstream_engine.hpp"
#include "engines/posix/posix_engine.hpp"
#include "support/engine_test_support.hpp"
#include "support/small_loop_fs.hpp"

namespace tai::test {
namespace {

struct PosixKind {
  static std::unique_ptr<Engine> make() { return engines::make_posix({}); }
};
struct CstdioKind {
  static std::unique_ptr<Engine> make() { return engines::make_cstdio({}); }
};
struct FstreamKind {
  static std::unique_ptr<Engine> make() { return engines::make_fstream({}); }
};

std::string pattern(std::size_t n, unsigned seed) {
  std::string s(n, '\0');
  std::uint32_t x = 2463534242u ^ seed;
  for (auto& c : s) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    c = static_cast<char>('a' + x % 26);
  }
  return s;
}

// Takes all the file system's space but about `leave` bytes with a synced filler: fallocate()d
// in shrinking steps until nothing more fits (the file system's own metadata decides how much
// that is), then cut back by `leave`. "" or what went wrong.
std::string fill_but(const SmallLoopFs& fs, std::uint64_t leave) {
  const int fd = ::open(fs.file("filler").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return std::string("open filler: ") + std::strerror(errno);
  std::uint64_t size = 0;
  for (std::uint64_t step : {std::uint64_t{1} << 20, std::uint64_t{64} << 10, std::uint64_t{4} << 10})
    while (::fallocate(fd, 0, static_cast<off_t>(size), static_cast<off_t>(step)) == 0) size += step;
  std::string why;
  if (errno != ENOSPC) why = std::string("fallocate: ") + std::strerror(errno);
  if (why.empty() && size <= leave) why = "the file system took only " + std::to_string(size) + " bytes of filler";
  if (why.empty() && ::ftruncate(fd, static_cast<off_t>(size - leave)) != 0) why = std::string("ftruncate: ") + std::strerror(errno);
  if (why.empty() && ::fsync(fd) != 0) why = std::string("fsync filler: ") + std::strerror(errno);
  ::close(fd);
  return why;
}

template <class Kind>
class EngineFullDisk : public testing::Test {};
using Kinds = testing::Types<PosixKind, CstdioKind, FstreamKind>;
TYPED_TEST_SUITE(EngineFullDisk, Kinds);

TYPED_TEST(EngineFullDisk, ReportsENOSPCAsPosixDoesKeepsWhatWasSyncedAndRecovers) {
  SmallLoopFs fs(FsType::ext4, 8);
  if (!fs.mounted()) GTEST_SKIP() << fs.skip_reason();
  auto engine = TypeParam::make();
  const std::string path = fs.file("data");
  auto f = engine->open(path, {Open::read | Open::write | Open::create});
  ASSERT_TRUE(f) << f.error().message;

  // Synced before the disk fills: must survive everything after.
  const std::string first = pattern(32768, 1);
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), first.data(), 0, first.size()).result, 32768);
  ASSERT_EQ(run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0).result, 0);

  ASSERT_EQ(fill_but(fs, 64 << 10), "");
  // 1 MiB into the last 64 KiB (a library buffer is smaller than that, so it flushes on the way).
  const std::string big = pattern(1 << 20, 2);
  const std::int64_t w = run_request(*engine, Op::write, f->get(), big.data(), first.size(), big.size()).result;
  const std::int64_t s = run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0).result;
  std::printf("%s: 1 MiB write into 64 KiB free returned %lld, the fsync after it %lld\n", std::string(engine->name()).c_str(),
              static_cast<long long>(w), static_cast<long long>(s));
  EXPECT_TRUE(w == static_cast<std::int64_t>(big.size()) || w == -ENOSPC)
      << engine->name() << ": the write into a full disk returned " << w << " (" << (w < 0 ? std::strerror(static_cast<int>(-w)) : "bytes")
      << "), neither all its bytes nor -ENOSPC";
  EXPECT_TRUE(s == 0 || s == -ENOSPC) << engine->name() << ": the fsync after it returned " << s << " ("
                                      << (s < 0 ? std::strerror(static_cast<int>(-s)) : "") << ")";
  EXPECT_TRUE(w == -ENOSPC || s == -ENOSPC)
      << engine->name() << ": 1 MiB into 64 KiB of free space, and neither the write nor the fsync reported ENOSPC";
  EXPECT_EQ(kernel_view(path).substr(0, first.size()), first) << engine->name() << ": the bytes synced before the disk filled changed";

  // Space again: the same handle writes it all and syncs, the file is exactly what was written.
  ASSERT_EQ(::unlink(fs.file("filler").c_str()), 0);
  ASSERT_EQ(run_request(*engine, Op::write, f->get(), big.data(), first.size(), big.size()).result,
            static_cast<std::int64_t>(big.size()))
      << engine->name() << ": the write after space was freed failed";
  EXPECT_EQ(run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0).result, 0)
      << engine->name() << ": the handle stayed failed after space was freed and everything was written again";
  EXPECT_TRUE(kernel_view(path) == first + big) << engine->name() << ": the file lacks data or holds it at the wrong offset";
  EXPECT_FALSE(engine->close(**f)) << engine->name() << ": close after the recovery failed";
}

// Small writes, which cstdio and fstream take into their buffers and fail only at a later flush
// (inside a later write, or the fsync): the failure may come late, but it must come, as ENOSPC,
// and the handle must work again once there is space.
TYPED_TEST(EngineFullDisk, SmallBufferedWritesReportENOSPCAtTheLatestOnTheFsyncAndRecover) {
  SmallLoopFs fs(FsType::ext4, 8);
  if (!fs.mounted()) GTEST_SKIP() << fs.skip_reason();
  auto engine = TypeParam::make();
  const std::string path = fs.file("data");
  auto f = engine->open(path, {Open::read | Open::write | Open::create});
  ASSERT_TRUE(f) << f.error().message;
  ASSERT_EQ(fill_but(fs, 64 << 10), "");
  constexpr std::size_t kRecord = 4000, kRecords = 64;  // 256,000 bytes into 64 KiB
  const std::string data = pattern(kRecord * kRecords, 3);
  std::int64_t first_error = 0;
  std::size_t failed_at = kRecords;
  for (std::size_t i = 0; i < kRecords; ++i) {
    const std::int64_t r = run_request(*engine, Op::write, f->get(), data.data() + i * kRecord, i * kRecord, kRecord).result;
    if (r < 0 && first_error == 0) first_error = r, failed_at = i;
    EXPECT_TRUE(r == static_cast<std::int64_t>(kRecord) || r == -ENOSPC)
        << engine->name() << ": write " << i << " returned " << r;
  }
  const std::int64_t s = run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0).result;
  std::printf("%s: first failed write of %zu: %zu (%lld), the fsync after them %lld\n", std::string(engine->name()).c_str(),
              kRecords, failed_at, static_cast<long long>(first_error), static_cast<long long>(s));
  EXPECT_TRUE(s == 0 || s == -ENOSPC) << engine->name() << ": the fsync returned " << s;
  EXPECT_TRUE(first_error == -ENOSPC || s == -ENOSPC)
      << engine->name() << ": 250 KB into 64 KiB of free space, and neither a write nor the fsync reported ENOSPC";

  ASSERT_EQ(::unlink(fs.file("filler").c_str()), 0);
  for (std::size_t i = 0; i < kRecords; ++i)
    ASSERT_EQ(run_request(*engine, Op::write, f->get(), data.data() + i * kRecord, i * kRecord, kRecord).result,
              static_cast<std::int64_t>(kRecord))
        << engine->name() << ": write " << i << " after space was freed failed";
  EXPECT_EQ(run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0).result, 0)
      << engine->name() << ": the handle stayed failed after space was freed and everything was written again";
  EXPECT_TRUE(kernel_view(path) == data) << engine->name() << ": the file lacks data or holds it at the wrong offset";
  EXPECT_FALSE(engine->close(**f)) << engine->name() << ": close after the recovery failed";
}

}  // namespace
}  // namespace tai::test
