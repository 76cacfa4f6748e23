// Convolutions (1/2/3-D, transposed, strided, padded, dilated, grouped) and pooling. The
// teacher computes each output element directly in one thread (gather_kernel), with bias and
// fused follow-up ops in the epilogue.
#include "common/check.h"
#include "synth/kernel_helpers.h"
#include "synth/op_library.h"

namespace mc::synth {
namespace {

std::string tuple_or_int(const std::vector<int64_t>& v) {
  bool same = true;
  for (auto x : v) same &= x == v[0];
  if (same) return std::to_string(v[0]);
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + ")";
}

std::vector<int64_t> vec(const nlohmann::json& p, const char* key, int nd, int64_t dflt) {
  if (!p.contains(key)) return std::vector<int64_t>(nd, dflt);
  if (p[key].is_number()) return std::vector<int64_t>(nd, p[key].get<int64_t>());
  return p[key].get<std::vector<int64_t>>();
}

// ---- convolution --------------------------------------------------------------------------
void add_conv(std::map<std::string, OpDef>& lib, int nd, bool transposed) {
  OpDef d;
  d.name = std::string(transposed ? "ConvTranspose" : "Conv") + std::to_string(nd) + "d";
  d.family = "conv";
  d.kind = OpKind::kKernel;
  d.arity = 1;
  d.anchor = nd >= 2;
  auto params = [nd, transposed](Rng& rng, int64_t cin) {
    int64_t k = nd == 3 ? pick(rng, {1, 3, 3}) : pick(rng, {1, 3, 3, 5});
    int64_t stride = coin(rng, 0.7) ? 1 : 2;
    int64_t pad = coin(rng, 0.5) ? k / 2 : 0;
    int64_t dil = !transposed && k > 1 && coin(rng, 0.15) ? 2 : 1;
    int64_t groups = 1;
    int64_t cout = pick(rng, {8, 16, 32, 64});
    if (nd < 3) cout = std::max<int64_t>(cout, pick(rng, {16, 32, 64, 128}));
    if (coin(rng, 0.15) && cin % 4 == 0 && cout % 4 == 0) groups = 4;
    nlohmann::json p = {{"out", cout}, {"k", k}, {"stride", stride}, {"pad", pad}, {"dil", dil},
                        {"groups", groups}, {"bias", coin(rng, 0.7)}};
    if (transposed && stride > 1 && coin(rng, 0.3)) p["out_pad"] = 1;
    return p;
  };
  d.sample = [nd, params](Rng& rng, const std::vector<TensorType>& in) -> std::optional<nlohmann::json> {
    if (in[0].dtype != DType::kF32 || static_cast<int>(in[0].shape.size()) != nd + 2) return std::nullopt;
    if (in[0].shape[1] > 256) return std::nullopt;
    return params(rng, in[0].shape[1]);
  };
  d.fresh = [nd, params, transposed](Rng& rng, Graph& g, int64_t budget) {
    int64_t cin = pick(rng, {3, 8, 16, 32, 64});
    int64_t n = pick(rng, {2, 4, 8, 16});
    int64_t per = std::max<int64_t>(budget / (n * cin), 8);
    if (transposed) per /= 4;
    Shape sp = random_shape(rng, nd, per, nd == 3 ? 6 : 8);
    Shape s = {n, cin};
    s.insert(s.end(), sp.begin(), sp.end());
    int x = add_float_input(g, s);
    return std::make_pair(std::vector<int>{x}, params(rng, cin));
  };
  // The output's and the weight's sizes, on values (infer, state) or as the kernel text spells
  // them (dim.h): out_channels as the problem spells it (its name, or the literal), the kernel
  // size a literal, the spatial sizes arithmetic on the input's.
  auto out_dims = [nd, transposed](const nlohmann::json& p, const std::vector<Dims>& in) {
    auto k = vec(p, "k", nd, 1), st = vec(p, "stride", nd, 1), pad = vec(p, "pad", nd, 0), dil = vec(p, "dil", nd, 1),
         op = vec(p, "out_pad", nd, 0);
    Dims s = {in[0][0], spelled_dim(p, "out")};
    for (int i = 0; i < nd; ++i) {
      const Dim& x = in[0][2 + i];
      s.push_back(transposed ? x * st[i] + (-st[i] - 2 * pad[i] + dil[i] * (k[i] - 1) + op[i] + 1)
                             : (x + (2 * pad[i] - dil[i] * (k[i] - 1) - 1)) / st[i] + 1);
    }
    return s;
  };
  auto state_dims = [nd, transposed](const nlohmann::json& p, const std::vector<Dims>& in) {
    Dim cin = in[0][1], cout = spelled_dim(p, "out"), g = p.value("groups", int64_t{1});
    Dims w = transposed ? Dims{cin, cout / g} : Dims{cout, cin / g};
    for (auto k : vec(p, "k", nd, 1)) w.push_back(k);
    std::vector<Dims> s = {w};
    if (p.value("bias", true)) s.push_back({cout});
    return s;
  };
  d.infer = [nd, out_dims, name = d.name](const nlohmann::json& p, const std::vector<TensorType>& in) {
    MC_CHECK(in[0].dtype == DType::kF32 && static_cast<int>(in[0].shape.size()) == nd + 2, name,
             " needs a float [N, C, ", nd, " spatial dims] input, got ", shape_str(in[0].shape));
    int64_t groups = p.value("groups", 1);
    MC_CHECK(in[0].shape[1] % groups == 0 && p.at("out").get<int64_t>() % groups == 0, name, ": channels vs groups");
    Shape s = shape_by(out_dims, p, in);
    for (int i = 0; i < nd; ++i) MC_CHECK(s[2 + i] > 0, name, ": kernel larger than the padded input");
    return TensorType{s, DType::kF32};
  };
  d.state = [state_dims](const nlohmann::json& p, const std::vector<TensorType>& in) {
    auto w = state_dims(p, {literal_dims(in[0].shape)});
    std::vector<StateTensor> s = {{"weight", values(w[0])}};
    if (w.size() > 1) s.push_back({"bias", values(w[1])});
    return s;
  };
  d.infer_dims = out_dims;
  d.state_dims = state_dims;
  d.py_init = [nd, name = d.name](const nlohmann::json& p, const std::vector<TensorType>& in) {
    std::string s = "nn." + name + "(" + spelled(p, "in", std::to_string(in[0].shape[1])) + ", " +
                    spelled(p, "out", std::to_string(p.at("out").get<int64_t>())) + ", " +
                    spelled(p, "k", tuple_or_int(vec(p, "k", nd, 1)));
    if (p.value("stride", 1) != 1) s += ", stride=" + spelled(p, "stride", std::to_string(p["stride"].get<int64_t>()));
    if (p.value("pad", 0) != 0) s += ", padding=" + spelled(p, "pad", std::to_string(p["pad"].get<int64_t>()));
    if (p.value("out_pad", 0) != 0) s += ", output_padding=" + std::to_string(p["out_pad"].get<int64_t>());
    if (p.value("groups", 1) != 1) s += ", groups=" + std::to_string(p["groups"].get<int64_t>());
    if (std::string b = spelled(p, "bias", ""); !b.empty()) s += ", bias=" + b;
    else if (!p.value("bias", true)) s += ", bias=False";
    if (p.value("dil", 1) != 1) s += ", dilation=" + std::to_string(p["dil"].get<int64_t>());
    return s + ")";
  };
  d.py_call = call_module;
  d.cost = [nd](const nlohmann::json& p, const std::vector<TensorType>& in, const TensorType& out) {
    int64_t kv = 1;
    for (auto k : vec(p, "k", nd, 1)) kv *= k;
    double macs = static_cast<double>(numel(out.shape)) * kv * in[0].shape[1] / p.value("groups", 1);
    return Cost{2 * macs, 4.0 * (numel(in[0].shape) + numel(out.shape))};
  };
  d.lower = [nd, transposed](const LowerCtx& c) {
    const Dims &x = c.in_d[0], &o = c.out_d;
    const nlohmann::json& p = c.n.p;
    Dim cin = x[1], cout = o[1], g = p.value("groups", int64_t{1}), cin_g = cin / g, cout_g = cout / g;
    auto k = vec(p, "k", nd, 1), st = vec(p, "stride", nd, 1), pad = vec(p, "pad", nd, 0), dil = vec(p, "dil", nd, 1);
    Dims xs = strides_of(x), ws = strides_of(c.state_d[0]);
    std::string b = "    const long long grp = c1 / " + lit(cout_g) + ";\n    double acc = 0.0;\n";
    std::string ind = "    ";
    // weight [cout, cin/g, k...] (conv) or [cin, cout/g, k...] (transposed)
    b += ind + "for (long long ci = 0; ci < " + lit(cin_g) + "; ++ci) {\n";
    std::string xoff = "c0 * " + lit(xs[0]) + " + (grp * " + lit(cin_g) + " + ci) * " + lit(xs[1]);
    std::string woff = transposed ? "(grp * " + lit(cin_g) + " + ci) * " + lit(ws[0]) + " + (c1 % " + lit(cout_g) + ") * " + lit(ws[1])
                                  : "c1 * " + lit(ws[0]) + " + ci * " + lit(ws[1]);
    std::string close;
    for (int i = 0; i < nd; ++i) {
      std::string ki = "k" + std::to_string(i), pi = "p" + std::to_string(i), ci = "c" + std::to_string(2 + i);
      b += ind + "  for (long long " + ki + " = 0; " + ki + " < " + lit(k[i]) + "; ++" + ki + ") {\n";
      if (!transposed) {
        b += ind + "    const long long " + pi + " = " + ci + " * " + lit(st[i]) + " - " + lit(pad[i]) + " + " + ki + " * " + lit(dil[i]) + ";\n";
      } else {
        b += ind + "    const long long t" + std::to_string(i) + " = " + ci + " + " + lit(pad[i]) + " - " + ki + " * " + lit(dil[i]) + ";\n";
        b += ind + "    if (t" + std::to_string(i) + " < 0 || t" + std::to_string(i) + " % " + lit(st[i]) + " != 0) continue;\n";
        b += ind + "    const long long " + pi + " = t" + std::to_string(i) + " / " + lit(st[i]) + ";\n";
      }
      b += ind + "    if (" + pi + " < 0 || " + pi + " >= " + lit(x[2 + i]) + ") continue;\n";
      xoff += " + " + pi + " * " + lit(xs[2 + i]);
      woff += " + " + ki + " * " + lit(ws[2 + i]);
      ind += "  ";
      close += "}";
    }
    b += ind + "  acc += (double)a0[" + xoff + "] * s0[" + woff + "];\n";
    b += "    " + close + "}\n";
    if (p.value("bias", true)) b += "    acc += s1[c1];\n";
    b += "    STORE(o, acc);\n";
    return gather_kernel(o, b);
  };
  lib[d.name] = d;
}

// ---- pooling ------------------------------------------------------------------------------
void add_pool(std::map<std::string, OpDef>& lib, int nd, bool max) {
  OpDef d;
  d.name = std::string(max ? "MaxPool" : "AvgPool") + std::to_string(nd) + "d";
  d.family = "pool";
  d.kind = OpKind::kKernel;
  d.arity = 1;
  auto params = [](Rng& rng, const Shape& s) {
    int64_t k = pick(rng, {2, 2, 3, 4});
    int64_t smallest = *std::min_element(s.begin() + 2, s.end());
    k = std::min(k, smallest);
    int64_t stride = coin(rng, 0.6) ? k : std::max<int64_t>(1, k - 1);
    int64_t pad = k >= 2 && coin(rng, 0.3) ? k / 2 : 0;
    return nlohmann::json{{"k", k}, {"stride", stride}, {"pad", pad}};
  };
  d.sample = [nd, params](Rng& rng, const std::vector<TensorType>& in) -> std::optional<nlohmann::json> {
    if (in[0].dtype != DType::kF32 || static_cast<int>(in[0].shape.size()) != nd + 2) return std::nullopt;
    for (size_t i = 2; i < in[0].shape.size(); ++i)
      if (in[0].shape[i] < 4) return std::nullopt;
    return params(rng, in[0].shape);
  };
  d.fresh = [nd, params](Rng& rng, Graph& g, int64_t budget) {
    int64_t n = pick(rng, {4, 8, 16}), ch = pick(rng, {8, 16, 32, 64});
    Shape sp = random_shape(rng, nd, std::max<int64_t>(budget / (n * ch), 16), 8);
    Shape s = {n, ch};
    s.insert(s.end(), sp.begin(), sp.end());
    int x = add_float_input(g, s);
    return std::make_pair(std::vector<int>{x}, params(rng, s));
  };
  // The output's sizes, on values (infer) or as the kernel text spells them (dim.h).
  auto out_dims = [nd](const nlohmann::json& p, const std::vector<Dims>& in) {
    int64_t k = p.at("k"), st = p.at("stride"), pad = p.value("pad", 0);
    Dims s = {in[0][0], in[0][1]};
    for (int i = 0; i < nd; ++i) s.push_back((in[0][2 + i] + (2 * pad - k)) / st + 1);
    return s;
  };
  d.infer = [nd, out_dims, name = d.name](const nlohmann::json& p, const std::vector<TensorType>& in) {
    MC_CHECK(in[0].dtype == DType::kF32 && static_cast<int>(in[0].shape.size()) == nd + 2, name, " needs [N, C, ",
             nd, " spatial dims]");
    int64_t k = p.at("k"), pad = p.value("pad", 0);
    MC_CHECK(2 * pad <= k, name, ": padding must be at most half the kernel");
    Shape s = shape_by(out_dims, p, in);
    for (int i = 0; i < nd; ++i) MC_CHECK(s[2 + i] > 0, name, ": window larger than the input");
    return TensorType{s, DType::kF32};
  };
  d.infer_dims = out_dims;
  d.py_init = [name = d.name](const nlohmann::json& p, const std::vector<TensorType>&) {
    std::string s = "nn." + name + "(kernel_size=" + spelled(p, "k", std::to_string(p.at("k").get<int64_t>())) +
                    ", stride=" + spelled(p, "stride", std::to_string(p.at("stride").get<int64_t>()));
    if (p.value("pad", 0) != 0) s += ", padding=" + spelled(p, "pad", std::to_string(p["pad"].get<int64_t>()));
    return s + ")";
  };
  d.py_call = call_module;
  d.cost = [nd](const nlohmann::json& p, const std::vector<TensorType>& in, const TensorType& out) {
    double kv = 1;
    for (int i = 0; i < nd; ++i) kv *= p.at("k").get<double>();
    return Cost{numel(out.shape) * kv, 4.0 * (numel(in[0].shape) + numel(out.shape))};
  };
  d.lower = [nd, max](const LowerCtx& c) {
    const Dims &x = c.in_d[0], &o = c.out_d;
    int64_t k = c.n.p.at("k"), st = c.n.p.at("stride"), pad = c.n.p.value("pad", 0);
    Dims xs = strides_of(x);
    std::string b = std::string(max ? "    float acc = -INFINITY;\n" : "    double acc = 0.0;\n");
    std::string off = "c0 * " + lit(xs[0]) + " + c1 * " + lit(xs[1]), ind = "    ", close;
    for (int i = 0; i < nd; ++i) {
      std::string ki = "k" + std::to_string(i), pi = "p" + std::to_string(i);
      b += ind + "for (long long " + ki + " = 0; " + ki + " < " + lit(k) + "; ++" + ki + ") {\n";
      b += ind + "  const long long " + pi + " = c" + std::to_string(2 + i) + " * " + lit(st) + " - " + lit(pad) + " + " + ki + ";\n";
      b += ind + "  if (" + pi + " < 0 || " + pi + " >= " + lit(x[2 + i]) + ") continue;\n";
      off += " + " + pi + " * " + lit(xs[2 + i]);
      ind += "  ";
      close += "}";
    }
    b += ind + (max ? "{ const float v = a0[" + off + "]; acc = (v > acc || isnan(v)) ? v : acc; }\n"
                    : "acc += a0[" + off + "];\n");
    b += "    " + close + "\n";
    double vol = 1;
    for (int i = 0; i < nd; ++i) vol *= static_cast<double>(k);
    // AvgPool counts padded positions (count_include_pad=True, PyTorch's default).
    b += max ? "    STORE(o, acc);\n" : "    STORE(o, acc / " + std::to_string(vol) + ");\n";
    return gather_kernel(o, b);
  };
  lib[d.name] = d;
}

void add_global_avg_pool(std::map<std::string, OpDef>& lib) {
  OpDef d;
  d.name = "GlobalAvgPool";
  d.family = "pool";
  d.kind = OpKind::kKernel;
  d.arity = 1;
  d.sample = [](Rng&, const std::vector<TensorType>& in) -> std::optional<nlohmann::json> {
    if (in[0].dtype != DType::kF32 || in[0].shape.size() < 3) return std::nullopt;
    return nlohmann::json{{"rank", in[0].shape.size()}};
  };
  d.fresh = [](Rng& rng, Graph& g, int64_t budget) {
    int x = add_float_input(g, random_shape(rng, 4, budget, 4));
    return std::make_pair(std::vector<int>{x}, nlohmann::json{{"rank", 4}});
  };
  d.infer = [](const nlohmann::json&, const std::vector<TensorType>& in) {
    MC_CHECK(in[0].dtype == DType::kF32 && in[0].shape.size() >= 3, "GlobalAvgPool needs [N, C, ...]");
    return TensorType{{in[0].shape[0], in[0].shape[1]}, DType::kF32};
  };
  d.infer_dims = [](const nlohmann::json&, const std::vector<Dims>& in) { return Dims{in[0][0], in[0][1]}; };
  d.py_call = [](const nlohmann::json& p, const std::vector<std::string>& a, const std::string&) {
    std::string dims;
    for (int i = 2; i < p.at("rank").get<int>(); ++i) dims += (i > 2 ? ", " : "") + std::to_string(i);
    return "torch.mean(" + a[0] + ", dim=[" + dims + "])";
  };
  d.cost = [](const nlohmann::json&, const std::vector<TensorType>& in, const TensorType&) {
    return Cost{static_cast<double>(numel(in[0].shape)), 4.0 * numel(in[0].shape)};
  };
  d.lower = [](const LowerCtx& c) {
    const Dims& x = c.in_d[0];
    Dim sp = numel(Dims(x.begin() + 2, x.end()));
    RowIdx ri = row_idx(Dims{x[0] * x[1], sp}, 1, 2);
    std::string b = "  const long long row = blockIdx.x;\n  double s = 0.0;\n";
    b += "  for (long long r = threadIdx.x; r < " + lit(sp) + "; r += blockDim.x) s += a0[" + ri.at("row", "r") + "];\n";
    b += "  s = mc_block_sum(s);\n  if (threadIdx.x == 0) STORE(row, s / " + dbl(sp) + ");\n";
    Kernel k;
    k.body = b;
    k.grid = ri.rows.bare();
    k.block = kRowBlock;
    return k;
  };
  lib[d.name] = d;
}

}  // namespace

void register_conv_ops(std::map<std::string, OpDef>& lib) {
  for (int nd = 1; nd <= 3; ++nd) {
    add_conv(lib, nd, false);
    add_conv(lib, nd, true);
    add_pool(lib, nd, true);
    add_pool(lib, nd, false);
  }
  add_global_avg_pool(lib);
}

}  // namespace mc::synth
