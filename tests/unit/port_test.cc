// `musacoder port`: every rule family on CUDA snippets against expected MUSA text, the warnings
// of each unsafe construct (and none on a clean kernel), the round trip CUDA -> MUSA -> CUDA on
// every CUDA source the project verifies, the Python side of KernelBench problems and solutions,
// user rule files, and clear errors for malformed ones. All on the CPU: no MUSA toolchain here.
#include "eval/backend.h"
#include "port/porter.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "common/check.h"
#include "common/fs.h"
#include "common/subprocess.h"
#include "test_util.h"

using namespace mc::port;

namespace {

const RuleTable& table() {
  static const RuleTable t = load_rules();
  return t;
}

PortResult to_musa(const std::string& s) { return Porter(table(), Direction::kToMusa).port(s); }
PortResult to_cuda(const std::string& s) { return Porter(table(), Direction::kToCuda).port(s); }

std::set<std::string> warning_ids(const PortResult& r) {
  std::set<std::string> ids;
  for (const auto& w : r.warnings) ids.insert(w.id);
  return ids;
}

}  // namespace

TEST(Port, BuiltinTableLoadsWithSourcesAndLongestPrefixFirst) {
  const RuleTable& t = table();
  EXPECT_EQ(t.version, 1);
  EXPECT_GE(t.exact.size(), 150u);
  EXPECT_GE(t.includes.size(), 100u);
  EXPECT_GE(t.warnings.size(), 7u);
  for (size_t i = 1; i < t.prefixes.size(); ++i) EXPECT_GE(t.prefixes[i - 1].cuda.size(), t.prefixes[i].cuda.size());
  for (const auto* rows : {&t.prefixes, &t.exact, &t.includes, &t.text})
    for (const auto& r : *rows) EXPECT_FALSE(r.source.empty()) << r.cuda << " has no source";
}

TEST(Port, EveryRuleFamilyOnCudaSnippets) {
  const std::string cuda = R"(#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include "my_kernels.h"
#if CUDA_VERSION >= 12000 && CUDART_VERSION && defined(__CUDACC__)
#endif
__global__ void k(__nv_bfloat16* x, float* y, int n) { y[0] = 1e5f + 0x1f; }
void host(float* d, cudaStream_t s) {
  cudaMalloc(&d, 4 * sizeof(float));
  cudaMemcpyAsync(d, d, 4, cudaMemcpyHostToDevice, s);
  if (cudaGetLastError() != cudaSuccess) return;
  CUresult r = cuInit(0);
  cublasHandle_t h; cublasCreate(&h); auto op = CUBLAS_OP_N;
  curandState st;
  auto stream = at::cuda::getCurrentCUDAStream();
  c10::cuda::CUDAGuard guard(0);
  int cudaCount = 0;
}
)";
  const std::string musa = R"(#include <musa_runtime.h>
#include <mublas.h>
#include <musa_fp16.h>
#include <torch_musa/csrc/aten/musa/MUSAContext.h>
#include <torch_musa/csrc/core/MUSAGuard.h>
#include "my_kernels.h"
#if MUSA_COMP_VERSION >= 12000 && MUSART_VERSION && defined(__MUSACC__)
#endif
__global__ void k(__mt_bfloat16* x, float* y, int n) { y[0] = 1e5f + 0x1f; }
void host(float* d, musaStream_t s) {
  musaMalloc(&d, 4 * sizeof(float));
  musaMemcpyAsync(d, d, 4, musaMemcpyHostToDevice, s);
  if (musaGetLastError() != musaSuccess) return;
  MUresult r = muInit(0);
  mublasHandle_t h; mublasCreate(&h); auto op = MUBLAS_OP_N;
  murandState st;
  auto stream = at::musa::getCurrentMUSAStream();
  c10::musa::MUSAGuard guard(0);
  int musaCount = 0;
}
)";
  // A name of the source's own with a CUDA prefix (cudaCount) is renamed too, everywhere in the
  // file alike, as torch_musa's own porting does; the way back restores it.
  PortResult r = to_musa(cuda);
  EXPECT_EQ(r.text, musa);
  auto fam = r.by_family();
  for (const char* f : {"runtime", "driver", "blas", "rand", "macros", "types", "aten", "headers", "python"})
    EXPECT_GT(fam[f], 0) << "no change from family " << f;
  EXPECT_TRUE(r.warnings.empty()) << r.warnings.front().id << ": " << r.warnings.front().snippet;
}

TEST(Port, EachUnsafeConstructIsWarnedWithItsLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"warp_mask", "v = __ballot_sync(0xffffffff, p);"},
      {"warp_shuffle", "v += __shfl_down_sync(m, v, 16);"},
      {"lane_math", "int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;"},
      {"inline_ptx", "asm volatile(\"mov.u32 %0, %%laneid;\" : \"=r\"(l));"},
      {"cuda_only_library", "#include <cute/tensor.hpp>"},
      {"arch_intrinsic", "// wgmma.mma_async.sync.aligned.m64n128k16"},
      {"arch_test", "#if __CUDA_ARCH__ >= 800"},
      {"unported_library", "cudnnConvolutionForward(h, a, x);"},
  };
  for (const auto& [id, line] : cases) {
    PortResult r = to_musa("int a;\n" + line + "\n");
    ASSERT_TRUE(warning_ids(r).count(id)) << id << " did not fire on: " << line;
    for (const auto& w : r.warnings)
      if (w.id == id) EXPECT_EQ(w.line, 2) << id;
  }
  // A clean kernel: no warning at all.
  std::string clean = mc::read_file(mc::test::cases_dir() + "/gpu/honest/1_Add.py");
  EXPECT_TRUE(to_musa(clean).warnings.empty());
  // The way back warns of nothing: the warnings are about MUSA.
  EXPECT_TRUE(to_cuda(cases[0].second).warnings.empty());
}

// Every CUDA source the GPU suite and the benchmarks verify goes to MUSA and back unchanged,
// except where the forward port itself says the way back is lossy.
TEST(Port, RoundTripRestoresEveryVerifiedSource) {
  std::vector<std::string> files;
  for (const char* dir : {"tests/cases/gpu/honest", "tests/cases/gpu/native", "tests/cases/gpu/variants",
                          "tests/cases/cpu", "bench/kb_level1"})
    for (const auto& e : mc::fs::directory_iterator(mc::test::source_dir() + "/" + dir))
      if (e.path().extension() == ".py" || e.path().extension() == ".cu") files.push_back(e.path().string());
  ASSERT_GE(files.size(), 25u);
  int changed = 0;
  for (const auto& f : files) {
    std::string src = mc::read_file(f);
    PortResult fwd = to_musa(src);
    bool lossy = warning_ids(fwd).count("round_trip") > 0;
    if (fwd.text != src) ++changed;
    PortResult back = to_cuda(fwd.text);
    if (!lossy) EXPECT_EQ(back.text, src) << f;
  }
  EXPECT_GE(changed, 20) << "the sources should need porting";
}

TEST(Port, RoundTripWarnsWhereItWouldNotRestore) {
  // A CUDA source's own identifier that looks like a MUSA name is left alone on the way to
  // MUSA, but the way back would rewrite it: said, with its line.
  PortResult r = to_musa("float muSigma = 0;\n");
  EXPECT_EQ(r.text, "float muSigma = 0;\n");
  ASSERT_TRUE(warning_ids(r).count("round_trip"));
  EXPECT_EQ(to_cuda(r.text).text, "float cuSigma = 0;\n");
}

TEST(Port, PythonSideOfAProblemAndASolution) {
  const std::string problem = "import torch\n\ndef get_inputs():\n    return [torch.rand(8).cuda(), "
                              "torch.rand(8, device=\"cuda\")]\n\ntorch.cuda.synchronize()\n";
  EXPECT_EQ(to_musa(problem).text, "import torch\n\ndef get_inputs():\n    return [torch.rand(8).musa(), "
                                   "torch.rand(8, device=\"musa\")]\n\ntorch.musa.synchronize()\n");
  const std::string solution = mc::read_file(mc::test::cases_dir() + "/gpu/honest/5_Matmul.py");
  PortResult r = to_musa(solution);
  EXPECT_NE(r.text.find("from torch_musa.utils.musa_extension import load_inline"), std::string::npos) << r.text;
  EXPECT_EQ(r.text.find("torch.utils.cpp_extension"), std::string::npos);
  EXPECT_NE(r.text.find("musa_sources=musa_src"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("at::musa::getCurrentMUSAStream()"), std::string::npos);
  EXPECT_NE(r.text.find("torch_musa/csrc/aten/musa/MUSAContext.h"), std::string::npos);
  EXPECT_EQ(to_cuda(r.text).text, solution);
  // load_inline's other CUDA keywords.
  EXPECT_EQ(to_musa("load_inline(name='x', cpp_sources=s, with_cuda=True, extra_cuda_cflags=['-O3'])\n").text,
            "load_inline(name='x', cpp_sources=s, with_musa=True, extra_musa_cflags=['-O3'])\n");
}

TEST(Port, UserRulesApplyAndMalformedFilesAreNamed) {
  mc::TempDir dir;
  auto extra = (dir.path() / "extra.toml").string();
  mc::write_file_atomic(extra,
                        "version = 1\n[[exact]]\ncuda = \"myCudaHelper\"\nmusa = \"myMusaHelper\"\nfamily = \"user\"\n"
                        "[[exact]]\ncuda = \"cudaMalloc\"\nmusa = \"musaMallocPitchless\"\n"
                        "[[warn]]\nid = \"no_printf\"\npattern = \"printf\\\\(\"\nmessage = \"device printf\"\n");
  RuleTable t = load_rules({extra});
  PortResult r = Porter(t, Direction::kToMusa).port("myCudaHelper(); cudaMalloc(p, 4); printf(\"x\");\n");
  EXPECT_EQ(r.text, "myMusaHelper(); musaMallocPitchless(p, 4); printf(\"x\");\n");
  EXPECT_TRUE(warning_ids(r).count("no_printf"));
  auto expect_error = [&](const std::string& body, const std::string& needle) {
    auto p = (dir.path() / "bad.toml").string();
    mc::write_file_atomic(p, body);
    RuleTable bad;
    try {
      bad.load(p);
      ADD_FAILURE() << "no error for: " << body;
    } catch (const mc::Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("bad.toml"), std::string::npos) << msg;
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    }
  };
  expect_error("[[exact]]\ncuda = \"a\"\n", "[[exact]] 1: 'musa' is missing");
  expect_error("[[exact]]\ncuda = \"a\"\nmusa = 3\n", "'musa' must be a string");
  expect_error("[[warn]]\nid = \"w\"\npattern = \"(\"\nmessage = \"m\"\n", "is not a regular expression");
  expect_error("[[rename]]\ncuda = \"a\"\nmusa = \"b\"\n", "unknown section 'rename'");
  expect_error("version = 2\n", "version must be 1");
  expect_error("[[exact\n", "not a TOML rule table");
  EXPECT_THROW(load_rules({(dir.path() / "missing.toml").string()}), mc::Error);
}

TEST(Port, FileNamesFollowTheBackend) {
  EXPECT_EQ(ported_name("k.cu", Direction::kToMusa), "k.mu");
  EXPECT_EQ(ported_name("k.cuh", Direction::kToMusa), "k.muh");
  EXPECT_EQ(ported_name("k.mu", Direction::kToCuda), "k.cu");
  EXPECT_EQ(ported_name("k.py", Direction::kToMusa), "k.py");
}

// The command on a folder: files renamed, the summary as JSON, warnings with file:line.
TEST(Port, CommandPortsAFolderAndSummarizes) {
  mc::TempDir dir;
  auto in = dir.path() / "in";
  mc::fs::create_directories(in / "sub");
  mc::write_file_atomic(in / "sub" / "k.cu", "#include <cuda_runtime.h>\nunsigned m = 0xffffffff;\n");
  mc::fs::copy(mc::test::cases_dir() + "/gpu/honest/1_Add.py", in / "add.py");
  mc::write_file_atomic(in / "notes.txt", "cuda stays\n");
  mc::SubprocessOptions o;
  o.argv = {MUSACODER_BINARY, "port", "--to", "musa", in.string(), "-o", (dir.path() / "out").string(), "--json"};
  auto r = mc::run_command(o, 60000);
  ASSERT_TRUE(r.status.ok()) << r.out << r.err;
  EXPECT_TRUE(mc::fs::exists(dir.path() / "out" / "sub" / "k.mu"));
  EXPECT_EQ(mc::read_file(dir.path() / "out" / "notes.txt"), "cuda stays\n");
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["files"].size(), 2u);
  EXPECT_NE(r.err.find("k.cu:2: warning [warp_mask]"), std::string::npos) << r.err;
  // Bad input: a clear error and exit 2.
  o.argv = {MUSACODER_BINARY, "port", "--to", "musa", (dir.path() / "nope").string()};
  r = mc::run_command(o, 60000);
  EXPECT_EQ(r.status.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
}

// --backend musa where the MUSA toolchain is missing: a clear refusal naming what is missing,
// exit 2, and nothing judged on CUDA instead.
TEST(Port, BackendMusaWithoutItsToolchainIsRefused) {
  mc::TempDir dir;
  auto out = dir.path() / "rows.jsonl";
  for (std::vector<std::string> argv :
       {std::vector<std::string>{"eval", "--problems", mc::test::cases_dir() + "/problems", "--solutions",
                                 mc::test::cases_dir() + "/cpu/honest_add.py", "--device", "cpu", "--out", out.string()},
        std::vector<std::string>{"selftest", "--problems", mc::test::cases_dir() + "/problems", "--device", "cpu",
                                 "--out", (dir.path() / "st").string()},
        std::vector<std::string>{"worker", "--redis", "redis://127.0.0.1:1", "--role", "gpu", "--device", "cpu"},
        std::vector<std::string>{"train", "rl", "--model", (dir.path() / "no-model").string(), "--problems",
                                 mc::test::cases_dir() + "/problems", "--out", (dir.path() / "rl").string(),
                                 "--verify-device", "cpu"}}) {
    mc::SubprocessOptions o;
    o.argv = {MUSACODER_BINARY};
    o.argv.insert(o.argv.end(), argv.begin(), argv.end());
    o.argv.insert(o.argv.end(), {"--backend", "musa"});
    o.env_set["MUSA_HOME"] = (dir.path() / "no-musa").string();
    auto r = mc::run_command(o, 120000);
    EXPECT_EQ(r.status.exit_code, 2) << argv[0] << ": " << r.out << r.err;
    EXPECT_NE(r.err.find("--backend musa"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("mcc"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("torch_musa"), std::string::npos) << r.err;
    // ... and what the MUSA judge would use, from src/eval/backends.toml.
    EXPECT_NE(r.err.find("--offload-arch=mp_{arch}"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("runtime musart"), std::string::npos) << r.err;
    EXPECT_FALSE(mc::fs::exists(out)) << "rows were written: something was judged";
  }
}

// The backend table is data: both backends have the fields a judge needs, every musa fact
// cites torch_musa (file and lines), and a malformed table is named.
TEST(Backends, TableLoadsAndMusaRowsCiteTheirSource) {
  auto t = mc::eval::load_backends();
  ASSERT_TRUE(t.count("cuda") && t.count("musa"));
  EXPECT_EQ(t.at("cuda").at("compiler"), "nvcc");
  EXPECT_EQ(t.at("cuda").at("device"), "cuda");
  const auto& m = t.at("musa");
  EXPECT_EQ(m.at("compiler"), "mcc");
  EXPECT_EQ(m.at("device"), "musa");
  EXPECT_EQ(m.at("source_ext"), ".mu");
  for (const auto& [k, v] : m.fields)
    if (k.size() > 7 && k.compare(k.size() - 7, 7, "_source") == 0)
      EXPECT_TRUE(v.rfind("torch_musa/", 0) == 0 || v.rfind("TORCH_MUSA", 0) == 0) << k << ": " << v;
  for (const char* cited : {"compiler_source", "arch_source", "device_source", "link_source", "stream_source",
                            "vendor_source", "ext_source"})
    EXPECT_TRUE(m.fields.count(cited)) << cited;
  EXPECT_THROW(mc::eval::backend("rocm"), mc::Error);
  mc::TempDir dir;
  mc::write_file_atomic(dir.path() / "b.toml", "[cuda]\ncompiler = \"nvcc\"\n");
  try {
    mc::eval::load_backends((dir.path() / "b.toml").string());
    ADD_FAILURE() << "accepted a backend without a device";
  } catch (const mc::Error& e) {
    EXPECT_NE(std::string(e.what()).find("[cuda] has no 'device'"), std::string::npos) << e.what();
  }
}

// `musacoder port-bench`: a KernelBench repository (problems under KernelBench/levelN, baseline
// timings under results/timing) becomes its MUSA twin. A problem that names no device comes out
// byte for byte; one that does is ported; the prompt's one-shot example is ported and the prompt
// says MUSA; CUDA GPUs' timings are listed, not carried; the manifest holds every change.
TEST(Port, PortBenchCarriesAKernelBenchRepository) {
  mc::TempDir dir;
  auto repo = dir.path() / "KernelBench-repo";
  auto l1 = repo / "KernelBench" / "level1", l2 = repo / "KernelBench" / "level2";
  mc::fs::create_directories(l1);
  mc::fs::create_directories(l2);
  mc::fs::create_directories(repo / "results" / "timing" / "H100");
  mc::fs::copy(mc::test::cases_dir() + "/problems/1_Add.py", l1 / "1_Add.py");
  const std::string named =
      "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
      "        return torch.relu(x)\n\ndef get_inputs():\n    return [torch.rand(8).cuda()]\n\n"
      "def get_init_inputs():\n    return []\n";
  mc::write_file_atomic(l2 / "7_Named.py", named);
  mc::write_file_atomic(repo / "results" / "timing" / "H100" / "baseline_time_torch.json", "{}\n");
  auto out = dir.path() / "KernelBench-MUSA";
  mc::SubprocessOptions o;
  o.argv = {MUSACODER_BINARY, "port-bench", repo.string(), "-o", out.string()};
  auto r = mc::run_command(o, 60000);
  ASSERT_TRUE(r.status.ok()) << r.out << r.err;
  EXPECT_NE(r.out.find("port-bench: 2 files"), std::string::npos) << r.out;
  EXPECT_EQ(mc::read_file(out / "level1" / "1_Add.py"), mc::read_file(l1 / "1_Add.py"));
  const std::string ported = mc::read_file(out / "level2" / "7_Named.py");
  EXPECT_NE(ported.find("torch.rand(8).musa()"), std::string::npos) << ported;
  const std::string example = mc::read_file(out / "prompt" / "model_new_ex_add.py");
  EXPECT_NE(example.find("musa_runtime.h"), std::string::npos) << example;
  EXPECT_NE(example.find("torch_musa"), std::string::npos) << example;
  EXPECT_EQ(example.find("cuda_runtime.h"), std::string::npos) << example;
  const std::string prompt = mc::read_file(out / "prompt" / "example_prompt.txt");
  EXPECT_NE(prompt.find("custom MUSA operators"), std::string::npos);
  EXPECT_EQ(prompt.find("CUDA operators"), std::string::npos);
  EXPECT_NE(prompt.find(".musa()"), std::string::npos);  // the example's inputs

  auto m = nlohmann::json::parse(mc::read_file(out / "manifest.json"));
  EXPECT_EQ(m["totals"]["files"].get<int>(), 2);
  EXPECT_EQ(m["totals"]["changed"].get<int>(), 1);
  EXPECT_EQ(m["levels"]["level1"]["changed"].get<int>(), 0);
  bool seen = false;
  for (const auto& f : m["files"]) {
    if (f["file"] != "level2/7_Named.py") continue;
    seen = true;
    EXPECT_TRUE(f["changed"].get<bool>());
    ASSERT_FALSE(f["changes"].empty());
    EXPECT_EQ(f["changes"][0]["line"].get<int>(), 9) << f.dump();
    EXPECT_NE(f["sha256_in"], f["sha256_out"]);
  }
  EXPECT_TRUE(seen);
  ASSERT_EQ(m["added"].size(), 3u);
  EXPECT_FALSE(m["added"][1]["changes"].empty()) << m["added"].dump();
  ASSERT_EQ(m["not_carried"].size(), 1u);
  EXPECT_EQ(m["not_carried"][0]["files"][0], "H100/baseline_time_torch.json");
  // Again into the same folder: allowed (it holds an earlier port's manifest), same result.
  r = mc::run_command(o, 60000);
  EXPECT_TRUE(r.status.ok()) << r.err;
  EXPECT_EQ(nlohmann::json::parse(mc::read_file(out / "manifest.json"))["files"], m["files"]);

  // Bad input: named, exit 2, and nothing written where it should not be.
  auto refused = [&](std::vector<std::string> argv, const std::string& says) {
    mc::SubprocessOptions b;
    b.argv = {MUSACODER_BINARY, "port-bench"};
    b.argv.insert(b.argv.end(), argv.begin(), argv.end());
    auto rr = mc::run_command(b, 60000);
    EXPECT_EQ(rr.status.exit_code, 2) << rr.out << rr.err;
    EXPECT_NE(rr.err.find(says), std::string::npos) << rr.err;
  };
  refused({(dir.path() / "nope").string(), "-o", (dir.path() / "o1").string()}, "is not a folder");
  refused({out.string() + "/prompt", "-o", (dir.path() / "o2").string()}, "no level folders");
  refused({repo.string(), "-o", (repo / "KernelBench" / "musa").string()}, "lies inside the benchmark");
  mc::write_file_atomic(dir.path() / "busy" / "mine.txt", "keep\n");
  refused({repo.string(), "-o", (dir.path() / "busy").string()}, "no manifest.json of an earlier port");
  EXPECT_FALSE(mc::fs::exists(dir.path() / "o1"));
}
