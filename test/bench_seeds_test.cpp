// The study subcommands of tai-bench (latency, write, fadvise) run on tiny sizes through the built
// binary: their tables, CSV and PNG have the promised shape, and their checksum verification
// works: a run over a file with one flipped byte (the hidden --corrupt-for-test hook) must fail
// with exit status 3 and say so. The page cache is dropped with FADV_DONTNEED on the test's own
// files (--drop-with fadvise), never with the machine-wide drop_caches.
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "support/bench_runner.hpp"
#include "support/test_env.hpp"

namespace {

using Outcome = tai::test::BenchOutcome;
using tai::test::run_bench;

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':'))
    if (!dir.empty() && ::access((dir + "/" + program).c_str(), X_OK) == 0) return true;
  return false;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

/// The line of `text` whose first two words are `first` and `second` (a table row), or "".
/// Skips the calling test when `dir` has less than `bytes` free (tai-bench write refuses to start
/// without room for its file plus a margin; ramfs reports none at all).
#define SKIP_WITHOUT_ROOM(dir, bytes)                                                                     \
  do {                                                                                                    \
    struct statvfs vfs_ {};                                                                               \
    if (::statvfs((dir).c_str(), &vfs_) == 0 &&                                                          \
        static_cast<unsigned long long>(vfs_.f_bavail) * vfs_.f_frsize < (bytes))                         \
      GTEST_SKIP() << (dir) << " has " << static_cast<unsigned long long>(vfs_.f_bavail) * vfs_.f_frsize \
                   << " bytes free; tai-bench write needs " << (bytes);                                   \
  } while (0)

std::string row(const std::string& text, const std::string& first, const std::string& second) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string a, b, c;
    words >> a >> b >> c;
    if (second.empty() ? a == first : (a + " " + b == first && c == second) || (a == first && b == second))
      return line;
  }
  return {};
}

void expect_png(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  in.read(magic, 8);
  EXPECT_TRUE(in.good()) << path << " was not written";
  EXPECT_EQ(std::string(magic + 1, 3), "PNG") << path << " is not a PNG";
}


const char* kSingleVariants[] = {"read",  "pread",          "direct-pread", "mmap",   "posix",
                                 "posix-direct", "uring", "uring-buffered", "libaio", "uring-iopoll"};

TEST(BenchSeeds, LatencyTinyPrintsEveryVariantCsvAndPlot) {
  SKIP_WITHOUT_BENCH();
#ifdef TAI_BENCH_PATH
  tai::test::ScratchDir dir;
  const bool plot = on_path("gnuplot");
  const std::string csv = dir.file("latency.csv"), png = dir.file("latency.png");
  const Outcome r = run_bench("latency --dir " + dir.path().string() +
                              " --size 64k --duration 0.02 --threads 2 --multi-read 4 --drop-with fadvise --csv " +
                              csv + (plot ? " --plot " + png : std::string()));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("# machine: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("# file 64 KiB: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("page cache: warm"), std::string::npos) << r.output;
  const std::regex header(R"(size +variant +threads +p50 +p99 +p999 +p9999 +avg +total +minflt +majflt)");
  EXPECT_TRUE(std::regex_search(r.output, header)) << r.output;
  // A row that ran has numbers in every latency column; one that did not says why.
  const std::regex ran(R"(^64 KiB +\S+ +2 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+e[0-9]+ )");
  for (const char* v : kSingleVariants) {
    const std::string line = row(r.output, "64 KiB", v);
    ASSERT_FALSE(line.empty()) << "no row for " << v << "\n" << r.output;
    // Rows that did not run say so; a long reason is a footnote "[n]" printed under the table.
    EXPECT_TRUE(std::regex_search(line, ran) || line.find("not run") != std::string::npos) << line;
  }
  // Everywhere, except the O_DIRECT ones where the scratch directory's file system refuses
  // O_DIRECT (ramfs, tmpfs before Linux 6.6): there they must say they did not run.
  const bool direct_ok = tai::test::direct_io_unsupported_reason(dir.path()).empty();
  for (const char* v : {"read", "pread", "direct-pread", "mmap", "posix", "posix-direct"}) {
    const std::string line = row(r.output, "64 KiB", v);
    if (!direct_ok && std::string(v).find("direct") != std::string::npos) {
      EXPECT_NE(line.find("not run"), std::string::npos) << v << " in a directory without O_DIRECT:\n" << r.output;
      continue;
    }
    EXPECT_TRUE(std::regex_search(line, ran)) << v << " must run everywhere:\n" << r.output;
  }
  EXPECT_NE(r.output.find("reads/iter"), std::string::npos) << r.output;

  const auto lines = lines_of(csv);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0].rfind("kind,file_bytes,variant,mode,reads_per_iter,threads,p50_ns,p99_ns,p999_ns,p9999_ns,avg_ns,"
                           "total,",
                           0),
            0u)
      << lines[0];
  // 10 single-read variants + multi-read: cached (blocking, uring) + direct (blocking, uring, libaio, uring-iopoll).
  EXPECT_EQ(lines.size(), 1u + 10u + 6u) << r.output;
  if (plot) expect_png(png);
#endif
}

TEST(BenchSeeds, LatencyFailsOnACorruptedByteInEveryVariant) {
  SKIP_WITHOUT_BENCH();
#ifdef TAI_BENCH_PATH
  tai::test::ScratchDir dir;
  int checked = 0;
  for (const char* v : kSingleVariants) {
    const Outcome r = run_bench("latency --dir " + dir.path().string() + " --size 64k --duration 0.05 --variants " + v +
                                " --multi-read 0 --drop-with fadvise --corrupt-for-test");
    if (r.status == 0 && r.output.find("not run: ") != std::string::npos) continue;  // engine not here
    ++checked;
    EXPECT_EQ(r.status, 3) << v << ":\n" << r.output;
    EXPECT_NE(r.output.find("checksum mismatch in variant '" + std::string(v) + "'"), std::string::npos) << r.output;
  }
  // read, pread, mmap, posix everywhere; direct-pread and posix-direct too where the scratch
  // directory's file system takes O_DIRECT.
  EXPECT_GE(checked, tai::test::direct_io_unsupported_reason(dir.path()).empty() ? 6 : 4);
  // The multi-read mode checks its values too.
  const Outcome m = run_bench("latency --dir " + dir.path().string() +
                              " --size 64k --duration 0.05 --variants none --multi-read 4 --multi-methods blocking "
                              "--drop-with fadvise --corrupt-for-test");
  EXPECT_EQ(m.status, 3) << m.output;
  EXPECT_NE(m.output.find("checksum mismatch in variant 'blocking' (multi-read"), std::string::npos) << m.output;
  // The private corrupted file is removed; nothing is left for a later run to reuse.
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    EXPECT_EQ(entry.path().filename().string().find("corrupt"), std::string::npos) << entry.path();
#endif
}

TEST(BenchSeeds, WriteTinyPrintsTheSeedsTwoLinesCsvAndPlot) {
  SKIP_WITHOUT_BENCH();
#ifdef TAI_BENCH_PATH
  tai::test::ScratchDir dir;
  SKIP_WITHOUT_ROOM(dir.path().string(), (4ull + 256) << 20);
  const bool plot = on_path("gnuplot");
  const bool fio = on_path("fio");
  const std::string csv = dir.file("write.csv"), png = dir.file("write.png");
  const Outcome r = run_bench("write --dir " + dir.path().string() +
                              " --settle 0 --total 4M --bs 64k --depth 4 --drop-with fadvise --csv " + csv +
                              (fio ? " --fio" : "") + (plot ? " --plot " + png : std::string()));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("# machine: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("# page cache: dropped before every run"), std::string::npos) << r.output;
  const std::regex wrote_buffered(R"(Buffered I/O \(posix\): Wrote [0-9.]+ GB in [0-9.]+m?s, [0-9.]+ [MG]B/s)");
  const std::regex closed_buffered(R"(Buffered I/O \(posix\): Closed in [0-9.]+m?s, Amortized total [0-9.]+ [MG]B/s)");
  EXPECT_TRUE(std::regex_search(r.output, wrote_buffered)) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, closed_buffered)) << r.output;
  for (const std::string engine : {"libaio", "uring"}) {
    const std::regex wrote("Direct I/O \\(" + engine + R"(, depth 4\): Wrote [0-9.]+ GB in [0-9.]+m?s, [0-9.]+ [MG]B/s)");
    const std::regex closed("Direct I/O \\(" + engine +
                            R"(, depth 4\): Closed in [0-9.]+m?s, Amortized total [0-9.]+ [MG]B/s)");
    const bool unavailable = r.output.find("Direct I/O (" + engine + ", depth 4): not run: ") != std::string::npos;
    EXPECT_TRUE(unavailable || (std::regex_search(r.output, wrote) && std::regex_search(r.output, closed))) << r.output;
  }
  const std::regex header(R"(variant +engine +depth +bs +GB +runs +wrote_s +wrote_MB/s +close_ms +amortized_MB/s)");
  EXPECT_TRUE(std::regex_search(r.output, header)) << r.output;
  if (fio) {
    EXPECT_NE(r.output.find("fio libaio (direct, depth 4): Wrote "), std::string::npos) << r.output;
  }

  const auto lines = lines_of(csv);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0].rfind("kind,round,variant,engine,depth,bs,bytes,wrote_s,close_s,", 0), 0u) << lines[0];
  // One run row and one median row per variant that ran (the ones that did not have a run row only).
  EXPECT_GE(lines.size(), 1u + 2u) << r.output;
  if (plot) expect_png(png);
#endif
}

TEST(BenchSeeds, WriteFailsWhenTheWrittenFileHasACorruptedByte) {
  SKIP_WITHOUT_BENCH();
#ifdef TAI_BENCH_PATH
  tai::test::ScratchDir dir;
  SKIP_WITHOUT_ROOM(dir.path().string(), (2ull + 256) << 20);
  for (const char* v : {"buffered", "uring", "libaio"}) {
    const Outcome r = run_bench("write --dir " + dir.path().string() + " --settle 0 --total 2M --bs 64k --depth 4 --variants " +
                                v + " --drop-with fadvise --corrupt-for-test");
    if (r.status == 0 && r.output.find("not run: ") != std::string::npos) continue;
    EXPECT_EQ(r.status, 3) << v << ":\n" << r.output;
    EXPECT_NE(r.output.find("checksum verification failed: mismatch"), std::string::npos) << r.output;
  }
  // And without the hook the same run passes: the failure above is the flipped byte.
  const Outcome ok = run_bench("write --dir " + dir.path().string() +
                               " --settle 0 --total 2M --bs 64k --variants buffered --drop-with fadvise");
  EXPECT_EQ(ok.status, 0) << ok.output;
#endif
}

TEST(BenchSeeds, FadviseTinyPrintsTheSeedsColumnsCsvAndPlot) {
  SKIP_WITHOUT_BENCH();
#ifdef TAI_BENCH_PATH
  tai::test::ScratchDir dir;
  const bool plot = on_path("gnuplot");
  const std::string csv = dir.file("fadvise.csv"), png = dir.file("fadvise.png");
  const Outcome r = run_bench("fadvise --dir " + dir.path().string() +
                              " --size 1M --bs 4k,64k --threads 4 --read 256k --write-size 256k --drop-with fadvise "
                              "--csv " + csv + (plot ? " --plot " + png : std::string()));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("# machine: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("page cache dropped before each variant"), std::string::npos) << r.output;
  const std::regex header(
      R"(backend +reqs +bufsize +depth +rtime +utime +stime +cpu +us/op +op/s +MB/s +grew_MiB +grew/byte)");
  EXPECT_TRUE(std::regex_search(r.output, header)) << r.output;
  // The direct variant runs where the scratch directory's file system takes O_DIRECT (not ramfs,
  // not tmpfs before Linux 6.6); elsewhere it must say it did not run.
  const bool direct_ok = tai::test::direct_io_unsupported_reason(dir.path()).empty();
  for (const char* v : {"buffered", "noreuse", "dontneed", "direct"}) {
    if (!direct_ok && std::string(v) == "direct") {
      EXPECT_NE(row(r.output, v, "64").find("not run"), std::string::npos) << r.output;
      continue;
    }
    const std::regex ran(std::string("(^|\n)") + v + R"( +64 +4096 +4 +[0-9]+ )");
    EXPECT_TRUE(std::regex_search(r.output, ran)) << v << ":\n" << r.output;
  }
  // O_DIRECT leaves nothing in the page cache.
  const std::regex direct_no_growth(R"((^|\n)direct +64 +4096 +4 .* 0\.0 +0\.000 )");
  if (direct_ok) EXPECT_TRUE(std::regex_search(r.output, direct_no_growth)) << r.output;
  for (const char* v : {"dsync", "direct-dsync"}) EXPECT_FALSE(row(r.output, v, "64").empty()) << r.output;

  const auto lines = lines_of(csv);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0].rfind("kind,variant,engine_flags,reqs,bufsize,depth,rtime_ms,utime_ms,stime_ms,cpu_ms,us_per_op,"
                           "ops_per_s,mb_per_s,cache_growth_bytes,growth_per_byte,",
                           0),
            0u)
      << lines[0];
  // (6 read variants + 3 write variants) x 2 block sizes.
  EXPECT_EQ(lines.size(), 1u + 18u) << r.output;
  if (plot) expect_png(png);
#endif
}

TEST(BenchSeeds, FadviseFailsOnACorruptedByteInReadsAndInWrites) {
  SKIP_WITHOUT_BENCH();
#ifdef TAI_BENCH_PATH
  tai::test::ScratchDir dir;
  for (const char* v : {"buffered", "noreuse", "dontneed", "direct", "libaio", "uring"}) {
    const Outcome r = run_bench("fadvise --dir " + dir.path().string() + " --size 1M --bs 4k --threads 2 --read 64k " +
                                "--variants " + v + " --write-size 0 --drop-with fadvise --corrupt-for-test");
    if (r.status == 0 && r.output.find("not run: ") != std::string::npos) continue;
    EXPECT_EQ(r.status, 3) << v << ":\n" << r.output;
    EXPECT_NE(r.output.find("checksum mismatch in read variant '" + std::string(v) + "'"), std::string::npos)
        << r.output;
  }
  const bool direct_ok = tai::test::direct_io_unsupported_reason(dir.path()).empty();
  for (const char* v : {"dsync", "direct"}) {
    const Outcome w = run_bench("fadvise --dir " + dir.path().string() +
                                " --bs 4k --threads 2 --variants none --write-size 64k --write-variants " + v +
                                " --drop-with fadvise --corrupt-for-test");
    // Where the scratch directory refuses O_DIRECT the direct variant cannot run: it says so.
    if (!direct_ok && std::string(v) == "direct" && w.status == 0 && w.output.find("not run: ") != std::string::npos)
      continue;
    EXPECT_EQ(w.status, 3) << w.output;
    EXPECT_NE(w.output.find("checksum verification failed after write variant '" + std::string(v) + "'"),
              std::string::npos)
        << w.output;
  }
#endif
}

}  // namespace
