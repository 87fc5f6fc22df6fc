// What one run measured, and the one-line text form in which a child run hands it to the bench
// (a file the child writes; the parent reads it after the child exits).
#pragma once

#include <cstdint>
#include <string>

namespace serial {

struct RunOutcome {
  std::string mode;           // what was asked ("preload" comes back from a child that ran "posix")
  std::string status = "ok";  // ok | failed | unavailable
  std::string message;        // failed/unavailable: why
  std::string note;           // what the mode really ran (engine, routed or not, O_DIRECT passed through, ...)
  std::string manifest;       // the run manifest of the output (for --verify and for removal)
  unsigned fsync_every = 0;
  bool direct = false;
  double wall_s = 0, compute_s = 0, io_s = 0, fsync_s = 0;
  std::uint64_t images = 0, skipped = 0, bytes = 0, writes = 0, fsyncs = 0;
  bool ok() const { return status == "ok"; }
};

// "tai-serial-result key=value ..." with the free-text values percent-escaped (space, %, newline,
// =): one line whatever the note says.
std::string to_result_line(const RunOutcome& outcome);
// False when `line` is not a result line or a number in it does not parse.
bool from_result_line(const std::string& line, RunOutcome& outcome);

std::string escape_value(const std::string& text);
std::string unescape_value(const std::string& text);

}  // namespace serial
