// The progressive generator: level 1 single ops with varied shapes and parameters, level 2
// fusions (an anchor such as a GEMM or convolution and one to five follow-up ops), level 3
// blocks (MLP, residual/norm stacks, attention, convolutional blocks). Deterministic: a
// problem depends only on (seed, level, index). Op families can be weighted.
#pragma once

#include <map>
#include <string>

#include "synth/graph.h"
#include "synth/op_library.h"

namespace mc::synth {

struct GeneratorOptions {
  std::map<std::string, double> family_weight;  // absent: 1; 0 removes the family
  std::map<std::string, double> op_weight;      // absent: 1
  int64_t min_elems = int64_t{1} << 16;         // rough size of the main tensors
  int64_t max_elems = int64_t{1} << 22;
};

// Reads a weights file (TOML): [families] activation = 2.0 ... and [ops] Conv3d = 0.5 ...
// plus optional min_elems / max_elems. Throws mc::Error naming the unknown family, op or key.
GeneratorOptions load_generator_options(const std::string& toml_path);

class Generator {
 public:
  Generator(GeneratorOptions opts, uint64_t seed);
  Graph make(int level, uint64_t index) const;

 private:
  Graph level1(Rng& rng) const;
  Graph level2(Rng& rng) const;
  Graph level3(Rng& rng) const;
  // Appends a weighted random follow-up op to `cur`; returns the new value or -1.
  int follow_up(Rng& rng, Graph& g, int cur, const std::vector<std::string>& families) const;
  double weight(const OpDef& d) const;
  int64_t budget(Rng& rng) const;

  GeneratorOptions opts_;
  uint64_t seed_;
};

Cost graph_cost(const Graph& g);
int compute_ops(const Graph& g);  // nodes other than layout (reshape, permute)
// 1 (a single cheap op) to about 5 (a large block): level, op count, FLOPs and hard ops.
double difficulty(const Graph& g);
// One-line description for the docstring.
std::string describe(const Graph& g);

}  // namespace mc::synth
