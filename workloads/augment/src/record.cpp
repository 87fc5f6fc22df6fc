#include "record.hpp"

#include <zlib.h>

#include <algorithm>
#include <boost/crc.hpp>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "image.hpp"

namespace augment {

std::uint32_t crc32_of(const void* data, std::size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {
    const uInt chunk = n > (1u << 30) ? (1u << 30) : uInt(n);
    crc = crc32(crc, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return std::uint32_t(crc);
}

std::uint32_t crc32c_of(const void* data, std::size_t n) {
  // CRC32C: polynomial 0x1EDC6F41, reflected, initial and final XOR all ones (iSCSI, ext4, SSE4.2).
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(data, n);
  return crc.checksum();
}

void make_record(std::uint64_t id, const std::vector<unsigned char>& payload, std::vector<unsigned char>& out,
                 std::size_t alignment) {
  std::uint16_t log2 = 0;
  while ((std::size_t{1} << log2) < alignment) ++log2;
  RecordHeader h{kRecordMagic, std::uint16_t(kRecordVersion), log2, id, std::uint32_t(payload.size()),
                 crc32_of(payload.data(), payload.size())};
  const std::size_t size = sizeof h + payload.size();
  const std::size_t a = std::size_t{1} << log2;
  out.assign((size + a - 1) / a * a, 0);
  std::memcpy(out.data(), &h, sizeof h);
  std::memcpy(out.data() + sizeof h, payload.data(), payload.size());
}

FileScan scan_file(const std::string& path, bool decode_payloads, bool zero_gaps) {
  FileScan res;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    res.error = path + ": " + std::strerror(errno);
    return res;
  }
  std::vector<unsigned char> bytes;
  std::uint64_t offset = 0;
  auto fail = [&](const std::string& why) {
    res.error = path + " at offset " + std::to_string(offset) + ": " + why;
    std::fclose(f);
    return res;
  };
  for (;;) {
    if (zero_gaps) {
      int c;
      while ((c = getc_unlocked(f)) == 0) ++offset;
      if (c == EOF) {
        if (std::ferror(f)) return fail(std::string("read: ") + std::strerror(errno));
        break;
      }
      std::ungetc(c, f);
    }
    RecordHeader h;
    const std::size_t got = std::fread(&h, 1, sizeof h, f);
    if (got == 0 && std::feof(f)) break;
    if (got != sizeof h) return fail("truncated header");
    if (h.magic != kRecordMagic || h.version != kRecordVersion) return fail("bad magic or version");
    if (h.align_log2 > 20) return fail("bad padding");
    const std::uint64_t a = std::uint64_t{1} << h.align_log2;
    const std::uint64_t size = (sizeof h + std::uint64_t(h.length) + a - 1) / a * a;
    bytes.resize(size);
    std::memcpy(bytes.data(), &h, sizeof h);
    if (std::fread(bytes.data() + sizeof h, 1, size - sizeof h, f) != size - sizeof h)
      return fail("truncated record, image " + std::to_string(h.id));
    const unsigned char* payload = bytes.data() + sizeof h;
    if (crc32_of(payload, h.length) != h.crc32) return fail("CRC mismatch, image " + std::to_string(h.id));
    if (std::any_of(payload + h.length, static_cast<const unsigned char*>(bytes.data() + size), [](unsigned char c) { return c != 0; }))
      return fail("non-zero padding after image " + std::to_string(h.id));
    if (decode_payloads) {
      Image img;
      std::string why;
      if (!decode_png(Bytes(payload, payload + h.length), img, &why))
        return fail("image " + std::to_string(h.id) + " is not a PNG: " + why);
    }
    res.records.push_back({h.id, offset, h.length, h.crc32, size, crc32c_of(bytes.data(), size)});
    offset += size;
  }
  std::fclose(f);
  res.bytes = offset;
  res.ok = true;
  return res;
}

bool check_record(const unsigned char* bytes, std::size_t n, const IndexEntry& entry, bool decode_payload,
                  std::string* err) {
  auto fail = [&](const std::string& why) {
    if (err) *err = "record of image " + std::to_string(entry.id) + " at offset " + std::to_string(entry.offset) + ": " + why;
    return false;
  };
  if (n != entry.size) return fail("read " + std::to_string(n) + " of " + std::to_string(entry.size) + " bytes");
  if (crc32c_of(bytes, n) != entry.crc32c) return fail("CRC32C of the bytes differs from the index's");
  RecordHeader h;
  if (n < sizeof h) return fail("shorter than a header");
  std::memcpy(&h, bytes, sizeof h);
  if (h.magic != kRecordMagic || h.version != kRecordVersion) return fail("bad magic or version");
  if (h.id != entry.id) return fail("the header names image " + std::to_string(h.id));
  if (h.align_log2 > 20) return fail("bad padding");
  const std::uint64_t a = std::uint64_t{1} << h.align_log2;
  if ((sizeof h + std::uint64_t(h.length) + a - 1) / a * a != n) return fail("the header's length disagrees with the size");
  const unsigned char* payload = bytes + sizeof h;
  if (crc32_of(payload, h.length) != h.crc32) return fail("payload CRC-32 mismatch");
  if (std::any_of(payload + h.length, bytes + n, [](unsigned char c) { return c != 0; })) return fail("non-zero padding");
  if (decode_payload) {
    Image img;
    std::string why;
    if (!decode_png(Bytes(payload, payload + h.length), img, &why)) return fail("not a PNG: " + why);
  }
  return true;
}

std::string index_path(const std::string& record_file) { return record_file + ".idx"; }

namespace {
constexpr const char* kIndexHeader = "# tai-augment index 1: id copy offset size crc32c";
constexpr const char* kManifestHeader = "# tai-augment run 1";

std::string dir_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}
}  // namespace

bool write_index(const std::string& record_file, std::vector<IndexEntry> entries, std::string* err) {
  std::sort(entries.begin(), entries.end(), [](const IndexEntry& a, const IndexEntry& b) { return a.offset < b.offset; });
  const std::string path = index_path(record_file);
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return *err = path + ": " + std::strerror(errno), false;
  std::fprintf(f, "%s\n", kIndexHeader);
  for (const IndexEntry& e : entries)
    std::fprintf(f, "%" PRIu64 " %" PRIu32 " %" PRIu64 " %" PRIu64 " %08" PRIx32 "\n", e.id, e.copy, e.offset, e.size,
                 e.crc32c);
  if (std::fclose(f) != 0) return *err = path + ": " + std::strerror(errno), false;
  return true;
}

bool read_index(const std::string& record_file, std::vector<IndexEntry>& entries, std::string* err) {
  const std::string path = index_path(record_file);
  std::ifstream in(path);
  if (!in) return *err = path + ": cannot open", false;
  std::string line;
  if (!std::getline(in, line) || line != kIndexHeader) return *err = path + ": not a tai-augment index", false;
  entries.clear();
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    IndexEntry e;
    if (!(ls >> e.id >> e.copy >> e.offset >> e.size >> std::hex >> e.crc32c))
      return *err = path + ": malformed line '" + line + "'", false;
    entries.push_back(e);
  }
  return true;
}

bool write_manifest(const std::string& path, const RunManifest& m, std::string* err) {
  std::ofstream out(path, std::ios::trunc);
  out << kManifestHeader << "\nmethod " << m.method << "\nnote " << m.note << "\ncontent " << m.content << "\ninputs "
      << m.inputs << "\nimages " << m.images << "\namplify " << m.amplify << "\n";
  if (m.shared_writers) out << "shared-writers " << m.shared_writers << "\n";
  for (const std::string& f : m.files) out << "file " << f << "\n";
  out.close();
  if (!out) return *err = path + ": write failed", false;
  return true;
}

bool read_manifest(const std::string& path, RunManifest& m, std::string* err) {
  std::ifstream in(path);
  if (!in) return *err = path + ": cannot open", false;
  std::string line;
  if (!std::getline(in, line) || line != kManifestHeader) return *err = path + ": not a tai-augment run manifest", false;
  m = RunManifest{};
  while (std::getline(in, line)) {
    const auto space = line.find(' ');
    const std::string key = line.substr(0, space), value = space == std::string::npos ? "" : line.substr(space + 1);
    try {
      if (key == "method") m.method = value;
      else if (key == "note") m.note = value;
      else if (key == "content") m.content = value;
      else if (key == "inputs") m.inputs = std::stoull(value);
      else if (key == "images") m.images = std::stoull(value);
      else if (key == "amplify") m.amplify = unsigned(std::stoul(value));
      else if (key == "file") m.files.push_back(value);
      else if (key == "shared-writers") m.shared_writers = unsigned(std::stoul(value));
      else return *err = path + ": unknown key '" + key + "'", false;
    } catch (const std::exception&) {
      return *err = path + ": bad value in '" + line + "'", false;
    }
  }
  if (m.files.empty() || m.amplify == 0) return *err = path + ": no files or amplify 0", false;
  return true;
}

RunCheck verify_run(const std::string& manifest_path, bool decode_payloads) {
  RunCheck res;
  RunManifest m;
  if (!read_manifest(manifest_path, m, &res.error)) return res;
  std::map<std::uint64_t, unsigned> copies;
  for (const std::string& name : m.files) {
    const std::string file = dir_of(manifest_path) + "/" + name;
    FileScan scan = scan_file(file, decode_payloads, m.shared_writers > 0);
    if (!scan.ok) return res.error = scan.error, res;
    std::vector<IndexEntry> index;
    if (m.shared_writers == 0) {
      if (!read_index(file, index, &res.error)) return res;
    } else {
      for (unsigned p = 0; p < m.shared_writers; ++p) {
        std::vector<IndexEntry> part;
        if (!read_index(file + ".rank" + std::to_string(p), part, &res.error)) return res;
        index.insert(index.end(), part.begin(), part.end());
      }
      std::sort(index.begin(), index.end(), [](const IndexEntry& a, const IndexEntry& b) { return a.offset < b.offset; });
    }
    if (index.size() != scan.records.size())
      return res.error = file + ": " + std::to_string(scan.records.size()) + " records, its index lists " +
                         std::to_string(index.size()),
             res;
    for (std::size_t i = 0; i < index.size(); ++i) {
      const IndexEntry& e = index[i];
      const ScannedRecord& r = scan.records[i];
      if (e.id != r.id || e.offset != r.offset || e.size != r.size || e.crc32c != r.crc32c)
        return res.error = file + ": index line " + std::to_string(i + 1) + " (image " + std::to_string(e.id) +
                           " at " + std::to_string(e.offset) + ") does not match the record there",
               res;
      if (e.copy >= m.amplify) return res.error = file + ": copy number " + std::to_string(e.copy) + " >= amplify", res;
      if (r.id >= m.inputs) return res.error = file + ": image id " + std::to_string(r.id) + " beyond the input set", res;
      auto [it, fresh] = res.records.emplace(r.id, RecordInfo{r.length, r.crc32});
      if (!fresh && (it->second.length != r.length || it->second.crc32 != r.crc32))
        return res.error = file + ": the copies of image " + std::to_string(r.id) + " differ", res;
      ++copies[r.id];
    }
    res.records_read += scan.records.size();
    res.bytes += scan.bytes;
  }
  if (res.records.size() != m.images)
    return res.error = manifest_path + ": " + std::to_string(res.records.size()) + " distinct images, expected " +
                       std::to_string(m.images),
           res;
  for (const auto& [id, n] : copies)
    if (n != m.amplify)
      return res.error = manifest_path + ": image " + std::to_string(id) + " written " + std::to_string(n) +
                         " times, expected " + std::to_string(m.amplify),
             res;
  res.ok = true;
  return res;
}

bool verify_runs(const std::vector<std::string>& manifest_paths, bool decode_payloads) {
  bool ok = true;
  struct Reference {
    std::string path;
    std::map<std::uint64_t, RecordInfo> records;
  };
  std::map<std::string, Reference> by_content;
  std::uint64_t records = 0, bytes = 0;
  for (const std::string& path : manifest_paths) {
    RunCheck c = verify_run(path, decode_payloads);
    if (!c.ok) {
      std::printf("verify: FAILED: %s\n", c.error.c_str());
      ok = false;
      continue;
    }
    records += c.records_read;
    bytes += c.bytes;
    RunManifest m;
    std::string err;
    read_manifest(path, m, &err);
    auto [ref, fresh] = by_content.emplace(m.content, Reference{path, {}});
    if (fresh) {
      ref->second.records = std::move(c.records);
      continue;
    }
    for (const auto& [id, info] : c.records) {
      auto it = ref->second.records.find(id);
      if (it == ref->second.records.end() || it->second.crc32 != info.crc32 || it->second.length != info.length) {
        std::printf("verify: FAILED: image %" PRIu64 " of %s differs from %s\n", id, path.c_str(), ref->second.path.c_str());
        ok = false;
        break;
      }
    }
    if (c.records.size() != ref->second.records.size()) {
      std::printf("verify: FAILED: %s has %zu images, %s has %zu\n", path.c_str(), c.records.size(),
                  ref->second.path.c_str(), ref->second.records.size());
      ok = false;
    }
  }
  if (ok)
    std::printf("verify: ok: %zu runs, %" PRIu64 " records, %.1f MB: every CRC and index entry matches, every record "
                "decodes as PNG, every image the expected number of times, the same records in every run of the "
                "same input\n",
                manifest_paths.size(), records, bytes / 1e6);
  return ok;
}

}  // namespace augment
