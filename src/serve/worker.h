// `musacoder worker`: takes jobs from the Redis Streams queue (redis_queue.h) and runs one
// stage of MooreEval's pipeline on them.
//   role compile: extract + static check + compile (CPU machines). Final verdicts reached here
//                 (extract, static, compile errors, compile-only jobs) are stored directly;
//                 otherwise the built modules go to Redis and the job to the GPU stream.
//   role gpu:     one thread per lane of each GPU: fetch the modules, run the judge, store the
//                 result. Lanes share the GPU for correctness trials and time alone; a job
//                 preempted beside other lanes goes to the back of the queue, to be judged alone.
// Deterministic failures are results; infrastructure failures leave the entry unacknowledged
// so it is delivered again (to any worker) until the delivery limit sends it to dead letters.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "serve/redis_queue.h"

namespace mc::serve {

struct WorkerOptions {
  std::string redis_url = "redis://127.0.0.1:6379";
  QueueOptions queue;
  std::string role = "compile";   // compile | gpu
  std::string name;               // consumer name ("" : host-pid)
  int threads = 0;                // compile: distinct builds at once (0: cores/2); gpu: one per lane
  std::vector<int> gpus = {0};
  int lanes = 0;                  // gpu role: judges per GPU (0: 1 on cpu, 4 on cuda), lanes.py
  std::string device = "cuda";    // gpu role: cuda, or cpu (judges on the CPU, for tests)
  std::string cache_dir;
  std::string cuda_arch;          // "" : detect
  bool sandbox = true;
  std::string sandbox_exe;        // the musacoder binary
  double heartbeat_s = 2.0;
  int block_ms = 1000;
};

// Runs until `stop` is set (it finishes the jobs in hand first). Returns the number of jobs
// this worker completed (result stored or forwarded).
long long run_worker(const WorkerOptions& opts, const std::atomic<bool>& stop);

}  // namespace mc::serve
