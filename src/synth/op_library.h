// The op library: every op the synthesizer can place in a graph knows its family, how to pick
// parameters for given inputs, its shape and dtype rule, its PyTorch spelling, its cost, and
// how the built-in teacher lowers it to CUDA. Ops register themselves per family (ops_*.cc).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "synth/dim.h"
#include "synth/graph.h"

namespace mc::synth {

using Rng = std::mt19937_64;
int64_t pick(Rng& rng, const std::vector<int64_t>& choices);
int64_t uniform_int(Rng& rng, int64_t lo, int64_t hi);  // inclusive
double uniform(Rng& rng, double lo, double hi);
bool coin(Rng& rng, double p_true);

enum class OpKind {
  kElementwise,  // out[i] = f(operands broadcast to out): fused into chains and epilogues
  kView,         // reshape of a contiguous value: no kernel, the buffer is reused
  kKernel,       // its own kernel (gather-style, row-wise, GEMM); may take a fused epilogue
};

struct Cost {
  double flops = 0, bytes = 0;
};

// Context for lowering one node to one CUDA kernel.
struct LowerCtx {
  const Graph& g;
  const Node& n;
  std::vector<TensorType> in;          // types of n.args
  std::vector<StateTensor> state;      // the node's state tensors
  TensorType out;
  // The same shapes as the kernel text spells them (dim.h): lowerings write sizes from these,
  // never from the values above, which serve checks and launch choices only.
  std::vector<Dims> in_d;
  std::vector<Dims> state_d;
  Dims out_d;
  // Parameter names inside the kernel: tensor args a0, a1, ...; state s0, s1, ...; output `out`.
  // Bodies write results with STORE(linear_output_index, value).
};

struct Kernel {
  std::string body;       // statements of the __global__ function
  std::string grid;       // host C++ expression (literals and the named sizes)
  int block = 256;
  std::string smem = "0";  // dynamic shared memory bytes
};

using DimsRule = std::function<Dims(const nlohmann::json& p, const std::vector<Dims>& in)>;

struct OpDef {
  std::string name;    // library name, also the title part ("ReLU", "Conv2d")
  std::string family;  // activation, elementwise, reduction, scan, norm, softmax, matmul, conv,
                       // pool, loss, index, attention, layout
  OpKind kind = OpKind::kKernel;
  int arity = 1;       // tensor arguments
  bool anchor = false; // can start a level-2 fusion (GEMM, conv, ...)

  // Parameters for a node applied to `in` (nullopt: not applicable to these inputs).
  std::function<std::optional<nlohmann::json>(Rng&, const std::vector<TensorType>& in)> sample;
  // A fresh problem for this op alone: creates the graph inputs (in `g`), returns the args and
  // parameters. `budget` is the rough element count to aim for.
  std::function<std::pair<std::vector<int>, nlohmann::json>(Rng&, Graph& g, int64_t budget)> fresh;
  std::function<TensorType(const nlohmann::json& p, const std::vector<TensorType>& in)> infer;
  std::function<std::vector<StateTensor>(const nlohmann::json& p, const std::vector<TensorType>& in)> state;
  // Python: module constructor ("" when functional) and the forward expression; `self_attr` is
  // "self.<attr>".
  std::function<std::string(const nlohmann::json& p, const std::vector<TensorType>& in)> py_init;
  std::function<std::string(const nlohmann::json& p, const std::vector<std::string>& args,
                            const std::string& self_attr)> py_call;
  std::function<Cost(const nlohmann::json& p, const std::vector<TensorType>& in, const TensorType& out)> cost;

  // Teacher. Elementwise: a float expression of the operands (args, then state, broadcast to
  // the output). Kernel: the whole kernel.
  std::function<std::string(const nlohmann::json& p, const std::vector<std::string>& operands)> cuda_expr;
  std::function<Kernel(const LowerCtx&)> lower;
  // Optional: the output's and the state's dims as expressions of the inputs' (dim.h), where
  // they are not simply input dims (teacher_sizes.cc matches those by value).
  DimsRule infer_dims;
  std::function<std::vector<Dims>(const nlohmann::json& p, const std::vector<Dims>& in)> state_dims;
};

// The shape `rule` (an infer_dims) gives on these inputs' values: an op states its output's
// sizes once, and its infer checks the inputs and calls this.
Shape shape_by(const DimsRule& rule, const nlohmann::json& p, const std::vector<TensorType>& in);

const std::map<std::string, OpDef>& op_library();
const OpDef& op(const std::string& name);  // throws mc::Error for an unknown op
std::vector<std::string> op_families();

// Registration, one function per family file.
void register_elementwise_ops(std::map<std::string, OpDef>& lib);
void register_reduce_ops(std::map<std::string, OpDef>& lib);     // reductions, scans, softmax, norms, losses
void register_matmul_ops(std::map<std::string, OpDef>& lib);
void register_conv_ops(std::map<std::string, OpDef>& lib);       // convolutions and pooling
void register_index_ops(std::map<std::string, OpDef>& lib);      // gather, embedding, attention, layout

// Helpers shared by the family files.
// py_call of ops that are nn modules: "self.<attr>(x)".
std::string call_module(const nlohmann::json& p, const std::vector<std::string>& args, const std::string& self_attr);
// A module argument as the problem writes it: its name (Node::p["names"]: kernel_size) where the
// problem names it, else `literal`; spelled_dim: the same as a size in kernel text (dim.h).
std::string spelled(const nlohmann::json& p, const std::string& key, const std::string& literal);
Dim spelled_dim(const nlohmann::json& p, const std::string& key);
std::string lit(int64_t v);                       // "128LL" (a size: lit(const Dim&))
std::string flit(double v);                       // "0.5f" spelled exactly
std::string dlit(double v);                       // "0.5" (double, 17 digits)
std::string py_shape(const Shape& s);             // "128, 4096"
Shape strides_of(const Shape& s);                 // contiguous strides
int norm_dim(int64_t dim, size_t rank);           // negative dims -> positive, checked
// Float input with KernelBench's distribution, added to g; returns its value id.
int add_float_input(Graph& g, Shape shape, const std::string& init = "rand");
int add_int_input(Graph& g, Shape shape, int64_t high);
// A random shape of `rank` dims with about `budget` elements, each dim at least `min_dim`.
Shape random_shape(Rng& rng, int rank, int64_t budget, int64_t min_dim = 2);

}  // namespace mc::synth
