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
  bool cuda_graphs = true;
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
  // 0: train on this step's rollouts. 1: on the previous step's (made before the last update,
  // as asynchronous generation would make them): one step off-policy, what MirrorPop guards.
  int off_policy = 0;
  // Generate the next step's first turn while this step's answers are judged (at the first
  // wait for verdicts), so that it is judged while this step finishes and trains. Its tokens
  // come from the policy before this step's update: one step off-policy, like --off-policy 1,
  // which it excludes. Training never overlaps generation: both use the same weights.
  bool async = false;
  // Turns 2 and on pipelined (RolloutOptions::pipeline): a trajectory's next answer is asked for
  // as soon as its verdict is in, so its verification hides behind other answers' decoding.
  bool pipeline_turns = false;
  // With async and pipeline_turns: the next step's verdicts are taken in this step's loop too,
  // and its failed answers' next turns asked for at once (RolloutRunner::finish's
  // beside_repairs), from this step's policy as its first turn is. The engine then decodes them
  // while this step's last verdicts are judged, where it would wait idle. A step's later turns
  // may so come from the policy before the last update; the loss is on turn 1 (PrimeEcho), and
  // every token's rollout log-probability is kept for the ratio and MirrorPop either way.
  bool repairs_ahead = false;
  // With pipeline_turns: a step trains the groups whose answers all stopped at turn 1 and hands
  // the others on, one turn a step (RolloutOptions::carry_repairs): a group whose trajectories
  // took k turns is finished and trained k - 1 steps after its own (one more update later with
  // --async), so that no step waits for its last repairs' verdicts. Their turn-1 tokens' rollout
  // log-probabilities are kept for the ratio and MirrorPop. The last step trains what is left.
  bool carry_repairs = false;
  // With pipeline_turns, answers are asked for one by one as verdicts come: the engine holds
  // them (gen::EngineOptions::admit_together) until this many can be prefilled in one call, for
  // at most admit_wait_steps decode steps. Each prefill call otherwise stalls every running
  // sequence (on the H100: prefill 1.5-3.3 s of a 7-9 s step, against 0.3 s turn by turn).
  int admit_together = 8;
  int admit_wait_steps = 16;
  bool cudnn_attention = false;  // gen::EngineOptions::cudnn_attention (off: flash, no per-shape plans)
  bool exact_prefill = false;    // gen::EngineOptions::prefill_buckets off
  bool overlap_decode = false;   // gen::EngineOptions::overlap
  // RolloutOptions::reuse_kv: later turns continue the engine's cache of the conversation instead
  // of prefilling it whole. Kept caches are given up at every update (they hold the old weights'
  // K/V), so with --async a next step's second turns, asked for after the update, prefill whole.
  bool reuse_kv = false;
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
