// A synthesized problem as a typed op graph: graph inputs (what get_inputs() returns), nodes in
// topological order (each one op of the library applied to earlier values), one output. The
// same graph is lowered to a KernelBench problem file (python_emitter) and to CUDA solutions
// (teacher), so both always describe one computation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mc::synth {

using Shape = std::vector<int64_t>;
int64_t numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[128, 4096]"

enum class DType { kF32, kI64 };

struct TensorType {
  Shape shape;
  DType dtype = DType::kF32;
  bool operator==(const TensorType&) const = default;
};

// A state_dict entry a node owns (nn module parameters and buffers, or an nn.Parameter).
struct StateTensor {
  std::string suffix;  // "weight", "bias", "running_mean", ...; "" for a bare nn.Parameter
  Shape shape;
  DType dtype = DType::kF32;
};

struct GraphInput {
  std::string name;  // python argument name of forward()
  TensorType type;
  int64_t int_high = 0;  // integer inputs: torch.randint(0, int_high, shape)
  std::string init;      // float inputs: "rand" (KernelBench's [0,1)), "randn", "softmax"
  // The names of its dims (problem_names.h: batch_size, in_channels, ...); "" for a literal size.
  // Empty: X<i>_<k>. Inputs that share a size share its name.
  std::vector<std::string> dims;
};

// The name of dim k of a graph input: GraphInput::dims[k] where set ("" for a literal size), else
// X0_1 for dim 1 of x0. The problem source defines these as module globals that get_inputs()
// uses, as KernelBench's problems define batch_size and dim, and the teacher's solutions begin
// with the same names as constexprs of the same values.
std::string input_dim_name(const GraphInput& in, size_t k);

struct Node {
  std::string op;          // op library name
  std::vector<int> args;   // value ids
  // Op parameters (dim, kernel, stride, ...); "names": [[key, name], ...] where the problem
  // names a module argument ("k" as kernel_size; problem_names.h).
  nlohmann::json p = nlohmann::json::object();
  std::string attr;        // python attribute of its module / parameter ("" when functional)
  int out = -1;            // value id
};

// A constructor argument of the problem's Model (and the teacher's ModelNew), passed by
// get_init_inputs(): a node's module argument under its name (Node::p["names"]).
struct InitArg {
  std::string name;   // out_channels
  int64_t value = 0;  // 0 where `size`; 0 or 1 where `flag`
  bool size = false;  // also an input's size name (in_channels): its global is that size's
  // A switch with KernelBench's default, bias=False: last in the constructor, passed by
  // get_init_inputs() only where it is True. Python only (no constant in a solution).
  bool flag = false;
  bool passed() const { return !flag || value == 1; }  // by get_init_inputs()
};

struct Graph {
  std::vector<TensorType> values;  // inputs first, then one per node
  std::vector<GraphInput> inputs;
  std::vector<Node> nodes;
  int output = -1;
  int level = 1;

  int add_input(GraphInput in);
  // Infers the node's output type through the op library (throws mc::Error when invalid),
  // names its module attribute, and returns the new value id.
  int add_node(Node n);
  // Ops in order, e.g. "Conv2d_ReLU_BiasAdd" (KernelBench's naming).
  std::string title() const;
  std::vector<std::string> families() const;
  // state_dict entries in PyTorch's order (bare parameters first, then submodules'), with
  // their owners: (node index, entry). The native ABI passes them in this order.
  std::vector<std::pair<int, StateTensor>> state() const;
  // Model's constructor arguments, in order (each name once).
  std::vector<InitArg> init_args() const;
  // How many nodes read each value.
  std::vector<int> uses() const;
  nlohmann::json to_json() const;
};

}  // namespace mc::synth
