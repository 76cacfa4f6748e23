#include "train/loss.h"

#include <torch/csrc/autograd/custom_function.h>

#include "common/check.h"

namespace mc::train {
namespace {

struct LinearCrossEntropy : torch::autograd::Function<LinearCrossEntropy> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& targets, int64_t chunk_rows) {
    const int64_t n = hidden.size(0);
    auto grad_h = at::empty_like(hidden);
    auto grad_w = weight.requires_grad() ? at::zeros(weight.sizes(), weight.options().dtype(at::kFloat)) : at::Tensor();
    auto loss = at::zeros({}, hidden.options().dtype(at::kFloat));
    // bf16/fp16 on CUDA: GEMMs with fp32 outputs (cuBLAS accumulates in fp32 either way), so
    // neither the logits nor the weight gradient are rounded to 16 bits, and no GEMM runs in
    // fp32 (which would be ~10x slower than the 16-bit tensor cores).
    const bool low = hidden.is_cuda() && (hidden.scalar_type() == at::kBFloat16 || hidden.scalar_type() == at::kHalf);
    for (int64_t r0 = 0; r0 < n; r0 += chunk_rows) {
      int64_t m = std::min(chunk_rows, n - r0);
      auto h = hidden.narrow(0, r0, m);
      auto t = targets.narrow(0, r0, m);
      auto logits = low ? at::mm(h, weight.t(), at::kFloat) : at::linear(h, weight).to(at::kFloat);  // [m, V]
      auto lse = at::logsumexp(logits, -1);
      loss += (lse - logits.gather(1, t.unsqueeze(1)).squeeze(1)).sum();
      // d loss / d logits = softmax - one_hot, computed in place over the logits.
      auto g = logits.sub_(lse.unsqueeze(1)).exp_();
      g.scatter_add_(1, t.unsqueeze(1), at::full({m, 1}, -1.0f, g.options()));
      auto g_low = g.to(hidden.scalar_type());
      auto gh = grad_h.narrow(0, r0, m);  // rows of a contiguous tensor: contiguous
      at::mm_out(gh, g_low, weight);
      if (grad_w.defined()) {
        if (low) {
          grad_w.add_(at::mm(g_low.t(), h, at::kFloat));
        } else {
          grad_w.addmm_(g.t(), h.to(at::kFloat));
        }
      }
    }
    ctx->save_for_backward({grad_h, grad_w});
    ctx->saved_data["weight_dtype"] = weight.scalar_type();
    return loss;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grad) {
    auto saved = ctx->get_saved_variables();
    auto scale = grad[0];
    at::Tensor gh = saved[0] * scale.to(saved[0].scalar_type());
    at::Tensor gw = saved[1].defined() ? (saved[1] * scale).to(ctx->saved_data["weight_dtype"].toScalarType()) : at::Tensor();
    return {gh, gw, at::Tensor(), at::Tensor()};
  }
};

// Logits of rows [r0, r0 + m) in fp32, divided by the temperature.
at::Tensor chunk_logits(const at::Tensor& h, const at::Tensor& weight, double temperature) {
  const bool low = h.is_cuda() && (h.scalar_type() == at::kBFloat16 || h.scalar_type() == at::kHalf);
  auto logits = low ? at::mm(h, weight.t(), at::kFloat) : at::linear(h, weight).to(at::kFloat);
  if (temperature != 1.0) logits.div_(temperature);
  return logits;
}

struct LinearTokenLogProbs : torch::autograd::Function<LinearTokenLogProbs> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& hidden,
                                                const at::Tensor& weight, const at::Tensor& targets, double temperature,
                                                int64_t chunk_rows) {
    const int64_t n = hidden.size(0);
    auto logp = at::empty({n}, hidden.options().dtype(at::kFloat));
    auto entropy = at::empty({n}, hidden.options().dtype(at::kFloat));
    auto lse_all = at::empty({n}, hidden.options().dtype(at::kFloat));
    for (int64_t r0 = 0; r0 < n; r0 += chunk_rows) {
      int64_t m = std::min(chunk_rows, n - r0);
      auto t = targets.narrow(0, r0, m);
      auto z = chunk_logits(hidden.narrow(0, r0, m), weight, temperature);  // [m, V]
      auto lse = at::logsumexp(z, -1);
      lse_all.narrow(0, r0, m).copy_(lse);
      logp.narrow(0, r0, m).copy_(z.gather(1, t.unsqueeze(1)).squeeze(1) - lse);
      // H = lse - sum p z
      auto p = (z - lse.unsqueeze(1)).exp_();
      entropy.narrow(0, r0, m).copy_(lse - (p * z).sum(-1));
    }
    ctx->save_for_backward({hidden, weight, targets, lse_all});
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["chunk_rows"] = chunk_rows;
    ctx->mark_non_differentiable({entropy});
    return {logp, entropy};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grad) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &hidden = saved[0], &weight = saved[1], &targets = saved[2], &lse_all = saved[3];
    const double temperature = ctx->saved_data["temperature"].toDouble();
    const int64_t chunk_rows = ctx->saved_data["chunk_rows"].toInt();
    const int64_t n = hidden.size(0);
    at::Tensor g = grad[0].defined() ? grad[0].to(at::kFloat) : at::zeros({n}, hidden.options().dtype(at::kFloat));
    auto grad_h = at::empty_like(hidden);
    auto grad_w = at::zeros(weight.sizes(), weight.options().dtype(at::kFloat));
    const bool low = hidden.is_cuda() && (hidden.scalar_type() == at::kBFloat16 || hidden.scalar_type() == at::kHalf);
    for (int64_t r0 = 0; r0 < n; r0 += chunk_rows) {
      int64_t m = std::min(chunk_rows, n - r0);
      auto h = hidden.narrow(0, r0, m);
      auto t = targets.narrow(0, r0, m);
      auto gr = g.narrow(0, r0, m);
      // d logp / d z = one_hot - softmax(z); z = logits / T, so d/d logits carries 1/T.
      auto G = chunk_logits(h, weight, temperature).sub_(lse_all.narrow(0, r0, m).unsqueeze(1)).exp_();
      G.mul_(gr.unsqueeze(1)).neg_();
      G.scatter_add_(1, t.unsqueeze(1), gr.unsqueeze(1));
      if (temperature != 1.0) G.div_(temperature);
      auto G_low = G.to(hidden.scalar_type());
      auto gh = grad_h.narrow(0, r0, m);
      at::mm_out(gh, G_low, weight);
      if (low) {
        grad_w.add_(at::mm(G_low.t(), h, at::kFloat));
      } else {
        grad_w.addmm_(G.t(), h.to(at::kFloat));
      }
    }
    return {grad_h, grad_w.to(weight.scalar_type()), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

TokenLogProbs linear_token_logprobs(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                                    double temperature, int64_t chunk_rows) {
  MC_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
           "linear_token_logprobs: hidden [n, H] and weight [V, H] expected");
  MC_CHECK(targets.dim() == 1 && targets.size(0) == hidden.size(0), "linear_token_logprobs: one target per row expected");
  MC_CHECK(temperature > 0, "linear_token_logprobs: temperature must be > 0, got ", temperature);
  auto out = LinearTokenLogProbs::apply(hidden, weight, targets.to(hidden.device(), at::kLong), temperature, chunk_rows);
  return {out[0], out[1]};
}

at::Tensor linear_cross_entropy_sum(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                                    int64_t chunk_rows) {
  MC_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1), "linear_cross_entropy: hidden [n, H] and weight [V, H] expected");
  MC_CHECK(targets.dim() == 1 && targets.size(0) == hidden.size(0), "linear_cross_entropy: one target per row expected");
  return LinearCrossEntropy::apply(hidden, weight, targets.to(hidden.device(), at::kLong), chunk_rows);
}

}  // namespace mc::train
