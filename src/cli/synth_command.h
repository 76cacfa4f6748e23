// `musacoder synth`: progressive kernel-oriented data synthesis with verified solutions.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>

namespace mc::cli {

class SynthCommand {
 public:
  explicit SynthCommand(CLI::App& app);
  ~SynthCommand();
  std::optional<int> run();  // nullopt when another subcommand was chosen

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mc::cli
