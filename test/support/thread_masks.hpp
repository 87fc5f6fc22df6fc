// The threads of this process and their blocked signals, read from /proc/self/task: for the
// tests that hold TAI's threads to "every blockable signal blocked" (a signal sent to the
// process must run the program's handler on a program thread, never on one of TAI's).
#pragma once

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace tai::test {

struct ThreadMask {
  pid_t tid = 0;
  std::string name;     // /proc/self/task/<tid>/comm, without the newline
  std::string blocked;  // the "SigBlk:" field of its status, hex as the kernel prints it
};

// The "SigBlk:" field of a /proc status file (hex, as the kernel prints it); empty if none.
inline std::string blocked_signals_in(const std::string& status_path) {
  std::ifstream status(status_path);
  for (std::string line; std::getline(status, line);)
    if (line.compare(0, 7, "SigBlk:") == 0) {
      const std::size_t v = line.find_first_not_of(" \t", 7);
      return v == std::string::npos ? "" : line.substr(v);
    }
  return {};
}

// Every thread of the process whose name starts with `prefix`, with its blocked-signal mask.
// A thread that exits while it is read is left out.
inline std::vector<ThreadMask> threads_named(const std::string& prefix) {
  std::vector<ThreadMask> out;
  DIR* dir = ::opendir("/proc/self/task");
  if (!dir) return out;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const std::string base = std::string("/proc/self/task/") + e->d_name;
    ThreadMask t;
    t.tid = static_cast<pid_t>(std::atoi(e->d_name));
    std::ifstream comm(base + "/comm");
    if (!std::getline(comm, t.name) || t.name.compare(0, prefix.size(), prefix) != 0) continue;
    t.blocked = blocked_signals_in(base + "/status");
    if (!t.blocked.empty()) out.push_back(t);
  }
  ::closedir(dir);
  return out;
}

// threads_named(prefix), once at least `count` such threads exist (a thread names itself when it
// starts, after its creator went on): polled for up to 10 s, then whatever there is.
inline std::vector<ThreadMask> threads_named_at_least(const std::string& prefix, std::size_t count) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    std::vector<ThreadMask> found = threads_named(prefix);
    if (found.size() >= count || std::chrono::steady_clock::now() > end) return found;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// The mask of a thread that blocked everything it can (sigfillset and pthread_sigmask, as TAI
// does), as the kernel prints it: derived on this machine, since the C library keeps a few
// signals of its own out of any mask and the kernel never blocks SIGKILL and SIGSTOP.
inline std::string everything_blockable_mask() {
  std::string mask;
  std::thread([&mask] {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    mask = blocked_signals_in("/proc/thread-self/status");
  }).join();
  return mask;
}

// Runs body on a new thread that blocks no signal at all, as a program's thread may: the threads
// TAI starts from there must not take that mask from their creator.
template <class Body>
void on_a_thread_blocking_nothing(Body body) {
  std::thread([&body] {
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, nullptr);
    body();
  }).join();
}

}  // namespace tai::test
