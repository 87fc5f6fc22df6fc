// What the process-kill suite's child (tai_kill_child) and parent (kill_test.cpp) share: the
// events the child writes to its event pipe, and the bytes each write carries.
//
// The child announces every operation on the pipe *before* it submits it, and reports every
// completion it observes *after* the receipt finished; a sync is reported successful only after
// its receipt said ok(). So once the child is dead and the pipe drained, the parent holds a
// superset of the writes that can have reached the kernel and a subset of the syncs that
// completed. That is exactly what the oracle (kill_test.cpp) needs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tai::test::kill {

/// The descriptor the child writes its events to (the parent puts the pipe's write end there).
constexpr int kEventFd = 3;

enum class EventKind : std::uint32_t {
  write_submitted = 1,  ///< about to call File::write(offset, length) as operation `op`
  sync_submitted,       ///< about to call File::fsync() (detail 0) or fdatasync() (detail 1)
  op_completed,         ///< the receipt of `op` finished; detail: 1 ok, 0 failed
  shutdown_done,        ///< Controller::shutdown() returned; detail: 1 when its report was ok
  started,              ///< the controller exists and every file is open; nothing submitted yet
};

/// One event: 40 bytes, written with one write(2), so that it is atomic on the pipe (PIPE_BUF)
/// and a reader always sees whole events.
struct Event {
  EventKind kind;
  std::uint32_t file;
  std::uint64_t op;
  std::uint64_t offset;
  std::uint64_t length;
  std::uint64_t detail;
};
static_assert(sizeof(Event) == 40, "events must stay small and whole on the pipe");

inline std::uint64_t mix64(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// The byte that write operation `op` of the run with `seed` puts at `position` of file `file`.
/// Never 0, so that a byte no write reached (a hole, zero-filled by the kernel) is never taken
/// for written data; two different operations differ at a given byte with probability 254/255.
inline unsigned char content_byte(std::uint64_t seed, std::uint32_t file, std::uint64_t op,
                                  std::uint64_t position) noexcept {
  const std::uint64_t word = mix64(seed ^ mix64(op * 0x100000001B3ull + file) ^ (position >> 3) * 0xD6E8FEB86659FD93ull);
  const unsigned byte = static_cast<unsigned>(word >> ((position & 7) * 8)) & 0xFF;
  return static_cast<unsigned char>(byte % 255 + 1);
}

inline void fill_content(unsigned char* dst, std::uint64_t seed, std::uint32_t file, std::uint64_t op,
                         std::uint64_t offset, std::size_t length) noexcept {
  for (std::size_t i = 0; i < length; ++i) dst[i] = content_byte(seed, file, op, offset + i);
}

}  // namespace tai::test::kill
