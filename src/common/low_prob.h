// Sampling slips: tokens a policy drew at a probability it itself put below kLowProbability
// (under the sampling temperature, as the engine reports log-probabilities). On long answers a
// small model's compile errors track them (docs/results.md): the RFT
// report counts them by verdict, RL's step metrics per 1,000 turn-1 tokens.
#pragma once

#include <cmath>
#include <cstddef>

namespace mc {

constexpr double kLowProbability = 0.1;

// How many of `n` log-probabilities lie below log(kLowProbability).
template <typename T>
int count_low_prob(const T* logprobs, size_t n) {
  const double cut = std::log(kLowProbability);
  int k = 0;
  for (size_t i = 0; i < n; ++i) k += static_cast<double>(logprobs[i]) < cut;
  return k;
}

}  // namespace mc
