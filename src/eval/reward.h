// MusaCoder's reward for one verified candidate (parameters in RewardParams):
//   s = -1                            extract/compile/load/run failure, illegality, no trial passed
//   s = -0.5 + 0.5 q                  a fraction q of the trials passed (0 < q < 1)
//   s = 1 + lambda min(max(nu-1,0), nu_max)   all trials passed and legal; nu = speedup over eager
// A speedup flagged for review is not paid (nu taken as 1). Infra errors get no reward at all.
#pragma once

#include <optional>

#include "eval/eval_config.h"
#include "eval/result.h"

namespace mc::eval {

std::optional<double> compute_reward(const EvalResult& r, const RewardParams& p);

}  // namespace mc::eval
