// The libaio engine: see libaio_engine.hpp.
#include "engines/libaio/libaio_engine.hpp"

#include <fcntl.h>
#include <libaio.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engines/common/alignment.hpp"
#include "engines/common/completion_backlog.hpp"
#include "engines/common/errno_text.hpp"
#include "engines/common/posix_open.hpp"
#include "engines/common/probe_overrides.hpp"
#include "engines/common/timespec.hpp"
#include "engines/common/own_descriptors.hpp"

namespace tai::engines {
namespace {

/// The longest single native transfer. Linux moves at most 2^31 - 4096 bytes per call anyway;
/// 1 GiB is a multiple of every direct-I/O alignment, so the base class continues the rest of a
/// longer request from an aligned offset.
constexpr std::uint64_t kMaxNativeLength = std::uint64_t{1} << 30;

/// ioctx_alloc() doubles the requested events and refuses more than 0x10000000 bytes of
/// io_event: the most events one io_setup may ask for.
constexpr std::uint64_t kKernelMaxEvents = 0x10000000u / sizeof(io_event) / 2;

using detail::errno_text;

std::optional<std::uint64_t> read_sysctl(const char* path) {
  std::ifstream in(path);
  std::uint64_t v = 0;
  if (in >> v) return v;
  return std::nullopt;
}

std::string sysctl_text(const std::optional<std::uint64_t>& v) {
  return v ? std::to_string(*v) : std::string("(unreadable)");
}

Error setup_error(int err, std::uint64_t events, std::uint64_t depth, const detail::ProbeOverrides& ov) {
  std::string m = "io_setup(" + std::to_string(events) + " events = 2 * depth " + std::to_string(depth) +
                  "): " + errno_text(err);
  switch (err) {
    case EAGAIN: {
      const auto max_nr = ov.aio_max_nr ? ov.aio_max_nr : read_sysctl("/proc/sys/fs/aio-max-nr");
      const auto nr = ov.aio_nr ? ov.aio_nr : read_sysctl("/proc/sys/fs/aio-nr");
      m += ": fs.aio-max-nr = " + sysctl_text(max_nr) + " and fs.aio-nr = " + sysctl_text(nr) +
           " reached (this engine asks for " + std::to_string(events) +
           " more events); raise fs.aio-max-nr (sysctl -w fs.aio-max-nr=N) or lower the depth";
      break;
    }
    case ENOSYS:
      m += ": this kernel has no asynchronous I/O (built without CONFIG_AIO), or a seccomp filter "
           "answers ENOSYS for io_setup";
      break;
    case EPERM:
      m += ": io_setup is forbidden here (a seccomp filter or the container runtime)";
      break;
    case EINVAL:
      m += ": the kernel refuses this many events for one AIO context (at most " +
           std::to_string(kKernelMaxEvents) + "); lower the depth";
      break;
    case ENOMEM:
      m += ": the kernel could not allocate the completion ring";
      break;
    default:
      break;
  }
  return Error{std::error_code(err, std::generic_category()), std::move(m)};
}

Capabilities libaio_capabilities() {
  Capabilities c;
  c.vectored_writes = true;
  c.asynchronous = true;
  c.direct_io = true;
  c.durable_sync = true;
  c.async_sync = true;
  c.eventfd = true;
  c.linked_requests = false;
  return c;
}

timespec to_timespec(Timeout t) {
  return detail::ns_to_timespec(t.count());
}

std::int64_t sync_fallback(const iocb& cb) {
  int rc;
  do {
    rc = cb.aio_lio_opcode == IO_CMD_FDSYNC ? ::fdatasync(cb.aio_fildes) : ::fsync(cb.aio_fildes);
  } while (rc < 0 && errno == EINTR);
  return rc < 0 ? -errno : 0;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// LibaioFile

LibaioFile::LibaioFile(Engine& engine, std::string path, OpenMode mode, FileCapabilities caps, int fd)
    : EngineFile(engine, std::move(path), mode, caps), fd_(fd) {}

LibaioFile::~LibaioFile() { (void)close_descriptor(); }

std::error_code LibaioFile::close_descriptor() noexcept {
  const int fd = fd_.exchange(-1, std::memory_order_relaxed);
  if (fd < 0) return std::error_code(EBADF, std::generic_category());
  // No retry on EINTR: Linux has released the descriptor by then.
  if (tai::detail::close_own_descriptor(fd) != 0 && errno != EINTR) return std::error_code(errno, std::generic_category());
  return {};
}

// ---------------------------------------------------------------------------------------------
// LibaioEngine

struct LibaioEngine::Impl {
  struct Meta {
    std::uint64_t user_data = 0;  // the base's tag, returned on the completion
    bool dontneed = false;        // apply POSIX_FADV_DONTNEED to the transferred range at reap
    LibaioFile* behind = nullptr; // a buffered write's file: advance its write-behind at reap
  };

  io_context_t ctx = nullptr;
  int event_fd = -1;
  std::vector<iocb> iocbs;                  // 2 * depth; an iocb is ours again once reaped
  std::vector<Meta> meta;                   // parallel to iocbs
  std::vector<std::uint32_t> free_iocbs;    // stack of indices into iocbs
  std::vector<iocb*> batch;                 // scratch of do_submit
  std::vector<io_event> events;             // scratch of do_reap
  std::deque<Completion> made_in_submit;    // completions io_submit refused to start (see do_submit)
  std::size_t in_flight = 0;                // iocbs the kernel has taken and not yet reported
  std::uint64_t behind_every = 0;           // EngineOptions::start_writeback_bytes

  ~Impl() {
    // io_destroy waits for every request still in flight, so no transfer outlives the engine
    // (and the memory it reads or writes).
    if (ctx) (void)io_destroy(ctx);
    if (event_fd >= 0) tai::detail::close_own_descriptor(event_fd);
  }

  void release(iocb* cb) { free_iocbs.push_back(static_cast<std::uint32_t>(cb - iocbs.data())); }
};

Result<std::unique_ptr<LibaioEngine>> LibaioEngine::create(const EngineOptions& options) {
  const std::uint64_t depth = std::max(options.depth, 1u);  // the base class treats 0 as 1
  const std::uint64_t events = 2 * depth;
  const detail::ProbeOverrides ov = detail::probe_overrides();

  if (events > kKernelMaxEvents) {
    return Error{std::error_code(EINVAL, std::generic_category()),
                 "io_setup(" + std::to_string(events) + " events = 2 * depth " + std::to_string(depth) +
                     "): depth " + std::to_string(depth) + " is too large: one AIO context holds at most " +
                     std::to_string(kKernelMaxEvents) +
                     " events, and the system-wide fs.aio-max-nr = " +
                     sysctl_text(ov.aio_max_nr ? ov.aio_max_nr : read_sysctl("/proc/sys/fs/aio-max-nr")) +
                     " limits every context together; lower the depth"};
  }

  auto impl = std::make_unique<Impl>();
  int err = ov.io_setup_errno;
  if (err == 0) {
    const int rc = io_setup(static_cast<int>(events), &impl->ctx);
    if (rc < 0) {
      err = -rc;
      impl->ctx = nullptr;
    }
  }
  if (err != 0) return setup_error(err, events, depth, ov);

  impl->event_fd = tai::detail::make_own_eventfd();
  if (impl->event_fd < 0) return Error::from_errno(errno, "eventfd for the libaio engine");

  impl->behind_every = options.start_writeback_bytes;
  impl->iocbs.resize(events);
  impl->meta.resize(events);
  impl->batch.resize(events);
  impl->events.resize(events);
  impl->free_iocbs.reserve(events);
  for (std::uint64_t i = events; i-- > 0;) impl->free_iocbs.push_back(static_cast<std::uint32_t>(i));
  return std::unique_ptr<LibaioEngine>(new LibaioEngine(options, std::move(impl)));
}

LibaioEngine::LibaioEngine(const EngineOptions& options, std::unique_ptr<Impl> impl)
    : Engine("libaio", libaio_capabilities(), options), impl_(std::move(impl)) {}

LibaioEngine::~LibaioEngine() = default;

int LibaioEngine::eventfd() const noexcept { return impl_->event_fd; }

Result<std::unique_ptr<EngineFile>> LibaioEngine::do_open(const std::string& path, OpenMode mode) {
  Result<int> fd = detail::open_descriptor(path, mode, "libaio");
  if (!fd) return fd.error();
  *fd = tai::detail::adopt_own_descriptor(*fd);  // out of the program's way
  detail::apply_open_hints(*fd, mode.flags);

  const FileCapabilities caps = detail::descriptor_capabilities(*fd, mode, capabilities());
  return std::unique_ptr<EngineFile>(std::make_unique<LibaioFile>(*this, path, mode, caps, *fd));
}

std::error_code LibaioEngine::do_close(EngineFile& file) {
  return static_cast<LibaioFile&>(file).close_descriptor();
}

std::size_t LibaioEngine::do_submit(const Request* requests, std::size_t n) {
  Impl& m = *impl_;
  std::size_t prepared = 0;
  for (; prepared < n && !m.free_iocbs.empty(); ++prepared) {
    const Request& r = requests[prepared];
    const std::uint32_t index = m.free_iocbs.back();
    m.free_iocbs.pop_back();
    iocb* cb = &m.iocbs[index];
    const int fd = r.file->fd();
    const std::uint64_t length = std::min(r.length, kMaxNativeLength);
    switch (r.op) {
      case Op::read:
        io_prep_pread(cb, fd, r.buffer, length, static_cast<long long>(r.offset));
        break;
      case Op::write:
        // A vectored write's sum may pass kMaxNativeLength: the kernel then writes short and
        // the base continues, as with one buffer.
        if (r.iov_count != 0)
          io_prep_pwritev(cb, fd, r.iov, static_cast<int>(r.iov_count), static_cast<long long>(r.offset));
        else
          io_prep_pwrite(cb, fd, r.buffer, length, static_cast<long long>(r.offset));
        break;
      case Op::fsync:
        io_prep_fsync(cb, fd);
        break;
      case Op::fdatasync:
        io_prep_fdsync(cb, fd);
        break;
    }
    io_set_eventfd(cb, m.event_fd);
    const bool dontneed = (r.op == Op::read || r.op == Op::write) && has(r.file->mode().flags, Open::dontneed);
    const bool behind = r.op == Op::write && !dontneed &&
                        detail::WriteBehind::applies(r.file->capabilities(), r.file->mode(), m.behind_every);
    m.meta[index] = {r.user_data, dontneed, behind ? static_cast<LibaioFile*>(r.file) : nullptr};
    m.batch[prepared] = cb;
  }

  // io_submit starts a prefix of the batch: all of it, some of it (a positive count), or none
  // with -errno, which then concerns the first iocb alone.
  std::size_t taken = 0;
  while (taken < prepared) {
    const int rc = io_submit(m.ctx, static_cast<long>(prepared - taken), m.batch.data() + taken);
    if (rc > 0) {
      taken += static_cast<std::size_t>(rc);
      m.in_flight += static_cast<std::size_t>(rc);
      continue;
    }
    if (rc == -EINTR) continue;
    if (rc == -EAGAIN || rc == 0) break;  // out of kernel resources: the base offers the rest later
    // The first iocb was refused. It is taken all the same and completes with the error, except
    // an fsync/fdatasync refused with EINVAL (a kernel before 4.18 or a file system without
    // asynchronous fsync), which runs synchronously right here.
    iocb* cb = m.batch[taken];
    std::int64_t result = rc;
    if (rc == -EINVAL && (cb->aio_lio_opcode == IO_CMD_FSYNC || cb->aio_lio_opcode == IO_CMD_FDSYNC))
      result = sync_fallback(*cb);
    m.made_in_submit.push_back({m.meta[static_cast<std::size_t>(cb - m.iocbs.data())].user_data, result});
    m.release(cb);
    ++taken;
  }
  for (std::size_t k = taken; k < prepared; ++k) m.release(m.batch[k]);
  return taken;
}

std::size_t LibaioEngine::do_reap(Completion* out, std::size_t max, std::size_t min, Timeout timeout) {
  Impl& m = *impl_;
  std::size_t got = 0;
  if (detail::reap_backlog_first(m.made_in_submit, m.in_flight, out, max, min, got)) return got;

  // Never wait for more than can arrive.
  const long want_min = static_cast<long>(std::min(min > got ? min - got : 0, m.in_flight));
  const long want_max = static_cast<long>(std::min({max - got, m.events.size(), m.in_flight}));
  const bool forever = timeout.count() < 0 && want_min > 0;
  const auto deadline = std::chrono::steady_clock::now() + (timeout.count() > 0 ? timeout : Timeout(0));

  int rc;
  for (;;) {
    timespec ts = to_timespec(want_min == 0 ? Timeout(0)
                                            : std::chrono::duration_cast<Timeout>(
                                                  deadline - std::chrono::steady_clock::now()));
    // A zero timeout with an empty completion ring returns 0 in user space (libaio reads the
    // ring's head and tail), so the min = 0 poll of a busy engine costs no system call.
    rc = io_getevents(m.ctx, want_min, want_max, m.events.data(), forever ? nullptr : &ts);
    if (rc != -EINTR) break;
  }
  if (rc <= 0) return got;  // 0: timed out; < 0 (EFAULT, EINVAL): nothing was consumed

  for (int k = 0; k < rc; ++k) {
    const io_event& ev = m.events[static_cast<std::size_t>(k)];
    iocb* cb = ev.obj;
    const Impl::Meta& meta = m.meta[static_cast<std::size_t>(cb - m.iocbs.data())];
    // res: bytes or -errno. res2 is 0 except from a few old drivers that put a negative status
    // there while res looks fine; an error in either is the request's error.
    const auto res = static_cast<long>(ev.res);
    const auto res2 = static_cast<long>(ev.res2);
    const std::int64_t result = res < 0 ? res : (res2 < 0 ? res2 : res);
    if (meta.dontneed && result > 0)
      detail::apply_dontneed(cb->aio_fildes, static_cast<std::uint64_t>(cb->u.c.offset),
                             static_cast<std::uint64_t>(result));
    // The file is open: Engine::close is not called with a request of it in flight.
    if (meta.behind != nullptr && result > 0)
      meta.behind->write_behind().written(cb->aio_fildes, static_cast<std::uint64_t>(cb->u.c.offset),
                                          static_cast<std::uint64_t>(result), m.behind_every);
    out[got++] = {meta.user_data, result};
    m.release(cb);
  }
  m.in_flight -= static_cast<std::size_t>(rc);
  return got;
}

Result<std::unique_ptr<Engine>> make_libaio(const EngineOptions& options) {
  auto made = LibaioEngine::create(options);
  if (!made) return made.error();
  return std::unique_ptr<Engine>(std::move(made).value());
}

}  // namespace tai::engines
