#include "method.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
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

bool open_outputs(const std::vector<std::string>& paths, bool direct, std::vector<int>* fds, std::string* error,
                  std::string* refused) {
  fds->assign(paths.size(), -1);
  for (std::size_t i = 0; i < paths.size(); ++i) {
    (*fds)[i] = ::open(paths[i].c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | (direct ? O_DIRECT : 0), 0644);
    if ((*fds)[i] >= 0) continue;
    const int e = errno;
    close_all(*fds);
    if (direct && e == EINVAL)
      *refused = "the filesystem of " + paths[i] + " refuses O_DIRECT";
    else
      *error = errno_text("open " + paths[i], e);
    return false;
  }
  return true;
}

bool Method::open_descriptors(const std::vector<std::string>& paths, bool direct, std::vector<int>* fds,
                              const std::string& why_direct) {
  std::string error, refused;
  if (open_outputs(paths, direct, fds, &error, &refused)) return true;
  refused.empty() ? fail(error) : refuse(refused + why_direct);
  return false;
}

int sync_fd(int fd, bool data_only) {
  int r;
  while ((r = data_only ? ::fdatasync(fd) : ::fsync(fd)) != 0 && errno == EINTR) {
  }
  return r == 0 ? 0 : errno;
}

int close_all(std::vector<int>& fds) {
  int first = 0;
  for (int& fd : fds) {
    if (fd >= 0 && ::close(fd) != 0 && first == 0) first = errno;
    fd = -1;
  }
  return first;
}

AlignedBuffer::~AlignedBuffer() { std::free(p_); }

bool AlignedBuffer::assign(const void* data, std::size_t n) {
  if (n > capacity_) {
    std::free(p_);
    p_ = nullptr;
    capacity_ = size_ = 0;
    const std::size_t cap = (n + kDirectAlignment - 1) / kDirectAlignment * kDirectAlignment;
    if (posix_memalign(&p_, kDirectAlignment, cap) != 0) {
      p_ = nullptr;
      return false;
    }
    capacity_ = cap;
  }
  std::memcpy(p_, data, n);
  size_ = n;
  return true;
}

}  // namespace augment
