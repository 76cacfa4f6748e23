#include "common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "common/check.h"

extern char** environ;

namespace mc {
namespace {

using Clock = std::chrono::steady_clock;

int ms_since(Clock::time_point t0) {
  return static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string ExitStatus::describe() const {
  if (timed_out) return "timed out";
  if (term_signal) return "killed by " + signal_name(term_signal);
  return "exit " + std::to_string(exit_code);
}

Subprocess::Subprocess(const SubprocessOptions& opts) {
  MC_CHECK(!opts.argv.empty(), "Subprocess: empty argv");
  int in_p[2] = {-1, -1}, out_p[2] = {-1, -1}, err_p[2] = {-1, -1};
  if (opts.pipe_stdin) MC_CHECK(pipe2(in_p, O_CLOEXEC) == 0, "pipe: ", strerror(errno));
  if (opts.capture_stdout) MC_CHECK(pipe2(out_p, O_CLOEXEC) == 0, "pipe: ", strerror(errno));
  if (opts.capture_stderr && opts.stderr_file.empty())
    MC_CHECK(pipe2(err_p, O_CLOEXEC) == 0, "pipe: ", strerror(errno));

  // Build argv/envp before fork: the child may only make async-signal-safe calls.
  std::vector<char*> argv;
  for (const auto& a : opts.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    std::string key = kv.substr(0, kv.find('='));
    bool drop = opts.env_set.count(key) > 0;
    for (const auto& u : opts.env_unset) drop |= (u == key);
    if (!drop) env_strings.push_back(kv);
  }
  for (const auto& [k, v] : opts.env_set) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  int err_file = -1;
  if (!opts.stderr_file.empty()) {
    err_file = ::open(opts.stderr_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    MC_CHECK(err_file >= 0, "cannot open ", opts.stderr_file, ": ", strerror(errno));
  }

  pid_ = fork();
  MC_CHECK(pid_ >= 0, "fork failed: ", strerror(errno));
  if (pid_ == 0) {
    setpgid(0, 0);                    // own group: kill_group reaches grandchildren too
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the parent
    if (opts.nice > 0) (void)!::nice(opts.nice);
    int devnull = ::open("/dev/null", O_RDWR);
    dup2(opts.pipe_stdin ? in_p[0] : devnull, 0);
    if (opts.capture_stdout) dup2(out_p[1], 1);
    if (err_file >= 0) dup2(err_file, 2);
    else if (opts.capture_stderr) dup2(err_p[1], 2);
    if (!opts.cwd.empty() && chdir(opts.cwd.c_str()) != 0) _exit(126);
    execvpe(argv[0], argv.data(), envp.data());
    const char msg[] = "exec failed\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(127);
  }
  setpgid(pid_, pid_);
  if (err_file >= 0) ::close(err_file);
  if (opts.pipe_stdin) { ::close(in_p[0]); in_fd_ = in_p[1]; }
  if (opts.capture_stdout) { ::close(out_p[1]); out_fd_ = out_p[0]; }
  if (err_p[0] >= 0) { ::close(err_p[1]); err_fd_ = err_p[0]; }
}

Subprocess::~Subprocess() {
  close_fd(in_fd_);
  if (!status_) {
    kill_group(SIGKILL);
    int st;
    waitpid(pid_, &st, 0);
  }
  close_fd(out_fd_);
  close_fd(err_fd_);
}

void Subprocess::abandon() {
  if (status_ || pid_ <= 0) return;
  close_fd(in_fd_);
  close_fd(out_fd_);
  close_fd(err_fd_);
  std::thread([pid = pid_] {
    int st;
    waitpid(pid, &st, 0);
  }).detach();
  status_ = ExitStatus{};  // not ours to wait for any more
}

void Subprocess::kill_group(int sig) {
  if (pid_ > 0) {
    ::kill(-pid_, sig);
    ::kill(pid_, sig);
  }
}

bool Subprocess::running() {
  if (status_) return false;
  int st;
  pid_t r = waitpid(pid_, &st, WNOHANG);
  if (r == 0) return true;
  ExitStatus s;
  if (WIFEXITED(st)) s.exit_code = WEXITSTATUS(st);
  if (WIFSIGNALED(st)) s.term_signal = WTERMSIG(st);
  status_ = s;
  return false;
}

bool Subprocess::write_stdin(const std::string& data) {
  if (in_fd_ < 0) return false;
  size_t off = 0;
  signal(SIGPIPE, SIG_IGN);
  while (off < data.size()) {
    ssize_t n = ::write(in_fd_, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

void Subprocess::close_stdin() { close_fd(in_fd_); }

void Subprocess::pump(int timeout_ms) {
  pollfd fds[2];
  int n = 0;
  if (out_fd_ >= 0) fds[n++] = {out_fd_, POLLIN, 0};
  if (err_fd_ >= 0) fds[n++] = {err_fd_, POLLIN, 0};
  if (n == 0) {
    if (timeout_ms > 0) usleep(std::min(timeout_ms, 20) * 1000);
    return;
  }
  int r = poll(fds, n, timeout_ms);
  if (r <= 0) return;
  char buf[65536];
  for (int i = 0; i < n; ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
    bool is_out = fds[i].fd == out_fd_;
    if (got > 0) {
      (is_out ? out_ : err_).append(buf, static_cast<size_t>(got));
      // Keep stderr bounded: a chatty child must not exhaust our memory.
      if (!is_out && err_.size() > (8u << 20)) err_.erase(0, err_.size() - (4u << 20));
    } else if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
      close_fd(is_out ? out_fd_ : err_fd_);
    }
  }
}

std::optional<std::string> Subprocess::read_line(int timeout_ms, bool* timed_out) {
  if (timed_out) *timed_out = false;
  auto t0 = Clock::now();
  while (true) {
    size_t nl = out_.find('\n');
    if (nl != std::string::npos) {
      std::string line = out_.substr(0, nl);
      out_.erase(0, nl + 1);
      return line;
    }
    if (out_fd_ < 0) return std::nullopt;
    int left = timeout_ms < 0 ? 200 : timeout_ms - ms_since(t0);
    if (left <= 0) {
      if (timed_out) *timed_out = true;
      return std::nullopt;
    }
    pump(std::min(left, 200));
  }
}

ExitStatus Subprocess::wait(int timeout_ms) {
  auto t0 = Clock::now();
  bool timed_out = false;
  while (running()) {
    if (timeout_ms >= 0 && ms_since(t0) > timeout_ms) {
      timed_out = true;
      kill_group(SIGKILL);
      int st;
      waitpid(pid_, &st, 0);
      ExitStatus s;
      s.term_signal = SIGKILL;
      status_ = s;
      break;
    }
    pump(20);
  }
  // Drain what is left in the pipes (grandchildren may still hold them: bounded effort).
  for (int i = 0; i < 50 && (out_fd_ >= 0 || err_fd_ >= 0); ++i) pump(10);
  status_->timed_out = timed_out;
  return *status_;
}

RunResult run_command(const SubprocessOptions& opts, int timeout_ms, const std::string& stdin_data) {
  auto t0 = Clock::now();
  SubprocessOptions o = opts;
  o.pipe_stdin = !stdin_data.empty();
  Subprocess p(o);
  if (!stdin_data.empty()) {
    p.write_stdin(stdin_data);
    p.close_stdin();
  }
  RunResult r;
  r.status = p.wait(timeout_ms);
  r.out = std::move(p.stdout_text());
  r.err = std::move(p.stderr_text());
  r.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

}  // namespace mc
