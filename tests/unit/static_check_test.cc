#include "eval/static_check.h"

#include <gtest/gtest.h>

#include "common/fs.h"
#include "eval/extract.h"
#include "test_util.h"

using namespace mc::eval;

namespace {

std::set<std::string> rules_fired(const std::string& path, const StaticCheckOptions& o = {}) {
  auto ex = extract_solution(mc::read_file(path));
  EXPECT_TRUE(ex.ok) << path << ": " << ex.error;
  std::set<std::string> out;
  for (const auto& v : static_check(ex.code, ex.format, o)) out.insert(v.rule);
  return out;
}

// Every case file states its verdict; a static_violation names the rule that must fire,
// anything else means no static rule may fire (no false positives on honest code).
void check_folder(const std::string& folder) {
  for (const auto& path : mc::test::case_files(folder)) {
    std::string expect = mc::test::case_header(path, "expect");
    if (expect.empty() || expect == "extract_error") continue;
    auto fired = rules_fired(path);
    if (expect.rfind("static_violation", 0) == 0) {
      std::string rule = expect.substr(expect.find(' ') + 1);
      EXPECT_TRUE(fired.count(rule)) << path << ": rule " << rule << " did not fire";
    } else if (mc::test::case_header(path, "skip-static").empty()) {
      std::string all;
      for (const auto& r : fired) all += r + " ";
      EXPECT_TRUE(fired.empty()) << path << ": expected no static rule, got " << all;
    }
  }
}

}  // namespace

TEST(StaticCheck, OneCaseFilePerHackClass) { check_folder("hacks"); }
TEST(StaticCheck, HonestGpuCasesPass) { check_folder("gpu/honest"); }
TEST(StaticCheck, NativeCasesPass) { check_folder("gpu/native"); }
TEST(StaticCheck, HonestGpuVariantsPass) { check_folder("gpu/variants"); }
TEST(StaticCheck, FaultCasesAreNotStaticViolations) { check_folder("faults"); }
TEST(StaticCheck, CpuCases) { check_folder("cpu"); }

TEST(StaticCheck, EveryHackClassIsCovered) {
  std::set<std::string> covered;
  for (const auto& path : mc::test::case_files("hacks")) {
    std::string e = mc::test::case_header(path, "expect");
    if (e.rfind("static_violation", 0) == 0) covered.insert(e.substr(e.find(' ') + 1));
  }
  for (const char* rule : {"torch_compute", "try_except_fallback", "library_call", "output_cache",
                           "side_stream", "monkeypatch", "stack_inspection", "input_mutation",
                           "tensor_subclass", "precision_drop", "stale_result", "thread",
                           "file_access", "process_access", "network_access", "dynamic_code"})
    EXPECT_TRUE(covered.count(rule)) << "no hack case for rule " << rule;
}

TEST(StaticCheck, RelaxationsAndPrecision) {
  std::string hacks = mc::test::cases_dir() + "/hacks/";
  StaticCheckOptions fp16;
  fp16.precision = "fp16";
  EXPECT_FALSE(rules_fired(hacks + "precision_drop.py", fp16).count("precision_drop"));
  StaticCheckOptions cublas;
  cublas.allow = {"cublas"};
  EXPECT_FALSE(rules_fired(hacks + "decoy_cublas.py", cublas).count("library_call"));
}

TEST(StaticCheck, ReportsLineAndSnippet) {
  std::string code =
      "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
      "        return torch.relu(x)\n";
  auto v = static_check(code, SolutionFormat::kKernelBench);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].rule, "torch_compute");
  EXPECT_EQ(v[0].line, 4);
  EXPECT_EQ(v[0].snippet, "return torch.relu(x)");
}

TEST(StaticCheck, OwnExtensionMethodsAreNotTorchOps) {
  std::string code =
      "ext = load_inline(name='a', cpp_sources='')\nclass ModelNew(nn.Module):\n"
      "    def __init__(self):\n        super().__init__()\n        self.k = ext\n"
      "    def forward(self, x):\n        return self.k.add(x, x)\n";
  EXPECT_TRUE(static_check(code, SolutionFormat::kKernelBench).empty());
}

// stale_result fires on static *state*, never on static functions, read-only tables or
// compile-time constants (a false positive here scores an honest kernel -1).
TEST(StaticCheck, StaleResultOnlyOnMutableStatics) {
  auto fires = [](const std::string& cpp) {
    for (const auto& v : static_check(cpp, SolutionFormat::kNative))
      if (v.rule == "stale_result") return true;
    return false;
  };
  // Not state: each of these must stay quiet.
  EXPECT_FALSE(fires("static unsigned int grid_for(int64_t n, unsigned b) { return (n + b - 1) / b; }"));
  EXPECT_FALSE(fires("static int ceil_div(int a, int b) { return (a + b - 1) / b; }"));
  EXPECT_FALSE(fires("static inline bool is_aligned(const void* p) { return true; }"));
  EXPECT_FALSE(fires("static __device__ __forceinline__ float relu(float x) { return x; }"));
  EXPECT_FALSE(fires("static const float kTable[4] = {1.f, 2.f, 3.f, 4.f};"));
  EXPECT_FALSE(fires("static const int kBlock = 256;"));
  EXPECT_FALSE(fires("static constexpr int kVec = 4;"));
  EXPECT_FALSE(fires("constexpr int kThreads = 256;"));
  EXPECT_FALSE(fires("__constant__ float c_scale[16];"));
  EXPECT_FALSE(fires("static_assert(sizeof(float) == 4, \"float\");"));
  EXPECT_FALSE(fires("auto n = static_cast<int>(x.numel());"));
  // State: each of these must fire.
  EXPECT_TRUE(fires("torch::Tensor f(torch::Tensor a) { static int calls = 0; ++calls; return a; }"));
  EXPECT_TRUE(fires("static bool warm;"));
  EXPECT_TRUE(fires("static unsigned long long n_calls = 0;"));
  EXPECT_TRUE(fires("static std::atomic<int> counter{0};"));
  EXPECT_TRUE(fires("static int64_t seen[8];"));
  EXPECT_TRUE(fires("static float* last_out = nullptr;"));
  EXPECT_TRUE(fires("static thread_local int depth = 0;"));
}
