// Option groups shared by the subcommands that run MooreEval: each group is declared once, here.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "common/home.h"  // self_exe()
#include "eval/eval_config.h"
#include "eval/evaluator.h"

namespace mc::cli {

struct RunOptions {
  std::string problems;          // folder of KernelBench problems (or a checkout)
  int level = 0;                 // 0: every level found
  std::string solutions;         // folder or .jsonl of candidates
  std::string gpus = "0";        // comma-separated GPU indices, one judge each
  std::string device = "cuda";   // cuda | cpu (cpu: tests without a GPU)
  std::string out;               // JSONL results ("" : none)
  std::string cache_dir;         // compile cache, reference timings
  int compile_workers = 0;       // 0: half the cores
  bool no_sandbox = false;       // run candidates without sandbox-exec (debugging only)
  bool no_progress = false;
  bool skip_static = false;
  int spares = 0;                // warm candidate processes per judge (0: default)
  int lanes = 0;                 // judges per GPU (0: default)
  std::string backend = "cuda";  // cuda | musa (refused until MooreEval's MUSA judge exists)
  bool prepare_toolchain = false;  // start building the precompiled header at once
  std::string cuda_arch;         // "" : detect
  std::vector<std::string> allow;
  eval::EvalConfig cfg;
};

std::string default_cache_dir();  // $XDG_CACHE_HOME/musacoder or ~/.cache/musacoder
std::vector<int> parse_gpus(const std::string& s);
// What a command that judges a set of problems takes (eval, baseline, selftest, serve): --problems
// --level --precision --seed and the judges' options below. --problems is required unless
// `problems_required` is false.
void add_run_options(CLI::App* app, RunOptions& o, bool problems_required = true);
// How a verdict and its reward are made (eval, serve): --trials --allow --no-timing --speed-weight
// --speed-cap.
void add_verdict_options(CLI::App* app, RunOptions& o);
// --stop-loops W of every command that samples (gen::SamplingParams::loop_window,
// generate/repetition.h).
void add_stop_loops_option(CLI::App* app, int& loop_window);
// The in-process judges of every command that judges (the above, and rft, bench-model, train
// rl): --gpus --device --cache-dir --timing-budget --trial-timeout --compile-workers --spares
// --lanes --cuda-arch --backend, and --no-progress. A command whose own --device and
// --no-progress are another part's (train rl's policy) gives `prefix` "verify-": the judges'
// are then --verify-gpus and --verify-device, and the command declares --no-progress itself.
void add_judge_options(CLI::App* app, RunOptions& o, const std::string& prefix = "");
eval::EvaluatorOptions evaluator_options(RunOptions& o);
std::unique_ptr<eval::Evaluator> make_evaluator(RunOptions& o);

}  // namespace mc::cli
