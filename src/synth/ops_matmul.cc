// Matrix products: plain, transposed, batched, matrix-vector, diagonal, triangular, and
// nn.Linear. The teacher lowers them to one shared-memory tiled GEMM (64x64 tiles, 4x4 per
// thread) addressed through strides spelled from the problem's sizes, with bias and masks in
// its epilogue.
#include "common/check.h"
#include "synth/kernel_helpers.h"
#include "synth/op_library.h"

namespace mc::synth {
namespace {

struct GemmSpec {
  Dim batch = 1, m = 0, n = 0, k = 0;
  std::string a, b;             // pointer names
  Dim sab = 0, sam = 0, sak = 0;  // A(b, m, k) strides
  Dim sbb = 0, sbk = 0, sbn = 0;  // B(b, k, n) strides
  std::string bias;                   // per-column bias pointer, or ""
  bool lower_triangular = false;      // keep n <= m only (torch.tril of the product)
};

Kernel gemm_kernel(const GemmSpec& g) {
  auto A = [&](const std::string& b, const std::string& m, const std::string& k) {
    return g.a + "[" + b + " * " + lit(g.sab) + " + " + m + " * " + lit(g.sam) + " + " + k + " * " + lit(g.sak) + "]";
  };
  auto B = [&](const std::string& b, const std::string& k, const std::string& n) {
    return g.b + "[" + b + " * " + lit(g.sbb) + " + " + k + " * " + lit(g.sbk) + " + " + n + " * " + lit(g.sbn) + "]";
  };
  std::string M = lit(g.m), N = lit(g.n), K = lit(g.k);
  std::string s;
  s += "  __shared__ float As[16][65];\n  __shared__ float Bs[16][65];\n";
  s += "  const long long bz = blockIdx.z, m0 = (long long)blockIdx.y * 64, n0 = (long long)blockIdx.x * 64;\n";
  s += "  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;\n";
  s += "  double acc[4][4] = {};\n";
  s += "  for (long long kt = 0; kt < " + K + "; kt += 16) {\n";
  s += "    for (int i = threadIdx.x; i < 1024; i += 256) {\n";
  // A tile: consecutive threads walk k when k is A's contiguous dim, else m.
  if (g.sak.v() == 1)
    s += "      const int mm = i / 16, kk = i % 16;\n";
  else
    s += "      const int mm = i % 64, kk = i / 64;\n";
  s += "      const long long m = m0 + mm, k = kt + kk;\n";
  s += "      As[kk][mm] = (m < " + M + " && k < " + K + ") ? " + A("bz", "m", "k") + " : 0.0f;\n";
  if (g.sbn.v() == 1)
    s += "      const int nn = i % 64, kb = i / 64;\n";
  else
    s += "      const int nn = i / 16, kb = i % 16;\n";
  s += "      const long long n = n0 + nn, kq = kt + kb;\n";
  s += "      Bs[kb][nn] = (kq < " + K + " && n < " + N + ") ? " + B("bz", "kq", "n") + " : 0.0f;\n";
  s += "    }\n    __syncthreads();\n";
  s += "#pragma unroll\n    for (int kk = 0; kk < 16; ++kk) {\n";
  s += "      float av[4], bv[4];\n";
  s += "#pragma unroll\n      for (int i = 0; i < 4; ++i) { av[i] = As[kk][ty * 4 + i]; bv[i] = Bs[kk][tx * 4 + i]; }\n";
  s += "#pragma unroll\n      for (int i = 0; i < 4; ++i)\n#pragma unroll\n        for (int j = 0; j < 4; ++j) acc[i][j] += (double)av[i] * bv[j];\n";
  s += "    }\n    __syncthreads();\n  }\n";
  s += "  for (int i = 0; i < 4; ++i)\n    for (int j = 0; j < 4; ++j) {\n";
  s += "      const long long m = m0 + ty * 4 + i, n = n0 + tx * 4 + j;\n";
  s += "      if (m >= " + M + " || n >= " + N + ") continue;\n";
  std::string v = "acc[i][j]";
  if (!g.bias.empty()) v += " + " + g.bias + "[n]";
  if (g.lower_triangular) v = "(n <= m ? " + v + " : 0.0)";
  s += "      STORE(bz * " + lit(g.m * g.n) + " + m * " + N + " + n, " + v + ");\n    }\n";
  Kernel k;
  k.body = s;
  k.block = 256;
  k.grid = "dim3(" + ((g.n + 63) / 64).bare() + ", " + ((g.m + 63) / 64).bare() + ", " + g.batch.bare() + ")";
  return k;
}

Cost gemm_cost(int64_t batch, int64_t m, int64_t n, int64_t k) {
  return {2.0 * batch * m * n * k, 4.0 * batch * (m * k + k * n + m * n)};
}

int64_t dim_near(Rng& rng, double target) {
  int64_t d = std::max<int64_t>(8, static_cast<int64_t>(target * uniform(rng, 0.6, 1.6)));
  return coin(rng, 0.8) ? std::max<int64_t>(16, d / 16 * 16) : d + 1;
}

// Two-input products over [.., M, K] x [.., K, N] in one of several layouts.
enum class Layout { kPlain, kTransA, kTransB, kBatched, kMatVec, kTril };

void add_product(std::map<std::string, OpDef>& lib, const char* name, Layout lay) {
  OpDef d;
  d.name = name;
  d.family = "matmul";
  d.kind = OpKind::kKernel;
  d.arity = 2;
  d.anchor = lay == Layout::kPlain || lay == Layout::kBatched;
  d.sample = [](Rng&, const std::vector<TensorType>&) -> std::optional<nlohmann::json> { return std::nullopt; };
  d.fresh = [lay](Rng& rng, Graph& g, int64_t budget) {
    // budget ~ output elements; K sized so that the FLOPs stay moderate.
    double side = std::sqrt(static_cast<double>(budget));
    int64_t m = dim_near(rng, side), n = dim_near(rng, side), k = dim_near(rng, side / 2);
    int64_t b = 1;
    if (lay == Layout::kBatched) {
      b = uniform_int(rng, 2, 32);
      m = dim_near(rng, side / std::sqrt(b)), n = dim_near(rng, side / std::sqrt(b)), k = dim_near(rng, 128);
    }
    if (lay == Layout::kMatVec) m = dim_near(rng, static_cast<double>(budget) / 64), n = 1, k = dim_near(rng, 1024);
    if (lay == Layout::kTril) m = n = k = dim_near(rng, side);
    Shape sa = lay == Layout::kTransA ? Shape{k, m} : Shape{m, k};
    Shape sb = lay == Layout::kTransB ? Shape{n, k} : Shape{k, n};
    if (lay == Layout::kBatched) sa.insert(sa.begin(), b), sb.insert(sb.begin(), b);
    std::string init = lay == Layout::kTril ? "tril" : "rand";
    int a = add_float_input(g, sa, init), bb = add_float_input(g, sb, init);
    return std::make_pair(std::vector<int>{a, bb}, nlohmann::json::object());
  };
  // (batch, m, n, k), as the kernel text spells them (dim.h); k is the first operand's.
  auto dims_d = [lay](const std::vector<Dims>& in) {
    const Dims &a = in[0], &b = in[1];
    size_t o = a.size() - 2;
    Dim batch = o ? a[0] : Dim(1);
    Dim m = lay == Layout::kTransA ? a[o + 1] : a[o], k = lay == Layout::kTransA ? a[o] : a[o + 1];
    Dim n = lay == Layout::kTransB ? b[o] : b[o + 1];
    return std::array<Dim, 4>{batch, m, n, k};
  };
  // The same on values, once the operands are checked to fit together.
  auto dims = [lay, dims_d](const std::vector<TensorType>& in) {
    const Shape &a = in[0].shape, &b = in[1].shape;
    size_t ra = lay == Layout::kBatched ? 3 : 2;
    MC_CHECK(a.size() == ra && b.size() == ra && in[0].dtype == DType::kF32 && in[1].dtype == DType::kF32,
             "matmul operands must be float of rank ", ra);
    MC_CHECK(ra == 2 || b[0] == a[0], "batch sizes differ");
    auto [batch, m, n, k] = dims_d({literal_dims(a), literal_dims(b)});
    int64_t kb = lay == Layout::kTransB ? b[ra - 1] : b[ra - 2];
    MC_CHECK(k.v() == kb, "inner dims differ: ", shape_str(a), " x ", shape_str(b));
    return std::array<int64_t, 4>{batch.v(), m.v(), n.v(), k.v()};
  };
  d.infer_dims = [dims_d, lay](const nlohmann::json&, const std::vector<Dims>& in) {
    auto [batch, m, n, k] = dims_d(in);
    Dims s = {m, n};
    if (lay == Layout::kBatched) s.insert(s.begin(), batch);
    return s;
  };
  d.infer = [dims, rule = d.infer_dims](const nlohmann::json& p, const std::vector<TensorType>& in) {
    dims(in);  // the checks
    return TensorType{shape_by(rule, p, in), DType::kF32};
  };
  d.py_call = [lay](const nlohmann::json&, const std::vector<std::string>& a, const std::string&) {
    switch (lay) {
      case Layout::kTransA: return "torch.matmul(" + a[0] + ".T, " + a[1] + ")";
      case Layout::kTransB: return "torch.matmul(" + a[0] + ", " + a[1] + ".T)";
      case Layout::kBatched: return "torch.bmm(" + a[0] + ", " + a[1] + ")";
      case Layout::kTril: return "torch.tril(torch.matmul(" + a[0] + ", " + a[1] + "))";
      default: return "torch.matmul(" + a[0] + ", " + a[1] + ")";
    }
  };
  d.cost = [dims](const nlohmann::json&, const std::vector<TensorType>& in, const TensorType&) {
    auto [b, m, n, k] = dims(in);
    return gemm_cost(b, m, n, k);
  };
  d.lower = [dims_d, lay](const LowerCtx& c) {
    auto [batch, m, n, k] = dims_d(c.in_d);
    GemmSpec g{batch, m, n, k, "a0", "a1"};
    g.sab = m * k, g.sbb = k * n;
    if (lay == Layout::kTransA) g.sam = 1, g.sak = m;
    else g.sam = k, g.sak = 1;
    if (lay == Layout::kTransB) g.sbk = 1, g.sbn = k;
    else g.sbk = n, g.sbn = 1;
    g.lower_triangular = lay == Layout::kTril;
    return gemm_kernel(g);
  };
  lib[d.name] = d;
}

void add_linear(std::map<std::string, OpDef>& lib) {
  OpDef d;
  d.name = "Linear";
  d.family = "matmul";
  d.kind = OpKind::kKernel;
  d.arity = 1;
  d.anchor = true;
  d.sample = [](Rng& rng, const std::vector<TensorType>& in) -> std::optional<nlohmann::json> {
    if (in[0].dtype != DType::kF32 || in[0].shape.size() < 2 || in[0].shape.size() > 3) return std::nullopt;
    int64_t kin = in[0].shape.back();
    if (kin > 8192) return std::nullopt;
    return nlohmann::json{{"out", dim_near(rng, static_cast<double>(std::clamp<int64_t>(kin, 64, 2048)))},
                          {"bias", coin(rng, 0.85)}};
  };
  d.fresh = [](Rng& rng, Graph& g, int64_t budget) {
    double side = std::sqrt(static_cast<double>(budget));
    int64_t m = dim_near(rng, side / 2), k = dim_near(rng, side), n = dim_near(rng, side);
    int x = add_float_input(g, {m, k});
    return std::make_pair(std::vector<int>{x}, nlohmann::json{{"out", n}, {"bias", coin(rng, 0.85)}});
  };
  // out_features as the problem spells it: its name, or the literal of nn.Linear(in, out).
  d.state_dims = [](const nlohmann::json& p, const std::vector<Dims>& in) {
    Dim n = spelled_dim(p, "out");
    std::vector<Dims> s = {{n, in[0].back()}};
    if (p.value("bias", true)) s.push_back({n});
    return s;
  };
  d.infer_dims = [](const nlohmann::json& p, const std::vector<Dims>& in) {
    Dims s = in[0];
    s.back() = spelled_dim(p, "out");
    return s;
  };
  d.infer = [rule = d.infer_dims](const nlohmann::json& p, const std::vector<TensorType>& in) {
    MC_CHECK(in[0].dtype == DType::kF32 && !in[0].shape.empty(), "Linear needs a float input");
    return TensorType{shape_by(rule, p, in), DType::kF32};
  };
  d.state = [rule = d.state_dims](const nlohmann::json& p, const std::vector<TensorType>& in) {
    auto w = rule(p, {literal_dims(in[0].shape)});
    std::vector<StateTensor> s = {{"weight", values(w[0])}};
    if (w.size() > 1) s.push_back({"bias", values(w[1])});
    return s;
  };
  d.py_init = [](const nlohmann::json& p, const std::vector<TensorType>& in) {
    return "nn.Linear(" + spelled(p, "in", std::to_string(in[0].shape.back())) + ", " +
           spelled(p, "out", std::to_string(p.at("out").get<int64_t>())) +
           (p.value("bias", true) ? "" : ", bias=False") + ")";
  };
  d.py_call = call_module;
  d.cost = [](const nlohmann::json& p, const std::vector<TensorType>& in, const TensorType&) {
    int64_t k = in[0].shape.back();
    return gemm_cost(1, numel(in[0].shape) / k, p.at("out").get<int64_t>(), k);
  };
  d.lower = [](const LowerCtx& c) {
    Dim k = c.in_d[0].back(), n = c.n.p.at("out").get<int64_t>();
    GemmSpec g{1, numel(Dims(c.in_d[0].begin(), c.in_d[0].end() - 1)), n, k, "a0", "s0"};
    g.sam = k, g.sak = 1;
    g.sbk = 1, g.sbn = k;  // weight is [N, K]: x @ W.T
    if (c.n.p.value("bias", true)) g.bias = "s1";
    return gemm_kernel(g);
  };
  lib[d.name] = d;
}

void add_diag_matmul(std::map<std::string, OpDef>& lib) {
  OpDef d;
  d.name = "DiagMatmul";
  d.family = "matmul";
  d.kind = OpKind::kKernel;
  d.arity = 2;
  d.sample = [](Rng&, const std::vector<TensorType>&) -> std::optional<nlohmann::json> { return std::nullopt; };
  d.fresh = [](Rng& rng, Graph& g, int64_t budget) {
    Shape s = random_shape(rng, 2, budget, 16);
    int a = add_float_input(g, {s[0]}), b = add_float_input(g, s);
    return std::make_pair(std::vector<int>{a, b}, nlohmann::json::object());
  };
  d.infer = [](const nlohmann::json&, const std::vector<TensorType>& in) {
    MC_CHECK(in[0].shape.size() == 1 && in[1].shape.size() == 2 && in[0].shape[0] == in[1].shape[0],
             "DiagMatmul needs a [N] and a [N, M]");
    return in[1];
  };
  d.py_call = [](const nlohmann::json&, const std::vector<std::string>& a, const std::string&) {
    return "torch.diag(" + a[0] + ") @ " + a[1];
  };
  d.cost = [](const nlohmann::json&, const std::vector<TensorType>& in, const TensorType& out) {
    return Cost{static_cast<double>(numel(out.shape)), 8.0 * numel(out.shape)};
  };
  d.lower = [](const LowerCtx& c) { return gather_kernel(c.out_d, "    STORE(o, a0[c0] * a1[o]);\n"); };
  lib[d.name] = d;
}

}  // namespace

void register_matmul_ops(std::map<std::string, OpDef>& lib) {
  add_product(lib, "Matmul", Layout::kPlain);
  add_product(lib, "MatmulTransA", Layout::kTransA);
  add_product(lib, "MatmulTransB", Layout::kTransB);
  add_product(lib, "BatchedMatmul", Layout::kBatched);
  add_product(lib, "MatVec", Layout::kMatVec);
  add_product(lib, "TrilMatmul", Layout::kTril);
  add_linear(lib);
  add_diag_matmul(lib);
}

}  // namespace mc::synth
