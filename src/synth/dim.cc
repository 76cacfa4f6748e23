#include "synth/dim.h"

#include "common/check.h"

namespace mc::synth {

Dim Dim::named(int64_t value, std::string name) { return expr(value, std::move(name), 0); }

Dim Dim::expr(int64_t value, std::string text, int kind) {
  Dim d(value);
  d.e_ = std::move(text);
  d.kind_ = kind;
  MC_INTERNAL_ASSERT(!d.e_.empty());
  return d;
}

std::string Dim::str() const {
  bool atom = kind() == 0 && !(literal() && v_ < 0);
  return atom ? bare() : "(" + bare() + ")";
}

std::string Dim::bare() const {
  if (literal()) return std::to_string(v_) + "LL";
  if (off_ == 0) return e_;
  return e_ + (off_ < 0 ? " - " : " + ") + std::to_string(off_ < 0 ? -off_ : off_) + "LL";
}

namespace {

// `d` as an operand of an operator that needs its operands at most of kind `max_kind`.
std::string operand(const Dim& d, int max_kind) { return d.kind() <= max_kind ? d.bare() : d.str(); }

}  // namespace

Dim operator*(const Dim& a, const Dim& b) {
  if (a.literal() && b.literal()) return Dim(a.v_ * b.v_);
  if (a.literal() && a.v_ == 1) return b;
  if (b.literal() && b.v_ == 1) return a;
  // a * b * c reads left to right: a product of products needs no parentheses, but a * (b / c)
  // does (integer division).
  bool product = a.kind() <= 1 && b.kind() <= 1;
  return Dim::expr(a.v_ * b.v_, operand(a, 2) + " * " + operand(b, 1), product ? 1 : 2);
}

Dim operator/(const Dim& a, const Dim& b) {
  MC_INTERNAL_ASSERT(b.v_ != 0, "a size divided by zero");
  if (a.literal() && b.literal()) return Dim(a.v_ / b.v_);
  if (b.literal() && b.v_ == 1) return a;
  return Dim::expr(a.v_ / b.v_, operand(a, 2) + " / " + operand(b, 0), 2);
}

Dim operator%(const Dim& a, const Dim& b) {
  MC_INTERNAL_ASSERT(b.v_ != 0, "a size divided by zero");
  if (a.literal() && b.literal()) return Dim(a.v_ % b.v_);
  return Dim::expr(a.v_ % b.v_, operand(a, 2) + " % " + operand(b, 0), 2);
}

Dim operator+(const Dim& a, const Dim& b) {
  if (a.literal() && b.literal()) return Dim(a.v_ + b.v_);
  if (b.literal() || a.literal()) {  // into the literal offset
    Dim r = b.literal() ? a : b;
    int64_t add = b.literal() ? b.v_ : a.v_;
    r.v_ += add;
    r.off_ += add;
    return r;
  }
  return Dim::expr(a.v_ + b.v_, operand(a, 3) + " + " + operand(b, 3), 3);
}

Dim operator-(const Dim& a, const Dim& b) {
  if (b.literal()) return a + Dim(-b.v_);
  return Dim::expr(a.v_ - b.v_, operand(a, 3) + " - " + operand(b, 2), 3);
}

Dims literal_dims(const std::vector<int64_t>& shape) { return Dims(shape.begin(), shape.end()); }

std::vector<int64_t> values(const Dims& d) {
  std::vector<int64_t> v;
  for (auto& x : d) v.push_back(x.v());
  return v;
}

Dims strides_of(const Dims& d) {
  Dims st(d.size(), Dim(1));
  for (int i = static_cast<int>(d.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * d[i + 1];
  return st;
}

Dim numel(const Dims& d) {
  Dim n(1);
  for (auto& x : d) n = n * x;
  return n;
}

std::string lit(const Dim& d) { return d.str(); }

std::string dbl(const Dim& d) { return "(double)" + d.str(); }

}  // namespace mc::synth
