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

TEST(Sandbox, BadArgumentsAreExit2) {
  SubprocessOptions o;
  o.argv = {MUSACODER_BINARY, "sandbox-exec", "--bogus"};
  auto r = run_command(o, 10000);
  EXPECT_EQ(r.status.exit_code, 2);
  EXPECT_NE(r.err.find("unknown argument"), std::string::npos);
}
