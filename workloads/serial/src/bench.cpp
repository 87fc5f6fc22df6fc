#include "bench.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>

#include "modes.hpp"

namespace serial {

namespace {
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}
}  // namespace

std::vector<BenchRow> bench_rows(const std::vector<Mode>& modes, const std::vector<RunOutcome>& runs, unsigned fsync_every,
                                 bool direct) {
  std::vector<BenchRow> rows;
  for (Mode mode : modes) {
    BenchRow row;
    row.mode = mode_name(mode);
    row.fsync_every = fsync_every;
    row.direct = direct;
    std::vector<double> wall, compute, io, fsync, images, bytes;
    for (const RunOutcome& r : runs) {
      if (r.mode != row.mode || r.fsync_every != fsync_every || !r.ok()) continue;
      wall.push_back(r.wall_s), compute.push_back(r.compute_s), io.push_back(r.io_s), fsync.push_back(r.fsync_s);
      images.push_back(double(r.images)), bytes.push_back(double(r.bytes));
      row.note = r.note;
    }
    if (wall.empty()) continue;
    row.runs = wall.size();
    row.wall_s = median(wall), row.compute_s = median(compute), row.io_s = median(io), row.fsync_s = median(fsync);
    row.images = median(images), row.bytes = median(bytes);
    rows.push_back(row);
  }
  auto find = [&](const char* name) -> const BenchRow* {
    for (const BenchRow& r : rows)
      if (r.mode == name) return &r;
    return nullptr;
  };
  const BenchRow* posix = find("posix");
  for (BenchRow& r : rows)
    if (posix && r.wall_s > 0) r.speedup = posix->wall_s / r.wall_s;
  const BenchRow* compute = find("compute-only");
  if (posix && compute) {
    BenchRow c;
    c.ceiling = true;
    c.mode = "ceiling";
    c.fsync_every = fsync_every;
    c.direct = direct;
    c.runs = std::min(posix->runs, compute->runs);
    c.compute_s = compute->wall_s;
    c.io_s = std::max(0.0, posix->wall_s - compute->wall_s);
    c.wall_s = std::max(c.compute_s, c.io_s);
    c.images = posix->images;
    c.bytes = posix->bytes;
    c.speedup = overlap_ceiling(compute->wall_s, posix->wall_s);
    c.note = fmt::format("no overlap beats posix / max(C, P - C) with C = compute-only {:.2f} s, P = posix {:.2f} s",
                         compute->wall_s, posix->wall_s);
    rows.push_back(c);
  }
  return rows;
}

std::string format_table(const std::vector<BenchRow>& rows) {
  std::string out = fmt::format("{:<13} {:>6} {:<8} {:>4} {:>8} {:>9} {:>8} {:>9} {:>8} {:>8} {:>8}  {}\n", "mode", "fsync",
                                "I/O", "runs", "wall s", "images/s", "vs posix", "compute s", "in I/O s", "fsync s",
                                "MB", "what ran");
  for (const BenchRow& r : rows) {
    const std::string speedup = r.speedup > 0 ? fmt::format("{:.2f}x", r.speedup) : "-";
    out += fmt::format("{:<13} {:>6} {:<8} {:>4} {:>8.2f} {:>9.1f} {:>8} {:>9.2f} {:>8.2f} {:>8} {:>8.1f}  {}\n", r.mode,
                       r.fsync_every ? std::to_string(r.fsync_every) : std::string("end"),
                       r.direct ? "direct" : "buffered", r.runs, r.wall_s, r.wall_s > 0 ? r.images / r.wall_s : 0.0,
                       speedup, r.compute_s, r.io_s, r.ceiling ? std::string("-") : fmt::format("{:.2f}", r.fsync_s),
                       r.bytes / 1e6, r.note);
  }
  return out;
}

std::string format_csv(const std::vector<BenchRow>& rows) {
  std::string out =
      "mode,fsync_every,io,runs,wall_s_median,images_per_s,speedup_vs_posix,compute_s_median,io_s_median,fsync_s_median,"
      "mb_written,what_ran\n";
  for (const BenchRow& r : rows)
    out += fmt::format("{},{},{},{},{:.4f},{:.2f},{},{:.4f},{:.4f},{},{:.2f},{}\n", r.mode, r.fsync_every,
                       r.direct ? "direct" : "buffered", r.runs, r.wall_s, r.wall_s > 0 ? r.images / r.wall_s : 0.0,
                       r.speedup > 0 ? fmt::format("{:.4f}", r.speedup) : std::string(), r.compute_s, r.io_s,
                       r.ceiling ? std::string() : fmt::format("{:.4f}", r.fsync_s), r.bytes / 1e6, csv_field(r.note));
  return out;
}

int run_bench(const RunOptions& base, const BenchOptions& b, const std::string& command) {
  std::string err;
  if (!ensure_directory(base.output, &err)) {
    fmt::print(stderr, "tai-serial bench: {}\n", err);
    return 2;
  }
  // The parent makes the input set only to fix the amplification every child then uses.
  Workload workload;
  if (!make_workload(base, workload, &err)) {
    fmt::print(stderr, "tai-serial bench: {}\n", err);
    return 2;
  }
  std::vector<Mode> modes = b.modes;
  std::vector<std::string> notes;
  if (std::find(modes.begin(), modes.end(), Mode::preload) != modes.end()) {
    const std::string lib = base.preload_lib.empty() ? built_preload_library() : base.preload_lib;
    if (lib.empty()) {
      notes.push_back("preload: skipped: unavailable: libtai-preload.so not built");
      modes.erase(std::remove(modes.begin(), modes.end(), Mode::preload), modes.end());
    }
  }
  fmt::print("bench: {} images ({}), amplify {}, {} repeat(s) interleaved, fsync every {}, {}, output in {}/\n",
             workload.input.size(), base.sizes, workload.amplify, b.repeats, fmt::format("{}", [&] {
               std::string s;
               for (unsigned f : b.fsync_list) s += (s.empty() ? "" : ",") + std::to_string(f);
               return s;
             }()),
             base.direct ? "O_DIRECT" : "buffered", base.output);
  for (const std::string& n : notes) fmt::print("{}\n", n);

  std::vector<RunOutcome> runs;
  bool failed = false;
  std::size_t verified = 0;
  std::map<std::string, std::string> unavailable;
  const auto t0 = std::chrono::steady_clock::now();
  for (unsigned r = 0; r < b.repeats; ++r)
    for (unsigned every : b.fsync_list)
      for (Mode mode : interleaved_order(modes, r)) {
        if (unavailable.count(mode_name(mode))) continue;
        RunOptions o = base;
        o.mode = mode;
        o.fsync_every = every;
        o.amplify = workload.amplify;
        o.run_name = fmt::format("{}.f{}", mode_name(mode), every);
        RunOutcome res = mode == Mode::preload ? run_mode(o, workload) : run_child(o, mode, {}, workload.amplify);
        res.mode = mode_name(mode);
        const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (res.status == "unavailable") {
          unavailable[res.mode] = res.message;
          fmt::print("{}: skipped: unavailable: {}\n", res.mode, res.message);
          continue;
        }
        std::string check = "not checked";
        if (res.ok() && res.manifest.empty()) {
          check = "no output";
        } else if (res.ok() && base.verify) {
          const std::string problem = verify_output(res);
          if (problem.empty()) {
            check = "verify ok";
            ++verified;
          } else {
            res.status = "failed";
            res.message = "verify: " + problem;
          }
        }
        if (!res.ok()) {
          fmt::print("repeat {} fsync {:>3} {:<13} FAILED: {}\n", r + 1, every, res.mode, res.message);
          failed = true;
        } else {
          fmt::print("repeat {} fsync {:>3} {:<13} {:7.2f} s  compute {:6.2f} s  in I/O {:6.2f} s  fsync {:6.2f} s  {}  "
                     "[{:.0f} s elapsed]\n",
                     r + 1, every, res.mode, res.wall_s, res.compute_s, res.io_s, res.fsync_s, check, elapsed);
        }
        if (!b.keep) remove_output(res);
        runs.push_back(std::move(res));
      }

  std::vector<BenchRow> all;
  fmt::print("\n");
  for (unsigned every : b.fsync_list) {
    const std::vector<BenchRow> rows = bench_rows(modes, runs, every, base.direct);
    fmt::print("{}", format_table(rows));
    for (const BenchRow& row : rows)
      if (row.mode == "async")
        for (const BenchRow& c : rows)
          if (c.ceiling && c.speedup > 0)
            fmt::print("async reaches {:.0f}% of the ceiling at fsync every {}\n", 100 * row.speedup / c.speedup, every);
    fmt::print("\n");
    all.insert(all.end(), rows.begin(), rows.end());
  }
  fmt::print("(medians of the repeats; wall s = open to close, the final fsync included; compute s = decode + transform "
             "+ encode + CRC32C inside the loop; in I/O s = time in open/pwrite/fsync/close (async: submitting and "
             "waiting); MB = the output file; every mode ran as a child process of this one)\n");
  fmt::print("command: {}\n", command);
  for (const auto& [mode, why] : unavailable) fmt::print("{}: unavailable: {}\n", mode, why);
  if (!b.csv.empty()) {
    std::ofstream csv(b.csv);
    csv << format_csv(all);
    if (!csv) {
      fmt::print(stderr, "tai-serial bench: cannot write --csv {}\n", b.csv);
      failed = true;
    }
  }
  if (base.verify && !failed) fmt::print("verify: ok: {} runs read back (every run that writes)\n", verified);
  return failed ? 1 : 0;
}

}  // namespace serial
