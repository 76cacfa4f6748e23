// MirrorPop: drop sequences whose trainer and rollout policies disagree.
//
//   keep(seq) ⇔ (1/|seq|) Σ_{t∈seq} |log π_train(t) − log π_rollout(t)| ≤ δ
//
// The trainer recomputes the log-prob of every sampled token; the engine recorded its own when
// it sampled. They differ through numerics (CUDA graphs, decode kernels, bf16) and through
// staleness (rollouts one step old under asynchrony). A sequence past δ is not trained on.
// Sequences are packed back to back: `cu_seqlens` [S + 1] holds their offsets into the
// per-token tensors [T].
#pragma once

#include <ATen/ATen.h>

namespace mc::rl {

struct MirrorPopResult {
  at::Tensor keep;               // [S] bool
  at::Tensor mean_abs_log_ratio; // [S] float64
  double filtered_share = 0;     // dropped / S
  double mean_abs = 0;           // mean over sequences of mean_abs_log_ratio
};

// `enabled` false (--no-mirrorpop) keeps every sequence but still reports the statistics.
MirrorPopResult mirror_pop(const at::Tensor& train_logp, const at::Tensor& rollout_logp, const at::Tensor& cu_seqlens,
                           double delta, bool enabled = true);

}  // namespace mc::rl
