// The engine selector: every engine by name, its availability with the exact reason, and "auto".
//
// The reasons for the kernel's refusals are composed by the asynchronous engines' factories,
// which are the code that meets them (they know the errno of io_uring_setup / io_setup and read
// the sysctls); the selector only adds "engine '<name>' unavailable: " in front, and composes
// the one reason the factories cannot give: that the engine was not compiled in.
#include "tai/engine_selector.hpp"

#include <cerrno>
#include <iterator>
#include <system_error>
#include <utility>

#include "engines/cstdio/cstdio_engine.hpp"
#include "engines/fstream/fstream_engine.hpp"
#include "engines/null/null_engine.hpp"
#include "engines/posix/posix_engine.hpp"
#include "tai/config.hpp"
#include "engines/common/probe_overrides.hpp"
#if TAI_WITH_LIBAIO
#include "engines/libaio/libaio_engine.hpp"
#endif
#if TAI_WITH_URING
#include "engines/uring/uring_engine.hpp"
#endif

namespace tai {
namespace {

/// How to make one engine; the reason is the factory's, without the engine name.
struct Candidate {
  const char* name;
  Result<std::unique_ptr<Engine>> (*make)(const EngineOptions&);
};

/// Why an engine is not compiled in, as configure decided (config.hpp): `turned_off` when its
/// option (e.g. -DTAI_WITH_URING=OFF) left it out, else its library was searched for and not
/// found. Either way the cure includes -D<option>=ON: once a build directory has the option
/// cached OFF, installing the library and reconfiguring does not turn it on.
Error not_built(const char* library, const char* package, const char* option, bool turned_off) {
  std::string reason = "not built (";
  if (turned_off) {
    reason += "turned off at configure time with ";
    reason += option;
    reason += "=OFF; reconfigure with -D";
    reason += option;
    reason += "=ON to build it)";
  } else {
    reason += library;
    reason += " was not found at configure time; install ";
    reason += package;
    reason += " and reconfigure with -D";
    reason += option;
    reason += "=ON)";
  }
  return Error{std::make_error_code(std::errc::not_supported), std::move(reason)};
}

Result<std::unique_ptr<Engine>> make_uring_or_reason(const EngineOptions& options) {
  if (detail::probe_overrides().uring_not_built)  // as if liburing had not been found
    return not_built("liburing", "liburing-dev", "TAI_WITH_URING", false);
#if TAI_WITH_URING
  return engines::make_uring(options);
#else
  (void)options;
  return not_built("liburing", "liburing-dev", "TAI_WITH_URING", TAI_URING_TURNED_OFF);
#endif
}

Result<std::unique_ptr<Engine>> make_libaio_or_reason(const EngineOptions& options) {
  if (detail::probe_overrides().libaio_not_built)  // as if libaio had not been found
    return not_built("libaio", "libaio-dev", "TAI_WITH_LIBAIO", false);
#if TAI_WITH_LIBAIO
  return engines::make_libaio(options);
#else
  (void)options;
  return not_built("libaio", "libaio-dev", "TAI_WITH_LIBAIO", TAI_LIBAIO_TURNED_OFF);
#endif
}

// The synchronous engines cannot be refused by the kernel: their factories cannot fail.
template <std::unique_ptr<Engine> (*Make)(const EngineOptions&)>
Result<std::unique_ptr<Engine>> always(const EngineOptions& options) {
  return Make(options);
}

/// Best first: the order "auto" tries (its first three) and the order of list_engines().
/// A constant array, neither built nor destroyed: the preload library makes its controller
/// from whichever thread first needs it, also while exit() is destroying the library's
/// static objects in another thread, so nothing the selector reads may be destroyed.
constexpr Candidate kCandidates[] = {
    {"uring", make_uring_or_reason},
    {"libaio", make_libaio_or_reason},
    {"posix", always<engines::make_posix>},
    {"cstdio", always<engines::make_cstdio>},
    {"fstream", always<engines::make_fstream>},
    {"null", always<engines::make_null>},
};
constexpr const Candidate (&candidates())[std::size(kCandidates)] { return kCandidates; }

constexpr const char* kAutoOrder[] = {"uring", "libaio", "posix"};

const Candidate* find(std::string_view name) {
  for (const auto& c : candidates())
    if (name == c.name) return &c;
  return nullptr;
}

/// The factory's error with the engine named in front; the code is kept.
Error unavailable(std::string_view name, const Error& reason) {
  std::string message = "engine '";
  message += name;
  message += "' unavailable: ";
  message += reason.message;
  return Error{reason.code, std::move(message)};
}

}  // namespace

const std::vector<std::string>& engine_names() {
  // Never destroyed, for the same reason as kCandidates.
  static const auto* names = [] {
    auto* n = new std::vector<std::string>;
    for (const auto& c : candidates()) n->emplace_back(c.name);
    return n;
  }();
  return *names;
}

std::vector<EngineInfo> list_engines(const EngineOptions& options) {
  std::vector<EngineInfo> out;
  out.reserve(std::size(kCandidates));
  for (const auto& c : candidates()) {
    EngineInfo info;
    info.name = c.name;
    auto made = c.make(options);
    if (made) {
      info.available = true;
      info.capabilities = made.value()->capabilities();
    } else {
      info.reason = made.error().message;
    }
    out.push_back(std::move(info));
  }
  return out;
}

Result<std::unique_ptr<Engine>> make_engine(std::string_view name, const EngineOptions& options,
                                            std::string* note) {
  if (name == "auto") {
    std::string skipped;  // "uring unavailable: ...; libaio unavailable: ..."
    for (const char* candidate : kAutoOrder) {
      auto made = find(candidate)->make(options);
      if (made) {
        if (note) {
          *note = "auto -> ";
          *note += candidate;
          if (skipped.empty()) {
            *note += " (the best engine; available here)";
          } else {
            *note += " (" + skipped + ")";
          }
        }
        return made;
      }
      if (!skipped.empty()) skipped += "; ";
      skipped += candidate;
      skipped += " unavailable: ";
      skipped += made.error().message;
    }
    // posix cannot fail to be made; reaching here means the candidate list is broken.
    return Error{std::make_error_code(std::errc::no_such_device),
                 "engine 'auto' found no engine: " + skipped};
  }

  const Candidate* candidate = find(name);
  if (!candidate) {
    std::string message = "unknown engine '";
    message += name;
    message += "'; known engines: auto";
    for (const auto& n : engine_names()) message += ", " + n;
    return Error{std::make_error_code(std::errc::invalid_argument), std::move(message)};
  }
  auto made = candidate->make(options);
  if (!made) return unavailable(name, made.error());
  if (note) *note = candidate->name;
  return made;
}

}  // namespace tai
