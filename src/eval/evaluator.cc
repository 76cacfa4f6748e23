#include "eval/evaluator.h"

#include <atomic>
#include <chrono>
#include <list>
#include <thread>

#include "common/check.h"
#include "common/fs.h"
#include "common/hash.h"
#include "common/progress.h"
#include "eval/executor.h"
#include "eval/extract.h"
#include "eval/feedback.h"
#include "eval/reward.h"
#include "eval/static_check.h"

namespace mc::eval {
namespace {

using Clock = std::chrono::steady_clock;

struct Item {
  size_t index;
  const Candidate* cand;
  Extraction ex;
  std::shared_future<CompileOutcome> compiled;
  bool has_compile = false;
  EvalResult result;
  Clock::time_point start;
};

}  // namespace

struct Evaluator::Impl {
  EvalConfig cfg;
  EvaluatorOptions opts;
  Toolchain tc;
  std::unique_ptr<CompilePool> pool;

  ExecutorOptions executor_options(int gpu) const {
    ExecutorOptions e;
    e.device = opts.device;
    e.gpu = gpu;
    e.python = tc.python;
    e.harness_dir = tc.harness_dir;
    e.cache_dir = opts.cache_dir;
    e.scratch_dir = (fs::path(opts.scratch_dir) / ("gpu" + std::to_string(gpu))).string();
    if (opts.sandbox) e.sandbox_exe = opts.sandbox_exe;
    e.spares = opts.device == "cpu" ? 1 : 3;
    return e;
  }

  nlohmann::json judge_request(const Item& it, const CompileOutcome& co) const {
    nlohmann::json req = {
        {"op", "eval"},
        {"problem_path", it.cand->problem->path},
        {"format", to_string(it.ex.format)},
        {"precision", cfg.precision},
        {"seed", cfg.seed},
        {"trials", cfg.trials},
        {"atol", cfg.effective_atol()},
        {"rtol", cfg.effective_rtol()},
        {"allow", std::vector<std::string>(cfg.allow.begin(), cfg.allow.end())},
        {"timing", cfg.timing},
        {"timing_budget_s", cfg.timing_budget_s},
        {"timing_target_rel_err", cfg.timing_target_rel_err},
        {"timing_input_sets", cfg.timing_input_sets},
        {"timing_timeout_s", cfg.timing_timeout_s},
        {"load_timeout_s", cfg.load_timeout_s},
        {"trial_timeout_s", cfg.trial_timeout_s},
    };
    if (it.ex.format == SolutionFormat::kNative) {
      req["so_path"] = co.modules.at(0).so_path;
    } else {
      fs::path sol = fs::path(opts.cache_dir) / "solutions" / (sha256_hex(it.ex.code) + ".py");
      if (!fs::exists(sol)) write_file_atomic(sol, it.ex.code);
      req["solution_path"] = sol.string();
      nlohmann::json art = nlohmann::json::object();
      for (const auto& m : co.modules) art[m.source_key] = m.so_path;
      req["artifacts"] = art;
    }
    return req;
  }

  double request_timeout_s() const {
    return cfg.load_timeout_s + cfg.trials * cfg.trial_timeout_s +
           (cfg.timing ? cfg.timing_timeout_s + 4 * cfg.timing_budget_s : 0) + 180;
  }

  void fill_from_judge(EvalResult& r, const nlohmann::json& j) const {
    auto v = verdict_from_string(j.value("verdict", ""));
    if (!v) {
      r.verdict = Verdict::kInfraError;
      r.infra_error = "judge returned an unknown verdict: " + j.value("verdict", std::string("?"));
      return;
    }
    r.verdict = *v;
    r.stage = stage_of(*v);
    r.rule = j.value("rule", "");
    r.reason = j.value("reason", "");
    r.runtime_error = j.value("runtime_error", "");
    r.trials_passed = j.value("trials_passed", 0);
    r.trials_total = j.value("trials_total", 0);
    r.mismatch = j.value("mismatch", nlohmann::json());
    r.degenerate_reference = j.value("degenerate_reference", false);
    r.candidate_time = timing_from_json(j.value("candidate_time", nlohmann::json()));
    r.reference_time = timing_from_json(j.value("reference_time", nlohmann::json()));
    if (j.contains("speedup") && j["speedup"].is_number()) r.speedup = j["speedup"].get<double>();
    r.gpu = j.value("gpu", "");
    r.exec_s = j.value("judge_s", 0.0);
    r.exec_stages = j.value("stage_s", nlohmann::json());
    r.torch_version = j.value("torch_version", "");
    if (j.value("compile_path", std::string("pool")) == "runtime") r.compile_path = "runtime";
    if (r.speedup && (*r.speedup > cfg.speedup_review_bound || r.degenerate_reference))
      r.speedup_flagged = true;
  }
};

Evaluator::Evaluator(EvalConfig cfg, EvaluatorOptions opts) : impl_(std::make_unique<Impl>()) {
  validate(cfg);
  impl_->cfg = std::move(cfg);
  impl_->opts = std::move(opts);
  MC_CHECK(!impl_->opts.cache_dir.empty(), "evaluator needs a cache folder");
  if (impl_->opts.scratch_dir.empty())
    impl_->opts.scratch_dir = (fs::path(impl_->opts.cache_dir) / "scratch").string();
  impl_->tc = discover_toolchain(impl_->opts.cuda_arch);
  CompilePoolOptions po;
  po.workers = impl_->opts.compile_workers;
  po.cache_dir = impl_->opts.cache_dir;
  po.timeout_s = impl_->cfg.compile_timeout_s;
  impl_->pool = std::make_unique<CompilePool>(impl_->tc, po);
}

Evaluator::~Evaluator() = default;

std::vector<EvalResult> Evaluator::run(const std::vector<Candidate>& candidates,
                                       const std::function<void(const EvalResult&)>& on_result) {
  Impl& m = *impl_;
  std::vector<EvalResult> results(candidates.size());
  std::mutex out_mu;
  ProgressBar bar("eval", candidates.size(), m.opts.progress);
  auto finish = [&](Item& it) {
    EvalResult& r = it.result;
    if (r.verdict != Verdict::kInfraError) r.stage = stage_of(r.verdict);
    r.reward = compute_reward(r, m.cfg.reward);
    r.feedback = make_feedback(r);
    r.wall_s = std::chrono::duration<double>(Clock::now() - it.start).count();
    std::lock_guard lk(out_mu);
    results[it.index] = r;
    if (on_result) on_result(r);
    bar.advance(1, r.problem_key);
  };

  // Stages 1-3 on this thread; compiles run on the pool meanwhile.
  std::list<Item> pending;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& c = candidates[i];
    Item it{i, &c, {}, {}, false, {}, Clock::now()};
    EvalResult& r = it.result;
    r.problem_key = c.problem ? c.problem->key : c.problem_ref;
    r.problem_name = c.problem ? c.problem->name : "";
    r.problem_id = c.problem ? c.problem->id : -1;
    r.level = c.problem ? c.problem->level : 0;
    r.sample_id = c.sample_id;
    r.config_hash = m.cfg.config_hash();
    if (!c.input_error.empty()) {
      r.verdict = Verdict::kExtractError;
      r.reason = c.input_error + " (" + c.origin + ")";
      finish(it);
      continue;
    }
    it.ex = extract_solution(c.answer);
    if (!it.ex.ok) {
      r.verdict = Verdict::kExtractError;
      r.reason = it.ex.error;
      finish(it);
      continue;
    }
    r.solution_format = to_string(it.ex.format);
    StaticCheckOptions so{m.cfg.precision, m.cfg.allow};
    if (!m.opts.skip_static) r.violations = static_check(it.ex.code, it.ex.format, so);
    if (!r.violations.empty()) {
      r.verdict = Verdict::kStaticViolation;
      r.rule = r.violations.front().rule;
      r.reason = r.violations.front().message;
      finish(it);
      continue;
    }
    CompileRequest req;
    req.format = it.ex.format;
    r.compile_path = "pool";
    if (it.ex.format == SolutionFormat::kNative) {
      req.native_source = it.ex.code;
    } else {
      std::string why;
      auto calls = find_load_inline_calls(it.ex.code, &why);
      if (calls) req.calls = *calls;
      else r.compile_path = "runtime";  // built by the harness at load time
    }
    if (req.format == SolutionFormat::kNative || !req.calls.empty()) {
      it.compiled = m.pool->submit(req);
      it.has_compile = true;
    }
    pending.push_back(std::move(it));
  }

  // Stages 4-7: one thread per GPU takes whichever candidate has finished compiling first.
  std::mutex q_mu;
  auto take_ready = [&]() -> std::optional<Item> {
    while (true) {
      {
        std::lock_guard lk(q_mu);
        if (pending.empty()) return std::nullopt;
        for (auto it = pending.begin(); it != pending.end(); ++it) {
          if (!it->has_compile ||
              it->compiled.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
            Item item = std::move(*it);
            pending.erase(it);
            return item;
          }
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  auto gpu_worker = [&](int gpu) {
    std::unique_ptr<Executor> exec;
    int consecutive_infra = 0;
    while (auto item = take_ready()) {
      Item& it = *item;
      EvalResult& r = it.result;
      CompileOutcome co;
      if (it.has_compile) {
        co = it.compiled.get();
        r.compile_s = co.seconds;
        r.compile_cached = co.cached;
        if (co.status == CompileOutcome::Status::kInfraError) {
          r.verdict = Verdict::kInfraError;
          r.infra_error = "compile pool: " + co.error;
          finish(it);
          continue;
        }
        if (co.status == CompileOutcome::Status::kCompileError) {
          r.verdict = Verdict::kCompileError;
          r.compile_log = co.log;
          r.reason = "the sources did not compile";
          finish(it);
          continue;
        }
      }
      r.compiled = true;
      if (consecutive_infra >= 3) {  // this GPU's judge cannot run: do not wait for it again
        r.verdict = Verdict::kInfraError;
        r.infra_error = "executor for GPU " + std::to_string(gpu) + " is unavailable";
        finish(it);
        continue;
      }
      nlohmann::json req;
      try {
        req = m.judge_request(it, co);
      } catch (const std::exception& e) {
        r.verdict = Verdict::kInfraError;
        r.infra_error = std::string("preparing the request: ") + e.what();
        finish(it);
        continue;
      }
      // Infra failures are retried once; a candidate's own failures never are.
      for (int attempt = 0; attempt < 2; ++attempt) {
        try {
          if (!exec) exec = std::make_unique<Executor>(m.executor_options(gpu));
          auto reply = exec->call(req, m.request_timeout_s());
          if (reply.value("ok", false)) {
            m.fill_from_judge(r, reply.at("result"));
            if (r.compile_path == "runtime") r.compiled = true;
            consecutive_infra = 0;
            break;
          }
          r.verdict = Verdict::kInfraError;
          r.infra_error = reply.value("infra_error", std::string("judge failed"));
        } catch (const std::exception& e) {
          r.verdict = Verdict::kInfraError;
          r.infra_error = e.what();
        }
        ++consecutive_infra;
      }
      finish(it);
    }
  };
  std::vector<std::thread> workers;
  for (int g : m.opts.gpus) workers.emplace_back(gpu_worker, g);
  for (auto& w : workers) w.join();
  return results;
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
