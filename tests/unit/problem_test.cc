#include "eval/problem.h"

#include <gtest/gtest.h>

#include "common/check.h"
#include "common/fs.h"
#include "eval/candidates.h"
#include "test_util.h"

using namespace mc::eval;

TEST(Problem, LoadsAFolderSortedById) {
  auto probs = load_problems(mc::test::cases_dir() + "/problems");
  ASSERT_GE(probs.size(), 6u);
  EXPECT_EQ(probs[0]->stem, "1_Add");
  EXPECT_EQ(probs[0]->id, 1);
  EXPECT_EQ(probs[0]->name, "Add");
}

TEST(Problem, KernelBenchLevelLayout) {
  mc::TempDir dir;
  mc::fs::create_directories(dir.path() / "KernelBench" / "level2");
  mc::fs::copy(mc::test::cases_dir() + "/problems/2_ReLU.py", dir.path() / "KernelBench" / "level2" / "7_ReLU.py");
  auto probs = load_problems(dir.path().string(), 2);
  ASSERT_EQ(probs.size(), 1u);
  EXPECT_EQ(probs[0]->key, "L2/7_ReLU");
  EXPECT_EQ(probs[0]->level, 2);
  EXPECT_THROW(load_problems(dir.path().string(), 3), mc::Error);
}

TEST(Problem, ClearErrorsForBadInput) {
  mc::TempDir dir;
  mc::write_file_atomic(dir.path() / "3_Bad.py", "import torch\nclass Model:\n    pass\ndef get_init_inputs():\n    return []\n");
  try {
    load_problem((dir.path() / "3_Bad.py").string());
    FAIL();
  } catch (const mc::Error& e) {
    EXPECT_NE(std::string(e.what()).find("get_inputs"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_problem("/nonexistent/1_X.py"), mc::Error);
  EXPECT_THROW(load_problems("/nonexistent-folder"), mc::Error);
  mc::TempDir empty;
  EXPECT_THROW(load_problems(empty.path().string()), mc::Error);
}

TEST(Candidates, JsonlMatchingAndOneItemPerLine) {
  auto probs = load_problems(mc::test::cases_dir() + "/problems");
  mc::TempDir dir;
  auto path = dir.path() / "answers.jsonl";
  mc::write_file_atomic(path,
                        "{\"problem\": \"2_ReLU\", \"sample_id\": 3, \"answer\": \"x\"}\n"
                        "{\"problem\": 1, \"code\": \"y\"}\n"
                        "not json\n"
                        "{\"problem\": \"99_Nope\", \"answer\": \"z\"}\n"
                        "{\"problem\": \"2_ReLU\"}\n");
  auto c = load_candidates(path.string(), probs);
  ASSERT_EQ(c.size(), 5u);
  EXPECT_EQ(c[0].problem->stem, "2_ReLU");
  EXPECT_EQ(c[0].sample_id, "3");
  EXPECT_EQ(c[1].problem->stem, "1_Add");
  EXPECT_NE(c[2].input_error.find("malformed JSONL"), std::string::npos);
  EXPECT_NE(c[3].input_error.find("no problem matches"), std::string::npos);
  EXPECT_NE(c[4].input_error.find("\"answer\""), std::string::npos);
}

TEST(Candidates, FolderNamingSchemes) {
  auto probs = load_problems(mc::test::cases_dir() + "/problems");
  mc::TempDir dir;
  mc::write_file_atomic(dir.path() / "2_ReLU.py", "a");
  mc::write_file_atomic(dir.path() / "level_0_problem_1_sample_4_kernel.py", "b");
  mc::fs::create_directories(dir.path() / "3_Softmax");
  mc::write_file_atomic(dir.path() / "3_Softmax" / "7.md", "c");
  auto c = load_candidates(dir.path().string(), probs);
  ASSERT_EQ(c.size(), 3u);
  std::map<std::string, std::string> by_problem;
  for (const auto& x : c) by_problem[x.problem ? x.problem->stem : "?"] = x.sample_id;
  EXPECT_EQ(by_problem["2_ReLU"], "0");
  EXPECT_EQ(by_problem["1_Add"], "4");
  EXPECT_EQ(by_problem["3_Softmax"], "7");
}

TEST(Candidates, LevelFoldersAsKernelBenchAndSynthLayThemOut) {
  auto probs = load_problems(mc::test::cases_dir() + "/problems");
  mc::TempDir dir;
  mc::fs::create_directories(dir.path() / "level1");
  mc::write_file_atomic(dir.path() / "level1" / "2_ReLU.cu", "a");
  mc::fs::create_directories(dir.path() / "level_1" / "3_Softmax");
  mc::write_file_atomic(dir.path() / "level_1" / "3_Softmax" / "5.py", "b");
  auto c = load_candidates(dir.path().string(), probs);
  ASSERT_EQ(c.size(), 2u);
  ASSERT_TRUE(c[0].problem && c[1].problem) << c[0].input_error << c[1].input_error;
  EXPECT_EQ(c[0].problem->stem, "2_ReLU");
  EXPECT_EQ(c[1].problem->stem, "3_Softmax");
  EXPECT_EQ(c[1].sample_id, "5");
}
