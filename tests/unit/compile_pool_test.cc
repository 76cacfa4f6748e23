// Real compiles with nvcc and the host compiler (no GPU needed), through the on-disk cache.
#include "eval/compile_pool.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <nlohmann/json.hpp>

#include "common/fs.h"
#include "common/subprocess.h"
#include "common/utf8.h"
#include "eval/extract.h"
#include "eval/nvcc_phases.h"
#include "test_util.h"

using namespace mc::eval;

namespace {

CompilePool& pool() {
  static CompilePool p(discover_toolchain("90"), CompilePoolOptions{2, mc::test::test_cache_dir(), 900, 3});
  return p;
}

CompileRequest kernelbench_request(const std::string& path) {
  auto ex = extract_solution(mc::read_file(path));
  std::string why;
  auto calls = find_load_inline_calls(ex.code, &why);
  EXPECT_TRUE(calls) << why;
  CompileRequest r;
  r.calls = calls.value_or(std::vector<LoadInlineCall>{});
  return r;
}

CompileRequest cuda_ext(const std::string& name, const std::string& cuda) {
  CompileRequest r;
  LoadInlineCall c;
  c.name = name;
  c.cpp_sources = {"torch::Tensor f(torch::Tensor x);"};
  c.cuda_sources = {cuda};
  c.functions = {"f"};
  r.calls = {c};
  return r;
}

}  // namespace

TEST(CompilePool, NativeCompileAndCacheHit) {
  CompileRequest r;
  r.format = SolutionFormat::kNative;
  r.native_source = mc::read_file(mc::test::cases_dir() + "/gpu/native/2_ReLU.cu") + "\n// test\n";
  auto first = pool().compile_now(r);
  ASSERT_EQ(first.status, CompileOutcome::Status::kOk) << first.log << first.error;
  ASSERT_TRUE(mc::fs::exists(first.modules.at(0).so_path));
  auto second = pool().submit(r).get();
  EXPECT_EQ(second.status, CompileOutcome::Status::kOk);
  EXPECT_TRUE(second.cached);
  EXPECT_EQ(second.seconds, 0);
}

// submit(req, priority): the queue gives a worker the lowest priority first, in arrival order
// among equals (an RL step's answers before the next step's). One worker busy with a first
// compile while three more arrive, the last with the lowest priority: it is built second.
TEST(CompilePool, LowerPriorityIsBuiltFirst) {
  mc::TempDir cache;
  CompilePoolOptions o;
  o.workers = 1;
  o.cache_dir = cache.path().string();
  CompilePool one(discover_toolchain("90"), o);
  auto native = [](int i) {
    CompileRequest r;
    r.format = SolutionFormat::kNative;
    r.native_source = mc::read_file(mc::test::cases_dir() + "/gpu/native/2_ReLU.cu") + "\n// priority " +
                      std::to_string(i) + "\n";
    return r;
  };
  auto first = one.submit(native(0));
  auto later_a = one.submit(native(1), 2), later_b = one.submit(native(2), 2), sooner = one.submit(native(3), 1);
  ASSERT_EQ(sooner.get().status, CompileOutcome::Status::kOk);
  EXPECT_EQ(first.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_EQ(later_b.wait_for(std::chrono::seconds(0)), std::future_status::timeout) << "built before the sooner one";
  ASSERT_EQ(later_a.get().status, CompileOutcome::Status::kOk);
  EXPECT_EQ(later_b.wait_for(std::chrono::seconds(0)), std::future_status::timeout) << "built before later_a";
  EXPECT_EQ(later_b.get().status, CompileOutcome::Status::kOk);
  EXPECT_FALSE(later_b.get().cached);
}

TEST(CompilePool, CompileErrorsAreTrimmedAndCached) {
  CompileRequest r;
  r.format = SolutionFormat::kNative;
  r.native_source = "extern \"C\" int mc_forward() { return undeclared_variable; }\n";
  auto first = pool().compile_now(r);
  ASSERT_EQ(first.status, CompileOutcome::Status::kCompileError);
  EXPECT_NE(first.log.find("undeclared_variable"), std::string::npos) << first.log;
  auto again = pool().compile_now(r);
  EXPECT_EQ(again.status, CompileOutcome::Status::kCompileError);
  EXPECT_TRUE(again.cached);
}

// A native answer builds with nvcc's host and device phases in parallel, a bad one too: its
// log is what plain nvcc (MUSACODER_NVCC_PHASES=0) prints, word for word, from the phases'
// own output (status.json's steps say "phased"), not from a second, plain compile. The bad
// sources: an EDG syntax error, an undefined identifier in a kernel (host and device fronts
// both report it), a missing header (gcc's preprocessor), and a host function called from a
// kernel.
TEST(CompilePool, NativeBuildsInPhasesWithNvccsOwnErrors) {
  const std::string ok = mc::read_file(mc::test::cases_dir() + "/gpu/native/2_ReLU.cu");
  std::vector<std::string> bad = {
      "extern \"C\" int mc_forward() { int x = 1 return x; }\n",
      "__global__ void k(float* o) { o[0] = expff(o[0]); }\nextern \"C\" int mc_forward() { return 0; }\n",
      "#include <no_such_header.h>\nextern \"C\" int mc_forward() { return 0; }\n",
      "float host_only(float x) { return x; }\n__global__ void k(float* o) { o[0] = host_only(o[0]); }\n"
      "extern \"C\" int mc_forward() { return 0; }\n"};
  auto build = [&](const std::string& source, bool phases) {
    mc::TempDir cache;
    CompilePoolOptions o;
    o.workers = 1;
    o.cache_dir = cache.path().string();
    if (!phases) setenv("MUSACODER_NVCC_PHASES", "0", 1);
    CompilePool p(discover_toolchain("90"), o);
    CompileRequest r;
    r.format = SolutionFormat::kNative;
    r.native_source = source;
    auto out = p.compile_now(r);
    unsetenv("MUSACODER_NVCC_PHASES");
    nlohmann::json steps;
    for (const auto& e : mc::fs::recursive_directory_iterator(cache.path()))
      if (e.path().filename() == "status.json") steps = nlohmann::json::parse(mc::read_file(e.path())).at("steps");
    if (out.status == CompileOutcome::Status::kOk) {  // the library's exports, while the cache lives
      mc::SubprocessOptions nm;
      nm.argv = {"nm", "-D", "--defined-only", "-j", out.modules.at(0).so_path};
      steps["exports"] = mc::run_command(nm, 60000).out;
    }
    return std::make_pair(out, steps);
  };
  auto [built, steps] = build(ok, true);
  ASSERT_EQ(built.status, CompileOutcome::Status::kOk) << built.log << built.error;
  EXPECT_TRUE(steps.at("phased").get<bool>()) << steps.dump();
  EXPECT_NE(steps.at("exports").get<std::string>().find("mc_forward"), std::string::npos) << steps.dump();
  for (const auto& source : bad) {
    auto [phased, phased_steps] = build(source, true);
    auto [plain, plain_steps] = build(source, false);
    ASSERT_EQ(phased.status, CompileOutcome::Status::kCompileError) << source << phased.error;
    ASSERT_EQ(plain.status, CompileOutcome::Status::kCompileError) << source << plain.error;
    EXPECT_FALSE(plain_steps.at("phased").get<bool>());
    EXPECT_TRUE(phased_steps.at("phased").get<bool>()) << source;
    EXPECT_EQ(phased.log, plain.log) << source;
  }
}

// cudafe++ (CUDA 13.0) reports errors on this source and then loops forever (a model's answer
// in an RFT run held a worker for the whole 600 s limit): stopped 3 s (this pool's setting)
// after its first error, it is a compile error with those errors as its feedback, in both
// build paths (the extension goes through all its tiers: shim, light header, real headers,
// since errors in the first two may be theirs, not the source's).
constexpr const char* kFrontEndLoop = R"(
__global__ void k(float* out) {
  __shared__ float[ITEM, float Bs[16][65];
}
__global__ void k1(float* out) { out[0] = 1; }
)";

TEST(CompilePool, ACompilerStuckAfterItsErrorsIsStopped) {
  CompileRequest r;
  r.format = SolutionFormat::kNative;
  r.native_source = std::string(kFrontEndLoop) + "extern \"C\" int mc_forward() { return 0; }\n";
  auto t0 = std::chrono::steady_clock::now();
  auto native = pool().compile_now(r);
  auto ext = pool().compile_now(cuda_ext("front_end_loop_ext", kFrontEndLoop));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const auto* out : {&native, &ext}) {
    ASSERT_EQ(out->status, CompileOutcome::Status::kCompileError) << out->log << out->error;
    EXPECT_NE(out->log.find("structured binding"), std::string::npos) << out->log;
    if (!out->cached) {
      EXPECT_NE(out->log.find("it was stopped"), std::string::npos) << out->log;
    }
  }
  // Well under the limit, with room for the real-headers tier on a loaded 2-core machine (a full
  // CI run beside the other compile tests took 122 s here).
  EXPECT_LT(s, 300) << "the limit is 900 s";
}

TEST(CompilePool, CpuTorchExtension) {
  auto out = pool().compile_now(kernelbench_request(mc::test::cases_dir() + "/cpu/honest_add.py"));
  ASSERT_EQ(out.status, CompileOutcome::Status::kOk) << out.log << out.error;
  EXPECT_EQ(out.modules.at(0).module_name, "add_cpu_ext");
}

TEST(CompilePool, CudaTorchExtensionFastTier) {
  auto out = pool().compile_now(kernelbench_request(mc::test::cases_dir() + "/gpu/honest/2_ReLU.py"));
  ASSERT_EQ(out.status, CompileOutcome::Status::kOk) << out.log << out.error;
}

bool built_against_shim(const CompileOutcome& out) {
  bool shim = false, bridge = false;
  for (const auto& m : out.modules) {
    shim |= m.so_path.ends_with(".shim.so");
    bridge |= m.source_key == kShimBridgeKey && mc::fs::exists(m.so_path);
  }
  return shim && bridge;
}

// Every honest KernelBench case builds against the torch shim (no ATen headers, no binding
// unit), and the outcome carries the bridge its modules are loaded through.
TEST(CompilePool, HonestKernelsBuildAgainstTheTorchShim) {
  for (const auto& path : mc::test::case_files("gpu/honest")) {
    auto out = pool().compile_now(kernelbench_request(path));
    ASSERT_EQ(out.status, CompileOutcome::Status::kOk) << path << out.log << out.error;
    EXPECT_TRUE(built_against_shim(out)) << path;
  }
  auto out = pool().compile_now(kernelbench_request(mc::test::cases_dir() + "/cpu/honest_add.py"));
  EXPECT_TRUE(built_against_shim(out));
}

// What the shim lacks is built with libtorch's headers (here torch::indexing)...
TEST(CompilePool, ShimFallsBackToLibtorchHeaders) {
  auto out = pool().compile_now(cuda_ext("shim_fallback_ext", R"(
#include <torch/extension.h>
torch::Tensor f(torch::Tensor x) { using namespace torch::indexing; return x.index({Slice(0, 2)}); }
)"));
  ASSERT_EQ(out.status, CompileOutcome::Status::kOk) << out.log << out.error;
  EXPECT_FALSE(built_against_shim(out));
}

// Arguments and results cross the bridge as they would through load_inline's pybind11
// binding: tensors (any strides), ints, floats, bools, lists, tuples; libtorch's errors
// (data_ptr<T> on the wrong dtype, TORCH_CHECK, bad dims) arrive as Python exceptions.
TEST(TorchShim, ArgumentsResultsAndErrorsCrossTheBridge) {
  CompileRequest r;
  LoadInlineCall c;
  c.name = "shim_abi_ext";
  c.with_cuda = false;
  c.cpp_sources = {R"(
#include <torch/extension.h>
#include <vector>
torch::Tensor add(torch::Tensor a, torch::Tensor b) {
  TORCH_CHECK(a.sizes() == b.sizes(), "sizes differ: ", a.sizes(), " vs ", b.sizes());
  auto ac = a.contiguous(), bc = b.contiguous();
  auto out = torch::empty_like(ac);
  const float* x = ac.data_ptr<float>(); const float* y = bc.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < ac.numel(); ++i) o[i] = x[i] + y[i];
  return out;
}
std::vector<torch::Tensor> many(std::vector<torch::Tensor> xs, double s, int64_t k, bool neg) {
  return {torch::zeros({k, 2}, xs[0].options()), xs[1].view({-1}),
          torch::full({2}, neg ? -s : s, torch::dtype(torch::kFloat32))};
}
std::tuple<torch::Tensor, int64_t, double> tup(torch::Tensor a) {
  return {a.t().contiguous(), a.size(-1), static_cast<double>(a.stride(0))};
}
torch::Tensor wrong_dtype(torch::Tensor a) { a.data_ptr<double>(); return a; }
int64_t bad_dim(torch::Tensor a) { return a.size(5); }
)"};
  c.functions = {"add", "many", "tup", "wrong_dtype", "bad_dim"};
  r.calls = {c};
  auto out = pool().compile_now(r);
  ASSERT_EQ(out.status, CompileOutcome::Status::kOk) << out.log << out.error;
  ASSERT_TRUE(built_against_shim(out));
  std::string so, bridge;
  for (const auto& m : out.modules) (m.source_key == kShimBridgeKey ? bridge : so) = m.so_path;
  std::string script = R"PY(
import importlib.machinery, importlib.util, sys, torch
path = sys.argv[1]
loader = importlib.machinery.ExtensionFileLoader("mc_shim_bridge", path)
spec = importlib.util.spec_from_file_location("mc_shim_bridge", path, loader=loader)
bridge = importlib.util.module_from_spec(spec); loader.exec_module(bridge)
f = bridge.load(sys.argv[2], ["add", "many", "tup", "wrong_dtype", "bad_dim"])
a, b = torch.randn(3, 4), torch.randn(3, 4)
assert torch.equal(f["add"](a, b), a + b)
assert torch.equal(f["add"](a.t(), b.t()), a.t() + b.t())
z, v, s = f["many"]([a, b], 2.5, 3, True)
assert z.shape == (3, 2) and not z.any() and torch.equal(v, b.view(-1)) and s.tolist() == [-2.5, -2.5]
t, n, st = f["tup"](a)
assert torch.equal(t, a.t().contiguous()) and n == 4 and st == 4.0
def fails(fn, words):
    try:
        fn()
    except Exception as e:
        assert words in str(e), (words, str(e))
        return
    raise AssertionError("no error: " + words)
fails(lambda: f["wrong_dtype"](a), "expected scalar type Double but found Float")
fails(lambda: f["add"](a, torch.randn(2)), "sizes differ: [3, 4] vs [2]")
fails(lambda: f["bad_dim"](a), "Dimension out of range")
fails(lambda: f["add"](a), "takes 2 arguments (1 given)")
fails(lambda: f["add"](a, "x"), "cannot pass a str argument")
fails(lambda: f["many"](a, 1.0, 1, True), "incompatible argument 1")
fails(lambda: bridge.load(sys.argv[2], ["nope"]), "has no function nope")
print("bridge ok")
)PY";
  mc::TempDir dir;
  mc::write_file_atomic(dir.path() / "check.py", script);
  mc::SubprocessOptions o;
  o.argv = {"python3", (dir.path() / "check.py").string(), bridge, so};
  auto res = mc::run_command(o, 120000);
  EXPECT_TRUE(res.status.ok()) << res.out << res.err;
  EXPECT_NE(res.out.find("bridge ok"), std::string::npos) << res.out << res.err;
}

// ...and a source that needs a CUDA header it did not include fails against the shim too
// (RejectsWhatRealLoadInlineRejects below): the shim accepts no more than libtorch does.

// The light header is a strict subset of torch/extension.h: what it lacks makes the pool fall
// back to the real headers (here torch::indexing, which only the real header provides)...
TEST(CompilePool, FallsBackToRealHeadersWhenTheLightOneIsNotEnough) {
  auto out = pool().compile_now(cuda_ext("fallback_ext", R"(
#include <torch/extension.h>
torch::Tensor f(torch::Tensor x) { using namespace torch::indexing; return x.index({Slice(0, 1)}); }
)"));
  EXPECT_EQ(out.status, CompileOutcome::Status::kOk) << out.log << out.error;
}

// ...and what the real header rejects is rejected too (load_inline would fail on it).
TEST(CompilePool, RejectsWhatRealLoadInlineRejects) {
  auto out = pool().compile_now(cuda_ext("strict_ext", R"(
#include <torch/extension.h>
__global__ void k() {}
torch::Tensor f(torch::Tensor x) { k<<<1, 1, 0, at::cuda::getCurrentCUDAStream()>>>(); return x; }
)"));
  EXPECT_EQ(out.status, CompileOutcome::Status::kCompileError);
  EXPECT_NE(out.log.find("getCurrentCUDAStream"), std::string::npos) << out.log;
}

TEST(CompilePool, TrimCompilerLogKeepsErrors) {
  std::string log;
  for (int i = 0; i < 200; ++i) log += "note: noise " + std::to_string(i) + "\n";
  log += "foo.cu(3): error: identifier \"x\" is undefined\n";
  std::string t = trim_compiler_log(log);
  EXPECT_NE(t.find("identifier \"x\""), std::string::npos);
  EXPECT_LT(t.size(), 1000u);
}

// A model's answer may hold invalid UTF-8 (a byte-level tokenizer can stop inside a character).
// The compiler echoes it into the log, which goes into JSON: on the H100 every one of 40 RL infra
// errors was this (json type_error 316 in the compile pool), and an infra error is never scored.
TEST(CompilePool, InvalidUtf8InTheSourceIsACompileErrorWithAValidLog) {
  CompileRequest r;
  r.format = SolutionFormat::kNative;
  r.native_source = "extern \"C\" int mc_forward() { int v = \"\xe4\xb8 \xff\xfe \xc0\x80\"; return v; }\n";
  auto first = pool().compile_now(r);
  ASSERT_EQ(first.status, CompileOutcome::Status::kCompileError) << first.error;
  EXPECT_TRUE(mc::is_valid_utf8(first.log)) << first.log;
  EXPECT_NO_THROW(nlohmann::json({{"log", first.log}}).dump());
  auto again = pool().compile_now(r);  // read back from the cache's status.json
  EXPECT_EQ(again.status, CompileOutcome::Status::kCompileError);
  EXPECT_TRUE(again.cached);
  EXPECT_EQ(again.log, first.log);
}

TEST(Utf8, ValidatesReplacesAndCutsAtCharacters) {
  using mc::is_valid_utf8;
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_TRUE(is_valid_utf8("\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf"));  // é 中 😀 U+10FFFF
  for (const char* bad : {"\xff", "\xc0\x80", "\xe0\x80\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe4\xb8",
                          "\x80", "a\xc3"})
    EXPECT_FALSE(is_valid_utf8(bad)) << bad;
  EXPECT_EQ(mc::valid_utf8("a\xff" "b\xe4\xb8"), "a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(mc::valid_utf8("\xe4\xb8\xad"), "\xe4\xb8\xad");
  const std::string zh = "\xe4\xb8\xad\xe4\xb8\xad";  // two 3-byte characters
  for (size_t n = 0; n <= zh.size(); ++n)
    EXPECT_EQ(mc::utf8_prefix(zh, n).size(), n / 3 * 3) << n;
  // A long line of such characters, cut by the log trimmer: still valid.
  std::string line = "x.cu(1): error: ";
  for (int i = 0; i < 200; ++i) line += "\xe4\xb8\xad";
  EXPECT_TRUE(is_valid_utf8(trim_compiler_log(line + "\n")));
}

// nvcc's phases run as planned from `nvcc --dryrun`, host and device side at once: the object
// defines the same symbols as plain nvcc's.
TEST(NvccPhases, PlannedPhasesBuildWhatPlainNvccBuilds) {
  mc::TempDir dir;
  mc::write_file_atomic(dir.path() / "cuda.cu",
                        "__global__ void scale(float* x, float a) { x[threadIdx.x] *= a; }\n"
                        "void launch(float* x) { scale<<<1, 32>>>(x, 2.f); }\n");
  auto nvcc = [&](const std::string& out) {
    return std::vector<std::string>{"nvcc", "-gencode=arch=compute_90,code=sm_90",
                                    "--compiler-options", "-fPIC", "-c", "cuda.cu", "-o", out};
  };
  std::string why;
  auto plan = mc::eval::plan_nvcc_phases(nvcc("phased.o"), dir.path().string(), "seed", &why);
  ASSERT_TRUE(plan) << why;
  auto bash = [&](const std::string& script) {
    mc::SubprocessOptions o;
    o.argv = {"/bin/bash", "-c", script};
    o.cwd = dir.path().string();
    return mc::run_command(o, 300000);
  };
  auto h = bash(plan->host_script);
  auto d = bash(plan->device_script);
  ASSERT_TRUE(h.status.ok()) << h.err;
  ASSERT_TRUE(d.status.ok()) << d.err;
  auto f = bash(plan->final_script);
  ASSERT_TRUE(f.status.ok()) << f.err;
  mc::SubprocessOptions plain;
  plain.argv = nvcc("plain.o");
  plain.cwd = dir.path().string();
  ASSERT_TRUE(mc::run_command(plain, 300000).status.ok());
  auto symbols = [&](const std::string& obj) {
    mc::SubprocessOptions o;
    o.argv = {"nm", "-g", "--defined-only", "-j", obj};
    o.cwd = dir.path().string();
    return mc::run_command(o, 60000).out;
  };
  EXPECT_FALSE(symbols("phased.o").empty());
  EXPECT_EQ(symbols("phased.o"), symbols("plain.o"));
}

// `prepare` builds the precompiled header once; a later call finds it in the cache.
TEST(CompilePool, PrepareBuildsThePrecompiledHeaderOnce) {
  EXPECT_EQ(pool().prepare(), "");
  CompilePool again(discover_toolchain("90"), CompilePoolOptions{1, mc::test::test_cache_dir(), 900});
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(again.prepare(), "");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
}
