#include "eval/compile_pool.h"

#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <optional>
#include <regex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/check.h"
#include "common/env.h"
#include "common/fs.h"
#include "common/hash.h"
#include "common/subprocess.h"
#include "common/utf8.h"
#include "eval/nvcc_phases.h"

namespace mc::eval {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::vector<std::string> nonempty(const std::vector<std::string>& v) {
  std::vector<std::string> out;
  for (const auto& s : v)
    if (s.find_first_not_of(" \t") != std::string::npos) out.push_back(s);
  return out;
}

void append(std::vector<std::string>& a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
}

std::string join(const std::vector<std::string>& v, const char* sep = "\n") {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

struct StepResult {
  ExitStatus status;  // timed_out: the limit passed, or stuck
  std::string output;
  bool stuck = false;  // stopped stuck_after_error_s after it reported an error
};

// A compiler killed by a signal other than our timeout broke; that is not the candidate's
// fault (infra), while a compiler that exits with errors or runs out of time is.
bool compiler_crashed(const ExitStatus& s) { return s.term_signal && !s.timed_out; }

// True when a line of `text` from `from` on is an error diagnostic: EDG (cudafe++, cicc)
// "file(12): error", "At end of source: error", gcc "file:12:3: error:" / "fatal error:", ptxas
// "ptxas error" / "ptxas fatal". Only whole lines are read, and `from` moves past them, so a
// chatty compiler's output is scanned once, not again at every poll.
bool reports_error(const std::string& text, size_t& from) {
  static const std::regex kError(
      R"(^([^\s(]+\(\d+\): (catastrophic )?error|At end of source: error|[^\s:]+:\d+(:\d+)?: (fatal )?error:|ptxas (error|fatal)))");
  if (from > text.size()) from = 0;  // the start was dropped (Subprocess bounds stderr)
  for (size_t nl; (nl = text.find('\n', from)) != std::string::npos; from = nl + 1)
    if (std::regex_search(text.begin() + static_cast<std::ptrdiff_t>(from),
                          text.begin() + static_cast<std::ptrdiff_t>(nl), kError))
      return true;
  return false;
}

// Waits for one compiler until `deadline`, or until `stuck_s` after it reported an error
// (CompilePoolOptions::stuck_after_error_s); then stops its process group.
StepResult wait_compiler(Subprocess& p, Clock::time_point deadline, double stuck_s) {
  StepResult r;
  std::optional<Clock::time_point> stop_at;
  size_t out_from = 0, err_from = 0;  // where the next scan for an error starts
  while (p.running() && Clock::now() < deadline) {
    if (stop_at && Clock::now() >= *stop_at) {
      r.stuck = true;
      break;
    }
    p.pump(100);
    if (!stop_at && (reports_error(p.stdout_text(), out_from) || reports_error(p.stderr_text(), err_from)))
      stop_at = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(stuck_s * 1000));
  }
  r.status = p.wait(0);  // reaps it; a child still running is killed (timed_out)
  r.output = p.stdout_text() + p.stderr_text();
  return r;
}

// Compilers run at a lower priority than the judges: a cold `musacoder eval` starts its judges
// (each imports torch, then creates a CUDA context) beside up to a compile per core, and a
// judge ready sooner is judging sooner, while the compiles' seconds mostly sit off the critical
// path (they finish before the judges are ready). Niceness only matters where cores are short.
constexpr int kCompilerNice = 5;

// Runs several compiler invocations at once; returns when all have ended. With
// `first_failure_stops_rest`, the others are stopped once the first has failed (their results
// are then not to be read): nvcc's host front, whose failure is all nvcc would print.
std::vector<StepResult> run_parallel(const std::vector<std::vector<std::string>>& cmds,
                                     const std::string& cwd, const CompilePoolOptions& limits,
                                     bool first_failure_stops_rest = false) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(limits.timeout_s * 1000));
  std::vector<std::unique_ptr<Subprocess>> procs;
  for (const auto& argv : cmds) {
    SubprocessOptions o;
    o.argv = argv;
    o.cwd = cwd;
    o.env_set["LC_ALL"] = "C";
    o.nice = kCompilerNice;
    procs.push_back(std::make_unique<Subprocess>(o));
  }
  std::vector<StepResult> out;
  for (auto& p : procs) {
    if (first_failure_stops_rest && !out.empty() && !out[0].status.ok()) {
      StepResult stopped;
      stopped.status = p->wait(0);  // kills it if still running
      out.push_back(std::move(stopped));
      continue;
    }
    out.push_back(wait_compiler(*p, deadline, limits.stuck_after_error_s));
  }
  return out;
}

// The log of a build step that failed for the candidate's own reasons.
std::string failure_log(const StepResult& r) {
  if (r.stuck)
    return trim_compiler_log(r.output) + "\n(the compiler reported these errors, then did not exit; it was stopped)";
  return r.status.timed_out ? "compile timed out" : trim_compiler_log(r.output);
}

// The file `nvcc -c` compiles, as its diagnostics name it ("solution.cu(12): error", gcc's
// "solution.cu:4:10: fatal error").
std::string cu_source(const std::vector<std::string>& argv) {
  for (const auto& a : argv)
    if (a.size() > 3 && a.compare(a.size() - 3, 3, ".cu") == 0) return fs::path(a).filename().string();
  return "";
}

// A front phase that failed as a compiler fails on a bad source: it exited (1-127; not a
// crash, a timeout or a stop) and its output cites the source. nvcc runs the host front
// (preprocessor, cudafe++) first and stops at its failure, so that output is what plain nvcc
// prints; after a host front that passed, nvcc prints the host's output and then the device
// front's. Anything else (a crash, an error in a header or in ptxas) goes to plain nvcc.
bool failed_on_the_source(const StepResult& r, const std::string& src) {
  if (r.stuck || r.status.timed_out || r.status.term_signal || r.status.exit_code <= 0 || r.status.exit_code >= 128)
    return false;
  return !src.empty() && (r.output.find(src + "(") != std::string::npos || r.output.find(src + ":") != std::string::npos);
}

// One `nvcc -c` with its host and device phases in parallel (nvcc_phases.h). A front that fails
// on the source gives nvcc's own errors (failed_on_the_source), without compiling again: about
// half of an RL step's answers are compile errors. Plain nvcc when the plan is not
// the expected one, when a phase fails otherwise or the final phase fails (so errors read as
// nvcc's own), or when MUSACODER_NVCC_PHASES=0.
StepResult run_nvcc(const std::vector<std::string>& argv, const std::string& dir,
                    const std::string& seed, const CompilePoolOptions& limits, bool* phased = nullptr) {
  if (phased) *phased = false;
  const char* env = getenv("MUSACODER_NVCC_PHASES");
  if (!(env && std::string(env) == "0")) {
    std::string why;
    if (auto plan = plan_nvcc_phases(argv, dir, seed, &why)) {
      // A failed host front is all plain nvcc would run and print: the device front is
      // stopped then, not left to spend a core on the same errors (a loaded machine's compile
      // errors took 0.36-0.43 s a median plain and 0.47-0.48 s with both fronts to the end).
      auto fronts = run_parallel({{"/bin/bash", "-c", plan->host_script},
                                  {"/bin/bash", "-c", plan->device_script}},
                                 dir, limits, /*first_failure_stops_rest=*/true);
      for (auto& f : fronts)
        if (f.stuck) return f;  // plain nvcc would run into the same loop
      auto from_phases = [&](StepResult r) {  // nvcc's result, made by its phases
        std::error_code ec;
        fs::remove_all(fs::path(dir) / "nvcc-phases", ec);  // preprocessed sources: megabytes
        if (phased) *phased = true;
        return r;
      };
      const bool host_ok = fronts[0].status.ok();
      if (host_ok && fronts[1].status.ok()) {
        auto fin = run_parallel({{"/bin/bash", "-c", plan->final_script}}, dir, limits);
        if (fin[0].status.ok()) {
          fin[0].output = fronts[0].output + fronts[1].output + fin[0].output;
          return from_phases(std::move(fin[0]));
        }
        why = "final phase: " + fin[0].output.substr(0, 2000);
      } else if (StepResult& failed = host_ok ? fronts[1] : fronts[0]; failed_on_the_source(failed, cu_source(argv))) {
        if (host_ok) failed.output = fronts[0].output + failed.output;
        return from_phases(std::move(failed));
      } else {
        why = "front phases: " + fronts[0].output.substr(0, 1500) + fronts[1].output.substr(0, 1500);
      }
    }
    if (env && std::string(env) == "debug") fprintf(stderr, "nvcc phases not used: %s\n", why.c_str());
    std::error_code ec;
    fs::remove_all(fs::path(dir) / "nvcc-phases", ec);
  }
  return run_parallel({argv}, dir, limits)[0];
}

}  // namespace

std::string trim_compiler_log(const std::string& log, size_t max_lines) {
  std::vector<std::string> lines;
  std::istringstream in(log);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::vector<bool> keep(lines.size(), false);
  size_t errors = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    bool err = l.find("error") != std::string::npos || l.find("Error") != std::string::npos;
    if (!err || errors >= 8) continue;
    ++errors;
    for (size_t k = (i >= 1 ? i - 1 : 0); k < std::min(lines.size(), i + 4); ++k) keep[k] = true;
  }
  std::string out;
  size_t n = 0;
  bool any = std::find(keep.begin(), keep.end(), true) != keep.end();
  for (size_t i = 0; i < lines.size() && n < max_lines; ++i) {
    if (any && !keep[i]) continue;
    out.append(utf8_prefix(lines[i], 300)).append("\n");
    ++n;
  }
  // Compilers echo the source, which a model may have written with invalid bytes: the log goes
  // into JSON rows and feedback (an invalid byte made the candidate an infra error, unscored).
  return valid_utf8(out);
}

int half_the_cores() {
  // The cores this process may run on (taskset, a container's cpuset), not the machine's: two jobs
  // pinned to halves of one host each size their pool to their own half.
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set)
                                                                 : static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, cores / 2);
}

int default_compile_workers() {
  if (auto n = env_count("MUSACODER_COMPILE_WORKERS", 1, "a number of compile workers", 4096)) return static_cast<int>(*n);
  return half_the_cores();
}

CompilePool::CompilePool(Toolchain toolchain, CompilePoolOptions opts)
    : tc_(std::move(toolchain)), opts_(std::move(opts)) {
  MC_CHECK(!opts_.cache_dir.empty(), "compile pool needs a cache folder");
  fs::create_directories(fs::path(opts_.cache_dir) / "compile");
  fs::create_directories(fs::path(opts_.cache_dir) / "locks");
  // torch's build facts are kept with the other toolchain artifacts (pch/, shim-bridge/).
  if (tc_.torch_facts_cache.empty())
    tc_.torch_facts_cache = (fs::path(opts_.cache_dir) / "toolchain" / "torch-facts.json").string();
  int n = opts_.workers > 0 ? opts_.workers : default_compile_workers();
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { worker_loop(); });
}

CompilePool::~CompilePool() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  if (prepare_thread_.joinable()) prepare_thread_.join();
  if (pch_thread_.joinable()) pch_thread_.join();  // a half-built header helps no later run
}

void CompilePool::worker_loop() {
  while (true) {
    std::function<void()> job;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      job = std::move(queue_.front().second);
      queue_.pop_front();
      ++busy_;
    }
    job();
    std::lock_guard lk(mu_);
    --busy_;
  }
}

CompilePool::Load CompilePool::load() const {
  std::lock_guard lk(mu_);
  return {threads_.size(), busy_, queue_.size()};
}

std::shared_future<CompileOutcome> CompilePool::submit(const CompileRequest& req, int64_t priority) {
  KeyBuilder k;
  k.add(to_string(req.format)).add(req.native_source);
  for (const auto& c : req.calls) k.add(c.source_key());
  std::string key = k.hex();
  std::lock_guard lk(mu_);
  if (auto it = inflight_.find(key); it != inflight_.end()) return it->second;
  // Once finished, the entry leaves `inflight_` (a long-running service must not grow); later
  // requests for the same sources are answered by the on-disk cache.
  auto task = std::make_shared<std::packaged_task<CompileOutcome()>>([this, req, key] {
    CompileOutcome out = compile_now(req);
    std::lock_guard lk(mu_);
    inflight_.erase(key);
    return out;
  });
  std::shared_future<CompileOutcome> fut = task->get_future().share();
  inflight_[key] = fut;
  auto at = queue_.end();  // after every job of this priority or lower
  while (at != queue_.begin() && std::prev(at)->first > priority) --at;
  queue_.insert(at, {priority, [task] { (*task)(); }});
  cv_.notify_one();
  return fut;
}

CompileOutcome CompilePool::compile_now(const CompileRequest& req) {
  CompileOutcome out;
  out.cached = true;
  out.status = CompileOutcome::Status::kOk;
  auto t0 = Clock::now();
  try {
    std::vector<std::pair<std::string, Built>> built;
    if (req.format == SolutionFormat::kNative) {
      built.emplace_back("native", build_native(req.native_source));
    } else {
      for (const auto& call : req.calls) built.emplace_back(call.name, build_extension(call));
    }
    for (size_t i = 0; i < built.size(); ++i) {
      const Built& b = built[i].second;
      out.cached &= b.cached;
      if (b.infra) {
        out.status = CompileOutcome::Status::kInfraError;
        out.error = b.error;
        break;
      }
      if (!b.ok) {
        out.status = CompileOutcome::Status::kCompileError;
        out.log = b.log;
        break;
      }
      std::string key = req.format == SolutionFormat::kNative ? sha256_hex(req.native_source)
                                                              : req.calls[i].source_key();
      out.modules.push_back({key, built[i].first, b.so_path});
    }
    bool shim = false;
    for (const auto& m : out.modules) shim |= m.so_path.ends_with(".shim.so");
    if (shim && out.status == CompileOutcome::Status::kOk)
      out.modules.push_back({kShimBridgeKey, kShimBridgeKey, shim_bridge()});
  } catch (const std::exception& e) {
    out.status = CompileOutcome::Status::kInfraError;
    out.error = e.what();
  }
  out.seconds = out.cached ? 0 : since(t0);
  return out;
}

CompilePool::Built CompilePool::build_cached(
    const std::string& key, const std::string& so_name,
    const std::function<Built(const std::string& dir)>& build) {
  fs::path dir = fs::path(opts_.cache_dir) / "compile" / key;
  auto read_status = [&](Built& b) {
    fs::path st = dir / "status.json";
    if (!fs::exists(st)) return false;
    auto j = nlohmann::json::parse(read_file(st));
    b.ok = j.at("ok");
    b.log = j.value("log", "");
    b.so_path = (dir / j.value("so_name", so_name)).string();
    b.cached = true;
    return true;
  };
  Built b;
  if (read_status(b)) return b;
  FileLock lock((fs::path(opts_.cache_dir) / "locks" / (key + ".lock")).string());
  if (read_status(b)) return b;  // another process built it while we waited
  fs::path tmp = dir;
  tmp += ".tmp." + std::to_string(getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  b = build(tmp.string());
  if (b.infra) {
    fs::remove_all(tmp);
    return b;
  }
  // A build may name its product itself (the shim tier's "<name>.shim.so").
  std::string product = b.so_path.empty() ? so_name : fs::path(b.so_path).filename().string();
  nlohmann::json st = {{"ok", b.ok}, {"log", b.log}, {"seconds", b.seconds}, {"steps", b.steps},
                       {"so_name", product}};
  write_file_atomic(tmp / "status.json", st.dump());
  fs::remove_all(dir);
  fs::rename(tmp, dir);
  b.so_path = (dir / product).string();
  b.cached = false;
  return b;
}

CompilePool::Built CompilePool::build_native(const std::string& source) {
  std::string key = KeyBuilder().add("native-v2").add(tc_.id()).add(source).hex();
  return build_cached(key, "native.so", [&](const std::string& dir) {
    Built b;
    auto t0 = Clock::now();
    write_file_atomic(fs::path(dir) / "solution.cu", source);
    // `nvcc -shared` in two steps: the object with its host and device phases in parallel
    // (run_nvcc; an RL answer waits on this), then the link.
    const std::string gencode = "-gencode=arch=compute_" + tc_.cuda_arch + ",code=sm_" + tc_.cuda_arch;
    std::vector<std::string> cmd = {tc_.nvcc, "-O3", "-std=c++17", "-c", "-Xcompiler", "-fPIC", gencode,
                                    "-I" + tc_.include_dir, "solution.cu", "-o", "solution.o"};
    bool phased = false;
    StepResult r = run_nvcc(cmd, dir, source, opts_, &phased);
    b.steps["compile_s"] = since(t0);
    b.steps["phased"] = phased;
    if (r.status.ok()) {
      auto tl = Clock::now();
      r = run_parallel({{tc_.nvcc, "-shared", gencode, "solution.o", "-o", "native.so"}}, dir, opts_)[0];
      b.steps["link_s"] = since(tl);
    }
    b.seconds = since(t0);
    if (compiler_crashed(r.status)) {
      b.infra = true;
      b.error = "nvcc " + r.status.describe();
      return b;
    }
    b.ok = r.status.ok();
    if (!b.ok)
      b.log = failure_log(r);
    return b;
  });
}

std::string CompilePool::prepare() {
  try {
    tc_.load_torch_info();
  } catch (const std::exception& e) {
    return e.what();
  }
  pch_if_ready();
  std::string bridge = shim_bridge();
  while (!pch_done_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (!pch_ready_.load()) return pch_error_.empty() ? "precompiled header not built" : pch_error_;
  return bridge.empty() ? "torch shim bridge not built: " + bridge_error_ : "";
}

std::string CompilePool::shim_bridge() {
  std::call_once(bridge_once_, [&] {
    try {
      tc_.load_torch_info();
      std::string src = read_file(fs::path(tc_.shim_dir) / "bridge.cc");
      std::string abi = read_file(fs::path(tc_.include_dir) / "musacoder" / "torch_shim_abi.h");
      fs::path dir = fs::path(opts_.cache_dir) / "shim-bridge" /
                     KeyBuilder().add(tc_.id()).add(src).add(abi).hex().substr(0, 24);
      fs::path so = dir / "mc_shim_bridge.so";
      fs::create_directories(dir);
      FileLock lock((dir / "build.lock").string());
      if (!fs::exists(dir / "ok")) {
        bool cuda = !tc_.torch_cuda.empty();
        std::vector<std::string> cmd = {tc_.cxx, "-O2", "-shared", "-fPIC", "-std=c++17",
                                        "-DTORCH_EXTENSION_NAME=mc_shim_bridge",
                                        "-DTORCH_API_INCLUDE_EXTENSION_H"};
        if (cuda) append(cmd, {"-DMC_BRIDGE_CUDA", "-isystem", tc_.cuda_home + "/include"});
        for (const auto& p : tc_.torch_include_paths) append(cmd, {"-isystem", p});
        append(cmd, {"-isystem", tc_.python_include, "-I" + tc_.include_dir,
                     (fs::path(tc_.shim_dir) / "bridge.cc").string(), "-o", so.string()});
        for (const auto& p : tc_.torch_library_paths) cmd.push_back("-L" + p);
        append(cmd, {"-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python"});
        if (cuda) cmd.push_back("-lc10_cuda");
        auto r = run_parallel({cmd}, dir.string(), opts_);
        if (!r[0].status.ok()) {
          bridge_error_ = trim_compiler_log(r[0].output);
          return;
        }
        write_file_atomic(dir / "ok", "");
      }
      bridge_path_ = so.string();
    } catch (const std::exception& e) {
      bridge_error_ = e.what();
    }
  });
  return bridge_path_;
}

void CompilePool::start_preparing() {
  if (prepare_thread_.joinable()) return;
  prepare_thread_ = std::thread([this] {
    std::string why = prepare();
    if (!why.empty()) fprintf(stderr, "compile pool: toolchain not fully prepared (%s)\n", why.substr(0, 300).c_str());
  });
}

std::string CompilePool::pch_if_ready() {
  std::call_once(pch_once_, [&] {
    fs::path dir = fs::path(opts_.cache_dir) / "pch" / tc_.id();
    if (fs::exists(dir / "ok")) {  // built by an earlier run: use it from the first unit on
      pch_dir_ = dir.string();
      pch_ready_.store(true);
      pch_done_.store(true);
      return;
    }
    pch_thread_ = std::thread([this] { build_pch(); });
  });
  return pch_ready_.load() ? pch_dir_ : "";
}

void CompilePool::build_pch() {
  struct Done {
    std::atomic<bool>& flag;
    ~Done() { flag.store(true); }
  } done{pch_done_};
  try {
    fs::path dir = fs::path(opts_.cache_dir) / "pch" / tc_.id();
    fs::create_directories(dir);
    FileLock lock((dir / "build.lock").string());
    if (!fs::exists(dir / "ok")) {
      write_file_atomic(dir / "torch_ext.h", "#include <torch/extension.h>\n");
      std::vector<std::string> cmd = {tc_.cxx, "-DTORCH_API_INCLUDE_EXTENSION_H"};
      for (const auto& p : tc_.torch_include_paths) append(cmd, {"-isystem", p});
      append(cmd, {"-isystem", tc_.python_include, "-fPIC", "-std=c++17", "-x", "c++-header",
                   "torch_ext.h", "-o", "torch_ext.h.gch"});
      auto r = run_parallel({cmd}, dir.string(), opts_);
      if (!r[0].status.ok()) {
        pch_error_ = trim_compiler_log(r[0].output);  // units build without it: slower, correct
        return;
      }
      write_file_atomic(dir / "ok", "");
    }
    pch_dir_ = dir.string();
    pch_ready_.store(true);
  } catch (const std::exception& e) {
    pch_error_ = e.what();
  }
}

std::vector<std::string> CompilePool::nvcc_unit_cmd(const LoadInlineCall& call,
                                                    const std::vector<std::string>& first,
                                                    const std::vector<std::string>& common) const {
  std::vector<std::string> nv = {tc_.nvcc};
  append(nv, first);
  append(nv, common);
  append(nv, tc_.nvcc_flags);
  append(nv, {"-gencode=arch=compute_" + tc_.cuda_arch + ",code=sm_" + tc_.cuda_arch,
              "--compiler-options", "-fPIC", "-std=c++17"});
  append(nv, nonempty(call.extra_cuda_cflags));
  append(nv, {"-c", "cuda.cu", "-o", "cuda.o"});
  return nv;
}

CompilePool::Built CompilePool::build_shim(const LoadInlineCall& call, const std::string& dir) {
  Built b;
  auto t0 = Clock::now();
  std::string main_cpp = "#include <torch/extension.h>\n" + join(call.cpp_sources) + "\n\n";
  main_cpp += "MC_SHIM_EXPORT int mc_shim_abi_version(void) { return MC_SHIM_ABI_VERSION; }\n";
  main_cpp += "MC_SHIM_EXPORT void mc_shim_init(const mc_shim_ops* o) { ::mc_shim::ops() = o; }\n";
  for (const auto& f : call.functions)
    main_cpp += "MC_SHIM_EXPORT int mc_shim_call_" + f +
                "(const mc_shim_value* a, int n, mc_shim_result* r, char* e, int el) {\n"
                "  return ::mc_shim::invoke(\"" + f + "\", &" + f + ", a, n, r, e, el);\n}\n";
  write_file_atomic(fs::path(dir) / "main.cpp", main_cpp);
  bool cuda = call.with_cuda && !call.cuda_sources.empty();
  if (cuda)
    write_file_atomic(fs::path(dir) / "cuda.cu",
                      "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n\n" +
                          join(call.cuda_sources) + "\n");
  // Half and BFloat16 come from c10's own small headers, only when a source names them.
  std::string all = join(call.cpp_sources) + join(call.cuda_sources);
  bool half = false;
  for (const char* w : {"Half", "BFloat16", "_AND2", "_AND(", "REDUCED_FLOATING"})
    half |= all.find(w) != std::string::npos;
  std::vector<std::string> common = {"-DTORCH_EXTENSION_NAME=" + call.name, "-I" + tc_.shim_dir,
                                     "-I" + tc_.include_dir};
  if (half) {
    common.push_back("-DMC_SHIM_WITH_HALF");
    if (!tc_.torch_include_paths.empty()) append(common, {"-isystem", tc_.torch_include_paths[0]});
  }
  for (const auto& p : call.extra_include_paths) append(common, {"-I", p});
  std::vector<std::string> cxx = {tc_.cxx};
  append(cxx, common);
  if (call.with_cuda) append(cxx, {"-isystem", tc_.cuda_home + "/include"});  // as load_inline
  append(cxx, {"-fPIC", "-std=c++17"});
  append(cxx, nonempty(call.extra_cflags));
  append(cxx, {"-c", "main.cpp", "-o", "main.o"});
  std::vector<std::vector<std::string>> cmds = {cxx};
  if (cuda) cmds.push_back(nvcc_unit_cmd(call, {}, common));
  auto r = run_parallel(cmds, dir, opts_);
  b.steps["shim_compile_s"] = since(t0);
  for (const auto& step : r) {
    if (step.status.ok()) continue;
    if (compiler_crashed(step.status)) {
      b.infra = true;
      b.error = "compiler " + step.status.describe() + ": " + valid_utf8(utf8_prefix(step.output, 500));
      return b;
    }
    b.steps["shim_error"] = trim_compiler_log(step.output, 6);
    return b;
  }
  std::vector<std::string> link = {tc_.cxx, "main.o"};
  if (cuda) link.push_back("cuda.o");
  link.push_back("-shared");
  if (call.with_cuda) append(link, {"-L" + tc_.cuda_home + "/lib64", "-lcudart"});
  append(link, nonempty(call.extra_ldflags));
  append(link, {"-o", call.name + ".shim.so"});
  auto tl = Clock::now();
  auto l = run_parallel({link}, dir, opts_);
  b.steps["link_s"] = since(tl);
  if (!l[0].status.ok()) {
    b.steps["shim_error"] = trim_compiler_log(l[0].output, 6);
    return b;
  }
  b.ok = true;
  b.steps["tier"] = "shim";
  b.seconds = since(t0);
  b.so_path = (fs::path(dir) / (call.name + ".shim.so")).string();
  return b;
}

CompilePool::Built CompilePool::build_extension(const LoadInlineCall& call) {
  tc_.load_torch_info();
  std::string key = KeyBuilder().add("ext-v2").add(tc_.id()).add(call.source_key()).hex();
  return build_cached(key, call.name + ".so", [&](const std::string& dir) {
    Built b;
    auto t0 = Clock::now();
    const char* shim_env = getenv("MUSACODER_TORCH_SHIM");
    if (!(shim_env && std::string(shim_env) == "0") && !shim_bridge().empty()) {
      Built s = build_shim(call, dir);
      if (s.ok || s.infra) return s;
      b.steps = s.steps;  // why the shim was not enough stays visible in status.json
    }
    std::string pch = pch_if_ready();
    // Sources laid out exactly as load_inline writes them.
    std::string main_cpp = "#include <torch/extension.h>\n" + join(call.cpp_sources) + "\n";
    main_cpp += "\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n";
    for (const auto& f : call.functions)
      main_cpp += "m.def(\"" + f + "\", torch::wrap_pybind_function(" + f + "), \"" + f + "\");\n";
    main_cpp += "}\n";
    write_file_atomic(fs::path(dir) / "main.cpp", main_cpp);
    bool cuda = call.with_cuda && !call.cuda_sources.empty();
    if (cuda) {
      write_file_atomic(fs::path(dir) / "cuda.cu",
                        "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n\n" +
                            join(call.cuda_sources) + "\n");
    }
    std::vector<std::string> common = {"-DTORCH_EXTENSION_NAME=" + call.name,
                                       "-DTORCH_API_INCLUDE_EXTENSION_H"};
    for (const auto& p : call.extra_include_paths) append(common, {"-I", p});
    for (const auto& p : tc_.torch_include_paths) append(common, {"-isystem", p});
    append(common, {"-isystem", tc_.python_include});

    std::vector<std::string> cxx = {tc_.cxx};
    if (!pch.empty()) append(cxx, {"-I" + pch, "-include", "torch_ext.h"});
    append(cxx, common);
    append(cxx, {"-fPIC", "-std=c++17"});
    append(cxx, nonempty(call.extra_cflags));
    append(cxx, {"-c", "main.cpp", "-o", "main.o"});

    auto nvcc_cmd = [&](bool lite) {
      std::vector<std::string> first;
      if (lite) first.push_back("-I" + tc_.lite_header_dir);
      return nvcc_unit_cmd(call, first, common);
    };
    // The binding unit and the CUDA unit at once (the CUDA unit's own phases in parallel too).
    double binding_s = 0;
    auto binding = std::async(std::launch::async, [&] {
      auto t = Clock::now();
      auto out = run_parallel({cxx}, dir, opts_);
      binding_s = since(t);
      return out;
    });
    std::vector<StepResult> r;
    StepResult cuda_step;
    if (cuda) {
      auto t = Clock::now();
      bool phased = false;
      cuda_step = run_nvcc(nvcc_cmd(true), dir, call.source_key(), opts_, &phased);
      b.steps["cuda_lite_s"] = since(t);
      b.steps["cuda_phased"] = phased;
    }
    r = binding.get();
    b.steps["binding_s"] = binding_s;
    b.steps["binding_pch"] = !pch.empty();
    if (cuda) {
      if (!cuda_step.status.ok() && (!cuda_step.status.timed_out || cuda_step.stuck)) {
        // The light header was not enough for this source: the real headers decide. A
        // compiler stopped after its errors counts here as what it is, a failed compile: the
        // errors may be the light header's own.
        auto t = Clock::now();
        cuda_step = run_nvcc(nvcc_cmd(false), dir, call.source_key(), opts_);
        b.steps["cuda_full_s"] = since(t);
      }
      r.push_back(std::move(cuda_step));
    }
    for (const auto& step : r) {
      if (step.status.ok()) continue;
      b.seconds = since(t0);
      if (compiler_crashed(step.status)) {
        b.infra = true;
        b.error = "compiler " + step.status.describe() + ": " + valid_utf8(utf8_prefix(step.output, 500));
      } else {
        b.log = failure_log(step);
      }
      return b;
    }
    std::vector<std::string> link = {tc_.cxx, "main.o"};
    if (cuda) link.push_back("cuda.o");
    link.push_back("-shared");
    for (const auto& p : tc_.torch_library_paths) link.push_back("-L" + p);
    append(link, {"-lc10", "-ltorch_cpu", "-ltorch", "-ltorch_python"});
    if (cuda) append(link, {"-lc10_cuda", "-ltorch_cuda", "-lcudart"});
    append(link, nonempty(call.extra_ldflags));
    append(link, {"-o", call.name + ".so"});
    auto tl = Clock::now();
    auto l = run_parallel({link}, dir, opts_);
    b.steps["link_s"] = since(tl);
    b.seconds = since(t0);
    b.ok = l[0].status.ok();
    b.steps["tier"] = "torch";
    if (!b.ok) b.log = trim_compiler_log(l[0].output);
    return b;
  });
}

}  // namespace mc::eval
