#include "synth/kernel_helpers.h"

namespace mc::synth {

RowIdx row_idx(const Shape& shape, int d0, int d1) {
  int64_t a = 1, r = 1, b = 1;
  for (int i = 0; i < static_cast<int>(shape.size()); ++i) (i < d0 ? a : i < d1 ? r : b) *= shape[i];
  RowIdx x;
  x.rows = a * b;
  x.len = r;
  x.at = [r, b](const std::string& row, const std::string& e) {
    if (b == 1) return "((" + row + ") * " + lit(r) + " + (" + e + "))";
    return "(((" + row + ") / " + lit(b) + ") * " + lit(r * b) + " + (" + e + ") * " + lit(b) +
           " + (" + row + ") % " + lit(b) + ")";
  };
  return x;
}

RowIdx channel_rows(const Shape& shape) {
  int64_t n = shape[0], c = shape[1], s = 1;
  for (size_t i = 2; i < shape.size(); ++i) s *= shape[i];
  RowIdx x;
  x.rows = c;
  x.len = n * s;
  x.at = [c, s](const std::string& row, const std::string& e) {
    return "(((" + e + ") / " + lit(s) + ") * " + lit(c * s) + " + (" + row + ") * " + lit(s) +
           " + (" + e + ") % " + lit(s) + ")";
  };
  return x;
}

int row_block(int64_t len) {
  int b = 32;
  while (b < len && b < 512) b *= 2;
  return b;
}

Kernel gather_kernel(const Shape& out, const std::string& body) {
  int64_t n = std::max<int64_t>(1, numel(out));
  Kernel k;
  k.block = 256;
  k.grid = std::to_string(std::min<int64_t>((n + 255) / 256, 65536));
  std::string b = "  for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < " + lit(n) +
                  "; o += (long long)gridDim.x * blockDim.x) {\n";
  Shape st = strides_of(out);
  for (size_t i = 0; i < out.size(); ++i)
    b += "    const long long c" + std::to_string(i) + " = (o / " + lit(st[i]) + ") % " + lit(out[i]) + ";\n";
  b += body + "  }\n";
  k.body = b;
  return k;
}

std::string teacher_prelude() {
  return R"(#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

// Teacher kernels accumulate in double: the result is then within half an ulp of the exact
// value, and the synthesizer keeps only problems whose fp32 reference is itself within the
// tolerance of the exact value (the conditioning probe), so an honest kernel never loses to a
// different summation order.
struct McSum { template <class T> __device__ T operator()(T a, T b) const { return a + b; } };
struct McMax { template <class T> __device__ T operator()(T a, T b) const { return a > b ? a : b; } };
struct McMin { template <class T> __device__ T operator()(T a, T b) const { return a < b ? a : b; } };
struct McProd { template <class T> __device__ T operator()(T a, T b) const { return a * b; } };

template <typename T, typename Op>
__device__ __forceinline__ T mc_warp_reduce(T v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Reduces v over the block (blockDim.x a multiple of 32); every thread gets the result.
template <typename T, typename Op>
__device__ T mc_block_reduce(T v, Op op, T identity) {
  __shared__ T sh[32];
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = mc_warp_reduce(v, op);
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  v = threadIdx.x < nw ? sh[threadIdx.x] : identity;
  if (w == 0) v = mc_warp_reduce(v, op);
  if (threadIdx.x == 0) sh[0] = v;
  __syncthreads();
  v = sh[0];
  __syncthreads();
  return v;
}
__device__ __forceinline__ double mc_block_sum(double v) { return mc_block_reduce(v, McSum(), 0.0); }
__device__ __forceinline__ float mc_block_max(float v) { return mc_block_reduce(v, McMax(), -INFINITY); }

// (value, index) reduction keeping the first index among equal values; `greater` picks argmax.
__device__ void mc_block_arg(float& v, long long& i, bool greater) {
  __shared__ float sv[32];
  __shared__ long long si[32];
  auto better = [greater](float a, long long ia, float b, long long ib) {
    if (a == b) return ia < ib;
    if (isnan(a)) return true;
    if (isnan(b)) return false;
    return greater ? a > b : a < b;
  };
  for (int o = 16; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(0xffffffffu, v, o);
    long long oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (better(ov, oi, v, i)) { v = ov; i = oi; }
  }
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) { sv[w] = v; si[w] = i; }
  __syncthreads();
  if (w == 0) {
    v = lane < nw ? sv[lane] : (greater ? -INFINITY : INFINITY);
    i = lane < nw ? si[lane] : 0x7fffffffffffffffLL;
    for (int o = 16; o > 0; o >>= 1) {
      float ov = __shfl_xor_sync(0xffffffffu, v, o);
      long long oi = __shfl_xor_sync(0xffffffffu, i, o);
      if (better(ov, oi, v, i)) { v = ov; i = oi; }
    }
    if (lane == 0) { sv[0] = v; si[0] = i; }
  }
  __syncthreads();
  v = sv[0];
  i = si[0];
  __syncthreads();
}

// Inclusive scan of one value per thread over the block (blockDim.x <= 1024); `exclusive`
// receives the combination of the earlier threads' values (identity for thread 0).
template <typename T, typename Op>
__device__ T mc_block_scan(T v, Op op, T identity, T* exclusive) {
  __shared__ T sh[1024];
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int o = 1; o < blockDim.x; o <<= 1) {
    T t = threadIdx.x >= o ? sh[threadIdx.x - o] : identity;
    __syncthreads();
    if (threadIdx.x >= o) sh[threadIdx.x] = op(t, sh[threadIdx.x]);
    __syncthreads();
  }
  v = sh[threadIdx.x];
  *exclusive = threadIdx.x ? sh[threadIdx.x - 1] : identity;
  __syncthreads();
  return v;
}
)";
}

}  // namespace mc::synth
