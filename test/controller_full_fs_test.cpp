// A really full file system (DESIGN section 2, "Errors are never lost"), through the controller
// with BTreeDefault: the write-back of more data than fits fails the fsync with ENOSPC; once
// space is freed, the next fsync writes the cached data again and succeeds, the close succeeds,
// and the file holds exactly what was written. The same body runs over posix (write(2) fails
// at once) and cstdio (the bytes sit in the stdio buffer and the failure comes out of a later
// fflush, which also drops whatever else the buffer held), and fstream (whose filebuf keeps the
// bytes of a failed flush unless the engine discards them): all must recover alike. The
// asynchronous engines run it once too (skipped where the kernel does not offer them).
//
// The file system is a tmpfs of 1 MiB (test/support/small_fs.hpp), so these tests run as root
// and are skipped, with the reason, elsewhere. An injected errno would not do: what goes wrong
// on a full disk is the state of the real stream (its buffer and position after a failed flush).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <system_error>
#include <vector>

#include "support/controller_support.hpp"
#include "support/small_fs.hpp"
#include "tai/tai.hpp"

namespace tai::test {
namespace {

constexpr std::uint64_t kFsBytes = std::uint64_t{1} << 20;
constexpr std::size_t kBlock = 4096;

struct FullFsCase {
  const char* engine;
  const char* shape;         // for the test's name
  std::size_t blocks;        // 4 KiB writes, at offsets 0, stride, 2 * stride, ...
  std::size_t stride;
  std::uint64_t free_bytes;  // room left on the file system when the writes are written back
};

void PrintTo(const FullFsCase& c, std::ostream* os) { *os << c.engine << "_" << c.shape; }

class ControllerFullFileSystem : public testing::TestWithParam<FullFsCase> {
 protected:
  void SetUp() override {
    TAI_SKIP_UNLESS_ENGINE_AVAILABLE(GetParam().engine);
  }
};

TEST_P(ControllerFullFileSystem, AFailedFsyncRecoversOnceSpaceIsFreed) {
  const FullFsCase& c = GetParam();
  SmallTmpfs fs(kFsBytes);
  if (!fs.mounted()) GTEST_SKIP() << fs.skip_reason();
  ASSERT_EQ(fs.fill("filler", c.free_bytes), "");
  const std::string path = fs.file("data");

  // What the file must hold in the end: each block's pattern at its offset, zeros in between.
  std::vector<unsigned char> expected((c.blocks - 1) * c.stride + kBlock, 0);
  {
    ControllerOptions options;
    options.workers = 2;
    options.flush_idle_ns = -1;  // write-back only at fsync and close, where the test asks for it
    options.tree_options.write_around_bytes = 0;  // every block cached: the fsync writes them back
    Controller ctl(options);
    File f = open_or_fail<BTreeDefault>(ctl, path, Open::read | Open::write | Open::create, c.engine);
    ASSERT_TRUE(f);
    for (std::size_t i = 0; i < c.blocks; ++i) {
      const std::vector<unsigned char> data = pattern(kBlock, i + 1);
      std::memcpy(expected.data() + i * c.stride, data.data(), kBlock);
      ASSERT_TRUE(wait_ok(f.write(i * c.stride, data.data(), data.size()))) << "block " << i;
    }

    const Receipt full = f.fsync();
    ASSERT_TRUE(full.wait_for(std::chrono::seconds(60)));
    EXPECT_EQ(full.error(), std::error_code(ENOSPC, std::generic_category()))
        << "the data does not fit: the fsync must fail with ENOSPC; " << full.message();

    ASSERT_EQ(::unlink(fs.file("filler").c_str()), 0) << std::strerror(errno);
    EXPECT_TRUE(wait_ok(f.fsync())) << "space was freed and the cache still holds every byte";
    EXPECT_FALSE(f.status().sticky_error) << f.status().sticky_error.message();
    EXPECT_TRUE(read_with_pread(path) == expected) << "an fsync succeeded: the file must hold every write";

    // Recovered for good: a later write and fsync, and the close, succeed too.
    const std::vector<unsigned char> more = pattern(kBlock, 1000);
    std::memcpy(expected.data(), more.data(), kBlock);
    EXPECT_TRUE(wait_ok(f.write(0, more.data(), more.size())));
    EXPECT_TRUE(wait_ok(f.fsync()));
    EXPECT_TRUE(wait_ok(f.close()));
    const ShutdownReport report = ctl.shutdown();
    EXPECT_TRUE(report.ok()) << report.to_string();
  }
  EXPECT_TRUE(read_with_pread(path) == expected) << "the file's contents differ from what was written";
}

// The shapes reach the full disk at different places in the cstdio engine: `buffered` fits the
// stdio buffer (64 KiB), so the failure comes out of the fsync's fflush; `large` overflows it,
// so a write-back's fwrite fails while flushing bytes of earlier, completed write-backs;
// `scattered` leaves holes, so each write-back seeks, and the seek's flush fails. In fstream,
// libstdc++'s filebuf sends writes of 1 KiB or more to write(2) at once (with what its buffer
// held), so its write-backs fail on the write itself.
constexpr FullFsCase kCases[] = {
    {"posix", "buffered", 12, kBlock, 16 * 1024},
    {"cstdio", "buffered", 12, kBlock, 16 * 1024},
    {"posix", "large", 128, kBlock, 64 * 1024},
    {"cstdio", "large", 128, kBlock, 64 * 1024},
    {"posix", "scattered", 64, 2 * kBlock, 64 * 1024},
    {"cstdio", "scattered", 64, 2 * kBlock, 64 * 1024},
    {"fstream", "buffered", 12, kBlock, 16 * 1024},
    {"fstream", "large", 128, kBlock, 64 * 1024},
    {"fstream", "scattered", 64, 2 * kBlock, 64 * 1024},
    {"uring", "large", 128, kBlock, 64 * 1024},
    {"libaio", "large", 128, kBlock, 64 * 1024},
};

INSTANTIATE_TEST_SUITE_P(Controller, ControllerFullFileSystem, testing::ValuesIn(kCases),
                         [](const testing::TestParamInfo<FullFsCase>& info) {
                           return std::string(info.param.engine) + "_" + info.param.shape;
                         });

}  // namespace
}  // namespace tai::test
