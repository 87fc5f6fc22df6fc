// `tai-bench write` (the direct-I/O write study): append-only writes of one block size up to a total, buffered
// (then fsync) versus O_DIRECT through libaio and io_uring with several requests in flight. Each
// run prints the study's two lines,
//     Buffered I/O: Wrote 4.29 GB in 1.9s, 2.25 GB/s
//     Buffered I/O: Closed in 4.7s, Amortized total 642.54 MB/s
// where "Closed" is fsync + close (what makes the data durable) and "Amortized" is the bytes over
// write + close time, plus the CPU it cost. With --fio, fio writes the same file the same way
// (same block size, depth, engine, preallocation) for the device's limit, and the table gives
// the ratio. Runs are interleaved (round 1: every variant, round 2: every variant, ...) and the
// table shows medians, so that a noisy machine shifts every variant alike.
//
// Checking: every 4 KiB page written carries a stamp of its own offset (its first word) and a
// body from the data pattern (seeds_util.hpp); after each run the file is read back with O_DIRECT
// (from the device, not the cache) and every byte is compared. A mismatch fails the run (exit 3).
// The stamp is all that changes between blocks, so preparing a block costs bs / 4096 stores, not
// a fill of the block (fio, too, reuses its buffers).
//
// Preallocation (--preallocate auto, the default): the O_DIRECT variants write into a file
// preallocated with fallocate(2) before the clock starts, as fio does by default and as an
// append-only log that uses direct I/O does (on ext4, O_DIRECT writes that extend the file wait
// for each other, which would make a queue depth pointless). The buffered variant appends to an
// empty file, as a buffered log does: its allocation is delayed to write-back. Preallocating for
// buffered writes would be unfair to them: on ext4, buffered writes into unwritten (fallocated)
// extents take a slow path, measured at 10x the system time of plain appends (0.27 s -> 2.7 s
// per GiB). --preallocate all / none apply one rule to every variant.
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tai/detail/aligned_buffer.hpp"
#include "engines/common/alignment.hpp"
#include "tai/engine.hpp"
#include "tai/engine_selector.hpp"
#include "tai_bench/bench_util.hpp"
#include "tai_bench/commands.hpp"
#include "tai_bench/seeds_util.hpp"

namespace tai::bench {
namespace {

using seeds::Failure;
using seeds::run_command;

struct WriteOptions {
  std::string dir = "/var/tmp/tai-bench";
  std::string bs = "512k";
  std::string total = "4G";
  bool beyond_ram = false;
  unsigned depth = 8;
  std::string variants = "buffered,libaio,uring";
  bool fio = false;
  unsigned repeat = 1;
  std::string preallocate = "auto";  // auto (direct variants only), all, none
  std::string verify = "full";
  double settle = 1.0;
  std::string drop_with = "auto";
  std::string csv;
  std::string plot;
  bool corrupt_for_test = false;
};

struct Variant {
  std::string name;    // buffered, posix-direct, libaio, uring, fio-libaio, fio-io_uring
  std::string engine;  // TAI engine name, or fio's ioengine for fio variants
  bool direct = false;
  bool fio = false;
  unsigned depth = 1;
};

std::string label(const Variant& v) {
  if (v.fio) return fmt::format("fio {} (direct, depth {})", v.engine, v.depth);
  if (!v.direct) return fmt::format("Buffered I/O ({})", v.engine);
  return fmt::format("Direct I/O ({}, depth {})", v.engine, v.depth);
}

struct RunResult {
  unsigned round = 0;
  std::string variant;
  double wrote_s = 0;
  double close_s = -1;  // unknown for fio
  double user_s = 0, sys_s = 0, busy_s = 0;
  double fallocate_s = 0;
  bool preallocated = false;
  std::uint64_t bytes = 0;
  double wrote_bps() const { return wrote_s > 0 ? static_cast<double>(bytes) / wrote_s : 0; }
  double amortized_bps() const {
    return close_s >= 0 && wrote_s + close_s > 0 ? static_cast<double>(bytes) / (wrote_s + close_s) : 0;
  }
  std::string cache;
  std::string note;
};

// --- the written data: page stamps over a repeated body ----------------------------------------------

/// Every buffer holds the pattern of file bytes [0, bs); before block k is written, the first
/// word of each of its pages is set to the pattern word of the page's real offset.
void stamp_block(unsigned char* buf, std::uint64_t offset, std::size_t bs, std::uint64_t salt) {
  for (std::size_t p = 0; p < bs; p += seeds::kPatternPage) {
    const std::uint64_t w = seeds::expected_word((offset + p) / 8, salt);
    std::memcpy(buf + p, &w, 8);
  }
}

/// Checks [offset, offset + len) read back (page-aligned) against what stamp_block wrote. Returns
/// the file offset of the first wrong word, with a description, or nullopt.
std::optional<std::string> check_written(const unsigned char* buf, std::uint64_t offset, std::size_t len,
                                         std::size_t bs, std::uint64_t salt) {
  for (std::size_t p = 0; p < len; p += seeds::kPatternPage) {
    const std::uint64_t at = offset + p;
    std::uint64_t stamp;
    std::memcpy(&stamp, buf + p, 8);
    if (stamp != seeds::expected_word(at / 8, salt)) return seeds::describe_mismatch(buf + p, at, salt);
    const std::uint64_t body = at % bs;  // where this page's body comes from in the pattern
    if (auto bad = seeds::find_mismatch(buf + p + 8, body + 8, seeds::kPatternPage - 8, salt)) {
      const std::uint64_t file_off = at + (*bad - body);
      std::uint64_t got, want = seeds::expected_word(*bad / 8, salt);
      std::memcpy(&got, buf + p + (*bad - body), 8);
      return fmt::format("at file offset {}: read 0x{:016x}, expected 0x{:016x}", file_off, got, want);
    }
  }
  return std::nullopt;
}

/// Reads `path` back with O_DIRECT (8 MiB at a time) and checks every byte. Returns an error
/// message (a mismatch starts with "mismatch"), empty when the file is right.
std::string verify_file(const std::string& path, std::uint64_t total, std::size_t bs, std::uint64_t salt) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0 && errno == EINVAL) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fmt::format("verify: open '{}': {}", path, errno_text(errno));
  const std::uint64_t size = static_cast<std::uint64_t>(::lseek(fd, 0, SEEK_END));
  if (size != total) {
    ::close(fd);
    return fmt::format("mismatch: '{}' has {} bytes, {} were written", path, size, total);
  }
  constexpr std::size_t kChunk = 8u << 20;
  detail::AlignedBuffer buf(kChunk, 4096);
  std::string result;
  for (std::uint64_t off = 0; off < total && result.empty(); off += kChunk) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, total - off));
    std::size_t got = 0;
    while (got < n) {
      const ssize_t r = ::pread(fd, buf.data() + got, n - got, static_cast<off_t>(off + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        result = fmt::format("verify: pread '{}' at {}: {}", path, off + got, r < 0 ? errno_text(errno) : "end of file");
        break;
      }
      got += static_cast<std::size_t>(r);
    }
    if (result.empty()) {
      if (auto bad = check_written(reinterpret_cast<const unsigned char*>(buf.data()), off, n, bs, salt))
        result = fmt::format("mismatch in '{}' {}", path, *bad);
    }
  }
  ::close(fd);
  return result;
}

// --- one TAI run ---------------------------------------------------------------------------------

/// Starts a run from a clean machine: nothing dirty from an earlier run is still being written
/// back (the cache dropped with `drop`, through an empty file at `path`, removed again). Returns
/// how the cache was dropped; throws Failure when it could not be.
std::string drop_cache_before_run(const std::string& path, seeds::DropMethod drop) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) ::close(fd);
  std::string error;
  auto how = seeds::drop_cache(path, drop, &error);
  if (!how) throw Failure(1, error);
  ::unlink(path.c_str());
  return *how;
}

RunResult run_tai(const WriteOptions& o, const Variant& v, std::uint64_t bs, std::uint64_t total,
                  const std::string& path, seeds::DropMethod drop, std::uint64_t salt) {
  RunResult res;
  res.variant = v.name;
  res.bytes = total;
  ::unlink(path.c_str());
  res.cache = drop_cache_before_run(path, drop);
  EngineOptions eo;
  eo.depth = v.depth;
  auto made = make_engine(v.engine, eo);
  if (!made) {
    res.note = "not run: " + made.error().message;
    return res;
  }
  std::unique_ptr<Engine> engine = std::move(made.value());
  Open flags = Open::write | Open::create | Open::truncate;
  if (v.direct) flags = flags | Open::direct;
  auto opened = engine->open(path, OpenMode{flags});
  if (!opened) {
    res.note = "not run: " + opened.error().message;
    return res;
  }
  std::unique_ptr<EngineFile> file = std::move(opened.value());

  if (o.preallocate == "all" || (o.preallocate == "auto" && v.direct)) {
    res.preallocated = true;
    const std::int64_t t = now_ns();
    if (::fallocate(file->fd(), 0, 0, static_cast<off_t>(total)) != 0) {
      res.note = fmt::format("fallocate: {} (not preallocated)", errno_text(errno));
      res.preallocated = false;
    }
    res.fallocate_s = static_cast<double>(now_ns() - t) / 1e9;
  }

  const unsigned nbuf = std::max(1u, v.depth);
  std::vector<detail::AlignedBuffer> bufs;
  for (unsigned i = 0; i < nbuf; ++i) {
    bufs.emplace_back(bs, 4096);
    seeds::fill_pattern(bufs.back().data(), 0, bs, salt);
  }
  std::vector<unsigned> free_bufs;
  for (unsigned i = nbuf; i-- > 0;) free_bufs.push_back(i);
  std::vector<Request> pending;
  std::vector<Completion> done(nbuf);
  const std::uint64_t blocks = total / bs;
  std::uint64_t next = 0, completed = 0;

  UsageMeter meter;
  const double busy0 = seeds::machine_busy_seconds();
  const std::int64_t t0 = now_ns();
  while (completed < blocks) {
    while (!free_bufs.empty() && next < blocks) {
      const unsigned b = free_bufs.back();
      free_bufs.pop_back();
      auto* data = reinterpret_cast<unsigned char*>(bufs[b].data());
      stamp_block(data, next * bs, bs, salt);
      Request r;
      r.op = Op::write;
      r.file = file.get();
      r.buffer = data;
      r.offset = next * bs;
      r.length = bs;
      r.user_data = b;
      pending.push_back(r);
      ++next;
    }
    if (!pending.empty()) {
      const std::size_t taken = engine->submit(pending.data(), pending.size());
      pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(taken));
    }
    const std::size_t got = engine->reap(done.data(), done.size(), 1);
    for (std::size_t i = 0; i < got; ++i) {
      const Completion& c = done[i];
      if (c.result != static_cast<std::int64_t>(bs)) {
        const std::string why = c.result < 0 ? c.error().message() : fmt::format("short write of {} bytes", c.result);
        while (engine->in_flight() > 0) (void)engine->reap(done.data(), done.size(), 1);
        (void)engine->close(*file);
        throw Failure(1, fmt::format("{}: write failed: {}", label(v), why));
      }
      free_bufs.push_back(static_cast<unsigned>(c.user_data));
      ++completed;
    }
  }
  const std::int64_t t1 = now_ns();
  // "Closed": fsync (durable) then close, as the write study's close.
  Request sync;
  sync.op = Op::fsync;
  sync.file = file.get();
  Completion sc;
  if (engine->submit(&sync, 1) != 1) throw Failure(1, fmt::format("{}: fsync was not taken", label(v)));
  (void)engine->reap(&sc, 1, 1);
  if (!sc.ok()) throw Failure(1, fmt::format("{}: fsync failed: {}", label(v), sc.error().message()));
  if (auto ec = engine->close(*file)) throw Failure(1, fmt::format("{}: close failed: {}", label(v), ec.message()));
  const std::int64_t t2 = now_ns();
  const Usage u = meter.stop();
  res.busy_s = seeds::machine_busy_seconds() - busy0;
  file.reset();
  engine.reset();
  res.wrote_s = static_cast<double>(t1 - t0) / 1e9;
  res.close_s = static_cast<double>(t2 - t1) / 1e9;
  res.user_s = u.user_ms / 1e3;
  res.sys_s = u.sys_ms / 1e3;

  if (o.corrupt_for_test) {
    if (auto err = seeds::corrupt_byte(path, total / 2 + 4096 + 100); !err.empty()) throw Failure(1, err);
  }
  if (o.verify == "full") {
    const std::string err = verify_file(path, total, bs, salt);
    if (!err.empty()) {
      ::unlink(path.c_str());
      throw Failure(err.rfind("mismatch", 0) == 0 ? seeds::kExitMismatch : 1,
                    fmt::format("{}: checksum verification failed: {}", label(v), err));
    }
  }
  ::unlink(path.c_str());
  return res;
}

// --- one fio run ---------------------------------------------------------------------------------

RunResult run_fio(const WriteOptions& o, const Variant& v, std::uint64_t bs, std::uint64_t total,
                  const std::string& path, seeds::DropMethod drop) {
  RunResult res;
  res.variant = v.name;
  res.bytes = total;
  res.cache = drop_cache_before_run(path, drop);
  const auto fio = find_program("fio");
  if (!fio) {
    res.note = "not run: fio not found in $PATH (make deps installs it)";
    return res;
  }
  std::vector<std::string> argv = {*fio,
                                   "--name=tai-bench-write",
                                   "--filename=" + path,
                                   "--rw=write",
                                   fmt::format("--bs={}", bs),
                                   fmt::format("--size={}", total),
                                   "--direct=1",
                                   "--ioengine=" + v.engine,
                                   fmt::format("--iodepth={}", v.depth),
                                   "--end_fsync=1",
                                   "--output-format=json"};
  if (o.preallocate == "none") argv.push_back("--fallocate=none");
  else res.preallocated = true;  // fio's default: fallocate(2) the file before writing
  int status = -1;
  const std::string json = run_program(argv, &status, true);
  ::unlink(path.c_str());
  if (status != 0) {
    res.note = fmt::format("not run: fio exited with status {}", status);
    return res;
  }
  const std::size_t w = json_find_key(json, "write");
  const auto bw = json_number_after(json, "bw_bytes", w);
  const auto job_runtime = json_number_after(json, "job_runtime");
  const auto usr = json_number_after(json, "usr_cpu");
  const auto sys = json_number_after(json, "sys_cpu");
  const auto io_bytes = json_number_after(json, "io_bytes", w);
  if (w == std::string_view::npos || !bw || !io_bytes || *bw <= 0) {
    res.note = "not run: cannot read fio's JSON output";
    return res;
  }
  res.bytes = static_cast<std::uint64_t>(*io_bytes);
  res.wrote_s = static_cast<double>(res.bytes) / *bw;
  if (job_runtime && usr && sys) {
    res.user_s = *usr / 100.0 * *job_runtime / 1e3;
    res.sys_s = *sys / 100.0 * *job_runtime / 1e3;
  }
  res.note = "fio's bandwidth (its end_fsync is not in it)";
  return res;
}

// --- the command ------------------------------------------------------------------------------------

std::string plot_write(const std::vector<std::pair<Variant, RunResult>>& medians, const std::string& png,
                       const std::string& title) {
  const std::string dat = seeds::sibling_path(png, ".dat");
  std::FILE* out = std::fopen(dat.c_str(), "w");
  if (!out) return fmt::format("cannot write '{}': {}", dat, std::strerror(errno));
  std::size_t n = 0;
  for (const auto& [v, r] : medians) {
    if (r.wrote_s <= 0) continue;
    std::fprintf(out, "\"%s\" %.2f %.2f %.3f\n", v.name.c_str(), r.wrote_bps() / 1e6, r.amortized_bps() / 1e6,
                 r.close_s >= 0 ? std::max(r.close_s * 1e3, 0.001) : -1.0);
    ++n;
  }
  std::fclose(out);
  if (n == 0) return "nothing ran: no figure";
  const std::string gp_path = seeds::sibling_path(png, ".gp");
  const std::string gp = fmt::format(
      "# Generated by tai-bench write; re-run with: gnuplot {0}\n"
      "set terminal pngcairo size 1000,760 font ',10'\n"
      "set output {1}\n"
      "set multiplot layout 2,1 title {2}\n"
      "set style data histograms\nset style histogram clustered gap 1\n"
      "set style fill solid 0.85 border -1\nset grid ytics\nset key top left\nset xtics nomirror\n"
      "set yrange [0:*]\nset ylabel 'MB/s'\nset title 'Wrote (write calls only) and amortized (write + fsync + close)'\n"
      "plot {3} using 2:xtic(1) title 'wrote MB/s', '' using 3 title 'amortized MB/s'\n"
      "set logscale y\nset yrange [*:*]\nset ylabel 'milliseconds (log)'\n"
      "set title 'Closed in (fsync + close); fio: not measured'\n"
      "plot {3} using ($4 > 0 ? $4 : 1/0):xtic(1) title 'close ms'\n"
      "unset multiplot\n",
      seeds::gnuplot_quote(gp_path), seeds::gnuplot_quote(png), seeds::gnuplot_quote(title), seeds::gnuplot_quote(dat));
  return seeds::run_gnuplot(gp, gp_path);
}

RunResult median_of(const std::vector<RunResult>& runs) {
  RunResult m;
  if (runs.empty()) return m;
  m = runs.front();
  auto med = [&](auto get) {
    std::vector<double> v;
    for (const auto& r : runs) v.push_back(get(r));
    return median(v);
  };
  m.wrote_s = med([](const RunResult& r) { return r.wrote_s; });
  m.close_s = med([](const RunResult& r) { return r.close_s; });
  m.user_s = med([](const RunResult& r) { return r.user_s; });
  m.sys_s = med([](const RunResult& r) { return r.sys_s; });
  m.busy_s = med([](const RunResult& r) { return r.busy_s; });
  return m;
}

// Makes `dir` and checks that it has room for `total` bytes and 256 MiB more.
void check_room(const std::string& dir, std::uint64_t total) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Failure(1, fmt::format("cannot create '{}': {}", dir, ec.message()));
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) == 0) {
    const std::uint64_t free_bytes = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    if (free_bytes < total + (256ull << 20))
      throw Failure(1, fmt::format("'{}' has {} free; the run needs {} plus 256 MiB of room", dir,
                                   format_size(free_bytes), format_size(total)));
  }
}

// The variants of --variants, each with its fio twin after it (--fio).
std::vector<Variant> write_variants(const WriteOptions& o) {
  std::vector<Variant> variants;
  for (const auto& name : split_list(o.variants)) {
    if (name == "buffered") variants.push_back({name, "posix", false, false, o.depth});
    else if (name == "posix-direct") variants.push_back({name, "posix", true, false, 1});
    else if (name == "libaio" || name == "uring") variants.push_back({name, name, true, false, o.depth});
    else throw Failure(2, fmt::format("unknown variant '{}' (known: buffered, posix-direct, libaio, uring)", name));
    if (o.fio && (name == "libaio" || name == "uring"))
      variants.push_back({"fio-" + name, name == "uring" ? "io_uring" : "libaio", true, true, o.depth});
  }
  if (variants.empty()) throw Failure(2, "no variant to run");
  return variants;
}

// One run's lines: what it wrote and how fast, its close, its CPU time.
void print_run(const Variant& v, const RunResult& r) {
  const std::string l = label(v);
  if (r.wrote_s <= 0) {
    fmt::print("{}: {}\n", l, r.note);
  } else {
    fmt::print("{}: Wrote {:.2f} GB in {}, {}\n", l, static_cast<double>(r.bytes) / 1e9,
               seeds::format_seconds(r.wrote_s), seeds::format_rate(r.wrote_bps()));
    if (r.close_s >= 0)
      fmt::print("{}: Closed in {}, Amortized total {}\n", l, seeds::format_seconds(r.close_s),
                 seeds::format_rate(r.amortized_bps()));
    fmt::print("    cpu: user {:.3f}s sys {:.3f}s{}{}\n", r.user_s, r.sys_s,
               v.fio ? " (fio's usr_cpu/sys_cpu)"
                     : fmt::format("; machine busy {:.3f}s (every CPU: includes write-back threads and other "
                                   "processes)",
                                   r.busy_s),
               r.note.empty() ? "" : "; " + r.note);
  }
}

// The medians' table, with the comparisons the write study makes: against fio with the same engine
// (of the medians, and the median of each round's ratio) and against buffered writes.
Table medians_table(const std::vector<std::pair<Variant, RunResult>>& medians,
                    const std::map<std::string, std::vector<RunResult>>& runs, std::uint64_t bs) {
  auto find = [&](const std::string& name) -> const RunResult* {
    for (const auto& [v, r] : medians)
      if (v.name == name) return &r;
    return nullptr;
  };
  const std::vector<RunResult> none;
  auto runs_of = [&](const std::string& name) -> const std::vector<RunResult>& {
    const auto it = runs.find(name);
    return it == runs.end() ? none : it->second;
  };
  const RunResult* buffered = find("buffered");
  Table table({"variant", "engine", "depth", "bs", "GB", "runs", "wrote_s", "wrote_MB/s", "close_ms", "amortized_MB/s",
               "user_s", "sys_s", "busy_s", "vs_fio", "vs_fio_paired", "vs_buffered"});
  for (const auto& [v, r] : medians) {
    std::string vs_fio = "-", vs_fio_paired = "-";
    if (!v.fio) {
      if (const RunResult* f = find("fio-" + v.name); f && f->wrote_bps() > 0)
        vs_fio = fmt::format("{:.3f}", r.wrote_bps() / f->wrote_bps());
      // The median of the ratios of the same round: robust to a machine whose speed drifts.
      std::vector<double> ratios;
      for (const RunResult& a : runs_of(v.name))
        for (const RunResult& b : runs_of("fio-" + v.name))
          if (a.round == b.round && b.wrote_bps() > 0) ratios.push_back(a.wrote_bps() / b.wrote_bps());
      if (!ratios.empty()) vs_fio_paired = fmt::format("{:.3f}", median(ratios));
    }
    std::string vs_buffered = "-";
    if (buffered && buffered->amortized_bps() > 0 && r.amortized_bps() > 0 && v.name != "buffered")
      vs_buffered = fmt::format("{:.3f}", r.amortized_bps() / buffered->amortized_bps());
    table.add_row({v.name, v.engine, std::to_string(v.depth), format_size(bs),
                   fmt::format("{:.2f}", static_cast<double>(r.bytes) / 1e9), std::to_string(runs_of(v.name).size()),
                   fmt::format("{:.3f}", r.wrote_s), fmt::format("{:.1f}", r.wrote_bps() / 1e6),
                   r.close_s >= 0 ? fmt::format("{:.1f}", r.close_s * 1e3) : "-",
                   r.close_s >= 0 ? fmt::format("{:.1f}", r.amortized_bps() / 1e6) : "-", fmt::format("{:.3f}", r.user_s),
                   fmt::format("{:.3f}", r.sys_s), v.fio ? "-" : fmt::format("{:.3f}", r.busy_s), vs_fio, vs_fio_paired, vs_buffered});
  }
  return table;
}

// Every run, then every median, as CSV lines.
void write_write_csv(const std::string& path, std::uint64_t bs, const std::vector<Variant>& variants,
                     const std::vector<RunResult>& all, const std::vector<std::pair<Variant, RunResult>>& medians,
                     const std::string& machine_line) {
  CsvWriter csv;
  if (auto err = csv.open(path, {"kind", "round", "variant", "engine", "depth", "bs", "bytes", "wrote_s", "close_s",
                                 "wrote_mb_per_s", "amortized_mb_per_s", "user_s", "sys_s", "machine_busy_s",
                                 "preallocated", "cache", "note", "machine"});
      !err.empty())
    throw Failure(1, err);
  auto emit = [&](const char* kind, const Variant* v, const RunResult& r, const std::string& round) {
    csv.row({kind, round, r.variant, v ? v->engine : "", v ? std::to_string(v->depth) : "", std::to_string(bs),
             std::to_string(r.bytes), r.wrote_s > 0 ? fmt::format("{:.6f}", r.wrote_s) : "",
             r.close_s >= 0 && r.wrote_s > 0 ? fmt::format("{:.6f}", r.close_s) : "",
             r.wrote_s > 0 ? fmt::format("{:.2f}", r.wrote_bps() / 1e6) : "",
             r.amortized_bps() > 0 ? fmt::format("{:.2f}", r.amortized_bps() / 1e6) : "",
             fmt::format("{:.3f}", r.user_s), fmt::format("{:.3f}", r.sys_s), fmt::format("{:.3f}", r.busy_s),
             r.preallocated ? "yes" : "no", r.cache, r.note, machine_line});
  };
  for (const RunResult& r : all) {
    const Variant* v = nullptr;
    for (const auto& x : variants)
      if (x.name == r.variant) v = &x;
    emit("run", v, r, std::to_string(r.round));
  }
  for (const auto& [v, r] : medians) emit("median", &v, r, "");
  csv.close();
  fmt::print("# csv: {}\n", path);
}

int run(const WriteOptions& o) {
  const auto drop = seeds::parse_drop_method(o.drop_with);
  if (!drop) throw Failure(2, "--drop-with must be auto, drop-caches or fadvise");
  if (o.verify != "full" && o.verify != "none") throw Failure(2, "--verify must be full or none");
  if (o.preallocate != "auto" && o.preallocate != "all" && o.preallocate != "none")
    throw Failure(2, "--preallocate must be auto, all or none");
  const std::uint64_t bs = parse_size(o.bs);
  if (bs == 0 || bs % seeds::kPatternPage != 0)
    throw Failure(2, fmt::format("--bs {} must be a positive multiple of 4096 (direct I/O and the page stamps)", bs));
  std::uint64_t total = parse_size(o.total);
  const MachineInfo machine = machine_info();
  if (o.beyond_ram) total = machine.memory_bytes + machine.memory_bytes / 4;
  total = std::max(detail::round_up(total, bs), bs);

  check_room(o.dir, total);

  const std::vector<Variant> variants = write_variants(o);

  const std::string machine_line = describe(machine);
  fmt::print("# tai-bench write (the direct-I/O write study): append-only writes of {} blocks up to {} ({:.2f} GB), then fsync + close\n",
             format_size(bs), format_size(total), static_cast<double>(total) / 1e9);
  fmt::print("# machine: {}; {}\n# storage: {}\n", machine_line, seeds::load_average(), seeds::describe_storage(o.dir));
  fmt::print("# file: {} ({}), a new file for every run; {}; checked after each run: {}\n",
             (std::filesystem::path(o.dir) / "tai-seeds-write.dat").string(),
             total > machine.memory_bytes ? "larger than RAM" : "smaller than RAM",
             o.preallocate == "none"  ? "never preallocated (every write extends the file)"
             : o.preallocate == "all" ? "preallocated with fallocate(2) before the clock starts, for every variant"
                                      : "O_DIRECT variants write into a file preallocated with fallocate(2) before the "
                                        "clock starts (as fio does), buffered appends to an empty file",
             o.verify == "full" ? "every byte read back with O_DIRECT" : "no (--verify none)");
  fmt::print("# page cache: dropped before every run; {} rounds, variants interleaved\n\n", o.repeat);
  std::fflush(stdout);

  const std::string path = (std::filesystem::path(o.dir) / "tai-seeds-write.dat").string();
  const std::string fio_path = (std::filesystem::path(o.dir) / "tai-seeds-write-fio.dat").string();
  std::map<std::string, std::vector<RunResult>> runs;
  std::vector<RunResult> all;
  std::uint64_t salt = static_cast<std::uint64_t>(now_ns()) | 1;
  for (unsigned round = 1; round <= o.repeat; ++round) {
    // ABBA: even rounds run the variants in reverse order, so that no variant always follows the
    // same one (a run leaves the virtual disk's host busy with its write-back for a while).
    std::vector<Variant> order = variants;
    if (round % 2 == 0) std::reverse(order.begin(), order.end());
    for (const Variant& v : order) {
      if (o.settle > 0) std::this_thread::sleep_for(std::chrono::duration<double>(o.settle));
      RunResult r = v.fio ? run_fio(o, v, bs, total, fio_path, *drop) : run_tai(o, v, bs, total, path, *drop, ++salt);
      r.round = round;
      print_run(v, r);
      if (r.wrote_s > 0) runs[v.name].push_back(r);
      std::fflush(stdout);
      all.push_back(r);
    }
  }

  // Medians, and the comparisons the write study makes.
  std::vector<std::pair<Variant, RunResult>> medians;
  for (const Variant& v : variants)
    if (!runs[v.name].empty()) medians.emplace_back(v, median_of(runs[v.name]));
  Table table = medians_table(medians, runs, bs);
  if (!all.empty()) fmt::print("\n# page cache before each run: {}", all.front().cache);
  fmt::print("\n# medians of {} round(s); vs_fio = wrote MB/s over fio's with the same engine, bs and depth (of the medians; paired: median of "
             "each round's ratio); "
             "vs_buffered = amortized MB/s over buffered's\n",
             o.repeat);
  std::fflush(stdout);
  table.print();

  if (!o.csv.empty()) write_write_csv(o.csv, bs, variants, all, medians, machine_line);
  if (!o.plot.empty()) {
    const std::string title = fmt::format("tai-bench write (the direct-I/O write study): {} blocks, {:.2f} GB, depth {} - {}",
                                          format_size(bs), static_cast<double>(total) / 1e9, o.depth, machine_line);
    if (auto err = plot_write(medians, o.plot, title); !err.empty()) throw Failure(1, "plot: " + err);
    fmt::print("# plot: {}\n", o.plot);
  }
  return 0;
}

}  // namespace

void add_write_command(CLI::App& app) {
  auto o = std::make_shared<WriteOptions>();
  CLI::App* cmd = app.add_subcommand(
      "write", "The direct-I/O write study: append-only writes, buffered + fsync vs O_DIRECT (libaio, uring), amortized MB/s");
  cmd->add_option("--dir", o->dir, "Directory of the written file (removed after every run)")->capture_default_str();
  cmd->add_option("--bs", o->bs, "Block size of every write (a multiple of 4096)")->capture_default_str();
  cmd->add_option("--total", o->total, "Bytes written per run")->capture_default_str();
  cmd->add_flag("--beyond-ram", o->beyond_ram, "Write 1.25 x the machine's RAM (overrides --total)");
  cmd->add_option("--depth", o->depth, "Requests in flight for the direct variants (and fio)")
      ->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  cmd->add_option("--variants", o->variants, "buffered, posix-direct (one O_DIRECT write at a time), libaio, uring")
      ->capture_default_str();
  cmd->add_flag("--fio", o->fio, "Also run fio (direct, same bs, depth and engine) after each direct variant");
  cmd->add_option("--repeat", o->repeat, "Rounds of all variants (interleaved); the table shows medians")
      ->check(CLI::Range(1u, 100u))
      ->capture_default_str();
  cmd->add_option("--preallocate", o->preallocate,
                  "fallocate(2) the file before the clock starts: auto (O_DIRECT variants and fio), all, none (fio: "
                  "--fallocate=none)")
      ->capture_default_str();
  cmd->add_option("--settle", o->settle, "Seconds of idle time before every run (after the cache is dropped)")
      ->check(CLI::Range(0.0, 600.0))
      ->capture_default_str();
  cmd->add_option("--verify", o->verify, "full: read every byte back with O_DIRECT after each run; none")
      ->capture_default_str();
  cmd->add_option("--drop-with", o->drop_with, "How to drop the page cache before each run: auto, drop-caches, fadvise")
      ->capture_default_str();
  cmd->add_option("--csv", o->csv, "Write every run and the medians as CSV to this file");
  cmd->add_option("--plot", o->plot, "Draw a PNG figure with gnuplot (also writes .dat and .gp next to it)");
  cmd->add_flag("--corrupt-for-test", o->corrupt_for_test,
                "Test hook: flip one byte of the file after it is written; verification must fail")
      ->group("");
  cmd->callback([o] { run_command("write", [o] { return run(*o); }); });
}

}  // namespace tai::bench
