// posix: pwrite(2) from every compute thread at its own offset; no lock is needed. sync() is a
// plain fsync(2)/fdatasync(2) on the compute thread, which waits for it. With --direct the files
// are O_DIRECT and the loop hands over padded, aligned records.
#include <unistd.h>

#include <cerrno>

#include "method.hpp"

namespace augment {
namespace {
class PosixMethod final : public Method {
 public:
  explicit PosixMethod(const MethodConfig& config) : config_(config) {}
  bool open(const std::vector<std::string>& paths) override {
    return open_descriptors(paths, config_.direct, &fds_);
  }
  std::size_t record_alignment() const override { return config_.direct ? kDirectAlignment : 1; }
  void write(std::size_t, unsigned file, std::uint64_t offset, const void* data, std::size_t n) override {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::pwrite(fds_[file], p, n, off_t(offset));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return fail(errno_text("pwrite", w < 0 ? errno : EIO));
      p += w;
      n -= std::size_t(w);
      offset += std::uint64_t(w);
    }
  }
  void sync(std::size_t, unsigned file) override {
    if (const int e = sync_fd(fds_[file], config_.fdatasync)) fail(errno_text(config_.fdatasync ? "fdatasync" : "fsync", e));
  }
  void finish() override {
    for (std::size_t i = 0; i < fds_.size(); ++i)
      if (fds_[i] >= 0) sync(0, unsigned(i));
    if (const int e = close_all(fds_)) fail(errno_text("close", e));
  }
  ~PosixMethod() override { close_all(fds_); }

 private:
  const MethodConfig config_;
  std::vector<int> fds_;
};
}  // namespace

std::vector<MethodInfo> posix_methods() {
  return {{"posix", "pwrite(2) from each compute thread, fsync(2) on the compute thread",
           [](const std::string&, const MethodConfig& c) { return std::unique_ptr<Method>(new PosixMethod(c)); }, "",
           false}};
}
}  // namespace augment
