#include "modes.hpp"

#include <fcntl.h>
#include <fmt/core.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <tai/posix.hpp>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "async_loop.hpp"
#include "method.hpp"
#include "record.hpp"
#include "records.hpp"
#include "serial_loop.hpp"
#include "sweep.hpp"

extern char** environ;

namespace serial {

namespace {
using Clock = std::chrono::steady_clock;

std::string base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::string stem_of(const RunOptions& o) {
  return o.output + "/" + (o.run_name.empty() ? std::string(mode_name(o.mode)) : o.run_name);
}

// The record alignment: O_DIRECT needs aligned offsets, lengths and memory.
std::size_t alignment_for(const RunOptions& o) { return o.direct ? augment::kDirectAlignment : 1; }

// What a child run reports when it cannot report (crashed, killed, exit status without a result).
RunOutcome failed(const RunOptions& o, const std::string& why) {
  RunOutcome r;
  r.mode = mode_name(o.mode);
  r.status = "failed";
  r.message = why;
  r.fsync_every = o.fsync_every;
  r.direct = o.direct;
  return r;
}

// Copies a loop's figures into the outcome and leaves the index and manifest beside the output.
void finish_outcome(const RunOptions& o, const Workload& w, const std::string& path, LoopResult& loop, RunOutcome& out) {
  out.wall_s = loop.wall_s;
  out.compute_s = loop.compute_s;
  out.io_s = loop.io_s;
  out.fsync_s = loop.fsync_s;
  out.images = loop.images;
  out.skipped = loop.skipped;
  out.bytes = loop.bytes;
  out.writes = loop.writes;
  out.fsyncs = loop.fsyncs;
  if (!loop.ok()) {
    out.status = "failed";
    out.message = loop.error;
    return;
  }
  // The artifact a next stage (and --verify) reads: written after the clock stopped.
  std::string err;
  if (!augment::write_index(path, std::move(loop.index), &err)) {
    out.status = "failed";
    out.message = err;
    return;
  }
  augment::RunManifest m;
  m.method = out.mode;
  m.note = out.note;
  m.content = w.config.content;
  m.inputs = w.input.size();
  m.images = loop.images;
  m.amplify = w.amplify;
  m.files = {base_name(path)};
  out.manifest = stem_of(o) + ".run";
  if (!augment::write_manifest(out.manifest, m, &err)) {
    out.status = "failed";
    out.message = err;
  }
}

std::string self_executable() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return {};
  return std::string(buf, std::size_t(n));
}

std::string absolute(const std::string& path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) ? std::string(buf) : path;
}
}  // namespace

bool ensure_directory(const std::string& dir, std::string* err) {
  if (::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST) return true;
  if (err) *err = "cannot create " + dir + ": " + std::strerror(errno);
  return false;
}

bool make_workload(const RunOptions& o, Workload& w, std::string* err) {
  std::vector<augment::Size> sizes;
  if (!augment::parse_sizes(o.sizes, sizes)) {
    if (err) *err = "--sizes '" + o.sizes + "' is not a list of WxH (4..16384 each)";
    return false;
  }
  w.input = augment::synthetic_set(o.seed, o.images, sizes);
  if (w.input.empty()) {
    if (err) *err = "encoding the synthetic input set failed";
    return false;
  }
  w.config = augment::RunConfig{};
  w.config.seed = o.seed;
  w.config.png_level = o.png_level;
  // The same spelling as tai-augment's, so that `tai-augment verify` compares our runs with its.
  w.config.content = fmt::format("synthetic seed={} images={} sizes={} png-level={} grey=0", o.seed, o.images, o.sizes,
                                 o.png_level);
  w.amplify = o.amplify ? o.amplify
                        : augment::amplify_for(w.input, w.config, std::uint64_t(std::ceil(o.min_mib * 1048576.0)));
  return true;
}

std::string built_preload_library() {
#ifdef TAI_SERIAL_PRELOAD_LIBRARY
  return TAI_SERIAL_PRELOAD_LIBRARY;
#else
  return {};
#endif
}

RunOutcome run_mode(const RunOptions& o, const Workload& w) {
  RunOutcome out;
  out.mode = mode_name(o.mode);
  out.fsync_every = o.fsync_every;
  out.direct = o.direct;
  const std::string path = stem_of(o) + ".taia";
  // A stale output must never pass for this run's, and deleting it is not the loop's cost.
  ::unlink(path.c_str());
  ::unlink(augment::index_path(path).c_str());
  ::unlink((stem_of(o) + ".run").c_str());
  LoopSettings settings;
  settings.path = path;
  settings.images = w.input.size();
  settings.amplify = w.amplify;
  settings.fsync_every = o.fsync_every;
  settings.direct = o.direct;
  const std::size_t alignment = alignment_for(o);

  switch (o.mode) {
    case Mode::posix: {
      ComputedRecords records(w.input, w.config, alignment);
      LoopResult loop = libc_calls::run_serial_loop(settings, records, {});
      out.note = std::string("libc open/pwrite/fsync/close") + (o.direct ? " with O_DIRECT" : "");
      finish_outcome(o, w, path, loop, out);
      return out;
    }
    case Mode::drop_in: {
      ComputedRecords records(w.input, w.config, alignment);
      bool routed = false;
      LoopResult loop =
          drop_in::run_serial_loop(settings, records, [&](int fd) { routed = tai::posix::routed(fd); });
      if (routed)
        out.note = fmt::format("tai::posix routed the file through its controller (TAI_ENGINE={} TAI_TREE={} TAI_WORKERS={} "
                               "TAI_QUOTA={})",
                               env_or("TAI_ENGINE", "auto"), env_or("TAI_TREE", "default"), env_or("TAI_WORKERS", "2"),
                               env_or("TAI_QUOTA", "256M,512M"));
      else
        out.note = o.direct ? "tai::posix passes O_DIRECT opens to libc unrouted: this ran libc's calls with O_DIRECT"
                            : "tai::posix did NOT route the file (TAI_LOG=1 says why): this ran libc's calls";
      finish_outcome(o, w, path, loop, out);
      return out;
    }
    case Mode::io_only: {
      PrecomputedRecords records;
      std::string err;
      if (!records.prepare(w.input, w.config, alignment, &err)) return failed(o, err);
      LoopResult loop = libc_calls::run_serial_loop(settings, records, {});
      out.note = std::string("records made before the clock; libc open/pwrite/fsync/close") + (o.direct ? " with O_DIRECT" : "");
      finish_outcome(o, w, path, loop, out);
      return out;
    }
    case Mode::async: {
      ComputedRecords records(w.input, w.config, alignment);
      AsyncSettings async{o.tai_workers, o.engine, o.batch};
      LoopResult loop = run_async_loop(settings, records, async, &out.note);
      if (o.direct) out.note += ", O_DIRECT";
      finish_outcome(o, w, path, loop, out);
      return out;
    }
    case Mode::compute_only: {
      // The loop without its I/O: what the program costs when writing is free.
      ComputedRecords records(w.input, w.config, alignment);
      const auto t0 = Clock::now();
      for (std::size_t i = 0; i < w.input.size(); ++i) {
        PreparedRecord rec;
        if (records.make(i, rec))
          ++out.images;
        else
          ++out.skipped;
      }
      out.wall_s = out.compute_s = std::chrono::duration<double>(Clock::now() - t0).count();
      out.note = "decode, transform, encode, CRC32C; no I/O";
      return out;
    }
    case Mode::preload: {
      const std::string lib = o.preload_lib.empty() ? built_preload_library() : o.preload_lib;
      if (lib.empty()) {
        out.status = "unavailable";
        out.message = "libtai-preload.so not built";
        return out;
      }
      if (::access(lib.c_str(), R_OK) != 0) {
        out.status = "unavailable";
        out.message = lib + ": " + std::strerror(errno);
        return out;
      }
      std::vector<std::string> env = {"LD_PRELOAD=" + lib, "TAI_PRELOAD_PATHS=" + absolute(o.output)};
#if defined(__SANITIZE_ADDRESS__)
      // The preloaded library comes before ASan's runtime in the library list, which ASan refuses
      // by default; the order does not matter for what the run checks.
      env.push_back("ASAN_OPTIONS=" + env_or("ASAN_OPTIONS", "") + ":verify_asan_link_order=0");
#endif
      RunOptions child = o;
      if (child.run_name.empty()) child.run_name = mode_name(Mode::preload);
      RunOutcome r = run_child(child, Mode::posix, env, w.amplify);
      r.mode = mode_name(Mode::preload);
      const std::string child_note = r.note;
      r.note = fmt::format("the posix mode, unchanged, in a child under LD_PRELOAD={} TAI_PRELOAD_PATHS={}{}", base_name(lib),
                           absolute(o.output), child_note.empty() ? "" : " (the child: " + child_note + ")");
      return r;
    }
  }
  return failed(o, "unknown mode");
}

RunOutcome run_child(const RunOptions& o, Mode child_mode, const std::vector<std::string>& extra_env, unsigned amplify) {
  const std::string exe = self_executable();
  if (exe.empty()) return failed(o, "cannot find this program (/proc/self/exe)");
  const std::string name = o.run_name.empty() ? std::string(mode_name(o.mode)) : o.run_name;
  const std::string result_file = o.output + "/" + name + ".result";
  ::unlink(result_file.c_str());
  std::vector<std::string> args = {exe,
                                   "--mode", mode_name(child_mode),
                                   "--images", std::to_string(o.images),
                                   "--sizes", o.sizes,
                                   "--fsync-every", std::to_string(o.fsync_every),
                                   "--output", o.output,
                                   "--amplify", std::to_string(amplify),
                                   "--seed", std::to_string(o.seed),
                                   "--png-level", std::to_string(o.png_level),
                                   "--tai-workers", std::to_string(o.tai_workers),
                                   "--engine", o.engine,
                                   "--batch", std::to_string(o.batch),
                                   "--run-name", name,
                                   "--result-file", result_file};
  if (o.direct) args.push_back("--direct");
  if (!o.preload_lib.empty()) args.insert(args.end(), {"--preload-lib", o.preload_lib});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  // The parent's environment with extra_env's variables replaced or added.
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    const std::string key = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const std::string& x : extra_env)
      if (x.substr(0, x.find('=')) == key) replaced = true;
    if (!replaced) env.push_back(entry);
  }
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  std::fflush(stdout);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data());
  if (rc != 0) return failed(o, "cannot start " + exe + ": " + std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return failed(o, std::string("waitpid: ") + std::strerror(errno));

  RunOutcome out;
  std::ifstream in(result_file);
  std::string line;
  const bool have_result = in && std::getline(in, line) && from_result_line(line, out);
  ::unlink(result_file.c_str());
  if (WIFSIGNALED(status))
    return failed(o, fmt::format("the child run died of signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status))));
  if (!have_result)
    return failed(o, fmt::format("the child run exited with status {} and left no result", WEXITSTATUS(status)));
  if (WEXITSTATUS(status) != 0 && out.ok()) {
    // It measured, then failed on the way out: for the preload library, exit status 75 means data
    // its controller could not write back at exit.
    out.status = "failed";
    out.message = fmt::format("the child run exited with status {} after its loop finished", WEXITSTATUS(status));
  }
  return out;
}

std::string verify_output(const RunOutcome& outcome) {
  if (outcome.manifest.empty()) return {};
  const augment::RunCheck check = augment::verify_run(outcome.manifest, true);
  if (!check.ok) return check.error.empty() ? "verify failed" : check.error;
  augment::RunManifest m;
  std::string err;
  if (!augment::read_manifest(outcome.manifest, m, &err)) return err;
  // verify_run checks the files against the manifest; this checks the manifest against the run.
  if (check.records_read != outcome.writes)
    return fmt::format("{} records read back, the run wrote {}", check.records_read, outcome.writes);
  if (check.bytes != outcome.bytes)
    return fmt::format("{} bytes read back, the run wrote {}", check.bytes, outcome.bytes);
  return {};
}

void remove_output(const RunOutcome& outcome) {
  if (outcome.manifest.empty()) return;
  augment::RunManifest m;
  std::string err;
  if (augment::read_manifest(outcome.manifest, m, &err)) {
    const std::string dir = outcome.manifest.substr(0, outcome.manifest.rfind('/') + 1);
    for (const std::string& f : m.files) {
      ::unlink((dir + f).c_str());
      ::unlink(augment::index_path(dir + f).c_str());
    }
  }
  ::unlink(outcome.manifest.c_str());
}

}  // namespace serial
