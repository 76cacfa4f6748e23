// Stage 2: static legality. Reads a candidate's source (never runs it) and reports every rule
// that fires. The run-time checks in the harness back these up; neither alone is trusted.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "eval/extract.h"

namespace mc::eval {

struct Violation {
  std::string rule;     // stable id, e.g. "torch_compute", "side_stream"
  std::string message;  // what was found and how to fix it
  int line = 0;         // 1-based line in the candidate source
  std::string snippet;  // the offending line, trimmed
};

struct StaticCheckOptions {
  std::string precision = "fp32";  // fp32 | fp16 | bf16: half types are a precision drop in fp32
  std::set<std::string> allow;     // relaxations: "cublas", "cudnn", "half_precision", rule ids
};

std::vector<Violation> static_check(const std::string& code, SolutionFormat format,
                                    const StaticCheckOptions& opts = {});

// Every rule id with its one-line description (for `musacoder check --list-rules` and docs).
std::vector<std::pair<std::string, std::string>> static_rule_catalog();

}  // namespace mc::eval
