// MooreEval's HTTP API (docs/service.md):
//   POST /v1/verify    one candidate or a batch; optional wait_s to block for the results
//   POST /v1/results   results of many jobs at once; optional wait_s
//   GET  /v1/jobs/{id} one job (?wait_s=S to block)
//   GET  /health       liveness of the service and its backend
//   GET  /metrics      Prometheus text
// /v1/* need `Authorization: Bearer <token>` when tokens are configured. Every error is a JSON
// body {"error": "..."} with a 4xx/5xx status; a full queue answers 429 with Retry-After.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "eval/eval_config.h"
#include "eval/problem.h"
#include "serve/backend.h"
#include "serve/metrics.h"

namespace httplib {
class Server;
}

namespace mc::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                       // 0: any free port (see bound_port)
  std::vector<std::string> tokens;       // accepted bearer tokens; empty: no auth (loopback only)
  size_t max_body_bytes = 16u << 20;
  size_t max_answer_bytes = 1u << 20;
  size_t max_batch = 1000;
  double max_wait_s = 600;
  int threads = 64;
  int retry_after_s = 5;                 // what a 429 asks the client to wait
  // Problems sent as source are imported by the judge, the trusted process that holds the
  // reference: unsandboxed code. Off unless the operator trusts every client with a token.
  bool allow_inline_problems = false;
};

// Problems a client may name ("L1/19_ReLU", or the stem "19_ReLU" when unique).
class ProblemSet {
 public:
  explicit ProblemSet(const std::vector<eval::ProblemPtr>& problems);
  eval::ProblemPtr find(const std::string& ref) const;  // null when unknown or ambiguous
  size_t size() const { return by_key_.size(); }

 private:
  std::map<std::string, eval::ProblemPtr> by_key_;
  std::map<std::string, std::vector<eval::ProblemPtr>> by_stem_;
};

class HttpServer {
 public:
  HttpServer(ServerOptions opts, Backend& backend, ProblemSet problems, eval::EvalConfig cfg,
             std::string gpu_kind, std::string cache_dir, Metrics& metrics);
  ~HttpServer();
  int bind();   // binds; returns the port
  void run();   // serves until stop()
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Tokens from a file: one per line, blank lines and '#' comments ignored. Throws when the file
// is missing or holds none.
std::vector<std::string> read_token_file(const std::string& path);

}  // namespace mc::serve
