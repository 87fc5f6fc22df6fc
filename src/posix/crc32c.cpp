#include "src/posix/crc32c.hpp"

#include <boost/crc.hpp>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define TAI_CRC32C_X86 1
#endif

namespace tai::posix::detail {
namespace {

#ifdef TAI_CRC32C_X86
// Compiled for SSE 4.2 alone so that the rest of the library keeps the baseline ISA; called only
// after the CPU was checked.
__attribute__((target("sse4.2"))) std::uint32_t crc32c_sse42(const void* p, std::size_t n) noexcept {
  const auto* b = static_cast<const unsigned char*>(p);
  std::uint64_t c = 0xFFFFFFFFu;
  while (n >= 8) {
    std::uint64_t v;
    std::memcpy(&v, b, 8);
    c = _mm_crc32_u64(c, v);
    b += 8;
    n -= 8;
  }
  auto c32 = static_cast<std::uint32_t>(c);
  while (n > 0) {
    c32 = _mm_crc32_u8(c32, *b++);
    --n;
  }
  return c32 ^ 0xFFFFFFFFu;
}

bool cpu_has_sse42() noexcept {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace

std::uint32_t crc32c_portable(const void* p, std::size_t n) noexcept {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> c;
  c.process_bytes(p, n);
  return c.checksum();
}

bool crc32c_has_hardware() noexcept {
#ifdef TAI_CRC32C_X86
  return cpu_has_sse42();
#else
  return false;
#endif
}

std::uint32_t crc32c(const void* p, std::size_t n) noexcept {
#ifdef TAI_CRC32C_X86
  if (cpu_has_sse42()) return crc32c_sse42(p, n);
#endif
  return crc32c_portable(p, n);
}

}  // namespace tai::posix::detail
