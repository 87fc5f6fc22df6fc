// The io_uring engine: see uring_engine.hpp.
#include "engines/uring/uring_engine.hpp"

#include <fcntl.h>
#include <liburing.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engines/common/alignment.hpp"
#include "engines/common/completion_backlog.hpp"
#include "engines/common/errno_text.hpp"
#include "engines/common/posix_open.hpp"
#include "engines/common/probe_overrides.hpp"
#include "engines/common/own_descriptors.hpp"

namespace tai::engines {
namespace {

/// The longest single native transfer (an SQE length is 32 bits, and Linux moves at most
/// 2^31 - 4096 bytes per call). 1 GiB is a multiple of every direct-I/O alignment, so the base
/// class continues the rest of a longer request from an aligned offset.
constexpr std::uint64_t kMaxNativeLength = std::uint64_t{1} << 30;
/// IORING_MAX_ENTRIES of the kernel: the most submission entries one ring may have.
constexpr std::uint64_t kMaxRingEntries = 32768;
/// Registered file slots made at init (fewer when RLIMIT_NOFILE is lower).
constexpr unsigned kFileSlots = 1024;
/// How long the SQPOLL thread spins after the last submission before it sleeps.
constexpr unsigned kSqThreadIdleMs = 50;
/// user_data of the cancel request the destructor sends; never a bookkeeping index.
constexpr std::uint64_t kCancelTag = ~std::uint64_t{0} - 1;

using detail::errno_text;

std::optional<long long> read_sysctl(const char* path) {
  std::ifstream in(path);
  long long v = 0;
  if (in >> v) return v;
  return std::nullopt;
}

std::string limit_text(rlim_t v) {
  return v == RLIM_INFINITY ? std::string("unlimited") : std::to_string(static_cast<unsigned long long>(v)) + " bytes";
}

/// "RLIMIT_MEMLOCK soft = 8388608 bytes, hard = 8388608 bytes".
std::string memlock_text(const detail::ProbeOverrides& ov) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_MEMLOCK, &rl) != 0) rl.rlim_cur = rl.rlim_max = RLIM_INFINITY;
  const rlim_t soft = ov.memlock_limit ? static_cast<rlim_t>(*ov.memlock_limit) : rl.rlim_cur;
  return "RLIMIT_MEMLOCK soft = " + limit_text(soft) + ", hard = " + limit_text(rl.rlim_max);
}

/// True when the calling thread's effective capabilities include `bit` (from /proc/self/status).
bool has_effective_capability(unsigned bit) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("CapEff:", 0) == 0) {
      const unsigned long long caps = std::strtoull(line.c_str() + 7, nullptr, 16);
      return (caps >> bit) & 1u;
    }
  }
  return false;
}

/// Whether kernel.io_uring_disabled = `value` refuses this process: 2 refuses everyone; 1
/// refuses processes without CAP_SYS_ADMIN (bit 21) outside the group kernel.io_uring_group.
bool io_uring_disabled_refuses(long long value) {
  if (value >= 2) return true;
  if (value != 1) return false;
  if (has_effective_capability(21)) return false;
  const auto group = read_sysctl("/proc/sys/kernel/io_uring_group");
  if (!group || *group < 0) return true;
  const auto gid = static_cast<gid_t>(*group);
  if (::getegid() == gid) return false;
  const int n = ::getgroups(0, nullptr);
  std::vector<gid_t> groups(static_cast<std::size_t>(std::max(n, 0)));
  if (n > 0 && ::getgroups(n, groups.data()) == n)
    return std::find(groups.begin(), groups.end(), gid) == groups.end();
  return true;
}

/// For a file on a block device: the device's queue/io_poll ("0": it has no poll queues, so
/// polled reads fail with EOPNOTSUPP), with the sysfs path it came from. Empty when unknown
/// (not a block device, no sysfs).
std::pair<std::string, std::string> device_io_poll(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return {};
  const dev_t dev = S_ISBLK(st.st_mode) ? st.st_rdev : st.st_dev;
  if (major(dev) == 0) return {};  // tmpfs, overlay, network file systems: no block queue
  const std::string base = "/sys/dev/block/" + std::to_string(major(dev)) + ":" + std::to_string(minor(dev));
  for (const std::string& path : {base + "/queue/io_poll", base + "/../queue/io_poll"}) {  // disk, partition
    std::ifstream in(path);
    std::string value;
    if (in >> value) return {value, path};
  }
  return {};
}

std::string flags_text(bool sqpoll, bool iopoll) {
  std::string s;
  if (sqpoll) s += " with SQPOLL";
  if (iopoll) s += sqpoll ? " and IOPOLL" : " with IOPOLL";
  return s;
}

Error setup_error(int err, std::uint64_t entries, std::uint64_t depth, bool sqpoll, bool iopoll,
                  const detail::ProbeOverrides& ov) {
  std::string m = "io_uring_setup(" + std::to_string(entries) + " entries = 2 * depth " + std::to_string(depth) +
                  flags_text(sqpoll, iopoll) + "): " + errno_text(err);
  switch (err) {
    case EPERM: {
      const auto disabled = ov.io_uring_disabled ? std::optional<long long>(*ov.io_uring_disabled)
                                                 : read_sysctl("/proc/sys/kernel/io_uring_disabled");
      if (disabled && *disabled == 2) {
        m += "; kernel.io_uring_disabled = 2: io_uring is switched off for every process "
             "(sysctl -w kernel.io_uring_disabled=0 enables it)";
      } else if (disabled && *disabled == 1) {
        m += "; kernel.io_uring_disabled = 1: only processes with CAP_SYS_ADMIN or in the group "
             "kernel.io_uring_group may create rings";
      } else {
        m += disabled ? "; kernel.io_uring_disabled = " + std::to_string(*disabled)
                      : std::string("; no kernel.io_uring_disabled sysctl");
        m += ", so a seccomp filter or the container runtime (e.g. Docker's default profile) forbids io_uring";
        if (sqpoll) m += ", or this kernel lets only privileged processes use SQPOLL";
      }
      break;
    }
    case ENOSYS:
      m += "; this kernel has no io_uring (it needs Linux >= 5.1 built with CONFIG_IO_URING), or a "
           "seccomp filter answers ENOSYS";
      break;
    case ENOMEM:
      m += "; for a process without CAP_IPC_LOCK the kernel charges the rings' memory to the locked-memory "
           "limit: " + memlock_text(ov) + " (raise it with ulimit -l, or lower the depth)";
      break;
    case EINVAL:
      m += "; the kernel refuses these setup flags or this many entries";
      break;
    case EOPNOTSUPP:
      m += "; the kernel does not support this kind of ring";
      break;
    default:
      break;
  }
  return Error{std::error_code(err, std::generic_category()), std::move(m)};
}

std::string buffers_error_text(int err, unsigned n, std::uint64_t bytes, const detail::ProbeOverrides& ov) {
  std::string m = "io_uring_register_buffers(" + std::to_string(n) + " buffers, " + std::to_string(bytes) +
                  " bytes): " + errno_text(err);
  switch (err) {
    case ENOMEM:
      m += "; registered buffers are pinned in memory and charged to the locked-memory limit: " +
           memlock_text(ov) +
           "; raise it (ulimit -l, /etc/security/limits.conf, systemd LimitMEMLOCK=) or give the process "
           "CAP_IPC_LOCK, or make the engine without uring_register_buffers";
      break;
    case EFAULT:
      m += "; only anonymous memory can be registered (not file-backed or shared mappings)";
      break;
    case EINVAL:
      m += "; each buffer must be 1 byte to 1 GiB long, and at most 16384 buffers";
      break;
    case EBUSY:
      m += "; buffers are already registered";
      break;
    default:
      break;
  }
  return m;
}

__kernel_timespec to_kernel_timespec(Timeout t) {
  if (t.count() < 0) t = Timeout(0);
  const auto s = std::chrono::duration_cast<std::chrono::seconds>(t);
  __kernel_timespec ts{};
  ts.tv_sec = s.count();
  ts.tv_nsec = (t - s).count();
  return ts;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Impl

struct UringEngine::Impl {
  struct Meta {
    std::uint64_t user_data = 0;  // the base's tag, returned on the completion
    int dontneed_fd = -1;         // >= 0: POSIX_FADV_DONTNEED on the transferred range at reap
    UringFile* behind = nullptr;  // a buffered write: the file's write-behind count, at reap
    std::uint64_t offset = 0;     // ... starting here (both)
  };
  struct FixedBuffer {
    std::uintptr_t begin = 0;
    std::uintptr_t end = 0;
    unsigned index = 0;
  };

  io_uring ring{};
  bool ring_ready = false;
  bool sqpoll = false;
  bool iopoll = false;
  int event_fd = -1;

  // Native requests in the ring. An SQE's user_data is an index into `meta`.
  std::vector<Meta> meta;                    // 2 * depth entries
  std::vector<std::uint32_t> free_meta;      // stack of free indices into meta
  std::vector<io_uring_cqe*> cqes;           // scratch of harvest()
  std::deque<Completion> made_in_submit;     // completions produced inside submit (IOPOLL syncs)
  std::size_t in_flight = 0;                 // SQEs taken whose CQE has not been harvested
  std::uint64_t behind_every = 0;            // EngineOptions::start_writeback_bytes

  // Registered files: a sparse table made at init. open/close run on any thread.
  bool files_registered = false;
  std::mutex files_mutex;
  std::vector<int> free_file_slots;  // guarded by files_mutex

  // Registered buffers, sorted by begin. Owner thread only.
  std::vector<FixedBuffer> fixed_buffers;

  Stats stats;

  ~Impl() {
    if (!ring_ready) {
      if (event_fd >= 0) tai::detail::close_own_descriptor(event_fd);
      return;
    }
    drain_for_exit();
    tai::detail::forget_own_descriptor(ring.ring_fd);
    io_uring_queue_exit(&ring);
    if (event_fd >= 0) tai::detail::close_own_descriptor(event_fd);
  }

  // Requests still in flight read or write memory that is about to be freed: cancel what can be
  // cancelled (a read waiting on a pipe), then wait for the rest (block I/O finishes by itself).
  void drain_for_exit() {
    if (in_flight == 0) return;
    if (io_uring_sqe* sqe = io_uring_get_sqe(&ring)) {
      io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);
      io_uring_sqe_set_data64(sqe, kCancelTag);
    }
    std::vector<Completion> sink(meta.size());
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (in_flight > 0 && std::chrono::steady_clock::now() < give_up) {
      __kernel_timespec ts = to_kernel_timespec(std::chrono::milliseconds(100));
      io_uring_cqe* cqe = nullptr;
      (void)io_uring_submit_and_wait_timeout(&ring, &cqe, 1, &ts, nullptr);
      harvest(sink.data(), sink.size());
    }
  }

  // Takes up to `max` completions from the completion ring. No system call (a plain ring read).
  std::size_t harvest(Completion* out, std::size_t max) {
    std::size_t got = 0;
    while (got < max) {
      const auto want = static_cast<unsigned>(std::min(max - got, cqes.size()));
      const unsigned k = io_uring_peek_batch_cqe(&ring, cqes.data(), want);
      if (k == 0) break;
      for (unsigned i = 0; i < k; ++i) {
        const io_uring_cqe* cqe = cqes[i];
        const std::uint64_t tag = io_uring_cqe_get_data64(cqe);
        // liburing's timeout entry (kernels without EXT_ARG) or the destructor's cancel request.
        if (tag >= meta.size()) continue;
        const Meta& m = meta[tag];
        if (m.dontneed_fd >= 0 && cqe->res > 0)
          detail::apply_dontneed(m.dontneed_fd, m.offset, static_cast<std::uint64_t>(cqe->res));
        // The file is open: Engine::close is not called with a request of it in flight.
        if (m.behind != nullptr && cqe->res > 0)
          m.behind->write_behind().written(m.behind->fd(), m.offset, static_cast<std::uint64_t>(cqe->res),
                                           behind_every);
        out[got++] = {m.user_data, cqe->res};
        free_meta.push_back(static_cast<std::uint32_t>(tag));
        --in_flight;
      }
      io_uring_cq_advance(&ring, k);
    }
    return got;
  }

  // A free SQE, handing queued ones to the kernel first if the ring is full.
  io_uring_sqe* next_sqe() {
    if (io_uring_sqe* sqe = io_uring_get_sqe(&ring)) return sqe;
    (void)io_uring_submit(&ring);
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    if (!sqe && sqpoll) {
      (void)io_uring_sqring_wait(&ring);
      sqe = io_uring_get_sqe(&ring);
    }
    return sqe;
  }

  const FixedBuffer* fixed_buffer_of(const void* p, std::uint64_t length) const {
    if (fixed_buffers.empty()) return nullptr;
    const auto begin = reinterpret_cast<std::uintptr_t>(p);
    auto it = std::upper_bound(fixed_buffers.begin(), fixed_buffers.end(), begin,
                               [](std::uintptr_t v, const FixedBuffer& b) { return v < b.begin; });
    if (it == fixed_buffers.begin()) return nullptr;
    --it;
    if (begin < it->end && length <= it->end - begin) return &*it;
    return nullptr;
  }
};

// ---------------------------------------------------------------------------------------------
// UringFile

UringFile::UringFile(UringEngine& engine, std::string path, OpenMode mode, FileCapabilities caps, int fd,
                     int fixed_slot)
    : EngineFile(engine, std::move(path), mode, caps), owner_(engine), fd_(fd), fixed_slot_(fixed_slot) {}

UringFile::~UringFile() { (void)close_descriptor(); }

std::error_code UringFile::close_descriptor() noexcept {
  const int fd = fd_.exchange(-1, std::memory_order_relaxed);
  if (fd < 0) return std::error_code(EBADF, std::generic_category());
  if (fixed_slot_ >= 0) owner_.release_file_slot(fixed_slot_);
  // No retry on EINTR: Linux has released the descriptor by then.
  if (tai::detail::close_own_descriptor(fd) != 0 && errno != EINTR) return std::error_code(errno, std::generic_category());
  return {};
}

// ---------------------------------------------------------------------------------------------
// UringEngine

Result<std::unique_ptr<UringEngine>> UringEngine::create(const EngineOptions& options) {
  const std::uint64_t depth = std::max(options.depth, 1u);  // the base class treats 0 as 1
  const std::uint64_t entries = 2 * depth;
  const bool sqpoll = options.uring_sqpoll;
  const bool iopoll = options.uring_iopoll;
  const detail::ProbeOverrides ov = detail::probe_overrides();

  if (entries > kMaxRingEntries) {
    return Error{std::error_code(EINVAL, std::generic_category()),
                 "io_uring_setup(" + std::to_string(entries) + " entries = 2 * depth " + std::to_string(depth) +
                     "): depth " + std::to_string(depth) + " is too large: a ring has at most " +
                     std::to_string(kMaxRingEntries) + " submission entries (IORING_MAX_ENTRIES), so the depth "
                     "of the uring engine is at most " + std::to_string(kMaxRingEntries / 2)};
  }

  auto impl = std::make_unique<Impl>();
  impl->sqpoll = sqpoll;
  impl->iopoll = iopoll;
  impl->behind_every = options.start_writeback_bytes;

  int err = ov.io_uring_setup_errno;
  if (err == 0 && ov.io_uring_disabled && io_uring_disabled_refuses(*ov.io_uring_disabled)) err = EPERM;
  if (err == 0) {
    unsigned flags = IORING_SETUP_SUBMIT_ALL;  // one bad SQE must not hold back the rest of a batch
    if (sqpoll) flags |= IORING_SETUP_SQPOLL;
    if (iopoll) flags |= IORING_SETUP_IOPOLL;
    int rc;
    for (;;) {
      io_uring_params params{};
      params.flags = flags;
      if (sqpoll) params.sq_thread_idle = kSqThreadIdleMs;
      rc = io_uring_queue_init_params(static_cast<unsigned>(entries), &impl->ring, &params);
      if (rc == -EINVAL && (flags & IORING_SETUP_SUBMIT_ALL)) {
        flags &= ~IORING_SETUP_SUBMIT_ALL;  // kernels before 5.18
        continue;
      }
      break;
    }
    if (rc < 0) err = -rc;
  }
  if (err != 0) return setup_error(err, entries, depth, sqpoll, iopoll, ov);
  impl->ring_ready = true;
  // The ring's descriptor out of the program's way too (liburing makes it with a raw system
  // call, so the preload library never sees it). Its memory is mapped already; the kernel keeps
  // the ring alive through the new descriptor, and liburing reads these two fields for every
  // io_uring_enter and register call and for io_uring_queue_exit's close.
  if (impl->ring.ring_fd == impl->ring.enter_ring_fd) {
    const int moved = tai::detail::adopt_own_descriptor(impl->ring.ring_fd);
    impl->ring.ring_fd = moved;
    impl->ring.enter_ring_fd = moved;
  }

  if (!iopoll) {
    impl->event_fd = tai::detail::make_own_eventfd();
    if (impl->event_fd < 0) return Error::from_errno(errno, "eventfd for the uring engine");
    if (const int rc = io_uring_register_eventfd(&impl->ring, impl->event_fd); rc < 0)
      return Error::from_errno(-rc, "io_uring_register_eventfd");
  }

  if (options.uring_register_files) {
    unsigned slots = kFileSlots;
    rlimit rl{};
    if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
      slots = static_cast<unsigned>(std::min<rlim_t>(slots, rl.rlim_cur));
    int rc = io_uring_register_files_sparse(&impl->ring, slots);
    if (rc == -EINVAL) {  // kernels before 5.19: a table of -1 entries
      std::vector<int> empty(slots, -1);
      rc = io_uring_register_files(&impl->ring, empty.data(), slots);
    }
    if (rc < 0) {
      return Error{std::error_code(-rc, std::generic_category()),
                   "io_uring_register_files(" + std::to_string(slots) + " empty slots, for uring_register_files): " +
                       errno_text(-rc)};
    }
    impl->files_registered = true;
    for (unsigned s = slots; s-- > 0;) impl->free_file_slots.push_back(static_cast<int>(s));
  }

  if (options.uring_register_buffers) {
    // Probe with one page now, so that a locked-memory limit too low for any fixed buffer is
    // reported when the engine is made, not at the first register_buffers().
    int probe_err = ov.uring_register_buffers_errno;
    if (probe_err == 0) {
      void* page = std::aligned_alloc(4096, 4096);
      if (!page) return Error::from_errno(ENOMEM, "probe buffer for uring_register_buffers");
      iovec iov{page, 4096};
      const int rc = io_uring_register_buffers(&impl->ring, &iov, 1);
      if (rc < 0) probe_err = -rc;
      else (void)io_uring_unregister_buffers(&impl->ring);
      std::free(page);
    }
    if (probe_err != 0)
      return Error{std::error_code(probe_err, std::generic_category()), buffers_error_text(probe_err, 1, 4096, ov)};
  }

  impl->meta.resize(entries);
  impl->cqes.resize(entries);
  impl->free_meta.reserve(entries);
  for (std::uint64_t i = entries; i-- > 0;) impl->free_meta.push_back(static_cast<std::uint32_t>(i));

  Capabilities caps;
  caps.asynchronous = true;
  caps.direct_io = true;
  caps.durable_sync = true;
  caps.async_sync = !iopoll;
  caps.eventfd = !iopoll;
  caps.linked_requests = !iopoll;
  caps.registered_files = options.uring_register_files;
  caps.registered_buffers = options.uring_register_buffers;
  caps.vectored_writes = true;
  return std::unique_ptr<UringEngine>(new UringEngine(options, caps, std::move(impl)));
}

UringEngine::UringEngine(const EngineOptions& options, const Capabilities& caps, std::unique_ptr<Impl> impl)
    : Engine("uring", caps, options), impl_(std::move(impl)) {}

UringEngine::~UringEngine() = default;

int UringEngine::eventfd() const noexcept { return impl_->event_fd; }

UringEngine::Stats UringEngine::stats() const noexcept { return impl_->stats; }

void UringEngine::release_file_slot(int slot) noexcept {
  Impl& m = *impl_;
  int none = -1;
  // Drops the ring's reference to the file; nothing names the slot any more (no request in flight).
  (void)io_uring_register_files_update(&m.ring, static_cast<unsigned>(slot), &none, 1);
  std::lock_guard<std::mutex> lock(m.files_mutex);
  m.free_file_slots.push_back(slot);
}

Result<std::unique_ptr<EngineFile>> UringEngine::do_open(const std::string& path, OpenMode mode) {
  Impl& m = *impl_;
  if (m.iopoll && !has(mode.flags, Open::direct)) {
    return Error{std::error_code(EINVAL, std::generic_category()),
                 "engine 'uring': open '" + path +
                     "': the engine was made with uring_iopoll (IORING_SETUP_IOPOLL), which completes direct "
                     "I/O only; open the file with Open::direct, or make the engine without uring_iopoll"};
  }
  Result<int> fd = detail::open_descriptor(path, mode, "uring");
  if (!fd) return fd.error();
  *fd = tai::detail::adopt_own_descriptor(*fd);  // out of the program's way
  if (m.iopoll) {
    const auto [io_poll, source] = device_io_poll(*fd);
    if (io_poll == "0") {
      tai::detail::close_own_descriptor(*fd);
      return Error{std::error_code(EOPNOTSUPP, std::generic_category()),
                   "engine 'uring': open '" + path +
                       "': the engine was made with uring_iopoll (IORING_SETUP_IOPOLL), but the device of this "
                       "file cannot be polled (" + source +
                       " = 0: it has no poll queues, e.g. nvme without the poll_queues parameter), so polled "
                       "reads would fail with EOPNOTSUPP; make the engine without uring_iopoll"};
    }
  }
  detail::apply_open_hints(*fd, mode.flags);

  const FileCapabilities caps = detail::descriptor_capabilities(*fd, mode, capabilities());

  int slot = -1;
  if (m.files_registered) {
    {
      std::lock_guard<std::mutex> lock(m.files_mutex);
      if (!m.free_file_slots.empty()) {
        slot = m.free_file_slots.back();
        m.free_file_slots.pop_back();
      }
    }
    if (slot >= 0) {
      int target = *fd;
      if (io_uring_register_files_update(&m.ring, static_cast<unsigned>(slot), &target, 1) != 1) {
        // The file still works through its descriptor; only the fixed-file saving is lost.
        std::lock_guard<std::mutex> lock(m.files_mutex);
        m.free_file_slots.push_back(slot);
        slot = -1;
      }
    }
  }
  return std::unique_ptr<EngineFile>(std::make_unique<UringFile>(*this, path, mode, caps, *fd, slot));
}

std::error_code UringEngine::do_close(EngineFile& file) {
  return static_cast<UringFile&>(file).close_descriptor();
}

std::size_t UringEngine::do_submit(const Request* requests, std::size_t n) {
  Impl& m = *impl_;
  std::size_t taken = 0;
  unsigned queued = 0;               // SQEs put on the ring by this call
  bool cancel_next = false;          // IOPOLL only: a synchronous sync failed inside a link chain
  for (; taken < n; ++taken) {
    const Request& r = requests[taken];
    const bool is_sync = r.op == Op::fsync || r.op == Op::fdatasync;
    if (cancel_next) {
      m.made_in_submit.push_back({r.user_data, -ECANCELED});
      cancel_next = r.link;
      continue;
    }
    if (m.iopoll && is_sync) {
      // The kernel refuses sync SQEs on a polled ring: run it here, after everything before it
      // (so it covers every earlier write), and keep the link semantics by hand.
      if (queued) (void)io_uring_submit(&m.ring);
      queued = 0;
      while (m.in_flight > 0) {
        io_uring_cqe* cqe = nullptr;
        (void)io_uring_submit_and_wait_timeout(&m.ring, &cqe, 1, nullptr, nullptr);
        std::vector<Completion> done(m.in_flight);
        const std::size_t got = m.harvest(done.data(), done.size());
        m.made_in_submit.insert(m.made_in_submit.end(), done.begin(), done.begin() + static_cast<std::ptrdiff_t>(got));
      }
      std::int64_t result = 0;
      const Request* prev = taken > 0 ? &requests[taken - 1] : nullptr;
      if (prev && prev->link) {
        // The previous request's completion is the last one with its tag.
        for (auto it = m.made_in_submit.rbegin(); it != m.made_in_submit.rend(); ++it) {
          if (it->user_data != prev->user_data) continue;
          const bool short_transfer = (prev->op == Op::read || prev->op == Op::write) &&
                                      static_cast<std::uint64_t>(std::max<std::int64_t>(it->result, 0)) <
                                          std::min(prev->length, kMaxNativeLength);
          if (it->result < 0 || short_transfer) result = -ECANCELED;
          break;
        }
      }
      if (result == 0) {
        const int fd = r.file->fd();
        int rc;
        do {
          rc = r.op == Op::fdatasync ? ::fdatasync(fd) : ::fsync(fd);
        } while (rc < 0 && errno == EINTR);
        result = rc < 0 ? -errno : 0;
      }
      ++m.stats.sync_on_polled_ring;
      m.made_in_submit.push_back({r.user_data, result});
      cancel_next = result < 0 && r.link;
      continue;
    }

    if (m.free_meta.empty()) break;
    io_uring_sqe* sqe = m.next_sqe();
    if (!sqe) break;
    const std::uint32_t index = m.free_meta.back();
    m.free_meta.pop_back();
    Impl::Meta& meta = m.meta[index];
    meta.user_data = r.user_data;
    meta.dontneed_fd = -1;
    meta.behind = nullptr;

    const auto& file = static_cast<const UringFile&>(*r.file);
    const int slot = file.fixed_slot();
    const int target = slot >= 0 ? slot : file.fd();
    const auto length = static_cast<unsigned>(std::min(r.length, kMaxNativeLength));
    switch (r.op) {
      case Op::read:
      case Op::write: {
        // Segments are never fixed buffers (IORING_OP_WRITEV reads the array, which must stay
        // valid until the completion: Request's buffer rule covers it).
        const Impl::FixedBuffer* fixed = r.iov_count != 0 ? nullptr : m.fixed_buffer_of(r.buffer, length);
        if (r.iov_count != 0) {
          io_uring_prep_writev(sqe, target, r.iov, r.iov_count, r.offset);
        } else if (r.op == Op::read) {
          if (fixed) io_uring_prep_read_fixed(sqe, target, r.buffer, length, r.offset, static_cast<int>(fixed->index));
          else io_uring_prep_read(sqe, target, r.buffer, length, r.offset);
        } else {
          if (fixed) io_uring_prep_write_fixed(sqe, target, r.buffer, length, r.offset, static_cast<int>(fixed->index));
          else io_uring_prep_write(sqe, target, r.buffer, length, r.offset);
        }
        if (fixed) ++m.stats.fixed_buffer_sqes;
        if (has(r.file->mode().flags, Open::dontneed)) {
          meta.dontneed_fd = file.fd();
          meta.offset = r.offset;
        } else if (r.op == Op::write &&
                   detail::WriteBehind::applies(r.file->capabilities(), r.file->mode(), m.behind_every)) {
          meta.behind = static_cast<UringFile*>(r.file);
          meta.offset = r.offset;
        }
        break;
      }
      case Op::fsync:
        io_uring_prep_fsync(sqe, target, 0);
        break;
      case Op::fdatasync:
        io_uring_prep_fsync(sqe, target, IORING_FSYNC_DATASYNC);
        break;
    }
    unsigned flags = 0;
    if (slot >= 0) {
      flags |= IOSQE_FIXED_FILE;
      ++m.stats.fixed_file_sqes;
    }
    if (r.link) flags |= IOSQE_IO_LINK;
    io_uring_sqe_set_flags(sqe, flags);
    io_uring_sqe_set_data64(sqe, index);
    ++m.in_flight;
    ++m.stats.sqes;
    ++queued;
  }
  // One system call for the batch (none with SQPOLL while its thread is awake). If the kernel
  // takes fewer (EAGAIN, EBUSY), the rest stay on the ring and do_reap hands them over.
  if (queued) (void)io_uring_submit(&m.ring);
  return taken;
}

std::size_t UringEngine::do_reap(Completion* out, std::size_t max, std::size_t min, Timeout timeout) {
  Impl& m = *impl_;
  std::size_t got = 0;
  if (detail::reap_backlog_first(m.made_in_submit, m.in_flight, out, max, min, got)) return got;

  if (io_uring_sq_ready(&m.ring) > 0) (void)io_uring_submit(&m.ring);  // left behind by a short submit
  std::size_t from_ring = m.harvest(out + got, max - got);
  if (from_ring == 0 && m.iopoll) {
    // A polled ring posts completions only while someone polls for them.
    (void)io_uring_get_events(&m.ring);
    from_ring = m.harvest(out + got, max - got);
  }
  got += from_ring;

  const bool forever = timeout.count() < 0;
  const auto deadline = std::chrono::steady_clock::now() + (forever ? Timeout(0) : timeout);
  while (got < min && m.in_flight > 0) {
    const auto want = static_cast<unsigned>(std::min(min - got, m.in_flight));
    __kernel_timespec ts{};
    __kernel_timespec* tsp = nullptr;
    if (!forever) {
      const auto left = std::chrono::duration_cast<Timeout>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      ts = to_kernel_timespec(left);
      tsp = &ts;
    }
    io_uring_cqe* cqe = nullptr;
    const int rc = io_uring_submit_and_wait_timeout(&m.ring, &cqe, want, tsp, nullptr);
    got += m.harvest(out + got, max - got);
    if (rc == -ETIME) break;
    // EINTR (a signal), EAGAIN/EBUSY (the kernel is short of resources or flushing overflowed
    // completions): try again. Anything else is not expected: return what we have.
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) break;
  }
  return got;
}

std::error_code UringEngine::register_buffers(const iovec* iov, unsigned n, std::string* message) {
  Impl& m = *impl_;
  auto fail = [&](int err, std::string text) {
    if (message) *message = std::move(text);
    return std::error_code(err, std::generic_category());
  };
  if (!options().uring_register_buffers)
    return fail(EINVAL, "register_buffers: the uring engine was made without EngineOptions::uring_register_buffers");
  if (iov == nullptr || n == 0) return fail(EINVAL, "register_buffers: no buffers given");
  if (!m.fixed_buffers.empty()) {
    m.fixed_buffers.clear();
    if (const int rc = io_uring_unregister_buffers(&m.ring); rc < 0)
      return fail(-rc, "io_uring_unregister_buffers (replacing the registered set): " + errno_text(-rc));
  }
  std::uint64_t bytes = 0;
  for (unsigned i = 0; i < n; ++i) bytes += iov[i].iov_len;
  const detail::ProbeOverrides ov = detail::probe_overrides();
  int err = ov.uring_register_buffers_errno;
  if (err == 0) {
    if (const int rc = io_uring_register_buffers(&m.ring, iov, n); rc < 0) err = -rc;
  }
  if (err != 0) return fail(err, buffers_error_text(err, n, bytes, ov));

  m.fixed_buffers.reserve(n);
  for (unsigned i = 0; i < n; ++i) {
    const auto begin = reinterpret_cast<std::uintptr_t>(iov[i].iov_base);
    m.fixed_buffers.push_back({begin, begin + iov[i].iov_len, i});
  }
  std::sort(m.fixed_buffers.begin(), m.fixed_buffers.end(),
            [](const Impl::FixedBuffer& a, const Impl::FixedBuffer& b) { return a.begin < b.begin; });
  if (message) message->clear();
  return {};
}

std::error_code UringEngine::unregister_buffers() {
  Impl& m = *impl_;
  if (m.fixed_buffers.empty()) return std::error_code(ENXIO, std::generic_category());
  m.fixed_buffers.clear();
  if (const int rc = io_uring_unregister_buffers(&m.ring); rc < 0) return std::error_code(-rc, std::generic_category());
  return {};
}

Result<std::unique_ptr<Engine>> make_uring(const EngineOptions& options) {
  auto made = UringEngine::create(options);
  if (!made) return made.error();
  return std::unique_ptr<Engine>(std::move(made).value());
}

}  // namespace tai::engines
