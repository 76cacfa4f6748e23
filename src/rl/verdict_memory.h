// Verdicts of answers judged earlier in the run, by (problem identity, answer text). A policy that is
// close to deterministic writes the same answer to the same problem step after step, epoch
// after epoch (the recipe's model: 62-100% of a step's groups were one answer eight times);
// judging it again costs a compile, the correctness trials and, for a correct answer, timing
// that needs the GPU to itself (MooreEval's wait was once a third of the recipe's RL step). An
// answer found here gets the earlier verdict, its speedup included, so the same code earns the
// same reward all run long. Infra errors are never remembered (never a score). Bounded: the
// oldest entries leave first. Saved in checkpoints, so a resumed run reuses what the
// uninterrupted one would.
//
// A verdict holds only under the evaluation settings that gave it (EvalConfig::config_hash:
// tolerances, trials, timing budget, reward weights, ...). The memory keeps the verifier's
// hash: results judged under another one are not remembered, and a resumed run whose verifier
// judges differently (a changed --timing-budget, a service started with other settings) drops
// the saved verdicts instead of paying rewards it would no longer give.
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "eval/problem.h"
#include "eval/result.h"

namespace mc::rl {

// A problem as the memory (and a batch's twin detection) knows it: its key and a digest of its
// source. A problem file changed under the same name (a set synthesized again in place, across a
// resume) is then a new problem, not one whose old verdicts still hold.
std::string problem_identity(const eval::Problem& p);

class VerdictMemory {
 public:
  // `config_hash`: the verifier's (Verifier::config_hash); "" accepts any result (tests).
  explicit VerdictMemory(size_t capacity = 0, std::string config_hash = "")
      : capacity_(capacity), config_hash_(std::move(config_hash)) {}
  bool enabled() const { return capacity_ > 0; }
  // The verdict of this exact answer to this problem, if one is remembered.
  const eval::EvalResult* find(const std::string& problem, const std::string& answer) const;
  // Remembers a judged answer (infra errors, and results judged under another configuration,
  // are ignored); evicts the oldest past capacity.
  void remember(const std::string& problem, const std::string& answer, const eval::EvalResult& r);
  size_t size() const { return by_answer_.size(); }

  nlohmann::json to_json() const;
  // Entries judged under another configuration than `config_hash` are dropped (counted in
  // dropped_on_load()).
  static VerdictMemory from_json(const nlohmann::json& j, size_t capacity, std::string config_hash = "");
  size_t dropped_on_load() const { return dropped_on_load_; }

 private:
  using Key = std::pair<std::string, std::string>;
  // Judged under this memory's configuration (any, when it has none).
  bool judged_here(const eval::EvalResult& r) const { return config_hash_.empty() || r.config_hash == config_hash_; }
  size_t capacity_;
  std::string config_hash_;
  size_t dropped_on_load_ = 0;
  std::map<Key, eval::EvalResult> by_answer_;
  std::deque<Key> order_;  // oldest first
};

}  // namespace mc::rl
