// Diversity-preserving selection of RFT answers: which verified answers become training data.
//
// Per problem, answers are visited fastest first (MooreEval's speedup; ties by sample order),
// and each is kept unless
//   rejected        its verdict is not ok (wrong output, illegal, failed to build, ...);
//   infra_error     the verifier failed on it (never counted as wrong; re-run to judge it);
//   duplicate       its code equals a kept answer's up to comments and layout;
//   renamed_copy    ... up to the names it declares;
//   slower_twin     ... up to names and numeric constants (same kernel, other block size or
//                   unroll): the faster one was kept;
//   near_duplicate  its shingle Jaccard with a kept answer is >= near_duplicate_jaccard;
// and what survives is then capped per problem, so that easy problems (many correct answers)
// do not crowd out hard ones:
//   over_cap        the problem already has cap_per_problem answers. The cap is filled round-robin
//                   across speed buckets (log2 of the speedup: <0.5x, 0.5-1x, 1-2x, 2-4x, >=4x),
//                   fastest bucket first, so distinct strategies at different speeds survive
//                   rather than only the fastest handful.
// A dropped answer names the kept answer it repeats (`twin`) and their similarity.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "rft/code_similarity.h"

namespace mc::rft {

struct RftAnswer {
  std::string problem;        // groups answers (the problem's key)
  std::string sample_id;      // unique within the problem
  std::string code;           // the extracted solution (what is compared)
  std::string verdict;        // MooreEval's verdict name ("ok", "wrong_output", ...)
  std::optional<double> speedup;
  // From the sampler's log-probabilities, when the answer came with them (for the report only):
  // how many tokens it has, and how many were drawn below kLowProbability (common/low_prob.h).
  int tokens = 0;
  std::optional<int> low_prob_tokens;
};

struct SelectionOptions {
  int cap_per_problem = 4;             // answers kept per problem (0: no cap)
  double near_duplicate_jaccard = 0.8; // shingle Jaccard at or above which two answers are one
  int shingle_tokens = 4;
};

struct Decision {
  bool kept = false;
  std::string reason;      // "" when kept; else one of the names above
  std::string twin;        // sample id of the kept answer it repeats (duplicate .. near_duplicate)
  double similarity = 0;   // Jaccard with that twin
  int speed_bucket = -1;   // 0 (<0.5x) .. 4 (>=4x); -1 without a speedup
};

int speed_bucket(const std::optional<double>& speedup);
const char* speed_bucket_name(int bucket);

// One decision per answer, in input order. `prints` (optional) receives each answer's
// fingerprint, for the report's similarity figures.
std::vector<Decision> select_answers(const std::vector<RftAnswer>& answers, const SelectionOptions& o,
                                     std::vector<CodeFingerprint>* prints = nullptr);

}  // namespace mc::rft
