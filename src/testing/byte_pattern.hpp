// tai/testing/byte_pattern.hpp - the bytes crash and order tests write: a pattern that
// depends on a seed and on the position, so that a misplaced or stale byte shows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tai::engines {

/// `n` bytes of an xorshift64 stream seeded by `seed`. Thread-safe (pure).
inline std::vector<unsigned char> byte_pattern(std::size_t n, std::uint64_t seed) {
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

}  // namespace tai::engines
