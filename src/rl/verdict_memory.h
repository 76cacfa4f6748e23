// Verdicts of answers judged earlier in the run, by (problem, answer text). A policy that is
// close to deterministic writes the same answer to the same problem step after step, epoch
// after epoch (the recipe's model: 62-100% of a step's groups were one answer eight times);
// judging it again costs a compile, the correctness trials and, for a correct answer, timing
// that needs the GPU to itself (session 23: MooreEval's wait was a third of the step). An
// answer found here gets the earlier verdict, its speedup included, so the same code earns the
// same reward all run long. Infra errors are never remembered (never a score). Bounded: the
// oldest entries leave first. Saved in checkpoints, so a resumed run reuses what the
// uninterrupted one would.
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "eval/result.h"

namespace mc::rl {

class VerdictMemory {
 public:
  explicit VerdictMemory(size_t capacity = 0) : capacity_(capacity) {}
  bool enabled() const { return capacity_ > 0; }
  // The verdict of this exact answer to this problem, if one is remembered.
  const eval::EvalResult* find(const std::string& problem, const std::string& answer) const;
  // Remembers a judged answer (infra errors are ignored); evicts the oldest past capacity.
  void remember(const std::string& problem, const std::string& answer, const eval::EvalResult& r);
  size_t size() const { return by_answer_.size(); }

  nlohmann::json to_json() const;
  static VerdictMemory from_json(const nlohmann::json& j, size_t capacity);

 private:
  using Key = std::pair<std::string, std::string>;
  size_t capacity_;
  std::map<Key, eval::EvalResult> by_answer_;
  std::deque<Key> order_;  // oldest first
};

}  // namespace mc::rl
