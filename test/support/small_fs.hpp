// A tiny file system that really fills up, for tests of ENOSPC. An injected errno (the fault
// engine) cannot show what a full disk does to state below the engine interface, such as a
// stdio stream's buffer and position after a failed flush; a real full file system can.
//
// SmallTmpfs mounts a tmpfs of a few pages on a fresh directory. Mounting needs root (or
// CAP_SYS_ADMIN); without it, or where mount(2) is refused (some containers), mounted() is false
// and skip_reason() says why, for GTEST_SKIP(). The destructor unmounts and removes the
// directory; destroy whatever holds files open there first (a lazy unmount covers a leak).
#pragma once

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "support/test_env.hpp"
#include <vector>

namespace tai::test {

class SmallTmpfs {
 public:
  /// Mounts a tmpfs of `bytes` (rounded up to pages by the kernel) under $TAI_TEST_DIR
  /// (ScratchDir::default_root(): $TAI_TEST_DIR, else /var/tmp).
  explicit SmallTmpfs(std::uint64_t bytes) {
    if (::geteuid() != 0) {
      reason_ = "mounting a small tmpfs needs root";
      return;
    }
    const std::filesystem::path root = ScratchDir::default_root();
    std::string tmpl = (root / "tai-smallfs-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) {
      reason_ = "mkdtemp under " + root.string() + ": " + std::strerror(errno);
      return;
    }
    path_ = tmpl;
    const std::string options = "size=" + std::to_string(bytes) + ",mode=0700";
    if (::mount("tmpfs", path_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options.c_str()) != 0) {
      reason_ = "mount -t tmpfs -o " + options + " " + path_ + ": " + std::strerror(errno);
      ::rmdir(path_.c_str());
      path_.clear();
      return;
    }
    mounted_ = true;
  }
  ~SmallTmpfs() {
    if (!mounted_) return;
    // A lazy unmount when a file is still open (a failed test): the mount goes when it closes.
    if (::umount2(path_.c_str(), 0) != 0) (void)::umount2(path_.c_str(), MNT_DETACH);
    ::rmdir(path_.c_str());
  }
  SmallTmpfs(const SmallTmpfs&) = delete;
  SmallTmpfs& operator=(const SmallTmpfs&) = delete;

  bool mounted() const { return mounted_; }
  const std::string& skip_reason() const { return reason_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

  /// Creates `name` and grows it until the file system is full (write(2) fails with ENOSPC),
  /// then shrinks it so that exactly `leave` bytes (a multiple of the page size) are free
  /// again. Returns "" or what went wrong.
  std::string fill(const std::string& name, std::uint64_t leave) const {
    const std::string p = file(name);
    const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return "open " + p + ": " + std::strerror(errno);
    const std::vector<char> chunk(64 * 1024, 'F');
    std::uint64_t size = 0;
    int err = 0;
    for (;;) {
      const ssize_t n = ::write(fd, chunk.data(), chunk.size());
      if (n > 0) {
        size += static_cast<std::uint64_t>(n);
        continue;
      }
      err = n < 0 ? errno : ENOSPC;
      if (err != EINTR) break;
    }
    std::string what;
    if (err != ENOSPC) {
      what = "filling " + p + " stopped with " + std::strerror(err) + ", not ENOSPC";
    } else if (size < leave) {
      what = "the file system holds less than the " + std::to_string(leave) + " bytes to leave free";
    } else if (::ftruncate(fd, static_cast<off_t>(size - leave)) != 0) {
      what = "ftruncate " + p + ": " + std::strerror(errno);
    }
    ::close(fd);
    return what;
  }

 private:
  std::string path_;
  std::string reason_;
  bool mounted_ = false;
};

}  // namespace tai::test
