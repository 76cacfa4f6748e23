#include "port/rules.h"

#include <algorithm>
#include <set>

#include "common/check.h"
#include "common/fs.h"
#include "common/home.h"
#include "common/toml.h"

namespace mc::port {
namespace {

std::string field(const toml::table& row, const char* key, const std::string& where, bool required = true) {
  const auto* v = row.get(key);
  if (!v) {
    MC_CHECK(!required, where, ": '", key, "' is missing");
    return "";
  }
  const auto* s = v->as_string();
  MC_CHECK(s, where, ": '", key, "' must be a string");
  return s->get();
}

void upsert(std::vector<Rule>& rules, Rule r) {
  for (auto& x : rules)
    if (x.cuda == r.cuda) {
      x = std::move(r);
      return;
    }
  rules.push_back(std::move(r));
}

}  // namespace

void RuleTable::load(const std::string& path) {
  MC_CHECK(fs::exists(path), "rule file ", path, " does not exist");
  toml::table t = read_toml(path, "a TOML rule table");
  if (const auto* v = t.get("version")) {
    const auto* n = v->as_integer();
    MC_CHECK(n && n->get() == 1, path, ": version must be 1");
    version = 1;
  }
  static const std::set<std::string> known = {"version", "source", "prefix", "exact", "include", "text", "warn"};
  for (const auto& [k, _] : t)
    MC_CHECK(known.count(std::string(k.str())), path, ": unknown section '", k.str(),
             "' (expected prefix, exact, include, text, warn)");
  auto rows = [&](const char* section, std::vector<Rule>& into) {
    const auto* arr = t.get_as<toml::array>(section);
    if (!arr) return;
    int i = 0;
    for (const auto& node : *arr) {
      ++i;
      std::string where = path + ": [[" + section + "]] " + std::to_string(i);
      const auto* row = node.as_table();
      MC_CHECK(row, where, ": must be a table");
      Rule r{field(*row, "cuda", where), field(*row, "musa", where), field(*row, "family", where, false),
             field(*row, "source", where, false)};
      MC_CHECK(!r.cuda.empty() && !r.musa.empty(), where, ": 'cuda' and 'musa' must not be empty");
      upsert(into, std::move(r));
    }
  };
  rows("prefix", prefixes);
  rows("exact", exact);
  rows("include", includes);
  rows("text", text);
  if (const auto* arr = t.get_as<toml::array>("warn")) {
    int i = 0;
    for (const auto& node : *arr) {
      ++i;
      std::string where = path + ": [[warn]] " + std::to_string(i);
      const auto* row = node.as_table();
      MC_CHECK(row, where, ": must be a table");
      WarnRule w{field(*row, "id", where), field(*row, "pattern", where), field(*row, "message", where), {}};
      try {
        w.re = std::regex(w.pattern, std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        throw Error(where + ": pattern '" + w.pattern + "' is not a regular expression (" + e.what() + ")");
      }
      warnings.push_back(std::move(w));
    }
  }
  // Longest prefix first, so cublasLt wins over cublas and cu.
  std::stable_sort(prefixes.begin(), prefixes.end(),
                   [](const Rule& a, const Rule& b) { return a.cuda.size() > b.cuda.size(); });
  files.push_back(path);
}

std::vector<std::string> builtin_rule_files() {
  fs::path root = musacoder_home();
  return {(root / "src" / "port" / "cuda_musa.toml").string(),
          (root / "src" / "port" / "cuda_musa_manual.toml").string()};
}

RuleTable load_rules(const std::vector<std::string>& extra_files) {
  RuleTable t;
  for (const auto& f : builtin_rule_files()) t.load(f);
  for (const auto& f : extra_files) t.load(f);
  return t;
}

}  // namespace mc::port
