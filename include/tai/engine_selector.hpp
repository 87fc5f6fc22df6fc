// tai/engine_selector.hpp - which engines this build and this kernel can run, and making one by
// name.
//
//     std::string note;
//     auto engine = tai::make_engine("auto", {}, &note);   // uring, else libaio, else posix
//     if (!engine) std::cerr << engine.error().message << '\n';
//     std::cerr << note << '\n';   // "auto -> libaio: uring unavailable: ..."
//
//     for (const auto& e : tai::list_engines())
//       std::cout << e.name << (e.available ? " available" : " unavailable: " + e.reason) << '\n';
//
// An engine is unavailable when it was not compiled in (its library was not found at configure
// time, or its option turned it off) or when the kernel refuses it: io_uring_setup / io_setup
// answered EPERM, ENOSYS or EOPNOTSUPP (seccomp in containers, kernels without the feature),
// kernel.io_uring_disabled is set, fs.aio-max-nr is reached (EAGAIN), or RLIMIT_MEMLOCK is too
// low for registered buffers.
// The reasons come from the engine factories and are exact; the selector prefixes the name:
//     engine 'uring' unavailable: not built (liburing was not found at configure time; install
//     liburing-dev and reconfigure with -DTAI_WITH_URING=ON)
//     engine 'uring' unavailable: not built (turned off at configure time with TAI_WITH_URING=OFF;
//     reconfigure with -DTAI_WITH_URING=ON to build it)
//
// The test engines (fault, recording) are not listed and cannot be made by name: each wraps
// another engine. They are in the library tai::testing (tai::engines::make_fault in
// engines/fault/fault_engine.hpp, make_recording in engines/recording/recording_engine.hpp).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tai/engine.hpp"
#include "tai/error.hpp"

namespace tai {

/// One engine as this build and this kernel see it.
struct EngineInfo {
  std::string name;
  bool available = false;
  /// Why it is unavailable ("not built (...)", "io_uring_setup: ... (EPERM); ..."), without the
  /// "engine 'x' unavailable: " prefix. Empty when available.
  std::string reason;
  /// The engine's capabilities when available (as made with the given options); default
  /// (all false) when not.
  Capabilities capabilities;
};

/// The engine names make_engine accepts, best first for "auto": uring, libaio, posix, then
/// cstdio, fstream, null. "auto" itself is not in the list. Thread-safe.
const std::vector<std::string>& engine_names();

/// Every engine of engine_names(), each probed by making it with `options` (and destroying it
/// at once): posix, cstdio, fstream, null, libaio, uring. Thread-safe; makes system calls
/// (io_uring_setup, io_setup) for the asynchronous engines.
std::vector<EngineInfo> list_engines(const EngineOptions& options = {});

/// Makes the engine called `name` with `options`.
///  * "auto": uring if available, else libaio, else posix. When `note` is not null it receives
///    which engine was picked and why each better one was skipped, e.g.
///    "auto -> libaio (uring unavailable: kernel.io_uring_disabled = 2 ...)".
///  * an unknown name fails with EINVAL: "unknown engine 'x'; known engines: auto, uring, ...".
///  * an engine not compiled in fails with ENOTSUP: "engine 'uring' unavailable: not built
///    (liburing was not found at configure time; install liburing-dev and reconfigure with
///    -DTAI_WITH_URING=ON)", or "not built (turned off at configure time with TAI_WITH_URING=OFF;
///    reconfigure with -DTAI_WITH_URING=ON to build it)" when the option left it out.
///  * an engine the kernel refuses fails with the factory's errno and
///    "engine 'uring' unavailable: <the factory's reason>".
/// For a named engine (not "auto"), `note` receives "<name>" on success.
/// Thread-safe.
Result<std::unique_ptr<Engine>> make_engine(std::string_view name, const EngineOptions& options = {},
                                            std::string* note = nullptr);

}  // namespace tai
