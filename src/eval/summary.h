// Aggregate metrics over a run, as a table for people and a JSON object for programs.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/result.h"

namespace mc::eval {

struct Summary {
  int rows = 0;          // scored rows (infra errors excluded)
  int infra_errors = 0;  // rows that could not be judged
  double compiled = 0, correct = 0, legal = 0;        // shares of scored rows
  double fast_0 = 0, fast_1 = 0, fast_1_1 = 0, fast_2 = 0;  // correct, legal and > p x eager
  double geomean_speedup = 0;  // over correct and legal rows with a speedup (0 if none)
  double mean_reward = 0;
  std::map<std::string, int> verdicts;
  // Where judged candidates ran: "forked" (a child of the zygote) or "started" (a process
  // started from scratch, slower: the zygote was off or could not fork; judge.log says why).
  std::map<std::string, int> processes;
};

Summary summarize(const std::vector<EvalResult>& rows);
std::string format_summary(const Summary& s);
nlohmann::json summary_json(const Summary& s);

}  // namespace mc::eval
