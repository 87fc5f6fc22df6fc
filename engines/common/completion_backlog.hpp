// engines/common/completion_backlog.hpp - completions an asynchronous engine made itself (inside
// submit: a request the kernel refused to start, a synchronous fallback) and hands out first at
// the next reap, before asking the kernel.
#pragma once

#include <cstddef>
#include <deque>

#include "tai/engine.hpp"

namespace tai::detail {

/// The start of every asynchronous engine's reap: clamps `min` to `max`, then moves the
/// backlog's completions into out[0], out[1], ... (at most `max`) and sets `got` to their
/// count. Returns true when the reap is complete without asking the kernel: `out` is full, or
/// nothing is in flight (`in_flight`: the engine's count of requests at the kernel), so nothing
/// else can arrive and no system call is needed. Thread-safety: the engine's (one reaper at a
/// time).
inline bool reap_backlog_first(std::deque<Completion>& backlog, std::size_t in_flight, Completion* out,
                               std::size_t max, std::size_t& min, std::size_t& got) {
  min = min < max ? min : max;
  got = 0;
  while (got < max && !backlog.empty()) {
    out[got++] = backlog.front();
    backlog.pop_front();
  }
  return in_flight == 0 || got == max;
}

}  // namespace tai::detail
