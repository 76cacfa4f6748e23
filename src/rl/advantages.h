// GRPO's group-relative advantages: each prompt's G trajectories are scored against each other,
//   A_i = (R_i − mean(R)) / (std(R) + ε),
// with the sample standard deviation (n − 1), as TRL's GRPOTrainer computes it. A group whose
// rewards are all equal carries no signal: its advantages are 0 (such groups are counted as
// all-failed or all-passed, and all-failed ones go to the retry buffer, retry_buffer.h).
#pragma once

#include <vector>

namespace mc::rl {

// `rewards` holds `groups` groups of `group_size`, group after group.
std::vector<double> group_advantages(const std::vector<double>& rewards, int group_size, double eps = 1e-6);

}  // namespace mc::rl
