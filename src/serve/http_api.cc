#include "serve/http_api.h"

#include <fmt/format.h>
#include <httplib.h>

#include <sys/socket.h>

#include <fstream>

#include "common/check.h"
#include "common/fs.h"
#include "common/jsonl.h"

namespace mc::serve {
namespace {

// A client mistake: becomes a 4xx answer with the message.
struct HttpError {
  int status;
  std::string message;
};

void send_json(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

bool constant_time_equal(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

const char* state_name(JobStatus::State s) {
  switch (s) {
    case JobStatus::State::kDone: return "done";
    case JobStatus::State::kQueued: return "queued";
    default: return "unknown";
  }
}

nlohmann::json job_view(const std::string& id, const JobStatus& st) {
  nlohmann::json j = {{"id", id}, {"status", state_name(st.state)}};
  if (st.state == JobStatus::State::kDone) j["result"] = st.result;
  return j;
}

double wait_arg(const nlohmann::json& body, double max_wait) {
  if (!body.contains("wait_s")) return 0;
  if (!body["wait_s"].is_number()) throw HttpError{400, "wait_s must be a number of seconds"};
  return std::clamp(body["wait_s"].get<double>(), 0.0, max_wait);
}

}  // namespace

ProblemSet::ProblemSet(const std::vector<eval::ProblemPtr>& problems) {
  for (const auto& p : problems) {
    by_key_[p->key] = p;
    by_stem_[p->stem].push_back(p);
  }
}

eval::ProblemPtr ProblemSet::find(const std::string& ref) const {
  if (auto it = by_key_.find(ref); it != by_key_.end()) return it->second;
  if (auto it = by_stem_.find(ref); it != by_stem_.end() && it->second.size() == 1)
    return it->second[0];
  return nullptr;
}

std::vector<std::string> read_token_file(const std::string& path) {
  std::ifstream in(path);
  MC_CHECK(in.good(), "token file not found or unreadable: ", path);
  std::vector<std::string> tokens;
  for (std::string line; std::getline(in, line);) {
    auto b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    auto e = line.find_last_not_of(" \t\r");
    tokens.push_back(line.substr(b, e - b + 1));
  }
  MC_CHECK(!tokens.empty(), "token file ", path, " holds no token");
  for (const auto& t : tokens)
    MC_CHECK(t.size() >= 16, "tokens in ", path, " must be at least 16 characters long");
  return tokens;
}

struct HttpServer::Impl {
  ServerOptions opts;
  Backend& backend;
  ProblemSet problems;
  eval::EvalConfig cfg;
  std::string gpu_kind, cache_dir;
  Metrics& metrics;
  httplib::Server svr;
  int listen_fd = -1;
  std::map<std::string, eval::ProblemPtr> inline_problems;  // by source digest
  std::mutex mu;

  Impl(ServerOptions o, Backend& b, ProblemSet p, eval::EvalConfig c, std::string g,
       std::string cd, Metrics& m)
      : opts(std::move(o)), backend(b), problems(std::move(p)), cfg(std::move(c)),
        gpu_kind(std::move(g)), cache_dir(std::move(cd)), metrics(m) {}

  void authorize(const httplib::Request& req) const {
    if (opts.tokens.empty()) return;
    std::string h = req.get_header_value("Authorization");
    if (h.empty()) throw HttpError{401, "missing Authorization header (Bearer token)"};
    if (h.rfind("Bearer ", 0) != 0) throw HttpError{401, "Authorization must be 'Bearer <token>'"};
    std::string tok = h.substr(7);
    for (const auto& t : opts.tokens)
      if (constant_time_equal(t, tok)) return;
    throw HttpError{403, "invalid token"};
  }

  Job job_from_request(const nlohmann::json& c, size_t index) {
    auto where = [&](const std::string& msg) {
      return HttpError{400, fmt::format("candidate {}: {}", index, msg)};
    };
    if (!c.is_object()) throw where("must be a JSON object");
    static const std::set<std::string> kFields = {"problem", "problem_source", "problem_name",
                                                  "level", "answer", "sample_id"};
    for (auto& [k, v] : c.items())
      if (!kFields.count(k)) throw where("unknown field '" + k + "'");
    if (!c.contains("answer") || !c["answer"].is_string())
      throw where("'answer' (the model's answer or the solution source) must be a string");
    Job job;
    job.answer = c["answer"].get<std::string>();
    if (job.answer.size() > opts.max_answer_bytes)
      throw HttpError{413, fmt::format("candidate {}: answer is {} bytes; the limit is {}", index,
                                       job.answer.size(), opts.max_answer_bytes)};
    if (c.contains("sample_id")) {
      const auto& s = c["sample_id"];
      if (s.is_string()) job.sample_id = s.get<std::string>();
      else if (s.is_number_integer()) job.sample_id = std::to_string(s.get<long long>());
      else throw where("'sample_id' must be a string or an integer");
    }
    if (c.contains("problem_source")) {
      if (!opts.allow_inline_problems)
        throw HttpError{403, fmt::format("candidate {}: this server takes problems by key only (problem "
                                         "sources run unsandboxed in the judge; the operator "
                                         "enables them with --allow-inline-problems)", index)};
      if (!c["problem_source"].is_string()) throw where("'problem_source' must be a string");
      std::string name = c.value("problem_name", std::string("problem"));
      int level = c.contains("level") && c["level"].is_number_integer() ? c["level"].get<int>() : 0;
      try {
        job.problem = materialize_problem(c["problem_source"].get<std::string>(), name, level,
                                          "", cache_dir);
      } catch (const std::exception& e) {
        throw HttpError{422, fmt::format("candidate {}: {}", index, e.what())};
      }
    } else if (c.contains("problem")) {
      std::string ref;
      if (c["problem"].is_string()) ref = c["problem"].get<std::string>();
      else throw where("'problem' must be a problem key such as \"L1/19_ReLU\"");
      job.problem = problems.find(ref);
      if (!job.problem)
        throw HttpError{422, fmt::format("candidate {}: unknown problem '{}' ({} problems are "
                                         "loaded; name one by key, e.g. L1/19_ReLU, or send "
                                         "problem_source)",
                                         index, ref.substr(0, 100), problems.size())};
    } else {
      throw where("needs 'problem' (a key) or 'problem_source'");
    }
    job.config = cfg;
    job.gpu_kind = gpu_kind;
    job.submitted_at = unix_now();
    job.id = make_job_id(*job.problem, job.answer, job.config, job.gpu_kind);
    return job;
  }

  void verify(const httplib::Request& req, httplib::Response& res) {
    authorize(req);
    auto body = nlohmann::json::parse(req.body, nullptr, false);
    if (body.is_discarded()) throw HttpError{400, "body is not valid JSON"};
    if (!body.is_object()) throw HttpError{400, "body must be a JSON object"};
    bool batch = body.contains("candidates");
    std::vector<nlohmann::json> items;
    if (batch) {
      if (!body["candidates"].is_array()) throw HttpError{400, "'candidates' must be an array"};
      if (body["candidates"].empty()) throw HttpError{400, "'candidates' is empty"};
      if (body["candidates"].size() > opts.max_batch)
        throw HttpError{413, fmt::format("{} candidates in one request; the limit is {}",
                                         body["candidates"].size(), opts.max_batch)};
      for (const auto& c : body["candidates"]) items.push_back(c);
      for (auto& [k, v] : body.items())
        if (k != "candidates" && k != "wait_s") throw HttpError{400, "unknown field '" + k + "'"};
    } else {
      nlohmann::json c = body;
      c.erase("wait_s");
      items.push_back(c);
    }
    double wait_s = wait_arg(body, opts.max_wait_s);
    std::vector<Job> jobs;
    for (size_t i = 0; i < items.size(); ++i) jobs.push_back(job_from_request(items[i], i));
    // Every job is checked before any is queued: a bad item rejects the whole request.
    std::vector<std::string> accepted;
    bool full = false;
    size_t known = 0;
    for (const auto& job : jobs) {
      Admission a = backend.submit(job);
      if (a == Admission::kFull) {
        full = true;
        break;
      }
      known += a == Admission::kKnown;
      accepted.push_back(job.id);
    }
    metrics.submitted(accepted.size() - known);
    metrics.cached_hit(known);
    if (full) {
      res.set_header("Retry-After", std::to_string(opts.retry_after_s));
      send_json(res, 429,
                {{"error", fmt::format("the queue is full; {} of {} jobs were accepted. Resubmit "
                                       "the rest after Retry-After seconds (resubmitting "
                                       "accepted ones is harmless: job ids deduplicate)",
                                       accepted.size(), jobs.size())},
                 {"accepted", accepted}});
      return;
    }
    nlohmann::json out = {{"jobs", nlohmann::json::array()}};
    bool all_done = true;
    for (const auto& id : accepted) {
      JobStatus st = wait_s > 0 ? backend.wait(id, wait_s) : backend.status(id);
      all_done &= st.state == JobStatus::State::kDone;
      out["jobs"].push_back(job_view(id, st));
    }
    if (!batch) out["id"] = accepted.at(0);
    send_json(res, all_done ? 200 : 202, out);
  }

  void results(const httplib::Request& req, httplib::Response& res) {
    authorize(req);
    auto body = nlohmann::json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) throw HttpError{400, "body must be a JSON object"};
    if (!body.contains("ids") || !body["ids"].is_array())
      throw HttpError{400, "'ids' must be an array of job ids"};
    if (body["ids"].size() > opts.max_batch)
      throw HttpError{413, fmt::format("at most {} ids per request", opts.max_batch)};
    double wait_s = wait_arg(body, opts.max_wait_s);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
    nlohmann::json out = {{"jobs", nlohmann::json::array()}};
    for (const auto& idj : body["ids"]) {
      if (!idj.is_string()) throw HttpError{400, "'ids' must hold strings"};
      std::string id = idj.get<std::string>();
      double left = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
      JobStatus st = left > 0 ? backend.wait(id, left) : backend.status(id);
      out["jobs"].push_back(job_view(id, st));
    }
    send_json(res, 200, out);
  }

  void job(const httplib::Request& req, httplib::Response& res) {
    authorize(req);
    std::string id = req.matches[1];
    double wait_s = 0;
    if (req.has_param("wait_s")) {
      try {
        wait_s = std::clamp(std::stod(req.get_param_value("wait_s")), 0.0, opts.max_wait_s);
      } catch (const std::exception&) {
        throw HttpError{400, "wait_s must be a number of seconds"};
      }
    }
    JobStatus st = wait_s > 0 ? backend.wait(id, wait_s) : backend.status(id);
    if (st.state == JobStatus::State::kUnknown) throw HttpError{404, "unknown job " + id};
    send_json(res, 200, job_view(id, st));
  }

  // Runs a handler; client mistakes become 4xx JSON, anything else a 500 (never a crash).
  template <typename F>
  httplib::Server::Handler guarded(F f) {
    return [this, f](const httplib::Request& req, httplib::Response& res) {
      try {
        (this->*f)(req, res);
      } catch (const HttpError& e) {
        send_json(res, e.status, {{"error", e.message}});
      } catch (const std::exception& e) {
        send_json(res, 500, {{"error", std::string("internal error: ") + e.what()}});
      }
      metrics.http_answer(res.status);
    };
  }

  void routes() {
    svr.Post("/v1/verify", guarded(&Impl::verify));
    svr.Post("/v1/results", guarded(&Impl::results));
    svr.Get(R"(/v1/jobs/([0-9a-f]{1,64}))", guarded(&Impl::job));
    svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      nlohmann::json h = backend.health();
      h["mode"] = backend.mode();
      h["gpu_kind"] = gpu_kind;
      h["problems"] = problems.size();
      h["config_hash"] = cfg.config_hash();
      h["config"] = eval::to_json(cfg);  // what a client compares its own settings with
      send_json(res, h.value("ok", false) ? 200 : 503, h);
    });
    svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics.prometheus(backend.gauges()), "text/plain; version=0.0.4");
    });
    svr.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      std::string msg = res.status == 404   ? "no such endpoint: " + req.method + " " + req.path
                        : res.status == 413 ? fmt::format("request body too large (limit {} bytes)",
                                                          opts.max_body_bytes)
                                            : "request failed";
      send_json(res, res.status, {{"error", msg}});
      metrics.http_answer(res.status);
    });
    svr.set_exception_handler(
        [this](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
          send_json(res, 500, {{"error", "internal error"}});
        });
  }
};

HttpServer::HttpServer(ServerOptions opts, Backend& backend, ProblemSet problems,
                       eval::EvalConfig cfg, std::string gpu_kind, std::string cache_dir,
                       Metrics& metrics)
    : impl_(std::make_unique<Impl>(std::move(opts), backend, std::move(problems), std::move(cfg),
                                   std::move(gpu_kind), std::move(cache_dir), metrics)) {
  Impl& m = *impl_;
  bool loopback = m.opts.host == "127.0.0.1" || m.opts.host == "localhost" || m.opts.host == "::1";
  MC_CHECK(loopback || !m.opts.tokens.empty(), "serving on ", m.opts.host,
           " needs --token-file: without tokens only loopback addresses are allowed");
  m.svr.set_payload_max_length(m.opts.max_body_bytes);
  int threads = m.opts.threads;
  m.svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // cpp-httplib listens with a backlog of 5: a burst of clients overflows it (SYN retries cost
  // a second each, some connections are reset). Remember the socket to widen it after bind.
  m.svr.set_socket_options([&m](int sock) {
    httplib::default_socket_options(sock);
    m.listen_fd = sock;
  });
  // Clients long-poll and reuse connections: keep them open across many requests.
  m.svr.set_keep_alive_max_count(1000);
  m.svr.set_keep_alive_timeout(60);
  m.svr.set_read_timeout(30, 0);
  m.svr.set_write_timeout(30, 0);
  m.routes();
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  Impl& m = *impl_;
  int port = m.opts.port == 0 ? m.svr.bind_to_any_port(m.opts.host)
                              : (m.svr.bind_to_port(m.opts.host, m.opts.port) ? m.opts.port : -1);
  MC_CHECK(port > 0, "cannot listen on ", m.opts.host, ":", m.opts.port,
           " (in use, or not an address of this machine)");
  if (m.listen_fd >= 0) ::listen(m.listen_fd, 1024);  // Linux: re-listen updates the backlog
  return port;
}

void HttpServer::run() { impl_->svr.listen_after_bind(); }

void HttpServer::stop() {
  if (impl_->svr.is_running()) impl_->svr.stop();
}

}  // namespace mc::serve
