// RFT's diverse selection on planted answers: exact duplicates, renamed copies, a slower twin,
// a near-duplicate, a distinct strategy, rejected and infra-error answers, and the per-problem
// cap filled across speed buckets.
#include "rft/selection.h"

#include <gtest/gtest.h>

#include <map>

#include "rft/report.h"

using namespace mc::rft;

namespace {

// One thread per row: sum a row of `cols` floats.
const char* kRowSum = R"(#include "musacoder/native_abi.h"
// one thread per output row
__global__ void row_sum(const float* in, float* out, int rows, int cols) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float acc = 0.f;
  for (int c = 0; c < cols; ++c) acc += in[(size_t)r * cols + c];
  out[r] = acc;
}
extern "C" int mc_forward(const mc_tensor* inputs, int n_inputs, mc_tensor* outputs, int n_outputs, cudaStream_t stream) {
  int rows = inputs[0].shape[0], cols = inputs[0].shape[1];
  row_sum<<<(rows + 255) / 256, 256, 0, stream>>>((const float*)inputs[0].data, (float*)outputs[0].data, rows, cols);
  return 0;
}
)";

// The same code with other comments and layout.
const char* kRowSumReformatted = R"(#include "musacoder/native_abi.h"
/* sums each row */
__global__ void row_sum(const float* in,float* out,int rows,int cols){
  int r=blockIdx.x*blockDim.x+threadIdx.x;   if(r>=rows) return;
  float acc=0.f; for(int c=0;c<cols;++c) acc+=in[(size_t)r*cols+c];
  out[r]=acc;
}
extern "C" int mc_forward(const mc_tensor* inputs, int n_inputs, mc_tensor* outputs, int n_outputs, cudaStream_t stream) {
  int rows = inputs[0].shape[0], cols = inputs[0].shape[1];  // 2-D input
  row_sum<<<(rows + 255) / 256, 256, 0, stream>>>((const float*)inputs[0].data, (float*)outputs[0].data, rows, cols);
  return 0;
}
)";

// Renamed: every name the answer chose is different.
const char* kRowSumRenamed = R"(#include "musacoder/native_abi.h"
__global__ void sum_rows_kernel(const float* src, float* dst, int R, int C) {
  int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= R) return;
  float total = 0.f;
  for (int j = 0; j < C; ++j) total += src[(size_t)row * C + j];
  dst[row] = total;
}
extern "C" int mc_forward(const mc_tensor* inputs, int n_inputs, mc_tensor* outputs, int n_outputs, cudaStream_t stream) {
  int R = inputs[0].shape[0], C = inputs[0].shape[1];
  sum_rows_kernel<<<(R + 255) / 256, 256, 0, stream>>>((const float*)inputs[0].data, (float*)outputs[0].data, R, C);
  return 0;
}
)";

// The same kernel with a block of 64: a twin.
const char* kRowSumBlock64 = R"(#include "musacoder/native_abi.h"
__global__ void row_sum(const float* in, float* out, int rows, int cols) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float acc = 0.f;
  for (int c = 0; c < cols; ++c) acc += in[(size_t)r * cols + c];
  out[r] = acc;
}
extern "C" int mc_forward(const mc_tensor* inputs, int n_inputs, mc_tensor* outputs, int n_outputs, cudaStream_t stream) {
  int rows = inputs[0].shape[0], cols = inputs[0].shape[1];
  row_sum<<<(rows + 63) / 64, 64, 0, stream>>>((const float*)inputs[0].data, (float*)outputs[0].data, rows, cols);
  return 0;
}
)";

// A distinct strategy: one block per row, strided partial sums, a shared-memory tree.
const char* kBlockReduce = R"(#include "musacoder/native_abi.h"
__global__ void row_sum_block(const float* __restrict__ in, float* __restrict__ out, int cols) {
  __shared__ float part[256];
  const float* row = in + (size_t)blockIdx.x * cols;
  float acc = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += row[c];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}
extern "C" int mc_forward(const mc_tensor* inputs, int n_inputs, mc_tensor* outputs, int n_outputs, cudaStream_t stream) {
  int rows = inputs[0].shape[0], cols = inputs[0].shape[1];
  row_sum_block<<<rows, 256, 0, stream>>>((const float*)inputs[0].data, (float*)outputs[0].data, cols);
  return 0;
}
)";

// The block reduction with one more guard: near, not equal.
const char* kBlockReduceGuarded = R"(#include "musacoder/native_abi.h"
__global__ void row_sum_block(const float* __restrict__ in, float* __restrict__ out, int cols) {
  __shared__ float part[256];
  const float* row = in + (size_t)blockIdx.x * cols;
  float acc = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += row[c];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}
extern "C" int mc_forward(const mc_tensor* inputs, int n_inputs, mc_tensor* outputs, int n_outputs, cudaStream_t stream) {
  if (n_inputs < 1 || n_outputs < 1) return 1;
  int rows = inputs[0].shape[0], cols = inputs[0].shape[1];
  row_sum_block<<<rows, 256, 0, stream>>>((const float*)inputs[0].data, (float*)outputs[0].data, cols);
  return 0;
}
)";

std::map<std::string, Decision> by_sample(const std::vector<RftAnswer>& a, const std::vector<Decision>& d) {
  std::map<std::string, Decision> m;
  for (size_t i = 0; i < a.size(); ++i) m[a[i].problem + "/" + a[i].sample_id] = d[i];
  return m;
}

}  // namespace

TEST(RftSimilarity, LexerDropsCommentsKeepsDirectivesAndReadsPythonStrings) {
  auto t = code_tokens("#include <x.h>\n# a python comment\nsrc = \"\"\"int a = 1; // c\n\"\"\"  /* b */ y");
  std::vector<std::string> want = {"#", "include", "<", "x", ".", "h", ">", "src", "=", "int", "a", "=", "1", ";", "y"};
  EXPECT_EQ(t, want);
  EXPECT_EQ(code_tokens("x = 1.5e-3f + .5"), (std::vector<std::string>{"x", "=", "1.5e-3f", "+", ".5"}));
}

TEST(RftSimilarity, ViewsSeparateLayoutNamesAndConstants) {
  auto a = fingerprint_code(kRowSum), b = fingerprint_code(kRowSumReformatted), c = fingerprint_code(kRowSumRenamed),
       d = fingerprint_code(kRowSumBlock64), e = fingerprint_code(kBlockReduce);
  EXPECT_EQ(a.exact, b.exact);
  EXPECT_NE(a.exact, c.exact);
  EXPECT_EQ(a.renamed, c.renamed);
  EXPECT_NE(a.renamed, d.renamed);
  EXPECT_EQ(a.structure, d.structure);
  EXPECT_NE(a.structure, e.structure);
  EXPECT_DOUBLE_EQ(jaccard(a.shingles, c.shingles), 1.0);
  EXPECT_LT(jaccard(a.shingles, e.shingles), 0.6);
  EXPECT_GE(jaccard(fingerprint_code(kBlockReduce).shingles, fingerprint_code(kBlockReduceGuarded).shingles), 0.8);
  EXPECT_DOUBLE_EQ(jaccard({1, 2, 3, 4}, {3, 4, 5, 6}), 2.0 / 6.0);
  EXPECT_DOUBLE_EQ(jaccard({}, {}), 1.0);
}

TEST(RftSelection, PlantedAnswersKeepAndDropWhatTheyShould) {
  // Input order puts the slower answers first: selection must still keep the faster ones.
  std::vector<RftAnswer> a = {
      // ..., tokens, tokens drawn at p < 0.1 (the sampler's logprobs; none for "lost")
      {"P1", "slow64", kRowSumBlock64, "ok", 1.1, 1000, 0},
      {"P1", "dup", kRowSumReformatted, "ok", 1.9, 1000, 0},
      {"P1", "renamed", kRowSumRenamed, "ok", 1.8, 1000, 1},
      {"P1", "base", kRowSum, "ok", 2.0, 1000, 0},
      {"P1", "block", kBlockReduce, "ok", 3.0, 1000, 0},
      {"P1", "block_guard", kBlockReduceGuarded, "ok", 2.9, 1000, 0},
      {"P1", "wrong", kBlockReduce, "incorrect", std::nullopt, 1000, 3},
      {"P1", "lost", kRowSum, "infra_error", std::nullopt, 0, std::nullopt},
      {"P2", "only_wrong", kRowSum, "compile_error", std::nullopt, 2000, 12},
  };
  SelectionOptions o;
  o.cap_per_problem = 4;
  std::vector<CodeFingerprint> prints;
  auto d = select_answers(a, o, &prints);
  auto m = by_sample(a, d);
  EXPECT_TRUE(m["P1/base"].kept);
  EXPECT_TRUE(m["P1/block"].kept);
  EXPECT_EQ(m["P1/dup"].reason, "duplicate");
  EXPECT_EQ(m["P1/dup"].twin, "base");
  EXPECT_EQ(m["P1/renamed"].reason, "renamed_copy");
  EXPECT_EQ(m["P1/renamed"].twin, "base");
  EXPECT_EQ(m["P1/slow64"].reason, "slower_twin");
  EXPECT_EQ(m["P1/slow64"].twin, "base");
  EXPECT_EQ(m["P1/block_guard"].reason, "near_duplicate");
  EXPECT_EQ(m["P1/block_guard"].twin, "block");
  EXPECT_GE(m["P1/block_guard"].similarity, 0.8);
  EXPECT_EQ(m["P1/wrong"].reason, "rejected");
  EXPECT_EQ(m["P1/lost"].reason, "infra_error");
  EXPECT_EQ(m["P2/only_wrong"].reason, "rejected");
  EXPECT_EQ(m["P1/base"].speed_bucket, 3);  // 2.0x: the 2-4x bucket
  EXPECT_EQ(speed_bucket(2.0), 3);
  EXPECT_EQ(speed_bucket(0.3), 0);
  EXPECT_EQ(speed_bucket(0.7), 1);
  EXPECT_EQ(speed_bucket(1.0), 2);
  EXPECT_EQ(speed_bucket(100.0), 4);
  EXPECT_EQ(speed_bucket(std::nullopt), -1);

  auto rep = make_report(a, d, prints, 3, o);
  EXPECT_EQ(rep.json["problems"], 3);
  EXPECT_EQ(rep.json["problems_covered"], 1);
  EXPECT_NEAR(rep.json["coverage"].get<double>(), 1.0 / 3.0, 1e-12);
  EXPECT_EQ(rep.json["kept"], 2);
  EXPECT_EQ(rep.json["dropped"]["duplicate"], 1);
  EXPECT_EQ(rep.json["dropped"]["rejected"], 2);
  EXPECT_EQ(rep.json["kept_per_problem_histogram"]["0"], 2);  // P2, and the problem with no answer
  // Selection leaves the kept answers less alike than the correct ones were.
  EXPECT_LT(rep.json["mean_pairwise_similarity_after"].get<double>(),
            rep.json["mean_pairwise_similarity_before"].get<double>());
  EXPECT_NEAR(rep.json["pass_rate"].get<double>(), 6.0 / 8.0, 1e-12);  // the infra error is not judged
  // Low-probability tokens by verdict; the answer without logprobs counts in none of them.
  const auto& lp = rep.json["low_prob_tokens"];
  EXPECT_NEAR(lp["per_1000_tokens"].get<double>(), 1000.0 * 16 / 9000, 1e-9);
  EXPECT_EQ(lp["by_verdict"]["ok"]["answers"], 6);
  EXPECT_EQ(lp["by_verdict"]["ok"]["median"], 0.0);
  EXPECT_NEAR(lp["by_verdict"]["ok"]["share_none"].get<double>(), 5.0 / 6.0, 1e-12);
  EXPECT_EQ(lp["by_verdict"]["compile_error"]["median"], 12.0);
  EXPECT_EQ(lp["by_verdict"]["incorrect"]["share_none"], 0.0);
  EXPECT_FALSE(lp["by_verdict"].contains("infra_error"));
  EXPECT_NE(rep.table.find("tokens drawn at p < 0.1"), std::string::npos) << rep.table;
  // Answers without logprobs (--samples-from an eval file): no section.
  for (auto& x : a) x.low_prob_tokens.reset();
  EXPECT_TRUE(make_report(a, d, prints, 3, o).json["low_prob_tokens"].is_null());
}

TEST(RftSelection, CapIsFilledAcrossSpeedBuckets) {
  // Six distinct strategies: four fast (>= 4x), one at 1-2x, one below 0.5x. A cap of 3 keeps the
  // fastest, then one from each slower bucket, instead of the three fastest.
  const char* bodies[] = {"out[i] = a[i] + b[i];", "out[i] = fmaf(a[i], 1.f, b[i]);", "float4 v = x4[i]; y4[i] = v;",
                          "for (int k = 0; k < 4; ++k) out[4 * i + k] = a[4 * i + k] + b[4 * i + k];",
                          "if (i < n) { out[i] = __ldg(a + i) + __ldg(b + i); }",
                          "while (i < n) { out[i] = a[i] + b[i]; i += gridDim.x * blockDim.x; }"};
  double speeds[] = {6.0, 5.0, 4.5, 4.2, 1.5, 0.3};
  std::vector<RftAnswer> a;
  for (int i = 0; i < 6; ++i)
    a.push_back({"P", std::to_string(i), std::string("__global__ void k(const float* a, const float* b, float* out, int n) { int i = threadIdx.x; ") +
                                                 bodies[i] + " }",
                 "ok", speeds[i], 0, std::nullopt});
  SelectionOptions o;
  o.cap_per_problem = 3;
  o.near_duplicate_jaccard = 0.95;  // these share their signature line; only exact views separate them
  auto d = select_answers(a, o);
  std::vector<std::string> kept;
  for (size_t i = 0; i < a.size(); ++i)
    if (d[i].kept) kept.push_back(a[i].sample_id);
  EXPECT_EQ(kept, (std::vector<std::string>{"0", "4", "5"}));
  EXPECT_EQ(d[1].reason, "over_cap");
  o.cap_per_problem = 0;
  for (const auto& x : select_answers(a, o)) EXPECT_TRUE(x.kept);
}
