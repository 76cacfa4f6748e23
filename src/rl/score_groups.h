// Step 3 of an RL step (trainer.cc): each group's rewards (PrimeEcho), advantages (normalized
// within the group) and what the retry buffer learns from it; what that adds to the step's
// sums. Verifier failures are logged, never scored.
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include <nlohmann/json.hpp>

#include "rl/prime_echo.h"
#include "rl/rollout.h"
#include "rl/step_metrics.h"
#include "synth/task_set.h"

namespace mc::rl {

struct ScoreOptions {
  int group_size = 8;
  PrimeEchoOptions prime_echo;
  double adv_std_floor = 0.25;
};

// Fills every scored trajectory's reward and advantage (traj[p * G + g] is sample g of prompt p
// of `mine`). Returns the retry buffer's events, one per scored group: {"prompt": its index over
// all ranks, "kind": "add" (every answer failed: the problem, a failed answer and its feedback)
// or "repaired"}.
nlohmann::json score_groups(std::vector<Trajectory>& traj, const std::vector<RolloutPrompt>& mine,
                            const std::vector<size_t>& global_index, const std::vector<synth::Task>& tasks,
                            const ScoreOptions& o, StepSums& sums);

// Every verifier failure of the step, with what the verifier said (OUT/infra_errors.jsonl).
void log_infra_errors(const std::vector<Trajectory>& traj, const std::vector<RolloutPrompt>& mine,
                      const std::vector<synth::Task>& tasks, int64_t step, std::ostream& log);

}  // namespace mc::rl
