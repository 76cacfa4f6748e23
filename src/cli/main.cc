// musacoder: one binary, one subcommand per job. Each option is declared once, with its help,
// default and environment mirror (MUSACODER_*); errors stop at this boundary with exit code 2.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "common/check.h"
#include "common/fs.h"
#include "eval/candidates.h"
#include "eval/compile_pool.h"
#include "eval/toolchain.h"
#include "eval/evaluator.h"
#include "eval/extract.h"
#include "eval/problem.h"
#include "eval/result.h"
#include "eval/sandbox.h"
#include "eval/static_check.h"
#include "eval/summary.h"
#include "cli/plot_command.h"
#include "cli/run_options.h"
#include "cli/corpus_command.h"
#include "cli/port_bench_command.h"
#include "cli/recipe_command.h"
#include "cli/run_record.h"
#include "cli/port_command.h"
#include "cli/selftest_command.h"
#include "cli/serve_commands.h"
#include "cli/rft_command.h"
#include "cli/bench_command.h"
#include "cli/synth_command.h"
#include "cli/tokenize_command.h"

namespace {

using namespace mc;
using namespace mc::eval;
using namespace mc::cli;

int cmd_eval(RunOptions& o) {
  auto problems = load_problems(o.problems, o.level);
  std::vector<Candidate> cands = load_candidates(o.solutions, problems);
  // Problems with no candidate still get a row: fast_p counts them as failures.
  std::set<std::string> covered;
  for (const auto& c : cands)
    if (c.problem) covered.insert(c.problem->key);
  for (const auto& p : problems) {
    if (covered.count(p->key)) continue;
    Candidate c;
    c.problem = p;
    c.problem_ref = p->key;
    c.input_error = "no solution for this problem";
    c.origin = o.solutions;
    cands.push_back(c);
  }
  auto ev = make_evaluator(o);
  std::unique_ptr<std::ofstream> out;
  if (!o.out.empty()) {
    if (fs::path(o.out).has_parent_path()) fs::create_directories(fs::path(o.out).parent_path());
    out = std::make_unique<std::ofstream>(o.out);
    MC_CHECK(out->good(), "cannot write ", o.out);
  }
  auto results = ev->run(cands, [&](const EvalResult& r) {
    if (out) {
      *out << to_json(r).dump() << "\n";
      out->flush();  // a crash later loses nothing already judged
    }
  });
  Summary s = summarize(results);
  fmt::print("{}", format_summary(s));
  if (out) fmt::print("results: {} ({} rows)\n", o.out, results.size());
  return 0;
}

int cmd_check(const std::string& solution, const std::string& precision,
              const std::vector<std::string>& allow, bool json_out) {
  std::string text = read_file(solution);
  Extraction ex = extract_solution(text);
  if (!ex.ok) {
    fmt::print(stderr, "{}: {}\n", solution, ex.error);
    return 2;
  }
  StaticCheckOptions so;
  so.precision = precision;
  so.allow = std::set<std::string>(allow.begin(), allow.end());
  auto violations = static_check(ex.code, ex.format, so);
  if (json_out) {
    nlohmann::json j = {{"solution", solution}, {"format", to_string(ex.format)},
                        {"violations", nlohmann::json::array()}};
    for (const auto& v : violations)
      j["violations"].push_back({{"rule", v.rule}, {"line", v.line}, {"message", v.message},
                                 {"snippet", v.snippet}});
    fmt::print("{}\n", j.dump(2));
  } else if (violations.empty()) {
    fmt::print("{}: {} solution, no rule fired\n", solution, to_string(ex.format));
  } else {
    fmt::print("{}: {} rule(s) fired\n", solution, violations.size());
    for (const auto& v : violations)
      fmt::print("  line {:>4}  [{}] {}\n             {}\n", v.line, v.rule, v.message, v.snippet);
  }
  return violations.empty() ? 0 : 1;
}

int cmd_baseline(RunOptions& o, bool with_compile) {
  auto problems = load_problems(o.problems, o.level);
  auto ev = make_evaluator(o);
  auto res = ev->baseline(problems, with_compile);
  std::string out = o.out.empty() ? "baseline_time_torch.json" : o.out;
  write_file_atomic(out, res["eager"].dump(4));
  if (with_compile) {
    std::string cpath = out;
    auto dot = cpath.rfind(".json");
    cpath = (dot == std::string::npos ? cpath : cpath.substr(0, dot)) + "_compile.json";
    write_file_atomic(cpath, res["compile"].dump(4));
    fmt::print("torch.compile timings: {}\n", cpath);
  }
  fmt::print("{:<40}{:>14}\n", "problem", "eager ms");
  for (auto& [level, files] : res["eager"].items())
    for (auto& [file, t] : files.items())
      fmt::print("{:<40}{:>14.4f}\n", level + "/" + file, t["median"].get<double>());
  for (auto& [k, e] : res["errors"].items()) fmt::print(stderr, "error {}: {}\n", k, e.dump());
  fmt::print("eager timings: {} (KernelBench baseline schema, ms)\n", out);
  return res["errors"].empty() ? 0 : 1;
}

// Builds what KernelBench-format compiles use once per toolchain (the precompiled header, the
// torch shim's bridge), so that even the first candidate compiled from this cache finds them.
int cmd_prepare(const std::string& cache_dir) {
  auto t0 = std::chrono::steady_clock::now();
  CompilePoolOptions po;
  po.workers = 1;
  po.cache_dir = cache_dir;
  CompilePool pool(discover_toolchain(), po);
  std::string why = pool.prepare();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!why.empty()) {
    fmt::print(stderr, "musacoder prepare: {}\n", why);
    return 1;
  }
  fmt::print("precompiled torch header and torch shim bridge ready in {} ({:.1f} s)\n", cache_dir, s);
  return 0;
}

}  // namespace

// `musacoder sandbox-exec --scratch DIR [--require-all] [--fork-server] -- CMD...` (internal,
// used by the judge; --fork-server for the zygote, see SandboxOptions). Parsed by hand:
// everything after -- belongs to CMD, untouched.
int sandbox_main(int argc, char** argv) {
  SandboxOptions so;
  int i = 2;
  for (; i < argc && std::string(argv[i]) != "--"; ++i) {
    std::string a = argv[i];
    if (a == "--scratch" && i + 1 < argc) so.scratch = argv[++i];
    else if (a == "--require-all") so.require_all = true;
    else if (a == "--fork-server") so.fork_server = true;
    else {
      fmt::print(stderr, "musacoder sandbox-exec: unknown argument '{}'\n"
                 "usage: musacoder sandbox-exec --scratch DIR [--require-all] [--fork-server] -- CMD...\n", a);
      return 2;
    }
  }
  std::vector<std::string> cmd(argv + std::min(i + 1, argc), argv + argc);
  try {
    MC_CHECK(!so.scratch.empty(), "sandbox-exec needs --scratch DIR");
    sandbox_exec(so, cmd);
  } catch (const std::exception& e) {
    fmt::print(stderr, "musacoder sandbox-exec: {}\n", e.what());
  }
  return 2;
}

// The policy-model commands run in musacoder-model (next to this binary), the only executable
// that loads libtorch.
const char* const kModelCommands[] = {"generate", "score", "convert", "init", "serve-model", "train"};

int model_main(int argc, char** argv) {
  std::string exe = (std::filesystem::path(self_exe()).parent_path() / "musacoder-model").string();
  if (access(exe.c_str(), X_OK) != 0) {
    fmt::print(stderr, "musacoder: error: '{}' needs {} (this build has no libtorch: configure with "
               "-DMUSACODER_WITH_TORCH=ON)\n", argv[1], exe);
    return 2;
  }
  execv(exe.c_str(), argv);
  fmt::print(stderr, "musacoder: error: cannot run {}: {}\n", exe, strerror(errno));
  return 2;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "sandbox-exec") return sandbox_main(argc, argv);
  mc::cli::set_command_line(argc, argv);
  for (const char* c : kModelCommands)
    if (argc > 1 && std::string(argv[1]) == c) return model_main(argc, argv);
  CLI::App app{"MusaCoder: verify, score and train models that write GPU kernels"};
  app.footer(
      "Policy-model commands (libtorch; `musacoder COMMAND --help`):\n"
      "  generate                    sample completions from a Qwen2/Qwen3 model (JSONL with tokens, text, log-probs)\n"
      "  score                       per-token log-probs of given sequences (what RL ratios need)\n"
      "  convert                     re-save a model directory (dtype, shards), or import a GGUF file (--from-gguf)\n"
      "  serve-model                 OpenAI-compatible /v1/completions and /v1/chat/completions\n"
      "  train sft                   supervised fine-tuning (one GPU, or many under torchrun / SLURM)");
  app.require_subcommand(1);

  RunOptions eval_opts;
  auto* eval = app.add_subcommand("eval", "verify and time candidate solutions against their problems");
  add_run_options(eval, eval_opts);
  eval->add_option("--solutions", eval_opts.solutions, "folder or .jsonl of candidate solutions")
      ->required()->envname("MUSACODER_SOLUTIONS");
  eval->add_option("--out", eval_opts.out, "JSONL results, one row per candidate")
      ->envname("MUSACODER_OUT");
  add_verdict_options(eval, eval_opts);
  eval->add_option("--load-timeout", eval_opts.cfg.load_timeout_s, "seconds to import and construct")
      ->capture_default_str()->envname("MUSACODER_LOAD_TIMEOUT");
  eval->add_flag("--skip-static", eval_opts.skip_static,
                 "skip static legality (to test the run-time defenses alone; not for scoring)");
  eval->add_flag("--no-sandbox", eval_opts.no_sandbox, "run candidates unsandboxed (debugging only)");
  eval->add_option("--speedup-review-bound", eval_opts.cfg.speedup_review_bound,
                   "speedups above this are flagged, not paid")->capture_default_str();

  std::string check_solution, check_precision = "fp32";
  std::vector<std::string> check_allow;
  bool check_json = false;
  auto* check = app.add_subcommand("check", "static legality report for one solution (no GPU)");
  check->add_option("solution", check_solution, "solution file (source or a model's answer)")->required();
  check->add_option("--precision", check_precision, "fp32, fp16 or bf16")->capture_default_str();
  check->add_option("--allow", check_allow, "relax a rule");
  check->add_flag("--json", check_json, "JSON output");
  bool list_rules = false;
  check->add_flag("--list-rules", list_rules, "print every rule and exit");

  RunOptions base_opts;
  bool base_compile = false;
  auto* base = app.add_subcommand("baseline", "time eager PyTorch (and torch.compile) per problem");
  add_run_options(base, base_opts);
  base->add_option("--out", base_opts.out, "KernelBench-schema JSON (default baseline_time_torch.json)");
  base->add_flag("--compile", base_compile, "also time torch.compile");

  std::string prep_cache;
  auto* prep = app.add_subcommand("prepare", "build this machine's toolchain artifacts (precompiled torch header, torch shim bridge) once");
  prep->add_option("--cache-dir", prep_cache, "cache folder to prepare")->envname("MUSACODER_CACHE_DIR");

  ServeCommands serve_cmds(app);
  SynthCommand synth_cmd(app);
  RftCommand rft_cmd(app);
  BenchCommand bench_cmd(app);
  TokenizeCommand tokenize_cmd(app);
  SelftestCommand selftest_cmd(app);
  PortCommand port_cmd(app);
  PortBenchCommand port_bench_cmd(app);
  CorpusCommand corpus_cmd(app);
  RecipeCommand recipe_cmd(app);
  PlotCommand plot_cmd(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (auto rc = serve_cmds.run()) return *rc;
    if (auto rc = synth_cmd.run()) return *rc;
    if (auto rc = rft_cmd.run()) return *rc;
    if (auto rc = bench_cmd.run()) return *rc;
    if (auto rc = tokenize_cmd.run()) return *rc;
    if (auto rc = selftest_cmd.run()) return *rc;
    if (auto rc = port_cmd.run()) return *rc;
    if (auto rc = port_bench_cmd.run()) return *rc;
    if (auto rc = corpus_cmd.run()) return *rc;
    if (auto rc = recipe_cmd.run()) return *rc;
    if (auto rc = plot_cmd.run()) return *rc;
    if (*eval) return cmd_eval(eval_opts);
    if (*check) {
      if (list_rules) {
        for (const auto& [id, msg] : static_rule_catalog()) fmt::print("{:<22}{}\n", id, msg);
        return 0;
      }
      return cmd_check(check_solution, check_precision, check_allow, check_json);
    }
    if (*base) return cmd_baseline(base_opts, base_compile);
    if (*prep) return cmd_prepare(prep_cache.empty() ? default_cache_dir() : prep_cache);
  } catch (const std::exception& e) {
    fmt::print(stderr, "musacoder: error: {}\n", e.what());
    return 2;
  }
  return 0;
}
