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

// The log-probability of each row's target under softmax(hidden @ weight^T / temperature), as
// RL needs it per token (the policy ratio), with the same chunking: logp [n] fp32,
// differentiable in hidden and weight, and the entropy of each row's distribution [n] fp32
// (no gradient; logged). Unlike the summed loss above, the gradient arriving per row is not
// known in forward, so backward recomputes each chunk's logits instead of keeping [n, vocab].
struct TokenLogProbs {
  at::Tensor logp, entropy;
};
TokenLogProbs linear_token_logprobs(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                                    double temperature = 1.0, int64_t chunk_rows = 4096);

}  // namespace mc::train
