// PrimeEcho: the reward of a multi-turn trajectory, anchored on its first turn.
//
//   R = α·s₁ + (1 − α)·max_k s_k + b_early(k*)
//
// s_k is MooreEval's reward at turn k (−1 / −0.5 + 0.5q / 1 + λ·min(max(ν − 1, 0), ν_max);
// eval/reward.h), k* the first turn whose answer passed, and b_early(k*) = β·γ^(k*−1) a bonus
// that is larger the earlier the first pass (0 when no turn passed). The first turn carries α of
// the reward, so repairing later cannot hide a bad first answer; the best later turn carries the
// rest, so a repair is still worth making. The policy loss itself is applied to turn-1 tokens
// only (grpo_loss.h); later turns shape this reward, not the gradient.
//
// With PrimeEcho off (--no-primeecho) the reward is the last turn's: R = s_T.
#pragma once

#include <vector>

namespace mc::rl {

struct PrimeEchoOptions {
  bool enabled = true;
  double alpha = 0.75;        // weight of the first turn
  double early_bonus = 0.1;   // β: the bonus for a pass at turn 1
  double early_decay = 0.5;   // γ: the bonus shrinks by this per later turn
};

struct Turn {
  double reward = 0;   // s_k, MooreEval's reward for this turn's answer
  bool passed = false; // the answer was correct and legal (verdict ok)
};

// `turns` in order, at least one. Throws mc::Error on an empty trajectory.
double prime_echo_reward(const std::vector<Turn>& turns, const PrimeEchoOptions& o);

}  // namespace mc::rl
