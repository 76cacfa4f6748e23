// Next-token sampling for a batch of sequences, each with its own temperature, top-k, top-p and
// seed: one fused pass per row (a CUDA kernel on the GPU, the same loop on the CPU) that draws
// the token by Gumbel-max among the allowed tokens and returns its log-probability.
//
// The log-probability is that of the temperature-scaled distribution log softmax(logits / T)
// before top-k / top-p truncation (T = 1 for greedy rows): what a trainer recomputes with a
// forward pass at the same temperature, as RL importance ratios need.
#pragma once

#include <ATen/ATen.h>

namespace mc::gen {

struct SamplerBatch {
  at::Tensor temperature;  // [S] fp32; 0 = greedy
  at::Tensor top_p;        // [S] fp32; 1 = off
  at::Tensor top_k;        // [S] int64; 0 = off
  at::Tensor seed;         // [S] int64
  at::Tensor step;         // [S] int64: the sequence's number of sampled tokens so far
  bool any_top_p = false, any_top_k = false;  // lets the common case skip the sort
};

struct Sampled {
  at::Tensor tokens;    // [S] int64
  at::Tensor logprobs;  // [S] fp32
};

// logits [S, vocab] (any floating dtype) on the CPU or a CUDA device.
Sampled sample(const at::Tensor& logits, const SamplerBatch& b);

// sample() on a CUDA device into `tokens` [S] int64 and `logprobs` [S] fp32 there: no output
// allocated and, without top-k rows, no host sync, so a CUDA graph captures it with the model
// step (the engine does). The batch's tensors must be on the logits' device.
void sample_into(const at::Tensor& logits, const SamplerBatch& b, at::Tensor& tokens, at::Tensor& logprobs);

// The smallest temperature-scaled logit each row may sample (-inf: all): the k-th largest for
// top-k, the one that completes probability mass p for top-p, the larger of the two.
at::Tensor sampling_cutoff(const at::Tensor& logits, const SamplerBatch& b);

}  // namespace mc::gen
