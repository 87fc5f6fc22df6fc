#include "method.hpp"

#include <cstring>

namespace augment {

std::string errno_text(const std::string& what, int err) { return what + ": " + std::strerror(err); }

const std::vector<MethodInfo>& methods() {
  static const std::vector<MethodInfo> all = [] {
    std::vector<MethodInfo> v;
    for (auto part : {posix_methods, cstdio_methods, fstream_methods, aio_methods, uring_methods, libaio_methods, tai_methods}) {
      auto m = part();
      v.insert(v.end(), m.begin(), m.end());
    }
    return v;
  }();
  return all;
}

const MethodInfo* find_method(const std::string& spec, std::string* suffix) {
  const auto colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  for (const MethodInfo& m : methods()) {
    if (m.name != name) continue;
    if (colon != std::string::npos && !m.takes_engine_suffix) return nullptr;
    if (suffix) *suffix = colon == std::string::npos ? std::string() : spec.substr(colon + 1);
    return &m;
  }
  return nullptr;
}

}  // namespace augment
