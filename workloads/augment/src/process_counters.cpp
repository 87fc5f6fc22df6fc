#include "process_counters.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace augment {

namespace {
double seconds(const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; }

void read_io(ProcessCounters& c) {
  std::ifstream in("/proc/self/io");
  if (!in) {
    c.io_unavailable_reason = std::string("/proc/self/io: ") + std::strerror(errno) +
                              " (no task I/O accounting in this kernel, or /proc is hidden)";
    return;
  }
  std::string key;
  std::uint64_t value = 0;
  int found = 0;
  while (in >> key >> value) {
    if (key == "rchar:") c.rchar = value, ++found;
    else if (key == "wchar:") c.wchar = value, ++found;
    else if (key == "read_bytes:") c.read_bytes = value, ++found;
    else if (key == "write_bytes:") c.write_bytes = value, ++found;
    else if (key == "cancelled_write_bytes:") c.cancelled_write_bytes = value, ++found;
  }
  // The file can exist yet be empty or partial (e.g. read denied by ptrace access rules in some
  // containers): only all five fields make a usable snapshot.
  if (found != 5) {
    c.io_unavailable_reason = "/proc/self/io: expected 5 byte counters, found " + std::to_string(found);
    return;
  }
  c.io_available = true;
}
}  // namespace

ProcessCounters read_process_counters() {
  ProcessCounters c;
  rusage u{};
  if (::getrusage(RUSAGE_SELF, &u) == 0) {
    c.user_s = seconds(u.ru_utime);
    c.sys_s = seconds(u.ru_stime);
    c.voluntary_switches = u.ru_nvcsw;
    c.involuntary_switches = u.ru_nivcsw;
    c.minor_faults = u.ru_minflt;
    c.major_faults = u.ru_majflt;
  }
  read_io(c);
  return c;
}

ProcessCounters operator-(const ProcessCounters& after, const ProcessCounters& before) {
  ProcessCounters d;
  d.user_s = after.user_s - before.user_s;
  d.sys_s = after.sys_s - before.sys_s;
  d.voluntary_switches = after.voluntary_switches - before.voluntary_switches;
  d.involuntary_switches = after.involuntary_switches - before.involuntary_switches;
  d.minor_faults = after.minor_faults - before.minor_faults;
  d.major_faults = after.major_faults - before.major_faults;
  d.io_available = after.io_available && before.io_available;
  if (!d.io_available) {
    d.io_unavailable_reason =
        !before.io_available ? before.io_unavailable_reason : after.io_unavailable_reason;
    return d;
  }
  // The kernel's counters only grow; a smaller "after" would mean the snapshots were swapped.
  auto diff = [](std::uint64_t a, std::uint64_t b) { return a >= b ? a - b : 0; };
  d.rchar = diff(after.rchar, before.rchar);
  d.wchar = diff(after.wchar, before.wchar);
  d.read_bytes = diff(after.read_bytes, before.read_bytes);
  d.write_bytes = diff(after.write_bytes, before.write_bytes);
  d.cancelled_write_bytes = diff(after.cancelled_write_bytes, before.cancelled_write_bytes);
  return d;
}

bool read_kib_field(const char* path, const char* field, std::uint64_t& bytes, std::string* err) {
  std::ifstream in(path);
  if (!in) {
    if (err) *err = std::string(path) + ": " + std::strerror(errno);
    return false;
  }
  const std::string prefix = std::string(field) + ":";
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, prefix.size(), prefix) != 0) continue;
    std::istringstream fields(line.substr(prefix.size()));
    std::uint64_t kib = 0;
    std::string unit;
    if (fields >> kib >> unit && unit == "kB") {
      bytes = kib * 1024;
      return true;
    }
    break;
  }
  if (err) *err = std::string(path) + " has no readable " + field + " line";
  return false;
}

bool read_status_bytes(const char* field, std::uint64_t& bytes, std::string* err) {
  return read_kib_field("/proc/self/status", field, bytes, err);
}

bool PeakRssMeter::start() {
  // open+write rather than an ofstream: the kernel reports a refused value (EINVAL on kernels
  // before 4.0, which know only 1-4) in write()'s result, which a buffered stream would lose.
  reset_ok_ = false;
  reset_error_.clear();
  const int fd = ::open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    reset_error_ = std::string("cannot open /proc/self/clear_refs: ") + std::strerror(errno);
    return false;
  }
  const ssize_t n = ::write(fd, "5", 1);
  if (n != 1) reset_error_ = std::string("writing 5 to /proc/self/clear_refs: ") + std::strerror(errno);
  ::close(fd);
  reset_ok_ = n == 1;
  return reset_ok_;
}

PeakRss PeakRssMeter::peak() const {
  PeakRss p;
  std::string err;
  if (!read_status_bytes("VmHWM", p.bytes, &err)) {
    p.bytes = 0;
    p.note = err;
    return p;
  }
  p.over_run_only = reset_ok_;
  if (!reset_ok_)
    p.note = "peak RSS since process start (" +
             (reset_error_.empty() ? std::string("no reset asked") : reset_error_) + ")";
  return p;
}

}  // namespace augment
