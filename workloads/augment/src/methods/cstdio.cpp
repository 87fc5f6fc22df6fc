// cstdio: fseek + fwrite under one lock, as a serial programmer would make stdio thread-safe.
// The final fflush + fsync + fclose run inside the clock.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <mutex>

#include "method.hpp"

namespace augment {
namespace {
class CstdioMethod final : public Method {
 public:
  bool open(const std::string& path) override {
    f_ = std::fopen(path.c_str(), "wb");
    if (!f_) fail(errno_text("fopen " + path, errno));
    return f_ != nullptr;
  }
  void write(std::size_t, std::uint64_t offset, const void* data, std::size_t n) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (std::fseek(f_, long(offset), SEEK_SET) != 0) return fail(errno_text("fseek", errno));
    if (std::fwrite(data, 1, n, f_) != n) fail(errno_text("fwrite", errno));
  }
  void finish() override {
    if (!f_) return;
    if (std::fflush(f_) != 0) fail(errno_text("fflush", errno));
    if (::fsync(fileno(f_)) != 0) fail(errno_text("fsync", errno));
    if (std::fclose(f_) != 0) fail(errno_text("fclose", errno));
    f_ = nullptr;
  }
  ~CstdioMethod() override {
    if (f_) std::fclose(f_);
  }

 private:
  std::mutex mutex_;
  std::FILE* f_ = nullptr;
};
}  // namespace

std::vector<MethodInfo> cstdio_methods() {
  return {{"cstdio", "fseek + fwrite under one lock",
           [](const std::string&, const MethodConfig&) { return std::unique_ptr<Method>(new CstdioMethod); }, "", false}};
}
}  // namespace augment
