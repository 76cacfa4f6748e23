// problem: 1_Add
// expect: runtime_error
// expect-runtime: runtime_error
// fault: a native kernel computes every element right but writes an eighth more than its
// output holds (a size hard-coded too large, no bounds check): the guard zone after the output
// must catch it in the first correctness trial, where the write would otherwise land unseen.
#include <cuda_runtime.h>
#include "musacoder/native_abi.h"

__global__ void add_past_end(const float* a, const float* b, float* y, long long n, long long m) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < m;
       i += (long long)gridDim.x * blockDim.x)
    y[i] = i < n ? a[i] + b[i] : 0.0f;
}

extern "C" int mc_forward(const mc_tensor* in, int n_in, mc_tensor* out, int n_out,
                          cudaStream_t stream) {
  if (n_in < 2 || n_out != 1) return 1;
  long long n = in[0].shape[0];
  add_past_end<<<1024, 256, 0, stream>>>((const float*)in[0].data, (const float*)in[1].data,
                                         (float*)out[0].data, n, n + n / 8 + 1);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
