#include "bench/metrics.h"

#include <cmath>

#include "common/check.h"

namespace mc::bench {
namespace {

// The judged samples of each problem of the set (problems with none are absent).
std::map<std::string, std::vector<const SampleOutcome*>> by_problem(const std::vector<SampleOutcome>& outcomes,
                                                                     const std::vector<std::string>& all_problems) {
  std::map<std::string, std::vector<const SampleOutcome*>> out;
  std::map<std::string, bool> in_set;
  for (const auto& p : all_problems) in_set[p] = true;
  for (const auto& o : outcomes)
    if (o.judged && in_set.count(o.problem)) out[o.problem].push_back(&o);
  return out;
}

std::optional<double> speedup(const SampleOutcome& o, bool vs_compile) {
  if (!o.correct || !o.speedup_eager) return std::nullopt;
  if (!vs_compile) return o.speedup_eager;
  if (!o.compile_over_eager) return std::nullopt;
  return *o.speedup_eager * *o.compile_over_eager;
}

// Correct and more than p times faster (p = 0: correct).
bool beats(const SampleOutcome& o, double p, bool vs_compile) {
  if (!o.correct) return false;
  if (p <= 0) return true;
  auto s = speedup(o, vs_compile);
  return s && *s > p;
}

}  // namespace

double pass_at_k(int n, int c, int k) {
  MC_CHECK(n >= 0 && c >= 0 && c <= n && k >= 1, "pass_at_k: need 0 <= c <= n and k >= 1, got n=", n, " c=", c, " k=", k);
  if (n == 0) return 0;
  if (n < k) return c > 0 ? 1.0 : 0.0;
  if (n - c < k) return 1.0;
  // 1 - prod_{i = n-c+1}^{n} (1 - k / i): the ratio C(n-c, k) / C(n, k) without factorials.
  double ratio = 1;
  for (int i = n - c + 1; i <= n; ++i) ratio *= 1.0 - static_cast<double>(k) / i;
  return 1.0 - ratio;
}

double fast_p(const std::vector<SampleOutcome>& outcomes, const std::vector<std::string>& all_problems, double p,
              bool vs_compile) {
  auto groups = by_problem(outcomes, all_problems);
  if (groups.empty()) return 0;
  double sum = 0;
  for (const auto& [key, samples] : groups) {
    int hit = 0;
    for (const auto* o : samples) hit += beats(*o, p, vs_compile);
    sum += static_cast<double>(hit) / samples.size();
  }
  return sum / groups.size();
}

ProblemCounts problem_counts(const std::vector<SampleOutcome>& outcomes, const std::vector<std::string>& all_problems) {
  ProblemCounts out;
  for (const auto& [key, samples] : by_problem(outcomes, all_problems)) {
    int c = 0;
    for (const auto* o : samples) c += o->correct;
    out[key] = {static_cast<int>(samples.size()), c};
  }
  return out;
}

Metrics compute_metrics(const std::vector<SampleOutcome>& outcomes, const std::vector<std::string>& all_problems,
                        const std::vector<int>& ks) {
  Metrics m;
  m.problems = static_cast<int>(all_problems.size());
  auto groups = by_problem(outcomes, all_problems);
  m.scored_problems = static_cast<int>(groups.size());
  std::map<std::string, bool> in_set;
  for (const auto& p : all_problems) in_set[p] = true;
  for (const auto& o : outcomes)
    if (in_set.count(o.problem) && !o.judged) ++m.infra_errors;
  for (int k : ks) m.pass_at[k] = 0;
  double log_sum = 0;
  int timed = 0, compiled = 0, correct = 0, legal = 0, faster = 0;
  for (const auto& [key, samples] : groups) {
    int n = static_cast<int>(samples.size()), c = 0;
    double best = 0;
    for (const auto* o : samples) {
      ++m.samples;
      c += o->correct;
      compiled += o->compiled;
      correct += o->correct;
      legal += o->legal;
      m.verdicts[o->verdict]++;
      for (const auto& r : o->rules) m.rules[r]++;
      if (auto s = speedup(*o, false)) {
        if (*s > 0) log_sum += std::log(*s), ++timed;
        best = std::max(best, *s);
      }
    }
    for (int k : ks) m.pass_at[k] += pass_at_k(n, c, k);
    m.avg_at_k += static_cast<double>(c) / n;
    faster += best > 1.1;
  }
  if (m.scored_problems > 0) {
    for (auto& [k, v] : m.pass_at) v /= m.scored_problems;
    m.avg_at_k /= m.scored_problems;
    m.faster = static_cast<double>(faster) / m.scored_problems;
  }
  for (double p : kFastP) {
    m.fast_eager[p] = fast_p(outcomes, all_problems, p, false);
    m.fast_compile[p] = fast_p(outcomes, all_problems, p, true);
  }
  m.geomean_speedup = timed ? std::exp(log_sum / timed) : 0;
  if (m.samples > 0) {
    m.compiled = static_cast<double>(compiled) / m.samples;
    m.correct = static_cast<double>(correct) / m.samples;
    m.legal = static_cast<double>(legal) / m.samples;
  }
  return m;
}

nlohmann::json metrics_json(const Metrics& m) {
  nlohmann::json pass = nlohmann::json::object(), fe = nlohmann::json::object(), fc = nlohmann::json::object();
  for (const auto& [k, v] : m.pass_at) pass["pass@" + std::to_string(k)] = v;
  auto pname = [](double p) {
    std::string s = std::to_string(p);
    s.erase(s.find_last_not_of('0') + 1);
    if (s.back() == '.') s.pop_back();
    return "fast_" + s;
  };
  for (const auto& [p, v] : m.fast_eager) fe[pname(p)] = v;
  for (const auto& [p, v] : m.fast_compile) fc[pname(p)] = v;
  return {{"problems", m.problems}, {"scored_problems", m.scored_problems}, {"samples", m.samples},
          {"infra_errors", m.infra_errors}, {"pass", pass}, {"avg@k", m.avg_at_k}, {"fast_eager", fe},
          {"fast_compile", fc}, {"faster", m.faster}, {"geomean_speedup", m.geomean_speedup},
          {"compiled", m.compiled}, {"correct", m.correct}, {"legal", m.legal}, {"verdicts", m.verdicts},
          {"rules", m.rules}};
}

}  // namespace mc::bench
