// `musacoder bench-model`: a model's KernelBench numbers, end to end. For each problem of the
// set, `samples` answers from the model (bench/answer_source.h), each judged by MooreEval as it
// arrives; with `turns` > 1 an answer that fails is answered with MooreEval's feedback as the
// next user turn (synth::repair_prompt, as in training), up to `turns` answers per sample.
//
// The run folder (everything a report shows can be recomputed from it):
//   run.json        the settings; a rerun with --resume must match them
//   baseline.json   eager and torch.compile timings per problem (`musacoder baseline`'s), timed
//                   after judging for the problems with a correct answer (or from --baseline)
//   answers.jsonl   every answer as the model gave it {problem, sample, turn, text, finish_reason, error}
//   results.jsonl   MooreEval's row for each answer {problem, sample, turn, answer_sha256, result}
//   timing.json     seconds of each invocation (generation, verification after it, baseline, wall)
//   report.md / report.json / report.txt, fast_p.svg (fast_p over p per level), grid.svg (per problem)
// --resume keeps every answer and every verdict already there; answers the source failed to
// give and rows with an infra error are redone, never reused.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/answer_source.h"
#include "eval/eval_config.h"
#include "eval/evaluator.h"
#include "eval/problem.h"

namespace mc::bench {

// A problem of the set and the user turn that asks for it.
struct BenchProblem {
  eval::ProblemPtr problem;
  int level = 0;
  std::string prompt;
};

struct BenchOptions {
  std::string problems;            // KernelBench folder (or checkout), or a synth problems.jsonl
  std::vector<int> levels;         // empty: every level found
  std::string subset;              // file of problem keys or stems, one a line ("" : all)
  // The model: exactly one of model_dir (our engine) and endpoint.
  std::string model_dir, model_exe, model_device = "auto";
  int max_batch = 256;
  std::string endpoint, model_name, api_key;
  int concurrency = 8;
  double request_timeout_s = 600;
  int max_retries = 4;
  // Sampling.
  int samples = 8, turns = 1;
  Sampling sampling;
  std::string prompt = "kernelbench";  // kernelbench (KernelBench's own) | musacoder (synth's task prompt)
  std::string format;                  // kernelbench | native ("" : kernelbench for the KernelBench prompt)
  std::string backend = "cuda";        // the kernels the prompts ask for: cuda | musa
  // Verification.
  std::string verifier_url, verifier_token;  // "" : MooreEval in this process
  eval::EvalConfig eval_config;
  eval::EvaluatorOptions evaluator;
  bool hold_timing = true;          // no timing while the model generates (it shares the judges' GPU)
  bool judge_twins = false;         // judge every answer, also one whose text another already has
  std::string baseline_file;        // `musacoder baseline --compile` output ("" : time it here)
  bool compile_baseline = true;     // time torch.compile too (vs-compile fast_p)
  std::string out_dir;
  bool resume = false;
  bool progress = true;
};

struct BenchResult {
  nlohmann::json report;           // what report.json holds
  std::string table;               // report.txt
};

BenchResult run_bench(const BenchOptions& o);

// `musacoder bench-model compare RUN...`: the runs' headline numbers side by side (Markdown).
// seeds_by_name: runs whose folders have the same name (RUN1/eval/rl, RUN2/eval/rl: one arm
// trained from several seeds) also get one row each of mean and range across them.
std::string compare_runs(const std::vector<std::string>& run_dirs, bool seeds_by_name = false);
// The same runs as a chart (SVG): pass@1 (turn 1 and last), pass@k, avg@k, fast_1 and Faster,
// one point per run in the order given: a recipe's stage-by-stage chart.
std::string compare_svg(const std::vector<std::string>& run_dirs);

}  // namespace mc::bench
