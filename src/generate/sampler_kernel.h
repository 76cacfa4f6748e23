// The CUDA half of the sampler (sampler_kernel.cu), called by sampler.cc.
#pragma once

#include <ATen/ATen.h>

namespace mc::gen {

void sample_cuda(const at::Tensor& logits, const at::Tensor& temperature, const at::Tensor& cutoff, const at::Tensor& seed,
                 const at::Tensor& step, at::Tensor& tokens, at::Tensor& logprobs);

}  // namespace mc::gen
