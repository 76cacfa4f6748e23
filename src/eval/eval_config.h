// Everything that changes a verdict, a timing or a reward. Part of every cache key and job id
// (config_hash), so results computed under different settings are never mixed.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace mc::eval {

struct RewardParams {
  double lambda = 0.5;   // weight of the speed bonus
  double nu_max = 4.0;   // cap on (speedup - 1) that is paid
};

struct EvalConfig {
  std::string precision = "fp32";  // fp32 | fp16 | bf16
  int trials = 5;                  // correctness trials, each with fresh seeded inputs (>= 5)
  int seed = 42;                   // seeds weights (same for Model and ModelNew) and inputs
  double atol = -1, rtol = -1;     // < 0: 1e-4 for fp32, 1e-2 for fp16/bf16
  std::set<std::string> allow;     // relaxed legality rules ("cublas", "cudnn", ...)
  bool timing = true;              // time correct candidates against eager PyTorch
  double timing_budget_s = 2.0;    // cap per measured callable
  double timing_target_rel_err = 0.01;  // stop when the median's relative std. error is below
  int timing_input_sets = 3;       // fresh input sets rotated across timed iterations
  double speedup_review_bound = 20.0;   // speedups above this are flagged, not paid
  RewardParams reward;
  // Wall-clock limits per stage, seconds.
  double load_timeout_s = 120;     // import + extension load + ModelNew construction
  double trial_timeout_s = 60;     // cap on one correctness trial
  // A trial's limit follows the reference's own time: floor + multiple x the reference's
  // forward (twice that for the first trial, which also runs the legality monitor), capped by
  // trial_timeout_s. A hanging candidate costs seconds, a slow honest one still finishes.
  double trial_timeout_floor_s = 5;
  double trial_timeout_ref_multiple = 200;
  double timing_timeout_s = 120;   // the whole timing stage of one candidate
  double compile_timeout_s = 600;
  bool compile_only = false;       // stop after compiling: verdict `compiled`, no execution
  bool legality = true;            // false only in `musacoder selftest`: verdicts on numerics alone


  // Stable digest of the fields above.
  std::string config_hash() const;
  double effective_atol() const { return atol >= 0 ? atol : precision == "fp32" ? 1e-4 : 1e-2; }
  double effective_rtol() const { return rtol >= 0 ? rtol : precision == "fp32" ? 1e-4 : 1e-2; }
};

// Every field, for jobs that travel to other machines. from_json starts from the defaults,
// takes the fields present and rejects unknown ones and wrong types (mc::Error naming them).
nlohmann::json to_json(const EvalConfig& cfg);
EvalConfig eval_config_from_json(const nlohmann::json& j);

// Throws mc::Error naming the bad field ("precision must be fp32, fp16 or bf16, got fp8").
void validate(const EvalConfig& cfg);

}  // namespace mc::eval
