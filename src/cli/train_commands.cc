#include "cli/train_commands.h"

#include <fmt/format.h>

#include "train/dataset.h"
#include "train/sft.h"

namespace mc::cli {

struct TrainCommands::Impl {
  CLI::App* train = nullptr;
  CLI::App* sft = nullptr;
  train::SftOptions o;
  std::vector<std::string> data, eval_data;
  double bucket_mb = 128;
  bool no_progress = false, no_packing = false;
};

TrainCommands::TrainCommands(CLI::App& app) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  auto& o = m.o;
  m.train = app.add_subcommand("train", "train a policy model (sft)");
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
  s->add_option("--max-len", o.max_len, "examples are truncated to this many tokens")->capture_default_str();
  s->add_flag("--no-packing", m.no_packing, "one example per micro-batch (packing gives the same gradients, faster)");
  s->add_flag("--grad-checkpoint", o.grad_checkpoint, "recompute each layer in backward (activation checkpointing)");
  s->add_option("--save-every", o.save_every, "checkpoint every N steps (0: only at the end)")->capture_default_str();
  s->add_option("--keep", o.keep_last, "checkpoints kept")->capture_default_str();
  s->add_option("--eval-data", m.eval_data, "held-out JSONL, same formats");
  s->add_option("--eval-every", o.eval_every, "evaluate every N steps (0: never)")->capture_default_str();
  s->add_flag("--resume", o.resume, "continue from the newest checkpoint in --out");
  s->add_option("--seed", o.seed, "data order")->capture_default_str();
  s->add_option("--device", o.device, "auto (cuda:LOCAL_RANK if CUDA, else cpu), cpu, cuda:N")->capture_default_str();
  s->add_option("--dtype", o.dtype, "auto (bf16 on CUDA, fp32 on CPU), bf16, fp32")->capture_default_str();
  s->add_option("--bucket-mb", m.bucket_mb, "gradient bucket size for overlapped reduction (MB of fp32)")->capture_default_str();
  s->add_option("--peak-tflops", o.peak_tflops, "device peak for MFU (0: from the device name)");
  s->add_flag("--no-progress", m.no_progress, "no progress bar");
  s->add_option("--exit-after-step", o.kill_after_step, "testing: SIGKILL this process right after step N (a crash)")
      ->group("");
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
    auto r = train::run_sft(m.o);
    if (r.main_rank) fmt::print(stderr, "sft: {} steps, last loss {:.4f}, checkpoint {}\n", r.steps, r.last_loss, r.last_checkpoint);
    return 0;
  }
  return 2;
}

}  // namespace mc::cli
