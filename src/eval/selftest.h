// `musacoder selftest`: MooreEval judged against itself over a whole benchmark. For every
// problem it verifies candidates that compute the reference's function with other, valid
// numerics, which must all be accepted, and (on a few problems per level) negative controls,
// which must all be rejected. Legality rules are off in this mode alone (the candidates are
// PyTorch code on purpose): what is tested is the comparison, the parameter re-draws, memory at
// published sizes and the executor, i.e. that no honest kernel is rejected.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/candidates.h"
#include "eval/result.h"

namespace mc::eval {

// Honest variants (must be accepted):
//   fp64     the reference recomputed in float64 and cast back;
//   reorder  the reference on another backend, so reductions sum in another order (the CPU
//            when the inputs are small, else CUDA with cuDNN off; one thread on a CPU device);
//   renamed  the reference module kept as `self.impl`: every parameter has another name, so
//            re-draws must map by order and shape.
// Negative controls (must be rejected): constant, half (computed in float16), off_by_one
// (every output shifted by one element).
inline const std::vector<std::string> kSelftestHonest = {"fp64", "reorder", "renamed"};
inline const std::vector<std::string> kSelftestNegative = {"constant", "half", "off_by_one"};

// The candidate source of `variant` for the problem at `problem_path` (it imports the problem
// file). Throws mc::Error for an unknown variant.
std::string selftest_source(const std::string& problem_path, const std::string& variant);

// Candidates for `problems`: every honest variant for each, the negative controls for the first
// `negatives_per_level` problems of each level. sample_id is the variant's name.
std::vector<Candidate> selftest_candidates(const std::vector<ProblemPtr>& problems,
                                           int negatives_per_level);

bool selftest_is_negative(const std::string& variant);

// Per level and overall: problems, honest accepted / judged, honest rejections (problem,
// variant, verdict, reason), infra errors, negatives rejected / total, negatives accepted
// (each a failure of the verifier), wall seconds, peak judge memory.
struct SelftestLevel {
  int level = 0;
  double wall_s = 0;
};
// levels: each level's wall time. All levels are judged in one queue (the GPUs never wait for a
// level's last large problem), so a level's wall is the time until its last verdict, and
// total_wall_s (the whole run's) is less than their sum; < 0: their sum.
nlohmann::json selftest_report(const std::vector<EvalResult>& rows,
                               const std::vector<SelftestLevel>& levels, double total_wall_s = -1);
std::string selftest_table(const nlohmann::json& report);

}  // namespace mc::eval
