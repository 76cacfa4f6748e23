// One RL step's metrics: the sums a rank collects while it scores its groups and updates the
// policy, merged over ranks, and the row of metrics.jsonl built from them. Every metric's name
// is written here and in step_metrics.cc alone.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "generate/engine.h"
#include "rl/rollout.h"
#include "rl/retry_buffer.h"

namespace mc::rl {

// What the update adds for one micro-batch (policy_update.cc).
struct MicroBatchSums {
  double seqs = 0, seqs_kept = 0, abs_log_ratio_sum = 0;
  double tokens = 0, clip_fraction = 0, kl = 0, ratio_mean = 0, push_pos = 0, push_neg = 0;
  double entropy_sum = 0;
};

// A scored group (score_groups.cc).
struct GroupSums {
  bool repair = false, scored = false, signal = false, speed_only = false, any_pass = false;
};

// The step's facts the row reports beside the sums.
struct StepFacts {
  int64_t step = 0;  // 1-based
  int max_turns = 1;
  size_t prompts = 0, repairs_drawn = 0, repairs_skipped = 0;
  size_t bdr_size = 0;
  RetryCounters bdr_before, bdr_after;
  RolloutStats rollout;
  gen::EngineStats engine;  // this step's part of the engine's counters
  double train_s = 0, step_s = 0, grad_norm = 0, lr = 0, epoch = 0;
  bool anchor = false;
  double anchor_loss = 0, anchor_loss_change = 0, anchor_s = 0;
};

class StepSums {
 public:
  void shared_verdicts(const std::vector<Trajectory>& traj);  // twins and remembered verdicts
  void group(const GroupSums& g);
  void trajectories(const std::vector<Trajectory>& traj);
  void micro_batch(const MicroBatchSums& m);

  // This rank's sums as JSON, and the merge of every rank's (numbers add, tables merge).
  const nlohmann::json& sums() const { return acc_; }
  void merge(const nlohmann::json& other);
  double tokens_trained() const { return num("tokens_trained"); }

  // The row of metrics.jsonl (the merged sums and the step's facts).
  nlohmann::json row(const StepFacts& f) const;

 private:
  void add(const std::string& key, double v);
  void count(const char* table, const std::string& name);
  double num(const std::string& key) const;
  nlohmann::json acc_ = nlohmann::json::object();
};

}  // namespace mc::rl
