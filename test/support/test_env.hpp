// Helpers shared by tests: scratch files on a real file system, seeds.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

namespace tai::test {

/// A fresh directory under $TAI_TEST_DIR (default: /var/tmp, a disk file system where O_DIRECT
/// works, unlike tmpfs) removed with everything in it when the object goes.
class ScratchDir {
 public:
  ScratchDir() : ScratchDir(default_root()) {}
  /// Under `root` instead (e.g. /dev/shm where O_DIRECT is not needed and fsync should be free).
  explicit ScratchDir(const std::filesystem::path& root) {
    std::string tmpl = (root / "tai-test-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) std::abort();
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  /// $TAI_TEST_DIR, or /var/tmp.
  static std::filesystem::path default_root() {
    const char* base = std::getenv("TAI_TEST_DIR");
    return base ? base : "/var/tmp";
  }

 private:
  std::filesystem::path path_;
};

/// The seed of a randomized test: $TAI_TEST_SEED if set, else random. Print it on failure.
inline std::uint64_t test_seed() {
  if (const char* s = std::getenv("TAI_TEST_SEED")) return std::strtoull(s, nullptr, 0);
  return std::random_device{}() * 0x9E3779B97F4A7C15ull ^ std::random_device{}();
}

}  // namespace tai::test
