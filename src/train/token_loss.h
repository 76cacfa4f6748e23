// The language-model loss of packed micro-batches: what SFT minimizes, and what measures a
// held-out set (SFT's --eval-data) or RL's anchor set (--anchor-data: how much of what SFT
// taught an RL run has lost) without a gradient.
#pragma once

#include <vector>

#include <ATen/ATen.h>

#include "model/qwen_model.h"
#include "train/batching.h"
#include "train/dataset.h"
#include "train/distributed.h"

namespace mc::train {

// Sum of the cross-entropy over the micro-batch's target tokens (a scalar with a graph).
at::Tensor micro_batch_loss(const model::QwenModel& m, const MicroBatch& mb, bool checkpoint_layers);

// Mean cross-entropy per target token over `data`, no gradient; micro-batches are shared out
// over the ranks (every rank must call it) and the sums all-reduced.
double mean_token_loss(const model::QwenModel& m, const std::vector<Example>& data, int64_t micro_batch_tokens,
                       Distributed& dist);

}  // namespace mc::train
