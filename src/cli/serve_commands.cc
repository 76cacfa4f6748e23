#include "cli/serve_commands.h"

#include <fmt/format.h>
#include <signal.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "cli/run_options.h"
#include "common/fs.h"
#include "common/progress.h"
#include "common/subprocess.h"
#include "eval/candidates.h"
#include "eval/executor.h"
#include "eval/problem.h"
#include "eval/result.h"
#include "eval/summary.h"
#include "eval/toolchain.h"
#include "serve/backend.h"
#include "serve/client.h"
#include "serve/http_api.h"
#include "serve/worker.h"

namespace mc::cli {
namespace {

// SIGINT/SIGTERM are blocked in every thread and taken by one waiting thread, which calls
// `on_signal` (a normal function context: it may lock, notify, stop servers).
class SignalWatcher {
 public:
  explicit SignalWatcher(std::function<void()> on_signal) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    thread_ = std::thread([set, on_signal] {
      int sig = 0;
      sigwait(&set, &sig);
      fmt::print(stderr, "musacoder: {} received, finishing\n", signal_name(sig));
      on_signal();
    });
    thread_.detach();  // lives until the process exits
  }

 private:
  std::thread thread_;
};

std::string detect_gpu_kind(const std::string& device, int gpu, const std::string& arch) {
  if (device == "cpu") return "cpu";
  SubprocessOptions so;
  // nvidia-smi numbers the machine's GPUs, not this process's: ask for the one CUDA calls `gpu`.
  so.argv = {"nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", eval::visible_gpu(gpu)};
  try {
    auto r = run_command(so, 10000);
    if (r.status.ok()) {
      std::string name = r.out.substr(0, r.out.find('\n'));
      if (!name.empty()) return name;
    }
  } catch (const std::exception&) {
  }
  return "sm_" + (arch.empty() ? std::string("90") : arch);
}

std::string read_token(const std::string& file) {
  if (file.empty()) return "";
  return serve::read_token_file(file).front();
}

}  // namespace

struct ServeCommands::Impl {
  CLI::App* serve = nullptr;
  CLI::App* worker = nullptr;
  CLI::App* verify = nullptr;

  RunOptions serve_run;
  serve::ServerOptions server;
  serve::QueueOptions queue;
  std::string redis_url, token_file, gpu_kind;
  double max_body_mb = 16;

  serve::WorkerOptions wopts;
  std::string worker_gpus = "0";
  std::string worker_backend = "cuda";

  serve::ClientOptions copts;
  std::string verify_problems, verify_solutions, verify_out, verify_token_file;
  bool verify_send_source = false;
  int verify_level = 0;

  int run_serve() {
    RunOptions& o = serve_run;
    for (const auto& a : o.allow) o.cfg.allow.insert(a);
    eval::validate(o.cfg);
    std::vector<eval::ProblemPtr> problems;
    if (!o.problems.empty()) problems = eval::load_problems(o.problems, o.level);
    if (!token_file.empty()) server.tokens = serve::read_token_file(token_file);
    server.max_body_bytes = static_cast<size_t>(max_body_mb * (1 << 20));
    std::string cache = o.cache_dir.empty() ? default_cache_dir() : o.cache_dir;
    fs::create_directories(cache);
    serve::Metrics metrics;
    std::unique_ptr<serve::Backend> backend;
    if (redis_url.empty()) {
      o.no_progress = true;
      o.cache_dir = cache;
      o.prepare_toolchain = true;  // the first candidates should find the header ready
      auto ev = make_evaluator(o);
      backend = std::make_unique<serve::LocalBackend>(std::move(ev), cache, queue.max_depth, metrics);
    } else {
      // The workers judge; a backend they cannot honour is refused here, not passed on to CUDA.
      eval::require_backend(o.backend);
      backend = std::make_unique<serve::RedisBackend>(redis_url, queue, metrics);
    }
    if (gpu_kind.empty())
      gpu_kind = detect_gpu_kind(o.device, parse_gpus(o.gpus).at(0), o.cuda_arch);
    serve::HttpServer http(server, *backend, serve::ProblemSet(problems), o.cfg, gpu_kind, cache,
                           metrics);
    SignalWatcher sw([&] { http.stop(); });
    int port = http.bind();
    // Tests and scripts read this line to learn the port (--port 0 picks a free one).
    fmt::print("musacoder serve: listening on http://{}:{} ({} mode, {} problems, gpu kind {}, "
               "config {})\n",
               server.host, port, backend->mode(), problems.size(), gpu_kind,
               o.cfg.config_hash());
    std::fflush(stdout);
    http.run();
    fmt::print(stderr, "musacoder serve: stopped\n");
    return 0;
  }

  int run_worker() {
    eval::require_backend(worker_backend);  // musa: refused with what is missing, never judged on CUDA
    wopts.gpus = parse_gpus(worker_gpus);
    if (wopts.cache_dir.empty()) wopts.cache_dir = default_cache_dir();
    wopts.sandbox_exe = self_exe();
    wopts.queue = queue;
    static std::atomic<bool> stop{false};
    SignalWatcher sw([] { stop = true; });
    long long n = serve::run_worker(wopts, stop);
    fmt::print(stderr, "musacoder worker: stopped after {} jobs\n", n);
    return 0;
  }

  int run_verify() {
    copts.token = read_token(verify_token_file);
    auto problems = eval::load_problems(verify_problems, verify_level);
    auto cands = eval::load_candidates(verify_solutions, problems);
    std::vector<serve::VerifyItem> items;
    std::vector<size_t> index;  // item -> candidate
    std::vector<nlohmann::json> rows(cands.size());
    for (size_t i = 0; i < cands.size(); ++i) {
      const auto& c = cands[i];
      if (!c.input_error.empty() || !c.problem) {  // never leaves this machine: one row here
        eval::EvalResult r;
        r.problem_key = c.problem_ref;
        r.sample_id = c.sample_id;
        r.verdict = eval::Verdict::kExtractError;
        r.stage = eval::Stage::kExtract;
        r.reason = c.input_error + " (" + c.origin + ")";
        r.reward = -1.0;
        rows[i] = eval::to_json(r);
        continue;
      }
      serve::VerifyItem it;
      if (verify_send_source) {  // for a server without this problem folder
        it.problem_source = c.problem->source;
        it.problem_name = c.problem->stem;
        it.level = c.problem->level;
      } else {
        it.problem = c.problem->key;
      }
      it.answer = c.answer;
      it.sample_id = c.sample_id;
      items.push_back(it);
      index.push_back(i);
    }
    serve::VerifyClient client(copts);
    ProgressBar bar("verify", items.size(), true);
    auto got = client.verify(items, [&](size_t) { bar.advance(1, ""); });
    for (size_t k = 0; k < got.size(); ++k) rows[index[k]] = got[k];
    std::vector<eval::EvalResult> results;
    std::unique_ptr<std::ofstream> out;
    if (!verify_out.empty()) out = std::make_unique<std::ofstream>(verify_out);
    for (const auto& row : rows) {
      if (out) *out << row.dump() << "\n";
      results.push_back(eval::result_from_json(row));
    }
    fmt::print("{}", eval::format_summary(eval::summarize(results)));
    if (out) fmt::print("results: {} ({} rows)\n", verify_out, rows.size());
    return 0;
  }
};

ServeCommands::ServeCommands(CLI::App& app) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.serve = app.add_subcommand("serve", "MooreEval as an HTTP service (embedded pools, or Redis)");
  add_run_options(m.serve, m.serve_run, /*problems_required=*/false);
  auto* s = m.serve;
  s->add_option("--host", m.server.host, "address to listen on")->capture_default_str();
  s->add_option("--port", m.server.port, "port (0: any free one)")->capture_default_str()
      ->envname("MUSACODER_PORT");
  s->add_option("--token-file", m.token_file, "bearer tokens, one per line (required off loopback)")
      ->envname("MUSACODER_TOKEN_FILE");
  s->add_option("--redis", m.redis_url, "redis://host:port: distributed mode (workers do the work)")
      ->envname("MUSACODER_REDIS");
  s->add_option("--max-queue", m.queue.max_depth, "jobs queued or running before 429")
      ->capture_default_str();
  s->add_option("--max-body-mb", m.max_body_mb, "largest request body")->capture_default_str();
  s->add_option("--max-batch", m.server.max_batch, "candidates per request")->capture_default_str();
  s->add_option("--http-threads", m.server.threads, "request threads")->capture_default_str();
  s->add_option("--gpu-kind", m.gpu_kind, "GPU name in job ids (default: detected)");
  s->add_flag("--allow-inline-problems", m.server.allow_inline_problems,
              "accept problem sources in requests (they run unsandboxed in the judge: trusted clients only)");
  add_verdict_options(s, m.serve_run);  // the reward is computed here: an RL client checks that its own matches
  s->add_flag("--compile-only", m.serve_run.cfg.compile_only, "stop after compiling (no GPU)");

  m.worker = app.add_subcommand("worker", "run one stage of MooreEval on jobs from Redis Streams");
  auto* w = m.worker;
  w->add_option("--redis", m.wopts.redis_url, "redis://host:port")->required()->envname("MUSACODER_REDIS");
  w->add_option("--role", m.wopts.role, "compile or gpu")->required()
      ->check(CLI::IsMember({"compile", "gpu"}));
  w->add_option("--gpus", m.worker_gpus, "GPU indices as CUDA numbers them (within CUDA_VISIBLE_DEVICES; gpu role)")->capture_default_str();
  w->add_option("--lanes", m.wopts.lanes, "judges per GPU (gpu role): correctness trials of several candidates at "
                "once, timing alone (0: 1 on cpu, 4 on cuda)")->envname("MUSACODER_LANES");
  w->add_option("--device", m.wopts.device, "cuda, or cpu (tests)")->capture_default_str()
      ->check(CLI::IsMember({"cuda", "cpu"}));
  w->add_option("--threads", m.wopts.threads, "distinct builds at once (0: cores/2); twice as many jobs are taken");
  w->add_option("--name", m.wopts.name, "consumer name (default host-role-pid)");
  w->add_option("--cache-dir", m.wopts.cache_dir, "compile cache, artifacts")->envname("MUSACODER_CACHE_DIR");
  w->add_option("--cuda-arch", m.wopts.cuda_arch, "compute capability without the dot")
      ->envname("MUSACODER_CUDA_ARCH");
  w->add_option("--delivery-limit", m.queue.delivery_limit, "deliveries before dead letters")
      ->capture_default_str();
  w->add_option("--claim-idle-ms", m.queue.claim_idle_ms, "idle time after which a job is reclaimed")
      ->capture_default_str();
  w->add_option("--heartbeat-s", m.wopts.heartbeat_s, "heartbeat interval")->capture_default_str();
  w->add_flag("--no-sandbox", [&m](int64_t) { m.wopts.sandbox = false; }, "debugging only");
  w->add_option("--backend", m.worker_backend, "cuda, or musa (Moore Threads; needs mcc and torch_musa)")
      ->capture_default_str()->check(CLI::IsMember({"cuda", "musa"}))->envname("MUSACODER_BACKEND");

  m.verify = app.add_subcommand("verify", "send candidates to a MooreEval server and summarize");
  auto* v = m.verify;
  v->add_option("--server", m.copts.url, "http://host:port")->required()->envname("MUSACODER_SERVER");
  v->add_option("--token-file", m.verify_token_file, "file with the bearer token")
      ->envname("MUSACODER_TOKEN_FILE");
  v->add_option("--problems", m.verify_problems, "folder of problems")->required();
  v->add_option("--level", m.verify_level, "KernelBench level (0: all)");
  v->add_option("--solutions", m.verify_solutions, "folder or .jsonl of candidates")->required();
  v->add_option("--out", m.verify_out, "JSONL results");
  v->add_option("--concurrency", m.copts.concurrency, "requests in flight")->capture_default_str();
  v->add_option("--batch", m.copts.batch, "candidates per request")->capture_default_str();
  v->add_flag("--send-problem-source", m.verify_send_source,
              "send each problem's source (the server needs --allow-inline-problems)");
}

ServeCommands::~ServeCommands() = default;

std::optional<int> ServeCommands::run() {
  Impl& m = *impl_;
  if (*m.serve) return m.run_serve();
  if (*m.worker) return m.run_worker();
  if (*m.verify) return m.run_verify();
  return std::nullopt;
}

}  // namespace mc::cli
