// MooreEval end to end: extract -> static -> compile (CPU pool) -> execute, compare, time
// (one judge per GPU) -> reward + feedback. One result per candidate, whatever happens to it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "eval/candidates.h"
#include "eval/compile_pool.h"
#include "eval/eval_config.h"
#include "eval/result.h"

namespace mc::eval {

struct EvaluatorOptions {
  std::vector<int> gpus = {0};  // the GPUs; each gets `lanes` judges
  std::string device = "cuda";  // "cpu": judges run on the CPU (tests without a GPU)
  std::string cache_dir;        // compile cache, reference timings, solution files
  std::string scratch_dir;      // candidate scratch folders
  int compile_workers = 0;      // 0: half the cores
  bool sandbox = true;          // run candidates under `musacoder sandbox-exec`
  std::string sandbox_exe;      // path of the musacoder binary
  std::string cuda_arch;        // "" : detect
  bool progress = true;
  bool skip_static = false;     // testing the run-time defenses alone (never for scoring)
  int spares = 0;               // warm candidate processes per judge (0: 1 on cpu, 6 on cuda)
  int lanes = 0;                // judges per GPU (0: 1 on cpu, 4 on cuda): correctness trials
                                // of several candidates at once, timing alone (lanes.py)
  bool stagger_lanes = true;    // a GPU's later lanes start their judges once its first is ready
                                // (MUSACODER_STAGGER_LANES=0: all at once, all judging)
  double standby_after_s = 2.0;  // lane k judges while lanes 0..k-1 each hold a candidate this long
  int early_standby = 1;        // standby lanes that start with the first, not once it is ready: one
                                // is ready to step in when the first candidate hangs
                                // (MUSACODER_EARLY_STANDBY=N overrides)
  bool prepare_toolchain = false;  // build the precompiled header now, in the background (services)
  bool timing_gate = false;     // judges time only while hold_timing(false) (a trainer shares the GPU)
  // With timing_gate: a candidate that passes its trials while timing is held is given back by
  // its judge instead of waiting for the release with its lane taken, and once timing is
  // released it is loaded afresh and timed, its trials not repeated (the evaluator keeps what
  // they established; judge_details.trials_reused). At most kMaxTimingDeferrals times, then it
  // waits as without. So failing candidates behind it get their verdicts while the trainer
  // generates, which is what `train rl --rollout overlapped` needs; a passing one pays a second
  // load, not its trials twice.
  bool defer_timing = false;
};

class Evaluator {
 public:
  Evaluator(EvalConfig cfg, EvaluatorOptions opts);
  ~Evaluator();

  // Streaming: queues one candidate and returns at once; `done` is called exactly once, from
  // a pipeline thread, with its final result. Stages 1-2 (extraction, static checks) and the
  // compile's submission run on the evaluator's preparing thread, in submission order: an RL
  // rollout submits each answer from the thread that drives the generation engine, which the
  // static checks' regular expressions held 6 ms an answer (about 1 s a step on the H100).
  void submit(Candidate c, std::function<void(EvalResult)> done);

  // Evaluates every candidate; `on_result` is called once per candidate (from any thread, one
  // call at a time) as soon as its result is final. Returns the results in input order.
  std::vector<EvalResult> run(const std::vector<Candidate>& candidates,
                              const std::function<void(const EvalResult&)>& on_result = {});

  // A trainer that shares the judges' GPU holds timing while its own kernels run: compiles and
  // correctness trials go on, but no judge starts timing until released, and hold_timing(true)
  // returns only once no judge is timing any more. Needs EvaluatorOptions::timing_gate.
  void hold_timing(bool hold);

  // What the pipeline holds right now (for a service's /metrics and back-pressure).
  struct Stats {
    size_t compiling = 0;  // waiting for the compile pool, or for stages 1-2
    size_t ready = 0;      // compiled, waiting for a GPU
    size_t deferred = 0;   // of those, given back while timing was held (defer_timing): waiting for its release
    size_t executing = 0;  // on a GPU right now
    size_t gpus = 0;
    size_t judges = 0;     // lanes over all GPUs: how many candidates may be on a GPU at once
    size_t compile_workers = 0, compile_busy = 0;
  };
  Stats stats() const;
  const EvalConfig& config() const;

  // Validity facts of problems (data synthesis): runs, determinism, finiteness, degeneracy,
  // variation with the seed and along each axis, eager time. One judge per GPU, problems spread
  // across them; `on_done` is called once per problem (any thread, one at a time). A reply is
  // the judge's result, or {"infra_error": why}.
  std::vector<nlohmann::json> probe(const std::vector<ProblemPtr>& problems, double timing_budget_s,
                                    const std::function<void(size_t)>& on_done = {});

  // Reference timings (eager, optionally torch.compile) for KernelBench's baseline JSON.
  nlohmann::json baseline(const std::vector<ProblemPtr>& problems, bool with_compile);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mc::eval
