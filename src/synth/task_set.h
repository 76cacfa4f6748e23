// The problems a policy is trained or evaluated on, each with the prompt that asks for it:
// a folder of KernelBench problems (the prompt built from the source, synth::task_prompt), or
// the problems.jsonl of `musacoder synth`, whose rows carry the prompt its SFT data used, the
// level and the difficulty (which a curriculum orders by).
#pragma once

#include <string>
#include <vector>

#include "eval/problem.h"

namespace mc::synth {

struct Task {
  eval::ProblemPtr problem;
  std::string prompt;     // the user turn that asks for a solution in `format`
  int level = 0;
  double difficulty = 0;  // synth's estimate; 0 for folder problems
};

// `format`: native | kernelbench. `level` > 0 keeps that level only. `backend`: the kernels the
// prompts ask for (cuda | musa); a synth row made for another backend is refused, since its
// prompt asks for kernels the run's judges would not build. Throws mc::Error naming a missing
// path, a malformed row, a duplicate problem, a row of another backend, or an empty set.
std::vector<Task> load_tasks(const std::string& path, const std::string& format, int level = 0,
                             const std::string& backend = "cuda");

}  // namespace mc::synth
