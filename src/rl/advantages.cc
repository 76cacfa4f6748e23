#include "rl/advantages.h"

#include <cmath>

#include "common/check.h"

namespace mc::rl {

std::vector<double> group_advantages(const std::vector<double>& rewards, int group_size, double eps) {
  MC_CHECK(group_size >= 1 && rewards.size() % static_cast<size_t>(group_size) == 0, "group advantages: ",
           rewards.size(), " rewards are not whole groups of ", group_size);
  std::vector<double> adv(rewards.size(), 0.0);
  const size_t g = static_cast<size_t>(group_size);
  for (size_t start = 0; start < rewards.size(); start += g) {
    double mean = 0;
    for (size_t i = 0; i < g; ++i) mean += rewards[start + i];
    mean /= static_cast<double>(g);
    double var = 0;
    for (size_t i = 0; i < g; ++i) var += (rewards[start + i] - mean) * (rewards[start + i] - mean);
    const double sd = g > 1 ? std::sqrt(var / static_cast<double>(g - 1)) : 0.0;
    if (sd == 0) continue;  // all equal: no signal
    for (size_t i = 0; i < g; ++i) adv[start + i] = (rewards[start + i] - mean) / (sd + eps);
  }
  return adv;
}

}  // namespace mc::rl
