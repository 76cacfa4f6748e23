#include "rl/grpo_loss.h"

#include <ATen/core/grad_mode.h>

#include "common/check.h"

namespace mc::rl {

PolicyLoss clipped_policy_loss(const at::Tensor& logp, const at::Tensor& old_logp, const at::Tensor& advantages,
                               const at::Tensor& mask, const PolicyLossOptions& o, const at::Tensor& ref_logp,
                               double normalizer) {
  MC_CHECK(logp.dim() == 1 && old_logp.sizes() == logp.sizes() && advantages.sizes() == logp.sizes() &&
               mask.sizes() == logp.sizes(),
           "policy loss: logp ", logp.sizes(), ", old_logp ", old_logp.sizes(), ", advantages ", advantages.sizes(),
           " and mask ", mask.sizes(), " must be the same 1-D length");
  MC_CHECK(o.kl_coef == 0 || ref_logp.defined(), "policy loss: a KL coefficient needs the reference log-probs");
  auto m = mask.to(logp.options().dtype(at::kFloat));
  auto lp = logp.to(at::kFloat);
  auto adv = advantages.to(lp.options());
  PolicyLoss r;
  r.tokens = m.sum().item<double>();
  const double n = normalizer > 0 ? normalizer : std::max(1.0, r.tokens);
  auto ratio = at::exp(lp - old_logp.to(lp.options()));
  auto unclipped = ratio * adv;
  auto clipped = at::clamp(ratio, 1.0 - o.clip_low, 1.0 + o.clip_high) * adv;
  auto per_token = -at::minimum(unclipped, clipped);
  r.loss = (per_token * m).sum() / n;
  {
    at::NoGradGuard ng;
    const double t = std::max(1.0, r.tokens);
    r.clip_fraction = ((clipped < unclipped).to(at::kFloat) * m).sum().item<double>() / t;
    r.ratio_mean = (ratio * m).sum().item<double>() / t;
    auto push = adv.abs() * (1 - at::exp(lp)) * m;
    r.push_pos = (push * (adv > 0).to(at::kFloat)).sum().item<double>();
    r.push_neg = (push * (adv < 0).to(at::kFloat)).sum().item<double>();
  }
  if (ref_logp.defined()) {
    auto d = ref_logp.to(lp.options()) - lp;
    auto k3 = at::exp(d) - d - 1;
    {
      at::NoGradGuard ng;
      r.kl = (k3 * m).sum().item<double>() / std::max(1.0, r.tokens);
    }
    if (o.kl_coef > 0) r.loss = r.loss + o.kl_coef * (k3 * m).sum() / n;
  }
  return r;
}

}  // namespace mc::rl
