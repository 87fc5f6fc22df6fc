#include "record.hpp"

#include "image.hpp"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

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

VerifyResult verify_file(const std::string& path, std::uint64_t expected_images, bool decode_payloads) {
  VerifyResult res;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    res.error = path + ": " + std::strerror(errno);
    return res;
  }
  std::vector<unsigned char> payload;
  std::uint64_t offset = 0;
  auto fail = [&](const std::string& why) {
    res.error = path + " at offset " + std::to_string(offset) + ": " + why;
    std::fclose(f);
    return res;
  };
  for (;;) {
    RecordHeader h;
    const std::size_t got = std::fread(&h, 1, sizeof h, f);
    if (got == 0 && std::feof(f)) break;
    if (got != sizeof h) return fail("truncated header");
    if (h.magic != kRecordMagic || h.version != kRecordVersion) return fail("bad magic or version");
    payload.resize(h.length);
    if (h.length > 0 && std::fread(payload.data(), 1, h.length, f) != h.length) return fail("truncated payload");
    if (crc32_of(payload.data(), payload.size()) != h.crc32) return fail("CRC mismatch, image " + std::to_string(h.id));
    if (decode_payloads) {
      Image img;
      std::string why;
      if (!decode_png(payload, img, &why)) return fail("image " + std::to_string(h.id) + " is not a PNG: " + why);
    }
    if (!res.records.emplace(h.id, RecordInfo{h.length, h.crc32}).second)
      return fail("image " + std::to_string(h.id) + " appears twice");
    if (h.align_log2 > 20) return fail("bad padding");
    const std::uint64_t a = std::uint64_t{1} << h.align_log2;
    const std::uint64_t end = offset + sizeof h + h.length, padded = (end + a - 1) / a * a;
    payload.resize(padded - end);
    if (!payload.empty() && std::fread(payload.data(), 1, payload.size(), f) != payload.size())
      return fail("truncated padding");
    for (unsigned char c : payload)
      if (c != 0) return fail("non-zero padding after image " + std::to_string(h.id));
    offset = padded;
  }
  std::fclose(f);
  res.bytes = offset;
  if (expected_images > 0) {
    if (res.records.size() != expected_images)
      return res.error = path + ": " + std::to_string(res.records.size()) + " records, expected " +
                         std::to_string(expected_images),
             res;
    if (res.records.rbegin()->first != expected_images - 1) {
      res.error = path + ": image ids are not 0.." + std::to_string(expected_images - 1);
      return res;
    }
  }
  res.ok = true;
  return res;
}

}  // namespace augment
