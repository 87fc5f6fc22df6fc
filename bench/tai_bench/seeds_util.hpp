// bench/tai_bench/seeds_util.hpp - what the study subcommands (latency, write, fadvise) share
// beyond bench_util.hpp: the checkable data pattern of their files, creating and reusing those
// files, the page-cache state (drop, warm, measure with mincore and /proc/meminfo), the storage
// under a directory, page faults, a latency histogram, and drawing a PNG with gnuplot.
//
// The data pattern. Every file these benchmarks read is a sequence of 64-bit words; word w is
//     P[w mod 512] XOR mix(w / 512, salt)
// where P is a fixed pseudo-random 4 KiB page and mix() an odd-multiplier hash of the page
// number and a salt. So every 8-byte key has its own value (the latency study's "u64 entries"), every
// 4 KiB page differs from every other, and checking a buffer costs one XOR and one compare per
// word (vectorised): a benchmark can check every byte it read without the check dominating. A
// read that returned nothing, stale data, or the data of another offset fails the check.
//
// Thread-safety: every free function is thread-safe (no shared mutable state). Objects
// (LatencyHistogram) are not: one per thread, merged afterwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tai::bench::seeds {

/// What a study subcommand throws to stop: the exit status and the message for stderr (the
/// command's callback prints it and turns it into CLI::RuntimeError(code)).
class Failure : public std::exception {
 public:
  Failure(int code, std::string message) : code_(code), message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }
  int code() const noexcept { return code_; }

 private:
  int code_;
  std::string message_;
};

/// The body of a study subcommand's CLI11 callback: runs `body`, and turns a non-zero status, a
/// Failure (its code) or a bad argument (2) into CLI::RuntimeError after printing
/// "tai-bench <name>: <what>" on stderr (stdout flushed first, so the two stay in order).
void run_command(const char* name, const std::function<int()>& body);

/// Exit status when data read back does not match what was written (checksum verification).
inline constexpr int kExitMismatch = 3;

// --- the data pattern --------------------------------------------------------------------------

inline constexpr std::uint64_t kPatternPage = 4096;  ///< bytes of P
inline constexpr std::uint64_t kWordsPerPage = kPatternPage / 8;

/// The expected value of word `word_index` (byte offset / 8) of a file written with `salt`.
std::uint64_t expected_word(std::uint64_t word_index, std::uint64_t salt = 0) noexcept;

/// Fills `length` bytes at `buffer` with the pattern of file bytes [offset, offset + length).
/// offset and length must be multiples of 8.
void fill_pattern(void* buffer, std::uint64_t offset, std::size_t length, std::uint64_t salt = 0) noexcept;

/// Checks `length` bytes at `buffer` against the pattern of [offset, offset + length) (multiples
/// of 8). Returns the file offset of the first 8-byte word that differs, or nullopt.
std::optional<std::uint64_t> find_mismatch(const void* buffer, std::uint64_t offset, std::size_t length,
                                           std::uint64_t salt = 0) noexcept;

/// "at offset 123456: read 0x0123456789abcdef, expected 0x..." for the word at `file_offset`,
/// whose bytes in memory are at `word_in_buffer`.
std::string describe_mismatch(const void* word_in_buffer, std::uint64_t file_offset, std::uint64_t salt = 0);

// --- data files --------------------------------------------------------------------------------

/// A pattern file (salt 0) ready to be read.
struct DataFile {
  std::string path;
  std::uint64_t size = 0;
  bool created = false;       ///< written by this run (else an existing, checked file was reused)
  double create_seconds = 0;  ///< time to write it when created
};

/// `<dir>/tai-seeds-<size>.dat`, or `<dir>/tai-seeds-<size>-<tag>.dat` when `tag` is not empty.
std::string data_file_path(const std::string& dir, std::uint64_t size, const std::string& tag = {});

/// Makes sure a pattern file of `size` bytes (a multiple of 4096) exists at data_file_path(dir,
/// size, tag): reuses an existing one whose size matches and whose first, last and 62 sampled
/// words check, else writes it with O_DIRECT in 4 MiB chunks, fsyncs it and renames it into
/// place (so a killed run never leaves a half-written file that looks reusable). Creates `dir`
/// if missing. Returns nullopt and sets `error` on failure.
std::optional<DataFile> prepare_data_file(const std::string& dir, std::uint64_t size, const std::string& tag,
                                          std::string* error);

/// A study's data file (prepare_data_file). With `own_copy` (the studies' --corrupt-for-test) it
/// is this process's own, tagged with its id, so that damaging it leaves the file other runs
/// reuse intact, and it is removed when this object goes. Move-only.
class StudyDataFile : public DataFile {
 public:
  StudyDataFile(const StudyDataFile&) = delete;
  StudyDataFile& operator=(const StudyDataFile&) = delete;
  StudyDataFile(StudyDataFile&& other) noexcept : DataFile(std::move(other)), own_(std::exchange(other.own_, false)) {}
  StudyDataFile& operator=(StudyDataFile&&) = delete;
  ~StudyDataFile();

  /// Returns nullopt and sets `error` on failure.
  static std::optional<StudyDataFile> prepare(const std::string& dir, std::uint64_t size, bool own_copy,
                                              std::string* error);

 private:
  StudyDataFile(DataFile file, bool own) : DataFile(std::move(file)), own_(own) {}
  bool own_ = false;
};

/// For tests: flips every bit of the byte at `offset` of `path` (pwrite + fdatasync).
/// Returns an error message, empty on success.
std::string corrupt_byte(const std::string& path, std::uint64_t offset);

// --- the page cache ----------------------------------------------------------------------------

/// How to drop a file's cached pages.
enum class DropMethod {
  automatic,    ///< drop_caches when writable, else fadvise
  drop_caches,  ///< sync; echo 1 > /proc/sys/vm/drop_caches (the whole machine's clean page cache)
  fadvise,      ///< fdatasync + POSIX_FADV_DONTNEED on the file only
};
/// "auto", "drop-caches", "fadvise"; nullopt for anything else.
std::optional<DropMethod> parse_drop_method(const std::string& text);

/// Drops the cached pages of `path` with `method` and returns how, as printed in the tables:
/// "dropped (sync + drop_caches)" or "dropped (fdatasync + FADV_DONTNEED; drop_caches: <why
/// not>)". Returns nullopt and sets `error` when nothing could be dropped.
std::optional<std::string> drop_cache(const std::string& path, DropMethod method, std::string* error);

/// Reads the whole file once with buffered 1 MiB reads so that its pages are cached.
/// Returns "warm (read once, buffered)" or nullopt with `error`.
std::optional<std::string> warm_cache(const std::string& path, std::string* error);

/// Bytes of `path` resident in the page cache (mincore over a read-only mapping, 1 GiB at a
/// time); 0 for an empty or missing file.
std::uint64_t resident_bytes(const std::string& path);

/// A field of /proc/meminfo in bytes ("Cached", "MemAvailable", ...); 0 when absent.
std::uint64_t meminfo_bytes(const char* field);

/// Non-idle CPU seconds of the whole machine since boot (/proc/stat: user + nice + system + irq
/// + softirq + steal). Differences over a run include kernel threads (write-back flushers)
/// that getrusage does not charge to this process, and every other process too.
double machine_busy_seconds();

// --- storage and faults ------------------------------------------------------------------------

/// One line about where `dir` lives: "/var/tmp: ext4 on vda (virtio_blk, 256 GiB, logical block
/// 512, physical 4096, rotational 1, scheduler mq-deadline, io_poll 0)".
std::string describe_storage(const std::string& dir);

/// Empty when the block device holding `path` does polled I/O (/sys/block/<dev>/queue/io_poll
/// = 1); else why not, e.g. "/sys/block/vda/queue/io_poll = 0 (the driver has no poll queues)".
std::string io_poll_unsupported_reason(const std::string& path);

/// "load average 0.52 / 0.40 / 0.31 (1/5/15 min)" from /proc/loadavg: printed with every run
/// because other processes competing for the CPUs or the disk make every number noisier.
std::string load_average();

/// Page faults of this process so far (getrusage RUSAGE_SELF).
struct Faults {
  long minor = 0;
  long major = 0;
};
Faults faults_now();

// --- latency -----------------------------------------------------------------------------------

/// Counts of nanosecond latencies: exact below 128 ns, then 64 buckets per power of two (at most
/// 1.6 % error), like HdrHistogram with 2 significant digits. Not thread-safe: one per thread,
/// merge() afterwards.
class LatencyHistogram {
 public:
  LatencyHistogram();
  void record(std::uint64_t ns) noexcept {
    ++counts_[index_of(ns)];
    ++count_;
    sum_ += ns;
  }
  void merge(const LatencyHistogram& other);
  std::uint64_t count() const noexcept { return count_; }
  /// Mean in nanoseconds (exact: the sum is kept); 0 when empty.
  double mean() const noexcept;
  /// The q-quantile (0 < q <= 1) in nanoseconds: the middle of the bucket holding it.
  double percentile(double q) const noexcept;

 private:
  static std::size_t index_of(std::uint64_t ns) noexcept;
  std::vector<std::uint64_t> counts_;
  std::uint64_t count_ = 0;
  std::uint64_t sum_ = 0;
};

/// A deterministic 64-bit generator (splitmix64): the key sequence of thread t of a run with
/// seed s is the same in every variant, so a corrupted key is met by all of them.
class KeyGenerator {
 public:
  explicit KeyGenerator(std::uint64_t seed) noexcept : state_(seed) {}
  std::uint64_t next() noexcept {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, n) (n > 0), by multiply-shift (no modulo bias worth speaking of for n << 2^64).
  std::uint64_t below(std::uint64_t n) noexcept {
    __extension__ typedef unsigned __int128 u128;  // GCC/Clang extension; __extension__ keeps -Wpedantic quiet
    return static_cast<std::uint64_t>((static_cast<u128>(next()) * n) >> 64);
  }

 private:
  std::uint64_t state_;
};

/// The seed of thread `thread` of a run seeded with `seed`.
inline std::uint64_t thread_seed(std::uint64_t seed, unsigned thread) noexcept {
  return seed * 0x100000001B3ull + thread * 0x9E3779B97F4A7C15ull + 1;
}

// --- formatting and plotting -------------------------------------------------------------------

/// 1.139e7 (the latency study's format for totals).
std::string format_total(double value);
/// The write study's durations: "1.9s" from one second up, "34.9ms" below.
std::string format_seconds(double seconds);
/// The write study's rates: "2.25 GB/s" from 1 GB/s up, "968.72 MB/s" below (decimal units).
std::string format_rate(double bytes_per_second);

/// Writes `script` to `script_path` and runs gnuplot on it. Returns an error message, empty on
/// success. The script should `set output` itself.
std::string run_gnuplot(const std::string& script, const std::string& script_path);

/// `png_path` with its extension replaced by `extension` (".gp", ".dat").
std::string sibling_path(const std::string& png_path, const std::string& extension);

/// gnuplot's quoting of a string literal (single quotes doubled).
std::string gnuplot_quote(const std::string& text);

}  // namespace tai::bench::seeds
