#include "train/token_loss.h"

#include <algorithm>

#include <c10/core/GradMode.h>

#include "train/loss.h"
#include "train/weight_shards.h"

namespace mc::train {

at::Tensor micro_batch_loss(const model::QwenModel& m, const MicroBatch& mb, bool checkpoint_layers) {
  auto h = m.hidden_states_packed(mb.tokens, checkpoint_layers);
  auto targets = mb.targets.to(h.device());
  auto rows = targets.ne(-100).nonzero().squeeze(1);
  return linear_cross_entropy_sum(h.index_select(0, rows), m.lm_head_weight(), targets.index_select(0, rows));
}

double mean_token_loss(const model::QwenModel& m, const std::vector<Example>& data, int64_t micro_batch_tokens,
                       Distributed& dist) {
  c10::AutoGradMode no_grad(false);
  std::vector<int64_t> all(data.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  auto mbs = pack(data, all, micro_batch_tokens);
  double sum = 0, count = 0;
  for (const auto& mb : mbs) count += mb.loss_tokens;
  // With sharded weights every rank makes the same number of passes (each gathers every layer):
  // a rank past the end runs one token and drops it.
  const size_t W = static_cast<size_t>(dist.world()), rank = static_cast<size_t>(dist.rank());
  for (size_t k = 0; k * W < mbs.size(); ++k) {
    const size_t i = k * W + rank;
    if (i < mbs.size()) sum += micro_batch_loss(m, mbs[i], false).item<double>();
    else if (m.has_layer_hooks()) (void)m.hidden_states_packed(idle_tokens());
  }
  auto t = at::tensor({sum}, at::kDouble);
  if (m.device().is_cuda()) t = t.to(m.device());
  dist.all_reduce_sum(t);
  return t.item<double>() / std::max(1.0, count);
}

}  // namespace mc::train
