// Row-wise ops: reductions over a dim, scans, the softmax family, normalizations and losses.
// Each is lowered to one kernel with a thread block per row (kernel_helpers.h).
#include <cmath>

#include "common/check.h"
#include "synth/op_library.h"
#include "synth/kernel_helpers.h"

namespace mc::synth {
namespace {

std::string subst(std::string t, const std::string& key, const std::string& v) {
  for (size_t pos; (pos = t.find(key)) != std::string::npos;) t.replace(pos, key.size(), v);
  return t;
}

Cost read_once(const nlohmann::json&, const std::vector<TensorType>& in, const TensorType& out) {
  double n = 0, bytes = 4.0 * std::max<int64_t>(1, numel(out.shape));
  for (auto& t : in) {
    n += numel(t.shape);
    bytes += 4.0 * numel(t.shape);
  }
  return {2 * n, bytes};
}

OpDef row_op(const char* name, const char* family) {
  OpDef d;
  d.name = name;
  d.family = family;
  d.kind = OpKind::kKernel;
  d.arity = 1;
  d.cost = read_once;
  return d;
}

bool is_float(const TensorType& t) { return t.dtype == DType::kF32; }

Kernel row_kernel(const Dim& rows, const Dim& len, std::string body) {
  Kernel k;
  k.grid = rows.bare();
  k.block = kRowBlock;
  k.body = "  const long long row = blockIdx.x;\n" + body;
  return k;
}

// ---- reductions over one dim --------------------------------------------------------------
struct Reduction {
  const char* name;
  const char* py;       // {x} {d} {k}
  const char* init;     // accumulator start
  const char* step;     // acc = f(acc, v)
  const char* op;       // block combine functor
  const char* final_;   // from acc (and len L)
  bool keepdim;         // supports keepdim
};

void add_reduction(std::map<std::string, OpDef>& lib, const Reduction& r) {
  OpDef d = row_op(r.name, "reduction");
  bool kd = r.keepdim;
  d.sample = [kd](Rng& rng, const std::vector<TensorType>& in) -> std::optional<nlohmann::json> {
    if (!is_float(in[0]) || in[0].shape.size() < 2) return std::nullopt;
    int rank = static_cast<int>(in[0].shape.size());
    int dim = static_cast<int>(uniform_int(rng, rank > 2 ? 1 : 0, rank - 1));
    return nlohmann::json{{"dim", dim}, {"keepdim", kd && coin(rng, 0.3)}};
  };
  d.fresh = [kd](Rng& rng, Graph& g, int64_t budget) {
    int rank = static_cast<int>(uniform_int(rng, 2, 3));
    int x = add_float_input(g, random_shape(rng, rank, budget, 8));
    int dim = static_cast<int>(uniform_int(rng, 0, rank - 1));
    return std::make_pair(std::vector<int>{x}, nlohmann::json{{"dim", dim}, {"keepdim", kd && coin(rng, 0.3)}});
  };
  d.infer_dims = [](const nlohmann::json& p, const std::vector<Dims>& in) {
    int dim = norm_dim(p.at("dim").get<int64_t>(), in[0].size());
    Dims s = in[0];
    if (p.value("keepdim", false)) s[dim] = 1;
    else s.erase(s.begin() + dim);
    return s;
  };
  d.infer = [rule = d.infer_dims](const nlohmann::json& p, const std::vector<TensorType>& in) {
    MC_CHECK(is_float(in[0]), "reduction needs a float input");
    return TensorType{shape_by(rule, p, in), DType::kF32};
  };
  std::string py = r.py;
  d.py_call = [py](const nlohmann::json& p, const std::vector<std::string>& a, const std::string&) {
    return subst(subst(subst(py, "{x}", a[0]), "{d}", std::to_string(p.at("dim").get<int>())),
                 "{k}", p.value("keepdim", false) ? "True" : "False");
  };
  Reduction rr = r;
  d.lower = [rr](const LowerCtx& c) {
    int dim = norm_dim(c.n.p.at("dim").get<int64_t>(), c.in[0].shape.size());
    RowIdx ri = row_idx(c.in_d[0], dim, dim + 1);
    std::string b = "  const double L = " + dbl(ri.len) + ";\n  (void)L;\n";
    b += "  double acc = " + std::string(rr.init) + ";\n";
    b += "  for (long long r = threadIdx.x; r < " + lit(ri.len) + "; r += blockDim.x) {\n";
    b += "    float v = a0[" + ri.at("row", "r") + "];\n    acc = " + rr.step + ";\n  }\n";
    b += "  acc = mc_block_reduce(acc, " + std::string(rr.op) + "(), (double)(" + rr.init + "));\n";
    b += "  if (threadIdx.x == 0) STORE(row, " + std::string(rr.final_) + ");\n";
    return row_kernel(ri.rows, ri.len, b);
  };
  lib[d.name] = d;
}

void add_logsumexp(std::map<std::string, OpDef>& lib) {
  OpDef d = lib.at("Sum");  // same parameters and shape rule
  d.name = "LogSumExp";
  d.py_call = [](const nlohmann::json& p, const std::vector<std::string>& a, const std::string&) {
    return "torch.logsumexp(" + a[0] + ", dim=" + std::to_string(p.at("dim").get<int>()) +
           ", keepdim=" + (p.value("keepdim", false) ? "True" : "False") + ")";
  };
  d.lower = [](const LowerCtx& c) {
    int dim = norm_dim(c.n.p.at("dim").get<int64_t>(), c.in[0].shape.size());
    RowIdx ri = row_idx(c.in_d[0], dim, dim + 1);
    std::string loop = "for (long long r = threadIdx.x; r < " + lit(ri.len) + "; r += blockDim.x)";
    std::string x = "a0[" + ri.at("row", "r") + "]";
    std::string b = "  float m = -INFINITY;\n  " + loop + " m = fmaxf(m, " + x + ");\n";
    b += "  m = mc_block_max(m);\n  double s = 0.0;\n  " + loop + " s += exp((double)" + x + " - m);\n";
    b += "  s = mc_block_sum(s);\n  if (threadIdx.x == 0) STORE(row, m + log(s));\n";
    return row_kernel(ri.rows, ri.len, b);
  };
  lib[d.name] = d;
}

void add_arg(std::map<std::string, OpDef>& lib, const char* name, bool greater) {
  OpDef d = row_op(name, "reduction");
  d.sample = [](Rng& rng, const std::vector<TensorType>& in) -> std::optional<nlohmann::json> {
    if (!is_float(in[0]) || in[0].shape.size() < 2) return std::nullopt;
    int rank = static_cast<int>(in[0].shape.size());
    return nlohmann::json{{"dim", uniform_int(rng, 1, rank - 1)}};
  };
  d.fresh = [](Rng& rng, Graph& g, int64_t budget) {
    int rank = static_cast<int>(uniform_int(rng, 2, 3));
    int x = add_float_input(g, random_shape(rng, rank, budget, 8));
    return std::make_pair(std::vector<int>{x}, nlohmann::json{{"dim", uniform_int(rng, 0, rank - 1)}});
  };
  d.infer_dims = [](const nlohmann::json& p, const std::vector<Dims>& in) {
    Dims s = in[0];
    s.erase(s.begin() + norm_dim(p.at("dim").get<int64_t>(), s.size()));
    return s;
  };
  d.infer = [rule = d.infer_dims](const nlohmann::json& p, const std::vector<TensorType>& in) {
    MC_CHECK(is_float(in[0]), "argmax/argmin needs a float input");
    return TensorType{shape_by(rule, p, in), DType::kI64};
  };
  std::string fn = greater ? "torch.argmax" : "torch.argmin";
  d.py_call = [fn](const nlohmann::json& p, const std::vector<std::string>& a, const std::string&) {
    return fn + "(" + a[0] + ", dim=" + std::to_string(p.at("dim").get<int>()) + ")";
  };
  d.lower = [greater](const LowerCtx& c) {
    int dim = norm_dim(c.n.p.at("dim").get<int64_t>(), c.in[0].shape.size());
    RowIdx ri = row_idx(c.in_d[0], dim, dim + 1);
    std::string cmp = greater ? ">" : "<";
    std::string b = "  float best = " + std::string(greater ? "-INFINITY" : "INFINITY") +
                    ";\n  long long bi = 0x7fffffffffffffffLL;\n";
    b += "  for (long long r = threadIdx.x; r < " + lit(ri.len) + "; r += blockDim.x) {\n";
    b += "    float v = a0[" + ri.at("row", "r") + "];\n";
    b += "    if (bi == 0x7fffffffffffffffLL || v " + cmp + " best || (isnan(v) && !isnan(best))) { best = v; bi = r; }\n  }\n";
    b += std::string("  mc_block_arg(best, bi, ") + (greater ? "true" : "false") + ");\n";
    b += "  if (threadIdx.x == 0) STORE(row, bi);\n";
    return row_kernel(ri.rows, ri.len, b);
  };
  lib[d.name] = d;
}

// ---- scans ------------------------------------------------------------------------------------
void add_scan(std::map<std::string, OpDef>& lib, const char* name, bool product, bool reverse) {
  OpDef d = row_op(name, "scan");
  d.sample = [](Rng& rng, const std::vector<TensorType>& in) -> std::optional<nlohmann::json> {
    if (!is_float(in[0]) || in[0].shape.size() < 2) return std::nullopt;
    return nlohmann::json{{"dim", uniform_int(rng, 1, static_cast<int64_t>(in[0].shape.size()) - 1)}};
  };
  d.fresh = [](Rng& rng, Graph& g, int64_t budget) {
    int rank = static_cast<int>(uniform_int(rng, 2, 3));
    int x = add_float_input(g, random_shape(rng, rank, budget, 8));
    return std::make_pair(std::vector<int>{x}, nlohmann::json{{"dim", rank - 1}});
  };
  d.infer = [](const nlohmann::json& p, const std::vector<TensorType>& in) {
    MC_CHECK(is_float(in[0]), "scan needs a float input");
    norm_dim(p.at("dim").get<int64_t>(), in[0].shape.size());
    return in[0];
  };
  std::string fn = product ? "torch.cumprod" : "torch.cumsum";
  d.py_call = [fn, reverse](const nlohmann::json& p, const std::vector<std::string>& a, const std::string&) {
    std::string dim = std::to_string(p.at("dim").get<int>());
    if (reverse) return fn + "(" + a[0] + ".flip(" + dim + "), dim=" + dim + ").flip(" + dim + ")";
    return fn + "(" + a[0] + ", dim=" + dim + ")";
  };
  d.lower = [product, reverse](const LowerCtx& c) {
    int dim = norm_dim(c.n.p.at("dim").get<int64_t>(), c.in[0].shape.size());
    RowIdx ri = row_idx(c.in_d[0], dim, dim + 1);
    const int block = kRowBlock;
    Dim chunk = (ri.len + (block - 1)) / block;
    std::string op = product ? "McProd()" : "McSum()", id = product ? "1.0" : "0.0";
    std::string comb = product ? "acc * v" : "acc + v";
    // element e of the row in scan order
    std::string pos = reverse ? "(" + lit(ri.len - 1) + " - e)" : "e";
    std::string b = "  const long long lo = (long long)threadIdx.x * " + lit(chunk) + ";\n";
    b += "  const long long hi = min(lo + " + lit(chunk) + ", " + lit(ri.len) + ");\n";
    b += "  double acc = " + id + ";\n";
    b += "  for (long long e = lo; e < hi; ++e) { double v = a0[" + ri.at("row", pos) + "]; acc = " + comb + "; }\n";
    b += "  double before;\n  mc_block_scan(acc, " + op + ", " + id + ", &before);\n  acc = before;\n";
    b += "  for (long long e = lo; e < hi; ++e) {\n    const long long i = " + ri.at("row", pos) +
         ";\n    double v = a0[i];\n    acc = " + comb + ";\n    STORE(i, acc);\n  }\n";
    Kernel k = row_kernel(ri.rows, ri.len, b);
    k.block = block;
    return k;
  };
  lib[d.name] = d;
}

// ---- softmax family -----------------------------------------------------------------------
void add_softmax(std::map<std::string, OpDef>& lib, const char* name, bool log) {
  OpDef d = row_op(name, "softmax");
  d.sample = [](Rng& rng, const std::vector<TensorType>& in) -> std::optional<nlohmann::json> {
    if (!is_float(in[0]) || in[0].shape.size() < 2) return std::nullopt;
    int rank = static_cast<int>(in[0].shape.size());
    return nlohmann::json{{"dim", coin(rng, 0.6) ? rank - 1 : uniform_int(rng, 1, rank - 1)}};
  };
  d.fresh = [](Rng& rng, Graph& g, int64_t budget) {
    int x = add_float_input(g, random_shape(rng, 2, budget, 8));
    return std::make_pair(std::vector<int>{x}, nlohmann::json{{"dim", 1}});
  };
  d.infer = [](const nlohmann::json& p, const std::vector<TensorType>& in) {
    MC_CHECK(is_float(in[0]), "softmax needs a float input");
    norm_dim(p.at("dim").get<int64_t>(), in[0].shape.size());
    return in[0];
  };
  std::string fn = log ? "torch.log_softmax" : "torch.softmax";
  d.py_call = [fn](const nlohmann::json& p, const std::vector<std::string>& a, const std::string&) {
    return fn + "(" + a[0] + ", dim=" + std::to_string(p.at("dim").get<int>()) + ")";
  };
  d.lower = [log](const LowerCtx& c) {
    int dim = norm_dim(c.n.p.at("dim").get<int64_t>(), c.in[0].shape.size());
    RowIdx ri = row_idx(c.in_d[0], dim, dim + 1);
    std::string loop = "for (long long r = threadIdx.x; r < " + lit(ri.len) + "; r += blockDim.x)";
    std::string x = "a0[" + ri.at("row", "r") + "]";
    std::string b = "  float m = -INFINITY;\n  " + loop + " m = fmaxf(m, " + x + ");\n";
    b += "  m = mc_block_max(m);\n  double s = 0.0;\n  " + loop + " s += exp((double)" + x + " - m);\n";
    b += "  s = mc_block_sum(s);\n";
    if (log) b += "  const double ls = log(s);\n  " + loop + " STORE(" + ri.at("row", "r") + ", (double)" + x + " - m - ls);\n";
    else b += "  const double inv = 1.0 / s;\n  " + loop + " STORE(" + ri.at("row", "r") + ", exp((double)" + x + " - m) * inv);\n";
    return row_kernel(ri.rows, ri.len, b);
  };
  lib[d.name] = d;
}

// ---- normalizations -----------------------------------------------------------------------
// Mean and biased variance of the row (two passes), then y = (x - mean) * rstd * w + b.
std::string normalize_body(const RowIdx& ri, const std::string& weight, const std::string& bias,
                           double eps, bool rms) {
  std::string loop = "for (long long r = threadIdx.x; r < " + lit(ri.len) + "; r += blockDim.x)";
  std::string x = "a0[" + ri.at("row", "r") + "]";
  std::string L = dbl(ri.len);
  std::string e = dlit(eps);
  std::string b;
  if (rms) {
    b += "  double q = 0.0;\n  " + loop + " { double v = " + x + "; q += v * v; }\n";
    b += "  const double rstd = 1.0 / sqrt(mc_block_sum(q) / " + L + " + " + e + ");\n  const double mean = 0.0;\n";
  } else {
    b += "  double s = 0.0;\n  " + loop + " s += " + x + ";\n";
    b += "  const double mean = mc_block_sum(s) / " + L + ";\n";
    b += "  double q = 0.0;\n  " + loop + " { double v = " + x + " - mean; q += v * v; }\n";
    b += "  const double rstd = 1.0 / sqrt(mc_block_sum(q) / " + L + " + " + e + ");\n";
  }
  std::string y = "((double)" + x + " - mean) * rstd";
  if (!weight.empty()) y = "(" + y + ") * " + weight;
  if (!bias.empty()) y = "(" + y + ") + " + bias;
  b += "  " + loop + " STORE(" + ri.at("row", "r") + ", " + y + ");\n";
  return b;
}

std::optional<nlohmann::json> float_rank(const std::vector<TensorType>& in, size_t lo, size_t hi) {
  if (!is_float(in[0]) || in[0].shape.size() < lo || in[0].shape.size() > hi) return std::nullopt;
  return nlohmann::json::object();
}

void add_norms(std::map<std::string, OpDef>& lib) {
  {  // LayerNorm over the last one or two dims, with affine parameters.
    OpDef d = row_op("LayerNorm", "norm");
    d.sample = [](Rng& rng, const std::vector<TensorType>& in) -> std::optional<nlohmann::json> {
      if (!float_rank(in, 2, 5)) return std::nullopt;
      int k = in[0].shape.size() >= 3 && numel(Shape(in[0].shape.end() - 2, in[0].shape.end())) <= 65536 && coin(rng, 0.3) ? 2 : 1;
      return nlohmann::json{{"dims", k}};
    };
    d.fresh = [](Rng& rng, Graph& g, int64_t budget) {
      int x = add_float_input(g, random_shape(rng, static_cast<int>(uniform_int(rng, 2, 4)), budget, 8));
      return std::make_pair(std::vector<int>{x}, nlohmann::json{{"dims", 1}});
    };
    d.infer = [](const nlohmann::json& p, const std::vector<TensorType>& in) {
      MC_CHECK(is_float(in[0]) && in[0].shape.size() > p.at("dims").get<size_t>(), "LayerNorm rank");
      return in[0];
    };
    auto norm_shape = [](const nlohmann::json& p, const Shape& s) {
      return Shape(s.end() - p.at("dims").get<int>(), s.end());
    };
    d.state = [norm_shape](const nlohmann::json& p, const std::vector<TensorType>& in) {
      Shape s = norm_shape(p, in[0].shape);
      return std::vector<StateTensor>{{"weight", s}, {"bias", s}};
    };
    d.state_dims = [](const nlohmann::json& p, const std::vector<Dims>& in) {
      Dims s(in[0].end() - p.at("dims").get<int>(), in[0].end());
      return std::vector<Dims>{s, s};
    };
    d.py_init = [norm_shape](const nlohmann::json& p, const std::vector<TensorType>& in) {
      Shape s = norm_shape(p, in[0].shape);
      return "nn.LayerNorm(" + (s.size() == 1 ? std::to_string(s[0]) : "(" + py_shape(s) + ")") + ")";
    };
    d.py_call = call_module;
    d.lower = [](const LowerCtx& c) {
      int r = static_cast<int>(c.in[0].shape.size());
      RowIdx ri = row_idx(c.in_d[0], r - c.n.p.at("dims").get<int>(), r);
      return row_kernel(ri.rows, ri.len, normalize_body(ri, "s0[r]", "s1[r]", 1e-5, false));
    };
    lib[d.name] = d;
  }
  {  // RMSNorm over the last dim.
    OpDef d = row_op("RMSNorm", "norm");
    d.sample = [](Rng&, const std::vector<TensorType>& in) { return float_rank(in, 2, 4); };
    d.fresh = [](Rng& rng, Graph& g, int64_t budget) {
      int x = add_float_input(g, random_shape(rng, static_cast<int>(uniform_int(rng, 2, 3)), budget, 8));
      return std::make_pair(std::vector<int>{x}, nlohmann::json::object());
    };
    d.infer = [](const nlohmann::json&, const std::vector<TensorType>& in) { return in[0]; };
    d.state = [](const nlohmann::json&, const std::vector<TensorType>& in) {
      return std::vector<StateTensor>{{"weight", {in[0].shape.back()}}};
    };
    d.state_dims = [](const nlohmann::json&, const std::vector<Dims>& in) { return std::vector<Dims>{{in[0].back()}}; };
    d.py_init = [](const nlohmann::json&, const std::vector<TensorType>& in) {
      return "nn.RMSNorm(" + std::to_string(in[0].shape.back()) + ", eps=1e-05)";
    };
    d.py_call = call_module;
    d.lower = [](const LowerCtx& c) {
      int r = static_cast<int>(c.in[0].shape.size());
      RowIdx ri = row_idx(c.in_d[0], r - 1, r);
      return row_kernel(ri.rows, ri.len, normalize_body(ri, "s0[r]", "", 1e-5, true));
    };
    lib[d.name] = d;
  }
  {  // BatchNorm{1,2,3}d in training mode (batch statistics), as KernelBench's models run.
    OpDef d = row_op("BatchNorm", "norm");
    d.sample = [](Rng&, const std::vector<TensorType>& in) -> std::optional<nlohmann::json> {
      if (!float_rank(in, 2, 5) || in[0].shape[0] < 2) return std::nullopt;
      return nlohmann::json::object();
    };
    d.fresh = [](Rng& rng, Graph& g, int64_t budget) {
      Shape s = random_shape(rng, static_cast<int>(uniform_int(rng, 2, 4)), budget, 4);
      s[0] = std::max<int64_t>(s[0], 8);
      int x = add_float_input(g, s);
      return std::make_pair(std::vector<int>{x}, nlohmann::json::object());
    };
    d.infer = [](const nlohmann::json&, const std::vector<TensorType>& in) {
      MC_CHECK(is_float(in[0]) && in[0].shape.size() >= 2, "BatchNorm needs [N, C, ...]");
      return in[0];
    };
    d.state = [](const nlohmann::json&, const std::vector<TensorType>& in) {
      Shape c = {in[0].shape[1]};
      return std::vector<StateTensor>{{"weight", c}, {"bias", c}, {"running_mean", c},
                                      {"running_var", c}, {"num_batches_tracked", {}, DType::kI64}};
    };
    d.state_dims = [](const nlohmann::json&, const std::vector<Dims>& in) {
      Dims c = {in[0][1]};
      return std::vector<Dims>{c, c, c, c, {}};
    };
    d.py_init = [](const nlohmann::json&, const std::vector<TensorType>& in) {
      size_t r = in[0].shape.size();
      std::string k = r <= 3 ? "1d" : r == 4 ? "2d" : "3d";
      return "nn.BatchNorm" + k + "(" + std::to_string(in[0].shape[1]) + ")";
    };
    d.py_call = call_module;
    d.lower = [](const LowerCtx& c) {
      RowIdx ri = channel_rows(c.in_d[0]);
      return row_kernel(ri.rows, ri.len, normalize_body(ri, "s0[row]", "s1[row]", 1e-5, false));
    };
    lib[d.name] = d;
  }
  {  // GroupNorm(G, C) with affine parameters.
    OpDef d = row_op("GroupNorm", "norm");
    d.sample = [](Rng& rng, const std::vector<TensorType>& in) -> std::optional<nlohmann::json> {
      if (!float_rank(in, 3, 5)) return std::nullopt;
      int64_t c = in[0].shape[1];
      std::vector<int64_t> gs;
      for (int64_t g : {2, 4, 8, 16, 32})
        if (c % g == 0 && g < c) gs.push_back(g);
      if (gs.empty()) return std::nullopt;
      return nlohmann::json{{"groups", pick(rng, gs)}};
    };
    d.fresh = [](Rng& rng, Graph& g, int64_t budget) {
      int64_t groups = pick(rng, {2, 4, 8});
      Shape s = random_shape(rng, 4, budget, 4);
      s[1] = groups * uniform_int(rng, 2, 8);
      int x = add_float_input(g, s);
      return std::make_pair(std::vector<int>{x}, nlohmann::json{{"groups", groups}});
    };
    d.infer = [](const nlohmann::json& p, const std::vector<TensorType>& in) {
      MC_CHECK(is_float(in[0]) && in[0].shape.size() >= 3 && in[0].shape[1] % p.at("groups").get<int64_t>() == 0,
               "GroupNorm needs [N, C, ...] with C divisible by the groups");
      return in[0];
    };
    d.state = [](const nlohmann::json&, const std::vector<TensorType>& in) {
      Shape c = {in[0].shape[1]};
      return std::vector<StateTensor>{{"weight", c}, {"bias", c}};
    };
    d.state_dims = [](const nlohmann::json&, const std::vector<Dims>& in) {
      Dims c = {in[0][1]};
      return std::vector<Dims>{c, c};
    };
    d.py_init = [](const nlohmann::json& p, const std::vector<TensorType>& in) {
      return "nn.GroupNorm(" + std::to_string(p.at("groups").get<int64_t>()) + ", " + std::to_string(in[0].shape[1]) + ")";
    };
    d.py_call = call_module;
    d.lower = [](const LowerCtx& c) {
      const Dims& s = c.in_d[0];
      Dim g = c.n.p.at("groups").get<int64_t>(), sp = 1;
      for (size_t i = 2; i < s.size(); ++i) sp = sp * s[i];
      Dim cpg = s[1] / g;
      RowIdx ri = row_idx({s[0], g, cpg * sp}, 2, 3);
      std::string ch = "((row % " + lit(g) + ") * " + lit(cpg) + " + r / " + lit(sp) + ")";
      return row_kernel(ri.rows, ri.len, normalize_body(ri, "s0[" + ch + "]", "s1[" + ch + "]", 1e-5, false));
    };
    lib[d.name] = d;
  }
  {  // InstanceNorm{1,2,3}d (no affine, no running stats: PyTorch's defaults).
    OpDef d = row_op("InstanceNorm", "norm");
    d.sample = [](Rng&, const std::vector<TensorType>& in) { return float_rank(in, 3, 5); };
    d.fresh = [](Rng& rng, Graph& g, int64_t budget) {
      int x = add_float_input(g, random_shape(rng, 4, budget, 4));
      return std::make_pair(std::vector<int>{x}, nlohmann::json::object());
    };
    d.infer = [](const nlohmann::json&, const std::vector<TensorType>& in) {
      MC_CHECK(is_float(in[0]) && in[0].shape.size() >= 3, "InstanceNorm needs [N, C, ...]");
      return in[0];
    };
    d.py_init = [](const nlohmann::json&, const std::vector<TensorType>& in) {
      size_t r = in[0].shape.size();
      return "nn.InstanceNorm" + std::to_string(r - 2) + "d(" + std::to_string(in[0].shape[1]) + ")";
    };
    d.py_call = call_module;
    d.lower = [](const LowerCtx& c) {
      RowIdx ri = row_idx(c.in_d[0], 2, static_cast<int>(c.in_d[0].size()));
      return row_kernel(ri.rows, ri.len, normalize_body(ri, "", "", 1e-5, false));
    };
    lib[d.name] = d;
  }
  {  // F.normalize(x, p=2, dim=1)
    OpDef d = row_op("L2Normalize", "norm");
    d.sample = [](Rng&, const std::vector<TensorType>& in) { return float_rank(in, 2, 4); };
    d.fresh = [](Rng& rng, Graph& g, int64_t budget) {
      int x = add_float_input(g, random_shape(rng, 2, budget, 8));
      return std::make_pair(std::vector<int>{x}, nlohmann::json::object());
    };
    d.infer = [](const nlohmann::json&, const std::vector<TensorType>& in) {
      MC_CHECK(is_float(in[0]) && in[0].shape.size() >= 2, "L2Normalize needs rank >= 2");
      return in[0];
    };
    d.py_call = [](const nlohmann::json&, const std::vector<std::string>& a, const std::string&) {
      return "F.normalize(" + a[0] + ", p=2.0, dim=1)";
    };
    d.lower = [](const LowerCtx& c) {
      RowIdx ri = row_idx(c.in_d[0], 1, 2);
      std::string loop = "for (long long r = threadIdx.x; r < " + lit(ri.len) + "; r += blockDim.x)";
      std::string x = "a0[" + ri.at("row", "r") + "]";
      std::string b = "  double q = 0.0;\n  " + loop + " { double v = " + x + "; q += v * v; }\n";
      b += "  const double inv = 1.0 / fmax(sqrt(mc_block_sum(q)), 1e-12);\n";
      b += "  " + loop + " STORE(" + ri.at("row", "r") + ", " + x + " * inv);\n";
      return row_kernel(ri.rows, ri.len, b);
    };
    lib[d.name] = d;
  }
}

// ---- losses (scalar outputs, mean reduction) ------------------------------------------------
// Pointwise losses over two same-shaped tensors: one block sums `term` (of a = a0[i], b = a1[i]).
void add_pointwise_loss(std::map<std::string, OpDef>& lib, const char* name, const char* py,
                        const char* term, const char* init_b = "rand", double divisor_dim0 = 0) {
  OpDef d = row_op(name, "loss");
  d.arity = 2;
  d.sample = [](Rng&, const std::vector<TensorType>&) -> std::optional<nlohmann::json> { return std::nullopt; };
  std::string ib = init_b;
  d.fresh = [ib](Rng& rng, Graph& g, int64_t budget) {
    Shape s = random_shape(rng, 2, budget, 8);
    int a = add_float_input(g, s, ib == "softmax" ? "softmax" : "rand");
    int b = add_float_input(g, s, ib);
    return std::make_pair(std::vector<int>{a, b}, nlohmann::json::object());
  };
  d.infer = [name = d.name](const nlohmann::json&, const std::vector<TensorType>& in) {
    MC_CHECK(is_float(in[0]) && in[0] == in[1], name, " needs two float tensors of one shape");
    return TensorType{{}, DType::kF32};
  };
  std::string p = py;
  d.py_call = [p](const nlohmann::json&, const std::vector<std::string>& a, const std::string&) {
    return subst(subst(p, "{a}", a[0]), "{b}", a[1]);
  };
  std::string t = term;
  bool batchmean = divisor_dim0 != 0;
  d.lower = [t, batchmean](const LowerCtx& c) {
    Dim n = numel(c.in_d[0]);
    Dim div = batchmean ? c.in_d[0][0] : n;
    std::string b = "  (void)row;\n  double acc = 0.0;\n";
    b += "  for (long long i = threadIdx.x; i < " + lit(n) + "; i += blockDim.x) {\n";
    b += "    const float a = a0[i], b = a1[i];\n    acc += " + t + ";\n  }\n";
    b += "  acc = mc_block_sum(acc);\n  if (threadIdx.x == 0) STORE(0, acc / " + dbl(div) + ");\n";
    Kernel k = row_kernel(1, n, b);
    k.block = 1024;
    return k;
  };
  lib[d.name] = d;
}

// Row losses: a warp per row of [N, D], then the mean over rows in one block.
void add_row_loss(std::map<std::string, OpDef>& lib, const char* name, bool cross_entropy) {
  OpDef d = row_op(name, "loss");
  d.arity = 2;
  d.sample = [](Rng&, const std::vector<TensorType>&) -> std::optional<nlohmann::json> { return std::nullopt; };
  d.fresh = [cross_entropy](Rng& rng, Graph& g, int64_t budget) {
    Shape s = random_shape(rng, 2, budget, 8);
    int a = add_float_input(g, s);
    int b = cross_entropy ? add_int_input(g, {s[0]}, s[1]) : add_float_input(g, s);
    return std::make_pair(std::vector<int>{a, b}, nlohmann::json::object());
  };
  d.infer = [cross_entropy](const nlohmann::json&, const std::vector<TensorType>& in) {
    if (cross_entropy)
      MC_CHECK(is_float(in[0]) && in[0].shape.size() == 2 && in[1].dtype == DType::kI64 &&
                   in[1].shape == Shape{in[0].shape[0]}, "CrossEntropy needs logits [N, C] and targets [N]");
    else
      MC_CHECK(is_float(in[0]) && in[0] == in[1] && in[0].shape.size() == 2, "CosineSimilarityLoss needs two [N, D]");
    return TensorType{{}, DType::kF32};
  };
  d.py_call = [cross_entropy](const nlohmann::json&, const std::vector<std::string>& a, const std::string&) {
    if (cross_entropy) return "F.cross_entropy(" + a[0] + ", " + a[1] + ")";
    return "torch.mean(1 - F.cosine_similarity(" + a[0] + ", " + a[1] + ", dim=1))";
  };
  d.lower = [cross_entropy](const LowerCtx& c) {
    Dim n = c.in_d[0][0], dd = c.in_d[0][1];
    std::string b = "  (void)row;\n  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n  double acc = 0.0;\n";
    b += "  for (long long i = warp; i < " + lit(n) + "; i += blockDim.x >> 5) {\n";
    b += "    const float* x = a0 + i * " + lit(dd) + ";\n";
    std::string loop = "    for (long long j = lane; j < " + lit(dd) + "; j += 32)";
    if (cross_entropy) {
      b += "    float m = -INFINITY;\n" + loop + " m = fmaxf(m, x[j]);\n    m = mc_warp_reduce(m, McMax());\n";
      b += "    double s = 0.0;\n" + loop + " s += exp((double)x[j] - m);\n    s = mc_warp_reduce(s, McSum());\n";
      b += "    if (lane == 0) acc += m + log(s) - x[a1[i]];\n  }\n";
    } else {
      b += "    const float* y = a1 + i * " + lit(dd) + ";\n    double xy = 0.0, xx = 0.0, yy = 0.0;\n";
      b += loop + " { const double p = x[j], q = y[j]; xy += p * q; xx += p * p; yy += q * q; }\n";
      b += "    xy = mc_warp_reduce(xy, McSum()); xx = mc_warp_reduce(xx, McSum()); yy = mc_warp_reduce(yy, McSum());\n";
      b += "    if (lane == 0) acc += 1.0 - xy / (fmax(sqrt(xx), 1e-8) * fmax(sqrt(yy), 1e-8));\n  }\n";
    }
    b += "  acc = mc_block_sum(acc);\n  if (threadIdx.x == 0) STORE(0, acc / " + dbl(n) + ");\n";
    Kernel k = row_kernel(1, n * 32, b);
    k.block = 1024;
    return k;
  };
  lib[d.name] = d;
}

}  // namespace

void register_reduce_ops(std::map<std::string, OpDef>& lib) {
  add_reduction(lib, {"Sum", "torch.sum({x}, dim={d}, keepdim={k})", "0.0", "acc + v", "McSum", "acc", true});
  add_reduction(lib, {"Mean", "torch.mean({x}, dim={d}, keepdim={k})", "0.0", "acc + v", "McSum", "acc / L", true});
  add_reduction(lib, {"Max", "torch.amax({x}, dim={d}, keepdim={k})", "-INFINITY", "fmax(acc, (double)v)", "McMax", "acc", true});
  add_reduction(lib, {"Min", "torch.amin({x}, dim={d}, keepdim={k})", "INFINITY", "fmin(acc, (double)v)", "McMin", "acc", true});
  add_reduction(lib, {"Prod", "torch.prod({x}, dim={d}, keepdim={k})", "1.0", "acc * v", "McProd", "acc", true});
  add_reduction(lib, {"Norm", "torch.linalg.vector_norm({x}, dim={d}, keepdim={k})", "0.0", "acc + (double)v * v", "McSum", "sqrt(acc)", true});
  add_logsumexp(lib);
  add_arg(lib, "ArgMax", true);
  add_arg(lib, "ArgMin", false);
  add_scan(lib, "CumSum", false, false);
  add_scan(lib, "CumProd", true, false);
  add_scan(lib, "ReverseCumSum", false, true);
  add_softmax(lib, "Softmax", false);
  add_softmax(lib, "LogSoftmax", true);
  add_norms(lib);
  add_pointwise_loss(lib, "MSELoss", "F.mse_loss({a}, {b})", "(a - b) * (a - b)");
  add_pointwise_loss(lib, "L1Loss", "F.l1_loss({a}, {b})", "fabsf(a - b)");
  add_pointwise_loss(lib, "SmoothL1Loss", "F.smooth_l1_loss({a}, {b})",
                     "(fabsf(a - b) < 1.0f ? 0.5f * (a - b) * (a - b) : fabsf(a - b) - 0.5f)");
  add_pointwise_loss(lib, "HingeLoss", "torch.mean(torch.clamp(1 - {a} * {b}, min=0))", "fmaxf(1.0f - a * b, 0.0f)");
  // kl_div(log p, q): q * log q - q * log p, with 0 * log 0 = 0 (torch's xlogy).
  add_pointwise_loss(lib, "KLDivLoss", "F.kl_div(torch.log({a}), {b}, reduction=\"batchmean\")",
                     "(b == 0.0f ? 0.0f : b * logf(b)) - b * logf(a)", "softmax", 1);
  add_row_loss(lib, "CrossEntropyLoss", true);
  add_row_loss(lib, "CosineSimilarityLoss", false);
}

}  // namespace mc::synth
