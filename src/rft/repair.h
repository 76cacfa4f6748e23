// Repair conversations for SFT, so that a policy has seen the turn `train rl` and bench-model
// show after a failed answer: the task, a failed answer, MooreEval's feedback as the next user
// turn (synth::repair_prompt, the same text), and a passing answer of the same problem. The
// failed answer is context ("weight": 0): only the repair is learned, never the mistake.
//
// Per problem, up to `per_problem` failed answers, one of each verdict first (a compile error, a
// wrong output, a crash, ...), then the rest in sample order; each is paired with the problem's
// passing answers in turn. Answers without feedback (infra errors) are never used.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mc::rft {

struct FailedAnswer {
  std::string problem, sample;   // the problem's key, the sample's id
  std::string prompt;            // the task as the policy saw it
  std::string answer;            // the whole answer, as sampled
  std::string verdict, feedback; // MooreEval's verdict and feedback text
};

struct PassingAnswer {
  std::string problem;
  std::string answer;  // the whole answer (fenced code), as the policy should write it
  std::string from;    // where it came from: "rft:<sample>" or "<dataset.jsonl>:<line>"
};

// One {"messages": [...], "problem", "failed_sample", "failed_verdict", "answer_from", "source"}
// row per repair, in the order of `failed`.
std::vector<nlohmann::json> repair_rows(const std::vector<FailedAnswer>& failed,
                                        const std::vector<PassingAnswer>& passing, int per_problem);

// The verified answers of a dataset JSONL: `musacoder synth`'s dataset.jsonl (problem key from
// level, problem_id and name) or `musacoder rft`'s (its "problem"); the answer is the last
// assistant message. Throws mc::Error naming the file and line of a row it cannot read.
std::vector<PassingAnswer> load_passing_answers(const std::string& dataset_jsonl);

}  // namespace mc::rft
