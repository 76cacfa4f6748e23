// Supervised fine-tuning: `musacoder train sft`. The loop, in order, per optimizer step:
// the step's examples (batching.h) packed into micro-batches, this rank's share run forward
// (hidden states, then the fused LM-head cross entropy of loss.h on the target tokens only)
// and backward with the sum divided by the step's global target count; gradients reduced
// and clipped, AdamW on fp32 masters (sharded_adamw.h); the row of metrics (metrics.h);
// evaluation and checkpoints (checkpoint.h) on their schedules.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/schedule.h"
#include "train/sharded_adamw.h"

namespace mc::train {

struct SftOptions {
  std::string model_dir, out_dir;
  std::vector<std::string> data, eval_data;
  int64_t epochs = 1, max_steps = 0;  // max_steps > 0 wins over epochs
  LrSchedule schedule;                // lr, min_lr, warmup_steps, kind (total_steps is derived)
  AdamWOptions adamw;
  double grad_clip = 1.0;
  int64_t tokens_per_step = 65536, micro_batch_tokens = 16384, max_len = 4096;
  bool grad_checkpoint = false;
  bool packing = true;  // false: one example per micro-batch (for comparisons)
  int64_t save_every = 0, keep_last = 3, eval_every = 0;
  bool resume = false;
  uint64_t seed = 0;
  bool deterministic = false;  // libtorch's deterministic kernels (train/determinism.h)
  std::string device = "auto", dtype = "auto";
  double peak_tflops = 0;  // for MFU; 0: from the device name (H100/H200 989, A100 312)
  bool progress = true;
  int64_t kill_after_step = 0;  // tests: SIGKILL this process right after step N, as a crash would
};

struct SftResult {
  int64_t steps = 0;
  double last_loss = 0;
  std::string last_checkpoint;
  bool main_rank = true;  // rank 0 (the one that reports)
};

SftResult run_sft(const SftOptions& o);

}  // namespace mc::train
