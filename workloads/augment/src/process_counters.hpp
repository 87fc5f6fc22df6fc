// Whole-process counters for measuring one run: CPU time, context switches and faults
// (getrusage), the bytes the process moved (/proc/self/io), and the peak resident set over the run.
// Everything is process-wide on purpose: TAI's workers, glibc's AIO threads and the OpenMP threads
// all do part of a method's work, and a per-thread figure would hide the cost a method moves to them.
#pragma once

#include <cstdint>
#include <string>

namespace augment {

struct ProcessCounters {
  // getrusage(RUSAGE_SELF): every thread of the process, live or exited.
  double user_s = 0, sys_s = 0;
  long voluntary_switches = 0, involuntary_switches = 0;
  long minor_faults = 0, major_faults = 0;

  // /proc/self/io (task I/O accounting, summed over the process's threads). io_available is false,
  // with the reason, when the file cannot be read (a kernel without CONFIG_TASK_IO_ACCOUNTING, a
  // sandbox hiding /proc); the byte fields are then 0 and mean nothing.
  bool io_available = false;
  std::string io_unavailable_reason;
  std::uint64_t rchar = 0, wchar = 0;  // bytes through read/write-like calls, page cache hits included
  std::uint64_t read_bytes = 0;        // bytes the block layer fetched for this process
  // Bytes this process dirtied that will reach (or reached) the block layer: counted when the page
  // is dirtied, not when the device writes it, so a later truncate shows as cancelled_write_bytes.
  std::uint64_t write_bytes = 0;
  std::uint64_t cancelled_write_bytes = 0;
};

// Reads every counter now.
ProcessCounters read_process_counters();

// after - before, field by field: the counters of what happened in between. io_available is the
// conjunction of both (with the first reason found).
ProcessCounters operator-(const ProcessCounters& after, const ProcessCounters& before);

// The peak resident set size over one run. start() resets the kernel's high-water mark (VmHWM) to
// the current RSS by writing "5" to /proc/self/clear_refs (Linux >= 4.0); where that write fails
// (an older kernel, a sandbox), the peak read by peak() is the one since the process started, and
// over_run_only says so.
struct PeakRss {
  std::uint64_t bytes = 0;      // 0 when VmHWM could not be read (see note)
  bool over_run_only = false;   // true when the reset worked: the peak belongs to this run
  std::string note;             // why the figure is since process start, or why it is missing
};

class PeakRssMeter {
 public:
  // Resets the high-water mark; returns false (and keeps the reason for peak()'s note) when it cannot.
  bool start();
  PeakRss peak() const;

 private:
  bool reset_ok_ = false;
  std::string reset_error_;
};

// VmHWM / VmRSS of /proc/self/status in bytes; false (and *err) when unreadable.
bool read_status_bytes(const char* field, std::uint64_t& bytes, std::string* err);
// A "Field:   N kB" line of a /proc file (status, meminfo) in bytes; false and *err when missing.
bool read_kib_field(const char* path, const char* field, std::uint64_t& bytes, std::string* err);

}  // namespace augment
