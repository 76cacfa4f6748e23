// `musacoder selftest`: MooreEval against itself over a benchmark (src/eval/selftest.h).
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>

namespace mc::cli {

class SelftestCommand {
 public:
  explicit SelftestCommand(CLI::App& app);
  ~SelftestCommand();
  std::optional<int> run();  // nullopt when this subcommand was not given

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mc::cli
