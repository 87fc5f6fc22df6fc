// The controller's tai-bench subcommands (overhead, idle, randread --via controller) run on tiny
// sizes through the built binary: exit status 0, a table with every promised row and a number
// in every measured column, the target lines, and a CSV of the same shape. Bad options exit
// non-zero with a message. Numbers are not judged here (a test machine is too noisy): only that
// each was measured.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "support/bench_runner.hpp"
#include "support/test_env.hpp"
#include "tai/engine_selector.hpp"

namespace {

using Outcome = tai::test::BenchOutcome;
using tai::test::run_bench;

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

/// How many lines of `text` match `re` from their start.
int count_lines(const std::string& text, const std::regex& re) {
  std::istringstream in(text);
  int n = 0;
  for (std::string line; std::getline(in, line);)
    if (std::regex_search(line, re, std::regex_constants::match_continuous)) ++n;
  return n;
}

bool engine_available(const std::string& name) {
  for (const auto& e : tai::list_engines())
    if (e.name == name) return e.available;
  return false;
}

const std::string kNum = R"([0-9]+(\.[0-9]+)?)";

TEST(BenchController, OverheadTinyHasEveryConfigurationTheTargetsAndCsv) {
  SKIP_WITHOUT_BENCH();
  tai::test::ScratchDir dir;
  const std::string csv = dir.file("overhead.csv");
  const Outcome r = run_bench("overhead --seconds 0.05 --repeat 2 --window 16 --file-size 1M --workers 2 --dir " +
                              dir.path().string() + " --csv " + csv);
  ASSERT_EQ(r.status, 0) << r.output;
  const std::regex header(
      R"(method +engine +tree +threads +window +reqs +rtime +cpu +op/s +cpu_ns/op +flush_ms +op/s\+flush +vs_aio +vs_aio\+flush)");
  EXPECT_TRUE(std::regex_search(r.output, header)) << r.output;
  // method engine tree threads window reqs rtime cpu op/s cpu_ns/op, then the flush and ratio columns.
  auto row = [&](const std::string& start, const std::string& tail) {
    return std::regex(start + " +[0-9]+ +[1-9][0-9]* +" + kNum + " +" + kNum + " +[1-9][0-9]* +" + kNum + " +" + tail);
  };
  const std::string tai_tail = kNum + " +[1-9][0-9]* +" + kNum + " +" + kNum + "$";
  EXPECT_EQ(count_lines(r.output, row("tai +null +Trivial +1", tai_tail)), 1) << r.output;
  EXPECT_EQ(count_lines(r.output, row("tai +null +Trivial +2", tai_tail)), 1) << r.output;
  EXPECT_EQ(count_lines(r.output, row("glibc-aio +page-cache +- +1", R"(- +- +- +-$)")), 1) << r.output;
  EXPECT_EQ(count_lines(r.output, row("pwrite +page-cache +- +1", "- +- +" + kNum + " +-$")), 1) << r.output;
  EXPECT_EQ(count_lines(r.output, row("handoff +page-cache +- +1", "- +- +" + kNum + " +-$")), 1) << r.output;
  EXPECT_EQ(count_lines(r.output, row("tai +posix +Trivial +1", tai_tail)), 1) << r.output;
  EXPECT_EQ(count_lines(r.output, row("tai +posix +Default +1", tai_tail)), 1) << r.output;

  EXPECT_NE(r.output.find("targets:"), std::string::npos) << r.output;
  const std::regex null_target(R"(null engine, BTreeTrivial, [12] thread\(s\): [0-9]+ CPU ns per request end to end \(target <= 300\): (met|MISSED))");
  EXPECT_EQ(std::distance(std::sregex_iterator(r.output.begin(), r.output.end(), null_target), std::sregex_iterator()), 2)
      << r.output;
  for (const char* tree : {"Trivial", "Default"}) {
    const std::regex ratio(std::string("TAI posix ") + tree +
                           R"( / glibc AIO request rate: [0-9.]+x \(target >= [0-9.]+x\): (met|MISSED))");
    EXPECT_TRUE(std::regex_search(r.output, ratio)) << tree << ":\n" << r.output;
  }
  // Against the plain pwrite loop of the same rounds.
  const std::regex null_vs_pwrite(
      R"(null engine, BTreeTrivial, [12] thread\(s\): CPU per request [0-9]+\.[0-9]{3}x a 512 B page-cache pwrite's \(target <= 0\.10x\): (met|MISSED))");
  EXPECT_EQ(std::distance(std::sregex_iterator(r.output.begin(), r.output.end(), null_vs_pwrite), std::sregex_iterator()), 2)
      << r.output;
  const std::regex posix_vs_pwrite(
      R"(TAI posix Trivial / plain pwrite loop request rate: [0-9]+\.[0-9]{2}x \(target >= 0\.9x\): (met|MISSED))");
  EXPECT_TRUE(std::regex_search(r.output, posix_vs_pwrite)) << r.output;
  // The host's ceiling for a hand-off, and TAI against it.
  const std::regex handoff_vs_pwrite(
      R"(ideal hand-off \(a spinning ring to a second thread\) / plain pwrite loop request rate: [0-9]+\.[0-9]{2}x)");
  EXPECT_TRUE(std::regex_search(r.output, handoff_vs_pwrite)) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(TAI posix Trivial / ideal hand-off request rate: [0-9]+\.[0-9]{2}x)")))
      << r.output;

  const auto lines = lines_of(csv);
  ASSERT_EQ(lines.size(), 8u) << "header + 7 configurations";
  EXPECT_EQ(lines[0],
            "method,engine,tree,threads,window,bs,pattern,reqs,rtime_ms,utime_ms,stime_ms,cpu_ms,ops_per_s,cpu_ns_per_op,"
            "flush_ms,ops_per_s_with_flush,ratio_vs_aio,ratio_vs_aio_with_flush,runs");
  EXPECT_EQ(lines[1].rfind("tai,null,Trivial,1,16,512,random,", 0), 0u) << lines[1];
  EXPECT_EQ(lines[3].rfind("glibc-aio,page-cache,-,1,64,512,random,", 0), 0u) << lines[3];
  for (std::size_t i = 1; i < lines.size(); ++i) EXPECT_EQ(lines[i].substr(lines[i].size() - 2), ",2") << lines[i];
}

TEST(BenchController, OverheadRejectsBadOptions) {
  SKIP_WITHOUT_BENCH();
  const Outcome pattern = run_bench("overhead --pattern diagonal");
  EXPECT_EQ(pattern.status, 2) << pattern.output;
  EXPECT_NE(pattern.output.find("--pattern must be random or sequential"), std::string::npos) << pattern.output;
  const Outcome bs = run_bench("overhead --bs 0");
  EXPECT_EQ(bs.status, 2) << bs.output;
  const Outcome configs = run_bench("overhead --configs null,teleport");
  EXPECT_EQ(configs.status, 2) << configs.output;
  EXPECT_NE(configs.output.find("unknown configuration 'teleport'"), std::string::npos) << configs.output;
}

TEST(BenchController, IdleTinyHasEveryWindowAndTheTarget) {
  SKIP_WITHOUT_BENCH();
  tai::test::ScratchDir dir;
  const std::string csv = dir.file("idle.csv");
  const Outcome r = run_bench("idle --seconds 0.2 --settle 0.05 --warmup-writes 64 --burst 32 --dir " +
                              dir.path().string() + " --csv " + csv);
  ASSERT_EQ(r.status, 0) << r.output;
  const std::regex header(R"(phase +from_ms +to_ms +rtime +utime +stime +cpu +%core +vcsw +rounds +sleeps)");
  EXPECT_TRUE(std::regex_search(r.output, header)) << r.output;
  const std::string usage = " +" + kNum + " +" + kNum + " +" + kNum + " +" + kNum + " +" + kNum + " +[0-9]+";
  EXPECT_EQ(count_lines(r.output, std::regex("no-controller +0 +200" + usage + " +- +-$")), 1) << r.output;
  EXPECT_EQ(count_lines(r.output, std::regex("idle +0 +200" + usage + " +[0-9]+ +[0-9]+$")), 1) << r.output;
  for (const char* window : {"0 +10", "10 +100", "100 +200"})
    EXPECT_EQ(count_lines(r.output, std::regex(std::string("after-burst +") + window + usage + " +- +-$")), 1)
        << window << ":\n" << r.output;
  EXPECT_EQ(count_lines(r.output, std::regex("after-burst +0 +200" + usage + " +[0-9]+ +[0-9]+$")), 1) << r.output;
  EXPECT_TRUE(std::regex_search(
      r.output, std::regex(R"(target: idle controller with 2 workers < 1% of one core: [0-9.]+% -> (met|MISSED))")))
      << r.output;

  const auto lines = lines_of(csv);
  ASSERT_EQ(lines.size(), 7u) << "header + 6 windows";
  EXPECT_EQ(lines[0],
            "phase,from_ms,to_ms,workers,rtime_ms,utime_ms,stime_ms,cpu_ms,percent_core,voluntary_switches,rounds,sleeps,"
            "runs");
  EXPECT_EQ(lines[2].rfind("idle,0,200,2,", 0), 0u) << lines[2];
}

TEST(BenchController, MemoryTinyHasEveryWorkloadAndTheTarget) {
  SKIP_WITHOUT_BENCH();
  tai::test::ScratchDir dir;
  const Outcome r = run_bench("memory --bytes 16M --dir " + dir.path().string());
  ASSERT_EQ(r.status, 0) << r.output;
  const std::regex header(R"(workload +bytes +seconds +MiB/s +peak_rss_MiB +peak_heap_MiB +copy_waits)");
  EXPECT_TRUE(std::regex_search(r.output, header)) << r.output;
  for (const char* w : {"sequential", "random", "no-wait"})
    EXPECT_EQ(count_lines(r.output, std::regex(std::string(w) + " +16 MiB +" + kNum + " +" + kNum + " +" + kNum +
                                                   " +(" + kNum + "|-) +[0-9]+$")),
              1)
        << w << ":\n" << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(target: peak RSS <= strict quota \+ 64 MiB = 72 MiB -> (met|MISSED))")))
      << r.output;
  const Outcome bad = run_bench("memory --bytes 1K --dir " + dir.path().string());
  EXPECT_EQ(bad.status, 2) << bad.output;
}

TEST(BenchController, RandreadViaControllerAddsAControllerRowWithItsRatio) {
  SKIP_WITHOUT_BENCH();
  if (!engine_available("uring")) GTEST_SKIP() << "io_uring is not available here";
  tai::test::ScratchDir dir;
  TAI_SKIP_WITHOUT_DIRECT_IO(dir.path());  // randread reads its file with O_DIRECT
  const std::string csv = dir.file("randread.csv");
  const Outcome r = run_bench("randread --via controller --file " + dir.file("rr.dat") +
                              " --size 4M --bs 4k --depth 8 --reqs 256 --repeat 2 --csv " + csv);
  ASSERT_EQ(r.status, 0) << r.output;
  const std::regex header(R"(backend +reqs +bufsize +depth +rtime +utime +stime +cpu +us/op +op/s +MB/s +vs_queue)");
  EXPECT_TRUE(std::regex_search(r.output, header)) << r.output;
  const std::string cols = " +256 +4096 +8 +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +" + kNum + " +[1-9][0-9]* +" + kNum;
  EXPECT_EQ(count_lines(r.output, std::regex("uring" + cols + " +-$")), 1) << r.output;
  EXPECT_EQ(count_lines(r.output, std::regex("uring/ctl" + cols + " +[0-9]+\\.[0-9]{3}$")), 1) << r.output;
  EXPECT_TRUE(std::regex_search(
      r.output, std::regex(R"(uring bs +4096: controller [0-9]+ op/s, queue [0-9]+ op/s, controller/queue [0-9.]+)")))
      << r.output;

  const auto lines = lines_of(csv);
  ASSERT_EQ(lines.size(), 3u) << "header + queue row + controller row";
  EXPECT_EQ(lines[0].substr(lines[0].size() - std::string(",via,ratio_vs_queue").size()), ",via,ratio_vs_queue");
  EXPECT_NE(lines[1].find(",queue,"), std::string::npos) << lines[1];
  EXPECT_EQ(lines[2].rfind("uring/ctl,256,4096,8,", 0), 0u) << lines[2];
  EXPECT_NE(lines[2].find(",controller,"), std::string::npos) << lines[2];
}

TEST(BenchController, RandreadRejectsAnUnknownVia) {
  SKIP_WITHOUT_BENCH();
  const Outcome r = run_bench("randread --via teleport");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("--via"), std::string::npos) << r.output;
}

}  // namespace
