// `musacoder plot RUN... --out curves.svg`: the curves of training runs (their metrics.jsonl)
// as an SVG image, one panel per metric, one line per run.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>

namespace mc::cli {

class PlotCommand {
 public:
  explicit PlotCommand(CLI::App& app);
  ~PlotCommand();
  std::optional<int> run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mc::cli
