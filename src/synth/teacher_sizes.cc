#include "synth/teacher_sizes.h"

#include <cctype>
#include <set>

#include "common/check.h"
#include "synth/op_library.h"

namespace mc::synth {
namespace {

bool is_ident(char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; }

// Whether `text` names the identifier `name` (not as part of a longer one).
bool names(const std::string& text, const std::string& name) {
  for (size_t pos = text.find(name); pos != std::string::npos; pos = text.find(name, pos + 1)) {
    bool left = pos == 0 || !is_ident(text[pos - 1]);
    bool right = pos + name.size() >= text.size() || !is_ident(text[pos + name.size()]);
    if (left && right) return true;
  }
  return false;
}

}  // namespace

Dim TeacherSizes::define(const std::string& name, const Dim& value, const std::string& group, bool input) {
  defs_.push_back({name, value.literal() ? std::to_string(value.v()) : value.bare(), group, input});
  return Dim::named(value.v(), name);
}

// A dim of value `x` at index `pos` of a rank-`rank` tensor, from the dims of its op's inputs
// (`places`, in order), else from `extra` (the node's state) at any index.
Dim TeacherSizes::match(int64_t x, size_t pos, size_t rank, const std::vector<const Dims*>& places,
                        const std::vector<const Dims*>& extra) const {
  if (x <= 1) return Dim(x);
  for (const Dims* d : places) {
    if (d->size() == rank && (*d)[pos].v() == x) return (*d)[pos];
    size_t lead = rank >= d->size() ? rank - d->size() : 0;  // broadcast alignment from the end
    if (rank >= d->size() && pos >= lead && (*d)[pos - lead].v() == x) return (*d)[pos - lead];
    if (rank < d->size() && (*d)[pos + d->size() - rank].v() == x) return (*d)[pos + d->size() - rank];
  }
  for (const auto* list : {&places, &extra})
    for (const Dims* d : *list)
      for (const Dim& y : *d)
        if (y.v() == x) return y;
  // A run of consecutive dims of the first input whose product is x (flatten, reshape).
  if (!places.empty()) {
    const Dims& d = *places[0];
    for (size_t i = 0; i < d.size(); ++i) {
      Dim p(1);
      for (size_t j = i; j < d.size() && p.v() < x; ++j) {
        p = p * d[j];
        if (p.v() == x && j > i) return p;
      }
    }
  }
  return Dim(0);  // not found (0 is never a size here)
}

TeacherSizes::TeacherSizes(const Graph& g) {
  values_.resize(g.values.size());
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const Shape& s = g.inputs[i].type.shape;
    for (size_t k = 0; k < s.size(); ++k) {
      std::string name = input_dim_name(g.inputs[i], k);
      bool shared = false;  // an earlier input's size of the same name (a product's K)
      for (auto& d : defs_) shared = shared || (d.input && d.name == name);
      values_[i].push_back(name.empty() ? Dim(s[k]) : shared ? Dim::named(s[k], name)
                                                             : define(name, Dim(s[k]), g.inputs[i].name, true));
    }
  }
  for (const auto& a : g.init_args())
    if (!a.size && !a.flag) {
      define(a.name, Dim(a.value), "init");
      defs_.back().always = true;
    }
  auto st = g.state();
  state_.resize(st.size());
  std::map<int, std::vector<int>> node_state;
  for (size_t j = 0; j < st.size(); ++j) node_state[st[j].first].push_back(static_cast<int>(j));

  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const Node& n = g.nodes[ni];
    const OpDef& d = op(n.op);
    std::vector<Dims> in;
    std::vector<const Dims*> places;
    for (int a : n.args) in.push_back(values_.at(a));
    for (auto& x : in) places.push_back(&x);

    // The node's state tensors.
    const std::vector<int>& js = node_state[static_cast<int>(ni)];
    std::vector<Dims> rule_state;
    if (d.state_dims && !js.empty()) rule_state = d.state_dims(n.p, in);
    MC_INTERNAL_ASSERT(rule_state.empty() || rule_state.size() == js.size(), n.op);
    for (size_t k = 0; k < js.size(); ++k) {
      int j = js[k];
      const Shape& s = st[j].second.shape;
      Dims dims;
      for (size_t p = 0; p < s.size(); ++p) {
        Dim x = rule_state.empty() ? match(s[p], p, s.size(), places, {}) : rule_state[k].at(p);
        if (x.v() == 0) x = define("P" + std::to_string(j) + "_" + std::to_string(p), Dim(s[p]), "P" + std::to_string(j));
        MC_INTERNAL_ASSERT(x.v() == s[p], n.op, " state dim ", p, ": ", x.bare(), " is ", x.v(), ", not ", s[p]);
        dims.push_back(x);
      }
      state_[j] = dims;
    }
    std::vector<const Dims*> own;
    for (int j : js) own.push_back(&state_[j]);

    // The node's output.
    const Shape& s = g.values[n.out].shape;
    Dims rule;
    if (d.infer_dims) rule = d.infer_dims(n.p, in);
    MC_INTERNAL_ASSERT(rule.empty() || rule.size() == s.size(), n.op);
    Dims out;
    std::string group = "V" + std::to_string(n.out);
    for (size_t p = 0; p < s.size(); ++p) {
      Dim x = rule.empty() ? match(s[p], p, s.size(), places, own) : rule[p];
      bool unexplained = x.v() == 0;
      if (unexplained) x = Dim(s[p]);
      MC_INTERNAL_ASSERT(x.v() == s[p], n.op, " output dim ", p, ": ", x.bare(), " is ", x.v(), ", not ", s[p]);
      // Compound sizes of a value, and sizes nothing explains, get a name: kernels then read
      // V3_2 rather than the arithmetic (or a number the model would have to work out).
      if (x.kind() != 0 || unexplained) x = define(group + "_" + std::to_string(p), x, group);
      out.push_back(x);
    }
    values_[n.out] = out;
  }
}

std::string TeacherSizes::constants(const std::string& text) const {
  // What the text uses, and what those definitions use in turn (definitions only refer back).
  std::set<std::string> used;
  for (size_t i = defs_.size(); i-- > 0;) {
    bool needed = names(text, defs_[i].name);
    for (size_t k = i + 1; k < defs_.size() && !needed; ++k) needed = used.count(defs_[k].name) && names(defs_[k].rhs, defs_[i].name);
    if (needed) used.insert(defs_[i].name);
  }
  // Graph inputs: all their dims when any is used, so the line reads like the problem's shape.
  std::set<std::string> groups;
  for (auto& d : defs_)
    if (used.count(d.name)) groups.insert(d.group);
  std::string out, line_group;
  for (auto& d : defs_) {
    if (!(used.count(d.name) || d.always || (d.input && groups.count(d.group)))) continue;
    if (d.group != line_group) {
      if (!line_group.empty()) out += ";\n";
      out += "constexpr long long ";
      line_group = d.group;
    } else {
      out += ", ";
    }
    out += d.name + " = " + d.rhs;
  }
  if (!line_group.empty()) out += ";\n";
  return out;
}

}  // namespace mc::synth
