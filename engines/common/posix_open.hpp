// engines/common/posix_open.hpp - open(2) for engines with a kernel descriptor (posix, cstdio,
// fstream, libaio, uring): flag mapping, fadvise hints, and error messages that say what went
// wrong (a refused Open::direct included).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <optional>
#include <string>

#include "engines/common/alignment.hpp"
#include "tai/engine.hpp"
#include "tai/error.hpp"

namespace tai::detail {

/// open(2) flags for `flags`: O_RDONLY / O_WRONLY / O_RDWR (O_RDONLY when neither read nor
/// write is asked), O_CREAT, O_TRUNC, O_DIRECT, O_DSYNC, and always O_CLOEXEC. Hints are not
/// open flags (see apply_open_hints), nor is Open::shared_writers (the engine base reads it from
/// the file's mode). Thread-safe.
inline int open_flags(Open flags) noexcept {
  int f = O_CLOEXEC;
  const bool r = has(flags, Open::read);
  const bool w = has(flags, Open::write);
  f |= (r && w) ? O_RDWR : w ? O_WRONLY : O_RDONLY;
  if (has(flags, Open::create)) f |= O_CREAT;
  if (has(flags, Open::truncate)) f |= O_TRUNC;
  if (has(flags, Open::direct)) f |= O_DIRECT;
  if (has(flags, Open::dsync)) f |= O_DSYNC;
  return f;
}

/// Applies the open-time posix_fadvise hints of `flags` to `fd`: sequential, random, noreuse,
/// and willneed (whole file). dontneed is per transfer (apply_dontneed). Failures are ignored:
/// advice is advice, and a kernel that ignores it (NOREUSE before 6.3) is not an error.
/// Thread-safe.
inline void apply_open_hints(int fd, Open flags) noexcept {
  if (has(flags, Open::sequential)) (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  if (has(flags, Open::random)) (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
  if (has(flags, Open::noreuse)) (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_NOREUSE);
  if (has(flags, Open::willneed)) (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
}

/// POSIX_FADV_DONTNEED on [offset, offset + length): drops the clean cached pages of that range
/// (the fadvise note's replacement for O_DIRECT on reads). Dirty pages are only queued for write-back
/// and stay cached until it finishes; with O_DSYNC a written range is clean and dropped at once.
/// Thread-safe.
inline void apply_dontneed(int fd, std::uint64_t offset, std::uint64_t length) noexcept {
  if (length == 0) return;
  (void)::posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(length), POSIX_FADV_DONTNEED);
}

/// For engines that buffer every transfer in user space (cstdio, fstream): the EINVAL an open
/// with Open::direct gets, naming the engine and its buffer (`buffered_by`), or nullopt when
/// `flags` has no Open::direct. Engine::open refuses such opens already (the engines say
/// direct_io = false); this guards their do_open, which wrappers reach through
/// Engine::native_open. Thread-safe.
inline std::optional<Error> refuse_direct(const std::string& path, Open flags, const char* engine_name,
                                          const char* buffered_by) {
  if (!has(flags, Open::direct)) return std::nullopt;
  return Error{std::error_code(EINVAL, std::generic_category()),
               "open '" + path + "': engine '" + engine_name + "' cannot do direct I/O (" + buffered_by +
                   " buffers every transfer); use posix, libaio or uring for Open::direct"};
}

/// open(2) of `path` with open_flags(mode.flags) and mode.permissions, retrying EINTR.
/// On failure the Error names the engine, the path and the reason; an EINVAL caused by O_DIRECT
/// says "the file system refuses O_DIRECT" (tmpfs before Linux 6.6, procfs, some FUSE file
/// systems), never a bare EINVAL. Like open(2) itself, a refused O_CREAT|O_DIRECT may leave an
/// empty file behind (the kernel creates it before it checks O_DIRECT). Thread-safe.
///
/// A direct file opened for writing only is opened O_RDWR when the permissions allow it: an
/// unaligned write on it does read-modify-write of its edge blocks, which needs to read (with
/// O_WRONLY that read fails with EBADF). The engine base still refuses the user's reads of such
/// a file (its mode says write-only). When O_RDWR is refused (EACCES, EPERM: a file the caller may
/// write but not read) it falls back to O_WRONLY, where only block-aligned writes can succeed.
inline Result<int> open_descriptor(const std::string& path, const OpenMode& mode, const char* engine_name) {
  const int flags = open_flags(mode.flags);
  const bool rmw_needs_read = (flags & O_DIRECT) && (flags & O_ACCMODE) == O_WRONLY;
  int fd;
  if (rmw_needs_read) {
    do {
      fd = ::open(path.c_str(), (flags & ~O_ACCMODE) | O_RDWR, static_cast<mode_t>(mode.permissions));
    } while (fd < 0 && errno == EINTR);
    if (fd >= 0) return fd;  // else the open below gives the error (or works: EACCES on read)
  }
  do {
    fd = ::open(path.c_str(), flags, static_cast<mode_t>(mode.permissions));
  } while (fd < 0 && errno == EINTR);
  if (fd >= 0) return fd;
  const int err = errno;
  const std::string what = std::string("engine '") + engine_name + "': open '" + path + "'";
  if (err == EINVAL && (flags & O_DIRECT)) {
    // EINVAL has other causes too (a name the file system cannot store): open again without
    // O_DIRECT (and without O_TRUNC, which must not happen on a failed open) to tell them apart.
    int probe;
    do {
      probe = ::open(path.c_str(), flags & ~(O_DIRECT | O_TRUNC), static_cast<mode_t>(mode.permissions));
    } while (probe < 0 && errno == EINTR);
    const int probe_err = probe < 0 ? errno : 0;
    if (probe >= 0) ::close(probe);
    if (probe >= 0 || probe_err != EINVAL) {
      return Error{std::error_code(EINVAL, std::generic_category()),
                   what + ": the file system refuses O_DIRECT (EINVAL); open without Open::direct, "
                          "or put the file on a file system with direct I/O (ext4, xfs, btrfs)"};
    }
  }
  return Error::from_errno(err, what);
}

/// The capability record of a file an engine with `engine_caps` opened on descriptor `fd` with
/// `mode`: direct and dsync as asked, and for a direct file the alignment discovered for it
/// (statx STATX_DIOALIGN, else the device's logical block size, else 4096).
inline FileCapabilities descriptor_capabilities(int fd, const OpenMode& mode, const Capabilities& engine_caps) {
  FileCapabilities caps;
  caps.engine = engine_caps;
  caps.direct = has(mode.flags, Open::direct);
  caps.dsync = has(mode.flags, Open::dsync);
  if (caps.direct) caps.alignment = discover_alignment(fd);
  return caps;
}

}  // namespace tai::detail
