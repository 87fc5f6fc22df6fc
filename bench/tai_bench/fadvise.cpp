// `tai-bench fadvise` (the fadvise note): can posix_fadvise replace O_DIRECT for reads? Threads read a
// file (random blocks by default, like the note's benchmark) through TAI's posix engine in the
// note's "pthread" shape (tai::IoQueue with one thread per request in flight), four ways:
//   buffered   plain buffered reads
//   noreuse    buffered, POSIX_FADV_NOREUSE on the file at open
//   dontneed   buffered, POSIX_FADV_DONTNEED on each range right after it is read
//   direct     O_DIRECT
// and, for the note's other backend, O_DIRECT through libaio and io_uring queues on one thread.
// For each: the note's columns (backend reqs bufsize depth rtime utime stime cpu us/op op/s MB/s),
// how much the page cache grew (the file's resident bytes by mincore, and the machine's
// "Cached" in /proc/meminfo), that growth per byte read, and throughput relative to O_DIRECT.
// Then the note's open question, O_DSYNC writes versus O_DIRECT writes, in the same shape.
//
// Every block read is checked against the data pattern, every block written is read back with
// O_DIRECT and checked after its variant; a mismatch stops the run (exit status 3).
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "tai/detail/aligned_buffer.hpp"
#include "engines/common/alignment.hpp"
#include "tai/engine.hpp"
#include "tai/engine_selector.hpp"
#include "tai/io_queue.hpp"
#include "tai_bench/bench_util.hpp"
#include "tai_bench/commands.hpp"
#include "tai_bench/seeds_util.hpp"

namespace tai::bench {
namespace {

using seeds::Failure;
using seeds::run_command;

struct FadviseOptions {
  std::string dir = "/var/tmp/tai-bench";
  std::string size = "4G";
  std::string bs = "4k,64k";
  unsigned threads = 32;
  std::string read = "1G";
  std::string pattern = "rand";
  std::string variants = "buffered,noreuse,dontneed,direct,libaio,uring";
  std::string write_size = "64M";
  std::string write_variants = "dsync,direct,direct-dsync";
  std::string drop_with = "auto";
  unsigned repeat = 1;
  std::uint64_t seed = 0;
  std::string csv;
  std::string plot;
  bool corrupt_for_test = false;
};

struct Variant {
  std::string name;
  std::string engine;  // posix (thread pool), libaio, uring (kernel queue)
  Open flags = Open::none;
};

std::optional<Variant> read_variant(const std::string& name) {
  if (name == "buffered") return Variant{name, "posix", Open::read};
  if (name == "noreuse") return Variant{name, "posix", Open::read | Open::noreuse};
  if (name == "dontneed") return Variant{name, "posix", Open::read | Open::dontneed};
  if (name == "direct") return Variant{name, "posix", Open::read | Open::direct};
  if (name == "libaio") return Variant{name, "libaio", Open::read | Open::direct};
  if (name == "uring") return Variant{name, "uring", Open::read | Open::direct};
  return std::nullopt;
}

std::optional<Variant> write_variant(const std::string& name) {
  if (name == "dsync") return Variant{name, "posix", Open::write | Open::dsync};
  if (name == "direct") return Variant{name, "posix", Open::write | Open::direct};
  if (name == "direct-dsync") return Variant{name, "posix", Open::write | Open::direct | Open::dsync};
  if (name == "buffered") return Variant{name, "posix", Open::write};  // plus one fsync at the end, timed
  if (name == "dontneed") return Variant{name, "posix", Open::write | Open::dontneed};
  return std::nullopt;
}

struct Result {
  std::string kind;  // read / write
  std::string variant;
  std::uint64_t bs = 0;
  unsigned depth = 0;
  std::uint64_t reqs = 0;
  Usage usage;
  std::int64_t file_growth = 0;     // resident bytes of the file after - before (mincore)
  std::int64_t meminfo_growth = 0;  // /proc/meminfo Cached after - before
  std::string cache;                // state before the run
  std::string note;
  bool ran = false;
  unsigned rounds = 1;
  double mib_per_s() const {
    return usage.real_ms > 0 ? static_cast<double>(reqs * bs) / (1 << 20) / (usage.real_ms / 1e3) : 0;
  }
};

/// The I/O loop of the fadvise note's benchmark: queue a request, reap with min 0 while there is room and
/// min 1 when the queue is full, drain at the end. `prepare(i, buffer)` returns the offset of
/// request i (after filling the buffer for writes); `check(offset, buffer)` checks a completed
/// read and returns an error message (empty when fine).
struct Loop {
  IoQueue* queue = nullptr;
  EngineFile* file = nullptr;
  Op op = Op::read;
  std::uint64_t bs = 0;
  std::vector<detail::AlignedBuffer> buffers;
  std::vector<unsigned> free_buffers;
  std::string error;     // the first I/O error
  std::string mismatch;  // the first data mismatch
  bool verify_reads = true;

  void completed(unsigned b, std::uint64_t offset, std::int64_t result) {
    free_buffers.push_back(b);
    if (result != static_cast<std::int64_t>(bs)) {
      if (error.empty())
        error = result < 0 ? fmt::format("{} at offset {}: {}", to_string(op), offset,
                                         std::error_code(static_cast<int>(-result), std::generic_category()).message())
                           : fmt::format("{} at offset {}: {} of {} bytes", to_string(op), offset, result, bs);
      return;
    }
    if (op == Op::read && verify_reads && mismatch.empty()) {
      const auto* data = reinterpret_cast<const unsigned char*>(buffers[b].data());
      if (auto bad = seeds::find_mismatch(data, offset, bs)) mismatch = seeds::describe_mismatch(data + (*bad - offset), *bad);
    }
  }

  template <class Prepare>
  void run(std::uint64_t reqs, Prepare&& prepare) {
    for (std::uint64_t i = 0; i < reqs && error.empty() && mismatch.empty(); ++i) {
      while (free_buffers.empty()) queue->reap(1);
      const unsigned b = free_buffers.back();
      free_buffers.pop_back();
      void* data = buffers[b].data();
      const std::uint64_t offset = prepare(i, data);
      Request r;
      r.op = op;
      r.file = file;
      r.buffer = data;
      r.offset = offset;
      r.length = bs;
      while (queue->submit(r, [this, b, offset](std::int64_t res) { completed(b, offset, res); })) queue->reap(1);
      queue->reap(queue->in_flight() < queue->depth() ? 0 : 1);
    }
    while (queue->in_flight() > 0) queue->reap(1);
  }
};

/// A queue for variant `v` with `depth` requests in flight: over posix, `depth` threads (the
/// fadvise note's pthread backend); over libaio/uring, the kernel queue on this thread.
tai::Result<std::unique_ptr<IoQueue>> make_queue(const Variant& v, unsigned depth) {
  IoQueueOptions qo;
  qo.depth = depth;
  qo.threads = depth;
  return IoQueue::create(v.engine, qo);
}

Result run_read(const FadviseOptions& o, const Variant& v, const seeds::DataFile& file, std::uint64_t bs,
                std::uint64_t reqs, seeds::DropMethod drop) {
  Result res;
  res.kind = "read";
  res.variant = v.name;
  res.bs = bs;
  res.depth = o.threads;
  res.reqs = reqs;
  auto q = make_queue(v, o.threads);
  if (!q) {
    res.note = "not run: " + q.error().message;
    return res;
  }
  std::unique_ptr<IoQueue> queue = std::move(q.value());
  std::string error;
  auto how = seeds::drop_cache(file.path, drop, &error);
  if (!how) throw Failure(1, error);
  auto opened = queue->engine().open(file.path, OpenMode{v.flags});
  if (!opened) {
    res.note = "not run: " + opened.error().message;
    return res;
  }
  std::unique_ptr<EngineFile> f = std::move(opened.value());
  const std::uint64_t before = seeds::resident_bytes(file.path);
  res.cache = fmt::format("{}, {} resident", *how, format_size(before));
  const std::uint64_t cached_before = seeds::meminfo_bytes("Cached");

  Loop loop;
  loop.queue = queue.get();
  loop.file = f.get();
  loop.op = Op::read;
  loop.bs = bs;
  for (unsigned i = 0; i < o.threads; ++i) {
    loop.buffers.emplace_back(bs, 4096);
    loop.free_buffers.push_back(i);
  }
  const std::uint64_t blocks = file.size / bs;
  seeds::KeyGenerator gen(seeds::thread_seed(o.seed, 0));
  const bool sequential = o.pattern == "seq";
  UsageMeter meter;
  loop.run(reqs, [&](std::uint64_t i, void*) { return (sequential ? i % blocks : gen.below(blocks)) * bs; });
  res.usage = meter.stop();
  res.file_growth = static_cast<std::int64_t>(seeds::resident_bytes(file.path)) - static_cast<std::int64_t>(before);
  res.meminfo_growth =
      static_cast<std::int64_t>(seeds::meminfo_bytes("Cached")) - static_cast<std::int64_t>(cached_before);
  (void)queue->engine().close(*f);
  f.reset();
  if (!loop.mismatch.empty())
    throw Failure(seeds::kExitMismatch, fmt::format("checksum mismatch in read variant '{}' ({} blocks, file '{}'): {}",
                                                    v.name, format_size(bs), file.path, loop.mismatch));
  if (!loop.error.empty()) {
    res.note = "I/O error: " + loop.error;
    return res;
  }
  res.ran = true;
  return res;
}

/// Reads `path` back with O_DIRECT and checks it against the pattern with `salt`.
std::string verify_written(const std::string& path, std::uint64_t size, std::uint64_t salt) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0 && errno == EINVAL) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fmt::format("verify: open '{}': {}", path, errno_text(errno));
  constexpr std::size_t kChunk = 8u << 20;
  detail::AlignedBuffer buf(kChunk, 4096);
  std::string result;
  for (std::uint64_t off = 0; off < size && result.empty(); off += kChunk) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, size - off));
    const ssize_t r = ::pread(fd, buf.data(), n, static_cast<off_t>(off));
    if (r != static_cast<ssize_t>(n)) {
      result = fmt::format("verify: pread '{}' at {}: {}", path, off, r < 0 ? errno_text(errno) : "short read");
      break;
    }
    if (auto bad = seeds::find_mismatch(buf.data(), off, n, salt))
      result = "mismatch " + seeds::describe_mismatch(buf.data() + (*bad - off), *bad, salt);
  }
  ::close(fd);
  return result;
}

Result run_write(const FadviseOptions& o, const Variant& v, std::uint64_t size, std::uint64_t bs,
                 seeds::DropMethod drop, std::uint64_t salt) {
  Result res;
  res.kind = "write";
  res.variant = v.name;
  res.bs = bs;
  res.depth = o.threads;
  res.reqs = size / bs;
  // Overwrite a file that exists (allocated blocks), so that the writes measure the data path and
  // not block allocation. It is rewritten with another salt by every variant.
  std::string error;
  auto file = seeds::prepare_data_file(o.dir, size, "write", &error);
  if (!file) throw Failure(1, error);
  auto q = make_queue(v, o.threads);
  if (!q) {
    res.note = "not run: " + q.error().message;
    return res;
  }
  std::unique_ptr<IoQueue> queue = std::move(q.value());
  auto how = seeds::drop_cache(file->path, drop, &error);
  if (!how) throw Failure(1, error);
  auto opened = queue->engine().open(file->path, OpenMode{v.flags});
  if (!opened) {
    res.note = "not run: " + opened.error().message;
    return res;
  }
  std::unique_ptr<EngineFile> f = std::move(opened.value());
  const std::uint64_t before = seeds::resident_bytes(file->path);
  res.cache = fmt::format("{}, {} resident", *how, format_size(before));
  const std::uint64_t cached_before = seeds::meminfo_bytes("Cached");

  // Every block once, in a random order.
  std::vector<std::uint64_t> order(size / bs);
  std::iota(order.begin(), order.end(), 0);
  seeds::KeyGenerator gen(seeds::thread_seed(o.seed, 1));
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[gen.below(i)]);

  Loop loop;
  loop.queue = queue.get();
  loop.file = f.get();
  loop.op = Op::write;
  loop.bs = bs;
  for (unsigned i = 0; i < o.threads; ++i) {
    loop.buffers.emplace_back(bs, 4096);
    loop.free_buffers.push_back(i);
  }
  UsageMeter meter;
  loop.run(order.size(), [&](std::uint64_t i, void* data) {
    const std::uint64_t offset = order[i] * bs;
    seeds::fill_pattern(data, offset, bs, salt);
    return offset;
  });
  if (v.name == "buffered" && loop.error.empty()) {
    // Buffered writes are durable only after fsync: pay for it, as the fadvise note's write test does.
    Request sync;
    sync.op = Op::fsync;
    sync.file = f.get();
    std::int64_t sync_result = 0;
    while (queue->submit(sync, [&sync_result](std::int64_t r) { sync_result = r; })) queue->reap(1);
    while (queue->in_flight() > 0) queue->reap(1);
    if (sync_result < 0) loop.error = "fsync: " + std::error_code(static_cast<int>(-sync_result), std::generic_category()).message();
  }
  res.usage = meter.stop();
  res.file_growth = static_cast<std::int64_t>(seeds::resident_bytes(file->path)) - static_cast<std::int64_t>(before);
  res.meminfo_growth =
      static_cast<std::int64_t>(seeds::meminfo_bytes("Cached")) - static_cast<std::int64_t>(cached_before);
  if (auto ec = queue->engine().close(*f); ec && loop.error.empty()) loop.error = "close: " + ec.message();
  f.reset();
  if (!loop.error.empty()) {
    res.note = "I/O error: " + loop.error;
    return res;
  }
  if (o.corrupt_for_test) {
    if (auto err = seeds::corrupt_byte(file->path, order[0] * bs + 100); !err.empty()) throw Failure(1, err);
  }
  if (const std::string err = verify_written(file->path, size, salt); !err.empty()) {
    ::unlink(file->path.c_str());
    throw Failure(err.rfind("mismatch", 0) == 0 ? seeds::kExitMismatch : 1,
                  fmt::format("checksum verification failed after write variant '{}' ({} blocks): {}", v.name,
                              format_size(bs), err));
  }
  res.ran = true;
  return res;
}

/// Round `round` runs the variants in order, the next one in reverse (ABBA), so that no variant
/// always follows the same one.
std::vector<Variant> in_round_order(std::vector<Variant> variants, unsigned round) {
  if (round % 2 == 0) std::reverse(variants.begin(), variants.end());
  return variants;
}

/// One row per (kind, variant, bs) in first-seen order, each the median of its rounds (time,
/// CPU and cache growth separately); a variant that failed in any round keeps that round's note.
std::vector<Result> medians_of(const std::vector<Result>& runs) {
  std::vector<Result> out;
  for (const Result& r : runs) {
    const bool seen = std::any_of(out.begin(), out.end(), [&](const Result& m) {
      return m.kind == r.kind && m.variant == r.variant && m.bs == r.bs;
    });
    if (seen) continue;
    std::vector<const Result*> same;
    for (const Result& x : runs)
      if (x.kind == r.kind && x.variant == r.variant && x.bs == r.bs) same.push_back(&x);
    Result m = r;
    for (const Result* x : same)
      if (!x->ran) m = *x;
    if (m.ran) {
      auto med = [&](auto get) {
        std::vector<double> v;
        for (const Result* x : same) v.push_back(static_cast<double>(get(*x)));
        return median(v);
      };
      m.usage.real_ms = med([](const Result& x) { return x.usage.real_ms; });
      m.usage.user_ms = med([](const Result& x) { return x.usage.user_ms; });
      m.usage.sys_ms = med([](const Result& x) { return x.usage.sys_ms; });
      m.file_growth = static_cast<std::int64_t>(med([](const Result& x) { return x.file_growth; }));
      m.meminfo_growth = static_cast<std::int64_t>(med([](const Result& x) { return x.meminfo_growth; }));
      m.rounds = static_cast<unsigned>(same.size());
    }
    out.push_back(std::move(m));
  }
  return out;
}

std::string signed_mib(std::int64_t bytes) { return fmt::format("{:.1f}", static_cast<double>(bytes) / (1 << 20)); }

void add_row(Table& t, const Result& r, const Result* direct) {
  const double rtime = r.usage.real_ms;
  if (!r.ran) {
    t.add_row({r.variant, std::to_string(r.reqs), std::to_string(r.bs), std::to_string(r.depth), "-", "-", "-", "-",
               "-", "-", "-", "-", "-", "-", "-", r.note});
    return;
  }
  const double bytes = static_cast<double>(r.reqs * r.bs);
  std::string vs = "-";
  if (direct && direct->ran && direct->mib_per_s() > 0) vs = fmt::format("{:.2f}", r.mib_per_s() / direct->mib_per_s());
  t.add_row({r.variant, std::to_string(r.reqs), std::to_string(r.bs), std::to_string(r.depth),
             fmt::format("{:.0f}", rtime), fmt::format("{:.0f}", r.usage.user_ms), fmt::format("{:.0f}", r.usage.sys_ms),
             fmt::format("{:.0f}", r.usage.cpu_ms()),
             fmt::format("{:.0f}", rtime * 1e3 * r.depth / static_cast<double>(r.reqs)),
             fmt::format("{:.0f}", static_cast<double>(r.reqs) / (rtime / 1e3)), fmt::format("{:.2f}", r.mib_per_s()),
             signed_mib(r.file_growth), fmt::format("{:.3f}", static_cast<double>(r.file_growth) / bytes),
             signed_mib(r.meminfo_growth), vs, r.note});
}

std::string plot_fadvise(const std::vector<Result>& results, const std::string& png, const std::string& title) {
  const std::string dat = seeds::sibling_path(png, ".dat");
  std::FILE* out = std::fopen(dat.c_str(), "w");
  if (!out) return fmt::format("cannot write '{}': {}", dat, std::strerror(errno));
  // Block 0: reads, block 1: writes; rows "variant@bs MB/s growth-per-byte".
  std::size_t blocks = 0;
  for (const char* kind : {"read", "write"}) {
    bool any = false;
    for (const Result& r : results) {
      if (r.kind != kind || !r.ran) continue;
      if (!any && blocks > 0) std::fprintf(out, "\n\n");
      any = true;
      std::fprintf(out, "\"%s %s\" %.2f %.4f\n", r.variant.c_str(), format_size(r.bs).c_str(), r.mib_per_s(),
                   static_cast<double>(r.file_growth) / static_cast<double>(r.reqs * r.bs));
    }
    if (any) ++blocks;
  }
  std::fclose(out);
  if (blocks == 0) return "nothing ran: no figure";
  const std::string gp_path = seeds::sibling_path(png, ".gp");
  std::string gp = fmt::format(
      "# Generated by tai-bench fadvise; re-run with: gnuplot {}\n"
      "set terminal pngcairo size 1100,{} font ',10'\n"
      "set output {}\n"
      "set multiplot layout {},2 title {}\n"
      "set style data histograms\nset style histogram clustered gap 1\n"
      "set style fill solid 0.85 border -1\nset grid ytics\nset xtics rotate by -30 nomirror\nset key off\n"
      "set yrange [0:*]\n",
      seeds::gnuplot_quote(gp_path), 380 * blocks + 40, seeds::gnuplot_quote(png), blocks, seeds::gnuplot_quote(title));
  const char* names[] = {"reads", "writes"};
  std::size_t block = 0;
  for (const char* kind : {"read", "write"}) {
    if (std::none_of(results.begin(), results.end(), [&](const Result& r) { return r.kind == kind && r.ran; })) continue;
    gp += fmt::format("set title '{}: throughput'\nset ylabel 'MiB/s'\nplot {} index {} using 2:xtic(1) lc 1\n",
                      names[block == 0 && std::string(kind) == "read" ? 0 : 1], seeds::gnuplot_quote(dat), block);
    gp += fmt::format(
        "set title '{}: page cache growth per byte transferred (mincore)'\nset ylabel 'bytes cached / byte'\n"
        "plot {} index {} using 3:xtic(1) lc 2\n",
        names[std::string(kind) == "read" ? 0 : 1], seeds::gnuplot_quote(dat), block);
    ++block;
  }
  gp += "unset multiplot\n";
  return seeds::run_gnuplot(gp, gp_path);
}

// The read variants at every block size, --repeat rounds, on the study's data file of `size` bytes
// (created once, then reused), `read_bytes` per variant and block size.
void run_reads(const FadviseOptions& o, const std::vector<Variant>& reads, const std::vector<std::uint64_t>& sizes,
               std::uint64_t size, std::uint64_t read_bytes, const MachineInfo& machine, seeds::DropMethod drop,
               std::vector<Result>& results) {
  std::string error;
  auto file = seeds::StudyDataFile::prepare(o.dir, size, o.corrupt_for_test, &error);
  if (!file) throw Failure(1, error);
  if (o.corrupt_for_test) {
    // The first block read (by every variant, at every bs) is the one holding this byte.
    std::vector<std::uint64_t> flipped;  // flipping one byte twice would undo it
    for (const std::uint64_t bs : sizes) {
      seeds::KeyGenerator gb(seeds::thread_seed(o.seed, 0));
      const std::uint64_t off = (o.pattern == "seq" ? 0 : gb.below(size / bs)) * bs + 100;
      if (std::find(flipped.begin(), flipped.end(), off) != flipped.end()) continue;
      flipped.push_back(off);
      if (auto err = seeds::corrupt_byte(file->path, off); !err.empty()) throw Failure(1, err);
      fmt::print("# corrupt-for-test: flipped byte {}\n", off);
    }
  }
  fmt::print("# read file: {}, {} ({}); {} reads, {} per variant and block size; page cache dropped before each "
             "variant\n",
             file->path, format_size(size),
             file->created ? fmt::format("created in {:.1f} s", file->create_seconds) : "reused",
             o.pattern == "seq" ? "sequential" : "random block-aligned", format_size(read_bytes));
  fmt::print("# page cache budget: none enforced; the file is {} RAM ({}){}\n",
             size > machine.memory_bytes ? "larger than" : "smaller than", format_size(machine.memory_bytes),
             size > machine.memory_bytes ? "" : ", so the cache never fills: 'grew' is what a larger file would add "
                                                "before eviction (use --size above RAM for the fadvise note's setting)");
  for (unsigned round = 1; round <= o.repeat; ++round) {
    for (const std::uint64_t bs : sizes) {
      const std::uint64_t reqs = std::max<std::uint64_t>(1, read_bytes / bs);
      for (const Variant& v : in_round_order(reads, round)) results.push_back(run_read(o, v, *file, bs, reqs, drop));
    }
  }
}

// The write variants at every block size up to `write_size`, --repeat rounds.
void run_writes(const FadviseOptions& o, const std::vector<Variant>& writes, const std::vector<std::uint64_t>& sizes,
                std::uint64_t write_size, seeds::DropMethod drop, std::vector<Result>& results) {
  fmt::print("# write file: {} ({}), every block written once in random order by {} threads, then read back with "
             "O_DIRECT and checked\n",
             seeds::data_file_path(o.dir, write_size, "write"), format_size(write_size), o.threads);
  std::uint64_t salt = static_cast<std::uint64_t>(now_ns()) | 1;
  for (unsigned round = 1; round <= o.repeat; ++round) {
    for (const std::uint64_t bs : sizes) {
      if (bs > write_size) continue;
      for (const Variant& v : in_round_order(writes, round))
        results.push_back(run_write(o, v, write_size, bs, drop, ++salt));
    }
  }
}

// The direct variant's result of the same kind and block size as `r`, the vs_direct reference.
const Result* direct_of(const std::vector<Result>& results, const Result& r) {
  for (const Result& d : results)
    if (d.kind == r.kind && d.bs == r.bs && d.variant == "direct") return &d;
  return nullptr;
}

void print_fadvise_tables(const std::vector<Result>& results, unsigned repeat, std::size_t all_runs) {
  const std::vector<std::string> headers = {"backend", "reqs", "bufsize", "depth", "rtime", "utime", "stime", "cpu",
                                            "us/op", "op/s", "MB/s", "grew_MiB", "grew/byte", "meminfo_MiB",
                                            "vs_direct", "note"};
  for (const char* kind : {"read", "write"}) {
    Table t(headers);
    for (const Result& r : results)
      if (r.kind == kind) add_row(t, r, direct_of(results, r));
    if (t.size() == 0) continue;
    fmt::print("\n# {}: times in ms (the fadvise note's columns), MB/s in MiB/s; grew = page cache growth of the file "
               "(mincore), per byte {}; meminfo = change of Cached in /proc/meminfo (whole machine)\n",
               std::string(kind) == "read" ? "reads" : "writes (O_DSYNC vs O_DIRECT)",
               std::string(kind) == "read" ? "read" : "written");
    std::fflush(stdout);
    t.print();
  }
  if (repeat > 1) fmt::print("# medians of {} rounds ({} runs), even rounds in reverse order\n", repeat, all_runs);
  for (const Result& r : results) {
    if (r.cache.empty()) continue;
    fmt::print("# page cache before each variant: {}\n", r.cache.substr(0, r.cache.find(", ")));
    break;
  }
  std::fflush(stdout);
}

void write_fadvise_csv(const std::string& path, const std::vector<Result>& results, const FadviseOptions& o,
                       std::uint64_t size, std::uint64_t write_size, const std::string& machine_line) {
  CsvWriter csv;
  if (auto err = csv.open(path, {"kind", "variant", "engine_flags", "reqs", "bufsize", "depth", "rtime_ms",
                                 "utime_ms", "stime_ms", "cpu_ms", "us_per_op", "ops_per_s", "mb_per_s",
                                 "cache_growth_bytes", "growth_per_byte", "meminfo_cached_growth_bytes",
                                 "ratio_vs_direct", "file_bytes", "pattern", "cache", "note", "machine"});
      !err.empty())
    throw Failure(1, err);
  for (const Result& r : results) {
    const Result* d = direct_of(results, r);
    const double bytes = static_cast<double>(r.reqs * r.bs);
    auto num = [&](double v, const char* f) { return r.ran ? fmt::format(fmt::runtime(f), v) : std::string(); };
    csv.row({r.kind, r.variant, r.kind == "read" ? read_variant(r.variant)->engine : "posix", std::to_string(r.reqs),
             std::to_string(r.bs), std::to_string(r.depth), num(r.usage.real_ms, "{:.1f}"),
             num(r.usage.user_ms, "{:.1f}"), num(r.usage.sys_ms, "{:.1f}"), num(r.usage.cpu_ms(), "{:.1f}"),
             num(r.usage.real_ms * 1e3 * r.depth / static_cast<double>(r.reqs), "{:.1f}"),
             num(static_cast<double>(r.reqs) / (r.usage.real_ms / 1e3), "{:.0f}"), num(r.mib_per_s(), "{:.2f}"),
             r.ran ? std::to_string(r.file_growth) : "", num(static_cast<double>(r.file_growth) / bytes, "{:.4f}"),
             r.ran ? std::to_string(r.meminfo_growth) : "",
             r.ran && d && d->ran && d->mib_per_s() > 0 ? fmt::format("{:.3f}", r.mib_per_s() / d->mib_per_s()) : "",
             std::to_string(r.kind == "read" ? size : write_size), r.kind == "read" ? o.pattern : "rand", r.cache,
             r.note, machine_line});
  }
  csv.close();
  fmt::print("# csv: {}\n", path);
}

int run(const FadviseOptions& o) {
  const auto drop = seeds::parse_drop_method(o.drop_with);
  if (!drop) throw Failure(2, "--drop-with must be auto, drop-caches or fadvise");
  if (o.pattern != "rand" && o.pattern != "seq") throw Failure(2, "--pattern must be rand or seq");
  const std::uint64_t size = detail::round_up(parse_size(o.size), seeds::kPatternPage);
  const std::vector<std::uint64_t> sizes = parse_size_list(o.bs);
  for (const std::uint64_t bs : sizes)
    if (bs == 0 || bs % seeds::kPatternPage != 0 || bs > size)
      throw Failure(2, fmt::format("--bs {} must be a multiple of 4096 and at most the file size", bs));
  const std::uint64_t read_bytes = parse_size(o.read);
  std::vector<Variant> reads, writes;
  for (const auto& n : split_list(o.variants)) {
    if (n == "none") continue;
    auto v = read_variant(n);
    if (!v) throw Failure(2, fmt::format("unknown read variant '{}' (known: {})", n, FadviseOptions{}.variants));
    reads.push_back(*v);
  }
  const std::uint64_t write_size = detail::round_up(parse_size(o.write_size), seeds::kPatternPage);
  if (write_size > 0) {
    for (const auto& n : split_list(o.write_variants)) {
      if (n == "none") continue;
      auto v = write_variant(n);
      if (!v) throw Failure(2, fmt::format("unknown write variant '{}' (known: dsync, direct, direct-dsync, buffered, dontneed)", n));
      writes.push_back(*v);
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(o.dir, ec);
  if (ec) throw Failure(1, fmt::format("cannot create '{}': {}", o.dir, ec.message()));

  const MachineInfo machine = machine_info();
  const std::string machine_line = describe(machine);
  fmt::print("# tai-bench fadvise (the fadvise note): buffered reads with posix_fadvise hints versus O_DIRECT, {} threads\n",
             o.threads);
  fmt::print("# machine: {}; {}\n# storage: {}\n", machine_line, seeds::load_average(), seeds::describe_storage(o.dir));

  std::vector<Result> results;
  if (!reads.empty()) run_reads(o, reads, sizes, size, read_bytes, machine, *drop, results);
  if (!writes.empty()) run_writes(o, writes, sizes, write_size, *drop, results);
  const std::size_t all_runs = results.size();
  results = medians_of(results);
  print_fadvise_tables(results, o.repeat, all_runs);

  if (!o.csv.empty()) write_fadvise_csv(o.csv, results, o, size, write_size, machine_line);
  if (!o.plot.empty()) {
    const std::string title = fmt::format("tai-bench fadvise (the fadvise note), {} threads, {} {} file - {}", o.threads,
                                          format_size(size), o.pattern, machine_line);
    if (auto err = plot_fadvise(results, o.plot, title); !err.empty()) throw Failure(1, "plot: " + err);
    fmt::print("# plot: {}\n", o.plot);
  }
  return 0;
}

}  // namespace

void add_fadvise_command(CLI::App& app) {
  auto o = std::make_shared<FadviseOptions>();
  CLI::App* cmd = app.add_subcommand(
      "fadvise", "The fadvise note: buffered reads with FADV_NOREUSE / FADV_DONTNEED vs O_DIRECT; O_DSYNC vs O_DIRECT writes");
  cmd->add_option("--dir", o->dir, "Directory of the data files")->capture_default_str();
  cmd->add_option("--size", o->size, "Size of the file read (created once, then reused)")->capture_default_str();
  cmd->add_option("--bs", o->bs, "Block sizes (multiples of 4096)")->capture_default_str();
  cmd->add_option("--threads", o->threads, "Requests in flight: threads of the posix variants, queue depth of libaio/uring")
      ->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  cmd->add_option("--read", o->read, "Bytes read per variant and block size")->capture_default_str();
  cmd->add_option("--pattern", o->pattern, "rand (block-aligned random offsets, as the fadvise note) or seq")
      ->capture_default_str();
  cmd->add_option("--variants", o->variants, "Read variants (or 'none')")->capture_default_str();
  cmd->add_option("--write-size", o->write_size, "Bytes of the write test (0: skip it)")->capture_default_str();
  cmd->add_option("--write-variants", o->write_variants,
                  "Write variants: dsync, direct, direct-dsync, buffered (+ fsync), dontneed")
      ->capture_default_str();
  cmd->add_option("--drop-with", o->drop_with, "How to drop the page cache: auto, drop-caches, fadvise")
      ->capture_default_str();
  cmd->add_option("--repeat", o->repeat,
                  "Rounds of every variant (even rounds in reverse order); the tables show medians")
      ->check(CLI::Range(1u, 100u))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the offsets")->capture_default_str();
  cmd->add_option("--csv", o->csv, "Write the rows as CSV to this file");
  cmd->add_option("--plot", o->plot, "Draw a PNG figure with gnuplot (also writes .dat and .gp next to it)");
  cmd->add_flag("--corrupt-for-test", o->corrupt_for_test,
                "Test hook: flip one byte of a private data file (and of the written file); the run must fail")
      ->group("");
  cmd->callback([o] { run_command("fadvise", [o] { return run(*o); }); });
}

}  // namespace tai::bench
