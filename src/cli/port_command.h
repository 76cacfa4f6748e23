// `musacoder port --to musa|cuda PATH`: CUDA <-> MUSA source translation (src/port/).
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>

namespace mc::cli {

class PortCommand {
 public:
  explicit PortCommand(CLI::App& app);
  ~PortCommand();
  std::optional<int> run();  // nullopt when this subcommand was not given

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mc::cli
