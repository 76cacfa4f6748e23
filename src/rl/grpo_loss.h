// The clipped policy loss of GRPO, per token, with token-level normalization:
//
//   ρ_t = exp(log π_θ(t) − log π_old(t))      (π_old: the policy that sampled)
//   L   = (1/N) Σ_t m_t · −min(ρ_t·A_t, clip(ρ_t, 1 − ε_low, 1 + ε_high)·A_t)
//         + β · (1/N) Σ_t m_t · (e^{r_t} − r_t − 1),  r_t = log π_ref(t) − log π_θ(t)   (k3 KL, β = 0: off)
//
// m_t selects the tokens trained on: turn-1 tokens of the sequences MirrorPop kept (later
// turns shape the reward only, prime_echo.h). A_t is the advantage of the token's trajectory
// (advantages.h). N is the number of selected tokens over all ranks, so every token weighs the
// same wherever it lands.
#pragma once

#include <ATen/ATen.h>

namespace mc::rl {

struct PolicyLossOptions {
  double clip_low = 0.2, clip_high = 0.2;  // ε_low, ε_high
  double kl_coef = 0;                      // β; needs ref_logp when > 0
};

struct PolicyLoss {
  at::Tensor loss;            // scalar, differentiable in logp
  double clip_fraction = 0;   // share of selected tokens where the clipped term was taken
  double kl = 0;              // mean k3 estimate over selected tokens (0 without ref_logp)
  double ratio_mean = 0;      // mean ρ over selected tokens
  double tokens = 0;          // selected tokens on this rank
  // Where the update's push comes from: Σ m_t·|A_t|·(1 − p_t) over tokens with A_t > 0 and
  // A_t < 0, p_t = π_θ(t). 1 − p_t bounds the size of ∂log p_t/∂logits (‖e_t − π‖ lies between
  // 1 − p_t and √2·(1 − p_t)), so a token the policy already predicts with p ≈ 1 pushes nothing
  // whatever its advantage. A memorized policy's passing copies push little; the tokens of a
  // failing near-copy, after its slip, can push a lot (docs/results.md).
  double push_pos = 0, push_neg = 0;
};

// logp [T] (requires grad), old_logp [T], advantages [T], mask [T] (bool or 0/1),
// ref_logp [T] or undefined. `normalizer` > 0: the global N; otherwise this call's mask sum.
PolicyLoss clipped_policy_loss(const at::Tensor& logp, const at::Tensor& old_logp, const at::Tensor& advantages,
                               const at::Tensor& mask, const PolicyLossOptions& o, const at::Tensor& ref_logp = {},
                               double normalizer = 0);

}  // namespace mc::rl
