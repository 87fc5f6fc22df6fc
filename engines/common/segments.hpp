// Vectored writes (Request::iov) for engines without a native vectored call.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tai/engine.hpp"

namespace tai::detail {

/// Runs a vectored write as the writes it is made of, in order: write_one(address, offset,
/// length) returns bytes or -errno. Stops at the first short or failed segment and reports what
/// was written before it, or the error when nothing was (the result a short pwritev gives).
template <class WriteOne>
std::int64_t write_segments(const Request& r, WriteOne&& write_one) {
  std::uint64_t done = 0;
  for (std::uint32_t k = 0; k < r.iov_count && done < r.length; ++k) {
    std::uint64_t len = r.iov[k].iov_len;
    if (len > r.length - done) len = r.length - done;
    if (len == 0) continue;
    const std::int64_t got = write_one(static_cast<const void*>(r.iov[k].iov_base), r.offset + done, len);
    if (got < 0) return done != 0 ? static_cast<std::int64_t>(done) : got;
    done += static_cast<std::uint64_t>(got);
    if (static_cast<std::uint64_t>(got) < len) break;
  }
  return static_cast<std::int64_t>(done);
}

}  // namespace tai::detail

namespace tai::detail {

/// The segments of `r` covering its bytes [skip, skip + len), into `out` (reused): the array of
/// a request that continues or shortens a vectored write.
inline void segments_within(const Request& r, std::uint64_t skip, std::uint64_t len, std::vector<::iovec>& out) {
  out.clear();
  for (std::uint32_t k = 0; k < r.iov_count && len > 0; ++k) {
    const ::iovec& v = r.iov[k];
    if (skip >= v.iov_len) {
      skip -= v.iov_len;
      continue;
    }
    const std::uint64_t n = std::min<std::uint64_t>(v.iov_len - skip, len);
    out.push_back({static_cast<std::byte*>(v.iov_base) + skip, n});
    len -= n;
    skip = 0;
  }
}

}  // namespace tai::detail
