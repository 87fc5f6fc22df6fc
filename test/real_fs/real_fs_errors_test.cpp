// Errors from a real file system, through the whole controller (DESIGN section 2, "Errors are
// never lost"): a loop-mounted ext4, XFS or btrfs with about 16 MiB free that fills up (ENOSPC),
// and one that is shut down under TAI the way xfstests' godown does it (EIO on everything after,
// as from a dead disk).
// The fault engine injects errors at the engine interface; these show that the errors the kernel
// really returns, at the moment it really returns them (ext4 reserves blocks at write(2) time
// under delayed allocation; O_DIRECT and io_uring fail at submission or completion), reach a
// receipt, never turn into a successful fsync, and leave what an earlier fsync covered intact.
//
// One body over posix (buffered and O_DIRECT), io_uring and libaio, each under BTreeDefault
// (writes cached, errors surface at write-back) and BTreeTrivial (writes go straight through):
// all eight on ext4, four of them (one per engine and tree kind) on XFS and btrfs, which each
// fill and fail their own way. Skipped with the reason without root, the mkfs tool or a loop
// device, per engine where the kernel or the build lacks it, and the shutdown cases where the
// file system has no shutdown ioctl (btrfs, on most kernels).
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "support/controller_support.hpp"
#include "support/small_loop_fs.hpp"
#include "tai/tai.hpp"

namespace tai::test {
namespace {

constexpr unsigned kFsMiB = 16;
constexpr std::size_t kChunk = 256 * 1024;

// engine, direct, BTreeDefault (else BTreeTrivial)
using EngineCase = std::tuple<const char*, bool, bool>;
using RealFsCase = std::tuple<FsType, EngineCase>;

std::string case_name(const testing::TestParamInfo<RealFsCase>& info) {
  const EngineCase& e = std::get<1>(info.param);
  return std::string(fs_name(std::get<0>(info.param))) + "_" + std::get<0>(e) + (std::get<1>(e) ? "_direct" : "_buffered") +
         (std::get<2>(e) ? "_Default" : "_Trivial");
}

class RealFileSystemErrors : public testing::TestWithParam<RealFsCase> {
 protected:
  void SetUp() override { TAI_SKIP_UNLESS_ENGINE_AVAILABLE(std::get<0>(engine_case())); }

  static const EngineCase& engine_case() { return std::get<1>(GetParam()); }
  static FsType fs_type() { return std::get<0>(GetParam()); }
  Open flags() const {
    Open f = Open::read | Open::write | Open::create;
    if (std::get<1>(engine_case())) f = f | Open::direct;
    return f;
  }
  Result<File> open(Controller& ctl, const std::string& path) const {
    const auto& p = engine_case();
    return open_engine_and_tree(ctl, EngineAndTree{std::get<0>(p), std::get<2>(p)}, path, flags());
  }
  static ControllerOptions options() {
    ControllerOptions o = two_quiet_workers();
    return o;
  }
};

// Everything the receipts said, for the message of a failed expectation.
struct Seen {
  int first_error = 0;
  std::string first_message;
  void note(const Receipt& r) {
    if (!r.wait_for(std::chrono::seconds(60))) {
      if (first_error == 0) first_error = ETIMEDOUT, first_message = "a receipt did not finish in 60 s";
      return;
    }
    if (!r.ok() && first_error == 0) first_error = r.error().value(), first_message = r.message();
  }
};

TEST_P(RealFileSystemErrors, AFullFileSystemFailsAReceiptAndKeepsWhatWasSynced) {
  SmallLoopFs fs(fs_type(), kFsMiB);
  if (!fs.mounted()) GTEST_SKIP() << fs.skip_reason();
  const std::vector<unsigned char> kept = pattern(kChunk, 1);
  {
    Controller ctl(options());
    auto f = open(ctl, fs.file("kept"));
    ASSERT_TRUE(f) << f.error().message;
    ASSERT_TRUE(wait_ok(f.value().write(0, kept.data(), kept.size())));
    ASSERT_TRUE(wait_ok(f.value().fsync()));

    // Fill with more than the file system holds; fsync every 8 chunks; stop at the first error.
    auto g = open(ctl, fs.file("filler"));
    ASSERT_TRUE(g) << g.error().message;
    File& filler = g.value();
    Seen seen;
    std::uint64_t synced_end = 0;  // the filler's bytes a successful fsync covered
    const std::uint64_t limit = std::uint64_t{2 * kFsMiB} << 20;
    std::vector<std::vector<unsigned char>> chunks;
    std::vector<bool> accepted;  // the chunk's write receipt succeeded
    for (std::uint64_t off = 0; off < limit && seen.first_error == 0; off += kChunk) {
      chunks.push_back(pattern(kChunk, 100 + off / kChunk));
      const Receipt w = filler.write(off, chunks.back().data(), kChunk);
      seen.note(w);
      accepted.push_back(w.wait_for(std::chrono::seconds(0)) && w.ok());
      if (seen.first_error == 0 && (off / kChunk) % 8 == 7) {
        const Receipt s = filler.fsync();
        seen.note(s);
        if (seen.first_error == 0) synced_end = off + kChunk;
      }
    }
    if (seen.first_error == 0) seen.note(filler.fsync());
    // The file system is full: an error must have reached the program by now, and it must be
    // the kernel's ENOSPC (or, for a write-back after it, the EIO some kernels report).
    ASSERT_NE(seen.first_error, 0) << "wrote " << limit << " bytes into a " << fs_name(fs_type())
                                   << " with about " << kFsMiB << " MiB free and every receipt succeeded";
    EXPECT_TRUE(seen.first_error == ENOSPC || seen.first_error == EIO)
        << "first error: " << std::strerror(seen.first_error) << " (" << seen.first_message << ")";
    EXPECT_LE(synced_end, std::uint64_t{kFsMiB} << 20) << "fsyncs succeeded over more bytes than the file system holds";
    // One more fsync. A write whose own receipt failed promises nothing (as write(2) returning
    // ENOSPC), so the fsync may succeed where every failed byte came back on a write receipt:
    // then every accepted write must be on the disk. Where a cached write was accepted and its
    // write-back failed, it cannot be there, so that fsync must fail (the fsyncgate rule).
    const Receipt again = filler.fsync();
    ASSERT_TRUE(again.wait_for(std::chrono::seconds(60)));
    const bool again_ok = again.ok();
    (void)filler.close().wait_for(std::chrono::seconds(60));

    // What a successful fsync covered is in the file, read with plain pread.
    const std::vector<unsigned char> on_disk = read_with_pread(fs.file("filler"));
    ASSERT_GE(on_disk.size(), synced_end);
    for (std::uint64_t off = 0; off < synced_end; off += kChunk) {
      ASSERT_EQ(0, std::memcmp(on_disk.data() + off, chunks[off / kChunk].data(), kChunk))
          << "synced chunk at " << off << " differs";
    }
    if (again_ok) {
      for (std::size_t i = 0; i < chunks.size(); ++i) {
        if (!accepted[i]) continue;
        const std::uint64_t off = i * kChunk;
        ASSERT_TRUE(on_disk.size() >= off + kChunk && std::memcmp(on_disk.data() + off, chunks[i].data(), kChunk) == 0)
            << "an fsync after ENOSPC succeeded, but the accepted write at " << off << " is not on the disk";
      }
    }
    (void)ctl.shutdown();  // reports the failed write-back; must return
  }
  EXPECT_EQ(read_with_pread(fs.file("kept")), kept) << "the file fsynced before the file system filled changed";
}

TEST_P(RealFileSystemErrors, AFileSystemThatDiesFailsTheFsyncAndKeepsWhatWasSynced) {
  SmallLoopFs fs(fs_type(), kFsMiB);
  if (!fs.mounted()) GTEST_SKIP() << fs.skip_reason();
  if (const std::string no = fs.shutdown_support(); !no.empty()) GTEST_SKIP() << no;
  const std::vector<unsigned char> synced = pattern(kChunk, 7);
  const std::vector<unsigned char> unsynced = pattern(kChunk, 8);
  {
    Controller ctl(options());
    auto f = open(ctl, fs.file("data"));
    ASSERT_TRUE(f) << f.error().message;
    File& file = f.value();
    ASSERT_TRUE(wait_ok(file.write(0, synced.data(), synced.size())));
    ASSERT_TRUE(wait_ok(file.fsync()));
    const Receipt late_write = file.write(kChunk, unsynced.data(), unsynced.size());
    ASSERT_TRUE(late_write.wait_for(std::chrono::seconds(60)));

    ASSERT_EQ(fs.shut_down(), "");
    // The data written after the last fsync cannot reach the disk any more: the fsync (or the
    // write itself, when it went straight to the kernel) must fail, never succeed.
    const Receipt sync = file.fsync();
    ASSERT_TRUE(sync.wait_for(std::chrono::seconds(60))) << "the fsync on a dead file system hung";
    EXPECT_FALSE(late_write.ok() && sync.ok()) << "fsync succeeded after the file system was shut down";
    if (!sync.ok()) {
      EXPECT_EQ(sync.error().value(), EIO) << sync.message();
    }
    // Nor may a second fsync pretend the data is now safe.
    const Receipt again = file.fsync();
    ASSERT_TRUE(again.wait_for(std::chrono::seconds(60)));
    EXPECT_FALSE(again.ok()) << "a second fsync on a dead file system succeeded";
    const Receipt closed = file.close();
    ASSERT_TRUE(closed.wait_for(std::chrono::seconds(60))) << "close on a dead file system hung";
    // The controller still shuts down, and says what it lost.
    const ShutdownReport rep = ctl.shutdown();
    (void)rep;
  }
  ASSERT_EQ(fs.remount(), "");
  const std::vector<unsigned char> after = read_with_pread(fs.file("data"));
  ASSERT_GE(after.size(), kChunk) << "the fsynced part of the file is gone after the remount";
  EXPECT_EQ(0, std::memcmp(after.data(), synced.data(), kChunk)) << "the fsynced bytes changed";
}

// Data the program handed over and never synced or closed, whose write-back at shutdown fails:
// nobody else can tell the program, so the shutdown report must name it. Only where TAI holds
// the data (BTreeDefault caches the write; under BTreeTrivial it is already in the kernel, which
// loses it on a dead disk as silently as it does without TAI).
TEST_P(RealFileSystemErrors, AShutdownOverADeadFileSystemReportsWhatItLost) {
  if (!std::get<2>(engine_case())) GTEST_SKIP() << "BTreeTrivial caches nothing: there is nothing for TAI to lose";
  SmallLoopFs fs(fs_type(), kFsMiB);
  if (!fs.mounted()) GTEST_SKIP() << fs.skip_reason();
  if (const std::string no = fs.shutdown_support(); !no.empty()) GTEST_SKIP() << no;
  const std::vector<unsigned char> data = pattern(kChunk, 9);
  Controller ctl(options());
  auto f = open(ctl, fs.file("lost"));
  ASSERT_TRUE(f) << f.error().message;
  ASSERT_TRUE(wait_ok(f.value().write(0, data.data(), data.size())));
  ASSERT_EQ(fs.shut_down(), "");
  const ShutdownReport rep = ctl.shutdown();
  ASSERT_FALSE(rep.ok()) << "the write-back of a cached write failed at shutdown and the report says nothing";
  EXPECT_NE(rep.to_string().find(fs.file("lost")), std::string::npos) << "the report does not name the file: " << rep.to_string();
}

INSTANTIATE_TEST_SUITE_P(
    Ext4, RealFileSystemErrors,
    testing::Combine(testing::Values(FsType::ext4),
                     testing::Values(EngineCase{"posix", false, true}, EngineCase{"posix", false, false},
                                     EngineCase{"posix", true, true}, EngineCase{"posix", true, false},
                                     EngineCase{"uring", true, true}, EngineCase{"uring", false, false},
                                     EngineCase{"libaio", true, true}, EngineCase{"libaio", true, false})),
    case_name);
// XFS and btrfs: one case per engine and both tree kinds, buffered and direct, to keep the
// suite's time small (each case makes and mounts its own file system).
INSTANTIATE_TEST_SUITE_P(
    XfsBtrfs, RealFileSystemErrors,
    testing::Combine(testing::Values(FsType::xfs, FsType::btrfs),
                     testing::Values(EngineCase{"posix", false, true}, EngineCase{"posix", true, false},
                                     EngineCase{"uring", true, true}, EngineCase{"libaio", true, false})),
    case_name);

}  // namespace
}  // namespace tai::test
