// O_APPEND takes the end of file atomically per write: records appended by two threads, and by
// two descriptors, are all there, whole, and never overlap.
#include <sys/uio.h>

#include <set>
#include <thread>

#include "posix_layer/support.hpp"

namespace tai::test {
namespace {

class Append : public LayerTest, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override { restart(layer_settings(GetParam())); }
};

// Record: "<t>:<i>:" padded with the thread's letter to a length that varies with i, then '\n'.
std::string record(int t, int i) {
  std::string r = std::to_string(t) + ":" + std::to_string(i) + ":";
  r += std::string(static_cast<std::size_t>(5 + (i * 37 + t * 11) % 300), static_cast<char>('a' + t));
  return r + "\n";
}

void check_records(const std::string& data, int threads, int per_thread) {
  std::set<std::pair<int, int>> seen;
  std::size_t at = 0;
  while (at < data.size()) {
    const std::size_t nl = data.find('\n', at);
    ASSERT_NE(nl, std::string::npos) << "torn tail at " << at;
    const std::string line = data.substr(at, nl - at + 1);
    int t = -1, i = -1;
    ASSERT_EQ(std::sscanf(line.c_str(), "%d:%d:", &t, &i), 2) << "garbled record at " << at;
    ASSERT_EQ(line, record(t, i)) << "overlapping or torn record at " << at;
    ASSERT_TRUE(seen.insert({t, i}).second) << "record " << t << ":" << i << " twice";
    at = nl + 1;
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(threads * per_thread)) << "lost records";
}

TEST_P(Append, TwoThreadsOnOneDescriptor) {
  const std::string path = file("append1.dat");
  const int fd = posix::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  ASSERT_GE(fd, 0);
  constexpr int kPer = 400;
  auto work = [&](int t) {
    for (int i = 0; i < kPer; ++i) {
      const std::string r = record(t, i);
      if (i % 3 == 0) {  // writev too: its pieces stay together
        struct iovec v[2] = {{const_cast<char*>(r.data()), 4}, {const_cast<char*>(r.data()) + 4, r.size() - 4}};
        ASSERT_EQ(posix::writev(fd, v, 2), static_cast<ssize_t>(r.size()));
      } else if (i % 3 == 1) {
        ASSERT_EQ(posix::pwrite(fd, r.data(), r.size(), 0), static_cast<ssize_t>(r.size()));  // Linux: appends
      } else {
        ASSERT_EQ(write_all(fd, r), static_cast<ssize_t>(r.size()));
      }
    }
  };
  std::thread a(work, 0), b(work, 1);
  a.join();
  b.join();
  ASSERT_EQ(posix::close(fd), 0);
  check_records(kernel_contents(path), 2, kPer);
}

TEST_P(Append, TwoDescriptorsTwoThreads) {
  const std::string path = file("append2.dat");
  ASSERT_EQ(::close(::open(path.c_str(), O_WRONLY | O_CREAT, 0644)), 0);
  const int fa = posix::open(path.c_str(), O_WRONLY | O_APPEND);
  const int fb = posix::open(path.c_str(), O_RDWR | O_APPEND);
  ASSERT_GE(fa, 0);
  ASSERT_GE(fb, 0);
  constexpr int kPer = 400;
  auto work = [&](int t, int fd) {
    for (int i = 0; i < kPer; ++i) ASSERT_EQ(write_all(fd, record(t, i)), static_cast<ssize_t>(record(t, i).size()));
  };
  std::thread a(work, 0, fa), b(work, 1, fb);
  a.join();
  b.join();
  // The offset of an appending descriptor is the end of its last record.
  const off_t end = posix::lseek(fb, 0, SEEK_END);
  EXPECT_GT(end, 0);
  ASSERT_EQ(posix::close(fa), 0);
  ASSERT_EQ(posix::close(fb), 0);
  check_records(kernel_contents(path), 2, kPer);
}

INSTANTIATE_TEST_SUITE_P(Trees, Append, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "trivial" : "default"; });

}  // namespace
}  // namespace tai::test
