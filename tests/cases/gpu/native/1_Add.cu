// problem: 1_Add
// expect: ok
#include <cuda_runtime.h>
#include "musacoder/native_abi.h"

__global__ void add_kernel(const float* a, const float* b, float* y, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    y[i] = a[i] + b[i];
}

extern "C" int mc_forward(const mc_tensor* in, int n_in, mc_tensor* out, int n_out,
                          cudaStream_t stream) {
  if (n_in < 2 || n_out != 1) return 1;
  long long n = in[0].shape[0];
  add_kernel<<<1024, 256, 0, stream>>>((const float*)in[0].data, (const float*)in[1].data,
                                       (float*)out[0].data, n);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
