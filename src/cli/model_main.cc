// musacoder-model: the policy-model commands (generate, score, convert, serve-model, train), the only
// executable that links libtorch. Users run them as `musacoder COMMAND`, which hands over here.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/model_commands.h"
#include "cli/run_record.h"
#include "cli/train_commands.h"

int main(int argc, char** argv) {
  CLI::App app{"MusaCoder policy-model commands"};
  app.name("musacoder");
  app.require_subcommand(1);
  mc::cli::ModelCommands cmds(app);
  mc::cli::TrainCommands train(app);
  mc::cli::set_command_line(argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (auto rc = cmds.run()) return *rc;
    if (auto rc = train.run()) return *rc;
  } catch (const std::exception& e) {
    fmt::print(stderr, "musacoder: error: {}\n", e.what());
    return 2;
  }
  return 0;
}
