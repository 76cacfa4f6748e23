// The RL algorithms on hand-computed numbers: PrimeEcho, group advantages, the retry buffer
// (capacity, eviction, re-issue probability, expiry, resume), MirrorPop at its δ boundary, and
// the clipped policy loss with its gradients.
#include <gtest/gtest.h>

#include <cmath>

#include "common/check.h"
#include "rl/advantages.h"
#include "rl/grpo_loss.h"
#include "rl/mirror_pop.h"
#include "rl/prime_echo.h"
#include "rl/retry_buffer.h"
#include "rl/verdict_memory.h"

using namespace mc::rl;

TEST(PrimeEcho, HandComputedTrajectories) {
  PrimeEchoOptions o;  // α 0.75, β 0.1, γ 0.5
  // Pass at turn 1 with speed reward 1.3: 0.75·1.3 + 0.25·1.3 + 0.1.
  EXPECT_NEAR(prime_echo_reward({{1.3, true}}, o), 1.4, 1e-12);
  // Compile error (−1), then wrong (−0.5 + 0.5·0.2 = −0.4), then a pass at 1.0: first pass at turn 3.
  EXPECT_NEAR(prime_echo_reward({{-1, false}, {-0.4, false}, {1.0, true}}, o), 0.75 * -1 + 0.25 * 1.0 + 0.1 * 0.25, 1e-12);
  // Never passes: no bonus; the best turn is the second.
  EXPECT_NEAR(prime_echo_reward({{-1, false}, {-0.3, false}}, o), 0.75 * -1 + 0.25 * -0.3, 1e-12);
  // A pass at turn 1 that a later turn makes worse keeps its best.
  EXPECT_NEAR(prime_echo_reward({{1.2, true}, {-1, false}}, o), 0.75 * 1.2 + 0.25 * 1.2 + 0.1, 1e-12);
  o.enabled = false;  // --no-primeecho: the last turn's reward
  EXPECT_DOUBLE_EQ(prime_echo_reward({{-1, false}, {-0.4, false}, {1.0, true}}, o), 1.0);
  EXPECT_THROW(prime_echo_reward({}, o), mc::Error);
}

TEST(GroupAdvantages, NormalizedWithinEachGroup) {
  // Group 1: 1, 2, 3 → mean 2, sample std 1 → −1, 0, 1. Group 2: all equal → 0.
  auto a = group_advantages({1, 2, 3, 0.5, 0.5, 0.5}, 3, 0.0);
  std::vector<double> want = {-1, 0, 1, 0, 0, 0};
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], want[i], 1e-12);
  auto b = group_advantages({-1, 1}, 2, 0.0);  // std sqrt(2)
  EXPECT_NEAR(b[0], -1 / std::sqrt(2.0), 1e-12);
  EXPECT_THROW(group_advantages({1, 2, 3}, 2), mc::Error);
}

TEST(GroupAdvantages, StdFloorKeepsTimingNoiseSmall) {
  // Seven correct answers and one that timed 2% faster (reward +0.01 at lambda 0.5): plain
  // normalization makes that a unit-size signal; the floor keeps it proportional.
  std::vector<double> noise = {1.1, 1.1, 1.1, 1.1, 1.1, 1.1, 1.1, 1.11};
  auto plain = group_advantages(noise, 8, 0.0);
  EXPECT_NEAR(plain[7], 2.47, 0.01);
  auto floored = group_advantages(noise, 8, 0.0, 0.25);
  EXPECT_NEAR(floored[7], 0.00875 / 0.25, 1e-9);
  EXPECT_NEAR(floored[0], -0.00125 / 0.25, 1e-9);
  // A pass against a failure has a spread far above the floor: as before.
  std::vector<double> mixed = {1.1, 1.1, 1.1, 1.1, 1.1, 1.1, 1.1, -1.0};
  auto a = group_advantages(mixed, 8, 0.0), b = group_advantages(mixed, 8, 0.0, 0.25);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_DOUBLE_EQ(a[i], b[i]);
  // Equal rewards whose mean rounds off in the last bit (8 x 0.1 sums to 0.7999...) carry no
  // signal at all, with or without the floor.
  std::vector<double> same(8, 0.1);
  for (double x : group_advantages(same, 8)) EXPECT_EQ(x, 0.0);
  for (double x : group_advantages(same, 8, 1e-6, 0.25)) EXPECT_EQ(x, 0.0);
}

TEST(RetryBuffer, CapacityEvictionReissueExpiryAndResume) {
  RetryBufferOptions o;
  o.capacity = 3;
  o.reissue_prob = 1.0;  // every slot a repair task while entries last
  o.max_reissues = 2;
  RetryBuffer b(o);
  for (const char* p : {"A", "B", "C", "D"}) b.add({p, std::string("bad ") + p, "feedback", 0, 0});
  ASSERT_EQ(b.size(), 3u);  // A was evicted
  EXPECT_EQ(b.entries().front().problem, "B");
  EXPECT_EQ(b.counters().evicted, 1);
  b.add({"C", "newer", "newer feedback", 0, 5});  // already waiting: updated in place
  EXPECT_EQ(b.size(), 3u);
  EXPECT_EQ(b.entries()[1].failed_answer, "newer");
  auto d = b.draw(2);  // B and C, both to the back
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].problem, "B");
  EXPECT_EQ(d[1].problem, "C");
  EXPECT_EQ(b.entries().front().problem, "D");
  b.repaired("C");
  EXPECT_EQ(b.size(), 2u);
  // Resume: the state round-trips, and the copy draws what the original draws.
  RetryBuffer c = RetryBuffer::from_json(b.to_json(), o);
  auto d1 = b.draw(5), d2 = c.draw(5);
  ASSERT_EQ(d1.size(), 2u);  // D (first re-issue), B (second: expires)
  for (size_t i = 0; i < d1.size(); ++i) EXPECT_EQ(d1[i].problem, d2[i].problem);
  EXPECT_EQ(b.counters().expired, 1);
  EXPECT_EQ(b.size(), 1u);  // D waits
  EXPECT_EQ(b.to_json(), c.to_json());
  // The re-issue probability: about p of the slots, over many draws.
  RetryBufferOptions p = o;
  p.capacity = 1000;
  p.reissue_prob = 0.1;
  p.max_reissues = 1000000;
  p.seed = 7;
  RetryBuffer r(p);
  for (int i = 0; i < 1000; ++i) r.add({"P" + std::to_string(i), "", "", 0, 0});
  size_t n = 0;
  for (int i = 0; i < 200; ++i) n += r.draw(64).size();
  EXPECT_NEAR(static_cast<double>(n) / (200 * 64), 0.1, 0.01);
  EXPECT_THROW(RetryBuffer::from_json(nlohmann::json::object(), o), mc::Error);
}

TEST(MirrorPop, KeepsAndDropsAtTheDeltaBoundary) {
  // Three sequences of 2, 1 and 3 tokens; mean |Δ| = 0.1, 0.25, 0.1 + tiny.
  auto train = at::tensor({0.0, -0.2, -1.0, 0.0, 0.0, 0.0}, at::kDouble);
  auto roll = at::tensor({0.1, -0.3, -1.25, 0.1, -0.1, 0.1 + 3e-9}, at::kDouble);
  auto cu = at::tensor({0, 2, 3, 6}, at::kLong);
  auto r = mirror_pop(train, roll, cu, 0.1);
  EXPECT_TRUE(r.keep[0].item<bool>());   // exactly δ: kept
  EXPECT_FALSE(r.keep[1].item<bool>());
  EXPECT_FALSE(r.keep[2].item<bool>());  // just past δ
  EXPECT_NEAR(r.filtered_share, 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(r.mean_abs_log_ratio[1].item<double>(), 0.25, 1e-12);
  auto off = mirror_pop(train, roll, cu, 0.1, /*enabled=*/false);
  EXPECT_EQ(off.keep.sum().item<int64_t>(), 3);
  EXPECT_THROW(mirror_pop(train, roll, at::tensor({0, 2, 5}, at::kLong), 0.1), mc::Error);
}

TEST(PolicyLoss, ClippedSurrogateAndItsGradient) {
  // Four tokens: ratio e^{Δ} with Δ = log 1.5, log 0.9, log 0.3, 0; advantages 1, 1, −2, 5; the last
  // token masked out. ε 0.2.
  auto old_lp = at::tensor({-1.0, -2.0, -0.5, -1.0}, at::kDouble);
  auto delta = at::tensor({std::log(1.5), std::log(0.9), std::log(0.3), 0.0}, at::kDouble);
  auto lp = (old_lp + delta).to(at::kFloat).requires_grad_(true);
  auto adv = at::tensor({1.0, 1.0, -2.0, 5.0}, at::kFloat);
  auto mask = at::tensor({1, 1, 1, 0}, at::kInt).to(at::kBool);
  PolicyLossOptions o;
  auto r = clipped_policy_loss(lp, old_lp.to(at::kFloat), adv, mask, o);
  // Token 1: min(1.5, 1.2) = 1.2 (clipped, no gradient). Token 2: min(0.9, 0.9) = 0.9 (grad −0.9).
  // Token 3: A < 0: min(−0.6, −1.6) = −1.6 (clipped at 0.8, no gradient). Mean of −(1.2 + 0.9 − 1.6).
  EXPECT_NEAR(r.loss.item<double>(), -(1.2 + 0.9 - 1.6) / 3, 1e-6);
  EXPECT_NEAR(r.clip_fraction, 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(r.ratio_mean, (1.5 + 0.9 + 0.3) / 3, 1e-6);
  // The push: |A|·(1 − p) with p = π_θ(t) = e^{logp}; tokens 1 and 2 positive, 3 negative, 4 masked.
  auto p_new = at::exp(old_lp + delta);
  const double pos = 1 * (1 - p_new[0].item<double>()) + 1 * (1 - p_new[1].item<double>());
  EXPECT_NEAR(r.push_pos, pos, 1e-6);
  EXPECT_NEAR(r.push_neg, 2 * (1 - p_new[2].item<double>()), 1e-6);
  r.loss.backward();
  auto g = lp.grad();
  EXPECT_NEAR(g[0].item<double>(), 0.0, 1e-7);
  EXPECT_NEAR(g[1].item<double>(), -0.9 / 3, 1e-6);  // d(−ρA)/dlogp = −ρA
  EXPECT_NEAR(g[2].item<double>(), 0.0, 1e-7);
  EXPECT_NEAR(g[3].item<double>(), 0.0, 1e-7);       // masked
  // A global normalizer and the k3 KL term.
  auto lp2 = old_lp.to(at::kFloat).clone().requires_grad_(true);
  auto ref = (old_lp + 0.1).to(at::kFloat);
  o.kl_coef = 0.5;
  auto k = clipped_policy_loss(lp2, old_lp.to(at::kFloat), at::zeros({4}), mask, o, ref, /*normalizer=*/6);
  const double k3 = std::exp(0.1) - 0.1 - 1;
  EXPECT_NEAR(k.kl, k3, 1e-6);
  EXPECT_NEAR(k.loss.item<double>(), 0.5 * 3 * k3 / 6, 1e-6);
  EXPECT_THROW(clipped_policy_loss(lp2, old_lp.to(at::kFloat), at::zeros({4}), mask, o), mc::Error);
}

TEST(VerdictMemory, ProblemIdentityFollowsTheSourceNotOnlyTheName) {
  mc::eval::Problem a;
  a.key = "L1/2_IndexSelect";
  a.source = "class Model: pass  # one set's problem\n";
  mc::eval::Problem b = a;
  EXPECT_EQ(problem_identity(a), problem_identity(b));
  b.source = "class Model: pass  # another set's problem of the same name\n";
  EXPECT_NE(problem_identity(a), problem_identity(b));
  EXPECT_EQ(problem_identity(a).rfind(a.key + "@", 0), 0u);
}

TEST(VerdictMemory, RemembersJudgedAnswersEvictsTheOldestAndRoundTrips) {
  auto verdict = [](mc::eval::Verdict v, double reward) {
    mc::eval::EvalResult r;
    r.verdict = v;
    r.reward = reward;
    return r;
  };
  VerdictMemory m(2);
  m.remember("p1", "a", verdict(mc::eval::Verdict::kOk, 1.2));
  m.remember("p1", "b", verdict(mc::eval::Verdict::kCompileError, -1));
  // Never a score: infra errors (and results without a reward) are not remembered.
  mc::eval::EvalResult infra = verdict(mc::eval::Verdict::kInfraError, 0);
  infra.reward.reset();
  m.remember("p2", "a", infra);
  ASSERT_TRUE(m.find("p1", "a"));
  EXPECT_EQ(*m.find("p1", "a")->reward, 1.2);
  EXPECT_FALSE(m.find("p2", "a"));  // same text, another problem
  EXPECT_EQ(m.size(), 2u);
  // A third answer evicts the oldest.
  m.remember("p3", "c", verdict(mc::eval::Verdict::kIncorrect, -1));
  EXPECT_FALSE(m.find("p1", "a"));
  EXPECT_TRUE(m.find("p1", "b") && m.find("p3", "c"));
  auto back = VerdictMemory::from_json(nlohmann::json::parse(m.to_json().dump()), 2);
  EXPECT_EQ(back.size(), 2u);
  EXPECT_EQ(back.find("p3", "c")->verdict, mc::eval::Verdict::kIncorrect);
  // The next eviction order survives the round trip: "b" is still the oldest.
  back.remember("p4", "d", verdict(mc::eval::Verdict::kOk, 1));
  EXPECT_FALSE(back.find("p1", "b"));
  EXPECT_TRUE(back.find("p3", "c"));
  // Capacity 0: off.
  VerdictMemory off(0);
  off.remember("p1", "a", verdict(mc::eval::Verdict::kOk, 1));
  EXPECT_FALSE(off.enabled() || off.find("p1", "a"));
}

// A verdict holds under the settings that gave it: a result judged under another
// configuration is not remembered, and a resumed run with other settings drops what it saved.
TEST(VerdictMemory, KeepsOnlyVerdictsOfItsVerifiersConfiguration) {
  auto verdict = [](const std::string& hash, double reward) {
    mc::eval::EvalResult r;
    r.verdict = mc::eval::Verdict::kOk;
    r.reward = reward;
    r.config_hash = hash;
    return r;
  };
  VerdictMemory m(8, "cfgA");
  m.remember("p1", "a", verdict("cfgA", 1.1));
  m.remember("p1", "b", verdict("cfgB", 1.3));  // judged elsewhere: not this run's verdict
  EXPECT_TRUE(m.find("p1", "a"));
  EXPECT_FALSE(m.find("p1", "b"));
  const auto saved = nlohmann::json::parse(m.to_json().dump());
  auto same = VerdictMemory::from_json(saved, 8, "cfgA");
  EXPECT_EQ(same.size(), 1u);
  EXPECT_EQ(same.dropped_on_load(), 0u);
  // The resumed run judges with a changed setting (another hash): nothing saved is reused.
  auto changed = VerdictMemory::from_json(saved, 8, "cfgC");
  EXPECT_EQ(changed.size(), 0u);
  EXPECT_EQ(changed.dropped_on_load(), 1u);
  EXPECT_FALSE(changed.find("p1", "a"));
}
