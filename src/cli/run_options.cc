#include "cli/run_options.h"

#include <unistd.h>

#include <algorithm>
#include <sstream>

#include "common/check.h"
#include "eval/toolchain.h"

namespace mc::cli {

std::string default_cache_dir() {
  const char* xdg = getenv("XDG_CACHE_HOME");
  const char* home = getenv("HOME");
  std::string base = xdg && *xdg ? xdg : std::string(home ? home : "/tmp") + "/.cache";
  return base + "/musacoder";
}

std::vector<int> parse_gpus(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  for (std::string t; std::getline(ss, t, ',');) {
    MC_CHECK(!t.empty() && std::all_of(t.begin(), t.end(), ::isdigit),
             "--gpus expects comma-separated indices like 0,1,2, got '", s, "'");
    out.push_back(std::stoi(t));
  }
  MC_CHECK(!out.empty(), "--gpus is empty");
  return out;
}

void add_stop_loops_option(CLI::App* app, int& loop_window) {
  app->add_option("--stop-loops", loop_window,
                  "stop an answer once its last W tokens are one block of at most W/4 tokens repeated (finish_reason "
                  "loop; 0: off)")
      ->capture_default_str();
}

void add_run_options(CLI::App* app, RunOptions& o, bool problems_required) {
  auto* p = app->add_option("--problems", o.problems,
                            "folder of KernelBench problems, or a KernelBench checkout")
                ->envname("MUSACODER_PROBLEMS");
  if (problems_required) p->required();
  app->add_option("--level", o.level, "KernelBench level to use (0: all)")->envname("MUSACODER_LEVEL");
  app->add_option("--precision", o.cfg.precision, "fp32, fp16 or bf16")
      ->capture_default_str()->check(CLI::IsMember({"fp32", "fp16", "bf16"}))
      ->envname("MUSACODER_PRECISION");
  app->add_option("--seed", o.cfg.seed, "seed for weights and inputs")->capture_default_str();
  add_judge_options(app, o);
}

void add_verdict_options(CLI::App* app, RunOptions& o) {
  app->add_option("--trials", o.cfg.trials, "correctness trials")->capture_default_str();
  app->add_option("--allow", o.allow, "relax a legality rule (cublas, cudnn, ...)");
  app->add_flag("--no-timing", [&o](int64_t) { o.cfg.timing = false; }, "skip timing");
  // --reward-lambda and --reward-nu-max: eval's earlier names, kept as aliases for a release.
  app->add_option("--speed-weight,--reward-lambda", o.cfg.reward.lambda, "reward weight of the speedup (lambda)")
      ->capture_default_str();
  app->add_option("--speed-cap,--reward-nu-max", o.cfg.reward.nu_max, "largest paid speedup - 1 (nu_max)")
      ->capture_default_str();
}

void add_judge_options(CLI::App* app, RunOptions& o, const std::string& prefix) {
  app->add_option("--" + prefix + "gpus", o.gpus,
                  "GPU indices as CUDA numbers them (within CUDA_VISIBLE_DEVICES), --lanes judges each")
      ->capture_default_str()->envname("MUSACODER_GPUS");
  app->add_option("--" + prefix + "device", o.device, "judges on cuda, or cpu (tests)")
      ->capture_default_str()->check(CLI::IsMember({"cuda", "cpu"}))->envname("MUSACODER_DEVICE");
  app->add_option("--cache-dir", o.cache_dir, "compile cache and reference timings")->envname("MUSACODER_CACHE_DIR");
  app->add_option("--timing-budget", o.cfg.timing_budget_s, "seconds of timing per callable")
      ->capture_default_str()->envname("MUSACODER_TIMING_BUDGET");
  app->add_option("--trial-timeout", o.cfg.trial_timeout_s, "seconds per correctness trial")
      ->capture_default_str()->envname("MUSACODER_TRIAL_TIMEOUT");
  app->add_option("--compile-workers", o.compile_workers, "compile threads (0: MUSACODER_COMPILE_WORKERS, else half the cores)");
  app->add_option("--spares", o.spares, "warm candidate processes per judge (0: 1 on cpu, 6 on cuda)")
      ->envname("MUSACODER_SPARES");
  app->add_option("--lanes", o.lanes, "judges per GPU: correctness trials of several candidates at once, timing "
                  "alone (0: 1 on cpu, 4 on cuda)")->envname("MUSACODER_LANES");
  app->add_option("--cuda-arch", o.cuda_arch, "compute capability without the dot (default: detect)")
      ->envname("MUSACODER_CUDA_ARCH");
  app->add_option("--backend", o.backend, "the kernels' target: cuda, or musa (Moore Threads; needs mcc and torch_musa)")
      ->capture_default_str()->check(CLI::IsMember({"cuda", "musa"}))->envname("MUSACODER_BACKEND");
  if (prefix.empty()) app->add_flag("--no-progress", o.no_progress, "no progress bars");
}

eval::EvaluatorOptions evaluator_options(RunOptions& o) {
  eval::require_backend(o.backend);
  for (const auto& a : o.allow) o.cfg.allow.insert(a);
  eval::EvaluatorOptions eo;
  eo.gpus = parse_gpus(o.gpus);
  eo.device = o.device;
  eo.cache_dir = o.cache_dir.empty() ? default_cache_dir() : o.cache_dir;
  eo.compile_workers = o.compile_workers;
  eo.sandbox = !o.no_sandbox;
  eo.sandbox_exe = self_exe();
  eo.cuda_arch = o.cuda_arch;
  eo.progress = !o.no_progress;
  eo.skip_static = o.skip_static;
  eo.spares = o.spares;
  eo.lanes = o.lanes;
  eo.prepare_toolchain = o.prepare_toolchain;
  return eo;
}

std::unique_ptr<eval::Evaluator> make_evaluator(RunOptions& o) {
  auto eo = evaluator_options(o);
  return std::make_unique<eval::Evaluator>(o.cfg, eo);
}

}  // namespace mc::cli
