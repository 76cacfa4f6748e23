#include "cli/recipe_command.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/check.h"
#include "recipe/runner.h"
#include "cli/run_record.h"

namespace mc::cli {

struct RecipeCommand::Impl {
  CLI::App* cmd = nullptr;
  std::string recipe;
  recipe::RunOptions o;
  std::vector<std::string> stages, sets, gpus;
  bool list = false, no_progress = false;
  int64_t gpu_mib = -1;  // --gpu-mib; -1: ask nvidia-smi
};

RecipeCommand::RecipeCommand(CLI::App& app) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.cmd = app.add_subcommand("recipe", "run a training recipe (recipes/*/recipe.toml): its stages in order, resumable");
  m.cmd->add_option("recipe", m.recipe, "the recipe file")->required();
  m.cmd->add_option("--out", m.o.run_dir, "the run folder (every artifact of every stage)");
  m.cmd->add_option("--stages", m.stages, "only these stages, comma-separated (in recipe order)")->delimiter(',');
  m.cmd->add_option("--from", m.o.from, "start at this stage (the ones before it must have finished)");
  m.cmd->add_option("--set", m.sets, "NAME=VALUE: override a [vars] value (repeatable)");
  m.cmd->add_flag("--redo", m.o.redo, "run the selected stages again even if they finished");
  m.cmd->add_option("--gpus", m.gpus,
                    "GPUs that a `together` group's stages are spread over, one each in turn, comma-separated "
                    "(CUDA's names; default: CUDA_VISIBLE_DEVICES, else every /dev/nvidiaN; one or none: no spreading)")
      ->delimiter(',');
  m.cmd->add_option("--together-per-gpu", m.o.per_gpu,
                    "at most this many stages of a `together` group on one GPU at once, for every group "
                    "(default: each group's together_per_gpu)")
      ->check(CLI::Range(1, 64));
  m.cmd->add_option("--gpu-mib", m.gpu_mib,
                    "each GPU's memory in MiB, for groups whose stages say together_gpu_mib (default: the "
                    "smallest of --gpus by nvidia-smi; 0: no cap)")
      ->check(CLI::NonNegativeNumber);
  m.cmd->add_flag("--list", m.list, "print the stages and their commands, run nothing");
  m.cmd->add_flag("--no-progress", m.no_progress, "no progress bar");
}

RecipeCommand::~RecipeCommand() = default;

std::optional<int> RecipeCommand::run() {
  Impl& m = *impl_;
  if (!*m.cmd) return std::nullopt;
  recipe::Recipe r = recipe::load_recipe(m.recipe);
  if (m.list) {
    for (const auto& s : r.stages) {
      std::string group;
      if (!s.together.empty())
        group = fmt::format(" [together: {}{}]", s.together,
                            s.per_gpu > 0 ? fmt::format(", {} per GPU", s.per_gpu) : std::string());
      fmt::print("{:<14} {}{}\n", s.name, s.about, group);
      for (const auto& c : s.commands) {
        std::string line;
        for (const auto& a : c) line += (line.empty() ? "" : " ") + a;
        fmt::print("    {}\n", line);
      }
    }
    return 0;
  }
  MC_CHECK(!m.o.run_dir.empty(), "recipe: --out RUN is required to run");
  for (const auto& kv : m.sets) {
    auto eq = kv.find('=');
    MC_CHECK(eq != std::string::npos && eq > 0, "--set: '", kv, "' is not NAME=VALUE");
    m.o.set[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  m.o.only = m.stages;
  m.o.gpus = m.gpus.empty() ? recipe::visible_gpus() : m.gpus;
  m.o.gpu_mib = m.gpu_mib >= 0 ? m.gpu_mib : recipe::gpu_memory_mib(m.o.gpus);
  m.o.progress = !m.no_progress;
  write_run_record(m.o.run_dir, "recipe", *m.cmd);
  auto state = recipe::run_recipe(r, m.o);
  size_t w = 5;
  for (const auto& s : r.stages) w = std::max(w, s.name.size());
  fmt::print("{:<{}} {:>10} {:>8}  {}\n", "stage", w, "seconds", "device", "finished");
  double total = 0;
  for (const auto& s : r.stages) {
    if (!state["stages"].contains(s.name)) continue;
    const auto& st = state["stages"][s.name];
    if (!st.value("done", false)) continue;
    total += st.value("seconds", 0.0);
    fmt::print("{:<{}} {:>10.1f} {:>8}  {}\n", s.name, w, st.value("seconds", 0.0), st.value("device", ""),
               st.value("finished_at", ""));
  }
  fmt::print("{:<{}} {:>10.1f}\nrecipe: state in {}/recipe/state.json\n", "all", w, total, m.o.run_dir);
  return 0;
}

}  // namespace mc::cli
