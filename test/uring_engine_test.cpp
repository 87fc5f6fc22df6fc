// Behaviour of the io_uring engine beyond the cross-engine conformance suite: the eventfd,
// asynchronous fsync/fdatasync, kernel-linked requests and -ECANCELED, reap's timeout with a
// request that does not complete, cancellation of such a request when the engine goes,
// registered files and buffers, IOPOLL and SQPOLL rings, the dontneed hint, and the factory's
// failure messages (real ones where the test can provoke them, ProbeOverrides otherwise).
#include "engines/uring/uring_engine.hpp"

#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support/kernel_async_checks.hpp"
#include "support/engine_configs.hpp"
#include "support/engine_test_support.hpp"
#include "engines/common/probe_overrides.hpp"

namespace tai::test {
namespace {

using engines::UringEngine;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr std::uint64_t KiB = 1024;

// ---------------------------------------------------------------------------------------------

TEST(UringEngine, CapabilitiesOfAPlainRing) {
  MAKE_URING_OR_SKIP(e, depth(8));
  const Capabilities& c = e->capabilities();
  EXPECT_EQ(e->name(), "uring");
  EXPECT_TRUE(c.asynchronous);
  EXPECT_TRUE(c.async_sync);
  EXPECT_TRUE(c.eventfd);
  EXPECT_TRUE(c.linked_requests);
  EXPECT_TRUE(c.direct_io);
  EXPECT_TRUE(c.durable_sync);
  EXPECT_FALSE(c.registered_files);
  EXPECT_FALSE(c.registered_buffers);
  EXPECT_GE(e->eventfd(), 0);
}

TEST(UringEngine, EventfdBecomesReadableAfterACompletion) {
  ScratchDir dir;
  MAKE_URING_OR_SKIP(e, depth(8));
  auto f = e->open(dir.file("a"), {Open::read | Open::write | Open::create});
  ASSERT_TRUE(f) << f.error().message;
  expect_eventfd_follows_a_write(*e, f->get(), 4 * KiB);
  EXPECT_EQ(e->close(**f), std::error_code());
}

// The syncs go through the ring: the kernel posts their completions (the eventfd fires) and
// each one is an SQE of its own.
TEST(UringEngine, FsyncAndFdatasyncAreRingRequests) {
  ScratchDir dir;
  MAKE_URING_OR_SKIP(e, depth(8));
  auto f = e->open(dir.file("s"), {Open::read | Open::write | Open::create});
  ASSERT_TRUE(f) << f.error().message;
  TestBuffer buf(64 * KiB);
  fill_pattern(buf.at(), 0, 64 * KiB, 2);
  ASSERT_EQ(run_one_request(*e, Op::write, f->get(), buf.at(), 0, 64 * KiB).result, 65536);
  drain_eventfd(e->eventfd());

  const auto before = e->stats().sqes;
  auto done = run_requests(*e, {make_request(Op::fsync, f->get(), nullptr, 0, 0, 1),
                                make_request(Op::fdatasync, f->get(), nullptr, 0, 0, 2)});
  EXPECT_EQ(done[0].result, 0);
  EXPECT_EQ(done[1].result, 0);
  EXPECT_EQ(e->stats().sqes - before, 2u) << "fsync and fdatasync must each be one SQE";
  EXPECT_TRUE(readable(e->eventfd(), 0)) << "the kernel posted no completion for the syncs";
}

// A write linked to an fsync: both succeed, in one submit, as two kernel-linked SQEs.
TEST(UringEngine, LinkedWriteThenFsync) {
  ScratchDir dir;
  MAKE_URING_OR_SKIP(e, depth(8));
  const std::string path = dir.file("l");
  auto f = e->open(path, {Open::read | Open::write | Open::create});
  ASSERT_TRUE(f) << f.error().message;
  TestBuffer buf(16 * KiB);
  fill_pattern(buf.at(), 0, 16 * KiB, 3);
  Request w = make_request(Op::write, f->get(), buf.at(), 0, 16 * KiB, 1);
  w.link = true;
  const auto before = e->stats().sqes;
  auto done = run_requests(*e, {w, make_request(Op::fsync, f->get(), nullptr, 0, 0, 2)});
  EXPECT_EQ(done[0].result, 16384);
  EXPECT_EQ(done[1].result, 0);
  EXPECT_EQ(e->stats().sqes - before, 2u);
  const auto on_disk = read_file(path);
  ASSERT_EQ(on_disk.size(), 16 * KiB);
  EXPECT_EQ(mismatch(on_disk.data(), buf.at(), 16 * KiB), "");
}

// A failed link head: the kernel completes the rest of the chain with -ECANCELED. /dev/full
// answers every write with ENOSPC.
TEST(UringEngine, FailedLinkHeadCancelsTheRestOfTheChain) {
  MAKE_URING_OR_SKIP(e, depth(8));
  auto f = e->open("/dev/full", {Open::write});
  if (!f) GTEST_SKIP() << "no /dev/full here: " << f.error().message;
  TestBuffer buf(4 * KiB);
  Request w = make_request(Op::write, f->get(), buf.at(), 0, 4 * KiB, 1);
  w.link = true;
  Request s = make_request(Op::fsync, f->get(), nullptr, 0, 0, 2);
  s.link = true;
  Request w2 = make_request(Op::write, f->get(), buf.at(), 0, 4 * KiB, 3);
  const auto before = e->stats().sqes;
  auto done = run_requests(*e, {w, s, w2});
  EXPECT_EQ(done[0].result, -ENOSPC);
  EXPECT_EQ(done[1].result, -ECANCELED);
  EXPECT_EQ(done[2].result, -ECANCELED);
  EXPECT_EQ(e->stats().sqes - before, 3u) << "the chain was not linked in the kernel";
}

TEST(UringEngine, ReapOnAnIdleEngineReturnsZeroAtOnce) {
  MAKE_URING_OR_SKIP(e, depth(8));
  expect_idle_reap_returns_at_once(*e);
}

/// A FIFO in `dir` whose write end the test holds, so that the engine can open the read end
/// without blocking, and a read of it waits until the test writes.
struct Fifo {
  std::string path;
  int writer = -1;
  explicit Fifo(const ScratchDir& dir) : path(dir.file("fifo")) {
    if (::mkfifo(path.c_str(), 0600) == 0) writer = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  }
  ~Fifo() {
    if (writer >= 0) ::close(writer);
  }
};

// reap(min = 1, timeout) with a request that cannot complete (a read of an empty FIFO) returns
// 0 after about the timeout; the read completes when data arrives.
TEST(UringEngine, ReapHonoursItsTimeoutWhileARequestIsPending) {
  ScratchDir dir;
  Fifo fifo(dir);
  ASSERT_GE(fifo.writer, 0) << std::strerror(errno);
  MAKE_URING_OR_SKIP(e, depth(8));
  auto f = e->open(fifo.path, {Open::read});
  ASSERT_TRUE(f) << f.error().message;
  TestBuffer buf(4 * KiB);
  Request r = make_request(Op::read, f->get(), buf.at(), 0, 4 * KiB, 9);
  ASSERT_EQ(e->submit(&r, 1), 1u);

  Completion c;
  const auto t0 = Clock::now();
  EXPECT_EQ(e->reap(&c, 1, 1, milliseconds(200)), 0u);
  const auto waited = Clock::now() - t0;
  EXPECT_GE(waited, milliseconds(190));
  EXPECT_LT(waited, milliseconds(2000));
  EXPECT_EQ(e->reap(&c, 1, 0), 0u);

  // All 4 KiB at once: the base class continues a short read until it is complete or at end of
  // file, so a smaller write would leave the continuation waiting.
  const std::vector<std::uint8_t> msg = pattern(0, 4 * KiB, 8);
  ASSERT_EQ(::write(fifo.writer, msg.data(), msg.size()), static_cast<ssize_t>(msg.size()));
  ASSERT_EQ(e->reap(&c, 1, 1, std::chrono::seconds(10)), 1u);
  EXPECT_EQ(c.user_data, 9u);
  EXPECT_EQ(c.result, 4096);
  EXPECT_EQ(mismatch(buf.at(), msg.data(), msg.size()), "");
  EXPECT_EQ(e->close(**f), std::error_code());
}

// An engine destroyed while a request can never complete must not hang: it cancels it.
// (The engine goes before the file here on purpose: the file may not be closed while its read
// is in flight, and an unregistered file's descriptor outlives the engine safely.)
TEST(UringEngine, DestroyingTheEngineCancelsARequestThatWouldNeverComplete) {
  ScratchDir dir;
  Fifo fifo(dir);
  ASSERT_GE(fifo.writer, 0) << std::strerror(errno);
  MAKE_URING_OR_SKIP(e, depth(8));
  auto f = e->open(fifo.path, {Open::read});
  ASSERT_TRUE(f) << f.error().message;
  TestBuffer buf(4 * KiB);
  Request r = make_request(Op::read, f->get(), buf.at(), 0, 4 * KiB, 9);
  ASSERT_EQ(e->submit(&r, 1), 1u);
  const auto t0 = Clock::now();
  e.reset();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  f.value().reset();
}

TEST(UringEngine, RegisteredFilesRoundTripAndSlotsAreReused) {
  ScratchDir dir;
  EngineOptions o = depth(16);
  o.uring_register_files = true;
  MAKE_URING_OR_SKIP(e, o);
  EXPECT_TRUE(e->capabilities().registered_files);
  TAI_SKIP_WITHOUT_DIRECT_IO(dir.path());
  TestBuffer out(256 * KiB), in(256 * KiB);
  for (int round = 0; round < 3; ++round) {  // the second and third open reuse the slot
    const std::string path = dir.file("reg" + std::to_string(round));
    auto f = e->open(path, {Open::read | Open::write | Open::create | Open::direct});
    ASSERT_TRUE(f) << f.error().message;
    auto* uf = dynamic_cast<engines::UringFile*>(f->get());
    ASSERT_NE(uf, nullptr);
    EXPECT_GE(uf->fixed_slot(), 0) << "the file was not registered";
    fill_pattern(out.at(), 0, 256 * KiB, 10 + static_cast<unsigned>(round));
    const auto fixed_before = e->stats().fixed_file_sqes;
    std::vector<Request> writes, reads;
    for (std::uint64_t k = 0; k < 4; ++k) {
      writes.push_back(make_request(Op::write, f->get(), out.at() + k * 64 * KiB, k * 64 * KiB, 64 * KiB, k));
      reads.push_back(make_request(Op::read, f->get(), in.at() + k * 64 * KiB, k * 64 * KiB, 64 * KiB, k));
    }
    for (const auto& c : run_requests(*e, writes)) EXPECT_EQ(c.result, 65536);
    EXPECT_EQ(run_one_request(*e, Op::fdatasync, f->get(), nullptr, 0, 0).result, 0);
    for (const auto& c : run_requests(*e, reads)) EXPECT_EQ(c.result, 65536);
    EXPECT_EQ(mismatch(in.at(), out.at(), 256 * KiB), "");
    EXPECT_EQ(e->stats().fixed_file_sqes - fixed_before, 9u) << "every SQE of a registered file is fixed";
    EXPECT_EQ(e->close(**f), std::error_code());
  }
}

TEST(UringEngine, RegisteredBuffersRoundTrip) {
  ScratchDir dir;
  EngineOptions o = depth(16);
  o.uring_register_buffers = true;
  o.uring_register_files = true;
  MAKE_URING_OR_SKIP(e, o);
  EXPECT_TRUE(e->capabilities().registered_buffers);
  constexpr std::size_t kRegion = 1024 * KiB;
  TestBuffer region(kRegion), plain(64 * KiB);
  iovec iov{region.at(), kRegion};
  std::string message;
  ASSERT_EQ(e->register_buffers(&iov, 1, &message), std::error_code()) << message;

  TAI_SKIP_WITHOUT_DIRECT_IO(dir.path());
  for (Open kind : {Open::direct, Open::none}) {
    const std::string path = dir.file(kind == Open::direct ? "direct" : "buffered");
    auto f = e->open(path, {Open::read | Open::write | Open::create | kind});
    ASSERT_TRUE(f) << f.error().message;
    std::uint8_t* src = region.at();
    std::uint8_t* dst = region.at() + 512 * KiB;
    fill_pattern(src, 0, 256 * KiB, 20);
    std::memset(dst, 0, 256 * KiB);
    const auto fixed_before = e->stats().fixed_buffer_sqes;
    ASSERT_EQ(run_one_request(*e, Op::write, f->get(), src, 0, 256 * KiB).result, 262144);
    ASSERT_EQ(run_one_request(*e, Op::read, f->get(), dst, 0, 256 * KiB).result, 262144);
    EXPECT_EQ(mismatch(dst, src, 256 * KiB), "");
    EXPECT_EQ(e->stats().fixed_buffer_sqes - fixed_before, 2u) << "buffers inside the registered region are fixed";

    // Memory outside the registered region still works, as an ordinary request.
    const auto fixed_mid = e->stats().fixed_buffer_sqes;
    ASSERT_EQ(run_one_request(*e, Op::read, f->get(), plain.at(), 64 * KiB, 64 * KiB).result, 65536);
    EXPECT_EQ(mismatch(plain.at(), src + 64 * KiB, 64 * KiB), "");
    // A buffer that starts inside the region but runs past its end is not fixed either.
    ASSERT_EQ(run_one_request(*e, Op::read, f->get(), region.at() + kRegion - 4 * KiB, 0, 8 * KiB).result, 8192);
    EXPECT_EQ(e->stats().fixed_buffer_sqes, fixed_mid);
    EXPECT_EQ(e->close(**f), std::error_code());
  }
  EXPECT_EQ(e->unregister_buffers(), std::error_code());
}

TEST(UringEngine, RegisterBuffersWithoutTheOptionSaysSo) {
  MAKE_URING_OR_SKIP(e, depth(4));
  TestBuffer region(4 * KiB);
  iovec iov{region.at(), 4 * KiB};
  std::string message;
  EXPECT_EQ(e->register_buffers(&iov, 1, &message), std::make_error_code(std::errc::invalid_argument));
  EXPECT_NE(message.find("uring_register_buffers"), std::string::npos) << message;
}

TEST(UringEngine, DontneedDropsTheReadRangeFromThePageCache) {
  ScratchDir dir;
  if (const std::string why = tai::test::page_cache_not_droppable_reason(dir.path().string()); !why.empty())
    GTEST_SKIP() << why;
  const std::string path = dir.file("dn");
  ASSERT_NO_FATAL_FAILURE(write_clean_cached_file(path));
  if (resident_pages(path, 0, kDontneedFileSize) == 0) GTEST_SKIP() << "the page cache keeps nothing here";
  MAKE_URING_OR_SKIP(e, depth(8));
  expect_dontneed_drops_the_read_range(*e, path);
}

TEST(UringEngine, PolledRingRefusesBufferedFilesAndRunsSyncsInline) {
  ScratchDir dir;
  EngineOptions o = depth(8);
  o.uring_iopoll = true;
  MAKE_URING_OR_SKIP(e, o);
  EXPECT_FALSE(e->capabilities().eventfd);
  EXPECT_FALSE(e->capabilities().async_sync);
  EXPECT_FALSE(e->capabilities().linked_requests);
  EXPECT_EQ(e->eventfd(), -1);

  auto buffered = e->open(dir.file("b"), {Open::read | Open::write | Open::create});
  ASSERT_FALSE(buffered);
  EXPECT_EQ(buffered.error().code, std::make_error_code(std::errc::invalid_argument));
  EXPECT_NE(buffered.error().message.find("uring_iopoll"), std::string::npos) << buffered.error().message;
  EXPECT_NE(buffered.error().message.find("Open::direct"), std::string::npos) << buffered.error().message;

  TAI_SKIP_WITHOUT_DIRECT_IO(dir.path());
  auto f = e->open(dir.file("d"), {Open::read | Open::write | Open::create | Open::direct});
  if (!f && f.error().code == std::make_error_code(std::errc::operation_not_supported)) {
    EXPECT_NE(f.error().message.find("io_poll = 0"), std::string::npos) << f.error().message;
    GTEST_SKIP() << "the device of the scratch directory cannot be polled: " << f.error().message;
  }
  ASSERT_TRUE(f) << f.error().message;
  TestBuffer out(64 * KiB), in(64 * KiB);
  fill_pattern(out.at(), 0, 64 * KiB, 40);
  const std::int64_t wrote = run_one_request(*e, Op::write, f->get(), out.at(), 0, 64 * KiB).result;
  // tmpfs (Linux >= 6.6) takes O_DIRECT and the open, having no block queue to ask, but refuses
  // polled I/O at the first transfer: the scratch directory decides, not TAI.
  if (wrote == -EOPNOTSUPP)
    GTEST_SKIP() << "the file system of " << dir.path() << " takes O_DIRECT but not polled I/O (EOPNOTSUPP)";
  ASSERT_EQ(wrote, 65536);
  EXPECT_EQ(run_one_request(*e, Op::fsync, f->get(), nullptr, 0, 0).result, 0);
  EXPECT_EQ(e->stats().sync_on_polled_ring, 1u);
  ASSERT_EQ(run_one_request(*e, Op::read, f->get(), in.at(), 0, 64 * KiB).result, 65536);
  EXPECT_EQ(mismatch(in.at(), out.at(), 64 * KiB), "");
}

// The sync path of a polled ring does not depend on the device: on tmpfs (no block queue, so
// the open is allowed) fsync and fdatasync run inside submit() and complete with 0.
TEST(UringEngine, PolledRingRunsSyncsInsideSubmit) {
  EngineOptions o = depth(8);
  o.uring_iopoll = true;
  MAKE_URING_OR_SKIP(e, o);
  char tmpl[] = "/dev/shm/tai-uring-iopoll-XXXXXX";
  const int fd = ::mkstemp(tmpl);
  if (fd < 0) GTEST_SKIP() << "no /dev/shm: " << std::strerror(errno);
  ::close(fd);
  auto f = e->open(tmpl, {Open::read | Open::write | Open::direct});
  if (!f) {
    ::unlink(tmpl);
    GTEST_SKIP() << "no O_DIRECT on /dev/shm here: " << f.error().message;
  }
  auto done = run_requests(*e, {make_request(Op::fsync, f->get(), nullptr, 0, 0, 1),
                                make_request(Op::fdatasync, f->get(), nullptr, 0, 0, 2)});
  EXPECT_EQ(done[0].result, 0);
  EXPECT_EQ(done[1].result, 0);
  EXPECT_EQ(e->stats().sync_on_polled_ring, 2u);
  EXPECT_EQ(e->stats().sqes, 0u) << "a polled ring refuses sync SQEs; they must not go to the kernel";
  EXPECT_EQ(e->close(**f), std::error_code());
  ::unlink(tmpl);
}

TEST(UringEngine, SubmissionPollingRingRoundTrip) {
  ScratchDir dir;
  EngineOptions o = depth(8);
  o.uring_sqpoll = true;
  MAKE_URING_OR_SKIP(e, o);
  TAI_SKIP_WITHOUT_DIRECT_IO(dir.path());
  auto f = e->open(dir.file("q"), {Open::read | Open::write | Open::create | Open::direct});
  ASSERT_TRUE(f) << f.error().message;
  TestBuffer out(128 * KiB), in(128 * KiB);
  fill_pattern(out.at(), 0, 128 * KiB, 50);
  std::vector<Request> writes, reads;
  for (std::uint64_t k = 0; k < 8; ++k) {
    writes.push_back(make_request(Op::write, f->get(), out.at() + k * 16 * KiB, k * 16 * KiB, 16 * KiB, k));
    reads.push_back(make_request(Op::read, f->get(), in.at() + k * 16 * KiB, k * 16 * KiB, 16 * KiB, k));
  }
  for (const auto& c : run_requests(*e, writes)) EXPECT_EQ(c.result, 16384);
  for (const auto& c : run_requests(*e, reads)) EXPECT_EQ(c.result, 16384);
  EXPECT_EQ(mismatch(in.at(), out.at(), 128 * KiB), "");
}

// ---------------------------------------------------------------------------------------------
// Factory failures

TEST(UringEngineFactory, AbsurdDepthNamesTheLimit) {
  auto made = engines::make_uring(depth(1u << 30));
  ASSERT_FALSE(made);
  EXPECT_EQ(made.error().code, std::make_error_code(std::errc::invalid_argument));
  const std::string& m = made.error().message;
  EXPECT_NE(m.find("depth 1073741824"), std::string::npos) << m;
  EXPECT_NE(m.find("32768"), std::string::npos) << m;
  EXPECT_NE(m.find("16384"), std::string::npos) << m;
}

TEST(UringEngineFactory, LargestDepthWorks) {
  MAKE_URING_OR_SKIP(e, depth(16384));
  EXPECT_EQ(e->depth(), 16384u);
}

std::string factory_message(const detail::ProbeOverrides& o, EngineOptions options = depth(8)) {
  detail::ScopedProbeOverrides scope(o);
  auto made = engines::make_uring(options);
  if (made) return "(the engine was made)";
  return made.error().message;
}

TEST(UringEngineFactory, DisabledBySysctlNamesIt) {
  detail::ProbeOverrides o;
  o.io_uring_disabled = 2;
  const std::string m = factory_message(o);
  EXPECT_NE(m.find("EPERM"), std::string::npos) << m;
  EXPECT_NE(m.find("kernel.io_uring_disabled = 2"), std::string::npos) << m;

  o.io_uring_disabled = 1;
  o.io_uring_setup_errno = EPERM;  // what the kernel answers a process outside io_uring_group
  const std::string m1 = factory_message(o);
  EXPECT_NE(m1.find("kernel.io_uring_disabled = 1"), std::string::npos) << m1;
  EXPECT_NE(m1.find("CAP_SYS_ADMIN"), std::string::npos) << m1;
}

TEST(UringEngineFactory, SeccompEpermNamesIt) {
  detail::ProbeOverrides o;
  o.io_uring_disabled = 0;
  o.io_uring_setup_errno = EPERM;
  const std::string m = factory_message(o);
  EXPECT_NE(m.find("Operation not permitted (EPERM)"), std::string::npos) << m;
  EXPECT_NE(m.find("seccomp"), std::string::npos) << m;
  EXPECT_NE(m.find("kernel.io_uring_disabled = 0"), std::string::npos) << m;
}

TEST(UringEngineFactory, KernelWithoutIoUringNamesENOSYS) {
  detail::ProbeOverrides o;
  o.io_uring_setup_errno = ENOSYS;
  const std::string m = factory_message(o);
  EXPECT_NE(m.find("(ENOSYS)"), std::string::npos) << m;
  EXPECT_NE(m.find("no io_uring"), std::string::npos) << m;
}

TEST(UringEngineFactory, EnomemNamesRlimitMemlock) {
  detail::ProbeOverrides o;
  o.io_uring_setup_errno = ENOMEM;
  o.memlock_limit = 65536;
  const std::string m = factory_message(o);
  EXPECT_NE(m.find("(ENOMEM)"), std::string::npos) << m;
  EXPECT_NE(m.find("RLIMIT_MEMLOCK soft = 65536 bytes, hard = "), std::string::npos) << m;
}

TEST(UringEngineFactory, RegisteredBufferRefusalNamesRlimitMemlock) {
  detail::ProbeOverrides o;
  o.uring_register_buffers_errno = ENOMEM;
  o.memlock_limit = 8192;
  EngineOptions options = depth(8);
  options.uring_register_buffers = true;
  {
    detail::ScopedProbeOverrides scope(o);
    auto made = engines::make_uring(options);
    if (!made && made.error().message.rfind("io_uring_setup", 0) == 0)
      GTEST_SKIP() << "the kernel refuses io_uring here: " << made.error().message;
    ASSERT_FALSE(made);
    EXPECT_EQ(made.error().code, std::make_error_code(std::errc::not_enough_memory));
    EXPECT_NE(made.error().message.find("io_uring_register_buffers"), std::string::npos) << made.error().message;
    EXPECT_NE(made.error().message.find("RLIMIT_MEMLOCK soft = 8192 bytes"), std::string::npos) << made.error().message;
  }
  // The same refusal from register_buffers() itself.
  MAKE_URING_OR_SKIP(e, options);
  detail::ScopedProbeOverrides scope(o);
  TestBuffer region(8 * KiB);
  iovec iov{region.at(), 8 * KiB};
  std::string message;
  EXPECT_EQ(e->register_buffers(&iov, 1, &message), std::make_error_code(std::errc::not_enough_memory));
  EXPECT_NE(message.find("RLIMIT_MEMLOCK soft = 8192 bytes, hard = "), std::string::npos) << message;
}

// The real refusals: a thread without CAP_IPC_LOCK (capabilities are per thread) under a soft
// RLIMIT_MEMLOCK of 0 can pin nothing. Depending on the kernel, making the ring already fails
// (its memory is charged to the limit) or the probe of uring_register_buffers does; either way
// the message names the limit. Then register_buffers() on an engine made under the normal limit.
TEST(UringEngineFactory, RealMemlockLimitIsNamed) {
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_MEMLOCK, &saved), 0);
  std::string skip, factory_message, register_message;
  bool factory_made = false;
  std::error_code register_error;
  std::thread t([&] {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2]{};
    if (::syscall(SYS_capget, &header, data) != 0) {
      skip = std::string("capget: ") + std::strerror(errno);
      return;
    }
    data[CAP_TO_INDEX(CAP_IPC_LOCK)].effective &= ~CAP_TO_MASK(CAP_IPC_LOCK);
    if (::syscall(SYS_capset, &header, data) != 0) {
      skip = std::string("capset: ") + std::strerror(errno);
      return;
    }
    rlimit none = saved;
    none.rlim_cur = 0;
    EngineOptions options = depth(8);
    options.uring_register_buffers = true;

    if (::setrlimit(RLIMIT_MEMLOCK, &none) != 0) {
      skip = std::string("setrlimit: ") + std::strerror(errno);
      return;
    }
    {
      auto e = engines::make_uring(options);
      ::setrlimit(RLIMIT_MEMLOCK, &saved);
      factory_made = e.ok();
      if (!e) factory_message = e.error().message;
    }

    auto e = UringEngine::create(options);
    if (!e) {
      skip = "no uring engine under the normal limit without CAP_IPC_LOCK: " + e.error().message;
      return;
    }
    TestBuffer page(4 * KiB);
    iovec iov{page.at(), 4 * KiB};
    ::setrlimit(RLIMIT_MEMLOCK, &none);
    register_error = e.value()->register_buffers(&iov, 1, &register_message);
    ::setrlimit(RLIMIT_MEMLOCK, &saved);
  });
  t.join();
  rlimit now{};
  ASSERT_EQ(::getrlimit(RLIMIT_MEMLOCK, &now), 0);
  EXPECT_EQ(now.rlim_cur, saved.rlim_cur) << "the test did not restore RLIMIT_MEMLOCK";

  EXPECT_FALSE(factory_made) << "a uring engine with registered buffers was made under RLIMIT_MEMLOCK = 0 "
                                "without CAP_IPC_LOCK";
  EXPECT_NE(factory_message.find("(ENOMEM)"), std::string::npos) << factory_message;
  EXPECT_NE(factory_message.find("RLIMIT_MEMLOCK soft = 0 bytes, hard = "), std::string::npos) << factory_message;
  if (!skip.empty()) GTEST_SKIP() << skip;
  EXPECT_EQ(register_error, std::make_error_code(std::errc::not_enough_memory));
  EXPECT_NE(register_message.find("io_uring_register_buffers"), std::string::npos) << register_message;
  EXPECT_NE(register_message.find("RLIMIT_MEMLOCK soft = 0 bytes, hard = "), std::string::npos) << register_message;
}

}  // namespace
}  // namespace tai::test
