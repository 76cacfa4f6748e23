// A run's metrics: OUT/metrics.jsonl (one JSON row per step or evaluation, what programs read)
// and TensorBoard event files under OUT/tensorboard (what people open). Numeric fields of a
// row become TensorBoard scalars under "<prefix>/<field>". A resumed run drops rows past the
// step it resumes from, so the file reads as one uninterrupted run.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "train/tensorboard.h"

namespace mc::train {

class MetricsLog {
 public:
  // enabled=false (ranks other than 0): every call is a no-op.
  MetricsLog(const std::string& out_dir, int64_t resume_step, bool enabled);
  void log(const std::string& prefix, int64_t step, const nlohmann::json& row);

 private:
  std::string path_;
  std::unique_ptr<TensorBoardWriter> tb_;
  bool enabled_;
};

}  // namespace mc::train
