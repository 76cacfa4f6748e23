// `musacoder recipe RECIPE.toml --out RUN`: a training recipe's stages in order, resumable
// (src/recipe/runner.h); recipes/ holds the project's own.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>

namespace mc::cli {

class RecipeCommand {
 public:
  explicit RecipeCommand(CLI::App& app);
  ~RecipeCommand();
  std::optional<int> run();  // nullopt when this subcommand was not given

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mc::cli
