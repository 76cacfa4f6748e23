#include "cli/synth_command.h"

#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "cli/run_options.h"
#include "common/check.h"
#include "common/fs.h"
#include "synth/op_library.h"
#include "synth/synthesizer.h"

namespace mc::cli {

struct SynthCommand::Impl {
  CLI::App* cmd = nullptr;
  RunOptions run;  // evaluator settings (GPUs, device, cache)
  synth::SynthOptions o;
  std::string levels = "1,2,3", weights, api_key_env = "OPENAI_API_KEY";
  bool list_ops = false;
};

SynthCommand::SynthCommand(CLI::App& app) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.run.cfg.timing_budget_s = 0.5;  // a speedup for the dataset, not a leaderboard figure
  auto* s = m.cmd = app.add_subcommand("synth", "synthesize KernelBench-format problems with verified CUDA solutions");
  s->add_option("--levels", m.levels, "levels to generate, e.g. 1,2,3")->capture_default_str();
  s->add_option("--count", m.o.count, "problems to keep, spread over the levels")->capture_default_str();
  s->add_option("--out", m.o.out_dir, "output folder");
  s->add_flag("--list-ops", m.list_ops, "print the op library (name, family, level-1, level-2 anchor) and exit");
  s->add_option("--seed", m.o.seed, "generation seed (same seed, same problems)")->capture_default_str();
  s->add_option("--decontaminate", m.o.decontaminate_dirs,
                 "benchmark folder (e.g. a KernelBench checkout) to keep clear of; repeat it for several");
  s->add_option("--teacher", m.o.teacher, "builtin, none, or an OpenAI-compatible URL")->capture_default_str();
  s->add_option("--teacher-model", m.o.teacher_model, "model name for an LLM teacher");
  s->add_option("--teacher-samples", m.o.teacher_samples, "LLM answers per problem")->capture_default_str();
  s->add_option("--teacher-turns", m.o.teacher_turns, "LLM repair turns after a failed answer")->capture_default_str();
  s->add_option("--teacher-concurrency", m.o.teacher_concurrency, "LLM requests in flight")->capture_default_str();
  s->add_option("--teacher-api-key-env", m.api_key_env, "environment variable holding the endpoint's key")->capture_default_str();
  s->add_option("--weights", m.weights, "TOML file weighting op families and ops");
  s->add_option("--formats", m.o.formats, "teacher solution formats: native, kernelbench or both")->capture_default_str();
  s->add_option("--prompt", m.o.prompt,
                "the prompt of a kernelbench-format task in the dataset and problems.jsonl: musacoder (synth's task "
                "prompt) or kernelbench (KernelBench's own one-shot prompt, what bench-model --prompt kernelbench asks)")
      ->capture_default_str()
      ->check(CLI::IsMember({"musacoder", "kernelbench"}));
  s->add_option("--verify", m.o.verify, "gpu (full MooreEval), compile (compile only) or none")->capture_default_str();
  s->add_flag("--no-probe", [&m](int64_t) { m.o.probe = false; }, "skip the validity probe (reference execution)");
  s->add_option("--min-eager-us", m.o.min_eager_us, "drop problems faster than this in eager PyTorch")->capture_default_str();
  s->add_option("--max-eager-us", m.o.max_eager_us, "drop problems slower than this in eager PyTorch")->capture_default_str();
  s->add_option("--oversample", m.o.oversample, "candidates generated per problem to keep")->capture_default_str();
  s->add_option("--max-per-structure", m.o.max_per_structure, "problems sharing one op structure")->capture_default_str();
  s->add_option("--timing-budget", m.run.cfg.timing_budget_s, "seconds of timing per callable when verifying")
      ->capture_default_str();
  s->add_option("--backend", m.o.backend,
                "cuda, or musa: solutions verified as CUDA, then ported to MUSA (docs/musa.md)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cuda", "musa"}));
  s->add_option("--order", m.o.order, "dataset order: curriculum (by difficulty) or generation")->capture_default_str();
  s->add_option("--gpus", m.run.gpus, "GPU indices as CUDA numbers them (within CUDA_VISIBLE_DEVICES), --lanes judges each")->capture_default_str()->envname("MUSACODER_GPUS");
  s->add_option("--device", m.run.device, "cuda, or cpu to run judges on the CPU (tests)")
      ->capture_default_str()->check(CLI::IsMember({"cuda", "cpu"}))->envname("MUSACODER_DEVICE");
  s->add_option("--cache-dir", m.run.cache_dir, "compile cache and reference timings")->envname("MUSACODER_CACHE_DIR");
  s->add_option("--spares", m.run.spares, "warm candidate processes per judge")->envname("MUSACODER_SPARES");
  s->add_option("--cuda-arch", m.run.cuda_arch, "compute capability without the dot (default: detect)")
      ->envname("MUSACODER_CUDA_ARCH");
  s->add_flag("--no-progress", m.run.no_progress, "no progress bars");
}

SynthCommand::~SynthCommand() = default;

std::optional<int> SynthCommand::run() {
  Impl& m = *impl_;
  if (!*m.cmd) return std::nullopt;
  if (m.list_ops) {
    for (const auto& [name, d] : synth::op_library())
      fmt::print("{:<22}{:<13}{:<8}{}\n", name, d.family, d.fresh ? "level1" : "-", d.anchor ? "anchor" : "-");
    return 0;
  }
  MC_CHECK(!m.o.out_dir.empty(), "synth needs --out DIR");
  m.o.levels.clear();
  for (size_t pos = 0; pos <= m.levels.size();) {
    size_t c = m.levels.find(',', pos);
    std::string part = m.levels.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
    MC_CHECK(part.size() == 1 && part[0] >= '1' && part[0] <= '3', "--levels: '", part, "' is not 1, 2 or 3");
    m.o.levels.push_back(part[0] - '0');
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  if (!m.weights.empty()) {
    MC_CHECK(std::filesystem::is_regular_file(m.weights), "--weights: no file ", m.weights);
    m.o.generator = synth::load_generator_options(m.weights);
  }
  if (const char* key = std::getenv(m.api_key_env.c_str())) m.o.teacher_api_key = key;
  m.o.evaluator = evaluator_options(m.run);
  m.o.eval_config = m.run.cfg;
  m.o.progress = !m.run.no_progress;
  auto rep = synth::run_synthesis(m.o);
  fmt::print("{}", rep.table);
  return 0;
}

}  // namespace mc::cli
