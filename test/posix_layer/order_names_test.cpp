// Name changes under the order mode (TAI_FSYNC=order): tai::posix::rename, renameat, link,
// unlink, unlinkat, mkdir(at), rmdir and symlink(at) wait for the closed epochs, make the kernel's change, and put the directory
// of each name they changed (and the open the directory of each file it made) on the open
// epoch's list: the order thread fsyncs it with the epoch's files, so that no later epoch's
// writes reach the device before the name change is durable. Whether the order holds in every
// crash state is the crash suite's (fsync_order_crash_test.cpp, "name changes"); here: the calls
// do what their POSIX namesakes do, in both modes, sync the directories they should and no
// more, and hold few descriptors however many directories one epoch touches.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "posix_layer/support.hpp"
#include "posix_layer/through_settings.hpp"

namespace tai::test {
namespace {

class OrderNames : public LayerTest {
 protected:
  void SetUp() override { restart(settings(posix::FsyncMode::order)); }
  void TearDown() override {
    posix::detail::hold_order_thread_for_testing(false);
    posix::detail::fail_directory_syncs_for_testing(0, 0);
    LayerTest::TearDown();
  }

  posix::detail::Settings settings(posix::FsyncMode mode) {
    posix::detail::Settings s = through_settings(64 * 1024, recording_);
    s.files_start_through = true;  // the layer's default
    s.fsync_mode = mode;
    return s;
  }
  // A file of `n` bytes written through the layer and closed.
  void make_file(const std::string& path, std::size_t n, unsigned seed) {
    const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
    const std::string bytes = pattern(n, seed);
    ASSERT_EQ(posix::pwrite(fd, bytes.data(), n, 0), static_cast<ssize_t>(n));
    ASSERT_EQ(posix::fsync(fd), 0);
    ASSERT_EQ(posix::close(fd), 0);
  }
  static bool exists(const std::string& path) {
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0;
  }
  static std::uint64_t dir_syncs() { return posix::detail::kernel_directory_syncs_for_testing(); }
  static mode_t current_umask() {
    const mode_t m = ::umask(022);
    ::umask(m);
    return m;
  }

  std::shared_ptr<engines::RecordingEngine*> recording_;
};

TEST_F(OrderNames, ARenameIsSyncedWithItsEpochAndNotBefore) {
  const std::string tmp = file("state.tmp"), cur = file("state"), log = file("log");
  make_file(tmp, 3000, 1);
  ASSERT_EQ(posix::sync_now(), 0);  // the creation's directory sync out of the way
  const std::uint64_t before = dir_syncs();
  ASSERT_EQ(posix::rename(tmp.c_str(), cur.c_str()), 0) << std::strerror(errno);
  EXPECT_FALSE(exists(tmp));
  EXPECT_EQ(kernel_contents(cur), pattern(3000, 1));
  EXPECT_EQ(dir_syncs(), before) << "synced before its epoch was closed";
  // The rename's epoch is closed by the next fsync of any routed file, and made durable with it.
  const int fd = posix::open(log.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(posix::pwrite(fd, "x", 1, 0), 1);
  ASSERT_EQ(posix::fsync(fd), 0);
  ASSERT_EQ(posix::sync_now(), 0);
  EXPECT_EQ(dir_syncs(), before + 1) << "one directory, one sync: the rename's and the log's creation's";
  // An epoch without name changes syncs no directory.
  ASSERT_EQ(posix::pwrite(fd, "y", 1, 1), 1);
  ASSERT_EQ(posix::fsync(fd), 0);
  ASSERT_EQ(posix::sync_now(), 0);
  EXPECT_EQ(dir_syncs(), before + 1);
  ASSERT_EQ(posix::close(fd), 0);
}

TEST_F(OrderNames, UnlinkLinkAndTheAtFormsAreSyncedToo) {
  const std::string a = file("a"), b = file("b"), sub = file("sub");
  make_file(a, 100, 2);
  ASSERT_EQ(::mkdir(sub.c_str(), 0755), 0);
  ASSERT_EQ(posix::sync_now(), 0);
  std::uint64_t before = dir_syncs();
  ASSERT_EQ(posix::link(a.c_str(), b.c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(posix::sync_now(), 0);
  EXPECT_EQ(dir_syncs(), before + 1) << "link";
  EXPECT_EQ(kernel_contents(b), pattern(100, 2));

  before = dir_syncs();
  ASSERT_EQ(posix::unlink(a.c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(posix::sync_now(), 0);
  EXPECT_EQ(dir_syncs(), before + 1) << "unlink";
  EXPECT_FALSE(exists(a));

  // renameat across two directories: both are synced.
  const int dir = ::open(file("").c_str(), O_RDONLY | O_DIRECTORY);
  const int subdir = ::open(sub.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(dir, 0);
  ASSERT_GE(subdir, 0);
  before = dir_syncs();
  ASSERT_EQ(posix::renameat(dir, "b", subdir, "b"), 0) << std::strerror(errno);
  ASSERT_EQ(posix::sync_now(), 0);
  EXPECT_EQ(dir_syncs(), before + 2) << "renameat from one directory into another";
  EXPECT_EQ(kernel_contents(sub + "/b"), pattern(100, 2));

  make_file(file("c"), 10, 7);
  ASSERT_EQ(posix::sync_now(), 0);
  before = dir_syncs();
  ASSERT_EQ(posix::unlinkat(subdir, "b", 0), 0) << std::strerror(errno);
  ASSERT_EQ(posix::unlinkat(dir, "c", 0), 0) << std::strerror(errno);
  ASSERT_EQ(posix::sync_now(), 0);
  EXPECT_EQ(dir_syncs(), before + 2) << "unlinkat in two directories";
  ::close(subdir);
  ::close(dir);
}

// A directory made in an epoch is in its parent durably with that epoch's files (a file made in
// it and fsynced is found by its path after a crash, whenever a later epoch's writes are); so are
// a symbolic link and a removed directory. Failed calls sync nothing.
TEST_F(OrderNames, MkdirSymlinkAndRmdirAreSyncedWithTheirEpoch) {
  const std::string made = file("made"), linked = file("linked"), removed = file("removed");
  make_file(file("routed"), 10, 11);  // the layer in order mode from its first routed file
  ASSERT_EQ(::mkdir(made.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(linked.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(removed.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((removed + "/old").c_str(), 0755), 0);
  ASSERT_EQ(posix::sync_now(), 0);

  std::uint64_t before = dir_syncs();
  ASSERT_EQ(posix::mkdir((made + "/new").c_str(), 0750), 0) << std::strerror(errno);
  struct stat st {};
  ASSERT_EQ(::stat((made + "/new").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0750u & ~current_umask());
  EXPECT_EQ(dir_syncs(), before) << "synced before its epoch was closed";
  const int fd = posix::open((made + "/new/f").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(posix::pwrite(fd, "data", 4, 0), 4);
  ASSERT_EQ(posix::fsync(fd), 0);
  ASSERT_EQ(posix::sync_now(), 0);
  EXPECT_EQ(dir_syncs(), before + 2) << "the new directory's parent (the mkdir) and the new directory (the file's creation)";
  ASSERT_EQ(posix::close(fd), 0);

  before = dir_syncs();
  ASSERT_EQ(posix::symlink("../made/new/f", (linked + "/ln").c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(posix::sync_now(), 0);
  EXPECT_EQ(dir_syncs(), before + 1) << "symlink";
  EXPECT_EQ(kernel_contents(linked + "/ln"), "data");

  const int dir = ::open(linked.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(dir, 0);
  before = dir_syncs();
  ASSERT_EQ(posix::symlinkat("ln", dir, "ln2"), 0) << std::strerror(errno);
  ASSERT_EQ(posix::mkdirat(dir, "sub", 0755), 0) << std::strerror(errno);
  ASSERT_EQ(posix::sync_now(), 0);
  EXPECT_EQ(dir_syncs(), before + 1) << "symlinkat and mkdirat in one directory, one epoch: one sync";
  EXPECT_EQ(kernel_contents(linked + "/ln2"), "data");
  ::close(dir);

  before = dir_syncs();
  ASSERT_EQ(posix::rmdir((removed + "/old").c_str()), 0) << std::strerror(errno);
  EXPECT_FALSE(exists(removed + "/old"));
  ASSERT_EQ(posix::sync_now(), 0);
  EXPECT_EQ(dir_syncs(), before + 1) << "rmdir";

  before = dir_syncs();
  errno = 0;
  EXPECT_EQ(posix::mkdir(made.c_str(), 0755), -1);
  EXPECT_EQ(errno, EEXIST);
  errno = 0;
  EXPECT_EQ(posix::rmdir(made.c_str()), -1);
  EXPECT_EQ(errno, ENOTEMPTY);
  errno = 0;
  EXPECT_EQ(posix::symlink("x", (linked + "/ln").c_str()), -1);
  EXPECT_EQ(errno, EEXIST);
  errno = 0;
  EXPECT_EQ(posix::mkdir(file("missing/new").c_str(), 0755), -1);
  EXPECT_EQ(errno, ENOENT);
  ASSERT_EQ(posix::sync_now(), 0);
  EXPECT_EQ(dir_syncs(), before) << "a failed call synced a directory";
}

// SQLite fsyncs the directory after it makes its journal: the names changed before that fsync
// began are durable, and the epoch does not sync the directory again for them; a change after it
// is synced as usual.
TEST_F(OrderNames, AProgramsOwnFsyncOfTheDirectoryIsNotRepeated) {
  const std::string log = file("log");
  make_file(file("a"), 100, 6);
  ASSERT_EQ(posix::sync_now(), 0);
  const int dir = ::open(file("").c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(dir, 0);
  const int fd = posix::open(log.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(posix::sync_now(), 0);
  std::uint64_t before = dir_syncs();
  ASSERT_EQ(posix::rename(file("a").c_str(), file("b").c_str()), 0);
  ASSERT_EQ(posix::fsync(dir), 0);  // the program's own
  ASSERT_EQ(posix::pwrite(fd, "x", 1, 0), 1);
  ASSERT_EQ(posix::fsync(fd), 0);
  ASSERT_EQ(posix::sync_now(), 0);
  EXPECT_EQ(dir_syncs(), before) << "the epoch synced the directory the program had just synced";
  before = dir_syncs();
  ASSERT_EQ(posix::fsync(dir), 0);
  ASSERT_EQ(posix::rename(file("b").c_str(), file("c").c_str()), 0);  // after the program's fsync
  ASSERT_EQ(posix::pwrite(fd, "y", 1, 1), 1);
  ASSERT_EQ(posix::fsync(fd), 0);
  ASSERT_EQ(posix::sync_now(), 0);
  EXPECT_EQ(dir_syncs(), before + 1) << "a rename after the program's fsync of the directory was not synced";
  ASSERT_EQ(posix::close(fd), 0);
  ::close(dir);
}

// The change reaches the kernel only while no closed epoch is in flight: here a device that does
// not answer (the order thread held) keeps a rename waiting, and it is made once the epoch before
// it is durable.
TEST_F(OrderNames, ANameChangeWaitsForTheEpochsClosedBeforeIt) {
  posix::detail::Settings s = settings(posix::FsyncMode::order);
  s.fsync_inline = posix::detail::InlineEpochs::never;  // the fsync below leaves its epoch in flight
  s.fsync_max_delay_ms = 600'000;                       // and does not wait for it
  restart(s);
  const std::string data = file("data"), a = file("a"), b = file("b");
  make_file(a, 10, 8);
  ASSERT_EQ(posix::sync_now(), 0);
  const int fd = posix::open(data.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  posix::detail::hold_order_thread_for_testing(true);
  ASSERT_EQ(posix::pwrite(fd, "w", 1, 0), 1);
  ASSERT_EQ(posix::fsync(fd), 0);  // returns at once; its epoch waits for the held thread
  std::atomic<bool> done{false};
  std::thread renamer([&] {
    EXPECT_EQ(posix::rename(a.c_str(), b.c_str()), 0);
    done.store(true);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(done.load()) << "the rename did not wait for the epoch in flight";
  EXPECT_TRUE(exists(a));
  posix::detail::hold_order_thread_for_testing(false);
  renamer.join();
  EXPECT_TRUE(exists(b));
  EXPECT_FALSE(exists(a));
  ASSERT_EQ(posix::close(fd), 0);
}

// mkdir and symlink of a name that exists change nothing: their EEXIST comes at once, without
// waiting for an epoch in flight (`mkdir -p` makes every directory on its way, most existing).
TEST_F(OrderNames, AMkdirOfANameThatExistsDoesNotWaitForTheEpochs) {
  posix::detail::Settings s = settings(posix::FsyncMode::order);
  s.fsync_inline = posix::detail::InlineEpochs::never;  // the fsync below leaves its epoch in flight
  s.fsync_max_delay_ms = 600'000;                       // and does not wait for it
  restart(s);
  const std::string data = file("data"), there = file("there");
  ASSERT_EQ(::mkdir(there.c_str(), 0755), 0);
  const int fd = posix::open(data.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(posix::sync_now(), 0);
  posix::detail::hold_order_thread_for_testing(true);
  ASSERT_EQ(posix::pwrite(fd, "w", 1, 0), 1);
  ASSERT_EQ(posix::fsync(fd), 0);  // returns at once; its epoch waits for the held thread
  std::atomic<int> done{0};
  std::thread maker([&] {
    errno = 0;
    EXPECT_EQ(posix::mkdir(there.c_str(), 0755), -1);
    EXPECT_EQ(errno, EEXIST);
    errno = 0;
    EXPECT_EQ(posix::symlink("x", data.c_str()), -1);
    EXPECT_EQ(errno, EEXIST);
    done.store(1);
    EXPECT_EQ(posix::mkdir(file("new").c_str(), 0755), 0);  // a new name waits for the epoch
    done.store(2);
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (done.load() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(done.load(), 1) << "mkdir or symlink of an existing name waited for the epoch in flight";
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(done.load(), 1) << "the mkdir of a new name did not wait for the epoch in flight";
  posix::detail::hold_order_thread_for_testing(false);
  maker.join();
  EXPECT_TRUE(exists(file("new")));
  ASSERT_EQ(posix::close(fd), 0);
}

// The errors promise for names: a directory sync of an epoch that fails is returned by the next
// fsync, close or sync_now, and the next epoch syncs the directory again (its success is real);
// a file system that cannot sync a directory at all (EINVAL) fails no epoch.
TEST_F(OrderNames, AFailedDirectorySyncIsReturnedAndTriedAgain) {
  make_file(file("a"), 10, 9);
  ASSERT_EQ(posix::sync_now(), 0);
  posix::detail::fail_directory_syncs_for_testing(1, EIO);
  ASSERT_EQ(posix::rename(file("a").c_str(), file("b").c_str()), 0);
  errno = 0;
  EXPECT_EQ(posix::sync_now(), -1);
  EXPECT_EQ(errno, EIO);
  const std::uint64_t before = dir_syncs();
  EXPECT_EQ(posix::sync_now(), 0) << std::strerror(errno);
  EXPECT_EQ(dir_syncs(), before + 1) << "the directory whose sync failed was not synced again";
  posix::detail::fail_directory_syncs_for_testing(1, EINVAL);
  ASSERT_EQ(posix::rename(file("b").c_str(), file("c").c_str()), 0);
  EXPECT_EQ(posix::sync_now(), 0) << "a file system without directory syncs failed the epoch";
  EXPECT_EQ(posix::sync_now(), 0);
}

TEST_F(OrderNames, AFailedCallReturnsTheKernelsErrorAndSyncsNothing) {
  make_file(file("routed"), 10, 5);  // the layer in order mode from its first routed file
  ASSERT_EQ(posix::sync_now(), 0);
  const std::uint64_t before = dir_syncs();
  errno = 0;
  EXPECT_EQ(posix::rename(file("missing").c_str(), file("other").c_str()), -1);
  EXPECT_EQ(errno, ENOENT);
  errno = 0;
  EXPECT_EQ(posix::unlink(file("missing").c_str()), -1);
  EXPECT_EQ(errno, ENOENT);
  errno = 0;
  EXPECT_EQ(posix::link(file("missing").c_str(), file("other").c_str()), -1);
  EXPECT_EQ(errno, ENOENT);
  ASSERT_EQ(posix::sync_now(), 0);
  EXPECT_EQ(dir_syncs(), before);
}

TEST_F(OrderNames, UnderFullTheyAreThePlainCalls) {
  restart(settings(posix::FsyncMode::full));
  const std::string a = file("a"), b = file("b");
  make_file(a, 500, 3);
  const std::uint64_t before = dir_syncs();
  ASSERT_EQ(posix::rename(a.c_str(), b.c_str()), 0);
  ASSERT_EQ(posix::unlink(b.c_str()), 0);
  ASSERT_EQ(posix::mkdir(file("d").c_str(), 0755), 0);
  ASSERT_EQ(posix::symlink("d", file("l").c_str()), 0);
  ASSERT_EQ(posix::rmdir(file("d").c_str()), 0);
  ASSERT_EQ(posix::sync_now(), 0);
  EXPECT_EQ(dir_syncs(), before);
  EXPECT_FALSE(exists(file("d")));
  EXPECT_TRUE(exists(file("l")));
  EXPECT_FALSE(exists(a));
  EXPECT_FALSE(exists(b));
}

// An untar-like epoch: names made in hundreds of directories before the next fsync. Past 64
// directories one descriptor per file system stands for the rest, synced whole (syncfs).
TEST_F(OrderNames, ManyDirectoriesInOneEpochHoldFewDescriptors) {
  if (open_descriptor_count() == 0) GTEST_SKIP() << "/proc/self/fd is not readable here: descriptors cannot be counted";
  constexpr int kDirs = 200;
  make_file(file("routed"), 10, 4);  // the layer in order mode from its first routed file
  ASSERT_EQ(posix::sync_now(), 0);
  std::vector<std::string> dirs;
  for (int i = 0; i < kDirs; ++i) {
    dirs.push_back(file("d" + std::to_string(i)));
    ASSERT_EQ(::mkdir(dirs.back().c_str(), 0755), 0);
    const int fd = ::open((dirs.back() + "/f").c_str(), O_WRONLY | O_CREAT, 0644);  // not through the layer
    ASSERT_GE(fd, 0);
    ::close(fd);
  }
  const std::size_t before = open_descriptor_count();
  const std::uint64_t syncs = dir_syncs(), whole = posix::detail::kernel_syncfs_for_testing();
  for (int i = 0; i < kDirs; ++i)
    ASSERT_EQ(posix::rename((dirs[i] + "/f").c_str(), (dirs[i] + "/g").c_str()), 0) << dirs[i];
  EXPECT_LE(open_descriptor_count(), before + 64u + 2u) << "a descriptor held per directory past the bound";
  ASSERT_EQ(posix::sync_now(), 0);
  EXPECT_EQ(posix::detail::kernel_syncfs_for_testing(), whole + 1) << "the file system of the many directories, once";
  EXPECT_LE(dir_syncs() - syncs, 64u);
  EXPECT_LE(open_descriptor_count(), before) << "the durable epoch did not let go of the directories";
  for (const std::string& d : dirs) EXPECT_TRUE(exists(d + "/g")) << d;
}

}  // namespace
}  // namespace tai::test
