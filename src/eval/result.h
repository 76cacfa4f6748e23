// One JSONL row per candidate, whatever happened to it. Schema in docs/formats.md;
// `format_version` changes when a field changes meaning.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "eval/static_check.h"
#include "eval/verdict.h"

namespace mc::eval {

inline constexpr int kResultFormatVersion = 1;

struct TimingStats {
  double median_us = 0, mean_us = 0, std_us = 0, p10_us = 0, p90_us = 0;
  double trimmed_mean_us = 0;  // mean of p5..p95
  int n = 0;  // timed iterations
};

struct EvalResult {
  // Identity.
  std::string problem_key, problem_name, solution_format, sample_id;
  int problem_id = -1, level = 0;
  std::string config_hash;
  // Outcome.
  Verdict verdict = Verdict::kInfraError;
  Stage stage = Stage::kExtract;
  std::string rule;         // the legality rule that fired, if any
  std::string reason;       // one line: why this verdict
  std::string feedback;     // text for multi-turn repair (see feedback.h)
  std::string infra_error;  // what went wrong in the verifier (verdict == kInfraError)
  std::vector<Violation> violations;
  // Stage details.
  bool compiled = false, compile_cached = false;
  double compile_s = 0;     // wall clock of this candidate's compile (0 when cached)
  std::string compile_path; // "pool" (prebuilt by the compile pool) or "runtime" (at load)
  std::string compile_log;  // trimmed
  int trials_passed = 0, trials_total = 0;
  nlohmann::json mismatch;  // first mismatch: trial, output index, index, expected, got, errors
  std::string runtime_error;
  bool degenerate_reference = false;
  std::optional<TimingStats> candidate_time, reference_time;
  std::optional<double> speedup;
  bool speedup_flagged = false;  // beyond the review bound: not paid
  std::optional<double> reward;  // absent for infra errors
  std::string gpu, torch_version;
  double wall_s = 0;             // this candidate, end to end (queueing and compile included)
  double finished_at = 0;        // Unix seconds at the verdict (0: unknown); with wall_s, a run's timeline
  double exec_s = 0;             // inside the judge: load, trials, timing
  nlohmann::json exec_stages;    // seconds per judge stage {take, load, trials, timing}
  // How the judge decided and what it held: the tolerance bounds used ({atol, rtol,
  // extra_atol, torch_error_max, against}), where the float64 reference ran, the parameter
  // re-draw mapping, the memory plan, each trial's time limit, the judge's peak device memory.
  nlohmann::json judge_details;

  bool correct() const { return trials_total > 0 && trials_passed == trials_total; }
  bool legal() const;  // no rule fired (meaningful only once execution got that far)
  bool is_infra() const { return verdict == Verdict::kInfraError; }
};

nlohmann::json to_json(const EvalResult& r);
// Reads {median_us, trimmed_mean_us, mean_us, std_us, p10_us, p90_us, n}; nullopt for null or a non-object.
std::optional<TimingStats> timing_from_json(const nlohmann::json& j);
EvalResult result_from_json(const nlohmann::json& j);  // throws mc::Error on schema mismatch

}  // namespace mc::eval
