// bench-model's metrics on hand-made outcomes: the unbiased pass@k estimator against its
// closed form, Avg@k, fast_p (KernelBench's definition), Faster, infra errors left unscored,
// the bootstrap intervals of pass@1 and of the paired difference between two runs, and
// KernelBench's prompt composition.
#include <gtest/gtest.h>

#include <cmath>

#include "synth/kernelbench_prompt.h"
#include "bench/metrics.h"
#include "bench/uncertainty.h"
#include "common/check.h"

namespace mc::bench {
namespace {

using synth::kernelbench_example;
using synth::kernelbench_prompt;

double binom(int n, int k) {
  if (k < 0 || k > n) return 0;
  double r = 1;
  for (int i = 1; i <= k; ++i) r = r * (n - k + i) / i;
  return r;
}

TEST(BenchMetrics, PassAtKEqualsTheClosedForm) {
  for (int n : {1, 2, 5, 8, 16, 50})
    for (int c = 0; c <= n; ++c)
      for (int k = 1; k <= n; ++k)
        EXPECT_NEAR(pass_at_k(n, c, k), 1.0 - binom(n - c, k) / binom(n, k), 1e-12) << n << " " << c << " " << k;
  EXPECT_DOUBLE_EQ(pass_at_k(8, 2, 1), 0.25);
  EXPECT_DOUBLE_EQ(pass_at_k(3, 1, 5), 1.0);  // fewer samples than k: passed iff any is correct
  EXPECT_DOUBLE_EQ(pass_at_k(3, 0, 5), 0.0);
  EXPECT_THROW(pass_at_k(3, 4, 1), Error);
}

SampleOutcome ok(const std::string& p, int s, double speedup, std::optional<double> ratio = std::nullopt) {
  SampleOutcome o;
  o.problem = p;
  o.sample = s;
  o.judged = o.compiled = o.correct = o.legal = true;
  o.verdict = "ok";
  o.speedup_eager = speedup;
  o.compile_over_eager = ratio;
  return o;
}

SampleOutcome failed(const std::string& p, int s, const std::string& verdict, bool judged = true) {
  SampleOutcome o;
  o.problem = p;
  o.sample = s;
  o.judged = judged;
  o.verdict = verdict;
  o.compiled = verdict != "compile_error" && verdict != "extract_error";
  o.legal = o.compiled && verdict != "illegal";
  if (verdict == "illegal") o.rules = {"torch_compute"};
  return o;
}

TEST(BenchMetrics, AvgFastPFasterOnHandMadeRows) {
  // A: 2 of 4 correct (0.5x and 3x eager); B: 1 of 4 (1.2x); C: none; D: no judged sample.
  std::vector<SampleOutcome> rows = {
      ok("A", 0, 0.5, 2.0), ok("A", 1, 3.0, 2.0), failed("A", 2, "incorrect"), failed("A", 3, "compile_error"),
      ok("B", 0, 1.2, 0.5), failed("B", 1, "illegal"), failed("B", 2, "incorrect"), failed("B", 3, "timeout"),
      failed("C", 0, "extract_error"), failed("C", 1, "incorrect"), failed("C", 2, "incorrect"), failed("C", 3, "incorrect"),
      failed("D", 0, "infra_error", false), failed("D", 1, "infra_error", false)};
  std::vector<std::string> set = {"A", "B", "C", "D"};
  Metrics m = compute_metrics(rows, set, {1, 4});
  EXPECT_EQ(m.problems, 4);
  EXPECT_EQ(m.scored_problems, 3);  // D: infra errors only, not scored 0
  EXPECT_EQ(m.infra_errors, 2);
  EXPECT_EQ(m.samples, 12);
  EXPECT_NEAR(m.pass_at[1], (0.5 + 0.25 + 0) / 3, 1e-12);
  EXPECT_NEAR(m.pass_at[4], 2.0 / 3, 1e-12);
  EXPECT_NEAR(m.avg_at_k, (0.5 + 0.25 + 0) / 3, 1e-12);
  EXPECT_NEAR(m.fast_eager[0.0], (2 / 4.0 + 1 / 4.0) / 3, 1e-12);
  EXPECT_NEAR(m.fast_eager[1.0], (1 / 4.0 + 1 / 4.0) / 3, 1e-12);
  EXPECT_NEAR(m.fast_eager[1.1], (1 / 4.0 + 1 / 4.0) / 3, 1e-12);
  EXPECT_NEAR(m.fast_eager[2.0], (1 / 4.0) / 3, 1e-12);
  // vs torch.compile: A's compiled reference is 2x slower than eager (compile_ms / eager_ms = 2),
  // so its speedups vs compile are 1.0 and 6.0; B's is 2x faster, so 1.2x eager is 0.6x compile.
  EXPECT_NEAR(m.fast_compile[1.0], (1 / 4.0) / 3, 1e-12);
  EXPECT_NEAR(m.fast_compile[0.0], m.fast_eager[0.0], 1e-12);
  EXPECT_NEAR(m.faster, 2.0 / 3, 1e-12);  // A (3x) and B (1.2x) beat 1.1x
  EXPECT_NEAR(m.geomean_speedup, std::cbrt(0.5 * 3.0 * 1.2), 1e-12);
  EXPECT_NEAR(m.correct, 3.0 / 12, 1e-12);
  EXPECT_EQ(m.rules["torch_compute"], 1);
  EXPECT_EQ(m.verdicts["incorrect"], 5);
  // A flagged speedup arrives without speedup_eager: correct, not faster.
  SampleOutcome flagged = ok("E", 0, 1);
  flagged.speedup_eager.reset();
  Metrics f = compute_metrics({flagged}, {"E"}, {1});
  EXPECT_DOUBLE_EQ(f.fast_eager[0.0], 1.0);
  EXPECT_DOUBLE_EQ(f.fast_eager[1.0], 0.0);
  EXPECT_DOUBLE_EQ(f.faster, 0.0);
}

TEST(BenchMetrics, KernelBenchPromptHasItsParts) {
  std::string p = kernelbench_prompt("class Model:\n    pass  # {not a field}\n", "fp16");
  EXPECT_EQ(p.rfind("You write custom CUDA operators to replace the pytorch operators", 0), 0u);
  EXPECT_NE(p.find("Example:\n\nInput architecture:\n\nimport torch"), std::string::npos);
  EXPECT_NE(p.find("You are given the following architecture:\n\n\nclass Model:\n    pass  # {not a field}\n"), std::string::npos);
  EXPECT_NE(p.find("Note: The kernels should be optimized for FP16 (16-bit floating point) precision."), std::string::npos);
  EXPECT_TRUE(p.ends_with("and NO testing code!\n"));
  EXPECT_THROW(kernelbench_prompt("x", "fp8"), Error);
  // The MUSA prompt: the same template, MUSA operators, the example through the port's rules.
  std::string m = kernelbench_prompt("class Model:\n    pass\n", "fp32", "musa");
  EXPECT_EQ(m.rfind("You write custom MUSA operators to replace the pytorch operators", 0), 0u);
  EXPECT_EQ(m.find("CUDA operators"), std::string::npos);
  EXPECT_NE(m.find("a = torch.randn(1, 128).musa()"), std::string::npos);
  EXPECT_NE(m.find("#include <musa_runtime.h>"), std::string::npos);
  EXPECT_EQ(m.find("cuda_runtime"), std::string::npos);
  EXPECT_EQ(kernelbench_example("cuda").new_arch.find("musa"), std::string::npos);
  EXPECT_THROW(kernelbench_prompt("x", "fp32", "rocm"), Error);
}


// pass@1's interval: none where every problem scores the same, the textbook width where they
// differ (100 problems half passed: 50% +- 1.96 * sqrt(0.25 / 100) = 9.8 points), the same
// numbers for the same seed, and only judged samples count.
TEST(BenchUncertainty, Pass1IntervalIsTheBootstrapOverProblems) {
  ProblemCounts same;
  for (int i = 0; i < 20; ++i) same["p" + std::to_string(i)] = {4, 1};
  Interval flat = pass1_interval(same);
  EXPECT_DOUBLE_EQ(flat.value, 0.25);
  EXPECT_DOUBLE_EQ(flat.lo, 0.25);
  EXPECT_DOUBLE_EQ(flat.hi, 0.25);
  ProblemCounts half;
  for (int i = 0; i < 100; ++i) half["p" + std::to_string(i)] = {1, i % 2};
  Interval w = pass1_interval(half);
  EXPECT_DOUBLE_EQ(w.value, 0.5);
  EXPECT_NEAR(w.lo, 0.402, 0.015);
  EXPECT_NEAR(w.hi, 0.598, 0.015);
  Interval again = pass1_interval(half);
  EXPECT_EQ(again.lo, w.lo);
  EXPECT_EQ(again.hi, w.hi);
  half["unscored"] = {0, 0};  // every sample an infra error: not a problem of the estimate
  EXPECT_DOUBLE_EQ(pass1_interval(half).value, 0.5);
  EXPECT_DOUBLE_EQ(pass1_interval({}).value, 0.0);

  std::vector<SampleOutcome> outs = {ok("a", 0, 1.0), failed("a", 1, "incorrect"), failed("b", 0, "compile_error"),
                                     failed("b", 1, "infra_error", false)};
  ProblemCounts c = problem_counts(outs, {"a", "b", "c"});
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(c["a"], std::make_pair(2, 1));
  EXPECT_EQ(c["b"], std::make_pair(1, 0));
}

// Two runs' difference, paired over the problems both scored: zero for the same run; one
// problem of 28 up by a quarter is +0.9 points with an interval from 0 (most resamples keep
// it once or not at all); a shift on every problem excludes 0.
TEST(BenchUncertainty, Pass1DifferenceIsPairedOverSharedProblems) {
  ProblemCounts a, b;
  for (int i = 0; i < 28; ++i) a["p" + std::to_string(i)] = b["p" + std::to_string(i)] = {4, i % 3 == 0 ? 2 : 0};
  Difference none = pass1_difference(a, a);
  EXPECT_EQ(none.problems, 28);
  EXPECT_DOUBLE_EQ(none.delta.value, 0);
  EXPECT_DOUBLE_EQ(none.delta.lo, 0);
  EXPECT_DOUBLE_EQ(none.delta.hi, 0);
  b["p1"] = {4, 1};
  Difference one = pass1_difference(a, b);
  EXPECT_EQ(one.better, 1);
  EXPECT_EQ(one.worse, 0);
  EXPECT_NEAR(one.delta.value, 0.25 / 28, 1e-12);
  EXPECT_DOUBLE_EQ(one.delta.lo, 0);
  EXPECT_GT(one.delta.hi, one.delta.value);
  ProblemCounts up;
  for (const auto& [k, nc] : a) up[k] = {4, nc.second + 1};
  up["only-in-b"] = {4, 4};  // not in a: left out of the pairing
  Difference all = pass1_difference(a, up);
  EXPECT_EQ(all.problems, 28);
  EXPECT_EQ(all.better, 28);
  EXPECT_DOUBLE_EQ(all.delta.value, 0.25);
  EXPECT_DOUBLE_EQ(all.delta.lo, 0.25);  // the same shift everywhere: no spread at all
}

}  // namespace
}  // namespace mc::bench
