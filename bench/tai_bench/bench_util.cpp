// bench/tai_bench/bench_util.cpp - see bench_util.hpp.
#include "tai_bench/bench_util.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/sysinfo.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include <fmt/core.h>

namespace tai::bench {

// --- time --------------------------------------------------------------------------------------

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {
double tv_ms(const timeval& tv) { return static_cast<double>(tv.tv_sec) * 1e3 + static_cast<double>(tv.tv_usec) / 1e3; }
}  // namespace

void UsageMeter::restart() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  user_ms_ = tv_ms(ru.ru_utime);
  sys_ms_ = tv_ms(ru.ru_stime);
  nvcsw_ = ru.ru_nvcsw;
  nivcsw_ = ru.ru_nivcsw;
  start_ns_ = now_ns();
}

Usage UsageMeter::stop() const {
  const std::int64_t end = now_ns();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  Usage u;
  u.real_ms = static_cast<double>(end - start_ns_) / 1e6;
  u.user_ms = tv_ms(ru.ru_utime) - user_ms_;
  u.sys_ms = tv_ms(ru.ru_stime) - sys_ms_;
  u.voluntary_switches = ru.ru_nvcsw - nvcsw_;
  u.involuntary_switches = ru.ru_nivcsw - nivcsw_;
  return u;
}

// --- sizes and lists ---------------------------------------------------------------------------

std::uint64_t parse_size(std::string_view text) {
  std::string t(text);
  t.erase(std::remove_if(t.begin(), t.end(), [](unsigned char c) { return std::isspace(c); }), t.end());
  auto bad = [&](const char* why) {
    return std::invalid_argument(fmt::format("bad size '{}': {} (examples: 512, 4k, 1M, 4G)", std::string(text), why));
  };
  if (t.empty()) throw bad("empty");
  std::size_t digits = 0;
  while (digits < t.size() && std::isdigit(static_cast<unsigned char>(t[digits]))) ++digits;
  if (digits == 0) throw bad("no number");
  errno = 0;
  const unsigned long long n = std::strtoull(t.substr(0, digits).c_str(), nullptr, 10);
  if (errno == ERANGE) throw bad("too large");
  std::string suffix = t.substr(digits);
  std::transform(suffix.begin(), suffix.end(), suffix.begin(), [](unsigned char c) { return std::tolower(c); });
  if (suffix.size() > 1 && (suffix.back() == 'b')) suffix.pop_back();             // "kb", "kib", "b"
  if (suffix.size() > 1 && suffix.back() == 'i') suffix.pop_back();               // "ki"
  unsigned shift = 0;
  if (suffix.empty() || suffix == "b") shift = 0;
  else if (suffix == "k") shift = 10;
  else if (suffix == "m") shift = 20;
  else if (suffix == "g") shift = 30;
  else if (suffix == "t") shift = 40;
  else throw bad("unknown suffix");
  if (shift && n > (~0ull >> shift)) throw bad("too large");
  return static_cast<std::uint64_t>(n) << shift;
}

std::vector<std::string> split_list(std::string_view text, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(sep, start);
    if (end == std::string_view::npos) end = text.size();
    std::string item(text.substr(start, end - start));
    const auto first = item.find_first_not_of(" \t");
    const auto last = item.find_last_not_of(" \t");
    if (first != std::string::npos) out.push_back(item.substr(first, last - first + 1));
    start = end + 1;
  }
  return out;
}

std::vector<std::uint64_t> parse_size_list(std::string_view text) {
  std::vector<std::uint64_t> out;
  for (const auto& item : split_list(text)) out.push_back(parse_size(item));
  if (out.empty()) throw std::invalid_argument(fmt::format("empty size list '{}'", std::string(text)));
  return out;
}

std::string format_size(std::uint64_t bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  unsigned u = 0;
  double v = static_cast<double>(bytes);
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  if (v == std::floor(v)) return fmt::format("{:.0f} {}", v, units[u]);
  return fmt::format("{:.2f} {}", v, units[u]);
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// --- output ------------------------------------------------------------------------------------

namespace {
bool looks_numeric(const std::string& s) {
  if (s.empty()) return false;
  const bool first_ok = std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '-';
  return first_ok && std::all_of(s.begin(), s.end(), [](unsigned char c) {
           return std::isdigit(c) || c == '.' || c == '-' || c == 'x' || c == 'e' || c == '+';
         });
}
}  // namespace

void Table::print(std::FILE* out) const {
  std::vector<std::size_t> width(headers_.size());
  for (std::size_t c = 0; c < headers_.size(); ++c) width[c] = headers_[c].size();
  for (const auto& row : rows_)
    for (std::size_t c = 0; c < row.size() && c < width.size(); ++c) width[c] = std::max(width[c], row[c].size());
  auto line = [&](const std::vector<std::string>& cells, bool header) {
    std::string s;
    for (std::size_t c = 0; c < width.size(); ++c) {
      const std::string& cell = c < cells.size() ? cells[c] : std::string();
      const bool right = !header && c > 0 && looks_numeric(cell);
      if (c) s += "  ";
      if (right || (header && c > 0)) s += fmt::format("{:>{}}", cell, width[c]);
      else s += fmt::format("{:<{}}", cell, width[c]);
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    fmt::print(out, "{}\n", s);
  };
  line(headers_, true);
  for (const auto& row : rows_) line(row, false);
  std::fflush(out);
}

CsvWriter::~CsvWriter() { close(); }

std::string CsvWriter::open(const std::string& path, const std::vector<std::string>& header) {
  close();
  file_ = std::fopen(path.c_str(), "w");
  if (!file_) return fmt::format("cannot create CSV file '{}': {}", path, std::strerror(errno));
  row(header);
  return {};
}

void CsvWriter::row(const std::vector<std::string>& cells) {
  if (!file_) return;
  std::string s;
  for (std::size_t i = 0; i < cells.size(); ++i) {
    if (i) s += ',';
    const std::string& c = cells[i];
    if (c.find_first_of(",\"\n") == std::string::npos) {
      s += c;
    } else {
      s += '"';
      for (char ch : c) {
        if (ch == '"') s += '"';
        s += ch;
      }
      s += '"';
    }
  }
  s += '\n';
  std::fputs(s.c_str(), file_);
  std::fflush(file_);
}

void CsvWriter::close() {
  if (file_) std::fclose(file_);
  file_ = nullptr;
}

// --- the machine and other programs ------------------------------------------------------------

MachineInfo machine_info() {
  MachineInfo m;
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  m.cpus = n > 0 ? static_cast<unsigned>(n) : 1;
  utsname u{};
  if (uname(&u) == 0) m.kernel = u.release;
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) m.cpu_model = line.substr(line.find_first_not_of(" \t", colon + 1));
      break;
    }
  }
  struct sysinfo si {};
  if (sysinfo(&si) == 0) m.memory_bytes = static_cast<std::uint64_t>(si.totalram) * si.mem_unit;
  return m;
}

std::string describe(const MachineInfo& m) {
  std::string s = fmt::format("{} CPUs (nproc)", m.cpus);
  if (!m.cpu_model.empty()) s += fmt::format(", {}", m.cpu_model);
  if (m.memory_bytes) s += fmt::format(", {} RAM", format_size(m.memory_bytes));
  s += fmt::format(", Linux {}", m.kernel);
  return s;
}

std::optional<std::string> find_program(const std::string& program) {
  if (program.find('/') != std::string::npos) {
    if (access(program.c_str(), X_OK) == 0) return program;
    return std::nullopt;
  }
  const char* path = std::getenv("PATH");
  for (const auto& dir : split_list(path ? path : "/usr/local/bin:/usr/bin:/bin", ':')) {
    std::string full = dir + "/" + program;
    if (access(full.c_str(), X_OK) == 0) return full;
  }
  return std::nullopt;
}

std::string run_program(const std::vector<std::string>& argv, int* status, bool quiet_stderr) {
  if (status) *status = -1;
  if (argv.empty()) return {};
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) return {};
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    return {};
  }
  if (pid == 0) {
    dup2(pipefd[1], STDOUT_FILENO);
    if (quiet_stderr) {
      int devnull = ::open("/dev/null", O_WRONLY);
      if (devnull >= 0) dup2(devnull, STDERR_FILENO);
    }
    execvp(args[0], args.data());
    _exit(127);
  }
  ::close(pipefd[1]);
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(pipefd[0], buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(pipefd[0]);
  int ws = 0;
  while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
  }
  if (status) *status = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
  return out;
}

// --- tiny JSON field lookup --------------------------------------------------------------------

std::size_t json_find_key(std::string_view json, std::string_view key, std::size_t from) {
  const std::string quoted = "\"" + std::string(key) + "\"";
  for (std::size_t p = json.find(quoted, from); p != std::string_view::npos; p = json.find(quoted, p + 1)) {
    std::size_t q = p + quoted.size();
    while (q < json.size() && std::isspace(static_cast<unsigned char>(json[q]))) ++q;
    if (q < json.size() && json[q] == ':') return p;
  }
  return std::string_view::npos;
}

std::optional<double> json_number_after(std::string_view json, std::string_view key, std::size_t from,
                                        std::size_t* pos) {
  std::size_t p = json_find_key(json, key, from);
  if (p == std::string_view::npos) return std::nullopt;
  p = json.find(':', p);
  ++p;
  while (p < json.size() && std::isspace(static_cast<unsigned char>(json[p]))) ++p;
  std::size_t end = p;
  while (end < json.size() && (std::isdigit(static_cast<unsigned char>(json[end])) ||
                                (json[end] != '\0' && std::strchr("+-.eE", json[end]))))
    ++end;
  if (end == p) return std::nullopt;
  const std::string num(json.substr(p, end - p));
  char* stop = nullptr;
  const double v = std::strtod(num.c_str(), &stop);
  if (stop == num.c_str()) return std::nullopt;
  if (pos) *pos = end;
  return v;
}

}  // namespace tai::bench
