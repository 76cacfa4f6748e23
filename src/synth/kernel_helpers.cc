#include "synth/kernel_helpers.h"

#include <cctype>
#include <iterator>
#include <vector>

namespace mc::synth {

RowIdx row_idx(const Dims& shape, int d0, int d1) {
  Dim a = 1, r = 1, b = 1;
  for (int i = 0; i < static_cast<int>(shape.size()); ++i) {
    Dim& part = i < d0 ? a : i < d1 ? r : b;
    part = part * shape[i];
  }
  RowIdx x;
  x.rows = a * b;
  x.len = r;
  x.at = [r, b](const std::string& row, const std::string& e) {
    if (b.v() == 1) return "((" + row + ") * " + lit(r) + " + (" + e + "))";
    return "(((" + row + ") / " + lit(b) + ") * " + lit(r * b) + " + (" + e + ") * " + lit(b) +
           " + (" + row + ") % " + lit(b) + ")";
  };
  return x;
}

RowIdx channel_rows(const Dims& shape) {
  Dim n = shape[0], c = shape[1], s = 1;
  for (size_t i = 2; i < shape.size(); ++i) s = s * shape[i];
  RowIdx x;
  x.rows = c;
  x.len = n * s;
  x.at = [c, s](const std::string& row, const std::string& e) {
    return "(((" + e + ") / " + lit(s) + ") * " + lit(c * s) + " + (" + row + ") * " + lit(s) +
           " + (" + e + ") % " + lit(s) + ")";
  };
  return x;
}

// One thread per output element, (n + 255) / 256 blocks of 256. The loop strides by the grid, so
// the kernel stays correct under any grid a caller picks.
Kernel gather_kernel(const Dims& out, const std::string& body) {
  Dim n = numel(out);
  Kernel k;
  k.block = 256;
  k.grid = ((n + 255) / 256).bare();
  std::string b = "  for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < " + lit(n) +
                  "; o += (long long)gridDim.x * blockDim.x) {\n";
  Dims st = strides_of(out);
  for (size_t i = 0; i < out.size(); ++i)
    b += "    const long long c" + std::to_string(i) + " = (o / " + lit(st[i]) + ") % " + lit(out[i]) + ";\n";
  b += body + "  }\n";
  k.body = b;
  return k;
}

namespace {

// The device helpers teacher kernels may call (warp/block sum, max, min, product, argmax/argmin
// with the first index on ties as torch, an inclusive block scan), in declaration order; a
// helper's text names the helpers it needs. Teacher kernels accumulate in double: the result is
// then within half an ulp of the exact value, and the synthesizer keeps only problems whose fp32
// reference is itself within the tolerance of the exact value (the conditioning probe), so an
// honest kernel never loses to a different summation order.
struct Helper {
  const char* name;
  const char* text;
};
const Helper kHelpers[] = {
    {"McSum", R"(struct McSum { template <class T> __device__ T operator()(T a, T b) const { return a + b; } };
)"},
    {"McMax", R"(struct McMax { template <class T> __device__ T operator()(T a, T b) const { return a > b ? a : b; } };
)"},
    {"McMin", R"(struct McMin { template <class T> __device__ T operator()(T a, T b) const { return a < b ? a : b; } };
)"},
    {"McProd", R"(struct McProd { template <class T> __device__ T operator()(T a, T b) const { return a * b; } };
)"},
    {"mc_warp_reduce", R"(template <typename T, typename Op>
__device__ __forceinline__ T mc_warp_reduce(T v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
)"},
    {"mc_block_reduce", R"(// Reduces v over the block (blockDim.x a multiple of 32); every thread gets the result.
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
)"},
    {"mc_block_sum", R"(__device__ __forceinline__ double mc_block_sum(double v) { return mc_block_reduce(v, McSum(), 0.0); }
)"},
    {"mc_block_max", R"(__device__ __forceinline__ float mc_block_max(float v) { return mc_block_reduce(v, McMax(), -INFINITY); }
)"},
    {"mc_block_arg", R"(// (value, index) reduction keeping the first index among equal values; `greater` picks argmax.
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
)"},
    {"mc_block_scan", R"(// Inclusive scan of one value per thread over the block (blockDim.x <= 1024); `exclusive`
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
)"},
};

bool names(const std::string& text, const std::string& id) {
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t at = text.find(id); at != std::string::npos; at = text.find(id, at + 1))
    if ((at == 0 || !word(text[at - 1])) && (at + id.size() == text.size() || !word(text[at + id.size()]))) return true;
  return false;
}

}  // namespace

std::string teacher_prelude(const std::string& kernels) {
  constexpr size_t n = std::size(kHelpers);
  std::vector<bool> used(n, false);
  // What the kernels name, then what those helpers name, until nothing is added.
  for (bool grew = true; grew;) {
    grew = false;
    for (size_t i = 0; i < n; ++i) {
      if (used[i]) continue;
      bool hit = names(kernels, kHelpers[i].name);
      for (size_t j = 0; j < n && !hit; ++j) hit = used[j] && names(kHelpers[j].text, kHelpers[i].name);
      if (hit) used[i] = grew = true;
    }
  }
  std::string out = "#include <cuda_runtime.h>\n#include <math.h>\n#include <stdint.h>\n";
  bool one_liner_before = false;
  for (size_t i = 0; i < n; ++i) {
    if (!used[i]) continue;
    std::string t = kHelpers[i].text;
    bool one_liner = t.find('\n') + 1 == t.size();
    if (!(one_liner && one_liner_before)) out += "\n";  // a blank line between blocks
    out += t;
    one_liner_before = one_liner;
  }
  return out;
}

}  // namespace mc::synth
