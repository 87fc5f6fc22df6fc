// fstream: std::ofstream seekp + write under a mutex per file. The stream has no portable way to
// reach its descriptor, so sync() flushes the stream and fsyncs a second descriptor of the same
// file, opened once (fsync covers the file's dirty pages whatever descriptor asks). A stream
// cannot do direct I/O, so --direct skips this method with that reason.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <mutex>

#include "method.hpp"

namespace augment {
namespace {
class FstreamMethod final : public Method {
 public:
  explicit FstreamMethod(const MethodConfig& config) : config_(config) {}
  bool open(const std::vector<std::string>& paths) override {
    if (config_.direct) {
      refuse("std::ofstream cannot do O_DIRECT: its buffer flushes unaligned pieces");
      return false;
    }
    files_ = std::vector<Stream>(paths.size());
    for (std::size_t i = 0; i < paths.size(); ++i) {
      Stream& s = files_[i];
      s.out.open(paths[i], std::ios::binary | std::ios::out | std::ios::trunc);
      if (!s.out) {
        fail("ofstream open " + paths[i] + " failed");
        return false;
      }
      if ((s.sync_fd = ::open(paths[i].c_str(), O_WRONLY | O_CLOEXEC)) < 0) {
        fail(errno_text("open " + paths[i], errno));
        return false;
      }
    }
    return true;
  }
  void write(std::size_t, unsigned file, std::uint64_t offset, const void* data, std::size_t n) override {
    Stream& s = files_[file];
    std::lock_guard<std::mutex> lock(s.mutex);
    s.out.seekp(std::streamoff(offset));
    s.out.write(static_cast<const char*>(data), std::streamsize(n));
    if (!s.out) fail("ofstream write failed");
  }
  void sync(std::size_t, unsigned file) override {
    Stream& s = files_[file];
    std::lock_guard<std::mutex> lock(s.mutex);
    flush_and_sync(s);
  }
  void finish() override {
    for (Stream& s : files_) {
      if (!s.out.is_open()) continue;
      flush_and_sync(s);
      s.out.close();
      if (s.out.fail()) fail("ofstream close failed");
      if (::close(s.sync_fd) != 0) fail(errno_text("close", errno));
      s.sync_fd = -1;
    }
  }
  ~FstreamMethod() override {
    for (Stream& s : files_)
      if (s.sync_fd >= 0) ::close(s.sync_fd);
  }

 private:
  struct Stream {
    std::mutex mutex;
    std::ofstream out;
    int sync_fd = -1;
  };
  void flush_and_sync(Stream& s) {
    s.out.flush();
    if (!s.out) return fail("ofstream flush failed");
    if (const int e = sync_fd(s.sync_fd, config_.fdatasync)) fail(errno_text(config_.fdatasync ? "fdatasync" : "fsync", e));
  }
  const MethodConfig config_;
  std::vector<Stream> files_;
};
}  // namespace

std::vector<MethodInfo> fstream_methods() {
  return {{"fstream", "std::ofstream seekp + write under a mutex per file; flush + fsync under it",
           [](const std::string&, const MethodConfig& c) { return std::unique_ptr<Method>(new FstreamMethod(c)); }, "",
           false}};
}
}  // namespace augment
