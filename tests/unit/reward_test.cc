#include "eval/reward.h"

#include <gtest/gtest.h>

using namespace mc::eval;

namespace {
EvalResult row(Verdict v, int passed = 0, int total = 5) {
  EvalResult r;
  r.verdict = v;
  r.trials_passed = passed;
  r.trials_total = total;
  return r;
}
}  // namespace

TEST(Reward, FailuresScoreMinusOne) {
  RewardParams p;
  for (Verdict v : {Verdict::kExtractError, Verdict::kStaticViolation, Verdict::kCompileError,
                    Verdict::kLoadError, Verdict::kIllegal, Verdict::kTimingError})
    EXPECT_DOUBLE_EQ(*compute_reward(row(v), p), -1.0) << to_string(v);
  EXPECT_DOUBLE_EQ(*compute_reward(row(Verdict::kIncorrect, 0), p), -1.0);
}

TEST(Reward, PartialCorrectness) {
  RewardParams p;
  EXPECT_DOUBLE_EQ(*compute_reward(row(Verdict::kIncorrect, 2, 5), p), -0.5 + 0.5 * 0.4);
  EXPECT_DOUBLE_EQ(*compute_reward(row(Verdict::kRuntimeError, 4, 5), p), -0.5 + 0.5 * 0.8);
}

TEST(Reward, SpeedBonusIsCappedAndFlaggedSpeedupsAreNotPaid) {
  RewardParams p{0.5, 4.0};
  EvalResult r = row(Verdict::kOk, 5, 5);
  r.speedup = 0.5;
  EXPECT_DOUBLE_EQ(*compute_reward(r, p), 1.0);
  r.speedup = 3.0;
  EXPECT_DOUBLE_EQ(*compute_reward(r, p), 1.0 + 0.5 * 2.0);
  r.speedup = 100.0;
  EXPECT_DOUBLE_EQ(*compute_reward(r, p), 1.0 + 0.5 * 4.0);
  r.speedup_flagged = true;
  EXPECT_DOUBLE_EQ(*compute_reward(r, p), 1.0);
}

TEST(Reward, InfraErrorsAreNeverScored) {
  EXPECT_FALSE(compute_reward(row(Verdict::kInfraError), RewardParams{}).has_value());
}
