// `musacoder rft`: diversity-preserving rejection fine-tuning (src/rft/rft.h).
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>

namespace mc::cli {

class RftCommand {
 public:
  explicit RftCommand(CLI::App& app);
  ~RftCommand();
  std::optional<int> run();  // nullopt when another subcommand was chosen

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mc::cli
