#include "cli/train_commands.h"

#include <fmt/format.h>

#include <filesystem>

#include "cli/run_options.h"
#include "cli/run_record.h"
#include "common/check.h"
#include "eval/toolchain.h"
#include "model/device.h"
#include "rl/trainer.h"
#include "train/dataset.h"
#include "train/distributed.h"
#include "train/sft.h"

namespace mc::cli {

struct TrainCommands::Impl {
  CLI::App* train = nullptr;
  CLI::App* sft = nullptr;
  train::SftOptions o;
  std::vector<std::string> data, eval_data;
  double bucket_mb = 128;
  bool no_progress = false, no_packing = false;
  // train rl
  CLI::App* rl = nullptr;
  rl::RlOptions r;
  RunOptions judge;  // the judges' options (add_judge_options)
  double rl_bucket_mb = 128;
  bool no_primeecho = false, no_bdr = false, no_mirrorpop = false, rl_no_progress = false;
  std::string rollout = "turns";
  std::vector<std::string> anchor_data;
};

namespace {

// The optimizer's options, declared once for both trainers (each keeps its own defaults: SFT a
// cosine from 1e-5, RL a constant 1e-6).
void add_optimizer_options(CLI::App* c, train::LrSchedule& s, train::AdamWOptions& a, double& grad_clip,
                           double& bucket_mb) {
  c->add_option("--lr", s.lr, "peak learning rate")->capture_default_str();
  c->add_option("--min-lr", s.min_lr, "learning rate at the end of the cosine")->capture_default_str();
  c->add_option("--warmup-steps", s.warmup_steps, "linear warmup steps")->capture_default_str();
  c->add_option("--schedule", s.kind, "cosine or constant")->capture_default_str();
  c->add_option("--weight-decay", a.weight_decay, "AdamW decoupled weight decay (matrices only)")->capture_default_str();
  c->add_option("--adam-beta1", a.beta1)->capture_default_str();
  c->add_option("--adam-beta2", a.beta2)->capture_default_str();
  c->add_option("--adam-eps", a.eps)->capture_default_str();
  c->add_option("--grad-clip", grad_clip, "global gradient-norm clip (0: off)")->capture_default_str();
  c->add_option("--bucket-mb", bucket_mb, "gradient bucket size for overlapped reduction (MB of fp32)")->capture_default_str();
  c->add_option_function<std::string>(
       "--shard", [&a](const std::string& v) { a.shard = v == "weights" ? train::Shard::kWeights : train::Shard::kOptimizer; },
       "what the ranks split among them: optimizer (fp32 masters and AdamW moments, ZeRO-1/2) or weights (the layers' "
       "weights and gradients too, ZeRO-3: each layer gathered only while it computes)")
      ->check(CLI::IsMember({"optimizer", "weights"}))
      ->default_str("optimizer");
  c->add_option("--shard-group-size", a.shard_group,
                "hybrid sharding: split the sharded state over groups of N consecutive ranks (one node's GPUs) and "
                "replicate it across the groups, so the large collectives stay inside a node (0: all ranks)")
      ->capture_default_str();
}

}  // namespace

TrainCommands::TrainCommands(CLI::App& app) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  auto& o = m.o;
  m.train = app.add_subcommand("train", "train a policy model (sft, rl)");
  m.train->require_subcommand(1);
  auto* s = m.sft = m.train->add_subcommand("sft", "supervised fine-tuning on chat, prompt/completion or text JSONL");
  s->add_option("--model", o.model_dir, "Hugging Face model directory to start from")->required();
  s->add_option("--data", m.data, "JSONL file(s), comma-separated or repeated: {messages}, {prompt, completion} or {text} rows")->required();
  s->add_option("--out", o.out_dir, "run folder: checkpoints/, metrics.jsonl, tensorboard/")->required();
  s->add_option("--epochs", o.epochs, "passes over the data")->capture_default_str();
  s->add_option("--max-steps", o.max_steps, "optimizer steps (wins over --epochs)");
  add_optimizer_options(s, o.schedule, o.adamw, o.grad_clip, m.bucket_mb);
  s->add_option("--tokens-per-step", o.tokens_per_step, "tokens per optimizer step, over all ranks")->capture_default_str();
  s->add_option("--micro-batch-tokens", o.micro_batch_tokens, "tokens per packed micro-batch (one forward/backward)")->capture_default_str();
  s->add_option("--max-len", o.max_len,
                "chat rows are truncated to this many tokens; {\"text\"} documents are split into pieces of it")
      ->capture_default_str();
  s->add_flag("--no-packing", m.no_packing, "one example per micro-batch (packing gives the same gradients, faster)");
  s->add_flag("--grad-checkpoint", o.grad_checkpoint, "recompute each layer in backward (activation checkpointing)");
  s->add_option("--save-every", o.save_every, "checkpoint every N steps (0: only at the end)")->capture_default_str();
  s->add_option("--keep", o.keep_last, "checkpoints kept")->capture_default_str();
  s->add_option("--eval-data", m.eval_data, "held-out JSONL, same formats");
  s->add_option("--eval-every", o.eval_every, "evaluate every N steps (0: never)")->capture_default_str();
  s->add_flag("--resume", o.resume, "continue from the newest checkpoint in --out");
  s->add_option("--seed", o.seed, "data order")->capture_default_str();
  s->add_flag("--deterministic", o.deterministic,
              "libtorch's deterministic kernels (flash attention's backward without atomics, a fixed cuBLAS workspace): "
              "the same data, seed and GPU give the same weights");
  s->add_option("--device", o.device, "auto (cuda:LOCAL_RANK if CUDA, else cpu), cpu, cuda:N")->capture_default_str();
  s->add_option("--dtype", o.dtype, "auto (bf16 on CUDA, fp32 on CPU), bf16, fp32")->capture_default_str();
  s->add_option("--peak-tflops", o.peak_tflops, "device peak for MFU (0: from the device name)");
  s->add_flag("--no-progress", m.no_progress, "no progress bar");
  s->add_option("--exit-after-step", o.kill_after_step, "testing: SIGKILL this process right after step N (a crash)")
      ->group("");

  // --- train rl ---------------------------------------------------------------------------
  auto& r = m.r;
  r.schedule.kind = "constant";
  r.schedule.lr = 1e-6;
  auto* l = m.rl = m.train->add_subcommand("rl", "multi-turn GRPO through MooreEval (PrimeEcho, Buffered Dynamic Retry, MirrorPop)");
  l->option_defaults()->group("Data");
  l->add_option("--model", r.model_dir, "Hugging Face model directory to start from (the SFT checkpoint)")->required();
  l->add_option("--problems", r.problems, "folder of KernelBench problems, or the problems.jsonl of `musacoder synth`")->required();
  l->add_option("--out", r.out_dir, "run folder: checkpoints/, metrics.jsonl, tensorboard/, samples/")->required();
  l->add_option("--format", r.format, "solution format the prompts ask for: native or kernelbench")->capture_default_str();
  l->add_option("--level", r.level, "train on this level only (0: all)")->capture_default_str();
  l->add_option("--max-problems", r.max_problems,
                "train on the first N problems in curriculum order, epoch after epoch (0: all); OUT/problems.txt lists them")
      ->capture_default_str();
  l->add_option("--keep-solved", r.keep_solved,
                "bench-model's results.jsonl of the starting model on these problems: train only on those it solved at "
                "turn 1 at least once there");
  l->add_option("--keep-varied", r.keep_varied,
                "the same results: train only on the problems whose turn-1 answers got different rewards there (a group "
                "with a spread; one solved every time alike has none)");
  l->add_option("--order", r.order, "curriculum (level, then difficulty) or shuffle (per epoch)")->capture_default_str();
  l->option_defaults()->group("Rollout");
  l->add_option("--group-size", r.group_size, "answers per prompt (G)")->capture_default_str();
  l->add_option("--prompts-per-step", r.prompts_per_step, "prompts per step, over all ranks (repair tasks included)")->capture_default_str();
  l->add_option("--temperature", r.temperature)->capture_default_str();
  l->add_option("--top-p", r.top_p)->capture_default_str();
  l->add_option("--max-new-tokens", r.max_new_tokens, "tokens per answer")->capture_default_str();
  add_stop_loops_option(l, r.loop_window);
  l->add_option("--max-turns", r.max_turns, "answers per trajectory (1: single-turn GRPO)")->capture_default_str();
  l->add_option("--max-seq-len", r.max_seq_len, "tokens of a whole conversation (the engine's cache length)")->capture_default_str();
  l->add_option("--max-batch", r.max_batch, "sequences the engine decodes at once")->capture_default_str();
  l->add_option("--rollout", m.rollout,
                "turns: each turn is generated whole, then judged, then the next (on-policy; the reference). "
                "overlapped: the next step's first turn is decoded beside this step's turns, a failed answer's repair "
                "is asked for as soon as its verdict is in, later turns continue their conversation's KV cache, and a "
                "passing answer is timed once generation stops (one step off-policy; the faster, docs/rl.md)")
      ->capture_default_str()
      ->check(CLI::IsMember({"turns", "overlapped"}));
  l->option_defaults()->group("Algorithm");
  l->add_option("--alpha", r.prime_echo.alpha, "PrimeEcho: weight of the first turn")->capture_default_str();
  l->add_option("--early-bonus", r.prime_echo.early_bonus, "PrimeEcho: bonus for a pass at turn 1")->capture_default_str();
  l->add_option("--early-decay", r.prime_echo.early_decay, "PrimeEcho: the bonus shrinks by this per later turn")->capture_default_str();
  l->add_flag("--no-primeecho", m.no_primeecho, "ablation: reward from the last turn only");
  l->add_option("--adv-std-floor", r.adv_std_floor,
                "advantages divide by max(group reward std, this): timing noise between correct answers stays small "
                "(0: plain GRPO normalization)")
      ->capture_default_str();
  l->add_flag("--no-bdr", m.no_bdr, "ablation: all-failed groups are dropped, not buffered");
  l->add_option("--bdr-capacity", r.retry.capacity, "retry buffer entries")->capture_default_str();
  l->add_option("--bdr-prob", r.retry.reissue_prob, "probability that a batch slot is a repair task")->capture_default_str();
  l->add_option("--bdr-max-reissues", r.retry.max_reissues, "re-issues before an entry expires")->capture_default_str();
  l->add_flag("--no-mirrorpop", m.no_mirrorpop, "ablation: keep every sequence");
  l->add_option("--mirror-delta", r.mirror_delta, "MirrorPop: drop a sequence whose mean |log ratio| exceeds this")->capture_default_str();
  l->option_defaults()->group("Optimizer");
  add_optimizer_options(l, r.schedule, r.adamw, r.grad_clip, m.rl_bucket_mb);
  l->add_option("--clip-low", r.loss.clip_low, "policy ratio clip below 1 (epsilon low)")->capture_default_str();
  l->add_option("--clip-high", r.loss.clip_high, "policy ratio clip above 1 (epsilon high)")->capture_default_str();
  l->add_option("--kl-coef", r.loss.kl_coef, "k3 KL to the starting model (0: off, no reference loaded)")->capture_default_str();
  l->add_option("--micro-batch-tokens", r.micro_batch_tokens, "tokens per packed micro-batch")->capture_default_str();
  l->add_flag("--grad-checkpoint", r.grad_checkpoint, "recompute each layer in backward");
  l->option_defaults()->group("Data");
  l->add_option("--anchor-data", m.anchor_data,
                "SFT-format JSONL (comma-separated or repeated) whose token loss is reported as anchor_loss before "
                "the first step and after updates: what the run loses of what SFT taught (never trained on)");
  l->add_option("--anchor-every", r.anchor_every, "measure the anchor loss every N steps")->capture_default_str();
  l->option_defaults()->group("Verifier");
  l->add_option("--verifier", r.verifier_url,
                "MooreEval service URL (default: in process); it must judge under this run's settings "
                "(--timing-budget, --speed-weight, --speed-cap), or the run stops naming what differs");
  l->add_option("--verdict-memory", r.verdict_memory,
                "answers remembered with their verdicts: the same answer to a problem in a later step is not judged "
                "again (0: judge every answer)")
      ->capture_default_str();
  l->add_option("--verifier-token", r.verifier_token, "bearer token for --verifier");
  // The judges' options, as every command that judges declares them; --device and --no-progress
  // here are the policy's, so the judges' GPUs and device are --verify-gpus and --verify-device.
  m.judge.gpus = "";
  add_judge_options(l, m.judge, "verify-");
  l->get_option("--verify-gpus")
      ->description("GPUs the judges time on (default: this rank's own, held while it generates and trains)");
  l->add_option("--speed-weight", r.eval_config.reward.lambda, "reward weight of the speedup (lambda)")->capture_default_str();
  l->add_option("--speed-cap", r.eval_config.reward.nu_max, "largest paid speedup - 1 (nu_max)")->capture_default_str();
  l->option_defaults()->group("Run");
  l->add_option("--max-steps", r.max_steps, "steps (wins over --epochs)");
  l->add_option("--epochs", r.epochs, "passes over the problems")->capture_default_str();
  l->add_option("--save-every", r.save_every, "checkpoint every N steps (0: only at the end)")->capture_default_str();
  l->add_option("--keep", r.keep_last, "checkpoints kept")->capture_default_str();
  l->add_option("--samples-every", r.samples_every, "write whole trajectories every N steps (0: never)")->capture_default_str();
  l->add_option("--samples", r.samples_to_write, "trajectories written each time")->capture_default_str();
  l->add_flag("--resume", r.resume, "continue from the newest checkpoint in --out");
  l->add_option("--seed", r.seed, "data order, sampling, retry draws")->capture_default_str();
  l->add_option("--device", r.device, "auto (cuda:LOCAL_RANK if CUDA, else cpu), cpu, cuda:N")->capture_default_str();
  l->add_option("--dtype", r.dtype, "auto (bf16 on CUDA, fp32 on CPU), bf16, fp32")->capture_default_str();
  l->add_flag("--no-progress", m.rl_no_progress, "no progress bar");
  l->add_option("--profile-step", r.profile_step,
                "profile step N (1-based) with libtorch's profiler: OUT/profile/step-N.md names where its time went")
      ->capture_default_str();
  l->add_flag("--profile-trace", r.profile_trace, "with --profile-step: also the whole Chrome trace (large)");
  l->add_option("--plant", r.planted, "testing: JSONL of answers injected in place of the model's")->group("");
  l->add_option("--exit-after-step", r.kill_after_step, "testing: SIGKILL right after step N")->group("");
  l->add_option("--dump-steps", r.dump_dir, "testing: each step's batch and gradient (one rank)")->group("");
}

TrainCommands::~TrainCommands() = default;

std::optional<int> TrainCommands::run() {
  Impl& m = *impl_;
  if (!*m.train) return std::nullopt;
  if (*m.sft) {
    for (const auto& d : m.data)
      for (auto& p : train::split_paths(d)) m.o.data.push_back(p);
    for (const auto& d : m.eval_data)
      for (auto& p : train::split_paths(d)) m.o.eval_data.push_back(p);
    m.o.progress = !m.no_progress;
    m.o.packing = !m.no_packing;
    m.o.adamw.bucket_elements = static_cast<int64_t>(m.bucket_mb * 1048576 / 4);
    write_run_record(m.o.out_dir, "train sft", *m.sft);
    auto r = train::run_sft(m.o);
    if (r.main_rank) fmt::print(stderr, "sft: {} steps, last loss {:.4f}, checkpoint {}\n", r.steps, r.last_loss, r.last_checkpoint);
    return 0;
  }
  if (*m.rl) {
    auto& r = m.r;
    RunOptions& j = m.judge;
    r.backend = j.backend;
    r.eval_config.timing_budget_s = j.cfg.timing_budget_s;
    r.eval_config.trial_timeout_s = j.cfg.trial_timeout_s;
    MC_CHECK(r.verifier_url.empty() || j.gpus.empty(),
             "--verifier and --verify-gpus contradict each other: with a service, its workers choose the GPUs");
    for (const auto& d : m.anchor_data)
      for (auto& p : train::split_paths(d)) r.anchor_data.push_back(p);
    r.rollout = m.rollout == "overlapped" ? rl::Rollout::kOverlapped : rl::Rollout::kTurns;
    r.prime_echo.enabled = !m.no_primeecho;
    r.bdr = !m.no_bdr;
    r.mirror_pop = !m.no_mirrorpop;
    r.progress = !m.rl_no_progress;
    r.adamw.bucket_elements = static_cast<int64_t>(m.rl_bucket_mb * 1048576 / 4);
    // The judges time on this rank's GPU unless --verify-gpus names others: its GPU as the
    // trainer will choose it (torchrun's LOCAL_RANK or SLURM_LOCALID, or the only GPU a launcher
    // bound to the rank).
    int own = train::dist_env_from_environment().local_rank;
    if (c10::Device d = model::parse_device(r.device, own); d.is_cuda()) own = d.index();
    if (j.gpus.empty()) j.gpus = std::to_string(own);
    auto& e = r.evaluator = evaluator_options(j);  // musa: refused with what is missing, never judged on CUDA
    e.progress = false;
    e.sandbox_exe = (std::filesystem::path(self_exe()).parent_path() / "musacoder").string();
    MC_CHECK(std::filesystem::exists(e.sandbox_exe), "the verifier runs candidates through ", e.sandbox_exe,
             ", which is missing (build the musacoder target)");
    // Judges on our GPU share it: no timing while we generate or train.
    r.hold_judges = std::find(e.gpus.begin(), e.gpus.end(), own) != e.gpus.end();
    write_run_record(r.out_dir, "train rl", *m.rl);
    auto res = rl::run_rl(r);
    if (res.main_rank) fmt::print(stderr, "rl: {} steps, checkpoint {}\n", res.steps, res.last_checkpoint);
    return 0;
  }
  return 2;
}

}  // namespace mc::cli
