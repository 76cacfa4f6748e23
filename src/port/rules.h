// The CUDA <-> MUSA rule table of `musacoder port`: data, not code. The built-in table is
// src/port/cuda_musa.toml (written by scripts/port_rules.py from torch_musa's own mapping
// files, every row naming its source) plus src/port/cuda_musa_manual.toml (the Python side and
// the warnings); a user adds rows with --rules FILE in the same format.
#pragma once

#include <map>
#include <regex>
#include <string>
#include <vector>

namespace mc::port {

enum class Direction { kToMusa, kToCuda };

struct Rule {
  std::string cuda, musa, family, source;
};

// A construct the port cannot carry over safely: reported with file:line, never rewritten.
struct WarnRule {
  std::string id, pattern, message;
  std::regex re;
};

struct RuleTable {
  int version = 0;
  std::vector<Rule> prefixes;   // identifier prefixes, longest first
  std::vector<Rule> exact;      // whole identifiers
  std::vector<Rule> includes;   // #include paths
  std::vector<Rule> text;       // literal text (Python import lines)
  std::vector<WarnRule> warnings;
  std::vector<std::string> files;  // where the rows came from, in load order

  // Reads one TOML table and appends its rows; a later file's row for the same CUDA name wins.
  // Throws mc::Error naming the file and the row ("extra.toml: [[exact]] 3: 'musa' is missing").
  void load(const std::string& path);
  size_t size() const { return prefixes.size() + exact.size() + includes.size() + text.size(); }
};

// The built-in rule files (under the project's source tree, $MUSACODER_HOME).
std::vector<std::string> builtin_rule_files();
RuleTable load_rules(const std::vector<std::string>& extra_files = {});

}  // namespace mc::port
