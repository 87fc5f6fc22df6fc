// src/posix/layer.hpp - internals of tai/posix.hpp shared with its tests (and, later, with the
// preload library): the settings, the process-wide controller's lifecycle, the descriptor table.
//
// Structures (see tai/posix.hpp for what they serve):
//  * Inode: one per routed file (st_dev, st_ino): the tai::File, the logical size, the order
//    of submissions across threads, errors of writes not yet reported. Found through the
//    registry (a mutex and a map, touched by open and the last close only).
//  * Description: one per successful open (the kernel's "open file description"): access mode,
//    O_APPEND, the file offset; reference counted. Table slots point to descriptions, so an
//    alias made by dup (preload) is one more slot pointing to the same description.
//  * FdTable: a two-level array of atomic pointers indexed by descriptor (1024 slots per chunk,
//    65536 chunk pointers: descriptors below 2^26), chunks made on first use and never freed,
//    so a lookup is two acquire loads and never takes a lock. Installing a description is a
//    release store (or exchange); removal an acq_rel exchange. A caller takes a reference with
//    increment-if-nonzero and then checks that the slot still holds the description (else it
//    drops it and retries): descriptions are type-stable (recycled through a pool, never freed)
//    so that this increment is always on valid memory, and a description recycled for another
//    descriptor fails the re-check.
//
// Ordering across threads. The controller keeps the order of one thread's submissions; two
// threads' submissions go through separate queues and may be admitted in either order. POSIX
// wants a read to see a write that happened before it in any thread, so each inode remembers
// the last asynchronous operation (write, fsync_async, barrier) and the thread that submitted
// it; a submission from another thread first waits for that one to finish (under the inode's
// mutex). A single-threaded program never waits; threads taking turns on one file wait for the
// other's last write to reach the cache (one round of the controller).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tai/controller.hpp"
#include "tai/file.hpp"
#include "tai/receipt.hpp"

namespace tai::posix::detail {

/// How the layer's controller is made.
struct Settings {
  ControllerOptions options;
  bool trivial_tree = false;  ///< BTreeTrivial instead of BTreeDefault
  bool log = false;           ///< TAI_LOG
  /// Called once on the new controller before any file is opened (tests add engines here).
  std::function<void(Controller&)> setup;
};

/// The settings the environment asks for (TAI_ENGINE, TAI_TREE, TAI_WORKERS, TAI_QUOTA,
/// TAI_LOG); a malformed value adds a line to `warnings` and keeps its default.
Settings settings_from_env(std::vector<std::string>* warnings);

/// The process-wide controller, made on first call (thread-safe); nullptr when it cannot be made
/// or after the exit handler shut it down.
Controller* controller();

/// For the preload library (dup, dup2, dup3, fcntl F_DUPFD): makes `newfd`, which the caller
/// has just made a kernel duplicate of `oldfd`, an alias of it in the layer: both share one
/// description (one offset, one O_APPEND flag, one cache). Whatever `newfd` had is dropped
/// first (dup2 onto a routed descriptor: that one's last close writes it back; its error is
/// returned as errno, 0 if none). Returns -1 when `oldfd` is not routed (nothing to do).
int alias_descriptor(int oldfd, int newfd);

/// For the preload library: the layer forgets `fd` without closing the kernel descriptor (the
/// caller closes it: close_range, closefrom, a dup2 over it). The file's write-back error, if
/// this was its last descriptor, is returned (errno), 0 if none.
int forget_descriptor(int fd);

/// For tests: shuts the current controller down (every routed descriptor must be closed first)
/// and makes the next one, at its first use, with `settings` instead of the environment's.
/// Returns the shutdown's report. Not thread-safe with any other call of the layer.
ShutdownReport restart_for_testing(const Settings& settings);

/// For tests: what the exit handler does, without exiting: writes every routed file back,
/// shuts the controller down, and returns the failures (empty: nothing lost). Afterwards routed
/// descriptors are served by libc; restart_for_testing makes the layer usable again.
std::vector<std::string> shutdown_for_testing();

}  // namespace tai::posix::detail
