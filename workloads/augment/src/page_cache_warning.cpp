#include "page_cache_warning.hpp"

#include "process_counters.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace augment {

bool read_mem_available(std::uint64_t& bytes, std::string* err) {
  // MemAvailable exists since Linux 3.14; older kernels only have MemFree + Cached estimates.
  return read_kib_field("/proc/meminfo", "MemAvailable", bytes, err);
}

std::string page_cache_warning(std::uint64_t bytes_to_write, bool intermediate_fsync, bool direct_io,
                               std::uint64_t mem_available_bytes) {
  if (direct_io || intermediate_fsync || bytes_to_write > mem_available_bytes) return {};
  auto mib = [](std::uint64_t b) { return std::to_string((b + (1u << 20) - 1) >> 20); };
  return "warning: the output (" + mib(bytes_to_write) + " MiB) fits in the page cache (MemAvailable " +
         mib(mem_available_bytes) +
         " MiB) and no fsync but the final one is asked for: the figure then measures memory, not storage";
}

std::string page_cache_warning(std::uint64_t bytes_to_write, bool intermediate_fsync, bool direct_io) {
  std::uint64_t available = 0;
  if (!read_mem_available(available, nullptr)) return {};
  return page_cache_warning(bytes_to_write, intermediate_fsync, direct_io, available);
}

}  // namespace augment
