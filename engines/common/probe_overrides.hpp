// engines/common/probe_overrides.hpp - a test seam: pretend answers for the kernel probes that decide
// whether the asynchronous engines can run.
//
// Whether io_uring or kernel AIO works depends on the machine: the kernel version, the sysctls
// kernel.io_uring_disabled and fs.aio-max-nr, seccomp filters of containers, RLIMIT_MEMLOCK. The
// selector must report each of those refusals with its exact reason, and tests must check every
// message without changing the machine. So the engine factories (engines/libaio, engines/uring)
// and the selector (engines/engine_selector.cpp) read their probe answers through this struct:
// a field that is set replaces what the kernel would say; an unset field lets the real probe run.
//
// Production code never sets it; tests do, with ScopedProbeOverrides:
//
//     tai::detail::ProbeOverrides o;
//     o.io_uring_setup_errno = EPERM;
//     o.io_uring_disabled = 2;
//     tai::detail::ScopedProbeOverrides scope(o);
//     auto r = tai::make_engine("uring");   // fails: "... kernel.io_uring_disabled = 2"
//
// Header-only on purpose: the factories of every engine and the selector include it, and it
// needs no source file of its own.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>

namespace tai::detail {

/// Pretend kernel answers. Every field defaults to "ask the kernel".
struct ProbeOverrides {
  // --- the selector --------------------------------------------------------------------------
  /// Pretend the engine was not compiled in (as if liburing / libaio had not been found at
  /// configure time): the selector reports "not built (...)" without calling the factory.
  bool uring_not_built = false;
  bool libaio_not_built = false;

  // --- io_uring (engines/uring) ----------------------------------------------------------------
  /// Value to report for the sysctl kernel.io_uring_disabled (0, 1 or 2) instead of reading
  /// /proc/sys/kernel/io_uring_disabled. When set to 2 (or 1 for a process the kernel would
  /// refuse) and io_uring_setup_errno is 0, the factory behaves as if io_uring_setup had
  /// failed with EPERM, which is what the kernel does.
  std::optional<int> io_uring_disabled;
  /// Non-zero: io_uring_setup (io_uring_queue_init_params) "fails" with this errno
  /// (EPERM, ENOSYS, EOPNOTSUPP, ENOMEM ...) and the real call is not made.
  int io_uring_setup_errno = 0;
  /// Non-zero: io_uring_register_buffers "fails" with this errno (ENOMEM is what the kernel
  /// answers when the buffers exceed RLIMIT_MEMLOCK).
  int uring_register_buffers_errno = 0;
  /// Soft RLIMIT_MEMLOCK in bytes to report in messages instead of getrlimit's answer.
  std::optional<std::uint64_t> memlock_limit;

  // --- kernel AIO (engines/libaio) ---------------------------------------------------------------
  /// Non-zero: io_setup "fails" with this errno (EAGAIN when fs.aio-max-nr is reached, ENOSYS
  /// when the kernel has no AIO, EPERM under seccomp) and the real call is not made.
  int io_setup_errno = 0;
  /// Values to report for the sysctls fs.aio-max-nr and fs.aio-nr instead of reading /proc.
  std::optional<std::uint64_t> aio_max_nr;
  std::optional<std::uint64_t> aio_nr;
};

namespace probe_overrides_detail {
struct Store {
  std::mutex mutex;
  ProbeOverrides value;
};
inline Store& store() {
  static Store s;  // one per program: an inline function's static is shared by every TU
  return s;
}
}  // namespace probe_overrides_detail

/// The overrides in force (a copy). Thread-safe.
inline ProbeOverrides probe_overrides() {
  auto& s = probe_overrides_detail::store();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.value;
}

/// Replaces the overrides; returns the previous ones. Thread-safe, but engines being created at
/// the same moment on other threads may see either value: tests set overrides before they act.
inline ProbeOverrides set_probe_overrides(const ProbeOverrides& next) {
  auto& s = probe_overrides_detail::store();
  std::lock_guard<std::mutex> lock(s.mutex);
  ProbeOverrides previous = s.value;
  s.value = next;
  return previous;
}

/// Sets overrides for a scope and restores the previous ones at its end. Not thread-safe with
/// respect to other scopes (nest them on one thread).
class ScopedProbeOverrides {
 public:
  explicit ScopedProbeOverrides(const ProbeOverrides& overrides)
      : previous_(set_probe_overrides(overrides)) {}
  ~ScopedProbeOverrides() { set_probe_overrides(previous_); }
  ScopedProbeOverrides(const ScopedProbeOverrides&) = delete;
  ScopedProbeOverrides& operator=(const ScopedProbeOverrides&) = delete;

 private:
  ProbeOverrides previous_;
};

}  // namespace tai::detail
