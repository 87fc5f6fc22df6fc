// engines/common/alignment.hpp - direct-I/O alignment of an open file, and rounding helpers.
//
// O_DIRECT transfers must respect three alignments: the buffer address, the file offset and the
// transfer length. Linux tells us the real numbers through statx(STATX_DIOALIGN) on kernels >= 6.1
// for file systems that implement it (ext4, xfs, f2fs, btrfs, block devices); elsewhere the
// logical block size of the backing device is the classic safe answer, and 4096 covers every
// device we know of when even that cannot be found (tmpfs, overlay, network file systems).
#pragma once

#include <cstdint>

#include "tai/engine.hpp"

namespace tai::detail {

/// The direct-I/O alignment of the file open as `fd`, in this order of preference:
///  1. statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN) when the kernel fills stx_dio_mem_align and
///     stx_dio_offset_align (source "statx"). Memory alignment may be smaller than the offset
///     alignment (e.g. 4 bytes vs 512 on NVMe); both are kept. Length alignment = offset alignment.
///  2. The logical block size of the backing device (source "logical-block-size"): BLKSSZGET when
///     `fd` is a block device, else /sys/dev/block/<major>:<minor>/queue/logical_block_size of
///     the device holding the file (the parent disk's when that device is a partition). Used for
///     memory, offset and length alike.
///  3. 4096 for all three (source "default").
/// Never fails; every returned number is a power of two >= 1. Thread-safe (no shared state).
Alignment discover_alignment(int fd) noexcept;

/// The two sources of discover_alignment, exposed for tests and diagnostics. Each returns
/// true and fills `out` (source "statx" / "logical-block-size") when it found an answer.
/// Thread-safe.
bool alignment_from_statx(int fd, Alignment& out) noexcept;
bool alignment_from_device(int fd, Alignment& out) noexcept;

/// True when v is a power of two (0 is not).
constexpr bool is_power_of_two(std::uint64_t v) noexcept { return v != 0 && (v & (v - 1)) == 0; }

/// v rounded down to a multiple of `alignment` (a power of two).
constexpr std::uint64_t round_down(std::uint64_t v, std::uint64_t alignment) noexcept {
  return v & ~(alignment - 1);
}

/// v rounded up to a multiple of `alignment` (a power of two). Wraps to 0 when the result
/// would pass 2^64 - 1; callers that can get there check `v > UINT64_MAX - alignment + 1` first.
constexpr std::uint64_t round_up(std::uint64_t v, std::uint64_t alignment) noexcept {
  return (v + alignment - 1) & ~(alignment - 1);
}

/// True when v is a multiple of `alignment` (a power of two).
constexpr bool is_aligned(std::uint64_t v, std::uint64_t alignment) noexcept {
  return (v & (alignment - 1)) == 0;
}

/// True when the address is a multiple of `alignment` (a power of two).
inline bool is_aligned(const void* p, std::uint64_t alignment) noexcept {
  return is_aligned(static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p)), alignment);
}

}  // namespace tai::detail
