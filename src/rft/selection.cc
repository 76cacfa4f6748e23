#include "rft/selection.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

namespace mc::rft {

int speed_bucket(const std::optional<double>& speedup) {
  if (!speedup || !std::isfinite(*speedup) || *speedup <= 0) return -1;
  double l = std::log2(*speedup);
  return std::clamp(static_cast<int>(std::floor(l)) + 2, 0, 4);
}

const char* speed_bucket_name(int bucket) {
  static const char* names[] = {"<0.5x", "0.5-1x", "1-2x", "2-4x", ">=4x"};
  return bucket >= 0 && bucket <= 4 ? names[bucket] : "no speedup";
}

std::vector<Decision> select_answers(const std::vector<RftAnswer>& answers, const SelectionOptions& o,
                                     std::vector<CodeFingerprint>* prints) {
  const size_t n = answers.size();
  std::vector<Decision> out(n);
  std::vector<CodeFingerprint> fp(n);
  for (size_t i = 0; i < n; ++i) {
    fp[i] = fingerprint_code(answers[i].code, o.shingle_tokens);
    out[i].speed_bucket = speed_bucket(answers[i].speedup);
  }
  std::map<std::string, std::vector<size_t>> by_problem;
  for (size_t i = 0; i < n; ++i) by_problem[answers[i].problem].push_back(i);

  for (auto& [problem, idx] : by_problem) {
    // Fastest first; answers without a speedup after those with one; then input order.
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
      double sa = answers[a].speedup.value_or(-1), sb = answers[b].speedup.value_or(-1);
      return sa > sb;
    });
    std::vector<size_t> pool;  // distinct correct answers, fastest first
    for (size_t i : idx) {
      Decision& d = out[i];
      const RftAnswer& a = answers[i];
      if (a.verdict != "ok") {
        d.reason = a.verdict == "infra_error" ? "infra_error" : "rejected";
        continue;
      }
      for (size_t k : pool) {
        const char* why = fp[k].exact == fp[i].exact         ? "duplicate"
                          : fp[k].renamed == fp[i].renamed     ? "renamed_copy"
                          : fp[k].structure == fp[i].structure ? "slower_twin"
                                                               : nullptr;
        double sim = jaccard(fp[k].shingles, fp[i].shingles);
        if (!why && sim >= o.near_duplicate_jaccard) why = "near_duplicate";
        if (why) {
          d.reason = why;
          d.twin = answers[k].sample_id;
          d.similarity = sim;
          break;
        }
      }
      if (d.reason.empty()) pool.push_back(i);
    }
    // The cap: round-robin over speed buckets, fastest bucket first, fastest answer first.
    size_t cap = o.cap_per_problem > 0 ? static_cast<size_t>(o.cap_per_problem) : pool.size();
    std::map<int, std::vector<size_t>, std::greater<>> buckets;
    for (size_t i : pool) buckets[out[i].speed_bucket].push_back(i);
    size_t taken = 0;
    for (size_t round = 0; taken < std::min(cap, pool.size()); ++round)
      for (auto& [b, members] : buckets)
        if (round < members.size() && taken < cap) {
          out[members[round]].kept = true;
          ++taken;
        }
    for (size_t i : pool)
      if (!out[i].kept) out[i].reason = "over_cap";
  }
  if (prints) *prints = std::move(fp);
  return out;
}

}  // namespace mc::rft
