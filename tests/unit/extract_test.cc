#include "eval/extract.h"

#include <gtest/gtest.h>

using mc::eval::extract_solution;
using mc::eval::SolutionFormat;

TEST(Extract, PlainPythonSource) {
  auto ex = extract_solution("import torch\nclass ModelNew(torch.nn.Module):\n    pass\n");
  ASSERT_TRUE(ex.ok);
  EXPECT_EQ(ex.format, SolutionFormat::kKernelBench);
}

TEST(Extract, PicksLastBlockWithModelNewAndDropsThinking) {
  std::string answer =
      "<think>class ModelNew: draft</think>\nFirst try:\n```python\nprint('helper')\n```\n"
      "Final:\n```python\nclass ModelNew(nn.Module):\n    final = 1\n```\nDone.";
  auto ex = extract_solution(answer);
  ASSERT_TRUE(ex.ok);
  EXPECT_NE(ex.code.find("final = 1"), std::string::npos);
  EXPECT_EQ(ex.code.find("draft"), std::string::npos);
}

TEST(Extract, UnterminatedFenceFromTruncatedAnswer) {
  auto ex = extract_solution("Here:\n```python\nclass ModelNew(nn.Module):\n    x = 1\n");
  ASSERT_TRUE(ex.ok);
  EXPECT_NE(ex.code.find("x = 1"), std::string::npos);
}

TEST(Extract, NativeFormat) {
  auto ex = extract_solution("```cuda\nextern \"C\" int mc_forward(const mc_tensor* in, int n) {}\n```");
  ASSERT_TRUE(ex.ok);
  EXPECT_EQ(ex.format, SolutionFormat::kNative);
}

TEST(Extract, ClearErrors) {
  EXPECT_EQ(extract_solution("").error, "empty answer");
  EXPECT_EQ(extract_solution("  \n\t").error, "empty answer");
  EXPECT_NE(extract_solution("<think>only thoughts</think>").error.find("only reasoning"), std::string::npos);
  auto ex = extract_solution("```python\nprint(1)\n```");
  EXPECT_FALSE(ex.ok);
  EXPECT_NE(ex.error.find("ModelNew"), std::string::npos);
}

TEST(Extract, PrefersTheFencedBlockOverTheSurroundingProse) {
  auto ex = extract_solution("I will write class ModelNew below.\n```python\nclass ModelNew(nn.Module):\n    pass\n```\n");
  ASSERT_TRUE(ex.ok);
  EXPECT_EQ(ex.code, "class ModelNew(nn.Module):\n    pass\n");
}
