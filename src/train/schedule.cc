#include "train/schedule.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"

namespace mc::train {

double LrSchedule::at(int64_t step) const {
  MC_CHECK(kind == "cosine" || kind == "constant", "--schedule must be cosine or constant, got '", kind, "'");
  if (step < warmup_steps) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (kind == "constant") return lr;
  int64_t decay = std::max<int64_t>(1, total_steps - warmup_steps - 1);
  double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(decay));
  return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace mc::train
