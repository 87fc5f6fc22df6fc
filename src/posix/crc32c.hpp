// CRC-32C (Castagnoli), the checksum of the order mode's log of epochs.
//
// Every batch of epochs is checksummed once when written and once per replay, so on a loop that
// syncs after each 4 KiB write the checksum runs over every byte the program writes. A table-driven
// CRC (one byte per step) took a third of the process's CPU there; the CPU's own CRC-32C
// instruction (SSE 4.2 on x86-64, taken when the processor has it) does eight bytes per step.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tai::posix::detail {

/// CRC-32C of n bytes at p (initial value and final xor 0xFFFFFFFF, reflected, as in iSCSI and
/// ext4's metadata checksums). Thread-safe; uses the hardware instruction when the CPU has it.
std::uint32_t crc32c(const void* p, std::size_t n) noexcept;

/// The same checksum computed a byte at a time from a table (boost::crc): the reference the
/// hardware path is tested against, and the path on CPUs without the instruction.
std::uint32_t crc32c_portable(const void* p, std::size_t n) noexcept;

/// Whether crc32c() takes the hardware instruction on this CPU (for tests and benchmarks).
bool crc32c_has_hardware() noexcept;

}  // namespace tai::posix::detail
