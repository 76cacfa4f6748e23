#include "cli/port_bench_command.h"

#include <fmt/format.h>

#include "synth/kernelbench_prompt.h"
#include "common/check.h"
#include "common/fs.h"
#include "eval/problem.h"
#include "port/bench_port.h"

namespace mc::cli {

struct PortBenchCommand::Impl {
  CLI::App* cmd = nullptr;
  std::string path, out;
  std::vector<std::string> rules;
  bool json = false;
};

PortBenchCommand::PortBenchCommand(CLI::App& app) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.cmd = app.add_subcommand("port-bench", "the MUSA-ported KernelBench: problems, the prompt's example, a manifest");
  m.cmd->add_option("kernelbench", m.path, "KernelBench's problem folder (level1, level2, ...) or its repository")
      ->required();
  m.cmd->add_option("-o,--out", m.out, "the ported benchmark's folder")->required();
  m.cmd->add_option("--rules", m.rules, "extra rule tables (TOML, the format of src/port/cuda_musa.toml)");
  m.cmd->add_flag("--json", m.json, "print the manifest's totals as JSON instead of the table");
}

PortBenchCommand::~PortBenchCommand() = default;

std::optional<int> PortBenchCommand::run() {
  Impl& m = *impl_;
  if (!*m.cmd) return std::nullopt;
  port::RuleTable table = port::load_rules(m.rules);
  port::Porter porter(table, port::Direction::kToMusa);
  const auto levels = port::kernelbench_levels(m.path);
  // The prompt's one-shot example, ported with the same rules, and the prompt a model is shown for
  // the first problem, so that a person can read what a MUSA run asks.
  const synth::KernelBenchExample cuda = synth::kernelbench_example("cuda");
  std::vector<port::ExtraFile> extras;
  extras.push_back({"prompt/model_ex_add.py", "", "KernelBench src/kernelbench/prompts/model_ex_add.py", porter.port(cuda.arch)});
  extras.push_back({"prompt/model_new_ex_add.py", "", "KernelBench src/kernelbench/prompts/model_new_ex_add.py",
                    porter.port(cuda.new_arch)});
  for (auto& x : extras) x.text = x.port.text;
  // The first problem in KernelBench's order (by the number its file name starts with).
  const eval::ProblemPtr first = eval::load_problems(levels.front()).front();
  port::PortResult p = porter.port(first->source);
  extras.push_back({"prompt/example_prompt.txt", synth::kernelbench_prompt(p.text, "fp32", "musa"),
                    "kernelbench_prompt(" + fs::path(levels.front()).filename().string() + "/" + first->stem +
                        ".py, fp32, musa)",
                    {}});
  nlohmann::json manifest = port::port_benchmark(m.path, m.out, porter, table, extras);
  if (m.json)
    fmt::print("{}\n", nlohmann::json{{"out", m.out}, {"levels", manifest["levels"]}, {"totals", manifest["totals"]}}.dump(1));
  else
    fmt::print("{}port-bench: {} files to {} (manifest.json); rules: {} rows from {} file(s)\n",
               port::port_bench_table(manifest), manifest["totals"]["files"].get<int>(), m.out, table.size(),
               table.files.size());
  return 0;
}

}  // namespace mc::cli
