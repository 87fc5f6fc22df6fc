// `tai-bench engines`: one line per engine with its availability (and the exact reason when it
// is unavailable), its capabilities, and the direct-I/O alignment it discovers for a file in
// --dir; then "auto -> <name>" with why the better engines were skipped.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tai/engine_selector.hpp"
#include "tai_bench/commands.hpp"

namespace tai::bench {
namespace {

struct EnginesOptions {
  std::string dir = ".";
  unsigned depth = 64;
  bool register_files = false;
  bool register_buffers = false;
};

std::string flag(bool on, const char* name) { return fmt::format("{}{}", on ? '+' : '-', name); }

std::string describe(const Capabilities& c) {
  std::string s = c.asynchronous ? "+async" : "-async";
  for (const auto& part : {flag(c.direct_io, "direct"), flag(c.durable_sync, "durable-sync"),
                           flag(c.async_sync, "async-sync"), flag(c.eventfd, "eventfd"),
                           flag(c.linked_requests, "linked"), flag(c.registered_files, "reg-files"),
                           flag(c.registered_buffers, "reg-buffers")}) {
    s += ' ';
    s += part;
  }
  if (!c.stores_data) s += " (discards data)";
  return s;
}

/// A scratch file in `dir` that exists for the object's lifetime: engines open it to discover
/// the direct-I/O alignment of that file system.
class ProbeFile {
 public:
  explicit ProbeFile(const std::string& dir) {
    std::string tmpl = dir + "/.tai-bench-probe-XXXXXX";
    const int fd = ::mkstemp(tmpl.data());
    if (fd >= 0) {
      ::close(fd);
      path_ = tmpl;
    } else {
      error_ = fmt::format("cannot create a probe file in '{}': {}", dir, std::strerror(errno));
    }
  }
  ~ProbeFile() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  ProbeFile(const ProbeFile&) = delete;
  ProbeFile& operator=(const ProbeFile&) = delete;
  const std::string& path() const { return path_; }
  const std::string& error() const { return error_; }

 private:
  std::string path_;
  std::string error_;
};

/// "align=512/512/512 (statx)" for memory/offset/length, or why there is none.
std::string alignment_of(Engine& engine, const ProbeFile& probe) {
  if (!engine.capabilities().direct_io) return "align=n/a (no direct I/O)";
  if (probe.path().empty()) return "align=? (" + probe.error() + ")";
  auto file = engine.open(probe.path(), OpenMode{Open::read | Open::write | Open::direct});
  if (!file) return "align=? (" + file.error().message + ")";
  const Alignment a = file.value()->capabilities().alignment;
  std::string s = fmt::format("align={}/{}/{} ({})", a.memory, a.offset, a.length, a.source);
  if (auto ec = engine.close(*file.value())) s += fmt::format(" [close: {}]", ec.message());
  return s;
}

int run(const EnginesOptions& o) {
  EngineOptions options;
  options.depth = o.depth;
  options.uring_register_files = o.register_files;
  options.uring_register_buffers = o.register_buffers;

  const ProbeFile probe(o.dir);
  const std::vector<EngineInfo> engines = list_engines(options);
  std::size_t width = 0;
  for (const auto& e : engines) width = std::max(width, e.name.size());

  for (const auto& e : engines) {
    if (!e.available) {
      fmt::print("{:<{}}  unavailable: {}\n", e.name, width, e.reason);
      continue;
    }
    // list_engines destroyed its probe instance; make one again to open the probe file.
    auto engine = make_engine(e.name, options);
    const std::string align =
        engine ? alignment_of(*engine.value(), probe) : "align=? (" + engine.error().message + ")";
    fmt::print("{:<{}}  available  {}  {}\n", e.name, width, describe(e.capabilities), align);
  }

  std::string note;
  auto picked = make_engine("auto", options, &note);
  if (!picked) {
    fmt::print("auto -> none ({})\n", picked.error().message);
    return 1;
  }
  fmt::print("{}\n", note);
  std::fflush(stdout);
  return 0;
}

}  // namespace

void add_engines_command(CLI::App& app) {
  auto options = std::make_shared<EnginesOptions>();
  CLI::App* cmd = app.add_subcommand(
      "engines", "List every engine: available or not (with the reason), capabilities, alignment");
  cmd->add_option("--dir", options->dir,
                  "Directory where a probe file is opened with O_DIRECT to discover the alignment")
      ->check(CLI::ExistingDirectory)
      ->capture_default_str();
  cmd->add_option("--depth", options->depth, "Queue depth the engines are made with")
      ->check(CLI::Range(1u, 1u << 16))
      ->capture_default_str();
  cmd->add_flag("--uring-register-files", options->register_files,
                "Make io_uring register each opened file (fixed files)");
  cmd->add_flag("--uring-register-buffers", options->register_buffers,
                "Make io_uring register its bounce buffers (fixed buffers; needs RLIMIT_MEMLOCK)");
  cmd->callback([options] {
    if (const int rc = run(*options); rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace tai::bench
