#include "port/porter.h"

#include <algorithm>
#include <cctype>
#include <regex>
#include <set>
#include <sstream>

namespace mc::port {
namespace {

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur)) out.push_back(cur);
  return out;
}

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool boundary(char c) { return std::isupper(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_'; }

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r"), b = s.find_last_not_of(" \t\r");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::string basename_of(const std::string& p) {
  size_t k = p.rfind('/');
  return k == std::string::npos ? p : p.substr(k + 1);
}

}  // namespace

std::map<std::string, int> PortResult::by_family() const {
  std::map<std::string, int> m;
  for (const auto& c : changes) ++m[c.family];
  return m;
}

Porter::Porter(const RuleTable& t, Direction dir) : dir_(dir), warnings_(&t.warnings) {
  const bool fwd = dir == Direction::kToMusa;
  auto src = [&](const Rule& r) { return fwd ? r.cuda : r.musa; };
  auto dst = [&](const Rule& r) { return fwd ? r.musa : r.cuda; };
  std::map<std::string, std::set<std::string>> sources_of;  // target -> the names that map to it
  for (const auto& r : t.exact) {
    exact_.emplace(src(r), std::make_pair(dst(r), r.family));  // the first row of a name wins
    sources_of[dst(r)].insert(src(r));
    reverse_exact_[dst(r)] = true;
  }
  for (const auto& r : t.includes) {
    include_.emplace(src(r), std::make_pair(dst(r), r.family));
    sources_of[dst(r)].insert(src(r));
    if (src(r).find('/') == std::string::npos) include_base_.emplace(src(r), dst(r));
  }
  for (const auto& [target, names] : sources_of)
    if (names.size() > 1) lossy_.push_back(target);
  for (const auto& r : t.prefixes) {
    prefixes_.push_back({src(r), dst(r), r.family});
    reverse_prefixes_.push_back({dst(r), src(r), r.family});
  }
  auto longest = [](const Prefix& a, const Prefix& b) { return a.from.size() > b.from.size(); };
  std::stable_sort(prefixes_.begin(), prefixes_.end(), longest);
  std::stable_sort(reverse_prefixes_.begin(), reverse_prefixes_.end(), longest);
  for (const auto& r : t.text) lines_.push_back({split_lines(src(r)), split_lines(dst(r))});
}

std::string Porter::map_identifier(const std::string& id, std::string* family) const {
  if (auto it = exact_.find(id); it != exact_.end()) {
    *family = it->second.second;
    return it->second.first;
  }
  for (const auto& p : prefixes_) {
    if (id.size() > p.from.size() && id.compare(0, p.from.size(), p.from) == 0 && boundary(id[p.from.size()])) {
      *family = p.family;
      return p.to + id.substr(p.from.size());
    }
  }
  return id;
}

// Whether the way back would rewrite an identifier this way leaves alone (a CUDA source's own
// `muSigma`): the round trip would not restore it.
bool Porter::reverse_would_change(const std::string& id) const {
  if (reverse_exact_.count(id)) return true;
  for (const auto& p : reverse_prefixes_)
    if (id.size() > p.from.size() && id.compare(0, p.from.size(), p.from) == 0 && boundary(id[p.from.size()]))
      return true;
  return false;
}

PortResult Porter::port(const std::string& text) const {
  PortResult res;
  static const std::regex include_re(R"(^(\s*#\s*include\s*[<"])([^>"]+)([>"].*)$)");
  std::vector<std::string> in = split_lines(text), out;
  const bool trailing_newline = !text.empty() && text.back() == '\n';
  for (size_t i = 0; i < in.size(); ++i) {
    const int lineno = static_cast<int>(i) + 1;
    // Whole lines (Python imports), matched on their trimmed text.
    bool replaced = false;
    for (const auto& [from, to] : lines_) {
      if (i + from.size() > in.size()) continue;
      bool match = true;
      for (size_t k = 0; k < from.size() && match; ++k) match = trim(in[i + k]) == trim(from[k]);
      if (!match) continue;
      std::string indent = in[i].substr(0, in[i].find_first_not_of(" \t"));
      for (const auto& l : to) out.push_back(indent + l);
      res.changes.push_back({lineno, trim(in[i]), to.empty() ? "" : to.back(), "python"});
      i += from.size() - 1;
      replaced = true;
      break;
    }
    if (replaced) continue;
    std::string line = in[i];
    if (dir_ == Direction::kToMusa)
      for (const auto& w : *warnings_)
        if (std::regex_search(line, w.re)) res.warnings.push_back({lineno, w.id, w.message, trim(line).substr(0, 120)});
    std::smatch m;
    if (std::regex_match(line, m, include_re)) {
      std::string path = m[2].str(), to = path, family;
      if (auto it = include_.find(path); it != include_.end()) {
        to = it->second.first;
        family = it->second.second;
      } else if (auto b = include_base_.find(basename_of(path)); b != include_base_.end()) {
        to = path.substr(0, path.size() - basename_of(path).size()) + b->second;
        family = "headers";
      }
      if (to != path) res.changes.push_back({lineno, path, to, family});
      out.push_back(m[1].str() + to + m[3].str());
      continue;
    }
    std::string o;
    o.reserve(line.size());
    for (size_t p = 0; p < line.size();) {
      char c = line[p];
      if (std::isdigit(static_cast<unsigned char>(c))) {  // a number, suffixes included (1e5f, 0x1f)
        size_t q = p;
        while (q < line.size() && (ident_char(line[q]) || line[q] == '.')) ++q;
        o.append(line, p, q - p);
        p = q;
        continue;
      }
      if (!ident_start(c)) {
        o.push_back(c);
        ++p;
        continue;
      }
      size_t q = p;
      while (q < line.size() && ident_char(line[q])) ++q;
      std::string id = line.substr(p, q - p), family;
      std::string to = map_identifier(id, &family);
      if (to != id) res.changes.push_back({lineno, id, to, family});
      else if (dir_ == Direction::kToMusa && reverse_would_change(id))
        res.warnings.push_back({lineno, "round_trip", "'" + id + "' looks like a MUSA name: porting back to CUDA would rewrite it", trim(line).substr(0, 120)});
      o += to;
      p = q;
    }
    out.push_back(o);
  }
  for (size_t i = 0; i < out.size(); ++i) {
    res.text += out[i];
    if (i + 1 < out.size() || trailing_newline) res.text += '\n';
  }
  return res;
}

nlohmann::json to_json(const std::vector<Change>& changes) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& c : changes) out.push_back({{"line", c.line}, {"from", c.from}, {"to", c.to}, {"family", c.family}});
  return out;
}

nlohmann::json to_json(const std::vector<Warning>& warnings) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& w : warnings)
    out.push_back({{"line", w.line}, {"id", w.id}, {"message", w.message}, {"snippet", w.snippet}});
  return out;
}

std::string ported_name(const std::string& name, Direction dir) {
  static const std::vector<std::pair<std::string, std::string>> ext = {{".cuh", ".muh"}, {".cu", ".mu"}};
  for (const auto& [c, m] : ext) {
    const std::string& from = dir == Direction::kToMusa ? c : m;
    const std::string& to = dir == Direction::kToMusa ? m : c;
    if (name.size() > from.size() && name.compare(name.size() - from.size(), from.size(), from) == 0)
      return name.substr(0, name.size() - from.size()) + to;
  }
  return name;
}

}  // namespace mc::port
