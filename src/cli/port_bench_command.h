// `musacoder port-bench KERNELBENCH --out DIR`: the MUSA-ported KernelBench (src/port/bench_port.h),
// with the prompt's one-shot example ported and a manifest of every change.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>

namespace mc::cli {

class PortBenchCommand {
 public:
  explicit PortBenchCommand(CLI::App& app);
  ~PortBenchCommand();
  std::optional<int> run();  // nullopt when this subcommand was not given

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mc::cli
