#include "report.hpp"

#include <sys/statfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

namespace augment {

bool Value::is_null() const {
  return kind_ == Kind::null || (kind_ == Kind::number && !std::isfinite(number_));
}

std::string json_number(double d) {
  if (!std::isfinite(d)) return "null";
  char buf[64];
  // std::to_chars without a precision gives the shortest text that round-trips.
  const auto r = std::to_chars(buf, buf + sizeof buf, d);
  std::string s(buf, r.ptr);
  // JSON has no "inf"/"nan" (excluded above) and accepts "1e+20"; "-0" is fine too.
  return s;
}

std::string json_quote(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char esc[8];
          std::snprintf(esc, sizeof esc, "\\u%04x", c);
          out += esc;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

std::string Value::to_json() const {
  switch (kind_) {
    case Kind::null: return "null";
    case Kind::boolean: return int_ ? "true" : "false";
    case Kind::integer: return std::to_string(int_);
    case Kind::unsigned_integer: return std::to_string(uint_);
    case Kind::number: return json_number(number_);
    case Kind::string: return json_quote(text_);
    case Kind::json_literal: return text_.empty() ? "null" : text_;
  }
  return "null";
}

std::string Value::to_csv() const {
  switch (kind_) {
    case Kind::null: return "";
    case Kind::boolean: return int_ ? "true" : "false";
    case Kind::integer: return std::to_string(int_);
    case Kind::unsigned_integer: return std::to_string(uint_);
    case Kind::number: return std::isfinite(number_) ? json_number(number_) : "";
    case Kind::string:
    case Kind::json_literal: return csv_field(text_);
  }
  return "";
}

namespace {
void append_object(std::string& out, const Fields& fields, const char* indent, bool one_line) {
  out += '{';
  bool first = true;
  for (const auto& [key, value] : fields) {
    out += first ? "" : ",";
    if (one_line) {
      out += first ? "" : " ";
    } else {
      out += '\n';
      out += indent;
      out += "  ";
    }
    out += json_quote(key);
    out += ": ";
    out += value.to_json();
    first = false;
  }
  if (!one_line && !fields.empty()) {
    out += '\n';
    out += indent;
  }
  out += '}';
}
}  // namespace

std::string to_json(const RunSet& set) {
  std::string out = "{\n  \"schema\": \"tai-augment/1\",\n  \"config\": ";
  append_object(out, set.config, "  ", false);
  out += ",\n  \"machine\": ";
  append_object(out, set.machine, "  ", false);
  out += ",\n  \"runs\": [";
  for (std::size_t i = 0; i < set.runs.size(); ++i) {
    out += i ? ",\n    " : "\n    ";
    append_object(out, set.runs[i], "    ", true);
  }
  out += set.runs.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

std::string to_csv(const std::vector<Fields>& runs) {
  // The header is the union of every run's keys, first-seen order: a failed run may carry fewer
  // fields (or an error field) than the others and must still land in the right columns.
  std::vector<std::string> columns;
  for (const Fields& run : runs)
    for (const auto& field : run)
      if (std::find(columns.begin(), columns.end(), field.first) == columns.end()) columns.push_back(field.first);
  std::string out;
  for (std::size_t c = 0; c < columns.size(); ++c) out += (c ? "," : "") + csv_field(columns[c]);
  out += '\n';
  for (const Fields& run : runs) {
    for (std::size_t c = 0; c < columns.size(); ++c) {
      if (c) out += ',';
      for (const auto& field : run)
        if (field.first == columns[c]) {
          out += field.second.to_csv();
          break;
        }
    }
    out += '\n';
  }
  return out;
}

bool write_text_file(const std::string& path, const std::string& text, std::string* err) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      if (err) *err = tmp + ": " + std::strerror(errno);
      return false;
    }
    out << text;
    out.flush();
    if (!out) {
      if (err) *err = tmp + ": write failed";
      std::remove(tmp.c_str());
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    if (err) *err = path + ": " + std::strerror(errno);
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

std::string filesystem_name(std::uint64_t f_type) {
  // The magic numbers of <linux/magic.h> (some are absent from older headers, hence the literals).
  static const std::pair<std::uint64_t, const char*> names[] = {
      {0xEF53, "ext2/3/4"},  {0x58465342, "xfs"},      {0x9123683E, "btrfs"},  {0x01021994, "tmpfs"},
      {0x858458f6, "ramfs"}, {0x794c7630, "overlayfs"}, {0x6969, "nfs"},       {0x2fc12fc1, "zfs"},
      {0xF2F52010, "f2fs"},  {0x65735546, "fuse"},     {0x01021997, "9p"},     {0x73717368, "squashfs"},
      {0x5346544e, "ntfs"},  {0x4d44, "vfat"},         {0x2011BAB0, "exfat"},  {0xFF534D42, "cifs"},
      {0x6a656a63, "virtiofs"}, {0x62656572, "sysfs"}, {0x9fa0, "proc"},        {0x3153464a, "jfs"},
      {0x52654973, "reiserfs"}, {0xCA451A4E, "bcachefs"},
  };
  for (const auto& [magic, name] : names)
    if (magic == f_type) return name;
  char hex[24];
  std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(f_type));
  return hex;
}

namespace {
std::string first_line_value(const char* file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string v = line.substr(colon + 1);
    const auto start = v.find_first_not_of(" \t");
    return start == std::string::npos ? std::string() : v.substr(start);
  }
  return {};
}

// /proc/self/mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_mount_field(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      out += char(std::stoi(s.substr(i + 1, 3), nullptr, 8));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

std::optional<MountEntry> mount_holding(const std::string& path, std::istream& mountinfo) {
  std::optional<MountEntry> best;
  std::string line;
  while (std::getline(mountinfo, line)) {
    std::istringstream fields(line);
    std::string id, parent, device, root, mount_point;
    if (!(fields >> id >> parent >> device >> root >> mount_point)) continue;
    mount_point = unescape_mount_field(mount_point);
    const auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string fs_type, fs_source;
    tail >> fs_type >> fs_source;
    const bool prefix = path == mount_point || mount_point == "/" ||
                        (path.compare(0, mount_point.size(), mount_point) == 0 && path.size() > mount_point.size() &&
                         path[mount_point.size()] == '/');
    // ">=": a later line with the same mount point is mounted over the earlier one.
    if (prefix && (!best || mount_point.size() >= best->point.size()))
      best = MountEntry{mount_point, fs_type, unescape_mount_field(fs_source), device};
  }
  return best;
}

namespace {
// The mount holding `dir` in this process's view (/proc/self/mountinfo), or nothing: in a chroot
// the mounts outside the new root are not listed, and the root itself may not be a mount at all.
std::optional<MountEntry> find_mount(const std::string& dir) {
  std::error_code ec;
  const std::string path = std::filesystem::weakly_canonical(dir, ec).string();
  if (ec) return std::nullopt;
  std::ifstream in("/proc/self/mountinfo");
  if (!in) return std::nullopt;
  return mount_holding(path, in);
}

// The block device behind "major:minor" and whether it says it rotates; false for a filesystem
// without one (tmpfs, overlayfs, NFS: their device numbers have no /sys/dev/block entry).
bool block_device(const std::string& devno, std::string& name, bool& rotational) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dev = fs::canonical("/sys/dev/block/" + devno, ec);
  if (ec) return false;
  name = dev.filename().string();
  // A partition has no queue/ of its own: its disk (the parent directory) has.
  for (const fs::path& queue : {dev / "queue" / "rotational", dev.parent_path() / "queue" / "rotational"}) {
    std::ifstream in(queue);
    int value = -1;
    if (in >> value) {
      rotational = value != 0;
      return true;
    }
  }
  return false;
}
}  // namespace

Fields describe_machine(const std::string& output_dir) {
  Fields m;
  char host[256] = {};
  m.emplace_back("hostname", ::gethostname(host, sizeof host - 1) == 0 ? Value(std::string(host)) : Value());
  utsname u{};
  if (::uname(&u) == 0) {
    m.emplace_back("kernel", std::string(u.sysname) + " " + u.release + " " + u.version);
    m.emplace_back("arch", std::string(u.machine));
  } else {
    m.emplace_back("kernel", Value());
    m.emplace_back("arch", Value());
  }
  const std::string cpu = first_line_value("/proc/cpuinfo", "model name");
  m.emplace_back("cpu_model", cpu.empty() ? Value() : Value(cpu));
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  m.emplace_back("hardware_threads", online > 0 ? Value(online) : Value());
  // What this process may run on (cgroup cpusets, taskset) can be fewer than the machine's.
  m.emplace_back("hardware_concurrency", std::thread::hardware_concurrency());
  const std::string mem = first_line_value("/proc/meminfo", "MemTotal");
  unsigned long long kib = 0;
  m.emplace_back("memory_total_bytes",
                 std::sscanf(mem.c_str(), "%llu", &kib) == 1 ? Value(kib * 1024ull) : Value());
  m.emplace_back("output_dir", output_dir);
  struct statfs sf {};
  if (::statfs(output_dir.c_str(), &sf) == 0) {
    m.emplace_back("output_fs", filesystem_name(std::uint64_t(sf.f_type)));
    char hex[24];
    std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(sf.f_type));
    m.emplace_back("output_fs_magic", std::string(hex));
    m.emplace_back("output_fs_block_size", static_cast<long long>(sf.f_bsize));
    m.emplace_back("output_fs_free_bytes", static_cast<unsigned long long>(sf.f_bavail) * static_cast<unsigned long long>(sf.f_bsize));
  } else {
    m.emplace_back("output_fs", Value());
    m.emplace_back("output_fs_magic", Value());
    m.emplace_back("output_fs_block_size", Value());
    m.emplace_back("output_fs_free_bytes", Value());
  }
  const std::optional<MountEntry> mount = find_mount(output_dir);
  m.emplace_back("output_mount_point", mount ? Value(mount->point) : Value());
  m.emplace_back("output_mount_type", mount ? Value(mount->type) : Value());
  m.emplace_back("output_mount_source", mount ? Value(mount->source) : Value());
  std::string device;
  bool rotational = false;
  const bool has_device = mount && block_device(mount->devno, device, rotational);
  m.emplace_back("output_block_device", has_device ? Value(device) : Value());
  m.emplace_back("output_device_rotational", has_device ? Value(rotational) : Value());
#if defined(__clang__)
  m.emplace_back("compiler", std::string("clang ") + __clang_version__);
#elif defined(__GNUC__)
  m.emplace_back("compiler", std::string("gcc ") + __VERSION__);
#else
  m.emplace_back("compiler", Value());
#endif
  return m;
}

}  // namespace augment
