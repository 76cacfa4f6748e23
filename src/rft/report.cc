#include "rft/report.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "common/low_prob.h"

namespace mc::rft {
namespace {

// Mean over problems (with at least two answers in `member`) of the mean pairwise Jaccard.
nlohmann::json mean_pairwise(const std::map<std::string, std::vector<size_t>>& by_problem,
                             const std::vector<CodeFingerprint>& prints, const std::vector<bool>& member) {
  double total = 0;
  size_t problems = 0;
  for (const auto& [p, idx] : by_problem) {
    std::vector<size_t> m;
    for (size_t i : idx)
      if (member[i]) m.push_back(i);
    if (m.size() < 2) continue;
    double s = 0;
    size_t pairs = 0;
    for (size_t a = 0; a < m.size(); ++a)
      for (size_t b = a + 1; b < m.size(); ++b, ++pairs) s += jaccard(prints[m[a]].shingles, prints[m[b]].shingles);
    total += s / static_cast<double>(pairs);
    ++problems;
  }
  if (problems == 0) return nullptr;
  return total / static_cast<double>(problems);
}

nlohmann::json quantiles(std::vector<double> v) {
  if (v.empty()) return nullptr;
  std::sort(v.begin(), v.end());
  auto q = [&](double f) { return v[static_cast<size_t>(std::lround(f * static_cast<double>(v.size() - 1)))]; };
  return {{"n", v.size()}, {"p10", q(0.1)}, {"p50", q(0.5)}, {"p90", q(0.9)}, {"max", v.back()}};
}

std::string fmt_sim(const nlohmann::json& j) { return j.is_number() ? fmt::format("{:.3f}", j.get<double>()) : "-"; }

std::string fmt_q(const nlohmann::json& j) {
  if (j.is_null()) return "-";
  return fmt::format("p10 {:.2f}x  p50 {:.2f}x  p90 {:.2f}x  max {:.2f}x  (n={})", j["p10"].get<double>(),
                     j["p50"].get<double>(), j["p90"].get<double>(), j["max"].get<double>(), j["n"].get<size_t>());
}

// Tokens drawn at a probability below kLowProbability, by verdict (null when no answer came with
// the sampler's log-probabilities). When compile errors carry many and passing answers none, the
// failures are sampling slips of a policy whose likeliest path was right.
nlohmann::json low_prob_by_verdict(const std::vector<RftAnswer>& answers) {
  std::map<std::string, std::vector<double>> by;
  double tokens = 0, low = 0;
  for (const auto& a : answers) {
    if (!a.low_prob_tokens) continue;
    by[a.verdict].push_back(*a.low_prob_tokens);
    tokens += a.tokens;
    low += *a.low_prob_tokens;
  }
  if (by.empty()) return nullptr;
  nlohmann::json v = nlohmann::json::object();
  for (auto& [verdict, xs] : by) {
    std::sort(xs.begin(), xs.end());
    size_t n = xs.size();
    double median = n % 2 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
    double none = static_cast<double>(std::count(xs.begin(), xs.end(), 0.0)) / static_cast<double>(n);
    v[verdict] = {{"answers", n}, {"median", median}, {"share_none", none}};
  }
  return {{"threshold", kLowProbability}, {"per_1000_tokens", tokens > 0 ? 1000 * low / tokens : 0.0}, {"by_verdict", v}};
}

}  // namespace

RftReport make_report(const std::vector<RftAnswer>& answers, const std::vector<Decision>& decisions,
                      const std::vector<CodeFingerprint>& prints, size_t problems, const SelectionOptions& o) {
  const size_t n = answers.size();
  std::map<std::string, std::vector<size_t>> by_problem;
  std::map<std::string, size_t> verdicts, reasons;
  std::vector<bool> ok(n), kept(n);
  std::vector<double> speed_ok, speed_kept;
  std::map<int, size_t> kept_buckets;
  size_t judged = 0, n_ok = 0, n_kept = 0;
  for (size_t i = 0; i < n; ++i) {
    by_problem[answers[i].problem].push_back(i);
    ++verdicts[answers[i].verdict];
    judged += answers[i].verdict != "infra_error";
    ok[i] = answers[i].verdict == "ok";
    kept[i] = decisions[i].kept;
    n_ok += ok[i];
    n_kept += kept[i];
    if (!decisions[i].kept) ++reasons[decisions[i].reason];
    if (ok[i] && answers[i].speedup) speed_ok.push_back(*answers[i].speedup);
    if (kept[i]) {
      ++kept_buckets[decisions[i].speed_bucket];
      if (answers[i].speedup) speed_kept.push_back(*answers[i].speedup);
    }
  }
  size_t solved = 0, covered = 0;
  std::map<size_t, size_t> per_problem_hist;  // answers kept -> problems
  for (const auto& [p, idx] : by_problem) {
    size_t k = 0, c = 0;
    for (size_t i : idx) {
      k += kept[i];
      c += ok[i];
    }
    solved += c > 0;
    covered += k > 0;
    ++per_problem_hist[k];
  }
  per_problem_hist[0] += problems > by_problem.size() ? problems - by_problem.size() : 0;

  nlohmann::json j;
  j["problems"] = problems;
  j["samples"] = n;
  j["verdicts"] = verdicts;
  j["pass_rate"] = judged ? static_cast<double>(n_ok) / static_cast<double>(judged) : 0.0;
  j["problems_solved"] = solved;
  j["coverage"] = problems ? static_cast<double>(covered) / static_cast<double>(problems) : 0.0;
  j["problems_covered"] = covered;
  j["kept"] = n_kept;
  j["kept_per_problem_mean"] = problems ? static_cast<double>(n_kept) / static_cast<double>(problems) : 0.0;
  j["kept_per_covered_problem_mean"] = covered ? static_cast<double>(n_kept) / static_cast<double>(covered) : 0.0;
  nlohmann::json hist = nlohmann::json::object();
  for (auto [k, c] : per_problem_hist) hist[std::to_string(k)] = c;
  j["kept_per_problem_histogram"] = hist;
  j["mean_pairwise_similarity_before"] = mean_pairwise(by_problem, prints, ok);
  j["mean_pairwise_similarity_after"] = mean_pairwise(by_problem, prints, kept);
  j["speedup_correct"] = quantiles(speed_ok);
  j["speedup_kept"] = quantiles(speed_kept);
  nlohmann::json buckets = nlohmann::json::object();
  for (auto [b, c] : kept_buckets) buckets[speed_bucket_name(b)] = c;
  j["kept_speed_buckets"] = buckets;
  j["dropped"] = reasons;
  j["low_prob_tokens"] = low_prob_by_verdict(answers);
  j["selection"] = {{"cap_per_problem", o.cap_per_problem}, {"near_duplicate_jaccard", o.near_duplicate_jaccard},
                    {"shingle_tokens", o.shingle_tokens}};

  std::string t;
  t += fmt::format("{:<34}{}\n", "problems", problems);
  t += fmt::format("{:<34}{}\n", "samples", n);
  std::string vs;
  for (const auto& [v, c] : verdicts) vs += fmt::format("{}{} {}", vs.empty() ? "" : ", ", v, c);
  t += fmt::format("{:<34}{}\n", "verdicts", vs.empty() ? "-" : vs);
  t += fmt::format("{:<34}{:.1f}% of {} judged\n", "pass rate", 100 * j["pass_rate"].get<double>(), judged);
  t += fmt::format("{:<34}{} of {}\n", "problems with a correct answer", solved, problems);
  t += fmt::format("{:<34}{} of {} ({:.1f}%)\n", "coverage (>= 1 answer kept)", covered, problems,
                   100 * j["coverage"].get<double>());
  t += fmt::format("{:<34}{} ({:.2f} per problem, {:.2f} per covered problem)\n", "answers kept", n_kept,
                   j["kept_per_problem_mean"].get<double>(), j["kept_per_covered_problem_mean"].get<double>());
  std::string hs;
  for (auto [k, c] : per_problem_hist) hs += fmt::format("{}{}: {}", hs.empty() ? "" : ", ", k, c);
  t += fmt::format("{:<34}{}\n", "problems by answers kept", hs);
  t += fmt::format("{:<34}before {}  after {}\n", "mean pairwise similarity", fmt_sim(j["mean_pairwise_similarity_before"]),
                   fmt_sim(j["mean_pairwise_similarity_after"]));
  t += fmt::format("{:<34}{}\n", "speedup, correct answers", fmt_q(j["speedup_correct"]));
  t += fmt::format("{:<34}{}\n", "speedup, kept answers", fmt_q(j["speedup_kept"]));
  std::string bs;
  for (auto [b, c] : kept_buckets) bs += fmt::format("{}{} {}", bs.empty() ? "" : ", ", speed_bucket_name(b), c);
  t += fmt::format("{:<34}{}\n", "kept by speed bucket", bs.empty() ? "-" : bs);
  std::string rs;
  for (const auto& [r, c] : reasons) rs += fmt::format("{}{} {}", rs.empty() ? "" : ", ", r, c);
  t += fmt::format("{:<34}{}\n", "dropped", rs.empty() ? "-" : rs);
  const auto& lp = j["low_prob_tokens"];
  if (!lp.is_null()) {
    t += fmt::format("{:<34}{:.2f} per 1000 tokens; by verdict: median per answer, share with none\n",
                     fmt::format("tokens drawn at p < {}", kLowProbability), lp["per_1000_tokens"].get<double>());
    for (const auto& [v, x] : lp["by_verdict"].items())
      t += fmt::format("{:<34}{:<18} n {:>5}  median {:>5.1f}  none {:>5.1f}%\n", "", v, x["answers"].get<size_t>(),
                       x["median"].get<double>(), 100 * x["share_none"].get<double>());
  }
  return {j, t};
}

}  // namespace mc::rft
