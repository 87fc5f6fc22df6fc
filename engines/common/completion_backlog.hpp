// engines/common/completion_backlog.hpp - completions an asynchronous engine made itself (inside
// submit: a request the kernel refused to start, a synchronous fallback) and hands out first at
// the next reap, before asking the kernel.
#pragma once

#include <cstddef>
#include <deque>

#include "tai/engine.hpp"

namespace tai::detail {

/// Moves completions from the front of `backlog` into out[got], out[got + 1], ... up to `max`
/// in all; returns the new count. Thread-safety: the engine's (one reaper at a time).
inline std::size_t take_backlog(std::deque<Completion>& backlog, Completion* out, std::size_t got, std::size_t max) {
  while (got < max && !backlog.empty()) {
    out[got++] = backlog.front();
    backlog.pop_front();
  }
  return got;
}

}  // namespace tai::detail
