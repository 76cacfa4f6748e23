// Execution-feedback RL: `musacoder-model train rl`. One process per rank holds the policy once:
// the generation engine samples from the same weights the optimizer updates (no copy, no
// weight transfer). One step, in order (docs/rl.md has the whole picture):
//   1. prompts      the next tasks in curriculum order (level, then difficulty), with repair
//                   tasks from the retry buffer mixed in (retry_buffer.h); each rank rolls out
//                   its share (prompt i on rank i mod world);
//   2. rollouts     G answers per prompt, verified by MooreEval, with feedback turns
//                   (rollout.h);
//   3. reward       PrimeEcho per trajectory (prime_echo.h), advantages within each prompt's
//                   group (advantages.h); all-failed groups enter the retry buffer;
//   4. filter       the trainer recomputes every turn-1 token's log-prob; MirrorPop drops the
//                   sequences whose mean |log π_train − log π_rollout| exceeds δ (mirror_pop.h);
//   5. update       the clipped surrogate on turn-1 tokens (grpo_loss.h), normalized by the
//                   global count of trained tokens, on the SFT trainer's sharded AdamW over c10d;
//   6. report       one metrics row (JSONL and TensorBoard), trajectories to read every K
//                   steps, checkpoints that resume exactly (weights, optimizer, data position,
//                   retry buffer).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "eval/eval_config.h"
#include "eval/evaluator.h"
#include "rl/grpo_loss.h"
#include "rl/prime_echo.h"
#include "rl/retry_buffer.h"
#include "train/schedule.h"
#include "train/sharded_adamw.h"

namespace mc::rl {

// kTurns: each turn is generated whole, then its verdicts are awaited, then the next turn is
// generated: on-policy and reproducible, the reference path (RolloutRunner::finish).
// kOverlapped: one loop over the engine and the verifier (rl/pipelined_turns.h). A failed
// answer's repair is asked for as soon as its verdict is in; the next step's first turn is
// decoded beside this step's turns, so it comes from the policy before this step's update (one
// step off-policy: MirrorPop drops what drifted); later turns continue the engine's kept cache of
// their conversation; a judge gives back an answer that passed while the engine runs and times
// it once it stops. Training never overlaps generation: both use the same weights.
enum class Rollout { kTurns, kOverlapped };
inline const char* rollout_name(Rollout r) { return r == Rollout::kOverlapped ? "overlapped" : "turns"; }

struct RlOptions {
  std::string model_dir, problems, out_dir;
  std::string format = "native";  // the solution format prompts ask for
  std::string backend = "cuda";   // the kernels prompts ask for (synth::load_tasks)
  int level = 0;                  // 0: every level
  // > 0: the first N problems in curriculum order (after `level`), so that a short run goes
  // over the same problems several times; OUT/problems.txt lists what a run trains on.
  int64_t max_problems = 0;
  // A bench-model results.jsonl of the starting model on these problems: train only on the
  // problems it solved at turn 1 at least once there. Groups that all fail teach nothing, and
  // over problems a model never solves a run is all-failed steps (one small-model run: 1 pass in 704).
  std::string keep_solved;
  // The same results, but keep the problems whose turn-1 answers got different rewards: exactly
  // the groups with a spread (a problem solved every time alike has none). One SFT model of the
  // small recipe passed 2 of 94 RL problems at turn 1; its answers were near-identical at T 0.6.
  std::string keep_varied;
  std::string order = "curriculum";  // curriculum (level, difficulty) | shuffle (per epoch, from the seed)
  // Batch.
  int group_size = 8, prompts_per_step = 64;
  int64_t max_steps = 0, epochs = 1;  // max_steps > 0 wins
  // Rollouts.
  double temperature = 0.9, top_p = 0.95;
  int max_new_tokens = 4096, max_turns = 3;
  int loop_window = 0;         // > 0: stop an answer caught in a loop (generate/repetition.h)
  int64_t max_seq_len = 8192;  // a whole conversation (all turns); the engine's cache length
  int64_t max_batch = 256;     // sequences the engine decodes at once
  // How a step's rollouts are scheduled (docs/rl.md, "Rollout schedules").
  Rollout rollout = Rollout::kTurns;
  // Reward.
  PrimeEchoOptions prime_echo;
  // Advantages divide by max(std, this) (rl/advantages.h): reward spreads below it, such as
  // timing noise between correct answers, give proportionally smaller advantages. 0: plain GRPO.
  double adv_std_floor = 0.25;
  bool bdr = true;
  RetryBufferOptions retry;
  bool mirror_pop = true;
  double mirror_delta = 0.1;
  // Update.
  train::LrSchedule schedule;  // lr 1e-6, constant
  train::AdamWOptions adamw;
  double grad_clip = 0.5;
  PolicyLossOptions loss;      // clip 0.2 / 0.2, KL off
  int64_t micro_batch_tokens = 16384;
  bool grad_checkpoint = false;
  // Anchor set (SFT-format JSONL, e.g. SFT's held-out data): its mean token loss is measured
  // before the first step and every `anchor_every` steps after the update (anchor_loss and
  // anchor_loss_change in the metrics), so a run shows what of SFT's teaching it loses,
  // apart from what it learns. Nothing is trained on it. Empty: off.
  std::vector<std::string> anchor_data;
  int64_t anchor_every = 1;
  // Verification.
  std::string verifier_url, verifier_token;
  eval::EvalConfig eval_config;
  eval::EvaluatorOptions evaluator;
  bool hold_judges = true;     // false when the judges time on GPUs of their own
  // Answers remembered with their verdicts (rl/verdict_memory.h): the same answer to the same
  // problem in a later step gets the earlier verdict instead of being judged again. 0: off.
  int64_t verdict_memory = 4096;
  // Run.
  int64_t save_every = 0, keep_last = 3, samples_every = 10;
  int samples_to_write = 4;
  bool resume = false;
  uint64_t seed = 0;
  std::string device = "auto", dtype = "auto";
  bool progress = true;
  // Profile step N (1-based; 0: none) with libtorch's profiler: OUT/profile/step-N.{md,json}
  // name where the step's time went (train/profiler.h); with profile_trace also the Chrome trace.
  int64_t profile_step = 0;
  bool profile_trace = false;
  std::string planted;          // tests: JSONL of answers injected in place of the model's
  int64_t kill_after_step = 0;  // tests: SIGKILL right after step N
  std::string dump_dir;         // tests (one rank): each step's trained batch and its gradient
};

struct RlResult {
  int64_t steps = 0;
  std::string last_checkpoint;
  bool main_rank = true;
};

RlResult run_rl(const RlOptions& o);

}  // namespace mc::rl
