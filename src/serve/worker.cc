#include "serve/worker.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include "common/fs.h"
#include "common/hash.h"
#include "eval/pipeline.h"
#include "serve/job.h"

namespace mc::serve {
namespace {

using eval::CompileOutcome;
using eval::EvalResult;

// A job entry that cannot be read fails the same way on every worker: dead-letter it at once.
class BadJob : public Error {
 public:
  using Error::Error;
};

Job parse_job(const Delivery& d, const std::string& cache_dir) {
  try {
    return job_from_json(d.job, cache_dir);
  } catch (const std::exception& e) {
    throw BadJob(e.what());
  }
}

std::string default_worker_name(const std::string& role) {
  char host[256] = "host";
  gethostname(host, sizeof host - 1);
  return fmt::format("{}-{}-{}", host, role, getpid());
}

// Entries this process is working on: the heartbeat thread keeps them from being reclaimed.
class InFlight {
 public:
  void add(QueueStage s, const std::string& id) {
    std::lock_guard lk(mu_);
    entries_[id] = s;
  }
  void remove(const std::string& id) {
    std::lock_guard lk(mu_);
    entries_.erase(id);
  }
  std::map<std::string, QueueStage> snapshot() {
    std::lock_guard lk(mu_);
    return entries_;
  }

 private:
  std::mutex mu_;
  std::map<std::string, QueueStage> entries_;
};

struct Shared {
  const WorkerOptions& opts;
  std::string name;
  const std::atomic<bool>& stop;
  InFlight inflight;
  std::atomic<long long> completed{0}, busy{0};
  eval::Toolchain tc;
  // Compile role: one pool for every slot, so torch's build facts are read once and the
  // precompiled header built once (a pool per thread ran `import torch` eight times at start).
  std::unique_ptr<eval::CompilePool> pool;
};

// The modules of a compile outcome as Redis artifacts: {source_key, module_name, artifact, so_name}.
nlohmann::json upload_modules(RedisQueue& q, const CompileOutcome& co) {
  nlohmann::json mods = nlohmann::json::array();
  for (const auto& m : co.modules) {
    std::string bytes = read_file(m.so_path);
    std::string digest = sha256_hex(bytes);
    if (!q.get_artifact(digest)) q.put_artifact(digest, bytes);
    mods.push_back({{"source_key", m.source_key},
                    {"module_name", m.module_name},
                    {"artifact", digest},
                    {"so_name", fs::path(m.so_path).filename().string()}});
  }
  return mods;
}

// A final verdict: reward and feedback, end-to-end time, stored once.
void store_result(RedisQueue& q, const Delivery& d, const Job& job, EvalResult& r) {
  eval::finalize_result(r, job.config);
  r.finished_at = unix_now();
  r.wall_s = r.finished_at - job.submitted_at;  // submission to result, queueing included
  q.finish(d, result_row(job, r), false);
}

void handle_compile(Shared& sh, RedisQueue& q, eval::CompilePool& pool, const Delivery& d) {
  Job job = parse_job(d, sh.opts.cache_dir);
  eval::Candidate cand = to_candidate(job);
  eval::PreparedCandidate prep = eval::prepare_candidate(cand, job.config, false);
  EvalResult& r = prep.result;
  if (prep.done) {
    store_result(q, d, job, r);
    return;
  }
  nlohmann::json compiled = {{"modules", nlohmann::json::array()},
                             {"compile_path", r.compile_path},
                             {"compile_s", 0.0},
                             {"compile_cached", false}};
  if (prep.compile) {
    // Through the pool: identical sources share one build, and a job waiting on another's
    // build holds a reader slot, not one of the pool's build threads.
    CompileOutcome co = pool.submit(*prep.compile).get();
    if (co.status == CompileOutcome::Status::kInfraError)
      throw Error("compile infrastructure: " + co.error);  // not the candidate's fault: retried
    if (!eval::apply_compile(r, co, job.config)) {
      store_result(q, d, job, r);
      return;
    }
    compiled["modules"] = upload_modules(q, co);
    compiled["compile_path"] = r.compile_path;  // apply_compile may have named the shim tier
    compiled["compile_s"] = co.seconds;
    compiled["compile_cached"] = co.cached;
  }
  q.forward_to_gpu(d, compiled);
}

void handle_gpu(Shared& sh, RedisQueue& q, eval::GpuRunner& runner, const Delivery& d) {
  Job job = parse_job(d, sh.opts.cache_dir);
  eval::Candidate cand = to_candidate(job);
  // Static rules were checked by the compile worker; extraction is repeated (cheap, and
  // deterministic) to recover the code and its format.
  eval::PreparedCandidate prep = eval::prepare_candidate(cand, job.config, true);
  EvalResult& r = prep.result;
  if (!prep.done) {
    CompileOutcome co;
    co.status = CompileOutcome::Status::kOk;
    const nlohmann::json& c = d.compiled;
    MC_CHECK(c.is_object() && c.contains("modules"), "GPU job without its compile record");
    for (const auto& m : c["modules"]) {
      std::string digest = m.at("artifact").get<std::string>();
      fs::path so = fs::path(sh.opts.cache_dir) / "artifacts" / digest /
                    fs::path(m.at("so_name").get<std::string>()).filename();
      if (!fs::exists(so)) {
        auto bytes = q.get_artifact(digest);
        MC_CHECK(bytes, "compiled module ", digest.substr(0, 12), " is missing from Redis");
        MC_CHECK(sha256_hex(*bytes) == digest, "compiled module ", digest.substr(0, 12),
                 " is corrupt");
        fs::create_directories(so.parent_path());
        write_file_atomic(so, *bytes);
      }
      co.modules.push_back({m.at("source_key").get<std::string>(),
                            m.at("module_name").get<std::string>(), so.string()});
    }
    co.seconds = c.value("compile_s", 0.0);
    co.cached = c.value("compile_cached", false);
    r.compile_path = c.value("compile_path", std::string("pool"));
    r.compile_s = co.seconds;
    r.compile_cached = co.cached;
    r.compiled = r.compile_path != "runtime";
    const bool alone = c.value("alone", false);
    if (runner.execute(cand, prep, co, job.config, r, alone) == eval::GpuRunner::Judged::kPreempted) {
      // Preempted beside other lanes: judged again alone, after the jobs queued meanwhile.
      q.requeue_alone(d, "GPU " + std::to_string(runner.gpu()) + ": preempted beside other lanes");
      return;
    }
    if (r.is_infra()) throw Error("GPU " + std::to_string(runner.gpu()) + ": " + r.infra_error);
  }
  store_result(q, d, job, r);
}

// One loop per compile slot or GPU.
void work_loop(Shared& sh, QueueStage stage, int slot) {
  Redis redis(parse_redis_url(sh.opts.redis_url));
  RedisQueue q(redis, sh.opts.queue);
  std::unique_ptr<eval::GpuRunner> runner;
  const int lanes = eval::default_lanes(sh.opts.device, sh.opts.lanes);
  auto make_runner = [&] {  // GPU slots: lane (slot % lanes) of GPU (slot / lanes)
    runner = std::make_unique<eval::GpuRunner>(eval::judge_options(
        sh.tc, sh.opts.device, sh.opts.gpus.at(static_cast<size_t>(slot / lanes)), sh.opts.cache_dir,
        (fs::path(sh.opts.cache_dir) / "scratch").string(),
        sh.opts.sandbox ? sh.opts.sandbox_exe : "", 0, slot % lanes, lanes));
  };
  if (stage == QueueStage::kGpu) {
    make_runner();
    runner->warm_up();  // the judge is ready before the first job arrives
  }
  while (!sh.stop.load()) {
    std::optional<Delivery> d;
    try {
      d = q.next(stage, sh.name, sh.opts.block_ms);
    } catch (const std::exception& e) {
      fmt::print(stderr, "worker {}: queue: {}\n", sh.name, e.what());
      std::this_thread::sleep_for(std::chrono::seconds(1));
      continue;
    }
    if (!d) continue;
    sh.inflight.add(stage, d->entry_id);
    ++sh.busy;
    try {
      if (d->job.is_null() || !d->job.is_object()) {
        q.dead_letter(*d, "unreadable job entry");
      } else if (stage == QueueStage::kCompile) {
        handle_compile(sh, q, *sh.pool, *d);
      } else {
        handle_gpu(sh, q, *runner, *d);
      }
      ++sh.completed;
    } catch (const BadJob& e) {
      try {
        q.dead_letter(*d, std::string("bad job: ") + e.what());
      } catch (const std::exception& e2) {
        fmt::print(stderr, "worker {}: {}\n", sh.name, e2.what());
      }
    } catch (const std::exception& e) {
      // Infrastructure: left unacknowledged, so it is delivered again after claim_idle_ms.
      std::string what = e.what();
      try {
        {
          q.note(d->job_id, std::string("infra failure on ") + sh.name + ": " + what);
          fmt::print(stderr, "worker {}: job {}: {}\n", sh.name, d->job_id, what);
          if (stage == QueueStage::kGpu) {
            make_runner();  // a fresh judge next time
            std::this_thread::sleep_for(std::chrono::seconds(2));
          }
        }
      } catch (const std::exception& e2) {
        fmt::print(stderr, "worker {}: {}\n", sh.name, e2.what());
      }
    }
    --sh.busy;
    sh.inflight.remove(d->entry_id);
  }
}

void heartbeat_loop(Shared& sh, int slots) {
  std::unique_ptr<Redis> redis;
  auto started = unix_now();
  while (!sh.stop.load()) {
    try {
      if (!redis) redis = std::make_unique<Redis>(parse_redis_url(sh.opts.redis_url));
      RedisQueue q(*redis, sh.opts.queue);
      for (const auto& [entry, stage] : sh.inflight.snapshot()) q.touch(stage, sh.name, entry);
      q.heartbeat(sh.name, {{"role", sh.opts.role},
                            {"slots", slots},
                            {"busy", sh.busy.load()},
                            {"completed", sh.completed.load()},
                            {"pid", getpid()},
                            {"started", started}});
    } catch (const std::exception& e) {
      fmt::print(stderr, "worker {}: heartbeat: {}\n", sh.name, e.what());
      redis.reset();
    }
    for (int i = 0; i < 10 && !sh.stop.load(); ++i)
      std::this_thread::sleep_for(std::chrono::duration<double>(sh.opts.heartbeat_s / 10));
  }
}

}  // namespace

long long run_worker(const WorkerOptions& opts_in, const std::atomic<bool>& stop) {
  MC_CHECK(opts_in.role == "compile" || opts_in.role == "gpu", "--role must be compile or gpu, got '",
           opts_in.role, "'");
  MC_CHECK(!opts_in.cache_dir.empty(), "worker needs a cache folder");
  WorkerOptions opts = opts_in;
  opts.cache_dir = fs::absolute(opts.cache_dir).string();  // candidates run in their scratch folders
  MC_CHECK(opts.heartbeat_s > 0 && opts.heartbeat_s * 1000 < opts.queue.claim_idle_ms,
           "heartbeat interval must be shorter than the claim idle time");
  Shared sh{opts, opts.name.empty() ? default_worker_name(opts.role) : opts.name, stop, {}, {}, {}, {}, {}};
  sh.tc = eval::discover_toolchain(opts.cuda_arch);
  {
    Redis redis(parse_redis_url(opts.redis_url));
    RedisQueue(redis, opts.queue).ensure_groups();
  }
  QueueStage stage = opts.role == "compile" ? QueueStage::kCompile : QueueStage::kGpu;
  if (stage == QueueStage::kCompile) {
    eval::CompilePoolOptions po;
    po.workers = opts.threads;  // distinct builds at once (0: cores/2, two compilers each)
    po.cache_dir = opts.cache_dir;
    sh.pool = std::make_unique<eval::CompilePool>(sh.tc, po);
    sh.pool->start_preparing();
  }
  // Compile readers: twice the pool's build threads, so jobs waiting on a shared build never
  // keep a distinct source from starting (the H100 run saw that cost 0.14x of throughput).
  int slots = stage == QueueStage::kGpu
                  ? static_cast<int>(opts.gpus.size()) * eval::default_lanes(opts.device, opts.lanes)
                  : 2 * static_cast<int>(sh.pool->load().workers);
  fmt::print(stderr, "worker {}: role {}, {} slot(s), redis {}\n", sh.name, opts.role, slots,
             opts.redis_url);
  std::thread hb([&] { heartbeat_loop(sh, slots); });
  std::vector<std::thread> loops;
  for (int i = 0; i < slots; ++i)
    loops.emplace_back([&, i] {
      while (!stop.load()) {
        try {
          work_loop(sh, stage, i);
          return;
        } catch (const std::exception& e) {  // e.g. Redis unreachable for longer than a retry
          fmt::print(stderr, "worker {}: {}; starting over\n", sh.name, e.what());
          std::this_thread::sleep_for(std::chrono::seconds(1));
        }
      }
    });
  for (auto& t : loops) t.join();
  hb.join();
  return sh.completed.load();
}

}  // namespace mc::serve
