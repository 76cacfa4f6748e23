#include "serve/backend.h"

#include <fmt/format.h>

#include <chrono>

#include "common/fs.h"

namespace mc::serve {

using Clock = std::chrono::steady_clock;

// ---- Waiters --------------------------------------------------------------------------------

void Waiters::notify(const std::string& id) {
  std::lock_guard lk(mu_);
  auto it = slots_.find(id);
  if (it == slots_.end()) return;
  it->second->fired = true;
  it->second->cv.notify_all();
  slots_.erase(it);
}

bool Waiters::wait(const std::string& id, double timeout_s, const std::function<bool()>& check) {
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(std::max(0.0, timeout_s)));
  while (true) {
    if (check()) return true;
    if (Clock::now() >= deadline) return false;
    std::unique_lock lk(mu_);
    auto& slot = slots_[id];
    if (!slot) slot = std::make_shared<Slot>();
    auto mine = slot;
    mine->cv.wait_until(lk, std::min(deadline, Clock::now() + std::chrono::milliseconds(200)),
                        [&] { return mine->fired; });
  }
}

JobStatus Backend::wait(const std::string& id, double timeout_s) {
  JobStatus st;
  waiters_.wait(id, timeout_s, [&] {
    st = status(id);
    return st.state != JobStatus::State::kQueued;
  });
  return st;
}

// ---- LocalBackend ---------------------------------------------------------------------------

LocalBackend::LocalBackend(std::unique_ptr<eval::Evaluator> ev, std::string cache_dir,
                           size_t max_queue, Metrics& metrics)
    : ev_(std::move(ev)), cache_dir_(std::move(cache_dir)), max_queue_(max_queue),
      metrics_(metrics) {
  fs::create_directories(fs::path(cache_dir_) / "results");
}

LocalBackend::~LocalBackend() { ev_.reset(); }  // finishes queued jobs before members go

std::string LocalBackend::result_path(const std::string& id) const {
  return (fs::path(cache_dir_) / "results" / id.substr(0, 2) / (id + ".json")).string();
}

std::optional<nlohmann::json> LocalBackend::stored_result(const std::string& id) const {
  std::string path = result_path(id);
  if (!fs::exists(path)) return std::nullopt;
  auto j = nlohmann::json::parse(read_file(path), nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

Admission LocalBackend::submit(const Job& job) {
  {
    std::lock_guard lk(mu_);
    auto it = entries_.find(job.id);
    if (it != entries_.end() &&
        (!it->second.done || it->second.result.value("verdict", "") != "infra_error"))
      return Admission::kKnown;
    if (it == entries_.end() && stored_result(job.id)) return Admission::kKnown;
    if (in_flight_ >= max_queue_) return Admission::kFull;
    entries_[job.id] = Entry{};
    ++in_flight_;
  }
  auto started = Clock::now();
  ev_->submit(to_candidate(job), [this, job, started](eval::EvalResult r) {
    nlohmann::json row = result_row(job, r);
    // Infra failures are not the candidate's result: kept in memory only, so a resubmission
    // runs again (and a restart forgets them).
    if (!r.is_infra()) {
      try {
        fs::path p = result_path(job.id);
        fs::create_directories(p.parent_path());
        write_file_atomic(p, row.dump());
      } catch (const std::exception& e) {
        fmt::print(stderr, "serve: cannot store result {}: {}\n", job.id, e.what());
      }
    }
    {
      std::lock_guard lk(mu_);
      entries_[job.id] = Entry{true, row};
      --in_flight_;
      done_order_.push_back(job.id);
      while (done_order_.size() > 20000) {
        auto old = entries_.find(done_order_.front());
        if (old != entries_.end() && old->second.done) entries_.erase(old);
        done_order_.pop_front();
      }
    }
    metrics_.job_done(row.value("verdict", "?"),
                      std::chrono::duration<double>(Clock::now() - started).count());
    waiters_.notify(job.id);
  });
  return Admission::kQueued;
}

JobStatus LocalBackend::status(const std::string& id) {
  {
    std::lock_guard lk(mu_);
    auto it = entries_.find(id);
    if (it != entries_.end())
      return it->second.done ? JobStatus{JobStatus::State::kDone, it->second.result}
                             : JobStatus{JobStatus::State::kQueued, {}};
  }
  if (auto r = stored_result(id)) return {JobStatus::State::kDone, *r};
  return {};
}

nlohmann::json LocalBackend::health() {
  auto s = ev_->stats();
  return {{"ok", true}, {"gpus", s.gpus}, {"compile_workers", s.compile_workers}};
}

std::map<std::string, double> LocalBackend::gauges() {
  auto s = ev_->stats();
  size_t in_flight;
  {
    std::lock_guard lk(mu_);
    in_flight = in_flight_;
  }
  return {{"mooreeval_queue_depth", static_cast<double>(in_flight)},
          {"mooreeval_queue_capacity", static_cast<double>(max_queue_)},
          {"mooreeval_jobs_compiling", static_cast<double>(s.compiling)},
          {"mooreeval_jobs_waiting_gpu", static_cast<double>(s.ready)},
          {"mooreeval_jobs_executing", static_cast<double>(s.executing)},
          {"mooreeval_compile_pool_utilization",
           s.compile_workers ? static_cast<double>(s.compile_busy) / s.compile_workers : 0.0},
          {"mooreeval_gpu_pool_utilization",
           s.judges ? static_cast<double>(s.executing) / s.judges : 0.0}};  // of every lane, not of every GPU
}

// ---- RedisBackend ---------------------------------------------------------------------------

RedisBackend::RedisBackend(const std::string& redis_url, QueueOptions qopts, Metrics& metrics)
    : pool_(parse_redis_url(redis_url)), qopts_(std::move(qopts)), metrics_(metrics) {
  {
    auto r = pool_.acquire();
    RedisQueue(*r, qopts_).ensure_groups();
  }
  follower_ = std::thread([this] { follow_done_stream(); });
}

RedisBackend::~RedisBackend() {
  stop_ = true;
  if (follower_.joinable()) follower_.join();
}

// Wakes waiters and counts verdicts as results are stored, by whichever worker.
void RedisBackend::follow_done_stream() {
  std::string last = "$";
  std::unique_ptr<Redis> redis;
  while (!stop_) {
    try {
      if (!redis) redis = std::make_unique<Redis>(pool_.url());
      RedisQueue q(*redis, qopts_);
      if (last == "$") {  // resolve "$" once, so a reconnect does not skip entries
        auto info = redis->command({"XREVRANGE", q.key("stream:done"), "+", "-", "COUNT", "1"});
        last = info.elements.empty() ? "0-0" : info.elements[0].elements[0].str;
      }
      auto r = redis->blocking({"XREAD", "COUNT", "512", "BLOCK", "500", "STREAMS",
                                q.key("stream:done"), last},
                               500);
      if (!r.is_array() || r.elements.empty()) continue;
      for (const auto& e : r.elements[0].elements.at(1).elements) {
        last = e.elements.at(0).str;
        std::string id;
        const auto& f = e.elements.at(1).elements;
        for (size_t i = 0; i + 1 < f.size(); i += 2)
          if (f[i].str == "id") id = f[i + 1].str;
        double latency = -1;
        {
          std::lock_guard lk(mu_);
          auto it = submitted_at_.find(id);
          if (it != submitted_at_.end()) {
            latency = unix_now() - it->second;
            submitted_at_.erase(it);
          }
        }
        if (latency >= 0) {  // jobs of this server: count their verdicts
          auto res = q.result(id);
          metrics_.job_done(res ? res->value("verdict", "?") : "?", latency);
        }
        waiters_.notify(id);
      }
    } catch (const std::exception& e) {
      fmt::print(stderr, "serve: following results: {}\n", e.what());
      redis.reset();
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }
}

Admission RedisBackend::submit(const Job& job) {
  auto r = pool_.acquire();
  RedisQueue q(*r, qopts_);
  {
    std::lock_guard lk(mu_);
    submitted_at_.emplace(job.id, job.submitted_at);
  }
  switch (q.enqueue(job.id, job_to_json(job))) {
    case RedisQueue::Enqueued::kQueued:
      return Admission::kQueued;
    case RedisQueue::Enqueued::kFull: {
      std::lock_guard lk(mu_);
      submitted_at_.erase(job.id);
      return Admission::kFull;
    }
    case RedisQueue::Enqueued::kDone: {
      std::lock_guard lk(mu_);
      submitted_at_.erase(job.id);
      return Admission::kKnown;
    }
    default:
      return Admission::kKnown;  // in flight (perhaps from another server): keep its clock
  }
}

JobStatus RedisBackend::status(const std::string& id) {
  auto r = pool_.acquire();
  RedisQueue q(*r, qopts_);
  // Job key first: a result is stored in the same script that deletes the job key, so "not in
  // flight" then "result" never misses a job that finishes between the two reads.
  if (q.in_flight(id)) return {JobStatus::State::kQueued, {}};
  if (auto res = q.result(id)) return {JobStatus::State::kDone, *res};
  return {};
}

namespace {

// Workers whose last heartbeat is recent enough that their jobs are not reclaimed, by role.
struct Fleet {
  double alive = 0, slots = 0, busy = 0;
};
std::map<std::string, Fleet> live_workers(RedisQueue& q) {
  std::map<std::string, Fleet> out = {{"compile", {}}, {"gpu", {}}};
  double now = unix_now();
  nlohmann::json workers = q.workers();  // named: items() must not outlive it
  for (auto& [name, w] : workers.items()) {
    if (!w.is_object() || now - w.value("ts", 0.0) > q.options().claim_idle_ms / 1000.0) continue;
    Fleet& f = out[w.value("role", "") == "gpu" ? "gpu" : "compile"];
    f.alive += 1;
    f.slots += w.value("slots", 0);
    f.busy += w.value("busy", 0);
  }
  return out;
}

}  // namespace

nlohmann::json RedisBackend::health() {
  try {
    auto r = pool_.acquire();
    RedisQueue q(*r, qopts_);
    auto fleet = live_workers(q);
    return {{"ok", true}, {"redis", "ok"}, {"compile_workers", static_cast<int>(fleet["compile"].alive)},
            {"gpu_workers", static_cast<int>(fleet["gpu"].alive)}, {"queue_depth", q.depth()}};
  } catch (const std::exception& e) {
    return {{"ok", false}, {"redis", e.what()}};
  }
}

std::map<std::string, double> RedisBackend::gauges() {
  std::map<std::string, double> g;
  try {
    auto r = pool_.acquire();
    RedisQueue q(*r, qopts_);
    g["mooreeval_queue_depth"] = static_cast<double>(q.depth());
    g["mooreeval_queue_capacity"] = static_cast<double>(qopts_.max_depth);
    for (auto& [role, f] : live_workers(q)) {
      g["mooreeval_" + role + "_workers_alive"] = f.alive;
      g["mooreeval_" + role + "_pool_utilization"] = f.slots ? f.busy / f.slots : 0;
    }
    g["mooreeval_redis_up"] = 1;
  } catch (const std::exception&) {
    g["mooreeval_redis_up"] = 0;
  }
  return g;
}

}  // namespace mc::serve
