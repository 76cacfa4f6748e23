// A size in a teacher kernel's text: its value, and the C++ expression that spells it over the
// named sizes of the problem (batch_size, in_channels; teacher_sizes.h). Teacher solutions
// spell every size this way, so a kernel's text is the same for every shape of its problem and
// only the constants block at the top of the source changes: a model learns one kernel per op
// and copies the sizes from the problem, instead of products such as 468224 it cannot compute.
//
// Arithmetic keeps the value and the expression in step, folds literals (x * 1 is x), and
// parenthesizes only where C++ precedence or integer division needs it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mc::synth {

class Dim {
 public:
  Dim(int64_t value = 1) : v_(value) {}  // a literal
  static Dim named(int64_t value, std::string name);
  static Dim expr(int64_t value, std::string text, int kind);  // kind: see below

  int64_t v() const { return v_; }
  bool literal() const { return e_.empty(); }
  // The expression as an operand anywhere: a name, a literal "31LL", or "(...)".
  std::string str() const;
  // The expression without outer parentheses (the right side of `x = ...`).
  std::string bare() const;

  friend Dim operator*(const Dim& a, const Dim& b);
  friend Dim operator/(const Dim& a, const Dim& b);
  friend Dim operator%(const Dim& a, const Dim& b);
  friend Dim operator+(const Dim& a, const Dim& b);
  friend Dim operator-(const Dim& a, const Dim& b);

  // 0: atom (name or literal); 1: a product of atoms; 2: other * / %; 3: + or -.
  int kind() const { return literal() ? 0 : off_ != 0 ? 3 : kind_; }

 private:
  int64_t v_ = 1;
  std::string e_;    // "" for a literal; else the expression without its literal offset
  int kind_ = 0;     // of e_
  int64_t off_ = 0;  // a literal added to e_: width - 3 + 1 folds to width - 2
};

using Dims = std::vector<Dim>;

Dims literal_dims(const std::vector<int64_t>& shape);  // a shape's values as literals
std::vector<int64_t> values(const Dims& d);
Dims strides_of(const Dims& d);  // contiguous strides
Dim numel(const Dims& d);        // 1 for rank 0
std::string lit(const Dim& d);   // d.str()
// "(double)dim", the size as a floating-point operand.
std::string dbl(const Dim& d);

}  // namespace mc::synth
