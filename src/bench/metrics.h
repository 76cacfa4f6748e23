// The numbers a model's KernelBench run is judged by, computed from one outcome per
// (problem, sample) at a given turn. Every problem in the set counts: an answer with no usable
// code is a failure like any other. Samples the verifier or the endpoint could not judge
// (infra errors) are left out, never scored 0; a problem with no judged sample is "unscored"
// and reported as such.
//
//   pass@k   unbiased estimator (Chen et al. 2021): 1 - C(n-c, k) / C(n, k) per problem with n
//            judged samples of which c correct, averaged over problems. Where n < k (samples
//            lost to infra errors), the problem counts as passed iff c > 0.
//   avg@k    the mean share of correct samples, c / n, averaged over problems.
//   fast_p   KernelBench's definition: the share of samples that are correct and more than
//            p times faster than the baseline (KernelBench's score.fastp with one sample per
//            problem; with several, its mean over sample indices, i.e. per problem the share
//            of its samples, averaged). p = 0 is the correct share. Against eager PyTorch the
//            speedup is the judge's paired timing of the reference; against torch.compile it
//            is that times compile_ms / eager_ms from `musacoder baseline`. A
//            speedup flagged beyond MooreEval's review bound counts as correct, not as faster.
//   faster   the share of problems whose best correct sample beats eager by more than 1.1x.
//   geomean  the geometric-mean eager speedup over correct samples (KernelBench's
//            geometric_mean_speed_ratio_correct_only, over all of them).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/uncertainty.h"

namespace mc::bench {

// What one sample came to (at a turn: the first passing answer up to it, else the last).
struct SampleOutcome {
  std::string problem;   // problem key
  int level = 0;
  int sample = 0;
  bool judged = false;   // false: an infra error (endpoint or verifier); no score
  bool compiled = false, correct = false, legal = false;
  std::string verdict;
  std::vector<std::string> rules;        // legality rules that fired
  std::optional<double> speedup_eager;   // correct, timed and not flagged
  std::optional<double> compile_over_eager;  // the problem's compile_ms / eager_ms (none: no baseline)
  int turn = 1;                          // the turn this outcome comes from
};

// The estimator's closed form, exact for n up to a few thousand.
double pass_at_k(int n, int c, int k);

inline const std::vector<double> kFastP = {0.0, 1.0, 1.1, 2.0};

struct Metrics {
  int problems = 0;          // problems in the set
  int scored_problems = 0;   // with at least one judged sample
  int samples = 0;           // judged samples
  int infra_errors = 0;      // samples without a verdict
  std::map<int, double> pass_at;          // k -> pass@k (k = 1 and k = samples)
  double avg_at_k = 0;
  std::map<double, double> fast_eager, fast_compile;  // p -> fast_p
  double faster = 0;         // best correct sample > 1.1x eager, share of problems
  double geomean_speedup = 0;  // 0 if no correct sample was timed
  double compiled = 0, correct = 0, legal = 0;  // shares of judged samples
  std::map<std::string, int> verdicts, rules;
};

// ks: the k of pass@k to report (each <= the samples asked for).
Metrics compute_metrics(const std::vector<SampleOutcome>& outcomes, const std::vector<std::string>& all_problems,
                        const std::vector<int>& ks);
// Per problem of the set with a judged sample: (judged samples, correct ones), the input of
// the intervals in uncertainty.h.
ProblemCounts problem_counts(const std::vector<SampleOutcome>& outcomes, const std::vector<std::string>& all_problems);

// fast_p at any p (the curve in the report's plot).
double fast_p(const std::vector<SampleOutcome>& outcomes, const std::vector<std::string>& all_problems, double p,
              bool vs_compile);

nlohmann::json metrics_json(const Metrics& m);

}  // namespace mc::bench
