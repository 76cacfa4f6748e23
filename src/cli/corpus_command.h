// `musacoder corpus --config SOURCES.toml --out DIR`: the recipe's pretraining corpus
// (src/recipe/corpus.h).
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>

namespace mc::cli {

class CorpusCommand {
 public:
  explicit CorpusCommand(CLI::App& app);
  ~CorpusCommand();
  std::optional<int> run();  // nullopt when this subcommand was not given

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mc::cli
