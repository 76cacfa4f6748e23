#include "rl/advantages.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"

namespace mc::rl {

std::vector<double> group_advantages(const std::vector<double>& rewards, int group_size, double eps, double std_floor) {
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
    // All equal, up to rounding (the mean of equal doubles can differ from them in the last bit).
    if (sd < 1e-9) continue;
    const double scale = std::max(sd, std_floor) + eps;
    for (size_t i = 0; i < g; ++i) adv[start + i] = (rewards[start + i] - mean) / scale;
  }
  return adv;
}

}  // namespace mc::rl
