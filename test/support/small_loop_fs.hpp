// A small real file system on a loop device (ext4, XFS or btrfs), for tests of errors that come
// from a real file system: ENOSPC when it fills (with each file system's own allocator: ext4's
// delayed allocation and block reservations, XFS's delayed allocation and per-AG reservations,
// btrfs's copy-on-write data and metadata chunks, never a tmpfs page count), and EIO after the
// file system is shut down the way xfstests' "godown" does it (the shutdown ioctl, which ext4, XFS
// and recent btrfs share: every later read, write and fsync fails with EIO, as on a dead disk).
//
// SmallLoopFs makes a sparse image file, runs mkfs.<type> on it, attaches it to a loop device of
// its own (`losetup --find`) and mounts that. The device stays attached until the destructor: with
// `mount -o loop` the device is detached when the file system lets go of it, and the kernel does
// that detach asynchronously, so a mount right after an unmount could find the old device still
// attached, reuse it, and lose its backing file a moment later (every later access EIO). XFS refuses file systems under 300 MB and btrfs under about 110 MB, so those are made at
// their minimum and then a ballast file (fallocate) takes all but `free_mib` of the space: every
// type then fills after about the same number of bytes. Without root, the mkfs tool (Debian's
// e2fsprogs, xfsprogs, btrfs-progs), a free loop device or a kernel that allows the mount (some
// containers do not), mounted() is false and skip_reason() says which step failed, for
// GTEST_SKIP(). The destructor unmounts (lazily when a file is still open), detaches the device
// and removes the image.
//
// Backing::capped_memory puts the image on a tmpfs of its own instead, which holds only the
// blocks written so far: fail_device_writes() fills that tmpfs, so that from then on the loop
// device fails every write to a block never written before (its write to the image gets ENOSPC,
// and the block layer gives the file system an I/O error), while the file system above still has
// room and accepts write(2). That is a disk failing under write-back, the error a later fsync
// must report; heal_device() frees the room again. (Without device-mapper's dm-error, which
// some kernels lack, this is the failing device a test can make.)
#pragma once

#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
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
// XFS_IOC_GOINGDOWN and BTRFS_IOC_SHUTDOWN are the same number and take the same flags.
#ifndef EXT4_IOC_SHUTDOWN
#define EXT4_IOC_SHUTDOWN _IOR('X', 125, std::uint32_t)
#endif
constexpr std::uint32_t kExt4GoingDownNoLogFlush = 0x2;  // EXT4_GOING_FLAGS_NOLOGFLUSH

enum class FsType { ext4, xfs, btrfs };

/// Where the image lives: a sparse file on the scratch directory's file system, or a tmpfs of its
/// own that fail_device_writes() can fill (ext4 only).
enum class Backing { scratch_file_system, capped_memory };

inline const char* fs_name(FsType t) {
  switch (t) {
    case FsType::ext4: return "ext4";
    case FsType::xfs: return "xfs";
    case FsType::btrfs: return "btrfs";
  }
  return "?";
}

class SmallLoopFs {
 public:
  /// A file system of type `type` under ScratchDir::default_root() ($TAI_TEST_DIR, else /var/tmp), mounted on a fresh
  /// directory, with about `free_mib` MiB free for the test.
  SmallLoopFs(FsType type, unsigned free_mib, Backing backing = Backing::scratch_file_system) : type_(type) {
    const std::string name = fs_name(type);
    if (::geteuid() != 0) {
      reason_ = "mounting a loop " + name + " needs root";
      return;
    }
    if (backing == Backing::capped_memory && type != FsType::ext4) {
      reason_ = "a device that fails its writes is made for ext4 only";
      return;
    }
    const std::filesystem::path root = ScratchDir::default_root();
    std::string tmpl = (root / ("tai-" + name + "-XXXXXX")).string();
    if (!::mkdtemp(tmpl.data())) {
      reason_ = "mkdtemp under " + root.string() + ": " + std::strerror(errno);
      return;
    }
    dir_ = tmpl;
    image_ = dir_ + "/image";
    mnt_ = dir_ + "/mnt";
    ::mkdir(mnt_.c_str(), 0700);
    if (backing == Backing::capped_memory) {
      memory_ = dir_ + "/device";
      ::mkdir(memory_.c_str(), 0700);
      // Room for the whole image and then some: nothing fails until fail_device_writes().
      if (!run("mount -t tmpfs -o size=" + std::to_string(free_mib + 64) + "m tai-device " + memory_ +
               " >/dev/null 2>&1")) {
        reason_ = "mount -t tmpfs " + memory_ + " failed (tmpfs mounts refused here)";
        ::rmdir(memory_.c_str());
        memory_.clear();
        return;
      }
      image_ = memory_ + "/image";
    }
    unsigned mib = free_mib;
    std::string mkfs, package;
    switch (type) {
      case FsType::ext4:
        // The default mkfs.ext4 of Debian 12, quiet, lazy init off so no kernel thread writes
        // behind the test's back.
        mkfs = "mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0";
        package = "e2fsprogs";
        break;
      case FsType::xfs:
        mib = free_mib > 300 ? free_mib : 300;  // mkfs.xfs: "size ... too small, ... minimum 300MB"
        mkfs = "mkfs.xfs -q -f";
        package = "xfsprogs";
        break;
      case FsType::btrfs:
        mib = free_mib > 128 ? free_mib : 128;  // mkfs.btrfs refuses below about 109 MiB
        mkfs = "mkfs.btrfs -q -f";
        package = "btrfs-progs";
        break;
    }
    const std::string tool = mkfs.substr(0, mkfs.find(' '));
    if (!run("command -v " + tool + " >/dev/null 2>&1")) {
      reason_ = tool + " is not installed (Debian package " + package + ")";
      return;
    }
    const int fd = ::open(image_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(mib) << 20) != 0) {
      reason_ = "creating the image " + image_ + ": " + std::strerror(errno);
      if (fd >= 0) ::close(fd);
      return;
    }
    ::close(fd);
    if (!run(mkfs + " " + image_ + " >/dev/null 2>&1")) {
      reason_ = tool + " on a " + std::to_string(mib) + " MiB image failed";
      return;
    }
    device_ = output_of("losetup --find --show " + image_ + " 2>/dev/null");
    if (device_.rfind("/dev/", 0) != 0) {
      reason_ = "losetup --find --show " + image_ + " gave no loop device (none free, or loop devices are refused here)";
      device_.clear();
      return;
    }
    // A device that fails its writes: no journal commit on a timer while it fails (every commit
    // then comes from an fsync, after heal_device()), and a data error leaves the file system up.
    if (!mount(backing == Backing::capped_memory ? "-o commit=300,errors=continue" : "")) {
      reason_ = "mount " + device_ + " " + mnt_ + " (" + name + ") failed (the kernel lacks " + name +
                ", or the mount is refused here)";
      return;
    }
    if (type != FsType::ext4) {
      const std::string why = leave_free(std::uint64_t{free_mib} << 20);
      if (!why.empty()) {
        reason_ = "the ballast on the " + name + " file system: " + why;
        unmount();
        return;
      }
    }
  }
  ~SmallLoopFs() {
    unmount();
    if (!device_.empty()) (void)run("losetup -d " + device_ + " >/dev/null 2>&1");
    if (!image_.empty()) ::unlink(image_.c_str());
    if (!memory_.empty()) {
      (void)run("umount " + memory_ + " >/dev/null 2>&1");
      ::rmdir(memory_.c_str());
    }
    if (!mnt_.empty()) ::rmdir(mnt_.c_str());
    if (!dir_.empty()) ::rmdir(dir_.c_str());
  }
  SmallLoopFs(const SmallLoopFs&) = delete;
  SmallLoopFs& operator=(const SmallLoopFs&) = delete;

  FsType type() const { return type_; }
  bool mounted() const { return mounted_; }
  const std::string& skip_reason() const { return reason_; }
  std::string file(const std::string& name) const { return mnt_ + "/" + name; }

  /// "" when this kernel's file system has the shutdown ioctl, else why not (btrfs has it only
  /// in recent kernels, and not in every configuration). Asked with a flag value no
  /// file system accepts: EINVAL says the call exists, ENOTTY or EOPNOTSUPP that it does not.
  std::string shutdown_support() const {
    const int fd = ::open(mnt_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return "open " + mnt_ + ": " + std::strerror(errno);
    std::uint32_t bad = 0x7fff;
    const int rc = ::ioctl(fd, EXT4_IOC_SHUTDOWN, &bad);
    const int err = errno;
    ::close(fd);
    if (rc != 0 && err == EINVAL) return "";
    if (rc == 0) return "the shutdown ioctl accepted a flag value it should refuse";
    return std::string("this kernel's ") + fs_name(type_) + " has no shutdown ioctl (" + std::strerror(err) + ")";
  }

  /// Shuts the file system down without flushing its log (the state of a disk that died): from
  /// now on every read, write and sync on it fails with EIO. "" or what went wrong.
  std::string shut_down() const {
    const int fd = ::open(mnt_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return "open " + mnt_ + ": " + std::strerror(errno);
    std::uint32_t flags = kExt4GoingDownNoLogFlush;
    const int rc = ::ioctl(fd, EXT4_IOC_SHUTDOWN, &flags);
    const int err = errno;
    ::close(fd);
    return rc == 0 ? std::string() : std::string("shutdown ioctl: ") + std::strerror(err);
  }

  /// Backing::capped_memory: fills the memory the image lives in, so that the device fails every
  /// later write to a block not written before. "" or what went wrong.
  std::string fail_device_writes() const {
    if (memory_.empty()) return "the file system was not made with Backing::capped_memory";
    struct statvfs sv {};
    if (::statvfs(memory_.c_str(), &sv) != 0) return std::string("statvfs: ") + std::strerror(errno);
    const std::uint64_t avail = std::uint64_t{sv.f_bavail} * sv.f_frsize;
    const std::string p = memory_ + "/ballast";
    const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return "open " + p + ": " + std::strerror(errno);
    const int err = avail == 0 ? 0 : ::posix_fallocate(fd, 0, static_cast<off_t>(avail));
    ::close(fd);
    return err == 0 ? std::string() : std::string("posix_fallocate on tmpfs: ") + std::strerror(err);
  }
  /// Backing::capped_memory: the device writes again.
  void heal_device() const {
    if (!memory_.empty()) ::unlink((memory_ + "/ballast").c_str());
  }

  /// Unmounts and mounts the image again: after shut_down(), what the "disk" kept. "" or what
  /// went wrong.
  std::string remount() {
    if (!unmount())
      return "unmounting " + mnt_ + " failed for 10 s (a file on it still open?): mounting " + device_ +
             " again would find the old, shut-down file system";
    return mount() ? std::string() : "mounting " + device_ + " again failed";
  }

 private:
  static bool run(const std::string& cmd) {
    const int st = std::system(cmd.c_str());
    return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  // The first line a shell command prints, without its newline.
  static std::string output_of(const std::string& cmd) {
    std::string out;
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
      char line[256];
      if (std::fgets(line, sizeof line, p)) out = line;
      ::pclose(p);
    }
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    return out;
  }
  bool mount(const std::string& options = "") {
    mounted_ = run("mount " + options + " " + device_ + " " + mnt_ + " >/dev/null 2>&1");
    return mounted_;
  }
  // True when the file system is gone. A process killed a moment ago may still hold a file on it
  // (an io_uring instance is torn down by a kernel worker after its process has been reaped), so
  // a busy unmount is tried again for up to 10 s before it is detached lazily (false then: the
  // superblock lives on until its last file closes).
  bool unmount() {
    if (!mounted_) return true;
    mounted_ = false;
    for (int i = 0; i < 200; ++i) {
      if (run("umount " + mnt_ + " >/dev/null 2>&1")) return true;
      ::usleep(50'000);
    }
    (void)run("umount -l " + mnt_ + " >/dev/null 2>&1");
    return false;
  }
  // fallocate()s a ballast file over all the free space but `leave` bytes, and syncs it.
  std::string leave_free(std::uint64_t leave) const {
    struct statvfs sv {};
    if (::statvfs(mnt_.c_str(), &sv) != 0) return std::string("statvfs: ") + std::strerror(errno);
    const std::uint64_t avail = std::uint64_t{sv.f_bavail} * sv.f_frsize;
    if (avail <= leave) return "";
    const std::string p = file("ballast");
    const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return "open " + p + ": " + std::strerror(errno);
    const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(avail - leave));
    const int serr = ::fsync(fd) == 0 ? 0 : errno;
    ::close(fd);
    if (err != 0) return std::string("posix_fallocate: ") + std::strerror(err);
    if (serr != 0) return std::string("fsync: ") + std::strerror(serr);
    return "";
  }

  FsType type_;
  std::string dir_, image_, mnt_;
  std::string memory_;  ///< Backing::capped_memory: the tmpfs the image is on
  std::string device_;  ///< /dev/loopN, attached from construction to destruction
  std::string reason_;
  bool mounted_ = false;
};

}  // namespace tai::test
