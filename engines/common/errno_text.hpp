// engines/common/errno_text.hpp - an errno value as a reader of an engine's error message wants
// it: the text and the symbolic name, because the name is what one searches the kernel for.
#pragma once

#include <cstring>
#include <string>
#include <system_error>

namespace tai::detail {

/// "Resource temporarily unavailable (EAGAIN)"; "errno N" where the C library knows no name.
/// Thread-safe (no strerror's shared buffer).
inline std::string errno_text(int err) {
  std::string s = std::generic_category().message(err);
  const char* name = ::strerrorname_np(err);
  s += " (";
  s += name ? name : ("errno " + std::to_string(err));
  s += ')';
  return s;
}

}  // namespace tai::detail
