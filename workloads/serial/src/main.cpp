// tai-serial: the augmentation pipeline as a naive single-threaded program, and the comparison of
// the ways TAI can speed it up. See README.md.
#include <fmt/core.h>

#include <cstdio>
#include <fstream>

#include "bench.hpp"
#include "modes.hpp"
#include "options.hpp"

namespace {
using namespace serial;

void print_outcome(const RunOutcome& r, unsigned amplify) {
  fmt::print("{}: {:.2f} s, {:.1f} images/s, {:.1f} MB (amplify {}), compute {:.2f} s, in I/O {:.2f} s (fsync {:.2f} s, "
             "{} fsyncs), {} writes\n",
             r.mode, r.wall_s, r.wall_s > 0 ? r.images / r.wall_s : 0.0, r.bytes / 1e6, amplify, r.compute_s, r.io_s,
             r.fsync_s, r.fsyncs, r.writes);
  fmt::print("{}: ran: {}\n", r.mode, r.note);
  if (r.skipped) fmt::print("{}: {} images did not decode and were skipped\n", r.mode, r.skipped);
}

int run_single(const RunOptions& o) {
  std::string err;
  Workload workload;
  if (!ensure_directory(o.output, &err) || !make_workload(o, workload, &err)) {
    fmt::print(stderr, "tai-serial: {}\n", err);
    return 2;
  }
  const bool child = !o.result_file.empty();
  if (!child)
    fmt::print("run: {} images ({}), amplify {}, fsync every {}, {}, output in {}/\n", workload.input.size(), o.sizes,
               workload.amplify, o.fsync_every ? std::to_string(o.fsync_every) : std::string("end only"),
               o.direct ? "O_DIRECT" : "buffered", o.output);
  RunOutcome r = run_mode(o, workload);
  if (child) {
    // The bench (or the preload mode) reads this once the process has exited.
    std::ofstream out(o.result_file);
    out << to_result_line(r) << '\n';
    return out && r.ok() ? 0 : 1;
  }
  if (r.status == "unavailable") {
    fmt::print("{}: unavailable: {}\n", r.mode, r.message);
    return 0;
  }
  if (!r.ok()) {
    fmt::print("{}: FAILED: {}\n", r.mode, r.message);
    return 1;
  }
  print_outcome(r, workload.amplify);
  if (o.verify) {
    const std::string problem = verify_output(r);
    if (!problem.empty()) {
      fmt::print("verify: FAILED: {}\n", problem);
      return 1;
    }
    if (r.manifest.empty())
      fmt::print("verify: ok: {} writes nothing to read back\n", r.mode);
    else
      fmt::print("verify: ok: {} records, {:.1f} MB read back: every CRC and index entry matches, every record decodes "
                 "as PNG\n",
                 r.writes, r.bytes / 1e6);
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  // Line-buffered even into a pipe: a run that dies keeps every line it printed before.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  CommandLine cl;
  if (std::optional<int> code = parse_command_line(argc, argv, cl)) return *code;
  if (cl.bench) {
    std::string command;
    for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
    return run_bench(cl.run, cl.bench_options, command);
  }
  return run_single(cl.run);
}
