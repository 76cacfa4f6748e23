// The policy-model commands (built only with libtorch): `generate`, `score`, `convert`,
// `serve-model`.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>

namespace mc::cli {

class ModelCommands {
 public:
  explicit ModelCommands(CLI::App& app);
  ~ModelCommands();
  std::optional<int> run();  // nullopt when none of these commands was given

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mc::cli
