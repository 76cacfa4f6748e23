#include "synth/teacher.h"

#include <set>

#include "common/check.h"
#include "synth/kernel_helpers.h"
#include "synth/op_library.h"
#include "synth/python_emitter.h"
#include "synth/teacher_sizes.h"

namespace mc::synth {
namespace {

const char* ctype(DType t) { return t == DType::kF32 ? "float" : "long long"; }

// Offset into an operand of shape `os`, broadcast against `out`, for output linear index `o`.
std::string broadcast_offset(const Dims& os, const Dims& out, const std::string& o) {
  Dims ost = strides_of(out), st = strides_of(os);
  size_t lead = out.size() - os.size();
  std::string e;
  for (size_t i = 0; i < os.size(); ++i) {
    if (os[i].v() == 1) continue;
    size_t oi = i + lead;
    std::string coord = "((" + o + " / " + lit(ost[oi]) + ") % " + lit(out[oi]) + ")";
    e += (e.empty() ? "" : " + ") + coord + " * " + lit(st[i]);
  }
  if (values(os) == values(out)) return o;
  return e.empty() ? "0" : e;
}

struct Buffer {
  std::string expr;  // host expression of the pointer
  DType dtype = DType::kF32;
};

// One launch: the node that owns it (kernel or first elementwise op) and the elementwise ops
// fused after it.
struct Group {
  int anchor = -1;
  std::vector<int> chain;  // node indices fused into the epilogue
  int out_value = -1;
};

class Lowering {
 public:
  Lowering(const Graph& g) : g_(g), sizes_(g), uses_(g.uses()) {
    auto st = g.state();
    for (size_t j = 0; j < st.size(); ++j) node_state_[st[j].first].push_back(static_cast<int>(g.inputs.size() + j));
    n_args_ = static_cast<int>(g.inputs.size() + st.size());
  }

  void run() {
    for (size_t i = 0; i < g_.inputs.size(); ++i) buf_[static_cast<int>(i)] = {"ARG(" + std::to_string(i) + ")", g_.inputs[i].type.dtype};
    for (size_t i = 0; i < g_.nodes.size();) {
      const Node& n = g_.nodes[i];
      const OpDef& d = op(n.op);
      if (d.kind == OpKind::kView) {
        buf_[n.out] = buf_.at(n.args[0]);
        ++i;
        continue;
      }
      Group gr;
      gr.anchor = static_cast<int>(i);
      gr.out_value = n.out;
      size_t j = i + 1;
      // Fuse the following elementwise ops while the running value has no other reader.
      while (j < g_.nodes.size()) {
        const Node& m = g_.nodes[j];
        if (op(m.op).kind != OpKind::kElementwise) break;
        int cur = gr.out_value;
        if (uses_[cur] != 1 || g_.values[cur].dtype != DType::kF32 || g_.values[m.out].shape != g_.values[cur].shape) break;
        bool reads_cur = false;
        for (int a : m.args) reads_cur |= a == cur;
        if (!reads_cur) break;
        gr.chain.push_back(static_cast<int>(j));
        gr.out_value = m.out;
        ++j;
      }
      emit(gr);
      i = j;
    }
    int out = g_.output;
    final_copy_ = buf_.at(out).expr != "OUT";
  }

  TeacherSolution finish(const std::string& module_name);

 private:
  std::string state_ptr(int node, int k) const { return "ARG(" + std::to_string(node_state_.at(node).at(k)) + ")"; }

  // The value `v` as read inside an epilogue from output index `_o`.
  std::string operand(int v, int cur, const Dims& out, std::vector<std::pair<std::string, DType>>& extra) {
    if (v == cur) return "_v";
    const Buffer& b = buf_.at(v);
    extra.push_back({b.expr, b.dtype});
    return "e" + std::to_string(extra.size() - 1) + "[" + broadcast_offset(sizes_.value(v), out, "_o") + "]";
  }

  std::string chain_code(const Group& gr, int start_value, const Dims& out,
                         std::vector<std::pair<std::string, DType>>& extra) {
    std::string code;
    int cur = start_value;
    for (int ni : gr.chain) {
      const Node& m = g_.nodes[ni];
      std::vector<std::string> ops;
      for (int a : m.args) ops.push_back(operand(a, cur, out, extra));
      size_t n_state = node_state_.count(ni) ? node_state_.at(ni).size() : 0;
      for (size_t k = 0; k < n_state; ++k) {
        const Dims& st = sizes_.state(node_state_.at(ni)[k] - static_cast<int>(g_.inputs.size()));
        extra.push_back({state_ptr(ni, static_cast<int>(k)), DType::kF32});
        ops.push_back("e" + std::to_string(extra.size() - 1) + "[" + broadcast_offset(st, out, "_o") + "]");
      }
      code += " _v = " + op(m.op).cuda_expr(m.p, ops) + ";";
      cur = m.out;
      ++fused_;
    }
    return code;
  }

  void emit(const Group& gr) {
    const Node& n = g_.nodes[gr.anchor];
    const OpDef& d = op(n.op);
    std::string name = "k" + std::to_string(launches_.size());
    const TensorType& out_t = g_.values[gr.out_value];
    const Dims& out_d = sizes_.value(gr.out_value);
    std::vector<std::pair<std::string, DType>> params;  // (host pointer, dtype) in kernel order
    std::vector<std::string> decl;
    std::vector<std::pair<std::string, DType>> extra;
    Kernel k;
    Group chain = gr;
    if (d.kind == OpKind::kElementwise) {
      // The anchor itself becomes the first op of the chain, over a gather kernel.
      chain.chain.insert(chain.chain.begin(), gr.anchor);
      std::string code = chain_code(chain, -1, out_d, extra);
      k = gather_kernel(out_d, "    float _v = 0.0f; const long long _o = o;" + code + "\n    out[_o] = _v;\n");
    } else {
      LowerCtx c{g_, n, {}, {}, g_.values[n.out], {}, {}, {}};
      for (int a : n.args) c.in.push_back(g_.values[a]), c.in_d.push_back(sizes_.value(a));
      if (d.state) c.state = d.state(n.p, c.in);
      if (node_state_.count(gr.anchor))
        for (int j : node_state_.at(gr.anchor)) c.state_d.push_back(sizes_.state(j - static_cast<int>(g_.inputs.size())));
      c.out_d = sizes_.value(n.out);
      k = d.lower(c);
      for (size_t a = 0; a < n.args.size(); ++a) {
        const Buffer& b = buf_.at(n.args[a]);
        decl.push_back("const " + std::string(ctype(b.dtype)) + "* __restrict__ a" + std::to_string(a));
        params.push_back({b.expr, b.dtype});
      }
      for (size_t s = 0; s < c.state.size(); ++s) {
        decl.push_back("const " + std::string(ctype(c.state[s].dtype)) + "* __restrict__ s" + std::to_string(s));
        params.push_back({state_ptr(gr.anchor, static_cast<int>(s)), c.state[s].dtype});
      }
      std::string code = chain_code(gr, n.out, out_d, extra);
      std::string store = out_t.dtype == DType::kF32
                              ? "#define STORE(o_, v_) do { const long long _o = (o_); float _v = (v_);" + code + " out[_o] = _v; } while (0)\n"
                              : "#define STORE(o_, v_) do { const long long _o = (o_); out[_o] = (v_); } while (0)\n";
      k.body = store + k.body + "#undef STORE\n";
    }
    for (size_t e = 0; e < extra.size(); ++e) {
      decl.push_back("const " + std::string(ctype(extra[e].second)) + "* __restrict__ e" + std::to_string(e));
      params.push_back(extra[e]);
    }
    decl.push_back(std::string(ctype(out_t.dtype)) + "* __restrict__ out");
    // The output buffer: the graph's output tensor, or a scratch allocation.
    std::string out_expr;
    if (gr.out_value == g_.output) {
      out_expr = "OUT";
    } else {
      out_expr = "tmp" + std::to_string(temps_.size());
      temps_.push_back({out_expr, gr.out_value});
    }
    buf_[gr.out_value] = {out_expr, out_t.dtype};
    std::string sig;
    for (size_t i = 0; i < decl.size(); ++i) sig += (i ? ", " : "") + decl[i];
    kernels_ += "__global__ void __launch_bounds__(" + std::to_string(k.block) + ") " + name + "(" + sig + ") {\n" + k.body + "}\n\n";
    std::string args;
    for (auto& [p, t] : params) args += "(const " + std::string(ctype(t)) + "*)" + p + ", ";
    launches_.push_back("  " + name + "<<<" + k.grid + ", " + std::to_string(k.block) + ", " + k.smem + ", stream>>>(" + args +
                        "(" + ctype(out_t.dtype) + "*)" + out_expr + ");\n");
  }

  const Graph& g_;
  TeacherSizes sizes_;
  std::vector<int> uses_;
  std::map<int, std::vector<int>> node_state_;  // node -> argument indices of its state
  int n_args_ = 0;
  std::map<int, Buffer> buf_;
  std::vector<std::pair<std::string, int>> temps_;  // (name, value id)
  std::string kernels_;
  std::vector<std::string> launches_;
  int fused_ = 0;
  bool final_copy_ = false;
};

std::string numel_bytes(const Dims& d, DType t) { return (numel(d) * Dim(t == DType::kF32 ? 4 : 8)).bare(); }

TeacherSolution Lowering::finish(const std::string& module_name) {
  const TensorType& out_t = g_.values[g_.output];
  std::string body;
  for (auto& l : launches_) body += l;
  std::string copy;
  if (final_copy_)
    copy = "  cudaMemcpyAsync(OUT, " + buf_.at(g_.output).expr + ", " + numel_bytes(sizes_.value(g_.output), out_t.dtype) +
           ", cudaMemcpyDeviceToDevice, stream);\n";

  // The named sizes this source uses (teacher_sizes.h), for the kernels and the host code of
  // both formats.
  std::string host = body + copy;
  for (auto& [name, v] : temps_)
    for (auto& x : sizes_.value(v)) host += " " + x.bare();
  for (auto& x : sizes_.value(g_.output)) host += " " + x.bare();
  std::string consts = sizes_.constants(kernels_ + host);
  if (!consts.empty()) consts += "\n";

  TeacherSolution s;
  s.kernels = static_cast<int>(launches_.size());
  s.fused_ops = fused_;

  // ---- native format -----------------------------------------------------------------------
  std::string nat = "// Built-in teacher solution (native format): " + g_.title() + "\n";
  nat += "#include \"musacoder/native_abi.h\"\n" + teacher_prelude(kernels_) + "\n" + consts + kernels_;
  nat += "extern \"C\" int mc_forward(const mc_tensor* inputs, int n_inputs, mc_tensor* outputs, int n_outputs,\n"
         "                           cudaStream_t stream) {\n";
  nat += "  if (n_inputs != " + std::to_string(n_args_) + " || n_outputs != 1) return 1;\n";
  nat += "#define ARG(i) (inputs[i].data)\n  void* OUT = outputs[0].data;\n";
  for (auto& [name, v] : temps_)
    nat += "  void* " + name + " = nullptr;\n  if (cudaMallocAsync(&" + name + ", " + numel_bytes(sizes_.value(v), g_.values[v].dtype) +
           ", stream) != cudaSuccess) return 2;\n";
  nat += body + copy;
  for (auto& [name, v] : temps_) nat += "  cudaFreeAsync(" + name + ", stream);\n";
  nat += "#undef ARG\n  return cudaGetLastError() == cudaSuccess ? 0 : 3;\n}\n";
  s.native_cu = nat;

  // ---- KernelBench format --------------------------------------------------------------------
  auto torch_dtype = [](DType t) { return t == DType::kF32 ? "torch::kFloat32" : "torch::kInt64"; };
  auto shape_list = [](const Dims& sh) {
    std::string r = "{";
    for (size_t i = 0; i < sh.size(); ++i) r += (i ? ", " : "") + sh[i].bare();
    return r + "}";
  };
  std::string cu = "#include <torch/extension.h>\n#include <ATen/cuda/CUDAContext.h>\n#include <vector>\n";
  cu += teacher_prelude(kernels_) + "\n" + consts + kernels_;
  cu += "torch::Tensor forward(std::vector<torch::Tensor> ins) {\n";
  cu += "  TORCH_CHECK(ins.size() == " + std::to_string(n_args_) + ", \"expected " + std::to_string(n_args_) + " tensors\");\n";
  cu += "  for (auto& t : ins) TORCH_CHECK(t.is_contiguous(), \"inputs must be contiguous\");\n";
  cu += "  cudaStream_t stream = at::cuda::getCurrentCUDAStream();\n";
  cu += "  auto opts = ins[0].options();\n";
  cu += "  torch::Tensor out_t = torch::empty(" + shape_list(sizes_.value(g_.output)) + ", opts.dtype(" + torch_dtype(out_t.dtype) + "));\n";
  cu += "  void* OUT = out_t.data_ptr();\n#define ARG(i) (ins[i].data_ptr())\n";
  for (auto& [name, v] : temps_)
    cu += "  torch::Tensor " + name + "_t = torch::empty(" + shape_list(sizes_.value(v)) + ", opts.dtype(" + torch_dtype(g_.values[v].dtype) +
          "));\n  void* " + name + " = " + name + "_t.data_ptr();\n";
  cu += body + copy + "#undef ARG\n  return out_t;\n}\n";

  std::string py = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
                   "from torch.utils.cpp_extension import load_inline\n\n";
  py += "cuda_source = r'''\n" + cu + "'''\n\n";
  py += "cpp_source = \"#include <torch/extension.h>\\n#include <vector>\\ntorch::Tensor forward(std::vector<torch::Tensor> ins);\"\n\n";
  py += "_ext = load_inline(name=\"" + module_name + "\", cpp_sources=cpp_source, cuda_sources=cuda_source,\n"
        "                   functions=[\"forward\"], verbose=False)\n\n\n";
  py += "class ModelNew(nn.Module):\n    def __init__(" + init_params(g_) + "):\n        super().__init__()\n" + init_body(g_) + "\n";
  py += "    def forward(" + forward_params(g_) + "):\n        return _ext.forward([";
  std::vector<std::string> args;
  for (auto& in : g_.inputs) args.push_back(in.name);
  for (auto& e : state_exprs(g_)) args.push_back(e);
  for (size_t i = 0; i < args.size(); ++i) py += (i ? ", " : "") + args[i];
  py += "])\n";
  s.kernelbench_py = py;
  return s;
}

}  // namespace

TeacherSolution lower_graph(const Graph& g, const std::string& module_name) {
  MC_CHECK(g.output >= 0 && !g.nodes.empty(), "cannot lower an empty graph");
  Lowering l(g);
  l.run();
  return l.finish(module_name);
}

}  // namespace mc::synth
