// The order mode's log of epochs: see order_log.hpp.
#include "src/posix/order_log.hpp"

#include "src/posix/crc32c.hpp"

#include "engines/common/errno_text.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

namespace tai::posix::detail {
namespace {

constexpr std::uint64_t kFileMagic = 0x314c44524f494154ull;   // "TAIORDL1"
constexpr std::uint64_t kBatchMagic = 0x4843544142494154ull;  // "TAIBATCH"
// Version 2 adds the batches' alignment to the header (version 1: none, batches back to back;
// still read, a dead process's log may be one).
constexpr std::uint32_t kVersion = 2;
constexpr std::size_t kHeaderSector = 512;
constexpr std::size_t kFileHeaderUsedV1 = 24;  // magic, version, generation, crc
constexpr std::size_t kFileHeaderUsed = 28;    // magic, version, generation, alignment, crc
constexpr std::uint32_t kMaxAlign = 1u << 20;
constexpr std::size_t kBatchHeaderBytes = 56;
constexpr std::size_t kWriteHeaderBytes = 40;
// A path longer than PATH_MAX or a payload field past this are a damaged log, not data.
constexpr std::uint32_t kMaxPath = 4096;

void put64(std::string& out, std::uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }
void put32(std::string& out, std::uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }
char* put64(char* p, std::uint64_t v) {
  std::memcpy(p, &v, 8);
  return p + 8;
}
char* put32(char* p, std::uint32_t v) {
  std::memcpy(p, &v, 4);
  return p + 4;
}
std::uint64_t get64(const unsigned char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
std::uint32_t get32(const unsigned char* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

std::string errno_line(const std::string& what, int err) { return what + ": " + tai::detail::errno_text(err); }

}  // namespace

int pwrite_all(int fd, const char* p, std::size_t n, std::uint64_t pos) noexcept {
  while (n > 0) {
    // The system call itself: see kernel_sync (the preload library interposes pwrite).
    const ssize_t w = ::syscall(SYS_pwrite64, fd, p, n, static_cast<off_t>(pos));
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (w == 0) return EIO;  // no progress: never loop for ever
    p += w;
    n -= static_cast<std::size_t>(w);
    pos += static_cast<std::uint64_t>(w);
  }
  return 0;
}

int pwritev_all(int fd, struct iovec* iov, int count, std::uint64_t pos) noexcept {
  while (count > 0) {
    // The system call itself (see pwrite_all); on 64-bit Linux the offset's high word is unused.
    const ssize_t w = ::syscall(SYS_pwritev, fd, iov, count, static_cast<long>(pos), 0L);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (w == 0) return EIO;
    pos += static_cast<std::uint64_t>(w);
    auto left = static_cast<std::size_t>(w);
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return 0;
}

namespace {

// The whole file, or errno.
int read_all(int fd, std::vector<unsigned char>& out) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return errno;
  out.resize(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t r = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (r == 0) break;
    done += static_cast<std::size_t>(r);
  }
  out.resize(done);
  return 0;
}

// Replays one log (locked by the caller). 0, or errno of a failure that must keep the log.
int replay_one(const std::string& path, int fd, OrderLogRecovery& rec) {
  std::vector<unsigned char> bytes;
  if (const int e = read_all(fd, bytes)) {
    rec.notes.push_back(errno_line("reading " + path, e));
    return e;
  }
  const ParsedOrderLog log = parse_order_log(bytes.data(), bytes.size());
  std::map<std::string, int> files;  // path -> descriptor (-1: skipped)
  int err = 0;
  for (const auto& b : log.batches) {
    ++rec.batches;
    for (const auto& w : b.writes) {
      auto it = files.find(w.path);
      if (it == files.end()) {
        int f = ::open(w.path.c_str(), O_WRONLY | O_CLOEXEC);
        struct stat st;
        if (f < 0) {
          rec.notes.push_back(errno_line(path + ": " + w.path + " not replayed", errno));
        } else if (::fstat(f, &st) != 0 || st.st_dev != w.dev || st.st_ino != w.ino) {
          rec.notes.push_back(path + ": " + w.path + " not replayed: it is another file now");
          ::close(f);
          f = -1;
        }
        it = files.emplace(w.path, f).first;
      }
      if (it->second < 0) {
        ++rec.skipped;
        continue;
      }
      if (const int e = pwrite_all(it->second, w.bytes.data(), w.bytes.size(), w.pos)) {
        rec.notes.push_back(errno_line(path + ": replaying into " + w.path, e));
        if (err == 0) err = e;
      }
      ++rec.writes;
    }
  }
  for (auto& [name, f] : files) {
    if (f < 0) continue;
    if (::fsync(f) != 0) {
      rec.notes.push_back(errno_line(path + ": fsync of " + name, errno));
      if (err == 0) err = errno;
    }
    ::close(f);
  }
  return err;
}

}  // namespace

std::string encode_order_log_header(std::uint64_t generation, std::uint32_t align) {
  std::string out;
  out.reserve(kHeaderSector);
  put64(out, kFileMagic);
  put32(out, kVersion);
  put64(out, generation);
  put32(out, align);
  put32(out, crc32c(out.data(), out.size()));
  out.resize(kHeaderSector, '\0');
  return out;
}

std::size_t order_log_batch_bytes(const std::vector<OrderLogWriteView>& writes) {
  std::size_t total = kBatchHeaderBytes;
  for (const auto& w : writes) total += kWriteHeaderBytes + w.path->size() + w.size;
  return total;
}

std::size_t order_log_batch_span(std::size_t batch_bytes, std::uint32_t align) {
  return (batch_bytes + align - 1) / align * align;
}

void encode_order_log_batch(std::uint64_t generation, std::uint64_t first_epoch, std::uint64_t last_epoch,
                            const std::vector<OrderLogWriteView>& writes, char* out) {
  char* const payload = out + kBatchHeaderBytes;
  char* p = payload;
  for (const auto& w : writes) {
    p = put64(p, w.dev);
    p = put64(p, w.ino);
    p = put64(p, w.pos);
    p = put64(p, w.size);
    p = put32(p, static_cast<std::uint32_t>(w.path->size()));
    p = put32(p, 0);
    std::memcpy(p, w.path->data(), w.path->size());
    p += w.path->size();
    if (w.size != 0) std::memcpy(p, w.bytes, w.size);
    p += w.size;
  }
  const std::size_t payload_bytes = static_cast<std::size_t>(p - payload);
  char* h = out;
  h = put64(h, kBatchMagic);
  h = put64(h, generation);
  h = put64(h, first_epoch);
  h = put64(h, last_epoch);
  h = put64(h, payload_bytes);
  h = put32(h, static_cast<std::uint32_t>(writes.size()));
  h = put32(h, crc32c(payload, payload_bytes));
  h = put32(h, crc32c(out, 48));
  put32(h, 0);
}

ParsedOrderLog parse_order_log(const unsigned char* data, std::size_t size) {
  ParsedOrderLog log;
  if (size < kOrderLogHeaderBytes || get64(data) != kFileMagic) return log;
  const std::uint32_t version = get32(data + 8);
  const std::size_t used = version == 1 ? kFileHeaderUsedV1 : kFileHeaderUsed;
  if ((version != 1 && version != kVersion) || get32(data + used - 4) != crc32c(data, used - 4)) return log;
  const std::uint32_t align = version == 1 ? 1 : get32(data + 20);
  if (align == 0 || align > kMaxAlign || (align & (align - 1)) != 0) return log;
  log.header_ok = true;
  log.generation = get64(data + 12);
  log.align = align;
  std::size_t at = kOrderLogHeaderBytes;
  while (size - at >= kBatchHeaderBytes) {
    const unsigned char* h = data + at;
    if (get64(h) != kBatchMagic || get64(h + 8) != log.generation || get32(h + 48) != crc32c(h, 48) || get32(h + 52) != 0)
      break;
    const std::uint64_t payload = get64(h + 32);
    const std::uint32_t count = get32(h + 40);
    if (payload > size - at - kBatchHeaderBytes) break;
    const unsigned char* p = h + kBatchHeaderBytes;
    if (get32(h + 44) != crc32c(p, payload)) break;
    OrderLogBatch b;
    b.first_epoch = get64(h + 16);
    b.last_epoch = get64(h + 24);
    std::size_t off = 0;
    bool whole = true;
    for (std::uint32_t i = 0; i < count && whole; ++i) {
      if (payload - off < kWriteHeaderBytes) {
        whole = false;
        break;
      }
      OrderLogWrite w;
      w.dev = get64(p + off);
      w.ino = get64(p + off + 8);
      w.pos = get64(p + off + 16);
      const std::uint64_t len = get64(p + off + 24);
      const std::uint32_t plen = get32(p + off + 32);
      off += kWriteHeaderBytes;
      if (plen > kMaxPath || plen > payload - off || len > payload - off - plen) {
        whole = false;
        break;
      }
      w.path.assign(reinterpret_cast<const char*>(p + off), plen);
      off += plen;
      w.bytes.assign(p + off, p + off + len);
      off += static_cast<std::size_t>(len);
      b.writes.push_back(std::move(w));
    }
    // A checksummed payload that does not parse was not written by this code: stop there.
    if (!whole || off != payload) break;
    log.batches.push_back(std::move(b));
    // The next batch starts at the next multiple of the alignment (zeros between).
    at += order_log_batch_span(kBatchHeaderBytes + static_cast<std::size_t>(payload), align);
    if (at > size) break;
  }
  return log;
}

std::string order_log_path(const std::string& dir) {
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return dir + "/tai-order." + std::to_string(::getpid()) + "." + std::to_string(ts.tv_sec) + "." +
         std::to_string(ts.tv_nsec) + ".log";
}

OrderLogRecovery recover_order_logs(const std::string& dir) {
  OrderLogRecovery rec;
  DIR* d = ::opendir(dir.c_str());
  if (!d) {
    if (errno != ENOENT) {
      rec.error = errno;
      rec.notes.push_back(errno_line("opening " + dir, errno));
    }
    return rec;
  }
  std::vector<std::string> names;
  while (const struct dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.size() > 14 && n.compare(0, 10, "tai-order.") == 0 && n.compare(n.size() - 4, 4, ".log") == 0)
      names.push_back(n);
  }
  ::closedir(d);
  bool removed = false;
  for (const auto& n : names) {
    const std::string path = dir + "/" + n;
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) continue;  // removed by its owner meanwhile
    // The owner holds the lock for its whole life (flock: per open file description, so a
    // second open in the owner's own process is refused as well).
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);
      continue;
    }
    ++rec.logs;
    const int e = replay_one(path, fd, rec);
    if (e == 0) {
      if (::unlink(path.c_str()) == 0) removed = true;
    } else if (rec.error == 0) {
      rec.error = e;
    }
    ::close(fd);
  }
  if (removed) (void)fsync_directory(dir);
  return rec;
}

int fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  const int e = ::fsync(fd) != 0 ? errno : 0;
  ::close(fd);
  return e;
}

}  // namespace tai::posix::detail
