#include "eval/result.h"

#include <gtest/gtest.h>

#include "common/check.h"
#include "eval/summary.h"

using namespace mc::eval;

TEST(Result, JsonRoundTrip) {
  EvalResult r;
  r.problem_key = "L1/19_ReLU";
  r.problem_id = 19;
  r.level = 1;
  r.verdict = Verdict::kOk;
  r.stage = Stage::kDone;
  r.trials_passed = r.trials_total = 5;
  r.compiled = true;
  r.candidate_time = TimingStats{10, 11, 1, 9, 12, 100};
  r.reference_time = TimingStats{20, 21, 1, 19, 22, 100};
  r.speedup = 2.0;
  r.reward = 1.5;
  r.violations.push_back({"thread", "msg", 3, "x"});
  r.wall_s = 2.5;
  r.finished_at = 1764072000.25;
  auto j = to_json(r);
  EXPECT_EQ(j["format_version"], kResultFormatVersion);
  EXPECT_EQ(j["verdict"], "ok");
  EXPECT_EQ(j["status"], "scored");
  EXPECT_TRUE(j["correct"]);
  EvalResult back = result_from_json(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(back.problem_key, r.problem_key);
  EXPECT_EQ(back.verdict, Verdict::kOk);
  EXPECT_DOUBLE_EQ(*back.speedup, 2.0);
  EXPECT_DOUBLE_EQ(back.candidate_time->median_us, 10);
  EXPECT_EQ(back.violations.at(0).rule, "thread");
  EXPECT_DOUBLE_EQ(back.finished_at, 1764072000.25);  // with wall_s: when it was submitted
  EXPECT_DOUBLE_EQ(back.wall_s, 2.5);
}

TEST(Result, InfraRowsHaveNoReward) {
  EvalResult r;
  r.verdict = Verdict::kInfraError;
  auto j = to_json(r);
  EXPECT_EQ(j["status"], "infra_error");
  EXPECT_TRUE(j["reward"].is_null());
}

TEST(Result, SchemaErrorsAreClear) {
  auto j = to_json(EvalResult{});
  j["format_version"] = 99;
  try {
    result_from_json(j);
    FAIL();
  } catch (const mc::Error& e) {
    EXPECT_NE(std::string(e.what()).find("format_version 99"), std::string::npos);
  }
  j["format_version"] = kResultFormatVersion;
  j["verdict"] = "maybe";
  EXPECT_THROW(result_from_json(j), mc::Error);
}

TEST(Summary, FastPCountsAllScoredRowsAndSkipsInfra) {
  std::vector<EvalResult> rows(4);
  rows[0].verdict = Verdict::kOk;
  rows[0].compiled = true;
  rows[0].trials_passed = rows[0].trials_total = 5;
  rows[0].speedup = 2.5;
  rows[1].verdict = Verdict::kOk;
  rows[1].compiled = true;
  rows[1].trials_passed = rows[1].trials_total = 5;
  rows[1].speedup = 0.9;
  rows[2].verdict = Verdict::kCompileError;
  rows[3].verdict = Verdict::kInfraError;
  Summary s = summarize(rows);
  EXPECT_EQ(s.rows, 3);
  EXPECT_EQ(s.infra_errors, 1);
  EXPECT_NEAR(s.fast_0, 2.0 / 3, 1e-12);
  EXPECT_NEAR(s.fast_1, 1.0 / 3, 1e-12);
  EXPECT_NEAR(s.fast_2, 1.0 / 3, 1e-12);
  EXPECT_NEAR(s.geomean_speedup, std::sqrt(2.5 * 0.9), 1e-12);
}

TEST(Summary, SaysWhereCandidatesRanAndWarnsOfProcessesStartedFromScratch) {
  std::vector<EvalResult> rows(3);
  for (auto& r : rows) r.verdict = Verdict::kIncorrect;
  rows[0].exec_stages = {{"take", 0.1}, {"process", "forked"}};
  rows[1].exec_stages = {{"take", 4.2}, {"process", "started"}};
  Summary s = summarize(rows);  // rows[2] never reached a judge: no process
  EXPECT_EQ(s.processes.at("forked"), 1);
  EXPECT_EQ(s.processes.at("started"), 1);
  EXPECT_EQ(s.processes.size(), 2u);
  std::string text = format_summary(s);
  EXPECT_NE(text.find("process started"), std::string::npos) << text;
  EXPECT_NE(text.find("could not fork"), std::string::npos) << text;
  EXPECT_EQ(summary_json(s)["processes"]["forked"], 1);
  rows[1].exec_stages["process"] = "forked";
  EXPECT_EQ(format_summary(summarize(rows)).find("could not fork"), std::string::npos);
}
