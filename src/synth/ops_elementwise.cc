// Elementwise ops: activations, scalar arithmetic, binary arithmetic with broadcasting and
// per-channel parameters. The teacher fuses chains of these into one kernel or into the
// epilogue of the kernel that produced their input.
#include <cmath>

#include "common/check.h"
#include "synth/op_library.h"

namespace mc::synth {
namespace {

std::string subst(std::string t, const std::string& key, const std::string& v) {
  for (size_t pos; (pos = t.find(key)) != std::string::npos;) t.replace(pos, key.size(), v);
  return t;
}

Shape broadcast(const Shape& a, const Shape& b) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    MC_CHECK(da == db || da == 1 || db == 1, "shapes ", shape_str(a), " and ", shape_str(b),
             " do not broadcast");
    out[i] = std::max(da, db);
  }
  return out;
}

Cost ew_cost(const nlohmann::json&, const std::vector<TensorType>& in, const TensorType& out) {
  double bytes = 4.0 * numel(out.shape);
  for (auto& t : in) bytes += 4.0 * numel(t.shape);
  return {static_cast<double>(numel(out.shape)), bytes};
}

bool float_input(const std::vector<TensorType>& in) {
  for (auto& t : in)
    if (t.dtype != DType::kF32) return false;
  return true;
}

// Unary op from templates: `py` uses {x} and {p.<name>}; `cu` uses {x} and the same.
struct Unary {
  const char* name;
  const char* family;
  const char* py;
  const char* cu;
  std::function<nlohmann::json(Rng&)> params;
};

std::string fill(std::string t, const nlohmann::json& p, const std::string& x, bool cuda) {
  t = subst(t, "{x}", x);
  for (auto& [k, v] : p.items())
    t = subst(t, "{" + k + "}", cuda ? flit(v.get<double>()) : nlohmann::json(v.get<double>()).dump());
  return t;
}

void add_unary(std::map<std::string, OpDef>& lib, const Unary& u) {
  OpDef d;
  d.name = u.name;
  d.family = u.family;
  d.kind = OpKind::kElementwise;
  d.arity = 1;
  auto params = u.params ? u.params : [](Rng&) { return nlohmann::json::object(); };
  d.sample = [params](Rng& rng, const std::vector<TensorType>& in) -> std::optional<nlohmann::json> {
    if (!float_input(in)) return std::nullopt;
    return params(rng);
  };
  d.fresh = [params](Rng& rng, Graph& g, int64_t budget) {
    int x = add_float_input(g, random_shape(rng, static_cast<int>(uniform_int(rng, 2, 3)), budget));
    return std::make_pair(std::vector<int>{x}, params(rng));
  };
  d.infer = [name = d.name](const nlohmann::json&, const std::vector<TensorType>& in) {
    MC_CHECK(in[0].dtype == DType::kF32, name, " needs a float input");
    return in[0];
  };
  std::string py = u.py, cu = u.cu;
  d.py_call = [py](const nlohmann::json& p, const std::vector<std::string>& a, const std::string&) {
    return fill(py, p, a[0], false);
  };
  d.cuda_expr = [cu](const nlohmann::json& p, const std::vector<std::string>& o) {
    return "(" + fill(cu, p, "(" + o[0] + ")", true) + ")";
  };
  d.cost = ew_cost;
  lib[d.name] = d;
}

// Binary op over two graph values (same shape or broadcast).
void add_binary(std::map<std::string, OpDef>& lib, const char* name, const char* py_op,
                const char* cu) {
  OpDef d;
  d.name = name;
  d.family = "elementwise";
  d.kind = OpKind::kElementwise;
  d.arity = 2;
  d.sample = [](Rng&, const std::vector<TensorType>& in) -> std::optional<nlohmann::json> {
    if (!float_input(in)) return std::nullopt;
    try {
      if (broadcast(in[0].shape, in[1].shape) != in[0].shape) return std::nullopt;
    } catch (const Error&) {
      return std::nullopt;
    }
    return nlohmann::json::object();
  };
  d.fresh = [](Rng& rng, Graph& g, int64_t budget) {
    Shape s = random_shape(rng, static_cast<int>(uniform_int(rng, 2, 3)), budget);
    Shape s2 = s;
    if (coin(rng, 0.3)) s2[0] = 1;  // broadcast along the first dim
    int a = add_float_input(g, s), b = add_float_input(g, s2);
    return std::make_pair(std::vector<int>{a, b}, nlohmann::json::object());
  };
  d.infer = [name = d.name](const nlohmann::json&, const std::vector<TensorType>& in) {
    MC_CHECK(float_input(in), name, " needs float inputs");
    return TensorType{broadcast(in[0].shape, in[1].shape), DType::kF32};
  };
  std::string pyo = py_op, cuo = cu;
  d.py_call = [pyo](const nlohmann::json&, const std::vector<std::string>& a, const std::string&) {
    if (pyo.starts_with("torch.")) return pyo + "(" + a[0] + ", " + a[1] + ")";
    return a[0] + " " + pyo + " " + a[1];
  };
  d.cuda_expr = [cuo](const nlohmann::json&, const std::vector<std::string>& o) {
    return "(" + subst(subst(cuo, "{a}", "(" + o[0] + ")"), "{b}", "(" + o[1] + ")") + ")";
  };
  d.cost = ew_cost;
  lib[d.name] = d;
}

// x (op) self.<param>, the parameter shaped to broadcast per channel (dim 1) or per feature
// (last dim), as KernelBench's level-2 problems do with `bias_shape = (C, 1, 1)`.
void add_param_binary(std::map<std::string, OpDef>& lib, const char* name, const char* py_op,
                      const char* cu) {
  OpDef d;
  d.name = name;
  d.family = "elementwise";
  d.kind = OpKind::kElementwise;
  d.arity = 1;
  // Shape (the values) or Dims (as the teacher spells them).
  auto param_shape = [](const nlohmann::json& p, const auto& x) {
    std::decay_t<decltype(x)> s;
    if (p.value("per", "channel") == "channel" && x.size() >= 3) {
      s.push_back(x[1]);
      for (size_t i = 2; i < x.size(); ++i) s.push_back(1);
    } else {
      s.push_back(x.back());
    }
    return s;
  };
  d.sample = [](Rng& rng, const std::vector<TensorType>& in) -> std::optional<nlohmann::json> {
    if (!float_input(in) || in[0].shape.size() < 2) return std::nullopt;
    return nlohmann::json{{"per", in[0].shape.size() >= 3 && coin(rng, 0.8) ? "channel" : "feature"}};
  };
  d.fresh = [](Rng& rng, Graph& g, int64_t budget) {
    int x = add_float_input(g, random_shape(rng, static_cast<int>(uniform_int(rng, 2, 4)), budget));
    return std::make_pair(std::vector<int>{x}, nlohmann::json{{"per", coin(rng, 0.5) ? "channel" : "feature"}});
  };
  d.infer = [name = d.name](const nlohmann::json&, const std::vector<TensorType>& in) {
    MC_CHECK(in[0].dtype == DType::kF32 && in[0].shape.size() >= 2, name, " needs a float input of rank >= 2");
    return in[0];
  };
  d.state = [param_shape](const nlohmann::json& p, const std::vector<TensorType>& in) {
    return std::vector<StateTensor>{{"", param_shape(p, in[0].shape)}};
  };
  d.state_dims = [param_shape](const nlohmann::json& p, const std::vector<Dims>& in) {
    return std::vector<Dims>{param_shape(p, in[0])};
  };
  d.py_init = [param_shape](const nlohmann::json& p, const std::vector<TensorType>& in) {
    return "nn.Parameter(torch.randn(" + py_shape(param_shape(p, in[0].shape)) + "))";
  };
  std::string pyo = py_op, cuo = cu;
  d.py_call = [pyo](const nlohmann::json&, const std::vector<std::string>& a, const std::string& self) {
    return a[0] + " " + pyo + " " + self;
  };
  d.cuda_expr = [cuo](const nlohmann::json&, const std::vector<std::string>& o) {
    return "(" + subst(subst(cuo, "{a}", "(" + o[0] + ")"), "{b}", "(" + o[1] + ")") + ")";
  };
  d.cost = ew_cost;
  lib[d.name] = d;
}

}  // namespace

void register_elementwise_ops(std::map<std::string, OpDef>& lib) {
  auto slope = [](Rng& r) { return nlohmann::json{{"s", std::round(uniform(r, 0.01, 0.3) * 100) / 100}}; };
  auto alpha = [](Rng& r) { return nlohmann::json{{"a", std::round(uniform(r, 0.5, 1.5) * 10) / 10}}; };
  auto range = [](Rng& r) {
    double lo = -std::round(uniform(r, 0.2, 1.0) * 10) / 10;
    return nlohmann::json{{"lo", lo}, {"hi", std::round(uniform(r, 0.2, 1.0) * 10) / 10}};
  };
  auto scalar = [](Rng& r) { return nlohmann::json{{"c", std::round(uniform(r, 0.2, 3.0) * 10) / 10}}; };
  const std::vector<Unary> unary = {
      {"ReLU", "activation", "torch.relu({x})", "fmaxf({x}, 0.0f)", {}},
      {"LeakyReLU", "activation", "F.leaky_relu({x}, negative_slope={s})", "{x} > 0.0f ? {x} : {x} * {s}", slope},
      {"GELU", "activation", "F.gelu({x})", "0.5f * {x} * (1.0f + erff({x} * 0.7071067811865476f))", {}},
      {"Sigmoid", "activation", "torch.sigmoid({x})", "1.0f / (1.0f + expf(-{x}))", {}},
      {"Tanh", "activation", "torch.tanh({x})", "tanhf({x})", {}},
      {"SiLU", "activation", "F.silu({x})", "{x} / (1.0f + expf(-{x}))", {}},
      {"ELU", "activation", "F.elu({x}, alpha={a})", "{x} > 0.0f ? {x} : {a} * expm1f({x})", alpha},
      {"Softplus", "activation", "F.softplus({x})", "{x} > 20.0f ? {x} : log1pf(expf({x}))", {}},
      {"Hardtanh", "activation", "F.hardtanh({x}, min_val={lo}, max_val={hi})", "fminf(fmaxf({x}, {lo}), {hi})", range},
      {"HardSigmoid", "activation", "F.hardsigmoid({x})", "fminf(fmaxf({x} + 3.0f, 0.0f), 6.0f) / 6.0f", {}},
      {"HardSwish", "activation", "F.hardswish({x})", "{x} * fminf(fmaxf({x} + 3.0f, 0.0f), 6.0f) / 6.0f", {}},
      {"Mish", "activation", "F.mish({x})", "{x} * tanhf({x} > 20.0f ? {x} : log1pf(expf({x})))", {}},
      {"Softsign", "activation", "F.softsign({x})", "{x} / (1.0f + fabsf({x}))", {}},
      {"SELU", "activation", "F.selu({x})",
       "1.0507009873554805f * ({x} > 0.0f ? {x} : 1.6732632423543772f * expm1f({x}))", {}},
      {"Scale", "elementwise", "{x} * {c}", "{x} * {c}", scalar},
      {"AddScalar", "elementwise", "{x} + {c}", "{x} + {c}", scalar},
      {"Clamp", "elementwise", "torch.clamp({x}, min={lo}, max={hi})", "fminf(fmaxf({x}, {lo}), {hi})", range},
      {"Square", "elementwise", "{x} * {x}", "{x} * {x}", {}},
  };
  for (const auto& u : unary) add_unary(lib, u);
  add_binary(lib, "Add", "+", "{a} + {b}");
  add_binary(lib, "Sub", "-", "{a} - {b}");
  add_binary(lib, "Mul", "*", "{a} * {b}");
  add_binary(lib, "Maximum", "torch.maximum", "fmaxf({a}, {b})");
  add_param_binary(lib, "BiasAdd", "+", "{a} + {b}");
  add_param_binary(lib, "ScaleParam", "*", "{a} * {b}");
}

}  // namespace mc::synth
