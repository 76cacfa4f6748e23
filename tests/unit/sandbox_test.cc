// The candidate sandbox, applied for real through `musacoder sandbox-exec`.
#include <gtest/gtest.h>

#include "common/fs.h"
#include "common/subprocess.h"
#include "test_util.h"

using namespace mc;

namespace {
RunResult sandboxed(const std::string& scratch, const std::string& script) {
  SubprocessOptions o;
  o.argv = {MUSACODER_BINARY, "sandbox-exec", "--scratch", scratch, "--", "sh", "-c", script};
  return run_command(o, 30000);
}
}  // namespace

TEST(Sandbox, WritesOnlyUnderScratch) {
  TempDir scratch, outside;
  auto r = sandboxed(scratch.path().string(),
                     "echo $MUSACODER_SANDBOX; echo ok > " + scratch.path().string() + "/inside; "
                     "echo bad > " + outside.path().string() + "/outside; true");
  ASSERT_TRUE(r.status.ok()) << r.err;
  EXPECT_TRUE(fs::exists(scratch.path() / "inside"));
  if (r.out.find("landlock") == std::string::npos) GTEST_SKIP() << "landlock unavailable: " << r.out;
  EXPECT_FALSE(fs::exists(outside.path() / "outside"));
}

TEST(Sandbox, NoNetwork) {
  TempDir scratch;
  auto r = sandboxed(scratch.path().string(),
                     "python3 -c \"import socket; socket.create_connection(('127.0.0.1', 9), timeout=2)\"");
  EXPECT_FALSE(r.status.ok());
  // EACCES from seccomp, or no route in the private network namespace; never "refused",
  // which would mean a packet reached the host's loopback.
  EXPECT_TRUE(r.err.find("PermissionError") != std::string::npos ||
              r.err.find("unreachable") != std::string::npos) << r.err;
}

TEST(Sandbox, NoCapabilities) {
  TempDir scratch;
  auto r = sandboxed(scratch.path().string(), "echo $MUSACODER_SANDBOX; grep -E '^Cap(Eff|Prm|Bnd):' /proc/self/status");
  ASSERT_TRUE(r.status.ok()) << r.err;
  if (r.out.find("caps") == std::string::npos) GTEST_SKIP() << "caps layer unavailable: " << r.out;
  for (const char* set : {"CapEff:", "CapPrm:", "CapBnd:"})
    EXPECT_NE(r.out.find(std::string(set) + "\t0000000000000000"), std::string::npos) << set << " in " << r.out;
}

// A judge holds secrets (the timing salt) in its memory; as root a candidate could read them
// through /proc/PID/mem. Landlock refuses that within its domain, and without Landlock (a
// machine whose driver needs it off) no capabilities refuse it too.
TEST(Sandbox, CannotReadAnotherProcessMemory) {
  TempDir scratch, files;
  std::string holder = (files.path() / "holder.py").string(), reader = (files.path() / "reader.py").string();
  write_file_atomic(holder, "import time\nsecret = 'SEC' + 'RET'\ntime.sleep(30)\n");
  write_file_atomic(reader,
             "import os, sys\nprint(os.environ.get('MUSACODER_SANDBOX'))\n"
             "try:\n    open('/proc/%s/mem' % sys.argv[1], 'rb')\n    print('opened')\n"
             "except PermissionError as e:\n    print('refused', e)\n");
  for (std::string disable : {"", "landlock"}) {
    SubprocessOptions o;
    o.argv = {"sh", "-c", "python3 " + holder + " & p=$!; sleep 1; MUSACODER_SANDBOX_DISABLE=" + disable + " " +
                              MUSACODER_BINARY + " sandbox-exec --scratch " + scratch.path().string() + " -- python3 " +
                              reader + " $p; kill $p"};
    auto r = run_command(o, 30000);
    if (r.out.find("caps") == std::string::npos) GTEST_SKIP() << "caps layer unavailable: " << r.out;
    EXPECT_NE(r.out.find("refused"), std::string::npos) << "disable=" << disable << ": " << r.out << r.err;
  }
}

TEST(Sandbox, NoSignalToEveryProcess) {
  TempDir scratch;
  // Signal 0 only asks whether the signal may be sent: nothing is delivered either way.
  auto r = sandboxed(scratch.path().string(),
                     "echo $MUSACODER_SANDBOX; python3 -c \"import os; os.kill(os.getpid(), 0); print('self ok'); os.kill(-1, 0)\"");
  if (r.out.find("seccomp") == std::string::npos) GTEST_SKIP() << "seccomp unavailable: " << r.out;
  EXPECT_FALSE(r.status.ok());
  EXPECT_NE(r.out.find("self ok"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("PermissionError"), std::string::npos) << r.err;
}

TEST(Sandbox, BadArgumentsAreExit2) {
  SubprocessOptions o;
  o.argv = {MUSACODER_BINARY, "sandbox-exec", "--bogus"};
  auto r = run_command(o, 10000);
  EXPECT_EQ(r.status.exit_code, 2);
  EXPECT_NE(r.err.find("unknown argument"), std::string::npos);
}
