// Machine-readable output of a run set: `--json FILE` and `--csv FILE`.
//
// JSON schema "tai-augment/1" (docs/json_schema.md has the field list the program fills in):
//   {
//     "schema":  "tai-augment/1",
//     "config":  { every option of the invocation, in the order given: "key": value, ... },
//     "machine": { "hostname", "kernel", "cpu_model", "hardware_threads", "memory_total_bytes",
//                  "output_dir", "output_fs", "output_mount_source", "output_block_device", ... },
//     "runs":    [ { "method", "engine", "repeat", "threads", figures ... }, ... ]
//   }
// Every value is a JSON number, string, boolean or null, or (config only) a literal such as an
// array the caller built. A figure that is unavailable (no counters, no /proc/self/io) or not a
// finite number is null, never 0: a missing measurement must not read as a measured zero.
// Keys keep the caller's order (readers should not depend on it, but people diffing files do).
//
// CSV: one header line (the union of the runs' keys in first-seen order), then one row per run;
// a field holding a comma, a double quote, CR or LF is quoted with its quotes doubled (RFC 4180);
// null is an empty field; lines end with LF.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace augment {

class Value {
 public:
  enum class Kind { null, boolean, integer, unsigned_integer, number, string, json_literal };

  Value() = default;                 // null
  Value(std::nullptr_t) {}           // null
  Value(bool b) : kind_(Kind::boolean), int_(b) {}
  Value(const char* s) : kind_(Kind::string), text_(s ? s : "") {}
  Value(std::string s) : kind_(Kind::string), text_(std::move(s)) {}
  Value(double d) : kind_(Kind::number), number_(d) {}
  Value(float d) : Value(double(d)) {}
  template <typename T, typename = std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>>
  Value(T v) {
    if constexpr (std::is_signed_v<T>) {
      kind_ = Kind::integer;
      int_ = std::int64_t(v);
    } else {
      kind_ = Kind::unsigned_integer;
      uint_ = std::uint64_t(v);
    }
  }
  // Text that is already valid JSON (an array, an object): written as is in JSON, as text in CSV.
  // The caller answers for its validity.
  static Value json_literal(std::string json) {
    Value v;
    v.kind_ = Kind::json_literal;
    v.text_ = std::move(json);
    return v;
  }

  Kind kind() const { return kind_; }
  bool is_null() const;  // null, or a number that is NaN or infinite
  std::string to_json() const;
  std::string to_csv() const;  // quoted as RFC 4180 asks when needed

 private:
  Kind kind_ = Kind::null;
  std::int64_t int_ = 0;
  std::uint64_t uint_ = 0;
  double number_ = 0;
  std::string text_;
};

using Fields = std::vector<std::pair<std::string, Value>>;

struct RunSet {
  Fields config;
  Fields machine;
  std::vector<Fields> runs;
};

// A JSON string literal, quotes included: ", \ and control characters escaped (\n, \t, \u001f...);
// bytes >= 0x80 pass through (the caller's strings are UTF-8).
std::string json_quote(const std::string& s);
// One CSV field: as is, or quoted with doubled quotes when it holds , " CR or LF.
std::string csv_field(const std::string& s);
// Shortest text that reads back as the same double ("0.1", "1e+20"); "null" when not finite.
std::string json_number(double d);

// The whole document, schema first, pretty-printed (one run object per line), with a final newline.
std::string to_json(const RunSet& set);
std::string to_csv(const std::vector<Fields>& runs);

// Writes `text` to `path` (through a temporary file renamed into place, so a reader never sees a
// half-written report); false and *err on error.
bool write_text_file(const std::string& path, const std::string& text, std::string* err);

// The machine block: hostname, kernel (uname), CPU model (/proc/cpuinfo), hardware threads,
// memory total, the filesystem holding output_dir (statfs f_type named, plus the mount's source
// and type from /proc/self/mountinfo) and its block device, the compiler. A field that cannot be
// read is null.
Fields describe_machine(const std::string& output_dir);
// One line of /proc/<pid>/mountinfo: where a file system is mounted (unescaped), its type, its
// source and its device number ("major:minor").
struct MountEntry {
  std::string point;
  std::string type;
  std::string source;
  std::string devno;
};
// The mount holding the canonical `path` in a mountinfo text: the longest mount point that is
// `path` or a directory above it, the later line winning a tie (it is mounted over the earlier).
// Nothing when no listed mount holds it, as in a chroot whose root is not itself a mount point.
std::optional<MountEntry> mount_holding(const std::string& path, std::istream& mountinfo);
// The name of a statfs f_type ("ext4", "xfs", "tmpfs", ...), or "0x..." when unknown.
std::string filesystem_name(std::uint64_t f_type);

}  // namespace augment
