#include "outcome.hpp"

#include <fmt/core.h>

#include <cstdlib>
#include <map>
#include <sstream>

namespace serial {

namespace {
constexpr const char* kTag = "tai-serial-result";
}

std::string escape_value(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '%' || c == ' ' || c == '=' || c == '\n' || c == '\r' || c == '\t')
      out += fmt::format("%{:02X}", unsigned(static_cast<unsigned char>(c)));
    else
      out += c;
  }
  return out;
}

std::string unescape_value(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size()) {
      const std::string hex = text.substr(i + 1, 2);
      char* end = nullptr;
      const long v = std::strtol(hex.c_str(), &end, 16);
      if (end == hex.c_str() + 2) {
        out += char(v);
        i += 2;
        continue;
      }
    }
    out += text[i];
  }
  return out;
}

std::string to_result_line(const RunOutcome& o) {
  return fmt::format(
      "{} mode={} status={} fsync_every={} direct={} wall_s={:.6f} compute_s={:.6f} io_s={:.6f} fsync_s={:.6f} "
      "images={} skipped={} bytes={} writes={} fsyncs={} manifest={} note={} message={}",
      kTag, escape_value(o.mode), escape_value(o.status), o.fsync_every, o.direct ? 1 : 0, o.wall_s, o.compute_s, o.io_s,
      o.fsync_s, o.images, o.skipped, o.bytes, o.writes, o.fsyncs, escape_value(o.manifest), escape_value(o.note),
      escape_value(o.message));
}

bool from_result_line(const std::string& line, RunOutcome& o) {
  std::stringstream ss(line);
  std::string word;
  if (!(ss >> word) || word != kTag) return false;
  std::map<std::string, std::string> kv;
  while (ss >> word) {
    const auto eq = word.find('=');
    if (eq == std::string::npos) return false;
    kv[word.substr(0, eq)] = unescape_value(word.substr(eq + 1));
  }
  auto number = [&](const char* key, double& v) {
    auto it = kv.find(key);
    if (it == kv.end()) return false;
    char* end = nullptr;
    v = std::strtod(it->second.c_str(), &end);
    return !it->second.empty() && *end == '\0';
  };
  auto count = [&](const char* key, std::uint64_t& v) {
    auto it = kv.find(key);
    if (it == kv.end() || it->second.empty() || it->second.find_first_not_of("0123456789") != std::string::npos)
      return false;
    v = std::strtoull(it->second.c_str(), nullptr, 10);
    return true;
  };
  std::uint64_t fsync_every = 0, direct = 0;
  RunOutcome r;
  if (!number("wall_s", r.wall_s) || !number("compute_s", r.compute_s) || !number("io_s", r.io_s) ||
      !number("fsync_s", r.fsync_s) || !count("images", r.images) || !count("skipped", r.skipped) ||
      !count("bytes", r.bytes) || !count("writes", r.writes) || !count("fsyncs", r.fsyncs) ||
      !count("fsync_every", fsync_every) || !count("direct", direct) || !kv.count("mode") || !kv.count("status"))
    return false;
  r.fsync_every = unsigned(fsync_every);
  r.direct = direct != 0;
  r.mode = kv["mode"];
  r.status = kv["status"];
  r.manifest = kv["manifest"];
  r.note = kv["note"];
  r.message = kv["message"];
  o = std::move(r);
  return true;
}

}  // namespace serial
