// engines/null/null_engine.hpp - the `null` engine: discards writes, reads zeros, never touches
// the file system. For measuring TAI's own overhead: every cost left with this engine is the
// framework's.
#pragma once

#include <memory>
#include <string>

#include "tai/engine.hpp"

namespace tai::engines {

/// The null engine:
///  * open() succeeds for any path and mode without a system call (the path is kept only for
///    messages); Open::direct is accepted with no alignment constraint (Alignment{1,1,1,"none"}).
///  * write: discarded, result = length. read: the buffer is filled with zeros (like /dev/zero),
///    result = length (there is no end of file). fsync/fdatasync: 0.
///  * Capabilities: stores_data = false, direct_io = true, durable_sync = false.
/// Thread-safety: as tai::SyncEngine; transfer() touches only the request's buffer.
class NullEngine final : public SyncEngine {
 public:
  explicit NullEngine(EngineOptions options);

 protected:
  Result<std::unique_ptr<EngineFile>> do_open(const std::string& path, OpenMode mode) override;
  std::error_code do_close(EngineFile& file) override;
  std::int64_t transfer(const Request& request) override;
};

/// Creates a null engine. Never fails.
std::unique_ptr<Engine> make_null(const EngineOptions& options);

}  // namespace tai::engines
