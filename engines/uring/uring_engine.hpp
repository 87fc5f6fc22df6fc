// engines/uring/uring_engine.hpp - the `uring` engine: Linux io_uring through liburing (2.3 API).
//
// Asynchronous: submit() puts one SQE per request on the submission ring and makes one
// io_uring_submit() call for the whole batch; reap() takes CQEs from the completion ring.
//  * read / write / fsync / fdatasync (io_uring_prep_fsync with IORING_FSYNC_DATASYNC) are all
//    SQEs; the syncs are asynchronous like the transfers.
//  * Request::link sets IOSQE_IO_LINK: the next request of the same submit() batch starts only
//    after this one completed in full, so a write followed by a linked fsync runs in that order.
//    If a linked request fails or is short, the kernel completes every later request of its chain
//    with -ECANCELED (each on its own completion).
//  * reap() looks at the completion ring first (no system call); only when `min` is not met does
//    it wait (io_uring_submit_and_wait_timeout, which also pushes SQEs a short submit left). The
//    timeout is honoured (EXT_ARG, no timeout SQE on Linux >= 5.11); EINTR is retried.
//  * eventfd() is registered with io_uring_register_eventfd: it becomes readable when a
//    completion is posted. The engine never reads it; a poll loop drains it, then reaps with
//    min = 0 until reap returns 0.
//  * Open::dontneed: POSIX_FADV_DONTNEED is applied to each transferred range when reap()
//    collects its completion (one extra system call per completion of such a file).
//  * The rings have 2 * depth submission entries (and twice that for completions): the base
//    class keeps at most 2 * depth native requests in flight, so a batch never has to be split.
//  * Not used on purpose: IORING_SETUP_SINGLE_ISSUER / DEFER_TASKRUN (they bind the ring to the
//    thread that made it, but submit/reap may move between threads; DEFER_TASKRUN would also keep
//    the eventfd silent until the owner enters the kernel), and io_uring_register_ring_fd (per
//    thread). COOP_TASKRUN is left out so that completions are posted without the owner thread
//    having to enter the kernel (a min = 0 poll must see them, and the eventfd must fire).
//
// Options (EngineOptions):
//  * uring_sqpoll: IORING_SETUP_SQPOLL, a kernel thread that picks up SQEs (sq_thread_idle = 50 ms,
//    so it stops spinning soon after a burst, which matters when computation shares the cores).
//  * uring_iopoll: IORING_SETUP_IOPOLL, completions are polled from the device instead of
//    interrupts. Direct I/O only: opening a file without Open::direct fails with a message saying
//    so. The kernel refuses fsync/fdatasync SQEs on a polled ring, so there they run
//    synchronously inside submit() after every earlier request of the engine has completed
//    (Capabilities::async_sync = false); kernel links are not offered (linked_requests = false:
//    the base class chains requests itself); eventfd() is -1 because completions are only posted
//    while someone polls. The reap timeout is only approximate on a polled ring (the kernel polls
//    until enough completions arrive or the thread must yield).
//  * uring_register_files: a sparse table of registered files (io_uring_register_files_sparse,
//    up to 1024 slots, fewer if RLIMIT_NOFILE is lower) is made at init; each opened file takes a
//    slot and its SQEs use IOSQE_FIXED_FILE, which spares the kernel an fget/fput per request.
//    When every slot is taken, further files work unregistered.
//  * uring_register_buffers: register_buffers() registers memory with the kernel (pinned once,
//    not per request); reads and writes whose buffer lies inside a registered buffer use
//    io_uring_prep_read_fixed / write_fixed. The factory checks that registration works (a probe
//    of one page), so an RLIMIT_MEMLOCK refusal is reported when the engine is made.
//
// Registered files and buffers measured no faster on the development VM (device- and CPU-bound):
// docs/uring_options.md has the figures.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "tai/engines/common/write_behind.hpp"
#include "tai/engine.hpp"
#include "tai/error.hpp"

namespace tai::engines {

class UringEngine;

/// A file of the uring engine: one kernel descriptor, and a slot in the ring's registered file
/// table when the engine registers files.
/// Thread-safety: the accessors are safe from any thread; the descriptor is closed (and the slot
/// given back) by Engine::close (no request in flight, by contract) or by the destructor. The
/// engine must outlive the file.
class UringFile final : public EngineFile {
 public:
  UringFile(UringEngine& engine, std::string path, OpenMode mode, FileCapabilities caps, int fd, int fixed_slot);
  ~UringFile() override;

  int fd() const noexcept override { return fd_.load(std::memory_order_relaxed); }
  /// Index of the file in the ring's registered file table, or -1 when it is not registered.
  int fixed_slot() const noexcept { return fixed_slot_; }

  /// Gives the registered slot back and closes the descriptor, once; returns close(2)'s error,
  /// or EBADF when already closed. Called by UringEngine::do_close and the destructor only.
  std::error_code close_descriptor() noexcept;

  /// The file's write-behind count (EngineOptions::start_writeback_bytes), advanced when a
  /// write's completion is reaped. Thread-safe.
  tai::detail::WriteBehind& write_behind() noexcept { return behind_; }

 private:
  UringEngine& owner_;
  tai::detail::WriteBehind behind_;
  // Relaxed: the value carries no data of its own; handing the file to another thread (submit,
  // the queue) already orders its construction before any use. Written only by
  // close_descriptor, which Engine::close's contract keeps apart from every request.
  std::atomic<int> fd_;
  const int fixed_slot_;
};

/// The io_uring engine. Thread-safety: as tai::Engine (open/close from any thread; submit/reap
/// from one thread at a time); eventfd() from any thread; register_buffers, unregister_buffers
/// and stats() from the thread that submits (never at the same time as submit/reap).
class UringEngine final : public Engine {
 public:
  /// Creates the ring (2 * depth entries), the eventfd, the registered file table and probes
  /// buffer registration, as the options ask. Fails with a message naming the reason:
  /// kernel.io_uring_disabled (1 or 2) with EPERM, EPERM from seccomp / a container, ENOSYS
  /// (kernel without io_uring), ENOMEM with the RLIMIT_MEMLOCK values (for a process without
  /// CAP_IPC_LOCK the kernel charges the rings, and registered buffers, to that limit),
  /// EINVAL for a depth beyond IORING_MAX_ENTRIES / 2.
  /// Honours tai::detail::ProbeOverrides (io_uring_disabled, io_uring_setup_errno,
  /// uring_register_buffers_errno, memlock_limit) for tests.
  static Result<std::unique_ptr<UringEngine>> create(const EngineOptions& options);

  ~UringEngine() override;

  /// Readable when a completion is posted (see the file comment); -1 on an IOPOLL ring.
  /// Thread-safe.
  int eventfd() const noexcept override;

  /// Registers `n` buffers with the kernel (io_uring_register_buffers); afterwards a read or
  /// write whose memory lies entirely inside one of them is issued as a fixed-buffer request.
  /// Each buffer: anonymous memory, 1 byte .. 1 GiB; at most 16384 buffers. Calling it again
  /// replaces the previous set (no request using the old set may be in flight). The memory must
  /// stay valid until unregister_buffers(), the next register_buffers(), or the engine's end.
  /// Needs EngineOptions::uring_register_buffers (EINVAL otherwise). On failure returns the
  /// errno and, when `message` is given, a sentence with the reason; ENOMEM names
  /// RLIMIT_MEMLOCK with its soft and hard values. Owner thread only (see the class comment).
  std::error_code register_buffers(const iovec* iov, unsigned n, std::string* message = nullptr);

  /// Forgets the registered buffers (no request using them may be in flight). Owner thread only.
  std::error_code unregister_buffers();

  /// Counters of the requests this engine put on the ring. Owner thread only.
  struct Stats {
    std::uint64_t sqes = 0;                 ///< requests put on the submission ring
    std::uint64_t fixed_file_sqes = 0;      ///< ... with IOSQE_FIXED_FILE
    std::uint64_t fixed_buffer_sqes = 0;    ///< ... as read_fixed / write_fixed
    std::uint64_t sync_on_polled_ring = 0;  ///< fsync/fdatasync run synchronously (IOPOLL)
  };
  Stats stats() const noexcept;

 protected:
  Result<std::unique_ptr<EngineFile>> do_open(const std::string& path, OpenMode mode) override;
  std::error_code do_close(EngineFile& file) override;
  std::size_t do_submit(const Request* requests, std::size_t n) override;
  std::size_t do_reap(Completion* out, std::size_t max, std::size_t min, Timeout timeout) override;

 private:
  friend class UringFile;
  struct Impl;  // the ring and its bookkeeping; liburing.h stays out of this header
  UringEngine(const EngineOptions& options, const Capabilities& caps, std::unique_ptr<Impl> impl);
  void release_file_slot(int slot) noexcept;  // thread-safe
  std::unique_ptr<Impl> impl_;
};

/// The factory of the engine convention: UringEngine::create as a tai::Engine.
Result<std::unique_ptr<Engine>> make_uring(const EngineOptions& options);

}  // namespace tai::engines
