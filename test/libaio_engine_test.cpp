// Behaviour of the libaio engine beyond the cross-engine conformance suite: the eventfd,
// asynchronous fsync/fdatasync, reap on an idle engine, more requests than one io_submit takes,
// the dontneed hint, and the factory's failure messages (a real EAGAIN from fs.aio-max-nr, an
// absurd depth, ProbeOverrides for the refusals the test cannot provoke).
//
// Not tested here: reap's timeout with a request that never completes. Kernel AIO has no request
// the engine can issue that stays pending portably (a read of a pipe or socket blocks inside
// io_submit instead), so only "nothing in flight returns at once" is checked; the uring test
// covers the timeout path with a FIFO.
#include "engines/libaio/libaio_engine.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/kernel_async_checks.hpp"
#include "support/engine_configs.hpp"
#include "support/engine_test_support.hpp"
#include "engines/common/probe_overrides.hpp"

namespace tai::test {
namespace {

using engines::LibaioEngine;

constexpr std::uint64_t KiB = 1024;

std::uint64_t sysctl(const char* path) {
  std::ifstream in(path);
  std::uint64_t v = 0;
  in >> v;
  return v;
}

// ---------------------------------------------------------------------------------------------

TEST(LibaioEngine, Capabilities) {
  MAKE_LIBAIO_OR_SKIP(e, depth(8));
  const Capabilities& c = e->capabilities();
  EXPECT_EQ(e->name(), "libaio");
  EXPECT_TRUE(c.asynchronous);
  EXPECT_TRUE(c.async_sync);
  EXPECT_TRUE(c.eventfd);
  EXPECT_TRUE(c.direct_io);
  EXPECT_TRUE(c.durable_sync);
  EXPECT_FALSE(c.linked_requests) << "kernel AIO has no links; the base class chains requests";
  EXPECT_FALSE(c.registered_files);
  EXPECT_FALSE(c.registered_buffers);
  EXPECT_GE(e->eventfd(), 0);
}

TEST(LibaioEngine, EventfdBecomesReadableAfterACompletion) {
  ScratchDir dir;
  TAI_SKIP_WITHOUT_DIRECT_IO(dir.path());
  MAKE_LIBAIO_OR_SKIP(e, depth(8));
  auto f = e->open(dir.file("a"), {Open::read | Open::write | Open::create | Open::direct});
  ASSERT_TRUE(f) << f.error().message;
  expect_eventfd_follows_a_write(*e, f->get(), 64 * KiB);
  EXPECT_EQ(e->close(**f), std::error_code());
}

// IOCB_CMD_FSYNC / IOCB_CMD_FDSYNC: the kernel completes them (the eventfd attached to their
// iocbs fires; the synchronous fallback would not signal it).
TEST(LibaioEngine, FsyncAndFdatasyncAreKernelRequests) {
  ScratchDir dir;
  MAKE_LIBAIO_OR_SKIP(e, depth(8));
  const std::string path = dir.file("s");
  auto f = e->open(path, {Open::read | Open::write | Open::create});
  ASSERT_TRUE(f) << f.error().message;
  TestBuffer buf(64 * KiB);
  fill_pattern(buf.at(), 0, 64 * KiB, 2);
  ASSERT_EQ(run_one_request(*e, Op::write, f->get(), buf.at(), 0, 64 * KiB).result, 65536);
  for (Op op : {Op::fsync, Op::fdatasync}) {
    drain_eventfd(e->eventfd());
    Request s = make_request(op, f->get(), nullptr, 0, 0, 3);
    ASSERT_EQ(e->submit(&s, 1), 1u);
    EXPECT_TRUE(readable(e->eventfd(), 10000)) << to_string(op) << " was not completed by the kernel";
    Completion c;
    ASSERT_EQ(e->reap(&c, 1, 1, std::chrono::seconds(10)), 1u);
    EXPECT_EQ(c.user_data, 3u);
    EXPECT_EQ(c.result, 0) << to_string(op);
  }
  const auto on_disk = read_file(path);
  ASSERT_EQ(on_disk.size(), 64 * KiB);
  EXPECT_EQ(mismatch(on_disk.data(), buf.at(), 64 * KiB), "");
}

TEST(LibaioEngine, ReapOnAnIdleEngineReturnsZeroAtOnce) {
  MAKE_LIBAIO_OR_SKIP(e, depth(8));
  expect_idle_reap_returns_at_once(*e);
}

// A full queue of direct reads and writes, several times over, in batches the size of the
// depth: every iocb is reused, every completion comes back once with its own user_data.
TEST(LibaioEngine, ManyBatchesReuseTheIocbs) {
  ScratchDir dir;
  constexpr unsigned kDepth = 16;
  MAKE_LIBAIO_OR_SKIP(e, depth(kDepth));
  TAI_SKIP_WITHOUT_DIRECT_IO(dir.path());
  auto f = e->open(dir.file("m"), {Open::read | Open::write | Open::create | Open::direct});
  ASSERT_TRUE(f) << f.error().message;
  constexpr std::size_t kBlock = 16 * KiB, kBlocks = 256;
  TestBuffer out(kBlock * kBlocks), in(kBlock * kBlocks);
  fill_pattern(out.at(), 0, kBlock * kBlocks, 4);
  std::vector<Request> writes, reads;
  for (std::uint64_t k = 0; k < kBlocks; ++k) {
    writes.push_back(make_request(Op::write, f->get(), out.at() + k * kBlock, k * kBlock, kBlock, k));
    reads.push_back(make_request(Op::read, f->get(), in.at() + k * kBlock, k * kBlock, kBlock, 1000 + k));
  }
  for (const auto& c : run_requests(*e, writes)) EXPECT_EQ(c.result, static_cast<std::int64_t>(kBlock));
  for (const auto& c : run_requests(*e, reads)) EXPECT_EQ(c.result, static_cast<std::int64_t>(kBlock));
  EXPECT_EQ(mismatch(in.at(), out.at(), kBlock * kBlocks), "");
  EXPECT_EQ(e->in_flight(), 0u);
}

TEST(LibaioEngine, DontneedDropsTheReadRangeFromThePageCache) {
  ScratchDir dir;
  if (const std::string why = tai::test::page_cache_not_droppable_reason(dir.path().string()); !why.empty())
    GTEST_SKIP() << why;
  const std::string path = dir.file("dn");
  ASSERT_NO_FATAL_FAILURE(write_clean_cached_file(path));
  if (resident_pages(path, 0, kDontneedFileSize) == 0) GTEST_SKIP() << "the page cache keeps nothing here";
  MAKE_LIBAIO_OR_SKIP(e, depth(8));
  expect_dontneed_drops_the_read_range(*e, path);
}

// ---------------------------------------------------------------------------------------------
// Factory failures

TEST(LibaioEngineFactory, AbsurdDepthNamesTheLimit) {
  auto made = engines::make_libaio(depth(1u << 30));
  ASSERT_FALSE(made);
  EXPECT_EQ(made.error().code, std::make_error_code(std::errc::invalid_argument));
  const std::string& m = made.error().message;
  EXPECT_NE(m.find("depth 1073741824"), std::string::npos) << m;
  EXPECT_NE(m.find("fs.aio-max-nr"), std::string::npos) << m;
}

// A depth whose 2 * depth events exceed fs.aio-max-nr: the kernel's own EAGAIN, with both
// sysctls in the message.
TEST(LibaioEngineFactory, RealEagainNamesAioMaxNrAndAioNr) {
  const std::uint64_t max_nr = sysctl("/proc/sys/fs/aio-max-nr");
  if (max_nr == 0 || max_nr >= (std::uint64_t{1} << 21)) GTEST_SKIP() << "fs.aio-max-nr = " << max_nr;
  auto made = engines::make_libaio(depth(static_cast<unsigned>(max_nr / 2 + 1)));
  ASSERT_FALSE(made);
  EXPECT_EQ(made.error().code, std::make_error_code(std::errc::resource_unavailable_try_again));
  const std::string& m = made.error().message;
  EXPECT_NE(m.find("(EAGAIN)"), std::string::npos) << m;
  EXPECT_NE(m.find("fs.aio-max-nr = " + std::to_string(max_nr)), std::string::npos) << m;
  EXPECT_NE(m.find("fs.aio-nr = "), std::string::npos) << m;
}

std::string factory_message(const detail::ProbeOverrides& o) {
  detail::ScopedProbeOverrides scope(o);
  auto made = engines::make_libaio(depth(8));
  if (made) return "(the engine was made)";
  return made.error().message;
}

TEST(LibaioEngineFactory, OverriddenRefusalsAreNamed) {
  detail::ProbeOverrides o;
  o.io_setup_errno = EAGAIN;
  o.aio_max_nr = 65536;
  o.aio_nr = 65530;
  std::string m = factory_message(o);
  EXPECT_NE(m.find("io_setup"), std::string::npos) << m;
  EXPECT_NE(m.find("Resource temporarily unavailable (EAGAIN)"), std::string::npos) << m;
  EXPECT_NE(m.find("fs.aio-max-nr = 65536 and fs.aio-nr = 65530"), std::string::npos) << m;

  o = {};
  o.io_setup_errno = ENOSYS;
  m = factory_message(o);
  EXPECT_NE(m.find("(ENOSYS)"), std::string::npos) << m;
  EXPECT_NE(m.find("no asynchronous I/O"), std::string::npos) << m;

  o = {};
  o.io_setup_errno = EPERM;
  m = factory_message(o);
  EXPECT_NE(m.find("Operation not permitted (EPERM)"), std::string::npos) << m;
  EXPECT_NE(m.find("seccomp"), std::string::npos) << m;
}

}  // namespace
}  // namespace tai::test
