// TAI's own descriptors and threads: see engines/common/own_descriptors.hpp.
#include "engines/common/own_descriptors.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>

namespace tai::detail {
namespace {

// One bit per descriptor below 2^20 (128 KiB of zeroed static memory: pages never touched cost
// nothing). Descriptors above are not recorded (is_own_descriptor answers false for them).
constexpr int kTracked = 1 << 20;
std::atomic<std::uint64_t> g_own[kTracked / 64] = {};

thread_local bool t_tai_thread __attribute__((tls_model("initial-exec"))) = false;

void set_bit(int fd, bool on) noexcept {
  if (fd < 0 || fd >= kTracked) return;
  const std::uint64_t bit = std::uint64_t{1} << (fd % 64);
  // release/acq_rel: pairs with the acquire load in is_own_descriptor (a reader that sees the bit
  // sees the descriptor made before it was set).
  if (on)
    g_own[fd / 64].fetch_or(bit, std::memory_order_acq_rel);
  else
    g_own[fd / 64].fetch_and(~bit, std::memory_order_acq_rel);
}

int compute_base() noexcept {
  rlimit rl{};
  rlim_t cur = 1024;
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) cur = rl.rlim_cur;
  if (cur == RLIM_INFINITY || cur > static_cast<rlim_t>(kTracked)) cur = kTracked;
  return static_cast<int>(std::max<rlim_t>(256, cur / 2));
}

}  // namespace

int own_descriptor_base() noexcept {
  static const int base = compute_base();
  return base;
}

int adopt_own_descriptor(int fd) noexcept {
  if (fd < 0) return fd;
  const int saved = errno;
  int use = fd;
  if (fd < own_descriptor_base()) {
    const int high = ::fcntl(fd, F_DUPFD_CLOEXEC, own_descriptor_base());
    if (high >= 0) {
      ::close(fd);
      use = high;
    }
  }
  if (use == fd) {
    const int fl = ::fcntl(fd, F_GETFD);
    if (fl >= 0 && !(fl & FD_CLOEXEC)) ::fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
  }
  set_bit(use, true);
  errno = saved;
  return use;
}

int dup_own_descriptor(int fd) noexcept {
  if (fd < 0) {
    errno = EBADF;
    return -1;
  }
  const int saved = errno;
  // One system call where adopt_own_descriptor after a dup takes three (dup, dup high, close):
  // the preload library makes one such duplicate per routed open, SQLite one per transaction.
  const int high = ::fcntl(fd, F_DUPFD_CLOEXEC, own_descriptor_base());
  if (high >= 0) {
    set_bit(high, true);
    errno = saved;
    return high;
  }
  const int low = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (low < 0) return -1;
  errno = saved;
  return adopt_own_descriptor(low);
}

int make_own_eventfd() noexcept {
  const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  return fd < 0 ? fd : adopt_own_descriptor(fd);
}

int close_own_descriptor(int fd) noexcept {
  set_bit(fd, false);
  return ::close(fd);
}

void forget_own_descriptor(int fd) noexcept { set_bit(fd, false); }

bool is_own_descriptor(int fd) noexcept {
  if (fd < 0 || fd >= kTracked) return false;
  return (g_own[fd / 64].load(std::memory_order_acquire) >> (fd % 64)) & 1u;
}

bool this_thread_is_tai() noexcept { return t_tai_thread; }
void mark_this_thread_as_tai(const char* name) noexcept {
  t_tai_thread = true;
  // A name longer than the kernel's 15 characters fails with ERANGE and leaves the thread its
  // old name; every name TAI gives fits.
  (void)pthread_setname_np(pthread_self(), name);
  // A signal sent to the process goes to any thread that does not block it. The program's
  // handlers expect its own threads (they may write to a file the drop-in layer routes, which
  // from one of TAI's threads would bypass the layer), so TAI's threads block every signal that
  // can be blocked; faults (SIGSEGV, ...) still reach the thread that causes them.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
}

SignalsBlockedScope::SignalsBlockedScope() noexcept {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &saved_);
}
SignalsBlockedScope::~SignalsBlockedScope() { pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }

}  // namespace tai::detail
