// A program on TAI's drop-in layer (tai::posix, its own library): open, write 4 KiB, fsync,
// read them back with pread, close. Built by test/cmake_smoke with find_package (tai::posix),
// add_subdirectory and pkg-config (tai-posix); each run must print "drop-in ok".
#include <tai/posix.hpp>

#include <fcntl.h>

#include <cstdio>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SCRATCH_FILE\n", argv[0]);
    return 2;
  }
  std::vector<char> out(4096), in(4096);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>('a' + i % 26);
  const int fd = tai::posix::open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return std::perror("tai::posix::open"), 1;
  if (tai::posix::write(fd, out.data(), out.size()) != static_cast<ssize_t>(out.size()))
    return std::perror("tai::posix::write"), 1;
  if (tai::posix::fsync(fd) != 0) return std::perror("tai::posix::fsync"), 1;
  if (tai::posix::pread(fd, in.data(), in.size(), 0) != static_cast<ssize_t>(in.size()))
    return std::perror("tai::posix::pread"), 1;
  if (tai::posix::close(fd) != 0) return std::perror("tai::posix::close"), 1;
  if (std::memcmp(in.data(), out.data(), in.size()) != 0) {
    std::fprintf(stderr, "posix consumer: the bytes read back differ\n");
    return 1;
  }
  std::printf("drop-in ok\n");
  return 0;
}
