// The learning-rate schedule: linear warmup to --lr over --warmup-steps, then cosine decay to
// --min-lr at the last step (or constant at --lr). step is 0-based; the first step already
// trains (warmup lr = lr * (step + 1) / warmup_steps, never 0).
#pragma once

#include <cstdint>
#include <string>

namespace mc::train {

struct LrSchedule {
  std::string kind = "cosine";  // cosine | constant
  double lr = 1e-5, min_lr = 0;
  int64_t warmup_steps = 0, total_steps = 1;
  double at(int64_t step) const;
};

}  // namespace mc::train
