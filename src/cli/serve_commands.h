// The service subcommands: `serve` (HTTP API), `worker` (Redis Streams stage worker) and
// `verify` (the C++ client: send candidates to a server, print the summary, write JSONL).
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>

namespace mc::cli {

class ServeCommands {
 public:
  explicit ServeCommands(CLI::App& app);
  ~ServeCommands();
  // Runs the subcommand the user chose, if it is one of ours.
  std::optional<int> run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mc::cli
