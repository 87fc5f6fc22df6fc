// engines/libaio/libaio_engine.hpp - the `libaio` engine: Linux kernel AIO (io_submit /
// io_getevents) through libaio.
//
// Asynchronous: submit() hands iocbs to the kernel and returns; reap() collects io_events.
//  * Reads and writes are io_prep_pread / io_prep_pwrite. Kernel AIO is truly asynchronous only
//    for O_DIRECT files: on a buffered file io_submit itself does the copy (and may block on
//    the disk), which is still correct, only not overlapped.
//  * fsync and fdatasync are asynchronous IOCB_CMD_FSYNC / IOCB_CMD_FDSYNC requests (Linux >=
//    4.18, run by a kernel worker). Where the kernel or the file system refuses them at
//    io_submit with EINVAL, the engine runs fsync(2)/fdatasync(2) inside submit() instead and
//    reports the result on the request's completion.
//  * Every iocb carries the engine's eventfd (io_set_eventfd): eventfd() becomes readable when
//    a completion is ready. The engine never reads the eventfd itself; a poll loop reads (drains)
//    it, then reaps with min = 0 until reap returns 0.
//  * Request::link is not supported by kernel AIO (Capabilities::linked_requests is false): the
//    base class runs linked requests one after the other itself.
//  * Open::dontneed: POSIX_FADV_DONTNEED is applied to each transferred range when reap()
//    collects its completion (one extra system call per completion of such a file).
//  * Buffered files get write-behind (EngineOptions::start_writeback_bytes), applied when reap()
//    collects a write's completion, on the reaping thread.
//  * The AIO context is created by the factory with io_setup(2 * depth) events: the base class
//    keeps at most 2 * depth native requests in flight. Contexts count against the system-wide
//    fs.aio-max-nr; the factory's error names fs.aio-max-nr and fs.aio-nr when that is reached.
//  * reap() with min = 0 makes no system call when nothing is in flight, and none when nothing
//    has completed (libaio checks the completion ring in user space for a zero timeout).
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "tai/engine.hpp"
#include "tai/engines/common/write_behind.hpp"
#include "tai/error.hpp"

namespace tai::engines {

/// A file of the libaio engine: one kernel descriptor.
/// Thread-safety: fd() is safe from any thread; the descriptor is closed by Engine::close (no
/// request in flight, by contract) or by the destructor.
class LibaioFile final : public EngineFile {
 public:
  LibaioFile(Engine& engine, std::string path, OpenMode mode, FileCapabilities caps, int fd);
  ~LibaioFile() override;

  int fd() const noexcept override { return fd_.load(std::memory_order_relaxed); }

  /// Closes the descriptor once; returns close(2)'s error, or EBADF when already closed.
  /// Called by LibaioEngine::do_close and the destructor only.
  std::error_code close_descriptor() noexcept;

  /// The file's write-behind count (EngineOptions::start_writeback_bytes), advanced when reap()
  /// collects a write's completion. Thread-safe.
  tai::detail::WriteBehind& write_behind() noexcept { return behind_; }

 private:
  tai::detail::WriteBehind behind_;
  // Relaxed: the value carries no data of its own; handing the file to another thread (submit,
  // the queue) already orders its construction before any use. Written only by
  // close_descriptor, which Engine::close's contract keeps apart from every request.
  std::atomic<int> fd_;
};

/// The libaio engine. Thread-safety: as tai::Engine (open/close from any thread; submit/reap
/// from one thread at a time); eventfd() from any thread.
class LibaioEngine final : public Engine {
 public:
  /// Creates the AIO context (io_setup(2 * depth)) and the eventfd. Fails with a message naming
  /// the reason: EAGAIN with the values of fs.aio-max-nr and fs.aio-nr, ENOSYS (kernel without
  /// AIO), EPERM (seccomp / container), EINVAL (a depth beyond the kernel's limit).
  /// Honours tai::detail::ProbeOverrides (io_setup_errno, aio_max_nr, aio_nr) for tests.
  static Result<std::unique_ptr<LibaioEngine>> create(const EngineOptions& options);

  ~LibaioEngine() override;

  /// Readable when a completion is ready (see the file comment). Thread-safe.
  int eventfd() const noexcept override;

 protected:
  Result<std::unique_ptr<EngineFile>> do_open(const std::string& path, OpenMode mode) override;
  std::error_code do_close(EngineFile& file) override;
  std::size_t do_submit(const Request* requests, std::size_t n) override;
  std::size_t do_reap(Completion* out, std::size_t max, std::size_t min, Timeout timeout) override;

 private:
  struct Impl;  // the AIO context, the iocb pool, completions made in submit(); libaio.h stays out of this header
  LibaioEngine(const EngineOptions& options, std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// The factory of the engine convention: LibaioEngine::create as a tai::Engine.
Result<std::unique_ptr<Engine>> make_libaio(const EngineOptions& options);

}  // namespace tai::engines
