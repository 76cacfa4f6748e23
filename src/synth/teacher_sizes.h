// The named sizes of one problem, as the teacher's solution spells them (dim.h): the dims of the
// graph inputs have their names (graph.h: input_dim_name, such as batch_size), every other size
// is an expression of those where one is known, and a source begins with a constants block
// that gives the names their values. So two problems that differ only in shapes get solutions that differ only in
// that block, whose numbers stand in the problem's get_inputs() and module arguments.
//
// How a size that is not an input's is resolved: an op's own rule where it has one
// (OpDef::infer_dims, state_dims: convolution and pooling arithmetic, module arguments); else
// the input dim of the same value at the same place (the same index, or broadcast-aligned from
// the end), then at any place, then the node's state, then a run of consecutive input dims
// whose product it is (reshapes). A size none of these explains gets its own named constant
// (V<value>_<dim>, P<state>_<dim>) with its literal value. Sizes of 1 stay literals.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "synth/dim.h"
#include "synth/graph.h"

namespace mc::synth {

class TeacherSizes {
 public:
  explicit TeacherSizes(const Graph& g);

  const Dims& value(int v) const { return values_.at(v); }
  const Dims& state(int j) const { return state_.at(j); }  // j: index into g.state()

  // The constants block for a source whose kernels and host code are `text`: a line per graph
  // input with any dim named in it, a line of the module arguments the problem names (all of
  // them, used or not: the block repeats the problem's globals), then the derived constants it
  // uses, with what they use.
  std::string constants(const std::string& text) const;

 private:
  struct Def {
    std::string name, rhs, group;  // group: one line per input / value / state tensor
    bool input = false;            // a graph input's dim
    bool always = false;           // a module argument the problem names: in every block
  };
  Dim define(const std::string& name, const Dim& value, const std::string& group, bool input = false);
  Dim match(int64_t x, size_t pos, size_t rank, const std::vector<const Dims*>& places,
            const std::vector<const Dims*>& extra) const;

  std::vector<Dims> values_, state_;
  std::vector<Def> defs_;
};

}  // namespace mc::synth
