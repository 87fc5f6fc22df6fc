// Write-through (Settings::sync_through_bytes, TAI_SYNC_THROUGH): a file synced after little
// data goes straight to the kernel, and back to the cache when much is written between syncs.
// Every test checks what the kernel has (a plain ::open/::pread), what the layer reads back,
// and, through the recording engine, that the sync which moved a file to write-through had
// written every cached byte back and synced it before the file's writes started to bypass the
// cache.
#include <memory>
#include <stdexcept>
#include <thread>

#include "engines/recording/recording_engine.hpp"
#include "posix_layer/support.hpp"
#include "posix_layer/through_settings.hpp"

namespace tai::test {
namespace {

constexpr std::uint64_t kThrough = 64 * 1024;

class Through : public LayerTest {
 protected:
  void SetUp() override { restart(settings(kThrough)); }

  posix::detail::Settings settings(std::uint64_t through) { return through_settings(through, recording_); }
  // The recording engine is the controller's, made at the first file that goes to the cache:
  // made here if no file has yet (the requests counted from then on).
  engines::RecordingEngine& log() {
    if (*recording_ == nullptr) (void)posix::detail::controller();
    return **recording_;
  }

  std::string read_back(int fd, std::size_t n, std::uint64_t at) {
    std::string got(n, '\0');
    const ssize_t r = posix::pread(fd, got.data(), n, static_cast<off_t>(at));
    if (r < 0) return "<pread failed: " + std::string(std::strerror(errno)) + ">";
    got.resize(static_cast<std::size_t>(r));
    return got;
  }

 private:
  std::shared_ptr<engines::RecordingEngine*> recording_;
};

// The requests the engine was handed (the tests that read them have one file open).
std::vector<engines::RecordEntry> requests_of(const engines::RecordingEngine& log) {
  std::vector<engines::RecordEntry> out;
  for (const auto& e : log.snapshot())
    if (e.kind == engines::RecordEntry::Kind::request) out.push_back(e);
  return out;
}

TEST_F(Through, ASmallSyncMovesTheFileToTheKernelAfterMakingTheCacheDurable) {
  const std::string path = file("small.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  const std::string a = pattern(3000, 1), b = pattern(2000, 2);
  ASSERT_EQ(posix::pwrite(fd, a.data(), a.size(), 0), static_cast<ssize_t>(a.size()));
  ASSERT_EQ(posix::pwrite(fd, b.data(), b.size(), 5000), static_cast<ssize_t>(b.size()));
  EXPECT_EQ(kernel_contents(path), "") << "a write before the first sync is cached";
  ASSERT_EQ(posix::fsync(fd), 0) << std::strerror(errno);
  std::string want = a + std::string(2000, '\0') + b;
  EXPECT_TRUE(kernel_contents(path) == want);

  // What the engine did for that fsync: every write of the file completed before the sync was
  // handed over, and the sync completed without error.
  const auto reqs = requests_of(log());
  std::uint64_t last_write_done = 0, sync_submitted = 0, written = 0;
  bool synced_ok = false;
  for (const auto& e : reqs) {
    if (e.op == Op::write) {
      ASSERT_TRUE(e.complete_ok()) << e.to_string();
      last_write_done = std::max(last_write_done, e.complete_seq);
      written += e.length;
    } else if (e.op == Op::fsync || e.op == Op::fdatasync) {
      sync_submitted = e.submit_seq;
      synced_ok = e.complete_ok();
    }
  }
  EXPECT_EQ(written, a.size() + b.size());
  ASSERT_NE(sync_submitted, 0u) << "the fsync reached the engine";
  EXPECT_TRUE(synced_ok);
  EXPECT_LT(last_write_done, sync_submitted);
  const std::size_t engine_requests = log().size();

  // From now on the kernel has each write as it returns; the engine sees none of them.
  const std::string c = pattern(1500, 3);
  ASSERT_EQ(posix::pwrite(fd, c.data(), c.size(), 1000), static_cast<ssize_t>(c.size()));
  want.replace(1000, c.size(), c);
  EXPECT_TRUE(kernel_contents(path) == want) << "a write after a small sync goes through";
  EXPECT_EQ(read_back(fd, want.size(), 0), want);
  ASSERT_EQ(posix::fdatasync(fd), 0) << std::strerror(errno);
  EXPECT_EQ(log().size(), engine_requests) << "write-through bypasses the engine";
  struct stat st {};
  ASSERT_EQ(posix::fstat(fd, &st), 0);
  EXPECT_EQ(static_cast<std::size_t>(st.st_size), want.size());
  ASSERT_EQ(posix::close(fd), 0);
  EXPECT_TRUE(kernel_contents(path) == want);
}

TEST_F(Through, ManyBytesBetweenSyncsGoBackToTheCacheWithoutStaleBlocks) {
  const std::string path = file("back.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  // Cached, then synced: the cache keeps a clean copy of these bytes.
  std::string want = pattern(4096, 4);
  ASSERT_EQ(write_all(fd, want), 4096);
  ASSERT_EQ(read_back(fd, 4096, 0), want);
  ASSERT_EQ(posix::fsync(fd), 0);
  // Write-through over them: the cache's copy is stale now.
  const std::string over = pattern(4096, 5);
  ASSERT_EQ(posix::pwrite(fd, over.data(), over.size(), 0), 4096);
  want = over;
  EXPECT_TRUE(kernel_contents(path) == want);
  // More than the threshold before the next sync: back to the cache, at the write that
  // crosses it.
  std::uint64_t at = 4096;
  for (int i = 0; i < 20; ++i) {
    const std::string p = pattern(8192, 10 + static_cast<unsigned>(i));
    ASSERT_EQ(posix::pwrite(fd, p.data(), p.size(), static_cast<off_t>(at)), 8192);
    want += p;
    at += p.size();
  }
  EXPECT_LT(kernel_contents(path).size(), want.size()) << "the writes past the threshold are cached";
  // The layer reads what was written through, not the cache's stale copy of it.
  EXPECT_EQ(read_back(fd, want.size(), 0), want);
  ASSERT_EQ(posix::fsync(fd), 0);
  EXPECT_TRUE(kernel_contents(path) == want);
  // That sync covered more than the threshold: the file stays cached.
  const std::string tail = pattern(100, 40);
  ASSERT_EQ(posix::pwrite(fd, tail.data(), tail.size(), static_cast<off_t>(at)), 100);
  EXPECT_TRUE(kernel_contents(path) == want) << "cached again";
  want += tail;
  EXPECT_EQ(read_back(fd, want.size(), 0), want);
  ASSERT_EQ(posix::close(fd), 0);
  EXPECT_TRUE(kernel_contents(path) == want);
}

TEST_F(Through, AFileMadeAgainUnderTheSameNameStartsThrough) {
  const std::string journal = file("db-journal");
  for (int life = 0; life < 3; ++life) {
    const int fd = posix::open(journal.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    const std::string p = pattern(1000, 20 + static_cast<unsigned>(life));
    ASSERT_EQ(write_all(fd, p), 1000);
    if (life == 0) {
      EXPECT_EQ(kernel_contents(journal), "") << "a new name starts cached";
    } else {
      EXPECT_TRUE(kernel_contents(journal) == p) << "life " << life << ": the name was synced small before";
    }
    ASSERT_EQ(posix::fsync(fd), 0);
    EXPECT_TRUE(kernel_contents(journal) == p);
    ASSERT_EQ(posix::close(fd), 0);
    ASSERT_EQ(::unlink(journal.c_str()), 0);
  }
  const std::string other = file("other");
  const int fd = posix::open(other.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write_all(fd, "cached"), 6);
  EXPECT_EQ(kernel_contents(other), "") << "another name starts cached";
  ASSERT_EQ(posix::close(fd), 0);
  EXPECT_EQ(kernel_contents(other), "cached");
}

TEST_F(Through, AFileStartsThroughAndALargeOutputGoesBackToTheCache) {
  const std::string old = file("old.dat");
  {
    const int k = ::open(old.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(k, 0);
    ASSERT_EQ(::write(k, "0123456789", 10), 10);
    ::close(k);
  }
  // With the setting off (the fixture's), a file starts cached: its first write stays there.
  int fo = posix::open(old.c_str(), O_WRONLY, 0644);
  ASSERT_GE(fo, 0);
  ASSERT_EQ(posix::pwrite(fo, "abc", 3, 0), 3);
  EXPECT_EQ(kernel_contents(old), "0123456789") << "with files_start_through off a file starts cached";
  ASSERT_EQ(posix::close(fo), 0);
  EXPECT_EQ(kernel_contents(old), "abc3456789");

  posix::detail::Settings s = settings(kThrough);
  s.files_start_through = true;  // the default
  restart(s);
  // A file with bytes in it, opened without truncation (a log appended to, a file patched in
  // place), starts write-through as well: its writes are the kernel's as they return.
  fo = posix::open(old.c_str(), O_WRONLY | O_APPEND, 0644);
  ASSERT_GE(fo, 0);
  ASSERT_EQ(write_all(fo, "+more"), 5);
  EXPECT_EQ(kernel_contents(old), "abc3456789+more") << "a file with bytes in it starts write-through";
  ASSERT_EQ(posix::close(fo), 0);
  // A new (empty) file: each write is the kernel's as it returns, a sync reaches no engine.
  const std::size_t before = log().size();
  const std::string path = file("new.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  const std::string a = pattern(5000, 11);
  ASSERT_EQ(write_all(fd, a), 5000);
  EXPECT_TRUE(kernel_contents(path) == a) << "an empty file starts write-through";
  // Its fsync is the kernel's, made by the layer on this thread (durability without an engine).
  const std::uint64_t syncs = posix::detail::kernel_syncs_for_testing();
  ASSERT_EQ(posix::fsync(fd), 0);
  EXPECT_EQ(posix::detail::kernel_syncs_for_testing(), syncs + 1) << "the fsync did not reach the kernel";
  ASSERT_EQ(posix::fdatasync(fd), 0);
  EXPECT_EQ(posix::detail::kernel_syncs_for_testing(), syncs + 2) << "the fdatasync did not reach the kernel";
  EXPECT_EQ(log().size(), before) << "the engine saw a request of a write-through file";

  // More than kThrough bytes without a sync: back to the cache, and the bytes past that point
  // reach the kernel at the next sync, every one of them.
  std::string all = a;
  for (unsigned i = 0; i < 4; ++i) {
    const std::string p = pattern(kThrough / 2, 12 + i);
    ASSERT_EQ(write_all(fd, p), static_cast<ssize_t>(p.size()));
    all += p;
  }
  const std::string last = pattern(3000, 20);
  ASSERT_EQ(write_all(fd, last), 3000);
  all += last;
  EXPECT_LT(kernel_contents(path).size(), all.size()) << "the last write should be in the cache";
  EXPECT_TRUE(read_back(fd, all.size(), 0) == all);
  ASSERT_EQ(posix::fsync(fd), 0);
  EXPECT_TRUE(kernel_contents(path) == all);
  EXPECT_GT(log().size(), before) << "the file went back to the cache and its engine";
  ASSERT_EQ(posix::close(fd), 0);
  EXPECT_TRUE(kernel_contents(path) == all);
}

// A process whose routed files all stay write-through (git's objects and refs, a shell
// appending a line) makes no controller: no workers, no engines, no keeper. The first file that
// goes back to the cache makes it, under its inode's lock, and loses no byte on the way.
TEST_F(Through, FilesThatStayThroughMakeNoControllerAndTheFirstCachedFileMakesIt) {
  posix::detail::Settings s = settings(kThrough);
  s.files_start_through = true;  // the default
  restart(s);
  ASSERT_FALSE(posix::detail::controller_made_for_testing()) << "a restart leaves no controller";
  std::vector<std::string> wanted;
  for (unsigned i = 0; i < 4; ++i) {
    const std::string path = file("small" + std::to_string(i) + ".dat");
    const int fd = posix::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    wanted.push_back(pattern(700 + i, 30 + i));
    ASSERT_EQ(write_all(fd, wanted.back()), static_cast<ssize_t>(wanted.back().size()));
    ASSERT_EQ(posix::fsync(fd), 0);
    ASSERT_EQ(posix::close(fd), 0);
  }
  // Appends through a descriptor kept open, and the process's sync_now, the same.
  const std::string lines = file("lines.log");
  const int fl = posix::open(lines.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  ASSERT_GE(fl, 0);
  ASSERT_EQ(write_all(fl, "one\n"), 4);
  ASSERT_EQ(write_all(fl, "two\n"), 4);
  ASSERT_EQ(posix::sync_now(), 0);
  EXPECT_EQ(kernel_contents(lines), "one\ntwo\n");
  for (unsigned i = 0; i < 4; ++i)
    EXPECT_TRUE(kernel_contents(file("small" + std::to_string(i) + ".dat")) == wanted[i]) << i;
  EXPECT_FALSE(posix::detail::controller_made_for_testing())
      << "a controller was made although every routed file stayed write-through";

  // More than kThrough bytes without a sync: the file leaves write-through, which makes the
  // controller; what the kernel had and what the cache takes from then on are one file.
  const std::string big = file("big.dat");
  const int fd = posix::open(big.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  std::string all;
  for (unsigned i = 0; i < 4; ++i) {
    const std::string p = pattern(kThrough / 2 + 17, 40 + i);
    ASSERT_EQ(write_all(fd, p), static_cast<ssize_t>(p.size()));
    all += p;
  }
  ASSERT_TRUE(posix::detail::controller_made_for_testing()) << "the cached file made no controller";
  EXPECT_LT(kernel_contents(big).size(), all.size()) << "the last writes should be in the cache";
  EXPECT_TRUE(read_back(fd, all.size(), 0) == all);
  ASSERT_EQ(posix::fsync(fd), 0);
  EXPECT_TRUE(kernel_contents(big) == all);
  EXPECT_GT(log().size(), 0u) << "the file went to the engine";
  // The descriptor kept open from before the controller was made still appends where it should.
  ASSERT_EQ(write_all(fl, "three\n"), 6);
  ASSERT_EQ(posix::close(fl), 0);
  EXPECT_EQ(kernel_contents(lines), "one\ntwo\nthree\n");
  ASSERT_EQ(posix::close(fd), 0);
  EXPECT_TRUE(kernel_contents(big) == all);
}

// A controller that cannot be made (here its setup throws) when a write-through file would go
// back to the cache: the file stays write-through, served by the layer at the offsets it keeps,
// every byte in the kernel; and the layer does not try again at every write.
TEST_F(Through, AFileStaysThroughWhenTheControllerCannotBeMade) {
  posix::detail::Settings s = settings(kThrough);
  s.files_start_through = true;
  s.setup = [](Controller&) { throw std::runtime_error("a setup that fails, for the test"); };
  restart(s);
  const std::string path = file("stays.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(posix::routed(fd));
  std::string all;
  for (unsigned i = 0; i < 6; ++i) {  // past kThrough without a sync: it would leave write-through
    const std::string p = pattern(kThrough / 2 + 5, 50 + i);
    ASSERT_EQ(write_all(fd, p), static_cast<ssize_t>(p.size()));
    all += p;
    EXPECT_TRUE(kernel_contents(path) == all) << "write " << i << " is not the kernel's";
  }
  EXPECT_FALSE(posix::detail::controller_made_for_testing());
  EXPECT_TRUE(posix::routed(fd)) << "the routed file was dropped";
  EXPECT_EQ(posix::lseek(fd, 0, SEEK_CUR), static_cast<off_t>(all.size()));
  EXPECT_TRUE(read_back(fd, all.size(), 0) == all);
  ASSERT_EQ(posix::fsync(fd), 0);
  ASSERT_EQ(posix::close(fd), 0);
  EXPECT_TRUE(kernel_contents(path) == all);
  // Routing goes on for files that start write-through.
  const int f2 = posix::open(file("second.dat").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(f2, 0);
  EXPECT_TRUE(posix::routed(f2));
  ASSERT_EQ(write_all(f2, "second"), 6);
  ASSERT_EQ(posix::close(f2), 0);
  EXPECT_EQ(kernel_contents(file("second.dat")), "second");
}

TEST_F(Through, AReceiptOrABarrierTakesTheFileBackToTheController) {
  const std::string path = file("receipt.dat");
  const int fd = posix::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write_all(fd, "first"), 5);
  ASSERT_EQ(posix::fsync(fd), 0);
  ASSERT_EQ(write_all(fd, "second"), 6);
  EXPECT_EQ(kernel_contents(path), "firstsecond");
  Receipt r = posix::fsync_async(fd);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(write_all(fd, "third"), 5);
  EXPECT_EQ(kernel_contents(path), "firstsecond") << "cached after the receipt's sync";
  ASSERT_EQ(posix::barrier(fd), 0);
  ASSERT_EQ(posix::wait(fd), 0);
  EXPECT_EQ(kernel_contents(path), "firstsecondthird");
  ASSERT_EQ(posix::close(fd), 0);
}

TEST_F(Through, ThreadsTakingTurnsOnAThroughFile) {
  const std::string path = file("threads.dat");
  const int fd = posix::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write_all(fd, "x"), 1);
  ASSERT_EQ(posix::fsync(fd), 0);
  const int rounds = 50;  // 100 syncs to the device: bounded time on any build
  std::thread t([&] {
    for (int i = 0; i < rounds; ++i) {
      ASSERT_EQ(posix::pwrite(fd, "ab", 2, 1 + 4 * i), 2);
      ASSERT_EQ(posix::fdatasync(fd), 0);
    }
  });
  for (int i = 0; i < rounds; ++i) {
    ASSERT_EQ(posix::pwrite(fd, "cd", 2, 3 + 4 * i), 2);
    ASSERT_EQ(posix::fsync(fd), 0);
  }
  t.join();
  std::string want = "x";
  for (int i = 0; i < rounds; ++i) want += "abcd";
  EXPECT_EQ(read_back(fd, want.size(), 0), want);
  EXPECT_EQ(kernel_contents(path), want);
  ASSERT_EQ(posix::close(fd), 0);
}

TEST_F(Through, OffKeepsEveryFileCached) {
  restart(settings(0));
  const std::string path = file("off.dat");
  const int fd = posix::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write_all(fd, "one"), 3);
  ASSERT_EQ(posix::fsync(fd), 0);
  ASSERT_EQ(write_all(fd, "two"), 3);
  EXPECT_EQ(kernel_contents(path), "one") << "TAI_SYNC_THROUGH=0: still cached after a small sync";
  ASSERT_EQ(posix::fsync(fd), 0);
  EXPECT_EQ(kernel_contents(path), "onetwo");
  ASSERT_EQ(posix::close(fd), 0);
}

}  // namespace
}  // namespace tai::test
