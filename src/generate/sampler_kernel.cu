// One block per row: a single pass over the vocabulary keeps, per thread, the running max and
// sum of exp (online softmax) and the best Gumbel-perturbed allowed token; the block then
// merges them. Reads the logits once, in their own dtype.
#include "generate/sampler_kernel.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "generate/counter_rng.h"

namespace mc::gen {
namespace {

constexpr int kThreads = 512;

struct RowState {
  float m, s;       // running max and sum of exp(x - m)
  float best, bx;   // best score, its scaled logit
  long long arg;    // its index
};

__device__ __forceinline__ void merge(RowState& a, const RowState& b) {
  if (b.m > a.m) {
    a.s = a.s * __expf(a.m - b.m) + b.s;
    a.m = b.m;
  } else if (b.m > -INFINITY) {
    a.s += b.s * __expf(b.m - a.m);
  }
  if (b.best > a.best || (b.best == a.best && b.arg < a.arg)) {
    a.best = b.best;
    a.bx = b.bx;
    a.arg = b.arg;
  }
}

template <typename T>
__global__ void sample_kernel(const T* __restrict__ logits, int64_t V, const float* __restrict__ temp,
                              const float* __restrict__ cut, const int64_t* __restrict__ seed,
                              const int64_t* __restrict__ step, int64_t* __restrict__ tok, float* __restrict__ lp) {
  const int64_t r = blockIdx.x;
  const T* row = logits + r * V;
  const bool greedy = temp[r] <= 0.f;
  const float inv_t = greedy ? 1.f : 1.f / temp[r];
  const float c = cut[r];
  const uint64_t key = step_key(static_cast<uint64_t>(seed[r]), static_cast<uint64_t>(step[r]));
  RowState st{-INFINITY, 0.f, -INFINITY, -INFINITY, 0};
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
    float x = static_cast<float>(row[i]) * inv_t;
    if (x > st.m) {
      st.s = st.s * __expf(st.m - x) + 1.f;
      st.m = x;
    } else {
      st.s += __expf(x - st.m);
    }
    if (x < c) continue;
    float score = greedy ? x : x + gumbel(key, static_cast<uint64_t>(i));
    if (score > st.best) {
      st.best = score;
      st.bx = x;
      st.arg = i;
    }
  }
  // Warp then block reduction.
  for (int off = 16; off > 0; off >>= 1) {
    RowState o;
    o.m = __shfl_down_sync(0xffffffff, st.m, off);
    o.s = __shfl_down_sync(0xffffffff, st.s, off);
    o.best = __shfl_down_sync(0xffffffff, st.best, off);
    o.bx = __shfl_down_sync(0xffffffff, st.bx, off);
    o.arg = __shfl_down_sync(0xffffffff, st.arg, off);
    merge(st, o);
  }
  __shared__ RowState warps[kThreads / 32];
  if ((threadIdx.x & 31) == 0) warps[threadIdx.x >> 5] = st;
  __syncthreads();
  if (threadIdx.x == 0) {
    RowState a = warps[0];
    for (int w = 1; w < kThreads / 32; ++w) merge(a, warps[w]);
    tok[r] = a.arg;
    lp[r] = a.bx - (a.m + __logf(a.s));
  }
}

}  // namespace

void sample_cuda(const at::Tensor& logits, const at::Tensor& temperature, const at::Tensor& cutoff, const at::Tensor& seed,
                 const at::Tensor& step, at::Tensor& tokens, at::Tensor& logprobs) {
  const int64_t S = logits.size(0), V = logits.size(1);
  if (S == 0) return;
  auto stream = at::cuda::getCurrentCUDAStream();
  auto launch = [&](auto* ptr) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(ptr)>>;
    sample_kernel<T><<<S, kThreads, 0, stream>>>(ptr, V, temperature.data_ptr<float>(), cutoff.data_ptr<float>(),
                                                 seed.data_ptr<int64_t>(), step.data_ptr<int64_t>(),
                                                 tokens.data_ptr<int64_t>(), logprobs.data_ptr<float>());
  };
  switch (logits.scalar_type()) {
    case at::kFloat: launch(logits.data_ptr<float>()); break;
    case at::kBFloat16: launch(reinterpret_cast<const __nv_bfloat16*>(logits.data_ptr<at::BFloat16>())); break;
    case at::kHalf: launch(reinterpret_cast<const __half*>(logits.data_ptr<at::Half>())); break;
    default: TORCH_CHECK(false, "cannot sample from logits of dtype ", logits.scalar_type());
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace mc::gen
