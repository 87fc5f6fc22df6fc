// The ceiling of overlap the workloads print beside their speed-ups (tai-augment's tables,
// tai-serial's bench): one definition, so that every table means the same by it.
#pragma once

#include <algorithm>

namespace augment {

/// The best speed-up over the serial program that overlapping compute and I/O can give, with C
/// the compute time and P the posix time (P - C is then the time in I/O): the overlapped program
/// still computes for C and still does the I/O for P - C, so it takes at least max(C, P - C).
/// Returns 0 when P or C is not positive.
inline double overlap_ceiling(double compute_s, double posix_s) {
  if (!(compute_s > 0) || !(posix_s > 0)) return 0;
  return posix_s / std::max(compute_s, posix_s - compute_s);
}

}  // namespace augment
