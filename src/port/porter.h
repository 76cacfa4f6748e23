// Porting one source between CUDA and MUSA with a RuleTable: identifiers (exact names, then the
// longest prefix), #include paths, whole Python lines; constructs that cannot be carried over
// safely are reported with their line, never rewritten. The same pass serves C++/CUDA files and
// KernelBench-format Python, whose CUDA sources live in string literals.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "port/rules.h"

namespace mc::port {

struct Change {
  int line = 0;
  std::string from, to, family;
};

struct Warning {
  int line = 0;
  std::string id, message, snippet;
};

struct PortResult {
  std::string text;
  std::vector<Change> changes;
  std::vector<Warning> warnings;
  std::map<std::string, int> by_family() const;  // changes counted per rule family
};

class Porter {
 public:
  Porter(const RuleTable& table, Direction dir);  // reads the table's warnings: it must outlive the Porter
  Porter(RuleTable&&, Direction) = delete;
  PortResult port(const std::string& text) const;
  // Names of the target that several source names map to (cublas.h and cublas_v2.h both become
  // mublas.h): the way back cannot restore which one it was.
  const std::vector<std::string>& lossy() const { return lossy_; }

 private:
  struct Prefix {
    std::string from, to, family;
  };
  std::string map_identifier(const std::string& id, std::string* family) const;
  bool reverse_would_change(const std::string& id) const;

  Direction dir_;
  std::unordered_map<std::string, std::pair<std::string, std::string>> exact_, include_;
  std::unordered_map<std::string, std::string> include_base_;
  std::vector<Prefix> prefixes_, reverse_prefixes_;
  std::unordered_map<std::string, bool> reverse_exact_;
  std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> lines_;  // from, to
  const std::vector<WarnRule>* warnings_ = nullptr;
  std::vector<std::string> lossy_;
};

// [{line, from, to, family}] and [{line, id, message, snippet}], as summaries and manifests write them.
nlohmann::json to_json(const std::vector<Change>& changes);
nlohmann::json to_json(const std::vector<Warning>& warnings);

// The file name a ported file gets (.cu <-> .mu, .cuh <-> .muh, as torch_musa's porting does).
std::string ported_name(const std::string& name, Direction dir);

}  // namespace mc::port
