// Steps 4-5 of an RL step (trainer.cc): the trainer recomputes every turn-1 token's log-prob,
// MirrorPop drops the sequences that drifted from the policy that sampled them, and the clipped
// surrogate is backpropagated; once every rank's token count is known, the gradients are scaled
// by 1 / N and the optimizer steps.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/qwen_model.h"
#include "rl/grpo_loss.h"
#include "rl/rollout.h"
#include "rl/step_metrics.h"
#include "train/sharded_adamw.h"

namespace mc::rl {

// What the update needs of a turn-1 answer: its tokens after the prompt's, the rollout
// policy's log-probs, the advantage.
struct TrainSeq {
  std::vector<int32_t> tokens;  // context + answer
  size_t n_context = 0;
  std::vector<float> old_logp;  // one per answer token
  double advantage = 0;
};

// The turn-1 sequences the update runs: scored, with an advantage (or any, with a KL term).
std::vector<TrainSeq> train_sequences(const std::vector<Trajectory>& traj, bool with_kl);

struct UpdateOptions {
  double temperature = 0.9;  // the sampling temperature: log-probs are taken at it
  int64_t micro_batch_tokens = 16384;
  bool grad_checkpoint = false;
  bool mirror_pop = true;
  double mirror_delta = 0.1;
  PolicyLossOptions loss;
};

// Forward and backward over `batch`, packed into micro-batches; adds to `sums`. With `dump`,
// returns each sequence as trained (tests compare the gradient with PyTorch's).
nlohmann::json backward_policy_loss(model::QwenModel& model, const std::optional<model::QwenModel>& ref,
                                    train::ShardedAdamW& opt, const std::vector<TrainSeq>& batch,
                                    const UpdateOptions& o, int64_t step, StepSums& sums, bool dump);

// Writes the step's gradients and trained sequences to dump_dir/step-N.{safetensors,json}.
void dump_gradients(model::QwenModel& model, train::ShardedAdamW& opt, const std::string& dump_dir, int64_t step,
                    const UpdateOptions& o, double normalizer, const nlohmann::json& seqs);

}  // namespace mc::rl
