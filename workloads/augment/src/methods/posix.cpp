// posix: pwrite(2) from every compute thread at its own offset; no lock is needed.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "method.hpp"

namespace augment {
namespace {
class PosixMethod final : public Method {
 public:
  bool open(const std::string& path) override {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail(errno_text("open " + path, errno));
    return fd_ >= 0;
  }
  void write(std::size_t, std::uint64_t offset, const void* data, std::size_t n) override {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::pwrite(fd_, p, n, off_t(offset));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return fail(errno_text("pwrite", w < 0 ? errno : EIO));
      p += w;
      n -= std::size_t(w);
      offset += std::uint64_t(w);
    }
  }
  void finish() override {
    if (fd_ < 0) return;
    if (::fsync(fd_) != 0) fail(errno_text("fsync", errno));
    if (::close(fd_) != 0) fail(errno_text("close", errno));
    fd_ = -1;
  }
  ~PosixMethod() override {
    if (fd_ >= 0) ::close(fd_);
  }

 private:
  int fd_ = -1;
};
}  // namespace

std::vector<MethodInfo> posix_methods() {
  return {{"posix", "pwrite(2) from each compute thread",
           [](const std::string&, const MethodConfig&) { return std::unique_ptr<Method>(new PosixMethod); }, "", false}};
}
}  // namespace augment
