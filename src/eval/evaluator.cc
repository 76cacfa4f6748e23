#include "eval/evaluator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <unistd.h>

#include "common/clock.h"
#include "common/check.h"
#include "common/env.h"
#include "common/fs.h"
#include "common/hash.h"
#include "common/progress.h"
#include "eval/executor.h"
#include "eval/pipeline.h"

namespace mc::eval {
namespace {

using Clock = std::chrono::steady_clock;

struct Item {
  Candidate cand;
  PreparedCandidate prep;
  std::shared_future<CompileOutcome> compiled;
  std::function<void(EvalResult)> done;
  Clock::time_point start;
  bool exclusive = false;  // preempted once: judged again with the GPU to itself
  Clock::time_point requeued;
  int timing_deferrals = 0;  // given back while timing was held (EvaluatorOptions::defer_timing)
  nlohmann::json passed_trials;  // what its trials established then: timed later without repeating them
  bool compile_ready() const {
    return !prep.compile ||
           compiled.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }
};

}  // namespace

struct Evaluator::Impl {
  EvalConfig cfg;
  EvaluatorOptions opts;
  Toolchain tc;
  std::unique_ptr<CompilePool> pool;

  // Candidates past stage 2, in submission order; GPU threads take the first whose compile is
  // finished. Compile completion is polled (20 ms): a compile takes seconds.
  mutable std::mutex mu;
  std::condition_variable cv;
  std::list<Item> pending;
  // Submitted, before stages 1-2 (prepare_candidate): the preparing thread takes them in order.
  std::list<Item> to_prepare;
  std::once_flag prep_started;
  std::thread prep_thread;
  size_t executing = 0;
  bool stop = false;
  std::string gate;  // the timing gate file ("" : none)
  bool timing_held = false;  // hold_timing(true) and not yet released; under mu
  // A candidate given back this often while timing was held waits for the release in its judge,
  // as without defer_timing: a trainer whose gate opens only for instants cannot make it loop.
  static constexpr int kMaxTimingDeferrals = 3;
  std::once_flag started;
  std::vector<std::thread> gpu_threads;

  ExecutorOptions executor_options(int gpu, int lane = 0) const {
    auto e = judge_options(tc, opts.device, gpu, opts.cache_dir, opts.scratch_dir, opts.sandbox ? opts.sandbox_exe : "",
                           opts.spares, lane, default_lanes(opts.device, opts.lanes));
    e.timing_gate = gate;
    e.standby = lane > 0 && opts.stagger_lanes;
    e.cpu_threads = default_judge_threads(opts.device, static_cast<int>(pool->load().workers),
                                          static_cast<int>(opts.gpus.size()) * e.lanes);
    return e;
  }

  void finish(Item& it) {
    EvalResult& r = it.prep.result;
    finalize_result(r, cfg);
    r.wall_s = std::chrono::duration<double>(Clock::now() - it.start).count();
    r.finished_at = unix_now();
    it.done(std::move(r));
  }

  // A preempted candidate is judged again alone once nothing else waits or runs (it holds the
  // GPU to itself, and may hang again for its whole limit), or after kAloneAfter at the latest,
  // so that a steady stream of new candidates cannot starve it.
  static constexpr std::chrono::seconds kAloneAfter{60};

  bool may_take(const Item& it) const {
    if (!it.compile_ready()) return false;
    if (it.timing_deferrals > 0 && timing_held) return false;  // judged again once timing is released
    if (!it.exclusive) return true;
    if (Clock::now() - it.requeued > kAloneAfter) return true;
    if (executing > 0) return false;
    for (const auto& o : pending)
      if (!o.exclusive) return false;
    return true;
  }

  // Standby lanes. Each candidate process is fresh and creates its own CUDA context, and on the
  // H100 contexts created beside other processes' work slowed that work down: with four lanes
  // judging the small set's tiny kernels, correctness trials took 0.4-1 s against 0.04 s with
  // one lane alone, and the set took longer than one lane took per candidate. So a GPU's later
  // lanes start their judges (once the first is ready) but lane k takes a candidate only while
  // every lane before it holds one it took more than opts.standby_after_s ago: a hanging or
  // slow candidate, or a problem large enough that correctness trials side by side pay.
  std::map<std::pair<int, int>, Clock::time_point> busy_since;  // (gpu, lane) -> took its item at
  std::map<std::pair<int, int>, std::string> last_problem;  // (gpu, lane) -> key it judged last

  bool may_work(int gpu, int lane) const {  // under mu
    if (!opts.stagger_lanes) return true;
    const auto now = Clock::now();
    for (int j = 0; j < lane; ++j) {
      auto b = busy_since.find({gpu, j});
      if (b == busy_since.end() || now - b->second < std::chrono::duration<double>(opts.standby_after_s))
        return false;
    }
    return true;
  }

  std::optional<Item> take_ready(int gpu, int lane) {
    std::unique_lock lk(mu);
    while (true) {
      // The first takeable candidate of the lowest priority (Candidate::priority); of those, one
      // for the problem this lane judged last: its judge keeps that problem's trial references
      // (python/musacoder_harness/trial_cache.py), so a problem's answers are judged together.
      auto& last = last_problem[{gpu, lane}];
      auto same = [&](const Item& i) { return i.cand.problem && i.cand.problem->key == last; };
      auto best = pending.end();
      if (may_work(gpu, lane))
        for (auto it = pending.begin(); it != pending.end(); ++it) {
          if (!may_take(*it)) continue;
          if (best == pending.end() || it->cand.priority < best->cand.priority ||
              (it->cand.priority == best->cand.priority && same(*it) && !same(*best)))
            best = it;
        }
      if (best != pending.end()) {
        if (best->cand.problem) last = best->cand.problem->key;
        Item item = std::move(*best);
        pending.erase(best);
        ++executing;
        busy_since[{gpu, lane}] = Clock::now();
        if (lane > 0 && engaged.insert({gpu, lane}).second) cv.notify_all();  // the next lane may start
        return item;
      }
      if (stop) return std::nullopt;
      cv.wait_for(lk, std::chrono::milliseconds(20));
    }
  }

  // Every judge imports torch and its zygote does too, then each spare creates a CUDA context,
  // beside the compiles: on the H100 a cold `musacoder eval` with four lanes had its first
  // judge ready at 7 s, against 3.4 s for one judge. So the first lane starts at once and
  // judges meanwhile, and the others start in a chain, each once it may be needed:
  // - opts.early_standby standby lanes start with the first (a standby judge starts no
  //   candidate process, so it costs the first one little: two imports of torch), so that one
  //   is ready to step in when the first candidate hangs. Started only once the first was
  //   ready, the standby took 5 s more to be ready, and a hang cost the others +6.0 s against
  //   +3.6 s started with the first (H100).
  // - Lane k after those starts once lane k-1 has taken a candidate: it may judge only while
  //   every lane before it holds one (may_work). Started as soon as the first was ready, two
  //   lanes that never judged slowed the first one's judging of the small set's tiny kernels
  //   (cold 13.7 s against 12.4 s with one judge, H100).
  //   The first lane counts once its judge is ready (or after kFirstLaneWait, if it never is).
  static constexpr std::chrono::seconds kFirstLaneWait{300};
  std::set<std::pair<int, int>> engaged;  // (gpu, lane): the first lane ready, a later one has taken a candidate; under mu

  void first_lane_ready(int gpu) {
    {
      std::lock_guard lk(mu);
      engaged.insert({gpu, 0});
    }
    cv.notify_all();
  }

  // Waits until this lane's judge may start, and only while candidates are queued: a run of
  // one candidate (taken by the first lane) ends without waiting for judges nobody needed.
  // False: the run ended with nothing left for this lane.
  bool await_start(int gpu, int lane) {
    std::unique_lock lk(mu);
    if (lane > opts.early_standby) {
      if (lane == 1) {
        cv.wait_for(lk, kFirstLaneWait, [&] { return stop || engaged.count({gpu, 0}) > 0; });
        lk.unlock();
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the first lane takes its first
        lk.lock();
      } else {
        cv.wait(lk, [&] { return stop || engaged.count({gpu, lane - 1}) > 0; });
        if (stop) return false;
      }
    }
    while (pending.size() < (lane > opts.early_standby ? 1u : 2u)) {
      if (stop) return false;
      cv.wait_for(lk, std::chrono::milliseconds(20));
    }
    return true;
  }

  void gpu_loop(int gpu, int lane) {
    GpuRunner runner(executor_options(gpu, lane));
    // The judge starts while the first candidates compile (a compile-only job never uses it).
    if (!cfg.compile_only) {
      if (lane > 0 && opts.stagger_lanes && !await_start(gpu, lane)) return;
      runner.warm_up();
      if (lane == 0) first_lane_ready(gpu);
    }
    while (auto item = take_ready(gpu, lane)) {
      Item& it = *item;
      EvalResult& r = it.prep.result;
      CompileOutcome co;
      bool go_on = true;
      if (it.prep.compile) {
        try {
          co = it.compiled.get();
        } catch (const std::exception& e) {
          co.status = CompileOutcome::Status::kInfraError;
          co.error = e.what();
        }
        go_on = apply_compile(r, co, cfg);
      }
      const bool defer = opts.defer_timing && !gate.empty() && it.timing_deferrals < kMaxTimingDeferrals;
      const auto judged = go_on ? runner.execute(it.cand, it.prep, co, cfg, r, it.exclusive, defer, &it.passed_trials)
                                : GpuRunner::Judged::kDone;
      if (judged != GpuRunner::Judged::kDone) {
        // Preempted: back to the queue, judged again alone once the others have run. Timing
        // deferred: loaded again and timed once timing is released (may_take), its trials not
        // repeated (it.passed_trials).
        if (judged == GpuRunner::Judged::kPreempted) {
          it.exclusive = true;
          it.requeued = Clock::now();
        } else {
          ++it.timing_deferrals;
        }
        std::lock_guard lk(mu);
        pending.push_back(std::move(it));
        --executing;
        busy_since.erase({gpu, lane});
        continue;
      }
      if (it.timing_deferrals > 0) r.judge_details["timing_deferred"] = it.timing_deferrals;
      finish(it);
      std::lock_guard lk(mu);
      --executing;
      busy_since.erase({gpu, lane});
    }
  }

  // Stages 1-2 for each submitted candidate, in submission order; a candidate they settle
  // (no code, a static violation) is finished here, the others go to the compile pool and the
  // judges' queue. Everything submitted before the evaluator stops is prepared.
  void prepare_loop() {
    for (;;) {
      Item it;
      {
        std::unique_lock lk(mu);
        cv.wait(lk, [&] { return stop || !to_prepare.empty(); });
        if (to_prepare.empty()) return;  // stopped, nothing left
        it = std::move(to_prepare.front());
        to_prepare.pop_front();
      }
      it.prep = prepare_candidate(it.cand, cfg, opts.skip_static);
      if (it.prep.done) {
        finish(it);
        continue;
      }
      if (it.prep.compile) it.compiled = pool->submit(*it.prep.compile, it.cand.priority);
      std::call_once(started, [&] { start_gpu_threads(); });
      {
        std::lock_guard lk(mu);
        pending.push_back(std::move(it));
      }
      cv.notify_all();
    }
  }

  void start_gpu_threads() {
    const int lanes = default_lanes(opts.device, opts.lanes);
    for (int g : opts.gpus)
      for (int lane = 0; lane < lanes; ++lane) gpu_threads.emplace_back([this, g, lane] { gpu_loop(g, lane); });
  }
};

Evaluator::Evaluator(EvalConfig cfg, EvaluatorOptions opts) : impl_(std::make_unique<Impl>()) {
  validate(cfg);
  impl_->cfg = std::move(cfg);
  impl_->opts = std::move(opts);
  MC_CHECK(!impl_->opts.cache_dir.empty(), "evaluator needs a cache folder");
  MC_CHECK(!impl_->opts.gpus.empty(), "evaluator needs at least one GPU entry");
  // Candidates run with their scratch folder as working directory: every path they are handed
  // (solution files, artifacts) must be absolute. A relative --cache-dir made every honest
  // candidate a load_error.
  impl_->opts.cache_dir = fs::absolute(impl_->opts.cache_dir).string();
  if (impl_->opts.scratch_dir.empty())
    impl_->opts.scratch_dir = (fs::path(impl_->opts.cache_dir) / "scratch").string();
  impl_->opts.scratch_dir = fs::absolute(impl_->opts.scratch_dir).string();
  if (const char* v = std::getenv("MUSACODER_STAGGER_LANES"); v && std::string(v) == "0")
    impl_->opts.stagger_lanes = false;
  if (auto n = env_count("MUSACODER_EARLY_STANDBY", 0, "a count of lanes")) impl_->opts.early_standby = static_cast<int>(*n);
  if (impl_->opts.timing_gate) {
    // One gate per evaluator (several runs may share a cache folder).
    fs::create_directories(impl_->opts.scratch_dir);
    impl_->gate = (fs::path(impl_->opts.scratch_dir) / ("timing-gate-" + std::to_string(::getpid()) + "-" +
                                                        std::to_string(reinterpret_cast<uintptr_t>(impl_.get()))))
                      .string();
    fs::remove(impl_->gate);
  }
  impl_->tc = discover_toolchain(impl_->opts.cuda_arch);
  CompilePoolOptions po;
  po.workers = impl_->opts.compile_workers;
  po.cache_dir = impl_->opts.cache_dir;
  po.timeout_s = impl_->cfg.compile_timeout_s;
  impl_->pool = std::make_unique<CompilePool>(impl_->tc, po);
  if (impl_->opts.prepare_toolchain) impl_->pool->start_preparing();
}

Evaluator::~Evaluator() {
  {
    std::lock_guard lk(impl_->mu);
    impl_->stop = true;  // the preparing and GPU threads finish what is queued, then leave
  }
  impl_->cv.notify_all();
  if (impl_->prep_thread.joinable()) impl_->prep_thread.join();
  for (auto& t : impl_->gpu_threads) t.join();
  if (!impl_->gate.empty()) fs::remove(impl_->gate);
}

const EvalConfig& Evaluator::config() const { return impl_->cfg; }

void Evaluator::submit(Candidate c, std::function<void(EvalResult)> done) {
  Impl& m = *impl_;
  Item it;
  it.cand = std::move(c);
  it.done = std::move(done);
  it.start = Clock::now();
  std::call_once(m.prep_started, [&] { m.prep_thread = std::thread([&m] { m.prepare_loop(); }); });
  {
    std::lock_guard lk(m.mu);
    m.to_prepare.push_back(std::move(it));
  }
  m.cv.notify_all();
}

void Evaluator::hold_timing(bool hold) {
  const std::string& gate = impl_->gate;
  MC_CHECK(!gate.empty(), "hold_timing needs an evaluator made with timing_gate");
  {
    std::lock_guard lk(impl_->mu);
    impl_->timing_held = hold;
  }
  if (!hold) {
    fs::remove(gate);
    impl_->cv.notify_all();  // candidates given back while it was held may be taken now
    return;
  }
  { std::ofstream(gate) << "held\n"; }
  // Wait for the judges that were already timing (their markers sit beside the gate).
  const fs::path dir = fs::path(gate).parent_path();
  const std::string prefix = fs::path(gate).filename().string() + ".timing.";
  for (;;) {
    bool busy = false;
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string n = e.path().filename().string();
      if (n.rfind(prefix, 0) != 0) continue;
      // A marker of a judge that died mid-timing is stale: its pid is gone.
      const std::string pid = n.substr(prefix.size());
      if (!pid.empty() && fs::exists("/proc/" + pid)) busy = true;
      else fs::remove(e.path());
    }
    if (!busy) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

Evaluator::Stats Evaluator::stats() const {
  const Impl& m = *impl_;
  Stats s;
  {
    std::lock_guard lk(m.mu);
    for (const auto& it : m.pending) {
      (it.compile_ready() ? s.ready : s.compiling)++;
      if (it.timing_deferrals > 0) ++s.deferred;
    }
    s.compiling += m.to_prepare.size();
    s.executing = m.executing;
  }
  s.gpus = m.opts.gpus.size();
  s.judges = s.gpus * static_cast<size_t>(default_lanes(m.opts.device, m.opts.lanes));
  auto load = m.pool->load();
  s.compile_workers = load.workers;
  s.compile_busy = load.busy;
  return s;
}

std::vector<EvalResult> Evaluator::run(const std::vector<Candidate>& candidates,
                                       const std::function<void(const EvalResult&)>& on_result) {
  std::vector<EvalResult> results(candidates.size());
  std::mutex out_mu;
  std::condition_variable all_done;
  size_t remaining = candidates.size();
  ProgressBar bar("eval", candidates.size(), impl_->opts.progress);
  for (size_t i = 0; i < candidates.size(); ++i) {
    submit(candidates[i], [&, i](EvalResult r) {
      std::lock_guard lk(out_mu);
      results[i] = std::move(r);
      if (on_result) on_result(results[i]);
      bar.advance(1, results[i].problem_key);
      if (--remaining == 0) all_done.notify_all();
    });
  }
  std::unique_lock lk(out_mu);
  all_done.wait(lk, [&] { return remaining == 0; });
  return results;
}

std::vector<nlohmann::json> Evaluator::probe(const std::vector<ProblemPtr>& problems, double timing_budget_s,
                                            const std::function<void(size_t)>& on_done) {
  Impl& m = *impl_;
  std::vector<nlohmann::json> out(problems.size());
  std::atomic<size_t> next{0};
  std::mutex done_mu;
  // Timed, a probe has its GPU to itself: one per GPU. Untimed (the CPU, or compile-only
  // synth), probes are independent reference runs: several per device, the host's share of
  // compile workers (default_compile_workers, at most 16), each judge in a scratch folder of
  // its own (probing 1,158 problems one at a time once took a synth run 413 s on 64 cores).
  const int per_device = m.cfg.timing ? 1 : std::clamp(default_compile_workers(), 1, 16);
  auto worker = [&](int gpu, int k) {
    ExecutorOptions eo = m.executor_options(gpu);
    eo.spares = 0;  // probes run no candidates
    if (k > 0) eo.scratch_dir += "-probe" + std::to_string(k);
    Executor exec(eo);
    for (size_t i; (i = next.fetch_add(1)) < problems.size();) {
      nlohmann::json req = {{"op", "probe"},
                            {"problem_path", problems[i]->path},
                            {"seed", m.cfg.seed},
                            {"timing", m.cfg.timing},
                            {"timing_budget_s", timing_budget_s},
                            {"timing_target_rel_err", 0.02},
                            {"timing_input_sets", 2},
                            {"trials", m.cfg.trials},
                            {"atol", m.cfg.effective_atol()},
                            {"rtol", m.cfg.effective_rtol()}};
      try {
        auto reply = exec.call(req, 300);
        out[i] = reply.value("ok", false) ? reply["result"]
                                          : nlohmann::json{{"infra_error", reply.value("infra_error", std::string("?"))}};
      } catch (const std::exception& e) {
        out[i] = {{"infra_error", e.what()}};
      }
      if (on_done) {
        std::lock_guard lk(done_mu);
        on_done(i);
      }
    }
  };
  std::vector<std::thread> threads;
  for (int gpu : m.opts.gpus)
    for (int k = 0; k < std::min<int>(per_device, static_cast<int>(problems.size())); ++k) threads.emplace_back(worker, gpu, k);
  for (auto& t : threads) t.join();
  return out;
}

nlohmann::json Evaluator::baseline(const std::vector<ProblemPtr>& problems, bool with_compile) {
  Impl& m = *impl_;
  Executor exec(m.executor_options(m.opts.gpus.at(0)));
  nlohmann::json eager, compiled, errors = nlohmann::json::object();
  ProgressBar bar("baseline", problems.size(), m.opts.progress);
  std::string hardware;
  for (const auto& p : problems) {
    nlohmann::json req = {{"op", "baseline"},
                          {"problem_path", p->path},
                          {"precision", m.cfg.precision},
                          {"seed", m.cfg.seed},
                          {"timing_budget_s", m.cfg.timing_budget_s},
                          {"timing_target_rel_err", m.cfg.timing_target_rel_err},
                          {"timing_input_sets", m.cfg.timing_input_sets},
                          {"compile", with_compile}};
    std::string level = "level" + std::to_string(p->level > 0 ? p->level : 0);
    std::string file = p->stem + ".py";
    try {
      auto reply = exec.call(req, 600);
      if (!reply.value("ok", false)) {
        errors[p->key] = reply.value("infra_error", std::string("?"));
      } else {
        const auto& res = reply["result"];
        hardware = res.value("gpu", "");
        // KernelBench's schema: milliseconds, per level and file name.
        auto entry = [&](const nlohmann::json& t) {
          return nlohmann::json{{"mean", t.value("mean_us", 0.0) / 1e3},
                                {"std", t.value("std_us", 0.0) / 1e3},
                                {"min", t.value("min_us", 0.0) / 1e3},
                                {"max", t.value("max_us", 0.0) / 1e3},
                                {"median", t.value("median_us", 0.0) / 1e3},
                                {"num_trials", t.value("n", 0)},
                                {"hardware", hardware},
                                {"device", "cuda:" + std::to_string(m.opts.gpus.at(0))}};
        };
        eager[level][file] = entry(res["eager"]);
        if (res.contains("compile")) compiled[level][file] = entry(res["compile"]);
        if (res.contains("compile_error")) errors[p->key] = res["compile_error"];
      }
    } catch (const std::exception& e) {
      errors[p->key] = e.what();
    }
    bar.advance(1, p->key);
  }
  return {{"eager", eager}, {"compile", compiled}, {"errors", errors}, {"hardware", hardware}};
}

}  // namespace mc::eval
