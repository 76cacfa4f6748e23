// Real servers for the service tests: a redis-server on a free loopback port (AOF on, so a
// restart loses nothing acknowledged), `musacoder worker` and `musacoder serve` processes, and
// jobs built the way the HTTP API builds them.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <thread>

#include "common/fs.h"
#include "common/subprocess.h"
#include "serve/job.h"
#include "serve/redis.h"
#include "serve/redis_queue.h"
#include "test_util.h"

namespace mc::test {

inline int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

template <typename F>
bool wait_for(F pred, double timeout_s, int poll_ms = 50) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
  }
  return pred();
}

class RedisServer {
 public:
  RedisServer() : port_(free_port()) { start(); }
  ~RedisServer() { proc_.reset(); }
  void start() {
    SubprocessOptions so;
    so.argv = {"redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1",
               "--dir", dir_.path().string(), "--appendonly", "yes", "--appendfsync", "always",
               "--save", "", "--protected-mode", "yes"};
    so.capture_stdout = false;
    so.stderr_file = (dir_.path() / "redis.log").string();
    proc_ = std::make_unique<Subprocess>(so);
    bool up = wait_for([&] {
      try {
        return serve::Redis(url_struct(), 1, 0).ping();
      } catch (const std::exception&) {
        return false;
      }
    }, 20, 100);
    if (!up) throw Error("redis-server did not start (is it installed? scripts/setup.sh)");
  }
  // SIGKILL: the harshest restart; AOF with fsync always must still hold every write.
  void crash_and_restart() {
    proc_->kill_group(9);
    proc_->wait(5000);
    proc_.reset();
    start();
  }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  serve::RedisUrl url_struct() const { return serve::parse_redis_url(url()); }

 private:
  TempDir dir_{"mc-redis-"};
  int port_;
  std::unique_ptr<Subprocess> proc_;
};

// A `musacoder worker` process; its log is kept for failure messages.
class WorkerProc {
 public:
  WorkerProc(const std::string& redis_url, const std::string& name, const std::string& cache,
             std::vector<std::string> extra = {}, const std::string& role = "compile")
      : name_(name) {
    SubprocessOptions so;
    so.argv = {MUSACODER_BINARY, "worker", "--redis", redis_url, "--role", role, "--name",
               name, "--cache-dir", cache, "--threads", "1", "--heartbeat-s", "0.3",
               "--claim-idle-ms", "2000"};
    for (auto& e : extra) so.argv.push_back(e);
    so.capture_stdout = false;
    log_ = cache + "/" + name + ".log";
    fs::create_directories(cache);
    so.stderr_file = log_;
    proc_ = std::make_unique<Subprocess>(so);
  }
  void kill() {
    if (proc_) proc_->kill_group(9);
    proc_.reset();
  }
  const std::string& name() const { return name_; }
  std::string log() const { return fs::exists(log_) ? read_file(log_) : ""; }

 private:
  std::string name_, log_;
  std::unique_ptr<Subprocess> proc_;
};

// A native-format solution whose compile takes several seconds (ptxas on unrolled loops), so a
// test can act while a worker is in the middle of it.
inline std::string slow_native_source(int kernels, const std::string& tag) {
  std::string s = "// " + tag + "\n#include <cuda_runtime.h>\n#include \"musacoder/native_abi.h\"\n";
  for (int k = 0; k < kernels; ++k)
    s += "__global__ void slow" + std::to_string(k) +
         "(float* x) { float a = x[threadIdx.x];\n#pragma unroll\n"
         "for (int i = 0; i < 4000; ++i) a = a * 1.0001f + __sinf(a * (i + " +
         std::to_string(k + 1) + "));\nx[threadIdx.x] = a; }\n";
  s += "extern \"C\" int mc_forward(const mc_tensor* in, int n_in, mc_tensor* out, int n_out,\n"
       "                           cudaStream_t stream) { return 0; }\n";
  return s;
}

// `musacoder serve` on a free port; the port is read from its first line of output.
class ServeProc {
 public:
  explicit ServeProc(std::vector<std::string> args, const std::string& log_dir) {
    SubprocessOptions so;
    so.argv = {MUSACODER_BINARY, "serve", "--port", "0", "--problems",
               cases_dir() + "/problems"};
    for (auto& a : args) so.argv.push_back(a);
    fs::create_directories(log_dir);
    log_ = log_dir + "/serve.log";
    so.stderr_file = log_;
    proc_ = std::make_unique<Subprocess>(so);
    bool timed_out = false;
    auto line = proc_->read_line(120000, &timed_out);
    if (!line || line->find("listening on http://") == std::string::npos)
      throw Error("musacoder serve did not start: " + (line ? *line : "") + "\n" + log());
    url_ = line->substr(line->find("http://"));
    url_ = url_.substr(0, url_.find(' '));
  }
  ~ServeProc() {
    if (proc_) proc_->kill_group(15);
  }
  const std::string& url() const { return url_; }
  std::string log() const { return fs::exists(log_) ? read_file(log_) : ""; }
  bool running() { return proc_->running(); }

 private:
  std::string url_, log_;
  std::unique_ptr<Subprocess> proc_;
};

inline serve::Job make_job(const std::string& answer, bool compile_only = true) {
  serve::Job job;
  job.problem = eval::load_problem(cases_dir() + "/problems/1_Add.py");
  job.answer = answer;
  job.config.compile_only = compile_only;
  job.gpu_kind = "test";
  job.submitted_at = mc::unix_now();
  job.id = serve::make_job_id(*job.problem, job.answer, job.config, job.gpu_kind);
  return job;
}

inline std::vector<std::string> history(serve::Redis& r, const std::string& id) {
  return serve::RedisQueue(r, {}).history(id);
}

inline bool history_has(serve::Redis& r, const std::string& id, const std::string& needle) {
  for (const auto& h : history(r, id))
    if (h.find(needle) != std::string::npos) return true;
  return false;
}

inline std::string join_lines(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

}  // namespace mc::test
