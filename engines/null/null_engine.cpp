// The null engine: see null_engine.hpp.
#include "engines/null/null_engine.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

namespace tai::engines {
namespace {

Capabilities null_capabilities() {
  Capabilities c;
  c.vectored_writes = true;
  c.asynchronous = false;
  c.direct_io = true;  // no constraint to honour, so "direct" costs nothing
  c.durable_sync = false;
  c.stores_data = false;
  return c;
}

/// A null file: nothing but the base's bookkeeping.
class NullFile final : public EngineFile {
 public:
  NullFile(Engine& engine, std::string path, OpenMode mode, FileCapabilities caps)
      : EngineFile(engine, std::move(path), mode, caps) {}
};

}  // namespace

NullEngine::NullEngine(EngineOptions options) : SyncEngine("null", null_capabilities(), options) {}

Result<std::unique_ptr<EngineFile>> NullEngine::do_open(const std::string& path, OpenMode mode) {
  FileCapabilities caps;
  caps.engine = capabilities();
  caps.direct = has(mode.flags, Open::direct);
  caps.dsync = has(mode.flags, Open::dsync);
  caps.alignment = Alignment{1, 1, 1, "none"};
  return std::unique_ptr<EngineFile>(std::make_unique<NullFile>(*this, path, mode, caps));
}

std::error_code NullEngine::do_close(EngineFile&) { return {}; }

std::int64_t NullEngine::transfer(const Request& request) {
  // Results are int64: a request longer than that cannot be reported whole; report what fits
  // and let the base continue the short transfer (it cannot happen with real memory anyway).
  const std::uint64_t n = std::min<std::uint64_t>(request.length, std::numeric_limits<std::int64_t>::max());
  switch (request.op) {
    case Op::read:
      std::memset(request.buffer, 0, n);
      return static_cast<std::int64_t>(n);
    case Op::write:
      return static_cast<std::int64_t>(n);
    case Op::fsync:
    case Op::fdatasync:
      return 0;
  }
  return -EINVAL;
}

std::unique_ptr<Engine> make_null(const EngineOptions& options) {
  return std::make_unique<NullEngine>(options);
}

}  // namespace tai::engines
