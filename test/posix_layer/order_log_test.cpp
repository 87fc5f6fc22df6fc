// The order mode's log of epochs (src/posix/order_log.hpp): the format and its parser on whole,
// torn, voided and damaged logs; the recovery of a dead process's log into real files; and the
// layer writing its log on a real directory (fewer device syncs than epochs, the files right
// after every close, the log gone at shutdown). The crash states with the log are in
// fsync_order_crash_test.cpp.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "posix_layer/support.hpp"
#include "src/posix/crc32c.hpp"
#include "src/posix/order_log.hpp"

namespace tai::test {
namespace {

using posix::detail::OrderLogWriteView;

void write_file(const std::string& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  ::close(fd);
}

struct Rec {
  std::string path;
  std::uint64_t dev, ino, pos;
  std::string bytes;
};

// A log as the order thread writes it: batches at multiples of `align` (zeros between).
std::string log_of(std::uint64_t gen, const std::vector<std::vector<Rec>>& batches, std::uint64_t batch_gen = 0,
                   std::uint32_t align = 1) {
  std::string out = posix::detail::encode_order_log_header(gen, align);
  out.resize(posix::detail::kOrderLogHeaderBytes, '\0');
  std::uint64_t epoch = 1;
  for (const auto& b : batches) {
    std::vector<OrderLogWriteView> views;
    for (const auto& r : b) views.push_back({r.dev, r.ino, r.pos, &r.path, r.bytes.data(), r.bytes.size()});
    const std::size_t at = out.size();
    const std::size_t bytes = posix::detail::order_log_batch_bytes(views);
    out.resize(at + posix::detail::order_log_batch_span(bytes, align), '\0');
    posix::detail::encode_order_log_batch(batch_gen ? batch_gen : gen, epoch, epoch + 1, views, &out[at]);
    epoch += 2;
  }
  return out;
}

posix::detail::ParsedOrderLog parse(const std::string& s) {
  return posix::detail::parse_order_log(reinterpret_cast<const unsigned char*>(s.data()), s.size());
}

TEST(OrderLog, BatchesRoundTrip) {
  const std::vector<std::vector<Rec>> batches = {
      {{"/a/f", 1, 2, 0, "hello"}, {"/a/g", 1, 3, 4096, std::string(5000, 'x')}},
      {{"/a/f", 1, 2, 5, ""}},
  };
  const auto p = parse(log_of(7, batches));
  ASSERT_TRUE(p.header_ok);
  EXPECT_EQ(p.generation, 7u);
  ASSERT_EQ(p.batches.size(), 2u);
  EXPECT_EQ(p.batches[0].first_epoch, 1u);
  EXPECT_EQ(p.batches[0].last_epoch, 2u);
  ASSERT_EQ(p.batches[0].writes.size(), 2u);
  EXPECT_EQ(p.batches[0].writes[1].path, "/a/g");
  EXPECT_EQ(p.batches[0].writes[1].ino, 3u);
  EXPECT_EQ(p.batches[0].writes[1].pos, 4096u);
  EXPECT_EQ(std::string(p.batches[0].writes[1].bytes.begin(), p.batches[0].writes[1].bytes.end()), std::string(5000, 'x'));
  EXPECT_TRUE(p.batches[1].writes[0].bytes.empty());
}

TEST(OrderLog, ATornBatchEndsTheLogAndEveryCutParses) {
  const std::string whole = log_of(3, {{{"/f", 1, 1, 0, "one"}}, {{"/f", 1, 1, 3, std::string(700, 't')}}});
  const std::size_t first_end = parse(whole).batches.size() == 2 ? whole.size() - (56 + 40 + 2 + 700) : 0;
  ASSERT_GT(first_end, 0u);
  // Every prefix: the batches wholly inside it, never a partial one.
  for (std::size_t cut = 0; cut <= whole.size(); ++cut) {
    const auto p = parse(whole.substr(0, cut));
    const std::size_t expect = cut < posix::detail::kOrderLogHeaderBytes ? 0 : cut < first_end ? 0 : cut < whole.size() ? 1 : 2;
    ASSERT_EQ(p.batches.size(), expect) << "cut at " << cut;
  }
  // A byte changed anywhere in the second batch voids it (and only it).
  std::mt19937_64 rng(5);
  for (int i = 0; i < 200; ++i) {
    std::string damaged = whole;
    const std::size_t at = first_end + rng() % (whole.size() - first_end);
    damaged[at] = static_cast<char>(damaged[at] ^ (1 + rng() % 255));
    EXPECT_EQ(parse(damaged).batches.size(), 1u) << "byte " << at;
  }
}

// The log written with O_DIRECT: every batch at a multiple of 4096. The same batches come back,
// and a cut anywhere gives the batches wholly before it (the zeros after a batch belong to it).
TEST(OrderLog, AlignedBatchesRoundTripAndEveryCutParses) {
  const std::vector<std::vector<Rec>> batches = {
      {{"/a/f", 1, 2, 0, "hello"}},
      {{"/a/g", 1, 3, 4096, std::string(5000, 'x')}, {"/a/f", 1, 2, 5, "!"}},
      {{"/a/f", 1, 2, 6, std::string(4096 - 56 - 40 - 4, 'y')}},  // exactly one block
  };
  const std::string whole = log_of(2, batches, 0, 4096);
  ASSERT_EQ(whole.size() % 4096, 0u);
  const auto p = parse(whole);
  ASSERT_TRUE(p.header_ok);
  EXPECT_EQ(p.align, 4096u);
  ASSERT_EQ(p.batches.size(), 3u);
  EXPECT_EQ(p.batches[1].writes.size(), 2u);
  EXPECT_EQ(std::string(p.batches[1].writes[0].bytes.begin(), p.batches[1].writes[0].bytes.end()), std::string(5000, 'x'));
  EXPECT_EQ(p.batches[2].writes[0].bytes.size(), 4096u - 56 - 40 - 4);
  // Where each batch starts: 4096, 8192, then two blocks later (the second batch is 5,145 bytes).
  const std::size_t starts[] = {4096, 8192, 16384, whole.size()};
  ASSERT_EQ(whole.size(), 20480u);
  for (std::size_t cut = posix::detail::kOrderLogHeaderBytes; cut <= whole.size(); cut += 97) {
    std::size_t expect = 0;
    for (std::size_t i = 0; i < 3; ++i) {
      const std::size_t used = i == 0 ? 56 + 40 + 4 + 5 : i == 1 ? 56 + 2 * 40 + 8 + 5000 + 1 : 4096;
      if (cut >= starts[i] + used) expect = i + 1;
    }
    EXPECT_EQ(parse(whole.substr(0, cut)).batches.size(), expect) << "cut at " << cut;
  }
}

// A log of the format before alignment (version 1: batches back to back, no alignment in the
// header) is still replayed: a dead process may have left one.
TEST(OrderLog, AVersionOneLogStillParses) {
  std::string v1 = log_of(5, {{{"/f", 1, 1, 0, "one"}}, {{"/f", 1, 1, 3, "two"}}});
  // The version 1 header: magic, version, generation, CRC-32C of those 20 bytes.
  std::string h(v1, 0, 20);
  const std::uint32_t version = 1;
  std::memcpy(&h[8], &version, 4);
  const std::uint32_t crc = posix::detail::crc32c(h.data(), h.size());
  h.append(reinterpret_cast<const char*>(&crc), 4);
  v1.replace(0, 28, h + std::string(4, '\0'));
  const auto p = parse(v1);
  ASSERT_TRUE(p.header_ok);
  EXPECT_EQ(p.generation, 5u);
  EXPECT_EQ(p.align, 1u);
  ASSERT_EQ(p.batches.size(), 2u);
  EXPECT_EQ(std::string(p.batches[1].writes[0].bytes.begin(), p.batches[1].writes[0].bytes.end()), "two");
  // A header with an alignment that is not a power of two is not a log.
  std::string bad = log_of(5, {}, 0, 4096);
  const std::uint32_t odd = 3000;
  std::memcpy(&bad[20], &odd, 4);
  const std::uint32_t bad_crc = posix::detail::crc32c(bad.data(), 24);
  std::memcpy(&bad[24], &bad_crc, 4);
  EXPECT_FALSE(parse(bad).header_ok);
}

TEST(OrderLog, BatchesOfAnotherGenerationAreVoid) {
  // A checkpoint raised the header's generation: what follows it from before is stale.
  EXPECT_TRUE(parse(log_of(4, {{{"/f", 1, 1, 0, "old"}}}, 3)).batches.empty());
  std::string torn_header = log_of(4, {{{"/f", 1, 1, 0, "x"}}});
  torn_header[13] ^= 1;
  const auto p = parse(torn_header);
  EXPECT_FALSE(p.header_ok);
  EXPECT_TRUE(p.batches.empty());
}

TEST(OrderLog, RandomBytesNeverParseAsBatches) {
  std::mt19937_64 rng(9);
  const std::string header = log_of(1, {});
  for (int i = 0; i < 300; ++i) {
    std::string s = header;
    const std::size_t n = rng() % 3000;
    for (std::size_t k = 0; k < n; ++k) s.push_back(static_cast<char>(rng()));
    EXPECT_TRUE(parse(s).batches.empty());
  }
}

class OrderLogRecovery : public LayerTest {};

// The order mode with its log in `dir`; no write-back started by the layer; the fsyncs'
// back-pressure (the queue at the thread's pace past the delay) would wait for a held thread:
// a delay far above what the tests' epochs take.
// Holds the order thread, then appends `epochs` records to `fd` (whose bytes are `want`), each
// followed by fdatasync: that many epochs queued behind the held thread. It stays held.
void hold_and_append(int fd, std::string& want, int epochs) {
  posix::detail::hold_order_thread_for_testing(true);
  for (int i = 0; i < epochs; ++i) {
    const std::string rec = "record " + std::to_string(i) + "\n";
    ASSERT_EQ(posix::pwrite(fd, rec.data(), rec.size(), static_cast<off_t>(want.size())), static_cast<ssize_t>(rec.size()));
    want += rec;
    ASSERT_EQ(posix::fdatasync(fd), 0);
  }
}

posix::detail::Settings order_with_log(const std::string& dir) {
  posix::detail::Settings s = layer_settings();
  s.fsync_mode = posix::FsyncMode::order;
  s.fsync_log_dir = dir;
  s.start_writeback_bytes = 0;
  s.fsync_max_delay_ms = 600'000;
  return s;
}

TEST_F(OrderLogRecovery, ADeadProcessesLogIsReplayedInOrderAndRemoved) {
  const std::string dir = file("");
  const std::string data = file("data"), other = file("other");
  write_file(data, std::string(8192, 'a'));
  write_file(other, "keep");
  struct stat st, so;
  ASSERT_EQ(::stat(data.c_str(), &st), 0);
  ASSERT_EQ(::stat(other.c_str(), &so), 0);
  const std::uint64_t dev = st.st_dev, ino = st.st_ino;
  // The second batch overwrites part of the first: order matters. The last write names `other`
  // with a stale inode (the file was made again since): skipped.
  const std::string log = log_of(2, {{{data, dev, ino, 0, std::string(4096, 'b')}, {data, dev, ino, 8192, "tail"}},
                                     {{data, dev, ino, 100, "second"}, {other, so.st_dev, so.st_ino + 1000, 0, "XXXX"}}});
  const std::string log_path = dir + "/tai-order.1.2.3.log";
  write_file(log_path, log + std::string(300, '\x7f'));  // and a torn tail
  const posix::detail::OrderLogRecovery rec = posix::detail::recover_order_logs(dir);
  EXPECT_EQ(rec.logs, 1u);
  EXPECT_EQ(rec.batches, 2u);
  EXPECT_EQ(rec.writes, 3u);
  EXPECT_EQ(rec.skipped, 1u);
  EXPECT_EQ(rec.error, 0);
  std::string expect = std::string(4096, 'b') + std::string(4096, 'a') + "tail";
  expect.replace(100, 6, "second");
  EXPECT_EQ(kernel_contents(data), expect);
  EXPECT_EQ(kernel_contents(other), "keep");
  EXPECT_NE(::access(log_path.c_str(), F_OK), 0) << "the replayed log is removed";
}

TEST_F(OrderLogRecovery, ALiveProcessesLogIsLeftAlone) {
  const std::string dir = file("");
  const std::string data = file("data");
  write_file(data, "aaaa");
  struct stat st;
  ASSERT_EQ(::stat(data.c_str(), &st), 0);
  const std::string log_path = dir + "/tai-order.4.5.6.log";
  write_file(log_path, log_of(1, {{{data, static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino), 0, "bbbb"}}}));
  const int holder = ::open(log_path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(holder, 0);
  ASSERT_EQ(::flock(holder, LOCK_EX), 0);
  EXPECT_EQ(posix::detail::recover_order_logs(dir).logs, 0u);
  EXPECT_EQ(kernel_contents(data), "aaaa");
  ::close(holder);
  EXPECT_EQ(posix::detail::recover_order_logs(dir).logs, 1u);
  EXPECT_EQ(kernel_contents(data), "bbbb");
}

// The layer on a real directory: a program far ahead of the device (the order thread held while
// it makes 40 epochs) has them written with one log batch, the files hold every byte after
// close, and the log is gone after the shutdown.
TEST_F(OrderLogRecovery, TheLayerBatchesQueuedEpochsIntoTheLog) {
  const std::string dir = file("");
  restart(order_with_log(dir));
  const std::string a = file("a"), b = file("b");
  const int fa = posix::open(a.c_str(), O_CREAT | O_RDWR | O_TRUNC | O_CLOEXEC, 0644);
  const int fb = posix::open(b.c_str(), O_CREAT | O_RDWR | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fa, 0);
  ASSERT_GE(fb, 0);
  ASSERT_TRUE(posix::routed(fa));
  const posix::FsyncOrderStats before = posix::fsync_order_stats();
  std::string ea, eb;
  ASSERT_EQ(posix::pwrite(fa, "first", 5, 0), 5);
  ea = "first";
  ASSERT_EQ(posix::fsync(fa), 0);
  ASSERT_EQ(posix::sync_now(), 0);  // the thread's time per epoch measured, the gate open
  posix::detail::hold_order_thread_for_testing(true);
  for (int i = 0; i < 40; ++i) {
    const std::string rec = "record " + std::to_string(i) + "\n";
    const int fd = i % 3 == 0 ? fb : fa;
    std::string& e = i % 3 == 0 ? eb : ea;
    ASSERT_EQ(posix::pwrite(fd, rec.data(), rec.size(), static_cast<off_t>(e.size())), static_cast<ssize_t>(rec.size()));
    e += rec;
    ASSERT_EQ(posix::fdatasync(fd), 0);
  }
  posix::detail::hold_order_thread_for_testing(false);
  ASSERT_EQ(posix::close(fa), 0);
  ASSERT_EQ(posix::close(fb), 0);
  const posix::FsyncOrderStats after = posix::fsync_order_stats();
  EXPECT_EQ(kernel_contents(a), ea);
  EXPECT_EQ(kernel_contents(b), eb);
  EXPECT_GE(after.epochs_logged - before.epochs_logged, 2u);
  EXPECT_LT(after.log_batches - before.log_batches, after.epochs_logged - before.epochs_logged)
      << "a batch holds several epochs";
  EXPECT_GE(after.log_checkpoints - before.log_checkpoints, 1u);
  restart(layer_settings());
  EXPECT_EQ(posix::detail::recover_order_logs(dir).logs, 0u) << "the log was removed at shutdown";
}

// A write-through file appended to in many epochs that went to the log in one batch: its held
// writes reach the kernel as one pwritev across the epochs (they are durable together in the
// log), not a system call per epoch (a loop of a write and an fdatasync paid one per iteration,
// and the state's mutex taken per epoch put the program's thread to sleep about once an
// iteration).
TEST_F(OrderLogRecovery, TheHeldWritesOfABatchReachAWriteThroughFileAsOneRun) {
  const std::string dir = file("");
  posix::detail::Settings s = order_with_log(dir);
  s.sync_through_bytes = 1 << 20;  // the layer's default: the file synced after a few bytes is write-through
  restart(s);
  const std::string a = file("a");
  const int fa = posix::open(a.c_str(), O_CREAT | O_RDWR | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fa, 0);
  ASSERT_TRUE(posix::routed(fa));
  std::string want = "first";
  ASSERT_EQ(posix::pwrite(fa, want.data(), want.size(), 0), 5);
  ASSERT_EQ(posix::fsync(fa), 0);
  ASSERT_EQ(posix::sync_now(), 0);
  constexpr int kEpochs = 40;
  hold_and_append(fa, want, kEpochs);
  if (HasFatalFailure()) return;
  const posix::FsyncOrderStats before = posix::fsync_order_stats();
  posix::detail::hold_order_thread_for_testing(false);
  ASSERT_EQ(posix::close(fa), 0);
  const posix::FsyncOrderStats after = posix::fsync_order_stats();
  EXPECT_EQ(kernel_contents(a), want);
  const auto logged = after.epochs_logged - before.epochs_logged;
  const auto batches = after.log_batches - before.log_batches;
  ASSERT_GE(logged, kEpochs / 2u) << "the held epochs went to the log";
  // A batch's run of appends is one system call (a run longer than IOV_MAX would be more).
  ASSERT_GE(after.through_writes - before.through_writes, 1u) << "the file is write-through";
  EXPECT_LE(after.through_writes - before.through_writes, batches + (kEpochs - logged))
      << logged << " epochs logged in " << batches << " batches";
}

// The log goes around the page cache (O_DIRECT) where the directory's file system takes it, its
// batches at multiples of 4096; elsewhere (tmpfs) it is written through the page cache, back to
// back. Either way the files hold every byte after close.
TEST_F(OrderLogRecovery, TheLogIsWrittenWithODirectWhereTheFileSystemAllowsIt) {
  const std::string dir = file("");
  const std::string probe = dir + "/probe";
  const int pfd = ::open(probe.c_str(), O_CREAT | O_WRONLY | O_DIRECT | O_CLOEXEC, 0644);
  const bool direct = pfd >= 0;
  if (pfd >= 0) ::close(pfd);
  ::unlink(probe.c_str());
  restart(order_with_log(dir));
  const std::string a = file("a");
  const int fa = posix::open(a.c_str(), O_CREAT | O_RDWR | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fa, 0);
  std::string want = "first";
  ASSERT_EQ(posix::pwrite(fa, want.data(), want.size(), 0), 5);
  ASSERT_EQ(posix::fsync(fa), 0);
  ASSERT_EQ(posix::sync_now(), 0);
  hold_and_append(fa, want, 20);
  if (HasFatalFailure()) return;
  const posix::FsyncOrderStats before = posix::fsync_order_stats();
  posix::detail::hold_order_thread_for_testing(false);
  // Until the queue is in the log (the log stays open a while after that: it is read meanwhile).
  for (int i = 0; i < 500 && posix::fsync_order_stats().log_batches == before.log_batches; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_GT(posix::fsync_order_stats().log_batches, before.log_batches);
  std::string log_path;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const struct dirent* e = ::readdir(d))
      if (std::string(e->d_name).rfind("tai-order.", 0) == 0) log_path = dir + "/" + e->d_name;
    ::closedir(d);
  }
  ASSERT_FALSE(log_path.empty()) << "the log is in " << dir;
  const std::string bytes = kernel_contents(log_path);
  const auto p = parse(bytes);
  ASSERT_TRUE(p.header_ok);
  EXPECT_EQ(p.align, direct ? 4096u : 1u) << (direct ? "O_DIRECT works here" : "O_DIRECT is refused here");
  if (direct) {
    EXPECT_EQ(bytes.size() % 4096, 0u) << "every batch padded to a block";
  }
  ASSERT_EQ(posix::close(fa), 0);
  EXPECT_EQ(kernel_contents(a), want);
}

// The delay bound with the log: a batch in flight makes all its epochs durable with one sync,
// and the next batch takes every queued epoch with one more. So its time so far counts once,
// not once per queued epoch: 30 small epochs closed while a slow batch is in flight do not
// wait (the direct way's estimate, an epoch's time in flight for each queued epoch, would put
// them past the delay and make them wait for the device).
TEST_F(OrderLogRecovery, ABatchInFlightDoesNotMakeTheQueuedEpochsWait) {
  const std::string dir = file("");
  posix::detail::Settings s = order_with_log(dir);
  s.fsync_max_delay_ms = 5'000;
  restart(s);
  const std::string a = file("a");
  const int fa = posix::open(a.c_str(), O_CREAT | O_RDWR | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fa, 0);
  std::string expect = "first";
  ASSERT_EQ(posix::pwrite(fa, expect.data(), expect.size(), 0), 5);
  ASSERT_EQ(posix::fsync(fa), 0);
  ASSERT_EQ(posix::sync_now(), 0);  // the thread's time per epoch measured, the gate open
  auto append_and_sync = [&](int i) {
    const std::string rec = "r" + std::to_string(i) + ";";
    ASSERT_EQ(posix::pwrite(fa, rec.data(), rec.size(), static_cast<off_t>(expect.size())), static_cast<ssize_t>(rec.size()));
    expect += rec;
    ASSERT_EQ(posix::fdatasync(fa), 0);
  };
  // Queued behind a held thread, then taken as one batch whose write takes 1.5 s.
  posix::detail::delay_order_log_writes_for_testing(1'500);
  posix::detail::hold_order_thread_for_testing(true);
  for (int i = 0; i < 5; ++i) append_and_sync(i);
  const posix::FsyncOrderStats before = posix::fsync_order_stats();
  posix::detail::hold_order_thread_for_testing(false);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // the batch in flight
  const auto started = std::chrono::steady_clock::now();
  for (int i = 5; i < 35; ++i) append_and_sync(i);
  const auto took_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count();
  const posix::FsyncOrderStats during = posix::fsync_order_stats();
  posix::detail::delay_order_log_writes_for_testing(0);
  EXPECT_EQ(during.backpressure, before.backpressure) << "an fsync waited for the batch in flight";
  EXPECT_LT(during.epochs_logged, before.epochs_logged + 35) << "the epochs were durable before they were closed?";
  EXPECT_LT(took_ms, 1'000) << "the fsyncs took as long as the batch in flight";
  ASSERT_EQ(posix::close(fa), 0);
  EXPECT_EQ(kernel_contents(a), expect);
  EXPECT_GE(posix::fsync_order_stats().epochs_logged - before.epochs_logged, 4u);
}

// A log that cannot be made (its directory is a regular file): the order thread says so and goes
// the direct way, one sync per epoch; nothing is lost and close still finds every byte in place.
TEST_F(OrderLogRecovery, ALogThatCannotBeMadeFallsBackToOneSyncPerEpoch) {
  const std::string not_a_dir = file("plain-file");
  write_file(not_a_dir, "x");
  restart(order_with_log(not_a_dir));
  const std::string a = file("a");
  const int fa = posix::open(a.c_str(), O_CREAT | O_RDWR | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fa, 0);
  ASSERT_EQ(posix::pwrite(fa, "first", 5, 0), 5);
  ASSERT_EQ(posix::fsync(fa), 0);
  ASSERT_EQ(posix::sync_now(), 0);
  const posix::FsyncOrderStats before = posix::fsync_order_stats();
  posix::detail::hold_order_thread_for_testing(true);
  std::string expect = "first";
  for (int i = 0; i < 10; ++i) {
    const std::string rec = "r" + std::to_string(i);
    ASSERT_EQ(posix::pwrite(fa, rec.data(), rec.size(), static_cast<off_t>(expect.size())), static_cast<ssize_t>(rec.size()));
    expect += rec;
    ASSERT_EQ(posix::fdatasync(fa), 0);
  }
  posix::detail::hold_order_thread_for_testing(false);
  EXPECT_EQ(posix::close(fa), 0);
  const posix::FsyncOrderStats after = posix::fsync_order_stats();
  EXPECT_EQ(kernel_contents(a), expect);
  EXPECT_EQ(after.log_batches, before.log_batches) << "no log could be made";
  EXPECT_GE(after.epochs_durable - before.epochs_durable, 10u);
}

}  // namespace
}  // namespace tai::test
