// problem: 2_ReLU
// expect: ok
// Native format: no torch headers, raw pointers (include/musacoder/native_abi.h).
#include <cuda_runtime.h>
#include "musacoder/native_abi.h"

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaxf(x[i], 0.0f);
}

extern "C" int mc_forward(const mc_tensor* in, int n_in, mc_tensor* out, int n_out,
                          cudaStream_t stream) {
  if (n_in < 1 || n_out != 1 || in[0].dtype != MC_FLOAT32) return 1;
  long long n = 1;
  for (int d = 0; d < in[0].ndim; ++d) n *= in[0].shape[d];
  relu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>((const float*)in[0].data,
                                                              (float*)out[0].data, n);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
