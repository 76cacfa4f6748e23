// `musacoder bench-model`: evaluate a model on KernelBench (src/bench/bench_run.h).
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>

namespace mc::cli {

class BenchCommand {
 public:
  explicit BenchCommand(CLI::App& app);
  ~BenchCommand();
  std::optional<int> run();  // nullopt when another subcommand was chosen

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mc::cli
