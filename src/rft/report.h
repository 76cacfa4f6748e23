// What an RFT selection did, for people (a table) and programs (JSON): coverage (problems with
// at least one answer kept), answers per problem, the mean pairwise similarity of each
// problem's correct answers before selection and of its kept answers after, the speedup
// distribution, and why answers were dropped.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rft/selection.h"

namespace mc::rft {

struct RftReport {
  nlohmann::json json;
  std::string table;
};

// `answers`, `decisions` and `prints` are parallel (select_answers' input and outputs);
// `problems` counts every problem sampled, including those without any answer.
RftReport make_report(const std::vector<RftAnswer>& answers, const std::vector<Decision>& decisions,
                      const std::vector<CodeFingerprint>& prints, size_t problems, const SelectionOptions& o);

}  // namespace mc::rft
