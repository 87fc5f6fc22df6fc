// tai/engine.hpp - the engine layer: the only TAI code that touches the operating system.
//
// An Engine opens files and moves bytes between memory and those files. Synchronous engines
// (posix, cstdio, fstream, null) do the work inside submit(); asynchronous ones (libaio, uring)
// hand it to the kernel and report it later from reap(). Both look the same from here:
//
//     auto eng = tai::make_engine("auto").value();
//     auto f   = eng->open("data.bin", {tai::Open::read | tai::Open::direct}).value();
//     tai::Request r{tai::Op::read, f.get(), buf, offset, length, /*user_data=*/7};
//     eng->submit(&r, 1);
//     tai::Completion c;
//     eng->reap(&c, 1, /*min=*/1);         // c.user_data == 7, c.result == bytes or -errno
//
// What the base class (engines/engine.cpp) does for every engine, so that no engine repeats it:
//  * validation: a null or closed file, a file of another engine, an offset whose end passes
//    2^64, a write to a file not opened for writing, a read of a file not opened for reading:
//    each completes at once with -EBADF / -EOVERFLOW / -EBADF ... on that request's completion.
//  * direct I/O of unaligned memory, offsets or lengths: the request is bounced through an
//    aligned buffer; a write whose ends are not block-aligned does read-modify-write of its
//    partial edge blocks, and writes overlapping an in-flight read-modify-write wait for it.
//    A raw EINVAL from O_DIRECT never reaches the user. Cost: one allocation and one memcpy of
//    the request, plus up to two block reads per unaligned write (measured in docs/results/README.md).
//  * short transfers: a native read or write that moved fewer bytes than asked is continued
//    until done, end of file (reads) or an error; the completion reports the total.
//  * a zero-length read or write completes at once with result 0.
//  * vectored writes (Request::iov): checked (only writes, the segments' sum equals length, at
//    most kMaxSegments), continued segment by segment after a short transfer, on a direct file
//    bounced through one aligned copy when any segment misses the alignment, and copied into
//    one buffer for engines without Capabilities::vectored_writes.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "tai/error.hpp"

namespace tai {

class Engine;
class EngineFile;
namespace detail {
struct EngineCore;  // the base-class state machine, private to engines/engine.cpp
}

// ---------------------------------------------------------------------------------------------
// Open modes

/// Flags of OpenMode. Combine with |.
enum class Open : std::uint32_t {
  none = 0,
  read = 1u << 0,
  write = 1u << 1,
  create = 1u << 2,    ///< O_CREAT
  truncate = 1u << 3,  ///< O_TRUNC
  direct = 1u << 4,    ///< O_DIRECT: bypass the page cache (engines with Capabilities::direct_io)
  dsync = 1u << 5,     ///< O_DSYNC: every write is durable when it completes
  /// Other processes may write this file: an unaligned direct write past the end of file keeps
  /// its zero padding (the file then ends at the block boundary) instead of cutting it back,
  /// which could cut off another process's write. Without it, an unaligned direct write past
  /// the end of file leaves the file at the write's exact end (the padding is trimmed with an
  /// fstat and an ftruncate, safe only while this process is the file's one writer). No open(2)
  /// flag; ignored by files that are not Open::direct (they never pad).
  shared_writers = 1u << 6,
  // posix_fadvise hints (engines that have a descriptor; ignored by the others)
  sequential = 1u << 8,  ///< POSIX_FADV_SEQUENTIAL at open
  random = 1u << 9,      ///< POSIX_FADV_RANDOM at open
  noreuse = 1u << 10,    ///< POSIX_FADV_NOREUSE at open
  willneed = 1u << 11,   ///< POSIX_FADV_WILLNEED on the whole file at open
  dontneed = 1u << 12,   ///< POSIX_FADV_DONTNEED on each range after it was read or written
};
constexpr Open operator|(Open a, Open b) noexcept {
  return static_cast<Open>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b));
}
constexpr Open operator&(Open a, Open b) noexcept {
  return static_cast<Open>(static_cast<std::uint32_t>(a) & static_cast<std::uint32_t>(b));
}
constexpr bool has(Open set, Open bit) noexcept { return (set & bit) != Open::none; }

struct OpenMode {
  Open flags = Open::read;
  unsigned permissions = 0644;  ///< for Open::create
  OpenMode() = default;
  OpenMode(Open f, unsigned perm = 0644) : flags(f), permissions(perm) {}  // NOLINT
};

// ---------------------------------------------------------------------------------------------
// Capabilities

/// Direct-I/O alignment of one open file, in bytes (1 = no constraint).
struct Alignment {
  std::uint32_t memory = 1;  ///< buffer address
  std::uint32_t offset = 1;  ///< file offset
  std::uint32_t length = 1;  ///< transfer length
  /// Where the numbers come from: "statx" (STATX_DIOALIGN), "logical-block-size" (BLKSSZGET or
  /// /sys/.../logical_block_size of the backing device), "default" (4096), or "none".
  const char* source = "none";
};

/// What an engine can do. Engine-wide; EngineFile::capabilities() narrows it per file.
struct Capabilities {
  bool asynchronous = false;        ///< submit() returns before the transfer is done
  bool direct_io = false;           ///< Open::direct is supported
  bool durable_sync = false;        ///< fsync/fdatasync reach stable storage
  bool async_sync = false;          ///< fsync/fdatasync are asynchronous requests
  bool eventfd = false;             ///< eventfd() signals completions
  bool linked_requests = false;     ///< Request::link is honoured
  bool registered_buffers = false;  ///< fixed buffers registered with the kernel are in use
  bool registered_files = false;    ///< fixed files registered with the kernel are in use
  bool stores_data = true;          ///< false for null: reads do not return what was written
  /// Request::iov reaches the engine's native layer as it is (pwritev and the like). Without it
  /// the base class copies a vectored write's segments into one buffer first, so an engine
  /// written before vectored requests existed keeps working unchanged.
  bool vectored_writes = false;
};

/// Capabilities of one open file.
struct FileCapabilities {
  Capabilities engine;
  bool direct = false;  ///< opened with O_DIRECT
  bool dsync = false;   ///< opened with O_DSYNC
  Alignment alignment;  ///< binding only when direct
};

// ---------------------------------------------------------------------------------------------
// Requests and completions

enum class Op : std::uint8_t { read, write, fsync, fdatasync };
const char* to_string(Op op) noexcept;

/// One request. Plain data; the engine copies it in submit().
/// Buffer lifetime: `buffer` must stay valid and untouched until the request's completion has
/// been returned by reap() (for reads it is written, for writes it is read, possibly later than
/// submit()). No alignment is required: unaligned direct I/O is bounced (see the file comment).
struct Request {
  Op op = Op::read;
  EngineFile* file = nullptr;
  void* buffer = nullptr;  ///< read: destination; write: source (not modified)
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t user_data = 0;  ///< returned unchanged in the completion
  /// Start the next request of the same submit() batch only after this one completed in full
  /// (read/write: all `length` bytes; sync: success). If it did not, the next one completes
  /// with -ECANCELED without running (and so on down the chain). Works on every engine: engines
  /// with Capabilities::linked_requests chain plain requests in the kernel (IOSQE_IO_LINK); the
  /// base class chains the others itself, at the cost of one reap round trip per link.
  bool link = false;
  /// A vectored write: when iov_count > 0 the source is these segments, in order (pwritev,
  /// IORING_OP_WRITEV, io_prep_pwritev where the engine has them, a loop of writes in the
  /// others), `buffer` is ignored and `length` must equal the segments' sum. The array and the
  /// memory it names follow `buffer`'s lifetime rule. Only Op::write: another op with segments
  /// completes with -EINVAL, as does a sum other than length or more than kMaxSegments.
  /// On a direct file each segment's address and length must meet the file's memory and length
  /// alignment (and the offset the offset alignment) to go out as it is; otherwise the base
  /// class gathers the segments into one aligned bounce copy.
  const ::iovec* iov = nullptr;
  std::uint32_t iov_count = 0;
  static constexpr std::uint32_t kMaxSegments = 1024;  // IOV_MAX on Linux
};

/// Copies the bytes a write request carries (its buffer, or the first `length` bytes of its
/// segments) to `out`; returns how many (the smaller of length and the segments' sum).
std::uint64_t copy_request_bytes(const Request& r, void* out) noexcept;
/// The sum of a request's segment lengths (0 without segments).
std::uint64_t segment_bytes(const Request& r) noexcept;

/// The outcome of one Request.
struct Completion {
  std::uint64_t user_data = 0;
  /// >= 0: bytes transferred (fewer than asked only at end of file for reads, or when a short
  /// transfer is reported by a fault-injecting engine); fsync: 0. < 0: -errno.
  std::int64_t result = 0;

  bool ok() const noexcept { return result >= 0; }
  std::error_code error() const noexcept {
    return result < 0 ? std::error_code(static_cast<int>(-result), std::generic_category())
                      : std::error_code();
  }
};

/// Negative = wait without limit.
using Timeout = std::chrono::nanoseconds;
inline constexpr Timeout kForever{-1};

// ---------------------------------------------------------------------------------------------
// Files

/// A file opened by an engine. Created by Engine::open, closed by Engine::close or on
/// destruction. Thread-safety: the accessors are safe from any thread; the object itself must
/// outlive every request that names it.
class EngineFile {
 public:
  virtual ~EngineFile();
  EngineFile(const EngineFile&) = delete;
  EngineFile& operator=(const EngineFile&) = delete;

  const std::string& path() const noexcept { return path_; }
  const OpenMode& mode() const noexcept { return mode_; }
  const FileCapabilities& capabilities() const noexcept { return caps_; }
  Engine& engine() const noexcept { return *engine_; }
  /// The kernel descriptor, or -1 (closed, or an engine without one: fstream, null).
  virtual int fd() const noexcept { return -1; }
  /// The file's size as the kernel has it now (nullopt: unknown, or no way to ask). The cache
  /// asks at open and again when a read reaches past the size it knows (another writer may have
  /// grown the file). Default: fstat of fd(). Thread-safe.
  virtual std::optional<std::uint64_t> size() const noexcept;
  bool is_open() const noexcept { return open_; }

 protected:
  EngineFile(Engine& engine, std::string path, OpenMode mode, FileCapabilities caps);
  FileCapabilities& mutable_capabilities() noexcept { return caps_; }

 private:
  friend class Engine;
  friend struct detail::EngineCore;
  Engine* engine_;
  std::string path_;
  OpenMode mode_;
  FileCapabilities caps_;
  bool open_ = true;  // written by Engine::close only (the caller guarantees no request is in flight)
  void* core_state_ = nullptr;  // owned by detail::EngineCore (direct-I/O range lock)
};

// ---------------------------------------------------------------------------------------------
// Engines

/// Options for constructing an engine. Unused fields are ignored by engines they do not concern.
struct EngineOptions {
  unsigned depth = 64;                  ///< most requests in flight (submit() accepts no more)
  bool uring_register_files = false;    ///< io_uring: register each opened file (fixed files)
  bool uring_register_buffers = false;  ///< io_uring: register the bounce pool (fixed buffers)
  bool uring_sqpoll = false;            ///< io_uring: kernel submission thread
  bool uring_iopoll = false;            ///< io_uring: polled completions (direct I/O only)
  /// Write-behind of buffered files (engines whose writes go to the page cache through a
  /// descriptor: posix, cstdio and fstream after each write, uring and libaio when they reap a
  /// write's completion): after every this many bytes written to a file, the engine asks the
  /// kernel to start writing the file's dirty pages to the device, from where its last start
  /// ended to its highest written end less this many bytes (sync_file_range with
  /// SYNC_FILE_RANGE_WRITE: no wait, no durability; the last interval stays behind for prompt
  /// overwrites to meet in memory, and a range is started once, so random overwrites of started
  /// data wait for the fsync as a plain program's do; a range 32 times longer than the bytes
  /// written since the last start, from writes scattered over a large span, is passed over
  /// rather than started while the writing thread waits). Without it the kernel starts the
  /// device only at the program's fsync, or after its dirty timeout (30 s by default), so the
  /// fsync waits for every byte since the last one while the device sat idle. 0 turns it off.
  /// Ignored for O_DIRECT, O_DSYNC and Open::dontneed files (nothing dirty stays behind).
  std::uint64_t start_writeback_bytes = std::uint64_t{1} << 20;
};

/// The engine interface. Thread-safety:
///  * open(), close(), name(), capabilities(): safe from any thread at once.
///  * submit(), reap(), in_flight(): one thread at a time (the queue's owner).
///  * SyncEngine::execute(): safe from any number of threads at once.
class Engine {
 public:
  virtual ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  std::string_view name() const noexcept { return name_; }
  const Capabilities& capabilities() const noexcept { return caps_; }
  const EngineOptions& options() const noexcept { return options_; }

  /// Opens `path`. Errors name the path and the reason; Open::direct on an engine without
  /// direct_io fails with EINVAL and says so. Files outlive nothing: close them, or destroy
  /// them, before the engine.
  Result<std::unique_ptr<EngineFile>> open(const std::string& path, OpenMode mode);

  /// Closes a file. No request naming it may be in flight. Later requests on it complete
  /// with -EBADF. Closing twice returns EBADF.
  std::error_code close(EngineFile& file);

  /// Queues up to n requests; returns how many were taken (fewer only when depth is reached).
  /// Invalid requests are taken too and complete with an error on their own completion.
  std::size_t submit(const Request* requests, std::size_t n);

  /// Collects between `min` and `max` completions into `out`, waiting at most `timeout` for
  /// `min` of them. Returns how many were written. Returns 0 at once, without a system call,
  /// when min == 0 and nothing has completed, or when nothing is in flight.
  std::size_t reap(Completion* out, std::size_t max, std::size_t min = 0, Timeout timeout = kForever);

  /// Requests taken by submit() whose completions reap() has not yet returned.
  std::size_t in_flight() const noexcept;
  std::size_t depth() const noexcept { return options_.depth; }

  /// A descriptor that becomes readable when a completion is ready, or -1 (see Capabilities).
  virtual int eventfd() const noexcept { return -1; }

  /// True if `file` was opened by this engine (or by the engine this one wraps).
  virtual bool owns(const EngineFile& file) const noexcept { return &file.engine() == this; }

 protected:
  Engine(std::string name, Capabilities caps, EngineOptions options);

  // --- what an engine implements -------------------------------------------------------------
  /// Opens natively; must fill the file's alignment when it is opened direct.
  virtual Result<std::unique_ptr<EngineFile>> do_open(const std::string& path, OpenMode mode) = 0;
  virtual std::error_code do_close(EngineFile& file) = 0;
  /// Starts native requests: valid, non-empty, aligned for their file when it is direct, with
  /// user_data chosen by the base. Each taken request yields exactly one native completion
  /// whose result is that of one transfer (short is fine). Returns how many were taken; the
  /// base never has more than 2 * depth() native requests in flight.
  virtual std::size_t do_submit(const Request* requests, std::size_t n) = 0;
  /// Native reap, same contract as reap() on native completions.
  virtual std::size_t do_reap(Completion* out, std::size_t max, std::size_t min, Timeout timeout) = 0;

  /// For wrappers (fault): lets them reach another engine's protected members.
  static std::size_t native_submit(Engine& e, const Request* r, std::size_t n) { return e.do_submit(r, n); }
  static std::size_t native_reap(Engine& e, Completion* out, std::size_t max, std::size_t min, Timeout t) {
    return e.do_reap(out, max, min, t);
  }
  /// For wrappers (fault): the inner engine opens and closes the files natively, so that only
  /// the wrapper's base class (validation, bouncing, open/closed state) handles them.
  static Result<std::unique_ptr<EngineFile>> native_open(Engine& e, const std::string& path, OpenMode mode) {
    return e.do_open(path, mode);
  }
  static std::error_code native_close(Engine& e, EngineFile& f) { return e.do_close(f); }

  Capabilities& mutable_capabilities() noexcept { return caps_; }

  /// Whether the base continues a short native read/write until done. The fault engine turns
  /// this off so that an injected short transfer reaches the caller as it is.
  virtual bool continue_short_transfers() const noexcept { return true; }

 private:
  friend struct detail::EngineCore;
  friend class SyncEngine;
  std::string name_;
  Capabilities caps_;
  EngineOptions options_;
  std::unique_ptr<detail::EngineCore> core_;
};

/// Base of engines whose transfers block the calling thread. submit() runs each request
/// before returning; execute() runs one request on the calling thread and is thread-safe, which
/// is what the thread-pool queue (tai::IoQueue over a synchronous engine) uses.
class SyncEngine : public Engine {
 public:
  /// Runs one request to completion on this thread, with the same validation, bouncing and
  /// short-transfer handling as submit(). Thread-safe.
  Completion execute(const Request& request);

 protected:
  SyncEngine(std::string name, Capabilities caps, EngineOptions options);
  /// One native transfer (valid, aligned when direct, non-empty). Returns bytes or -errno.
  /// Must be thread-safe for requests on the same or different files.
  virtual std::int64_t transfer(const Request& request) = 0;
  /// For wrappers that are synchronous engines themselves (the crash simulator's synchronous
  /// variant): one native transfer of another synchronous engine, which only moves bytes; the
  /// wrapper's own base validates, bounces and continues short transfers.
  static std::int64_t native_transfer(SyncEngine& e, const Request& request) { return e.transfer(request); }

 private:
  std::size_t do_submit(const Request* requests, std::size_t n) final;
  std::size_t do_reap(Completion* out, std::size_t max, std::size_t min, Timeout timeout) final;
  std::vector<Completion> done_;  // native completions of do_submit, drained by do_reap
};

}  // namespace tai
