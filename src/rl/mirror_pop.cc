#include "rl/mirror_pop.h"

#include "common/check.h"

namespace mc::rl {

MirrorPopResult mirror_pop(const at::Tensor& train_logp, const at::Tensor& rollout_logp, const at::Tensor& cu_seqlens,
                           double delta, bool enabled) {
  MC_CHECK(train_logp.dim() == 1 && train_logp.sizes() == rollout_logp.sizes(), "MirrorPop: log-probs ",
           train_logp.sizes(), " and ", rollout_logp.sizes(), " must be the same 1-D length");
  MC_CHECK(cu_seqlens.dim() == 1 && cu_seqlens.size(0) >= 2, "MirrorPop: cu_seqlens needs at least 2 offsets");
  auto cu = cu_seqlens.to(at::kCPU, at::kLong);
  MC_CHECK(cu[0].item<int64_t>() == 0 && cu[-1].item<int64_t>() == train_logp.size(0), "MirrorPop: cu_seqlens must run from 0 to ",
           train_logp.size(0));
  auto lengths = cu.slice(0, 1) - cu.slice(0, 0, -1);
  MC_CHECK(lengths.min().item<int64_t>() > 0, "MirrorPop: empty sequence in cu_seqlens");
  const int64_t S = lengths.size(0);
  auto diff = (train_logp.detach().to(at::kDouble) - rollout_logp.detach().to(at::kDouble)).abs().cpu();
  auto seq = at::repeat_interleave(at::arange(S, at::kLong), lengths);
  auto sums = at::zeros({S}, at::kDouble).index_add_(0, seq, diff);
  MirrorPopResult r;
  r.mean_abs_log_ratio = sums / lengths.to(at::kDouble);
  r.keep = enabled ? r.mean_abs_log_ratio.le(delta) : at::ones({S}, at::kBool);
  r.filtered_share = 1.0 - r.keep.to(at::kDouble).mean().item<double>();
  r.mean_abs = r.mean_abs_log_ratio.mean().item<double>();
  return r;
}

}  // namespace mc::rl
