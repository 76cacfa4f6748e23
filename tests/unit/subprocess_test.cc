#include "common/subprocess.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>

using namespace mc;

TEST(Subprocess, CapturesOutputAndExitCode) {
  SubprocessOptions o;
  o.argv = {"sh", "-c", "echo out; echo err >&2; exit 3"};
  auto r = run_command(o, 10000);
  EXPECT_EQ(r.status.exit_code, 3);
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
  EXPECT_EQ(r.status.describe(), "exit 3");
}

TEST(Subprocess, TimeoutKillsTheWholeGroup) {
  SubprocessOptions o;
  o.argv = {"sh", "-c", "sleep 30 & sleep 30"};
  auto r = run_command(o, 300);
  EXPECT_TRUE(r.status.timed_out);
  EXPECT_LT(r.wall_s, 5.0);
}

TEST(Subprocess, SignalsAreNamed) {
  SubprocessOptions o;
  o.argv = {"sh", "-c", "kill -SEGV $$"};
  auto r = run_command(o, 10000);
  EXPECT_EQ(r.status.term_signal, SIGSEGV);
  EXPECT_EQ(r.status.describe(), "killed by SIGSEGV");
}

TEST(Subprocess, LineProtocol) {
  SubprocessOptions o;
  o.argv = {"sh", "-c", "while read l; do echo \"got $l\"; done"};
  o.pipe_stdin = true;
  Subprocess p(o);
  ASSERT_TRUE(p.write_stdin("a\nb\n"));
  EXPECT_EQ(p.read_line(5000).value_or(""), "got a");
  EXPECT_EQ(p.read_line(5000).value_or(""), "got b");
  bool timed_out = false;
  EXPECT_FALSE(p.read_line(200, &timed_out));
  EXPECT_TRUE(timed_out);
  p.close_stdin();
  EXPECT_TRUE(p.wait(5000).ok());
}

TEST(Subprocess, MissingProgramIsExit127) {
  SubprocessOptions o;
  o.argv = {"/nonexistent/program"};
  auto r = run_command(o, 5000);
  EXPECT_EQ(r.status.exit_code, 127);
}

TEST(Subprocess, AbandonedChildIsNeitherWaitedForNorLeftAZombie) {
  SubprocessOptions o;
  o.argv = {"sh", "-c", "echo stopped; sleep 1"};
  pid_t pid;
  auto t0 = std::chrono::steady_clock::now();
  {
    Subprocess p(o);
    pid = p.pid();
    EXPECT_EQ(p.read_line(5000).value_or(""), "stopped");
    p.abandon();
  }  // the destructor neither kills nor waits
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.8);
  EXPECT_EQ(::kill(pid, 0), 0);  // still running its last second
  for (int i = 0; i < 100 && ::kill(pid, 0) == 0; ++i) usleep(50000);
  EXPECT_NE(::kill(pid, 0), 0);  // exited and reaped by the detached thread (no zombie)
}

TEST(Subprocess, NiceLowersTheChildsPriority) {
  SubprocessOptions o;
  o.argv = {"sh", "-c", "cut -d' ' -f19 /proc/self/stat"};
  o.nice = 5;
  auto r = run_command(o, 5000);
  EXPECT_EQ(std::stoi(r.out) - ::getpriority(PRIO_PROCESS, 0), 5);
}
