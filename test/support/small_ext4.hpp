// A small real ext4 file system on a loop device, for tests of errors that come from a real file
// system: ENOSPC when it fills (with ext4's delayed allocation and its block reservations, not a
// tmpfs page count), and EIO after the file system is shut down the way xfstests' "godown" does
// it (EXT4_IOC_SHUTDOWN: every later read, write and fsync fails with EIO, as on a dead disk).
//
// SmallExt4 makes an image file of a few MiB, runs mkfs.ext4 on it and mounts it with `mount -o
// loop`. Without root, mkfs.ext4, a free loop device or a kernel that allows the mount (some
// containers do not), mounted() is false and skip_reason() says which step failed, for
// GTEST_SKIP(). The destructor unmounts (lazily when a file is still open) and removes the image.
#pragma once

#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "support/test_env.hpp"

namespace tai::test {

// From linux/ext4.h (not installed by every linux-libc-dev): the shutdown ioctl and its flags.
#ifndef EXT4_IOC_SHUTDOWN
#define EXT4_IOC_SHUTDOWN _IOR('X', 125, std::uint32_t)
#endif
constexpr std::uint32_t kExt4GoingDownNoLogFlush = 0x2;  // EXT4_GOING_FLAGS_NOLOGFLUSH

class SmallExt4 {
 public:
  /// An ext4 of `mib` MiB under $TAI_TEST_DIR (ScratchDir::default_root(): $TAI_TEST_DIR, else /var/tmp), mounted on a fresh directory.
  explicit SmallExt4(unsigned mib) {
    if (::geteuid() != 0) {
      reason_ = "mounting a loop ext4 needs root";
      return;
    }
    const std::filesystem::path root = ScratchDir::default_root();
    std::string tmpl = (root / "tai-ext4-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) {
      reason_ = "mkdtemp under " + root.string() + ": " + std::strerror(errno);
      return;
    }
    dir_ = tmpl;
    image_ = dir_ + "/image";
    mnt_ = dir_ + "/mnt";
    ::mkdir(mnt_.c_str(), 0700);
    const int fd = ::open(image_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(mib) << 20) != 0) {
      reason_ = "creating the image " + image_ + ": " + std::strerror(errno);
      if (fd >= 0) ::close(fd);
      return;
    }
    ::close(fd);
    // No journal-less tricks: the default mkfs.ext4 of Debian 12, quiet, lazy init off so no
    // kernel thread writes behind the test's back.
    if (!run("mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 " + image_ + " >/dev/null 2>&1")) {
      reason_ = "mkfs.ext4 failed or is missing (Debian package e2fsprogs)";
      return;
    }
    if (!mount()) {
      reason_ = "mount -o loop " + image_ + " " + mnt_ + " failed (no loop device, or the mount is refused here)";
      return;
    }
  }
  ~SmallExt4() {
    unmount();
    if (!image_.empty()) ::unlink(image_.c_str());
    if (!mnt_.empty()) ::rmdir(mnt_.c_str());
    if (!dir_.empty()) ::rmdir(dir_.c_str());
  }
  SmallExt4(const SmallExt4&) = delete;
  SmallExt4& operator=(const SmallExt4&) = delete;

  bool mounted() const { return mounted_; }
  const std::string& skip_reason() const { return reason_; }
  std::string file(const std::string& name) const { return mnt_ + "/" + name; }

  /// Shuts the file system down without flushing its log (the state of a disk that died): from
  /// now on every read, write and sync on it fails with EIO. "" or what went wrong.
  std::string shut_down() const {
    const int fd = ::open(mnt_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return "open " + mnt_ + ": " + std::strerror(errno);
    std::uint32_t flags = kExt4GoingDownNoLogFlush;
    const int rc = ::ioctl(fd, EXT4_IOC_SHUTDOWN, &flags);
    const int err = errno;
    ::close(fd);
    return rc == 0 ? std::string() : std::string("EXT4_IOC_SHUTDOWN: ") + std::strerror(err);
  }

  /// Unmounts and mounts the image again: after shut_down(), what the "disk" kept. "" or what
  /// went wrong.
  std::string remount() {
    unmount();
    return mount() ? std::string() : "mounting " + image_ + " again failed";
  }

 private:
  static bool run(const std::string& cmd) {
    const int st = std::system(cmd.c_str());
    return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  bool mount() {
    mounted_ = run("mount -o loop " + image_ + " " + mnt_ + " >/dev/null 2>&1");
    return mounted_;
  }
  void unmount() {
    if (!mounted_) return;
    // umount(8) also frees the loop device that mount -o loop set up (autoclear).
    if (!run("umount " + mnt_ + " >/dev/null 2>&1")) (void)run("umount -l " + mnt_ + " >/dev/null 2>&1");
    mounted_ = false;
  }

  std::string dir_, image_, mnt_;
  std::string reason_;
  bool mounted_ = false;
};

}  // namespace tai::test
