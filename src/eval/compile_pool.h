// Stage 3: compile candidates on a CPU pool, apart from the GPU executors, into a
// content-addressed cache. Key: sources, flags, GPU arch, nvcc and torch versions. Compile
// errors are cached too (they are deterministic); infrastructure failures are not.
//
// KernelBench candidates are built as load_inline would build them, faster:
//   - first against the torch shim (torch_shim/): no ATen headers, no per-candidate pybind11
//     binding; a bridge built once per toolchain calls the candidate's functions through a C
//     ABI (include/musacoder/torch_shim_abi.h). About 2 CPU-seconds instead of ~20;
//   - when a source needs more of libtorch than the shim has, as below:
//   - the C++/binding unit includes a precompiled <torch/extension.h> once it exists (built
//     once per toolchain, in the background: until it is ready, units compile without it,
//     which costs CPU time but no latency, as the CUDA unit takes as long);
//   - the CUDA unit first tries a light stand-in for <torch/extension.h> (lite_headers/), and
//     only if that fails, the real headers; so results never depend on the stand-in;
//   - both units compile in parallel, and identical builds are shared (in-process and through
//     the cache across processes).
// Thread-safe: submit() from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "eval/extract.h"
#include "eval/python_source.h"
#include "eval/toolchain.h"

namespace mc::eval {

struct CompileRequest {
  SolutionFormat format = SolutionFormat::kKernelBench;
  std::string native_source;           // kNative: the .cu source
  std::vector<LoadInlineCall> calls;   // kKernelBench: every load_inline call of the candidate
};

struct CompiledModule {
  // LoadInlineCall::source_key(), the native source's digest, or kShimBridgeKey for the
  // bridge that shim-built modules are loaded through
  std::string source_key;
  std::string module_name;  // load_inline's `name` (native: "native")
  std::string so_path;
};

inline constexpr const char* kShimBridgeKey = "mc_shim_bridge";

struct CompileOutcome {
  enum class Status { kOk, kCompileError, kInfraError };
  Status status = Status::kInfraError;
  std::vector<CompiledModule> modules;
  bool cached = false;   // every module came from the cache
  double seconds = 0;    // wall clock spent compiling for this request (0 when cached)
  std::string log;       // compiler output of the failing step, trimmed to the relevant lines
  std::string error;     // infra: what broke
};

// Half the cores this process may run on (its CPU affinity; at least 1): one command's compile workers when it runs alone.
int half_the_cores();

// MUSACODER_COMPILE_WORKERS where it is set (the recipe sets each stage's share when several
// run side by side), else half_the_cores(). A value that is not a number >= 1 is an error.
int default_compile_workers();

struct CompilePoolOptions {
  int workers = 0;             // 0: default_compile_workers() (each job runs two compilers at once)
  std::string cache_dir;       // root of the content-addressed cache
  double timeout_s = 600;      // per compiler invocation
  // How long a compiler may run on after it has reported an error. Its verdict is already a
  // compile error, and cudafe++ (CUDA 13.0) loops forever after some syntax errors, e.g. a
  // model's `__shared__ float[ITEM, float Bs[16][65];` followed by another kernel: in an RFT
  // run on the H100 that one answer held a compile worker for the whole limit. A compiler that
  // reported no error runs to `timeout_s`, so no honest build is cut short.
  double stuck_after_error_s = 15;
};

class CompilePool {
 public:
  CompilePool(Toolchain toolchain, CompilePoolOptions opts);
  ~CompilePool();  // finishes running jobs, drops queued ones
  CompilePool(const CompilePool&) = delete;
  CompilePool& operator=(const CompilePool&) = delete;

  // Queued by `priority` (lower first), in arrival order among equals.
  std::shared_future<CompileOutcome> submit(const CompileRequest& req, int64_t priority = 0);
  // Runs a request on the calling thread (used by `musacoder check --compile` and tests).
  CompileOutcome compile_now(const CompileRequest& req);

  const Toolchain& toolchain() const { return tc_; }

  // The precompiled header (built once per toolchain, kept in the cache) makes every later
  // KernelBench-format compile seconds faster. prepare() builds it now and waits (returns ""
  // or why it could not be built); start_preparing() does it in the background, so a service's
  // first candidates already find it.
  std::string prepare();
  void start_preparing();

  // The shim tier's bridge (a Python extension against this machine's libtorch), built once
  // per toolchain; "" when it cannot be built (the shim tier is then skipped). Blocks while
  // another thread builds it.
  std::string shim_bridge();
  struct Load {
    size_t workers = 0, busy = 0, queued = 0;
  };
  Load load() const;

 private:
  struct Built {
    bool ok = false, cached = false, infra = false;
    double seconds = 0;
    std::string so_path, log, error;
    nlohmann::json steps = nlohmann::json::object();  // seconds per step, for diagnosis
  };
  Built build_native(const std::string& source);
  Built build_extension(const LoadInlineCall& call);
  // The shim tier in `dir`: ok with so_path set, or not ok (the caller falls back).
  Built build_shim(const LoadInlineCall& call, const std::string& dir);
  // `nvcc -c cuda.cu -o cuda.o` as load_inline runs it, with `first` and `common` flags.
  std::vector<std::string> nvcc_unit_cmd(const LoadInlineCall& call, const std::vector<std::string>& first,
                                         const std::vector<std::string>& common) const;
  Built build_cached(const std::string& key, const std::string& so_name,
                     const std::function<Built(const std::string& dir)>& build);
  // Folder holding torch_ext.h(.gch) when the precompiled header is ready, else "" (and its
  // build is started in the background on first call).
  std::string pch_if_ready();
  void build_pch();
  void worker_loop();

  Toolchain tc_;
  CompilePoolOptions opts_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  size_t busy_ = 0;
  std::deque<std::pair<int64_t, std::function<void()>>> queue_;  // (priority, job), lowest first
  std::map<std::string, std::shared_future<CompileOutcome>> inflight_;
  std::vector<std::thread> threads_;
  bool stop_ = false;
  std::once_flag pch_once_;
  std::thread pch_thread_;
  std::atomic<bool> pch_ready_{false};
  std::atomic<bool> pch_done_{false};  // build finished, with or without success
  std::thread prepare_thread_;
  std::string pch_dir_, pch_error_;  // written by pch_thread_ before pch_ready_ is set
  std::once_flag bridge_once_;
  std::string bridge_path_, bridge_error_;  // set once, under bridge_once_
};

// Keeps the lines of a compiler log that matter for repair: errors with a little context,
// the first ones first, at most `max_lines`.
std::string trim_compiler_log(const std::string& log, size_t max_lines = 30);

}  // namespace mc::eval
