#include "input_dir.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace augment {

namespace fs = std::filesystem;

std::optional<Format> sniff_format(const Bytes& data) {
  static const unsigned char png_signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (data.size() >= 8 && std::equal(png_signature, png_signature + 8, data.begin())) return Format::png;
  // SOI marker followed by the start of another marker: every JPEG (JFIF, Exif, raw) starts so.
  if (data.size() >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) return Format::jpeg;
  return std::nullopt;
}

bool has_image_extension(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

bool read_encoded(const std::string& path, Bytes& out, std::string* err) {
  // POSIX rather than a stream: one fstat for the size and a read loop, no locale or buffering,
  // and errno intact for the message (this read is inside the measured loop with --read-input).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (err) *err = path + ": " + std::strerror(errno);
    return false;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    if (err) *err = path + ": fstat: " + std::strerror(errno);
    ::close(fd);
    return false;
  }
  out.resize(std::size_t(st.st_size));
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      if (err) *err = path + ": read: " + std::strerror(errno);
      ::close(fd);
      return false;
    }
    if (n == 0) break;  // shrank since fstat
    done += std::size_t(n);
  }
  out.resize(done);
  ::close(fd);
  return true;
}

bool jpeg_is_complete(const Bytes& d) {
  // Walk the marker segments from the SOI: each one after FF xx carries a 16-bit length (skipped
  // whole, so an Exif thumbnail's own FF D9 is not mistaken for the end), but the entropy-coded
  // data after a SOS, where a data FF is stuffed as FF 00 and restart markers are FF D0-D7.
  std::size_t i = 2;
  while (i + 1 < d.size()) {
    if (d[i] != 0xff) return false;  // lost sync: not a marker where one must be
    const unsigned char marker = d[i + 1];
    if (marker == 0xff) {  // fill byte before a marker
      ++i;
      continue;
    }
    if (marker == 0xd9) return true;  // EOI
    if (marker == 0x01 || (marker >= 0xd0 && marker <= 0xd7)) {  // markers without a length
      i += 2;
      continue;
    }
    if (i + 3 >= d.size()) return false;
    const std::size_t length = std::size_t(d[i + 2]) << 8 | d[i + 3];
    if (length < 2) return false;
    i += 2 + length;
    if (marker != 0xda) continue;
    // After a SOS header: entropy-coded data up to the next marker that is neither a stuffed FF 00
    // nor a restart marker.
    while (i + 1 < d.size()) {
      if (d[i] == 0xff && d[i + 1] != 0x00 && !(d[i + 1] >= 0xd0 && d[i + 1] <= 0xd7)) break;
      ++i;
    }
  }
  return false;
}

namespace {
struct Candidate {
  std::string path;
  std::uint64_t size = 0;  // at the walk; decides whether the file is planned to be held
  bool hold = false;       // keep its bytes after the check (within the memory budget)
  bool usable = false;
  Format format = Format::png;
  std::string problem;
  Bytes data;
};

void check(Candidate& c) {
  std::string err;
  if (!read_encoded(c.path, c.data, &err)) {
    c.problem = err;
    return;
  }
  const std::optional<Format> format = sniff_format(c.data);
  if (!format) {
    c.problem = c.data.empty() ? "empty file" : "neither a PNG nor a JPEG (unknown magic bytes)";
    return;
  }
  // libjpeg decodes a JPEG cut short (it warns, then pads with grey), so it would pass the decode
  // check and feed the loop half an image: a truncated file is found by its missing end marker.
  if (*format == Format::jpeg && !jpeg_is_complete(c.data)) {
    c.problem = "JPEG is truncated (no end-of-image marker after the last scan)";
    return;
  }
  EncodedImage probe;
  probe.format = *format;
  probe.data = std::move(c.data);
  Image decoded;
  if (!decode(probe, decoded, &err)) {
    c.problem = std::string(*format == Format::png ? "PNG" : "JPEG") + " does not decode: " + err;
    return;
  }
  c.data = std::move(probe.data);
  c.format = *format;
  c.usable = true;
}
}  // namespace

bool load_input_dir(const std::string& dir, InputSet& out, std::string* err, std::uint64_t memory_budget) {
  out = InputSet{};
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (!fs::exists(status)) {
    if (err) *err = "--input " + dir + ": no such directory";
    return false;
  }
  if (ec) {  // e.g. a parent directory without search permission
    if (err) *err = "--input " + dir + ": " + ec.message();
    return false;
  }
  if (!fs::is_directory(status)) {
    if (err) *err = "--input " + dir + ": not a directory";
    return false;
  }

  std::vector<Candidate> candidates;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec);
  if (ec) {
    if (err) *err = "--input " + dir + ": " + ec.message();
    return false;
  }
  for (const fs::recursive_directory_iterator end; it != end; it.increment(ec)) {
    if (ec) {
      if (err) *err = "--input " + dir + ": walking the tree: " + ec.message();
      return false;
    }
    std::error_code entry_ec;
    if (!it->is_regular_file(entry_ec)) continue;  // directories, sockets, dangling links
    const std::string path = it->path().string();
    if (!has_image_extension(path)) {
      ++out.ignored;
      continue;
    }
    Candidate c;
    c.path = path;
    std::error_code size_ec;
    c.size = it->file_size(size_ec);
    if (size_ec) c.size = 0;  // the check's read reports the problem
    candidates.push_back(std::move(c));
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) { return a.path < b.path; });
  // The plan is made before the check, in path order, from the sizes at the walk: so the check
  // never holds more than the budget (plus one file per thread in flight), and the held set does
  // not depend on which thread finished first.
  std::uint64_t planned = 0;
  for (Candidate& c : candidates) {
    if (c.size > memory_budget - planned) break;
    planned += c.size;
    c.hold = true;
  }

  // Decoding is the costly part of the check: spread it over the OpenMP threads. Each candidate is
  // written by one iteration only, and the order is fixed above, so the result is deterministic.
  const long n = long(candidates.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (long i = 0; i < n; ++i) {
    Candidate& c = candidates[std::size_t(i)];
    check(c);
    if (!c.hold || !c.usable) Bytes().swap(c.data);
  }

  for (Candidate& c : candidates) {
    if (!c.usable) {
      out.skipped.push_back("skipped " + c.path + ": " + c.problem);
      continue;
    }
    EncodedImage img;
    img.id = out.images.size();
    img.format = c.format;
    std::error_code size_ec;
    const auto size = fs::file_size(c.path, size_ec);
    out.bytes += size_ec ? c.data.size() : std::uint64_t(size);
    // A file that grew between the walk and the check could overrun the plan: the budget is
    // checked again on the bytes really read.
    if (c.hold && c.data.size() <= memory_budget - out.held_bytes) {
      out.held_bytes += c.data.size();
      ++out.held;
      img.data = std::move(c.data);
    } else {
      Bytes().swap(c.data);
    }
    img.path = std::move(c.path);
    out.images.push_back(std::move(img));
  }
  if (out.images.empty()) {
    if (err) {
      *err = "--input " + dir + ": no usable image (" + std::to_string(candidates.size()) +
             " .png/.jpg/.jpeg file(s), " + std::to_string(out.skipped.size()) + " skipped, " +
             std::to_string(out.ignored) + " other file(s))";
    }
    return false;
  }
  return true;
}

std::size_t streamed_count(const std::vector<EncodedImage>& images) {
  return std::size_t(std::count_if(images.begin(), images.end(),
                                   [](const EncodedImage& e) { return e.data.empty() && !e.path.empty(); }));
}

bool write_input_files(std::vector<EncodedImage>& images, const std::string& dir, std::string* err) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    if (err) *err = dir + ": " + ec.message();
    return false;
  }
  for (EncodedImage& img : images) {
    if (!img.path.empty()) continue;
    char name[40];
    std::snprintf(name, sizeof name, "%06llu.%s", static_cast<unsigned long long>(img.id),
                  img.format == Format::png ? "png" : "jpg");
    const std::string path = (fs::path(dir) / name).string();
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      if (err) *err = path + ": " + std::strerror(errno);
      return false;
    }
    std::size_t done = 0;
    while (done < img.data.size()) {
      const ssize_t n = ::write(fd, img.data.data() + done, img.data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (err) *err = path + ": write: " + std::strerror(errno);
        ::close(fd);
        return false;
      }
      done += std::size_t(n);
    }
    if (::close(fd) != 0) {
      if (err) *err = path + ": close: " + std::strerror(errno);
      return false;
    }
    img.path = path;
  }
  return true;
}

bool evict_from_page_cache(const std::vector<EncodedImage>& images, std::string* err) {
  for (const EncodedImage& img : images) {
    if (img.path.empty()) continue;
    const int fd = ::open(img.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (err) *err = img.path + ": " + std::strerror(errno);
      return false;
    }
    // Dirty pages cannot be dropped: write them back first (a file the spill just wrote). Only
    // clean is needed, not durable: sync_file_range sends no device cache flush, so a file with
    // nothing dirty costs nothing (fdatasync flushed the device for each of them before every
    // run, hundreds of flushes per run set on a disk that honours them).
    if (::sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER) != 0) {
      if (err) *err = img.path + ": sync_file_range: " + std::strerror(errno);
      ::close(fd);
      return false;
    }
    const int rc = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
    if (rc != 0) {
      if (err) *err = img.path + ": posix_fadvise: " + std::strerror(rc);
      return false;
    }
  }
  return true;
}

bool cached_pages(const std::string& path, std::size_t& resident, std::size_t& total, std::string* err) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (err) *err = path + ": " + std::strerror(errno);
    return false;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size == 0) {
    if (err) *err = path + ": empty or unreadable";
    ::close(fd);
    return false;
  }
  const std::size_t size = std::size_t(st.st_size);
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) {
    if (err) *err = path + ": mmap: " + std::strerror(errno);
    return false;
  }
  const std::size_t page = std::size_t(::sysconf(_SC_PAGESIZE));
  total = (size + page - 1) / page;
  std::vector<unsigned char> vec(total);
  const bool ok = ::mincore(map, size, vec.data()) == 0;
  if (!ok && err) *err = path + ": mincore: " + std::strerror(errno);
  ::munmap(map, size);
  resident = 0;
  for (const unsigned char v : vec) resident += v & 1;
  return ok;
}

}  // namespace augment
