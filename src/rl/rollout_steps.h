// The small steps of a rollout that both of its schedules take (rollout.cc turn by turn,
// pipelined_turns.cc): internal to src/rl.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "generate/engine.h"
#include "rl/rollout.h"

namespace mc::rl::detail {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t);

// A sampled answer, as the engine gave it, continuing `context`.
TurnRecord sampled(const std::vector<int32_t>& context, const gen::Completion& c);

// Trajectory i's last answer is a twin of one judged earlier in the batch: that one's verdict,
// under its own sample id.
void share_twin_verdict(std::vector<Trajectory>& traj, size_t i, const std::string& tag);

// A verdict that came while the rollout waited: what MooreEval's work on it was made of.
void count_wait(RolloutStats* stats, const eval::EvalResult& r, double wait_began);

// Whether a trajectory stops after its last answer's verdict (and why).
void stop_after_verdict(Trajectory& t, int max_turns);

}  // namespace mc::rl::detail
