// The CUDA part of MooreEval's torch shim (see torch_shim.h): what <ATen/cuda/CUDAContext.h>,
// <c10/cuda/CUDAStream.h>, <c10/cuda/CUDAGuard.h> and <c10/cuda/CUDAException.h> give kernels.
// Kept out of torch_shim.h because <torch/extension.h> does not provide it either: a source
// that uses the current stream without including a CUDA header must fail here as it fails
// with libtorch's headers.
#pragma once

#include <cuda_runtime.h>

#include "musacoder/torch_shim.h"

namespace at {
namespace cuda {
// What at::cuda::getCurrentCUDAStream() returns, as far as kernels use it.
class CUDAStream {
 public:
  explicit CUDAStream(cudaStream_t s) : s_(s) {}
  cudaStream_t stream() const { return s_; }
  operator cudaStream_t() const { return s_; }

 private:
  cudaStream_t s_;
};
inline CUDAStream getCurrentCUDAStream(int device_index = -1) {
  if (device_index < 0) {
    int d = 0;
    cudaGetDevice(&d);
    device_index = d;
  }
  return CUDAStream(static_cast<cudaStream_t>(mc_shim::ops()->current_stream(device_index)));
}
inline CUDAStream getDefaultCUDAStream(int device_index = -1) { return getCurrentCUDAStream(device_index); }
inline cudaDeviceProp* getCurrentDeviceProperties() {
  static cudaDeviceProp props[64];
  static bool have[64] = {};
  int d = 0;
  cudaGetDevice(&d);
  if (!have[d]) {
    cudaGetDeviceProperties(&props[d], d);
    have[d] = true;
  }
  return &props[d];
}
inline cudaDeviceProp* getDeviceProperties(int d) {
  static cudaDeviceProp props[64];
  cudaGetDeviceProperties(&props[d], d);
  return &props[d];
}
// Sets the device for its scope, as c10::cuda::CUDAGuard.
class CUDAGuard {
 public:
  explicit CUDAGuard(Device d) { set(d.index()); }
  explicit CUDAGuard(int index) { set(index); }
  ~CUDAGuard() {
    if (prev_ >= 0) cudaSetDevice(prev_);
  }
  CUDAGuard(const CUDAGuard&) = delete;
  CUDAGuard& operator=(const CUDAGuard&) = delete;

 private:
  void set(int index) {
    if (index < 0) return;
    cudaGetDevice(&prev_);
    cudaSetDevice(index);
  }
  int prev_ = -1;
};
using OptionalCUDAGuard = CUDAGuard;
}  // namespace cuda
}  // namespace at

namespace c10 {
namespace cuda {
using at::cuda::CUDAGuard;
using at::cuda::CUDAStream;
using at::cuda::OptionalCUDAGuard;
using at::cuda::getCurrentCUDAStream;
using at::cuda::getDefaultCUDAStream;
}  // namespace cuda
}  // namespace c10

#define C10_CUDA_CHECK(expr)                                                                      \
  do {                                                                                            \
    cudaError_t mc_shim_err = (expr);                                                             \
    if (mc_shim_err != cudaSuccess)                                                               \
      throw ::c10::Error(::c10::str("CUDA error: ", cudaGetErrorString(mc_shim_err)));           \
  } while (0)
#define C10_CUDA_KERNEL_LAUNCH_CHECK() C10_CUDA_CHECK(cudaGetLastError())
#define AT_CUDA_CHECK C10_CUDA_CHECK
