// Buffered Dynamic Retry (BDR). Where a plain dynamic sampler (DAPO) drops a prompt whose whole
// group failed, BDR keeps it: the problem enters a bounded FIFO with one failed answer and
// MooreEval's feedback on it, and later batches re-issue entries as repair tasks (the problem,
// the failed code, the error) with a small probability per batch slot. An entry leaves when it
// is repaired, after `max_reissues` re-issues (expired), or when pushed out by capacity
// (evicted). Re-issued entries go to the back of the queue, so every entry gets its turn.
// The buffer, its counters and its random state serialize to JSON for exact resume.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mc::rl {

struct RetryEntry {
  std::string problem;        // the problem's key
  std::string failed_answer;  // one of the group's answers
  std::string feedback;       // MooreEval's feedback on it
  int reissues = 0;
  int64_t added_step = 0;
};

struct RetryBufferOptions {
  size_t capacity = 256;
  double reissue_prob = 0.1;  // per batch slot
  int max_reissues = 3;
  uint64_t seed = 0;
};

struct RetryCounters {
  int64_t added = 0, evicted = 0, reissued = 0, repaired = 0, expired = 0;
};

class RetryBuffer {
 public:
  explicit RetryBuffer(RetryBufferOptions o);
  // A group failed entirely. A problem already waiting gets the newer answer and feedback and
  // keeps its place; otherwise it joins at the back, evicting the oldest entry when full.
  void add(RetryEntry e);
  // Repair tasks for a batch of `slots` prompts: each slot is one with probability
  // reissue_prob, taken from the front (at most the buffer's size). An entry re-issued for the
  // max_reissues-th time leaves the buffer (expired); the others go to the back.
  std::vector<RetryEntry> draw(size_t slots);
  // The problem was repaired (one of its answers passed): it leaves the buffer (a no-op for a
  // problem not waiting there).
  void repaired(const std::string& problem);

  size_t size() const { return q_.size(); }
  const RetryCounters& counters() const { return c_; }
  const std::deque<RetryEntry>& entries() const { return q_; }

  nlohmann::json to_json() const;
  static RetryBuffer from_json(const nlohmann::json& j, RetryBufferOptions o);  // throws mc::Error

 private:
  RetryBufferOptions o_;
  std::deque<RetryEntry> q_;
  RetryCounters c_;
  std::mt19937_64 rng_;
};

}  // namespace mc::rl
