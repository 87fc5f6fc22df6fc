// bench/tai_bench/randread.cpp - `tai-bench randread`: the ioqueue benchmark's random reads through
// tai::IoQueue, with fio on the same file, engine, block size and depth, interleaved.
//
// For each engine and block size: random reads of bs bytes at random bs-aligned offsets of one
// O_DIRECT file, issued with the ioqueue benchmark's loop (pread, then reap(0) while below depth, reap(1) at
// depth). Times: steady_clock and getrusage(RUSAGE_SELF) deltas around the loop, the final drain
// included, so the thread pool's worker CPU counts too. us/op is the ioqueue benchmark's latency
// estimate rtime * depth / reqs; MB/s is MiB/s as in that benchmark.
//
// --via controller adds a second TAI cell per engine and block size: the same reads through
// tai::Controller (File::read into the caller's buffers on a BTreeTrivial file, so every read
// goes to the engine uncached; depth receipts in flight), run interleaved with the IoQueue cell
// (the raw engine queue) and reported as its own row with the ratio controller / queue op/s.
#include "tai_bench/randread.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <variant>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "tai/controller.hpp"
#include "tai/detail/aligned_buffer.hpp"
#include "tai/engine_selector.hpp"
#include "tai/io_queue.hpp"
#include "tai_bench/bench_util.hpp"
#include "tai_bench/commands.hpp"

namespace tai::bench {
namespace {

// The ioqueue benchmark's request counts: 262144 up to 2 KiB, 131072 up to 16 KiB, 65536 up to 128 KiB,
// 32768 above.
std::uint64_t seed_request_count(std::uint64_t bs) {
  if (bs <= 2048) return 262144;
  if (bs <= 16384) return 131072;
  if (bs <= 131072) return 65536;
  return 32768;
}


// ---------------------------------------------------------------------------------------------
// The data file

/// Non-zero content, a function of the offset (so that a reader could check it).
void fill_pattern(std::uint64_t* words, std::size_t count, std::uint64_t first_offset) {
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t off = first_offset + i * 8;
    words[i] = (((off >> 3) * 0x9E3779B97F4A7C15ull) ^ 0x5A5A5A5A5A5A5A5Aull) | 1;
  }
}

/// Creates `path` with `size` bytes written through O_DIRECT (so they are on the device, not in
/// the page cache), or reuses it when it already has that size and non-zero data.
std::optional<std::string> prepare_file(const std::string& path, std::uint64_t size) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && static_cast<std::uint64_t>(st.st_size) == size) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    bool nonzero = false;
    if (fd >= 0) {
      char head[4096];
      ssize_t n = ::pread(fd, head, sizeof head, 0);
      nonzero = n > 0 && std::any_of(head, head + n, [](char c) { return c != 0; });
      // The check went through the page cache; drop it so that nothing of the file is cached.
      posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
    }
    if (nonzero) {
      fmt::print("file {}: reusing it ({} bytes)\n", path, size);
      return std::nullopt;
    }
  }
  if (size % 4096 != 0) return fmt::format("--size {} is not a multiple of 4096 (needed for O_DIRECT writes)", size);
  fmt::print("file {}: creating {} of non-zero data with O_DIRECT ... ", path, format_size(size));
  std::fflush(stdout);
  const std::int64_t t0 = now_ns();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    if (err == EINVAL)
      return fmt::format("cannot open '{}' with O_DIRECT: {} (tmpfs and some file systems refuse direct I/O; use a "
                         "file on a disk file system, e.g. under /var/tmp)",
                         path, std::strerror(err));
    return fmt::format("cannot create '{}': {}", path, std::strerror(err));
  }
  constexpr std::size_t kChunk = 8u << 20;
  detail::AlignedBuffer buf(kChunk, 4096);
  for (std::uint64_t off = 0; off < size;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, size - off));
    fill_pattern(reinterpret_cast<std::uint64_t*>(buf.data()), n / 8, off);
    const ssize_t w = ::pwrite(fd, buf.data(), n, static_cast<off_t>(off));
    if (w <= 0) {
      const int err = w < 0 ? errno : ENOSPC;
      ::close(fd);
      ::unlink(path.c_str());
      return fmt::format("writing '{}' at offset {}: {}", path, off, std::strerror(err));
    }
    off += static_cast<std::uint64_t>(w);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    return fmt::format("fsync of '{}': {}", path, std::strerror(err));
  }
  ::close(fd);
  fmt::print("done in {:.1f} s\n", static_cast<double>(now_ns() - t0) / 1e9);
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// TAI runs

/// The read buffers of one cell: depth buffers of bs bytes in one fresh anonymous mapping, the
/// way fio gets its buffers (one large malloc, which glibc serves with mmap), so that both sides
/// read into memory placed alike. Where the pages land physically matters on this kind of
/// machine: a 64 KiB read into 16 scattered pages is a 16-segment request, into a huge page it
/// is one, and virtio disks serve the latter markedly faster. `huge` asks for transparent huge
/// pages (madvise MADV_HUGEPAGE on a 2 MiB-aligned region): what a program can do and fio
/// (without hugetlbfs) cannot, so it is off by default and reported when on.
class ReadBuffers {
 public:
  ReadBuffers(std::size_t bytes, bool huge) {
    const std::size_t unit = huge ? (2u << 20) : static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    size_ = (bytes + unit - 1) / unit * unit;
    // Over-allocate by one unit to align the start by hand (mmap only promises page alignment).
    map_size_ = size_ + (huge ? unit : 0);
    void* p = ::mmap(nullptr, map_size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    map_ = static_cast<std::byte*>(p);
    auto addr = reinterpret_cast<std::uintptr_t>(map_);
    data_ = reinterpret_cast<std::byte*>((addr + unit - 1) / unit * unit);
    if (huge) (void)::madvise(data_, size_, MADV_HUGEPAGE);
  }
  ~ReadBuffers() { ::munmap(map_, map_size_); }
  ReadBuffers(const ReadBuffers&) = delete;
  ReadBuffers& operator=(const ReadBuffers&) = delete;
  std::byte* data() const { return data_; }

 private:
  std::byte* map_ = nullptr;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0, map_size_ = 0;
};

struct TaiRun {
  std::uint64_t reqs = 0;
  Usage usage;
  std::uint64_t errors = 0;
  std::int64_t first_bad_result = 0;
  double ops_per_s() const { return usage.real_ms > 0 ? static_cast<double>(reqs) * 1e3 / usage.real_ms : 0; }
  double cpu_us_per_op() const { return reqs ? usage.cpu_ms() * 1e3 / static_cast<double>(reqs) : 0; }
  double user_us_per_op() const { return reqs ? usage.user_ms * 1e3 / static_cast<double>(reqs) : 0; }
};

/// One (engine, bs) cell: the queue, the open file and the buffers, reused across repeats.
class TaiCell {
 public:
  static std::variant<std::unique_ptr<TaiCell>, std::string> make(const RandreadConfig& cfg, const std::string& label,
                                                                    std::uint64_t bs) {
    EngineOptions eo;
    eo.depth = cfg.depth;
    const std::string engine_name = label == "threads" ? "posix" : label;
    auto engine = make_engine(engine_name, eo);
    if (!engine) return engine.error().message;
    IoQueueOptions qo;
    qo.depth = cfg.depth;
    qo.threads = cfg.depth;
    qo.submit_batch = cfg.submit_batch;
    auto cell = std::unique_ptr<TaiCell>(new TaiCell);
    cell->bs_ = bs;
    cell->depth_ = cfg.depth;
    cell->blocks_ = cfg.size / bs;
    cell->queue_ = std::make_unique<IoQueue>(std::move(engine.value()), qo);
    auto file = cell->queue_->engine().open(cfg.file, OpenMode(Open::read | Open::direct));
    if (!file) return file.error().message;
    cell->file_ = std::move(file.value());
    const Alignment& a = cell->file_->capabilities().alignment;
    if (bs % a.length != 0 || bs % a.offset != 0)
      cell->note_ = fmt::format("bs {} is not a multiple of the file's direct-I/O block ({} B, from {}): TAI bounces "
                                "these reads through aligned buffers",
                                bs, a.length, a.source);
    if (bs % a.memory != 0 || a.memory > 4096)  // buffer b starts at a page-aligned base + b * bs
      cell->note_ += fmt::format("{}buffers are only {}-byte aligned but the file wants {}: TAI bounces",
                                 cell->note_.empty() ? "" : "; ", bs % 4096 ? bs : 4096, a.memory);
    // Not touched here: like fio's, the pages are faulted in by the first read into them.
    cell->buffers_ = std::make_unique<ReadBuffers>(static_cast<std::size_t>(bs) * cfg.depth, cfg.huge_pages);
    cell->free_.resize(cfg.depth);
    return cell;
  }

  ~TaiCell() {
    file_.reset();  // files go before the engine, which the queue owns
  }

  const std::string& note() const { return note_; }

  /// The ioqueue benchmark's loop for `reqs` requests (or until `stop_after_ns` passes, when non-zero).
  TaiRun run(std::uint64_t reqs, std::uint64_t seed, std::int64_t stop_after_ns = 0) {
    Rng rng(seed);
    IoQueue& q = *queue_;
    State st;
    st.free = free_.data();
    st.expect = static_cast<std::int64_t>(bs_);
    for (unsigned i = 0; i < depth_; ++i) st.free[i] = i;
    st.top = depth_;
    std::byte* const base = buffers_->data();
    const std::uint64_t bs = bs_;
    const std::size_t depth = depth_;
    const std::int64_t deadline = stop_after_ns ? now_ns() + stop_after_ns : 0;

    UsageMeter meter;
    std::uint64_t issued = 0;
    for (; issued < reqs; ++issued) {
      if (deadline && (issued & 31) == 0 && now_ns() >= deadline) break;
      const std::uint32_t b = st.free[--st.top];
      const std::uint64_t off = rng.below(blocks_) * bs;
      State* sp = &st;
      std::error_code ec = q.pread(*file_, base + static_cast<std::size_t>(b) * bs, bs, off, [sp, b](std::int64_t r) {
        if (r != sp->expect) {
          if (sp->errors++ == 0) sp->first_bad = r;
        }
        sp->free[sp->top++] = b;
      });
      if (ec) throw std::logic_error("IoQueue refused a request below its depth: " + ec.message());
      q.reap(q.in_flight() < depth ? 0 : 1);
    }
    while (q.in_flight() > 0) q.reap(1);
    TaiRun out;
    out.usage = meter.stop();
    out.reqs = issued;
    out.errors = st.errors;
    out.first_bad_result = st.first_bad;
    return out;
  }

 private:
  struct State {
    std::uint32_t* free = nullptr;  // stack of free buffer numbers
    std::size_t top = 0;
    std::int64_t expect = 0;
    std::uint64_t errors = 0;
    std::int64_t first_bad = 0;
  };

  TaiCell() = default;
  std::uint64_t bs_ = 0;
  unsigned depth_ = 0;
  std::uint64_t blocks_ = 0;
  std::unique_ptr<IoQueue> queue_;
  std::unique_ptr<EngineFile> file_;
  std::unique_ptr<ReadBuffers> buffers_;
  std::vector<std::uint32_t> free_;
  std::string note_;
};

/// The same reads through tai::Controller: a controller with default options (a worker per CPU)
/// and the file opened under BTreeTrivial (no cache: each read is one engine request into the
/// caller's buffer). depth reads are in flight, each with its receipt and its buffer. When every
/// slot is busy, the loop takes every finished receipt (a scan of depth states); if none has
/// finished it waits for the oldest, the way a program that holds receipts would (the API has
/// no "wait for any"), then takes every finished one.
class ControllerCell {
 public:
  static std::variant<std::unique_ptr<ControllerCell>, std::string> make(const RandreadConfig& cfg,
                                                                           const std::string& label, std::uint64_t bs) {
    const std::string engine_name = label == "threads" ? "posix" : label;
    auto cell = std::unique_ptr<ControllerCell>(new ControllerCell);
    ControllerOptions co;
    if (cfg.ctl_workers) co.workers = cfg.ctl_workers;
    if (cfg.ctl_spin_ns >= 0) co.spin_ns = cfg.ctl_spin_ns;
    if (cfg.ctl_io_spin_ns >= 0) co.io_spin_ns = cfg.ctl_io_spin_ns;
    if (cfg.ctl_submit_batch >= 0) co.engine_submit_batch = static_cast<unsigned>(cfg.ctl_submit_batch);
    co.engine_options.depth = std::max(co.engine_options.depth, cfg.depth);
    try {
      cell->ctl_ = std::make_unique<Controller>(co);
    } catch (const std::exception& e) {
      return fmt::format("making a controller: {}", e.what());
    }
    auto file = cell->ctl_->open<BTreeTrivial>(cfg.file, OpenMode(Open::read | Open::direct), engine_name);
    if (!file) return file.error().message;
    cell->file_ = std::move(file.value());
    if (label == "threads")
      cell->note_ = fmt::format("through the controller, 'threads' is the posix engine run synchronously on its {} "
                                "worker(s), not a pool of {} threads",
                                cell->ctl_->workers(), cfg.depth);
    cell->bs_ = bs;
    cell->print_stats_ = cfg.ctl_stats;
    cell->depth_ = cfg.depth;
    cell->blocks_ = cfg.size / bs;
    cell->buffers_ = std::make_unique<ReadBuffers>(static_cast<std::size_t>(bs) * cfg.depth, cfg.huge_pages);
    cell->slots_.resize(cfg.depth);
    cell->free_.resize(cfg.depth);
    return cell;
  }

  ~ControllerCell() {
    if (print_stats_) fmt::print("controller statistics (all runs of this cell):\n{}\n", ctl_->stats().table());
    if (file_) file_.close().wait();
    ctl_.reset();
  }

  const std::string& note() const { return note_; }

  /// `reqs` reads (or until `stop_after_ns` passes, when non-zero), as TaiCell::run.
  TaiRun run(std::uint64_t reqs, std::uint64_t seed, std::int64_t stop_after_ns = 0) {
    Rng rng(seed);
    TaiRun out;
    std::size_t top = 0;
    for (unsigned i = 0; i < depth_; ++i) free_[top++] = i;
    std::byte* const base = buffers_->data();
    const std::uint64_t bs = bs_;
    const std::int64_t deadline = stop_after_ns ? now_ns() + stop_after_ns : 0;
    // Checks slot s's finished read and frees the slot.
    auto take = [&](std::uint32_t s) {
      Receipt& r = slots_[s];
      const std::int64_t got = r.ok() ? r.bytes() : -static_cast<std::int64_t>(r.error().value());
      if (got != static_cast<std::int64_t>(bs) && out.errors++ == 0) out.first_bad_result = got;
      r = Receipt();
      free_[top++] = s;
    };

    UsageMeter meter;
    std::uint64_t issued = 0;
    for (; issued < reqs; ++issued) {
      if (deadline && (issued & 31) == 0 && now_ns() >= deadline) break;
      if (top == 0) {
        // Like the queue's reap(1): wait for any read, not the oldest (no head-of-line wait).
        const std::size_t k = done_.pop(tags_.data(), depth_, 1);
        for (std::size_t i = 0; i < k; ++i) take(static_cast<std::uint32_t>(tags_[i]));
      }
      const std::uint32_t s = free_[--top];
      slots_[s] = file_.read(rng.below(blocks_) * bs, base + static_cast<std::size_t>(s) * bs, bs);
      slots_[s].then(done_.post(s));
    }
    // The reads still in flight: every one posts its tag (after it reports finished).
    for (std::uint32_t left = depth_ - top; left != 0;) {
      const std::size_t k = done_.pop(tags_.data(), depth_, 1);
      for (std::size_t i = 0; i < k; ++i) take(static_cast<std::uint32_t>(tags_[i]));
      left -= static_cast<std::uint32_t>(k);
    }
    out.usage = meter.stop();
    out.reqs = issued;
    return out;
  }

 private:
  ControllerCell() = default;
  bool print_stats_ = false;
  std::uint64_t bs_ = 0;
  unsigned depth_ = 0;
  std::uint64_t blocks_ = 0;
  std::unique_ptr<Controller> ctl_;
  File file_;
  std::unique_ptr<ReadBuffers> buffers_;
  std::vector<Receipt> slots_;           // the read in flight in each buffer (empty: free)
  CompletionQueue done_{1024};           // slots whose read finished (posted by then())
  std::vector<std::uint64_t> tags_ = std::vector<std::uint64_t>(1024);
  std::vector<std::uint32_t> free_;      // stack of free slots
  std::string note_;
};

// ---------------------------------------------------------------------------------------------
// fio runs

struct FioRun {
  bool ok = false;
  std::string error;
  double iops = 0;
  double ios = 0;
  double user_ms = 0;
  double sys_ms = 0;
  double cpu_us_per_op() const { return ios > 0 ? (user_ms + sys_ms) * 1e3 / ios : 0; }
  double user_us_per_op() const { return ios > 0 ? user_ms * 1e3 / ios : 0; }
};

/// fio on the same file with the engine matching `label`: libaio and io_uring with
/// iodepth=depth, psync with numjobs=depth (threads) for "threads" and other synchronous
/// engines. Same number of reads, random with replacement (norandommap) like TAI.
FioRun run_fio(const RandreadConfig& cfg, const std::string& label, std::uint64_t bs, std::uint64_t reqs,
               std::uint64_t seed) {
  std::vector<std::string> args = {"fio", "--name=randread", "--filename=" + cfg.file, "--rw=randread",
                                   fmt::format("--bs={}", bs), "--direct=1", fmt::format("--size={}", cfg.size),
                                   "--norandommap=1", fmt::format("--randseed={}", seed), "--group_reporting=1",
                                   "--output-format=json", "--thread=1"};
  std::uint64_t per_job = reqs;
  if (label == "libaio" || label == "uring") {
    args.push_back(label == "libaio" ? "--ioengine=libaio" : "--ioengine=io_uring");
    args.push_back(fmt::format("--iodepth={}", cfg.depth));
  } else {
    args.push_back("--ioengine=psync");
    args.push_back(fmt::format("--numjobs={}", cfg.depth));
    per_job = (reqs + cfg.depth - 1) / cfg.depth;
  }
  args.push_back(fmt::format("--number_ios={}", per_job));
  args.push_back(fmt::format("--io_size={}", per_job * bs));
  int status = -1;
  const std::string out = run_program(args, &status, /*quiet_stderr=*/false);
  FioRun r;
  const std::size_t brace = out.find('{');
  if (status != 0 || brace == std::string::npos) {
    r.error = fmt::format("fio failed (exit status {})", status);
    return r;
  }
  const std::string_view json = std::string_view(out).substr(brace);
  const std::size_t jobs = json_find_key(json, "jobs");
  const std::size_t read = jobs == std::string_view::npos ? jobs : json_find_key(json, "read", jobs);
  if (read == std::string_view::npos) {
    r.error = "fio's JSON output has no jobs[0].read";
    return r;
  }
  auto job_error = json_number_after(json, "error", jobs);
  auto iops = json_number_after(json, "iops", read);
  auto total = json_number_after(json, "total_ios", read);
  auto runtime = json_number_after(json, "job_runtime", read);  // ms, summed over the group's jobs
  auto usr = json_number_after(json, "usr_cpu", read);          // % of job_runtime
  auto sys = json_number_after(json, "sys_cpu", read);
  if (!iops || !total || !runtime || !usr || !sys) {
    r.error = "fio's JSON output lacks iops/total_ios/job_runtime/usr_cpu/sys_cpu";
    return r;
  }
  if (job_error && *job_error != 0) {
    r.error = fmt::format("fio reported error {} ({})", *job_error, std::strerror(static_cast<int>(*job_error)));
    return r;
  }
  r.ok = true;
  r.iops = *iops;
  r.ios = *total;
  r.user_ms = *usr / 100.0 * *runtime;
  r.sys_ms = *sys / 100.0 * *runtime;
  return r;
}

// ---------------------------------------------------------------------------------------------
// Report

struct Cell {
  std::string engine;
  std::uint64_t bs = 0;
  std::uint64_t reqs = 0;
  std::vector<TaiRun> tai;
  std::vector<FioRun> fio;
  TaiRun median_run;  // the TAI run of median op/s
  double tai_ops = 0, fio_ops = 0;
  // Medians of the per-pair ratios (run i of TAI against run i of fio, next to each other in
  // time, so that they saw the same machine): steadier than a ratio of medians on a busy machine.
  double ops_ratio = 0, cpu_ratio = 0;
  double tai_cpu_per_op = 0, fio_cpu_per_op = 0;
  double tai_user_per_op = 0, fio_user_per_op = 0;
  bool has_fio() const { return fio_ops > 0; }
  // --via controller: the controller cell's runs (run i next to tai[i]), the one of median op/s,
  // and the median over the pairs of controller op/s / queue op/s.
  std::vector<TaiRun> ctl;
  TaiRun ctl_median_run;
  double ctl_ratio = 0;
};

/// The run of median op/s.
TaiRun median_run(std::vector<TaiRun> runs) {
  std::sort(runs.begin(), runs.end(), [](const TaiRun& a, const TaiRun& b) { return a.ops_per_s() < b.ops_per_s(); });
  return runs[(runs.size() - 1) / 2];
}

void summarise(Cell& c) {
  c.median_run = median_run(c.tai);
  if (!c.ctl.empty()) {
    c.ctl_median_run = median_run(c.ctl);
    std::vector<double> ratios;
    for (std::size_t i = 0; i < c.tai.size() && i < c.ctl.size(); ++i)
      if (c.tai[i].ops_per_s() > 0) ratios.push_back(c.ctl[i].ops_per_s() / c.tai[i].ops_per_s());
    c.ctl_ratio = median(ratios);
  }
  std::vector<double> ops, cpu, user;
  for (const auto& r : c.tai) {
    ops.push_back(r.ops_per_s());
    cpu.push_back(r.cpu_us_per_op());
    user.push_back(r.user_us_per_op());
  }
  c.tai_ops = median(ops);
  c.tai_cpu_per_op = median(cpu);
  c.tai_user_per_op = median(user);
  ops.clear();
  cpu.clear();
  user.clear();
  for (const auto& r : c.fio) {
    if (!r.ok) continue;
    ops.push_back(r.iops);
    cpu.push_back(r.cpu_us_per_op());
    user.push_back(r.user_us_per_op());
  }
  c.fio_ops = median(ops);
  c.fio_cpu_per_op = median(cpu);
  c.fio_user_per_op = median(user);
  std::vector<double> ops_ratios, cpu_ratios;
  for (std::size_t i = 0; i < c.tai.size() && i < c.fio.size(); ++i) {
    const FioRun& f = c.fio[i];
    if (!f.ok || f.iops <= 0) continue;
    ops_ratios.push_back(c.tai[i].ops_per_s() / f.iops);
    if (f.cpu_us_per_op() > 0) cpu_ratios.push_back(c.tai[i].cpu_us_per_op() / f.cpu_us_per_op());
  }
  c.ops_ratio = median(ops_ratios);
  c.cpu_ratio = median(cpu_ratios);
}

std::string fixed(double v, int decimals) { return fmt::format("{:.{}f}", v, decimals); }

// What the run reads, on what, and how the rows are made, before the table.
void print_setup(const RandreadConfig& cfg, bool with_fio, unsigned repeat) {
  const MachineInfo machine = machine_info();
  std::string fio_version;
  if (with_fio) {
    int st = 0;
    fio_version = run_program({"fio", "--version"}, &st, true);
    while (!fio_version.empty() && std::isspace(static_cast<unsigned char>(fio_version.back()))) fio_version.pop_back();
  }
  fmt::print("{}: random reads, O_DIRECT, file {} of {} ({} bytes)\n", cfg.title, cfg.file, format_size(cfg.size),
             cfg.size);
  fmt::print("page cache: plays no part (O_DIRECT reads go to the device; the file was written with O_DIRECT too)\n");
  fmt::print("machine: {}\n", describe(machine));
  fmt::print("depth {}; threads = {} workers over posix; requests per run: {}; {} run(s) per row{}\n", cfg.depth,
             cfg.depth,
             cfg.reqs ? fmt::format("{}", cfg.reqs)
                      : fmt::format("min(the ioqueue benchmark's count, ~{:.1f} s worth)", cfg.seconds),
             repeat, repeat > 1 ? ", medians" : "");
  fmt::print("offsets: seed {} (--seed {} repeats them; every run of a round reads its own offsets)\n", cfg.seed,
             cfg.seed);
  fmt::print("buffers: {}\n", cfg.huge_pages
                                  ? "TAI's in transparent huge pages (--hugepages; fio's in ordinary pages)"
                                  : "one fresh anonymous mapping of depth x bs, ordinary pages, as fio allocates its own");
  if (with_fio)
    fmt::print("fio: {} on the same file, interleaved with TAI (TAI, fio, fio, TAI, TAI, fio, ...); fio_op/s = its median, "
               "ratio = median over the pairs of TAI op/s / fio op/s\n",
               fio_version);
  if (cfg.via_controller)
    fmt::print("via controller: rows '<engine>/ctl' read through tai::Controller (default options, BTreeTrivial, {} "
               "receipts in flight into the same kind of buffers), interleaved with the IoQueue row above them "
               "(queue, controller{}, then the reverse); vs_queue = median over the pairs of controller op/s / queue "
               "op/s\n",
               cfg.depth, with_fio ? ", fio" : "");
}

std::vector<std::string> table_headers(const RandreadConfig& cfg, bool with_fio) {
  std::vector<std::string> headers = {"backend", "reqs", "bufsize", "depth", "rtime", "utime",
                                      "stime",   "cpu",  "us/op",   "op/s",  "MB/s"};
  if (with_fio) {
    headers.push_back("fio_op/s");
    headers.push_back("ratio");
  }
  if (cfg.via_controller) headers.push_back("vs_queue");
  return headers;
}

// Requests per run: the user's, else min(the ioqueue benchmark's count, what fits in cfg.seconds)
// measured by a short calibration run (which also warms the device and the queue up).
std::uint64_t requests_per_run(const RandreadConfig& cfg, TaiCell& tai, std::uint64_t bs) {
  if (cfg.reqs) return cfg.reqs;
  const double cal_s = std::min(0.3, std::max(0.05, cfg.seconds / 5));
  TaiRun cal = tai.run(~0ull, cfg.seed ^ 0xca11b, static_cast<std::int64_t>(cal_s * 1e9));
  const double fits = cal.ops_per_s() * cfg.seconds;
  std::uint64_t n = std::min<std::uint64_t>(seed_request_count(bs), static_cast<std::uint64_t>(fits));
  n = std::max<std::uint64_t>(n, 8ull * cfg.depth);
  return (n + cfg.depth - 1) / cfg.depth * cfg.depth;  // whole fio psync jobs
}

// The rounds of one cell: the queue's run, the controller's (`ctl`, when given) and fio's (with
// `with_fio`). Sets `read_errors` when a run's reads did not all return the block.
Cell measure_cell(const RandreadConfig& cfg, const std::string& label, std::uint64_t bs, TaiCell& tai,
                  ControllerCell* ctl, bool with_fio, unsigned repeat, bool& read_errors) {
  Cell cell;
  cell.engine = label;
  cell.bs = bs;
  cell.reqs = requests_per_run(cfg, tai, bs);
  // A short warm-up of the controller cell too (its workers, its task pool, its engine).
  if (ctl) (void)ctl->run(~0ull, cfg.seed ^ 0xca11c, static_cast<std::int64_t>(0.05e9));
  // The runs of a round alternate their order (TAI, [controller,] fio; then the reverse) so
  // that a machine that speeds up or slows down over the rounds favours no side.
  auto check = [&](const char* via, const TaiRun& last) {
    if (!last.errors) return;
    read_errors = true;
    fmt::print(stderr, "randread: {}{} bs {}: {} of {} reads did not return {} bytes (first result: {})\n", label,
               via, bs, last.errors, last.reqs, bs, last.first_bad_result);
  };
  for (unsigned r = 0; r < repeat; ++r) {
    const std::uint64_t seed = cfg.seed + 1000003ull * r + bs;
    std::vector<std::function<void()>> runs;
    runs.emplace_back([&] {
      cell.tai.push_back(tai.run(cell.reqs, seed));
      check("", cell.tai.back());
    });
    if (ctl)
      runs.emplace_back([&] {
        // Other offsets than the queue's run of this round: the second of two runs over the
        // same offsets finds them in the virtual disk's host-side cache (measured here: 2-6x
        // the op/s), which would favour whichever ran second.
        cell.ctl.push_back(ctl->run(cell.reqs, seed ^ 0x5eedc0ffeeull));
        check("/ctl", cell.ctl.back());
      });
    if (with_fio)
      runs.emplace_back([&] {
        FioRun f = run_fio(cfg, label, bs, cell.reqs, seed);
        if (!f.ok) fmt::print(stderr, "randread: fio {} bs {}: {}\n", label, bs, f.error);
        cell.fio.push_back(f);
      });
    if (r % 2 == 1) std::reverse(runs.begin(), runs.end());
    for (auto& run : runs) run();
  }
  summarise(cell);
  return cell;
}

// One table row and CSV line per TAI cell: the queue's (with fio's columns), the controller's.
void add_cell_rows(const RandreadConfig& cfg, bool with_fio, const Cell& cell, Table& table, CsvWriter& csv) {
  const std::uint64_t bs = cell.bs;
  auto add_row = [&](const std::string& backend, const TaiRun& m, bool queue_row) {
    const double us_per_op = m.usage.real_ms * 1e3 * cfg.depth / static_cast<double>(m.reqs);
    const double mbs = m.ops_per_s() * static_cast<double>(bs) / (1024.0 * 1024.0);
    const bool fio_cols = queue_row && with_fio && cell.has_fio();
    std::vector<std::string> row = {backend,
                                    fmt::format("{}", m.reqs),
                                    fmt::format("{}", bs),
                                    fmt::format("{}", cfg.depth),
                                    fixed(m.usage.real_ms, 0),
                                    fixed(m.usage.user_ms, 0),
                                    fixed(m.usage.sys_ms, 0),
                                    fixed(m.usage.cpu_ms(), 0),
                                    fixed(us_per_op, 1),
                                    fixed(m.ops_per_s(), 0),
                                    fixed(mbs, 2)};
    if (with_fio) {
      row.push_back(fio_cols ? fixed(cell.fio_ops, 0) : "-");
      row.push_back(fio_cols ? fixed(cell.ops_ratio, 3) : "-");
    }
    if (cfg.via_controller) row.push_back(queue_row ? "-" : fixed(cell.ctl_ratio, 3));
    table.add_row(row);
    csv.row({backend, fmt::format("{}", m.reqs), fmt::format("{}", bs), fmt::format("{}", cfg.depth),
             fixed(m.usage.real_ms, 3), fixed(m.usage.user_ms, 3), fixed(m.usage.sys_ms, 3),
             fixed(m.usage.cpu_ms(), 3), fixed(us_per_op, 3), fixed(m.ops_per_s(), 1), fixed(mbs, 3),
             fio_cols ? fixed(cell.fio_ops, 1) : "", fio_cols ? fixed(cell.ops_ratio, 4) : "",
             queue_row ? "queue" : "controller", queue_row ? "" : fixed(cell.ctl_ratio, 4)});
  };
  add_row(cell.engine, cell.median_run, true);
  if (!cell.ctl.empty()) add_row(cell.engine + "/ctl", cell.ctl_median_run, false);
}

void print_controller_summary(const RandreadConfig& cfg, const std::vector<Cell>& cells) {
  fmt::print("\nthrough tai::Controller against the raw engine queue (op/s, medians; ratio: median of the per-pair "
             "ratios):\n");
  for (const auto& c : cells) {
    if (c.ctl.empty()) continue;
    std::string verdict;
    if (c.bs == 4096 && cfg.depth == 32)
      verdict = fmt::format(" (target: >= 0.95 at 4 KiB, depth 32: {})", c.ctl_ratio >= 0.95 ? "met" : "MISSED");
    fmt::print("  {} bs {:>6}: controller {:.0f} op/s, queue {:.0f} op/s, controller/queue {:.3f}{}\n", c.engine, c.bs,
               c.ctl_median_run.ops_per_s(), c.median_run.ops_per_s(), c.ctl_ratio, verdict);
  }
}

// CPU per operation against fio, and TAI's target against fio for the kernel-queue engines.
void print_fio_comparison(const std::vector<Cell>& cells) {
  fmt::print("\nCPU per operation (utime+stime per op, medians; ratios: medians of the per-pair ratios), TAI "
             "against fio:\n");
  Table cmp({"backend", "bufsize", "op/s_ratio", "tai_cpu_us/op", "fio_cpu_us/op", "cpu_ratio", "tai_user_us/op",
             "fio_user_us/op", "target"});
  for (const auto& c : cells) {
    if (!c.has_fio()) continue;
    const double ops_ratio = c.ops_ratio;
    const double cpu_ratio = c.cpu_ratio;
    std::string verdict = "-";
    if (c.engine == "libaio" || c.engine == "uring")
      verdict = ops_ratio >= 0.97 && cpu_ratio <= 1.10 ? "met" : "MISSED";
    cmp.add_row({c.engine, fmt::format("{}", c.bs), fixed(ops_ratio, 3), fixed(c.tai_cpu_per_op, 2),
                 fixed(c.fio_cpu_per_op, 2), fixed(cpu_ratio, 3), fixed(c.tai_user_per_op, 2),
                 fixed(c.fio_user_per_op, 2), verdict});
  }
  cmp.print(stdout);
  fmt::print("target for libaio and uring: op/s >= 0.97x fio and CPU per op <= 1.10x fio\n");
}

// The ioqueue benchmark's finding: at (about) equal throughput, the kernel queues use less user CPU than the
// thread pool.
void print_ioqueue_finding(const std::vector<Cell>& cells) {
  std::map<std::uint64_t, std::map<std::string, const Cell*>> by_bs;
  for (const auto& c : cells) by_bs[c.bs][c.engine] = &c;
  bool header = false;
  for (const auto& [bs, engines] : by_bs) {
    auto t = engines.find("threads");
    if (t == engines.end()) continue;
    for (const char* k : {"libaio", "uring"}) {
      auto e = engines.find(k);
      if (e == engines.end()) continue;
      if (!header) {
        fmt::print("\nthe ioqueue benchmark's finding (user CPU per op, thread pool vs kernel queue):\n");
        header = true;
      }
      const Cell& tc = *t->second;
      const Cell& kc = *e->second;
      std::string verdict;
      if (kc.tai_user_per_op > 0)
        verdict = fmt::format("threads use {:.1f}x the user CPU of {}", tc.tai_user_per_op / kc.tai_user_per_op, k);
      else
        verdict = fmt::format("{}'s user CPU is below getrusage's resolution (no ratio)", k);
      fmt::print("  bs {:>6}: threads {:.3f} us user/op at {:.0f} op/s, {} {:.3f} us user/op at {:.0f} op/s -> {} "
                 "(throughput ratio threads/{} {:.2f})\n",
                 bs, tc.tai_user_per_op, tc.tai_ops, k, kc.tai_user_per_op, kc.tai_ops, verdict, k,
                 kc.tai_ops > 0 ? tc.tai_ops / kc.tai_ops : 0.0);
    }
  }
  if (header)
    fmt::print("  (getrusage splits CPU time into user and system by sampling at the timer tick: a user time of a\n"
               "   few ms is only a few samples; utime+stime together are exact)\n");
}

}  // namespace

int run_randread(const RandreadConfig& cfg) {
  if (cfg.depth == 0) {
    fmt::print(stderr, "randread: --depth must be at least 1\n");
    return 2;
  }
  const std::uint64_t max_bs = *std::max_element(cfg.block_sizes.begin(), cfg.block_sizes.end());
  if (cfg.size < max_bs) {
    fmt::print(stderr, "randread: --size {} is smaller than the largest block size {}\n", cfg.size, max_bs);
    return 2;
  }
  std::optional<std::string> fio_path;
  if (cfg.fio) {
    fio_path = find_program("fio");
    if (!fio_path) fmt::print(stderr, "randread: --fio given but fio is not in $PATH (apt-get install fio); running TAI only\n");
  }
  const bool with_fio = fio_path.has_value();
  const unsigned repeat = cfg.repeat ? cfg.repeat : (with_fio || cfg.via_controller ? 3 : 1);

  if (auto err = prepare_file(cfg.file, cfg.size)) {
    fmt::print(stderr, "randread: {}\n", *err);
    return 1;
  }
  print_setup(cfg, with_fio, repeat);

  Table table(table_headers(cfg, with_fio));
  CsvWriter csv;
  if (!cfg.csv.empty()) {
    auto err = csv.open(cfg.csv, {"backend", "reqs", "bufsize", "depth", "rtime_ms", "utime_ms", "stime_ms", "cpu_ms",
                                  "us_per_op", "ops_per_s", "mb_per_s", "fio_ops_per_s", "ratio_vs_fio", "via",
                                  "ratio_vs_queue"});
    if (!err.empty()) {
      fmt::print(stderr, "randread: {}\n", err);
      return 1;
    }
  }

  std::vector<Cell> cells;
  std::vector<std::string> notes;
  bool any_engine = false;
  bool read_errors = false;
  for (const auto& label : cfg.engines) {
    for (std::uint64_t bs : cfg.block_sizes) {
      auto made = TaiCell::make(cfg, label, bs);
      if (auto* why = std::get_if<std::string>(&made)) {
        fmt::print("skipping {}: {}\n", label, *why);
        std::fflush(stdout);
        break;
      }
      auto& tai = std::get<std::unique_ptr<TaiCell>>(made);
      if (!tai->note().empty()) notes.push_back(fmt::format("{} {}: {}", label, bs, tai->note()));
      std::unique_ptr<ControllerCell> ctl;
      if (cfg.via_controller) {
        auto made_ctl = ControllerCell::make(cfg, label, bs);
        if (auto* why = std::get_if<std::string>(&made_ctl)) {
          fmt::print(stderr, "randread: {} bs {} through the controller: {}\n", label, bs, *why);
          read_errors = true;
        } else {
          ctl = std::move(std::get<std::unique_ptr<ControllerCell>>(made_ctl));
          if (!ctl->note().empty()) notes.push_back(fmt::format("{}/ctl {}: {}", label, bs, ctl->note()));
        }
      }
      any_engine = true;
      Cell cell = measure_cell(cfg, label, bs, *tai, ctl.get(), with_fio, repeat, read_errors);
      add_cell_rows(cfg, with_fio, cell, table, csv);
      cells.push_back(std::move(cell));
    }
  }
  if (!any_engine) {
    fmt::print(stderr, "randread: no engine of '{}' is available\n", fmt::join(cfg.engines, ","));
    return 1;
  }

  fmt::print("\n");
  table.print(stdout);
  for (const auto& n : notes) fmt::print("note: {}\n", n);
  if (cfg.via_controller) print_controller_summary(cfg, cells);
  if (with_fio) print_fio_comparison(cells);
  print_ioqueue_finding(cells);
  if (!cfg.csv.empty()) fmt::print("\nCSV written to {}\n", cfg.csv);
  return read_errors ? 1 : 0;
}

// ---------------------------------------------------------------------------------------------
// The subcommand

void add_randread_command(CLI::App& app) {
  struct Options {
    RandreadConfig cfg;
    std::string size = "4G";
    std::string engines = "libaio,uring,threads";
    std::string bs = "512,1k,2k,4k,8k,16k,32k,64k,128k,256k";
    std::string via = "queue";
  };
  auto opt = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand(
      "randread", "The ioqueue benchmark's random reads through tai::IoQueue (O_DIRECT), optionally beside fio");
  sub->add_option("--file", opt->cfg.file, "data file (created once, reused when it has the right size)")
      ->capture_default_str();
  sub->add_option("--size", opt->size, "file size (4k/1M/4G...)")->capture_default_str();
  CLI::Option* engine_opt =
      sub->add_option("--engine", opt->engines,
                      "engines, comma-separated: libaio, uring, threads (pool over posix), ... (with --via controller: "
                      "uring unless given)")
          ->capture_default_str();
  sub->add_option("--bs", opt->bs, "block sizes, comma-separated")->capture_default_str();
  sub->add_option("--depth", opt->cfg.depth, "requests in flight (and threads for 'threads')")->capture_default_str();
  sub->add_option("--reqs", opt->cfg.reqs, "requests per run (default: min(the ioqueue benchmark's count, --seconds worth))");
  sub->add_option("--seconds", opt->cfg.seconds, "target time per run when --reqs is not given")->capture_default_str();
  sub->add_flag("--fio", opt->cfg.fio, "also run fio on the same file, interleaved, and add fio_op/s and ratio");
  sub->add_option("--repeat", opt->cfg.repeat, "runs per row, medians reported (default 3 with --fio, else 1)");
  sub->add_option("--csv", opt->cfg.csv, "write the table as CSV to this file");
  sub->add_option("--submit-batch", opt->cfg.submit_batch,
                  "IoQueueOptions::submit_batch: submit when this many requests wait (0 = at the next reap)")
      ->capture_default_str();
  CLI::Option* seed_opt =
      sub->add_option("--seed", opt->cfg.seed,
                      "random offsets seed (default: a fresh one per invocation, printed: offsets read by an earlier "
                      "run may sit in the virtual disk's host-side cache and read several times faster)");
  sub->add_option("--via", opt->via,
                  "queue: TAI through tai::IoQueue; controller: also through tai::Controller (BTreeTrivial, depth "
                  "receipts in flight), interleaved, with the ratio controller / queue")
      ->check(CLI::IsMember({"queue", "controller"}))
      ->capture_default_str();
  sub->add_option("--ctl-workers", opt->cfg.ctl_workers, "--via controller: worker threads (0: the default)");
  sub->add_option("--ctl-spin-ns", opt->cfg.ctl_spin_ns, "--via controller: ControllerOptions::spin_ns (default: its default)");
  sub->add_option("--ctl-io-spin-ns", opt->cfg.ctl_io_spin_ns,
                  "--via controller: ControllerOptions::io_spin_ns (default: its default)");
  sub->add_option("--ctl-submit-batch", opt->cfg.ctl_submit_batch,
                  "--via controller: ControllerOptions::engine_submit_batch (default: its default)");
  sub->add_flag("--ctl-stats", opt->cfg.ctl_stats, "--via controller: print Controller::stats() of each cell");
  sub->add_flag("--hugepages", opt->cfg.huge_pages,
                "TAI reads into transparent huge pages (fio cannot): shows what buffer placement is worth");
  sub->callback([opt, engine_opt, seed_opt] {
    RandreadConfig cfg = opt->cfg;
    if (seed_opt->count() == 0) cfg.seed = std::random_device{}();
    cfg.via_controller = opt->via == "controller";
    // The controller comparison is about the kernel queue the controller drives best: uring.
    const std::string engines = cfg.via_controller && engine_opt->count() == 0 ? "uring" : opt->engines;
    try {
      cfg.size = parse_size(opt->size);
      cfg.block_sizes = parse_size_list(opt->bs);
    } catch (const std::invalid_argument& e) {
      fmt::print(stderr, "randread: {}\n", e.what());
      throw CLI::RuntimeError(2);
    }
    cfg.engines = split_list(engines);
    if (cfg.engines.empty()) {
      fmt::print(stderr, "randread: --engine is empty\n");
      throw CLI::RuntimeError(2);
    }
    for (auto bs : cfg.block_sizes)
      if (bs == 0) {
        fmt::print(stderr, "randread: a block size of 0\n");
        throw CLI::RuntimeError(2);
      }
    const int rc = run_randread(cfg);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace tai::bench
