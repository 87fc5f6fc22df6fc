// cstdio: fseek + fwrite under one lock per file, as a serial programmer would make stdio
// thread-safe. sync() is fflush + fsync(fileno) under that lock. stdio cannot do direct I/O (its
// buffer flushes unaligned pieces), so --direct skips this method with that reason.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <mutex>

#include "method.hpp"

namespace augment {
namespace {
class CstdioMethod final : public Method {
 public:
  explicit CstdioMethod(const MethodConfig& config) : config_(config) {}
  bool open(const std::vector<std::string>& paths) override {
    if (config_.direct) {
      refuse("stdio cannot do O_DIRECT: its buffer flushes unaligned pieces");
      return false;
    }
    files_ = std::vector<Stream>(paths.size());
    for (std::size_t i = 0; i < paths.size(); ++i)
      if (!(files_[i].f = std::fopen(paths[i].c_str(), "wb"))) {
        fail(errno_text("fopen " + paths[i], errno));
        return false;
      }
    return true;
  }
  void write(std::size_t, unsigned file, std::uint64_t offset, const void* data, std::size_t n) override {
    Stream& s = files_[file];
    std::lock_guard<std::mutex> lock(s.mutex);
    if (std::fseek(s.f, long(offset), SEEK_SET) != 0) return fail(errno_text("fseek", errno));
    if (std::fwrite(data, 1, n, s.f) != n) fail(errno_text("fwrite", errno));
  }
  void sync(std::size_t, unsigned file) override {
    Stream& s = files_[file];
    std::lock_guard<std::mutex> lock(s.mutex);
    flush_and_sync(s);
  }
  void finish() override {
    for (Stream& s : files_) {
      if (!s.f) continue;
      flush_and_sync(s);
      if (std::fclose(s.f) != 0) fail(errno_text("fclose", errno));
      s.f = nullptr;
    }
  }
  ~CstdioMethod() override {
    for (Stream& s : files_)
      if (s.f) std::fclose(s.f);
  }

 private:
  struct Stream {
    std::mutex mutex;
    std::FILE* f = nullptr;
  };
  void flush_and_sync(Stream& s) {
    if (std::fflush(s.f) != 0) return fail(errno_text("fflush", errno));
    if (const int e = sync_fd(fileno(s.f), config_.fdatasync)) fail(errno_text(config_.fdatasync ? "fdatasync" : "fsync", e));
  }
  const MethodConfig config_;
  std::vector<Stream> files_;
};
}  // namespace

std::vector<MethodInfo> cstdio_methods() {
  return {{"cstdio", "fseek + fwrite under one lock per file; fflush + fsync under it",
           [](const std::string&, const MethodConfig& c) { return std::unique_ptr<Method>(new CstdioMethod(c)); }, "",
           false}};
}
}  // namespace augment
