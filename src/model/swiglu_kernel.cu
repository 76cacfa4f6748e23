#include "model/swiglu_kernel.h"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

namespace mc::model {
namespace {

constexpr int kThreads = 256;

// As ATen's silu (opmath float): x / (1 + exp(-x)).
__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + ::expf(-x)); }

template <typename T>
__global__ void swiglu_fwd(const T* __restrict__ gu, T* __restrict__ out, int64_t n, int64_t inter) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x) {
    const int64_t row = i / inter, col = i - row * inter;
    const float g = static_cast<float>(gu[row * 2 * inter + col]);
    const float u = static_cast<float>(gu[row * 2 * inter + inter + col]);
    const T s = static_cast<T>(silu_f(g));                       // at::silu(g)
    out[i] = static_cast<T>(static_cast<float>(s) * u);          // * u
  }
}

template <typename T>
__global__ void swiglu_bwd(const T* __restrict__ dout, const T* __restrict__ gu, T* __restrict__ dgu, int64_t n,
                           int64_t inter) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x) {
    const int64_t row = i / inter, col = i - row * inter;
    const float d = static_cast<float>(dout[i]);
    const float g = static_cast<float>(gu[row * 2 * inter + col]);
    const float u = static_cast<float>(gu[row * 2 * inter + inter + col]);
    const float s = static_cast<float>(static_cast<T>(silu_f(g)));
    const float ds = static_cast<float>(static_cast<T>(d * u));  // mul backward: grad * other
    // silu_backward (opmath): dy * sigmoid * (1 + x * (1 - sigmoid))
    const float sig = 1.0f / (1.0f + ::expf(-g));
    dgu[row * 2 * inter + col] = static_cast<T>(ds * sig * (1.0f + g * (1.0f - sig)));
    dgu[row * 2 * inter + inter + col] = static_cast<T>(d * s);
  }
}

int blocks_for(int64_t n) {
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, sms * 16)));
}

}  // namespace

at::Tensor swiglu_forward_cuda(const at::Tensor& gate_up) {
  TORCH_CHECK(gate_up.is_cuda() && gate_up.is_contiguous() && gate_up.size(-1) % 2 == 0,
              "swiglu: expected a contiguous CUDA tensor with an even last dimension, got ", gate_up.sizes());
  const int64_t inter = gate_up.size(-1) / 2;
  auto sizes = gate_up.sizes().vec();
  sizes.back() = inter;
  auto out = at::empty(sizes, gate_up.options());
  const int64_t n = out.numel();
  if (n == 0) return out;
  auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, gate_up.scalar_type(), "swiglu_fwd", [&] {
    swiglu_fwd<scalar_t><<<blocks_for(n), kThreads, 0, stream>>>(gate_up.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), n,
                                                                 inter);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

at::Tensor swiglu_backward_cuda(const at::Tensor& grad, const at::Tensor& gate_up) {
  auto g = grad.contiguous();
  TORCH_CHECK(g.scalar_type() == gate_up.scalar_type() && g.numel() * 2 == gate_up.numel(),
              "swiglu backward: grad ", g.sizes(), " does not match gate_up ", gate_up.sizes());
  auto dgu = at::empty_like(gate_up);
  const int64_t n = g.numel();
  if (n == 0) return dgu;
  auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, gate_up.scalar_type(), "swiglu_bwd", [&] {
    swiglu_bwd<scalar_t><<<blocks_for(n), kThreads, 0, stream>>>(g.data_ptr<scalar_t>(), gate_up.data_ptr<scalar_t>(),
                                                                 dgu.data_ptr<scalar_t>(), n, gate_up.size(-1) / 2);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return dgu;
}

}  // namespace mc::model
