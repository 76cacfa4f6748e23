// `musacoder train sft` and `musacoder train rl` (libtorch; run in musacoder-model). Started as
// one process, or under torchrun / SLURM for data parallelism (src/train/distributed.h).
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>

namespace mc::cli {

class TrainCommands {
 public:
  explicit TrainCommands(CLI::App& app);
  ~TrainCommands();
  std::optional<int> run();  // nullopt when `train` was not given

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mc::cli
