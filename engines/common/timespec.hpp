// engines/common/timespec.hpp - nanoseconds to a timespec, for the system calls that take one
// (futex, futex_waitv, ppoll, io_getevents): one place that splits seconds and nanoseconds.
#pragma once

#include <cstdint>
#include <ctime>

namespace tai::detail {

/// `ns` nanoseconds as a timespec (a duration or an absolute time, as the caller means it);
/// a negative value gives zero. Thread-safe (a pure function).
inline timespec ns_to_timespec(std::int64_t ns) noexcept {
  if (ns < 0) ns = 0;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  return ts;
}

}  // namespace tai::detail
