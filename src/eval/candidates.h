// Reads candidate solutions and matches them to problems. Every input item becomes exactly one
// Candidate, including the ones that cannot be matched or parsed (they carry `input_error`),
// so every candidate gets exactly one result row.
#pragma once

#include <string>
#include <vector>

#include "eval/problem.h"

namespace mc::eval {

struct Candidate {
  ProblemPtr problem;       // null when the reference did not resolve
  std::string problem_ref;  // as written in the input
  std::string sample_id = "0";
  std::string answer;       // raw text: source or a model's markdown answer
  std::string origin;       // "file.py" or "answers.jsonl:12"
  std::string input_error;  // non-empty: why this item cannot be evaluated
  // Lower is judged sooner: the compile pool and the judges take the lowest first, in arrival
  // order among equals. A trainer with two steps' answers outstanding (train rl --rollout overlapped) gives
  // each its step, so this step's last answers, which the step waits for, are not queued behind
  // the next step's. The caller's, never the answer's; not sent to a service.
  int64_t priority = 0;
};

// `path` is a folder or a .jsonl file.
//  Folder: files named by problem stem ("19_ReLU.py", "19_ReLU.cu", "19_ReLU.md") or as
//    KernelBench runs name them ("level_1_problem_19_sample_0_kernel.py"); a sub-folder named by
//    stem holds several samples ("19_ReLU/3.py" is sample 3).
//  JSONL: {"problem": "19_ReLU" | 19 | "L1/19_ReLU", "level"?: 1, "sample_id"?: ..,
//          "answer" | "solution" | "code" | "completion": "..."} per line.
std::vector<Candidate> load_candidates(const std::string& path,
                                       const std::vector<ProblemPtr>& problems);

// A single solution file for one problem (`musacoder eval --problem F --solution S`).
Candidate candidate_from_file(const std::string& path, ProblemPtr problem);

}  // namespace mc::eval
