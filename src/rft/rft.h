// Rejection fine-tuning, end to end: `musacoder rft`. In order, each step leaving its file in
// the run folder, so that a stopped run picks up where it was:
//   1. problems   a folder of KernelBench problems, or the problems.jsonl of `musacoder synth`
//                 (whose rows carry the task prompt the SFT data used);
//   2. sample     K answers per problem from the policy, by `musacoder-model generate`
//                 (ChatML, stopping at <|im_end|>)                          -> samples.jsonl
//                 or answers made elsewhere (--samples-from);
//   3. verify     every answer through MooreEval: in-process judges, or the service at
//                 --verifier URL                                             -> verified.jsonl
//                 (a row already judged with the same answer is reused; infra errors are
//                 judged again, never reused);
//   4. select     selection.h                  -> dataset.jsonl (SFT rows), dropped.jsonl
//                 (every answer not kept, with its reason), report.json / report.txt;
//                 repair.h (--repair-rows)     -> repair.jsonl (failed answer, feedback, fix);
//   5. train      optionally, `musacoder-model train sft` on dataset.jsonl (and
//                 repair.jsonl)                                            -> sft/
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "eval/eval_config.h"
#include "eval/evaluator.h"
#include "rft/report.h"
#include "rft/selection.h"

namespace mc::rft {

struct RftOptions {
  std::string model_dir;     // the policy, a Hugging Face directory
  std::string problems;      // folder of KernelBench problems, or a synth problems.jsonl
  int level = 0;             // folder problems: this level only (0: all)
  std::string out_dir;
  int samples = 8;           // K answers per problem
  std::string format = "native";  // the solution format the prompt asks for: native | kernelbench
  std::string backend = "cuda";   // the kernels the prompt asks for (synth::load_tasks)
  // Sampling (passed to musacoder-model generate).
  double temperature = 1.0, top_p = 1.0;
  int max_new_tokens = 4096, max_batch = 256;
  int loop_window = 0;       // > 0: stop an answer caught in a loop (generate/repetition.h)
  uint64_t seed = 0;
  std::string model_device = "auto";
  std::string samples_from;  // JSONL of answers to verify instead of sampling ({problem, answer, sample_id?})
  // Verification.
  std::string verifier_url;  // "" : in-process MooreEval with `evaluator`
  std::string verifier_token;
  bool judge_twins = false;  // judge every answer; by default the same text for the same problem is judged once
  eval::EvalConfig eval_config;
  eval::EvaluatorOptions evaluator;
  SelectionOptions selection;
  // Repair conversations (repair.h) -> repair.jsonl: up to this many per problem (0: none),
  // paired with this run's kept answers, then with --repair-from's verified answers (a synth or
  // rft dataset.jsonl) for problems where no sample passed.
  int repair_per_problem = 0;
  std::string repair_from;
  // Training on the selected answers.
  bool train = false;
  std::vector<std::string> train_args;  // extra `train sft` options (--epochs 2 --lr 1e-5 ...)
  std::string model_exe;     // path of musacoder-model
  bool progress = true;
};

struct RftResult {
  RftReport report;
  size_t dataset_rows = 0;
  size_t repair_rows = 0;
  int train_exit = -1;  // -1: not trained
};

RftResult run_rft(const RftOptions& o);

}  // namespace mc::rft
