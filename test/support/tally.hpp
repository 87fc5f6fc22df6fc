// Totals of suites whose configurations run as separate ctest tests (the crash-state suite, the
// I/O-error loop): each configuration writes one line of counts to a file in the tally
// directory, and a summary test run after them (the crashsim.summary fixture) adds them up.
#pragma once

#include <cctype>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace tai::test {

/// The build's tally directory ("" when the build defines none).
inline std::string tally_dir() {
#ifdef TAI_CRASHSIM_TALLY_DIR
  return TAI_CRASHSIM_TALLY_DIR;
#else
  return "";
#endif
}

/// One configuration's counts: a count, violations, a third count, seconds and the scale.
struct Tally {
  std::uint64_t count = 0, violations = 0, other = 0;
  double seconds = 0, scale = 1;
  std::uint64_t configs = 0;  ///< in a sum: how many files were added
};

/// Writes `t` as `<prefix><label>.txt` in the tally directory (nothing without one).
inline void write_tally(const std::string& prefix, const std::string& label, const Tally& t) {
  const std::string d = tally_dir();
  if (d.empty()) return;
  std::filesystem::create_directories(d);
  std::ofstream(d + "/" + prefix + label + ".txt")
      << t.count << ' ' << t.violations << ' ' << t.other << ' ' << t.seconds << ' ' << t.scale << '\n';
}

/// The sum of the tally files whose names start with `prefix` (an empty prefix: those that start
/// with none of `other_prefix`).
inline Tally sum_tallies(const std::string& prefix, const std::string& other_prefix = {}) {
  Tally sum;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(tally_dir(), ec)) {
    const std::string name = entry.path().filename().string();
    if (!prefix.empty() && name.rfind(prefix, 0) != 0) continue;
    if (prefix.empty() && !other_prefix.empty() && name.rfind(other_prefix, 0) == 0) continue;
    std::ifstream in(entry.path());
    Tally t;
    if (!(in >> t.count >> t.violations >> t.other >> t.seconds >> t.scale)) continue;
    sum.count += t.count;
    sum.violations += t.violations;
    sum.other += t.other;
    sum.seconds += t.seconds;
    sum.scale = t.scale;
    ++sum.configs;
  }
  return sum;
}

}  // namespace tai::test

namespace tai::test {

/// The reliability report's directory ("" when the build defines none): every suite's summary
/// leaves one row there, and the ctest test reliability.summary prints them as one table.
inline std::string reliability_dir() {
#ifdef TAI_RELIABILITY_DIR
  return TAI_RELIABILITY_DIR;
#else
  return "";
#endif
}

/// Writes the suite's row of the reliability table: its name, the configurations it ran (of how
/// many), what it counted (e.g. "1049830 unique crash states") and its violations.
inline void write_reliability_row(const std::string& suite, std::uint64_t configs, std::uint64_t of_configs,
                                  const std::string& counted, std::uint64_t violations) {
  const std::string d = reliability_dir();
  if (d.empty()) return;
  std::filesystem::create_directories(d);
  std::string file = suite;  // a suite's name may hold '/' ("I/O-error loop")
  for (char& ch : file)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  std::ofstream(d + "/" + file + ".row") << suite << '|' << configs << " of " << of_configs << '|' << counted << '|'
                                          << violations << '\n';
}

}  // namespace tai::test
