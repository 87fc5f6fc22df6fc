// The median the workloads report (tai-augment's tables, its sweep and MPI mode, tai-serial's
// bench): one definition, so that every table means the same by "median".
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace augment {

/// The median (the mean of the two middle values for an even count); `if_empty` for none.
inline double median(std::vector<double> v, double if_empty = 0) {
  if (v.empty()) return if_empty;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace augment
