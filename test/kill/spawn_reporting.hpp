// Starting a child that reports to its parent on a pipe: what both kill suites need (the
// controller kill tests' tai_kill_child and the preload's writer and sqlite3 runs).
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace tai::test::kill {

struct ReportingChild {
  pid_t pid = -1;
  int read_end = -1;  ///< the parent's end of the pipe (close-on-exec)
  std::string error;  ///< why it could not be started (then pid is -1)
};

/// Starts `args` (args[0] looked up in PATH when it has no slash) with the environment `env`,
/// the write end of a new pipe as its descriptor `report_fd`, and `stdin_path` as its standard
/// input when given. The parent keeps only the read end.
inline ReportingChild spawn_reporting(const std::vector<std::string>& args, const std::vector<std::string>& env,
                                      int report_fd, const std::string& stdin_path = {}) {
  ReportingChild c;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    c.error = std::string("pipe2: ") + std::strerror(errno);
    return c;
  }
  int write_end = fds[1];
  if (write_end == report_fd) {  // dup2 onto itself would keep close-on-exec set
    write_end = ::fcntl(fds[1], F_DUPFD_CLOEXEC, 10);
    ::close(fds[1]);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!stdin_path.empty()) posix_spawn_file_actions_addopen(&actions, 0, stdin_path.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, write_end, report_fd);
  std::vector<std::string> a = args, e = env;
  std::vector<char*> argv, envp;
  for (std::string& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  for (std::string& s : e) envp.push_back(s.data());
  envp.push_back(nullptr);
  const int rc = ::posix_spawnp(&c.pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(write_end);
  if (rc != 0) {
    ::close(fds[0]);
    c.error = "posix_spawn " + args[0] + ": " + std::strerror(rc);
    c.pid = -1;
    return c;
  }
  c.read_end = fds[0];
  return c;
}

}  // namespace tai::test::kill
