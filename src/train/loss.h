// The language-modeling loss without the [tokens, vocab] logits: the LM head and the cross
// entropy are fused and computed in chunks of rows. The forward pass computes, chunk by chunk,
// the logits in fp32, the loss, and at once the gradient of the loss with respect to the
// hidden states and the head's weight (softmax minus one-hot), accumulating the weight's
// gradient in fp32; backward only scales what was kept. Memory: [rows, hidden] + [vocab,
// hidden] fp32 instead of [rows, vocab] fp32 logits and their log-softmax.
#pragma once

#include <ATen/ATen.h>

namespace mc::train {

// Sum over rows of -log softmax(hidden @ weight^T)[target]: hidden [n, H], weight [V, H],
// targets [n] int64 (every row a target). Differentiable in hidden and weight.
at::Tensor linear_cross_entropy_sum(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                                    int64_t chunk_rows = 4096);

}  // namespace mc::train
