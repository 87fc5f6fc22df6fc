// Tests of engines/common/alignment.hpp (discover_alignment and the rounding helpers) and
// tai/detail/aligned_buffer.hpp.
#include "engines/common/alignment.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "support/test_env.hpp"
#include "tai/detail/aligned_buffer.hpp"

namespace {

using tai::Alignment;
using tai::detail::AlignedBuffer;
using tai::detail::discover_alignment;
using tai::detail::is_power_of_two;

/// An open descriptor closed at scope exit.
struct Fd {
  int fd;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

bool is_named_source(const char* s) {
  return std::strcmp(s, "statx") == 0 || std::strcmp(s, "logical-block-size") == 0 || std::strcmp(s, "default") == 0;
}

/// /sys/dev/block/M:m/queue/logical_block_size of the device holding `path` (the parent's for a
/// partition), or 0 when there is none.
std::uint64_t sysfs_logical_block_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || major(st.st_dev) == 0) return 0;
  const std::string base = "/sys/dev/block/" + std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  for (const char* rel : {"/queue/logical_block_size", "/../queue/logical_block_size"}) {
    std::ifstream in(base + rel);
    std::uint64_t v = 0;
    if (in >> v) return v;
  }
  return 0;
}

TEST(Alignment, DiskFileHasAPowerOfTwoAlignmentOfAtLeast512FromANamedSource) {
  tai::test::ScratchDir dir;
  const std::string path = dir.file("f");
  Fd f(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  ASSERT_GE(f.fd, 0) << std::strerror(errno);

  const Alignment a = discover_alignment(f.fd);
  EXPECT_TRUE(is_named_source(a.source)) << a.source;
  EXPECT_TRUE(is_power_of_two(a.memory)) << a.memory;
  EXPECT_TRUE(is_power_of_two(a.offset)) << a.offset;
  EXPECT_EQ(a.length, a.offset);
  EXPECT_GE(a.offset, 512u);
  EXPECT_LE(a.memory, a.offset) << "memory alignment is never stricter than the block size";
  // A disk file system on a block device: the answer comes from the kernel or the device,
  // never from the blind default.
  if (sysfs_logical_block_size(path) != 0) {
    EXPECT_STRNE(a.source, "default");
  }
  std::printf("alignment of %s: memory %u offset %u length %u (%s)\n", path.c_str(), a.memory, a.offset, a.length,
              a.source);
}

TEST(Alignment, DiscoveredAlignmentIsAcceptedByODirect) {
  tai::test::ScratchDir dir;
  const std::string path = dir.file("f");
  Fd f(::open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0644));
  if (f.fd < 0 && errno == EINVAL) GTEST_SKIP() << dir.path() << " does not support O_DIRECT";
  ASSERT_GE(f.fd, 0) << std::strerror(errno);
  const Alignment a = discover_alignment(f.fd);

  // One block, written at offset a.offset from a buffer aligned exactly to a.memory (and not
  // to anything larger, when a.memory < a.offset) must be accepted.
  AlignedBuffer storage(2 * a.offset, a.offset);
  std::byte* p = storage.data();
  if (a.memory < a.offset) p += a.memory;  // aligned to a.memory, misaligned to a.offset
  std::memset(p, 0x5A, a.offset);
  ASSERT_EQ(::pwrite(f.fd, p, a.offset, a.offset), static_cast<ssize_t>(a.offset)) << std::strerror(errno);
  std::memset(p, 0, a.offset);
  ASSERT_EQ(::pread(f.fd, p, a.offset, a.offset), static_cast<ssize_t>(a.offset)) << std::strerror(errno);
  EXPECT_EQ(static_cast<unsigned char>(p[a.offset - 1]), 0x5A);
}

TEST(Alignment, DeviceSourceMatchesSysfsLogicalBlockSize) {
  tai::test::ScratchDir dir;
  const std::string path = dir.file("f");
  const std::uint64_t expected = [&] {
    Fd f(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    return sysfs_logical_block_size(path);
  }();
  if (expected == 0) GTEST_SKIP() << dir.path() << " is not on a block device that sysfs describes";
  Fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_GE(f.fd, 0);
  Alignment a;
  ASSERT_TRUE(tai::detail::alignment_from_device(f.fd, a));
  EXPECT_STREQ(a.source, "logical-block-size");
  EXPECT_EQ(a.offset, expected);
  EXPECT_EQ(a.memory, expected);
  EXPECT_EQ(a.length, expected);
}

TEST(Alignment, StatxMemoryAlignmentIsKeptApartFromOffsetAlignment) {
  tai::test::ScratchDir dir;
  const std::string path = dir.file("f");
  Fd f(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  ASSERT_GE(f.fd, 0);
  Alignment a;
  if (!tai::detail::alignment_from_statx(f.fd, a)) GTEST_SKIP() << "the kernel or file system gives no STATX_DIOALIGN";
#ifdef STATX_DIOALIGN
  struct statx stx {};
  ASSERT_EQ(::statx(f.fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx), 0);
  EXPECT_EQ(a.memory, stx.stx_dio_mem_align);
  EXPECT_EQ(a.offset, stx.stx_dio_offset_align);
  EXPECT_EQ(a.length, stx.stx_dio_offset_align);
  EXPECT_STREQ(a.source, "statx");
#endif
}

TEST(Alignment, TmpfsFileFallsBackSensibly) {
  const char* dirs[] = {"/dev/shm", "/run"};
  std::string path;
  for (const char* d : dirs) {
    std::string candidate = std::string(d) + "/tai-alignment-XXXXXX";
    int fd = ::mkstemp(candidate.data());
    if (fd >= 0) {
      ::close(fd);
      path = candidate;
      break;
    }
  }
  if (path.empty()) GTEST_SKIP() << "no writable tmpfs (/dev/shm, /run)";
  Fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  ::unlink(path.c_str());
  ASSERT_GE(f.fd, 0);
  const Alignment a = discover_alignment(f.fd);
  EXPECT_TRUE(is_named_source(a.source)) << a.source;
  EXPECT_TRUE(is_power_of_two(a.memory));
  EXPECT_TRUE(is_power_of_two(a.offset));
  EXPECT_GE(a.offset, 512u);
  // tmpfs has no block device behind it (anonymous st_dev): unless a kernel reports
  // STATX_DIOALIGN for it, the answer is the 4096 default, never a made-up device size.
  if (std::strcmp(a.source, "statx") != 0) {
    EXPECT_STREQ(a.source, "default");
    EXPECT_EQ(a.offset, 4096u);
    EXPECT_EQ(a.memory, 4096u);
  }
}

TEST(Alignment, BadDescriptorGetsTheDefault) {
  const Alignment a = discover_alignment(-1);
  EXPECT_STREQ(a.source, "default");
  EXPECT_EQ(a.offset, 4096u);
  EXPECT_EQ(a.memory, 4096u);
  EXPECT_EQ(a.length, 4096u);
}

TEST(Alignment, RoundingHelpers) {
  using namespace tai::detail;
  static_assert(round_down(4097, 4096) == 4096);
  static_assert(round_up(4097, 4096) == 8192);
  static_assert(round_up(4096, 4096) == 4096);
  static_assert(round_up(0, 512) == 0);
  static_assert(is_power_of_two(1) && is_power_of_two(512) && !is_power_of_two(0) && !is_power_of_two(768));
  EXPECT_EQ(round_down(std::numeric_limits<std::uint64_t>::max(), 512), std::numeric_limits<std::uint64_t>::max() - 511);
  EXPECT_EQ(round_up(1, 1), 1u);
  EXPECT_TRUE(is_aligned(std::uint64_t{1024}, 512));
  EXPECT_FALSE(is_aligned(std::uint64_t{1000}, 512));
  alignas(64) char bytes[128];
  EXPECT_TRUE(is_aligned(bytes, 64));
  EXPECT_FALSE(is_aligned(bytes + 1, 2));
}

TEST(AlignedBuffer, HonoursAlignmentAndSize) {
  for (std::size_t alignment : {std::size_t{1}, std::size_t{8}, std::size_t{512}, std::size_t{4096},
                                std::size_t{2} << 20}) {
    AlignedBuffer b(12345, alignment);
    ASSERT_FALSE(b.empty());
    EXPECT_EQ(b.size(), 12345u);
    EXPECT_TRUE(tai::detail::is_aligned(b.data(), alignment)) << alignment;
    EXPECT_GE(b.alignment(), alignment);
    b.zero();
    for (std::size_t i = 0; i < b.size(); i += 1000) EXPECT_EQ(b.data()[i], std::byte{0});
  }
}

TEST(AlignedBuffer, MovesOwnership) {
  AlignedBuffer a(4096, 4096);
  std::byte* p = a.data();
  AlignedBuffer b(std::move(a));
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): moved-from is specified as empty
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.data(), p);
  AlignedBuffer c;
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_TRUE(b.empty());  // NOLINT(bugprone-use-after-move)
  c.reset();
  EXPECT_TRUE(c.empty());
  EXPECT_FALSE(static_cast<bool>(c));
  AlignedBuffer d(64, 64);
  std::byte* raw = d.release();
  EXPECT_TRUE(d.empty());
  std::free(raw);
}

TEST(AlignedBuffer, FailuresAreEmptyOrBadAlloc) {
  EXPECT_TRUE(AlignedBuffer::try_allocate(0, 4096).empty());
  EXPECT_TRUE(AlignedBuffer::try_allocate(4096, 768).empty()) << "768 is not a power of two";
  EXPECT_TRUE(AlignedBuffer::try_allocate(4096, 0).empty());
  EXPECT_THROW(AlignedBuffer(4096, 768), std::bad_alloc);
  EXPECT_NO_THROW(AlignedBuffer(0, 4096));
}

TEST(AlignedBuffer, ImpossibleSizesFail) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The sanitizers' allocators abort on impossible sizes unless told to return null (the asan
  // and tsan test presets set allocator_may_return_null=1).
  const char* opts = std::getenv(
#if defined(__SANITIZE_ADDRESS__)
      "ASAN_OPTIONS"
#else
      "TSAN_OPTIONS"
#endif
  );
  if (!opts || !std::strstr(opts, "allocator_may_return_null=1"))
    GTEST_SKIP() << "this sanitizer aborts on impossible allocation sizes unless allocator_may_return_null=1";
#endif
  EXPECT_TRUE(AlignedBuffer::try_allocate(std::numeric_limits<std::size_t>::max() / 2, 4096).empty());
  EXPECT_THROW(AlignedBuffer(std::numeric_limits<std::size_t>::max() / 2, 4096), std::bad_alloc);
}

}  // namespace
