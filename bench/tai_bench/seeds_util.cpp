// bench/tai_bench/seeds_util.cpp - see seeds_util.hpp.
#include "tai_bench/seeds_util.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "tai/detail/aligned_buffer.hpp"
#include "tai_bench/bench_util.hpp"

namespace tai::bench::seeds {
namespace {

namespace fs = std::filesystem;

/// P: one pseudo-random 4 KiB page, the same in every run and every build (fixed seed).
const std::array<std::uint64_t, kWordsPerPage>& pattern_page() {
  static const std::array<std::uint64_t, kWordsPerPage> page = [] {
    std::array<std::uint64_t, kWordsPerPage> p{};
    KeyGenerator g(0x7A15EED5ull);
    for (auto& w : p) w = g.next();
    return p;
  }();
  return page;
}

/// The per-page term: distinct for every page (odd multiplier: a bijection of the page number)
/// and, through the salt, for every run that asks for it.
inline std::uint64_t page_mix(std::uint64_t page, std::uint64_t salt) noexcept {
  return (page + 1) * 0xD6E8FEB86659FD93ull ^ salt * 0xA0761D6478BD642Full;
}

inline std::uint64_t load_word(const unsigned char* p) noexcept {
  std::uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}

/// pread/pwrite of everything, retrying EINTR and short transfers. Returns 0 or an errno.
int full_pread(int fd, void* buf, std::size_t len, std::uint64_t off) {
  auto* p = static_cast<unsigned char*>(buf);
  while (len > 0) {
    const ssize_t n = ::pread(fd, p, len, static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;  // the file is shorter than it said
    p += n;
    off += static_cast<std::uint64_t>(n);
    len -= static_cast<std::size_t>(n);
  }
  return 0;
}
int full_pwrite(int fd, const void* buf, std::size_t len, std::uint64_t off) {
  const auto* p = static_cast<const unsigned char*>(buf);
  while (len > 0) {
    const ssize_t n = ::pwrite(fd, p, len, static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    p += n;
    off += static_cast<std::uint64_t>(n);
    len -= static_cast<std::size_t>(n);
  }
  return 0;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

/// /sys/block/<disk> of the device holding `path` (the whole disk when it is a partition), or
/// empty with `why`.
std::string sys_block_dir(const std::string& path, std::string* why) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    *why = fmt::format("stat '{}': {}", path, errno_text(errno));
    return {};
  }
  const std::string link = fmt::format("/sys/dev/block/{}:{}", major(st.st_dev), minor(st.st_dev));
  std::error_code ec;
  fs::path dev = fs::canonical(link, ec);
  if (ec) {
    *why = fmt::format("'{}' is on device {}:{}, which is not a block device ({} does not exist: "
                       "tmpfs, overlay or a network file system)",
                       path, major(st.st_dev), minor(st.st_dev), link);
    return {};
  }
  if (fs::exists(dev / "partition")) dev = dev.parent_path();
  return dev.string();
}

}  // namespace

// --- the data pattern --------------------------------------------------------------------------

std::uint64_t expected_word(std::uint64_t word_index, std::uint64_t salt) noexcept {
  return pattern_page()[word_index % kWordsPerPage] ^ page_mix(word_index / kWordsPerPage, salt);
}

void fill_pattern(void* buffer, std::uint64_t offset, std::size_t length, std::uint64_t salt) noexcept {
  const auto& p = pattern_page();
  auto* out = static_cast<unsigned char*>(buffer);
  std::uint64_t word = offset / 8;
  std::size_t words = length / 8;
  while (words > 0) {
    const std::uint64_t page = word / kWordsPerPage;
    const std::size_t first = word % kWordsPerPage;
    const std::size_t n = std::min<std::size_t>(words, kWordsPerPage - first);
    const std::uint64_t m = page_mix(page, salt);
    for (std::size_t j = 0; j < n; ++j) {
      const std::uint64_t v = p[first + j] ^ m;
      std::memcpy(out + j * 8, &v, 8);
    }
    out += n * 8;
    word += n;
    words -= n;
  }
}

std::optional<std::uint64_t> find_mismatch(const void* buffer, std::uint64_t offset, std::size_t length,
                                           std::uint64_t salt) noexcept {
  const auto& p = pattern_page();
  const auto* in = static_cast<const unsigned char*>(buffer);
  std::uint64_t word = offset / 8;
  std::size_t words = length / 8;
  while (words > 0) {
    const std::uint64_t page = word / kWordsPerPage;
    const std::size_t first = word % kWordsPerPage;
    const std::size_t n = std::min<std::size_t>(words, kWordsPerPage - first);
    const std::uint64_t m = page_mix(page, salt);
    // OR of the differences first (the compiler vectorises it); search only when it is not 0.
    std::uint64_t diff = 0;
    for (std::size_t j = 0; j < n; ++j) diff |= load_word(in + j * 8) ^ p[first + j] ^ m;
    if (diff != 0) {
      for (std::size_t j = 0; j < n; ++j)
        if ((load_word(in + j * 8) ^ p[first + j] ^ m) != 0) return (word + j) * 8;
    }
    in += n * 8;
    word += n;
    words -= n;
  }
  return std::nullopt;
}

std::string describe_mismatch(const void* word_in_buffer, std::uint64_t file_offset, std::uint64_t salt) {
  const std::uint64_t got = load_word(static_cast<const unsigned char*>(word_in_buffer));
  return fmt::format("at file offset {}: read 0x{:016x}, expected 0x{:016x}", file_offset, got,
                     expected_word(file_offset / 8, salt));
}

// --- data files --------------------------------------------------------------------------------

std::string data_file_path(const std::string& dir, std::uint64_t size, const std::string& tag) {
  return (fs::path(dir) / (tag.empty() ? fmt::format("tai-seeds-{}.dat", size)
                                       : fmt::format("tai-seeds-{}-{}.dat", size, tag)))
      .string();
}

namespace {

/// True when `path` has `size` bytes and its first, last and 62 sampled words check.
bool reusable(const std::string& path, std::uint64_t size) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || static_cast<std::uint64_t>(st.st_size) != size) return false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const std::uint64_t words = size / 8;
  KeyGenerator g(size);
  bool ok = true;
  for (int i = 0; i < 64 && ok; ++i) {
    const std::uint64_t w = i == 0 ? 0 : i == 1 ? words - 1 : g.below(words);
    std::uint64_t v = 0;
    ok = full_pread(fd, &v, 8, w * 8) == 0 && v == expected_word(w);
  }
  ::close(fd);
  return ok;
}

}  // namespace

std::optional<DataFile> prepare_data_file(const std::string& dir, std::uint64_t size, const std::string& tag,
                                          std::string* error) {
  if (size == 0 || size % kPatternPage != 0) {
    *error = fmt::format("data file size {} is not a positive multiple of 4096", size);
    return std::nullopt;
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    *error = fmt::format("cannot create directory '{}': {}", dir, ec.message());
    return std::nullopt;
  }
  DataFile out;
  out.path = data_file_path(dir, size, tag);
  out.size = size;
  if (reusable(out.path, size)) return out;

  const auto start = std::chrono::steady_clock::now();
  const std::string tmp = fmt::format("{}.tmp-{}", out.path, ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
  if (fd < 0 && errno == EINVAL) fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = fmt::format("cannot create '{}': {}", tmp, errno_text(errno));
    return std::nullopt;
  }
  constexpr std::size_t kChunk = 4u << 20;
  detail::AlignedBuffer buf(kChunk, 4096);
  int err = 0;
  for (std::uint64_t off = 0; off < size && err == 0; off += kChunk) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, size - off));
    fill_pattern(buf.data(), off, n);
    err = full_pwrite(fd, buf.data(), n, off);
  }
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), out.path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    *error = fmt::format("cannot write '{}' ({} bytes): {}", out.path, size, errno_text(err));
    return std::nullopt;
  }
  out.created = true;
  out.create_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

StudyDataFile::~StudyDataFile() {
  if (own_) ::unlink(path.c_str());
}

std::optional<StudyDataFile> StudyDataFile::prepare(const std::string& dir, std::uint64_t size, bool own_copy,
                                                    std::string* error) {
  const std::string tag = own_copy ? fmt::format("corrupt-{}", ::getpid()) : std::string();
  std::optional<DataFile> file = prepare_data_file(dir, size, tag, error);
  if (!file) return std::nullopt;
  return StudyDataFile(std::move(*file), own_copy);
}

std::string corrupt_byte(const std::string& path, std::uint64_t offset) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return fmt::format("corrupt: open '{}': {}", path, errno_text(errno));
  unsigned char b = 0;
  int err = full_pread(fd, &b, 1, offset);
  b = static_cast<unsigned char>(~b);
  if (err == 0) err = full_pwrite(fd, &b, 1, offset);
  if (err == 0 && ::fdatasync(fd) != 0) err = errno;
  ::close(fd);
  return err == 0 ? std::string() : fmt::format("corrupt: byte {} of '{}': {}", offset, path, errno_text(err));
}

// --- the page cache ----------------------------------------------------------------------------

std::optional<DropMethod> parse_drop_method(const std::string& text) {
  if (text == "auto") return DropMethod::automatic;
  if (text == "drop-caches") return DropMethod::drop_caches;
  if (text == "fadvise") return DropMethod::fadvise;
  return std::nullopt;
}

std::optional<std::string> drop_cache(const std::string& path, DropMethod method, std::string* error) {
  std::string why_not;
  if (method != DropMethod::fadvise) {
    // sync first: drop_caches only drops clean pages.
    ::sync();
    const int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      const ssize_t n = ::write(fd, "1", 1);
      const int err = errno;
      ::close(fd);
      if (n == 1) return std::string("dropped (sync + drop_caches)");
      why_not = fmt::format("write: {}", errno_text(err));
    } else {
      why_not = fmt::format("open: {}", errno_text(errno));
    }
    if (method == DropMethod::drop_caches) {
      *error = fmt::format("cannot drop the page cache through /proc/sys/vm/drop_caches ({}); try "
                           "--drop-with fadvise",
                           why_not);
      return std::nullopt;
    }
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *error = fmt::format("cannot open '{}' to drop its cache: {}", path, errno_text(errno));
    return std::nullopt;
  }
  // fdatasync: POSIX_FADV_DONTNEED only drops clean pages.
  (void)::fdatasync(fd);
  const int rc = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  if (rc != 0) {
    *error = fmt::format("posix_fadvise(DONTNEED) on '{}': {}", path, errno_text(rc));
    return std::nullopt;
  }
  return why_not.empty() ? std::string("dropped (fdatasync + FADV_DONTNEED)")
                         : fmt::format("dropped (fdatasync + FADV_DONTNEED; drop_caches {})", why_not);
}

std::optional<std::string> warm_cache(const std::string& path, std::string* error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *error = fmt::format("cannot open '{}' to warm its cache: {}", path, errno_text(errno));
    return std::nullopt;
  }
  std::vector<unsigned char> buf(1u << 20);
  std::uint64_t off = 0;
  for (;;) {
    const ssize_t n = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = fmt::format("reading '{}' to warm its cache: {}", path, errno_text(errno));
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    off += static_cast<std::uint64_t>(n);
  }
  ::close(fd);
  return std::string("warm (read once, buffered)");
}

std::uint64_t resident_bytes(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st {};
  std::uint64_t resident = 0;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    const auto size = static_cast<std::uint64_t>(st.st_size);
    const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    constexpr std::uint64_t kWindow = 1ull << 30;
    std::vector<unsigned char> vec(kWindow / page);
    for (std::uint64_t off = 0; off < size; off += kWindow) {
      const std::size_t len = static_cast<std::size_t>(std::min(kWindow, size - off));
      void* map = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(off));
      if (map == MAP_FAILED) break;
      const std::size_t pages = (len + page - 1) / page;
      if (::mincore(map, len, vec.data()) == 0) {
        for (std::size_t i = 0; i < pages; ++i) resident += (vec[i] & 1u) ? page : 0;
      }
      ::munmap(map, len);
    }
    resident = std::min(resident, size);
  }
  ::close(fd);
  return resident;
}

std::uint64_t meminfo_bytes(const char* field) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) == 0) {
      std::istringstream ss(line.substr(key.size()));
      std::uint64_t kib = 0;
      ss >> kib;
      return kib * 1024;
    }
  }
  return 0;
}

double machine_busy_seconds() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  return static_cast<double>(user + nice + system + irq + softirq + steal) / ticks;
}

// --- storage and faults ------------------------------------------------------------------------

std::string describe_storage(const std::string& dir) {
  struct statfs sf {};
  std::string fstype = "?";
  if (::statfs(dir.c_str(), &sf) == 0) {
    switch (static_cast<unsigned long>(sf.f_type)) {
      case 0xEF53: fstype = "ext4"; break;
      case 0x58465342: fstype = "xfs"; break;
      case 0x9123683E: fstype = "btrfs"; break;
      case 0x01021994: fstype = "tmpfs"; break;
      case 0x794C7630: fstype = "overlayfs"; break;
      case 0xF2F52010: fstype = "f2fs"; break;
      case 0x6969: fstype = "nfs"; break;
      case 0x2FC12FC1: fstype = "zfs"; break;
      default: fstype = fmt::format("fs type 0x{:x}", static_cast<unsigned long>(sf.f_type));
    }
  }
  std::string why;
  const std::string sys = sys_block_dir(dir, &why);
  if (sys.empty()) return fmt::format("{}: {} ({})", dir, fstype, why);
  const std::string dev = fs::path(sys).filename().string();
  std::error_code ec;
  const fs::path driver = fs::read_symlink(fs::path(sys) / "device" / "driver", ec);
  const std::string sectors = read_text_file(sys + "/size");
  const std::uint64_t bytes = sectors.empty() ? 0 : std::strtoull(sectors.c_str(), nullptr, 10) * 512;
  std::string sched = read_text_file(sys + "/queue/scheduler");
  if (auto l = sched.find('['), r = sched.find(']'); l != std::string::npos && r != std::string::npos && r > l)
    sched = sched.substr(l + 1, r - l - 1);
  return fmt::format("{}: {} on {} ({}{}, logical block {}, physical {}, rotational {}, scheduler {}, io_poll {})",
                     dir, fstype, dev, ec ? std::string() : driver.filename().string() + ", ",
                     format_size(bytes), read_text_file(sys + "/queue/logical_block_size"),
                     read_text_file(sys + "/queue/physical_block_size"),
                     read_text_file(sys + "/queue/rotational"), sched, read_text_file(sys + "/queue/io_poll"));
}

std::string io_poll_unsupported_reason(const std::string& path) {
  std::string why;
  const std::string sys = sys_block_dir(path, &why);
  if (sys.empty()) return why;
  const std::string value = read_text_file(sys + "/queue/io_poll");
  // Named by the short path people type, /sys/block/<disk>/queue/io_poll.
  const std::string file = "/sys/block/" + fs::path(sys).filename().string() + "/queue/io_poll";
  if (value == "1") return {};
  if (value.empty()) return fmt::format("cannot read {}", file);
  return fmt::format("{} = {} (no poll queues: see nvme.poll_queues, virtio_blk.poll_queues)", file, value);
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  double a = 0, b = 0, c = 0;
  if (!(in >> a >> b >> c)) return "load average unknown";
  return fmt::format("load average {:.2f} / {:.2f} / {:.2f} (1/5/15 min)", a, b, c);
}

Faults faults_now() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return Faults{ru.ru_minflt, ru.ru_majflt};
}

// --- latency -----------------------------------------------------------------------------------

namespace {
constexpr std::size_t kExact = 128;     // values below are their own bucket
constexpr unsigned kSubBits = 6;        // 64 buckets per power of two above
constexpr std::size_t kBuckets = kExact + (64 - 7) * (1u << kSubBits);
}  // namespace

LatencyHistogram::LatencyHistogram() : counts_(kBuckets, 0) {}

std::size_t LatencyHistogram::index_of(std::uint64_t ns) noexcept {
  if (ns < kExact) return static_cast<std::size_t>(ns);
  const unsigned e = 63u - static_cast<unsigned>(__builtin_clzll(ns));  // >= 7
  const std::uint64_t sub = (ns >> (e - kSubBits)) & ((1u << kSubBits) - 1);
  return kExact + (e - 7) * (1u << kSubBits) + static_cast<std::size_t>(sub);
}

void LatencyHistogram::merge(const LatencyHistogram& other) {
  for (std::size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
  count_ += other.count_;
  sum_ += other.sum_;
}

double LatencyHistogram::mean() const noexcept {
  return count_ == 0 ? 0.0 : static_cast<double>(sum_) / static_cast<double>(count_);
}

double LatencyHistogram::percentile(double q) const noexcept {
  if (count_ == 0) return 0;
  const auto rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(count_)));
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < counts_.size(); ++i) {
    seen += counts_[i];
    if (seen >= std::max<std::uint64_t>(rank, 1)) {
      if (i < kExact) return static_cast<double>(i);
      const std::size_t k = i - kExact;
      const unsigned e = static_cast<unsigned>(k >> kSubBits) + 7;
      const std::uint64_t sub = k & ((1u << kSubBits) - 1);
      const double width = std::ldexp(1.0, static_cast<int>(e - kSubBits));
      return static_cast<double>((1u << kSubBits) + sub) * width + width / 2;
    }
  }
  return 0;
}

// --- formatting and plotting -------------------------------------------------------------------

std::string format_total(double value) {
  if (!(value > 0)) return "0";
  int e = static_cast<int>(std::floor(std::log10(value)));
  double m = value / std::pow(10.0, e);
  if (std::round(m * 1000) >= 10000) {  // 9.9996 rounds to 10.000
    m /= 10;
    ++e;
  }
  return fmt::format("{:.3f}e{}", m, e);
}

std::string format_seconds(double seconds) {
  return seconds >= 1.0 ? fmt::format("{:.1f}s", seconds) : fmt::format("{:.1f}ms", seconds * 1e3);
}

std::string format_rate(double bytes_per_second) {
  return bytes_per_second >= 1e9 ? fmt::format("{:.2f} GB/s", bytes_per_second / 1e9)
                                 : fmt::format("{:.2f} MB/s", bytes_per_second / 1e6);
}

std::string run_gnuplot(const std::string& script, const std::string& script_path) {
  const auto gnuplot = find_program("gnuplot");
  if (!gnuplot) return "gnuplot not found in $PATH: install gnuplot-nox (make deps)";
  {
    std::ofstream out(script_path);
    if (!out) return fmt::format("cannot write '{}': {}", script_path, std::strerror(errno));
    out << script;
    if (!out.flush()) return fmt::format("cannot write '{}'", script_path);
  }
  int status = -1;
  (void)run_program({*gnuplot, script_path}, &status);
  if (status != 0) return fmt::format("gnuplot '{}' failed (exit status {})", script_path, status);
  return {};
}

std::string sibling_path(const std::string& png_path, const std::string& extension) {
  fs::path p(png_path);
  p.replace_extension(extension);
  return p.string();
}

std::string gnuplot_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') out += "''";
    else out += c;
  }
  return out + "'";
}

void run_command(const char* name, const std::function<int()>& body) {
  try {
    if (const int rc = body(); rc != 0) throw CLI::RuntimeError(rc);
  } catch (const Failure& f) {
    std::fflush(stdout);
    fmt::print(stderr, "tai-bench {}: {}\n", name, f.what());
    throw CLI::RuntimeError(f.code());
  } catch (const std::invalid_argument& e) {
    std::fflush(stdout);
    fmt::print(stderr, "tai-bench {}: {}\n", name, e.what());
    throw CLI::RuntimeError(2);
  }
}

}  // namespace tai::bench::seeds
