// Child processes owned by RAII handles: the destructor kills the child's whole process
// group and reaps it, so no exit path of the parent leaks a process.
// Not thread-safe: one thread drives one Subprocess.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mc {

struct SubprocessOptions {
  std::vector<std::string> argv;               // argv[0] is looked up in PATH
  std::map<std::string, std::string> env_set;  // added to (or overriding) the inherited environment
  std::vector<std::string> env_unset;          // removed from the inherited environment
  std::string cwd;                             // empty: the parent's
  bool pipe_stdin = false;                     // else /dev/null
  bool capture_stdout = true;                  // else inherited
  bool capture_stderr = true;                  // else inherited
  std::string stderr_file;                     // when set, stderr goes to this file instead
  int nice = 0;                                // added to the child's niceness (lower priority)
};

struct ExitStatus {
  int exit_code = -1;    // valid when term_signal == 0
  int term_signal = 0;   // signal that ended the child, 0 if it exited
  bool timed_out = false;
  bool ok() const { return term_signal == 0 && exit_code == 0 && !timed_out; }
  std::string describe() const;  // "exit 1", "killed by SIGSEGV", "timed out"
};

class Subprocess {
 public:
  explicit Subprocess(const SubprocessOptions& opts);  // throws mc::Error if it cannot start
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  bool running();

  // Writes all of `data` to the child's stdin. False if the child closed it.
  bool write_stdin(const std::string& data);
  void close_stdin();

  // Reads one '\n'-terminated line from stdout (without the newline). nullopt on EOF or when
  // timeout_ms passes first (timed_out set). Stderr is drained meanwhile into stderr_text().
  std::optional<std::string> read_line(int timeout_ms, bool* timed_out = nullptr);

  // Waits for exit, draining output; kills the group after timeout_ms (-1: no limit).
  ExitStatus wait(int timeout_ms = -1);
  void kill_group(int sig = 9);

  // For a child that has done its work and is exiting by itself: closes the pipes and reaps it
  // on a detached thread instead of waiting here (a process that held a CUDA context takes
  // tenths of a second to be gone). The destructor then neither kills nor waits.
  void abandon();

  // One poll round over the open output pipes, for up to timeout_ms: what the child wrote
  // meanwhile is appended to stdout_text() / stderr_text(). For callers that watch the output
  // while it runs (wait() does this itself).
  void pump(int timeout_ms);

  std::string& stdout_text() { return out_; }
  std::string& stderr_text() { return err_; }

 private:
  pid_t pid_ = -1;
  int in_fd_ = -1, out_fd_ = -1, err_fd_ = -1;
  std::string out_, err_;
  std::optional<ExitStatus> status_;
};

struct RunResult {
  ExitStatus status;
  std::string out, err;
  double wall_s = 0;  // wall clock, start to exit
};

// Runs a command to completion with a wall-clock limit, feeding `stdin_data`.
RunResult run_command(const SubprocessOptions& opts, int timeout_ms,
                      const std::string& stdin_data = "");

std::string signal_name(int sig);  // "SIGSEGV"

}  // namespace mc
