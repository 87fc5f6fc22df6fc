// fstream: std::ofstream seekp + write under a mutex. The stream has no portable way to reach its
// descriptor, so after flush() the file is fsynced through a second descriptor of the same file
// (fsync covers the file's dirty pages whatever descriptor asks), then the stream is closed.
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
  bool open(const std::string& path) override {
    path_ = path;
    out_.open(path, std::ios::binary | std::ios::out | std::ios::trunc);
    if (!out_) fail("ofstream open " + path + " failed");
    return bool(out_);
  }
  void write(std::size_t, std::uint64_t offset, const void* data, std::size_t n) override {
    std::lock_guard<std::mutex> lock(mutex_);
    out_.seekp(std::streamoff(offset));
    out_.write(static_cast<const char*>(data), std::streamsize(n));
    if (!out_) fail("ofstream write failed");
  }
  void finish() override {
    if (!out_.is_open()) return;
    out_.flush();
    if (!out_) fail("ofstream flush failed");
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0 || ::fsync(fd) != 0) fail(errno_text("fsync", errno));
    if (fd >= 0) ::close(fd);
    out_.close();
    if (out_.fail()) fail("ofstream close failed");
  }

 private:
  std::mutex mutex_;
  std::string path_;
  std::ofstream out_;
};
}  // namespace

std::vector<MethodInfo> fstream_methods() {
  return {{"fstream", "std::ofstream seekp + write under a mutex",
           [](const std::string&, const MethodConfig&) { return std::unique_ptr<Method>(new FstreamMethod); }, "", false}};
}
}  // namespace augment
