#include "cli/corpus_command.h"

#include <fmt/format.h>

#include "common/fs.h"
#include "recipe/corpus.h"

namespace mc::cli {

struct CorpusCommand::Impl {
  CLI::App* cmd = nullptr;
  std::string config, out, decontaminate, python = "python3";
  bool no_progress = false;
};

CorpusCommand::CorpusCommand(CLI::App& app) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.cmd = app.add_subcommand("corpus", "the pretraining corpus: code text from local folders and packages, deduplicated "
                                       "and decontaminated against KernelBench");
  m.cmd->add_option("--config", m.config, "TOML with [[source]] tables (name, path, extensions, license)")->required();
  m.cmd->add_option("--out", m.out, "folder for corpus.jsonl, report.json, report.md")->required();
  m.cmd->add_option("--decontaminate", m.decontaminate, "a KernelBench checkout: none of its problems may enter");
  m.cmd->add_option("--python", m.python, "interpreter that resolves python:module sources")->capture_default_str();
  m.cmd->add_flag("--no-progress", m.no_progress, "no progress bars");
}

CorpusCommand::~CorpusCommand() = default;

std::optional<int> CorpusCommand::run() {
  Impl& m = *impl_;
  if (!*m.cmd) return std::nullopt;
  recipe::CorpusOptions o = recipe::load_corpus_config(m.config);
  o.out_dir = m.out;
  o.decontaminate_dir = m.decontaminate;
  o.python = m.python;
  o.progress = !m.no_progress;
  auto rep = recipe::build_corpus(o);
  fmt::print("{}", read_file(fs::path(m.out) / "report.md"));
  fmt::print("corpus: {} files, {:.2f} MB -> {}/corpus.jsonl ({} benchmark files checked)\n", rep["files"].get<int64_t>(),
             rep["bytes"].get<int64_t>() / 1e6, m.out, rep["benchmark_files"].get<size_t>());
  return 0;
}

}  // namespace mc::cli
