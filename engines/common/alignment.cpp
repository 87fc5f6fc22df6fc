// Direct-I/O alignment discovery: statx(STATX_DIOALIGN), else the device's logical block size,
// else 4096. See engines/common/alignment.hpp.
#include "engines/common/alignment.hpp"

#include <fcntl.h>
#include <linux/fs.h>  // BLKSSZGET
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace tai::detail {
namespace {

constexpr std::uint32_t kDefaultAlignment = 4096;
// Anything larger than this is not a block size but garbage (a broken sysfs file, a bad driver).
constexpr std::uint64_t kLargestPlausibleAlignment = 1u << 20;

bool plausible(std::uint64_t v) noexcept {
  return is_power_of_two(v) && v <= kLargestPlausibleAlignment;
}

}  // namespace

bool alignment_from_statx(int fd, Alignment& out) noexcept {
#ifdef STATX_DIOALIGN
  struct statx stx {};
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) != 0) return false;
  // The kernel sets the mask bit only when the file system answered; both fields 0 with the
  // bit set means "this file does not support direct I/O", which is not an alignment: fall
  // through to the device, the open with O_DIRECT will say the rest.
  if ((stx.stx_mask & STATX_DIOALIGN) == 0) return false;
  if (!plausible(stx.stx_dio_mem_align) || !plausible(stx.stx_dio_offset_align)) return false;
  out.memory = stx.stx_dio_mem_align;
  out.offset = stx.stx_dio_offset_align;
  out.length = stx.stx_dio_offset_align;
  out.source = "statx";
  return true;
#else
  (void)fd;
  (void)out;
  return false;  // headers older than Linux 6.1: the kernel cannot be asked
#endif
}

namespace {

// Reads one unsigned number from a sysfs file; 0 when missing or unreadable.
std::uint64_t read_sysfs_number(const std::string& path) noexcept {
  // Plain open/read: no iostreams, no exceptions, no allocation beyond the path.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char text[32] = {};
  ssize_t n;
  do {
    n = ::read(fd, text, sizeof text - 1);
  } while (n < 0 && errno == EINTR);
  ::close(fd);
  if (n <= 0) return 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text, &end, 10);
  if (end == text) return 0;
  return v;
}

std::uint64_t logical_block_size_of_device(dev_t dev) noexcept {
  // A major of 0 is an anonymous device (tmpfs, overlay, btrfs subvolumes, NFS): no block
  // device behind it that sysfs could describe.
  if (major(dev) == 0) return 0;
  try {
    std::string base = "/sys/dev/block/" + std::to_string(major(dev)) + ":" + std::to_string(minor(dev));
    // A whole disk (or dm/md/loop device) has its own queue/; a partition does not, its
    // sysfs directory sits inside the parent disk's, whose queue/ is the one that applies.
    if (std::uint64_t v = read_sysfs_number(base + "/queue/logical_block_size")) return v;
    return read_sysfs_number(base + "/../queue/logical_block_size");
  } catch (...) {  // std::bad_alloc from the path strings: treat as "unknown"
    return 0;
  }
}

}  // namespace

bool alignment_from_device(int fd, Alignment& out) noexcept {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return false;
  std::uint64_t lbs = 0;
  if (S_ISBLK(st.st_mode)) {
    int size = 0;
    if (::ioctl(fd, BLKSSZGET, &size) == 0 && size > 0) lbs = static_cast<std::uint64_t>(size);
  } else {
    lbs = logical_block_size_of_device(st.st_dev);
  }
  if (!plausible(lbs)) return false;
  const auto v = static_cast<std::uint32_t>(lbs);
  out.memory = v;
  out.offset = v;
  out.length = v;
  out.source = "logical-block-size";
  return true;
}

Alignment discover_alignment(int fd) noexcept {
  Alignment a;
  if (alignment_from_statx(fd, a)) return a;
  if (alignment_from_device(fd, a)) return a;
  a.memory = a.offset = a.length = kDefaultAlignment;
  a.source = "default";
  return a;
}

}  // namespace tai::detail
