// The layer's settings for the write-through tests (through_test.cpp, order_through_test.cpp).
#pragma once

#include <memory>

#include "engines/recording/recording_engine.hpp"
#include "posix_layer/support.hpp"

namespace tai::test {

/// Write-through after at most `through` bytes between syncs; the engine records every request
/// (*recording points at it once the controller is made). No idle write-back, no write-behind,
/// no started write-back: a cached write reaches the kernel only at a sync or a close, so
/// kernel_contents() tells a cached write from one that went to the kernel.
inline posix::detail::Settings through_settings(std::uint64_t through, std::shared_ptr<engines::RecordingEngine*>& recording) {
  posix::detail::Settings s = layer_settings();
  s.options.flush_idle_ns = -1;
  s.write_behind_ms = 0;
  s.start_writeback_bytes = 0;
  s.sync_through_bytes = through;
  // A file starts cached (in the full mode), so that the tests see it move to write-through at a
  // small sync; files that start write-through have their own cases.
  s.files_start_through = false;
  auto rec = std::make_shared<engines::RecordingEngine*>(nullptr);
  recording = rec;
  s.options.engine = "recording";
  s.setup = [rec](Controller& c) {
    auto r = engines::make_recording(engines::make_posix({}));
    *rec = r.get();
    c.add_engine("recording", std::move(r));
  };
  return s;
}

}  // namespace tai::test
