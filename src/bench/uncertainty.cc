#include "bench/uncertainty.h"

#include <algorithm>
#include <random>
#include <vector>

namespace mc::bench {
namespace {

// The bootstrap over the values' indices: the mean of `values` and the 2.5th and 97.5th
// percentiles of the resampled means.
Interval bootstrap_mean(const std::vector<double>& values, int resamples, uint64_t seed) {
  Interval out;
  if (values.empty()) return out;
  double sum = 0;
  for (double v : values) sum += v;
  out.value = out.lo = out.hi = sum / values.size();
  if (resamples < 2) return out;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, values.size() - 1);
  std::vector<double> means(resamples);
  for (double& m : means) {
    double s = 0;
    for (size_t i = 0; i < values.size(); ++i) s += values[pick(rng)];
    m = s / values.size();
  }
  std::sort(means.begin(), means.end());
  auto at = [&](double q) { return means[static_cast<size_t>(q * (resamples - 1) + 0.5)]; };
  out.lo = at(0.025);
  out.hi = at(0.975);
  return out;
}

double rate(const std::pair<int, int>& nc) { return static_cast<double>(nc.second) / nc.first; }

}  // namespace

Interval pass1_interval(const ProblemCounts& counts, int resamples, uint64_t seed) {
  std::vector<double> v;
  for (const auto& [key, nc] : counts)
    if (nc.first > 0) v.push_back(rate(nc));
  return bootstrap_mean(v, resamples, seed);
}

Difference pass1_difference(const ProblemCounts& a, const ProblemCounts& b, int resamples, uint64_t seed) {
  Difference d;
  std::vector<double> v;
  for (const auto& [key, na] : a) {
    auto it = b.find(key);
    if (na.first <= 0 || it == b.end() || it->second.first <= 0) continue;
    double x = rate(it->second) - rate(na);
    v.push_back(x);
    d.better += x > 0;
    d.worse += x < 0;
  }
  d.problems = static_cast<int>(v.size());
  d.delta = bootstrap_mean(v, resamples, seed);
  return d;
}

}  // namespace mc::bench
