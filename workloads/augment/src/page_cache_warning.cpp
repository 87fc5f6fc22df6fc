#include "page_cache_warning.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace augment {

bool read_mem_available(std::uint64_t& bytes, std::string* err) {
  std::ifstream in("/proc/meminfo");
  if (!in) {
    if (err) *err = std::string("/proc/meminfo: ") + std::strerror(errno);
    return false;
  }
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, 13, "MemAvailable:") != 0) continue;
    std::istringstream fields(line.substr(13));
    std::uint64_t kib = 0;
    std::string unit;
    if (fields >> kib >> unit && unit == "kB") {
      bytes = kib * 1024;
      return true;
    }
    break;
  }
  // MemAvailable exists since Linux 3.14; older kernels only have MemFree + Cached estimates.
  if (err) *err = "/proc/meminfo has no MemAvailable line";
  return false;
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
