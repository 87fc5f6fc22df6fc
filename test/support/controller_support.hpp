// Shared by the controller tests (test/controller_*_test.cpp): engine availability, raw file
// access that bypasses TAI (plain open/pread/pwrite), patterns, and the scale of randomized
// tests under sanitizers and in debug builds.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "tai/config.hpp"
#include "tai/engine_selector.hpp"

namespace tai::test {

/// Why `engine` cannot run in this build or on this kernel ("" when it can): the selector's
/// exact reason, for GTEST_SKIP().
inline std::string engine_unavailable_reason(const std::string& engine) {
  for (const EngineInfo& e : list_engines()) {
    if (e.name == engine) return e.available ? std::string() : "engine '" + engine + "' unavailable: " + e.reason;
  }
  return "engine '" + engine + "' is not known to this build";
}

/// True in a build with AddressSanitizer or ThreadSanitizer (TAI_SANITIZE is not empty).
inline bool sanitized_build() { return std::string(TAI_SANITIZE).size() > 0; }

/// The factor randomized controller tests scale their operation counts by: 1 in an optimised
/// build, 0.1 in a debug build, 0.02 under a sanitizer (TSan slows the workers and the
/// submitting threads 5-15x, and they share 2 cores). `env` (a factor) overrides.
inline double controller_test_scale(const char* env) {
  if (const char* s = std::getenv(env)) return std::strtod(s, nullptr);
  if (sanitized_build()) return 0.02;
#ifndef NDEBUG
  return 0.1;
#else
  return 1.0;
#endif
}

/// The whole file at `path` read with plain pread (no TAI, no engine): what the kernel has.
/// Empty when the file cannot be opened.
inline std::vector<unsigned char> read_with_pread(const std::string& path) {
  std::vector<unsigned char> out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  struct stat st {};
  if (::fstat(fd, &st) == 0) {
    out.resize(static_cast<std::size_t>(st.st_size));
    std::size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(done));
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    out.resize(done);
  }
  ::close(fd);
  return out;
}

/// Creates (or truncates) `path` as `size` zero bytes.
inline bool make_zero_file(const std::string& path, std::uint64_t size) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const bool ok = ::ftruncate(fd, static_cast<off_t>(size)) == 0;
  ::close(fd);
  return ok;
}

/// `n` bytes of a pattern that depends on `seed` and on the position, so that a misplaced or
/// stale byte shows.
inline std::vector<unsigned char> pattern(std::size_t n, std::uint64_t seed) {
  std::vector<unsigned char> v(n);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (std::size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v[i] = static_cast<unsigned char>(x);
  }
  return v;
}

}  // namespace tai::test
