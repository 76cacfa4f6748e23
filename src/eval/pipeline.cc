#include "eval/pipeline.h"

#include "common/fs.h"
#include "common/hash.h"
#include "eval/feedback.h"
#include "eval/reward.h"
#include "eval/static_check.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <string_view>
#include <thread>
#include <utility>

namespace mc::eval {

PreparedCandidate prepare_candidate(const Candidate& c, const EvalConfig& cfg, bool skip_static) {
  PreparedCandidate p;
  EvalResult& r = p.result;
  r.problem_key = c.problem ? c.problem->key : c.problem_ref;
  r.problem_name = c.problem ? c.problem->name : "";
  r.problem_id = c.problem ? c.problem->id : -1;
  r.level = c.problem ? c.problem->level : 0;
  r.sample_id = c.sample_id;
  r.config_hash = cfg.config_hash();
  if (!c.input_error.empty()) {
    r.verdict = Verdict::kExtractError;
    r.reason = c.input_error + " (" + c.origin + ")";
    p.done = true;
    return p;
  }
  p.ex = extract_solution(c.answer);
  if (!p.ex.ok) {
    r.verdict = Verdict::kExtractError;
    r.reason = p.ex.error;
    p.done = true;
    return p;
  }
  r.solution_format = to_string(p.ex.format);
  StaticCheckOptions so{cfg.precision, cfg.allow};
  if (!skip_static) r.violations = static_check(p.ex.code, p.ex.format, so);
  if (!r.violations.empty()) {
    r.verdict = Verdict::kStaticViolation;
    r.rule = r.violations.front().rule;
    r.reason = r.violations.front().message;
    p.done = true;
    return p;
  }
  CompileRequest req;
  req.format = p.ex.format;
  r.compile_path = "pool";
  if (p.ex.format == SolutionFormat::kNative) {
    req.native_source = p.ex.code;
  } else {
    std::string why;
    auto calls = find_load_inline_calls(p.ex.code, &why);
    if (calls) req.calls = *calls;
    else r.compile_path = "runtime";  // built by the harness at load time
  }
  if (req.format == SolutionFormat::kNative || !req.calls.empty()) p.compile = std::move(req);
  if (!p.compile && cfg.compile_only) {
    // Nothing can be built ahead of the judge, so a compile-only job has nothing to check.
    r.verdict = Verdict::kCompiled;
    r.reason = "no load_inline call could be read statically; nothing was prebuilt";
    p.done = true;
  }
  return p;
}

bool apply_compile(EvalResult& r, const CompileOutcome& co, const EvalConfig& cfg) {
  r.compile_s = co.seconds;
  r.compile_cached = co.cached;
  if (co.status == CompileOutcome::Status::kInfraError) {
    r.verdict = Verdict::kInfraError;
    r.infra_error = "compile pool: " + co.error;
    return false;
  }
  if (co.status == CompileOutcome::Status::kCompileError) {
    r.verdict = Verdict::kCompileError;
    r.compile_log = co.log;
    r.reason = "the sources did not compile";
    return false;
  }
  r.compiled = true;
  for (const auto& m : co.modules)
    if (m.source_key == kShimBridgeKey) r.compile_path = "pool-shim";  // built against the torch shim
  if (cfg.compile_only) {
    r.verdict = Verdict::kCompiled;
    r.reason = "compiled (compile-only job)";
    return false;
  }
  return true;
}

void finalize_result(EvalResult& r, const EvalConfig& cfg) {
  if (r.verdict != Verdict::kInfraError) r.stage = stage_of(r.verdict);
  r.reward = compute_reward(r, cfg.reward);
  r.feedback = make_feedback(r);
}

ExecutorOptions judge_options(const Toolchain& tc, const std::string& device, int gpu,
                              const std::string& cache_dir, const std::string& scratch_root,
                              const std::string& sandbox_exe, int spares, int lane, int lanes) {
  ExecutorOptions e;
  e.device = device;
  e.gpu = gpu;
  e.python = tc.python;
  e.harness_dir = tc.harness_dir;
  e.cache_dir = cache_dir;
  const std::string g = "gpu" + std::to_string(gpu);
  e.scratch_dir = (fs::path(scratch_root) / (lane == 0 ? g : g + "-lane" + std::to_string(lane))).string();
  // The gate belongs to the device, not to this process's numbering of it: judges of one GPU
  // share it even when their processes see the GPUs through different CUDA_VISIBLE_DEVICES.
  std::string dev = device == "cpu" ? std::to_string(gpu) : visible_gpu(gpu);
  for (char& c : dev)
    if (!isalnum(static_cast<unsigned char>(c)) && c != '-') c = '_';
  e.gpu_lock = (fs::path(scratch_root) / ("gpu" + dev + ".lock")).string();
  e.lanes = std::max(1, lanes);
  e.sandbox_exe = sandbox_exe;
  e.spares = default_spares(device, spares);
  return e;
}

GpuRunner::GpuRunner(ExecutorOptions opts) : opts_(std::move(opts)) {}

GpuRunner::~GpuRunner() = default;

nlohmann::json GpuRunner::judge_request(const Candidate& c, const PreparedCandidate& p,
                                        const CompileOutcome& co, const EvalConfig& cfg_) const {
  nlohmann::json req = {
      {"op", "eval"},
      {"problem_path", c.problem->path},
      {"format", to_string(p.ex.format)},
      {"precision", cfg_.precision},
      {"seed", cfg_.seed},
      {"trials", cfg_.trials},
      {"atol", cfg_.effective_atol()},
      {"rtol", cfg_.effective_rtol()},
      {"allow", std::vector<std::string>(cfg_.allow.begin(), cfg_.allow.end())},
      {"timing", cfg_.timing},
      {"timing_budget_s", cfg_.timing_budget_s},
      {"timing_target_rel_err", cfg_.timing_target_rel_err},
      {"timing_input_sets", cfg_.timing_input_sets},
      {"timing_timeout_s", cfg_.timing_timeout_s},
      {"load_timeout_s", cfg_.load_timeout_s},
      {"trial_timeout_s", cfg_.trial_timeout_s},
      {"trial_timeout_floor_s", cfg_.trial_timeout_floor_s},
      {"trial_timeout_ref_multiple", cfg_.trial_timeout_ref_multiple},
      {"legality", cfg_.legality},
  };
  if (p.ex.format == SolutionFormat::kNative) {
    req["so_path"] = co.modules.at(0).so_path;
  } else {
    fs::path sol = fs::path(opts_.cache_dir) / "solutions" / (sha256_hex(p.ex.code) + ".py");
    if (!fs::exists(sol)) write_file_atomic(sol, p.ex.code);
    req["solution_path"] = sol.string();
    nlohmann::json art = nlohmann::json::object();
    for (const auto& m : co.modules) art[m.source_key] = m.so_path;
    req["artifacts"] = art;
  }
  return req;
}

namespace {

// How often a judge start that ran out of device memory is tried again (1, 2, 4, 8, 16, then
// every 30 s: about 10 minutes, longer than any published-size candidate judged alone takes).
constexpr int kStartOutOfMemoryWaits = 25;
// A candidate that ran out of memory while the rest of the verifier still held memory beside it
// (the judge says not_alone) is judged alone again, after 2 s, then 4 s; then it is an infra error.
constexpr int kNotAloneRetries = 2;

double request_timeout_s(const EvalConfig& cfg_) {
  return cfg_.load_timeout_s + cfg_.trials * cfg_.trial_timeout_s +
         (cfg_.timing ? cfg_.timing_timeout_s + 4 * cfg_.timing_budget_s : 0) + 180;
}

void fill_from_judge(EvalResult& r, const nlohmann::json& j, const EvalConfig& cfg_) {
  auto v = verdict_from_string(j.value("verdict", ""));
  if (!v || *v == Verdict::kCompiled) {
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
  if (r.exec_stages.is_object() && j.contains("trial_parts_s") && j["trial_parts_s"].is_object())
    r.exec_stages["trial_parts"] = j["trial_parts_s"];  // where correctness-trial time went
  if (r.exec_stages.is_object() && j.contains("candidate_start_parts_s") && j["candidate_start_parts_s"].is_object())
    r.exec_stages["start_parts"] = j["candidate_start_parts_s"];  // how its process started (often ahead, as a spare)
  if (r.exec_stages.is_object() && j.value("timing_retries", 0) > 0)
    r.exec_stages["timing_retries"] = j["timing_retries"];  // a busy host stretched the clock
  if (r.exec_stages.is_object() && j.contains("candidate_process"))
    r.exec_stages["process"] = j["candidate_process"];  // forked by the zygote, or started afresh
  r.judge_details = nlohmann::json::object();
  for (const char* k : {"tolerance", "truth_on", "param_redraw", "memory_plan", "trial_limits_s",
                        "judge_peak_mem_bytes", "timing_sets_used", "lane", "timing_overhead_us",
                        "timing_open_s", "timing_wall_us_per_iter", "timing_spares_wait_s",
                        "timing_quiesce_s", "timing_spares_paused", "trims", "trimmed_bytes", "cpu_threads",
                        "trials_reused", "memory_promise", "trials_shared"})
    if (j.contains(k) && !j[k].is_null()) r.judge_details[k] = j[k];
  r.torch_version = j.value("torch_version", "");
  if (j.value("compile_path", std::string("pool")) == "runtime") r.compile_path = "runtime";
  if (r.speedup && (*r.speedup > cfg_.speedup_review_bound || r.degenerate_reference))
    r.speedup_flagged = true;
}

}  // namespace

void GpuRunner::warm_up() {
  try {
    if (!exec_) exec_ = std::make_unique<Executor>(opts_);
    exec_->ensure_started();
  } catch (const std::exception&) {
    // execute() starts it again and reports the failure with the candidate that needed it
  }
}

GpuRunner::Judged GpuRunner::execute(const Candidate& c, const PreparedCandidate& p, const CompileOutcome& co,
                                     const EvalConfig& cfg, EvalResult& r, bool exclusive, bool defer_timing,
                                     nlohmann::json* passed_trials) {
  if (start_failures_ >= 3) {  // this GPU's judge cannot start: do not wait for it again
    r.verdict = Verdict::kInfraError;
    r.infra_error = "executor for GPU " + std::to_string(opts_.gpu) + " is unavailable (its judge "
                    "failed to start 3 times)";
    return Judged::kDone;
  }
  nlohmann::json req;
  try {
    req = judge_request(c, p, co, cfg);
  } catch (const std::exception& e) {
    r.verdict = Verdict::kInfraError;
    r.infra_error = std::string("preparing the request: ") + e.what();
    return Judged::kDone;
  }
  // A preempted candidate comes back here alone; why it was sent back rides in infra_error.
  std::string preempted_why;
  if (exclusive) {
    req["exclusive"] = true;
    preempted_why = std::exchange(r.infra_error, std::string());
  }
  if (defer_timing) req["defer_timing"] = true;
  if (passed_trials && passed_trials->is_object()) req["passed_trials"] = *passed_trials;
  // Infra failures are retried once; a candidate's own failures never are. A judge that died
  // or ran out of memory is the verifier's failure, not the GPU's: the executor starts a new
  // one for the next request, and the rest of the run goes on. Only a judge that cannot start
  // at all makes this GPU unavailable.
  int oom_waits = 0;
  int not_alone_retries = 0;
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      if (!exec_) exec_ = std::make_unique<Executor>(opts_);
      exec_->ensure_started();
      start_failures_ = 0;
    } catch (const std::exception& e) {
      r.verdict = Verdict::kInfraError;
      r.infra_error = e.what();
      // A judge that finds no device memory for its CUDA context while another lane judges a
      // published-size problem alone (H100, L1/28_HardSigmoid beside a 6 GB problem): the
      // memory comes back when that candidate is done. Waited for, not counted as a failure.
      if (opts_.lanes > 1 && oom_waits < kStartOutOfMemoryWaits &&
          std::string_view(e.what()).find("out of memory") != std::string_view::npos) {
        std::this_thread::sleep_for(std::chrono::duration<double>(std::min(30.0, double(1 << oom_waits))));
        ++oom_waits;
        --attempt;
        continue;
      }
      ++start_failures_;
      continue;
    }
    try {
      auto reply = exec_->call(req, request_timeout_s(cfg));
      if (reply.value("ok", false)) {
        fill_from_judge(r, reply.at("result"), cfg);
        if (r.compile_path == "runtime") r.compiled = true;
        if (exclusive) {  // judged again, alone
          r.judge_details["preempted"] = true;
          r.judge_details["preempted_why"] = preempted_why;
        }
        if (not_alone_retries > 0) r.judge_details["not_alone_retries"] = not_alone_retries;
        return Judged::kDone;
      }
      if (reply.value("deferred", false) && defer_timing) {
        if (exclusive) r.infra_error = preempted_why;  // it still rides with the candidate
        if (passed_trials) *passed_trials = reply.value("passed_trials", nlohmann::json());
        return Judged::kTimingDeferred;
      }
      if (reply.value("preempted", false) && !req.value("exclusive", false)) {
        r.infra_error = reply.value("infra_error", std::string("preempted"));
        return Judged::kPreempted;
      }
      r.verdict = Verdict::kInfraError;
      r.infra_error = reply.value("infra_error", std::string("judge failed"));
      if (reply.value("out_of_memory", false)) {
        // Beside other lanes' work the memory may simply have been taken: once more alone. Alone
        // by the gate while the rest of the verifier still held memory (not_alone: the judge's
        // ledger), again after a pause. Truly alone, the same request would fail again.
        const bool alone = opts_.lanes <= 1 || req.value("exclusive", false);
        if (alone && !(reply.value("not_alone", false) && not_alone_retries < kNotAloneRetries)) {
          if (not_alone_retries > 0) r.judge_details["not_alone_retries"] = not_alone_retries;
          return Judged::kDone;
        }
        if (alone) std::this_thread::sleep_for(std::chrono::seconds(2 << not_alone_retries++));
        req["exclusive"] = true;
        --attempt;  // not counted as the infra retry
        continue;
      }
    } catch (const std::exception& e) {
      r.verdict = Verdict::kInfraError;
      r.infra_error = e.what();
    }
  }
  return Judged::kDone;
}

}  // namespace mc::eval
