// Writes a graph as a KernelBench-format problem: `class Model(nn.Module)`, `get_inputs()`,
// `get_init_inputs()`; and its solutions' ModelNew with the same module construction (so the
// same seed gives the same weights).
#pragma once

#include <string>

#include "synth/graph.h"

namespace mc::synth {

// `doc` becomes the Model's docstring (one line).
std::string problem_source(const Graph& g, const std::string& doc);

// The lines of Model.__init__ after super().__init__() (shared with the teacher's ModelNew).
std::string init_body(const Graph& g);
// __init__'s parameter list: "self, in_channels, out_channels, kernel_size" (Graph::init_args).
std::string init_params(const Graph& g);
// forward's parameter list: "self, x0, x1".
std::string forward_params(const Graph& g);
// Python expressions of the state tensors in state_dict order ("self.conv0.weight", ...).
std::vector<std::string> state_exprs(const Graph& g);

}  // namespace mc::synth
