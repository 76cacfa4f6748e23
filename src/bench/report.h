// The report of a bench-model run: metrics per turn, per level and overall (bench/metrics.h),
// as report.txt (a table for people), report.md (Markdown, with the plots), report.json (for
// programs), fast_p.svg (fast_p over p per level, vs eager and vs torch.compile, as in
// KernelBench's paper) and grid.svg (each problem's samples, coloured by outcome).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_run.h"
#include "bench/metrics.h"

namespace mc::bench {

struct ReportInput {
  const BenchOptions& options;
  const std::vector<BenchProblem>& set;
  std::vector<std::vector<SampleOutcome>> by_turn;  // [turn - 1]: one outcome per (problem, sample)
  nlohmann::json baseline;   // baseline.json
  nlohmann::json timing;     // seconds, summed over invocations: baseline_s, generation_s,
                             // verification_after_generation_s, wall_s; and invocations
  std::string source;        // where the answers came from
};

// Writes the report files into the run folder and returns report.json's content and the table.
BenchResult write_report(const ReportInput& in);

}  // namespace mc::bench
