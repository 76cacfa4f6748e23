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

}  // namespace

at::Tensor linear_cross_entropy_sum(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                                    int64_t chunk_rows) {
  MC_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1), "linear_cross_entropy: hidden [n, H] and weight [V, H] expected");
  MC_CHECK(targets.dim() == 1 && targets.size(0) == hidden.size(0), "linear_cross_entropy: one target per row expected");
  return LinearCrossEntropy::apply(hidden, weight, targets.to(hidden.device(), at::kLong), chunk_rows);
}

}  // namespace mc::train
