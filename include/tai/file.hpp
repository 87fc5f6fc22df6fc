// tai/file.hpp - tai::File, one open file of a controller.
//
//     tai::Controller ctl;
//     tai::File f = ctl.open("out.dat", tai::Open::write | tai::Open::create).value();
//     f.write(0, data, n);            // copies: `data` is free again when write() returns
//     tai::Receipt s = f.fsync();     // covers every write above
//     ...compute...
//     if (!s.ok()) ...                // waits, then: durable or the error
//     f.close();                      // asynchronous; the controller finishes the job
//
// Every operation returns at once with a tai::Receipt. Operations of one file are applied in
// the order one thread submitted them (DESIGN section 2, "Order"): a read sees every earlier
// write of that thread, fsync covers every earlier write, hook runs after every earlier
// operation and before every later one. Operations from different threads interleave, but a
// single request is never torn.
//
// Bad input is reported on the receipt (state rejected or failed, with a message), never by a
// crash or a hang: a closed file (EBADF), an end past 2^64 (EOVERFLOW), a null buffer with a
// nonzero length (EFAULT). Zero lengths complete at once with 0 bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include "tai/buffer.hpp"
#include "tai/receipt.hpp"

namespace tai {

namespace detail {
class ControllerCore;
class FileCore;
void file_retain(FileCore* f) noexcept;
void file_release(FileCore* f) noexcept;
Receipt file_hook(FileCore* f, Task* t);
}  // namespace detail

/// What File::status() reports.
struct FileStatus {
  std::string path;
  std::string engine;                 ///< the engine's name
  std::string tree;                   ///< the tree shape, e.g. "BTree<34,9,9,12>"
  bool open = false;                  ///< false after close()/detach() or controller shutdown
  /// Operations submitted and not yet finished. A snapshot: operations that other threads
  /// submit, or that finish, meanwhile may or may not be counted.
  std::uint64_t in_flight = 0;
  std::uint64_t cached_bytes = 0;
  std::uint64_t dirty_bytes = 0;
  /// Heap bytes of the file's cache tree itself (nodes, child tables): bounded by what the cached
  /// blocks need, about twice that at most, plus 512 KiB (nodes that hold nothing are freed).
  std::uint64_t node_bytes = 0;
  std::optional<std::uint64_t> size;  ///< the logical size (writes included), when known
  /// An engine fsync failure that later fsyncs keep reporting (as of the last fsync's completion):
  /// cleared once an fsync submitted after the failed one completed has written the affected
  /// data again and synced it (see fsync()).
  std::error_code sticky_error;
};

/// A handle to an open file. Move-only.
/// Thread-safety: read, write, fsync, fdatasync, barrier, hook, status, close and detach are
/// safe from any number of threads at once (an operation racing with close() is either applied
/// before the close or rejected with EBADF). Move, assignment and destruction are not.
class File {
 public:
  File() noexcept = default;
  File(File&& o) noexcept : core_(std::exchange(o.core_, nullptr)) {}
  File& operator=(File&& o) noexcept {
    if (this != &o) {
      reset();
      core_ = std::exchange(o.core_, nullptr);
    }
    return *this;
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  /// detach() if the file is still open.
  ~File() { reset(); }

  bool is_open() const noexcept;
  explicit operator bool() const noexcept { return is_open(); }
  /// The path given to open() ("" for an empty handle).
  const std::string& path() const noexcept;

  /// Reads n bytes at `offset` into `dst`. `dst` stays borrowed until the receipt finishes: do
  /// not touch or free it before then. Any alignment works (a direct-I/O file bounces what is
  /// not aligned for it). receipt.bytes() < n at end of file.
  Receipt read(std::uint64_t offset, void* dst, std::size_t n);
  /// Reads n bytes at `offset` into a fresh tai::Buffer (4096-aligned): receipt.take_buffer().
  /// Allocates the buffer (the only read that does).
  Receipt read(std::uint64_t offset, std::size_t n);
  /// Writes n bytes from `src` at `offset`. Copies them before returning: `src` may be reused
  /// at once.
  Receipt write(std::uint64_t offset, const void* src, std::size_t n);
  /// Writes the buffer's size() bytes at `offset`, without a copy: the buffer moves in and is
  /// freed by the controller.
  Receipt write(std::uint64_t offset, Buffer&& data);
  /// Writes back every earlier write of this file, then the engine's fsync. Done means durable
  /// (as far as the kernel promises). Fails with an earlier write-back's error once (the data
  /// stays dirty in the cache, and the next write-back writes it again).
  ///
  /// After an engine fsync failure the kernel may have dropped the data it could not write, so
  /// every later fsync (and the close) fails with that error until the data is written again:
  /// if the file's cache still holds every byte written since the last good fsync, the failed
  /// fsync marks it dirty again before it completes, and the first fsync *submitted after the
  /// failed one completed* writes it back, syncs, and on success clears the error. If some of
  /// those bytes are not cached (BTreeTrivial, uncached or evicted writes), the error stays for
  /// the life of this File: rewrite the data and reopen. See status().sticky_error.
  Receipt fsync();
  /// As fsync(), with the engine's fdatasync.
  Receipt fdatasync();
  /// An ordering barrier: returns at once; no write submitted after it becomes durable before
  /// every write submitted ahead of it. Costs one fdatasync, during which later operations of
  /// this file wait (the caller does not). The receipt finishes when that fdatasync does.
  Receipt barrier();
  /// Runs fn() on a worker after every earlier operation of this file has finished and before
  /// any later one starts. fn must fit 64 bytes; exceptions thrown by it fail the receipt.
  template <class F>
  Receipt hook(F&& fn);
  /// Gives up the handle: the operations already submitted go on, the controller closes the
  /// file after them and reports a failure at shutdown (Controller::shutdown()).
  void detach() noexcept;
  FileStatus status() const;
  /// Closes asynchronously: operations already submitted go on; the dirty data is written
  /// back, then the engine file is closed. The receipt reports the first error that had not
  /// been reported yet (a failed write-back). Reopening the path sees every write, even before
  /// the close finishes. Later operations on this handle are rejected with EBADF.
  Receipt close();

 private:
  friend class Controller;
  friend class detail::ControllerCore;
  explicit File(detail::FileCore* core) noexcept : core_(core) {}
  void reset() noexcept {
    if (core_) {
      detach();
      detail::file_release(core_);
      core_ = nullptr;
    }
  }
  detail::FileCore* core_ = nullptr;
};

template <class F>
Receipt File::hook(F&& fn) {
  detail::Task* t = detail::acquire_task();
  t->kind = detail::TaskKind::hook;
  t->fn = detail::InplaceFunction<void(), 64>(std::forward<F>(fn));
  return detail::file_hook(core_, t);
}

}  // namespace tai
