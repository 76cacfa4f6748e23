// The stages of one candidate as separate steps, so that one process (Evaluator) or a fleet of
// machines (src/serve: compile workers and GPU workers on Redis Streams) runs the very same
// code:  prepare (extract + static, cheap)  ->  compile (CPU pool)  ->  execute (one GPU's
// judge)  ->  finalize (reward + feedback).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "eval/candidates.h"
#include "eval/compile_pool.h"
#include "eval/eval_config.h"
#include "eval/executor.h"
#include "eval/extract.h"
#include "eval/result.h"
#include "eval/toolchain.h"

namespace mc::eval {

struct PreparedCandidate {
  EvalResult result;   // identity filled in; holds the verdict when `done`
  Extraction ex;
  bool done = false;   // a verdict was reached before compiling (extract or static)
  std::optional<CompileRequest> compile;  // nullopt: nothing to prebuild (harness builds it)
};

// Stages 1-2: extraction and static legality. Never throws for a candidate's own faults.
PreparedCandidate prepare_candidate(const Candidate& c, const EvalConfig& cfg, bool skip_static);

// Stage 3's outcome into the result. Returns false when the result is final (compile error,
// compile-pool infra error, or a compile-only job).
bool apply_compile(EvalResult& r, const CompileOutcome& co, const EvalConfig& cfg);

// Stage, reward and feedback from the verdict.
void finalize_result(EvalResult& r, const EvalConfig& cfg);

// The judge settings for one lane of one GPU, the same for `musacoder eval` and for GPU
// workers. `sandbox_exe` empty: candidates run unsandboxed (debugging only); `spares` 0: the
// default. Every lane of a GPU shares the GPU's gate file under `scratch_root`.
ExecutorOptions judge_options(const Toolchain& tc, const std::string& device, int gpu,
                              const std::string& cache_dir, const std::string& scratch_root,
                              const std::string& sandbox_exe, int spares, int lane = 0, int lanes = 1);

// Stages 4-7 on one GPU: owns that GPU's judge (started on first use, restarted after a
// crash). Infra failures are retried once; after three in a row the GPU is considered lost and
// further candidates get infra_error at once. One thread drives one GpuRunner.
class GpuRunner {
 public:
  explicit GpuRunner(ExecutorOptions opts);
  ~GpuRunner();
  // What became of a candidate handed to the judge.
  enum class Judged {
    kDone,       // r holds its result
    // The judge preempted it (another lane waited to time while one of its trials ran long; r
    // untouched): the caller runs it again later with `exclusive`, the GPU to itself, where it
    // cannot be preempted.
    kPreempted,
    // With `defer_timing`: it passed its trials while the trainer held timing (r untouched).
    // The judge gave it back rather than wait for the gate with its lane taken, with what its
    // trials established in `*passed_trials`; the caller runs it again once timing is released,
    // passing that back, and the judge loads it afresh and times it without repeating the
    // trials (Evaluator, EvaluatorOptions::defer_timing).
    kTimingDeferred,
  };
  // `cfg` is the candidate's own (jobs from a queue may each carry a different one). A judge
  // that ran out of memory beside other lanes is retried exclusive at once. `passed_trials`
  // (with defer_timing): in, a record from an earlier kTimingDeferred (null: none); out, the
  // record when this call returns kTimingDeferred.
  [[nodiscard]] Judged execute(const Candidate& c, const PreparedCandidate& p, const CompileOutcome& co,
                               const EvalConfig& cfg, EvalResult& r, bool exclusive = false, bool defer_timing = false,
                               nlohmann::json* passed_trials = nullptr);
  int gpu() const { return opts_.gpu; }
  // Starts this GPU's judge ahead of the first candidate (a failure is left for execute() to
  // report, as an infra error of the candidate that needs the judge).
  void warm_up();

 private:
  nlohmann::json judge_request(const Candidate& c, const PreparedCandidate& p,
                               const CompileOutcome& co, const EvalConfig& cfg) const;

  ExecutorOptions opts_;
  std::unique_ptr<Executor> exec_;
  int start_failures_ = 0;  // consecutive judge starts that failed
};

}  // namespace mc::eval
