// tai-micro: Google Benchmark micro-benchmarks of tai::BTree.
//
//   step/<tree>            cost of one step: a cached 4 KiB write (a block hit) per iteration
//                          through the SequentialDriver; "step" = time per step run
//   cached_write_4k        a 4 KiB write into a cached block of BTreeDefault over a posix file;
//                          inline:1 as shipped (the tree is idle between writes, so start()
//                          does the write itself), inline:0 through the steps
//   pwrite_4k              pwrite(2) of 4 KiB to the page cache, same offsets, same run
//   write_twice/<tree>     write 64 MiB twice (10000-byte writes), then fsync: bytes that
//                          reached the engine (null engine, counted at the executor)
//   tiny_writes/rule:<0|1> 8-byte writes scattered over a clean 2 MiB block, then write-back:
//                          the tiny-write rule on (write-through) or off (bridge the gaps)
// After the run a summary prints the two ratios that have targets (times are this
// thread's CPU time, user + system, so that other load on the machine does not skew them).
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engines/null/null_engine.hpp"
#include "engines/posix/posix_engine.hpp"
#include "tai/btree.hpp"
#include "tai/btree_driver.hpp"

namespace {

// Results the summary compares, by benchmark name (ns per iteration, or bytes).
std::map<std::string, double>& results() {
  static std::map<std::string, double> r;
  return r;
}

/// CPU time of the calling thread (user + system), in ns.
double thread_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

std::string scratch_path(const char* name) {
  const char* base = std::getenv("TAI_BENCH_DIR");
  return std::string(base ? base : "/var/tmp") + "/tai-micro-" + std::to_string(::getpid()) + "-" + name;
}

/// Passes requests to the engine and counts what reaches it.
class CountingExecutor final : public tai::IoExecutor {
 public:
  tai::Completion execute(const tai::Request& r) override {
    ++requests;
    if (r.op == tai::Op::write) bytes_written += r.length;
    return inner_.execute(r);
  }
  std::uint64_t requests = 0;
  std::uint64_t bytes_written = 0;

 private:
  tai::EngineExecutor inner_;
};

struct NullFile {
  NullFile() : engine(tai::engines::make_null({})) {
    file = std::move(engine->open("null", tai::OpenMode(tai::Open::read | tai::Open::write)).value());
  }
  ~NullFile() { (void)engine->close(*file); }
  std::unique_ptr<tai::Engine> engine;
  std::unique_ptr<tai::EngineFile> file;
};

struct PosixFile {
  explicit PosixFile(const char* name) : path(scratch_path(name)), engine(tai::engines::make_posix({})) {
    auto f = engine->open(path, tai::OpenMode(tai::Open::read | tai::Open::write | tai::Open::create | tai::Open::truncate));
    if (!f) {
      std::fprintf(stderr, "%s\n", f.error().message.c_str());
      std::exit(1);
    }
    file = std::move(f.value());
  }
  ~PosixFile() {
    (void)engine->close(*file);
    ::unlink(path.c_str());
  }
  std::string path;
  std::unique_ptr<tai::Engine> engine;
  std::unique_ptr<tai::EngineFile> file;
};

// --- one step per tree shape --------------------------------------------------------------

template <class Tree>
void BM_Step(benchmark::State& state) {
  NullFile nf;
  tai::Quota quota;
  tai::BTreeOptions to;
  to.inline_path = false;  // a block hit on an idle tree would run no step at all
  Tree tree(nf.file.get(), quota, to);
  CountingExecutor io;
  tai::SequentialDriver::Options o;
  o.executor = &io;
  tai::SequentialDriver driver(o);
  std::vector<std::byte> data(4096, std::byte{1});
  tai::Operation op(tai::TreeOp::write, 1 << 20, data.size(), data.data());
  driver.run_one(tree, op);  // the block exists from now on (not for BTreeTrivial)
  const std::uint64_t steps0 = driver.steps_run();
  for (auto _ : state) {
    driver.run_one(tree, op);
    benchmark::DoNotOptimize(op.result());
  }
  const double steps = static_cast<double>(driver.steps_run() - steps0);
  state.counters["steps/op"] = steps / static_cast<double>(state.iterations());
  state.counters["step"] = benchmark::Counter(steps, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  tai::Operation drop(tai::TreeOp::drop, 0, 0);
  driver.run_one(tree, drop);
}
BENCHMARK_TEMPLATE(BM_Step, tai::BTreeDefault)->Name("step/BTreeDefault");
BENCHMARK_TEMPLATE(BM_Step, tai::BTreeTrivial)->Name("step/BTreeTrivial");
BENCHMARK_TEMPLATE(BM_Step, tai::BTreeBinary)->Name("step/BTreeBinary");

// --- cached 4 KiB write vs pwrite 4 KiB -----------------------------------------------------

constexpr int kBlocks = 256;  // 1 MiB working set: cache-resident in both cases

void BM_CachedWrite4K(benchmark::State& state) {
  const bool inline_path = state.range(0) != 0;
  PosixFile pf("cached");
  tai::Quota quota;
  tai::BTreeOptions to;
  to.inline_path = inline_path;
  tai::BTreeDefault tree(pf.file.get(), quota, to);
  tai::SequentialDriver driver;
  std::vector<std::byte> data(4096, std::byte{7});
  tai::Operation op(tai::TreeOp::write, 0, data.size(), data.data());
  for (int i = 0; i < kBlocks; ++i) {
    op.offset = std::uint64_t(i) * 4096;
    driver.run_one(tree, op);
  }
  int i = 0;
  const double t0 = thread_cpu_ns();
  for (auto _ : state) {
    op.offset = std::uint64_t(i++ % kBlocks) * 4096;
    driver.run_one(tree, op);
    benchmark::DoNotOptimize(op.result());
  }
  results()[inline_path ? "cached_write_4k" : "cached_write_4k_steps"] =
      (thread_cpu_ns() - t0) / static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 4096);
  tai::Operation sync(tai::TreeOp::fsync, 0, 0);
  driver.run_one(tree, sync);
  tai::Operation drop(tai::TreeOp::drop, 0, 0);
  driver.run_one(tree, drop);
}
BENCHMARK(BM_CachedWrite4K)->Name("cached_write_4k")->ArgName("inline")->Arg(1)->Arg(0);

void BM_Pwrite4K(benchmark::State& state) {
  const std::string path = scratch_path("pwrite");
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    state.SkipWithError("cannot create the scratch file");
    return;
  }
  std::vector<char> data(4096, 7);
  for (int i = 0; i < kBlocks; ++i) (void)!::pwrite(fd, data.data(), data.size(), off_t(i) * 4096);
  int i = 0;
  const double t0 = thread_cpu_ns();
  for (auto _ : state) {
    benchmark::DoNotOptimize(::pwrite(fd, data.data(), data.size(), off_t(i++ % kBlocks) * 4096));
  }
  results()["pwrite_4k"] = (thread_cpu_ns() - t0) / static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 4096);
  ::close(fd);
  ::unlink(path.c_str());
}
BENCHMARK(BM_Pwrite4K)->Name("pwrite_4k");

// --- write everything twice: bytes reaching the engine --------------------------------------

template <class Tree>
void BM_WriteTwice(benchmark::State& state, const char* key) {
  constexpr std::uint64_t kRegion = std::uint64_t{64} << 20, kWrite = 10000;
  std::vector<std::byte> data(kWrite, std::byte{3});
  std::uint64_t bytes = 0, requests = 0;
  for (auto _ : state) {
    NullFile nf;
    tai::Quota quota;  // unlimited: the 64 MiB fit
    Tree tree(nf.file.get(), quota);
    CountingExecutor io;
    tai::SequentialDriver::Options o;
    o.executor = &io;
    tai::SequentialDriver driver(o);
    tai::Operation op(tai::TreeOp::write, 0, kWrite, data.data());
    for (int pass = 0; pass < 2; ++pass) {
      for (std::uint64_t off = 0; off < kRegion; off += kWrite) {
        op.offset = off;
        op.length = std::min(kWrite, kRegion - off);
        driver.run_one(tree, op);
      }
    }
    tai::Operation sync(tai::TreeOp::fsync, 0, 0);
    driver.run_one(tree, sync);
    bytes = io.bytes_written;
    requests = io.requests;
    tai::Operation drop(tai::TreeOp::drop, 0, 0);
    driver.run_one(tree, drop);
  }
  state.counters["bytes_to_engine"] = static_cast<double>(bytes);
  state.counters["engine_requests"] = static_cast<double>(requests);
  state.counters["x_written"] = static_cast<double>(bytes) / static_cast<double>(kRegion);
  results()[key] = static_cast<double>(bytes);
}
void BM_WriteTwiceDefault(benchmark::State& state) { BM_WriteTwice<tai::BTreeDefault>(state, "write_twice_default"); }
void BM_WriteTwiceTrivial(benchmark::State& state) { BM_WriteTwice<tai::BTreeTrivial>(state, "write_twice_trivial"); }
BENCHMARK(BM_WriteTwiceDefault)->Name("write_twice/BTreeDefault")->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_WriteTwiceTrivial)->Name("write_twice/BTreeTrivial")->Unit(benchmark::kMillisecond)->Iterations(3);

// --- the tiny-write rule -------------------------------------------------------------------

void BM_TinyWrites(benchmark::State& state) {
  constexpr std::uint64_t k2M = std::uint64_t{2} << 20;
  const bool rule = state.range(0) != 0;
  PosixFile pf(rule ? "tiny1" : "tiny0");
  tai::Quota quota;
  tai::BTreeOptions opt;
  opt.tiny_write_rule = rule;
  tai::BTreeDefault tree(pf.file.get(), quota, opt);
  tai::SequentialDriver driver;
  std::vector<std::byte> big(k2M, std::byte{1}), tiny(8, std::byte{2});
  tai::Operation op(tai::TreeOp::write, 0, k2M, big.data());
  driver.run_one(tree, op);  // one 2 MiB block
  tai::Operation wb(tai::TreeOp::write_back, 0, 0);
  driver.run_one(tree, wb);  // clean and valid
  std::mt19937_64 rng(1);
  const tai::BTreeStats before = tree.stats();
  constexpr int kWritesPerRound = 16;  // then a write-back, as a flush round would
  for (auto _ : state) {
    for (int k = 0; k < kWritesPerRound; ++k) {
      tai::Operation w(tai::TreeOp::write, rng() % (k2M - 8), 8, tiny.data());
      driver.run_one(tree, w);
    }
    driver.run_one(tree, wb);
  }
  const tai::BTreeStats after = tree.stats();
  const double writes = static_cast<double>(state.iterations()) * kWritesPerRound;
  state.counters["engine_bytes/write"] = static_cast<double>(after.bytes_to_engine - before.bytes_to_engine) / writes;
  state.counters["engine_requests/write"] = static_cast<double>(after.engine_writes - before.engine_writes) / writes;
  state.counters["write_throughs/write"] = static_cast<double>(after.write_throughs - before.write_throughs) / writes;
  state.counters["per_write"] = benchmark::Counter(writes, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  tai::Operation drop(tai::TreeOp::drop, 0, 0);
  driver.run_one(tree, drop);
}
BENCHMARK(BM_TinyWrites)->Name("tiny_writes")->ArgName("rule")->Arg(1)->Arg(0)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  const auto& r = results();
  std::printf("\nsummary\n");
  if (r.count("cached_write_4k") && r.count("cached_write_4k_steps"))
    std::printf("  cached 4 KiB write through the steps (inline path off) %.0f ns CPU\n", r.at("cached_write_4k_steps"));
  if (r.count("cached_write_4k") && r.count("pwrite_4k"))
    std::printf("  cached 4 KiB write %.0f ns CPU, pwrite 4 KiB %.0f ns CPU: cached is %.2fx faster (target >= 3x)\n",
                r.at("cached_write_4k"), r.at("pwrite_4k"), r.at("pwrite_4k") / r.at("cached_write_4k"));
  if (r.count("write_twice_default") && r.count("write_twice_trivial"))
    std::printf("  write everything twice: %.0f vs %.0f bytes reach the engine: BTreeDefault = %.3fx BTreeTrivial "
                "(target <= 0.55x)\n",
                r.at("write_twice_default"), r.at("write_twice_trivial"),
                r.at("write_twice_default") / r.at("write_twice_trivial"));
  return 0;
}
