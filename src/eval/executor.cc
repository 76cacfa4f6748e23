#include "eval/executor.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <vector>

#include "common/check.h"
#include "common/env.h"
#include "common/fs.h"
#include "common/gpus.h"

namespace mc::eval {

int default_spares(const std::string& device, int requested) {
  if (requested > 0) return requested;
  return device == "cpu" ? 1 : 6;
}

std::string visible_gpu(int gpu) {
  MC_CHECK(gpu >= 0, "GPU index ", gpu, " is negative");
  auto ids = cuda_visible_devices();
  if (!ids) return std::to_string(gpu);
  MC_CHECK(static_cast<size_t>(gpu) < ids->size(), "GPU ", gpu, " is not visible to this process: CUDA_VISIBLE_DEVICES=\"",
           std::getenv("CUDA_VISIBLE_DEVICES"), "\" lists ", ids->size(), " device", ids->size() == 1 ? "" : "s",
           " (GPU indices count from 0 within it)");
  return (*ids)[static_cast<size_t>(gpu)];
}

int default_lanes(const std::string& device, int requested) {
  if (requested > 0) return requested;
  return device == "cpu" ? 1 : 4;
}

int default_judge_threads(const std::string& device, int compile_workers, int judges) {
  if (auto n = env_count("MUSACODER_JUDGE_THREADS", 1, "a number of CPU threads per judge", 4096)) return static_cast<int>(*n);
  if (device == "cpu") return 0;
  return std::max(1, compile_workers / std::max(1, judges));
}

Executor::Executor(ExecutorOptions opts) : opts_(std::move(opts)) {}

Executor::~Executor() {
  if (!judge_) return;
  judge_->close_stdin();  // at EOF the judge signals its candidate processes, says "stopped", exits
  // Once it has said so, its own exit (its CUDA context torn down, beside those of its killed
  // processes: ~1 s with four lanes on the H100) is not waited for. Without the word in time,
  // the judge is killed and waited for, as before.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (int left_ms = 10000; left_ms > 0;) {
    auto line = judge_->read_line(left_ms);
    if (!line) break;
    if (line->find("\"op\": \"stopped\"") != std::string::npos) {
      judge_->abandon();
      return;
    }
    left_ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   deadline - std::chrono::steady_clock::now()).count());
  }
  judge_->wait(0);
}

void Executor::start() {
  fs::create_directories(opts_.scratch_dir);
  SubprocessOptions o;
  o.argv = {opts_.python, "-m", "musacoder_harness.judge",
            "--device", opts_.device == "cpu" ? "cpu" : "cuda:0",
            "--scratch", opts_.scratch_dir, "--cache-dir", opts_.cache_dir,
            "--harness-dir", opts_.harness_dir};
  if (!opts_.sandbox_exe.empty()) {
    o.argv.push_back("--sandbox-exe");
    o.argv.push_back(opts_.sandbox_exe);
  }
  o.argv.push_back("--spares");
  o.argv.push_back(std::to_string(opts_.spares));
  if (!opts_.gpu_lock.empty()) {
    o.argv.insert(o.argv.end(), {"--gpu-lock", opts_.gpu_lock, "--lanes", std::to_string(opts_.lanes)});
  }
  if (opts_.standby) o.argv.push_back("--standby");
  if (!opts_.timing_gate.empty()) {
    o.argv.push_back("--timing-gate");
    o.argv.push_back(opts_.timing_gate);
  }
  o.env_set["PYTHONPATH"] = opts_.harness_dir;
  o.env_set["PYTHONUNBUFFERED"] = "1";
  o.env_set["PYTHONDONTWRITEBYTECODE"] = "1";
  if (opts_.device != "cpu") o.env_set["CUDA_VISIBLE_DEVICES"] = visible_gpu(opts_.gpu);
  if (opts_.cpu_threads > 0)  // torch reads them at start; spares and candidates inherit them
    o.env_set["OMP_NUM_THREADS"] = o.env_set["MKL_NUM_THREADS"] = std::to_string(opts_.cpu_threads);
  o.pipe_stdin = true;
  o.stderr_file = (fs::path(opts_.scratch_dir) / "judge.log").string();
  judge_ = std::make_unique<Subprocess>(o);
  bool timed_out = false;
  auto line = judge_->read_line(static_cast<int>(opts_.startup_timeout_s * 1000), &timed_out);
  auto fail = [&](const std::string& why) {
    std::string log;
    try {
      log = read_file(o.stderr_file);
    } catch (const Error&) {
    }
    if (log.size() > 1500) log = log.substr(log.size() - 1500);
    judge_.reset();
    throw InfraError("judge on GPU " + std::to_string(opts_.gpu) + " " + why + "; log: " + log);
  };
  if (!line) fail(timed_out ? "did not start in time" : "exited at start");
  nlohmann::json hello;
  try {
    hello = nlohmann::json::parse(*line);
  } catch (const std::exception&) {
    fail("sent an unreadable greeting: " + line->substr(0, 200));
  }
  if (!hello.value("ok", false)) fail("could not start: " + hello.value("error", std::string("?")));
  gpu_name_ = hello.value("gpu", "");
  torch_version_ = hello.value("torch_version", "");
}

void Executor::ensure_started() {
  if (!judge_ || !judge_->running()) {
    if (judge_) ++restarts_;
    start();
  }
}

nlohmann::json Executor::call(nlohmann::json req, double timeout_s) {
  ensure_started();
  int id = next_id_++;
  req["id"] = id;
  if (!judge_->write_stdin(req.dump() + "\n")) {
    judge_.reset();
    throw InfraError("judge closed its input (it died)");
  }
  while (true) {
    bool timed_out = false;
    auto line = judge_->read_line(static_cast<int>(timeout_s * 1000), &timed_out);
    if (!line) {
      std::string what = timed_out ? "did not answer within " + std::to_string(int(timeout_s)) + " s"
                                   : "died (" + judge_->wait(5000).describe() + ")";
      judge_.reset();  // kills the judge's process group, candidates included
      throw InfraError("judge " + what);
    }
    nlohmann::json reply;
    try {
      reply = nlohmann::json::parse(*line);
    } catch (const std::exception&) {
      continue;  // not a reply line
    }
    if (reply.value("id", -1) != id) continue;  // stale reply of an abandoned request
    if (!reply.value("ok", false) && !judge_->running()) judge_.reset();
    // The judge holds memory it cannot give back (shared with candidates that died holding it):
    // replaced by a fresh one before the next request (judge.py, Judge.check_leak).
    if (judge_ && reply.contains("restart")) {
      judge_.reset();
      ++restarts_;
    }
    return reply;
  }
}

}  // namespace mc::eval
