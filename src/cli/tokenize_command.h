// `musacoder tokenize`: {"text": ...} per line in, {"ids": [...]} per line out.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>

namespace mc::cli {

class TokenizeCommand {
 public:
  explicit TokenizeCommand(CLI::App& app);
  ~TokenizeCommand();
  std::optional<int> run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mc::cli
