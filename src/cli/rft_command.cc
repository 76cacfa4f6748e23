#include "cli/rft_command.h"

#include <filesystem>
#include <sstream>

#include <fmt/format.h>

#include "cli/run_options.h"
#include "cli/run_record.h"
#include "common/check.h"
#include "rft/rft.h"

namespace mc::cli {

struct RftCommand::Impl {
  CLI::App* cmd = nullptr;
  RunOptions run;  // verifier settings (GPUs, device, cache)
  rft::RftOptions o;
  std::string train_args;
};

RftCommand::RftCommand(CLI::App& app) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  auto* s = m.cmd = app.add_subcommand(
      "rft", "rejection fine-tuning: sample K answers per problem, verify them with MooreEval, keep a diverse set of "
             "correct ones as SFT data (and train on it with --train)");
  s->add_option("--model", m.o.model_dir, "policy: Hugging Face model directory to sample from (and to train with --train)");
  s->add_option("--problems", m.o.problems, "folder of KernelBench problems, or problems.jsonl of musacoder synth")->required();
  s->add_option("--level", m.o.level, "folder problems: this level only (0: all)")->capture_default_str();
  s->add_option("--out", m.o.out_dir, "run folder: samples, verified.jsonl, dataset.jsonl, dropped.jsonl, report")->required();
  s->add_option("--samples", m.o.samples, "answers sampled per problem (K)")->capture_default_str();
  s->add_option("--format", m.o.format, "solution format the prompt asks for: native or kernelbench")
      ->capture_default_str()->check(CLI::IsMember({"native", "kernelbench"}));
  s->add_option("--temperature", m.o.temperature, "sampling temperature")->capture_default_str();
  s->add_option("--top-p", m.o.top_p, "nucleus sampling")->capture_default_str();
  s->add_option("--max-new-tokens", m.o.max_new_tokens, "per answer")->capture_default_str();
  add_stop_loops_option(s, m.o.loop_window);
  s->add_option("--seed", m.o.seed, "sampling seed (per problem: seed + its index)")->capture_default_str();
  s->add_option("--model-device", m.o.model_device, "where the policy runs: auto, cpu, cuda, cuda:N")->capture_default_str();
  s->add_option("--max-batch", m.o.max_batch, "sequences decoded at once")->capture_default_str();
  s->add_option("--samples-from", m.o.samples_from,
                "verify these answers instead of sampling: JSONL {problem, answer, sample_id?}, or an earlier run's samples.jsonl");
  s->add_option("--verifier", m.o.verifier_url, "MooreEval service URL (default: judges in this process); it must "
                "accept problem sources (musacoder serve --allow-inline-problems)")->envname("MUSACODER_VERIFIER");
  s->add_option("--verifier-token", m.o.verifier_token, "bearer token of the service")->envname("MUSACODER_VERIFIER_TOKEN");
  s->add_flag("--judge-twins", m.o.judge_twins, "judge every answer; by default an answer whose text another sample of "
              "the same problem has gets that one's verdict (verified.jsonl rows say twin_of)");
  s->add_option("--cap", m.o.selection.cap_per_problem, "answers kept per problem (0: no cap)")->capture_default_str();
  s->add_option("--near-duplicate", m.o.selection.near_duplicate_jaccard,
                "token-shingle Jaccard at or above which two answers count as one")->capture_default_str();
  s->add_option("--shingle", m.o.selection.shingle_tokens, "tokens per shingle")->capture_default_str();
  s->add_option("--repair-rows", m.o.repair_per_problem,
                "repair conversations per problem (failed answer, MooreEval's feedback, a passing answer) -> repair.jsonl")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  s->add_option("--repair-from", m.o.repair_from,
                "dataset.jsonl of verified answers (synth's or rft's) for problems where no sample passed");
  s->add_flag("--train", m.o.train, "then run `train sft` on the selected answers (into OUT/sft)");
  s->add_option("--train-args", m.train_args, "extra `train sft` options, e.g. \"--epochs 2 --lr 1e-5\"");
  add_judge_options(s, m.run);
}

RftCommand::~RftCommand() = default;

std::optional<int> RftCommand::run() {
  Impl& m = *impl_;
  if (!*m.cmd) return std::nullopt;
  std::istringstream args(m.train_args);
  for (std::string a; args >> a;) m.o.train_args.push_back(a);
  m.o.evaluator = evaluator_options(m.run);
  m.o.evaluator.progress = false;  // rft draws one bar for the whole verification
  m.o.eval_config = m.run.cfg;
  m.o.backend = m.run.backend;
  m.o.progress = !m.run.no_progress;
  m.o.model_exe = (std::filesystem::path(self_exe()).parent_path() / "musacoder-model").string();
  write_run_record(m.o.out_dir, "rft", *m.cmd);
  auto r = rft::run_rft(m.o);
  fmt::print("{}", r.report.table);
  fmt::print("wrote {0}/dataset.jsonl ({1} rows), {0}/dropped.jsonl, {0}/report.json{2}\n", m.o.out_dir, r.dataset_rows,
             r.train_exit >= 0 ? fmt::format(", {}/sft", m.o.out_dir) : "");
  return 0;
}

}  // namespace mc::cli
