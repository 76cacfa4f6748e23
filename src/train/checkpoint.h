// Training checkpoints: OUT/checkpoints/step-00000100/ holds
//   config.json, model.safetensors, tokenizer files   the model in Hugging Face format (model
//                                                      dtype), loadable by transformers and us
//   optimizer-rank00000-of-00002.safetensors           each rank's optimizer shard (fp32 master
//                                                      weights, AdamW moments, step)
//   trainer_state.json                                 step, data position, schedule, the
//                                                      layout and options a resume must match
// A checkpoint is written into a hidden temporary folder and renamed into place when every rank
// has finished, so a folder named step-N is always whole; a run killed while saving leaves only
// the temporary folder, which the next save removes. Only the last --keep checkpoints stay.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/qwen_model.h"
#include "train/distributed.h"
#include "train/sharded_adamw.h"

namespace mc::train {

struct CheckpointInfo {
  std::string dir;
  int64_t step = 0;
};

// The newest whole checkpoint under out_dir/checkpoints, if any.
std::optional<CheckpointInfo> latest_checkpoint(const std::string& out_dir);

// Collective: every rank calls it. state is trainer_state.json's content (rank 0's is written).
// write_extra, if given, is called on every rank with the temporary folder, before it is renamed
// into place (a trainer's own per-rank state goes in the same whole-or-nothing checkpoint).
void save_checkpoint(const std::string& out_dir, int64_t step, const model::QwenModel& model, const std::string& source_model_dir,
                     ShardedAdamW& opt, const nlohmann::json& state, Distributed& dist, int keep_last,
                     const std::function<void(const std::string& dir)>& write_extra = {});

// Reads trainer_state.json and this rank's optimizer shard into opt (which writes the master
// weights back into the model). Throws naming what does not match.
nlohmann::json load_checkpoint(const CheckpointInfo& ckpt, ShardedAdamW& opt, Distributed& dist);

}  // namespace mc::train
