// The progress line: silent when the stream is not a terminal, the line's content, rewrites at
// most once per interval, cleared at the end, and advance() from several threads at once.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <pty.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "progress.hpp"

using namespace augment;

namespace {
// Everything written to the pipe so far (the write end must be closed first).
std::string drain(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, std::size_t(n));
  return out;
}

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}
}  // namespace

TEST(AugmentProgress, SilentWhenNotATerminal) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  {
    ProgressOptions o;
    o.fd = fds[1];
    o.delay = std::chrono::milliseconds(0);
    o.interval = std::chrono::milliseconds(0);
    Progress p(10, "posix", o);
    EXPECT_FALSE(p.enabled());
    for (int i = 0; i < 10; ++i) p.advance();
    EXPECT_EQ(p.done(), 10u);
  }
  ::close(fds[1]);
  EXPECT_EQ(drain(fds[0]), "");
  ::close(fds[0]);
}

TEST(AugmentProgress, LineContent) {
  ProgressOptions o;
  o.fd = -1;
  Progress p(200, "tai-def r2", o);
  EXPECT_EQ(p.line(50, 10.0), "tai-def r2: 50/200 images (25%), 5.0 images/s, ETA 0m30s");
  EXPECT_EQ(p.line(0, 0.0), "tai-def r2: 0/200 images (0%), 0.0 images/s, ETA ?");
  Progress q(100000, "", o);
  EXPECT_EQ(q.line(1, 1.0), "1/100000 images (0%), 1.0 images/s, ETA 27h46m");
}

TEST(AugmentProgress, QuietDuringTheDelayThenRewritesAndClears) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ProgressOptions o;
  o.fd = fds[1];
  o.force = true;
  o.delay = std::chrono::milliseconds(10000);
  {
    Progress p(5, "x", o);
    EXPECT_TRUE(p.enabled());
    p.advance(5);  // within the delay: a short run prints nothing, not even the clear
  }
  o.delay = std::chrono::milliseconds(0);
  o.interval = std::chrono::milliseconds(3600 * 1000);
  {
    Progress p(5, "y", o);
    p.advance(2);  // due at once: printed
    p.advance(1);  // within the interval: not printed
    p.finish();
    p.advance(1);  // after finish: never printed
    p.finish();    // idempotent
  }
  ::close(fds[1]);
  const std::string out = drain(fds[0]);
  ::close(fds[0]);
  EXPECT_EQ(out.rfind("\ry: 2/5 images (40%), ", 0), 0u) << out;
  ASSERT_GE(out.size(), 7u);
  EXPECT_EQ(out.substr(out.size() - 7), "\033[K\r\033[K") << out;
  EXPECT_EQ(count(out, "\r"), 2u);
}

TEST(AugmentProgress, ManyThreadsAdvanceAtOnce) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
  ProgressOptions o;
  o.fd = fds[1];
  o.force = true;
  o.delay = std::chrono::milliseconds(0);
  o.interval = std::chrono::milliseconds(0);  // every advance may print: the worst case for races
  const int threads = 4, per_thread = 200;
  std::string out;
  {
    Progress p(threads * per_thread, "t", o);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&p] {
        for (int i = 0; i < per_thread; ++i) p.advance();
      });
    // Drain while they write: a full pipe would block the printer (a terminal never stays full).
    std::thread reader([&] {
      char buf[4096];
      for (;;) {
        const ssize_t n = ::read(fds[0], buf, sizeof buf);
        if (n > 0) out.append(buf, std::size_t(n));
        else if (n == 0) break;
        else std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
    for (auto& t : pool) t.join();
    EXPECT_EQ(p.done(), std::size_t(threads * per_thread));
    p.finish();
    ::close(fds[1]);
    reader.join();
  }
  ::close(fds[0]);
  // Lines never interleave: every line starts with \r and ends with the erase sequence.
  EXPECT_GE(count(out, "\r"), 2u);
  EXPECT_EQ(count(out, "\r"), count(out, "\033[K"));
  EXPECT_EQ(out.substr(out.size() - 4), "\r\033[K");
  for (auto p = out.find('\r'); p != std::string::npos; p = out.find('\r', p + 1)) {
    const std::string rest = out.substr(p + 1, 2);
    EXPECT_TRUE(rest == "t:" || rest == "\033[") << rest;
  }
}

TEST(AugmentProgress, OnByItselfOnATerminal) {
  int master = -1, slave = -1;
  if (::openpty(&master, &slave, nullptr, nullptr, nullptr) != 0) GTEST_SKIP() << "no pseudo-terminal";
  ProgressOptions o;
  o.fd = slave;
  o.delay = std::chrono::milliseconds(0);
  {
    Progress p(3, "tty", o);
    EXPECT_TRUE(p.enabled());
    p.advance(3);
  }
  ::close(slave);
  char buf[256];
  const ssize_t n = ::read(master, buf, sizeof buf);
  ::close(master);
  ASSERT_GT(n, 0);
  EXPECT_NE(std::string(buf, std::size_t(n)).find("tty: 3/3 images (100%)"), std::string::npos);
}
