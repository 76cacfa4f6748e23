// Stage 4-7 driver: one persistent judge process (python/musacoder_harness/judge.py) per GPU.
// The judge owns the reference, the comparison and the clock; it runs each candidate in its
// own sandboxed process. This class restarts a judge that crashes or hangs and turns such
// events into infrastructure errors, never into a candidate's score.
// Not thread-safe: one thread drives one Executor.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/subprocess.h"

namespace mc::eval {

struct ExecutorOptions {
  std::string device = "cuda";   // "cuda" or "cpu" (CPU mode exists for tests without a GPU)
  int gpu = 0;                   // GPU index as this process sees it (visible_gpu: the judge's device)
  std::string python = "python3";
  std::string harness_dir;       // holds the musacoder_harness package
  std::string cache_dir;         // reference timings are cached under it
  std::string scratch_dir;       // candidate scratch folders are created under it
  std::string sandbox_exe;       // the musacoder binary (runs `sandbox-exec`); empty: no sandbox
  double startup_timeout_s = 300;
  int spares = 3;                // warm candidate processes the judge keeps ready
  std::string timing_gate;       // "": none; else timing waits while this file exists
  // Lanes: several judges share one GPU for correctness, timing has it to itself. The gate file
  // (one per GPU, shared by its lanes' judges; python/musacoder_harness/lanes.py) and the
  // number of lanes, which divides the free memory a judge plans with.
  std::string gpu_lock;
  int lanes = 1;
  // torch's CPU threads in the judge and its candidate processes (OMP_NUM_THREADS); 0: torch's
  // own default, a thread per core in every process (default_judge_threads).
  int cpu_threads = 0;
  // A standby judge starts no candidate process until its first request (a lane that is
  // started but judges only while the GPU's working lanes are all held up; evaluator.cc).
  bool standby = false;
};

// The device CUDA calls `gpu` in this process, as the judge's CUDA_VISIBLE_DEVICES: the
// gpu-th entry of this process's CUDA_VISIBLE_DEVICES (an index, a GPU-/MIG- UUID) where that is
// set, else the index itself. Under SLURM or torchrun, where CUDA_VISIBLE_DEVICES=4,5 say, GPU 0
// is the machine's GPU 4, and a judge started with CUDA_VISIBLE_DEVICES=0 would time on another
// job's GPU. Throws mc::Error when `gpu` is not visible.
std::string visible_gpu(int gpu);

// Judges per GPU: correctness trials of several candidates run at once (a hanging candidate
// holds one lane, not the GPU); on the CPU (tests) one.
int default_lanes(const std::string& device, int requested);

// torch's CPU threads per judge (and per candidate process of it): MUSACODER_JUDGE_THREADS where
// set; else on a GPU the evaluator's share of the cores (its compile workers, half the cores
// alone or what the recipe runner gives a stage beside others) split among its `judges`; on the
// CPU 0, torch's default, since there the judge's own work is the computing. Without a cap every
// judge, spare and candidate process sizes its pool to every core: five RL arms on one 64-core
// host ran some 100 such processes. (Capped, those arms were no faster: their
// host's CPUs were idle, its limit elsewhere; docs/results.md.)
int default_judge_threads(const std::string& device, int compile_workers, int judges);

// Warm candidate processes a judge keeps: starting one (Python, torch, a CUDA context, the
// legality tools) takes seconds, a candidate about one, so a GPU needs several ready.
int default_spares(const std::string& device, int requested);

// Thrown when the verifier itself fails (judge would not start, died, hung).
class InfraError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Executor {
 public:
  explicit Executor(ExecutorOptions opts);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Sends one request; returns the judge's reply ({"ok": true, "result": ...} or
  // {"ok": false, "infra_error": ...}). Starts the judge on first use and restarts it after a
  // crash or a hang (then throws InfraError for this request).
  nlohmann::json call(nlohmann::json req, double timeout_s);

  // Starts the judge now if it is not running (throws InfraError like call()). The judge's
  // start (Python, torch, a CUDA context, the zygote) takes seconds: started while the first
  // candidates still compile, it is ready when they are.
  void ensure_started();

  const std::string& gpu_name() const { return gpu_name_; }
  const std::string& torch_version() const { return torch_version_; }
  int restarts() const { return restarts_; }

 private:
  void start();
  ExecutorOptions opts_;
  std::unique_ptr<Subprocess> judge_;
  std::string gpu_name_, torch_version_;
  int next_id_ = 1, restarts_ = 0;
};

}  // namespace mc::eval
