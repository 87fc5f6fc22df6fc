// bench/tai_bench/bench_util.hpp - what every tai-bench subcommand needs: wall and CPU time
// (steady_clock + getrusage), sizes written as 4k/1M/4G, aligned tables printed with {fmt},
// CSV files, the machine's description, running a helper program (fio) and reading its output.
//
// Thread-safety: free functions are thread-safe; Table and CsvWriter objects are not.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engines/common/errno_text.hpp"

namespace tai::bench {

// --- time --------------------------------------------------------------------------------------

/// Wall time (steady_clock) and CPU time of the whole process (getrusage(RUSAGE_SELF): every
/// thread, worker pools included) over an interval, in milliseconds, plus context switches.
struct Usage {
  double real_ms = 0;
  double user_ms = 0;
  double sys_ms = 0;
  long voluntary_switches = 0;
  long involuntary_switches = 0;
  double cpu_ms() const { return user_ms + sys_ms; }
};

/// Measures a Usage from construction (or restart()) to stop().
class UsageMeter {
 public:
  UsageMeter() { restart(); }
  void restart();
  Usage stop() const;

 private:
  std::int64_t start_ns_ = 0;
  double user_ms_ = 0, sys_ms_ = 0;
  long nvcsw_ = 0, nivcsw_ = 0;
};

/// Nanoseconds on the steady clock.
std::int64_t now_ns();

// --- sizes and lists ---------------------------------------------------------------------------

/// Parses "512", "4k", "4K", "4KiB", "1M", "4G", "1T" (binary multiples: k = 1024).
/// Throws std::invalid_argument with a message naming the text.
std::uint64_t parse_size(std::string_view text);
/// "512,1k,4k" -> {512, 1024, 4096}. Throws std::invalid_argument.
std::vector<std::uint64_t> parse_size_list(std::string_view text);
/// "a,b,,c" -> {"a","b","c"} (empty items dropped, spaces trimmed).
std::vector<std::string> split_list(std::string_view text, char sep = ',');
/// 4096 -> "4 KiB", 1536 -> "1.50 KiB", 100 -> "100 B".
std::string format_size(std::uint64_t bytes);

/// "No such file or directory (ENOENT)": the engines' wording of an errno value, so that the
/// benchmarks' messages name errors as the engines' do.
using detail::errno_text;

/// Median of the values (mean of the two middle ones for an even count); 0 when empty.
double median(std::vector<double> values);

// --- output ------------------------------------------------------------------------------------

/// A table of text cells printed with aligned columns (numbers right-aligned, text left), like
/// the ioqueue benchmark's output.
class Table {
 public:
  explicit Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}
  void add_row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  std::size_t size() const { return rows_.size(); }
  void print(std::FILE* out = stdout) const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

/// A CSV file: one header line, then rows. Fields with a comma, quote or newline are quoted.
class CsvWriter {
 public:
  CsvWriter() = default;
  ~CsvWriter();
  CsvWriter(const CsvWriter&) = delete;
  CsvWriter& operator=(const CsvWriter&) = delete;
  /// Creates (truncates) `path` and writes the header. Returns an error message, empty on success.
  std::string open(const std::string& path, const std::vector<std::string>& header);
  bool is_open() const { return file_ != nullptr; }
  void row(const std::vector<std::string>& cells);
  void close();

 private:
  std::FILE* file_ = nullptr;
};

// --- the machine and other programs ------------------------------------------------------------

struct MachineInfo {
  unsigned cpus = 0;       ///< online CPUs (what nproc prints)
  std::string kernel;      ///< uname -r
  std::string cpu_model;   ///< /proc/cpuinfo "model name", or empty
  std::uint64_t memory_bytes = 0;
};
MachineInfo machine_info();
/// One line: "2 CPUs (Intel ...), 23.4 GiB RAM, Linux 6.1.0".
std::string describe(const MachineInfo& m);

/// The full path of `program` found in $PATH, or nullopt.
std::optional<std::string> find_program(const std::string& program);

/// Runs argv[0] with argv (no shell), returns its standard output; `status` receives the exit
/// status (-1 when it could not be started or was killed). Standard error is passed through
/// unless `quiet_stderr`.
std::string run_program(const std::vector<std::string>& argv, int* status, bool quiet_stderr = false);

// --- tiny JSON field lookup (for fio's --output-format=json) ------------------------------------

/// Finds `"key"` at or after `from` in `json` and returns the number after its colon.
/// `pos`, when given, receives the position just after the number. nullopt if absent.
std::optional<double> json_number_after(std::string_view json, std::string_view key, std::size_t from = 0,
                                        std::size_t* pos = nullptr);
/// Position of `"key"` (followed by optional spaces and a colon) at or after `from`, or npos.
std::size_t json_find_key(std::string_view json, std::string_view key, std::size_t from = 0);

/// xorshift64*: fast, good enough to scatter offsets; reproducible from the seed. Not
/// thread-safe (one per thread).
struct Rng {
  std::uint64_t s;
  explicit Rng(std::uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull) {
    if (s == 0) s = 1;
  }
  std::uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
  }
  /// Uniform in [0, n) by multiply-shift (no division on the hot path).
  std::uint64_t below(std::uint64_t n) {
    __extension__ using u128 = unsigned __int128;  // GCC/Clang; __extension__ silences -Wpedantic
    return static_cast<std::uint64_t>((static_cast<u128>(next()) * n) >> 64);
  }
};

}  // namespace tai::bench
