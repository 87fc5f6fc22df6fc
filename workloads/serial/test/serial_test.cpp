// tai-serial's pure parts (options, the ceiling, medians, the order of runs, the result line, the
// table) and the output check: a run's output read back, and a corrupted one refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "bench.hpp"
#include "modes.hpp"
#include "options.hpp"
#include "outcome.hpp"

namespace serial {
namespace {

std::optional<int> parse(std::vector<std::string> args, CommandLine& cl) {
  args.insert(args.begin(), "tai-serial");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return parse_command_line(int(argv.size()), argv.data(), cl);
}

TEST(Ceiling, IsPosixOverTheLargerOfComputeAndIo) {
  // P = 10, C = 6: the I/O is 4, the overlapped program still computes for 6.
  EXPECT_DOUBLE_EQ(overlap_ceiling(6, 10), 10.0 / 6.0);
  // C = 3: the I/O (7) dominates.
  EXPECT_DOUBLE_EQ(overlap_ceiling(3, 10), 10.0 / 7.0);
  // Balanced: the best case, 2x.
  EXPECT_DOUBLE_EQ(overlap_ceiling(5, 10), 2.0);
  // Compute-only slower than posix (noise): no overlap gain, the ceiling is below 1.
  EXPECT_DOUBLE_EQ(overlap_ceiling(12, 10), 10.0 / 12.0);
  EXPECT_EQ(overlap_ceiling(0, 10), 0);
  EXPECT_EQ(overlap_ceiling(5, 0), 0);
}

TEST(Median, OddEvenAndEmpty) {
  EXPECT_EQ(median({3, 1, 2}), 2);
  EXPECT_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(median({}), 0);
}

TEST(Order, RotatesTheModesPerRepeat) {
  const std::vector<Mode> m = {Mode::posix, Mode::drop_in, Mode::async};
  EXPECT_EQ(interleaved_order(m, 0), m);
  EXPECT_EQ(interleaved_order(m, 1), (std::vector<Mode>{Mode::drop_in, Mode::async, Mode::posix}));
  EXPECT_EQ(interleaved_order(m, 3), m);
}

TEST(Modes, NamesRoundTrip) {
  for (Mode m : all_modes()) EXPECT_EQ(parse_mode(mode_name(m)), m);
  EXPECT_FALSE(parse_mode("dropin"));
  EXPECT_EQ(all_modes().size(), 6u);
}

TEST(Options, UnsignedLists) {
  std::vector<unsigned> v;
  ASSERT_TRUE(parse_unsigned_list("1,30,300", v));
  EXPECT_EQ(v, (std::vector<unsigned>{1, 30, 300}));
  ASSERT_TRUE(parse_unsigned_list("0", v));
  EXPECT_EQ(v, (std::vector<unsigned>{0}));
  for (const char* bad : {"", ",", "1,", ",1", "1,,2", "x", "-1", "1.5", "99999999"}) EXPECT_FALSE(parse_unsigned_list(bad, v)) << bad;
}

TEST(Options, SingleRun) {
  CommandLine cl;
  ASSERT_FALSE(parse({"--mode", "drop-in", "--images", "12", "--fsync-every", "7", "--direct", "--output", "d"}, cl));
  EXPECT_FALSE(cl.bench);
  EXPECT_EQ(cl.run.mode, Mode::drop_in);
  EXPECT_EQ(cl.run.images, 12u);
  EXPECT_EQ(cl.run.fsync_every, 7u);
  EXPECT_TRUE(cl.run.direct);
  EXPECT_EQ(cl.run.output, "d");
}

TEST(Options, Defaults) {
  CommandLine cl;
  ASSERT_FALSE(parse({}, cl));
  EXPECT_EQ(cl.run.mode, Mode::posix);
  EXPECT_EQ(cl.run.fsync_every, 30u);
  EXPECT_EQ(cl.run.amplify, 0u);  // auto: at least --min-mib per run
  EXPECT_GE(cl.run.min_mib, 256);
  EXPECT_FALSE(cl.run.direct);
}

TEST(Options, BenchTakesListsAndOptionsOnEitherSide) {
  CommandLine cl;
  ASSERT_FALSE(parse({"--images", "5", "bench", "--repeats", "4", "--fsync-every", "1,30", "--modes", "async,posix,async",
                      "--verify", "--csv", "x.csv"},
                     cl));
  EXPECT_TRUE(cl.bench);
  EXPECT_EQ(cl.run.images, 5u);
  EXPECT_TRUE(cl.run.verify);
  EXPECT_EQ(cl.bench_options.repeats, 4u);
  EXPECT_EQ(cl.bench_options.fsync_list, (std::vector<unsigned>{1, 30}));
  EXPECT_EQ(cl.bench_options.modes, (std::vector<Mode>{Mode::async, Mode::posix}));
  EXPECT_EQ(cl.bench_options.csv, "x.csv");
  CommandLine d;
  ASSERT_FALSE(parse({"bench"}, d));
  EXPECT_EQ(d.bench_options.fsync_list, (std::vector<unsigned>{1, 30, 300}));
  EXPECT_EQ(d.bench_options.repeats, 3u);
  EXPECT_EQ(d.bench_options.modes, all_modes());
}

TEST(Options, UsageErrorsExitNonZero) {
  for (const std::vector<std::string>& bad : std::vector<std::vector<std::string>>{
           {"--mode", "fast"}, {"--fsync-every", "1,30"}, {"--fsync-every", "x"}, {"--images", "0"},
           {"bench", "--modes", "posix,nope"}, {"--no-such-option"}}) {
    CommandLine cl;
    const std::optional<int> code = parse(bad, cl);
    ASSERT_TRUE(code) << bad.front();
    EXPECT_NE(*code, 0) << bad.front();
  }
  CommandLine cl;
  const std::optional<int> help = parse({"--help"}, cl);
  ASSERT_TRUE(help);
  EXPECT_EQ(*help, 0);
}

TEST(ResultLine, RoundTripsFreeText) {
  RunOutcome o;
  o.mode = "preload";
  o.status = "failed";
  o.message = "pwrite out.taia: No space left on device\nsecond line 100% = bad";
  o.note = "the posix mode, unchanged, in a child under LD_PRELOAD=libtai-preload.so";
  o.manifest = "dir with space/preload.run";
  o.fsync_every = 30;
  o.direct = true;
  o.wall_s = 1.25, o.compute_s = 0.5, o.io_s = 0.75, o.fsync_s = 0.25;
  o.images = 400, o.skipped = 1, o.bytes = 123456789012ull, o.writes = 1200, o.fsyncs = 14;
  const std::string line = to_result_line(o);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  RunOutcome back;
  ASSERT_TRUE(from_result_line(line, back)) << line;
  EXPECT_EQ(back.mode, o.mode);
  EXPECT_EQ(back.status, o.status);
  EXPECT_EQ(back.message, o.message);
  EXPECT_EQ(back.note, o.note);
  EXPECT_EQ(back.manifest, o.manifest);
  EXPECT_EQ(back.fsync_every, 30u);
  EXPECT_TRUE(back.direct);
  EXPECT_DOUBLE_EQ(back.wall_s, 1.25);
  EXPECT_DOUBLE_EQ(back.fsync_s, 0.25);
  EXPECT_EQ(back.bytes, o.bytes);
  EXPECT_EQ(back.fsyncs, 14u);
  EXPECT_FALSE(from_result_line("something else", back));
  EXPECT_FALSE(from_result_line("tai-serial-result mode=posix wall_s=abc", back));
}

TEST(Table, MediansSpeedUpsAndTheCeiling) {
  std::vector<RunOutcome> runs;
  auto add = [&](const char* mode, double wall, double compute) {
    RunOutcome r;
    r.mode = mode, r.fsync_every = 30, r.wall_s = wall, r.compute_s = compute, r.images = 100, r.bytes = 1000000;
    runs.push_back(r);
  };
  add("posix", 10, 6), add("posix", 11, 6), add("posix", 30, 6);  // median 11: one slow run does not count
  add("async", 7, 6), add("async", 8, 6), add("async", 6, 6);
  add("compute-only", 6, 6), add("compute-only", 6.5, 6.5), add("compute-only", 5.5, 5.5);
  RunOutcome failed = runs.front();
  failed.status = "failed", failed.wall_s = 0.1;
  runs.push_back(failed);  // a failed run never enters the medians
  const std::vector<BenchRow> rows = bench_rows({Mode::posix, Mode::drop_in, Mode::async, Mode::compute_only}, runs, 30, false);
  ASSERT_EQ(rows.size(), 4u);  // drop-in has no run: no row; the ceiling row last
  EXPECT_EQ(rows[0].mode, "posix");
  EXPECT_DOUBLE_EQ(rows[0].wall_s, 11);
  EXPECT_EQ(rows[0].runs, 3u);
  EXPECT_DOUBLE_EQ(rows[0].speedup, 1);
  EXPECT_EQ(rows[1].mode, "async");
  EXPECT_DOUBLE_EQ(rows[1].speedup, 11.0 / 7.0);
  EXPECT_TRUE(rows[3].ceiling);
  EXPECT_DOUBLE_EQ(rows[3].speedup, 11.0 / 6.0);  // C = 6, P - C = 5
  EXPECT_DOUBLE_EQ(rows[3].wall_s, 6);
  const std::string table = format_table(rows);
  EXPECT_NE(table.find("ceiling"), std::string::npos);
  EXPECT_NE(table.find("1.57x"), std::string::npos);
  const std::string csv = format_csv(rows);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 5);
}

// A temporary output directory under $TMPDIR (default /tmp), removed with what it holds.
struct TempDir {
  std::string path;
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/tai-serial-test-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::fprintf(stderr, "mkdtemp %s: %s (set TMPDIR to a writable directory)\n", tmpl.c_str(), std::strerror(errno));
      std::abort();
    }
    path = tmpl;
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
};

RunOptions tiny_run(const std::string& dir, Mode mode) {
  RunOptions o;
  o.mode = mode;
  o.images = 5;
  o.sizes = "40x32,56x48";
  o.amplify = 2;
  o.fsync_every = 2;
  o.output = dir;
  return o;
}

TEST(Output, EveryWritingModeReadsBackAndComputeOnlyWritesNothing) {
  TempDir dir;
  for (Mode mode : {Mode::posix, Mode::drop_in, Mode::async, Mode::io_only, Mode::compute_only}) {
    const RunOptions o = tiny_run(dir.path, mode);
    Workload w;
    std::string err;
    ASSERT_TRUE(make_workload(o, w, &err)) << err;
    const RunOutcome r = run_mode(o, w);
    ASSERT_TRUE(r.ok()) << mode_name(mode) << ": " << r.message;
    EXPECT_EQ(r.images, 5u) << mode_name(mode);
    if (mode == Mode::compute_only) {
      EXPECT_TRUE(r.manifest.empty());
      EXPECT_EQ(r.bytes, 0u);
      continue;
    }
    EXPECT_EQ(r.writes, 10u) << mode_name(mode);
    EXPECT_EQ(r.fsyncs, 3u) << mode_name(mode);  // after images 2 and 4, and the final one
    EXPECT_EQ(verify_output(r), "") << mode_name(mode);
  }
}

TEST(Output, ACorruptedRecordIsRefused) {
  TempDir dir;
  const RunOptions o = tiny_run(dir.path, Mode::posix);
  Workload w;
  std::string err;
  ASSERT_TRUE(make_workload(o, w, &err)) << err;
  const RunOutcome r = run_mode(o, w);
  ASSERT_TRUE(r.ok()) << r.message;
  ASSERT_EQ(verify_output(r), "");
  // One byte in the middle of the file flipped: a payload CRC no longer matches.
  const std::string file = dir.path + "/posix.taia";
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f);
  f.seekg(std::streamoff(r.bytes / 2));
  char c = 0;
  f.read(&c, 1);
  f.seekp(std::streamoff(r.bytes / 2));
  c = char(c ^ 0x5a);
  f.write(&c, 1);
  f.close();
  EXPECT_NE(verify_output(r), "");
  // A missing output is refused too.
  ::unlink(file.c_str());
  EXPECT_NE(verify_output(r), "");
}

TEST(Output, PreloadWithoutTheLibraryIsUnavailableNotFailed) {
  TempDir dir;
  RunOptions o = tiny_run(dir.path, Mode::preload);
  o.preload_lib = dir.path + "/no-such-libtai-preload.so";
  Workload w;
  std::string err;
  ASSERT_TRUE(make_workload(o, w, &err)) << err;
  const RunOutcome r = run_mode(o, w);
  EXPECT_EQ(r.status, "unavailable");
  EXPECT_NE(r.message.find("no-such-libtai-preload.so"), std::string::npos);
}

}  // namespace
}  // namespace serial
