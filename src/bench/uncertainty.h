// How far a run's pass@1 could move by chance, and whether two runs on the same problems
// differ by more than that. The unit that varies is the problem (a benchmark is a sample of
// problems), so both come from the bootstrap over problems: resample the problems with
// replacement, recompute, and take the middle 95% of the results. Each problem enters as its
// judged samples n and correct ones c; pass@1 is the mean over problems of c / n (metrics.h).
// The resampling draws from a fixed seed, so a report shows the same interval every time.
//
//   pass1_interval    one run's pass@1 and its 95% interval.
//   pass1_difference  run b minus run a over the problems both scored, paired: each resample
//                     takes the same problems for both runs, so what the two share (which
//                     problems are easy) cancels out. An interval that excludes 0 is a
//                     difference the problem sample alone would rarely produce.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace mc::bench {

using ProblemCounts = std::map<std::string, std::pair<int, int>>;  // problem -> (n judged, c correct)

struct Interval {
  double value = 0, lo = 0, hi = 0;
};

struct Difference {
  Interval delta;     // b - a
  int problems = 0;   // scored in both runs
  int better = 0, worse = 0;  // problems whose c / n rose / fell from a to b
};

inline constexpr int kResamples = 4000;

Interval pass1_interval(const ProblemCounts& counts, int resamples = kResamples, uint64_t seed = 1);
Difference pass1_difference(const ProblemCounts& a, const ProblemCounts& b, int resamples = kResamples,
                            uint64_t seed = 1);

}  // namespace mc::bench
