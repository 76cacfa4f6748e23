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
  std::string verify_device = "cuda", verify_gpus, cache_dir, backend = "cuda";
  double rl_bucket_mb = 128;
  bool no_primeecho = false, no_bdr = false, no_mirrorpop = false, rl_no_progress = false, no_graphs = false;
  int compile_workers = 0, spares = 0, lanes = 0;
  bool defer_timing = false;
  CLI::Option *admit_together = nullptr, *admit_wait_steps = nullptr;  // given only with --pipeline-turns
  std::string cuda_arch;
  std::vector<std::string> anchor_data;
};

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
  s->add_option("--lr", o.schedule.lr, "peak learning rate")->capture_default_str();
  s->add_option("--min-lr", o.schedule.min_lr, "learning rate at the end of the cosine")->capture_default_str();
  s->add_option("--warmup-steps", o.schedule.warmup_steps, "linear warmup steps")->capture_default_str();
  s->add_option("--schedule", o.schedule.kind, "cosine or constant")->capture_default_str();
  s->add_option("--weight-decay", o.adamw.weight_decay, "AdamW decoupled weight decay (matrices only)")->capture_default_str();
  s->add_option("--adam-beta1", o.adamw.beta1)->capture_default_str();
  s->add_option("--adam-beta2", o.adamw.beta2)->capture_default_str();
  s->add_option("--adam-eps", o.adamw.eps)->capture_default_str();
  s->add_option("--grad-clip", o.grad_clip, "global gradient-norm clip (0: off)")->capture_default_str();
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
  s->add_option("--bucket-mb", m.bucket_mb, "gradient bucket size for overlapped reduction (MB of fp32)")->capture_default_str();
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
  l->add_flag("--no-cuda-graphs", m.no_graphs, "decode without CUDA graphs");
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
  l->add_option("--lr", r.schedule.lr)->capture_default_str();
  l->add_option("--min-lr", r.schedule.min_lr)->capture_default_str();
  l->add_option("--warmup-steps", r.schedule.warmup_steps)->capture_default_str();
  l->add_option("--schedule", r.schedule.kind, "constant or cosine")->capture_default_str();
  l->add_option("--weight-decay", r.adamw.weight_decay)->capture_default_str();
  l->add_option("--grad-clip", r.grad_clip, "global gradient-norm clip (0: off)")->capture_default_str();
  l->add_option("--clip-low", r.loss.clip_low, "policy ratio clip below 1 (epsilon low)")->capture_default_str();
  l->add_option("--clip-high", r.loss.clip_high, "policy ratio clip above 1 (epsilon high)")->capture_default_str();
  l->add_option("--kl-coef", r.loss.kl_coef, "k3 KL to the starting model (0: off, no reference loaded)")->capture_default_str();
  l->option_defaults()->group("Rollout");
  l->add_option("--off-policy", r.off_policy, "0: train on this step's rollouts; 1: on the previous step's (one step stale)")
      ->capture_default_str()->check(CLI::Range(0, 1));
  l->add_flag("--async", r.async,
              "generate the next step's first turn while this step's answers are judged (one step off-policy, as --off-policy 1)");
  l->add_flag("--pipeline-turns", r.pipeline_turns,
              "ask for a trajectory's next turn as soon as its verdict is in, while other answers are still decoded "
              "(verification hides behind generation; which answers share a decode step then depends on when "
              "verdicts come)");
  l->add_flag("--repairs-ahead", r.repairs_ahead,
              "with --async --pipeline-turns: the next step's failed answers are repaired too while this step's last "
              "verdicts are judged, not only its first turn decoded (its later turns then may come from the policy "
              "before this step's update)");
  l->add_flag("--carry-repairs", r.carry_repairs,
              "with --pipeline-turns: a step trains the groups whose answers all stopped at turn 1 and hands the "
              "others on, one turn a step (a group whose answers took k turns trains k-1 steps later), so no step "
              "waits for its last repairs' verdicts");
  m.admit_together = l->add_option("--admit-together", r.admit_together,
                                   "with --pipeline-turns: the engine holds answers asked for one by one until this "
                                   "many are prefilled in one call (1: each at once)")
                         ->capture_default_str()
                         ->check(CLI::PositiveNumber);
  m.admit_wait_steps = l->add_option("--admit-wait-steps", r.admit_wait_steps,
                                     "with --pipeline-turns: the most decode steps an answer is held for that (0: none)")
                           ->capture_default_str()
                           ->check(CLI::NonNegativeNumber);
  l->add_flag("--reuse-kv", r.reuse_kv,
              "a trajectory's next turn continues the engine's KV cache of its conversation: only the feedback "
              "turn (and what of the answer re-tokenizes differently) is prefilled; caches are dropped at each update");
  l->add_flag("--cudnn-attention", r.cudnn_attention,
              "let SDPA use cuDNN attention, libtorch's choice on the H100: it plans each new prompt length anew "
              "(default off: flash attention)");
  l->add_flag("--overlap-decode", r.overlap_decode,
              "launch each decode step before the last one's tokens are read, so the host's work between steps (the "
              "rollouts' too) runs beside the GPU's (same tokens; bf16 rounding may differ)");
  l->add_flag("--exact-prefill", r.exact_prefill,
              "prefill exactly the prompts' tokens, without padding each call to one of a few sizes ("
              "CUDA only: new GEMM shapes cost the host ~0.5 ms each)");
  l->add_flag("--defer-timing", m.defer_timing,
              "a judge whose candidate passed while we generate gives it back and takes the next, rather than wait "
              "to time it (loaded again and timed once we stop, its trials not repeated): failing answers behind it get "
              "their verdicts meanwhile");
  l->option_defaults()->group("Optimizer");
  l->add_option("--micro-batch-tokens", r.micro_batch_tokens, "tokens per packed micro-batch")->capture_default_str();
  l->add_flag("--grad-checkpoint", r.grad_checkpoint, "recompute each layer in backward");
  l->add_option("--bucket-mb", m.rl_bucket_mb, "gradient bucket size (MB of fp32)")->capture_default_str();
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
  l->add_option("--verify-device", m.verify_device, "cuda, or cpu (judges on the CPU: tests)")->capture_default_str();
  l->add_option("--verify-gpus", m.verify_gpus, "GPUs the judges time on (default: this rank's own, held while it generates and trains)");
  l->add_option("--timing-budget", r.eval_config.timing_budget_s, "seconds of timing per callable")->capture_default_str();
  l->add_option("--speed-weight", r.eval_config.reward.lambda, "reward weight of the speedup (lambda)")->capture_default_str();
  l->add_option("--speed-cap", r.eval_config.reward.nu_max, "largest paid speedup - 1 (nu_max)")->capture_default_str();
  l->add_option("--cache-dir", m.cache_dir, "compile cache and reference timings");
  l->add_option("--compile-workers", m.compile_workers, "compile threads (0: MUSACODER_COMPILE_WORKERS, else half the cores)");
  l->add_option("--spares", m.spares, "warm candidate processes per judge (0: 1 on cpu, 6 on cuda)")
      ->envname("MUSACODER_SPARES");
  l->add_option("--lanes", m.lanes, "judges per verifying GPU (0: 1 on cpu, 4 on cuda)")->envname("MUSACODER_LANES");
  l->add_option("--backend", m.backend, "the kernels' target: cuda, or musa (Moore Threads; needs mcc and torch_musa)")
      ->capture_default_str()->check(CLI::IsMember({"cuda", "musa"}))->envname("MUSACODER_BACKEND");
  l->add_option("--cuda-arch", m.cuda_arch, "compute capability without the dot (default: detect)");
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
    MC_CHECK(m.verify_device == "cuda" || m.verify_device == "cpu", "--verify-device: '", m.verify_device, "' is not cuda or cpu");
    eval::require_backend(m.backend);  // musa: refused with what is missing, never judged on CUDA
    r.backend = m.backend;
    MC_CHECK(r.verifier_url.empty() || m.verify_gpus.empty(),
             "--verifier and --verify-gpus contradict each other: with a service, its workers choose the GPUs");
    for (const CLI::Option* o : {m.admit_together, m.admit_wait_steps})
      MC_CHECK(r.pipeline_turns || o->count() == 0, o->get_name(),
               " holds answers that --pipeline-turns asks for one by one; without it each turn's answers are "
               "prefilled together already, so it would do nothing");
    for (const auto& d : m.anchor_data)
      for (auto& p : train::split_paths(d)) r.anchor_data.push_back(p);
    r.prime_echo.enabled = !m.no_primeecho;
    r.bdr = !m.no_bdr;
    r.mirror_pop = !m.no_mirrorpop;
    r.progress = !m.rl_no_progress;
    r.cuda_graphs = !m.no_graphs;
    r.adamw.bucket_elements = static_cast<int64_t>(m.rl_bucket_mb * 1048576 / 4);
    auto& e = r.evaluator;
    e.device = m.verify_device;
    e.cache_dir = m.cache_dir.empty() ? default_cache_dir() : m.cache_dir;
    e.compile_workers = m.compile_workers;
    e.spares = m.spares;
    e.lanes = m.lanes;
    e.defer_timing = m.defer_timing;
    e.cuda_arch = m.cuda_arch;
    e.progress = false;
    e.sandbox_exe = (std::filesystem::path(self_exe()).parent_path() / "musacoder").string();
    MC_CHECK(std::filesystem::exists(e.sandbox_exe), "the verifier runs candidates through ", e.sandbox_exe,
             ", which is missing (build the musacoder target)");
    // This rank's GPU as the trainer will choose it (torchrun's LOCAL_RANK or SLURM_LOCALID, or
    // the only GPU a launcher bound to the rank).
    int own = train::dist_env_from_environment().local_rank;
    if (c10::Device d = model::parse_device(r.device, own); d.is_cuda()) own = d.index();
    if (m.verify_gpus.empty()) {
      e.gpus = {own};
      r.hold_judges = true;  // they share our GPU: no timing while we generate or train
    } else {
      e.gpus = parse_gpus(m.verify_gpus);
      r.hold_judges = std::find(e.gpus.begin(), e.gpus.end(), own) != e.gpus.end();
    }
    write_run_record(r.out_dir, "train rl", *m.rl);
    auto res = rl::run_rl(r);
    if (res.main_rank) fmt::print(stderr, "rl: {} steps, checkpoint {}\n", res.steps, res.last_checkpoint);
    return 0;
  }
  return 2;
}

}  // namespace mc::cli
