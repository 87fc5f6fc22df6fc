// Helpers shared by tests: scratch files on a real file system, seeds.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>

namespace tai::test {

/// Restores (or removes) an environment variable at the end of a scope.
class EnvVar {
 public:
  EnvVar(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~EnvVar() {
    if (had_)
      ::setenv(name_.c_str(), old_.c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
 private:
  std::string name_, old_;
  bool had_ = false;
};

/// The depth of the run: `make test` (a developer's quick check) and the sanitizer steps of
/// `make check` set TAI_TEST_DEPTH=quick and the randomized suites run a quarter of their counts;
/// make check's release step and a plain ctest run them in full (unset, or any other value). A
/// suite that needs a minimum count to mean anything clamps to it after scaling.
inline double test_depth_factor() {
  const char* d = std::getenv("TAI_TEST_DEPTH");
  return d != nullptr && std::string(d) == "quick" ? 0.25 : 1.0;
}

/// A fresh directory under $TAI_TEST_DIR (default: /var/tmp, usually a disk file system where
/// O_DIRECT works, unlike tmpfs before Linux 6.6; $TMPDIR or /tmp where there is no writable
/// /var/tmp, as in a bare chroot) removed with everything in it when the object goes. Tests that
/// need O_DIRECT there ask direct_io_unsupported_reason() and skip with its answer.
class ScratchDir {
 public:
  ScratchDir() : ScratchDir(default_root()) {}
  /// Under `root` instead (e.g. /dev/shm where O_DIRECT is not needed and fsync should be free).
  explicit ScratchDir(const std::filesystem::path& root) {
    std::string tmpl = (root / "tai-test-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) {
      std::fprintf(stderr, "ScratchDir: mkdtemp %s: %s (set TAI_TEST_DIR to a writable directory)\n", tmpl.c_str(),
                   std::strerror(errno));
      std::abort();
    }
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  /// $TAI_TEST_DIR, else the first writable directory of /var/tmp, $TMPDIR, /tmp.
  static std::filesystem::path default_root() {
    if (const char* base = std::getenv("TAI_TEST_DIR")) return base;
    const char* tmpdir = std::getenv("TMPDIR");
    for (const char* d : {"/var/tmp", tmpdir, "/tmp"}) {
      struct stat st {};
      if (d != nullptr && ::stat(d, &st) == 0 && S_ISDIR(st.st_mode) && ::access(d, W_OK | X_OK) == 0) return d;
    }
    return "/var/tmp";  // ScratchDir says why it cannot make its directory there
  }

 private:
  std::filesystem::path path_;
};

/// Why files in `dir` cannot be opened with O_DIRECT ("" when they can): tmpfs before Linux 6.6,
/// ramfs, and some FUSE, overlay and network file systems refuse the flag (EINVAL at open).
/// Probed by creating a file there with O_DIRECT and writing one aligned 4 KiB block. For
/// GTEST_SKIP() in tests of direct I/O, which depend on the file system the tests run on.
inline std::string direct_io_unsupported_reason(const std::filesystem::path& dir) {
  const std::string probe = (dir / ("tai-direct-probe-" + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    ::unlink(probe.c_str());
    return "O_DIRECT is not supported in " + dir.string() + " (open: " + std::strerror(err) +
           "; tmpfs before Linux 6.6 and ramfs refuse it): set TAI_TEST_DIR to a directory on a disk file system";
  }
  std::string why;
  void* block = nullptr;
  if (::posix_memalign(&block, 4096, 4096) == 0) {
    std::memset(block, 0, 4096);
    if (::pwrite(fd, block, 4096, 0) != 4096)
      why = "an aligned O_DIRECT write in " + dir.string() + " failed (" + std::strerror(errno) + ")";
    std::free(block);
  }
  ::close(fd);
  ::unlink(probe.c_str());
  return why;
}

/// direct_io_unsupported_reason() of ScratchDir::default_root(), probed once per process.
inline const std::string& scratch_direct_io_unsupported_reason() {
  static const std::string why = direct_io_unsupported_reason(ScratchDir::default_root());
  return why;
}

/// In a GoogleTest test: skips it, with the reason, when files in `dir` cannot be opened with
/// O_DIRECT (direct_io_unsupported_reason()).
#define TAI_SKIP_WITHOUT_DIRECT_IO(dir)                                                 \
  do {                                                                                  \
    const std::string tai_direct_why_ = ::tai::test::direct_io_unsupported_reason(dir); \
    if (!tai_direct_why_.empty()) GTEST_SKIP() << tai_direct_why_;                      \
  } while (0)

/// The seed of a randomized test: $TAI_TEST_SEED if set, else random. Print it on failure.
inline std::uint64_t test_seed() {
  if (const char* s = std::getenv("TAI_TEST_SEED")) return std::strtoull(s, nullptr, 0);
  return std::random_device{}() * 0x9E3779B97F4A7C15ull ^ std::random_device{}();
}

}  // namespace tai::test
