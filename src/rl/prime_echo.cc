#include "rl/prime_echo.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"

namespace mc::rl {

double prime_echo_reward(const std::vector<Turn>& turns, const PrimeEchoOptions& o) {
  MC_CHECK(!turns.empty(), "PrimeEcho: a trajectory needs at least one turn");
  if (!o.enabled) return turns.back().reward;
  double best = turns.front().reward;
  for (const auto& t : turns) best = std::max(best, t.reward);
  double bonus = 0;
  for (size_t k = 0; k < turns.size(); ++k)
    if (turns[k].passed) {
      bonus = o.early_bonus * std::pow(o.early_decay, static_cast<double>(k));
      break;
    }
  return o.alpha * turns.front().reward + (1 - o.alpha) * best + bonus;
}

}  // namespace mc::rl
