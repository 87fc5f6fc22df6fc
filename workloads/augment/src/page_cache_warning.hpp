// The warning a run prints when its figure would measure the page cache rather than the storage:
// buffered writes of an output that fits in free memory, with no fsync before the final one, all
// complete at memory speed, and only the last fsync (or none) touches the device.
#pragma once

#include <cstdint>
#include <string>

namespace augment {

// MemAvailable of /proc/meminfo in bytes (the kernel's estimate of memory usable without swapping,
// page cache it can drop included); false (and *err) when unreadable.
bool read_mem_available(std::uint64_t& bytes, std::string* err);

// output_bytes is what the run leaves in the page cache: the size of its output files (an
// overwrite rewrites the same pages and adds nothing; each amplified copy does add). It is known
// exactly only after the run (PNG sizes vary), so the warning may be printed with the run's result.
// Empty when the run's figure measures storage. Otherwise one line: the output (output_bytes)
// fits in mem_available_bytes and no fsync but the final one is asked for (intermediate_fsync
// false), so "the figure then measures memory, not storage". direct_io runs bypass the page cache
// and never warn.
std::string page_cache_warning(std::uint64_t output_bytes, bool intermediate_fsync, bool direct_io,
                               std::uint64_t mem_available_bytes);
// The same, reading MemAvailable now; when /proc/meminfo is unreadable, no warning (and no guess).
std::string page_cache_warning(std::uint64_t output_bytes, bool intermediate_fsync, bool direct_io = false);

}  // namespace augment
